"""Post-fix: the same scope as a class with __enter__/__exit__, which Dynamo traces."""

import torch

SCOPES = []


class named_scope:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        SCOPES.append(self.name)  # a tracing/profiling hook would go here
        return self

    def __exit__(self, *exc_info):
        SCOPES.pop()
        return False


def mlp(x, w1, w2):
    with named_scope("mlp"):
        h = torch.relu(x @ w1)
        y = h @ w2
    return torch.softmax(y, dim=-1)


compiled_mlp = torch.compile(mlp)

torch.manual_seed(0)
w1, w2 = torch.randn(8, 16), torch.randn(16, 4)
for _ in range(3):
    out = compiled_mlp(torch.randn(2, 8), w1, w2)
print(out.shape)
