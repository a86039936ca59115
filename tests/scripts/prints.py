import torch

print("this script prints to stdout; capture must not read it as results")


@torch.compile
def f(x):
    print("inside forward")
    return x * 2


for _ in range(2):
    print(f(torch.ones(3)))
