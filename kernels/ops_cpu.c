/* The CPU backend of KERN_OPS: plain C loops for the memory-bound ops,
 * OpenBLAS sgemm for every matrix product (the linear layers and the two
 * products per head inside attention). This is the oracle the CUDA
 * backend is checked against, and what the CPU trainer runs. */
#include "kernels/kernels.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/kern_math.h"

/* ---------------------------------------------------------------- embed */

void kern_embed_forward(float *out, const int *tokens, const float *wte,
                        const float *wpe, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *we = wte + (size_t)tokens[b * T + t] * C;
            const float *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
        }
}

void kern_embed_backward(float *dwte, float *dwpe, const float *dout,
                         const int *tokens, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *we = dwte + (size_t)tokens[b * T + t] * C;
            float *pe = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) {
                we[c] += d[c];
                pe[c] += d[c];
            }
        }
}

/* ------------------------------------------------------------ layernorm */

void kern_layernorm_forward(float *out, float *mean, float *rstd,
                            const float *inp, const float *w, const float *b,
                            int N, int C)
{
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float var = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            var += d * d;
        }
        var /= (float)C;
        float s = 1.0f / sqrtf(var + KERN_LN_EPS);
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * w[c] + (b ? b[c] : 0.0f);
        mean[i] = m;
        rstd[i] = s;
    }
}

void kern_layernorm_backward_input(float *dinp, const float *dout,
                                   const float *inp, const float *w,
                                   const float *mean, const float *rstd,
                                   int N, int C)
{
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        const float *d = dout + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        /* dx = s (dn - mean(dn) - n mean(dn n)) with n the normalised input
         * and dn = w dout. */
        float sum_dn = 0.0f, sum_dn_n = 0.0f;
        for (int c = 0; c < C; c++) {
            float n = (x[c] - m) * s;
            float dn = w[c] * d[c];
            sum_dn += dn;
            sum_dn_n += dn * n;
        }
        sum_dn /= (float)C;
        sum_dn_n /= (float)C;
        float *dx = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            float n = (x[c] - m) * s;
            float dn = w[c] * d[c];
            dx[c] += s * (dn - sum_dn - n * sum_dn_n);
        }
    }
}

void kern_layernorm_backward_weight(float *dw, float *db, const float *dout,
                                    const float *inp, const float *mean,
                                    const float *rstd, int N, int C)
{
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        const float *d = dout + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        for (int c = 0; c < C; c++) {
            dw[c] += d[c] * (x[c] - m) * s;
            if (db) db[c] += d[c];
        }
    }
}

void kern_layernorm_backward(float *dinp, float *dw, float *db,
                             const float *dout, const float *inp,
                             const float *w, const float *mean,
                             const float *rstd, int N, int C)
{
    kern_layernorm_backward_input(dinp, dout, inp, w, mean, rstd, N, C);
    kern_layernorm_backward_weight(dw, db, dout, inp, mean, rstd, N, C);
}

/* --------------------------------------------------------------- linear */

void kern_linear_forward(float *out, const float *inp, const float *w,
                         const float *b, int N, int C, int OC)
{
    float beta = 0.0f;
    if (b) {
        for (int i = 0; i < N; i++)
            memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp,
                C, w, C, beta, out, OC);
}

void kern_linear_backward_input(float *dinp, const float *dout,
                                const float *w, int N, int C, int OC)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f,
                dout, OC, w, C, 1.0f, dinp, C);
}

void kern_linear_backward_weight(float *dw, float *db, const float *dout,
                                 const float *inp, int N, int C, int OC)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f,
                dout, OC, inp, C, 1.0f, dw, C);
    if (db)
        for (int i = 0; i < N; i++) {
            const float *d = dout + (size_t)i * OC;
            for (int o = 0; o < OC; o++) db[o] += d[o];
        }
}

void kern_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, int N, int C,
                          int OC)
{
    kern_linear_backward_input(dinp, dout, w, N, C, OC);
    kern_linear_backward_weight(dw, db, dout, inp, N, C, OC);
}

/* ------------------------------------------------------------ attention */

/* Per (b, h): S = scale Q K^T as one sgemm over the whole T x T square
 * (the masked half is computed and thrown away: at these sizes one large
 * product beats T small ones), then a causal softmax per row, then
 * O = P V. The masked entries of att are stored as exact zeros, which the
 * backward relies on. */
void kern_attention_forward(float *out, float *att, const float *qkv, int B,
                            int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
            const float *k = q + C, *v = q + 2 * C;
            float *a = att + ((size_t)b * NH + h) * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs,
                        scale, q, C3, k, C3, 0.0f, a, T);
            for (int t = 0; t < T; t++) {
                float *row = a + (size_t)t * T;
                float mx = row[0];
                for (int j = 1; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
                float sum = 0.0f;
                for (int j = 0; j <= t; j++) {
                    row[j] = kern_expf(row[j] - mx);
                    sum += row[j];
                }
                float inv = 1.0f / sum;
                for (int j = 0; j <= t; j++) row[j] *= inv;
                for (int j = t + 1; j < T; j++) row[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T,
                        1.0f, a, T, v, C3, 0.0f,
                        out + (size_t)b * T * C + (size_t)h * hs, C);
        }
}

/* dP = dO V^T; dV += P^T dO; dS = P (dP - rowsum(P dP)); dQ += scale dS K;
 * dK += scale dS^T Q. Masked entries of P are zero, so dS is zero there
 * whatever dP holds. */
void kern_attention_backward(float *dqkv, float *scratch, const float *dout,
                             const float *qkv, const float *att, int B, int T,
                             int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t off = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
            const float *p = att + ((size_t)b * NH + h) * T * T;
            const float *dO = dout + (size_t)b * T * C + (size_t)h * hs;
            float *ds = scratch + ((size_t)b * NH + h) * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs,
                        1.0f, dO, C, v, C3, 0.0f, ds, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T,
                        1.0f, p, T, dO, C, 1.0f, dv, C3);
            for (int t = 0; t < T; t++) {
                const float *pr = p + (size_t)t * T;
                float *dr = ds + (size_t)t * T;
                float dot = 0.0f;
                for (int j = 0; j <= t; j++) dot += pr[j] * dr[j];
                for (int j = 0; j <= t; j++) dr[j] = pr[j] * (dr[j] - dot);
                for (int j = t + 1; j < T; j++) dr[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T,
                        scale, ds, T, k, C3, 1.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T,
                        scale, ds, T, q, C3, 1.0f, dk, C3);
        }
}

/* ------------------------------------------------- element-wise, loss */

void kern_residual_forward(float *out, const float *a, const float *b,
                           size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void kern_residual_backward(float *da, float *db, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

/* loss = log(sum exp(l - max)) + max - l[target]: no log of a probability
 * that underflowed. */
void kern_softmax_xent_forward(float *losses, float *probs,
                               const float *logits, const int *targets, int N,
                               int V)
{
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * V;
        float *p = probs + (size_t)i * V;
        float mx = l[0];
        for (int j = 1; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        float sum = 0.0f;
        for (int j = 0; j < V; j++) {
            p[j] = kern_expf(l[j] - mx);
            sum += p[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j < V; j++) p[j] *= inv;
        losses[i] = logf(sum) + mx - l[targets[i]];
    }
}

void kern_softmax_xent_backward(float *dlogits, const float *probs,
                                const int *targets, float scale, int N, int V)
{
    for (int i = 0; i < N; i++) {
        const float *p = probs + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        for (int j = 0; j < V; j++) d[j] += scale * p[j];
        d[targets[i]] -= scale;
    }
}

/* ------------------------------------------------------------ optimizer */

void kern_norm_sq(float *out, const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    out[0] = (float)s;
}

/* ---------------------------------------------------------- the op list */

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

/* ------------------------------------------------------------- threads */

static int kern_threads = 1;

int kern_set_threads(int n)
{
    if (n < 1) n = 1;
    openblas_set_num_threads(n);
    kern_threads = n;
    return kern_threads;
}

int kern_get_threads(void) { return kern_threads; }

const char *kern_blas_core(void) { return openblas_get_corename(); }
