from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvSubsample(nn.Module):
    def __init__(self, n_mels: int, dim: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(n_mels, dim, kernel, padding=kernel // 2)
        self.norm = nn.LayerNorm(dim)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.conv(features.transpose(1, 2))).transpose(1, 2))


class MaskedSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        batch, frames, dim = x.shape
        q, k, v = self.qkv(x).view(batch, frames, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        valid = torch.arange(frames)[None, :] < lengths[:, None]
        scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, frames, dim))


class LengthPooling(nn.Module):
    """Mean over each utterance's own frames (padding left out)."""

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        pooled = []
        for row, length in zip(x, lengths.tolist(), strict=True):
            pooled.append(row[:length].mean(0))
        return torch.stack(pooled)


class FeedForward(nn.Module):
    def __init__(self, dim: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Dropout(dropout), nn.Linear(dim * 2, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
