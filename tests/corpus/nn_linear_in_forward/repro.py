import torch


@torch.compile
def project(x):
    layer = torch.nn.Linear(4, 2)
    return layer(x)


for _ in range(2):
    project(torch.randn(3, 4))
