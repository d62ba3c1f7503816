// The CUDA backend of KERN_OPS: cuBLAS for the linear layers and for
// attention's products (batched over a sequence's heads, as the CPU ops
// take them per head), a warp per row for the softmaxes, the norms and the
// cross-entropy, one thread per element elsewhere; checked against the
// CPU oracle by kernels/cuda_test.cu. Reductions that feed parameters
// (bias and norm gradients, norm_sq) add in a fixed order (chunks of rows,
// then the chunks in order), so results are deterministic; the
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
static thread_local int blas_tf32;          // the handle's math mode
static int want_tf32;                       // kern_cuda_set_tf32's
static thread_local char first_err[256];
static thread_local double *norm_part;     // norm_sq's partial sums
static thread_local float *col_part;       // column sums' partial sums
static thread_local size_t col_part_n;

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

extern "C" void kern_cuda_set_tf32(int on)
{
    want_tf32 = on != 0;
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
        // Plain fp32 unless TF32 is asked for: the oracle is fp32, TF32
        // would differ by ~1e-3.
        cublasSetMathMode(blas_handle, CUBLAS_PEDANTIC_MATH);
        blas_tf32 = 0;
        blas_stream = 0;
    }
    if (blas_tf32 != want_tf32) {
        cublasStatus_t st = cublasSetMathMode(
            blas_handle, want_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                   : CUBLAS_PEDANTIC_MATH);
        if (st != CUBLAS_STATUS_SUCCESS)
            note("cublasSetMathMode failed (status %d)", (int)st);
        blas_tf32 = want_tf32;
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
        dim3 g_ = (grid);                                                     \
        if (!g_.x || !g_.y) break;                                            \
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
    blas_tf32 = 0;
    if (norm_part) cudaFree(norm_part);
    norm_part = NULL;
    if (col_part) cudaFree(col_part);
    col_part = NULL;
    col_part_n = 0;
    blas_stream = 0;
}

static unsigned blocks(size_t n, unsigned threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

#define TPB 256

// Sums and maxima over a warp, in a fixed order: deterministic.
__device__ float warp_sum(float x)
{
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__device__ float warp_max(float x)
{
    for (int o = 16; o > 0; o /= 2)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

#define ROWS_PER_BLOCK 4    // warps of a 128-thread block, a row each

// ------------------------------------------------------------------ embed

__global__ void embed_fwd_k(float *out, const int *tok, const float *wte,
                            const float *wpe, int B, int T, int C)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    size_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T);
    out[i] = wte[(size_t)tok[bt] * C + c] +
             (wpe ? wpe[(size_t)t * C + c] : 0.0f);
}

__global__ void embed_bwd_k(float *dwte, float *dwpe, const float *dout,
                            const int *tok, int B, int T, int C)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    size_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T);
    atomicAdd(&dwte[(size_t)tok[bt] * C + c], dout[i]);
    if (dwpe) atomicAdd(&dwpe[(size_t)t * C + c], dout[i]);
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

// A warp per row (its sums in a fixed order: deterministic), lanes on
// consecutive channels so the row is read whole by each load.
__global__ void ln_fwd_k(float *out, float *mean, float *rstd,
                         const float *inp, const float *w, const float *b,
                         int N, int C, float eps)
{
    int i = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (i >= N) return;
    const float *x = inp + (size_t)i * C;
    float m = 0.0f;
    for (int c = lane; c < C; c += 32) m += x[c];
    m = warp_sum(m) / (float)C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) var += (x[c] - m) * (x[c] - m);
    var = warp_sum(var) / (float)C;
    float s = rsqrtf(var + eps);
    float *o = out + (size_t)i * C;
    for (int c = lane; c < C; c += 32)
        o[c] = (x[c] - m) * s * w[c] + (b ? b[c] : 0.0f);
    if (lane == 0) {
        mean[i] = m;
        rstd[i] = s;
    }
}

__global__ void ln_bwd_in_k(float *dinp, const float *dout, const float *inp,
                            const float *w, const float *mean,
                            const float *rstd, int N, int C)
{
    int i = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (i >= N) return;
    const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
    float m = mean[i], s = rstd[i], sdn = 0.0f, sdnn = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float nn = (x[c] - m) * s, dn = w[c] * d[c];
        sdn += dn;
        sdnn += dn * nn;
    }
    sdn = warp_sum(sdn) / (float)C;
    sdnn = warp_sum(sdnn) / (float)C;
    float *dx = dinp + (size_t)i * C;
    for (int c = lane; c < C; c += 32) {
        float nn = (x[c] - m) * s, dn = w[c] * d[c];
        dx[c] += s * (dn - sdn - nn * sdnn);
    }
}

// Column sums over N rows (the norms' and biases' parameter gradients)
// in two passes: COL_CHUNKS chunks of rows, a thread per channel in each,
// rows in order; then a thread per channel adds the chunks in order:
// deterministic, and COL_CHUNKS times the blocks of one pass over all rows.
#define COL_CHUNKS 64
#define COL_TPB 128

// Scratch for the chunks' partial sums, grown as needed (cudaFree waits
// for the device, so a smaller buffer still in use is not freed early).
static float *col_scratch(size_t n)
{
    if (n > col_part_n) {
        if (col_part) cudaFree(col_part);
        col_part = NULL;
        col_part_n = 0;
        cudaError_t rc = cudaMalloc((void **)&col_part, n * sizeof(float));
        if (rc != cudaSuccess) {
            col_part = NULL;
            note("cudaMalloc of %zu floats for column sums failed: %s", n,
                 cudaGetErrorString(rc));
            return NULL;
        }
        col_part_n = n;
    }
    return col_part;
}

__global__ void ln_bwd_w_part_k(float *pw, float *pb, const float *dout,
                                const float *inp, const float *mean,
                                const float *rstd, int N, int C)
{
    int c = blockIdx.x * COL_TPB + threadIdx.x, k = blockIdx.y;
    if (c >= C) return;
    int per = (N + COL_CHUNKS - 1) / COL_CHUNKS;
    int lo = k * per, hi = min(N, lo + per);
    float sw = 0.0f, sb = 0.0f;
    for (int i = lo; i < hi; i++) {
        float d = dout[(size_t)i * C + c];
        sw += d * (inp[(size_t)i * C + c] - mean[i]) * rstd[i];
        sb += d;
    }
    pw[(size_t)k * C + c] = sw;
    pb[(size_t)k * C + c] = sb;
}

__global__ void col_add_k(float *dst, const float *part, int C)
{
    int c = blockIdx.x * COL_TPB + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int k = 0; k < COL_CHUNKS; k++) s += part[(size_t)k * C + c];
    dst[c] += s;
}

static void ln_bwd_w(float *dw, float *db, const float *dout,
                     const float *inp, const float *mean, const float *rstd,
                     int N, int C)
{
    float *p = col_scratch((size_t)2 * COL_CHUNKS * C);
    if (!p) return;
    float *pb = p + (size_t)COL_CHUNKS * C;
    dim3 grid(blocks(C, COL_TPB), COL_CHUNKS);
    LAUNCH(ln_bwd_w_part_k, grid, COL_TPB, p, pb, dout, inp, mean, rstd, N,
           C);
    LAUNCH(col_add_k, blocks(C, COL_TPB), COL_TPB, dw, p, C);
    if (db) LAUNCH(col_add_k, blocks(C, COL_TPB), COL_TPB, db, pb, C);
}

extern "C" void kern_cuda_layernorm_forward(float *out, float *mean,
                                            float *rstd, const float *inp,
                                            const float *w, const float *b,
                                            int N, int C, float eps)
{
    LAUNCH(ln_fwd_k, blocks(N, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, out,
           mean, rstd, inp, w, b, N, C, eps);
}

extern "C" void kern_cuda_layernorm_backward_input(
    float *dinp, const float *dout, const float *inp, const float *w,
    const float *mean, const float *rstd, int N, int C)
{
    LAUNCH(ln_bwd_in_k, blocks(N, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, dinp,
           dout, inp, w, mean, rstd, N, C);
}

extern "C" void kern_cuda_layernorm_backward_weight(
    float *dw, float *db, const float *dout, const float *inp,
    const float *mean, const float *rstd, int N, int C)
{
    ln_bwd_w(dw, db, dout, inp, mean, rstd, N, C);
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

__global__ void bias_part_k(float *part, const float *dout, int N, int OC)
{
    int o = blockIdx.x * COL_TPB + threadIdx.x, k = blockIdx.y;
    if (o >= OC) return;
    int per = (N + COL_CHUNKS - 1) / COL_CHUNKS;
    int lo = k * per, hi = min(N, lo + per);
    float s = 0.0f;
    for (int i = lo; i < hi; i++) s += dout[(size_t)i * OC + o];
    part[(size_t)k * OC + o] = s;
}

// db += column sums of dout (N x OC), as ln_bwd_w's
static void bias_grad(float *db, const float *dout, int N, int OC)
{
    float *p = col_scratch((size_t)COL_CHUNKS * OC);
    if (!p) return;
    dim3 grid(blocks(OC, COL_TPB), COL_CHUNKS);
    LAUNCH(bias_part_k, grid, COL_TPB, p, dout, N, OC);
    LAUNCH(col_add_k, blocks(OC, COL_TPB), COL_TPB, db, p, OC);
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
    if (db) bias_grad(db, dout, N, OC);
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
// As the CPU ops do it: per (batch, head) pair, the scores S = scale Q K^T
// over the whole T x T square, O = P V and their gradients are matrix
// products (cuBLAS, batched over the heads of a sequence); the causal
// softmax and its gradient run one warp per row. Q, K, V of head h sit at
// columns h*hs of q | k | v in qkv(B,T,3C); a pair's T x T square at
// (b*NH + h)*T*T.

// Row-major C (M x N, ldc) = alpha op(A) op(B) + beta C, op(A) M x K, for
// the NH heads of a sequence at strides sa, sb, sc: column-major cuBLAS
// computes C^T = op(B)^T op(A)^T, the operands swapped, their flags kept.
static void rm_gemm_heads(const char *what, cublasOperation_t ta,
                          cublasOperation_t tb, int M, int N, int K,
                          float alpha, const float *A, int lda, long long sa,
                          const float *B, int ldb, long long sb, float beta,
                          float *C, int ldc, long long sc, int heads)
{
    cublasHandle_t h = blas();
    if (!h) return;
    cublasStatus_t st = cublasSgemmStridedBatched(
        h, tb, ta, N, M, K, &alpha, B, ldb, sb, A, lda, sa, &beta, C, ldc, sc,
        heads);
    if (st != CUBLAS_STATUS_SUCCESS)
        note("cublasSgemmStridedBatched in %s failed (status %d)", what,
             (int)st);
}

static const cublasOperation_t OP_N = CUBLAS_OP_N, OP_T = CUBLAS_OP_T;

// S = scale Q K^T for every pair (written over the whole square)
static void scores(float *s, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * C3;
        rm_gemm_heads("attention scores", OP_N, OP_T, T, T, hs, scale, q, C3,
                      hs, q + C, C3, hs, 0.0f, s + (size_t)b * NH * T * T, T,
                      (long long)T * T, NH);
    }
}

// O = P V
static void context(float *out, const float *p, const float *qkv, int B,
                    int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    for (int b = 0; b < B; b++)
        rm_gemm_heads("attention context", OP_N, OP_N, T, hs, T, 1.0f,
                      p + (size_t)b * NH * T * T, T, (long long)T * T,
                      qkv + (size_t)b * T * C3 + 2 * C, C3, hs, 0.0f,
                      out + (size_t)b * T * C, C, hs, NH);
}

// dP = dO V^T (beta 1: added into dp); dV += P^T dO
static void context_bwd(float *dp, float beta, float *dqkv, const float *dout,
                        const float *p, const float *qkv, int B, int T, int C,
                        int NH)
{
    int hs = C / NH, C3 = 3 * C;
    for (int b = 0; b < B; b++) {
        size_t sq = (size_t)b * NH * T * T, v = (size_t)b * T * C3 + 2 * C;
        const float *dO = dout + (size_t)b * T * C;
        rm_gemm_heads("attention context gradient", OP_N, OP_T, T, T, hs,
                      1.0f, dO, C, hs, qkv + v, C3, hs, beta, dp + sq, T,
                      (long long)T * T, NH);
        rm_gemm_heads("attention value gradient", OP_T, OP_N, T, hs, T, 1.0f,
                      p + sq, T, (long long)T * T, dO, C, hs, 1.0f, dqkv + v,
                      C3, hs, NH);
    }
}

// dQ += scale dS K; dK += scale dS^T Q
static void scores_bwd(float *dqkv, const float *ds, const float *qkv, int B,
                       int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        size_t sq = (size_t)b * NH * T * T, q = (size_t)b * T * C3;
        rm_gemm_heads("attention query gradient", OP_N, OP_N, T, hs, T, scale,
                      ds + sq, T, (long long)T * T, qkv + q + C, C3, hs, 1.0f,
                      dqkv + q, C3, hs, NH);
        rm_gemm_heads("attention key gradient", OP_T, OP_N, T, hs, T, scale,
                      ds + sq, T, (long long)T * T, qkv + q, C3, hs, 1.0f,
                      dqkv + q + C, C3, hs, NH);
    }
}

// Row r of the squares (query t = r mod T): causal, its first t+1 entries
// softmaxed, the rest zero; else all T; in may be out.
__global__ void softmax_rows_k(float *out, const float *in, int rows, int T,
                               int causal)
{
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int n = causal ? r % T + 1 : T;
    const float *x = in + (size_t)r * T;
    float *y = out + (size_t)r * T;
    float mx = -3.0e38f;
    for (int j = lane; j < n; j += 32) mx = fmaxf(mx, x[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) {
        float v = kern_expf(x[j] - mx);
        y[j] = v;
        sum += v;
    }
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < n; j += 32) y[j] *= inv;
    for (int j = n + lane; j < T; j += 32) y[j] = 0.0f;
}

// dr = p (dr - sum(p dr)) over the row's first t+1 entries (causal; else
// all T), zero after; added into dpre (the whole row) when there is one.
__global__ void softmax_bwd_rows_k(float *dpre, float *dr, const float *p,
                                   int rows, int T, int causal)
{
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int n = causal ? r % T + 1 : T;
    size_t off = (size_t)r * T;
    float dot = 0.0f;
    for (int j = lane; j < n; j += 32) dot += p[off + j] * dr[off + j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32) {
        float g = j < n ? p[off + j] * (dr[off + j] - dot) : 0.0f;
        dr[off + j] = g;
        if (dpre) dpre[off + j] += g;
    }
}

static void softmax_rows(float *out, const float *in, int B, int T, int NH,
                         int causal)
{
    int rows = B * NH * T;
    LAUNCH(softmax_rows_k, blocks(rows, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK,
           out, in, rows, T, causal);
}

static void softmax_bwd_rows(float *dpre, float *dr, const float *p, int B,
                             int T, int NH, int causal)
{
    int rows = B * NH * T;
    LAUNCH(softmax_bwd_rows_k, blocks(rows, ROWS_PER_BLOCK),
           32 * ROWS_PER_BLOCK, dpre, dr, p, rows, T, causal);
}

extern "C" void kern_cuda_attention_forward(float *out, float *att,
                                            const float *qkv, int B, int T,
                                            int C, int NH, int causal)
{
    scores(att, qkv, B, T, C, NH);
    softmax_rows(att, att, B, T, NH, causal);
    context(out, att, qkv, B, T, C, NH);
}

extern "C" void kern_cuda_attention_backward(float *dqkv, float *scratch,
                                             const float *dout,
                                             const float *qkv,
                                             const float *att, int B, int T,
                                             int C, int NH, int causal)
{
    context_bwd(scratch, 0.0f, dqkv, dout, att, qkv, B, T, C, NH);
    softmax_bwd_rows(NULL, scratch, att, B, T, NH, causal);
    scores_bwd(dqkv, scratch, qkv, B, T, C, NH);
}

// The three-op attention: the same products and rows, one op each.

extern "C" void kern_cuda_attn_scores_forward(float *preatt, const float *qkv,
                                              int B, int T, int C, int NH)
{
    scores(preatt, qkv, B, T, C, NH);
}

extern "C" void kern_cuda_attn_softmax_forward(float *att, const float *preatt,
                                               int B, int T, int NH,
                                               int causal)
{
    softmax_rows(att, preatt, B, T, NH, causal);
}

extern "C" void kern_cuda_attn_context_forward(float *out, const float *att,
                                               const float *qkv, int B, int T,
                                               int C, int NH)
{
    context(out, att, qkv, B, T, C, NH);
}

extern "C" void kern_cuda_attn_context_backward(float *datt, float *dqkv,
                                                const float *dout,
                                                const float *att,
                                                const float *qkv, int B,
                                                int T, int C, int NH)
{
    context_bwd(datt, 1.0f, dqkv, dout, att, qkv, B, T, C, NH);
}

extern "C" void kern_cuda_attn_softmax_backward(float *dpreatt, float *datt,
                                                const float *att, int B,
                                                int T, int NH, int causal)
{
    softmax_bwd_rows(dpreatt, datt, att, B, T, NH, causal);
}

extern "C" void kern_cuda_attn_scores_backward(float *dqkv,
                                               const float *dpreatt,
                                               const float *qkv, int B, int T,
                                               int C, int NH)
{
    scores_bwd(dqkv, dpreatt, qkv, B, T, C, NH);
}

// ----------------------------------------------------- T5's attention
// Queries of Tq tokens over keys of Tk, q, k and v read through strides
// (the row of token t of batch b at (b Tq + t) ldq, (b Tk + t) ldk, head h
// at column h hs): the CPU's attnx_* (ops_cpu_t5.c).

extern "C" void kern_cuda_attnx_scores_forward(float *s, const float *q,
                                               const float *k, int ldq,
                                               int ldk, int B, int Tq, int Tk,
                                               int NH, int hs, float scale)
{
    for (int b = 0; b < B; b++)
        rm_gemm_heads("T5 attention scores", OP_N, OP_T, Tq, Tk, hs, scale,
                      q + (size_t)b * Tq * ldq, ldq, hs,
                      k + (size_t)b * Tk * ldk, ldk, hs, 0.0f,
                      s + (size_t)b * NH * Tq * Tk, Tk, (long long)Tq * Tk,
                      NH);
}

extern "C" void kern_cuda_attnx_scores_backward(float *dq, float *dk,
                                                const float *ds,
                                                const float *q, const float *k,
                                                int ldq, int ldk, int B,
                                                int Tq, int Tk, int NH, int hs,
                                                float scale)
{
    for (int b = 0; b < B; b++) {
        size_t sq = (size_t)b * NH * Tq * Tk, qo = (size_t)b * Tq * ldq,
               ko = (size_t)b * Tk * ldk;
        rm_gemm_heads("T5 attention query gradient", OP_N, OP_N, Tq, hs, Tk,
                      scale, ds + sq, Tk, (long long)Tq * Tk, k + ko, ldk, hs,
                      1.0f, dq + qo, ldq, hs, NH);
        rm_gemm_heads("T5 attention key gradient", OP_T, OP_N, Tk, hs, Tq,
                      scale, ds + sq, Tk, (long long)Tq * Tk, q + qo, ldq, hs,
                      1.0f, dk + ko, ldk, hs, NH);
    }
}

// Keys query i sees.
__device__ static int x_seen(int i, int Tk, int causal)
{
    return causal ? (i + 1 < Tk ? i + 1 : Tk) : Tk;
}

// A warp a row (b, h, i): the row plus its bias (table NULL: none),
// softmaxed over the keys it sees, zero after; att may be s.
__global__ void x_softmax_k(float *att, const float *s, const float *table,
                            const int *bucket, int rows, int NH, int Tq,
                            int Tk, int causal)
{
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int i = r % Tq, h = (r / Tq) % NH, n = x_seen(i, Tk, causal);
    const float *x = s + (size_t)r * Tk;
    float *y = att + (size_t)r * Tk;
    const int *bk = bucket ? bucket + (Tq - 1 - i) : NULL;
    float mx = -3.0e38f;
    for (int j = lane; j < n; j += 32)
        mx = fmaxf(mx, x[j] + (table ? table[bk[j] * NH + h] : 0.0f));
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) {
        float v = kern_expf(x[j] + (table ? table[bk[j] * NH + h] : 0.0f) -
                            mx);
        y[j] = v;
        sum += v;
    }
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < n; j += 32) y[j] *= inv;
    for (int j = n + lane; j < Tk; j += 32) y[j] = 0.0f;
}

extern "C" void kern_cuda_attnx_softmax_forward(float *att, const float *s,
                                                const float *table,
                                                const int *bucket, int B,
                                                int NH, int Tq, int Tk,
                                                int causal)
{
    int rows = B * NH * Tq;
    LAUNCH(x_softmax_k, blocks(rows, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK,
           att, s, table, bucket, rows, NH, Tq, Tk, causal);
}

// dr = p (dr - sum(p dr)) over the keys the row sees, 0 after; ds += dr.
__global__ void x_softmax_bwd_k(float *ds, float *dr, const float *p,
                                int rows, int Tq, int Tk, int causal)
{
    int r = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int n = x_seen(r % Tq, Tk, causal);
    size_t off = (size_t)r * Tk;
    float dot = 0.0f;
    for (int j = lane; j < n; j += 32) dot += p[off + j] * dr[off + j];
    dot = warp_sum(dot);
    for (int j = lane; j < Tk; j += 32) {
        float g = j < n ? p[off + j] * (dr[off + j] - dot) : 0.0f;
        dr[off + j] = g;
        ds[off + j] += g;
    }
}

extern "C" void kern_cuda_attnx_softmax_backward(float *ds, float *datt,
                                                 const float *att, int B,
                                                 int NH, int Tq, int Tk,
                                                 int causal)
{
    int rows = B * NH * Tq;
    LAUNCH(x_softmax_bwd_k, blocks(rows, ROWS_PER_BLOCK),
           32 * ROWS_PER_BLOCK, ds, datt, att, rows, Tq, Tk, causal);
}

// The table's gradient without atomics: a thread per (head, offset) whose
// offset is the first of its bucket sums, in a fixed order, the entries of
// every offset of that bucket (each a diagonal of every batch's square).
__global__ void x_bias_bwd_k(float *dtable, const float *ds,
                             const int *bucket, int B, int NH, int Tq, int Tk,
                             int causal)
{
    int O = Tq + Tk - 1;
    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t >= (long long)NH * O) return;
    int h = (int)(t / O), o = (int)(t % O), bk = bucket[o];
    for (int p = 0; p < o; p++)
        if (bucket[p] == bk) return;
    float sum = 0.0f;
    for (int p = o; p < O; p++) {
        if (bucket[p] != bk) continue;
        int d = p - (Tq - 1);               // j - i
        for (int b = 0; b < B; b++)
            for (int i = d < 0 ? -d : 0; i < Tq && i + d < Tk; i++) {
                int j = i + d;
                if (j >= x_seen(i, Tk, causal)) continue;
                sum += ds[(((size_t)b * NH + h) * Tq + i) * Tk + j];
            }
    }
    dtable[(size_t)bk * NH + h] += sum;
}

extern "C" void kern_cuda_attnx_bias_backward(float *dtable, const float *ds,
                                              const int *bucket, int B,
                                              int NH, int Tq, int Tk,
                                              int causal)
{
    size_t n = (size_t)NH * (Tq + Tk - 1);
    LAUNCH(x_bias_bwd_k, blocks(n, TPB), TPB, dtable, ds, bucket, B, NH, Tq,
           Tk, causal);
}

extern "C" void kern_cuda_attnx_context_forward(float *out, const float *att,
                                                const float *v, int ldv,
                                                int B, int Tq, int Tk, int NH,
                                                int hs)
{
    int D = NH * hs;
    for (int b = 0; b < B; b++)
        rm_gemm_heads("T5 attention context", OP_N, OP_N, Tq, hs, Tk, 1.0f,
                      att + (size_t)b * NH * Tq * Tk, Tk, (long long)Tq * Tk,
                      v + (size_t)b * Tk * ldv, ldv, hs, 0.0f,
                      out + (size_t)b * Tq * D, D, hs, NH);
}

extern "C" void kern_cuda_attnx_context_backward(float *datt, float *dv,
                                                 const float *dout,
                                                 const float *att,
                                                 const float *v, int ldv,
                                                 int B, int Tq, int Tk,
                                                 int NH, int hs)
{
    int D = NH * hs;
    for (int b = 0; b < B; b++) {
        size_t sq = (size_t)b * NH * Tq * Tk, vo = (size_t)b * Tk * ldv;
        const float *dO = dout + (size_t)b * Tq * D;
        rm_gemm_heads("T5 attention context gradient", OP_N, OP_T, Tq, Tk, hs,
                      1.0f, dO, D, hs, v + vo, ldv, hs, 1.0f, datt + sq, Tk,
                      (long long)Tq * Tk, NH);
        rm_gemm_heads("T5 attention value gradient", OP_T, OP_N, Tk, hs, Tq,
                      1.0f, att + sq, Tk, (long long)Tq * Tk, dO, D, hs, 1.0f,
                      dv + vo, ldv, hs, NH);
    }
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

__global__ void gelu_erf_fwd_k(float *out, const float *inp, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = kern_gelu_erf(inp[i]);
}

__global__ void gelu_erf_bwd_k(float *dinp, const float *inp,
                               const float *dout, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dinp[i] += kern_gelu_erf_grad(inp[i]) * dout[i];
}

__global__ void tanh_fwd_k(float *out, const float *inp, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = tanhf(inp[i]);
}

__global__ void relu_fwd_k(float *out, const float *inp, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

__global__ void relu_bwd_k(float *dinp, const float *inp, const float *dout,
                           size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n && inp[i] > 0.0f) dinp[i] += dout[i];
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

// A warp per row of logits (V wide): lanes on consecutive entries.
__global__ void xent_fwd_k(float *losses, float *probs, const float *logits,
                           const int *targets, int N, int V)
{
    int i = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (i >= N) return;
    const float *l = logits + (size_t)i * V;
    float *p = probs + (size_t)i * V;
    float mx = -3.0e38f;
    for (int j = lane; j < V; j += 32) mx = fmaxf(mx, l[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < V; j += 32) {
        float e = kern_expf(l[j] - mx);
        p[j] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    for (int j = lane; j < V; j += 32) p[j] *= inv;
    // a target below 0: no target, no loss
    if (lane == 0)
        losses[i] = targets[i] < 0 ? 0.0f : logf(sum) + mx - l[targets[i]];
}

__global__ void xent_bwd_k(float *dlogits, const float *probs,
                           const int *targets, float scale, int N, int V)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)N * V) return;
    int row = (int)(i / V), j = (int)(i % V);
    if (targets[row] < 0) return;
    dlogits[i] += scale * (probs[i] - (j == targets[row] ? 1.0f : 0.0f));
}

// KERN_CUDA_NORM_PARTS blocks over a fixed grid stride, each a tree in shared
// memory, then one block adds their partial sums in a tree: deterministic
// on any GPU, and the whole GPU reads x.
#define KERN_CUDA_NORM_PARTS 256

__global__ void norm_sq_part_k(double *part_out, const float *x, size_t n)
{
    __shared__ double part[TPB];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)TPB + threadIdx.x; i < n;
         i += (size_t)TPB * KERN_CUDA_NORM_PARTS)
        s += (double)x[i] * x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = TPB / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) part_out[blockIdx.x] = part[0];
}

__global__ void norm_sq_sum_k(float *out, const double *in)
{
    __shared__ double part[KERN_CUDA_NORM_PARTS];
    part[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    for (int w = KERN_CUDA_NORM_PARTS / 2; w > 0; w /= 2) {
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

extern "C" void kern_cuda_gelu_erf_forward(float *out, const float *inp,
                                           size_t n)
{
    LAUNCH(gelu_erf_fwd_k, blocks(n, TPB), TPB, out, inp, n);
}

extern "C" void kern_cuda_gelu_erf_backward(float *dinp, const float *inp,
                                            const float *dout, size_t n)
{
    LAUNCH(gelu_erf_bwd_k, blocks(n, TPB), TPB, dinp, inp, dout, n);
}

extern "C" void kern_cuda_tanh_forward(float *out, const float *inp, size_t n)
{
    LAUNCH(tanh_fwd_k, blocks(n, TPB), TPB, out, inp, n);
}

extern "C" void kern_cuda_relu_forward(float *out, const float *inp, size_t n)
{
    LAUNCH(relu_fwd_k, blocks(n, TPB), TPB, out, inp, n);
}

extern "C" void kern_cuda_relu_backward(float *dinp, const float *inp,
                                        const float *dout, size_t n)
{
    LAUNCH(relu_bwd_k, blocks(n, TPB), TPB, dinp, inp, dout, n);
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
    LAUNCH(xent_fwd_k, blocks(N, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK,
           losses, probs, logits, targets, N, V);
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
    if (!norm_part) {
        cudaError_t rc = cudaMalloc((void **)&norm_part,
                                    KERN_CUDA_NORM_PARTS * sizeof(double));
        if (rc != cudaSuccess) {
            norm_part = NULL;
            note("cudaMalloc in norm_sq failed: %s", cudaGetErrorString(rc));
            return;
        }
    }
    kern_cuda_norm_sq_parts(norm_part, x, n);
    LAUNCH(norm_sq_sum_k, 1, KERN_CUDA_NORM_PARTS, out, norm_part);
}

extern "C" void kern_cuda_norm_sq_parts(double *parts, const float *x,
                                        size_t n)
{
    LAUNCH(norm_sq_part_k, KERN_CUDA_NORM_PARTS, TPB, parts, x, n);
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

// Sentence-pair token types: positions t < T0 type 0, the rest type 1.
__global__ void type_fwd_k(float *out, const float *wtt, int T, int T0,
                           size_t n, int C)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] += wtt[((int)((i / C) % T) >= T0) * C + i % C];
}

// One thread per (type, channel), adding the rows in order: deterministic.
__global__ void type_bwd_k(float *dwtt, const float *dout, int N, int T,
                           int T0, int C)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 2 * C) return;
    int type = i / C, c = i % C;
    if (type && T0 >= T) return;    // one type: dwtt is one row
    float s = dwtt[i];
    for (int n = 0; n < N; n++)
        if ((n % T >= T0) == type) s += dout[(size_t)n * C + c];
    dwtt[i] = s;
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
    if (dwpe) atomicAdd(&dwpe[(row % T) * C + c], dout[i]);
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
                        const float *mx, const float *tl, const int *tgt,
                        int N, int Vl)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float inv = 1.0f / sum[i], *p = probs + (size_t)i * Vl;
    for (int j = 0; j < Vl; j++) p[j] *= inv;
    losses[i] = tgt[i] < 0 ? 0.0f : logf(sum[i]) + mx[i] - tl[i];
}

__global__ void xshard_bwd_k(float *dlogits, const float *probs,
                             const int *tgt, float scale, int v0, int N,
                             int Vl)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)N * Vl) return;
    int row = (int)(i / Vl), j = (int)(i % Vl);
    if (tgt[row] < 0) return;
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

extern "C" void kern_cuda_embed_type_forward(float *out, const float *wtt,
                                             int B, int T, int C, int T0)
{
    size_t n = (size_t)B * T * C;
    LAUNCH(type_fwd_k, blocks(n, TPB), TPB, out, wtt, T, T0, n, C);
}

extern "C" void kern_cuda_embed_type_backward(float *dwtt, const float *dout,
                                              int B, int T, int C, int T0)
{
    LAUNCH(type_bwd_k, blocks((size_t)2 * C, TPB), TPB, dwtt, dout, B * T, T,
           T0, C);
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
                                          const float *tl,
                                          const int *targets, int N, int Vl)
{
    LAUNCH(xnorm_k, blocks(N, 128), 128, losses, probs, sum, mx, tl, targets,
           N, Vl);
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

__global__ void scale_add_k(float *acc, const float *src, float s, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) acc[i] += s * src[i];
}

extern "C" void kern_cuda_scale_add(float *acc, const float *src, float s,
                                    size_t n)
{
    LAUNCH(scale_add_k, blocks(n, TPB), TPB, acc, src, s, n);
}

// ------------------------------------------------------------ the table

// ------------------------------------------------------- Llama's kernels

// RMSNorm: a warp per row, as the layer norm.
__global__ void rms_fwd_k(float *out, float *rstd, const float *inp,
                          const float *w, int N, int C, float eps)
{
    int i = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (i >= N) return;
    const float *x = inp + (size_t)i * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
    float r = rsqrtf(warp_sum(ss) / (float)C + eps);
    float *o = out + (size_t)i * C;
    for (int c = lane; c < C; c += 32) o[c] = x[c] * r * w[c];
    if (lane == 0) rstd[i] = r;
}

__global__ void rms_bwd_in_k(float *dinp, const float *dout,
                             const float *inp, const float *w,
                             const float *rstd, int N, int C)
{
    int i = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (i >= N) return;
    const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
    float r = rstd[i], s = 0.0f;
    for (int c = lane; c < C; c += 32) s += w[c] * d[c] * x[c] * r;
    s = warp_sum(s) / (float)C;
    float *dx = dinp + (size_t)i * C;
    for (int c = lane; c < C; c += 32)
        dx[c] += r * (w[c] * d[c] - x[c] * r * s);
}

__global__ void rms_bwd_w_part_k(float *pw, const float *dout,
                                 const float *inp, const float *rstd, int N,
                                 int C)
{
    int c = blockIdx.x * COL_TPB + threadIdx.x, k = blockIdx.y;
    if (c >= C) return;
    int per = (N + COL_CHUNKS - 1) / COL_CHUNKS;
    int lo = k * per, hi = min(N, lo + per);
    float sw = 0.0f;
    for (int i = lo; i < hi; i++)
        sw += dout[(size_t)i * C + c] * inp[(size_t)i * C + c] * rstd[i];
    pw[(size_t)k * C + c] = sw;
}

extern "C" void kern_cuda_rmsnorm_forward(float *out, float *rstd,
                                          const float *inp, const float *w,
                                          int N, int C, float eps)
{
    LAUNCH(rms_fwd_k, blocks(N, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, out,
           rstd, inp, w, N, C, eps);
}

extern "C" void kern_cuda_rmsnorm_backward_input(float *dinp,
                                                 const float *dout,
                                                 const float *inp,
                                                 const float *w,
                                                 const float *rstd, int N,
                                                 int C)
{
    LAUNCH(rms_bwd_in_k, blocks(N, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK,
           dinp, dout, inp, w, rstd, N, C);
}

extern "C" void kern_cuda_rmsnorm_backward_weight(float *dw,
                                                  const float *dout,
                                                  const float *inp,
                                                  const float *rstd, int N,
                                                  int C)
{
    float *p = col_scratch((size_t)COL_CHUNKS * C);
    if (!p) return;
    dim3 grid(blocks(C, COL_TPB), COL_CHUNKS);
    LAUNCH(rms_bwd_w_part_k, grid, COL_TPB, p, dout, inp, rstd, N, C);
    LAUNCH(col_add_k, blocks(C, COL_TPB), COL_TPB, dw, p, C);
}

// A gated MLP's gate activation and its derivative: SiLU (SwiGLU) or
// GELU's tanh form (GeGLU).
__device__ float gate_act(int gelu, float x)
{
    return gelu ? kern_gelu(x) : kern_silu(x);
}

__device__ float gate_grad(int gelu, float x)
{
    return gelu ? kern_gelu_grad(x) : kern_silu_grad(x);
}

__global__ void gated_fwd_k(float *out, const float *inp, size_t n, int F,
                            int gelu)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t row = i / F, j = i % F;
    const float *g = inp + row * 2 * F;
    out[i] = gate_act(gelu, g[j]) * g[F + j];
}

__global__ void gated_bwd_k(float *dinp, const float *inp,
                            const float *dout, size_t n, int F, int gelu)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t row = i / F, j = i % F;
    const float *g = inp + row * 2 * F;
    float *dg = dinp + row * 2 * F;
    dg[j] += dout[i] * g[F + j] * gate_grad(gelu, g[j]);
    dg[F + j] += dout[i] * gate_act(gelu, g[j]);
}

extern "C" void kern_cuda_swiglu_forward(float *out, const float *inp, int N,
                                         int F)
{
    size_t n = (size_t)N * F;
    LAUNCH(gated_fwd_k, blocks(n, TPB), TPB, out, inp, n, F, 0);
}

extern "C" void kern_cuda_swiglu_backward(float *dinp, const float *inp,
                                          const float *dout, int N, int F)
{
    size_t n = (size_t)N * F;
    LAUNCH(gated_bwd_k, blocks(n, TPB), TPB, dinp, inp, dout, n, F, 0);
}

extern "C" void kern_cuda_geglu_forward(float *out, const float *inp, int N,
                                        int F)
{
    size_t n = (size_t)N * F;
    LAUNCH(gated_fwd_k, blocks(n, TPB), TPB, out, inp, n, F, 1);
}

extern "C" void kern_cuda_geglu_backward(float *dinp, const float *inp,
                                         const float *dout, int N, int F)
{
    size_t n = (size_t)N * F;
    LAUNCH(gated_bwd_k, blocks(n, TPB), TPB, dinp, inp, dout, n, F, 1);
}

// Channel i of the head at x rotated by position t (back: the transpose).
__device__ float rope_at(const float *x, int i, int t, int hs, float base,
                        int back)
{
    int h2 = hs / 2, p = i < h2 ? i : i - h2;
    float c, s;
    kern_rope_cs(t, p, hs, base, &c, &s);
    if (back) s = -s;
    return i < h2 ? x[i] * c - x[i + h2] * s : x[i] * c + x[i - h2] * s;
}

// A thread per channel of out(N, 3 NH hs).
__global__ void expand_fwd_k(float *out, const float *raw, size_t n, int T,
                             int NH, int NKV, int hs, float base)
{
    size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (e >= n) return;
    size_t Q = (size_t)NH * hs, K = (size_t)NKV * hs, row = e / (3 * Q);
    int j = (int)(e % (3 * Q)), part = j / (int)Q, h = j % (int)Q / hs,
        i = j % hs, t = (int)(row % T);
    const float *x = raw + row * (Q + 2 * K);
    const float *src = part == 0 ? x + (size_t)h * hs
                     : x + Q + (part - 1) * K + (size_t)(h / (NH / NKV)) * hs;
    out[e] = base > 0 && part < 2 ? rope_at(src, i, t, hs, base, 0) : src[i];
}

// A thread per channel of draw(N, (NH + 2 NKV) hs): a group's heads summed
// in head order, then rotated back.
__global__ void expand_bwd_k(float *draw, const float *dout, size_t n, int T,
                             int NH, int NKV, int hs, float base)
{
    size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (e >= n) return;
    size_t Q = (size_t)NH * hs, K = (size_t)NKV * hs, W = Q + 2 * K;
    size_t row = e / W;
    int j = (int)(e % W), t = (int)(row % T), grp = NH / NKV;
    const float *d = dout + row * 3 * Q;
    if ((size_t)j < Q) {
        int h = j / hs, i = j % hs;
        draw[e] += base > 0 ? rope_at(d + (size_t)h * hs, i, t, hs, base, 1)
                            : d[(size_t)h * hs + i];
        return;
    }
    int kv = (size_t)j < Q + K, g = (int)((j - Q - (kv ? 0 : K)) / hs),
        i = (j - (int)Q) % hs;
    const float *src = d + (kv ? Q : 2 * Q);
    float acc = 0.0f;
    if (kv && base > 0) {
        int h2 = hs / 2, p = i < h2 ? i : i - h2;
        float s1 = 0.0f, s2 = 0.0f;
        for (int h = g * grp; h < (g + 1) * grp; h++) {
            s1 += src[(size_t)h * hs + p];
            s2 += src[(size_t)h * hs + p + h2];
        }
        float c, s;
        kern_rope_cs(t, p, hs, base, &c, &s);
        acc = i < h2 ? s1 * c + s2 * s : s2 * c - s1 * s;
    } else {
        for (int h = g * grp; h < (g + 1) * grp; h++)
            acc += src[(size_t)h * hs + i];
    }
    draw[e] += acc;
}

extern "C" void kern_cuda_qkv_expand_forward(float *out, const float *raw,
                                             int B, int T, int NH, int NKV,
                                             int hs, float base)
{
    size_t n = (size_t)B * T * 3 * NH * hs;
    LAUNCH(expand_fwd_k, blocks(n, TPB), TPB, out, raw, n, T, NH, NKV, hs,
           base);
}

extern "C" void kern_cuda_qkv_expand_backward(float *draw, const float *dout,
                                              int B, int T, int NH, int NKV,
                                              int hs, float base)
{
    size_t n = (size_t)B * T * (NH + 2 * NKV) * hs;
    LAUNCH(expand_bwd_k, blocks(n, TPB), TPB, draw, dout, n, T, NH, NKV, hs,
           base);
}

// QLoRA's NF4 base: a thread per weight.
__constant__ float nf4_levels[16] = {KERN_NF4_LEVELS};

__global__ void nf4_k(float *out, const unsigned char *codes,
                      const signed char *bcode, const float *gstat,
                      long long flat0, size_t n, int cols, int ld,
                      long long b0)
{
    size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (e >= n) return;
    long long i = (long long)(e / cols), j = (long long)(e % cols);
    int code = codes[e / 2] >> (4 * (e & 1)) & 15;
    long long blk = (flat0 + i * ld + j) / KERN_NF4_BLOCK;
    long long g = blk / KERN_NF4_GROUP - b0 / KERN_NF4_GROUP;
    float absmax = gstat[2 * g] +
                   gstat[2 * g + 1] * (float)bcode[blk - b0] / 127.0f;
    out[e] = nf4_levels[code] * absmax;
}

extern "C" void kern_cuda_nf4_dequantize(float *out,
                                         const unsigned char *codes,
                                         const signed char *bcode,
                                         const float *gstat, long long flat0,
                                         int rows, int cols, int ld,
                                         long long b0)
{
    size_t n = (size_t)rows * cols;
    LAUNCH(nf4_k, blocks(n, TPB), TPB, out, codes, bcode, gstat, flat0, n,
           cols, ld, b0);
}

extern "C" const kern_table kern_cuda = {
#define KERN_X_CUDA_TABLE(name, kind, args) kern_cuda_##name,
    KERN_OPS(KERN_X_CUDA_TABLE)
#undef KERN_X_CUDA_TABLE
};
