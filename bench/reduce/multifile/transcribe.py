"""Run a small speech encoder over synthetic utterances, compiled (the model is in speech/)."""

from __future__ import annotations

import random
import time

import torch
from speech.config import RunConfig
from speech.data import synthetic_batch
from speech.model import SpeechEncoder, greedy_decode


def main() -> None:
    config = RunConfig()
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    model = SpeechEncoder(config.model).eval()
    print(config.model.describe())
    compiled = torch.compile(model)
    with torch.no_grad():
        for step in range(config.steps):
            mels, lengths, _ = synthetic_batch(config, rng)
            started = time.perf_counter()
            log_probs, speakers = compiled(mels, lengths)
            hypotheses = greedy_decode(log_probs, lengths)
            print(
                f"step {step}: {time.perf_counter() - started:.3f} s, speakers {speakers.argmax(-1).tolist()}, {hypotheses[0][:5]}"
            )


if __name__ == "__main__":
    main()
