/* The CUDA backend of KERN_OPS (kernels/kernels.h): kern_cuda_<op> with the
 * same arguments as the CPU op, every pointer a device pointer, launched on
 * the default stream (callers synchronise). Matrix products go through
 * cuBLAS in fp32 (no TF32), element-wise math through kern_math.h, the
 * same definitions the CPU oracle uses. Only nvcc-compiled code includes
 * this header; a CPU build never needs CUDA. */
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

/* 1 when a CUDA device is usable; else 0 and why says why. */
int kern_cuda_available(char *why, size_t n);
/* Releases the cuBLAS handle (created on first use). */
void kern_cuda_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif
