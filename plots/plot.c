/* The pipeline timeline and memory plots: trace JSON in, gnuplot data and
 * script out, gnuplot run as a child process (pngcairo and svg). */
#include <spawn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plots/plots.h"

extern char **environ;

typedef struct box {
    double t0, t1;
    int dev, mb, kind;
} box;

/* Compute kinds, then what offload schedules move (sim_add_offload),
 * each on a row of its own under its device's compute row */
#define N_KINDS 12
#define N_COMPUTE PLOT_COMPUTE_KINDS
static const char *const kinds[N_KINDS] = {
    "F", "B", "W", "BW", "R", "OPT", "SWAP_IN", "SWAP_OUT", "NVME_READ",
    "NVME_WRITE", "CPU_OPT", "RING"};
static const char *const legend[2][N_KINDS] = {
    {"F", "B", "W", "BW", "R", "OPT", "to GPU", "from GPU", "NVMe read",
     "NVMe write", "CPU step", "data-parallel"},
    /* CPU devices (otherData's unit): cores, a drive */
    {"F", "B", "W", "BW", "R", "OPT", "to device", "from device",
     "drive read", "drive write", "CPU step", "data-parallel"}};
/* fill colours per kind: forward blue, backward green, weight-grad
 * orange, fused backward teal, recompute grey, optimizer red; copies
 * purple and brown, drive reads and writes olive and cyan, the CPU's
 * step pink, the data-parallel rings' steps (a rank's sends to the
 * next) yellow */
static const int base_rgb[N_KINDS] = {0x4C72B0, 0x55A868, 0xDD8452,
                                      0x2A9D8F, 0x8C8C8C, 0xC44E52,
                                      0x8172B3, 0x937860, 0xBCBD22,
                                      0x17BECF, 0xDA8BC3, 0xE3B505};
/* the row under a device a kind is drawn on: compute, PCIe to the GPU,
 * from it, the drives, the CPU, the other GPUs */
#define N_ROWS 6
static const int row_of[N_KINDS] = {0, 0, 0, 0, 0, 0, 1, 2, 3, 3, 4, 5};
static const char *const row_name[2][N_ROWS] = {
    {"", "PCIe in", "PCIe out", "NVMe", "CPU", "to GPUs"},
    {"", "copies in", "copies out", "drive", "CPU", "to devices"}};

#define RING (N_KINDS - 1)

const char *plot_kind_name(int k)
{
    return k == PLOT_KIND_RING ? legend[0][RING]
         : k >= 0 && k < N_COMPUTE ? kinds[k] : NULL;
}

int plot_kind_rgb(int k)
{
    return k == PLOT_KIND_RING ? base_rgb[RING]
         : k >= 0 && k < N_COMPUTE ? base_rgb[k] : 0;
}

static int kind_of(const char *c)
{
    for (int i = 0; i < N_KINDS; i++)
        if (!strcmp(c, kinds[i])) return i;
    return -1;
}

int plot_kind_of(const char *name)
{
    int k = kind_of(name);
    return k == RING ? PLOT_KIND_RING : k < N_COMPUTE ? k : -1;
}

/* lighter or darker by microbatch, so neighbours differ */
int plot_shade(int rgb, int mb)
{
    double f = 0.75 + 0.25 * ((mb % 4) / 3.0);
    int r = (int)(((rgb >> 16) & 255) * f), g = (int)(((rgb >> 8) & 255) * f),
        b = (int)((rgb & 255) * f);
    return (r << 16) | (g << 8) | b;
}

char *plot_quote(const char *s, int data_file)
{
    /* a data file name starting with '<' is a shell command to gnuplot */
    const char *pre = data_file && s[0] == '<' ? "./" : "";
    char *q = util_malloc(4 * strlen(s) + 8), *o = q;
    *o++ = '"';
    o += sprintf(o, "%s", pre);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        /* backquotes run commands even inside double quotes: as octal
         * they are plain characters; so are controls such as newline */
        if (*c == '"' || *c == '\\') {
            *o++ = '\\';
            *o++ = (char)*c;
        } else if (*c < 0x20 || *c == 0x7F || *c == '`') {
            o += sprintf(o, "\\%03o", *c);
        } else {
            *o++ = (char)*c;
        }
    }
    *o++ = '"';
    *o = 0;
    return q;
}

/* Whether an image gnuplot wrote is whole: a PNG ends with its IEND
 * chunk, an SVG with its closing tag; a full disk leaves neither. */
static int image_complete(const char *path, const char *buf, size_t len)
{
    size_t pl = strlen(path);
    if (pl > 4 && !strcmp(path + pl - 4, ".png"))
        return len >= 20 && !memcmp(buf, "\x89PNG", 4) &&
               !memcmp(buf + len - 8, "IEND", 4);
    if (pl > 4 && !strcmp(path + pl - 4, ".svg")) {
        size_t k = len;
        while (k && (buf[k - 1] == '\n' || buf[k - 1] == ' ')) k--;
        return k >= 6 && !memcmp(buf + k - 6, "</svg>", 6);
    }
    return len > 0;
}

int plot_run_gnuplot(const char *script, const char *const *outs, int n_out,
                     util_err *e)
{
    char sfx[64], var[96];
    util_tmp_suffix("gp", sfx, sizeof sfx);
    snprintf(var, sizeof var, "sluice_tmp='%s'", sfx);
    /* a script name gnuplot could take for a command ('<...') or for
     * stdin ('-') is made a path */
    size_t sl = strlen(script) + 3;
    char *spath = util_malloc(sl);
    snprintf(spath, sl, "%s%s", script[0] == '/' ? "" : "./", script);
    char *const argv[] = {(char *)"gnuplot", (char *)"-e", var, spath, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    free(spath);
    if (rc)
        return util_errf(e, UTIL_EXIT_FAIL, "gnuplot not found: plots "
                         "skipped (data and script written, run 'gnuplot "
                         "%s' later)", script), 1;
    int st;
    rc = 0;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
        rc = util_errf(e, UTIL_EXIT_FAIL, "gnuplot %s did not finish",
                       script);
    else if (WEXITSTATUS(st) == 127)
        rc = (util_errf(e, UTIL_EXIT_FAIL, "gnuplot not found: plots "
                        "skipped (data and script written)"), 1);
    else if (WEXITSTATUS(st))
        rc = util_errf(e, UTIL_EXIT_FAIL, "gnuplot %s failed with exit "
                       "code %d", script, WEXITSTATUS(st));
    /* Images are drawn beside their names and moved over them only when
     * all are whole: a failure leaves the ones there before untouched. */
    char **tmp = util_calloc((size_t)n_out, sizeof *tmp);
    char **img = util_calloc((size_t)n_out, sizeof *img);
    size_t *len = util_calloc((size_t)n_out, sizeof *len);
    for (int i = 0; i < n_out; i++) {
        size_t n = strlen(outs[i]) + sizeof sfx;
        tmp[i] = util_malloc(n);
        snprintf(tmp[i], n, "%s%s", outs[i], sfx);
        util_err re;
        if (rc || access(tmp[i], F_OK)) {
            if (!rc)
                rc = util_errf(e, UTIL_EXIT_FAIL, "gnuplot %s exited 0 but "
                               "did not draw %s", script, outs[i]);
        } else if (util_read_file_max(tmp[i], (size_t)1 << 30, &img[i],
                                      &len[i], &re)) {
            rc = util_errf(e, UTIL_EXIT_FAIL, "gnuplot %s: %s", script,
                           re.msg);
        } else if (!image_complete(outs[i], img[i], len[i])) {
            rc = util_errf(e, UTIL_EXIT_FAIL, "gnuplot %s exited 0 but %s is "
                           "%s (a full disk?): the old image is kept", script,
                           outs[i], len[i] ? "cut short" : "empty");
        }
    }
    for (int i = 0; i < n_out; i++) {
        if (!rc && util_write_atomic(outs[i], img[i], len[i], e)) rc = -1;
        unlink(tmp[i]);
        free(tmp[i]);
        free(img[i]);
    }
    free(tmp);
    free(img);
    free(len);
    return rc;
}

static int write_text(const char *path, char *buf, size_t len, util_err *e)
{
    int rc = util_write_atomic(path, buf, len, e);
    free(buf);
    return rc;
}

int plot_pipeline(const char *trace_path, const char *prefix, util_err *e)
{
    if (plot_prefix_check(prefix, e)) return -1;
    json_error_t je;
    char *text;
    /* traces of the largest schedules sim takes stay under 1 GiB */
    if (util_read_file_max(trace_path, (size_t)1 << 30, &text, NULL, e))
        return -1;
    json_t *root = json_loads(text, 0, &je);
    free(text);
    if (!root)
        return util_errf(e, UTIL_EXIT_USAGE, "%s:%d:%d: %s", trace_path,
                         je.line, je.column, je.text);
    json_t *evs = json_object_get(root, "traceEvents");
    if (!json_is_array(evs)) {
        json_decref(root);
        return util_errf(e, UTIL_EXIT_USAGE, "%s: no traceEvents array",
                         trace_path);
    }
    size_t n = json_array_size(evs);
    box *bx = util_malloc(sizeof(box) * (n + 1));
    int nb = 0, ndev = 0;
    double tmax = 0, mmax = 0, hmax = 0; /* devices', host tiers' peak */
    char *mbuf = NULL, *tbuf = NULL, *gbuf = NULL;
    size_t mlen = 0, tlen = 0, glen = 0;
    /* memory: one block per device */
    int maxdev = 0;
    double tend = 0; /* the iteration's end: curves hold their last value */
    for (size_t i = 0; i < n; i++) {
        json_t *ev = json_array_get(evs, i);
        int pid = (int)json_integer_value(json_object_get(ev, "pid"));
        if (pid + 1 > maxdev) maxdev = pid + 1;
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        double t = (json_number_value(json_object_get(ev, "ts")) +
                    json_number_value(json_object_get(ev, "dur"))) / 1e3;
        if (ph && (!strcmp(ph, "X") || !strcmp(ph, "C")) && t > tend)
            tend = t;
    }
    ndev = maxdev;
    FILE *mf = open_memstream(&mbuf, &mlen);
    /* blocks: a device's memory each, then an offloaded plan's host tiers
     * (blocks ndev, ndev + 1: host DRAM, NVMe), empty where absent */
    static const char *const tier_ctr[2] = {"host DRAM", "NVMe"};
    int has_tier[2] = {0, 0};
    for (int d = 0; d < ndev + 2; d++) {
        const char *want = d < ndev ? "memory" : tier_ctr[d - ndev];
        int pid = d < ndev ? d : 0;
        fprintf(mf, "# %s %d: time_ms GiB\n", want, pid);
        int any = 0;
        double last_t = 0, last_by = 0;
        for (size_t i = 0; i < n; i++) {
            json_t *ev = json_array_get(evs, i);
            const char *ph = json_string_value(json_object_get(ev, "ph"));
            const char *nm = json_string_value(json_object_get(ev, "name"));
            if (!ph || strcmp(ph, "C") || !nm || strcmp(nm, want)) continue;
            if ((int)json_integer_value(json_object_get(ev, "pid")) != pid)
                continue;
            double ts = json_number_value(json_object_get(ev, "ts")) / 1e3;
            double by = json_number_value(json_object_get(
                json_object_get(ev, "args"), "bytes"));
            fprintf(mf, "%.6f %.10g\n", ts, by / (1 << 30));
            if (by > mmax && d < ndev) mmax = by;
            if (by > hmax && d >= ndev) hmax = by;
            if (d >= ndev) has_tier[d - ndev] = 1;
            any = 1;
            if (ts >= last_t) last_t = ts, last_by = by;
            if (ts > tmax) tmax = ts;
        }
        if (!any) fprintf(mf, "0 0\n");
        else if (last_t < tend)
            fprintf(mf, "%.6f %.10g\n", tend, last_by / (1 << 30));
        fprintf(mf, "\n\n");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *ev = json_array_get(evs, i);
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        const char *cat = json_string_value(json_object_get(ev, "cat"));
        if (!ph || strcmp(ph, "X") || !cat) continue;
        int k = kind_of(cat);
        if (k < 0) continue;
        box *b = &bx[nb++];
        b->t0 = json_number_value(json_object_get(ev, "ts")) / 1e3;
        b->t1 = b->t0 + json_number_value(json_object_get(ev, "dur")) / 1e3;
        b->dev = (int)json_integer_value(json_object_get(ev, "pid"));
        b->mb = (int)json_integer_value(json_object_get(
            json_object_get(ev, "args"), "mb"));
        b->kind = k;
        if (b->t1 > tmax) tmax = b->t1;
    }
    /* a lane per device and row that has boxes, in order */
    int *lane = util_malloc(sizeof(int) * (size_t)(ndev * N_ROWS + 1));
    int nlane = 0, tiers = 0;
    for (int i = 0; i < ndev * N_ROWS; i++) lane[i] = -1;
    int drawn[N_KINDS] = {0};
    for (int i = 0; i < nb; i++) {
        drawn[bx[i].kind] = 1;
        if (bx[i].dev >= 0 && bx[i].dev < ndev)
            lane[bx[i].dev * N_ROWS + row_of[bx[i].kind]] = 0;
    }
    for (int d = 0; d < ndev; d++)
        for (int w = 0; w < N_ROWS; w++)
            if (!w || lane[d * N_ROWS + w] >= 0) {
                lane[d * N_ROWS + w] = nlane++;
                tiers |= w > 0;
            }
    json_t *od = json_object_get(root, "otherData");
    json_t *caps = od ? json_object_get(od, "capacity_bytes") : NULL;
    const char *sched = od ? json_string_value(json_object_get(od, "schedule"))
                           : NULL;
    /* a schedule without a flush is simulated over several minibatches,
     * each an iteration of the report */
    json_int_t nmb = od ? json_integer_value(json_object_get(od,
                                                             "minibatches"))
                        : 0;
    const char *unit = od ? json_string_value(json_object_get(od, "unit"))
                          : NULL;
    int cpu = unit && !strcmp(unit, "device");
    /* label boxes wide enough to read */
    FILE *tf = open_memstream(&tbuf, &tlen);
    fprintf(tf, "# x_center_ms y half_width half_height rgb label\n");
    for (int i = 0; i < nb; i++) {
        box *b = &bx[i];
        int wide = (b->t1 - b->t0) > tmax / 90;
        char lab[16] = "\"\"";
        if (wide && b->mb >= 0) snprintf(lab, sizeof lab, "%d", b->mb);
        int y = b->dev >= 0 && b->dev < ndev
              ? lane[b->dev * N_ROWS + row_of[b->kind]] : 0;
        fprintf(tf, "%.6f %d %.6f 0.4 %d %s\n", (b->t0 + b->t1) / 2, -y,
                (b->t1 - b->t0) / 2,
                plot_shade(base_rgb[b->kind], b->mb < 0 ? 0 : b->mb),
                lab);
    }
    fclose(tf);
    fclose(mf);
    char path[1200], tdat[1200], mdat[1200], img[4][1200];
    snprintf(tdat, sizeof tdat, "%s-timeline.dat", prefix);
    snprintf(mdat, sizeof mdat, "%s-memory.dat", prefix);
    int rc = 0;
    if (write_text(tdat, tbuf, tlen, e) || write_text(mdat, mbuf, mlen, e)) {
        free(bx);
        free(lane);
        json_decref(root);
        return -1;
    }
    FILE *gf = open_memstream(&gbuf, &glen);
    int h = 140 + 48 * nlane;
    const char *term[2][2] = {{"pngcairo", "png"}, {"svg", "svg"}};
    /* every name and title as a quoted gnuplot string: a prefix may hold
     * quotes, newlines or backquotes, none of which may become commands */
    char *qt = plot_quote(tdat, 1), *qm = plot_quote(mdat, 1), *qo;
    char title[160];
    snprintf(title, sizeof title, "pipeline timeline%s%s", sched ? ": " : "",
             sched ? sched : "");
    if (nmb > 1)
        snprintf(title + strlen(title), sizeof title - strlen(title),
                 " (%lld minibatches, each an iteration: no flush)",
                 (long long)nmb);
    char *qtitle = plot_quote(title, 0);
    fprintf(gf, "# gnuplot on this script draws the plots again; sluice "
            "sets sluice_tmp\n# to draw them beside their names first\n"
            "if (!exists(\"sluice_tmp\")) sluice_tmp = \"\"\n");
    for (int t = 0; t < 2; t++) {
        fprintf(gf, "set terminal %s size 1400,%d font 'Sans,10'%s\n",
                term[t][0], h, t ? " dynamic background '#ffffff'" : "");
        snprintf(img[2 * t], sizeof img[0], "%s-timeline.%s", prefix,
                 term[t][1]);
        qo = plot_quote(img[2 * t], 0);
        fprintf(gf, "set output %s.sluice_tmp\n", qo);
        free(qo);
        fprintf(gf, "set title %s noenhanced\n", qtitle);
        fprintf(gf, "set xlabel 'time (ms)'\nset yrange [%f:0.6]\n",
                -nlane + 0.4);
        fprintf(gf, "set xrange [0:%f]\nset ytics (", tmax * 1.001);
        for (int d = 0; d < ndev; d++)
            for (int w = 0; w < N_ROWS; w++) {
                int l = lane[d * N_ROWS + w];
                if (l < 0) continue;
                if (w) fprintf(gf, ", '%s' %d", row_name[cpu][w], -l);
                else fprintf(gf, "%s'dev %d' %d", d ? ", " : "", d, -l);
            }
        fprintf(gf, ")\nset grid xtics\nset style fill solid 1.0 border "
                "rgb '#ffffff'\nunset key\n");
        /* legend as labels of the kinds: the compute's, and the tiers'
         * drawn */
        int nk = 0, shown[N_KINDS];
        for (int k = 0; k < N_KINDS; k++)
            if (k < N_COMPUTE || drawn[k]) shown[nk++] = k;
        /* the tiers' longer legend takes a row of its own under the
         * title, each entry as wide as its label (a character is about
         * 0.0055 of the graph's width at this size and font) */
        double x = tiers ? 0.04 : 0.62;
        if (tiers) fprintf(gf, "set tmargin 5\nset title offset 0,2.5\n");
        /* the legend's row a fixed number of pixels above the graph (17,
         * or 46 under the tiers' taller margin), in graph units: the
         * graph is the image less about 90 (130) pixels of margins. A
         * fixed 4% of the graph rose past the image's top on tall
         * charts (64 devices: 124 pixels, no legend drawn) */
        double gh = h - (tiers ? 130.0 : 90.0);
        double ly = 1 + (tiers ? 46.0 : 17.0) / (gh > 100 ? gh : 100);
        for (int i = 0; i < nk; i++) {
            const char *lb = legend[cpu][shown[i]];
            fprintf(gf, "set object %d rect at graph %f, %f size char 2, "
                    "char 0.8 fc rgb '#%06x' fs solid noborder\n"
                    "set label %d '%s' at graph %f, %f left front\n",
                    i + 1, x, ly, base_rgb[shown[i]], i + 1, lb, x + 0.015,
                    ly);
            x += tiers ? (double)(strlen(lb) + 6) * 0.0055 : 0.065;
        }
        /* a box is drawn at least a five-hundredth of the time axis wide
         * (about three pixels): narrower ones, a layer's copy in
         * a long iteration, vanished under their white border (the
         * data file keeps their times) */
        double minw = tmax * 0.001;
        fprintf(gf, "plot %s using 1:2:($3 < %f ? %f : $3):4:5 with "
                "boxxyerror lc rgb variable, '' using 1:2:6 with labels "
                "font 'Sans,8' tc rgb '#ffffff'\n", qt, minw, minw);
        for (int k = 0; k < nk; k++)
            fprintf(gf, "unset object %d\nunset label %d\n", k + 1, k + 1);
        if (tiers) fprintf(gf, "set title offset 0,0\nset tmargin -1\n");
        fprintf(gf, "set terminal %s size 1400,500 font 'Sans,10'\n",
                term[t][0]);
        snprintf(img[2 * t + 1], sizeof img[0], "%s-memory.%s", prefix,
                 term[t][1]);
        qo = plot_quote(img[2 * t + 1], 0);
        fprintf(gf, "set output %s.sluice_tmp\n", qo);
        free(qo);
        double cap0 = caps ? json_number_value(json_array_get(caps, 0)) : 0;
        /* a capacity far above the curves would flatten them: name it */
        int cap_line = cap0 > 0 && cap0 < 4 * mmax;
        /* each axis in its curves' unit (the data file stays in GiB) */
        double sc, hsc;
        const char *unit = plot_mem_unit(cap_line && cap0 > mmax ? cap0
                                                                  : mmax,
                                         &sc),
                   *hunit = plot_mem_unit(hmax, &hsc);
        fprintf(gf, "set title 'memory per device%s", cap_line || cap0 <= 0
                ? "" : " (capacity ");
        if (!cap_line && cap0 > 0)
            fprintf(gf, "%.2f GiB)", cap0 / (1 << 30));
        /* room above the highest curve or the capacity line, which on
         * the frame's edge is not seen (a 2080 Ti's 10 GiB after the
         * reserve, on an axis autoscaled to 10) */
        double top = fmax(mmax, cap_line ? cap0 : 0) / (1 << 30) * sc;
        fprintf(gf, "' noenhanced\nset key "
                "outside right\nset ylabel '%s'\nset autoscale y\nset "
                "yrange [0:%g]\nset ytics auto\nset grid ytics\n", unit,
                top > 0 ? 1.08 * top : 1);
        /* the host tiers on their own axis: hundreds of GiB or TiB
         * beside a GPU's few */
        if (has_tier[0] || has_tier[1])
            fprintf(gf, "set y2label '%s, host tiers'\nset y2range [0:*]\n"
                    "set y2tics\n", hunit);
        fprintf(gf, "plot for [i=0:%d] %s index i using 1:($2*%.0f) with "
                "steps lw 2 title sprintf('dev %%d', i)", ndev - 1, qm, sc);
        for (int k = 0; k < 2; k++)
            if (has_tier[k])
                fprintf(gf, ", %s index %d using 1:($2*%.0f) with steps lw 2 "
                        "dt %d axes x1y2 title '%s'", qm, ndev + k, hsc,
                        k ? 3 : 2, tier_ctr[k]);
        if (cap_line)
            fprintf(gf, ", %f with lines dt 2 lc rgb '#C44E52' title "
                    "'capacity'", cap0 / (1 << 30) * sc);
        if (has_tier[0] || has_tier[1])
            fprintf(gf, "\nunset y2label\nunset y2tics");
        fprintf(gf, "\nunset ylabel\nunset title\n");
    }
    fprintf(gf, "unset output\n");
    fclose(gf);
    free(qt);
    free(qm);
    free(qtitle);
    snprintf(path, sizeof path, "%s.gp", prefix);
    const char *outs[] = {img[0], img[1], img[2], img[3]};
    if (write_text(path, gbuf, glen, e)) rc = -1;
    else rc = plot_run_gnuplot(path, outs, 4, e);
    free(bx);
    free(lane);
    json_decref(root);
    return rc;
}
