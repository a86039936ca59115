import torch


class Stats:
    def __init__(self, x):
        self.x = x

    @property
    def peak(self):
        return self.x.max().item()


@torch.compile
def normalize(x):
    s = Stats(x)
    return x / s.peak


for _ in range(2):
    normalize(torch.randn(3))
