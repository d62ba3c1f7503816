/* A measured run over its prediction: two traces (the executor's and the
 * simulator's, same format) drawn on one page, timelines on one time
 * axis, measured above simulated, then each one's memory per device. */
#include <stdlib.h>
#include <string.h>

#include "plots/plots.h"

typedef struct tbox {
    double t0, t1;
    int dev, mb, kind;
} tbox;

typedef struct trace {
    tbox *b;
    int nb, ndev, rings;    /* rings: data-parallel ring steps drawn */
    double tmax, mmax;
    char *mem;          /* gnuplot data: one block per device */
    size_t mlen;
} trace;

static int load(const char *path, trace *t, util_err *e)
{
    memset(t, 0, sizeof *t);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return util_errf(e, UTIL_EXIT_USAGE, "%s:%d:%d: %s", path, je.line,
                         je.column, je.text);
    json_t *ev = json_object_get(root, "traceEvents");
    size_t n = json_array_size(ev);
    t->b = util_malloc(sizeof *t->b * (n + 1));
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(ev, i);
        int pid = (int)json_integer_value(json_object_get(x, "pid"));
        if (pid + 1 > t->ndev) t->ndev = pid + 1;
        const char *ph = json_string_value(json_object_get(x, "ph"));
        const char *cat = json_string_value(json_object_get(x, "cat"));
        if (!ph || strcmp(ph, "X") || !cat) continue;
        int k = plot_kind_of(cat);
        if (k < 0) continue;
        tbox *b = &t->b[t->nb++];
        b->t0 = json_number_value(json_object_get(x, "ts")) / 1e3;
        b->t1 = b->t0 + json_number_value(json_object_get(x, "dur")) / 1e3;
        b->dev = pid;
        b->mb = (int)json_integer_value(
            json_object_get(json_object_get(x, "args"), "mb"));
        b->kind = k;
        t->rings |= k == PLOT_KIND_RING;
        if (b->t1 > t->tmax) t->tmax = b->t1;
    }
    FILE *f = open_memstream(&t->mem, &t->mlen);
    for (int d = 0; d < t->ndev; d++) {
        fprintf(f, "# device %d: time_ms GiB\n", d);
        int any = 0;
        for (size_t i = 0; i < n; i++) {
            json_t *x = json_array_get(ev, i);
            const char *ph = json_string_value(json_object_get(x, "ph"));
            const char *nm = json_string_value(json_object_get(x, "name"));
            /* the device's memory, not the host tiers' counters an
             * offloaded plan's trace puts beside it */
            if (!ph || strcmp(ph, "C") || !nm || strcmp(nm, "memory") ||
                (int)json_integer_value(json_object_get(x, "pid")) != d)
                continue;
            double ts = json_number_value(json_object_get(x, "ts")) / 1e3;
            double by = json_number_value(
                json_object_get(json_object_get(x, "args"), "bytes"));
            if (by > t->mmax) t->mmax = by;
            fprintf(f, "%.6f %.10g\n", ts, by / (1 << 30));
            any = 1;
        }
        if (!any) fprintf(f, "0 0\n");
        fprintf(f, "\n\n");
    }
    fclose(f);
    json_decref(root);
    return 0;
}

/* A device's row: its compute; where either trace has data-parallel
 * rings, the compute over the upper three quarters and the ring's steps
 * in a strip under it, so what overlaps shows one above the other. */
static void boxes(FILE *f, const trace *t, int rings)
{
    fprintf(f, "# x_center_ms y half_width half_height rgb\n");
    for (int i = 0; i < t->nb; i++) {
        const tbox *b = &t->b[i];
        int ring = b->kind == PLOT_KIND_RING;
        double y = -b->dev + (!rings ? 0 : ring ? -0.3 : 0.1);
        fprintf(f, "%.6f %.2f %.6f %.2f %d\n", (b->t0 + b->t1) / 2, y,
                (b->t1 - b->t0) / 2, !rings ? 0.4 : ring ? 0.09 : 0.3,
                plot_shade(plot_kind_rgb(b->kind), b->mb < 0 ? 0 : b->mb));
    }
}

static int put(const char *path, const char *buf, size_t len, util_err *e)
{
    return util_write_atomic(path, buf, len, e);
}

int plot_compare(const char *measured_trace, const char *simulated_trace,
                 const char *prefix, util_err *e)
{
    trace t[2];
    if (load(measured_trace, &t[0], e)) return -1;
    if (load(simulated_trace, &t[1], e)) {
        free(t[0].b);
        free(t[0].mem);
        return -1;
    }
    static const char *const what[2] = {"measured", "simulated"};
    int rc = 0, ndev = t[0].ndev > t[1].ndev ? t[0].ndev : t[1].ndev;
    int rings = t[0].rings || t[1].rings;
    double tmax = t[0].tmax > t[1].tmax ? t[0].tmax : t[1].tmax;
    char dat[2][2][1200];
    for (int k = 0; k < 2 && !rc; k++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        boxes(f, &t[k], rings);
        fclose(f);
        snprintf(dat[k][0], sizeof dat[k][0], "%s-%s-timeline.dat", prefix,
                 what[k]);
        snprintf(dat[k][1], sizeof dat[k][1], "%s-%s-memory.dat", prefix,
                 what[k]);
        if (put(dat[k][0], buf, len, e) ||
            put(dat[k][1], t[k].mem, t[k].mlen, e))
            rc = -1;
        free(buf);
    }
    if (!rc) {
        char *gbuf = NULL;
        size_t glen = 0;
        FILE *g = open_memstream(&gbuf, &glen);
        int h = 2 * (120 + 40 * ndev) + 2 * 260;
        /* the memory axis in the unit of the larger peak (the data files
         * stay in GiB): a model of kilobytes reads in KiB */
        double scale;
        const char *unit = plot_mem_unit(
            t[0].mmax > t[1].mmax ? t[0].mmax : t[1].mmax, &scale);
        const char *term[2][2] = {{"pngcairo", "png"}, {"svg", "svg"}};
        char img[2][1200];
        /* names as quoted gnuplot strings: a prefix may hold quotes,
         * newlines or backquotes, none of which may become commands */
        char *q[2][2];
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 2; j++) q[k][j] = plot_quote(dat[k][j], 1);
        fprintf(g, "# gnuplot on this script draws the plot again; sluice "
                "sets sluice_tmp\n# to draw it beside its name first\n"
                "if (!exists(\"sluice_tmp\")) sluice_tmp = \"\"\n");
        for (int k = 0; k < 2; k++) {
            fprintf(g, "set terminal %s size 1400,%d font 'Sans,10'%s\n",
                    term[k][0], h, k ? " dynamic background '#ffffff'" : "");
            snprintf(img[k], sizeof img[k], "%s-compare.%s", prefix,
                     term[k][1]);
            char *qo = plot_quote(img[k], 0);
            fprintf(g, "set output %s.sluice_tmp\n", qo);
            free(qo);
            /* one time axis and the same margins for all four panels */
            fprintf(g, "set multiplot layout 4,1\nunset key\n"
                    "set lmargin 10\nset rmargin 4\n"
                    "set style fill solid 1.0 border rgb '#ffffff'\n");
            /* the kinds' colours, every compute kind as the timeline's
             * legend has them, over the measured timeline's top right
             * (the rings', where drawn, on the left, clear of the
             * title), 17 pixels above its graph: a panel is a quarter
             * of the page, its graph that less about 70 pixels of
             * margins */
            double ly = 1 + 17.0 / (h / 4.0 - 70);
            const int nk = PLOT_COMPUTE_KINDS + rings;
            for (int j = 0; j < nk; j++) {
                double x = j < PLOT_COMPUTE_KINDS ? 0.62 + 0.065 * j : 0.01;
                fprintf(g, "set object %d rect at graph %f, %f size char 2, "
                        "char 0.8 fc rgb '#%06x' fs solid noborder\n"
                        "set label %d '%s' at graph %f, %f left front\n",
                        j + 1, x, ly, plot_kind_rgb(j), j + 1, plot_kind_name(j),
                        x + 0.015, ly);
            }
            for (int w = 0; w < 2; w++) {
                fprintf(g, "set title '%s timeline' noenhanced\n", what[w]);
                fprintf(g, "set xrange [0:%f]\nset yrange [%f:0.6]\n",
                        tmax * 1.001, -ndev + 0.4);
                fprintf(g, "set xlabel 'time (ms)'\nset ytics (");
                for (int d = 0; d < ndev; d++)
                    fprintf(g, "%s'dev %d' %d", d ? ", " : "", d, -d);
                fprintf(g, ")\nset grid xtics\n");
                /* at least a thousandth of the axis wide, as the
                 * timeline draws them: a ring's step is short */
                fprintf(g, "plot %s using 1:2:($3 < %f ? %f : $3):4:5 with "
                        "boxxyerror lc rgb variable\n", q[w][0],
                        tmax * 0.001, tmax * 0.001);
                for (int j = 1; w == 0 && j <= nk; j++)
                    fprintf(g, "unset object %d\nunset label %d\n", j, j);
            }
            /* both memory panels on one scale, the measured over the
             * simulated, with room above the curves for the key in a
             * row (inside the plot, over the lines, it hid them) */
            double top = (t[0].mmax > t[1].mmax ? t[0].mmax : t[1].mmax) /
                         (1 << 30) * scale;
            fprintf(g, "set ytics auto\nset autoscale y\n");
            if (top > 0) fprintf(g, "set yrange [0:%g]\n", top * 1.3);
            else fprintf(g, "set yrange [0:*]\n");
            fprintf(g, "set xrange [0:%f]\nset key inside top right "
                    "horizontal maxrows 1\nset ylabel '%s'\n", tmax * 1.001,
                    unit);
            for (int w = 0; w < 2; w++) {
                fprintf(g, "set title '%s memory per device' noenhanced\n",
                        what[w]);
                fprintf(g, "plot for [i=0:%d] %s index i using 1:($2*%.0f) "
                        "with steps lw 2 title sprintf('dev %%d', i)\n",
                        ndev - 1, q[w][1], scale);
            }
            fprintf(g, "unset multiplot\nunset ylabel\n");
        }
        fprintf(g, "unset output\n");
        fclose(g);
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 2; j++) free(q[k][j]);
        char path[1200];
        snprintf(path, sizeof path, "%s-compare.gp", prefix);
        const char *outs[] = {img[0], img[1]};
        if (put(path, gbuf, glen, e)) rc = -1;
        else rc = plot_run_gnuplot(path, outs, 2, e);
        free(gbuf);
    }
    for (int k = 0; k < 2; k++) {
        free(t[k].b);
        free(t[k].mem);
    }
    return rc;
}
