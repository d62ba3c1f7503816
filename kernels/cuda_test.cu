// sluice-cuda-test: every CUDA op of KERN_OPS against the CPU oracle on
// random non-zero inputs of two shapes. Exit 0 all agree, 1 a mismatch,
// 77 (the automake "skipped" code) when no CUDA device is present.
// Tolerance |cuda - cpu| <= 1e-4 + 1e-3 |cpu|: both fp32, different
// summation orders (cuBLAS, atomics in attention's backward).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"

static int failures = 0;
static int checks = 0;
static unsigned long long rng = 0x2545F4914F6CDD1Dull;

static float urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    double u = 0.1 + 0.9 * (double)(rng >> 11) / 9007199254740992.0;
    return (float)((rng & 1) ? -u : u);
}

static void cuda_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "sluice-cuda-test: %s: %s\n", what,
                cudaGetErrorString(e));
        exit(1);
    }
}

// A host buffer and its device twin.
struct buf {
    size_t n;
    float *h, *d;
};

static buf make(size_t n, int random)
{
    buf b;
    b.n = n;
    b.h = (float *)malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) b.h[i] = random ? urand() : 0.0f;
    cuda_ok(cudaMalloc(&b.d, n * sizeof(float) + 4), "cudaMalloc");
    cuda_ok(cudaMemcpy(b.d, b.h, n * sizeof(float), cudaMemcpyHostToDevice),
            "copy in");
    return b;
}

static void drop(buf &b)
{
    free(b.h);
    cudaFree(b.d);
}

static int *make_tokens(size_t n, int V, int **dev)
{
    int *h = (int *)malloc(n * sizeof(int) + 4);
    for (size_t i = 0; i < n; i++) {
        urand();
        h[i] = (int)(rng % (unsigned long long)V);
    }
    cuda_ok(cudaMalloc(dev, n * sizeof(int) + 4), "cudaMalloc");
    cuda_ok(cudaMemcpy(*dev, h, n * sizeof(int), cudaMemcpyHostToDevice),
            "copy in");
    return h;
}

// Compares the device copy of b with its host copy (the oracle's result).
static void compare(const char *op, const char *what, const buf &b)
{
    float *got = (float *)malloc(b.n * sizeof(float) + 4);
    cuda_ok(cudaDeviceSynchronize(), op);
    char why[256];
    if (kern_cuda_error(why, sizeof why)) {
        printf("  %-28s %-8s FAIL: %s\n", op, what, why);
        failures++;
    }
    cuda_ok(cudaMemcpy(got, b.d, b.n * sizeof(float), cudaMemcpyDeviceToHost),
            "copy out");
    double worst = 0;
    size_t at = 0;
    int bad = 0;
    for (size_t i = 0; i < b.n; i++) {
        double err = fabs((double)got[i] - b.h[i]);
        double lim = 1e-4 + 1e-3 * fabs(b.h[i]);
        if (err / lim > worst) {
            worst = err / lim;
            at = i;
        }
        if (!(err <= lim)) bad = 1;
    }
    checks++;
    printf("  %-28s %-8s %9zu values  worst %.2f of tolerance%s\n", op, what,
           b.n, worst, bad ? "  FAIL" : "");
    if (bad) {
        printf("    at %zu: cuda %.9g, cpu %.9g\n", at, got[at], b.h[at]);
        failures++;
    }
    free(got);
}

static void run_shape(int B, int T, int C, int NH, int V, int OC)
{
    int N = B * T;
    printf("shape B=%d T=%d C=%d NH=%d V=%d OC=%d\n", B, T, C, NH, V, OC);
    int *dtok, *dtgt;
    int *tok = make_tokens((size_t)N, V, &dtok);
    int *tgt = make_tokens((size_t)N, V, &dtgt);

    // embed
    {
        buf wte = make((size_t)V * C, 1), wpe = make((size_t)T * C, 1);
        buf out = make((size_t)N * C, 1), dout = make((size_t)N * C, 1);
        buf dwte = make((size_t)V * C, 1), dwpe = make((size_t)T * C, 1);
        kern_embed_forward(out.h, tok, wte.h, wpe.h, B, T, C);
        kern_cuda_embed_forward(out.d, dtok, wte.d, wpe.d, B, T, C);
        compare("embed_forward", "out", out);
        kern_embed_backward(dwte.h, dwpe.h, dout.h, tok, B, T, C);
        kern_cuda_embed_backward(dwte.d, dwpe.d, dout.d, dtok, B, T, C);
        compare("embed_backward", "dwte", dwte);
        compare("embed_backward", "dwpe", dwpe);
        drop(wte); drop(wpe); drop(out); drop(dout); drop(dwte); drop(dwpe);
    }
    // layernorm: forward, then the split backward and the joint one
    {
        buf x = make((size_t)N * C, 1), w = make(C, 1), b = make(C, 1);
        buf out = make((size_t)N * C, 1), mean = make(N, 1), rstd = make(N, 1);
        buf dout = make((size_t)N * C, 1), dx = make((size_t)N * C, 1);
        buf dw = make(C, 1), db = make(C, 1);
        kern_layernorm_forward(out.h, mean.h, rstd.h, x.h, w.h, b.h, N, C,
                               KERN_LN_EPS);
        kern_cuda_layernorm_forward(out.d, mean.d, rstd.d, x.d, w.d, b.d, N,
                                    C, KERN_LN_EPS);
        compare("layernorm_forward", "out", out);
        compare("layernorm_forward", "rstd", rstd);
        // BERT's epsilon
        kern_layernorm_forward(out.h, mean.h, rstd.h, x.h, w.h, b.h, N, C,
                               1e-12f);
        kern_cuda_layernorm_forward(out.d, mean.d, rstd.d, x.d, w.d, b.d, N,
                                    C, 1e-12f);
        compare("layernorm_forward (eps 1e-12)", "out", out);
        compare("layernorm_forward (eps 1e-12)", "rstd", rstd);
        kern_layernorm_backward_input(dx.h, dout.h, x.h, w.h, mean.h, rstd.h,
                                      N, C);
        kern_cuda_layernorm_backward_input(dx.d, dout.d, x.d, w.d, mean.d,
                                           rstd.d, N, C);
        compare("layernorm_backward_input", "dinp", dx);
        kern_layernorm_backward_weight(dw.h, db.h, dout.h, x.h, mean.h,
                                       rstd.h, N, C);
        kern_cuda_layernorm_backward_weight(dw.d, db.d, dout.d, x.d, mean.d,
                                            rstd.d, N, C);
        compare("layernorm_backward_weight", "dw", dw);
        compare("layernorm_backward_weight", "db", db);
        kern_layernorm_backward(dx.h, dw.h, db.h, dout.h, x.h, w.h, mean.h,
                                rstd.h, N, C);
        kern_cuda_layernorm_backward(dx.d, dw.d, db.d, dout.d, x.d, w.d,
                                     mean.d, rstd.d, N, C);
        compare("layernorm_backward", "dinp", dx);
        compare("layernorm_backward", "dw", dw);
        drop(x); drop(w); drop(b); drop(out); drop(mean); drop(rstd);
        drop(dout); drop(dx); drop(dw); drop(db);
    }
    // linear, with and without bias
    for (int bias = 1; bias >= 0; bias--) {
        buf x = make((size_t)N * C, 1), w = make((size_t)OC * C, 1);
        buf b = make(OC, 1), out = make((size_t)N * OC, 1);
        buf dout = make((size_t)N * OC, 1), dx = make((size_t)N * C, 1);
        buf dw = make((size_t)OC * C, 1), db = make(OC, 1);
        kern_linear_forward(out.h, x.h, w.h, bias ? b.h : NULL, N, C, OC);
        kern_cuda_linear_forward(out.d, x.d, w.d, bias ? b.d : NULL, N, C,
                                 OC);
        compare(bias ? "linear_forward" : "linear_forward (no bias)", "out",
                out);
        kern_linear_backward_input(dx.h, dout.h, w.h, N, C, OC);
        kern_cuda_linear_backward_input(dx.d, dout.d, w.d, N, C, OC);
        compare("linear_backward_input", "dinp", dx);
        kern_linear_backward_weight(dw.h, bias ? db.h : NULL, dout.h, x.h, N,
                                    C, OC);
        kern_cuda_linear_backward_weight(dw.d, bias ? db.d : NULL, dout.d,
                                         x.d, N, C, OC);
        compare("linear_backward_weight", "dw", dw);
        if (bias) compare("linear_backward_weight", "db", db);
        kern_linear_backward(dx.h, dw.h, bias ? db.h : NULL, dout.h, x.h, w.h,
                             N, C, OC);
        kern_cuda_linear_backward(dx.d, dw.d, bias ? db.d : NULL, dout.d, x.d,
                                  w.d, N, C, OC);
        compare("linear_backward", "dinp", dx);
        compare("linear_backward", "dw", dw);
        drop(x); drop(w); drop(b); drop(out); drop(dout); drop(dx); drop(dw);
        drop(db);
    }
    // attention: a decoder's (causal), then an encoder's (every key)
    for (int causal = 1; causal >= 0; causal--) {
        size_t na = (size_t)B * NH * T * T;
        buf qkv = make((size_t)N * 3 * C, 1), out = make((size_t)N * C, 1);
        buf att = make(na, 1), scratch = make(na, 1);
        buf dout = make((size_t)N * C, 1), dqkv = make((size_t)N * 3 * C, 1);
        kern_attention_forward(out.h, att.h, qkv.h, B, T, C, NH, causal);
        kern_cuda_attention_forward(out.d, att.d, qkv.d, B, T, C, NH, causal);
        compare(causal ? "attention_forward" : "attention_forward (encoder)",
                "out", out);
        compare(causal ? "attention_forward" : "attention_forward (encoder)",
                "att", att);
        kern_attention_backward(dqkv.h, scratch.h, dout.h, qkv.h, att.h, B, T,
                                C, NH, causal);
        kern_cuda_attention_backward(dqkv.d, scratch.d, dout.d, qkv.d, att.d,
                                     B, T, C, NH, causal);
        compare(causal ? "attention_backward" : "attention_backward (encoder)",
                "dqkv", dqkv);
        drop(qkv); drop(out); drop(att); drop(scratch); drop(dout);
        drop(dqkv);
    }
    // the three-op attention
    for (int causal = 1; causal >= 0; causal--) {
        size_t na = (size_t)B * NH * T * T;
        buf qkv = make((size_t)N * 3 * C, 1), out = make((size_t)N * C, 1);
        buf pre = make(na, 1), att = make(na, 1), datt = make(na, 1);
        buf dpre = make(na, 1), dout = make((size_t)N * C, 1);
        buf dqkv = make((size_t)N * 3 * C, 1);
        kern_attn_scores_forward(pre.h, qkv.h, B, T, C, NH);
        kern_cuda_attn_scores_forward(pre.d, qkv.d, B, T, C, NH);
        kern_attn_softmax_forward(att.h, pre.h, B, T, NH, causal);
        kern_cuda_attn_softmax_forward(att.d, pre.d, B, T, NH, causal);
        compare(causal ? "attn_softmax_forward"
                       : "attn_softmax_forward (encoder)", "att", att);
        kern_attn_context_forward(out.h, att.h, qkv.h, B, T, C, NH);
        kern_cuda_attn_context_forward(out.d, att.d, qkv.d, B, T, C, NH);
        compare("attn_context_forward", "out", out);
        kern_attn_context_backward(datt.h, dqkv.h, dout.h, att.h, qkv.h, B, T,
                                   C, NH);
        kern_cuda_attn_context_backward(datt.d, dqkv.d, dout.d, att.d, qkv.d,
                                        B, T, C, NH);
        kern_attn_softmax_backward(dpre.h, datt.h, att.h, B, T, NH, causal);
        kern_cuda_attn_softmax_backward(dpre.d, datt.d, att.d, B, T, NH,
                                        causal);
        kern_attn_scores_backward(dqkv.h, dpre.h, qkv.h, B, T, C, NH);
        kern_cuda_attn_scores_backward(dqkv.d, dpre.d, qkv.d, B, T, C, NH);
        compare(causal ? "attn_*_backward" : "attn_*_backward (encoder)",
                "dqkv", dqkv);
        drop(qkv); drop(out); drop(pre); drop(att); drop(datt); drop(dpre);
        drop(dout); drop(dqkv);
    }
    // gelu, residual
    {
        size_t n = (size_t)N * OC;
        buf x = make(n, 1), out = make(n, 1), dout = make(n, 1),
            dx = make(n, 1), y = make(n, 1), dy = make(n, 1);
        for (size_t i = 0; i < n; i++) x.h[i] *= 4.0f; // tanh saturates too
        cuda_ok(cudaMemcpy(x.d, x.h, n * sizeof(float),
                           cudaMemcpyHostToDevice), "copy in");
        kern_gelu_forward(out.h, x.h, n);
        kern_cuda_gelu_forward(out.d, x.d, n);
        compare("gelu_forward", "out", out);
        kern_gelu_backward(dx.h, x.h, dout.h, n);
        kern_cuda_gelu_backward(dx.d, x.d, dout.d, n);
        compare("gelu_backward", "dinp", dx);
        kern_relu_forward(out.h, x.h, n);
        kern_cuda_relu_forward(out.d, x.d, n);
        compare("relu_forward", "out", out);
        kern_gelu_erf_forward(out.h, x.h, n);
        kern_cuda_gelu_erf_forward(out.d, x.d, n);
        compare("gelu_erf_forward", "out", out);
        kern_gelu_erf_backward(dx.h, x.h, dout.h, n);
        kern_cuda_gelu_erf_backward(dx.d, x.d, dout.d, n);
        compare("gelu_erf_backward", "dinp", dx);
        kern_tanh_forward(out.h, x.h, n);
        kern_cuda_tanh_forward(out.d, x.d, n);
        compare("tanh_forward", "out", out);
        kern_relu_backward(dx.h, x.h, dout.h, n);
        kern_cuda_relu_backward(dx.d, x.d, dout.d, n);
        compare("relu_backward", "dinp", dx);
        kern_residual_forward(out.h, x.h, y.h, n);
        kern_cuda_residual_forward(out.d, x.d, y.d, n);
        compare("residual_forward", "out", out);
        kern_residual_backward(dx.h, dy.h, dout.h, n);
        kern_cuda_residual_backward(dx.d, dy.d, dout.d, n);
        compare("residual_backward", "da", dx);
        compare("residual_backward", "db", dy);
        drop(x); drop(out); drop(dout); drop(dx); drop(y); drop(dy);
    }
    // Llama's ops: RMSNorm, SwiGLU, the q | k | v expansion (RoPE, two
    // query heads per key and value head where the heads are even)
    {
        buf x = make((size_t)N * C, 1), w = make(C, 1),
            out = make((size_t)N * C, 1);
        buf rstd = make(N, 1), dout = make((size_t)N * C, 1),
            dx = make((size_t)N * C, 1), dw = make(C, 1);
        kern_rmsnorm_forward(out.h, rstd.h, x.h, w.h, N, C, 1e-6f);
        kern_cuda_rmsnorm_forward(out.d, rstd.d, x.d, w.d, N, C, 1e-6f);
        compare("rmsnorm_forward", "out", out);
        compare("rmsnorm_forward", "rstd", rstd);
        kern_rmsnorm_backward_input(dx.h, dout.h, x.h, w.h, rstd.h, N, C);
        kern_cuda_rmsnorm_backward_input(dx.d, dout.d, x.d, w.d, rstd.d, N, C);
        compare("rmsnorm_backward_input", "dinp", dx);
        kern_rmsnorm_backward_weight(dw.h, dout.h, x.h, rstd.h, N, C);
        kern_cuda_rmsnorm_backward_weight(dw.d, dout.d, x.d, rstd.d, N, C);
        compare("rmsnorm_backward_weight", "dw", dw);
        drop(x); drop(w); drop(out); drop(rstd); drop(dout); drop(dx); drop(dw);
    }
    {
        size_t n = (size_t)N * OC;
        buf x = make(2 * n, 1), out = make(n, 1), dout = make(n, 1),
            dx = make(2 * n, 1);
        kern_swiglu_forward(out.h, x.h, N, OC);
        kern_cuda_swiglu_forward(out.d, x.d, N, OC);
        compare("swiglu_forward", "out", out);
        kern_swiglu_backward(dx.h, x.h, dout.h, N, OC);
        kern_cuda_swiglu_backward(dx.d, x.d, dout.d, N, OC);
        compare("swiglu_backward", "dinp", dx);
        kern_geglu_forward(out.h, x.h, N, OC);
        kern_cuda_geglu_forward(out.d, x.d, N, OC);
        compare("geglu_forward", "out", out);
        kern_geglu_backward(dx.h, x.h, dout.h, N, OC);
        kern_cuda_geglu_backward(dx.d, x.d, dout.d, N, OC);
        compare("geglu_backward", "dinp", dx);
        drop(x); drop(out); drop(dout); drop(dx);
    }
    for (int g = 1; g <= 2; g++) {
        if (NH % g) continue;
        int hs = C / NH, NKV = NH / g;
        size_t raw_n = (size_t)N * (NH + 2 * NKV) * hs,
               out_n = (size_t)N * 3 * C;
        buf raw = make(raw_n, 1), out = make(out_n, 1), dout = make(out_n, 1),
            draw = make(raw_n, 1);
        float base = g == 1 ? 10000.0f : 500000.0f;
        kern_qkv_expand_forward(out.h, raw.h, B, T, NH, NKV, hs, base);
        kern_cuda_qkv_expand_forward(out.d, raw.d, B, T, NH, NKV, hs, base);
        compare("qkv_expand_forward", "out", out);
        kern_qkv_expand_backward(draw.h, dout.h, B, T, NH, NKV, hs, base);
        kern_cuda_qkv_expand_backward(draw.d, dout.d, B, T, NH, NKV, hs,
                                      base);
        compare("qkv_expand_backward", "draw", draw);
        drop(raw); drop(out); drop(dout); drop(draw);
    }
    // NF4 dequantization of a column slice of a (N, OC) tensor: random
    // codes, block codes and group statistics, as exec/nf4.c lays them
    {
        int cols = OC / 2, rows = N;
        long long flat0 = OC / 4, b0 = flat0 / KERN_NF4_BLOCK;
        long long last = flat0 + (long long)(rows - 1) * OC + cols - 1;
        size_t nb = (size_t)(last / KERN_NF4_BLOCK - b0 + 1),
               ng = (size_t)(last / KERN_NF4_BLOCK / KERN_NF4_GROUP -
                             b0 / KERN_NF4_GROUP + 1),
               nc = ((size_t)rows * cols + 1) / 2;
        unsigned char *hq = (unsigned char *)malloc(nb + nc);
        for (size_t i = 0; i < nb + nc; i++) {
            urand();
            hq[i] = (unsigned char)(rng >> 24);
        }
        for (size_t i = 0; i < nb; i++)
            if ((signed char)hq[i] == -128) hq[i] = 0;
        buf gs = make(2 * ng, 1), out = make((size_t)rows * cols, 1);
        unsigned char *dq;
        cuda_ok(cudaMalloc((void **)&dq, nb + nc), "cudaMalloc");
        cuda_ok(cudaMemcpy(dq, hq, nb + nc, cudaMemcpyHostToDevice),
                "copy in");
        kern_nf4_dequantize(out.h, hq + nb, (const signed char *)hq, gs.h,
                            flat0, rows, cols, OC, b0);
        kern_cuda_nf4_dequantize(out.d, dq + nb, (const signed char *)dq,
                                 gs.d, flat0, rows, cols, OC, b0);
        compare("nf4_dequantize", "out", out);
        cudaFree(dq);
        free(hq);
        drop(gs); drop(out);
    }
    // softmax cross-entropy
    {
        size_t n = (size_t)N * V;
        buf logits = make(n, 1), probs = make(n, 1), losses = make(N, 1),
            dl = make(n, 1);
        kern_softmax_xent_forward(losses.h, probs.h, logits.h, tgt, N, V);
        kern_cuda_softmax_xent_forward(losses.d, probs.d, logits.d, dtgt, N,
                                       V);
        compare("softmax_xent_forward", "losses", losses);
        compare("softmax_xent_forward", "probs", probs);
        kern_softmax_xent_backward(dl.h, probs.h, tgt, 1.0f / N, N, V);
        kern_cuda_softmax_xent_backward(dl.d, probs.d, dtgt, 1.0f / N, N, V);
        compare("softmax_xent_backward", "dlogits", dl);
        // a masked LM's targets: every other row none (-1)
        int *dmt;
        int *mt = make_tokens((size_t)N, V, &dmt);
        for (int i = 1; i < N; i += 2) mt[i] = -1;
        cuda_ok(cudaMemcpy(dmt, mt, (size_t)N * sizeof(int),
                           cudaMemcpyHostToDevice), "copy in");
        kern_softmax_xent_forward(losses.h, probs.h, logits.h, mt, N, V);
        kern_cuda_softmax_xent_forward(losses.d, probs.d, logits.d, dmt, N,
                                       V);
        compare("softmax_xent_forward (masked)", "losses", losses);
        kern_softmax_xent_backward(dl.h, probs.h, mt, 1.0f / N, N, V);
        kern_cuda_softmax_xent_backward(dl.d, probs.d, dmt, 1.0f / N, N, V);
        compare("softmax_xent_backward (masked)", "dlogits", dl);
        free(mt);
        cudaFree(dmt);
        drop(logits); drop(probs); drop(losses); drop(dl);
    }
    // tensor parallelism over the vocabulary: rank 1 of 2 (its shard
    // starts at v0 = Vl and is padded when V is odd)
    {
        int Vl = (V + 1) / 2, Vv = V - Vl;
        size_t nl = (size_t)N * Vl;
        buf wte = make((size_t)Vl * C, 1), wpe = make((size_t)T * C, 1);
        buf out = make((size_t)N * C, 1), dout = make((size_t)N * C, 1);
        buf dwte = make((size_t)Vl * C, 1), dwpe = make((size_t)T * C, 1);
        kern_embed_shard_forward(out.h, tok, wte.h, Vl, Vl, N, C);
        kern_cuda_embed_shard_forward(out.d, dtok, wte.d, Vl, Vl, N, C);
        compare("embed_shard_forward", "out", out);
        kern_embed_pos_forward(out.h, wpe.h, B, T, C);
        kern_cuda_embed_pos_forward(out.d, wpe.d, B, T, C);
        compare("embed_pos_forward", "out", out);
        // BERT's sentence-pair token types (the first T/2 positions type 0)
        buf wtt = make(2 * (size_t)C, 1), dwtt = make(2 * (size_t)C, 1);
        kern_embed_type_forward(out.h, wtt.h, B, T, C, T / 2);
        kern_cuda_embed_type_forward(out.d, wtt.d, B, T, C, T / 2);
        compare("embed_type_forward", "out", out);
        kern_embed_type_backward(dwtt.h, dout.h, B, T, C, T / 2);
        kern_cuda_embed_type_backward(dwtt.d, dout.d, B, T, C, T / 2);
        compare("embed_type_backward", "dwtt", dwtt);
        drop(wtt); drop(dwtt);
        kern_embed_shard_backward(dwte.h, dwpe.h, dout.h, tok, Vl, Vl, B, T,
                                  C);
        kern_cuda_embed_shard_backward(dwte.d, dwpe.d, dout.d, dtok, Vl, Vl, B,
                                       T, C);
        compare("embed_shard_backward", "dwte", dwte);
        compare("embed_shard_backward", "dwpe", dwpe);
        drop(wte); drop(wpe); drop(out); drop(dout); drop(dwte); drop(dwpe);
        // the loss's phases in order, rank 0's maxima random
        buf logits = make(nl, 1), probs = make(nl, 1), mx = make(2 * N, 1);
        buf sum = make(N, 1), tl = make(N, 1), losses = make(N, 1);
        buf dl = make(nl, 1);
        kern_xent_shard_max(mx.h + N, logits.h, N, Vl, Vv);
        kern_cuda_xent_shard_max(mx.d + N, logits.d, N, Vl, Vv);
        compare("xent_shard_max", "mx", mx);
        kern_xent_shard_exp(probs.h, sum.h, tl.h, mx.h, logits.h, tgt, 2, Vl,
                            N, Vl, Vv);
        kern_cuda_xent_shard_exp(probs.d, sum.d, tl.d, mx.d, logits.d, dtgt, 2,
                                 Vl, N, Vl, Vv);
        compare("xent_shard_exp", "probs", probs);
        compare("xent_shard_exp", "sum", sum);
        compare("xent_shard_exp", "tl", tl);
        compare("xent_shard_exp", "mx", mx);
        kern_xent_shard_norm(losses.h, probs.h, sum.h, mx.h, tl.h, tgt, N,
                             Vl);
        kern_cuda_xent_shard_norm(losses.d, probs.d, sum.d, mx.d, tl.d, dtgt,
                                  N, Vl);
        compare("xent_shard_norm", "losses", losses);
        compare("xent_shard_norm", "probs", probs);
        kern_xent_shard_backward(dl.h, probs.h, tgt, 1.0f / N, Vl, N, Vl);
        kern_cuda_xent_shard_backward(dl.d, probs.d, dtgt, 1.0f / N, Vl, N,
                                      Vl);
        compare("xent_shard_backward", "dlogits", dl);
        // a masked LM's rows without a target (-1): no loss, no gradient;
        // the phases again from fresh buffers
        int *dmt;
        int *mt = make_tokens((size_t)N, V, &dmt);
        for (int i = 0; i < N; i += 2) mt[i] = -1;
        cuda_ok(cudaMemcpy(dmt, mt, (size_t)N * sizeof(int),
                           cudaMemcpyHostToDevice), "copy in");
        buf mx2 = make(2 * N, 1), sum2 = make(N, 1), tl2 = make(N, 1);
        buf pr2 = make(nl, 1), ls2 = make(N, 1), dl2 = make(nl, 1);
        kern_xent_shard_max(mx2.h + N, logits.h, N, Vl, Vv);
        kern_cuda_xent_shard_max(mx2.d + N, logits.d, N, Vl, Vv);
        kern_xent_shard_exp(pr2.h, sum2.h, tl2.h, mx2.h, logits.h, mt, 2, Vl,
                            N, Vl, Vv);
        kern_cuda_xent_shard_exp(pr2.d, sum2.d, tl2.d, mx2.d, logits.d, dmt,
                                 2, Vl, N, Vl, Vv);
        compare("xent_shard_exp (masked)", "tl", tl2);
        kern_xent_shard_norm(ls2.h, pr2.h, sum2.h, mx2.h, tl2.h, mt, N, Vl);
        kern_cuda_xent_shard_norm(ls2.d, pr2.d, sum2.d, mx2.d, tl2.d, dmt, N,
                                  Vl);
        compare("xent_shard_norm (masked)", "losses", ls2);
        kern_xent_shard_backward(dl2.h, pr2.h, mt, 1.0f / N, Vl, N, Vl);
        kern_cuda_xent_shard_backward(dl2.d, pr2.d, dmt, 1.0f / N, Vl, N, Vl);
        compare("xent_shard_backward (masked)", "dlogits", dl2);
        drop(mx2); drop(sum2); drop(tl2); drop(pr2); drop(ls2); drop(dl2);
        free(mt);
        cudaFree(dmt);
        kern_accumulate(dl.h, logits.h, nl);
        kern_cuda_accumulate(dl.d, logits.d, nl);
        compare("accumulate", "acc", dl);
        drop(logits); drop(probs); drop(mx); drop(sum); drop(tl);
        drop(losses); drop(dl);
    }
    // optimizer
    {
        size_t n = (size_t)OC * C + 3;
        buf p = make(n, 1), m = make(n, 0), v = make(n, 0), g = make(n, 1);
        buf nsq = make(1, 0);
        kern_norm_sq(nsq.h, g.h, n);
        kern_cuda_norm_sq(nsq.d, g.d, n);
        compare("norm_sq", "out", nsq);
        for (int t = 1; t <= 3; t++) {
            kern_adamw_update(p.h, m.h, v.h, g.h, n, 1e-2f, 0.9f, 0.95f, 1e-8f,
                              0.1f, 0.5f, t);
            kern_cuda_adamw_update(p.d, m.d, v.d, g.d, n, 1e-2f, 0.9f, 0.95f,
                                   1e-8f, 0.1f, 0.5f, t);
        }
        compare("adamw_update", "p", p);
        compare("adamw_update", "m", m);
        compare("adamw_update", "v", v);
        drop(p); drop(m); drop(v); drop(g); drop(nsq);
    }
    free(tok);
    free(tgt);
    cudaFree(dtok);
    cudaFree(dtgt);
}

// T5's attention (attnx_*): cross-attention (q of Tq rows over k | v of
// Tk, ld 2 NH hs) and fused self-attention (q | k | v, ld 3 NH hs), causal
// and not, with no bias and with a bias table whose buckets repeat (and
// whose last row no offset uses), scales other than 1, heads wider than
// C / NH; a cross-attention that is causal and biased takes Tq != Tk
// through the causal clamp and the table's gradient; and scale_add.
static void run_t5(int B, int Tq, int Tk, int NH, int hs, int NB)
{
    static const struct {
        int self, causal, bias;
        float scale;
        const char *what;
    } cfg[] = {
        {0, 0, 0, 1.0f, " (cross)"},
        {0, 1, 1, 0.37f, " (cross, causal, bias)"},
        {1, 0, 1, 1.0f, " (enc)"},
        {1, 1, 1, 1.0f, " (dec)"},
        {1, 1, 0, 0.125f, " (dec, no bias)"},
    };
    printf("T5 attention B=%d Tq=%d Tk=%d NH=%d hs=%d table rows %d\n", B, Tq,
           Tk, NH, hs, NB);
    for (size_t kind = 0; kind < sizeof cfg / sizeof cfg[0]; kind++) {
        int self = cfg[kind].self, causal = cfg[kind].causal;
        float scale = cfg[kind].scale;
        const char *what = cfg[kind].what;
        int tq = Tq, tk = self ? Tq : Tk, D = NH * hs;
        int ldq = self ? 3 * D : D, ldk = self ? 3 * D : 2 * D;
        size_t nq = (size_t)B * tq * ldq, nk = (size_t)B * tk * ldk,
               na = (size_t)B * NH * tq * tk, no = (size_t)B * tq * D;
        buf q = make(nq, 1), kv = make(self ? 1 : nk, 1);
        buf sc = make(na, 1), att = make(na, 1), datt = make(na, 1);
        buf ds = make(na, 1), out = make(no, 1), dout = make(no, 1);
        buf dq = make(nq, 1), dkv = make(self ? 1 : nk, 1);
        buf tb = make((size_t)NB * NH, 1), dtb = make((size_t)NB * NH, 1);
        buf ip = make(na, 0);
        int O = tq + tk - 1;
        int *bh = (int *)malloc(sizeof(int) * (size_t)O), *bd;
        // repeated values; row NB - 1 is never looked up
        for (int o = 0; o < O; o++) bh[o] = (o * 5 / 3) % (NB - 1);
        cuda_ok(cudaMalloc(&bd, sizeof(int) * (size_t)O), "cudaMalloc");
        cuda_ok(cudaMemcpy(bd, bh, sizeof(int) * (size_t)O,
                           cudaMemcpyHostToDevice), "copy in");
        const float *th = cfg[kind].bias ? tb.h : NULL,
                    *td = cfg[kind].bias ? tb.d : NULL;
        const float *kh = self ? q.h + D : kv.h, *kd = self ? q.d + D : kv.d;
        const float *vh = self ? q.h + 2 * D : kv.h + D,
                    *vd = self ? q.d + 2 * D : kv.d + D;
        float *dkh = self ? dq.h + D : dkv.h, *dkd = self ? dq.d + D : dkv.d;
        float *dvh = self ? dq.h + 2 * D : dkv.h + D,
              *dvd = self ? dq.d + 2 * D : dkv.d + D;
        char op[64];
        kern_attnx_scores_forward(sc.h, q.h, kh, ldq, ldk, B, tq, tk, NH, hs,
                                  scale);
        kern_cuda_attnx_scores_forward(sc.d, q.d, kd, ldq, ldk, B, tq, tk, NH,
                                       hs, scale);
        snprintf(op, sizeof op, "attnx_scores_forward%s", what);
        compare(op, "s", sc);
        kern_attnx_softmax_forward(att.h, sc.h, th, bh, B, NH, tq, tk,
                                   causal);
        kern_cuda_attnx_softmax_forward(att.d, sc.d, td, bd, B, NH, tq, tk,
                                        causal);
        snprintf(op, sizeof op, "attnx_softmax_forward%s", what);
        compare(op, "att", att);
        // in place (att over s), each side from its own scores
        memcpy(ip.h, sc.h, na * sizeof(float));
        cuda_ok(cudaMemcpy(ip.d, sc.d, na * sizeof(float),
                           cudaMemcpyDeviceToDevice), "copy");
        kern_attnx_softmax_forward(ip.h, ip.h, th, bh, B, NH, tq, tk, causal);
        kern_cuda_attnx_softmax_forward(ip.d, ip.d, td, bd, B, NH, tq, tk,
                                        causal);
        compare(op, "in place", ip);
        kern_attnx_context_forward(out.h, att.h, vh, ldk, B, tq, tk, NH, hs);
        kern_cuda_attnx_context_forward(out.d, att.d, vd, ldk, B, tq, tk, NH,
                                        hs);
        snprintf(op, sizeof op, "attnx_context_forward%s", what);
        compare(op, "out", out);
        kern_attnx_context_backward(datt.h, dvh, dout.h, att.h, vh, ldk, B,
                                    tq, tk, NH, hs);
        kern_cuda_attnx_context_backward(datt.d, dvd, dout.d, att.d, vd, ldk,
                                         B, tq, tk, NH, hs);
        snprintf(op, sizeof op, "attnx_context_backward%s", what);
        compare(op, "datt", datt);
        compare(op, self ? "dqkv" : "dkv", self ? dq : dkv);
        kern_attnx_softmax_backward(ds.h, datt.h, att.h, B, NH, tq, tk,
                                    causal);
        kern_cuda_attnx_softmax_backward(ds.d, datt.d, att.d, B, NH, tq, tk,
                                         causal);
        snprintf(op, sizeof op, "attnx_softmax_backward%s", what);
        compare(op, "ds", ds);
        compare(op, "datt", datt);
        if (cfg[kind].bias) {
            kern_attnx_bias_backward(dtb.h, ds.h, bh, B, NH, tq, tk, causal);
            kern_cuda_attnx_bias_backward(dtb.d, ds.d, bd, B, NH, tq, tk,
                                          causal);
            snprintf(op, sizeof op, "attnx_bias_backward%s", what);
            compare(op, "dtable", dtb);
        }
        kern_attnx_scores_backward(dq.h, dkh, ds.h, q.h, kh, ldq, ldk, B, tq,
                                   tk, NH, hs, scale);
        kern_cuda_attnx_scores_backward(dq.d, dkd, ds.d, q.d, kd, ldq, ldk, B,
                                        tq, tk, NH, hs, scale);
        snprintf(op, sizeof op, "attnx_scores_backward%s", what);
        compare(op, self ? "dqkv" : "dq", dq);
        if (!self) compare(op, "dkv", dkv);
        drop(q); drop(kv); drop(sc); drop(att); drop(datt); drop(ds);
        drop(out); drop(dout); drop(dq); drop(dkv); drop(tb); drop(dtb);
        drop(ip);
        free(bh);
        cudaFree(bd);
    }
    size_t n = 1000;
    buf acc = make(n, 1), src = make(n, 1);
    kern_scale_add(acc.h, src.h, 0.125f, n);
    kern_cuda_scale_add(acc.d, src.d, 0.125f, n);
    compare("scale_add", "acc", acc);
    drop(acc); drop(src);
}

int main(void)
{
    char why[256];
    if (!kern_cuda_available(why, sizeof why)) {
        printf("sluice-cuda-test: skipped: %s (the CUDA kernels need a GPU "
               "to run; exit 77)\n",
               why);
        return 77;
    }
    cudaDeviceProp prop;
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    printf("sluice-cuda-test: %s, CUDA ops of KERN_OPS vs the CPU oracle\n",
           prop.name);
    kern_set_threads(1);
    run_shape(2, 17, 32, 4, 61, 48);
    run_shape(3, 64, 128, 4, 256, 384);
    run_t5(2, 13, 21, 4, 12, 8);
    run_t5(1, 70, 33, 3, 40, 32);
    kern_cuda_shutdown();
    printf("%d comparisons, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
