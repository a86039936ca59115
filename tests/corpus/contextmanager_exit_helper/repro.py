import contextlib

import torch


@contextlib.contextmanager
def tagged(name):
    yield
    print("done", name)


@torch.compile
def forward(x):
    y = x.sin()
    with tagged("forward"):
        y = y.cos()
    return y + 1


for _ in range(2):
    forward(torch.randn(3))
