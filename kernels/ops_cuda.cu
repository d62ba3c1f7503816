// The CUDA backend of KERN_OPS: cuBLAS for the linear layers, plain
// kernels elsewhere (one thread per element or per row: correct first,
// checked against the CPU oracle by kernels/cuda_test.cu; fused and tiled
// versions can replace them behind the same names). Reductions that feed
// parameters (bias and norm gradients, norm_sq) loop in a fixed order, so
// results are deterministic; attention's key/value gradients and the
// embeddings' gradients use atomics. Each host thread launches on its own
// stream with its own cuBLAS handle (the executor runs a compute and a
// communication thread per worker, several workers per GPU), and keeps
// the first failure it met for kern_cuda_error.
#include "kernels/kernels_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>

#include "kernels/kern_math.h"

static thread_local cudaStream_t cur_stream;    // 0: the thread's default
static thread_local cublasHandle_t blas_handle;
static thread_local cudaStream_t blas_stream;
static thread_local char first_err[256];

static void note(const char *fmt, ...)
{
    if (first_err[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(first_err, sizeof first_err, fmt, ap);
    va_end(ap);
}

extern "C" void kern_cuda_set_stream(void *stream)
{
    cur_stream = (cudaStream_t)stream;
}

extern "C" int kern_cuda_error(char *msg, size_t n)
{
    if (!first_err[0]) return 0;
    snprintf(msg, n, "%s", first_err);
    first_err[0] = 0;
    return 1;
}

// The thread's handle, bound to its current stream.
static cublasHandle_t blas(void)
{
    if (!blas_handle) {
        cublasStatus_t st = cublasCreate(&blas_handle);
        if (st != CUBLAS_STATUS_SUCCESS) {
            blas_handle = NULL;
            note("cublasCreate failed (status %d)", (int)st);
            return NULL;
        }
        // Plain fp32: the oracle is fp32, TF32 would differ by ~1e-3.
        cublasSetMathMode(blas_handle, CUBLAS_PEDANTIC_MATH);
        blas_stream = 0;
    }
    // cuBLAS is not built for per-thread default streams: name it
    cudaStream_t want = cur_stream ? cur_stream : cudaStreamPerThread;
    if (blas_stream != want) {
        cublasStatus_t st = cublasSetStream(blas_handle, want);
        if (st != CUBLAS_STATUS_SUCCESS)
            note("cublasSetStream failed (status %d)", (int)st);
        blas_stream = want;
    }
    return blas_handle;
}

// A matrix product through the thread's handle; a failure is noted.
#define SGEMM(what, ...)                                                      \
    do {                                                                      \
        cublasHandle_t h_ = blas();                                           \
        if (!h_) break;                                                       \
        cublasStatus_t st_ = cublasSgemm(h_, __VA_ARGS__);                    \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                     \
            note("cublasSgemm in %s failed (status %d)", what, (int)st_);     \
    } while (0)

// A launch on the thread's stream (none for an empty grid); a failed
// launch is noted with the kernel's name.
#define LAUNCH(k, grid, block, ...)                                           \
    do {                                                                      \
        unsigned g_ = (grid);                                                 \
        if (!g_) break;                                                       \
        k<<<g_, (block), 0, cur_stream>>>(__VA_ARGS__);                       \
        cudaError_t e_ = cudaGetLastError();                                  \
        if (e_ != cudaSuccess)                                                \
            note("launch of %s failed: %s", #k, cudaGetErrorString(e_));      \
    } while (0)

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
    blas_stream = 0;
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
    LAUNCH(embed_fwd_k, blocks(n, TPB), TPB, out, tokens, wte, wpe, B, T, C);
}

extern "C" void kern_cuda_embed_backward(float *dwte, float *dwpe,
                                         const float *dout, const int *tokens,
                                         int B, int T, int C)
{
    size_t n = (size_t)B * T * C;
    LAUNCH(embed_bwd_k, blocks(n, TPB), TPB, dwte, dwpe, dout, tokens, B, T,
           C);
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
    LAUNCH(ln_fwd_k, blocks(N, 128), 128, out, mean, rstd, inp, w, b, N, C);
}

extern "C" void kern_cuda_layernorm_backward_input(
    float *dinp, const float *dout, const float *inp, const float *w,
    const float *mean, const float *rstd, int N, int C)
{
    LAUNCH(ln_bwd_in_k, blocks(N, 128), 128, dinp, dout, inp, w, mean, rstd,
           N, C);
}

extern "C" void kern_cuda_layernorm_backward_weight(
    float *dw, float *db, const float *dout, const float *inp,
    const float *mean, const float *rstd, int N, int C)
{
    LAUNCH(ln_bwd_w_k, blocks(C, 128), 128, dw, db, dout, inp, mean, rstd, N,
           C);
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
        LAUNCH(bias_fill_k, blocks(n, TPB), TPB, out, b, N, OC);
        beta = 1.0f;
    }
    // out^T (OC x N) = w^T' ... : op(w) = T gives (OC x C), inp is (C x N).
    SGEMM(__func__, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, w, C, inp, C,
          &beta, out, OC);
}

extern "C" void kern_cuda_linear_backward_input(float *dinp,
                                                const float *dout,
                                                const float *w, int N, int C,
                                                int OC)
{
    float one = 1.0f;
    // dinp^T (C x N) += w^T (C x OC) dout^T (OC x N)
    SGEMM(__func__, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, w, C, dout, OC,
          &one, dinp, C);
}

extern "C" void kern_cuda_linear_backward_weight(float *dw, float *db,
                                                 const float *dout,
                                                 const float *inp, int N,
                                                 int C, int OC)
{
    float one = 1.0f;
    // dw^T (C x OC) += inp^T (C x N) dout (N x OC)
    SGEMM(__func__, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout,
          OC, &one, dw, C);
    if (db) LAUNCH(bias_grad_k, blocks(OC, 128), 128, db, dout, N, OC);
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
    LAUNCH(attn_fwd_k, blocks(n, 64), 64, out, att, qkv, B, T, C, NH);
}

extern "C" void kern_cuda_attention_backward(float *dqkv, float *scratch,
                                             const float *dout,
                                             const float *qkv,
                                             const float *att, int B, int T,
                                             int C, int NH)
{
    int n = B * NH * T;
    LAUNCH(attn_bwd_k, blocks(n, 64), 64, dqkv, scratch, dout, qkv, att, B,
           T, C, NH);
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
    LAUNCH(scores_fwd_k, blocks(n, 64), 64, preatt, qkv, B, T, C, NH);
}

extern "C" void kern_cuda_attn_softmax_forward(float *att, const float *preatt,
                                               int B, int T, int NH)
{
    int n = B * NH * T;
    LAUNCH(softmax_fwd_k, blocks(n, 64), 64, att, preatt, n, T);
}

extern "C" void kern_cuda_attn_context_forward(float *out, const float *att,
                                               const float *qkv, int B, int T,
                                               int C, int NH)
{
    int n = B * NH * T;
    LAUNCH(context_fwd_k, blocks(n, 64), 64, out, att, qkv, B, T, C, NH);
}

extern "C" void kern_cuda_attn_context_backward(float *datt, float *dqkv,
                                                const float *dout,
                                                const float *att,
                                                const float *qkv, int B,
                                                int T, int C, int NH)
{
    int n = B * NH * T;
    LAUNCH(context_bwd_k, blocks(n, 64), 64, datt, dqkv, dout, att, qkv, B,
           T, C, NH);
}

extern "C" void kern_cuda_attn_softmax_backward(float *dpreatt, float *datt,
                                                const float *att, int B,
                                                int T, int NH)
{
    int n = B * NH * T;
    LAUNCH(softmax_bwd_k, blocks(n, 64), 64, dpreatt, datt, att, n, T);
}

extern "C" void kern_cuda_attn_scores_backward(float *dqkv,
                                               const float *dpreatt,
                                               const float *qkv, int B, int T,
                                               int C, int NH)
{
    int n = B * NH * T;
    LAUNCH(scores_bwd_k, blocks(n, 64), 64, dqkv, dpreatt, qkv, B, T, C, NH);
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
    LAUNCH(gelu_fwd_k, blocks(n, TPB), TPB, out, inp, n);
}

extern "C" void kern_cuda_gelu_backward(float *dinp, const float *inp,
                                        const float *dout, size_t n)
{
    LAUNCH(gelu_bwd_k, blocks(n, TPB), TPB, dinp, inp, dout, n);
}

extern "C" void kern_cuda_residual_forward(float *out, const float *a,
                                           const float *b, size_t n)
{
    LAUNCH(res_fwd_k, blocks(n, TPB), TPB, out, a, b, n);
}

extern "C" void kern_cuda_residual_backward(float *da, float *db,
                                            const float *dout, size_t n)
{
    LAUNCH(res_bwd_k, blocks(n, TPB), TPB, da, db, dout, n);
}

extern "C" void kern_cuda_softmax_xent_forward(float *losses, float *probs,
                                               const float *logits,
                                               const int *targets, int N,
                                               int V)
{
    LAUNCH(xent_fwd_k, blocks(N, 128), 128, losses, probs, logits, targets,
           N, V);
}

extern "C" void kern_cuda_softmax_xent_backward(float *dlogits,
                                                const float *probs,
                                                const int *targets,
                                                float scale, int N, int V)
{
    size_t n = (size_t)N * V;
    LAUNCH(xent_bwd_k, blocks(n, TPB), TPB, dlogits, probs, targets, scale,
           N, V);
}

extern "C" void kern_cuda_norm_sq(float *out, const float *x, size_t n)
{
    LAUNCH(norm_sq_k, 1, TPB, out, x, n);
}

extern "C" void kern_cuda_adamw_update(float *p, float *m, float *v,
                                       const float *g, size_t n, float lr,
                                       float beta1, float beta2, float eps,
                                       float wd, float grad_scale, int t)
{
    float bc1 = (float)(1.0 - pow((double)beta1, t));
    float bc2 = (float)(1.0 - pow((double)beta2, t));
    LAUNCH(adamw_k, blocks(n, TPB), TPB, p, m, v, g, n, lr, beta1, beta2,
           bc1, bc2, eps, wd, grad_scale);
}

// ------------------------------------------ tensor-parallel vocabulary

__global__ void shard_fwd_k(float *out, const int *tok, const float *wte,
                            int v0, int Vl, int N, int C)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    size_t n = i / C;
    int t = tok[n] - v0;
    out[i] = t >= 0 && t < Vl ? wte[(size_t)t * C + i % C] : 0.0f;
}

__global__ void pos_fwd_k(float *out, const float *wpe, int T, size_t n,
                          int C)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] += wpe[(i / C) % T * C + i % C];
}

__global__ void shard_bwd_k(float *dwte, float *dwpe, const float *dout,
                            const int *tok, int v0, int Vl, int T, size_t n,
                            int C)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t row = i / C;
    int c = (int)(i % C), t = tok[row] - v0;
    if (t >= 0 && t < Vl) atomicAdd(&dwte[(size_t)t * C + c], dout[i]);
    atomicAdd(&dwpe[(row % T) * C + c], dout[i]);
}

__global__ void xmax_k(float *mx, const float *logits, int N, int Vl, int Vv)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float *l = logits + (size_t)i * Vl;
    float m = Vv ? l[0] : -3.0e38f;
    for (int j = 1; j < Vv; j++) m = fmaxf(m, l[j]);
    mx[i] = m;
}

__global__ void xexp_k(float *probs, float *sum, float *tl, float *mx,
                       const float *logits, const int *tgt, int tp, int v0,
                       int N, int Vl, int Vv)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float m = mx[i];
    for (int q = 1; q < tp; q++) m = fmaxf(m, mx[(size_t)q * N + i]);
    mx[i] = m;
    const float *l = logits + (size_t)i * Vl;
    float *p = probs + (size_t)i * Vl, s = 0.0f;
    for (int j = 0; j < Vl; j++) {
        p[j] = j < Vv ? kern_expf(l[j] - m) : 0.0f;
        s += p[j];
    }
    sum[i] = s;
    int t = tgt[i] - v0;
    tl[i] = t >= 0 && t < Vl ? l[t] : 0.0f;
}

__global__ void xnorm_k(float *losses, float *probs, const float *sum,
                        const float *mx, const float *tl, int N, int Vl)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float inv = 1.0f / sum[i], *p = probs + (size_t)i * Vl;
    for (int j = 0; j < Vl; j++) p[j] *= inv;
    losses[i] = logf(sum[i]) + mx[i] - tl[i];
}

__global__ void xshard_bwd_k(float *dlogits, const float *probs,
                             const int *tgt, float scale, int v0, int N,
                             int Vl)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)N * Vl) return;
    int row = (int)(i / Vl), j = (int)(i % Vl);
    float d = scale * probs[i];
    if (j == tgt[row] - v0) d -= scale;
    dlogits[i] += d;
}

__global__ void acc_k(float *acc, const float *src, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) acc[i] += src[i];
}

extern "C" void kern_cuda_embed_shard_forward(float *out, const int *tokens,
                                              const float *wte, int v0,
                                              int Vl, int N, int C)
{
    size_t n = (size_t)N * C;
    LAUNCH(shard_fwd_k, blocks(n, TPB), TPB, out, tokens, wte, v0, Vl, N, C);
}

extern "C" void kern_cuda_embed_pos_forward(float *out, const float *wpe,
                                            int B, int T, int C)
{
    size_t n = (size_t)B * T * C;
    LAUNCH(pos_fwd_k, blocks(n, TPB), TPB, out, wpe, T, n, C);
}

extern "C" void kern_cuda_embed_shard_backward(float *dwte, float *dwpe,
                                               const float *dout,
                                               const int *tokens, int v0,
                                               int Vl, int B, int T, int C)
{
    size_t n = (size_t)B * T * C;
    LAUNCH(shard_bwd_k, blocks(n, TPB), TPB, dwte, dwpe, dout, tokens, v0, Vl,
           T, n, C);
}

extern "C" void kern_cuda_xent_shard_max(float *mx, const float *logits,
                                         int N, int Vl, int Vv)
{
    LAUNCH(xmax_k, blocks(N, 128), 128, mx, logits, N, Vl, Vv);
}

extern "C" void kern_cuda_xent_shard_exp(float *probs, float *sum, float *tl,
                                         float *mx, const float *logits,
                                         const int *targets, int tp, int v0,
                                         int N, int Vl, int Vv)
{
    LAUNCH(xexp_k, blocks(N, 128), 128, probs, sum, tl, mx, logits, targets,
           tp, v0, N, Vl, Vv);
}

extern "C" void kern_cuda_xent_shard_norm(float *losses, float *probs,
                                          const float *sum, const float *mx,
                                          const float *tl, int N, int Vl)
{
    LAUNCH(xnorm_k, blocks(N, 128), 128, losses, probs, sum, mx, tl, N, Vl);
}

extern "C" void kern_cuda_xent_shard_backward(float *dlogits,
                                              const float *probs,
                                              const int *targets, float scale,
                                              int v0, int N, int Vl)
{
    size_t n = (size_t)N * Vl;
    LAUNCH(xshard_bwd_k, blocks(n, TPB), TPB, dlogits, probs, targets, scale,
           v0, N, Vl);
}

extern "C" void kern_cuda_accumulate(float *acc, const float *src, size_t n)
{
    LAUNCH(acc_k, blocks(n, TPB), TPB, acc, src, n);
}

// ------------------------------------------------------------ the table

extern "C" const kern_table kern_cuda = {
#define KERN_X_CUDA_TABLE(name, kind, args) kern_cuda_##name,
    KERN_OPS(KERN_X_CUDA_TABLE)
#undef KERN_X_CUDA_TABLE
};
