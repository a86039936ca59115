import torch


@torch.compile
def fn(x):
    scale = x.sum().item()
    return x * scale + 1


x = torch.tensor([1.0, 2.0, 4.0])
for _ in range(2):
    fn(x)
