import random

import torch


@torch.compile
def fn(x):
    return x + random.random()


for _ in range(2):
    fn(torch.ones(5, 5))
