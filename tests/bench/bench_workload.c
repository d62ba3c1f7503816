/* Many models at once (issue 14): four gpt-tiny jobs on two CPU devices
 * of 16 MiB each (every job cut into shards), Hydra's Sharded-LRTF
 * against the baselines of the jobs in turn on one device and of the jobs
 * in turn as the planner's best pipeline over both devices, measured and
 * simulated (the planner's scheduler over the same cut with the CPU
 * profile's times; the pipeline's planned iteration), each as the first
 * baseline's makespan over the policy's: Hydra's speedup. One run:
 * compare the rows of one table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    char path[] = "/tmp/sluice-bench-wl-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("bench_workload");
        return 1;
    }
    const char *text =
        "{\"jobs\": [\n"
        " {\"model\": \"gpt-tiny\", \"batch\": 8, \"samples\": 64},\n"
        " {\"model\": \"gpt-tiny\", \"batch\": 8, \"samples\": 64},\n"
        " {\"model\": \"gpt-tiny\", \"batch\": 8, \"samples\": 64},\n"
        " {\"model\": \"gpt-tiny\", \"batch\": 8, \"samples\": 64}]}\n";
    if (write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
        perror("bench_workload");
        close(fd);
        unlink(path);
        return 1;
    }
    close(fd);
    exec_wl_opts o = {.workload = path, .devices = 2,
                      .mem_bytes = 16.0 * 1024 * 1024,
                      .data = EXEC_DEFAULT_CORPUS,
                      .adamw = {.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                                .eps = 1e-8f, .weight_decay = 0.1f,
                                .clip = 0},
                      .warmup = -1, .seed = 1337, .policy_seed = 1,
                      .prefetch = 1};
    util_err e = {0};
    exec_wl *w = exec_wl_new(&o, &e);
    unlink(path);
    if (!w) {
        fprintf(stderr, "bench_workload: %s\n", e.msg);
        return 1;
    }
    const char *name, *model;
    int k, B, T, steps;
    const int *first;
    exec_wl_job_info(w, 0, &name, &model, &k, &first, &B, &T, &steps);
    printf("4 x %s (batch %d x %d, %d steps, %d shards) on 2 CPU devices of "
           "16 MiB\n\n", model, B, T, steps, k);
    printf("%-12s %12s %12s %10s %10s %10s\n", "policy", "measured s",
           "simulated s", "meas/sim", "speedup", "sim speedup");
    exec_wl_policy pol[] = {EXEC_WL_SEQUENTIAL, EXEC_WL_HYDRA,
                            EXEC_WL_PIPELINE};
    exec_wl_result r[3];
    int rc = 0, n = 0;
    for (; n < 3; n++)
        if (exec_wl_run(w, pol[n], &r[n], &e)) {
            fprintf(stderr, "bench_workload: %s\n", e.msg);
            exec_wl_result_free(&r[n]);
            rc = 1;
            break;
        }
    for (int i = 0; i < n; i++)
        printf("%-12s %12.3f %12.3f %10.2f %10.2f %10.2f\n",
               exec_wl_policy_name(pol[i]), r[i].makespan_s,
               r[i].predicted_makespan_s,
               r[i].makespan_s / r[i].predicted_makespan_s,
               r[0].makespan_s / r[i].makespan_s,
               r[0].predicted_makespan_s / r[i].predicted_makespan_s);
    if (n == 3) {
        int same = 1;
        for (int j = 0; j < r[0].n_jobs; j++)
            same &= !memcmp(r[0].job[j].params, r[1].job[j].params,
                            r[0].job[j].n_params * sizeof(float));
        printf("\nhydra's speedup over the jobs in turn: %.2fx measured, "
               "%.2fx simulated (the Hydra paper's, arXiv 2110.08633: 1.5 to "
               "2.0x over DeepSpeed and GPipe)\n", r[0].makespan_s /
               r[1].makespan_s, r[0].predicted_makespan_s /
               r[1].predicted_makespan_s);
        printf("hydra's speedup over the jobs in turn as pipelines: %.2fx "
               "measured, %.2fx simulated\n", r[2].makespan_s /
               r[1].makespan_s, r[2].predicted_makespan_s /
               r[1].predicted_makespan_s);
        printf("hydra's weights %s the baseline's bit for bit; %ld of %ld "
               "shard-steps prefetched\n", same ? "equal" : "DIFFER FROM",
               r[1].prefetched, r[1].steps);
        printf("the pipelines' makespan is their runs' training; %.3f s "
               "more went to setting the runs up\n", r[2].setup_s);
        if (!same) rc = 1;
    }
    for (int i = 0; i < n; i++) exec_wl_result_free(&r[i]);
    exec_wl_free(w);
    return rc;
}
