import torch

torch.compiler.set_stance("default")


@torch.compile
def fn(x):
    scale = x.sum().item()
    return x * scale


for _ in range(2):
    fn(torch.randn(4))
