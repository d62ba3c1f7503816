/* Memory tiers of the executor: with the model states in host memory or
 * in a file, fetched layer by layer, the weights and AdamW moments after
 * a few steps are those of the run without offload bit for bit (the same
 * kernels on the same values in the same order; the CPU's AdamW is
 * elementwise), for zero-offload and fuyou, DRAM and NVMe, one device and
 * a two-stage pipeline; the device's peak is lower; a path that cannot
 * take a file or a disk that fills up ends the run with one message
 * naming the path (exit 1 from the command line), and no file is left. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"
#include "sim/sim.h"
#include "tests/harness.h"

#define PICO "tests/data/exec/gpt-pico.json"
#define CORPUS "/usr/share/common-licenses/GPL-3"

/* A plan of model in pp stages, balanced cuts on CPU devices. */
static void make_plan(const char *model, sim_sched sched, int pp, int nmb,
                      sim_plan *p)
{
    util_err e;
    prof_model *m = prof_model_load(model, &e);
    cr_assert_not_null(m, "%s", e.msg);
    sim_plan_init(p);
    snprintf(p->model, sizeof p->model, "%s", model);
    snprintf(p->hw, sizeof p->hw, "cpu x%d", pp);
    p->sched = sched;
    p->pp = pp;
    p->dp = p->tp = 1;
    p->mbs = 2;
    p->n_mb = nmb;
    p->waves = 1;
    sim_plan_stages(p, pp);
    prof_gpu g;
    cr_assert_eq(prof_gpu_get("cpu", &g, &e), 0);
    cr_assert_eq(sim_partition_balanced(m, &g, p->mbs, pp, p->first_op,
                                        p->last_op, &e), 0, "%s", e.msg);
    sim_sched_opts so = {.sched = sched, .pp = pp, .n_stages = pp,
                         .waves = 1};
    sim_sched_map(&so, p->stage_device);
    prof_model_free(m);
}

static exec_pipe_opts opts(const sim_plan *p, float clip)
{
    exec_pipe_opts o = {0};
    o.plan = p;
    o.data = CORPUS;
    o.steps = 3;
    o.adamw = (exec_adamw){.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-8f, .weight_decay = 0.1f, .clip = clip};
    o.warmup = -1;
    o.seed = 1337;
    return o;
}

static int files_in(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *x; (x = readdir(d));)
        n += strcmp(x->d_name, ".") && strcmp(x->d_name, "..");
    closedir(d);
    return n;
}

/* The run with policy and tier against the same run without offload:
 * final weights and moments bit for bit, the device's peak lower. */
static void same_bits(const char *model, sim_sched sched, int pp, int nmb,
                      float clip, exec_offload_policy pol, exec_tier tier)
{
    sim_plan p;
    make_plan(model, sched, pp, nmb, &p);
    exec_pipe_result a, b;
    util_err e = {0};
    exec_pipe_opts o = opts(&p, clip);
    cr_assert_eq(exec_pipe_run(&o, &a, &e), 0, "%s", e.msg);
    char *dir = test_tmpdir();
    o.offload = (exec_offload){.policy = pol, .tier = tier, .path = dir};
    cr_assert_eq(exec_pipe_run(&o, &b, &e), 0, "%s: %s",
                 exec_offload_name(pol), e.msg);
    cr_assert_eq(a.n_params, b.n_params);
    size_t bytes = a.n_params * sizeof(float);
    cr_expect_eq(memcmp(a.params, b.params, bytes), 0, "%s %s: weights",
                 exec_offload_name(pol), exec_tier_name(tier));
    cr_expect_eq(memcmp(a.adam_m, b.adam_m, bytes), 0, "first moments");
    cr_expect_eq(memcmp(a.adam_v, b.adam_v, bytes), 0, "second moments");
    for (int k = 0; k < a.steps_run; k++)
        cr_expect_eq(a.loss[k], b.loss[k], "step %d loss", k);
    for (int d = 0; d < a.n_devices; d++) {
        cr_expect_lt(b.peak_bytes[d], a.peak_bytes[d], "device %d: peak "
                     "%.0f with offload, %.0f without", d, b.peak_bytes[d],
                     a.peak_bytes[d]);
        cr_expect_eq(b.static_bytes[d], 0);
    }
    /* every step's states went through the tier and the CPU's AdamW */
    cr_expect_gt(b.ofl_read_bytes, 0);
    cr_expect_geq(b.adam_params, (double)a.steps_run * a.n_params,
                 "parameters updated (a tied head's copy too)");
    if (tier == EXEC_TIER_NVME) cr_expect_gt(b.ofl_write_bytes, 0);
    else cr_expect_eq(b.ofl_write_bytes, 0);
    cr_expect_eq(files_in(dir), 0, "the offload file is removed");
    exec_pipe_result_free(&a);
    exec_pipe_result_free(&b);
    sim_plan_free(&p);
    test_rm_rf(dir);
}

Test(exec_offload, zero_dram_one_device)
{
    same_bits(PICO, SIM_SCHED_GPIPE, 1, 2, 1.0f,
              EXEC_OFFLOAD_ZERO, EXEC_TIER_DRAM);
}

Test(exec_offload, zero_nvme_one_device)
{
    same_bits(PICO, SIM_SCHED_GPIPE, 1, 2, 1.0f,
              EXEC_OFFLOAD_ZERO, EXEC_TIER_NVME);
}

Test(exec_offload, fuyou_dram_one_device)
{
    same_bits(PICO, SIM_SCHED_GPIPE, 1, 2, 0,
              EXEC_OFFLOAD_FUYOU, EXEC_TIER_DRAM);
}

Test(exec_offload, fuyou_nvme_one_device)
{
    same_bits(PICO, SIM_SCHED_GPIPE, 1, 2, 0,
              EXEC_OFFLOAD_FUYOU, EXEC_TIER_NVME);
}

Test(exec_offload, zero_dram_two_stages)
{
    same_bits(PICO, SIM_SCHED_1F1B, 2, 4, 1.0f,
              EXEC_OFFLOAD_ZERO, EXEC_TIER_DRAM);
}

Test(exec_offload, zero_nvme_two_stages)
{
    same_bits(PICO, SIM_SCHED_1F1B, 2, 4, 1.0f,
              EXEC_OFFLOAD_ZERO, EXEC_TIER_NVME);
}

Test(exec_offload, fuyou_dram_two_stages)
{
    same_bits(PICO, SIM_SCHED_1F1B, 2, 4, 0,
              EXEC_OFFLOAD_FUYOU, EXEC_TIER_DRAM);
}

Test(exec_offload, fuyou_nvme_two_stages)
{
    same_bits(PICO, SIM_SCHED_1F1B, 2, 4, 0,
              EXEC_OFFLOAD_FUYOU, EXEC_TIER_NVME);
}

/* BERT's tied decoder has a bias of its own: on a stage that holds the
 * embedding too it reads the table's chunk beside its own. */
Test(exec_offload, bert_one_device_and_two_stages)
{
    const char *bert = "tests/data/exec/bert-pico.json";
    same_bits(bert, SIM_SCHED_GPIPE, 1, 2, 1.0f, EXEC_OFFLOAD_ZERO,
              EXEC_TIER_DRAM);
    same_bits(bert, SIM_SCHED_GPIPE, 1, 2, 0, EXEC_OFFLOAD_FUYOU,
              EXEC_TIER_NVME);
    same_bits(bert, SIM_SCHED_1F1B, 2, 4, 0, EXEC_OFFLOAD_FUYOU,
              EXEC_TIER_DRAM);
}

/* A run that fails: code 1, the message naming the path. */
static void fails(exec_offload of, const char *want)
{
    sim_plan p;
    make_plan(PICO, SIM_SCHED_1F1B, 2, 2, &p);
    exec_pipe_opts o = opts(&p, 0);
    o.offload = of;
    exec_pipe_result r;
    util_err e = {0};
    cr_assert_neq(exec_pipe_run(&o, &r, &e), 0);
    cr_expect_eq(e.code, 1, "%s", e.msg);
    cr_expect_not_null(strstr(e.msg, of.path), "%s", e.msg);
    cr_expect_not_null(strstr(e.msg, want), "%s", e.msg);
    exec_pipe_result_free(&r);
    sim_plan_free(&p);
}

Test(exec_offload, unwritable_path)
{
    char *dir = test_tmpdir(), file[600], gone[700];
    snprintf(file, sizeof file, "%s/plain-file", dir);
    FILE *f = fopen(file, "w");
    fputs("the user's\n", f);
    fclose(f);
    /* root writes anywhere: a file where a folder should be is refused
     * whoever runs the test */
    fails((exec_offload){.policy = EXEC_OFFLOAD_ZERO, .tier = EXEC_TIER_NVME,
                         .path = file},
          "cannot create a file there");
    snprintf(gone, sizeof gone, "%s/no/such/dir", dir);
    fails((exec_offload){.policy = EXEC_OFFLOAD_FUYOU, .tier = EXEC_TIER_NVME,
                         .path = gone},
          "No such file or directory");
    f = fopen(file, "r");
    char line[32] = "";
    cr_assert(fgets(line, sizeof line, f));
    fclose(f);
    cr_expect_str_eq(line, "the user's\n", "nothing of the user's touched");
    test_rm_rf(dir);
}

Test(exec_offload, disk_full)
{
    char *dir = test_tmpdir();
    /* the states fit; the first updates' write-back does not */
    fails((exec_offload){.policy = EXEC_OFFLOAD_FUYOU, .tier = EXEC_TIER_NVME,
                         .path = dir, .full_after_bytes = 1 << 20},
          "No space left on device");
    fails((exec_offload){.policy = EXEC_OFFLOAD_ZERO, .tier = EXEC_TIER_NVME,
                         .path = dir, .full_after_bytes = 4096},
          "No space left on device");
    cr_expect_eq(files_in(dir), 0, "the offload file is removed");
    test_rm_rf(dir);
}

Test(exec_offload, refusals)
{
    sim_plan p;
    make_plan(PICO, SIM_SCHED_1F1B, 2, 2, &p);
    exec_pipe_opts o = opts(&p, 1.0f);
    o.offload = (exec_offload){.policy = EXEC_OFFLOAD_FUYOU,
                               .tier = EXEC_TIER_DRAM};
    exec_pipe_result r;
    util_err e = {0};
    cr_assert_neq(exec_pipe_run(&o, &r, &e), 0);
    cr_expect_eq(e.code, 2);
    cr_expect_not_null(strstr(e.msg, "--clip 0"), "%s", e.msg);
    exec_pipe_result_free(&r);
    sim_plan_free(&p);
}

/* The command line: bad values and combinations are usage errors (2); a
 * path that is no writable folder is refused before the run (2), naming
 * it; a disk that fills during the run fails it (1); the report says
 * the tier's rates, in --json too. */
Test(exec_offload, cli)
{
    char *dir = test_tmpdir();
    char *cwd = getcwd(NULL, 0);
    cli_result r = cli_run("sim --hw cpu x2 --model %s/" PICO " --schedule "
                           "1f1b --pp 2 --mbs 2 --microbatches 2 --out "
                           "%s/p.json", cwd, dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    const char *usage[][2] = {
        {"--offload zero", "expected none, zero-offload or fuyou"},
        {"--offload-tier nvme", "needs --offload zero-offload or fuyou"},
        {"--offload zero-offload --offload-path .", "give --offload-tier nvme"},
        {"--offload fuyou --offload-tier disk", "expected dram or nvme"}};
    for (int i = 0; i < 4; i++) {
        r = cli_run("exec --plan %s/p.json --steps 2 %s", dir, usage[i][0]);
        cr_expect_eq(r.code, 2, "%s: %s", usage[i][0], r.err);
        cr_expect(strstr(r.err, usage[i][1]), "%s: %s", usage[i][0], r.err);
        cli_result_free(&r);
    }
    /* a folder that is no folder, or is missing, is the user's input:
     * refused before the run (2), as calibrate refuses it */
    r = cli_run("exec --plan %s/p.json --steps 2 --quiet --offload fuyou "
                "--clip 0 --offload-tier nvme --offload-path %s/p.json", dir,
                dir);
    cr_expect_eq(r.code, 2, "%s", r.err);
    cr_expect_not_null(strstr(r.err, "--offload-path '"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "p.json': not a folder"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --plan %s/p.json --steps 2 --quiet --offload "
                "zero-offload --offload-tier nvme --offload-path %s/no/such",
                dir, dir);
    cr_expect_eq(r.code, 2, "%s", r.err);
    cr_expect_not_null(strstr(r.err, "no/such': No such file or directory"),
                       "%s", r.err);
    cli_result_free(&r);
    cr_expect_eq(files_in(dir), 1, "p.json alone: nothing written");
    r = cli_run("exec --plan %s/p.json --steps 2 --quiet --offload "
                "zero-offload --offload-tier nvme --offload-path %s", dir,
                dir);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_not_null(strstr(r.out, "offload zero-offload, nvme tier"), "%s",
                       r.out);
    cli_result_free(&r);
    r = cli_run("exec --plan %s/p.json --steps 2 --json --offload fuyou "
                "--clip 0", dir);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_not_null(strstr(r.out, "\"adam_params_per_s\""), "%s", r.out);
    cli_result_free(&r);
    /* a disk that fills during the run */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "SLUICE_OFFLOAD_FULL=1M $SLUICE exec --plan "
             "%s/p.json --steps 3 --quiet --offload fuyou --clip 0 "
             "--offload-tier nvme --offload-path %s 2>%s/err >/dev/null", dir,
             dir, dir);
    cr_expect_eq(sh_run("%s", cmd), 1);
    cr_expect_eq(files_in(dir), 2, "p.json and err: no offload file left");
    snprintf(cmd, sizeof cmd, "grep -c 'No space left on device' %s/err",
             dir);
    cr_expect_eq(sh_run("%s >/dev/null", cmd), 0, "the message says why");
    free(cwd);
    test_rm_rf(dir);
}

/* T5: the token table read by the encoder's and decoder's embeddings and
 * the tied head, and each stack's relative-position table read by every
 * self-attention's softmax, from the chunk of the op that holds it (a
 * softmax's backward writes the table's gradient: before, a T5 under
 * --offload lost it and was refused); T5 1.1's untied head and GeGLU. */
Test(exec_offload, t5_one_device_and_two_stages)
{
    const char *t5 = "tests/data/exec/t5-tiny.json",
               *v11 = "tests/data/exec/t5-v11-tiny.json";
    same_bits(t5, SIM_SCHED_GPIPE, 1, 2, 1.0f, EXEC_OFFLOAD_ZERO,
              EXEC_TIER_DRAM);
    same_bits(t5, SIM_SCHED_GPIPE, 1, 2, 0, EXEC_OFFLOAD_FUYOU,
              EXEC_TIER_NVME);
    same_bits(t5, SIM_SCHED_1F1B, 2, 4, 1.0f, EXEC_OFFLOAD_ZERO,
              EXEC_TIER_NVME);
    same_bits(t5, SIM_SCHED_1F1B, 2, 4, 0, EXEC_OFFLOAD_FUYOU,
              EXEC_TIER_DRAM);
    same_bits(v11, SIM_SCHED_1F1B, 2, 4, 0, EXEC_OFFLOAD_FUYOU,
              EXEC_TIER_DRAM);
    /* zero bubble: the softmaxes add to their tables in B, the weights'
     * gradients come in W; fuyou's early update waits for both (one
     * stage: no copy of a table elsewhere to wait for) */
    same_bits(t5, SIM_SCHED_ZBH1, 1, 2, 0, EXEC_OFFLOAD_FUYOU,
              EXEC_TIER_DRAM);
}
