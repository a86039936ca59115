import torch


@torch.compile(dynamic=False)
def fn(x, n):
    if n == 0:
        try:
            torch._dynamo.graph_break()
        finally:
            pass
    return x + 1


for _ in range(2):
    fn(torch.ones(3), 0)
