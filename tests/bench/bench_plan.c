/* Planner speed and memory: the full search of `sluice plan` (partitioning,
 * bounds, simulation of the survivors), repeated, reporting the median,
 * and the peak resident memory of the process that ran it. Each case runs
 * in a child process of its own, so its peak (getrusage through wait4) is
 * its own. Goals: t5-3b on 8 RTX 2080 Ti under one second; gpt3-175b on
 * 1024 A100s under 10 seconds and on 16,384 under 60, on one core; every
 * search under 2 GB. One row simulates every data-parallel replica (no
 * folding), for the ratio folding gives in the same run. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
    const char *goal_s, *goal_mb;
} bcase;

/* What a child reports back through its pipe. */
typedef struct brow {
    int ok;
    long candidates, simulated, pruned;
    double median_s;
} brow;

static brow run_case(const bcase *c)
{
    brow b = {0};
    util_heap_keep();           /* as sluice plan runs the search */
    util_err e;
    prof_model *m = prof_model_load(c->model, &e);
    char cnt[16];
    snprintf(cnt, sizeof cnt, "x%d", c->n);
    char *args[] = {(char *)c->gpu, cnt};
    prof_topo *t = prof_topo_from_args(2, args, NULL, &e);
    if (!m || !t) {
        fprintf(stderr, "bench_plan: %s\n", e.msg);
        return b;
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
            return b;
        }
        times[k] = now_s() - t0;
        if (k + 1 < c->reps) plan_result_free(&r);
    }
    qsort(times, (size_t)c->reps, sizeof *times, cmp);
    b = (brow){1, r.candidates, r.simulated, r.pruned, times[c->reps / 2]};
    plan_result_free(&r);
    prof_model_free(m);
    prof_topo_free(t);
    return b;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows appear as they finish */
    const bcase cases[] = {
        {"t5-3b", "rtx2080ti", 8, 0, 5, 0, "1", "-"},
        {"gpt2-xl", "rtx2080ti", 8, 0, 5, 0, "-", "-"},
        {"bert-large", "rtx2080ti", 8, 0, 5, 0, "-", "-"},
        {"gpt3-13b", "a100-sxm-80gb", 16, 0, 3, 0, "-", "-"},
        {"gpt3-175b", "a100-sxm-80gb", 256, 0, 1, 0, "-", "-"},
        {"gpt3-175b", "a100-sxm-80gb", 256, 0, 1, 1, "-", "-"},
        {"gpt3-175b", "a100-sxm-80gb", 1024, 0, 1, 0, "10", "2048"},
        {"gpt3-175b", "a100-sxm-80gb", 4096, 0, 1, 0, "-", "-"},
        {"gpt3-175b", "a100-sxm-80gb", 16384, 0, 1, 0, "60", "2048"},
    };
    printf("%-10s %-13s %6s %-4s %10s %9s %7s %9s %6s %10s %7s\n", "model",
           "gpu", "GPUs", "fold", "candidates", "simulated", "pruned",
           "median s", "goal s", "max RSS MB", "goal MB");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const bcase *c = &cases[i];
        int fd[2];
        if (pipe(fd)) {
            perror("bench_plan: pipe");
            return 1;
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("bench_plan: fork");
            return 1;
        }
        if (pid == 0) {
            close(fd[0]);
            brow b = run_case(c);
            ssize_t w = write(fd[1], &b, sizeof b);
            _exit(w == (ssize_t)sizeof b && b.ok ? 0 : 1);
        }
        close(fd[1]);
        brow b = {0};
        ssize_t got = read(fd[0], &b, sizeof b);
        close(fd[0]);
        int st = 0;
        struct rusage ru;
        if (wait4(pid, &st, 0, &ru) < 0 || got != (ssize_t)sizeof b || !b.ok ||
            !WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "bench_plan: %s on %d %s failed\n", c->model, c->n,
                    c->gpu);
            return 1;
        }
        printf("%-10s %-13s %6d %-4s %10ld %9ld %7ld %9.3f %6s %10.0f %7s\n",
               c->model, c->gpu, c->n, c->no_fold ? "off" : "on", b.candidates,
               b.simulated, b.pruned, b.median_s, c->goal_s,
               ru.ru_maxrss / 1024.0, c->goal_mb);
    }
    return 0;
}
