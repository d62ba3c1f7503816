/* DualPipeV (DeepSeek-V3, arXiv 2412.19437; the V-shaped half of
 * DualPipe by Sea AI Lab), in the order PyTorch's ScheduleDualPipeV
 * builds: rank r of n holds stages r and 2n-1-r; per rank, 2(n-r-1)
 * forwards of its first stage; r+1 pairs F0 F1; n-r-1 times I1, a pending
 * W, F1 (zero bubble); m-2n+r+1 times the overlapped pairs F0&B1, F1&B0
 * (the last rank's first pair not overlapped); n-r-1 times B1, F1&B0; r+1
 * times B1 B0, switching to I (split backward) half-way; n-r-1 times a
 * pending W and B0 (or I0); the remaining W's. Microbatches are numbered
 * per stage and kind in order. An overlapped pair runs here as F then the
 * full backward on the compute stream: DualPipe overlaps them to hide its
 * all-to-all communication, which this simulator does not model. */
#include <stdlib.h>

#include "sim/sim.h"

typedef struct dpv {
    sim_ir *ir;
    const sim_sched_opts *o;
    int st[2], nf[2], ni[2];
    int *wq, wh, wt;            /* pending W's: local stage, microbatch */
} dpv;

static void f_(dpv *x, int k)
{
    sim_ir_compute(x->ir, SIM_F, x->st[k], x->nf[k]++, 0, 0);
}

/* full backward (split 0) or input backward with its W queued */
static void b_(dpv *x, int k, int split)
{
    int mb = x->ni[k]++;
    if (x->o->recompute) sim_ir_compute(x->ir, SIM_RECOMP, x->st[k], mb, 0, 0);
    if (!split) {
        sim_ir_compute(x->ir, SIM_BW, x->st[k], mb, 0, 0);
        return;
    }
    sim_ir_compute(x->ir, SIM_B, x->st[k], mb, 0, 0);
    x->wq[2 * x->wt] = k;
    x->wq[2 * x->wt + 1] = mb;
    x->wt++;
}

static void w_(dpv *x)
{
    if (x->wh == x->wt) return;
    int k = x->wq[2 * x->wh], mb = x->wq[2 * x->wh + 1];
    x->wh++;
    sim_ir_compute(x->ir, SIM_W, x->st[k], mb, 0, 0);
}

void sim_gen_dualpipev(sim_ir *ir, const sim_sched_opts *o)
{
    int n = o->pp, m = o->n_mb;
    dpv x = {.ir = ir, .o = o};
    x.wq = util_malloc(sizeof(int) * (size_t)(4 * m + 2));
    for (int r = 0; r < n; r++) {
        x.st[0] = r;
        x.st[1] = 2 * n - 1 - r;
        x.nf[0] = x.nf[1] = x.ni[0] = x.ni[1] = 0;
        x.wh = x.wt = 0;
        for (int i = 0; i < 2 * (n - r - 1); i++) f_(&x, 0);
        for (int i = 0; i < r + 1; i++) { f_(&x, 0); f_(&x, 1); }
        for (int i = 0; i < n - r - 1; i++) { b_(&x, 1, 1); w_(&x); f_(&x, 1); }
        for (int i = 0; i < m - 2 * n + r + 1; i++) {
            f_(&x, 0); b_(&x, 1, 0);
            f_(&x, 1); b_(&x, 0, 0);
        }
        for (int i = 0; i < n - r - 1; i++) {
            b_(&x, 1, 0);
            f_(&x, 1); b_(&x, 0, 0);
        }
        int zb = 0, s6 = r + 1;
        for (int i = 0; i < s6; i++) {
            if (i == s6 / 2 && r % 2 == 1) zb = 1;
            b_(&x, 1, zb);
            if (i == s6 / 2 && r % 2 == 0) zb = 1;
            b_(&x, 0, zb);
        }
        for (int i = 0; i < n - r - 1; i++) { w_(&x); b_(&x, 0, zb); }
        while (x.wh < x.wt) w_(&x);
    }
    free(x.wq);
}
