"""Pre-fix: leaving torch for Python lists / NumPy in the middle of a compiled function."""

import numpy as np
import torch


def score(x):
    rows = x.sum(dim=1).tolist()  # tensor -> Python list: graph break
    total = sum(r * r for r in rows)
    clipped = np.clip(x.numpy(), -1.0, 1.0)  # tensor -> ndarray -> tensor round trip
    return torch.from_numpy(clipped) * total


compiled_score = torch.compile(score)

torch.manual_seed(0)
for _ in range(3):
    out = compiled_score(torch.randn(4, 3))
print(out.shape)
