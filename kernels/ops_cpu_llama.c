/* The CPU kernels of Llama-style decoders (kernels.h): RMSNorm, SwiGLU
 * and the q | k | v expansion that applies RoPE and shares a group's key
 * and value heads. Plain loops split over the pool's threads; each part
 * writes rows (or, for the norm's weight gradient, channels) of its own,
 * and every sum runs in one fixed order, so results do not depend on the
 * thread count. Optimised as the row kernels are (ops_cpu_eltwise.c):
 * O3 and finite math, no reassociation. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "finite-math-only", "no-signed-zeros", \
                     "no-math-errno", "no-trapping-math")
#endif
#include "kernels/kernels.h"

#include <math.h>

#include "kernels/kern_cpu.h"
#include "kernels/kern_math.h"

/* ------------------------------------------------------------- RMSNorm */

/* Sums in 8 interleaved lanes, then the lanes in order, as the row
 * kernels sum (ops_cpu_rows.h): the loops vectorise without
 * reassociation, whatever the vector width. x[c] y[c] over c < n. */
#define LANES 8

/* Channels a norm's loops take at a time (stack buffers). */
#define KERN_NORM_CHUNK 256

static float dot_lanes(const float *x, const float *y, int n)
{
    float acc[LANES] = {0};
    int c = 0;
    for (; c + LANES <= n; c += LANES)
        for (int k = 0; k < LANES; k++) acc[k] += x[c + k] * y[c + k];
    for (int k = 0; c < n; c++, k++) acc[k] += x[c] * y[c];
    float s = 0.0f;
    for (int k = 0; k < LANES; k++) s += acc[k];
    return s;
}

static void rms_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    int C = a->C;
    for (size_t i = lo; i < hi; i++) {
        const float *x = a->in + i * C;
        float ss = dot_lanes(x, x, C);
        float r = 1.0f / sqrtf(ss / (float)C + a->scale);
        float *o = a->out + i * C;
        for (int c = 0; c < C; c++) o[c] = x[c] * r * a->in2[c];
        a->out2[i] = r;
    }
}

void kern_rmsnorm_forward(float *out, float *rstd, const float *inp,
                          const float *w, int N, int C, float eps)
{
    kargs a = {.out = out, .out2 = rstd, .in = inp, .in2 = w, .N = N,
               .C = C, .scale = eps};
    kern_parallel(rms_fwd_part, &a);
}

/* dx = r (w dy - n mean(w dy n)), n = x r */
static void rms_bwd_in_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    int C = a->C;
    const float *w = a->in3;
    float wd[KERN_NORM_CHUNK];
    for (size_t i = lo; i < hi; i++) {
        const float *x = a->in2 + i * C, *d = a->in + i * C;
        float r = a->in4[i], s = 0.0f;
        /* sum of w d x over the row, chunk by chunk (then times r) */
        for (int c0 = 0; c0 < C; c0 += KERN_NORM_CHUNK) {
            int n = C - c0 < KERN_NORM_CHUNK ? C - c0 : KERN_NORM_CHUNK;
            for (int c = 0; c < n; c++) wd[c] = w[c0 + c] * d[c0 + c];
            s += dot_lanes(wd, x + c0, n);
        }
        s = s * r / (float)C;
        float *dx = a->out + i * C;
        for (int c = 0; c < C; c++)
            dx[c] += r * (w[c] * d[c] - x[c] * r * s);
    }
}

void kern_rmsnorm_backward_input(float *dinp, const float *dout,
                                 const float *inp, const float *w,
                                 const float *rstd, int N, int C)
{
    kargs a = {.out = dinp, .in = dout, .in2 = inp, .in3 = w, .in4 = rstd,
               .N = N, .C = C};
    kern_parallel(rms_bwd_in_part, &a);
}

/* dw[c] += sum over rows of dy x r: a part owns channels, a chunk of
 * them at a time summed over the rows in order, each row's channels
 * contiguous */
static void rms_bwd_w_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->C, part, np, lo, hi);
    size_t C = (size_t)a->C;
    float acc[KERN_NORM_CHUNK];
    for (size_t c0 = lo; c0 < hi; c0 += KERN_NORM_CHUNK) {
        size_t n = hi - c0 < KERN_NORM_CHUNK ? hi - c0 : KERN_NORM_CHUNK;
        for (size_t c = 0; c < n; c++) acc[c] = 0.0f;
        for (int i = 0; i < a->N; i++) {
            const float *d = a->in + i * C + c0, *x = a->in2 + i * C + c0;
            float r = a->in3[i];
            for (size_t c = 0; c < n; c++) acc[c] += d[c] * x[c] * r;
        }
        for (size_t c = 0; c < n; c++) a->out[c0 + c] += acc[c];
    }
}

void kern_rmsnorm_backward_weight(float *dw, const float *dout,
                                  const float *inp, const float *rstd, int N,
                                  int C)
{
    kargs a = {.out = dw, .in = dout, .in2 = inp, .in3 = rstd, .N = N,
               .C = C};
    kern_parallel(rms_bwd_w_part, &a);
}

/* ---------------------------------------------------- SwiGLU, GeGLU */

/* A gated MLP's gate activation and its derivative: SiLU (SwiGLU) or
 * GELU's tanh form (GeGLU, a->gelu) */
static inline float gate_act(const kargs *a, float x)
{
    return a->gelu ? kern_gelu(x) : kern_silu(x);
}

static inline float gate_grad(const kargs *a, float x)
{
    return a->gelu ? kern_gelu_grad(x) : kern_silu_grad(x);
}

static void gated_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    size_t F = (size_t)a->C;
    for (size_t i = lo; i < hi; i++) {
        const float *g = a->in + i * 2 * F, *u = g + F;
        float *o = a->out + i * F;
        for (size_t j = 0; j < F; j++) o[j] = gate_act(a, g[j]) * u[j];
    }
}

static void gated_bwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    size_t F = (size_t)a->C;
    for (size_t i = lo; i < hi; i++) {
        const float *g = a->in + i * 2 * F, *u = g + F, *d = a->in2 + i * F;
        float *dg = a->out + i * 2 * F, *du = dg + F;
        for (size_t j = 0; j < F; j++) {
            dg[j] += d[j] * u[j] * gate_grad(a, g[j]);
            du[j] += d[j] * gate_act(a, g[j]);
        }
    }
}

void kern_swiglu_forward(float *out, const float *inp, int N, int F)
{
    kargs a = {.out = out, .in = inp, .N = N, .C = F};
    kern_parallel(gated_fwd_part, &a);
}

void kern_swiglu_backward(float *dinp, const float *inp, const float *dout,
                          int N, int F)
{
    kargs a = {.out = dinp, .in = inp, .in2 = dout, .N = N, .C = F};
    kern_parallel(gated_bwd_part, &a);
}

void kern_geglu_forward(float *out, const float *inp, int N, int F)
{
    kargs a = {.out = out, .in = inp, .N = N, .C = F, .gelu = 1};
    kern_parallel(gated_fwd_part, &a);
}

void kern_geglu_backward(float *dinp, const float *inp, const float *dout,
                         int N, int F)
{
    kargs a = {.out = dinp, .in = inp, .in2 = dout, .N = N, .C = F,
               .gelu = 1};
    kern_parallel(gated_bwd_part, &a);
}

/* ---------------------------------------------------- q | k | v, RoPE */

/* The pairs' frequencies (kern_rope_freq), once for all positions. */
static void rope_freqs(double *f, int hs, float base)
{
    for (int i = 0; i < hs / 2; i++) f[i] = kern_rope_freq(i, hs, base);
}

/* cos and sin of a position's angles, pair by pair, the bits of
 * kern_rope_cs (sin negated: back, the transpose, the gradient's
 * rotation). */
static void rope_row(float *c, float *s, int t, int hs, const double *f,
                     int back)
{
    for (int i = 0; i < hs / 2; i++) {
        double a = (double)t * f[i];
        c[i] = (float)cos(a);
        s[i] = (float)(back ? -sin(a) : sin(a));
    }
}

/* Rotates the head at x (hs channels) into y: channel i paired with
 * i + hs/2, by the angles of rope_row. */
static void rope_head(float *y, const float *x, const float *c,
                      const float *s, int hs)
{
    int h2 = hs / 2;
    for (int i = 0; i < h2; i++) {
        float x1 = x[i], x2 = x[i + h2];
        y[i] = x1 * c[i] - x2 * s[i];
        y[i + h2] = x2 * c[i] + x1 * s[i];
    }
}

/* The expansion's parts split the positions, each running every sequence
 * of the batch at its positions: a position's sines and cosines are
 * computed once, not once a sequence. */
static void expand_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->T, part, np, lo, hi);
    int NH = a->NH, NKV = a->OC, hs = a->C, grp = NH / NKV,
        B = a->N / a->T;
    float base = a->scale;
    int rope = base > 0;
    size_t Q = (size_t)NH * hs, K = (size_t)NKV * hs;
    float cs[KERN_HEAD_MAX / 2], sn[KERN_HEAD_MAX / 2];
    double fr[KERN_HEAD_MAX / 2];
    if (rope) rope_freqs(fr, hs, base);
    for (size_t t = lo; t < hi; t++) {
        if (rope) rope_row(cs, sn, (int)t, hs, fr, 0);
        for (int b = 0; b < B; b++) {
            size_t r = (size_t)b * (size_t)a->T + t;
            const float *x = a->in + r * (Q + 2 * K);
            float *o = a->out + r * 3 * Q;
            for (int h = 0; h < NH; h++) {
                const float *q = x + (size_t)h * hs,
                            *k = x + Q + (size_t)(h / grp) * hs,
                            *v = x + Q + K + (size_t)(h / grp) * hs;
                float *oq = o + (size_t)h * hs, *ok = oq + Q, *ov = ok + Q;
                if (rope) {
                    rope_head(oq, q, cs, sn, hs);
                    rope_head(ok, k, cs, sn, hs);
                } else {
                    for (int i = 0; i < hs; i++) oq[i] = q[i], ok[i] = k[i];
                }
                for (int i = 0; i < hs; i++) ov[i] = v[i];
            }
        }
    }
}

void kern_qkv_expand_forward(float *out, const float *raw, int B, int T,
                             int NH, int NKV, int hs, float base)
{
    kargs a = {.out = out, .in = raw, .N = B * T, .T = T, .NH = NH,
               .OC = NKV, .C = hs, .scale = base};
    kern_parallel(expand_fwd_part, &a);
}

/* Split as the forward is. */
static void expand_bwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->T, part, np, lo, hi);
    int NH = a->NH, NKV = a->OC, hs = a->C, grp = NH / NKV,
        B = a->N / a->T;
    float base = a->scale;
    int rope = base > 0;
    size_t Q = (size_t)NH * hs, K = (size_t)NKV * hs;
    float sk[KERN_HEAD_MAX], rot[KERN_HEAD_MAX], sv[KERN_HEAD_MAX];
    float cs[KERN_HEAD_MAX / 2], sn[KERN_HEAD_MAX / 2];
    double fr[KERN_HEAD_MAX / 2];
    if (rope) rope_freqs(fr, hs, base);
    for (size_t t = lo; t < hi; t++) {
        if (rope) rope_row(cs, sn, (int)t, hs, fr, 1);
        for (int b = 0; b < B; b++) {
            size_t r = (size_t)b * (size_t)a->T + t;
            const float *d = a->in + r * 3 * Q;
            float *x = a->out + r * (Q + 2 * K);
            for (int h = 0; h < NH; h++) {
                const float *dq = d + (size_t)h * hs;
                float *xq = x + (size_t)h * hs;
                if (rope) {
                    rope_head(rot, dq, cs, sn, hs);
                    dq = rot;
                }
                for (int i = 0; i < hs; i++) xq[i] += dq[i];
            }
            for (int g = 0; g < NKV; g++) {
                for (int i = 0; i < hs; i++) sk[i] = sv[i] = 0.0f;
                for (int h = g * grp; h < (g + 1) * grp; h++) {
                    const float *dk = d + Q + (size_t)h * hs, *dv = dk + Q;
                    for (int i = 0; i < hs; i++)
                        sk[i] += dk[i], sv[i] += dv[i];
                }
                const float *k = sk;
                if (rope) {
                    rope_head(rot, sk, cs, sn, hs);
                    k = rot;
                }
                float *xk = x + Q + (size_t)g * hs, *xv = xk + K;
                for (int i = 0; i < hs; i++) xk[i] += k[i], xv[i] += sv[i];
            }
        }
    }
}

void kern_qkv_expand_backward(float *draw, const float *dout, int B, int T,
                              int NH, int NKV, int hs, float base)
{
    kargs a = {.out = draw, .in = dout, .N = B * T, .T = T, .NH = NH,
               .OC = NKV, .C = hs, .scale = base};
    kern_parallel(expand_bwd_part, &a);
}

/* ---------------------------------------------------- NF4 (QLoRA) */

static const float nf4_levels[16] = {KERN_NF4_LEVELS};

typedef struct nf4args {
    float *out;
    const unsigned char *codes;
    const signed char *bcode;
    const float *gstat;
    long long flat0, b0;
    int rows, cols, ld;
} nf4args;

static void nf4_part(void *p, int part, int np)
{
    const nf4args *a = p;
    KERN_SPLIT(a->rows, part, np, lo, hi);
    long long g0 = a->b0 / KERN_NF4_GROUP;
    for (size_t i = lo; i < hi; i++)
        for (int j = 0; j < a->cols; j++) {
            size_t e = i * (size_t)a->cols + (size_t)j;
            int code = a->codes[e / 2] >> (4 * (e & 1)) & 15;
            long long blk = (a->flat0 + (long long)i * a->ld + j) /
                            KERN_NF4_BLOCK;
            long long g = blk / KERN_NF4_GROUP - g0;
            float absmax = a->gstat[2 * g] +
                           a->gstat[2 * g + 1] *
                               (float)a->bcode[blk - a->b0] / 127.0f;
            a->out[e] = nf4_levels[code] * absmax;
        }
}

void kern_nf4_dequantize(float *out, const unsigned char *codes,
                         const signed char *bcode, const float *gstat,
                         long long flat0, int rows, int cols, int ld,
                         long long b0)
{
    nf4args a = {out, codes, bcode, gstat, flat0, b0, rows, cols, ld};
    kern_parallel(nf4_part, &a);
}
