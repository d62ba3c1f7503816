/* A device's memory for the executor: a budget every tensor is charged
 * to (so a plan that does not fit fails as it would on the device, naming
 * the task), the peak, and the curve over time for traces. Buffers are
 * reference counted: a record, a send in flight and a consumer stage may
 * each hold one. Also the sum both transports' collectives add with. */
#include <stdlib.h>
#include <string.h>

#include "exec/runtime.h"

void exec_mem_init(exec_mem *m, double budget)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->budget = budget;
}

void exec_mem_destroy(exec_mem *m)
{
    for (exec_free *f = m->cache; f;) {
        exec_free *nx = f->next;
        free(f->p);
        free(f);
        f = nx;
    }
    m->cache = NULL;
    pthread_mutex_destroy(&m->mu);
    free(m->pt_t);
    free(m->pt_b);
    m->pt_t = NULL;
    m->pt_b = NULL;
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
    point(m);
    pthread_mutex_unlock(&m->mu);
    return 0;
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
    double bytes = (double)n * sizeof(float);
    if (exec_mem_charge(m, bytes)) return NULL;
    exec_buf *b = util_malloc(sizeof *b);
    float *p = NULL;
    pthread_mutex_lock(&m->mu);
    for (exec_free **f = &m->cache; *f; f = &(*f)->next)
        if ((*f)->n == n) {
            exec_free *hit = *f;
            *f = hit->next;
            p = hit->p;
            free(hit);
            break;
        }
    pthread_mutex_unlock(&m->mu);
    if (p && zero) memset(p, 0, n * sizeof(float));
    if (!p)
        p = zero ? util_calloc(n + 1, sizeof(float))
                 : util_malloc((n + 1) * sizeof(float));
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
    exec_mem *m = b->mem;
    exec_mem_charge(m, -(double)b->n * sizeof(float));
    exec_free *f = util_malloc(sizeof *f);
    f->n = b->n;
    f->p = b->p;
    pthread_mutex_lock(&m->mu);
    f->next = m->cache;
    m->cache = f;
    pthread_mutex_unlock(&m->mu);
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
