/* The capacity plot: samples/s against GPU count per GPU type, with ideal
 * linear scaling dashed, so a person sees where adding GPUs stops paying. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plots/plots.h"

int plot_capacity(const char *prefix, const char *title, int ns,
                  const char *const *names, const int *n,
                  const double *const *gpus, const double *const *sps,
                  util_err *e)
{
    if (plot_prefix_check(prefix, e)) return -1;
    plot_text t = {0};
    for (int s = 0; s < ns; s++) {
        plot_text_add(&t, "# %s: gpus samples_per_s ideal\n", names[s]);
        for (int i = 0; i < n[s]; i++)
            plot_text_add(&t, "%g %.6g %.6g\n", gpus[s][i], sps[s][i],
                          sps[s][0] / gpus[s][0] * gpus[s][i]);
        plot_text_add(&t, "\n\n");
    }
    char *qd = plot_data_save(&t, prefix, "capacity", e);
    if (!qd) return -1;
    /* names and titles quoted: none may become gnuplot commands */
    char *qt = plot_quote(title, 0);
    plot_script_begin(&t);
    for (int f = 0; f < 2; f++) {
        plot_script_image(&t, f, 900, 560, prefix, "capacity");
        plot_text_add(&t, "set title %s noenhanced\nset xlabel 'GPUs'\nset "
                      "ylabel 'samples/s'\nset logscale x 2\nset grid\nset "
                      "key top left\n", qt);
        plot_text_add(&t, "plot ");
        for (int s = 0; s < ns; s++) {
            char *qn = plot_quote(names[s], 0);
            plot_text_add(&t, "%s%s index %d using 1:2 with linespoints lw 2 "
                          "pt 7 lc %d title %s noenhanced, %s index %d using "
                          "1:3 with lines dt 2 lc %d notitle", s ? ", " : "",
                          qd, s, s + 1, qn, qd, s, s + 1);
            free(qn);
        }
        plot_text_add(&t, "\n");
    }
    free(qd);
    free(qt);
    return plot_script_run(&t, prefix, "capacity", e);
}

int plot_lines(const char *prefix, const char *kind, const char *title,
               const char *xlabel, const char *ylabel, int ns,
               const char *const *names, const int *n,
               const double *const *x, const double *const *y, util_err *e)
{
    if (plot_prefix_check(prefix, e)) return -1;
    plot_text t = {0};
    for (int s = 0; s < ns; s++) {
        plot_text_add(&t, "# %s: x y\n", names[s]);
        for (int i = 0; i < n[s]; i++)
            plot_text_add(&t, "%g %.6g\n", x[s][i], y[s][i]);
        plot_text_add(&t, "\n\n");
    }
    char *qd = plot_data_save(&t, prefix, kind, e);
    if (!qd) return -1;
    char *qt = plot_quote(title, 0), *qx = plot_quote(xlabel, 0),
         *qy = plot_quote(ylabel, 0);
    /* curves orders of magnitude apart (a model of 4B beside one of
     * 1660B) on a log axis, so each shows; the key beside the curves,
     * not on them */
    double lo = 0, hi = 0;
    int nonpos = 0;     /* a log axis would drop a zero */
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < n[k]; i++) {
            nonpos |= !(y[k][i] > 0);
            if (y[k][i] > 0 && (lo == 0 || y[k][i] < lo)) lo = y[k][i];
            if (y[k][i] > hi) hi = y[k][i];
        }
    int logy = !nonpos && lo > 0 && hi / lo > 50;
    plot_script_begin(&t);
    for (int f = 0; f < 2; f++) {
        plot_script_image(&t, f, 1000, 560, prefix, kind);
        plot_text_add(&t, "set title %s noenhanced\nset xlabel %s noenhanced\n"
                      "set ylabel %s noenhanced\nset grid\nset key outside "
                      "right top\n%splot ", qt, qx, qy,
                      logy ? "set logscale y 10\n" : "");
        for (int s = 0; s < ns; s++) {
            char *qn = plot_quote(names[s], 0);
            plot_text_add(&t, "%s%s index %d using 1:2 with linespoints lw 2 "
                          "pt 7 lc %d title %s noenhanced", s ? ", " : "", qd,
                          s, s + 1, qn);
            free(qn);
        }
        if (!ns) plot_text_add(&t, "NaN notitle");
        plot_text_add(&t, "\n");
    }
    free(qd);
    free(qt);
    free(qx);
    free(qy);
    return plot_script_run(&t, prefix, kind, e);
}
