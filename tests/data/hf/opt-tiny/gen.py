"""Writes a tiny OPT as Hugging Face saves it, and what Hugging Face's own
OPTForCausalLM computes on it, for sluice's --init test of OPT's decoder
(learned positions from row 2 of the table, LayerNorm before each block,
ReLU, biases, the head tied to the token table).

Made with transformers and torch from PyPI (CPU; versions in
expected.json):
  python3 gen.py    (in this folder)
writes model.safetensors (OPTForCausalLM.save_pretrained), config.json,
and expected.json: the mean next-token loss on the first 33 bytes of the
text in expected.json (32 positions), in float32.
"""
import json
import os

import torch
from transformers import OPTConfig, OPTForCausalLM

TEXT = b"Everyone is permitted to copy and distribute verbatim copies of th"

torch.manual_seed(13)
cfg = OPTConfig(vocab_size=256, hidden_size=32, ffn_dim=64,
                num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64, word_embed_proj_dim=32,
                do_layer_norm_before=True, activation_function="relu",
                enable_bias=True, tie_word_embeddings=True, dropout=0.0,
                attention_dropout=0.0, pad_token_id=1, bos_token_id=2,
                eos_token_id=2)
model = OPTForCausalLM(cfg).float().eval()
# Weights large enough that every head and position matters, biases and
# norms away from 0 and 1 so that a misplaced tensor shows.
with torch.no_grad():
    for name, p in model.named_parameters():
        if "layer_norm" in name and name.endswith("weight"):
            p.copy_(1 + 0.2 * torch.randn_like(p))
        else:
            p.copy_(0.15 * torch.randn_like(p))
model.save_pretrained(".", safe_serialization=True)
if os.path.exists("generation_config.json"):
    os.remove("generation_config.json")
tokens = torch.tensor([list(TEXT[:33])])
with torch.no_grad():
    logits = model(tokens[:, :32]).logits[0]
    lp = torch.log_softmax(logits, dim=-1)
    nll = -lp[torch.arange(32), tokens[0, 1:33]]
with open("expected.json", "w") as f:
    json.dump({"text": TEXT[:33].decode(), "loss_32": float(nll.mean()),
               "logits_first_row": [float(x) for x in logits[0][:8]],
               "logits_last_row": [float(x) for x in logits[31][:8]],
               "transformers": __import__("transformers").__version__,
               "torch": torch.__version__.split("+")[0]}, f, indent=1)
