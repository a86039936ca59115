import sys

import torch


class MyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(5, 5)
        self.dropout = torch.nn.Dropout()

    def _init_attention_seed(self):
        self.attention_seed = int(torch.seed() % sys.maxsize)
        torch.manual_seed(self.attention_seed)

    def forward(self, x):
        self._init_attention_seed()
        return self.dropout(self.linear(x))


m = torch.compile(MyModel())
for _ in range(2):
    m(torch.randn(2, 5))
