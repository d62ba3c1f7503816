#!/usr/bin/env python3
# Writes the PyTorch schedule files the tests read, with PyTorch's own
# schedule classes (torch.distributed.pipelining.schedules).
#
# Generated with torch 2.15.0 from PyPI (the CUDA build: the wheel installed
# with --no-deps beside filelock, typing-extensions, setuptools, sympy,
# networkx, jinja2, fsspec and the four CUDA libraries it cannot load
# without, nvidia-cusparselt-cu13, nvidia-nvshmem-cu13, nvidia-nccl-cu13 and
# nvidia-cufile; nothing here touches a GPU or a process group).
#
#   python3 tests/data/pytorch/gen.py [OUTDIR]   (default: beside this file)
#
# For each schedule, p ranks and m microbatches:
#   NAME-pP-mM.csv        the compute order, as _dump_csv(format=
#                         "compute_only") writes it (idle slots empty)
#   NAME-pP-mM.comms.csv  the runtime's lowered order, as _dump_csv() writes
#                         it by default: UNSHARD/RESHARD, SEND/RECV, WAIT_SEND,
#                         REDUCE_GRAD/WAIT_REDUCE_GRAD, OVERLAP_F_B pairs
# NAME: bfs (ScheduleLoopedBFS, one stage per rank: GPipe with the
# backwards in reverse), interleaved (ScheduleInterleaved1F1B, 2 stages per rank), zbv
# (ScheduleZBVZeroBubble), dualpipev (ScheduleDualPipeV, m >= 2p), zb1p
# (ScheduleInterleavedZeroBubble, 2 stages per rank; comms only). Suffixes
# -defer: the runtime options that move receives next to their consumers
# and defer the gradient-reduction waits. (Schedule1F1B's order is not
# among them: in 2.15.0 its _get_pipeline_order starts the last rank at
# microbatch 1, an order its own validation refuses; the runtime's 1F1B
# is what sluice's 1f1b generates.)
import os
import sys

import torch
import torch.distributed.pipelining.schedules as S


class Stage:
    """What the schedule classes read of a stage when they only build the
    order: its place in the pipeline. No module, no process group."""

    def __init__(self, index, n_stages, rank, n_ranks):
        self.stage_index = index
        self.num_stages = n_stages
        self.group_rank = rank
        self.group_size = n_ranks
        self.is_first = index == 0
        self.is_last = index == n_stages - 1
        self.submod = None
        self.stage_index_to_group_rank = {}


def stages_of(p, stage_ids, rank=0):
    n = 2 * p if len(stage_ids) == 2 else p
    return [Stage(s, n, rank, p) for s in stage_ids]


def write(sched, out, name, comms_only=False):
    if not comms_only:
        sched._dump_csv(os.path.join(out, name + ".csv"), format="compute_only")
    sched._dump_csv(os.path.join(out, name + ".comms.csv"))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    for p in (2, 4, 8):
        for m in (p, 2 * p, 4 * p):
            tag = "p%d-m%d" % (p, m)
            write(S.ScheduleLoopedBFS(stages_of(p, [0]), m), out,
                  "bfs-" + tag)
            # looped: rank 0 holds stages 0 and p
            write(S.ScheduleInterleaved1F1B(stages_of(p, [0, p]), m), out,
                  "interleaved-" + tag)
            # V: rank 0 holds stages 0 and 2p-1
            write(S.ScheduleZBVZeroBubble(stages_of(p, [0, 2 * p - 1]), m),
                  out, "zbv-" + tag)
            if m >= 2 * p:
                write(S.ScheduleDualPipeV(stages_of(p, [0, 2 * p - 1]), m),
                      out, "dualpipev-" + tag)
    write(S.ScheduleInterleavedZeroBubble(stages_of(4, [0, 4]), 8), out,
          "zb1p-p4-m8", comms_only=True)
    kw = dict(defer_pp_recv=True, defer_reduce_grad_wait=True)
    write(S.ScheduleZBVZeroBubble(stages_of(4, [0, 7]), 8, **kw), out,
          "zbv-p4-m8-defer", comms_only=True)
    write(S.ScheduleDualPipeV(stages_of(4, [0, 7]), 8, **kw), out,
          "dualpipev-p4-m8-defer", comms_only=True)
    print("torch %s: schedules written to %s" % (torch.__version__, out))


if __name__ == "__main__":
    main()
