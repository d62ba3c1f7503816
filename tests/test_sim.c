/* sim: closed forms on uniform stages with free communication, link
 * sharing, the validator and the deadlock detector. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

typedef struct run {
    sim_costs *c;
    sim_ir *ir;
    sim_engine *e;
    sim_result r;
} run;

/* activation bytes per stage and microbatch for go() */
static double go_act = 1000;

/* Uniform stages (F, B, W per stage), free communication. */
static run go(sim_sched sched, int p, int m, int64_t f, int64_t b, int64_t w,
              int waves, int K)
{
    run x;
    memset(&x, 0, sizeof x);
    sim_sched_opts o = {0};
    o.sched = sched;
    o.pp = p;
    o.n_mb = m;
    o.waves = waves;
    o.n_minibatches = K;
    o.n_stages = sched == SIM_SCHED_WAVE ? 2 * waves * p : p;
    int map[256];
    sim_sched_map(&o, map);
    x.c = sim_costs_uniform(o.n_stages, p, map, f, b, w, 0, go_act);
    util_err e;
    x.ir = sim_schedule(&o, x.c, &e);
    cr_assert_not_null(x.ir, "%s", e.msg);
    x.e = sim_engine_new(x.ir, x.c, NULL);
    cr_assert_eq(sim_engine_run(x.e, &x.r), 0, "%s", x.r.msg);
    return x;
}

static void done(run *x)
{
    sim_engine_free(x->e);
    sim_ir_free(x->ir);
    sim_costs_free(x->c);
}

Test(sim_closed, gpipe_bubble_and_inflight)
{
    const int p = 4, m = 8;
    run x = go(SIM_SCHED_GPIPE, p, m, 100, 150, 50, 1, 1);
    cr_assert_eq(x.r.iteration_ns, (int64_t)(m + p - 1) * 300);
    for (int d = 0; d < p; d++) {
        cr_assert_eq(x.r.dev[d].bubble_ns, (int64_t)(p - 1) * 300);
        cr_assert_float_eq(x.r.dev[d].bubble_fraction,
                           (double)(p - 1) / (m + p - 1), 1e-12);
        cr_assert_eq(x.r.max_inflight[d], m);
    }
    done(&x);
}

Test(sim_closed, onef1b_bubble_and_inflight)
{
    int cases[][2] = {{4, 8}, {4, 4}, {8, 16}, {4, 2}, {3, 7}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int p = cases[k][0], m = cases[k][1];
        run x = go(SIM_SCHED_1F1B, p, m, 100, 150, 50, 1, 1);
        cr_assert_eq(x.r.iteration_ns, (int64_t)(m + p - 1) * 300,
                     "p=%d m=%d: %lld", p, m, (long long)x.r.iteration_ns);
        for (int d = 0; d < p; d++) {
            cr_assert_eq(x.r.dev[d].bubble_ns, (int64_t)(p - 1) * 300);
            cr_assert_float_eq(x.r.dev[d].bubble_fraction,
                               (double)(p - 1) / (m + p - 1), 1e-12);
            int want = p - d < m ? p - d : m;
            cr_assert_eq(x.r.max_inflight[d], want, "p=%d m=%d stage %d: %d",
                         p, m, d, x.r.max_inflight[d]);
        }
        done(&x);
    }
}

Test(sim_closed, twobw_two_versions_no_flush)
{
    const int p = 4, m = 8, K = 4;
    run x = go(SIM_SCHED_2BW, p, m, 100, 150, 50, 1, K);
    /* steady state: every device busy all the time, no flush */
    cr_assert_eq(x.r.iteration_ns, (int64_t)m * 300, "%lld",
                 (long long)x.r.iteration_ns);
    for (int s = 0; s < p; s++) {
        /* double buffering: every stage keeps the version its minibatch
         * runs on (one update behind) and the newest */
        cr_assert_eq(x.r.max_versions[s], 2,
                     "stage %d: %d versions", s, x.r.max_versions[s]);
        cr_assert_eq(x.r.dev[s].bubble_ns, 0, "stage %d: bubble %lld", s,
                     (long long)x.r.dev[s].bubble_ns);
    }
    /* one optimizer step per stage per minibatch, placed mid-stream;
     * minibatch k runs on version k-1 on every stage (0 for the first) */
    int opts = 0;
    for (int i = 0; i < x.ir->n_tasks; i++) {
        const sim_task *t = &x.ir->tasks[i];
        opts += t->kind == SIM_OPT;
        if (t->kind <= SIM_RECOMP)
            cr_assert_eq(t->version, t->minibatch ? t->minibatch - 1 : 0,
                         "task %d: version %d in minibatch %d", i, t->version,
                         t->minibatch);
    }
    cr_assert_eq(opts, p * K);
    done(&x);
}

Test(sim_closed, onef1b_sync_one_version)
{
    run x = go(SIM_SCHED_1F1B, 4, 8, 100, 150, 50, 1, 1);
    for (int s = 0; s < 4; s++) cr_assert_eq(x.r.max_versions[s], 1);
    done(&x);
}

Test(sim_closed, wave_beats_1f1b)
{
    int cases[][2] = {{4, 8}, {4, 4}, {8, 8}, {8, 16}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int p = cases[k][0], m = cases[k][1];
        run a = go(SIM_SCHED_1F1B, p, m, 200, 300, 100, 1, 1);
        for (int W = 1; W <= 2; W++) {
            /* same model cut into 2Wp chunks */
            go_act = 1000.0 / (2 * W);
            run b = go(SIM_SCHED_WAVE, p, m, 200 / (2 * W), 300 / (2 * W),
                       100 / (2 * W), W, 1);
            go_act = 1000;
            for (int d = 0; d < p; d++)
                cr_assert_lt(b.r.dev[d].bubble_fraction,
                             a.r.dev[d].bubble_fraction,
                             "p=%d m=%d W=%d dev %d: wave %.4f vs 1f1b %.4f",
                             p, m, W, d, b.r.dev[d].bubble_fraction,
                             a.r.dev[d].bubble_fraction);
            cr_assert_lt(b.r.iteration_ns, a.r.iteration_ns);
            /* activation memory stays near 1F1B's */
            for (int d = 0; d < p; d++)
                cr_assert_leq(b.r.dev[d].peak_bytes,
                              1.2 * a.r.dev[0].peak_bytes,
                              "p=%d m=%d W=%d dev %d: %.0f vs %.0f", p, m, W,
                              d, b.r.dev[d].peak_bytes, a.r.dev[0].peak_bytes);
            done(&b);
        }
        done(&a);
    }
}

Test(sim_closed, mixed_variants_run)
{
    /* 8 stages on 4 devices, non-adjacent: s -> s % 4 */
    for (int v = 0; v < 3; v++) {
        sim_sched sched = v == 0 ? SIM_SCHED_MIXED
                        : v == 1 ? SIM_SCHED_MIXED_1F1B : SIM_SCHED_MIXED_GPIPE;
        sim_sched_opts o = {.sched = sched, .pp = 4, .n_stages = 8,
                            .n_mb = 8, .n_minibatches = 3};
        int map[8];
        sim_sched_map(&o, map);
        sim_costs *c = sim_costs_uniform(8, 4, map, 50, 75, 25, 0, 10);
        util_err e;
        sim_ir *ir = sim_schedule(&o, c, &e);
        cr_assert_not_null(ir, "%s", e.msg);
        sim_engine *en = sim_engine_new(ir, c, NULL);
        sim_result r;
        cr_assert_eq(sim_engine_run(en, &r), 0, "%s", r.msg);
        /* each device does 2 stages x (F+B+W) per microbatch */
        int64_t work = 8 * 2 * 150;
        cr_assert_geq(r.iteration_ns, work);
        if (sched == SIM_SCHED_MIXED) {
            cr_assert_eq(ir->n_minibatches, 3);
            /* asynchronous: steady state close to the work itself */
            cr_assert_lt(r.iteration_ns, work * 5 / 4, "%lld",
                         (long long)r.iteration_ns);
        }
        sim_engine_free(en);
        sim_ir_free(ir);
        sim_costs_free(c);
    }
}

/* The schedule generator refuses work that would take gigabytes before
 * making a task (every caller: sim, plan, exec), with the estimate. */
Test(sim_closed, schedules_too_large_are_refused_with_the_estimate)
{
    sim_sched_opts o = {.sched = SIM_SCHED_2BW, .pp = 4, .n_stages = 4,
                        .n_mb = 100000, .n_minibatches = 5};
    int map[4];
    sim_sched_map(&o, map);
    sim_costs *c = sim_costs_uniform(4, 4, map, 50, 75, 25, 0, 10);
    util_err e;
    sim_ir *ir = sim_schedule(&o, c, &e);
    cr_assert_null(ir);
    cr_assert_eq(e.code, UTIL_EXIT_USAGE);
    cr_assert(strstr(e.msg, "5 minibatch(es) x 100000 microbatches x 4 "
                     "stages = 2000000 stage-microbatches to simulate, "
                     "about 1.91 GiB"), "%s", e.msg);
    sim_costs_free(c);
}

Test(sim_closed, recompute_time_and_memory)
{
    sim_sched_opts o = {.sched = SIM_SCHED_GPIPE, .pp = 2, .n_stages = 2,
                        .n_mb = 4, .recompute = 1};
    int map[2] = {0, 1};
    sim_costs *c = sim_costs_uniform(2, 2, map, 100, 150, 50, 10, 1000);
    util_err e;
    sim_ir *ir = sim_schedule(&o, c, &e);
    cr_assert_not_null(ir, "%s", e.msg);
    sim_engine *en = sim_engine_new(ir, c, NULL);
    sim_result r;
    cr_assert_eq(sim_engine_run(en, &r), 0);
    /* stage 1 keeps 3 inputs of 10 bytes plus one full activation (which
     * includes its own input) */
    cr_assert_eq(r.dev[1].peak_bytes, 3 * 10 + 1000);
    cr_assert_eq(r.dev[0].recompute_ns, 4 * 100);
    sim_engine_free(en);
    sim_ir_free(ir);
    /* without recomputation: all four activations */
    o.recompute = 0;
    ir = sim_schedule(&o, c, &e);
    en = sim_engine_new(ir, c, NULL);
    cr_assert_eq(sim_engine_run(en, &r), 0);
    cr_assert_eq(r.dev[1].peak_bytes, 4 * 1000);
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(c);
}

/* ---------------------------------------------------------------------
 * Link sharing on a hand-built server: gpu0, gpu1, gpu2 on one switch. */

static prof_topo *star(double bw)
{
    prof_topo *t = prof_topo_new("star");
    prof_gpu g = {0};
    snprintf(g.name, sizeof g.name, "testgpu");
    g.mem_bytes = 1e12;
    int ty = prof_topo_add_gpu_type(t, &g);
    int sw = prof_topo_add_node(t, PROF_NODE_PCIE_SWITCH, "sw", 0);
    for (int i = 0; i < 8; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "gpu%d", i);
        int n = prof_topo_add_node(t, PROF_NODE_GPU, nm, 0);
        t->nodes[n].gpu_type = ty;
        prof_topo_add_link(t, n, sw, PROF_LINK_PCIE, bw, 0); /* link i */
    }
    util_err e;
    cr_assert_eq(prof_topo_finish(t, &e), 0, "%s", e.msg);
    return t;
}

static void star_free(prof_topo *t) { prof_topo_free(t); }

/* routes are cached by the topology: change latencies on a fresh one */
static prof_topo *star_lat(double bw, double lat0, double lat2)
{
    prof_topo *t = star(bw);
    t->links[0].latency_ns = lat0;
    t->links[2].latency_ns = lat2;
    return t;
}

/* n transfers of `bytes` from gpu src[i] to gpu 2, all ready at t=0 */
static int64_t transfers(prof_topo *t, int n, const int *src, double bytes)
{
    int map[3] = {0, 1, 2};
    sim_costs *c = sim_costs_uniform(3, 3, map, 0, 0, 0, 0, 0);
    c->topo = t;
    sim_ir *ir = sim_ir_new("xfer", 3, 3, map, 1, 1);
    for (int i = 0; i < n; i++) {
        sim_task x = {.kind = SIM_SEND, .stream = SIM_STREAM_SEND,
                      .device = src[i], .stage = src[i], .stage2 = 2,
                      .mb = 0, .peer = -1, .bytes = bytes};
        int s = sim_ir_add(ir, &x);
        x.kind = SIM_RECV;
        x.stream = SIM_STREAM_RECV;
        x.device = 2;
        int r = sim_ir_add(ir, &x);
        ir->tasks[s].peer = r;
        ir->tasks[r].peer = s;
        sim_ir_dep(ir, r, s);
    }
    sim_ir_finish(ir);
    sim_engine *e = sim_engine_new(ir, c, NULL);
    sim_result res;
    cr_assert_eq(sim_engine_run(e, &res), 0, "%s", res.msg);
    int64_t span = res.makespan_ns;
    sim_engine_free(e);
    sim_ir_free(ir);
    sim_costs_free(c);
    return span;
}

Test(sim_link, sharing_doubles_time)
{
    prof_topo *t = star(1e9);
    int one[1] = {0}, two[2] = {0, 1};
    int64_t a = transfers(t, 1, one, 1e9);
    int64_t b = transfers(t, 2, two, 1e9);
    cr_assert_eq(a, 1000000000);
    cr_assert_eq(b, 2 * a);
    /* two sends from the same device serialise on its send stream */
    int same[2] = {0, 0};
    cr_assert_eq(transfers(t, 2, same, 1e9), 2 * a);
    star_free(t);
    /* latency is added once per route */
    t = star_lat(1e9, 1000, 500);
    cr_assert_eq(transfers(t, 1, one, 1e9), a + 1500);
    star_free(t);
}

Test(sim_link, maxmin_progressive_filling)
{
    /* links: 0 cap 10, 1 cap 4. flow A on {0}, B on {0,1}, C on {1} */
    double cap[2] = {10, 4}, rate[3];
    int ra[1] = {0}, rb[2] = {0, 1}, rc[1] = {1};
    const int *routes[3] = {ra, rb, rc};
    int len[3] = {1, 2, 1};
    double rem[2];
    int cnt[2] = {0, 0}, touched[2];
    uint8_t frozen[3];
    sim_maxmin_scratch w = {rem, cnt, touched, frozen};
    sim_maxmin(3, routes, len, cap, rate, &w);
    cr_assert_float_eq(rate[1], 2.0, 1e-12);
    cr_assert_float_eq(rate[2], 2.0, 1e-12);
    cr_assert_float_eq(rate[0], 8.0, 1e-12);
}

/* ---------------------------------------------------------------------
 * Validator and deadlock detector */

Test(sim_validate, deadlock_names_stuck_tasks)
{
    int map[2] = {0, 1};
    sim_costs *c = sim_costs_uniform(2, 2, map, 10, 10, 10, 0, 0);
    sim_ir *ir = sim_ir_new("bad", 2, 2, map, 2, 1);
    /* dev 0: F0 BW0 F1 BW1; dev 1: F1 F0 BW0 BW1 -> F(1,1) needs F(0,1)
     * behind BW(0,0), which needs BW(1,0) behind F(1,1) */
    sim_ir_compute(ir, SIM_F, 0, 0, 0, 0);
    sim_ir_compute(ir, SIM_BW, 0, 0, 0, 0);
    sim_ir_compute(ir, SIM_F, 0, 1, 0, 0);
    sim_ir_compute(ir, SIM_BW, 0, 1, 0, 0);
    sim_ir_compute(ir, SIM_F, 1, 1, 0, 0);
    sim_ir_compute(ir, SIM_F, 1, 0, 0, 0);
    sim_ir_compute(ir, SIM_BW, 1, 0, 0, 0);
    sim_ir_compute(ir, SIM_BW, 1, 1, 0, 0);
    util_err e;
    cr_assert_eq(sim_lower(ir, c, &e), 0, "%s", e.msg);
    sim_ir_finish(ir);
    cr_assert_eq(sim_validate(ir, &e), -1);
    cr_assert(strstr(e.msg, "deadlock"), "%s", e.msg);
    cr_assert(strstr(e.msg, "dev 1 F stage 1 mb 1"), "%s", e.msg);
    cr_assert(strstr(e.msg, "dev 0 BW stage 0 mb 0"), "%s", e.msg);
    /* the engine finds it too */
    sim_engine *en = sim_engine_new(ir, c, NULL);
    sim_result r;
    cr_assert_eq(sim_engine_run(en, &r), -1);
    cr_assert(strstr(r.msg, "deadlock"), "%s", r.msg);
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(c);
}

Test(sim_validate, counts_and_order)
{
    int map[2] = {0, 1};
    sim_costs *c = sim_costs_uniform(2, 2, map, 10, 10, 10, 0, 0);
    util_err e;
    /* missing F */
    sim_ir *ir = sim_ir_new("bad", 2, 2, map, 1, 1);
    sim_ir_compute(ir, SIM_F, 0, 0, 0, 0);
    sim_ir_compute(ir, SIM_BW, 0, 0, 0, 0);
    sim_ir_compute(ir, SIM_BW, 1, 0, 0, 0);
    cr_assert_eq(sim_lower(ir, c, &e), -1);
    cr_assert(strstr(e.msg, "stage 1 has no F for microbatch 0"), "%s", e.msg);
    sim_ir_free(ir);
    /* backward before forward on one device */
    ir = sim_ir_new("bad", 2, 2, map, 1, 1);
    sim_ir_compute(ir, SIM_F, 0, 0, 0, 0);
    sim_ir_compute(ir, SIM_BW, 0, 0, 0, 0);
    sim_ir_compute(ir, SIM_BW, 1, 0, 0, 0);
    sim_ir_compute(ir, SIM_F, 1, 0, 0, 0);
    cr_assert_eq(sim_lower(ir, c, &e), 0, "%s", e.msg);
    sim_ir_finish(ir);
    cr_assert_eq(sim_validate(ir, &e), -1);
    cr_assert(strstr(e.msg, "backward before F"), "%s", e.msg);
    sim_ir_free(ir);
    /* W without B */
    ir = sim_ir_new("bad", 2, 2, map, 1, 1);
    sim_ir_compute(ir, SIM_F, 0, 0, 0, 0);
    sim_ir_compute(ir, SIM_BW, 0, 0, 0, 0);
    sim_ir_compute(ir, SIM_F, 1, 0, 0, 0);
    sim_ir_compute(ir, SIM_W, 1, 0, 0, 0);
    cr_assert_eq(sim_lower(ir, c, &e), -1);
    cr_assert(strstr(e.msg, "one BW or one B and one W"), "%s", e.msg);
    sim_ir_free(ir);
    sim_costs_free(c);
}

Test(sim_validate, schedule_checks)
{
    util_err e;
    sim_sched_opts o = {.sched = SIM_SCHED_2BW, .pp = 8, .n_stages = 8,
                        .n_mb = 4, .n_minibatches = 4};
    cr_assert_eq(sim_sched_check(&o, &e), -1);
    cr_assert(strstr(e.msg, "cannot take 4 microbatches"), "%s", e.msg);
    o.sched = SIM_SCHED_1F1B;
    o.n_stages = 16;
    cr_assert_eq(sim_sched_check(&o, &e), -1);
    cr_assert(strstr(e.msg, "one stage per device"), "%s", e.msg);
    o.sched = SIM_SCHED_WAVE;
    o.waves = 1;
    cr_assert_eq(sim_sched_check(&o, &e), 0, "%s", e.msg);
    o.waves = 2;
    cr_assert_eq(sim_sched_check(&o, &e), -1);
    cr_assert(strstr(e.msg, "2*W*p = 32"), "%s", e.msg);
}

Test(sim_closed, split_bw_shortens_critical_path)
{
    sim_sched_opts o = {.sched = SIM_SCHED_1F1B, .pp = 4, .n_stages = 4,
                        .n_mb = 8, .split_bw = 1};
    int map[4] = {0, 1, 2, 3};
    sim_costs *c = sim_costs_uniform(4, 4, map, 100, 150, 50, 0, 100);
    util_err e;
    sim_ir *ir = sim_schedule(&o, c, &e);
    cr_assert_not_null(ir, "%s", e.msg);
    sim_engine *en = sim_engine_new(ir, c, NULL);
    sim_result r;
    cr_assert_eq(sim_engine_run(en, &r), 0);
    /* the gradient leaves after B, so W is off the critical path:
     * m(F+B+W) + (p-1)(F+B) */
    cr_assert_eq(r.iteration_ns, 8 * 300 + 3 * 250);
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(c);
}

Test(sim_link, breakdown_adds_up_with_communication)
{
    prof_topo *t = star(1e9);
    int map[3] = {0, 1, 2};
    for (int v = 0; v < 4; v++) {
        sim_sched sc = v == 0 ? SIM_SCHED_GPIPE : v == 1 ? SIM_SCHED_1F1B
                     : v == 2 ? SIM_SCHED_MIXED_1F1B : SIM_SCHED_2BW;
        sim_sched_opts o = {.sched = sc, .pp = 3, .n_stages = 3, .n_mb = 4,
                            .n_minibatches = 4, .recompute = v == 0};
        /* 0.5 MB per microbatch over 1 GB/s links: 0.5 ms per hop each way */
        sim_costs *c = sim_costs_uniform(3, 3, map, 1000000, 1500000, 500000,
                                         5e5, 1e6);
        c->topo = t;
        for (int s = 0; s < 3; s++) c->stage[s].opt_ns = 100000;
        util_err e;
        sim_ir *ir = sim_schedule(&o, c, &e);
        cr_assert_not_null(ir, "%s", e.msg);
        sim_engine *en = sim_engine_new(ir, c, NULL);
        sim_result r;
        cr_assert_eq(sim_engine_run(en, &r), 0, "%s", r.msg);
        int64_t exposed = 0;
        for (int d = 0; d < 3; d++) {
            const sim_dev_stats *s = &r.dev[d];
            int64_t sum = s->compute_ns + s->recompute_ns + s->opt_ns +
                          s->comm_exposed_ns + s->bubble_ns;
            if (v < 3) /* flush schedules: the window is the iteration */
                cr_assert_eq(sum, r.iteration_ns, "v %d dev %d: %lld vs %lld",
                             v, d, (long long)sum, (long long)r.iteration_ns);
            exposed += s->comm_exposed_ns;
        }
        cr_assert_gt(exposed, 0, "schedule %d hides all communication?", v);
        /* slower than the same schedule with free communication */
        c->topo = NULL;
        sim_engine *fr = sim_engine_new(ir, c, NULL);
        sim_result rf;
        cr_assert_eq(sim_engine_run(fr, &rf), 0);
        cr_assert_gt(r.iteration_ns, rf.iteration_ns);
        sim_engine_free(fr);
        sim_engine_free(en);
        sim_ir_free(ir);
        sim_costs_free(c);
    }
    star_free(t);
}

Test(sim_link, swap_to_host_memory)
{
    util_err e;
    prof_topo *t = prof_topo_template("rtx2080ti", 2, NULL, &e);
    cr_assert_not_null(t, "%s", e.msg);
    int map[1] = {0};
    sim_costs *c = sim_costs_uniform(1, 1, map, 0, 0, 0, 0, 0);
    c->topo = t;
    sim_ir *ir = sim_ir_new("swap", 1, 1, map, 1, 1);
    sim_task x = {.kind = SIM_SWAP_OUT, .stream = SIM_STREAM_COPY_OUT,
                  .device = 0, .stage = 0, .stage2 = -1, .mb = 0, .peer = -1,
                  .bytes = 1e9};
    int a = sim_ir_add(ir, &x);
    x.kind = SIM_SWAP_IN;
    x.stream = SIM_STREAM_COPY_IN;
    int b = sim_ir_add(ir, &x);
    sim_ir_dep(ir, b, a);
    sim_ir_finish(ir);
    sim_engine *en = sim_engine_new(ir, c, NULL);
    sim_result r;
    cr_assert_eq(sim_engine_run(en, &r), 0, "%s", r.msg);
    /* out, then in, each at the route's bottleneck bandwidth */
    int n;
    const int *rt = prof_topo_route(t, t->gpu_node[0],
                                    prof_topo_gpu_host_mem(t, 0), &n);
    cr_assert_gt(n, 0);
    double one = 1e9 / prof_route_bw(t, rt, n) * 1e9 +
                 prof_route_latency_ns(t, rt, n);
    cr_assert_float_eq((double)r.makespan_ns, 2 * one, 4.0);
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(c);
    prof_topo_free(t);
}

/* ---------------------------------------------------------------------
 * Properties over many random configurations: every task starts after its
 * dependencies end, tasks of one serial stream never overlap and keep
 * their list order, receives run exactly with their send's transfer, and
 * every byte allocated is freed by the end. */

static uint64_t rng = 88172645463325252ull;
static int rnd(int n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

Test(sim_props, random_configurations)
{
    prof_topo *t = star(2e9);
    for (int it = 0; it < 300; it++) {
        sim_sched_opts o = {0};
        /* the offload schedules price tiers (tests/test_sim_offload.c) */
        do o.sched = (sim_sched)rnd(SIM_SCHED_FILE);
        while (sim_sched_offload(o.sched));
        o.pp = 1 + rnd(3);
        o.n_mb = 1 + rnd(9);
        o.dp = 1 + rnd(2);
        o.chunks = 1 + rnd(2);
        if (o.sched == SIM_SCHED_CHIMERA) {
            o.pp = 2;
            o.n_mb = 2 * (1 + rnd(4));
        }
        if (o.sched == SIM_SCHED_DUALPIPEV && o.n_mb < 2 * o.pp)
            o.n_mb = 2 * o.pp + rnd(3);
        if (o.sched == SIM_SCHED_INTERLEAVED) {
            int rounds = o.n_mb / o.pp > 1 ? o.n_mb / o.pp : 1;
            if (o.n_mb % rounds) o.n_mb = o.pp * (1 + rnd(3));
        }
        o.recompute = rnd(2);
        o.waves = 1 + rnd(2);
        o.n_minibatches = 3 + rnd(2);
        o.split_bw = o.sched != SIM_SCHED_2BW && rnd(2);
        o.n_stages = o.sched == SIM_SCHED_WAVE ? 2 * o.waves * o.pp
                   : (o.sched == SIM_SCHED_MIXED || o.sched == SIM_SCHED_MIXED_1F1B ||
                      o.sched == SIM_SCHED_MIXED_GPIPE) ? o.pp + rnd(4)
                   : o.sched == SIM_SCHED_ZBV || o.sched == SIM_SCHED_DUALPIPEV
                   ? 2 * o.pp
                   : o.sched == SIM_SCHED_INTERLEAVED ? o.chunks * o.pp : o.pp;
        if (o.sched == SIM_SCHED_2BW && o.n_mb < o.pp) o.n_mb = o.pp;
        int map[64];
        sim_sched_map(&o, map);
        if (o.sched == SIM_SCHED_MIXED || o.sched == SIM_SCHED_MIXED_1F1B ||
            o.sched == SIM_SCHED_MIXED_GPIPE)
            for (int s = o.pp; s < o.n_stages; s++) map[s] = rnd(o.pp);
        sim_costs *c = sim_costs_uniform(o.n_stages, o.pp, map, 1, 1, 1, 0, 0);
        for (int s = 0; s < o.n_stages; s++) {
            sim_stage_cost *sc = &c->stage[s];
            sc->f_ns = 100 + rnd(900);
            sc->b_ns = sc->bs_ns = 100 + rnd(1500);
            sc->w_ns = sc->ws_ns = rnd(600);
            sc->opt_ns = rnd(200);
            sc->act_bytes = 1000 + rnd(5000);
            sc->wkeep_bytes = rnd((int)sc->act_bytes);
            sc->input_bytes = rnd(1000);
            sc->weight_bytes = 100 + rnd(1000);
            sc->grad_bytes = sc->weight_bytes;
            for (int q = s + 1; q < o.n_stages; q++)
                c->xfer_bytes[s * o.n_stages + q] =
                    q == s + 1 ? 1 + rnd(4000) : (rnd(4) ? 0 : rnd(3000));
        }
        sim_costs_replicate(c, o.dp, sim_sched_pipes(o.sched));
        if (rnd(2)) c->topo = t;
        util_err e;
        sim_ir *ir = sim_schedule(&o, c, &e);
        cr_assert_not_null(ir, "it %d %s: %s", it, sim_sched_name(o.sched), e.msg);
        sim_run_opts ro = {.record = 1};
        sim_engine *en = sim_engine_new(ir, c, &ro);
        sim_result r;
        cr_assert_eq(sim_engine_run(en, &r), 0, "it %d: %s", it, r.msg);
        for (int i = 0; i < ir->n_tasks; i++) {
            const sim_task *x = &ir->tasks[i];
            cr_assert_geq(r.start_ns[i], 0);
            cr_assert_geq(r.end_ns[i], r.start_ns[i]);
            for (int k = 0; k < x->n_dep; k++) {
                int d = ir->deps[x->dep_off + k];
                if (x->kind == SIM_RECV && d == x->peer)
                    cr_assert_eq(r.start_ns[i], r.start_ns[d]);
                else
                    cr_assert_geq(r.start_ns[i], r.end_ns[d], "it %d task %d",
                                  it, i);
            }
            if (x->kind == SIM_RECV) cr_assert_eq(r.end_ns[i], r.end_ns[x->peer]);
        }
        for (int d = 0; d < ir->n_devices; d++)
            for (int s = 0; s < SIM_STREAM_COUNT; s++) {
                if (s == SIM_STREAM_RECV) continue;
                int64_t prev = 0;
                for (int j = ir->dev_off[d]; j < ir->dev_off[d + 1]; j++) {
                    int id = ir->seq[j];
                    if (ir->tasks[id].stream != s) continue;
                    cr_assert_geq(r.start_ns[id], prev, "it %d dev %d", it, d);
                    prev = r.end_ns[id];
                }
            }
        double last[8] = {0};
        int seen[8] = {0};
        for (int i = 0; i < r.n_mem; i++) {
            last[r.mem[i].device] = r.mem[i].bytes;
            seen[r.mem[i].device] = 1;
        }
        for (int d = 0; d < ir->n_devices; d++) {
            if (seen[d])
                cr_assert_float_eq(last[d], r.dev[d].static_bytes, 1e-6,
                                   "it %d dev %d: %f left, static %f", it, d,
                                   last[d], r.dev[d].static_bytes);
            cr_assert_geq(r.dev[d].bubble_ns, 0);
        }
        sim_engine_free(en);
        sim_ir_free(ir);
        sim_costs_free(c);
    }
    star_free(t);
}

/* A ring collective against its closed form: an all-reduce of B bytes over
 * n ranks is 2(n-1) steps of B/n, each after the step latency, plus the
 * base latency once; a reduce-scatter or all-gather (n-1 steps) half of
 * the steps. */
Test(sim_closed, ring_collective_time)
{
    double B = 64e6, bw = 240e9, lat = 3400, base = 8400;
    for (int n = 2; n <= 16; n *= 2) {
        double ar = base + 2.0 * (n - 1) * (lat + B / n / bw * 1e9);
        cr_expect_float_eq(sim_ring_coll_ns(base, lat, bw, n, B, 2 * (n - 1)),
                           (double)llround(ar), 0.5, "n %d", n);
        double rs = base + (n - 1) * (lat + B / n / bw * 1e9);
        cr_expect_float_eq(sim_ring_coll_ns(base, lat, bw, n, B, n - 1),
                           (double)llround(rs), 0.5, "n %d", n);
    }
    /* nothing to move, or one rank: free */
    cr_expect_eq(sim_ring_coll_ns(base, lat, bw, 1, B, 0), 0);
    cr_expect_eq(sim_ring_coll_ns(base, lat, bw, 8, 0, 14), 0);
}
