"""Pre-fix: a data-dependent branch on `.item()` inside a compiled step."""

import torch


def step(x, w):
    y = x @ w
    peak = y.abs().max().item()  # pulls a value back to Python: graph break
    if peak > 1.0:
        y = y / peak
    return torch.relu(y)


compiled_step = torch.compile(step)

torch.manual_seed(0)
w = torch.randn(8, 8)
for _ in range(3):
    x = torch.randn(4, 8)
    out = compiled_step(x, w)
print(out.shape)
