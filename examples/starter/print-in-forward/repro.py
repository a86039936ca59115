"""Pre-fix: a debugging print in the middle of a compiled function."""

import torch


def forward(x):
    h = torch.tanh(x @ x.T)
    print("h shape is:", h.shape)  # print is Python I/O: graph break
    return torch.relu(h).sum(dim=0)


compiled_forward = torch.compile(forward)

torch.manual_seed(0)
for _ in range(3):
    out = compiled_forward(torch.randn(5, 3))
print(out.shape)
