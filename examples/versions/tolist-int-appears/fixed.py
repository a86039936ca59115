"""Post-fix: keep the counts as a tensor and index it; nothing leaves the graph."""

import torch


def weigh(x):
    counts = (x > 0).sum(dim=0)
    return x * counts[0] - counts[-1]


compiled_weigh = torch.compile(weigh)

torch.manual_seed(0)
for _ in range(3):
    out = compiled_weigh(torch.randn(6, 4))
print(out.shape)
