import torch


@torch.compile(fullgraph=True)
def f(x):
    y = x.sin()
    print("a print under fullgraph=True is an error, not a break")
    return y * 2


f(torch.ones(3))
