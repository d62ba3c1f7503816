/* The CPU backend of T5's attention (kernels.h, attnx_*): queries and keys
 * of different lengths read from wider tensors, an additive bias looked
 * up by relative position, and the scale a caller gives (T5's is 1). The
 * products per (batch, head) pair are OpenBLAS sgemm calls on strided
 * views, as the GPT attention's are; parts take whole pairs, rows or
 * heads, so every result depends only on the thread count. */
#include "kernels/kernels.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/kern_cpu.h"

typedef struct xargs {
    float *out, *out2;
    const float *in, *in2, *in3;
    const int *bucket;
    int ldq, ldk, B, Tq, Tk, NH, hs, causal;
    float scale;
} xargs;

/* Offsets of pair bh: its q (or output) row block, its k (or v) block,
 * its Tq x Tk square. */
static size_t q_at(const xargs *a, size_t bh, int ld)
{
    return bh / (size_t)a->NH * (size_t)a->Tq * (size_t)ld +
           bh % (size_t)a->NH * (size_t)a->hs;
}

static size_t k_at(const xargs *a, size_t bh, int ld)
{
    return bh / (size_t)a->NH * (size_t)a->Tk * (size_t)ld +
           bh % (size_t)a->NH * (size_t)a->hs;
}

static size_t sq_at(const xargs *a, size_t bh)
{
    return bh * (size_t)a->Tq * (size_t)a->Tk;
}

static void scores_part(void *p, int part, int np)
{
    const xargs *a = p;
    KERN_SPLIT((size_t)a->B * a->NH, part, np, lo, hi);
    for (size_t bh = lo; bh < hi; bh++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a->Tq, a->Tk,
                    a->hs, a->scale, a->in + q_at(a, bh, a->ldq), a->ldq,
                    a->in2 + k_at(a, bh, a->ldk), a->ldk, 0.0f,
                    a->out + sq_at(a, bh), a->Tk);
}

void kern_attnx_scores_forward(float *s, const float *q, const float *k,
                               int ldq, int ldk, int B, int Tq, int Tk,
                               int NH, int hs, float scale)
{
    xargs a = {.out = s, .in = q, .in2 = k, .ldq = ldq, .ldk = ldk, .B = B,
               .Tq = Tq, .Tk = Tk, .NH = NH, .hs = hs, .scale = scale};
    kern_parallel(scores_part, &a);
}

/* A pair writes its own head's columns of its batch's rows of dq and
 * dk (in a fused q | k | v, columns apart): parts never overlap */
static void scores_bwd_part(void *p, int part, int np)
{
    const xargs *a = p;
    KERN_SPLIT((size_t)a->B * a->NH, part, np, lo, hi);
    for (size_t bh = lo; bh < hi; bh++) {
        const float *ds = a->in + sq_at(a, bh);
        size_t qo = q_at(a, bh, a->ldq), ko = k_at(a, bh, a->ldk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a->Tq, a->hs,
                    a->Tk, a->scale, ds, a->Tk, a->in3 + ko, a->ldk, 1.0f,
                    a->out + qo, a->ldq);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, a->Tk, a->hs,
                    a->Tq, a->scale, ds, a->Tk, a->in2 + qo, a->ldq, 1.0f,
                    a->out2 + ko, a->ldk);
    }
}

void kern_attnx_scores_backward(float *dq, float *dk, const float *ds,
                                const float *q, const float *k, int ldq,
                                int ldk, int B, int Tq, int Tk, int NH, int hs,
                                float scale)
{
    xargs a = {.out = dq, .out2 = dk, .in = ds, .in2 = q, .in3 = k,
               .ldq = ldq, .ldk = ldk, .B = B, .Tq = Tq, .Tk = Tk, .NH = NH,
               .hs = hs, .scale = scale};
    kern_parallel(scores_bwd_part, &a);
}

/* Keys query i sees. */
static int seen(const xargs *a, int i)
{
    return a->causal ? (i + 1 < a->Tk ? i + 1 : a->Tk) : a->Tk;
}

static void softmax_part(void *p, int part, int np)
{
    const xargs *a = p;
    const kern_rows *rows = kern_cpu_rows();
    size_t Tq = (size_t)a->Tq, Tk = (size_t)a->Tk;
    KERN_SPLIT((size_t)a->B * a->NH * Tq, part, np, lo, hi);
    for (size_t r = lo; r < hi; r++) {
        int i = (int)(r % Tq), h = (int)(r / Tq % (size_t)a->NH);
        float *row = a->out + r * Tk;
        const float *src = a->in + r * Tk;
        if (a->in2) {
            const int *bk = a->bucket + (a->Tq - 1 - i);
            for (size_t j = 0; j < Tk; j++)
                row[j] = src[j] + a->in2[(size_t)bk[j] * a->NH + h];
        } else if (row != src) {
            memcpy(row, src, Tk * sizeof *row);
        }
        rows->softmax_row(row, seen(a, i), (int)Tk);
    }
}

void kern_attnx_softmax_forward(float *att, const float *s,
                                const float *table, const int *bucket, int B,
                                int NH, int Tq, int Tk, int causal)
{
    xargs a = {.out = att, .in = s, .in2 = table, .bucket = bucket, .B = B,
               .NH = NH, .Tq = Tq, .Tk = Tk, .causal = causal};
    kern_parallel(softmax_part, &a);
}

static void softmax_bwd_part(void *p, int part, int np)
{
    const xargs *a = p;
    const kern_rows *rows = kern_cpu_rows();
    size_t Tq = (size_t)a->Tq, Tk = (size_t)a->Tk;
    KERN_SPLIT((size_t)a->B * a->NH * Tq, part, np, lo, hi);
    for (size_t r = lo; r < hi; r++) {
        float *dr = a->out2 + r * Tk, *ds = a->out + r * Tk;
        rows->softmax_row_backward(dr, a->in + r * Tk, seen(a, (int)(r % Tq)),
                                   (int)Tk);
        for (size_t j = 0; j < Tk; j++) ds[j] += dr[j];
    }
}

void kern_attnx_softmax_backward(float *ds, float *datt, const float *att,
                                 int B, int NH, int Tq, int Tk, int causal)
{
    xargs a = {.out = ds, .out2 = datt, .in = att, .B = B, .NH = NH,
               .Tq = Tq, .Tk = Tk, .causal = causal};
    kern_parallel(softmax_bwd_part, &a);
}

/* Parts take heads: a head's entries of the table are its own column. */
static void bias_bwd_part(void *p, int part, int np)
{
    const xargs *a = p;
    KERN_SPLIT((size_t)a->NH, part, np, lo, hi);
    size_t Tq = (size_t)a->Tq, Tk = (size_t)a->Tk;
    for (size_t h = lo; h < hi; h++)
        for (int b = 0; b < a->B; b++)
            for (int i = 0; i < a->Tq; i++) {
                const float *row =
                    a->in + (((size_t)b * a->NH + h) * Tq + (size_t)i) * Tk;
                const int *bk = a->bucket + (a->Tq - 1 - i);
                int n = seen(a, i);
                for (int j = 0; j < n; j++)
                    a->out[(size_t)bk[j] * a->NH + h] += row[j];
            }
}

void kern_attnx_bias_backward(float *dtable, const float *ds,
                              const int *bucket, int B, int NH, int Tq, int Tk,
                              int causal)
{
    xargs a = {.out = dtable, .in = ds, .bucket = bucket, .B = B, .NH = NH,
               .Tq = Tq, .Tk = Tk, .causal = causal};
    kern_parallel(bias_bwd_part, &a);
}

static void context_part(void *p, int part, int np)
{
    const xargs *a = p;
    int ldo = a->NH * a->hs;
    KERN_SPLIT((size_t)a->B * a->NH, part, np, lo, hi);
    for (size_t bh = lo; bh < hi; bh++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a->Tq, a->hs,
                    a->Tk, 1.0f, a->in + sq_at(a, bh), a->Tk,
                    a->in2 + k_at(a, bh, a->ldk), a->ldk, 0.0f,
                    a->out + q_at(a, bh, ldo), ldo);
}

void kern_attnx_context_forward(float *out, const float *att, const float *v,
                                int ldv, int B, int Tq, int Tk, int NH, int hs)
{
    xargs a = {.out = out, .in = att, .in2 = v, .ldk = ldv, .B = B, .Tq = Tq,
               .Tk = Tk, .NH = NH, .hs = hs};
    kern_parallel(context_part, &a);
}

static void context_bwd_part(void *p, int part, int np)
{
    const xargs *a = p;
    int ldo = a->NH * a->hs;
    KERN_SPLIT((size_t)a->B * a->NH, part, np, lo, hi);
    for (size_t bh = lo; bh < hi; bh++) {
        const float *dO = a->in + q_at(a, bh, ldo);
        size_t vo = k_at(a, bh, a->ldk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a->Tq, a->Tk,
                    a->hs, 1.0f, dO, ldo, a->in3 + vo, a->ldk, 1.0f,
                    a->out + sq_at(a, bh), a->Tk);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, a->Tk, a->hs,
                    a->Tq, 1.0f, a->in2 + sq_at(a, bh), a->Tk, dO, ldo, 1.0f,
                    a->out2 + vo, a->ldk);
    }
}

void kern_attnx_context_backward(float *datt, float *dv, const float *dout,
                                 const float *att, const float *v, int ldv,
                                 int B, int Tq, int Tk, int NH, int hs)
{
    xargs a = {.out = datt, .out2 = dv, .in = dout, .in2 = att, .in3 = v,
               .ldk = ldv, .B = B, .Tq = Tq, .Tk = Tk, .NH = NH, .hs = hs};
    kern_parallel(context_bwd_part, &a);
}

static void scale_add_part(void *p, int part, int np)
{
    const xargs *a = p;
    size_t n = (size_t)a->B;
    KERN_SPLIT(n, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++) a->out[i] += a->scale * a->in[i];
}

void kern_scale_add(float *acc, const float *src, float s, size_t n)
{
    /* (B carries the count: a flat loop has no shape) */
    xargs a = {.out = acc, .in = src, .scale = s};
    for (size_t at = 0; at < n; at += (size_t)1 << 30) {
        size_t m = n - at < ((size_t)1 << 30) ? n - at : (size_t)1 << 30;
        a.out = acc + at;
        a.in = src + at;
        a.B = (int)m;
        kern_parallel(scale_add_part, &a);
    }
}
