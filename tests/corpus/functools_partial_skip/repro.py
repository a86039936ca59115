import functools
import operator

import torch


@torch.compile
def fn(x, items):
    total = functools.reduce(operator.add, items)
    y = x * total
    torch._dynamo.graph_break()
    return y + 1


for _ in range(2):
    fn(torch.randn(3), [1, 2, 3])
