/* Pipeline stages with their optimizer state on a host tier: what the GPU
 * keeps, the bytes each step moves against their closed forms, a step
 * alone against its PCIe and CPU times, steps of one server sharing its
 * memory, the drives' chunks, the planner's choice against brute force
 * over every assignment, and the errors of the options, plan files and
 * tiers that cannot hold the state. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"
#include "tests/harness.h"

typedef struct trun {
    sim_costs *c;
    sim_ir *ir;
    sim_engine *en;
    sim_result r;
} trun;

/* Simulates plan p of model md on t. */
static void trun_go(const sim_plan *p, const prof_model *md,
                    const prof_topo *t, trun *x)
{
    util_err e;
    cr_assert_eq(plan_simulate(p, md, t, 0, 0, &x->c, &x->ir, &x->en, &x->r,
                               &e), 0, "%s", e.msg);
}

static void trun_free(trun *x)
{
    sim_engine_free(x->en);
    sim_ir_free(x->ir);
    sim_costs_free(x->c);
}

/* A 1F1B plan of model over n even stages on n GPUs of template gpu,
 * host DRAM host_gib and `drives` drives; tiers as --state-tiers says
 * (NULL: every stage on its GPU). */
static void tplan(const char *model, const char *gpu, int n, int mbs, int m,
                  double host_gib, int drives, const char *tiers,
                  prof_model **md, prof_topo **t, sim_plan *p)
{
    util_err e;
    *md = prof_model_load(model, &e);
    cr_assert_not_null(*md, "%s", e.msg);
    prof_hw_opts ho = {.nvme = drives, .nvme_set = 1,
                       .host_mem_bytes = host_gib * (1 << 30)};
    *t = prof_topo_template(gpu, n, &ho, &e);
    cr_assert_not_null(*t, "%s", e.msg);
    sim_plan_init(p);
    p->sched = SIM_SCHED_1F1B;
    p->pp = n;
    p->mbs = mbs;
    p->n_mb = m;
    p->recompute = SIM_RC_FULL;
    sim_plan_stages(p, n);
    for (int s = 0; s < n; s++) p->stage_device[s] = s;
    cr_assert_eq(sim_partition_even(*md, n, p->first_op, p->last_op, &e), 0,
                 "%s", e.msg);
    if (tiers)
        cr_assert_eq(sim_state_tiers_parse(tiers, n, p->state_tier, &e), 0,
                     "%s", e.msg);
}

static void tplan_free(prof_model *md, prof_topo *t, sim_plan *p)
{
    sim_plan_free(p);
    prof_topo_free(t);
    prof_model_free(md);
}

/* The one task of kind k of run x (its index). */
static int only(const trun *x, sim_kind k)
{
    int id = -1;
    for (int i = 0; i < x->ir->n_tasks; i++)
        if (x->ir->tasks[i].kind == k) {
            cr_assert_eq(id, -1, "more than one %s", sim_kind_name(k));
            id = i;
        }
    cr_assert_geq(id, 0);
    return id;
}

/* Host DRAM of stages stepped there: the fp32 gradient (4 bytes a
 * parameter) and the state, 16 bytes a parameter that trains in 16-bit
 * training (fp32 master weights and moments, 12) and in fp32 alike (the
 * weights are their own master copy: 4 + 8) */
Test(sim_stage_tiers, the_host_holds_16_bytes_a_parameter)
{
    static const char *const models[2] = {"gpt2", "gpt-mini"};
    for (int k = 0; k < 2; k++) {
        prof_model *md;
        prof_topo *t;
        sim_plan p;
        tplan(models[k], "rtx4090", 2, 1, 2, 64, 0, "dram,dram", &md, &t,
              &p);
        trun x;
        trun_go(&p, md, t, &x);
        double tp = 0;
        for (int s = 0; s < x.c->n_stages; s++)
            tp += x.c->stage[s].train_params;
        cr_expect(fabs(x.c->host_bytes - 16 * tp) <= 1e-9 * 16 * tp + 1,
                  "%s: host %.0f, closed form %.0f", models[k],
                  x.c->host_bytes, 16 * tp);
        trun_free(&x);
        tplan_free(md, t, &p);
    }
}

Test(sim_stage_tiers, the_gpu_keeps_fp16_state_and_the_step_moves_it_once)
{
    prof_model *md;
    prof_topo *t;
    sim_plan p;
    trun a, b;
    tplan("gpt2-xl", "rtx4090", 2, 1, 4, 128, 0, NULL, &md, &t, &p);
    trun_go(&p, md, t, &a);
    cr_assert_eq(sim_state_tiers_parse("gpu,dram", 2, p.state_tier, NULL), 0);
    trun_go(&p, md, t, &b);
    const sim_stage_cost *s1 = &b.c->stage[1];
    /* stage 0 as before; stage 1 less its optimizer state */
    cr_assert_float_eq(b.r.dev[0].static_bytes, a.r.dev[0].static_bytes, 1);
    cr_assert_float_eq(b.r.dev[1].static_bytes,
                       s1->weight_bytes + s1->grad_bytes, 1);
    cr_assert_float_eq(a.r.dev[1].static_bytes - b.r.dev[1].static_bytes,
                       s1->opt_bytes, 1);
    cr_assert_gt(s1->opt_bytes, 0);
    /* one copy of the gradient out, one of the weights back, one CPU
     * step, all of stage 1; the GPU's step of it is free */
    int out = 0, in = 0, cpu = 0, other = 0;
    for (int i = 0; i < b.ir->n_tasks; i++) {
        const sim_task *x = &b.ir->tasks[i];
        if (x->kind == SIM_SWAP_OUT || x->kind == SIM_SWAP_IN ||
            x->kind == SIM_CPU_OPT || sim_kind_nvme(x->kind)) {
            cr_assert_eq(x->stage, 1);
            cr_assert_eq(x->device, 1);
        }
        if (x->kind == SIM_SWAP_OUT) {
            out++;
            cr_assert_float_eq(x->bytes, s1->train_bytes, 1);
        } else if (x->kind == SIM_SWAP_IN) {
            in++;
            cr_assert_float_eq(x->bytes, s1->train_bytes, 1);
        } else if (x->kind == SIM_CPU_OPT) {
            cpu++;
        } else if (sim_kind_nvme(x->kind)) {
            other++;
        } else if (x->kind == SIM_OPT && x->stage == 1) {
            cr_assert_eq(b.r.end_ns[i] - b.r.start_ns[i], s1->opt_task_ns);
        }
    }
    cr_assert_eq(out, 1);
    cr_assert_eq(in, 1);
    /* the gradient leaves once every backward of the stage is done */
    for (int i = 0, o = only(&b, SIM_SWAP_OUT); i < b.ir->n_tasks; i++)
        if (b.ir->tasks[i].kind == SIM_BW && b.ir->tasks[i].stage == 1)
            cr_assert_leq(b.r.end_ns[i], b.r.start_ns[o]);
    cr_assert_eq(cpu, 1);
    cr_assert_eq(other, 0);
    /* the step on the CPU is slower than on the GPU: not faster overall */
    cr_assert_geq(b.r.iteration_ns, a.r.iteration_ns);
    trun_free(&a);
    trun_free(&b);
    tplan_free(md, t, &p);
}

Test(sim_stage_tiers, a_step_alone_takes_its_pcie_and_cpu_times)
{
    prof_model *md;
    prof_topo *t;
    sim_plan p;
    trun x;
    tplan("gpt2-xl", "rtx4090", 2, 1, 4, 128, 0, "gpu,dram", &md, &t, &p);
    trun_go(&p, md, t, &x);
    const sim_stage_cost *s1 = &x.c->stage[1];
    int g = x.c->dev_gpu[1], h = prof_topo_gpu_host_mem(t, g), n = 0;
    const int *up = prof_topo_route(t, h, t->gpu_node[g], &n);
    double bw = prof_route_bw(t, up, n), lat = prof_route_latency_ns(t, up, n);
    /* the CPU step alone: its time; the weights back after it, alone on
     * the link: bytes over the route's bandwidth */
    int cpu = only(&x, SIM_CPU_OPT), in = only(&x, SIM_SWAP_IN);
    double dc = (double)(x.r.end_ns[cpu] - x.r.start_ns[cpu]);
    cr_assert(fabs(dc - (double)s1->cpu_opt_ns) <= 2, "CPU step %.0f ns, "
              "alone %lld", dc, (long long)s1->cpu_opt_ns);
    double di = (double)(x.r.end_ns[in] - x.r.start_ns[in]);
    double want = s1->train_bytes / bw * 1e9 + lat;
    cr_assert(fabs(di - want) <= 1e-6 * want + 2, "weights back %.0f ns, "
              "closed form %.0f", di, want);
    /* a step runs in order: gradient out, CPU, weights back, the step */
    int out = only(&x, SIM_SWAP_OUT);
    cr_assert_leq(x.r.end_ns[out], x.r.start_ns[cpu]);
    cr_assert_leq(x.r.end_ns[cpu], x.r.start_ns[in]);
    trun_free(&x);
    tplan_free(md, t, &p);
}

Test(sim_stage_tiers, steps_on_one_server_share_its_memory)
{
    prof_model *md;
    prof_topo *t;
    sim_plan p;
    trun x;
    tplan("gpt2-xl", "rtx4090", 2, 1, 2, 128, 0, "dram", &md, &t, &p);
    trun_go(&p, md, t, &x);
    /* both GPUs hang off one host memory here */
    cr_assert_eq(prof_topo_gpu_host_mem(t, 0), prof_topo_gpu_host_mem(t, 1));
    int64_t a = INT64_MAX, b = 0, sum = 0;
    int slower = 0;
    for (int i = 0; i < x.ir->n_tasks; i++) {
        const sim_task *k = &x.ir->tasks[i];
        if (k->kind != SIM_CPU_OPT) continue;
        int64_t alone = x.c->stage[k->stage].cpu_opt_ns;
        sum += alone;
        if (x.r.start_ns[i] < a) a = x.r.start_ns[i];
        if (x.r.end_ns[i] > b) b = x.r.end_ns[i];
        slower |= x.r.end_ns[i] - x.r.start_ns[i] > alone + 2;
    }
    /* they overlapped, each slower than alone, and together no faster than
     * the memory serves them one after the other */
    cr_assert(slower, "the two steps did not overlap");
    cr_assert_geq(b - a, sum - 2);
    trun_free(&x);
    tplan_free(md, t, &p);
}

Test(sim_stage_tiers, drives_stream_the_state_in_chunks)
{
    prof_model *md;
    prof_topo *t;
    sim_plan p;
    trun x;
    tplan("gpt2-xl", "rtx4090", 2, 1, 4, 128, 2, "gpu,nvme", &md, &t, &p);
    trun_go(&p, md, t, &x);
    const sim_stage_cost *s1 = &x.c->stage[1];
    double rd = 0, wr = 0, chunk = 1024.0 * 1024 * 1024;
    int nr = 0, nw = 0, ncpu = 0;
    int64_t a = INT64_MAX, b = 0;
    for (int i = 0; i < x.ir->n_tasks; i++) {
        const sim_task *k = &x.ir->tasks[i];
        if (k->kind == SIM_NVME_READ) { rd += k->bytes; nr++; }
        if (k->kind == SIM_NVME_WRITE) { wr += k->bytes; nw++; }
        if (k->kind == SIM_CPU_OPT) ncpu++;
        if (sim_kind_nvme(k->kind)) {
            if (x.r.start_ns[i] < a) a = x.r.start_ns[i];
            if (x.r.end_ns[i] > b) b = x.r.end_ns[i];
            cr_assert_eq(k->lanes, 2);
        }
    }
    int K = (int)ceil(s1->opt_bytes / chunk);
    cr_assert_gt(K, 1);
    cr_assert_eq(nr, K);
    cr_assert_eq(nw, K);
    cr_assert_eq(ncpu, K);
    cr_assert_float_eq(rd, s1->opt_bytes, 1);
    cr_assert_float_eq(wr, s1->opt_bytes, 1);
    /* the drives read and write it all: no faster than their bandwidth */
    int dv = -1;
    for (int v = 0; v < t->n_nodes && dv < 0; v++)
        if (t->nodes[v].kind == PROF_NODE_NVME) dv = v;
    double drive_ns = (rd / t->nodes[dv].read_bw_bytes_per_s +
                       wr / t->nodes[dv].write_bw_bytes_per_s) / 2 * 1e9;
    cr_assert_geq((double)(b - a), drive_ns * (1 - 1e-9));
    /* host DRAM holds three chunks and the fp32 gradient, not the state */
    cr_assert_float_eq(x.c->host_bytes, 2 * s1->train_bytes +
                       3 * s1->opt_bytes / K, 1);
    cr_assert_float_eq(x.c->nvme_bytes, s1->opt_bytes, 1);
    trun_free(&x);
    tplan_free(md, t, &p);
}

/* The memory plot draws what the fullest server's DRAM and drives hold
 * (the report's figures), and every curve, the GPUs' too, runs to the
 * iteration's end. */
Test(sim_stage_tiers, the_memory_plot_draws_the_host_tiers)
{
    const char *args = "sim --hw rtx4090 x2 --model gpt2-xl --schedule 1f1b "
                       "--pp 2 --mbs 1 --microbatches 4 --host-mem 128G "
                       "--nvme 2 --state-tiers gpu,nvme";
    json_t *j = cli_json("%s --json", args);
    json_t *st = json_object_get(j, "state_tiers");
    double want[2] = {
        json_number_value(json_object_get(st, "host_bytes")),
        json_number_value(json_object_get(st, "nvme_bytes"))};
    double it_ms = json_number_value(json_object_get(j, "iteration_time_s")) * 1e3;
    json_decref(j);
    cr_assert_gt(want[0], 0);
    cr_assert_gt(want[1], 0);
    cr_assert_gt(it_ms, 0);
    char *dir = test_tmpdir();
    char pre[300], path[320];
    snprintf(pre, sizeof pre, "%s/p", dir);
    cli_expect(0, "NVMe", "%s --plot %s", args, pre);
    snprintf(path, sizeof path, "%s-memory.dat", pre);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[256], what[64] = "";
    int blocks = 0, tiers = 0;
    double t = 0, by = 0, last_t = -1;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            cr_assert_eq(sscanf(line, "# %63[^0-9]", what), 1);
            blocks++;
            continue;
        }
        if (sscanf(line, "%lf %lf", &t, &by) == 2) {
            last_t = t;
            int k = !strncmp(what, "host DRAM", 9) ? 0
                  : !strncmp(what, "NVMe", 4) ? 1 : -1;
            if (k >= 0) {
                cr_expect_float_eq(by, want[k] / (1 << 30), 1e-5, "%s", what);
                tiers |= 1 << k;
            }
        } else if (last_t >= 0) {
            /* a block's end: its curve reaches the iteration's end */
            cr_expect_float_eq(last_t, it_ms, 1e-3 * it_ms, "%s ends at "
                               "%.3f ms of %.3f", what, last_t, it_ms);
            last_t = -1;
        }
    }
    fclose(f);
    cr_expect_eq(blocks, 4);
    cr_expect_eq(tiers, 3);
    snprintf(path, sizeof path, "%s.gp", pre);
    char *gp = NULL;
    util_err e;
    cr_assert_eq(util_read_file(path, &gp, NULL, &e), 0, "%s", e.msg);
    cr_expect(strstr(gp, "title 'host DRAM'") && strstr(gp, "title 'NVMe'"),
              "%s draws no host tier", path);
    free(gp);
    test_rm_rf(dir);
}

/* Plan p with stage s's optimizer state in DRAM where bit s of m is set,
 * else on its GPU: its iteration, and whether it overflows (*oom). */
static int64_t run_assign(sim_plan *p, const prof_model *md,
                          const prof_topo *t, unsigned m, int *oom)
{
    for (int s = 0; s < p->n_stages; s++)
        p->state_tier[s] = m >> s & 1 ? SIM_TIER_DRAM : 0;
    sim_costs *c;
    sim_ir *ir;
    sim_engine *en;
    sim_result r;
    util_err e;
    cr_assert_eq(plan_simulate(p, md, t, PLAN_DEFAULT_RESERVE, 0, &c, &ir,
                               &en, &r, &e), 0, "%s", e.msg);
    int64_t it = r.iteration_ns;
    *oom = r.oom;
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(c);
    return it;
}

/* The planner's stage tiers for a pipeline that needs some: every
 * assignment of the same plan (each stage on its GPU or in DRAM) that
 * fits keeps at least the stages the planner moved on the host, and none
 * is faster. */
Test(sim_stage_tiers, the_planner_moves_what_overflows_and_brute_force_agrees)
{
    char *dir = test_tmpdir();
    char path[300];
    snprintf(path, sizeof path, "%s/p.json", dir);
    cli_expect(0, "optimizer state on the host",
               "plan --hw rtx3090 x5 --model llama2-7b --schedule 1f1b --pp 5 "
               "--recompute full --batch 32 --out %s", path);
    util_err e;
    sim_plan p;
    cr_assert_eq(sim_plan_load(path, &p, &e), 0, "%s", e.msg);
    cr_assert_str_eq(p.hw, "rtx3090 x5");
    prof_topo *t = prof_topo_template("rtx3090", 5, NULL, &e);
    cr_assert_not_null(t, "%s", e.msg);
    prof_model *md = sim_plan_model(&p, t, &e);
    cr_assert_not_null(md, "%s", e.msg);
    const int S = p.n_stages;
    cr_assert_leq(S, 8);
    unsigned chosen = 0;
    for (int s = 0; s < S; s++)
        if (p.state_tier[s]) chosen |= 1u << s;
    cr_assert(chosen && chosen != (1u << S) - 1, "a partial choice: %x",
              chosen);
    int64_t best = -1;
    int oom;
    for (unsigned m = 0; m < 1u << S; m++) {
        int64_t it = run_assign(&p, md, t, m, &oom);
        if (oom) continue;
        cr_assert_eq(m & chosen, chosen, "tiers %x fit without all of the "
                     "planner's %x", m, chosen);
        if (m == chosen) best = it;
    }
    cr_assert_geq(best, 0, "the planner's tiers do not fit");
    for (unsigned m = 0; m < 1u << S; m++)
        if ((m & chosen) == chosen && m != chosen)
            cr_assert_geq(run_assign(&p, md, t, m, &oom), best, "tiers %x "
                          "faster than the planner's %x", m, chosen);
    prof_model_free(md);
    prof_topo_free(t);
    sim_plan_free(&p);
    test_rm_rf(dir);
}

Test(sim_stage_tiers, the_plan_file_keeps_the_tiers)
{
    char *dir = test_tmpdir();
    char path[300];
    snprintf(path, sizeof path, "%s/p.json", dir);
    cli_expect(0, "optimizer state off the GPU",
               "sim --hw rtx4090 x2 --nvme 1 --model gpt2 --schedule 1f1b "
               "--pp 2 --mbs 1 --microbatches 2 --state-tiers nvme,dram "
               "--out %s", path);
    util_err e;
    sim_plan p;
    cr_assert_eq(sim_plan_load(path, &p, &e), 0, "%s", e.msg);
    cr_assert_eq(p.state_tier[0], SIM_TIER_NVME);
    cr_assert_eq(p.state_tier[1], SIM_TIER_DRAM);
    sim_plan_free(&p);
    json_t *j = cli_json("sim --plan %s --json", path);
    json_t *st = json_object_get(json_object_get(j, "state_tiers"), "stages");
    cr_assert_eq(json_array_size(st), 2);
    cr_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(st, 0), "tier")), "nvme");
    cr_assert_gt(json_number_value(json_object_get(json_array_get(st, 1),
                                                   "host_step_s")), 0);
    json_decref(j);
    test_rm_rf(dir);
}

/* A two-stage 1F1B gpt2 plan whose first stage says `field`. */
static void bad_stage(const char *sched, const char *field, const char *want)
{
    char *dir = test_tmpdir();
    char bad[300];
    snprintf(bad, sizeof bad, "%s/b.json", dir);
    FILE *f = fopen(bad, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"sluice_plan\": 1, \"model\": \"gpt2\", \"hw\": \"rtx4090 "
               "x2\", \"schedule\": \"%s\", \"pp\": %d, \"mbs\": 1,\n"
               " \"microbatches\": 2, \"stages\": [\n"
               "  {\"ops\": [0, 20], \"device\": 0, %s},\n"
               "  {\"ops\": [21, 47], \"device\": %d}]}\n", sched,
            strcmp(sched, "1f1b") ? 1 : 2, field,
            strcmp(sched, "1f1b") ? 0 : 1);
    fclose(f);
    cli_expect(2, "b.json:3:", "sim --plan %s", bad);
    cli_expect(2, want, "sim --plan %s", bad);
    test_rm_rf(dir);
}

Test(sim_stage_tiers, bad_tiers_are_named)
{
    bad_stage("1f1b", "\"state_tier\": \"ssd\"", "state_tier");
    bad_stage("zero-offload", "\"state_tier\": \"dram\"",
              "places every stage's states itself");
    cli_expect(2, "--state-tiers: 'ssd' is not a tier: expected gpu, dram "
               "or nvme", "sim --hw rtx4090 x2 --model gpt2 --schedule 1f1b "
               "--pp 2 --mbs 1 --microbatches 2 --state-tiers gpu,ssd");
    cli_expect(2, "'gpu,dram,dram' gives more tiers than the plan's 2 stages",
               "sim --hw rtx4090 x2 --model gpt2 --schedule 1f1b --pp 2 "
               "--mbs 1 --microbatches 2 --state-tiers gpu,dram,dram");
    cli_expect(2, "--state-tiers: schedule fuyou places every stage's "
               "states itself", "sim --hw rtx4090 x1 --model gpt2 "
               "--schedule fuyou --mbs 1 --microbatches 1 --state-tiers "
               "dram");
    cli_expect(2, "server 0 of", "sim --hw rtx4090 x2 --nvme 0 --model gpt2 "
               "--schedule 1f1b --pp 2 --mbs 1 --microbatches 2 "
               "--state-tiers nvme");
    cli_expect(2, "missing in DRAM", "sim --hw rtx4090 x4 --host-mem 64G "
               "--model llama2-7b --schedule 1f1b --pp 4 --mbs 1 "
               "--microbatches 4 --state-tiers dram");
    cli_expect(2, "gives 2 tiers for 3 stages", "sim --hw rtx4090 x3 "
               "--model gpt2 --schedule 1f1b --pp 3 --mbs 1 --microbatches 2 "
               "--state-tiers gpu,dram");
    /* drives too small for the state: how much is missing, where */
    prof_model *md;
    prof_topo *t;
    sim_plan p;
    tplan("gpt2-xl", "rtx4090", 2, 1, 2, 128, 1, "nvme", &md, &t, &p);
    for (int v = 0; v < t->n_nodes; v++)
        if (t->nodes[v].kind == PROF_NODE_NVME)
            t->nodes[v].capacity_bytes = 1e9;
    sim_costs *c;
    sim_ir *ir;
    sim_engine *en;
    sim_result r;
    util_err e;
    cr_assert_eq(plan_simulate(&p, md, t, 0, 0, &c, &ir, &en, &r, &e), -1);
    cr_assert(strstr(e.msg, "server 0's NVMe drives cannot hold") &&
              strstr(e.msg, "missing on NVMe"), "%s", e.msg);
    /* how many times the drives would do (what the planner grows a host
     * by, from a GiB at least): just that holds the state, a little less
     * does not */
    cr_assert_eq(e.lack, SIM_TIER_NVME);
    cr_assert_gt(e.lack_by, 1);
    double have = 0;
    for (int v = 0; v < t->n_nodes; v++)
        if (t->nodes[v].kind == PROF_NODE_NVME)
            have += t->nodes[v].capacity_bytes;
    double by = e.lack_by, base = fmax(have, 1 << 30);
    for (double f = 0.999; f < 1.01; f += 0.002) {
        for (int v = 0; v < t->n_nodes; v++)
            if (t->nodes[v].kind == PROF_NODE_NVME)
                t->nodes[v].capacity_bytes = 1e9 * base / have * by * f;
        int rc = plan_simulate(&p, md, t, 0, 0, &c, &ir, &en, &r, &e);
        cr_expect_eq(rc, f > 1 ? 0 : -1, "drives %g times: %s", by * f,
                     rc ? e.msg : "fits");
        if (!rc) {
            sim_engine_free(en);
            sim_ir_free(ir);
            sim_costs_free(c);
        }
    }
    tplan_free(md, t, &p);
}
