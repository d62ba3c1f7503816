"""Writes tiny T5s as Hugging Face saves them, and what Hugging Face's own
T5ForConditionalGeneration computes on them, for sluice's --init test of
T5 (an encoder and a decoder with cross-attention, relative-position
biases of 8 buckets up to distance 20, unscaled scores, RMSNorm with
epsilon 1e-6, a ReLU MLP without biases, the tied head reading its input
scaled by 1/sqrt(d_model)).

Made with transformers and torch from PyPI (CPU; versions in
expected.json):
  python3 gen.py    (in this folder)
writes corpus.txt (a text of numbered lines), model.safetensors and
config.json (heads of d_model / num_heads), wide/model.safetensors and
wide/config.json (heads of 12 over a d_model of 32, as T5-3B's 128 over
1024), v11/model.safetensors and v11/config.json (T5 1.1's kind, as
Flan-T5's: a GeGLU MLP, "gated-gelu" of GELU's tanh form, and a head of
its own, reading its input unscaled), and expected.json: for each model, the loss and the gradient's
global norm (the shared table counted once) of the first step's two rows
of 24 encoder and 16 decoder bytes that `sluice exec --seed 1337 --data
corpus.txt` reads (the windows exec/corpus.c picks, replicated below:
the encoder reads a window's first 24 bytes, the decoder predicts the next
16 from token 0 and the targets before each), each row's alone and the
two as one batch; and the buckets Hugging Face gives relative offsets
-600..600 for 32 buckets up to 128 (T5's) and 8 up to 20, in both
directions' rules.
"""
import json
import os

import torch
from transformers import T5Config, T5ForConditionalGeneration

TE, TD = 24, 16
SEED = 1337
M64 = (1 << 64) - 1

with open("corpus.txt", "w") as f:
    for i in range(120):
        f.write("%04d Everyone is permitted to copy and distribute verbatim "
                "copies of this license document.\n" % (i * 7919 % 10000))
CORPUS = open("corpus.txt", "rb").read()


def mix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def window(index, b):
    """exec/corpus.c exec_corpus_rows: row b of batch `index`, split 0."""
    W = TE + TD
    bs = max(4 * (W + 1), 1024)
    nblocks = len(CORPUS) // bs
    n_train = sum(1 for k in range(nblocks) if k % 10 != 9)
    h = mix64(SEED ^ mix64((0 * 0x100000001) ^ mix64(
        (index * 1315423911 + b) & M64)))
    k = h % n_train
    blk = k + k // 9
    start = blk * bs + (h >> 32) % (bs - W)
    return list(CORPUS[start:start + W])


def make(folder, d_kv, seed, v11=False):
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=256, d_model=32, d_kv=d_kv, d_ff=64,
                   num_layers=2, num_decoder_layers=2, num_heads=4,
                   relative_attention_num_buckets=8,
                   relative_attention_max_distance=20, dropout_rate=0.0,
                   layer_norm_epsilon=1e-6,
                   feed_forward_proj="gated-gelu" if v11 else "relu",
                   tie_word_embeddings=not v11, decoder_start_token_id=0,
                   pad_token_id=0, eos_token_id=1)
    model = T5ForConditionalGeneration(cfg).float().eval()
    # norms away from 1 so that a misplaced tensor shows
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
    os.makedirs(folder, exist_ok=True)
    if v11:
        # T5 1.1's head is its own (the hub's Flan-T5 files hold
        # lm_head.weight); transformers 5 ties it whatever the config
        # says, and reads tie_word_embeddings false as "do not scale":
        # untied here, saved as those files are
        model.lm_head.weight = torch.nn.Parameter(
            torch.randn(256, 32) * 32 ** -0.5)
        from safetensors.torch import save_file
        sd = {k: v.detach().contiguous()
              for k, v in model.state_dict().items()
              if not k.endswith("embed_tokens.weight")}
        save_file(sd, os.path.join(folder, "model.safetensors"),
                  metadata={"format": "pt"})
        c = model.config.to_dict()
        c["tie_word_embeddings"] = False
        c.pop("scale_decoder_outputs", None)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(c, f, indent=2, sort_keys=True)
    else:
        model.save_pretrained(folder, safe_serialization=True)
    gc = os.path.join(folder, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    res = {}
    for rows, key in (([0], "row0"), ([1], "row1"), ([0, 1], "both")):
        wins = [window(0, b) for b in rows]
        ids = [w[:TE] for w in wins]
        labels = [w[TE:] for w in wins]
        model.zero_grad()
        out = model(input_ids=torch.tensor(ids),
                    labels=torch.tensor(labels))
        out.loss.backward()
        seen, sq = set(), 0.0
        for p in model.parameters():
            if id(p) in seen or p.grad is None:
                continue
            seen.add(id(p))
            sq += float((p.grad.double() ** 2).sum())
        res[key] = {"input_ids": ids, "labels": labels,
                    "loss": out.loss.item(), "grad_norm": sq ** 0.5}
    return res


exp = {"seed": SEED, "enc_len": TE, "dec_len": TD,
       "tiny": make(".", 8, 23), "wide": make("wide", 12, 29),
       "v11": make("v11", 8, 31, v11=True)}
rel = list(range(-600, 601))
from transformers.models.t5.modeling_t5 import T5Attention
for nb, md in ((32, 128), (8, 20)):
    for bi in (True, False):
        b = T5Attention._relative_position_bucket(
            torch.tensor(rel), bidirectional=bi, num_buckets=nb,
            max_distance=md)
        exp["buckets_%d_%d_%s" % (nb, md, "bi" if bi else "causal")] = \
            [int(x) for x in b]
exp["transformers"] = __import__("transformers").__version__
exp["torch"] = torch.__version__.split("+")[0]
with open("expected.json", "w") as f:
    json.dump(exp, f, indent=1)
