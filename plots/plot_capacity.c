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
    for (int f = 0; f < 2; f++) {
        APPEND(f ? "set terminal svg size 900,560 dynamic font 'sans,11'\n"
                 : "set terminal pngcairo size 900,560 font 'sans,11'\n");
        APPEND("set output '%s-capacity.%s'\n", prefix, f ? "svg" : "png");
        APPEND("set title '%s'\nset xlabel 'GPUs'\nset ylabel 'samples/s'\n"
               "set logscale x 2\nset grid\nset key top left\n", title);
        APPEND("plot ");
        for (int s = 0; s < ns; s++)
            APPEND("%s'%s' index %d using 1:2 with linespoints lw 2 pt 7 "
                   "lc %d title '%s', '%s' index %d using 1:3 with lines dt 2 "
                   "lc %d notitle", s ? ", " : "", path, s, s + 1, names[s],
                   path, s, s + 1);
        APPEND("\n");
    }
#undef APPEND
    snprintf(script, sizeof script, "%s-capacity.gp", prefix);
    int rc = util_write_atomic(script, dat, len, e);
    free(dat);
    if (rc) return -1;
    return plot_run_gnuplot(script, e);
}
