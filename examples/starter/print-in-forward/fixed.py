"""Post-fix: the print runs only when not compiling (eager debugging keeps it)."""

import torch


def forward(x):
    h = torch.tanh(x @ x.T)
    if not torch.compiler.is_compiling():  # constant False while Dynamo traces
        print("h shape is:", h.shape)
    return torch.relu(h).sum(dim=0)


compiled_forward = torch.compile(forward)

torch.manual_seed(0)
for _ in range(3):
    out = compiled_forward(torch.randn(5, 3))
print(out.shape)
