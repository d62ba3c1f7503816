#!/usr/bin/env python3
"""Sets tests/gpu/torch_ops.py's measurements beside sluice's cost model.

usage: torch_ops_compare.py RESULT.json GPU [SLUICE]

For each shape the JSON holds, asks `sluice sim --ops` (SLUICE, default
bin/sluice) for the same ops on the profile GPU (a one-layer MPT-style
GPT in bf16 at the shape's microbatch, the loss unfused as torch_ops.py
runs it) and prints each op's measured and predicted forward and
backward (input and weight gradients together) in ms, then per op role
the measured time over sluice's across the shapes (above 1: sluice is
fast), the whole block's against sluice's layer, and AdamW's rate. Needs
no GPU.
"""
import json
import os
import subprocess
import sys
import tempfile


def predict(sluice, gpu, seq, vocab, shape, tmp):
    h, heads, b = shape["hidden"], shape["heads"], shape["mbs"]
    spec = {"name": f"mpt-h{h}", "family": "gpt", "hidden": h, "layers": 1,
            "heads": heads, "ffn": 4 * h, "vocab": vocab, "seq_len": seq,
            "max_pos": seq, "tied_embeddings": True, "bias": True,
            "dropout": False, "flash_attn": True, "fused_loss": False,
            "dtype": "bf16", "source": "tests/gpu/torch_ops_compare.py"}
    path = os.path.join(tmp, f"mpt-h{h}.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    r = subprocess.run([sluice, "sim", "--hw", f"{gpu}", "x1", "--model",
                        path, "--schedule", "1f1b", "--pp", "1", "--mbs",
                        str(b), "--microbatches", "1", "--ops", "--json"],
                       capture_output=True, text=True)
    if r.returncode not in (0, 1):  # 1: answered, over the GPU's memory
        sys.exit(f"sluice sim failed: {r.stderr}")
    ops = {}
    for o in json.loads(r.stdout)["ops"]:
        name = o["op"].replace("l0.", "")
        ops[name] = (o["fwd_s"] * 1e3, (o["bwd_in_s"] + o["bwd_w_s"]) * 1e3)
    return ops


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    try:
        with open(sys.argv[1]) as f:
            d = json.load(f)
        for k in ("gpu", "torch", "seq", "vocab", "shapes",
                  "copy_gb_per_s", "gemm_8192_tflops"):
            d[k]
    except (OSError, ValueError, KeyError) as err:
        sys.exit(f"torch_ops_compare.py: {sys.argv[1]}: not a result of "
                 f"torch_ops.py ({err})")
    gpu = sys.argv[2]
    sluice = sys.argv[3] if len(sys.argv) > 3 else "bin/sluice"
    print(f"{d['gpu']}, PyTorch {d['torch']}, against sluice's {gpu}: copy "
          f"{d['copy_gb_per_s']:.0f} GB/s, bf16 GEMM 8192^3 "
          f"{d['gemm_8192_tflops']:.0f} TFLOP/s")
    roles = {}
    with tempfile.TemporaryDirectory() as tmp:
        for sh in d["shapes"]:
            pred = predict(sluice, gpu, d["seq"], d["vocab"], sh, tmp)
            print(f"\nhidden {sh['hidden']}, microbatch {sh['mbs']}: "
                  f"ms       measured F    B+W   sluice F    B+W")
            lm = ls = 0.0
            for r in sh["ops"]:
                variant = r["role"] == "attn_variant"  # another kernel
                pf, pb = pred["attn.core" if variant else r["op"]]
                mf, mb = r["fwd_ms"], r["bwd_ms"]
                print(f"  {r['op']:14s} {mf:15.3f} {mb:7.3f} {pf:9.3f} "
                      f"{pb:7.3f}")
                roles.setdefault(r["op"] if variant else r["role"],
                                 []).append((mf + mb) / (pf + pb))
                if not r["op"].startswith("head.") and not variant:
                    k = 2 if r["role"] in ("norm", "residual") else 1
                    lm += k * (mf + mb)
                    ls += k * (pf + pb)
            bl = sh["block"]["fwd_ms"] + sh["block"]["bwd_ms"]
            print(f"  block {bl:.2f} ms measured, its ops alone {lm:.2f}, "
                  f"sluice's layer {ls:.2f}: {bl / ls:.2f}x")
            roles.setdefault("block", []).append(bl / ls)
            a = sh["adamw"]
            # sluice prices AdamW as 28 bytes a parameter at the
            # streaming rate (sim_opt_model_ns)
            many = (f", multi-tensor "
                    f"{28 * a['params'] / a['foreach_ms'] / 1e6:.0f}"
                    if "foreach_ms" in a else "")
            print(f"  AdamW in fp32, fused "
                  f"{28 * a['params'] / a['ms'] / 1e6:.0f}{many} GB/s at 28 "
                  f"bytes a parameter; the copy {d['copy_gb_per_s']:.0f} "
                  f"GB/s")
    print("\nmeasured over sluice's time, fwd + bwd, by role (one value a "
          "shape; attn.core.KERNEL: PyTorch's attention kernels, .full "
          "without the causal mask, against sluice's fused core):")
    for k, v in roles.items():
        print(f"  {k:26s} {min(v):5.2f} .. {max(v):5.2f}")


if __name__ == "__main__":
    main()
