import torch


def chunks(x):
    for c in x.split(2):
        yield c * c.sum().item()


@torch.compile
def pooled(x):
    return torch.stack(list(chunks(x)))


for _ in range(2):
    pooled(torch.randn(4))
