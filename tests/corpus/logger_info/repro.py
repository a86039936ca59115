import logging

import torch

logger = logging.getLogger("repro")


class Up(torch.nn.Module):
    def forward(self, x):
        x = x * 2
        logger.info("Forward upsample size to force interpolation output size.")
        return x + 1


m = torch.compile(Up())
for _ in range(2):
    m(torch.randn(4))
