/* Recomputation and sequence parallelism: activation memory per GPT layer
 * against the closed forms of Korthikanti et al. (arXiv 2205.05198,
 * Table 2), per-layer checkpoints in the simulator's memory over time, the
 * 22B run of their Table 3 that fits on eight 80 GB A100s, the plan
 * file's fields and the command line's. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "planner/planner.h"
#include "tests/harness.h"

/* gpt2's first transformer layer (fp16, dropout, GELU): s = 1024,
 * h = 768, a = 12, per sample (b = 1). */
typedef struct layer_x {
    prof_model *m;
    int first, last;
    double s, h, a;
} layer_x;

static layer_x gpt_layer(void)
{
    util_err e;
    layer_x x;
    x.m = prof_model_load("gpt2", &e);
    cr_assert_not_null(x.m, "%s", e.msg);
    const prof_layer *L = &x.m->layers[1];
    cr_assert_str_eq(L->name, "l0");
    x.first = L->first_op;
    x.last = L->first_op + L->n_ops - 1;
    x.s = x.m->spec.seq_len;
    x.h = x.m->spec.hidden;
    x.a = x.m->spec.heads;
    return x;
}

static void near(double got, double want, const char *what)
{
    cr_expect(fabs(got - want) <= 1e-9 * want, "%s: %.0f bytes, closed form "
              "%.0f", what, got, want);
}

/* Table 2, per layer, in bytes: no parallelism sbh(34 + 5as/h); tensor
 * parallel sbh(10 + 24/t + 5as/(ht)); with sequence parallelism
 * sbh(34/t + 5as/(ht)); selective sbh(10 + 24/t), with sequence
 * parallelism sbh(34/t); full 2sbh (2sbh/t with sequence parallelism, the
 * layer input being split). */
Test(recompute, korthikanti_table2_per_layer)
{
    layer_x x = gpt_layer();
    double s = x.s, h = x.h, a = x.a, sh = s * h, core = 5 * a * s * s;
    for (int t = 1; t <= 8; t *= 2) {
        sim_act n = sim_act_range(x.m, x.first, x.last, t, 0, SIM_RC_NONE);
        near(n.act, sh * (t > 1 ? 10 + 24.0 / t : 34) + core / t, "none");
        sim_act sel = sim_act_range(x.m, x.first, x.last, t, 0,
                                    SIM_RC_SELECTIVE);
        near(sel.act, n.act, "selective: all activations");
        near(sel.keep, sh * (t > 1 ? 10 + 24.0 / t : 34), "selective keeps");
        near(sel.rec_ws, core / t, "selective recomputes the core");
        sim_act full = sim_act_range(x.m, x.first, x.last, t, 0, SIM_RC_FULL);
        near(full.keep, 2 * sh, "full keeps the layer input");
        near(full.rec_ws, n.act - 2 * sh, "full recomputes the rest");
        if (t == 1) continue;
        sim_act sp = sim_act_range(x.m, x.first, x.last, t, 1, SIM_RC_NONE);
        near(sp.act, sh * 34 / t + core / t, "sequence parallel");
        sim_act sps = sim_act_range(x.m, x.first, x.last, t, 1,
                                    SIM_RC_SELECTIVE);
        near(sps.keep, sh * 34 / t, "sequence parallel + selective");
        sim_act spf = sim_act_range(x.m, x.first, x.last, t, 1, SIM_RC_FULL);
        near(spf.keep, 2 * sh / t, "sequence parallel + full");
    }
    /* the forward of a checkpointed layer never holds all of it */
    sim_act full = sim_act_range(x.m, x.first, x.last, 1, 0, SIM_RC_FULL);
    cr_expect_gt(full.fwd_ws, 0);
    cr_expect_lt(full.fwd_ws, full.rec_ws);
    prof_model_free(x.m);
}

/* Selective recomputation reruns the attention core's forward only, and
 * none of the op roles it picks is outside the core. */
Test(recompute, selective_is_the_attention_core)
{
    layer_x x = gpt_layer();
    int n = 0;
    for (int i = 0; i < x.m->n_ops; i++) {
        prof_op_role r = x.m->ops[i].role;
        int core = r == PROF_ROLE_ATTN_SCORES || r == PROF_ROLE_ATTN_SOFTMAX ||
                   r == PROF_ROLE_ATTN_CONTEXT;
        cr_expect_eq(sim_op_recomputed(x.m, i, SIM_RC_SELECTIVE), core,
                     "%s", x.m->ops[i].name);
        cr_expect_eq(sim_op_recomputed(x.m, i, SIM_RC_NONE), 0);
        n += core;
    }
    cr_expect_eq(n, 3 * x.m->spec.layers);
    /* embeddings and head are never recomputed; every layer op is */
    cr_expect_eq(sim_op_recomputed(x.m, 0, SIM_RC_FULL), 0);
    cr_expect_eq(sim_op_recomputed(x.m, x.m->n_ops - 1, SIM_RC_FULL), 0);
    for (int i = x.first; i <= x.last; i++)
        cr_expect_eq(sim_op_recomputed(x.m, i, SIM_RC_FULL), 1);
    prof_model_free(x.m);
}

typedef struct one {
    sim_costs *c;
    double peak, stat;
    int64_t rec_ns;
} one;

/* gpt2 on one GPU, one stage, mbs samples, one microbatch: the engine's
 * peak and the static part. */
static one run_single(const prof_model *m, const prof_topo *t, int mbs,
                      int rc)
{
    one o;
    int first = 0, last = m->n_ops - 1, dev = 0;
    sim_cost_opts co = {.mbs = mbs, .recompute = rc};
    util_err e;
    o.c = sim_costs_build(m, t, 1, &first, &last, &dev, 1, &co, &e);
    cr_assert_not_null(o.c, "%s", e.msg);
    sim_sched_opts so = {.sched = SIM_SCHED_1F1B, .pp = 1, .n_stages = 1,
                         .n_mb = 1, .recompute = rc};
    sim_ir *ir = sim_schedule(&so, o.c, &e);
    cr_assert_not_null(ir, "%s", e.msg);
    sim_engine *en = sim_engine_new(ir, o.c, NULL);
    sim_result r;
    cr_assert_eq(sim_engine_run(en, &r), 0, "%s", r.msg);
    o.peak = r.dev[0].peak_bytes;
    o.stat = r.dev[0].static_bytes;
    o.rec_ns = r.dev[0].recompute_ns;
    sim_engine_free(en);
    sim_ir_free(ir);
    return o;
}

/* With full recomputation a stage of L layers keeps L checkpoints of
 * s*b*h*2 bytes per microbatch (with what embeddings and head keep) plus
 * one layer's working set; one stage saves memory, and selective lies in
 * between. The backward's own peak comes first, at the loss: beside the
 * fp32 log-probabilities it keeps, the NLL's fp32 gradient and the
 * logits' (s*b*V*8 bytes; PyTorch's cross-entropy under autocast). */
Test(recompute, checkpoints_per_layer_in_memory_over_time)
{
    prof_topo *t = test_topo("v100-sxm2-32gb", 1);
    layer_x x = gpt_layer();
    const prof_model *m = x.m;
    int b = 4, L = m->spec.layers;
    double sbh2 = x.s * b * x.h * 2, layer = 0, outside = 0;
    for (int i = 0; i < m->n_ops; i++) {
        if (i >= x.first && i <= x.last) layer += m->ops[i].act_bytes * b;
        if (!sim_op_recomputed(m, i, SIM_RC_FULL))
            outside += m->ops[i].act_bytes * b;
    }
    double logits = x.s * b * m->spec.vocab * 8;
    one none = run_single(m, t, b, SIM_RC_NONE);
    one full = run_single(m, t, b, SIM_RC_FULL);
    one sel = run_single(m, t, b, SIM_RC_SELECTIVE);
    near(none.peak - none.stat, L * layer + outside + logits,
         "no recomputation");
    near(full.c->stage[0].keep_bytes, L * sbh2 + outside, "checkpoints");
    near(full.c->stage[0].rec_ws_bytes, layer - sbh2, "one layer");
    near(full.peak - full.stat, L * sbh2 + outside + (layer - sbh2) + logits,
         "full recomputation's peak");
    cr_expect_lt(full.peak, sel.peak);
    cr_expect_lt(sel.peak, none.peak);
    /* the extra time: the layers' forward again, the attention core's */
    cr_expect_eq(full.rec_ns, full.c->stage[0].r_ns + full.c->stage[0].task_ns);
    cr_expect_lt(full.c->stage[0].r_ns, full.c->stage[0].f_ns);
    cr_expect_lt(sel.c->stage[0].r_ns, full.c->stage[0].r_ns / 2);
    cr_expect_gt(sel.c->stage[0].r_ns, 0);
    sim_costs_free(none.c);
    sim_costs_free(full.c);
    sim_costs_free(sel.c);
    prof_model_free(x.m);
    prof_topo_free(t);
}

/* A 1F1B run of model m over pp stages cut at first/last, a device
 * each, of n_mb microbatches of mbs, its memory over time recorded:
 * costs, IR, engine and result for the caller (rec_free). */
typedef struct rec_run {
    sim_costs *c;
    sim_ir *ir;
    sim_engine *en;
    sim_result r;
} rec_run;

static void rec_1f1b(const prof_model *m, const prof_topo *t, int pp,
                     int *first, int *last, int mbs, int n_mb, rec_run *o)
{
    util_err e;
    int dev[16];
    cr_assert_leq(pp, 16);
    for (int s = 0; s < pp; s++) dev[s] = s;
    sim_cost_opts co = {.mbs = mbs};
    o->c = sim_costs_build(m, t, pp, first, last, dev, pp, &co, &e);
    cr_assert_not_null(o->c, "%s", e.msg);
    sim_sched_opts so = {.sched = SIM_SCHED_1F1B, .pp = pp, .n_stages = pp,
                         .n_mb = n_mb};
    o->ir = sim_schedule(&so, o->c, &e);
    cr_assert_not_null(o->ir, "%s", e.msg);
    sim_run_opts ro = {.record = 1};
    o->en = sim_engine_new(o->ir, o->c, &ro);
    cr_assert_eq(sim_engine_run(o->en, &o->r), 0, "%s", o->r.msg);
}

static void rec_free(rec_run *o)
{
    sim_engine_free(o->en);
    sim_ir_free(o->ir);
    sim_costs_free(o->c);
}

/* A forward's activations grow as it runs and a backward's shrink, as a
 * framework allocates and frees them op by op (the executor's measured
 * curve has that shape): memory steps up inside the forward and down
 * inside the backward, not only at their edges, and the peak is that of
 * everything kept at once. */
Test(recompute, activations_grow_in_the_forward_and_shrink_in_the_backward)
{
    prof_topo *t = test_topo("v100-sxm2-32gb", 1);
    util_err e;
    prof_model *m = prof_model_load("gpt2", &e);
    cr_assert_not_null(m, "%s", e.msg);
    int first = 0, last = m->n_ops - 1;
    rec_run run;
    rec_1f1b(m, t, 1, &first, &last, 4, 1, &run);
    const sim_costs *c = run.c;
    const sim_ir *ir = run.ir;
    const sim_result r = run.r;
    int f = -1, bw = -1;
    for (int i = 0; i < ir->n_tasks; i++) {
        if (ir->tasks[i].kind == SIM_F) f = i;
        if (ir->tasks[i].kind == SIM_BW) bw = i;
    }
    cr_assert(f >= 0 && bw >= 0);
    /* beside what the forward keeps, the loss's transient from its
     * start to its end */
    double stat = r.dev[0].static_bytes + c->stage[0].fwd_scratch_bytes,
           act = c->stage[0].act_bytes;
    /* the backward's first step once ops holding a quarter of what it
     * frees have run their backward (the loss's, first, takes an eighth
     * of its time and holds less: equal steps of the time would free
     * too early) */
    double first_step = -1;
    for (int k = 0; k < 2; k++) {
        int id = k ? bw : f, n = 0;
        double prev = k ? HUGE_VAL : -HUGE_VAL;
        for (int i = 0; i < r.n_mem; i++) {
            const sim_mem_point *p = &r.mem[i];
            if (p->t_ns <= r.start_ns[id] || p->t_ns >= r.end_ns[id])
                continue;
            if (k && first_step < 0)
                first_step = (double)(p->t_ns - r.start_ns[id]) /
                             (double)(r.end_ns[id] - r.start_ns[id]);
            cr_expect(k ? p->bytes < prev : p->bytes > prev, "%s at %lld "
                      "ns: %.0f bytes after %.0f", k ? "backward" : "forward",
                      (long long)p->t_ns, p->bytes, prev);
            prev = p->bytes;
            n++;
        }
        cr_expect_geq(n, 2, "%s: %d steps inside it", k ? "backward" :
                      "forward", n);
        /* a forward holds all it keeps before its end (a step early,
         * never under what it holds) */
        if (!k) cr_expect(fabs(prev - (stat + act)) <= 1e-9 * act,
                          "the forward's last step %.0f bytes (static and "
                          "scratch %.0f, keeps %.0f, peak %.0f)", prev, stat,
                          act, r.dev[0].peak_bytes);
    }
    double done = 0, all = 0;
    for (int i = last; i >= first; i--) {
        all += m->ops[i].act_bytes;
        if (c->bwd_done[2 * i] <= first_step + 1e-9)
            done += m->ops[i].act_bytes;
    }
    cr_expect_geq(done, all / 4, "the backward's first step at %.3f of "
                  "it, with %.0f of %.0f bytes' ops done", first_step, done,
                  all);
    cr_expect_gt(c->bwd_done[2 * last], first_step / 4);
    cr_expect_geq(r.dev[0].peak_bytes, stat + act);
    cr_expect_gt(c->stage[0].fwd_scratch_bytes, 0);
    rec_free(&run);
    prof_model_free(m);
    prof_topo_free(t);
}

/* Sequence parallelism moves the same bytes: each forward or backward
 * all-reduce becomes a reduce-scatter and an all-gather. */
Test(recompute, sequence_parallel_same_volume)
{
    prof_topo *t = test_topo("a100-sxm-80gb", 8);
    layer_x x = gpt_layer();
    int first = 0, last = x.m->n_ops - 1, dev = 0;
    util_err e;
    sim_cost_opts co = {.mbs = 2, .tp = 8};
    sim_costs *a = sim_costs_build(x.m, t, 1, &first, &last, &dev, 1, &co, &e);
    co.sp = 1;
    sim_costs *b = sim_costs_build(x.m, t, 1, &first, &last, &dev, 1, &co, &e);
    cr_assert(a && b);
    /* each collective is rounded to the ns on its own; the same bytes,
     * but an all-reduce becomes two collectives (a reduce-scatter and an
     * all-gather), each with NCCL's base latency of 8.4 us */
    double ops = 2 * x.m->n_ops, nf = 0, nb = 0;
    for (int i = 0; i < x.m->n_ops; i++) {
        double fb, bb;
        sim_tp_allreduces(x.m, i, &fb, &bb);
        nf += bb > 0;
        nb += fb > 0;
    }
    cr_expect(fabs((double)(b->stage[0].tp_f_ns - a->stage[0].tp_f_ns) -
                   8400 * nf) <= ops,
              "%ld vs %ld", (long)a->stage[0].tp_f_ns, (long)b->stage[0].tp_f_ns);
    cr_expect(fabs((double)(b->stage[0].tp_b_ns - a->stage[0].tp_b_ns) -
                   8400 * nb) <= ops);
    cr_expect_gt(a->stage[0].tp_f_ns, 0);
    cr_expect_lt(b->stage[0].act_bytes, a->stage[0].act_bytes);
    /* norms and dropouts run on 1/t of the tokens (the compute; the
     * collectives pay the extra base latencies above) */
    cr_expect_lt(b->stage[0].f_ns - b->stage[0].tp_f_ns,
                 a->stage[0].f_ns - a->stage[0].tp_f_ns);
    sim_costs_free(a);
    sim_costs_free(b);
    prof_model_free(x.m);
    prof_topo_free(t);
}

/* Sequence parallelism as sluice's executor runs it (sp_exposed): each
 * column-parallel linear's input all-gathered again for its weight
 * gradient, and each norm's weight gradient all-reduced over the group,
 * in the W part, every microbatch; the forward and the input gradient
 * as before. GPT-2's gathered inputs and scattered outputs are all one
 * size (s b h), so the gathers again are the forward's gathers: half its
 * collectives. A norm's all-reduce of 2h weights costs NCCL's base
 * latency and 2(t-1) steps, each no longer than a step of those gathers.
 * Weights that do not train add none. */
Test(recompute, sequence_parallel_as_the_executor_runs_it)
{
    prof_topo *t = test_topo("a100-sxm-80gb", 8);
    layer_x x = gpt_layer();
    int first = 0, last = x.m->n_ops - 1, dev = 0, T = 8;
    util_err e;
    sim_cost_opts co = {.mbs = 2, .tp = T, .sp = 1};
    sim_costs *a = sim_costs_build(x.m, t, 1, &first, &last, &dev, 1, &co, &e);
    co.sp_exposed = 1;
    sim_costs *b = sim_costs_build(x.m, t, 1, &first, &last, &dev, 1, &co, &e);
    cr_assert(a && b, "%s", e.msg);
    const sim_stage_cost *sa = &a->stage[0], *sb = &b->stage[0];
    cr_expect_eq(sa->tp_w_ns, 0);
    cr_expect_eq(sb->f_ns, sa->f_ns);
    cr_expect_eq(sb->b_ns, sa->b_ns);
    cr_expect_eq(sb->bs_ns, sa->bs_ns);
    cr_expect_eq(sb->w_ns - sa->w_ns, sb->tp_w_ns);
    cr_expect_eq(sb->ws_ns - sa->ws_ns, sb->tp_w_ns);
    int nf = 0, nb = 0, norms = 0;
    for (int i = 0; i < x.m->n_ops; i++) {
        double fb, bb;
        sim_tp_allreduces(x.m, i, &fb, &bb);
        nf += bb > 0;
        nb += fb > 0;
        norms += x.m->ops[i].role == PROF_ROLE_NORM;
    }
    cr_assert(nf > 0 && nf == nb && norms > 0, "%d %d %d", nf, nb, norms);
    double gathers = sa->tp_f_ns / 2.0, one = sa->tp_f_ns / (2.0 * nf);
    double sums = sb->tp_w_ns - gathers;
    cr_expect(sums >= norms * 8400.0 - 2 * nf, "%.0f ns for %d norms", sums,
              norms);
    cr_expect(sums <= norms * (8400.0 + 2 * (one - 8400)) + 2 * nf,
              "%.0f ns for %d norms (a gather %.0f)", sums, norms, one);
    /* frozen: no weight gradients, so nothing to gather or sum (on a
     * stage of the frozen layers; the final norm after them trains) */
    prof_finetune ft;
    cr_assert_eq(prof_finetune_parse("frozen:12", &ft, &e), 0, "%s", e.msg);
    prof_model *fz = prof_model_load("gpt2", &e);
    cr_assert(fz && !prof_model_finetune(fz, &ft, &e), "%s", e.msg);
    int lf = fz->layers[12].first_op + fz->layers[12].n_ops - 1;
    int f2[2] = {0, lf + 1}, l2[2] = {lf, fz->n_ops - 1}, d2[2] = {0, 1};
    co.tp = 4;
    sim_costs *c = sim_costs_build(fz, t, 2, f2, l2, d2, 2, &co, &e);
    cr_assert(c, "%s", e.msg);
    cr_expect_eq(c->stage[0].tp_w_ns, 0, "%ld", (long)c->stage[0].tp_w_ns);
    cr_expect_gt(c->stage[1].tp_w_ns, 0);
    sim_costs_free(a);
    sim_costs_free(b);
    sim_costs_free(c);
    prof_model_free(fz);
    prof_model_free(x.m);
    prof_topo_free(t);
}

/* Korthikanti et al., Table 3: the 22B GPT, tensor-parallel 8, batch 4 on
 * eight 80 GB A100s ran with full recomputation and with sequence
 * parallelism and selective recomputation; without recomputation it
 * does not fit (their Figure 7): 1 when a plan keeps every state on the
 * GPUs, 2 when one fits only with its optimizer state on the host. */
static int plan_22b(int rc, int sp, double *peak)
{
    util_err e;
    prof_model *m = prof_model_load("tests/data/gpt-22b.json", &e);
    cr_assert_not_null(m, "%s", e.msg);
    prof_topo *t = test_topo("a100-sxm-80gb", 8);
    plan_opts o;
    plan_opts_init(&o);
    o.batch = 4;
    o.mbs = 4;
    o.tp = 8;
    o.pp = 1;
    o.recompute = rc;
    o.sp = sp;
    o.sched_mask = 1u << SIM_SCHED_1F1B;
    plan_result r;
    cr_assert_eq(plan_search(m, t, m->spec.name, "test", &o, &r, &e), 0,
                 "%s", e.msg);
    /* 2: found with the optimizer state on the host (stage tiers) */
    int found = r.found ? 1 + sim_plan_tiered(&r.alt[r.best].plan) : 0;
    *peak = found ? r.alt[r.best].peak_bytes : 0;
    plan_result_free(&r);
    prof_topo_free(t);
    prof_model_free(m);
    return found;
}

Test(recompute, korthikanti_22b_fits)
{
    double full, sel, none;
    cr_expect_eq(plan_22b(SIM_RC_FULL, 0, &full), 1,
                 "full recomputation fits");
    cr_expect_eq(plan_22b(SIM_RC_SELECTIVE, 1, &sel), 1,
                 "SP + selective fits");
    /* keeping every activation, the GPUs hold the run only with the
     * optimizer state moved to the host */
    cr_expect_eq(plan_22b(SIM_RC_NONE, 0, &none), 2,
                 "nothing kept out fits with every state on the GPUs?");
    cr_expect_lt(full, sel);
    cr_expect_lt(sel, 79.0 * 1024 * 1024 * 1024);
}

/* The plan file: modes and sequence parallelism round-trip, the boolean
 * of older files still reads, bad values are located. */
static int load_text(const char *dir, const char *txt, sim_plan *p,
                     util_err *e)
{
    char path[512];
    snprintf(path, sizeof path, "%s/p.json", dir);
    cr_assert_eq(util_write_atomic(path, txt, strlen(txt), e), 0);
    int rc = sim_plan_load(path, p, e);
    unlink(path);
    return rc;
}

#define PLAN_HEAD "{\n  \"sluice_plan\": 1, \"model\": \"gpt2\",\n" \
    "  \"hw\": \"a100-sxm-80gb x2\", \"schedule\": \"1f1b\",\n" \
    "  \"pp\": 1, \"mbs\": 1, \"microbatches\": 1, \"tp\": %d,\n"
#define PLAN_TAIL "  \"stages\": [{\"ops\": [0, 3], \"device\": 0}]\n}\n"

Test(recompute, plan_file_fields)
{
    char *dir = test_tmpdir(), txt[1024];
    sim_plan p, q;
    util_err e;
    const char *modes[] = {"\"full\"", "\"selective\"", "\"none\"", "true",
                           "false"};
    int want[] = {SIM_RC_FULL, SIM_RC_SELECTIVE, SIM_RC_NONE, SIM_RC_FULL,
                  SIM_RC_NONE};
    for (int k = 0; k < 5; k++) {
        snprintf(txt, sizeof txt, PLAN_HEAD "  \"recompute\": %s,\n"
                 "  \"sequence_parallel\": true,\n" PLAN_TAIL, 2, modes[k]);
        cr_assert_eq(load_text(dir, txt, &p, &e), 0, "%s", e.msg);
        cr_expect_eq(p.recompute, want[k], "%s", modes[k]);
        cr_expect_eq(p.sp, 1);
        /* and back */
        char path[512];
        snprintf(path, sizeof path, "%s/q.json", dir);
        cr_assert_eq(sim_plan_save(path, &p, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(sim_plan_load(path, &q, &e), 0, "%s", e.msg);
        cr_expect_eq(q.recompute, p.recompute);
        cr_expect_eq(q.sp, 1);
        unlink(path);
        sim_plan_free(&p);
        sim_plan_free(&q);
    }
    struct { const char *field; int tp; const char *name, *msg; } bad[] = {
        {"\"recompute\": \"partial\",\n", 2, "recompute", "\"selective\""},
        {"\"recompute\": 3,\n", 2, "recompute", "\"selective\""},
        {"\"sequence_parallel\": \"yes\",\n", 2, "sequence_parallel", ""},
        {"\"sequence_parallel\": true,\n", 1, "sequence_parallel",
         "needs tensor parallelism"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        snprintf(txt, sizeof txt, PLAN_HEAD "  %s" PLAN_TAIL, bad[k].tp,
                 bad[k].field);
        cr_expect_eq(load_text(dir, txt, &p, &e), -1, "%s", bad[k].field);
        cr_expect_eq(e.code, UTIL_EXIT_USAGE);
        cr_expect(strstr(e.msg, "p.json:5:"), "%s", e.msg);
        cr_expect(strstr(e.msg, bad[k].msg), "%s", e.msg);
        char f[64];
        snprintf(f, sizeof f, "field '%s'", bad[k].name);
        cr_expect(strstr(e.msg, f), "%s", e.msg);
        sim_plan_free(&p);
    }
    test_rm_rf(dir);
}

Test(recompute, command_line)
{
    cli_result r = cli_run("sim --hw a100-sxm-80gb x2 --model gpt2 "
                           "--schedule 1f1b --pp 2 --mbs 1 --microbatches 2 "
                           "--recompute partial");
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "--recompute 'partial': expected full, selective "
                     "or none"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("sim --hw a100-sxm-80gb x2 --model gpt2 --schedule 1f1b "
                "--pp 2 --mbs 1 --microbatches 2 --sequence-parallel");
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "needs tensor parallelism"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("sim --hw a100-sxm-80gb x2 --model gpt2 --schedule 1f1b "
                "--pp 1 --tp 2 --mbs 1 --microbatches 2 --recompute selective "
                "--sequence-parallel --json");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\"recompute\": \"selective\""), "%s", r.out);
    cr_expect(strstr(r.out, "\"sequence_parallel\": true"), "%s", r.out);
    cli_result_free(&r);
    r = cli_run("plan --hw a100-sxm-80gb x2 --model gpt2 --batch 4 --tp 2 "
                "--recompute --sequence-parallel --no-progress --json");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\"recompute\": \"full\""), "%s", r.out);
    cli_result_free(&r);
}

/* Sequence parallelism splits each sequence over the tensor-parallel
 * group (Megatron-LM asserts it divides): 15 tokens over 2 ranks are
 * refused by sim, and plan answers without it. */
Test(recompute, sequence_parallel_splits_each_sequence)
{
    char *dir = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/odd.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"name\": \"gpt-odd\", \"family\": \"gpt\", \"hidden\": 32, "
          "\"layers\": 2, \"heads\": 4, \"ffn\": 64, \"vocab\": 256, "
          "\"seq_len\": 15, \"max_pos\": 32, \"batch\": 8, "
          "\"dtype\": \"fp32\"}\n", f);
    cr_assert_eq(fclose(f), 0);
    cli_result r = cli_run("sim --hw cpu x2 --model %s --schedule gpipe "
                           "--pp 1 --tp 2 --mbs 1 --microbatches 2 "
                           "--sequence-parallel", path);
    cr_expect_eq(r.code, 2, "%s", r.out);
    cr_expect(strstr(r.err, "tp 2 must divide its 15 tokens"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("plan --hw cpu x2 --model %s --tp 2 --no-progress --json",
                path);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\"sequence_parallel\": false"), "%s", r.out);
    cr_expect(!strstr(r.out, "\"sequence_parallel\": true"), "%s", r.out);
    cli_result_free(&r);
    test_rm_rf(dir);
}

/* A forward's input, received from the stage before, is among what it
 * keeps: the device holds it from the receive on, and the forward's
 * start never gives it back before its steps take it again (the first
 * forward of each stage, on a device that does nothing else then),
 * even where the ops that begin the stage keep less than it. The
 * recorded curve is in time order, and its top is each device's peak. */
Test(recompute, a_received_input_is_held_through_the_forwards_start)
{
    prof_topo *t = test_topo("a100-sxm-80gb", 8);
    const char *models[] = {"gpt-tiny", "llama-tiny", "gpt-mini"};
    int checked = 0;
    for (int k = 0; k < 3; k++) {
        util_err e;
        prof_model *m = prof_model_load(models[k], &e);
        cr_assert_not_null(m, "%s", e.msg);
        for (int pp = 2; pp <= 8; pp++) {
            int first[8], last[8];
            /* cut between any ops, as sluice sim's default */
            cr_assert_eq(sim_partition_balanced(m, prof_topo_gpu(t, 0), 1,
                                                pp, first, last, &e), 0,
                         "%s", e.msg);
            rec_run run;
            rec_1f1b(m, t, pp, first, last, 1, 2 * pp, &run);
            const sim_ir *ir = run.ir;
            const sim_result r = run.r;
            /* the curve in time order (a device's steps apply where
             * its memory next changes, after the others' points), its
             * top each device's peak */
            double top[8] = {0};
            for (int j = 0; j < r.n_mem; j++) {
                const sim_mem_point *p = &r.mem[j];
                cr_expect(!j || p->t_ns >= r.mem[j - 1].t_ns, "%s pp %d: "
                          "point %d at %lld ns after one at %lld", models[k],
                          pp, j, (long long)p->t_ns,
                          (long long)r.mem[j - 1].t_ns);
                top[p->device] = fmax(top[p->device], p->bytes);
            }
            for (int d = 0; d < pp; d++)
                cr_expect_eq(top[d], r.dev[d].peak_bytes, "%s pp %d device "
                             "%d: curve's top %.0f, peak %.0f", models[k],
                             pp, d, top[d], r.dev[d].peak_bytes);
            for (int i = 0; i < ir->n_tasks; i++) {
                const sim_task *x = &ir->tasks[i];
                if (x->kind != SIM_F || x->mb != 0 || x->stage == 0)
                    continue;
                double before = -1, at = -1;
                for (int j = 0; j < r.n_mem; j++) {
                    const sim_mem_point *p = &r.mem[j];
                    if (p->device != x->device) continue;
                    if (p->t_ns < r.start_ns[i]) before = p->bytes;
                    else if (p->t_ns == r.start_ns[i]) at = p->bytes;
                }
                if (before < 0 || at < 0) continue;
                cr_expect_geq(at, before, "%s pp %d: stage %d's first "
                              "forward starts at %.0f bytes, %.0f before",
                              models[k], pp, x->stage, at, before);
                checked++;
            }
            rec_free(&run);
        }
        prof_model_free(m);
    }
    cr_expect_gt(checked, 20);
    prof_topo_free(t);
}
