"""Post-fix: a masked formulation with a fixed shape (torch.where instead of selecting)."""

import torch


def positive_energy(x):
    picked = torch.where(x > 0, x, torch.zeros_like(x))  # zeros add nothing to the sum
    return (picked * picked).sum() / x.numel()


compiled = torch.compile(positive_energy)

torch.manual_seed(0)
for _ in range(3):
    out = compiled(torch.randn(16, 16))
print(out)
