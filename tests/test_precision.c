/* The precision of the math: TF32 for an fp32 model's products (priced
 * at the tensor cores' TF32 peak, the rest as fp32), and tensor-core
 * GEMMs whose rows are not 16 bytes aligned (prof_eff.unaligned, as an
 * H200 measured them), each against the closed form of the cost model. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "profiles/profiles.h"
#include "sim/sim.h"
#include "tests/harness.h"

/* An fp32 model with "tf32": its GEMMs priced at the GPU's TF32 peak (the
 * same efficiency curve, so compute-bound products run peak_tf32 /
 * peak_fp32 faster) and nothing else; on a GPU without TF32 (Turing) and
 * on a CPU exactly the fp32 prices. The whole simulation follows, and the
 * spec refuses TF32 with a 16-bit dtype, naming the field. */
Test(precision, tf32_prices_products_on_tensor_cores)
{
    util_err e;
    prof_model_spec s;
    cr_assert_eq(prof_model_spec_get("gpt2", &s, &e), 0, "%s", e.msg);
    s.dtype = PROF_DT_FP32;
    cr_expect_eq(prof_spec_math(&s), PROF_DT_FP32);
    s.tf32 = 1;
    cr_expect_eq(prof_spec_math(&s), PROF_DT_TF32);
    prof_model *m = prof_model_build(&s, &e);
    cr_assert_not_null(m, "%s", e.msg);
    int up = -1, norm = -1;
    for (int i = 0; i < m->n_ops; i++) {
        if (up < 0 && m->ops[i].role == PROF_ROLE_MLP_UP) up = i;
        if (norm < 0 && m->ops[i].role == PROF_ROLE_NORM) norm = i;
    }
    cr_assert(up >= 0 && norm >= 0);
    prof_topo *a = test_topo("a100-sxm-80gb", 1);
    const prof_gpu *g = prof_topo_gpu(a, 0);
    cr_assert_eq(prof_gpu_math(g, PROF_DT_TF32), PROF_DT_TF32);
    double want = g->peak_flops[PROF_DT_TF32] / g->peak_flops[PROF_DT_FP32];
    for (int k = 0; k < 3; k++) {
        double L = g->eff.launch_ns;
        double t = (double)sim_op_ns(g, PROF_DT_TF32, &m->ops[up], 8,
                                     (sim_kind)k, NULL);
        double f = (double)sim_op_ns(g, PROF_DT_FP32, &m->ops[up], 8,
                                     (sim_kind)k, NULL);
        cr_expect(fabs((f - L) / (t - L) - want) < 0.01 * want, "kind %d: "
                  "fp32 %.0f ns, tf32 %.0f ns, want %.2fx", k, f, t, want);
        double nt = (double)sim_op_ns(g, PROF_DT_TF32, &m->ops[norm], 8,
                                      (sim_kind)k, NULL);
        double nf = (double)sim_op_ns(g, PROF_DT_FP32, &m->ops[norm], 8,
                                      (sim_kind)k, NULL);
        cr_expect_eq(nt, nf, "kind %d: a norm is not a product", k);
    }
    /* Turing has no TF32, a CPU neither: fp32 prices */
    const char *none[] = {"rtx2080ti", "cpu"};
    for (int h = 0; h < 2; h++) {
        prof_topo *t = test_topo(none[h], 1);
        const prof_gpu *q = prof_topo_gpu(t, 0);
        cr_expect_eq(prof_gpu_math(q, PROF_DT_TF32), PROF_DT_FP32, "%s",
                     none[h]);
        for (int i = 0; i < m->n_ops; i++)
            for (int k = 0; k < 3; k++)
                cr_expect_eq(sim_op_ns(q, PROF_DT_TF32, &m->ops[i], 2,
                                       (sim_kind)k, NULL),
                             sim_op_ns(q, PROF_DT_FP32, &m->ops[i], 2,
                                       (sim_kind)k, NULL),
                             "%s op %s kind %d", none[h], m->ops[i].name, k);
        prof_topo_free(t);
    }
    /* the whole simulation, and the spec's check */
    char *dir = test_tmpdir(), p32[512], ptf[512], pbad[512];
    const char *body = "{\"name\": \"g\", \"family\": \"gpt\", \"hidden\": "
        "768, \"layers\": 4, \"heads\": 12, \"vocab\": 50257, \"seq_len\": "
        "1024, \"dtype\": \"%s\", \"tf32\": %s}";
    snprintf(p32, sizeof p32, "%s/fp32.json", dir);
    snprintf(ptf, sizeof ptf, "%s/tf32.json", dir);
    snprintf(pbad, sizeof pbad, "%s/bad.json", dir);
    const char *path[] = {p32, ptf, pbad};
    const char *dt[] = {"fp32", "fp32", "bf16"}, *on[] = {"false", "true",
                                                          "true"};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(path[i], "w");
        cr_assert_not_null(f);
        fprintf(f, body, dt[i], on[i]);
        fclose(f);
    }
    double it[2], peak[2];
    for (int i = 0; i < 2; i++) {
        json_t *x = cli_json("sim --hw a100-sxm-80gb x1 --model %s --schedule "
                             "1f1b --pp 1 --mbs 8 --microbatches 4 --json",
                             path[i]);
        it[i] = json_number_value(json_object_get(x, "iteration_time_s"));
        double fl = json_number_value(json_object_get(
                        x, "model_flops_per_iteration"));
        peak[i] = fl / it[i] /
                  json_number_value(json_object_get(x, "mfu"));
        json_decref(x);
    }
    cr_expect(it[1] < it[0] / 3, "tf32 %.3f s, fp32 %.3f s", it[1], it[0]);
    cr_expect(fabs(peak[1] / g->peak_flops[PROF_DT_TF32] - 1) < 1e-6,
              "MFU of %.1f TFLOP/s", peak[1] / 1e12);
    cr_expect(fabs(peak[0] / g->peak_flops[PROF_DT_FP32] - 1) < 1e-6);
    cli_expect(2, "field 'tf32'", "sim --hw a100-sxm-80gb x1 --model %s "
               "--schedule 1f1b --pp 1 --mbs 1 --microbatches 1", pbad);
    test_rm_rf(dir);
    prof_topo_free(a);
    prof_model_free(m);
}

/* The model's op of role r (the first). */
static const prof_op *op_of(const prof_model *m, prof_op_role r)
{
    for (int i = 0; i < m->n_ops; i++)
        if (m->ops[i].role == r) return &m->ops[i];
    cr_assert_fail("no op of role %d", (int)r);
    return NULL;
}

/* GPT-2's LM head (its width the vocabulary) on a Hopper GPU: every phase
 * at most unaligned of the peak when the vocabulary is not a multiple of
 * 16 bytes' elements, half that when odd in 16 bits; unchanged when
 * padded, in fp32, and on a GPU whose profile does not model it (A100).
 * The rows (tokens) never matter. */
Test(precision, unaligned_rows_cap_tensor_core_gemms)
{
    struct { int vocab; prof_dtype dt; double cap; } c[] = {
        {50257, PROF_DT_BF16, 0.125},   /* odd: 2 bytes aligned */
        {50258, PROF_DT_BF16, 0.25},    /* 4 bytes */
        {50260, PROF_DT_FP16, 0.25},    /* 8 bytes */
        {50264, PROF_DT_BF16, 0},       /* 16 bytes: none */
        {50257, PROF_DT_TF32, 0.25},    /* 4 bytes in TF32 */
        {50258, PROF_DT_TF32, 0.25},    /* 8 bytes */
        {50260, PROF_DT_TF32, 0},       /* 16 bytes */
        {50257, PROF_DT_FP32, 0},       /* CUDA cores */
    };
    prof_topo *h = test_topo("h100-sxm", 1), *a = test_topo("a100-sxm-80gb", 1);
    const prof_gpu *gh = prof_topo_gpu(h, 0), *ga = prof_topo_gpu(a, 0);
    cr_assert_eq(gh->eff.unaligned, 0.25);
    cr_assert_eq(ga->eff.unaligned, 0);
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        util_err e;
        prof_model_spec s;
        cr_assert_eq(prof_model_spec_get("gpt2", &s, &e), 0, "%s", e.msg);
        s.vocab = c[i].vocab;
        s.dtype = c[i].dt == PROF_DT_TF32 ? PROF_DT_FP32 : c[i].dt;
        s.tf32 = c[i].dt == PROF_DT_TF32;
        for (int seq = 1024; seq >= 1023; seq--) {
            s.seq_len = seq;        /* odd rows: no matter */
            prof_model *m = prof_model_build(&s, &e);
            cr_assert_not_null(m, "%s", e.msg);
            const prof_op *o = op_of(m, PROF_ROLE_LM_HEAD);
            double peak = prof_gpu_peak(gh, c[i].dt);
            for (int k = 0; k < 3; k++) {
                double flops = (k == 0 ? o->fwd_flops : k == 1
                                ? o->bwd_in_flops : o->bwd_w_flops) * 8;
                double t = sim_op_model_ns(gh, c[i].dt, o, 8, (sim_kind)k);
                double eff = flops / ((t - gh->eff.launch_ns) * 1e-9 * peak);
                if (c[i].cap > 0)
                    cr_expect(fabs(eff - c[i].cap) < 1e-6, "vocab %d dt %d "
                              "kind %d: eff %.4f, want the cap %.4f",
                              c[i].vocab, (int)c[i].dt, k, eff, c[i].cap);
                else
                    cr_expect(eff > 0.4, "vocab %d dt %d kind %d: eff %.4f, "
                              "want no cap", c[i].vocab, (int)c[i].dt, k, eff);
                /* the A100's profile does not model it */
                double ta = sim_op_model_ns(ga, c[i].dt, o, 8, (sim_kind)k);
                double ea = flops / ((ta - ga->eff.launch_ns) * 1e-9 *
                                     prof_gpu_peak(ga, c[i].dt));
                cr_expect(ea > 0.4, "a100 vocab %d kind %d: eff %.4f",
                          c[i].vocab, k, ea);
            }
            prof_model_free(m);
        }
    }
    prof_topo_free(h);
    prof_topo_free(a);
}

/* sim and plan say which GEMMs are priced unaligned, what it costs and
 * the width that would not be; nothing where every row is aligned or
 * the GPU does not model it. */
Test(precision, unaligned_gemms_are_reported)
{
    json_t *x = cli_json("sim --hw h100-sxm x1 --model gpt2 --schedule 1f1b "
                         "--pp 1 --mbs 8 --microbatches 2 --json");
    json_t *u = json_object_get(x, "unaligned_gemms");
    cr_assert_eq(json_array_size(u), 1);
    json_t *o = json_array_get(u, 0);
    cr_expect_str_eq(json_string_value(json_object_get(o, "op")),
                     "head.lm_head");
    cr_expect_eq(json_integer_value(json_object_get(o, "width")), 50257);
    cr_expect_eq(json_integer_value(json_object_get(o, "padded_width")),
                 50304);
    cr_expect_float_eq(json_number_value(json_object_get(o, "cap")), 0.125,
                       1e-12);
    double extra = json_number_value(json_object_get(
        o, "extra_s_per_microbatch"));
    double it = json_number_value(json_object_get(x, "iteration_time_s"));
    cr_expect(extra > 0.05 * it / 2 && extra < it / 2, "%g of %g", extra, it);
    json_decref(x);
    x = cli_json("sim --hw a100-sxm-80gb x1 --model gpt2 --schedule 1f1b "
                 "--pp 1 --mbs 8 --microbatches 2 --json");
    cr_expect_null(json_object_get(x, "unaligned_gemms"));
    json_decref(x);
    x = cli_json("sim --hw h100-sxm x1 --model llama2-7b --schedule 1f1b "
                 "--pp 1 --mbs 1 --microbatches 1 --json");
    cr_expect_null(json_object_get(x, "unaligned_gemms"));
    json_decref(x);
    cli_expect(0, "unaligned GEMMs    head.lm_head 50257 wide: <= 12.5% of "
               "peak", "sim --hw h100-sxm x1 --model gpt2 --schedule 1f1b "
               "--pp 1 --mbs 8 --microbatches 2");
    cli_expect(0, "note: head.lm_head is 50257 wide, not 16 bytes aligned",
               "plan --hw h100-sxm x1 --model gpt2");
}

/* --dtype: sim and plan train a model in another precision than its
 * spec's, as a spec with that dtype would; the plan file keeps it (sim
 * --plan reproduces the plan, a bad value names the file's field), and
 * the executor on the cores runs a TF32 plan in fp32 and says so. */
Test(precision, dtype_overrides_the_spec_and_plans_keep_it)
{
    char *dir = test_tmpdir(), spec[512];
    snprintf(spec, sizeof spec, "%s/g.json", dir);
    FILE *f = fopen(spec, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"name\": \"gpt2\", \"family\": \"gpt\", \"hidden\": 768, "
            "\"layers\": 12, \"heads\": 12, \"vocab\": 50257, \"seq_len\": "
            "1024, \"max_pos\": 1024, \"dtype\": \"fp32\", \"tf32\": true, "
            "\"dropout\": true}");
    fclose(f);
    const char *run = "--hw a100-sxm-80gb x1 --schedule 1f1b --pp 1 --mbs 8 "
                      "--microbatches 2 --json";
    json_t *a = cli_json("sim %s --model gpt2 --dtype tf32", run);
    json_t *b = cli_json("sim %s --model %s", run, spec);
    json_t *c = cli_json("sim %s --model gpt2", run);
    double ta = json_number_value(json_object_get(a, "iteration_time_s"));
    double tb = json_number_value(json_object_get(b, "iteration_time_s"));
    double tc = json_number_value(json_object_get(c, "iteration_time_s"));
    cr_expect_float_eq(ta, tb, 1e-12 * tb, "--dtype tf32 %.6f, spec %.6f", ta,
                       tb);
    cr_expect(fabs(ta - tc) > 0.05 * tc, "tf32 %.4f against fp16 %.4f", ta,
              tc);
    cr_expect_str_eq(json_string_value(json_object_get(a, "dtype")), "tf32");
    cr_expect_null(json_object_get(c, "dtype"));
    json_decref(a);
    json_decref(b);
    json_decref(c);
    cli_expect(2, "--dtype 'fp8': expected fp32, tf32", "sim %s --model gpt2 "
               "--dtype fp8", run);
    /* Turing has no TF32: said, and priced in fp32 */
    cli_expect(0, "precision          tf32 runs in fp32 on rtx2080ti (no "
               "tf32)", "sim --hw rtx2080ti x1 --model gpt2 --dtype tf32 "
               "--schedule 1f1b --pp 1 --mbs 1 --microbatches 2");
    cli_expect(0, "gpt2 trains in tf32, which rtx2080ti lacks: priced in "
               "fp32", "plan --hw rtx2080ti x1 --model gpt2 --dtype tf32");
    /* T5 1.1 (Flan-T5) trains in bf16: fp16 in its place overflows */
    cli_expect(0, "flan-t5-xl trains in bf16, which rtx2080ti lacks: priced "
               "in fp16, but T5 1.1 overflows fp16\n  (NaN losses): --dtype "
               "fp32 prices what runs there", "plan --hw rtx2080ti x8 "
               "--model flan-t5-xl");
    cli_expect(0, "flan-t5-xl trains in fp16, which T5 1.1 overflows (NaN "
               "losses): --dtype bf16 or fp32", "plan --hw a100-sxm-80gb x1 "
               "--model flan-t5-xl --dtype fp16");
    /* the plan keeps it */
    cli_expect(0, "trains in tf32 (--dtype)", "plan --hw a100-sxm-80gb x1 "
               "--model gpt2 --dtype tf32 --out %s/p.json", dir);
    json_t *p = cli_json("plan --hw a100-sxm-80gb x1 --model gpt2 --dtype tf32 "
                         "--json");
    double tp = json_number_value(json_object_get(p, "iteration_time_s"));
    cr_expect_str_eq(json_string_value(json_object_get(
                         json_object_get(p, "plan"), "dtype")), "tf32");
    json_decref(p);
    json_t *s = cli_json("sim --plan %s/p.json --json", dir);
    cr_expect_float_eq(json_number_value(json_object_get(
                           s, "iteration_time_s")), tp, 1e-9 * tp);
    json_decref(s);
    cli_expect(2, "--dtype cannot be combined with --plan",
               "sim --plan %s/p.json --dtype bf16", dir);
    sh_run("sed 's/\"tf32\"/\"fp7\"/' %s/p.json > %s/bad.json", dir, dir);
    cli_expect(2, "bad.json:", "sim --plan %s/bad.json", dir);
    cli_result r = cli_run("sim --plan %s/bad.json", dir);
    cr_expect(strstr(r.err, "'dtype'") && strstr(r.err, "fp7"), "%s", r.err);
    cli_result_free(&r);
    /* the cores compute fp32 */
    cli_expect(0, NULL, "sim --hw cpu x2 --model gpt-tiny --dtype tf32 "
               "--schedule 1f1b --pp 2 --mbs 1 --microbatches 2 --out "
               "%s/c.json", dir);
    r = cli_run("exec --plan %s/c.json --steps 1 --data README.md --quiet",
                dir);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --plan %s/c.json --steps 1 --data README.md", dir);
    cr_expect(strstr(r.out, "note: the plan trains in tf32; this backend "
                     "computes in fp32"), "%s", r.out);
    cli_result_free(&r);
    test_rm_rf(dir);
}
