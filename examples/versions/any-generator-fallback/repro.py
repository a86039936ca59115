"""Pre-fix: `if any(<tensor condition> for p in parts)` before concatenating parts."""

import torch


def combine(parts):
    if any(p.abs().amax() > 3.0 for p in parts):  # data-dependent branch inside any(...)
        parts = [p.clamp(-3.0, 3.0) for p in parts]
    return torch.cat(parts).sum(dim=0)


compiled_combine = torch.compile(combine)

torch.manual_seed(0)
for scale in (1.0, 4.0, 0.5):  # the clamp branch is taken only sometimes
    out = compiled_combine([torch.randn(2, 4) * scale, torch.randn(3, 4)])
print(out.shape)
