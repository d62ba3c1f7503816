#!/usr/bin/env python3
"""The memory PyTorch's cross-entropy takes beyond what it keeps.

usage: torch_loss_mem.py [TOKENS VOCAB]

Logits (TOKENS x VOCAB, default 16384 x 50368) in bf16 and fp32, as an LM
head leaves them; the loss under autocast's rule (the logits cast to
fp32) and on fp32 logits. Prints, in bytes per logit: the forward's peak
above the logits, what stays allocated after it (the saved
log-probabilities), and the backward's peak above that (the logits'
gradient included). sluice's unfused loss op keeps 4 bytes a logit and
takes 4 + e bytes beyond that in its forward (the logits, e bytes, and
their fp32 copy) and 8 bytes at its backward's peak (the NLL's gradient
and the input's fp32 gradient).
"""
import sys

import torch
import torch.nn.functional as F


def main():
    n_tok = int(sys.argv[1]) if len(sys.argv) > 2 else 16384
    vocab = int(sys.argv[2]) if len(sys.argv) > 2 else 50368
    n = n_tok * vocab
    tgt = torch.randint(0, vocab, (n_tok,), device="cuda")
    for dt in (torch.bfloat16, torch.float32):
        logits = torch.randn(n_tok, vocab, device="cuda", dtype=dt,
                             requires_grad=True)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss = F.cross_entropy(logits.float(), tgt)
        torch.cuda.synchronize()
        fwd_peak = torch.cuda.max_memory_allocated() - base
        kept = torch.cuda.memory_allocated() - base
        base2 = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        bwd_peak = torch.cuda.max_memory_allocated() - base2
        grad = torch.cuda.memory_allocated() - base2
        e = logits.element_size()
        print(f"{torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}, "
              f"{n_tok} x {vocab} logits in {str(dt)[6:]}: forward peak "
              f"{fwd_peak / n:.2f} B/logit above the logits ({e} B), kept "
              f"{kept / n:.2f}; backward peak {bwd_peak / n:.2f} above that, "
              f"after it {grad / n:.2f} (the logits' gradient)")
        del logits, loss
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
