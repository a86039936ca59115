import torch


class CtxMgr:
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        pass


def fn(x):
    with CtxMgr():
        print("inside", x.shape)
    return x + 1


cfn = torch.compile(fn)
for _ in range(2):
    cfn(torch.randn(3))
