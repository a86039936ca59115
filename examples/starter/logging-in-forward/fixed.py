"""Post-fix: forward returns what is worth logging; the caller logs it, outside the graph."""

import logging
import sys

import torch

logger = logging.getLogger("casekit.example.model")
logger.setLevel(logging.INFO)
logger.addHandler(logging.StreamHandler(sys.stdout))
logger.propagate = False


def forward(x, w):
    h = torch.relu(x @ w)
    return h.softmax(dim=-1), h.norm()


compiled_forward = torch.compile(forward)

torch.manual_seed(0)
w = torch.randn(8, 4)
for _ in range(3):
    out, hidden_norm = compiled_forward(torch.randn(2, 8), w)
    logger.info("hidden norm %.4f", hidden_norm)  # same log line, after the compiled call
print(out.shape)
