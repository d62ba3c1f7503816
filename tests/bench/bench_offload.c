/* Memory tiers in the executor (issue 13): a step of gpt-mini on one CPU
 * device with its model states on the device, in host memory (dram) or in
 * a file (nvme, in the folder given, default .), for zero-offload and
 * fuyou: time per step as a ratio to no offload, the device's peak, the
 * tier's measured read and write rates and the CPU AdamW's throughput.
 * On a CPU "device" memory is host memory, so the ratios are the cost of
 * the runtime's layer windows, copies and file I/O, not of PCIe. One run:
 * compare the rows of one table, not tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "sim/sim.h"

#define CORPUS EXEC_DEFAULT_CORPUS
#define STEPS 8
#define WARM 2

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *model = "gpt-mini";
    const char *dir = argc > 1 ? argv[1] : ".";
    util_err e;
    prof_model *m = prof_model_load(model, &e);
    prof_gpu g;
    if (!m || prof_gpu_get("cpu", &g, &e)) {
        fprintf(stderr, "bench_offload: %s\n", e.msg);
        return 1;
    }
    sim_plan p;
    sim_plan_init(&p);
    snprintf(p.model, sizeof p.model, "%s", model);
    snprintf(p.hw, sizeof p.hw, "cpu x1");
    p.sched = SIM_SCHED_GPIPE;
    p.pp = p.dp = p.tp = 1;
    p.mbs = 2;
    p.n_mb = 4;
    p.waves = 1;
    sim_plan_stages(&p, 1);
    if (sim_partition_balanced(m, &g, p.mbs, 1, p.first_op, p.last_op, &e)) {
        fprintf(stderr, "bench_offload: %s\n", e.msg);
        return 1;
    }
    printf("%s on one CPU device, GPipe, %d x %d microbatches, %d steps "
           "(median past %d); nvme files in %s\n\n", model, p.n_mb, p.mbs,
           STEPS, WARM, dir);
    printf("%-13s %-5s %9s %8s %10s %10s %10s %12s  %s\n", "offload", "tier",
           "step ms", "ratio", "peak MiB", "read MB/s", "write MB/s",
           "Adam Mpar/s", "io");
    struct { exec_offload_policy pol; exec_tier tier; } rows[] = {
        {EXEC_OFFLOAD_NONE, EXEC_TIER_DRAM},
        {EXEC_OFFLOAD_ZERO, EXEC_TIER_DRAM},
        {EXEC_OFFLOAD_ZERO, EXEC_TIER_NVME},
        {EXEC_OFFLOAD_FUYOU, EXEC_TIER_DRAM},
        {EXEC_OFFLOAD_FUYOU, EXEC_TIER_NVME},
    };
    double base = 0;
    int rc = 0;
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        exec_pipe_opts o = {0};
        o.plan = &p;
        o.data = CORPUS;
        o.steps = STEPS;
        /* fuyou steps each layer before the global norm is known: no
         * clipping in any row, so every row trains the same weights */
        o.adamw = (exec_adamw){.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                               .eps = 1e-8f, .weight_decay = 0.1f,
                               .clip = 0};
        o.warmup = -1;
        o.seed = 1337;
        o.offload = (exec_offload){rows[i].pol, rows[i].tier, dir, 0};
        exec_pipe_result r;
        if (exec_pipe_run(&o, &r, &e)) {
            fprintf(stderr, "bench_offload: %s\n", e.msg);
            rc = 1;
            exec_pipe_result_free(&r);
            break;
        }
        double it = exec_pipe_iteration_s(&r, WARM, NULL, NULL);
        if (!i) base = it;
        int off = rows[i].pol != EXEC_OFFLOAD_NONE;
        char rd[16] = "-", wr[16] = "-", ad[16] = "-";
        if (off && r.ofl_read_s > 0)
            snprintf(rd, sizeof rd, "%.0f", r.ofl_read_bytes / r.ofl_read_s /
                                                1e6);
        if (off && r.ofl_write_s > 0)
            snprintf(wr, sizeof wr, "%.0f", r.ofl_write_bytes /
                                                r.ofl_write_s / 1e6);
        if (off && r.adam_s > 0)
            snprintf(ad, sizeof ad, "%.0f", r.adam_params / r.adam_s / 1e6);
        printf("%-13s %-5s %9.2f %8.2f %10.2f %10s %10s %12s  %s\n",
               exec_offload_name(rows[i].pol),
               off ? exec_tier_name(rows[i].tier) : "-", it * 1e3,
               base > 0 ? it / base : 0, r.peak_bytes[0] / 1048576.0, rd, wr,
               ad, r.ofl_note);
        exec_pipe_result_free(&r);
    }
    sim_plan_free(&p);
    prof_model_free(m);
    return rc;
}
