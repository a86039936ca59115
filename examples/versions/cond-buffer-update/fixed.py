"""Post-fix: torch.cond, with the buffer updated in place inside the taken branch.

Runs as one graph on torch 2.5.1; later releases reject input mutation inside
torch.cond branches, so this fix stops holding.
"""

import torch


def normalize(x, running_max):
    def update(t, r):
        r.copy_(t.abs().amax())  # in-place write to an operand
        return t / r

    def keep(t, r):
        return t / r

    return torch.cond(x.abs().amax() > running_max, update, keep, (x, running_max))


compiled_normalize = torch.compile(normalize)

torch.manual_seed(0)
running_max = torch.ones(())
for scale in (1.0, 3.0, 0.5):
    out = compiled_normalize(torch.randn(4, 4) * scale, running_max)
print(out.shape, float(running_max))
