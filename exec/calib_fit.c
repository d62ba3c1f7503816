/* Calibration's fits: the cost model's efficiency parameters to measured
 * op times (GSL's nonlinear least squares), and a link's latency and
 * bandwidth to measured transfers (weighted linear least squares). The
 * model fitted is the simulator's own function (sim_op_model_ns), so what
 * the fit minimises is exactly the error the simulator will make on the
 * same ops. Residuals are relative (logarithms), so a 10 us op and a
 * 100 ms one weigh the same. */
#include "exec/exec.h"

#include <gsl/gsl_blas.h>
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_fit.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

double exec_calib_model_ns(const prof_gpu *g, const exec_calib_sample *s)
{
    if (s->kind == SIM_OPT) return sim_opt_model_ns(g, s->op.params);
    return sim_op_model_ns(g, PROF_DT_FP32, &s->op, s->mbs, s->kind);
}

/* The fitted parameters, in log space so every one stays positive: the
 * global ones, then a factor per group of memory-bound samples (a kind
 * and phase, or the optimizer). */
enum { P_GEMM, P_HALF_MN, P_HALF_K, P_MEM, P_HALF_B, P_LAUNCH, P_CACHE,
       P_GAIN, P_N };
#define MAX_P (P_N + 2 * PROF_OP_KIND_COUNT * PROF_PHASES + 1)

static const char *const pnames[P_N] = {
    "gemm_tflops", "gemm_half_mn", "gemm_half_k", "mem_gb_per_s",
    "mem_half_bytes", "launch_ns", "cache_bytes", "cache_gain_minus_1"};
/* what each parameter is reported in: value x scale */
static const double pscale[P_N] = {1e-12, 1, 1, 1e-9, 1, 1, 1, 1};

/* Groups: GEMM factors (kind * PROF_PHASES + phase), memory factors
 * after them, the optimizer last. The forward of linear layers defines
 * the GEMM curve and that of residual adds (a pure stream: two reads, one
 * write) the bandwidth, so their factors stay 1 (-1: no factor) and the
 * others are relative to them. */
#define GROUPS_KP (PROF_OP_KIND_COUNT * PROF_PHASES)
#define GROUP_OPT (2 * GROUPS_KP)

static int group_of(const exec_calib_sample *s)
{
    if (s->kind == SIM_OPT) return GROUP_OPT;
    if (s->kind == SIM_F &&
        (s->op.kind == PROF_OP_LINEAR || s->op.kind == PROF_OP_RESIDUAL))
        return -1;
    int ph = s->kind == SIM_F ? PROF_PHASE_F : s->kind == SIM_B
                                                   ? PROF_PHASE_B
                                                   : PROF_PHASE_W;
    return (s->op.n_gemm > 0 ? 0 : GROUPS_KP) +
           (int)s->op.kind * PROF_PHASES + ph;
}

typedef struct fit_ctx {
    const exec_calib_sample *s;
    int n;
    prof_gpu base;
    int np;                     /* the fitted: globals, then factors */
    int ng;                     /* of them, globals */
    int glob[P_N];              /* the global each of the first ng is */
    int pos[P_N];               /* a global's place in x; -1: held */
    double held[P_N];           /* a held global's value, as reported */
    int param_group[MAX_P];     /* per parameter past ng: its group */
} fit_ctx;

/* Global p's value (log) in x, or where held, the value it holds. */
static double gv(const fit_ctx *c, const double *x, int p)
{
    return c->pos[p] >= 0 ? x[c->pos[p]] : log(c->held[p] / pscale[p]);
}

/* base with the parameters x: a rate above the base's peak raises the
 * peak (efficiency 1), otherwise the peak stays and the efficiency takes
 * the rate, as the catalog's figures mean. */
/* exp(v) kept within what a profile may say (lo, hi): a parameter the
 * samples hardly constrain wanders, and the file must load again. */
static double bexp(double v, double lo, double hi)
{
    double r = exp(v);
    return r < lo ? lo : r > hi ? hi : r;
}

static prof_gpu gpu_of(const fit_ctx *c, const double *x)
{
    prof_gpu g = c->base;
    g.calib = NULL;
    double rate = bexp(gv(c, x, P_GEMM), 1e3, 1e18),
           mem = bexp(gv(c, x, P_MEM), 1e3, 1e15);
    double peak = g.peak_flops[PROF_DT_FP32];
    if (!(peak >= rate)) peak = rate;
    g.peak_flops[PROF_DT_FP32] = peak;
    g.eff.gemm_max = rate / peak;
    if (!(g.mem_bw_bytes_per_s >= mem)) g.mem_bw_bytes_per_s = mem;
    g.eff.mem_max = mem / g.mem_bw_bytes_per_s;
    g.eff.gemm_half_mn = bexp(gv(c, x, P_HALF_MN), 0, 1e6);
    g.eff.gemm_half_k = bexp(gv(c, x, P_HALF_K), 0, 1e6);
    g.eff.mem_half_bytes = bexp(gv(c, x, P_HALF_B), 0, 1e12);
    g.eff.launch_ns = bexp(gv(c, x, P_LAUNCH), 0, 1e7);
    g.eff.cache_bytes = c->pos[P_CACHE] < 0 ? c->held[P_CACHE]
                                            : bexp(gv(c, x, P_CACHE), 1, 1e12);
    g.eff.cache_gain = 1 + bexp(gv(c, x, P_GAIN), 0, 999);
    memset(g.eff.gemm_factor, 0, sizeof g.eff.gemm_factor);
    memset(g.eff.mem_factor, 0, sizeof g.eff.mem_factor);
    g.eff.opt_factor = 0;
    for (int i = c->ng; i < c->np; i++) {
        int gr = c->param_group[i];
        double v = bexp(x[i], 1e-3, 1e3);
        if (gr == GROUP_OPT) g.eff.opt_factor = v;
        else if (gr >= GROUPS_KP)
            g.eff.mem_factor[(gr - GROUPS_KP) / PROF_PHASES]
                            [(gr - GROUPS_KP) % PROF_PHASES] = v;
        else
            g.eff.gemm_factor[gr / PROF_PHASES][gr % PROF_PHASES] = v;
    }
    return g;
}

static int residuals(const gsl_vector *xv, void *data, gsl_vector *f)
{
    const fit_ctx *c = data;
    double x[MAX_P];
    for (int i = 0; i < c->np; i++) x[i] = gsl_vector_get(xv, (size_t)i);
    prof_gpu g = gpu_of(c, x);
    for (int i = 0; i < c->n; i++) {
        double m = exec_calib_model_ns(&g, &c->s[i]);
        gsl_vector_set(f, (size_t)i, log(fmax(m, 1e-3) / c->s[i].ns));
    }
    return GSL_SUCCESS;
}

double exec_host_cache_bytes(void)
{
#ifdef _SC_LEVEL2_CACHE_SIZE
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 > 0) return (double)l2;
#endif
    return 0;
}

/* Where a fitted cache's size starts: this machine's per-core L2. */
static double cache_guess(void)
{
    double c = exec_host_cache_bytes();
    return c > 0 ? c : 1 << 20;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void param_name(const fit_ctx *c, int i, char *buf, size_t n)
{
    if (i < c->ng) {
        snprintf(buf, n, "%s", pnames[c->glob[i]]);
        return;
    }
    int gr = c->param_group[i];
    if (gr == GROUP_OPT) {
        snprintf(buf, n, "opt_factor");
        return;
    }
    int mem = gr >= GROUPS_KP, k = mem ? gr - GROUPS_KP : gr;
    snprintf(buf, n, "%s_factor.%s.%c", mem ? "mem" : "gemm",
             prof_op_kind_name((prof_op_kind)(k / PROF_PHASES)),
             "FBW"[k % PROF_PHASES]);
}

/* Fits c's parameters from x (in and out) by GSL's trust region; with
 * cov, their covariance (unscaled), *chi2 the residuals' sum of squares
 * and free[i] set where no sample's residual moves with parameter i (a
 * value held at a bound the model is flat beyond: the covariance gives
 * it zero, but nothing pins it). 0, or GSL's error (running out of
 * iterations is not one). */
static int solve(fit_ctx *c, double *x, gsl_matrix *cov, double *chi2,
                 int *free_p)
{
    size_t np = (size_t)c->np;
    gsl_multifit_nlinear_parameters fp =
        gsl_multifit_nlinear_default_parameters();
    gsl_multifit_nlinear_workspace *w = gsl_multifit_nlinear_alloc(
        gsl_multifit_nlinear_trust, &fp, (size_t)c->n, np);
    gsl_multifit_nlinear_fdf fdf = {0};
    fdf.f = residuals;
    fdf.n = (size_t)c->n;
    fdf.p = np;
    fdf.params = c;
    gsl_vector_view xv = gsl_vector_view_array(x, np);
    int info = 0, rc = gsl_multifit_nlinear_init(&xv.vector, &fdf, w);
    if (!rc) rc = gsl_multifit_nlinear_driver(400, 1e-8, 1e-8, 1e-8, NULL,
                                              NULL, &info, w);
    if (rc == GSL_EMAXITER) rc = 0;
    if (!rc) {
        for (size_t i = 0; i < np; i++)
            x[i] = gsl_vector_get(gsl_multifit_nlinear_position(w), i);
        if (cov) {
            const gsl_matrix *J = gsl_multifit_nlinear_jac(w);
            gsl_multifit_nlinear_covar(J, 0.0, cov);
            gsl_blas_ddot(gsl_multifit_nlinear_residual(w),
                          gsl_multifit_nlinear_residual(w), chi2);
            for (size_t i = 0; i < np; i++) {
                gsl_vector_const_view col = gsl_matrix_const_column(J, i);
                free_p[i] = !(gsl_blas_dnrm2(&col.vector) > 1e-9);
            }
        }
    }
    gsl_multifit_nlinear_free(w);
    return rc;
}

/* Groups of the jackknife: sets beyond JK_GROUPS share groups, as a
 * delete-a-group jackknife does. */
#define JK_GROUPS 24

/* The delete-a-group jackknife of c's fit x: each set of samples (or
 * group of sets, past JK_GROUPS of them) left out in turn and the rest
 * refitted from x; var[i] gets the jackknife variance of parameter i,
 * (G - 1) / G times the sum of squares about the refits' mean. The
 * number of groups G (below 3: no variance, var untouched); a refit that
 * fails counts as no change. */
static int jackknife(const fit_ctx *c, const double *x, double *var)
{
    /* each sample's group, once: its set's order of appearance, folded */
    int *grp = util_malloc(sizeof(int) * (size_t)(c->n + 1));
    int *id = util_malloc(sizeof(int) * (size_t)(c->n + 1));
    int n_id = 0;
    for (int i = 0; i < c->n; i++) {
        int k = 0;
        while (k < n_id && id[k] != c->s[i].set) k++;
        if (k == n_id) id[n_id++] = c->s[i].set;
        grp[i] = k % JK_GROUPS;
    }
    free(id);
    int G = n_id < JK_GROUPS ? n_id : JK_GROUPS;
    if (G < 3) {
        free(grp);
        return G;
    }
    exec_calib_sample *sub = util_malloc(sizeof *sub * (size_t)c->n);
    double *xs = util_malloc(sizeof(double) * (size_t)G * MAX_P);
    for (int g = 0; g < G; g++) {
        int k = 0;
        for (int i = 0; i < c->n; i++)
            if (grp[i] != g) sub[k++] = c->s[i];
        fit_ctx cg = *c;
        cg.s = sub;
        cg.n = k;
        double *xg = xs + (size_t)g * MAX_P;
        memcpy(xg, x, sizeof(double) * (size_t)c->np);
        if (k <= c->np || solve(&cg, xg, NULL, NULL, NULL))
            memcpy(xg, x, sizeof(double) * (size_t)c->np);
    }
    for (int i = 0; i < c->np; i++) {
        double m = 0, q = 0;
        for (int g = 0; g < G; g++) m += xs[(size_t)g * MAX_P + i];
        m /= G;
        for (int g = 0; g < G; g++) {
            double d = xs[(size_t)g * MAX_P + i] - m;
            q += d * d;
        }
        var[i] = q * (G - 1) / G;
    }
    free(xs);
    free(sub);
    free(grp);
    return G;
}

int exec_calib_fit(const exec_calib_sample *s, int n, const prof_gpu *base,
                   prof_gpu *out, prof_calib_param *params, int *n_params,
                   double *median_err, double *max_err, util_err *e)
{
    int gemms = 0;
    for (int i = 0; i < n; i++)
        gemms += s[i].kind != SIM_OPT && s[i].op.n_gemm > 0;
    if (n < 12 || !gemms || gemms == n)
        return util_errf(e, UTIL_EXIT_USAGE, "%d microbenchmarks (%d GEMMs): "
                         "a fit needs 12 or more, GEMMs and memory-bound ops "
                         "both", n, gemms);
    for (int i = 0; i < n; i++)
        if (!(s[i].ns > 0) || !isfinite(s[i].ns))
            return util_errf(e, UTIL_EXIT_USAGE, "microbenchmark %d: time "
                             "%g ns", i, s[i].ns);
    fit_ctx c = {.s = s, .n = n, .base = *base};
    /* start from the base's figures, factors 1; a cache size the base
     * gives is the device's, held */
    const prof_eff *b = &base->eff;
    const double g0[P_N] = {
        log(base->peak_flops[PROF_DT_FP32] * b->gemm_max),
        log(fmax(b->gemm_half_mn, 1)), log(fmax(b->gemm_half_k, 1)),
        log(base->mem_bw_bytes_per_s * b->mem_max),
        log(fmax(b->mem_half_bytes, 1)), log(fmax(b->launch_ns, 1)),
        log(b->cache_bytes > 0 ? b->cache_bytes : cache_guess()),
        log(b->cache_gain > 1 ? b->cache_gain - 1 : 1)};
    double x[MAX_P] = {0};
    for (int p = 0; p < P_N; p++) {
        c.held[p] = p == P_CACHE ? b->cache_bytes : exp(g0[p]) * pscale[p];
        c.pos[p] = p == P_CACHE && b->cache_bytes > 0 ? -1 : c.ng;
        if (c.pos[p] >= 0) {
            c.glob[c.ng] = p;
            x[c.ng++] = g0[p];
        }
    }
    c.np = c.ng;
    int used[MAX_P] = {0};
    for (int i = 0; i < n; i++)
        if (group_of(&s[i]) >= 0) used[group_of(&s[i])] = 1;
    for (int gr = 0; gr < MAX_P - P_N; gr++)
        if (used[gr]) c.param_group[c.np++] = gr;
    if (n <= c.np)
        return util_errf(e, UTIL_EXIT_USAGE, "%d microbenchmarks for %d "
                         "figures: too few to fit", n, c.np);
    gsl_matrix *cov = gsl_matrix_alloc((size_t)c.np, (size_t)c.np);
    double chi2 = 0;
    int free_p[MAX_P] = {0};
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    int rc = solve(&c, x, cov, &chi2, free_p);
    if (rc) {
        gsl_matrix_free(cov);
        gsl_set_error_handler(old);
        return util_errf(e, UTIL_EXIT_FAIL, "the fit failed: %s",
                         gsl_strerror(rc));
    }
    /* the jackknife: each set left out in turn, refitted from the fit */
    double jk[MAX_P] = {0};
    int sets = jackknife(&c, x, jk);
    gsl_set_error_handler(old);
    /* 95% intervals: covariance scaled by the residual variance, t
     * quantile for n - p degrees of freedom; the jackknife's with t for
     * sets - 1, where wider */
    double dof = n - c.np, t = gsl_cdf_tdist_Pinv(0.975, dof);
    double sd = sqrt(chi2 / dof);
    double tj = sets >= 3 ? gsl_cdf_tdist_Pinv(0.975, sets - 1) : 0;
    for (int i = 0; i < c.np; i++) {
        double v = gsl_matrix_get(cov, (size_t)i, (size_t)i);
        double h = t * sd * sqrt(v > 0 && isfinite(v) ? v : 0);
        if (tj > 0 && isfinite(jk[i])) h = fmax(h, tj * sqrt(jk[i]));
        /* an unconstrained value (a curve the samples never bend, or a
         * value at a bound the model is flat beyond) gets an interval as
         * wide as the doubles allow */
        if (!(h < 700) || free_p[i]) h = 700;
        double sc = i < c.ng ? pscale[c.glob[i]] : 1;
        prof_calib_param *q = &params[i];
        param_name(&c, i, q->name, sizeof q->name);
        q->value = exp(x[i]) * sc;
        q->lo = exp(x[i] - h) * sc;
        q->hi = exp(fmin(x[i] + h, 700)) * sc;
    }
    /* the held: as given, an interval of none */
    *n_params = c.np;
    for (int p = 0; p < P_N; p++)
        if (c.pos[p] < 0) {
            prof_calib_param *q = &params[(*n_params)++];
            snprintf(q->name, sizeof q->name, "%s", pnames[p]);
            q->value = q->lo = q->hi = c.held[p];
        }
    gsl_matrix_free(cov);
    *out = gpu_of(&c, x);
    double *err = util_malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++)
        err[i] = fabs(exec_calib_model_ns(out, &s[i]) / s[i].ns - 1);
    qsort(err, (size_t)n, sizeof *err, cmp_double);
    *median_err = n % 2 ? err[n / 2] : (err[n / 2 - 1] + err[n / 2]) / 2;
    *max_err = err[n - 1];
    free(err);
    return 0;
}

int exec_calib_fit_link(const exec_calib_xfer *x, int n, prof_calib_link *l,
                        prof_calib_param *lat, prof_calib_param *bw,
                        util_err *e)
{
    if (n < 3)
        return util_errf(e, UTIL_EXIT_FAIL, "%d transfer sizes: a link fit "
                         "needs 3 or more", n);
    double *xs = util_malloc(sizeof(double) * (size_t)n * 3);
    double *ys = xs + n, *ws = ys + n;
    for (int i = 0; i < n; i++) {
        xs[i] = x[i].bytes;
        ys[i] = x[i].ns;
        ws[i] = 1 / (x[i].ns * x[i].ns);  /* relative errors */
    }
    double c0, c1, c00, c01, c11, chi2;
    gsl_fit_wlinear(xs, 1, ws, 1, ys, 1, (size_t)n, &c0, &c1, &c00, &c01,
                    &c11, &chi2);
    free(xs);
    if (!(c1 > 0))
        return util_errf(e, UTIL_EXIT_FAIL, "transfers do not take longer "
                         "as they grow (fitted %.3g ns per byte): too noisy "
                         "to fit a link", c1);
    double t = gsl_cdf_tdist_Pinv(0.975, n - 2), sd = sqrt(chi2 / (n - 2));
    double h0 = t * sd * sqrt(c00), h1 = t * sd * sqrt(c11);
    if (c0 < 0) c0 = 0;       /* below the clock's resolution */
    memset(l, 0, sizeof *l);
    l->present = 1;
    l->latency_ns = fmin(c0, 1e10);
    l->bw_bytes_per_s = fmin(1e9 / c1, 1e15);
    l->samples = n;
    for (int i = 0; i < n; i++) {
        double f = c0 + c1 * x[i].bytes;
        double r = fabs(f / x[i].ns - 1);
        if (r > l->max_err) l->max_err = r;
    }
    snprintf(lat->name, sizeof lat->name, "latency_us");
    lat->value = c0 / 1e3;
    lat->lo = fmax(0, c0 - h0) / 1e3;
    lat->hi = (c0 + h0) / 1e3;
    snprintf(bw->name, sizeof bw->name, "gb_per_s");
    bw->value = 1 / c1;                       /* bytes/ns = GB/s */
    bw->lo = c1 + h1 > 0 ? 1 / (c1 + h1) : 0;
    bw->hi = c1 - h1 > 0 ? 1 / (c1 - h1) : HUGE_VAL;
    if (!isfinite(bw->hi)) bw->hi = 1e12;
    return 0;
}
