from datetime import datetime

import torch


class M(torch.nn.Module):
    def forward(self, x):
        start_time = datetime.now()
        return x + 1, start_time


m = torch.compile(M())
for _ in range(2):
    m(torch.randn(3))
