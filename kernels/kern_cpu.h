/* Internals of the CPU kernels (private to kernels/). The thread pool:
 * kern_set_threads(n) keeps n-1 workers; kern_parallel(fn, ctx) runs
 * fn(ctx, part, nparts) for
 * every part in 0..nparts-1 at once, part 0 on the calling thread, and
 * returns when all are done. Each op splits its own rows by part, so the
 * split (and so every result) depends only on the thread count. OpenBLAS
 * itself stays single-threaded: its spinning workers would otherwise take
 * the cores the element-wise loops need between two GEMMs (measured: with
 * OpenBLAS's own two threads a gpt-tiny step was no faster than with one;
 * with this pool it is 1.5x faster). */
#ifndef SLUICE_KERN_CPU_H
#define SLUICE_KERN_CPU_H

#include <stddef.h>

typedef void (*kern_part_fn)(void *ctx, int part, int nparts);

void kern_parallel(kern_part_fn fn, void *ctx);

/* Rows [lo, hi) of n for this part. */
#define KERN_SPLIT(n, part, nparts, lo, hi)                                  \
    size_t lo = (size_t)(n) * (size_t)(part) / (size_t)(nparts);             \
    size_t hi = (size_t)(n) * ((size_t)(part) + 1) / (size_t)(nparts)

/* Arguments of one op call, handed to its parts (names as in the op). */
typedef struct kargs {
    float *out, *out2, *out3;
    const float *in, *in2, *in3, *in4, *in5;
    const int *tok;
    int B, T, C, NH, N, OC, V;
    size_t n;
    float scale;
} kargs;

/* Row helpers compiled with vectorising flags (ops_cpu_eltwise.c).
 * Softmax of row[0..n) in place, row[n..T) set to 0 (causal mask). */
void kern_cpu_softmax_row(float *row, int n, int T);
/* dr = p (dr - sum(p dr)) over [0, n), zero over [n, T). */
void kern_cpu_softmax_row_backward(float *dr, const float *p, int n, int T);

#endif
