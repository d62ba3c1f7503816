/* The Gantt chart of a many-job schedule: a row per GPU, a box per run of
 * one job's shard-steps, one colour per job (hues spread evenly), so a
 * person sees which job held which GPU when, and where GPUs sat idle. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plots/plots.h"

/* Job j of n as an RGB colour: hues spread over the circle, two
 * lightnesses alternating so neighbours differ even with many jobs. */
static unsigned job_rgb(int j, int n)
{
    double h = 6.0 * j / (n > 0 ? n : 1), v = j % 2 ? 0.75 : 0.95, s = 0.75;
    int i = (int)floor(h) % 6;
    double f = h - floor(h), p = v * (1 - s), q = v * (1 - s * f),
           t = v * (1 - s * (1 - f)), r, g, b;
    switch (i) {
    case 0: r = v; g = t; b = p; break;
    case 1: r = q; g = v; b = p; break;
    case 2: r = p; g = v; b = t; break;
    case 3: r = p; g = q; b = v; break;
    case 4: r = t; g = p; b = v; break;
    default: r = v; g = p; b = q; break;
    }
    return (unsigned)lround(r * 255) << 16 | (unsigned)lround(g * 255) << 8 |
           (unsigned)lround(b * 255);
}

int plot_gantt(const char *prefix, const char *title, int n_gpus, int n_jobs,
               const char *const *job_names, int n_seg, const int *gpu,
               const int *job, const double *t0_s, const double *t1_s,
               util_err *e)
{
    if (strlen(prefix) > PLOT_MAX_PREFIX)
        return util_errf(e, UTIL_EXIT_USAGE, "--plot: a prefix of %zu "
                         "bytes is longer than the %d sluice takes",
                         strlen(prefix), PLOT_MAX_PREFIX);
    size_t cap = 4096, len = 0;
    char *dat = util_malloc(cap);
#define APPEND(...) do { \
        int w_ = snprintf(dat + len, cap - len, __VA_ARGS__); \
        if ((size_t)w_ >= cap - len) { cap = 2 * cap + (size_t)w_; \
            dat = util_realloc(dat, cap); \
            snprintf(dat + len, cap - len, __VA_ARGS__); } \
        len += (size_t)w_; } while (0)
    /* one data block per job, so each has its colour and key entry */
    for (int j = 0; j < n_jobs; j++) {
        APPEND("# job %d: gpu start_s end_s\n", j);
        int any = 0;
        for (int i = 0; i < n_seg; i++)
            if (job[i] == j) {
                APPEND("%d %.9g %.9g\n", gpu[i], t0_s[i], t1_s[i]);
                any = 1;
            }
        if (!any) APPEND("-10 0 0\n");   /* keeps the block (and its key) */
        APPEND("\n\n");
    }
    char path[1024], script[1024], img[2][1024];
    snprintf(path, sizeof path, "%s-gantt.dat", prefix);
    if (util_write_atomic(path, dat, len, e)) {
        free(dat);
        return -1;
    }
    len = 0;
    char *qd = plot_quote(path, 1), *qt = plot_quote(title, 0);
    APPEND("# gnuplot on this script draws the chart again; sluice sets "
           "sluice_tmp\n# to draw it beside its name first\n"
           "if (!exists(\"sluice_tmp\")) sluice_tmp = \"\"\n");
    int h = 160 + 40 * n_gpus;
    for (int f = 0; f < 2; f++) {
        APPEND(f ? "set terminal svg size 1100,%d dynamic font 'sans,11'\n"
                 : "set terminal pngcairo size 1100,%d font 'sans,11'\n", h);
        snprintf(img[f], sizeof img[f], "%s-gantt.%s", prefix, f ? "svg" : "png");
        char *qo = plot_quote(img[f], 0);
        APPEND("set output %s.sluice_tmp\n", qo);
        free(qo);
        APPEND("set title %s noenhanced\nset xlabel 'time (s)'\nset ylabel "
               "'GPU'\nset yrange [-0.6:%g] reverse\nset ytics 1\n"
               "set key outside right top\nset style fill solid 0.9 noborder\n"
               "set xrange [0:*]\n", qt, n_gpus - 0.4);
        APPEND("plot ");
        for (int j = 0; j < n_jobs; j++) {
            char *qn = plot_quote(job_names[j], 0);
            APPEND("%s%s index %d using (($2+$3)/2):1:(($3-$2)/2):(0.4) with "
                   "boxxyerror lc rgb '#%06x' title %s noenhanced",
                   j ? ", \\\n     " : "", qd, j, job_rgb(j, n_jobs), qn);
            free(qn);
        }
        APPEND("\n");
    }
    APPEND("unset output\n");
#undef APPEND
    free(qd);
    free(qt);
    snprintf(script, sizeof script, "%s-gantt.gp", prefix);
    int rc = util_write_atomic(script, dat, len, e);
    free(dat);
    if (rc) return -1;
    const char *outs[] = {img[0], img[1]};
    return plot_run_gnuplot(script, outs, 2, e);
}
