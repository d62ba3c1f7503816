/* The in-process transport: every worker is a pair of threads of this
 * process, each device's memory its own budget. A send copies its pieces
 * into a buffer charged to the receiving device (on GPUs a device-to-
 * device or peer copy) and completes the receive once the copy is done. A
 * sum over a group adds every member's values in member order, so each
 * gets the same bits and the MPI transport (which sums the same way) too:
 * member m adds up chunk m of all members' tensors, then each copies
 * every chunk back. Barriers wake up when the run is stopped. */
#include <stdlib.h>
#include <string.h>

#include "exec/runtime.h"

typedef struct group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, arrived;
    unsigned gen;
    void **ptr;             /* each member's tensor */
    float **part;           /* each member's chunk of the sum */
} group;

typedef struct inproc {
    group world;
    group *tp;
    int n_tp;
} inproc;

static void group_init(group *g, int size)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->size = size;
    g->ptr = util_calloc((size_t)size + 1, sizeof *g->ptr);
    g->part = util_calloc((size_t)size + 1, sizeof *g->part);
}

static void group_destroy(group *g)
{
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->ptr);
    free(g->part);
}

static int barrier(group *g, exec_runtime *rt)
{
    pthread_mutex_lock(&g->mu);
    unsigned gen = g->gen;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->gen && !atomic_load(&rt->abort))
            pthread_cond_wait(&g->cv, &g->mu);
    }
    int stopped = gen == g->gen;
    pthread_mutex_unlock(&g->mu);
    return stopped ? -1 : 0;
}

static int ip_send(exec_xport *x, exec_runtime *rt, int src, int dst,
                   int epoch, int rid, const exec_piece *pc, int np, void **h,
                   util_err *e)
{
    (void)x;
    (void)src;
    *h = NULL;
    exec_worker *dw = exec_rt_worker(rt, dst);
    const exec_backend *be = rt->be;
    size_t total = 0;
    for (int i = 0; i < np; i++) total += pc[i].n;
    int64_t t0 = (int64_t)exec_now_ns();
    exec_buf *b = exec_buf_new(&dw->mem, total, 0);
    if (!b) {
        exec_mem_oom(&dw->mem, "the message", e);
        return util_err_prefix(e, "device %d", dw->device);
    }
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        be->copy(b->p + off, pc[i].p, pc[i].n * sizeof(float));
        off += pc[i].n;
    }
    /* delivered once it has landed */
    if (be->sync(e)) {
        exec_buf_unref(b);
        return -1;
    }
    exec_deliver(rt, dst, epoch, rid, b, t0);
    return 0;
}

static int ip_send_test(exec_xport *x, void *h, int *done, util_err *e)
{
    (void)x;
    (void)h;
    (void)e;
    *done = 1;
    return 0;
}

/* Host doubles (a step's agreed values): every member adds all in member
 * order. */
static int sum_host(group *g, exec_runtime *rt, int me, double *buf,
                    size_t n, util_err *e)
{
    g->ptr[me] = buf;
    if (barrier(g, rt)) return util_errf(e, UTIL_EXIT_FAIL, "stopped");
    double *acc = util_malloc(sizeof *acc * (n + 1));
    memcpy(acc, g->ptr[0], n * sizeof *acc);
    for (int q = 1; q < g->size; q++) exec_sum_into(acc, g->ptr[q], n, 1);
    /* nobody may change its buffer before all have read it */
    int rc = barrier(g, rt);
    if (!rc) memcpy(buf, acc, n * sizeof *acc);
    free(acc);
    return rc ? util_errf(e, UTIL_EXIT_FAIL, "stopped") : 0;
}

/* Chunk q of n floats over the group's members: [*lo, *lo + *len). */
static void chunk_of(const group *g, size_t n, int q, size_t *lo,
                     size_t *len)
{
    *lo = n * (size_t)q / (size_t)g->size;
    *len = n * (size_t)(q + 1) / (size_t)g->size - *lo;
}

/* Chunk me of the sum of the tensors the members published (g->ptr), in
 * member order, into out. */
static void add_chunk(const group *g, const exec_backend *be, size_t n,
                      int me, float *out)
{
    size_t lo, len;
    chunk_of(g, n, me, &lo, &len);
    be->copy(out, (const float *)g->ptr[0] + lo, len * sizeof(float));
    for (int q = 1; q < g->size; q++)
        be->acc(out, (const float *)g->ptr[q] + lo, len);
}

/* The chunks the members published (g->part) into whole. */
static void copy_chunks(const group *g, const exec_backend *be, size_t n,
                        float *whole)
{
    for (int q = 0; q < g->size; q++) {
        size_t lo, len;
        chunk_of(g, n, q, &lo, &len);
        be->copy(whole + lo, g->part[q], len * sizeof(float));
    }
}

/* Device floats: member m sums chunk m of every member's tensor (in member
 * order: the same bits as adding whole tensors), then each member copies
 * all chunks back. Each waits for its device before the others read. */
static int sum_dev(group *g, exec_runtime *rt, int w, int me, float *buf,
                   size_t n, util_err *e)
{
    const exec_backend *be = rt->be;
    exec_worker *wk = exec_rt_worker(rt, w);
    size_t lo, len;
    chunk_of(g, n, me, &lo, &len);
    if (be->sync(e)) return -1;
    g->ptr[me] = buf;
    if (barrier(g, rt)) return util_errf(e, UTIL_EXIT_FAIL, "stopped");
    exec_buf *part = exec_buf_new(&wk->mem, len, 0);
    if (!part) return exec_oom(wk, "a tensor-parallel sum", e);
    add_chunk(g, be, n, me, part->p);
    int rc = be->sync(e);
    g->part[me] = part->p;
    if (!rc && barrier(g, rt)) rc = util_errf(e, UTIL_EXIT_FAIL, "stopped");
    if (!rc) copy_chunks(g, be, n, buf);
    if (!rc) rc = be->sync(e);
    /* the chunks stay until every member has copied them */
    if (!rc && barrier(g, rt)) rc = util_errf(e, UTIL_EXIT_FAIL, "stopped");
    exec_buf_unref(part);
    return rc;
}

/* Sequence parallelism's pair over worker w's tensor-parallel group:
 * sum_dev's two halves, each with the barrier before its reads and the
 * one after (nobody changes what it published before all have read it).
 * A reduce-scatter publishes the whole and adds its chunk; an
 * all-gather publishes its part and copies every chunk. */
static int tp_half(exec_xport *x, exec_runtime *rt, int w, int scatter,
                   const float *in, float *out, size_t n, util_err *e)
{
    inproc *p = x->impl;
    group *g = &p->tp[w / rt->tp];
    int me = w % rt->tp;
    const exec_backend *be = rt->be;
    if (be->sync(e)) return -1;
    if (scatter) g->ptr[me] = (void *)in;
    else g->part[me] = (float *)in;
    if (barrier(g, rt)) return util_errf(e, UTIL_EXIT_FAIL, "stopped");
    if (scatter) add_chunk(g, be, n, me, out);
    else copy_chunks(g, be, n, out);
    int rc = be->sync(e);
    if (!rc && barrier(g, rt)) rc = util_errf(e, UTIL_EXIT_FAIL, "stopped");
    return rc;
}

static int ip_reduce_scatter(exec_xport *x, exec_runtime *rt, int w,
                             const float *whole, float *part, size_t n,
                             util_err *e)
{
    return tp_half(x, rt, w, 1, whole, part, n, e);
}

static int ip_allgather(exec_xport *x, exec_runtime *rt, int w,
                        const float *part, float *whole, size_t n,
                        util_err *e)
{
    return tp_half(x, rt, w, 0, part, whole, n, e);
}

static int ip_allreduce(exec_xport *x, exec_runtime *rt, int w, int which,
                        void *buf, size_t n, int is_double, util_err *e)
{
    inproc *p = x->impl;
    group *g = which == EXEC_GROUP_WORLD ? &p->world : &p->tp[w / rt->tp];
    int me = which == EXEC_GROUP_WORLD ? w : w % rt->tp;
    return is_double ? sum_host(g, rt, me, buf, n, e)
                     : sum_dev(g, rt, w, me, buf, n, e);
}

static void ip_wake(exec_xport *x, exec_runtime *rt)
{
    (void)rt;
    inproc *p = x->impl;
    group *all[1] = {&p->world};
    for (int i = -1; i < p->n_tp; i++) {
        group *g = i < 0 ? all[0] : &p->tp[i];
        pthread_mutex_lock(&g->mu);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
    }
}

static void ip_free(exec_xport *x)
{
    if (!x) return;
    inproc *p = x->impl;
    group_destroy(&p->world);
    for (int i = 0; i < p->n_tp; i++) group_destroy(&p->tp[i]);
    free(p->tp);
    free(p);
    free(x);
}

exec_xport *exec_xport_inproc_new(exec_runtime *rt)
{
    exec_xport *x = util_calloc(1, sizeof *x);
    inproc *p = util_calloc(1, sizeof *p);
    group_init(&p->world, rt->n_workers);
    p->n_tp = rt->n_workers / rt->tp;
    p->tp = util_calloc((size_t)p->n_tp + 1, sizeof *p->tp);
    for (int i = 0; i < p->n_tp; i++) group_init(&p->tp[i], rt->tp);
    x->name = "in-process";
    x->send = ip_send;
    x->send_test = ip_send_test;
    x->allreduce = ip_allreduce;
    x->reduce_scatter = ip_reduce_scatter;
    x->allgather = ip_allgather;
    x->wake = ip_wake;
    x->free = ip_free;
    x->impl = p;
    return x;
}
