import torch


def chunk_norms(x):
    norms = []
    for chunk in x.split(2):
        norms.append(chunk.norm().item())
    return norms


@torch.compile(backend="eager")
def forward(x):
    total = x.sum()
    for _ in range(2):
        norms = chunk_norms(x)
        total = total + max(norms)
    return x * total


x = torch.randn(8)
for _ in range(2):
    forward(x)
