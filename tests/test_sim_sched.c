/* sim: the newer schedules (interleaved, zero bubble, Chimera) against
 * their closed forms on uniform stages with free communication (ZB-H2
 * and ZB-2P: idle gaps, microbatches in flight, peak memory) and
 * against the orders PyTorch's schedule classes build (tests/data/pytorch,
 * written by its gen.py), data-parallel all-reduce time on a ring of
 * equal links, steady-state windows of schedules without flush, and
 * PyTorch schedule CSVs (emit, read back, PyTorch's runtime dumps, bad
 * files). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/sim.h"
#include "tests/harness.h"
#include <jansson.h>

typedef struct srun {
    sim_costs *c;
    sim_ir *ir;
    sim_engine *e;
    sim_result r;
} srun;

/* Uniform stages of F, B, W (free communication unless topo). */
static srun sgo(sim_sched sched, int p, int S, int m, int64_t f, int64_t b,
                int64_t w, int split, int dp, const prof_topo *topo,
                double grad_bytes)
{
    srun x;
    memset(&x, 0, sizeof x);
    sim_sched_opts o = {0};
    o.sched = sched;
    o.pp = p;
    o.n_stages = S;
    o.n_mb = m;
    o.waves = 1;
    o.split_bw = split;
    o.dp = dp;
    o.n_minibatches = sim_default_minibatches(sched, p, S, m);
    int map[256];
    sim_sched_map(&o, map);
    x.c = sim_costs_uniform(S, p, map, f, b, w, 0, 1000);
    for (int s = 0; s < S; s++) x.c->stage[s].grad_bytes = grad_bytes;
    x.c->topo = topo;
    sim_costs_replicate(x.c, dp, sim_sched_pipes(sched));
    util_err e;
    x.ir = sim_schedule(&o, x.c, &e);
    cr_assert_not_null(x.ir, "%s: %s", sim_sched_name(sched), e.msg);
    x.e = sim_engine_new(x.ir, x.c, NULL);
    cr_assert_eq(sim_engine_run(x.e, &x.r), 0, "%s", x.r.msg);
    return x;
}

static void sdone(srun *x)
{
    sim_engine_free(x->e);
    sim_ir_free(x->ir);
    sim_costs_free(x->c);
}

/* Appends an order for uniform stages to an empty IR. */
typedef void (*order_fn)(sim_ir *ir, const sim_sched_opts *o,
                         const sim_costs *c);

/* As sgo (one pipeline, free communication), with the order given by
 * fn, or read from a PyTorch CSV when fn is NULL. */
static srun sgo_order(sim_sched sched, int p, int S, int m, int64_t f,
                      int64_t b, int64_t w, order_fn fn, const char *csv)
{
    srun x;
    memset(&x, 0, sizeof x);
    sim_sched_opts o = {.sched = sched, .pp = p, .n_stages = S, .n_mb = m,
                        .waves = 1, .split_bw = w > 0, .n_minibatches = 1};
    int map[256];
    sim_sched_map(&o, map);
    x.c = sim_costs_uniform(S, p, map, f, b, w, 0, 1000);
    util_err e;
    if (fn) {
        x.ir = sim_schedule_new(&o, x.c, &e);
        cr_assert_not_null(x.ir, "%s", e.msg);
        fn(x.ir, &o, x.c);
        cr_assert_eq(sim_schedule_finish(x.ir, x.c, &e), 0, "%s", e.msg);
    } else {
        x.ir = sim_schedule_file(csv, &o, x.c, &e);
        cr_assert_not_null(x.ir, "%s: %s", csv, e.msg);
    }
    x.e = sim_engine_new(x.ir, x.c, NULL);
    cr_assert_eq(sim_engine_run(x.e, &x.r), 0, "%s", x.r.msg);
    return x;
}

static double max_peak(const srun *x)
{
    double pk = 0;
    for (int d = 0; d < x->r.n_devices; d++)
        if (x->r.dev[d].peak_bytes > pk) pk = x->r.dev[d].peak_bytes;
    return pk;
}

/* The compute order of a PyTorch CSV as sim_schedule_emit writes it: idle
 * slots and communication actions dropped, overlapped pairs split, "\r"
 * gone. NULL when the file is absent. */
static char *pytorch_order(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *out = NULL, line[1 << 16];
    size_t len = 0;
    FILE *o = open_memstream(&out, &len);
    while (fgets(line, sizeof line, f)) {
        int first = 1;
        for (char *tok = strtok(line, ",;()\r\n"); tok;
             tok = strtok(NULL, ",;()\r\n")) {
            size_t n = strspn(tok, "0123456789");
            if (!n || strspn(tok + n, "FIWB") != 1 ||
                !strchr("0123456789", tok[n + 1]) || !tok[n + 1])
                continue;
            fprintf(o, "%s%s", first ? "" : ",", tok);
            first = 0;
        }
        fputc('\n', o);
    }
    fclose(f);
    fclose(o);
    return out;
}

static char *emitted(const sim_ir *ir)
{
    char *out = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&out, &len);
    sim_schedule_emit(ir, o);
    fclose(o);
    return out;
}

Test(sim_sched, interleaved_bubble)
{
    /* bubble relative to the ideal: (p-1)/(v*m) (Narayanan et al. 2021) */
    const int64_t f = 100, b = 200;
    int cases[][3] = {{4, 2, 8}, {4, 3, 8}, {2, 2, 4}, {4, 2, 4}, {4, 2, 12}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int p = cases[i][0], v = cases[i][1], m = cases[i][2];
        srun x = sgo(SIM_SCHED_INTERLEAVED, p, v * p, m, f, b, 0, 0, 1, NULL, 0);
        int64_t ideal = (int64_t)v * m * (f + b);
        cr_expect_eq(x.r.iteration_ns - ideal, (int64_t)(p - 1) * (f + b),
                     "p %d v %d m %d: bubble %lld, want (p-1)(f+b) = %lld", p,
                     v, m, (long long)(x.r.iteration_ns - ideal),
                     (long long)((p - 1) * (f + b)));
        cr_expect_float_eq((double)(x.r.iteration_ns - ideal) / ideal,
                           (double)(p - 1) / (v * m), 1e-12);
        /* chunk k of device r is stage k*p + r */
        for (int s = 0; s < v * p; s++)
            cr_expect_eq(x.ir->stage_device[s], s % p);
        sdone(&x);
    }
}

Test(sim_sched, interleaved_relaxed_microbatches)
{
    /* PyTorch's rounds: m = 6 on p = 4 (one round of 6) still runs */
    srun x = sgo(SIM_SCHED_INTERLEAVED, 4, 8, 6, 100, 200, 0, 0, 1, NULL, 0);
    cr_expect_geq(x.r.iteration_ns, 2 * 6 * 300);
    sdone(&x);
    sim_sched_opts o = {.sched = SIM_SCHED_INTERLEAVED, .pp = 4, .n_stages = 8,
                        .n_mb = 9};
    util_err e;
    cr_expect_eq(sim_sched_check(&o, &e), -1);
    cr_expect(strstr(e.msg, "9 microbatches"), "%s", e.msg);
}

Test(sim_sched, zbh1_bubble)
{
    /* ZB-H1: (p-1)(F+B-W) (Qi et al. 2024) */
    int64_t F = 100, B = 120, W = 80;
    for (int p = 2; p <= 6; p += 2)
        for (int m = p; m <= 3 * p; m += p) {
            srun x = sgo(SIM_SCHED_ZBH1, p, p, m, F, B, W, 1, 1, NULL, 0);
            /* peak memory as 1F1B's: p microbatches on the first stage */
            for (int d = 0; d < p; d++)
                cr_expect_leq(x.r.dev[d].peak_bytes, p * 1000 + 100);
            cr_expect_eq(x.r.iteration_ns,
                         (int64_t)m * (F + B + W) + (p - 1) * (F + B - W),
                         "p %d m %d: %lld vs %lld", p, m,
                         (long long)x.r.iteration_ns,
                         (long long)(m * (F + B + W) + (p - 1) * (F + B - W)));
            sdone(&x);
        }
}

/* Idle time of device d between its first and last compute task. */
static int64_t gaps_ns(const srun *x, int d)
{
    int64_t t0 = -1, t1 = 0, busy = 0;
    for (int i = 0; i < x->ir->n_tasks; i++) {
        const sim_task *t = &x->ir->tasks[i];
        if (t->device != d || (t->kind != SIM_F && t->kind != SIM_B &&
                               t->kind != SIM_W && t->kind != SIM_BW))
            continue;
        if (t0 < 0 || x->r.start_ns[i] < t0) t0 = x->r.start_ns[i];
        if (x->r.end_ns[i] > t1) t1 = x->r.end_ns[i];
        busy += x->r.end_ns[i] - x->r.start_ns[i];
    }
    return t1 - t0 - busy;
}

Test(sim_sched, zbh2_parallelogram)
{
    /* ZB-H2 with F = B = W (Qi et al. 2024, Table 1: bubble
     * (p-1)(F+B-2W) = 0, peak (2p-1) M_B): no device idles between its
     * first and last task, device i starting after i forwards (the fill
     * the paper overlaps with the previous iteration), and the first
     * stage holds 2p-1 microbatches where 1F1B holds p */
    const int64_t F = 100;
    for (int p = 2; p <= 6; p += 2)
        for (int m = p; m <= 3 * p; m += p) {
            srun x = sgo(SIM_SCHED_ZBH2, p, p, m, F, F, F, 1, 1, NULL, 0);
            srun a = sgo(SIM_SCHED_1F1B, p, p, m, F, 2 * F, 0, 0, 1, NULL, 0);
            /* the warm-up needs 2p-1 microbatches to fill */
            if (m >= 2 * p - 1) {
                cr_expect_eq(x.r.iteration_ns, 3 * m * F + (p - 1) * F,
                             "p %d m %d: %lld", p, m,
                             (long long)x.r.iteration_ns);
                for (int d = 0; d < p; d++)
                    cr_expect_eq(gaps_ns(&x, d), 0, "p %d m %d dev %d: idle "
                                 "%lld", p, m, d, (long long)gaps_ns(&x, d));
            }
            int want = 2 * p - 1 < m ? 2 * p - 1 : m;
            cr_expect_eq(x.r.max_inflight[0], want, "p %d m %d: %d in flight",
                         p, m, x.r.max_inflight[0]);
            cr_expect_eq(a.r.max_inflight[0], p < m ? p : m);
            for (int s = 0; s < p; s++)
                cr_expect_leq(x.r.max_inflight[s], 2 * p - 1);
            /* activations: F keeps 1000 bytes a microbatch (beside a
             * byte of weights); the first stage peaks before its first B
             * frees any */
            cr_expect(x.r.dev[0].peak_bytes >= want * 1000.0 &&
                      x.r.dev[0].peak_bytes <= want * 1000.0 + 100,
                      "p %d m %d: %.0f", p, m, x.r.dev[0].peak_bytes);
            int one = p < m ? p : m;
            cr_expect(a.r.dev[0].peak_bytes >= one * 1000.0 &&
                      a.r.dev[0].peak_bytes <= one * 1000.0 + 100);
            /* ZB-H1's flushed iteration is as long, but its bubble
             * (p-1)(F+B-W) = (p-1)F lies inside the first device's work,
             * where no next iteration can fill it */
            srun h = sgo(SIM_SCHED_ZBH1, p, p, m, F, F, F, 1, 1, NULL, 0);
            if (m >= 2 * p - 1)
                cr_expect_eq(h.r.iteration_ns, x.r.iteration_ns);
            cr_expect_eq(gaps_ns(&h, 0), (p - 1) * F, "p %d m %d: %lld", p,
                         m, (long long)gaps_ns(&h, 0));
            sdone(&h);
            sdone(&a);
            sdone(&x);
        }
}

Test(sim_sched, zb2p_heuristic)
{
    /* ZB-2P: the automatic schedule within 2p microbatches' activations.
     * With F = B = W it reaches ZB-H2's parallelogram; with unequal
     * passes it is never slower than ZB-H1 and 1F1B (the heuristic's
     * grid holds orders as good), and stays under its memory limit */
    int64_t fbw[][3] = {{100, 100, 100}, {100, 150, 50}, {100, 120, 80},
                        {100, 100, 200}};
    for (size_t k = 0; k < sizeof fbw / sizeof *fbw; k++)
        for (int p = 2; p <= 6; p += 2)
            for (int m = p; m <= 3 * p; m += p) {
                int64_t F = fbw[k][0], B = fbw[k][1], W = fbw[k][2];
                srun z = sgo(SIM_SCHED_ZB2P, p, p, m, F, B, W, 1, 1, NULL, 0);
                srun h = sgo(SIM_SCHED_ZBH1, p, p, m, F, B, W, 1, 1, NULL, 0);
                srun a = sgo(SIM_SCHED_1F1B, p, p, m, F, B + W, 0, 0, 1,
                             NULL, 0);
                if (F == B && B == W)
                    cr_expect_eq(z.r.iteration_ns, 3 * m * F + (p - 1) * F,
                                 "p %d m %d: %lld", p, m,
                                 (long long)z.r.iteration_ns);
                cr_expect_leq(z.r.iteration_ns, h.r.iteration_ns,
                              "F %lld B %lld W %lld p %d m %d: zb-2p %lld, "
                              "zb-h1 %lld", (long long)F, (long long)B,
                              (long long)W, p, m, (long long)z.r.iteration_ns,
                              (long long)h.r.iteration_ns);
                cr_expect_leq(z.r.iteration_ns, a.r.iteration_ns);
                for (int d = 0; d < p; d++)
                    cr_expect_leq(z.r.dev[d].peak_bytes, 2 * p * 1000.0 + 100,
                                  "p %d m %d dev %d: %.0f", p, m, d,
                                  z.r.dev[d].peak_bytes);
                sdone(&a);
                sdone(&h);
                sdone(&z);
            }
}

static int64_t ideal_of(int m) { return (int64_t)m * 600; }

Test(sim_sched, zbv_wave_dualpipev_below_1f1b)
{
    /* equal p and m; the V's chunks are half a 1F1B stage */
    for (int p = 2; p <= 8; p *= 2) {
        int m = 2 * p;
        srun a = sgo(SIM_SCHED_1F1B, p, p, m, 200, 200, 200, 0, 1, NULL, 0);
        srun z = sgo(SIM_SCHED_ZBV, p, 2 * p, m, 100, 100, 100, 1, 1, NULL, 0);
        srun w = sgo(SIM_SCHED_WAVE, p, 2 * p, m, 100, 100, 100, 0, 1, NULL, 0);
        srun v = sgo(SIM_SCHED_DUALPIPEV, p, 2 * p, m, 100, 100, 100, 1, 1,
                     NULL, 0);
        cr_expect_lt(v.r.iteration_ns - ideal_of(m), a.r.iteration_ns -
                     ideal_of(m), "p %d: dualpipev", p);
        sdone(&v);
        int64_t ideal = (int64_t)m * 600;
        cr_expect_lt(z.r.iteration_ns - ideal, a.r.iteration_ns - ideal,
                     "p %d: zb-v bubble %lld, 1f1b %lld", p,
                     (long long)(z.r.iteration_ns - ideal),
                     (long long)(a.r.iteration_ns - ideal));
        cr_expect_lt(w.r.iteration_ns - ideal, a.r.iteration_ns - ideal);
        for (int s = 0; s < 2 * p; s++)
            cr_expect_eq(z.ir->stage_device[s], s < p ? s : 2 * p - 1 - s);
        /* 1F1B-level activation memory: at most 2p+1 chunk activations
         * (a chunk is half a stage), whatever m */
        srun z4 = sgo(SIM_SCHED_ZBV, p, 2 * p, 4 * p, 100, 100, 100, 1, 1,
                      NULL, 0);
        for (int d = 0; d < p; d++)
            cr_expect_leq(z4.r.dev[d].peak_bytes, (2 * p + 1) * 1000 + 100,
                          "p %d dev %d: %.0f", p, d, z4.r.dev[d].peak_bytes);
        sdone(&z4);
        sdone(&a);
        sdone(&z);
        sdone(&w);
    }
}

/* ZB-V as this generator ordered it before PyTorch's order joined:
 * forwards first under caps of 2p - s */
static void zbv_list_order(sim_ir *ir, const sim_sched_opts *o,
                           const sim_costs *c)
{
    int cap[64];
    for (int s = 0; s < o->n_stages; s++)
        cap[s] = o->n_stages - s < o->n_mb ? o->n_stages - s : o->n_mb;
    util_err e;
    cr_assert_eq(sim_order_greedy(ir, o, c, SIM_POL_FFIRST, cap, &e), 0,
                 "%s", e.msg);
}

Test(sim_sched, zbv_is_pytorch_order)
{
    /* uniform chunks with F = B = W (the case PyTorch's order is made
     * for) and m >= 2p: PyTorch's ScheduleZBVZeroBubble order action for
     * action, its bubble (p-1) chunk forwards */
    const int64_t F = 100;
    for (int p = 2; p <= 8; p *= 2)
        for (int m = 2 * p; m <= 4 * p; m += 2 * p) {
            srun x = sgo(SIM_SCHED_ZBV, p, 2 * p, m, F, F, F, 1, 1, NULL, 0);
            char path[128];
            snprintf(path, sizeof path, "tests/data/pytorch/zbv-p%d-m%d.csv",
                     p, m);
            char *want = pytorch_order(path), *got = emitted(x.ir);
            cr_assert_not_null(want, "%s", path);
            cr_expect_str_eq(got, want, "p %d m %d", p, m);
            cr_expect_eq(x.r.iteration_ns, 2LL * m * 3 * F + (p - 1) * F,
                         "p %d m %d", p, m);
            free(want);
            free(got);
            sdone(&x);
        }
}

Test(sim_sched, zbv_never_slower)
{
    /* the order chosen is never slower than the list order ZB-V had
     * before, nor than PyTorch's, and on equal time never heavier */
    int64_t cost[][3] = {{100, 100, 100}, {100, 200, 50}, {100, 100, 200},
                         {100, 150, 100}};
    int wins = 0;
    for (size_t i = 0; i < sizeof cost / sizeof *cost; i++)
        for (int p = 2; p <= 8; p *= 2) {
            int ms[] = {1, 2, p - 1, p, p + 1, 2 * p - 1, 2 * p, 3 * p,
                        4 * p};
            for (size_t j = 0; j < sizeof ms / sizeof *ms; j++) {
                int m = ms[j];
                int64_t F = cost[i][0], B = cost[i][1], W = cost[i][2];
                srun x = sgo(SIM_SCHED_ZBV, p, 2 * p, m, F, B, W, 1, 1,
                             NULL, 0);
                srun old = sgo_order(SIM_SCHED_ZBV, p, 2 * p, m, F, B, W,
                                     zbv_list_order, NULL);
                cr_expect(x.r.iteration_ns < old.r.iteration_ns ||
                          (x.r.iteration_ns == old.r.iteration_ns &&
                           max_peak(&x) <= max_peak(&old)),
                          "p %d m %d F %lld B %lld W %lld: %lld ns %.0f B, "
                          "list order %lld ns %.0f B", p, m, (long long)F,
                          (long long)B, (long long)W,
                          (long long)x.r.iteration_ns, max_peak(&x),
                          (long long)old.r.iteration_ns, max_peak(&old));
                wins += x.r.iteration_ns < old.r.iteration_ns;
                char path[128];
                snprintf(path, sizeof path, "tests/data/pytorch/zbv-p%d-m%d"
                         ".csv", p, m);
                if (!access(path, R_OK)) {
                    srun pt = sgo_order(SIM_SCHED_ZBV, p, 2 * p, m, F, B, W,
                                        NULL, path);
                    cr_expect_leq(x.r.iteration_ns, pt.r.iteration_ns,
                                  "%s F %lld B %lld W %lld", path,
                                  (long long)F, (long long)B, (long long)W);
                    sdone(&pt);
                }
                /* 1F1B-level activation memory: 2p+1 chunks at most */
                for (int d = 0; d < p; d++)
                    cr_expect_leq(x.r.dev[d].peak_bytes,
                                  (2 * p + 1) * 1000 + 100);
                sdone(&old);
                sdone(&x);
            }
        }
    /* and it does gain somewhere */
    cr_expect_gt(wins, 0);
}

/* Interleaved with m = p as Megatron-LM runs it: every forward first. */
static void interleaved_all_forwards(sim_ir *ir, const sim_sched_opts *o,
                                     const sim_costs *c)
{
    (void)c;
    int p = o->pp, v = o->n_stages / p, m = o->n_mb;
    for (int r = 0; r < p; r++) {
        for (int k = 0; k < v * m; k++)
            sim_ir_compute(ir, SIM_F, (k / m) * p + r, k % m, 0, 0);
        for (int k = 0; k < v * m; k++)
            sim_ir_compute(ir, SIM_BW, (v - 1 - k / m) * p + r, k % m, 0,
                           0);
    }
}

Test(sim_sched, interleaved_m_equals_p)
{
    /* PyTorch's capped warm-up against Megatron's every forward first:
     * same time, less memory on the later devices; the order is
     * PyTorch's ScheduleInterleaved1F1B's */
    for (int p = 2; p <= 8; p *= 2)
        for (int v = 2; v <= 3; v++) {
            srun x = sgo(SIM_SCHED_INTERLEAVED, p, v * p, p, 100, 200, 0, 0,
                         1, NULL, 0);
            srun mg = sgo_order(SIM_SCHED_INTERLEAVED, p, v * p, p, 100, 200,
                                0, interleaved_all_forwards, NULL);
            cr_expect_eq(x.r.iteration_ns, mg.r.iteration_ns, "p %d v %d",
                         p, v);
            for (int d = 0; d < p; d++)
                cr_expect_leq(x.r.dev[d].peak_bytes, mg.r.dev[d].peak_bytes);
            cr_expect_lt(x.r.dev[p - 1].peak_bytes,
                         mg.r.dev[p - 1].peak_bytes, "p %d v %d", p, v);
            if (v == 2) {
                char path[128];
                snprintf(path, sizeof path, "tests/data/pytorch/interleaved"
                         "-p%d-m%d.csv", p, p);
                char *want = pytorch_order(path), *got = emitted(x.ir);
                cr_assert_not_null(want, "%s", path);
                cr_expect_str_eq(got, want, "p %d", p);
                free(want);
                free(got);
            }
            sdone(&mg);
            sdone(&x);
        }
}

/* The compute order a schedule CSV for a V of 2 devices (4 uniform
 * stages, 2 microbatches) reads as. */
static char *v_order(const char *text)
{
    char *dir = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/s.csv", dir);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    srun x = sgo_order(SIM_SCHED_ZBV, 2, 4, 2, 100, 100, 100, NULL, path);
    char *out = emitted(x.ir);
    sdone(&x);
    unlink(path);
    rmdir(dir);
    free(dir);
    return out;
}

Test(sim_sched, every_pytorch_action)
{
    /* the runtime's form (every communication, FSDP and reduction action
     * PyTorch writes, an overlapped pair, a quoted field, spaces, CRLF)
     * reads as the compute order it lowers */
    char *plain = v_order("0F0,0F1,3F0,3I0,3W0,3F1,3B1,0B0,0I1,0W1\n"
                          "1F0,2F0,2B0,1F1,2F1,2I1,1B0,2W1,1I1,1W1\n");
    char *rt = v_order(
        "0UNSHARD,3UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,3RECV_F0,3F0,3I0,"
        "3SEND_B0,3W0,3RECV_F1,3F1,\" 3B1 \",3SEND_B1,3REDUCE_GRAD,"
        "3WAIT_REDUCE_GRAD,3RESHARD,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0I1,"
        "0WAIT_SEND_F1,0W1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD,"
        "3WAIT_SEND_B0,3WAIT_SEND_B1\r\n"
        "1UNSHARD,2UNSHARD,1RECV_F0,1F0,2F0,2SEND_F0,2RECV_B0,"
        "2B0,2WAIT_SEND_F0,1RECV_F1,( 1F1 ; 2F1 )OVERLAP_F_B,2SEND_F1,"
        "2RECV_B1,2I1,1B0,1SEND_B0,2W1,2REDUCE_GRAD,"
        "2WAIT_REDUCE_GRAD,2RESHARD,1I1,1SEND_B1,1W1,1REDUCE_GRAD,"
        "1WAIT_REDUCE_GRAD,1RESHARD,1WAIT_SEND_B0,1WAIT_SEND_B1,"
        "2WAIT_SEND_F1\r\n");
    cr_expect_str_eq(rt, plain);
    free(plain);
    free(rt);
}

Test(sim_sched, chimera_bubble)
{
    /* (p-2)/(2m+p-2) of the iteration for even p: (p-2)(F+B)/2 idle per
     * device (Li and Hoefler 2021, Table 1, which counts a forward and a
     * backward as one slot each: F = B here) */
    for (int p = 2; p <= 8; p += 2)
    for (int m = p; m <= 2 * p; m += p) {
        int64_t F = 100, B = 100;
        srun x = sgo(SIM_SCHED_CHIMERA, p, p, m, F, B, 0, 0, 1, NULL, 0);
        int64_t want = (int64_t)m * (F + B) + (int64_t)(p - 2) * (F + B) / 2;
        cr_expect_eq(x.r.iteration_ns, want, "p %d m %d: %lld vs %lld", p, m,
                     (long long)x.r.iteration_ns, (long long)want);
        cr_expect_float_eq(x.r.dev[0].bubble_fraction,
                           (double)(p - 2) / (2 * m + p - 2), 1e-9);
        /* two weight replicas per device */
        cr_expect_eq(x.c->replicas, 2);
        sdone(&x);
    }
}

Test(sim_sched, chimera_memory_at_m_equals_p)
{
    /* with m = p (the paper's basic unit) device i holds stage i of the
     * down pipeline (min(p - i, p/2) microbatches in flight) and stage
     * p-1-i of the up one (min(i + 1, p/2)): between (p/2 + 1) M_a and
     * p M_a (Li and Hoefler 2021, Table 2) */
    for (int p = 2; p <= 8; p += 2) {
        srun x = sgo(SIM_SCHED_CHIMERA, p, p, p, 100, 100, 0, 0, 1, NULL, 0);
        for (int d = 0; d < p; d++) {
            int h = p / 2, dn = p - d < h ? p - d : h, up = d + 1 < h ? d + 1 : h;
            double a = x.r.dev[d].peak_bytes - x.r.dev[d].static_bytes;
            cr_expect(a >= (dn + up) * 1000.0 && a <= (dn + up) * 1000.0 + 100,
                      "p %d dev %d: %.0f, want %d microbatches", p, d, a,
                      dn + up);
        }
        sdone(&x);
    }
}

Test(sim_sched, dualpipev_bubble_and_memory)
{
    /* DualPipe's table (deepseek-ai/DualPipe README): bubble
     * (PP/2 - 1)(F&B + B - 3W) over PP/2 = p devices, activations of PP + 1
     * = 2p + 1 chunks. The F&B pairs run one after the other here, so
     * F&B = F + B + W: with F = B = W the bubble is (p - 1)F, for even
     * and odd m */
    const int64_t F = 50;
    const int ps[] = {2, 3, 4, 8};
    for (int pi = 0; pi < 4; pi++) {
        int p = ps[pi];
        int ms[] = {2 * p, 2 * p + 1, 4 * p + 1};
        for (int k = 0; k < 3; k++) {
            int m = ms[k];
            srun x = sgo(SIM_SCHED_DUALPIPEV, p, 2 * p, m, F, F, F, 1, 1,
                         NULL, 0);
            int64_t ideal = (int64_t)m * 2 * 3 * F;
            cr_expect_eq(x.r.iteration_ns - ideal, (int64_t)(p - 1) * F,
                         "p %d m %d: bubble %lld, want (p-1)F = %lld", p, m,
                         (long long)(x.r.iteration_ns - ideal),
                         (long long)((p - 1) * F));
            /* sgo's chunks keep 1000 bytes a microbatch */
            double a = x.r.dev[0].peak_bytes - x.r.dev[0].static_bytes;
            cr_expect(a >= (2 * p + 1) * 1000.0 &&
                      a <= (2 * p + 1) * 1000.0 + 100,
                      "p %d m %d: first device %.0f, want 2p+1 chunks", p, m,
                      a);
            for (int d = 1; d < p; d++)
                cr_expect_leq(x.r.dev[d].peak_bytes - x.r.dev[d].static_bytes,
                              (2 * p + 1) * 1000.0 + 100, "p %d m %d dev %d",
                              p, m, d);
            sdone(&x);
        }
    }
}

static prof_topo *ring_star(int n, double bw)
{
    prof_topo *t = prof_topo_new("star");
    prof_gpu g = {0};
    snprintf(g.name, sizeof g.name, "testgpu");
    g.mem_bytes = 1e12;
    int ty = prof_topo_add_gpu_type(t, &g);
    int sw = prof_topo_add_node(t, PROF_NODE_PCIE_SWITCH, "sw", 0);
    for (int i = 0; i < n; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "gpu%d", i);
        int k = prof_topo_add_node(t, PROF_NODE_GPU, nm, 0);
        t->nodes[k].gpu_type = ty;
        prof_topo_add_link(t, k, sw, PROF_LINK_PCIE, bw, 0);
    }
    util_err e;
    cr_assert_eq(prof_topo_finish(t, &e), 0, "%s", e.msg);
    return t;
}

Test(sim_sched, dp_allreduce_ring_time)
{
    /* ring all-reduce: 2(d-1)/d * bytes / bandwidth on equal links */
    for (int d = 2; d <= 8; d *= 2) {
        prof_topo *t = ring_star(d, 1e9);
        double bytes = 8e6;
        srun x = sgo(SIM_SCHED_1F1B, 1, 1, 1, 1000, 2000, 0, 0, d, t, bytes);
        /* and each of its 2(d-1) steps NCCL's latency: a call's base and
         * d - 1 hops over PCIe, twice round, over the steps */
        int64_t ar = (int64_t)(2.0 * (d - 1) / d * bytes / 1e9 * 1e9 + 0.5) +
                     2 * (d - 1) *
                         llround((NCCL_BASE_NS + 2 * (d - 1) *
                                  NCCL_STEP_PCIE_NS) / (2 * (d - 1)));
        cr_expect_eq(x.r.iteration_ns, 3000 + ar, "d %d: %lld vs %lld", d,
                     (long long)x.r.iteration_ns, (long long)(3000 + ar));
        for (int k = 0; k < d; k++) {
            cr_expect_eq(x.r.dev[k].comm_busy_ns[SIM_COMM_DP], ar);
            cr_expect_eq(x.r.dev[k].comm_exp_ns[SIM_COMM_DP], ar);
        }
        /* 2(d-1) steps per member */
        int steps = 0;
        for (int i = 0; i < x.ir->n_tasks; i++)
            steps += x.ir->tasks[i].kind == SIM_SEND &&
                     x.ir->tasks[i].comm == SIM_COMM_DP;
        cr_expect_eq(steps, 2 * (d - 1) * d);
        sdone(&x);
        prof_topo_free(t);
    }
}

Test(sim_sched, dp_overlaps_backward)
{
    /* interleaved, 2 chunks per device, 2 replicas: the ring of a
     * device's second chunk runs while its first chunk still does its
     * backward, so part of it is hidden */
    prof_topo *t = ring_star(8, 1e9);
    srun x = sgo(SIM_SCHED_INTERLEAVED, 2, 4, 4, 100000, 200000, 0, 0, 2, t,
                 2e5);
    int64_t hidden = 0;
    for (int d = 0; d < 4; d++)
        hidden += x.r.dev[d].comm_busy_ns[SIM_COMM_DP] -
                  x.r.dev[d].comm_exp_ns[SIM_COMM_DP];
    cr_expect_gt(hidden, 0);
    sdone(&x);
    prof_topo_free(t);
}

Test(sim_sched, async_window_past_the_fill)
{
    /* iteration >= the busiest device's compute per minibatch, for every
     * schedule, deep pipelines with few microbatches included */
    for (int sc = 0; sc < SIM_SCHED_FILE; sc++) {
        for (int p = 2; p <= 8 && !sim_sched_offload(sc); p *= 2) {
            int m = sc == SIM_SCHED_2BW ? p : 2;
            int S = sc == SIM_SCHED_WAVE || sc == SIM_SCHED_ZBV ||
                    sc == SIM_SCHED_DUALPIPEV ||
                    sc == SIM_SCHED_INTERLEAVED || sc == SIM_SCHED_MIXED ||
                    sc == SIM_SCHED_MIXED_1F1B || sc == SIM_SCHED_MIXED_GPIPE
                  ? 2 * p : p;
            if (sc == SIM_SCHED_INTERLEAVED) m = p;
            if (sc == SIM_SCHED_DUALPIPEV) m = 2 * p;
            srun x = sgo((sim_sched)sc, p, S, m, 100, 150, 50,
                         sc == SIM_SCHED_ZBH1 || sc == SIM_SCHED_ZBV, 1,
                         NULL, 0);
            int64_t busiest = 0;
            for (int d = 0; d < p; d++) {
                int64_t w = 0;
                for (int s = 0; s < x.c->n_stages; s++)
                    if (x.c->stage_device[s] == d) w += 300;
                w *= x.ir->n_mb;
                if (w > busiest) busiest = w;
            }
            cr_expect_geq(x.r.iteration_ns, busiest, "%s p %d m %d: %lld < %lld",
                          sim_sched_name((sim_sched)sc), p, m,
                          (long long)x.r.iteration_ns, (long long)busiest);
            sdone(&x);
        }
    }
}

/* ---- through the command line ---- */

#include <dirent.h>

static char *sslurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = calloc(1, 1 << 16);
    size_t n = fread(b, 1, (1 << 16) - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

static json_t *sim_json(const char *args)
{
    cli_result r = cli_run("sim %s --json", args);
    cr_assert_eq(r.code, 0, "%s: %s", args, r.err);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    cr_assert_not_null(j, "%s", je.text);
    cli_result_free(&r);
    json_object_del(j, "schedule");
    json_object_del(j, "schedule_file");
    return j;
}

Test(sim_sched_cli, emit_and_read_back_identical)
{
    const char *cases[] = {
        "--hw rtx2080ti x4 --model gpt-tiny --schedule 1f1b --pp 4 --mbs 1 "
        "--microbatches 8",
        "--hw rtx2080ti x4 --model gpt-tiny --schedule gpipe --pp 4 --mbs 2 "
        "--microbatches 4 --recompute",
        "--hw rtx2080ti x4 --model gpt-tiny --schedule interleaved --chunks 2 "
        "--pp 4 --mbs 1 --microbatches 8",
        "--hw rtx2080ti x4 --model gpt-tiny --schedule zb-h1 --pp 4 --mbs 1 "
        "--microbatches 8",
        "--hw rtx2080ti x4 --model gpt-tiny --schedule zb-v --pp 2 --mbs 1 "
        "--microbatches 4",
        "--hw rtx2080ti x4 --model gpt-tiny --schedule zb-h2 --pp 4 --mbs 1 "
        "--microbatches 8",
        "--hw rtx2080ti x4 --model gpt-tiny --schedule zb-2p --pp 4 --mbs 1 "
        "--microbatches 8 --recompute",
        "--hw rtx2080ti x4 --model gpt-tiny --schedule wave --pp 2 --mbs 1 "
        "--microbatches 4",
        "--hw rtx2080ti x4 --model gpt-tiny --schedule dualpipev --pp 2 "
        "--mbs 1 --microbatches 6",
        "--hw a100-sxm-80gb x16 --model gpt-tiny --schedule interleaved "
        "--chunks 2 --pp 2 --dp 2 --tp 4 --mbs 1 --microbatches 4",
    };
    char *dir = test_tmpdir();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cli_result r = cli_run("sim %s --emit-schedule", cases[i]);
        cr_assert_eq(r.code, 0, "%s: %s", cases[i], r.err);
        cr_assert(r.out[0] >= '0' && r.out[0] <= '9', "%s", r.out);
        char path[600], args[1200];
        snprintf(path, sizeof path, "%s/s%zu.csv", dir, i);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs(r.out, f);
        fclose(f);
        cli_result_free(&r);
        json_t *a = sim_json(cases[i]);
        snprintf(args, sizeof args, "%s --schedule-file %s", cases[i], path);
        json_t *b = sim_json(args);
        cr_expect(json_equal(a, b), "%s: the schedule read back simulates "
                  "differently", cases[i]);
        json_decref(a);
        json_decref(b);
        unlink(path);
    }
    rmdir(dir);
    free(dir);
}

Test(sim_sched_cli, pytorch_runtime_dumps)
{
    /* every file PyTorch's runtime dumps (communication, FSDP and
     * gradient-reduction actions, overlapped pairs) runs unchanged and
     * simulates as its compute order does; sluice's interleaved and
     * DualPipeV generators emit PyTorch's compute orders */
    DIR *d = opendir("tests/data/pytorch");
    cr_assert_not_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        char name[256];
        int p, m;
        size_t len = strlen(de->d_name);
        if (len < 11 || len >= sizeof name ||
            strcmp(de->d_name + len - 10, ".comms.csv"))
            continue;
        snprintf(name, sizeof name, "%s", de->d_name);
        char *dash = strstr(name, "-p");
        cr_assert_not_null(dash, "%s", name);
        *dash = 0;
        cr_assert_eq(sscanf(dash + 1, "p%d-m%d", &p, &m), 2, "%s",
                     de->d_name);
        const char *sched = !strcmp(name, "bfs") ? "gpipe"
                          : !strcmp(name, "zbv") ? "zb-v"
                          : !strcmp(name, "dualpipev") ? "dualpipev"
                          : "interleaved --chunks 2";
        char args[512], file[512], base[512];
        snprintf(args, sizeof args, "--hw rtx2080ti x8 --model gpt-mini "
                 "--pp %d --mbs 1 --microbatches %d --schedule %s", p, m,
                 sched);
        snprintf(file, sizeof file, "%s --schedule-file tests/data/pytorch/"
                 "%s", args, de->d_name);
        json_t *a = sim_json(file);
        /* the compute order beside it, or the same schedule lowered
         * without the deferring options */
        snprintf(base, sizeof base, "tests/data/pytorch/%.*s.csv",
                 (int)(len - 10), de->d_name);
        char *defer = strstr(base, "-defer");
        if (defer) strcpy(defer, ".comms.csv");
        if (!access(base, R_OK)) {
            snprintf(file, sizeof file, "%s --schedule-file %s", args, base);
            json_t *b = sim_json(file);
            cr_expect(json_equal(a, b), "%s and %s simulate differently",
                      de->d_name, base);
            json_decref(b);
        }
        char *want = pytorch_order(base);
        if (want && (!strcmp(name, "interleaved") ||
                     !strcmp(name, "dualpipev"))) {
            cli_result r = cli_run("sim %s --emit-schedule", args);
            cr_assert_eq(r.code, 0, "%s: %s", args, r.err);
            cr_expect_str_eq(r.out, want, "sluice's order for %s", base);
            cli_result_free(&r);
        }
        free(want);
        json_decref(a);
        n++;
    }
    closedir(d);
    cr_assert_geq(n, 30);
}

Test(sim_sched_cli, bad_schedule_files)
{
    DIR *d = opendir("tests/bad/sched");
    cr_assert_not_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 4, ".csv")) continue;
        char file[512], exp[512];
        snprintf(file, sizeof file, "tests/bad/sched/%s", de->d_name);
        snprintf(exp, sizeof exp, "tests/bad/sched/%.*s.expect",
                 (int)(len - 4), de->d_name);
        char *want = sslurp(exp);
        cr_assert_not_null(want, "%s missing", exp);
        want[strcspn(want, "\n")] = 0;
        cli_result r = cli_run("sim --hw rtx2080ti x2 --model gpt-tiny --pp 2 "
                               "--mbs 1 --microbatches 2 --schedule-file %s",
                               file);
        cr_expect_eq(r.code, 2, "%s: exit %d: %s", file, r.code, r.err);
        cr_expect(strstr(r.err, want), "%s: expected '%s' in: %s", file, want,
                  r.err);
        int lines = 0;
        for (const char *q = r.err; *q; q++) lines += *q == '\n';
        cr_expect_eq(lines, 1, "%s: one message expected: %s", file, r.err);
        free(want);
        cli_result_free(&r);
        n++;
    }
    closedir(d);
    cr_assert_geq(n, 3);
}

Test(sim_sched_cli, data_and_tensor_parallel_report_and_plan)
{
    char *dir = test_tmpdir();
    char args[800];
    snprintf(args, sizeof args, "--hw a100-sxm-80gb x16 --model gpt-tiny "
             "--schedule 1f1b --pp 2 --dp 2 --tp 4 --mbs 2 --microbatches 4 "
             "--out %s/p.json", dir);
    json_t *a = sim_json(args);
    cr_expect_eq(json_integer_value(json_object_get(a, "gpus")), 16);
    cr_expect_eq(json_integer_value(json_object_get(a, "dp")), 2);
    cr_expect_eq(json_integer_value(json_object_get(a, "tp")), 4);
    json_t *cm = json_object_get(a, "comm");
    double dp = json_number_value(json_object_get(
        json_object_get(cm, "data-parallel"), "in_flight_s"));
    double tp = json_number_value(json_object_get(
        json_object_get(cm, "tensor-parallel"), "exposed_s"));
    cr_expect_gt(dp, 0);
    cr_expect_gt(tp, 0);
    cr_expect_eq(json_array_size(json_object_get(a, "devices")), 4);
    /* the plan file keeps the layout and simulates the same */
    snprintf(args, sizeof args, "%s/p.json", dir);
    char *plan = sslurp(args);
    cr_assert_not_null(plan);
    cr_expect(strstr(plan, "\"dp\": 2") && strstr(plan, "\"tp\": 4") &&
              strstr(plan, "\"layout\": \"dp-pp-tp\""), "%s", plan);
    free(plan);
    snprintf(args, sizeof args, "--plan %s/p.json", dir);
    json_t *b = sim_json(args);
    cr_expect(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    /* the same GPUs as pure data parallelism across the two pipelines */
    json_t *c = sim_json("--hw a100-sxm-80gb x16 --model gpt-tiny --schedule "
                         "1f1b --pp 2 --dp 8 --mbs 2 --microbatches 4");
    cr_expect_eq(json_integer_value(json_object_get(c, "gpus")), 16);
    json_decref(c);
    snprintf(args, sizeof args, "%s/p.json", dir);
    unlink(args);
    rmdir(dir);
    free(dir);
}

/* Tensor parallelism splits the token table and the linears' weights,
 * while every rank keeps the learned position table, the norms and the
 * row-parallel linears' biases whole, as Megatron-LM and the executor
 * do: gpt-pico (34912 parameters, of which 1024 positions, 448 norm
 * weights and 192 row-parallel biases) holds 16624 + 1664 = 18288 a rank
 * at tp 2, in fp32 weights, gradients and AdamW's two moments 16 bytes
 * each: the executor's arena of 292608 bytes. (It counted the position
 * table and biases split: 282880.) */
Test(sim_sched_cli, tensor_parallel_ranks_keep_what_is_replicated)
{
    json_t *a = sim_json("--hw cpu x2 --model tests/data/exec/gpt-pico.json "
                         "--schedule gpipe --pp 1 --tp 2 --mbs 2 "
                         "--microbatches 2");
    json_t *d = json_array_get(json_object_get(a, "devices"), 0);
    cr_expect_eq(json_number_value(json_object_get(d, "weight_bytes")),
                 4 * 18288.0);
    cr_expect_eq(json_number_value(json_object_get(d, "static_bytes")),
                 16 * 18288.0);
    json_decref(a);
}

Test(sim_sched_cli, cluster_smoke)
{
    /* a small Megatron-like cluster case end to end (the 1024-GPU one is
     * in make bench): 64 A100s, gpt3-13b, t 8, p 4, d 2, interleaved */
    json_t *j = sim_json("--hw a100-sxm-80gb x64 --model gpt3-13b --schedule "
                         "interleaved --chunks 2 --pp 4 --dp 2 --tp 8 --mbs 1 "
                         "--microbatches 8");
    double mfu = json_number_value(json_object_get(j, "mfu"));
    cr_expect(mfu > 0.05 && mfu < 0.8, "mfu %f", mfu);
    cr_expect_eq(json_integer_value(json_object_get(j, "gpus")), 64);
    json_t *cm = json_object_get(j, "comm");
    const char *kinds[] = {"pipeline", "data-parallel", "tensor-parallel"};
    for (int k = 0; k < 3; k++)
        cr_expect_gt(json_number_value(json_object_get(
                         json_object_get(cm, kinds[k]), "in_flight_s")), 0,
                     "%s", kinds[k]);
    json_decref(j);
}
