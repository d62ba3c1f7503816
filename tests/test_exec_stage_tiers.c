/* Stage tiers in the executor: a pipeline stage whose AdamW moments and
 * fp32 weights the host keeps (in memory or in a file) and steps with the
 * CPU's kernel. The kernel is elementwise and the step's gradient and
 * clipping factor are the device's, so the weights and moments after k
 * steps are the bits of the same plan with every state on its device:
 * one stage or all, DRAM or NVMe, clipped, with a tied head, interleaved
 * stages, data and tensor parallelism, LoRA, and under mpirun. The device
 * holds AdamW's moments less; what is not run is refused. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "planner/planner.h"
#include "sim/sim.h"
#include "tests/harness.h"

#define PICO "tests/data/exec/gpt-pico.json"
#define UNTIED "tests/data/exec/gpt-pico-untied.json"

/* `sluice sim ARGS [--state-tiers T]` run for 3 steps at clip 1, the
 * host's step on `threads` threads (0: the default). */
static int threads;

static void trun(const char *args, const char *tiers, exec_pipe_result *r,
                 sim_plan *p)
{
    char a[512];
    snprintf(a, sizeof a, "%s%s%s", args, tiers ? " --state-tiers " : "",
             tiers ? tiers : "");
    cli_plan(a, p);
    cr_assert_eq(sim_plan_tiered(p), tiers != NULL, "%s", a);
    util_err e = {0};
    exec_pipe_opts o = pipe_opts(p, 3, 1.0f);
    o.offload.host_threads = threads;
    cr_assert_eq(exec_pipe_run(&o, r, &e), 0, "%s: %s", a, e.msg);
}

/* Weights and moments with tiers against every state on the devices;
 * the device of stage 0 holds its moments less. */
static void vs_device(const char *args, const char *tiers)
{
    exec_pipe_result a, b;
    sim_plan pa, pb;
    trun(args, NULL, &a, &pa);
    trun(args, tiers, &b, &pb);
    size_t P = a.n_params;
    cr_assert_eq(P, b.n_params);
    cr_expect(!memcmp(a.params, b.params, P * sizeof *a.params),
              "%s, tiers %s: weights differ from the device's", args, tiers);
    cr_expect(!memcmp(a.adam_m, b.adam_m, P * sizeof *a.adam_m) &&
              !memcmp(a.adam_v, b.adam_v, P * sizeof *a.adam_v),
              "%s, tiers %s: AdamW moments differ", args, tiers);
    cr_expect(a.n_lora == b.n_lora &&
              (!a.n_lora || !memcmp(a.lora, b.lora,
                                    a.n_lora * sizeof *a.lora)),
              "%s, tiers %s: LoRA adapters differ", args, tiers);
    /* the drives move what the IR says, but where the plan prices a
     * state of its own size (--state-bytes) that AdamW's is not */
    int nvme = 0;
    for (int k = 0; k < pb.n_stages; k++)
        nvme |= pb.state_tier[k] == SIM_TIER_NVME;
    if (nvme && !(pb.state_bytes_per_param > 0))
        expect_drive_bytes(&b, args);
    /* the training moved them: the comparison can fail */
    cr_expect(a.loss[0] != a.loss[2], "%s: the loss did not move", args);
    if (pb.state_tier[0] && !a.n_lora)
        cr_expect_lt(b.static_bytes[pb.stage_device[0]],
                     a.static_bytes[pa.stage_device[0]],
                     "%s, tiers %s: the device kept its moments", args,
                     tiers);
    exec_pipe_result_free(&a);
    exec_pipe_result_free(&b);
    sim_plan_free(&pa);
    sim_plan_free(&pb);
}

Test(exec_stage_tiers, the_host_step_is_the_device_step_bit_for_bit)
{
    /* a tied head across the stages, clipped */
    vs_device("--hw 'cpu x2' --model " PICO " --schedule 1f1b --pp 2 "
              "--mbs 2 --microbatches 4", "dram");
    vs_device("--hw 'cpu x2' --model " PICO " --schedule 1f1b --pp 2 "
              "--mbs 2 --microbatches 4", "gpu,nvme");
    vs_device("--hw 'cpu x2' --model " PICO " --schedule gpipe --pp 2 "
              "--mbs 2 --microbatches 2 --recompute", "nvme,dram");
}

Test(exec_stage_tiers, interleaved_data_and_tensor_parallel_and_lora)
{
    vs_device("--hw 'cpu x2' --model " PICO " --schedule interleaved --pp 2 "
              "--chunks 2 --mbs 2 --microbatches 4", "dram,gpu,gpu,nvme");
    vs_device("--hw 'cpu x4' --model " PICO " --schedule 1f1b --pp 2 --dp 2 "
              "--mbs 2 --microbatches 2", "dram,gpu");
    vs_device("--hw 'cpu x4' --model " UNTIED " --schedule 1f1b --pp 2 "
              "--tp 2 --mbs 2 --microbatches 2", "gpu,dram");
    vs_device("--hw 'cpu x2' --model " PICO " --schedule 1f1b --pp 2 "
              "--mbs 2 --microbatches 2 --finetune lora:4", "dram");
}

/* A T5: the token table and each stack's relative-position table copied
 * to several stages, their gradients exchanged before a tier's step on
 * the host: the device's bits, with data and tensor parallelism, under
 * LoRA and zero bubble too. */
Test(exec_stage_tiers, t5_keeps_the_bits)
{
#define T5 "tests/data/exec/t5-tiny.json"
    vs_device("--hw 'cpu x2' --model " T5 " --schedule 1f1b --pp 2 "
              "--mbs 1 --microbatches 4", "dram,nvme");
    vs_device("--hw 'cpu x4' --model " T5 " --schedule 1f1b --pp 4 "
              "--mbs 1 --microbatches 4", "nvme,gpu,dram,nvme");
    vs_device("--hw 'cpu x2' --model " T5 " --schedule zb-h1 --pp 2 "
              "--mbs 1 --microbatches 4", "gpu,dram");
    vs_device("--hw 'cpu x4' --model " T5 " --schedule 1f1b --pp 2 --dp 2 "
              "--mbs 1 --microbatches 2", "dram,nvme");
    vs_device("--hw 'cpu x4' --model " T5 " --schedule 1f1b --pp 2 --tp 2 "
              "--mbs 1 --microbatches 4", "nvme,dram");
    vs_device("--hw 'cpu x2' --model " T5 " --schedule 1f1b --pp 2 "
              "--mbs 1 --microbatches 4 --finetune lora:4:all", "dram");
#undef T5
}

/* The drives' state in several chunks: the plan's state bytes per
 * parameter make the simulated state large enough for the IR to read,
 * step and write stage 0's in chunks; the run splits its floats as many
 * ways, and keeps the bits. */
Test(exec_stage_tiers, the_drives_chunks_keep_the_bits)
{
    const char *args = "--hw rtx4090 x2 --model gpt-mini --schedule 1f1b "
                       "--pp 2 --mbs 2 --microbatches 2 --state-bytes 1024";
    char a[300];
    snprintf(a, sizeof a, "%s --state-tiers nvme,dram", args);
    sim_plan p;
    cli_plan(a, &p);
    util_err e;
    prof_topo *t = prof_topo_template("rtx4090", 2, NULL, &e);
    cr_assert_not_null(t, "%s", e.msg);
    test_sim x;
    test_sim_plan(&p, t, &x);
    int chunks = 0;
    for (int i = 0; i < x.ir->n_tasks; i++)
        chunks += x.ir->tasks[i].kind == SIM_CPU_OPT &&
                  x.ir->tasks[i].stage == 0;
    cr_assert_gt(chunks, 1, "stage 0's step in %d chunk(s)", chunks);
    test_sim_free(&x);
    prof_topo_free(t);
    sim_plan_free(&p);
    vs_device(args, "nvme,dram");
}

/* The drives' chunks run on threads of their own, overlapped as the IR
 * says: the second chunk's read waits for nothing (the first write-back
 * frees its staging only for the third), so it starts before the first
 * chunk's step ends, which one thread running the chain in order could
 * not do. */
Test(exec_stage_tiers, the_drives_chunks_overlap_the_step)
{
    exec_pipe_result r;
    sim_plan p;
    trun("--hw rtx4090 x2 --model gpt-mini --schedule 1f1b --pp 2 --mbs 2 "
         "--microbatches 2 --state-bytes 1024", "nvme,dram", &r, &p);
    const sim_ir *ir = r.ir;
    int rd[2] = {-1, -1}, op0 = -1, nrd = 0;
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *k = &ir->tasks[i];
        if (k->stage != 0) continue;
        if (k->kind == SIM_NVME_READ && nrd < 2) rd[nrd++] = i;
        if (k->kind == SIM_CPU_OPT && op0 < 0) op0 = i;
    }
    cr_assert(rd[1] >= 0 && op0 >= 0);
    int early = 0;
    for (int ep = 0; ep < r.epochs; ep++) {
        const int64_t *a = exec_pipe_times(&r, ep, rd[1]);
        const int64_t *b = exec_pipe_times(&r, ep, op0);
        cr_assert(a[EXEC_T_START] >= 0 && b[EXEC_T_END] >= 0);
        early += a[EXEC_T_START] < b[EXEC_T_END];
    }
    cr_expect_gt(early, 0, "the second chunk was read after the first "
                 "chunk's step in all %d steps", r.epochs);
    exec_pipe_result_free(&r);
    sim_plan_free(&p);
}

/* the host's step split over threads: elementwise, the same bits */
Test(exec_stage_tiers, host_threads_keep_the_bits)
{
    threads = 3;
    vs_device("--hw 'cpu x2' --model " PICO " --schedule 1f1b --pp 2 "
              "--mbs 2 --microbatches 2", "dram,nvme");
    threads = 0;
}

Test(exec_stage_tiers, mpirun_keeps_the_bits)
{
    char *dir = test_tmpdir();
    int rc = sh_run("cd %s && $SLUICE sim --hw 'cpu x2' --model %s/" PICO
                    " --schedule 1f1b --pp 2 --mbs 2 --microbatches 2 "
                    "--state-tiers nvme,dram --out p.json > /dev/null && "
                    "$SLUICE exec --plan p.json --steps 2 --offload-path . "
                    "--save a.ckpt > /dev/null && " MPIRUN " $SLUICE exec "
                    "--plan p.json --steps 2 --offload-path . --save b.ckpt "
                    "> /dev/null && cmp a.ckpt b.ckpt", dir, getenv("PWD"));
    cr_expect_eq(rc, 0, "mpirun's checkpoint differs from the in-process "
                 "run's");
    test_rm_rf(dir);
}

Test(exec_stage_tiers, what_is_not_run_is_refused)
{
    char *dir = test_tmpdir();
    char path[300];
    snprintf(path, sizeof path, "%s/p.json", dir);
    cli_expect(0, NULL, "sim --hw 'cpu x4' --model " PICO " --schedule 1f1b "
               "--pp 2 --dp 2 --zero 1 --mbs 2 --microbatches 2 "
               "--state-tiers dram --out %s", path);
    cli_expect(2, "stage tiers dram,dram with zero 1", "exec --plan %s "
               "--steps 1", path);
    cli_expect(0, NULL, "sim --hw 'cpu x2' --model " PICO " --schedule 2bw "
               "--pp 2 --mbs 2 --microbatches 2 --state-tiers dram --out %s",
               path);
    cli_expect(2, "with schedule 2bw (no flush)", "exec --plan %s --steps 1",
               path);
    cli_expect(0, NULL, "sim --hw 'cpu x2' --model " PICO " --schedule 1f1b "
               "--pp 2 --mbs 2 --microbatches 2 --state-tiers dram --out %s",
               path);
    cli_expect(2, "with --offload zero-offload", "exec --plan %s --steps 1 "
               "--offload zero-offload", path);
    test_rm_rf(dir);
}

/* A run with a stage's state on the drives measures the drive and the
 * host's AdamW as an offload schedule's run does: exec --calibrate puts
 * their rates in the profile, in place of the microbenchmarks'. */
Test(exec_stage_tiers, calibration_takes_the_drive_and_adam_rates)
{
    char *d = test_tmpdir();
    cli_expect(0, "", "--profile-dir %s calibrate --hw cpu x2 --quick "
               "--offload-path %s --out %s/cpu.json", d, d, d);
    cli_expect(0, "", "sim --hw 'cpu x2' --model " PICO " --schedule 1f1b "
               "--pp 2 --mbs 2 --microbatches 2 --state-tiers nvme,dram "
               "--out %s/p.json", d);
    cli_expect(0, "the CPU's AdamW", "--profile-dir %s exec --plan %s/p.json "
               "--steps 2 --calibrate --offload-path %s --data "
               "/usr/share/common-licenses/GPL-3", d, d, d);
    char path[600];
    snprintf(path, sizeof path, "%s/cpu.json", d);
    json_t *j = json_load_file(path, 0, NULL);
    cr_assert_not_null(j);
    json_t *t = json_object_get(j, "tiers");
    cr_assert_not_null(t);
    cr_expect(strstr(json_string_value(json_object_get(t, "model")),
                     "gpt-pico"), "the run's rates");
    cr_expect_gt(json_number_value(json_object_get(t, "drive_read_gb_per_s")),
                 0);
    cr_expect_gt(json_number_value(json_object_get(t, "drive_write_gb_per_s")),
                 0);
    cr_expect_gt(json_number_value(json_object_get(t, "adam_mparams_per_s")),
                 0);
    json_decref(j);
    test_rm_rf(d);
}
