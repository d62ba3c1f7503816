/* What the small plots (capacity, Gantt) share: a text that grows as it
 * is written, for their data and scripts, and the frame of a script that
 * draws a PNG and an SVG, each beside its name first, then is written and
 * run (plot_run_gnuplot checks the images before they replace the old). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plots/plots.h"

void plot_text_add(plot_text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(t->p ? t->p + t->len : NULL,
                          t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (w < 0) return;
        if (t->p && (size_t)w < t->cap - t->len) {
            t->len += (size_t)w;
            return;
        }
        t->cap = 2 * t->cap + (size_t)w + 1;
        t->p = util_realloc(t->p, t->cap);
    }
}

int plot_text_save(plot_text *t, const char *path, util_err *e)
{
    int rc = util_write_atomic(path, t->p ? t->p : "", t->len, e);
    t->len = 0;
    return rc;
}

char *plot_data_save(plot_text *t, const char *prefix, const char *kind,
                     util_err *e)
{
    char path[PLOT_MAX_PREFIX + 64];
    snprintf(path, sizeof path, "%s-%s.dat", prefix, kind);
    if (plot_text_save(t, path, e)) {
        free(t->p);
        t->p = NULL;
        return NULL;
    }
    return plot_quote(path, 1);
}

int plot_prefix_check(const char *prefix, util_err *e)
{
    if (strlen(prefix) > PLOT_MAX_PREFIX)
        return util_errf(e, UTIL_EXIT_USAGE, "--plot: a prefix of %zu "
                         "bytes is longer than the %d sluice takes",
                         strlen(prefix), PLOT_MAX_PREFIX);
    /* its folder, before the work */
    return util_out_check("--plot", prefix, 1, NULL, 0, e);
}

void plot_script_begin(plot_text *t)
{
    plot_text_add(t, "# gnuplot on this script draws the plot again; "
                  "sluice sets sluice_tmp\n# to draw it beside its name "
                  "first\nif (!exists(\"sluice_tmp\")) sluice_tmp = \"\"\n");
}

void plot_script_image(plot_text *t, int svg, int w, int h,
                       const char *prefix, const char *kind)
{
    char img[1100];
    plot_text_add(t, svg ? "set terminal svg size %d,%d dynamic font "
                           "'sans,11'\n"
                         : "set terminal pngcairo size %d,%d font "
                           "'sans,11'\n", w, h);
    snprintf(img, sizeof img, "%s-%s.%s", prefix, kind, svg ? "svg" : "png");
    char *qo = plot_quote(img, 0);
    plot_text_add(t, "set output %s.sluice_tmp\n", qo);
    free(qo);
}

int plot_script_run(plot_text *t, const char *prefix, const char *kind,
                    util_err *e)
{
    char script[1100], img[2][1100];
    plot_text_add(t, "unset output\n");
    snprintf(script, sizeof script, "%s-%s.gp", prefix, kind);
    int rc = plot_text_save(t, script, e);
    free(t->p);
    memset(t, 0, sizeof *t);
    if (rc) return -1;
    for (int f = 0; f < 2; f++)
        snprintf(img[f], sizeof img[f], "%s-%s.%s", prefix, kind,
                 f ? "svg" : "png");
    const char *outs[] = {img[0], img[1]};
    return plot_run_gnuplot(script, outs, 2, e);
}

const char *plot_mem_unit(double max_bytes, double *per_gib)
{
    if (max_bytes >= (double)(1 << 30)) return *per_gib = 1, "GiB";
    if (max_bytes >= (double)(1 << 20)) return *per_gib = 1024, "MiB";
    return *per_gib = 1048576, "KiB";
}
