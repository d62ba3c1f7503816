/* Plans of the offload schedules run by the executor (exec/tiers.c): the
 * IR's tier tasks (fetches, gradient copies, the drive's reads and
 * writes, the CPU's AdamW, swapped activations) all run, every step; the
 * weights and moments after a few steps are those of the same batch
 * trained on one device without offload; the device holds less; a tier
 * path that cannot take the file, or a disk that fills up during the run,
 * ends it with one message naming the path and leaves no file. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"
#include "exec/runtime.h"
#include "sim/sim.h"
#include "tests/harness.h"

#define PICO "tests/data/exec/gpt-pico.json"

/* The model the plans of a test train (PICO unless the test says). */
static const char *model = PICO;
#define CORPUS "/usr/share/common-licenses/GPL-3"

static exec_pipe_opts opts(const sim_plan *p, float clip)
{
    exec_pipe_opts o = {0};
    o.plan = p;
    o.data = CORPUS;
    o.steps = 3;
    o.adamw = (exec_adamw){.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-6f, .weight_decay = 0.1f, .clip = clip};
    o.warmup = -1;
    o.seed = 1337;
    return o;
}

/* The data-parallel ranks of the offload plans a test runs (their
 * reference trains the same batch on one device). */
static int ranks = 1;
/* and their microbatches a rank */
static int micro = 2;
/* how far the device's copies may stray from the IR's bytes (below) */
static double bytes_tol = 0.02;

/* `sluice sim` writes the plan (schedule and flags as given) on `dp`
 * devices, of m microbatches each. */
static void plan_dp(const char *dir, int dp, int m, const char *flags,
                    sim_plan *p)
{
    char path[600];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    cli_expect(0, "", "sim --hw cpu x%d --model %s --mbs 2 --microbatches %d "
               "%s --out %s", dp, model, m, flags, path);
    util_err e;
    cr_assert_eq(sim_plan_load(path, p, &e), 0, "%s", e.msg);
}

static void plan_of(const char *dir, const char *flags, sim_plan *p)
{
    plan_dp(dir, 1, 2, flags, p);
}

static int files_in(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *x; (x = readdir(d));)
        n += strcmp(x->d_name, ".") && strcmp(x->d_name, "..") &&
             strcmp(x->d_name, "plan.json");
    closedir(d);
    return n;
}

/* Largest |a - b| over n floats, relative to the largest |a|. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)a[i]));
    }
    return m > 0 ? d / m : d;
}

/* The offload plan (flags, and the fine-tuning mode ft: "" trains every
 * weight) against GPipe on one device with the same mode: the same
 * weights (adapters too), moments and losses; every tier task ran in
 * every step; the device peaked lower (the reference keeps its frozen
 * weights as they started, tests/test_exec_lora.c). */
static void same_training_ft(const char *flags, const char *ft, float clip,
                             int nvme)
{
    char *dir = test_tmpdir();
    sim_plan p, ref;
    char f1[300], f2[300];
    snprintf(f1, sizeof f1, "%s %s --dp %d", flags, ft, ranks);
    snprintf(f2, sizeof f2, "--schedule gpipe --pp 1 %s", ft);
    plan_dp(dir, ranks, micro, f1, &p);
    plan_dp(dir, 1, micro * ranks, f2, &ref);
    flags = f1;
    exec_pipe_result a, b;
    util_err e = {0};
    exec_pipe_opts o = opts(&ref, clip);
    cr_assert_eq(exec_pipe_run(&o, &a, &e), 0, "%s", e.msg);
    o = opts(&p, clip);
    o.offload.path = dir;
    cr_assert_eq(exec_pipe_run(&o, &b, &e), 0, "%s: %s", flags, e.msg);
    cr_assert_eq(a.n_params, b.n_params);
    cr_expect_lt(rel_diff(a.params, b.params, a.n_params), 1e-5,
                 "%s: weights differ by %g", flags,
                 rel_diff(a.params, b.params, a.n_params));
    cr_expect_lt(rel_diff(a.adam_m, b.adam_m, a.n_params), 1e-4,
                 "%s: first moments", flags);
    cr_expect_lt(rel_diff(a.adam_v, b.adam_v, a.n_params), 1e-4,
                 "%s: second moments", flags);
    cr_assert_eq(a.n_lora, b.n_lora);
    if (a.n_lora)
        cr_expect_lt(rel_diff(a.lora, b.lora, a.n_lora), 1e-5,
                     "%s: adapters differ by %g", flags,
                     rel_diff(a.lora, b.lora, a.n_lora));
    for (int k = 0; k < a.steps_run; k++)
        cr_expect_lt(fabs(a.loss[k] - b.loss[k]), 1e-5 * fabs(a.loss[k]),
                     "%s: step %d loss %.9g against %.9g", flags, k,
                     b.loss[k], a.loss[k]);
    cr_expect(b.tiers);
    /* every tier task of the IR ran in every step */
    int tier = 0;
    for (int id = 0; id < b.n_tasks; id++) {
        int s = b.ir->tasks[id].stream;
        if (s == SIM_STREAM_COMPUTE || s == SIM_STREAM_RECV ||
            s == SIM_STREAM_SEND || s == SIM_STREAM_COLL)
            continue;
        tier++;
        for (int ep = 0; ep < b.epochs; ep++)
            cr_expect_geq(exec_pipe_times(&b, ep, id)[1],
                          exec_pipe_times(&b, ep, id)[0],
                          "%s: tier task %d in step %d", flags, id, ep);
        for (int ep = 0; ep < b.epochs; ep++)
            cr_expect_geq(exec_pipe_times(&b, ep, id)[0], 0);
    }
    cr_expect_gt(tier, 0);
    cr_expect_lt(b.peak_bytes[0], a.peak_bytes[0], "%s: device peak %.0f "
                 "against %.0f", flags, b.peak_bytes[0], a.peak_bytes[0]);
    cr_expect_geq(b.adam_params, (double)b.steps_run *
                                 (ft[0] ? (double)b.n_lora : b.n_params) *
                                 0.5, "the CPU's AdamW ran");

    cr_expect_gt(b.tier_up_bytes, 0);
    cr_expect_gt(b.tier_down_bytes, 0);
    /* the copies to and from the device move the IR's bytes, each float
     * once (the tied table's new weights too): but for a 4-bit base's
     * packing and what the executor's records keep that the simulator's
     * activations leave out, as Korthikanti's count does (the norms'
     * statistics, the loss's per token, the targets), under 2% here
     * (bytes_tol) */
    double up = 0, down = 0;
    for (int id = 0; id < b.n_tasks; id++) {
        const sim_task *k = &b.ir->tasks[id];
        if (k->kind == SIM_SWAP_IN) up += k->bytes;
        if (k->kind == SIM_SWAP_OUT) down += k->bytes;
    }
    cr_expect(fabs(b.tier_up_bytes / b.steps_run - up) <= bytes_tol * up,
              "%s %s: %.0f bytes to the device a step, the IR %.0f", flags,
              ft, b.tier_up_bytes / b.steps_run, up);
    cr_expect(fabs(b.tier_down_bytes / b.steps_run - down) <=
                  bytes_tol * down,
              "%s %s: %.0f bytes from the device a step, the IR %.0f", flags,
              ft, b.tier_down_bytes / b.steps_run, down);
    cr_expect_gt(b.tier_host_peak, 0);
    if (nvme) {
        cr_expect_gt(b.ofl_read_bytes, 0, "%s: the drive was read", flags);
        cr_expect_gt(b.ofl_write_bytes, 0, "%s: and written", flags);
        expect_drive_bytes(&b, flags);
    } else {
        cr_expect_eq(b.ofl_read_bytes, 0, "%s: no file", flags);
    }
    cr_expect_eq(files_in(dir), 0, "the tier's file is removed");
    exec_pipe_result_free(&a);
    exec_pipe_result_free(&b);
    sim_plan_free(&p);
    sim_plan_free(&ref);
    test_rm_rf(dir);
}

static void same_training(const char *flags, float clip, int nvme)
{
    same_training_ft(flags, "", clip, nvme);
}

/* LoRA and frozen layers: the tier holds what trains with its moments,
 * and the frozen weights, fetched with the rest and never stepped */
Test(exec_tiers, finetune_modes)
{
    same_training_ft("--schedule zero-offload", "--finetune lora:4", 1.0f, 0);
    same_training_ft("--schedule zero-infinity --offload-tier nvme",
                     "--finetune lora:4", 1.0f, 1);
    same_training_ft("--schedule fuyou --offload-tier dram --act-swap 0:0",
                     "--finetune frozen:1", 0, 0);
    same_training_ft("--schedule fuyou --offload-tier nvme --act-swap 2:1",
                     "--finetune lora:4", 0, 1);
}

/* Llama's decoder (RoPE, RMSNorm, SwiGLU, grouped heads) streamed from
 * the drive and stepped per layer as Fuyou does, and fetched with LoRA
 * on every matrix: the same training. */
Test(exec_tiers, llama)
{
    model = "tests/data/exec/llama-pico.json";
    same_training("--schedule fuyou --offload-tier nvme --act-swap 2:1", 0,
                  1);
    same_training_ft("--schedule zero-infinity --offload-tier dram",
                     "--finetune lora:4:all", 1.0f, 0);
    model = PICO;
}

Test(exec_tiers, zero_offload)
{
    same_training("--schedule zero-offload", 1.0f, 0);
}

Test(exec_tiers, zero_infinity_dram)
{
    same_training("--schedule zero-infinity --offload-tier dram", 1.0f, 0);
}

Test(exec_tiers, zero_infinity_nvme)
{
    same_training("--schedule zero-infinity --offload-tier nvme", 1.0f, 1);
}

Test(exec_tiers, fuyou_dram)
{
    same_training("--schedule fuyou --offload-tier dram --act-swap 0:0", 0,
                  0);
}

Test(exec_tiers, fuyou_nvme)
{
    same_training("--schedule fuyou --offload-tier nvme --act-swap 0:0", 0,
                  1);
}

/* Where host DRAM cannot hold Fuyou's swapped activations they go on to
 * the drive and come back through it, two at most waiting in DRAM on
 * their way: the same training, the drive's bytes the IR's. */
Test(exec_tiers, fuyou_activations_on_the_drive)
{
    model = "gpt-mini";
    micro = 4;
    char *dir = test_tmpdir();
    sim_plan p;
    plan_dp(dir, 1, micro, "--schedule fuyou --offload-tier nvme "
            "--act-swap 4:2 --host-mem 80M --nvme 1", &p);
    int act_writes = 0;
    util_err e;
    prof_topo *t = prof_topo_template("cpu", 1, &(prof_hw_opts){
                                          .nvme = 1, .nvme_set = 1,
                                          .host_mem_bytes = 80 << 20}, &e);
    cr_assert_not_null(t, "%s", e.msg);
    test_sim x;
    test_sim_plan(&p, t, &x);
    cr_expect_eq(x.c->act_tier, SIM_TIER_NVME);
    for (int i = 0; i < x.ir->n_tasks; i++)
        act_writes += x.ir->tasks[i].kind == SIM_NVME_WRITE &&
                      x.ir->tasks[i].mb >= 0;
    cr_expect_gt(act_writes, 0, "activations written to the drive");
    test_sim_free(&x);
    prof_topo_free(t);
    sim_plan_free(&p);
    test_rm_rf(dir);
    same_training("--schedule fuyou --offload-tier nvme --act-swap 4:2 "
                  "--host-mem 80M --nvme 1", 0, 1);
    micro = 2;
    model = PICO;
}

/* Host DRAM at its peak, measured against what the simulator's count
 * says of the run's own task times (its allocations, not its timing,
 * under test): tiers of a model whose tied table is most of it, as
 * GPT-2's is a third (the table's newest weights are the stepping
 * holder's in DRAM, its gradient's copies summed in place, the
 * gradients' buffers kept for the next step as the steps hold them at
 * their most); the training unchanged. */
static void host_vs_sim(const char *mdl, int first, int n_plans)
{
    static const char *const plans[] = {
        "--schedule fuyou --offload-tier dram",
        "--schedule zero-offload --offload-tier dram",
        "--schedule zero-infinity --offload-tier nvme --nvme 1",
        "--schedule fuyou --offload-tier nvme --nvme 1 --act-swap 2:1",
    };
    model = mdl;
    micro = 4;
    for (int k = first; k < n_plans; k++) {
        char *dir = test_tmpdir();
        sim_plan p;
        plan_dp(dir, 1, micro, plans[k], &p);
        exec_pipe_opts o = opts(&p, 0);
        o.offload.path = dir;
        exec_pipe_result b;
        util_err e = {0};
        cr_assert_eq(exec_pipe_run(&o, &b, &e), 0, "%s: %s", plans[k], e.msg);
        /* every step (the first makes the gradients' buffers as it
         * goes) */
        double most = 0;
        sim_result r = {0};
        int64_t *st = util_calloc((size_t)b.n_tasks, sizeof *st);
        int64_t *en = util_calloc((size_t)b.n_tasks, sizeof *en);
        for (int ep = 0; ep < b.epochs; ep++) {
            for (int id = 0; id < b.n_tasks; id++) {
                st[id] = exec_pipe_times(&b, ep, id)[EXEC_T_START];
                en[id] = exec_pipe_times(&b, ep, id)[EXEC_T_END];
            }
            r.start_ns = st;
            r.end_ns = en;
            sim_tier_use tu;
            if (ep) sim_offload_tier_use(b.ir, &r, b.costs, &tu);
            else sim_offload_tier_use_cold(b.ir, &r, b.costs, &tu);
            most = fmax(most, tu.host_peak);
            sim_tier_use_free(&tu);
        }
        free(st);
        free(en);
        /* the executor's records keep a few floats more (the norms'
         * statistics, the loss's per token); and the tier threads stamp
         * their tasks a little apart from when their buffers come and
         * go, so on a loaded machine one transfer's buffer may be
         * counted across an instant the executor had already passed, or
         * held past its task's end: the count may miss the peak by one
         * such buffer either way (a clean clone's run under load read
         * 8667136 bytes measured against 8426752 counted, one transfer
         * 3158016) */
        double slack = 0;
        for (int id = 0; id < b.n_tasks; id++) {
            const sim_task *t = &b.ir->tasks[id];
            if (t->kind == SIM_SWAP_IN || t->kind == SIM_SWAP_OUT ||
                t->kind == SIM_NVME_READ || t->kind == SIM_NVME_WRITE)
                slack = fmax(slack, t->bytes);
        }
        /* and each host buffer is whole O_DIRECT blocks: a stage's
         * weights, moments and gradient four of them, a block each at
         * most (a tiny model's stages, t5-tiny's, are a few blocks) */
        double align = 4.0 * b.costs->n_model_stages * EXEC_TFILE_ALIGN;
        cr_log_info("%s: %s: host peak %.0f bytes measured, %.0f counted",
                    mdl, plans[k], b.tier_host_peak, most);
        cr_expect(b.tier_host_peak <= most + 0.02 * most + align + slack &&
                      b.tier_host_peak >= most - 0.02 * most - slack,
                  "%s: host peak %.0f bytes, counted %.0f (one transfer "
                  "%.0f, blocks %.0f)", plans[k], b.tier_host_peak, most,
                  slack, align);
        exec_pipe_result_free(&b);
        sim_plan_free(&p);
        test_rm_rf(dir);
        same_training(plans[k], 0, k >= 2);
    }
    micro = 2;
    model = PICO;
}

Test(exec_tiers, the_host_holds_what_the_simulator_says)
{
    host_vs_sim("tests/data/exec/gpt-pico-table.json", 0, 4);
}

/* A T5's tables: under Fuyou each holder that does not step a table
 * keeps its piece of the table's gradient (the token table's on the
 * head's and the decoder embedding's stages; each stack's relative-
 * position table's on its layers'), not its stage's whole gradient */
Test(exec_tiers, a_t5s_host_holds_what_the_simulator_says)
{
    bytes_tol = 0.03;
    host_vs_sim("tests/data/exec/t5-tiny.json", 0, 4);
    bytes_tol = 0.02;
}

/* T5 1.1's head is its own: the token table's other holder is the
 * decoder embedding's stage, which keeps its piece of the table's
 * gradient under Fuyou and fetches the table's newest weights from DRAM
 * on the drives (the simulator priced neither: a table of 4096 x 32
 * floats, the model's largest tensor, was missing from the host's count:
 * zero-infinity's peak 4.96 MB against 4.39 counted). ZeRO's plans only:
 * Fuyou's steps overlap the backward on threads, and with this table, a
 * quarter of the model, its count of the run's own times came a table's
 * size above or below the measured peak in one run of ten or twenty */
Test(exec_tiers, a_t5_1_1s_host_holds_what_the_simulator_says)
{
    char *dir = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/t5-v11-v4096.json", dir);
    cr_assert_eq(sh_run("sed 's/\"vocab\": 256/\"vocab\": 4096/' "
                        "tests/data/exec/t5-v11-tiny.json > %s", path), 0);
    bytes_tol = 0.03;
    host_vs_sim(path, 1, 3);
    bytes_tol = 0.02;
    test_rm_rf(dir);
}

/* Checkpoints of the first stages and the whole activations of the last
 * leave the device and come back: the same training. */
Test(exec_tiers, fuyou_swaps_activations)
{
    same_training("--schedule fuyou --offload-tier nvme --act-swap 3:2", 0,
                  1);
}

Test(exec_tiers, zero_infinity_swaps_checkpoints)
{
    same_training("--schedule zero-infinity --offload-tier dram "
                  "--act-swap 4:0", 1.0f, 0);
}

/* The host's step on three threads: each thread steps and clears a part
 * of every slice, elementwise, so the weights, moments and losses are
 * the one thread's bit for bit (no clipping: the norm's partial sums
 * round otherwise); ZeRO-Offload's second microbatch's gradient copy is
 * added on the threads too. */
Test(exec_tiers, host_threads_keep_the_bits)
{
    const char *flags[] = {"--schedule fuyou --offload-tier dram "
                           "--act-swap 0:0", "--schedule zero-offload"};
    for (int f = 0; f < 2; f++) {
        char *dir = test_tmpdir();
        sim_plan p;
        plan_of(dir, flags[f], &p);
        exec_pipe_result r[2];
        for (int k = 0; k < 2; k++) {
            util_err e = {0};
            exec_pipe_opts o = opts(&p, 0);
            o.offload.host_threads = k ? 3 : 1;
            cr_assert_eq(exec_pipe_run(&o, &r[k], &e), 0, "%s", e.msg);
        }
        size_t n = r[0].n_params * sizeof(float);
        cr_assert_eq(r[0].n_params, r[1].n_params);
        cr_expect_eq(memcmp(r[0].params, r[1].params, n), 0, "%s: weights",
                     flags[f]);
        cr_expect_eq(memcmp(r[0].adam_m, r[1].adam_m, n), 0, "%s", flags[f]);
        cr_expect_eq(memcmp(r[0].adam_v, r[1].adam_v, n), 0, "%s", flags[f]);
        for (int s = 0; s < r[0].steps_run; s++)
            cr_expect_eq(r[0].loss[s], r[1].loss[s], "%s: step %d",
                         flags[f], s);
        for (int k = 0; k < 2; k++) exec_pipe_result_free(&r[k]);
        sim_plan_free(&p);
        test_rm_rf(dir);
    }
}

/* A path that cannot take the file, a disk that fills up during the run:
 * one message naming the path, exit 1, nothing left behind. */
Test(exec_tiers, bad_paths_and_a_full_disk)
{
    char *dir = test_tmpdir();
    sim_plan p;
    plan_of(dir, "--schedule fuyou --offload-tier nvme", &p);
    exec_pipe_result r;
    util_err e = {0};
    exec_pipe_opts o = opts(&p, 0);
    o.offload.path = "/nonexistent-sluice-dir";
    cr_expect_eq(exec_pipe_run(&o, &r, &e), -1);
    cr_expect(strstr(e.msg, "/nonexistent-sluice-dir"), "%s", e.msg);
    cr_expect_eq(e.code, UTIL_EXIT_FAIL);
    exec_pipe_result_free(&r);
    o.offload.path = dir;
    o.offload.full_after_bytes = 64 * 1024;
    cr_expect_eq(exec_pipe_run(&o, &r, &e), -1);
    cr_expect(strstr(e.msg, "the disk is full"), "%s", e.msg);
    cr_expect(strstr(e.msg, dir), "%s", e.msg);
    /* how much room it wanted against what there was */
    cr_expect(strstr(e.msg, "KiB free when it opened") &&
              strstr(e.msg, "with the file at"), "%s", e.msg);
    cr_expect_eq(files_in(dir), 0, "the tier's file is removed");
    exec_pipe_result_free(&r);
    sim_plan_free(&p);
    /* two ranks, the disk full in the middle of the run: the rank that
     * hits it ends the run, the other stops too (none waits for it in a
     * ring or the norm's sum), and both files are removed */
    plan_dp(dir, 2, 2, "--schedule zero-infinity --offload-tier nvme --dp 2",
            &p);
    o = opts(&p, 0);
    o.steps = 6;
    o.offload.path = dir;
    o.offload.full_after_bytes = 1 << 20;
    cr_expect_eq(exec_pipe_run(&o, &r, &e), -1);
    cr_expect(strstr(e.msg, "the disk is full") && strstr(e.msg, "NVME_WRITE"),
              "%s", e.msg);
    cr_expect_eq(files_in(dir), 0, "the tiers' files are removed");
    exec_pipe_result_free(&r);
    sim_plan_free(&p);
    plan_of(dir, "--schedule fuyou --offload-tier nvme", &p);
    sim_plan_free(&p);
    /* from the command line: clipping Fuyou cannot do, asked for, exit 2
     * (not asked for, it runs unclipped and says so); a drive folder
     * that is missing, exit 2 before the run */
    char plan[600];
    snprintf(plan, sizeof plan, "%s/plan.json", dir);
    cli_expect(2, "give --clip 0", "exec --plan %s --steps 2 --data %s "
               "--clip 1", plan, CORPUS);
    cli_expect(0, "note: fuyou steps each layer as its gradients come, "
               "before the global gradient norm is known: no clipping",
               "exec --plan %s --steps 2 --data %s", plan, CORPUS);
    cr_expect_eq(files_in(dir), 0, "the tier's file is removed");
    cli_expect(2, "--offload-path '/nonexistent-sluice-dir': No such file",
               "exec --plan %s --steps 2 "
               "--data %s --clip 0 --offload-path /nonexistent-sluice-dir",
               plan, CORPUS);
    cli_expect(2, "moves the model states itself", "exec --plan %s --steps "
               "2 --data %s --clip 0 --offload zero-offload", plan, CORPUS);
    test_rm_rf(dir);
}

/* sluice calibrate measures the host's AdamW and the drive (a file in
 * --offload-path, gone after); exec --calibrate of such a plan then puts
 * the drive's and AdamW's rates its run measured in their place (a run in
 * DRAM: AdamW's alone, the drive's stay); the simulator's drives and CPU
 * steps then go as fast as they say; a rate out of range, or none, is
 * refused naming file, line and field; a --offload-path that is no
 * writable folder is refused before calibration starts, nothing
 * written. */
Test(exec_tiers, calibration_takes_the_tiers_rates)
{
    char *d = test_tmpdir();
    cli_result r = cli_run("--profile-dir %s calibrate --hw cpu x1 --quick "
                           "--offload-path /nonexistent-sluice-dir --out "
                           "%s/cpu.json", d, d);
    /* refused before anything is measured: the user's input */
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "--offload-path '/nonexistent-sluice-dir': No "
                            "such file"), "%s", r.err);
    cli_result_free(&r);
    char path[600];
    snprintf(path, sizeof path, "%s/cpu.json", d);
    cr_expect_neq(access(path, F_OK), 0, "nothing written");
    r = cli_run("--profile-dir %s calibrate --hw cpu x1 --quick "
                "--offload-path %s --out %s/cpu.json", d, d, d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "host: AdamW") && strstr(r.out, "drive: read"),
              "%s", r.out);
    cli_result_free(&r);
    cr_expect_eq(files_in(d), 1, "the drive's file is gone "
                 "(cpu.json stays)");
    json_t *j0 = json_load_file(path, 0, NULL);
    cr_assert_not_null(j0);
    json_t *t0 = json_object_get(j0, "tiers");
    cr_assert_not_null(t0, "the microbenchmarks' rates");
    double rd0 = json_number_value(json_object_get(t0, "drive_read_gb_per_s"));
    cr_expect_gt(rd0, 0);
    cr_expect_gt(json_number_value(json_object_get(t0, "adam_mparams_per_s")),
                 0);
    cr_expect_str_eq(json_string_value(json_object_get(t0, "model")),
                     "microbenchmarks");
    json_decref(j0);
    r = cli_run("--profile-dir %s profile list", d);
    cr_expect(strstr(r.out, "AdamW") && strstr(r.out, "drive"),
              "profile list shows the host's rates: %s", r.out);
    cli_result_free(&r);
    /* the states in DRAM: AdamW's rate, the drive's as measured */
    cli_expect(0, "", "sim --hw cpu x1 --model %s --mbs 2 --microbatches 2 "
               "--schedule zero-offload --offload-tier dram --out %s/z.json",
               PICO, d);
    r = cli_run("--profile-dir %s exec --plan %s/z.json --steps 2 --quiet "
                "--calibrate --data %s", d, d, CORPUS);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    json_t *j = json_load_file(path, 0, NULL);
    cr_assert_not_null(j);
    json_t *t = json_object_get(j, "tiers");
    cr_assert_not_null(t, "a DRAM run's AdamW rate is in the calibration");
    cr_expect_gt(json_number_value(json_object_get(t, "adam_mparams_per_s")),
                 0);
    cr_expect_eq(json_number_value(json_object_get(t, "drive_read_gb_per_s")),
                 rd0, "no drive was used: the microbenchmark's rate stays");
    cr_expect(strstr(json_string_value(json_object_get(t, "model")),
                     "gpt-pico"), "the run's model");
    json_decref(j);
    cli_expect(0, "", "--profile-dir %s sim --hw cpu x1 --model %s --mbs 2 "
               "--microbatches 2 --schedule zero-offload --offload-tier dram",
               d, PICO);
    cli_expect(0, "", "sim --hw cpu x1 --model %s --mbs 2 --microbatches 2 "
               "--schedule zero-infinity --offload-tier nvme --out %s/p.json",
               PICO, d);
    r = cli_run("--profile-dir %s exec --plan %s/p.json --steps 3 --quiet "
                "--calibrate --offload-path %s --data %s", d, d, d, CORPUS);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    j = json_load_file(path, 0, NULL);
    cr_assert_not_null(j);
    t = json_object_get(j, "tiers");
    cr_assert_not_null(t, "the run's tier rates are in the calibration");
    cr_expect_gt(json_number_value(json_object_get(t, "drive_read_gb_per_s")),
                 0);
    cr_expect_gt(json_number_value(json_object_get(t, "adam_mparams_per_s")),
                 0);
    json_decref(j);
    /* known rates: the drive reads at 0.1 GB/s and writes at 0.2, AdamW
     * steps 10 M parameters a second */
    cr_assert_eq(sh_run("sed -i -e 's/\"drive_read_gb_per_s\": [0-9.e+-]*/"
                        "\"drive_read_gb_per_s\": 0.1/' -e 's/\"drive_write_"
                        "gb_per_s\": [0-9.e+-]*/\"drive_write_gb_per_s\": "
                        "0.2/' -e 's/\"adam_mparams_per_s\": [0-9.e+-]*/"
                        "\"adam_mparams_per_s\": 10/' %s", path), 0);
    json_t *s = cli_json("--profile-dir %s sim --plan %s/p.json --json", d,
                         d);
    json_t *res = json_object_get(json_object_get(s, "offload"),
                                  "resources");
    double nvme = json_number_value(json_object_get(
        json_object_get(res, "nvme"), "busy_s"));
    double cpu = json_number_value(json_object_get(
        json_object_get(res, "cpu"), "busy_s"));
    json_decref(s);
    util_err e;
    prof_model *m = prof_model_load(PICO, &e);
    cr_assert_not_null(m, "%s", e.msg);
    double params = m->params;
    /* every parameter stepped once at 10 M/s (a tied table's copies
     * twice), and the drive no faster than its reads at 0.1 GB/s */
    cr_expect(cpu >= params / 10e6 * 0.999 && cpu <= 2 * params / 10e6,
              "CPU steps %g s for %g parameters", cpu, params);
    cr_expect_geq(nvme, params * 4 / 0.1e9, "drive busy %g s", nvme);
    prof_model_free(m);
    cr_assert_eq(sh_run("sed -i 's/\"drive_read_gb_per_s\": 0.1/"
                        "\"drive_read_gb_per_s\": -1/' %s", path), 0);
    r = cli_run("--profile-dir %s sim --plan %s/p.json", d, d);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "cpu.json:") &&
              strstr(r.err, "drive_read_gb_per_s"), "%s", r.err);
    cli_result_free(&r);
    cr_assert_eq(sh_run("sed -i -e '/\"drive_read_gb_per_s\"/d' -e "
                        "'/\"drive_write_gb_per_s\"/d' -e "
                        "'/\"adam_mparams_per_s\"/d' %s", path), 0);
    r = cli_run("--profile-dir %s sim --plan %s/p.json", d, d);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "cpu.json:") && strstr(r.err, "none given"),
              "%s", r.err);
    cli_result_free(&r);
    test_rm_rf(d);
}

/* Two data-parallel ranks of each policy, each with its share of the
 * states in its tier: the weights and moments of the same batch trained
 * on one device. ZeRO clips by the norm the ranks agree. */
Test(exec_tiers, data_parallel_zero_offload)
{
    ranks = 2;
    same_training("--schedule zero-offload", 1.0f, 0);
}

Test(exec_tiers, data_parallel_zero_infinity)
{
    ranks = 2;
    same_training("--schedule zero-infinity --offload-tier nvme "
                  "--act-swap 4:0", 1.0f, 1);
}

Test(exec_tiers, data_parallel_fuyou)
{
    ranks = 2;
    same_training("--schedule fuyou --offload-tier dram --act-swap 2:1", 0,
                  0);
}

/* ...and with a fine-tuning mode: the frozen weights shared out and
 * gathered with the rest where fetches bring them, every rank's on its
 * device under ZeRO-Offload; three ranks of Llama's decoder too. */
Test(exec_tiers, data_parallel_finetune_modes)
{
    ranks = 2;
    same_training_ft("--schedule zero-offload", "--finetune lora:4", 1.0f, 0);
    same_training_ft("--schedule zero-infinity --offload-tier nvme",
                     "--finetune lora:4", 1.0f, 1);
    same_training_ft("--schedule fuyou --offload-tier dram --act-swap 0:0",
                     "--finetune frozen:1", 0, 0);
    /* QLoRA's packed base, shared out in whole slices */
    same_training_ft("--schedule fuyou --offload-tier nvme --act-swap 0:0",
                     "--finetune qlora:4", 0, 1);
    ranks = 3;
    model = "tests/data/exec/llama-pico.json";
    same_training_ft("--schedule zero-infinity --offload-tier dram",
                     "--finetune qlora:4:all", 1.0f, 0);
    model = PICO;
}

/* exec --plot of an offload plan: each device's memory curve is its own
 * (the trace's host tier counters beside it stay out of it), in time
 * order, in the measured and the simulated panels alike. */
Test(exec_tiers, compare_plot_keeps_the_devices_memory_apart)
{
    char *dir = test_tmpdir();
    sim_plan p;
    plan_dp(dir, 2, 2, "--schedule zero-infinity --offload-tier dram --dp 2",
            &p);
    sim_plan_free(&p);
    cli_expect(0, "", "exec --plan %s/plan.json --steps 2 --data %s --quiet "
               "--plot %s/c", dir, CORPUS, dir);
    const char *which[] = {"measured", "simulated"};
    for (int k = 0; k < 2; k++) {
        char path[600], line[256];
        snprintf(path, sizeof path, "%s/c-%s-memory.dat", dir, which[k]);
        FILE *f = fopen(path, "r");
        cr_assert_not_null(f, "%s", path);
        double prev = -1, t, by;
        int back = 0, points = 0;
        while (fgets(line, sizeof line, f)) {
            if (line[0] == '#') prev = -1;
            if (sscanf(line, "%lf %lf", &t, &by) != 2) continue;
            back += t < prev;
            prev = t;
            points++;
        }
        fclose(f);
        cr_expect_gt(points, 2, "%s", path);
        cr_expect_eq(back, 0, "%s: a device's curve goes back in time %d "
                     "times (another series mixed in)", path, back);
    }
    test_rm_rf(dir);
}

/* A T5 (the encoder's output read by every decoder stage, the token
 * table and each stack's relative-position table held by many stages:
 * their gradients summed and the tables stepped once, their new weights
 * fetched by every holder): every policy, both tiers, the same training
 * as GPipe on one device; under LoRA and with two ranks too (each rank's
 * share of every table a piece of its own). A T5 record keeps more the
 * simulator leaves out than a GPT's, each float a few bytes a token: the
 * statistics of three norms a decoder layer, and the ids with each
 * stack's bucket per offset: 2.1% of the swapped bytes of t5-tiny. */
Test(exec_tiers, t5)
{
    model = "tests/data/exec/t5-tiny.json";
    bytes_tol = 0.03;
    same_training("--schedule zero-offload", 1.0f, 0);
    same_training("--schedule zero-infinity --offload-tier nvme", 1.0f, 1);
    same_training("--schedule fuyou --offload-tier dram --act-swap 0:0", 0,
                  0);
    same_training("--schedule fuyou --offload-tier nvme --act-swap 2:1", 0,
                  1);
    same_training_ft("--schedule zero-infinity --offload-tier dram",
                     "--finetune lora:4:all", 1.0f, 0);
    ranks = 2;
    same_training("--schedule fuyou --offload-tier dram --act-swap 2:1", 0,
                  0);
    same_training("--schedule zero-offload", 1.0f, 0);
    same_training("--schedule zero-infinity --offload-tier nvme "
                  "--act-swap 4:0", 1.0f, 1);
    /* T5 1.1's kind: the head of its own, the two embeddings' table */
    ranks = 1;
    model = "tests/data/exec/t5-v11-tiny.json";
    same_training("--schedule fuyou --offload-tier nvme --act-swap 2:1", 0,
                  1);
    same_training("--schedule zero-offload", 1.0f, 0);
    model = PICO;
    bytes_tol = 0.02;
}

/* The report's count of the host's memory over the run's own task times
 * (exec_pipe_host_counted, exec --json's counted_host_peak_bytes), beside
 * the plan's simulation: planned for twelve drives, the fetches from this
 * machine's one drive overlap less than simulated, and the host holds
 * less (8.49 MB against 8.68 simulated, 8.47 counted over the run's
 * times). Within 2% and a transfer, as the_host_holds_what_the_simulator_
 * says holds its own count (under the ASan suite's load a run read 7.66 MB
 * against 8.47 counted). An H200 run of
 * GPT-2 under zero-infinity read 0.92 of the plan's simulation, its drive
 * 4.3 times slower than the plan's twelve. */
Test(exec_tiers, the_report_counts_the_host_over_the_runs_times)
{
    char *dir = test_tmpdir();
    model = "tests/data/exec/gpt-pico-table.json";
    micro = 4;
    sim_plan p;
    plan_dp(dir, 1, micro, "--schedule zero-infinity --offload-tier nvme "
            "--nvme 12", &p);
    exec_pipe_opts o = opts(&p, 0);
    o.offload.path = dir;
    exec_pipe_result b;
    util_err e = {0};
    cr_assert_eq(exec_pipe_run(&o, &b, &e), 0, "%s", e.msg);
    double count = exec_pipe_host_counted(&b), slack = 0;
    for (int id = 0; id < b.n_tasks; id++)
        if (sim_kind_nvme(b.ir->tasks[id].kind) ||
            b.ir->tasks[id].kind == SIM_SWAP_IN ||
            b.ir->tasks[id].kind == SIM_SWAP_OUT)
            slack = fmax(slack, b.ir->tasks[id].bytes);
    cr_expect(count > 0 && fabs(b.tier_host_peak - count) <=
                               0.02 * count + slack,
              "host memory %.0f bytes, counted over the run's task times "
              "%.0f (one transfer %.0f)", b.tier_host_peak, count, slack);
    exec_pipe_result_free(&b);
    sim_plan_free(&p);
    micro = 2;
    model = PICO;
    /* and the command's report says it */
    cli_expect(0, "", "sim --hw cpu x1 --model %s --mbs 2 --microbatches 4 "
               "--schedule zero-infinity --offload-tier nvme --nvme 12 "
               "--out %s/z.json", "tests/data/exec/gpt-pico-table.json",
               dir);
    json_t *j = cli_json("exec --plan %s/z.json --steps 3 --clip 0 "
                         "--offload-path %s --data %s --json", dir, dir,
                         CORPUS);
    json_t *cj = json_object_get(json_object_get(j, "tiers"),
                                 "counted_host_peak_bytes");
    cr_expect(json_is_number(cj) && json_number_value(cj) > 0,
              "the count is reported");
    json_decref(j);
    test_rm_rf(dir);
}

/* Under mpirun, one process a rank on one machine: the host's memory is
 * the processes' at once (one count in shared memory that every process
 * of the machine adds to), held to the count over the run's times as the
 * in-process run is (within 2% and a transfer), with one replica slowed
 * too, so the ranks' buffers come and go at other times. Before, the
 * report summed each process's own peak, which is no moment's memory:
 * Fuyou's states in DRAM with a replica slowed read 11.7-12.9% over the
 * count so (five runs; 1.1-1.2% now), where zero-infinity's replicas
 * peak together and the sum fell inside the bound. No shared count's
 * name outlives its run. */
Test(exec_tiers, mpirun_counts_the_machines_host_at_once)
{
    char *dir = test_tmpdir();
    model = "tests/data/exec/gpt-pico-table.json";
    const char *plans[] = {"zero-infinity --offload-tier nvme",
                           "zero-infinity --offload-tier nvme",
                           "fuyou --offload-tier dram"};
    for (int k = 0; k < 3; k++) {
        sim_plan p;
        char flags[200];
        snprintf(flags, sizeof flags, "--schedule %s --dp 2", plans[k]);
        plan_dp(dir, 2, 2, flags, &p);
        exec_pipe_opts o = opts(&p, 0);
        o.offload.path = dir;
        exec_pipe_result b;
        util_err e = {0};
        cr_assert_eq(exec_pipe_run(&o, &b, &e), 0, "%s", e.msg);
        double slack = 0;
        for (int id = 0; id < b.n_tasks; id++)
            if (sim_kind_nvme(b.ir->tasks[id].kind) ||
                b.ir->tasks[id].kind == SIM_SWAP_IN ||
                b.ir->tasks[id].kind == SIM_SWAP_OUT)
                slack = fmax(slack, b.ir->tasks[id].bytes);
        exec_pipe_result_free(&b);
        sim_plan_free(&p);
        int slow = k > 0;
        /* from here: the plan names its model by a relative path */
        int rc = sh_run("%s" MPIRUN "%s \"$SLUICE\" exec --plan "
                        "%s/plan.json --steps 3 --clip 0 --offload-path %s "
                        "--data %s --json > %s/out.json 2> %s/err",
                        slow ? "SLUICE_EXEC_SLOW=1:20000 " : "",
                        slow ? " -x SLUICE_EXEC_SLOW" : "", dir, dir, CORPUS,
                        dir, dir);
        char path[600], msg[400] = "";
        snprintf(path, sizeof path, "%s/err", dir);
        FILE *f = fopen(path, "r");
        if (f) {
            msg[fread(msg, 1, sizeof msg - 1, f)] = 0;
            fclose(f);
        }
        cr_assert_eq(rc, 0, "mpirun: %s", msg);
        /* the shared count, not the fallback's sum */
        cr_expect(!strstr(msg, "no memory shared"), "mpirun: %s", msg);
        snprintf(path, sizeof path, "%s/out.json", dir);
        json_error_t je;
        json_t *j = json_load_file(path, 0, &je);
        cr_assert_not_null(j, "%s", je.text);
        json_t *t = json_object_get(j, "tiers");
        double m = json_number_value(json_object_get(t, "host_peak_bytes")),
               c = json_number_value(json_object_get(
                   t, "counted_host_peak_bytes"));
        cr_log_info("mpirun, %s%s: host %.0f bytes, counted %.0f, one "
                    "transfer %.0f", plans[k], slow ? ", a replica slowed"
                    : "", m, c, slack);
        cr_expect(c > 0 && fabs(m - c) <= 0.02 * c + slack,
                  "mpirun, %s%s: host memory %.0f bytes, counted over the "
                  "run's task times %.0f (one transfer %.0f)", plans[k],
                  slow ? ", a replica slowed" : "", m, c, slack);
        /* a sum of the processes' peaks reads over the count */
        cr_expect(k < 2 || m <= 1.04 * c, "mpirun, %s, a replica slowed: "
                  "host memory %.0f bytes, counted %.0f", plans[k], m, c);
        json_decref(j);
    }
    model = PICO;
    /* every name left is a live process's (its creator's pid is in it;
     * other suites' runs may be between making and removing theirs) */
    cr_expect_eq(sh_run("for f in /dev/shm/sluice-host-*; do [ -e \"$f\" ] "
                        "|| continue; p=${f#/dev/shm/sluice-host-}; "
                        "kill -0 ${p%%%%-*} 2>/dev/null || exit 1; done"), 0,
                 "a shared count's name outlived its run");
    test_rm_rf(dir);
}

/* Fuyou's host memory against the simulator's prediction and its count
 * over the run's own task times (the report's): a GPT's head keeps its piece of the tied
 * table's gradient apart and hands its whole buffer back, which the
 * embedding's stage (table and positions) is a little too large for; the
 * pool drops it rather than keep it beside the new one (it held a table
 * more: 8.27 MiB against 7.24 predicted). Three ranks on the drives.
 * Below the prediction by up to 6% on a loaded machine (6.93 MiB once,
 * in the ASan suite of a clean clone, where six runs alone read it
 * within 3%). */
Test(exec_tiers, fuyou_host_memory_is_the_prediction)
{
    char *dir = test_tmpdir();
    cli_result r = cli_run("sim --hw 'cpu x3' --model "
                           "tests/data/exec/gpt-pico-table.json --mbs 2 "
                           "--microbatches 2 --dp 3 --schedule fuyou "
                           "--offload-tier nvme --out %s/f.json", dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --plan %s/f.json --steps 3 --clip 0 --offload-path %s",
                dir, dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    const char *at = strstr(r.out, "host memory at most ");
    cr_assert_not_null(at, "%s", r.out);
    double got, want, count;
    char u1[8], u2[8], u3[8];
    cr_assert_eq(sscanf(at, "host memory at most %lf %7s (simulated %lf "
                        "%7[^;]; %lf %7s over this run's task times)", &got,
                        u1, &want, u2, &count, u3), 6, "%s", at);
    cr_expect(!strcmp(u1, "MiB") && !strcmp(u2, "MiB") &&
                  !strcmp(u3, "MiB"), "%s", at);
    cr_expect(got <= 1.03 * want && got >= 0.94 * want, "host memory %.2f "
              "MiB, predicted %.2f", got, want);
    /* and the simulator's count over the run's own task times, which
     * follows what the timing does (six runs: 1.0-1.5% above it) */
    cr_expect(fabs(got - count) <= 0.03 * count, "host memory %.2f MiB, "
              "counted over the run's task times %.2f", got, count);
    cli_result_free(&r);
    test_rm_rf(dir);
}
