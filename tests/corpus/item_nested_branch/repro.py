import torch


def g(x, y):
    y = x.item()
    if y < 3:
        return x + 2
    return x + 3


@torch.compile
def f(x, y):
    y = y * y
    return g(x, y)


for _ in range(2):
    f(torch.tensor(4), torch.randn(4))
