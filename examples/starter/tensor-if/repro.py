"""Pre-fix: `if` on a tensor (x.sum() > 0) inside a compiled function."""

import torch


def gate(x):
    if x.sum() > 0:  # bool(tensor): data-dependent jump, graph break
        return x * 2
    return x - 1


compiled_gate = torch.compile(gate)

torch.manual_seed(0)
base = torch.randn(6, 6)
for sign in (1.0, -1.0, 1.0):
    x = base.abs() * sign  # both branches are taken
    out = compiled_gate(x)
print(out.shape)
