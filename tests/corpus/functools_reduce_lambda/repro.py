import functools

import torch


@torch.compile
def total(xs):
    return functools.reduce(lambda a, b: a + b.sum().item(), xs, 0.0)


for _ in range(2):
    total([torch.randn(3), torch.randn(3)])
