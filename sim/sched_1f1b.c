/* 1F1B with a flush (PipeDream-Flush, DAPPLE, Megatron's non-interleaved
 * schedule): stage i runs w_i = min(p-1-i, m) warm-up forwards, then
 * alternates one forward and one backward, then the w_i remaining
 * backwards. The continuous form over several minibatches (no flush) is
 * PipeDream-2BW's order. */
#include "sim/sim.h"

static void back(sim_ir *ir, const sim_sched_opts *o, int s, int g)
{
    int mb = g % o->n_mb, k = g / o->n_mb;
    if (o->recompute) sim_ir_compute(ir, SIM_RECOMP, s, mb, k, 0);
    if (o->split_bw) {
        sim_ir_compute(ir, SIM_B, s, mb, k, 0);
        sim_ir_compute(ir, SIM_W, s, mb, k, 0);
    } else {
        sim_ir_compute(ir, SIM_BW, s, mb, k, 0);
    }
}

/* 1F1B order over `total` microbatches numbered g = k*m + mb. */
void sim_gen_1f1b_n(sim_ir *ir, const sim_sched_opts *o, int total)
{
    int p = o->n_stages;
    for (int s = 0; s < p; s++) {
        int w = p - 1 - s < total ? p - 1 - s : total;
        for (int g = 0; g < w; g++)
            sim_ir_compute(ir, SIM_F, s, g % o->n_mb, g / o->n_mb, 0);
        for (int j = 0; j < total - w; j++) {
            int g = w + j;
            sim_ir_compute(ir, SIM_F, s, g % o->n_mb, g / o->n_mb, 0);
            back(ir, o, s, j);
        }
        for (int g = total - w; g < total; g++) back(ir, o, s, g);
    }
}

void sim_gen_1f1b(sim_ir *ir, const sim_sched_opts *o)
{
    sim_gen_1f1b_n(ir, o, o->n_mb);
}
