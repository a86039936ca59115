from __future__ import annotations

import math

import torch

from speech.config import FeatureConfig


def mel_filterbank(config: FeatureConfig) -> torch.Tensor:
    bins = config.frame // 2 + 1
    centers = torch.linspace(0, bins - 1, config.n_mels + 2)
    grid = torch.arange(bins, dtype=torch.float32)
    filters = []
    for i in range(1, config.n_mels + 1):
        left, center, right = centers[i - 1], centers[i], centers[i + 1]
        rise = (grid - left) / (center - left)
        fall = (right - grid) / (right - center)
        filters.append(torch.clamp(torch.minimum(rise, fall), min=0.0))
    return torch.stack(filters)


def log_mel(waveform: torch.Tensor, config: FeatureConfig, bank: torch.Tensor) -> torch.Tensor:
    window = torch.hann_window(config.frame)
    frames = waveform.unfold(-1, config.frame, config.hop) * window
    power = torch.fft.rfft(frames).abs() ** 2
    return torch.log(power @ bank.T + 1e-6)


def frames_for(samples: int, config: FeatureConfig) -> int:
    return max(0, 1 + (samples - config.frame) // config.hop)


def seconds_to_samples(seconds: float, config: FeatureConfig) -> int:
    return int(math.ceil(seconds * config.sample_rate))
