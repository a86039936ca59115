"""A small decoder-only transformer language model, compiled for generation-time scoring.

Written for casekit's reduction benchmark: the kind of model file a newcomer
brings, with comments and docstrings, a config dataclass, pre-norm blocks with
rotary attention and a padding-aware attention mask. The graph break sits three
calls below the compiled model: model -> block -> attention -> the mask helper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DecoderConfig:
    """Sizes of the model; small enough to run on a CPU in a second."""

    vocab_size: int = 96
    dim: int = 32
    n_layers: int = 3
    n_heads: int = 4
    hidden: int = 64
    max_seq_len: int = 32
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    pad_id: int = 0
    dropout: float = 0.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (no mean subtraction, no bias)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # computed in float32 for stability, cast back to the input's dtype
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).type_as(x) * self.weight


def rotary_tables(head_dim: int, seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine and sine tables for rotary position embeddings."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(seq_len).float(), inv_freq)
    return freqs.cos(), freqs.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of channels by the position's angle."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    cos, sin = cos[None, None], sin[None, None]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def padding_mask(scores: torch.Tensor, input_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mask the keys that are padding, and the future, in the attention scores."""
    seq = scores.shape[-1]
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    # BUG: nonzero() has an output shape that depends on the data: Dynamo breaks the graph here
    padded = (input_ids == pad_id).nonzero()
    keep = causal[None, None].expand(scores.shape).clone()
    keep[padded[:, 0], :, :, padded[:, 1]] = False
    return scores.masked_fill(~keep, float("-inf"))


class Attention(nn.Module):
    """Multi-head self-attention with rotary positions."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.head_dim = config.head_dim
        self.pad_id = config.pad_id
        self.qkv = nn.Linear(config.dim, 3 * config.dim, bias=False)
        self.out = nn.Linear(config.dim, config.dim, bias=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.n_heads, self.head_dim).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q = apply_rotary(q, cos[:seq], sin[:seq])
        k = apply_rotary(k, cos[:seq], sin[:seq])
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = padding_mask(scores, input_ids, self.pad_id)  # padded keys never attended to
        weights = self.dropout(F.softmax(scores, dim=-1).nan_to_num())
        return self.out((weights @ v).transpose(1, 2).reshape(batch, seq, dim))


class FeedForward(nn.Module):
    """SwiGLU feed-forward."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """Pre-norm transformer block: attention, then feed-forward, each with a residual."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.dim, config.norm_eps)
        self.attn = Attention(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.ffn = FeedForward(config.dim, config.hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, input_ids)
        return x + self.ffn(self.ffn_norm(x))


class DecoderLM(nn.Module):
    """Token embedding, a stack of blocks, a final norm and a tied output head."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim, padding_idx=config.pad_id)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)
        self.head.weight = self.embed.weight  # tied embeddings
        cos, sin = rotary_tables(config.head_dim, config.max_seq_len, config.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, self.cos, self.sin, input_ids)
        return self.head(self.norm(x))

    def num_parameters(self) -> int:
        """Parameters, the tied head counted once."""
        return sum(p.numel() for p in self.parameters())


def pad_batch(sequences: list[list[int]], pad_id: int) -> torch.Tensor:
    """Right-pad token lists to one length."""
    longest = max(len(s) for s in sequences)
    return torch.tensor([s + [pad_id] * (longest - len(s)) for s in sequences])


def score(model: nn.Module, input_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mean log-likelihood of each sequence's next tokens, padding excluded."""
    logits = model(input_ids)
    logp = F.log_softmax(logits[:, :-1], dim=-1)
    targets = input_ids[:, 1:]
    picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    real = (targets != pad_id).float()
    return (picked * real).sum(-1) / real.sum(-1).clamp(min=1)


def main() -> None:
    torch.manual_seed(0)
    config = DecoderConfig()
    model = DecoderLM(config).eval()
    print("parameters:", model.num_parameters())
    compiled = torch.compile(model, backend="eager")  # eager: the break is Dynamo's, not inductor's
    batches = [[[5, 9, 12, 7], [3, 4]], [[8, 8, 2], [11, 6, 1, 14, 2]]]
    with torch.no_grad():
        for step, sequences in enumerate(batches):
            input_ids = pad_batch(sequences, config.pad_id)
            scores = score(compiled, input_ids, config.pad_id)
            print(f"batch {step}: mean log-likelihood {scores.mean().item():.3f}")


if __name__ == "__main__":
    main()
