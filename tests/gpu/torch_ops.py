#!/usr/bin/env python3
"""Times a GPT layer's ops as PyTorch runs them in bf16 on one GPU.

The ops of an MPT block (LLM Foundry's GPT-3-style layer: LayerNorm, fused
QKV, causal flash attention, output projection, residual, 4h GELU MLP),
the LM head and its cross-entropy, and one AdamW step (fused, and multi-tensor), each timed
alone, forward and backward (the backward's input and weight gradients
together), with CUDA events, at the hidden sizes and microbatches of the
validation's MPT rows (sequence 2048). Also the whole block forward and
backward, a plain copy (the streaming rate) and a square GEMM.

Writes JSON (argv[1], default stdout): the GPU's name, PyTorch's version,
and per shape a list of {op, role, fwd_ms, bwd_ms}. `sluice profile show
MODEL --ops --hw GPU --mbs N` prints sluice's time for the same ops, so
the two can be set side by side. Needs PyTorch with CUDA; not part of
`make test`.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

SEQ = 2048
VOCAB = 50368
# (hidden, heads, microbatch): validation/llmfoundry-mpt-fsdp-h100-sxm.csv
SHAPES = [(1536, 12, 24), (2048, 16, 20), (2560, 20, 8), (4096, 32, 6),
          (5120, 40, 2), (7168, 56, 8), (8192, 64, 8)]
# SLUICE_TORCH_SHAPES="768:12:32,1024:16:32" times others
if os.environ.get("SLUICE_TORCH_SHAPES"):
    SHAPES = [tuple(int(v) for v in t.split(":"))
              for t in os.environ["SLUICE_TORCH_SHAPES"].split(",")]
DT = torch.bfloat16


def timed(fn, min_ms=150.0, max_reps=50):
    """Mean ms of fn() over enough calls to pass min_ms, after warming."""
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(True), torch.cuda.Event(True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    one = max(a.elapsed_time(b), 1e-3)
    reps = int(max(3, min(max_reps, min_ms / one)))
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def fwd_bwd(f, inputs, params):
    """Forward and backward ms of y = f(*inputs): the backward computes
    every input's and parameter's gradient (no accumulation)."""
    with torch.no_grad():
        fwd = timed(lambda: f(*inputs))
    y = f(*inputs)
    g = torch.randn_like(y) if y.dim() else torch.ones_like(y)
    wrt = [t for t in inputs if t.requires_grad] + list(params)
    bwd = timed(lambda: torch.autograd.grad(y, wrt, g, retain_graph=True))
    del y, g
    return fwd, bwd


def flash_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_with(backend, causal):
    """SDPA through one of PyTorch's kernels (None where it has not it)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = getattr(SDPBackend, backend, None)
    if be is None:
        return None

    def f(q, k, v):
        with sdpa_kernel([be]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return f


def layer_ops(h, heads, b):
    dev = "cuda"
    d = h // heads
    x = torch.randn(b, SEQ, h, device=dev, dtype=DT, requires_grad=True)
    ln = torch.nn.LayerNorm(h, device=dev, dtype=DT)
    qkv = torch.nn.Linear(h, 3 * h, device=dev, dtype=DT)
    out = torch.nn.Linear(h, h, device=dev, dtype=DT)
    up = torch.nn.Linear(h, 4 * h, device=dev, dtype=DT)
    down = torch.nn.Linear(4 * h, h, device=dev, dtype=DT)
    rows = []

    def add(op, role, f, inputs, params):
        fw, bw = fwd_bwd(f, inputs, params)
        rows.append({"op": op, "role": role, "fwd_ms": fw, "bwd_ms": bw})

    add("attn.norm", "norm", ln, [x], ln.parameters())
    add("attn.qkv", "qkv", qkv, [x], qkv.parameters())
    # q, k, v as the block makes them: views of the QKV output
    t = torch.randn(b, SEQ, 3, heads, d, device=dev, dtype=DT,
                    requires_grad=True)
    qs, ks, vs = (t[:, :, i].transpose(1, 2) for i in range(3))
    add("attn.core", "attn_fused", lambda: flash_sdpa(qs, ks, vs), [], [t])
    # the same core through each of PyTorch's attention kernels, and
    # without the causal mask (flash skips the masked half's tiles)
    for be in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
        for causal in (True, False):
            f = sdpa_with(be, causal)
            if f is None:
                continue
            try:
                add(f"attn.core.{be.split('_')[0].lower()}"
                    f"{'' if causal else '.full'}", "attn_variant",
                    lambda f=f: f(qs, ks, vs), [], [t])
            except RuntimeError as err:  # not for these shapes
                print(f"{be} causal={causal}: {err}"[:160], file=sys.stderr)
    add("attn.out", "attn_out", out, [x], out.parameters())
    r = torch.randn_like(x, requires_grad=True)
    add("attn.res", "residual", lambda a, c: a + c, [x, r], [])
    add("mlp.up", "mlp_up", up, [x], up.parameters())
    u = torch.randn(b, SEQ, 4 * h, device=dev, dtype=DT, requires_grad=True)
    add("mlp.act", "mlp_act", lambda a: F.gelu(a), [u], [])
    add("mlp.down", "mlp_down", down, [u], down.parameters())
    del u, t, r

    ln2 = torch.nn.LayerNorm(h, device=dev, dtype=DT)

    def block(a):
        y = ln(a)
        z = qkv(y).view(b, SEQ, 3, heads, d)
        q, k, v = (z[:, :, i].transpose(1, 2) for i in range(3))
        o = flash_sdpa(q, k, v).transpose(1, 2).reshape(b, SEQ, h)
        a = a + out(o)
        return a + down(F.gelu(up(ln2(a))))

    params = [p for m in (ln, qkv, out, ln2, up, down) for p in m.parameters()]
    fw, bw = fwd_bwd(block, [x], params)
    whole = {"fwd_ms": fw, "bwd_ms": bw}

    head = torch.nn.Linear(h, VOCAB, bias=False, device=dev, dtype=DT)
    add("head.lm_head", "lm_head", head, [x], head.parameters())
    logits = torch.randn(b * SEQ, VOCAB, device=dev, dtype=DT,
                         requires_grad=True)
    tgt = torch.randint(0, VOCAB, (b * SEQ,), device=dev)
    # autocast computes the loss in fp32, as LLM Foundry's runs did
    add("head.loss", "loss", lambda a: F.cross_entropy(a.float(), tgt),
        [logits], [])
    del logits, head, x

    # one AdamW step over a layer's parameters in fp32 (FSDP's
    # sharded master copy); ms for the 12 h^2 + 13 h parameters
    n = 12 * h * h + 13 * h
    p = torch.zeros(n, device=dev, dtype=torch.float32, requires_grad=True)
    p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    adam = timed(opt.step)
    # the multi-tensor step (PyTorch's default; fused is asked for)
    opt = torch.optim.AdamW([p], lr=1e-4, foreach=True)
    adam_foreach = timed(opt.step)
    del p, opt
    torch.cuda.empty_cache()
    return rows, whole, {"params": n, "ms": adam, "foreach_ms": adam_foreach}


def main():
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "seq": SEQ, "vocab": VOCAB, "shapes": []}
    a = torch.empty(1 << 29, device="cuda", dtype=torch.uint8)
    c = torch.empty_like(a)
    ms = timed(lambda: c.copy_(a))
    out["copy_gb_per_s"] = 2 * a.numel() / ms / 1e6
    del a, c
    m = torch.randn(8192, 8192, device="cuda", dtype=DT)
    ms = timed(lambda: m @ m)
    out["gemm_8192_tflops"] = 2 * 8192 ** 3 / ms / 1e9
    del m
    print(f"{out['gpu']}, torch {out['torch']}: copy "
          f"{out['copy_gb_per_s']:.0f} GB/s, bf16 GEMM 8192^3 "
          f"{out['gemm_8192_tflops']:.0f} TFLOP/s", file=sys.stderr)
    for h, heads, b in SHAPES:
        rows, whole, adam = layer_ops(h, heads, b)
        out["shapes"].append({"hidden": h, "heads": heads, "mbs": b,
                              "ops": rows, "block": whole, "adamw": adam})
        s = sum(r["fwd_ms"] + r["bwd_ms"] for r in rows
                if not r["op"].startswith("head."))
        s += sum(r["fwd_ms"] + r["bwd_ms"] for r in rows
                 if r["role"] in ("norm", "residual"))  # the second ones
        s -= sum(r["fwd_ms"] + r["bwd_ms"] for r in rows
                 if r["role"] == "attn_variant")
        print(f"h {h} mbs {b}: block {whole['fwd_ms']:.2f} + "
              f"{whole['bwd_ms']:.2f} ms (ops alone {s:.2f}); AdamW "
              f"{adam['ms'] / adam['params'] * 1e6:.3f} ns/param",
              file=sys.stderr)
        for r in rows:
            print(f"   {r['op']:13s} {r['fwd_ms']:8.3f} {r['bwd_ms']:8.3f}",
                  file=sys.stderr)
    text = json.dumps(out, indent=1)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
