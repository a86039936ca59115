import torch


def off_by_a_bit(gm, example_inputs):
    # a (deliberately) wrong backend: compiled outputs drift from eager
    def run(*args):
        return [out + 1e-2 for out in gm(*args)]

    return run


@torch.compile(backend=off_by_a_bit)
def f(x):
    return x.sin() * 2


for _ in range(2):
    f(torch.ones(4))
