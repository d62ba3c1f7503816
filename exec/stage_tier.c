/* Stage tiers of the executor (see exec_stier_add in exec/runtime.h): a
 * pipeline stage whose optimizer state the host keeps and steps, as the
 * simulator prices it (sim/stage_tiers.c). The device keeps the stage's
 * weights and gradient; host memory keeps the gradient the step reads
 * and, on the DRAM tier, the fp32 weights and AdamW moments; on the NVMe
 * tier those live in a file, three regions of the stage's floats, each
 * step reading, stepping and writing them back chunk by chunk (the IR's
 * chunks, aligned for O_DIRECT), the stepped weights gathered in the
 * gradient's buffer for the copy back. The chunks' tasks run on the
 * worker's tier threads (a read, a step and a write at once); chunk k
 * stages in set k % 3, free again once the IR lets a read start (it
 * waits for the write two chunks back). */
#include <stdlib.h>
#include <string.h>

#include "exec/runtime.h"

#define ALIGN_FLOATS (EXEC_TFILE_ALIGN / sizeof(float))
#define STG_SETS 3 /* chunks staged at once, as the simulator charges */

struct exec_stier {
    int tier;
    float *hw, *hm, *hv;        /* dram: the fp32 weights and moments */
    float *hg;                  /* the step's gradient (nvme: then, chunk
                                 * by chunk, the stepped weights) */
    int K;                      /* chunks of a step: the IR's CPU steps */
    size_t cn;                  /* floats per chunk (aligned) */
    exec_tfile f;               /* nvme: w, m, v regions of rb bytes */
    int64_t foff;
    size_t rb;
    float *stg[STG_SETS][3];    /* nvme: a chunk's w, m, v per set */
    int *chunk;                 /* per IR task of the stage: its chunk */
    double adam_params, adam_ns;/* measured: the CPU's AdamW (its steps
                                 * run on the worker's CPU thread alone) */
};

/* Floats [*lo, *hi) of chunk k. */
static void chunk_range(const exec_stier *t, size_t n, int k, size_t *lo,
                        size_t *hi)
{
    *lo = (size_t)k * t->cn;
    *hi = *lo + t->cn;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}

/* Reads (wr 0) or writes floats [lo, hi) of region r (0 weights, 1 m,
 * 2 v) from or to buf, whole aligned blocks. */
static int region_io(exec_stier *t, int wr, int r, float *buf, size_t lo,
                     size_t hi, util_err *e)
{
    size_t bytes = exec_tfile_up((hi - lo) * sizeof(float));
    return exec_tfile_io(&t->f, wr, buf, bytes,
                         t->foff + (int64_t)r * (int64_t)t->rb +
                             (int64_t)(lo * sizeof(float)), e);
}

int exec_stier_add(exec_worker *w, exec_stage *st, int tier, const float *w0,
                   const float *m0, const float *v0, util_err *e)
{
    const exec_runtime *rt = w->rt;
    const sim_ir *ir = rt->ir;
    exec_stier *t = util_calloc(1, sizeof *t);
    st->stier = t;
    t->tier = tier;
    exec_tfile_init(&t->f);
    size_t n = st->n, nb = exec_tfile_up((n + 1) * sizeof(float));
    /* the IR's chunks: its CPU steps of this stage in one step */
    t->chunk = util_malloc(sizeof(int) * (size_t)(ir->n_tasks + 1));
    int ncpu = 0, nrd = 0, nwr = 0;
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *k = &ir->tasks[i];
        t->chunk[i] = -1;
        if (k->stage != st->id || k->minibatch) continue;
        if (k->kind == SIM_CPU_OPT) t->chunk[i] = ncpu++;
        if (k->kind == SIM_NVME_READ) t->chunk[i] = nrd++;
        if (k->kind == SIM_NVME_WRITE) t->chunk[i] = nwr++;
    }
    if (ncpu < 1 || (tier == SIM_TIER_NVME) != (nrd > 0) || nrd != nwr ||
        (nrd && nrd != ncpu))
        return util_errf(e, UTIL_EXIT_FAIL, "stage %d: the IR's tier tasks "
                         "are not a %s stage tier's (%d CPU steps, %d reads, "
                         "%d writes)", st->id, sim_state_tier_name(tier), ncpu,
                         nrd, nwr);
    t->K = ncpu;
    t->cn = (n + (size_t)t->K - 1) / (size_t)t->K;
    t->cn = (t->cn + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    if (!t->cn) t->cn = ALIGN_FLOATS;
    t->hg = exec_tfile_buf(nb);
    memset(t->hg, 0, nb);
    const float *src[3] = {w0, m0, v0};
    /* what the device's copies use all run long is page-locked where the
     * backend pins */
    const exec_backend *be = rt->be;
    if (be->host_pin) be->host_pin(t->hg, nb);
    if (tier == SIM_TIER_DRAM) {
        float **h[3] = {&t->hw, &t->hm, &t->hv};
        for (int k = 0; k < 3; k++) {
            *h[k] = exec_tfile_buf(nb);
            memset(*h[k], 0, nb);
            if (src[k]) memcpy(*h[k], src[k], n * sizeof(float));
        }
        if (be->host_pin) be->host_pin(t->hw, nb);
        return 0;
    }
    if (exec_tfile_open(&t->f, rt->offload.path, rt->offload.full_after_bytes,
                        e))
        return -1;
    t->rb = nb;
    t->foff = exec_tfile_grow(&t->f, 3 * nb);
    float *b = exec_tfile_buf(nb);
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) {
        memset(b, 0, nb);
        if (src[k]) memcpy(b, src[k], n * sizeof(float));
        rc = exec_tfile_io(&t->f, 1, b, nb,
                           t->foff + (int64_t)k * (int64_t)nb, e);
    }
    free(b);
    /* setting up is not the run's traffic */
    t->f.wr_bytes = t->f.wr_ns = 0;
    size_t cb = exec_tfile_up(t->cn * sizeof(float));
    for (int j = 0; j < STG_SETS; j++)
        for (int k = 0; k < 3 && !rc; k++) t->stg[j][k] = exec_tfile_buf(cb);
    return rc;
}

typedef struct step_ctx {
    const exec_runtime *rt;
    const exec_stage *st;
    const exec_stier *t;
    float *h[3];
    size_t lo, hi;
    int step;
    float lr, scale;
} step_ctx;

/* Part p of n of AdamW on floats [lo, hi) of the stage: the weights and
 * moments at h[0..2] (indexed from lo), the gradient in hg. */
static void step_part(void *ctx, int p, int n)
{
    const step_ctx *c = ctx;
    const exec_adamw *a = &c->rt->adamw;
    size_t plo, phi;
    exec_part_range(c->hi - c->lo, p, n, &plo, &phi);
    plo += c->lo;
    phi += c->lo;
    for (int k = 0; k < c->st->n_sl; k++) {
        const exec_slice *sl = &c->st->sl[k];
        size_t a0 = sl->off > plo ? sl->off : plo;
        size_t a1 = sl->off + sl->n < phi ? sl->off + sl->n : phi;
        if (sl->frozen || a0 >= a1) continue;
        size_t o = a0 - c->lo;
        kern_cpu.adamw_update(c->h[0] + o, c->h[1] + o, c->h[2] + o,
                              c->t->hg + a0, a1 - a0, c->lr, a->beta1,
                              a->beta2, a->eps,
                              sl->decay ? a->weight_decay : 0.0f, c->scale,
                              c->step + 1);
    }
}

/* AdamW on floats [lo, hi) of the stage on the host's threads. */
static void step_range(const exec_runtime *rt, const exec_stage *st,
                       const exec_stier *t, float *const h[3], size_t lo,
                       size_t hi, int step, float scale)
{
    step_ctx c = {rt, st, t, {h[0], h[1], h[2]}, lo, hi, step,
                  exec_lr_at(rt->adamw.lr, rt->warmup, rt->total_steps, step),
                  scale};
    exec_host_par(exec_host_threads(rt), step_part, &c);
}

int exec_stier_task(exec_worker *w, int id, int epoch, float scale,
                    util_err *e)
{
    exec_runtime *rt = w->rt;
    const exec_backend *be = rt->be;
    const sim_task *k = &rt->ir->tasks[id];
    exec_stage *st = &w->st[w->lidx[k->stage]];
    exec_stier *t = st->stier;
    size_t n = st->n, lo, hi;
    int step = rt->step0 + epoch - 1;
    UTIL_NEVER(!t);
    int c = t->chunk[id] >= 0 ? t->chunk[id] : 0;
    chunk_range(t, n, c, &lo, &hi);
    float **stg = t->stg[c % STG_SETS];
    switch (k->kind) {
    case SIM_SWAP_OUT: {
        /* the step's gradient to the host; the device's starts again */
        int rc = 0;
        EXEC_KERN(w, be->to_host(t->hg, st->g, n * sizeof(float)));
        EXEC_KERN(w, be->zero(st->g, n));
        EXEC_KERN(w, rc = be->sync(e));
        return rc;
    }
    case SIM_NVME_READ:
        for (int r = 0; r < 3; r++)
            if (region_io(t, 0, r, stg[r], lo, hi, e)) return -1;
        return 0;
    case SIM_CPU_OPT: {
        int64_t t0 = (int64_t)exec_now_ns();
        if (t->tier == SIM_TIER_DRAM) {
            /* the IR's one step on DRAM: every chunk */
            float *h[3] = {t->hw, t->hm, t->hv};
            step_range(rt, st, t, h, 0, n, step, scale);
            lo = 0;
            hi = n;
        } else {
            step_range(rt, st, t, stg, lo, hi, step, scale);
        }
        t->adam_ns += (double)((int64_t)exec_now_ns() - t0);
        t->adam_params += (double)(hi - lo);
        /* the chunk's gradient is spent: its buffer takes the weights */
        if (t->tier != SIM_TIER_DRAM)
            memcpy(t->hg + lo, stg[0], (hi - lo) * sizeof(float));
        return 0;
    }
    case SIM_NVME_WRITE:
        for (int r = 0; r < 3; r++)
            if (region_io(t, 1, r, stg[r], lo, hi, e)) return -1;
        return 0;
    case SIM_SWAP_IN: {
        int rc = 0;
        const float *src = t->tier == SIM_TIER_DRAM ? t->hw : t->hg;
        EXEC_KERN(w, be->from_host(st->w[st->cur_ver], src,
                                   n * sizeof(float)));
        EXEC_KERN(w, rc = be->sync(e));
        return rc;
    }
    default:
        return util_errf(e, UTIL_EXIT_FAIL, "task kind %s of a stage tier",
                         sim_kind_name((sim_kind)k->kind));
    }
}

int exec_stier_moments(exec_worker *w, exec_stage *st, float *m, float *v,
                       util_err *e)
{
    (void)w;
    exec_stier *t = st->stier;
    float *dst[2] = {m, v};
    for (int r = 1; r < 3; r++) {
        if (!dst[r - 1]) continue;
        if (t->tier == SIM_TIER_DRAM) {
            memcpy(dst[r - 1], r == 1 ? t->hm : t->hv, st->n * sizeof(float));
            continue;
        }
        float *b = exec_tfile_buf(t->rb);
        int rc = exec_tfile_io(&t->f, 0, b, t->rb,
                               t->foff + (int64_t)r * (int64_t)t->rb, e);
        if (!rc) memcpy(dst[r - 1], b, st->n * sizeof(float));
        free(b);
        if (rc) return -1;
    }
    return 0;
}

void exec_stier_stats(const exec_worker *w, double out[6])
{
    memset(out, 0, 6 * sizeof *out);
    for (int i = 0; i < w->n_st; i++) {
        const exec_stier *t = w->st[i].stier;
        if (!t) continue;
        out[0] += t->f.rd_bytes;
        out[1] += t->f.rd_ns / 1e9;
        out[2] += t->f.wr_bytes;
        out[3] += t->f.wr_ns / 1e9;
        out[4] += t->adam_params;
        out[5] += t->adam_ns / 1e9;
    }
}

void exec_stier_free(exec_worker *w, exec_stage *st)
{
    exec_stier *t = st->stier;
    if (!t) return;
    const exec_backend *be = w->rt->be;
    if (be->host_unpin) {
        if (t->hg) be->host_unpin(t->hg);
        if (t->hw) be->host_unpin(t->hw);
    }
    free(t->hw);
    free(t->hm);
    free(t->hv);
    free(t->hg);
    for (int j = 0; j < STG_SETS; j++)
        for (int k = 0; k < 3; k++) free(t->stg[j][k]);
    free(t->chunk);
    exec_tfile_close(&t->f);
    free(t);
    st->stier = NULL;
}
