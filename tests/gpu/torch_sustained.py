#!/usr/bin/env python3
"""Whether a GPU keeps its speed under a training step's sustained load.

usage: torch_sustained.py [OUT.json] [SECONDS] [HIDDEN HEADS MICROBATCH]

Runs an MPT block's forward and backward in bf16 (PyTorch, flash
attention, sequence 2048; default hidden 4096, 32 heads, microbatch 6, a
7B model's layer) back to back for SECONDS (default 60), timing every step
with CUDA events while nvidia-smi samples the SM clock, power and
temperature each second. Prints the step time over the first 5 seconds
and over the last 10, and the clocks seen; the JSON has every second's
mean. Burst measurements (torch_ops.py, gemm_rate) run for a few seconds
at most: this says how far a long run drops from them.
"""
import json
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else None
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    h, heads, b = (int(x) for x in sys.argv[3:6]) if len(sys.argv) > 5 \
        else (4096, 32, 6)
    seq, dt, dev = 2048, torch.bfloat16, "cuda"
    d = h // heads
    mods = [torch.nn.LayerNorm(h, device=dev, dtype=dt),
            torch.nn.Linear(h, 3 * h, device=dev, dtype=dt),
            torch.nn.Linear(h, h, device=dev, dtype=dt),
            torch.nn.LayerNorm(h, device=dev, dtype=dt),
            torch.nn.Linear(h, 4 * h, device=dev, dtype=dt),
            torch.nn.Linear(4 * h, h, device=dev, dtype=dt)]
    ln1, qkv, proj, ln2, up, down = mods
    x = torch.randn(b, seq, h, device=dev, dtype=dt, requires_grad=True)

    def step():
        z = qkv(ln1(x)).view(b, seq, 3, heads, d)
        q, k, v = (z[:, :, i].transpose(1, 2) for i in range(3))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = x + proj(o.transpose(1, 2).reshape(b, seq, h))
        y = a + down(F.gelu(up(ln2(a))))
        y.backward(torch.ones_like(y))

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    smi = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
         "--format=csv,noheader,nounits", "-lms", "1000"],
        stdout=subprocess.PIPE, text=True)
    steps = []  # (seconds since start, ms)
    t0 = time.time()
    while time.time() - t0 < secs:
        a, e = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record()
        step()
        e.record()
        e.synchronize()
        steps.append((time.time() - t0, a.elapsed_time(e)))
    smi.terminate()
    samples = []
    for line in smi.communicate()[0].splitlines():
        try:
            samples.append([float(v) for v in line.split(",")])
        except ValueError:
            pass

    def mean(lo, hi):
        v = [ms for t, ms in steps if lo <= t < hi]
        return sum(v) / len(v) if v else float("nan")

    first, last = mean(0, 5), mean(secs - 10, secs + 1)
    per_s = [mean(s, s + 1) for s in range(int(secs))]
    res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "hidden": h, "heads": heads, "mbs": b, "seconds": secs,
           "steps": len(steps), "first_5s_ms": first, "last_10s_ms": last,
           "per_second_ms": per_s, "smi_clock_power_temp": samples}
    clocks = [s[0] for s in samples]
    print(f"{res['gpu']}: block h {h} x microbatch {b}, {len(steps)} steps in "
          f"{secs:.0f} s: {first:.2f} ms a step over the first 5 s, "
          f"{last:.2f} over the last 10 ({last / first:.3f}x); SM clock "
          f"{min(clocks, default=0):.0f}-{max(clocks, default=0):.0f} MHz, "
          f"power up to {max((s[1] for s in samples), default=0):.0f} W, "
          f"up to {max((s[2] for s in samples), default=0):.0f} C")
    if out:
        with open(out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
