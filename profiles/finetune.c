/* Fine-tuning modes: which parameters of a model train, and what that
 * changes in its op graph (prof_model_finetune). */
#include <stdio.h>
#include <string.h>

#include "profiles/profiles.h"

static const char *const kind_names[PROF_FT_COUNT] = {"full", "frozen",
                                                      "lora", "qlora"};

static const struct {
    const char *name;
    unsigned bits;
} targets[] = {
    {"q", PROF_LORA_Q}, {"k", PROF_LORA_K}, {"v", PROF_LORA_V},
    {"out", PROF_LORA_OUT}, {"gate", PROF_LORA_GATE}, {"up", PROF_LORA_UP},
    {"down", PROF_LORA_DOWN},
    {"qkv", PROF_LORA_Q | PROF_LORA_K | PROF_LORA_V},
    {"attn", PROF_LORA_Q | PROF_LORA_K | PROF_LORA_V | PROF_LORA_OUT},
    {"mlp", PROF_LORA_GATE | PROF_LORA_UP | PROF_LORA_DOWN},
    {"all", PROF_LORA_ALL},
};
#define N_TARGETS (int)(sizeof targets / sizeof targets[0])
#define N_SINGLE 7

int prof_finetune_full(const prof_finetune *f)
{
    return !f || f->kind == PROF_FT_FULL;
}

const char *prof_lora_target_name(unsigned bit)
{
    for (int k = 0; k < N_SINGLE; k++)
        if (targets[k].bits == bit) return targets[k].name;
    return NULL;
}

/* TARGETS: names joined by '+' (an empty one is no name). */
static int parse_targets(char *s, unsigned *out)
{
    *out = 0;
    for (char *item = s; item;) {
        char *plus = strchr(item, '+');
        if (plus) *plus = 0;
        int k = 0;
        while (k < N_TARGETS && strcmp(targets[k].name, item)) k++;
        if (k == N_TARGETS) return 0;
        *out |= targets[k].bits;
        item = plus ? plus + 1 : NULL;
    }
    return 1;
}

int prof_finetune_parse(const char *s, prof_finetune *out, util_err *e)
{
    prof_finetune f = {PROF_FT_FULL, 0, 0, 0};
    /* KIND[:N[:TARGETS]] split at its colons */
    char buf[64], *part[3] = {buf, NULL, NULL};
    int np = 1, k = 0;
    long v;
    if (!s || strlen(s) >= sizeof buf) goto bad;
    snprintf(buf, sizeof buf, "%s", s);
    for (char *c = buf; *c; c++)
        if (*c == ':') {
            if (np == 3) goto bad;
            *c = 0;
            part[np++] = c + 1;
        }
    while (k < PROF_FT_COUNT && strcmp(kind_names[k], part[0])) k++;
    if (k == PROF_FT_COUNT) goto bad;
    f.kind = (prof_ft_kind)k;
    if (f.kind == PROF_FT_FULL) {
        if (np > 1) goto bad;
    } else if (f.kind == PROF_FT_FROZEN) {
        if (np != 2 || util_parse_int(part[1], 0, PROF_MAX_LAYERS, &v))
            goto bad;
        f.frozen = (int)v;
    } else {
        if (np < 2 || util_parse_int(part[1], 1, 65536, &v)) goto bad;
        f.rank = (int)v;
        f.targets = f.kind == PROF_FT_QLORA ? PROF_LORA_ALL
                                            : PROF_LORA_Q | PROF_LORA_V;
        if (np == 3 && !parse_targets(part[2], &f.targets)) goto bad;
    }
    *out = f;
    return 0;
bad:
    return util_errf(e, UTIL_EXIT_USAGE,
                     "--finetune '%s': expected full, frozen:N (the "
                     "embedding and the first N blocks frozen), lora:R or "
                     "qlora:R (rank 1..65536), optionally :TARGETS, TARGETS "
                     "joined by '+' from q, k, v, out, gate, up, down, qkv, "
                     "attn, mlp, all (lora:16:attn+mlp)", s ? s : "");
}

const char *prof_finetune_name(const prof_finetune *f, char *buf, size_t n)
{
    if (prof_finetune_full(f)) {
        snprintf(buf, n, "full");
    } else if (f->kind == PROF_FT_FROZEN) {
        snprintf(buf, n, "frozen:%d", f->frozen);
    } else {
        /* the shortest spelling of the targets: a named group when one
         * matches, else the single targets in order */
        char t[48] = "";
        for (int k = N_TARGETS - 1; k >= 0 && !t[0]; k--)
            if (targets[k].bits == f->targets)
                snprintf(t, sizeof t, "%s", targets[k].name);
        if (!t[0])
            for (int k = 0; k < N_SINGLE; k++)
                if (f->targets & targets[k].bits)
                    snprintf(t + strlen(t), sizeof t - strlen(t), "%s%s",
                             t[0] ? "+" : "", targets[k].name);
        snprintf(buf, n, "%s:%d:%s", kind_names[f->kind], f->rank, t);
    }
    return buf;
}

static int is_block(const prof_model *m, int layer)
{
    const prof_layer *l = &m->layers[layer];
    for (int i = l->first_op; i < l->first_op + l->n_ops; i++)
        if (m->ops[i].role == PROF_ROLE_QKV) return 1;
    return 0;
}

/* The weight matrices of linear op o (in a block) that targets t adapt:
 * how many, their outputs' total width, and whether o is a linear LoRA
 * may adapt at all. A fused q|k|v projection holds three, a gated MLP's
 * up projection two (gate, up). */
static int lora_parts(const prof_model *m, const prof_op *o, unsigned t,
                      double *n_out)
{
    const prof_model_spec *s = &m->spec;
    double d = s->head_dim > 0 ? s->head_dim : (double)s->hidden / s->heads;
    double q = s->heads * d, kv = (s->kv_heads > 0 ? s->kv_heads : s->heads)
                                  * d;
    double w[3] = {0, 0, 0};
    unsigned bit[3] = {0, 0, 0};
    int n = 0;
    switch (o->role) {
    case PROF_ROLE_QKV:
        w[0] = q, w[1] = kv, w[2] = kv, n = 3;
        bit[0] = PROF_LORA_Q, bit[1] = PROF_LORA_K, bit[2] = PROF_LORA_V;
        break;
    case PROF_ROLE_Q: w[0] = q, bit[0] = PROF_LORA_Q, n = 1; break;
    case PROF_ROLE_KV:
        w[0] = kv, w[1] = kv, n = 2;
        bit[0] = PROF_LORA_K, bit[1] = PROF_LORA_V;
        break;
    case PROF_ROLE_ATTN_OUT: w[0] = o->gemm[0].n, bit[0] = PROF_LORA_OUT,
                             n = 1; break;
    case PROF_ROLE_MLP_UP:
        if (s->gated_mlp) {
            w[0] = w[1] = o->gemm[0].n / 2, n = 2;
            bit[0] = PROF_LORA_GATE, bit[1] = PROF_LORA_UP;
        } else {
            w[0] = o->gemm[0].n, bit[0] = PROF_LORA_UP, n = 1;
        }
        break;
    case PROF_ROLE_MLP_DOWN: w[0] = o->gemm[0].n, bit[0] = PROF_LORA_DOWN,
                             n = 1; break;
    default: return 0;
    }
    /* widths from the spec, scaled to the GEMM's if they disagree */
    double sum = w[0] + w[1] + w[2];
    int parts = 0;
    *n_out = 0;
    for (int i = 0; i < n; i++)
        if (t & bit[i]) {
            parts++;
            *n_out += sum > 0 ? w[i] * o->gemm[0].n / sum : 0;
        }
    return parts;
}

/* A linear whose weights train needs its input for the weight gradient;
 * frozen (and not adapted), the input gradient needs the weights only. */
static int keeps_input_for_dw(prof_op_role r)
{
    switch (r) {
    case PROF_ROLE_QKV: case PROF_ROLE_Q: case PROF_ROLE_KV:
    case PROF_ROLE_ATTN_OUT: case PROF_ROLE_MLP_UP: case PROF_ROLE_MLP_DOWN:
    case PROF_ROLE_LM_HEAD: case PROF_ROLE_POOLER: case PROF_ROLE_MLM_DENSE:
        return 1;
    default:
        return 0;
    }
}

/* Adds rank-r adapters beside `parts` weight matrices of the linear op o
 * (outputs n_out wide together): x [A1 .. Ap] (k -> p r) as one GEMM,
 * then each B (r -> its width), both trained, the base frozen. */
static void add_adapter(prof_op *o, double r, int parts, double n_out,
                        double e)
{
    const prof_gemm g = o->gemm[0];
    double s = g.m, k = g.k, pr = parts * r;
    double p = pr * k + r * n_out, fl = 2 * s * p;
    o->params += p;
    o->train_params = p;
    o->fwd_flops += fl;
    o->bwd_in_flops += fl;
    o->bwd_w_flops = fl;
    o->bytes_read += p * e + s * pr * e;
    o->bytes_written += s * pr * e;
    o->act_bytes += s * pr * e;     /* x A, for B's weight gradient */
    o->gemm[1] = (prof_gemm){.m = s, .n = pr, .k = k, .batch = 1,
                             .adapter = PROF_ADAPTER_A};
    o->gemm[2] = (prof_gemm){.m = s, .n = n_out, .k = r, .batch = 1,
                             .adapter = PROF_ADAPTER_B};
    o->n_gemm = 3;
}

int prof_model_finetune(prof_model *m, const prof_finetune *f, util_err *e)
{
    if (prof_finetune_full(f)) return 0;
    char nm[64];
    prof_finetune_name(f, nm, sizeof nm);
    if (!prof_finetune_full(&m->ft))
        return util_errf(e, UTIL_EXIT_FAIL, "%s: fine-tuning applied "
                         "twice to %s", nm, m->spec.name);
    int blocks = 0;
    for (int l = 0; l < m->n_layers; l++) blocks += is_block(m, l);
    if (f->kind == PROF_FT_FROZEN && f->frozen > blocks)
        return util_errf(e, UTIL_EXIT_USAGE, "--finetune %s: %s has %d "
                         "blocks", nm, m->spec.name, blocks);
    /* a gate named on its own (not as part of mlp or all) where the MLP
     * has none: a slip that would adapt the rest silently */
    unsigned mlp = PROF_LORA_GATE | PROF_LORA_UP | PROF_LORA_DOWN;
    if ((f->kind == PROF_FT_LORA || f->kind == PROF_FT_QLORA) &&
        (f->targets & PROF_LORA_GATE) && (f->targets & mlp) != mlp &&
        !m->spec.gated_mlp)
        return util_errf(e, UTIL_EXIT_USAGE, "--finetune %s: %s's MLP has "
                         "no gate (it is not gated): adapt up or down", nm,
                         m->spec.name);
    double eb = prof_dtype_bytes(m->spec.dtype);
    /* the last frozen layer (frozen:N), -1 for none; LoRA: all */
    int last_frozen = -1;
    if (f->kind == PROF_FT_FROZEN) {
        for (int l = 0, seen = 0; l < m->n_layers; l++) {
            if (seen == f->frozen) break;
            last_frozen = l;
            seen += is_block(m, l);
        }
    } else {
        last_frozen = m->n_layers - 1;
    }
    int first_train = m->n_ops;
    for (int i = 0; i < m->n_ops; i++) {
        prof_op *o = &m->ops[i];
        int frozen = o->layer <= last_frozen || o->role == PROF_ROLE_EMBED ||
                     o->tied;
        if (!frozen || o->params <= 0) {
            if (o->params > 0 && i < first_train) first_train = i;
            continue;
        }
        o->grad = PROF_GRAD_INPUT;
        o->train_params = 0;
        o->bwd_w_flops = 0;
        for (int g = 0; g < o->n_gemm; g++) o->gemm[g].frozen = 1;
        /* a block's linear: adapted under LoRA, 4-bit under QLoRA */
        int linear = is_block(m, o->layer) && o->kind == PROF_OP_LINEAR &&
                     o->n_gemm == 1;
        double n_out = 0;
        int parts = linear && (f->kind == PROF_FT_LORA ||
                               f->kind == PROF_FT_QLORA)
                    ? lora_parts(m, o, f->targets, &n_out) : 0;
        int quant = linear && f->kind == PROF_FT_QLORA;
        if (quant) {
            /* the weight matrix in 4 bits; a bias stays 16-bit */
            double w = o->gemm[0].k * o->gemm[0].n;
            o->frozen_bytes = w * PROF_NF4_BYTES + (o->params - w) * eb;
            o->dequant_bytes = w * (PROF_NF4_BYTES + eb);
        } else {
            o->frozen_bytes = o->params * eb;
        }
        /* (a ReLU's output the linear reads is still kept: the ReLU's
         * backward reads it and counts nothing of its own for it, but
         * where T5's dropout stands between them) */
        int relu_in = o->n_in > 0 &&
                      m->ops[o->in[0]].role == PROF_ROLE_MLP_ACT &&
                      m->spec.act == PROF_ACT_RELU && !m->spec.gated_mlp &&
                      !(m->spec.family == PROF_FAM_T5 && m->spec.dropout);
        if (!parts && keeps_input_for_dw(o->role) && !relu_in &&
            o->act_bytes >= o->gemm[0].m * o->gemm[0].k * eb)
            o->act_bytes -= o->gemm[0].m * o->gemm[0].k * eb;
        if (parts) {
            add_adapter(o, f->rank, parts, n_out, eb);
            if (i < first_train) first_train = i;
        }
    }
    /* nothing before the first trainable op needs a gradient */
    for (int i = 0; i < first_train; i++) {
        prof_op *o = &m->ops[i];
        o->grad = PROF_GRAD_NONE;
        o->bwd_in_flops = o->bwd_w_flops = 0;
        o->act_bytes = 0;
    }
    if (first_train == m->n_ops)
        return util_errf(e, UTIL_EXIT_USAGE, "--finetune %s: nothing of %s "
                         "would train", nm, m->spec.name);
    prof_model_count_params(m);
    m->ft = *f;
    return 0;
}
