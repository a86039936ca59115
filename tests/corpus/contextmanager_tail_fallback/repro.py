import contextlib

import torch


@contextlib.contextmanager
def autocast_off():
    yield


@torch.compile(backend="eager")
def fn(x):
    y = x.sin()
    with autocast_off():
        y = y.cos()
    return y + 1


for _ in range(2):
    fn(torch.randn(3))
