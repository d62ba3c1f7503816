/* Planner speed: the full search of `sluice plan` (partitioning, bounds,
 * simulation of the survivors), repeated, reporting the median. Goals:
 * t5-3b on 8 RTX 2080 Ti under one second, gpt3-175b on 1024 A100s under
 * 30 seconds, on one core. One row simulates every data-parallel replica
 * (no folding), for the ratio folding gives in the same run. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/planner.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bcase {
    const char *model, *gpu;
    int n, batch, reps;
    int no_fold;
} bcase;

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows appear as they finish */
    const bcase cases[] = {
        {"t5-3b", "rtx2080ti", 8, 0, 5, 0},
        {"gpt2-xl", "rtx2080ti", 8, 0, 5, 0},
        {"bert-large", "rtx2080ti", 8, 0, 5, 0},
        {"gpt3-13b", "a100-sxm-80gb", 16, 0, 3, 0},
        {"gpt3-175b", "a100-sxm-80gb", 256, 0, 1, 0},
        {"gpt3-175b", "a100-sxm-80gb", 256, 0, 1, 1},
        {"gpt3-175b", "a100-sxm-80gb", 1024, 0, 1, 0},
    };
    printf("%-12s %-16s %5s %-4s %10s %10s %10s %12s %10s\n", "model", "gpu",
           "GPUs", "fold", "candidates", "simulated", "pruned", "median s",
           "goal s");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const bcase *c = &cases[i];
        util_err e;
        prof_model *m = prof_model_load(c->model, &e);
        char cnt[16];
        snprintf(cnt, sizeof cnt, "x%d", c->n);
        char *args[] = {(char *)c->gpu, cnt};
        prof_topo *t = prof_topo_from_args(2, args, NULL, &e);
        if (!m || !t) {
            fprintf(stderr, "bench_plan: %s\n", e.msg);
            return 1;
        }
        double times[16];
        plan_result r;
        for (int k = 0; k < c->reps; k++) {
            plan_opts o;
            plan_opts_init(&o);
            o.batch = c->batch;
            o.no_fold = c->no_fold;
            double t0 = now_s();
            if (plan_search(m, t, c->model, "bench", &o, &r, &e)) {
                fprintf(stderr, "bench_plan: %s\n", e.msg);
                return 1;
            }
            times[k] = now_s() - t0;
            if (k + 1 < c->reps) plan_result_free(&r);
        }
        qsort(times, (size_t)c->reps, sizeof *times, cmp);
        printf("%-12s %-16s %5d %-4s %10ld %10ld %10ld %12.3f %10s\n", c->model,
               c->gpu, c->n, c->no_fold ? "off" : "on", r.candidates,
               r.simulated, r.pruned,
               times[c->reps / 2], i == 0 ? "1" : c->n == 1024 ? "30" : "-");
        plan_result_free(&r);
        prof_model_free(m);
        prof_topo_free(t);
    }
    return 0;
}
