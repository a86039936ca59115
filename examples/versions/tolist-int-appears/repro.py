"""Pre-fix: per-column counts read back with .tolist() on an integer tensor."""

import torch


def weigh(x):
    counts = (x > 0).sum(dim=0).tolist()  # integer tensor -> Python ints
    return x * counts[0] - counts[-1]


compiled_weigh = torch.compile(weigh)

torch.manual_seed(0)
for _ in range(3):
    out = compiled_weigh(torch.randn(6, 4))
print(out.shape)
