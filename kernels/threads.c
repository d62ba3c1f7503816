/* The kernels' thread pool: n-1 workers parked on a condition variable,
 * woken by a generation counter; the caller runs part 0 itself and waits
 * for the rest. One job at a time (the trainer calls ops in sequence). */
#include "kernels/kern_cpu.h"

#include <cblas.h>
#include <pthread.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define KERN_MAX_THREADS 256

static struct {
    pthread_t th[KERN_MAX_THREADS];
    int n;                  /* threads including the caller */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;
    int pending, stop;
    kern_part_fn fn;
    void *ctx;
} pool = {.n = 1, .mu = PTHREAD_MUTEX_INITIALIZER,
          .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static void *worker(void *arg)
{
    int part = (int)(intptr_t)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.gen == seen && !pool.stop)
            pthread_cond_wait(&pool.go, &pool.mu);
        if (pool.stop) break;
        seen = pool.gen;
        kern_part_fn fn = pool.fn;
        void *ctx = pool.ctx;
        int n = pool.n;
        pthread_mutex_unlock(&pool.mu);
        fn(ctx, part, n);
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0) pthread_cond_signal(&pool.done);
    }
    pthread_mutex_unlock(&pool.mu);
    return NULL;
}

static void pool_stop(void)
{
    if (pool.n <= 1) return;
    pthread_mutex_lock(&pool.mu);
    pool.stop = 1;
    pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.mu);
    for (int i = 1; i < pool.n; i++) pthread_join(pool.th[i], NULL);
    pool.stop = 0;
    pool.n = 1;
}

/* OpenBLAS computes on one thread, whether or not the caller ever set the
 * kernels' threads: the kernels split rows over their own pool, and on
 * some cores (AVX-512's) OpenBLAS's threaded SGEMM rounds otherwise than
 * its single-threaded one, so a run that never called kern_set_threads
 * (a test's reference) would not give the bits of one that did. */
__attribute__((constructor)) static void blas_one_thread(void)
{
    openblas_set_num_threads(1);
}

int kern_set_threads(int n)
{
    if (n < 1) n = 1;
    if (n > KERN_MAX_THREADS) n = KERN_MAX_THREADS;
    openblas_set_num_threads(1);
    if (n == pool.n) return n;
    pool_stop();
    pool.gen = 0;
    int started = 1;
    for (int i = 1; i < n; i++) {
        if (pthread_create(&pool.th[i], NULL, worker, (void *)(intptr_t)i))
            break;
        started++;
    }
    pool.n = started;
    return pool.n;
}

int kern_get_threads(void) { return pool.n; }

const char *kern_blas_core(void) { return openblas_get_corename(); }

void kern_parallel(kern_part_fn fn, void *ctx)
{
    if (pool.n <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    pool.fn = fn;
    pool.ctx = ctx;
    pool.pending = pool.n - 1;
    pool.gen++;
    pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.mu);
    fn(ctx, 0, pool.n);
    pthread_mutex_lock(&pool.mu);
    while (pool.pending) pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}
