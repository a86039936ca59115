import time

import torch


class Stamp:
    def __init__(self, x):
        self.x = x
        self.at = time.time()


@torch.compile
def stamped(x):
    s = Stamp(x)
    return s.x * 2


for _ in range(2):
    stamped(torch.randn(3))
