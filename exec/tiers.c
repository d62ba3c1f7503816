/* Plans of the offload schedules (sim/sched_offload.c: zero-offload,
 * zero-infinity, fuyou) run as the simulator simulates them, on one device
 * or a device per data-parallel rank (below): every tier
 * task of the IR is real work, on a thread of the worker per stream (copies
 * to and from the device, the drive's reads and writes, the CPU's AdamW),
 * in the IR's order and after the IR's dependencies, so what overlaps in
 * the simulation overlaps here. On either backend: the device's memory is
 * reached only through the backend's copies, each tier thread on a stream
 * of its own (EXEC_ROLE_TIER), and the host memory those copies use all
 * run long is pinned where the backend pins (CUDA).
 *
 * A stage's fp32 weights and AdamW moments live in host memory (the DRAM
 * tier) or in regions of one file (the NVMe tier); its gradients come to
 * host memory. What each task does:
 *   NVMe read before a fetch       the stage's weights into a staging buffer
 *   copy in (fetch)                those weights onto the device, held by
 *                                  the group of compute tasks the IR gives
 *                                  them to, released after its last
 *   copy out (gradients)           the device's gradient buffer (a new one
 *                                  from the backward the IR starts it at)
 *                                  to host memory: set by the step's first,
 *                                  added to by the others (ZeRO's copy per
 *                                  microbatch), then released
 *   NVMe read before a step        weights and moments into staging
 *   CPU step                       AdamW on the host, the CPU's kernel slice
 *                                  by slice (elementwise: the device's bits)
 *   NVMe write after a step        weights and moments back to the file
 *   copy in after a step           zero-offload: the new weights onto the
 *                                  device, where they stay
 *   copy out / in (activations)    what the microbatch's record keeps for
 *                                  its backward leaves the device after its
 *                                  forward and comes back before its
 *                                  recomputation or backward; through the
 *                                  file when the plan swaps to the drives
 * Steps do not overlap across iterations (the compute thread opens an
 * iteration's tier tasks when it starts it and waits for all of them at
 * its end), as the simulator simulates one iteration.
 *
 * Data-parallel ranks: each rank's host holds its share of every stage's
 * states (exec_tiers_chunk: rank p's is chunk p + 1 of D, where a ring's
 * reduce-scatter leaves it; the frozen weights cut alike); a fetch copies
 * the share onto the device and the IR's ring gathers the others'; a
 * gradient buffer is reduce-scattered by the ring before its copy out
 * takes the share; ZeRO's first step sums the ranks' norms (the runtime
 * sums Fuyou's and the loss at the iteration's end); zero-offload pushes
 * the share of its new weights and a ring gathers the rest.
 *
 * A tied table (the token table of the embedding and the LM head, a T5's
 * decoder's embedding too; each of a T5's relative-position tables, on
 * every stage of its stack's self-attentions): each holder's copy of its
 * gradient comes to the host with its stage; the table is stepped once,
 * at the holders' last step in the IR, with the copies' sum in stage
 * order, and the new weights go to the other holders' fetches from a
 * host copy.
 * ZeRO clips by the global gradient norm (its steps follow the whole
 * backward pass); Fuyou steps a layer before the norm is known and runs
 * with --clip 0, as the executor's own fuyou policy (offload.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/runtime.h"
#include "sim/sim.h"


enum {
    R_NONE, R_W_READ, R_W_IN, R_W_PUSH, R_G_OUT, R_OPT_READ, R_OPT,
    R_OPT_WRITE, R_A_OUT, R_A_WRITE, R_A_READ, R_A_IN
};

/* One device buffer a swapped record referred to: its floats at `off`
 * in the record's host image. */
typedef struct tier_img {
    size_t off, n;
} tier_img;

/* A record's view of an image. */
typedef struct tier_ref {
    exec_view *v;
    int img;
    size_t off, n;
} tier_ref;

/* The swapped record of one (stage, microbatch): its buffers one after
 * the other in one host image of hn floats (h, NULL while on the
 * drives), one region of the file: whole O_DIRECT blocks once a record,
 * not once a buffer (a tiny model's norms' statistics are a few hundred
 * bytes each). */
typedef struct tier_act {
    tier_img *img;
    int n_img;
    float *h;
    size_t hn;
    tier_ref *ref;
    int n_ref;
    int64_t foff;               /* its region of the file, fcap bytes */
    size_t fcap;
} tier_act;

typedef struct tier_stage {
    exec_stage *st;
    /* the rank's share of the trained arena (exec_tiers_chunk): pieces
     * [plo[k], plo[k] + pn[k]), at ph[k] in the host arrays, hn floats
     * in all (one rank: the whole arena, where it lies) */
    int np;
    size_t plo[EXEC_TIER_PIECES], pn[EXEC_TIER_PIECES], ph[EXEC_TIER_PIECES],
        hn;
    size_t tlo[3], th[3], tn[3]; /* each tied table's share: arena and
                                 * host offsets, floats (tab[g].n; 0 where
                                 * the stage holds none) */
    size_t flo, fn;             /* the share of the frozen arena (all of
                                 * it but where fetches bring them with
                                 * several ranks) */
    int *fk, n_fk;              /* its fetches, in order: the weights each
                                 * gather of its ring fills */
    int g_out;                  /* gradient buffers copied out this step */
    float *hw, *hm, *hv;        /* DRAM tier: the states */
    float *hwf;                 /* DRAM tier: the frozen weights (a
                                 * fine-tuning mode's: fetched, never
                                 * stepped) */
    float *hg;                  /* the step's gradient: from its first
                                 * copy out until its step (a buffer of
                                 * the worker's pool, grad_get) */
    int g_set;                  /* hg holds this step's first copy */
    float *tgk[3];              /* Fuyou: a tied-table holder's piece of
                                 * table g's gradient (tn[g] floats), from
                                 * its step for the stepping holder's sum;
                                 * the buffer made once and kept, as the
                                 * simulator keeps the gradients' buffers
                                 * (a fresh one each step was the table's
                                 * size mapped page by page) */
    int tgk_on[3];              /* tgk[g] holds this step's piece */
    int64_t foff;               /* NVMe tier: w, m, v regions of rb bytes */
    size_t rb;
    int64_t foff_f;             /* NVMe tier: the frozen weights' region
                                 * of rbf bytes */
    size_t rbf;
    float *so[3];               /* NVMe: weights and moments for the step
                                 * (hn floats, as hw, hm, hv, hg) */
    exec_buf *res, *resf;       /* zero-offload: the resident weights,
                                 * trained and frozen */
    exec_buf **gq;              /* gradient buffers waiting for their copy
                                 * out, oldest first */
    int gq_n, gq_cap;
} tier_stage;

struct exec_tiers {
    exec_worker *w;
    int sched, tier, act_tier;
    unsigned char *role;        /* per IR task */
    int *win;                   /* per compute task: the fetch its weights
                                 * came with, -1 (resident) */
    int *wrel;                  /* per compute task: the fetch whose weights
                                 * go after it, -1 */
    exec_buf **wbuf, **wbuff;   /* per fetch: the weights it brought
                                 * (trained, frozen) */
    int *rd_for;                /* per NVMe read of weights: its fetch */
    float **stg, **stgf;        /* per fetch: what its read staged */
    unsigned char *galloc;      /* per compute task: starts a gradient */
    unsigned char *gend;        /* per compute task: its gradient's last */
    tier_stage *ts;             /* per local stage */
    tier_act *act;              /* per local stage x microbatch */
    exec_tfile f;
    pthread_mutex_t mu;
    int threads;                /* the host's step runs on this many */
    /* the tied tables (0 the token table, 1 and 2 a T5's encoder's and
     * decoder's relative-position tables): the local stages holding a
     * copy, the one stepping it (its step is the holders' last; -1 with
     * one holder), the weights after each step */
    struct tier_tab {
        int *hold, n_hold, step;
        size_t n;
        float *w;               /* in the DRAM tier the stepping holder's
                                 * own (own): no copy */
        int own;
    } tab[3];
    /* the step's gradient norm (squares; ZeRO: all of it at the first
     * step, Fuyou: each step adds its own) and clipping factor */
    double norm_sq;
    int norm_epoch;
    float scale;
    /* measured: copies to and from the device, AdamW */
    double up_bytes, up_ns, down_bytes, down_ns, adam_params, adam_ns;
    double ring_bytes;          /* sent to the other ranks */
    float *hgt;                 /* a gradient's copy on its way to the sum
                                 * in its stage's hg (pinned; made at the
                                 * first copy that adds, the largest
                                 * share's size): one serves every stage,
                                 * as the copies out run one at a time */
    size_t hgt_n;
    /* every gradient buffer made (pinned, n floats), kept: an idle one
     * waits for the next first copy; a stage's gradient lives on the
     * host from its first copy out until its step, as the simulator
     * holds it */
    struct gbuf { float *p; size_t n; int idle; } *gb;
    int n_gb;
};

/* Host memory taken (bytes > 0) or given back: counted with every local
 * worker's (exec_runtime.host_cur, its peak host_peak) and, under
 * mpirun, with the machine's other processes' (host_share). */
static void host_add(exec_tiers *t, double bytes)
{
    exec_runtime *rt = t->w->rt;
    pthread_mutex_lock(&rt->host_mu);
    rt->host_cur += bytes;
    if (rt->host_cur > rt->host_peak) rt->host_peak = rt->host_cur;
    pthread_mutex_unlock(&rt->host_mu);
    exec_host_share_add(rt->host_share, bytes);
}

static float *host_new(exec_tiers *t, size_t n)
{
    host_add(t, (double)exec_tfile_up(n * sizeof(float)));
    return exec_tfile_buf(exec_tfile_up(n * sizeof(float)));
}

static void host_free(exec_tiers *t, float **p, size_t n)
{
    if (!*p) return;
    free(*p);
    *p = NULL;
    host_add(t, -(double)exec_tfile_up(n * sizeof(float)));
}

/* Host memory the device's copies use all run long (the DRAM tier's
 * weights, the gradients, the tied table's weights), page-locked where
 * the backend pins; unpinned again before it goes. */
static void host_pin(exec_tiers *t, float *p, size_t n)
{
    const exec_backend *be = t->w->rt->be;
    if (be->host_pin && p) be->host_pin(p, exec_tfile_up(n * sizeof(float)));
}

static void host_free_pinned(exec_tiers *t, float **p, size_t n)
{
    const exec_backend *be = t->w->rt->be;
    if (be->host_unpin && *p) be->host_unpin(*p);
    host_free(t, p, n);
}

/* A gradient's host buffer of at least n floats, pinned where the
 * backend pins, from the pool or new. Under ZeRO every stage's gradient
 * waits on the host for the step: a buffer of exactly its size, so the
 * pool holds one a stage, their sum (a best fit let a smaller stage take
 * a larger buffer that a later one then lacked: the pool grew by a
 * buffer). Fuyou's steps hold a few at once: the smallest large enough
 * and at most twice the size (once warm, the pool holds about what the
 * steps hold at once at their most). Without that bound a layer's stage
 * took the head's idle buffer, five times its size, and the embedding's
 * stage, coming while the layer's step ran, made a second one: 123 MiB
 * over the count for GPT-2's widths, in one run of three; with a bound
 * of an eighth, T5's and BERT's stages of near sizes made buffers of
 * their own (9-12% over). */
static float *grad_get(exec_tiers *t, size_t n)
{
    int exact = t->sched != SIM_SCHED_FUYOU;
    pthread_mutex_lock(&t->mu);
    int best = -1;
    for (int k = 0; k < t->n_gb; k++)
        if (t->gb[k].idle &&
            (exact ? t->gb[k].n == n
                   : sim_grad_pool_fits((double)t->gb[k].n, (double)n)) &&
            (best < 0 || t->gb[k].n < t->gb[best].n))
            best = k;
    float *p = NULL;
    if (best >= 0) {
        t->gb[best].idle = 0;
        p = t->gb[best].p;
    }
    /* Fuyou: none fits; the largest idle smaller one goes rather than
     * stay beside the new one (a GPT's head, which keeps its piece of
     * the table apart, hands back a buffer the embedding's stage, table
     * and positions, is a little too large for); a larger one stays for
     * the stage it fits */
    int drop = -1;
    for (int k = 0; k < t->n_gb && !p && !exact; k++)
        if (t->gb[k].idle && t->gb[k].n < n &&
            (drop < 0 || t->gb[k].n > t->gb[drop].n))
            drop = k;
    struct gbuf old = {0};
    if (drop >= 0) {
        old = t->gb[drop];
        t->gb[drop] = t->gb[--t->n_gb];
    }
    pthread_mutex_unlock(&t->mu);
    if (old.p) host_free_pinned(t, &old.p, old.n);
    if (p) return p;
    p = host_new(t, n);
    host_pin(t, p, n);
    pthread_mutex_lock(&t->mu);
    t->gb = util_realloc(t->gb, sizeof *t->gb * (size_t)(t->n_gb + 1));
    t->gb[t->n_gb++] = (struct gbuf){p, n, 0};
    pthread_mutex_unlock(&t->mu);
    return p;
}

/* Stage s's gradient where no copy out brought one: zero. */
static void grad_zero(exec_tiers *t, tier_stage *s)
{
    if (s->hg) return;
    s->hg = grad_get(t, s->hn);
    memset(s->hg, 0, s->hn * sizeof *s->hg);
}

/* A step is done with the gradient's buffer *p: back to the pool. */
static void grad_put(exec_tiers *t, float **p)
{
    if (!*p) return;
    pthread_mutex_lock(&t->mu);
    int k = 0;
    while (k < t->n_gb && t->gb[k].p != *p) k++;
    UTIL_NEVER(k == t->n_gb);
    t->gb[k].idle = 1;
    pthread_mutex_unlock(&t->mu);
    *p = NULL;
}

/* A copy between host and device, timed (up: to the device). */
static void copy_timed(exec_tiers *t, int up, float *dst, const float *src,
                       size_t n)
{
    const exec_backend *be = t->w->rt->be;
    int64_t t0 = (int64_t)exec_now_ns();
    if (up) be->from_host(dst, src, n * sizeof *dst);
    else be->to_host(dst, src, n * sizeof *dst);
    double dt = (double)((int64_t)exec_now_ns() - t0);
    pthread_mutex_lock(&t->mu);
    if (up) { t->up_bytes += (double)(n * sizeof *dst); t->up_ns += dt; }
    else { t->down_bytes += (double)(n * sizeof *dst); t->down_ns += dt; }
    pthread_mutex_unlock(&t->mu);
}

int exec_tiers_chunk(const exec_stage *st, int D, int c,
                     size_t lo[EXEC_TIER_PIECES], size_t n[EXEC_TIER_PIECES])
{
    /* the segments' bounds: the tables' slices in arena order */
    size_t seg[EXEC_TIER_PIECES + 1];
    int ns = 0;
    seg[ns++] = 0;
    for (int g = 0; g < 3 && D > 1; g++) {
        int k = exec_stage_table_sl(st, g);
        if (k < 0) continue;
        size_t a = st->sl[k].off, b = a + st->sl[k].n;
        int at = ns;
        while (at > 1 && seg[at - 1] > a) at--;
        memmove(seg + at + 2, seg + at, sizeof *seg * (size_t)(ns - at));
        seg[at] = a;
        seg[at + 1] = b;
        ns += 2;
    }
    seg[ns++] = st->n;
    int np = 0;
    for (int k = 0; k + 1 < ns; k++) {
        size_t len = seg[k + 1] - seg[k];
        size_t a = len * (size_t)c / (size_t)D;
        size_t b = len * (size_t)(c + 1) / (size_t)D;
        if (b > a) {
            lo[np] = seg[k] + a;
            n[np++] = b - a;
        }
    }
    return np;
}

/* Where chunk c of D of the frozen arena starts: at the first frozen
 * slice from c/D of it on (whole slices: a 4-bit block's codes
 * dequantize together). */
static size_t frozen_cut(const exec_stage *st, int D, int c)
{
    size_t nf = st->n_frozen, at = nf * (size_t)c / (size_t)D, cut = nf;
    if (c <= 0) return 0;
    if (c >= D) return nf;
    for (int i = 0; i < st->n_sl; i++)
        if (st->sl[i].frozen && st->sl[i].off >= at && st->sl[i].off < cut)
            cut = st->sl[i].off;
    return cut;
}

void exec_tiers_frozen_chunk(const exec_stage *st, int D, int c, size_t *lo,
                             size_t *n)
{
    *lo = frozen_cut(st, D, c);
    *n = frozen_cut(st, D, c + 1) - *lo;
}

/* The data-parallel ranks of the run (1: one device). */
static int ranks(const exec_tiers *t)
{
    return t->w->rt->dp > 1 ? t->w->rt->dp : 1;
}

/* The part of slice sl in piece k of the share: its floats (0: none),
 * from host offset *h. */
static size_t sl_piece(const tier_stage *s, const exec_slice *sl, int k,
                       size_t *h)
{
    size_t a = sl->off > s->plo[k] ? sl->off : s->plo[k];
    size_t b = sl->off + sl->n, pe = s->plo[k] + s->pn[k];
    if (pe < b) b = pe;
    if (b <= a) return 0;
    *h = s->ph[k] + (a - s->plo[k]);
    return b - a;
}

/* The rank's share of stage st (its replica's chunk); of each tied table,
 * the piece of it the share holds (a piece of its own with several ranks,
 * exec_tiers_chunk). */
static void share_set(exec_tiers *t, tier_stage *s, const exec_stage *st)
{
    int D = ranks(t);
    s->np = exec_tiers_chunk(st, D, (st->replica + 1) % D, s->plo, s->pn);
    s->hn = 0;
    for (int k = 0; k < s->np; k++) {
        s->ph[k] = s->hn;
        s->hn += s->pn[k];
    }
    for (int g = 0; g < 3; g++) {
        s->tlo[g] = s->th[g] = s->tn[g] = 0;
        int sl = exec_stage_table_sl(st, g);
        for (int k = 0; sl >= 0 && k < s->np; k++) {
            size_t h, n = sl_piece(s, &st->sl[sl], k, &h);
            if (!n) continue;
            s->th[g] = h;
            s->tn[g] = n;
            s->tlo[g] = s->plo[k] + (h - s->ph[k]);
        }
    }
}

/* The share of a whole arena (h, st->n floats) into dst (s->hn), or
 * back (dst's pieces into the arena h). */
static void share_take(const tier_stage *s, const float *h, float *dst)
{
    for (int k = 0; k < s->np; k++)
        memcpy(dst + s->ph[k], h + s->plo[k], s->pn[k] * sizeof *dst);
}

static void share_put(const tier_stage *s, const float *src, float *h)
{
    for (int k = 0; k < s->np; k++)
        memcpy(h + s->plo[k], src + s->ph[k], s->pn[k] * sizeof *h);
}

/* The share between the host (h, its hn floats) and a device arena d of
 * the whole stage (up: to the device). */
static void share_copy(exec_tiers *t, const tier_stage *s, int up, float *d,
                       float *h)
{
    for (int k = 0; k < s->np; k++) {
        if (up) copy_timed(t, 1, d + s->plo[k], h + s->ph[k], s->pn[k]);
        else copy_timed(t, 0, h + s->ph[k], d + s->plo[k], s->pn[k]);
    }
}

/* The tables a stage holds a copy of that another holder steps (a mask
 * of 1 << g), steps (steps 1), or either (steps -1) */
static unsigned tabs_of(const exec_tiers *t, const exec_stage *st, int li,
                        int steps)
{
    unsigned m = 0;
    for (int g = 0; g < 3; g++) {
        const struct tier_tab *b = &t->tab[g];
        if (exec_stage_table_sl(st, g) < 0 || b->step < 0) continue;
        if (steps < 0 || (steps == 1) == (b->step == li)) m |= 1u << g;
    }
    return m;
}

/* The share onto the device but for its pieces of the tables in mask
 * `skip`, which come from each table's host copy (the one stepped) where
 * `tables` says, or are left to the holder that steps it (0): each float
 * crosses once. */
static void share_up_but_tables(exec_tiers *t, const tier_stage *s, float *d,
                                const float *h, unsigned skip, int tables)
{
    for (int k = 0; k < s->np; k++) {
        size_t lo = s->plo[k], hi = lo + s->pn[k], at = lo;
        /* the gaps between the skipped pieces, in arena order */
        while (at < hi) {
            size_t next = hi, after = hi;
            for (int g = 0; g < 3; g++) {
                if (!(skip >> g & 1) || !s->tn[g]) continue;
                size_t a = s->tlo[g], b = a + s->tn[g];
                if (b > at && a < next) next = a > at ? a : at, after = b;
            }
            if (next > at)
                copy_timed(t, 1, d + at, h + s->ph[k] + (at - lo),
                           (next < hi ? next : hi) - at);
            at = after < hi ? after : hi;
            if (next >= hi) break;
        }
    }
    for (int g = 0; g < 3 && tables; g++)
        if ((skip >> g & 1) && s->tn[g] && t->tab[g].w)
            copy_timed(t, 1, d + s->tlo[g], t->tab[g].w, s->tn[g]);
}

static int has_dep_kind(const sim_ir *ir, int id, int kind)
{
    const sim_task *t = &ir->tasks[id];
    for (int k = 0; k < t->n_dep; k++)
        if (ir->tasks[ir->deps[t->dep_off + k]].kind == kind) return 1;
    return 0;
}

static int has_succ_kind(const sim_ir *ir, int id, int kind)
{
    for (int k = ir->succ_off[id]; k < ir->succ_off[id + 1]; k++)
        if (ir->tasks[ir->succ[k]].kind == kind) return 1;
    return 0;
}

/* What each tier task of the device is, which weights and gradient
 * buffers each compute task uses and ends. */
static void roles_build(exec_tiers *t)
{
    exec_worker *w = t->w;
    const sim_ir *ir = w->rt->ir;
    int n = ir->n_tasks;
    t->role = util_calloc((size_t)n + 1, 1);
    t->galloc = util_calloc((size_t)n + 1, 1);
    t->gend = util_calloc((size_t)n + 1, 1);
    t->win = util_malloc(sizeof(int) * (size_t)(n + 1));
    t->wrel = util_malloc(sizeof(int) * (size_t)(n + 1));
    t->wbuf = util_calloc((size_t)n + 1, sizeof *t->wbuf);
    t->wbuff = util_calloc((size_t)n + 1, sizeof *t->wbuff);
    t->stg = util_calloc((size_t)n + 1, sizeof *t->stg);
    t->stgf = util_calloc((size_t)n + 1, sizeof *t->stgf);
    t->rd_for = util_malloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        t->win[i] = t->wrel[i] = t->rd_for[i] = -1;
        const sim_task *k = &ir->tasks[i];
        if (k->device != w->device) continue;
        int act = k->mb >= 0;
        switch (k->kind) {
        case SIM_SWAP_OUT: t->role[i] = act ? R_A_OUT : R_G_OUT; break;
        case SIM_SWAP_IN:
            t->role[i] = act ? R_A_IN
                       : has_dep_kind(ir, i, SIM_CPU_OPT) ? R_W_PUSH : R_W_IN;
            break;
        case SIM_NVME_READ:
            t->role[i] = act ? R_A_READ
                       : has_succ_kind(ir, i, SIM_CPU_OPT) ? R_OPT_READ
                                                           : R_W_READ;
            break;
        case SIM_NVME_WRITE: t->role[i] = act ? R_A_WRITE : R_OPT_WRITE; break;
        case SIM_CPU_OPT: t->role[i] = R_OPT; break;
        default: break;
        }
    }
    for (int b = 0; b < ir->n_bufs; b++) {
        const sim_ir_buf *x = &ir->bufs[b];
        if (x->hole || x->device != w->device) continue;
        if (t->role[x->alloc] == R_W_IN) t->wrel[x->release] = x->alloc;
        if (t->role[x->release] == R_G_OUT) t->galloc[x->alloc] = 1;
    }
    for (int i = 0; i < n; i++)
        if (t->role[i] == R_W_READ)
            for (int k = ir->succ_off[i]; k < ir->succ_off[i + 1]; k++)
                if (t->role[ir->succ[k]] == R_W_IN) t->rd_for[i] = ir->succ[k];
    for (int i = 0; i < n; i++)
        if (t->role[i] == R_G_OUT ||
            (ir->tasks[i].device == w->device &&
             ir->tasks[i].kind == SIM_SEND &&
             ir->tasks[i].comm == SIM_COMM_DP &&
             ir->tasks[i].coll == SIM_COLL_REDUCE_SCATTER)) {
            /* the backward whose gradient goes: to the host, or first to
             * the ranks' reduce-scatter */
            const sim_task *k = &ir->tasks[i];
            for (int d = 0; d < k->n_dep; d++) {
                int j = ir->deps[k->dep_off + d];
                if (ir->tasks[j].stream == SIM_STREAM_COMPUTE) t->gend[j] = 1;
            }
        }
    /* a group's first compute task waits for its fetch; the others of the
     * stage after it use the same weights */
    int *cur = util_malloc(sizeof(int) * (size_t)(ir->n_stages + 1));
    for (int s = 0; s < ir->n_stages; s++) cur[s] = -1;
    for (int c = 0; c < w->n_comp; c++) {
        int id = w->comp[c];
        const sim_task *k = &ir->tasks[id];
        for (int d = 0; d < k->n_dep; d++) {
            int j = ir->deps[k->dep_off + d];
            const sim_task *u = &ir->tasks[j];
            if (t->role[j] == R_W_IN && u->stage == k->stage)
                cur[k->stage] = j;
            /* with several ranks it waits for the gather of the ranks'
             * shares, after its fetch (the stage's last before it) */
            if (u->comm == SIM_COMM_DP && u->coll == SIM_COLL_ALLGATHER &&
                (u->kind == SIM_RECV ? u->stage2 : u->stage) == k->stage)
                for (int f = j; f >= 0; f--)
                    if (t->role[f] == R_W_IN &&
                        ir->tasks[f].stage == k->stage) {
                        cur[k->stage] = f;
                        break;
                    }
        }
        t->win[id] = cur[k->stage];
    }
    free(cur);
}

int exec_tiers_open(exec_worker *w, util_err *e)
{
    exec_runtime *rt = w->rt;
    if (rt->tp > 1 || rt->n_workers != (rt->dp > 1 ? rt->dp : 1))
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s runs a device per "
                         "data-parallel rank and one tensor-parallel rank",
                         sim_sched_name(rt->plan->sched));
    if (rt->tier_sched == SIM_SCHED_FUYOU && rt->adamw.clip > 0)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule fuyou updates each "
                         "layer during the backward pass, before the global "
                         "gradient norm is known: give --clip 0 "
                         "(zero-offload and zero-infinity clip)");
    exec_tiers *t = util_calloc(1, sizeof *t);
    w->tiers = t;
    t->w = w;
    t->sched = rt->tier_sched;
    t->tier = rt->tier;
    t->act_tier = rt->act_tier;
    for (int g = 0; g < 3; g++) t->tab[g].step = -1;
    t->norm_epoch = -1;
    t->threads = exec_host_threads(rt);
    pthread_mutex_init(&t->mu, NULL);
    exec_tfile_init(&t->f);
    roles_build(t);
    t->ts = util_calloc((size_t)rt->S + 1, sizeof *t->ts);
    t->act = util_calloc((size_t)rt->S * (size_t)rt->M + 1, sizeof *t->act);
    if ((t->tier == SIM_TIER_NVME || t->act_tier == SIM_TIER_NVME) &&
        exec_tfile_open(&t->f, rt->offload.path,
                        rt->offload.full_after_bytes, e))
        return -1;
    return 0;
}

/* Reads (wr 0) or writes region k (0 weights, 1 m, 2 v) of a stage. */
static int region_io(exec_tiers *t, tier_stage *s, int wr, int k, float *h,
                     util_err *e)
{
    return exec_tfile_io(&t->f, wr, h, s->rb,
                         s->foff + (int64_t)k * (int64_t)s->rb, e);
}

int exec_tiers_stage_add(exec_worker *w, exec_stage *st,
                         const exec_parr *wsrc, const float *adam_m,
                         const float *adam_v, util_err *e)
{
    exec_tiers *t = w->tiers;
    int li = w->lidx[st->id];
    tier_stage *s = &t->ts[li];
    s->st = st;
    size_t nf = st->n_frozen;
    share_set(t, s, st);
    s->rb = exec_tfile_up(s->hn * sizeof(float));
    float *hf = nf ? host_new(t, nf) : NULL;
    if (hf) memset(hf, 0, exec_tfile_up(nf * sizeof(float)));
    const float *src[3] = {wsrc->p, adam_m, adam_v};
    float *h[3], *whole = host_new(t, st->n);
    for (int k = 0; k < 3; k++) {
        memset(whole, 0, exec_tfile_up(st->n * sizeof(float)));
        /* the adapters start from theirs, their moments from zero */
        exec_parr a = {wsrc->tt, wsrc->lt, (float *)src[k],
                       k ? NULL : wsrc->lora};
        exec_stage_gather(st, &a, whole, k ? NULL : hf);
        h[k] = host_new(t, s->hn);
        memset(h[k], 0, s->rb);
        share_take(s, whole, h[k]);
        /* zero-offload's weights on the device: all of them */
        if (!k && t->sched == SIM_SCHED_ZERO_OFFLOAD) {
            EXEC_KERN(w, s->res = exec_buf_new(&w->mem, st->n, 0));
            if (s->res)
                w->rt->be->from_host(s->res->p, whole,
                                     st->n * sizeof(float));
        }
    }
    host_free(t, &whole, st->n);
    for (int g = 0; g < 3; g++) {
        struct tier_tab *b = &t->tab[g];
        if (exec_stage_table_sl(st, g) < 0) continue;
        /* every holder's share of the table is alike */
        b->hold = util_realloc(b->hold, sizeof(int) * (size_t)(b->n_hold + 1));
        b->hold[b->n_hold++] = li;
        b->n = s->tn[g];
        if (!b->w && b->n) {
            b->w = host_new(t, b->n);
            memcpy(b->w, h[0] + s->th[g], b->n * sizeof(float));
            host_pin(t, b->w, b->n);
        }
    }
    if (t->sched == SIM_SCHED_ZERO_OFFLOAD) {
        /* its weights stay on the device, the frozen ones too */
        if (s->res && nf) {
            EXEC_KERN(w, s->resf = exec_buf_new(&w->mem, nf, 0));
            if (s->resf)
                w->rt->be->from_host(s->resf->p, hf, nf * sizeof(float));
        }
        if (!s->res || (nf && !s->resf)) {
            for (int k = 0; k < 3; k++) host_free(t, &h[k], s->hn);
            host_free(t, &hf, nf);
            return exec_oom(w, s->res ? "a stage's resident frozen weights "
                            "(zero-offload)" : "a stage's resident weights "
                            "(zero-offload)", e);
        }
        host_free(t, &hf, nf);
    }
    /* fetched, the frozen weights are shared out like the rest (the
     * ranks' ring gathers them with the others) */
    s->fn = nf;
    if (hf && ranks(t) > 1) {
        int D = ranks(t);
        exec_tiers_frozen_chunk(st, D, (st->replica + 1) % D, &s->flo,
                                &s->fn);
        float *part = host_new(t, s->fn);
        memcpy(part, hf + s->flo, s->fn * sizeof *part);
        host_free(t, &hf, nf);
        hf = part;
    }
    s->rbf = hf ? exec_tfile_up(s->fn * sizeof(float)) : 0;
    if (t->tier != SIM_TIER_NVME) {
        s->hw = h[0];
        s->hm = h[1];
        s->hv = h[2];
        s->hwf = hf;
        host_pin(t, s->hw, s->hn);
        host_pin(t, s->hwf, s->fn);
        return 0;
    }
    s->foff = exec_tfile_grow(&t->f, 3 * s->rb);
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) rc = region_io(t, s, 1, k, h[k], e);
    if (hf) {
        s->foff_f = exec_tfile_grow(&t->f, s->rbf);
        if (!rc) rc = exec_tfile_io(&t->f, 1, hf, s->rbf, s->foff_f, e);
        host_free(t, &hf, s->fn);
    }
    for (int k = 0; k < 3; k++) host_free(t, &h[k], s->hn);
    /* setting up is not the run's traffic */
    pthread_mutex_lock(&t->f.mu);
    t->f.wr_bytes = t->f.wr_ns = 0;
    pthread_mutex_unlock(&t->f.mu);
    return rc;
}

/* The holder of a tied table whose step comes last in the IR steps it:
 * by then every copy's gradient is on the host. */
int exec_tiers_ready(exec_worker *w, util_err *e)
{
    exec_tiers *t = w->tiers;
    const sim_ir *ir = w->rt->ir;
    (void)e;
    for (int g = 0; g < 3; g++) {
        struct tier_tab *b = &t->tab[g];
        for (int i = 0; i < ir->n_tasks && b->n_hold > 1; i++)
            if (t->role[i] == R_OPT)
                for (int k = 0; k < b->n_hold; k++)
                    if (w->lidx[ir->tasks[i].stage] == b->hold[k])
                        b->step = b->hold[k];
        /* one holder steps and fetches its own copy */
        if (b->step < 0) host_free_pinned(t, &b->w, b->n);
        /* in DRAM the stepping holder's weights are the newest table:
         * the others' fetches read them there (each after the step, as
         * they read the copy before) */
        if (b->w && t->tier != SIM_TIER_NVME) {
            host_free_pinned(t, &b->w, b->n);
            const tier_stage *o = &t->ts[b->step];
            b->w = o->hw + o->th[g];
            b->own = 1;
        }
    }
    /* each stage's fetches in order: the k-th gather of its weights
     * between the ranks fills the k-th fetch's */
    for (int i = 0; i < ir->n_tasks; i++) {
        if (t->role[i] != R_W_IN) continue;
        tier_stage *s = &t->ts[w->lidx[ir->tasks[i].stage]];
        s->fk = util_realloc(s->fk, sizeof(int) * (size_t)(s->n_fk + 1));
        s->fk[s->n_fk++] = i;
    }
    /* the run's peak: not the copies that put the states in place (a
     * frozen stage's weights on their way to zero-offload's device) */
    pthread_mutex_lock(&w->rt->host_mu);
    w->rt->host_peak = w->rt->host_cur;
    pthread_mutex_unlock(&w->rt->host_mu);
    return 0;
}

typedef struct par_arg {
    void (*fn)(void *ctx, int part, int n);
    void *ctx;
    int part, n;
} par_arg;

static void *par_main(void *arg)
{
    par_arg *a = arg;
    a->fn(a->ctx, a->part, a->n);
    return NULL;
}

void exec_host_par(int threads, void (*fn)(void *, int, int), void *ctx)
{
    int n = threads < 1 ? 1 : threads > EXEC_HOST_MAX_THREADS
          ? EXEC_HOST_MAX_THREADS : threads;
    pthread_t th[EXEC_HOST_MAX_THREADS];
    par_arg a[EXEC_HOST_MAX_THREADS];
    int started = 1;
    for (int p = 1; p < n; p++) {
        a[p] = (par_arg){fn, ctx, p, n};
        if (pthread_create(&th[p], NULL, par_main, &a[p])) break;
        started++;
    }
    /* parts whose thread did not start run here */
    fn(ctx, 0, n);
    for (int p = started; p < n; p++) fn(ctx, p, n);
    for (int p = 1; p < started; p++) pthread_join(th[p], NULL);
}

void exec_part_range(size_t len, int p, int n, size_t *lo, size_t *hi)
{
    *lo = len / (size_t)n * (size_t)p + (len % (size_t)n < (size_t)p
                                         ? len % (size_t)n : (size_t)p);
    *hi = *lo + len / (size_t)n + ((size_t)p < len % (size_t)n);
}

int exec_host_threads_for(int requested)
{
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    int n = requested > 0 ? requested : nc > 2 ? (int)(nc - 1) : 1;
    return n > EXEC_HOST_MAX_THREADS ? EXEC_HOST_MAX_THREADS : n;
}

int exec_host_threads(const exec_runtime *rt)
{
    return exec_host_threads_for(rt->offload.host_threads);
}

/* ------------------------------------------------------ compute side */

int exec_tiers_bind(exec_worker *w, int id, exec_stage *st, util_err *e)
{
    exec_tiers *t = w->tiers;
    tier_stage *s = &t->ts[w->lidx[st->id]];
    int f = t->win[id];
    exec_buf *b = f >= 0 ? t->wbuf[f] : s->res;
    if (!b)
        return util_errf(e, UTIL_EXIT_FAIL, "the stage's weights are not on "
                         "the device (no fetch before it)");
    st->w[0] = b->p;
    exec_buf *bf = f >= 0 ? t->wbuff[f] : s->resf;
    if (st->n_frozen && !bf)
        return util_errf(e, UTIL_EXIT_FAIL, "the stage's frozen weights are "
                         "not on the device");
    st->wf = bf ? bf->p : NULL;
    if (t->galloc[id]) {
        exec_buf *g;
        EXEC_KERN(w, g = exec_buf_new(&w->mem, st->n, 1));
        if (!g) return exec_oom(w, "a stage's gradients", e);
        pthread_mutex_lock(&t->mu);
        if (s->gq_n == s->gq_cap)
            s->gq = util_realloc(s->gq, sizeof *s->gq *
                                 (size_t)(s->gq_cap = 2 * s->gq_cap + 2));
        s->gq[s->gq_n++] = g;
        pthread_mutex_unlock(&t->mu);
        st->g = g->p;
    }
    return 0;
}

void exec_tiers_after(exec_worker *w, int id, exec_stage *st)
{
    exec_tiers *t = w->tiers;
    if (t->gend[id]) st->g = NULL;
    int f = t->wrel[id];
    if (f >= 0) {
        exec_buf_unref(t->wbuf[f]);
        exec_buf_unref(t->wbuff[f]);
        t->wbuf[f] = t->wbuff[f] = NULL;
        st->w[0] = NULL;
        st->wf = NULL;
    }
}

/* --------------------------------------------------------- the tasks */

/* A fetch: the stage's weights onto the device, with a tied table's
 * newest weights where the stage holds a copy it does not step. */
static int task_w_in(exec_tiers *t, int id, tier_stage *s, util_err *e)
{
    exec_worker *w = t->w;
    exec_stage *st = s->st;
    exec_buf *b = exec_buf_new(&w->mem, st->n, 0);
    if (!b) return exec_oom(w, "a stage's fetched weights", e);
    const float *src = s->hw;
    if (t->tier == SIM_TIER_NVME) {
        if (!t->stg[id]) {
            exec_buf_unref(b);
            return util_errf(e, UTIL_EXIT_FAIL, "a fetch without its read");
        }
        src = t->stg[id];
    }
    /* the rank's share (the ring between the ranks brings the rest) */
    unsigned held = tabs_of(t, st, w->lidx[st->id], -1);
    if (held) share_up_but_tables(t, s, b->p, src, held, 1);
    else share_copy(t, s, 1, b->p, (float *)src);
    if (t->tier == SIM_TIER_NVME) host_free(t, &t->stg[id], s->hn);
    UTIL_NEVER(t->wbuf[id] != NULL || t->wbuff[id] != NULL);
    t->wbuf[id] = b;
    size_t nf = st->n_frozen;
    if (!nf) return 0;
    /* the frozen weights come with the rest (the IR's fetch moves the
     * stage's weights, frozen ones included) */
    const float *srcf = t->tier == SIM_TIER_NVME ? t->stgf[id] : s->hwf;
    if (!srcf)
        return util_errf(e, UTIL_EXIT_FAIL, "a fetch without its frozen "
                         "weights' read");
    exec_buf *bf = exec_buf_new(&w->mem, nf, 0);
    if (!bf) return exec_oom(w, "a stage's fetched frozen weights", e);
    copy_timed(t, 1, bf->p + s->flo, srcf, s->fn);
    if (t->tier == SIM_TIER_NVME) host_free(t, &t->stgf[id], s->fn);
    t->wbuff[id] = bf;
    return 0;
}

/* Zero-offload's new weights onto the device, where they stay; the
 * stepping holder of a tied table brings the new table to the other
 * holders' copies too (they push the rest of their shares). */
static int task_w_push(exec_tiers *t, tier_stage *s)
{
    exec_stage *st = s->st;
    float *h = t->tier == SIM_TIER_NVME ? s->so[0] : s->hw;
    int li = t->w->lidx[st->id];
    unsigned steps = tabs_of(t, st, li, 1), others = tabs_of(t, st, li, 0);
    /* a holder of a table that does not step it pushed the table as it
     * was: the one stepping it brings the new one */
    unsigned skip = 0;
    for (int g = 0; g < 3; g++)
        if ((others >> g & 1) && t->tab[g].w) skip |= 1u << g;
    if (skip) share_up_but_tables(t, s, s->res->p, h, skip, 0);
    else share_copy(t, s, 1, s->res->p, h);
    for (int g = 0; g < 3; g++) {
        const struct tier_tab *b = &t->tab[g];
        if (!(steps >> g & 1) || !b->w) continue;
        for (int k = 0; k < b->n_hold; k++) {
            tier_stage *o = &t->ts[b->hold[k]];
            if (o != s)
                copy_timed(t, 1, o->res->p + o->tlo[g], b->w, b->n);
        }
    }
    return 0;
}

typedef struct sum_ctx {
    const float **g;
    int n_g;
    float *dst;
    size_t n;
} sum_ctx;

/* Part p of n of the sum, element by element in the copies' order (the
 * destination, one of them, is read before it is written). */
static void sum_part(void *ctx, int p, int n)
{
    sum_ctx *c = ctx;
    size_t lo, hi;
    exec_part_range(c->n, p, n, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        float a = c->g[0][i];
        for (int k = 1; k < c->n_g; k++) a += c->g[k][i];
        c->dst[i] = a;
    }
}

/* The oldest gradient buffer of the stage to the host (with several
 * ranks, the share its reduce-scatter reduced, the ring's last step
 * folded in first). */
static int task_g_out(exec_tiers *t, int id, tier_stage *s, util_err *e)
{
    if (ranks(t) > 1 && exec_rt_fold(t->w, id, e)) return -1;
    pthread_mutex_lock(&t->mu);
    exec_buf *g = s->gq_n ? s->gq[0] : NULL;
    if (g) {
        memmove(s->gq, s->gq + 1, sizeof *s->gq * (size_t)(s->gq_n - 1));
        s->gq_n--;
        s->g_out++;
    }
    pthread_mutex_unlock(&t->mu);
    if (!g)
        return util_errf(e, UTIL_EXIT_FAIL, "a gradient copy without its "
                         "backward");
    if (!s->g_set) {
        if (!s->hg) s->hg = grad_get(t, s->hn);
        share_copy(t, s, 0, g->p, s->hg);
        s->g_set = 1;
    } else {
        if (!t->hgt) {
            for (int li = 0; li < t->w->rt->S; li++)
                if (t->ts[li].hn > t->hgt_n) t->hgt_n = t->ts[li].hn;
            t->hgt = host_new(t, t->hgt_n);
            host_pin(t, t->hgt, t->hgt_n);
        }
        share_copy(t, s, 0, g->p, t->hgt);
        const float *two[2] = {s->hg, t->hgt};
        sum_ctx c = {two, 2, s->hg, s->hn};
        exec_host_par(t->threads, sum_part, &c);
    }
    exec_buf_unref(g);
    return 0;
}

/* Squares of the gradients a step counts in the norm: its slices in
 * order (one copy of what is replicated), a tied table where it is
 * stepped (the copies' sum by then). */
typedef struct norm_ctx {
    const exec_tiers *t;
    const tier_stage *s;
    int li;
    double sum[EXEC_HOST_MAX_THREADS];
} norm_ctx;

static void norm_part(void *ctx, int p, int n)
{
    norm_ctx *c = ctx;
    const exec_stage *st = c->s->st;
    double sum = 0;
    c->sum[p] = 0;
    if (!c->s->hg) return;      /* no gradient came: zero */
    for (int k = 0; k < st->n_sl; k++) {
        const exec_slice *sl = &st->sl[k];
        int tied = -1;
        for (int g = 0; g < 3; g++)
            if (k == exec_stage_table_sl(st, g) && c->t->tab[g].n_hold > 1) tied = g;
        if (sl->frozen) continue;
        if (tied >= 0 ? c->li != c->t->tab[tied].step : !sl->norm_owner)
            continue;
        for (int q = 0; q < c->s->np; q++) {
            size_t h, len = sl_piece(c->s, sl, q, &h), lo, hi;
            const float *g = c->s->hg + h;
            exec_part_range(len, p, n, &lo, &hi);
            /* four sums at once: one would wait on each add (the pass
             * took as long as AdamW over the same floats) */
            double a[4] = {0, 0, 0, 0};
            size_t i = lo;
            for (; i + 4 <= hi; i += 4)
                for (int j = 0; j < 4; j++)
                    a[j] += (double)g[i + j] * g[i + j];
            for (; i < hi; i++) a[0] += (double)g[i] * g[i];
            sum += (a[0] + a[1]) + (a[2] + a[3]);
        }
    }
    c->sum[p] = sum;
}

static double stage_norm_sq(const exec_tiers *t, const tier_stage *s, int li)
{
    norm_ctx c = {.t = t, .s = s, .li = li};
    exec_host_par(t->threads, norm_part, &c);
    double sum = 0;
    for (int p = 0; p < t->threads; p++) sum += c.sum[p];
    return sum;
}

/* The copies of tied table g's gradient summed in stage order into the
 * stepping holder's, in place and on the step's threads (the others'
 * copies, which no norm and no step reads, are left as they are). */
static void tab_sum(exec_tiers *t, int g)
{
    const struct tier_tab *b = &t->tab[g];
    if (b->n_hold < 2 || b->step < 0) return;
    const float **gs = util_malloc(sizeof *gs * (size_t)b->n_hold);
    sum_ctx c = {.g = gs, .n = b->n};
    for (int k = 0; k < b->n_hold; k++) {
        tier_stage *s = &t->ts[b->hold[k]];
        const float *p = s->hg ? s->hg + s->th[g]
                               : s->tgk_on[g] ? s->tgk[g] : NULL;
        if (p) gs[c.n_g++] = p;         /* none came: zero */
    }
    tier_stage *s = &t->ts[b->step];
    grad_zero(t, s);
    c.dst = s->hg + s->th[g];
    if (c.n_g) exec_host_par(t->threads, sum_part, &c);
    else memset(c.dst, 0, c.n * sizeof *c.dst);
    free(gs);
}

/* Whether a stage's step updates its slice k: not a frozen one, nor a
 * tied table where another holder steps it. */
static int opt_steps(const exec_tiers *t, const exec_stage *st, int li, int k)
{
    if (st->sl[k].frozen) return 0;
    for (int g = 0; g < 3; g++)
        if (k == exec_stage_table_sl(st, g) && t->tab[g].n_hold > 1 &&
            li != t->tab[g].step)
            return 0;
    return 1;
}

typedef struct opt_ctx {
    const exec_tiers *t;
    tier_stage *s;
    int li;
    float *h[3];
    int step;
    float lr;
} opt_ctx;

/* Part p of n of every slice the step updates: the CPU's kernel,
 * elementwise, so the parts' bits are the whole's. */
static void opt_part(void *ctx, int p, int n)
{
    opt_ctx *c = ctx;
    const exec_stage *st = c->s->st;
    const exec_adamw *a = &c->t->w->rt->adamw;
    for (int k = 0; k < st->n_sl; k++) {
        const exec_slice *sl = &st->sl[k];
        if (!opt_steps(c->t, st, c->li, k)) continue;
        for (int q = 0; q < c->s->np; q++) {
            size_t h, len = sl_piece(c->s, sl, q, &h), lo, hi;
            exec_part_range(len, p, n, &lo, &hi);
            size_t o = h + lo;
            if (hi > lo)
                kern_cpu.adamw_update(c->h[0] + o, c->h[1] + o, c->h[2] + o,
                                      c->s->hg + o, hi - lo, c->lr, a->beta1,
                                      a->beta2, a->eps,
                                      sl->decay ? a->weight_decay : 0.0f,
                                      c->t->scale, c->step + 1);
        }
    }
}

/* The CPU's AdamW on a stage: on the DRAM states or on what the drive's
 * read staged. ZeRO's first step of an iteration finds every gradient on
 * the host: it sums the tied table's copies and sets the norm and the
 * clipping factor for all. */
static int task_opt(exec_tiers *t, int id, int epoch, tier_stage *s,
                    util_err *e)
{
    exec_worker *w = t->w;
    const exec_runtime *rt = w->rt;
    exec_stage *st = s->st;
    int li = w->lidx[st->id];
    int fuyou = t->sched == SIM_SCHED_FUYOU;
    (void)id;
    if (t->norm_epoch != epoch) {
        t->norm_epoch = epoch;
        t->norm_sq = 0;
        t->scale = 1.0f;
        if (!fuyou) {
            for (int g = 0; g < 3; g++) tab_sum(t, g);
            for (int k = 0; k < w->n_st; k++)
                t->norm_sq += stage_norm_sq(t, &t->ts[k], k);
            /* every rank's shares: each waits here for the others'
             * gradients, as the IR's step waits for every copy */
            exec_runtime *x = w->rt;
            if (ranks(t) > 1 &&
                x->x->allreduce(x->x, x, w->id, EXEC_GROUP_WORLD,
                                &t->norm_sq, 1, 1, e))
                return -1;
            double norm = sqrt(t->norm_sq);
            if (rt->adamw.clip > 0 && norm > rt->adamw.clip)
                t->scale = (float)(rt->adamw.clip / norm);
        }
    }
    if (fuyou) {
        for (int g = 0; g < 3; g++) {
            const struct tier_tab *b = &t->tab[g];
            if (li != b->step) continue;
            tab_sum(t, g);
            /* the other holders' pieces waited for this sum */
            for (int k = 0; k < b->n_hold; k++)
                if (b->hold[k] != li) t->ts[b->hold[k]].tgk_on[g] = 0;
        }
        t->norm_sq += stage_norm_sq(t, s, li);
    }
    grad_zero(t, s);
    float *h[3] = {s->hw, s->hm, s->hv};
    if (t->tier == SIM_TIER_NVME) {
        for (int k = 0; k < 3; k++) h[k] = s->so[k];
        if (!h[0])
            return util_errf(e, UTIL_EXIT_FAIL, "a step without its read");
    }
    int step = rt->step0 + epoch - 1;
    int64_t t0 = (int64_t)exec_now_ns();
    /* the parameters it steps: its slices' parts in the rank's share */
    size_t n = 0, ho;
    for (int k = 0; k < st->n_sl; k++)
        for (int q = 0; opt_steps(t, st, li, k) && q < s->np; q++)
            n += sl_piece(s, &st->sl[k], q, &ho);
    opt_ctx oc = {t, s, li, {h[0], h[1], h[2]}, step,
                  exec_lr_at(rt->adamw.lr, rt->warmup, rt->total_steps,
                             step)};
    exec_host_par(t->threads, opt_part, &oc);
    for (int g = 0; g < 3; g++) {
        const struct tier_tab *b = &t->tab[g];
        if (li == b->step && b->w && !b->own)
            memcpy(b->w, h[0] + s->th[g], b->n * sizeof(float));
    }
    pthread_mutex_lock(&t->mu);
    t->adam_ns += (double)((int64_t)exec_now_ns() - t0);
    t->adam_params += (double)n;
    pthread_mutex_unlock(&t->mu);
    /* done with the gradient (the next first copy sets a buffer whole),
     * but for its piece of a tied table that a later step sums, which
     * waits for it apart (the table's floats, not the stage's) */
    for (int g = 0; g < 3 && fuyou && s->hg; g++) {
        const struct tier_tab *b = &t->tab[g];
        if (exec_stage_table_sl(st, g) < 0 || b->n_hold < 2 || li == b->step) continue;
        UTIL_NEVER(s->tgk_on[g]);
        if (!s->tgk[g]) s->tgk[g] = host_new(t, b->n);
        memcpy(s->tgk[g], s->hg + s->th[g], b->n * sizeof(float));
        s->tgk_on[g] = 1;
    }
    grad_put(t, &s->hg);
    s->g_set = 0;
    pthread_mutex_lock(&t->mu);
    s->g_out = 0;
    pthread_mutex_unlock(&t->mu);
    return 0;
}

/* ----------------------------------------------- swapped activations */

static exec_rec *task_rec(exec_worker *w, const sim_task *k)
{
    return w->rec[w->lidx[k->stage]][SLOT(w->rt, k->minibatch, k->mb)];
}

static tier_act *task_act(exec_tiers *t, const sim_task *k)
{
    return &t->act[(size_t)t->w->lidx[k->stage] * (size_t)t->w->rt->M +
                   (size_t)k->mb];
}

/* Notes view v of a record (its buffer among bufs, *nb so far). */
static void act_ref(tier_act *a, exec_view *v, exec_buf ***bufs, int *nb)
{
    if (!v->b) return;
    int i = 0;
    while (i < *nb && (*bufs)[i] != v->b) i++;
    if (i == *nb) {
        *bufs = util_realloc(*bufs, sizeof **bufs * (size_t)(i + 1));
        (*bufs)[(*nb)++] = v->b;
    }
    a->ref = util_realloc(a->ref, sizeof *a->ref * (size_t)(a->n_ref + 1));
    a->ref[a->n_ref++] = (tier_ref){v, i, v->off, v->n};
}

/* What the record keeps for its backward leaves the device: each buffer
 * it refers to copied to the host once, its views dropped. A buffer also
 * held elsewhere (an output the next stage reads too) stays until that
 * holder drops it, and comes back as a copy of the record's own. */
static int task_a_out(exec_tiers *t, const sim_task *k, util_err *e)
{
    exec_worker *w = t->w;
    exec_rec *r = task_rec(w, k);
    tier_act *a = task_act(t, k);
    if (!r || a->n_ref)
        return util_errf(e, UTIL_EXIT_FAIL, "an activation swap without "
                         "its forward");
    const exec_stage *st = &w->st[w->lidx[k->stage]];
    exec_buf **bufs = NULL;
    int nb = 0;
    for (int i = 0; i < st->n_ops; i++) {
        act_ref(a, &r->out[i], &bufs, &nb);
        act_ref(a, &r->aux[i], &bufs, &nb);
        act_ref(a, &r->xa[i], &bufs, &nb);
    }
    for (int q = 0; q < st->n_ext; q++) act_ref(a, &r->ext[q], &bufs, &nb);
    act_ref(a, &r->ids, &bufs, &nb);
    a->img = util_calloc((size_t)nb + 1, sizeof *a->img);
    a->n_img = nb;
    a->hn = 0;
    for (int i = 0; i < nb; i++) {
        a->img[i].off = a->hn;
        a->img[i].n = bufs[i]->n;
        a->hn += bufs[i]->n;
    }
    a->h = host_new(t, a->hn);
    for (int i = 0; i < nb; i++)
        copy_timed(t, 0, a->h + a->img[i].off, bufs[i]->p, bufs[i]->n);
    free(bufs);
    for (int i = 0; i < a->n_ref; i++) exec_view_drop(a->ref[i].v);
    return 0;
}

static int task_a_io(exec_tiers *t, const sim_task *k, int wr, util_err *e)
{
    tier_act *a = task_act(t, k);
    size_t need = exec_tfile_up(a->hn * sizeof(float));
    if (need > a->fcap) {
        a->foff = exec_tfile_grow(&t->f, need);
        a->fcap = need;
    }
    if (!wr) a->h = host_new(t, a->hn);
    if (!a->h)
        return util_errf(e, UTIL_EXIT_FAIL, "an activation write without "
                         "its copy");
    if (exec_tfile_io(&t->f, wr, a->h, need, a->foff, e)) return -1;
    if (wr) host_free(t, &a->h, a->hn);
    return 0;
}

/* ...and comes back before its recomputation or backward. */
static int task_a_in(exec_tiers *t, const sim_task *k, util_err *e)
{
    exec_worker *w = t->w;
    tier_act *a = task_act(t, k);
    exec_buf **nb = util_calloc((size_t)a->n_img + 1, sizeof *nb);
    int rc = 0;
    if (!a->h)
        rc = util_errf(e, UTIL_EXIT_FAIL, "an activation back before its "
                       "read");
    for (int i = 0; i < a->n_img && !rc; i++) {
        nb[i] = exec_buf_new(&w->mem, a->img[i].n, 0);
        if (!nb[i]) {
            rc = exec_oom(w, "a swapped activation coming back", e);
            break;
        }
        copy_timed(t, 1, nb[i]->p, a->h + a->img[i].off, a->img[i].n);
    }
    for (int i = 0; i < a->n_ref && !rc; i++) {
        tier_ref *f = &a->ref[i];
        f->v->b = exec_buf_ref(nb[f->img]);
        f->v->off = f->off;
        f->v->n = f->n;
    }
    for (int i = 0; i < a->n_img; i++) exec_buf_unref(nb[i]);
    host_free(t, &a->h, a->hn);
    free(nb);
    free(a->img);
    free(a->ref);
    a->img = NULL;
    a->ref = NULL;
    a->n_img = a->n_ref = 0;
    return rc;
}

int exec_tiers_task(exec_worker *w, int id, int epoch, util_err *e)
{
    exec_tiers *t = w->tiers;
    const sim_task *k = &w->rt->ir->tasks[id];
    tier_stage *s = &t->ts[w->lidx[k->stage]];
    exec_stage *st = s->st;
    switch (t->role[id]) {
    case R_W_READ: {
        int f = t->rd_for[id];
        if (f < 0 || t->stg[f])
            return util_errf(e, UTIL_EXIT_FAIL, "a read for no fetch");
        t->stg[f] = host_new(t, s->hn);
        if (region_io(t, s, 0, 0, t->stg[f], e)) return -1;
        if (!st->n_frozen) return 0;
        t->stgf[f] = host_new(t, s->fn);
        return exec_tfile_io(&t->f, 0, t->stgf[f], s->rbf, s->foff_f, e);
    }
    case R_W_IN: return task_w_in(t, id, s, e);
    case R_W_PUSH: return task_w_push(t, s);
    case R_G_OUT: return task_g_out(t, id, s, e);
    case R_OPT_READ:
        /* the step's state staged whole from the read's start */
        for (int q = 0; q < 3; q++)
            if (!s->so[q]) s->so[q] = host_new(t, s->hn);
        for (int q = 0; q < 3; q++)
            if (region_io(t, s, 0, q, s->so[q], e)) return -1;
        return 0;
    case R_OPT: return task_opt(t, id, epoch, s, e);
    case R_OPT_WRITE:
        for (int q = 0; q < 3; q++) {
            if (!s->so[q])
                return util_errf(e, UTIL_EXIT_FAIL, "a write-back without "
                                 "its step");
            if (region_io(t, s, 1, q, s->so[q], e)) return -1;
        }
        for (int q = 0; q < 3; q++) host_free(t, &s->so[q], s->hn);
        return 0;
    case R_A_OUT: return task_a_out(t, k, e);
    case R_A_WRITE: return task_a_io(t, k, 1, e);
    case R_A_READ: return task_a_io(t, k, 0, e);
    case R_A_IN: return task_a_in(t, k, e);
    default:
        return util_errf(e, UTIL_EXIT_FAIL, "a tier task the executor does "
                         "not know");
    }
}

float *exec_tiers_ring_base(exec_worker *w, int id, int frozen)
{
    exec_tiers *t = w->tiers;
    const sim_task *k = &w->rt->ir->tasks[id];
    int v = k->kind == SIM_RECV ? k->stage2 : k->stage, i = w->inst[id];
    if (!t || v < 0 || w->lidx[v] < 0 || i < 0) return NULL;
    tier_stage *s = &t->ts[w->lidx[v]];
    exec_buf *b = NULL;
    if (k->coll == SIM_COLL_ALLGATHER) {
        if (t->sched == SIM_SCHED_ZERO_OFFLOAD) b = frozen ? NULL : s->res;
        else if (i < s->n_fk)
            b = frozen ? t->wbuff[s->fk[i]] : t->wbuf[s->fk[i]];
        return b ? b->p : NULL;
    }
    if (frozen) return NULL;
    /* the reduce-scatter of the step's i-th gradient buffer of the stage,
     * those before it copied out already or not */
    pthread_mutex_lock(&t->mu);
    int q = i - s->g_out;
    b = q >= 0 && q < s->gq_n ? s->gq[q] : NULL;
    pthread_mutex_unlock(&t->mu);
    return b ? b->p : NULL;
}

void exec_tiers_settle(exec_worker *w)
{
    exec_tiers *t = w->tiers;
    if (!t || ranks(t) < 2 || t->sched != SIM_SCHED_ZERO_OFFLOAD) return;
    /* the other holders pushed their copy of a tied table before it was
     * stepped, and their rings may carry it after the stepping holder
     * refreshed their share: the table is the stepped holder's, all of
     * it gathered by now */
    for (int g = 0; g < 3; g++) {
        const struct tier_tab *b = &t->tab[g];
        if (b->step < 0) continue;
        const tier_stage *s = &t->ts[b->step];
        const exec_slice *sl = &s->st->sl[exec_stage_table_sl(s->st, g)];
        for (int k = 0; k < b->n_hold; k++) {
            tier_stage *o = &t->ts[b->hold[k]];
            if (o != s)
                w->rt->be->copy(o->res->p + o->st->sl[exec_stage_table_sl(o->st, g)].off,
                                s->res->p + sl->off, sl->n * sizeof(float));
        }
    }
}

void exec_tiers_sent(exec_worker *w, double bytes)
{
    exec_tiers *t = w->tiers;
    pthread_mutex_lock(&t->mu);
    t->ring_bytes += bytes;
    pthread_mutex_unlock(&t->mu);
}

double exec_tiers_norm_sq(const exec_worker *w, int epoch)
{
    const exec_tiers *t = w->tiers;
    return t && t->norm_epoch == epoch ? t->norm_sq : 0;
}

/* ---------------------------------------------------------- the state */

int exec_tiers_read_state(exec_worker *w, exec_stage *st, float *wt,
                          float *m, float *v, float *wf, util_err *e)
{
    exec_tiers *t = w->tiers;
    int li = w->lidx[st->id];
    tier_stage *s = &t->ts[li];
    float *dst[3] = {wt, m, v};
    float *buf = t->tier == SIM_TIER_NVME ? host_new(t, s->hn) : NULL;
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) {
        if (!dst[k]) continue;
        const float *src = k == 0 ? s->hw : k == 1 ? s->hm : s->hv;
        if (buf) {
            rc = region_io(t, s, 0, k, buf, e);
            src = buf;
        }
        if (!rc) share_put(s, src, dst[k]);
    }
    host_free(t, &buf, s->hn);
    size_t nf = st->n_frozen;
    if (!rc && wf && nf) {
        if (s->resf)
            w->rt->be->to_host(wf, s->resf->p, nf * sizeof *wf);
        else if (s->hwf)
            memcpy(wf + s->flo, s->hwf, s->fn * sizeof *wf);
        else {
            float *fb = host_new(t, s->fn);
            rc = exec_tfile_io(&t->f, 0, fb, s->rbf, s->foff_f, e);
            if (!rc) memcpy(wf + s->flo, fb, s->fn * sizeof *wf);
            host_free(t, &fb, s->fn);
        }
    }
    /* a holder that does not step a table has the stepped weights and
     * moments */
    for (int g = 0; g < 3 && !rc; g++) {
        const struct tier_tab *b = &t->tab[g];
        if (exec_stage_table_sl(st, g) < 0) continue;
        if (wt && b->w) memcpy(wt + s->tlo[g], b->w, b->n * sizeof(float));
        if (!(m || v) || b->step < 0 || li == b->step) continue;
        const exec_stage *o = t->ts[b->step].st;
        float *om = util_malloc(sizeof(float) * (o->n + 1));
        float *ov = util_malloc(sizeof(float) * (o->n + 1));
        rc = exec_tiers_read_state(w, t->ts[b->step].st, NULL, om, ov, NULL,
                                   e);
        size_t from = t->ts[b->step].tlo[g], to = s->tlo[g];
        if (!rc && m) memcpy(m + to, om + from, b->n * sizeof(float));
        if (!rc && v) memcpy(v + to, ov + from, b->n * sizeof(float));
        free(om);
        free(ov);
    }
    return rc;
}

void exec_tiers_stats(const exec_worker *w, double out[EXEC_TIER_STATS])
{
    memset(out, 0, EXEC_TIER_STATS * sizeof *out);
    const exec_tiers *t = w->tiers;
    if (!t) return;
    out[0] = t->f.rd_bytes;
    out[1] = t->f.rd_ns / 1e9;
    out[2] = t->f.wr_bytes;
    out[3] = t->f.wr_ns / 1e9;
    out[4] = t->adam_params;
    out[5] = t->adam_ns / 1e9;
    out[6] = t->up_bytes;
    out[7] = t->up_ns / 1e9;
    out[8] = t->down_bytes;
    out[9] = t->down_ns / 1e9;
    out[11] = t->ring_bytes;
}

const char *exec_tiers_note(const exec_worker *w)
{
    return w->tiers ? w->tiers->f.note : "";
}

void exec_tiers_free(exec_worker *w)
{
    exec_tiers *t = w->tiers;
    if (!t) return;
    const exec_runtime *rt = w->rt;
    for (int i = 0; i < rt->ir->n_tasks; i++) {
        exec_buf_unref(t->wbuf[i]);
        exec_buf_unref(t->wbuff[i]);
        free(t->stg[i]);
        free(t->stgf[i]);
    }
    for (int li = 0; li < rt->S; li++) {
        tier_stage *s = &t->ts[li];
        size_t n = s->hn;
        host_free_pinned(t, &s->hw, n);
        host_free_pinned(t, &s->hwf, s->fn);
        host_free(t, &s->hm, n);
        host_free(t, &s->hv, n);
        grad_put(t, &s->hg);
        for (int g = 0; g < 3; g++) host_free(t, &s->tgk[g], t->tab[g].n);
        for (int k = 0; k < 3; k++) host_free(t, &s->so[k], n);
        exec_buf_unref(s->res);
        exec_buf_unref(s->resf);
        for (int k = 0; k < s->gq_n; k++) exec_buf_unref(s->gq[k]);
        free(s->gq);
        free(s->fk);
        if (s->st) {
            s->st->w[0] = NULL;
            s->st->g = NULL;
            s->st->wf = NULL;
        }
    }
    for (size_t i = 0; i < (size_t)rt->S * (size_t)rt->M; i++) {
        tier_act *a = &t->act[i];
        free(a->h);
        free(a->img);
        free(a->ref);
    }
    for (int g = 0; g < 3; g++) {
        if (t->tab[g].own) t->tab[g].w = NULL;
        host_free_pinned(t, &t->tab[g].w, t->tab[g].n);
        free(t->tab[g].hold);
    }
    host_free_pinned(t, &t->hgt, t->hgt_n);
    for (int k = 0; k < t->n_gb; k++)
        host_free_pinned(t, &t->gb[k].p, t->gb[k].n);
    free(t->gb);
    free(t->act);
    free(t->ts);
    free(t->role);
    free(t->galloc);
    free(t->gend);
    free(t->win);
    free(t->wrel);
    free(t->wbuf);
    free(t->wbuff);
    free(t->stg);
    free(t->stgf);
    free(t->rd_for);
    exec_tfile_close(&t->f);
    pthread_mutex_destroy(&t->mu);
    free(t);
    w->tiers = NULL;
}
