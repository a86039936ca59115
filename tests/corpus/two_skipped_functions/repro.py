import time
from datetime import datetime

import torch


@torch.compile
def fn(x):
    t0 = time.time()
    x = x * 2
    stamp = datetime.now()
    return x + 1, t0, stamp


for _ in range(2):
    fn(torch.randn(3))
