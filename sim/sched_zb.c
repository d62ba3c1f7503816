/* Zero Bubble pipeline parallelism (Qi et al., ICLR 2024): the backward
 * is split into B (input gradient, on the critical path) and W (weight
 * gradient, only needed by the optimizer), and W's fill the bubbles.
 * ZB-H1 keeps 1F1B's shape and peak memory, W's deferred (below). ZB-V:
 * two stages per device in a V (device r holds stages r and 2p-1-r), in
 * the best of three orders as this engine runs them (sim_order_best):
 * PyTorch's fixed order and two list schedules, every one held to 1F1B's
 * activation memory. On uniform chunks with F = B = W and m >= 2p that
 * is PyTorch's order, its bubble (p-1) chunk forwards, a quarter of
 * ZB-H1's. */
#include <stdlib.h>

#include "sim/sim.h"

/* ZB-V as PyTorch's ScheduleZBVZeroBubble orders it (Qi et al.'s
 * handcrafted V for F = B = W). Rank r holds chunk 0 (stage r) and chunk
 * 1 (stage 2p-1-r): 2(p-r)-1 forwards of chunk 0; r pairs F1 F0; p-r
 * times F1 I1 W1; then F0 I0 W0 F1 I1 W1 until chunk 0 has run n
 * forwards and chunk 1 caught up (the first F0 dropped once it has); r
 * pairs I0 I1 with their W's held back; p-r times I0 and a held W0; the
 * held W's of chunk 1, then of chunk 0. n = max(m, 2p-1) fills the V;
 * with fewer microbatches the actions of the ones beyond m are left out,
 * as PyTorch does. */
typedef struct zbv {
    sim_ir *ir;
    int m, recompute;
    int st[2], nf[2], ni[2], nw[2];
} zbv;

static void zf(zbv *x, int k)
{
    int mb = x->nf[k]++;
    if (mb < x->m) sim_ir_compute(x->ir, SIM_F, x->st[k], mb, 0, 0);
}

static void zi(zbv *x, int k)
{
    int mb = x->ni[k]++;
    if (mb >= x->m) return;
    if (x->recompute) sim_ir_compute(x->ir, SIM_RECOMP, x->st[k], mb, 0, 0);
    sim_ir_compute(x->ir, SIM_B, x->st[k], mb, 0, 0);
}

static void zw(zbv *x, int k)
{
    int mb = x->nw[k]++;
    if (mb < x->m) sim_ir_compute(x->ir, SIM_W, x->st[k], mb, 0, 0);
}

static void zbv_fixed(sim_ir *ir, const sim_sched_opts *o)
{
    int p = o->pp, m = o->n_mb, n = m > 2 * p - 1 ? m : 2 * p - 1;
    for (int r = 0; r < p; r++) {
        zbv x = {.ir = ir, .m = m, .recompute = o->recompute,
                 .st = {r, 2 * p - 1 - r}};
        for (int i = 0; i < 2 * (p - r) - 1; i++) zf(&x, 0);
        for (int i = 0; i < r; i++) { zf(&x, 1); zf(&x, 0); }
        for (int i = 0; i < p - r; i++) { zf(&x, 1); zi(&x, 1); zw(&x, 1); }
        while (x.nf[1] < x.nf[0] || x.nf[0] < n) {
            if (x.nf[0] < n) zf(&x, 0);
            zi(&x, 0); zw(&x, 0);
            zf(&x, 1); zi(&x, 1); zw(&x, 1);
        }
        for (int i = 0; i < r; i++) { zi(&x, 0); zi(&x, 1); }
        for (int i = 0; i < p - r; i++) { zi(&x, 0); zw(&x, 0); }
        while (x.nw[1] < x.ni[1]) zw(&x, 1);
        while (x.nw[0] < x.ni[0]) zw(&x, 0);
    }
}

/* Candidate k of ZB-V: 0 PyTorch's fixed order; 1 and 2 list scheduling
 * (forwards first, then backwards first) under caps of 2p - s
 * microbatches on stage s, counted until W: at most 2p+1 chunk
 * activations per device, 1F1B's level since a chunk is half a stage.
 * Forwards first is this generator's order before PyTorch's joined it: it
 * runs one forward of the first chunk more before the first backward,
 * which costs memory and, on real models, time (GPT2-XL on 4 RTX 2080 Ti,
 * 8 microbatches: 1014 ms against 926); the list schedules win where the
 * fixed order is cut short (m < 2p) or W > B. */
static int zbv_order(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                     int k, util_err *e)
{
    sim_sched_opts so = *o;
    so.split_bw = 1;
    if (k == 0) {
        zbv_fixed(ir, &so);
        return 0;
    }
    int S = o->n_stages;
    int *cap = util_malloc(sizeof(int) * (size_t)S);
    for (int s = 0; s < S; s++)
        cap[s] = S - s < o->n_mb ? S - s : o->n_mb;
    int rc = sim_order_greedy(ir, &so, c, k == 1 ? SIM_POL_FFIRST
                                                 : SIM_POL_BFIRST, cap, e);
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
    /* the order that runs best in this engine: PyTorch's for uniform
     * chunks with F = B = W and m >= 2p */
    return sim_order_best(ir, o, c, 3, zbv_order, e);
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
