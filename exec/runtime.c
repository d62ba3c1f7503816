/* The pipeline executor's runtime: it runs the task IR the simulator runs.
 * Each worker (a device and tensor-parallel rank) walks its device's
 * compute stream in the IR's order on one thread, waiting for each task's
 * dependencies, and its send and collective streams on a communication
 * thread, each stream in its order, so transfers overlap compute as the
 * IR's streams say. Receives are posted in advance: a message lands in a
 * buffer charged to the receiving device and completes its receive task;
 * a ring's chunk once its receiver has joined the collective (gate_ok,
 * exec_recv_ready).
 *
 * Data moves as the IR's transfers say: an F hands its outputs to the
 * sends that follow it (or straight to a stage of the same device); a
 * backward hands the gradients of its inputs back the same way; data-
 * parallel ring steps reduce-scatter then all-gather chunks of a stage's
 * gradient; tied-embedding copies are summed in stage order. Whoever
 * consumes a gradient receive (the next ring step, the optimizer step)
 * folds it into the gradient, after the stage's own sends have read it
 * (the IR orders that). With a flush, the first optimizer step of a
 * worker agrees the global gradient norm, the step's loss and whether to
 * stop with every worker in one sum. Tensors live on the run's backend
 * (exec/backend.h): kernels come from its table, copies and sums are its
 * operations, and each compute task ends by waiting for its device, so
 * task times are the device's and what a task hands on is there. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec/runtime.h"


static int64_t now_rel(const exec_runtime *rt)
{
    return (int64_t)exec_now_ns() - rt->t0;
}

exec_worker *exec_rt_worker(exec_runtime *rt, int id)
{
    int i = id - rt->first_local;
    return i >= 0 && i < rt->n_local ? &rt->w[i] : NULL;
}

static int64_t *tslot(exec_worker *w, int epoch, int id)
{
    const exec_runtime *rt = w->rt;
    return &w->tm[(((size_t)(epoch - 1) * rt->ir->n_tasks) + id) * EXEC_T_N];
}

/* Wakes the communication threads of the devices whose collective sends
 * wait for task id of w (gate_ok). */
static void wake_gated(exec_worker *w, int id)
{
    exec_runtime *rt = w->rt;
    for (int k = rt->wake_off ? rt->wake_off[id] : 0;
         rt->wake_off && k < rt->wake_off[id + 1]; k++) {
        exec_worker *p = exec_rt_worker(rt, rt->wake[k] * rt->tp + w->rank);
        if (!p) continue;
        pthread_mutex_lock(&p->mu);
        p->wakes++;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Wakes the communication thread of the sender whose next ring step
 * waits for send id of w to start (exec_runtime.gate_start). */
static void wake_started(exec_worker *w, int id)
{
    exec_runtime *rt = w->rt;
    int s = rt->started_by ? rt->started_by[id] : -1;
    exec_worker *p = s >= 0 ? exec_rt_worker(
        rt, rt->ir->tasks[s].device * rt->tp + w->rank) : NULL;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->wakes++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Marks a task done for epoch and wakes whoever waits on the worker, and
 * the sends waiting for it on other devices. */
static void mark_done(exec_worker *w, int id, int epoch)
{
    pthread_mutex_lock(&w->mu);
    w->done[id] = epoch;
    w->wakes++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    wake_gated(w, id);
}

static int dep_met(const exec_worker *w, const sim_task *t, int d,
                   int epoch);

/* Whether the receiver of collective send id (on w) has joined the
 * collective for epoch (exec_recv_ready on its worker); a worker of
 * another process is not seen: it holds the message itself. */
static int gate_ok(exec_worker *w, int id, int epoch)
{
    exec_runtime *rt = w->rt;
    int rid = rt->ir->tasks[id].peer;
    exec_worker *p = exec_rt_worker(
        rt, rt->ir->tasks[rid].device * rt->tp + w->rank);
    return !p || exec_recv_ready(p, rid, epoch);
}

int exec_recv_ready(exec_worker *w, int rid, int epoch)
{
    const exec_runtime *rt = w->rt;
    const sim_ir *ir = rt->ir;
    int sid = ir->tasks[rid].peer;
    if (sid < 0 || !rt->gate_off) return 1;
    int ok = 1;
    pthread_mutex_lock(&w->mu);
    for (int k = rt->gate_off[sid]; k < rt->gate_off[sid + 1] && ok; k++)
        ok = dep_met(w, &ir->tasks[sid], rt->gate[k], epoch);
    int g = rt->gate_start[sid];
    if (ok && g >= 0) ok = w->started[g] >= epoch;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

/* A data-parallel ring step's send (its stage, step, minibatch, kind)
 * and its place among those alike on its device, in the device's order:
 * the receiver's send of the same step is the one with the receiver's
 * stage at the same place. */
typedef struct ringkey {
    int device, stage, mb, minibatch, coll, inner, occ, seq, id;
} ringkey;

static int ringkey_cmp(const void *a, const void *b)
{
    const ringkey *x = a, *y = b;
    const int u[] = {x->device, x->stage, x->mb, x->minibatch, x->coll,
                     x->inner, x->occ, x->seq};
    const int v[] = {y->device, y->stage, y->mb, y->minibatch, y->coll,
                     y->inner, y->occ, y->seq};
    for (int i = 0; i < 8; i++)
        if (u[i] != v[i]) return u[i] < v[i] ? -1 : 1;
    return 0;
}

/* exec_runtime.gate_start and started_by: per ring send of a step after
 * the first, the receiver's send of that step (-1 elsewhere). */
static void gate_starts(exec_runtime *rt)
{
    const sim_ir *ir = rt->ir;
    int n = ir->n_tasks, m = 0;
    rt->gate_start = util_malloc(sizeof(int) * (size_t)(n + 1));
    rt->started_by = util_malloc(sizeof(int) * (size_t)(n + 1));
    ringkey *k = util_malloc(sizeof *k * (size_t)(n + 1));
    for (int i = 0; i < n; i++) rt->gate_start[i] = rt->started_by[i] = -1;
    for (int d = 0; d < ir->n_devices; d++)
        for (int j = ir->dev_off[d]; j < ir->dev_off[d + 1]; j++) {
            const sim_task *t = &ir->tasks[ir->seq[j]];
            if (t->kind != SIM_SEND || t->stream != SIM_STREAM_COLL ||
                t->comm != SIM_COMM_DP)
                continue;
            k[m++] = (ringkey){d, t->stage, t->mb, t->minibatch, t->coll,
                               t->inner, 0, j, ir->seq[j]};
        }
    /* places among alike sends, in each device's order */
    qsort(k, (size_t)m, sizeof *k, ringkey_cmp);
    for (int i = 1; i < m; i++) {
        ringkey a = k[i - 1], b = k[i];
        a.occ = b.occ = a.seq = b.seq = 0;
        if (!ringkey_cmp(&a, &b)) k[i].occ = k[i - 1].occ + 1;
    }
    for (int i = 0; i < m; i++) k[i].seq = 0;
    qsort(k, (size_t)m, sizeof *k, ringkey_cmp);
    for (int i = 0; i < m; i++) {
        const sim_task *t = &ir->tasks[k[i].id];
        if (t->mb < 1) continue;
        ringkey q = k[i];
        q.device = ir->tasks[t->peer].device;
        q.stage = t->stage2;
        const ringkey *hit = bsearch(&q, k, (size_t)m, sizeof *k,
                                     ringkey_cmp);
        if (hit && hit->device != k[i].device) {
            rt->gate_start[k[i].id] = hit->id;
            rt->started_by[hit->id] = k[i].id;
        }
    }
    free(k);
}

/* The gate and wake lists (exec_runtime.gate): the dependencies of the
 * collective stream's sends on tasks of other devices (their compute, or
 * a receive ending their part of the collective before). */
static void gates_build(exec_runtime *rt)
{
    const sim_ir *ir = rt->ir;
    int n = ir->n_tasks, ng = 0;
    rt->gate_off = util_calloc((size_t)n + 2, sizeof(int));
    rt->wake_off = util_calloc((size_t)n + 2, sizeof(int));
    for (int pass = 0; pass < 2; pass++) {
        ng = 0;
        for (int i = 0; i < n; i++) {
            const sim_task *t = &ir->tasks[i];
            if (!pass) rt->gate_off[i] = ng;
            if (t->kind != SIM_SEND || t->stream != SIM_STREAM_COLL)
                continue;
            for (int k = 0; k < t->n_dep; k++) {
                int d = ir->deps[t->dep_off + k];
                const sim_task *u = &ir->tasks[d];
                if (u->device == t->device) continue;
                /* the receiver's own (exec_recv_ready reads them there) */
                UTIL_NEVER(u->device != ir->tasks[t->peer].device);
                if (pass) {
                    rt->gate[ng] = d;
                    rt->wake[rt->wake_off[d]++] = t->device;
                } else {
                    rt->wake_off[d + 1]++;
                }
                ng++;
            }
        }
        if (!pass) {
            rt->gate_off[n] = ng;
            rt->gate = util_malloc(sizeof(int) * (size_t)(ng + 1));
            rt->wake = util_malloc(sizeof(int) * (size_t)(ng + 1));
            for (int i = 0; i < n; i++) rt->wake_off[i + 1] += rt->wake_off[i];
        }
    }
    /* the second pass advanced each start to the next one's */
    for (int i = n; i > 0; i--) rt->wake_off[i] = rt->wake_off[i - 1];
    rt->wake_off[0] = 0;
    gate_starts(rt);
    /* gradient buckets: the backwards their rings wait for part-way, and
     * the ops after which those say how far they have come */
    for (int i = 0; i < n; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->bkt_ops <= 0) continue;
        if (!rt->early) {
            rt->early = util_calloc((size_t)n + 1, 1);
            rt->bkt_last = util_calloc((size_t)n + 1, 1);
            rt->bkt_edge = util_calloc((size_t)rt->model->n_ops + 1, 1);
        }
        UTIL_NEVER(t->bkt_first < 0 || t->bkt_first >= rt->model->n_ops);
        rt->bkt_edge[t->bkt_first] = 1;
        rt->bkt_last[i] = (unsigned char)sim_bucket_landing(ir, i);
        for (int k = 0; k < t->n_dep; k++) {
            int d = ir->deps[t->dep_off + k];
            if (sim_dep_early(t, &ir->tasks[d])) rt->early[d] = 1;
        }
    }
}

void exec_deliver(exec_runtime *rt, int wid, int epoch, int rid, exec_buf *b,
                  int64_t started)
{
    exec_worker *w = exec_rt_worker(rt, wid);
    UTIL_NEVER(!w);
    int64_t *ts = tslot(w, epoch, rid);
    ts[EXEC_T_START] = ts[EXEC_T_FSTART] = started - rt->t0;
    ts[EXEC_T_END] = now_rel(rt);
    pthread_mutex_lock(&w->mu);
    UTIL_NEVER(w->rbuf[rid] != NULL);
    w->rbuf[rid] = b;
    w->done[rid] = epoch;
    w->wakes++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    wake_gated(w, rid);
}

void exec_rt_fail(exec_runtime *rt, int worker, const util_err *e)
{
    pthread_mutex_lock(&rt->err_mu);
    if (!atomic_load(&rt->abort)) {
        rt->err = *e;
        rt->err_worker = worker;
        atomic_store(&rt->abort, 1);
    }
    pthread_mutex_unlock(&rt->err_mu);
    for (int i = 0; i < rt->n_local; i++) {
        exec_worker *w = &rt->w[i];
        pthread_mutex_lock(&w->mu);
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    if (rt->x && rt->x->wake) rt->x->wake(rt->x, rt);
}

/* Waits until task id is done for epoch; -1 when the run was stopped. */
static int wait_done(exec_worker *w, int id, int epoch)
{
    exec_runtime *rt = w->rt;
    pthread_mutex_lock(&w->mu);
    while (w->done[id] < epoch && !atomic_load(&rt->abort))
        pthread_cond_wait(&w->cv, &w->mu);
    int ok = w->done[id] >= epoch;
    pthread_mutex_unlock(&w->mu);
    return ok ? 0 : -1;
}

/* A task's dependencies on its own device (worker_tasks lets an offload
 * plan's step wait for other ranks' gradients: its agreement on the
 * norm waits for them, exec/tiers.c). */
static int deps_wait(exec_worker *w, int id, int epoch)
{
    const sim_ir *ir = w->rt->ir;
    const sim_task *t = &ir->tasks[id];
    for (int k = 0; k < t->n_dep; k++) {
        int d = ir->deps[t->dep_off + k];
        if (ir->tasks[d].device == t->device && wait_done(w, d, epoch))
            return -1;
    }
    return 0;
}

/* Whether dependency d (a task of w) of task t is met for epoch, w->mu
 * held: d done, or t a gradient bucket's ring step and d a backward that
 * has computed the bucket's ops (the simulator's early_dep). */
static int dep_met(const exec_worker *w, const sim_task *t, int d, int epoch)
{
    if (w->done[d] >= epoch) return 1;
    return sim_dep_early(t, &w->rt->ir->tasks[d]) &&
           w->prog_ep[d] == epoch && w->prog_op[d] <= t->bkt_first;
}

static int fold_dp(exec_worker *w, int d, exec_buf *b, util_err *e);
static exec_buf *take_recv(exec_worker *w, int rid);

/* A backward (task id of w) has computed its ops down to op: the rings
 * of the buckets that end there may start. The device is done with
 * them first (a GPU runs behind the thread): a wait for the whole
 * device, so on a GPU each bucket costs the launch queue's drain, where
 * an event the communication stream waited on would not (not measured:
 * no GPU run yet). */
static int bwd_progress(exec_worker *w, int id, int op, util_err *e)
{
    exec_runtime *rt = w->rt;
    if (!rt->early || !rt->early[id] || !rt->bkt_edge[op]) return 0;
    if (rt->be->sync(e)) return -1;
    pthread_mutex_lock(&w->mu);
    w->prog_ep[id] = w->epoch_now;
    w->prog_op[id] = op;
    w->wakes++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    wake_gated(w, id);
    /* the buckets reduced so far go into place (their last steps'
     * receives), so their buffers do not wait for the optimizer step
     * beside the backward's activations */
    for (int k = 0; k < w->n_bkt_rx; k++) {
        exec_buf *b = take_recv(w, w->bkt_rx[k]);
        if (b && fold_dp(w, w->bkt_rx[k], b, e)) return -1;
    }
    return 0;
}

static int deps_ready(exec_worker *w, int id, int epoch)
{
    const sim_ir *ir = w->rt->ir;
    const sim_task *t = &ir->tasks[id];
    int ok = 1;
    pthread_mutex_lock(&w->mu);
    for (int k = 0; k < t->n_dep && ok; k++) {
        int d = ir->deps[t->dep_off + k];
        ok = ir->tasks[d].device != t->device || dep_met(w, t, d, epoch);
    }
    pthread_mutex_unlock(&w->mu);
    return ok;
}

static int task_done(exec_worker *w, int id, int epoch)
{
    pthread_mutex_lock(&w->mu);
    int ok = w->done[id] >= epoch;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

/* Takes a delivered receive's buffer (its reference moves to the caller). */
static exec_buf *take_recv(exec_worker *w, int rid)
{
    pthread_mutex_lock(&w->mu);
    exec_buf *b = w->rbuf[rid];
    w->rbuf[rid] = NULL;
    pthread_mutex_unlock(&w->mu);
    return b;
}

static char *task_str(const exec_runtime *rt, int id, char *buf, size_t n)
{
    return sim_task_str(rt->ir, id, buf, n);
}

int exec_oom(exec_worker *w, const char *what, util_err *e)
{
    return exec_mem_oom(&w->mem, what, e);
}

/* Hands a send task its pieces (the communication thread takes them). */
static void put_outbox(exec_worker *w, int send, exec_view *ob, int n)
{
    pthread_mutex_lock(&w->mu);
    w->outbox[send] = ob;
    w->n_outbox[send] = n;
    pthread_mutex_unlock(&w->mu);
}

/* ------------------------------------------------------------- records */

exec_rec *exec_rec_new(int n_ops, int n_ext)
{
    exec_rec *r = util_calloc(1, sizeof *r);
    r->out = util_calloc((size_t)n_ops, sizeof *r->out);
    r->aux = util_calloc((size_t)n_ops, sizeof *r->aux);
    r->dout = util_calloc((size_t)n_ops, sizeof *r->dout);
    r->ext = util_calloc((size_t)n_ext + 1, sizeof *r->ext);
    r->dext = util_calloc((size_t)n_ext + 1, sizeof *r->dext);
    r->xa = util_calloc((size_t)n_ops, sizeof *r->xa);
    r->dxa = util_calloc((size_t)n_ops, sizeof *r->dxa);
    return r;
}

void exec_rec_free(exec_rec *r, int n_ops, int n_ext)
{
    if (!r) return;
    for (int i = 0; i < n_ops; i++) {
        exec_view_drop(&r->out[i]);
        exec_view_drop(&r->aux[i]);
        exec_view_drop(&r->dout[i]);
        exec_view_drop(&r->xa[i]);
        exec_view_drop(&r->dxa[i]);
    }
    for (int q = 0; q < n_ext; q++) {
        exec_view_drop(&r->ext[q]);
        exec_view_drop(&r->dext[q]);
    }
    exec_view_drop(&r->ids);
    exec_buf_unref(r->gb);
    free(r->out); free(r->aux); free(r->dout); free(r->ext); free(r->dext);
    free(r->xa);
    free(r->dxa);
    free(r);
}

static exec_rec *rec_new(const exec_stage *st)
{
    return exec_rec_new(st->n_ops, st->n_ext);
}

static void rec_free(const exec_stage *st, exec_rec *r)
{
    exec_rec_free(r, st->n_ops, st->n_ext);
}

/* Whether the stage recomputes layer by layer (an offloaded stage's
 * layer window moves in sweeps: it recomputes the whole stage in R). */
static int rc_lazy(const exec_runtime *rt, const exec_stage *st)
{
    (void)rt;
    return st->recomp && !st->ofl;
}

/* The inputs a record keeps from a message of another stage's outputs
 * (one buffer, its views into it), each into a buffer of its own where
 * they are a part of it: the rest (an attention's scores the next
 * stage's softmax read, where it keeps only v) goes now, as a framework
 * holding each tensor apart frees it, and as the simulator counts. */
static int compact_ext(exec_worker *w, const exec_stage *st, exec_rec *r,
                       util_err *e)
{
    for (int q = 0; q < st->n_ext; q++) {
        exec_buf *b = r->ext[q].b;
        if (!b) continue;
        size_t kept = 0;
        for (int k = 0; k < st->n_ext; k++)
            if (r->ext[k].b == b) kept += r->ext[k].n;
        if (kept >= b->n) continue;
        for (int k = q; k < st->n_ext; k++) {
            exec_view *v = &r->ext[k];
            if (v->b != b) continue;
            exec_buf *nb;
            EXEC_KERN(w, nb = exec_buf_new(&w->mem, v->n, 0));
            if (!nb) return exec_oom(w, "an input kept for the backward", e);
            EXEC_KERN(w, w->rt->be->copy(nb->p, b->p + v->off,
                                         v->n * sizeof *nb->p));
            size_t n = v->n;
            exec_view_drop(v);
            v->b = nb;
            v->off = 0;
            v->n = n;
        }
    }
    return 0;
}

/* Drops what the backward does not read (after F). Recomputing, the
 * forward keeps the checkpoints and what ops not run again keep (layer
 * by layer), or only the stage's inputs (an offloaded stage). */
static int keep_for_backward(exec_worker *w, const exec_stage *st,
                             exec_rec *r, int recompute, util_err *e)
{
    const exec_runtime *rt = w->rt;
    int lazy = recompute && rc_lazy(rt, st), only_inputs = recompute && !lazy;
    const int *keep = lazy ? st->keep_rc : st->keep_out;
    for (int i = 0; i < st->n_ops; i++) {
        const exec_xop *x = &rt->xop[st->first + i];
        if (only_inputs || !keep[i]) exec_view_drop(&r->out[i]);
        /* an op with no backward keeps nothing of its own */
        if (only_inputs || !x->aux_n || (lazy && st->rseg[i] >= 0) ||
            x->grad == PROF_GRAD_NONE)
            exec_view_drop(&r->aux[i]);
        if (only_inputs || (lazy && st->rseg[i] >= 0))
            exec_view_drop(&r->xa[i]);
    }
    const int *keep_ext = lazy ? st->keep_rc_ext : st->keep_ext;
    for (int q = 0; q < st->n_ext && !only_inputs; q++)
        if (!keep_ext[q]) exec_view_drop(&r->ext[q]);
    return only_inputs ? 0 : compact_ext(w, st, r, e);
}

/* Offset (floats) of producer op j in the message from stage a to stage
 * b: the outputs of a read by b, in op order. -1 when not in it. */
static long msg_offset(const exec_runtime *rt, const exec_stage *b, int a,
                       int j, size_t *total)
{
    size_t off = 0;
    long at = -1;
    for (int q = 0; q < b->n_ext; q++) {
        if (b->ext_stage[q] != a) continue;
        if (b->ext_op[q] == j) at = (long)off;
        off += rt->xop[b->ext_op[q]].out_n;
    }
    if (total) *total = off;
    return at;
}

static const exec_stage *geo(const exec_runtime *rt, int v);

/* ------------------------------------------------------------- forward */

/* A compute task's stage (local index, the stage) and its record's slot. */
typedef struct tctx {
    const sim_task *t;
    int li;
    exec_stage *st;
    size_t slot;
} tctx;

static tctx tctx_of(exec_worker *w, int id)
{
    const exec_runtime *rt = w->rt;
    tctx c;
    c.t = &rt->ir->tasks[id];
    c.li = w->lidx[c.t->stage];
    c.st = &w->st[c.li];
    c.slot = SLOT(rt, c.t->minibatch, c.t->mb);
    return c;
}


/* A T5's microbatch (a prefix LM, as Raffel et al. 2020 Sec. 3.3.1
 * describe it for an encoder-decoder): a window of T + Td bytes of the
 * text, the encoder reading its first T and the decoder predicting the
 * next Td from token 0 and the targets before each, then the buckets
 * (stage_gpt.c t5_ids). */
static int fill_t5(exec_worker *w, exec_rec *r, int step, int g,
                   util_err *e)
{
    exec_runtime *rt = w->rt;
    int B = rt->mbs, T = rt->T, Td = rt->Td, W = T + Td;
    size_t Ne = (size_t)B * T, Nd = (size_t)B * Td;
    size_t n = Ne + 2 * Nd + (size_t)rt->n_t5_buckets;
    int *win = util_malloc(sizeof(int) * 2 * (size_t)B * W);
    int *ids = util_malloc(sizeof(int) * n);
    exec_corpus_rows(rt->corpus, 0, rt->seed, (uint64_t)step, g * B, B, W,
                     win, win + (size_t)B * W);
    for (int b = 0; b < B; b++) {
        const int *row = win + (size_t)b * W;
        memcpy(ids + (size_t)b * T, row, sizeof(int) * (size_t)T);
        for (int t = 0; t < Td; t++) {
            ids[Ne + (size_t)b * Td + t] = t ? row[T + t - 1] : 0;
            ids[Ne + Nd + (size_t)b * Td + t] = row[T + t];
        }
    }
    memcpy(ids + Ne + 2 * Nd, rt->t5_buckets,
           sizeof(int) * (size_t)rt->n_t5_buckets);
    free(win);
    r->ids.b = exec_buf_new(&w->mem, n, 0);
    r->ids.off = 0;
    r->ids.n = n;
    if (r->ids.b) rt->be->from_host(r->ids.b->p, ids, sizeof(int) * n);
    free(ids);
    return r->ids.b ? 0 : exec_oom(w, "the tokens", e);
}

/* The microbatch's tokens and targets, read on the host and uploaded
 * once per record. */
static int fill_tokens(exec_worker *w, exec_stage *st, exec_rec *r,
                       const sim_task *t, int epoch, util_err *e)
{
    exec_runtime *rt = w->rt;
    if (!st->has_embed && !st->has_loss && !rt->cfg.t5) return 0;
    size_t n = (size_t)rt->mbs * rt->T;
    int step = rt->step0 + (rt->async ? t->minibatch : epoch - 1);
    int g = st->replica * rt->M + t->mb;
    if (rt->cfg.t5) return fill_t5(w, r, step, g, e);
    int *ids = util_malloc(sizeof(int) * 2 * n);
    exec_corpus_rows(rt->corpus, 0, rt->seed, (uint64_t)step, g * rt->mbs,
                     rt->mbs, rt->T, ids, ids + n);
    exec_mlm_mask(&rt->cfg, 0, rt->seed, (uint64_t)step, g * rt->mbs,
                  rt->mbs, rt->T, ids, ids + n);
    r->ids.b = exec_buf_new(&w->mem, 2 * n, 0);
    r->ids.off = 0;
    r->ids.n = 2 * n;
    if (r->ids.b) rt->be->from_host(r->ids.b->p, ids, sizeof(int) * 2 * n);
    free(ids);
    return r->ids.b ? 0 : exec_oom(w, "the tokens", e);
}

/* ---------------------------------------------- per-op timing */

/* Calibration: the time of one op's part, its tensor-parallel
 * collectives left out (the simulator prices them apart); the device is
 * drained before and after, so a GPU's time is the op's. The first step
 * warms caches and the allocator: not counted. */
static void op_count(exec_worker *w, int op, int phase, double ns)
{
    if (w->rt->async || w->epoch_now > 1) {
        w->op_ns[op * PROF_PHASES + phase] += ns;
        w->op_n[op * PROF_PHASES + phase] += 1;
    }
}

static int op_timed(exec_worker *w, int op, int phase, int64_t t0,
                    int64_t tp0, const int64_t *tp, util_err *e)
{
    if (w->rt->be->sync(e)) return -1;
    int64_t dt = (int64_t)exec_now_ns() - t0 - (*tp - tp0);
    w->task_ops_ns += dt + (*tp - tp0);
    w->task_ops_n++;
    op_count(w, op, phase, (double)dt);
    return 0;
}

static int op_start(exec_worker *w, int64_t *t0, util_err *e)
{
    if (w->rt->be->sync(e)) return -1;
    *t0 = (int64_t)exec_now_ns();
    return 0;
}

/* On a device with a clock of its own (a GPU) and no tensor-parallel
 * collectives inside the ops, an op is timed by marks on its stream, read
 * when the task ends: the device is not drained around every op, so the
 * times hold no launch latency that a run's queued kernels hide (drained,
 * a GPT-2 step in TF32 on an H200 ran 11% slower). */
static int marked(const exec_worker *w)
{
    return w->rt->be->mark && w->rt->tp == 1;
}

static void mark_push(exec_worker *w, int op, int phase, void *a, void *b)
{
    if (w->n_marks == w->cap_marks) {
        w->cap_marks = w->cap_marks ? 2 * w->cap_marks : 64;
        w->marks = util_realloc(w->marks,
                                sizeof *w->marks * (size_t)w->cap_marks);
    }
    w->marks[w->n_marks++] = (struct exec_mark){op, phase, a, b};
}

/* The task's marked ops, read (the device has passed them) and released;
 * count 0 drops them (a failed task). */
static int marks_read(exec_worker *w, int count, util_err *e)
{
    const exec_backend *be = w->rt->be;
    int rc = 0;
    for (int i = 0; i < w->n_marks; i++) {
        struct exec_mark *m = &w->marks[i];
        double dt = count && !rc && m->a && m->b ? be->mark_ns(m->a, m->b)
                                                 : 0;
        if (count && !rc && (!m->a || !m->b || dt < 0))
            rc = util_errf(e, UTIL_EXIT_FAIL, "worker %d: timing op %d on "
                           "the device failed", w->id, m->op);
        be->unmark(m->a);
        be->unmark(m->b);
        if (!count || rc) continue;
        w->task_ops_ns += (int64_t)dt;
        w->task_ops_n++;
        op_count(w, m->op, m->phase, dt);
    }
    w->n_marks = 0;
    return rc;
}

/* One part of an op (F, B or W) between two marks. */
static int op_marked(exec_worker *w, exec_stage *st, exec_rec *r, int op,
                     int phase, int count_loss, int64_t *tp, util_err *e)
{
    void *a = w->rt->be->mark();
    int rc = phase == PROF_PHASE_F
           ? exec_op_forward(w, st, r, op, count_loss, tp, e)
           : exec_op_backward(w, st, r, op, phase == PROF_PHASE_B,
                              phase == PROF_PHASE_W, tp, e);
    mark_push(w, op, phase, a, w->rt->be->mark());
    return rc;
}

static int rs_fold(exec_worker *w, exec_stage *st, int epoch, int all,
                   util_err *e);

static int fold_gathered(exec_worker *w, int id, util_err *e);

/* ZeRO-2 and 3: between ops, the reduce-scatters done by now give their
 * microbatches' whole gradients back (as the simulator frees them, when
 * the ring ends), and ZeRO-3's gather for the next task, when it has
 * come, puts its last chunks in place, their buffers gone (the one after
 * waits for the running task's end): not at the next task's start, or a
 * task's activations would pile on a gradient a ring finished with, or
 * a chunk that came, long before. */
static int fold_between_ops(exec_worker *w, util_err *e)
{
    const exec_runtime *rt = w->rt;
    if (rt->zero < 2) return 0;
    for (int i = 0; i < w->n_st; i++)
        if (rs_fold(w, &w->st[i], w->epoch_now, 0, e)) return -1;
    int j = w->comp_at + 1;
    if (rt->zero >= 3 && j < w->n_comp && w->ag_use[w->comp[j]] >= 0 &&
        fold_gathered(w, w->comp[j], e))
        return -1;
    return 0;
}

static int op_forward(exec_worker *w, exec_stage *st, exec_rec *r, int op,
                      int count_loss, int64_t *tp, util_err *e)
{
    if (fold_between_ops(w, e)) return -1;
    if (!w->rt->op_timing)
        return exec_op_forward(w, st, r, op, count_loss, tp, e);
    if (marked(w))
        return op_marked(w, st, r, op, PROF_PHASE_F, count_loss, tp, e);
    int64_t t0, tp0 = *tp;
    return op_start(w, &t0, e) ||
           exec_op_forward(w, st, r, op, count_loss, tp, e) ||
           op_timed(w, op, PROF_PHASE_F, t0, tp0, tp, e) ? -1 : 0;
}

/* The input-gradient and weight-gradient parts; timed, they run one
 * after the other (the order zero-bubble schedules use: the same bits). */
static int op_backward(exec_worker *w, exec_stage *st, exec_rec *r, int op,
                       int input_part, int weight_part, int64_t *tp,
                       util_err *e)
{
    /* BERT's pooler feeds no loss: no backward to run, or to time for
     * calibration */
    if (w->rt->xop[op].role == PROF_ROLE_POOLER) return 0;
    if (fold_between_ops(w, e)) return -1;
    if (!w->rt->op_timing)
        return exec_op_backward(w, st, r, op, input_part, weight_part, tp, e);
    for (int part = 0; part < 2; part++) {
        if (!(part ? weight_part : input_part)) continue;
        if (marked(w)) {
            if (op_marked(w, st, r, op, part ? PROF_PHASE_W : PROF_PHASE_B,
                          0, tp, e))
                return -1;
            continue;
        }
        int64_t t0, tp0 = *tp;
        if (op_start(w, &t0, e) ||
            exec_op_backward(w, st, r, op, !part, part, tp, e) ||
            op_timed(w, op, part ? PROF_PHASE_W : PROF_PHASE_B, t0, tp0, tp,
                     e))
            return -1;
    }
    return 0;
}

/* The stage's ops in order. An output the backward does not read goes as
 * soon as its last reader in the stage has run (one read by a later
 * stage stays until it is handed over), and so does an input from
 * another stage that only ops running no backward read (a frozen
 * prefix's), so the forward holds what the backward keeps and little
 * more. */
static int run_forward_range(exec_worker *w, exec_stage *st, exec_rec *r,
                             int first, int last, const int *keep,
                             int count_loss, int64_t *tp, util_err *e)
{
    const exec_runtime *rt = w->rt;
    for (int op = first; op <= last; op++) {
        if (st->ofl && exec_ofl_acquire(w, st, op, 0, 0, e)) return -1;
        if (op_forward(w, st, r, op, count_loss, tp, e)) return -1;
        const exec_xop *x = &rt->xop[op];
        for (int k = 0; k < x->n_in; k++) {
            int j = x->in[k];
            if (j >= first && j < op && rt->last_use[j] == op &&
                !keep[j - st->first])
                exec_view_drop(&r->out[j - st->first]);
        }
        /* (a stage recomputed whole from its inputs keeps them all) */
        for (int q = 0; x->grad == PROF_GRAD_NONE && q < st->n_ext &&
                        !(st->recomp && !rc_lazy(rt, st));
             q++)
            if (st->ext_none_last[q] == op && !st->keep_ext[q] &&
                !st->keep_rc_ext[q])
                exec_view_drop(&r->ext[q]);
    }
    return 0;
}

static int run_forward_ops(exec_worker *w, exec_stage *st, exec_rec *r,
                           int count_loss, int64_t *tp, util_err *e)
{
    return run_forward_range(w, st, r, st->first, st->last,
                             rc_lazy(w->rt, st) ? st->keep_rc : st->keep_out,
                             count_loss, tp, e);
}

/* Runs the recomputation segments above `seg` that have not run again
 * yet, highest first (each keeps what its backward reads). */
static int recompute_down(exec_worker *w, exec_stage *st, exec_rec *r,
                          int seg, int64_t *tp, util_err *e)
{
    while (r->rc_low > seg) {
        int k = --r->rc_low;
        if (run_forward_range(w, st, r, st->first + st->seg_first[k],
                              st->first + st->seg_last[k], st->keep_out, 0,
                              tp, e))
            return -1;
    }
    return 0;
}

static int task_f(exec_worker *w, int id, int epoch, int64_t *tp,
                  util_err *e)
{
    exec_runtime *rt = w->rt;
    const sim_ir *ir = rt->ir;
    tctx c = tctx_of(w, id);
    const sim_task *t = c.t;
    int li = c.li;
    exec_stage *st = c.st;
    size_t slot = c.slot;
    if (w->rec[li][slot])
        return util_errf(e, UTIL_EXIT_FAIL, "a second F of the same "
                         "microbatch before its backward");
    exec_rec *r = rec_new(st);
    w->rec[li][slot] = r;
    r->version = rt->async ? t->version : 0;
    r->rc_low = st->n_rseg;
    if (fill_tokens(w, st, r, t, epoch, e)) return -1;
    /* inputs: from stages of this device, or from the receives before */
    exec_view *la = w->lact[li][slot];
    for (int q = 0; q < st->n_ext; q++) {
        int a = st->ext_stage[q];
        if (w->lidx[a] >= 0) {
            if (!la || !la[q].b)
                return util_errf(e, UTIL_EXIT_FAIL, "input op %d from stage "
                                 "%d is missing", st->ext_op[q], a);
            r->ext[q] = la[q];
            memset(&la[q], 0, sizeof la[q]);
        }
    }
    free(la);
    w->lact[li][slot] = NULL;
    for (int k = 0; k < t->n_dep; k++) {
        int d = ir->deps[t->dep_off + k];
        const sim_task *u = &ir->tasks[d];
        if (u->kind != SIM_RECV || u->comm != SIM_COMM_PP) continue;
        exec_buf *b = take_recv(w, d);
        size_t total = 0;
        msg_offset(rt, st, u->stage, -1, &total);
        if (!b || b->n != total) {
            size_t got = b ? b->n : 0;
            exec_buf_unref(b);
            return util_errf(e, UTIL_EXIT_FAIL, "activation message from "
                             "stage %d has %zu floats, the stage reads %zu",
                             u->stage, got, total);
        }
        for (int q = 0; q < st->n_ext; q++) {
            if (st->ext_stage[q] != u->stage) continue;
            long off = msg_offset(rt, st, u->stage, st->ext_op[q], NULL);
            r->ext[q].b = exec_buf_ref(b);
            r->ext[q].off = (size_t)off;
            r->ext[q].n = rt->xop[st->ext_op[q]].out_n;
        }
        exec_buf_unref(b);
    }
    if (run_forward_ops(w, st, r, w->rank == 0, tp, e)) return -1;
    /* outputs for the stages that read them: the sends after this F, or
     * straight to a stage of this device */
    for (int k = ir->succ_off[id]; k < ir->succ_off[id + 1]; k++) {
        int s = ir->succ[k];
        const sim_task *u = &ir->tasks[s];
        if (u->kind != SIM_SEND || u->comm != SIM_COMM_PP || u->grad)
            continue;
        const exec_stage *b = geo(rt, u->stage2);
        exec_view *ob = util_calloc((size_t)b->n_ext + 1, sizeof *ob);
        int n = 0;
        for (int q = 0; q < b->n_ext; q++)
            if (b->ext_stage[q] == st->id)
                ob[n++] = exec_view_dup(&r->out[b->ext_op[q] - st->first]);
        put_outbox(w, s, ob, n);
    }
    for (int j = 0; j < w->n_st; j++) {
        const exec_stage *b = &w->st[j];
        if (b->id == st->id) continue;
        for (int q = 0; q < b->n_ext; q++) {
            if (b->ext_stage[q] != st->id) continue;
            if (!w->lact[j][slot])
                w->lact[j][slot] = util_calloc((size_t)b->n_ext + 1,
                                               sizeof(exec_view));
            w->lact[j][slot][q] =
                exec_view_dup(&r->out[b->ext_op[q] - st->first]);
        }
    }
    return keep_for_backward(w, st, r, st->recomp, e);
}

static int task_recompute(exec_worker *w, int id, int64_t *tp, util_err *e)
{
    exec_runtime *rt = w->rt;
    tctx c = tctx_of(w, id);
    exec_stage *st = c.st;
    exec_rec *r = w->rec[c.li][c.slot];
    if (!r)
        return util_errf(e, UTIL_EXIT_FAIL, "recompute without its F");
    /* layer by layer: the last segment now, the rest in the backward */
    if (rc_lazy(rt, st))
        return st->n_rseg ? recompute_down(w, st, r, st->n_rseg - 1, tp, e)
                          : 0;
    if (run_forward_ops(w, st, r, 0, tp, e)) return -1;
    return keep_for_backward(w, st, r, 0, e);
}

/* ------------------------------------------------------------ backward */

typedef struct gsrc {
    int from;           /* consumer stage */
    int seq;            /* order of arrival, for a stable sort */
    int op;
    exec_view v;
} gsrc;

static int gsrc_cmp(const void *a, const void *b)
{
    const gsrc *x = a, *y = b;
    if (x->from != y->from) return x->from > y->from ? -1 : 1;
    return (x->op > y->op) - (x->op < y->op);
}

/* Output gradients from the stages that read this stage's outputs, added
 * later stage first: the order a single device's backward adds them. */
static int gather_output_grads(exec_worker *w, int id, exec_stage *st,
                               exec_rec *r, size_t slot, util_err *e)
{
    exec_runtime *rt = w->rt;
    const sim_ir *ir = rt->ir;
    const sim_task *t = &ir->tasks[id];
    int li = w->lidx[st->id];
    int cap = 16, n = 0;
    gsrc *g = util_malloc(sizeof *g * (size_t)cap);
    int rc = 0;
    for (int k = 0; k < t->n_dep && !rc; k++) {
        int d = ir->deps[t->dep_off + k];
        const sim_task *u = &ir->tasks[d];
        if (u->kind != SIM_RECV || u->comm != SIM_COMM_PP || !u->grad)
            continue;
        exec_buf *b = take_recv(w, d);
        const exec_stage *c = geo(rt, u->stage);
        size_t total = 0;
        msg_offset(rt, c, st->id, -1, &total);
        if (!b || b->n != total) {
            rc = util_errf(e, UTIL_EXIT_FAIL, "gradient message from stage "
                           "%d has %zu floats, expected %zu", u->stage,
                           b ? b->n : 0, total);
            exec_buf_unref(b);
            break;
        }
        for (int q = 0; q < c->n_ext; q++) {
            if (c->ext_stage[q] != st->id) continue;
            if (n == cap) g = util_realloc(g, sizeof *g * (size_t)(cap *= 2));
            g[n].from = u->stage;
            g[n].seq = n;
            g[n].op = c->ext_op[q];
            g[n].v.b = exec_buf_ref(b);
            g[n].v.off = (size_t)msg_offset(rt, c, st->id, c->ext_op[q], NULL);
            g[n].v.n = rt->xop[c->ext_op[q]].out_n;
            n++;
        }
        exec_buf_unref(b);
    }
    for (exec_grad_in *x = w->lgrad[li][slot]; x;) {
        exec_grad_in *next = x->next;
        if (n == cap) g = util_realloc(g, sizeof *g * (size_t)(cap *= 2));
        g[n].from = x->from;
        g[n].seq = n;
        g[n].op = x->op;
        g[n].v = x->v;
        n++;
        free(x);
        x = next;
    }
    w->lgrad[li][slot] = NULL;
    qsort(g, (size_t)n, sizeof *g, gsrc_cmp);
    for (int i = 0; i < n; i++) {
        int j = g[i].op - st->first;
        exec_view *dv = &r->dout[j];
        size_t len = rt->xop[g[i].op].out_n;
        /* an op that runs no backward needs no gradient: the IR still
         * sends it (the message arrives), nothing adds it up */
        if (rt->xop[g[i].op].grad == PROF_GRAD_NONE) {
            exec_view_drop(&g[i].v);
            continue;
        }
        if (!rc && !dv->b) {
            EXEC_KERN(w, dv->b = exec_buf_new(&w->mem, len, 1));
            dv->n = len;
            if (!dv->b) rc = exec_oom(w, "a gradient", e);
        }
        if (!rc)
            EXEC_KERN(w, rt->be->acc(exec_view_p(dv), exec_view_p(&g[i].v),
                                     len));
        exec_view_drop(&g[i].v);
    }
    free(g);
    return rc;
}

/* The gradients of the stage's inputs go back to their producers. */
static int hand_back(exec_worker *w, int id, exec_stage *st, exec_rec *r,
                     size_t slot, util_err *e)
{
    exec_runtime *rt = w->rt;
    const sim_ir *ir = rt->ir;
    for (int q = 0; q < st->n_ext; q++)
        if (!r->dext[q].b) {
            size_t len = rt->xop[st->ext_op[q]].out_n;
            EXEC_KERN(w, r->dext[q].b = exec_buf_new(&w->mem, len, 1));
            r->dext[q].n = len;
            if (!r->dext[q].b) return exec_oom(w, "a gradient", e);
        }
    for (int k = ir->succ_off[id]; k < ir->succ_off[id + 1]; k++) {
        int s = ir->succ[k];
        const sim_task *u = &ir->tasks[s];
        if (u->kind != SIM_SEND || u->comm != SIM_COMM_PP || !u->grad)
            continue;
        exec_view *ob = util_calloc((size_t)st->n_ext + 1, sizeof *ob);
        int n = 0;
        for (int q = 0; q < st->n_ext; q++)
            if (st->ext_stage[q] == u->stage2)
                ob[n++] = exec_view_dup(&r->dext[q]);
        put_outbox(w, s, ob, n);
    }
    for (int q = 0; q < st->n_ext; q++) {
        int a = st->ext_stage[q];
        if (w->lidx[a] < 0) continue;
        exec_grad_in *x = util_malloc(sizeof *x);
        x->from = st->id;
        x->op = st->ext_op[q];
        x->v = exec_view_dup(&r->dext[q]);
        int la = w->lidx[a];
        x->next = w->lgrad[la][slot];
        w->lgrad[la][slot] = x;
    }
    for (int q = 0; q < st->n_ext; q++) exec_view_drop(&r->dext[q]);
    return 0;
}

static void version_release(exec_worker *w, exec_stage *st, int v);

/* ZeRO-2: the backward of a microbatch writes its own whole gradient
 * (a ring step may still read the previous one's), from its first
 * backward part on. */
static int grad_begin(exec_worker *w, exec_stage *st, exec_rec *r,
                      util_err *e)
{
    if (w->rt->zero < 2) return 0;
    if (!r->gb) {
        EXEC_KERN(w, r->gb = exec_buf_new(&w->mem, st->n, 1));
        if (!r->gb) return exec_oom(w, "a microbatch's gradient", e);
    }
    st->g = r->gb->p;
    return 0;
}

/* ...and hands it to the reduce-scatter after its last part (task id);
 * a tied table's copy moves to the stage's sum first (tacc). */
static int grad_end(exec_worker *w, exec_stage *st, exec_rec *r, int id,
                    util_err *e)
{
    const exec_runtime *rt = w->rt;
    if (rt->zero < 2) return 0;
    st->g = NULL;
    for (int t = 0; t < 3 && r->gb; t++) {
        int k = exec_stage_table_sl(st, t);
        if (!(st->tied_x >> t & 1) || k < 0) continue;
        const exec_slice *sl = &st->sl[k];
        if (!st->tacc[t]) {
            EXEC_KERN(w, st->tacc[t] = exec_buf_new(&w->mem, sl->n, 1));
            if (!st->tacc[t])
                return exec_oom(w, "a tied table's gradient (ZeRO)", e);
        }
        float *g = r->gb->p + sl->off;
        EXEC_KERN(w, {
            rt->be->acc(st->tacc[t]->p, g, sl->n);
            rt->be->zero(g, sl->n);
        });
    }
    int k = w->bw_rs[id];
    if (k < 0) return 0;
    UTIL_NEVER(k >= st->n_rs || st->rsb[k]);
    st->rsb[k] = r->gb;
    r->gb = NULL;
    return 0;
}

/* Where a stage's gradient of its copy of tied table g is: the running
 * step's sum of it under ZeRO-2 and 3 (NULL before the first backward),
 * else in the gradient. */
static float *tied_grad(const exec_runtime *rt, const exec_stage *st, int g)
{
    if (rt->zero >= 2 && (st->tied_x >> g & 1))
        return st->tacc[g] ? st->tacc[g]->p : NULL;
    return st->g ? st->g + st->sl[exec_stage_table_sl(st, g)].off : NULL;
}

static int task_backward(exec_worker *w, int id, int fused, int64_t *tp,
                         util_err *e)
{
    exec_runtime *rt = w->rt;
    tctx c = tctx_of(w, id);
    int li = c.li;
    exec_stage *st = c.st;
    size_t slot = c.slot;
    exec_rec *r = w->rec[li][slot];
    if (!r)
        return util_errf(e, UTIL_EXIT_FAIL, "backward without its F");
    if (grad_begin(w, st, r, e) ||
        gather_output_grads(w, id, st, r, slot, e))
        return -1;
    for (int op = st->last; op >= st->first; op--) {
        int i = op - st->first;
        const exec_xop *x = &rt->xop[op];
        /* a T5 softmax's backward adds to its relative-position table's
         * gradient in B, not in a W */
        if (st->ofl && exec_ofl_acquire(w, st, op, 1,
                                        (fused && x->has_w) || x->rel, e))
            return -1;
        /* nothing before the first op that trains needs a gradient
         * (PROF_GRAD_NONE): its backward is not run */
        int bwd = x->grad != PROF_GRAD_NONE;
        if (bwd && rc_lazy(rt, st) && st->rseg[i] >= 0 &&
            recompute_down(w, st, r, st->rseg[i], tp, e))
            return -1;
        if (bwd && op_backward(w, st, r, op, 1, fused, tp, e)) return -1;
        /* what no later part reads goes now: the op's own, and each input
         * no backward reads again (the executor frees an activation as
         * autograd does, after its last reader's backward) */
        if (fused || !x->has_w) exec_view_drop(&r->dout[i]);
        if (fused || !st->w_needs[i]) exec_view_drop(&r->out[i]);
        for (int k = 0; k < x->n_in; k++) {
            int j = x->in[k];
            if (j >= st->first && j < op && st->last_rd[j - st->first] == op &&
                (fused || !st->w_needs[j - st->first]))
                exec_view_drop(&r->out[j - st->first]);
        }
        if (fused || !x->has_w) exec_view_drop(&r->aux[i]);
        if (fused || !x->has_w) exec_view_drop(&r->xa[i]);
        if (fused && bwd_progress(w, id, op, e)) return -1;
    }
    for (int q = 0; q < st->n_ext; q++)
        if (fused || !st->w_needs_ext[q]) exec_view_drop(&r->ext[q]);
    if (hand_back(w, id, st, r, slot, e)) return -1;
    if (fused) {
        if (grad_end(w, st, r, id, e)) return -1;
    } else if (w->rt->zero >= 2) {
        st->g = NULL;
    }
    if (fused) {
        rec_free(st, r);
        w->rec[li][slot] = NULL;
    }
    return 0;
}

static int task_w(exec_worker *w, int id, int64_t *tp, util_err *e)
{
    exec_runtime *rt = w->rt;
    tctx c = tctx_of(w, id);
    exec_stage *st = c.st;
    exec_rec *r = w->rec[c.li][c.slot];
    if (!r) return util_errf(e, UTIL_EXIT_FAIL, "W without its B");
    if (grad_begin(w, st, r, e)) return -1;
    for (int op = st->last; op >= st->first; op--)
        if ((rt->xop[op].has_w &&
             ((st->ofl && exec_ofl_acquire(w, st, op, 1, 1, e)) ||
              op_backward(w, st, r, op, 0, 1, tp, e))) ||
            bwd_progress(w, id, op, e))
            return -1;
    if (grad_end(w, st, r, id, e)) return -1;
    rec_free(st, r);
    w->rec[c.li][c.slot] = NULL;
    return 0;
}

/* ------------------------------------------------- gradient receives */

/* Ring chunk c of n floats over R members. */
static void chunk(size_t n, int R, int c, size_t *lo, size_t *len)
{
    size_t a = n * (size_t)c / (size_t)R, b = n * (size_t)(c + 1) / (size_t)R;
    *lo = a;
    *len = b - a;
}

static int mod(int a, int R) { return ((a % R) + R) % R; }

/* The chunk member `sender` sends at ring step `step`: reduce-scatter,
 * then all-gather (sim_add_allreduce's ring). */
static int ring_chunk(int sender, int step, int R)
{
    return step < R - 1 ? mod(sender - step, R)
                        : mod(sender + 1 - (step - (R - 1)), R);
}

/* The shard groups a sharded plan's data-parallel ranks form: 1, or
 * more under hybrid sharding (each shard all-reduced over them). */
static int shard_groups(const exec_runtime *rt)
{
    int H = rt->shard > 1 ? rt->shard : 1;
    return rt->dp * rt->pipes / H;
}

/* The floats of stage st's trained arena a gradient bucket's ring (task
 * t: sim_task.bkt_first, bkt_ops) reduces: [*lo, *lo + *n), its ops'
 * slices, which lie together (the arena holds the stage's tensors in op
 * order). */
static void bucket_range(const exec_stage *st, const sim_task *t, size_t *lo,
                         size_t *n)
{
    size_t a = SIZE_MAX, b = 0, sum = 0;
    for (int k = 0; k < st->n_sl; k++) {
        const exec_slice *s = &st->sl[k];
        if (s->frozen || s->op < t->bkt_first ||
            s->op >= t->bkt_first + t->bkt_ops)
            continue;
        if (s->off < a) a = s->off;
        if (s->off + s->n > b) b = s->off + s->n;
        sum += s->n;
    }
    if (a == SIZE_MAX) a = b = 0;
    UTIL_NEVER(sum != b - a);
    *lo = a;
    *n = b - a;
}

/* Where the chunk data-parallel ring task `task` (sent by replica
 * `sender`) moves lies in stage st's trained arena: [*lo, *lo + *len).
 * Unsharded, a step of sim_add_allreduce's ring over every replica;
 * sharded (sim_add_sharded), a step of a reduce-scatter or all-gather
 * over the shard group, whose member p's shard is chunk p+1 (what the
 * reduce-scatter leaves it: ZeRO-1's reduced gradients are the
 * all-reduce's bits). */
static void dp_chunk(const exec_runtime *rt, const exec_stage *st, int task,
                     int sender, size_t *lo, size_t *len)
{
    const sim_task *t = &rt->ir->tasks[task];
    if (!rt->zero) {
        int R = rt->dp * rt->pipes;
        size_t a = 0, n = st->n;
        if (t->bkt_ops > 0) bucket_range(st, t, &a, &n);
        chunk(n, R, ring_chunk(sender, t->mb, R), lo, len);
        *lo += a;
        return;
    }
    int H = rt->shard, p = sender % H;
    if (t->coll == SIM_COLL_ALLREDUCE) {
        /* hybrid: the shard all-reduced over the G shard groups, the ring
         * of the ranks holding it (sender / H is its place) */
        int G = shard_groups(rt);
        size_t l;
        chunk(st->sh_n, G, ring_chunk(sender / H, t->mb, G), &l, len);
        *lo = st->sh_lo + l;
        return;
    }
    int c = t->coll == SIM_COLL_ALLGATHER ? mod(p + 1 - t->mb, H)
                                          : mod(p - t->mb, H);
    chunk(st->n, H, c, lo, len);
}

/* An offload plan over several data-parallel ranks: its rings move the
 * ranks' shares of a stage (exec_tiers_chunk), member p's being chunk
 * p + 1, as under ZeRO. */
static int ofl_ring(const exec_runtime *rt)
{
    return rt->tiers && rt->dp > 1;
}

/* The pieces ring task `task` of an offload plan moves (sent by rank
 * `sender`), chunked as dp_chunk's sharded rings are: lo[k], n[k] in the
 * trained arena (exec_tiers_chunk), or in the frozen one where frozen[k]
 * (a fetch's gather carries them too); their count, *total their floats. */
static int ofl_chunk(const exec_worker *w, int task, int sender,
                     size_t lo[EXEC_TIER_PIECES + 1],
                     size_t n[EXEC_TIER_PIECES + 1],
                     int frozen[EXEC_TIER_PIECES + 1], size_t *total)
{
    const exec_runtime *rt = w->rt;
    const sim_task *k = &rt->ir->tasks[task];
    const exec_stage *st =
        &w->st[w->lidx[k->kind == SIM_RECV ? k->stage2 : k->stage]];
    int D = rt->dp, p = sender % D, ag = k->coll == SIM_COLL_ALLGATHER;
    int c = ag ? mod(p + 1 - k->mb, D) : mod(p - k->mb, D);
    int np = exec_tiers_chunk(st, D, c, lo, n);
    for (int q = 0; q < np; q++) frozen[q] = 0;
    if (ag && st->n_frozen && rt->tier_sched != SIM_SCHED_ZERO_OFFLOAD) {
        exec_tiers_frozen_chunk(st, D, c, &lo[np], &n[np]);
        if (n[np]) frozen[np++] = 1;
    }
    *total = 0;
    for (int q = 0; q < np; q++) *total += n[q];
    return np;
}

/* Folds an offload ring's receive d (its buffer b) into the weights or
 * gradient it fills: all-gathers copy, reduce-scatters add. It may run on
 * the communication or a tier thread: its time is that thread's, not the
 * compute's kernels'. */
static int ofl_fold(exec_worker *w, int d, exec_buf *b, util_err *e)
{
    exec_runtime *rt = w->rt;
    const sim_task *u = &rt->ir->tasks[d];
    size_t lo[EXEC_TIER_PIECES + 1], n[EXEC_TIER_PIECES + 1], tot, at = 0;
    int fz[EXEC_TIER_PIECES + 1];
    int np = ofl_chunk(w, d, geo(rt, u->stage)->replica, lo, n, fz, &tot);
    int rc = 0;
    if (b->n != tot)
        rc = util_errf(e, UTIL_EXIT_FAIL, "ring step of %zu floats, the "
                       "chunk has %zu", b->n, tot);
    for (int k = 0; !rc && k < np; at += n[k], k++) {
        float *base = exec_tiers_ring_base(w, d, fz[k]);
        if (!base)
            rc = util_errf(e, UTIL_EXIT_FAIL, "ring step for weights or a "
                           "gradient that is not on the device");
        else if (u->coll == SIM_COLL_REDUCE_SCATTER)
            rt->be->acc(base + lo[k], b->p + at, n[k]);
        else
            rt->be->copy(base + lo[k], b->p + at, n[k] * sizeof *base);
    }
    exec_buf_unref(b);
    return rc;
}

/* ZeRO-3: the arena of the stage's k-th gather of the step, NULL while
 * none is open. */
static exec_buf *ag_buf(const exec_stage *st, int k)
{
    return k >= 0 && k < st->n_agb ? st->agb[k] : NULL;
}

/* The buffer a data-parallel ring task of stage st reads or writes: the
 * gradient (ZeRO-2: its microbatch's buffer), or for all-gathers the
 * weights. NULL when ZeRO-2's buffer is not there. */
static float *dp_base(const exec_worker *w, const exec_stage *st, int task)
{
    const sim_task *t = &w->rt->ir->tasks[task];
    if (t->coll == SIM_COLL_ALLGATHER && w->rt->zero >= 3) {
        exec_buf *b = ag_buf(st, w->inst[task]);
        return b ? b->p : NULL;
    }
    if (t->coll == SIM_COLL_ALLGATHER) return st->w[st->cur_ver];
    if (w->rt->zero < 2) return st->g;
    int k = w->inst[task];
    return k >= 0 && k < st->n_rs && st->rsb[k] ? st->rsb[k]->p : NULL;
}

/* ZeRO-3: a gather's first send (task id) starts its arena: the rank's
 * shard in place, the others' chunks to come by the ring. */
static int ag_open(exec_worker *w, exec_stage *st, int id, util_err *e)
{
    int k = w->inst[id];
    if (k < 0 || k >= st->n_agb || ag_buf(st, k))
        return util_errf(e, UTIL_EXIT_FAIL, "an all-gather of stage %d "
                         "started twice", st->id);
    /* the communication thread's: no kernel time of the compute's */
    exec_buf *b = exec_buf_new(&w->mem, st->n, 0);
    if (!b) return exec_oom(w, "a stage's gathered weights", e);
    w->rt->be->copy(b->p + st->sh_lo, st->wsh, st->sh_n * sizeof *st->wsh);
    st->agb[k] = b;
    return 0;
}

/* Folds data-parallel receive d into its stage: reduce-scatter steps
 * add their chunk, all-gather steps copy it. */
static int fold_dp(exec_worker *w, int d, exec_buf *b, util_err *e)
{
    exec_runtime *rt = w->rt;
    if (ofl_ring(rt)) return ofl_fold(w, d, b, e);
    const sim_task *u = &rt->ir->tasks[d];
    exec_stage *st = &w->st[w->lidx[u->stage2]];
    size_t lo, len;
    dp_chunk(rt, st, d, geo(rt, u->stage)->replica, &lo, &len);
    float *base = dp_base(w, st, d);
    int rc = 0;
    if (b->n != len)
        rc = util_errf(e, UTIL_EXIT_FAIL, "ring step of %zu floats, the "
                       "chunk has %zu", b->n, len);
    else if (!base)
        rc = util_errf(e, UTIL_EXIT_FAIL, "ring step for a gradient that "
                       "is not there");
    else if (rt->zero ? u->coll == SIM_COLL_REDUCE_SCATTER ||
                            (u->coll == SIM_COLL_ALLREDUCE &&
                             u->mb < shard_groups(rt) - 1)
                      : u->mb < rt->dp * rt->pipes - 1)
        EXEC_KERN(w, rt->be->acc(base + lo, b->p, len));
    else
        EXEC_KERN(w, rt->be->copy(base + lo, b->p, len * sizeof *base));
    exec_buf_unref(b);
    return rc;
}

typedef struct tsrc { int stage; const float *p; exec_buf *b; } tsrc;

static int tsrc_cmp(const void *a, const void *b)
{
    const tsrc *x = a, *y = b;
    return (x->stage > y->stage) - (x->stage < y->stage);
}

static int sum_tied(exec_worker *w, exec_stage *st, int g,
                    const sim_task *t, int task, tsrc *tied, int nt,
                    util_err *e);

/* Folds the gradient receives task depends on into their stages'
 * gradients: ring steps add (reduce-scatter) or copy (all-gather) their
 * chunk; tied-table copies are summed with the stage's own in stage
 * order, so every holder gets the same bits. */
static int integrate(exec_worker *w, int task, util_err *e)
{
    exec_runtime *rt = w->rt;
    const sim_ir *ir = rt->ir;
    const sim_task *t = &ir->tasks[task];
    tsrc tied[3][16];
    int nt[3] = {0, 0, 0}, tied_stage = -1, rc = 0;
    for (int k = 0; k < t->n_dep && !rc; k++) {
        int d = ir->deps[t->dep_off + k];
        const sim_task *u = &ir->tasks[d];
        if (u->kind != SIM_RECV ||
            (u->comm != SIM_COMM_DP && u->comm != SIM_COMM_EMB))
            continue;
        exec_buf *b = take_recv(w, d);
        if (!b) continue;           /* folded in already */
        exec_stage *st = &w->st[w->lidx[u->stage2]];
        if (u->comm == SIM_COMM_DP) {
            rc = fold_dp(w, d, b, e);
            continue;
        }
        int g = u->table < 3 ? u->table : 0;
        if (nt[g] == 15 || (g ? st->rel_sl[g - 1] : st->tied_sl) < 0) {
            exec_buf_unref(b);
            rc = util_errf(e, UTIL_EXIT_FAIL, "tied-table gradient for a "
                           "stage without a copy");
            continue;
        }
        tied_stage = st->id;
        tied[g][nt[g]++] = (tsrc){u->stage, b->p, b};
    }
    /* a failure drops the copies taken so far */
    for (int g = 0; g < 3 && rc; g++)
        for (int i = 0; i < nt[g]; i++) exec_buf_unref(tied[g][i].b);
    if (rc) return -1;
    if (tied_stage < 0) return 0;
    exec_stage *st = &w->st[w->lidx[tied_stage]];
    /* each sum takes its list's buffers; a failure drops those left */
    for (int g = 0; g < 3; g++)
        if (nt[g] && sum_tied(w, st, g, t, task, tied[g], nt[g], e)) {
            for (int h = g + 1; h < 3; h++)
                for (int i = 0; i < nt[h]; i++) exec_buf_unref(tied[h][i].b);
            return -1;
        }
    return 0;
}

/* Tied table g's copies (0 the token table, 1 and 2 a T5's relative-
 * position tables) summed with the stage's own in stage order (under
 * ZeRO-2 and 3 into the reduce-scatter task starts). */
static int sum_tied(exec_worker *w, exec_stage *st, int g,
                    const sim_task *t, int task, tsrc *tied, int nt,
                    util_err *e)
{
    exec_runtime *rt = w->rt;
    const exec_slice *sl = &st->sl[exec_stage_table_sl(st, g)];
    float *own = tied_grad(rt, st, g);
    /* sharded: the copies' total goes into the step's last reduce-
     * scatter of the stage, the ring this task starts */
    float *ring = NULL;
    int sharded = rt->zero >= 2 && (st->tied_x >> g & 1);
    if (sharded || !own) {
        ring = t->kind == SIM_SEND && t->comm == SIM_COMM_DP &&
               t->coll == SIM_COLL_REDUCE_SCATTER && t->stage == st->id
             ? dp_base(w, st, task) : NULL;
        if (!ring || !own) {
            for (int i = 0; i < nt; i++) exec_buf_unref(tied[i].b);
            return util_errf(e, UTIL_EXIT_FAIL, "tied-table gradient of "
                             "stage %d without %s", st->id, own ? "the "
                             "reduce-scatter that carries it" : "a backward");
        }
    }
    tied[nt++] = (tsrc){st->id, own, NULL};
    qsort(tied, (size_t)nt, sizeof *tied, tsrc_cmp);
    int rc = 0;
    for (int i = 0; i < nt; i++)
        if (tied[i].b && tied[i].b->n != sl->n)
            rc = util_errf(e, UTIL_EXIT_FAIL, "tied-table gradient of %zu "
                           "floats, the copy has %zu", tied[i].b->n, sl->n);
    /* the sum in stage order, in the first copy's buffer (a received
     * one is this stage's to write, else the stage's own), then where it
     * goes: no buffer of its own beside the copies */
    if (!rc) {
        const exec_backend *be = rt->be;
        float *sum = tied[0].b ? tied[0].b->p : own,
              *to = ring ? ring + sl->off : own;
        EXEC_KERN(w, {
            for (int i = 1; i < nt; i++) be->acc(sum, tied[i].p, sl->n);
            if (to != sum) be->copy(to, sum, sl->n * sizeof *to);
        });
    }
    for (int i = 0; i < nt; i++) exec_buf_unref(tied[i].b);
    if (!rc && ring) {
        /* its send is done (the ring waits for it): the next step sums
         * anew */
        exec_buf_unref(st->tacc[g]);
        st->tacc[g] = NULL;
    }
    return rc;
}

int exec_rt_fold(exec_worker *w, int id, util_err *e)
{
    return integrate(w, id, e);
}

size_t exec_recv_floats(exec_runtime *rt, exec_worker *w, int rid)
{
    const sim_task *u = &rt->ir->tasks[rid];
    size_t total = 0;
    if (u->comm == SIM_COMM_PP) {
        /* the outputs of the producer read by the consumer: activations
         * go to stage2, gradients come from the consumer (stage) */
        if (!u->grad) msg_offset(rt, geo(rt, u->stage2), u->stage, -1, &total);
        else msg_offset(rt, geo(rt, u->stage), u->stage2, -1, &total);
        return total;
    }
    const exec_stage *st = &w->st[w->lidx[u->stage2]];
    if (u->comm == SIM_COMM_DP && ofl_ring(rt)) {
        size_t lo[EXEC_TIER_PIECES + 1], n[EXEC_TIER_PIECES + 1];
        int fz[EXEC_TIER_PIECES + 1];
        ofl_chunk(w, rid, geo(rt, u->stage)->replica, lo, n, fz, &total);
        return total;
    }
    if (u->comm == SIM_COMM_DP) {
        size_t lo;
        dp_chunk(rt, st, rid, geo(rt, u->stage)->replica, &lo, &total);
        return total;
    }
    int k = u->table ? st->rel_sl[u->table - 1] : st->tied_sl;
    return k >= 0 ? st->sl[k].n : 0;
}

/* ------------------------------------------------------------ updates */

static void version_release(exec_worker *w, exec_stage *st, int v)
{
    if (!w->rt->async || v < 0 || v >= st->n_ver_slots) return;
    if (--st->pending[v] == 0 && v != st->cur_ver && st->w[v]) {
        exec_mem_charge(&w->mem, -(double)st->n * sizeof(float));
        exec_mem_put(&w->mem, st->w[v], st->n);
        st->w[v] = NULL;
        st->live--;
    }
}

/* The part [*a, *b) of slice sl that stage st updates: all of it, or
 * under ZeRO what lies in the rank's shard; 0 when none. */
static int sl_part(const exec_runtime *rt, const exec_stage *st,
                   const exec_slice *sl, size_t *a, size_t *b)
{
    *a = sl->off;
    *b = sl->off + sl->n;
    if (rt->zero) {
        if (*a < st->sh_lo) *a = st->sh_lo;
        if (*b > st->sh_lo + st->sh_n) *b = st->sh_lo + st->sh_n;
    }
    return *a < *b;
}

/* The reduced gradient at arena offset a (ZeRO-2: in the shard). */
static float *grad_at(const exec_runtime *rt, const exec_stage *st, size_t a)
{
    return rt->zero >= 2 ? st->gsh + (a - st->sh_lo) : st->g + a;
}

/* AdamW's moments at arena offset a (ZeRO: the shard's). */
static size_t moment_off(const exec_runtime *rt, const exec_stage *st,
                         size_t a)
{
    return rt->zero ? a - st->sh_lo : a;
}

/* Sharded, each rank counts its shard: the slices' ownership is replica
 * 0's (exec_slices_build), so every value is counted once. */
static double stage_norm_sq(const exec_runtime *rt, const exec_stage *st)
{
    double s = 0;
    size_t a, b;
    for (int k = 0; k < st->n_sl; k++)
        if (st->sl[k].norm_owner && sl_part(rt, st, &st->sl[k], &a, &b) &&
            (rt->zero < 2 || st->gsh))
            rt->be->norm_sq(&s, grad_at(rt, st, a), b - a);
    return s;
}

/* ZeRO-2: the reduce-scatters of the stage whose rings are done (all:
 * every one, waiting for them) add their shard to the stage's, in the
 * order they were started, and their microbatch's gradient goes. */
static int rs_fold(exec_worker *w, exec_stage *st, int epoch, int all,
                   util_err *e)
{
    exec_runtime *rt = w->rt;
    if (st->rs_epoch != epoch) {
        st->rs_epoch = epoch;
        st->rs_next = 0;
    }
    while (st->rs_next < st->n_rs) {
        int k = st->rs_next, ls = st->rs_last[2 * k];
        int lr = st->rs_last[2 * k + 1];
        if (all) {
            if (wait_done(w, ls, epoch) || wait_done(w, lr, epoch))
                return util_errf(e, UTIL_EXIT_FAIL, "stopped");
        } else if (!task_done(w, ls, epoch) || !task_done(w, lr, epoch)) {
            break;
        }
        exec_buf *b = take_recv(w, lr);
        if (b && fold_dp(w, lr, b, e)) return -1;
        if (!st->rsb[k])
            return util_errf(e, UTIL_EXIT_FAIL, "reduce-scatter %d of stage "
                             "%d without its gradient", k, st->id);
        /* the shard is held from the first fold to the update: while the
         * step's first backward writes its whole gradient, not before */
        if (!st->gsh) {
            if (exec_mem_charge(&w->mem, (double)st->sh_n * sizeof(float)))
                return exec_oom(w, "the gradient's shard", e);
            st->gsh = exec_mem_get(&w->mem, st->sh_n);
            if (!st->gsh) {
                exec_mem_charge(&w->mem, -(double)st->sh_n * sizeof(float));
                return exec_oom(w, "the gradient's shard", e);
            }
            /* 0 + x, as the unsharded gradient's first sum (signed
             * zeros too) */
            EXEC_KERN(w, rt->be->zero(st->gsh, st->sh_n));
        }
        EXEC_KERN(w, rt->be->acc(st->gsh, st->rsb[k]->p + st->sh_lo,
                                 st->sh_n));
        exec_buf_unref(st->rsb[k]);
        st->rsb[k] = NULL;
        st->rs_next++;
    }
    return 0;
}

/* ZeRO-1 and 2: the forward of step `epoch` reads the weights the
 * previous step's all-gather brought: wait for its steps, fold the last
 * receives in. Run once per stage and step, before its first compute. */
static int ag_settle(exec_worker *w, exec_stage *st, int epoch, util_err *e)
{
    if (!w->rt->zero || st->ag_done >= epoch) return 0;
    /* every step first: a send folds the receive before it in (taking
     * one here could race its copy with the send of the same chunk) */
    for (int i = 0; i < st->n_ag; i++) {
        int64_t t0 = (int64_t)exec_now_ns();
        int rc = wait_done(w, st->ag[i], epoch);
        w->wait_ns += (int64_t)exec_now_ns() - t0;
        if (rc) return util_errf(e, UTIL_EXIT_FAIL, "stopped");
    }
    for (int i = 0; i < st->n_ag; i++) {
        int id = st->ag[i];
        if (w->rt->ir->tasks[id].kind != SIM_RECV) continue;
        exec_buf *b = take_recv(w, id);
        if (b && fold_dp(w, id, b, e)) return -1;
    }
    st->ag_done = epoch;
    return 0;
}

/* ZeRO-3: compute task id reads the weights its gather brought (the
 * gather's last receive folded in first). */
/* ZeRO-3: the gather receives compute task id waits for that have come
 * (all of them: its start waited for them), copied into the gather's
 * arena where it is open; each buffer goes. */
static int fold_gathered(exec_worker *w, int id, util_err *e)
{
    const sim_ir *ir = w->rt->ir;
    const sim_task *t = &ir->tasks[id];
    /* the arena is the communication thread's until this device's own
     * sends of the gather are done (its first opened it): through their
     * completion (w->mu) the arena is seen whole */
    for (int q = 0; q < t->n_dep; q++) {
        int d = ir->deps[t->dep_off + q];
        const sim_task *u = &ir->tasks[d];
        if (u->kind == SIM_SEND && u->comm == SIM_COMM_DP &&
            u->coll == SIM_COLL_ALLGATHER && !task_done(w, d, w->epoch_now))
            return 0;
    }
    for (int q = 0; q < t->n_dep; q++) {
        int d = ir->deps[t->dep_off + q];
        const sim_task *u = &ir->tasks[d];
        if (u->kind != SIM_RECV || u->comm != SIM_COMM_DP ||
            u->coll != SIM_COLL_ALLGATHER || !task_done(w, d, w->epoch_now))
            continue;
        if (!dp_base(w, &w->st[w->lidx[u->stage2]], d)) continue;
        exec_buf *b = take_recv(w, d);
        if (b && fold_dp(w, d, b, e)) return -1;
    }
    return 0;
}

static int ag_bind(exec_worker *w, int id, util_err *e)
{
    const sim_ir *ir = w->rt->ir;
    const sim_task *t = &ir->tasks[id];
    exec_stage *st = &w->st[w->lidx[t->stage]];
    int k = w->ag_use[id];
    if (fold_gathered(w, id, e)) return -1;
    exec_buf *b = ag_buf(st, k);
    if (!b)
        return util_errf(e, UTIL_EXIT_FAIL, "the stage's weights were not "
                         "gathered before it");
    st->w[0] = b->p;
    return 0;
}

/* ...and after the last task that reads them they go. */
static void ag_release(exec_worker *w, int id)
{
    exec_stage *st = &w->st[w->lidx[w->rt->ir->tasks[id].stage]];
    int k = w->ag_rel[id];
    exec_buf *b = ag_buf(st, k);
    if (!b) return;
    if (st->w[0] == b->p) st->w[0] = NULL;
    exec_buf_unref(b);
    st->agb[k] = NULL;
}

/* AdamW on a stage's slices (elementwise, so slicing a tensor gives the
 * reference's bits), into a new version when in-flight work still uses
 * the current one (stashing); gradients cleared. */
static int stage_update(exec_worker *w, exec_stage *st, float scale,
                        util_err *e)
{
    exec_runtime *rt = w->rt;
    const exec_backend *be = rt->be;
    int s = st->steps;
    exec_adamw a = rt->adamw;
    if (st->ofl) {
        if (exec_ofl_step(w, st, s, scale, e)) return -1;
        st->steps++;
        return 0;
    }
    float lr = exec_lr_at(a.lr, rt->warmup, rt->total_steps, s);
    float *p = st->w[st->cur_ver];
    if (rt->async) {
        int nv = st->cur_ver + 1;
        if (nv >= st->n_ver_slots)
            return util_errf(e, UTIL_EXIT_FAIL, "more weight versions than "
                             "minibatches");
        if (st->pending[st->cur_ver] > 0) {
            if (exec_mem_charge(&w->mem, (double)st->n * sizeof(float)))
                return exec_oom(w, "a stashed weight version", e);
            float *q = exec_mem_get(&w->mem, st->n);
            if (!q) {
                exec_mem_charge(&w->mem, -(double)st->n * sizeof(float));
                return exec_oom(w, "a stashed weight version", e);
            }
            be->copy(q, p, st->n * sizeof *q);
            p = q;
            if (++st->live > st->max_live) st->max_live = st->live;
        } else {
            st->w[st->cur_ver] = NULL;
        }
        st->w[nv] = p;
        st->cur_ver = nv;
    }
    /* sharded: the rank's shard (AdamW is elementwise), which the
     * all-gather after this hands to the others */
    for (int k = 0; k < st->n_sl; k++) {
        const exec_slice *sl = &st->sl[k];
        size_t o, end;
        if (sl->frozen || !sl_part(rt, st, sl, &o, &end) ||
            (rt->zero >= 2 && !st->gsh))
            continue;
        size_t mo = moment_off(rt, st, o);
        float *wo = rt->zero >= 3 ? st->wsh + mo : p + o;
        EXEC_KERN(w, be->k->adamw_update(wo, st->am + mo, st->av + mo,
                                         grad_at(rt, st, o), end - o, lr,
                                         a.beta1, a.beta2, a.eps,
                                         sl->decay ? a.weight_decay : 0.0f,
                                         scale, s + 1));
    }
    if (rt->zero >= 2 && st->gsh) {
        exec_mem_put(&w->mem, st->gsh, st->sh_n);
        exec_mem_charge(&w->mem, -(double)st->sh_n * sizeof(float));
        st->gsh = NULL;
    } else if (rt->zero < 2) {
        EXEC_KERN(w, be->zero(st->g, st->n));
    }
    st->steps++;
    return 0;
}

/* The run ends after step (or minibatch) `last` at the latest. */
static void stop_after(exec_runtime *rt, int last)
{
    int cur = atomic_load(&rt->stop_epoch);
    while (last < cur &&
           !atomic_compare_exchange_weak(&rt->stop_epoch, &cur, last))
        ;
}

static int sum_world(exec_worker *w, double *v, int n, util_err *e)
{
    exec_runtime *rt = w->rt;
    int64_t t0 = (int64_t)exec_now_ns();
    int rc = rt->x->allreduce(rt->x, rt, w->id, EXEC_GROUP_WORLD, v,
                              (size_t)n, 1, e);
    w->wait_ns += (int64_t)exec_now_ns() - t0;
    return rc;
}

/* What step o waits for but a stage tier's tasks, which the compute
 * thread runs after this wait. */
static int opt_deps_wait(exec_worker *w, int o, int epoch)
{
    const sim_ir *ir = w->rt->ir;
    const sim_task *t = &ir->tasks[o];
    for (int k = 0; k < t->n_dep; k++) {
        int d = ir->deps[t->dep_off + k];
        if (!sim_kind_tier(ir->tasks[d].kind) && wait_done(w, d, epoch))
            return -1;
    }
    return 0;
}

/* A step whose agreed loss or gradient norm is not finite ends the run,
 * code 1, on every worker alike (they agreed the same values), before
 * anything is saved, as the reference trainer stops: before its update
 * where the device steps (an offload schedule's host has stepped its
 * layers by then). Without a flush each stage checks its own norm where
 * it clips (task_opt). */
static int diverged(exec_worker *w, int epoch, util_err *e)
{
    const exec_runtime *rt = w->rt;
    double loss = w->ep_loss[epoch - 1], norm = w->ep_norm[epoch - 1];
    if (isfinite(loss) && isfinite(norm)) return 0;
    return util_errf(e, UTIL_EXIT_FAIL, "step %d: the %s is not finite "
                     "(%g); the run diverged: try a lower --lr, or check "
                     "the weights it started from", rt->step0 + epoch,
                     isfinite(loss) ? "gradient norm" : "loss",
                     isfinite(loss) ? norm : loss);
}

/* Once per flushed step, at its first step or stage tier's copy out (id):
 * every step's gradients in (what they receive integrated), the global
 * gradient norm and the clipping factor (w->opt_scale) set. */
static int opt_prepare(exec_worker *w, int id, int epoch, util_err *e)
{
    exec_runtime *rt = w->rt;
    if (w->opt_epoch != epoch) {
        w->opt_epoch = epoch;
        for (int i = 0; i < w->n_comp; i++) {
            int o = w->comp[i];
            if (o == id || rt->ir->tasks[o].kind != SIM_OPT) continue;
            int64_t t0 = (int64_t)exec_now_ns();
            int rc = opt_deps_wait(w, o, epoch);
            w->wait_ns += (int64_t)exec_now_ns() - t0;
            if (rc) return util_errf(e, UTIL_EXIT_FAIL, "stopped");
        }
        for (int i = 0; i < w->n_st; i++)
            if (rt->zero >= 2 && rs_fold(w, &w->st[i], epoch, 1, e))
                return -1;
        for (int i = 0; i < w->n_comp; i++) {
            int o = w->comp[i];
            if (rt->ir->tasks[o].kind == SIM_OPT && integrate(w, o, e))
                return -1;
        }
        double v[3] = {0, 0, 0};
        for (int i = 0; i < w->n_st; i++)
            v[0] += stage_norm_sq(rt, &w->st[i]);
        v[1] = w->ep_loss[epoch - 1];
        v[2] = rt->stop_flag && *rt->stop_flag ? 1 : 0;
        if (sum_world(w, v, 3, e)) return -1;
        double norm = sqrt(v[0]);
        w->ep_norm[epoch - 1] = norm;
        w->ep_loss[epoch - 1] = v[1];
        if (diverged(w, epoch, e)) return -1;
        /* every worker sees the same sum: all stop after this step */
        if (v[2] > 0) stop_after(rt, epoch);
        w->opt_scale = rt->adamw.clip > 0 && norm > rt->adamw.clip
                     ? (float)(rt->adamw.clip / norm) : 1.0f;
    }
    return 0;
}

/* A flushed step's optimizer tasks: the first one of the worker in the
 * epoch waits for all of them to be ready, folds their receives in, and
 * agrees with every worker on the gradient norm, the loss and whether to
 * stop (one sum); each then updates its stage. Without a flush a stage
 * updates alone and clips by its own norm. */
static int task_opt(exec_worker *w, int id, int epoch, util_err *e)
{
    exec_runtime *rt = w->rt;
    const sim_task *t = &rt->ir->tasks[id];
    exec_stage *st = &w->st[w->lidx[t->stage]];
    if (rt->async) {
        float scale = 1.0f;
        if (integrate(w, id, e)) return -1;
        if (rt->adamw.clip > 0) {
            double ns = stage_norm_sq(rt, st);
            if (rt->tp > 1 &&
                rt->x->allreduce(rt->x, rt, w->id, EXEC_GROUP_TP, &ns, 1, 1,
                                 e))
                return -1;
            double norm = sqrt(ns);
            /* each stage clips alone: its norm says it diverged */
            if (!isfinite(norm))
                return util_errf(e, UTIL_EXIT_FAIL, "minibatch %d: stage "
                                 "%d's gradient norm is not finite (%g); "
                                 "the run diverged: try a lower --lr",
                                 t->minibatch + 1, st->model_stage, norm);
            if (norm > rt->adamw.clip) scale = (float)(rt->adamw.clip / norm);
        }
        return stage_update(w, st, scale, e);
    }
    if (opt_prepare(w, id, epoch, e)) return -1;
    st->steps = rt->step0 + epoch - 1;
    if (st->stier) {
        /* its tier tasks stepped it on the host */
        st->steps++;
        return 0;
    }
    return stage_update(w, st, w->opt_scale, e);
}

/* ------------------------------------------------------------- threads */

static int run_compute_task(exec_worker *w, int id, int epoch, util_err *e)
{
    exec_runtime *rt = w->rt;
    const sim_task *t = &rt->ir->tasks[id];
    int64_t tp = 0;
    int rc = 0;
    int64_t *ts = tslot(w, epoch, id);
    ts[EXEC_T_START] = now_rel(rt);
    w->epoch_now = epoch;
    w->task_ops_ns = 0;
    w->task_ops_n = 0;
    if (w->n_marks) marks_read(w, 0, NULL);    /* a failed task's */
    /* sharded: the stage's weights of the last step are all there; the
     * reduce-scatters that are done give their microbatches' gradients
     * back */
    if (rt->zero && rt->zero < 3 &&
        ag_settle(w, &w->st[w->lidx[t->stage]], epoch - 1, e))
        return -1;
    if (w->ag_use[id] >= 0 && ag_bind(w, id, e)) return -1;
    for (int i = 0; rt->zero >= 2 && i < w->n_st; i++)
        if (rs_fold(w, &w->st[i], epoch, 0, e)) return -1;
    if (t->kind <= SIM_RECOMP) {
        /* the weights of the record's version (its F's) must be there */
        exec_stage *st = &w->st[w->lidx[t->stage]];
        exec_rec *r = t->kind == SIM_F ? NULL
                    : w->rec[w->lidx[t->stage]][SLOT(rt, t->minibatch, t->mb)];
        int v = r ? r->version : (rt->async ? t->version : 0);
        /* the ranks' shares of the weights its fetch gathered */
        if (ofl_ring(rt) && integrate(w, id, e)) return -1;
        if (rt->tiers && exec_tiers_bind(w, id, st, e)) return -1;
        /* ZeRO-3's W reads no weights: none are gathered for it */
        int bare = rt->zero >= 3 && t->kind == SIM_W && w->ag_use[id] < 0;
        if (v < 0 || v >= st->n_ver_slots ||
            (!st->w[v] && !st->ofl && !bare))
            return util_errf(e, UTIL_EXIT_FAIL, "weight version %d is not "
                             "held (stashing)", v);
        w->used_ver[id] = v;
    }
    switch (t->kind) {
    case SIM_F: {
        w->loss_sum = 0;
        rc = task_f(w, id, epoch, &tp, e);
        int idx = rt->async ? t->minibatch : epoch - 1;
        w->ep_loss[idx] += w->loss_sum;
        break;
    }
    case SIM_RECOMP: rc = task_recompute(w, id, &tp, e); break;
    case SIM_BW: rc = task_backward(w, id, 1, &tp, e); break;
    case SIM_B: rc = task_backward(w, id, 0, &tp, e); break;
    case SIM_W: rc = task_w(w, id, &tp, e); break;
    case SIM_OPT: rc = task_opt(w, id, epoch, e); break;
    case SIM_SWAP_OUT: case SIM_SWAP_IN: case SIM_CPU_OPT:
    case SIM_NVME_READ: case SIM_NVME_WRITE:
        /* a stage tier's: the step's norm is known before its gradient
         * leaves */
        if (!rt->stage_tiers) {
            rc = util_errf(e, UTIL_EXIT_FAIL, "task kind %s on the compute "
                           "stream", sim_kind_name((sim_kind)t->kind));
            break;
        }
        if (t->kind == SIM_SWAP_OUT) rc = opt_prepare(w, id, epoch, e);
        if (!rc) rc = exec_stier_task(w, id, epoch, w->opt_scale, e);
        break;
    default:
        rc = util_errf(e, UTIL_EXIT_FAIL, "task kind %s on the compute "
                       "stream", sim_kind_name((sim_kind)t->kind));
    }
    /* its layers leave the device with it */
    if (t->kind <= SIM_RECOMP && w->st[w->lidx[t->stage]].ofl) {
        util_err e2;
        int r2 = exec_ofl_release(w, &w->st[w->lidx[t->stage]], epoch,
                                  rc ? &e2 : e);
        if (!rc) rc = r2;
    }
    /* the task ends when its device is done with it (a GPU runs behind
     * the thread): its time is the device's, its results are there for
     * other threads; waiting counts as kernel time */
    if (!rc) EXEC_KERN(w, rc = rt->be->sync(e));
    if (w->n_marks) {
        int r2 = marks_read(w, !rc, e);
        if (!rc) rc = r2;
    }
    if (rt->tiers && t->kind <= SIM_RECOMP)
        exec_tiers_after(w, id, &w->st[w->lidx[t->stage]]);
    if (w->ag_rel[id] >= 0) ag_release(w, id);
    ts[EXEC_T_END] = now_rel(rt);
    ts[EXEC_T_TP] = tp;
    /* the task's own cost: its time outside its ops */
    if (!rc && rt->op_timing && t->kind <= SIM_RECOMP &&
        (rt->async || epoch > 1)) {
        w->rest_ns += (double)(ts[EXEC_T_END] - ts[EXEC_T_START] -
                               w->task_ops_ns);
        w->rest_ops += w->task_ops_n;
    }
    if (!rc && t->kind <= SIM_RECOMP && rt->async)
        version_release(w, &w->st[w->lidx[t->stage]], t->version);
    return rc;
}

static void fail(exec_worker *w, int id, util_err *e)
{
    exec_runtime *rt = w->rt;
    if (atomic_load(&rt->abort)) return;
    char b[160];
    if (id >= 0) {
        char r[32] = "";
        if (rt->tp > 1) snprintf(r, sizeof r, " (tensor rank %d)", w->rank);
        util_err_prefix(e, "device %d%s, task %s", w->device, r,
                        task_str(rt, id, b, sizeof b));
    } else {
        util_err_prefix(e, "device %d", w->device);
    }
    exec_rt_fail(rt, w->id, e);
}

/* Opens iteration epoch to the worker's tier threads: an iteration's
 * tier tasks never start before the one before has ended (the simulator
 * simulates one iteration). */
static void tiers_open(exec_worker *w, int epoch)
{
    pthread_mutex_lock(&w->mu);
    w->tier_open = epoch;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* The iteration's end: every tier task of it done (the last of each
 * stream), its gradient norm, and a stop asked for ends the run after
 * it (one worker: nothing to agree). An offload plan's ranks: every ring
 * done (zero-offload's last gathers of the new weights folded in), then
 * one sum agrees the loss, Fuyou's norm (each rank's shares') and the
 * stop. */
static int tiers_end(exec_worker *w, int epoch, util_err *e)
{
    exec_runtime *rt = w->rt;
    int64_t t0 = (int64_t)exec_now_ns();
    for (int q = 0; q < SIM_STREAM_COUNT; q++)
        if (w->n_tq[q] && wait_done(w, w->tq[q][w->n_tq[q] - 1], epoch))
            return util_errf(e, UTIL_EXIT_FAIL, "stopped");
    for (int i = 0; i < w->n_dpt; i++) {
        int id = w->dpt[i];
        if (wait_done(w, id, epoch))
            return util_errf(e, UTIL_EXIT_FAIL, "stopped");
        exec_buf *b = rt->ir->tasks[id].kind == SIM_RECV ? take_recv(w, id)
                                                         : NULL;
        if (b && fold_dp(w, id, b, e)) return -1;
    }
    if (ofl_ring(rt)) exec_tiers_settle(w);
    w->wait_ns += (int64_t)exec_now_ns() - t0;
    /* a stage tier's last chunks written back: the norm is the step's */
    if (!rt->tiers) return 0;
    double ns = exec_tiers_norm_sq(w, epoch);
    int stop = rt->stop_flag && *rt->stop_flag;
    if (ofl_ring(rt)) {
        int fuyou = rt->tier_sched == SIM_SCHED_FUYOU;
        double v[3] = {w->ep_loss[epoch - 1], fuyou ? ns : 0, stop};
        if (sum_world(w, v, 3, e)) return -1;
        w->ep_loss[epoch - 1] = v[0];
        if (fuyou) ns = v[1];
        stop = v[2] > 0;
    }
    w->ep_norm[epoch - 1] = sqrt(ns);
    if (diverged(w, epoch, e)) return -1;
    if (stop) stop_after(rt, epoch);
    return 0;
}

_Thread_local int exec_on_compute;

static void *compute_main(void *arg)
{
    exec_on_compute = 1;
    exec_worker *w = arg;
    exec_runtime *rt = w->rt;
    const sim_ir *ir = rt->ir;
    util_err e = {0};
    int last = 0;
    if (rt->be->bind(&w->dev, EXEC_ROLE_COMPUTE, &e)) {
        fail(w, -1, &e);
        goto out;
    }
    for (int epoch = 1; epoch <= rt->epochs; epoch++) {
        if (epoch > atomic_load(&rt->stop_epoch)) break;
        int64_t t0 = (int64_t)exec_now_ns();
        w->kern_ns = w->wait_ns = 0;
        exec_mem_step_peak(&w->mem);    /* the step's starts here */
        int tq = rt->tiers || rt->stage_tiers;
        if (tq) tiers_open(w, epoch);
        for (int i = 0; i < w->n_comp; i++) {
            int id = w->comp[i];
            const sim_task *t = &ir->tasks[id];
            /* no flush: a stop ends the minibatches not yet begun */
            if (rt->async && t->minibatch > atomic_load(&rt->stop_epoch)) {
                mark_done(w, id, epoch);
                continue;
            }
            int64_t a = (int64_t)exec_now_ns();
            int rc = deps_wait(w, id, epoch);
            w->wait_ns += (int64_t)exec_now_ns() - a;
            if (rc) goto out;
            w->tasks_run++;
            if (w->id == rt->slow_worker) usleep((useconds_t)rt->slow_us);
            if (w->id == rt->fault_worker && w->tasks_run == rt->fault_task) {
                if (rt->fault_kill) raise(SIGKILL);
                util_errf(&e, UTIL_EXIT_FAIL, "injected fault "
                          "(SLUICE_EXEC_FAULT)");
                fail(w, id, &e);
                goto out;
            }
            w->comp_at = i;
            if (run_compute_task(w, id, epoch, &e)) {
                fail(w, id, &e);
                goto out;
            }
            mark_done(w, id, epoch);
            if (rt->async && rt->stop_flag && *rt->stop_flag &&
                t->kind == SIM_F && t->stage == 0) {
                /* the first stage sets where the minibatches end */
                stop_after(rt, t->minibatch);
            }
        }
        if (tq && tiers_end(w, epoch, &e)) {
            fail(w, -1, &e);
            goto out;
        }
        int64_t t1 = (int64_t)exec_now_ns();
        if (w->id == 0 && rt->on_step && !rt->async)
            rt->on_step(rt->on_step_ctx, rt->step0 + epoch,
                        w->ep_loss[epoch - 1] * rt->scale,
                        w->ep_norm[epoch - 1],
                        exec_lr_at(rt->adamw.lr, rt->warmup, rt->total_steps,
                                   rt->step0 + epoch - 1),
                        (double)(t1 - t0) / 1e6);
        w->ep_wall[epoch - 1] = t1 - t0;
        w->ep_kern[epoch - 1] = w->kern_ns;
        w->ep_wait[epoch - 1] = w->wait_ns;
        w->ep_end[epoch - 1] = t1 - rt->t0;
        w->ep_peak[epoch - 1] = exec_mem_step_peak(&w->mem);
        last = epoch;
    }
    /* the last step's all-gathers, for the weights the run hands back */
    for (int k = 0; rt->zero && k < w->n_st; k++)
        if (ag_settle(w, &w->st[k], last, &e)) {
            fail(w, -1, &e);
            goto out;
        }
out:
    rt->be->unbind();
    pthread_mutex_lock(&w->mu);
    w->comp_finished = 1;
    w->wakes++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* A tier thread: the worker's tier tasks of one stream, in the IR's
 * order, each after its dependencies, iteration by iteration as the
 * compute thread opens them. */
typedef struct tier_arg {
    exec_worker *w;
    int q;
} tier_arg;

static void *tier_main(void *arg)
{
    tier_arg a = *(tier_arg *)arg;
    free(arg);
    exec_worker *w = a.w;
    exec_runtime *rt = w->rt;
    util_err e = {0};
    _Static_assert(SIM_STREAM_COUNT <= EXEC_ROLE_COUNT - EXEC_ROLE_TIER,
                   "a stream of the device per tier queue");
    if (rt->be->bind(&w->dev, EXEC_ROLE_TIER + a.q, &e)) {
        fail(w, -1, &e);
        return NULL;
    }
    for (int epoch = 1; epoch <= rt->epochs; epoch++) {
        pthread_mutex_lock(&w->mu);
        while (w->tier_open < epoch && !w->comp_finished &&
               !atomic_load(&rt->abort))
            pthread_cond_wait(&w->cv, &w->mu);
        int go = w->tier_open >= epoch && !atomic_load(&rt->abort);
        pthread_mutex_unlock(&w->mu);
        if (!go) break;
        for (int i = 0; i < w->n_tq[a.q]; i++) {
            int id = w->tq[a.q][i];
            if (deps_wait(w, id, epoch)) goto out;
            int64_t *ts = tslot(w, epoch, id);
            ts[EXEC_T_START] = ts[EXEC_T_FSTART] = now_rel(rt);
            if (rt->stage_tiers
                    ? exec_stier_task(w, id, epoch, w->opt_scale, &e)
                    : exec_tiers_task(w, id, epoch, &e)) {
                fail(w, id, &e);
                goto out;
            }
            ts[EXEC_T_END] = now_rel(rt);
            mark_done(w, id, epoch);
        }
    }
out:
    rt->be->unbind();
    return NULL;
}

/* The pieces a send task carries. A pipeline send takes its outbox over
 * (*own, *n_own: the views it holds until send_done): the next step's
 * backward may fill the outbox again before this send is seen done. */
static int send_pieces(exec_worker *w, int id, exec_piece *pc, int *np,
                       int cap, exec_view **own, int *n_own, util_err *e)
{
    exec_runtime *rt = w->rt;
    const sim_task *t = &rt->ir->tasks[id];
    *np = 0;
    if (t->comm == SIM_COMM_PP) {
        pthread_mutex_lock(&w->mu);
        exec_view *ob = w->outbox[id];
        int n = w->n_outbox[id];
        w->outbox[id] = NULL;
        w->n_outbox[id] = 0;
        pthread_mutex_unlock(&w->mu);
        if (!ob) return util_errf(e, UTIL_EXIT_FAIL, "nothing to send");
        *own = ob;
        *n_own = n;
        /* a piece per tensor the next stage reads: never cut short */
        if (n > cap)
            return util_errf(e, UTIL_EXIT_FAIL, "a message of %d tensors, "
                             "more than the %d a send takes", n, cap);
        for (int i = 0; i < n; i++)
            pc[(*np)++] = (exec_piece){exec_view_p(&ob[i]), ob[i].n};
        return 0;
    }
    exec_stage *st = &w->st[w->lidx[t->stage]];
    if (t->comm == SIM_COMM_DP && w->ag_after[id] >= 0 &&
        ag_open(w, st, id, e))
        return -1;
    if (t->comm == SIM_COMM_DP && ofl_ring(rt)) {
        if (integrate(w, id, e)) return -1;
        size_t lo[EXEC_TIER_PIECES + 1], n[EXEC_TIER_PIECES + 1], tot;
        int fz[EXEC_TIER_PIECES + 1];
        int k = ofl_chunk(w, id, st->replica, lo, n, fz, &tot);
        for (int i = 0; i < k; i++) {
            float *base = exec_tiers_ring_base(w, id, fz[i]);
            if (!base)
                return util_errf(e, UTIL_EXIT_FAIL, "a ring step of "
                                 "weights or a gradient that is not on the "
                                 "device");
            pc[(*np)++] = (exec_piece){base + lo[i], n[i]};
            exec_tiers_sent(w, (double)(n[i] * sizeof *base));
        }
        return 0;
    }
    if (t->comm == SIM_COMM_DP) {
        if (integrate(w, id, e)) return -1;
        size_t lo, len;
        dp_chunk(rt, st, id, st->replica, &lo, &len);
        float *base = dp_base(w, st, id);
        if (!base)
            return util_errf(e, UTIL_EXIT_FAIL, "a reduce-scatter of a "
                             "gradient that is not there");
        pc[(*np)++] = (exec_piece){base + lo, len};
        return 0;
    }
    if (t->comm == SIM_COMM_EMB) {
        /* the token table's, or a T5's relative-position table's */
        int tb = t->table < 3 ? t->table : 0, k = exec_stage_table_sl(st, tb);
        float *g = k >= 0 ? tied_grad(rt, st, tb) : NULL;
        if (k < 0)
            return util_errf(e, UTIL_EXIT_FAIL, "a tied table's gradient "
                             "the stage does not hold");
        if (!g)
            return util_errf(e, UTIL_EXIT_FAIL, "a tied-table gradient "
                             "sent before its backward");
        pc[(*np)++] = (exec_piece){g, st->sl[k].n};
        return 0;
    }
    return util_errf(e, UTIL_EXIT_FAIL, "a send the executor cannot fill");
}

/* Drops the views a send held (send_pieces). */
static void send_release(exec_view **own, int *n_own)
{
    for (int i = 0; i < *n_own; i++) exec_view_drop(&(*own)[i]);
    free(*own);
    *own = NULL;
    *n_own = 0;
}

static void send_done(exec_worker *w, int id, int epoch, exec_view **own,
                      int *n_own)
{
    send_release(own, n_own);
    tslot(w, epoch, id)[EXEC_T_END] = now_rel(w->rt);
    mark_done(w, id, epoch);
}

static void *comm_main(void *arg)
{
    exec_worker *w = arg;
    exec_runtime *rt = w->rt;
    const sim_ir *ir = rt->ir;
    int ep[2] = {1, 1}, idx[2] = {0, 0};
    void *h[2] = {NULL, NULL};
    exec_view *own[2] = {NULL, NULL};   /* what each queue's send holds */
    int n_own[2] = {0, 0};
    /* each queue's send, its pieces taken, waiting for its receiver */
    int prep[2] = {0, 0}, np[2] = {0, 0};
    int64_t prep_t[2] = {0, 0}, prep_ns[2] = {0, 0};
    exec_piece pc[2][64];
    util_err e = {0};
    int64_t nap_us = 20;
    if (rt->be->bind(&w->dev, EXEC_ROLE_COMM, &e)) goto fail;
    for (;;) {
        if (atomic_load(&rt->abort)) break;
        /* what this pass looks at may change on another worker after it
         * looked: a broadcast since then skips the sleep below */
        pthread_mutex_lock(&w->mu);
        unsigned seen = w->wakes;
        pthread_mutex_unlock(&w->mu);
        int progress = 0, active = 0;
        int last = rt->epochs < atomic_load(&rt->stop_epoch)
                 ? rt->epochs : atomic_load(&rt->stop_epoch);
        if (last < 1) last = rt->async ? 1 : 0;
        for (int q = 0; q < 2; q++) {
            while (idx[q] == w->n_sendq[q] && ep[q] < last) {
                ep[q]++;
                idx[q] = 0;
            }
            if (idx[q] >= w->n_sendq[q] || ep[q] > last) continue;
            int id = w->sendq[q][idx[q]];
            /* a send in flight finishes first; one whose pieces were
             * taken, waiting for its receiver, never goes */
            if (rt->async && !h[q] && ir->tasks[id].minibatch >
                                          atomic_load(&rt->stop_epoch)) {
                if (prep[q]) {
                    send_release(&own[q], &n_own[q]);
                    prep[q] = 0;
                }
                mark_done(w, id, ep[q]);
                idx[q]++;
                progress = 1;
                continue;
            }
            active = 1;
            if (h[q]) {
                int done = 0;
                if (rt->x->send_test(rt->x, h[q], &done, &e)) goto fail;
                if (done) {
                    h[q] = NULL;
                    send_done(w, id, ep[q], &own[q], &n_own[q]);
                    idx[q]++;
                    progress = 1;
                }
                continue;
            }
            const sim_task *t = &ir->tasks[id];
            int64_t *ts = tslot(w, ep[q], id);
            if (!prep[q]) {
                if (!deps_ready(w, id, ep[q])) continue;
                /* ZeRO-3: a gather sends the shard the step before
                 * updated */
                if (w->ag_after[id] >= 0 && ep[q] > 1 &&
                    !task_done(w, w->ag_after[id], ep[q] - 1))
                    continue;
                prep_t[q] = now_rel(rt);
                np[q] = 0;
                if (send_pieces(w, id, pc[q], &np[q], 64, &own[q],
                                &n_own[q], &e))
                    goto fail_task;
                /* what taking the pieces took (a ring step folds the
                 * chunk received before in): part of the transfer */
                prep_ns[q] = now_rel(rt) - prep_t[q];
                /* it has folded in the step before's chunk: the sender
                 * of this step may send (gate_ok) */
                pthread_mutex_lock(&w->mu);
                w->started[id] = ep[q];
                pthread_mutex_unlock(&w->mu);
                wake_started(w, id);
                prep[q] = 1;
                progress = 1;
            }
            /* a collective moves once its receiver is in it; the task
             * is timed as if its pieces were taken then (the simulator's
             * transfer starts when its receiver has joined) */
            if (!gate_ok(w, id, ep[q])) continue;
            prep[q] = 0;
            int64_t now = now_rel(rt);
            ts[EXEC_T_START] = ts[EXEC_T_FSTART] =
                now - prep_ns[q] > prep_t[q] ? now - prep_ns[q] : prep_t[q];
            int dst = ir->tasks[t->peer].device * rt->tp + w->rank;
            if (rt->x->send(rt->x, rt, w->id, dst, ep[q], t->peer, pc[q],
                            np[q], &h[q], &e))
                goto fail_task;
            if (!h[q]) {
                send_done(w, id, ep[q], &own[q], &n_own[q]);
                idx[q]++;
            }
            progress = 1;
            continue;
fail_task:
            {
                char b[160];
                util_err_prefix(&e, "device %d, task %s", w->device,
                                task_str(rt, id, b, sizeof b));
                exec_rt_fail(rt, w->id, &e);
                goto out;
            }
        }
        if (rt->x->poll) {
            int got = 0;
            if (rt->x->poll(rt->x, rt, w->id, &got, &e)) goto fail;
            if (got) progress = 1;
        }
        pthread_mutex_lock(&w->mu);
        int finished = w->comp_finished;
        pthread_mutex_unlock(&w->mu);
        if (!active && finished) break;
        if (progress) {
            nap_us = 20;
            continue;
        }
        /* nothing to do: wait for a completion on this worker (sends
         * need one), or poll again soon (MPI receives need polling) */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = (rt->x->poll ? nap_us : 50000) * 1000;
        ts.tv_nsec += ns % 1000000000;
        ts.tv_sec += ns / 1000000000 + ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_mutex_lock(&w->mu);
        if (!atomic_load(&rt->abort) && w->wakes == seen)
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        pthread_mutex_unlock(&w->mu);
        if (nap_us < 500) nap_us *= 2;
    }
    goto out;
fail:
    util_err_prefix(&e, "device %d", w->device);
    exec_rt_fail(rt, w->id, &e);
out:
    /* a send still in flight may be read until every thread has stopped:
     * its views go back to the outbox, which the teardown frees (one
     * the next step filled, never sent, goes now) */
    for (int q = 0; q < 2; q++) {
        if (!own[q]) continue;
        UTIL_NEVER(idx[q] >= w->n_sendq[q]);
        int id = w->sendq[q][idx[q]];
        pthread_mutex_lock(&w->mu);
        exec_view *nx = w->outbox[id];
        int nn = w->n_outbox[id];
        w->outbox[id] = own[q];
        w->n_outbox[id] = n_own[q];
        pthread_mutex_unlock(&w->mu);
        send_release(&nx, &nn);
    }
    rt->be->unbind();
    return NULL;
}

/* -------------------------------------------------------------- setup */

static const exec_stage *geo(const exec_runtime *rt, int v)
{
    return &rt->geo[v];
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* A stage's recomputation segments and what its forward keeps with
 * them (exec_stage.rseg): the simulator's account of which ops run again
 * (sim_op_recomputed), a segment being the consecutive ops of one layer
 * that do. */
static void rc_build(const exec_runtime *rt, exec_stage *g, const int *ext)
{
    const exec_xop *x = rt->xop;
    const prof_model *m = rt->model;
    int n = g->n_ops;
    g->rseg = util_malloc(sizeof(int) * (size_t)n);
    g->seg_first = util_malloc(sizeof(int) * (size_t)n);
    g->seg_last = util_malloc(sizeof(int) * (size_t)n);
    g->keep_rc = util_calloc((size_t)n, sizeof(int));
    g->keep_rc_ext = util_calloc((size_t)g->n_ext + 1, sizeof(int));
    g->n_rseg = 0;
    for (int i = 0; i < n; i++) {
        int op = g->first + i;
        g->rseg[i] = -1;
        if (!g->recomp || !sim_op_recomputed(m, op, rt->recompute))
            continue;
        if (i > 0 && g->rseg[i - 1] >= 0 &&
            m->ops[op - 1].layer == m->ops[op].layer) {
            g->rseg[i] = g->rseg[i - 1];
            g->seg_last[g->rseg[i]] = i;
        } else {
            g->seg_first[g->n_rseg] = g->seg_last[g->n_rseg] = i;
            g->rseg[i] = g->n_rseg++;
        }
    }
    for (int i = 0; i < n; i++) {
        int op = g->first + i, s = g->rseg[i];
        if (s < 0) g->keep_rc[i] = g->keep_out[i];
        for (int k = 0; k < x[op].n_in; k++) {
            int j = x[op].in[k], *keep = NULL;
            if (j >= g->first && j <= g->last) {
                if (s >= 0 && g->rseg[j - g->first] == s) continue;
                keep = &g->keep_rc[j - g->first];
            } else {
                for (int q = 0; q < g->n_ext; q++)
                    if (ext[q] == j) keep = &g->keep_rc_ext[q];
            }
            /* read again by a recomputed op, or by a kept op's backward */
            if (keep && (s >= 0 || x[op].need_in[k])) *keep = 1;
        }
    }
}

/* Whether stage v recomputes: with the plan's recomputation, every stage
 * but those an offload schedule swaps whole (they have no R task). */
static int stage_recomputes(const exec_runtime *rt, int v)
{
    const sim_ir *ir = rt->ir;
    if (!rt->tiers) return 1;
    for (int i = 0; i < ir->n_tasks; i++)
        if (ir->tasks[i].stage == v && ir->tasks[i].kind == SIM_RECOMP)
            return 1;
    return 0;
}

/* Where each stage's ops sit, what crosses into it, what its backward
 * reads: the same for every worker. */
static void geo_build(exec_runtime *rt)
{
    const sim_plan *p = rt->plan;
    const exec_xop *x = rt->xop;
    int S = rt->S, SM = rt->S_model, nops = rt->model->n_ops;
    int *op_ms = util_malloc(sizeof(int) * (size_t)(nops + 1));
    for (int s = 0; s < SM; s++)
        for (int i = p->first_op[s]; i <= p->last_op[s]; i++) op_ms[i] = s;
    /* the last op to read each output (its own index when none does) */
    rt->last_use = util_malloc(sizeof(int) * (size_t)(nops + 1));
    for (int i = 0; i < nops; i++) rt->last_use[i] = i;
    for (int i = 0; i < nops; i++)
        for (int k = 0; k < x[i].n_in; k++)
            if (x[i].in[k] >= 0 && x[i].in[k] < i &&
                rt->last_use[x[i].in[k]] < i)
                rt->last_use[x[i].in[k]] = i;
    rt->geo = util_calloc((size_t)S, sizeof *rt->geo);
    for (int v = 0; v < S; v++) {
        exec_stage *g = &rt->geo[v];
        int ms = v % SM;
        g->id = v;
        g->model_stage = ms;
        g->replica = v / SM;
        g->first = p->first_op[ms];
        g->last = p->last_op[ms];
        g->n_ops = g->last - g->first + 1;
        g->device = rt->ir->stage_device[v];
        g->tied_sl = g->rel_sl[0] = g->rel_sl[1] = -1;
        int *ext = util_malloc(sizeof(int) * (size_t)(2 * g->n_ops + 1));
        int ne = 0;
        for (int i = g->first; i <= g->last; i++) {
            if (x[i].role == PROF_ROLE_EMBED) g->has_embed = 1;
            if (x[i].role == PROF_ROLE_LOSS) g->has_loss = 1;
            for (int k = 0; k < x[i].n_in; k++) {
                int j = x[i].in[k];
                if (j < g->first || j > g->last) ext[ne++] = j;
            }
        }
        qsort(ext, (size_t)ne, sizeof *ext, cmp_int);
        int u = 0;
        for (int i = 0; i < ne; i++)
            if (!u || ext[u - 1] != ext[i]) ext[u++] = ext[i];
        g->n_ext = u;
        g->ext_op = ext;
        g->ext_stage = util_malloc(sizeof(int) * (size_t)(u + 1));
        g->keep_ext = util_calloc((size_t)u + 1, sizeof(int));
        g->w_needs_ext = util_calloc((size_t)u + 1, sizeof(int));
        for (int q = 0; q < u; q++)
            g->ext_stage[q] = g->replica * SM + op_ms[ext[q]];
        g->ext_none_last = util_malloc(sizeof(int) * (size_t)(u + 1));
        for (int q = 0; q < u; q++) {
            g->ext_none_last[q] = -1;
            for (int i = g->first; i <= g->last; i++)
                for (int k = 0; k < x[i].n_in; k++)
                    if (x[i].in[k] == ext[q] && g->ext_none_last[q] != -2)
                        g->ext_none_last[q] =
                            x[i].grad == PROF_GRAD_NONE ? i : -2;
            if (g->ext_none_last[q] == -2) g->ext_none_last[q] = -1;
        }
        g->keep_out = util_calloc((size_t)g->n_ops, sizeof(int));
        g->w_needs = util_calloc((size_t)g->n_ops, sizeof(int));
        for (int i = g->first; i <= g->last; i++) {
            if (x[i].self_keep) g->keep_out[i - g->first] = 1;
            for (int k = 0; k < x[i].n_in; k++) {
                int j = x[i].in[k];
                int wn = x[i].has_w && k == 0;
                int *keep = NULL, *wneed = NULL;
                if (j >= g->first && j <= g->last) {
                    keep = &g->keep_out[j - g->first];
                    wneed = &g->w_needs[j - g->first];
                } else {
                    for (int q = 0; q < u; q++)
                        if (ext[q] == j) {
                            keep = &g->keep_ext[q];
                            wneed = &g->w_needs_ext[q];
                        }
                }
                if (x[i].need_in[k]) *keep = 1;
                if (wn) *wneed = 1;
            }
        }
        /* the backward reading an output last: its own op's (when it
         * reads it), else its lowest reader's */
        g->last_rd = util_malloc(sizeof(int) * (size_t)(g->n_ops + 1));
        for (int i = 0; i < g->n_ops; i++)
            g->last_rd[i] = x[g->first + i].self_keep ? g->first + i : -1;
        for (int i = g->last; i >= g->first; i--)
            for (int k = 0; k < x[i].n_in; k++) {
                int j = x[i].in[k];
                if (j >= g->first && j <= g->last && x[i].need_in[k] &&
                    g->last_rd[j - g->first] != j)
                    g->last_rd[j - g->first] = i;
            }
        g->recomp = rt->recompute && stage_recomputes(rt, v);
        rc_build(rt, g, ext);
    }
    free(op_ms);
}

/* Copies slice s between a stage's host arenas (h: trained, hf: frozen)
 * and the run's whole arrays a (the model's or the adapters'); nothing
 * when that array is NULL (gathering: zeros stay). Of the slice's arena
 * only floats [lo, hi) (a ZeRO shard; everything: 0, SIZE_MAX). */
static void slice_copy(const exec_slice *s, const exec_parr *a, float *h,
                       float *hf, int to_full, size_t lo, size_t hi)
{
    const exec_tensor *tt = s->lora ? a->lt : a->tt;
    float *full = s->lora ? a->lora : a->p;
    float *local = s->frozen ? hf : h;
    if (!full || !local) return;
    if (s->q4) {
        /* QLoRA's base: quantized from the whole tensor, and back as the
         * run computed with it */
        const exec_tensor *t = &tt[s->tensor];
        exec_nf4 q = exec_nf4_geom(s->row0 * s->fcols + s->col0, s->rows,
                                   s->ncols, s->fcols);
        if (!to_full) {
            exec_nf4_pack(&q, local + s->off, full + t->off, t->n);
            return;
        }
        const float *gs;
        const signed char *bc;
        const unsigned char *cd;
        exec_nf4_view(&q, local + s->off, &gs, &bc, &cd);
        float *tmp = util_malloc(sizeof *tmp * (s->n + 1));
        kern_nf4_dequantize(tmp, cd, bc, gs, q.flat0, q.rows, q.cols, q.ld,
                            q.b0);
        for (size_t i = 0; i < s->rows; i++)
            memcpy(full + t->off + (s->row0 + i) * s->fcols + s->col0,
                   tmp + i * s->ncols, s->ncols * sizeof *tmp);
        free(tmp);
        return;
    }
    for (size_t i = 0; i < s->rows; i++) {
        size_t l0 = s->off + i * s->ncols, x = l0 > lo ? l0 : lo;
        size_t y = l0 + s->ncols < hi ? l0 + s->ncols : hi;
        if (x >= y) continue;
        float *l = local + x;
        float *f = full + tt[s->tensor].off + (s->row0 + i) * s->fcols +
                   s->col0 + (x - l0);
        if (to_full) memcpy(f, l, (y - x) * sizeof *f);
        else memcpy(l, f, (y - x) * sizeof *f);
    }
}

/* An arena of n floats on the worker's device: h's (staged in host
 * memory), or zeros when h is NULL. */
static float *arena_new(exec_worker *w, size_t n, const float *h,
                        util_err *e)
{
    const exec_backend *be = w->rt->be;
    float *d = exec_mem_get(&w->mem, n);
    if (!d) {
        exec_mem_oom(&w->mem, "a stage's weights and state", e);
        util_err_prefix(e, "device %d", w->device);
        return NULL;
    }
    if (h) be->from_host(d, h, n * sizeof *h);
    else be->zero(d, n);
    return d;
}

static void arena_free(exec_worker *w, size_t n, float *d)
{
    if (d) exec_mem_put(&w->mem, d, n);
}

void exec_stage_gather(const exec_stage *st, const exec_parr *src, float *h,
                       float *hf)
{
    for (int k = 0; k < st->n_sl; k++)
        slice_copy(&st->sl[k], src, h, hf, 0, 0, SIZE_MAX);
}

void exec_stage_scatter(const exec_stage *st, const float *h,
                        const float *hf, const exec_parr *dst)
{
    for (int k = 0; k < st->n_sl; k++)
        if (st->sl[k].save_owner)
            slice_copy(&st->sl[k], dst, (float *)h, (float *)hf, 1, 0,
                       SIZE_MAX);
}

static int saves_any(const exec_stage *st)
{
    int any = 0;
    for (int k = 0; k < st->n_sl; k++) any |= st->sl[k].save_owner;
    return any;
}

/* The rows of a stage's device arenas (d: trained, df: frozen, NULL
 * without) it saves, into dst. Sharded, every replica saves the floats
 * of its shard (d holds [lo, lo + n) of the arena: the shard, or all of
 * it) and replica 0 the frozen ones. */
static void arena_collect(const exec_runtime *rt, const exec_stage *st,
                          const float *d, size_t lo, size_t n,
                          const float *df, const exec_parr *dst)
{
    if (!saves_any(st)) return;
    const exec_backend *be = rt->be;
    float *h = util_calloc(st->n + 1, sizeof *h);
    if (df && rt->zero && st->replica) df = NULL;
    float *hf = df ? util_malloc(sizeof *hf * (st->n_frozen + 1)) : NULL;
    be->to_host(h + lo, d, n * sizeof *h);
    if (df) be->to_host(hf, df, st->n_frozen * sizeof *hf);
    size_t a = rt->zero ? st->sh_lo : 0;
    size_t b = rt->zero ? st->sh_lo + st->sh_n : SIZE_MAX;
    for (int k = 0; k < st->n_sl; k++)
        if (st->sl[k].save_owner)
            slice_copy(&st->sl[k], dst, h, hf, 1,
                       st->sl[k].frozen ? 0 : a,
                       st->sl[k].frozen ? SIZE_MAX : b);
    free(h);
    free(hf);
}

/* The same from an offloaded stage's tier: the weights (the adapters'
 * into lora, the frozen ones too), the moments of what the model's
 * arena holds. */
static int ofl_collect(exec_worker *w, exec_stage *st, const exec_tensor *tt,
                       const exec_tensor *lt, float *full, float *lora,
                       float *adam_m, float *adam_v, util_err *e)
{
    if (!saves_any(st)) return 0;
    float *h[3];
    for (int k = 0; k < 3; k++) h[k] = util_malloc(sizeof(float) * (st->n + 1));
    float *hf = util_malloc(sizeof(float) * (st->n_frozen + 1));
    float *m = adam_m ? h[1] : NULL, *v = adam_v ? h[2] : NULL;
    int rc = w->tiers ? exec_tiers_read_state(w, st, h[0], m, v, hf, e)
                      : exec_ofl_read_state(w, st, h[0], m, v, e);
    float *dst[3] = {full, adam_m, adam_v};
    if (!ofl_ring(w->rt))
        for (int k = 0; k < 3 && !rc; k++) {
            exec_parr a = {tt, lt, dst[k], k ? NULL : lora};
            exec_stage_scatter(st, h[k], k || !w->tiers ? NULL : hf, &a);
        }
    /* an offload plan's ranks: each its share of what trains, and the
     * frozen slices of its share where fetches share them out (whole
     * slices: exec_tiers_frozen_chunk; zero-offload's are every rank's:
     * the first saves them) */
    size_t lo[EXEC_TIER_PIECES], n[EXEC_TIER_PIECES], flo = 0,
           fn = st->n_frozen;
    int D = w->rt->dp, c = (st->replica + 1) % D, np = 0;
    if (ofl_ring(w->rt)) {
        np = exec_tiers_chunk(st, D, c, lo, n);
        if (w->rt->tier_sched != SIM_SCHED_ZERO_OFFLOAD)
            exec_tiers_frozen_chunk(st, D, c, &flo, &fn);
        else if (st->replica)
            fn = 0;
    }
    for (int k = 0; k < 3 && !rc && ofl_ring(w->rt); k++) {
        exec_parr a = {tt, lt, dst[k], k ? NULL : lora};
        for (int i = 0; i < st->n_sl; i++) {
            const exec_slice *sl = &st->sl[i];
            if (!sl->save_owner) continue;
            if (sl->frozen) {
                if (!k && sl->off >= flo && sl->off < flo + fn)
                    slice_copy(sl, &a, h[k], hf, 1, 0, SIZE_MAX);
                continue;
            }
            for (int q = 0; q < np; q++)
                slice_copy(sl, &a, h[k], hf, 1, lo[q], lo[q] + n[q]);
        }
    }
    for (int k = 0; k < 3; k++) free(h[k]);
    free(hf);
    return rc;
}

/* Where IR stage v keeps AdamW's state: its plan stage's state_tier (0:
 * on the device). */
static int stage_htier(const exec_runtime *rt, int v)
{
    return rt->stage_tiers ? rt->plan->state_tier[v % rt->plan->n_stages]
                           : 0;
}

/* The device's task lists, checked for what the executor implements. */
static int worker_tasks(exec_worker *w, util_err *e)
{
    const exec_runtime *rt = w->rt;
    const sim_ir *ir = rt->ir;
    int d = w->device, n = ir->dev_off[d + 1] - ir->dev_off[d];
    w->comp = util_malloc(sizeof(int) * (size_t)(n + 1));
    w->sendq[0] = util_malloc(sizeof(int) * (size_t)(n + 1));
    w->sendq[1] = util_malloc(sizeof(int) * (size_t)(n + 1));
    char b[160];
    for (int j = ir->dev_off[d]; j < ir->dev_off[d + 1]; j++) {
        int id = ir->seq[j];
        const sim_task *t = &ir->tasks[id];
        for (int k = 0; k < t->n_dep; k++) {
            const sim_task *u = &ir->tasks[ir->deps[t->dep_off + k]];
            /* an offload plan's step waits for every rank's gradients
             * (its norm's agreement does, exec/tiers.c); a collective's
             * first send for its receiver's compute (gate_ok) */
            if (u->device != d &&
                !(t->kind == SIM_RECV && u->kind == SIM_SEND) &&
                !(t->kind == SIM_CPU_OPT && rt->tiers) &&
                !(t->kind == SIM_SEND && t->stream == SIM_STREAM_COLL))
                return util_errf(e, UTIL_EXIT_USAGE, "%s waits for a task of "
                                 "device %d other than its send: the executor "
                                 "runs only receives across devices",
                                 task_str(rt, id, b, sizeof b), u->device);
        }
        switch (t->kind) {
        case SIM_F: case SIM_B: case SIM_W: case SIM_BW: case SIM_RECOMP:
        case SIM_OPT:
            w->comp[w->n_comp++] = id;
            break;
        case SIM_SEND:
            if (t->stream == SIM_STREAM_COLL)
                w->sendq[1][w->n_sendq[1]++] = id;
            else
                w->sendq[0][w->n_sendq[0]++] = id;
            break;
        case SIM_RECV:
            break;
        case SIM_SWAP_IN: case SIM_SWAP_OUT: case SIM_NVME_READ:
        case SIM_NVME_WRITE: case SIM_CPU_OPT:
            if (rt->stage_tiers && !sim_kind_nvme(t->kind) &&
                !(t->kind == SIM_CPU_OPT &&
                  stage_htier(rt, t->stage) == SIM_TIER_NVME)) {
                /* a stage tier's copies (and its step on DRAM): in
                 * order, before its step */
                w->comp[w->n_comp++] = id;
                break;
            }
            if (rt->tiers || rt->stage_tiers) {
                /* a tier thread per stream: a stage tier's drive chunks
                 * read, step and write back side by side, as the IR
                 * overlaps them */
                int q = t->stream;
                if (!w->tq[q])
                    w->tq[q] = util_malloc(sizeof(int) * (size_t)(n + 1));
                w->tq[q][w->n_tq[q]++] = id;
                break;
            }
            /* fall through */
        default:
            return util_errf(e, UTIL_EXIT_USAGE, "%s: the executor has no "
                             "%s tasks yet (plans that offload to host memory "
                             "or disk)", task_str(rt, id, b, sizeof b),
                             sim_kind_name((sim_kind)t->kind));
        }
    }
    return 0;
}

/* The LoRA adapters' tensors of the run's mode (none but a terminator
 * unless it is LoRA); freed by the caller. */
static exec_tensor *lora_tensors(const exec_runtime *rt)
{
    int n;
    exec_lora_table(&rt->cfg, &rt->model->ft, NULL, &n);
    exec_tensor *t = util_calloc((size_t)n + 1, sizeof *t);
    exec_lora_table(&rt->cfg, &rt->model->ft, t, &n);
    return t;
}

double exec_stage_state_bytes(const exec_runtime *rt, const exec_stage *st)
{
    if (st->ofl) return 0;
    /* the tiers hold the states; zero-offload keeps its weights here,
     * the frozen ones too */
    if (rt->tiers)
        return rt->tier_sched == SIM_SCHED_ZERO_OFFLOAD
             ? (double)(st->n + st->n_frozen) * sizeof(float) : 0;
    double n = (double)st->n, sh = (double)st->sh_n;
    /* ZeRO-2's gradient shard lives from a step's first reduced
     * microbatch to its update only; ZeRO-3 keeps the weights' shard
     * (its gathers hold the whole for a while) */
    double g = rt->zero >= 2 ? 0 : n, m = rt->zero ? sh : n;
    double wt = rt->zero >= 3 ? sh : n;
    if (stage_htier(rt, st->id)) m = 0;     /* the moments are the host's */
    return (wt + g + 2 * m + (double)st->n_frozen) * sizeof(float);
}

/* ZeRO-3 (sim_add_sharded): a compute task that waits for an all-gather
 * computes with its weights, and so does the one the IR's buffer of that
 * gather holds them until (the backward after a recomputation), after
 * which they go; a gather's first send waits for the stage's step before
 * (the IR has one iteration: the next one's gathers carry no dependency
 * on the step that updated the shard they send). */
static void gathers_index(exec_worker *w)
{
    const sim_ir *ir = w->rt->ir;
    for (int id = 0; id < ir->n_tasks; id++) {
        const sim_task *t = &ir->tasks[id];
        if (t->device != w->device || t->stream != SIM_STREAM_COMPUTE ||
            t->stage < 0)
            continue;
        for (int q = 0; q < t->n_dep; q++) {
            int d = ir->deps[t->dep_off + q];
            const sim_task *u = &ir->tasks[d];
            if (u->comm == SIM_COMM_DP && u->coll == SIM_COLL_ALLGATHER)
                w->ag_use[id] = w->inst[d];
        }
    }
    for (int b = 0; b < ir->n_bufs; b++) {
        const sim_ir_buf *x = &ir->bufs[b];
        const sim_task *a = &ir->tasks[x->alloc];
        if (x->device != w->device || a->comm != SIM_COMM_DP ||
            a->coll != SIM_COLL_ALLGATHER)
            continue;
        w->ag_use[x->release] = w->ag_rel[x->release] = w->inst[x->alloc];
    }
    int *opt = util_malloc(sizeof(int) * (size_t)(ir->n_stages + 1));
    for (int v = 0; v < ir->n_stages; v++) opt[v] = -1;
    for (int id = 0; id < ir->n_tasks; id++) {
        const sim_task *t = &ir->tasks[id];
        if (t->kind == SIM_OPT && t->device == w->device && t->stage >= 0)
            opt[t->stage] = id;
    }
    for (int id = 0; id < ir->n_tasks; id++) {
        const sim_task *t = &ir->tasks[id];
        if (t->device == w->device && t->comm == SIM_COMM_DP &&
            t->coll == SIM_COLL_ALLGATHER && t->kind != SIM_RECV && !t->mb)
            w->ag_after[id] = opt[t->stage];
    }
    free(opt);
}

/* Sharded data parallelism: which ring step each data-parallel task is
 * (exec_worker.inst), the reduce-scatter each backward's gradient goes
 * to, each stage's reduce-scatters and all-gathers on this device. The
 * k-th task of a kind, collective, stage and step number in id order is
 * of the stage's k-th ring of that collective (every ring has one of
 * each on every member). */
static void worker_rings(exec_worker *w)
{
    const exec_runtime *rt = w->rt;
    const sim_ir *ir = rt->ir;
    int n = ir->n_tasks, H = rt->shard > 1 ? rt->shard : 1;
    w->inst = util_malloc(sizeof(int) * (size_t)(n + 1));
    w->bw_rs = util_malloc(sizeof(int) * (size_t)(n + 1));
    w->ag_use = util_malloc(sizeof(int) * (size_t)(n + 1));
    w->ag_rel = util_malloc(sizeof(int) * (size_t)(n + 1));
    w->ag_after = util_malloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        w->inst[i] = w->bw_rs[i] = w->ag_use[i] = w->ag_rel[i] =
            w->ag_after[i] = -1;
    if (ofl_ring(rt)) {
        /* an offload plan's: rings of dp - 1 steps */
        size_t nk = (size_t)w->n_st * SIM_COLL_COUNT * 2 * (size_t)rt->dp;
        int *cnt = util_calloc(nk + 1, sizeof *cnt);
        w->dpt = util_malloc(sizeof(int) * (size_t)(n + 1));
        for (int id = 0; id < n; id++) {
            const sim_task *t = &ir->tasks[id];
            if (t->comm != SIM_COMM_DP || t->device != w->device) continue;
            w->dpt[w->n_dpt++] = id;
            int recv = t->kind == SIM_RECV;
            int li = w->lidx[recv ? t->stage2 : t->stage];
            UTIL_NEVER(li < 0 || t->mb < 0 || t->mb >= rt->dp);
            size_t key = (((size_t)li * SIM_COLL_COUNT + t->coll) * 2 +
                          (size_t)recv) * (size_t)rt->dp + (size_t)t->mb;
            w->inst[id] = cnt[key]++;
        }
        free(cnt);
        return;
    }
    if (!rt->zero) return;
    /* the stages whose tied table's copy the IR exchanges */
    for (int id = 0; id < n; id++) {
        const sim_task *t = &ir->tasks[id];
        if (t->comm == SIM_COMM_EMB && t->kind == SIM_SEND &&
            t->device == w->device && w->lidx[t->stage] >= 0)
            w->st[w->lidx[t->stage]].tied_x |= 1u << (t->table < 3 ? t->table
                                                                  : 0);
    }
    /* hybrid sharding: each reduce-scatter's shard is then all-reduced
     * over the G groups, a ring of 2(G - 1) steps, whose end is the
     * reduction's */
    int G = shard_groups(rt), steps = H > 2 * G ? H : 2 * G;
    size_t nk = (size_t)w->n_st * SIM_COLL_COUNT * 2 * (size_t)steps;
    int *cnt = util_calloc(nk + 1, sizeof *cnt);
    for (int pass = 0; pass < 2; pass++) {
        memset(cnt, 0, sizeof *cnt * nk);
        for (int id = 0; id < n; id++) {
            const sim_task *t = &ir->tasks[id];
            if (t->comm != SIM_COMM_DP || t->device != w->device) continue;
            int recv = t->kind == SIM_RECV;
            int li = w->lidx[recv ? t->stage2 : t->stage];
            UTIL_NEVER(li < 0 || t->mb < 0 || t->mb >= steps);
            exec_stage *st = &w->st[li];
            size_t key = (((size_t)li * SIM_COLL_COUNT + t->coll) * 2 +
                          (size_t)recv) * (size_t)steps + (size_t)t->mb;
            int k = w->inst[id] = cnt[key]++;
            if (t->coll == SIM_COLL_ALLREDUCE) {
                if (pass && t->mb == 2 * G - 3) st->rs_last[2 * k + recv] = id;
                continue;
            }
            if (t->coll == SIM_COLL_ALLGATHER && rt->zero >= 3) {
                if (!pass && !recv && !t->mb) st->n_agb++;
                continue;
            }
            if (t->coll == SIM_COLL_ALLGATHER) {
                if (pass) st->ag[st->n_ag++] = id;
                else st->n_ag++;
                continue;
            }
            if (t->coll != SIM_COLL_REDUCE_SCATTER) continue;
            if (!pass) {
                if (!recv && !t->mb) st->n_rs++;
                continue;
            }
            if (t->mb == H - 2 && G == 1) st->rs_last[2 * k + recv] = id;
            /* the backward whose gradient the ring reduces */
            for (int q = 0; !recv && !t->mb && q < t->n_dep; q++) {
                int d = ir->deps[t->dep_off + q];
                const sim_task *u = &ir->tasks[d];
                if (u->stream == SIM_STREAM_COMPUTE &&
                    (u->kind == SIM_W || u->kind == SIM_BW))
                    w->bw_rs[d] = k;
            }
        }
        for (int i = 0; !pass && i < w->n_st; i++) {
            exec_stage *st = &w->st[i];
            st->ag = util_malloc(sizeof(int) * (size_t)(st->n_ag + 1));
            st->n_ag = 0;
            st->rsb = util_calloc((size_t)st->n_rs + 1, sizeof *st->rsb);
            st->rs_last = util_calloc(2 * (size_t)st->n_rs + 1, sizeof(int));
            st->agb = util_calloc((size_t)st->n_agb + 1, sizeof *st->agb);
        }
    }
    free(cnt);
    if (rt->zero >= 3) gathers_index(w);
}

static int worker_stages(exec_worker *w, const float *full,
                         const float *adam_m, const float *adam_v,
                         const float *lora, util_err *e)
{
    exec_runtime *rt = w->rt;
    exec_tensor tt[EXEC_P_COUNT];
    exec_gpt_param_table(&rt->cfg, tt);
    exec_tensor *lt = lora_tensors(rt);
    int rc = 0;
    w->lidx = util_malloc(sizeof(int) * (size_t)(rt->S + 1));
    w->st = util_calloc((size_t)rt->S + 1, sizeof *w->st);
    if ((rt->offload.policy != EXEC_OFFLOAD_NONE && exec_ofl_open(w, e)) ||
        (rt->tiers && exec_tiers_open(w, e))) {
        free(lt);
        return util_err_prefix(e, "device %d", w->device);
    }
    for (int v = 0; v < rt->S && !rc; v++) {
        w->lidx[v] = -1;
        if (rt->geo[v].device != w->device) continue;
        w->lidx[v] = w->n_st;
        exec_stage *st = &w->st[w->n_st++];
        *st = rt->geo[v];
        /* sharded (an offload plan's ranks too), every replica counts
         * and saves its shard: replica 0's ownership, cut to the shard
         * where it is used */
        st->n = exec_slices_build(rt->model, &rt->cfg, st->first, st->last,
                                  rt->tp, w->rank,
                                  rt->zero ? st->replica / rt->shard
                                  : ofl_ring(rt) ? 0 : st->replica, 0,
                                  &st->sl,
                                  &st->n_sl, &st->n_frozen);
        st->sh_n = st->n;
        if (rt->zero) {
            int H = rt->shard;
            chunk(st->n, H, mod(st->replica % H + 1, H), &st->sh_lo,
                  &st->sh_n);
        }
        for (int k = 0; k < st->n_sl; k++) {
            const exec_slice *s = &st->sl[k];
            if (!s->tied || s->frozen) continue;
            if (s->tensor == EXEC_P_RELE) st->rel_sl[0] = k;
            else if (s->tensor == EXEC_P_RELD) st->rel_sl[1] = k;
            else st->tied_sl = k;
        }
        exec_stage_op_slices(rt, st);
        st->n_ver_slots = 1;
        if (w->ofl || w->tiers) {
            /* the states in their tier; the device holds windows
             * (offload.c), or what the IR's fetches bring and the
             * gradient buffers its backwards start (tiers.c) */
            st->w = util_calloc(1, sizeof *st->w);
            st->pending = util_calloc(1, sizeof(int));
            st->steps = rt->step0;
            st->live = st->max_live = 1;
            exec_parr ws = {tt, lt, (float *)full, (float *)lora};
            if (w->tiers
                    ? exec_tiers_stage_add(w, st, &ws, adam_m, adam_v, e)
                    : exec_ofl_stage_add(w, st, tt, full, adam_m, adam_v, e))
                rc = util_err_prefix(e, "device %d", w->device);
            continue;
        }
        /* what trains: weights, gradients, AdamW m and v (sharded as
         * the ZeRO stage says); what is frozen (a fine-tuning mode's):
         * its weights only */
        /* a stage tier keeps AdamW's moments on the host */
        int htier = stage_htier(rt, st->id);
        double bytes = exec_stage_state_bytes(rt, st);
        if (exec_mem_charge(&w->mem, bytes)) {
            /* before any step: the budget asked for, or the plan's
             * device, is the input to change */
            char a[32], c[32];
            rc = util_errf(e, UTIL_EXIT_USAGE, "device %d: the weights, "
                           "gradients and AdamW state of stage %d (%s) do "
                           "not fit its memory (%s, %s)", w->device, v,
                           util_fmt_bytes(bytes, a, sizeof a),
                           util_fmt_bytes(w->mem.budget, c, sizeof c),
                           rt->budget_given ? "--mem-budget"
                                            : "the plan's device");
            break;
        }
        st->n_ver_slots = rt->async ? rt->K + 2 : 1;
        st->w = util_calloc((size_t)st->n_ver_slots, sizeof *st->w);
        st->pending = util_calloc((size_t)st->n_ver_slots, sizeof(int));
        /* staged in host memory, uploaded at once */
        float *h[4], *hf = util_calloc(st->n_frozen + 1, sizeof *hf);
        const float *src[4] = {full, NULL, adam_m, adam_v};
        for (int k = 0; k < 4; k++) {
            h[k] = NULL;
            if (!src[k]) continue;      /* gradients, moments from zero */
            h[k] = util_calloc(st->n + 1, sizeof *h[k]);
            /* the adapters start from lora, their moments from a resumed
             * run's (zero without) */
            const float *ad[4] = {lora, NULL, rt->lora_m0, rt->lora_v0};
            exec_parr a = {tt, lt, (float *)src[k], (float *)ad[k]};
            exec_stage_gather(st, &a, h[k], k ? NULL : hf);
        }
        size_t mo = rt->zero ? st->sh_lo : 0, mn = rt->zero ? st->sh_n
                                                             : st->n;
        /* ZeRO-3 keeps the weights' shard; gathers bring the rest */
        if ((rt->zero >= 3
                 ? !(st->wsh = arena_new(w, mn, h[0] ? h[0] + mo : NULL, e))
                 : !(st->w[0] = arena_new(w, st->n, h[0], e))) ||
            (rt->zero < 2 && !(st->g = arena_new(w, st->n, NULL, e))) ||
            (!htier &&
             (!(st->am = arena_new(w, mn, h[2] ? h[2] + mo : NULL, e)) ||
              !(st->av = arena_new(w, mn, h[3] ? h[3] + mo : NULL, e)))) ||
            (st->n_frozen && !(st->wf = arena_new(w, st->n_frozen, hf, e))))
            rc = -1;
        /* the tier's weights are the device's at the start (those given,
         * or the arena's own) */
        if (!rc && htier) {
            float *w0 = h[0];
            if (!w0) {
                w0 = util_calloc(st->n + 1, sizeof *w0);
                rt->be->to_host(w0, st->w[0], st->n * sizeof *w0);
            }
            if (exec_stier_add(w, st, htier, w0, h[2], h[3], e))
                rc = util_err_prefix(e, "device %d", w->device);
            if (w0 != h[0]) free(w0);
        }
        for (int k = 0; k < 4; k++) free(h[k]);
        free(hf);
        if (rc) break;
        st->steps = rt->step0;
        st->live = st->max_live = 1;
        if (rt->async)
            for (int i = 0; i < rt->ir->n_tasks; i++) {
                const sim_task *t = &rt->ir->tasks[i];
                if (t->stage == v && t->kind <= SIM_RECOMP &&
                    t->stream == SIM_STREAM_COMPUTE && t->version >= 0 &&
                    t->version < st->n_ver_slots)
                    st->pending[t->version]++;
            }
    }
    free(lt);
    if (!rc && w->tiers && exec_tiers_ready(w, e)) rc = -1;
    if (rc) return -1;
    size_t slots = (size_t)rt->K * (size_t)rt->M;
    w->rec = util_calloc((size_t)w->n_st + 1, sizeof *w->rec);
    w->lact = util_calloc((size_t)w->n_st + 1, sizeof *w->lact);
    w->lgrad = util_calloc((size_t)w->n_st + 1, sizeof *w->lgrad);
    for (int i = 0; i < w->n_st; i++) {
        w->rec[i] = util_calloc(slots, sizeof **w->rec);
        w->lact[i] = util_calloc(slots, sizeof **w->lact);
        w->lgrad[i] = util_calloc(slots, sizeof **w->lgrad);
    }
    worker_rings(w);
    return 0;
}

int exec_rt_setup(exec_runtime *rt, const float *full, const float *adam_m,
                  const float *adam_v, const float *lora, util_err *e)
{
    const sim_ir *ir = rt->ir;
    rt->S = ir->n_stages;
    rt->S_model = rt->plan->n_stages;
    rt->M = ir->n_mb;
    rt->K = ir->n_minibatches;
    pthread_mutex_init(&rt->err_mu, NULL);
    pthread_mutex_init(&rt->host_mu, NULL);
    rt->err_mu_ok = 1;
    atomic_init(&rt->abort, 0);
    atomic_init(&rt->stop_epoch, rt->async ? rt->K : rt->epochs);
    geo_build(rt);
    gates_build(rt);
    int n = ir->n_tasks, E = rt->epochs;
    int nep = rt->async ? rt->K : rt->epochs;
    rt->w = util_calloc((size_t)rt->n_local + 1, sizeof *rt->w);
    for (int i = 0; i < rt->n_local; i++) {
        exec_worker *w = &rt->w[i];
        w->id = rt->first_local + i;
        w->device = w->id / rt->tp;
        w->rank = w->id % rt->tp;
        w->rt = rt;
        w->dev.be = rt->be;
        w->dev.worker = w->id;
        w->dev.pin = rt->n_local > 1;
        exec_mem_init(&w->mem, rt->budget, &w->dev);
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        w->done = util_calloc((size_t)n + 1, sizeof(int));
        w->prog_ep = util_calloc((size_t)n + 1, sizeof(int));
        w->prog_op = util_calloc((size_t)n + 1, sizeof(int));
        w->bkt_rx = util_malloc(sizeof(int) * ((size_t)n + 1));
        w->n_bkt_rx = 0;
        for (int i = 0; rt->bkt_last && i < n; i++)
            if (rt->bkt_last[i] && rt->ir->tasks[i].device == w->device)
                w->bkt_rx[w->n_bkt_rx++] = i;
        w->started = util_calloc((size_t)n + 1, sizeof(int));
        w->rbuf = util_calloc((size_t)n + 1, sizeof *w->rbuf);
        w->outbox = util_calloc((size_t)n + 1, sizeof *w->outbox);
        w->n_outbox = util_calloc((size_t)n + 1, sizeof(int));
        w->tm = util_malloc(sizeof(int64_t) * (size_t)E * (size_t)n *
                                EXEC_T_N + sizeof(int64_t));
        for (size_t k = 0; k < (size_t)E * (size_t)n * EXEC_T_N; k++)
            w->tm[k] = -1;
        w->ep_loss = util_calloc((size_t)nep + 1, sizeof(double));
        w->ep_norm = util_calloc((size_t)nep + 1, sizeof(double));
        w->ep_kern = util_calloc((size_t)E + 1, sizeof(int64_t));
        w->ep_wait = util_calloc((size_t)E + 1, sizeof(int64_t));
        w->ep_wall = util_calloc((size_t)E + 1, sizeof(int64_t));
        w->ep_end = util_calloc((size_t)E + 1, sizeof(int64_t));
        w->ep_peak = util_calloc((size_t)E + 1, sizeof(double));
        w->used_ver = util_malloc(sizeof(int) * (size_t)(n + 1));
        size_t nop = (size_t)rt->model->n_ops * PROF_PHASES;
        w->op_ns = util_calloc(nop + 1, sizeof(double));
        w->op_n = util_calloc(nop + 1, sizeof(double));
        for (int k = 0; k < n; k++) w->used_ver[k] = -1;
        if (worker_tasks(w, e) || rt->be->open(&w->dev, e)) return -1;
        /* this thread uploads the stages' state on the device */
        if (rt->be->bind(&w->dev, EXEC_ROLE_SETUP, e)) return -1;
        int rc = worker_stages(w, full, adam_m, adam_v, lora, e);
        if (!rc) rc = rt->be->sync(e);
        rt->be->unbind();
        if (rc) return -1;
    }
    return 0;
}

int exec_rt_run(exec_runtime *rt)
{
    rt->t0 = (int64_t)exec_now_ns();
    for (int i = 0; i < rt->n_local; i++)
        if (rt->record_mem) exec_mem_record(&rt->w[i].mem, rt->t0);
    int started = 0;
    for (int i = 0; i < rt->n_local; i++) {
        exec_worker *w = &rt->w[i];
        if (pthread_create(&w->comm_th, NULL, comm_main, w)) break;
        w->threads |= 2;
        if (pthread_create(&w->comp_th, NULL, compute_main, w)) break;
        w->threads |= 1;
        int q = 0;
        for (; q < SIM_STREAM_COUNT; q++) {
            if (!w->n_tq[q]) continue;
            tier_arg *a = util_malloc(sizeof *a);
            *a = (tier_arg){w, q};
            if (pthread_create(&w->tier_th[q], NULL, tier_main, a)) {
                free(a);
                break;
            }
            w->tier_threads |= 1 << q;
        }
        if (q < SIM_STREAM_COUNT) break;
        started++;
    }
    if (started < rt->n_local) {
        util_err e;
        util_errf(&e, UTIL_EXIT_FAIL, "could not start the workers' threads");
        exec_rt_fail(rt, -1, &e);
    }
    for (int i = 0; i < rt->n_local; i++) {
        exec_worker *w = &rt->w[i];
        if (w->threads & 1) pthread_join(w->comp_th, NULL);
        if (!(w->threads & 1)) {
            /* its compute thread never ran: let the comm thread end */
            pthread_mutex_lock(&w->mu);
            w->comp_finished = 1;
            w->wakes++;
            pthread_cond_broadcast(&w->cv);
            pthread_mutex_unlock(&w->mu);
        }
        if (w->threads & 2) pthread_join(w->comm_th, NULL);
        for (int q = 0; q < SIM_STREAM_COUNT; q++)
            if (w->tier_threads & (1 << q)) pthread_join(w->tier_th[q], NULL);
    }
    return atomic_load(&rt->abort) ? -1 : 0;
}

/* A stage tier's moments into m and v (NULL: not wanted). */
static int stier_collect(exec_worker *w, exec_stage *st, const exec_parr *m,
                         const exec_parr *v, util_err *e)
{
    if (!saves_any(st) || (!m && !v)) return 0;
    float *h[2];
    for (int k = 0; k < 2; k++) h[k] = util_calloc(st->n + 1, sizeof(float));
    int rc = exec_stier_moments(w, st, m ? h[0] : NULL, v ? h[1] : NULL, e);
    for (int k = 0; k < st->n_sl && !rc; k++)
        if (st->sl[k].save_owner) {
            if (m) slice_copy(&st->sl[k], m, h[0], NULL, 1, 0, SIZE_MAX);
            if (v) slice_copy(&st->sl[k], v, h[1], NULL, 1, 0, SIZE_MAX);
        }
    free(h[0]);
    free(h[1]);
    return rc;
}

int exec_rt_collect(exec_runtime *rt, float *full, float *adam_m,
                    float *adam_v, float *lora, float *lora_m, float *lora_v,
                    util_err *e)
{
    const exec_backend *be = rt->be;
    exec_tensor tt[EXEC_P_COUNT];
    exec_gpt_param_table(&rt->cfg, tt);
    exec_tensor *lt = lora_tensors(rt);
    /* weights into full and lora; moments of the model's arena into
     * adam_m and adam_v, the adapters' into lora_m and lora_v */
    exec_parr wt = {tt, lt, full, lora}, m = {tt, lt, adam_m, lora_m},
              v = {tt, lt, adam_v, lora_v};
    int rc = 0;
    for (int i = 0; i < rt->n_local && !rc; i++) {
        exec_worker *w = &rt->w[i];
        if (be->bind(&w->dev, EXEC_ROLE_SETUP, e)) {
            rc = -1;
            break;
        }
        for (int k = 0; k < w->n_st && !rc; k++) {
            exec_stage *st = &w->st[k];
            if (st->ofl || w->tiers) {
                if (ofl_collect(w, st, tt, lt, full, lora, adam_m, adam_v,
                                e))
                    rc = util_err_prefix(e, "device %d", w->device);
                continue;
            }
            size_t mo = rt->zero ? st->sh_lo : 0;
            size_t mn = rt->zero ? st->sh_n : st->n;
            if (rt->zero >= 3)
                arena_collect(rt, st, st->wsh, mo, mn, st->wf, &wt);
            else
                arena_collect(rt, st, st->w[st->cur_ver], 0, st->n, st->wf,
                              &wt);
            if (st->stier) {
                if (stier_collect(w, st, adam_m ? &m : NULL,
                                  adam_v ? &v : NULL, e))
                    rc = util_err_prefix(e, "device %d", w->device);
                continue;
            }
            if (adam_m) arena_collect(rt, st, st->am, mo, mn, NULL, &m);
            if (adam_v) arena_collect(rt, st, st->av, mo, mn, NULL, &v);
        }
        if (!rc && be->sync(e)) rc = util_err_prefix(e, "device %d", w->device);
        be->unbind();
    }
    free(lt);
    return rc;
}

void exec_rt_free(exec_runtime *rt)
{
    if (!rt) return;
    size_t slots = (size_t)rt->K * (size_t)rt->M;
    for (int i = 0; rt->w && i < rt->n_local; i++) {
        exec_worker *w = &rt->w[i];
        if (!w->rt) continue;       /* never set up */
        exec_ofl_free(w);
        exec_tiers_free(w);
        for (int q = 0; q < SIM_STREAM_COUNT; q++) free(w->tq[q]);
        for (int k = 0; k < w->n_st; k++) {
            exec_stage *st = &w->st[k];
            for (size_t s = 0; w->rec && w->rec[k] && s < slots; s++) {
                rec_free(st, w->rec[k][s]);
                exec_view *la = w->lact[k][s];
                for (int q = 0; la && q < st->n_ext; q++)
                    exec_view_drop(&la[q]);
                free(la);
                for (exec_grad_in *x = w->lgrad[k][s]; x;) {
                    exec_grad_in *nx = x->next;
                    exec_view_drop(&x->v);
                    free(x);
                    x = nx;
                }
            }
            if (w->rec) {
                free(w->rec[k]);
                free(w->lact[k]);
                free(w->lgrad[k]);
            }
            /* ZeRO-3's w[0] is a gather's, lent */
            for (int v = 0; st->w && rt->zero < 3 && v < st->n_ver_slots;
                 v++)
                arena_free(w, st->n, st->w[v]);
            arena_free(w, st->sh_n, st->wsh);
            for (int k = 0; st->agb && k < st->n_agb; k++)
                exec_buf_unref(st->agb[k]);
            free(st->agb);
            free(st->w);
            free(st->pending);
            size_t mn = rt->zero ? st->sh_n : st->n;
            exec_stier_free(w, st);
            if (!st->ofl && !rt->tiers) {
                arena_free(w, rt->zero >= 2 ? 0 : st->n,
                           rt->zero >= 2 ? NULL : st->g);
                arena_free(w, mn, st->am);
                arena_free(w, mn, st->av);
            }
            if (st->gsh) exec_mem_charge(&w->mem,
                                         -(double)st->sh_n * sizeof(float));
            arena_free(w, st->sh_n, st->gsh);
            for (int k = 0; k < 3; k++) exec_buf_unref(st->tacc[k]);
            for (int k = 0; st->rsb && k < st->n_rs; k++)
                exec_buf_unref(st->rsb[k]);
            free(st->rsb);
            free(st->rs_last);
            free(st->ag);
            arena_free(w, st->n_frozen, st->wf);
            free(st->sl);
            free(st->sl_w);
            free(st->sl_b);
            free(st->sl_l);
            free(st->sl_x);
        }
        int n = rt->ir->n_tasks;
        for (int k = 0; w->rbuf && k < n; k++) exec_buf_unref(w->rbuf[k]);
        for (int k = 0; w->outbox && k < n; k++) {
            for (int j = 0; j < w->n_outbox[k]; j++)
                exec_view_drop(&w->outbox[k][j]);
            free(w->outbox[k]);
        }
        free(w->rec); free(w->lact); free(w->lgrad);
        free(w->st); free(w->lidx);
        free(w->comp); free(w->sendq[0]); free(w->sendq[1]);
        free(w->done); free(w->started); free(w->prog_ep); free(w->prog_op);
        free(w->bkt_rx); free(w->rbuf); free(w->outbox); free(w->n_outbox);
        free(w->tm); free(w->ep_loss); free(w->ep_norm);
        free(w->ep_kern); free(w->ep_wait); free(w->ep_wall); free(w->ep_end);
        free(w->ep_peak);
        free(w->used_ver);
        free(w->inst);
        free(w->dpt);
        free(w->bw_rs);
        free(w->ag_use);
        free(w->ag_rel);
        free(w->ag_after);
        free(w->op_ns);
        free(w->op_n);
        if (w->n_marks) marks_read(w, 0, NULL);    /* an aborted task's */
        free(w->marks);
        exec_mem_destroy(&w->mem);
        rt->be->close(&w->dev);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    free(rt->w);
    for (int v = 0; rt->geo && v < rt->S; v++) {
        exec_stage *g = &rt->geo[v];
        free(g->ext_op); free(g->ext_stage); free(g->keep_ext);
        free(g->ext_none_last);
        free(g->w_needs_ext); free(g->keep_out); free(g->w_needs);
        free(g->last_rd);
        free(g->rseg); free(g->seg_first); free(g->seg_last);
        free(g->keep_rc); free(g->keep_rc_ext);
    }
    free(rt->geo);
    free(rt->xop);
    free(rt->last_use);
    free(rt->gate_off); free(rt->gate);
    free(rt->wake_off); free(rt->wake);
    free(rt->gate_start); free(rt->started_by);
    free(rt->early); free(rt->bkt_edge); free(rt->bkt_last);
    rt->gate_off = rt->gate = rt->wake_off = rt->wake = NULL;
    rt->gate_start = rt->started_by = NULL;
    rt->xop = NULL;
    rt->last_use = NULL;
    rt->geo = NULL;
    rt->w = NULL;
    if (rt->err_mu_ok) {
        pthread_mutex_destroy(&rt->err_mu);
        pthread_mutex_destroy(&rt->host_mu);
    }
    /* after the tiers, which give their buffers back through it */
    exec_host_share_free(rt->host_share);
    rt->host_share = NULL;
}
