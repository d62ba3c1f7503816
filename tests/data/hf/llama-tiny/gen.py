"""Writes tiny Llamas as Hugging Face saves them, and what Hugging Face's
own LlamaForCausalLM computes on them, for sluice's --init tests of
Llama's decoder (RoPE, RMSNorm, SwiGLU, grouped key and value heads):
this folder Llama 2's choices (RoPE base 10000, RMSNorm eps 1e-5),
../llama3-tiny Llama 3's (base 500000, eps 1e-6 as some Llama configs).

Made with transformers and torch from PyPI (CPU; versions in
expected.json):
  python3 gen.py    (in this folder)
writes into each folder model.safetensors
(LlamaForCausalLM.save_pretrained), config.json, and expected.json: the
mean next-token loss on the first 33 bytes of the text in expected.json
(32 positions), in float32.
"""
import json
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

TEXT = b"Everyone is permitted to copy and distribute verbatim copies of th"


def make(folder, seed, theta, eps):
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=48,
                      num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=eps, rope_theta=theta, hidden_act="silu",
                      tie_word_embeddings=False, attention_bias=False,
                      mlp_bias=False)
    model = LlamaForCausalLM(cfg).float().eval()
    # Weights large enough that RoPE's rotation and every head matter,
    # and norms away from 1 so that a misplaced tensor shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    model.save_pretrained(folder, safe_serialization=True)
    gc = os.path.join(folder, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    tokens = torch.tensor([list(TEXT[:33])])
    with torch.no_grad():
        logits = model(tokens[:, :32]).logits[0]
        lp = torch.log_softmax(logits, dim=-1)
        nll = -lp[torch.arange(32), tokens[0, 1:33]]
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump({"text": TEXT[:33].decode(), "loss_32": float(nll.mean()),
                   "logits_first_row": [float(x) for x in logits[0][:8]],
                   "logits_last_row": [float(x) for x in logits[31][:8]],
                   "transformers": __import__("transformers").__version__,
                   "torch": torch.__version__.split("+")[0]}, f, indent=1)


make(".", 11, 10000.0, 1e-5)
make("../llama3-tiny", 12, 500000.0, 1e-6)
