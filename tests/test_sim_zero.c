/* Sharded data parallelism (ZeRO, Rajbhandari et al., SC'20; PyTorch
 * FSDP): per-GPU model state against the paper's Figure 1, the bytes the
 * IR's transfers move against its section 7 (2 Psi for stages 1 and 2,
 * 3 Psi for 3, times the ring's (N-1)/N), ZeRO-3's gathered parameters in
 * the memory account, folded runs equal to unfolded ones, the plan file
 * and the command line, and the planner sharding what does not fit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"
#include "tests/harness.h"

typedef struct zrun {
    double static_bytes[64], peak_bytes[64];
    double param_bytes[64];     /* per stage, unsharded */
    double gather_bytes[64];    /* per stage: what a ZeRO-3 gather holds */
    double rs_bytes[64];        /* per stage: unsharded gradients held */
    double dp_bytes_per_gpu;    /* data-parallel bytes sent per GPU */
    double dp_lat_ns[64];       /* per device: NCCL's latency its
                                 * data-parallel sends take (lat_ns times
                                 * their steps) */
    int32_t ag_lat_ns, rs_lat_ns, ar_lat_ns; /* a step's of each kind of
                                 * collective (the last one emitted) */
    int32_t fold_ns[3][2];      /* [coll][0] the first step's fold of each
                                 * kind of collective, [1] the last's */
    double step_bytes[3];       /* and its bytes */
    int units;                  /* stage 0's */
    int64_t iteration_ns;
    sim_dev_stats dev[64];
    int n_devices, fold;
} zrun;

/* Simulates gpt2 (or model) on `gpu` x n: pp stages of even layers, dp
 * replicas, tensor width tp, m microbatches of 1, ZeRO stage z (fsdp:
 * sim_fsdp), replicas folded when fold. */
static void zsim(const char *model, const char *gpu, int n, sim_sched s,
                 int pp, int dp, int tp, int m, int z, int fsdp, int fold,
                 zrun *out)
{
    util_err e;
    prof_model *md = prof_model_load(model, &e);
    cr_assert_not_null(md, "%s", e.msg);
    prof_topo *t = test_topo(gpu, n);
    sim_plan p;
    sim_plan_init(&p);
    snprintf(p.model, sizeof p.model, "%s", model);
    p.sched = s;
    p.pp = pp;
    p.dp = dp;
    p.tp = tp;
    p.mbs = 1;
    p.n_mb = m;
    p.zero = z;
    p.fsdp = fsdp;
    /* unsharded, the one all-reduce a stage after its backward, which
     * ZeRO's collectives are set against */
    p.grad_bucket = 0;
    sim_plan_stages(&p, pp);
    cr_assert_eq(sim_partition_even(md, pp, p.first_op, p.last_op, &e), 0,
                 "%s", e.msg);
    for (int i = 0; i < pp; i++) p.stage_device[i] = i;
    cr_assert_eq(sim_zero_check(z, fsdp, dp, s, &e), 0, "%s", e.msg);
    sim_sched_opts so = sim_plan_sched_opts(&p);
    sim_cost_opts co = sim_plan_cost_opts(&p);
    co.fold = fold;
    sim_costs *c = sim_costs_build(md, t, p.n_stages, p.first_op, p.last_op,
                                   p.stage_device, pp, &co, &e);
    cr_assert_not_null(c, "%s", e.msg);
    sim_ir *ir = sim_schedule(&so, c, &e);
    cr_assert_not_null(ir, "%s", e.msg);
    /* folded rings a step at a time: exactly the explicit replicas'
     * timeline */
    sim_run_opts ro = {.ring_steps = 1};
    sim_engine *en = sim_engine_new(ir, c, &ro);
    sim_result r;
    cr_assert_eq(sim_engine_run(en, &r), 0, "%s", r.msg);
    memset(out, 0, sizeof *out);
    out->n_devices = r.n_devices;
    out->fold = c->fold;
    out->iteration_ns = r.iteration_ns;
    for (int d = 0; d < r.n_devices && d < 64; d++) {
        out->dev[d] = r.dev[d];
        out->static_bytes[d] = r.dev[d].static_bytes;
        out->peak_bytes[d] = r.dev[d].peak_bytes;
    }
    for (int st = 0; st < pp; st++) {
        out->param_bytes[st] = c->stage[st].param_bytes;
        out->gather_bytes[st] = c->stage[st].gather_bytes;
        out->rs_bytes[st] = c->stage[st].rs_bytes;
    }
    /* every data-parallel send, repeated steps and all lanes counted,
     * over the GPUs simulated */
    double sent = 0;
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *x = &ir->tasks[i];
        if (x->kind != SIM_SEND || x->comm != SIM_COMM_DP) continue;
        int k = x->steps > 1 ? x->steps : 1;
        sent += x->bytes * k;
        if (x->device < 64) out->dp_lat_ns[x->device] += (double)x->lat_ns * k;
        if (x->coll < 3) {
            if (!out->step_bytes[x->coll]) {
                out->step_bytes[x->coll] = x->bytes;
                out->fold_ns[x->coll][0] = x->fold_ns;
            }
            out->fold_ns[x->coll][1] = x->fold_ns;
        }
        if (x->coll == SIM_COLL_ALLGATHER) out->ag_lat_ns = x->lat_ns;
        if (x->coll == SIM_COLL_REDUCE_SCATTER) out->rs_lat_ns = x->lat_ns;
        if (x->coll == SIM_COLL_ALLREDUCE) out->ar_lat_ns = x->lat_ns;
    }
    out->units = c->stage[0].units;
    out->dp_bytes_per_gpu = sent / ((double)r.n_devices * tp);
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(c);
    sim_plan_free(&p);
    prof_topo_free(t);
    prof_model_free(md);
}

/* Psi: the parameters one GPU's stage s holds unsharded (tp 1). */
static double psi_of(const char *model, int pp, int s)
{
    util_err e;
    prof_model *m = prof_model_load(model, &e);
    cr_assert_not_null(m, "%s", e.msg);
    int first[64], last[64];
    cr_assert_eq(sim_partition_even(m, pp, first, last, &e), 0, "%s", e.msg);
    /* a tied table once where the stage also holds the embedding */
    double psi = 0;
    for (int i = first[s]; i <= last[s]; i++) {
        const prof_op *o = &m->ops[i];
        if (first[s] == 0 && o->tied &&
            (o->kind == PROF_OP_LM_HEAD || o->kind == PROF_OP_EMBED))
            continue;
        psi += o->params;
    }
    /* one stage: the model's own count, the tied table once */
    if (pp == 1)
        cr_expect_leq(fabs(psi - m->params), 0.5, "%s: one stage %.0f, the "
                      "model %.0f", model, psi, m->params);
    prof_model_free(m);
    return psi;
}

static void near(double got, double want, const char *what)
{
    cr_expect_leq(fabs(got - want), 1e-9 * fabs(want) + 1e-6,
                  "%s: %.6g, want %.6g", what, got, want);
}

/* GPT-2's token table in fp16: what each of two stages holding a copy
 * keeps whole under ZeRO-2 and 3 until the copies' gradients are summed
 * (sim_add_tied exchanges them once a step). */
#define GPT2_TIED (50257.0 * 768 * 2)

/* Figure 1 of the paper, K = 12 (mixed-precision Adam: fp32 master
 * weights, momentum and variance), Nd the data-parallel degree:
 * baseline (2 + 2 + K) Psi, P_os 2 Psi + 2 Psi + K Psi / Nd, P_os+g
 * 2 Psi + (2 + K) Psi / Nd, P_os+g+p (2 + 2 + K) Psi / Nd; with two
 * stages, ZeRO-2 and 3 keep the tied table's gradient whole on both. */
Test(zero, model_state_is_figure_1)
{
    const double K = 12;
    struct { int pp, dp; } lay[] = {{1, 8}, {2, 4}};
    for (int l = 0; l < 2; l++) {
        int pp = lay[l].pp, Nd = lay[l].dp;
        for (int z = 0; z <= 3; z++) {
            zrun r;
            zsim("gpt2", "a100-sxm-80gb", 8, SIM_SCHED_1F1B, pp, Nd, 1, 2, z,
                 0, 0, &r);
            for (int s = 0; s < pp; s++) {
                double psi = psi_of("gpt2", pp, s);
                double want = z == 0 ? (2 + 2 + K) * psi
                            : z == 1 ? 2 * psi + 2 * psi + K * psi / Nd
                            : z == 2 ? 2 * psi + (2 + K) * psi / Nd
                            : (2 + 2 + K) * psi / Nd;
                if (z >= 2 && pp > 1) want += GPT2_TIED;
                char what[64];
                snprintf(what, sizeof what, "pp %d dp %d zero %d stage %d",
                         pp, Nd, z, s);
                /* every replica's device of the stage */
                for (int q = 0; q < Nd; q++)
                    near(r.static_bytes[q * pp + s], want, what);
            }
        }
    }
}

/* FSDP full is ZeRO-3 over the whole group; hybrid shards over the ranks
 * of a server: pp 2 on 8-GPU servers puts 4 replicas in each. */
Test(zero, fsdp_shards_over_its_group)
{
    double psi = psi_of("gpt2", 2, 0);
    zrun f, h;
    zsim("gpt2", "a100-sxm-80gb", 16, SIM_SCHED_1F1B, 2, 8, 1, 2, 0,
         SIM_FSDP_FULL, 0, &f);
    zsim("gpt2", "a100-sxm-80gb", 16, SIM_SCHED_1F1B, 2, 8, 1, 2, 0,
         SIM_FSDP_HYBRID, 0, &h);
    near(f.static_bytes[0], 16 * psi / 8 + GPT2_TIED, "fsdp full");
    near(h.static_bytes[0], 16 * psi / 4 + GPT2_TIED, "fsdp hybrid");
}

/* Section 7: stages 1 and 2 move what an all-reduce moves (2 Psi
 * bytes-per-parameter units: a reduce-scatter and an all-gather, each
 * (N-1)/N of the fp16 gradients or weights per GPU); stage 3 one and a
 * half times that (a gather before the forward and the backward, a
 * reduce-scatter after). With m microbatches stage 2 reduce-scatters
 * after each backward, stage 3 also gathers for each. */
Test(zero, communication_volume)
{
    const int N = 8;
    double psi = psi_of("gpt2", 1, 0), wb = 2;  /* fp16 */
    double ring = (N - 1.0) / N;
    for (int m = 1; m <= 2; m++)
        for (int z = 0; z <= 3; z++) {
            zrun r;
            zsim("gpt2", "a100-sxm-80gb", 8, SIM_SCHED_1F1B, 1, N, 1, m, z, 0,
                 0, &r);
            double units = z <= 1 ? 2 : z == 2 ? m + 1 : 3.0 * m;
            char what[48];
            snprintf(what, sizeof what, "zero %d, %d microbatch(es)", z, m);
            near(r.dp_bytes_per_gpu, units * psi * wb * ring, what);
        }
    /* folded (one 8-GPU replica standing for two), tensor-parallel lanes */
    for (int z = 1; z <= 3; z++) {
        zrun r;
        zsim("gpt2", "a100-sxm-80gb", 16, SIM_SCHED_1F1B, 2, 2, 4, 1, z, 0, 1,
             &r);
        cr_expect_eq(r.fold, 2, "zero %d folds", z);
        double units = z <= 2 ? 2 : 3;
        /* the mean of the two stages' GPUs, each (2-1)/2 of its bytes */
        near(r.dp_bytes_per_gpu,
             units * (r.param_bytes[0] + r.param_bytes[1]) / 2 * 0.5,
             "folded");
    }
}

/* A data-parallel ring over two 8-GPU servers: as NCCL runs a ring per
 * channel, each crossing servers through another GPU's port, the step
 * between servers takes all eight ports of the 200 Gb/s fabric (25 GB/s
 * each), not one: the all-reduce's 2(N-1) steps of P/N bytes take about
 * (P/N) / 200 GB/s each (NVLink's hop is faster), eight times less than
 * through one port. The same for ZeRO-3's gathers and reduce-scatters
 * (3(N-1) steps, the backward's gather overlapping the forward: busy
 * for less than their sum); folded or not. Beside the bytes, each step
 * takes NCCL's latency (below), left out here. */
Test(zero, rings_between_servers_take_every_port)
{
    const int N = 16;
    for (int z = 0; z <= 3; z += 3)
        for (int fold = 0; fold <= 1; fold++) {
            zrun r;
            zsim("gpt2", "a100-sxm-80gb", N, SIM_SCHED_1F1B, 1, N, 1, 1, z,
                 0, fold, &r);
            double P = r.param_bytes[0];
            double steps = (z ? 3.0 : 2.0) * (N - 1);
            double ports = steps * (P / N) / (8 * 25e9);
            /* the busiest sender: one whose step crosses servers */
            double dp = 0;
            for (int d = 0; d < r.n_devices && d < 64; d++)
                dp = fmax(dp, (r.dev[d].comm_busy_ns[SIM_COMM_DP] -
                               r.dp_lat_ns[d]) * 1e-9);
            cr_expect(dp > (z ? 0.6 : 0.9) * ports && dp < 1.4 * ports,
                      "zero %d, fold %d: rings busy %.2f ms, eight ports "
                      "%.2f ms", z, fold, dp * 1e3, ports * 1e3);
        }
}

/* ZeRO-3 holds the gathered parameters of a stage from their gather to
 * the end of the compute using them, two layers' at a time (the one
 * computing, the next prefetched), as FSDP's units: at least one such
 * hold at the peak, at most two (the running task's and the next
 * task's prefetch). GPT-2's largest layer is its embedding (the token
 * and position tables, 39.4M parameters of the stage's 124.4M, the tied
 * head's table counted once with them): two of them, 63% of the stage. */
Test(zero, gathered_parameters_are_counted)
{
    zrun a, b;
    zsim("gpt2", "a100-sxm-80gb", 8, SIM_SCHED_1F1B, 1, 8, 1, 4, 2, 0, 0, &a);
    zsim("gpt2", "a100-sxm-80gb", 8, SIM_SCHED_1F1B, 1, 8, 1, 4, 3, 0, 0, &b);
    double P = b.param_bytes[0], G = b.gather_bytes[0];
    cr_expect(G < 0.65 * P && G > 0.6 * P, "two layers %.0f of %.0f", G, P);
    double extra = (b.peak_bytes[0] - b.static_bytes[0]) -
                   (a.peak_bytes[0] - a.static_bytes[0]);
    cr_expect_geq(extra, G - 1, "gathered %.0f of %.0f", extra, G);
    cr_expect_leq(extra, 2 * G + 1, "gathered %.0f of %.0f", extra, G);
}

/* ZeRO-2 and 3 hold a layer's whole gradient from its backward until its
 * reduce-scatter is done, the next layer's computing beside it: two of
 * the largest layer's (GPT-2's embeddings, (50257 + 1024) x 768
 * parameters, fp16), on top of what ZeRO-1 holds beside its whole
 * gradient; none unsharded or under ZeRO-1. */
Test(zero, sharded_gradients_in_flight_are_counted)
{
    zrun r[3];
    for (int z = 0; z < 3; z++)
        zsim("gpt2", "a100-sxm-80gb", 8, SIM_SCHED_1F1B, 1, 8, 1, 4, z, 0, 0,
             &r[z]);
    double layer = (50257.0 + 1024) * 768 * 2;
    cr_expect_eq(r[0].rs_bytes[0], 0);
    cr_expect_eq(r[1].rs_bytes[0], 0);
    cr_expect_float_eq(r[2].rs_bytes[0], 2 * layer, 1, "%.0f",
                       r[2].rs_bytes[0]);
    double extra = (r[2].peak_bytes[0] - r[2].static_bytes[0]) -
                   (r[1].peak_bytes[0] - r[1].static_bytes[0]);
    cr_expect_float_eq(extra, 2 * layer, 1, "%.0f more at the peak", extra);
}

static void expect_same(const zrun *a, const zrun *b, int pp, double tol,
                        const char *what)
{
    cr_expect_eq(a->iteration_ns, b->iteration_ns, "%s: iteration %lld vs %lld",
                 what, (long long)a->iteration_ns, (long long)b->iteration_ns);
    for (int d = 0; d < b->n_devices && d < 64; d++) {
        const sim_dev_stats *x = &a->dev[d], *y = &b->dev[d];
        cr_expect_eq(x->compute_ns, y->compute_ns, "%s dev %d", what, d);
        cr_expect_eq(x->bubble_ns, y->bubble_ns, "%s dev %d bubble", what, d);
        for (int k = 0; k < SIM_COMM_COUNT; k++)
            cr_expect_eq(x->comm_busy_ns[k], y->comm_busy_ns[k],
                         "%s dev %d comm %d", what, d, k);
        cr_expect_leq(fabs(x->peak_bytes - y->peak_bytes), tol,
                      "%s dev %d peak %.0f vs %.0f", what, d, x->peak_bytes,
                      y->peak_bytes);
    }
    (void)pp;
}

/* Folding stays exact for sharded plans: the reduce-scatter and
 * all-gather rings are halves of the all-reduce's, crossing the groups
 * as it does; hybrid sharding's ring closes inside the simulated group
 * (a server) and its all-reduce across servers wraps to the next. */
Test(zero, folding_is_exact)
{
    for (int z = 1; z <= 3; z++) {
        zrun a, b;
        zsim("gpt2", "a100-sxm-80gb", 16, SIM_SCHED_1F1B, 2, 2, 4, 4, z, 0, 0,
             &a);
        zsim("gpt2", "a100-sxm-80gb", 16, SIM_SCHED_1F1B, 2, 2, 4, 4, z, 0, 1,
             &b);
        cr_expect_eq(b.fold, 2);
        char what[32];
        snprintf(what, sizeof what, "zero %d", z);
        expect_same(&a, &b, 2, 0, what);
    }
    zrun a, b;
    zsim("gpt2", "a100-sxm-80gb", 16, SIM_SCHED_1F1B, 2, 8, 1, 4, 0,
         SIM_FSDP_HYBRID, 0, &a);
    zsim("gpt2", "a100-sxm-80gb", 16, SIM_SCHED_1F1B, 2, 8, 1, 4, 0,
         SIM_FSDP_HYBRID, 1, &b);
    cr_expect_eq(b.fold, 2);
    cr_expect_eq(b.n_devices, 8);
    expect_same(&a, &b, 2, 0, "fsdp hybrid");
}

/* Written with --out, read back with --plan: the same run. */
Test(zero, plan_file_round_trip)
{
    char *dir = test_tmpdir();
    const char *flags[] = {"--zero 1", "--zero 2", "--zero 3", "--fsdp full",
                           "--fsdp hybrid"};
    for (int i = 0; i < 5; i++) {
        cli_result a = cli_run("sim --hw a100-sxm-80gb x16 --model gpt2 "
                               "--schedule 1f1b --pp 2 --dp 8 --mbs 1 "
                               "--microbatches 4 %s --json --out %s/p.json",
                               flags[i], dir);
        cr_assert_eq(a.code, 0, "%s: %s", flags[i], a.err);
        cli_result b = cli_run("sim --plan %s/p.json --json", dir);
        cr_assert_eq(b.code, 0, "%s: %s", flags[i], b.err);
        json_t *ja = json_loads(a.out, 0, NULL), *jb = json_loads(b.out, 0, NULL);
        cr_assert(ja && jb);
        const char *keys[] = {"zero", "fsdp", "shard_ranks",
                              "iteration_time_s"};
        for (int k = 0; k < 4; k++)
            cr_expect(json_equal(json_object_get(ja, keys[k]),
                                 json_object_get(jb, keys[k])),
                      "%s: %s differs", flags[i], keys[k]);
        cr_expect_eq(json_integer_value(json_object_get(jb, "zero")),
                     i < 3 ? i + 1 : 3, "%s", flags[i]);
        cr_expect_eq(json_integer_value(json_object_get(jb, "shard_ranks")),
                     i == 4 ? 4 : 8, "%s", flags[i]);
        json_decref(ja);
        json_decref(jb);
        cli_result_free(&a);
        cli_result_free(&b);
    }
    test_rm_rf(dir);
}

Test(zero, bad_arguments)
{
    struct { const char *args, *want; } c[] = {
        {"--pp 2 --dp 8 --zero 4", "--zero '4': expected 0, 1, 2 or 3"},
        {"--pp 2 --dp 8 --zero", "--zero needs a value"},
        {"--pp 2 --dp 8 --fsdp half", "--fsdp 'half': expected full or hybrid"},
        {"--pp 2 --dp 8 --zero 2 --fsdp full", "fsdp full with zero 2"},
        {"--pp 2 --dp 1 --zero 1", "zero 1 needs data parallelism (dp 1)"},
        {"--pp 2 --dp 8 --zero 1 --schedule 2bw", "zero 1 with schedule 2bw"},
        {"--pp 2 --tp 4 --dp 2 --fsdp hybrid", "fsdp hybrid: a replica takes 8 GPU(s)"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        int gpus = strstr(c[i].args, "--dp 1") ? 2 : 16;
        cli_result r = cli_run("sim --hw a100-sxm-80gb x%d --model gpt2 "
                               "--schedule 1f1b --mbs 1 --microbatches 4 %s",
                               gpus, c[i].args);
        cr_expect_eq(r.code, 2, "%s: exit %d, %s", c[i].args, r.code, r.err);
        cr_expect(strstr(r.err, c[i].want), "%s: expected '%s' in: %s",
                  c[i].args, c[i].want, r.err);
        cli_result_free(&r);
    }
    /* plan refuses what sim refuses (it planned --zero 1 --fsdp full as
     * ZeRO-3, silently) */
    cli_expect(2, "--fsdp full with --zero 1: FSDP shards", "plan --hw "
               "a100-sxm-80gb x16 --model gpt2 --zero 1 --fsdp full");
}

/* gpt2-xl (1.6 B parameters, 25 GB of model state unsharded) on eight
 * 11 GB cards with one stage each replica: only sharding fits. */
Test(zero, planner_shards_what_does_not_fit)
{
    util_err e;
    prof_model *m = prof_model_load("gpt2-xl", &e);
    cr_assert_not_null(m, "%s", e.msg);
    prof_topo *t = test_topo("rtx2080ti", 8);
    plan_opts o;
    plan_opts_init(&o);
    o.pp = 1;
    o.tp = 1;
    o.batch = 8;
    o.zero = 0;
    plan_result r;
    cr_assert_eq(plan_search(m, t, m->spec.name, "test", &o, &r, &e), 0, "%s",
                 e.msg);
    cr_expect_not(r.found, "unsharded fits?");
    plan_result_free(&r);
    o.zero = -1;
    cr_assert_eq(plan_search(m, t, m->spec.name, "test", &o, &r, &e), 0, "%s",
                 e.msg);
    cr_assert(r.found, "%s", r.advice);
    cr_expect_gt(r.alt[r.best].plan.zero, 0);
    cr_expect_leq(r.alt[r.best].peak_bytes, r.capacity_bytes);
    plan_result_free(&r);
    prof_topo_free(t);
    prof_model_free(m);
}

/* GPT-3 175B on 384 A100s, one stage per replica, tensor width 8: the
 * unsharded state of full training needs far more than a GPU (without
 * --finetune full the planner would fall back to LoRA), ZeRO-3 fits. */
Test(zero, gpt3_175b_fits_with_zero_3)
{
    cli_result a = cli_run("plan --hw a100-sxm-80gb x384 --model gpt3-175b "
                           "--zero 0 --pp 1 --tp 8 --finetune full "
                           "--no-progress");
    cr_expect_eq(a.code, 1, "%s", a.err);
    cr_expect(strstr(a.err, "does not fit"), "%s", a.err);
    cli_result b = cli_run("plan --hw a100-sxm-80gb x384 --model gpt3-175b "
                           "--zero 3 --pp 1 --tp 8 --no-progress --json");
    cr_assert_eq(b.code, 0, "%s", b.err);
    json_t *j = json_loads(b.out, 0, NULL);
    cr_assert_not_null(j);
    json_t *p = json_object_get(j, "plan");
    cr_assert_not_null(p, "%s", b.out);
    cr_expect_eq(json_integer_value(json_object_get(p, "zero")), 3);
    cr_expect_eq(json_integer_value(json_object_get(p, "dp")), 48);
    json_decref(j);
    cli_result_free(&a);
    cli_result_free(&b);
}

/* Memory at an instant counts once all of it is applied: a replica's
 * gradient arrives as its own backward ends and frees the activations,
 * so the receive buffer never adds to them, on either replica, whatever
 * order the engine meets the two events in; both replicas peak where one
 * alone does. (In buckets, a ring's receive buffer is held beside the
 * activations of the backward it overlaps.) */
Test(sim_zero, replicas_peak_alike)
{
    const char *a = "sim --hw cpu x2 --model gpt-mini --schedule 1f1b --pp 1 "
                    "--mbs 8 --microbatches 1 --grad-bucket 0 --json";
    json_t *one = cli_json("%s --dp 1", a), *two = cli_json("%s --dp 2", a);
    double p1 = json_number_value(json_object_get(
        json_array_get(json_object_get(one, "devices"), 0), "peak_mem_bytes"));
    cr_assert_gt(p1, 0);
    for (int d = 0; d < 2; d++) {
        double p = json_number_value(json_object_get(
            json_array_get(json_object_get(two, "devices"), (size_t)d),
            "peak_mem_bytes"));
        cr_expect_float_eq(p, p1, 1e-9 * p1, "replica %d peaks at %.0f, one "
                           "alone at %.0f", d, p, p1);
    }
    json_decref(one);
    json_decref(two);
}

/* NCCL's latency on the same two servers (its cost model, Simple
 * protocol): a call takes 8.4 us, and its ring 3.4 us a hop over NVLink
 * inside a server, 14 us a hop between them. A step of a collective takes
 * its call's latency over its steps: a reduce-scatter's or gather's call
 * has N-1 steps, 1 of them between the servers; an all-reduce's 2(N-1),
 * 2 x 2 of them counted between servers, the call then 1.4 times as long
 * (NCCL's "plateau" across servers, from Ampere on). ZeRO-3 gathers and
 * reduces FSDP's units (the model graph's layers: here 12, the embedding
 * and the head) by a call each, so its steps take the units' calls;
 * folded or not. */
Test(zero, collectives_take_nccls_latency_per_call)
{
    const int N = 16;
    double round = 14 * NCCL_STEP_NVLINK_NS + NCCL_STEP_NET_NS;
    double ar = (NCCL_BASE_NS + 26 * NCCL_STEP_NVLINK_NS +
                 4 * NCCL_STEP_NET_NS) * 1.4 / (2 * (N - 1));
    for (int fold = 0; fold <= 1; fold++) {
        zrun r;
        zsim("gpt2", "a100-sxm-80gb", N, SIM_SCHED_1F1B, 1, N, 1, 1, 0, 0,
             fold, &r);
        cr_expect_eq(r.ar_lat_ns, llround(ar), "fold %d: %d ns", fold,
                     r.ar_lat_ns);
        zsim("gpt2", "a100-sxm-80gb", N, SIM_SCHED_1F1B, 1, N, 1, 1, 3, 0,
             fold, &r);
        cr_assert_eq(r.units, 14);
        double step = (NCCL_BASE_NS + round) / (N - 1) * 14;
        cr_expect_eq(r.ag_lat_ns, llround(step), "%d ns", r.ag_lat_ns);
        cr_expect_eq(r.rs_lat_ns, llround(step), "%d ns", r.rs_lat_ns);
    }
    /* one server: no network hop */
    zrun r;
    zsim("gpt2", "a100-sxm-80gb", 8, SIM_SCHED_1F1B, 1, 8, 1, 1, 0, 0, 0,
         &r);
    cr_expect_eq(r.ar_lat_ns, llround((NCCL_BASE_NS + 2 * 7 *
                                       NCCL_STEP_NVLINK_NS) / 14));
}

/* On CPU cores the executor folds each step's chunk in a pass of its
 * own after it lands, at the core's streaming rate: adding it to the
 * gradient reads two and writes one (3 passes of its bytes), copying it
 * into place reads one and writes one (2). An all-reduce's first step
 * adds and its last copies; a reduce-scatter adds; a gather copies.
 * NCCL's latency is a GPU's: none here. */
Test(zero, cpu_rings_pay_the_receivers_fold)
{
    prof_gpu g;
    util_err e;
    cr_assert_eq(prof_gpu_get("cpu", &g, &e), 0, "%s", e.msg);
    double rate = g.mem_bw_bytes_per_s * g.eff.mem_max;
    for (int z = 0; z <= 2; z += 2) {
        zrun r;
        zsim("gpt-mini", "cpu", 2, SIM_SCHED_1F1B, 1, 2, 1, 1, z, 0, 0, &r);
        cr_expect_eq(r.ar_lat_ns + r.rs_lat_ns + r.ag_lat_ns, 0);
        struct { int coll; double first, last; } w[] = {
            {SIM_COLL_ALLREDUCE, 3, 2}, {SIM_COLL_REDUCE_SCATTER, 3, 3},
            {SIM_COLL_ALLGATHER, 2, 2}};
        for (int k = 0; k < 3; k++) {
            int c = w[k].coll;
            if ((c == SIM_COLL_ALLREDUCE) != (z == 0)) continue;
            double b = r.step_bytes[c];
            cr_assert_gt(b, 0, "zero %d: no collective %d", z, c);
            cr_expect_eq(r.fold_ns[c][0], llround(w[k].first * b / rate * 1e9),
                         "zero %d, collective %d: %d ns", z, c, r.fold_ns[c][0]);
            cr_expect_eq(r.fold_ns[c][1], llround(w[k].last * b / rate * 1e9),
                         "zero %d, collective %d: %d ns", z, c, r.fold_ns[c][1]);
        }
    }
}

/* A device's data-parallel collectives are in flight while any of its
 * ring steps moves or its compute waits on one (for the replicas to
 * join, each step's latency). Unsharded, at pp 1, the ring runs after
 * the last backward with little beside it: in flight is what the
 * compute waits, within 10% (7% over on devices 7 and 15, each
 * server's last; sends alone read 23.0 ms in flight against 29.9
 * exposed for GPT-2 XL over 16 A100s). ZeRO-3's gathers overlap the
 * compute: most of them hidden, and the spans' union within the
 * iteration. */
Test(zero, in_flight_covers_exposed)
{
    for (int z = 0; z <= 3; z += 3) {
        zrun r;
        zsim("gpt2-xl", "a100-sxm-80gb", 16, SIM_SCHED_1F1B, 1, 16, 1, 8, z,
             0, 0, &r);
        for (int d = 0; d < r.n_devices && d < 64; d++) {
            double busy = (double)r.dev[d].comm_busy_ns[SIM_COMM_DP],
                   exp = (double)r.dev[d].comm_exp_ns[SIM_COMM_DP];
            cr_expect(busy >= exp && (z ? busy > 2 * exp &&
                                              busy <= r.iteration_ns
                                        : busy <= 1.1 * exp),
                      "zero %d, device %d: in flight %.0f ns, exposed %.0f, "
                      "iteration %lld", z, d, busy, exp,
                      (long long)r.iteration_ns);
        }
    }
}
