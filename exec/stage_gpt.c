/* The GPT, Llama and OPT decoders and the BERT encoder as the pipeline
 * executor runs them: every op of the model graph (embedding, norms,
 * projections, the three attention ops or the fused one, MLP, residuals,
 * BERT's pooler and head transform, head, loss) with its forward,
 * input-gradient and weight-gradient parts, so a stage may be any range
 * of ops. Tensor
 * parallelism splits as Megatron-LM does: attention heads and the MLP's
 * columns (then rows), the vocabulary of the embedding, head and loss;
 * an all-reduce follows each row-parallel GEMM and the embedding in the
 * forward, and each column-parallel GEMM's input gradient in the
 * backward. Sequence parallelism (Korthikanti et al. 2022, a GPT-family
 * decoder's) splits the residual stream's tokens over the group: the
 * embedding and each row-parallel GEMM reduce-scatter their outputs, each
 * column-parallel GEMM all-gathers its input (again in the backward, for
 * its weight gradient, and reduce-scatters its input gradient), a row-
 * parallel GEMM all-gathers its output gradient, and a norm's weight
 * gradient from its tokens is summed over the group. Each op calls the
 * kernels of the run's backend (kernels/,
 * exec/backend.h) with the sizes one rank holds; with one rank the calls
 * are the reference trainer's, so on the CPU a pipeline of one microbatch
 * is bit-identical to it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/runtime.h"

/* The layer of op i in the per-layer tensors (-1 outside the layers).
 * A decoder's or encoder's graph layers are embed, l0..l{L-1}, head; a
 * T5's embed, enc.l0.., enc.norm, dec.embed, dec.l0.., head, and its
 * decoder's layers follow the encoder's in the tensors. */
static int gpt_layer(const prof_model *m, const exec_gpt_config *c, int i)
{
    int l = m->ops[i].layer - 1, L = c->layers;
    if (c->t5 && l >= L + 2 && l < L + 2 + c->dec_layers) return l - 2;
    return l >= 0 && l < L ? l : -1;
}

/* A T5 op's layer in the decoder's cross-attention tensors (-1: none) */
static int cross_layer(const prof_model *m, const exec_gpt_config *c, int i)
{
    int l = gpt_layer(m, c, i);
    return c->t5 && l >= c->layers ? l - c->layers : -1;
}

/* Whether a T5 attention op (or the output projection after it) is
 * cross-attention: its context reads the k | v of the encoder's output. */
static int is_cross(const prof_model *m, int i)
{
    const prof_op *o = &m->ops[i];
    if (o->role == PROF_ROLE_ATTN_OUT) o = &m->ops[o->in[0]];
    if (o->role == PROF_ROLE_ATTN_SCORES)
        return o->n_in > 1 && m->ops[o->in[1]].role == PROF_ROLE_KV;
    if (o->role == PROF_ROLE_ATTN_SOFTMAX) return is_cross(m, o->in[0]);
    if (o->role == PROF_ROLE_ATTN_CONTEXT || o->role == PROF_ROLE_ATTN_FUSED)
        return o->n_in > 1 && m->ops[o->in[1]].role == PROF_ROLE_KV;
    return 0;
}

/* Sizes of a role's output and kept state for one microbatch of N tokens
 * on one tensor-parallel rank. */
typedef enum {
    SZ_0, SZ_N, SZ_2N, SZ_NC, SZ_NQKVL, SZ_N3CL, SZ_NCL, SZ_NFL, SZ_NVL,
    SZ_SCORES, SZ_BC, SZ_N2CL
} xsize;

/* What each role of the GPT graph keeps and does: output and auxiliary
 * sizes; whether its backward reads its own output, input 0, input 1; a
 * weight-gradient part. */
static const struct xrole {
    prof_op_role role;
    xsize out, aux;
    int self, in0, in1, w;
} xroles[] = {
    {PROF_ROLE_EMBED, SZ_NC, SZ_0, 0, 0, 0, 1},
    {PROF_ROLE_NORM, SZ_NC, SZ_2N, 0, 1, 0, 1},
    {PROF_ROLE_QKV, SZ_NQKVL, SZ_0, 0, 1, 0, 1},
    {PROF_ROLE_QKV_EXPAND, SZ_N3CL, SZ_0, 0, 0, 0, 0},
    {PROF_ROLE_ATTN_SCORES, SZ_SCORES, SZ_0, 0, 1, 0, 0},
    {PROF_ROLE_ATTN_SOFTMAX, SZ_SCORES, SZ_0, 1, 0, 0, 0},
    {PROF_ROLE_ATTN_CONTEXT, SZ_NCL, SZ_0, 0, 1, 1, 0},
    {PROF_ROLE_ATTN_FUSED, SZ_NCL, SZ_0, 0, 1, 0, 0},
    {PROF_ROLE_ATTN_OUT, SZ_NC, SZ_0, 0, 1, 0, 1},
    {PROF_ROLE_RESIDUAL, SZ_NC, SZ_0, 0, 0, 0, 0},
    {PROF_ROLE_MLP_UP, SZ_NFL, SZ_0, 0, 1, 0, 1},
    {PROF_ROLE_MLP_ACT, SZ_NFL, SZ_0, 0, 1, 0, 0},
    {PROF_ROLE_MLP_DOWN, SZ_NC, SZ_0, 0, 1, 0, 1},
    {PROF_ROLE_LM_HEAD, SZ_NVL, SZ_0, 0, 1, 0, 1},
    {PROF_ROLE_LOSS, SZ_N, SZ_NVL, 0, 0, 0, 0},
    /* BERT's: the pooler (no loss reads it: no backward), the head's
     * dense transform and its GELU */
    {PROF_ROLE_POOLER, SZ_BC, SZ_0, 0, 0, 0, 1},
    {PROF_ROLE_MLM_DENSE, SZ_NC, SZ_0, 0, 1, 0, 1},
    {PROF_ROLE_MLM_ACT, SZ_NC, SZ_0, 0, 1, 0, 0},
    /* T5's cross-attention: q from the decoder, k | v from the encoder's
     * output */
    {PROF_ROLE_Q, SZ_NCL, SZ_0, 0, 1, 0, 1},
    {PROF_ROLE_KV, SZ_N2CL, SZ_0, 0, 1, 0, 1},
};

/* The targets LoRA may put beside a linear role's weight matrix (q, k
 * and v: the parts of the fused projection; gate and up: SwiGLU's; a
 * T5's cross-attention's q, k | v and output: EXEC_LORA_CROSS), W's
 * inputs k and each target's outputs n[b] (exec_lora_dims), and whether
 * W is row-parallel under tensor parallelism (the attention's output,
 * the MLP's second linear; the others are column-parallel); 0 for a role
 * without one. A target's outputs start after those of the ones before
 * it in the op's output. cross: the op is a cross-attention's. */
static int lora_targets(const exec_gpt_config *c, prof_op_role role,
                        int cross, unsigned bits[3], size_t *k, size_t n[3],
                        int *rowpar)
{
    int nb = 1;
    unsigned x = cross ? EXEC_LORA_CROSS : 0;
    *rowpar = 0;
    switch (role) {
    case PROF_ROLE_QKV:
        bits[0] = PROF_LORA_Q, bits[1] = PROF_LORA_K, bits[2] = PROF_LORA_V;
        nb = 3;
        break;
    case PROF_ROLE_Q: bits[0] = PROF_LORA_Q | EXEC_LORA_CROSS; break;
    case PROF_ROLE_KV:
        bits[0] = PROF_LORA_K | EXEC_LORA_CROSS;
        bits[1] = PROF_LORA_V | EXEC_LORA_CROSS;
        nb = 2;
        break;
    case PROF_ROLE_ATTN_OUT: bits[0] = PROF_LORA_OUT | x, *rowpar = 1; break;
    case PROF_ROLE_MLP_UP:
        if (c->swiglu)
            bits[0] = PROF_LORA_GATE, bits[1] = PROF_LORA_UP, nb = 2;
        else
            bits[0] = PROF_LORA_UP;
        break;
    case PROF_ROLE_MLP_DOWN: bits[0] = PROF_LORA_DOWN, *rowpar = 1; break;
    default:
        return 0;
    }
    for (int b = 0; b < nb; b++) exec_lora_dims(c, bits[b], k, &n[b]);
    return nb;
}

/* The LoRA adapters beside op p's weight matrix (its layer's targets of
 * the model's mode) as one of tp ranks holds them: beside a column-
 * parallel W each adapter's output columns are split and A is whole,
 * beside a row-parallel one A's rows are split (x A is summed over the
 * group). */
static void lora_geometry(const prof_model *m, const exec_gpt_config *c,
                          size_t N, int tp, int cross, exec_xop *p)
{
    unsigned bits[3];
    size_t k, n[3];
    int rowpar, col = 0,
        nb = lora_targets(c, p->role, cross, bits, &k, n, &rowpar);
    p->lora_rowpar = rowpar;
    p->lora_k = (int)(rowpar ? k / tp : k);
    for (int b = 0; b < nb; b++) {
        int nl = (int)(rowpar ? n[b] : n[b] / tp);
        if (exec_lora_index(c, &m->ft, p->layer, bits[b]) >= 0) {
            p->lora_col[p->n_lora] = col;
            p->lora_n[p->n_lora++] = nl;
        }
        col += nl;
    }
    p->lora_keep_n = N * (size_t)p->n_lora * (size_t)m->ft.rank;
}

/* The roles whose output is the residual stream, split by tokens under
 * sequence parallelism; BERT's masked-LM transform (its dense layer,
 * replicated, and GELU) runs on a rank's tokens too, as Megatron-LM's
 * BERT head does. */
static int seq_role(prof_op_role r)
{
    return r == PROF_ROLE_EMBED || r == PROF_ROLE_NORM ||
           r == PROF_ROLE_ATTN_OUT || r == PROF_ROLE_RESIDUAL ||
           r == PROF_ROLE_MLP_DOWN || r == PROF_ROLE_MLM_DENSE ||
           r == PROF_ROLE_MLM_ACT;
}

int exec_xops_build(const prof_model *m, const exec_gpt_config *c, int mbs,
                    int T, int tp, int sp, exec_xop **out, util_err *e)
{
    if (c->heads % tp || c->ffn % tp || exec_kv_heads(c) % tp)
        return util_errf(e, UTIL_EXIT_USAGE,
                         "tensor parallelism %d must divide the heads (%d), "
                         "the key and value heads (%d) and the MLP width "
                         "(%d)", tp, c->heads, exec_kv_heads(c), c->ffn);
    sp = sp && tp > 1;
    /* the simulator's rule (Megatron-LM's): each sequence splits */
    if (sp && !sim_sp_splits(m, tp))
        return util_errf(e, UTIL_EXIT_USAGE, "sequence parallelism over %d "
                         "ranks must divide each sequence (%d tokens)", tp,
                         T);
    size_t C = c->hidden, D = exec_inner(c);
    /* T5: the decoder's length */
    int Td = c->t5 ? m->spec.dec_seq_len : T;
    if (c->t5 && Td < 1)
        return util_errf(e, UTIL_EXIT_USAGE, "a T5 without a decoder "
                         "length (dec_seq_len)");
    /* the graph expands q | k | v (RoPE, grouped heads) where the
     * config's kernels need it */
    int qkv = 0, xp = 0;
    for (int i = 0; i < m->n_ops; i++) {
        qkv += m->ops[i].role == PROF_ROLE_QKV;
        xp += m->ops[i].role == PROF_ROLE_QKV_EXPAND;
    }
    int want = exec_qkv_expands(c) ? qkv : 0;
    if (xp != want)
        return util_errf(e, UTIL_EXIT_USAGE,
                         "the model graph expands q|k|v %d times, the "
                         "run's config %d (RoPE or grouped heads)", xp,
                         want);
    exec_xop *x = util_calloc((size_t)m->n_ops, sizeof *x);
    for (int i = 0; i < m->n_ops; i++) {
        const prof_op *o = &m->ops[i];
        const struct xrole *r = NULL;
        for (size_t k = 0; k < sizeof xroles / sizeof *xroles; k++)
            if (xroles[k].role == o->role) r = &xroles[k];
        if (!r) {
            free(x);
            return util_errf(e, UTIL_EXIT_USAGE,
                             "op %s (%s): the executor's kernels have no "
                             "such op", o->name, prof_op_role_name(o->role));
        }
        exec_xop *p = &x[i];
        p->role = o->role;
        p->layer = gpt_layer(m, c, i);
        p->xlayer = cross_layer(m, c, i);
        p->n_in = o->n_in > 2 ? 2 : o->n_in;
        for (int k = 0; k < p->n_in; k++) p->in[k] = o->in[k];
        /* the tokens of its rows and keys: an attention op's from its
         * producer (T5's cross-attention reads the encoder's), a k | v
         * projection's the encoder's */
        p->Tq = p->Tk = o->part == PROF_PART_DEC ? Td : T;
        p->causal = !c->encoder && (!c->t5 || o->part == PROF_PART_DEC);
        if (o->role == PROF_ROLE_KV) p->Tq = p->Tk = T;
        if (c->t5 && (o->role == PROF_ROLE_ATTN_SCORES ||
                      o->role == PROF_ROLE_ATTN_FUSED) && is_cross(m, i))
            p->Tk = T, p->cross = 1, p->causal = 0;
        if (o->role == PROF_ROLE_ATTN_SOFTMAX ||
            o->role == PROF_ROLE_ATTN_CONTEXT) {
            const exec_xop *q = &x[o->in[0]];
            p->Tq = q->Tq, p->Tk = q->Tk, p->cross = q->cross;
            p->causal = q->causal;
        }
        if (c->t5 && c->rel_buckets && !p->cross &&
            (o->role == PROF_ROLE_ATTN_SOFTMAX ||
             o->role == PROF_ROLE_ATTN_FUSED))
            p->rel = o->part == PROF_PART_DEC ? 2 : 1;
        size_t Nq = (size_t)mbs * (size_t)p->Tq;
        const size_t sz[] = {
            [SZ_0] = 0, [SZ_N] = Nq, [SZ_2N] = 2 * Nq, [SZ_NC] = Nq * C,
            [SZ_NQKVL] = Nq * (exec_qkv_rows(c) / (size_t)tp),
            [SZ_N3CL] = Nq * 3 * (D / tp), [SZ_NCL] = Nq * (D / tp),
            [SZ_N2CL] = Nq * 2 * (D / tp),
            [SZ_NFL] = Nq * (size_t)(c->ffn / tp),
            [SZ_NVL] = Nq * (size_t)exec_vocab_shard(c->vocab, tp),
            [SZ_SCORES] = (size_t)mbs * (size_t)(c->heads / tp) *
                          (size_t)p->Tq * (size_t)p->Tk,
            [SZ_BC] = (size_t)mbs * C};
        p->out_n = sz[r->out];
        p->aux_n = sz[r->aux];
        /* SwiGLU's up projection holds the gate's columns and the up's */
        if (o->role == PROF_ROLE_MLP_UP && c->swiglu) p->out_n *= 2;
        p->grad = o->grad;
        p->train_w = r->w && o->grad == PROF_GRAD_TRAIN;
        lora_geometry(m, c, Nq, tp, c->t5 && is_cross(m, i), p);
        p->has_w = p->train_w || p->n_lora > 0;
        /* nothing before the first op that trains runs a backward; a
         * linear reads its input for its weight gradients only */
        int bwd = o->grad != PROF_GRAD_NONE;
        int linear = o->role == PROF_ROLE_QKV || o->role == PROF_ROLE_Q ||
                     o->role == PROF_ROLE_KV ||
                     o->role == PROF_ROLE_ATTN_OUT ||
                     o->role == PROF_ROLE_MLP_UP ||
                     o->role == PROF_ROLE_MLP_DOWN ||
                     o->role == PROF_ROLE_LM_HEAD ||
                     o->role == PROF_ROLE_MLM_DENSE;
        p->self_keep = bwd && r->self;
        p->need_in[0] = bwd && (linear ? p->has_w : r->in0);
        /* a cross-attention's scores read the encoder's keys back */
        p->need_in[1] = bwd && (r->in1 || p->cross);
        /* ReLU's backward reads the signs of its output, which the MLP's
         * second linear keeps anyway (as PyTorch's ReLU saves its
         * result), not its input */
        if (o->role == PROF_ROLE_MLP_ACT && c->relu) {
            p->self_keep = bwd;
            p->need_in[0] = 0;
        }
        if (sp && seq_role(o->role)) {
            p->seq = 1;
            p->out_n /= (size_t)tp;
            p->aux_n /= (size_t)tp;
        }
        /* the pooler reads each sequence's first token: every rank's
         * tokens gathered (its output is whole on every rank, and no
         * gradient reaches it) */
        p->seq_in = sp && (o->role == PROF_ROLE_QKV ||
                           o->role == PROF_ROLE_Q || o->role == PROF_ROLE_KV ||
                           o->role == PROF_ROLE_MLP_UP ||
                           o->role == PROF_ROLE_LM_HEAD ||
                           o->role == PROF_ROLE_POOLER);
    }
    *out = x;
    return 0;
}

int exec_vocab_shard(int V, int tp)
{
    return (V + tp - 1) / tp;
}

/* Vocabulary rows rank r really holds (the last rank's shard is padded). */
static size_t vocab_rows(size_t V, size_t Vl, int r)
{
    size_t lo = (size_t)r * Vl;
    return lo >= V ? 0 : (V - lo < Vl ? V - lo : Vl);
}

/* ---------------------------------------------------------- parameters */

typedef struct slices {
    exec_slice *s;
    int n, cap;
    size_t off, foff;       /* next float of the trained, frozen arena */
    int frozen, op;         /* of the op whose slices are being added */
    int q4;                 /* its weight matrix frozen in NF4 (QLoRA) */
} slices;

static void add_slice(slices *v, int tensor, size_t row0, size_t rows,
                      size_t col0, size_t ncols, size_t fcols, int decay,
                      int norm_owner, int tied, int save_owner)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 16;
        v->s = util_realloc(v->s, sizeof *v->s * (size_t)v->cap);
    }
    exec_slice *s = &v->s[v->n++];
    memset(s, 0, sizeof *s);
    s->tensor = tensor;
    s->n = rows * ncols;
    s->row0 = row0;
    s->rows = rows;
    s->col0 = col0;
    s->ncols = ncols;
    s->fcols = fcols;
    s->decay = decay;
    s->frozen = v->frozen;
    s->op = v->op;
    /* a frozen weight has no gradient to count */
    s->norm_owner = norm_owner && !v->frozen;
    s->tied = tied;
    s->save_owner = save_owner;
    /* QLoRA's 4-bit base: a block's weight matrices, not their biases */
    s->q4 = v->q4 && v->frozen &&
            (tensor == EXEC_P_QKVW || tensor == EXEC_P_ATTPROJW ||
             tensor == EXEC_P_FCW || tensor == EXEC_P_FCPROJW ||
             tensor == EXEC_P_XQW || tensor == EXEC_P_XKVW ||
             tensor == EXEC_P_XOW);
    s->nq = s->q4 ? exec_nf4_geom(row0 * fcols + col0, rows, ncols, fcols)
                        .floats
                  : s->n;
    size_t *at = v->frozen ? &v->foff : &v->off;
    s->off = *at;
    *at += s->nq;
}

/* Floats of the current arena no tensor fills (a vocabulary shard's
 * padding rows). */
static void pad(slices *v, size_t n)
{
    *(v->frozen ? &v->foff : &v->off) += n;
}

/* Which norm an op is: the op after it says (a decoder's: before the
 * attention, the MLP or the head; an encoder's: after the attention or
 * the MLP, before the decoder, or the embeddings' in the graph's first
 * layer). */
static int norm_tensor(const prof_model *m, const exec_gpt_config *c, int i)
{
    prof_op_role next = i + 1 < m->n_ops ? m->ops[i + 1].role : PROF_ROLE_LOSS;
    /* T5: before the self-attention, the cross-attention or the MLP; the
     * encoder's last (the decoder's embedding follows); the decoder's */
    if (c->t5)
        return next == PROF_ROLE_QKV ? EXEC_P_LN1W
             : next == PROF_ROLE_Q ? EXEC_P_XLNW
             : next == PROF_ROLE_MLP_UP ? EXEC_P_LN2W
             : next == PROF_ROLE_EMBED ? EXEC_P_ENCNW : EXEC_P_LNFW;
    if (c->encoder)
        return m->ops[i].layer == 0 ? EXEC_P_LNEW
             : next == PROF_ROLE_MLP_UP ? EXEC_P_LN1W
             : next == PROF_ROLE_LM_HEAD ? EXEC_P_LNFW : EXEC_P_LN2W;
    return next == PROF_ROLE_QKV ? EXEC_P_LN1W
         : next == PROF_ROLE_MLP_UP ? EXEC_P_LN2W : EXEC_P_LNFW;
}

/* The LoRA adapters of graph op i (the targets of its role in its layer)
 * as rank r of tp holds them: beside a column-parallel W, A whole (saved
 * and counted by rank 0) and B's columns split; beside a row-parallel
 * one, A's columns (W's rows) split and B whole. Replica 0 saves. */
static void add_lora(slices *v, const prof_model *m,
                     const exec_gpt_config *c, int i, int tp, int r,
                     int replica)
{
    unsigned bits[3];
    size_t k, nn[3];
    int rowpar, nb = lora_targets(c, m->ops[i].role, c->t5 && is_cross(m, i),
                                  bits, &k, nn, &rowpar);
    size_t R = (size_t)m->ft.rank, kl = k / tp;
    int rep0 = replica == 0, one = rep0 && r == 0;
    int was = v->frozen;
    v->frozen = 0;              /* adapters train */
    for (int b = 0; b < nb; b++) {
        int a = exec_lora_index(c, &m->ft, gpt_layer(m, c, i),
                                bits[b]);
        if (a < 0) continue;
        size_t n = nn[b], nl = n / tp;
        if (rowpar) {
            add_slice(v, 2 * a, 0, R, r * kl, kl, k, 1, rep0, 0, rep0);
            add_slice(v, 2 * a + 1, 0, R, 0, n, n, 1, one, 0, one);
        } else {
            add_slice(v, 2 * a, 0, R, 0, k, k, 1, one, 0, one);
            add_slice(v, 2 * a + 1, 0, R, r * nl, nl, n, 1, rep0, 0, rep0);
        }
        v->s[v->n - 2].lora = v->s[v->n - 1].lora = 1;
    }
    v->frozen = was;
}

size_t exec_slices_build(const prof_model *m, const exec_gpt_config *c,
                         int first, int last, int tp, int r, int replica,
                         int tied_owner, exec_slice **out, int *n,
                         size_t *n_frozen)
{
    size_t C = c->hidden, F = c->ffn, Fl = F / tp, D = exec_inner(c),
           Dl = D / tp;
    size_t V = c->vocab, Vl = (size_t)exec_vocab_shard(c->vocab, tp);
    size_t P = (size_t)c->max_pos + (size_t)c->pos_offset,
           Vr = vocab_rows(V, Vl, r);
    /* a layer's q | k | v rows and this rank's of each (its heads), its
     * MLP up rows (SwiGLU: gate, then up) */
    size_t QKV = exec_qkv_rows(c), KV = (QKV - D) / 2, KVl = KV / tp,
           FC = exec_fc_rows(c);
    size_t qkv0[3] = {r * Dl, D + r * KVl, D + KV + r * KVl},
           qkvn[3] = {Dl, KVl, KVl};
    int rep0 = replica == 0, one = rep0 && r == 0;
    slices v = {0};
    int have_wte = 0;
    /* T5: each stack's relative-position table, copied to every stage
     * holding one of its self-attentions; the first such stage's copy
     * is counted in the norm and saved. The rank's heads' columns. */
    int rel_first[3] = {-1, -1, -1}, have_rel[3] = {0, 0, 0};
    size_t NH = (size_t)c->heads, NHl = NH / (size_t)tp;
    int rel_frozen[3] = {0, 0, 0};
    for (int i = m->n_ops - 1; c->t5 && i >= 0; i--) {
        int k = m->ops[i].part == PROF_PART_DEC ? 2 : 1;
        if ((m->ops[i].role == PROF_ROLE_ATTN_SOFTMAX ||
             m->ops[i].role == PROF_ROLE_ATTN_FUSED) && !is_cross(m, i))
            rel_first[k] = i;
        if (m->ops[i].role == PROF_ROLE_EMBED)
            rel_frozen[k] = m->ops[i].grad != PROF_GRAD_TRAIN;
    }
    for (int i = first; i <= last; i++) {
        int l = gpt_layer(m, c, i);
        size_t L = l < 0 ? 0 : (size_t)l;
        /* a fine-tuning mode's frozen weights (prof_model_finetune) */
        v.frozen = m->ops[i].grad != PROF_GRAD_TRAIN;
        v.q4 = m->ft.kind == PROF_FT_QLORA;
        v.op = i;
        switch (m->ops[i].role) {
        case PROF_ROLE_EMBED:
            /* T5's decoder reads the encoder's table: a tied copy as a
             * tied head's */
            if (c->t5 && i > 0) {
                if (have_wte) break;
                add_slice(&v, EXEC_P_WTE, r * Vl, Vr, 0, C, C, 1,
                          rep0 && tied_owner, 1, rep0 && tied_owner);
                pad(&v, (Vl - Vr) * C);
                have_wte = 1;
                break;
            }
            /* vocabulary-parallel rows, the shard padded to Vl rows (as
             * Megatron-LM pads the vocabulary); positions replicated. A
             * T5's decoder reads it too, with a head of its own or not */
            add_slice(&v, EXEC_P_WTE, r * Vl, Vr, 0, C, C, 1, rep0,
                      c->tied || c->t5, rep0);
            pad(&v, (Vl - Vr) * C);
            if (!exec_rope(c))
                add_slice(&v, EXEC_P_WPE, 0, P, 0, C, C, 1, one, 0, one);
            if (c->type_vocab)
                add_slice(&v, EXEC_P_WTT, 0, (size_t)c->type_vocab, 0, C, C,
                          1, one, 0, one);
            have_wte = 1;
            break;
        case PROF_ROLE_NORM: {
            int t = norm_tensor(m, c, i);
            size_t row = t == EXEC_P_LNFW || t == EXEC_P_LNEW ||
                                 t == EXEC_P_ENCNW
                             ? 0
                         : t == EXEC_P_XLNW ? (size_t)cross_layer(m, c, i)
                                            : L;
            add_slice(&v, t, row, 1, 0, C, C, 0, one, 0, one);
            if (!c->rmsnorm)
                add_slice(&v, t + 1, row, 1, 0, C, C, 0, one, 0, one);
            break;
        }
        case PROF_ROLE_QKV:
            for (int k = 0; k < 3; k++)
                add_slice(&v, EXEC_P_QKVW, L * QKV + qkv0[k], qkvn[k], 0, C,
                          C, 1, rep0, 0, rep0);
            if (c->bias)
                for (int k = 0; k < 3; k++)
                    add_slice(&v, EXEC_P_QKVB, L * QKV + qkv0[k], qkvn[k], 0,
                              1, 1, 0, rep0, 0, rep0);
            add_lora(&v, m, c, i, tp, r, replica);
            break;
        case PROF_ROLE_Q: {
            size_t X = (size_t)cross_layer(m, c, i);
            add_slice(&v, EXEC_P_XQW, X * D + r * Dl, Dl, 0, C, C, 1, rep0,
                      0, rep0);
            add_lora(&v, m, c, i, tp, r, replica);
            break;
        }
        case PROF_ROLE_KV: {
            size_t X = (size_t)cross_layer(m, c, i);
            for (size_t k = 0; k < 2; k++)
                add_slice(&v, EXEC_P_XKVW, X * 2 * D + k * D + r * Dl, Dl, 0,
                          C, C, 1, rep0, 0, rep0);
            add_lora(&v, m, c, i, tp, r, replica);
            break;
        }
        case PROF_ROLE_ATTN_SOFTMAX:
        case PROF_ROLE_ATTN_FUSED: {
            int k = c->t5 && c->rel_buckets && !is_cross(m, i)
                        ? (m->ops[i].part == PROF_PART_DEC ? 2 : 1) : 0;
            if (!k || have_rel[k]) break;
            int own = rep0 && rel_first[k] >= first && rel_first[k] <= last;
            /* it trains with its stack's embedding, whose parameters the
             * model graph counts it in */
            v.frozen = rel_frozen[k];
            add_slice(&v, k == 2 ? EXEC_P_RELD : EXEC_P_RELE, 0,
                      (size_t)c->rel_buckets, r * NHl, NHl, NH, 1, own, 1,
                      own);
            have_rel[k] = 1;
            break;
        }
        case PROF_ROLE_ATTN_OUT:
            if (c->t5 && is_cross(m, i)) {
                size_t X = (size_t)cross_layer(m, c, i);
                add_slice(&v, EXEC_P_XOW, X * C, C, r * Dl, Dl, D, 1, rep0, 0,
                          rep0);
                add_lora(&v, m, c, i, tp, r, replica);
                break;
            }
            add_slice(&v, EXEC_P_ATTPROJW, L * C, C, r * Dl, Dl, D, 1, rep0,
                      0, rep0);
            if (c->bias)
                add_slice(&v, EXEC_P_ATTPROJB, L * C, C, 0, 1, 1, 0, one, 0,
                          one);
            add_lora(&v, m, c, i, tp, r, replica);
            break;
        case PROF_ROLE_MLP_UP:
            /* SwiGLU: the rank's gate rows, then its up rows */
            for (size_t h = 0; h < FC / F; h++)
                add_slice(&v, EXEC_P_FCW, L * FC + h * F + r * Fl, Fl, 0, C,
                          C, 1, rep0, 0, rep0);
            if (c->bias)
                for (size_t h = 0; h < FC / F; h++)
                    add_slice(&v, EXEC_P_FCB, L * FC + h * F + r * Fl, Fl, 0,
                              1, 1, 0, rep0, 0, rep0);
            add_lora(&v, m, c, i, tp, r, replica);
            break;
        case PROF_ROLE_MLP_DOWN:
            add_slice(&v, EXEC_P_FCPROJW, L * C, C, r * Fl, Fl, F, 1, rep0, 0,
                      rep0);
            if (c->bias)
                add_slice(&v, EXEC_P_FCPROJB, L * C, C, 0, 1, 1, 0, one, 0,
                          one);
            add_lora(&v, m, c, i, tp, r, replica);
            break;
        case PROF_ROLE_POOLER:
        case PROF_ROLE_MLM_DENSE: {
            int pool = m->ops[i].role == PROF_ROLE_POOLER;
            add_slice(&v, pool ? EXEC_P_POOLW : EXEC_P_MLMW, 0, C, 0, C, C, 1,
                      one, 0, one);
            add_slice(&v, pool ? EXEC_P_POOLB : EXEC_P_MLMB, 0, C, 0, 1, 1, 0,
                      one, 0, one);
            break;
        }
        case PROF_ROLE_LM_HEAD:
            /* an encoder's decoder has a bias: the rank's vocabulary rows,
             * padded as its weight's */
            if (c->encoder) {
                add_slice(&v, EXEC_P_LMB, r * Vl, Vr, 0, 1, 1, 0, rep0, 0,
                          rep0);
                pad(&v, Vl - Vr);
            }
            if (c->tied && have_wte) break; /* the embedding's own table */
            /* a tied head's copy counts in the norm and is saved only
             * where no stage holds the embedding (tied_owner) */
            if (c->tied)
                add_slice(&v, EXEC_P_WTE, r * Vl, Vr, 0, C, C, 1,
                          rep0 && tied_owner, 1, rep0 && tied_owner);
            else
                add_slice(&v, EXEC_P_LMW, r * Vl, Vr, 0, C, C, 1, rep0, 0,
                          rep0);
            pad(&v, (Vl - Vr) * C);
            break;
        default:
            break;
        }
    }
    *out = v.s;
    *n = v.n;
    if (n_frozen) *n_frozen = v.foff;
    return v.off;
}

/* ------------------------------------------------------------- tensors */

static int ext_index(const exec_stage *st, int op)
{
    for (int k = 0; k < st->n_ext; k++)
        if (st->ext_op[k] == op) return k;
    return -1;
}

/* The input view of op's k-th input in a record. */
static exec_view *in_view(exec_stage *st, exec_rec *r, int op,
                          const exec_xop *x, int k)
{
    int j = x[op].in[k];
    if (j >= st->first && j <= st->last) return &r->out[j - st->first];
    int q = ext_index(st, j);
    UTIL_NEVER(q < 0);
    return &r->ext[q];
}

/* The gradient view of op's k-th input, allocated (zeroed) on first use. */
static float *din(exec_worker *w, exec_stage *st, exec_rec *r, int op,
                  int k, util_err *e)
{
    const exec_xop *x = w->rt->xop;
    int j = x[op].in[k];
    exec_view *v;
    if (j >= st->first && j <= st->last) {
        v = &r->dout[j - st->first];
    } else {
        int q = ext_index(st, j);
        UTIL_NEVER(q < 0);
        v = &r->dext[q];
    }
    if (!v->b) {
        EXEC_KERN(w, v->b = exec_buf_new(&w->mem, x[j].out_n, 1));
        if (!v->b) {
            exec_oom(w, "a gradient", e);
            return NULL;
        }
        v->off = 0;
        v->n = x[j].out_n;
    }
    return exec_view_p(v);
}

static float *newbuf(exec_worker *w, exec_view *v, size_t n, int zero,
                     const char *what, util_err *e)
{
    exec_view_drop(v);
    /* zeroing is a fill kernel on a GPU: timed as one */
    EXEC_KERN(w, v->b = exec_buf_new(&w->mem, n, zero));
    if (!v->b) {
        exec_oom(w, what, e);
        return NULL;
    }
    v->off = 0;
    v->n = n;
    return v->b->p;
}

/* A scratch tensor of the worker's device (charged like any other). */
static exec_buf *scratch(exec_worker *w, size_t n, const char *what,
                         util_err *e)
{
    exec_buf *b;
    EXEC_KERN(w, b = exec_buf_new(&w->mem, n, 1));
    if (!b) exec_oom(w, what, e);
    return b;
}

/* A collective over the tensor-parallel group, timed into *tp_ns: a sum
 * of buf's n floats (in place), or under sequence parallelism a
 * reduce-scatter of a whole of n into this rank's part (n / tp) or an
 * all-gather of the parts into a whole. */
enum { TP_SUM, TP_SCATTER, TP_GATHER };

static int tp_coll(exec_worker *w, int kind, float *whole, float *part,
                   size_t n, int64_t *tp_ns, util_err *e)
{
    int64_t t0 = (int64_t)exec_now_ns();
    exec_runtime *rt = w->rt;
    exec_xport *x = rt->x;
    int rc = kind == TP_SUM
           ? x->allreduce(x, rt, w->id, EXEC_GROUP_TP, whole, n, 0, e)
           : kind == TP_SCATTER
           ? x->reduce_scatter(x, rt, w->id, whole, part, n, e)
           : x->allgather(x, rt, w->id, part, whole, n, e);
    int64_t dt = (int64_t)exec_now_ns() - t0;
    *tp_ns += dt;
    w->wait_ns += dt;   /* a collective: copies and waits, not runtime */
    return rc;
}

static int tp_sum(exec_worker *w, float *buf, size_t n, int64_t *tp_ns,
                  util_err *e)
{
    return tp_coll(w, TP_SUM, buf, NULL, n, tp_ns, e);
}

static int tp_scatter(exec_worker *w, float *whole, float *part, size_t n,
                      int64_t *tp_ns, util_err *e)
{
    return tp_coll(w, TP_SCATTER, whole, part, n, tp_ns, e);
}

/* Sequence parallelism: a replicated weight's gradient from this rank's
 * tokens (gs: its weight's nw floats, then its bias's nb), summed over the
 * group and added to gw and gb (NULL: none); gs goes. */
static int add_summed(exec_worker *w, exec_buf *gs, float *gw, size_t nw,
                      float *gb, size_t nb, int64_t *tp_ns, util_err *e)
{
    const kern_table *K = w->rt->be->k;
    int rc = tp_sum(w, gs->p, nw + nb, tp_ns, e);
    if (!rc) EXEC_KERN(w, K->accumulate(gw, gs->p, nw));
    if (!rc && gb && nb) EXEC_KERN(w, K->accumulate(gb, gs->p + nw, nb));
    exec_buf_unref(gs);
    return rc;
}

/* Every rank's tokens of a residual-stream tensor (this rank's part:
 * n / tp floats) gathered into a scratch tensor of n; NULL on failure. */
static exec_buf *gathered(exec_worker *w, const float *part, size_t n,
                          const char *what, int64_t *tp_ns, util_err *e)
{
    exec_buf *b;
    EXEC_KERN(w, b = exec_buf_new(&w->mem, n, 0));
    if (!b) {
        exec_oom(w, what, e);
        return NULL;
    }
    if (tp_coll(w, TP_GATHER, b->p, (float *)part, n, tp_ns, e)) {
        exec_buf_unref(b);
        return NULL;
    }
    return b;
}

/* Parameter pointers of op i in a stage: the weight (or token table) and
 * the bias (or position table) of its slices, its LoRA adapters' A and B;
 * gradients NULL for what is frozen. */
typedef struct oparams {
    float *w, *b, *gw, *gb, *x, *gx;
    float *la[3], *lb[3], *gla[3], *glb[3];
} oparams;

/* A weight (gradient) at arena offset off: in the stage's arenas, or in
 * its device window when its states are offloaded (exec/offload.c). */
/* NULL where the weights are not there: ZeRO-3's weight-gradient pass,
 * which reads none (the IR gathers for the forward and backward only). */
static float *wparam(const exec_stage *st, const float *wv, size_t off)
{
    return st->ofl ? exec_ofl_wp(st, off) : wv ? (float *)wv + off : NULL;
}

static float *gparam(const exec_stage *st, size_t off)
{
    return st->ofl ? exec_ofl_gp(st, off) : st->g + off;
}

/* The slices holding op's weight and bias in the stage (-1: none): those
 * of its tensors at its layer's rows. */
static void op_slices(const exec_runtime *rt, const exec_stage *st, int op,
                      int *first_w, int *first_b, int *first_x)
{
    const prof_model *m = rt->model;
    prof_op_role role = m->ops[op].role;
    int want_w = -1, want_b = -1, want_x = -1;
    *first_w = *first_b = *first_x = -1;
    switch (role) {
    case PROF_ROLE_EMBED:
        want_w = EXEC_P_WTE;
        want_b = EXEC_P_WPE;
        want_x = EXEC_P_WTT;
        break;
    case PROF_ROLE_NORM:
        want_w = norm_tensor(m, &rt->cfg, op);
        want_b = rt->cfg.rmsnorm ? -1 : want_w + 1;
        break;
    case PROF_ROLE_Q: want_w = EXEC_P_XQW; break;
    case PROF_ROLE_KV: want_w = EXEC_P_XKVW; break;
    case PROF_ROLE_ATTN_SOFTMAX:
    case PROF_ROLE_ATTN_FUSED:
        /* T5: its stack's relative-position table */
        want_x = rt->xop[op].rel == 2 ? EXEC_P_RELD
               : rt->xop[op].rel == 1 ? EXEC_P_RELE : -1;
        break;
    case PROF_ROLE_POOLER: want_w = EXEC_P_POOLW; want_b = EXEC_P_POOLB; break;
    case PROF_ROLE_MLM_DENSE: want_w = EXEC_P_MLMW; want_b = EXEC_P_MLMB; break;
    case PROF_ROLE_QKV: want_w = EXEC_P_QKVW; want_b = EXEC_P_QKVB; break;
    case PROF_ROLE_ATTN_OUT:
        want_w = rt->cfg.t5 && is_cross(m, op) ? EXEC_P_XOW
                                                : EXEC_P_ATTPROJW;
        want_b = want_w == EXEC_P_XOW ? -1 : EXEC_P_ATTPROJB;
        break;
    case PROF_ROLE_MLP_UP: want_w = EXEC_P_FCW; want_b = EXEC_P_FCB; break;
    case PROF_ROLE_MLP_DOWN:
        want_w = EXEC_P_FCPROJW;
        want_b = EXEC_P_FCPROJB;
        break;
    case PROF_ROLE_LM_HEAD:
        want_w = rt->cfg.tied ? EXEC_P_WTE : EXEC_P_LMW;
        want_b = EXEC_P_LMB;
        break;
    default:
        return;
    }
    int l = gpt_layer(m, &rt->cfg, op), xl = cross_layer(m, &rt->cfg, op);
    size_t C = rt->cfg.hidden;
    for (int k = 0; k < st->n_sl; k++) {
        const exec_slice *s = &st->sl[k];
        /* an adapter's tensor is its index in the LoRA arena, not a
         * model tensor: a model without biases would take an adapter
         * for one */
        if (s->lora) continue;
        int layer_ok = 1;
        switch (s->tensor) {
        case EXEC_P_QKVW: case EXEC_P_QKVB:
            layer_ok = (int)(s->row0 / exec_qkv_rows(&rt->cfg)) == l;
            break;
        case EXEC_P_ATTPROJW: case EXEC_P_ATTPROJB:
        case EXEC_P_FCPROJW: case EXEC_P_FCPROJB:
            layer_ok = (int)(s->row0 / C) == l;
            break;
        case EXEC_P_FCW: case EXEC_P_FCB:
            layer_ok = (int)(s->row0 / exec_fc_rows(&rt->cfg)) == l;
            break;
        case EXEC_P_LN1W: case EXEC_P_LN1B: case EXEC_P_LN2W:
        case EXEC_P_LN2B:
            layer_ok = (int)s->row0 == l;
            break;
        case EXEC_P_XLNW: layer_ok = (int)s->row0 == xl; break;
        case EXEC_P_XQW:
            layer_ok = (int)(s->row0 / exec_inner(&rt->cfg)) == xl;
            break;
        case EXEC_P_XKVW:
            layer_ok = (int)(s->row0 / (2 * exec_inner(&rt->cfg))) == xl;
            break;
        case EXEC_P_XOW: layer_ok = (int)(s->row0 / C) == xl; break;
        default:
            break;
        }
        if (!layer_ok) continue;
        if (s->tensor == want_w && *first_w < 0) *first_w = k;
        if (s->tensor == want_b && *first_b < 0) *first_b = k;
        if (s->tensor == want_x && *first_x < 0) *first_x = k;
    }
}

void exec_stage_op_slices(const exec_runtime *rt, exec_stage *st)
{
    st->sl_w = util_malloc(sizeof(int) * (size_t)st->n_ops);
    st->sl_b = util_malloc(sizeof(int) * (size_t)st->n_ops);
    st->sl_l = util_malloc(sizeof(int) * (size_t)st->n_ops);
    st->sl_x = util_malloc(sizeof(int) * (size_t)st->n_ops);
    for (int i = 0; i < st->n_ops; i++) {
        op_slices(rt, st, st->first + i, &st->sl_w[i], &st->sl_b[i],
                  &st->sl_x[i]);
        st->sl_l[i] = -1;
    }
    for (int k = st->n_sl - 1; k >= 0; k--)
        if (st->sl[k].lora) st->sl_l[st->sl[k].op - st->first] = k;
}

/* A slice's weights: in the frozen arena, or in version wv of the trained
 * one; its gradient, NULL when frozen. */
static float *slice_w(const exec_stage *st, const float *wv,
                      const exec_slice *s)
{
    return s->frozen ? st->wf + s->off : wparam(st, wv, s->off);
}

static float *slice_g(const exec_stage *st, const exec_slice *s)
{
    return s->frozen ? NULL : gparam(st, s->off);
}

static oparams op_params(const exec_worker *w, const exec_stage *st,
                         const float *wv, int op)
{
    (void)w;
    oparams o = {0};
    int i = op - st->first;
    int first_w = st->sl_w[i], first_b = st->sl_b[i], l = st->sl_l[i],
        first_x = st->sl_x[i];
    if (first_w >= 0) {
        o.w = slice_w(st, wv, &st->sl[first_w]);
        o.gw = slice_g(st, &st->sl[first_w]);
    }
    if (first_b >= 0) {
        o.b = slice_w(st, wv, &st->sl[first_b]);
        o.gb = slice_g(st, &st->sl[first_b]);
    }
    if (first_x >= 0) {
        o.x = slice_w(st, wv, &st->sl[first_x]);
        o.gx = slice_g(st, &st->sl[first_x]);
    }
    for (int a = 0; l >= 0 && a < w->rt->xop[op].n_lora; a++) {
        const exec_slice *A = &st->sl[l + 2 * a], *B = A + 1;
        o.la[a] = slice_w(st, wv, A);
        o.lb[a] = slice_w(st, wv, B);
        o.gla[a] = slice_g(st, A);
        o.glb[a] = slice_g(st, B);
    }
    return o;
}

/* The sizes one tensor-parallel rank works with (kernels.h's letters). */
typedef struct dims {
    int tp, B, T, N, C, Cl, NHl, Fl, Vl;
    int KVl, hs, QKVl;      /* key and value heads; a head's width; the
                             * q | k | v projection's outputs */
} dims;

static dims dims_of(const exec_runtime *rt)
{
    const exec_gpt_config *c = &rt->cfg;
    dims d = {.tp = rt->tp, .B = rt->mbs, .T = rt->T, .C = c->hidden};
    d.N = d.B * d.T;
    d.Cl = d.C / d.tp;
    d.NHl = c->heads / d.tp;
    d.Fl = c->ffn / d.tp;
    d.Vl = exec_vocab_shard(c->vocab, d.tp);
    d.KVl = exec_kv_heads(c) / d.tp;
    d.hs = c->hidden / c->heads;
    d.QKVl = (d.NHl + 2 * d.KVl) * d.hs;
    return d;
}

/* ------------------------------------------------------------- forward */

/* Vocabulary-parallel softmax cross-entropy (Megatron-LM): each rank
 * holds Vl logits of a row; the row maxima, the sums of exponentials and
 * the target's logit are summed over the group (the maxima by gathering
 * them, the sum of a rank's own slot and zeros elsewhere being exact). */
static int xent_tp_forward(exec_worker *w, float *losses, float *probs,
                           const float *logits, const int *tgt, int N, int Vl,
                           int64_t *tp_ns, util_err *e)
{
    exec_runtime *rt = w->rt;
    const kern_table *K = rt->be->k;
    int tp = rt->tp, r = w->rank;
    /* the columns of padded rows are no words: out of the softmax */
    int Vv = (int)vocab_rows((size_t)rt->cfg.vocab, (size_t)Vl, r);
    exec_buf *b = scratch(w, (size_t)N * (tp + 2), "the loss's sums", e);
    if (!b) return -1;
    float *mx = b->p, *sum = b->p + (size_t)N * tp, *tl = sum + N;
    EXEC_KERN(w, K->xent_shard_max(mx + (size_t)r * N, logits, N, Vl, Vv));
    int rc = tp_sum(w, mx, (size_t)N * tp, tp_ns, e);
    if (!rc) {
        EXEC_KERN(w, K->xent_shard_exp(probs, sum, tl, mx, logits, tgt, tp,
                                       r * Vl, N, Vl, Vv));
        rc = tp_sum(w, sum, 2 * (size_t)N, tp_ns, e);
    }
    if (!rc)
        EXEC_KERN(w, K->xent_shard_norm(losses, probs, sum, mx, tl, tgt, N,
                                        Vl));
    exec_buf_unref(b);
    return rc;
}

/* The sum of a microbatch's token losses, in double in token order. */
static void count_loss_of(exec_worker *w, const float *losses, int N)
{
    float *h = util_malloc(sizeof *h * ((size_t)N + 1));
    w->rt->be->to_host(h, losses, sizeof *h * (size_t)N);
    double s = 0;
    for (int k = 0; k < N; k++) s += h[k];
    w->loss_sum += s;
    free(h);
}

/* ---------------------------------------------------------------- LoRA */

/* Columns [col, col+n) of a matrix of rows ld wide, out to a packed copy
 * (to_packed) or back: the kernels take whole rows, and an adapter of the
 * fused q|k|v projection owns a third of them. */
static void cols_copy(exec_worker *w, float *packed, float *m, size_t N,
                      size_t ld, size_t col, size_t n, int to_packed)
{
    const exec_backend *be = w->rt->be;
    if (to_packed)
        EXEC_KERN(w, be->copy2d(packed, n, m + col, ld, N, n));
    else
        EXEC_KERN(w, be->copy2d(m + col, ld, packed, n, N, n));
}

/* The widest adapter output that is a part of the op's OC columns (0:
 * each adapter writes them all): the scratch it is copied through. */
static int lora_wide(const exec_xop *x, int OC)
{
    int wide = 0;
    for (int a = 0; a < x->n_lora; a++)
        if (x->lora_n[a] != OC && x->lora_n[a] > wide) wide = x->lora_n[a];
    return wide;
}

/* LoRA beside a linear's weight W (Hu et al. 2021): out += s (x A) B per
 * adapter, with s = alpha / R and alpha = R: the paper sets alpha to the
 * first R it tries and does not tune it, so s = 1 and nothing is scaled.
 * Every adapter's x A is kept for B's gradient (r->xa, N x R each).
 * Beside a row-parallel W a rank's x A is a partial sum, summed over the
 * group first, and rank 0 alone adds (x A) B to its part of the output
 * before the output's own sum, as it adds the bias. OC: the output's
 * width on this rank. */
static int lora_forward(exec_worker *w, exec_rec *r, int i, const exec_xop *x,
                        const oparams *p, const float *in, float *out, int OC,
                        int64_t *tp_ns, util_err *e)
{
    if (!x->n_lora) return 0;
    exec_runtime *rt = w->rt;
    const kern_table *K = rt->be->k;
    int N = rt->mbs * x->Tq, R = rt->model->ft.rank,
        wide = lora_wide(x, OC);
    size_t NR = (size_t)N * R;
    float *xa = newbuf(w, &r->xa[i], x->lora_keep_n, 0, "LoRA's x A", e);
    if (!xa) return -1;
    for (int a = 0; a < x->n_lora; a++)
        EXEC_KERN(w, K->linear_forward(xa + a * NR, in, p->la[a], NULL, N,
                                       x->lora_k, R));
    if (x->lora_rowpar && rt->tp > 1 &&
        tp_sum(w, xa, x->lora_keep_n, tp_ns, e))
        return -1;
    if (x->lora_rowpar && w->rank) return 0;
    exec_buf *s = !wide ? NULL
                : scratch(w, (size_t)N * wide, "LoRA's output", e);
    if (wide && !s) return -1;
    for (int a = 0; a < x->n_lora; a++) {
        /* += (x A) B: the input-gradient GEMM adds, with B as W */
        int n = x->lora_n[a], part = n != OC;
        float *y = part ? s->p : out;
        if (part) cols_copy(w, y, out, (size_t)N, OC, x->lora_col[a], n, 1);
        EXEC_KERN(w, K->linear_backward_input(y, xa + a * NR, p->lb[a], N, n,
                                              R));
        if (part) cols_copy(w, y, out, (size_t)N, OC, x->lora_col[a], n, 0);
    }
    exec_buf_unref(s);
    return 0;
}

/* LoRA's part of a linear's backward, from the output gradient dy (OC
 * wide on this rank) and what the forward kept: per adapter d(x A) =
 * dy B^T, then the input part dx += d(x A) A^T (dx NULL: none; beside a
 * column-parallel W the caller sums dx over the group after) and the
 * weight part dB += (x A)^T dy, dA += x^T d(x A) (beside a column-
 * parallel W, d(x A) is a rank's partial sum: summed over the group
 * first). An input part with the weight part to come (a zero-bubble B)
 * keeps d(x A) (r->dxa, N x R an adapter), and that weight part reads
 * it: it needs neither adapter's weights, which ZeRO-3 does not gather
 * for a W pass. */
static int lora_backward(exec_worker *w, exec_rec *r, int i,
                         const exec_xop *x, const oparams *p, const float *in,
                         float *dy, int OC, float *dx, int weight_part,
                         int64_t *tp_ns, util_err *e)
{
    if (!x->n_lora) return 0;
    exec_runtime *rt = w->rt;
    const kern_table *K = rt->be->k;
    int N = rt->mbs * x->Tq, R = rt->model->ft.rank, k = x->lora_k,
        wide = lora_wide(x, OC);
    size_t NR = (size_t)N * R;
    const float *xa = exec_view_p(&r->xa[i]);
    if (weight_part && !xa)
        return util_errf(e, UTIL_EXIT_FAIL, "LoRA's x A was not kept for "
                         "its weight gradients");
    /* d(x A) kept by the input part for this weight part, or to keep */
    float *kept = exec_view_p(&r->dxa[i]);
    if (!weight_part &&
        !(kept = newbuf(w, &r->dxa[i], x->lora_keep_n, 0, "LoRA's d(x A)",
                        e)))
        return -1;
    exec_buf *s = scratch(w, NR + (size_t)N * wide, "LoRA's gradients", e);
    if (!s) return -1;
    float *dya = s->p + NR;
    int rc = 0;
    for (int a = 0; a < x->n_lora && !rc; a++) {
        const float *g = dy;
        int n = x->lora_n[a];
        if (n != OC) {
            cols_copy(w, dya, dy, (size_t)N, OC, x->lora_col[a], n, 1);
            g = dya;
        }
        float *dxa = kept ? kept + a * NR : s->p;
        if (!kept || !weight_part)
            EXEC_KERN(w, K->linear_forward(dxa, g, p->lb[a], NULL, N, n, R));
        if (dx)
            EXEC_KERN(w, K->linear_backward_input(dx, dxa, p->la[a], N, k,
                                                  R));
        if (!weight_part) continue;
        EXEC_KERN(w, K->linear_backward_weight(p->glb[a], NULL, xa + a * NR,
                                               g, N, n, R));
        if (!x->lora_rowpar && rt->tp > 1)
            rc = tp_sum(w, dxa, NR, tp_ns, e);
        if (!rc)
            EXEC_KERN(w, K->linear_backward_weight(p->gla[a], NULL, dxa, in,
                                                   N, k, R));
    }
    exec_buf_unref(s);
    return rc;
}

/* QLoRA: op's weight matrix dequantized from the frozen arena's NF4
 * into a buffer of the device (as bitsandbytes does before each
 * product): its consecutive slices of the tensor (q, k and v; gate and
 * up) one after the other. NULL when the weight is not 4-bit, or, with
 * *failed set, when the device has no room. */
static exec_buf *q4_weight(exec_worker *w, const exec_stage *st, int op,
                           int *failed, util_err *e)
{
    int k0 = st->sl_w[op - st->first], k1 = k0;
    *failed = 0;
    if (k0 < 0 || !st->sl[k0].q4) return NULL;
    size_t n = 0;
    while (k1 < st->n_sl && st->sl[k1].q4 && st->sl[k1].op == op &&
           st->sl[k1].tensor == st->sl[k0].tensor)
        n += st->sl[k1++].n;
    exec_buf *b;
    EXEC_KERN(w, b = exec_buf_new(&w->mem, n, 0));
    if (!b) {
        exec_oom(w, "QLoRA's dequantized weight", e);
        *failed = 1;
        return NULL;
    }
    const kern_table *K = w->rt->be->k;
    size_t at = 0;
    for (int k = k0; k < k1; k++) {
        const exec_slice *s = &st->sl[k];
        exec_nf4 q = exec_nf4_geom(s->row0 * s->fcols + s->col0, s->rows,
                                   s->ncols, s->fcols);
        const float *gs;
        const signed char *bc;
        const unsigned char *cd;
        exec_nf4_view(&q, st->wf + s->off, &gs, &bc, &cd);
        EXEC_KERN(w, K->nf4_dequantize(b->p + at, cd, bc, gs, q.flat0,
                                       q.rows, q.cols, q.ld, q.b0));
        at += s->n;
    }
    return b;
}

/* ------------------------------------------------------------------ T5 */

/* A T5 record's ids (runtime.c fill_tokens): the encoder's tokens (B T),
 * the decoder's inputs (B Td: token 0, then the targets but the last),
 * its targets (B Td), the encoder's bucket per relative offset (2T - 1),
 * the decoder's (2 Td - 1). */
typedef struct t5ids {
    const int *enc, *dec, *tgt, *benc, *bdec;
} t5ids;

static t5ids t5_ids(const exec_runtime *rt, const exec_rec *r)
{
    t5ids d = {0};
    const int *p = exec_view_i(&r->ids);
    if (!p) return d;
    size_t Ne = (size_t)rt->mbs * rt->T, Nd = (size_t)rt->mbs * rt->Td;
    d.enc = p;
    d.dec = p + Ne;
    d.tgt = p + Ne + Nd;
    d.benc = p + Ne + 2 * Nd;
    d.bdec = d.benc + 2 * rt->T - 1;
    return d;
}

/* The scale of T5's tied head: its input times 1/sqrt(hidden) (Mesh
 * TensorFlow's; Hugging Face's scale_decoder_outputs) */
static float t5_head_scale(const exec_gpt_config *c)
{
    return c->tied ? 1.0f / sqrtf((float)c->hidden) : 1.0f;
}

/* Where an attention op's q, k and v are and their rows' widths: a self-
 * attention's in its fused projection (q | k | v), a cross-attention's
 * q in the q projection's output and k | v in the k | v projection's. */
typedef struct t5qkv {
    int ldq, ldk, ko, vo;
} t5qkv;

static t5qkv t5_qkv(const exec_xop *x, int Dl)
{
    t5qkv g;
    if (x->cross) {
        g.ldq = Dl;
        g.ldk = 2 * Dl;
        g.ko = 0;
        g.vo = Dl;
    } else {
        g.ldq = g.ldk = 3 * Dl;
        g.ko = Dl;
        g.vo = 2 * Dl;
    }
    return g;
}

/* What a T5 op works with on one tensor-parallel rank: the ranks, the
 * microbatch, the widths (hidden, the rank's heads' and their count, a
 * head's, the MLP's, the vocabulary's shard), the op's rows, the
 * record's ids and where its attention's q, k and v are. */
typedef struct t5op {
    int tp, B, C, Dl, NHl, hs, F, Vl, N, Nr;
    t5ids id;
    t5qkv g;
} t5op;

static t5op t5_op(const exec_runtime *rt, const exec_rec *r,
                  const exec_xop *x)
{
    const exec_gpt_config *c = &rt->cfg;
    t5op d;
    d.tp = rt->tp;
    d.B = rt->mbs;
    d.C = c->hidden;
    d.Dl = (int)exec_inner(c) / d.tp;
    d.NHl = c->heads / d.tp;
    d.hs = exec_hs(c);
    d.F = c->ffn / d.tp;
    d.Vl = exec_vocab_shard(c->vocab, d.tp);
    d.N = d.B * x->Tq;
    /* the residual stream's rows on this rank (sequence parallel) */
    d.Nr = rt->sp ? d.N / d.tp : d.N;
    d.id = t5_ids(rt, r);
    d.g = t5_qkv(x, d.Dl);
    return d;
}

/* Fused attention's scores (pre) and their biased softmax (att), by the
 * unfused ops' kernels: q from q, k and v from kv (the same tensor in
 * self-attention). */
static void t5_probs(const kern_table *K, const t5op *d, const exec_xop *x,
                     const oparams *p, const float *q, const float *kv,
                     float *pre, float *att)
{
    K->attnx_scores_forward(pre, q, kv + d->g.ko, d->g.ldq, d->g.ldk, d->B,
                            x->Tq, x->Tk, d->NHl, d->hs, 1.0f);
    K->attnx_softmax_forward(att, pre, p->x,
                             x->rel == 2 ? d->id.bdec : d->id.benc, d->B,
                             d->NHl, x->Tq, x->Tk, x->causal);
}

/* Op op (the stage's i-th) of a T5 forward; LoRA's adapters beside its
 * linears add their part before a row-parallel one's sum. */
static int t5_forward(exec_worker *w, exec_rec *r, int op, int i,
                      int count_loss, const oparams *p, float *out,
                      float *aux, const float *in0, const float *in1,
                      int64_t *tp_ns, util_err *e)
{
    exec_runtime *rt = w->rt;
    const kern_table *K = rt->be->k;
    const exec_xop *x = &rt->xop[op];
    const exec_gpt_config *c = &rt->cfg;
    t5op d = t5_op(rt, r, x);
    switch (x->role) {
    case PROF_ROLE_EMBED: {
        /* tensor parallel: the rank's vocabulary rows, summed */
        const int *tok = op ? d.id.dec : d.id.enc;
        if (d.tp == 1) {
            EXEC_KERN(w,
                      K->embed_forward(out, tok, p->w, NULL, d.B, x->Tq, d.C));
            break;
        }
        /* (sequence parallel: reduce-scattered, this rank's tokens) */
        exec_buf *all = NULL;
        if (x->seq && !(all = scratch(w, (size_t)d.N * d.C, "the embedding",
                                      e)))
            return -1;
        float *y = all ? all->p : out;
        EXEC_KERN(w, K->embed_shard_forward(y, tok, p->w, w->rank * d.Vl,
                                            d.Vl, d.N, d.C));
        int rc = all ? tp_scatter(w, y, out, (size_t)d.N * d.C, tp_ns, e)
                     : tp_sum(w, out, (size_t)d.N * d.C, tp_ns, e);
        exec_buf_unref(all);
        if (rc) return -1;
        break;
    }
    case PROF_ROLE_NORM:
        EXEC_KERN(
            w, K->rmsnorm_forward(out, aux, in0, p->w, d.Nr, d.C, c->norm_eps));
        break;
    case PROF_ROLE_QKV:
    case PROF_ROLE_Q:
    case PROF_ROLE_KV:
    case PROF_ROLE_MLP_UP: {
        /* (T5 1.1's GeGLU: the gate's columns, then the up's) */
        int OC = x->role == PROF_ROLE_QKV  ? 3 * d.Dl
                 : x->role == PROF_ROLE_Q  ? d.Dl
                 : x->role == PROF_ROLE_KV ? 2 * d.Dl
                 : c->swiglu               ? 2 * d.F
                                           : d.F;
        EXEC_KERN(w, K->linear_forward(out, in0, p->w, NULL, d.N, d.C, OC));
        if (lora_forward(w, r, i, x, p, in0, out, OC, tp_ns, e)) return -1;
        break;
    }
    case PROF_ROLE_ATTN_SCORES:
        EXEC_KERN(w, K->attnx_scores_forward(
                         out, in0, (x->cross ? in1 : in0) + d.g.ko, d.g.ldq,
                         d.g.ldk, d.B, x->Tq, x->Tk, d.NHl, d.hs, 1.0f));
        break;
    case PROF_ROLE_ATTN_SOFTMAX:
        EXEC_KERN(w, K->attnx_softmax_forward(
                         out, in0, p->x, x->rel == 2 ? d.id.bdec : d.id.benc,
                         d.B, d.NHl, x->Tq, x->Tk, x->causal));
        break;
    case PROF_ROLE_ATTN_CONTEXT:
        EXEC_KERN(w, K->attnx_context_forward(out, in0, in1 + d.g.vo, d.g.ldk,
                                              d.B, x->Tq, x->Tk, d.NHl, d.hs));
        break;
    case PROF_ROLE_ATTN_FUSED: {
        /* fused attention keeps q, k, v and its output: the scores and
         * their softmax (with the position bias) are a buffer of the op,
         * made by the three ops' kernels (the unfused graph's bits) */
        size_t n = (size_t)d.B * d.NHl * x->Tq * x->Tk;
        exec_buf *sc = scratch(w, 2 * n, "the attention's scores", e);
        if (!sc) return -1;
        float *pre = sc->p, *att = sc->p + n;
        const float *kv = x->cross ? in1 : in0;
        EXEC_KERN(w, {
            t5_probs(K, &d, x, p, in0, kv, pre, att);
            K->attnx_context_forward(out, att, kv + d.g.vo, d.g.ldk, d.B,
                                     x->Tq, x->Tk, d.NHl, d.hs);
        });
        exec_buf_unref(sc);
        break;
    }
    case PROF_ROLE_ATTN_OUT:
    case PROF_ROLE_MLP_DOWN: {
        /* row-parallel: the ranks' parts summed (sequence parallel:
         * reduce-scattered) */
        int IC = x->role == PROF_ROLE_ATTN_OUT ? d.Dl : d.F;
        exec_buf *all = NULL;
        if (x->seq && !(all = scratch(w, (size_t)d.N * d.C, "a row-parallel "
                                      "output", e)))
            return -1;
        float *y = all ? all->p : out;
        EXEC_KERN(w, K->linear_forward(y, in0, p->w, NULL, d.N, IC, d.C));
        int rc = lora_forward(w, r, i, x, p, in0, y, d.C, tp_ns, e);
        if (!rc && all) rc = tp_scatter(w, y, out, (size_t)d.N * d.C, tp_ns, e);
        else if (!rc && d.tp > 1)
            rc = tp_sum(w, out, (size_t)d.N * d.C, tp_ns, e);
        exec_buf_unref(all);
        if (rc) return -1;
        break;
    }
    case PROF_ROLE_RESIDUAL:
        EXEC_KERN(w, K->residual_forward(out, in0, in1, (size_t)d.Nr * d.C));
        break;
    case PROF_ROLE_MLP_ACT:
        if (c->swiglu)
            EXEC_KERN(w, K->geglu_forward(out, in0, d.N, d.F));
        else if (c->relu)
            EXEC_KERN(w, K->relu_forward(out, in0, (size_t)d.N * d.F));
        else if (c->gelu_erf)
            EXEC_KERN(w, K->gelu_erf_forward(out, in0, (size_t)d.N * d.F));
        else
            EXEC_KERN(w, K->gelu_forward(out, in0, (size_t)d.N * d.F));
        break;
    case PROF_ROLE_LM_HEAD: {
        /* the input scaled into a buffer of the op, then the product (the
         * rank's vocabulary rows) */
        exec_buf *xs = scratch(w, (size_t)d.N * d.C, "the head's input", e);
        if (!xs) return -1;
        EXEC_KERN(w, {
            K->scale_add(xs->p, in0, t5_head_scale(c), (size_t)d.N * d.C);
            K->linear_forward(out, xs->p, p->w, NULL, d.N, d.C, d.Vl);
        });
        exec_buf_unref(xs);
        break;
    }
    case PROF_ROLE_LOSS:
        if (d.tp == 1)
            EXEC_KERN(w, K->softmax_xent_forward(out, aux, in0, d.id.tgt, d.N,
                                                 c->vocab));
        else if (xent_tp_forward(w, out, aux, in0, d.id.tgt, d.N, d.Vl, tp_ns,
                                 e))
            return -1;
        if (count_loss) count_loss_of(w, out, d.N);
        break;
    default: util_never_(__FILE__, __LINE__, "a T5 op role without a kernel");
    }
    return 0;
}

/* A linear's input part, the stage's i-th op: d0 += the product's input
 * gradient and its adapters' (into a buffer of the op, summed over the
 * group where the linear is column-parallel), their weight part too
 * where weight_part says */
static int t5_lin_in(exec_worker *w, exec_rec *r, int i, const exec_xop *x,
                     const oparams *p, const float *in0, float *d0,
                     float *dout, int N, int IC, int OC, int sum,
                     int weight_part, int64_t *tp_ns, util_err *e)
{
    const kern_table *K = w->rt->be->k;
    if (!sum) {
        EXEC_KERN(w, K->linear_backward_input(d0, dout, p->w, N, IC, OC));
        return lora_backward(w, r, i, x, p, in0, dout, OC, d0, weight_part,
                             tp_ns, e);
    }
    /* sequence parallel: reduce-scattered into its part of the scratch,
     * this rank's tokens */
    size_t n = (size_t)N * IC, nr = x->seq_in ? n / (size_t)w->rt->tp : 0;
    exec_buf *tmp = scratch(w, n + nr, "an input gradient", e);
    if (!tmp) return -1;
    EXEC_KERN(w, K->linear_backward_input(tmp->p, dout, p->w, N, IC, OC));
    int rc = lora_backward(w, r, i, x, p, in0, dout, OC, tmp->p, weight_part,
                           tp_ns, e);
    if (!rc && nr) {
        rc = tp_scatter(w, tmp->p, tmp->p + n, n, tp_ns, e);
        if (!rc) EXEC_KERN(w, K->accumulate(d0, tmp->p + n, nr));
    } else {
        if (!rc) rc = tp_sum(w, tmp->p, n, tp_ns, e);
        if (!rc) EXEC_KERN(w, K->accumulate(d0, tmp->p, n));
    }
    exec_buf_unref(tmp);
    return rc;
}

static int t5_backward(exec_worker *w, exec_rec *r, int op, int i,
                       int input_part, int weight_part, int base_w,
                       const oparams *p, float *dout,
                       const float *out, const float *aux, const float *in0,
                       const float *in1, float *d0, float *d1, int64_t *tp_ns,
                       util_err *e)
{
    exec_runtime *rt = w->rt;
    const kern_table *K = rt->be->k;
    const exec_xop *x = &rt->xop[op];
    const exec_gpt_config *c = &rt->cfg;
    t5op d = t5_op(rt, r, x);
    switch (x->role) {
    case PROF_ROLE_EMBED:
        if (base_w && d.tp == 1)
            EXEC_KERN(w, K->embed_backward(p->gw, NULL, dout,
                                           op ? d.id.dec : d.id.enc, d.B,
                                           x->Tq, d.C));
        else if (base_w)
            EXEC_KERN(w, K->embed_shard_backward(
                             p->gw, NULL, dout, op ? d.id.dec : d.id.enc,
                             w->rank * d.Vl, d.Vl, d.B, x->Tq, d.C));
        break;
    case PROF_ROLE_NORM:
        if (input_part)
            EXEC_KERN(w, K->rmsnorm_backward_input(d0, dout, in0, p->w, aux,
                                                   d.Nr, d.C));
        if (base_w) {
            /* (sequence parallel: this rank's tokens' weight gradient,
             * summed over the group before it is added) */
            exec_buf *gs = NULL;
            if (x->seq && !(gs = scratch(w, (size_t)d.C, "a norm's gradient",
                                         e)))
                return -1;
            EXEC_KERN(w, K->rmsnorm_backward_weight(gs ? gs->p : p->gw, dout,
                                                    in0, aux, d.Nr, d.C));
            if (gs && add_summed(w, gs, p->gw, (size_t)d.C, NULL, 0, tp_ns,
                                 e))
                return -1;
        }
        break;
    case PROF_ROLE_QKV:
    case PROF_ROLE_Q:
    case PROF_ROLE_KV:
    case PROF_ROLE_MLP_UP:
    case PROF_ROLE_ATTN_OUT:
    case PROF_ROLE_MLP_DOWN: {
        /* column-parallel ones (the projections into heads, the MLP's
         * first) sum their input gradient over the group */
        int rowpar =
            x->role == PROF_ROLE_ATTN_OUT || x->role == PROF_ROLE_MLP_DOWN;
        int IC = x->role == PROF_ROLE_ATTN_OUT   ? d.Dl
                 : x->role == PROF_ROLE_MLP_DOWN ? d.F
                                                 : d.C;
        int OC = x->role == PROF_ROLE_QKV      ? 3 * d.Dl
                 : x->role == PROF_ROLE_Q      ? d.Dl
                 : x->role == PROF_ROLE_KV     ? 2 * d.Dl
                 : x->role == PROF_ROLE_MLP_UP ? (c->swiglu ? 2 : 1) * d.F
                                               : d.C;
        if (input_part && t5_lin_in(w, r, i, x, p, in0, d0, dout, d.N, IC,
                                    OC, d.tp > 1 && !rowpar, weight_part,
                                    tp_ns, e))
            return -1;
        if (!input_part && weight_part &&
            lora_backward(w, r, i, x, p, in0, dout, OC, NULL, 1, tp_ns, e))
            return -1;
        if (base_w)
            EXEC_KERN(w, K->linear_backward_weight(p->gw, NULL, dout, in0, d.N,
                                                   IC, OC));
        break;
    }
    case PROF_ROLE_ATTN_SCORES:
        if (input_part)
            EXEC_KERN(w, K->attnx_scores_backward(
                             d0, (x->cross ? d1 : d0) + d.g.ko, dout, in0,
                             (x->cross ? in1 : in0) + d.g.ko, d.g.ldq, d.g.ldk,
                             d.B, x->Tq, x->Tk, d.NHl, d.hs, 1.0f));
        break;
    case PROF_ROLE_ATTN_SOFTMAX:
        /* its own output gradient is the kernel's scratch; the bias
         * table's gradient is the scores' (the input gradient, which
         * only this op writes) summed by bucket, taken here */
        if (!input_part) break;
        EXEC_KERN(w, K->attnx_softmax_backward(d0, dout, out, d.B, d.NHl,
                                               x->Tq, x->Tk, x->causal));
        if (p->gx)
            EXEC_KERN(w, K->attnx_bias_backward(
                             p->gx, d0, x->rel == 2 ? d.id.bdec : d.id.benc,
                             d.B, d.NHl, x->Tq, x->Tk, x->causal));
        break;
    case PROF_ROLE_ATTN_CONTEXT:
        if (input_part)
            EXEC_KERN(w, K->attnx_context_backward(d0, d1 + d.g.vo, dout, in0,
                                                   in1 + d.g.vo, d.g.ldk, d.B,
                                                   x->Tq, x->Tk, d.NHl, d.hs));
        break;
    case PROF_ROLE_ATTN_FUSED: {
        /* the scores and softmax computed again, as FlashAttention does
         * in its backward, then the three ops' backwards in the unfused
         * graph's order: the context's, the softmax's (and the bias
         * table's), the scores' */
        if (!input_part) break;
        size_t n = (size_t)d.B * d.NHl * x->Tq * x->Tk;
        exec_buf *sc = scratch(w, 3 * n, "the attention's scores", e);
        if (!sc) return -1;
        float *pre = sc->p, *att = sc->p + n, *datt = sc->p + 2 * n;
        const float *kv = x->cross ? in1 : in0;
        float *dkv = x->cross ? d1 : d0;
        EXEC_KERN(w, {
            t5_probs(K, &d, x, p, in0, kv, pre, att);
            /* the gradients these kernels add to start at zero, as the
             * unfused ops' do; the scores' goes where they were */
            rt->be->zero(datt, n);
            rt->be->zero(pre, n);
            K->attnx_context_backward(datt, dkv + d.g.vo, dout, att,
                                      kv + d.g.vo, d.g.ldk, d.B, x->Tq,
                                      x->Tk, d.NHl, d.hs);
            K->attnx_softmax_backward(pre, datt, att, d.B, d.NHl, x->Tq,
                                      x->Tk, x->causal);
            if (p->gx)
                K->attnx_bias_backward(p->gx, pre,
                                       x->rel == 2 ? d.id.bdec : d.id.benc,
                                       d.B, d.NHl, x->Tq, x->Tk, x->causal);
            K->attnx_scores_backward(d0, dkv + d.g.ko, pre, in0, kv + d.g.ko,
                                     d.g.ldq, d.g.ldk, d.B, x->Tq, x->Tk,
                                     d.NHl, d.hs, 1.0f);
        });
        exec_buf_unref(sc);
        break;
    }
    case PROF_ROLE_RESIDUAL:
        if (input_part)
            EXEC_KERN(w,
                      K->residual_backward(d0, d1, dout, (size_t)d.Nr * d.C));
        break;
    case PROF_ROLE_MLP_ACT:
        if (input_part && c->swiglu)
            EXEC_KERN(w, K->geglu_backward(d0, in0, dout, d.N, d.F));
        else if (input_part && c->relu)
            EXEC_KERN(w, K->relu_backward(d0, out, dout, (size_t)d.N * d.F));
        else if (input_part && c->gelu_erf)
            EXEC_KERN(w,
                      K->gelu_erf_backward(d0, in0, dout, (size_t)d.N * d.F));
        else if (input_part)
            EXEC_KERN(w, K->gelu_backward(d0, in0, dout, (size_t)d.N * d.F));
        break;
    case PROF_ROLE_LM_HEAD: {
        /* logits = (s x) W^T: dx += s dlogits W, dW += dlogits^T (s x) */
        /* (the rank's vocabulary rows: dx summed over the group) */
        /* (sequence parallel: reduce-scattered, this rank's tokens) */
        float sc = t5_head_scale(c);
        size_t n = (size_t)d.N * d.C, nr = (size_t)d.Nr * d.C;
        exec_buf *xs = scratch(w, n + (x->seq_in ? nr : 0), "the head's input",
                               e);
        if (!xs) return -1;
        int rc = 0;
        if (input_part) {
            EXEC_KERN(w, K->linear_backward_input(xs->p, dout, p->w, d.N, d.C,
                                                  d.Vl));
            float *dx = xs->p;
            if (x->seq_in) {
                rc = tp_scatter(w, xs->p, xs->p + n, n, tp_ns, e);
                dx = xs->p + n;
            } else if (d.tp > 1) {
                rc = tp_sum(w, xs->p, n, tp_ns, e);
            }
            if (!rc) EXEC_KERN(w, K->scale_add(d0, dx, sc, nr));
        }
        if (!rc && base_w)
            EXEC_KERN(w, {
                rt->be->zero(xs->p, (size_t)d.N * d.C);
                K->scale_add(xs->p, in0, sc, (size_t)d.N * d.C);
                K->linear_backward_weight(p->gw, NULL, dout, xs->p, d.N, d.C,
                                          d.Vl);
            });
        exec_buf_unref(xs);
        if (rc) return -1;
        break;
    }
    case PROF_ROLE_LOSS:
        if (input_part && d.tp == 1)
            EXEC_KERN(w, K->softmax_xent_backward(d0, aux, d.id.tgt,
                                                  (float)rt->scale, d.N,
                                                  c->vocab));
        else if (input_part)
            EXEC_KERN(w, K->xent_shard_backward(d0, aux, d.id.tgt,
                                                (float)rt->scale,
                                                w->rank * d.Vl, d.N, d.Vl));
        break;
    default: util_never_(__FILE__, __LINE__, "a T5 op role without a kernel");
    }
    return 0;
}

/* out(n, C) += wpe[t] (if wpe) and wtt[type of t] (if wtt; types split
 * at position T0) for n rows of the (B, T) tokens from row r0: a rank's
 * tokens under sequence parallelism, sequence by sequence. */
static void pos_rows(exec_worker *w, float *out, const float *wpe,
                     const float *wtt, int T0, int r0, int n, int T, int C)
{
    const kern_table *K = w->rt->be->k;
    for (int k = 0; k < n;) {
        int t = (r0 + k) % T, len = T - t < n - k ? T - t : n - k;
        float *o = out + (size_t)k * C;
        if (wpe)
            EXEC_KERN(w, K->embed_pos_forward(o, wpe + (size_t)t * C, 1, len,
                                              C));
        if (wtt)
            EXEC_KERN(w, K->embed_type_forward(o, wtt, 1, len, C,
                                               T0 > t ? T0 - t : 0));
        k += len;
    }
}

static int op_forward(exec_worker *w, exec_stage *st, exec_rec *r, int op,
                      int count_loss, int64_t *tp_ns, const float *wq,
                      util_err *e)
{
    exec_runtime *rt = w->rt;
    const kern_table *K = rt->be->k;
    const exec_xop *x = &rt->xop[op];
    const exec_gpt_config *c = &rt->cfg;
    dims d = dims_of(rt);
    int tp = d.tp, B = d.B, T = d.T, N = d.N, C = d.C, Cl = d.Cl,
        NHl = d.NHl, Fl = d.Fl, Vl = d.Vl;
    size_t sc_n = (size_t)B * NHl * T * T;   /* a microbatch's scores */
    int i = op - st->first;
    const int *tok = exec_view_i(&r->ids), *tgt = tok ? tok + N : NULL;
    oparams p = op_params(w, st, st->w[r->version], op);
    if (wq) p.w = (float *)wq;
    float *out = newbuf(w, &r->out[i], x->out_n, 0, "an activation", e);
    if (!out) return -1;
    float *aux = NULL;
    if (x->aux_n &&
        !(aux = newbuf(w, &r->aux[i], x->aux_n, 0, "an activation", e)))
        return -1;
    const float *in0 = x->n_in > 0 ? exec_view_p(in_view(st, r, op, rt->xop, 0))
                                   : NULL;
    const float *in1 = x->n_in > 1 ? exec_view_p(in_view(st, r, op, rt->xop, 1))
                                   : NULL;
    /* the residual stream's rows on this rank; a column-parallel
     * linear's input, gathered from every rank's (its own tokens: a T5
     * decoder's, or for k | v the encoder's) */
    int Nr = rt->sp ? N / tp : N;
    exec_buf *xg = NULL;
    if (x->seq_in) {
        if (!(xg = gathered(w, in0, (size_t)B * x->Tq * C, "a gathered input",
                            tp_ns, e)))
            return -1;
        in0 = xg->p;
    }
    if (c->t5) {
        int rc = t5_forward(w, r, op, i, count_loss, &p, out, aux, in0, in1,
                            tp_ns, e);
        exec_buf_unref(xg);
        return rc;
    }
    int rc = 0;
    switch (x->role) {
    case PROF_ROLE_EMBED: {
        /* position t is the table's row t + pos_offset (OPT's 2) */
        const float *pos = p.b ? p.b + (size_t)c->pos_offset * C : NULL;
        if (rt->sp) {
            /* the lookup's sum reduce-scattered: this rank's tokens */
            exec_buf *all = scratch(w, (size_t)N * C, "the embedding", e);
            if (!all) return -1;
            EXEC_KERN(w, K->embed_shard_forward(all->p, tok, p.w,
                                                w->rank * Vl, Vl, N, C));
            rc = tp_scatter(w, all->p, out, (size_t)N * C, tp_ns, e);
            exec_buf_unref(all);
            if (rc) return -1;
            if (pos || p.x)
                pos_rows(w, out, pos, p.x, exec_type_split(c, T),
                         w->rank * Nr, Nr, T, C);
        } else if (tp == 1) {
            EXEC_KERN(w, K->embed_forward(out, tok, p.w, pos, B, T, C));
            if (p.x)
                EXEC_KERN(w, K->embed_type_forward(out, p.x, B, T, C,
                                                   exec_type_split(c, T)));
        } else {
            EXEC_KERN(w, K->embed_shard_forward(out, tok, p.w, w->rank * Vl,
                                                Vl, N, C));
            if (tp_sum(w, out, (size_t)N * C, tp_ns, e)) return -1;
            if (pos) EXEC_KERN(w, K->embed_pos_forward(out, pos, B, T, C));
            if (p.x)
                EXEC_KERN(w, K->embed_type_forward(out, p.x, B, T, C,
                                                   exec_type_split(c, T)));
        }
        break;
    }
    case PROF_ROLE_NORM:
        if (c->rmsnorm)
            EXEC_KERN(w, K->rmsnorm_forward(out, aux, in0, p.w, Nr, C,
                                            c->norm_eps));
        else
            EXEC_KERN(w, K->layernorm_forward(out, aux, aux + Nr, in0, p.w,
                                              p.b, Nr, C, exec_ln_eps(c)));
        break;
    case PROF_ROLE_QKV:
        EXEC_KERN(w, K->linear_forward(out, in0, p.w, p.b, N, C, d.QKVl));
        rc = lora_forward(w, r, i, x, &p, in0, out, d.QKVl, tp_ns, e);
        break;
    case PROF_ROLE_QKV_EXPAND:
        EXEC_KERN(w, K->qkv_expand_forward(out, in0, B, T, NHl, d.KVl, d.hs,
                                           c->rope_theta));
        break;
    case PROF_ROLE_ATTN_SCORES:
        EXEC_KERN(w, K->attn_scores_forward(out, in0, B, T, Cl, NHl));
        break;
    case PROF_ROLE_ATTN_SOFTMAX:
        EXEC_KERN(w, K->attn_softmax_forward(out, in0, B, T, NHl,
                                             !c->encoder));
        break;
    case PROF_ROLE_ATTN_CONTEXT:
        EXEC_KERN(w, K->attn_context_forward(out, in0, in1, B, T, Cl, NHl));
        break;
    case PROF_ROLE_ATTN_FUSED: {
        /* fused attention (FlashAttention) keeps q, k, v and its output,
         * not the probabilities: here they are a buffer of the op */
        exec_buf *att = scratch(w, sc_n, "the attention's scores", e);
        if (!att) return -1;
        EXEC_KERN(w, K->attention_forward(out, att->p, in0, B, T, Cl, NHl,
                                          !c->encoder));
        exec_buf_unref(att);
        break;
    }
    case PROF_ROLE_ATTN_OUT:
    case PROF_ROLE_MLP_DOWN: {
        int IC = x->role == PROF_ROLE_ATTN_OUT ? Cl : Fl;
        /* row-parallel: the bias once, by rank 0, before the sum (under
         * sequence parallelism a reduce-scatter, of a whole) */
        exec_buf *all = NULL;
        if (x->seq && !(all = scratch(w, (size_t)N * C, "a row-parallel "
                                      "output", e)))
            return -1;
        float *y = all ? all->p : out;
        EXEC_KERN(w, K->linear_forward(y, in0, p.w, w->rank ? NULL : p.b,
                                       N, IC, C));
        rc = lora_forward(w, r, i, x, &p, in0, y, C, tp_ns, e);
        if (!rc && all) rc = tp_scatter(w, y, out, (size_t)N * C, tp_ns, e);
        else if (!rc && tp > 1) rc = tp_sum(w, out, (size_t)N * C, tp_ns, e);
        exec_buf_unref(all);
        break;
    }
    case PROF_ROLE_RESIDUAL:
        EXEC_KERN(w, K->residual_forward(out, in0, in1, (size_t)Nr * C));
        break;
    case PROF_ROLE_MLP_UP: {
        int OC = c->swiglu ? 2 * Fl : Fl;
        EXEC_KERN(w, K->linear_forward(out, in0, p.w, p.b, N, C, OC));
        rc = lora_forward(w, r, i, x, &p, in0, out, OC, tp_ns, e);
        break;
    }
    case PROF_ROLE_MLP_ACT:
        if (c->swiglu)
            EXEC_KERN(w, K->swiglu_forward(out, in0, N, Fl));
        else if (c->relu)
            EXEC_KERN(w, K->relu_forward(out, in0, (size_t)N * Fl));
        else if (c->gelu_erf)
            EXEC_KERN(w, K->gelu_erf_forward(out, in0, (size_t)N * Fl));
        else
            EXEC_KERN(w, K->gelu_forward(out, in0, (size_t)N * Fl));
        break;
    case PROF_ROLE_LM_HEAD:
        EXEC_KERN(w, K->linear_forward(out, in0, p.w, p.b, N, C, Vl));
        break;
    case PROF_ROLE_POOLER: {
        /* each sequence's first token, then tanh(x W + b) */
        exec_buf *x0 = scratch(w, (size_t)B * C, "the pooler's input", e);
        if (!x0) return -1;
        EXEC_KERN(w, rt->be->copy2d(x0->p, (size_t)C, in0, (size_t)T * C,
                                    (size_t)B, (size_t)C));
        EXEC_KERN(w, K->linear_forward(out, x0->p, p.w, p.b, B, C, C));
        exec_buf_unref(x0);
        EXEC_KERN(w, K->tanh_forward(out, out, (size_t)B * C));
        break;
    }
    case PROF_ROLE_MLM_DENSE:
        EXEC_KERN(w, K->linear_forward(out, in0, p.w, p.b, Nr, C, C));
        break;
    case PROF_ROLE_MLM_ACT:
        if (c->gelu_erf)
            EXEC_KERN(w, K->gelu_erf_forward(out, in0, (size_t)Nr * C));
        else
            EXEC_KERN(w, K->gelu_forward(out, in0, (size_t)Nr * C));
        break;
    case PROF_ROLE_LOSS: {
        if (tp == 1) {
            EXEC_KERN(w, K->softmax_xent_forward(out, aux, in0, tgt, N,
                                                 c->vocab));
        } else if (xent_tp_forward(w, out, aux, in0, tgt, N, Vl, tp_ns, e)) {
            return -1;
        }
        if (count_loss) count_loss_of(w, out, N);
        break;
    }
    default:
        util_never_(__FILE__, __LINE__, "an op role without a kernel");
    }
    exec_buf_unref(xg);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------ backward */

int exec_op_forward(exec_worker *w, exec_stage *st, exec_rec *r, int op,
                    int count_loss, int64_t *tp_ns, util_err *e)
{
    int failed;
    exec_buf *wq = q4_weight(w, st, op, &failed, e);
    if (failed) return -1;
    int rc = op_forward(w, st, r, op, count_loss, tp_ns, wq ? wq->p : NULL,
                        e);
    exec_buf_unref(wq);
    return rc;
}

static int op_backward(exec_worker *w, exec_stage *st, exec_rec *r, int op,
                       int input_part, int weight_part, int64_t *tp_ns,
                       const float *wq, util_err *e)
{
    exec_runtime *rt = w->rt;
    const kern_table *K = rt->be->k;
    const exec_xop *x = &rt->xop[op];
    const exec_gpt_config *c = &rt->cfg;
    dims d = dims_of(rt);
    int tp = d.tp, B = d.B, T = d.T, N = d.N, C = d.C, Cl = d.Cl,
        NHl = d.NHl, Fl = d.Fl, Vl = d.Vl;
    size_t sc_n = (size_t)B * NHl * T * T;   /* a microbatch's scores */
    int i = op - st->first;
    const int *tok = exec_view_i(&r->ids), *tgt = tok ? tok + N : NULL;
    oparams p = op_params(w, st, st->w[r->version], op);
    if (wq) p.w = (float *)wq;
    float *dout = exec_view_p(&r->dout[i]);
    const float *aux = exec_view_p(&r->aux[i]);
    const float *out = exec_view_p(&r->out[i]);
    const float *in0 = x->n_in > 0 ? exec_view_p(in_view(st, r, op, rt->xop, 0))
                                   : NULL;
    const float *in1 = x->n_in > 1 ? exec_view_p(in_view(st, r, op, rt->xop, 1))
                                   : NULL;
    float *d0 = NULL, *d1 = NULL;
    /* BERT's pooler feeds no loss: no gradient reaches it */
    if (x->role == PROF_ROLE_POOLER) return 0;
    /* frozen weights get no gradient; nothing before the first op that
     * trains runs a backward (the caller skips those ops) */
    int base_w = weight_part && x->train_w;
    if (input_part && x->n_in > 0 && x->role != PROF_ROLE_EMBED) {
        if (!(d0 = din(w, st, r, op, 0, e))) return -1;
        if (x->n_in > 1 && !(d1 = din(w, st, r, op, 1, e))) return -1;
    }
    /* an op whose output nobody read back has no gradient (cannot happen
     * in a model graph, where every op feeds the loss) */
    if (!dout && x->role != PROF_ROLE_LOSS)
        return util_errf(e, UTIL_EXIT_FAIL, "op %s: no output gradient",
                         rt->model->ops[op].name);
    /* sequence parallelism: the residual stream's rows on this rank; a
     * column-parallel linear's input gathered again for its weight
     * gradients (Megatron-LM's choice: not kept whole from the
     * forward), a row-parallel one's or the embedding's output gradient
     * gathered (of the op's own tokens: a T5 decoder's, or for k | v
     * the encoder's) */
    int Nr = rt->sp ? N / tp : N;
    size_t NxC = (size_t)B * x->Tq * C;
    exec_buf *xg = NULL, *gg = NULL;
    if (x->seq_in && weight_part && (base_w || x->n_lora)) {
        if (!(xg = gathered(w, in0, NxC, "a gathered input", tp_ns, e)))
            return -1;
        in0 = xg->p;
    }
    if (x->seq && x->role != PROF_ROLE_NORM &&
        x->role != PROF_ROLE_RESIDUAL && x->role != PROF_ROLE_MLM_DENSE &&
        x->role != PROF_ROLE_MLM_ACT &&
        (x->role != PROF_ROLE_EMBED || base_w)) {
        if (!(gg = gathered(w, dout, NxC, "a gathered gradient", tp_ns, e))) {
            exec_buf_unref(xg);
            return -1;
        }
        dout = gg->p;
    }
    if (c->t5) {
        int rc = t5_backward(w, r, op, i, input_part, weight_part, base_w, &p,
                             dout, out, aux, in0, in1, d0, d1, tp_ns, e);
        exec_buf_unref(xg);
        exec_buf_unref(gg);
        return rc;
    }
    int rc = 0;
    switch (x->role) {
    case PROF_ROLE_EMBED: {
        if (!base_w) break;
        float *dpos = p.gb ? p.gb + (size_t)c->pos_offset * C : NULL;
        if (tp == 1)
            EXEC_KERN(w, K->embed_backward(p.gw, dpos, dout, tok, B, T, C));
        else
            EXEC_KERN(w, K->embed_shard_backward(p.gw, dpos, dout, tok,
                                                 w->rank * Vl, Vl, B, T, C));
        if (p.gx)
            EXEC_KERN(w, K->embed_type_backward(p.gx, dout, B, T, C,
                                                exec_type_split(c, T)));
        break;
    }
    case PROF_ROLE_NORM: {
        /* under sequence parallelism the weight gradient of this rank's
         * tokens, summed over the group before it is added */
        exec_buf *gs = NULL;
        if (base_w && x->seq &&
            !(gs = scratch(w, 2 * (size_t)C, "a norm's gradient", e)))
            return -1;
        float *gw = gs ? gs->p : p.gw, *gb = gs ? gs->p + C : p.gb;
        if (c->rmsnorm) {
            if (input_part)
                EXEC_KERN(w, K->rmsnorm_backward_input(d0, dout, in0, p.w, aux,
                                                       Nr, C));
            if (base_w)
                EXEC_KERN(w, K->rmsnorm_backward_weight(gw, dout, in0, aux,
                                                        Nr, C));
        } else {
            if (input_part)
                EXEC_KERN(w, K->layernorm_backward_input(d0, dout, in0, p.w,
                                                         aux, aux + Nr, Nr,
                                                         C));
            if (base_w)
                EXEC_KERN(w, K->layernorm_backward_weight(gw, gb, dout, in0,
                                                          aux, aux + Nr, Nr,
                                                          C));
        }
        if (gs)
            rc = add_summed(w, gs, p.gw, (size_t)C, p.gb,
                            c->rmsnorm ? 0 : (size_t)C, tp_ns, e);
        break;
    }
    case PROF_ROLE_MLM_DENSE:
        if (x->seq) {
            /* replicated, on this rank's tokens: its weight gradient
             * summed over the group before it is added, as a norm's */
            if (input_part)
                EXEC_KERN(w, K->linear_backward_input(d0, dout, p.w, Nr, C,
                                                      C));
            if (!base_w) break;
            size_t nw = (size_t)C * C;
            exec_buf *gs = scratch(w, nw + (size_t)C, "the head transform's "
                                   "gradient", e);
            if (!gs) return -1;
            EXEC_KERN(w, K->linear_backward_weight(gs->p, gs->p + nw, dout,
                                                   in0, Nr, C, C));
            rc = add_summed(w, gs, p.gw, nw, p.gb, (size_t)C, tp_ns, e);
            break;
        }
        /* fall through */
    case PROF_ROLE_QKV:
    case PROF_ROLE_MLP_UP:
    case PROF_ROLE_LM_HEAD: {
        /* column-parallel: the input gradient is summed over the group */
        int OC = x->role == PROF_ROLE_QKV ? d.QKVl
               : x->role == PROF_ROLE_MLP_UP ? (c->swiglu ? 2 * Fl : Fl)
               : x->role == PROF_ROLE_MLM_DENSE ? C : Vl;
        /* BERT's head transform is replicated: its input gradient is
         * whole on every rank */
        if (input_part) {
            if (tp == 1 || x->role == PROF_ROLE_MLM_DENSE) {
                EXEC_KERN(w, K->linear_backward_input(d0, dout, p.w, N, C,
                                                      OC));
                rc = lora_backward(w, r, i, x, &p, in0, dout, OC, d0,
                                   weight_part, tp_ns, e);
            } else {
                exec_buf *tmp = scratch(w, (size_t)(N + (x->seq_in ? Nr : 0)) *
                                               C, "an input gradient", e);
                if (!tmp) rc = -1;
                if (!rc)
                    EXEC_KERN(w, K->linear_backward_input(tmp->p, dout, p.w, N,
                                                          C, OC));
                /* the adapters' part of this rank's sum, before it */
                if (!rc)
                    rc = lora_backward(w, r, i, x, &p, in0, dout, OC, tmp->p,
                                       weight_part, tp_ns, e);
                /* reduce-scattered into its part of the group's scratch
                 * under sequence parallelism */
                if (!rc && x->seq_in) {
                    rc = tp_scatter(w, tmp->p, tmp->p + (size_t)N * C,
                                    (size_t)N * C, tp_ns, e);
                    if (!rc)
                        EXEC_KERN(w, K->accumulate(d0, tmp->p + (size_t)N * C,
                                                   (size_t)Nr * C));
                } else {
                    if (!rc) rc = tp_sum(w, tmp->p, (size_t)N * C, tp_ns, e);
                    if (!rc)
                        EXEC_KERN(w, K->accumulate(d0, tmp->p,
                                                   (size_t)N * C));
                }
                exec_buf_unref(tmp);
            }
        } else if (weight_part) {
            rc = lora_backward(w, r, i, x, &p, in0, dout, OC, NULL, 1, tp_ns,
                               e);
        }
        if (!rc && base_w)
            EXEC_KERN(w, K->linear_backward_weight(p.gw, p.gb, dout, in0, N,
                                                   C, OC));
        break;
    }
    case PROF_ROLE_QKV_EXPAND:
        if (input_part)
            EXEC_KERN(w, K->qkv_expand_backward(d0, dout, B, T, NHl, d.KVl,
                                                d.hs, c->rope_theta));
        break;
    case PROF_ROLE_ATTN_OUT:
    case PROF_ROLE_MLP_DOWN: {
        int IC = x->role == PROF_ROLE_ATTN_OUT ? Cl : Fl;
        if (input_part)
            EXEC_KERN(w, K->linear_backward_input(d0, dout, p.w, N, IC, C));
        if ((input_part || weight_part) &&
            (rc = lora_backward(w, r, i, x, &p, in0, dout, C,
                                input_part ? d0 : NULL, weight_part, tp_ns,
                                e)))
            break;
        if (base_w)
            EXEC_KERN(w, K->linear_backward_weight(p.gw, p.gb, dout, in0, N,
                                                   IC, C));
        break;
    }
    case PROF_ROLE_ATTN_SCORES:
        if (input_part)
            EXEC_KERN(w, K->attn_scores_backward(d0, dout, in0, B, T, Cl,
                                                 NHl));
        break;
    case PROF_ROLE_ATTN_SOFTMAX:
        /* its own output gradient is the kernel's scratch */
        if (input_part)
            EXEC_KERN(w, K->attn_softmax_backward(d0, dout, out, B, T, NHl,
                                                  !c->encoder));
        break;
    case PROF_ROLE_ATTN_CONTEXT:
        if (input_part)
            EXEC_KERN(w, K->attn_context_backward(d0, d1, dout, in0, in1, B,
                                                  T, Cl, NHl));
        break;
    case PROF_ROLE_ATTN_FUSED: {
        /* the probabilities computed again from q and k, as FlashAttention
         * does in its backward (the three ops' kernels, which give the
         * fused forward's bits) */
        if (!input_part) break;
        exec_buf *sc = scratch(w, 2 * sc_n, "the attention's scores", e);
        if (!sc) return -1;
        float *pre = sc->p, *att = sc->p + sc_n;
        EXEC_KERN(w, K->attn_scores_forward(pre, in0, B, T, Cl, NHl));
        EXEC_KERN(w, K->attn_softmax_forward(att, pre, B, T, NHl,
                                             !c->encoder));
        EXEC_KERN(w, K->attention_backward(d0, pre, dout, in0, att, B, T, Cl,
                                           NHl, !c->encoder));
        exec_buf_unref(sc);
        break;
    }
    case PROF_ROLE_RESIDUAL:
        if (input_part)
            EXEC_KERN(w, K->residual_backward(d0, d1, dout, (size_t)Nr * C));
        break;
    case PROF_ROLE_MLP_ACT:
        if (input_part && c->swiglu)
            EXEC_KERN(w, K->swiglu_backward(d0, in0, dout, N, Fl));
        else if (input_part && c->relu)
            EXEC_KERN(w, K->relu_backward(d0, out, dout, (size_t)N * Fl));
        else if (input_part && c->gelu_erf)
            EXEC_KERN(w, K->gelu_erf_backward(d0, in0, dout, (size_t)N * Fl));
        else if (input_part)
            EXEC_KERN(w, K->gelu_backward(d0, in0, dout, (size_t)N * Fl));
        break;
    case PROF_ROLE_MLM_ACT:
        if (input_part && c->gelu_erf)
            EXEC_KERN(w, K->gelu_erf_backward(d0, in0, dout, (size_t)Nr * C));
        else if (input_part)
            EXEC_KERN(w, K->gelu_backward(d0, in0, dout, (size_t)Nr * C));
        break;
    case PROF_ROLE_LOSS:
        if (!input_part) break;
        if (tp == 1)
            EXEC_KERN(w, K->softmax_xent_backward(d0, aux, tgt,
                                                  (float)rt->scale, N,
                                                  c->vocab));
        else
            EXEC_KERN(w, K->xent_shard_backward(d0, aux, tgt,
                                                (float)rt->scale,
                                                w->rank * Vl, N, Vl));
        break;
    default:
        util_never_(__FILE__, __LINE__, "an op role without a kernel");
    }
    exec_buf_unref(xg);
    exec_buf_unref(gg);
    return rc ? -1 : 0;
}

int exec_op_backward(exec_worker *w, exec_stage *st, exec_rec *r, int op,
                     int input_part, int weight_part, int64_t *tp_ns,
                     util_err *e)
{
    /* the frozen 4-bit weight is read by the input gradient alone */
    int failed = 0;
    exec_buf *wq = input_part ? q4_weight(w, st, op, &failed, e) : NULL;
    if (failed) return -1;
    int rc = op_backward(w, st, r, op, input_part, weight_part, tp_ns,
                         wq ? wq->p : NULL, e);
    exec_buf_unref(wq);
    return rc;
}
