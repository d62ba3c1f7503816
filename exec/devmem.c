/* A device's memory for the executor: a budget every tensor is charged
 * to (so a plan that does not fit fails as it would on the device, naming
 * the task), the peak, and the curve over time for traces. Blocks come
 * from the device's backend and are kept for reuse; on a GPU a freed
 * block carries a fence on its device's compute stream (the only stream
 * that may still read it: copies and transfers wait for their work before
 * they drop a reference), which whoever reuses it waits for in stream
 * order. Buffers are reference counted: a record, a send in flight and a
 * consumer stage may each hold one. Also the sum the transports'
 * collectives add host values with. */
#include <stdlib.h>
#include <string.h>

#include "exec/runtime.h"

void exec_mem_init(exec_mem *m, double budget, exec_dev *dev)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->budget = budget;
    m->dev = dev;
}

/* Gives every cached block back to the device. */
static void cache_release(exec_mem *m)
{
    pthread_mutex_lock(&m->mu);
    exec_free *f = m->cache;
    m->cache = NULL;
    pthread_mutex_unlock(&m->mu);
    const exec_backend *be = m->dev->be;
    while (f) {
        exec_free *nx = f->next;
        if (f->fence) be->fence_wait(f->fence);
        be->release(m->dev, f->p);
        free(f);
        f = nx;
    }
}

void exec_mem_destroy(exec_mem *m)
{
    if (m->dev) cache_release(m);
    pthread_mutex_destroy(&m->mu);
    free(m->pt_t);
    free(m->pt_b);
    m->pt_t = NULL;
    m->pt_b = NULL;
}

float *exec_mem_get(exec_mem *m, size_t n)
{
    const exec_backend *be = m->dev->be;
    exec_free *hit = NULL;
    pthread_mutex_lock(&m->mu);
    for (exec_free **f = &m->cache; *f; f = &(*f)->next)
        if ((*f)->n == n) {
            hit = *f;
            *f = hit->next;
            break;
        }
    pthread_mutex_unlock(&m->mu);
    if (hit) {
        float *p = hit->p;
        if (hit->fence) be->fence_wait(hit->fence);
        free(hit);
        return p;
    }
    /* one extra float: a zero-size tensor still has an address */
    size_t bytes = (n + 1) * sizeof(float);
    char why[sizeof m->why];
    float *p = be->alloc(m->dev, bytes, why, sizeof why);
    if (!p) {
        /* the cache holds blocks of other sizes: give them back, retry */
        cache_release(m);
        p = be->alloc(m->dev, bytes, why, sizeof why);
    }
    if (!p) {
        pthread_mutex_lock(&m->mu);
        snprintf(m->why, sizeof m->why, "%s", why);
        pthread_mutex_unlock(&m->mu);
    }
    return p;
}

void exec_mem_put(exec_mem *m, float *p, size_t n)
{
    const exec_backend *be = m->dev->be;
    exec_free *f = util_malloc(sizeof *f);
    f->n = n;
    f->p = p;
    f->fence = be->fence ? be->fence(m->dev) : NULL;
    pthread_mutex_lock(&m->mu);
    f->next = m->cache;
    m->cache = f;
    pthread_mutex_unlock(&m->mu);
}

int exec_mem_oom(exec_mem *m, const char *what, util_err *e)
{
    char a[32], b[32], c[32], why[sizeof m->why];
    pthread_mutex_lock(&m->mu);
    snprintf(why, sizeof why, "%s", m->why);
    m->why[0] = 0;
    pthread_mutex_unlock(&m->mu);
    if (why[0])
        return util_errf(e, UTIL_EXIT_FAIL, "out of device memory for %s, "
                         "%s of %s in use: %s", what,
                         util_fmt_bytes(m->cur, b, sizeof b),
                         util_fmt_bytes(m->budget, c, sizeof c), why);
    return util_errf(e, UTIL_EXIT_FAIL, "out of memory: %s more for %s, %s "
                     "of %s in use (--mem-budget)",
                     util_fmt_bytes(m->need, a, sizeof a), what,
                     util_fmt_bytes(m->cur, b, sizeof b),
                     util_fmt_bytes(m->budget, c, sizeof c));
}

static void point(exec_mem *m)
{
    if (!m->record) return;
    if (m->n_pt == m->cap_pt) {
        m->cap_pt = m->cap_pt ? 2 * m->cap_pt : 1024;
        m->pt_t = util_realloc(m->pt_t, sizeof *m->pt_t * (size_t)m->cap_pt);
        m->pt_b = util_realloc(m->pt_b, sizeof *m->pt_b * (size_t)m->cap_pt);
    }
    m->pt_t[m->n_pt] = (int64_t)exec_now_ns() - m->t0;
    m->pt_b[m->n_pt++] = m->cur;
}

int exec_mem_charge(exec_mem *m, double bytes)
{
    pthread_mutex_lock(&m->mu);
    if (bytes > 0 && m->budget > 0 && m->cur + bytes > m->budget) {
        m->need = bytes;
        pthread_mutex_unlock(&m->mu);
        return -1;
    }
    m->cur += bytes;
    if (m->cur > m->peak) m->peak = m->cur;
    if (m->cur > m->step_peak) m->step_peak = m->cur;
    point(m);
    pthread_mutex_unlock(&m->mu);
    return 0;
}

double exec_mem_step_peak(exec_mem *m)
{
    pthread_mutex_lock(&m->mu);
    double p = m->step_peak;
    m->step_peak = m->cur;
    pthread_mutex_unlock(&m->mu);
    return p;
}

void exec_mem_record(exec_mem *m, int64_t t0)
{
    pthread_mutex_lock(&m->mu);
    m->record = 1;
    m->t0 = t0;
    m->n_pt = 0;
    point(m);
    pthread_mutex_unlock(&m->mu);
}

exec_buf *exec_buf_new(exec_mem *m, size_t n, int zero)
{
    if (exec_mem_charge(m, (double)n * sizeof(float))) return NULL;
    float *p = exec_mem_get(m, n);
    if (!p) {
        exec_mem_charge(m, -(double)n * sizeof(float));
        return NULL;
    }
    if (zero) m->dev->be->zero(p, n);
    exec_buf *b = util_malloc(sizeof *b);
    b->p = p;
    b->n = n;
    atomic_init(&b->refs, 1);
    b->mem = m;
    return b;
}

exec_buf *exec_buf_ref(exec_buf *b)
{
    if (b) atomic_fetch_add(&b->refs, 1);
    return b;
}

void exec_buf_unref(exec_buf *b)
{
    if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
    exec_mem_charge(b->mem, -(double)b->n * sizeof(float));
    exec_mem_put(b->mem, b->p, b->n);
    free(b);
}

exec_view exec_view_dup(const exec_view *v)
{
    exec_view d = *v;
    exec_buf_ref(d.b);
    return d;
}

void exec_view_drop(exec_view *v)
{
    exec_buf_unref(v->b);
    memset(v, 0, sizeof *v);
}

void exec_sum_into(void *acc, const void *src, size_t n, int is_double)
{
    if (is_double) {
        double *a = acc;
        const double *b = src;
        for (size_t i = 0; i < n; i++) a[i] += b[i];
    } else {
        float *a = acc;
        const float *b = src;
        for (size_t i = 0; i < n; i++) a[i] += b[i];
    }
}
