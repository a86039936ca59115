from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FeatureConfig:
    sample_rate: int = 8000
    n_mels: int = 16
    frame: int = 64
    hop: int = 32


@dataclass
class ModelConfig:
    features: FeatureConfig = field(default_factory=FeatureConfig)
    dim: int = 32
    conv_kernel: int = 3
    layers: int = 2
    heads: int = 4
    vocab: int = 30
    dropout: float = 0.0
    max_frames: int = 64

    def describe(self) -> str:
        return f"{self.layers} layers of {self.dim}, {self.heads} heads, vocab {self.vocab}"


@dataclass
class RunConfig:
    batch: int = 3
    min_seconds: float = 0.05
    max_seconds: float = 0.12
    seed: int = 0
    steps: int = 2
    model: ModelConfig = field(default_factory=ModelConfig)
