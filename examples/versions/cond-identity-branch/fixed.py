"""Post-fix: torch.cond, with the "nothing to do" branch returning its input as is.

On torch 2.5.1 this is one graph. From later releases on, torch.cond rejects a
branch that returns (an alias of) its input, so this fix stops holding.
"""

import torch


def squash(x):
    x = torch.cond(
        x.abs().amax() > 1.0,
        lambda t: t / t.abs().amax(),
        lambda t: t,  # identity branch: aliases the operand
        (x,),
    )
    return torch.tanh(x) * 2


compiled_squash = torch.compile(squash)

torch.manual_seed(0)
for scale in (3.0, 0.1, 2.0):  # both branches are taken
    out = compiled_squash(torch.randn(4, 4) * scale)
print(out.shape)
