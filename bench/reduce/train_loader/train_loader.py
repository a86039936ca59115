"""Train a small tabular regressor with a DataLoader, a metrics logger and a compiled model.

Written for casekit's reduction benchmark: a training script of the usual
shape. A synthetic dataset behind torch.utils.data, a logger that keeps
running averages and writes JSON lines, an optimizer with a warm-up schedule,
and a model whose forward reports an activation statistic to the logger: the
graph break (a Python float read from a tensor inside the compiled forward).
"""

from __future__ import annotations

import io
import json
import math
import time
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


@dataclass
class TrainConfig:
    features: int = 12
    hidden: int = 48
    depth: int = 3
    samples: int = 96
    batch_size: int = 16
    epochs: int = 2
    lr: float = 3e-3
    warmup: int = 4
    log_every: int = 3
    seed: int = 0


class SyntheticRegression(Dataset):
    """Noisy targets from a fixed random linear map of the features."""

    def __init__(self, config: TrainConfig) -> None:
        generator = torch.Generator().manual_seed(config.seed)
        self.x = torch.randn(config.samples, config.features, generator=generator)
        weights = torch.randn(config.features, 1, generator=generator)
        self.y = self.x @ weights + 0.1 * torch.randn(config.samples, 1, generator=generator)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


class MetricsLogger:
    """Running averages per metric; one JSON line per log call."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.stream = stream
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.started = time.monotonic()

    def observe(self, name: str, value: torch.Tensor | float) -> None:
        # a Python float for the running sum: inside a compiled forward this reads the tensor's value
        self.sums[name] += float(value)
        self.counts[name] += 1

    def average(self, name: str) -> float:
        return self.sums[name] / max(self.counts[name], 1)

    def log(self, step: int) -> None:
        record = {name: round(self.average(name), 5) for name in sorted(self.sums)}
        record.update(step=step, seconds=round(time.monotonic() - self.started, 2))
        self.stream.write(json.dumps(record) + "\n")

    def reset(self) -> None:
        self.sums.clear()
        self.counts.clear()


class ResidualMLP(nn.Module):
    """A stack of residual MLP layers with layer norm."""

    def __init__(self, config: TrainConfig, metrics: MetricsLogger) -> None:
        super().__init__()
        self.metrics = metrics
        self.inp = nn.Linear(config.features, config.hidden)
        self.layers = nn.ModuleList(nn.Linear(config.hidden, config.hidden) for _ in range(config.depth))
        self.norms = nn.ModuleList(nn.LayerNorm(config.hidden) for _ in range(config.depth))
        self.out = nn.Linear(config.hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.inp(x))
        for layer, norm in zip(self.layers, self.norms, strict=True):
            h = h + F.gelu(layer(norm(h)))
        self.metrics.observe("activation_rms", h.pow(2).mean().sqrt())
        return self.out(h)


def warmup_cosine(step: int, warmup: int, total: int) -> float:
    """Linear warm-up, then cosine decay to zero."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def evaluate(model: nn.Module, loader: DataLoader) -> float:
    """Mean squared error over a loader, without gradients."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            total += F.mse_loss(model(x), y, reduction="sum").item()
            count += len(x)
    model.train()
    return total / count


def train(config: TrainConfig) -> dict[str, float]:
    torch.manual_seed(config.seed)
    dataset = SyntheticRegression(config)
    loader = DataLoader(dataset, batch_size=config.batch_size, shuffle=True)
    stream = io.StringIO()
    metrics = MetricsLogger(stream)
    model = ResidualMLP(config, metrics)
    compiled = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    total = config.epochs * len(loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, config.warmup, total))
    step = 0
    for epoch in range(config.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(compiled(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            metrics.observe("loss", loss.detach())
            step += 1
            if step % config.log_every == 0:
                metrics.log(step)
                metrics.reset()
        print(f"epoch {epoch}: eval mse {evaluate(compiled, loader):.4f}")
    print(stream.getvalue().strip().splitlines()[-1])
    return {"steps": float(step), "eval_mse": evaluate(compiled, loader)}


if __name__ == "__main__":
    print(train(TrainConfig()))
