import os

import torch


@torch.compile
def f(x):
    if x.sum() > 0:
        return x * 2
    return x


f(torch.ones(2))
os._exit(3)
