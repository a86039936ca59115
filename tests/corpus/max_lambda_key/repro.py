import torch


@torch.compile
def pick(parts, bias):
    top = max(parts, key=lambda t: float(t.mean()))
    return top + bias


parts = [torch.randn(4) for _ in range(3)]
for _ in range(2):
    pick(parts, torch.ones(4))
