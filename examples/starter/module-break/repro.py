"""Pre-fix: an nn.Module compiled with module.compile(), with a NaN guard branching in forward."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        h = torch.relu(self.up(x))
        if torch.isnan(h).any():  # data-dependent branch in the hot path: graph break
            h = torch.nan_to_num(h)
        return self.norm(x + self.down(h))


torch.manual_seed(0)
model = Block(16).eval()
model.compile()

with torch.no_grad():
    for _ in range(3):
        out = model(torch.randn(2, 5, 16))
print(out.shape)
