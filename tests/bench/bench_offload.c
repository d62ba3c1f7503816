/* Memory tiers (issue 13). First the simulator against Fuyou's headline:
 * GPT-3 13B on one RTX 4090 (768 GB DRAM, 12 drives, 16 samples), the
 * offload schedules' model TFLOP/s beside the paper's 156 (Fuyou) and 45
 * (ZeRO-Infinity). Then the executor: a step of gpt-mini on one CPU
 * device with its model states on the device, in host memory (dram) or in
 * a file (nvme, in the folder given, default .), for zero-offload and
 * fuyou: time per step as a ratio to no offload, the device's peak, the
 * tier's measured read and write rates and the CPU AdamW's throughput.
 * On a CPU "device" memory is host memory, so the ratios are the cost of
 * the runtime's layer windows, copies and file I/O, not of PCIe. Last,
 * plans of the offload schedules themselves (a stage per layer, their
 * tier tasks run as the IR says: exec/tiers.c): the measured iteration
 * against the simulated one, the device's and the host's peaks against
 * the simulation's, and the resource bounding each. Last, stage tiers: a
 * two-device pipeline whose stages keep their AdamW state on the device,
 * in host memory or in a file. One run: compare the rows of one table,
 * not tables. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "planner/planner.h"
#include "sim/sim.h"
#include "tests/bench/bench_plans.h"

#define CORPUS EXEC_DEFAULT_CORPUS
#define STEPS 8
#define WARM 2

/* The simulated seed: each offload schedule's plan of gpt3-13b at mbs 4
 * x 4 and its model TFLOP/s (recompute not counted; the paper's count is
 * not given), against the paper's figures. */
static int seed_rows(void)
{
    static const struct { sim_sched s; double paper; } rows[] = {
        {SIM_SCHED_FUYOU, 156}, {SIM_SCHED_ZERO_INFINITY, 45},
        {SIM_SCHED_ZERO_OFFLOAD, 0}};
    util_err e;
    prof_model *m = prof_model_load("gpt3-13b", &e);
    prof_hw_opts ho = {.host_mem_bytes = 768.0 * (1 << 30), .nvme = 12};
    prof_topo *t = m ? prof_topo_template("rtx4090", 1, &ho, &e) : NULL;
    if (!t) {
        fprintf(stderr, "bench_offload: %s\n", e.msg);
        prof_model_free(m);
        return 1;
    }
    printf("gpt3-13b, 1x rtx4090, 768 GB DRAM, 12 drives, mbs 4 x 4 "
           "(simulated)\n%-14s %10s %14s %14s %10s  %s\n", "schedule",
           "iter s", "model TFLOP/s", "paper TFLOP/s", "peak GiB", "bound by");
    double tf[3] = {0, 0, 0};
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        sim_plan p;
        sim_plan_init(&p);
        p.sched = rows[i].s;
        p.mbs = 4;
        p.n_mb = 4;
        p.recompute = SIM_RC_FULL;
        sim_plan_stages(&p, m->n_layers);
        sim_costs *c = NULL;
        sim_ir *ir = NULL;
        sim_engine *en = NULL;
        sim_result r;
        /* the activations swapped as `sluice sim` chooses them (the
         * fewest checkpoints that fit, then Fuyou's whole ones), then
         * the plan so */
        int bad = sim_partition_even(m, p.n_stages, p.first_op, p.last_op,
                                     &e) ||
                  plan_simulate(&p, m, t, 0, 0, &c, &ir, &en, &r, &e) ||
                  sim_offload_swap_search(&p, c, t, &e);
        sim_engine_free(en);
        sim_ir_free(ir);
        sim_costs_free(c);
        c = NULL;
        ir = NULL;
        en = NULL;
        if (bad || plan_simulate(&p, m, t, 0, 0, &c, &ir, &en, &r, &e)) {
            fprintf(stderr, "bench_offload: %s\n", e.msg);
            rc = 1;
        } else {
            sim_offload_use u;
            sim_offload_usage(ir, &r, &u);
            double it = r.iteration_ns * 1e-9;
            tf[i] = c->model_flops_per_sample * p.mbs * p.n_mb / it / 1e12;
            char paper[16] = "-";
            if (rows[i].paper > 0)
                snprintf(paper, sizeof paper, "%.0f", rows[i].paper);
            printf("%-14s %10.2f %14.1f %14s %10.2f  %s%s\n",
                   sim_sched_name(p.sched), it, tf[i], paper,
                   r.dev[0].peak_bytes / (1 << 30),
                   sim_offload_res_name(u.bound, t),
                   r.oom ? " (does not fit)" : "");
        }
        sim_engine_free(en);
        sim_ir_free(ir);
        sim_costs_free(c);
        sim_plan_free(&p);
    }
    if (!rc && tf[1] > 0)
        printf("fuyou / zero-infinity: %.2fx simulated, %.2fx in the paper "
               "(Liao et al., arXiv 2403.06504)\n\n", tf[0] / tf[1],
               156.0 / 45.0);
    prof_topo_free(t);
    prof_model_free(m);
    return rc;
}

/* A run of plan p: fuyou steps each layer before the global norm is
 * known, so no row clips and every row trains the same weights. */
static exec_pipe_opts run_opts(const sim_plan *p)
{
    exec_pipe_opts o = {0};
    o.plan = p;
    o.data = CORPUS;
    o.steps = STEPS;
    o.adamw = (exec_adamw){.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-8f, .weight_decay = 0.1f, .clip = 0};
    o.warmup = -1;
    o.seed = 1337;
    return o;
}

/* Plan p run (nvme files in dir) and its report as JSON (freed by the
 * caller); NULL after saying why on stderr (what names the row). */
static json_t *run_report(const sim_plan *p, const char *dir,
                          const char *what, exec_pipe_result *r)
{
    util_err e;
    exec_pipe_opts o = run_opts(p);
    o.offload.path = dir;
    exec_report_opts ro = {.json = 1, .warm = WARM};
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    ro.out = mem;
    int rc = exec_pipe_run(&o, r, &e) || exec_pipe_report(&o, r, &ro, &e);
    fclose(mem);
    json_t *j = rc ? NULL : json_loads(buf, 0, NULL);
    free(buf);
    if (rc) fprintf(stderr, "bench_offload: %s: %s\n", what, e.msg);
    else if (!j) fprintf(stderr, "bench_offload: %s: no JSON report\n", what);
    return j;
}

/* Plans of the offload schedules on one CPU device, or two data-parallel
 * ranks (each its share of the states), run and simulated. */
/* The host's peak against the simulator's count over the run's own task
 * times (exec --json's counted_host_peak_bytes): the largest miss of the
 * runs so far, printed against its goal at the end. */
static double host_worst = 0;

static double host_counted(json_t *t)
{
    json_t *cj = json_object_get(t, "counted_host_peak_bytes");
    double c = json_is_number(cj) ? json_number_value(cj) : 0;
    double h = json_number_value(json_object_get(t, "host_peak_bytes"));
    if (c > 0) host_worst = fmax(host_worst, fabs(h / c - 1));
    return c;
}

static int tier_rows(const char *model, prof_model *m, const char *dir)
{
    static const struct {
        sim_sched s;
        int tier, ckpt, full;
        const char *ft;         /* a fine-tuning mode; NULL: full */
        int dp;
    } rows[] = {
        {SIM_SCHED_ZERO_OFFLOAD, SIM_TIER_DRAM, 0, 0, NULL, 1},
        {SIM_SCHED_ZERO_INFINITY, SIM_TIER_DRAM, 0, 0, NULL, 1},
        {SIM_SCHED_ZERO_INFINITY, SIM_TIER_NVME, 0, 0, NULL, 1},
        {SIM_SCHED_FUYOU, SIM_TIER_DRAM, 0, 0, NULL, 1},
        {SIM_SCHED_FUYOU, SIM_TIER_NVME, 0, 0, NULL, 1},
        {SIM_SCHED_FUYOU, SIM_TIER_NVME, 4, 2, NULL, 1},
        /* LoRA: the frozen base fetched, the adapters stepped */
        {SIM_SCHED_ZERO_OFFLOAD, SIM_TIER_DRAM, 0, 0, "lora:8", 1},
        {SIM_SCHED_ZERO_INFINITY, SIM_TIER_NVME, 0, 0, "lora:8", 1},
        {SIM_SCHED_FUYOU, SIM_TIER_DRAM, 0, 0, "lora:8", 1},
        /* QLoRA: the 4-bit base held and fetched packed */
        {SIM_SCHED_ZERO_INFINITY, SIM_TIER_NVME, 0, 0, "qlora:8", 1},
        /* two ranks, the same batch: rings between the devices */
        {SIM_SCHED_ZERO_OFFLOAD, SIM_TIER_DRAM, 0, 0, NULL, 2},
        {SIM_SCHED_ZERO_INFINITY, SIM_TIER_NVME, 0, 0, NULL, 2},
        {SIM_SCHED_FUYOU, SIM_TIER_DRAM, 0, 0, NULL, 2},
        {SIM_SCHED_ZERO_INFINITY, SIM_TIER_NVME, 0, 0, "lora:8", 2},
    };
    printf("\nplans of the offload schedules, %s on one CPU device (dp 1) "
           "or two (dp 2: each rank 2 of the microbatches and its share of "
           "the states), a stage per layer, 4 x 2 microbatches, %d steps "
           "(median past %d); swap K:J = checkpoints of the first K stages, "
           "whole activations of the last J; peaks of the first device (the "
           "median step's), host memory every rank's\n\n", model, STEPS,
           WARM);
    printf("%-22s %2s %-5s %4s %9s %9s %7s %9s %9s %9s %9s %9s  %s\n",
           "schedule", "dp", "tier", "swap", "step ms", "sim ms", "meas/sim",
           "peak MiB", "sim MiB", "host MiB", "sim host", "counted",
           "bound by (measured, simulated)");
    int rc = 0;
    for (size_t i = 0; i < sizeof rows / sizeof *rows && !rc; i++) {
        util_err e;
        sim_plan p;
        if (bench_offload_plan(&p, m, model, rows[i].s, rows[i].tier,
                               rows[i].dp, &e)) {
            fprintf(stderr, "bench_offload: %s\n", e.msg);
            return 1;
        }
        p.swap_ckpt = rows[i].ckpt;
        p.swap_full = rows[i].full;
        if (rows[i].ft && prof_finetune_parse(rows[i].ft, &p.ft, &e)) {
            fprintf(stderr, "bench_offload: %s\n", e.msg);
            sim_plan_free(&p);
            return 1;
        }
        exec_pipe_result r;
        json_t *j = run_report(&p, dir, sim_sched_name(p.sched), &r);
        if (!j) rc = 1;
        if (j) {
            json_t *pr = json_object_get(j, "predicted");
            json_t *t = json_object_get(j, "tiers");
            double it = json_real_value(json_object_get(j, "iteration_time_s"));
            double ps = json_real_value(json_object_get(pr,
                                                        "iteration_time_s"));
            double pk = exec_pipe_peak(&r, WARM, 0);
            double sp = json_number_value(json_object_get(
                json_array_get(json_object_get(pr, "devices"), 0),
                "peak_mem_bytes"));
            char sw[16], name[40];
            snprintf(sw, sizeof sw, "%d:%d", rows[i].ckpt, rows[i].full);
            snprintf(name, sizeof name, "%s%s%s", sim_sched_name(p.sched),
                     rows[i].ft ? " " : "", rows[i].ft ? rows[i].ft : "");
            printf("%-22s %2d %-5s %4s %9.1f %9.1f %7.2f %9.1f %9.1f %9.1f "
                   "%9.1f %9.1f  %s, %s\n", name, rows[i].dp,
                   sim_tier_name(rows[i].tier), sw, it * 1e3, ps * 1e3,
                   ps > 0 ? it / ps : 0, pk / 1048576.0, sp / 1048576.0,
                   json_number_value(json_object_get(t, "host_peak_bytes")) /
                       1048576.0,
                   json_number_value(json_object_get(
                       t, "simulated_host_peak_bytes")) / 1048576.0,
                   host_counted(t) / 1048576.0,
                   json_string_value(json_object_get(t, "bound_by")),
                   json_string_value(json_object_get(t,
                                                     "simulated_bound_by")));
        }
        json_decref(j);
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
    return rc;
}

/* GPT-2's tied table on two layers: the host's side of the DRAM-tier
 * schedules (the table's gradient copies summed, its weights fetched for
 * both holders), the CPU's task and host memory measured against
 * simulated. */
static int table_rows(const char *dir)
{
    static const char *const model = "tests/data/exec/gpt2-two-layers.json";
    static const sim_sched rows[] = {SIM_SCHED_FUYOU,
                                     SIM_SCHED_ZERO_OFFLOAD};
    util_err e;
    prof_model *m = prof_model_load(model, &e);
    if (!m) {
        fprintf(stderr, "bench_offload: %s\n", e.msg);
        return 1;
    }
    printf("\nGPT-2's width and tied table on two layers (%s), one CPU "
           "device, states in DRAM, 4 x 2 microbatches of 64 tokens, %d "
           "steps (median past %d): the CPU's task busy and host memory\n\n",
           model, STEPS, WARM);
    printf("%-13s %9s %9s %7s %9s %9s %9s %9s %9s\n", "schedule",
           "step ms", "sim ms", "meas/sim", "CPU busy", "sim busy",
           "host MiB", "sim host", "counted");
    int rc = 0;
    for (size_t i = 0; i < sizeof rows / sizeof *rows && !rc; i++) {
        sim_plan p;
        if (bench_offload_plan(&p, m, model, rows[i], SIM_TIER_DRAM, 1,
                               &e)) {
            fprintf(stderr, "bench_offload: %s\n", e.msg);
            rc = 1;
            break;
        }
        exec_pipe_result r;
        json_t *j = run_report(&p, dir, sim_sched_name(p.sched), &r);
        if (!j) rc = 1;
        if (j) {
            json_t *t = json_object_get(j, "tiers");
            double it = json_real_value(json_object_get(j, "iteration_time_s"));
            double ps = json_real_value(json_object_get(
                json_object_get(j, "predicted"), "iteration_time_s"));
            double busy = 0, sbusy = 0;
            json_t *res = json_object_get(t, "resources");
            for (size_t k = 0; k < json_array_size(res); k++) {
                json_t *x = json_array_get(res, k);
                if (strcmp(json_string_value(json_object_get(x, "key")),
                           sim_offload_res_key(SIM_OFL_CPU)))
                    continue;
                busy = json_number_value(json_object_get(x, "busy_s"));
                sbusy = json_number_value(json_object_get(
                    x, "simulated_busy_s"));
            }
            printf("%-13s %9.1f %9.1f %7.2f %8.0f%% %8.0f%% %9.1f %9.1f "
                   "%9.1f\n",
                   sim_sched_name(p.sched), it * 1e3, ps * 1e3,
                   ps > 0 ? it / ps : 0, it > 0 ? 100 * busy / it : 0,
                   ps > 0 ? 100 * sbusy / ps : 0,
                   json_number_value(json_object_get(t, "host_peak_bytes")) /
                       1048576.0,
                   json_number_value(json_object_get(
                       t, "simulated_host_peak_bytes")) / 1048576.0,
                   host_counted(t) / 1048576.0);
        }
        json_decref(j);
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
    prof_model_free(m);
    return rc;
}

/* Stage tiers: a pipeline of two CPU devices whose stages keep their
 * AdamW state on the device, in host memory or in a file, run and
 * simulated: the iteration and its ratio to the all-device row, measured
 * and simulated, and each device's peak against the simulation's. */
static int stage_tier_rows(const char *model, prof_model *m, const char *dir)
{
    static const char *const rows[] = {"gpu", "gpu,dram", "dram", "nvme"};
    prof_gpu g;
    util_err e;
    if (prof_gpu_get("cpu", &g, &e)) {
        fprintf(stderr, "bench_offload: %s\n", e.msg);
        return 1;
    }
    printf("\nstage tiers, %s on two CPU devices, 1F1B, 4 x 2 microbatches, "
           "%d steps (median past %d; peaks the median step's)\n\n", model,
           STEPS, WARM);
    printf("%-9s %9s %9s %8s %9s %9s %9s %9s %9s %9s\n", "tiers", "step ms",
           "sim ms", "meas/sim", "x gpu", "sim x gpu", "dev0 MiB", "sim MiB",
           "dev1 MiB", "sim MiB");
    double base = 0, sbase = 0;
    int rc = 0;
    for (size_t i = 0; i < sizeof rows / sizeof *rows && !rc; i++) {
        sim_plan p;
        sim_plan_init(&p);
        snprintf(p.model, sizeof p.model, "%s", model);
        snprintf(p.hw, sizeof p.hw, "cpu x2");
        p.sched = SIM_SCHED_1F1B;
        p.pp = 2;
        p.dp = p.tp = 1;
        p.mbs = 2;
        p.n_mb = 4;
        p.waves = 1;
        sim_plan_stages(&p, 2);
        p.stage_device[1] = 1;
        if (sim_partition_balanced(m, &g, p.mbs, 2, p.first_op, p.last_op,
                                   &e) ||
            sim_state_tiers_parse(rows[i], 2, p.state_tier, &e)) {
            fprintf(stderr, "bench_offload: %s\n", e.msg);
            sim_plan_free(&p);
            return 1;
        }
        exec_pipe_result r;
        json_t *j = run_report(&p, dir, rows[i], &r);
        if (!j) rc = 1;
        if (j) {
            json_t *pr = json_object_get(j, "predicted");
            json_t *dv = json_object_get(pr, "devices");
            double it = json_real_value(json_object_get(j, "iteration_time_s"));
            double ps = json_real_value(json_object_get(pr,
                                                        "iteration_time_s"));
            if (!i) {
                base = it;
                sbase = ps;
            }
            double sp[2];
            for (int d = 0; d < 2; d++)
                sp[d] = json_number_value(json_object_get(
                    json_array_get(dv, (size_t)d), "peak_mem_bytes"));
            printf("%-9s %9.1f %9.1f %8.2f %9.2f %9.2f %9.1f %9.1f %9.1f "
                   "%9.1f\n", rows[i], it * 1e3, ps * 1e3,
                   ps > 0 ? it / ps : 0, base > 0 ? it / base : 0,
                   sbase > 0 ? ps / sbase : 0,
                   exec_pipe_peak(&r, WARM, 0) / 1048576.0,
                   sp[0] / 1048576.0, exec_pipe_peak(&r, WARM, 1) / 1048576.0,
                   sp[1] / 1048576.0);
        }
        json_decref(j);
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
    return rc;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (seed_rows()) return 1;

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
        exec_pipe_opts o = run_opts(&p);
        o.offload = (exec_offload){.policy = rows[i].pol,
                                   .tier = rows[i].tier, .path = dir};
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
    if (!rc) rc = tier_rows(model, m, dir);
    if (!rc) rc = stage_tier_rows(model, m, dir);
    if (!rc) rc = table_rows(dir);
    if (!rc)
        printf("\nhost memory against the simulator's count over each run's "
               "own task times (counted): largest off %.1f%% (goal within "
               "5%%; the plans' simulations assume the template's drives "
               "and host)\n", 100 * host_worst);
    prof_model_free(m);
    return rc;
}
