from __future__ import annotations

import torch
import torch.nn as nn

from speech.config import ModelConfig
from speech.layers import ConvSubsample, FeedForward, LengthPooling, MaskedSelfAttention


class EncoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.dim)
        self.attn = MaskedSelfAttention(config.dim, config.heads)
        self.norm2 = nn.LayerNorm(config.dim)
        self.ff = FeedForward(config.dim, config.dropout)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), lengths)
        return x + self.ff(self.norm2(x))


class SpeechEncoder(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.subsample = ConvSubsample(config.features.n_mels, config.dim, config.conv_kernel)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))
        self.ctc_head = nn.Linear(config.dim, config.vocab)
        self.pool = LengthPooling()
        self.speaker_head = nn.Linear(config.dim, 8)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.subsample(features)
        for layer in self.layers:
            x = layer(x, lengths)
        return self.ctc_head(x).log_softmax(-1), self.speaker_head(self.pool(x, lengths))


def greedy_decode(log_probs: torch.Tensor, lengths: torch.Tensor, blank: int = 0) -> list[list[int]]:
    best = log_probs.argmax(-1)
    decoded = []
    for row, length in zip(best.tolist(), lengths.tolist(), strict=True):
        out, previous = [], blank
        for token in row[:length]:
            if token != previous and token != blank:
                out.append(token)
            previous = token
        decoded.append(out)
    return decoded
