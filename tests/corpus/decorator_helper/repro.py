import functools
import time

import torch


def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        start = time.time()
        out = fn(*args)
        return out, start

    return wrapper


@timed
def scale(x):
    return x * 2


@torch.compile
def forward(x):
    y, _ = scale(x)
    return y + 1


for _ in range(2):
    forward(torch.randn(3))
