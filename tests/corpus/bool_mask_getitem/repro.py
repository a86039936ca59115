import torch


def func(v, t):
    a = {"str": v}

    def inner(mask):
        for k, val in a.items():
            a[k] = val[mask]

    inner(t < 1)
    return a["str"] * 2


cfunc = torch.compile(func)
for _ in range(2):
    cfunc(torch.rand([2, 2, 3]), torch.tensor([0, 1], dtype=torch.int64))
