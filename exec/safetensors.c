/* Hugging Face safetensors for GPT-2, Llama, OPT, BERT and T5: an 8-byte little-endian
 * header length, a JSON header (per tensor: dtype, shape, data_offsets
 * into the data that follows), then the raw tensors. GPT-2's projections
 * are Conv1D layers whose weight is (in x out); the kernels multiply by
 * (out x in), so they are transposed on the way in. Llama's are Linear
 * layers, (out x in) already: q, k and v are stacked into the fused
 * projection's rows, gate and up into the MLP's. Hugging Face's Llama
 * pairs RoPE's channels as the kernels do (i with i + hs/2). OPT's are
 * Linear layers too, stacked as Llama's; so are BERT's (q, k and v its
 * attention's self.query, key and value). Tensors are
 * read one at a time (a 124M-parameter file is 0.5 GB). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"

typedef struct st_file {
    const char *path;
    FILE *f;
    long long data0, size;
    json_t *hdr;
    const char *prefix;      /* "" or "transformer." */
    const char *family;      /* whose names the loader reads */
    const char *head;        /* an untied head's name (without the prefix);
                              * NULL: "lm_head.weight" */
} st_file;

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, ex = (h >> 10) & 31,
             man = h & 1023, bits;
    if (ex == 0) {
        if (!man) {
            bits = sign;
        } else { /* subnormal: normalise */
            ex = 127 - 15 + 1;
            while (!(man & 1024)) { man <<= 1; ex--; }
            bits = sign | (ex << 23) | ((man & 1023) << 13);
        }
    } else if (ex == 31) {
        bits = sign | 0x7F800000u | (man << 13);
    } else {
        bits = sign | ((ex - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Reads tensor `name` (with the file's prefix) of exactly `want` elements
 * of shape rows x cols (cols 0: one dimension) into out as floats. */
static int read_tensor(st_file *s, const char *name, size_t rows, size_t cols,
                       float *out, util_err *e)
{
    char key[160];
    snprintf(key, sizeof key, "%s%s", s->prefix, name);
    json_t *t = json_object_get(s->hdr, key);
    if (!t) t = json_object_get(s->hdr, name);
    /* BERT's files as Google's checkpoints were converted (the Hub's
     * bert-base-uncased and bert-large-uncased) name a LayerNorm's weight
     * and bias gamma and beta, which transformers renames on load */
    size_t nl = strlen(name);
    int is_w = nl > 7 && !strcmp(name + nl - 7, ".weight"),
        is_b = nl > 5 && !strcmp(name + nl - 5, ".bias");
    int old_names = strstr(name, "LayerNorm.") && (is_w || is_b);
    if (!t && old_names) {
        char old[160];
        int stem = (int)(nl - (is_w ? 7 : 5));
        const char *as = is_w ? "gamma" : "beta";
        snprintf(old, sizeof old, "%s%.*s.%s", s->prefix, stem, name, as);
        t = json_object_get(s->hdr, old);
        if (t) snprintf(key, sizeof key, "%s", old);
        snprintf(old, sizeof old, "%.*s.%s", stem, name, as);
        if (!t && (t = json_object_get(s->hdr, old)))
            snprintf(key, sizeof key, "%s", old);
    }
    if (!json_is_object(t))
        return util_errf(e, UTIL_EXIT_USAGE, "%s: no tensor '%s'%s (is this "
                         "a %s checkpoint?)", s->path, key,
                         old_names ? " nor its gamma or beta" : "",
                         s->family);
    const char *dt = json_string_value(json_object_get(t, "dtype"));
    json_t *shape = json_object_get(t, "shape");
    json_t *offs = json_object_get(t, "data_offsets");
    int es = !dt ? 0 : !strcmp(dt, "F32") ? 4 : !strcmp(dt, "F16") ? 2
           : !strcmp(dt, "BF16") ? 2 : 0;
    if (!es)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: tensor '%s' has dtype %s "
                         "(F32, F16 or BF16 are read)", s->path, key,
                         dt ? dt : "(none)");
    size_t want[2] = {rows, cols};
    size_t nd = cols ? 2 : 1, n = 1;
    if (!json_is_array(shape) || json_array_size(shape) != nd)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: tensor '%s' has %zu "
                         "dimensions, the model needs %zu", s->path, key,
                         json_is_array(shape) ? json_array_size(shape) : 0,
                         nd);
    for (size_t i = 0; i < nd; i++) {
        json_int_t v = json_integer_value(json_array_get(shape, i));
        if ((size_t)v != want[i] || v < 0)
            return util_errf(e, UTIL_EXIT_USAGE, "%s: tensor '%s' dimension "
                             "%zu is %lld, the model needs %zu (another "
                             "model's weights?)", s->path, key, i,
                             (long long)v, want[i]);
        n *= want[i];
    }
    json_int_t b0 = json_integer_value(json_array_get(offs, 0));
    json_int_t b1 = json_integer_value(json_array_get(offs, 1));
    /* the bounds first: no sum or difference of them may overflow */
    if (!json_is_array(offs) || b0 < 0 || b1 < b0 || b1 > s->size ||
        b1 - b0 != (json_int_t)(n * es) || s->data0 + b1 > s->size)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: tensor '%s': data_offsets "
                         "[%lld, %lld] do not hold %zu %s values in a file "
                         "of %lld bytes", s->path, key, (long long)b0,
                         (long long)b1, n, dt, s->size);
    unsigned char *raw = util_malloc(n * (size_t)es + 1);
    if (fseeko(s->f, (off_t)(s->data0 + b0), SEEK_SET) ||
        fread(raw, (size_t)es, n, s->f) != n) {
        free(raw);
        return util_errf(e, UTIL_EXIT_USAGE, "%s: cannot read tensor '%s'",
                         s->path, key);
    }
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = raw + i * (size_t)es;
        if (es == 4) {
            memcpy(&out[i], b, 4);
        } else if (!strcmp(dt, "F16")) {
            out[i] = half_to_float((uint16_t)(b[0] | b[1] << 8));
        } else {
            uint32_t bits = (uint32_t)(b[0] | b[1] << 8) << 16;
            memcpy(&out[i], &bits, 4);
        }
        if (!isfinite(out[i])) {
            free(raw);
            return util_errf(e, UTIL_EXIT_USAGE, "%s: tensor '%s' holds "
                             "%s at element %zu: not weights to train "
                             "from", s->path, key,
                             isnan(out[i]) ? "NaN" : "an infinity", i);
        }
    }
    free(raw);
    return 0;
}

/* A Conv1D weight (in x out) into the kernels' (out x in). */
static int read_conv(st_file *s, const char *name, size_t in, size_t out,
                     float *dst, util_err *e)
{
    float *tmp = util_malloc(sizeof *tmp * (in * out + 1));
    int rc = read_tensor(s, name, in, out, tmp, e);
    if (!rc)
        for (size_t i = 0; i < in; i++)
            for (size_t o = 0; o < out; o++) dst[o * in + i] = tmp[i * out + o];
    free(tmp);
    return rc;
}

/* An untied head: its own tensor (s->head, "lm_head.weight" by default,
 * without the file's prefix) where the file has one, else the token table
 * it was tied to. */
static int untied_head(st_file *s, const exec_gpt_config *c, float *params,
                       const exec_tensor *tt, util_err *e)
{
    if (c->tied) return 0;
    size_t V = c->vocab, C = c->hidden;
    float *head = params + tt[EXEC_P_LMW].off;
    const char *name = s->head ? s->head : "lm_head.weight";
    if (!json_object_get(s->hdr, name)) {
        memcpy(head, params + tt[EXEC_P_WTE].off, sizeof(float) * V * C);
        return 0;
    }
    const char *pf = s->prefix;
    s->prefix = "";
    int rc = read_tensor(s, name, V, C, head, e);
    s->prefix = pf;
    return rc;
}

/* A tensor as the file names it and where it goes: floats `at` into
 * tensor t of the arena, of each layer's slice where `layer` (the name
 * then follows the layer's number: t's floats split evenly over the
 * layers); rows x cols (cols 0: one dimension), or a Conv1D's in x out,
 * transposed. */
typedef struct st_map {
    const char *name;
    int t;
    size_t rows, cols, at;
    int conv, layer;
} st_map;

/* Reads the n tensors of map: the model's once, then layer by layer the
 * layers' (stack: their names' start, before the number). */
static int read_map(st_file *s, const exec_gpt_config *c, const char *stack,
                    const st_map *map, int n, float *params, util_err *e)
{
    exec_tensor tt[EXEC_P_COUNT];
    exec_gpt_param_table(c, tt);
    for (int l = -1; l < c->layers; l++)
        for (int i = 0; i < n; i++) {
            const st_map *m = &map[i];
            if (m->layer != (l >= 0)) continue;
            char name[96];
            if (l >= 0)
                snprintf(name, sizeof name, "%s%d.%s", stack, l, m->name);
            else
                snprintf(name, sizeof name, "%s", m->name);
            float *dst = params + tt[m->t].off + m->at +
                         (l >= 0 ? (size_t)l * (tt[m->t].n / (size_t)c->layers)
                                 : 0);
            if (m->conv ? read_conv(s, name, m->rows, m->cols, dst, e)
                        : read_tensor(s, name, m->rows, m->cols, dst, e))
                return -1;
        }
    return untied_head(s, c, params, tt, e);
}

#define N_MAP(m) ((int)(sizeof m / sizeof *m))

/* Hugging Face's LlamaForCausalLM ("model." names; lm_head alone). */
static int load_llama(st_file *s, const exec_gpt_config *c, float *params,
                      util_err *e)
{
    if (c->bias || !exec_rope(c) || !c->rmsnorm || !c->swiglu)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: Llama weights (RoPE, "
                         "RMSNorm, SwiGLU, no biases); the model is not "
                         "Llama's", s->path);
    size_t C = c->hidden, F = c->ffn, V = c->vocab, QKV = exec_qkv_rows(c),
           KV = (QKV - C) / 2;
    s->prefix = "model.";
    s->family = "Llama";
    const st_map m[] = {
        {"embed_tokens.weight", EXEC_P_WTE, V, C, 0, 0, 0},
        {"norm.weight", EXEC_P_LNFW, C, 0, 0, 0, 0},
        {"input_layernorm.weight", EXEC_P_LN1W, C, 0, 0, 0, 1},
        {"self_attn.q_proj.weight", EXEC_P_QKVW, C, C, 0, 0, 1},
        {"self_attn.k_proj.weight", EXEC_P_QKVW, KV, C, C * C, 0, 1},
        {"self_attn.v_proj.weight", EXEC_P_QKVW, KV, C, (C + KV) * C, 0, 1},
        {"self_attn.o_proj.weight", EXEC_P_ATTPROJW, C, C, 0, 0, 1},
        {"post_attention_layernorm.weight", EXEC_P_LN2W, C, 0, 0, 0, 1},
        {"mlp.gate_proj.weight", EXEC_P_FCW, F, C, 0, 0, 1},
        {"mlp.up_proj.weight", EXEC_P_FCW, F, C, F * C, 0, 1},
        {"mlp.down_proj.weight", EXEC_P_FCPROJW, C, F, 0, 0, 1}};
    return read_map(s, c, "layers.", m, N_MAP(m), params, e);
}

/* Hugging Face's OPTForCausalLM ("model.decoder." names: q, k and v
 * projections of their own, the position table's two leading rows, the
 * head tied to the token table). */
static int load_opt(st_file *s, const exec_gpt_config *c, float *params,
                    util_err *e)
{
    if (!c->bias || exec_rope(c) || c->rmsnorm || c->swiglu || c->kv_heads ||
        !c->relu || c->pos_offset != 2)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: OPT weights (learned "
                         "positions from row 2, LayerNorm, ReLU, biases); "
                         "the model is not OPT's", s->path);
    size_t C = c->hidden, F = c->ffn, V = c->vocab,
           P = (size_t)c->max_pos + (size_t)c->pos_offset;
    s->prefix = "model.decoder.";
    s->family = "OPT";
    const st_map m[] = {
        {"embed_tokens.weight", EXEC_P_WTE, V, C, 0, 0, 0},
        {"embed_positions.weight", EXEC_P_WPE, P, C, 0, 0, 0},
        {"final_layer_norm.weight", EXEC_P_LNFW, C, 0, 0, 0, 0},
        {"final_layer_norm.bias", EXEC_P_LNFB, C, 0, 0, 0, 0},
        {"self_attn_layer_norm.weight", EXEC_P_LN1W, C, 0, 0, 0, 1},
        {"self_attn_layer_norm.bias", EXEC_P_LN1B, C, 0, 0, 0, 1},
        {"self_attn.q_proj.weight", EXEC_P_QKVW, C, C, 0, 0, 1},
        {"self_attn.k_proj.weight", EXEC_P_QKVW, C, C, C * C, 0, 1},
        {"self_attn.v_proj.weight", EXEC_P_QKVW, C, C, 2 * C * C, 0, 1},
        {"self_attn.q_proj.bias", EXEC_P_QKVB, C, 0, 0, 0, 1},
        {"self_attn.k_proj.bias", EXEC_P_QKVB, C, 0, C, 0, 1},
        {"self_attn.v_proj.bias", EXEC_P_QKVB, C, 0, 2 * C, 0, 1},
        {"self_attn.out_proj.weight", EXEC_P_ATTPROJW, C, C, 0, 0, 1},
        {"self_attn.out_proj.bias", EXEC_P_ATTPROJB, C, 0, 0, 0, 1},
        {"final_layer_norm.weight", EXEC_P_LN2W, C, 0, 0, 0, 1},
        {"final_layer_norm.bias", EXEC_P_LN2B, C, 0, 0, 0, 1},
        {"fc1.weight", EXEC_P_FCW, F, C, 0, 0, 1},
        {"fc1.bias", EXEC_P_FCB, F, 0, 0, 0, 1},
        {"fc2.weight", EXEC_P_FCPROJW, C, F, 0, 0, 1},
        {"fc2.bias", EXEC_P_FCPROJB, C, 0, 0, 0, 1}};
    return read_map(s, c, "layers.", m, N_MAP(m), params, e);
}

/* Hugging Face's GPT2LMHeadModel ("transformer." names where the file
 * has them; Conv1D projections). */
static int load_gpt2(st_file *s, const exec_gpt_config *c, float *params,
                     util_err *e)
{
    if (!c->bias || exec_rope(c) || c->rmsnorm || c->swiglu || c->kv_heads ||
        c->relu || c->pos_offset)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: GPT-2 weights (learned "
                         "positions, LayerNorm, GELU, biases); the model is "
                         "not GPT-2's", s->path);
    if (json_object_get(s->hdr, "transformer.wte.weight"))
        s->prefix = "transformer.";
    s->family = "GPT-2";
    size_t C = c->hidden, F = c->ffn, V = c->vocab, P = c->max_pos;
    const st_map m[] = {
        {"wte.weight", EXEC_P_WTE, V, C, 0, 0, 0},
        {"wpe.weight", EXEC_P_WPE, P, C, 0, 0, 0},
        {"ln_f.weight", EXEC_P_LNFW, C, 0, 0, 0, 0},
        {"ln_f.bias", EXEC_P_LNFB, C, 0, 0, 0, 0},
        {"ln_1.weight", EXEC_P_LN1W, C, 0, 0, 0, 1},
        {"ln_1.bias", EXEC_P_LN1B, C, 0, 0, 0, 1},
        {"attn.c_attn.weight", EXEC_P_QKVW, C, 3 * C, 0, 1, 1},
        {"attn.c_attn.bias", EXEC_P_QKVB, 3 * C, 0, 0, 0, 1},
        {"attn.c_proj.weight", EXEC_P_ATTPROJW, C, C, 0, 1, 1},
        {"attn.c_proj.bias", EXEC_P_ATTPROJB, C, 0, 0, 0, 1},
        {"ln_2.weight", EXEC_P_LN2W, C, 0, 0, 0, 1},
        {"ln_2.bias", EXEC_P_LN2B, C, 0, 0, 0, 1},
        {"mlp.c_fc.weight", EXEC_P_FCW, C, F, 0, 1, 1},
        {"mlp.c_fc.bias", EXEC_P_FCB, F, 0, 0, 0, 1},
        {"mlp.c_proj.weight", EXEC_P_FCPROJW, F, C, 0, 1, 1},
        {"mlp.c_proj.bias", EXEC_P_FCPROJB, C, 0, 0, 0, 1}};
    return read_map(s, c, "h.", m, N_MAP(m), params, e);
}

/* Hugging Face's BertForPreTraining or BertForMaskedLM ("bert." names for
 * the encoder where the file has them, "cls.predictions." for the
 * masked-LM head; q, k and v stacked into the fused projection's rows;
 * the decoder tied to the token table, or its own
 * "cls.predictions.decoder.weight"). A file without the pooler (a
 * BertForMaskedLM's) leaves the seed's: no loss reads it. */
static int load_bert(st_file *s, const exec_gpt_config *c, float *params,
                     util_err *e)
{
    if (!c->encoder || !c->bias || exec_rope(c) || c->rmsnorm ||
        c->swiglu || c->kv_heads || c->pos_offset)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: BERT weights (an encoder: "
                         "learned positions, LayerNorm, biases); the model "
                         "is not BERT's", s->path);
    if (json_object_get(s->hdr, "bert.embeddings.word_embeddings.weight"))
        s->prefix = "bert.";
    s->family = "BERT";
    size_t C = c->hidden, F = c->ffn, V = c->vocab, P = c->max_pos,
           TV = (size_t)c->type_vocab;
    st_map m[32];
    int n = 0;
#define BERT_MAP(nm, t, r, cl, at, layer) \
    m[n++] = (st_map){nm, t, r, cl, at, 0, layer}
    BERT_MAP("embeddings.word_embeddings.weight", EXEC_P_WTE, V, C, 0, 0);
    BERT_MAP("embeddings.position_embeddings.weight", EXEC_P_WPE, P, C, 0, 0);
    if (TV)
        BERT_MAP("embeddings.token_type_embeddings.weight", EXEC_P_WTT, TV,
                 C, 0, 0);
    BERT_MAP("embeddings.LayerNorm.weight", EXEC_P_LNEW, C, 0, 0, 0);
    BERT_MAP("embeddings.LayerNorm.bias", EXEC_P_LNEB, C, 0, 0, 0);
    BERT_MAP("cls.predictions.transform.dense.weight", EXEC_P_MLMW, C, C, 0,
             0);
    BERT_MAP("cls.predictions.transform.dense.bias", EXEC_P_MLMB, C, 0, 0, 0);
    BERT_MAP("cls.predictions.transform.LayerNorm.weight", EXEC_P_LNFW, C, 0,
             0, 0);
    BERT_MAP("cls.predictions.transform.LayerNorm.bias", EXEC_P_LNFB, C, 0,
             0, 0);
    BERT_MAP("cls.predictions.bias", EXEC_P_LMB, V, 0, 0, 0);
    BERT_MAP("attention.self.query.weight", EXEC_P_QKVW, C, C, 0, 1);
    BERT_MAP("attention.self.key.weight", EXEC_P_QKVW, C, C, C * C, 1);
    BERT_MAP("attention.self.value.weight", EXEC_P_QKVW, C, C, 2 * C * C, 1);
    BERT_MAP("attention.self.query.bias", EXEC_P_QKVB, C, 0, 0, 1);
    BERT_MAP("attention.self.key.bias", EXEC_P_QKVB, C, 0, C, 1);
    BERT_MAP("attention.self.value.bias", EXEC_P_QKVB, C, 0, 2 * C, 1);
    BERT_MAP("attention.output.dense.weight", EXEC_P_ATTPROJW, C, C, 0, 1);
    BERT_MAP("attention.output.dense.bias", EXEC_P_ATTPROJB, C, 0, 0, 1);
    BERT_MAP("attention.output.LayerNorm.weight", EXEC_P_LN1W, C, 0, 0, 1);
    BERT_MAP("attention.output.LayerNorm.bias", EXEC_P_LN1B, C, 0, 0, 1);
    BERT_MAP("intermediate.dense.weight", EXEC_P_FCW, F, C, 0, 1);
    BERT_MAP("intermediate.dense.bias", EXEC_P_FCB, F, 0, 0, 1);
    BERT_MAP("output.dense.weight", EXEC_P_FCPROJW, C, F, 0, 1);
    BERT_MAP("output.dense.bias", EXEC_P_FCPROJB, C, 0, 0, 1);
    BERT_MAP("output.LayerNorm.weight", EXEC_P_LN2W, C, 0, 0, 1);
    BERT_MAP("output.LayerNorm.bias", EXEC_P_LN2B, C, 0, 0, 1);
    char pooler[64];
    snprintf(pooler, sizeof pooler, "%spooler.dense.weight", s->prefix);
    if (c->pooler && json_object_get(s->hdr, pooler)) {
        BERT_MAP("pooler.dense.weight", EXEC_P_POOLW, C, C, 0, 0);
        BERT_MAP("pooler.dense.bias", EXEC_P_POOLB, C, 0, 0, 0);
    }
#undef BERT_MAP
    s->head = "cls.predictions.decoder.weight";
    return read_map(s, c, "encoder.layer.", m, n, params, e);
}

/* Hugging Face's T5ForConditionalGeneration (T5 1.0: the token table
 * "shared", encoder.block.L and decoder.block.L with q, k and v of their
 * own, stacked into the fused projection's rows, the cross-attention's k
 * and v into its k | v; each stack's relative-position table in its
 * block 0; the decoder's layers after the encoder's in the per-layer
 * tensors). A tied head has no tensor of its own. */
static int load_t5(st_file *s, const exec_gpt_config *c, float *params,
                   util_err *e)
{
    if (!c->t5)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: T5 weights (an encoder-"
                         "decoder); the model is not a T5", s->path);
    s->family = "T5";
    exec_tensor tt[EXEC_P_COUNT];
    exec_gpt_param_table(c, tt);
    size_t C = c->hidden, F = c->ffn, V = c->vocab, D = exec_inner(c),
           NB = (size_t)c->rel_buckets, NH = (size_t)c->heads,
           QKV = exec_qkv_rows(c);
    int Le = c->layers;
    char n[128];
#define T5_AT(t, at) (params + tt[t].off + (at))
#define T5_READ(rows, cols, dst, ...)                                       \
    do {                                                                    \
        snprintf(n, sizeof n, __VA_ARGS__);                                 \
        if (read_tensor(s, n, rows, cols, dst, e)) return -1;               \
    } while (0)
    T5_READ(V, C, T5_AT(EXEC_P_WTE, 0), "shared.weight");
    T5_READ(C, 0, T5_AT(EXEC_P_ENCNW, 0), "encoder.final_layer_norm.weight");
    T5_READ(C, 0, T5_AT(EXEC_P_LNFW, 0), "decoder.final_layer_norm.weight");
    /* T5 1.1's head of its own */
    if (!c->tied) T5_READ(V, C, T5_AT(EXEC_P_LMW, 0), "lm_head.weight");
    if (NB) {
        T5_READ(NB, NH, T5_AT(EXEC_P_RELE, 0), "encoder.block.0.layer.0."
                "SelfAttention.relative_attention_bias.weight");
        T5_READ(NB, NH, T5_AT(EXEC_P_RELD, 0), "decoder.block.0.layer.0."
                "SelfAttention.relative_attention_bias.weight");
    }
    static const char *const qkv[3] = {"q", "k", "v"};
    for (int l = 0; l < Le + c->dec_layers; l++) {
        int dec = l >= Le, b = dec ? l - Le : l;
        const char *st = dec ? "decoder" : "encoder";
        for (int k = 0; k < 3; k++)
            T5_READ(D, C, T5_AT(EXEC_P_QKVW, (l * QKV + k * D) * C),
                    "%s.block.%d.layer.0.SelfAttention.%s.weight", st, b,
                    qkv[k]);
        T5_READ(C, D, T5_AT(EXEC_P_ATTPROJW, l * C * D),
                "%s.block.%d.layer.0.SelfAttention.o.weight", st, b);
        T5_READ(C, 0, T5_AT(EXEC_P_LN1W, l * C),
                "%s.block.%d.layer.0.layer_norm.weight", st, b);
        int f = dec ? 2 : 1;   /* the MLP's sublayer */
        size_t FC = exec_fc_rows(c);
        if (c->swiglu) /* T5 1.1's GeGLU: wi_0 the gate, wi_1 the up */
            for (int k = 0; k < 2; k++)
                T5_READ(F, C, T5_AT(EXEC_P_FCW, (l * FC + k * F) * C),
                        "%s.block.%d.layer.%d.DenseReluDense.wi_%d.weight",
                        st, b, f, k);
        else
            T5_READ(F, C, T5_AT(EXEC_P_FCW, l * F * C),
                    "%s.block.%d.layer.%d.DenseReluDense.wi.weight", st, b,
                    f);
        T5_READ(C, F, T5_AT(EXEC_P_FCPROJW, l * C * F),
                "%s.block.%d.layer.%d.DenseReluDense.wo.weight", st, b, f);
        T5_READ(C, 0, T5_AT(EXEC_P_LN2W, l * C),
                "%s.block.%d.layer.%d.layer_norm.weight", st, b, f);
        if (!dec) continue;
        T5_READ(D, C, T5_AT(EXEC_P_XQW, b * D * C),
                "decoder.block.%d.layer.1.EncDecAttention.q.weight", b);
        for (int k = 1; k < 3; k++)
            T5_READ(D, C, T5_AT(EXEC_P_XKVW, (2 * b + k - 1) * D * C),
                    "decoder.block.%d.layer.1.EncDecAttention.%s.weight", b,
                    qkv[k]);
        T5_READ(C, D, T5_AT(EXEC_P_XOW, b * C * D),
                "decoder.block.%d.layer.1.EncDecAttention.o.weight", b);
        T5_READ(C, 0, T5_AT(EXEC_P_XLNW, b * C),
                "decoder.block.%d.layer.1.layer_norm.weight", b);
    }
#undef T5_READ
#undef T5_AT
    return 0;
}

int exec_safetensors_load(const char *path, const exec_gpt_config *c,
                          float *params, util_err *e)
{
    const uint16_t one = 1;
    if (*(const unsigned char *)&one != 1)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: safetensors are "
                         "little-endian; this machine is not", path);
    st_file s = {.path = path, .prefix = ""};
    /* a pipe or a device would block the open or never end */
    size_t sz;
    int fd = util_open_regular(path, SIZE_MAX, &sz, e);
    if (fd < 0) return -1;
    s.f = fdopen(fd, "rb");
    if (!s.f) {
        close(fd);
        return util_errf(e, UTIL_EXIT_USAGE, "%s: %s", path, strerror(errno));
    }
    int rc = -1;
    unsigned char lb[8];
    char *hdr = NULL;
    if (fseeko(s.f, 0, SEEK_END) || (s.size = ftello(s.f)) < 8 ||
        fseeko(s.f, 0, SEEK_SET) || fread(lb, 1, 8, s.f) != 8) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: not a safetensors file (too "
                  "short, or not a regular file)", path);
        goto out;
    }
    unsigned long long hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | lb[i];
    if (hl < 2 || hl > 100000000ull || (long long)hl + 8 > s.size) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: not a safetensors file (header "
                  "length %llu in a file of %lld bytes)", path, hl, s.size);
        goto out;
    }
    hdr = util_malloc(hl + 1);
    if (fread(hdr, 1, hl, s.f) != hl) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: truncated header", path);
        goto out;
    }
    json_error_t je;
    s.hdr = json_loadb(hdr, hl, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(s.hdr)) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: header: %s (line %d, column %d)",
                  path, s.hdr ? "not a JSON object" : je.text, je.line,
                  je.column);
        goto out;
    }
    s.data0 = 8 + (long long)hl;
    if (c->t5 || json_object_get(s.hdr, "shared.weight")) {
        rc = load_t5(&s, c, params, e);
        goto out;
    }
    if (c->encoder || json_object_get(s.hdr, "cls.predictions.bias")) {
        rc = load_bert(&s, c, params, e);
        goto out;
    }
    if (json_object_get(s.hdr, "model.embed_tokens.weight")) {
        rc = load_llama(&s, c, params, e);
        goto out;
    }
    if (json_object_get(s.hdr, "model.decoder.embed_tokens.weight")) {
        rc = load_opt(&s, c, params, e);
        goto out;
    }
    rc = load_gpt2(&s, c, params, e);
out:
    json_decref(s.hdr);
    free(hdr);
    fclose(s.f);
    return rc;
}
