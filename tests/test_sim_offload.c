/* Offload schedules (ZeRO-Offload, ZeRO-Infinity, Fuyou): the bytes the
 * IR moves over PCIe and the drives against their closed forms, the GPU
 * memory each policy keeps, an NVMe-bound iteration against the drive's
 * bandwidth and a compute-bound one against the compute, Fuyou's overlap
 * against ZeRO-Infinity's separate optimizer stage, the tiers' capacity
 * errors, plan files and the hardware string's options. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"
#include "tests/harness.h"

typedef struct orun {
    double rd, wr, in, out;     /* NVMe read / write, PCIe in / out bytes */
    int n_cpu;                  /* CPU steps */
    double w, tr, opt;          /* summed over the stages */
    double w_first, w_last;     /* the first and last stage's weights */
    int n_stages;
    int64_t cpu_ns, compute_ns, iteration_ns;
    double static_bytes, peak_bytes, drive_ns;
    sim_offload_use use;
} orun;

static void osim(const char *model, sim_sched s, int mbs, int m, int drives,
                 double host_gib, int tier, orun *o)
{
    util_err e;
    prof_model *md = prof_model_load(model, &e);
    cr_assert_not_null(md, "%s", e.msg);
    prof_hw_opts ho = {.nvme = drives, .host_mem_bytes = host_gib * (1 << 30)};
    prof_topo *t = prof_topo_template("rtx4090", 1, &ho, &e);
    cr_assert_not_null(t, "%s", e.msg);
    sim_plan p;
    sim_plan_init(&p);
    p.sched = s;
    p.mbs = mbs;
    p.n_mb = m;
    p.recompute = SIM_RC_FULL;
    p.tier = tier;
    sim_plan_stages(&p, md->n_layers);
    cr_assert_eq(sim_partition_even(md, p.n_stages, p.first_op, p.last_op,
                                    &e), 0, "%s", e.msg);
    sim_costs *c;
    sim_ir *ir;
    sim_engine *en;
    sim_result r;
    cr_assert_eq(plan_simulate(&p, md, t, 0, 0, &c, &ir, &en, &r, &e), 0,
                 "%s", e.msg);
    memset(o, 0, sizeof *o);
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *x = &ir->tasks[i];
        if (x->kind == SIM_NVME_READ) o->rd += x->bytes;
        if (x->kind == SIM_NVME_WRITE) o->wr += x->bytes;
        if (x->kind == SIM_SWAP_IN) o->in += x->bytes;
        if (x->kind == SIM_SWAP_OUT) o->out += x->bytes;
        if (x->kind == SIM_CPU_OPT) o->n_cpu++;
        if (x->stream == SIM_STREAM_COMPUTE)
            o->compute_ns += r.end_ns[i] - r.start_ns[i];
    }
    for (int st = 0; st < c->n_stages; st++) {
        o->w += c->stage[st].weight_bytes;
        o->tr += c->stage[st].train_bytes;
        o->opt += c->stage[st].opt_bytes;
        o->cpu_ns += c->stage[st].cpu_opt_ns;
    }
    o->w_first = c->stage[0].weight_bytes;
    o->w_last = c->stage[c->n_stages - 1].weight_bytes;
    o->n_stages = c->n_stages;
    if (c->n_drives) {
        const prof_node *d = &t->nodes[c->drive[0]];
        o->drive_ns = (o->rd / d->read_bw_bytes_per_s +
                       o->wr / d->write_bw_bytes_per_s) / c->n_drives * 1e9;
    }
    o->iteration_ns = r.iteration_ns;
    o->static_bytes = r.dev[0].static_bytes;
    o->peak_bytes = r.dev[0].peak_bytes;
    sim_offload_usage(ir, &r, &o->use);
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(c);
    sim_plan_free(&p);
    prof_topo_free(t);
    prof_model_free(md);
}

static void near(double got, double want, const char *what)
{
    cr_assert(fabs(got - want) <= 1e-9 * want + 1, "%s: %.0f, closed form "
              "%.0f", what, got, want);
}

Test(sim_offload, fuyou_moves_each_layer_twice_and_steps_it_once)
{
    orun o;
    osim("gpt2", SIM_SCHED_FUYOU, 2, 3, 2, 64, SIM_TIER_AUTO, &o);
    /* weights read for the forward and again for the backward, but the
     * last stage's backward follows its forward: read once */
    near(o.rd, 2 * o.w - o.w_last + o.opt, "NVMe reads");
    near(o.wr, o.opt + o.tr, "NVMe writes");
    near(o.in, 2 * o.w - o.w_last, "PCIe to GPU");
    near(o.out, o.tr, "PCIe from GPU (once per stage)");
    cr_assert_eq(o.n_cpu, o.n_stages);
    cr_assert_eq(o.static_bytes, 0);
}

Test(sim_offload, zero_infinity_fetches_per_microbatch)
{
    orun o;
    int m = 3;
    osim("gpt2", SIM_SCHED_ZERO_INFINITY, 2, m, 2, 64, SIM_TIER_AUTO, &o);
    /* per microbatch: every stage for the forward, all but the last again
     * for the backward; the first stage's backward runs on into the next
     * microbatch's forward, its weights still there */
    double in = m * (2 * o.w - o.w_last) - (m - 1) * o.w_first;
    near(o.in, in, "PCIe to GPU");
    near(o.rd, in + o.opt, "NVMe reads");
    near(o.out, m * o.tr, "PCIe from GPU (every backward)");
    /* on the DRAM tier nothing touches the drives */
    osim("gpt2", SIM_SCHED_ZERO_INFINITY, 2, m, 2, 64, SIM_TIER_DRAM, &o);
    cr_assert_eq(o.rd + o.wr, 0);
    near(o.in, in, "PCIe to GPU, DRAM tier");
}

Test(sim_offload, zero_offload_keeps_fp16_weights_on_the_gpu)
{
    orun o;
    osim("gpt2", SIM_SCHED_ZERO_OFFLOAD, 2, 2, 1, 64, SIM_TIER_AUTO, &o);
    near(o.static_bytes, o.w, "static GPU bytes");
    near(o.in, o.tr, "updated weights back to the GPU");
    near(o.out, 2 * o.tr, "gradients per microbatch");
    cr_assert_eq(o.rd + o.wr, 0);
    /* the same order without the resident weights: two stages' at most */
    orun z;
    osim("gpt2", SIM_SCHED_ZERO_INFINITY, 2, 2, 1, 64, SIM_TIER_AUTO, &z);
    cr_assert_eq(z.static_bytes, 0);
    cr_assert_lt(z.peak_bytes, o.peak_bytes - 0.5 * o.w);
}

Test(sim_offload, one_drive_bounds_the_iteration)
{
    orun o;
    osim("gpt2", SIM_SCHED_ZERO_INFINITY, 1, 1, 1, 64, SIM_TIER_NVME, &o);
    cr_assert_eq(o.use.bound, SIM_OFL_NVME);
    /* reads and writes share the drive: never faster than both in turn */
    cr_assert_geq((double)o.iteration_ns, o.drive_ns * 0.999);
    cr_assert_leq((double)o.iteration_ns,
                  1.05 * o.drive_ns + (double)o.compute_ns,
                  "iteration %lld ns, drive %.0f ns",
                  (long long)o.iteration_ns, o.drive_ns);
}

Test(sim_offload, fuyou_hides_the_optimizer_behind_backward)
{
    orun f, z;
    osim("gpt2", SIM_SCHED_FUYOU, 8, 4, 12, 64, SIM_TIER_NVME, &f);
    osim("gpt2", SIM_SCHED_ZERO_INFINITY, 8, 4, 12, 64, SIM_TIER_NVME, &z);
    cr_assert_eq(f.use.bound, SIM_OFL_GPU);
    /* compute-bound: within a tenth of the compute, where ZeRO adds the
     * whole CPU step after the backward */
    cr_assert_leq((double)f.iteration_ns, 1.1 * (double)f.compute_ns);
    cr_assert_geq((double)z.iteration_ns,
                  (double)z.compute_ns + 0.9 * (double)z.cpu_ns);
    cr_assert_lt(f.iteration_ns, z.iteration_ns);
}

Test(sim_offload, deterministic)
{
    orun a, b;
    osim("gpt2", SIM_SCHED_FUYOU, 2, 2, 3, 64, SIM_TIER_AUTO, &a);
    osim("gpt2", SIM_SCHED_FUYOU, 2, 2, 3, 64, SIM_TIER_AUTO, &b);
    cr_assert_eq(a.iteration_ns, b.iteration_ns);
    cr_assert_eq(a.peak_bytes, b.peak_bytes);
}

Test(sim_offload, tiers_that_cannot_hold_the_states)
{
    cli_expect(2, "host DRAM cannot hold what the dram tier needs there",
               "sim --hw rtx4090 x1 --model gpt2 --schedule zero-offload "
               "--mbs 1 --microbatches 1 --host-mem 1G");
    cli_expect(2, "missing in DRAM",
               "sim --hw rtx4090 x1 --model gpt3-175b --schedule "
               "zero-infinity --mbs 1 --microbatches 1 --host-mem 256G "
               "--nvme 12");
    cli_expect(2, "missing on NVMe",
               "sim --hw rtx4090 x1 --model gpt3-175b --schedule fuyou "
               "--mbs 1 --microbatches 1 --host-mem 512G --nvme 1");
    cli_expect(2, "zero-offload keeps its states in host DRAM",
               "sim --hw rtx4090 x1 --model gpt2 --schedule zero-offload "
               "--mbs 1 --microbatches 1 --offload-tier nvme");
    cli_expect(2, "--offload-tier 'ssd': expected auto, dram or nvme",
               "sim --hw rtx4090 x1 --model gpt2 --schedule fuyou "
               "--mbs 1 --microbatches 1 --offload-tier ssd");
    cli_expect(2, "offloads the model of one GPU",
               "sim --hw rtx4090 x2 --model gpt2 --schedule fuyou --pp 2 "
               "--mbs 1 --microbatches 1");
    cli_expect(2, "--host-mem 'lots': expected a size",
               "sim --hw rtx4090 x1 --model gpt2 --schedule fuyou "
               "--mbs 1 --microbatches 1 --host-mem lots");
}

Test(sim_offload, the_plan_keeps_tier_and_host)
{
    char *dir = test_tmpdir();
    char plan[300], bad[300];
    snprintf(plan, sizeof plan, "%s/p.json", dir);
    cli_expect(0, "bound by",
               "sim --hw rtx4090 x1 --model gpt2 --schedule zero-infinity "
               "--mbs 1 --microbatches 2 --host-mem 96G --nvme 2 "
               "--offload-tier dram --out %s", plan);
    /* the plan runs the same: its hw keeps the host's options */
    cli_expect(0, "model states in host DRAM; host DRAM 5.08 GiB of "
               "96.00 GiB", "sim --plan %s", plan);
    cli_result r = cli_run("sim --plan %s --json", plan);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "\"tier\": \"dram\""), "%s", r.out);
    cli_result_free(&r);
    /* a tier on a schedule that keeps its state on the GPU */
    snprintf(bad, sizeof bad, "%s/b.json", dir);
    FILE *f = fopen(bad, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"sluice_plan\": 1, \"model\": \"gpt2\", \"hw\": \"rtx4090 "
               "x1\", \"schedule\": \"gpipe\", \"pp\": 1, \"mbs\": 1,\n"
               " \"microbatches\": 1, \"offload_tier\": \"nvme\", \"stages\":"
               " [{\"ops\": [0, 1], \"device\": 0}]}\n");
    fclose(f);
    cli_expect(2, "b.json:2:", "sim --plan %s", bad);
    cli_expect(2, "field 'offload_tier'", "sim --plan %s", bad);
    cli_expect(2, "--hw: unknown option '--disk'",
               "sim --hw 'rtx4090 x1 --disk 2' --model gpt2 --schedule "
               "fuyou --mbs 1 --microbatches 1");
    test_rm_rf(dir);
}

Test(sim_offload, the_planner_compares_the_policies)
{
    char *dir = test_tmpdir();
    char plan[300];
    snprintf(plan, sizeof plan, "%s/p.json", dir);
    cli_result r = cli_run("plan --hw rtx4090 x1 --host-mem 96G --nvme 2 "
                           "--model gpt2 --batch 8 --schedule "
                           "fuyou,zero-infinity,zero-offload --out %s", plan);
    cr_assert_eq(r.code, 0, "%s", r.err);
    /* every policy planned and shown, the chosen one with its tiers and
     * the resource that bounds it; nothing else searched */
    cr_assert(strstr(r.out, "bound by: "), "%s", r.out);
    cr_assert(strstr(r.out, "offload: model states in "), "%s", r.out);
    const char *pol[] = {"fuyou", "zero-infinity", "zero-offload"};
    for (int k = 0; k < 3; k++) {
        char row[64];
        snprintf(row, sizeof row, "\n  %-13s", pol[k]);
        const char *at = strstr(r.out, row);
        cr_assert(at, "no row for %s in %s", pol[k], r.out);
        char line[200];
        snprintf(line, sizeof line, "%.*s", (int)strcspn(at + 1, "\n"),
                 at + 1);
        cr_assert(strstr(line, "chosen") || strstr(line, "slower") ||
                  strstr(line, "out of memory"), "%s", line);
    }
    cr_assert(strstr(r.out, "1f1b                   -"), "%s", r.out);
    cli_result_free(&r);
    /* the plan it wrote runs in sim on the same host */
    cli_expect(0, "of 96.00 GiB", "sim --plan %s", plan);
    r = cli_run("plan --hw rtx4090 x1 --host-mem 96G --nvme 2 --model gpt2 "
                "--batch 8 --schedule fuyou,zero-infinity --json");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "\"bound_by\""), "%s", r.out);
    cr_assert(strstr(r.out, "\"schedule\": \"zero-infinity\""), "%s", r.out);
    cli_result_free(&r);
    cli_expect(2, "unknown schedule 'fuyu'", "plan --hw rtx4090 x1 --model "
               "gpt2 --schedule fuyu");
    test_rm_rf(dir);
}

Test(sim_offload, the_timeline_draws_the_tiers)
{
    char *dir = test_tmpdir();
    char pre[300], gp[320];
    snprintf(pre, sizeof pre, "%s/o", dir);
    /* without gnuplot the data and script are written all the same */
    cli_result r = cli_run("sim --hw rtx4090 x1 --model gpt2 --schedule fuyou "
                           "--mbs 1 --microbatches 2 --nvme 2 --plot %s", pre);
    cli_result_free(&r);
    snprintf(gp, sizeof gp, "%s.gp", pre);
    char *s = NULL;
    util_err e;
    cr_assert_eq(util_read_file(gp, &s, NULL, &e), 0, "%s", e.msg);
    /* a row under the device per tier that moved something */
    cr_assert(strstr(s, "'dev 0' 0, 'PCIe in' -1, 'PCIe out' -2, 'NVMe' -3, "
                        "'CPU' -4"), "%s", s);
    cr_assert(strstr(s, "'NVMe write'"), "%s", s);
    free(s);
    /* a pipeline keeps one row per device and the compute legend */
    r = cli_run("sim --hw rtx2080ti x2 --model gpt2 --schedule 1f1b --pp 2 "
                "--mbs 1 --microbatches 2 --plot %s", pre);
    cli_result_free(&r);
    cr_assert_eq(util_read_file(gp, &s, NULL, &e), 0, "%s", e.msg);
    cr_assert(strstr(s, "'dev 0' 0, 'dev 1' -1)"), "%s", s);
    cr_assert(!strstr(s, "'CPU'"), "%s", s);
    free(s);
    test_rm_rf(dir);
}
