/* exec/backend.h: the device backend of the pipeline executor (private to
 * exec/). A backend is a kernel table (kernels/kernels.h) and the few
 * device operations the runtime, the stages and the transports need, so
 * every touch of tensor memory goes through one and the same runtime runs
 * on CPU cores (threads, OpenBLAS; backend_cpu.c) and on CUDA GPUs
 * (streams, cuBLAS; backend_cuda.cu, built by `make cuda`).
 *
 * Ordering: device operations run in order on the calling thread's stream
 * (bind gives each worker thread its own); sync() waits for them. Copies
 * with host memory are complete when they return. On the CPU everything is
 * done when it returns. Errors: a CUDA call that fails is kept, the first
 * per thread, and returned by the next sync(), which every compute task
 * ends with and every transfer calls before it completes, so the failure
 * names the device and task; alloc alone answers at once (NULL).
 * Plain C, also read by nvcc. */
#ifndef SLUICE_EXEC_BACKEND_H
#define SLUICE_EXEC_BACKEND_H

#include <stddef.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "util/util.h"

struct exec_backend;

/* One worker's device as the backend holds it. */
typedef struct exec_dev {
    const struct exec_backend *be;
    int worker;     /* the plan's global GPU index (device x tp + rank) */
    int index;      /* what it runs on: a core (CPU), a GPU (the worker
                     * modulo this machine's GPUs) */
    int pin;        /* CPU: pin the compute thread to core `index` */
    void *impl;     /* the backend's (CUDA: GPU, streams) */
} exec_dev;

/* What a thread of a worker does: compute and communication have streams
 * of their own; the thread that sets a run up or collects its results
 * uses the compute stream (and is not pinned to a core). A tier plan's
 * thread for the IR's stream q binds as EXEC_ROLE_TIER + q, a stream of
 * its own, so copies to and from the device overlap each other and the
 * compute (q < EXEC_ROLE_COUNT - EXEC_ROLE_TIER). */
enum {
    EXEC_ROLE_COMPUTE, EXEC_ROLE_COMM, EXEC_ROLE_SETUP, EXEC_ROLE_TIER,
    EXEC_ROLE_COUNT = EXEC_ROLE_TIER + 12
};

typedef struct exec_backend {
    const char *name;           /* "cpu", "cuda" */
    const kern_table *k;        /* its kernels */
    int host_memory;            /* device memory is host memory: transports
                                 * may read and write it directly */
    /* Opens d for d->worker (sets d->index, d->impl); close(NULL impl) is
     * fine. */
    int (*open)(exec_dev *d, util_err *e);
    void (*close)(exec_dev *d);
    /* Binds the calling thread to d in a role (its device and stream);
     * unbind releases what the thread holds (CUDA: its cuBLAS handle). */
    int (*bind)(exec_dev *d, int role, util_err *e);
    void (*unbind)(void);
    /* Device memory of d from any thread; NULL with why filled when the
     * device has none left. */
    void *(*alloc)(exec_dev *d, size_t bytes, char *why, size_t n);
    void (*release)(exec_dev *d, void *p);
    void (*zero)(float *p, size_t n);
    /* dst and src on any devices of the backend */
    void (*copy)(void *dst, const void *src, size_t bytes);
    /* rows x cols floats of the thread's device, rows src_ld and dst_ld
     * floats apart: a block of columns out of a matrix or back into it
     * (LoRA's q, k and v thirds of the fused projection) */
    void (*copy2d)(float *dst, size_t dst_ld, const float *src,
                   size_t src_ld, size_t rows, size_t cols);
    void (*to_host)(void *dst, const void *src, size_t bytes);
    void (*from_host)(void *dst, const void *src, size_t bytes);
    /* Page-locks host memory that copies to and from the device use for
     * long (CUDA: cudaHostRegister, so they run at the link's rate rather
     * than through the driver's staging buffers); unpin before it is
     * freed. Best effort: memory that cannot be pinned is copied as it is.
     * NULL on the CPU. */
    void (*host_pin)(void *p, size_t bytes);
    void (*host_unpin)(void *p);
    /* acc += src over n floats; acc on the thread's device, src on any */
    void (*acc)(float *acc, const float *src, size_t n);
    /* *sum += x[i]^2 for i in order, in double (CPU: the reference's
     * gradient-norm loop, continued across tensors bit for bit) */
    void (*norm_sq)(double *sum, const float *x, size_t n);
    /* Waits for the thread's stream; the first failure since, code 1. */
    int (*sync)(util_err *e);
    /* Stream-ordered reuse of freed blocks (NULL on the CPU): fence()
     * marks the work queued so far on d's compute stream, where any
     * kernel still reading a block freed now runs; fence_wait() makes the
     * calling thread's stream wait for it, then releases it. */
    void *(*fence)(exec_dev *d);
    void (*fence_wait)(void *f);
    /* The calling thread's stream (CUDA: a cudaStream_t; NULL on the
     * CPU), for transports that order their own streams after it. */
    void *(*stream)(void);
    /* The products' math from now, every thread (CUDA: 1 TF32 on tensor
     * cores, 0 fp32); NULL on the CPU, which has no TF32. Set before the
     * workers start. */
    void (*set_tf32)(int on);
    /* The device's own clock, for timing ops without draining the device
     * around each (NULL on the CPU, whose host clock is the device's):
     * mark() records a point on the thread's stream (NULL when none could
     * be made), mark_ns(a, b) the device's ns from a to b once b has
     * passed (waiting for it; -1 on a failure), unmark() releases one. */
    void *(*mark)(void);
    double (*mark_ns)(void *a, void *b);
    void (*unmark)(void *m);
} exec_backend;

extern const exec_backend exec_backend_cpu;

/* The backend named "cpu" or "cuda". Errors, code 2: another name; CUDA
 * not compiled in (build bin/sluice-cuda with make cuda); no usable GPU. */
const exec_backend *exec_backend_get(const char *name, util_err *e);
/* The CUDA backend (backend_cuda.cu, in bin/sluice-cuda only): NULL with
 * a message, code 2, when no GPU is usable. */
const exec_backend *exec_backend_cuda(util_err *e);

#ifdef __cplusplus
}
#endif

#endif
