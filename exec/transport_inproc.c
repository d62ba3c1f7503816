/* The in-process transport: every worker is a pair of threads of this
 * process, each device's memory its own budget. A send copies its pieces
 * into a buffer charged to the receiving device and completes the receive
 * at once, as a peer-to-peer copy lands in the other GPU's memory; a
 * collective reads every member's buffer in member order, so each gets
 * the same sum and the MPI transport (which sums the same way) the same
 * bits. Barriers wake up when the run is stopped. */
#include <stdlib.h>
#include <string.h>

#include "exec/runtime.h"

typedef struct group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, arrived;
    unsigned gen;
    void **ptr;
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
}

static void group_destroy(group *g)
{
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->ptr);
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
    size_t total = 0;
    for (int i = 0; i < np; i++) total += pc[i].n;
    int64_t t0 = (int64_t)exec_now_ns();
    exec_buf *b = exec_buf_new(&dw->mem, total, 0);
    if (!b) {
        char a[32], c[32], d[32];
        return util_errf(e, UTIL_EXIT_FAIL, "device %d is out of memory for "
                         "the message (%s more, %s of %s in use)", dw->device,
                         util_fmt_bytes(dw->mem.need, a, sizeof a),
                         util_fmt_bytes(dw->mem.cur, c, sizeof c),
                         util_fmt_bytes(dw->mem.budget, d, sizeof d));
    }
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        memcpy(b->p + off, pc[i].p, pc[i].n * sizeof(float));
        off += pc[i].n;
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

static int ip_allreduce(exec_xport *x, exec_runtime *rt, int w, int which,
                        void *buf, size_t n, int is_double, util_err *e)
{
    inproc *p = x->impl;
    group *g = which == EXEC_GROUP_WORLD ? &p->world : &p->tp[w / rt->tp];
    int me = which == EXEC_GROUP_WORLD ? w : w % rt->tp;
    g->ptr[me] = buf;
    if (barrier(g, rt)) return util_errf(e, UTIL_EXIT_FAIL, "stopped");
    size_t es = is_double ? sizeof(double) : sizeof(float);
    void *acc = util_malloc(n * es + es);
    memcpy(acc, g->ptr[0], n * es);
    for (int q = 1; q < g->size; q++) exec_sum_into(acc, g->ptr[q], n, is_double);
    /* nobody may change its buffer before all have read it */
    int rc = barrier(g, rt);
    if (!rc) memcpy(buf, acc, n * es);
    free(acc);
    return rc ? util_errf(e, UTIL_EXIT_FAIL, "stopped") : 0;
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
    x->wake = ip_wake;
    x->free = ip_free;
    x->impl = p;
    return x;
}
