/* Zero Bubble pipeline parallelism (Qi et al., ICLR 2024): the backward
 * is split into B (input gradient, on the critical path) and W (weight
 * gradient, only needed by the optimizer), and W's fill the bubbles.
 * ZB-H1 keeps 1F1B's shape and peak memory, W's deferred (below). ZB-V:
 * two stages per device in a V (device r holds stages r and 2p-1-r),
 * ordered by list scheduling with estimated times (sim_order_greedy):
 * forwards first under caps of 2p - s microbatches on stage s (counted
 * until W: at most 2p+1 chunk activations per device, 1F1B's level since a
 * chunk is half a stage), B before W, a W whenever nothing else is ready
 * or the cap forces it; the order it emits cannot deadlock. On uniform
 * chunks its bubble is (p-1) chunk forwards, a quarter of ZB-H1's. */
#include <stdlib.h>

#include "sim/sim.h"

static int run(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
               int v, util_err *e)
{
    int S = o->n_stages;
    sim_sched_opts so = *o;
    so.split_bw = 1;
    int *cap = util_malloc(sizeof(int) * (size_t)S);
    for (int s = 0; s < S; s++) {
        int k = v * o->pp - s;
        cap[s] = k < o->n_mb ? k : o->n_mb;
    }
    int rc = sim_order_greedy(ir, &so, c, SIM_POL_FFIRST, cap, e);
    free(cap);
    return rc;
}

int sim_gen_zbh1(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                 util_err *e)
{
    /* 1F1B's warm-up and F/B alternation; stage i runs the W of
     * microbatch j after the B of microbatch j + i, the deferred W's
     * closing the stage: every stage then holds at most p microbatches
     * (1F1B's peak, on its first stage), and the B's of the cool-down
     * reach the first stage without W's in between */
    (void)c; (void)e;
    int p = o->n_stages, m = o->n_mb;
    for (int s = 0; s < p; s++) {
        int w = p - 1 - s < m ? p - 1 - s : m, nw = 0;
        for (int g = 0; g < w; g++) sim_ir_compute(ir, SIM_F, s, g, 0, 0);
        for (int j = 0; j < m; j++) {
            if (w + j < m) sim_ir_compute(ir, SIM_F, s, w + j, 0, 0);
            if (o->recompute) sim_ir_compute(ir, SIM_RECOMP, s, j, 0, 0);
            sim_ir_compute(ir, SIM_B, s, j, 0, 0);
            if (j >= s) sim_ir_compute(ir, SIM_W, s, nw++, 0, 0);
        }
        while (nw < m) sim_ir_compute(ir, SIM_W, s, nw++, 0, 0);
    }
    return 0;
}

int sim_gen_zbv(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                util_err *e)
{
    return run(ir, o, c, 2, e);
}

/* Chimera (Li and Hoefler, SC 2021): two pipelines in opposite directions
 * over the same devices, device i holding stage i of the down pipeline
 * and stage p-1-i of the up one (two weight replicas), half of the
 * microbatches each; the replicas' gradients are all-reduced at the end
 * (sim_add_allreduce). Devices order both pipelines' work by list
 * scheduling, forwards first under 1F1B's caps per direction. */
int sim_gen_chimera(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                    util_err *e)
{
    int S = o->n_stages, G = 2 * S, m = ir->n_mb;
    int *cap = util_malloc(sizeof(int) * (size_t)G);
    for (int v = 0; v < G; v++) {
        int k = S - c->stage[v].model_stage;
        cap[v] = k < m ? k : m;
    }
    int rc = sim_order_greedy(ir, o, c, SIM_POL_FFIRST, cap, e);
    free(cap);
    return rc;
}
