/* Model specs: the zoo (the built-in profiles/models files), sluice's own spec
 * format, and Hugging Face config.json files as published beside weights
 * (GPT-2, BERT, T5, Llama/Mistral, OPT). Family defaults fill what a spec
 * leaves out; every value is checked with the file, line, column and field
 * of the offending value. */
#include "profiles/profiles.h"

#include <libgen.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

static const char *const family_names[] = {"gpt", "bert", "t5", "llama",
                                           "opt", NULL};
static const char *const dtype_names[] = {"fp32", "tf32", "fp16", "bf16",
                                          NULL};
static const char *const act_names[] = {"gelu", "relu", "silu", NULL};

const char *prof_family_name(prof_family f)
{
    return f >= 0 && f < PROF_FAM_COUNT ? family_names[f] : "?";
}

/* ---- the zoo ---- */

const char *const *prof_model_names(void)
{
    static const char *names[64];
    if (!names[0]) {
        int n = 0;
        const char *const *all = prof_builtin_list();
        for (int i = 0; all[i] && n < 63; i++) {
            const char *f = all[i];
            size_t l = strlen(f);
            if (strncmp(f, "models/", 7) || l < 13 ||
                strcmp(f + l - 5, ".json"))
                continue;
            static char store[64][48];
            snprintf(store[n], sizeof store[n], "%.*s", (int)(l - 12), f + 7);
            names[n] = store[n];
            n++;
        }
        names[n] = NULL;
    }
    return names;
}

int prof_spec_rope(const prof_model_spec *s)
{
    return s->family != PROF_FAM_T5 && s->family != PROF_FAM_BERT &&
           s->max_pos <= 0;
}

/* ---- family defaults ---- */

static void defaults(prof_model_spec *s)
{
    prof_family f = s->family;
    s->kv_heads = 0;
    s->head_dim = 0;
    s->ffn = 0;
    s->tied_embeddings = f != PROF_FAM_LLAMA;
    s->gated_mlp = f == PROF_FAM_LLAMA;
    s->rmsnorm = f == PROF_FAM_T5 || f == PROF_FAM_LLAMA;
    s->bias = f == PROF_FAM_GPT || f == PROF_FAM_BERT || f == PROF_FAM_OPT;
    s->rel_pos_buckets = f == PROF_FAM_T5 ? 32 : 0;
    s->rel_pos_max_distance = f == PROF_FAM_T5 ? 128 : 0;
    s->pooler = f == PROF_FAM_BERT;
    s->dropout = f != PROF_FAM_LLAMA;
    s->flash_attn = 0;
    s->fused_loss = 0;
    s->tf32 = 0;
    s->act = f == PROF_FAM_LLAMA ? PROF_ACT_SILU
             : (f == PROF_FAM_OPT || f == PROF_FAM_T5) ? PROF_ACT_RELU
                                                       : PROF_ACT_GELU;
    /* Hugging Face's BertConfig says "gelu" and a LayerNorm epsilon of
     * 1e-12, GPT2Config "gelu_new" and 1e-5 */
    s->gelu_erf = f == PROF_FAM_BERT;
    s->act_other = 0;
    s->norm_eps = f == PROF_FAM_BERT ? 1e-12 : f == PROF_FAM_T5 ? 1e-6 : 0;
    s->dtype = f == PROF_FAM_LLAMA ? PROF_DT_BF16 : PROF_DT_FP16;
}

/* Fills derived values that depend on others (after parsing). */
static void derive(prof_model_spec *s)
{
    if (!s->kv_heads) s->kv_heads = s->heads;
    /* Left at 0 when heads do not divide hidden, for the check to name. */
    if (!s->head_dim && s->heads && s->hidden % s->heads == 0)
        s->head_dim = s->hidden / s->heads;
    /* a hidden size too wide is named by the check, not as its ffn */
    if (!s->ffn && s->hidden <= PROF_MAX_WIDTH) s->ffn = 4 * s->hidden;
    if (s->family == PROF_FAM_T5 && !s->dec_seq_len) s->dec_seq_len = 128;
    if (!s->max_pos && (s->family == PROF_FAM_GPT ||
                        s->family == PROF_FAM_BERT ||
                        s->family == PROF_FAM_OPT))
        s->max_pos = s->seq_len;
}

/* The first problem with a spec: *field names it (sluice's field name). */
static int spec_problem(const prof_model_spec *s, const char **field,
                        char *msg, size_t n)
{
#define BAD(f, ...) do { *field = f; snprintf(msg, n, __VA_ARGS__); return 1; } while (0)
    if (s->hidden <= 0) BAD("hidden", "must be > 0");
    if (s->hidden > PROF_MAX_WIDTH)
        BAD("hidden", "%d is wider than sluice takes (%d)", s->hidden,
            PROF_MAX_WIDTH);
    if (s->layers <= 0) BAD("layers", "must be > 0");
    if ((long)s->layers + s->dec_layers > PROF_MAX_LAYERS) {
        /* 12 ops per encoder or decoder-only layer, 20 per T5 decoder
         * layer (cross-attention), as the graph builder makes them */
        double ops = 12.0 * s->layers + 20.0 * s->dec_layers + 6;
        char mem[32];
        BAD(s->layers > PROF_MAX_LAYERS ? "layers" : "dec_layers",
            "%ld layers would make %.0f ops (%s, and a search of hours):"
            " sluice takes at most %d, encoder and decoder together "
            "(DeepNet, the deepest published transformer, has 1000)",
            (long)s->layers + s->dec_layers, ops,
            util_fmt_bytes(ops * (double)(sizeof(prof_op) + sizeof(double)),
                           mem, sizeof mem), PROF_MAX_LAYERS);
    }
    if (s->heads <= 0) BAD("heads", "must be > 0");
    if (s->vocab <= 0) BAD("vocab", "must be > 0");
    if (s->seq_len <= 0) BAD("seq_len", "must be > 0");
    if (s->ffn < 0) BAD("ffn", "must be > 0");
    if (s->head_dim < 0) BAD("head_dim", "must be > 0");
    if (s->kv_heads < 0) BAD("kv_heads", "must be > 0");
    if (s->ffn > PROF_MAX_WIDTH)
        BAD("ffn", "%d is wider than sluice takes (%d)", s->ffn,
            PROF_MAX_WIDTH);
    if (s->heads > PROF_MAX_HEADS)
        BAD("heads", "%d heads are more than sluice takes (%d)", s->heads,
            PROF_MAX_HEADS);
    if (s->head_dim > PROF_MAX_HEADS)
        BAD("head_dim", "%d is wider than sluice takes (%d)", s->head_dim,
            PROF_MAX_HEADS);
    if (s->seq_len > PROF_MAX_SEQ)
        BAD("seq_len", "%d tokens are more than sluice takes (%d)",
            s->seq_len, PROF_MAX_SEQ);
    if (s->dec_seq_len > PROF_MAX_SEQ)
        BAD("dec_seq_len", "%d tokens are more than sluice takes (%d)",
            s->dec_seq_len, PROF_MAX_SEQ);
    if (s->head_dim == 0 && s->hidden % s->heads)
        BAD("heads", "%d heads do not divide hidden size %d", s->heads,
            s->hidden);
    if (s->kv_heads && s->heads % s->kv_heads)
        BAD("kv_heads", "%d key-value heads do not divide %d heads",
            s->kv_heads, s->heads);
    if (s->family == PROF_FAM_T5) {
        if (s->dec_layers <= 0) BAD("dec_layers", "T5 needs decoder layers (> 0)");
        if (s->dec_seq_len < 0) BAD("dec_seq_len", "must be > 0");
    } else {
        if (s->dec_layers) BAD("dec_layers", "only encoder-decoder (t5) models have decoder layers");
        if (s->dec_seq_len) BAD("dec_seq_len", "only encoder-decoder (t5) models have a decoder length");
    }
    if (s->max_pos < 0) BAD("max_pos", "must be >= 0");
    if (s->max_pos && s->seq_len > s->max_pos)
        BAD("seq_len", "%d is longer than the %d learned positions (max_pos)",
            s->seq_len, s->max_pos);
    if (s->type_vocab < 0) BAD("type_vocab", "must be >= 0");
    if (s->rel_pos_buckets < 0) BAD("rel_pos_buckets", "must be >= 0");
    if (s->rel_pos_max_distance < 0 ||
        (s->family == PROF_FAM_T5 && s->rel_pos_max_distance < 1))
        BAD("rel_pos_max_distance", "must be >= 1 (distances from which "
            "one bucket holds them all)");
    if (s->rel_pos_buckets > 1 << 16)
        BAD("rel_pos_buckets", "%d buckets are more than sluice takes "
            "(65536)", s->rel_pos_buckets);
    if (s->family == PROF_FAM_T5 && s->rel_pos_buckets &&
        s->rel_pos_buckets < 4)
        BAD("rel_pos_buckets", "%d: T5's buckets split into two directions "
            "each of exact and logarithmic ones: none, or 4 or more",
            s->rel_pos_buckets);
    if (s->family == PROF_FAM_T5 && s->rel_pos_buckets &&
        s->rel_pos_max_distance <= s->rel_pos_buckets / 2)
        BAD("rel_pos_max_distance", "%d: beyond the exact distances (half "
            "of the %d buckets) the logarithmic ones reach it: it must be "
            "larger", s->rel_pos_max_distance, s->rel_pos_buckets);
    if ((long long)s->heads * s->head_dim > PROF_MAX_WIDTH)
        BAD("head_dim", "heads x head_dim %lld is wider than sluice takes "
            "(%d)", (long long)s->heads * s->head_dim, PROF_MAX_WIDTH);
    if (s->dtype == PROF_DT_TF32) BAD("dtype", "tf32 is a math mode, not a storage type: use fp32 (and \"tf32\": true)");
    if (s->tf32 && s->dtype != PROF_DT_FP32)
        BAD("tf32", "TF32 is the math of fp32 GEMMs; the dtype is %s",
            prof_dtype_name(s->dtype));
    return 0;
#undef BAD
}

int prof_model_spec_check(const prof_model_spec *s, const char *where,
                          util_err *e)
{
    const char *field;
    char msg[256];
    if (!spec_problem(s, &field, msg, sizeof msg)) return 0;
    return util_errf(e, UTIL_EXIT_USAGE, "%s: field '%s': %s", where, field,
                     msg);
}

/* ---- sluice's spec format ---- */

static int geti(const util_jobj *o, const char *k, int req, int *v,
                util_err *e)
{
    long x = *v;
    if (util_jint(o, k, req, 0, 1L << 30, &x, e)) return -1;
    *v = (int)x;
    return 0;
}

static int getb(const util_jobj *o, const char *k, int *v, util_err *e)
{
    return util_jbool(o, k, 0, v, e);
}

static int parse_sluice(const util_jobj *o, prof_model_spec *s, util_err *e)
{
    static const char *const keys[] = {
        "name", "family", "hidden", "layers", "dec_layers", "heads",
        "kv_heads", "head_dim", "ffn", "vocab", "seq_len", "dec_seq_len",
        "max_pos", "type_vocab", "tied_embeddings", "gated_mlp", "rmsnorm",
        "bias", "rel_pos_buckets", "rel_pos_max_distance", "pooler", "dropout", "flash_attn", "fused_loss", "act", "gelu_erf",
        "dtype", "tf32", "batch", "rope_theta", "norm_eps", "source", NULL};
    if (util_jkeys(o, keys, e)) return -1;
    int fam = 0;
    if (util_jenum(o, "family", 1, family_names, &fam, e)) return -1;
    s->family = (prof_family)fam;
    defaults(s);
    if (util_jstr(o, "name", 1, s->name, sizeof s->name, e)) return -1;
    if (!s->name[0])
        return util_jerr(e, o, "name", "empty: the reports and plan files "
                         "name the model by it");
    if (geti(o, "hidden", 1, &s->hidden, e) || geti(o, "layers", 1, &s->layers, e) ||
        geti(o, "dec_layers", 0, &s->dec_layers, e) ||
        geti(o, "heads", 1, &s->heads, e) || geti(o, "kv_heads", 0, &s->kv_heads, e) ||
        geti(o, "head_dim", 0, &s->head_dim, e) || geti(o, "ffn", 0, &s->ffn, e) ||
        geti(o, "vocab", 1, &s->vocab, e) || geti(o, "seq_len", 1, &s->seq_len, e) ||
        geti(o, "dec_seq_len", 0, &s->dec_seq_len, e) ||
        geti(o, "max_pos", 0, &s->max_pos, e) ||
        geti(o, "type_vocab", 0, &s->type_vocab, e) ||
        geti(o, "rel_pos_buckets", 0, &s->rel_pos_buckets, e) ||
        geti(o, "rel_pos_max_distance", 0, &s->rel_pos_max_distance, e) ||
        geti(o, "batch", 0, &s->batch, e))
        return -1;
    if (getb(o, "tied_embeddings", &s->tied_embeddings, e) ||
        getb(o, "gated_mlp", &s->gated_mlp, e) || getb(o, "rmsnorm", &s->rmsnorm, e) ||
        getb(o, "bias", &s->bias, e) || getb(o, "pooler", &s->pooler, e) ||
        getb(o, "dropout", &s->dropout, e) || getb(o, "flash_attn", &s->flash_attn, e) ||
        getb(o, "fused_loss", &s->fused_loss, e) ||
        getb(o, "gelu_erf", &s->gelu_erf, e) ||
        getb(o, "tf32", &s->tf32, e))
        return -1;
    if (util_jnum(o, "rope_theta", 0, 1.0, 1e12, &s->rope_theta, e) ||
        util_jnum(o, "norm_eps", 0, UTIL_POSITIVE, 0.1, &s->norm_eps, e))
        return -1;
    int v = (int)s->act;
    if (util_jenum(o, "act", 0, act_names, &v, e)) return -1;
    s->act = (prof_act)v;
    v = (int)s->dtype;
    if (util_jenum(o, "dtype", 0, dtype_names, &v, e)) return -1;
    s->dtype = (prof_dtype)v;
    if (util_jstr(o, "source", 0, s->source, sizeof s->source, e)) return -1;
    /* Zero counts are impossible values; report them where they stand. */
    static const char *const pos[] = {"hidden", "layers", "heads", "vocab",
                                      "seq_len", "kv_heads", "head_dim",
                                      "ffn", "dec_layers", "dec_seq_len",
                                      "batch", NULL};
    for (int i = 0; pos[i]; i++) {
        json_t *x = json_object_get(o->j, pos[i]);
        if (x && json_number_value(x) <= 0)
            return util_jerr(e, o, pos[i], "must be > 0");
    }
    derive(s);
    const char *field;
    char msg[256];
    if (spec_problem(s, &field, msg, sizeof msg))
        return util_jerr(e, o, field, "%s", msg);
    return 0;
}

/* ---- Hugging Face config.json ---- */

/* One field of an HF config: `key` in the file, `field` in the spec. */
typedef struct hf_map {
    const char *key;
    const char *field;
    int required;
} hf_map;

static int *spec_int(prof_model_spec *s, const char *field)
{
    if (!strcmp(field, "hidden")) return &s->hidden;
    if (!strcmp(field, "layers")) return &s->layers;
    if (!strcmp(field, "dec_layers")) return &s->dec_layers;
    if (!strcmp(field, "heads")) return &s->heads;
    if (!strcmp(field, "kv_heads")) return &s->kv_heads;
    if (!strcmp(field, "head_dim")) return &s->head_dim;
    if (!strcmp(field, "ffn")) return &s->ffn;
    if (!strcmp(field, "vocab")) return &s->vocab;
    if (!strcmp(field, "seq_len")) return &s->seq_len;
    if (!strcmp(field, "max_pos")) return &s->max_pos;
    if (!strcmp(field, "type_vocab")) return &s->type_vocab;
    if (!strcmp(field, "rel_pos_buckets")) return &s->rel_pos_buckets;
    if (!strcmp(field, "rel_pos_max_distance"))
        return &s->rel_pos_max_distance;
    if (!strcmp(field, "tied_embeddings")) return &s->tied_embeddings;
    if (!strcmp(field, "bias")) return &s->bias;
    return NULL;
}

static int hf_fields(const util_jobj *o, const hf_map *m, prof_model_spec *s,
                     util_err *e)
{
    for (; m->key; m++) {
        json_t *v = json_object_get(o->j, m->key);
        if (!v || json_is_null(v)) {
            if (m->required)
                return util_jerr(e, o, m->key, "missing required field");
            continue;
        }
        int *dst = spec_int(s, m->field);
        if (UTIL_NEVER(!dst)) return -1;
        /* the flags take true or false, the sizes integers: a boolean
         * for a size (num_hidden_layers: true) is no count of 1 */
        if (!strcmp(m->field, "tied_embeddings") ||
            !strcmp(m->field, "bias")) {
            if (util_jbool(o, m->key, 1, dst, e)) return -1;
            continue;
        }
        long x;
        if (util_jint(o, m->key, 1, 0, 1L << 30, &x, e)) return -1;
        if (x <= 0 && strcmp(m->field, "type_vocab") &&
            strcmp(m->field, "max_pos"))
            return util_jerr(e, o, m->key, "must be > 0");
        *dst = (int)x;
    }
    return 0;
}

/* The HF key that feeds a spec field, for messages about derived checks. */
static const char *hf_key_of(const hf_map *m, const char *field)
{
    for (; m->key; m++)
        if (!strcmp(m->field, field)) return m->key;
    return field;
}

static int hf_act(const util_jobj *o, const char *key, prof_model_spec *s,
                  util_err *e)
{
    char a[64];
    a[0] = 0;
    json_t *v = json_object_get(o->j, key);
    if (!v || json_is_null(v)) return 0;
    if (util_jstr(o, key, 1, a, sizeof a, e)) return -1;
    if (strstr(a, "gelu")) s->act = PROF_ACT_GELU;
    else if (strstr(a, "relu")) s->act = PROF_ACT_RELU;
    else if (strstr(a, "silu") || strstr(a, "swish")) s->act = PROF_ACT_SILU;
    else return util_jerr(e, o, key, "unsupported activation '%s'", a);
    if (!strncmp(a, "gated-", 6)) s->gated_mlp = 1;
    /* Hugging Face's names: GELU's erf form ("gelu", "gelu_python"), its
     * tanh form ("gelu_new", "gelu_pytorch_tanh", "gelu_fast",
     * "gelu_accurate"), ReLU, SiLU; any other variant ("quick_gelu", the
     * clipped "gelu_10", "relu6", "relu2", "leaky_relu") is priced as its
     * kind and not trained (act_other) */
    static const char *const erf[] = {"gelu", "gelu_python"};
    static const char *const plain[] = {
        "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_accurate",
        "relu", "silu", "swish"};
    const char *b = !strncmp(a, "gated-", 6) ? a + 6 : a;
    s->gelu_erf = 0;
    s->act_other = 1;
    for (size_t k = 0; k < sizeof erf / sizeof *erf; k++)
        if (!strcmp(b, erf[k])) s->gelu_erf = 1, s->act_other = 0;
    for (size_t k = 0; k < sizeof plain / sizeof *plain; k++)
        if (!strcmp(b, plain[k])) s->act_other = 0;
    return 0;
}

/* Dropout where the config gives its rates (keys, NULL-ended): on when
 * any is above 0 (the model graph's one switch prices every dropout of
 * its family); the family's default where it gives none. A tiny model
 * saved for tests with every rate 0 then keeps no masks. */
static int hf_dropout(const util_jobj *o, const char *const *keys,
                      prof_model_spec *s, util_err *e)
{
    int seen = 0, on = 0;
    for (int k = 0; keys[k]; k++) {
        json_t *v = json_object_get(o->j, keys[k]);
        if (!v || json_is_null(v)) continue;
        double p = 0;
        if (util_jnum(o, keys[k], 0, 0.0, 1.0, &p, e)) return -1;
        seen = 1;
        on |= p > 0;
    }
    if (seen) s->dropout = on;
    return 0;
}

static int parse_hf(const util_jobj *o, const char *file, prof_model_spec *s,
                    util_err *e)
{
    static const hf_map gpt2[] = {
        {"n_embd", "hidden", 1}, {"n_layer", "layers", 1},
        {"n_head", "heads", 1}, {"n_inner", "ffn", 0},
        {"vocab_size", "vocab", 1}, {"n_positions", "max_pos", 1},
        {"tie_word_embeddings", "tied_embeddings", 0}, {NULL, NULL, 0}};
    static const hf_map bert[] = {
        {"hidden_size", "hidden", 1}, {"num_hidden_layers", "layers", 1},
        {"num_attention_heads", "heads", 1},
        {"intermediate_size", "ffn", 1}, {"vocab_size", "vocab", 1},
        {"max_position_embeddings", "max_pos", 1},
        {"type_vocab_size", "type_vocab", 0},
        {"tie_word_embeddings", "tied_embeddings", 0}, {NULL, NULL, 0}};
    static const hf_map t5[] = {
        {"d_model", "hidden", 1}, {"num_layers", "layers", 1},
        {"num_decoder_layers", "dec_layers", 0}, {"num_heads", "heads", 1},
        {"d_kv", "head_dim", 1}, {"d_ff", "ffn", 1},
        {"vocab_size", "vocab", 1},
        {"relative_attention_num_buckets", "rel_pos_buckets", 0},
        {"relative_attention_max_distance", "rel_pos_max_distance", 0},
        {"tie_word_embeddings", "tied_embeddings", 0}, {NULL, NULL, 0}};
    static const hf_map llama[] = {
        {"hidden_size", "hidden", 1}, {"num_hidden_layers", "layers", 1},
        {"num_attention_heads", "heads", 1},
        {"num_key_value_heads", "kv_heads", 0}, {"head_dim", "head_dim", 0},
        {"intermediate_size", "ffn", 1}, {"vocab_size", "vocab", 1},
        {"max_position_embeddings", "seq_len", 1},
        {"tie_word_embeddings", "tied_embeddings", 0},
        {"attention_bias", "bias", 0}, {NULL, NULL, 0}};
    static const hf_map opt[] = {
        {"hidden_size", "hidden", 1}, {"num_hidden_layers", "layers", 1},
        {"num_attention_heads", "heads", 1}, {"ffn_dim", "ffn", 1},
        {"vocab_size", "vocab", 1},
        {"max_position_embeddings", "max_pos", 1},
        {"tie_word_embeddings", "tied_embeddings", 0},
        {"enable_bias", "bias", 0}, {NULL, NULL, 0}};
    static const char *const types[] = {"gpt2", "bert", "t5", "llama",
                                        "mistral", "opt", NULL};

    char mt[64] = "";
    json_t *mtv = json_object_get(o->j, "model_type");
    if (mtv) {
        if (util_jstr(o, "model_type", 1, mt, sizeof mt, e)) return -1;
    } else {
        /* Older configs name only the architecture class. */
        json_t *arch = json_object_get(o->j, "architectures");
        const char *a = json_is_array(arch) && json_is_string(json_array_get(arch, 0))
                            ? json_string_value(json_array_get(arch, 0)) : "";
        for (int i = 0; types[i]; i++)
            if (!strncasecmp(a, types[i], strlen(types[i])))
                snprintf(mt, sizeof mt, "%s", types[i]);
    }
    const hf_map *map = NULL;
    if (!strcmp(mt, "gpt2")) { s->family = PROF_FAM_GPT; map = gpt2; }
    else if (!strcmp(mt, "bert")) { s->family = PROF_FAM_BERT; map = bert; }
    else if (!strcmp(mt, "t5")) { s->family = PROF_FAM_T5; map = t5; }
    else if (!strcmp(mt, "llama") || !strcmp(mt, "mistral")) { s->family = PROF_FAM_LLAMA; map = llama; }
    else if (!strcmp(mt, "opt")) { s->family = PROF_FAM_OPT; map = opt; }
    else {
        const char *near = util_closest(mt, types, 6);
        return util_jerr(e, o, "model_type",
                         "unsupported model type '%s'%s%s%s (supported: gpt2, "
                         "bert, t5, llama, mistral, opt)", mt,
                         near ? " (did you mean '" : "", near ? near : "",
                         near ? "'?)" : "");
    }
    defaults(s);
    if (hf_fields(o, map, s, e)) return -1;
    static const char *const drop_gpt2[] = {"resid_pdrop", "embd_pdrop",
                                            "attn_pdrop", NULL};
    static const char *const drop_bert[] = {
        "hidden_dropout_prob", "attention_probs_dropout_prob", NULL};
    static const char *const drop_t5[] = {"dropout_rate", NULL};
    static const char *const drop_llama[] = {"attention_dropout", NULL};
    static const char *const drop_opt[] = {"dropout", "attention_dropout",
                                           "activation_dropout", NULL};
    const char *const *drop = s->family == PROF_FAM_GPT    ? drop_gpt2
                            : s->family == PROF_FAM_BERT   ? drop_bert
                            : s->family == PROF_FAM_T5     ? drop_t5
                            : s->family == PROF_FAM_LLAMA  ? drop_llama
                                                           : drop_opt;
    if (hf_dropout(o, drop, s, e)) return -1;
    switch (s->family) {
    case PROF_FAM_GPT:
        s->seq_len = s->max_pos;
        if (hf_act(o, "activation_function", s, e)) return -1;
        if (util_jnum(o, "layer_norm_epsilon", 0, UTIL_POSITIVE, 0.1,
                      &s->norm_eps, e))
            return -1;
        break;
    case PROF_FAM_BERT:
        s->seq_len = s->max_pos;
        if (hf_act(o, "hidden_act", s, e) ||
            util_jnum(o, "layer_norm_eps", 0, UTIL_POSITIVE, 0.1,
                      &s->norm_eps, e))
            return -1;
        break;
    case PROF_FAM_T5: {
        if (!s->dec_layers) s->dec_layers = s->layers;
        long np = 512;
        if (util_jint(o, "n_positions", 0, 1, 1L << 30, &np, e)) return -1;
        s->seq_len = (int)np;
        if (hf_act(o, "feed_forward_proj", s, e)) return -1;
        /* T5 1.1's "gated-gelu" computes GELU's tanh form (T5Config's
         * gelu_new), which dense_act_fn names where the config has it */
        if (s->gated_mlp && s->act == PROF_ACT_GELU) s->gelu_erf = 0;
        if (hf_act(o, "dense_act_fn", s, e)) return -1;
        /* T5LayerNorm's (an RMSNorm's) epsilon: 1e-6 unless it says */
        if (util_jnum(o, "layer_norm_epsilon", 0, UTIL_POSITIVE, 0.1,
                      &s->norm_eps, e))
            return -1;
        break;
    }
    case PROF_FAM_LLAMA: {
        if (hf_act(o, "hidden_act", s, e)) return -1;
        s->gated_mlp = 1;
        if (util_jnum(o, "rms_norm_eps", 0, UTIL_POSITIVE, 0.1, &s->norm_eps,
                      e) ||
            util_jnum(o, "rope_theta", 0, 1.0, 1e12, &s->rope_theta,
                      e))
            return -1;
        /* transformers 5 keeps RoPE's base and kind in rope_parameters,
         * earlier ones its scaling in rope_scaling */
        static const char *const rk[] = {"rope_parameters", "rope_scaling"};
        for (int k = 0; k < 2; k++) {
            util_jobj r;
            int have = 0;
            json_t *rv = json_object_get(o->j, rk[k]);
            if (!rv || json_is_null(rv)) continue;
            if (util_jchild(o, rk[k], 0, &r, &have, e)) return -1;
            if (!have) continue;
            if (!k && util_jnum(&r, "rope_theta", 0, 1.0, 1e12,
                                &s->rope_theta, e))
                return -1;
            char ty[32] = "default";
            json_t *t = json_object_get(r.j, "rope_type");
            if (!t) t = json_object_get(r.j, "type");
            if (json_is_string(t))
                snprintf(ty, sizeof ty, "%s", json_string_value(t));
            if (strcmp(ty, "default")) s->rope_scaled = 1;
        }
        break;
    }
    case PROF_FAM_OPT: {
        s->seq_len = s->max_pos;
        if (hf_act(o, "activation_function", s, e)) return -1;
        long proj = s->hidden;
        if (util_jint(o, "word_embed_proj_dim", 0, 1, 1L << 30, &proj, e))
            return -1;
        if (proj != s->hidden)
            return util_jerr(e, o, "word_embed_proj_dim",
                             "an embedding projection (%ld != hidden_size %d) "
                             "is not supported", proj, s->hidden);
        /* OPT-350m's norms after each block, the final norm left out, or
         * norms without a weight are other graphs than the one built */
        int pre = 1, drop_final = 0, affine = 1, bias = 1;
        if (util_jbool(o, "do_layer_norm_before", 0, &pre, e) ||
            util_jbool(o, "_remove_final_layer_norm", 0, &drop_final, e) ||
            util_jbool(o, "layer_norm_elementwise_affine", 0, &affine, e) ||
            util_jbool(o, "enable_bias", 0, &bias, e))
            return -1;
        if (!pre)
            return util_jerr(e, o, "do_layer_norm_before", "norms after "
                             "each block are not supported");
        if (drop_final)
            return util_jerr(e, o, "_remove_final_layer_norm", "a decoder "
                             "without its final norm is not supported");
        if (!affine)
            return util_jerr(e, o, "layer_norm_elementwise_affine", "norms "
                             "without a weight and bias are not supported");
        s->bias = bias;
        break;
    }
    default: break;
    }
    /* Training precision: the config's storage type where it is a half
     * type (torch_dtype, or transformers 5's dtype), else the family's
     * mixed-precision default; T5 1.1's (gated) is bf16, as it was
     * trained: it overflows fp16 */
    char td[32] = "";
    json_t *tdv = json_object_get(o->j, "torch_dtype");
    if (!json_is_string(tdv)) tdv = json_object_get(o->j, "dtype");
    if (json_is_string(tdv)) snprintf(td, sizeof td, "%s", json_string_value(tdv));
    if (!strcmp(td, "bfloat16")) s->dtype = PROF_DT_BF16;
    else if (!strcmp(td, "float16")) s->dtype = PROF_DT_FP16;
    else if (s->family == PROF_FAM_T5 && s->gated_mlp)
        s->dtype = PROF_DT_BF16;
    /* Name: the config's own path or the folder holding it. */
    json_t *nm = json_object_get(o->j, "_name_or_path");
    if (json_is_string(nm) && *json_string_value(nm)) {
        const char *n = json_string_value(nm), *slash = strrchr(n, '/');
        snprintf(s->name, sizeof s->name, "%s", slash ? slash + 1 : n);
    } else {
        /* A config.json is named by its folder, as on a model hub. */
        char *c = util_strdup(file), *d = util_strdup(file);
        const char *b = basename(c);
        snprintf(s->name, sizeof s->name, "%s",
                 strcmp(b, "config.json") ? b : basename(dirname(d)));
        free(c);
        free(d);
    }
    snprintf(s->source, sizeof s->source, "Hugging Face config.json: %s", file);
    /* a path may be any bytes, and a cut may split a character: name and
     * source go into JSON reports, which take UTF-8 only */
    util_utf8_fix(s->name);
    util_utf8_fix(s->source);
    derive(s);
    const char *field;
    char msg[256];
    if (spec_problem(s, &field, msg, sizeof msg))
        return util_jerr(e, o, hf_key_of(map, field), "%s", msg);
    return 0;
}

/* Parses a spec document (sluice or HF form, told apart by model_type /
 * architectures, which only HF configs carry). */
static int parse_doc(const util_jdoc *d, prof_model_spec *s, util_err *e)
{
    memset(s, 0, sizeof *s);
    util_jobj root = util_jroot(d);
    if (!json_is_object(root.j))
        return util_jerr(e, &root, NULL, "expected a model spec object");
    if (json_object_get(root.j, "model_type") ||
        json_object_get(root.j, "architectures"))
        return parse_hf(&root, d->file, s, e);
    return parse_sluice(&root, s, e);
}

static int looks_like_file(const char *s)
{
    struct stat st;
    size_t l = strlen(s);
    return strchr(s, '/') || (l > 5 && !strcmp(s + l - 5, ".json")) ||
           stat(s, &st) == 0;
}

int prof_model_spec_get(const char *name, prof_model_spec *out, util_err *e)
{
    util_jdoc d;
    if (looks_like_file(name)) {
        if (util_jdoc_load(&d, name, NULL, e)) return -1;
    } else {
        char rel[128];
        snprintf(rel, sizeof rel, "models/%s.json", name);
        const char *text = prof_builtin(rel);
        if (!text) {
            const char *const *names = prof_model_names();
            size_t n = 0;
            char list[1024] = "";
            for (; names[n]; n++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%s", n ? ", " : "",
                         names[n]);
            }
            const char *near = util_closest(name, names, n);
            if (near)
                return util_errf(e, UTIL_EXIT_USAGE,
                                 "unknown model '%s' (did you mean '%s'?); "
                                 "known models: %s; or give a spec or "
                                 "config.json file", name, near, list);
            return util_errf(e, UTIL_EXIT_USAGE,
                             "unknown model '%s'; known models: %s; or give "
                             "a spec or config.json file", name, list);
        }
        if (util_jdoc_load(&d, rel, text, e)) return -1;
    }
    int r = parse_doc(&d, out, e);
    util_jdoc_free(&d);
    return r;
}

int prof_math_parse(const char *s, int *out, util_err *e)
{
    for (int d = 0; d < PROF_DT_COUNT; d++)
        if (!strcmp(s, dtype_names[d])) {
            *out = 1 + d;
            return 0;
        }
    return util_errf(e, UTIL_EXIT_USAGE, "--dtype '%s': expected fp32, tf32 "
                     "(fp32 with TF32 products), fp16 or bf16", s);
}

const char *prof_math_name(int math)
{
    return math > 0 && math <= PROF_DT_COUNT ? dtype_names[math - 1] : "";
}

void prof_spec_set_math(prof_model_spec *s, int math)
{
    if (math <= 0 || math > PROF_DT_COUNT) return;
    prof_dtype d = (prof_dtype)(math - 1);
    s->tf32 = d == PROF_DT_TF32;
    s->dtype = s->tf32 ? PROF_DT_FP32 : d;
}

int prof_spec_set_seq(prof_model_spec *s, int seq, util_err *e)
{
    if (seq <= 0) return 0;
    if (s->max_pos && seq > s->max_pos)
        return util_errf(e, UTIL_EXIT_USAGE, "%d tokens a sample (--seq): "
                         "%s has %d learned positions (max_pos)", seq,
                         s->name, s->max_pos);
    if (seq > PROF_MAX_SEQ)
        return util_errf(e, UTIL_EXIT_USAGE, "%d tokens a sample (--seq): "
                         "more than sluice takes (%d)", seq, PROF_MAX_SEQ);
    s->seq_len = seq;
    return 0;
}

void prof_spec_set_flash(prof_model_spec *s, int flash)
{
    if (flash) s->flash_attn = flash > 0;
}

prof_model *prof_model_load(const char *name, util_err *e)
{
    prof_model_spec s;
    if (prof_model_spec_get(name, &s, e)) return NULL;
    return prof_model_build(&s, e);
}

/* ---- validation of any profile file ---- */

int prof_json_format_is(const json_t *root, const char *format)
{
    const char *f = json_string_value(json_object_get(root, "format"));
    return f && !strcmp(f, format);
}

int prof_validate_file(const char *path, FILE *out, util_err *e)
{
    util_jdoc d;
    if (util_jdoc_load(&d, path, NULL, e)) return -1;
    util_jobj root = util_jroot(&d);
    int r;
    if (!json_is_object(d.root)) {
        r = util_jerr(e, &root, NULL, "expected a JSON object");
    } else if (json_object_get(d.root, "sluice_plan")) {
        /* what sim and plan --out write: not a profile */
        r = util_jerr(e, &root, "sluice_plan", "a plan, not a profile: "
                      "`sluice sim --plan %s` checks and simulates it, "
                      "`sluice exec --plan %s` runs it", path, path);
    } else if (json_object_get(d.root, "jobs")) {
        r = util_jerr(e, &root, "jobs", "a workload, not a profile: "
                      "`sluice plan --hw ... --workload %s` plans it", path);
    } else if (json_object_get(d.root, "model_type") ||
               json_object_get(d.root, "architectures") ||
               json_object_get(d.root, "family")) {
        prof_model_spec s;
        r = parse_doc(&d, &s, e);
        if (!r) {
            prof_model *m = prof_model_build(&s, e);
            if (!m) r = -1;
            else {
                char c[32];
                fprintf(out, "%s: valid model spec '%s' (%s, %s parameters, "
                        "%d ops)\n", path, s.name, prof_family_name(s.family),
                        util_fmt_count(m->params, c, sizeof c), m->n_ops);
                prof_model_free(m);
            }
        }
    } else if (prof_json_format_is(d.root, "sluice-calibration")) {
        /* what sluice calibrate writes, checked as sim and plan read it */
        util_jdoc_free(&d);
        prof_calib c;
        if (prof_calib_load(path, &c, e)) return -1;
        char mach[300];
        fprintf(out, "%s: valid calibration of '%s' (%s%s, on %s; fit error "
                "%.1f%% median, %.1f%% max over %d microbenchmarks; %d ops "
                "measured)\n", path, c.device, c.date,
                c.quick ? ", --quick" : "",
                prof_machine_str(&c.machine, mach, sizeof mach),
                100 * c.fit_median_err, 100 * c.fit_max_err, c.fit_samples,
                c.n_ops);
        prof_calib_free(&c);
        return 0;
    } else if (prof_json_format_is(d.root, "sluice-gpus")) {
        util_jdoc_free(&d);
        prof_gpu *g = NULL;
        int n = 0;
        if (prof_gpu_catalog_load(path, &g, &n, e)) return -1;
        fprintf(out, "%s: valid GPU catalog (%d GPU types)\n", path, n);
        free(g);
        return 0;
    } else if (json_object_get(d.root, "format") &&
               !prof_json_format_is(d.root, "sluice-server")) {
        /* validate reads every kind of profile: name them all, not only
         * the server the file was taken for */
        const char *f = json_string_value(json_object_get(d.root, "format"));
        r = util_jerr(e, &root, "format", "%s%s%s not a format sluice "
                      "reads (sluice-server: a server; sluice-calibration: "
                      "what sluice calibrate writes; sluice-gpus: a GPU "
                      "catalog)", f ? "'" : "", f ? f : "not a string,",
                      f ? "':" : "");
    } else if (!json_object_get(d.root, "format") &&
               json_object_get(d.root, "machine") &&
               json_object_get(d.root, "fit")) {
        r = util_jerr(e, &root, NULL, "no 'format': a calibration (it has "
                      "'machine' and 'fit') says \"format\": "
                      "\"sluice-calibration\"");
    } else {
        util_jdoc_free(&d);
        prof_topo *t = prof_topo_load(path, e);
        if (!t) return -1;
        fprintf(out, "%s: valid server '%s' (%d GPUs, %d nodes, %d links)\n",
                path, t->name, t->n_gpus, t->n_nodes, t->n_links);
        prof_topo_free(t);
        return 0;
    }
    util_jdoc_free(&d);
    return r;
}
