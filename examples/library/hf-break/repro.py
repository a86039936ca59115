"""Pre-fix: a tiny, randomly initialised BigBird (transformers) compiled whole.

Short inputs cannot use block-sparse attention, so BigBirdModel.forward logs a
warning (logger.warning) and switches itself to full attention. Dynamo cannot
trace a logging.Logger call: the graph breaks inside transformers, below the
`compiled_model(input_ids)` line of this script. No download: the model is
built from a config (HF_HUB_OFFLINE=1).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import BigBirdConfig, BigBirdModel

config = BigBirdConfig(
    vocab_size=100,
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)
torch.manual_seed(0)
model = BigBirdModel(config).eval()
compiled_model = torch.compile(model)

input_ids = torch.randint(0, config.vocab_size, (2, 16))
with torch.no_grad():
    for _ in range(3):
        out = compiled_model(input_ids).last_hidden_state
print(out.shape)
