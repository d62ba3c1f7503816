/* Model profiles: published parameter counts, Megatron's FLOP closed forms,
 * Korthikanti's activation count, cuts on chain and non-chain graphs,
 * Hugging Face configs, and the bad-input corpus. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "profiles/profiles.h"
#include "tests/harness.h"

static prof_model *load(const char *name)
{
    util_err e;
    prof_model *m = prof_model_load(name, &e);
    cr_assert_not_null(m, "%s: %s", name, e.msg);
    return m;
}

static void expect_params(const char *name, double published, double tol)
{
    prof_model *m = load(name);
    cr_expect(fabs(m->params - published) <= tol * published,
              "%s: %.0f parameters, published %.0f", name, m->params,
              published);
    prof_model_free(m);
}

Test(model, parameter_counts_match_published)
{
    /* Exact where the architecture is fully known. */
    expect_params("gpt2", 124439808, 0);   /* Hugging Face gpt2 */
    expect_params("gpt2-xl", 1557611200, 0);
    expect_params("t5-3b", 2851598336, 0);
    expect_params("llama2-7b", 6738415616, 0);
    expect_params("opt-1.3b", 1315758080, 0);
    expect_params("llama2-13b", 13015864320, 0);
    expect_params("llama2-70b", 68976648192, 0);
    /* Hugging Face's meta-llama/Meta-Llama-3-8B and -70B */
    expect_params("llama3-8b", 8030261248, 0);
    expect_params("llama3-70b", 70553706496, 0);
    /* BERT's 335,141,888 is the encoder with its pooler; the masked-LM
     * head adds its transform and output bias (0.3%). */
    expect_params("bert-large", 335141888, 0.01);
    expect_params("gpt3-175b", 174.6e9, 0.01);
    expect_params("gpt3-13b", 12.85e9, 0.01);
}

/* Megatron-LM (Narayanan et al., SC'21, eq. 3): training FLOPs per batch
 * of B sequences: 72 B s l h^2 (1 + s/6h + V/12lh); with full
 * recomputation 96 B s l h^2 (1 + s/6h + V/16lh). */
static void expect_megatron(const char *name)
{
    prof_model *m = load(name);
    const prof_model_spec *s = &m->spec;
    double S = s->seq_len, l = s->layers, h = s->hidden, V = s->vocab;
    double plain = 72 * S * l * h * h * (1 + S / (6 * h) + V / (12 * l * h));
    double rec = 96 * S * l * h * h * (1 + S / (6 * h) + V / (16 * l * h));
    double f0 = prof_model_train_flops(m, 0), f1 = prof_model_train_flops(m, 1);
    cr_expect(fabs(f0 / plain - 1) < 0.02, "%s: %.4g vs %.4g", name, f0, plain);
    cr_expect(fabs(f1 / rec - 1) < 0.02, "%s recompute: %.4g vs %.4g", name,
              f1, rec);
    prof_model_free(m);
}

Test(model, training_flops_match_megatron_closed_form)
{
    expect_megatron("gpt2-xl");
    expect_megatron("gpt3-13b");
    expect_megatron("gpt3-175b");
}

Test(model, backward_is_twice_forward_for_linears)
{
    prof_model *m = load("gpt3-13b");
    for (int i = 0; i < m->n_ops; i++) {
        const prof_op *o = &m->ops[i];
        if (o->kind != PROF_OP_LINEAR) continue;
        cr_expect(o->bwd_in_flops > 0 && o->bwd_w_flops > 0, "%s", o->name);
        double g = 2 * o->gemm[0].m * o->gemm[0].n * o->gemm[0].k;
        cr_expect(fabs(o->bwd_in_flops - g) < 1e-9 * g, "%s", o->name);
    }
    prof_model_free(m);
}

/* Korthikanti et al. (arXiv 2205.05198), eq. 1: one GPT layer keeps
 * s b h (34 + 5 a s / h) bytes in half precision with dropout. */
Test(model, activation_bytes_match_korthikanti)
{
    prof_model *m = load("gpt3-13b");
    const prof_model_spec *s = &m->spec;
    double S = s->seq_len, h = s->hidden, a = s->heads;
    const prof_layer *L = &m->layers[1];
    cr_assert_str_eq(L->name, "l0");
    prof_cost c = prof_model_cost(m, L->first_op, L->n_ops);
    double want = S * h * (34 + 5 * a * S / h);
    cr_expect(fabs(c.act_bytes / want - 1) < 1e-9, "%.6g vs %.6g",
              c.act_bytes, want);
    prof_model_free(m);
}

Test(model, cuts_on_a_chain_and_inside_a_layer)
{
    prof_model *m = load("gpt-tiny");
    const prof_model_spec *s = &m->spec;
    double stream = (double)s->seq_len * s->hidden * 4; /* fp32 */
    /* Between layers only the residual stream crosses. */
    for (int l = 0; l + 1 < m->n_layers; l++) {
        const prof_layer *L = &m->layers[l];
        cr_expect_eq(prof_model_cut_bytes(m, L->first_op + L->n_ops - 1),
                     stream, "after %s", L->name);
    }
    /* After the first norm of a layer the stream and the normed copy do. */
    const prof_layer *L1 = &m->layers[1];
    cr_assert_str_eq(m->ops[L1->first_op].name, "l0.attn.norm");
    cr_expect_eq(prof_model_cut_bytes(m, L1->first_op), 2 * stream);
    prof_model_free(m);
}

Test(model, t5_is_not_a_chain)
{
    prof_model *m = load("t5-3b");
    const prof_model_spec *s = &m->spec;
    double enc = (double)s->seq_len * s->hidden * 2;
    double dec = (double)s->dec_seq_len * s->hidden * 2;
    int found = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const prof_layer *L = &m->layers[l];
        if (strcmp(L->name, "dec.l5")) continue;
        found = 1;
        /* Between decoder layers, the decoder stream and the encoder output
         * (read by every later cross-attention) both cross. */
        cr_expect_eq(prof_model_cut_bytes(m, L->first_op + L->n_ops - 1),
                     enc + dec);
        /* The cross-attention's key/value projection reads the encoder. */
        int kv = -1;
        for (int i = L->first_op; i < L->first_op + L->n_ops; i++)
            if (strstr(m->ops[i].name, "xattn.kv")) kv = i;
        cr_assert_geq(kv, 0);
        const prof_op *enc_out = &m->ops[m->ops[kv].in[0]];
        cr_expect_str_eq(enc_out->name, "enc.norm.norm");
    }
    cr_expect(found);
    prof_model_free(m);
}

Test(model, hugging_face_configs)
{
    /* dropout as the configs' rates say: on where one is above 0 (the
     * published models' 0.1), off where all are 0 (the tiny models the
     * tests saved, Llama's attention_dropout 0.0) */
    struct { const char *file; const char *name; double params;
             int dropout; } c[] = {
        {"tests/data/hf/gpt2-xl/config.json", "gpt2-xl", 1557611200, 1},
        {"tests/data/hf/bert-large-uncased/config.json", "bert-large-uncased", 336224058, 1},
        {"tests/data/hf/t5-3b/config.json", "t5-3b", 2851598336, 1},
        {"tests/data/hf/llama-2-7b-hf/config.json", "Llama-2-7b-hf", 6738415616, 0},
        {"tests/data/hf/opt-1.3b/config.json", "opt-1.3b", 1315758080, 1},
        {"tests/data/hf/meta-llama-3-8b/config.json", "meta-llama-3-8b", 8030261248, 0},
        {"tests/data/hf/t5-tiny/config.json", "t5-tiny", -1, 0},
        {"tests/data/hf/gpt2-tiny/config.json", "gpt2-tiny", -1, 0},
        {"tests/data/hf/t5-tiny/v11/config.json", "v11", 65984, 0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        prof_model *m = load(c[i].file);
        if (c[i].params > 0)
            cr_expect_eq(m->params, c[i].params, "%s: %.0f", c[i].file,
                         m->params);
        cr_expect_str_eq(m->spec.name, c[i].name);
        cr_expect_eq(m->spec.dropout, c[i].dropout, "%s: dropout %d",
                     c[i].file, m->spec.dropout);
        /* T5 1.1 trains in bf16 as it was trained (fp16 overflows it) */
        if (strstr(c[i].file, "v11"))
            cr_expect_eq(m->spec.dtype, PROF_DT_BF16);
        prof_model_free(m);
    }
}

/* A zoo entry is the model its published config.json builds: Llama 3's
 * grouped-query attention and 128256-token vocabulary both ways. */
Test(model, zoo_llama3_is_its_hugging_face_config)
{
    prof_model *z = load("llama3-8b");
    prof_model *h = load("tests/data/hf/meta-llama-3-8b/config.json");
    cr_expect_eq(z->params, h->params);
    cr_expect_eq(z->n_ops, h->n_ops);
    cr_expect_eq(z->spec.kv_heads, 8);
    cr_expect_eq(h->spec.kv_heads, 8);
    cr_expect_eq(z->spec.seq_len, h->spec.seq_len);
    cr_expect_eq(prof_model_train_flops(z, 0), prof_model_train_flops(h, 0));
    prof_model_free(z);
    prof_model_free(h);
}

Test(model, every_zoo_model_builds_consistently)
{
    const char *const *n = prof_model_names();
    int count = 0;
    for (; n[count]; count++) {
        prof_model *m = load(n[count]);
        cr_expect_gt(m->n_ops, 0);
        cr_expect_gt(m->params, 0);
        int ops = 0;
        for (int l = 0; l < m->n_layers; l++) {
            cr_expect_eq(m->layers[l].first_op, ops, "%s", n[count]);
            ops += m->layers[l].n_ops;
        }
        cr_expect_eq(ops, m->n_ops);
        for (int i = 0; i < m->n_ops; i++)
            for (int k = 0; k < m->ops[i].n_in; k++)
                cr_expect_lt(m->ops[i].in[k], i, "%s op %s reads a later op",
                             n[count], m->ops[i].name);
        cr_expect_eq(prof_model_cut_bytes(m, m->n_ops - 1), 0);
        prof_model_free(m);
    }
    cr_expect_geq(count, 10);
}

Test(model, unknown_name_lists_known_and_closest)
{
    util_err e;
    prof_model_spec s;
    cr_assert_eq(prof_model_spec_get("t5-3", &s, &e), -1);
    cr_expect(strstr(e.msg, "did you mean 't5-3b'"), "%s", e.msg);
    cr_expect(strstr(e.msg, "gpt3-175b"), "%s", e.msg);
    cr_expect_eq(e.code, 2);
}

/* The bad-input corpus: each file, the exact start of its message. */
Test(model, bad_corpus_is_rejected_with_located_messages)
{
    struct { const char *file, *want; } c[] = {
        {"malformed", "malformed.json:4:17: malformed JSON"},
        {"unknown_field", "unknown_field.json:9:12: field 'hiden': unknown field (did you mean 'hidden'?)"},
        {"missing_field", "missing_field.json:1:1: field 'layers': missing required field"},
        {"wrong_type", "wrong_type.json:6:12: field 'heads': expected an integer, got a string"},
        {"zero_size", "zero_size.json:4:13: field 'hidden': must be > 0"},
        {"negative", "negative.json:7:12: field 'vocab': -5 is out of range"},
        {"heads_divide", "heads_divide.json:6:12: field 'heads': 3 heads do not divide hidden size 100"},
        {"unknown_family", "unknown_family.json:3:13: field 'family': unknown value 'gtp' (did you mean 'gpt'?)"},
        {"seq_too_long", "seq_too_long.json:8:14: field 'seq_len': 2048 is longer than the 1024 learned positions"},
        {"kv_heads", "kv_heads.json:7:15: field 'kv_heads': 3 key-value heads do not divide 8 heads"},
        {"fractional", "fractional.json:5:13: field 'layers': expected an integer, got 2.5"},
        {"hf_unknown_type", "hf_unknown_type.json:2:17: field 'model_type': unsupported model type 'bloom'"},
        {"hf_missing", "hf_missing.json:1:1: field 'n_embd': missing required field"},
        {"hf_heads", "hf_heads.json:5:26: field 'num_attention_heads': 30 heads do not divide hidden size 4096"},
        {"truncated", "truncated.json:5:6: malformed JSON"},
        {"empty", "empty.json:1:0: malformed JSON"},
        {"not_object", "not_object.json:1:1: field '': expected a JSON object"},
        {"bad_dtype", "bad_dtype.json:9:12: field 'dtype': unknown value 'fp8'"},
        {"rope_theta", "rope_theta.json:9:17: field 'rope_theta': 0.5 is too small (must be >= 1)"},
        {"hf_eps", "hf_eps.json:9:19: field 'rms_norm_eps': -1e-06 is not allowed (must be > 0)"},
        {"hf_eps_tiny", "hf_eps_tiny.json:9:19: field 'rms_norm_eps': 1e-310 is too small to compute with"},
        /* a boolean is no size (true was a 1-layer model), a number
         * no flag */
        {"hf_bool_size", "hf_bool_size.json:4:24: field 'num_hidden_layers': expected an integer, got a boolean"},
        {"hf_int_flag", "hf_int_flag.json:9:26: field 'tie_word_embeddings': expected true or false, got a number"},
        /* sizes whose products would overflow, or a partition search
         * never narrow, are named before anything is built */
        {"too_wide", "too_wide.json:4:13: field 'hidden': 1073741824 is wider than sluice takes"},
        {"too_long", "too_long.json:8:14: field 'seq_len': 268435456 tokens are more than sluice takes"},
        {"empty_name", "empty_name.json:2:11: field 'name': empty"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        cli_result r = cli_run("profile validate tests/bad/model/%s.json", c[i].file);
        char want[512];
        snprintf(want, sizeof want, "sluice profile: tests/bad/model/%s", c[i].want);
        cr_expect_eq(r.code, 2, "%s: exit %d", c[i].file, r.code);
        cr_expect(!strncmp(r.err, want, strlen(want)), "%s:\n got: %s want: %s",
                  c[i].file, r.err, want);
        cr_expect(!strstr(r.err, "\n") || strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
                  "%s: one line expected: %s", c[i].file, r.err);
        cli_result_free(&r);
    }
}

Test(model, validate_tells_what_a_file_is)
{
    cli_result r = cli_run("profile validate profiles/hw/gpus.json "
                           "tests/data/hf/t5-3b/config.json profiles/models/gpt2-xl.json");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "valid GPU catalog"), "%s", r.out);
    cr_expect(strstr(r.out, "valid model spec 't5-3b' (t5, 2.85B"), "%s", r.out);
    cr_expect(strstr(r.out, "valid model spec 'gpt2-xl'"), "%s", r.out);
    cli_result_free(&r);
}

Test(model, profile_show_prints_table_and_json)
{
    cli_result r = cli_run("profile show t5-3b");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "parameters 2851598336"), "%s", r.out);
    cr_expect(strstr(r.out, "dec.l23"));
    cli_result_free(&r);
    r = cli_run("profile show t5-3b --json");
    cr_assert_eq(r.code, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    cr_assert_not_null(j, "%s", je.text);
    cr_expect_eq(json_integer_value(json_object_get(j, "params")), 2851598336);
    cr_expect_eq(json_array_size(json_object_get(j, "layers")), 52);
    json_decref(j);
    cli_result_free(&r);
    r = cli_run("profile show gpt-tiny --ops");
    cr_assert_eq(r.code, 0);
    cr_expect(strstr(r.out, "l3.mlp.down"));
    cli_result_free(&r);
    r = cli_run("profile show t5-3c");
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "did you mean 't5-3b'"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("profile show gpt2-xl --seq 4096");
    cr_expect_eq(r.code, 2);
    cli_result_free(&r);
    /* --seq takes what sim and plan take, and says the range (it stopped
     * at 2^20 with 'needs a positive integer' for 2000000) */
    cli_expect(0, "head", "profile show llama-tiny --seq 2000000");
    cli_expect(2, "--seq '16777217': expected a token count in [1, "
               "16777216]", "profile show llama-tiny --seq 16777217");
}

/* Roles are set by the builder, in the graph's order: a GPT layer is
 * norm, qkv, scores, softmax, context, out, residual, norm, up, act, down,
 * residual; every op of every zoo model has one consistent with its kind. */
Test(model, op_roles)
{
    util_err e;
    prof_model *m = prof_model_load("gpt-tiny", &e);
    cr_assert_not_null(m, "%s", e.msg);
    static const prof_op_role layer[] = {
        PROF_ROLE_NORM, PROF_ROLE_QKV, PROF_ROLE_ATTN_SCORES,
        PROF_ROLE_ATTN_SOFTMAX, PROF_ROLE_ATTN_CONTEXT, PROF_ROLE_ATTN_OUT,
        PROF_ROLE_RESIDUAL, PROF_ROLE_NORM, PROF_ROLE_MLP_UP,
        PROF_ROLE_MLP_ACT, PROF_ROLE_MLP_DOWN, PROF_ROLE_RESIDUAL};
    cr_assert_eq(m->ops[0].role, PROF_ROLE_EMBED);
    for (int l = 0; l < 4; l++)
        for (int i = 0; i < 12; i++)
            cr_assert_eq(m->ops[1 + 12 * l + i].role, layer[i], "op %s",
                         m->ops[1 + 12 * l + i].name);
    cr_assert_eq(m->ops[m->n_ops - 3].role, PROF_ROLE_NORM);
    cr_assert_eq(m->ops[m->n_ops - 2].role, PROF_ROLE_LM_HEAD);
    cr_assert_eq(m->ops[m->n_ops - 1].role, PROF_ROLE_LOSS);
    cr_assert_str_eq(prof_op_role_name(PROF_ROLE_ATTN_SOFTMAX),
                     "attn_softmax");
    prof_model_free(m);
    const char *const *n = prof_model_names();
    for (int k = 0; n[k]; k++) {
        m = prof_model_load(n[k], &e);
        cr_assert_not_null(m, "%s", e.msg);
        for (int i = 0; i < m->n_ops; i++) {
            const prof_op *o = &m->ops[i];
            cr_assert(o->role >= 0 && o->role < PROF_ROLE_COUNT);
            int lin = o->role == PROF_ROLE_QKV || o->role == PROF_ROLE_Q ||
                      o->role == PROF_ROLE_KV || o->role == PROF_ROLE_ATTN_OUT ||
                      o->role == PROF_ROLE_MLP_UP ||
                      o->role == PROF_ROLE_MLP_DOWN ||
                      o->role == PROF_ROLE_MLM_DENSE;
            cr_assert_eq(lin, o->kind == PROF_OP_LINEAR, "%s %s", n[k],
                         o->name);
        }
        prof_model_free(m);
    }
}

/* The loss as frameworks compute it: the fp32 cast and the log-softmax's
 * passes (bytes per logit: 22 forward and 26 backward in bf16, 16 and 20
 * in fp32, the fp32 log-probabilities kept; held beyond that while the
 * forward runs, the logits and their fp32 copy, 6 and 4; at the
 * backward's peak 8 beside the log-probabilities, less the input's
 * gradient the walk counts: 6 and 4, as PyTorch measured), or one fused
 * kernel (the logits read once, the gradient written over them). */
Test(model, loss_bytes_as_frameworks_compute_it)
{
    struct { prof_dtype dt; int fused; double fwd, bwd, act, fs, bs; } c[] = {
        {PROF_DT_BF16, 0, 22, 26, 4, 6, 6}, {PROF_DT_FP16, 0, 22, 26, 4, 6, 6},
        {PROF_DT_FP32, 0, 16, 20, 4, 4, 4}, {PROF_DT_BF16, 1, 2, 4, 2, 0, 0},
        {PROF_DT_FP32, 1, 4, 8, 4, 0, 0}};
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        util_err e;
        prof_model_spec s;
        cr_assert_eq(prof_model_spec_get("gpt2", &s, &e), 0, "%s", e.msg);
        s.dtype = c[k].dt;
        s.fused_loss = c[k].fused;
        prof_model *m = prof_model_build(&s, &e);
        cr_assert_not_null(m, "%s", e.msg);
        const prof_op *l = &m->ops[m->n_ops - 1];
        cr_assert_eq(l->role, PROF_ROLE_LOSS);
        double n = (double)s.seq_len * s.vocab;
        /* the per-token loss (and log-sum-exp) aside */
        double fwd = (l->bytes_read + l->bytes_written) / n;
        cr_expect(fabs(fwd - c[k].fwd) < 0.01, "case %zu: %.3f B/logit "
                  "forward, want %g", k, fwd, c[k].fwd);
        cr_expect_float_eq(l->bwd_bytes / n, c[k].bwd, 1e-9, "case %zu", k);
        cr_expect_float_eq(l->act_bytes / n, c[k].act, 1e-9, "case %zu", k);
        cr_expect_float_eq(l->fwd_scratch / n, c[k].fs, 1e-9, "case %zu", k);
        cr_expect_float_eq(l->bwd_scratch / n, c[k].bs, 1e-9, "case %zu", k);
        prof_model_free(m);
    }
}
