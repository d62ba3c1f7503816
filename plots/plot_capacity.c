/* The capacity plot: samples/s against GPU count per GPU type, with ideal
 * linear scaling dashed, so a person sees where adding GPUs stops paying. */
#include <stdlib.h>
#include <string.h>

#include "plots/plots.h"

int plot_capacity(const char *prefix, const char *title, int ns,
                  const char *const *names, const int *n,
                  const double *const *gpus, const double *const *sps,
                  util_err *e)
{
    size_t cap = 4096, len = 0;
    char *dat = util_malloc(cap);
    char path[1024], script[1024];
    if (strlen(prefix) > PLOT_MAX_PREFIX)
        return util_errf(e, UTIL_EXIT_USAGE, "--plot: a prefix of %zu "
                         "bytes is longer than the %d sluice takes",
                         strlen(prefix), PLOT_MAX_PREFIX);
#define APPEND(...) do { \
        int w_ = snprintf(dat + len, cap - len, __VA_ARGS__); \
        if ((size_t)w_ >= cap - len) { cap = 2 * cap + (size_t)w_; \
            dat = util_realloc(dat, cap); \
            snprintf(dat + len, cap - len, __VA_ARGS__); } \
        len += (size_t)w_; } while (0)
    for (int s = 0; s < ns; s++) {
        APPEND("# %s: gpus samples_per_s ideal\n", names[s]);
        for (int i = 0; i < n[s]; i++)
            APPEND("%g %.6g %.6g\n", gpus[s][i], sps[s][i],
                   sps[s][0] / gpus[s][0] * gpus[s][i]);
        APPEND("\n\n");
    }
    snprintf(path, sizeof path, "%s-capacity.dat", prefix);
    if (util_write_atomic(path, dat, len, e)) {
        free(dat);
        return -1;
    }
    len = 0;
    /* names and titles quoted: none may become gnuplot commands */
    char img[2][1024], *qd = plot_quote(path, 1), *qt = plot_quote(title, 0);
    APPEND("# gnuplot on this script draws the plot again; sluice sets "
           "sluice_tmp\n# to draw it beside its name first\n"
           "if (!exists(\"sluice_tmp\")) sluice_tmp = \"\"\n");
    for (int f = 0; f < 2; f++) {
        APPEND(f ? "set terminal svg size 900,560 dynamic font 'sans,11'\n"
                 : "set terminal pngcairo size 900,560 font 'sans,11'\n");
        snprintf(img[f], sizeof img[f], "%s-capacity.%s", prefix,
                 f ? "svg" : "png");
        char *qo = plot_quote(img[f], 0);
        APPEND("set output %s.sluice_tmp\n", qo);
        free(qo);
        APPEND("set title %s noenhanced\nset xlabel 'GPUs'\nset ylabel "
               "'samples/s'\nset logscale x 2\nset grid\nset key top left\n",
               qt);
        APPEND("plot ");
        for (int s = 0; s < ns; s++) {
            char *qn = plot_quote(names[s], 0);
            APPEND("%s%s index %d using 1:2 with linespoints lw 2 pt 7 "
                   "lc %d title %s noenhanced, %s index %d using 1:3 with "
                   "lines dt 2 lc %d notitle", s ? ", " : "", qd, s, s + 1,
                   qn, qd, s, s + 1);
            free(qn);
        }
        APPEND("\n");
    }
    APPEND("unset output\n");
#undef APPEND
    free(qd);
    free(qt);
    snprintf(script, sizeof script, "%s-capacity.gp", prefix);
    int rc = util_write_atomic(script, dat, len, e);
    free(dat);
    if (rc) return -1;
    const char *outs[] = {img[0], img[1]};
    return plot_run_gnuplot(script, outs, 2, e);
}
