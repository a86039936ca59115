import torch


@torch.compile
def aligned(x):
    p = x.data_ptr()
    if (p % 16) == 0:
        return x * 2
    return x + 1


for _ in range(2):
    aligned(torch.randn(8))
