// gemm_rate: the sustained rate of cuBLAS's GEMMs on this GPU, for the
// shapes of a transformer layer (GPT-2's, as the executor's GPT-2 runs
// them, and hidden 4096's) and a square one, each run back to back for
// about the given seconds so the clocks settle where the power limit
// holds them. In bf16 (fp32 accumulate, as mixed-precision training runs
// them), tf32 (fp32 data on the tensor cores: the executor's --tf32) or
// fp32 (plain: the executor's default). Prints, per shape, TFLOP/s and
// its share of the peak given on the command line (the datasheet's dense
// figure for that precision), one line each:
//   gemm_rate PEAK_TFLOPS [SECONDS [bf16|tf32|fp32 [MxNxK...]]]
// (shapes given replace the built-in list)
// The profile's GEMM efficiency (gemm_max and its curve) is what these
// shares are compared with (tests/gpu/run.sh, check (g)). Built by make
// cuda; exits 77 without a GPU.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#define CK(x)                                                                 \
    do {                                                                      \
        cudaError_t r_ = (x);                                                 \
        if (r_ != cudaSuccess) {                                              \
            fprintf(stderr, "gemm_rate: %s: %s\n", #x,                        \
                    cudaGetErrorString(r_));                                  \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define CB(x)                                                                 \
    do {                                                                      \
        cublasStatus_t r_ = (x);                                              \
        if (r_ != CUBLAS_STATUS_SUCCESS) {                                    \
            fprintf(stderr, "gemm_rate: %s: status %d\n", #x, (int)r_);       \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

// Values in [-1, 1) from a hash of the index: the tensor cores' power
// draw depends on the data, so zeros would run faster than training does.
// bf16 when half, else fp32 (p counts bytes).
__global__ void fill(void *p, size_t n, unsigned seed, int half)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    float v = (float)(x & 0xffff) / 32768.0f - 1.0f;
    if (half) ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
    else ((float *)p)[i] = v;
}

struct shape {
    const char *what;
    int m, n, k;
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gemm_rate PEAK_TFLOPS [SECONDS "
                        "[bf16|tf32|fp32 [MxNxK...]]]\n");
        return 2;
    }
    double peak = atof(argv[1]) * 1e12;
    double secs = argc > 2 ? atof(argv[2]) : 2.0;
    const char *prec = argc > 3 ? argv[3] : "bf16";
    int half = !strcmp(prec, "bf16"), tf32 = !strcmp(prec, "tf32");
    if (!half && !tf32 && strcmp(prec, "fp32")) {
        fprintf(stderr, "gemm_rate: precision '%s': expected bf16, tf32 or "
                        "fp32\n", prec);
        return 2;
    }
    size_t eb = half ? 2 : 4;
    // a layer of GPT with hidden 4096 over 16384 tokens (a microbatch of
    // 8 x 2048): QKV, the attention output, the MLP's two; and square
    static const shape builtin[] = {
        {"qkv (gpt2)", 8192, 2304, 768},
        {"mlp up (gpt2)", 8192, 3072, 768},
        {"lm head (gpt2)", 8192, 50257, 768},
        // the same padded to a multiple of 64 (as Megatron-LM pads its
        // vocabulary), and a width and a depth one short of aligned: the
        // tensor cores' kernels want every row 16 bytes aligned
        {"lm head padded", 8192, 50304, 768},
        {"mlp up, n 3071", 8192, 3071, 768},
        {"mlp up, k 767", 8192, 3072, 767},
        {"qkv (h 4096)", 16384, 12288, 4096},
        {"attn out (h 4096)", 16384, 4096, 4096},
        {"mlp up (h 4096)", 16384, 16384, 4096},
        {"mlp down (h 4096)", 16384, 4096, 16384},
        {"qkv (h 2048)", 16384, 6144, 2048},
        {"mlp up (h 1536)", 16384, 6144, 1536},
        {"square 8192", 8192, 8192, 8192},
    };
    std::vector<shape> shapes(builtin, builtin + sizeof builtin / sizeof *builtin);
    if (argc > 4) {
        shapes.clear();
        for (int i = 4; i < argc; i++) {
            shape s = {argv[i], 0, 0, 0};
            if (sscanf(argv[i], "%dx%dx%d", &s.m, &s.n, &s.k) != 3 ||
                s.m < 1 || s.n < 1 || s.k < 1) {
                fprintf(stderr, "gemm_rate: shape '%s': expected MxNxK\n",
                        argv[i]);
                return 2;
            }
            shapes.push_back(s);
        }
    }
    // the arguments are checked before the GPU is looked for
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        fprintf(stderr, "gemm_rate: no GPU\n");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    size_t most = 0;
    for (const shape &s : shapes) {
        size_t a = (size_t)s.m * s.k, b = (size_t)s.k * s.n,
               c = (size_t)s.m * s.n;
        if (a > most) most = a;
        if (b > most) most = b;
        if (c > most) most = c;
    }
    void *A, *B, *C;
    CK(cudaMalloc(&A, most * eb));
    CK(cudaMalloc(&B, most * eb));
    CK(cudaMalloc(&C, most * eb));
    unsigned blocks = (unsigned)((most + 255) / 256);
    fill<<<blocks, 256>>>(A, most, 1u, half);
    fill<<<blocks, 256>>>(B, most, 2u, half);
    CK(cudaDeviceSynchronize());
    cublasHandle_t h;
    CB(cublasCreate(&h));
    // as the executor sets its handle: TF32 on tensor cores, or pedantic
    // fp32 (no TF32, whatever NVIDIA_TF32_OVERRIDE says)
    if (!half)
        CB(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                     : CUBLAS_PEDANTIC_MATH));
    cudaDataType dty = half ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t cty = half ? CUBLAS_COMPUTE_32F
                            : tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                   : CUBLAS_COMPUTE_32F_PEDANTIC;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("gemm_rate: %s, %s, %.1f s a shape; share of %.1f TFLOP/s\n",
           prop.name, half ? "bf16 in and out, fp32 accumulate"
                    : tf32 ? "tf32 (fp32 data on tensor cores)"
                           : "fp32 (no TF32)",
           secs, peak / 1e12);
    const float one = 1.0f, zero = 0.0f;
    for (const shape &s : shapes) {
        double flops = 2.0 * s.m * s.n * s.k;
        // row-major C[m x n] = A[m x k] B[k x n] as column-major C^T = B^T A^T
        auto gemm = [&]() {
            CB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.n, s.m, s.k, &one,
                            B, dty, s.n, A, dty, s.k, &zero, C, dty, s.n,
                            cty, CUBLAS_GEMM_DEFAULT));
        };
        for (int i = 0; i < 5; i++) gemm();
        CK(cudaDeviceSynchronize());
        // calls for about secs seconds, timed as one stretch
        CK(cudaEventRecord(e0));
        gemm();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float one_ms = 0;
        CK(cudaEventElapsedTime(&one_ms, e0, e1));
        int reps = (int)(secs * 1e3 / (one_ms > 0.01f ? one_ms : 0.01f));
        if (reps < 10) reps = 10;
        CK(cudaEventRecord(e0));
        for (int i = 0; i < reps; i++) gemm();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        double rate = flops * reps / (ms * 1e-3);
        printf("  %-20s m %6d n %6d k %6d  %8.1f TFLOP/s  %.3f of peak\n",
               s.what, s.m, s.n, s.k, rate / 1e12, rate / peak);
    }
    cublasDestroy(h);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    return 0;
}
