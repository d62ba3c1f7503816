/* Expands a model spec into a DAG of ops with per-sample costs.
 *
 * Conventions (per sample = one sequence of s tokens, e = bytes per element
 * of the training dtype):
 * - A linear of k inputs and n outputs over s tokens costs 2skn FLOPs
 *   forward, 2skn for the input gradient (B) and 2skn for the weight
 *   gradient (W); it keeps its input (s*k*e) for the weight gradient.
 * - Attention keeps Q, K, V, the softmax output and, with dropout, the
 *   dropout mask (1 byte) and dropped probabilities: for GPT shapes the
 *   per-layer total is s*h*(34 + 5*a*s/h) bytes in half precision, the
 *   count of Korthikanti et al., "Reducing Activation Recomputation in Large
 *   Transformer Models" (arXiv 2205.05198), Sec. 4.1.
 * - Element-wise ops count a few FLOPs per element; GEMM FLOPs dominate, so
 *   training FLOPs agree with Megatron's closed form within a fraction of a
 *   percent (tested).
 * - Inputs name producer ops, so a cut after any op knows what crosses it:
 *   the residual stream as well as the branch, and for T5 the encoder output
 *   read by every decoder layer's cross-attention. */
#include "profiles/profiles.h"

#include <math.h>
#include <string.h>

static const char *const op_kind_names[] = {
    "embed", "norm", "linear", "attn", "act", "residual", "lm_head", "loss",
    "pooler", "rope"};

const char *prof_op_kind_name(prof_op_kind k)
{
    return k >= 0 && k < PROF_OP_KIND_COUNT ? op_kind_names[k] : "?";
}

static const char *const role_names[PROF_ROLE_COUNT] = {
    "embed", "norm", "qkv", "q", "kv", "attn_scores", "attn_softmax",
    "attn_context", "attn_fused", "attn_out", "residual", "mlp_up",
    "mlp_act", "mlp_down", "pooler", "mlm_dense", "mlm_act", "lm_head",
    "loss", "qkv_expand"};

const char *prof_op_role_name(prof_op_role r)
{
    return r >= 0 && r < PROF_ROLE_COUNT ? role_names[r] : "?";
}

typedef struct builder {
    prof_model *m;
    int cap_ops, cap_layers;
    const prof_model_spec *s;
    double e;          /* bytes per element */
    prof_part part;
    int layer;
    char prefix[24];   /* "l3", "enc.l3", "dec.l3" */
} builder;

static void begin_layer(builder *b, const char *name, prof_part part)
{
    prof_model *m = b->m;
    if (m->n_layers == b->cap_layers) {
        b->cap_layers = b->cap_layers ? 2 * b->cap_layers : 64;
        m->layers = util_realloc(m->layers, sizeof *m->layers *
                                                (size_t)b->cap_layers);
    }
    prof_layer *l = &m->layers[m->n_layers];
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->part = part;
    l->first_op = m->n_ops;
    b->layer = m->n_layers++;
    b->part = part;
    snprintf(b->prefix, sizeof b->prefix, "%s", name);
}

static prof_op *add(builder *b, prof_op_kind kind, prof_op_role role,
                    const char *name, int in0, int in1)
{
    prof_model *m = b->m;
    if (m->n_ops == b->cap_ops) {
        b->cap_ops = b->cap_ops ? 2 * b->cap_ops : 256;
        m->ops = util_realloc(m->ops, sizeof *m->ops * (size_t)b->cap_ops);
    }
    prof_op *o = &m->ops[m->n_ops++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s.%s", b->prefix, name);
    o->kind = kind;
    o->role = role;
    o->part = b->part;
    o->layer = b->layer;
    if (in0 >= 0) o->in[o->n_in++] = in0;
    if (in1 >= 0) o->in[o->n_in++] = in1;
    m->layers[b->layer].n_ops++;
    return o;
}

static int idx(const builder *b, const prof_op *o)
{
    return (int)(o - b->m->ops);
}

/* A linear layer over s tokens: k inputs, n outputs. */
static int linear(builder *b, prof_op_role role, const char *name, int in,
                  double s, double k, double n, int bias)
{
    prof_op *o = add(b, PROF_OP_LINEAR, role, name, in, -1);
    double e = b->e;
    o->fwd_flops = 2 * s * k * n + (bias ? s * n : 0);
    o->bwd_in_flops = 2 * s * k * n;
    o->bwd_w_flops = 2 * s * k * n + (bias ? s * n : 0);
    o->params = k * n + (bias ? n : 0);
    if (bias && (role == PROF_ROLE_ATTN_OUT || role == PROF_ROLE_MLP_DOWN))
        o->tp_rep = n;
    o->bytes_read = s * k * e + o->params * e;
    o->bytes_written = s * n * e;
    o->act_bytes = s * k * e;
    o->out_bytes = s * n * e;
    o->n_gemm = 1;
    o->gemm[0] = (prof_gemm){.m = s, .n = n, .k = k, .batch = 1};
    return idx(b, o);
}

static int norm(builder *b, const char *name, int in, double s, double h)
{
    prof_op *o = add(b, PROF_OP_NORM, PROF_ROLE_NORM, name, in, -1);
    int rms = b->s->rmsnorm;
    double e = b->e;
    o->fwd_flops = (rms ? 4 : 7) * s * h;
    o->bwd_in_flops = (rms ? 6 : 9) * s * h;
    o->bwd_w_flops = (rms ? 1 : 2) * s * h;
    o->params = rms ? h : 2 * h;
    o->bytes_read = s * h * e;
    o->bytes_written = s * h * e;
    o->act_bytes = s * h * e;
    o->out_bytes = s * h * e;
    return idx(b, o);
}

static int residual(builder *b, const char *name, int a, int c, double s,
                    double h)
{
    prof_op *o = add(b, PROF_OP_RESIDUAL, PROF_ROLE_RESIDUAL, name, a, c);
    o->fwd_flops = s * h;
    o->bwd_in_flops = 0; /* the gradient passes through unchanged */
    o->bytes_read = 2 * s * h * b->e;
    o->bytes_written = s * h * b->e;
    o->out_bytes = s * h * b->e;
    return idx(b, o);
}

/* Attention core for sq queries over skv keys. Without fused attention it
 * is three kernels run one after another, as frameworks run them: the
 * score GEMM (QK^T per head), the memory-bound scale-mask-softmax (and
 * dropout) over the a*sq*skv scores, and the context GEMM (PV per head);
 * modelling them as separate ops keeps the softmax's memory traffic from
 * hiding under the GEMMs' compute. Fused attention (FlashAttention) is one
 * kernel that keeps Q, K, V, the output and the log-sum-exp and recomputes
 * the scores in backward. q and kv are the producers of the projections
 * (the same op when fused). Returns the context op. */
static int attn_core(builder *b, const char *name, int q, int kv, double sq,
                     double skv)
{
    const prof_model_spec *s = b->s;
    /* unfused, the core reads each query head's own k and v (qkv_expand
     * repeated grouped heads) */
    double a = s->heads, d = s->head_dim, e = b->e,
           kvh = s->flash_attn ? s->kv_heads : s->heads;
    double gemm = 2 * a * sq * skv * d;      /* one of QK^T, PV */
    double soft = 5 * a * sq * skv;          /* max, sub, exp, sum, div */
    double qbytes = sq * a * d * e, kbytes = skv * kvh * d * e;
    double scores = a * sq * skv;
    char n[48];
    if (s->flash_attn) {
        prof_op *o = add(b, PROF_OP_ATTN, PROF_ROLE_ATTN_FUSED, name, q,
                         kv != q ? kv : -1);
        o->fwd_flops = 2 * gemm + soft;
        o->bwd_in_flops = 5 * gemm + 2 * soft;
        o->act_bytes = qbytes + 2 * kbytes + qbytes + sq * a * 4;
        o->bytes_read = qbytes + 2 * kbytes;
        o->bytes_written = qbytes;
        o->out_bytes = qbytes;
        o->n_gemm = 2;
        o->gemm[0] = (prof_gemm){.m = sq, .n = skv, .k = d, .batch = a};
        o->gemm[1] = (prof_gemm){.m = sq, .n = d, .k = skv, .batch = a};
        return idx(b, o);
    }
    snprintf(n, sizeof n, "%s.scores", name);
    prof_op *o = add(b, PROF_OP_ATTN, PROF_ROLE_ATTN_SCORES, n, q,
                     kv != q ? kv : -1);
    o->fwd_flops = gemm;
    o->bwd_in_flops = 2 * gemm;             /* dQ = dS K, dK = dS^T Q */
    o->act_bytes = qbytes + kbytes;          /* Q and K */
    o->bytes_read = qbytes + kbytes;
    o->bytes_written = scores * e;
    o->out_bytes = scores * e;
    o->n_gemm = 1;
    o->gemm[0] = (prof_gemm){.m = sq, .n = skv, .k = d, .batch = a};
    int sc = idx(b, o);

    snprintf(n, sizeof n, "%s.softmax", name);
    o = add(b, PROF_OP_ATTN, PROF_ROLE_ATTN_SOFTMAX, n, sc, -1);
    o->fwd_flops = soft + (s->dropout ? 2 * scores : 0);
    o->bwd_in_flops = 4 * scores + (s->dropout ? scores : 0);
    /* Keeps its output for its own gradient and, with dropout, the mask. */
    o->act_bytes = scores * e + (s->dropout ? scores : 0);
    o->bytes_read = scores * e;
    o->bytes_written = scores * e + (s->dropout ? scores * (e + 1) : 0);
    o->out_bytes = scores * e;
    int sm = idx(b, o);

    snprintf(n, sizeof n, "%s.context", name);
    o = add(b, PROF_OP_ATTN, PROF_ROLE_ATTN_CONTEXT, n, sm, kv);
    o->fwd_flops = gemm;
    o->bwd_in_flops = 2 * gemm;             /* dP = dO V^T, dV = P^T dO */
    /* V, and the dropped probabilities when they differ from the softmax
     * output already kept. */
    o->act_bytes = kbytes + (s->dropout ? scores * e : 0);
    o->bytes_read = scores * e + kbytes;
    o->bytes_written = qbytes;
    o->out_bytes = qbytes;
    o->n_gemm = 1;
    o->gemm[0] = (prof_gemm){.m = sq, .n = d, .k = skv, .batch = a};
    return idx(b, o);
}

/* What a model with rotary positions (RoPE, Su et al. 2021) or grouped
 * key and value heads does between its q|k|v projection and attention:
 * q and k rotated by their positions, and where the attention kernel
 * cannot read grouped heads (no fused attention: PyTorch's eager and SDPA
 * paths repeat them, as Hugging Face's repeat_kv does) each group's k and
 * v heads copied out to its query heads. Priced as one element-wise pass
 * that reads what it rotates or repeats and writes its result once, as a
 * fused kernel (Megatron-LM's, flash-attn's rotary) runs it: 3 FLOPs an
 * element rotated (two products and a sum), nothing kept for the
 * backward, which is the same pass over the gradient (rotated back, the
 * repeated heads summed). The executor runs the same pass (qkv_expand),
 * which also repeats the heads under fused attention. A kind of its own:
 * its cost an element (the angles' sines and cosines where they are not
 * a table) is nothing like the softmax's, so a calibration fits it
 * apart. */
static int qkv_expand(builder *b, const char *name, int qkv, double s_tok)
{
    const prof_model_spec *s = b->s;
    double a = s->heads, d = s->head_dim, kvh = s->kv_heads, e = b->e;
    double nq = s_tok * a * d, nk = s_tok * kvh * d;
    double rot = prof_spec_rope(s) ? nq + nk : 0;
    double rep = kvh < a && !s->flash_attn ? 2 * nk : 0;   /* k, v read */
    prof_op *o = add(b, PROF_OP_ROPE, PROF_ROLE_QKV_EXPAND, name, qkv, -1);
    o->fwd_flops = 3 * rot;
    o->bwd_in_flops = 3 * rot + (rep > 0 ? 2 * nq : 0); /* heads summed */
    o->bytes_read = (rot + rep) * e;
    o->bytes_written = (rot + rep * a / kvh) * e;
    o->bwd_bytes = o->bytes_read + o->bytes_written;
    /* the attention reads q | k | v with k and v repeated where they are */
    o->out_bytes = (nq + 2 * (rep > 0 ? nq : nk)) * e;
    return idx(b, o);
}

/* Self- or cross-attention block: projections, core, output projection,
 * output dropout. Returns the output projection's op. */
static int attention(builder *b, const char *name, int in, int mem, double sq,
                     double skv)
{
    const prof_model_spec *s = b->s;
    double h = s->hidden, a = s->heads, d = s->head_dim, kvh = s->kv_heads;
    char n[40];
    int q, kv;
    if (mem < 0) {
        snprintf(n, sizeof n, "%s.qkv", name);
        q = kv = linear(b, PROF_ROLE_QKV, n, in, sq, h, (a + 2 * kvh) * d,
                        s->bias);
        if (prof_spec_rope(s) || kvh < a) {
            snprintf(n, sizeof n, "%s.%s", name,
                     prof_spec_rope(s) ? "rope" : "kv_repeat");
            q = kv = qkv_expand(b, n, q, sq);
        }
    } else {
        snprintf(n, sizeof n, "%s.q", name);
        q = linear(b, PROF_ROLE_Q, n, in, sq, h, a * d, s->bias);
        snprintf(n, sizeof n, "%s.kv", name);
        kv = linear(b, PROF_ROLE_KV, n, mem, skv, h, 2 * kvh * d, s->bias);
    }
    snprintf(n, sizeof n, "%s.core", name);
    int core = attn_core(b, n, q, kv, sq, skv);
    snprintf(n, sizeof n, "%s.out", name);
    int out = linear(b, PROF_ROLE_ATTN_OUT, n, core, sq, a * d, h, s->bias);
    if (s->dropout) b->m->ops[out].act_bytes += sq * h; /* dropout mask */
    return out;
}

static int mlp(builder *b, int in, double s_tok)
{
    const prof_model_spec *s = b->s;
    double h = s->hidden, f = s->ffn, e = b->e;
    int g = s->gated_mlp;
    int up = linear(b, PROF_ROLE_MLP_UP, "mlp.up", in, s_tok, h,
                    (g ? 2 : 1) * f, s->bias);
    prof_op *act = add(b, PROF_OP_ACT, PROF_ROLE_MLP_ACT, "mlp.act", up, -1);
    double per = s->act == PROF_ACT_RELU ? 1 : 8; /* tanh-GELU, SiLU ~ 8 */
    act->fwd_flops = s_tok * f * (per + (g ? 1 : 0));
    act->bwd_in_flops = s_tok * f * (per + (g ? 3 : 1));
    act->bytes_read = (g ? 2 : 1) * s_tok * f * e;
    act->bytes_written = s_tok * f * e;
    /* GELU and SiLU keep their input, gated MLPs both halves. ReLU's
     * backward reads the signs of its output (PyTorch's saves its
     * result), which the second linear keeps as its input: nothing of
     * its own; but T5's MLP drops out between them (Hugging Face's
     * T5DenseActDense), so there the output and the mask are its own. */
    int inner_drop = s->dropout && s->family == PROF_FAM_T5;
    act->act_bytes = g ? 2 * s_tok * f * e
                   : s->act != PROF_ACT_RELU ? s_tok * f * e
                   : inner_drop ? s_tok * f * (e + 1) : 0;
    act->out_bytes = s_tok * f * e;
    int ai = idx(b, act);
    int down = linear(b, PROF_ROLE_MLP_DOWN, "mlp.down", ai, s_tok, f, h,
                      s->bias);
    if (s->dropout) b->m->ops[down].act_bytes += s_tok * h;
    return down;
}

static int embedding(builder *b, double s_tok, int positions, int types,
                     int tied_to)
{
    const prof_model_spec *s = b->s;
    double h = s->hidden, e = b->e;
    prof_op *o = add(b, PROF_OP_EMBED, PROF_ROLE_EMBED, "tok", -1, -1);
    o->params = (double)s->vocab * h + positions * h + types * h;
    o->tp_rep = positions * h + types * h;
    if (tied_to >= 0) {
        o->tied = 1;
        o->params = (double)s->vocab * h;
        o->tp_rep = 0;
    }
    o->fwd_flops = s_tok * h * (1 + (positions > 0) + (types > 0));
    o->bwd_w_flops = s_tok * h * (1 + (positions > 0) + (types > 0));
    o->bytes_read = s_tok * h * e * (1 + (positions > 0) + (types > 0));
    o->bytes_written = s_tok * h * e;
    o->act_bytes = s_tok * 4 + (s->dropout ? s_tok * h : 0); /* ids, mask */
    o->out_bytes = s_tok * h * e;
    return idx(b, o);
}

/* A pre-norm (GPT, Llama, OPT, T5) or post-norm (BERT) transformer layer.
 * mem >= 0 adds cross-attention over the memory op (T5 decoder). */
static int layer(builder *b, int x, int mem, double s_tok, double s_mem)
{
    double h = b->s->hidden;
    if (b->s->family == PROF_FAM_BERT) {
        int at = attention(b, "attn", x, -1, s_tok, s_tok);
        int r1 = residual(b, "attn.res", x, at, s_tok, h);
        int n1 = norm(b, "attn.norm", r1, s_tok, h);
        int ff = mlp(b, n1, s_tok);
        int r2 = residual(b, "mlp.res", n1, ff, s_tok, h);
        return norm(b, "mlp.norm", r2, s_tok, h);
    }
    int n1 = norm(b, "attn.norm", x, s_tok, h);
    int at = attention(b, "attn", n1, -1, s_tok, s_tok);
    x = residual(b, "attn.res", x, at, s_tok, h);
    if (mem >= 0) {
        int nc = norm(b, "xattn.norm", x, s_tok, h);
        int xa = attention(b, "xattn", nc, mem, s_tok, s_mem);
        x = residual(b, "xattn.res", x, xa, s_tok, h);
    }
    int n2 = norm(b, "mlp.norm", x, s_tok, h);
    int ff = mlp(b, n2, s_tok);
    return residual(b, "mlp.res", x, ff, s_tok, h);
}

/* Final norm (where the family has one), LM head and loss. */
static void head(builder *b, int x, double s_tok, int final_norm)
{
    const prof_model_spec *s = b->s;
    double h = s->hidden, V = s->vocab, e = b->e;
    if (final_norm) x = norm(b, "norm", x, s_tok, h);
    if (s->family == PROF_FAM_BERT) {
        if (s->pooler) {
            /* Pooler: dense + tanh on the first token (NSP input). */
            int p = linear(b, PROF_ROLE_POOLER, "pooler", x, 1, h, h, 1);
            b->m->ops[p].kind = PROF_OP_POOLER;
        }
        int t = linear(b, PROF_ROLE_MLM_DENSE, "mlm.dense", x, s_tok, h, h,
                       1);
        prof_op *g = add(b, PROF_OP_ACT, PROF_ROLE_MLM_ACT, "mlm.act", t, -1);
        g->fwd_flops = 8 * s_tok * h;
        g->bwd_in_flops = 9 * s_tok * h;
        g->act_bytes = s_tok * h * e;
        g->bytes_read = g->bytes_written = g->out_bytes = s_tok * h * e;
        x = norm(b, "mlm.norm", idx(b, g), s_tok, h);
    }
    int lm = linear(b, PROF_ROLE_LM_HEAD, "lm_head", x, s_tok, h, V, 0);
    prof_op *l = &b->m->ops[lm];
    l->kind = PROF_OP_LM_HEAD;
    if (s->tied_embeddings) l->tied = 1;
    if (s->family == PROF_FAM_BERT) l->params += V; /* decoder bias */
    prof_op *loss = add(b, PROF_OP_LOSS, PROF_ROLE_LOSS, "loss", lm, -1);
    loss->fwd_flops = 5 * s_tok * V;
    loss->bwd_in_flops = 2 * s_tok * V;
    double n = s_tok * V;
    if (s->fused_loss) {
        /* one kernel: reads the logits, keeps them and a log-sum-exp
         * per row, and its backward writes the gradient over them */
        loss->bytes_read = n * e;
        loss->bytes_written = s_tok * 8;
        loss->bwd_bytes = 2 * n * e;
        loss->act_bytes = n * e;
    } else {
        /* The framework's ops (PyTorch's cross-entropy under autocast,
         * Megatron-LM's vocab-parallel one): 16-bit logits are cast to
         * fp32 (read e, write 4 bytes a logit), the log-softmax reads its
         * input three times (row max, sum of exponentials, output) and
         * writes fp32 log-probabilities, which it keeps for the gradient.
         * The gradient: the NLL's dense fp32 gradient is written (4), the
         * log-softmax's backward reads it twice (its row sum, then the
         * output) and the log-probabilities once and writes the input's
         * gradient (16), which a 16-bit model casts back (read 4, write
         * e). PyTorch 2.11 ran it on an H100 and an H200 at 25-28 bytes
         * a logit each way at the GPU's copy rate (tests/gpu/
         * torch_ops.py); one 16-bit read a logit was 8-9 times fast. */
        int cast = e < 4;
        loss->bytes_read = n * (cast ? e : 0) + n * 12;
        loss->bytes_written = n * (cast ? 4 : 0) + n * 4 + s_tok * 4;
        loss->bwd_bytes = n * 20 + n * (cast ? 4 + e : 0);
        loss->act_bytes = n * 4; /* fp32 log-probabilities */
        /* Its forward holds the logits, which nothing keeps, and their
         * fp32 copy beside the log-probabilities; its backward the NLL's
         * gradient and the input's fp32 gradient (8 bytes a logit) where
         * the input's gradient is e. PyTorch 2.11 on an H100 took
         * exactly these (tests/gpu/torch_loss_mem.py). */
        loss->fwd_scratch = n * e + n * (cast ? 4 : 0);
        loss->bwd_scratch = n * (8 - e);
    }
    loss->out_bytes = 4;
}

static void fill_cuts(prof_model *m);

prof_model *prof_model_build(const prof_model_spec *spec, util_err *e)
{
    if (prof_model_spec_check(spec, spec->name, e)) return NULL;
    prof_model *m = util_calloc(1, sizeof *m);
    m->spec = *spec;
    builder b = {.m = m, .s = &m->spec,
                 .e = prof_dtype_bytes(spec->dtype)};
    const prof_model_spec *s = &m->spec;
    double st = s->seq_len, h = s->hidden;
    char name[32];
    int x;
    begin_layer(&b, "embed", s->family == PROF_FAM_T5 ? PROF_PART_ENC
                                                      : PROF_PART_NONE);
    int learned = s->family == PROF_FAM_T5 || s->family == PROF_FAM_LLAMA
                      ? 0
                      : s->max_pos + (s->family == PROF_FAM_OPT ? 2 : 0);
    int emb = embedding(&b, st, learned, s->type_vocab, -1);
    x = emb;
    if (s->family == PROF_FAM_BERT) x = norm(&b, "norm", x, st, h);
    if (s->family == PROF_FAM_T5) {
        /* Relative position bias: one table per stack, in its first layer;
         * its FLOPs (a gather) are negligible. */
        m->ops[emb].params += (double)s->rel_pos_buckets * s->heads;
    }
    prof_part part = s->family == PROF_FAM_T5 ? PROF_PART_ENC : PROF_PART_NONE;
    for (int i = 0; i < s->layers; i++) {
        snprintf(name, sizeof name, "%s%d", part == PROF_PART_ENC ? "enc.l" : "l", i);
        begin_layer(&b, name, part);
        x = layer(&b, x, -1, st, 0);
    }
    if (s->family == PROF_FAM_T5) {
        double sd = s->dec_seq_len;
        begin_layer(&b, "enc.norm", PROF_PART_ENC);
        int enc_out = norm(&b, "norm", x, st, h);
        begin_layer(&b, "dec.embed", PROF_PART_DEC);
        /* The decoder reads the encoder's table (Hugging Face's shared,
         * in T5 1.1 too, whose head alone is its own); only its relative
         * position bias is its own. */
        int demb = embedding(&b, sd, 0, 0, emb);
        m->ops[demb].params += (double)s->rel_pos_buckets * s->heads;
        x = demb;
        for (int i = 0; i < s->dec_layers; i++) {
            snprintf(name, sizeof name, "dec.l%d", i);
            begin_layer(&b, name, PROF_PART_DEC);
            x = layer(&b, x, enc_out, sd, st);
        }
        begin_layer(&b, "head", PROF_PART_DEC);
        head(&b, x, sd, 1);
    } else {
        begin_layer(&b, "head", PROF_PART_NONE);
        head(&b, x, st, s->family != PROF_FAM_BERT);
    }
    for (int i = 0; i < m->n_ops; i++)
        m->ops[i].train_params = m->ops[i].params;
    prof_model_count_params(m);
    fill_cuts(m);
    return m;
}

void prof_model_count_params(prof_model *m)
{
    /* tied ops (a tied LM head, T5's decoder embedding) share the
     * embedding's table: counted once */
    double table = (double)m->spec.vocab * m->spec.hidden;
    m->params = m->train_params = 0;
    for (int i = 0; i < m->n_ops; i++) {
        const prof_op *o = &m->ops[i];
        double shared = o->tied && (o->kind == PROF_OP_LM_HEAD ||
                                    o->kind == PROF_OP_EMBED) ? table : 0;
        m->params += o->params - shared;
        m->train_params += fmax(0, prof_op_train_params(o) - shared);
    }
}

prof_model *prof_model_for_topo(prof_model *m, const prof_topo *t,
                                util_err *e)
{
    if (!m || !t || m->spec.dtype == PROF_DT_FP32 || !t->n_gpu_types)
        return m;
    for (int i = 0; i < t->n_gpu_types; i++)
        if (t->gpu_types[i].form != PROF_FORM_CPU) return m;
    prof_model_spec s = m->spec;
    s.dtype = PROF_DT_FP32;
    prof_model_free(m);
    return prof_model_build(&s, e);
}

void prof_model_free(prof_model *m)
{
    if (!m) return;
    free(m->ops);
    free(m->layers);
    free(m->cut_bytes);
    free(m);
}

prof_cost prof_model_cost(const prof_model *m, int first, int n)
{
    prof_cost c = {0};
    for (int i = first; i < first + n && i < m->n_ops; i++) {
        const prof_op *o = &m->ops[i];
        c.fwd_flops += o->fwd_flops;
        c.bwd_in_flops += o->bwd_in_flops;
        c.bwd_w_flops += o->bwd_w_flops;
        c.params += o->params;
        c.act_bytes += o->act_bytes;
    }
    return c;
}

double prof_model_train_flops(const prof_model *m, int recompute)
{
    prof_cost c = prof_model_cost(m, 0, m->n_ops);
    return c.fwd_flops * (recompute ? 2 : 1) + c.bwd_in_flops + c.bwd_w_flops;
}

double prof_model_cut_bytes(const prof_model *m, int last)
{
    if (last < 0 || last >= m->n_ops) return 0;
    return m->cut_bytes[last];
}

/* cut_bytes[i]: bytes of every output produced at or before op i and read
 * after it. Op j's output crosses the cuts j .. (last reader - 1), so a
 * difference array over the last readers gives all cuts in O(ops). */
static void fill_cuts(prof_model *m)
{
    int n = m->n_ops;
    int *last = util_malloc(sizeof *last * (size_t)n);
    for (int j = 0; j < n; j++) last[j] = j;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < m->ops[k].n_in; i++)
            if (k > last[m->ops[k].in[i]]) last[m->ops[k].in[i]] = k;
    double *diff = util_calloc((size_t)n + 1, sizeof *diff);
    for (int j = 0; j < n; j++) {
        if (last[j] == j) continue;
        diff[j] += m->ops[j].out_bytes;
        diff[last[j]] -= m->ops[j].out_bytes;
    }
    m->cut_bytes = util_malloc(sizeof *m->cut_bytes * (size_t)n);
    double run = 0;
    for (int i = 0; i < n; i++) {
        run += diff[i];
        m->cut_bytes[i] = run;
    }
    free(diff);
    free(last);
}

/* ---- output ---- */

static const char *part_name(prof_part p)
{
    return p == PROF_PART_ENC ? "encoder" : p == PROF_PART_DEC ? "decoder" : "";
}

static void fmt_mib(double bytes, char *buf, size_t n)
{
    snprintf(buf, n, "%.2f", bytes / (1024.0 * 1024.0));
}

void prof_model_print(const prof_model *m, int ops, FILE *f)
{
    const prof_model_spec *s = &m->spec;
    char c1[32], c2[32], c3[32];
    fprintf(f, "model %s (%s, %s)\n", s->name, prof_family_name(s->family),
            prof_dtype_name(s->dtype));
    if (s->family == PROF_FAM_T5)
        fprintf(f, "  hidden %d, encoder %d + decoder %d layers, %d heads x "
                "%d, ffn %d, vocab %d, sequence %d in / %d out\n", s->hidden,
                s->layers, s->dec_layers, s->heads, s->head_dim, s->ffn,
                s->vocab, s->seq_len, s->dec_seq_len);
    else
        fprintf(f, "  hidden %d, %d layers, %d heads (%d kv) x %d, ffn %d%s, "
                "vocab %d, sequence %d\n", s->hidden, s->layers, s->heads,
                s->kv_heads, s->head_dim, s->ffn, s->gated_mlp ? " gated" : "",
                s->vocab, s->seq_len);
    /* what changes the numbers, not the costs: RoPE's base and the norms'
     * epsilon where a model gives its own */
    char rb[64] = "", ne[48] = "";
    if (s->rope_theta > 0 || s->rope_scaled)
        snprintf(rb, sizeof rb, "RoPE base %g%s", s->rope_theta > 0
                 ? s->rope_theta : 10000.0, s->rope_scaled ? ", scaled" : "");
    if (s->norm_eps > 0) snprintf(ne, sizeof ne, "norm eps %g", s->norm_eps);
    if (rb[0] || ne[0])
        fprintf(f, "  %s%s%s\n", rb, rb[0] && ne[0] ? "; " : "", ne);
    double tf = prof_model_train_flops(m, 0);
    fprintf(f, "  parameters %.0f (%s); training %s FLOP per sample "
            "(%s with recomputation)\n", m->params,
            util_fmt_count(m->params, c1, sizeof c1),
            util_fmt_count(tf, c2, sizeof c2),
            util_fmt_count(prof_model_train_flops(m, 1), c3, sizeof c3));
    if (!prof_finetune_full(&m->ft)) {
        char md[64];
        fprintf(f, "  fine-tuning %s: %.0f parameters train (%s, %.3f%%)\n",
                prof_finetune_name(&m->ft, md, sizeof md), m->train_params,
                util_fmt_count(m->train_params, c1, sizeof c1),
                100 * m->train_params / m->params);
    }
    fprintf(f, "  per sample: FLOP and bytes below are for one sequence; "
            "out = bytes crossing a cut after the row\n\n");
    util_table *t;
    if (!ops) {
        t = util_table_new(8);
        const char *h[] = {"layer", "part", "ops", "params", "fwd GFLOP",
                           "bwd GFLOP", "act MiB", "out MiB"};
        for (int i = 0; i < 8; i++) util_table_col(t, i, h[i], i < 2 ? 'l' : 'r');
        for (int l = 0; l < m->n_layers; l++) {
            const prof_layer *L = &m->layers[l];
            prof_cost c = prof_model_cost(m, L->first_op, L->n_ops);
            char no[16], p[32], fw[32], bw[32], act[32], out[32];
            snprintf(no, sizeof no, "%d", L->n_ops);
            util_fmt_count(c.params, p, sizeof p);
            snprintf(fw, sizeof fw, "%.2f", c.fwd_flops / 1e9);
            snprintf(bw, sizeof bw, "%.2f", (c.bwd_in_flops + c.bwd_w_flops) / 1e9);
            fmt_mib(c.act_bytes, act, sizeof act);
            fmt_mib(prof_model_cut_bytes(m, L->first_op + L->n_ops - 1), out,
                    sizeof out);
            const char *row[] = {L->name, part_name(L->part), no, p, fw, bw,
                                 act, out};
            util_table_row(t, row);
        }
    } else {
        t = util_table_new(9);
        const char *h[] = {"op", "kind", "params", "fwd MFLOP", "B MFLOP",
                           "W MFLOP", "act KiB", "out KiB", "GEMM m x n x k"};
        for (int i = 0; i < 9; i++)
            util_table_col(t, i, h[i], i < 2 || i == 8 ? 'l' : 'r');
        for (int i = 0; i < m->n_ops; i++) {
            const prof_op *o = &m->ops[i];
            char p[32], fw[32], bi[32], bw[32], act[32], out[32], g[64] = "";
            util_fmt_count(o->params, p, sizeof p);
            if (o->tied) snprintf(p + strlen(p), sizeof p - strlen(p), "*");
            snprintf(fw, sizeof fw, "%.1f", o->fwd_flops / 1e6);
            snprintf(bi, sizeof bi, "%.1f", o->bwd_in_flops / 1e6);
            snprintf(bw, sizeof bw, "%.1f", o->bwd_w_flops / 1e6);
            snprintf(act, sizeof act, "%.1f", o->act_bytes / 1024);
            snprintf(out, sizeof out, "%.1f", prof_model_cut_bytes(m, i) / 1024);
            for (int k = 0; k < o->n_gemm; k++) {
                size_t l = strlen(g);
                snprintf(g + l, sizeof g - l, "%s%.0fx%.0fx%.0f", k ? ", " : "",
                         o->gemm[k].m, o->gemm[k].n, o->gemm[k].k);
                if (o->gemm[k].batch > 1) {
                    l = strlen(g);
                    snprintf(g + l, sizeof g - l, " (x%.0f)", o->gemm[k].batch);
                }
            }
            const char *row[] = {o->name, prof_op_kind_name(o->kind), p, fw,
                                 bi, bw, act, out, g};
            util_table_row(t, row);
        }
    }
    util_table_print(t, f, "  ");
    util_table_free(t);
    if (ops) fprintf(f, "  * parameters shared with the embedding\n");
}

static json_t *cost_json(const prof_cost *c)
{
    return json_pack("{s:f,s:f,s:f,s:f,s:f}", "params", c->params,
                     "fwd_flops", c->fwd_flops, "bwd_in_flops", c->bwd_in_flops,
                     "bwd_w_flops", c->bwd_w_flops, "act_bytes", c->act_bytes);
}

json_t *prof_model_json(const prof_model *m, int ops)
{
    const prof_model_spec *s = &m->spec;
    json_t *spec = json_pack(
        "{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b,s:b,"
        "s:b,s:b,s:b,s:b,s:b,s:b,s:s,s:i,s:s}",
        "name", s->name, "family", prof_family_name(s->family), "hidden",
        s->hidden, "layers", s->layers, "dec_layers", s->dec_layers, "heads",
        s->heads, "kv_heads", s->kv_heads, "head_dim", s->head_dim, "ffn",
        s->ffn, "vocab", s->vocab, "seq_len", s->seq_len, "dec_seq_len",
        s->dec_seq_len, "max_pos", s->max_pos, "type_vocab", s->type_vocab,
        "tied_embeddings", s->tied_embeddings, "gated_mlp", s->gated_mlp,
        "rmsnorm", s->rmsnorm, "bias", s->bias, "dropout", s->dropout,
        "flash_attn", s->flash_attn, "fused_loss", s->fused_loss, "tf32", s->tf32, "dtype",
        prof_dtype_name(s->dtype), "batch", s->batch, "source", s->source);
    json_t *root = json_pack("{s:o,s:f,s:f,s:f}", "spec", spec, "params",
                             m->params, "train_flops_per_sample",
                             prof_model_train_flops(m, 0),
                             "train_flops_per_sample_recompute",
                             prof_model_train_flops(m, 1));
    char md[64];
    json_object_set_new(root, "finetune", json_string(
        prof_finetune_name(&m->ft, md, sizeof md)));
    json_object_set_new(root, "train_params", json_real(m->train_params));
    json_t *layers = json_array();
    for (int l = 0; l < m->n_layers; l++) {
        const prof_layer *L = &m->layers[l];
        prof_cost c = prof_model_cost(m, L->first_op, L->n_ops);
        json_t *j = cost_json(&c);
        json_object_set_new(j, "name", json_string(L->name));
        json_object_set_new(j, "part", json_string(part_name(L->part)));
        json_object_set_new(j, "first_op", json_integer(L->first_op));
        json_object_set_new(j, "n_ops", json_integer(L->n_ops));
        json_object_set_new(j, "out_bytes", json_real(prof_model_cut_bytes(
                                                m, L->first_op + L->n_ops - 1)));
        json_array_append_new(layers, j);
    }
    json_object_set_new(root, "layers", layers);
    if (ops) {
        json_t *arr = json_array();
        for (int i = 0; i < m->n_ops; i++) {
            const prof_op *o = &m->ops[i];
            json_t *in = json_array(), *g = json_array();
            for (int k = 0; k < o->n_in; k++)
                json_array_append_new(in, json_integer(o->in[k]));
            for (int k = 0; k < o->n_gemm; k++)
                json_array_append_new(g, json_pack("{s:f,s:f,s:f,s:f}", "m",
                                                   o->gemm[k].m, "n", o->gemm[k].n,
                                                   "k", o->gemm[k].k, "batch",
                                                   o->gemm[k].batch));
            json_array_append_new(arr, json_pack(
                "{s:s,s:s,s:s,s:s,s:i,s:b,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:o,"
                "s:o}",
                "name", o->name, "kind", prof_op_kind_name(o->kind), "role",
                prof_op_role_name(o->role), "part",
                part_name(o->part), "layer", o->layer, "tied", o->tied,
                "params", o->params, "fwd_flops", o->fwd_flops,
                "bwd_in_flops", o->bwd_in_flops, "bwd_w_flops", o->bwd_w_flops,
                "bytes_read", o->bytes_read, "bytes_written", o->bytes_written,
                "act_bytes", o->act_bytes, "out_bytes", o->out_bytes,
                "cut_bytes", prof_model_cut_bytes(m, i), "inputs", in, "gemm", g));
        }
        json_object_set_new(root, "ops", arr);
    }
    return root;
}
