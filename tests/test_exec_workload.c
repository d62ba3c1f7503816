/* Many models at once on CPU devices (exec/workload.c): under every
 * policy each job's final weights and AdamW moments equal the reference
 * trainer's (exec_train, same seed, data and steps) bit for bit, though
 * the jobs are cut into shards that recompute their forward, their state
 * moves between a host pool and the devices, and a tied table's gradient
 * crosses shards; every shard-step runs; a job that fits no device, a
 * model the executor cannot train and a bad file are errors naming the
 * file, line and field (exit 2); the JSON and the trace. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"
#include "tests/harness.h"

#define PICO "tests/data/exec/gpt-pico.json"

/* tiny cut into several shards at this budget, pico whole */
#define BUDGET (10.0 * 1024 * 1024)

static char *write_file(const char *dir, const char *name, const char *text)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

/* The workload of file wf on `devices` CPU devices of BUDGET each, on
 * the test corpus with optimizer settings a, job j from seed + j. */
static exec_wl *open_wl(const char *wf, int devices, exec_adamw a,
                        uint64_t seed, unsigned policy_seed, int prefetch)
{
    exec_wl_opts o = {.workload = wf, .devices = devices,
                      .mem_bytes = BUDGET, .data = TEST_CORPUS, .adamw = a,
                      .warmup = -1, .seed = seed,
                      .policy_seed = policy_seed, .prefetch = prefetch};
    util_err e = {0};
    exec_wl *w = exec_wl_new(&o, &e);
    cr_assert_not_null(w, "%s", e.msg);
    return w;
}

/* Job j's shard count. */
static int shards(const exec_wl *w, int j)
{
    const char *name, *model;
    int k, B, T, steps;
    const int *first;
    exec_wl_job_info(w, j, &name, &model, &k, &first, &B, &T, &steps);
    return k;
}

static exec_adamw adamw(void)
{
    return (exec_adamw){.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                        .eps = 1e-8f, .weight_decay = 0.1f, .clip = 0};
}

Test(exec_workload, every_policy_trains_each_job_as_the_reference)
{
    char *dir = test_tmpdir();
    char *wf = write_file(dir, "w.json",
        "{\"jobs\": [\n"
        "  {\"model\": \"gpt-tiny\", \"batch\": 4, \"samples\": 12, \"name\": \"t4\"},\n"
        "  {\"model\": \"" PICO "\", \"batch\": 8, \"samples\": 24, \"name\": \"pico\"},\n"
        "  {\"model\": \"gpt-tiny\", \"batch\": 2, \"samples\": 4, \"name\": \"t2\","
        " \"priority\": 1}\n]}\n");
    exec_wl *w = open_wl(wf, 2, adamw(), 1337, 7, 1);
    util_err e = {0};
    cr_assert_eq(exec_wl_jobs(w), 3);
    const char *models[3] = {"gpt-tiny", PICO, "gpt-tiny"};
    int Bs[3] = {4, 8, 2}, want_steps[3] = {3, 3, 2};
    long total = 0;
    int max_k = 0, min_k = 99;
    for (int j = 0; j < 3; j++) {
        const char *name, *model;
        int k, B, T, steps;
        const int *first;
        exec_wl_job_info(w, j, &name, &model, &k, &first, &B, &T, &steps);
        cr_assert_eq(steps, want_steps[j]);
        cr_assert_eq(B, Bs[j]);
        total += (long)steps * (2 * k - 1);
        if (k > max_k) max_k = k;
        if (k < min_k) min_k = k;
    }
    /* the shards are real: a job cut in three or more (middle shards
     * with a boundary on each side), and one whole */
    cr_assert_geq(max_k, 3);
    cr_assert_eq(min_k, 1);
    float *ref[3];
    size_t P[3];
    for (int j = 0; j < 3; j++)
        ref[j] = train_reference(models[j], Bs[j], want_steps[j], 1337 + j,
                                 adamw(), 1, &P[j]);
    for (int p = 0; p < EXEC_WL_POLICY_COUNT; p++) {
        if (p == EXEC_WL_PIPELINE) continue;    /* its own order: below */
        exec_wl_result r;
        cr_assert_eq(exec_wl_run(w, (exec_wl_policy)p, &r, &e), 0, "%s: %s",
                     exec_wl_policy_name((exec_wl_policy)p), e.msg);
        if (p != EXEC_WL_SEQUENTIAL) {
            cr_assert_eq(r.steps, total, "%s ran %ld of %ld shard-steps",
                         exec_wl_policy_name((exec_wl_policy)p), r.steps,
                         total);
            cr_assert_eq(r.n_seg, total);
            cr_assert_gt(r.h2d_bytes, 0);
            cr_assert_gt(r.predicted_makespan_s, 0);
            for (int g = 0; g < 2; g++)
                cr_assert_leq(r.dev_peak_bytes[g], BUDGET);
        }
        for (int j = 0; j < 3; j++) {
            cr_assert_eq(r.job[j].n_params, P[j]);
            size_t n = P[j] * sizeof(float);
            cr_assert(!memcmp(r.job[j].params, ref[j], n), "%s: job %d's "
                      "weights differ from the reference trainer's",
                      exec_wl_policy_name((exec_wl_policy)p), j);
            cr_assert(!memcmp(r.job[j].adam_m, ref[j] + P[j], n) &&
                      !memcmp(r.job[j].adam_v, ref[j] + 2 * P[j], n),
                      "%s: job %d's AdamW moments differ",
                      exec_wl_policy_name((exec_wl_policy)p), j);
        }
        exec_wl_result_free(&r);
    }
    for (int j = 0; j < 3; j++) free(ref[j]);
    exec_wl_free(w);
    free(wf);
    test_rm_rf(dir);
}

/* BERT's encoder among decoders: its shards mask the batch the reference
 * masks, and every policy ends with the reference's bits. */
Test(exec_workload, bert_trains_as_the_reference)
{
    char *dir = test_tmpdir();
    char *wf = write_file(dir, "w.json",
        "{\"jobs\": [\n"
        "  {\"model\": \"tests/data/exec/bert-tiny.json\", \"batch\": 4, "
        "\"samples\": 12, \"name\": \"bert\"},\n"
        "  {\"model\": \"" PICO "\", \"batch\": 8, \"samples\": 16, "
        "\"name\": \"pico\"}\n]}\n");
    exec_wl *w = open_wl(wf, 2, adamw(), 1337, 7, 1);
    util_err e = {0};
    const char *models[2] = {"tests/data/exec/bert-tiny.json", PICO};
    int Bs[2] = {4, 8}, steps[2] = {3, 2};
    cr_assert_geq(shards(w, 0), 2, "BERT is cut into shards");
    float *ref[2];
    size_t P[2];
    for (int j = 0; j < 2; j++)
        ref[j] = train_reference(models[j], Bs[j], steps[j], 1337 + j,
                                 adamw(), 1, &P[j]);
    for (int p = 0; p < EXEC_WL_POLICY_COUNT; p++) {
        if (p == EXEC_WL_PIPELINE) continue;
        exec_wl_result r;
        cr_assert_eq(exec_wl_run(w, (exec_wl_policy)p, &r, &e), 0, "%s: %s",
                     exec_wl_policy_name((exec_wl_policy)p), e.msg);
        for (int j = 0; j < 2; j++) {
            size_t n = P[j] * sizeof(float);
            cr_assert_eq(r.job[j].n_params, P[j]);
            cr_expect(!memcmp(r.job[j].params, ref[j], n) &&
                          !memcmp(r.job[j].adam_m, ref[j] + P[j], n) &&
                          !memcmp(r.job[j].adam_v, ref[j] + 2 * P[j], n),
                      "%s: job %d differs from the reference trainer",
                      exec_wl_policy_name((exec_wl_policy)p), j);
        }
        exec_wl_result_free(&r);
    }
    for (int j = 0; j < 2; j++) free(ref[j]);
    exec_wl_free(w);
    free(wf);
    test_rm_rf(dir);
}

Test(exec_workload, without_prefetch_the_same_bits)
{
    char *dir = test_tmpdir();
    char *wf = write_file(dir, "w.json",
        "{\"jobs\": [{\"model\": \"gpt-tiny\", \"batch\": 2, \"samples\": 4},"
        " {\"model\": \"gpt-tiny\", \"batch\": 2, \"samples\": 4}]}\n");
    exec_wl *w = open_wl(wf, 1, adamw(), 5, 1, 0);
    util_err e = {0};
    exec_wl_result a, b;
    cr_assert_eq(exec_wl_run(w, EXEC_WL_RR, &a, &e), 0, "%s", e.msg);
    cr_assert_eq(a.prefetched, 0);
    cr_assert_eq(exec_wl_run(w, EXEC_WL_SEQUENTIAL, &b, &e), 0, "%s", e.msg);
    for (int j = 0; j < 2; j++)
        cr_assert(!memcmp(a.job[j].params, b.job[j].params,
                          a.job[j].n_params * sizeof(float)));
    exec_wl_result_free(&a);
    exec_wl_result_free(&b);
    exec_wl_free(w);
    free(wf);
    test_rm_rf(dir);
}

/* The pipeline baseline: each job in turn as the planner's best
 * synchronous plan over both devices, run by the pipeline executor: the
 * reference's weights within the pipeline's own summation order, both
 * devices busy, a prediction from the planner's iteration. */
Test(exec_workload, the_pipeline_baseline_trains_each_job_as_the_reference)
{
    char *dir = test_tmpdir();
    char *wf = write_file(dir, "w.json",
        "{\"jobs\": [\n"
        "  {\"model\": \"gpt-tiny\", \"batch\": 4, \"samples\": 12},\n"
        "  {\"model\": \"" PICO "\", \"batch\": 8, \"samples\": 16}\n]}\n");
    exec_wl *w = open_wl(wf, 2, adamw(), 11, 1, 1);
    util_err e = {0};
    exec_wl_result r;
    cr_assert_eq(exec_wl_run(w, EXEC_WL_PIPELINE, &r, &e), 0, "%s", e.msg);
    const char *models[2] = {"gpt-tiny", PICO};
    int Bs[2] = {4, 8}, steps[2] = {3, 2};
    cr_assert_eq(r.steps, 5);
    cr_assert_gt(r.predicted_makespan_s, 0);
    cr_assert_gt(r.makespan_s, 0);
    /* the makespan is the runs' training; setting them up is apart */
    cr_expect_gt(r.setup_s, 0);
    for (int g = 0; g < 2; g++) {
        cr_expect_gt(r.busy_s[g], 0, "device %d idle", g);
        cr_expect_leq(r.busy_s[g], r.makespan_s);
        cr_expect_gt(r.dev_peak_bytes[g], 0);
        cr_expect_leq(r.dev_peak_bytes[g], BUDGET);
    }
    for (int j = 0; j < 2; j++) {
        size_t P;
        float *ref = train_reference(models[j], Bs[j], steps[j], 11 + j,
                                     adamw(), 1, &P);
        cr_assert_eq(r.job[j].n_params, P);
        double d = 0, big = 0;
        for (size_t i = 0; i < P; i++) {
            d = fmax(d, fabs((double)r.job[j].params[i] - ref[i]));
            big = fmax(big, fabs((double)ref[i]));
        }
        cr_expect_gt(d, 0, "job %d: bit for bit, so not the pipeline's run",
                     j);
        cr_expect_lt(d, 1e-3 * big, "job %d: %g off (largest weight %g)", j,
                     d, big);
        cr_expect(isfinite(r.job[j].last_loss) && r.job[j].last_loss > 0);
        free(ref);
    }
    exec_wl_result_free(&r);
    exec_wl_free(w);
    free(wf);
    test_rm_rf(dir);
}

/* Plain SGD as Hydra trains (no momentum, decoupled weight decay), by
 * the model alone: the reference an SGD job is checked against. */
static float *sgd_reference(const char *model, int B, int steps,
                            uint64_t seed, float clip, size_t *P)
{
    util_err e;
    prof_model_spec spec;
    exec_gpt_config cfg;
    cr_assert_eq(prof_model_spec_get(model, &spec, &e), 0, "%s", e.msg);
    cr_assert_eq(exec_gpt_config_from_spec(&spec, &cfg, model, &e), 0);
    int T = spec.seq_len;
    exec_corpus c;
    cr_assert_eq(exec_corpus_load(&c, TEST_CORPUS, T, &e), 0, "%s", e.msg);
    exec_gpt *m = exec_gpt_new(&cfg, B, T, seed);
    int *tok = malloc(sizeof *tok * (size_t)B * T);
    int *tgt = malloc(sizeof *tgt * (size_t)B * T);
    int warmup = steps / 10 < 1 ? 1 : steps / 10;
    for (int s = 0; s < steps; s++) {
        exec_corpus_batch(&c, 0, seed, (uint64_t)s, B, T, tok, tgt);
        exec_gpt_forward(m, tok, tgt);
        exec_gpt_zero_grad(m);
        exec_gpt_backward(m);
        exec_adamw a = adamw();
        a.lr = exec_lr_at(a.lr, warmup, steps, s);
        a.clip = clip;
        exec_gpt_sgd_step(m, &a);
    }
    exec_tensor tt[EXEC_P_COUNT];
    *P = exec_gpt_param_table(&cfg, tt);
    float *w = malloc(sizeof *w * *P);
    memcpy(w, exec_gpt_params(m), sizeof *w * *P);
    free(tok);
    free(tgt);
    exec_gpt_free(m);
    exec_corpus_free(&c);
    return w;
}

/* An SGD job beside an AdamW one: no moments kept or copied, and under
 * every sharded policy and the baseline its weights are SGD's alone, bit
 * for bit; its shards hold two arrays where AdamW's hold four. */
Test(exec_workload, sgd_jobs_train_as_plain_sgd)
{
    char *dir = test_tmpdir();
    char *wf = write_file(dir, "w.json",
        "{\"jobs\": [\n"
        "  {\"model\": \"gpt-tiny\", \"batch\": 4, \"samples\": 12},\n"
        "  {\"model\": \"gpt-tiny\", \"batch\": 4, \"samples\": 12,"
        " \"optimizer\": \"sgd\"}\n]}\n");
    exec_wl *w = open_wl(wf, 2, adamw(), 21, 3, 1);
    util_err e = {0};
    cr_assert_eq(exec_wl_job_sgd(w, 0), 0);
    cr_assert_eq(exec_wl_job_sgd(w, 1), 1);
    /* the same model with less state per parameter: no more shards */
    cr_expect_leq(shards(w, 1), shards(w, 0));
    size_t P, P0;
    float *ref = sgd_reference("gpt-tiny", 4, 3, 22, 0, &P);
    float *ref0 = train_reference("gpt-tiny", 4, 3, 21, adamw(), 0, &P0);
    cr_assert_eq(P, P0);
    const exec_wl_policy pols[] = {EXEC_WL_HYDRA, EXEC_WL_RANDOM, EXEC_WL_RR,
                                   EXEC_WL_SEQUENTIAL};
    for (int i = 0; i < 4; i++) {
        exec_wl_result r;
        cr_assert_eq(exec_wl_run(w, pols[i], &r, &e), 0, "%s", e.msg);
        const char *pn = exec_wl_policy_name(pols[i]);
        cr_expect(!memcmp(r.job[1].params, ref, P * sizeof(float)),
                  "%s: the SGD job's weights differ from SGD's", pn);
        cr_expect_null(r.job[1].adam_m, "%s: moments for an SGD job", pn);
        cr_expect(!memcmp(r.job[0].params, ref0, P * sizeof(float)),
                  "%s: the AdamW job's weights differ", pn);
        cr_expect(memcmp(r.job[1].params, ref0, P * sizeof(float)),
                  "%s: SGD trained as AdamW", pn);
        exec_wl_result_free(&r);
    }
    exec_wl_result r;
    cr_assert_neq(exec_wl_run(w, EXEC_WL_PIPELINE, &r, &e), 0);
    cr_expect(strstr(e.msg, "trains with AdamW only"), "%s", e.msg);
    exec_wl_result_free(&r);
    free(ref);
    free(ref0);
    exec_wl_free(w);
    free(wf);
    test_rm_rf(dir);
}

/* Clipping: a job's step waits for its last shard's gradient and is
 * taken on the host with the global norm, so under every sharded policy
 * each job (AdamW or SGD, cut in shards or whole) ends with the clipped
 * reference's bits, which are not the unclipped ones; the prediction
 * copies what the run copies. */
Test(exec_workload, clipping_steps_each_job_as_the_clipped_reference)
{
    char *dir = test_tmpdir();
    char *wf = write_file(dir, "w.json",
        "{\"jobs\": [\n"
        "  {\"model\": \"gpt-tiny\", \"batch\": 4, \"samples\": 12},\n"
        "  {\"model\": \"gpt-tiny\", \"batch\": 4, \"samples\": 12,"
        " \"optimizer\": \"sgd\"},\n"
        "  {\"model\": \"" PICO "\", \"batch\": 8, \"samples\": 16}\n]}\n");
    exec_adamw a = adamw();
    a.clip = 0.5f;
    exec_wl *w = open_wl(wf, 2, a, 31, 5, 1);
    util_err e = {0};
    /* cut in shards (AdamW and SGD) or whole */
    cr_assert_geq(shards(w, 0), 2);
    cr_assert_geq(shards(w, 1), 2);
    cr_assert_eq(shards(w, 2), 1);
    size_t P[3], Pu;
    float *ref[3];
    ref[0] = train_reference("gpt-tiny", 4, 3, 31, a, 1, &P[0]);
    ref[1] = sgd_reference("gpt-tiny", 4, 3, 32, a.clip, &P[1]);
    ref[2] = train_reference(PICO, 8, 2, 33, a, 1, &P[2]);
    float *unclipped = train_reference("gpt-tiny", 4, 3, 31, adamw(), 0, &Pu);
    cr_assert(memcmp(unclipped, ref[0], Pu * sizeof(float)),
              "clip 0.5 changed nothing: the test would not see clipping");
    const exec_wl_policy pols[] = {EXEC_WL_HYDRA, EXEC_WL_RANDOM, EXEC_WL_RR,
                                   EXEC_WL_SEQUENTIAL};
    for (int i = 0; i < 4; i++) {
        exec_wl_result r;
        cr_assert_eq(exec_wl_run(w, pols[i], &r, &e), 0, "%s", e.msg);
        const char *pn = exec_wl_policy_name(pols[i]);
        /* the prediction copies what the run copied: gradients out, no
         * moments in or out (the host steps the job) */
        double moved = r.h2d_bytes + r.d2h_bytes;
        if (pols[i] != EXEC_WL_SEQUENTIAL)
            cr_expect(fabs(r.predicted_copy_bytes - moved) < 0.05 * moved,
                      "%s: %.0f bytes copied, %.0f predicted", pn, moved,
                      r.predicted_copy_bytes);
        for (int j = 0; j < 3; j++) {
            size_t n = P[j] * sizeof(float);
            cr_expect(!memcmp(r.job[j].params, ref[j], n), "%s: job %d's "
                      "weights differ from the clipped reference's", pn, j);
            if (j != 1)
                cr_expect(!memcmp(r.job[j].adam_m, ref[j] + P[j], n) &&
                          !memcmp(r.job[j].adam_v, ref[j] + 2 * P[j], n),
                          "%s: job %d's moments differ", pn, j);
        }
        exec_wl_result_free(&r);
    }
    for (int j = 0; j < 3; j++) free(ref[j]);
    free(unclipped);
    exec_wl_free(w);
    free(wf);
    test_rm_rf(dir);
}

/* A workload file in a fresh folder, and the command on it. */
static void expect_wl(int code, const char *want, const char *text,
                      const char *args)
{
    char *dir = test_tmpdir();
    char *wf = write_file(dir, "w.json", text);
    cli_expect(code, want, "exec --workload %s --hw cpu x2 --steps 1 %s", wf,
               args);
    free(wf);
    test_rm_rf(dir);
}

Test(exec_workload, errors_name_the_file_line_and_field)
{
    expect_wl(2, "w.json:2:12: field 'jobs[1].model': model 't5-3b': "
              "an encoder-decoder (T5): a workload's jobs are decoders or "
              "encoders",
              "{\"jobs\": [{\"model\": \"gpt-tiny\", \"batch\": 2, \"samples\": 2},\n"
              " {\"model\": \"t5-3b\", \"batch\": 2, \"samples\": 2}]}\n", "");
    expect_wl(2, "w.json:1:21: field 'jobs[0].model': unknown model 'gpt-nano'",
              "{\"jobs\": [{\"model\": \"gpt-nano\", \"batch\": 2, \"samples\": 2}]}\n",
              "");
    expect_wl(2, "field 'jobs[0]': the pipeline baseline trains with AdamW "
              "only (the pipeline executor's optimizer) and job job0 is SGD",
              "{\"jobs\": [{\"model\": \"gpt-tiny\", \"batch\": 2, \"samples\": 2,"
              " \"optimizer\": \"sgd\"}]}\n", "--policy hydra,pipeline");
    expect_wl(2, "malformed JSON",
              "{\"jobs\": [{\"model\": \"gpt-tiny\", \"batch\": 2\n", "");
    expect_wl(2, "field 'jobs[0].batch'",
              "{\"jobs\": [{\"model\": \"gpt-tiny\", \"batch\": 0, \"samples\": 2}]}\n",
              "");
    expect_wl(2, "w.json:1:11: field 'jobs[0]': job 'job0' (gpt-tiny, batch 4 "
              "x 64 tokens) does not fit a device of 2.00 MiB even one layer "
              "per shard: layer l0 needs",
              "{\"jobs\": [{\"model\": \"gpt-tiny\", \"batch\": 4, \"samples\": 4}]}\n",
              "--mem-per-device 2M");
    cli_expect(2, "a workload runs on CPU devices", "exec --workload w.json "
               "--hw rtx2080ti x2");
    cli_expect(2, "--policy 'lrtf': expected hydra, random, round-robin, "
               "sequential or pipeline", "exec --workload w.json --hw cpu x2 "
               "--policy lrtf");
    cli_expect(2, "--hw cpu xN is required", "exec --workload w.json");
    cli_expect(2, "--hw cpu x9999: expected a count of 1 to 4096 devices",
               "exec --workload w.json --hw 'cpu x9999'");
    /* what the run would write at its end is checked before it trains */
    cli_expect(2, "--trace: the baselines have no shard-steps", "exec "
               "--workload w.json --hw 'cpu x2' --policy sequential --trace "
               "t.json");
    cli_expect(2, "--trace '/nonexistent/t.json': folder", "exec --workload "
               "w.json --hw cpu x2 --trace /nonexistent/t.json");
    /* a count past the limit says the limit (it said 'expected a positive
     * integer' of 1000000000) */
    /* a size says its unit: a bare number is bytes (16 was 16 bytes) */
    expect_wl(2, "--mem-per-device '16': expected a size with its unit",
              "{\"jobs\": [{\"model\": \"gpt-tiny\", \"batch\": 2, "
              "\"samples\": 2}]}\n", "--mem-per-device 16");
    /* at most 1024T, as --mem-budget and --host-mem (1e300G was an
     * infinite budget) */
    expect_wl(2, "--mem-per-device '1e300G': expected a size with its "
              "unit, such as 64M (at most 1024T)",
              "{\"jobs\": [{\"model\": \"gpt-tiny\", \"batch\": 2, "
              "\"samples\": 2}]}\n", "--mem-per-device 1e300G");
    expect_wl(2, "--steps '1000000000': expected a whole number of steps "
              "in [1, 100000000]",
              "{\"jobs\": [{\"model\": \"gpt-tiny\", \"batch\": 2, \"samples\": 2}]}\n",
              "--steps 1000000000");
    /* a corpus too short names the flag that gives another */
    char *dir = test_tmpdir();
    char *txt = write_file(dir, "short.txt", "too short to train on\n");
    char *wf = write_file(dir, "w.json", "{\"jobs\": [{\"model\": "
                          "\"gpt-tiny\", \"batch\": 2, \"samples\": 2}]}\n");
    cli_expect(2, "short.txt: 22 bytes is too short for sequences of 64 "
               "tokens (needs at least 10240 bytes: ten blocks of 1024, one "
               "in ten held out for validation): give a longer text with "
               "--data FILE", "exec --workload %s --hw cpu x2 --data %s", wf,
               txt);
    /* one job is one job (it said '1 jobs') */
    cli_result r = cli_run("exec --workload %s --hw cpu x2 --steps 1 "
                           "--policy hydra", wf);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "w.json, 1 job on 2 CPU devices"), "%s", r.out);
    cli_result_free(&r);
    free(txt);
    free(wf);
    test_rm_rf(dir);
}

/* A job with no pipeline plan on the devices (gpt-pico's batch of 8
 * splits over no layout of 9) leaves the pipeline baseline out, as SGD
 * jobs do, and the sharded policies run; asked for by name, it is an
 * error (the whole run stopped with exit 2 at the baseline). */
Test(exec_workload, a_job_no_pipeline_fits_leaves_the_baseline_out)
{
    const char *w = "tests/data/workload/exec-tiny.json";
    cli_result r = cli_run("exec --workload %s --hw cpu x9 --steps 1 "
                           "--mem-per-device 16M", w);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "the pipeline baseline is left out: "), "%s",
              r.err);
    cr_expect(strstr(r.err, "field 'jobs[2]': no pipeline plan of"), "%s",
              r.err);
    cr_expect(strstr(r.out, "\n  hydra "), "%s", r.out);
    cr_expect(!strstr(r.out, "\n  pipeline "), "%s", r.out);
    /* each policy's device peak is its devices' most, and says which
     * (device 0's was printed: 0 B where a policy left it idle) */
    cr_expect(strstr(r.out, "; device peak ") && strstr(r.out, " (device ") &&
                  !strstr(r.out, "device peak 0 B"), "%s", r.out);
    cli_result_free(&r);
    cli_expect(2, "no pipeline plan of", "exec --workload %s --hw cpu x9 "
               "--steps 1 --mem-per-device 16M --policy pipeline", w);
}

Test(exec_workload, json_and_trace)
{
    char *dir = test_tmpdir();
    char *wf = write_file(dir, "w.json",
        "{\"jobs\": [{\"model\": \"gpt-tiny\", \"batch\": 2, \"samples\": 4},"
        " {\"model\": \"gpt-tiny\", \"batch\": 2, \"samples\": 4}]}\n");
    char tr[600];
    snprintf(tr, sizeof tr, "%s/t.json", dir);
    cli_result r = cli_run("exec --workload %s --hw cpu x2 --mem-per-device 10M "
                           "--policy hydra,sequential,pipeline --json --trace "
                           "%s", wf, tr);
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    cr_assert_not_null(j, "%s", je.text);
    json_t *pol = json_object_get(j, "policies");
    cr_assert_eq(json_array_size(pol), 3);
    const char *names[3] = {"hydra", "sequential", "pipeline"};
    for (size_t i = 0; i < 3; i++) {
        json_t *p = json_array_get(pol, i);
        cr_assert_str_eq(json_string_value(json_object_get(p, "policy")),
                         names[i]);
        cr_assert_gt(json_real_value(json_object_get(p, "makespan_s")), 0);
        cr_assert_gt(json_real_value(json_object_get(p, "predicted_makespan_s")), 0);
        /* the pipeline sums in its own order: close, not equal */
        double d = json_real_value(json_object_get(p,
                                   "weights_max_diff_baseline"));
        cr_assert(i < 2 ? json_is_true(json_object_get(p,
                                       "weights_equal_baseline")) && d == 0
                        : d > 0 && d < 1e-3, "%s: %g", names[i], d);
        json_t *plans = json_object_get(p, "plans");
        cr_assert_eq(json_array_size(plans), i < 2 ? 0 : 2);
        /* the baseline keeps no host pool: its device holds the job */
        if (i == 1)
            cr_expect(json_number_value(json_object_get(p,
                                      "host_peak_bytes")) == 0 &&
                      json_number_value(json_object_get(p,
                                      "predicted_host_peak_bytes")) == 0 &&
                      json_number_value(json_array_get(json_object_get(p,
                                      "device_peak_bytes"), 0)) > 0,
                      "%s", r.out);
        if (i == 2)
            cr_assert(strstr(json_string_value(json_array_get(plans, 0)),
                             "(pp x dp x tp)"));
    }
    cr_assert_gt(json_real_value(json_object_get(j, "hydra_speedup")), 0);
    cr_assert_gt(json_real_value(json_object_get(j,
                                 "hydra_speedup_over_pipeline")), 0);
    size_t want = 0;
    for (size_t i = 0; i < 2; i++) {
        json_t *jb = json_array_get(json_object_get(j, "jobs"), i);
        want += 2 * (2 * json_integer_value(json_object_get(jb, "shards")) - 1);
    }
    json_decref(j);
    json_t *t = json_load_file(tr, 0, &je);
    cr_assert_not_null(t, "%s", je.text);
    size_t x = 0, k;
    json_t *ev;
    json_array_foreach(json_object_get(t, "traceEvents"), k, ev)
        x += !strcmp(json_string_value(json_object_get(ev, "ph")), "X");
    /* a shard-step an event: two steps of 2k-1 per job */
    cr_assert_eq(x, want);
    json_decref(t);
    cli_result_free(&r);
    /* the text: no host pool for the baseline, its device's bytes said
     * beside the budget it is not held to; more devices than cores are
     * said to run oversubscribed */
    r = cli_run("exec --workload %s --hw cpu x2 --mem-per-device 10M "
                "--policy hydra,sequential", wf);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "not held to the 10.00 MiB budget"), "%s", r.out);
    cli_result_free(&r);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    r = cli_run("exec --workload %s --hw cpu x%ld --mem-per-device 10M "
                "--policy hydra", wf, cores + 1);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "run oversubscribed"), "%s", r.err);
    cli_result_free(&r);
    free(wf);
    test_rm_rf(dir);
}
