/* exec model: the whole GPT's (and BERT's) backward against finite
 * differences of its forward, tensor by tensor, and the memory estimate
 * against the arenas. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "tests/harness.h"

static uint64_t st = 88172645463325252ull;
static double unit(void)
{
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return (double)(st >> 11) / 9007199254740992.0;
}

/* Directional derivatives: for each parameter tensor, d = its gradient
 * (normalised) and a random direction; the backward's g.d must match the
 * central difference (L(p + h d) - L(p - h d)) / 2h of the fp32 forward.
 * h = 1e-2 along a unit direction: the loss (~3.5) carries fp32 rounding
 * of ~4e-7 relative, so the difference is good to ~1e-4 absolute; the
 * tolerance is 2e-3 + 2% of the derivative. A single wrong term in any
 * backward (a missed residual, a transposed GEMM) fails this by far.
 * An encoder's targets are a masked LM's: most are -1 (none). A tensor
 * no loss reads (BERT's pooler) has a zero gradient, and the loss does
 * not move along a random direction of it. */
static void grad_check(const exec_gpt_config *c, int B, int T)
{
    exec_gpt *m = exec_gpt_new(c, B, T, 7);
    int N = B * T;
    int *tok = malloc(N * sizeof *tok), *tgt = malloc(N * sizeof *tgt);
    for (int i = 0; i < N; i++) {
        tok[i] = (int)(unit() * c->vocab) % c->vocab;
        tgt[i] = (int)(unit() * c->vocab) % c->vocab;
        if (c->encoder && i % 3) tgt[i] = -1;
    }
    /* Move away from the initialisation (biases 0, norms 1) so every
     * tensor matters: a few random perturbations of all parameters. */
    float *p = exec_gpt_params(m);
    size_t P = exec_gpt_num_params(m);
    for (size_t i = 0; i < P; i++) p[i] += (float)(0.05 * (unit() - 0.5));
    exec_gpt_forward(m, tok, tgt);
    exec_gpt_zero_grad(m);
    exec_gpt_backward(m);
    float *g = exec_gpt_grads(m);
    int nt;
    const exec_tensor *ts = exec_gpt_tensors(m, &nt);
    float *save = malloc(P * sizeof *save);
    memcpy(save, p, P * sizeof *save);
    for (int k = 0; k < nt; k++) {
        const exec_tensor *t = &ts[k];
        if (!t->n) continue;
        double *d = malloc(t->n * sizeof *d);
        int unread = c->pooler && (k == EXEC_P_POOLW || k == EXEC_P_POOLB);
        for (int dir = unread; dir < 2; dir++) {
            double norm = 0;
            for (size_t i = 0; i < t->n; i++) {
                d[i] = dir == 0 ? g[t->off + i] : unit() - 0.5;
                norm += d[i] * d[i];
                if (unread)
                    cr_assert_eq(g[t->off + i], 0.0f, "%s: a gradient",
                                 t->name);
            }
            norm = sqrt(norm);
            cr_assert(norm > 0, "%s: zero gradient", t->name);
            double gd = 0;
            for (size_t i = 0; i < t->n; i++) {
                d[i] /= norm;
                gd += g[t->off + i] * d[i];
            }
            const double h = 1e-2;
            for (size_t i = 0; i < t->n; i++)
                p[t->off + i] = (float)(save[t->off + i] + h * d[i]);
            double lp = exec_gpt_forward(m, tok, tgt);
            for (size_t i = 0; i < t->n; i++)
                p[t->off + i] = (float)(save[t->off + i] - h * d[i]);
            double lm = exec_gpt_forward(m, tok, tgt);
            memcpy(p + t->off, save + t->off, t->n * sizeof *p);
            double fd = (lp - lm) / (2 * h);
            cr_assert(fabs(fd - gd) <= 2e-3 + 0.02 * fabs(fd),
                      "%s (%s direction): backward %.6g, finite difference "
                      "%.6g",
                      t->name, dir ? "random" : "gradient", gd, fd);
        }
        free(d);
    }
    free(save);
    free(tok);
    free(tgt);
    exec_gpt_free(m);
}

Test(exec_model, gradients_tied_with_biases)
{
    exec_gpt_config c = {.vocab = 23, .max_pos = 9, .hidden = 16,
                         .layers = 2, .heads = 2, .ffn = 24, .bias = 1,
                         .tied = 1};
    grad_check(&c, 2, 7);
}

Test(exec_model, gradients_untied_no_bias)
{
    exec_gpt_config c = {.vocab = 17, .max_pos = 8, .hidden = 12,
                         .layers = 3, .heads = 3, .ffn = 20, .bias = 0,
                         .tied = 0};
    grad_check(&c, 3, 8);
}

Test(exec_model, gradients_bert_encoder)
{
    /* post-LayerNorm layers, bidirectional attention, token types, the
     * embeddings' LayerNorm, the head's transform and the decoder's bias,
     * the loss over the masked tokens; the pooler read by no loss */
    exec_gpt_config c = {.vocab = 23, .max_pos = 9, .hidden = 16,
                         .layers = 2, .heads = 2, .ffn = 24, .bias = 1,
                         .tied = 1, .encoder = 1, .type_vocab = 2,
                         .pooler = 1, .gelu_erf = 1, .norm_eps = 1e-12f};
    grad_check(&c, 2, 7);
    exec_gpt_config u = {.vocab = 19, .max_pos = 8, .hidden = 12,
                         .layers = 3, .heads = 3, .ffn = 20, .bias = 0,
                         .tied = 0, .encoder = 1, .type_vocab = 1,
                         .relu = 1};
    grad_check(&u, 3, 8);
}

Test(exec_model, mem_need_counts_gpt2_params)
{
    /* GPT-2 small's 124.4M parameters (Radford et al. 2019; 124,439,808
     * with the 1024-row position table and tied head). */
    exec_gpt_config c = {.vocab = 50257, .max_pos = 1024, .hidden = 768,
                         .layers = 12, .heads = 12, .ffn = 3072, .bias = 1,
                         .tied = 1};
    exec_gpt_mem m = exec_gpt_mem_need(&c, 1, 64);
    cr_assert_eq(m.params, 124439808u);
    cr_assert_eq(m.param_bytes, 16.0 * 124439808);
}

Test(exec_model, config_from_spec_rejects_what_it_cannot_train)
{
    prof_model_spec s;
    memset(&s, 0, sizeof s);
    s.family = PROF_FAM_T5;
    s.hidden = 64; s.layers = 2; s.heads = 4; s.ffn = 128; s.vocab = 256;
    s.max_pos = 32;
    exec_gpt_config c;
    util_err e;
    /* a T5 trains as T5 1.0 is: RMSNorm, no biases, no position table,
     * a ReLU or GELU MLP */
    cr_assert_eq(exec_gpt_config_from_spec(&s, &c, "x.json", &e), -1);
    cr_assert_eq(e.code, 2);
    cr_assert(strstr(e.msg, "x.json") && strstr(e.msg, "T5 with LayerNorm"),
              "%s", e.msg);
    s.rmsnorm = 1;
    s.bias = 1;
    cr_assert_eq(exec_gpt_config_from_spec(&s, &c, "x.json", &e), -1);
    cr_assert(strstr(e.msg, "T5 with biases"), "%s", e.msg);
    s.bias = 0;
    s.gated_mlp = 1;
    cr_assert_eq(exec_gpt_config_from_spec(&s, &c, "x.json", &e), -1);
    cr_assert(strstr(e.msg, "GeGLU"), "%s", e.msg);
    s.gated_mlp = 0;
    s.dec_layers = 3;
    s.rel_pos_buckets = 32;
    s.rel_pos_max_distance = 128;
    s.norm_eps = 1e-6;
    s.head_dim = 32;     /* heads wider than hidden / heads, as T5-3B's */
    cr_assert_eq(exec_gpt_config_from_spec(&s, &c, "x.json", &e), 0, "%s",
                 e.msg);
    cr_assert(c.t5 && c.dec_layers == 3 && c.rel_buckets == 32 &&
              c.rel_max_dist == 128 && c.head_dim == 32 && !c.max_pos &&
              exec_inner(&c) == 128 && exec_qkv_rows(&c) == 384);
    /* buckets too few to hold an exact and a logarithmic half */
    c.rel_buckets = 2;
    cr_assert_eq(exec_gpt_config_check(&c, &e), -1);
    memset(&s, 0, sizeof s);
    s.family = PROF_FAM_T5;
    s.hidden = 64; s.layers = 2; s.heads = 4; s.ffn = 128; s.vocab = 256;
    /* Llama's choices train; a gated GELU (T5 v1.1's) does not */
    s.family = PROF_FAM_LLAMA;
    s.rmsnorm = s.gated_mlp = 1;
    s.act = PROF_ACT_GELU;
    cr_assert_eq(exec_gpt_config_from_spec(&s, &c, "x.json", &e), -1);
    cr_assert(strstr(e.msg, "SwiGLU"), "%s", e.msg);
    s.act = PROF_ACT_SILU;
    s.max_pos = 0;
    s.kv_heads = 3;
    cr_assert_eq(exec_gpt_config_from_spec(&s, &c, "x.json", &e), -1);
    cr_assert(strstr(e.msg, "key and value heads (3) must divide heads (4)"),
              "%s", e.msg);
    s.kv_heads = 2;
    s.rope_scaled = 1;    /* Llama 3.1's scaled RoPE: not the kernels' */
    cr_assert_eq(exec_gpt_config_from_spec(&s, &c, "x.json", &e), -1);
    cr_assert(strstr(e.msg, "RoPE with a scaling"), "%s", e.msg);
    s.rope_scaled = 0;
    cr_assert_eq(exec_gpt_config_from_spec(&s, &c, "x.json", &e), 0, "%s",
                 e.msg);
    cr_expect(c.rope_theta == 10000.0f && c.norm_eps == 1e-5f);
    cr_assert(exec_rope(&c) && c.rmsnorm && c.swiglu && c.kv_heads == 2 &&
              c.max_pos == 0);
    cr_assert_eq(exec_qkv_rows(&c), 64 + 2 * 2 * 16);
    cr_assert_eq(exec_fc_rows(&c), 256);
    s.family = PROF_FAM_GPT;
    s.rmsnorm = s.gated_mlp = s.kv_heads = 0;
    s.act = PROF_ACT_GELU;
    s.max_pos = 32;
    s.heads = 5;
    cr_assert_eq(exec_gpt_config_from_spec(&s, &c, "x.json", &e), -1);
    cr_assert(strstr(e.msg, "divide"), "%s", e.msg);
    s.heads = 4;
    /* a variant the kernels do not compute (quick_gelu) */
    s.act_other = 1;
    cr_assert_eq(exec_gpt_config_from_spec(&s, &c, "x.json", &e), -1);
    cr_assert(strstr(e.msg, "an activation of the GELU kind"), "%s", e.msg);
    s.act_other = 0;
    s.bias = 1;
    s.tied_embeddings = 1;
    cr_assert_eq(exec_gpt_config_from_spec(&s, &c, "x.json", &e), 0);
    cr_assert_eq(c.hidden, 64);
    cr_assert_eq(c.tied, 1);
    cr_assert(!exec_rope(&c) && !c.rmsnorm && !c.swiglu &&
              !exec_qkv_expands(&c));
}

/* A Hugging Face config's activation by its name: GELU's erf and tanh
 * forms train as such; a variant the kernels do not compute is priced as
 * its kind (the spec reads) and refused by the executor, naming it. */
Test(exec_model, hugging_face_activations_by_name)
{
    static const struct { const char *act; int erf, other; } cases[] = {
        {"gelu", 1, 0}, {"gelu_python", 1, 0}, {"gelu_new", 0, 0},
        {"gelu_pytorch_tanh", 0, 0}, {"gelu_accurate", 0, 0},
        {"quick_gelu", 0, 1}, {"gelu_10", 0, 1}, {"relu", 0, 0},
        {"relu6", 0, 1}, {"leaky_relu", 0, 1}};
    char *dir = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "{\"model_type\": \"bert\", \"hidden_size\": 32, "
                "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                "\"intermediate_size\": 64, \"vocab_size\": 300, "
                "\"max_position_embeddings\": 16, \"hidden_act\": \"%s\"}\n",
                cases[k].act);
        fclose(f);
        prof_model_spec s;
        exec_gpt_config c;
        util_err e;
        cr_assert_eq(prof_model_spec_get(path, &s, &e), 0, "%s: %s",
                     cases[k].act, e.msg);
        cr_expect(s.gelu_erf == cases[k].erf &&
                      s.act_other == cases[k].other,
                  "%s: erf %d, other %d", cases[k].act, s.gelu_erf,
                  s.act_other);
        int rc = exec_gpt_config_from_spec(&s, &c, "x", &e);
        cr_expect_eq(rc, cases[k].other ? -1 : 0, "%s", cases[k].act);
        if (rc) cr_expect(strstr(e.msg, "kernels do not compute"), "%s",
                          e.msg);
        else cr_expect_eq(c.gelu_erf, cases[k].erf, "%s", cases[k].act);
    }
    test_rm_rf(dir);
}
