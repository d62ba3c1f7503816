/* Simulator speed: events per second and simulations per second, engine
 * runs alone (the planner's inner loop: schedule built once, re-timed)
 * and whole simulations (generate, lower, validate, run). Cases: a
 * synthetic 8-stage pipeline on a PCIe-switch tree (transfers share
 * links), t5-3b on 8x rtx2080ti with 1F1B and 32 microbatches, and
 * gpt3-175b on 1024 A100s (128 DGX-like nodes): t=8, p=16, d=8,
 * interleaved with 2 chunks, 64 microbatches of 1 per replica (global
 * batch 512), data-parallel rings and pipeline transfers sharing the
 * InfiniBand links. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim/sim.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* 8 GPUs, pairs under 4 switches, switches under one root */
static prof_topo *tree8(void)
{
    prof_topo *t = prof_topo_new("tree8");
    prof_gpu g = {0};
    snprintf(g.name, sizeof g.name, "benchgpu");
    g.mem_bytes = 11e9;
    int ty = prof_topo_add_gpu_type(t, &g);
    int root = prof_topo_add_node(t, PROF_NODE_CPU, "root", 0);
    for (int s = 0; s < 4; s++) {
        char nm[16];
        snprintf(nm, sizeof nm, "sw%d", s);
        int sw = prof_topo_add_node(t, PROF_NODE_PCIE_SWITCH, nm, 0);
        prof_topo_add_link(t, sw, root, PROF_LINK_PCIE, 12e9, 1000);
        for (int k = 0; k < 2; k++) {
            snprintf(nm, sizeof nm, "gpu%d", 2 * s + k);
            int n = prof_topo_add_node(t, PROF_NODE_GPU, nm, 0);
            t->nodes[n].gpu_type = ty;
            prof_topo_add_link(t, n, sw, PROF_LINK_PCIE, 12e9, 1000);
        }
    }
    util_err e;
    if (prof_topo_finish(t, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
    return t;
}

static void tree_free(prof_topo *t) { prof_topo_free(t); }

/* Prints the case's row; returns its million events per second. */
static double bench(const char *name, const sim_sched_opts *o, sim_costs *c)
{
    util_err e;
    sim_ir *ir = sim_schedule(o, c, &e);
    if (!ir) {
        fprintf(stderr, "%s: %s\n", name, e.msg);
        exit(1);
    }
    sim_engine *en = sim_engine_new(ir, c, NULL);
    sim_result r;
    sim_engine_run(en, &r); /* warm */
    int reps = 0;
    long long ev = 0;
    double t0 = now_s(), t;
    do {
        sim_engine_run(en, &r);
        ev += r.events;
        reps++;
        t = now_s() - t0;
    } while (t < 0.5);
    double mev = ev / t / 1e6;
    printf("%-34s %7d %9lld %12.2f %12.0f %10.1f", name, ir->n_tasks,
           (long long)r.events, mev, reps / t, t / reps * 1e6);
    sim_engine_free(en);
    sim_ir_free(ir);
    /* whole simulations */
    reps = 0;
    t0 = now_s();
    do {
        sim_ir *x = sim_schedule(o, c, &e);
        sim_engine *y = sim_engine_new(x, c, NULL);
        sim_engine_run(y, &r);
        sim_engine_free(y);
        sim_ir_free(x);
        reps++;
        t = now_s() - t0;
    } while (t < 0.5);
    printf(" %12.0f\n", reps / t);
    return mev;
}

static void header(void)
{
    printf("%-34s %7s %9s %12s %12s %10s %12s\n", "case", "tasks", "events",
           "Mevents/s", "runs/s", "us/run", "full sims/s");
}

int main(void)
{
    header();
    prof_topo *t = tree8();
    for (int v = 0; v < 3; v++) {
        sim_sched_opts o = {.pp = 8, .n_stages = 8, .n_mb = 32,
                            .n_minibatches = 4, .waves = 1};
        const char *nm;
        if (v == 0) { o.sched = SIM_SCHED_1F1B; nm = "synthetic 8 stages 1f1b m=32"; }
        else if (v == 1) { o.sched = SIM_SCHED_2BW; nm = "synthetic 8 stages 2bw m=32 x4"; }
        else { o.sched = SIM_SCHED_WAVE; o.n_stages = 16; nm = "synthetic 16 chunks wave m=32"; }
        int map[16];
        sim_sched_map(&o, map);
        sim_costs *c = sim_costs_uniform(o.n_stages, 8, map, 2000000, 2500000,
                                         1500000, 8e6, 1e8);
        c->topo = t;
        bench(nm, &o, c);
        sim_costs_free(c);
    }
    tree_free(t);
    /* the case: t5-3b on 8x rtx2080ti, 1F1B, 32 microbatches */
    util_err e;
    char *hw[] = {(char *)"rtx2080ti", (char *)"x8"};
    prof_topo *tp = prof_topo_from_args(2, hw, NULL, &e);
    prof_model *m = tp ? prof_model_load("t5-3b", &e) : NULL;
    if (!tp || !m) {
        fprintf(stderr, "bench_sim: %s\n", e.msg);
        return 1;
    }
    const char *names[] = {"t5-3b 8x2080ti 1f1b m=32 mbs=4",
                           "t5-3b 8x2080ti gpipe m=32 recompute",
                           "t5-3b 8x2080ti wave W=1 m=32"};
    sim_sched sc[] = {SIM_SCHED_1F1B, SIM_SCHED_GPIPE, SIM_SCHED_WAVE};
    for (int v = 0; v < 3; v++) {
        sim_sched_opts o = {.sched = sc[v], .pp = 8, .n_stages = 8, .n_mb = 32,
                            .waves = 1, .recompute = v == 1};
        if (sc[v] == SIM_SCHED_WAVE) o.n_stages = 16;
        int first[16], last[16], map[16];
        if (sim_partition_balanced(m, prof_topo_gpu(tp, 0), 4, o.n_stages,
                                   first, last, &e)) {
            fprintf(stderr, "bench_sim: %s\n", e.msg);
            return 1;
        }
        sim_sched_map(&o, map);
        sim_cost_opts co = {.mbs = 4};
        sim_costs *c = sim_costs_build(m, tp, o.n_stages, first, last, map, 8,
                                       &co, &e);
        if (!c) {
            fprintf(stderr, "bench_sim: %s\n", e.msg);
            return 1;
        }
        double mev = bench(names[v], &o, c);
        if (v == 0)
            printf("  the issue's case: %.1f M events/s (goal 5)\n", mev);
        sim_costs_free(c);
    }
    /* 1024 GPUs: gpt3-175b, tp 8 inside each node, pp 16, dp 8 */
    {
        char *hw2[] = {(char *)"a100-sxm-80gb", (char *)"x1024"};
        prof_topo *tb = prof_topo_from_args(2, hw2, NULL, &e);
        prof_model *mb = tb ? prof_model_load("gpt3-175b", &e) : NULL;
        if (!tb || !mb) {
            fprintf(stderr, "bench_sim: %s\n", e.msg);
            return 1;
        }
        sim_sched_opts o2 = {.sched = SIM_SCHED_INTERLEAVED, .pp = 16,
                             .n_stages = 32, .chunks = 2, .n_mb = 64,
                             .dp = 8, .waves = 1};
        int f2[32], l2[32], m2[32];
        double t0 = now_s();
        if (sim_partition_balanced(mb, prof_topo_gpu(tb, 0), 1, 32, f2, l2,
                                   &e)) {
            fprintf(stderr, "bench_sim: %s\n", e.msg);
            return 1;
        }
        sim_sched_map(&o2, m2);
        sim_cost_opts co2 = {.mbs = 1, .dp = 8, .tp = 8, .pipes = 1};
        sim_costs *c2 = sim_costs_build(mb, tb, 32, f2, l2, m2, 16, &co2, &e);
        if (!c2) {
            fprintf(stderr, "bench_sim: %s\n", e.msg);
            return 1;
        }
        double tc = now_s() - t0;
        bench("gpt3-175b 1024xA100 t8 p16 d8 v2", &o2, c2);
        printf("  (partition and costs: %.3f s, once per plan)\n", tc);
        sim_costs_free(c2);
        prof_model_free(mb);
        prof_topo_free(tb);
    }
    /* what the planner pays per candidate partition: costs from the model */
    int first[8], last[8], map[8];
    sim_sched_opts o = {.sched = SIM_SCHED_1F1B, .pp = 8, .n_stages = 8};
    sim_partition_balanced(m, prof_topo_gpu(tp, 0), 4, 8, first, last, &e);
    sim_sched_map(&o, map);
    sim_cost_opts co = {.mbs = 4};
    int reps = 0;
    double t0 = now_s(), tt;
    do {
        sim_costs *c = sim_costs_build(m, tp, 8, first, last, map, 8, &co, &e);
        sim_costs_free(c);
        reps++;
        tt = now_s() - t0;
    } while (tt < 0.3);
    printf("\nsim_costs_build, t5-3b (%d ops), 8 stages: %.1f us\n", m->n_ops,
           tt / reps * 1e6);
    prof_model_free(m);
    prof_topo_free(tp);
    return 0;
}
