/* The CPU ops of tensor parallelism over a vocabulary (Megatron-LM's
 * vocabulary-parallel embedding and cross-entropy) and the accumulation
 * of gradients. They are the loops the pipeline executor ran inline
 * before it had a device backend, in the same order, so its results keep
 * their bits. Rows are independent and split over the pool's threads;
 * the embedding's backward scatters into rows that repeat and stays
 * serial. Compiled with the project's flags (no fast-math pragmas). */
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

#include "kernels/kern_cpu.h"
#include "kernels/kern_math.h"

/* Arguments of one call, handed to its parts (names as in the ops). */
typedef struct sargs {
    float *out, *out2, *out3, *mx;
    const float *in, *in2, *in3;
    const int *tok;
    int N, T, C, Vl, Vv, v0, tp;
    size_t n;
    float scale;
} sargs;

static void shard_fwd_part(void *p, int part, int np)
{
    const sargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    size_t C = (size_t)a->C;
    for (size_t n = lo; n < hi; n++) {
        float *o = a->out + n * C;
        int t = a->tok[n] - a->v0;
        if (t >= 0 && t < a->Vl)
            memcpy(o, a->in + (size_t)t * C, sizeof(float) * C);
        else
            memset(o, 0, sizeof(float) * C);
    }
}

void kern_embed_shard_forward(float *out, const int *tokens, const float *wte,
                              int v0, int Vl, int N, int C)
{
    sargs a = {.out = out, .in = wte, .tok = tokens, .v0 = v0, .Vl = Vl,
               .N = N, .C = C};
    kern_parallel(shard_fwd_part, &a);
}

static void pos_fwd_part(void *p, int part, int np)
{
    const sargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    size_t C = (size_t)a->C;
    for (size_t n = lo; n < hi; n++) {
        float *o = a->out + n * C;
        const float *pe = a->in + (n % (size_t)a->T) * C;
        for (size_t k = 0; k < C; k++) o[k] += pe[k];
    }
}

void kern_embed_pos_forward(float *out, const float *wpe, int B, int T, int C)
{
    sargs a = {.out = out, .in = wpe, .T = T, .C = C, .N = B * T};
    kern_parallel(pos_fwd_part, &a);
}

static void type_fwd_part(void *p, int part, int np)
{
    const sargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    size_t C = (size_t)a->C;
    for (size_t n = lo; n < hi; n++) {
        float *o = a->out + n * C;
        const float *te = a->in + ((int)(n % (size_t)a->T) >= a->v0) * C;
        for (size_t k = 0; k < C; k++) o[k] += te[k];
    }
}

void kern_embed_type_forward(float *out, const float *wtt, int B, int T,
                             int C, int T0)
{
    sargs a = {.out = out, .in = wtt, .T = T, .C = C, .N = B * T, .v0 = T0};
    kern_parallel(type_fwd_part, &a);
}

/* Two rows of C sums: split by channel, each part adding its channels
 * over the rows in row order (the bits do not depend on the split). */
static void type_bwd_part(void *p, int part, int np)
{
    const sargs *a = p;
    KERN_SPLIT(a->C, part, np, lo, hi);
    size_t C = (size_t)a->C;
    for (int n = 0; n < a->N; n++) {
        const float *d = a->in + (size_t)n * C;
        float *te = a->out + (size_t)(n % a->T >= a->v0) * C;
        for (size_t k = lo; k < hi; k++) te[k] += d[k];
    }
}

void kern_embed_type_backward(float *dwtt, const float *dout, int B, int T,
                              int C, int T0)
{
    sargs a = {.out = dwtt, .in = dout, .T = T, .C = C, .N = B * T, .v0 = T0};
    kern_parallel(type_bwd_part, &a);
}

void kern_embed_shard_backward(float *dwte, float *dwpe, const float *dout,
                               const int *tokens, int v0, int Vl, int B,
                               int T, int C)
{
    int N = B * T;
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C;
        int t = tokens[n] - v0;
        float *pe = dwpe ? dwpe + (size_t)(n % T) * C : NULL;
        float *we = t >= 0 && t < Vl ? dwte + (size_t)t * C : NULL;
        for (int k = 0; k < C; k++) {
            if (we) we[k] += d[k];
            if (pe) pe[k] += d[k];
        }
    }
}

/* ----------------------------------------------- vocabulary-parallel loss */

static void xmax_part(void *p, int part, int np)
{
    const sargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++) {
        const float *l = a->in + i * (size_t)a->Vl;
        float m = a->Vv ? l[0] : -3.0e38f;
        for (int j = 1; j < a->Vv; j++) m = l[j] > m ? l[j] : m;
        a->out[i] = m;
    }
}

void kern_xent_shard_max(float *mx, const float *logits, int N, int Vl,
                         int Vv)
{
    sargs a = {.out = mx, .in = logits, .N = N, .Vl = Vl, .Vv = Vv};
    kern_parallel(xmax_part, &a);
}

/* Each part reads and writes the maxima of its own rows only. */
static void xexp_part(void *p, int part, int np)
{
    const sargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    size_t N = (size_t)a->N;
    int Vl = a->Vl, Vv = a->Vv;
    for (size_t i = lo; i < hi; i++) {
        float m = a->mx[i];
        for (int q = 1; q < a->tp; q++)
            m = a->mx[(size_t)q * N + i] > m ? a->mx[(size_t)q * N + i] : m;
        a->mx[i] = m;
        const float *l = a->in + i * (size_t)Vl;
        float *pr = a->out + i * (size_t)Vl, s = 0;
        for (int j = 0; j < Vl; j++) {
            pr[j] = j < Vv ? kern_expf(l[j] - m) : 0.0f;
            s += pr[j];
        }
        a->out2[i] = s;
        int t = a->tok[i] - a->v0;
        a->out3[i] = t >= 0 && t < Vl ? l[t] : 0.0f;
    }
}

void kern_xent_shard_exp(float *probs, float *sum, float *tl, float *mx,
                         const float *logits, const int *targets, int tp,
                         int v0, int N, int Vl, int Vv)
{
    sargs a = {.out = probs, .out2 = sum, .out3 = tl, .mx = mx, .in = logits,
               .tok = targets, .tp = tp, .v0 = v0, .N = N, .Vl = Vl,
               .Vv = Vv};
    kern_parallel(xexp_part, &a);
}

static void xnorm_part(void *p, int part, int np)
{
    const sargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    const float *sum = a->in, *mx = a->in2, *tl = a->in3;
    for (size_t i = lo; i < hi; i++) {
        float inv = 1.0f / sum[i], *pr = a->out2 + i * (size_t)a->Vl;
        for (int j = 0; j < a->Vl; j++) pr[j] *= inv;
        a->out[i] = a->tok[i] < 0 ? 0.0f : logf(sum[i]) + mx[i] - tl[i];
    }
}

void kern_xent_shard_norm(float *losses, float *probs, const float *sum,
                          const float *mx, const float *tl,
                          const int *targets, int N, int Vl)
{
    sargs a = {.out = losses, .out2 = probs, .in = sum, .in2 = mx, .in3 = tl,
               .tok = targets, .N = N, .Vl = Vl};
    kern_parallel(xnorm_part, &a);
}

static void xbwd_part(void *p, int part, int np)
{
    const sargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    int Vl = a->Vl;
    float s = a->scale;
    for (size_t n = lo; n < hi; n++) {
        const float *pr = a->in + n * (size_t)Vl;
        float *d = a->out + n * (size_t)Vl;
        if (a->tok[n] < 0) continue;
        for (int j = 0; j < Vl; j++) d[j] += s * pr[j];
        int t = a->tok[n] - a->v0;
        if (t >= 0 && t < Vl) d[t] -= s;
    }
}

void kern_xent_shard_backward(float *dlogits, const float *probs,
                              const int *targets, float scale, int v0, int N,
                              int Vl)
{
    sargs a = {.out = dlogits, .in = probs, .tok = targets, .scale = scale,
               .v0 = v0, .N = N, .Vl = Vl};
    kern_parallel(xbwd_part, &a);
}

/* ------------------------------------------------------------ gradients */

static void acc_part(void *p, int part, int np)
{
    const sargs *a = p;
    KERN_SPLIT(a->n, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++) a->out[i] += a->in[i];
}

void kern_accumulate(float *acc, const float *src, size_t n)
{
    sargs a = {.out = acc, .in = src, .n = n};
    kern_parallel(acc_part, &a);
}
