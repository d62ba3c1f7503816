/* The CUDA backend of KERN_OPS (kernels/kernels.h): kern_cuda_<op> with the
 * same arguments as the CPU op, every pointer a device pointer, launched on
 * the calling thread's stream (kern_cuda_set_stream; callers synchronise).
 * Matrix products go through cuBLAS in fp32 (no TF32) with one handle per
 * thread, bound to that thread's stream; element-wise math through
 * kern_math.h, the same definitions the CPU oracle uses. A failed launch
 * or cuBLAS call is kept, the first per thread, for kern_cuda_error. Only
 * nvcc-compiled code includes this header; a CPU build never needs CUDA. */
#ifndef SLUICE_KERNELS_CUDA_H
#define SLUICE_KERNELS_CUDA_H

#include <stddef.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KERN_X_CUDA_DECL(name, kind, args) void kern_cuda_##name args;
KERN_OPS(KERN_X_CUDA_DECL)
#undef KERN_X_CUDA_DECL

extern const kern_table kern_cuda;

/* 1 when a CUDA device is usable; else 0 and why says why. */
int kern_cuda_available(char *why, size_t n);
/* The stream (a cudaStream_t) this thread's ops launch on from now; NULL
 * is the thread's default stream. */
void kern_cuda_set_stream(void *stream);
/* cuBLAS's math for the products from now, in every thread: 1 TF32 on
 * tensor cores (Ampere and later; inputs rounded to 10-bit mantissas,
 * fp32 accumulate), 0 plain fp32 (the default: the CPU oracle's). Set it
 * before the threads that compute start. */
void kern_cuda_set_tf32(int on);
/* The first failure this thread's ops met since the last call (a launch
 * or cuBLAS error, naming the op), cleared; 0 when none. */
int kern_cuda_error(char *msg, size_t n);
/* The squares of x's n floats summed, in double, into
 * KERN_CUDA_NORM_PARTS partial sums at parts (device memory), block b over
 * a fixed grid stride from b: added in index order they are norm_sq's
 * total, the same on any GPU. */
#define KERN_CUDA_NORM_PARTS 256
void kern_cuda_norm_sq_parts(double *parts, const float *x, size_t n);
/* Releases this thread's cuBLAS handle (created on first use). */
void kern_cuda_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif
