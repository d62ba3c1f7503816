/* The row-wise and element-wise CPU kernels (GELU, AdamW, layer norm,
 * softmax rows of attention and of the loss), written once and compiled
 * twice: ops_cpu_eltwise.c builds them for the baseline instruction set,
 * ops_cpu_avx2.c for AVX2+FMA; kern_cpu_rows() picks one at run time.
 * The includer defines ROWS(name) (a suffix) and sets the compiler flags:
 * O3 and finite math, so the clamps of kern_expf/kern_tanhf become min/max
 * and the loops vectorise. No associative math: it would fold kern_expf's
 * rounding trick ((x + 1.5*2^23) - 1.5*2^23) away, as test_kern.c notices
 * at once; sums run in 8 interleaved lanes instead, so a result does not
 * depend on the vector width. Finite math assumes finite inputs; the
 * trainer stops on a non-finite loss or gradient norm. No include guard:
 * included once per instruction set. */
#include <math.h>
#include <string.h>

#include "kernels/kern_cpu.h"
#include "kernels/kern_math.h"
#include "kernels/kernels.h"

/* An activation's forward out = f(inp) and backward dinp += f'(inp) dout,
 * element by element (GELU's tanh and erf forms). */
#define ACT_PARTS(act, f, grad)                                             \
    static void ROWS(act##_fwd_part)(void *q, int part, int np)             \
    {                                                                       \
        const eargs *a = q;                                                 \
        KERN_SPLIT(a->n, part, np, lo, hi);                                 \
        float *restrict out = a->p;                                         \
        const float *restrict inp = a->in;                                  \
        for (size_t i = lo; i < hi; i++) out[i] = f(inp[i]);                \
    }                                                                       \
    static void ROWS(act##_bwd_part)(void *q, int part, int np)             \
    {                                                                       \
        const eargs *a = q;                                                 \
        KERN_SPLIT(a->n, part, np, lo, hi);                                 \
        float *restrict dinp = a->p;                                        \
        const float *restrict inp = a->in, *restrict dout = a->in2;         \
        for (size_t i = lo; i < hi; i++) dinp[i] += grad(inp[i]) * dout[i]; \
    }
ACT_PARTS(gelu, kern_gelu, kern_gelu_grad)
ACT_PARTS(gelu_erf, kern_gelu_erf, kern_gelu_erf_grad)
#undef ACT_PARTS

static void ROWS(adamw_part)(void *q, int part, int np)
{
    const eargs *a = q;
    KERN_SPLIT(a->n, part, np, lo, hi);
    float *restrict p = a->p, *restrict m = a->m, *restrict v = a->v;
    const float *restrict g = a->in;
    for (size_t i = lo; i < hi; i++)
        kern_adamw_one(&p[i], &m[i], &v[i], g[i] * a->grad_scale, a->lr,
                       a->beta1, a->beta2, a->bc1, a->bc2, a->eps, a->wd);
}

/* ------------------------------------------------ softmax rows, norm, loss */

/* Sums in 8 interleaved lanes, then the lanes in order: the loops
 * vectorise without reassociation, and the result is the same whatever
 * the vector width the compiler picks. */
#define LANES 8

static inline float ROWS(lanes_total)(const float *acc)
{
    float s = 0.0f;
    for (int k = 0; k < LANES; k++) s += acc[k];
    return s;
}

static float ROWS(sum_f)(const float *x, int n)
{
    float acc[LANES] = {0};
    int c = 0;
    for (; c + LANES <= n; c += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += x[c + k];
    for (int k = 0; c < n; c++, k++) acc[k] += x[c];
    return ROWS(lanes_total)(acc);
}

static float ROWS(sqdev_f)(const float *x, float m, int n)
{
    float acc[LANES] = {0};
    int c = 0;
    for (; c + LANES <= n; c += LANES)
        for (int k = 0; k < LANES; k++) {
            float d = x[c + k] - m;
            acc[k] += d * d;
        }
    for (int k = 0; c < n; c++, k++) acc[k] += (x[c] - m) * (x[c] - m);
    return ROWS(lanes_total)(acc);
}

static float ROWS(dot_f)(const float *a, const float *b, int n)
{
    float acc[LANES] = {0};
    int c = 0;
    for (; c + LANES <= n; c += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += a[c + k] * b[c + k];
    for (int k = 0; c < n; c++, k++) acc[k] += a[c] * b[c];
    return ROWS(lanes_total)(acc);
}

/* Layer norm backward's two row sums: sum(w d) and sum(w d (x-m) s). */
static void ROWS(ln_sums)(const float *x, const float *d, const float *w, float m,
                    float s, int n, float *sum_dn, float *sum_dn_n)
{
    float a1[LANES] = {0}, a2[LANES] = {0};
    int c = 0;
    for (; c + LANES <= n; c += LANES)
        for (int k = 0; k < LANES; k++) {
            float dn = w[c + k] * d[c + k];
            a1[k] += dn;
            a2[k] += dn * (x[c + k] - m) * s;
        }
    for (int k = 0; c < n; c++, k++) {
        float dn = w[c] * d[c];
        a1[k] += dn;
        a2[k] += dn * (x[c] - m) * s;
    }
    *sum_dn = ROWS(lanes_total)(a1);
    *sum_dn_n = ROWS(lanes_total)(a2);
}

static void ROWS(softmax_row)(float *row, int n, int T)
{
    float mx = row[0];
    for (int j = 1; j < n; j++) mx = row[j] > mx ? row[j] : mx;
    for (int j = 0; j < n; j++) row[j] = kern_expf(row[j] - mx);
    float inv = 1.0f / ROWS(sum_f)(row, n);
    for (int j = 0; j < n; j++) row[j] *= inv;
    for (int j = n; j < T; j++) row[j] = 0.0f;
}

static void ROWS(softmax_row_backward)(float *dr, const float *p, int n, int T)
{
    float dot = ROWS(dot_f)(p, dr, n);
    for (int j = 0; j < n; j++) dr[j] = p[j] * (dr[j] - dot);
    for (int j = n; j < T; j++) dr[j] = 0.0f;
}

/* ------------------------------------------------------------ layernorm */

static void ROWS(ln_fwd_part)(void *p, int part, int np)
{
    const kargs *a = p;
    int C = a->C;
    const float *w = a->in2, *b = a->in3;
    KERN_SPLIT(a->N, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++) {
        const float *x = a->in + i * C;
        float m = ROWS(sum_f)(x, C) / (float)C;
        float var = ROWS(sqdev_f)(x, m, C) / (float)C;
        float s = 1.0f / sqrtf(var + a->eps);
        float *o = a->out + i * C;
        for (int c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * w[c] + (b ? b[c] : 0.0f);
        a->out2[i] = m;
        a->out3[i] = s;
    }
}

/* dx = s (dn - mean(dn) - n mean(dn n)) with n the normalised input and
 * dn = w dout. */
static void ROWS(ln_bwd_in_part)(void *p, int part, int np)
{
    const kargs *a = p;
    int C = a->C;
    const float *w = a->in3, *mean = a->in4, *rstd = a->in5;
    KERN_SPLIT(a->N, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++) {
        const float *x = a->in2 + i * C;
        const float *d = a->in + i * C;
        float m = mean[i], s = rstd[i];
        float sum_dn, sum_dn_n;
        ROWS(ln_sums)(x, d, w, m, s, C, &sum_dn, &sum_dn_n);
        sum_dn /= (float)C;
        sum_dn_n /= (float)C;
        float *dx = a->out + i * C;
        for (int c = 0; c < C; c++) {
            float n = (x[c] - m) * s;
            float dn = w[c] * d[c];
            dx[c] += s * (dn - sum_dn - n * sum_dn_n);
        }
    }
}

/* Split by channel: each part sums all rows for its channels, in row
 * order, so the result does not depend on the thread count. */
static void ROWS(ln_bwd_w_part)(void *p, int part, int np)
{
    const kargs *a = p;
    int C = a->C;
    float *dw = a->out, *db = a->out2;
    const float *mean = a->in3, *rstd = a->in4;
    KERN_SPLIT(C, part, np, lo, hi);
    for (int i = 0; i < a->N; i++) {
        const float *x = a->in2 + (size_t)i * C;
        const float *d = a->in + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        for (size_t c = lo; c < hi; c++) {
            dw[c] += d[c] * (x[c] - m) * s;
            if (db) db[c] += d[c];
        }
    }
}

/* loss = log(sum exp(l - max)) + max - l[target]: no log of a probability
 * that underflowed. */
static void ROWS(xent_fwd_part)(void *p, int part, int np)
{
    const kargs *a = p;
    int V = a->V;
    KERN_SPLIT(a->N, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++) {
        const float *l = a->in + i * V;
        float *pr = a->out2 + i * V;
        float mx = l[0];
        for (int j = 1; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        for (int j = 0; j < V; j++) pr[j] = kern_expf(l[j] - mx);
        float sum = ROWS(sum_f)(pr, V);
        float inv = 1.0f / sum;
        for (int j = 0; j < V; j++) pr[j] *= inv;
        /* a target below 0: no target, no loss */
        a->out[i] = a->tok[i] < 0 ? 0.0f : logf(sum) + mx - l[a->tok[i]];
    }
}

static void ROWS(xent_bwd_part)(void *p, int part, int np)
{
    const kargs *a = p;
    int V = a->V;
    float scale = a->scale;
    KERN_SPLIT(a->N, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++) {
        const float *pr = a->in + i * V;
        float *d = a->out + i * V;
        if (a->tok[i] < 0) continue;
        for (int j = 0; j < V; j++) d[j] += scale * pr[j];
        d[a->tok[i]] -= scale;
    }
}

const kern_rows ROWS(kern_rows) = {
    .gelu_fwd = ROWS(gelu_fwd_part),
    .gelu_bwd = ROWS(gelu_bwd_part),
    .gelu_erf_fwd = ROWS(gelu_erf_fwd_part),
    .gelu_erf_bwd = ROWS(gelu_erf_bwd_part),
    .adamw = ROWS(adamw_part),
    .ln_fwd = ROWS(ln_fwd_part),
    .ln_bwd_in = ROWS(ln_bwd_in_part),
    .ln_bwd_w = ROWS(ln_bwd_w_part),
    .xent_fwd = ROWS(xent_fwd_part),
    .xent_bwd = ROWS(xent_bwd_part),
    .softmax_row = ROWS(softmax_row),
    .softmax_row_backward = ROWS(softmax_row_backward),
};
