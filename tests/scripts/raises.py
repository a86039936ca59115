import torch


@torch.compile
def f(x):
    return x + 1


f(torch.ones(2))
raise ValueError("the repro itself is broken")
