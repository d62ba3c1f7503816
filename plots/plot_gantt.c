/* The Gantt chart of a many-job schedule: a row per GPU, a box per run of
 * one job's shard-steps, one colour per job (hues spread evenly), so a
 * person sees which job held which GPU when, and where GPUs sat idle. */
#include <math.h>
#include <stdio.h>
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

int plot_gantt(const char *prefix, const char *title, const char *unit,
               int n_gpus, int n_jobs,
               const char *const *job_names, int n_seg, const int *gpu,
               const int *job, const double *t0_s, const double *t1_s,
               int n_cp, const int *cp_gpu, const int *cp_dir,
               const int *cp_job, const double *cp_t0_s,
               const double *cp_t1_s, util_err *e)
{
    if (plot_prefix_check(prefix, e)) return -1;
    plot_text t = {0};
    /* one data block per job, so each has its colour and key entry */
    for (int j = 0; j < n_jobs; j++) {
        plot_text_add(&t, "# job %d: gpu start_s end_s\n", j);
        int any = 0;
        for (int i = 0; i < n_seg; i++)
            if (job[i] == j) {
                plot_text_add(&t, "%d %.9g %.9g\n", gpu[i], t0_s[i], t1_s[i]);
                any = 1;
            }
        if (!any) plot_text_add(&t, "-10 0 0\n"); /* keeps the block (and key) */
        plot_text_add(&t, "\n\n");
    }
    /* the copies: a block per direction, each row's colour its job's */
    for (int d = 0; d < 2; d++) {
        plot_text_add(&t, "# copies %s: gpu start_s end_s rgb\n",
                      d ? "out" : "in");
        int any = 0;
        for (int i = 0; i < n_cp; i++)
            if (cp_dir[i] == d) {
                plot_text_add(&t, "%d %.9g %.9g %u\n", cp_gpu[i], cp_t0_s[i],
                              cp_t1_s[i], job_rgb(cp_job[i], n_jobs));
                any = 1;
            }
        if (!any) plot_text_add(&t, "-10 0 0 0\n");
        plot_text_add(&t, "\n\n");
    }
    char *qd = plot_data_save(&t, prefix, "gantt", e);
    if (!qd) return -1;
    char *qt = plot_quote(title, 0);
    plot_script_begin(&t);
    /* tall enough for the rows' label (two rows clipped it) */
    int h = 160 + 40 * n_gpus < 340 ? 340 : 160 + 40 * n_gpus;
    for (int f = 0; f < 2; f++) {
        plot_script_image(&t, f, 1100, h, prefix, "gantt");
        plot_text_add(&t, "set title %s noenhanced\nset xlabel 'time (s)'\n"
                      "set ylabel '%s (thin: copies in, then out)'\nset "
                      "yrange [%g:-0.6]\nset "
                      "ytics 1\nset key outside right top\nset style fill "
                      "solid 0.9 noborder\nset xrange [0:*]\n", qt,
                      unit, n_gpus - 0.4);
        plot_text_add(&t, "plot ");
        for (int j = 0; j < n_jobs; j++) {
            char *qn = plot_quote(job_names[j], 0);
            plot_text_add(&t, "%s%s index %d using (($2+$3)/2):($1-0.1):"
                          "(($3-$2)/2):(0.28) with boxxyerror lc rgb '#%06x' "
                          "title %s noenhanced", j ? ", \\\n     " : "", qd,
                          j, job_rgb(j, n_jobs), qn);
            free(qn);
        }
        for (int d = 0; d < 2; d++)
            plot_text_add(&t, ", \\\n     %s index %d using (($2+$3)/2):"
                          "($1+%.2f):(($3-$2)/2):(0.04):4 with boxxyerror lc "
                          "rgb variable notitle", qd, n_jobs + d,
                          d ? 0.36 : 0.25);
        plot_text_add(&t, "\n");
    }
    free(qd);
    free(qt);
    return plot_script_run(&t, prefix, "gantt", e);
}
