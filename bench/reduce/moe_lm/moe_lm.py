"""A small decoder-only language model with mixture-of-experts feed-forward layers.

Written for casekit's reduction benchmark: a realistic model file of the kind a
team compiles, with rotary attention, a top-k router with a load-balancing loss,
capacity-limited expert dispatch and a data-dependent branch in the router.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    vocab_size: int = 128
    dim: int = 32
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    n_experts: int = 4
    top_k: int = 2
    expert_hidden: int = 48
    capacity_factor: float = 1.25
    max_seq_len: int = 64
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    aux_loss_weight: float = 0.01
    router_jitter: float = 0.0
    tie_embeddings: bool = True
    dropout: float = 0.0
    layer_types: list[str] = field(default_factory=lambda: ["dense", "moe"])

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight


def rotary_tables(head_dim: int, seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    positions = torch.arange(seq_len).float()
    freqs = torch.outer(positions, inv_freq)
    return freqs.cos(), freqs.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., ::2], x[..., 1::2]
    cos = cos[None, :, None, :]
    sin = sin[None, :, None, :]
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.n_kv_heads = config.n_kv_heads
        self.head_dim = config.head_dim
        self.q_proj = nn.Linear(config.dim, config.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(config.n_heads * self.head_dim, config.dim, bias=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        q = apply_rotary(q, cos[:seq], sin[:seq])
        k = apply_rotary(k, cos[:seq], sin[:seq])
        repeat = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(repeat, dim=2)
        v = v.repeat_interleave(repeat, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(mask[:seq, :seq] == 0, float("-inf"))
        weights = self.dropout(F.softmax(scores, dim=-1))
        out = (weights @ v).transpose(1, 2).reshape(batch, seq, -1)
        return self.o_proj(out)


class Expert(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Router(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.top_k = config.top_k
        self.n_experts = config.n_experts
        self.jitter = config.router_jitter
        self.proj = nn.Linear(config.dim, config.n_experts, bias=False)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.training and self.jitter > 0:
            tokens = tokens * torch.empty_like(tokens).uniform_(1 - self.jitter, 1 + self.jitter)
        logits = self.proj(tokens)
        probs = F.softmax(logits, dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        # load balancing: fraction of tokens per expert times mean router probability
        one_hot = F.one_hot(experts[:, 0], self.n_experts).float()
        aux_loss = (one_hot.mean(0) * probs.mean(0)).sum() * self.n_experts
        return weights.to(tokens.dtype), experts, aux_loss


class MoEFeedForward(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.router = Router(config)
        self.experts = nn.ModuleList(Expert(config.dim, config.expert_hidden) for _ in range(config.n_experts))
        self.shared = Expert(config.dim, config.expert_hidden // 2)

    def capacity(self, n_tokens: int) -> int:
        per_expert = n_tokens * self.config.top_k / self.config.n_experts
        return max(1, int(math.ceil(per_expert * self.config.capacity_factor)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, seq, dim = x.shape
        tokens = x.reshape(-1, dim)
        weights, experts, aux_loss = self.router(tokens)
        out = torch.zeros_like(tokens)
        capacity = self.capacity(tokens.shape[0])
        counts = torch.bincount(experts.flatten(), minlength=self.config.n_experts)
        # skip experts nobody was routed to (saves the matmuls on small batches)
        for expert_id, count in enumerate(counts.tolist()):
            if count == 0:
                continue
            token_idx, slot = torch.where(experts == expert_id)
            token_idx, slot = token_idx[:capacity], slot[:capacity]
            expert_out = self.experts[expert_id](tokens[token_idx])
            out.index_add_(0, token_idx, expert_out * weights[token_idx, slot, None])
        out = out + self.shared(tokens)
        return out.view(batch, seq, dim), aux_loss


class DenseFeedForward(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.mlp = Expert(config.dim, config.expert_hidden * 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mlp(x), x.new_zeros(())


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer_type: str) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.dim, config.norm_eps)
        self.attn = Attention(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.ffn = MoEFeedForward(config) if layer_type == "moe" else DenseFeedForward(config)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask)
        ffn_out, aux_loss = self.ffn(self.ffn_norm(x))
        return x + ffn_out, aux_loss


class MoELanguageModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(Block(config, kind) for kind in config.layer_types[: config.n_layers])
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.lm_head = nn.Linear(config.dim, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        cos, sin = rotary_tables(config.head_dim, config.max_seq_len, config.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        mask = torch.tril(torch.ones(config.max_seq_len, config.max_seq_len))
        self.register_buffer("mask", mask, persistent=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, input_ids: torch.Tensor, targets: torch.Tensor | None = None):
        x = self.embed(input_ids)
        aux_total = x.new_zeros(())
        for block in self.blocks:
            x, aux = block(x, self.cos, self.sin, self.mask)
            aux_total = aux_total + aux
        logits = self.lm_head(self.norm(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        # a router that collapses onto one expert needs the balancing term; a healthy one does not
        if aux_total > 1.5:
            loss = loss + self.config.aux_loss_weight * aux_total
        return logits, loss


def count_parameters(model: nn.Module) -> dict[str, int]:
    totals: dict[str, int] = {}
    for name, parameter in model.named_parameters():
        group = name.split(".")[0]
        totals[group] = totals.get(group, 0) + parameter.numel()
    return totals


def make_batch(config: ModelConfig, batch: int, seq: int, generator: torch.Generator):
    data = torch.randint(0, config.vocab_size, (batch, seq + 1), generator=generator)
    return data[:, :-1], data[:, 1:]


def perplexity(loss: torch.Tensor) -> float:
    return float(torch.exp(loss.detach()))


def main() -> None:
    torch.manual_seed(0)
    config = ModelConfig()
    model = MoELanguageModel(config).eval()
    sizes = count_parameters(model)
    print("parameters:", sum(sizes.values()), sizes)
    generator = torch.Generator().manual_seed(1)
    compiled = torch.compile(model)
    with torch.no_grad():
        for step in range(3):
            input_ids, targets = make_batch(config, batch=4, seq=16, generator=generator)
            logits, loss = compiled(input_ids, targets)
            print(f"step {step}: loss {loss.item():.4f} ppl {perplexity(loss):.2f} logits {tuple(logits.shape)}")


if __name__ == "__main__":
    main()
