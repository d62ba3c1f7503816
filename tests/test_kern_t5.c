/* kernels: T5's attention (attnx_*) against a float64 reference written
 * here as naive loops, its backward against central finite differences of
 * that reference, and in GPT's shape (fused q | k | v, scaled, no bias)
 * against GPT's three attention ops bit for bit. Tolerances as
 * test_kern.c's. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static uint64_t rs;

static double unit(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

static float *rnd(size_t n)
{
    float *x = malloc(n * sizeof *x + 1);
    for (size_t i = 0; i < n; i++) {
        double u = 0.1 + 0.9 * unit();
        x[i] = (float)(unit() < 0.5 ? -u : u);
    }
    return x;
}

/* One problem: q from a tensor of ld lq, k and v from one of ld lk (k at
 * column ko, v at vo; fused: the q tensor), a bias table of NB rows (0:
 * none) and a bucket per offset. */
typedef struct prob {
    int B, Tq, Tk, NH, hs, lq, lk, ko, vo, NB, causal, fused;
    float scale;
    float *q, *kv, *table, *g;
    int *bucket;
} prob;

static int seen(const prob *p, int i)
{
    return p->causal ? (i + 1 < p->Tk ? i + 1 : p->Tk) : p->Tk;
}

/* out = softmax(scale q k^T + bias) v in float64, from float64 copies
 * (q and k|v may be one tensor: fused) */
static void ref(const prob *p, const double *q, const double *kv,
                const double *tb, double *out)
{
    int D = p->NH * p->hs;
    double *row = malloc(sizeof(double) * (size_t)p->Tk);
    for (int b = 0; b < p->B; b++)
        for (int h = 0; h < p->NH; h++)
            for (int i = 0; i < p->Tq; i++) {
                int n = seen(p, i);
                double mx = -1e300, sum = 0;
                for (int j = 0; j < n; j++) {
                    double s = 0;
                    for (int c = 0; c < p->hs; c++)
                        s += q[(size_t)(b * p->Tq + i) * p->lq + h * p->hs + c] *
                             kv[(size_t)(b * p->Tk + j) * p->lk + p->ko +
                                h * p->hs + c];
                    s *= p->scale;
                    if (tb) s += tb[p->bucket[j - i + p->Tq - 1] * p->NH + h];
                    row[j] = s;
                    if (s > mx) mx = s;
                }
                for (int j = 0; j < n; j++) sum += row[j] = exp(row[j] - mx);
                for (int c = 0; c < p->hs; c++) {
                    double o = 0;
                    for (int j = 0; j < n; j++)
                        o += row[j] / sum *
                             kv[(size_t)(b * p->Tk + j) * p->lk + p->vo +
                                h * p->hs + c];
                    out[(size_t)(b * p->Tq + i) * D + h * p->hs + c] = o;
                }
            }
    free(row);
}

static size_t nq(const prob *p) { return (size_t)p->B * p->Tq * p->lq; }
static size_t nkv(const prob *p) { return (size_t)p->B * p->Tk * p->lk; }
static size_t no(const prob *p)
{
    return (size_t)p->B * p->Tq * p->NH * p->hs;
}

static double loss(const prob *p, const double *q, const double *kv,
                   const double *tb)
{
    size_t n = no(p);
    double *o = malloc(sizeof(double) * n), s = 0;
    ref(p, q, p->fused ? q : kv, tb, o);
    for (size_t i = 0; i < n; i++) s += o[i] * p->g[i];
    free(o);
    return s;
}

static double *dbl(const float *x, size_t n)
{
    double *d = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* The kernels' forward and backward on p. */
static void run(const prob *p, float *out, float *dq, float *dkv, float *dtb)
{
    size_t na = (size_t)p->B * p->NH * p->Tq * p->Tk;
    const float *k = (p->fused ? p->q : p->kv) + p->ko;
    const float *v = (p->fused ? p->q : p->kv) + p->vo;
    float *s = rnd(na), *att = rnd(na), *datt = calloc(na, 4),
          *ds = calloc(na, 4);
    float *dk = (p->fused ? dq : dkv) + p->ko;
    float *dv = (p->fused ? dq : dkv) + p->vo;
    kern_attnx_scores_forward(s, p->q, k, p->lq, p->lk, p->B, p->Tq, p->Tk,
                              p->NH, p->hs, p->scale);
    kern_attnx_softmax_forward(att, s, p->table, p->bucket, p->B, p->NH,
                               p->Tq, p->Tk, p->causal);
    kern_attnx_context_forward(out, att, v, p->lk, p->B, p->Tq, p->Tk, p->NH,
                               p->hs);
    kern_attnx_context_backward(datt, dv, p->g, att, v, p->lk, p->B, p->Tq,
                                p->Tk, p->NH, p->hs);
    kern_attnx_softmax_backward(ds, datt, att, p->B, p->NH, p->Tq, p->Tk,
                                p->causal);
    if (p->table)
        kern_attnx_bias_backward(dtb, ds, p->bucket, p->B, p->NH, p->Tq,
                                 p->Tk, p->causal);
    kern_attnx_scores_backward(dq, dk, ds, p->q, k, p->lq, p->lk, p->B,
                               p->Tq, p->Tk, p->NH, p->hs, p->scale);
    free(s); free(att); free(datt); free(ds);
}

static void close_to(const char *what, const float *got, const float *init,
                     const double *want, size_t n, double atol, double rtol)
{
    for (size_t i = 0; i < n; i++) {
        double x = (double)got[i] - (init ? (double)init[i] : 0);
        cr_assert(fabs(x - want[i]) <= atol + rtol * fabs(want[i]),
                  "%s[%zu]: %.9g, want %.9g", what, i, x, want[i]);
    }
}

/* d loss / d x[i] by central differences, x one of the float64 copies */
static double *fd(const prob *p, double *q, double *kv, double *tb,
                  double *x, size_t n)
{
    double *gr = malloc(sizeof(double) * (n ? n : 1)), h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double s = x[i];
        x[i] = s + h;
        double lp = loss(p, q, kv, tb);
        x[i] = s - h;
        double lm = loss(p, q, kv, tb);
        x[i] = s;
        gr[i] = (lp - lm) / (2 * h);
    }
    return gr;
}

static void check_prob(prob *p, int seed)
{
    rs = 0x9E3779B97F4A7C15ull * (uint64_t)seed + 1;
    int D = p->NH * p->hs;
    p->q = rnd(nq(p));
    p->kv = p->fused ? NULL : rnd(nkv(p));
    p->g = rnd(no(p));
    p->bucket = malloc(sizeof(int) * (size_t)(p->Tq + p->Tk));
    /* buckets repeat (several offsets share one) and skip rows */
    for (int o = 0; o < p->Tq + p->Tk - 1; o++)
        p->bucket[o] = p->NB ? (o * 7 / 3) % p->NB : 0;
    p->table = p->NB ? rnd((size_t)p->NB * p->NH) : NULL;
    size_t ntb = p->table ? (size_t)p->NB * p->NH : 0;
    float *out = rnd(no(p)), *dq = rnd(nq(p)), *dq0 = malloc(nq(p) * 4);
    memcpy(dq0, dq, nq(p) * 4);
    float *dkv = p->fused ? NULL : rnd(nkv(p)), *dkv0 = NULL;
    if (dkv) {
        dkv0 = malloc(nkv(p) * 4);
        memcpy(dkv0, dkv, nkv(p) * 4);
    }
    float *dtb = ntb ? rnd(ntb) : NULL, *dtb0 = NULL;
    if (dtb) {
        dtb0 = malloc(ntb * 4);
        memcpy(dtb0, dtb, ntb * 4);
    }
    run(p, out, dq, dkv, dtb);
    double *Q = dbl(p->q, nq(p)), *KV = p->fused ? Q : dbl(p->kv, nkv(p)),
           *TB = ntb ? dbl(p->table, ntb) : NULL;
    double *want = malloc(sizeof(double) * no(p));
    ref(p, Q, KV, TB, want);
    close_to("out", out, NULL, want, no(p), 2e-5, 2e-4);
    double *gq = fd(p, Q, KV, TB, Q, nq(p));
    close_to("dq", dq, dq0, gq, nq(p), 1e-4, 1e-3);
    free(gq);
    if (!p->fused) {
        double *gk = fd(p, Q, KV, TB, KV, nkv(p));
        close_to("dkv", dkv, dkv0, gk, nkv(p), 1e-4, 1e-3);
        free(gk);
    }
    if (ntb) {
        double *gt = fd(p, Q, KV, TB, TB, ntb);
        close_to("dtable", dtb, dtb0, gt, ntb, 1e-4, 1e-3);
        free(gt);
    }
    (void)D;
    free(p->q); free(p->kv); free(p->g); free(p->bucket); free(p->table);
    free(out); free(dq); free(dq0); free(dkv); free(dkv0); free(dtb);
    free(dtb0); free(Q); if (!p->fused) free(KV); free(TB); free(want);
}

/* Cross-attention (queries of one length over keys of another, k | v in
 * one tensor), no bias, T5's scale 1 */
Test(kern_t5, cross_attention)
{
    for (int th = 1; th <= 3; th += 2) {
        kern_set_threads(th);
        prob p = {.B = 2, .Tq = 3, .Tk = 5, .NH = 2, .hs = 3, .lq = 6,
                  .lk = 12, .vo = 6, .scale = 1};
        check_prob(&p, 1);
    }
    kern_set_threads(1);
}

/* Self-attention from a fused q | k | v, with a relative-position bias
 * whose buckets repeat, bidirectional (an encoder's) and causal (a
 * decoder's) */
Test(kern_t5, self_attention_with_bias)
{
    for (int causal = 0; causal < 2; causal++)
        for (int th = 1; th <= 3; th += 2) {
            kern_set_threads(th);
            prob p = {.B = 2, .Tq = 4, .Tk = 4, .NH = 3, .hs = 2, .lq = 18,
                      .lk = 18, .ko = 6, .vo = 12, .NB = 5, .causal = causal,
                      .fused = 1, .scale = 1};
            check_prob(&p, 2 + causal);
        }
    kern_set_threads(1);
}

/* A head wider than hidden / heads (T5-3B's 32 heads of 128 over 1024) is
 * only the sizes: q of ld NH hs */
Test(kern_t5, wide_heads_and_scale)
{
    prob p = {.B = 1, .Tq = 3, .Tk = 2, .NH = 2, .hs = 5, .lq = 10,
              .lk = 20, .vo = 10, .NB = 3, .scale = 0.5f};
    check_prob(&p, 9);
}

/* In GPT's shape the kernels run GPT's three ops' products and rows: the
 * same bits */
Test(kern_t5, gpt_shape_is_gpt_attention)
{
    int B = 2, T = 7, C = 12, NH = 3, hs = C / NH;
    for (int causal = 0; causal < 2; causal++) {
        rs = 77 + (uint64_t)causal;
        size_t nqk = (size_t)B * T * 3 * C, na = (size_t)B * NH * T * T,
               n = (size_t)B * T * C;
        float *qkv = rnd(nqk), *g = rnd(n);
        float *pre = calloc(na, 4), *att = calloc(na, 4), *out = calloc(n, 4);
        float *pre2 = calloc(na, 4), *att2 = calloc(na, 4),
              *out2 = calloc(n, 4);
        kern_attn_scores_forward(pre, qkv, B, T, C, NH);
        kern_attn_softmax_forward(att, pre, B, T, NH, causal);
        kern_attn_context_forward(out, att, qkv, B, T, C, NH);
        float sc = 1.0f / sqrtf((float)hs);
        kern_attnx_scores_forward(pre2, qkv, qkv + C, 3 * C, 3 * C, B, T, T,
                                  NH, hs, sc);
        kern_attnx_softmax_forward(att2, pre2, NULL, NULL, B, NH, T, T,
                                   causal);
        kern_attnx_context_forward(out2, att2, qkv + 2 * C, 3 * C, B, T, T,
                                   NH, hs);
        cr_assert(!memcmp(att, att2, na * 4));
        cr_assert(!memcmp(out, out2, n * 4));
        float *datt = calloc(na, 4), *dpre = calloc(na, 4),
              *dq = calloc(nqk, 4);
        kern_attn_context_backward(datt, dq, g, att, qkv, B, T, C, NH);
        kern_attn_softmax_backward(dpre, datt, att, B, T, NH, causal);
        kern_attn_scores_backward(dq, dpre, qkv, B, T, C, NH);
        float *datt2 = calloc(na, 4), *dpre2 = calloc(na, 4),
              *dq2 = calloc(nqk, 4);
        kern_attnx_context_backward(datt2, dq2 + 2 * C, g, att2, qkv + 2 * C,
                                    3 * C, B, T, T, NH, hs);
        kern_attnx_softmax_backward(dpre2, datt2, att2, B, NH, T, T, causal);
        kern_attnx_scores_backward(dq2, dq2 + C, dpre2, qkv, qkv + C, 3 * C,
                                   3 * C, B, T, T, NH, hs, sc);
        cr_assert(!memcmp(dpre, dpre2, na * 4));
        cr_assert(!memcmp(dq, dq2, nqk * 4));
        free(qkv); free(g); free(pre); free(att); free(out); free(pre2);
        free(att2); free(out2); free(datt); free(dpre); free(dq);
        free(datt2); free(dpre2); free(dq2);
    }
}

Test(kern_t5, scale_add)
{
    float acc[5] = {1, 2, 3, 4, 5}, src[5] = {2, 4, 6, 8, 10};
    kern_scale_add(acc, src, 0.5f, 5);
    for (int i = 0; i < 5; i++) cr_assert_eq(acc[i], 2.0f * (float)(i + 1));
}
