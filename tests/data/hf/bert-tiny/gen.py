"""Writes a tiny BERT as Hugging Face saves it, and what Hugging Face's own
BertForPreTraining computes on it, for sluice's --init test of BERT's
encoder (token, position and type embeddings and their LayerNorm,
post-LayerNorm layers attending to every token, GELU's erf form, the
pooler, the masked-LM head with its transform and the tied decoder's
bias; LayerNorm's epsilon 1e-12).

Made with transformers and torch from PyPI (CPU; versions in
expected.json):
  python3 gen.py    (in this folder)
writes model.safetensors (BertForPreTraining.save_pretrained), the same
with the LayerNorm names of the Hub's older BERT files
(model-gamma.safetensors), config.json, and expected.json: 32 input ids
(the first 32 bytes of the text with every fifth position from 2 on
replaced by the mask token, 256, as sluice masks), the sentence-pair
token types sluice gives a sequence (its first half 0, its second 1),
the labels (the bytes at the
masked positions, -1 elsewhere: Hugging Face's -100), the mean masked-LM
loss over them and two rows of logits, in float32.
"""
import json
import os

import torch
from transformers import BertConfig, BertForPreTraining

TEXT = b"Everyone is permitted to copy and distribute verbatim copies of th"
T = 32

torch.manual_seed(17)
cfg = BertConfig(vocab_size=257, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=64,
                 hidden_act="gelu", hidden_dropout_prob=0.0,
                 attention_probs_dropout_prob=0.0,
                 max_position_embeddings=64, type_vocab_size=2,
                 layer_norm_eps=1e-12, tie_word_embeddings=True,
                 pad_token_id=0)
model = BertForPreTraining(cfg).float().eval()
# Weights large enough that every head and position matters, biases and
# norms away from 0 and 1 so that a misplaced tensor shows.
with torch.no_grad():
    for name, p in model.named_parameters():
        if "LayerNorm" in name and name.endswith("weight"):
            p.copy_(1 + 0.2 * torch.randn_like(p))
        else:
            p.copy_(0.15 * torch.randn_like(p))
model.save_pretrained(".", safe_serialization=True)
if os.path.exists("generation_config.json"):
    os.remove("generation_config.json")
ids = list(TEXT[:T])
labels = [-100] * T
for t in range(2, T, 5):
    labels[t] = ids[t]
    ids[t] = 256
types = [0] * (T // 2) + [1] * (T - T // 2)
with torch.no_grad():
    out = model(input_ids=torch.tensor([ids]),
                token_type_ids=torch.tensor([types]),
                attention_mask=torch.ones(1, T, dtype=torch.long))
    logits = out.prediction_logits[0]
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(labels),
                                             ignore_index=-100)
# The same tensors named as the Hub's bert-base-uncased and
# bert-large-uncased name them (converted from Google's checkpoints): a
# LayerNorm's weight and bias are gamma and beta.
from safetensors.torch import load_file, save_file
old = {k.replace("LayerNorm.weight", "LayerNorm.gamma")
        .replace("LayerNorm.bias", "LayerNorm.beta"): v
       for k, v in load_file("model.safetensors").items()}
save_file(old, "model-gamma.safetensors", metadata={"format": "pt"})
with open("expected.json", "w") as f:
    json.dump({"text": TEXT[:T].decode(), "input_ids": ids,
               "token_type_ids": types,
               "labels": [x if x >= 0 else -1 for x in labels],
               "mlm_loss": float(loss),
               "logits_first_row": [float(x) for x in logits[0][:8]],
               "logits_last_row": [float(x) for x in logits[T - 1][:8]],
               "transformers": __import__("transformers").__version__,
               "torch": torch.__version__.split("+")[0]}, f, indent=1)
