import torch


def fn(x):
    x = torch.sin(x)
    torch._dynamo.graph_break()
    return torch.cos(x)


def gn(x):
    return fn(x) + 1


compiled_fn = torch.compile(fn, backend="eager")
compiled_gn = torch.compile(gn, backend="eager")

x = torch.randn(4)
for _ in range(2):
    compiled_fn(x)
    compiled_gn(x)
