import time

import torch


@torch.compile
def debug(x):
    start_time = time.time()
    y = x * 2
    return y, start_time


for _ in range(2):
    debug(torch.randn(4))
