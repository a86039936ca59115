# Needs transformers 4.47.1 (no download: a tiny randomly initialised BERT).
import torch
from transformers import BertConfig, BertLMHeadModel

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
config.loss_type = "Bogus"
model = BertLMHeadModel(config)


@torch.compile(backend="eager")
def step(hidden, labels):
    logits = model.cls(hidden)
    loss = model.loss_function(logits, labels, 64)
    return loss * 2


hidden = torch.randn(2, 8, 16)
labels = torch.randint(0, 64, (2, 8))
for _ in range(2):
    print(step(hidden, labels))
