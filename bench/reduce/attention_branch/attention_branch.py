"""A vision transformer with sparse attention that falls back to dense when it is not sparse enough.

Written for casekit's reduction benchmark: patch embedding, multi-head
attention with a top-k sparsification, an MLP, a classification head, and a
data-dependent branch (the fallback decided on a tensor's value).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ViTConfig:
    image_size: int = 16
    patch_size: int = 4
    channels: int = 3
    dim: int = 32
    depth: int = 2
    heads: int = 4
    mlp_ratio: float = 2.0
    classes: int = 10
    keep_ratio: float = 0.5
    sparsity_floor: float = 0.25
    dropout: float = 0.0

    @property
    def patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class PatchEmbed(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.proj = nn.Conv2d(config.channels, config.dim, config.patch_size, stride=config.patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, config.dim))
        self.pos = nn.Parameter(torch.randn(1, config.patches + 1, config.dim) * 0.02)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.proj(images).flatten(2).transpose(1, 2)
        cls = self.cls.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos


class SparseAttention(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.head_dim = config.dim // config.heads
        self.qkv = nn.Linear(config.dim, 3 * config.dim)
        self.out = nn.Linear(config.dim, config.dim)
        self.keep_ratio = config.keep_ratio
        self.sparsity_floor = config.sparsity_floor
        self.drop = nn.Dropout(config.dropout)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        return x.view(batch, tokens, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = self.split(q), self.split(k), self.split(v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        keep = max(1, int(tokens * self.keep_ratio))
        threshold = scores.topk(keep, dim=-1).values[..., -1:]
        sparse = scores.masked_fill(scores < threshold, float("-inf"))
        # when most of the mass is outside the kept entries, sparse attention is a poor estimate
        kept_mass = (F.softmax(scores, dim=-1) * (scores >= threshold)).sum(-1).mean()
        if kept_mass < self.sparsity_floor:
            weights = F.softmax(scores, dim=-1)
        else:
            weights = F.softmax(sparse, dim=-1)
        mixed = self.drop(weights) @ v
        return self.out(mixed.transpose(1, 2).reshape(batch, tokens, dim))


class MLP(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        hidden = int(config.dim * config.mlp_ratio)
        self.fc1 = nn.Linear(config.dim, hidden)
        self.fc2 = nn.Linear(hidden, config.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class EncoderBlock(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.dim)
        self.attn = SparseAttention(config)
        self.norm2 = nn.LayerNorm(config.dim)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.embed = PatchEmbed(config)
        self.blocks = nn.Sequential(*(EncoderBlock(config) for _ in range(config.depth)))
        self.norm = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, config.classes)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.trunc_normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.embed(images))
        return self.head(self.norm(x)[:, 0])


def random_images(batch: int, config: ViTConfig, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.rand(batch, config.channels, config.image_size, config.image_size, generator=generator)
    labels = torch.randint(0, config.classes, (batch,), generator=generator)
    return images * 2 - 1, labels


def top_k_accuracy(logits: torch.Tensor, labels: torch.Tensor, k: int) -> float:
    top = logits.topk(k, dim=-1).indices
    return (top == labels[:, None]).any(-1).float().mean().item()


def describe(model: nn.Module) -> str:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return f"{type(model).__name__}: {total} parameters ({trainable} trainable)"


def main() -> None:
    torch.manual_seed(0)
    config = ViTConfig()
    model = VisionTransformer(config).eval()
    print(describe(model))
    compiled = torch.compile(model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for step in range(2):
            images, labels = random_images(4, config, generator)
            logits = compiled(images)
            top1, top3 = top_k_accuracy(logits, labels, 1), top_k_accuracy(logits, labels, 3)
            print(f"step {step}: top1 {top1:.2f} top3 {top3:.2f} logits {tuple(logits.shape)}")


if __name__ == "__main__":
    main()
