import torch


@torch.compile
def normed(x):
    norm = torch.nn.LayerNorm(4)
    return norm(x)


for _ in range(2):
    normed(torch.randn(3, 4))
