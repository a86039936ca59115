"""Pre-fix: logger.info in the middle of a compiled function."""

import logging
import sys

import torch

logger = logging.getLogger("casekit.example.model")
logger.setLevel(logging.INFO)
logger.addHandler(logging.StreamHandler(sys.stdout))
logger.propagate = False


def forward(x, w):
    h = torch.relu(x @ w)
    logger.info("hidden norm %.4f", h.norm())  # logging call: graph break
    return h.softmax(dim=-1)


compiled_forward = torch.compile(forward)

torch.manual_seed(0)
w = torch.randn(8, 4)
for _ in range(3):
    out = compiled_forward(torch.randn(2, 8), w)
print(out.shape)
