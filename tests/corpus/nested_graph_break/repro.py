import torch


def h(x):
    x = x + 1
    torch._dynamo.graph_break()
    x = x + 1
    return x


def g(x):
    x = x + 1
    x = h(x)
    return x + 1


def f(x):
    x = x + 1
    x = g(x)
    return x + 1


opt_f = torch.compile(f)
for _ in range(2):
    opt_f(torch.randn(3, 3))
