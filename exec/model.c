/* The reference GPT: parameters in one arena (params | grads | AdamW m |
 * AdamW v, each laid out by the tensor table), activations and their
 * gradients in a second arena of identical layout, both sized once for
 * (B, T). Forward, backward and step call kernels/ only; every call is
 * timed when a timing table is attached. */
#include "exec/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Activations of one layer, offsets (in floats) into the activation arena
 * are computed by act_layout. */
enum {
    A_LN1, A_LN1_MEAN, A_LN1_RSTD, A_QKV, A_QKVX, A_ATT, A_ATTY, A_ATTPROJ,
    A_RES2,
    A_LN2, A_LN2_MEAN, A_LN2_RSTD, A_FCH, A_FCH_GELU, A_FCPROJ, A_RES3,
    A_PER_LAYER
};
/* An encoder's (BERT) layer uses the same slots in its own order: QKV,
 * ATT, ATTY, ATTPROJ, RES2 = input + ATTPROJ, LN1 = its LayerNorm, FCH,
 * FCH_GELU, FCPROJ, RES3 = LN1 + FCPROJ, LN2 = its LayerNorm (the layer's
 * output). Globals: ENCODED is the first layer's input (an encoder's
 * embeddings' LayerNorm of EMB), LNF the LM head's input (an encoder's
 * head transform: MLM_H, its GELU MLM_G, their LayerNorm), POOL_IN and
 * POOL the pooler's first tokens and output. */
enum {
    G_ENCODED, G_LNF, G_LNF_MEAN, G_LNF_RSTD, G_LOGITS, G_PROBS, G_LOSSES,
    G_EMB, G_EMB_MEAN, G_EMB_RSTD, G_MLM_H, G_MLM_G, G_POOL_IN, G_POOL,
    G_COUNT
};

typedef struct act_layout {
    size_t layer[A_PER_LAYER];   /* sizes per layer */
    size_t glob[G_COUNT];
    size_t per_layer, total;
} act_layout;

static act_layout act_sizes(const exec_gpt_config *c, int B, int T)
{
    act_layout a;
    size_t N = (size_t)B * T, C = c->hidden, F = c->ffn;
    size_t mean = c->rmsnorm ? 0 : N;   /* RMSNorm keeps rstd alone */
    size_t sz[A_PER_LAYER] = {
        [A_LN1] = N * C, [A_LN1_MEAN] = mean, [A_LN1_RSTD] = N,
        [A_QKV] = N * exec_qkv_rows(c),
        [A_QKVX] = exec_qkv_expands(c) ? N * 3 * C : 0,
        [A_ATT] = (size_t)B * c->heads * T * T,
        [A_ATTY] = N * C, [A_ATTPROJ] = N * C, [A_RES2] = N * C,
        [A_LN2] = N * C, [A_LN2_MEAN] = mean, [A_LN2_RSTD] = N,
        [A_FCH] = N * exec_fc_rows(c), [A_FCH_GELU] = N * F,
        [A_FCPROJ] = N * C, [A_RES3] = N * C};
    memcpy(a.layer, sz, sizeof sz);
    size_t enc = c->encoder != 0, pool = enc && c->pooler;
    size_t g[G_COUNT] = {[G_ENCODED] = N * C, [G_LNF] = N * C,
                         [G_LNF_MEAN] = mean, [G_LNF_RSTD] = N,
                         [G_LOGITS] = N * c->vocab, [G_PROBS] = N * c->vocab,
                         [G_LOSSES] = N, [G_EMB] = enc * N * C,
                         [G_EMB_MEAN] = enc * N, [G_EMB_RSTD] = enc * N,
                         [G_MLM_H] = enc * N * C, [G_MLM_G] = enc * N * C,
                         [G_POOL_IN] = pool * B * C, [G_POOL] = pool * B * C};
    memcpy(a.glob, g, sizeof g);
    a.per_layer = 0;
    for (int i = 0; i < A_PER_LAYER; i++) a.per_layer += a.layer[i];
    a.total = a.per_layer * c->layers;
    for (int i = 0; i < G_COUNT; i++) a.total += a.glob[i];
    return a;
}

/* Parameter tensors, in arena order (exec_gpt_tensor_id). */
enum {
    P_WTE = EXEC_P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW,
    P_ATTPROJB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW,
    P_LNFB, P_LMW, P_WTT, P_LNEW, P_LNEB, P_MLMW, P_MLMB, P_POOLW, P_POOLB,
    P_LMB, P_XLNW, P_XQW, P_XKVW, P_XOW, P_RELE, P_RELD, P_ENCNW,
    P_COUNT = EXEC_P_COUNT
};

static void param_table(const exec_gpt_config *c, exec_tensor *t)
{
    size_t V = c->vocab, C = c->hidden, L = exec_stack_layers(c),
           F = c->ffn, D = exec_inner(c),
           P = exec_rope(c) ? 0
                            : (size_t)c->max_pos + (size_t)c->pos_offset,
           bias = c->bias != 0,
           lnb = !c->rmsnorm, QKV = exec_qkv_rows(c), FC = exec_fc_rows(c);
    size_t t5 = c->t5 != 0, Ld = t5 * (size_t)c->dec_layers,
           rel = t5 * (size_t)c->rel_buckets * (size_t)c->heads;
    static const char *const names[P_COUNT] = {
        "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw",
        "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb",
        "lnfw", "lnfb", "lmw", "wtt", "lnew", "lneb", "mlmw", "mlmb",
        "poolw", "poolb", "lmb", "xlnw", "xqw", "xkvw", "xow", "rele",
        "reld", "encnw"};
    /* an encoder's: the head's transform, the pooler and the decoder's
     * bias always have biases, as BERT's */
    size_t enc = c->encoder != 0, pool = enc && c->pooler;
    size_t n[P_COUNT] = {
        [P_WTE] = V * C, [P_WPE] = P * C, [P_LN1W] = L * C,
        [P_LN1B] = lnb * L * C, [P_QKVW] = L * QKV * C,
        [P_QKVB] = bias * L * QKV, [P_ATTPROJW] = L * C * D,
        [P_ATTPROJB] = bias * L * C, [P_LN2W] = L * C,
        [P_LN2B] = lnb * L * C, [P_FCW] = L * FC * C,
        [P_FCB] = bias * L * FC, [P_FCPROJW] = L * C * F,
        [P_FCPROJB] = bias * L * C, [P_LNFW] = C, [P_LNFB] = lnb * C,
        [P_LMW] = c->tied ? 0 : V * C,
        [P_WTT] = enc * (size_t)c->type_vocab * C, [P_LNEW] = enc * C,
        [P_LNEB] = enc * lnb * C, [P_MLMW] = enc * C * C, [P_MLMB] = enc * C,
        [P_POOLW] = pool * C * C, [P_POOLB] = pool * C, [P_LMB] = enc * V,
        [P_XLNW] = Ld * C, [P_XQW] = Ld * D * C, [P_XKVW] = Ld * 2 * D * C,
        [P_XOW] = Ld * C * D, [P_RELE] = rel, [P_RELD] = rel,
        [P_ENCNW] = t5 * C};
    size_t off = 0;
    for (int i = 0; i < P_COUNT; i++) {
        snprintf(t[i].name, sizeof t[i].name, "%s", names[i]);
        t[i].off = off;
        t[i].n = n[i];
        t[i].decay = i == P_WTE || i == P_WPE || i == P_QKVW ||
                     i == P_ATTPROJW || i == P_FCW || i == P_FCPROJW ||
                     i == P_LMW || i == P_WTT || i == P_MLMW ||
                     i == P_POOLW || i == P_XQW || i == P_XKVW ||
                     i == P_XOW || i == P_RELE || i == P_RELD;
        off += n[i];
    }
}

static size_t param_count(const exec_gpt_config *c)
{
    exec_tensor t[P_COUNT];
    param_table(c, t);
    return t[P_COUNT - 1].off + t[P_COUNT - 1].n;
}

size_t exec_gpt_param_table(const exec_gpt_config *c, exec_tensor *t)
{
    param_table(c, t);
    return t[P_COUNT - 1].off + t[P_COUNT - 1].n;
}

struct exec_gpt {
    exec_gpt_config c;
    int B, T;
    exec_tensor tens[P_COUNT];
    size_t P;
    float *arena;           /* 4P floats: params, grads, m, v */
    float *acts, *dacts;    /* activation arena and its gradients */
    act_layout al;
    int *tokens, *targets;  /* copies of the last forward's batch */
    int n_tgt;              /* its targets (an encoder's: those >= 0) */
    exec_timing *tm;
    const char *as;         /* model op kind for the timer, or NULL */
};

int exec_gpt_config_check(const exec_gpt_config *c, util_err *e)
{
    if (c->vocab == 1)
        return util_errf(e, UTIL_EXIT_USAGE, "field 'vocab': 1 token leaves "
                         "nothing to predict (the executor trains 2 or "
                         "more)");
    if (c->vocab < 2 || c->hidden < 1 || c->layers < 1 || c->heads < 1 ||
        c->ffn < 1 || (c->max_pos < 1 && !exec_rope(c) && !c->t5) ||
        c->max_pos < 0 ||
        c->kv_heads < 0)
        return util_errf(e, UTIL_EXIT_USAGE,
                         "model sizes must be positive (vocab %d, hidden %d, "
                         "layers %d, heads %d, ffn %d, max_pos %d)",
                         c->vocab, c->hidden, c->layers, c->heads, c->ffn,
                         c->max_pos);
    if (c->hidden % c->heads && !c->head_dim)
        return util_errf(e, UTIL_EXIT_USAGE,
                         "heads (%d) must divide hidden (%d)", c->heads,
                         c->hidden);
    if (c->head_dim < 0 || c->head_dim > KERN_HEAD_MAX ||
        (c->head_dim && !c->t5))
        return util_errf(e, UTIL_EXIT_USAGE, "a head width of %d (T5's "
                         "alone may differ from hidden / heads, up to %d)",
                         c->head_dim, KERN_HEAD_MAX);
    if ((c->t5 != 0 && c->t5 != 1) ||
        (c->t5 && (c->dec_layers < 1 || c->rel_buckets < 0 ||
                   c->rel_buckets > 1 << 16 ||
                   (c->rel_buckets && c->rel_buckets < 4) ||
                   c->rel_max_dist <= c->rel_buckets / 2 ||
                   !c->rmsnorm || c->bias || c->swiglu == 1 || exec_rope(c) ||
                   c->kv_heads || c->encoder || c->max_pos)) ||
        (!c->t5 && (c->dec_layers || c->rel_buckets || c->rel_max_dist)))
        return util_errf(e, UTIL_EXIT_USAGE, "T5 %d: an encoder-decoder "
                         "with decoder layers (%d), relative-position "
                         "buckets (%d: none, or 4 to 65536) and a largest "
                         "distance beyond half of them (%d), RMSNorm, no "
                         "biases, a ReLU, GELU or GeGLU MLP and "
                         "no position table", c->t5, c->dec_layers,
                         c->rel_buckets, c->rel_max_dist);
    /* OPT's offset is 2; ReLU is one MLP of three */
    if (c->pos_offset < 0 || c->pos_offset > 16 ||
        (exec_rope(c) && c->pos_offset))
        return util_errf(e, UTIL_EXIT_USAGE, "the position table's first "
                         "position at row %d", c->pos_offset);
    if ((c->relu != 0 && c->relu != 1) || (c->relu && c->swiglu))
        return util_errf(e, UTIL_EXIT_USAGE, "ReLU %d beside SwiGLU %d",
                         c->relu, c->swiglu);
    /* a gated MLP: 1 SwiGLU, 2 GeGLU (T5 1.1's only) */
    if (c->swiglu < 0 || c->swiglu > 2 || (c->swiglu == 2 && !c->t5))
        return util_errf(e, UTIL_EXIT_USAGE, "gated MLP %d (1 SwiGLU, 2 "
                         "GeGLU, a T5's)", c->swiglu);
    if (c->heads % exec_kv_heads(c))
        return util_errf(e, UTIL_EXIT_USAGE,
                         "key and value heads (%d) must divide heads (%d)",
                         exec_kv_heads(c), c->heads);
    int hs = exec_hs(c);
    if (c->rmsnorm && !(c->norm_eps > 0 && c->norm_eps < 0.1f))
        return util_errf(e, UTIL_EXIT_USAGE, "RMSNorm's epsilon %g is not "
                         "in (0, 0.1)", (double)c->norm_eps);
    if (!c->rmsnorm && !(c->norm_eps >= 0 && c->norm_eps < 0.1f))
        return util_errf(e, UTIL_EXIT_USAGE, "LayerNorm's epsilon %g is not "
                         "in [0, 0.1) (0: 1e-5)", (double)c->norm_eps);
    if (exec_rope(c) && c->max_pos)
        return util_errf(e, UTIL_EXIT_USAGE, "a position table of %d "
                         "beside RoPE", c->max_pos);
    if (c->rope_theta != 0 && !(c->rope_theta >= 1))
        return util_errf(e, UTIL_EXIT_USAGE, "RoPE's base %g is below 1",
                         (double)c->rope_theta);
    if ((c->gelu_erf != 0 && c->gelu_erf != 1) ||
        (c->gelu_erf && (c->relu || c->swiglu)))
        return util_errf(e, UTIL_EXIT_USAGE, "GELU's erf form %d beside "
                         "ReLU %d or SwiGLU %d", c->gelu_erf, c->relu,
                         c->swiglu);
    if ((c->encoder != 0 && c->encoder != 1) || c->type_vocab < 0 ||
        c->type_vocab > 1024 || (c->pooler != 0 && c->pooler != 1) ||
        (!c->encoder && (c->type_vocab || c->pooler)))
        return util_errf(e, UTIL_EXIT_USAGE, "encoder %d with %d token "
                         "types and pooler %d", c->encoder, c->type_vocab,
                         c->pooler);
    if (c->encoder && (c->rmsnorm || c->swiglu || exec_rope(c) ||
                       c->kv_heads))
        return util_errf(e, UTIL_EXIT_USAGE, "an encoder (BERT) with "
                         "LayerNorm, a GELU or ReLU MLP, learned positions "
                         "and a key and value head per query head");
    if (exec_qkv_expands(c) &&
        (hs > KERN_HEAD_MAX || (exec_rope(c) && hs % 2)))
        return util_errf(e, UTIL_EXIT_USAGE,
                         "a head of %d channels: rotary positions need an "
                         "even head size, grouped heads one of at most %d",
                         hs, KERN_HEAD_MAX);
    return 0;
}

int exec_gpt_config_from_spec(const prof_model_spec *s, exec_gpt_config *c,
                              const char *where, util_err *e)
{
    char why[160] = "";
    int t5 = s->family == PROF_FAM_T5;
    if (s->family != PROF_FAM_GPT && s->family != PROF_FAM_LLAMA &&
        s->family != PROF_FAM_OPT && s->family != PROF_FAM_BERT && !t5)
        snprintf(why, sizeof why,
                 "family %s (it trains decoders, families gpt, llama and "
                 "opt, encoders, family bert, and encoder-decoders, family "
                 "t5)", prof_family_name(s->family));
    else if (t5 && s->gated_mlp &&
             (s->act != PROF_ACT_GELU || s->gelu_erf))
        snprintf(why, sizeof why, "a T5 gated MLP other than GeGLU of "
                 "GELU's tanh form (T5 1.1's gated-gelu)");
    else if (t5 && (s->bias || !s->rmsnorm))
        snprintf(why, sizeof why, "a T5 with %s (T5 has RMSNorm and no "
                 "biases)", s->bias ? "biases" : "LayerNorm");
    else if (!t5 && s->gated_mlp && s->act != PROF_ACT_SILU)
        snprintf(why, sizeof why, "a gated MLP other than SwiGLU");
    else if (!s->gated_mlp && s->act != PROF_ACT_GELU &&
             s->act != PROF_ACT_RELU)
        snprintf(why, sizeof why, "an MLP activation other than GELU or "
                 "ReLU (or SwiGLU, gated)");
    else if (!t5 && s->head_dim && s->heads &&
             (long long)s->head_dim * s->heads != s->hidden)
        snprintf(why, sizeof why, "a head size other than hidden/heads");
    else if (s->act_other)
        snprintf(why, sizeof why, "an activation of the %s kind the "
                 "kernels do not compute (quick_gelu, gelu_10, relu6, "
                 "relu2, leaky_relu)", s->act == PROF_ACT_GELU ? "GELU"
                 : s->act == PROF_ACT_RELU ? "ReLU" : "SiLU");
    else if (s->rope_scaled)
        snprintf(why, sizeof why, "RoPE with a scaling (it rotates by the "
                 "base alone)");
    if (why[0])
        return util_errf(e, UTIL_EXIT_USAGE,
                         "%s: the executor cannot train this model: %s",
                         where, why);
    c->vocab = s->vocab;
    c->max_pos = s->max_pos;
    c->hidden = s->hidden;
    c->layers = s->layers;
    c->heads = s->heads;
    c->ffn = s->ffn;
    c->bias = s->bias != 0;
    c->tied = s->tied_embeddings != 0;
    c->kv_heads = s->kv_heads && s->kv_heads != s->heads ? s->kv_heads : 0;
    c->rmsnorm = s->rmsnorm != 0;
    c->swiglu = !s->gated_mlp ? 0 : s->act == PROF_ACT_SILU ? 1 : 2;
    c->relu = !s->gated_mlp && s->act == PROF_ACT_RELU;
    /* OPT's table keeps two rows before position 0 (its padding offset) */
    c->pos_offset = s->family == PROF_FAM_OPT && s->max_pos > 0 ? 2 : 0;
    /* BERT: a masked LM with token types and its pooler */
    c->encoder = s->family == PROF_FAM_BERT;
    c->type_vocab = c->encoder ? s->type_vocab : 0;
    c->pooler = c->encoder && s->pooler;
    c->gelu_erf = s->gelu_erf && s->act == PROF_ACT_GELU && !s->gated_mlp;
    /* T5: the encoder's layers, then the decoder's; a relative-position
     * bias; heads as wide as d_kv says */
    c->t5 = t5;
    c->dec_layers = t5 ? s->dec_layers : 0;
    c->rel_buckets = t5 ? s->rel_pos_buckets : 0;
    c->rel_max_dist = t5 ? s->rel_pos_max_distance : 0;
    c->head_dim = t5 && s->head_dim &&
                          (long long)s->head_dim * s->heads != s->hidden
                      ? s->head_dim : 0;
    if (t5) c->max_pos = 0;
    /* no learned position table: rotary positions, as Llama (the
     * simulator's rule) */
    int rope = prof_spec_rope(s);
    if (rope) c->max_pos = 0;
    c->rope_theta = rope ? (float)(s->rope_theta > 0 ? s->rope_theta
                                                        : 10000.0)
                            : 0.0f;
    /* RMSNorm's own; LayerNorm's where the spec gives one other than
     * GPT-2's 1e-5 (BERT's 1e-12), else 0 */
    c->norm_eps = c->rmsnorm ? (float)(s->norm_eps > 0 ? s->norm_eps : 1e-5)
                : s->norm_eps > 0 && (float)s->norm_eps != KERN_LN_EPS
                    ? (float)s->norm_eps : 0.0f;
    if (exec_gpt_config_check(c, e)) return util_err_prefix(e, "%s", where);
    return 0;
}

exec_gpt_mem exec_gpt_mem_need(const exec_gpt_config *c, int B, int T)
{
    exec_gpt_mem m;
    act_layout a = act_sizes(c, B, T);
    m.params = param_count(c);
    m.param_bytes = 4.0 * (double)m.params * sizeof(float);
    m.act_bytes = 2.0 * (double)a.total * sizeof(float) +
                  2.0 * B * T * sizeof(int);
    m.total_bytes = m.param_bytes + m.act_bytes;
    return m;
}

/* splitmix64 (exec.h), and normals by Box-Muller: deterministic across
 * machines. */
uint64_t exec_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_normal(float *x, size_t n, float std, uint64_t *s)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((exec_splitmix(s) >> 11) + 1.0) / 9007199254740993.0;
        double u2 = (exec_splitmix(s) >> 11) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(std * r * cos(2 * M_PI * u2));
        if (i + 1 < n) x[i + 1] = (float)(std * r * sin(2 * M_PI * u2));
    }
}

exec_gpt *exec_gpt_new(const exec_gpt_config *c, int B, int T, uint64_t seed)
{
    exec_gpt *m = util_calloc(1, sizeof *m);
    m->c = *c;
    m->B = B;
    m->T = T;
    param_table(c, m->tens);
    m->P = param_count(c);
    m->arena = util_calloc(4 * m->P + 1, sizeof(float));
    m->al = act_sizes(c, B, T);
    m->acts = util_calloc(m->al.total, sizeof(float));
    m->dacts = util_calloc(m->al.total, sizeof(float));
    m->tokens = util_calloc((size_t)B * T, sizeof(int));
    m->targets = util_calloc((size_t)B * T, sizeof(int));
    exec_gpt_init_params(c, seed, m->arena);
    return m;
}

void exec_t5_buckets(int *out, int Tq, int Tk, int bidirectional, int nb,
                     int maxd)
{
    /* no table (no buckets, or too few to split): every offset in 0 */
    if (nb < 4 || maxd <= nb / 2) {
        memset(out, 0, sizeof(int) * (size_t)(Tq + Tk - 1));
        return;
    }
    for (int o = 0; o < Tq + Tk - 1; o++) {
        int rel = o - (Tq - 1), b = 0, n = nb, d;
        if (bidirectional) {
            n /= 2;
            if (rel > 0) b += n;
            d = rel < 0 ? -rel : rel;
        } else {
            d = rel < 0 ? -rel : 0;
        }
        int exact = n / 2;
        if (d < exact) {
            b += d;
        } else {
            /* float32 as the reference computes it; a distance this far
             * has exact >= 1 */
            float v = logf((float)d / (float)exact) /
                      (float)log((double)maxd / exact) * (float)(n - exact);
            /* (the config's check keeps maxd beyond exact: v is finite) */
            int large = exact + (v < (float)n ? (int)v : n);
            b += large < n - 1 ? large : n - 1;
        }
        out[o] = b;
    }
}

/* T5's initialization as Hugging Face's T5PreTrainedModel gives it
 * (Mesh TensorFlow's): the token table N(0, 1); q N(0, 1/sqrt(C hs)), k
 * and v N(0, 1/sqrt(C)), the attention's output N(0, 1/sqrt(NH hs)); the
 * MLP's first linear N(0, 1/sqrt(C)), its second N(0, 1/sqrt(F)); the
 * bias tables N(0, 1/sqrt(C)); an untied head N(0, 1); norms 1. */
static void t5_init(const exec_gpt_config *c, const exec_tensor *tens,
                    uint64_t *s, float *p)
{
    float C = (float)c->hidden, D = (float)exec_inner(c),
          hs = (float)exec_hs(c), F = (float)c->ffn;
    size_t Dn = exec_inner(c), Cn = (size_t)c->hidden;
    for (int i = 0; i < P_COUNT; i++) {
        const exec_tensor *t = &tens[i];
        float *x = p + t->off;
        if (!t->n) continue;
        switch (i) {
        case P_LN1W: case P_LN2W: case P_LNFW: case P_XLNW: case P_ENCNW:
            for (size_t j = 0; j < t->n; j++) x[j] = 1.0f;
            break;
        case P_QKVW:
            /* per layer: q's rows, then k's and v's */
            for (size_t at = 0; at < t->n; at += 3 * Dn * Cn) {
                fill_normal(x + at, Dn * Cn, 1.0f / sqrtf(C * hs), s);
                fill_normal(x + at + Dn * Cn, 2 * Dn * Cn, 1.0f / sqrtf(C),
                            s);
            }
            break;
        case P_XQW: fill_normal(x, t->n, 1.0f / sqrtf(C * hs), s); break;
        case P_XKVW: case P_FCW: case P_RELE: case P_RELD:
            fill_normal(x, t->n, 1.0f / sqrtf(C), s);
            break;
        case P_ATTPROJW: case P_XOW:
            fill_normal(x, t->n, 1.0f / sqrtf(D), s);
            break;
        case P_FCPROJW: fill_normal(x, t->n, 1.0f / sqrtf(F), s); break;
        case P_WTE: case P_LMW: fill_normal(x, t->n, 1.0f, s); break;
        default: memset(x, 0, t->n * sizeof *x); break;
        }
    }
}

void exec_gpt_init_params(const exec_gpt_config *c, uint64_t seed, float *p)
{
    exec_tensor tens[P_COUNT];
    param_table(c, tens);
    uint64_t s = seed;
    if (c->t5) {
        t5_init(c, tens, &s, p);
        return;
    }
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * c->layers);
    for (int i = 0; i < P_COUNT; i++) {
        exec_tensor *t = &tens[i];
        if (!t->n) continue;
        if (i == P_LN1W || i == P_LN2W || i == P_LNFW || i == P_LNEW)
            for (size_t j = 0; j < t->n; j++) p[t->off + j] = 1.0f;
        else if (t->decay)
            fill_normal(p + t->off, t->n,
                        i == P_ATTPROJW || i == P_FCPROJW ? proj_std : std,
                        &s);
        else
            memset(p + t->off, 0, t->n * sizeof *p); /* biases */
    }
}

void exec_gpt_free(exec_gpt *m)
{
    if (!m) return;
    free(m->arena);
    free(m->acts);
    free(m->dacts);
    free(m->tokens);
    free(m->targets);
    free(m);
}

const exec_gpt_config *exec_gpt_cfg(const exec_gpt *m) { return &m->c; }
size_t exec_gpt_num_params(const exec_gpt *m) { return m->P; }
float *exec_gpt_params(exec_gpt *m) { return m->arena; }
float *exec_gpt_grads(exec_gpt *m) { return m->arena + m->P; }
float *exec_gpt_adam_m(exec_gpt *m) { return m->arena + 2 * m->P; }
float *exec_gpt_adam_v(exec_gpt *m) { return m->arena + 3 * m->P; }
void exec_gpt_set_timing(exec_gpt *m, exec_timing *t) { m->tm = t; }

const exec_tensor *exec_gpt_tensors(const exec_gpt *m, int *n)
{
    *n = P_COUNT;
    return m->tens;
}

/* Pointers into the arenas. */
static float *par(exec_gpt *m, int i)
{
    return m->tens[i].n ? m->arena + m->tens[i].off : NULL;
}

static float *grd(exec_gpt *m, int i)
{
    return m->tens[i].n ? m->arena + m->P + m->tens[i].off : NULL;
}

/* Element off of tensor i and of its gradient; NULL for a tensor the
 * config does not have (the norms' biases under RMSNorm). */
static float *par_at(exec_gpt *m, int i, size_t off)
{
    return m->tens[i].n ? m->arena + m->tens[i].off + off : NULL;
}

static float *grd_at(exec_gpt *m, int i, size_t off)
{
    return m->tens[i].n ? m->arena + m->P + m->tens[i].off + off : NULL;
}

static float *act_at(exec_gpt *m, float *base, int l, int which)
{
    size_t off = (size_t)l * m->al.per_layer;
    for (int i = 0; i < which; i++) off += m->al.layer[i];
    return base + off;
}

static float *glob_at(exec_gpt *m, float *base, int which)
{
    size_t off = (size_t)m->c.layers * m->al.per_layer;
    for (int i = 0; i < which; i++) off += m->al.glob[i];
    return base + off;
}

#define ACT(l, w) act_at(m, m->acts, (l), (w))
#define DACT(l, w) act_at(m, m->dacts, (l), (w))
#define GACT(w) glob_at(m, m->acts, (w))
#define GDACT(w) glob_at(m, m->dacts, (w))

/* Timed kernel call: dims are B,T,C,NH,V,OC; gemm m,n,k; flops; bytes. */
#define TIMED(op, d0, d1, d2, d3, d4, d5, gm, gn, gk, fl, by, call)          \
    do {                                                                     \
        uint64_t t0_ = m && m->tm ? exec_now_ns() : 0;                       \
        call;                                                                \
        if (m && m->tm) {                                                    \
            int dims_[6] = {d0, d1, d2, d3, d4, d5};                         \
            double g_[3] = {gm, gn, gk};                                     \
            exec_timing_add(m->tm, KERN_OP_##op, m->as, dims_, g_, fl, by,   \
                            exec_now_ns() - t0_);                            \
        }                                                                    \
    } while (0)

#define F4 4.0 /* bytes per float */

static void linear_fwd(exec_gpt *m, float *out, const float *inp,
                       const float *w, const float *b, int N, int C, int OC)
{
    double fl = 2.0 * N * C * OC;
    double by = F4 * ((double)N * C + (double)OC * C + (double)N * OC);
    TIMED(linear_forward, m->B, m->T, C, 0, 0, OC, N, OC, C, fl, by,
          kern_linear_forward(out, inp, w, b, N, C, OC));
}

static void linear_bwd(exec_gpt *m, float *dinp, float *dw, float *db,
                       const float *dout, const float *inp, const float *w,
                       int N, int C, int OC)
{
    double fl = 2.0 * N * C * OC;
    double by = F4 * ((double)N * C + (double)OC * C + (double)N * OC);
    TIMED(linear_backward_input, m->B, m->T, C, 0, 0, OC, N, C, OC, fl,
          by + F4 * N * C,
          kern_linear_backward_input(dinp, dout, w, N, C, OC));
    TIMED(linear_backward_weight, m->B, m->T, C, 0, 0, OC, OC, C, N, fl,
          by + F4 * OC * C,
          kern_linear_backward_weight(dw, db, dout, inp, N, C, OC));
}

static void ln_fwd(exec_gpt *m, float *out, float *mean, float *rstd,
                   const float *inp, const float *w, const float *b)
{
    int N = m->B * m->T, C = m->c.hidden;
    if (m->c.rmsnorm) {
        TIMED(rmsnorm_forward, m->B, m->T, C, 0, 0, 0, 0, 0, 0, 4.0 * N * C,
              F4 * (2.0 * N * C + C),
              kern_rmsnorm_forward(out, rstd, inp, w, N, C,
                                   m->c.norm_eps));
        return;
    }
    TIMED(layernorm_forward, m->B, m->T, C, 0, 0, 0, 0, 0, 0, 8.0 * N * C,
          F4 * (2.0 * N * C + 2.0 * C),
          kern_layernorm_forward(out, mean, rstd, inp, w, b, N, C,
                                 exec_ln_eps(&m->c)));
}

static void ln_bwd(exec_gpt *m, float *dinp, float *dw, float *db,
                   const float *dout, const float *inp, const float *w,
                   const float *mean, const float *rstd)
{
    int N = m->B * m->T, C = m->c.hidden;
    if (m->c.rmsnorm) {
        TIMED(rmsnorm_backward_input, m->B, m->T, C, 0, 0, 0, 0, 0, 0,
              8.0 * N * C, F4 * (3.0 * N * C + C),
              kern_rmsnorm_backward_input(dinp, dout, inp, w, rstd, N, C));
        TIMED(rmsnorm_backward_weight, m->B, m->T, C, 0, 0, 0, 0, 0, 0,
              3.0 * N * C, F4 * (2.0 * N * C + C),
              kern_rmsnorm_backward_weight(dw, dout, inp, rstd, N, C));
        return;
    }
    TIMED(layernorm_backward_input, m->B, m->T, C, 0, 0, 0, 0, 0, 0,
          12.0 * N * C, F4 * (4.0 * N * C + C),
          kern_layernorm_backward_input(dinp, dout, inp, w, mean, rstd, N,
                                        C));
    TIMED(layernorm_backward_weight, m->B, m->T, C, 0, 0, 0, 0, 0, 0,
          5.0 * N * C, F4 * (2.0 * N * C + 4.0 * C),
          kern_layernorm_backward_weight(dw, db, dout, inp, mean, rstd, N,
                                         C));
}

/* The batch kept for the backward, and its embeddings into x: tokens,
 * positions, an encoder's types. */
static void embed_fwd(exec_gpt *m, float *x, const int *tokens,
                      const int *targets)
{
    int B = m->B, T = m->T, C = m->c.hidden, V = m->c.vocab, N = B * T;
    size_t NC = (size_t)N * C;
    memcpy(m->tokens, tokens, (size_t)N * sizeof(int));
    memcpy(m->targets, targets, (size_t)N * sizeof(int));
    TIMED(embed_forward, B, T, C, 0, V, 0, 0, 0, 0, (double)NC,
          F4 * 3.0 * NC,
          kern_embed_forward(x, tokens, par(m, P_WTE),
                             par_at(m, P_WPE, (size_t)m->c.pos_offset * C), B,
                             T, C));
    if (m->c.type_vocab)
        TIMED(embed_type_forward, B, T, C, 0, 0, 0, 0, 0, 0, (double)NC,
              F4 * 2.0 * NC,
              kern_embed_type_forward(x, par(m, P_WTT), B, T, C,
                                      exec_type_split(&m->c, T)));
}

/* The LM head (an encoder's decoder with its bias) on G_LNF, the loss,
 * and its mean over the targets >= 0 (a decoder's: every token). */
static float head_fwd(exec_gpt *m)
{
    int B = m->B, T = m->T, C = m->c.hidden, V = m->c.vocab, N = B * T;
    const float *lmw = m->c.tied ? par(m, P_WTE) : par(m, P_LMW);
    m->as = "lm_head";
    linear_fwd(m, GACT(G_LOGITS), GACT(G_LNF), lmw, par(m, P_LMB), N, C, V);
    m->as = NULL;
    TIMED(softmax_xent_forward, B, T, 0, 0, V, 0, 0, 0, 0, 5.0 * N * V,
          F4 * 2.0 * N * V,
          kern_softmax_xent_forward(GACT(G_LOSSES), GACT(G_PROBS),
                                    GACT(G_LOGITS), m->targets, N, V));
    const float *losses = GACT(G_LOSSES);
    double sum = 0;
    int n = 0;
    for (int i = 0; i < N; i++) {
        sum += losses[i];
        n += m->targets[i] >= 0;
    }
    m->n_tgt = n;
    return n ? (float)(sum / n) : 0.0f;
}

/* The loss's and the LM head's backward into G_LNF's gradient (the
 * activation gradients cleared first). */
static void head_bwd(exec_gpt *m)
{
    int B = m->B, T = m->T, C = m->c.hidden, V = m->c.vocab, N = B * T;
    memset(m->dacts, 0, m->al.total * sizeof(float));
    float scale = m->n_tgt ? 1.0f / (float)m->n_tgt : 0.0f;
    TIMED(softmax_xent_backward, B, T, 0, 0, V, 0, 0, 0, 0, 2.0 * N * V,
          F4 * 2.0 * N * V,
          kern_softmax_xent_backward(GDACT(G_LOGITS), GACT(G_PROBS),
                                     m->targets, scale, N, V));
    const float *lmw = m->c.tied ? par(m, P_WTE) : par(m, P_LMW);
    float *dlmw = m->c.tied ? grd(m, P_WTE) : grd(m, P_LMW);
    m->as = "lm_head";
    linear_bwd(m, GDACT(G_LNF), dlmw, grd(m, P_LMB), GDACT(G_LOGITS),
               GACT(G_LNF), lmw, N, C, V);
    m->as = NULL;
}

/* The embeddings' backward from dx: the token and position tables, an
 * encoder's types. */
static void embed_bwd(exec_gpt *m, const float *dx)
{
    int B = m->B, T = m->T, C = m->c.hidden, V = m->c.vocab;
    size_t NC = (size_t)B * T * C;
    TIMED(embed_backward, B, T, C, 0, V, 0, 0, 0, 0, 2.0 * NC, F4 * 5.0 * NC,
          kern_embed_backward(grd(m, P_WTE),
                              grd_at(m, P_WPE, (size_t)m->c.pos_offset * C),
                              dx, m->tokens, B, T, C));
    if (m->c.type_vocab)
        TIMED(embed_type_backward, B, T, C, 0, 0, 0, 0, 0, 0, (double)NC,
              F4 * 2.0 * NC,
              kern_embed_type_backward(grd(m, P_WTT), dx, B, T, C,
                                       exec_type_split(&m->c, T)));
}

static float bert_forward(exec_gpt *m, const int *tokens,
                          const int *targets);
static void bert_backward(exec_gpt *m);
static void mlp_fwd(exec_gpt *m, int l, int in);
static void mlp_bwd(exec_gpt *m, int l, int in);

float exec_gpt_forward(exec_gpt *m, const int *tokens, const int *targets)
{
    if (m->c.encoder) return bert_forward(m, tokens, targets);
    int B = m->B, T = m->T, C = m->c.hidden, NH = m->c.heads,
        N = B * T;
    size_t NC = (size_t)N * C;
    embed_fwd(m, GACT(G_ENCODED), tokens, targets);
    double attn_fl = 4.0 * B * NH * (double)T * T * (C / NH);
    int QKV = (int)exec_qkv_rows(&m->c),
        NKV = exec_kv_heads(&m->c), hs = C / NH, xp = exec_qkv_expands(&m->c);
    for (int l = 0; l < m->c.layers; l++) {
        const float *resid = l ? ACT(l - 1, A_RES3) : GACT(G_ENCODED);
        size_t lc = (size_t)l * C;
        ln_fwd(m, ACT(l, A_LN1), ACT(l, A_LN1_MEAN), ACT(l, A_LN1_RSTD),
               resid, par(m, P_LN1W) + lc,
               par_at(m, P_LN1B, lc));
        linear_fwd(m, ACT(l, A_QKV), ACT(l, A_LN1),
                   par(m, P_QKVW) + (size_t)l * QKV * C,
                   m->c.bias ? par(m, P_QKVB) + (size_t)l * QKV : NULL, N, C,
                   QKV);
        float *qkv = ACT(l, xp ? A_QKVX : A_QKV);
        if (xp)
            TIMED(qkv_expand_forward, B, T, C, NH, 0, 0, 0, 0, 0,
                  6.0 * N * C, F4 * ((double)N * QKV + 3.0 * NC),
                  kern_qkv_expand_forward(qkv, ACT(l, A_QKV), B, T, NH, NKV,
                                          hs, m->c.rope_theta));
        TIMED(attention_forward, B, T, C, NH, 0, 0, 0, 0, 0, attn_fl,
              F4 * (3.0 * NC + NC + 2.0 * B * NH * T * T),
              kern_attention_forward(ACT(l, A_ATTY), ACT(l, A_ATT), qkv, B, T,
                                     C, NH, 1));
        linear_fwd(m, ACT(l, A_ATTPROJ), ACT(l, A_ATTY),
                   par(m, P_ATTPROJW) + (size_t)l * C * C,
                   m->c.bias ? par(m, P_ATTPROJB) + lc : NULL, N, C, C);
        TIMED(residual_forward, B, T, C, 0, 0, 0, 0, 0, 0, (double)NC,
              F4 * 3.0 * NC,
              kern_residual_forward(ACT(l, A_RES2), resid, ACT(l, A_ATTPROJ),
                                    NC));
        ln_fwd(m, ACT(l, A_LN2), ACT(l, A_LN2_MEAN), ACT(l, A_LN2_RSTD),
               ACT(l, A_RES2), par(m, P_LN2W) + lc, par_at(m, P_LN2B, lc));
        mlp_fwd(m, l, A_LN2);
        TIMED(residual_forward, B, T, C, 0, 0, 0, 0, 0, 0, (double)NC,
              F4 * 3.0 * NC,
              kern_residual_forward(ACT(l, A_RES3), ACT(l, A_RES2),
                                    ACT(l, A_FCPROJ), NC));
    }
    ln_fwd(m, GACT(G_LNF), GACT(G_LNF_MEAN), GACT(G_LNF_RSTD),
           ACT(m->c.layers - 1, A_RES3), par(m, P_LNFW), par(m, P_LNFB));
    return head_fwd(m);
}

void exec_gpt_zero_grad(exec_gpt *m)
{
    memset(m->arena + m->P, 0, m->P * sizeof(float));
}

void exec_gpt_backward(exec_gpt *m)
{
    if (m->c.encoder) {
        bert_backward(m);
        return;
    }
    int B = m->B, T = m->T, C = m->c.hidden, NH = m->c.heads,
        N = B * T, L = m->c.layers;
    size_t NC = (size_t)N * C;
    head_bwd(m);
    ln_bwd(m, DACT(L - 1, A_RES3), grd(m, P_LNFW), grd(m, P_LNFB),
           GDACT(G_LNF), ACT(L - 1, A_RES3), par(m, P_LNFW),
           GACT(G_LNF_MEAN), GACT(G_LNF_RSTD));
    double attn_fl = 8.0 * B * NH * (double)T * T * (C / NH);
    int QKV = (int)exec_qkv_rows(&m->c),
        NKV = exec_kv_heads(&m->c), hs = C / NH, xp = exec_qkv_expands(&m->c);
    for (int l = L - 1; l >= 0; l--) {
        const float *resid = l ? ACT(l - 1, A_RES3) : GACT(G_ENCODED);
        float *dresid = l ? DACT(l - 1, A_RES3) : GDACT(G_ENCODED);
        size_t lc = (size_t)l * C;
        TIMED(residual_backward, B, T, C, 0, 0, 0, 0, 0, 0, 2.0 * NC,
              F4 * 5.0 * NC,
              kern_residual_backward(DACT(l, A_RES2), DACT(l, A_FCPROJ),
                                     DACT(l, A_RES3), NC));
        mlp_bwd(m, l, A_LN2);
        ln_bwd(m, DACT(l, A_RES2), grd(m, P_LN2W) + lc, grd_at(m, P_LN2B, lc),
               DACT(l, A_LN2), ACT(l, A_RES2), par(m, P_LN2W) + lc,
               ACT(l, A_LN2_MEAN), ACT(l, A_LN2_RSTD));
        TIMED(residual_backward, B, T, C, 0, 0, 0, 0, 0, 0, 2.0 * NC,
              F4 * 5.0 * NC,
              kern_residual_backward(dresid, DACT(l, A_ATTPROJ),
                                     DACT(l, A_RES2), NC));
        linear_bwd(m, DACT(l, A_ATTY), grd(m, P_ATTPROJW) + (size_t)l * C * C,
                   m->c.bias ? grd(m, P_ATTPROJB) + lc : NULL,
                   DACT(l, A_ATTPROJ), ACT(l, A_ATTY),
                   par(m, P_ATTPROJW) + (size_t)l * C * C, N, C, C);
        /* The attention-probability slot of the gradient arena is free
         * (probabilities have no parameter): it is the scratch. */
        TIMED(attention_backward, B, T, C, NH, 0, 0, 0, 0, 0, attn_fl,
              F4 * (7.0 * NC + 3.0 * B * NH * T * T),
              kern_attention_backward(DACT(l, xp ? A_QKVX : A_QKV),
                                      DACT(l, A_ATT), DACT(l, A_ATTY),
                                      ACT(l, xp ? A_QKVX : A_QKV),
                                      ACT(l, A_ATT), B, T, C, NH, 1));
        if (xp)
            TIMED(qkv_expand_backward, B, T, C, NH, 0, 0, 0, 0, 0,
                  6.0 * N * C, F4 * ((double)N * QKV + 3.0 * NC),
                  kern_qkv_expand_backward(DACT(l, A_QKV), DACT(l, A_QKVX),
                                           B, T, NH, NKV, hs,
                                           m->c.rope_theta));
        linear_bwd(m, DACT(l, A_LN1), grd(m, P_QKVW) + (size_t)l * QKV * C,
                   m->c.bias ? grd(m, P_QKVB) + (size_t)l * QKV : NULL,
                   DACT(l, A_QKV), ACT(l, A_LN1),
                   par(m, P_QKVW) + (size_t)l * QKV * C, N, C, QKV);
        ln_bwd(m, dresid, grd(m, P_LN1W) + lc, grd_at(m, P_LN1B, lc),
               DACT(l, A_LN1), resid, par(m, P_LN1W) + lc,
               ACT(l, A_LN1_MEAN), ACT(l, A_LN1_RSTD));
    }
    embed_bwd(m, GDACT(G_ENCODED));
}

/* ------------------------------------------------ an encoder (BERT) */

static void attn_fwd(exec_gpt *m, float *out, float *att, const float *qkv,
                     int causal)
{
    int B = m->B, T = m->T, C = m->c.hidden, NH = m->c.heads;
    size_t NC = (size_t)B * T * C;
    TIMED(attention_forward, B, T, C, NH, 0, 0, 0, 0, 0,
          4.0 * B * NH * (double)T * T * (C / NH),
          F4 * (3.0 * NC + NC + 2.0 * B * NH * T * T),
          kern_attention_forward(out, att, qkv, B, T, C, NH, causal));
}

/* The MLP's activation (ReLU where the model's is), or BERT's head
 * transform's (relu 0): GELU in the model's form. */
static void act_fwd(exec_gpt *m, float *out, const float *inp, size_t n,
                    int relu)
{
    int B = m->B, T = m->T, F = (int)(n / ((size_t)B * T));
    if (relu)
        TIMED(relu_forward, B, T, F, 0, 0, 0, 0, 0, 0, (double)n, F4 * 2.0 * n,
              kern_relu_forward(out, inp, n));
    else if (m->c.gelu_erf)
        TIMED(gelu_erf_forward, B, T, F, 0, 0, 0, 0, 0, 0, 20.0 * n,
              F4 * 2.0 * n, kern_gelu_erf_forward(out, inp, n));
    else
        TIMED(gelu_forward, B, T, F, 0, 0, 0, 0, 0, 0, 20.0 * n, F4 * 2.0 * n,
              kern_gelu_forward(out, inp, n));
}

static void act_bwd(exec_gpt *m, float *dinp, const float *inp,
                    const float *dout, size_t n, int relu)
{
    int B = m->B, T = m->T, F = (int)(n / ((size_t)B * T));
    if (relu)
        TIMED(relu_backward, B, T, F, 0, 0, 0, 0, 0, 0, (double)n, F4 * 4.0 * n,
              kern_relu_backward(dinp, inp, dout, n));
    else if (m->c.gelu_erf)
        TIMED(gelu_erf_backward, B, T, F, 0, 0, 0, 0, 0, 0, 30.0 * n,
              F4 * 4.0 * n, kern_gelu_erf_backward(dinp, inp, dout, n));
    else
        TIMED(gelu_backward, B, T, F, 0, 0, 0, 0, 0, 0, 30.0 * n, F4 * 4.0 * n,
              kern_gelu_backward(dinp, inp, dout, n));
}

/* Layer l's MLP from the activation slot `in` (a decoder's second norm,
 * an encoder's first) to FCPROJ: up (SwiGLU's gate and up), the
 * activation, down. */
static void mlp_fwd(exec_gpt *m, int l, int in)
{
    int B = m->B, T = m->T, C = m->c.hidden, F = m->c.ffn, N = B * T,
        FC = (int)exec_fc_rows(&m->c);
    size_t lc = (size_t)l * C;
    linear_fwd(m, ACT(l, A_FCH), ACT(l, in),
               par(m, P_FCW) + (size_t)l * FC * C,
               m->c.bias ? par(m, P_FCB) + (size_t)l * FC : NULL, N, C, FC);
    if (m->c.swiglu)
        TIMED(swiglu_forward, B, T, F, 0, 0, 0, 0, 0, 0, 6.0 * N * F,
              F4 * 3.0 * N * F,
              kern_swiglu_forward(ACT(l, A_FCH_GELU), ACT(l, A_FCH), N, F));
    else
        act_fwd(m, ACT(l, A_FCH_GELU), ACT(l, A_FCH), (size_t)N * F,
                m->c.relu);
    linear_fwd(m, ACT(l, A_FCPROJ), ACT(l, A_FCH_GELU),
               par(m, P_FCPROJW) + (size_t)l * C * F,
               m->c.bias ? par(m, P_FCPROJB) + lc : NULL, N, F, C);
}

/* Its backward from FCPROJ's gradient into slot `in`'s. */
static void mlp_bwd(exec_gpt *m, int l, int in)
{
    int B = m->B, T = m->T, C = m->c.hidden, F = m->c.ffn, N = B * T,
        FC = (int)exec_fc_rows(&m->c);
    size_t lc = (size_t)l * C;
    linear_bwd(m, DACT(l, A_FCH_GELU), grd(m, P_FCPROJW) + (size_t)l * C * F,
               m->c.bias ? grd(m, P_FCPROJB) + lc : NULL, DACT(l, A_FCPROJ),
               ACT(l, A_FCH_GELU), par(m, P_FCPROJW) + (size_t)l * C * F, N,
               F, C);
    if (m->c.swiglu)
        TIMED(swiglu_backward, B, T, F, 0, 0, 0, 0, 0, 0, 12.0 * N * F,
              F4 * 5.0 * N * F,
              kern_swiglu_backward(DACT(l, A_FCH), ACT(l, A_FCH),
                                   DACT(l, A_FCH_GELU), N, F));
    else
        act_bwd(m, DACT(l, A_FCH), ACT(l, A_FCH), DACT(l, A_FCH_GELU),
                (size_t)N * F, m->c.relu);
    linear_bwd(m, DACT(l, in), grd(m, P_FCW) + (size_t)l * FC * C,
               m->c.bias ? grd(m, P_FCB) + (size_t)l * FC : NULL,
               DACT(l, A_FCH), ACT(l, in), par(m, P_FCW) + (size_t)l * FC * C,
               N, C, FC);
}

static void res_fwd(exec_gpt *m, float *out, const float *a, const float *b)
{
    size_t NC = (size_t)m->B * m->T * m->c.hidden;
    TIMED(residual_forward, m->B, m->T, m->c.hidden, 0, 0, 0, 0, 0, 0,
          (double)NC, F4 * 3.0 * NC, kern_residual_forward(out, a, b, NC));
}

static void res_bwd(exec_gpt *m, float *da, float *db, const float *dout)
{
    size_t NC = (size_t)m->B * m->T * m->c.hidden;
    TIMED(residual_backward, m->B, m->T, m->c.hidden, 0, 0, 0, 0, 0, 0,
          2.0 * NC, F4 * 5.0 * NC, kern_residual_backward(da, db, dout, NC));
}

/* BERT (Devlin et al. 2019): token, position and type embeddings and
 * their LayerNorm; post-LayerNorm layers of bidirectional attention and a
 * GELU MLP; the pooler on each sequence's first token; the masked-LM head
 * (dense, GELU, LayerNorm, the tied decoder with its bias); the loss's
 * mean over the targets >= 0. The calls and their order are those the
 * pipeline executor makes for the same graph (exec/stage_gpt.c). */
static float bert_forward(exec_gpt *m, const int *tokens, const int *targets)
{
    int B = m->B, T = m->T, C = m->c.hidden, N = B * T,
        L = m->c.layers;
    size_t NC = (size_t)N * C;
    float *emb = GACT(G_EMB);
    embed_fwd(m, emb, tokens, targets);
    ln_fwd(m, GACT(G_ENCODED), GACT(G_EMB_MEAN), GACT(G_EMB_RSTD), emb,
           par(m, P_LNEW), par(m, P_LNEB));
    int QKV = (int)exec_qkv_rows(&m->c);
    for (int l = 0; l < L; l++) {
        const float *x = l ? ACT(l - 1, A_LN2) : GACT(G_ENCODED);
        size_t lc = (size_t)l * C;
        linear_fwd(m, ACT(l, A_QKV), x, par(m, P_QKVW) + (size_t)l * QKV * C,
                   m->c.bias ? par(m, P_QKVB) + (size_t)l * QKV : NULL, N, C,
                   QKV);
        attn_fwd(m, ACT(l, A_ATTY), ACT(l, A_ATT), ACT(l, A_QKV), 0);
        linear_fwd(m, ACT(l, A_ATTPROJ), ACT(l, A_ATTY),
                   par(m, P_ATTPROJW) + (size_t)l * C * C,
                   m->c.bias ? par(m, P_ATTPROJB) + lc : NULL, N, C, C);
        res_fwd(m, ACT(l, A_RES2), x, ACT(l, A_ATTPROJ));
        ln_fwd(m, ACT(l, A_LN1), ACT(l, A_LN1_MEAN), ACT(l, A_LN1_RSTD),
               ACT(l, A_RES2), par(m, P_LN1W) + lc, par_at(m, P_LN1B, lc));
        mlp_fwd(m, l, A_LN1);
        res_fwd(m, ACT(l, A_RES3), ACT(l, A_LN1), ACT(l, A_FCPROJ));
        ln_fwd(m, ACT(l, A_LN2), ACT(l, A_LN2_MEAN), ACT(l, A_LN2_RSTD),
               ACT(l, A_RES3), par(m, P_LN2W) + lc, par_at(m, P_LN2B, lc));
    }
    const float *x = ACT(L - 1, A_LN2);
    if (m->c.pooler) {
        float *pin = GACT(G_POOL_IN);
        for (int b = 0; b < B; b++)
            memcpy(pin + (size_t)b * C, x + (size_t)b * T * C,
                   sizeof(float) * (size_t)C);
        linear_fwd(m, GACT(G_POOL), pin, par(m, P_POOLW), par(m, P_POOLB), B,
                   C, C);
        TIMED(tanh_forward, B, 1, C, 0, 0, 0, 0, 0, 0, 20.0 * B * C,
              F4 * 2.0 * B * C,
              kern_tanh_forward(GACT(G_POOL), GACT(G_POOL), (size_t)B * C));
    }
    linear_fwd(m, GACT(G_MLM_H), x, par(m, P_MLMW), par(m, P_MLMB), N, C, C);
    act_fwd(m, GACT(G_MLM_G), GACT(G_MLM_H), NC, 0);
    ln_fwd(m, GACT(G_LNF), GACT(G_LNF_MEAN), GACT(G_LNF_RSTD), GACT(G_MLM_G),
           par(m, P_LNFW), par(m, P_LNFB));
    return head_fwd(m);
}

static void bert_backward(exec_gpt *m)
{
    int B = m->B, T = m->T, C = m->c.hidden, NH = m->c.heads,
        N = B * T, L = m->c.layers;
    size_t NC = (size_t)N * C;
    head_bwd(m);
    ln_bwd(m, GDACT(G_MLM_G), grd(m, P_LNFW), grd(m, P_LNFB), GDACT(G_LNF),
           GACT(G_MLM_G), par(m, P_LNFW), GACT(G_LNF_MEAN),
           GACT(G_LNF_RSTD));
    act_bwd(m, GDACT(G_MLM_H), GACT(G_MLM_H), GDACT(G_MLM_G), NC, 0);
    /* the pooler's output feeds no loss: no gradient reaches it */
    linear_bwd(m, DACT(L - 1, A_LN2), grd(m, P_MLMW), grd(m, P_MLMB),
               GDACT(G_MLM_H), ACT(L - 1, A_LN2), par(m, P_MLMW), N, C, C);
    int QKV = (int)exec_qkv_rows(&m->c);
    double attn_fl = 8.0 * B * NH * (double)T * T * (C / NH);
    for (int l = L - 1; l >= 0; l--) {
        const float *x = l ? ACT(l - 1, A_LN2) : GACT(G_ENCODED);
        float *dx = l ? DACT(l - 1, A_LN2) : GDACT(G_ENCODED);
        size_t lc = (size_t)l * C;
        ln_bwd(m, DACT(l, A_RES3), grd(m, P_LN2W) + lc, grd_at(m, P_LN2B, lc),
               DACT(l, A_LN2), ACT(l, A_RES3), par(m, P_LN2W) + lc,
               ACT(l, A_LN2_MEAN), ACT(l, A_LN2_RSTD));
        res_bwd(m, DACT(l, A_LN1), DACT(l, A_FCPROJ), DACT(l, A_RES3));
        mlp_bwd(m, l, A_LN1);
        ln_bwd(m, DACT(l, A_RES2), grd(m, P_LN1W) + lc, grd_at(m, P_LN1B, lc),
               DACT(l, A_LN1), ACT(l, A_RES2), par(m, P_LN1W) + lc,
               ACT(l, A_LN1_MEAN), ACT(l, A_LN1_RSTD));
        res_bwd(m, dx, DACT(l, A_ATTPROJ), DACT(l, A_RES2));
        linear_bwd(m, DACT(l, A_ATTY), grd(m, P_ATTPROJW) + (size_t)l * C * C,
                   m->c.bias ? grd(m, P_ATTPROJB) + lc : NULL,
                   DACT(l, A_ATTPROJ), ACT(l, A_ATTY),
                   par(m, P_ATTPROJW) + (size_t)l * C * C, N, C, C);
        TIMED(attention_backward, B, T, C, NH, 0, 0, 0, 0, 0, attn_fl,
              F4 * (7.0 * NC + 3.0 * B * NH * T * T),
              kern_attention_backward(DACT(l, A_QKV), DACT(l, A_ATT),
                                      DACT(l, A_ATTY), ACT(l, A_QKV),
                                      ACT(l, A_ATT), B, T, C, NH, 0));
        linear_bwd(m, dx, grd(m, P_QKVW) + (size_t)l * QKV * C,
                   m->c.bias ? grd(m, P_QKVB) + (size_t)l * QKV : NULL,
                   DACT(l, A_QKV), x, par(m, P_QKVW) + (size_t)l * QKV * C, N,
                   C, QKV);
    }
    ln_bwd(m, GDACT(G_EMB), grd(m, P_LNEW), grd(m, P_LNEB), GDACT(G_ENCODED),
           GACT(G_EMB), par(m, P_LNEW), GACT(G_EMB_MEAN), GACT(G_EMB_RSTD));
    embed_bwd(m, GDACT(G_EMB));
}

void exec_sgd_update(float *p, const float *g, size_t n, float lr, float wd,
                     float scale)
{
    for (size_t i = 0; i < n; i++) p[i] -= lr * (scale * g[i] + wd * p[i]);
}

float exec_params_step(exec_gpt *m, const exec_tensor *tt, size_t P,
                       float *p, const float *g, float *am, float *av,
                       const exec_adamw *o, int t, int sgd)
{
    float nsq = 0;
    TIMED(norm_sq, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2.0 * P, F4 * P,
          kern_norm_sq(&nsq, g, P));
    float norm = sqrtf(nsq);
    float scale = o->clip > 0 && norm > o->clip ? o->clip / norm : 1.0f;
    for (int i = 0; i < EXEC_P_COUNT; i++) {
        const exec_tensor *te = &tt[i];
        if (!te->n) continue;
        size_t k = te->off;
        float wd = te->decay ? o->weight_decay : 0.0f;
        if (sgd) {
            exec_sgd_update(p + k, g + k, te->n, o->lr, wd, scale);
            continue;
        }
        TIMED(adamw_update, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12.0 * te->n,
              F4 * 7.0 * te->n,
              kern_adamw_update(p + k, am + k, av + k, g + k, te->n, o->lr,
                                o->beta1, o->beta2, o->eps, wd, scale, t));
    }
    return norm;
}

float exec_gpt_sgd_step(exec_gpt *m, const exec_adamw *o)
{
    float *a = m->arena;
    return exec_params_step(m, m->tens, m->P, a, a + m->P, NULL, NULL, o, 0,
                            1);
}

float exec_gpt_step(exec_gpt *m, const exec_adamw *o, int t)
{
    float *a = m->arena;
    return exec_params_step(m, m->tens, m->P, a, a + m->P, a + 2 * m->P,
                            a + 3 * m->P, o, t, 0);
}
