import logging

import torch

log = logging.getLogger("repro")


@torch.compile
def fn(x):
    a = x.sum()
    log.debug(f"a : {a=}")
    return x * 2


for _ in range(2):
    fn(torch.randn(4))
