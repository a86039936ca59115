"""Evaluate a small BigBird classifier on synthetic documents, compiled.

Written for casekit's reduction benchmark: the kind of evaluation script a team
writes around a transformers model (a toy tokenizer, a dataset, batching,
metrics, a results table). The model is built from a tiny random config: no
download (HF_HUB_OFFLINE=1). The graph break is inside transformers.
"""

from __future__ import annotations

import collections
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn as nn
from transformers import BigBirdConfig, BigBirdModel

VOCAB = ["<pad>", "<cls>", "<sep>", "<unk>"] + [f"w{i}" for i in range(96)]
LABELS = ["negative", "neutral", "positive"]


@dataclass
class EvalSettings:
    batch_size: int = 4
    seq_len: int = 16
    documents: int = 8
    hidden: int = 32
    layers: int = 1
    heads: int = 2
    intermediate: int = 64
    seed: int = 0
    report_every: int = 1


class ToyTokenizer:
    """Whitespace tokens to ids, with <cls> first, <sep> last and <pad> to a fixed length."""

    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab
        self.index = {word: i for i, word in enumerate(vocab)}

    def encode(self, text: str, length: int) -> list[int]:
        ids = [self.index["<cls>"]]
        ids += [self.index.get(word, self.index["<unk>"]) for word in text.split()]
        ids = ids[: length - 1] + [self.index["<sep>"]]
        return ids + [self.index["<pad>"]] * (length - len(ids))

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.vocab[i] for i in ids if i > 2)


def synthetic_documents(count: int, rng: random.Random) -> list[tuple[str, int]]:
    documents = []
    for _ in range(count):
        words = [f"w{rng.randrange(96)}" for _ in range(rng.randrange(5, 14))]
        label = sum(int(word[1:]) for word in words) % len(LABELS)
        documents.append((" ".join(words), label))
    return documents


def batches(documents, tokenizer: ToyTokenizer, settings: EvalSettings):
    for start in range(0, len(documents), settings.batch_size):
        chunk = documents[start : start + settings.batch_size]
        ids = torch.tensor([tokenizer.encode(text, settings.seq_len) for text, _ in chunk])
        labels = torch.tensor([label for _, label in chunk])
        yield ids, labels


class Classifier(nn.Module):
    """BigBird encoder, mean-pooled over non-padding tokens, then a linear head."""

    def __init__(self, settings: EvalSettings) -> None:
        super().__init__()
        config = BigBirdConfig(
            vocab_size=len(VOCAB),
            hidden_size=settings.hidden,
            num_hidden_layers=settings.layers,
            num_attention_heads=settings.heads,
            intermediate_size=settings.intermediate,
            max_position_embeddings=64,
        )
        self.encoder = BigBirdModel(config)
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(settings.hidden, len(LABELS))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = (input_ids != 0).float()
        hidden = self.encoder(input_ids, attention_mask=mask).last_hidden_state
        pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1.0)
        return self.head(self.dropout(pooled))


class Metrics:
    def __init__(self, classes: int) -> None:
        self.confusion = [[0] * classes for _ in range(classes)]
        self.losses: list[float] = []

    def update(self, logits: torch.Tensor, labels: torch.Tensor, loss: torch.Tensor) -> None:
        for predicted, actual in zip(logits.argmax(-1).tolist(), labels.tolist(), strict=True):
            self.confusion[actual][predicted] += 1
        self.losses.append(float(loss))

    def accuracy(self) -> float:
        total = sum(sum(row) for row in self.confusion)
        return sum(self.confusion[i][i] for i in range(len(self.confusion))) / max(total, 1)

    def macro_f1(self) -> float:
        scores = []
        for k in range(len(self.confusion)):
            tp = self.confusion[k][k]
            fp = sum(self.confusion[i][k] for i in range(len(self.confusion))) - tp
            fn = sum(self.confusion[k]) - tp
            precision = tp / (tp + fp) if tp + fp else 0.0
            recall = tp / (tp + fn) if tp + fn else 0.0
            scores.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
        return sum(scores) / len(scores)

    def summary(self) -> dict[str, float]:
        mean_loss = sum(self.losses) / max(len(self.losses), 1)
        return {"accuracy": self.accuracy(), "macro_f1": self.macro_f1(), "loss": mean_loss, "ppl": math.exp(mean_loss)}


def label_histogram(documents) -> dict[str, int]:
    counts = collections.Counter(LABELS[label] for _, label in documents)
    return {name: counts.get(name, 0) for name in LABELS}


def evaluate(settings: EvalSettings) -> dict[str, object]:
    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    tokenizer = ToyTokenizer(VOCAB)
    documents = synthetic_documents(settings.documents, rng)
    model = Classifier(settings).eval()
    compiled = torch.compile(model)
    loss_fn = nn.CrossEntropyLoss()
    metrics = Metrics(len(LABELS))
    started = time.perf_counter()
    with torch.no_grad():
        for step, (ids, labels) in enumerate(batches(documents, tokenizer, settings)):
            logits = compiled(ids)
            loss = loss_fn(logits, labels)
            metrics.update(logits, labels, loss)
            if step % settings.report_every == 0:
                print(f"batch {step}: loss {float(loss):.4f} first doc {tokenizer.decode(ids[0].tolist())[:30]!r}")
    return {
        "settings": asdict(settings),
        "labels": label_histogram(documents),
        "metrics": metrics.summary(),
        "seconds": round(time.perf_counter() - started, 3),
    }


if __name__ == "__main__":
    results = evaluate(EvalSettings())
    print(json.dumps(results, indent=1, sort_keys=True))
