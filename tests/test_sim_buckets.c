/* Gradient buckets (--grad-bucket): the data-parallel all-reduce of a
 * stage in pieces formed as PyTorch's DDP forms them, each ring started
 * as the backward has computed its bucket. Checked against the greedy
 * rule that defines the buckets, against the backward's share of time
 * where each ring may start, and against the one ring a stage it
 * replaces. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "planner/planner.h"
#include "tests/harness.h"

typedef struct brun {
    prof_model *m;
    prof_topo *t;
    sim_plan p;
    sim_costs *c;
    sim_ir *ir;
    sim_engine *en;
    sim_result r;
} brun;

/* model on n GPUs of type gpu: pp even stages, dp replicas, microbatch
 * mbs x nmb, 1F1B, the all-reduce in buckets of `bucket` bytes. */
static void bsim(const char *model, const char *gpu, int n, int pp, int dp,
                 int mbs, int nmb, double bucket, brun *b)
{
    util_err e;
    memset(b, 0, sizeof *b);
    b->m = prof_model_load(model, &e);
    cr_assert_not_null(b->m, "%s", e.msg);
    b->t = test_topo(gpu, n);
    sim_plan *p = &b->p;
    sim_plan_init(p);
    snprintf(p->model, sizeof p->model, "%s", model);
    p->sched = SIM_SCHED_1F1B;
    p->pp = pp;
    p->dp = dp;
    p->mbs = mbs;
    p->n_mb = nmb;
    p->recompute = SIM_RC_NONE;
    p->grad_bucket = bucket;
    sim_plan_stages(p, pp);
    cr_assert_eq(sim_partition_even(b->m, pp, p->first_op, p->last_op, &e),
                 0, "%s", e.msg);
    for (int i = 0; i < pp; i++) p->stage_device[i] = i;
    sim_sched_opts so = sim_plan_sched_opts(p);
    sim_cost_opts co = sim_plan_cost_opts(p);
    b->c = sim_costs_build(b->m, b->t, p->n_stages, p->first_op, p->last_op,
                           p->stage_device, pp, &co, &e);
    cr_assert_not_null(b->c, "%s", e.msg);
    b->ir = sim_schedule(&so, b->c, &e);
    cr_assert_not_null(b->ir, "%s", e.msg);
    b->en = sim_engine_new(b->ir, b->c, NULL);
    cr_assert_eq(sim_engine_run(b->en, &b->r), 0, "%s", b->r.msg);
}

static void bfree(brun *b)
{
    sim_engine_free(b->en);
    sim_ir_free(b->ir);
    sim_costs_free(b->c);
    sim_plan_free(&b->p);
    prof_topo_free(b->t);
    prof_model_free(b->m);
}

/* DDP's rule: walking a stage's ops from its last, a bucket closes at the
 * op whose gradient fills it to the cap (the first bucket's cap 1 MiB;
 * the cap at least a SIM_MAX_BUCKETS-th of the stage's gradient),
 * so every bucket but the stage's last reaches its cap and none does
 * before its lowest op; together they cover the stage, each its share
 * of the gradient bytes. */
Test(buckets, partition_is_ddps)
{
    const double MiB = 1024.0 * 1024;
    double caps[] = {25 * MiB, 4 * MiB};
    for (int k = 0; k < 2; k++) {
        brun b;
        bsim("gpt2", "a100-sxm-80gb", 8, 2, 4, 1, 2, caps[k], &b);
        const sim_costs *c = b.c;
        cr_assert_not_null(c->bkt_off);
        double wb = prof_dtype_bytes(b.m->spec.dtype);
        for (int s = 0; s < c->n_model_stages; s++) {
            int first = c->stage[s].first_op, last = c->stage[s].last_op;
            int b0 = c->bkt_off[s], b1 = c->bkt_off[s + 1];
            cr_assert_gt(b1 - b0, 2, "stage %d: %d buckets", s, b1 - b0);
            double total = 0, shares = 0;
            for (int i = first; i <= last; i++)
                total += prof_op_train_params(&b.m->ops[i]) * wb;
            for (int q = b0; q < b1; q++) {
                int hi = q > b0 ? c->bkt_lo[q - 1] - 1 : last, lo = c->bkt_lo[q];
                cr_assert_leq(lo, hi, "stage %d bucket %d", s, q - b0);
                double big = fmax(caps[k], total / SIM_MAX_BUCKETS);
                double cap = q == b0 ? fmin(big, MiB) : big;
                double bytes = 0, above = 0;
                for (int i = lo; i <= hi; i++) {
                    double ob = prof_op_train_params(&b.m->ops[i]) * wb;
                    bytes += ob;
                    if (i > lo) above += ob;
                }
                cr_expect_lt(above, cap, "stage %d bucket %d full before its "
                             "lowest op", s, q - b0);
                if (q < b1 - 1)
                    cr_expect_geq(bytes, cap, "stage %d bucket %d: %.0f bytes",
                                  s, q - b0, bytes);
                cr_expect_float_eq(c->bkt_share[q], bytes / total, 1e-12);
                shares += c->bkt_share[q];
            }
            cr_expect_eq(c->bkt_lo[b1 - 1], first);
            cr_expect_float_eq(shares, 1, 1e-12);
        }
        bfree(&b);
    }
}

/* Each bucket's ring starts no sooner than its backward has computed the
 * bucket's ops (the backward's time spread over its ops as they cost),
 * the first one exactly then (nothing else is on the collective stream);
 * the ring after the backward is what the iteration still waits for,
 * less than the whole gradient's ring. GPT-2 data parallel on eight
 * PCIe cards, where overlap matters most. */
Test(buckets, rings_start_as_the_backward_computes_them)
{
    brun b, one;
    bsim("gpt2", "rtx2080ti", 8, 1, 8, 4, 1, SIM_GRAD_BUCKET_DDP, &b);
    bsim("gpt2", "rtx2080ti", 8, 1, 8, 4, 1, 0, &one);
    const sim_ir *ir = b.ir;
    int rings = 0, first_seen = 0;
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->kind != SIM_SEND || t->comm != SIM_COMM_DP || t->mb != 0)
            continue;
        cr_assert_gt(t->bkt_ops, 0, "a ring of the whole stage");
        for (int k = 0; k < t->n_dep; k++) {
            int d = ir->deps[t->dep_off + k];
            if (ir->tasks[d].kind != SIM_BW || ir->tasks[d].device != t->device)
                continue;
            int64_t s0 = b.r.start_ns[d], dur = b.r.end_ns[d] - s0;
            int64_t at = s0 + llround(b.c->bwd_done[2 * (size_t)t->bkt_first] *
                                      (double)dur);
            cr_expect_geq(b.r.start_ns[i], at, "ring at op %d", t->bkt_first);
            if (!first_seen && t->device == 0) {
                cr_expect_eq(b.r.start_ns[i], at, "the first ring");
                first_seen = 1;
            }
            if (t->device == 0) rings++;
        }
    }
    cr_expect_gt(rings, 4, "%d rings", rings);
    cr_expect(first_seen);
    /* 309 ms with one ring after the backward; with DDP's buckets the
     * embedding's (the last computed, 77 MB) is what stays exposed */
    cr_expect_lt(b.r.iteration_ns, one.r.iteration_ns);
    const sim_dev_stats *d = &b.r.dev[0], *o = &one.r.dev[0];
    cr_expect_eq(d->compute_ns, o->compute_ns);
    /* less exposed than the whole ring, more than the last bucket's own */
    double ex = (double)d->comm_exp_ns[SIM_COMM_DP],
           whole = (double)o->comm_exp_ns[SIM_COMM_DP],
           last = b.c->bkt_share[b.c->bkt_off[1] - 1];
    cr_expect(ex < 0.6 * whole && ex >= last * whole, "exposed %.0f of %.0f "
              "ns; the last bucket %.1f%% of the gradient", ex, whole,
              100 * last);
    bfree(&b);
    bfree(&one);
}

/* A table tied across ops in one stage (GPT-2's embedding and head) is
 * one gradient, whole after the embedding's backward, the stage's last:
 * its bytes are that bucket's, not the head's (whose backward comes
 * first). The default bucket is DDP's on GPUs, one ring on CPU
 * devices. */
Test(buckets, a_tied_table_is_ready_last)
{
    brun a;
    bsim("gpt2", "rtx2080ti", 8, 1, 8, 2, 1, SIM_GRAD_BUCKET_DDP, &a);
    const sim_costs *c = a.c;
    int last = c->bkt_off[1] - 1;
    double table = (double)a.m->spec.vocab * a.m->spec.hidden *
                   prof_dtype_bytes(a.m->spec.dtype);
    cr_expect_eq(c->bkt_lo[last], 0);
    cr_expect_geq(c->bkt_share[last] * c->stage[0].grad_bytes, table,
                  "the last bucket holds %.0f bytes, the table %.0f",
                  c->bkt_share[last] * c->stage[0].grad_bytes, table);
    cr_expect_leq(c->bkt_share[0] * c->stage[0].grad_bytes, 25 << 20);
    cr_expect_eq(sim_grad_bucket(SIM_GRAD_BUCKET_AUTO, a.t),
                 SIM_GRAD_BUCKET_DDP);
    bfree(&a);
    prof_topo *cpu = test_topo("cpu", 2);
    cr_expect_eq(sim_grad_bucket(SIM_GRAD_BUCKET_AUTO, cpu), 0);
    cr_expect_eq(sim_grad_bucket(4096, cpu), 4096);
    prof_topo_free(cpu);
}

/* The planner says what a data-parallel plan waits for, which its bubble
 * (0%) does not, and how it reduces. */
Test(buckets, the_plan_says_its_exposed_all_reduce)
{
    const char *p = "plan --hw rtx2080ti x8 --model gpt2 --schedule 1f1b";
    cli_expect(0, "exposed communication per device: data-parallel", "%s", p);
    cli_expect(0, "; the all-reduce in 25.00 MiB gradient buckets during the "
               "backward", "%s", p);
    cli_expect(0, "; the all-reduce once a stage, after its backward",
               "%s --grad-bucket 0", p);
}

/* Sizes the command line and plan files refuse, each named. */
Test(buckets, bad_sizes_are_named)
{
    const char *base = "sim --hw rtx2080ti x8 --model gpt2 --schedule 1f1b "
                       "--pp 1 --dp 8 --mbs 1 --microbatches 1";
    struct { const char *arg, *want; } c[] = {
        {"--grad-bucket", "--grad-bucket needs a size"},
        {"--grad-bucket lots", "--grad-bucket 'lots': expected a size"},
        {"--grad-bucket 100", "--grad-bucket '100': expected a size"},
        {"--grad-bucket -4M", "--grad-bucket '-4M': expected a size"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        cli_result r = cli_run("%s %s", base, c[i].arg);
        cr_expect_eq(r.code, 2, "%s: exit %d", c[i].arg, r.code);
        cr_expect(strstr(r.err, c[i].want), "%s: %s", c[i].arg, r.err);
        cli_result_free(&r);
    }
    cli_result r = cli_run("plan --hw rtx2080ti x8 --model gpt2 --grad-bucket "
                           "x");
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "--grad-bucket 'x'"), "%s", r.err);
    cli_result_free(&r);
    /* the plan file's field, its line named */
    char *dir = test_tmpdir();
    r = cli_run("%s --grad-bucket 2M --out %s/p.json", base, dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    cr_assert_eq(sh_run("grep -q '\"grad_bucket_mib\": 2' %s/p.json", dir), 0);
    cr_assert_eq(sh_run("sed -i 's/\"grad_bucket_mib\": 2.0*/"
                        "\"grad_bucket_mib\": -1/' %s/p.json", dir), 0);
    r = cli_run("sim --plan %s/p.json", dir);
    cr_expect_eq(r.code, 2, "exit %d", r.code);
    cr_expect(strstr(r.err, "grad_bucket_mib"), "%s", r.err);
    cli_result_free(&r);
    /* under the command line's least, 1 KiB */
    cr_assert_eq(sh_run("sed -i 's/\"grad_bucket_mib\": -1/"
                        "\"grad_bucket_mib\": 0.0001/' %s/p.json", dir), 0);
    r = cli_run("sim --plan %s/p.json", dir);
    cr_expect_eq(r.code, 2, "exit %d", r.code);
    cr_expect(strstr(r.err, "grad_bucket_mib") &&
              strstr(r.err, "from 1 KiB to 1 TiB"), "%s", r.err);
    cli_result_free(&r);
    /* sharded, the option shapes nothing and says so */
    r = cli_run("%s --zero 1 --grad-bucket 4M", base);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "buckets shape an unsharded all-reduce only"),
              "%s", r.out);
    cli_result_free(&r);
    test_rm_rf(dir);
}
