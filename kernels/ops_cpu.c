/* The CPU backend of KERN_OPS: plain C loops for the memory-bound ops,
 * OpenBLAS sgemm for every matrix product (the linear layers and the
 * products per head inside attention). This is the oracle the CUDA
 * backend is checked against, and what the CPU trainer runs. Each op
 * splits its rows (or heads, or columns) over the pool's threads; parts
 * write disjoint outputs, so no op needs a lock. */
#include "kernels/kernels.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/kern_math.h"
#include "kernels/kern_cpu.h"


/* ---------------------------------------------------------------- embed */

static void embed_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    for (size_t r = lo; r < hi; r++) {
        float *o = a->out + r * a->C;
        const float *we = a->in + (size_t)a->tok[r] * a->C;
        if (!a->in2) {
            memcpy(o, we, sizeof *o * (size_t)a->C);
            continue;
        }
        const float *pe = a->in2 + (r % (size_t)a->T) * a->C;
        for (int c = 0; c < a->C; c++) o[c] = we[c] + pe[c];
    }
}

void kern_embed_forward(float *out, const int *tokens, const float *wte,
                        const float *wpe, int B, int T, int C)
{
    kargs a = {.out = out, .in = wte, .in2 = wpe, .tok = tokens, .B = B,
               .T = T, .C = C, .N = B * T};
    kern_parallel(embed_fwd_part, &a);
}

/* Serial: rows scatter into token rows that repeat; it is a small op. */
void kern_embed_backward(float *dwte, float *dwpe, const float *dout,
                         const int *tokens, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *we = dwte + (size_t)tokens[b * T + t] * C;
            for (int c = 0; c < C; c++) we[c] += d[c];
            if (!dwpe) continue;
            float *pe = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) pe[c] += d[c];
        }
}

/* --------------------------------------------------------------- linear */

static void lin_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    if (hi == lo) return;
    int C = a->C, OC = a->OC;
    float *out = a->out + lo * OC;
    float beta = 0.0f;
    if (a->in3) {
        for (size_t i = lo; i < hi; i++)
            memcpy(a->out + i * OC, a->in3, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(hi - lo), OC,
                C, 1.0f, a->in + lo * C, C, a->in2, C, beta, out, OC);
}

void kern_linear_forward(float *out, const float *inp, const float *w,
                         const float *b, int N, int C, int OC)
{
    kargs a = {.out = out, .in = inp, .in2 = w, .in3 = b, .N = N, .C = C,
               .OC = OC};
    kern_parallel(lin_fwd_part, &a);
}

static void lin_bwd_in_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->N, part, np, lo, hi);
    if (hi == lo) return;
    int C = a->C, OC = a->OC;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(hi - lo), C,
                OC, 1.0f, a->in + lo * OC, OC, a->in2, C, 1.0f,
                a->out + lo * C, C);
}

void kern_linear_backward_input(float *dinp, const float *dout,
                                const float *w, int N, int C, int OC)
{
    kargs a = {.out = dinp, .in = dout, .in2 = w, .N = N, .C = C, .OC = OC};
    kern_parallel(lin_bwd_in_part, &a);
}

/* Split by output channel: rows [lo, hi) of dw and entries of db. */
static void lin_bwd_w_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->OC, part, np, lo, hi);
    if (hi == lo) return;
    int C = a->C, OC = a->OC, N = a->N;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(hi - lo), C, N,
                1.0f, a->in + lo, OC, a->in2, C, 1.0f, a->out + lo * C, C);
    if (a->out2)
        for (int i = 0; i < N; i++) {
            const float *d = a->in + (size_t)i * OC;
            for (size_t o = lo; o < hi; o++) a->out2[o] += d[o];
        }
}

void kern_linear_backward_weight(float *dw, float *db, const float *dout,
                                 const float *inp, int N, int C, int OC)
{
    kargs a = {.out = dw, .out2 = db, .in = dout, .in2 = inp, .N = N, .C = C,
               .OC = OC};
    kern_parallel(lin_bwd_w_part, &a);
}

void kern_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, int N, int C,
                          int OC)
{
    kern_linear_backward_input(dinp, dout, w, N, C, OC);
    kern_linear_backward_weight(dw, db, dout, inp, N, C, OC);
}

/* ------------------------------------------------------------ attention */

/* The products of one (batch, head) pair, shared by the fused op and the
 * three-op split, so both run the same sgemm calls in the same order and
 * give the same bits. Q, K, V of head h sit at columns h*hs of q | k | v
 * in qkv(B,T,3C); a pair's T x T scores or probabilities at bh*T*T. */
typedef struct head {
    int T, hs, C, C3;
    size_t qkv_off, out_off, sq_off; /* q of the pair; its output; T x T */
    float scale;
} head;

static head head_of(const kargs *a, size_t bh)
{
    head h;
    h.T = a->T;
    h.C = a->C;
    h.C3 = 3 * a->C;
    h.hs = a->C / a->NH;
    size_t b = bh / (size_t)a->NH, hh = bh % (size_t)a->NH;
    h.qkv_off = b * (size_t)h.T * h.C3 + hh * h.hs;
    h.out_off = b * (size_t)h.T * h.C + hh * h.hs;
    h.sq_off = bh * (size_t)h.T * h.T;
    h.scale = 1.0f / sqrtf((float)h.hs);
    return h;
}

/* S = scale Q K^T over the whole T x T square (the masked half is computed
 * and thrown away: at these sizes one large product beats T small ones) */
static void head_scores(const head *h, const float *qkv, float *s)
{
    const float *q = qkv + h->qkv_off;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, h->T, h->T, h->hs,
                h->scale, q, h->C3, q + h->C, h->C3, 0.0f, s, h->T);
}

/* O = P V */
static void head_context(const head *h, const float *p, const float *qkv,
                         float *out)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, h->T, h->hs, h->T,
                1.0f, p, h->T, qkv + h->qkv_off + 2 * h->C, h->C3, 0.0f, out,
                h->C);
}

/* dP = dO V^T (beta 1: added into dp), dV += P^T dO */
static void head_context_bwd(const head *h, const float *dout, const float *p,
                             const float *qkv, float *dp, float beta,
                             float *dqkv)
{
    const float *dO = dout + h->out_off;
    size_t v = h->qkv_off + 2 * h->C;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, h->T, h->T, h->hs,
                1.0f, dO, h->C, qkv + v, h->C3, beta, dp, h->T);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, h->T, h->hs, h->T,
                1.0f, p, h->T, dO, h->C, 1.0f, dqkv + v, h->C3);
}

/* dQ += scale dS K; dK += scale dS^T Q */
static void head_scores_bwd(const head *h, const float *ds, const float *qkv,
                            float *dqkv)
{
    const float *q = qkv + h->qkv_off;
    float *dq = dqkv + h->qkv_off;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, h->T, h->hs, h->T,
                h->scale, ds, h->T, q + h->C, h->C3, 1.0f, dq, h->C3);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, h->T, h->hs, h->T,
                h->scale, ds, h->T, q, h->C3, 1.0f, dq + h->C, h->C3);
}

/* Per (b, h): scores, a softmax per row (causal: over keys 0..t), context.
 * The masked entries of att are stored as exact zeros, which the backward
 * relies on. Parts take whole (b, h) pairs. */
static void attn_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    const kern_rows *rows = kern_cpu_rows();
    KERN_SPLIT((size_t)a->B * a->NH, part, np, lo, hi);
    for (size_t bh = lo; bh < hi; bh++) {
        head h = head_of(a, bh);
        float *att = a->out2 + h.sq_off;
        head_scores(&h, a->in, att);
        for (int t = 0; t < h.T; t++)
            rows->softmax_row(att + (size_t)t * h.T, a->causal ? t + 1 : h.T,
                              h.T);
        head_context(&h, att, a->in, a->out + h.out_off);
    }
}

void kern_attention_forward(float *out, float *att, const float *qkv, int B,
                            int T, int C, int NH, int causal)
{
    kargs a = {.out = out, .out2 = att, .in = qkv, .B = B, .T = T, .C = C,
               .NH = NH, .causal = causal};
    kern_parallel(attn_fwd_part, &a);
}

/* dP = dO V^T; dV += P^T dO; dS = P (dP - rowsum(P dP)); dQ += scale dS K;
 * dK += scale dS^T Q. Masked entries of P are zero, so dS is zero there
 * whatever dP holds. */
static void attn_bwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    const kern_rows *rows = kern_cpu_rows();
    KERN_SPLIT((size_t)a->B * a->NH, part, np, lo, hi);
    for (size_t bh = lo; bh < hi; bh++) {
        head h = head_of(a, bh);
        const float *pr = a->in3 + h.sq_off;
        float *ds = a->out2 + h.sq_off;
        head_context_bwd(&h, a->in, pr, a->in2, ds, 0.0f, a->out);
        for (int t = 0; t < h.T; t++)
            rows->softmax_row_backward(ds + (size_t)t * h.T,
                                       pr + (size_t)t * h.T,
                                       a->causal ? t + 1 : h.T, h.T);
        head_scores_bwd(&h, ds, a->in2, a->out);
    }
}

void kern_attention_backward(float *dqkv, float *scratch, const float *dout,
                             const float *qkv, const float *att, int B, int T,
                             int C, int NH, int causal)
{
    kargs a = {.out = dqkv, .out2 = scratch, .in = dout, .in2 = qkv,
               .in3 = att, .B = B, .T = T, .C = C, .NH = NH,
               .causal = causal};
    kern_parallel(attn_bwd_part, &a);
}

/* The three-op attention: the per-pair products above, one op each. The
 * backward keeps the fused op's masking argument: att is zero above the
 * diagonal, so the softmax gradient is zero there whatever datt holds. */
static void scores_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT((size_t)a->B * a->NH, part, np, lo, hi);
    for (size_t bh = lo; bh < hi; bh++) {
        head h = head_of(a, bh);
        head_scores(&h, a->in, a->out + h.sq_off);
    }
}

void kern_attn_scores_forward(float *preatt, const float *qkv, int B, int T,
                              int C, int NH)
{
    kargs a = {.out = preatt, .in = qkv, .B = B, .T = T, .C = C, .NH = NH};
    kern_parallel(scores_fwd_part, &a);
}

static void softmax_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    const kern_rows *rows = kern_cpu_rows();
    size_t T = (size_t)a->T;
    KERN_SPLIT((size_t)a->B * a->NH * T, part, np, lo, hi);
    for (size_t r = lo; r < hi; r++) {
        float *row = a->out + r * T;
        if (row != a->in + r * T) memcpy(row, a->in + r * T, T * sizeof *row);
        rows->softmax_row(row, a->causal ? (int)(r % T) + 1 : (int)T, (int)T);
    }
}

void kern_attn_softmax_forward(float *att, const float *preatt, int B, int T,
                               int NH, int causal)
{
    kargs a = {.out = att, .in = preatt, .B = B, .T = T, .NH = NH,
               .causal = causal};
    kern_parallel(softmax_fwd_part, &a);
}

static void context_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT((size_t)a->B * a->NH, part, np, lo, hi);
    for (size_t bh = lo; bh < hi; bh++) {
        head h = head_of(a, bh);
        head_context(&h, a->in + h.sq_off, a->in2, a->out + h.out_off);
    }
}

void kern_attn_context_forward(float *out, const float *att, const float *qkv,
                               int B, int T, int C, int NH)
{
    kargs a = {.out = out, .in = att, .in2 = qkv, .B = B, .T = T, .C = C,
               .NH = NH};
    kern_parallel(context_fwd_part, &a);
}

static void context_bwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT((size_t)a->B * a->NH, part, np, lo, hi);
    for (size_t bh = lo; bh < hi; bh++) {
        head h = head_of(a, bh);
        head_context_bwd(&h, a->in, a->in2 + h.sq_off, a->in3,
                         a->out + h.sq_off, 1.0f, a->out2);
    }
}

void kern_attn_context_backward(float *datt, float *dqkv, const float *dout,
                                const float *att, const float *qkv, int B,
                                int T, int C, int NH)
{
    kargs a = {.out = datt, .out2 = dqkv, .in = dout, .in2 = att, .in3 = qkv,
               .B = B, .T = T, .C = C, .NH = NH};
    kern_parallel(context_bwd_part, &a);
}

static void softmax_bwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    const kern_rows *rows = kern_cpu_rows();
    size_t T = (size_t)a->T;
    KERN_SPLIT((size_t)a->B * a->NH * T, part, np, lo, hi);
    for (size_t r = lo; r < hi; r++) {
        float *dr = a->out2 + r * T, *dp = a->out + r * T;
        rows->softmax_row_backward(dr, a->in + r * T,
                                   a->causal ? (int)(r % T) + 1 : (int)T,
                                   (int)T);
        for (size_t j = 0; j < T; j++) dp[j] += dr[j];
    }
}

void kern_attn_softmax_backward(float *dpreatt, float *datt, const float *att,
                                int B, int T, int NH, int causal)
{
    kargs a = {.out = dpreatt, .out2 = datt, .in = att, .B = B, .T = T,
               .NH = NH, .causal = causal};
    kern_parallel(softmax_bwd_part, &a);
}

static void scores_bwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT((size_t)a->B * a->NH, part, np, lo, hi);
    for (size_t bh = lo; bh < hi; bh++) {
        head h = head_of(a, bh);
        head_scores_bwd(&h, a->in + h.sq_off, a->in2, a->out);
    }
}

void kern_attn_scores_backward(float *dqkv, const float *dpreatt,
                               const float *qkv, int B, int T, int C, int NH)
{
    kargs a = {.out = dqkv, .in = dpreatt, .in2 = qkv, .B = B, .T = T,
               .C = C, .NH = NH};
    kern_parallel(scores_bwd_part, &a);
}

/* ------------------------------------------------- element-wise, loss */

static void relu_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->n, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++)
        a->out[i] = a->in[i] > 0.0f ? a->in[i] : 0.0f;
}

void kern_relu_forward(float *out, const float *inp, size_t n)
{
    kargs k = {.out = out, .in = inp, .n = n};
    kern_parallel(relu_fwd_part, &k);
}

static void tanh_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->n, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++) a->out[i] = tanhf(a->in[i]);
}

void kern_tanh_forward(float *out, const float *inp, size_t n)
{
    kargs k = {.out = out, .in = inp, .n = n};
    kern_parallel(tanh_fwd_part, &k);
}

static void relu_bwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->n, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++)
        if (a->in[i] > 0.0f) a->out[i] += a->in2[i];
}

void kern_relu_backward(float *dinp, const float *inp, const float *dout,
                        size_t n)
{
    kargs k = {.out = dinp, .in = inp, .in2 = dout, .n = n};
    kern_parallel(relu_bwd_part, &k);
}

static void res_fwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->n, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++) a->out[i] = a->in[i] + a->in2[i];
}

void kern_residual_forward(float *out, const float *a, const float *b,
                           size_t n)
{
    kargs k = {.out = out, .in = a, .in2 = b, .n = n};
    kern_parallel(res_fwd_part, &k);
}

static void res_bwd_part(void *p, int part, int np)
{
    const kargs *a = p;
    KERN_SPLIT(a->n, part, np, lo, hi);
    for (size_t i = lo; i < hi; i++) {
        a->out[i] += a->in[i];
        a->out2[i] += a->in[i];
    }
}

void kern_residual_backward(float *da, float *db, const float *dout, size_t n)
{
    kargs k = {.out = da, .out2 = db, .in = dout, .n = n};
    kern_parallel(res_bwd_part, &k);
}

/* ------------------------------------------------------------ optimizer */

/* Serial, in double: the clipping decision must not depend on threads. */
void kern_norm_sq(float *out, const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    out[0] = (float)s;
}

/* ---------------------------------------------------------- the op list */

const kern_table kern_cpu = {
#define KERN_X_CPU(name, kind, args) kern_##name,
    KERN_OPS(KERN_X_CPU)
#undef KERN_X_CPU
};

const char *kern_op_name(kern_op op)
{
    static const char *const names[] = {
#define KERN_X_NAME(name, kind, args) #name,
        KERN_OPS(KERN_X_NAME)
#undef KERN_X_NAME
    };
    return (unsigned)op < KERN_OP_COUNT ? names[op] : "?";
}

kern_kind kern_op_kind(kern_op op)
{
    static const kern_kind kinds[] = {
#define KERN_X_KIND(name, kind, args) KERN_KIND_##kind,
        KERN_OPS(KERN_X_KIND)
#undef KERN_X_KIND
    };
    return (unsigned)op < KERN_OP_COUNT ? kinds[op] : KERN_KIND_COUNT;
}

const char *kern_kind_name(kern_kind k)
{
    static const char *const names[] = {"embed", "norm",     "linear",
                                        "attn",  "act",      "residual",
                                        "loss",  "optimizer"};
    return (unsigned)k < KERN_KIND_COUNT ? names[k] : "?";
}
