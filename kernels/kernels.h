/* kernels: forward and backward math of a GPT-style decoder, on the CPU
 * (C + OpenBLAS, the oracle) and in CUDA (the .cu files beside it, same list).
 *
 * Shape letters, used everywhere: B batch, T sequence length, C channels
 * (hidden size), NH attention heads (head size hs = C/NH), V vocabulary,
 * N rows (= B*T), OC output channels of a linear layer, n a flat element
 * count. Tensors are dense, row-major, fp32: (B,T,C) means index
 * (b*T + t)*C + c. The fused attention input qkv is (B,T,3C) holding
 * q | k | v, each C wide with head h at columns h*hs .. h*hs+hs-1.
 *
 * Backward conventions: every backward function ADDS into its gradient
 * outputs (gradients accumulate over residual branches, over tied weights
 * and over microbatches); callers zero them once. A parameterised op has
 * _backward_input (gradient of its input) and _backward_weight (gradient of
 * its weights), callable separately (zero-bubble schedules defer the weight
 * part) or together through _backward; both orders give bit-identical
 * results. Optional tensors (biases) may be NULL. No function allocates
 * or fails. The CPU ops split their rows over kern_set_threads() threads;
 * the element-wise math is shared with CUDA through kern_math.h. */
#ifndef SLUICE_KERNELS_H
#define SLUICE_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The op list, declared once. Each entry: the op's name, its kind (the
 * op kind of the model zoo's op graph, see kern_kind) and its argument
 * list. The CPU backend defines
 * kern_<name>, the CUDA backend kern_cuda_<name> with the same arguments
 * (device pointers there). */
#define KERN_OPS(X)                                                           \
    /* out(B,T,C) = wte[tokens] + wpe[t]; wpe NULL: no position table */  \
    X(embed_forward, EMBED,                                          \
      (float *out, const int *tokens, const float *wte, const float *wpe,     \
       int B, int T, int C))                                                  \
    /* dwte(V,C), dwpe(T,C) += (dwpe NULL: none) */                       \
    X(embed_backward, EMBED,                                         \
      (float *dwte, float *dwpe, const float *dout, const int *tokens,        \
       int B, int T, int C))                                                  \
    /* out(N,C); mean, rstd (N) kept for backward; eps (GPT-2's 1e-5,     \
     * KERN_LN_EPS; BERT's 1e-12) */                                      \
    X(layernorm_forward, NORM,                                        \
      (float *out, float *mean, float *rstd, const float *inp,               \
       const float *w, const float *b, int N, int C, float eps))              \
    X(layernorm_backward_input, NORM,                                 \
      (float *dinp, const float *dout, const float *inp, const float *w,      \
       const float *mean, const float *rstd, int N, int C))                   \
    X(layernorm_backward_weight, NORM,                                \
      (float *dw, float *db, const float *dout, const float *inp,             \
       const float *mean, const float *rstd, int N, int C))                   \
    X(layernorm_backward, NORM,                                       \
      (float *dinp, float *dw, float *db, const float *dout,                  \
       const float *inp, const float *w, const float *mean,                   \
       const float *rstd, int N, int C))                                      \
    /* out(N,OC) = inp(N,C) w(OC,C)^T + b(OC); GEMM m=N n=OC k=C */          \
    X(linear_forward, LINEAR,                                       \
      (float *out, const float *inp, const float *w, const float *b, int N,  \
       int C, int OC))                                                        \
    /* dinp(N,C) += dout(N,OC) w; GEMM m=N n=C k=OC */                        \
    X(linear_backward_input, LINEAR,                                \
      (float *dinp, const float *dout, const float *w, int N, int C,         \
       int OC))                                                               \
    /* dw(OC,C) += dout^T inp, db(OC) += column sums; GEMM m=OC n=C k=N */    \
    X(linear_backward_weight, LINEAR,                               \
      (float *dw, float *db, const float *dout, const float *inp, int N,     \
       int C, int OC))                                                        \
    X(linear_backward, LINEAR,                                      \
      (float *dinp, float *dw, float *db, const float *dout,                  \
       const float *inp, const float *w, int N, int C, int OC))              \
    /* softmax(q k^T / sqrt(hs)) v per head: out(B,T,C) from qkv(B,T,3C);  \
     * att(B,NH,T,T) keeps the probabilities for backward. causal 1: query \
     * t sees keys 0..t (a decoder); 0: every key (an encoder, BERT) */    \
    X(attention_forward, ATTN,                                        \
      (float *out, float *att, const float *qkv, int B, int T, int C,        \
       int NH, int causal))                                                   \
    /* dqkv(B,T,3C) +=; scratch is B*NH*T*T floats of workspace */           \
    X(attention_backward, ATTN,                                       \
      (float *dqkv, float *scratch, const float *dout, const float *qkv,     \
       const float *att, int B, int T, int C, int NH, int causal))            \
    /* The same attention as three ops (a pipeline stage may end between  \
     * them), bit-identical to attention_forward/backward when composed:    \
     * preatt(B,NH,T,T) = q k^T / sqrt(hs) (masked entries unspecified) */  \
    X(attn_scores_forward, ATTN,                                      \
      (float *preatt, const float *qkv, int B, int T, int C, int NH))        \
    /* att(B,NH,T,T) = softmax of preatt rows; causal: masked entries 0 */  \
    X(attn_softmax_forward, ATTN,                                     \
      (float *att, const float *preatt, int B, int T, int NH, int causal))   \
    /* out(B,T,C) = att v per head */                                        \
    X(attn_context_forward, ATTN,                                     \
      (float *out, const float *att, const float *qkv, int B, int T, int C,  \
       int NH))                                                               \
    /* datt(B,NH,T,T) += dout v^T; the v part of dqkv += att^T dout */       \
    X(attn_context_backward, ATTN,                                    \
      (float *datt, float *dqkv, const float *dout, const float *att,        \
       const float *qkv, int B, int T, int C, int NH))                        \
    /* dpreatt += att (datt - rowsum(att datt)); datt is used as scratch   \
     * and left overwritten */                                               \
    X(attn_softmax_backward, ATTN,                                    \
      (float *dpreatt, float *datt, const float *att, int B, int T, int NH,  \
       int causal))                                                           \
    /* the q and k parts of dqkv += dpreatt k / sqrt(hs), dpreatt^T q ... */ \
    X(attn_scores_backward, ATTN,                                     \
      (float *dqkv, const float *dpreatt, const float *qkv, int B, int T,    \
       int C, int NH))                                                        \
    X(gelu_forward, ACT, (float *out, const float *inp, size_t n))     \
    /* GELU's exact form x Phi(x), by erf (Hugging Face's "gelu": BERT's; \
     * gelu_* above is the tanh form, GPT-2's) */                         \
    X(gelu_erf_forward, ACT, (float *out, const float *inp, size_t n))   \
    X(gelu_erf_backward, ACT,                                            \
      (float *dinp, const float *inp, const float *dout, size_t n))       \
    /* out = tanh(inp) (BERT's pooler) */                                 \
    X(tanh_forward, ACT, (float *out, const float *inp, size_t n))       \
    /* out = max(inp, 0) (OPT's and T5's MLP); its gradient is 0 at 0, \
     * so the backward's inp may be out (the same signs) */               \
    X(relu_forward, ACT, (float *out, const float *inp, size_t n))       \
    X(relu_backward, ACT,                                                \
      (float *dinp, const float *inp, const float *dout, size_t n))       \
    X(gelu_backward, ACT,                                              \
      (float *dinp, const float *inp, const float *dout, size_t n))           \
    X(residual_forward, RESIDUAL,                                 \
      (float *out, const float *a, const float *b, size_t n))                 \
    X(residual_backward, RESIDUAL,                                \
      (float *da, float *db, const float *dout, size_t n))                    \
    /* probs(N,V) = softmax(logits); losses(N) = -log probs[target]; a    \
     * target below 0 is no target (a masked LM's unmasked token): loss 0 \
     * and, in the backward, no gradient */                               \
    X(softmax_xent_forward, LOSS,                                     \
      (float *losses, float *probs, const float *logits, const int *targets, \
       int N, int V))                                                         \
    /* dlogits += scale (probs - onehot(target)); scale = dloss per row      \
     * (1/N for a mean loss) */                                               \
    X(softmax_xent_backward, LOSS,                                    \
      (float *dlogits, const float *probs, const int *targets, float scale,  \
       int N, int V))                                                         \
    /* Tensor parallelism over a vocabulary (Megatron-LM): a rank holds   \
     * rows [v0, v0+Vl) of the token table and those columns of the       \
     * logits. out(N,C) = wte[token - v0] for the shard's tokens, 0 for   \
     * the others (the ranks' outputs sum to the lookup) */               \
    X(embed_shard_forward, EMBED,                                         \
      (float *out, const int *tokens, const float *wte, int v0, int Vl,   \
       int N, int C))                                                     \
    /* out(B,T,C) += wpe[t] */                                            \
    X(embed_pos_forward, EMBED,                                           \
      (float *out, const float *wpe, int B, int T, int C))                \
    /* Token types of a sentence pair (BERT): positions t < T0 are type 0, \
     * the others type 1. out(B,T,C) += wtt[type of t] */                  \
    X(embed_type_forward, EMBED,                                          \
      (float *out, const float *wtt, int B, int T, int C, int T0))        \
    /* dwtt(2,C) += the sums of dout's rows of each type, in row order    \
     * (T0 >= T: one type, dwtt(1,C)) */                                  \
    X(embed_type_backward, EMBED,                                         \
      (float *dwtt, const float *dout, int B, int T, int C, int T0))      \
    /* dwte(Vl,C) += for the shard's tokens, dwpe(T,C) += for all (or  \
     * NULL) */                                                           \
    X(embed_shard_backward, EMBED,                                        \
      (float *dwte, float *dwpe, const float *dout, const int *tokens,    \
       int v0, int Vl, int B, int T, int C))                              \
    /* The loss of a shard's logits(N,Vl), of which the first Vv columns  \
     * are words (the rest pads the last shard), in three phases around   \
     * two sums over the ranks. mx(N) = row maxima (-3e38 if Vv is 0) */  \
    X(xent_shard_max, LOSS,                                               \
      (float *mx, const float *logits, int N, int Vl, int Vv))            \
    /* mx(tp,N) holds every rank's maxima (the sum of each rank's slot):  \
     * mx[0..N) becomes their maximum; probs(N,Vl) = exp(logit - max), 0  \
     * past Vv; sum(N) their row sums; tl(N) the target's logit where the \
     * shard holds the target, else 0 */                                  \
    X(xent_shard_exp, LOSS,                                               \
      (float *probs, float *sum, float *tl, float *mx,                    \
       const float *logits, const int *targets, int tp, int v0, int N,    \
       int Vl, int Vv))                                                   \
    /* sum and tl summed over the ranks: probs /= sum, losses(N) =        \
     * log(sum) + max - tl, 0 where the target is below 0 (none) */       \
    X(xent_shard_norm, LOSS,                                              \
      (float *losses, float *probs, const float *sum, const float *mx,    \
       const float *tl, const int *targets, int N, int Vl))               \
    /* dlogits(N,Vl) += scale (probs - onehot(target - v0)); rows whose  \
     * target is below 0 get nothing */                                   \
    X(xent_shard_backward, LOSS,                                          \
      (float *dlogits, const float *probs, const int *targets,            \
       float scale, int v0, int N, int Vl))                               \
    /* acc += src: gradients of one tensor from several consumers, ranks \
     * or replicas */                                                     \
    X(accumulate, RESIDUAL, (float *acc, const float *src, size_t n))     \
    /* out[0] = sum of x^2 (the global gradient norm is its square root   \
     * over all tensors); accumulated in double on the CPU */                \
    X(norm_sq, OPTIMIZER,                                        \
      (float *out, const float *x, size_t n))                                 \
    /* AdamW on n parameters with gradient g*grad_scale (clipping); step t  \
     * counts from 1; decoupled weight decay wd */                           \
    X(adamw_update, OPTIMIZER,                                   \
      (float *p, float *m, float *v, const float *g, size_t n, float lr,     \
       float beta1, float beta2, float eps, float wd, float grad_scale,      \
       int t))                                                                \
    /* Llama-style decoders. RMSNorm (Zhang and Sennrich 2019):           \
     * out(N,C) = x rstd w with rstd(N) = 1/sqrt(mean(x^2) + eps) kept    \
     * for backward */                                                    \
    X(rmsnorm_forward, NORM,                                              \
      (float *out, float *rstd, const float *inp, const float *w, int N,  \
       int C, float eps))                                                 \
    X(rmsnorm_backward_input, NORM,                                       \
      (float *dinp, const float *dout, const float *inp, const float *w,  \
       const float *rstd, int N, int C))                                  \
    X(rmsnorm_backward_weight, NORM,                                      \
      (float *dw, const float *dout, const float *inp, const float *rstd, \
       int N, int C))                                                     \
    /* SwiGLU (Shazeer 2020): a row of inp(N,2F) is gate | up;            \
     * out(N,F) = silu(gate) up */                                        \
    X(swiglu_forward, ACT, (float *out, const float *inp, int N, int F))  \
    X(swiglu_backward, ACT,                                               \
      (float *dinp, const float *inp, const float *dout, int N, int F))   \
    /* GeGLU (Shazeer 2020; T5 1.1's "gated-gelu"): out = gelu(gate) up, \
     * GELU's tanh form (Hugging Face's gelu_new), inp as SwiGLU's */     \
    X(geglu_forward, ACT, (float *out, const float *inp, int N, int F))   \
    X(geglu_backward, ACT,                                                \
      (float *dinp, const float *inp, const float *dout, int N, int F))   \
    /* raw(B,T,(NH+2 NKV) hs) is q | k | v of NH query heads and NKV key  \
     * and value heads (NKV divides NH); out(B,T,3 NH hs) is the q | k | v \
     * the attention ops read: query head h has the k and v of head       \
     * h / (NH/NKV) (grouped-query attention), and with a RoPE base > 0   \
     * q and k are rotated by their position t (RoPE, Su et al. 2021:     \
     * channel i of a head paired with i + hs/2, angle t base^(-2i/hs), as \
     * Llama's Hugging Face layout pairs them; hs even) */                \
    X(qkv_expand_forward, ATTN,                                           \
      (float *out, const float *raw, int B, int T, int NH, int NKV,       \
       int hs, float base))                                               \
    /* draw += the gradient of raw: rotated back, a group's heads summed  \
     * in head order */                                                   \
    X(qkv_expand_backward, ATTN,                                          \
      (float *draw, const float *dout, int B, int T, int NH, int NKV,     \
       int hs, float base))                                               \
    /* Attention of T5's kind (Raffel et al. 2020): Tq queries over Tk   \
     * keys, q, k and v each read from a wider tensor (the row of token  \
     * t of batch b starts at (b Tq + t) ldq, (b Tk + t) ldk, ldv; head  \
     * h at column h hs), so one set serves the fused q | k | v of self- \
     * attention and the separate q and k | v of cross-attention.        \
     * s(B,NH,Tq,Tk) = scale q k^T per head */                            \
    X(attnx_scores_forward, ATTN,                                         \
      (float *s, const float *q, const float *k, int ldq, int ldk, int B, \
       int Tq, int Tk, int NH, int hs, float scale))                       \
    /* dq += scale ds k, dk += scale ds^T q (dq, dk laid out as q, k) */   \
    X(attnx_scores_backward, ATTN,                                        \
      (float *dq, float *dk, const float *ds, const float *q,             \
       const float *k, int ldq, int ldk, int B, int Tq, int Tk, int NH,   \
       int hs, float scale))                                               \
    /* att = softmax over the row of s + bias, where query i's bias for   \
     * key j is table[bucket[j - i + Tq - 1] NH + h] (table NULL: none);  \
     * causal: query i sees keys 0..i, the others set to 0 */             \
    X(attnx_softmax_forward, ATTN,                                        \
      (float *att, const float *s, const float *table, const int *bucket, \
       int B, int NH, int Tq, int Tk, int causal))                         \
    /* ds += att (datt - rowsum(att datt)); datt is scratch, left         \
     * overwritten */                                                      \
    X(attnx_softmax_backward, ATTN,                                       \
      (float *ds, float *datt, const float *att, int B, int NH, int Tq,   \
       int Tk, int causal))                                                \
    /* The bias table's gradient: dtable[bucket[j - i + Tq - 1] NH + h] += \
     * ds[b,h,i,j] over the entries the softmax saw (ds: the gradient of \
     * the biased scores) */                                               \
    X(attnx_bias_backward, ATTN,                                          \
      (float *dtable, const float *ds, const int *bucket, int B, int NH,  \
       int Tq, int Tk, int causal))                                        \
    /* out(B,Tq,NH hs) = att v per head */                                 \
    X(attnx_context_forward, ATTN,                                        \
      (float *out, const float *att, const float *v, int ldv, int B,      \
       int Tq, int Tk, int NH, int hs))                                    \
    /* datt += dout v^T, dv += att^T dout */                               \
    X(attnx_context_backward, ATTN,                                       \
      (float *datt, float *dv, const float *dout, const float *att,       \
       const float *v, int ldv, int B, int Tq, int Tk, int NH, int hs))    \
    /* acc += s src (T5's tied head reads its input scaled) */            \
    X(scale_add, RESIDUAL,                                                \
      (float *acc, const float *src, float s, size_t n))                  \
    /* QLoRA's 4-bit base (Dettmers et al. 2023): out(rows,cols) of a     \
     * weight stored as NF4 codes, two a byte, low nibble first, in      \
     * row-major order. Element (i,j) is element flat0 + i ld + j of its  \
     * tensor, whose blocks of KERN_NF4_BLOCK elements have an absmax    \
     * kept in 8 bits: bcode[blk] with blk = flat / KERN_NF4_BLOCK - b0,  \
     * absmax = gstat[2g] + gstat[2g+1] bcode / 127 for the block's group \
     * of KERN_NF4_GROUP blocks, g counted from b0's;                     \
     * out = KERN_NF4_LEVELS[code] absmax */                              \
    X(nf4_dequantize, LINEAR,                                             \
      (float *out, const unsigned char *codes, const signed char *bcode,  \
       const float *gstat, long long flat0, int rows, int cols, int ld,   \
       long long b0))

/* Op kinds (what the simulator's cost model calls them). */
typedef enum {
    KERN_KIND_EMBED, KERN_KIND_NORM, KERN_KIND_LINEAR, KERN_KIND_ATTN,
    KERN_KIND_ACT, KERN_KIND_RESIDUAL, KERN_KIND_LOSS, KERN_KIND_OPTIMIZER,
    KERN_KIND_COUNT
} kern_kind;

/* One id per entry of KERN_OPS, in list order. */
typedef enum {
#define KERN_X_ENUM(name, kind, args) KERN_OP_##name,
    KERN_OPS(KERN_X_ENUM)
#undef KERN_X_ENUM
    KERN_OP_COUNT
} kern_op;

/* CPU backend. */
#define KERN_X_DECL(name, kind, args) void kern_##name args;
KERN_OPS(KERN_X_DECL)
#undef KERN_X_DECL

/* One backend's ops as a table, for callers that pick a backend at run
 * time (the pipeline executor): field <name> is kern_<name> in kern_cpu,
 * kern_cuda_<name> in kern_cuda (kernels_cuda.h). */
typedef struct kern_table {
#define KERN_X_FIELD(name, kind, args) void (*name) args;
    KERN_OPS(KERN_X_FIELD)
#undef KERN_X_FIELD
} kern_table;

extern const kern_table kern_cpu;

/* "linear_forward" etc. and the kind of each op ("linear"). Lent. */
const char *kern_op_name(kern_op op);
kern_kind kern_op_kind(kern_op op);
const char *kern_kind_name(kern_kind k);

/* Threads for the CPU kernels: every op splits its rows (heads, channels)
 * over n threads of sluice's own pool, each calling OpenBLAS
 * single-threaded. n >= 1 (capped at 256); returns the count in force.
 * Results depend on n only through GEMM rounding (see test_kern.c). Not
 * to be called while an op runs. */
int kern_set_threads(int n);
int kern_get_threads(void);
/* The instruction set of the element-wise and row kernels: "avx2" (AVX2
 * and FMA, picked where the CPU has them) or "base" (x86-64 baseline or
 * any other CPU). kern_set_isa forces one ("base" always works); -1 when
 * this CPU or build lacks it. Not to be called while an op runs. */
const char *kern_get_isa(void);
int kern_set_isa(const char *isa);
/* OpenBLAS's name for the kernels it picked for this CPU ("Haswell"). */
const char *kern_blas_core(void);

/* Epsilon of GPT-2's layer norm, the executor's unless a model says
 * another. */
#define KERN_LN_EPS 1e-5f

/* The widest attention head qkv_expand takes (hs). */
#define KERN_HEAD_MAX 2048

/* NF4, the 4-bit NormalFloat of QLoRA (Dettmers et al. 2023, appendix E;
 * the table bitsandbytes ships): quantiles of N(0,1) scaled to [-1, 1],
 * with an exact 0. Blocks of 64 weights share an absmax; groups of 256
 * blocks quantize their absmaxes to 8 bits (double quantization). */
#define KERN_NF4_LEVELS                                                     \
    -1.0f, -0.6961928009986877f, -0.5250730514526367f,                      \
        -0.39491748809814453f, -0.28444138169288635f,                       \
        -0.18477343022823334f, -0.09105003625154495f, 0.0f,                 \
        0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,   \
        0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,    \
        0.7229568362236023f, 1.0f
#define KERN_NF4_BLOCK 64
#define KERN_NF4_GROUP 256

#ifdef __cplusplus
}
#endif

#endif
