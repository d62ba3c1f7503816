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
#include <unistd.h>

#include "planner/planner.h"
#include "tests/harness.h"

typedef struct orun {
    double rd, wr, in, out;     /* NVMe read / write, PCIe in / out bytes */
    double ring;                /* sent to the other ranks' GPUs */
    int n_ring, ring_steps;     /* rank 0's ring sends; the most steps of
                                 * one ring (its sends' mb) */
    int n_cpu;                  /* CPU steps */
    double w, tr, opt;          /* summed over the stages */
    double train_params;
    double host_bytes;          /* the host DRAM the plan needs */
    double big_io, big_st;      /* the most of a stage's weights and
                                 * gradients, and of what trains and its
                                 * state */
    double big_w;               /* the most of a stage's weights */
    double big_g;               /* the most of a stage's gradient */
    double w_first, w_last;     /* the first and last stage's weights */
    int n_stages;
    int64_t cpu_ns, compute_ns, iteration_ns;
    double static_bytes, peak_bytes, drive_ns;
    sim_offload_use use;
    /* activation swaps: per microbatch, the checkpoints and the whole
     * activations the plan swaps, and the recomputation the latter spare */
    double keep_sw, act_sw, act_swap_bytes;
    int64_t r_sw_ns;
    int n_recomp, oom, act_tier;
    /* the most model-gradient buffers on the GPU at one instant (from
     * the first backward that writes one to the end of its copy out),
     * and the copies out that wait for the link */
    int grad_bufs;
    int64_t grad_out_ns;
    /* the most steps of rank 0 whose state is on the host at once: from
     * its drive read's start to its write-back's end */
    int staged_steps;
    double tied_keep;           /* sim_costs.tied_keep32 */
    double table32;             /* sim_costs.tied_table32 */
    /* the host's step of the first, a middle and the last stage, and
     * their parameters that train */
    int64_t cpu_stage_ns[3];
    double stage_params[3];
} orun;

/* The most of rank 0's steps on the drives staged at one instant. */
static int staged_at_once(const sim_ir *ir, const sim_result *r)
{
    int64_t a[512], b[512];
    int n = 0;
    for (int i = 0; i < ir->n_tasks && n < 512; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->kind != SIM_NVME_READ || t->device || t->mb >= 0) continue;
        for (int k = ir->succ_off[i]; k < ir->succ_off[i + 1]; k++) {
            int op = ir->succ[k];
            if (ir->tasks[op].kind != SIM_CPU_OPT) continue;
            for (int q = ir->succ_off[op]; q < ir->succ_off[op + 1]; q++)
                if (ir->tasks[ir->succ[q]].kind == SIM_NVME_WRITE) {
                    a[n] = r->start_ns[i];
                    b[n++] = r->end_ns[ir->succ[q]];
                }
        }
    }
    int most = 0;
    for (int i = 0; i < n; i++) {
        int at = 0;
        for (int j = 0; j < n; j++) at += a[j] <= a[i] && b[j] > a[i];
        if (at > most) most = at;
    }
    return most;
}

/* The most of the IR's buffers released by a gradient's copy out (a
 * model state's: no microbatch) alive at once in r. */
static int grad_bufs_at_once(const sim_ir *ir, const sim_result *r)
{
    int most = 0;
    for (int b = 0; b < ir->n_bufs; b++) {
        const sim_ir_buf *x = &ir->bufs[b];
        const sim_task *t = &ir->tasks[x->release];
        if (t->kind != SIM_SWAP_OUT || t->mb >= 0) continue;
        int64_t at = r->start_ns[x->alloc];
        int n = 0;
        for (int q = 0; q < ir->n_bufs; q++) {
            const sim_ir_buf *y = &ir->bufs[q];
            const sim_task *u = &ir->tasks[y->release];
            if (u->kind == SIM_SWAP_OUT && u->mb < 0 &&
                r->start_ns[y->alloc] <= at && r->end_ns[y->release] > at)
                n++;
        }
        if (n > most) most = n;
    }
    return most;
}

/* A run of model on one RTX 4090 with `drives` NVMe drives and host_gib
 * of DRAM; the last stages' whole activations and the first ones'
 * checkpoints swapped as swap[0] (checkpoints) and swap[1] (whole) say. */
/* osim_swap on `gpus` RTX 4090s of one server, dp of them data parallel
 * (each over m microbatches); o's counts are rank 0's but the drives'
 * and the CPU steps', which are all ranks'. */
static void osim_dp(const char *model, sim_sched s, int mbs, int m,
                    int drives, double host_gib, int tier, const int swap[2],
                    int gpus, int dp, orun *o);

static void osim_swap(const char *model, sim_sched s, int mbs, int m,
                      int drives, double host_gib, int tier, const int swap[2],
                      orun *o)
{
    osim_dp(model, s, mbs, m, drives, host_gib, tier, swap, 1, 1, o);
}

/* The fine-tuning mode of the next osim runs (NULL: full). */
static const char *osim_ft;

static void osim_dp(const char *model, sim_sched s, int mbs, int m,
                    int drives, double host_gib, int tier, const int swap[2],
                    int gpus, int dp, orun *o)
{
    util_err e;
    prof_model *md = prof_model_load(model, &e);
    cr_assert_not_null(md, "%s", e.msg);
    prof_finetune ft = {0};
    if (osim_ft) {
        cr_assert_eq(prof_finetune_parse(osim_ft, &ft, &e), 0, "%s", e.msg);
        cr_assert_eq(prof_model_finetune(md, &ft, &e), 0, "%s", e.msg);
    }
    prof_hw_opts ho = {.nvme = drives, .host_mem_bytes = host_gib * (1 << 30)};
    prof_topo *t = prof_topo_template("rtx4090", gpus, &ho, &e);
    cr_assert_not_null(t, "%s", e.msg);
    sim_plan p;
    sim_plan_init(&p);
    if (osim_ft) p.ft = ft;
    p.sched = s;
    p.dp = dp;
    if (gpus > dp) p.gpus_used = dp;
    p.mbs = mbs;
    p.n_mb = m;
    p.recompute = SIM_RC_FULL;
    p.tier = tier;
    p.swap_ckpt = swap[0];
    p.swap_full = swap[1];
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
        if (x->kind == SIM_CPU_OPT) o->n_cpu++;
        if (x->device) continue;
        if (x->kind == SIM_SWAP_IN) o->in += x->bytes;
        if (x->kind == SIM_SWAP_OUT) o->out += x->bytes;
        if (x->kind == SIM_SEND && x->comm == SIM_COMM_DP) {
            o->ring += x->bytes;
            o->n_ring++;
            if (x->mb + 1 > o->ring_steps) o->ring_steps = x->mb + 1;
        }
        if (x->kind == SIM_SWAP_OUT && x->mb < 0)
            o->grad_out_ns += r.end_ns[i] - r.start_ns[i];
        if (x->kind == SIM_RECOMP) o->n_recomp++;
        if (x->stream == SIM_STREAM_COMPUTE)
            o->compute_ns += r.end_ns[i] - r.start_ns[i];
    }
    for (int st = 0; st < c->n_model_stages; st++) {
        o->w += c->stage[st].weight_bytes;
        o->tr += c->stage[st].train_bytes;
        o->opt += c->stage[st].opt_bytes;
        o->train_params += c->stage[st].train_params;
        o->big_io = fmax(o->big_io, c->stage[st].weight_bytes +
                                        c->stage[st].train_bytes);
        o->big_st = fmax(o->big_st, c->stage[st].train_bytes +
                                        c->stage[st].opt_bytes);
        o->big_w = fmax(o->big_w, c->stage[st].weight_bytes);
        o->big_g = fmax(o->big_g, c->stage[st].train_bytes);
        o->cpu_ns += c->stage[st].cpu_opt_ns;
    }
    for (int st = 0; st < c->n_model_stages; st++) {
        if (st >= c->n_model_stages - swap[1]) {
            o->act_sw += c->stage[st].act_bytes;
            o->r_sw_ns += c->stage[st].r_ns + c->stage[st].task_ns;
        } else if (st < swap[0]) {
            o->keep_sw += c->stage[st].keep_bytes;
        }
    }
    o->act_swap_bytes = c->act_swap_bytes;
    o->host_bytes = c->host_bytes;
    o->tied_keep = c->tied_keep32;
    o->table32 = c->tied_table32;
    int pick[3] = {0, c->n_model_stages / 2, c->n_model_stages - 1};
    for (int k = 0; k < 3; k++) {
        o->cpu_stage_ns[k] = c->stage[pick[k]].cpu_opt_ns;
        o->stage_params[k] = c->stage[pick[k]].train_params;
    }
    o->act_tier = c->act_tier;
    o->oom = r.oom;
    o->w_first = c->stage[0].weight_bytes;
    o->w_last = c->stage[c->n_model_stages - 1].weight_bytes;
    o->n_stages = c->n_model_stages;
    if (c->n_drives) {
        const prof_node *d = &t->nodes[c->drive[0]];
        o->drive_ns = (o->rd / d->read_bw_bytes_per_s +
                       o->wr / d->write_bw_bytes_per_s) / c->n_drives * 1e9;
    }
    o->iteration_ns = r.iteration_ns;
    o->grad_bufs = grad_bufs_at_once(ir, &r);
    o->staged_steps = staged_at_once(ir, &r);
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

static void osim(const char *model, sim_sched s, int mbs, int m, int drives,
                 double host_gib, int tier, orun *o)
{
    static const int none[2] = {0, 0};
    osim_swap(model, s, mbs, m, drives, host_gib, tier, none, o);
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

/* Trained in fp32 the weights are their own master copy: the optimizer
 * state holds the moments alone, so a step reads the weights beside them
 * and writes back the same (16-bit training reads the state, master
 * weights in it, and writes it with the new 16-bit weights: above). The
 * executor moves these bytes (tests/test_exec_tiers.c). */
Test(sim_offload, an_fp32_step_reads_the_weights_it_writes)
{
    orun o;
    osim("gpt-mini", SIM_SCHED_FUYOU, 2, 3, 2, 64, SIM_TIER_AUTO, &o);
    near(o.opt, 2 * o.tr, "fp32 Adam's moments");
    near(o.rd, 2 * o.w - o.w_last + o.opt + o.tr, "NVMe reads");
    near(o.wr, o.opt + o.tr, "NVMe writes");
    osim("gpt-mini", SIM_SCHED_ZERO_INFINITY, 2, 1, 2, 64, SIM_TIER_AUTO,
         &o);
    near(o.rd - o.in, o.opt + o.tr, "the steps' NVMe reads");
    near(o.wr, o.opt + o.tr, "NVMe writes");
    /* ZeRO holds every gradient on the host in fp32 until the step: the
     * fp32 gradient's own bytes, not twice them; the tied table's newest
     * weights wait there for the head's fetches (gpt-mini trains in fp32:
     * the table's fp32 bytes) */
    cr_assert_gt(o.table32, 0);
    near(o.host_bytes, 4 * o.big_io + 3 * o.big_st + 4 * o.train_params +
                           o.table32,
         "host DRAM: staging, the fp32 gradients and the table");
    near(4 * o.train_params, o.tr, "fp32 gradients");
    /* LoRA: a step stages the adapters' state and new weights, not the
     * frozen weights, which are fetched and never stepped */
    osim_ft = "lora:8";
    osim("gpt-mini", SIM_SCHED_ZERO_INFINITY, 2, 1, 2, 64, SIM_TIER_AUTO,
         &o);
    osim_ft = NULL;
    cr_assert_lt(o.big_st, 0.1 * o.big_w);
    near(o.host_bytes, 4 * o.big_io + 3 * o.big_st + 4 * o.train_params +
                           o.table32,
         "LoRA's host DRAM");
    /* on the DRAM tier the copies go straight to and from the states but
     * for a gradient on its way to its sum; ZeRO-Offload's host holds
     * what its steps read, which in fp32 is the weights with Adam's
     * moments */
    osim("gpt-mini", SIM_SCHED_ZERO_OFFLOAD, 2, 1, 2, 64, SIM_TIER_DRAM, &o);
    near(o.host_bytes, o.big_g + 4 * o.train_params + o.opt + o.tr,
         "ZeRO-Offload's host DRAM");
    osim("gpt-mini", SIM_SCHED_ZERO_INFINITY, 2, 1, 2, 64, SIM_TIER_DRAM,
         &o);
    near(o.host_bytes, o.big_g + 4 * o.train_params + o.opt + o.w,
         "ZeRO-Infinity's host DRAM");
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
    /* reads and writes share the drive: never faster than both in turn;
     * no slower than them, the compute and the CPU's steps in turn (with
     * three steps' state staged, a read waits for the write-back two
     * steps before: the drive idles while the CPU steps) */
    cr_assert_geq((double)o.iteration_ns, o.drive_ns * 0.999);
    cr_assert_leq((double)o.iteration_ns,
                  1.05 * o.drive_ns + (double)o.compute_ns +
                      (double)o.cpu_ns,
                  "iteration %lld ns, drive %.0f ns",
                  (long long)o.iteration_ns, o.drive_ns);
}

/* A rank stages three steps' state on the drives at most (one read
 * ahead, one stepped, one written back), the host memory the plan gives
 * them: under ZeRO-Infinity, whose steps all follow the backward, and
 * under Fuyou, whose steps follow each stage's. */
Test(sim_offload, the_drives_stage_three_steps_at_most)
{
    orun o;
    osim("gpt2", SIM_SCHED_ZERO_INFINITY, 1, 2, 1, 64, SIM_TIER_NVME, &o);
    /* and all three: a read runs ahead while a step runs and the one
     * before it is written back */
    cr_assert_eq(o.staged_steps, 3, "ZeRO-Infinity: %d", o.staged_steps);
    osim("gpt2", SIM_SCHED_FUYOU, 1, 2, 1, 64, SIM_TIER_NVME, &o);
    cr_assert_leq(o.staged_steps, 3, "Fuyou: %d", o.staged_steps);
}

/* Fuyou's head holds its piece of the tied table's gradient from its
 * step to the first stage's, which sums and steps the table: GPT-2's
 * 50257 x 768 in fp32; a T5's decoder embedding a copy too; ZeRO steps
 * after the whole backward, every gradient there already */
Test(sim_offload, fuyou_keeps_the_heads_table_gradient)
{
    orun o;
    /* the head's piece of the table's gradient, in fp32 (the executor
     * keeps that, not the head's whole gradient) */
    osim("gpt2", SIM_SCHED_FUYOU, 1, 2, 1, 64, SIM_TIER_NVME, &o);
    near(o.tied_keep, 50257.0 * 768 * 4, "the head's gradient");
    osim("gpt2", SIM_SCHED_ZERO_INFINITY, 1, 2, 1, 64, SIM_TIER_NVME, &o);
    cr_assert_eq(o.tied_keep, 0);
    /* a T5's head and decoder embedding both hold a copy */
    osim("t5-3b", SIM_SCHED_FUYOU, 1, 2, 1, 256, SIM_TIER_NVME, &o);
    near(o.tied_keep, 2 * 32128.0 * 1024 * 4, "a T5's two copies");
}

/* The host steps a tied table once: the last stage's step leaves it to
 * the first, which sums the two copies of its gradient (both read, the
 * sum written: 12 bytes a parameter) and steps it; every step reads its
 * gradients once more for the norm (4 bytes a parameter). A pass costs
 * what AdamW's 28 bytes a parameter cost at the same rate, so against a
 * middle layer's step, k ns a parameter (32/28 of AdamW's): */
Test(sim_offload, the_host_steps_a_tied_table_once)
{
    static const sim_sched sc[2] = {SIM_SCHED_FUYOU,
                                    SIM_SCHED_ZERO_INFINITY};
    for (int i = 0; i < 2; i++) {
        orun o;
        osim("gpt2", sc[i], 1, 2, 1, 64, SIM_TIER_NVME, &o);
        double table = 50257.0 * 768;
        near(o.table32, 4 * table, "the table");
        /* each step rounded to a whole ns */
        double k = (double)o.cpu_stage_ns[1] / o.stage_params[1];
        double last = k * (o.stage_params[2] - table);
        double first = k * (o.stage_params[0] + 12.0 / 32 * table);
        cr_expect(fabs((double)o.cpu_stage_ns[2] - last) <= 1e-6 * last,
                  "the last stage steps all but the table: %lld ns, "
                  "closed form %.0f", (long long)o.cpu_stage_ns[2], last);
        cr_expect(fabs((double)o.cpu_stage_ns[0] - first) <= 1e-6 * first,
                  "the first steps the table over the copies' sum: %lld "
                  "ns, closed form %.0f", (long long)o.cpu_stage_ns[0],
                  first);
    }
}

/* What the capacity check charges host DRAM holds the simulated peak, on
 * either tier: Fuyou's gradients wait for their steps two at most (a
 * copy out waits for the step two before it), ZeRO's all of them. */
Test(sim_offload, the_host_check_holds_the_peak_in_time)
{
    static const char *const run[][2] = {
        {"fuyou", "dram"}, {"fuyou", "nvme"}, {"zero-infinity", "dram"},
        {"zero-infinity", "nvme"}, {"zero-offload", "dram"}};
    for (size_t k = 0; k < sizeof run / sizeof *run; k++) {
        json_t *j = cli_json("sim --hw rtx4090 x1 --model gpt2 --schedule %s "
                             "--offload-tier %s --act-swap 0:0 --mbs 4 "
                             "--microbatches 2 --json", run[k][0], run[k][1]);
        json_t *o = json_object_get(j, "offload");
        double peak = json_number_value(json_object_get(o, "host_peak_bytes"));
        double held = json_number_value(json_object_get(o, "host_bytes"));
        cr_expect_gt(peak, 0, "%s %s", run[k][0], run[k][1]);
        cr_expect(peak <= held * (1 + 1e-9), "%s %s: peak %.0f, charged %.0f",
                  run[k][0], run[k][1], peak, held);
        json_decref(j);
    }
    /* activations on the drives: two wait in DRAM on their way there at
     * most (a copy out waits for the write two before it), where they
     * piled up at the drive's pace */
    json_t *j = cli_json("sim --hw rtx4090 x1 --model gpt2-xl --host-mem 16G "
                         "--nvme 2 --schedule fuyou --offload-tier nvme "
                         "--act-swap 0:24 --mbs 2 --microbatches 4 --json");
    json_t *o = json_object_get(j, "offload");
    cr_expect_str_eq(json_string_value(json_object_get(o, "act_tier")),
                     "nvme");
    double peak = json_number_value(json_object_get(o, "host_peak_bytes"));
    double held = json_number_value(json_object_get(o, "host_bytes"));
    cr_expect(peak <= held * (1 + 1e-9), "peak %.0f, charged %.0f", peak,
              held);
    json_decref(j);
    /* Fuyou's head's table gradient is charged when the search chooses
     * the swaps as when they are given (the search costs the plan
     * again) */
    double st[2];
    for (int k = 0; k < 2; k++) {
        j = cli_json("sim --hw rtx4090 x1 --model gpt2 --schedule fuyou "
                     "--offload-tier dram --act-swap %s --mbs 4 "
                     "--microbatches 2 --json", k ? "0:0" : "auto");
        st[k] = json_number_value(json_object_get(
            json_object_get(j, "offload"), "host_staging_bytes"));
        json_decref(j);
    }
    near(st[0], st[1], "host staging, swaps searched and given");
}

Test(sim_offload, fuyou_hides_the_optimizer_behind_backward)
{
    orun f, z;
    /* GPT-2 XL, whose tied table is a twentieth of it: GPT-2's is a
     * third, stepped last (the first stage's step, over the sum of its
     * holders' gradients), and the next forward waits for it (10.5% over
     * GPT-2's compute) */
    osim("gpt2-xl", SIM_SCHED_FUYOU, 8, 4, 12, 64, SIM_TIER_NVME, &f);
    osim("gpt2-xl", SIM_SCHED_ZERO_INFINITY, 8, 4, 12, 64, SIM_TIER_NVME,
         &z);
    cr_assert_eq(f.use.bound, SIM_OFL_GPU);
    /* compute-bound: within a tenth of the compute, where ZeRO adds the
     * whole CPU step after the backward */
    cr_assert_leq((double)f.iteration_ns, 1.1 * (double)f.compute_ns);
    cr_assert_geq((double)z.iteration_ns,
                  (double)z.compute_ns + 0.9 * (double)z.cpu_ns);
    cr_assert_lt(f.iteration_ns, z.iteration_ns);
}

Test(sim_offload, gradients_leave_no_faster_than_the_link_takes_them)
{
    /* gpt3-13b's 40 layers on one 4090 whose twelve drives crowd the
     * host's lanes: each layer's gradient copy takes longer than its
     * backward. Two wait for the link at most, beside the one being
     * written, so the GPU's peak does not grow with the depth of the
     * backward; ZeRO's copies follow each microbatch's backward, Fuyou's
     * each layer's last */
    static const sim_sched sc[2] = {SIM_SCHED_ZERO_INFINITY,
                                    SIM_SCHED_FUYOU};
    for (int k = 0; k < 2; k++) {
        orun o;
        osim("gpt3-13b", sc[k], 1, 2, 12, 512, SIM_TIER_NVME, &o);
        cr_assert_gt(o.grad_out_ns, o.compute_ns / 4, "%s: the link is "
                     "not slow here", sim_sched_name(sc[k]));
        cr_assert_leq(o.grad_bufs, 3, "%s: %d gradients on the GPU at "
                      "once", sim_sched_name(sc[k]), o.grad_bufs);
        cr_assert_geq(o.grad_bufs, 2, "%s: the copies never overlap the "
                      "backward", sim_sched_name(sc[k]));
    }
}

Test(sim_offload, data_parallel_ranks_split_the_states_and_share_the_host)
{
    /* gpt2 under ZeRO-Infinity on a server of two 4090s: one GPU, or
     * both, each over as many microbatches. A rank fetches half of each
     * layer over its PCIe link and gets the other half from the other
     * GPU, reduce-scatters each gradient and copies its half out; the
     * drives read each layer once for both ranks and the CPU steps each
     * rank's half */
    static const int none[2] = {0, 0};
    const int M = 2;
    orun a, b;
    osim_dp("gpt2", SIM_SCHED_ZERO_INFINITY, 2, M, 2, 64, SIM_TIER_NVME,
            none, 2, 1, &a);
    osim_dp("gpt2", SIM_SCHED_ZERO_INFINITY, 2, M, 2, 64, SIM_TIER_NVME,
            none, 2, 2, &b);
    cr_assert_eq(a.ring, 0);
    near(b.in, a.in / 2, "rank 0's weights over PCIe");
    near(b.out, a.out / 2, "rank 0's gradients over PCIe");
    near(b.ring, a.in / 2 + a.out / 2, "rank 0's sends to the other GPU");
    near(b.rd, a.rd, "the drives' reads, both ranks");
    near(b.wr, a.wr, "the drives' writes, both ranks");
    cr_assert_eq(b.n_cpu, 2 * a.n_cpu);
    /* twice the samples in less than twice the time; a rank's GPU holds
     * about what the one GPU did */
    cr_assert_lt(b.iteration_ns, 1.6 * (double)a.iteration_ns,
                 "two ranks %lld ns, one %lld ns", (long long)b.iteration_ns,
                 (long long)a.iteration_ns);
    cr_assert_geq(b.iteration_ns, a.iteration_ns * 0.999);
    cr_assert_lt(fabs(b.peak_bytes - a.peak_bytes), 0.1 * a.peak_bytes,
                 "rank 0 peaks at %.0f, one GPU at %.0f", b.peak_bytes,
                 a.peak_bytes);
    cr_assert_eq(b.use.bytes[SIM_OFL_RING] > 0, 1);
}

/* Four ranks: each ring takes its three steps of a quarter of the bytes,
 * so rank 0 sends its neighbour three quarters of each layer's weights
 * and of its gradients. */
Test(sim_offload, data_parallel_rings_take_their_steps)
{
    static const int none[2] = {0, 0};
    orun a, d;
    osim_dp("gpt2", SIM_SCHED_ZERO_INFINITY, 2, 2, 2, 64, SIM_TIER_NVME,
            none, 4, 1, &a);
    osim_dp("gpt2", SIM_SCHED_ZERO_INFINITY, 2, 2, 2, 64, SIM_TIER_NVME,
            none, 4, 4, &d);
    cr_expect_eq(d.ring_steps, 3);
    cr_expect_eq(d.n_ring % 3, 0);
    near(d.ring, 3 * a.in / 4 + 3 * a.out / 4, "rank 0's sends");
}

Test(sim_offload, the_planner_spreads_offload_over_the_servers_gpus)
{
    /* gpt3-13b fits four 4090s only offloaded: the planner runs the
     * offload schedules data parallel over them, faster than on one */
    const char *run = "--hw rtx4090 x4 --host-mem 256G --nvme 4 --model "
                      "gpt3-13b --batch 16 --schedule zero-infinity,fuyou";
    json_t *x = cli_json("plan %s --json", run);
    int dp = (int)json_integer_value(json_object_get(x, "dp"));
    double it = json_number_value(json_object_get(x, "iteration_time_s"));
    json_decref(x);
    x = cli_json("plan %s --dp 1 --json", run);
    double it1 = json_number_value(json_object_get(x, "iteration_time_s"));
    json_decref(x);
    cr_assert_gt(dp, 1);
    cr_assert_lt(it, it1, "dp %d: %.2f s, one GPU %.2f s", dp, it, it1);
    /* the plan it writes runs in sim (the executor runs such plans of
     * small models: tests/test_exec_tiers.c) */
    char *dir = test_tmpdir();
    char plan[300];
    snprintf(plan, sizeof plan, "%s/p.json", dir);
    cli_expect(0, "partitioned over", "plan %s --out %s", run, plan);
    cli_expect(0, "GPU to GPU", "sim --plan %s", plan);
    test_rm_rf(dir);
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
    /* a server file that lists its nodes takes neither --host-mem nor
     * --nvme: the advice says what to change in it */
    cli_expect(2, "(901.43 GiB missing in DRAM; raise mem_gib of the server "
               "file's dram nodes)", "sim --hw profiles/hw/example-desktop."
               "json --model llama2-70b --schedule zero-offload --mbs 1 "
               "--microbatches 1");
    cli_expect(2, "(421.99 GiB missing on NVMe; add nvme nodes to the server "
               "file)", "sim --hw profiles/hw/example-desktop.json --model "
               "gpt3-175b --schedule fuyou --mbs 1 --microbatches 1");
    /* the table's cut reasons follow it whole: how much is missing, and
     * in which tier */
    cli_expect(0, "zero-infinity: schedule zero-infinity: host DRAM cannot "
               "hold what the nvme tier needs there: 36.03 GiB, the server "
               "has 16.00 GiB (20.03 GiB missing in DRAM", "plan --hw rtx4090 "
               "x1 --host-mem 16G --nvme 1 --model llama2-7b --finetune full");
    cli_expect(2, "--nvme '2:floppy': expected a count 0..64, or "
               "COUNT:MODEL", "sim --hw rtx4090 x1 --model gpt2 --schedule "
               "zero-infinity --mbs 1 --microbatches 1 --nvme 2:floppy");
    cli_expect(2, "--offload-tier: schedule 1f1b keeps the model states on "
               "the GPUs", "sim --hw rtx4090 x1 --model gpt2 --schedule 1f1b "
               "--pp 1 --mbs 1 --microbatches 1 --offload-tier nvme");
    cli_expect(2, "--offload-tier 'ssd': expected auto, dram or nvme",
               "sim --hw rtx4090 x1 --model gpt2 --schedule fuyou "
               "--mbs 1 --microbatches 1 --offload-tier ssd");
    cli_expect(2, "offloads each GPU's whole model: --pp 1",
               "sim --hw rtx4090 x2 --model gpt2 --schedule fuyou --pp 2 "
               "--mbs 1 --microbatches 1");
    cli_expect(2, "partitions the states over its data-parallel ranks "
               "itself", "sim --hw rtx4090 x2 --model gpt2 --schedule "
               "zero-infinity --dp 2 --zero 3 --mbs 1 --microbatches 1");
    cli_expect(2, "ranks share one server's host", "sim --hw rtx4090 x16 "
               "--model gpt2 --schedule zero-infinity --dp 16 --mbs 1 "
               "--microbatches 1");
    cli_expect(2, "--host-mem 'lots': expected a size",
               "sim --hw rtx4090 x1 --model gpt2 --schedule fuyou "
               "--mbs 1 --microbatches 1 --host-mem lots");
    /* a bare number would be bytes: 256 B of host memory */
    cli_expect(2, "--host-mem '256': expected a size with its unit",
               "plan --hw rtx4090 x1 --model gpt2 --host-mem 256");
    cli_expect(2, "0.001G to 1024T", "plan --hw rtx4090 x1 --model gpt2 "
               "--host-mem 99999999999999999999999T");
    /* as little as a hardware file may say, no less (1K was a host) */
    cli_expect(2, "--host-mem '1K': expected a size with its unit, such as "
               "256G (K, M, G or T; 0.001G to 1024T", "profile show --hw "
               "cpu x2 "
               "--host-mem 1K");
    cli_expect(2, "--sweep-host-mem '128G,,256G': expected", "plan --hw "
               "rtx4090 x1 --model gpt2 --sweep-host-mem 128G,,256G");
    /* each size one --host-mem takes: a KiB is no host there either */
    cli_expect(2, "--sweep-host-mem '1K,2M': expected up to 16 sizes with "
               "their units, comma-separated, each 0.001G to 1024T as "
               "--host-mem takes", "plan --hw rtx4090 x1 --model gpt2 "
               "--sweep-host-mem 1K,2M");
    /* a size twice, however written: its rows would repeat */
    cli_expect(2, "--sweep-host-mem '1G,1024M': '1024M' names a size given "
               "before", "plan --hw rtx4090 x1 --model gpt2 "
               "--sweep-host-mem 1G,1024M");
    /* one GPU is not plural */
    cli_expect(2, "--pp 2 but 1x rtx4090, desktop, PCIe 4.0 has 1 GPU\n",
               "plan --hw rtx4090 x1 --model gpt2 --pp 2");
    cli_expect(2, "= 2 GPUs but 1x rtx4090, desktop, PCIe 4.0 has 1 GPU\n",
               "sim --hw rtx4090 x1 --model gpt2 --schedule 1f1b --pp 2 "
               "--mbs 1 --microbatches 2");
    cli_expect(2, "leave out --host-mem", "plan --hw rtx4090 x1 --model "
               "gpt2 --sweep-host-mem 64G --host-mem 32G");
    /* nothing fits, and no split says how much: said whole (it was cut
     * off in a buffer of 32 bytes); the host given is what stops Fuyou,
     * so the input is the user's to change (2) */
    cli_expect(2, "no split of it fits a GPU (with the 1.0 GiB reserve); "
               "rtx4090 has 24.0 GiB", "plan --hw rtx4090 x1 --host-mem 16G "
               "--nvme 0 --model llama2-7b --schedule fuyou");
}

/* Host DRAM or drives too small for what offloading keeps there: the
 * tier and how much it lacks, exit code 2 (the input to change); GPUs
 * too small with no offloading asked for: 1 (the machine's). */
Test(sim_offload, a_host_too_small_is_refused_at_planning)
{
    const char *small = "plan --hw rtx4090 x1 --host-mem 64G --nvme 1 "
                        "--model gpt3-175b --finetune full --batch 8";
    cli_expect(2, "51.99 GiB missing in DRAM", "%s", small);
    cli_result r = cli_run("%s --json", small);
    cr_assert_eq(r.code, 2, "%s", r.err);
    /* searched again with more host: what a plan that fits needs, and
     * both are short (116.17 GiB of DRAM, 2.25 TiB of drives of 1.82) */
    cr_expect(strstr(r.err, "; with more host memory and drives fuyou fits: "
                            "it needs "), "%s", r.err);
    json_t *j = json_loads(r.out, 0, NULL);
    cr_assert_not_null(j, "%s", r.out);
    json_t *sh = json_object_get(j, "host_tier_short");
    cr_assert_not_null(sh, "%s", r.out);
    cr_expect_str_eq(json_string_value(json_object_get(sh, "schedule")),
                     "fuyou");
    cr_expect_str_eq(json_string_value(json_object_get(sh, "finetune")),
                     "full");
    /* no time limit: the least host found, not an unbounded one's */
    cr_expect(json_is_true(json_object_get(sh, "settled")), "%s", r.out);
    double dn = json_number_value(json_object_get(sh, "dram_need_bytes"));
    double dh = json_number_value(json_object_get(sh, "dram_bytes"));
    double nn = json_number_value(json_object_get(sh, "nvme_need_bytes"));
    double nh = json_number_value(json_object_get(sh, "nvme_bytes"));
    cr_expect(dh == 64.0 * (1 << 30) && nh > 1e12, "%g %g", dh, nh);
    cr_expect(dn > dh || nn > nh, "needs %g and %g", dn, nn);
    json_decref(j);
    cli_result_free(&r);
    /* a plan fits a host as large as the one the answer names */
    char grow[300];
    snprintf(grow, sizeof grow, "plan --hw rtx4090 x1 --host-mem %.0fG "
             "--nvme %d --model gpt3-175b --finetune full --batch 8",
             ceil(dn / (1 << 30)) + 1, (int)ceil(nn / nh) + 1);
    r = cli_run("%s", grow);
    cr_expect_eq(r.code, 0, "%s: %s", grow, r.err);
    cli_result_free(&r);
    /* a time limit: the answer says whether it ended the search for
     * more host (exit 1 when nothing was settled) or named a host that
     * is not the least (settled false) */
    for (int i = 0; i < 3; i++) {
        r = cli_run("%s --time-limit %s --json", small,
                    (const char *[]){"0.02", "0.06", "0.3"}[i]);
        j = json_loads(r.out, 0, NULL);
        cr_assert_not_null(j, "%s", r.out);
        sh = json_object_get(j, "host_tier_short");
        int cut = json_is_true(json_object_get(j, "host_search_cut_short")) ||
                  json_is_true(json_object_get(json_object_get(j, "search"),
                                               "cut_short"));
        if (r.code == 1)
            cr_expect(cut && !sh, "exit 1 without a cut search: %s", r.out);
        else
            cr_expect(r.code == 2 && sh && (!cut || !json_is_true(
                          json_object_get(sh, "settled"))), "%d: %s", r.code,
                      r.out);
        json_decref(j);
        cli_result_free(&r);
    }
    /* GPUs of a time limit too short for any plan: not the host's */
    r = cli_run("plan --hw rtx4090 x1 --model llama2-7b --finetune full "
                "--time-limit 0.001 --json");
    cr_expect_eq(r.code, 1, "%s", r.err);
    cr_expect(!strstr(r.out, "host_tier_short"), "%s", r.out);
    cli_result_free(&r);
    /* GPUs too small whatever the host (a 2080 Ti and a layer of GPT-3
     * 175B's working set), the host given too small as well: 1 */
    r = cli_run("plan --hw rtx2080ti x1 --host-mem 16G --model gpt3-175b "
                "--finetune full");
    cr_expect_eq(r.code, 1, "%s", r.err);
    cli_result_free(&r);
    /* pipelines of eight GPUs whose stages would keep their states on a
     * host of 8 GiB; the same without drives, where the stages' states
     * went to the drives it lacks after DRAM */
    cli_expect(2, "missing in DRAM", "plan --hw rtx2080ti x8 --host-mem 8G "
               "--model gpt3-13b --finetune full");
    const char *pipe = "plan --hw rtx2080ti x8 --host-mem 8G --nvme 0 "
                       "--model gpt3-13b --finetune full --schedule 1f1b";
    cli_expect(2, "with more host memory 1f1b fits: it needs", "%s", pipe);
    /* and a host of what it names holds that pipeline's stages */
    r = cli_run("%s --json", pipe);
    cr_assert_eq(r.code, 2, "%s", r.err);
    j = json_loads(r.out, 0, NULL);
    cr_assert_not_null(j, "%s", r.out);
    dn = json_number_value(json_object_get(json_object_get(j,
                           "host_tier_short"), "dram_need_bytes"));
    cr_expect_gt(dn, 8.0 * (1 << 30), "%s", r.out);
    json_decref(j);
    cli_result_free(&r);
    cli_expect(0, "1f1b", "plan --hw rtx2080ti x8 --host-mem %.0fG --nvme 0 "
               "--model gpt3-13b --finetune full --schedule 1f1b",
               ceil(dn / (1 << 30)) + 1);
    /* no offloading asked for: the GPUs are what is short */
    r = cli_run("plan --hw rtx4090 x1 --model llama2-7b --finetune full "
                "--schedule 1f1b --json");
    cr_expect_eq(r.code, 1, "%s", r.err);
    cr_expect(!strstr(r.out, "host_tier_short"), "%s", r.out);
    cli_result_free(&r);
}

/* A one-stage gpt2 plan of schedule sched with `field` (JSON) on its
 * second line: refused, naming the file's line and the field. */
static void bad_plan(const char *sched, const char *field, const char *name)
{
    char *dir = test_tmpdir();
    char bad[300];
    snprintf(bad, sizeof bad, "%s/b.json", dir);
    FILE *f = fopen(bad, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"sluice_plan\": 1, \"model\": \"gpt2\", \"hw\": \"rtx4090 "
               "x1\", \"schedule\": \"%s\", \"pp\": 1, \"mbs\": 1,\n"
               " \"microbatches\": 1, %s, \"stages\":"
               " [{\"ops\": [0, 1], \"device\": 0}]}\n", sched, field);
    fclose(f);
    cli_expect(2, "b.json:2:", "sim --plan %s", bad);
    cli_expect(2, name, "sim --plan %s", bad);
    test_rm_rf(dir);
}

/* A schedule's reason is said whole, in the table, the advice and
 * --json: a host just short of Fuyou's swapped checkpoints gives one of
 * some 260 characters (cut at 199 before, mid-sentence: "the GPU holds
 * the"). */
Test(sim_offload, a_long_reason_is_not_cut)
{
    cli_result r = cli_run("plan --hw rtx4090 x1 --host-mem 21.3G --nvme 12 "
                           "--model gpt3-13b --schedule fuyou --batch 16 "
                           "--mbs 4 --finetune full --json");
    cr_assert_eq(r.code, 2, "%s", r.err);
    const char *tail = "the GPU holds the run only with more than the 0 "
                       "checkpoint stage(s) swapped that fit there";
    cr_expect(strstr(r.err, tail), "%s", r.err);
    json_t *j = json_loads(r.out, 0, NULL);
    cr_assert_not_null(j, "%s", r.out);
    json_t *alts = json_object_get(j, "alternatives"), *a;
    size_t i;
    int seen = 0;
    json_array_foreach(alts, i, a) {
        const char *s = json_string_value(json_object_get(a, "schedule"));
        if (!s || strcmp(s, "fuyou")) continue;
        const char *why = json_string_value(json_object_get(a, "reason"));
        cr_expect(why && strstr(why, tail), "%s", why ? why : "(none)");
        seen = 1;
    }
    cr_expect(seen, "%s", r.out);
    json_decref(j);
    cli_result_free(&r);
}

Test(sim_offload, the_plan_keeps_tier_and_host)
{
    char *dir = test_tmpdir();
    char plan[300];
    snprintf(plan, sizeof plan, "%s/p.json", dir);
    cli_expect(0, "bound by",
               "sim --hw rtx4090 x1 --model gpt2 --schedule zero-infinity "
               "--mbs 1 --microbatches 2 --host-mem 96G --nvme 2 "
               "--offload-tier dram --out %s", plan);
    /* the plan runs the same: its hw keeps the host's options */
    cli_expect(0, "model states in host DRAM; host DRAM 2.81 GiB of "
               "96.00 GiB", "sim --plan %s", plan);
    cli_result r = cli_run("sim --plan %s --json", plan);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "\"tier\": \"dram\""), "%s", r.out);
    cli_result_free(&r);
    /* a tier on a schedule that keeps its state on the GPU */
    bad_plan("gpipe", "\"offload_tier\": \"nvme\"", "offload_tier");
    cli_expect(2, "--hw: unknown option '--disk'",
               "sim --hw 'rtx4090 x1 --disk 2' --model gpt2 --schedule "
               "fuyou --mbs 1 --microbatches 1");
    test_rm_rf(dir);
}

/* A plan file's hw whose server cannot hold the states where the plan
 * keeps them (no drive for the nvme tier, too little host DRAM) is the
 * hw field's error, in sim and exec alike: the file, the field's line
 * and the field are named, not the command line's --nvme alone. */
Test(sim_offload, a_plan_whose_hw_lacks_the_tier_names_hw)
{
    char *dir = test_tmpdir();
    cli_expect(0, "bound by",
               "sim --hw rtx4090 x1 --model gpt-tiny --schedule zero-infinity "
               "--mbs 1 --microbatches 1 --nvme 1 --offload-tier nvme --out "
               "%s/p.json", dir);
    const char *edit[][2] = {
        {"s/--nvme 1/--nvme 0/", "has no NVMe drive (give --nvme N)"},
        {"s/--nvme 1/--nvme 1 --host-mem 0.001G/", "host DRAM cannot hold"}};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(sh_run("sed '%s' %s/p.json > %s/b.json", edit[i][0], dir,
                            dir), 0);
        for (int k = 0; k < 2; k++) {
            cli_result r = cli_run("%s --plan %s/b.json%s",
                                   k ? "exec" : "sim", dir,
                                   k ? " --steps 1" : "");
            cr_expect_eq(r.code, 2, "%s", r.err);
            cr_expect(strstr(r.err, "b.json:4:9: field 'hw': ") &&
                      strstr(r.err, edit[i][1]), "%s", r.err);
            cli_result_free(&r);
        }
    }
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

/* The iteration and tier of the plan `plan ARGS --json` chooses. */
static double planned(const char *args, char *tier, size_t n)
{
    json_t *x = cli_json("plan %s --json", args);
    double it = json_number_value(json_object_get(x, "iteration_time_s"));
    const char *t = json_string_value(
        json_object_get(json_object_get(x, "plan"), "offload_tier"));
    snprintf(tier, n, "%s", t ? t : "");
    json_decref(x);
    return it;
}

Test(sim_offload, the_planner_keeps_the_states_in_the_faster_tier)
{
    /* gpt3-13b's states fit 768 GB of DRAM; one drive bounds the NVMe
     * tier: the planner tries both and keeps DRAM, as fast as the plan
     * that fixes it; --offload-tier nvme fixes the drives */
    const char *run = "--hw rtx4090 x1 --host-mem 768G --nvme 1 --model "
                      "gpt3-13b --batch 16 --schedule zero-infinity";
    char a[300], t[16], td[16], tn[16];
    snprintf(a, sizeof a, "%s", run);
    double it = planned(a, t, sizeof t);
    snprintf(a, sizeof a, "%s --offload-tier dram", run);
    double itd = planned(a, td, sizeof td);
    snprintf(a, sizeof a, "%s --offload-tier nvme", run);
    double itn = planned(a, tn, sizeof tn);
    cr_assert_str_eq(t, "dram");
    cr_assert_str_eq(td, "dram");
    cr_assert_str_eq(tn, "nvme");
    cr_assert_lt(itd, itn, "DRAM %.2f s, one drive %.2f s", itd, itn);
    cr_assert_float_eq(it, itd, 1e-9 * itd);
    cli_expect(2, "--offload-tier 'disk': expected auto, dram or nvme",
               "plan %s --offload-tier disk", run);
    cli_expect(2, "has no NVMe drive", "plan --hw rtx4090 x1 --model gpt2 "
               "--schedule zero-infinity --nvme 0 --offload-tier nvme");
}

/* The gnuplot script `sim ARGS --plot PRE` writes (caller frees); without
 * gnuplot the data and script are written all the same. */
static char *plot_script(const char *pre, const char *args)
{
    cli_result r = cli_run("sim %s --plot %s", args, pre);
    cli_result_free(&r);
    char gp[320];
    snprintf(gp, sizeof gp, "%s.gp", pre);
    char *s = NULL;
    util_err e;
    cr_assert_eq(util_read_file(gp, &s, NULL, &e), 0, "%s", e.msg);
    return s;
}

Test(sim_offload, the_timeline_draws_the_tiers)
{
    char *dir = test_tmpdir();
    char pre[300];
    snprintf(pre, sizeof pre, "%s/o", dir);
    /* a row under the device per tier that moved something */
    char *s = plot_script(pre, "--hw rtx4090 x1 --model gpt2 --schedule "
                          "fuyou --mbs 1 --microbatches 2 --nvme 2");
    cr_assert(strstr(s, "'dev 0' 0, 'PCIe in' -1, 'PCIe out' -2, 'NVMe' -3, "
                        "'CPU' -4"), "%s", s);
    cr_assert(strstr(s, "'NVMe write'"), "%s", s);
    cr_assert(!strstr(s, "'to GPUs'"), "%s", s);
    free(s);
    /* data-parallel ranks: each device's rows, its sends to the other
     * GPU on one of their own */
    s = plot_script(pre, "--hw rtx4090 x2 --model gpt2 --schedule "
                    "zero-infinity --dp 2 --mbs 1 --microbatches 2 --nvme 2");
    cr_assert(strstr(s, "'CPU' -4, 'to GPUs' -5, 'dev 1' -6"), "%s", s);
    free(s);
    /* CPU devices: cores whose copies go memory to memory, not over
     * PCIe, named so in the rows, the legend and the report */
    s = plot_script(pre, "--hw cpu x2 --model gpt-mini --schedule "
                    "zero-offload --dp 2 --mbs 2 --microbatches 2");
    cr_assert(strstr(s, "'dev 0' 0, 'copies in' -1, 'copies out' -2, "
                        "'CPU' -3, 'to devices' -4, 'dev 1' -5"), "%s", s);
    cr_assert(strstr(s, "'to device'") && !strstr(s, "GPU"), "%s", s);
    free(s);
    cli_expect(0, "between devices busy", "sim --hw cpu x2 --model gpt-mini "
               "--schedule zero-offload --dp 2 --mbs 2 --microbatches 2");
    cli_expect(0, "stage 1   dram  step off the device", "sim --hw cpu x2 "
               "--model gpt-mini --schedule 1f1b --pp 2 --mbs 2 "
               "--microbatches 4 --state-tiers dram,dram");
    /* a pipeline keeps one row per device and the compute legend */
    s = plot_script(pre, "--hw rtx2080ti x2 --model gpt2 --schedule 1f1b "
                    "--pp 2 --mbs 1 --microbatches 2");
    cr_assert(strstr(s, "'dev 0' 0, 'dev 1' -1)"), "%s", s);
    cr_assert(!strstr(s, "'CPU'"), "%s", s);
    cr_assert(!strstr(s, "'data-parallel'"), "%s", s);
    free(s);
    /* data-parallel replicas of it: each device's ring steps (the
     * gradients' all-reduce) on a row under it, in the legend */
    s = plot_script(pre, "--hw rtx2080ti x4 --model gpt2 --schedule 1f1b "
                    "--pp 2 --dp 2 --mbs 1 --microbatches 2");
    cr_assert(strstr(s, "'dev 0' 0, 'to GPUs' -1, 'dev 1' -2, 'to GPUs' "
                        "-3, 'dev 2' -4"), "%s", s);
    cr_assert(strstr(s, "'data-parallel'"), "%s", s);
    free(s);
    test_rm_rf(dir);
}

Test(sim_offload, swapped_checkpoints_leave_the_gpu_and_come_back)
{
    /* gpt2 at microbatch 8: every checkpoint swapped goes out after its
     * forward and back before its recompute, adding its bytes to each
     * PCIe direction once per microbatch; it leaves the GPU meanwhile */
    const int M = 3, all[2] = {12, 0}, half[2] = {6, 0};
    orun a, b, c;
    osim("gpt2", SIM_SCHED_FUYOU, 8, M, 2, 64, SIM_TIER_AUTO, &a);
    osim_swap("gpt2", SIM_SCHED_FUYOU, 8, M, 2, 64, SIM_TIER_AUTO, all, &b);
    osim_swap("gpt2", SIM_SCHED_FUYOU, 8, M, 2, 64, SIM_TIER_AUTO, half, &c);
    cr_assert_gt(b.keep_sw, 0);
    near(b.out - a.out, M * b.keep_sw, "PCIe from GPU, all checkpoints");
    near(b.in - a.in, M * b.keep_sw, "PCIe to GPU, all checkpoints");
    near(c.out - a.out, M * c.keep_sw, "PCIe from GPU, the first six");
    near(b.act_swap_bytes, M * b.keep_sw, "bytes swapped");
    cr_assert_eq(b.act_tier, SIM_TIER_DRAM);
    cr_assert_eq(b.n_recomp, a.n_recomp);
    /* at most a few stages' checkpoints are on the GPU at once */
    cr_assert_lt(b.peak_bytes, a.peak_bytes - M * b.keep_sw / 2,
                 "peak %.0f, without swapping %.0f", b.peak_bytes,
                 a.peak_bytes);
    cr_assert_lt(c.peak_bytes, a.peak_bytes);
    cr_assert_gt(c.peak_bytes, b.peak_bytes);
    cr_assert_eq(b.rd, a.rd, "no activation on the drives while DRAM "
                 "holds them");
}

Test(sim_offload, whole_activations_skip_their_recomputation)
{
    const int M = 2, last4[2] = {0, 4};
    orun a, b;
    osim("gpt2", SIM_SCHED_FUYOU, 4, M, 2, 64, SIM_TIER_AUTO, &a);
    osim_swap("gpt2", SIM_SCHED_FUYOU, 4, M, 2, 64, SIM_TIER_AUTO, last4, &b);
    cr_assert_eq(a.n_recomp - b.n_recomp, 4 * M);
    near(b.out - a.out, M * b.act_sw, "PCIe from GPU");
    near(b.in - a.in, M * b.act_sw, "PCIe to GPU");
    near((double)(a.compute_ns - b.compute_ns), (double)(M * b.r_sw_ns),
         "compute spared");
}

Test(sim_offload, activations_go_to_the_drives_where_dram_is_short)
{
    /* 20 GiB of host DRAM hold gpt2's staging but not every whole
     * activation of a batch of 32: they go on to the drives, and the
     * drives read back what they were written */
    const int M = 4, all[2] = {0, 14};
    orun a, b;
    osim("gpt2", SIM_SCHED_FUYOU, 8, M, 2, 20, SIM_TIER_AUTO, &a);
    osim_swap("gpt2", SIM_SCHED_FUYOU, 8, M, 2, 20, SIM_TIER_AUTO, all, &b);
    cr_assert_eq(b.act_tier, SIM_TIER_NVME, "%.0f bytes swapped",
                 b.act_swap_bytes);
    near(b.wr - a.wr, M * b.act_sw, "NVMe writes");
    near(b.rd - a.rd, M * b.act_sw, "NVMe reads");
}

Test(sim_offload, the_search_swaps_the_fewest_checkpoints_that_fit)
{
    /* GPT-3 175B on one RTX 4090 with 256 GB and 12 drives fits only with
     * checkpoints swapped: the fewest K that fit are chosen (one fewer
     * runs over the GPU); whole activations cost more PCIe time than the
     * recomputation they spare, so none swap */
    char *dir = test_tmpdir();
    char plan[300];
    snprintf(plan, sizeof plan, "%s/p.json", dir);
    const char *run = "sim --hw rtx4090 x1 --host-mem 256G --nvme 12 --model "
                      "gpt3-175b --schedule fuyou --mbs 1 --microbatches 4";
    cli_expect(1, "does not fit", "%s --act-swap 0", run);
    cli_result r = cli_run("%s --out %s", run, plan);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "activations swapped to host DRAM"), "%s", r.out);
    cr_assert(!strstr(r.out, "OOM"), "%s", r.out);
    cli_result_free(&r);
    util_err e;
    sim_plan p;
    cr_assert_eq(sim_plan_load(plan, &p, &e), 0, "%s", e.msg);
    int k = p.swap_ckpt;
    cr_assert(k > 0 && k < p.n_stages, "%d", k);
    cr_assert_eq(p.swap_full, 0);
    sim_plan_free(&p);
    cli_expect(1, "does not fit", "%s --act-swap %d", run, k - 1);
    r = cli_run("%s --act-swap %d", run, k);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(!strstr(r.out, "OOM"), "%s", r.out);
    cli_result_free(&r);
    /* the plan file runs as chosen */
    cli_expect(0, "the checkpoints of", "sim --plan %s", plan);
    test_rm_rf(dir);
}

/* The iteration of gpt-mini's Fuyou plan on one CPU core with the last
 * j stages' whole activations swapped (seconds). */
static double mini_it(int j)
{
    json_t *x = cli_json("sim --hw cpu x1 --model gpt-mini --schedule "
                         "fuyou --mbs 2 --microbatches 4 --act-swap 0:%d "
                         "--json", j);
    double it = json_number_value(json_object_get(x, "iteration_time_s"));
    json_decref(x);
    return it;
}

Test(sim_offload, the_search_finds_the_fastest_swap_by_brute_force)
{
    /* on a CPU device, copies are fast against compute: swapping whole
     * activations beats recomputing them; the ternary search's choice is
     * the brute force's best over every count */
    json_t *x = cli_json("sim --hw cpu x1 --model gpt-mini --schedule fuyou "
                         "--mbs 2 --microbatches 4 --json");
    json_t *ofl = json_object_get(x, "offload");
    int j = (int)json_integer_value(json_object_get(ofl, "act_swap_whole"));
    double got = json_number_value(json_object_get(x, "iteration_time_s"));
    json_decref(x);
    double best = INFINITY;
    int n_best = 0;
    for (int k = 0; k <= 8; k++) {
        double t = mini_it(k);
        if (t < best) best = t, n_best = k;
    }
    cr_assert_gt(n_best, 0, "swapping should pay on a CPU device");
    cr_assert_eq(got, best, "search: %d stages, %.6f s; brute force: %d, "
                 "%.6f s", j, got, n_best, best);
}

Test(sim_offload, swap_options_and_plan_fields_are_checked)
{
    const char *run = "sim --hw rtx4090 x1 --model gpt2 --mbs 1 "
                      "--microbatches 1";
    cli_expect(2, "--act-swap 'x'", "%s --schedule fuyou --act-swap x", run);
    cli_expect(2, "--act-swap '3:y'", "%s --schedule fuyou --act-swap 3:y",
               run);
    cli_expect(2, "--act-swap '-1'", "%s --schedule fuyou --act-swap -1", run);
    cli_expect(2, "each must be 0..14", "%s --schedule fuyou --act-swap 15",
               run);
    cli_expect(2, "only fuyou swaps whole", "%s --schedule zero-infinity "
               "--act-swap 2:1", run);
    cli_expect(2, "swaps no activations", "%s --schedule 1f1b --pp 1 "
               "--act-swap 2", run);
    bad_plan("zero-offload", "\"act_swap_whole\": 2", "act_swap_whole");
    bad_plan("fuyou\", \"recompute\": \"none",
             "\"act_swap_checkpoints\": 2", "act_swap_checkpoints");
}

Test(sim_offload, the_planner_fits_gpt3_175b_on_one_rtx4090)
{
    /* the run, at a fine-tuning batch: a plan, what bounds it */
    json_t *j = cli_json("plan --hw rtx4090 x1 --host-mem 256G --nvme 12 "
                         "--model gpt3-175b --batch 8 --no-progress --json");
    json_t *p = json_object_get(j, "plan");
    const char *sched = json_string_value(json_object_get(p, "schedule"));
    cr_expect(sched && !strcmp(sched, "fuyou"), "%s", sched);
    cr_expect_gt(json_integer_value(json_object_get(p,
                                                    "act_swap_checkpoints")),
                 0);
    json_t *ofl = json_object_get(j, "offload");
    cr_expect(json_is_string(json_object_get(ofl, "bound_by")));
    json_decref(j);
}

Test(sim_offload, the_largest_model_by_host_dram)
{
    /* gpt2's layer shape on one RTX 4090 with one drive: ZeRO-Offload
     * keeps the fp16 weights on the GPU and the rest in DRAM, so more
     * DRAM fits more layers until the GPU is full; Fuyou, whose states
     * live on the drive, is not held back by DRAM */
    char *dir = test_tmpdir();
    char plot[300];
    snprintf(plot, sizeof plot, "%s/s", dir);
    json_t *j = cli_json("plan --hw rtx4090 x1 --nvme 1 --model gpt2 "
                         "--sweep-host-mem 8G,16G --schedule "
                         "zero-offload,fuyou --batch 8 --json --plot %s",
                         plot);
    json_t *rows = json_object_get(j, "sweep");
    cr_assert_eq(json_array_size(rows), 4);
    double p[2][2] = {{0}};
    for (size_t i = 0; i < 4; i++) {
        json_t *x = json_array_get(rows, i);
        const char *pol = json_string_value(json_object_get(x, "policy"));
        int fy = !strcmp(pol, "fuyou");
        cr_assert(json_is_true(json_object_get(x, "fits")), "%zu", i);
        p[fy][i / 2] = json_number_value(json_object_get(x, "params"));
        /* one layer more does not fit, and says why */
        cr_assert(strlen(json_string_value(json_object_get(
                      x, "one_more_layer"))) > 10);
    }
    cr_expect_gt(p[0][1], p[0][0], "zero-offload: 16G %.0f, 8G %.0f",
                 p[0][1], p[0][0]);
    cr_expect_gt(p[1][0], p[0][0]);
    json_decref(j);
    char png[320];
    snprintf(png, sizeof png, "%s-host-mem.gp", plot);
    cr_expect_eq(access(png, R_OK), 0, "%s", png);
    cli_expect(2, "--sweep-host-mem '8G,x'", "plan --hw rtx4090 x1 --model "
               "gpt2 --sweep-host-mem 8G,x");
    cli_expect(2, "only zero-offload, zero-infinity, fuyou and hydra",
               "plan --hw rtx4090 x1 --model gpt2 --sweep-host-mem 8G "
               "--schedule 1f1b");
    cli_expect(2, "give --hw GPU x1", "plan --hw rtx4090 x2 --model gpt2 "
               "--sweep-host-mem 8G");
    cli_expect(2, "encoder and a decoder", "plan --hw rtx4090 x1 --model "
               "t5-3b --sweep-host-mem 8G");
    test_rm_rf(dir);
}

/* Hydra's column of the sweep: every job's state waits in host DRAM
 * between its shards, so DRAM alone bounds the model (gpt2's layers at
 * batch 8: twice the DRAM, about twice the layers), and AdamW's 14 bytes
 * a parameter kept there (fp16 weights, fp32 master and moments) fit in
 * it; a layer that does not fit the GPU as a shard of its own fits
 * nothing. */
Test(sim_offload, hydra_is_bound_by_host_dram)
{
    json_t *j = cli_json("plan --hw rtx4090 x1 --model gpt2 --sweep-host-mem "
                         "8G,16G --schedule hydra --batch 8 --json");
    json_t *rows = json_object_get(j, "sweep");
    cr_assert_eq(json_array_size(rows), 2);
    double p[2], dram[2];
    for (size_t i = 0; i < 2; i++) {
        json_t *x = json_array_get(rows, i);
        cr_expect_str_eq(json_string_value(json_object_get(x, "policy")),
                         "hydra");
        cr_assert(json_is_true(json_object_get(x, "fits")));
        p[i] = json_number_value(json_object_get(x, "params"));
        dram[i] = json_number_value(json_object_get(x, "host_mem_bytes"));
        cr_expect(strstr(json_string_value(json_object_get(x, "one_more_layer")),
                         "host DRAM"), "%zu", i);
        cr_expect_leq(14 * p[i], dram[i]);
        cr_expect_gt(14 * p[i], 0.9 * dram[i], "DRAM is what runs out");
        cr_expect_gt(json_number_value(json_object_get(x, "samples_per_s")), 0);
    }
    cr_expect_gt(p[1], 1.8 * p[0], "16G %.0f, 8G %.0f", p[1], p[0]);
    json_decref(j);
    j = cli_json("plan --hw rtx4090 x1 --model gpt3-175b --sweep-host-mem 256G "
                 "--schedule hydra --batch 16 --json");
    json_t *x = json_array_get(json_object_get(j, "sweep"), 0);
    cr_expect(json_is_false(json_object_get(x, "fits")));
    cr_expect(strstr(json_string_value(json_object_get(x, "one_more_layer")),
                     "a shard of one layer does not fit the GPU"));
    json_decref(j);
    cli_expect(2, "--schedule hydra", "plan --hw rtx4090 x1 --model gpt2 "
               "--schedule hydra");
    cli_expect(2, "full training only", "plan --hw rtx4090 x1 --model gpt2 "
               "--sweep-host-mem 8G --schedule hydra --finetune lora:8");
}

Test(sim_offload, host_dram_and_drives_in_time)
{
    /* in time, host DRAM holds the states all along; swapped checkpoints
     * from their copy out to their copy back; what the drives' reads
     * stage until its copy up or write-back; a gradient from a stage's
     * first copy out to its step. Its peak is at most what the capacity
     * check charged (the staging window's most) and holds every
     * microbatch's checkpoints at the turn of Fuyou's sweep; under ZeRO
     * one microbatch's, with every gradient already there in the last
     * microbatch */
    static const char *const sched[2] = {"fuyou", "zero-infinity"};
    for (int k = 0; k < 2; k++) {
        json_t *j = cli_json("sim --hw rtx4090 x1 --model gpt2 --schedule %s "
                             "--mbs 4 --microbatches 3 --act-swap 10 "
                             "--host-mem 64G --nvme 2 --json", sched[k]);
        json_t *o = json_object_get(j, "offload");
        double peak = json_number_value(json_object_get(o, "host_peak_bytes"));
        double held = json_number_value(json_object_get(o, "host_bytes"));
        double res = json_number_value(json_object_get(o,
                                                       "host_resident_bytes"));
        double act = json_number_value(json_object_get(o, "act_swap_bytes"));
        cr_assert_gt(act, 0);
        cr_expect(peak <= held * (1 + 1e-9), "%s: peak %.0f, charged %.0f",
                  sched[k], peak, held);
        /* the tasks hold less staging at once than the charge's window
         * (four stages' weights and gradients, three steps' state) */
        cr_expect_lt(peak, held - 0.5 * json_number_value(json_object_get(
                                             o, "host_staging_bytes")),
                     "%s", sched[k]);
        cr_expect_lt(res, peak - (k ? act / 3 : act) * 0.999, "%s", sched[k]);
        cr_expect(fabs(json_number_value(json_object_get(o, "nvme_peak_bytes"))
                       - json_number_value(json_object_get(o, "nvme_bytes")))
                  <= 1, "%s", sched[k]);
        json_decref(j);
    }
    char *dir = test_tmpdir();
    char pre[300], gp[320];
    snprintf(pre, sizeof pre, "%s/p", dir);
    cli_expect(0, "in time: host DRAM peaks at", "sim --hw rtx4090 x1 "
               "--model gpt2 --schedule zero-infinity --mbs 2 "
               "--microbatches 2 --nvme 1 --plot %s", pre);
    snprintf(gp, sizeof gp, "%s.gp", pre);
    FILE *f = fopen(gp, "r");
    cr_assert_not_null(f);
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    cr_expect(strstr(buf, "title 'host DRAM'"));
    cr_expect(strstr(buf, "title 'NVMe'"));
    test_rm_rf(dir);
}

/* A T5's relative-position tables live with the one GPU's states under
 * every offload schedule, as its tied table does: no exchange between
 * the schedule's stages (which deadlocked against the swaps). */
Test(sim_offload, t5_offload_schedules_simulate)
{
    const char *sched[] = {"zero-offload", "zero-infinity", "fuyou"};
    for (int k = 0; k < 3; k++) {
        cli_result r = cli_run("sim --hw 'cpu x1' --model "
                               "tests/data/exec/t5-tiny.json --schedule %s "
                               "--pp 1 --mbs 2 --microbatches 2", sched[k]);
        cr_expect_eq(r.code, 0, "%s: %s", sched[k], r.err);
        cr_expect(strstr(r.out, "iteration time") &&
                      !strstr(r.out, "deadlock"), "%s: %s", sched[k], r.out);
        cli_result_free(&r);
    }
    /* the planner runs its candidates without the dry run: a deadlock
     * is the engine's ("deadlock: N of M tasks never ran") */
    cli_result r = cli_run("plan --hw 'rtx2080ti x1' --model t5-3b");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(!strstr(r.out, "deadlock"), "%s", r.out);
    cli_result_free(&r);
}

/* A drive model from the catalog (--nvme N:MODEL, "nvme_model" in a
 * server file) sets the drives' rates: ZeRO-Infinity on the drives runs
 * at their pace, a PCIe 3.0 drive's 3.5 GB/s against a PCIe 5.0 one's
 * 12.4 on a PCIe 5.0 desktop; on a PCIe 3.0 host the newer drive's link
 * runs at the host's generation (3.2 GB/s a direction: its 12.4 were
 * priced before) */
static double zi_iter(const char *drive, int gen)
{
    json_t *j = cli_json("sim --hw rtx4090 x1 --pcie-gen %d --model gpt2 "
                         "--schedule zero-infinity --mbs 1 --microbatches 1 "
                         "--nvme 1:%s --json", gen, drive);
    double it = json_number_value(json_object_get(j, "iteration_time_s"));
    json_decref(j);
    return it;
}

Test(sim_offload, drive_models_set_the_drives_rates)
{
    const char *d[2] = {"samsung-970-evo-plus", "crucial-t700"};
    double it[2] = {zi_iter(d[0], 5), zi_iter(d[1], 5)};
    cr_expect_gt(it[0], 3 * it[1], "%s %g s, %s %g s", d[0], it[0], d[1],
                 it[1]);
    double old[2] = {zi_iter(d[0], 3), zi_iter(d[1], 3)};
    cr_expect_gt(old[1], 2 * it[1], "%s on PCIe 3.0 %g s, on 5.0 %g s",
                 d[1], old[1], it[1]);
    char *dir = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/hw.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"format\": \"sluice-server\", \"name\": \"x\", "
            "\"template\": {\"gpu\": \"rtx4090\", \"count\": 1},\n"
            " \"pcie_gen\": 5, \"nvme\": 1, \"nvme_model\": \"%s\"}\n",
            d[0]);
    fclose(f);
    json_t *j = cli_json("sim --hw %s --model gpt2 --schedule zero-infinity "
                         "--mbs 1 --microbatches 1 --json", path);
    cr_expect_float_eq(json_number_value(json_object_get(
                           j, "iteration_time_s")), it[0], 1e-9 * it[0]);
    json_decref(j);
    test_rm_rf(dir);
}
