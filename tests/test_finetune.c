/* Fine-tuning modes (prof_model_finetune): the trainable parameters
 * against the counts PEFT prints for the same adapters on the same
 * models, the model state the cost model keeps against its closed form
 * (frozen weights as stored, 4-bit under QLoRA; gradients and Adam's
 * state for the adapters alone), what the backward still runs, the plan
 * file and the command line, and the planner finding a LoRA plan where
 * full training fits nowhere. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "planner/planner.h"
#include "tests/harness.h"

static prof_model *ft_model(const char *name, const char *mode)
{
    util_err e;
    prof_model *m = prof_model_load(name, &e);
    cr_assert_not_null(m, "%s", e.msg);
    prof_finetune f;
    cr_assert_eq(prof_finetune_parse(mode, &f, &e), 0, "%s", e.msg);
    cr_assert_eq(prof_model_finetune(m, &f, &e), 0, "%s: %s", mode, e.msg);
    return m;
}

Test(finetune, parse_and_names)
{
    static const struct { const char *in, *name; } ok[] = {
        {"full", "full"}, {"frozen:0", "frozen:0"}, {"frozen:12", "frozen:12"},
        {"lora:16", "lora:16:q+v"}, {"lora:8:q+k+v", "lora:8:qkv"},
        {"lora:8:attn+mlp", "lora:8:all"}, {"lora:4:down+q", "lora:4:q+down"},
        {"qlora:64", "qlora:64:all"}, {"qlora:16:mlp", "qlora:16:mlp"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        prof_finetune f;
        util_err e;
        char b[64];
        cr_assert_eq(prof_finetune_parse(ok[i].in, &f, &e), 0, "%s: %s",
                     ok[i].in, e.msg);
        cr_expect_str_eq(prof_finetune_name(&f, b, sizeof b), ok[i].name);
        /* the canonical name reads back the same */
        prof_finetune g;
        cr_assert_eq(prof_finetune_parse(b, &g, &e), 0, "%s", e.msg);
        cr_expect(g.kind == f.kind && g.rank == f.rank &&
                  g.targets == f.targets && g.frozen == f.frozen, "%s", b);
    }
    static const char *const bad[] = {"", "lora", "lora:", "lora:0",
                                      "lora:8:", "lora:8:x", "lora:8:q+",
                                      "frozen", "frozen:-1", "full:1",
                                      "qlora:abc", "Lora:8", "lora:99999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        prof_finetune f;
        util_err e;
        cr_expect_eq(prof_finetune_parse(bad[i], &f, &e), -1, "%s", bad[i]);
        cr_expect_eq(e.code, UTIL_EXIT_USAGE);
        cr_expect(strstr(e.msg, "--finetune"), "%s: %s", bad[i], e.msg);
    }
}

/* PEFT's print_trainable_parameters for the same adapters: Llama 2 7B
 * with r 8 on q_proj and v_proj 4,194,304, r 16 8,388,608; QLoRA's r 16
 * on all seven projections 39,976,960; GPT-2 with r 8 on its fused c_attn
 * 294,912 (one adapter on the fused matrix has the parameters of q and
 * v's two). */
Test(finetune, trainable_parameters)
{
    static const struct { const char *model, *mode; double train; } c[] = {
        {"llama2-7b", "lora:8", 4194304}, {"llama2-7b", "lora:16", 8388608},
        {"llama2-7b", "qlora:16", 39976960}, {"gpt2", "lora:8", 294912},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        prof_model *m = ft_model(c[i].model, c[i].mode);
        cr_expect_eq(m->train_params, c[i].train, "%s %s: %.0f", c[i].model,
                     c[i].mode, m->train_params);
        /* Hugging Face's 6,738,415,616 base parameters, plus adapters */
        if (!strcmp(c[i].model, "llama2-7b"))
            cr_expect_eq(m->params, 6738415616.0 + c[i].train);
        else    /* PEFT's "all params: 124,734,720" */
            cr_expect_eq(m->params, 124734720.0);
        prof_model_free(m);
    }
    /* frozen:4 on GPT-2: the (tied) embedding and head and blocks 0..3
     * frozen; 8 blocks, the final norm train */
    prof_model *full = ft_model("gpt2", "full");
    prof_model *fz = ft_model("gpt2", "frozen:4");
    double block = 0, norm_f = 2 * 768;
    for (int i = 0; i < full->n_ops; i++)
        if (!strcmp(full->layers[full->ops[i].layer].name, "l5"))
            block += full->ops[i].params;
    cr_expect_float_eq(fz->train_params, 8 * block + norm_f, 0.5);
    cr_expect_float_eq(fz->params, full->params, 0.5);
    prof_model_free(full);
    prof_model_free(fz);
}

/* One stage of llama2-7b on one GPU: the model state is the frozen base
 * as stored plus the adapters with fp16 gradients and 12 bytes of Adam
 * state each (16 in all, as for full training). */
static sim_costs *one_stage(const prof_model *m, int dp, prof_topo **tp)
{
    prof_topo *t = *tp = test_topo("a100-sxm-80gb", dp);
    int first = 0, last = m->n_ops - 1, dev = 0;
    sim_cost_opts o = {.mbs = 1, .dp = dp};
    util_err e;
    sim_costs *c = sim_costs_build(m, t, 1, &first, &last, &dev, 1, &o, &e);
    cr_assert_not_null(c, "%s", e.msg);
    return c;
}

Test(finetune, model_state)
{
    const double A16 = 8388608, Q16 = 39976960;
    prof_model *lo = ft_model("llama2-7b", "lora:16");
    prof_topo *t[3];
    sim_costs *c = one_stage(lo, 1, &t[0]);
    const sim_stage_cost *s = &c->stage[0];
    cr_expect_float_eq(s->weight_bytes, 2 * (6738415616.0 + A16), 1);
    cr_expect_float_eq(s->grad_bytes, 2 * A16, 1);
    cr_expect_float_eq(s->opt_bytes, 12 * A16, 1);
    sim_costs_free(c);
    /* QLoRA: the 32 blocks' seven projections (4096 x 12288, 4096 x
     * 4096, 4096 x 22016, 11008 x 4096 each) in 4.127 bits a weight; the
     * embedding, head and norms (262,410,240) and the adapters in 16 */
    prof_model *q = ft_model("llama2-7b", "qlora:16");
    c = one_stage(q, 1, &t[1]);
    double lin = 32.0 * (4096.0 * 12288 + 4096.0 * 4096 + 4096.0 * 22016 +
                         11008.0 * 4096);
    cr_expect_float_eq(c->stage[0].weight_bytes,
                       lin * 4.127 / 8 + 2 * 262410240.0 + 2 * Q16, 1);
    cr_expect_float_eq(c->stage[0].grad_bytes, 2 * Q16, 1);
    sim_costs_free(c);
    /* data parallelism reduces only the adapters' gradients */
    c = one_stage(lo, 2, &t[2]);
    cr_expect_float_eq(c->stage[0].train_bytes, 2 * A16, 1);
    cr_expect_float_eq(c->stage[0].param_bytes, 2 * (6738415616.0 + A16), 1);
    sim_costs_free(c);
    prof_model_free(lo);
    prof_model_free(q);
    for (int i = 0; i < 3; i++) prof_topo_free(t[i]);
}

/* What backward runs: nothing before the first trainable op; frozen
 * weights no weight gradient (LoRA: the adapters' GEMMs alone, thin and
 * far cheaper than the base's); frozen linears keep no input for it. */
Test(finetune, backward_reach)
{
    prof_model *full = ft_model("llama2-7b", "full");
    prof_model *lo = ft_model("llama2-7b", "lora:16");
    prof_model *fz = ft_model("llama2-7b", "frozen:8");
    prof_topo *t = test_topo("a100-sxm-80gb", 1);
    const prof_gpu *g = prof_topo_gpu(t, 0);
    int qkv = -1, up = -1;
    for (int i = 0; i < lo->n_ops; i++) {
        if (lo->ops[i].role == PROF_ROLE_QKV && qkv < 0) qkv = i;
        if (lo->ops[i].role == PROF_ROLE_MLP_UP && up < 0) up = i;
    }
    cr_assert(qkv > 0 && up > 0);
    for (int i = 0; i < qkv; i++) {
        cr_expect_eq(lo->ops[i].grad, PROF_GRAD_NONE, "%s", lo->ops[i].name);
        cr_expect_eq(sim_op_model_ns(g, PROF_DT_BF16, &lo->ops[i], 1, SIM_B),
                     0);
    }
    cr_expect_eq(lo->ops[qkv].grad, PROF_GRAD_INPUT);
    double wf = sim_op_model_ns(g, PROF_DT_BF16, &full->ops[qkv], 1, SIM_W);
    double wl = sim_op_model_ns(g, PROF_DT_BF16, &lo->ops[qkv], 1, SIM_W);
    /* 0.5% of the base's FLOPs, in GEMMs 32 wide: far below peak */
    cr_expect(wl > 0 && wl < 0.15 * wf, "adapter W %.0f ns, base W %.0f", wl,
              wf);
    /* the adapted qkv keeps its input and x A; the frozen MLP up nothing */
    cr_expect_gt(lo->ops[qkv].act_bytes, full->ops[qkv].act_bytes);
    cr_expect_eq(lo->ops[up].act_bytes, 0);
    cr_expect_eq(lo->ops[up].bwd_w_flops, 0);
    cr_expect_eq(sim_op_model_ns(g, PROF_DT_BF16, &lo->ops[up], 1, SIM_W), 0);
    cr_expect_float_eq(lo->ops[up].bwd_in_flops, full->ops[up].bwd_in_flops,
                       1);
    /* frozen:8: blocks 0..7 run no backward, block 8 on trains */
    for (int i = 0; i < fz->n_ops; i++) {
        const char *ln = fz->layers[fz->ops[i].layer].name;
        int before = fz->ops[i].layer <= 8; /* embed, l0 .. l7 */
        cr_expect_eq(fz->ops[i].grad == PROF_GRAD_NONE, before, "%s (%s)",
                     fz->ops[i].name, ln);
    }
    prof_model_free(full);
    prof_model_free(lo);
    prof_model_free(fz);
    prof_topo_free(t);
}

/* A frozen prefix runs no backward, so neither recomputation keeps its
 * layers' checkpoints nor runs their forward again: frozen:8 under full
 * or selective recomputation keeps 8 layers' checkpoints fewer than full
 * training, and the frozen ops are not recomputed. */
Test(finetune, frozen_prefix_not_recomputed)
{
    prof_model *full = ft_model("llama2-7b", "full");
    prof_model *fz = ft_model("llama2-7b", "frozen:8");
    int n = full->n_ops - 1;
    for (int i = 0; i < fz->n_ops; i++)
        if (fz->ops[i].grad == PROF_GRAD_NONE) {
            cr_expect_eq(sim_op_recomputed(fz, i, SIM_RC_FULL), 0, "%s",
                         fz->ops[i].name);
            cr_expect_eq(sim_op_recomputed(fz, i, SIM_RC_SELECTIVE), 0, "%s",
                         fz->ops[i].name);
        }
    /* a checkpoint: the layer's input, s h bf16 bytes a sample */
    double ck = (double)full->spec.seq_len * full->spec.hidden * 2;
    sim_act a = sim_act_range(full, 0, n, 1, 0, SIM_RC_FULL);
    sim_act b = sim_act_range(fz, 0, n, 1, 0, SIM_RC_FULL);
    cr_expect_float_eq(a.keep - b.keep, 8 * ck, 1e-3 * ck, "%.0f - %.0f",
                       a.keep, b.keep);
    prof_model_free(full);
    prof_model_free(fz);
}

Test(finetune, refusals)
{
    util_err e;
    prof_finetune f;
    prof_model *m = prof_model_load("gpt2", &e);
    cr_assert_eq(prof_finetune_parse("frozen:13", &f, &e), 0);
    cr_expect_eq(prof_model_finetune(m, &f, &e), -1);
    cr_expect(strstr(e.msg, "12 blocks"), "%s", e.msg);
    cr_assert_eq(prof_finetune_parse("lora:8", &f, &e), 0);
    cr_assert_eq(prof_model_finetune(m, &f, &e), 0, "%s", e.msg);
    cr_expect_eq(prof_model_finetune(m, &f, &e), -1, "applied twice");
    prof_model_free(m);
    /* QLoRA over an fp32 model (bitsandbytes' default compute type):
     * the base in 4 bits, the products in fp32 */
    const char *sim = "sim --hw cpu x1 --model gpt-tiny --schedule gpipe "
                      "--pp 1 --mbs 1 --microbatches 1";
    cli_expect(0, "iteration time", "%s --finetune qlora:8", sim);
    cli_expect(2, "'lora:8:wq'", "%s --finetune lora:8:wq", sim);
    /* a gate named where the MLP has none (it adapted q alone) */
    cli_expect(2, "gpt-tiny's MLP has no gate (it is not gated)", "%s "
               "--finetune lora:8:q+gate", sim);
    cli_expect(0, "iteration time", "%s --finetune lora:8:mlp", sim);
    /* the answer says what trains, as plan's does */
    cli_expect(0, "\nfine-tuning lora:8:mlp: ", "%s --finetune lora:8:mlp",
               sim);
    cli_expect(0, "\"finetune\": \"frozen:2\"", "%s --finetune frozen:2 "
               "--json", sim);
    cli_expect(2, "auto stands alone (it is full,lora:16,qlora:16)",
               "plan --hw rtx4090 x1 --model gpt-tiny --finetune auto,full");
    cli_expect(2, "in the list 'full,lora'", "plan --hw rtx4090 x1 --model "
               "gpt-tiny --finetune full,lora");
    cli_expect(0, "lora:8:q+v: 294912 parameters train",
               "profile show gpt2 --finetune lora:8");
}

/* The plan file keeps the mode; a bad one names file, line and field. */
Test(finetune, plan_file)
{
    char *dir = test_tmpdir();
    cli_result a = cli_run("sim --hw a100-sxm-80gb x2 --model llama2-7b "
                           "--schedule 1f1b --pp 2 --mbs 1 --microbatches 4 "
                           "--finetune lora:8:attn --json --out %s/p.json",
                           dir);
    cr_assert_eq(a.code, 0, "%s", a.err);
    cli_result b = cli_run("sim --plan %s/p.json --json", dir);
    cr_assert_eq(b.code, 0, "%s", b.err);
    json_t *ja = json_loads(a.out, 0, NULL), *jb = json_loads(b.out, 0, NULL);
    cr_assert(ja && jb);
    cr_expect_eq(json_real_value(json_object_get(ja, "iteration_time_s")),
                 json_real_value(json_object_get(jb, "iteration_time_s")));
    json_decref(ja);
    json_decref(jb);
    cr_expect_eq(sh_run("grep -q '\"finetune\": \"lora:8:attn\"' %s/p.json",
                        dir), 0);
    cr_assert_eq(sh_run("sed -i 's/lora:8:attn/lora:8:wq/' %s/p.json", dir),
                 0);
    cli_result c = cli_run("sim --plan %s/p.json", dir);
    cr_expect_eq(c.code, 2);
    cr_expect(strstr(c.err, "p.json:") && strstr(c.err, "'finetune'"), "%s",
              c.err);
    cli_result_free(&a);
    cli_result_free(&b);
    cli_result_free(&c);
    test_rm_rf(dir);
}

/* With --schedule naming only offload schedules, an offload plan wins
 * whatever fits the GPU: the answer does not claim full fine-tuning fits
 * only offloaded (it did for gpt-mini, a few MiB of states). */
Test(finetune, offload_only_search_claims_nothing_of_the_gpu)
{
    cli_result r = cli_run("plan --hw rtx4090 x1 --host-mem 64G --nvme 1 "
                           "--model gpt-mini --schedule fuyou,zero-offload "
                           "--no-progress");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "chosen: fuyou"), "%s", r.out);
    cr_expect(!strstr(r.out, "fits only with its model states"), "%s",
              r.out);
    cli_result_free(&r);
}

/* Llama 2 7B on one RTX 4090: full training needs about 100 GiB; the
 * planner says so and falls back to LoRA, which fits; --finetune full
 * refuses and points at the modes; auto plans all three and picks the
 * fastest that fits. */
Test(finetune, planner)
{
    const char *plan = "plan --hw rtx4090 x1 --model llama2-7b --batch 16 "
                       "--no-progress";
    /* full training fits the GPU only with its states on the host:
     * planned so, and said so; without the host's drives it does not,
     * and LoRA is the fallback */
    cli_result r = cli_run("%s", plan);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "full fine-tuning fits only with its model "
                            "states offloaded"), "%s", r.out);
    cr_expect(!strstr(r.out, "fine-tuning lora"), "%s", r.out);
    cli_result_free(&r);
    r = cli_run("%s --nvme 0 --host-mem 32G", plan);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "full fine-tuning does not fit"), "%s", r.out);
    cr_expect(strstr(r.out, "fine-tuning lora:16:q+v: 8.4M of"), "%s", r.out);
    cli_result_free(&r);
    /* the host given is what stops full training: the user's input */
    cli_expect(2, "--finetune lora:16", "%s --nvme 0 --host-mem 32G "
               "--finetune full", plan);
    r = cli_run("%s --finetune auto --json", plan);
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_t *j = json_loads(r.out, 0, NULL);
    cr_assert_not_null(j);
    json_t *modes = json_object_get(j, "finetune_modes");
    cr_assert_eq(json_array_size(modes), 3);
    double best = 0;
    int chosen = -1;
    for (int k = 0; k < 3; k++) {
        json_t *x = json_array_get(modes, (size_t)k);
        double sps = json_number_value(json_object_get(x, "samples_per_s"));
        cr_expect(json_is_true(json_object_get(x, "feasible")), "mode %d",
                  k);
        if (json_is_true(json_object_get(x, "chosen"))) chosen = k;
        if (sps > best) best = sps;
    }
    cr_assert(chosen > 0);
    cr_expect_eq(json_number_value(json_object_get(
                     json_array_get(modes, (size_t)chosen), "samples_per_s")),
                 best);
    cr_expect_str_eq(json_string_value(json_object_get(
                         json_object_get(j, "plan"), "finetune")),
                     json_string_value(json_object_get(
                         json_array_get(modes, (size_t)chosen), "finetune")));
    json_decref(j);
    cli_result_free(&r);
}

/* bf16 on a GPU without it (Turing, Volta) runs in fp16, as people train
 * there: priced at the fp16 peak, never for free; the lower bound and the
 * report's MFU use the same peak. */
Test(finetune, bf16_without_bf16_runs_as_fp16)
{
    prof_model *m = ft_model("llama2-7b", "full");
    prof_topo *t = test_topo("rtx2080ti", 1);
    const prof_gpu *g = prof_topo_gpu(t, 0);
    cr_assert_eq(g->peak_flops[PROF_DT_BF16], 0);
    cr_assert_eq(prof_gpu_peak(g, PROF_DT_BF16), g->peak_flops[PROF_DT_FP16]);
    int up = -1;
    for (int i = 0; i < m->n_ops && up < 0; i++)
        if (m->ops[i].role == PROF_ROLE_MLP_UP) up = i;
    cr_assert_geq(up, 0);
    for (int k = 0; k < 3; k++) {
        double b = sim_op_model_ns(g, PROF_DT_BF16, &m->ops[up], 1,
                                   (sim_kind)k);
        double h = sim_op_model_ns(g, PROF_DT_FP16, &m->ops[up], 1,
                                   (sim_kind)k);
        cr_expect_float_eq(b, h, 1e-9 * h, "kind %d: bf16 %.0f ns, fp16 "
                           "%.0f ns", k, b, h);
        /* at most the fp16 peak: 2 m n k FLOPs of the forward GEMM */
        const prof_gemm *q = &m->ops[up].gemm[0];
        cr_expect_geq(b * 1e-9 * g->peak_flops[PROF_DT_FP16],
                      2 * q->m * q->n * q->k * 0.999);
    }
    json_t *x = cli_json("sim --hw rtx2080ti x8 --model llama2-7b --schedule "
                         "1f1b --pp 8 --mbs 1 --microbatches 8 --json");
    double mfu = json_number_value(json_object_get(x, "mfu"));
    cr_expect(mfu > 0.05 && mfu < 0.8, "MFU %.3f", mfu);
    json_decref(x);
    prof_topo_free(t);
    prof_model_free(m);
}
