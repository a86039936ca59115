import torch


@torch.compile
def best(parts):
    ranked = sorted(parts, key=lambda t: t.sum().item())
    return ranked[0] + ranked[-1]


parts = [torch.randn(3) for _ in range(3)]
for _ in range(2):
    best(parts)
