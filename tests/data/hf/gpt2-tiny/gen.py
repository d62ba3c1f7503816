"""Writes a tiny GPT-2 as Hugging Face saves it, and what Hugging Face's
own GPT2LMHeadModel computes on it, for sluice's --init test.

Made with transformers 5.23.0 and torch 2.15.0 from PyPI (CPU):
  python3 gen.py    (in this folder)
writes model.safetensors (GPT2LMHeadModel.save_pretrained, safetensors
format), config.json, and expected.json: the mean next-token loss on the
first 64 bytes of the text in expected.json, in float32.
The sizes match tests/data/exec/gpt2-tiny.json (sluice's spec for it).
"""
import json

import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(7)
cfg = GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=2,
                 n_head=4, n_inner=None, activation_function="gelu_new",
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                 layer_norm_epsilon=1e-5, tie_word_embeddings=True)
model = GPT2LMHeadModel(cfg).float().eval()
# Random biases and norms too, so a transposed or misplaced tensor shows.
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("bias") or ".ln_" in name or name.startswith("transformer.ln_f"):
            p.add_(0.05 * torch.randn_like(p))
model.save_pretrained(".", safe_serialization=True)
import os
if os.path.exists("generation_config.json"):
    os.remove("generation_config.json")

text = b"Everyone is permitted to copy and distribute verbatim copies of th"
tokens = torch.tensor([list(text[:33])])
with torch.no_grad():
    out = model(tokens[:, :32], labels=tokens[:, :32])
    logits = out.logits[0]
    # Hugging Face shifts labels inside: loss over positions 0..30
    # predicting 1..31. sluice's trainer predicts token t+1 at position t
    # for all 32 positions, so give both: HF's loss, and the 32-position
    # loss computed here from the same logits.
    lp = torch.log_softmax(logits, dim=-1)
    nll = -lp[torch.arange(32), tokens[0, 1:33]]
json.dump({"text": text[:33].decode(), "hf_loss_31": float(out.loss),
           "loss_32": float(nll.mean()),
           "logits_first_row": [float(x) for x in logits[0][:8]],
           "transformers": __import__("transformers").__version__,
           "torch": torch.__version__.split("+")[0]},
          open("expected.json", "w"), indent=1)

# The same weights stored as float16 and bfloat16 (the loader widens them).
from safetensors.torch import save_file
sd = {k: v.contiguous() for k, v in model.state_dict().items()
      if "attn.bias" not in k or "c_attn" in k}
save_file({"transformer." + k if not k.startswith(("transformer.", "lm_head")) else k: v.half()
           for k, v in sd.items()}, "model-f16.safetensors")
save_file({"transformer." + k if not k.startswith(("transformer.", "lm_head")) else k: v.bfloat16()
           for k, v in sd.items()}, "model-bf16.safetensors")
