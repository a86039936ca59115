"""Post-fix: the reporting helper is explicitly left to eager with torch.compiler.disable.

One deliberate, documented break at the call site replaces the breaks Dynamo hit
while trying to trace the bookkeeping itself.
"""

import torch

METRICS = {"act_mean": [], "act_max": []}


@torch.compiler.disable
def report_metrics(y):
    METRICS["act_mean"].append(float(y.mean()))
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
