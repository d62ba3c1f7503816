/* Folding data-parallel replicas: where the cluster is symmetric under a
 * shift of whole servers, simulating one replica whose flows cross link
 * orbits gives the timeline of simulating them all, for every schedule;
 * where it is not symmetric, nothing is folded. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "planner/planner.h"
#include "tests/harness.h"

typedef struct run {
    int fold, n_devices;
    int64_t iteration_ns, makespan_ns;
    sim_dev_stats dev[64];
    int max_inflight[64];
    double ring_step_bytes; /* the largest all-reduce step's buffer */
    int ring_sends;         /* all-reduce send tasks */
    int minibatches;
    int64_t events;
} run;

/* simulate()'s engine: a folded ring a step at a time, as the explicit
 * replicas run theirs, or (0) its steps as one flow, the default */
static int ring_steps = 1;

/* The gradient bucket simulate() plans with: 0, one ring per stage
 * (check_pair counts its sends), or small enough that gpt-mini's stages
 * reduce theirs in several */
static double bucket;
/* check_pair's cases whose buckets split a stage's ring (stages holding
 * a tied table's copy reduce it in one, after its exchange) */
static int split_rings;

/* Simulates a plan of schedule s: pp devices, v stages per device (even
 * layers), dp replicas, tensor width tp, m microbatches of 1. */
static void simulate(const prof_model *m, const prof_topo *t, sim_sched s,
                     int pp, int v, int dp, int tp, int mb, int fold, run *out)
{
    sim_plan p;
    sim_plan_init(&p);
    p.grad_bucket = bucket;
    snprintf(p.model, sizeof p.model, "%s", m->spec.name);
    p.sched = s;
    p.pp = pp;
    p.dp = dp;
    p.tp = tp;
    p.mbs = 1;
    p.n_mb = mb;
    p.waves = 1;
    p.chunks = s == SIM_SCHED_INTERLEAVED ? v : 0;
    sim_plan_stages(&p, pp * v);
    util_err e;
    cr_assert_eq(sim_partition_even(m, pp * v, p.first_op, p.last_op, &e), 0,
                 "%s", e.msg);
    sim_sched_opts so = sim_plan_sched_opts(&p);
    sim_sched_map(&so, p.stage_device);
    so = sim_plan_sched_opts(&p);
    sim_cost_opts co = sim_plan_cost_opts(&p);
    co.fold = fold;
    sim_costs *c = sim_costs_build(m, t, p.n_stages, p.first_op, p.last_op,
                                   p.stage_device, pp, &co, &e);
    cr_assert_not_null(c, "%s", e.msg);
    sim_ir *ir = sim_schedule(&so, c, &e);
    cr_assert_not_null(ir, "%s %s", sim_sched_name(s), e.msg);
    sim_run_opts ro = {.ring_steps = ring_steps};
    sim_engine *en = sim_engine_new(ir, c, &ro);
    sim_result r;
    cr_assert_eq(sim_engine_run(en, &r), 0, "%s", r.msg);
    memset(out, 0, sizeof *out);
    out->fold = c->fold;
    out->n_devices = r.n_devices;
    out->iteration_ns = r.iteration_ns;
    out->makespan_ns = r.makespan_ns;
    out->events = r.events;
    for (int d = 0; d < r.n_devices && d < 64; d++) out->dev[d] = r.dev[d];
    for (int st = 0; st < p.n_stages && st < 64; st++)
        out->max_inflight[st] = r.max_inflight[st];
    for (int st = 0; st < c->n_stages; st++)
        if (c->stage[st].grad_bytes / dp > out->ring_step_bytes)
            out->ring_step_bytes = c->stage[st].grad_bytes / dp;
    out->minibatches = ir->n_minibatches;
    for (int i = 0; i < ir->n_tasks; i++)
        out->ring_sends += ir->tasks[i].kind == SIM_SEND &&
                           ir->tasks[i].comm == SIM_COMM_DP;
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(c);
    sim_plan_free(&p);
}

static void expect_same(const run *a, const run *b, int pp, int stages,
                        const char *what)
{
    cr_expect_eq(a->iteration_ns, b->iteration_ns, "%s: iteration %lld vs %lld",
                 what, (long long)a->iteration_ns, (long long)b->iteration_ns);
    cr_expect_eq(a->makespan_ns, b->makespan_ns, "%s: makespan", what);
    for (int d = 0; d < pp; d++) {
        const sim_dev_stats *x = &a->dev[d], *y = &b->dev[d];
        cr_expect_eq(x->compute_ns, y->compute_ns, "%s dev %d compute", what, d);
        cr_expect_eq(x->bubble_ns, y->bubble_ns, "%s dev %d bubble", what, d);
        /* Where a ring step's receive and the send that frees the last
         * one start at the same instant, the unfolded run takes them in
         * replica order, so a device may count both buffers for that
         * instant: peaks agree to within one step's buffer. */
        cr_expect_leq(fabs(x->peak_bytes - y->peak_bytes), a->ring_step_bytes,
                      "%s dev %d peak %.0f vs %.0f", what, d, x->peak_bytes,
                      y->peak_bytes);
        cr_expect_geq(x->peak_bytes, y->peak_bytes, "%s dev %d", what, d);
        for (int k = 0; k < SIM_COMM_COUNT; k++) {
            cr_expect_eq(x->comm_busy_ns[k], y->comm_busy_ns[k],
                         "%s dev %d comm %d busy", what, d, k);
            cr_expect_eq(x->comm_exp_ns[k], y->comm_exp_ns[k],
                         "%s dev %d comm %d exposed", what, d, k);
        }
    }
    for (int s = 0; s < stages; s++)
        cr_expect_eq(a->max_inflight[s], b->max_inflight[s], "%s stage %d", what, s);
}

/* Simulates a configuration with every replica and folded, and expects
 * the folded run to stand for `want` replicas with the same timeline. */
static void check_pair(const prof_model *m, const prof_topo *t, sim_sched s,
                       int pp, int v, int dp, int tp, int mb, int want)
{
    run a, b;
    /* bucketed, the rings start inside the backward: folding still
     * stands for every replica */
    bucket = 64 * 1024;
    simulate(m, t, s, pp, v, dp, tp, mb, 0, &a);
    simulate(m, t, s, pp, v, dp, tp, mb, 1, &b);
    int sends = a.ring_sends;
    char what[96];
    snprintf(what, sizeof what, "%s p%d d%d t%d, buckets", sim_sched_name(s),
             pp, dp, tp);
    expect_same(&a, &b, b.n_devices < 64 ? b.n_devices : 64, pp * v, what);
    bucket = 0;
    simulate(m, t, s, pp, v, dp, tp, mb, 0, &a);
    simulate(m, t, s, pp, v, dp, tp, mb, 1, &b);
    snprintf(what, sizeof what, "%s p%d d%d t%d", sim_sched_name(s), pp, dp, tp);
    cr_expect_geq(sends, a.ring_sends, "%s: %d sends in buckets, %d in one "
                  "ring a stage", what, sends, a.ring_sends);
    split_rings += sends > a.ring_sends;
    cr_expect_eq(a.fold, 1, "%s", what);
    cr_expect_eq(b.fold, want, "%s: folded %d", what, b.fold);
    cr_expect_eq(a.n_devices, pp * dp, "%s", what);
    cr_expect_eq(b.n_devices, pp * dp / want, "%s", what);
    /* every simulated device: replica 0's, and with replicas smaller
     * than a server the others of its group */
    expect_same(&a, &b, b.n_devices < 64 ? b.n_devices : 64, pp * v, what);
    /* every member of every stage's ring, each minibatch: 2(R-1) steps
     * explicit; folded, those of the simulated members, and with one
     * member the steps are one repeated send */
    int pipes = sim_sched_pipes(s), R = dp * pipes, K = a.minibatches;
    int Rs = dp / want * pipes;
    cr_expect_eq(a.ring_sends, K * pp * v * R * 2 * (R - 1), "%s: %d sends",
                 what, a.ring_sends);
    cr_expect_eq(b.ring_sends, K * pp * v * (Rs == 1 ? 1 : Rs * 2 * (R - 1)),
                 "%s: %d sends folded", what, b.ring_sends);
}

/* gpt-mini's plans of every kind of schedule on 32 A100s: pp devices,
 * v stages a device, dp replicas, tensor width tp, mb microbatches */
static const struct { sim_sched s; int pp, v, dp, tp, mb; } cs[] = {
    {SIM_SCHED_1F1B, 2, 1, 4, 4, 8},
    {SIM_SCHED_GPIPE, 4, 1, 4, 2, 8},
    {SIM_SCHED_INTERLEAVED, 2, 2, 4, 4, 4},
    {SIM_SCHED_2BW, 4, 1, 2, 4, 8},
    {SIM_SCHED_ZBH1, 8, 1, 4, 1, 8},
    {SIM_SCHED_ZBV, 4, 2, 2, 4, 8},
    {SIM_SCHED_WAVE, 2, 2, 4, 4, 4},
    {SIM_SCHED_DUALPIPEV, 4, 2, 4, 2, 8},
    {SIM_SCHED_1F1B, 1, 1, 4, 8, 4},
    {SIM_SCHED_CHIMERA, 4, 1, 4, 2, 8},
    {SIM_SCHED_CHIMERA, 2, 1, 2, 8, 4},
};

Test(fold, one_replica_stands_for_all)
{
    util_err e;
    prof_model *m = prof_model_load("gpt-mini", &e);
    cr_assert_not_null(m, "%s", e.msg);
    prof_topo *t = test_topo("a100-sxm-80gb", 32);
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++)
        check_pair(m, t, cs[i].s, cs[i].pp, cs[i].v, cs[i].dp, cs[i].tp,
                   cs[i].mb, cs[i].dp);
    prof_topo_free(t);
    /* GeForce servers on PCIe (copies staged through host memory), two
     * of them on InfiniBand; Mixed-pipe with several stages a device */
    prof_hw_opts ho = {.gpus_per_server = 4};
    char *args[] = {"rtx2080ti", "x12"};
    t = prof_topo_from_args(2, args, &ho, &e);
    cr_assert_not_null(t, "%s", e.msg);
    sim_sched more[] = {SIM_SCHED_1F1B, SIM_SCHED_MIXED, SIM_SCHED_MIXED_1F1B};
    for (int i = 0; i < 3; i++)
        check_pair(m, t, more[i], 4, more[i] == SIM_SCHED_1F1B ? 1 : 2, 3, 1,
                   8, 3);
    cr_expect_geq(split_rings, 8, "%d cases reduced in buckets", split_rings);
    prof_topo_free(t);
    prof_model_free(m);
}

/* By default a folded ring's 2(R-1) steps move as one flow, their
 * latencies after it: the time of the steps one by one where the ring
 * shares no link, within a few millionths where its steps share links
 * with other flows, in far fewer events. */
Test(fold, ring_steps_as_one_flow)
{
    util_err e;
    prof_model *m = prof_model_load("gpt-mini", &e);
    cr_assert_not_null(m, "%s", e.msg);
    prof_topo *t = test_topo("a100-sxm-80gb", 32);
    double saved = bucket;
    for (int b = 0; b < 2; b++) {
        bucket = b ? 64 * 1024 : 0;
        for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
            run one[2];
            for (int k = 0; k < 2; k++) {
                ring_steps = !k;
                simulate(m, t, cs[i].s, cs[i].pp, cs[i].v, cs[i].dp,
                         cs[i].tp, cs[i].mb, cs[i].dp, &one[k]);
            }
            ring_steps = 1;
            cr_assert_gt(one[1].fold, 1);
            double rel = (double)one[1].iteration_ns /
                         (double)one[0].iteration_ns - 1;
            cr_expect_leq(fabs(rel), 1e-5, "%s pp %d dp %d tp %d, bucket "
                          "%g: %lld ns steps apart, %lld as one",
                          sim_sched_name(cs[i].s), cs[i].pp, cs[i].dp,
                          cs[i].tp, bucket, (long long)one[0].iteration_ns,
                          (long long)one[1].iteration_ns);
            /* (Chimera's rings have two simulated members, its two
             * pipelines: a task a step either way) */
            if (cs[i].s != SIM_SCHED_CHIMERA)
                cr_expect_lt(one[1].events, one[0].events, "%s pp %d dp "
                             "%d: %lld events", sim_sched_name(cs[i].s),
                             cs[i].pp, cs[i].dp, (long long)one[1].events);
        }
    }
    bucket = saved;
    prof_topo_free(t);
    prof_model_free(m);
}

/* Two servers of two GPUs behind a PCIe switch each, on one network
 * switch; the second server's second GPU link runs at bw1. */
static prof_topo *two_servers(double bw1)
{
    prof_topo *ref = test_topo("a100-sxm-80gb", 8);
    prof_topo *t = prof_topo_new("two servers");
    int ty = prof_topo_add_gpu_type(t, prof_topo_gpu(ref, 0));
    prof_topo_free(ref);
    int nic[2];
    for (int s = 0; s < 2; s++) {
        char name[32];
        snprintf(name, sizeof name, "n%d.sw", s);
        int sw = prof_topo_add_node(t, PROF_NODE_PCIE_SWITCH, name, s);
        snprintf(name, sizeof name, "n%d.nic", s);
        nic[s] = prof_topo_add_node(t, PROF_NODE_NIC, name, s);
        prof_topo_add_link(t, sw, nic[s], PROF_LINK_PCIE, 16e9, 500);
        for (int g = 0; g < 2; g++) {
            snprintf(name, sizeof name, "n%d.gpu%d", s, g);
            int v = prof_topo_add_node(t, PROF_NODE_GPU, name, s);
            t->nodes[v].gpu_type = ty;
            prof_topo_add_link(t, v, sw, PROF_LINK_PCIE,
                               s == 1 && g == 1 ? bw1 : 16e9, 500);
        }
    }
    int ib = prof_topo_add_node(t, PROF_NODE_NET_SWITCH, "ib", -1);
    for (int s = 0; s < 2; s++)
        prof_topo_add_link(t, nic[s], ib, PROF_LINK_NETWORK, 25e9, 1000);
    util_err e;
    cr_assert_eq(prof_topo_finish(t, &e), 0, "%s", e.msg);
    return t;
}

/* Servers that differ are simulated one by one; replicas smaller than a
 * server are folded by the fewest that fill whole servers. */
Test(fold, only_where_symmetric)
{
    prof_topo *same = two_servers(16e9), *odd = two_servers(8e9);
    cr_expect(prof_topo_shift_symmetric(same, 2, 2));
    cr_expect_not(prof_topo_shift_symmetric(odd, 2, 2));
    prof_topo_free(same);
    prof_topo_free(odd);

    util_err e;
    prof_model *m = prof_model_load("gpt-mini", &e);
    cr_assert_not_null(m, "%s", e.msg);
    prof_topo *t = test_topo("a100-sxm-80gb", 32);
    /* replicas of 4 GPUs on servers of 8: two replicas, one server, are
     * simulated for the other three servers' */
    check_pair(m, t, SIM_SCHED_1F1B, 2, 1, 4, 2, 4, 2);
    check_pair(m, t, SIM_SCHED_CHIMERA, 2, 1, 8, 1, 4, 2);
    check_pair(m, t, SIM_SCHED_2BW, 1, 1, 16, 2, 4, 4);
    /* 3 GPUs a replica: 8 replicas fill 3 servers, 32 GPUs hold 10 */
    run a;
    simulate(m, t, SIM_SCHED_1F1B, 3, 1, 10, 1, 4, 1, &a);
    cr_expect_eq(a.fold, 1);
    cr_expect_eq(a.n_devices, 30);
    cr_expect(prof_topo_shift_symmetric(t, 8, 4));
    cr_expect(prof_topo_shift_symmetric(t, 16, 2));
    cr_expect_not(prof_topo_shift_symmetric(t, 4, 8));
    cr_expect_not(prof_topo_shift_symmetric(t, 16, 4)); /* 64 > 32 GPUs */
    prof_topo_free(t);
    /* a last server only partly filled */
    t = test_topo("a100-sxm-80gb", 28);
    cr_expect(prof_topo_shift_symmetric(t, 8, 3));
    cr_expect_not(prof_topo_shift_symmetric(t, 8, 4));
    prof_topo_free(t);
    prof_model_free(m);
}

/* The planner folds where it can; its answers are those of simulating
 * every replica. The free search mixes folded and explicit layouts; with
 * pipeline 2 x tensor 4 every replica is one server, four of them folded. */
Test(fold, planner_answers_unchanged)
{
    util_err e;
    prof_model *m = prof_model_load("gpt-mini", &e);
    cr_assert_not_null(m, "%s", e.msg);
    prof_topo *t = test_topo("a100-sxm-80gb", 32);
    for (int fixed = 0; fixed <= 1; fixed++) {
        plan_result r[2];
        for (int fold = 0; fold <= 1; fold++) {
            plan_opts o;
            plan_opts_init(&o);
            o.batch = 64;
            o.no_fold = !fold;
            if (fixed) {
                o.pp = 2;
                o.tp = 4;
            }
            cr_assert_eq(plan_search(m, t, "gpt-mini", "test", &o, &r[fold], &e),
                         0, "%s", e.msg);
        }
        plan_result *a = &r[0], *b = &r[1];
        cr_assert(a->found && b->found);
        cr_expect_eq(a->best, b->best);
        /* folded, a ring's steps move as one flow (the same time where
         * it shares no link): within a millionth's few where it does */
        for (int s = 0; s < SIM_SCHED_COUNT; s++) {
            cr_expect_eq(a->alt[s].feasible, b->alt[s].feasible, "%s",
                         sim_sched_name((sim_sched)s));
            if (a->alt[s].feasible && b->alt[s].feasible)
                cr_expect_leq(fabs(a->alt[s].iteration_s /
                                   b->alt[s].iteration_s - 1), 1e-5,
                              "%s: %.9g vs %.9g",
                              sim_sched_name((sim_sched)s),
                              a->alt[s].iteration_s, b->alt[s].iteration_s);
        }
        cr_expect_eq(a->simulated, b->simulated);
        cr_expect_gt(b->simulated, 0);
        plan_result_free(a);
        plan_result_free(b);
    }
    prof_topo_free(t);
    prof_model_free(m);
}

/* The size estimate the planner and sim check before simulating: the
 * folding sim_costs_build will do, and tasks within a factor of two of the
 * schedule it builds. */
Test(fold, size_estimate)
{
    util_err e;
    prof_model *m = prof_model_load("gpt-mini", &e);
    cr_assert_not_null(m, "%s", e.msg);
    prof_topo *t = test_topo("a100-sxm-80gb", 32);
    struct { sim_sched s; int pp, dp, tp, fold, group; } cs[] = {
        {SIM_SCHED_1F1B, 2, 4, 4, 4, 1},    /* a replica a server */
        {SIM_SCHED_1F1B, 2, 8, 2, 4, 2},    /* two replicas a server */
        {SIM_SCHED_2BW, 4, 8, 1, 4, 2},
        {SIM_SCHED_CHIMERA, 4, 4, 2, 4, 1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++)
        for (int fold = 0; fold <= 1; fold++) {
            sim_plan p;
            sim_plan_init(&p);
            p.sched = cs[i].s;
            p.pp = cs[i].pp;
            p.dp = cs[i].dp;
            p.tp = cs[i].tp;
            p.mbs = 1;
            p.n_mb = 8;
            p.waves = 1;
            p.n_minibatches = sim_sched_async(p.sched) ? 6 : 1;
            sim_plan_stages(&p, p.pp);
            cr_assert_eq(sim_partition_even(m, p.pp, p.first_op, p.last_op, &e),
                         0, "%s", e.msg);
            sim_sched_opts so = sim_plan_sched_opts(&p);
            sim_sched_map(&so, p.stage_device);
            so = sim_plan_sched_opts(&p);
            sim_cost_opts co = sim_plan_cost_opts(&p);
            co.fold = fold;
            sim_size z = sim_costs_size(t, p.n_stages, p.pp, &co, p.n_mb,
                                        p.n_minibatches);
            sim_costs *c = sim_costs_build(m, t, p.n_stages, p.first_op,
                                           p.last_op, p.stage_device, p.pp,
                                           &co, &e);
            cr_assert_not_null(c, "%s", e.msg);
            int pipes = sim_sched_pipes(p.sched);
            cr_expect_eq(z.fold, fold ? cs[i].fold : 1, "case %zu", i);
            cr_expect_eq(z.fold, c->fold, "case %zu", i);
            cr_expect_eq(z.simulated_replicas, c->replicas, "case %zu", i);
            cr_expect_eq(z.simulated_replicas,
                         fold ? cs[i].group * pipes : cs[i].dp * pipes);
            sim_ir *ir = sim_schedule(&so, c, &e);
            cr_assert_not_null(ir, "%s", e.msg);
            cr_expect(z.tasks >= ir->n_tasks / 2.0 && z.tasks <= ir->n_tasks * 2.0,
                      "case %zu fold %d: estimate %.0f, %d tasks", i, fold,
                      z.tasks, ir->n_tasks);
            sim_ir_free(ir);
            sim_costs_free(c);
            sim_plan_free(&p);
        }
    prof_topo_free(t);
    prof_model_free(m);
}
