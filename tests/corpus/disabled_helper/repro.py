import torch


@torch._dynamo.disable
def f(x, y):
    return x + y


def forward(x, y):
    z = f(x, y)
    return z * 2


fn_compiled = torch.compile(forward)
for _ in range(2):
    fn_compiled(torch.randn(3), torch.randn(3))
