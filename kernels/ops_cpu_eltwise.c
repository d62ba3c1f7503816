/* The row-wise CPU ops for the baseline instruction set (see
 * ops_cpu_rows.h), the public entry points of those ops, and the choice
 * between this build and the AVX2+FMA one (ops_cpu_avx2.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "finite-math-only", "no-signed-zeros", \
                     "no-math-errno", "no-trapping-math")
#endif

#define ROWS(name) name##_base
#include "kernels/ops_cpu_rows.h"
#undef ROWS

#include <pthread.h>
#include <strings.h>

static const kern_rows *rows_in_use;
static pthread_once_t rows_once = PTHREAD_ONCE_INIT;

#if KERN_HAVE_AVX2_BUILD
static int have_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

static void rows_pick(void)
{
#if KERN_HAVE_AVX2_BUILD
    if (have_avx2()) {
        rows_in_use = &kern_rows_avx2;
        return;
    }
#endif
    rows_in_use = &kern_rows_base;
}

const kern_rows *kern_cpu_rows(void)
{
    pthread_once(&rows_once, rows_pick);
    return rows_in_use;
}

int kern_set_isa(const char *isa)
{
    kern_cpu_rows();
    if (!strcasecmp(isa, "base")) {
        rows_in_use = &kern_rows_base;
        return 0;
    }
#if KERN_HAVE_AVX2_BUILD
    if (!strcasecmp(isa, "avx2") && have_avx2()) {
        rows_in_use = &kern_rows_avx2;
        return 0;
    }
#endif
    return -1;
}

const char *kern_get_isa(void)
{
    return kern_cpu_rows() == &kern_rows_base ? "base" : "avx2";
}

/* An element-wise op over n floats: p from in (and in2). */
static void eltwise(kern_part_fn fn, float *p, const float *in,
                    const float *in2, size_t n)
{
    eargs a = {.p = p, .in = in, .in2 = in2, .n = n};
    kern_parallel(fn, &a);
}

void kern_gelu_forward(float *out, const float *inp, size_t n)
{
    eltwise(kern_cpu_rows()->gelu_fwd, out, inp, NULL, n);
}

void kern_gelu_backward(float *dinp, const float *inp, const float *dout,
                        size_t n)
{
    eltwise(kern_cpu_rows()->gelu_bwd, dinp, inp, dout, n);
}

void kern_gelu_erf_forward(float *out, const float *inp, size_t n)
{
    eltwise(kern_cpu_rows()->gelu_erf_fwd, out, inp, NULL, n);
}

void kern_gelu_erf_backward(float *dinp, const float *inp, const float *dout,
                            size_t n)
{
    eltwise(kern_cpu_rows()->gelu_erf_bwd, dinp, inp, dout, n);
}

void kern_adamw_update(float *p, float *m, float *v, const float *g, size_t n,
                       float lr, float beta1, float beta2, float eps, float wd,
                       float grad_scale, int t)
{
    eargs a = {.p = p, .m = m, .v = v, .in = g, .n = n, .lr = lr,
               .beta1 = beta1, .beta2 = beta2,
               .bc1 = (float)(1.0 - pow(beta1, t)),
               .bc2 = (float)(1.0 - pow(beta2, t)), .eps = eps, .wd = wd,
               .grad_scale = grad_scale};
    kern_parallel(kern_cpu_rows()->adamw, &a);
}

void kern_layernorm_forward(float *out, float *mean, float *rstd,
                            const float *inp, const float *w, const float *b,
                            int N, int C, float eps)
{
    kargs a = {.out = out, .out2 = mean, .out3 = rstd, .in = inp, .in2 = w,
               .in3 = b, .N = N, .C = C, .eps = eps};
    kern_parallel(kern_cpu_rows()->ln_fwd, &a);
}

void kern_layernorm_backward_input(float *dinp, const float *dout,
                                   const float *inp, const float *w,
                                   const float *mean, const float *rstd,
                                   int N, int C)
{
    kargs a = {.out = dinp, .in = dout, .in2 = inp, .in3 = w, .in4 = mean,
               .in5 = rstd, .N = N, .C = C};
    kern_parallel(kern_cpu_rows()->ln_bwd_in, &a);
}

void kern_layernorm_backward_weight(float *dw, float *db, const float *dout,
                                    const float *inp, const float *mean,
                                    const float *rstd, int N, int C)
{
    kargs a = {.out = dw, .out2 = db, .in = dout, .in2 = inp, .in3 = mean,
               .in4 = rstd, .N = N, .C = C};
    kern_parallel(kern_cpu_rows()->ln_bwd_w, &a);
}

void kern_layernorm_backward(float *dinp, float *dw, float *db,
                             const float *dout, const float *inp,
                             const float *w, const float *mean,
                             const float *rstd, int N, int C)
{
    kern_layernorm_backward_input(dinp, dout, inp, w, mean, rstd, N, C);
    kern_layernorm_backward_weight(dw, db, dout, inp, mean, rstd, N, C);
}

void kern_softmax_xent_forward(float *losses, float *probs,
                               const float *logits, const int *targets, int N,
                               int V)
{
    kargs a = {.out = losses, .out2 = probs, .in = logits, .tok = targets,
               .N = N, .V = V};
    kern_parallel(kern_cpu_rows()->xent_fwd, &a);
}

void kern_softmax_xent_backward(float *dlogits, const float *probs,
                                const int *targets, float scale, int N, int V)
{
    kargs a = {.out = dlogits, .in = probs, .tok = targets, .scale = scale,
               .N = N, .V = V};
    kern_parallel(kern_cpu_rows()->xent_bwd, &a);
}
