import contextlib
import random

import torch


@contextlib.contextmanager
def scoped(x):
    yield x.cos()


def encode(x):
    with scoped(x) as y:
        return y * 2


def jitter(x):
    return x + random.random()


@torch.compile
def step(x):
    return jitter(encode(x))


for _ in range(2):
    step(torch.randn(3))
