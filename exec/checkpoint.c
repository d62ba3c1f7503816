/* Checkpoints: a fixed header, the parameter and AdamW arenas, and a
 * checksum, written in one util_write_atomic call (temporary file, fsync,
 * rename), so the file a user names is either the old one or the new one,
 * never half of each. */
#include "exec/exec.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CKPT_MAGIC "SLUICEC1"
#define CKPT_VERSION 6
/* The largest checkpoint read: 256 GiB, 21 billion parameters with their
 * AdamW moments, far past what the CPU trainer runs. */
#define CKPT_MAX_BYTES ((size_t)256 << 30)
/* The most steps a run can have done: --steps takes at most 10^8. */
#define CKPT_MAX_STEP 100000000

/* On-disk header: fixed-width fields, native (little-endian) order. */
typedef struct ckpt_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    int32_t cfg[8];          /* vocab max_pos hidden layers heads ffn bias tied */
    int32_t B, T;
    uint64_t seed;
    int64_t step;
    uint64_t n_params;
    int32_t llama[4];        /* version 2: kv_heads rmsnorm swiglu rope */
    float llama_f[2];        /* version 2: rope_theta norm_eps */
    int32_t opt[2];          /* version 3: relu pos_offset */
    int32_t enc[4];          /* version 4: encoder type_vocab pooler
                              * gelu_erf */
    int32_t t5[5];           /* version 5: t5 dec_layers rel_buckets
                              * rel_max_dist head_dim */
    int32_t run[4];          /* version 6: has steps warmup (0) */
    float run_f[3];          /* version 6: lr weight_decay clip */
    uint64_t data_sum;       /* version 6: FNV-1a 64 of the data */
} ckpt_header;

/* Version 1 (before Llama's choices) ends before llama[]: it is read as
 * GPT-2's (all 0); version 2 (before OPT's) before opt[], read as GELU
 * and positions from row 0. */
#define CKPT_V1_BYTES offsetof(ckpt_header, llama)
#define CKPT_V2_BYTES offsetof(ckpt_header, opt)
/* Version 3 (before BERT's) ends before enc[]: read as a decoder's. */
#define CKPT_V3_BYTES offsetof(ckpt_header, enc)
/* Version 4 (before T5's) ends before t5[]: read as not a T5. */
#define CKPT_V4_BYTES offsetof(ckpt_header, t5)
/* Version 5 (before the run's options) ends after t5[], padded to 8
 * bytes with zeros: run[0] reads 0, none kept. */
#define CKPT_V5_BYTES ((offsetof(ckpt_header, run) + 7) / 8 * 8)

/* t: T5's (a LoRA state's from version 4) */
static void cfg_pack(const exec_gpt_config *c, int32_t *o, int32_t *x,
                     float *f, int32_t *p, int32_t *b, int32_t *t)
{
    if (t) {
        t[0] = c->t5; t[1] = c->dec_layers; t[2] = c->rel_buckets;
        t[3] = c->rel_max_dist; t[4] = c->head_dim;
    }
    b[0] = c->encoder; b[1] = c->type_vocab; b[2] = c->pooler;
    b[3] = c->gelu_erf;
    o[0] = c->vocab; o[1] = c->max_pos; o[2] = c->hidden; o[3] = c->layers;
    o[4] = c->heads; o[5] = c->ffn; o[6] = c->bias; o[7] = c->tied;
    x[0] = c->kv_heads; x[1] = c->rmsnorm; x[2] = c->swiglu;
    x[3] = exec_rope(c);    /* kept on disk; read back from the base */
    f[0] = c->rope_theta; f[1] = c->norm_eps;
    p[0] = c->relu; p[1] = c->pos_offset;
}

static void cfg_unpack(const int32_t *o, const int32_t *x, const float *f,
                       const int32_t *p, const int32_t *b, const int32_t *t,
                       exec_gpt_config *c)
{
    if (t) {
        c->t5 = t[0]; c->dec_layers = t[1]; c->rel_buckets = t[2];
        c->rel_max_dist = t[3]; c->head_dim = t[4];
    }
    c->encoder = b[0]; c->type_vocab = b[1]; c->pooler = b[2];
    c->gelu_erf = b[3];
    c->vocab = o[0]; c->max_pos = o[1]; c->hidden = o[2]; c->layers = o[3];
    c->heads = o[4]; c->ffn = o[5]; c->bias = o[6]; c->tied = o[7];
    c->kv_heads = x[0]; c->rmsnorm = x[1]; c->swiglu = x[2];
    c->rope_theta = f[0]; c->norm_eps = f[1];
    c->relu = p[0]; c->pos_offset = p[1];
    /* the flag and the base disagreeing: no model (the check refuses) */
    if (x[3] != (f[0] > 0)) c->rope_theta = -1;
}

static void cfg_str(const exec_gpt_config *c, char *buf, size_t n)
{
    char norm[48] = "LayerNorm", pos[48] = "learned positions";
    if (c->pos_offset)
        snprintf(pos, sizeof pos, "learned positions from row %d",
                 c->pos_offset);
    if (c->rmsnorm)
        snprintf(norm, sizeof norm, "RMSNorm (eps %g)", (double)c->norm_eps);
    else if (c->norm_eps > 0)
        snprintf(norm, sizeof norm, "LayerNorm (eps %g)",
                 (double)c->norm_eps);
    if (exec_rope(c))
        snprintf(pos, sizeof pos, "RoPE (base %g)", (double)c->rope_theta);
    if (c->t5) snprintf(pos, sizeof pos, "relative positions");
    char kind[96] = "a decoder";
    if (c->t5)
        snprintf(kind, sizeof kind, "an encoder-decoder (T5: %d decoder "
                 "layers, %d buckets to %d, heads of %d)", c->dec_layers,
                 c->rel_buckets, c->rel_max_dist, exec_hs(c));
    else if (c->encoder)
        snprintf(kind, sizeof kind, "an encoder (%d token types, %s)",
                 c->type_vocab, c->pooler ? "a pooler" : "no pooler");
    snprintf(buf, n,
             "%s, hidden %d, layers %d, heads %d, key/value heads %d, "
             "ffn %d, vocab %d, max_pos %d, %s, %s, %s, %s, %s", kind,
             c->hidden, c->layers, c->heads, exec_kv_heads(c), c->ffn,
             c->vocab, c->max_pos, c->bias ? "biases" : "no biases",
             c->tied ? "tied head" : "untied head", norm,
             c->swiglu == 2 ? "GeGLU" : c->swiglu ? "SwiGLU" : c->relu ? "ReLU"
             : c->gelu_erf ? "GELU (erf)" : "GELU", pos);
}

int exec_ckpt_save(const char *path, exec_gpt *m, const exec_ckpt_meta *meta,
                   util_err *e)
{
    exec_ckpt_meta mm = *meta;
    mm.cfg = *exec_gpt_cfg(m);
    return exec_ckpt_save_state(path, exec_gpt_params(m), exec_gpt_adam_m(m),
                                exec_gpt_adam_v(m), &mm, e);
}

/* Writes header hdr (hb bytes), then np arrays of n[k] floats, then the
 * FNV-1a 64 of all that, atomically. */
static int write_sealed(const char *path, const void *hdr, size_t hb,
                        const float *const *part, const size_t *n, int np,
                        util_err *e)
{
    size_t len = hb + sizeof(uint64_t);
    for (int k = 0; k < np; k++) len += n[k] * sizeof(float);
    char *buf = util_malloc(len), *at = buf;
    memcpy(at, hdr, hb);
    at += hb;
    for (int k = 0; k < np; k++) {
        memcpy(at, part[k], n[k] * sizeof(float));
        at += n[k] * sizeof(float);
    }
    uint64_t sum = util_fnv1a(buf, len - sizeof sum, UTIL_FNV_INIT);
    memcpy(at, &sum, sizeof sum);
    int rc = util_write_atomic(path, buf, len, e);
    free(buf);
    return rc;
}

int exec_ckpt_save_state(const char *path, const float *params,
                         const float *adam_m, const float *adam_v,
                         const exec_ckpt_meta *meta, util_err *e)
{
    exec_tensor tt[EXEC_P_COUNT];
    size_t P = exec_gpt_param_table(&meta->cfg, tt);
    ckpt_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CKPT_MAGIC, 8);
    h.version = CKPT_VERSION;
    h.header_bytes = sizeof h;
    cfg_pack(&meta->cfg, h.cfg, h.llama, h.llama_f, h.opt, h.enc, h.t5);
    h.B = meta->B;
    h.T = meta->T;
    h.seed = meta->seed;
    h.step = meta->step;
    h.n_params = P;
    const exec_ckpt_run *u = &meta->run;
    if (u->has) {
        h.run[0] = 1;
        h.run[1] = u->steps;
        h.run[2] = u->warmup;
        h.run_f[0] = u->lr;
        h.run_f[1] = u->weight_decay;
        h.run_f[2] = u->clip;
        h.data_sum = u->data_sum;
    }
    /* params, then m and v (gradients are not state between steps). */
    const float *part[3] = {params, adam_m, adam_v};
    size_t n[3] = {P, P, P};
    if (write_sealed(path, &h, sizeof h, part, n, 3, e))
        return util_err_prefix(e, "checkpoint not saved");
    return 0;
}

/* Reads and validates the whole file; on success *buf holds it. */
static int ckpt_read(const char *path, char **buf, size_t *len,
                     ckpt_header *h, util_err *e)
{
    if (util_read_file_max(path, CKPT_MAX_BYTES, buf, len, e)) {
        e->code = UTIL_EXIT_USAGE;
        return util_err_prefix(e, "checkpoint");
    }
    if (*len < 8 || memcmp(*buf, CKPT_MAGIC, 8)) {
        free(*buf);
        return util_errf(e, UTIL_EXIT_USAGE,
                         "%s: not a sluice checkpoint (no '%s' header)", path,
                         CKPT_MAGIC);
    }
    if (*len < CKPT_V1_BYTES) {
        free(*buf);
        return util_errf(e, UTIL_EXIT_USAGE,
                         "%s: truncated checkpoint (%zu bytes, the header "
                         "alone is %zu)",
                         path, *len, (size_t)CKPT_V1_BYTES);
    }
    memset(h, 0, sizeof *h);
    memcpy(h, *buf, CKPT_V1_BYTES);
    int old = (h->version == 1 && h->header_bytes == CKPT_V1_BYTES) ||
              (h->version == 2 && h->header_bytes == CKPT_V2_BYTES) ||
              (h->version == 3 && h->header_bytes == CKPT_V3_BYTES) ||
              (h->version == 4 && h->header_bytes == CKPT_V4_BYTES) ||
              (h->version == 5 && h->header_bytes == CKPT_V5_BYTES);
    if ((old || h->header_bytes == sizeof *h) && *len >= h->header_bytes)
        memcpy(h, *buf, h->header_bytes);
    /* this version with a header of another size is damage, not a
     * version: said as such (it read "version 6, this sluice reads
     * version 6") */
    if (!old && h->version == CKPT_VERSION && h->header_bytes != sizeof *h) {
        free(*buf);
        return util_errf(e, UTIL_EXIT_USAGE,
                         "%s: corrupt checkpoint header: format version %u "
                         "with a header of %u bytes (version %d's has %zu)",
                         path, h->version, h->header_bytes, CKPT_VERSION,
                         sizeof *h);
    }
    if (!old && (h->version != CKPT_VERSION || h->header_bytes != sizeof *h)) {
        free(*buf);
        return util_errf(e, UTIL_EXIT_USAGE,
                         "%s: checkpoint format version %u, this sluice reads "
                         "version %d",
                         path, h->version, CKPT_VERSION);
    }
    size_t want = h->header_bytes + 3 * (size_t)h->n_params * sizeof(float) +
                  sizeof(uint64_t);
    if (h->n_params > ((size_t)1 << 40) || *len != want) {
        free(*buf);
        return util_errf(e, UTIL_EXIT_USAGE,
                         "%s: %s checkpoint: %zu bytes, a checkpoint of %llu "
                         "parameters has %zu",
                         path, *len < want ? "truncated" : "oversized", *len,
                         (unsigned long long)h->n_params, want);
    }
    uint64_t sum;
    memcpy(&sum, *buf + want - sizeof sum, sizeof sum);
    if (util_fnv1a(*buf, want - sizeof sum, UTIL_FNV_INIT) != sum) {
        free(*buf);
        return util_errf(e, UTIL_EXIT_USAGE,
                         "%s: corrupt checkpoint (checksum mismatch)", path);
    }
    if (h->step < 0 || h->step > CKPT_MAX_STEP) {
        free(*buf);
        return util_errf(e, UTIL_EXIT_USAGE,
                         "%s: implausible checkpoint: step %lld (runs take "
                         "0 to %d steps)", path, (long long)h->step,
                         CKPT_MAX_STEP);
    }
    /* A checksum vouches for the bytes, not for the run that wrote them:
     * weights or moments that are not finite would train on as NaN. */
    static const char *const part[] = {"weight", "AdamW first moment",
                                       "AdamW second moment"};
    const char *body = *buf + h->header_bytes;
    for (size_t i = 0; i < 3 * (size_t)h->n_params; i++) {
        float x;
        memcpy(&x, body + i * sizeof x, sizeof x);
        if (isfinite(x) && (i < 2 * h->n_params || x >= 0)) continue;
        free(*buf);
        return util_errf(e, UTIL_EXIT_USAGE,
                         "%s: unusable checkpoint: %s %zu of %llu is %g (the "
                         "run that saved it diverged; resume from an earlier "
                         "checkpoint)", path, part[i / h->n_params],
                         (size_t)(i % h->n_params),
                         (unsigned long long)h->n_params, (double)x);
    }
    return 0;
}

static void meta_of(const ckpt_header *h, exec_ckpt_meta *meta)
{
    cfg_unpack(h->cfg, h->llama, h->llama_f, h->opt, h->enc, h->t5,
               &meta->cfg);
    meta->B = h->B;
    meta->T = h->T;
    meta->seed = h->seed;
    meta->step = h->step;
    exec_ckpt_run *u = &meta->run;
    memset(u, 0, sizeof *u);
    if (h->version >= 6 && h->run[0]) {
        u->has = 1;
        u->steps = h->run[1];
        u->warmup = h->run[2];
        u->lr = h->run_f[0];
        u->weight_decay = h->run_f[1];
        u->clip = h->run_f[2];
        u->data_sum = h->data_sum;
    }
}

int exec_ckpt_peek(const char *path, exec_ckpt_meta *meta, util_err *e)
{
    char *buf;
    size_t len;
    ckpt_header h;
    if (ckpt_read(path, &buf, &len, &h, e)) return -1;
    free(buf);
    meta_of(&h, meta);
    /* the run's options as the command line takes them */
    const exec_ckpt_run *u = &meta->run;
    int bad_run = u->has && (u->steps < 0 || u->steps > CKPT_MAX_STEP ||
                             u->warmup < -1 || u->warmup > CKPT_MAX_STEP ||
                             !(u->lr >= 0 && u->lr <= 10) ||
                             !(u->weight_decay >= 0 &&
                               u->weight_decay <= 10) ||
                             !(u->clip >= 0 && u->clip <= 1e9));
    if (exec_gpt_config_check(&meta->cfg, e) || meta->B < 1 || meta->T < 1 ||
        (!exec_rope(&meta->cfg) && !meta->cfg.t5 &&
         meta->T > meta->cfg.max_pos) ||
        meta->step < 0 || bad_run) {
        e->code = UTIL_EXIT_USAGE;
        return util_errf(e, UTIL_EXIT_USAGE,
                         "%s: corrupt checkpoint (invalid header values)",
                         path);
    }
    return 0;
}

int exec_ckpt_load(const char *path, exec_gpt *m, exec_ckpt_meta *meta,
                   util_err *e)
{
    return exec_ckpt_load_state(path, exec_gpt_cfg(m), exec_gpt_params(m),
                                exec_gpt_adam_m(m), exec_gpt_adam_v(m), meta,
                                e);
}

/* The error for a checkpoint at path of config have where want was asked
 * for (code 2). */
static int other_model(const char *path, const exec_gpt_config *have,
                       const exec_gpt_config *want, util_err *e)
{
    char a[256], b[256];
    cfg_str(have, a, sizeof a);
    cfg_str(want, b, sizeof b);
    return util_errf(e, UTIL_EXIT_USAGE, "%s: checkpoint of another model "
                     "(%s), the model asked for is %s", path, a, b);
}

int exec_ckpt_load_state(const char *path, const exec_gpt_config *c,
                         float *params, float *adam_m, float *adam_v,
                         exec_ckpt_meta *meta, util_err *e)
{
    char *buf;
    size_t len;
    ckpt_header h;
    if (ckpt_read(path, &buf, &len, &h, e)) return -1;
    meta_of(&h, meta);
    exec_tensor tt[EXEC_P_COUNT];
    size_t P = exec_gpt_param_table(c, tt);
    if (memcmp(&meta->cfg, c, sizeof *c) || h.n_params != P) {
        free(buf);
        return other_model(path, &meta->cfg, c, e);
    }
    memcpy(params, buf + h.header_bytes, P * sizeof(float));
    if (adam_m)
        memcpy(adam_m, buf + h.header_bytes + P * sizeof(float),
               P * sizeof(float));
    if (adam_v)
        memcpy(adam_v, buf + h.header_bytes + 2 * P * sizeof(float),
               P * sizeof(float));
    free(buf);
    return 0;
}

/* ---------------------------------------- a LoRA run's own state */

#define LORA_MAGIC "SLUICEL1"
#define LORA_VERSION 4

typedef struct lora_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    int32_t cfg[8], llama[4];
    float llama_f[2];
    int32_t ft[4];            /* kind rank targets frozen */
    int32_t B, T;
    uint64_t seed;
    int64_t step;
    uint64_t n_params, n_lora;
    int32_t opt[2];           /* version 2: relu pos_offset */
    int32_t enc[4];           /* version 3: encoder type_vocab pooler
                               * gelu_erf */
    int32_t t5[5];            /* version 4: t5 dec_layers rel_buckets
                               * rel_max_dist head_dim */
} lora_header;

/* Version 1 (before OPT's choices) ends before opt[]. */
#define LORA_V1_BYTES offsetof(lora_header, opt)
/* Version 2 (before BERT's) ends before enc[]. */
#define LORA_V2_BYTES offsetof(lora_header, enc)
/* Version 3 (before T5's) ends before t5[]: read as not a T5. */
#define LORA_V3_BYTES offsetof(lora_header, t5)

/* The header of a LoRA state file of len bytes into *h: 0, or 1 (not
 * one: no magic), 2 (another version), 3 (a version this sluice reads
 * with a header of another size), 4 (cut inside its header). */
static int lora_header_read(const char *buf, size_t len, lora_header *h)
{
    if (len < 8 || memcmp(buf, LORA_MAGIC, 8)) return 1;
    if (len < LORA_V1_BYTES) return 4;
    memset(h, 0, sizeof *h);
    memcpy(h, buf, LORA_V1_BYTES);
    static const size_t bytes[LORA_VERSION + 1] = {
        0, LORA_V1_BYTES, LORA_V2_BYTES, LORA_V3_BYTES, sizeof(lora_header)};
    if (h->version < 1 || h->version > LORA_VERSION) return 2;
    if (h->header_bytes != bytes[h->version]) return 3;
    if (len < h->header_bytes) return 4;
    memcpy(h, buf, h->header_bytes);
    return 0;
}

/* What lora_header_read's code bad says of path. */
static int lora_header_err(const char *path, int bad, const lora_header *h,
                           util_err *e)
{
    if (bad == 1)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: not a LoRA run's state "
                         "(no '%s' header)", path, LORA_MAGIC);
    if (bad == 2)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: LoRA state format version "
                         "%u, this sluice reads versions 1 to %d", path,
                         h->version, LORA_VERSION);
    if (bad == 3)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: corrupt LoRA state (a "
                         "version %u header of %u bytes)", path, h->version,
                         h->header_bytes);
    return util_errf(e, UTIL_EXIT_USAGE, "%s: truncated LoRA state (cut "
                     "inside its header)", path);
}

void exec_lora_ckpt_path(const char *ckpt, char *out, size_t n)
{
    snprintf(out, n, "%s.lora", ckpt);
}

double exec_ckpt_bytes(size_t P, size_t NL)
{
    double b = sizeof(ckpt_header) + sizeof(uint64_t) + 12.0 * (double)P;
    if (NL)
        b += sizeof(lora_header) + sizeof(uint64_t) +
             4.0 * ((double)P + 3.0 * (double)NL);
    return b;
}

int exec_lora_ckpt_save(const char *path, const exec_ckpt_meta *meta,
                        const prof_finetune *ft, const float *base,
                        const float *lora, const float *lm, const float *lv,
                        size_t NL, util_err *e)
{
    exec_tensor tt[EXEC_P_COUNT];
    size_t P = exec_gpt_param_table(&meta->cfg, tt);
    lora_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, LORA_MAGIC, 8);
    h.version = LORA_VERSION;
    h.header_bytes = sizeof h;
    cfg_pack(&meta->cfg, h.cfg, h.llama, h.llama_f, h.opt, h.enc, h.t5);
    h.ft[0] = ft->kind;
    h.ft[1] = ft->rank;
    h.ft[2] = (int32_t)ft->targets;
    h.ft[3] = ft->frozen;
    h.B = meta->B;
    h.T = meta->T;
    h.seed = meta->seed;
    h.step = meta->step;
    h.n_params = P;
    h.n_lora = NL;
    const float *part[4] = {base, lora, lm, lv};
    size_t n[4] = {P, NL, NL, NL};
    if (write_sealed(path, &h, sizeof h, part, n, 4, e))
        return util_err_prefix(e, "LoRA state not saved");
    return 0;
}

int exec_lora_ckpt_peek(const char *path, exec_ckpt_meta *meta,
                        prof_finetune *ft, util_err *e)
{
    char *buf;
    size_t len;
    if (util_read_file_max(path, CKPT_MAX_BYTES, &buf, &len, e)) {
        e->code = UTIL_EXIT_USAGE;
        return util_err_prefix(e, "a LoRA run's state");
    }
    lora_header h;
    int bad = lora_header_read(buf, len, &h);
    free(buf);
    if (bad) return lora_header_err(path, bad, &h, e);
    memset(meta, 0, sizeof *meta);
    cfg_unpack(h.cfg, h.llama, h.llama_f, h.opt, h.enc, h.t5, &meta->cfg);
    meta->B = h.B;
    meta->T = h.T;
    meta->seed = h.seed;
    meta->step = h.step;
    memset(ft, 0, sizeof *ft);
    int kind_ok = h.ft[0] == PROF_FT_LORA || h.ft[0] == PROF_FT_QLORA;
    ft->kind = kind_ok ? (prof_ft_kind)h.ft[0] : PROF_FT_LORA;
    ft->rank = h.ft[1];
    ft->targets = (unsigned)h.ft[2];
    ft->frozen = h.ft[3];
    util_err ce;
    if (!kind_ok || ft->rank < 1 || ft->rank > 65536 || !ft->targets ||
        (ft->targets & ~(unsigned)PROF_LORA_ALL) ||
        exec_gpt_config_check(&meta->cfg, &ce) || meta->B < 1 ||
        meta->T < 1 || meta->step < 0 || meta->step > CKPT_MAX_STEP)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: corrupt LoRA state "
                         "(invalid header values)", path);
    return 0;
}

int exec_ckpt_not_lora(const char *ckpt, const exec_ckpt_meta *meta,
                       const char *what, util_err *e)
{
    char lp[4096], ft[64];
    exec_lora_ckpt_path(ckpt, lp, sizeof lp);
    exec_ckpt_meta lm;
    prof_finetune lft;
    util_err pe;
    if (access(lp, F_OK) || exec_lora_ckpt_peek(lp, &lm, &lft, &pe) ||
        lm.step != meta->step || lm.seed != meta->seed || lm.B != meta->B ||
        lm.T != meta->T)
        return 0;
    prof_finetune_name(&lft, ft, sizeof ft);
    return util_errf(e, UTIL_EXIT_USAGE, "--resume %s: a %s run saved it "
                     "(its adapters merged into the weights, its own state "
                     "in %s), and this run trains %s: resume with a %s plan, "
                     "or start from its weights with --init", ckpt, ft, lp,
                     what, ft);
}

int exec_lora_ckpt_missing(const char *ckpt, const exec_gpt_config *c,
                           const char *what, util_err *e)
{
    char lp[4096];
    exec_lora_ckpt_path(ckpt, lp, sizeof lp);
    if (!access(lp, F_OK)) return 0;
    exec_ckpt_meta m;
    if (exec_ckpt_peek(ckpt, &m, e)) return -1;
    if (memcmp(&m.cfg, c, sizeof *c)) return other_model(ckpt, &m.cfg, c, e);
    /* (a checkpoint does not say whether a LoRA run merged it) */
    return util_errf(e, UTIL_EXIT_USAGE, "--resume %s: no LoRA state lies "
                     "beside it (%s, which --save writes beside a LoRA or "
                     "QLoRA run's checkpoint), and this run trains %s; a "
                     "checkpoint of a run that trained its weights starts a "
                     "fine-tuning with --init %s", ckpt, lp, what, ckpt);
}

int exec_lora_ckpt_load(const char *path, const exec_gpt_config *c,
                        const prof_finetune *ft, float *base, float *lora,
                        float *lm, float *lv, size_t NL,
                        exec_ckpt_meta *meta, util_err *e)
{
    char *buf;
    size_t len;
    if (util_read_file_max(path, CKPT_MAX_BYTES, &buf, &len, e)) {
        e->code = UTIL_EXIT_USAGE;
        return util_err_prefix(e, "a LoRA run's state (written beside its "
                               "checkpoint by --save)");
    }
    lora_header h;
    int rc = -1;
    int bad = lora_header_read(buf, len, &h);
    if (bad) {
        lora_header_err(path, bad, &h, e);
        goto out;
    }
    exec_tensor tt[EXEC_P_COUNT];
    size_t P = exec_gpt_param_table(c, tt);
    exec_gpt_config hc;
    memset(&hc, 0, sizeof hc);
    cfg_unpack(h.cfg, h.llama, h.llama_f, h.opt, h.enc, h.t5, &hc);
    if (memcmp(&hc, c, sizeof hc) || h.n_params != P || h.n_lora != NL ||
        h.ft[0] != (int32_t)ft->kind || h.ft[1] != ft->rank ||
        h.ft[2] != (int32_t)ft->targets || h.ft[3] != ft->frozen) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: the LoRA state of another model "
                  "or fine-tuning mode (resume with the plan that saved it)",
                  path);
        goto out;
    }
    size_t want = h.header_bytes + (P + 3 * NL) * sizeof(float) +
                  sizeof(uint64_t);
    uint64_t sum;
    if (len != want) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: %s LoRA state: %zu bytes, that "
                  "of this model and mode has %zu", path,
                  len < want ? "truncated" : "oversized", len, want);
        goto out;
    }
    memcpy(&sum, buf + want - sizeof sum, sizeof sum);
    if (util_fnv1a(buf, want - sizeof sum, UTIL_FNV_INIT) != sum) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: corrupt LoRA state (checksum "
                  "mismatch)", path);
        goto out;
    }
    if (h.step < 0 || h.step > CKPT_MAX_STEP) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: implausible step %lld", path,
                  (long long)h.step);
        goto out;
    }
    const char *at = buf + h.header_bytes;
    float *part[4] = {base, lora, lm, lv};
    size_t n[4] = {P, NL, NL, NL};
    static const char *const what[4] = {"base weight", "adapter weight",
                                        "adapter first moment",
                                        "adapter second moment"};
    for (int k = 0; k < 4; k++) {
        memcpy(part[k], at, n[k] * sizeof(float));
        at += n[k] * sizeof(float);
        for (size_t i = 0; i < n[k]; i++)
            if (!isfinite(part[k][i]) || (k == 3 && part[k][i] < 0)) {
                util_errf(e, UTIL_EXIT_USAGE, "%s: unusable LoRA state: %s "
                          "%zu is %g", path, what[k], i,
                          (double)part[k][i]);
                goto out;
            }
    }
    meta->cfg = hc;
    meta->B = h.B;
    meta->T = h.T;
    meta->seed = h.seed;
    meta->step = h.step;
    rc = 0;
out:
    free(buf);
    return rc;
}
