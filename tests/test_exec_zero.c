/* Sharded data parallelism in the executor (ZeRO-1, 2 and 3 over the
 * data-parallel group) against the unsharded run of the same plan: ZeRO-1's
 * reduce-scatter is the first half of the all-reduce's ring and each
 * rank's shard is the chunk that ring leaves it, so its weights and AdamW
 * state are the unsharded run's bits, with a tied head across stages,
 * tensor parallelism, a zero-bubble split and LoRA. ZeRO-2 reduces each
 * microbatch's gradient over the ranks as its backward ends, then adds
 * the reduced microbatches; unsharded, each rank adds its microbatches,
 * then the ring adds the ranks: with one microbatch the sums are the same
 * and so are the bits, with more they are reordered fp32 sums (within
 * 1e-5 of the largest weight after 3 steps, as tests/test_exec_pipe.c
 * allows reorderings). ZeRO-3 reduces as ZeRO-2 and keeps only the
 * weights' shard between uses, gathering the whole before each forward
 * and backward (not for a separate weight-gradient pass, which reads
 * none): ZeRO-2's bits, whatever the schedule, recomputation,
 * tensor parallelism or fine-tuning mode, with a table tied across
 * stages too. mpirun gives the in-process bits; sharded runs
 * hold less memory, measured and simulated; what is not run is refused.
 * No clipping where bits are compared: the global norm is summed shard
 * by shard, so its last bits (and a clipping factor) may differ. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "sim/sim.h"
#include "tests/harness.h"

#define PICO "tests/data/exec/gpt-pico.json"
#define UNTIED "tests/data/exec/gpt-pico-untied.json"

/* `sluice sim ARGS --zero Z` run for steps without clipping, worker 1
 * slowed slow_us a task where slow_us > 0. */
static void zrun_at(const char *args, int zero, int steps, int slow_us,
                    exec_pipe_result *r, sim_plan *p)
{
    char a[512];
    snprintf(a, sizeof a, "%s --zero %d", args, zero);
    cli_plan(a, p);
    cr_assert_eq(p->zero, zero);
    util_err e = {0};
    exec_pipe_opts o = pipe_opts(p, steps, 0);
    if (slow_us > 0) {
        o.slow_worker = 1;
        o.slow_us = slow_us;
    }
    cr_assert_eq(exec_pipe_run(&o, r, &e), 0, "%s: %s", a, e.msg);
}

/* ... for 3 steps, none slowed. */
static void zrun(const char *args, int zero, exec_pipe_result *r,
                 sim_plan *p)
{
    zrun_at(args, zero, 3, 0, r, p);
}

/* zrun, and the run's own IR simulated into *sr (the engine returned,
 * which *sr lends from). */
static sim_engine *zsim_at(const char *args, int zero, int steps,
                           int slow_us, exec_pipe_result *r, sim_plan *p,
                           sim_result *sr)
{
    zrun_at(args, zero, steps, slow_us, r, p);
    sim_run_opts ro = {0};
    sim_engine *en = sim_engine_new(r->ir, r->costs, &ro);
    cr_assert_eq(sim_engine_run(en, sr), 0, "%s", sr->msg);
    return en;
}

static sim_engine *zsim(const char *args, int zero, exec_pipe_result *r,
                        sim_plan *p, sim_result *sr)
{
    return zsim_at(args, zero, 3, 0, r, p, sr);
}

/* Weights, and AdamW's moments where bits are asked for, of ZeRO stage
 * zero against stage ref (tol < 0: bit for bit). */
static void vs_stage(const char *args, int ref, int zero, double tol)
{
    exec_pipe_result a, b;
    sim_plan pa, pb;
    zrun(args, ref, &a, &pa);
    zrun(args, zero, &b, &pb);
    cr_assert_eq(a.n_params, b.n_params);
    size_t P = a.n_params;
    if (tol < 0) {
        cr_expect(!memcmp(a.params, b.params, P * sizeof *a.params),
                  "zero %d, %s: weights differ from zero %d's", zero, args,
                  ref);
        cr_expect(!memcmp(a.adam_m, b.adam_m, P * sizeof *a.adam_m) &&
                  !memcmp(a.adam_v, b.adam_v, P * sizeof *a.adam_v),
                  "zero %d, %s: AdamW moments differ from zero %d's", zero,
                  args, ref);
        cr_expect(a.n_lora == b.n_lora &&
                  (!a.n_lora || !memcmp(a.lora, b.lora,
                                        a.n_lora * sizeof *a.lora)),
                  "zero %d, %s: LoRA adapters differ", zero, args);
    } else {
        char what[600];
        snprintf(what, sizeof what, "zero %d, %s", zero, args);
        expect_close(a.params, b.params, P, tol, what);
        /* and the training moved them: the check can fail */
        cr_expect(memcmp(a.params, b.params, P * sizeof *a.params),
                  "%s: the same bits where the sums are reordered", what);
    }
    exec_pipe_result_free(&a);
    exec_pipe_result_free(&b);
    sim_plan_free(&pa);
    sim_plan_free(&pb);
}

static void vs_unsharded(const char *args, int zero, double tol)
{
    vs_stage(args, 0, zero, tol);
}

Test(exec_zero, zero1_is_the_all_reduce_bit_for_bit)
{
    /* a tied head on the last stage, microbatches 4 */
    vs_unsharded("--hw 'cpu x4' --model " PICO " --schedule 1f1b --pp 2 "
                 "--dp 2 --mbs 2 --microbatches 4", 1, -1);
    /* three ranks: chunks of unequal size */
    vs_unsharded("--hw 'cpu x3' --model " PICO " --schedule gpipe --pp 1 "
                 "--dp 3 --mbs 2 --microbatches 2", 1, -1);
    vs_unsharded("--hw 'cpu x4' --model " UNTIED " --schedule 1f1b --pp 1 "
                 "--dp 2 --tp 2 --mbs 2 --microbatches 2", 1, -1);
    vs_unsharded("--hw 'cpu x4' --model " PICO " --schedule zb-h1 --pp 2 "
                 "--dp 2 --mbs 2 --microbatches 4 --finetune lora:4", 1, -1);
}

Test(exec_zero, zero2_one_microbatch_is_bit_for_bit)
{
    vs_unsharded("--hw 'cpu x4' --model " UNTIED " --schedule 1f1b --pp 2 "
                 "--dp 2 --mbs 4 --microbatches 1", 2, -1);
    /* a tied table on one stage; frozen blocks */
    vs_unsharded("--hw 'cpu x2' --model " PICO " --schedule 1f1b --pp 1 "
                 "--dp 2 --mbs 4 --microbatches 1 --finetune frozen:1", 2,
                 -1);
    vs_unsharded("--hw 'cpu x4' --model " UNTIED " --schedule 1f1b --pp 1 "
                 "--dp 2 --tp 2 --mbs 4 --microbatches 1", 2, -1);
}

/* ZeRO-3 gathers what ZeRO-2 keeps: with one microbatch the unsharded
 * run's bits, with more ZeRO-2's */
Test(exec_zero, zero3_one_microbatch_is_bit_for_bit)
{
    vs_unsharded("--hw 'cpu x4' --model " UNTIED " --schedule 1f1b --pp 2 "
                 "--dp 2 --mbs 4 --microbatches 1", 3, -1);
    vs_unsharded("--hw 'cpu x2' --model " PICO " --schedule 1f1b --pp 1 "
                 "--dp 2 --mbs 4 --microbatches 1 --finetune frozen:1", 3,
                 -1);
}

Test(exec_zero, zero3_is_zero2_bit_for_bit)
{
    vs_stage("--hw 'cpu x4' --model " UNTIED " --schedule 1f1b --pp 2 "
             "--dp 2 --mbs 2 --microbatches 4", 2, 3, -1);
    vs_stage("--hw 'cpu x4' --model " UNTIED " --schedule interleaved "
             "--chunks 2 --pp 2 --dp 2 --mbs 2 --microbatches 4", 2, 3, -1);
    /* the backward after a recomputation computes with the gather
     * before the recomputation */
    vs_stage("--hw 'cpu x4' --model " UNTIED " --schedule gpipe --pp 2 "
             "--dp 2 --mbs 2 --microbatches 3 --recompute", 2, 3, -1);
    vs_stage("--hw 'cpu x4' --model " UNTIED " --schedule 1f1b --pp 1 "
             "--dp 2 --tp 2 --mbs 2 --microbatches 2", 2, 3, -1);
    /* three ranks: shards of unequal size; LoRA's adapters sharded */
    vs_stage("--hw 'cpu x3' --model " UNTIED " --schedule 1f1b --pp 1 "
             "--dp 3 --mbs 2 --microbatches 2", 2, 3, -1);
    vs_stage("--hw 'cpu x2' --model " PICO " --schedule 1f1b --pp 1 "
             "--dp 2 --mbs 2 --microbatches 2 --finetune lora:4", 2, 3, -1);
    /* weight gradients in a pass of their own, which reads no weights:
     * none are gathered for it */
    vs_stage("--hw 'cpu x4' --model " UNTIED " --schedule zb-h1 --pp 2 "
             "--dp 2 --mbs 2 --microbatches 4", 2, 3, -1);
    vs_stage("--hw 'cpu x2' --model " PICO " --schedule zb-v --pp 1 "
             "--dp 2 --mbs 2 --microbatches 3", 2, 3, -1);
    vs_stage("--hw 'cpu x4' --model " UNTIED " --schedule dualpipev --pp 2 "
             "--dp 2 --mbs 2 --microbatches 4 --finetune frozen:1", 2, 3,
             -1);
}

Test(exec_zero, zero2_microbatches_within_fp32_reordering)
{
    vs_unsharded("--hw 'cpu x4' --model " UNTIED " --schedule interleaved "
                 "--chunks 2 --pp 2 --dp 2 --mbs 2 --microbatches 4", 2, 1e-5);
    vs_unsharded("--hw 'cpu x4' --model " UNTIED " --schedule zb-h1 --pp 2 "
                 "--dp 2 --mbs 2 --microbatches 4", 2, 1e-5);
}

/* A table tied across stages (the embedding on the first, the LM head
 * on the last, or both on one device as the wave maps them): each copy's
 * gradient is summed over the step's microbatches beside the reduce-
 * scatters, the copies exchange their sums once, and the step's last
 * reduce-scatter carries the total. One microbatch: the unsharded run's
 * bits; more: reordered fp32 sums, and ZeRO-3 is ZeRO-2's bits. */
Test(exec_zero, tied_table_across_stages)
{
    for (int z = 2; z <= 3; z++)
        vs_unsharded("--hw 'cpu x4' --model " PICO " --schedule 1f1b --pp 2 "
                     "--dp 2 --mbs 4 --microbatches 1", z, -1);
    vs_unsharded("--hw 'cpu x4' --model " PICO " --schedule 1f1b --pp 2 "
                 "--dp 2 --mbs 2 --microbatches 4", 2, 1e-5);
    vs_unsharded("--hw 'cpu x2' --model " PICO " --schedule wave --waves 1 "
                 "--pp 1 --dp 2 --mbs 2 --microbatches 3", 2, 1e-5);
    vs_stage("--hw 'cpu x4' --model " PICO " --schedule 1f1b --pp 2 --dp 2 "
             "--mbs 2 --microbatches 4", 2, 3, -1);
    vs_stage("--hw 'cpu x2' --model " PICO " --schedule wave --waves 1 "
             "--pp 1 --dp 2 --mbs 2 --microbatches 3", 2, 3, -1);
}

/* FSDP's hybrid sharding: ZeRO-3 inside each group of a server's ranks,
 * each reduced shard then all-reduced over the groups (a ring of the
 * ranks holding it); the norm and the checkpoint count the first group's
 * shards only. Against the unsharded run: the same sums in another order
 * (the groups' partial sums first). */
Test(exec_zero, fsdp_hybrid_shards_inside_servers)
{
    const char *base = "--hw 'rtx2080ti x4' --gpus-per-server 2 --model "
                       PICO " --schedule 1f1b --pp 1 --dp 4 --mbs 2 "
                       "--microbatches 2";
    char a[512], b[512];
    snprintf(a, sizeof a, "%s --zero 0", base);
    snprintf(b, sizeof b, "%s --fsdp hybrid", base);
    exec_pipe_result ra, rb;
    sim_plan pa, pb;
    cli_plan(a, &pa);
    cli_plan(b, &pb);
    cr_assert_eq(pb.fsdp, SIM_FSDP_HYBRID);
    util_err e = {0};
    exec_pipe_opts o = pipe_opts(&pa, 3, 0);
    cr_assert_eq(exec_pipe_run(&o, &ra, &e), 0, "%s", e.msg);
    o = pipe_opts(&pb, 3, 0);
    cr_assert_eq(exec_pipe_run(&o, &rb, &e), 0, "%s", e.msg);
    cr_assert_eq(ra.n_params, rb.n_params);
    expect_close(ra.params, rb.params, ra.n_params, 1e-5, "fsdp hybrid");
    expect_close(ra.adam_m, rb.adam_m, ra.n_params, 1e-4, "its moments");
    /* the loss and the norm are the group's once, not twice */
    for (int k = 0; k < ra.steps_run; k++) {
        cr_expect_float_eq(ra.loss[k], rb.loss[k], 1e-5 * ra.loss[k]);
        cr_expect_float_eq(ra.grad_norm[k], rb.grad_norm[k],
                           1e-4 * ra.grad_norm[k]);
    }
    exec_pipe_result_free(&ra);
    exec_pipe_result_free(&rb);
    sim_plan_free(&pa);
    sim_plan_free(&pb);
    /* four processes under mpirun: the in-process bits */
    char *dir = test_tmpdir();
    cli_result x = cli_run("sim %s --fsdp hybrid --out %s/h.json", base, dir);
    cr_assert_eq(x.code, 0, "%s", x.err);
    cli_result_free(&x);
    int rc = sh_run("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                    "OMPI_MCA_rmaps_base_oversubscribe=1 "
                    "ASAN_OPTIONS=detect_leaks=0 mpirun -np 4 \"$SLUICE\" "
                    "exec --plan %s/h.json --steps 3 --quiet --save "
                    "%s/m.ckpt > %s/m.out 2>&1", dir, dir, dir);
    cr_assert_eq(rc, 0, "mpirun failed (%s/m.out)", dir);
    x = cli_run("exec --plan %s/h.json --steps 3 --quiet --save %s/i.ckpt",
                dir, dir);
    cr_assert_eq(x.code, 0, "%s", x.err);
    cli_result_free(&x);
    cr_expect_eq(sh_run("cmp -s %s/m.ckpt %s/i.ckpt", dir, dir), 0,
                 "fsdp hybrid: mpirun and in-process differ");
    test_rm_rf(dir);
}

Test(exec_zero, mpirun_gives_the_in_process_bits)
{
    char *dir = test_tmpdir();
    /* the last: the wave's two stages on each rank hold the tied table's
     * copies, exchanged between stages of one device */
    const char *sched[3] = {"1f1b", "1f1b", "wave --waves 1"};
    for (int i = 0; i < 3; i++) {
        int z = i ? 2 : 1;
        cli_result x = cli_run("sim --hw 'cpu x2' --model %s --schedule %s "
                               "--pp 1 --dp 2 --mbs 2 --microbatches 3 "
                               "--zero %d --out %s/z.json", PICO, sched[i],
                               z, dir);
        cr_assert_eq(x.code, 0, "%s", x.err);
        cli_result_free(&x);
        int rc = sh_run("%s \"$SLUICE\" exec --plan %s/z.json --steps 3 "
                        "--quiet --save %s/m.ckpt > %s/m.out 2>&1", MPIRUN,
                        dir, dir, dir);
        cr_assert_eq(rc, 0, "mpirun failed (%s/m.out)", dir);
        x = cli_run("exec --plan %s/z.json --steps 3 --quiet --save "
                    "%s/i.ckpt", dir, dir);
        cr_assert_eq(x.code, 0, "%s", x.err);
        cli_result_free(&x);
        cr_expect_eq(sh_run("cmp -s %s/m.ckpt %s/i.ckpt", dir, dir), 0,
                     "zero %d, %s: mpirun and in-process differ", z,
                     sched[i]);
        /* a sharded run's checkpoint is a whole one: it resumes unsharded */
        x = cli_run("sim --hw 'cpu x2' --model %s --schedule 1f1b --pp 1 "
                    "--dp 2 --mbs 2 --microbatches 3 --out %s/u.json", PICO,
                    dir);
        cr_assert_eq(x.code, 0, "%s", x.err);
        cli_result_free(&x);
        x = cli_run("exec --plan %s/u.json --steps 4 --quiet --resume "
                    "%s/i.ckpt", dir, dir);
        cr_expect_eq(x.code, 0, "%s", x.err);
        cli_result_free(&x);
    }
    test_rm_rf(dir);
}

/* The report's simulated columns are the plan as this executor runs it
 * (ZeRO-3's whole stages gathered, each microbatch's whole gradient
 * reduced); beside them it says so and gives `sluice sim`'s answer for
 * the plan, which prices FSDP's layer at a time: the same figures as
 * `sluice sim --json` (before, the footer called the run's prediction
 * `sluice sim`'s, 133 MiB against the 86 MiB sim printed for gpt-mini).
 * An unsharded plan's run says nothing of it. */
Test(exec_zero, the_report_gives_sluice_sims_answer_beside_its_own)
{
    char *dir = test_tmpdir();
    /* the model with dropout: `sluice sim` prices its masks, the run's
     * prediction (fp32, no dropout) does not, so sluice_sim must come
     * from the plan's own model, not the run's */
    cr_assert_eq(sh_run("sed 's/\"dropout\": false/\"dropout\": true/' "
                        "%s > %s/drop.json && grep -q '\"dropout\": true' "
                        "%s/drop.json", PICO, dir, dir), 0);
    char drop[600];
    snprintf(drop, sizeof drop, "%s/drop.json", dir);
    for (int z = 0; z < 4; z += 3) {
        cli_result x = cli_run("sim --hw 'cpu x2' --model %s --schedule 1f1b "
                               "--pp 1 --dp 2 --mbs 2 --microbatches 2 "
                               "--zero %d --out %s/z.json", z ? drop : PICO,
                               z, dir);
        cr_assert_eq(x.code, 0, "%s", x.err);
        cli_result_free(&x);
        json_t *sj = cli_json("sim --plan %s/z.json --json", dir);
        json_t *ej = cli_json("exec --plan %s/z.json --steps 2 --json", dir);
        cr_assert(sj && ej);
        json_t *ss = json_object_get(ej, "sluice_sim");
        cr_expect_eq(ss != NULL, z >= 2, "zero %d: sluice_sim %s", z,
                     ss ? "given" : "missing");
        if (ss) {
            double a = json_number_value(json_object_get(
                       ss, "iteration_time_s")),
                   b = json_number_value(json_object_get(
                       sj, "iteration_time_s"));
            cr_expect(a > 0 && a == b, "sluice_sim's iteration %.9f s, "
                      "sluice sim's %.9f", a, b);
        }
        for (size_t d = 0; ss && d < 2; d++) {
            double a = json_number_value(json_array_get(
                       json_object_get(ss, "peak_mem_bytes"), d)),
                   b = json_number_value(json_object_get(json_array_get(
                       json_object_get(sj, "devices"), d), "peak_mem_bytes")),
                   c = json_number_value(json_object_get(json_array_get(
                       json_object_get(json_object_get(ej, "predicted"),
                                       "devices"), d), "peak_mem_bytes"));
            cr_expect(a > 0 && a == b && c > a, "device %zu: sluice_sim "
                      "%.0f bytes, sluice sim %.0f, the run's prediction "
                      "%.0f", d, a, b, c);
        }
        json_decref(sj);
        json_decref(ej);
        x = cli_run("exec --plan %s/z.json --steps 2", dir);
        cr_assert_eq(x.code, 0, "%s", x.err);
        cr_expect_eq(strstr(x.out, "`sluice sim` prices FSDP's layer at a "
                            "time") != NULL, z >= 2, "%s", x.out);
        cr_expect_eq(strstr(x.out, "as this executor runs it") != NULL,
                     z >= 2, "%s", x.out);
        cli_result_free(&x);
    }
    test_rm_rf(dir);
}

/* A checkpoint saved sharded is a whole one: the unsharded run's file,
 * and either run resumes it. */
Test(exec_zero, checkpoints_resume_with_or_without_sharding)
{
    char *dir = test_tmpdir();
    const char *sim = "sim --hw 'cpu x2' --model " PICO " --schedule 1f1b "
                      "--pp 1 --dp 2 --mbs 2 --microbatches 2";
    cli_result x = cli_run("%s --zero 1 --out %s/z.json", sim, dir);
    cr_assert_eq(x.code, 0, "%s", x.err);
    cli_result_free(&x);
    x = cli_run("%s --out %s/u.json", sim, dir);
    cr_assert_eq(x.code, 0, "%s", x.err);
    cli_result_free(&x);
    const char *ex = "--quiet --clip 0 --steps";
    const char *runs[][4] = {
        {"z", "3", "", "a"}, {"u", "3", "", "b"},
        {"u", "4", "a", "c"}, {"z", "4", "b", "d"},
    };
    for (int i = 0; i < 4; i++) {
        char res[600] = "";
        if (runs[i][2][0])
            snprintf(res, sizeof res, "--resume %s/%s.ckpt", dir,
                     runs[i][2]);
        x = cli_run("exec --plan %s/%s.json %s %s %s --save %s/%s.ckpt", dir,
                    runs[i][0], ex, runs[i][1], res, dir, runs[i][3]);
        cr_assert_eq(x.code, 0, "%s", x.err);
        cli_result_free(&x);
    }
    cr_expect_eq(sh_run("cmp -s %s/a.ckpt %s/b.ckpt", dir, dir), 0,
                 "ZeRO-1's checkpoint is not the unsharded run's");
    cr_expect_eq(sh_run("cmp -s %s/c.ckpt %s/d.ckpt", dir, dir), 0,
                 "resumed across sharding, the runs differ");
    test_rm_rf(dir);
}

/* The weights' state a device keeps, measured against the simulator's
 * account of the same IR. */
Test(exec_zero, sharded_runs_hold_less)
{
    const char *args = "--hw 'cpu x2' --model " UNTIED " --schedule 1f1b "
                       "--pp 1 --dp 2 --mbs 1 --microbatches 1";
    double peak[4], stat[4];
    for (int z = 0; z < 4; z++) {
        exec_pipe_result r;
        sim_plan p;
        sim_result sr;
        sim_engine *en = zsim(args, z, &r, &p, &sr);
        peak[z] = r.peak_bytes[0] + r.peak_bytes[1];
        stat[z] = r.static_bytes[0] + r.static_bytes[1];
        double sim = sr.dev[0].peak_bytes + sr.dev[1].peak_bytes;
        cr_log_info("zero %d: peak per device %.1f KiB measured, %.1f KiB "
                    "simulated", z, peak[z] / 2048, sim / 2048);
        /* the executor's prediction prices its sharding as it runs it
         * (whole stages gathered, whole gradients until their rings:
         * sim_cost_opts.whole_shards): ZeRO-3 was 24% under, priced as
         * FSDP's two layers */
        if (z < 3)
            cr_expect(fabs(peak[z] - sim) <= 0.02 * sim, "zero %d: peak "
                      "%.0f measured, %.0f simulated", z, peak[z], sim);
        /* ZeRO-3: a gather's chunk comes into a buffer of its own, which
         * the simulator holds while it comes; there a task's buffers are
         * taken at its start, here op by op, and the chunk is copied in
         * place (the rings' buffers go) between two ops: the prediction
         * is over, never under (12% on this model, whose ops take
         * microseconds; 4 microbatches of gpt-mini within 0.5%,
         * exec/README.md) */
        else
            cr_expect(peak[z] <= 1.005 * sim && peak[z] >= 0.85 * sim,
                      "zero 3: peak %.0f measured, %.0f simulated", peak[z],
                      sim);
        sim_engine_free(en);
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
    /* two ranks: ZeRO-1 keeps half of m and v for the run (a quarter of
     * the state less), ZeRO-2 no gradient between steps (its shard lives
     * from the first reduced microbatch to the update) */
    cr_expect(stat[1] < stat[0] * 0.76 && stat[1] > stat[0] * 0.74,
              "zero 1 keeps %.0f bytes, zero 0 %.0f", stat[1], stat[0]);
    cr_expect(stat[2] < stat[0] * 0.51 && stat[2] > stat[0] * 0.49,
              "zero 2 keeps %.0f bytes, zero 0 %.0f", stat[2], stat[0]);
    /* ZeRO-3 half the weights too: 1.5 of the 4 copies */
    cr_expect(stat[3] < stat[0] * 0.38 && stat[3] > stat[0] * 0.37,
              "zero 3 keeps %.0f bytes, zero 0 %.0f", stat[3], stat[0]);
    cr_expect(peak[1] < peak[0], "zero 1 peak %.0f, zero 0 %.0f", peak[1],
              peak[0]);
    /* ZeRO-2 saves between microbatches and steps: while a backward
     * runs, its whole gradient is there (each microbatch's in a buffer
     * of its own, dropped when its ring is done: when depends on the
     * threads' timing), so its peak is about ZeRO-1's, not below */
    cr_expect(peak[2] < peak[0], "zero 2 peak %.0f, zero 1 %.0f, zero 0 "
              "%.0f", peak[2], peak[1], peak[0]);
}

/* Under tensor parallelism a gather's ring step carries every lane's
 * chunk, and a device receives its own lane's: the prediction holds one
 * (it held all: ZeRO-3 22% over at tp 2), within the margin tp 1
 * shows. */
Test(exec_zero, tensor_parallel_shards_hold_their_lane)
{
    const char *args = "--hw 'cpu x4' --model " UNTIED " --schedule 1f1b "
                       "--pp 1 --dp 2 --tp 2 --mbs 2 --microbatches 1";
    for (int z = 2; z < 4; z++) {
        exec_pipe_result r;
        sim_plan p;
        sim_result sr;
        sim_engine *en = zsim(args, z, &r, &p, &sr);
        /* a device per replica, its lanes the tensor-parallel ranks */
        cr_assert_eq(r.n_devices, 2);
        for (int d = 0; d < r.n_devices; d++) {
            double m = r.peak_bytes[d], s = sr.dev[d].peak_bytes;
            cr_log_info("zero %d, device %d: peak %.1f KiB measured, %.1f "
                        "KiB simulated", z, d, m / 1024, s / 1024);
            /* ZeRO-3 as at tp 1 (sharded_runs_hold_less); ZeRO-2 priced
             * as it is held, but for what tensor parallelism adds
             * unpriced at any stage (2.3% of this tiny model, ZeRO-0's
             * too). One microbatch: with two, four workers on two cores
             * keep a second microbatch's gradient as its ring's timing
             * has it (18% over, some runs). ZeRO-3's devices read 8%
             * under in runs alone here (456.8 KiB against 497.8) and
             * once, under make test's ASan load, 0.54% over (512512
             * bytes against 509760): the run's timing moves it, so 1% */
            double hi = z == 3 ? 1.01 : 1.03, lo = z == 3 ? 0.85 : 0.98;
            cr_expect(m <= hi * s && m >= lo * s, "zero %d, device %d: "
                      "peak %.0f measured, %.0f simulated", z, d, m, s);
        }
        sim_engine_free(en);
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
}

/* A replica falling behind: a data-parallel ring moves nothing before
 * both ranks are in it, so the early rank's chunks do not wait on the late
 * one, taking its memory while it still computes; each device peaks as
 * the simulator's identical replicas do. */
Test(exec_zero, a_late_replica_takes_no_early_chunk)
{
    const char *args = "--hw 'cpu x2' --model " UNTIED " --schedule 1f1b "
                       "--pp 1 --dp 2 --mbs 1 --microbatches 2";
    for (int z = 0; z < 4; z++) {
        sim_plan p;
        exec_pipe_result r;
        sim_result sr;
        sim_engine *en = zsim_at(args, z, 2, 20000, &r, &p, &sr);
        /* ZeRO-2's whole gradient per microbatch and ZeRO-3's whole
         * stage gathered are the executor's own (exec/README.md): their
         * rings only run here, gated alike */
        for (int d = 0; d < 2 && z < 2; d++)
            cr_expect(fabs(r.peak_bytes[d] - sr.dev[d].peak_bytes) <=
                          0.005 * sr.dev[d].peak_bytes,
                      "zero %d, device %d: peak %.0f bytes, simulated "
                      "%.0f", z, d, r.peak_bytes[d], sr.dev[d].peak_bytes);
        cr_expect(z >= 2 || fabs(r.peak_bytes[0] - r.peak_bytes[1]) <=
                                0.005 * r.peak_bytes[0],
                  "zero %d: the late replica peaks at %.0f bytes, the "
                  "other at %.0f", z, r.peak_bytes[1], r.peak_bytes[0]);
        sim_engine_free(en);
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
}

/* ZeRO-2 and 3 with the other replica behind: each microbatch's whole
 * gradient lives until its ring is done, and a stage's next backward
 * waits for that ring, so the replica ahead holds one whole gradient
 * beyond the simulation at most (it held one more per microbatch it led
 * by: 137 MiB against 96 for gpt-mini's ZeRO-2). */
Test(exec_zero, a_replica_ahead_holds_one_whole_gradient)
{
    const char *args = "--hw 'cpu x2' --model " UNTIED " --schedule 1f1b "
                       "--pp 1 --dp 2 --mbs 1 --microbatches 6";
    for (int z = 2; z < 4; z++) {
        sim_plan p;
        exec_pipe_result r;
        sim_result sr;
        sim_engine *en = zsim_at(args, z, 2, 20000, &r, &p, &sr);
        double whole = r.costs->stage[0].train_bytes;
        for (int d = 0; d < 2; d++)
            cr_expect(r.peak_bytes[d] <= sr.dev[d].peak_bytes + 1.02 * whole,
                      "zero %d, device %d: peak %.0f bytes, simulated %.0f, "
                      "a whole gradient %.0f", z, d, r.peak_bytes[d],
                      sr.dev[d].peak_bytes, whole);
        sim_engine_free(en);
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
}

Test(exec_zero, what_is_not_run_is_refused)
{
    char *dir = test_tmpdir();
    /* hw: the plan's devices */
    const struct { const char *sim, *exec, *want, *hw; } cases[] = {
        {"--model " PICO " --pp 2 --dp 1 --zero 2", "",
         "needs data parallelism", "cpu"},
        {"--model " PICO " --pp 1 --dp 2 --zero 1",
         "--offload zero-offload", "the tier holds a stage's whole state",
         "cpu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int n = strstr(cases[i].sim, "--pp 2 --dp 2") ||
                strstr(cases[i].sim, "--dp 4") ? 4 : 2;
        cli_result x = cli_run("sim --hw '%s x%d' --schedule 1f1b --mbs 2 "
                               "--microbatches 2 %s --out %s/p.json",
                               cases[i].hw, n, cases[i].sim, dir);
        if (x.code) {
            /* the plan itself is refused (sim_zero_check) */
            cr_expect(strstr(x.err, cases[i].want), "%s", x.err);
            cli_result_free(&x);
            continue;
        }
        cli_result_free(&x);
        cli_expect(2, cases[i].want, "exec --plan %s/p.json --steps 1 %s",
                   dir, cases[i].exec);
    }
    test_rm_rf(dir);
}

/* Llama's decoder sharded as GPT's: ZeRO-3 with one microbatch is the
 * unsharded run's bits, with QLoRA's base too; ZeRO-1 with tensor
 * parallelism (a rank's query, key and value heads, gate and up rows)
 * the all-reduce's. */
Test(exec_zero, llama)
{
    vs_unsharded("--hw 'cpu x4' --model tests/data/exec/llama-pico.json "
                 "--schedule 1f1b --pp 2 --dp 2 --mbs 4 --microbatches 1", 3,
                 -1);
    vs_unsharded("--hw 'cpu x4' --model tests/data/exec/llama-pico.json "
                 "--schedule 1f1b --pp 1 --dp 2 --tp 2 --mbs 2 "
                 "--microbatches 2", 1, -1);
    /* QLoRA: the 4-bit base is frozen, replicated, never sharded */
    vs_unsharded("--hw 'cpu x4' --model tests/data/exec/llama-pico.json "
                 "--schedule 1f1b --pp 2 --dp 2 --mbs 4 --microbatches 1 "
                 "--finetune qlora:4", 3, -1);
}

/* ZeRO-3 with LoRA or QLoRA and weight gradients in a pass of their own
 * (zero-bubble): the W pass gathers no weights, and the adapters'
 * gradients take the d(x A) their input pass kept, so the run is
 * ZeRO-2's bits; with one microbatch the unsharded run's. */
Test(exec_zero, zero3_adapters_with_a_weight_pass)
{
    vs_stage("--hw 'cpu x4' --model " UNTIED " --schedule zb-h1 --pp 2 "
             "--dp 2 --mbs 2 --microbatches 4 --finetune lora:4", 2, 3, -1);
    vs_stage("--hw 'cpu x4' --model tests/data/exec/llama-pico.json "
             "--schedule zb-h1 --pp 2 --dp 2 --mbs 2 --microbatches 4 "
             "--finetune qlora:4", 2, 3, -1);
    vs_unsharded("--hw 'cpu x4' --model " UNTIED " --schedule zb-v --pp 2 "
                 "--dp 2 --mbs 4 --microbatches 1 --finetune lora:4:all", 3,
                 -1);
}

/* A T5's three tied tables (the token table of its embeddings and head,
 * each stack's relative-position table on every stage of its
 * self-attentions) summed once per step under ZeRO-2 and 3, each copy's
 * gradient kept whole until its exchange: with one microbatch the
 * unsharded run's bits, ZeRO-3 ZeRO-2's; with four within fp32
 * reordering; T5 1.1's head of its own and LoRA too. */
Test(exec_zero, t5)
{
#define T5 "--model tests/data/exec/t5-tiny.json "
    for (int z = 2; z <= 3; z++)
        vs_unsharded("--hw 'cpu x4' " T5 "--schedule 1f1b --pp 2 --dp 2 "
                     "--mbs 2 --microbatches 1", z, -1);
    vs_unsharded("--hw 'cpu x4' " T5 "--schedule 1f1b --pp 2 --dp 2 "
                 "--mbs 1 --microbatches 4", 2, 1e-5);
    vs_stage("--hw 'cpu x4' " T5 "--schedule 1f1b --pp 2 --dp 2 --mbs 1 "
             "--microbatches 4", 2, 3, -1);
    vs_unsharded("--hw 'cpu x4' --model tests/data/exec/t5-v11-tiny.json "
                 "--schedule 1f1b --pp 2 --dp 2 --mbs 2 --microbatches 1", 3,
                 -1);
    vs_stage("--hw 'cpu x4' " T5 "--schedule zb-h1 --pp 2 --dp 2 --mbs 1 "
             "--microbatches 4 --finetune lora:4:all", 2, 3, -1);
#undef T5
}
