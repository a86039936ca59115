from __future__ import annotations

import random

import torch

from speech.config import RunConfig
from speech.features import frames_for, log_mel, mel_filterbank, seconds_to_samples


def synthetic_batch(config: RunConfig, rng: random.Random) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    features = config.model.features
    bank = mel_filterbank(features)
    samples = [
        seconds_to_samples(rng.uniform(config.min_seconds, config.max_seconds), features) for _ in range(config.batch)
    ]
    longest = max(samples)
    waves = torch.zeros(config.batch, longest)
    for i, count in enumerate(samples):
        t = torch.arange(count) / features.sample_rate
        waves[i, :count] = torch.sin(2 * torch.pi * rng.uniform(100, 900) * t)
    mels = log_mel(waves, features, bank)
    lengths = torch.tensor([frames_for(count, features) for count in samples])
    targets = torch.randint(1, config.model.vocab, (config.batch, 5))
    return mels, lengths, targets
