/* Calibration: the fits against synthetic measurements of known figures
 * (the truth inside the reported intervals), calibration files (round
 * trip, every bad value named by file, line and field), the profile
 * directory and its precedence, calibrated figures reaching sim, and
 * `sluice calibrate` end to end: written atomically, a killed or stopped
 * run leaving the previous profile as it was. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/exec.h"
#include "tests/harness.h"

/* A GPU type whose efficiency model is the truth the fits must find. */
static prof_gpu truth(void)
{
    prof_gpu g;
    util_err e;
    cr_assert_eq(prof_gpu_get_builtin("cpu", &g, &e), 0);
    g.peak_flops[PROF_DT_FP32] = 120e9;
    g.eff.gemm_max = 0.7;
    g.eff.gemm_half_mn = 24;
    g.eff.gemm_half_k = 40;
    g.mem_bw_bytes_per_s = 20e9;
    g.eff.mem_max = 0.9;
    g.eff.mem_half_bytes = 5e4;
    g.eff.launch_ns = 800;
    g.eff.mem_factor[PROF_OP_ACT][PROF_PHASE_F] = 2.5;
    g.eff.mem_factor[PROF_OP_NORM][PROF_PHASE_B] = 1.4;
    g.eff.gemm_factor[PROF_OP_LINEAR][PROF_PHASE_B] = 1.2;
    g.eff.opt_factor = 0.6;
    return g;
}

/* Deterministic normal noise (Box-Muller on an LCG). */
static double noise(uint64_t *s, double sd)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = ((double)(*s >> 11) + 1) / 9007199254740994.0;
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = (double)(*s >> 11) / 9007199254740992.0;
    return sd * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

/* Every op of one-layer GPTs over sizes, timed by the truth with 2%
 * log-normal noise per sample, and run_sd more shared by a size's run
 * (a machine whose state differs from run to run), from seed. */
static exec_calib_sample *synthetic_runs(const prof_gpu *g, int *n,
                                         double run_sd, uint64_t seed)
{
    int cap = 4096, k = 0, set = 0;
    exec_calib_sample *s = calloc((size_t)cap, sizeof *s);
    prof_model_spec base;
    util_err e;
    cr_assert_eq(prof_model_spec_get("gpt-mini", &base, &e), 0);
    int hid[] = {64, 128, 256, 512, 1024}, seq[] = {32, 128, 512};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 3; b++)
            for (int mbs = 1; mbs <= 4; mbs *= 2) {
                double run = run_sd > 0 ? noise(&seed, run_sd) : 0;
                set++;
                prof_model_spec sp = base;
                sp.hidden = hid[a];
                sp.heads = hid[a] / 32;
                sp.kv_heads = sp.heads;
                sp.head_dim = 32;
                sp.ffn = 4 * hid[a];
                sp.seq_len = sp.max_pos = seq[b];
                sp.layers = 1;
                prof_model *m = prof_model_build(&sp, &e);
                cr_assert_not_null(m, "%s", e.msg);
                for (int i = 0; i < m->n_ops; i++)
                    for (int kd = SIM_F; kd <= SIM_W; kd++) {
                        exec_calib_sample x = {m->ops[i], mbs, (sim_kind)kd,
                                               0, set};
                        double t = exec_calib_model_ns(g, &x);
                        if (!(t > 0) || k == cap) continue;
                        x.ns = t * exp(run + noise(&seed, 0.02));
                        s[k++] = x;
                    }
                exec_calib_sample o;
                memset(&o, 0, sizeof o);
                o.mbs = 1;
                o.kind = SIM_OPT;
                o.op.params = 12.0 * hid[a] * hid[a] / mbs;
                o.set = set;
                o.ns = exec_calib_model_ns(g, &o) *
                       exp(run + noise(&seed, 0.02));
                s[k++] = o;
                prof_model_free(m);
            }
    *n = k;
    return s;
}

static exec_calib_sample *synthetic(const prof_gpu *g, int *n)
{
    return synthetic_runs(g, n, 0, 42);
}

static const prof_calib_param *param(const prof_calib_param *p, int n,
                                     const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(p[i].name, name)) return &p[i];
    cr_assert_fail("no fitted '%s'", name);
    return NULL;
}

Test(calib_fit, finds_known_figures_within_its_intervals)
{
    prof_gpu g = truth(), base, fit;
    util_err e;
    cr_assert_eq(prof_gpu_get_builtin("cpu", &base, &e), 0);
    int n;
    exec_calib_sample *s = synthetic(&g, &n);
    cr_assert_gt(n, 300);
    prof_calib_param p[PROF_CALIB_MAX_PARAMS];
    int np;
    double med, mx;
    cr_assert_eq(exec_calib_fit(s, n, &base, &fit, p, &np, &med, &mx, &e), 0,
                 "%s", e.msg);
    /* the noise is 2%: the fit explains everything else */
    cr_assert_lt(med, 0.03, "median error %g", med);
    cr_assert_lt(mx, 0.12, "largest error %g", mx);
    struct { const char *name; double want; } w[] = {
        {"gemm_tflops", 120e9 * 0.7 / 1e12}, {"gemm_half_mn", 24},
        {"gemm_half_k", 40}, {"mem_gb_per_s", 20 * 0.9},
        {"mem_half_bytes", 5e4}, {"mem_factor.act.F", 2.5},
        {"mem_factor.norm.B", 1.4}, {"gemm_factor.linear.B", 1.2},
        {"opt_factor", 0.6}};
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
        const prof_calib_param *q = param(p, np, w[i].name);
        cr_expect(q->lo <= w[i].want && w[i].want <= q->hi,
                  "%s: truth %g outside [%g, %g] (fitted %g)", w[i].name,
                  w[i].want, q->lo, q->hi, q->value);
        cr_expect_lt(fabs(q->value / w[i].want - 1), 0.15, "%s: %g vs %g",
                     w[i].name, q->value, w[i].want);
    }
    /* as the profile keeps it: the catalog's peak stays, efficiency
     * takes the rate */
    cr_assert_float_eq(fit.peak_flops[PROF_DT_FP32],
                       base.peak_flops[PROF_DT_FP32] > 84e9
                           ? base.peak_flops[PROF_DT_FP32] : 84e9, 1);
    cr_assert_leq(fit.eff.gemm_max, 1.0);
    cr_assert_leq(fit.eff.mem_max, 1.0);
    free(s);
}

/* Calibrating twice converges: on a machine whose state differs from one
 * microbenchmark run to the next (5% shared by a run's samples, beside
 * each sample's 2%), two calibrations' figures differ by no more than
 * their 95% intervals allow (in log space, the two half-widths combined
 * as independent errors). The covariance alone takes the samples as
 * independent and is too sure; the jackknife over runs is not. The truth
 * has no cache, so the cache's size and gain are whatever fits best
 * (left out); of the rest at most one in ten may move, as 95% intervals
 * allow by chance. */
Test(calib_fit, a_second_calibration_agrees_with_the_first)
{
    prof_gpu g = truth(), base, fit;
    util_err e;
    cr_assert_eq(prof_gpu_get_builtin("cpu", &base, &e), 0);
    prof_calib_param p[2][PROF_CALIB_MAX_PARAMS];
    int np[2];
    double med, mx;
    for (int k = 0; k < 2; k++) {
        int n;
        exec_calib_sample *s = synthetic_runs(&g, &n, 0.05, 7 + 1000 * k);
        cr_assert_eq(exec_calib_fit(s, n, &base, &fit, p[k], &np[k], &med,
                                    &mx, &e), 0, "%s", e.msg);
        free(s);
    }
    cr_assert_eq(np[0], np[1]);
    int moved = 0, compared = 0;
    for (int i = 0; i < np[0]; i++) {
        const prof_calib_param *a = &p[0][i], *b = &p[1][i];
        cr_assert_str_eq(a->name, b->name);
        if (!strncmp(a->name, "cache_", 6)) continue;
        double ha = log(a->hi / a->lo) / 2, hb = log(b->hi / b->lo) / 2;
        double d = fabs(log(b->value / a->value));
        compared++;
        if (d > sqrt(ha * ha + hb * hb)) {
            moved++;
            cr_log_warn("%s: %g then %g, intervals [%g, %g] and [%g, %g]",
                        a->name, a->value, b->value, a->lo, a->hi, b->lo,
                        b->hi);
        }
    }
    cr_expect_leq(10 * moved, compared, "%d of %d figures moved", moved,
                  compared);
}

/* A device whose streaming is faster inside a cache whose size the base
 * gives (calibrate reads a core's from the machine): the size is held,
 * listed with an interval of none; the gain is fitted, the truth within
 * its interval, and two calibrations agree on it and on the memory rate
 * (fitted with the size, the two slid against each other). */
Test(calib_fit, a_given_cache_size_is_held_and_its_gain_fitted)
{
    prof_gpu g = truth(), base, fit;
    g.eff.cache_bytes = 2e5;
    g.eff.cache_gain = 1.6;
    util_err e;
    cr_assert_eq(prof_gpu_get_builtin("cpu", &base, &e), 0);
    base.eff.cache_bytes = 2e5;
    prof_calib_param p[2][PROF_CALIB_MAX_PARAMS];
    int np[2];
    double med, mx;
    for (int k = 0; k < 2; k++) {
        int n;
        exec_calib_sample *s = synthetic_runs(&g, &n, 0.05, 11 + 1000 * k);
        cr_assert_eq(exec_calib_fit(s, n, &base, &fit, p[k], &np[k], &med,
                                    &mx, &e), 0, "%s", e.msg);
        free(s);
        cr_assert_eq(fit.eff.cache_bytes, 2e5);
        const prof_calib_param *c = param(p[k], np[k], "cache_bytes");
        cr_assert(c->value == 2e5 && c->lo == 2e5 && c->hi == 2e5,
                  "held at %g [%g, %g]", c->value, c->lo, c->hi);
        const prof_calib_param *q = param(p[k], np[k], "cache_gain_minus_1");
        cr_expect(q->lo <= 0.6 && 0.6 <= q->hi, "gain - 1: truth 0.6 "
                  "outside [%g, %g] (fitted %g)", q->lo, q->hi, q->value);
        cr_expect_lt(fabs(fit.eff.cache_gain / 1.6 - 1), 0.1, "gain %g",
                     fit.eff.cache_gain);
    }
    cr_assert_eq(np[0], np[1]);
    const char *both[] = {"cache_gain_minus_1", "mem_gb_per_s"};
    for (int i = 0; i < 2; i++) {
        const prof_calib_param *a = param(p[0], np[0], both[i]),
                               *b = param(p[1], np[1], both[i]);
        cr_expect(b->value >= a->lo && b->value <= a->hi, "%s: %g, then %g "
                  "outside [%g, %g]", both[i], a->value, b->value, a->lo,
                  a->hi);
    }
}

Test(calib_fit, refuses_too_few_or_one_sided_samples)
{
    prof_gpu g = truth(), out;
    util_err e;
    int n;
    exec_calib_sample *s = synthetic(&g, &n);
    prof_calib_param p[PROF_CALIB_MAX_PARAMS];
    int np;
    double med, mx;
    cr_assert_eq(exec_calib_fit(s, 5, &g, &out, p, &np, &med, &mx, &e), -1);
    cr_assert(strstr(e.msg, "a fit needs 12 or more"), "%s", e.msg);
    /* GEMMs only */
    int k = 0;
    for (int i = 0; i < n; i++)
        if (s[i].kind != SIM_OPT && s[i].op.n_gemm) s[k++] = s[i];
    cr_assert_eq(exec_calib_fit(s, k, &g, &out, p, &np, &med, &mx, &e), -1);
    cr_assert(strstr(e.msg, "GEMMs and memory-bound ops both"), "%s", e.msg);
    s[0].ns = NAN;
    cr_assert_eq(exec_calib_fit(s, n, &g, &out, p, &np, &med, &mx, &e), -1);
    free(s);
}

Test(calib_fit, link_latency_and_bandwidth)
{
    exec_calib_xfer x[10];
    uint64_t seed = 7;
    int n = 0;
    for (double b = 64; b <= 64 << 20 && n < 10; b *= 4, n++)
        x[n] = (exec_calib_xfer){b, (3000 + b / 12.0) *
                                        exp(noise(&seed, 0.03))};
    prof_calib_link l;
    prof_calib_param lat, bw;
    util_err e;
    cr_assert_eq(exec_calib_fit_link(x, n, &l, &lat, &bw, &e), 0, "%s",
                 e.msg);
    cr_expect(lat.lo <= 3.0 && 3.0 <= lat.hi, "latency [%g, %g] us", lat.lo,
              lat.hi);
    cr_expect(bw.lo <= 12 && 12 <= bw.hi, "bandwidth [%g, %g] GB/s", bw.lo,
              bw.hi);
    cr_expect_lt(fabs(l.bw_bytes_per_s / 12e9 - 1), 0.1);
    cr_assert_eq(exec_calib_fit_link(x, 2, &l, &lat, &bw, &e), -1);
    /* times that do not grow with size */
    for (int i = 0; i < n; i++) x[i].ns = 5000 - i;
    cr_assert_eq(exec_calib_fit_link(x, n, &l, &lat, &bw, &e), -1);
    cr_assert(strstr(e.msg, "too noisy"), "%s", e.msg);
}

/* ------------------------------------------------------------- files */

static prof_calib sample_calib(void)
{
    prof_calib c;
    memset(&c, 0, sizeof c);
    snprintf(c.device, sizeof c.device, "cpu");
    snprintf(c.date, sizeof c.date, "2026-11-23T10:00:00Z");
    prof_machine_this(&c.machine);
    snprintf(c.machine.device, sizeof c.machine.device, "CPU core");
    c.gpu = truth();
    c.gpu.eff.task_ns = 12000;
    c.gpu.eff.op_task_ns = 900;
    c.gpu.eff.split_factor[0] = 1.02;
    c.gpu.eff.split_factor[1] = 1.0625;
    c.link[PROF_XFER_INPROC] = (prof_calib_link){1, 9e9, 4000, 9, 0.1};
    c.n_param = 1;
    c.param[0] = (prof_calib_param){"gemm_tflops", 0.084, 0.08, 0.09};
    c.fit_samples = 400;
    c.fit_median_err = 0.04;
    c.fit_max_err = 0.3;
    c.busy[0] = 1;
    c.busy[1] = 1.1;
    c.n_busy = 2;
    prof_calib_add_op(&c, "cpu|linear|F|4|128,768,256,1", 123456, 10,
                      "gpt-mini", 2);
    prof_calib_add_op(&c, "cpu|norm|B|4|b262144", 2345, 30, "gpt-mini", 1);
    return c;
}

Test(calib_file, round_trip_and_lookups)
{
    char *d = test_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/cpu.json", d);
    prof_calib c = sample_calib(), r;
    util_err e;
    cr_assert_eq(prof_calib_save(&c, path, &e), 0, "%s", e.msg);
    cr_assert_eq(prof_calib_load(path, &r, &e), 0, "%s", e.msg);
    cr_assert_str_eq(r.device, "cpu");
    cr_assert_str_eq(r.date, c.date);
    cr_assert(prof_machine_same(&r.machine, &c.machine));
    cr_assert_float_eq(r.gpu.eff.gemm_half_k, 40, 1e-9);
    cr_assert_float_eq(r.gpu.eff.mem_factor[PROF_OP_ACT][PROF_PHASE_F], 2.5,
                       1e-9);
    cr_assert_float_eq(r.gpu.eff.gemm_factor[PROF_OP_LINEAR][PROF_PHASE_B],
                       1.2, 1e-9);
    cr_assert_float_eq(r.gpu.eff.task_ns, 12000, 1e-6);
    cr_assert_float_eq(r.gpu.eff.op_task_ns, 900, 1e-6);
    cr_assert_float_eq(r.gpu.eff.split_factor[0], 1.02, 1e-9);
    cr_assert_float_eq(r.gpu.eff.split_factor[1], 1.0625, 1e-9);
    cr_assert(r.link[PROF_XFER_INPROC].present);
    cr_assert(!r.link[PROF_XFER_MPI].present);
    cr_assert_float_eq(r.link[PROF_XFER_INPROC].bw_bytes_per_s, 9e9, 1);
    cr_assert_eq(r.n_ops, 2);
    cr_assert_float_eq(prof_calib_op_ns(&r, "cpu|norm|B|4|b262144", 1), 2345,
                       1e-9);
    cr_assert_lt(prof_calib_op_ns(&r, "cpu|norm|B|2|b262144", 1), 0);
    /* measured with two devices at once: alone it takes 1/1.1 of that,
     * with more than the calibration measured, the last factor */
    cr_assert_eq(r.n_busy, 2);
    const char *lin = "cpu|linear|F|4|128,768,256,1";
    cr_assert_float_eq(prof_calib_op_ns(&r, lin, 2), 123456, 1e-6);
    cr_assert_float_eq(prof_calib_op_ns(&r, lin, 1), 123456 / 1.1, 1e-6);
    cr_assert_float_eq(prof_calib_op_ns(&r, lin, 8), 123456, 1e-6);
    cr_assert_float_eq(prof_calib_busy(&r, 0), 1, 0);
    cr_assert_float_eq(prof_calib_busy(NULL, 5), 1, 0);
    /* merging samples: the mean weighted by their counts, each as if
     * measured with the entry's devices at once */
    prof_calib_add_op(&r, "cpu|norm|B|4|b262144", 3345, 10, NULL, 1);
    cr_assert_float_eq(prof_calib_op_ns(&r, "cpu|norm|B|4|b262144", 1), 2595,
                       1e-9);
    prof_calib_add_op(&r, "cpu|norm|B|4|b262144", 1.1 * 2595, 40, NULL, 2);
    cr_assert_float_eq(prof_calib_op_ns(&r, "cpu|norm|B|4|b262144", 1), 2595,
                       1e-6);
    const prof_calib_param *q = prof_calib_param_get(&r, "gemm_tflops");
    cr_assert(q && q->lo == 0.08);
    /* what would not load again is not written */
    cr_assert_eq(sh_run("cp %s %s.was", path, path), 0);
    r.gpu.eff.gemm_max = 1.5;
    cr_assert_eq(prof_calib_save(&r, path, &e), -1);
    cr_assert(strstr(e.msg, "would not load again") &&
              strstr(e.msg, "gemm_max"), "%s", e.msg);
    cr_assert_eq(sh_run("cmp -s %s %s.was", path, path), 0);
    prof_calib_free(&r);
    prof_calib_free(&c);
    test_rm_rf(d);
}

/* Each bad value gives FILE:LINE:COL and the field. */
/* Devices at once never run faster than alone: a measurement below 1
 * (noise; an earlier calibration stored 0.97) counts as 1, or the
 * simulation would run below the planner's compute bound, which then
 * threw the plan out as inconsistent. */
Test(calib_file, devices_at_once_are_never_faster)
{
    prof_calib c = sample_calib();
    c.busy[0] = 1;
    c.busy[1] = 0.9;
    c.busy[2] = 1.25;
    c.n_busy = 3;
    cr_expect_eq(prof_calib_busy(&c, 1), 1);
    cr_expect_eq(prof_calib_busy(&c, 2), 1);
    cr_expect_eq(prof_calib_busy(&c, 3), 1.25);
    cr_expect_eq(prof_calib_busy(&c, 8), 1.25);
    prof_calib_free(&c);
}

Test(calib_file, bad_values_are_named)
{
    char *d = test_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/cpu.json", d);
    prof_calib c = sample_calib();
    util_err e;
    cr_assert_eq(prof_calib_save(&c, path, &e), 0, "%s", e.msg);
    prof_calib_free(&c);
    struct { const char *sed, *want; } cases[] = {
        {"s/\"gemm_max\": [0-9.e+-]*/\"gemm_max\": 1.5/",
         "field 'gpu.eff.gemm_max': 1.5 is too large"},
        {"s/\"mem_bw_gb_per_s\": [0-9.e+-]*/\"mem_bw_gb_per_s\": -3/",
         "field 'gpu.mem_bw_gb_per_s'"},
        {"s/\"gb_per_s\": [0-9.e+-]*/\"gb_per_s\": 0/",
         "field 'links.in-process.gb_per_s'"},
        {"s/sluice-calibration/sluice-gpus/", "is not a calibration"},
        {"s/\"date\": \"[^\"]*\"/\"date\": \"yesterday\"/",
         "field 'date': 'yesterday' is not a UTC time"},
        /* a day its month lacks, and signs and spaces sscanf's %2d
         * would read as digits */
        {"s/\"date\": \"[^\"]*\"/\"date\": \"2026-02-29T00:00:00Z\"/",
         "field 'date': '2026-02-29T00:00:00Z' is not a UTC time"},
        {"s/\"date\": \"[^\"]*\"/\"date\": \"2026-11-29T-1:05:52Z\"/",
         "field 'date': '2026-11-29T-1:05:52Z' is not a UTC time"},
        {"s/\"date\": \"[^\"]*\"/\"date\": \"2026- 1-29T12:05:52Z\"/",
         "field 'date': '2026- 1-29T12:05:52Z' is not a UTC time"},
        {"s/\"device\": \"cpu\"/\"device\": \"nope\"/",
         "field 'device': unknown GPU type 'nope'"},
        {"s/cpu|norm/rtx4090|norm/", "is not a signature of cpu"},
        {"/\"ci95\"/{n;s/0.08/0.085/}", "does not hold the value"},
        {"s/\"task_ns\": [0-9.e+-]*/\"task_ns\": -1/",
         "field 'gpu.eff.task_ns'"},
        {"s/\"op_task_ns\": [0-9.e+-]*/\"op_task_ns\": -1/",
         "field 'gpu.eff.op_task_ns'"},
        {"s/\"F\": 2.5/\"F\": 0/", "field 'gpu.eff.mem_factor.act.F'"},
        {"s/\"W\": 1.0625/\"W\": 12/",
         "field 'gpu.eff.split_factor.W': 12 is too large"},
        {"/\"busy\": \\[/{n;s/1/2/}", "field 'busy': value 0"},
        {"s/\"busy\": 2,/\"busy\": 0,/", "field 'ops[0].busy'"},
        /* an op that takes no time would price a plan at nothing */
        {"0,/\"ns\": [0-9.e+]*/s//\"ns\": 0/", "field 'ops[0].ns'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char bad[600];
        snprintf(bad, sizeof bad, "%s/bad.json", d);
        cr_assert_eq(sh_run("sed '%s' %s > %s", cases[i].sed, path, bad), 0);
        prof_calib r;
        cr_assert_eq(prof_calib_load(bad, &r, &e), -1, "case %zu loaded", i);
        cr_expect(strstr(e.msg, "bad.json:") && strstr(e.msg, cases[i].want),
                  "case %zu: %s", i, e.msg);
        /* FILE:LINE:COL */
        const char *at = strstr(e.msg, "bad.json:");
        int line = 0, col = 0;
        cr_expect(at && sscanf(at, "bad.json:%d:%d", &line, &col) == 2 &&
                      line > 0 && col > 0, "case %zu: %s", i, e.msg);
        /* sluice profile validate and show check it the same way */
        if (i == 1) {
            cli_expect(2, cases[i].want, "profile validate %s", bad);
            cli_expect(2, cases[i].want, "profile show %s", bad);
        }
    }
    cli_expect(0, "valid calibration of 'cpu'", "profile validate %s", path);
    cli_expect(0, "valid calibration of 'cpu'", "profile show %s", path);
    /* a format validate cannot place, or none, on a calibration: named
     * as such, not as a server file gone wrong */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad.json", d);
    cr_assert_eq(sh_run("sed 's/sluice-calibration/other/' %s > %s", path,
                        bad), 0);
    cli_expect(2, "field 'format': 'other': not a format sluice reads "
               "(sluice-server", "profile validate %s", bad);
    cr_assert_eq(sh_run("sed 's/\"sluice-calibration\"/5/' %s > %s", path,
                        bad), 0);
    cli_expect(2, "field 'format': not a string, not a format sluice reads",
               "profile validate %s", bad);
    cr_assert_eq(sh_run("grep -v '\"format\"' %s > %s", path, bad), 0);
    cli_expect(2, "no 'format': a calibration", "profile validate %s", bad);
    test_rm_rf(d);
}

/* ------------------------------------------------- the profile folder */

Test(calib_dir, precedence_and_lookups)
{
    char *d = test_tmpdir(), path[600];
    /* the suite runs without one */
    cr_assert_null(prof_profile_dir());
    cr_assert_null(prof_calib_path("cpu", path, sizeof path));
    prof_profile_dir_set(d);
    cr_assert_str_eq(prof_profile_dir(), d);
    cr_assert_not_null(prof_calib_path("cpu", path, sizeof path));
    prof_gpu g;
    util_err e;
    cr_assert_eq(prof_gpu_get("cpu", &g, &e), 0);
    cr_assert_null(g.calib, "no file yet");
    prof_calib c = sample_calib();
    cr_assert_eq(prof_calib_save(&c, path, &e), 0, "%s", e.msg);
    cr_assert_eq(prof_gpu_get("cpu", &g, &e), 0, "%s", e.msg);
    cr_assert_not_null(g.calib);
    cr_assert_float_eq(g.eff.gemm_half_mn, 24, 1e-9);
    cr_assert_float_eq(g.eff.task_ns, 12000, 1e-6);
    cr_assert_float_eq(g.eff.op_task_ns, 900, 1e-6);
    /* other types keep the catalog */
    cr_assert_eq(prof_gpu_get("rtx4090", &g, &e), 0);
    cr_assert_null(g.calib);
    /* the template prices copies with the measured link */
    char *args[] = {"cpu", "x2"};
    prof_topo *t = prof_topo_from_args(2, args, NULL, &e);
    cr_assert_not_null(t, "%s", e.msg);
    int n;
    const int *dl = prof_topo_gpu_route(t, 0, 1, &n);
    cr_assert_float_eq(prof_route_bw(t, dl, n), 9e9, 1);
    cr_assert_float_eq(prof_route_latency_ns(t, dl, n), 4000, 1e-6);
    cr_assert(strstr(t->host, "calibrated 2026-11-23"), "%s", t->host);
    /* each compute task of a stage pays the runtime's cost per task and
     * per op it runs; an optimizer step, one op's */
    prof_model *m = prof_model_load("gpt-tiny", &e);
    cr_assert_not_null(m, "%s", e.msg);
    int first[2] = {0, 9}, last[2] = {8, m->n_ops - 1}, dev[2] = {0, 1};
    sim_cost_opts co = {.mbs = 1};
    sim_costs *sc = sim_costs_build(m, t, 2, first, last, dev, 2, &co, &e);
    cr_assert_not_null(sc, "%s", e.msg);
    cr_expect_eq(sc->stage[0].task_ns, 12000 + 9 * 900);
    cr_expect_eq(sc->stage[1].task_ns, 12000 + (m->n_ops - 9) * 900);
    cr_expect_eq(sc->stage[1].opt_task_ns, 12000 + 900);
    sim_costs_free(sc);
    prof_model_free(m);
    prof_topo_free(t);
    /* a file that changes is read again */
    c.gpu.eff.gemm_half_mn = 99;
    sleep(1);   /* a new modification time on coarse clocks */
    cr_assert_eq(prof_calib_save(&c, path, &e), 0, "%s", e.msg);
    cr_assert_eq(prof_gpu_get("cpu", &g, &e), 0, "%s", e.msg);
    cr_assert_float_eq(g.eff.gemm_half_mn, 99, 1e-9);
    /* a broken one is an error wherever the type is asked for */
    cr_assert_eq(sh_run("echo '{\"format\": \"sluice-calibration\", "
                        "\"device\": 3}' > %s", path), 0);
    cr_assert_eq(prof_gpu_get("cpu", &g, &e), -1);
    cr_assert(strstr(e.msg, "cpu.json:1:") && strstr(e.msg, "'device'"),
              "%s", e.msg);
    prof_calib_free(&c);
    test_rm_rf(d);
}

/* sim and plan see the calibration: a machine twice as fast at GEMMs
 * (and everything else as the catalog has it) finishes sooner. */
/* A calibration of device dev on this machine, dated date, holding the
 * built-in figures (a test changes some). */
static prof_calib builtin_calib(const char *dev, const char *date)
{
    prof_calib c;
    memset(&c, 0, sizeof c);
    snprintf(c.device, sizeof c.device, "%s", dev);
    snprintf(c.date, sizeof c.date, "%s", date);
    prof_machine_this(&c.machine);
    util_err e;
    cr_assert_eq(prof_gpu_get_builtin(dev, &c.gpu, &e), 0, "%s", e.msg);
    return c;
}

/* The backward's halves as tasks of their own cost what calibration
 * measured them to (prof_eff.split_factor): a zero-bubble plan's B and W
 * take that much longer, a plan whose backward is one task does not. */
Test(calib_dir, split_backward_factors)
{
    char *d = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/cpu.json", d);
    prof_calib c = builtin_calib("cpu", "2026-11-23T10:00:00Z");
    util_err e;
    double t[2][2];     /* [factors][gpipe, zb-h1] */
    const char *sch[2] = {"gpipe", "zb-h1"};
    for (int f = 0; f < 2; f++) {
        c.gpu.eff.split_factor[0] = f ? 1.5 : 1;
        c.gpu.eff.split_factor[1] = f ? 2 : 1;
        cr_assert_eq(prof_calib_save(&c, path, &e), 0, "%s", e.msg);
        for (int k = 0; k < 2; k++) {
            json_t *j = cli_json("--profile-dir %s sim --hw cpu x1 --model "
                                 "gpt-mini --schedule %s --pp 1 --mbs 2 "
                                 "--microbatches 2 --json", d, sch[k]);
            t[f][k] = json_real_value(json_object_get(j,
                                                      "iteration_time_s"));
            json_decref(j);
        }
    }
    prof_calib_free(&c);
    cr_expect_eq(t[1][0], t[0][0], "GPipe's backward is one task");
    /* B at 1.5 and W at 2 times: the backward, most of the step, at
     * between 1.5 and 2 times */
    cr_expect(t[1][1] > 1.3 * t[0][1] && t[1][1] < 2 * t[0][1],
              "zb-h1 %g s against %g s", t[1][1], t[0][1]);
    test_rm_rf(d);
}

Test(calib_dir, sim_uses_the_calibrated_figures)
{
    char *d = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/cpu.json", d);
    prof_calib c = builtin_calib("cpu", "2026-11-23T10:00:00Z");
    util_err e;
    c.gpu.peak_flops[PROF_DT_FP32] *= 2;
    cr_assert_eq(prof_calib_save(&c, path, &e), 0, "%s", e.msg);
    const char *args = "sim --hw cpu x2 --model gpt-mini --schedule 1f1b "
                       "--pp 2 --mbs 2 --microbatches 8 --json";
    cli_result a = cli_run("%s", args);
    cli_result b = cli_run("--profile-dir %s %s", d, args);
    cli_result b2 = cli_run("%s --profile-dir=%s", args, d);
    cr_assert_eq(a.code, 0, "%s", a.err);
    cr_assert_eq(b.code, 0, "%s", b.err);
    cr_assert_eq(b2.code, 0, "%s", b2.err);
    cr_assert_str_eq(b.out, b2.out);
    cr_expect(!strstr(b.err, "was measured on"), "%s", b.err);
    /* the report says which figures priced it: a calibration's date and
     * file, nothing where the built-in ones did (it was unsaid) */
    {
        const char *tx = "sim --hw cpu x2 --model gpt-mini --schedule 1f1b "
                         "--pp 2 --mbs 2 --microbatches 8";
        char want[700];
        snprintf(want, sizeof want, "\nfigures: cpu as calibrated "
                 "2026-11-23T10:00:00Z, %s\n", path);
        cli_result t = cli_run("--profile-dir %s %s", d, tx);
        cr_assert_eq(t.code, 0, "%s", t.err);
        cr_expect(strstr(t.out, want), "%s", t.out);
        cli_result_free(&t);
        t = cli_run("%s", tx);
        cr_assert_eq(t.code, 0, "%s", t.err);
        cr_expect(!strstr(t.out, "figures:"), "%s", t.out);
        cli_result_free(&t);
    }
    json_t *ja = json_loads(a.out, 0, NULL), *jb = json_loads(b.out, 0, NULL);
    double ta = json_real_value(json_object_get(ja, "iteration_time_s"));
    double tb = json_real_value(json_object_get(jb, "iteration_time_s"));
    cr_assert_lt(tb, 0.7 * ta, "calibrated %g, built-in %g", tb, ta);
    json_decref(ja);
    json_decref(jb);
    cli_result_free(&a);
    cli_result_free(&b);
    cli_result_free(&b2);
    /* another machine's CPU figures are used, and said to be */
    char other[600];
    snprintf(other, sizeof other, "%s/other", d);
    cr_assert_eq(mkdir(other, 0700), 0);
    snprintf(path, sizeof path, "%s/cpu.json", other);
    snprintf(c.machine.cpu, sizeof c.machine.cpu, "Some Other CPU 9000");
    cr_assert_eq(prof_calib_save(&c, path, &e), 0, "%s", e.msg);
    cli_result o = cli_run("--profile-dir %s %s", other, args);
    cr_expect_eq(o.code, 0, "%s", o.err);
    cr_expect(strstr(o.err, "was measured on Some Other CPU 9000"), "%s",
              o.err);
    cli_result_free(&o);
    snprintf(path, sizeof path, "%s/cpu.json", d);
    /* profile list names it */
    cli_result l = cli_run("--profile-dir %s profile list", d);
    cr_assert_eq(l.code, 0, "%s", l.err);
    cr_assert(strstr(l.out, "calibrated on a machine") &&
              strstr(l.out, "2026-11-23T10:00:00Z"), "%s", l.out);
    cli_result_free(&l);
    l = cli_run("--profile-dir %s profile list --json", d);
    cr_assert(strstr(l.out, "\"calibrated\"") && strstr(l.out, "cpu.json"),
              "%s", l.out);
    cli_result_free(&l);
    /* a broken file is named by profile list and by sim */
    cr_assert_eq(sh_run("printf '{\\n  \"format\": \"sluice-calibration\","
                        "\\n  \"version\": 7\\n}\\n' > %s", path), 0);
    l = cli_run("--profile-dir %s profile list", d);
    cr_assert_eq(l.code, 2, "%s", l.err);
    cr_assert(strstr(l.err, "cpu.json:3:") && strstr(l.err, "'version'"),
              "%s", l.err);
    cli_result_free(&l);
    /* two broken files: both named, a line each (only the first in the
     * catalog's order, rtx4090's, was) */
    cr_assert_eq(sh_run("printf '{\\n  \"format\": \"sluice-calibration\","
                        "\\n  \"version\": \"x\"\\n}\\n' > "
                        "%s/rtx4090.json", d), 0);
    l = cli_run("--profile-dir %s profile list", d);
    cr_expect_eq(l.code, 2, "%s", l.err);
    cr_expect(strstr(l.err, "sluice profile: ") &&
              strstr(l.err, "rtx4090.json:3:") &&
              strstr(l.err, "\nsluice profile: ") &&
              strstr(l.err, "cpu.json:3:"), "%s", l.err);
    cli_result_free(&l);
    /* and in the answer itself, which a script reads alone: not an
     * empty list of calibrations */
    l = cli_run("--profile-dir %s profile list", d);
    cr_expect(strstr(l.out, "calibrations that do not load") &&
              strstr(l.out, "rtx4090.json:3:") &&
              strstr(l.out, "cpu.json:3:"), "%s", l.out);
    cli_result_free(&l);
    l = cli_run("--profile-dir %s profile list --json", d);
    cr_expect_eq(l.code, 2);
    json_t *jl = json_loads(l.out, 0, NULL);
    cr_expect_eq(json_array_size(json_object_get(jl, "broken")), 2, "%s",
                 l.out);
    json_decref(jl);
    cli_result_free(&l);
    cr_assert_eq(sh_run("rm %s/rtx4090.json", d), 0);
    l = cli_run("--profile-dir %s %s", d, args);
    cr_assert_eq(l.code, 2);
    cr_assert(strstr(l.err, "cpu.json:3:"), "%s", l.err);
    cli_result_free(&l);
    l = cli_run("sim --profile-dir");
    cr_assert_eq(l.code, 2);
    cr_assert(strstr(l.err, "--profile-dir needs a folder"), "%s", l.err);
    cli_result_free(&l);
    /* a file is no folder; a folder not there yet is said, not an error */
    l = cli_run("--profile-dir %s/cpu.json profile list", d);
    cr_expect_eq(l.code, 2);
    cr_expect(strstr(l.err, "is not a folder"), "%s", l.err);
    cli_result_free(&l);
    l = cli_run("--profile-dir %s/typo profile list", d);
    cr_expect_eq(l.code, 0, "%s", l.err);
    cr_expect(strstr(l.err, "typo does not exist"), "%s", l.err);
    cli_result_free(&l);
    /* SLUICE_PROFILE_DIR naming a file is refused as the option is (it
     * was read as a folder without profiles: exec --calibrate said
     * FILE/cpu.json did not exist) */
    cr_expect_eq(sh_run("SLUICE_PROFILE_DIR=%s/cpu.json \"$SLUICE\" profile "
                        "list > %s/env.out 2>&1", d, d), 2);
    cr_expect_eq(sh_run("grep -q 'SLUICE_PROFILE_DIR .*cpu.json is not a "
                        "folder' %s/env.out", d), 0, "see %s/env.out", d);
    /* no folder: the message says why, not that the variable is empty */
    l = cli_run("--profile-dir '' calibrate --hw cpu x1 --quick");
    cr_expect_eq(l.code, 2);
    cr_expect(strstr(l.err, "(--profile-dir is empty)"), "%s", l.err);
    cli_result_free(&l);
    test_rm_rf(d);
}

/* ------------------------------------------------------ the command */

static long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) ? -1 : (long)st.st_size;
}

Test(calib_cli, writes_a_profile_that_loads_and_compares_runs)
{
    char *d = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/sub/cpu.json", d);
    cli_result r = cli_run("calibrate --hw cpu x2 --quick --profile-dir "
                           "%s/sub", d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "fit of the cost model to") &&
              strstr(r.out, "in-process transfers:") &&
              strstr(r.out, "wrote "), "%s", r.out);
    /* the fit's error per op kind, Llama's rotation among them */
    cr_expect(strstr(r.out, "the fit's error by op kind and phase") &&
              strstr(r.out, "\n  rope      F") &&
              strstr(r.out, "\n  adamw     OPT"), "%s", r.out);
    char *out = strdup(r.out);
    cli_result_free(&r);
    prof_calib c;
    util_err e;
    cr_assert_eq(prof_calib_load(path, &c, &e), 0, "%s", e.msg);
    cr_assert_gt(c.fit_samples, 50);
    /* a figure the samples do not pin (its interval spans the doubles)
     * is said so in words, not as [7.5e-312, 7.7e+296]; the others show
     * their interval */
    for (int i = 0; i < c.n_param; i++) {
        const prof_calib_param *p = &c.param[i];
        char key[96];
        snprintf(key, sizeof key, "\n  %s ", p->name);
        const char *row = strstr(out, key);
        cr_expect_not_null(row, "no row for %s", p->name);
        if (!row) continue;
        const char *eol = strchr(row + 1, '\n'),
                   *none = strstr(row, "none: the samples do not pin it");
        int said = none && (!eol || none < eol);
        cr_expect_eq(said, !(p->hi <= 1e100 * p->lo), "%s [%g, %g]: %.*s",
                     p->name, p->lo, p->hi,
                     (int)(eol ? eol - row : (long)strlen(row)), row);
    }
    free(out);
    cr_assert(c.link[PROF_XFER_INPROC].present);
    /* the runtime's own cost, per op a task runs */
    cr_assert_gt(c.gpu.eff.op_task_ns, 0);
    cr_assert_eq(c.gpu.eff.task_ns, 0);
    cr_assert(strstr(c.gpu.source, "calibrated "), "%s", c.gpu.source);
    prof_calib_free(&c);
    /* a named folder is made, not the ones above it (a typo made a
     * tree of them) */
    r = cli_run("calibrate --hw cpu x2 --quick --profile-dir %s/no/sub", d);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "/no does not exist (calibrate makes the "
                     "profile folder, not the folders above it)"), "%s",
              r.err);
    cli_result_free(&r);
    snprintf(path, sizeof path, "%s/no", d);
    cr_expect_neq(access(path, F_OK), 0, "%s was made", path);
    snprintf(path, sizeof path, "%s/sub/cpu.json", d);
    /* a second run compares with the first */
    r = cli_run("--profile-dir %s/sub calibrate --hw cpu x2 --quick", d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "previous [interval]"), "%s", r.out);
    cli_result_free(&r);
    /* --json, --out */
    r = cli_run("calibrate --hw cpu x2 --quick --json --out %s/o.json", d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_t *j = json_loads(r.out, 0, NULL);
    cr_assert_not_null(j, "%s", r.out);
    cr_assert(json_array_size(json_object_get(j, "samples")) > 50);
    cr_assert_str_eq(json_string_value(json_object_get(j, "format")),
                     "sluice-calibration");
    json_decref(j);
    cli_result_free(&r);
    test_rm_rf(d);
}

Test(calib_cli, bad_requests)
{
    struct { const char *args, *want; } c[] = {
        {"calibrate", "--hw is required"},
        {"calibrate --hw", "--hw needs a device type"},
        {"calibrate --hw cpu x2 --frobnicate", "unknown option '--frobnicate'"},
        {"calibrate --hw rtx4090 x1 --out /tmp/x.json",
         "measured on this machine's GPUs"},
        {"calibrate --hw cpu x2", "no profile directory"},
        {"calibrate --hw nope x2 --out /tmp/x.json", "unknown GPU type 'nope'"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        cli_result r = cli_run("%s", c[i].args);
        cr_expect_eq(r.code, 2, "%s: %d %s", c[i].args, r.code, r.err);
        cr_expect(strstr(r.err, c[i].want), "%s: %s", c[i].args, r.err);
        cli_result_free(&r);
    }
    /* refused before measuring, and leaves no folder behind: --out in a
     * folder that is not there (as every output), a profile directory
     * made only when its profile is written */
    char *d = test_tmpdir();
    cli_expect(2, "No such file or directory", "calibrate --hw cpu x1 "
               "--quick --out %s/no/cpu.json", d);
    cli_expect(2, "--offload-path '/nonexistent'", "--profile-dir %s/p "
               "calibrate --hw cpu x1 --quick --offload-path /nonexistent", d);
    cr_expect_eq(sh_run("test -z \"$(ls -A %s)\"", d), 0, "folders made");
    test_rm_rf(d);
}

/* Killed or stopped midway: the previous profile is byte for byte what it
 * was, and no temporary file is left beside it. */
Test(calib_cli, a_killed_or_stopped_run_leaves_the_previous_profile)
{
    char *d = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/cpu.json", d);
    prof_calib c = sample_calib();
    util_err e;
    /* a full calibration of this machine: --quick refuses to replace it,
     * before it measures anything */
    cr_assert_eq(prof_calib_save(&c, path, &e), 0, "%s", e.msg);
    cr_assert_eq(sh_run("cp %s %s/before", path, d), 0);
    cli_expect(2, "holds a full calibration of this machine", "--profile-dir "
               "%s calibrate --hw cpu x2 --quick", d);
    cr_expect_eq(sh_run("cmp -s %s %s/before", path, d), 0);
    /* a quick one it replaces */
    c.quick = 1;
    cr_assert_eq(prof_calib_save(&c, path, &e), 0, "%s", e.msg);
    prof_calib_free(&c);
    cr_assert_eq(sh_run("cp %s %s/before", path, d), 0);
    /* SIGHUP: the terminal closed under it */
    const int sig[] = {SIGKILL, SIGINT, SIGTERM, SIGHUP};
    for (int k = 0; k < 4; k++) {
        /* started, then signalled once it has begun measuring */
        /* its scratch in a folder of the test's own (TMPDIR), kept from
         * run to run: what the killed one left, the next removes */
        int rc = sh_run("cd %s && rm -rf log && mkdir -p scratch && "
                        "(TMPDIR=%s/scratch \"$SLUICE\" --profile-dir "
                        "%s calibrate --hw cpu x2 --quick 2> log & p=$!; "
                        "while kill -0 $p 2>/dev/null && "
                        "! grep -q 'ops: hidden' log; do sleep 0.05; "
                        "done; kill -%d $p; wait $p; echo $? > rc)", d, d, d,
                        sig[k]);
        cr_assert_eq(rc, 0);
        char rcp[700];
        snprintf(rcp, sizeof rcp, "%s/rc", d);
        FILE *f = fopen(rcp, "r");
        int code = -1;
        cr_assert(f && fscanf(f, "%d", &code) == 1);
        fclose(f);
        if (sig[k] == SIGKILL) {
            cr_expect_eq(code, 137);
            /* a killed process cannot tidy up */
            cr_expect_eq(sh_run("ls %s/scratch | grep -q "
                                "'^sluice-calibrate-'", d), 0);
        } else {
            cr_expect_eq(code, 1, "signal %d: exit %d", sig[k], code);
            cr_expect_eq(sh_run("grep -q 'stopped; .* is as it was' %s/log",
                                d), 0);
            /* stopped, it removes its scratch, and the killed run's
             * (its process gone) went as it began */
            cr_expect_eq(sh_run("test -z \"$(ls -A %s/scratch)\"", d), 0,
                         "signal %d left scratch", sig[k]);
        }
        cr_expect_eq(sh_run("cmp -s %s %s/before", path, d), 0,
                     "signal %d changed the profile", sig[k]);
        cr_expect_eq(sh_run("ls -a %s | grep -q tmp", d), 1,
                     "a temporary file was left: signal %d", sig[k]);
    }
    cr_assert_gt(file_size(path), 100);
    /* only folders of this host's calibrations whose owner is gone:
     * whose note nobody holds locked. Not one a live owner holds, even
     * where its process id means nothing here (another process space
     * sharing TMPDIR); one whose number a live process took since, yes.
     * Nor another host's (a TMPDIR shared over the network), nor one
     * without its owner note */
    pid_t dead = fork();
    if (!dead) _exit(0);
    cr_assert_gt(dead, 0);
    waitpid(dead, NULL, 0);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    const struct {
        const char *name;
        long pid;
        const char *host;
        int held, gone;
    } f[] = {{"sluice-calibrate-dead01", dead, host, 0, 1},
             {"sluice-calibrate-alive1", getpid(), host, 1, 0},
             {"sluice-calibrate-other1", dead, "another-host", 0, 0},
             {"sluice-calibrate-nonote", 0, NULL, 0, 0},
             {"sluice-calibrate-elsewh", dead, host, 1, 0},
             {"sluice-calibrate-reused", getpid(), host, 0, 1}};
    int nf = (int)(sizeof f / sizeof *f), held[8];
    for (int i = 0; i < nf; i++) {
        held[i] = -1;
        cr_assert_eq(sh_run("mkdir -p %s/scratch/%s && touch "
                            "%s/scratch/%s/layer.json", d, f[i].name, d,
                            f[i].name), 0);
        if (!f[i].host) continue;
        cr_assert_eq(sh_run("echo '%ld %s' > %s/scratch/%s/owner",
                            f[i].pid, f[i].host, d, f[i].name), 0);
        if (!f[i].held) continue;
        char o[600];
        snprintf(o, sizeof o, "%s/scratch/%s/owner", d, f[i].name);
        held[i] = open(o, O_RDONLY | O_CLOEXEC);
        cr_assert_geq(held[i], 0);
        cr_assert_eq(flock(held[i], LOCK_EX | LOCK_NB), 0);
    }
    cr_assert_eq(sh_run("cd %s && rm -f log && (TMPDIR=%s/scratch "
                        "\"$SLUICE\" --profile-dir %s calibrate --hw cpu x2 "
                        "--quick 2> log & p=$!; while kill -0 $p 2>/dev/null "
                        "&& ! grep -q 'ops: hidden' log; do sleep 0.05; "
                        "done; kill -INT $p; wait $p)", d, d, d), 1);
    for (int i = 0; i < nf; i++) {
        cr_expect_eq(sh_run("test -d %s/scratch/%s", d, f[i].name),
                     f[i].gone, "%s", f[i].name);
        if (held[i] >= 0) close(held[i]);
    }
    test_rm_rf(d);
}

/* A round of transfers whose times do not grow with size (a busy
 * machine's, SLUICE_CALIBRATE_NOISY rounds of them) is measured again
 * once; two such rounds fail the calibration, naming why, and write no
 * profile. */
Test(calib_cli, noisy_transfers_are_measured_again)
{
    char *d = test_tmpdir();
    cr_assert_eq(sh_run("SLUICE_CALIBRATE_NOISY=1 \"$SLUICE\" --profile-dir "
                        "%s calibrate --hw cpu x2 --quick --out %s/a.json "
                        "> /dev/null 2> %s/log", d, d, d), 0);
    cr_expect_eq(sh_run("grep -q 'too noisy to fit a link; measured again' "
                        "%s/log", d), 0);
    char a[600];
    snprintf(a, sizeof a, "%s/a.json", d);
    cr_expect_gt(file_size(a), 100);
    cr_expect_eq(sh_run("SLUICE_CALIBRATE_NOISY=2 \"$SLUICE\" --profile-dir "
                        "%s calibrate --hw cpu x2 --quick --out %s/b.json "
                        "> /dev/null 2> %s/log", d, d, d), 1);
    cr_expect_eq(sh_run("grep -q 'in-process transfers: .*too noisy to fit "
                        "a link$' %s/log", d), 0);
    cr_expect_eq(sh_run("test -e %s/b.json", d), 1);
    test_rm_rf(d);
}

/* The first "calibration: N op times measured" count in out, or -1. */
static int op_times(const char *out)
{
    const char *p = strstr(out, "calibration: ");
    int n = -1;
    if (p) sscanf(p, "calibration: %d op times", &n);
    return n;
}

/* exec --calibrate adds every op part a run timed, under the signature
 * the cost model looks up; sim then uses the measured time; MPI ranks
 * add theirs up; a calibration of other hardware, or none, is refused. */
Test(calib_cli, exec_adds_a_runs_op_times)
{
    char *d = test_tmpdir(), *cwd = getcwd(NULL, 0);
    cli_result r = cli_run("--profile-dir %s calibrate --hw cpu x2 --quick "
                           "--out %s/cpu.json", d, d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("sim --hw cpu x2 --model %s/tests/data/exec/gpt-pico.json "
                "--schedule 1f1b --pp 2 --mbs 2 --microbatches 4 --out "
                "%s/p.json", cwd, d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("--profile-dir %s exec --plan %s/p.json --steps 3 --quiet "
                "--calibrate", d, d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    /* its simulated figures are said to be the calibration's */
    cr_expect(strstr(r.out, "simulated from   cpu as calibrated ") &&
              strstr(r.out, "/cpu.json\n"), "%s", r.out);
    int n1 = op_times(r.out);
    cr_assert_gt(n1, 10, "%s", r.out);
    cli_result_free(&r);
    /* the signatures are the cost model's, and it uses them */
    prof_profile_dir_set(d);
    prof_gpu g;
    util_err e;
    cr_assert_eq(prof_gpu_get("cpu", &g, &e), 0, "%s", e.msg);
    cr_assert_not_null(g.calib);
    cr_assert_gt(g.calib->n_ops, 5);
    cr_assert_gt(g.eff.op_task_ns, 0);
    prof_model *m = prof_model_load("tests/data/exec/gpt-pico.json", &e);
    cr_assert_not_null(m, "%s", e.msg);
    int hits = 0;
    for (int i = 0; i < m->n_ops; i++) {
        char sig[128];
        sim_op_signature(&g, &m->ops[i], 2, SIM_F, sig, sizeof sig);
        double ns = prof_calib_op_ns(g.calib, sig, g.busy);
        if (ns < 0) continue;
        hits++;
        cr_assert_eq(sim_op_ns(&g, PROF_DT_FP32, &m->ops[i], 2, SIM_F, NULL),
                     (int64_t)llround(ns), "%s", sig);
    }
    cr_assert_eq(hits, m->n_ops, "every op's forward was measured");
    cr_assert(strstr(g.calib->ops[0].model, "gpt-pico"), "%s",
              g.calib->ops[0].model);
    prof_model_free(m);
    /* MPI: each rank times its own ops, rank 0 adds them all */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cd %s && " MPIRUN " \"$SLUICE\" "
             "--profile-dir %s exec --plan p.json --steps 3 --quiet "
             "--calibrate > mpi.out 2>&1", d, d);
    cr_assert_eq(sh_run("%s", cmd), 0);
    char path[700];
    snprintf(path, sizeof path, "%s/mpi.out", d);
    FILE *f = fopen(path, "r");
    char buf[8192] = "";
    size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[got] = 0;
    if (f) fclose(f);
    cr_assert_eq(op_times(buf), n1, "%s", buf);
    /* refusals */
    r = cli_run("--profile-dir %s/none exec --plan %s/p.json --steps 3 "
                "--calibrate", d, d);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "does not exist: run sluice calibrate --hw cpu "
                     "x2 first"), "%s", r.err);
    /* said once, not after the general note that the folder is not
     * there */
    cr_expect(!strstr(r.err, "no calibrated profiles"), "%s", r.err);
    cli_result_free(&r);
    cr_assert_eq(sh_run("sed -i 's/\"cores\": [0-9]*/\"cores\": 999/' "
                        "%s/cpu.json", d), 0);
    r = cli_run("--profile-dir %s exec --plan %s/p.json --steps 3 "
                "--calibrate", d, d);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "999 cores") &&
              strstr(r.err, "its figures are not this machine's"), "%s",
              r.err);
    cli_result_free(&r);
    r = cli_run("exec --model gpt-tiny --steps 1 --calibrate");
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "--calibrate needs --plan"), "%s", r.err);
    cli_result_free(&r);
    /* a GPU's plan run on CPU cores: its op times are no GPU's */
    cli_expect(0, "", "sim --hw rtx4090 x2 --model gpt-tiny --schedule 1f1b "
               "--pp 2 --mbs 2 --microbatches 2 --out %s/g.json", d);
    cli_expect(2, "the plan is for rtx4090 x2, this run's devices are CPU "
               "cores (--backend cpu)", "--profile-dir %s exec --plan "
               "%s/g.json --steps 2 --calibrate", d, d);
    free(cwd);
    test_rm_rf(d);
}

/* gpt-mini's graph. */
static prof_model *mini_model(void)
{
    util_err e;
    prof_model_spec sp;
    cr_assert_eq(prof_model_spec_get("gpt-mini", &sp, &e), 0);
    prof_model *m = prof_model_build(&sp, &e);
    cr_assert_not_null(m, "%s", e.msg);
    return m;
}

/* A calibration's op times are the executor's, in fp32: they price an
 * fp32 plan, never a bf16 one, which the datasheet's figures price (a
 * GPU's fp32 kernels would slow its bf16 plans). */
Test(calib_runs, measured_times_price_fp32_plans_only)
{
    util_err e;
    prof_model *m = mini_model();
    prof_gpu sheet, g;
    cr_assert_eq(prof_gpu_get_builtin("h100-sxm", &sheet, &e), 0);
    const prof_op *op = &m->ops[2];
    char key[128];
    sim_op_signature(&sheet, op, 2, SIM_F, key, sizeof key);
    prof_calib c;
    memset(&c, 0, sizeof c);
    snprintf(c.device, sizeof c.device, "h100-sxm");
    c.gpu = sheet;
    c.gpu.eff.gemm_max = 1.0;
    c.gpu.eff.launch_ns *= 3;
    prof_calib_add_op(&c, key, 123456789, 5, "gpt-mini", 1);
    g = c.gpu;
    g.calib = &c;
    g.datasheet = &sheet;
    cr_expect_eq(sim_op_ns(&g, PROF_DT_FP32, op, 2, SIM_F, NULL), 123456789);
    int64_t bf = sim_op_ns(&g, PROF_DT_BF16, op, 2, SIM_F, NULL);
    cr_expect_eq(bf, sim_op_ns(&sheet, PROF_DT_BF16, op, 2, SIM_F, NULL));
    cr_expect_neq(bf, sim_op_ns(&c.gpu, PROF_DT_BF16, op, 2, SIM_F, NULL));
    prof_calib_free(&c);
    prof_model_free(m);
}

/* Under TF32 a product has the times a TF32 run measured (its signature
 * ends in "|tf32"), else the datasheet's TF32 formula, never the fp32
 * product's time; an op that is no product is the fp32 kernel and keeps
 * its fp32 time. */
Test(calib_runs, tf32_products_have_times_of_their_own)
{
    util_err e;
    prof_model *m = mini_model();
    const prof_op *mm = NULL, *nm = NULL;
    for (int i = 0; i < m->n_ops; i++) {
        if (!mm && m->ops[i].role == PROF_ROLE_MLP_UP) mm = &m->ops[i];
        if (!nm && m->ops[i].role == PROF_ROLE_NORM) nm = &m->ops[i];
    }
    cr_assert(mm && nm);
    prof_gpu sheet, g;
    cr_assert_eq(prof_gpu_get_builtin("h100-sxm", &sheet, &e), 0);
    char k32[128], ktf[140], kn32[128], kntf[140];
    sim_op_signature(&sheet, mm, 2, SIM_F, k32, sizeof k32);
    sim_op_signature_dt(&sheet, mm, 2, SIM_F, PROF_DT_TF32, ktf, sizeof ktf);
    sim_op_signature(&sheet, nm, 2, SIM_F, kn32, sizeof kn32);
    sim_op_signature_dt(&sheet, nm, 2, SIM_F, PROF_DT_TF32, kntf,
                        sizeof kntf);
    cr_expect(strlen(ktf) == strlen(k32) + 5 &&
              !strcmp(ktf + strlen(k32), "|tf32"), "%s", ktf);
    cr_expect_str_eq(kntf, kn32);
    prof_calib c;
    memset(&c, 0, sizeof c);
    snprintf(c.device, sizeof c.device, "h100-sxm");
    c.gpu = sheet;
    prof_calib_add_op(&c, k32, 7000000, 5, "gpt-mini", 1);
    prof_calib_add_op(&c, kn32, 3000000, 5, "gpt-mini", 1);
    g = c.gpu;
    g.calib = &c;
    g.datasheet = &sheet;
    /* no TF32 time yet: the datasheet's TF32 price for the product, the
     * fp32 time for the norm */
    cr_expect_eq(sim_op_ns(&g, PROF_DT_TF32, mm, 2, SIM_F, NULL),
                 sim_op_ns(&sheet, PROF_DT_TF32, mm, 2, SIM_F, NULL));
    cr_expect_eq(sim_op_ns(&g, PROF_DT_TF32, nm, 2, SIM_F, NULL), 3000000);
    prof_calib_add_op(&c, ktf, 1000000, 5, "gpt-mini", 1);
    cr_expect_eq(sim_op_ns(&g, PROF_DT_TF32, mm, 2, SIM_F, NULL), 1000000);
    cr_expect_eq(sim_op_ns(&g, PROF_DT_FP32, mm, 2, SIM_F, NULL), 7000000);
    prof_calib_free(&c);
    prof_model_free(m);
}

/* A run whose workers shared a GPU timed each op with the other workers'
 * kernels in it: its op times are refused, the calibration untouched. */
Test(calib_runs, a_run_on_a_shared_gpu_is_refused)
{
    util_err e;
    exec_pipe_result r;
    memset(&r, 0, sizeof r);
    r.topo = prof_topo_template("h100-sxm", 1, NULL, &e);
    cr_assert_not_null(r.topo, "%s", e.msg);
    double ns = 1000;
    r.op_ns = &ns;
    r.shared_gpu = 1;
    prof_calib c;
    memset(&c, 0, sizeof c);
    snprintf(c.device, sizeof c.device, "h100-sxm");
    int n = -1;
    cr_assert_neq(exec_calib_add_run(&c, &r, "gpt2", &n, &e), 0);
    cr_expect(strstr(e.msg, "shared GPU 0"), "%s", e.msg);
    cr_expect_eq(n, 0);
    cr_expect_eq(c.n_ops, 0);
    prof_topo_free(r.topo);
}

/* A GPU's calibration measured the executor's fp32 kernels: it prices
 * fp32 plans; a half-precision plan keeps the datasheet's figures. */
Test(calib_dir, a_gpus_calibration_prices_fp32_plans_only)
{
    char *d = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/h100-sxm.json", d);
    prof_calib c = builtin_calib("h100-sxm", "2026-11-26T12:00:00Z");
    util_err e;
    c.gpu.peak_flops[PROF_DT_FP32] *= 2;
    c.gpu.eff.gemm_max = 1.0;
    c.gpu.eff.launch_ns *= 3;
    c.gpu.mem_bw_bytes_per_s *= 2;
    cr_assert_eq(prof_calib_save(&c, path, &e), 0, "%s", e.msg);
    char spec[600];
    snprintf(spec, sizeof spec, "%s/gpt-mini-fp32.json", d);
    cr_assert_eq(sh_run("sed 's/\"dtype\": *\"[a-z0-9]*\"/\"dtype\": \"fp32\"/' "
                        "profiles/models/gpt-mini.json | sed "
                        "'s/\"name\": *\"gpt-mini\"/\"name\": \"gpt-mini-fp32\"/'"
                        " > %s", spec), 0);
    const char *models[] = {"gpt2", spec};
    double t[2][2];
    for (int m = 0; m < 2; m++)
        for (int cal = 0; cal < 2; cal++) {
            cli_result r = cli_run("%s%s sim --hw h100-sxm x2 --model %s "
                                   "--schedule 1f1b --pp 2 --mbs 2 "
                                   "--microbatches 8 --json",
                                   cal ? "--profile-dir " : "",
                                   cal ? d : "", models[m]);
            cr_assert_eq(r.code, 0, "%s", r.err);
            json_t *j = json_loads(r.out, 0, NULL);
            cr_assert_not_null(j, "%s", r.out);
            t[m][cal] = json_real_value(json_object_get(j, "iteration_time_s"));
            json_decref(j);
            cli_result_free(&r);
        }
    /* gpt2 is fp16: the calibration changes nothing; fp32 moves */
    cr_expect_eq(t[0][0], t[0][1], "fp16: %g built-in, %g calibrated",
                 t[0][0], t[0][1]);
    cr_expect_neq(t[1][0], t[1][1], "fp32: %g both", t[1][0]);
    test_rm_rf(d);
}
