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
    int causal;             /* attention: query t sees keys 0..t only */
    int gelu;               /* gated MLP: the gate's activation GELU's
                             * tanh form (GeGLU), else SiLU (SwiGLU) */
    float eps;              /* layer norm */
    size_t n;
    float scale;
} kargs;

/* Arguments of the element-wise ops and AdamW. */
typedef struct eargs {
    float *p, *m, *v;
    const float *in, *in2;
    size_t n;
    float lr, beta1, beta2, bc1, bc2, eps, wd, grad_scale;
} eargs;

/* The row kernels of one instruction set (ops_cpu_rows.h). The parts take
 * kargs (norm, loss) or eargs (gelu, adamw). softmax_row: softmax of
 * row[0..n) in place, row[n..T) set to 0 (causal mask);
 * softmax_row_backward: dr = p (dr - sum(p dr)) over [0, n), 0 after. */
typedef struct kern_rows {
    kern_part_fn gelu_fwd, gelu_bwd, gelu_erf_fwd, gelu_erf_bwd, adamw,
        ln_fwd, ln_bwd_in, ln_bwd_w,
        xent_fwd, xent_bwd;
    void (*softmax_row)(float *row, int n, int T);
    void (*softmax_row_backward)(float *dr, const float *p, int n, int T);
} kern_rows;

/* x86-64 with GCC: an AVX2+FMA build exists beside the base (it needs
 * GCC's per-file target and optimize pragmas; other compilers get the
 * base build only). */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) &&      \
    !defined(__clang__)
#define KERN_HAVE_AVX2_BUILD 1
#else
#define KERN_HAVE_AVX2_BUILD 0
#endif

extern const kern_rows kern_rows_base;
#if KERN_HAVE_AVX2_BUILD
extern const kern_rows kern_rows_avx2;
#endif
/* The build in use: AVX2+FMA where the CPU has them, else the base. */
const kern_rows *kern_cpu_rows(void);

#endif
