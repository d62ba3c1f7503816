// The CUDA backend of KERN_OPS: cuBLAS for the linear layers, plain
// kernels elsewhere (one thread per element or per row: correct first,
// checked against the CPU oracle by kernels/cuda_test.cu; fused and tiled
// versions can replace them behind the same names). Reductions that feed
// parameters (bias and norm gradients, norm_sq) loop in a fixed order, so
// results are deterministic; attention's key/value gradients use atomics.
#include "kernels/kernels_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "kernels/kern_math.h"

static cublasHandle_t blas_handle;

static cublasHandle_t blas(void)
{
    if (!blas_handle) {
        if (cublasCreate(&blas_handle) != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "kern_cuda: cublasCreate failed\n");
            return NULL;
        }
        // Plain fp32: the oracle is fp32, TF32 would differ by ~1e-3.
        cublasSetMathMode(blas_handle, CUBLAS_PEDANTIC_MATH);
    }
    return blas_handle;
}

extern "C" int kern_cuda_available(char *why, size_t n)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        snprintf(why, n, "no usable CUDA device (cudaGetDeviceCount: %s)",
                 cudaGetErrorString(err));
        return 0;
    }
    if (count == 0) {
        snprintf(why, n, "no CUDA device found");
        return 0;
    }
    return 1;
}

extern "C" void kern_cuda_shutdown(void)
{
    if (blas_handle) cublasDestroy(blas_handle);
    blas_handle = NULL;
}

static unsigned blocks(size_t n, unsigned threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

#define TPB 256

// ------------------------------------------------------------------ embed

__global__ void embed_fwd_k(float *out, const int *tok, const float *wte,
                            const float *wpe, int B, int T, int C)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    size_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T);
    out[i] = wte[(size_t)tok[bt] * C + c] + wpe[(size_t)t * C + c];
}

__global__ void embed_bwd_k(float *dwte, float *dwpe, const float *dout,
                            const int *tok, int B, int T, int C)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    size_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T);
    atomicAdd(&dwte[(size_t)tok[bt] * C + c], dout[i]);
    atomicAdd(&dwpe[(size_t)t * C + c], dout[i]);
}

extern "C" void kern_cuda_embed_forward(float *out, const int *tokens,
                                        const float *wte, const float *wpe,
                                        int B, int T, int C)
{
    size_t n = (size_t)B * T * C;
    embed_fwd_k<<<blocks(n, TPB), TPB>>>(out, tokens, wte, wpe, B, T, C);
}

extern "C" void kern_cuda_embed_backward(float *dwte, float *dwpe,
                                         const float *dout, const int *tokens,
                                         int B, int T, int C)
{
    size_t n = (size_t)B * T * C;
    embed_bwd_k<<<blocks(n, TPB), TPB>>>(dwte, dwpe, dout, tokens, B, T, C);
}

// -------------------------------------------------------------- layernorm

__global__ void ln_fwd_k(float *out, float *mean, float *rstd,
                         const float *inp, const float *w, const float *b,
                         int N, int C)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float *x = inp + (size_t)i * C;
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += x[c];
    m /= (float)C;
    float var = 0.0f;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= (float)C;
    float s = rsqrtf(var + KERN_LN_EPS);
    float *o = out + (size_t)i * C;
    for (int c = 0; c < C; c++)
        o[c] = (x[c] - m) * s * w[c] + (b ? b[c] : 0.0f);
    mean[i] = m;
    rstd[i] = s;
}

__global__ void ln_bwd_in_k(float *dinp, const float *dout, const float *inp,
                            const float *w, const float *mean,
                            const float *rstd, int N, int C)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
    float m = mean[i], s = rstd[i], sdn = 0.0f, sdnn = 0.0f;
    for (int c = 0; c < C; c++) {
        float nn = (x[c] - m) * s, dn = w[c] * d[c];
        sdn += dn;
        sdnn += dn * nn;
    }
    sdn /= (float)C;
    sdnn /= (float)C;
    float *dx = dinp + (size_t)i * C;
    for (int c = 0; c < C; c++) {
        float nn = (x[c] - m) * s, dn = w[c] * d[c];
        dx[c] += s * (dn - sdn - nn * sdnn);
    }
}

// One thread per channel, rows in order: deterministic.
__global__ void ln_bwd_w_k(float *dw, float *db, const float *dout,
                           const float *inp, const float *mean,
                           const float *rstd, int N, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int i = 0; i < N; i++) {
        float d = dout[(size_t)i * C + c];
        sw += d * (inp[(size_t)i * C + c] - mean[i]) * rstd[i];
        sb += d;
    }
    dw[c] += sw;
    if (db) db[c] += sb;
}

extern "C" void kern_cuda_layernorm_forward(float *out, float *mean,
                                            float *rstd, const float *inp,
                                            const float *w, const float *b,
                                            int N, int C)
{
    ln_fwd_k<<<blocks(N, 128), 128>>>(out, mean, rstd, inp, w, b, N, C);
}

extern "C" void kern_cuda_layernorm_backward_input(
    float *dinp, const float *dout, const float *inp, const float *w,
    const float *mean, const float *rstd, int N, int C)
{
    ln_bwd_in_k<<<blocks(N, 128), 128>>>(dinp, dout, inp, w, mean, rstd, N,
                                         C);
}

extern "C" void kern_cuda_layernorm_backward_weight(
    float *dw, float *db, const float *dout, const float *inp,
    const float *mean, const float *rstd, int N, int C)
{
    ln_bwd_w_k<<<blocks(C, 128), 128>>>(dw, db, dout, inp, mean, rstd, N, C);
}

extern "C" void kern_cuda_layernorm_backward(float *dinp, float *dw,
                                             float *db, const float *dout,
                                             const float *inp, const float *w,
                                             const float *mean,
                                             const float *rstd, int N, int C)
{
    kern_cuda_layernorm_backward_input(dinp, dout, inp, w, mean, rstd, N, C);
    kern_cuda_layernorm_backward_weight(dw, db, dout, inp, mean, rstd, N, C);
}

// ----------------------------------------------------------------- linear
// cuBLAS is column-major: a row-major (r x c) matrix is a column-major
// (c x r) one, so each row-major product is issued transposed.

__global__ void bias_fill_k(float *out, const float *b, int N, int OC)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < (size_t)N * OC) out[i] = b[i % OC];
}

__global__ void bias_grad_k(float *db, const float *dout, int N, int OC)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float s = 0.0f;
    for (int i = 0; i < N; i++) s += dout[(size_t)i * OC + o];
    db[o] += s;
}

extern "C" void kern_cuda_linear_forward(float *out, const float *inp,
                                         const float *w, const float *b,
                                         int N, int C, int OC)
{
    float one = 1.0f, beta = 0.0f;
    if (b) {
        size_t n = (size_t)N * OC;
        bias_fill_k<<<blocks(n, TPB), TPB>>>(out, b, N, OC);
        beta = 1.0f;
    }
    // out^T (OC x N) = w^T' ... : op(w) = T gives (OC x C), inp is (C x N).
    cublasSgemm(blas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, w, C, inp,
                C, &beta, out, OC);
}

extern "C" void kern_cuda_linear_backward_input(float *dinp,
                                                const float *dout,
                                                const float *w, int N, int C,
                                                int OC)
{
    float one = 1.0f;
    // dinp^T (C x N) += w^T (C x OC) dout^T (OC x N)
    cublasSgemm(blas(), CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, w, C, dout,
                OC, &one, dinp, C);
}

extern "C" void kern_cuda_linear_backward_weight(float *dw, float *db,
                                                 const float *dout,
                                                 const float *inp, int N,
                                                 int C, int OC)
{
    float one = 1.0f;
    // dw^T (C x OC) += inp^T (C x N) dout (N x OC)
    cublasSgemm(blas(), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C,
                dout, OC, &one, dw, C);
    if (db) bias_grad_k<<<blocks(OC, 128), 128>>>(db, dout, N, OC);
}

extern "C" void kern_cuda_linear_backward(float *dinp, float *dw, float *db,
                                          const float *dout, const float *inp,
                                          const float *w, int N, int C,
                                          int OC)
{
    kern_cuda_linear_backward_input(dinp, dout, w, N, C, OC);
    kern_cuda_linear_backward_weight(dw, db, dout, inp, N, C, OC);
}

// -------------------------------------------------------------- attention
// One thread per (b, h, t) query row.

__global__ void attn_fwd_k(float *out, float *att, const float *qkv, int B,
                           int T, int C, int NH)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T) return;
    int t = idx % T, h = (idx / T) % NH, b = idx / (T * NH);
    int hs = C / NH, C3 = 3 * C;
    float scale = rsqrtf((float)hs);
    const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
    float *row = att + (((size_t)b * NH + h) * T + t) * T;
    float mx = -3.0e38f;
    for (int j = 0; j <= t; j++) {
        const float *k = qkv + ((size_t)b * T + j) * C3 + C + h * hs;
        float s = 0.0f;
        for (int i = 0; i < hs; i++) s += q[i] * k[i];
        s *= scale;
        row[j] = s;
        mx = fmaxf(mx, s);
    }
    float sum = 0.0f;
    for (int j = 0; j <= t; j++) {
        row[j] = kern_expf(row[j] - mx);
        sum += row[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j <= t; j++) row[j] *= inv;
    for (int j = t + 1; j < T; j++) row[j] = 0.0f;
    float *o = out + ((size_t)b * T + t) * C + h * hs;
    for (int i = 0; i < hs; i++) {
        float s = 0.0f;
        for (int j = 0; j <= t; j++)
            s += row[j] * qkv[((size_t)b * T + j) * C3 + 2 * C + h * hs + i];
        o[i] = s;
    }
}

__global__ void attn_bwd_k(float *dqkv, float *scratch, const float *dout,
                           const float *qkv, const float *att, int B, int T,
                           int C, int NH)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T) return;
    int t = idx % T, h = (idx / T) % NH, b = idx / (T * NH);
    int hs = C / NH, C3 = 3 * C;
    float scale = rsqrtf((float)hs);
    size_t rowoff = (((size_t)b * NH + h) * T + t) * T;
    const float *p = att + rowoff;
    float *ds = scratch + rowoff;
    const float *dO = dout + ((size_t)b * T + t) * C + h * hs;
    float dot = 0.0f;
    for (int j = 0; j <= t; j++) {
        const float *v = qkv + ((size_t)b * T + j) * C3 + 2 * C + h * hs;
        float dp = 0.0f;
        for (int i = 0; i < hs; i++) dp += dO[i] * v[i];
        ds[j] = dp;
        dot += p[j] * dp;
    }
    const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
    float *dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
    for (int j = 0; j <= t; j++) {
        float d = p[j] * (ds[j] - dot) * scale;
        size_t kj = ((size_t)b * T + j) * C3 + h * hs;
        for (int i = 0; i < hs; i++) {
            dq[i] += d * qkv[kj + C + i];
            atomicAdd(&dqkv[kj + C + i], d * q[i]);
            atomicAdd(&dqkv[kj + 2 * C + i], p[j] * dO[i]);
        }
    }
}

extern "C" void kern_cuda_attention_forward(float *out, float *att,
                                            const float *qkv, int B, int T,
                                            int C, int NH)
{
    int n = B * NH * T;
    attn_fwd_k<<<blocks(n, 64), 64>>>(out, att, qkv, B, T, C, NH);
}

extern "C" void kern_cuda_attention_backward(float *dqkv, float *scratch,
                                             const float *dout,
                                             const float *qkv,
                                             const float *att, int B, int T,
                                             int C, int NH)
{
    int n = B * NH * T;
    attn_bwd_k<<<blocks(n, 64), 64>>>(dqkv, scratch, dout, qkv, att, B, T, C,
                                      NH);
}

// The three-op attention, one thread per (b, h, t) row as above.

__global__ void scores_fwd_k(float *pre, const float *qkv, int B, int T,
                             int C, int NH)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T) return;
    int t = idx % T, h = (idx / T) % NH, b = idx / (T * NH);
    int hs = C / NH, C3 = 3 * C;
    float scale = rsqrtf((float)hs);
    const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
    float *row = pre + (size_t)idx * T;
    for (int j = 0; j < T; j++) {
        const float *k = qkv + ((size_t)b * T + j) * C3 + C + h * hs;
        float s = 0.0f;
        for (int i = 0; i < hs; i++) s += q[i] * k[i];
        row[j] = s * scale;
    }
}

__global__ void softmax_fwd_k(float *att, const float *pre, int rows, int T)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows) return;
    int t = idx % T;
    const float *in = pre + (size_t)idx * T;
    float *row = att + (size_t)idx * T;
    float mx = -3.0e38f;
    for (int j = 0; j <= t; j++) mx = fmaxf(mx, in[j]);
    float sum = 0.0f;
    for (int j = 0; j <= t; j++) {
        row[j] = kern_expf(in[j] - mx);
        sum += row[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j <= t; j++) row[j] *= inv;
    for (int j = t + 1; j < T; j++) row[j] = 0.0f;
}

__global__ void context_fwd_k(float *out, const float *att, const float *qkv,
                              int B, int T, int C, int NH)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T) return;
    int t = idx % T, h = (idx / T) % NH, b = idx / (T * NH);
    int hs = C / NH, C3 = 3 * C;
    const float *row = att + (size_t)idx * T;
    float *o = out + ((size_t)b * T + t) * C + h * hs;
    for (int i = 0; i < hs; i++) {
        float s = 0.0f;
        for (int j = 0; j <= t; j++)
            s += row[j] * qkv[((size_t)b * T + j) * C3 + 2 * C + h * hs + i];
        o[i] = s;
    }
}

__global__ void context_bwd_k(float *datt, float *dqkv, const float *dout,
                              const float *att, const float *qkv, int B,
                              int T, int C, int NH)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T) return;
    int t = idx % T, h = (idx / T) % NH, b = idx / (T * NH);
    int hs = C / NH, C3 = 3 * C;
    const float *p = att + (size_t)idx * T;
    float *dr = datt + (size_t)idx * T;
    const float *dO = dout + ((size_t)b * T + t) * C + h * hs;
    for (int j = 0; j < T; j++) {
        size_t vj = ((size_t)b * T + j) * C3 + 2 * C + h * hs;
        float dp = 0.0f;
        for (int i = 0; i < hs; i++) dp += dO[i] * qkv[vj + i];
        dr[j] += dp;
        if (j <= t)
            for (int i = 0; i < hs; i++) atomicAdd(&dqkv[vj + i], p[j] * dO[i]);
    }
}

__global__ void softmax_bwd_k(float *dpre, float *datt, const float *att,
                              int rows, int T)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows) return;
    int t = idx % T;
    const float *p = att + (size_t)idx * T;
    float *dr = datt + (size_t)idx * T, *dp = dpre + (size_t)idx * T;
    float dot = 0.0f;
    for (int j = 0; j <= t; j++) dot += p[j] * dr[j];
    for (int j = 0; j <= t; j++) {
        dr[j] = p[j] * (dr[j] - dot);
        dp[j] += dr[j];
    }
    for (int j = t + 1; j < T; j++) dr[j] = 0.0f;
}

__global__ void scores_bwd_k(float *dqkv, const float *dpre, const float *qkv,
                             int B, int T, int C, int NH)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * NH * T) return;
    int t = idx % T, h = (idx / T) % NH, b = idx / (T * NH);
    int hs = C / NH, C3 = 3 * C;
    float scale = rsqrtf((float)hs);
    const float *ds = dpre + (size_t)idx * T;
    const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
    float *dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
    for (int j = 0; j <= t; j++) {
        float d = ds[j] * scale;
        size_t kj = ((size_t)b * T + j) * C3 + C + h * hs;
        for (int i = 0; i < hs; i++) {
            dq[i] += d * qkv[kj + i];
            atomicAdd(&dqkv[kj + i], d * q[i]);
        }
    }
}

extern "C" void kern_cuda_attn_scores_forward(float *preatt, const float *qkv,
                                              int B, int T, int C, int NH)
{
    int n = B * NH * T;
    scores_fwd_k<<<blocks(n, 64), 64>>>(preatt, qkv, B, T, C, NH);
}

extern "C" void kern_cuda_attn_softmax_forward(float *att, const float *preatt,
                                               int B, int T, int NH)
{
    int n = B * NH * T;
    softmax_fwd_k<<<blocks(n, 64), 64>>>(att, preatt, n, T);
}

extern "C" void kern_cuda_attn_context_forward(float *out, const float *att,
                                               const float *qkv, int B, int T,
                                               int C, int NH)
{
    int n = B * NH * T;
    context_fwd_k<<<blocks(n, 64), 64>>>(out, att, qkv, B, T, C, NH);
}

extern "C" void kern_cuda_attn_context_backward(float *datt, float *dqkv,
                                                const float *dout,
                                                const float *att,
                                                const float *qkv, int B,
                                                int T, int C, int NH)
{
    int n = B * NH * T;
    context_bwd_k<<<blocks(n, 64), 64>>>(datt, dqkv, dout, att, qkv, B, T, C,
                                         NH);
}

extern "C" void kern_cuda_attn_softmax_backward(float *dpreatt, float *datt,
                                                const float *att, int B,
                                                int T, int NH)
{
    int n = B * NH * T;
    softmax_bwd_k<<<blocks(n, 64), 64>>>(dpreatt, datt, att, n, T);
}

extern "C" void kern_cuda_attn_scores_backward(float *dqkv,
                                               const float *dpreatt,
                                               const float *qkv, int B, int T,
                                               int C, int NH)
{
    int n = B * NH * T;
    scores_bwd_k<<<blocks(n, 64), 64>>>(dqkv, dpreatt, qkv, B, T, C, NH);
}

// ------------------------------------------------ element-wise, loss, optim

__global__ void gelu_fwd_k(float *out, const float *inp, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = kern_gelu(inp[i]);
}

__global__ void gelu_bwd_k(float *dinp, const float *inp, const float *dout,
                           size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dinp[i] += kern_gelu_grad(inp[i]) * dout[i];
}

__global__ void res_fwd_k(float *out, const float *a, const float *b,
                          size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

__global__ void res_bwd_k(float *da, float *db, const float *dout, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

__global__ void xent_fwd_k(float *losses, float *probs, const float *logits,
                           const int *targets, int N, int V)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float *l = logits + (size_t)i * V;
    float *p = probs + (size_t)i * V;
    float mx = l[0];
    for (int j = 1; j < V; j++) mx = fmaxf(mx, l[j]);
    float sum = 0.0f;
    for (int j = 0; j < V; j++) {
        p[j] = kern_expf(l[j] - mx);
        sum += p[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < V; j++) p[j] *= inv;
    losses[i] = logf(sum) + mx - l[targets[i]];
}

__global__ void xent_bwd_k(float *dlogits, const float *probs,
                           const int *targets, float scale, int N, int V)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)N * V) return;
    int row = (int)(i / V), j = (int)(i % V);
    dlogits[i] += scale * (probs[i] - (j == targets[row] ? 1.0f : 0.0f));
}

// One block, fixed strides and a tree in shared memory: deterministic.
__global__ void norm_sq_k(float *out, const float *x, size_t n)
{
    __shared__ double part[TPB];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += TPB) s += (double)x[i] * x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = TPB / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (float)part[0];
}

__global__ void adamw_k(float *p, float *m, float *v, const float *g,
                        size_t n, float lr, float beta1, float beta2,
                        float bc1, float bc2, float eps, float wd,
                        float grad_scale)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        kern_adamw_one(&p[i], &m[i], &v[i], g[i] * grad_scale, lr, beta1,
                       beta2, bc1, bc2, eps, wd);
}

extern "C" void kern_cuda_gelu_forward(float *out, const float *inp, size_t n)
{
    gelu_fwd_k<<<blocks(n, TPB), TPB>>>(out, inp, n);
}

extern "C" void kern_cuda_gelu_backward(float *dinp, const float *inp,
                                        const float *dout, size_t n)
{
    gelu_bwd_k<<<blocks(n, TPB), TPB>>>(dinp, inp, dout, n);
}

extern "C" void kern_cuda_residual_forward(float *out, const float *a,
                                           const float *b, size_t n)
{
    res_fwd_k<<<blocks(n, TPB), TPB>>>(out, a, b, n);
}

extern "C" void kern_cuda_residual_backward(float *da, float *db,
                                            const float *dout, size_t n)
{
    res_bwd_k<<<blocks(n, TPB), TPB>>>(da, db, dout, n);
}

extern "C" void kern_cuda_softmax_xent_forward(float *losses, float *probs,
                                               const float *logits,
                                               const int *targets, int N,
                                               int V)
{
    xent_fwd_k<<<blocks(N, 128), 128>>>(losses, probs, logits, targets, N, V);
}

extern "C" void kern_cuda_softmax_xent_backward(float *dlogits,
                                                const float *probs,
                                                const int *targets,
                                                float scale, int N, int V)
{
    size_t n = (size_t)N * V;
    xent_bwd_k<<<blocks(n, TPB), TPB>>>(dlogits, probs, targets, scale, N, V);
}

extern "C" void kern_cuda_norm_sq(float *out, const float *x, size_t n)
{
    norm_sq_k<<<1, TPB>>>(out, x, n);
}

extern "C" void kern_cuda_adamw_update(float *p, float *m, float *v,
                                       const float *g, size_t n, float lr,
                                       float beta1, float beta2, float eps,
                                       float wd, float grad_scale, int t)
{
    float bc1 = (float)(1.0 - pow((double)beta1, t));
    float bc2 = (float)(1.0 - pow((double)beta2, t));
    adamw_k<<<blocks(n, TPB), TPB>>>(p, m, v, g, n, lr, beta1, beta2, bc1,
                                      bc2, eps, wd, grad_scale);
}
