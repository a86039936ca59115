"""Pre-fix: boolean-mask indexing / nonzero, whose output size depends on the data."""

import torch


def positive_energy(x):
    idx = torch.nonzero(x > 0, as_tuple=True)  # data-dependent output shape: graph break
    picked = x[idx]
    return (picked * picked).sum() / x.numel()


compiled = torch.compile(positive_energy)

torch.manual_seed(0)
for _ in range(3):
    out = compiled(torch.randn(16, 16))
print(out)
