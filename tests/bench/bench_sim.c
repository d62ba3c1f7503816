/* Simulator speed: events per second and simulations per second, engine
 * runs alone (the planner's inner loop: schedule built once, re-timed)
 * and whole simulations (generate, lower, validate, run). Cases: a
 * synthetic 8-stage pipeline on a PCIe-switch tree (transfers share
 * links), and t5-3b on 8x rtx2080ti with 1F1B and 32 microbatches. */
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
    prof_topo *t = calloc(1, sizeof *t);
    int G = 8, NS = 4, N = G + NS + 1;
    t->n_gpus = G;
    t->n_nodes = N;
    t->nodes = calloc((size_t)N, sizeof *t->nodes);
    t->gpu_node = calloc((size_t)G, sizeof(int));
    t->n_gpu_types = 1;
    t->gpu_types = calloc(1, sizeof *t->gpu_types);
    for (int i = 0; i < G; i++) t->gpu_node[i] = i;
    t->n_links = G + NS;
    t->links = calloc((size_t)t->n_links, sizeof *t->links);
    for (int i = 0; i < G; i++)
        t->links[i] = (prof_link){i, G + i / 2, PROF_LINK_PCIE, 12e9, 1000};
    for (int s = 0; s < NS; s++)
        t->links[G + s] = (prof_link){G + s, N - 1, PROF_LINK_PCIE, 12e9, 1000};
    /* routes between GPUs: up to the common ancestor and down */
    t->route_off = calloc((size_t)N * N + 1, sizeof(int));
    t->route_dl = calloc((size_t)N * N * 4, sizeof(int));
    int k = 0;
    for (int a = 0; a < N; a++)
        for (int b = 0; b < N; b++) {
            t->route_off[a * N + b] = k;
            if (a >= G || b >= G || a == b) continue;
            t->route_dl[k++] = 2 * a;            /* gpu a up */
            if (a / 2 != b / 2) {
                t->route_dl[k++] = 2 * (G + a / 2);     /* switch up */
                t->route_dl[k++] = 2 * (G + b / 2) + 1; /* root down */
            }
            t->route_dl[k++] = 2 * b + 1;        /* down to gpu b */
        }
    t->route_off[N * N] = k;
    return t;
}

static void tree_free(prof_topo *t)
{
    free(t->nodes); free(t->gpu_node); free(t->gpu_types); free(t->links);
    free(t->route_off); free(t->route_dl); free(t);
}

static void bench(const char *name, const sim_sched_opts *o, sim_costs *c)
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
    printf("%-34s %7d %9lld %12.2f %12.0f %10.1f", name, ir->n_tasks,
           (long long)r.events, ev / t / 1e6, reps / t, t / reps * 1e6);
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
    return 0;
}
