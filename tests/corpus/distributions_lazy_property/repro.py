import torch


@torch.compile
def entropy(logits):
    d = torch.distributions.Categorical(logits=logits)
    return d.entropy()


for _ in range(2):
    entropy(torch.randn(4, 3))
