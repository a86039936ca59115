"""Post-fix: ask for full attention in the config, so forward has nothing to warn about.

Block-sparse attention needs sequences longer than
(5 + 2 * num_random_blocks) * block_size tokens (704 with the defaults); shorter
inputs fall back to full attention anyway. Choosing `attention_type=
"original_full"` up front gives the same numbers, skips the logger.warning (and
the in-forward attention switch), and compiles to one graph.
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
    attention_type="original_full",  # the fix: no block-sparse -> full switch (and warning) in forward
)
torch.manual_seed(0)
model = BigBirdModel(config).eval()
compiled_model = torch.compile(model)

input_ids = torch.randint(0, config.vocab_size, (2, 16))
with torch.no_grad():
    for _ in range(3):
        out = compiled_model(input_ids).last_hidden_state
print(out.shape)
