import contextlib

import torch


@contextlib.contextmanager
def g(x):
    try:
        yield x.sin()
    finally:
        pass


@torch.compile
def fn(x):
    with g(x) as y:
        z = y + 1
    return z


for _ in range(2):
    fn(torch.randn(2, 3))
