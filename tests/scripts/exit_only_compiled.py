"""Leaves with sys.exit(0) only when its function was compiled: the rest of the script never runs there."""

import sys

import torch

TRACED = []


def f(x):
    TRACED.append(torch.compiler.is_compiling())  # True only while Dynamo traces it
    return x + 1


print(torch.compile(f, backend="eager")(torch.ones(2)))
if any(TRACED):
    sys.exit(0)
print("the rest of the script ran")
