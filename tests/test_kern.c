/* kernels: every CPU op against a float64 reference written here as naive
 * loops, and every backward against central finite differences of that
 * float64 reference, on fresh random non-zero inputs of several shapes.
 *
 * Tolerances (fp32 kernels, inputs of magnitude 0.1..1):
 *   forward:  |got - ref| <= 2e-5 + 2e-4 |ref|  (fp32 rounding over sums of
 *             up to a few dozen terms, plus the 3e-7 of kern_expf)
 *   backward: |got - fd|  <= 1e-4 + 1e-3 |fd|   (fd in float64 with h=1e-5:
 *             its own error is ~1e-9, the rest is fp32 accumulation)
 * Backward outputs start from random values, not zeros, so the tests also
 * check that backward adds into its outputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kern_math.h"
#include "kernels/kernels.h"

#define FWD_ATOL 2e-5
#define FWD_RTOL 2e-4
#define BWD_ATOL 1e-4
#define BWD_RTOL 1e-3
#define FD_H 1e-5

/* ------------------------------------------------------------ helpers */

static uint64_t rng_state;

static void rng_seed(uint64_t s) { rng_state = s * 0x9E3779B97F4A7C15ull + 1; }

static double rng_unit(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* Uniform in [-1, -0.1] U [0.1, 1]: never zero, never tiny. */
static float *rnd(size_t n)
{
    float *x = malloc(n * sizeof *x + 1);
    for (size_t i = 0; i < n; i++) {
        double u = 0.1 + 0.9 * rng_unit();
        x[i] = (float)(rng_unit() < 0.5 ? -u : u);
    }
    return x;
}

static int *rnd_tokens(size_t n, int V)
{
    int *t = malloc(n * sizeof *t + 1);
    for (size_t i = 0; i < n; i++) t[i] = (int)(rng_unit() * V) % V;
    return t;
}

static double *to_d(const float *x, size_t n)
{
    double *d = malloc(n * sizeof *d + 1);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

static float *copy_f(const float *x, size_t n)
{
    float *c = malloc(n * sizeof *c + 1);
    memcpy(c, x, n * sizeof *c);
    return c;
}

static void check(const char *what, const float *got, const double *want,
                  size_t n, double atol, double rtol)
{
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        cr_assert(err <= atol + rtol * fabs(want[i]),
                  "%s[%zu]: got %.9g, want %.9g (err %.3g)", what, i,
                  (double)got[i], want[i], err);
    }
}

/* got is a gradient buffer that started as `init`: compares got - init. */
static void check_grad(const char *what, const float *got, const float *init,
                       const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double g = (double)got[i] - (double)init[i];
        double err = fabs(g - want[i]);
        cr_assert(err <= BWD_ATOL + BWD_RTOL * fabs(want[i]),
                  "%s[%zu]: got %.9g, want %.9g (err %.3g)", what, i, g,
                  want[i], err);
    }
}

/* The scalar a finite difference differentiates: sum(g * f(inputs)). */
typedef double (*loss_fn)(void *ctx);

static double *fd(loss_fn f, void *ctx, double *x, size_t n)
{
    double *grad = malloc(n * sizeof *grad + 1);
    for (size_t i = 0; i < n; i++) {
        double s = x[i];
        x[i] = s + FD_H;
        double lp = f(ctx);
        x[i] = s - FD_H;
        double lm = f(ctx);
        x[i] = s;
        grad[i] = (lp - lm) / (2 * FD_H);
    }
    return grad;
}

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Runs body once per instruction-set build of the row kernels this CPU
 * can run ("base" always; "avx2" where the CPU has AVX2 and FMA). */
static void each_isa(void (*body)(void))
{
    const char *isas[] = {"base", "avx2"};
    for (int i = 0; i < 2; i++) {
        if (kern_set_isa(isas[i])) continue;
        cr_assert_str_eq(kern_get_isa(), isas[i]);
        body();
    }
    kern_set_isa("avx2");
}

/* ------------------------------------------------- float64 references */

static void ref_embed(double *out, const int *tok, const double *wte,
                      const double *wpe, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[(b * T + t) * C + c] =
                    wte[tok[b * T + t] * C + c] + wpe[t * C + c];
}

static void ref_layernorm(double *out, const double *x, const double *w,
                          const double *b, int N, int C, double eps)
{
    for (int i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[i * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[i * C + c] - m) * (x[i * C + c] - m);
        v /= C;
        double s = 1.0 / sqrt(v + eps);
        for (int c = 0; c < C; c++)
            out[i * C + c] = (x[i * C + c] - m) * s * w[c] + (b ? b[c] : 0);
    }
}

static void ref_linear(double *out, const double *x, const double *w,
                       const double *b, int N, int C, int OC)
{
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0;
            for (int c = 0; c < C; c++) s += x[i * C + c] * w[o * C + c];
            out[i * OC + o] = s;
        }
}

static void ref_attention(double *out, const double *qkv, int B, int T, int C,
                          int NH, int causal)
{
    int hs = C / NH;
    double *sc = malloc((size_t)T * sizeof *sc);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                int n = causal ? t + 1 : T;
                for (int j = 0; j < n; j++) {
                    const double *k = qkv + (b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    sc[j] = s / sqrt((double)hs);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < n; j++) {
                    sc[j] = exp(sc[j] - mx);
                    sum += sc[j];
                }
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int j = 0; j < n; j++)
                        o += sc[j] / sum *
                             qkv[(b * T + j) * 3 * C + 2 * C + h * hs + i];
                    out[(b * T + t) * C + h * hs + i] = o;
                }
            }
    free(sc);
}

static double ref_gelu(double x)
{
    return 0.5 * x *
           (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void ref_xent(double *loss, const double *logits, const int *tgt,
                     int N, int V)
{
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, logits[i * V + j]);
        for (int j = 0; j < V; j++) s += exp(logits[i * V + j] - mx);
        /* a target below 0 is none: no loss */
        loss[i] = tgt[i] < 0 ? 0 : log(s) + mx - logits[i * V + tgt[i]];
    }
}

/* ------------------------------------------------------------- embed */

typedef struct {
    int B, T, C;
    const int *tok;
    double *wte, *wpe, *g, *out;
} embed_ctx;

static double embed_loss(void *p)
{
    embed_ctx *c = p;
    ref_embed(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
    return dot(c->out, c->g, (size_t)c->B * c->T * c->C);
}

Test(kern, embed)
{
    const int shapes[][4] = {{1, 1, 4, 3}, {2, 5, 8, 4}, {3, 7, 12, 9}};
    for (int s = 0; s < 3; s++) {
        rng_seed(100 + s);
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2],
            V = shapes[s][3];
        size_t n = (size_t)B * T * C;
        int *tok = rnd_tokens((size_t)B * T, V);
        float *wte = rnd((size_t)V * C), *wpe = rnd((size_t)T * C);
        float *out = rnd(n), *g = rnd(n);
        embed_ctx c = {B, T, C, tok, to_d(wte, (size_t)V * C),
                       to_d(wpe, (size_t)T * C), to_d(g, n),
                       malloc(n * sizeof(double))};
        kern_embed_forward(out, tok, wte, wpe, B, T, C);
        embed_loss(&c);
        check("embed.out", out, c.out, n, FWD_ATOL, FWD_RTOL);
        float *dwte = rnd((size_t)V * C), *dwpe = rnd((size_t)T * C);
        float *dwte0 = copy_f(dwte, (size_t)V * C);
        float *dwpe0 = copy_f(dwpe, (size_t)T * C);
        kern_embed_backward(dwte, dwpe, g, tok, B, T, C);
        double *fte = fd(embed_loss, &c, c.wte, (size_t)V * C);
        double *fpe = fd(embed_loss, &c, c.wpe, (size_t)T * C);
        check_grad("embed.dwte", dwte, dwte0, fte, (size_t)V * C);
        check_grad("embed.dwpe", dwpe, dwpe0, fpe, (size_t)T * C);
        free(tok); free(wte); free(wpe); free(out); free(g); free(c.wte);
        free(c.wpe); free(c.g); free(c.out); free(dwte); free(dwpe);
        free(dwte0); free(dwpe0); free(fte); free(fpe);
    }
}

/* --------------------------------------------------------- layernorm */

typedef struct {
    int N, C;
    double *x, *w, *b, *g, *out, eps;
} ln_ctx;

static double ln_loss(void *p)
{
    ln_ctx *c = p;
    ref_layernorm(c->out, c->x, c->w, c->b, c->N, c->C, c->eps);
    return dot(c->out, c->g, (size_t)c->N * c->C);
}

/* GPT-2's epsilon, then BERT's (1e-12) */
static void layernorm_body(void)
{
    const int shapes[][2] = {{1, 4}, {5, 8}, {9, 33}, {7, 16}};
    for (int s = 0; s < 4; s++) {
        rng_seed(200 + s);
        int N = shapes[s][0], C = shapes[s][1];
        float eps = s == 3 ? 1e-12f : KERN_LN_EPS;
        size_t n = (size_t)N * C;
        float *x = rnd(n), *w = rnd(C), *b = rnd(C), *g = rnd(n);
        float *out = rnd(n), *mean = rnd(N), *rstd = rnd(N);
        ln_ctx c = {N, C, to_d(x, n), to_d(w, C), to_d(b, C), to_d(g, n),
                    malloc(n * sizeof(double)), eps};
        kern_layernorm_forward(out, mean, rstd, x, w, b, N, C, eps);
        ln_loss(&c);
        check("layernorm.out", out, c.out, n, FWD_ATOL, FWD_RTOL);
        float *dx = rnd(n), *dw = rnd(C), *db = rnd(C);
        float *dx0 = copy_f(dx, n), *dw0 = copy_f(dw, C), *db0 = copy_f(db, C);
        kern_layernorm_backward(dx, dw, db, g, x, w, mean, rstd, N, C);
        double *fx = fd(ln_loss, &c, c.x, n), *fw = fd(ln_loss, &c, c.w, C),
               *fb = fd(ln_loss, &c, c.b, C);
        check_grad("layernorm.dinp", dx, dx0, fx, n);
        check_grad("layernorm.dw", dw, dw0, fw, C);
        check_grad("layernorm.db", db, db0, fb, C);
        /* The split parts, weight first, give the same bits. */
        float *sx = copy_f(dx0, n), *sw = copy_f(dw0, C), *sb = copy_f(db0, C);
        kern_layernorm_backward_weight(sw, sb, g, x, mean, rstd, N, C);
        kern_layernorm_backward_input(sx, g, x, w, mean, rstd, N, C);
        cr_assert(!memcmp(sx, dx, n * sizeof *sx));
        cr_assert(!memcmp(sw, dw, C * sizeof *sw));
        cr_assert(!memcmp(sb, db, C * sizeof *sb));
        free(x); free(w); free(b); free(g); free(out); free(mean); free(rstd);
        free(c.x); free(c.w); free(c.b); free(c.g); free(c.out);
        free(dx); free(dw); free(db); free(dx0); free(dw0); free(db0);
        free(fx); free(fw); free(fb); free(sx); free(sw); free(sb);
    }
}

/* Both builds of the row kernels (kern_get_isa), each against float64. */
Test(kern, layernorm)
{
    each_isa(layernorm_body);
}

/* ------------------------------------------------------------ linear */

typedef struct {
    int N, C, OC;
    double *x, *w, *b, *g, *out;
} lin_ctx;

static double lin_loss(void *p)
{
    lin_ctx *c = p;
    ref_linear(c->out, c->x, c->w, c->b, c->N, c->C, c->OC);
    return dot(c->out, c->g, (size_t)c->N * c->OC);
}

Test(kern, linear)
{
    const int shapes[][3] = {{1, 3, 2}, {5, 8, 6}, {17, 16, 33}, {4, 24, 7}};
    for (int s = 0; s < 4; s++) {
        rng_seed(300 + s);
        int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        int bias = s != 3; /* the last shape runs without a bias */
        size_t nx = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
        float *x = rnd(nx), *w = rnd(nw), *b = bias ? rnd(OC) : NULL;
        float *g = rnd(no), *out = rnd(no);
        lin_ctx c = {N, C, OC, to_d(x, nx), to_d(w, nw),
                     bias ? to_d(b, OC) : NULL, to_d(g, no),
                     malloc(no * sizeof(double))};
        kern_linear_forward(out, x, w, b, N, C, OC);
        lin_loss(&c);
        check("linear.out", out, c.out, no, FWD_ATOL, FWD_RTOL);
        float *dx = rnd(nx), *dw = rnd(nw), *db = bias ? rnd(OC) : NULL;
        float *dx0 = copy_f(dx, nx), *dw0 = copy_f(dw, nw);
        float *db0 = bias ? copy_f(db, OC) : NULL;
        kern_linear_backward(dx, dw, db, g, x, w, N, C, OC);
        double *fx = fd(lin_loss, &c, c.x, nx), *fw = fd(lin_loss, &c, c.w, nw);
        check_grad("linear.dinp", dx, dx0, fx, nx);
        check_grad("linear.dw", dw, dw0, fw, nw);
        if (bias) {
            double *fb = fd(lin_loss, &c, c.b, OC);
            check_grad("linear.db", db, db0, fb, OC);
            free(fb);
        }
        float *sx = copy_f(dx0, nx), *sw = copy_f(dw0, nw);
        float *sb = bias ? copy_f(db0, OC) : NULL;
        kern_linear_backward_weight(sw, sb, g, x, N, C, OC);
        kern_linear_backward_input(sx, g, w, N, C, OC);
        cr_assert(!memcmp(sx, dx, nx * sizeof *sx));
        cr_assert(!memcmp(sw, dw, nw * sizeof *sw));
        if (bias) cr_assert(!memcmp(sb, db, OC * sizeof *sb));
        free(x); free(w); free(b); free(g); free(out); free(c.x); free(c.w);
        free(c.b); free(c.g); free(c.out); free(dx); free(dw); free(db);
        free(dx0); free(dw0); free(db0); free(fx); free(fw); free(sx);
        free(sw); free(sb);
    }
}

/* --------------------------------------------------------- attention */

typedef struct {
    int B, T, C, NH, causal;
    double *qkv, *g, *out;
} att_ctx;

static double att_loss(void *p)
{
    att_ctx *c = p;
    ref_attention(c->out, c->qkv, c->B, c->T, c->C, c->NH, c->causal);
    return dot(c->out, c->g, (size_t)c->B * c->T * c->C);
}

/* A decoder's causal attention and an encoder's (BERT) over every key. */
static void attention_body(void)
{
    const int shapes[][4] = {{1, 1, 4, 1}, {2, 5, 8, 2}, {2, 9, 12, 3},
                             {1, 16, 16, 4}};
    for (int s = 0; s < 8; s++) {
        int causal = s < 4;
        rng_seed(400 + s % 4 + 10 * !causal);
        int B = shapes[s % 4][0], T = shapes[s % 4][1], C = shapes[s % 4][2],
            NH = shapes[s % 4][3];
        size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C,
               na = (size_t)B * NH * T * T;
        float *qkv = rnd(nq), *g = rnd(no), *out = rnd(no), *att = rnd(na);
        float *scratch = rnd(na);
        att_ctx c = {B, T, C, NH, causal, to_d(qkv, nq), to_d(g, no),
                     malloc(no * sizeof(double))};
        kern_attention_forward(out, att, qkv, B, T, C, NH, causal);
        att_loss(&c);
        check("attention.out", out, c.out, no, FWD_ATOL, FWD_RTOL);
        /* Probabilities: rows sum to one; causal, the future is exactly
         * zero, else no key is */
        for (int r = 0; r < B * NH; r++)
            for (int t = 0; t < T; t++) {
                double sum = 0;
                for (int j = 0; j < T; j++) {
                    float p = att[((size_t)r * T + t) * T + j];
                    if (j > t && causal) cr_assert_eq(p, 0.0f);
                    if (!causal) cr_assert_gt(p, 0.0f);
                    sum += p;
                }
                cr_assert(fabs(sum - 1) < 1e-5);
            }
        float *dq = rnd(nq), *dq0 = copy_f(dq, nq);
        kern_attention_backward(dq, scratch, g, qkv, att, B, T, C, NH,
                                causal);
        double *fq = fd(att_loss, &c, c.qkv, nq);
        check_grad("attention.dqkv", dq, dq0, fq, nq);
        free(qkv); free(g); free(out); free(att); free(scratch); free(c.qkv);
        free(c.g); free(c.out); free(dq); free(dq0); free(fq);
    }
}

/* Both builds of the row kernels (kern_get_isa), each against float64. */
Test(kern, attention)
{
    each_isa(attention_body);
}

/* The three-op attention composes to the fused op bit for bit (same
 * sgemm calls and row kernels in the same order), with 1 and 3 threads
 * and both row-kernel builds; its backward ops add into their outputs. */
static void attn_split_body(void)
{
    const int shapes[][4] = {{1, 1, 4, 1}, {2, 5, 8, 2}, {2, 9, 12, 3},
                             {1, 16, 16, 4}};
    for (int th = 1; th <= 3; th += 2)
        for (int s = 0; s < 8; s++) {
            int causal = s < 4;
            kern_set_threads(th);
            rng_seed(450 + s);
            int B = shapes[s % 4][0], T = shapes[s % 4][1],
                C = shapes[s % 4][2], NH = shapes[s % 4][3];
            size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C,
                   na = (size_t)B * NH * T * T;
            float *qkv = rnd(nq), *g = rnd(no);
            float *out = calloc(no, 4), *att = calloc(na, 4);
            float *scr = calloc(na, 4), *dq = calloc(nq, 4);
            kern_attention_forward(out, att, qkv, B, T, C, NH, causal);
            kern_attention_backward(dq, scr, g, qkv, att, B, T, C, NH,
                                    causal);
            float *pre = rnd(na), *att2 = rnd(na), *out2 = rnd(no);
            kern_attn_scores_forward(pre, qkv, B, T, C, NH);
            kern_attn_softmax_forward(att2, pre, B, T, NH, causal);
            kern_attn_context_forward(out2, att2, qkv, B, T, C, NH);
            cr_assert(!memcmp(att, att2, na * 4), "softmax differs");
            cr_assert(!memcmp(out, out2, no * 4), "context differs");
            /* in place: preatt may be the softmax's output */
            kern_attn_softmax_forward(pre, pre, B, T, NH, causal);
            cr_assert(!memcmp(att, pre, na * 4), "in-place softmax differs");
            float *datt = calloc(na, 4), *dpre = calloc(na, 4);
            float *dq2 = calloc(nq, 4);
            kern_attn_context_backward(datt, dq2, g, att2, qkv, B, T, C, NH);
            kern_attn_softmax_backward(dpre, datt, att2, B, T, NH, causal);
            kern_attn_scores_backward(dq2, dpre, qkv, B, T, C, NH);
            cr_assert(!memcmp(dq, dq2, nq * 4), "dqkv differs (shape %d, "
                      "%d threads)", s, th);
            /* adding: a second pass doubles every gradient exactly */
            float *datt3 = calloc(na, 4), *dpre3 = copy_f(dpre, na);
            float *dq3 = copy_f(dq2, nq);
            kern_attn_context_backward(datt3, dq3, g, att2, qkv, B, T, C, NH);
            kern_attn_softmax_backward(dpre3, datt3, att2, B, T, NH,
                                       causal);
            for (size_t i = 0; i < na; i++)
                cr_assert_eq(dpre3[i], 2 * dpre[i]);
            kern_attn_scores_backward(dq3, dpre, qkv, B, T, C, NH);
            double *want = malloc(nq * sizeof *want);
            for (size_t i = 0; i < nq; i++) want[i] = 2.0 * dq2[i];
            check("attn split dqkv twice", dq3, want, nq, 1e-6, 1e-5);
            free(qkv); free(g); free(out); free(att); free(scr); free(dq);
            free(pre); free(att2); free(out2); free(datt); free(dpre);
            free(dq2); free(datt3); free(dpre3); free(dq3); free(want);
        }
    kern_set_threads(1);
}

Test(kern, attention_split)
{
    each_isa(attn_split_body);
}

/* ---------------------------------------------- gelu, residual, loss */

static void gelu_body(void)
{
    /* Wide range, including values where tanh saturates. */
    const size_t ns[] = {1, 7, 300};
    for (int s = 0; s < 3; s++) {
        rng_seed(500 + s);
        size_t n = ns[s];
        float *x = rnd(n), *g = rnd(n), *out = rnd(n);
        for (size_t i = 0; i < n; i++) x[i] *= (float)(1 + 6 * (i % 3));
        double *want = malloc(n * sizeof *want), *fx = malloc(n * sizeof *fx);
        for (size_t i = 0; i < n; i++) {
            want[i] = ref_gelu(x[i]);
            fx[i] = g[i] * (ref_gelu(x[i] + FD_H) - ref_gelu(x[i] - FD_H)) /
                    (2 * FD_H);
        }
        kern_gelu_forward(out, x, n);
        check("gelu.out", out, want, n, FWD_ATOL, FWD_RTOL);
        float *dx = rnd(n), *dx0 = copy_f(dx, n);
        kern_gelu_backward(dx, x, g, n);
        check_grad("gelu.dinp", dx, dx0, fx, n);
        free(x); free(g); free(out); free(want); free(fx); free(dx); free(dx0);
    }
}

/* Both builds of the row kernels (kern_get_isa), each against float64. */
Test(kern, gelu)
{
    each_isa(gelu_body);
}

static double ref_gelu_erf(double x)
{
    return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}

/* GELU's exact form (BERT's), against float64 and central differences;
 * it and the tanh form differ by up to about 5e-4 (so neither passes for
 * the other at 1e-6). */
static void gelu_erf_body(void)
{
    rng_seed(510);
    size_t n = 301;
    float *x = rnd(n), *g = rnd(n), *out = rnd(n), *tanh_form = rnd(n);
    for (size_t i = 0; i < n; i++) x[i] *= (float)(1 + 6 * (i % 3));
    double *want = malloc(n * sizeof *want), *fx = malloc(n * sizeof *fx);
    for (size_t i = 0; i < n; i++) {
        want[i] = ref_gelu_erf(x[i]);
        fx[i] = g[i] * (ref_gelu_erf(x[i] + FD_H) - ref_gelu_erf(x[i] - FD_H)) /
                (2 * FD_H);
    }
    kern_gelu_erf_forward(out, x, n);
    check("gelu_erf.out", out, want, n, FWD_ATOL, FWD_RTOL);
    kern_gelu_forward(tanh_form, x, n);
    double most = 0;
    for (size_t i = 0; i < n; i++)
        most = fmax(most, fabs((double)tanh_form[i] - out[i]));
    cr_expect(most > 1e-5 && most < 1e-3, "the forms differ by %g", most);
    float *dx = rnd(n), *dx0 = copy_f(dx, n);
    kern_gelu_erf_backward(dx, x, g, n);
    check_grad("gelu_erf.dinp", dx, dx0, fx, n);
    free(x); free(g); free(out); free(tanh_form); free(want); free(fx);
    free(dx); free(dx0);
}

/* Both builds of the row kernels (kern_get_isa). */
Test(kern, gelu_erf)
{
    each_isa(gelu_erf_body);
}

/* ReLU against its definition; the gradient by central differences away
 * from the kink (inputs at least 0.01 from 0), and exactly 0 at 0. */
Test(kern, relu)
{
    rng_seed(550);
    size_t n = 301;
    float *x = rnd(n), *g = rnd(n), *out = rnd(n);
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) < 0.01f) x[i] = i % 2 ? 0.5f : -0.5f;
    x[7] = 0.0f;
    double *want = malloc(n * sizeof *want), *fx = malloc(n * sizeof *fx);
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        want[i] = v > 0 ? v : 0;
        fx[i] = i == 7 ? 0
                       : g[i] * ((v + FD_H > 0 ? v + FD_H : 0) -
                                 (v - FD_H > 0 ? v - FD_H : 0)) /
                             (2 * FD_H);
    }
    kern_relu_forward(out, x, n);
    check("relu.out", out, want, n, 0, 0);
    float *dx = rnd(n), *dx0 = copy_f(dx, n);
    kern_relu_backward(dx, x, g, n);
    check_grad("relu.dinp", dx, dx0, fx, n);
    free(x); free(g); free(out); free(want); free(fx); free(dx); free(dx0);
}

Test(kern, residual)
{
    rng_seed(600);
    size_t n = 37;
    float *a = rnd(n), *b = rnd(n), *out = rnd(n), *g = rnd(n);
    double *want = malloc(n * sizeof *want), *gd = to_d(g, n);
    for (size_t i = 0; i < n; i++) want[i] = (double)a[i] + b[i];
    kern_residual_forward(out, a, b, n);
    check("residual.out", out, want, n, FWD_ATOL, FWD_RTOL);
    float *da = rnd(n), *db = rnd(n), *da0 = copy_f(da, n), *db0 = copy_f(db, n);
    kern_residual_backward(da, db, g, n);
    check_grad("residual.da", da, da0, gd, n);
    check_grad("residual.db", db, db0, gd, n);
    free(a); free(b); free(out); free(g); free(want); free(gd); free(da);
    free(db); free(da0); free(db0);
}

typedef struct {
    int N, V;
    const int *tgt;
    double *logits, *loss, scale;
} xent_ctx;

static double xent_loss(void *p)
{
    xent_ctx *c = p;
    ref_xent(c->loss, c->logits, c->tgt, c->N, c->V);
    double s = 0;
    for (int i = 0; i < c->N; i++) s += c->loss[i];
    return s * c->scale;
}

/* The last shape is a masked LM's: most rows have no target (-1), and
 * neither a loss nor a gradient. */
static void softmax_xent_body(void)
{
    const int shapes[][2] = {{1, 3}, {6, 11}, {9, 40}, {10, 13}};
    for (int s = 0; s < 4; s++) {
        rng_seed(700 + s);
        int N = shapes[s][0], V = shapes[s][1];
        size_t n = (size_t)N * V;
        float *logits = rnd(n), *probs = rnd(n), *loss = rnd(N);
        for (size_t i = 0; i < n; i++) logits[i] *= 8; /* peaked rows */
        int *tgt = rnd_tokens(N, V);
        for (int i = 0; s == 3 && i < N; i++)
            if (i % 3) tgt[i] = -1;
        xent_ctx c = {N, V, tgt, to_d(logits, n), malloc(N * sizeof(double)),
                      1.0 / N};
        kern_softmax_xent_forward(loss, probs, logits, tgt, N, V);
        xent_loss(&c);
        check("xent.loss", loss, c.loss, N, FWD_ATOL, FWD_RTOL);
        for (int i = 0; i < N; i++) {
            double sum = 0;
            for (int j = 0; j < V; j++) sum += probs[i * V + j];
            cr_assert(fabs(sum - 1) < 1e-5);
        }
        float *dl = rnd(n), *dl0 = copy_f(dl, n);
        kern_softmax_xent_backward(dl, probs, tgt, (float)(1.0 / N), N, V);
        double *fl = fd(xent_loss, &c, c.logits, n);
        check_grad("xent.dlogits", dl, dl0, fl, n);
        for (int i = 0; i < N; i++)
            if (tgt[i] < 0) {
                cr_assert_eq(loss[i], 0.0f);
                cr_assert(!memcmp(dl + (size_t)i * V, dl0 + (size_t)i * V,
                                  sizeof *dl * (size_t)V));
            }
        free(logits); free(probs); free(loss); free(tgt); free(c.logits);
        free(c.loss); free(dl); free(dl0); free(fl);
    }
}

/* Both builds of the row kernels (kern_get_isa), each against float64. */
Test(kern, softmax_xent)
{
    each_isa(softmax_xent_body);
}

/* ------------------------------------------ tensor-parallel vocabulary */

/* tp ranks of Vl = ceil(V/tp) rows each; the last shard is padded. */
static int shard_rows(int V, int r, int Vl)
{
    int lo = r * Vl;
    return lo >= V ? 0 : (V - lo < Vl ? V - lo : Vl);
}

/* The ranks' lookups add up to the embedding (each row comes from one
 * rank, zeros from the others), the position add completes it, and each
 * rank's backward gives its shard's rows of the full gradient. */
Test(kern, embed_shards)
{
    const int shapes[][5] = {{2, 5, 8, 9, 2}, {1, 7, 4, 10, 3},
                             {3, 4, 6, 5, 4}};
    for (int s = 0; s < 3; s++) {
        rng_seed(650 + s);
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2],
            V = shapes[s][3], tp = shapes[s][4], N = B * T;
        int Vl = (V + tp - 1) / tp;
        size_t n = (size_t)N * C, nw = (size_t)Vl * tp * C;
        int *tok = rnd_tokens((size_t)N, V);
        float *wte = rnd(nw), *wpe = rnd((size_t)T * C), *g = rnd(n);
        embed_ctx c = {B, T, C, tok, to_d(wte, (size_t)V * C),
                       to_d(wpe, (size_t)T * C), to_d(g, n),
                       malloc(n * sizeof(double))};
        embed_loss(&c);
        double *fte = fd(embed_loss, &c, c.wte, (size_t)V * C);
        double *fpe = fd(embed_loss, &c, c.wpe, (size_t)T * C);
        float *sum = calloc(n, sizeof *sum), *out = rnd(n);
        for (int r = 0; r < tp; r++) {
            const float *shard = wte + (size_t)r * Vl * C;
            kern_embed_shard_forward(out, tok, shard, r * Vl, Vl, N, C);
            for (size_t i = 0; i < n; i++) sum[i] += out[i];
            float *dwte = rnd((size_t)Vl * C), *dwpe = rnd((size_t)T * C);
            float *dwte0 = copy_f(dwte, (size_t)Vl * C);
            float *dwpe0 = copy_f(dwpe, (size_t)T * C);
            kern_embed_shard_backward(dwte, dwpe, g, tok, r * Vl, Vl, B, T,
                                      C);
            size_t rows = (size_t)shard_rows(V, r, Vl);
            check_grad("embed_shard.dwte", dwte, dwte0,
                       fte + (size_t)r * Vl * C, rows * C);
            for (size_t i = rows * C; i < (size_t)Vl * C; i++)
                cr_assert_eq(dwte[i], dwte0[i], "padding row changed");
            check_grad("embed_shard.dwpe", dwpe, dwpe0, fpe, (size_t)T * C);
            free(dwte); free(dwpe); free(dwte0); free(dwpe0);
        }
        kern_embed_pos_forward(sum, wpe, B, T, C);
        check("embed_shard.out", sum, c.out, n, FWD_ATOL, FWD_RTOL);
        free(tok); free(wte); free(wpe); free(g); free(c.wte); free(c.wpe);
        free(c.g); free(c.out); free(fte); free(fpe); free(sum); free(out);
    }
}

/* The three phases of each rank with the executor's two sums between
 * them (emulated here by adding the ranks' buffers) give the loss of the
 * whole vocabulary and its probabilities; padding columns get none. */
Test(kern, xent_shards)
{
    const int shapes[][3] = {{4, 11, 2}, {6, 40, 3}, {3, 7, 4}};
    for (int s = 0; s < 3; s++) {
        rng_seed(750 + s);
        int N = shapes[s][0], V = shapes[s][1], tp = shapes[s][2];
        int Vl = (V + tp - 1) / tp;
        size_t n = (size_t)N * V, nl = (size_t)N * Vl;
        size_t nb = (size_t)N * (tp + 2);
        float *logits = rnd(n);
        for (size_t i = 0; i < n; i++) logits[i] *= 8;
        int *tgt = rnd_tokens((size_t)N, V);
        /* the second shape's a masked LM's: rows without a target */
        for (int i = 0; s == 1 && i < N; i += 2) tgt[i] = -1;
        xent_ctx c = {N, V, tgt, to_d(logits, n), malloc(N * sizeof(double)),
                      1.0 / N};
        xent_loss(&c);
        double *fl = fd(xent_loss, &c, c.logits, n);
        float *sl[8], *buf[8], *pr[8], *loss = rnd((size_t)N);
        float *all = calloc(nb, sizeof *all);
        for (int r = 0; r < tp; r++) {
            sl[r] = rnd(nl);        /* padding columns hold junk */
            for (int i = 0; i < N; i++)
                for (int j = 0; j < shard_rows(V, r, Vl); j++)
                    sl[r][(size_t)i * Vl + j] = logits[(size_t)i * V +
                                                       r * Vl + j];
            buf[r] = calloc(nb, sizeof *buf[r]);
            pr[r] = rnd(nl);
            kern_xent_shard_max(buf[r] + (size_t)r * N, sl[r], N, Vl,
                                shard_rows(V, r, Vl));
            for (size_t i = 0; i < (size_t)N * tp; i++) all[i] += buf[r][i];
        }
        for (int r = 0; r < tp; r++) {
            memcpy(buf[r], all, sizeof(float) * (size_t)N * tp);
            float *sum = buf[r] + (size_t)N * tp, *tl = sum + N;
            kern_xent_shard_exp(pr[r], sum, tl, buf[r], sl[r], tgt, tp,
                                r * Vl, N, Vl, shard_rows(V, r, Vl));
        }
        memset(all + (size_t)N * tp, 0, sizeof(float) * 2 * N);
        for (int r = 0; r < tp; r++)
            for (size_t i = (size_t)N * tp; i < nb; i++) all[i] += buf[r][i];
        for (int r = 0; r < tp; r++) {
            const float *sum = all + (size_t)N * tp, *tl = sum + N;
            kern_xent_shard_norm(loss, pr[r], sum, buf[r], tl, tgt, N, Vl);
            check("xent_shard.loss", loss, c.loss, (size_t)N, FWD_ATOL,
                  FWD_RTOL);
            for (int i = 0; i < N; i++) {
                const double *l = c.logits + (size_t)i * V;
                double mx = -INFINITY, z = 0;
                for (int j = 0; j < V; j++) mx = fmax(mx, l[j]);
                for (int j = 0; j < V; j++) z += exp(l[j] - mx);
                for (int j = 0; j < Vl; j++) {
                    int col = r * Vl + j;
                    double want = col < V ? exp(l[col] - mx) / z : 0;
                    double got = pr[r][(size_t)i * Vl + j];
                    cr_assert(fabs(got - want) <= FWD_ATOL + FWD_RTOL * want,
                              "xent_shard.probs[%d][%d]: %g vs %g", i, col,
                              got, want);
                }
            }
            float *dl = rnd(nl), *dl0 = copy_f(dl, nl);
            kern_xent_shard_backward(dl, pr[r], tgt, (float)(1.0 / N), r * Vl,
                                     N, Vl);
            for (int i = 0; i < N; i++)
                for (int j = 0; j < Vl; j++) {
                    int col = r * Vl + j;
                    size_t at = (size_t)i * Vl + j;
                    double want = col < V ? fl[(size_t)i * V + col] : 0;
                    double got = (double)dl[at] - dl0[at];
                    cr_assert(fabs(got - want) <=
                                  BWD_ATOL + BWD_RTOL * fabs(want),
                              "xent_shard.dlogits[%d][%d]: %g vs %g", i, col,
                              got, want);
                }
            free(dl); free(dl0);
        }
        for (int r = 0; r < tp; r++) {
            free(sl[r]); free(buf[r]); free(pr[r]);
        }
        free(logits); free(tgt); free(c.logits); free(c.loss); free(fl);
        free(loss); free(all);
    }
}

Test(kern, accumulate)
{
    rng_seed(680);
    size_t n = 1003;
    float *a = rnd(n), *b = rnd(n);
    double *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) want[i] = (float)((double)a[i] + b[i]);
    kern_accumulate(a, b, n);
    /* one correctly rounded addition per element: exact */
    check("accumulate", a, want, n, 0, 0);
    free(a); free(b); free(want);
}

/* --------------------------------------------------------- optimizer */

Test(kern, norm_sq)
{
    rng_seed(800);
    size_t n = 1001;
    float *x = rnd(n), out;
    double want = 0;
    for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
    kern_norm_sq(&out, x, n);
    cr_assert(fabs(out - want) <= 1e-6 * want, "%g vs %g", out, want);
    free(x);
}

static void adamw_body(void)
{
    /* Three steps against the textbook update in float64 (Loshchilov &
     * Hutter, decoupled decay), with clipping's grad_scale. */
    rng_seed(900);
    size_t n = 50;
    float *p = rnd(n), *m = calloc(n, 4), *v = calloc(n, 4);
    double *pd = to_d(p, n), *md = calloc(n, 8), *vd = calloc(n, 8);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1,
                 gs = 0.5;
    for (int t = 1; t <= 3; t++) {
        float *g = rnd(n);
        kern_adamw_update(p, m, v, g, n, (float)lr, (float)b1, (float)b2,
                          (float)eps, (float)wd, (float)gs, t);
        for (size_t i = 0; i < n; i++) {
            double gi = g[i] * gs;
            md[i] = b1 * md[i] + (1 - b1) * gi;
            vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
            double mh = md[i] / (1 - pow(b1, t)), vh = vd[i] / (1 - pow(b2, t));
            pd[i] -= lr * (mh / (sqrt(vh) + eps) + wd * pd[i]);
        }
        free(g);
    }
    check("adamw.p", p, pd, n, 1e-6, 1e-5);
    check("adamw.m", m, md, n, 1e-6, 1e-5);
    check("adamw.v", v, vd, n, 1e-7, 1e-5);
    free(p); free(m); free(v); free(pd); free(md); free(vd);
}

/* Both builds of the row kernels (kern_get_isa), each against float64. */
Test(kern, adamw)
{
    each_isa(adamw_body);
}

Test(kern, expf_tanhf_accuracy)
{
    /* The shared element-wise math against libm in double, on a grid. */
    double worst_e = 0, worst_t = 0;
    for (int i = -8700; i <= 8800; i++) {
        double x = i / 100.0;
        double e = fabs(kern_expf((float)x) / exp((float)x) - 1);
        worst_e = fmax(worst_e, e);
        if (fabs(x) < 12) worst_t = fmax(worst_t, fabs(kern_tanhf((float)x) -
                                                        tanh((float)x)));
    }
    cr_assert(worst_e < 4e-7, "kern_expf relative error %g", worst_e);
    cr_assert(worst_t < 4e-7, "kern_tanhf absolute error %g", worst_t);
}

/* ------------------------------------------------- Llama's kernels */

static void ref_rmsnorm(double *out, const double *x, const double *w, int N,
                        int C, double eps)
{
    for (int i = 0; i < N; i++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += x[i * C + c] * x[i * C + c];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) out[i * C + c] = x[i * C + c] * r * w[c];
    }
}

typedef struct {
    int N, C;
    double *x, *w, *g, *out, eps;
} rms_ctx;

static double rms_loss(void *p)
{
    rms_ctx *c = p;
    ref_rmsnorm(c->out, c->x, c->w, c->N, c->C, c->eps);
    return dot(c->out, c->g, (size_t)c->N * c->C);
}

Test(kern, rmsnorm)
{
    /* the last wider than the kernels' chunk of 256 channels */
    const int shapes[][2] = {{1, 4}, {5, 8}, {9, 33}, {3, 300}};
    for (int s = 0; s < 4; s++) {
        rng_seed(1200 + s);
        int N = shapes[s][0], C = shapes[s][1];
        size_t n = (size_t)N * C;
        float *x = rnd(n), *w = rnd(C), *g = rnd(n), *out = rnd(n),
              *rstd = rnd(N);
        /* Llama 2's eps, Llama 1's, and one large enough to matter */
        const float eps[4] = {1e-5f, 1e-6f, 0.5f, 1e-5f};
        rms_ctx c = {N, C, to_d(x, n), to_d(w, C), to_d(g, n),
                     malloc(n * sizeof(double)), eps[s]};
        kern_rmsnorm_forward(out, rstd, x, w, N, C, eps[s]);
        rms_loss(&c);
        check("rmsnorm.out", out, c.out, n, FWD_ATOL, FWD_RTOL);
        float *dx = rnd(n), *dw = rnd(C), *dx0 = copy_f(dx, n),
              *dw0 = copy_f(dw, C);
        kern_rmsnorm_backward_input(dx, g, x, w, rstd, N, C);
        kern_rmsnorm_backward_weight(dw, g, x, rstd, N, C);
        double *fx = fd(rms_loss, &c, c.x, n), *fw = fd(rms_loss, &c, c.w, C);
        check_grad("rmsnorm.dinp", dx, dx0, fx, n);
        check_grad("rmsnorm.dw", dw, dw0, fw, C);
        free(x); free(w); free(g); free(out); free(rstd); free(c.x);
        free(c.w); free(c.g); free(c.out); free(dx); free(dw); free(dx0);
        free(dw0); free(fx); free(fw);
    }
}

static double ref_silu(double x) { return x / (1 + exp(-x)); }

/* GELU's tanh form as GPT-2 and Hugging Face's gelu_new write it */
static double ref_gelu_tanh(double x)
{
    return 0.5 * x *
           (1 + tanh(sqrt(2 / 3.14159265358979323846) *
                     (x + 0.044715 * x * x * x)));
}

/* A gated MLP's kernels (a row of inp(N,2F) is gate | up, out = act(gate)
 * up) against act written out, the backward against finite differences */
static void check_gated(const char *name, unsigned seed,
                        void (*fwd)(float *, const float *, int, int),
                        void (*bwd)(float *, const float *, const float *,
                                    int, int),
                        double (*act)(double))
{
    const int shapes[][2] = {{1, 3}, {4, 17}};
    for (int s = 0; s < 2; s++) {
        rng_seed(seed + (unsigned)s);
        int N = shapes[s][0], F = shapes[s][1];
        size_t n = (size_t)N * F;
        float *x = rnd(2 * n), *g = rnd(n), *out = rnd(n);
        for (size_t i = 0; i < 2 * n; i++) x[i] *= (float)(1 + 5 * (i % 3));
        double *want = malloc(n * sizeof *want),
               *fx = malloc(2 * n * sizeof *fx);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < F; j++) {
                double a = x[i * 2 * F + j], u = x[i * 2 * F + F + j],
                       gg = g[i * F + j];
                want[i * F + j] = act(a) * u;
                fx[i * 2 * F + j] =
                    gg * u * (act(a + FD_H) - act(a - FD_H)) / (2 * FD_H);
                fx[i * 2 * F + F + j] = gg * act(a);
            }
        char what[32];
        fwd(out, x, N, F);
        snprintf(what, sizeof what, "%s.out", name);
        check(what, out, want, n, FWD_ATOL, FWD_RTOL);
        float *dx = rnd(2 * n), *dx0 = copy_f(dx, 2 * n);
        bwd(dx, x, g, N, F);
        snprintf(what, sizeof what, "%s.dinp", name);
        check_grad(what, dx, dx0, fx, 2 * n);
        free(x); free(g); free(out); free(want); free(fx); free(dx);
        free(dx0);
    }
}

Test(kern, swiglu)
{
    check_gated("swiglu", 1300, kern_swiglu_forward, kern_swiglu_backward,
                ref_silu);
}

/* T5 1.1's gated-gelu */
Test(kern, geglu)
{
    check_gated("geglu", 1400, kern_geglu_forward, kern_geglu_backward,
                ref_gelu_tanh);
}

/* q | k | v expansion, against RoPE written from its definition: the
 * head's channel pairs (i, i + hs/2) as complex numbers times
 * e^{i t base^(-2i/hs)}; k and v of head h are those of kv head
 * h / (NH/NKV). */
typedef struct {
    int B, T, NH, NKV, hs;
    double base;             /* 0: no rotation */
    double *raw, *g, *out;
} qx_ctx;

static void ref_expand(qx_ctx *c)
{
    int Q = c->NH * c->hs, K = c->NKV * c->hs, h2 = c->hs / 2,
        grp = c->NH / c->NKV;
    for (int r = 0; r < c->B * c->T; r++) {
        const double *x = c->raw + (size_t)r * (Q + 2 * K);
        double *o = c->out + (size_t)r * 3 * Q;
        int t = r % c->T;
        for (int part = 0; part < 3; part++)
            for (int h = 0; h < c->NH; h++) {
                const double *src = part == 0 ? x + h * c->hs
                                  : x + Q + (part - 1) * K +
                                        (h / grp) * c->hs;
                double *dst = o + part * Q + h * c->hs;
                for (int i = 0; i < c->hs; i++) dst[i] = src[i];
                if (part == 2 || !c->base) continue;
                for (int i = 0; i < h2; i++) {
                    double a = t * pow(c->base, -2.0 * i / c->hs);
                    double re = src[i], im = src[i + h2];
                    dst[i] = re * cos(a) - im * sin(a);
                    dst[i + h2] = re * sin(a) + im * cos(a);
                }
            }
    }
}

static double qx_loss(void *p)
{
    qx_ctx *c = p;
    ref_expand(c);
    return dot(c->out, c->g, (size_t)c->B * c->T * 3 * c->NH * c->hs);
}

Test(kern, qkv_expand)
{
    /* B, T, NH, NKV, hs, RoPE's base: MHA with RoPE, GQA with and
     * without, Llama 3's base */
    const int shapes[][6] = {{1, 5, 2, 2, 4, 10000}, {2, 7, 4, 2, 6, 10000},
                             {2, 3, 6, 2, 4, 0}, {1, 9, 3, 1, 8, 500000}};
    for (int s = 0; s < 4; s++) {
        rng_seed(1400 + s);
        const int *z = shapes[s];
        int B = z[0], T = z[1], NH = z[2], NKV = z[3], hs = z[4];
        size_t nr = (size_t)B * T * (NH + 2 * NKV) * hs,
               no = (size_t)B * T * 3 * NH * hs;
        float *raw = rnd(nr), *g = rnd(no), *out = rnd(no);
        qx_ctx c = {B, T, NH, NKV, hs, z[5], to_d(raw, nr), to_d(g, no),
                    malloc(no * sizeof(double))};
        kern_qkv_expand_forward(out, raw, B, T, NH, NKV, hs, (float)z[5]);
        qx_loss(&c);
        check("qkv_expand.out", out, c.out, no, FWD_ATOL, FWD_RTOL);
        float *dr = rnd(nr), *dr0 = copy_f(dr, nr);
        kern_qkv_expand_backward(dr, g, B, T, NH, NKV, hs, (float)z[5]);
        double *fr = fd(qx_loss, &c, c.raw, nr);
        check_grad("qkv_expand.draw", dr, dr0, fr, nr);
        free(raw); free(g); free(out); free(c.raw); free(c.g); free(c.out);
        free(dr); free(dr0); free(fr);
    }
}

/* An embedding without a position table (RoPE models): the token rows
 * alone, and no position gradient. */
/* BERT's pooler activation and its sentence-pair token types: rows
 * before T0 get type 0's row, the rest type 1's; the backward sums each
 * type's rows, the same bits with any thread count. */
Test(kern, tanh_and_token_types)
{
    rng_seed(1450);
    size_t n = 97;
    float *x = rnd(n), *y = rnd(n);
    for (size_t i = 0; i < n; i++) x[i] *= 6;
    double *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) want[i] = tanh((double)x[i]);
    kern_tanh_forward(y, x, n);
    check("tanh.out", y, want, n, 1e-6, 1e-6);
    int B = 3, T = 7, C = 5, T0 = 3, N = B * T;
    float *wtt = rnd(2 * (size_t)C), *out = rnd((size_t)N * C),
          *g = rnd((size_t)N * C);
    float *out0 = copy_f(out, (size_t)N * C);
    kern_embed_type_forward(out, wtt, B, T, C, T0);
    for (int r = 0; r < N; r++)
        for (int k = 0; k < C; k++)
            cr_assert_eq(out[r * C + k],
                         out0[r * C + k] + wtt[(r % T >= T0) * C + k]);
    float *dw[2];
    for (int th = 0; th < 2; th++) {
        kern_set_threads(th ? 3 : 1);
        dw[th] = calloc(2 * (size_t)C, sizeof(float));
        dw[th][0] = 1.0f;   /* the backward adds */
        kern_embed_type_backward(dw[th], g, B, T, C, T0);
    }
    kern_set_threads(1);
    cr_assert(!memcmp(dw[0], dw[1], 2 * (size_t)C * sizeof(float)));
    double sum[2][5] = {{1.0}};
    for (int r = 0; r < N; r++)
        for (int k = 0; k < C; k++) sum[r % T >= T0][k] += g[r * C + k];
    check("embed_type.dwtt", dw[0], &sum[0][0], 2 * (size_t)C, 1e-6, 1e-6);
    free(x); free(y); free(want); free(wtt); free(out); free(g); free(out0);
    free(dw[0]); free(dw[1]);
}

Test(kern, embed_no_positions)
{
    rng_seed(1500);
    int B = 2, T = 3, C = 5, V = 7, N = B * T;
    float *wte = rnd((size_t)V * C), *out = rnd((size_t)N * C),
          *d = rnd((size_t)N * C), *dw = calloc((size_t)V * C, 4);
    int *tok = rnd_tokens(N, V);
    kern_embed_forward(out, tok, wte, NULL, B, T, C);
    for (int r = 0; r < N; r++)
        cr_assert(!memcmp(out + r * C, wte + tok[r] * C, C * sizeof *out));
    kern_embed_backward(dw, NULL, d, tok, B, T, C);
    float *ds = calloc((size_t)V * C, 4);
    kern_embed_shard_backward(ds, NULL, d, tok, 0, V, B, T, C);
    cr_assert(!memcmp(dw, ds, (size_t)V * C * sizeof *dw));
    free(wte); free(out); free(d); free(dw); free(tok); free(ds);
}

Test(kern, op_list)
{
    cr_assert_eq(KERN_OP_COUNT, 59);
    cr_assert_str_eq(kern_op_name(KERN_OP_linear_backward_weight),
                     "linear_backward_weight");
    cr_assert_str_eq(kern_kind_name(kern_op_kind(KERN_OP_attention_forward)),
                     "attn");
    cr_assert_eq(kern_set_threads(1), 1);
}

/* Three threads split rows, heads and channels differently from one: the
 * results agree to fp32 rounding (GEMM row blocks may round differently),
 * and the row-wise ops agree exactly. */
Test(kern, threads_agree)
{
    rng_seed(1000);
    int B = 2, T = 13, C = 24, NH = 3, OC = 40, N = B * T;
    size_t nq = (size_t)N * 3 * C, na = (size_t)B * NH * T * T;
    float *x = rnd((size_t)N * C), *w = rnd((size_t)OC * C), *b = rnd(OC);
    float *qkv = rnd(nq), *g = rnd((size_t)N * C), *go = rnd((size_t)N * OC);
    float *o[2], *att[2], *dq[2], *lo[2], *dw[2], *dx[2], *ln[2], *gl[2];
    for (int r = 0; r < 2; r++) {
        kern_set_threads(r ? 3 : 1);
        cr_assert_eq(kern_get_threads(), r ? 3 : 1);
        o[r] = calloc((size_t)N * C, 4);
        att[r] = calloc(na, 4);
        dq[r] = calloc(nq, 4);
        float *scr = calloc(na, 4);
        kern_attention_forward(o[r], att[r], qkv, B, T, C, NH, 1);
        kern_attention_backward(dq[r], scr, g, qkv, att[r], B, T, C, NH, 1);
        lo[r] = calloc((size_t)N * OC, 4);
        dw[r] = calloc((size_t)OC * C, 4);
        dx[r] = calloc((size_t)N * C, 4);
        kern_linear_forward(lo[r], x, w, b, N, C, OC);
        kern_linear_backward(dx[r], dw[r], NULL, go, x, w, N, C, OC);
        ln[r] = calloc((size_t)N * C, 4);
        float mean[64], rstd[64];
        kern_layernorm_forward(ln[r], mean, rstd, x, w, b, N, C,
                               KERN_LN_EPS);
        gl[r] = calloc((size_t)N * OC, 4);
        kern_gelu_forward(gl[r], go, (size_t)N * OC);
        free(scr);
    }
    kern_set_threads(1);
    double *ref;
#define AGREE(arr, n)                                                        \
    ref = to_d(arr[0], n);                                                   \
    check(#arr, arr[1], ref, n, 1e-6, 1e-5);                                 \
    free(ref);
    AGREE(o, (size_t)N * C);
    AGREE(dq, nq);
    AGREE(lo, (size_t)N * OC);
    AGREE(dw, (size_t)OC * C);
    AGREE(dx, (size_t)N * C);
    cr_assert(!memcmp(ln[0], ln[1], (size_t)N * C * 4));
    cr_assert(!memcmp(gl[0], gl[1], (size_t)N * OC * 4));
    for (int r = 0; r < 2; r++) {
        free(o[r]); free(att[r]); free(dq[r]); free(lo[r]); free(dw[r]);
        free(dx[r]); free(ln[r]); free(gl[r]);
    }
    free(x); free(w); free(b); free(qkv); free(g); free(go);
}
