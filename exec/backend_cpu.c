/* The CPU backend: a device is a core, its memory host memory, its
 * kernels kern_cpu (OpenBLAS and sluice's loops). Everything is done when
 * it returns, so there is nothing to order or wait for. The gradient
 * norm continues one double sum in index order, the reference trainer's
 * loop, so runs keep their bits. Also the choice of a backend by name:
 * CUDA is reached through a weak reference, present only in bin/sluice-
 * cuda (make cuda), so no caller carries an #ifdef. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/backend.h"

const exec_backend *exec_backend_cuda(util_err *e) __attribute__((weak));

static int cpu_open(exec_dev *d, util_err *e)
{
    (void)e;
    d->index = d->worker;
    return 0;
}

static void cpu_close(exec_dev *d)
{
    (void)d;
}

/* A device is a core: its compute thread stays on one (when several
 * workers share this process). */
static int cpu_bind(exec_dev *d, int role, util_err *e)
{
    (void)e;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (role != EXEC_ROLE_COMPUTE || !d->pin || n < 1) return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(d->index % n, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    return 0;
}

static void cpu_unbind(void) {}

static void *cpu_alloc(exec_dev *d, size_t bytes, char *why, size_t n)
{
    (void)d;
    void *p = malloc(bytes ? bytes : 1);
    if (!p) snprintf(why, n, "malloc of %zu bytes failed", bytes);
    return p;
}

static void cpu_release(exec_dev *d, void *p)
{
    (void)d;
    free(p);
}

static void cpu_zero(float *p, size_t n)
{
    memset(p, 0, n * sizeof *p);
}

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
}

static void cpu_copy2d(float *dst, size_t dst_ld, const float *src,
                       size_t src_ld, size_t rows, size_t cols)
{
    for (size_t i = 0; i < rows; i++)
        memcpy(dst + i * dst_ld, src + i * src_ld, cols * sizeof *dst);
}

static void cpu_acc(float *acc, const float *src, size_t n)
{
    kern_accumulate(acc, src, n);
}

static void cpu_norm_sq(double *sum, const float *x, size_t n)
{
    double s = *sum;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    *sum = s;
}

static int cpu_sync(util_err *e)
{
    (void)e;
    return 0;
}

static void *cpu_stream(void)
{
    return NULL;
}

const exec_backend exec_backend_cpu = {
    .name = "cpu",
    .k = &kern_cpu,
    .host_memory = 1,
    .open = cpu_open,
    .close = cpu_close,
    .bind = cpu_bind,
    .unbind = cpu_unbind,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .copy2d = cpu_copy2d,
    .to_host = cpu_copy,
    .from_host = cpu_copy,
    .acc = cpu_acc,
    .norm_sq = cpu_norm_sq,
    .sync = cpu_sync,
    .stream = cpu_stream,
};

const exec_backend *exec_backend_get(const char *name, util_err *e)
{
    if (!strcmp(name, "cpu")) return &exec_backend_cpu;
    if (strcmp(name, "cuda")) {
        util_errf(e, UTIL_EXIT_USAGE, "--backend '%s': expected cpu or cuda",
                  name);
        return NULL;
    }
    if (!exec_backend_cuda) {
        util_errf(e, UTIL_EXIT_USAGE, "--backend cuda: this sluice was built "
                  "without CUDA; build bin/sluice-cuda with `make cuda`");
        return NULL;
    }
    return exec_backend_cuda(e);
}
