import torch


@torch.compile(backend="eager")
def scale(x, factor):
    y = torch.sin(x) * factor
    print("scaled")
    return y + factor


x = torch.randn(8)
for factor in (0.5, 1.5, 2.5, 3.5):
    scale(x, factor)
