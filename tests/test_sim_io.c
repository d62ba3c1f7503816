/* sim: plan files (round trip, located errors, coverage checks),
 * partitions, deterministic traces and repeated runs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/sim.h"
#include "tests/harness.h"

/* A chain model: embed, n_layers x (linear, act), head; hand-built. */
static prof_model *chain_model(int n_layers)
{
    prof_model *m = calloc(1, sizeof *m);
    snprintf(m->spec.name, sizeof m->spec.name, "chain%d", n_layers);
    m->spec.dtype = PROF_DT_FP16;
    m->spec.seq_len = 128;
    m->n_layers = n_layers + 2;
    m->layers = calloc((size_t)m->n_layers, sizeof *m->layers);
    m->n_ops = 2 * n_layers + 2;
    m->ops = calloc((size_t)m->n_ops, sizeof *m->ops);
    int k = 0;
    for (int l = 0; l < m->n_layers; l++) {
        prof_layer *ly = &m->layers[l];
        ly->first_op = k;
        ly->n_ops = (l == 0 || l == m->n_layers - 1) ? 1 : 2;
        snprintf(ly->name, sizeof ly->name, "l%d", l);
        for (int j = 0; j < ly->n_ops; j++, k++) {
            prof_op *op = &m->ops[k];
            snprintf(op->name, sizeof op->name, "l%d.op%d", l, j);
            op->layer = l;
            op->kind = j ? PROF_OP_ACT : PROF_OP_LINEAR;
            op->fwd_flops = 1e9;
            op->bwd_in_flops = 1e9;
            op->bwd_w_flops = j ? 0 : 1e9;
            op->params = j ? 0 : 1e6;
            op->act_bytes = 1e6;
            op->out_bytes = 1e5;
            op->bytes_read = op->bytes_written = 1e5;
            if (!j) {
                op->n_gemm = 1;
                op->gemm[0] = (prof_gemm){.m = 128, .n = 1024, .k = 1024, .batch = 1};
            }
            if (k) {
                op->n_in = 1;
                op->in[0] = k - 1;
            }
        }
    }
    return m;
}

static void chain_free(prof_model *m)
{
    free(m->ops);
    free(m->layers);
    free(m);
}

static sim_plan plan_for(const prof_model *m, int pp)
{
    sim_plan p;
    sim_plan_init(&p);
    snprintf(p.model, sizeof p.model, "%s", m->spec.name);
    snprintf(p.hw, sizeof p.hw, "rtx2080ti x%d", pp);
    p.pp = pp;
    p.mbs = 2;
    p.n_mb = 8;
    p.sched = SIM_SCHED_1F1B;
    sim_plan_stages(&p, pp);
    util_err e;
    cr_assert_eq(sim_partition_even(m, pp, p.first_op, p.last_op, &e), 0,
                 "%s", e.msg);
    for (int s = 0; s < pp; s++) p.stage_device[s] = s;
    return p;
}

Test(sim_plan, round_trip)
{
    prof_model *m = chain_model(6);
    sim_plan p = plan_for(m, 4);
    p.recompute = 1;
    char *dir = test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    util_err e;
    cr_assert_eq(sim_plan_save(path, &p, m, &e), 0, "%s", e.msg);
    sim_plan q;
    cr_assert_eq(sim_plan_load(path, &q, &e), 0, "%s", e.msg);
    cr_assert_str_eq(q.model, p.model);
    cr_assert_str_eq(q.hw, p.hw);
    cr_assert_eq(q.sched, p.sched);
    cr_assert_eq(q.pp, 4);
    cr_assert_eq(q.mbs, 2);
    cr_assert_eq(q.n_mb, 8);
    cr_assert_eq(q.recompute, 1);
    cr_assert_eq(q.n_stages, 4);
    for (int s = 0; s < 4; s++) {
        cr_assert_eq(q.first_op[s], p.first_op[s]);
        cr_assert_eq(q.last_op[s], p.last_op[s]);
        cr_assert_eq(q.stage_device[s], s);
    }
    cr_assert_eq(sim_plan_check(&q, m, 4, &e), 0, "%s", e.msg);
    sim_plan_free(&q);
    sim_plan_free(&p);
    chain_free(m);
    unlink(path);
    rmdir(dir);
    free(dir);
}

Test(sim_plan, coverage_and_schedule_errors)
{
    prof_model *m = chain_model(6); /* 8 layers, 14 ops */
    sim_plan p = plan_for(m, 4);
    util_err e;
    p.first_op[2]++;
    cr_assert_eq(sim_plan_check(&p, m, 4, &e), -1);
    cr_assert(strstr(e.msg, "stages do not cover the model: stage 2 starts "
                     "at op"), "%s", e.msg);
    cr_assert_eq(e.code, UTIL_EXIT_USAGE);
    p.first_op[2]--;
    p.last_op[3] = 12;
    cr_assert_eq(sim_plan_check(&p, m, 4, &e), -1);
    cr_assert(strstr(e.msg, "they end at op 12 but chain6 has 14 ops"), "%s",
              e.msg);
    p.last_op[3] = 13;
    p.sched = SIM_SCHED_2BW;
    p.n_mb = 2;
    cr_assert_eq(sim_plan_check(&p, m, 4, &e), -1);
    cr_assert(strstr(e.msg, "2bw cannot take 2 microbatches"), "%s", e.msg);
    p.sched = SIM_SCHED_1F1B;
    cr_assert_eq(sim_plan_check(&p, m, 2, &e), -1);
    cr_assert(strstr(e.msg, "server has 2"), "%s", e.msg);
    p.stage_device[1] = 0;
    cr_assert_eq(sim_plan_check(&p, m, 4, &e), -1);
    cr_assert(strstr(e.msg, "device 1 of 4 holds no stage"), "%s", e.msg);
    sim_plan_free(&p);
    chain_free(m);
}

Test(sim_plan, partition_list_and_balanced)
{
    prof_model *m = chain_model(6); /* 8 layers */
    int f[4], l[4];
    util_err e;
    cr_assert_eq(sim_partition_list(m, "2,2,2,2", 4, f, l, &e), 0, "%s", e.msg);
    cr_assert_eq(f[1], 3); /* embed(1 op) + layer 1 (2 ops) */
    cr_assert_eq(sim_partition_list(m, "2,x,2,2", 4, f, l, &e), -1);
    cr_assert(strstr(e.msg, "item 2 'x' is not a positive number"), "%s", e.msg);
    cr_assert_eq(sim_partition_list(m, "2,2,2", 4, f, l, &e), -1);
    cr_assert(strstr(e.msg, "has 3 entries for 4 stages"), "%s", e.msg);
    cr_assert_eq(sim_partition_list(m, "2,2,2,3", 4, f, l, &e), -1);
    cr_assert(strstr(e.msg, "covers 9 layers but chain6 has 8"), "%s", e.msg);
    cr_assert_eq(sim_partition_list(m, "2,,2,2", 4, f, l, &e), -1);
    cr_assert_eq(sim_partition_even(m, 9, f, l, &e), -1);
    /* balanced: contiguous, covering, and no worse than even */
    prof_gpu g = {0};
    g.peak_flops[PROF_DT_FP16] = 1e14;
    g.mem_bw_bytes_per_s = 1e12;
    g.eff = (prof_eff){.gemm_max = 0.8, .gemm_half_mn = 64, .gemm_half_k = 64,
                      .mem_max = 0.9, .mem_half_bytes = 1e5,
                      .launch_ns = 5000};
    int bf[5], bl[5];
    cr_assert_eq(sim_partition_balanced(m, &g, 1, 5, bf, bl, &e), 0, "%s", e.msg);
    cr_assert_eq(bf[0], 0);
    cr_assert_eq(bl[4], m->n_ops - 1);
    for (int s = 1; s < 5; s++) cr_assert_eq(bf[s], bl[s - 1] + 1);
    chain_free(m);
}

Test(sim_plan, load_errors_are_located)
{
    char *dir = test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/p.json", dir);
    const char *txt =
        "{\n  \"sluice_plan\": 1,\n  \"model\": \"x\",\n  \"hw\": \"y\",\n"
        "  \"schedule\": \"1f1c\",\n  \"pp\": 2, \"mbs\": 1,\n"
        "  \"microbatches\": 4,\n  \"stages\": []\n}\n";
    util_err e;
    cr_assert_eq(util_write_atomic(path, txt, strlen(txt), &e), 0);
    sim_plan p;
    cr_assert_eq(sim_plan_load(path, &p, &e), -1);
    cr_assert(strstr(e.msg, ":5:"), "%s", e.msg);
    cr_assert(strstr(e.msg, "schedule"), "%s", e.msg);
    sim_plan_free(&p);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* A plan that loads but does not fit its model or layout: the error
 * names the file's line and the field (it named the file alone) */
Test(sim_plan, check_errors_are_located)
{
    char *dir = test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/p.json", dir);
    const char *cases[][2] = {
        {"{\"ops\": [3, 75], \"device\": 0}",
         "p.json:4:21: field 'stages[0].ops': stages do not cover the model: "
         "stage 0 starts at op 3"},
        {"{\"ops\": [0, 75], \"device\": 2}",
         "p.json:4:40: field 'stages[0].device': stage 0 is on device 2"},
        {"{\"ops\": [0, 75], \"device\": 0, \"from\": \"embed.pos\"}",
         "p.json:4:51: field 'stages[0].from': stage 0: the plan names ops "
         "'embed.pos'"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "{\"sluice_plan\": 1, \"model\": \"gpt-mini\", \"hw\": "
                   "\"cpu x1\",\n \"schedule\": \"1f1b\", \"pp\": 1, "
                   "\"mbs\": 2,\n \"microbatches\": 2,\n \"stages\": [%s]}\n",
                cases[k][0]);
        fclose(f);
        cli_expect(2, cases[k][1], "sim --plan %s", path);
        cli_expect(2, cases[k][1], "exec --plan %s --steps 1", path);
    }
    test_rm_rf(dir);
}

/* ---------------------------------------------------------------------
 * Determinism */

static char *slurp(const char *path)
{
    char *s;
    size_t n;
    util_err e;
    cr_assert_eq(util_read_file(path, &s, &n, &e), 0, "%s", e.msg);
    return s;
}

Test(sim_trace, same_input_same_bytes)
{
    char *dir = test_tmpdir();
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/a.json", dir);
    snprintf(b, sizeof b, "%s/b.json", dir);
    for (int k = 0; k < 2; k++) {
        sim_sched_opts o = {.sched = SIM_SCHED_WAVE, .pp = 4, .n_stages = 8,
                            .n_mb = 6, .waves = 1, .recompute = 1};
        int map[8];
        sim_sched_map(&o, map);
        sim_costs *c = sim_costs_uniform(8, 4, map, 70, 90, 40, 100, 1000);
        util_err e;
        sim_ir *ir = sim_schedule(&o, c, &e);
        cr_assert_not_null(ir, "%s", e.msg);
        sim_run_opts ro = {.record = 1};
        sim_engine *en = sim_engine_new(ir, c, &ro);
        sim_result r;
        cr_assert_eq(sim_engine_run(en, &r), 0);
        int64_t it = r.iteration_ns;
        /* a second run of the same engine gives the same result */
        cr_assert_eq(sim_engine_run(en, &r), 0);
        cr_assert_eq(r.iteration_ns, it);
        cr_assert_gt(r.n_mem, 0);
        cr_assert_eq(sim_trace_write(k ? b : a, ir, &r, c, &e), 0, "%s", e.msg);
        sim_engine_free(en);
        sim_ir_free(ir);
        sim_costs_free(c);
    }
    char *x = slurp(a), *y = slurp(b);
    cr_assert_str_eq(x, y);
    cr_assert(strstr(x, "\"ph\": \"X\", \"name\": \"F0\""));
    cr_assert(strstr(x, "\"ph\": \"C\", \"name\": \"memory\""));
    cr_assert(strstr(x, "\"ph\": \"s\""));
    /* the trace is valid JSON */
    json_error_t je;
    json_t *j = json_loads(x, 0, &je);
    cr_assert_not_null(j, "%d: %s", je.line, je.text);
    json_decref(j);
    free(x);
    free(y);
    unlink(a);
    unlink(b);
    rmdir(dir);
    free(dir);
}

/* ---------------------------------------------------------------------
 * Costs from an op graph that is not a chain (T5-like skip to a later
 * stage), measured-time overrides */

Test(sim_costs, non_chain_transfers)
{
    prof_model *m = chain_model(2); /* ops: 0 embed, 1-2 l1, 3-4 l2, 5 head */
    /* op 5 also reads op 1's output (as a decoder reads the encoder) */
    m->ops[5].n_in = 2;
    m->ops[5].in[1] = 1;
    m->ops[1].out_bytes = 7e5;
    prof_topo *t = prof_topo_new("three");
    prof_gpu g = {0};
    snprintf(g.name, sizeof g.name, "testgpu");
    g.mem_bytes = 11e9;
    g.peak_flops[PROF_DT_FP16] = 1e14;
    g.mem_bw_bytes_per_s = 6e11;
    g.eff = (prof_eff){.gemm_max = 0.8, .gemm_half_mn = 64, .gemm_half_k = 64,
                      .mem_max = 0.9, .mem_half_bytes = 1e5,
                      .launch_ns = 5000};
    int ty = prof_topo_add_gpu_type(t, &g);
    int sw = prof_topo_add_node(t, PROF_NODE_PCIE_SWITCH, "sw", 0);
    for (int i = 0; i < 3; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "gpu%d", i);
        int n = prof_topo_add_node(t, PROF_NODE_GPU, nm, 0);
        t->nodes[n].gpu_type = ty;
        prof_topo_add_link(t, n, sw, PROF_LINK_PCIE, 16e9, 1000);
    }
    util_err e0;
    cr_assert_eq(prof_topo_finish(t, &e0), 0, "%s", e0.msg);
    int first[3] = {0, 2, 4}, last[3] = {1, 3, 5}, map[3] = {0, 1, 2};
    sim_cost_opts o = {.mbs = 2};
    util_err e;
    sim_costs *c = sim_costs_build(m, t, 3, first, last, map, 3, &o, &e);
    cr_assert_not_null(c, "%s", e.msg);
    cr_assert_float_eq(c->xfer_bytes[0 * 3 + 1], 2 * 7e5, 1e-6);
    cr_assert_float_eq(c->xfer_bytes[0 * 3 + 2], 2 * 7e5, 1e-6);
    cr_assert_float_eq(c->xfer_bytes[1 * 3 + 2], 2 * 1e5, 1e-6);
    cr_assert_eq(c->xfer_bytes[2 * 3 + 0], 0);
    cr_assert_float_eq(c->stage[2].input_bytes, 2 * 8e5, 1e-6);
    cr_assert_gt(c->stage[0].f_ns, 0);
    /* stage 0: two ops of 1e6 parameters, fp16, Adam 16 B/param */
    cr_assert_float_eq(c->stage[0].weight_bytes, 2e6 * 2, 1e-6);
    cr_assert_float_eq(c->stage[0].opt_bytes, 2e6 * 12, 1e-6);
    cr_assert_float_eq(c->dev_capacity[1], 11e9, 1);
    sim_sched_opts so = {.sched = SIM_SCHED_1F1B, .pp = 3, .n_stages = 3,
                         .n_mb = 4};
    sim_ir *ir = sim_schedule(&so, c, &e);
    cr_assert_not_null(ir, "%s", e.msg);
    /* activations 0->2 and gradients 2->0 travel directly */
    int act02 = 0, grad20 = 0;
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *x = &ir->tasks[i];
        if (x->kind != SIM_SEND) continue;
        if (!x->grad && x->stage == 0 && x->stage2 == 2) act02++;
        if (x->grad && x->stage == 2 && x->stage2 == 0) grad20++;
    }
    cr_assert_eq(act02, 4);
    cr_assert_eq(grad20, 4);
    sim_engine *en = sim_engine_new(ir, c, NULL);
    sim_result r;
    cr_assert_eq(sim_engine_run(en, &r), 0, "%s", r.msg);
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(c);
    prof_topo_free(t);
    chain_free(m);
}

Test(sim_costs, measured_override)
{
    prof_model *m = chain_model(1);
    prof_gpu g = {0};
    snprintf(g.name, sizeof g.name, "testgpu");
    g.peak_flops[PROF_DT_FP16] = 1e14;
    g.mem_bw_bytes_per_s = 6e11;
    g.eff = (prof_eff){.gemm_max = 0.8, .gemm_half_mn = 64, .gemm_half_k = 64,
                      .mem_max = 0.9, .mem_half_bytes = 1e5,
                      .launch_ns = 5000};
    const prof_op *op = &m->ops[1];
    int64_t model = sim_op_ns(&g, PROF_DT_FP16, op, 4, SIM_F, NULL);
    /* 2*128*1024*1024 per sample, x4, at 0.8*eff of 1e14, plus a launch */
    cr_assert_gt(model, 5000);
    sim_measured t;
    sim_measured_init(&t);
    char key[128];
    sim_op_signature(&g, op, 4, SIM_F, key, sizeof key);
    sim_measured_set(&t, key, 123456);
    cr_assert_eq(sim_op_ns(&g, PROF_DT_FP16, op, 4, SIM_F, &t), 123456);
    /* other microbatch sizes and kinds keep the model */
    cr_assert_neq(sim_op_ns(&g, PROF_DT_FP16, op, 2, SIM_F, &t), 123456);
    cr_assert_neq(sim_op_ns(&g, PROF_DT_FP16, op, 4, SIM_B, &t), 123456);
    sim_measured_free(&t);
    chain_free(m);
}

/* sim --ops: an op's F, B and W on its stage's device add up to the
 * stage's tasks (no tensor parallelism: nothing else is in them), and a
 * backward with its own traffic (the loss) is priced by it. */
Test(sim_costs, op_times_add_up_to_the_stages)
{
    util_err e;
    prof_model_spec s;
    cr_assert_eq(prof_model_spec_get("gpt2", &s, &e), 0, "%s", e.msg);
    s.dtype = PROF_DT_BF16;
    prof_model *m = prof_model_build(&s, &e);
    cr_assert_not_null(m, "%s", e.msg);
    prof_topo *t = test_topo("h100-sxm", 2);
    int cut = m->layers[m->n_layers / 2].first_op;
    int first[2] = {0, cut}, last[2] = {cut - 1, m->n_ops - 1}, dev[2] = {0, 1};
    sim_cost_opts o = {.mbs = 4, .op_times = 1};
    sim_costs *c = sim_costs_build(m, t, 2, first, last, dev, 2, &o, &e);
    cr_assert_not_null(c, "%s", e.msg);
    cr_assert_eq(c->n_ops, m->n_ops);
    for (int st = 0; st < 2; st++) {
        double sum[3] = {0, 0, 0};
        for (int i = first[st]; i <= last[st]; i++)
            for (int k = 0; k < 3; k++) sum[k] += c->op_ns[3 * i + k];
        cr_expect_eq((int64_t)sum[0], c->stage[st].f_ns, "stage %d F", st);
        cr_expect_eq((int64_t)sum[1], c->stage[st].b_ns, "stage %d B", st);
        cr_expect_eq((int64_t)sum[2], c->stage[st].w_ns, "stage %d W", st);
    }
    /* the loss: memory-bound, its input gradient priced by its own
     * traffic (26 bytes a logit), not twice its forward's (22) */
    const prof_op *l = &m->ops[m->n_ops - 1];
    const prof_gpu *g = prof_topo_gpu(t, 1);
    double want = sim_op_model_ns(g, PROF_DT_BF16, l, 4, SIM_F) *
                  l->bwd_bytes / (l->bytes_read + l->bytes_written);
    double b = c->op_ns[3 * (m->n_ops - 1) + 1];
    cr_expect(fabs(b / want - 1) < 0.02, "loss B %.0f ns, want %.0f", b, want);
    cr_expect_eq(c->op_ns[3 * (m->n_ops - 1) + 2], 0, "the loss has no W");
    sim_costs_free(c);
    prof_topo_free(t);
    prof_model_free(m);
}

/* The unfused loss's transients: its forward holds 6 bytes a logit beyond
 * the stage's activations (bf16: the logits and their fp32 copy), and the
 * backward's peak is at the loss, 8 bytes a logit beyond them (the NLL's
 * gradient and the input's fp32 gradient), where the fused kernel's is
 * the logits' 16-bit gradient alone. */
Test(sim_costs, the_unfused_loss_holds_its_copies)
{
    double ws[2], fs[2];
    util_err e;
    prof_model_spec s;
    cr_assert_eq(prof_model_spec_get("gpt2", &s, &e), 0, "%s", e.msg);
    double n = (double)s.seq_len * s.vocab * 2; /* microbatch 2 */
    prof_topo *t = test_topo("h100-sxm", 1);
    for (int fused = 0; fused < 2; fused++) {
        s.dtype = PROF_DT_BF16;
        s.fused_loss = fused;
        prof_model *m = prof_model_build(&s, &e);
        cr_assert_not_null(m, "%s", e.msg);
        int first = 0, last = m->n_ops - 1, dev = 0;
        sim_cost_opts o = {.mbs = 2, .recompute = SIM_RC_NONE};
        sim_costs *c = sim_costs_build(m, t, 1, &first, &last, &dev, 1, &o,
                                       &e);
        cr_assert_not_null(c, "%s", e.msg);
        ws[fused] = c->stage[0].bwd_ws_bytes[1];
        fs[fused] = c->stage[0].fwd_scratch_bytes;
        sim_costs_free(c);
        prof_model_free(m);
    }
    cr_expect_float_eq(fs[0] / n, 6, 1e-9);
    cr_expect_float_eq(fs[1], 0, 1e-9);
    cr_expect_float_eq(ws[0] / n, 8, 1e-6, "%.4f", ws[0] / n);
    cr_expect_float_eq(ws[1] / n, 2, 1e-6, "%.4f", ws[1] / n);
    prof_topo_free(t);
}
