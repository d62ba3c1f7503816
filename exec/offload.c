/* Memory tiers of the executor (issue 13): a stage's fp32 weights and
 * AdamW moments in a host arena (DRAM) or a file (NVMe: pread/pwrite,
 * O_DIRECT where the file system takes it), its gradients in host memory,
 * and on the device only a window of layers: the one computing, the next
 * one prefetched by the worker's I/O thread, and the gradient window of
 * the one in backward. AdamW runs on the worker's CPU thread. Invariant:
 * a layer is never read while its update is queued or running, so every
 * step computes with the weights the step before left (no stale update),
 * and runs keep the bits of runs without offload. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/runtime.h"

#define ALIGN EXEC_TFILE_ALIGN

/* A layer of a stage: its ops' parameters, contiguous in the arena. */
typedef struct ofl_chunk {
    size_t off, n;              /* floats of the stage's arena */
    int sl0, sl1;               /* its slices */
    int64_t foff;               /* nvme: w, m, v regions from here */
    int layer;                  /* the graph layer its ops belong to */
    int runs;                   /* gradient windows a step writes back */
    int early;                  /* fuyou: updated in the backward pass */
    /* under the tier's mutex */
    int seen;                   /* gradient windows written back this step */
    int busy;                   /* an update queued or running */
    int queued_step;            /* the step whose update was queued, -1 */
    int pf_ready;
    /* the compute thread's */
    exec_buf *wb, *gb, *pf;     /* weights, gradients, prefetch target */
} ofl_chunk;

struct exec_ofl_stage {
    ofl_chunk *c;
    int n_c;
    int *need;                  /* per op of the stage: its chunk, -1 */
    int *need2;                 /* and a second one, -1: a table another
                                 * op holds, beside the op's layer */
    unsigned char *gmask;       /* per op: which of the two its gradients
                                 * go to (bit 0 need, bit 1 need2) */
    int cur, cur2;              /* the resident chunks, -1 */
    float *g;                   /* host gradients (st->g) */
    float *hw, *hm, *hv;        /* dram: the states */
};

typedef struct ofl_job {
    exec_stage *st;
    int c, step;
    float scale;
    float *dst;                 /* a prefetch's device buffer */
    struct ofl_job *next;
} ofl_job;

typedef struct exec_ofl {
    exec_worker *w;
    exec_offload o;
    exec_tfile f;               /* nvme: the file */
    size_t region;              /* bytes of the largest region */
    float *bounce[5];           /* compute, I/O thread, AdamW's w, m, v */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ofl_job *q[2], *qt[2];      /* prefetches, updates */
    int quit, threads;
    pthread_t th[2];
    int failed;
    util_err err;
    double adam_params, adam_ns;
    exec_stage **st;
    int n_st;
} exec_ofl;

static const char *const policy_names[] = {"none", "zero-offload", "fuyou"};
static const char *const tier_names[] = {"dram", "nvme"};

const char *exec_offload_name(exec_offload_policy p) { return policy_names[p]; }
const char *exec_tier_name(exec_tier t) { return tier_names[t]; }

int exec_offload_parse(const char *s, exec_offload_policy *p)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, policy_names[i])) return *p = (exec_offload_policy)i, 0;
    return -1;
}

int exec_tier_parse(const char *s, exec_tier *t)
{
    for (int i = 0; i < 2; i++)
        if (!strcmp(s, tier_names[i])) return *t = (exec_tier)i, 0;
    return -1;
}

static size_t up(size_t b) { return exec_tfile_up(b); }

/* Aligned host memory for O_DIRECT; failure aborts as util_malloc's. */
void *exec_tfile_buf(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, ALIGN, bytes ? bytes : ALIGN))
        util_never_(__FILE__, __LINE__, "out of memory");
    return p;
}

/* Keeps the first failure of a thread; wakes every waiter. */
static void ofl_fail(exec_ofl *o, const util_err *e)
{
    pthread_mutex_lock(&o->mu);
    if (!o->failed) o->err = *e;
    o->failed = 1;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static int ofl_failed(exec_ofl *o, util_err *e)
{
    pthread_mutex_lock(&o->mu);
    int f = o->failed;
    if (f) *e = o->err;
    pthread_mutex_unlock(&o->mu);
    return f ? -1 : 0;
}

/* Whole pread or pwrite of the file, timed; a full disk names the path. */
int exec_tfile_io(exec_tfile *f, int wr, void *buf, size_t bytes, int64_t off,
                  util_err *e)
{
    int64_t t0 = (int64_t)exec_now_ns();
    char *p = buf;
    size_t done = 0;
    while (done < bytes) {
        ssize_t k;
        pthread_mutex_lock(&f->mu);
        int full = wr && f->full_after > 0 &&
                   f->written + (double)(bytes - done) > f->full_after;
        pthread_mutex_unlock(&f->mu);
        if (full) {
            k = -1;
            errno = ENOSPC;
        } else {
            k = wr ? pwrite(f->fd, p + done, bytes - done, off + (int64_t)done)
                   : pread(f->fd, p + done, bytes - done, off + (int64_t)done);
        }
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int er = k < 0 ? errno : (wr ? ENOSPC : EIO);
            char a[32], b[32], c[32], full[160] = "";
            /* how far it got against what there was, so the user knows
             * the room is short by more than that: the file grows as the
             * run goes (chunks, activations), so its size so far is not
             * all it would take */
            if (er == ENOSPC && f->free_at_open >= 0)
                snprintf(full, sizeof full, " (the disk is full with the "
                         "file at %s so far, %s free when it opened; the "
                         "file is removed)",
                         util_fmt_bytes((double)f->size, b, sizeof b),
                         util_fmt_bytes(f->free_at_open, c, sizeof c));
            else if (er == ENOSPC)
                snprintf(full, sizeof full, " (the disk is full; the file is "
                         "removed)");
            return util_errf(e, UTIL_EXIT_FAIL, "offload file in '%s': %s "
                             "%s: %s%s", f->dir, wr ? "writing" : "reading",
                             util_fmt_bytes((double)bytes, a, sizeof a),
                             strerror(er), full);
        }
        done += (size_t)k;
        if (wr) {
            pthread_mutex_lock(&f->mu);
            f->written += (double)k;
            pthread_mutex_unlock(&f->mu);
        }
    }
    double dt = (double)((int64_t)exec_now_ns() - t0);
    pthread_mutex_lock(&f->mu);
    if (wr) { f->wr_bytes += (double)bytes; f->wr_ns += dt; }
    else { f->rd_bytes += (double)bytes; f->rd_ns += dt; }
    pthread_mutex_unlock(&f->mu);
    return 0;
}

/* Chunk c's weights (k 0), moments (1, 2) into host buffer h. */
static int state_read(exec_ofl *o, exec_stage *st, int c, int k, float *h,
                      util_err *e)
{
    struct exec_ofl_stage *s = st->ofl;
    const ofl_chunk *ch = &s->c[c];
    if (o->o.tier == EXEC_TIER_NVME)
        return exec_tfile_io(&o->f, 0, h, up(ch->n * sizeof(float)),
                       ch->foff + (int64_t)(k * up(ch->n * sizeof(float))), e);
    float *src = (k == 0 ? s->hw : k == 1 ? s->hm : s->hv) + ch->off;
    memcpy(h, src, ch->n * sizeof *h);
    return 0;
}

/* Waits until chunk c has no update queued or running. */
static int wait_idle(exec_ofl *o, ofl_chunk *ch, util_err *e)
{
    pthread_mutex_lock(&o->mu);
    while (ch->busy && !o->failed) pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
    return ofl_failed(o, e);
}

/* Chunk c's weights into device memory dst, after its update; bounce:
 * the calling thread's aligned host buffer (nvme). */
static int fetch(exec_ofl *o, exec_stage *st, int c, float *dst, float *bounce,
                 util_err *e)
{
    struct exec_ofl_stage *s = st->ofl;
    ofl_chunk *ch = &s->c[c];
    const exec_backend *be = o->w->rt->be;
    if (wait_idle(o, ch, e)) return -1;
    if (o->o.tier == EXEC_TIER_NVME) {
        if (state_read(o, st, c, 0, bounce, e)) return -1;
        be->from_host(dst, bounce, ch->n * sizeof *dst);
        return 0;
    }
    int64_t t0 = (int64_t)exec_now_ns();
    be->from_host(dst, s->hw + ch->off, ch->n * sizeof *dst);
    pthread_mutex_lock(&o->f.mu);
    o->f.rd_bytes += (double)(ch->n * sizeof *dst);
    o->f.rd_ns += (double)((int64_t)exec_now_ns() - t0);
    pthread_mutex_unlock(&o->f.mu);
    return 0;
}

/* AdamW on chunk c (the CPU's kernel, slice by slice as stage_update
 * does: elementwise, so the same bits), its states read and written
 * back; the chunk is idle again after. */
static int update(exec_ofl *o, exec_stage *st, int c, int step, float scale,
                  util_err *e)
{
    struct exec_ofl_stage *s = st->ofl;
    ofl_chunk *ch = &s->c[c];
    const exec_runtime *rt = o->w->rt;
    exec_adamw a = rt->adamw;
    float lr = exec_lr_at(a.lr, rt->warmup, rt->total_steps, step);
    int nvme = o->o.tier == EXEC_TIER_NVME;
    float *h[3];
    for (int k = 0; k < 3; k++) {
        h[k] = nvme ? o->bounce[2 + k]
                    : (k == 0 ? s->hw : k == 1 ? s->hm : s->hv) + ch->off;
        if (nvme && state_read(o, st, c, k, h[k], e)) return -1;
    }
    int64_t t0 = (int64_t)exec_now_ns();
    for (int k = ch->sl0; k < ch->sl1; k++) {
        const exec_slice *sl = &st->sl[k];
        size_t i = sl->off - ch->off;
        kern_cpu.adamw_update(h[0] + i, h[1] + i, h[2] + i, s->g + sl->off,
                              sl->n, lr, a.beta1, a.beta2, a.eps,
                              sl->decay ? a.weight_decay : 0.0f, scale,
                              step + 1);
    }
    pthread_mutex_lock(&o->mu);
    o->adam_ns += (double)((int64_t)exec_now_ns() - t0);
    o->adam_params += (double)ch->n;
    pthread_mutex_unlock(&o->mu);
    size_t rb = up(ch->n * sizeof(float));
    for (int k = 0; nvme && k < 3; k++)
        if (exec_tfile_io(&o->f, 1, h[k], rb, ch->foff + (int64_t)(k * rb),
                          e))
            return -1;
    return 0;
}

static void job_push(exec_ofl *o, int q, exec_stage *st, int c, int step,
                     float scale, float *dst)
{
    ofl_job *j = util_calloc(1, sizeof *j);
    *j = (ofl_job){st, c, step, scale, dst, NULL};
    if (o->qt[q]) o->qt[q]->next = j;
    else o->q[q] = j;
    o->qt[q] = j;
    pthread_cond_broadcast(&o->cv);
}

/* Thread q: 0 prefetches into the device's window, 1 runs AdamW. Every
 * job ends marked done, failed or not, so nobody waits forever. */
static void *ofl_main_q(exec_ofl *o, int q)
{
    for (;;) {
        pthread_mutex_lock(&o->mu);
        while (!o->q[q] && !o->quit) pthread_cond_wait(&o->cv, &o->mu);
        ofl_job *j = o->q[q];
        if (!j) {
            pthread_mutex_unlock(&o->mu);
            return NULL;
        }
        o->q[q] = j->next;
        if (!o->q[q]) o->qt[q] = NULL;
        int failed = o->failed;
        pthread_mutex_unlock(&o->mu);
        ofl_chunk *ch = &j->st->ofl->c[j->c];
        util_err e = {0};
        int rc = failed ? -1
               : q == 0 ? fetch(o, j->st, j->c, j->dst, o->bounce[1], &e)
                        : update(o, j->st, j->c, j->step, j->scale, &e);
        if (rc && !failed) ofl_fail(o, &e);
        pthread_mutex_lock(&o->mu);
        if (q == 0) ch->pf_ready = 1;
        else ch->busy = 0;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        free(j);
    }
}

static void *io_main(void *arg) { return ofl_main_q(arg, 0); }
static void *adam_main(void *arg) { return ofl_main_q(arg, 1); }

/* The file: a unique name in the directory, unlinked as soon as it is
 * open (the kernel frees it when the run ends, however it ends); O_DIRECT
 * when an aligned write goes through, else buffered, with a note. */
void exec_tfile_init(exec_tfile *f)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->free_at_open = -1;
    pthread_mutex_init(&f->mu, NULL);
    f->mu_ok = 1;
}

int exec_tfile_open(exec_tfile *f, const char *dir, double full_after,
                    util_err *e)
{
    f->full_after = full_after;
    dir = dir && *dir ? dir : ".";
    f->dir = dir;
    char path[4200];
    if (snprintf(path, sizeof path, "%s/sluice-offload-XXXXXX", dir) >=
        (int)sizeof path)
        return util_errf(e, UTIL_EXIT_FAIL, "offload path '%s': too long",
                         dir);
    int fd = mkstemp(path);
    if (fd < 0)
        return util_errf(e, UTIL_EXIT_FAIL, "offload path '%s': cannot "
                         "create a file there: %s", dir, strerror(errno));
    double room = full_after > 0 ? full_after : exec_drive_free_bytes(dir);
    f->free_at_open = isfinite(room) ? room : -1;
    int dfd = open(path, O_RDWR | O_DIRECT);
    int derr = errno;
    unlink(path);
    f->fd = fd;
    if (dfd >= 0) {
        void *blk = exec_tfile_buf(ALIGN);
        memset(blk, 0, ALIGN);
        ssize_t k = pwrite(dfd, blk, ALIGN, 0);
        derr = errno;
        free(blk);
        if (k == ALIGN) {
            close(fd);
            f->fd = dfd;
            f->direct = 1;
            snprintf(f->note, sizeof f->note, "O_DIRECT");
            return 0;
        }
        close(dfd);
        if (k < 0 && derr == ENOSPC)
            return util_errf(e, UTIL_EXIT_FAIL, "offload file in '%s': %s "
                             "(the disk is full)", dir, strerror(derr));
    }
    snprintf(f->note, sizeof f->note, "buffered: O_DIRECT unavailable on "
             "this file system (%s)", strerror(derr));
    return 0;
}

int64_t exec_tfile_grow(exec_tfile *f, size_t bytes)
{
    pthread_mutex_lock(&f->mu);
    int64_t at = f->size;
    f->size += (int64_t)exec_tfile_up(bytes);
    pthread_mutex_unlock(&f->mu);
    return at;
}

void exec_tfile_close(exec_tfile *f)
{
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->mu_ok) pthread_mutex_destroy(&f->mu);
    f->mu_ok = 0;
}

int exec_ofl_open(exec_worker *w, util_err *e)
{
    exec_runtime *rt = w->rt;
    const exec_offload *of = &rt->offload;
    if (rt->be != &exec_backend_cpu)
        return util_errf(e, UTIL_EXIT_USAGE, "--offload runs on the CPU "
                         "backend only (the tiers are host memory and "
                         "files)");
    if (rt->async)
        return util_errf(e, UTIL_EXIT_USAGE, "--offload needs a schedule "
                         "with a flush (%s updates stages on their own)",
                         sim_sched_name(rt->plan->sched));
    if (of->policy == EXEC_OFFLOAD_FUYOU && rt->adamw.clip > 0)
        return util_errf(e, UTIL_EXIT_USAGE, "--offload fuyou updates each "
                         "layer during the backward pass, before the global "
                         "gradient norm is known: give --clip 0 (zero-offload"
                         " clips)");
    exec_ofl *o = util_calloc(1, sizeof *o);
    o->w = w;
    o->o = *of;
    exec_tfile_init(&o->f);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    w->ofl = o;
    if (of->tier == EXEC_TIER_NVME &&
        exec_tfile_open(&o->f, of->path, of->full_after_bytes, e))
        return -1;
    for (int q = 0; q < 2; q++) {
        if (pthread_create(&o->th[q], NULL, q ? adam_main : io_main, o))
            return util_errf(e, UTIL_EXIT_FAIL, "could not start the offload"
                             " threads");
        o->threads |= 1 << q;
    }
    return 0;
}

/* The chunk holding float off of the stage's arena. */
static ofl_chunk *chunk_at(const exec_stage *st, size_t off)
{
    const struct exec_ofl_stage *s = st->ofl;
    int lo = 0, hi = s->n_c - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->c[mid].off <= off) lo = mid;
        else hi = mid - 1;
    }
    UTIL_NEVER(s->n_c == 0 || off < s->c[lo].off ||
               off >= s->c[lo].off + s->c[lo].n);
    return &s->c[lo];
}

/* The stage's layers: its ops grouped by graph layer, each group's
 * parameters from where the slices of the ops before it end. */
static void chunks_build(exec_worker *w, exec_stage *st,
                         struct exec_ofl_stage *s)
{
    const exec_runtime *rt = w->rt;
    const prof_model *m = rt->model;
    int n = st->n_ops;
    size_t *at = util_malloc(sizeof *at * (size_t)(n + 1));
    for (int i = 0; i <= n; i++) {
        exec_slice *sl = NULL;
        int k = 0;
        at[i] = exec_slices_build(m, &rt->cfg, st->first, st->first + i - 1,
                                  rt->tp, w->rank, st->replica, 0, &sl, &k,
                                  NULL);
        free(sl);
    }
    s->need = util_malloc(sizeof(int) * (size_t)(n + 1));
    s->c = util_calloc((size_t)n + 1, sizeof *s->c);
    int last_layer = -2;
    for (int i = 0; i < n; i++) {
        int lay = m->ops[st->first + i].layer;
        s->need[i] = -1;
        if (at[i + 1] == at[i]) continue;
        /* slices follow the ops: a layer's parameters are contiguous */
        if (lay != last_layer)
            s->c[s->n_c++] = (ofl_chunk){.off = at[i], .queued_step = -1,
                                         .layer = lay};
        last_layer = lay;
        ofl_chunk *c = &s->c[s->n_c - 1];
        c->n = at[i + 1] - c->off;
        s->need[i] = s->n_c - 1;
    }
    /* an op reading a table another op of the stage holds (a tied head
     * or decoder embedding the token table, a T5 attention's softmax its
     * stack's relative-position table) needs its layer's chunk, which
     * stays, and the table's (a BERT decoder's bias and the table) */
    s->need2 = util_malloc(sizeof(int) * (size_t)(n + 1));
    s->gmask = util_calloc((size_t)n + 1, 1);
    for (int i = 0; i < n; i++) {
        s->need2[i] = -1;
        const exec_xop *x = &rt->xop[st->first + i];
        const int read[3] = {st->sl_w[i], st->sl_b[i], st->sl_x[i]};
        /* its layer's chunk, where the layer has one */
        int own = -1;
        for (int l = 0; l < s->n_c && own < 0; l++)
            if (s->c[l].layer == m->ops[st->first + i].layer) own = l;
        for (int k = 0; k < 3; k++) {
            if (read[k] < 0 || st->sl[read[k]].frozen) continue;
            int c = (int)(chunk_at(st, st->sl[read[k]].off) - s->c);
            if (s->need[i] < 0) s->need[i] = own;
            if (s->need[i] < 0) s->need[i] = c;
            else if (s->need[i] != c) {
                UTIL_NEVER(s->need2[i] >= 0 && s->need2[i] != c);
                s->need2[i] = c;
            }
            /* what its backward writes: its weights' gradients, a T5
             * softmax's table's */
            if (x->has_w || x->rel)
                s->gmask[i] |= s->need[i] == c ? 1 : 2;
        }
        /* its own parameters (adapters too), in its own chunk */
        if (x->has_w && at[i + 1] > at[i]) s->gmask[i] |= 1;
    }
    for (int c = 0; c < s->n_c; c++) {
        ofl_chunk *ch = &s->c[c];
        ch->sl0 = st->n_sl;
        for (int k = st->n_sl - 1; k >= 0; k--)
            if (st->sl[k].off >= ch->off && st->sl[k].off < ch->off + ch->n)
                ch->sl0 = k;
        ch->sl1 = ch->sl0;
        while (ch->sl1 < st->n_sl && st->sl[ch->sl1].off < ch->off + ch->n)
            ch->sl1++;
    }
    /* the gradient windows a step writes back, per chunk: the backward
     * tasks of the stage replayed as exec_ofl_acquire and
     * exec_ofl_release open and close them (a fused backward; a split
     * one's B, whose T5 softmaxes add to their tables, and W) */
    for (int t = 0; t < rt->ir->n_tasks; t++) {
        const sim_task *u = &rt->ir->tasks[t];
        if (u->stage != st->id ||
            (u->kind != SIM_BW && u->kind != SIM_B && u->kind != SIM_W))
            continue;
        int cur = -1, cur2 = -1;
        unsigned char *open = util_calloc((size_t)s->n_c + 1, 1);
        for (int i = n - 1; i >= 0; i--) {
            const exec_xop *x = &rt->xop[st->first + i];
            int c = s->need[i], c2 = s->need2[i];
            if (c < 0 || (u->kind == SIM_W && !x->has_w)) continue;
            int grad = u->kind == SIM_BW ? x->has_w || x->rel
                     : u->kind == SIM_B ? x->rel : 1;
            if (cur != c || cur2 != c2) {
                if (cur >= 0 && cur != c && cur != c2) open[cur] = 0;
                if (cur2 >= 0 && cur2 != c && cur2 != c2) open[cur2] = 0;
                cur = c;
                cur2 = c2;
            }
            for (int k = 0; grad && k < 2; k++) {
                int y = k ? c2 : c;
                if (y < 0 || !(s->gmask[i] >> k & 1) || open[y]) continue;
                open[y] = 1;
                s->c[y].runs++;
            }
        }
        free(open);
    }
    free(at);
}

/* fuyou's early update needs the step's gradient complete after the
 * stage's last backward: not with data-parallel rings or a tied table's
 * copies summed across stages (those come at the optimizer task). */
static int stage_sums_later(const exec_runtime *rt, const exec_stage *st)
{
    if (rt->dp * rt->pipes > 1) return 1;
    for (int i = 0; i < rt->ir->n_tasks; i++) {
        const sim_task *t = &rt->ir->tasks[i];
        if (t->comm == SIM_COMM_EMB &&
            (t->stage == st->id || t->stage2 == st->id))
            return 1;
    }
    return 0;
}

int exec_ofl_stage_add(exec_worker *w, exec_stage *st, const exec_tensor *tt,
                       const float *full, const float *adam_m,
                       const float *adam_v, util_err *e)
{
    exec_ofl *o = w->ofl;
    struct exec_ofl_stage *s = util_calloc(1, sizeof *s);
    st->ofl = s;
    s->cur = s->cur2 = -1;
    o->st = util_realloc(o->st, sizeof *o->st * (size_t)(o->n_st + 1));
    o->st[o->n_st++] = st;
    chunks_build(w, st, s);
    s->g = util_calloc(st->n + 1, sizeof *s->g);
    st->g = s->g;
    int early = o->o.policy == EXEC_OFFLOAD_FUYOU &&
                !stage_sums_later(w->rt, st);
    for (int c = 0; c < s->n_c; c++) {
        s->c[c].early = early;
        size_t rb = up(s->c[c].n * sizeof(float));
        if (rb > o->region) o->region = rb;
    }
    const float *src[3] = {full, adam_m, adam_v};
    float *h[3];
    for (int k = 0; k < 3; k++) {
        h[k] = util_calloc(st->n + 1, sizeof(float));
        exec_parr a = {.tt = tt, .p = (float *)src[k]};
        exec_stage_gather(st, &a, h[k], NULL);
    }
    if (o->o.tier == EXEC_TIER_DRAM) {
        s->hw = h[0];
        s->hm = h[1];
        s->hv = h[2];
        return 0;
    }
    for (int b = 0; b < 5; b++) {
        free(o->bounce[b]);
        o->bounce[b] = exec_tfile_buf(o->region);
    }
    int rc = 0;
    for (int c = 0; c < s->n_c && !rc; c++) {
        ofl_chunk *ch = &s->c[c];
        size_t rb = up(ch->n * sizeof(float));
        ch->foff = exec_tfile_grow(&o->f, 3 * rb);
        for (int k = 0; k < 3 && !rc; k++) {
            memset(o->bounce[0], 0, rb);
            memcpy(o->bounce[0], h[k] + ch->off, ch->n * sizeof(float));
            rc = exec_tfile_io(&o->f, 1, o->bounce[0], rb,
                               ch->foff + (int64_t)(k * rb), e);
        }
    }
    for (int k = 0; k < 3; k++) free(h[k]);
    /* setting up is not the run's traffic */
    o->f.wr_bytes = o->f.wr_ns = 0;
    return rc;
}

/* ------------------------------------------------------------ window */

float *exec_ofl_wp(const exec_stage *st, size_t off)
{
    const ofl_chunk *c = chunk_at(st, off);
    UTIL_NEVER(!c->wb);     /* acquired before its op runs */
    return c->wb->p + (off - c->off);
}

float *exec_ofl_gp(const exec_stage *st, size_t off)
{
    const ofl_chunk *c = chunk_at(st, off);
    return c->gb ? c->gb->p + (off - c->off) : NULL;
}

/* Drops chunk c from the device: its gradient window back to the host
 * (fuyou: the step's last one queues the layer's update). */
static int drop(exec_worker *w, exec_stage *st, int c, util_err *e)
{
    exec_ofl *o = w->ofl;
    exec_runtime *rt = w->rt;
    struct exec_ofl_stage *s = st->ofl;
    ofl_chunk *ch = &s->c[c];
    if (ch->gb) {
        EXEC_KERN(w, rt->be->to_host(s->g + ch->off, ch->gb->p,
                                     ch->n * sizeof(float)));
        exec_buf_unref(ch->gb);
        ch->gb = NULL;
        pthread_mutex_lock(&o->mu);
        if (++ch->seen == ch->runs && ch->early) {
            int step = rt->step0 + w->epoch_now - 1;
            ch->busy = 1;
            ch->queued_step = step;
            job_push(o, 1, st, c, step, 1.0f, NULL);
        }
        pthread_mutex_unlock(&o->mu);
    }
    exec_buf_unref(ch->wb);
    ch->wb = NULL;
    return ofl_failed(o, e);
}

/* The prefetch target's data, once the I/O thread has it. */
static int pf_wait(exec_ofl *o, ofl_chunk *ch, util_err *e)
{
    int64_t t0 = (int64_t)exec_now_ns();
    pthread_mutex_lock(&o->mu);
    while (!ch->pf_ready) pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
    o->w->wait_ns += (int64_t)exec_now_ns() - t0;
    return ofl_failed(o, e);
}

/* Chunk c's weights onto the device: its prefetch, or fetched now. */
static int load(exec_worker *w, exec_stage *st, int c, util_err *e)
{
    exec_ofl *o = w->ofl;
    ofl_chunk *ch = &st->ofl->c[c];
    if (ch->pf) {
        ch->wb = ch->pf;
        ch->pf = NULL;
        return pf_wait(o, ch, e);
    }
    EXEC_KERN(w, ch->wb = exec_buf_new(&w->mem, ch->n, 0));
    if (!ch->wb) return exec_oom(w, "a layer's weights", e);
    int64_t t0 = (int64_t)exec_now_ns();
    int rc = fetch(o, st, c, ch->wb->p, o->bounce[0], e);
    w->wait_ns += (int64_t)exec_now_ns() - t0;
    return rc;
}

int exec_ofl_acquire(exec_worker *w, exec_stage *st, int op, int backward,
                     int grad, util_err *e)
{
    exec_ofl *o = w->ofl;
    struct exec_ofl_stage *s = st->ofl;
    int c = s->need[op - st->first], c2 = s->need2[op - st->first];
    if (c < 0) return 0;
    if (s->cur != c || s->cur2 != c2) {
        /* what this op does not read goes; what it reads comes */
        int had = s->cur, had2 = s->cur2;
        if (had >= 0 && had != c && had != c2 && drop(w, st, had, e))
            return -1;
        if (had2 >= 0 && had2 != c && had2 != c2 && drop(w, st, had2, e))
            return -1;
        s->cur = c;
        s->cur2 = c2;
        if (c != had && c != had2 && load(w, st, c, e)) return -1;
        if (c2 >= 0 && c2 != had && c2 != had2 && load(w, st, c2, e))
            return -1;
        /* the next layer of the sweep comes while this one computes */
        int step = backward ? -1 : 1;
        for (int i = op - st->first + step; i >= 0 && i < st->n_ops;
             i += step) {
            int d = s->need[i];
            if (d < 0 || d == c || d == c2) continue;
            ofl_chunk *dh = &s->c[d];
            if (!dh->pf && !dh->wb) {
                EXEC_KERN(w, dh->pf = exec_buf_new(&w->mem, dh->n, 0));
                if (!dh->pf) break;     /* no room: fetched when needed */
                pthread_mutex_lock(&o->mu);
                dh->pf_ready = 0;
                job_push(o, 0, st, d, 0, 0, dh->pf->p);
                pthread_mutex_unlock(&o->mu);
            }
            break;
        }
    }
    for (int k = 0; grad && k < 2; k++) {
        int x = k ? c2 : c;
        ofl_chunk *ch = x >= 0 ? &s->c[x] : NULL;
        if (!ch || ch->gb || !(s->gmask[op - st->first] >> k & 1)) continue;
        EXEC_KERN(w, ch->gb = exec_buf_new(&w->mem, ch->n, 0));
        if (!ch->gb) return exec_oom(w, "a layer's gradients", e);
        EXEC_KERN(w, w->rt->be->from_host(ch->gb->p, s->g + ch->off,
                                          ch->n * sizeof(float)));
    }
    return 0;
}

int exec_ofl_release(exec_worker *w, exec_stage *st, int epoch, util_err *e)
{
    exec_ofl *o = w->ofl;
    struct exec_ofl_stage *s = st->ofl;
    (void)epoch;
    int rc = 0;
    if (s->cur >= 0) rc = drop(w, st, s->cur, e);
    if (s->cur2 >= 0 && drop(w, st, s->cur2, e)) rc = -1;
    s->cur = s->cur2 = -1;
    for (int c = 0; c < s->n_c; c++) {
        ofl_chunk *ch = &s->c[c];
        if (ch->pf) {
            util_err e2;
            pf_wait(o, ch, &e2);
            exec_buf_unref(ch->pf);
            ch->pf = NULL;
        }
    }
    return rc ? -1 : ofl_failed(o, e);
}

int exec_ofl_step(exec_worker *w, exec_stage *st, int step, float scale,
                  util_err *e)
{
    exec_ofl *o = w->ofl;
    struct exec_ofl_stage *s = st->ofl;
    int64_t t0 = (int64_t)exec_now_ns();
    pthread_mutex_lock(&o->mu);
    for (int c = 0; c < s->n_c; c++) {
        ofl_chunk *ch = &s->c[c];
        if (ch->queued_step == step) continue;
        ch->busy = 1;
        ch->queued_step = step;
        job_push(o, 1, st, c, step, scale, NULL);
    }
    for (int c = 0; c < s->n_c; c++) {
        while (s->c[c].busy) pthread_cond_wait(&o->cv, &o->mu);
        s->c[c].seen = 0;
    }
    pthread_mutex_unlock(&o->mu);
    w->wait_ns += (int64_t)exec_now_ns() - t0;
    if (ofl_failed(o, e)) return -1;
    memset(s->g, 0, st->n * sizeof *s->g);
    return 0;
}

int exec_ofl_read_state(exec_worker *w, exec_stage *st, float *wt, float *m,
                        float *v, util_err *e)
{
    exec_ofl *o = w->ofl;
    struct exec_ofl_stage *s = st->ofl;
    float *dst[3] = {wt, m, v};
    for (int c = 0; c < s->n_c; c++)
        for (int k = 0; k < 3; k++) {
            if (!dst[k]) continue;
            float *h = o->o.tier == EXEC_TIER_NVME ? o->bounce[0]
                                                    : dst[k] + s->c[c].off;
            if (state_read(o, st, c, k, h, e)) return -1;
            if (h != dst[k] + s->c[c].off)
                memcpy(dst[k] + s->c[c].off, h, s->c[c].n * sizeof *h);
        }
    return 0;
}

void exec_ofl_stats(const exec_worker *w, double out[6])
{
    const exec_ofl *o = w->ofl;
    memset(out, 0, 6 * sizeof *out);
    if (!o) return;
    out[0] = o->f.rd_bytes;
    out[1] = o->f.rd_ns / 1e9;
    out[2] = o->f.wr_bytes;
    out[3] = o->f.wr_ns / 1e9;
    out[4] = o->adam_params;
    out[5] = o->adam_ns / 1e9;
}

const char *exec_ofl_note(const exec_worker *w)
{
    return w->ofl ? w->ofl->f.note : "";
}

void exec_ofl_free(exec_worker *w)
{
    exec_ofl *o = w->ofl;
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    o->quit = 1;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    for (int q = 0; q < 2; q++)
        if (o->threads & (1 << q)) pthread_join(o->th[q], NULL);
    for (int q = 0; q < 2; q++)
        for (ofl_job *j = o->q[q]; j;) {
            ofl_job *n = j->next;
            free(j);
            j = n;
        }
    for (int i = 0; i < o->n_st; i++) {
        exec_stage *st = o->st[i];
        struct exec_ofl_stage *s = st->ofl;
        for (int c = 0; c < s->n_c; c++) {
            exec_buf_unref(s->c[c].wb);
            exec_buf_unref(s->c[c].gb);
            exec_buf_unref(s->c[c].pf);
        }
        free(s->c);
        free(s->need);
        free(s->need2);
        free(s->gmask);
        free(s->g);
        free(s->hw);
        free(s->hm);
        free(s->hv);
        free(s);
        st->ofl = NULL;
        st->g = NULL;
    }
    free(o->st);
    for (int b = 0; b < 5; b++) free(o->bounce[b]);
    exec_tfile_close(&o->f);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o);
    w->ofl = NULL;
}
