"""Pre-fix: metrics reporting (Python-side bookkeeping) traced inside the compiled step."""

import torch

METRICS = {"act_mean": [], "act_max": []}


def report_metrics(y):
    METRICS["act_mean"].append(float(y.mean()))  # float(tensor) reads the value: graph break
    METRICS["act_max"].append(float(y.max()))
    print(f"metric act_mean={METRICS['act_mean'][-1]:.4f} act_max={METRICS['act_max'][-1]:.4f}")


def forward(x, w):
    y = torch.relu(x @ w)
    report_metrics(y)
    return y.sum(dim=-1)


compiled_forward = torch.compile(forward)

torch.manual_seed(0)
w = torch.randn(8, 8)
for _ in range(3):
    out = compiled_forward(torch.randn(4, 8), w)
print(out.shape, len(METRICS["act_mean"]))
