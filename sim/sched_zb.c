/* Zero Bubble pipeline parallelism (Qi et al., ICLR 2024): the backward
 * is split into B (input gradient, on the critical path) and W (weight
 * gradient, only needed by the optimizer), and W's fill the bubbles.
 * ZB-H1 keeps 1F1B's shape and peak memory, W's deferred (below). ZB-V:
 * two stages per device in a V (device r holds stages r and 2p-1-r), in
 * the best of three orders as this engine runs them (sim_order_best):
 * PyTorch's fixed order and two list schedules, every one held to 1F1B's
 * activation memory. On uniform chunks with F = B = W and m >= 2p that
 * is PyTorch's order, its bubble (p-1) chunk forwards, a quarter of
 * ZB-H1's. ZB-H2 and ZB-2P trade memory for the rest of the bubble: up
 * to 2p-1 (2p) microbatches in flight, twice 1F1B's p (below). */
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

int sim_gen_zbh2(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                 util_err *e)
{
    /* ZB-H2 (Qi et al. 2024, section 2.2): warm-up forwards until the
     * first B arrives (2p-1-2i on stage i, 2p-1 on the first), then B
     * whenever one is ready, else F while fewer than 2p-1 microbatches
     * are in flight (F done, W not), else the oldest W. Derived once with
     * F = B = W and free communication, as the paper draws it, the order
     * is a parallelogram: stage i works without a gap from i*F to
     * i*F + m(F+B+W), the last stages deferring their W's into the drain
     * (the paper's reordered tail), every stage at most 2p-1 in flight.
     * The fill i*F is the bubble the paper removes by starting the next
     * iteration early (optimizer post-validation); a flushed iteration
     * keeps it. The engine then times the fixed order with the real
     * costs, as it does ZB-H1's. */
    (void)c;
    int p = o->n_stages, m = o->n_mb;
    int *map = util_malloc(sizeof(int) * (size_t)p);
    int *cap = util_malloc(sizeof(int) * (size_t)p);
    for (int s = 0; s < p; s++) {
        map[s] = s;
        cap[s] = 2 * p - 1 < m ? 2 * p - 1 : m;
    }
    sim_costs *unit = sim_costs_uniform(p, p, map, 1, 1, 1, 0, 1);
    sim_sched_opts so = *o;
    so.split_bw = 1;
    int rc = sim_order_greedy(ir, &so, unit, SIM_POL_BFIRST, cap, e);
    sim_costs_free(unit);
    free(map);
    free(cap);
    return rc;
}

/* ZB-2P: the automatic scheduling heuristic of Qi et al. (section 3.1)
 * under a memory limit of 2p microbatches' activations per stage. The
 * paper refines the heuristic's order with an ILP; that step is not
 * here, so ZB-2P is the heuristic's order alone. As the paper states it:
 * (1) warm-up: as many F's as memory allows before the first B arrives;
 * whether to add the F that would delay that B is hyperparameter 1;
 * (2) then one F and one B per round, W's inserted to fill a gap at
 * least a W long, to fill a shorter gap when it would make this stage's
 * cumulative bubble the largest of all stages (or always, with
 * hyperparameter 3), and to free memory at the limit; (3) stage i keeps
 * at least one F ahead of stage i+1, and when it is two or more ahead,
 * hyperparameter 2 lets it skip its F if that costs no bubble; (4) the
 * W's left when F's and B's run out close each stage. The times are the
 * costs' estimates (transfers as the list scheduler prices them), and
 * the paper's grid search over the eight settings is done by the engine
 * (sim_order_best). */
typedef struct zbh {
    sim_ir *ir;
    int p, m, recompute, allow_delay, skip_f, fill_small;
    double lim;
    int64_t *tf, *tb, *tw, *comm;   /* per stage; comm: stage s to s+1 */
    double *w_share;                /* share of a microbatch W frees */
    int64_t *endF, *endB;           /* per stage and microbatch */
    int64_t *e, *bub;               /* per stage: clock, idle so far */
    int *nf, *nb, *nw;
    double *mem;                    /* per stage, microbatches' activations */
} zbh;

static int64_t zb_max_bubble(const zbh *z)
{
    int64_t mx = 0;
    for (int s = 0; s < z->p; s++) if (z->bub[s] > mx) mx = z->bub[s];
    return mx;
}

/* When the next task of kind k (SIM_F, SIM_B, SIM_W) of stage s could
 * start on it. */
static int64_t zb_ready(const zbh *z, int s, sim_kind k)
{
    int64_t r = z->e[s];
    if (k == SIM_F && s > 0) {
        UTIL_NEVER(z->nf[s - 1] <= z->nf[s]);
        int64_t in = z->endF[(size_t)(s - 1) * z->m + z->nf[s]] + z->comm[s - 1];
        if (in > r) r = in;
    } else if (k == SIM_B && s + 1 < z->p) {
        int64_t in = z->endB[(size_t)(s + 1) * z->m + z->nb[s]] + z->comm[s];
        if (in > r) r = in;
    }
    return r;
}

static void zb_put(zbh *z, int s, sim_kind k)
{
    int64_t t0 = zb_ready(z, s, k);
    if (z->nf[s] > 0) z->bub[s] += t0 - z->e[s];
    size_t at = (size_t)s * z->m;
    if (k == SIM_F) {
        z->e[s] = t0 + z->tf[s];
        z->endF[at + z->nf[s]] = z->e[s];
        sim_ir_compute(z->ir, SIM_F, s, z->nf[s]++, 0, 0);
        z->mem[s] += 1;
    } else if (k == SIM_B) {
        z->e[s] = t0 + z->tb[s];
        z->endB[at + z->nb[s]] = z->e[s];
        if (z->recompute) sim_ir_compute(z->ir, SIM_RECOMP, s, z->nb[s], 0, 0);
        sim_ir_compute(z->ir, SIM_B, s, z->nb[s]++, 0, 0);
        z->mem[s] -= 1 - z->w_share[s];
    } else {
        z->e[s] = t0 + z->tw[s];
        sim_ir_compute(z->ir, SIM_W, s, z->nw[s]++, 0, 0);
        z->mem[s] -= z->w_share[s];
    }
}

/* Before the next task of kind k on stage s: W's to stay under the
 * memory limit, then W's into the gap until its input arrives (rule 2).
 * -1 when memory cannot be freed. */
static int zb_fill(zbh *z, int s, sim_kind k)
{
    double need = k == SIM_F ? 1 : 0;
    while (z->mem[s] + need > z->lim + 1e-9) {
        if (z->nw[s] >= z->nb[s]) return -1;
        zb_put(z, s, SIM_W);
    }
    int64_t in = zb_ready(z, s, k);
    while (z->nw[s] < z->nb[s] && z->e[s] + z->tw[s] <= in)
        zb_put(z, s, SIM_W);
    if (z->nw[s] < z->nb[s] && z->e[s] < in) {
        int raises = in - z->e[s] > zb_max_bubble(z) - z->bub[s];
        if (raises || z->fill_small) zb_put(z, s, SIM_W);
    }
    return 0;
}

static int zb2p_run(zbh *z, util_err *e)
{
    const int p = z->p, m = z->m;
    int *want = util_calloc((size_t)p, sizeof(int));
    int rc = 0;
    /* (1) warm-up: F0 everywhere, then the F's that fit before B0 */
    for (int s = 0; s < p; s++) zb_put(z, s, SIM_F);
    int64_t b_end = z->e[p - 1] + z->tb[p - 1];
    for (int s = p - 2; s >= 0; s--) {
        int64_t t = z->e[s], arrive = b_end + z->comm[s];
        double mem = z->mem[s];
        while (z->nf[s] + want[s] < m && mem + 1 <= z->lim + 1e-9 &&
               (z->allow_delay ? t < arrive : t + z->tf[s] <= arrive)) {
            t += z->tf[s];
            mem += 1;
            want[s]++;
        }
        b_end = (t > arrive ? t : arrive) + z->tb[s];
    }
    /* (3) each stage at least one F ahead of the next */
    for (int s = 1; s < p; s++)
        if (want[s] >= want[s - 1])
            want[s] = want[s - 1] > 0 ? want[s - 1] - 1 : 0;
    for (int s = 0; s < p; s++)
        for (int k = 0; k < want[s]; k++) zb_put(z, s, SIM_F);
    for (int s = p - 1; s >= 0; s--) zb_put(z, s, SIM_B);
    /* (2) rounds of one F and one B per stage */
    for (int i = 1; i < m && !rc; i++) {
        for (int s = 0; s < p; s++) {
            want[s] = z->nf[s] < m;
            if (!want[s] || !z->skip_f || s + 1 >= p ||
                z->nf[s] < z->nf[s + 1] + 2)
                continue;
            /* when stage s+1's next F and B would hand a B back */
            int64_t back = z->e[s + 1] + z->tf[s + 1] + z->tb[s + 1] +
                           z->comm[s];
            if (z->e[s] >= back) { want[s] = 0; continue; }
            if (z->e[s] + z->tf[s] <= back) continue;
            if (back - z->e[s] <= zb_max_bubble(z) - z->bub[s]) want[s] = 0;
        }
        /* a stage forwards only when the next one does: it stays ahead */
        for (int s = p - 2; s >= 0; s--)
            if (want[s + 1] < want[s]) want[s] = want[s + 1];
        for (int s = 0; s < p && !rc; s++) {
            if (!want[s]) continue;
            rc = zb_fill(z, s, SIM_F);
            if (!rc) zb_put(z, s, SIM_F);
        }
        for (int s = p - 1; s >= 0 && !rc; s--) {
            UTIL_NEVER(z->nb[s] != i || z->nf[s] <= i);
            rc = zb_fill(z, s, SIM_B);
            if (!rc) zb_put(z, s, SIM_B);
        }
    }
    /* (4) the W's left */
    for (int s = 0; s < p && !rc; s++)
        while (z->nw[s] < m) zb_put(z, s, SIM_W);
    free(want);
    if (rc)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule zb-2p: the heuristic "
                         "found no order within 2p = %d microbatches' "
                         "activations", 2 * p);
    return 0;
}

static int zb2p_order(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                      int k, util_err *e)
{
    const int p = o->n_stages, m = o->n_mb;
    zbh z = {.ir = ir, .p = p, .m = m, .recompute = o->recompute,
             .allow_delay = k & 1, .skip_f = (k >> 1) & 1,
             .fill_small = (k >> 2) & 1, .lim = 2.0 * p};
    z.tf = util_malloc(sizeof(int64_t) * (size_t)p);
    z.tb = util_malloc(sizeof(int64_t) * (size_t)p);
    z.tw = util_malloc(sizeof(int64_t) * (size_t)p);
    z.comm = util_calloc((size_t)p, sizeof(int64_t));
    z.w_share = util_malloc(sizeof(double) * (size_t)p);
    z.endF = util_calloc((size_t)p * m, sizeof(int64_t));
    z.endB = util_calloc((size_t)p * m, sizeof(int64_t));
    z.e = util_calloc((size_t)p, sizeof(int64_t));
    z.bub = util_calloc((size_t)p, sizeof(int64_t));
    z.nf = util_calloc((size_t)p, sizeof(int));
    z.nb = util_calloc((size_t)p, sizeof(int));
    z.nw = util_calloc((size_t)p, sizeof(int));
    z.mem = util_calloc((size_t)p, sizeof(double));
    for (int s = 0; s < p; s++) {
        const sim_stage_cost *sc = &c->stage[s];
        z.tf[s] = sc->f_ns;
        /* the halves as they run apart (sim_stage_cost.bs_ns, ws_ns) */
        z.tb[s] = sc->bs_ns + (o->recompute ? sc->r_ns : 0);
        z.tw[s] = sc->ws_ns;
        if (s + 1 < p) z.comm[s] = sim_xfer_est_ns(c, s, s + 1);
        /* what W still holds after B (half when nothing says) */
        z.w_share[s] = sc->act_bytes > 0 ? sc->wkeep_bytes / sc->act_bytes
                                         : 0.5;
    }
    int rc = zb2p_run(&z, e);
    free(z.tf); free(z.tb); free(z.tw); free(z.comm); free(z.w_share);
    free(z.endF); free(z.endB); free(z.e); free(z.bub);
    free(z.nf); free(z.nb); free(z.nw); free(z.mem);
    return rc;
}

int sim_gen_zb2p(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                 util_err *e)
{
    /* the paper's grid search over its three binary hyperparameters */
    return sim_order_best(ir, o, c, 8, zb2p_order, e);
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
