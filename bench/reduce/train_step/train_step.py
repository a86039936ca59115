"""A training loop for a small sequence classifier, with the step compiled, logging and metrics.

Written for casekit's reduction benchmark: an LSTM-free GRU-ish encoder, an
optimizer with warmup and cosine decay, gradient clipping, a running-metrics
tracker, and a compiled train step that records the loss for logging (the
graph break: a Python float read from a tensor inside the compiled step).
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections import deque
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("train")


@dataclass
class TrainConfig:
    vocab: int = 64
    dim: int = 32
    hidden: int = 48
    classes: int = 4
    seq_len: int = 12
    batch: int = 8
    steps: int = 3
    lr: float = 3e-3
    warmup: int = 2
    weight_decay: float = 0.01
    clip: float = 1.0
    log_every: int = 1
    history: int = 50
    tags: list[str] = field(default_factory=lambda: ["bench", "reduce"])


class GatedEncoder(nn.Module):
    def __init__(self, config: TrainConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(config.vocab, config.dim)
        self.gate = nn.Linear(config.dim, config.hidden)
        self.value = nn.Linear(config.dim, config.hidden)
        self.norm = nn.LayerNorm(config.hidden)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        gated = torch.sigmoid(self.gate(x)) * torch.tanh(self.value(x))
        return self.norm(gated.cumsum(dim=1) / torch.arange(1, x.shape[1] + 1)[None, :, None])


class SequenceClassifier(nn.Module):
    def __init__(self, config: TrainConfig) -> None:
        super().__init__()
        self.encoder = GatedEncoder(config)
        self.head = nn.Linear(config.hidden, config.classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(tokens)[:, -1])


def cosine_with_warmup(step: int, config: TrainConfig) -> float:
    if step < config.warmup:
        return (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return 0.5 * (1 + math.cos(math.pi * progress))


class RunningMetrics:
    """Loss, accuracy and throughput over the last `history` steps."""

    def __init__(self, history: int) -> None:
        self.losses: deque[float] = deque(maxlen=history)
        self.accuracies: deque[float] = deque(maxlen=history)
        self.started = time.perf_counter()
        self.samples = 0

    def update(self, loss: float, accuracy: float, samples: int) -> None:
        self.losses.append(loss)
        self.accuracies.append(accuracy)
        self.samples += samples

    def line(self) -> str:
        rate = self.samples / max(time.perf_counter() - self.started, 1e-9)
        spread = statistics.pstdev(self.losses) if len(self.losses) > 1 else 0.0
        return (
            f"loss {statistics.fmean(self.losses):.4f} (±{spread:.4f}) "
            f"acc {statistics.fmean(self.accuracies):.2f} {rate:.0f} samples/s"
        )


def synthetic_batch(config: TrainConfig, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, config.vocab, (config.batch, config.seq_len), generator=generator)
    labels = tokens.sum(dim=1) % config.classes
    return tokens, labels


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        (no_decay if parameter.ndim < 2 or "norm" in name else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.lr)


def grad_norm(model: nn.Module) -> torch.Tensor:
    norms = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return torch.stack(norms).norm() if norms else torch.zeros(())


def train_step(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor, recorded: list[float]) -> torch.Tensor:
    logits = model(tokens)
    loss = F.cross_entropy(logits, labels)
    recorded.append(loss.item())  # for the log line: a Python float read inside the compiled step
    accuracy = (logits.argmax(-1) == labels).float().mean()
    loss.backward()
    return accuracy


def train(config: TrainConfig) -> dict[str, float]:
    torch.manual_seed(0)
    model = SequenceClassifier(config)
    optimizer = build_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: cosine_with_warmup(step, config))
    step_fn = torch.compile(train_step)
    metrics = RunningMetrics(config.history)
    generator = torch.Generator().manual_seed(1)
    recorded: list[float] = []
    for step in range(config.steps):
        tokens, labels = synthetic_batch(config, generator)
        optimizer.zero_grad(set_to_none=True)
        accuracy = step_fn(model, tokens, labels, recorded)
        norm = grad_norm(model)
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip)
        optimizer.step()
        scheduler.step()
        metrics.update(recorded[-1], float(accuracy), config.batch)
        if step % config.log_every == 0:
            log.warning("step %d lr %.5f grad %.3f %s", step, scheduler.get_last_lr()[0], float(norm), metrics.line())
    return {"final_loss": recorded[-1], "steps": float(config.steps)}


if __name__ == "__main__":
    print(train(TrainConfig()))
