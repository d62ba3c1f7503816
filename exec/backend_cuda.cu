// The CUDA backend of the pipeline executor (built by make cuda, linked
// into bin/sluice-cuda): a worker runs on GPU (worker id modulo the GPUs
// here), so two stages of a plan may share one GPU as two workers. Each
// worker has a stream per role (compute, communication, a tier plan's
// copies), created when a thread first binds to it in that role; a thread
// bound to it launches on its role's stream (kernels
// through kern_cuda, cuBLAS through the thread's own handle on that
// stream). Copies between GPUs are peer copies (direct where the GPUs allow
// peer access, which is enabled when a device opens; else staged by the
// driver). Every CUDA call is checked: the first failure of a thread is
// kept, naming the call and the GPU, and returned by sync(). Checked on a
// GPU by tests/gpu/run.sh (the README gives its figures).
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/backend.h"
#include "kernels/kernels_cuda.h"

#define MAX_GPUS 64

// A worker's GPU and its streams, one per role.
struct cdev {
    int gpu;
    pthread_mutex_t mu;                 // creates streams
    cudaStream_t stream[EXEC_ROLE_COUNT];
};

// What the calling thread is bound to, and the first failure it met.
struct tstate {
    exec_dev *d;
    cudaStream_t s;
    int gpu;
    float *scratch;         // a peer's floats staged for acc
    size_t scratch_n;
    double *dsum;           // norm_sq's partial sums on the device
    char err[400];
};

static thread_local tstate tl = {NULL, 0, -1, NULL, 0, NULL, {0}};

// Peer access enabled from GPU a to GPU b's memory.
static unsigned char peer_ok[MAX_GPUS][MAX_GPUS];
static unsigned char peer_done[MAX_GPUS];
static pthread_mutex_t peer_mu = PTHREAD_MUTEX_INITIALIZER;

static void note(const char *what, cudaError_t rc)
{
    if (!tl.err[0])
        snprintf(tl.err, sizeof tl.err, "%s failed on GPU %d: %s", what,
                 tl.gpu, cudaGetErrorString(rc));
}

// A checked call: CK(cudaFree, (p)); the failure is kept for sync().
#define CK(fn, args)                                                          \
    do {                                                                      \
        cudaError_t rc_ = fn args;                                            \
        if (rc_ != cudaSuccess) note(#fn, rc_);                               \
    } while (0)

static int current_gpu(void)
{
    int g = 0;
    if (cudaGetDevice(&g) != cudaSuccess) g = 0;
    return g;
}

// Enables peer access from gpu to every GPU it can reach (once per GPU).
// Called with gpu current.
static void peers_enable(int gpu, int count)
{
    if (gpu >= MAX_GPUS) return;
    pthread_mutex_lock(&peer_mu);
    if (!peer_done[gpu]) {
        for (int j = 0; j < count && j < MAX_GPUS; j++) {
            int can = 0;
            if (j == gpu ||
                cudaDeviceCanAccessPeer(&can, gpu, j) != cudaSuccess || !can)
                continue;
            cudaError_t rc = cudaDeviceEnablePeerAccess(j, 0);
            if (rc == cudaSuccess || rc == cudaErrorPeerAccessAlreadyEnabled)
                peer_ok[gpu][j] = 1;
        }
        cudaGetLastError();     // a refused peer is no failure: copies stage
        peer_done[gpu] = 1;
    }
    pthread_mutex_unlock(&peer_mu);
}

static int cuda_open(exec_dev *d, util_err *e)
{
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count < 1)
        return util_errf(e, UTIL_EXIT_USAGE, "--backend cuda: no usable GPU "
                         "(%s)", rc != cudaSuccess ? cudaGetErrorString(rc)
                                                   : "none found");
    cdev *c = (cdev *)util_calloc(1, sizeof *c);
    c->gpu = d->worker % count;
    d->index = c->gpu;
    d->impl = c;
    pthread_mutex_init(&c->mu, NULL);
    int prev = current_gpu();
    const char *what = "cudaSetDevice";
    rc = cudaSetDevice(c->gpu);
    for (int r = 0; r < 2 && rc == cudaSuccess; r++) {
        what = "cudaStreamCreateWithFlags";
        rc = cudaStreamCreateWithFlags(&c->stream[r], cudaStreamNonBlocking);
    }
    if (rc == cudaSuccess) peers_enable(c->gpu, count);
    cudaSetDevice(prev);
    if (rc != cudaSuccess)
        return util_errf(e, UTIL_EXIT_FAIL, "worker %d, GPU %d: %s failed: "
                         "%s", d->worker, c->gpu, what,
                         cudaGetErrorString(rc));
    return 0;
}

static void cuda_close(exec_dev *d)
{
    cdev *c = (cdev *)d->impl;
    if (!c) return;
    int prev = current_gpu();
    if (cudaSetDevice(c->gpu) == cudaSuccess)
        for (int r = 0; r < EXEC_ROLE_COUNT; r++)
            if (c->stream[r]) cudaStreamDestroy(c->stream[r]);
    cudaSetDevice(prev);
    pthread_mutex_destroy(&c->mu);
    free(c);
    d->impl = NULL;
}

static int cuda_bind(exec_dev *d, int role, util_err *e)
{
    cdev *c = (cdev *)d->impl;
    cudaError_t rc = cudaSetDevice(c->gpu);
    if (rc != cudaSuccess)
        return util_errf(e, UTIL_EXIT_FAIL, "GPU %d: cudaSetDevice failed: "
                         "%s", c->gpu, cudaGetErrorString(rc));
    // setting up and collecting use the compute stream
    int r = role == EXEC_ROLE_SETUP ? EXEC_ROLE_COMPUTE : role;
    if (r < 0 || r >= EXEC_ROLE_COUNT)
        return util_errf(e, UTIL_EXIT_FAIL, "GPU %d: no stream for role %d",
                         c->gpu, role);
    pthread_mutex_lock(&c->mu);
    if (!c->stream[r])
        rc = cudaStreamCreateWithFlags(&c->stream[r], cudaStreamNonBlocking);
    pthread_mutex_unlock(&c->mu);
    if (rc != cudaSuccess)
        return util_errf(e, UTIL_EXIT_FAIL, "GPU %d: cudaStreamCreate"
                         "WithFlags failed: %s", c->gpu,
                         cudaGetErrorString(rc));
    tl.d = d;
    tl.s = c->stream[r];
    tl.gpu = c->gpu;
    tl.err[0] = 0;
    kern_cuda_set_stream(tl.s);
    return 0;
}

static void cuda_unbind(void)
{
    if (!tl.d) return;
    cudaStreamSynchronize(tl.s);
    kern_cuda_shutdown();       // this thread's cuBLAS handle
    if (tl.scratch) cudaFree(tl.scratch);
    if (tl.dsum) cudaFree(tl.dsum);
    kern_cuda_set_stream(NULL);
    tl.d = NULL;
    tl.s = 0;
    tl.gpu = -1;
    tl.scratch = NULL;
    tl.scratch_n = 0;
    tl.dsum = NULL;
}

static void *cuda_alloc(exec_dev *d, size_t bytes, char *why, size_t n)
{
    cdev *c = (cdev *)d->impl;
    int prev = current_gpu();
    void *p = NULL;
    cudaError_t rc = cudaSetDevice(c->gpu);
    if (rc == cudaSuccess) rc = cudaMalloc(&p, bytes);
    cudaSetDevice(prev);
    if (rc != cudaSuccess) {
        cudaGetLastError();     // answered here, not a later launch's error
        snprintf(why, n, "cudaMalloc of %zu bytes on GPU %d: %s", bytes,
                 c->gpu, cudaGetErrorString(rc));
        return NULL;
    }
    return p;
}

static void cuda_release(exec_dev *d, void *p)
{
    cdev *c = (cdev *)d->impl;
    int prev = current_gpu();
    CK(cudaSetDevice, (c->gpu));
    CK(cudaFree, (p));
    cudaSetDevice(prev);
}

static void cuda_zero(float *p, size_t n)
{
    CK(cudaMemsetAsync, (p, 0, n * sizeof *p, tl.s));
}

// Unified addressing: the driver sees which devices the pointers are on.
static void cuda_copy(void *dst, const void *src, size_t bytes)
{
    CK(cudaMemcpyAsync, (dst, src, bytes, cudaMemcpyDefault, tl.s));
}

static void cuda_copy2d(float *dst, size_t dst_ld, const float *src,
                        size_t src_ld, size_t rows, size_t cols)
{
    CK(cudaMemcpy2DAsync, (dst, dst_ld * sizeof *dst, src,
                           src_ld * sizeof *src, cols * sizeof *src, rows,
                           cudaMemcpyDefault, tl.s));
}

static void cuda_to_host(void *dst, const void *src, size_t bytes)
{
    CK(cudaMemcpyAsync, (dst, src, bytes, cudaMemcpyDeviceToHost, tl.s));
    CK(cudaStreamSynchronize, (tl.s));
}

static void cuda_from_host(void *dst, const void *src, size_t bytes)
{
    CK(cudaMemcpyAsync, (dst, src, bytes, cudaMemcpyHostToDevice, tl.s));
    CK(cudaStreamSynchronize, (tl.s));
}

// Pinning is best effort: a refusal (no page-locked memory left, memory
// already registered) leaves the copies to the driver's staging.
static void cuda_host_pin(void *p, size_t bytes)
{
    if (p && bytes &&
        cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess)
        cudaGetLastError();
}

static void cuda_host_unpin(void *p)
{
    if (p && cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

// The GPU a device pointer is on; -1 when the runtime cannot tell.
static int gpu_of(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return a.type == cudaMemoryTypeDevice ? a.device : -1;
}

// A kernel reads src where this GPU may (its own memory, a peer with
// access); other GPUs' floats are copied here first.
static void cuda_acc(float *acc, const float *src, size_t n)
{
    int g = gpu_of(src);
    if (g >= 0 && g != tl.gpu &&
        !(g < MAX_GPUS && tl.gpu < MAX_GPUS && peer_ok[tl.gpu][g])) {
        if (tl.scratch_n < n) {
            if (tl.scratch) CK(cudaFree, (tl.scratch));
            tl.scratch = NULL;
            tl.scratch_n = 0;
            CK(cudaMalloc, ((void **)&tl.scratch, n * sizeof(float)));
            if (!tl.scratch) return;
            tl.scratch_n = n;
        }
        CK(cudaMemcpyAsync, (tl.scratch, src, n * sizeof(float),
                             cudaMemcpyDefault, tl.s));
        src = tl.scratch;
    }
    kern_cuda_accumulate(acc, src, n);
}

// The gradient's squares summed by the kernels' partial sums
// (kern_cuda_norm_sq_parts), added on the host in order, in double:
// deterministic (not the CPU's order, so not its bits).
static void cuda_norm_sq(double *sum, const float *x, size_t n)
{
    if (!n) return;
    if (!tl.dsum) {
        CK(cudaMalloc,
           ((void **)&tl.dsum, KERN_CUDA_NORM_PARTS * sizeof(double)));
        if (!tl.dsum) return;
    }
    kern_cuda_norm_sq_parts(tl.dsum, x, n);
    double h[KERN_CUDA_NORM_PARTS];
    memset(h, 0, sizeof h);
    CK(cudaMemcpyAsync, (h, tl.dsum, sizeof h, cudaMemcpyDeviceToHost,
                         tl.s));
    CK(cudaStreamSynchronize, (tl.s));
    double t = 0;
    for (int b = 0; b < KERN_CUDA_NORM_PARTS; b++) t += h[b];
    *sum += t;
}

static int cuda_sync(util_err *e)
{
    CK(cudaStreamSynchronize, (tl.s));
    char k[256];
    if (kern_cuda_error(k, sizeof k) && !tl.err[0])
        snprintf(tl.err, sizeof tl.err, "GPU %d: %s", tl.gpu, k);
    if (!tl.err[0]) return 0;
    util_errf(e, UTIL_EXIT_FAIL, "%s", tl.err);
    tl.err[0] = 0;
    return -1;
}

// An event on d's compute stream, made on d's GPU.
static void *cuda_fence(exec_dev *d)
{
    cdev *c = (cdev *)d->impl;
    int prev = current_gpu();
    cudaEvent_t ev = NULL;
    CK(cudaSetDevice, (c->gpu));
    CK(cudaEventCreateWithFlags, (&ev, cudaEventDisableTiming));
    if (ev) CK(cudaEventRecord, (ev, c->stream[EXEC_ROLE_COMPUTE]));
    cudaSetDevice(prev);
    return ev;
}

// A bound thread's stream waits for the fence; an unbound thread (the
// one that frees a run) waits itself. The event may go at once: CUDA
// releases it when the work it marks is done.
static void cuda_fence_wait(void *f)
{
    cudaEvent_t ev = (cudaEvent_t)f;
    if (tl.d) CK(cudaStreamWaitEvent, (tl.s, ev, 0));
    else CK(cudaEventSynchronize, (ev));
    CK(cudaEventDestroy, (ev));
}

static void *cuda_stream(void)
{
    return (void *)tl.s;
}

// A timing event recorded on the thread's stream.
static void *cuda_mark(void)
{
    cudaEvent_t ev = NULL;
    if (cudaEventCreate(&ev) != cudaSuccess) return NULL;
    if (cudaEventRecord(ev, tl.s) != cudaSuccess) {
        cudaEventDestroy(ev);
        return NULL;
    }
    return ev;
}

static double cuda_mark_ns(void *a, void *b)
{
    float ms = 0;
    if (cudaEventSynchronize((cudaEvent_t)b) != cudaSuccess ||
        cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b) !=
            cudaSuccess)
        return -1;
    return (double)ms * 1e6;
}

static void cuda_unmark(void *m)
{
    if (m) cudaEventDestroy((cudaEvent_t)m);
}

static exec_backend cuda_be;
static pthread_once_t cuda_be_once = PTHREAD_ONCE_INIT;

static void cuda_be_fill(void)
{
    cuda_be.name = "cuda";
    cuda_be.k = &kern_cuda;
    cuda_be.host_memory = 0;
    cuda_be.open = cuda_open;
    cuda_be.close = cuda_close;
    cuda_be.bind = cuda_bind;
    cuda_be.unbind = cuda_unbind;
    cuda_be.alloc = cuda_alloc;
    cuda_be.release = cuda_release;
    cuda_be.zero = cuda_zero;
    cuda_be.copy = cuda_copy;
    cuda_be.copy2d = cuda_copy2d;
    cuda_be.to_host = cuda_to_host;
    cuda_be.from_host = cuda_from_host;
    cuda_be.host_pin = cuda_host_pin;
    cuda_be.host_unpin = cuda_host_unpin;
    cuda_be.acc = cuda_acc;
    cuda_be.norm_sq = cuda_norm_sq;
    cuda_be.sync = cuda_sync;
    cuda_be.fence = cuda_fence;
    cuda_be.fence_wait = cuda_fence_wait;
    cuda_be.stream = cuda_stream;
    cuda_be.set_tf32 = kern_cuda_set_tf32;
    cuda_be.mark = cuda_mark;
    cuda_be.mark_ns = cuda_mark_ns;
    cuda_be.unmark = cuda_unmark;
}

const exec_backend *exec_backend_cuda(util_err *e)
{
    char why[256];
    if (!kern_cuda_available(why, sizeof why)) {
        util_errf(e, UTIL_EXIT_USAGE, "--backend cuda: no GPU can be used "
                  "here: %s", why);
        return NULL;
    }
    pthread_once(&cuda_be_once, cuda_be_fill);
    return &cuda_be;
}
