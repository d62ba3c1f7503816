/* exec: runs models for real. The single-device reference trainer: a
 * GPT-style decoder (GPT-2 layout: learned positions, pre-LayerNorm,
 * GELU MLP, optional linear biases, optionally tied LM head; or Llama's:
 * RoPE, RMSNorm, SwiGLU, grouped key and value heads) trained with
 * AdamW on byte-level text, on the CPU through kernels/. Later schedules
 * are checked against it. Per-op times are recorded under the signature
 * the simulator's cost model uses (op kind, GEMM m/n/k or bytes moved).
 * Ownership: *_new returns objects freed by the matching *_free (NULL is
 * fine); getters lend. Errors: util_err with code 2 for bad input. */
#ifndef SLUICE_EXEC_H
#define SLUICE_EXEC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/kernels.h"
#include "profiles/profiles.h"
#include "sim/ir.h"
#include "util/util.h"

/* ------------------------------------------------------------ model */

/* What the trainer builds. Shape letters as in kernels/kernels.h. */
typedef struct exec_gpt_config {
    int vocab;     /* V */
    int max_pos;   /* positions the table holds; T <= max_pos */
    int hidden;    /* C */
    int layers;    /* L */
    int heads;     /* NH; divides C */
    int ffn;       /* F, MLP inner width */
    int bias;      /* linear layers carry biases */
    int tied;      /* the LM head is the token embedding */
    /* Llama's choices (all 0: GPT-2's) */
    int kv_heads;  /* key and value heads, dividing NH (grouped-query
                    * attention); 0: one per query head */
    int rmsnorm;   /* RMSNorm (a weight, no bias) for every LayerNorm */
    int swiglu;    /* the MLP is (silu(x Wg) * x Wu) Wd: fcw holds a
                    * layer's F gate rows, then its F up rows */
    float rope_theta; /* > 0: rotary positions on q and k with this base
                    * (10000, Llama 3's 500000) and no position table
                    * (max_pos 0: any sequence length); 0: none */
    float norm_eps;   /* RMSNorm's epsilon; LayerNorm's, 0 for GPT-2's
                    * 1e-5 (KERN_LN_EPS; BERT's is 1e-12) */
    /* OPT's choices (0: GPT-2's) */
    int relu;      /* the MLP's activation is ReLU, not GELU */
    int pos_offset; /* position t is row t + pos_offset of the table
                    * (max_pos + pos_offset rows: OPT's 2) */
    /* BERT's choices (0: a decoder's) */
    int encoder;   /* an encoder trained as a masked LM: every query sees
                    * every key, each sublayer's LayerNorm after its
                    * residual, a LayerNorm on the embeddings, and the
                    * head's transform (dense, GELU, LayerNorm) before the
                    * decoder, which has a bias of its own */
    int type_vocab; /* token-type rows (encoder only; 0: none): a sequence
                    * is a pair, its first half type 0, its second type 1
                    * (all type 0 with one row) */
    int pooler;    /* encoder only: tanh(x W + b) of each sequence's first
                    * token, as BERT's pooler; no loss reads it, so its
                    * weights get no gradient and only weight decay */
    int gelu_erf;  /* GELU (the MLP's and BERT's head transform's) in its
                    * exact form, by erf; 0: the tanh form (GPT-2's) */
    /* T5's choices (Raffel et al. 2020; 0: a decoder's or BERT's) */
    int t5;        /* an encoder-decoder: layers encoder layers, then
                    * dec_layers decoder layers each with cross-attention
                    * over the encoder's output; no position table but a
                    * relative-position bias per stack (rel_buckets rows
                    * of a bias per head, distances up to rel_max_dist);
                    * scores not scaled; RMSNorm, no biases, ReLU; a tied
                    * head reads its input scaled by 1/sqrt(hidden) */
    int dec_layers;
    int rel_buckets, rel_max_dist;
    int head_dim;  /* a head's width (hs) where it is not hidden / heads
                    * (T5-3B's 128 beside 1024 / 32); 0: hidden / heads */
} exec_gpt_config;


/* Key and value heads; rows of a layer's q | k | v weight (C + 2 NKV hs);
 * rows of its MLP up weight (F, 2F with SwiGLU); whether the attention
 * reads the projection through kern qkv_expand (RoPE or shared heads). */
static inline int exec_kv_heads(const exec_gpt_config *c)
{
    return c->kv_heads > 0 ? c->kv_heads : c->heads;
}

/* A head's width hs, and the attention's inner width NH hs (D: C but
 * where a T5 says another head width). */
static inline int exec_hs(const exec_gpt_config *c)
{
    return c->head_dim > 0 ? c->head_dim : c->hidden / c->heads;
}

static inline size_t exec_inner(const exec_gpt_config *c)
{
    return (size_t)c->heads * (size_t)exec_hs(c);
}

static inline size_t exec_qkv_rows(const exec_gpt_config *c)
{
    return exec_inner(c) + 2 * (size_t)exec_kv_heads(c) * (size_t)exec_hs(c);
}

/* Layers of the per-layer tensors (T5: the encoder's, then the
 * decoder's). */
static inline int exec_stack_layers(const exec_gpt_config *c)
{
    return c->layers + (c->t5 ? c->dec_layers : 0);
}

static inline size_t exec_fc_rows(const exec_gpt_config *c)
{
    return (size_t)c->ffn * (c->swiglu ? 2 : 1);
}

/* The LayerNorm's epsilon (KERN_LN_EPS unless the model says). */
static inline float exec_ln_eps(const exec_gpt_config *c)
{
    return c->norm_eps > 0 ? c->norm_eps : KERN_LN_EPS;
}

/* The first position of token type 1 in a sequence of T (T: none). */
static inline int exec_type_split(const exec_gpt_config *c, int T)
{
    return c->type_vocab >= 2 ? T / 2 : T;
}

/* The tokens a masked LM predicts in a sequence of T: 15% of them (Devlin
 * et al. 2019), at least one. */
static inline int exec_mlm_count(int T)
{
    int k = (int)(0.15 * T + 0.5);
    return k < 1 ? 1 : k;
}

/* Whether q and k are rotated (RoPE): a base is set. */
static inline int exec_rope(const exec_gpt_config *c)
{
    return c->rope_theta > 0;
}

static inline int exec_qkv_expands(const exec_gpt_config *c)
{
    return exec_rope(c) || exec_kv_heads(c) != c->heads;
}

/* T5's relative-position buckets (Raffel et al. 2020; Hugging Face's
 * T5Attention._relative_position_bucket, in its float32 arithmetic):
 * out[o] for o = 0 .. Tq + Tk - 2 is the bucket of key j seen from query
 * i where o = j - i + Tq - 1. Bidirectional (an encoder's): half the nb
 * buckets for keys after the query; causal (a decoder's): keys after it
 * share bucket 0. Distances below half a side's buckets have one each,
 * the rest logarithmically more up to maxd, beyond which one holds all. */
void exec_t5_buckets(int *out, int Tq, int Tk, int bidirectional, int nb,
                     int maxd);

/* Fills c from a model-zoo spec. Families and features the CPU trainer
 * does not implement (T5, a gated MLP other than SwiGLU, a head size
 * other than C/NH, a scaled RoPE) are an error naming the feature, code
 * 2. The spec's dtype and dropout are
 * not: the CPU trains in fp32 and without dropout (deterministic), and
 * callers may say so. where names the spec for messages. */
int exec_gpt_config_from_spec(const prof_model_spec *s, exec_gpt_config *c,
                              const char *where, util_err *e);
/* Checks sizes (positive, heads divide hidden, ...); code 2. */
int exec_gpt_config_check(const exec_gpt_config *c, util_err *e);

/* Memory a model of this config needs to train with batch B, length T:
 * parameters, gradients and AdamW's two moments (4 floats per parameter)
 * plus activations and their gradients. Bytes. */
typedef struct exec_gpt_mem {
    size_t params;          /* parameter count */
    double param_bytes;     /* params + grads + AdamW m and v */
    double act_bytes;       /* activations + activation gradients */
    double total_bytes;
} exec_gpt_mem;
exec_gpt_mem exec_gpt_mem_need(const exec_gpt_config *c, int B, int T);

/* The parameter tensors of the arena, in order: token and position
 * tables, per-layer tensors stacked over layers (ln1w holds L x C, qkvw
 * L x 3C x C, ...), the final norm and, untied only, the LM head. What a
 * config does not have is empty: wpe with RoPE, the norms' biases with
 * RMSNorm, the linear biases without bias; qkvw holds L x (C + 2 NKV hs)
 * x C and fcw L x 2F x C with SwiGLU. */
typedef enum {
    EXEC_P_WTE, EXEC_P_WPE, EXEC_P_LN1W, EXEC_P_LN1B, EXEC_P_QKVW,
    EXEC_P_QKVB, EXEC_P_ATTPROJW, EXEC_P_ATTPROJB, EXEC_P_LN2W, EXEC_P_LN2B,
    EXEC_P_FCW, EXEC_P_FCB, EXEC_P_FCPROJW, EXEC_P_FCPROJB, EXEC_P_LNFW,
    EXEC_P_LNFB, EXEC_P_LMW,
    /* an encoder's (BERT): token types, the embeddings' LayerNorm, the
     * head's dense transform (its LayerNorm is lnf), the pooler, the
     * decoder's bias */
    EXEC_P_WTT, EXEC_P_LNEW, EXEC_P_LNEB, EXEC_P_MLMW, EXEC_P_MLMB,
    EXEC_P_POOLW, EXEC_P_POOLB, EXEC_P_LMB,
    /* T5's: the decoder layers' cross-attention (its RMSNorm, q, k | v
     * and output projections, stacked over the decoder's layers), the
     * encoder's and the decoder's relative-position bias tables
     * (rel_buckets x heads each), the encoder's final RMSNorm (lnf is the
     * decoder's) */
    EXEC_P_XLNW, EXEC_P_XQW, EXEC_P_XKVW, EXEC_P_XOW, EXEC_P_RELE,
    EXEC_P_RELD, EXEC_P_ENCNW,
    EXEC_P_COUNT
} exec_gpt_tensor_id;

/* One parameter tensor of the arena. */
typedef struct exec_tensor {
    char name[16];   /* "qkvw", "wte", ... */
    size_t off, n;   /* offset into the arena and element count */
    int decay;       /* gets weight decay (matrices and embeddings) */
} exec_tensor;

typedef struct exec_timing exec_timing;
typedef struct exec_gpt exec_gpt;

/* A model with its parameter arena (params | grads | m | v) and activation
 * arena for batch B and length T, parameters initialised from seed (GPT-2:
 * N(0, 0.02), residual projections scaled by 1/sqrt(2L), biases 0, norms 1).
 * Allocation failure aborts (callers check exec_gpt_mem_need first). */
exec_gpt *exec_gpt_new(const exec_gpt_config *c, int B, int T, uint64_t seed);
void exec_gpt_free(exec_gpt *m);

const exec_gpt_config *exec_gpt_cfg(const exec_gpt *m);
size_t exec_gpt_num_params(const exec_gpt *m);
/* The arenas, lent: params, grads, AdamW first and second moments. */
float *exec_gpt_params(exec_gpt *m);
float *exec_gpt_grads(exec_gpt *m);
float *exec_gpt_adam_m(exec_gpt *m);
float *exec_gpt_adam_v(exec_gpt *m);
/* Parameter tensors in arena order; *n gets the count. Lent. */
const exec_tensor *exec_gpt_tensors(const exec_gpt *m, int *n);
/* The same table for a config without building a model: fills
 * t[EXEC_P_COUNT] and returns the parameter count P. */
size_t exec_gpt_param_table(const exec_gpt_config *c, exec_tensor *t);
/* The initial parameters exec_gpt_new gives for seed, into p (P floats),
 * so a pipeline's stages start from the reference's weights. */
void exec_gpt_init_params(const exec_gpt_config *c, uint64_t seed, float *p);
/* splitmix64: the executor's seeded random numbers (initialisations), the
 * same sequence on every machine; advances *state. */
uint64_t exec_splitmix(uint64_t *state);
/* Times every kernel call into t (NULL: stop). Not owned. */
void exec_gpt_set_timing(exec_gpt *m, exec_timing *t);

/* Forward over tokens (B,T) with next-token targets (B,T), both in
 * [0, V). Returns the mean cross-entropy in nats. */
float exec_gpt_forward(exec_gpt *m, const int *tokens, const int *targets);
/* Zeroes the parameter gradients. */
void exec_gpt_zero_grad(exec_gpt *m);
/* Backward of the last forward's mean loss; adds into the gradients. */
void exec_gpt_backward(exec_gpt *m);
/* Optimizer hyper-parameters. */
typedef struct exec_adamw {
    float lr, beta1, beta2, eps, weight_decay;
    float clip;      /* global gradient-norm limit; 0: none */
} exec_adamw;
/* One AdamW step (t counts from 1) with global-norm clipping. Returns the
 * gradient norm before clipping. */
float exec_gpt_step(exec_gpt *m, const exec_adamw *o, int t);
/* Plain SGD without momentum (as Hydra trains its jobs), decoupled weight
 * decay as AdamW's: p -= lr (scale g + wd p), element by element in index
 * order. */
void exec_sgd_update(float *p, const float *g, size_t n, float lr, float wd,
                     float scale);
/* One SGD step of the whole model (o's lr, weight_decay and clip; the
 * betas unused). Returns the gradient norm before clipping. */
float exec_gpt_sgd_step(exec_gpt *m, const exec_adamw *o);
/* The step both take, on any arena of the layout tt[EXEC_P_COUNT] (P
 * floats each: parameters p, gradients g, AdamW moments am and av, unused
 * by SGD): the gradients' global norm in index order, the clip factor,
 * then every tensor's AdamW (step t, from 1) or SGD update. Ops are timed
 * into m's timing when m is given (NULL: none). Returns the norm. */
float exec_params_step(exec_gpt *m, const exec_tensor *tt, size_t P,
                       float *p, const float *g, float *am, float *av,
                       const exec_adamw *o, int t, int sgd);

/* ------------------------------------------------------------- LoRA */

/* LoRA adapters (Hu et al. 2021) as the pipeline executor trains them
 * under a fine-tuning mode lora:R[:targets] (exec/lora.c): beside each
 * targeted weight matrix W of every block (k inputs, n outputs; the
 * fused q|k|v projection holds three, q, k and v; GPT's MLP has no gate;
 * a T5 decoder layer's cross-attention has its own q, k, v and out), A
 * (k x R) and B (R x n), and y = x W + s (x A) B with s = 1. They live
 * in an arena of their own, block by block (a T5's encoder's, then its
 * decoder's), targets in the order q, k, v, out, the cross-attention's
 * q, k, v, out (T5's decoder only), gate (SwiGLU only), up, down, each
 * adapter's A as the kernels store a weight (R x k: A transposed), then
 * its B (R x n): tensor 2i is adapter i's A, 2i+1 its B. */

/* The adapters of mode f on c (none unless f is LoRA): fills t (two per
 * adapter; NULL: only count) and returns the arena's floats; *n gets the
 * tensors. */
size_t exec_lora_table(const exec_gpt_config *c, const prof_finetune *f,
                       exec_tensor *t, int *n);
/* A target bit ORed with EXEC_LORA_CROSS: the matrix of a T5 decoder
 * layer's cross-attention (q, k, v, out), where the bit alone is its
 * self-attention's. */
#define EXEC_LORA_CROSS (1u << 16)
/* The adapter of target (one PROF_LORA_* bit, EXEC_LORA_CROSS allowed)
 * in block `layer` (a T5's decoder layers follow its encoder's), -1 when
 * that matrix has none. */
int exec_lora_index(const exec_gpt_config *c, const prof_finetune *f,
                    int layer, unsigned target);
/* The inputs k and outputs n of the weight target adapts (q: the heads'
 * width, k and v: the key and value heads'). */
void exec_lora_dims(const exec_gpt_config *c, unsigned target, size_t *k,
                    size_t *n);
/* Initial adapters into lora (the arena): every A from a uniform in
 * [-1/sqrt(k), 1/sqrt(k)] drawn from seed, every B zero, so a run's
 * first step computes the base model exactly. */
void exec_lora_init(const exec_gpt_config *c, const prof_finetune *f,
                    uint64_t seed, float *lora);
/* Whether fine-tuning mode f trains adapters (LoRA, QLoRA). */
static inline int exec_ft_adapts(const prof_finetune *f)
{
    return f && (f->kind == PROF_FT_LORA || f->kind == PROF_FT_QLORA);
}

/* QLoRA's base (exec/nf4.c): a slice of rows x cols weights, element
 * (i,j) at flat0 + i ld + j of its tensor, stored in `floats` floats: its
 * nb blocks' group statistics (ng groups: mean, scale), its blocks'
 * 8-bit absmax codes from block b0, its NF4 codes (kernels.h,
 * nf4_dequantize). */
typedef struct exec_nf4 {
    long long flat0, b0;
    int rows, cols, ld;
    size_t nb, ng, floats;
} exec_nf4;

exec_nf4 exec_nf4_geom(size_t flat0, size_t rows, size_t cols, size_t ld);
/* Quantizes the slice q of tensor t (tn floats, the whole tensor: blocks
 * and groups are the tensor's, so every layout rounds alike) into st
 * (q->floats floats). */
void exec_nf4_pack(const exec_nf4 *q, float *st, const float *t, size_t tn);
/* The parts of a packed slice. */
void exec_nf4_view(const exec_nf4 *q, const float *st, const float **gstat,
                   const signed char **bcode, const unsigned char **codes);

/* The merged model: params (P floats in arena order) W += s A B for every
 * adapter, summed in double, so a plain model computes what the base with
 * its adapters computes (within fp32 rounding). */
void exec_lora_merge(const exec_gpt_config *c, const prof_finetune *f,
                     const float *lora, float *params);

/* ----------------------------------------------------------- timing */

/* Per-op times aggregated by signature: the kernel op, its shape letters
 * and the cost model's quantities (GEMM m,n,k; bytes moved; FLOPs). */
exec_timing *exec_timing_new(void);
void exec_timing_free(exec_timing *t);
void exec_timing_reset(exec_timing *t);
/* Records one call: ns measured with the monotonic clock. as names the
 * model op kind when it differs from the kernel's ("lm_head" for the head's
 * linear layer, as the simulator's op graph says), else NULL. dims are B,
 * T, C, NH, V, OC (0 where the op has none), gemm m, n, k (0 when the op
 * is not one GEMM). as must outlive t (a string literal). */
void exec_timing_add(exec_timing *t, kern_op op, const char *as,
                     const int dims[6], const double gemm[3], double flops,
                     double bytes, uint64_t ns);
/* Total ns per op kind (KERN_KIND_*), per op and overall. */
uint64_t exec_timing_kind_ns(const exec_timing *t, kern_kind k);
uint64_t exec_timing_op_ns(const exec_timing *t, kern_op op);
uint64_t exec_timing_total_ns(const exec_timing *t);
/* ns spent inside sgemm calls: linear ops and attention's products. */
uint64_t exec_timing_gemm_ns(const exec_timing *t);
/* JSON: {"ops": [{"op", "kind", "phase", "shape", "gemm", "flops",
 * "bytes", "calls", "ns_total", "ns_mean", "ns_min"}...]}; kind is the
 * model op kind (embed, norm, linear, attn, act, residual, lm_head, loss,
 * optimizer). New ref. */
json_t *exec_timing_json(const exec_timing *t);
/* Monotonic clock in ns. */
uint64_t exec_now_ns(void);

/* ----------------------------------------------------------- corpus */

/* Byte-level text: tokens are bytes (V = 256). The text is cut in blocks
 * of max(1 KiB, 4(T+1)) bytes; every tenth block validates, the others
 * train. */
typedef struct exec_corpus {
    char path[512];
    unsigned char *bytes;
    size_t len, block;
    size_t n_train, n_val;  /* bytes in each split */
    double entropy_nats;    /* unigram entropy of the training bytes */
} exec_corpus;

/* Loads path; missing, unreadable, empty, or shorter than ten blocks is an
 * error, code 2. */
int exec_corpus_load(exec_corpus *c, const char *path, int T, util_err *e);
void exec_corpus_free(exec_corpus *c);
/* Batch `index` of a split (0 train, 1 validation) for seed: B windows of
 * T+1 bytes at pseudo-random offsets, a pure function of (seed, split,
 * index), so a resumed run sees the same batches. */
void exec_corpus_batch(const exec_corpus *c, int split, uint64_t seed,
                       uint64_t index, int B, int T, int *tokens,
                       int *targets);
/* Rows b0 .. b0+nb-1 of that batch (row b does not depend on B), into
 * tokens and targets of nb x T: a pipeline's microbatch. */
void exec_corpus_rows(const exec_corpus *c, int split, uint64_t seed,
                      uint64_t index, int b0, int nb, int T, int *tokens,
                      int *targets);
/* Whether model c can read the corpus's byte tokens: 256 words at least,
 * and an encoder one more for its mask token (the vocabulary's last).
 * Code 2 naming `where` if not. */
int exec_corpus_vocab_check(const exec_gpt_config *c, const char *where,
                            util_err *e);
/* An encoder's (c->encoder) masked-LM batch from rows b0..b0+nb-1 as
 * exec_corpus_rows read them (the same split, seed and index; tokens and
 * targets nb x T): in each row exec_mlm_count(T) positions drawn from
 * them and the row are predicted, their targets the token read and
 * every other target -1 (none); of the drawn positions' inputs 80% become
 * the mask token (the vocabulary's last), 10% a random token and 10% stay
 * (Devlin et al. 2019). A decoder's batch is left as it is. */
void exec_mlm_mask(const exec_gpt_config *c, int split, uint64_t seed,
                   uint64_t index, int b0, int nb, int T, int *tokens,
                   int *targets);

/* ------------------------------------------------------- checkpoint */

/* The options of the run that saved a checkpoint which decide how it
 * goes on (format version 6; has 0 in older files): the steps its
 * learning rates' schedule spans, their peak and warm-up (-1: a tenth of
 * the steps), weight decay, clipping, and the training text (data_sum:
 * util_fnv1a of the text file, 0 where it was not read). */
typedef struct exec_ckpt_run {
    int has, steps, warmup;
    float lr, weight_decay, clip;
    uint64_t data_sum;
} exec_ckpt_run;

/* Binary checkpoint: magic "SLUICEC1", format version, config, batch,
 * length, seed and step (and from version 6 the run's options), then
 * parameters and AdamW moments, then an FNV-1a 64 checksum of
 * everything before it. Native little-endian floats. Written with
 * util_write_atomic: a failed save leaves the file that was there
 * untouched. */
typedef struct exec_ckpt_meta {
    exec_gpt_config cfg;
    int B, T;
    uint64_t seed;
    int64_t step;           /* optimizer steps done */
    exec_ckpt_run run;
} exec_ckpt_meta;

/* The bytes --save writes for a model of P parameters (its weights and
 * AdamW moments), with a LoRA run's state file beside it when NL > 0
 * (the base, NL adapter floats and their moments). */
double exec_ckpt_bytes(size_t P, size_t NL);
int exec_ckpt_save(const char *path, exec_gpt *m, const exec_ckpt_meta *meta,
                   util_err *e);
/* The same file from plain arrays of P floats in arena order (params,
 * AdamW m, AdamW v), P = exec_gpt_param_table(&meta->cfg, ...). */
int exec_ckpt_save_state(const char *path, const float *params,
                         const float *adam_m, const float *adam_v,
                         const exec_ckpt_meta *meta, util_err *e);
/* Loads a checkpoint of config c into arrays of P floats; adam_m/adam_v
 * may be NULL (weights only, to start a fine-tuning). Another model's
 * checkpoint is an error naming both, code 2. */
int exec_ckpt_load_state(const char *path, const exec_gpt_config *c,
                         float *params, float *adam_m, float *adam_v,
                         exec_ckpt_meta *meta, util_err *e);
/* Reads only the header (to size a model before loading). A file that is
 * not a checkpoint, of another version, truncated or corrupt: code 2. */
int exec_ckpt_peek(const char *path, exec_ckpt_meta *meta, util_err *e);
/* Loads into m, whose config must equal the checkpoint's (else code 2,
 * naming both). */
int exec_ckpt_load(const char *path, exec_gpt *m, exec_ckpt_meta *meta,
                   util_err *e);

/* A LoRA or QLoRA run's own state, which its merged checkpoint cannot
 * give back: FILE.lora beside FILE (exec_lora_ckpt_path), written by
 * --save, read by --resume. Header (model, fine-tuning mode, batch,
 * length, seed, step, counts), the base as the run started from it (P
 * floats: QLoRA's before rounding), the adapters (NL floats,
 * exec_lora_table's arena) and their AdamW m and v, an FNV-1a 64
 * checksum; written atomically. Another model or mode, a truncated or
 * corrupt file, values that are not finite: code 2. */
void exec_lora_ckpt_path(const char *ckpt, char *out, size_t n);
/* Whether a run of plan p can go on from its checkpoint: a LoRA or QLoRA
 * plan's through FILE.lora, except an offload schedule's (its tier keeps
 * the adapters' moments). */
int exec_plan_resumable(const sim_plan *p);
int exec_lora_ckpt_save(const char *path, const exec_ckpt_meta *meta,
                        const prof_finetune *ft, const float *base,
                        const float *lora, const float *lm, const float *lv,
                        size_t NL, util_err *e);
/* Reads only its header: the model, mode, batch, length, seed, step. */
int exec_lora_ckpt_peek(const char *path, exec_ckpt_meta *meta,
                        prof_finetune *ft, util_err *e);
/* --resume CKPT by a run that trains the whole model (or frozen blocks):
 * an error naming the mode when a LoRA run saved CKPT (its state beside
 * it, of the same step, seed and batch), whose weights have the adapters
 * merged in and whose moments are none of theirs: going on would start a
 * full fine-tuning at its step without its moments. what: the trained
 * mode, for the message. */
int exec_ckpt_not_lora(const char *ckpt, const exec_ckpt_meta *meta,
                       const char *what, util_err *e);
/* --resume CKPT by a LoRA or QLoRA run (what: its mode) where no state
 * lies beside CKPT: an error saying what CKPT is (not a checkpoint, or
 * another model's) or, for this model's, that --init starts from a
 * checkpoint of a run that trained its weights; 0 when the state is
 * there. */
int exec_lora_ckpt_missing(const char *ckpt, const exec_gpt_config *c,
                           const char *what, util_err *e);
int exec_lora_ckpt_load(const char *path, const exec_gpt_config *c,
                        const prof_finetune *ft, float *base, float *lora,
                        float *lm, float *lv, size_t NL,
                        exec_ckpt_meta *meta, util_err *e);

/* ----------------------------------------------------- safetensors */

/* Loads a Hugging Face GPT-2 model.safetensors (a JSON header naming each
 * tensor's dtype, shape and byte range, then raw little-endian data) into
 * params (P floats in arena order) for config c: wte, wpe, h.N.ln_1,
 * h.N.attn.c_attn, h.N.attn.c_proj, h.N.ln_2, h.N.mlp.c_fc,
 * h.N.mlp.c_proj, ln_f (optionally under "transformer."), with GPT-2's
 * Conv1D weights (in x out) transposed to the kernels' (out x in); F32,
 * F16 and BF16 are read; attention masks and a tied lm_head are skipped.
 * A missing tensor, a shape other than c's, or a corrupt file is an
 * error naming the file and tensor, code 2. */
int exec_safetensors_load(const char *path, const exec_gpt_config *c,
                          float *params, util_err *e);

/* ---------------------------------------------------------- trainer */

typedef struct exec_train_opts {
    char model[512];        /* zoo name or file, for messages */
    exec_gpt_config cfg;
    const char *data;       /* corpus path */
    int steps;              /* train until this many steps are done */
    int stop_after;         /* stop once this many are done (0: at steps);
                             * the schedule still spans steps */
    int B, T;
    exec_adamw adamw;       /* lr is the peak */
    int warmup;             /* steps of linear warm-up; cosine to lr/10 */
    uint64_t seed;
    int threads;
    const char *save;       /* NULL: no checkpoint */
    int save_every;         /* 0: only at the end */
    const char *resume;
    const char *timings;    /* per-op timing JSON path, or NULL */
    double mem_budget_bytes;
    int eval_batches;       /* validation batches at the start and end */
    int quiet;              /* no per-step lines */
    int json;               /* one JSON document instead of text lines */
    const volatile int *stop; /* set (by a signal handler) to stop after the
                             * current step, saving when save is set */
    char note[192];         /* printed under the model line when set */
    uint64_t data_sum;      /* util_fnv1a of the data file, 0: not read */
    char resumed[640];      /* what a resumed run took from its checkpoint
                             * or changes in it: printed in the header */
    char again[1024];       /* the options a run resumed from --save
                             * repeats to go on as this one (" --steps N",
                             * and --lr, --warmup, --weight-decay, --clip,
                             * --data, --threads as given): said beside
                             * "continue with --resume FILE" */
    FILE *out;              /* where lines go (stdout) */
} exec_train_opts;

typedef struct exec_train_result {
    int steps_run;
    float first_loss, last_loss;   /* train loss of first and last step */
    float val_loss_start, val_loss_end;
    double entropy_nats;
    double tokens_per_s;
    double gemm_share;             /* of measured kernel time */
} exec_train_result;

/* 0 when a run of `steps` (stopping after `stop_after`, 0: not) has a
 * step left after the step0 done (from checkpoint `resume`, NULL: none);
 * else an error, code 2, saying which option leaves nothing to run. */
int exec_steps_left(const char *resume, int steps, int stop_after,
                    int step0, util_err *e);

/* The learning rate of step s (0-based) for a peak lr: linear warm-up
 * over `warmup` steps, then cosine decay to lr/10 at step `steps`-1. */
float exec_lr_at(float peak, int warmup, int steps, int s);

/* This machine's physical memory, bytes (0 when unknown). */
double exec_host_mem_bytes(void);
/* Host memory this process may still take: the system's available
 * memory, or less where an address-space limit (ulimit -v) leaves less
 * (*why says which); HUGE_VAL when neither is known.
 * SLUICE_HOST_AVAILABLE=SIZE says it instead (tests). */
double exec_host_free_bytes(const char **why);
/* What the file system of directory dir ("" or NULL: the working one)
 * has free for the NVMe tier's files (SLUICE_DRIVE_AVAILABLE stands for
 * it in tests); HUGE_VAL where it cannot be read. */
double exec_drive_free_bytes(const char *dir);

/* Defaults for everything but model, cfg and data. */
void exec_train_defaults(exec_train_opts *o);
/* Trains; prints a line per step unless quiet, and a summary. */
int exec_train(const exec_train_opts *o, exec_train_result *r, util_err *e);
/* The options of run o a checkpoint of it keeps (exec_ckpt_run). */
exec_ckpt_run exec_train_run(const exec_train_opts *o);

/* ---------------------------------------------------- pipeline runs */

/* The pipeline executor: runs a plan's task IR (sim/ir.h) for real, one
 * worker per device and tensor-parallel rank, in this process (threads,
 * copies between per-device memories) or one rank per worker under MPI,
 * on a device backend (CPU cores, or CUDA GPUs in bin/sluice-cuda).
 * Implemented for the decoders the kernels train (GPT-2's, Llama's). */
typedef enum {
    EXEC_XPORT_AUTO,    /* MPI when started by mpirun, else in-process */
    EXEC_XPORT_INPROC,
    EXEC_XPORT_MPI,
    EXEC_XPORT_NCCL     /* under mpirun, GPUs: NCCL moves the tensors */
} exec_xport_kind;

struct exec_backend;    /* exec/backend.h */

/* Where a device's model states live (issue 13's tiers, exec/offload.c):
 * on the device (none), or in host memory or a file, fetched layer by
 * layer. zero-offload: AdamW on the CPU after the whole backward pass
 * (ZeRO-Offload, Ren et al. 2021); fuyou: each layer's AdamW on a CPU
 * thread as soon as its gradients are complete, overlapped with the rest
 * of the backward pass (Fuyou, Liao et al. 2024). */
typedef enum {
    EXEC_OFFLOAD_NONE, EXEC_OFFLOAD_ZERO, EXEC_OFFLOAD_FUYOU
} exec_offload_policy;
typedef enum { EXEC_TIER_DRAM, EXEC_TIER_NVME } exec_tier;

typedef struct exec_offload {
    exec_offload_policy policy;
    exec_tier tier;
    const char *path;           /* nvme: the directory of the files */
    double full_after_bytes;    /* tests: writes to the file fail with
                                 * ENOSPC past this many bytes (0: never) */
    int host_threads;           /* the threads of the host's steps in the
                                 * offload schedules (0: the host's cores
                                 * but the one computing) */
} exec_offload;

/* Names ("none", "zero-offload", "fuyou"; "dram", "nvme") and their
 * parse: 0, or -1 for another name. */
const char *exec_offload_name(exec_offload_policy p);
const char *exec_tier_name(exec_tier t);
int exec_offload_parse(const char *s, exec_offload_policy *p);
int exec_tier_parse(const char *s, exec_tier *t);

typedef struct exec_pipe_opts {
    const char *plan_path;      /* for messages; the plan itself below */
    const sim_plan *plan;       /* lent */
    const char *data;           /* corpus path */
    int steps;                  /* train until this many steps are done */
    int stop_after;             /* > 0: stop once this many are done (the
                                 * learning rate's schedule still spans
                                 * steps) */
    exec_adamw adamw;           /* lr is the peak */
    int warmup;                 /* -1: steps/10 */
    uint64_t seed;
    const char *init;           /* weights to start from: a checkpoint or
                                 * a Hugging Face model.safetensors */
    const char *resume;         /* a checkpoint to continue (state, step) */
    const char *save;           /* where the caller saves the run's state
                                 * after it (NULL: nowhere): refused before
                                 * training when its folder lacks the room */
    double mem_budget_bytes;    /* per device; 0: the plan's device memory */
    exec_xport_kind xport;
    const struct exec_backend *backend; /* NULL: the CPU (lent) */
    int record_mem;             /* memory curves for traces */
    int op_timing;              /* time every op's parts (calibration) */
    int own_gpus;               /* refuse, before running, workers that
                                 * would share a GPU (--calibrate: their op
                                 * times would hold each other's kernels) */
    exec_offload offload;       /* model states below the device */
    int tf32;                   /* products in TF32 (the CUDA backend's
                                 * tensor cores), predicted at the GPU's
                                 * TF32 peak */
    const volatile int *stop;   /* Ctrl-C: stop after the current step */
    /* faults on purpose (tests): worker, its n-th compute task, kill */
    int fault_worker, fault_task, fault_kill;
    /* a replica falling behind on purpose (tests): worker slow_worker
     * sleeps slow_us microseconds before each compute task (0: none) */
    int slow_worker, slow_us;
    /* called after each flushed step by the process holding worker 0:
     * global step (1-based), mean loss, gradient norm, lr, ms */
    void (*on_step)(void *ctx, int step, double loss, double norm,
                    double lr, double ms);
    void *on_step_ctx;
    /* called once the run is set up (its plan, model, checkpoint and
     * devices checked), before its first step: what a run says of itself
     * comes after what refuses it */
    void (*on_start)(void *ctx);
    void *on_start_ctx;
} exec_pipe_opts;

/* What a run measured. Times are ns since the run began, per epoch (a
 * step with a flush; the whole run without one) and task of the IR, as
 * the device's tensor-parallel rank 0 saw them: start, end, when a
 * transfer started to move, tensor-parallel time inside (-1: not run). */
/* Times kept per task and epoch: start, end, when a send started to move
 * (receives: when the transfer started), tensor-parallel time inside. */
enum { EXEC_T_START, EXEC_T_END, EXEC_T_FSTART, EXEC_T_TP, EXEC_T_N };

typedef struct exec_pipe_result {
    int rank, n_ranks;          /* this process of the job (MPI) */
    char xport[16];
    char backend[16];           /* "cpu", "cuda" */
    int tf32;                   /* its products ran in TF32 */
    int n_workers, n_devices;
    int shared_gpu;             /* 1 + a GPU two of this process's workers
                                 * ran on (each slowed the other); 0 none */
    int step_first;             /* global index of the first step run */
    int steps_run;              /* optimizer steps (minibatches) trained */
    int epochs;                 /* measured epochs (see times) */
    int async;
    double *loss;               /* per step: mean token loss */
    double *grad_norm;          /* per step (flush only; NaN otherwise) */
    int n_tasks;
    int64_t *times;             /* [epoch][task][EXEC_T_N]: exec_pipe_times */
    double *peak_bytes;         /* per device: measured peak, the run's */
    double *step_peak_bytes;    /* per device and epoch ([d * epochs +
                                 * ep]): the step's peak (what the device
                                 * held before it, and what the others'
                                 * messages charged it meanwhile, count) */
    int *max_versions;          /* per IR stage: weight versions at once */
    int *version_used;          /* per task: the weight version a compute
                                 * task ran on (last epoch), -1 others */
    double *static_bytes;       /* per device: weights, gradients, AdamW */
    double *budget_bytes;       /* per device */
    double *overhead;           /* per epoch: runtime share of the step,
                                 * mean over workers (not in kernels, in
                                 * collectives or waiting) */
    int64_t *mem_t;             /* memory curves: per device, points */
    double *mem_b;
    int *mem_off;               /* device d: points mem_off[d]..[d+1] */
    float *params, *adam_m, *adam_v; /* the final state (full, rank 0):
                                 * under LoRA the base, as it started
                                 * (QLoRA: as NF4 rounds it) */
    size_t n_params;
    float *lora;                /* LoRA: the final adapters (the arena of
                                 * exec_lora_table; exec_lora_merge makes
                                 * the plain model a checkpoint holds) */
    float *lora_m, *lora_v;     /* their AdamW moments (zero after an
                                 * offload schedule, whose tier keeps
                                 * them) */
    float *base;                /* LoRA: the base the run started from
                                 * (P floats; QLoRA's before rounding) */
    size_t n_lora;
    int stopped;                /* a stop (Ctrl-C) ended the run early */
    /* with op_timing, past the first step, over every worker: per graph
     * op and phase (op * PROF_PHASES + PROF_PHASE_*) the ns its parts
     * took and how many ran (tensor-parallel collectives left out), and
     * compute tasks' time outside their ops and the ops they ran */
    double *op_ns, *op_calls;
    double task_rest_ns, task_rest_ops;
    /* with offload, over the workers of this process: the tier's bytes
     * and seconds read (to the device) and written (back), parameters
     * updated by the CPU's AdamW and its seconds; how the file is
     * written (O_DIRECT, or why buffered) */
    exec_offload offload;
    double ofl_read_bytes, ofl_read_s, ofl_write_bytes, ofl_write_s;
    double adam_params, adam_s;
    char ofl_note[160];
    /* a plan of an offload schedule (its tiers ran the IR's tier tasks):
     * the schedule, where states and swapped activations lived
     * (sim_tier), bytes and seconds copied to and from the device, the
     * host memory its tiers held at most (every rank's), the bytes its
     * ranks sent each other; the fields above are its file's and its
     * AdamW's (all summed over the ranks) */
    int tiers, tier_sched, tier, act_tier;
    double tier_up_bytes, tier_up_s, tier_down_bytes, tier_down_s;
    double tier_host_peak, tier_ring_bytes;
    sim_ir *ir;                 /* the IR that ran (owned) */
    sim_costs *costs;           /* its costs (owned) */
    prof_model *model;          /* owned */
    prof_topo *topo;            /* owned */
    exec_gpt_config cfg;
    int B, T;                   /* global batch, sequence length */
} exec_pipe_result;

/* Task id's times in epoch ep of a run (EXEC_T_*; -1: not run). */
static inline const int64_t *exec_pipe_times(const exec_pipe_result *r,
                                             int ep, int id)
{
    return &r->times[((size_t)ep * r->n_tasks + id) * EXEC_T_N];
}

/* Runs the plan. Errors: bad plan, model or options, code 2; a failed run
 * (out of memory, a device that stopped), code 1, the message naming the
 * device and task. Under MPI every rank calls it; rank 0 gets the full
 * results. */
int exec_pipe_run(const exec_pipe_opts *o, exec_pipe_result *r, util_err *e);
void exec_pipe_result_free(exec_pipe_result *r);

/* How a run is reported (exec_pipe_report). */
/* The pieces --save-every cut a run into (each resumed from the one
 * before's checkpoint, its workers started anew) before the last: their
 * steps, and the times of those timed with where each stands in its
 * piece, which the last piece's report takes in (leaving each piece's
 * first --warm out). */
typedef struct exec_pieces {
    int n;                      /* pieces kept */
    int step_first;             /* global index of their first step */
    int n_steps;
    double *loss, *grad_norm;   /* per step */
    int n_timed;
    int64_t *step_ns;           /* per timed step: its time (ns), */
    int *step;                  /* its global index (0-based), */
    int *pos;                   /* its place in its piece (0: first) */
} exec_pieces;

/* Adds the piece run r (a flushed schedule's). */
void exec_pieces_add(exec_pieces *p, const exec_pipe_result *r);
void exec_pieces_free(exec_pieces *p);

typedef struct exec_report_opts {
    const char *plan_path;
    int json;               /* one JSON document: sim --json's keys for the
                             * measured run, its steps, and "predicted" */
    int warm;               /* steps left out of the timing (-1: 1) */
    const char *trace;      /* measured Perfetto trace, or NULL */
    const char *plot;       /* PREFIX: measured over simulated, or NULL */
    FILE *out;
    const exec_pieces *before; /* --save-every's earlier pieces, or NULL:
                             * their steps and step times are the
                             * report's too */
} exec_report_opts;

/* Prints the run's measurements beside the simulator's prediction for
 * the same IR (median step after warm-up; per device compute, exposed
 * communication, bubble, optimizer, peak memory), writes the trace and
 * the plots. */
int exec_pipe_report(const exec_pipe_opts *o, const exec_pipe_result *r,
                     const exec_report_opts *ro, util_err *e);

/* The measured iteration (median step after `warm` steps, s) and its
 * spread; the runtime's share of a step (mean over workers). */
double exec_pipe_iteration_s(const exec_pipe_result *r, int warm,
                             double *min_s, double *max_s);
double exec_pipe_overhead(const exec_pipe_result *r, int warm);
/* Device d's measured peak as the simulator predicts it: the median
 * step's, over this run's steps past `warm` (as exec_pipe_iteration_s;
 * an asynchronous plan's one epoch: the run's; a --save-every piece's
 * steps only, where its time pools the pieces'). A step's peak moves
 * with when the other devices' messages land (a ring's chunk arriving in
 * the next forward rather than before it): the run's peak is the
 * largest, r->peak_bytes. */
double exec_pipe_peak(const exec_pipe_result *r, int warm, int d);
/* An offload plan's run: the host memory the simulator counts over the
 * run's own task times, its most over the steps (the report's
 * counted_host_peak_bytes); -1 where any task of a step did not run. */
double exec_pipe_host_counted(const exec_pipe_result *r);

/* ------------------------------------------ many models at once (Hydra) */

/* A workload of GPT jobs (plan_wl_load's file) trained at once on CPU
 * devices as Hydra does (Nagrecha and Kumar, arXiv 2110.08633): each
 * model cut into the fewest shards that fit one device (the planner's cut,
 * planner/workload.c), its weights and AdamW state in a host pool between
 * uses, a device thread running one shard-step at a time (exec/workload.c).
 * Or, as the baseline, each job in turn on one device with the reference
 * model (exec_gpt). Every job trains as the reference trainer would with
 * the same seed, data and steps, bit for bit. */
typedef enum {
    EXEC_WL_HYDRA,          /* Sharded-LRTF: longest remaining time first */
    EXEC_WL_RANDOM,         /* uniformly among the free jobs (seeded) */
    EXEC_WL_RR,             /* round robin over job indices */
    EXEC_WL_SEQUENTIAL,     /* the baseline: jobs in turn, one device each */
    EXEC_WL_PIPELINE,       /* jobs in turn, each the planner's best
                             * synchronous pipeline over every device */
    EXEC_WL_POLICY_COUNT
} exec_wl_policy;
/* "hydra", "random", "round-robin", "sequential", "pipeline"; parse: 0
 * or -1. */
const char *exec_wl_policy_name(exec_wl_policy p);
int exec_wl_policy_parse(const char *s, exec_wl_policy *p);

typedef struct exec_wl_opts {
    const char *workload;   /* the job file */
    int devices;            /* CPU devices (cores) */
    double mem_bytes;       /* budget per device; 0: the cpu type's */
    int steps;              /* per job; 0: the file's samples / batch */
    const char *data;       /* corpus path */
    exec_adamw adamw;       /* lr is the peak; clip > 0: a job's step
                             * waits for its last shard's gradient and is
                             * taken on the host (0: each shard steps on
                             * its device after its backward) */
    int warmup;             /* -1: steps/10 */
    uint64_t seed;          /* job j is initialised and fed with seed + j */
    unsigned policy_seed;   /* the random policy's */
    int prefetch;           /* load the next shard-step's state while the
                             * current one runs, where the budget allows */
} exec_wl_opts;

/* One shard-step as it ran: device, job, shard, kind (0 forward, 1 the
 * last shard's forward and backward, 2 a backward with recomputation),
 * ns since the run began. */
typedef struct exec_wl_seg {
    int dev, job, shard, kind;
    int64_t start_ns, end_ns;
} exec_wl_seg;

typedef struct exec_wl_jobres {
    char name[64];
    int shards, steps;
    size_t n_params;
    float *params, *adam_m, *adam_v;    /* final state, arena order (no
                                         * moments, NULL, for SGD) */
    double last_loss;                   /* mean token loss, last step */
    char plan[96];                      /* the pipeline baseline's plan */
} exec_wl_jobres;

typedef struct exec_wl_result {
    exec_wl_policy policy;
    int n_jobs, n_devices;
    double makespan_s, predicted_makespan_s;
    double setup_s;                     /* pipeline: its runs' time outside
                                         * training (the plan's IR and
                                         * prediction, the corpus, the
                                         * workers), not in makespan_s */
    double *busy_s, *predicted_busy_s;  /* [n_devices] computing */
    double *dev_peak_bytes;             /* [n_devices] measured */
    double host_peak_bytes, predicted_host_peak_bytes;
    double h2d_bytes, d2h_bytes;        /* host pool <-> device arenas */
    double predicted_copy_bytes;
    long steps, prefetched;             /* shard-steps; loaded ahead */
    exec_wl_jobres *job;                /* [n_jobs] */
    exec_wl_seg *seg;
    int n_seg;
} exec_wl_result;

typedef struct exec_wl exec_wl;

/* Loads the workload and cuts every job. Errors, code 2, name the job's
 * file:line:col and field: a bad file, a model the executor cannot train
 * (not GPT, a vocabulary under 256), a job that does not fit one device
 * even one layer per shard. Jobs train with AdamW, or plain SGD where the
 * file says "optimizer": "sgd" (no moments: exec_sgd_update). */
exec_wl *exec_wl_new(const exec_wl_opts *o, util_err *e);
void exec_wl_free(exec_wl *w);
/* The jobs, lent: name, model, shards (k) and the layers each starts at
 * (first[k+1], the planner's layers: embedding, blocks, head), batch,
 * sequence length and steps. */
int exec_wl_jobs(const exec_wl *w);
int exec_wl_job_sgd(const exec_wl *w, int j);   /* 1: SGD, 0: AdamW */
/* Whether every job has a pipeline baseline plan on the devices: 0
 * yes; 1 a job has none that fits (e says which and why); -1 an error. */
int exec_wl_pipe_plannable(exec_wl *w, util_err *e);
void exec_wl_job_info(const exec_wl *w, int j, const char **name,
                      const char **model, int *k, const int **first,
                      int *B, int *T, int *steps);
/* Runs every job's steps under a policy. Code 1 for a failed run (out of
 * device memory, naming device, job and shard). */
int exec_wl_run(exec_wl *w, exec_wl_policy p, exec_wl_result *r,
                util_err *e);
void exec_wl_result_free(exec_wl_result *r);
/* `sluice exec --workload FILE ...` (exec/cmd_workload.c). */
int exec_wl_main(int argc, char **argv);

/* ------------------------------------------------------ calibration */

/* One microbenchmark: an op of the model graph (its per-sample costs as
 * the graph gives them) run for a microbatch of mbs sequences, its F, B or
 * W part (kind SIM_OPT: an AdamW step over op.params parameters), and the
 * time it took (median of repeats). */
typedef struct exec_calib_sample {
    prof_op op;
    int mbs;
    sim_kind kind;
    double ns;
    int set;        /* the microbenchmark run it came from (a layer size,
                     * a training run; 0 where unknown): the fit's
                     * jackknife leaves one set out at a time */
} exec_calib_sample;

/* The cost model's time for a sample on GPU type g (sim_op_model_ns or
 * sim_opt_model_ns). */
double exec_calib_model_ns(const prof_gpu *g, const exec_calib_sample *s);

/* Fits the efficiency model of base to the samples by nonlinear least
 * squares on log(model / measured) (GSL's trust-region solver): the GEMM
 * rate (peak x gemm_max) and its half sizes, the memory rate and its half
 * size, the launch, and a factor for each kind and phase of memory-bound
 * op sampled (and the optimizer). A rate above base's peak raises the
 * peak (efficiency 1). *out gets base with the fitted figures; params[]
 * (PROF_CALIB_MAX_PARAMS) the values with 95% confidence intervals (the
 * wider of the covariance's and, with 3 or more sets of samples, a
 * delete-one-set jackknife's: the samples of one run share its state, so
 * the covariance alone, which takes them as independent, is too sure of
 * a figure the sets disagree on), the median and largest
 * |model / measured - 1| after the fit. Streaming's cache size is
 * fitted too, unless base gives one (the device's, which calibrate reads
 * from the machine for the CPU): then it is held, and params[] lists it
 * after the fitted figures with an interval of none. Fewer samples than
 * 12, or no GEMM or no memory-bound sample among them: code 2. */
int exec_calib_fit(const exec_calib_sample *s, int n, const prof_gpu *base,
                   prof_gpu *out, prof_calib_param *params, int *n_params,
                   double *median_err, double *max_err, util_err *e);

/* This machine's last cache level private to a core (L2) in bytes, 0
 * where the system does not say. */
double exec_host_cache_bytes(void);

/* A transfer measured at one size: one-way ns. */
typedef struct exec_calib_xfer {
    double bytes, ns;
} exec_calib_xfer;

/* Fits latency + bytes / bandwidth to transfers (least squares weighted
 * for relative error, gsl_fit_wlinear). Fewer than 3 sizes, or a fit
 * without a positive bandwidth: code 1. */
int exec_calib_fit_link(const exec_calib_xfer *x, int n, prof_calib_link *l,
                        prof_calib_param *lat, prof_calib_param *bw,
                        util_err *e);

/* An all-reduce measured against the ring the simulator prices with the
 * fitted link (2(g-1) steps of bytes/g). */
typedef struct exec_calib_check {
    const char *what;       /* "in-process ring", "MPI_Allreduce" */
    int group;
    double bytes, measured_ns, predicted_ns;
} exec_calib_check;

typedef struct exec_calib_opts {
    const char *device;     /* the device type to calibrate ("cpu", or a
                             * GPU type with the CUDA backend) */
    int devices;            /* devices of --hw: cores or GPUs for copies */
    const struct exec_backend *backend; /* NULL: the CPU */
    int quick;              /* fewer and shorter microbenchmarks (tests) */
    const char *data;       /* text for the runtime's per-task cost */
    const volatile int *stop; /* Ctrl-C: give up, nothing written */
    FILE *log;              /* progress lines; NULL: none */
    const char *drive_dir;  /* where the drive's microbenchmark writes its
                             * file (NULL: the working directory) */
} exec_calib_opts;

typedef struct exec_calib_result {
    prof_calib calib;       /* figures ready to write (ops: none) */
    exec_calib_sample *samples;
    int n_samples;
    exec_calib_xfer *xfers[PROF_XFER_COUNT];
    int n_xfers[PROF_XFER_COUNT];
    exec_calib_check checks[16];
    int n_checks;
    double op_task_ns;      /* the runtime's cost per op a task runs */
    int mpi_ranks;          /* processes of the MPI job (1: none) */
    int mpi_rank;           /* this process: only rank 0 has results */
    double seconds;         /* how long calibration took */
    /* the host's side of offloaded training (calib.tiers): AdamW's
     * threads; the drive's file (O_DIRECT, or why buffered), or why the
     * drive was not measured */
    int host_threads;
    char drive_note[200];
    int drive_measured;
} exec_calib_result;

/* Measures this machine for device type o->device (CPU cores, or GPUs of
 * a type of the catalog through the CUDA backend) and fits its figures. Under mpirun (two ranks or more)
 * the MPI link is measured too, every rank taking part; only rank 0 gets
 * the results and goes on to the rest. A stop request: code 1, "stopped". */
int exec_calibrate(const exec_calib_opts *o, exec_calib_result *r,
                   util_err *e);
void exec_calib_result_free(exec_calib_result *r);

/* Adds what a plan run measured (exec_pipe_opts.op_timing) to c: every op
 * part's mean time under its signature (the op as one tensor-parallel
 * rank runs it, at the run's microbatch: sim_op_signature), which then
 * overrides the efficiency model for that signature, and the runtime's
 * cost per op a task runs (compute tasks' time outside their ops over
 * the ops they ran: prof_eff.op_task_ns, task_ns then 0). *n_added counts
 * the op parts (an op and phase; layers alike share a signature). A run
 * of another device type than c's: code 2. */
int exec_calib_add_run(prof_calib *c, const exec_pipe_result *r,
                       const char *model, int *n_added, util_err *e);

/* The text trained on when none is given: every Debian machine has it. */
#define EXEC_DEFAULT_CORPUS "/usr/share/common-licenses/GPL-3"

/* A stop request of the commands (exec, calibrate): set by exec_on_stop,
 * the signal handler they install; a second signal half a second or more
 * after the first kills as usual, those that come together count as
 * one. */
extern volatile int exec_stop_flag;
void exec_on_stop(int sig);

/* `sluice exec ...` (argv[0] is "exec"). */
int exec_cmd_main(int argc, char **argv);
/* `sluice calibrate ...` (argv[0] is "calibrate"). */
int exec_calibrate_main(int argc, char **argv);

#endif
