import contextlib
import time

import torch


@contextlib.contextmanager
def span(name):
    start = time.perf_counter()
    yield
    print(name, time.perf_counter() - start)


@torch.compile
def forward(x):
    y = x.sin()
    with span("forward"):
        y = y.cos()
    return y + 1


for _ in range(2):
    forward(torch.randn(3))
