/* `sluice calibrate`: measures this machine's devices, fits the cost
 * model's figures and writes them as the device type's profile in the
 * profile directory (or --out), atomically: Ctrl-C or a kill leaves the
 * previous profile as it was. Beside the fit it prints the previous
 * calibration's values, so a second run shows whether they hold. */
#include "exec/exec.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/backend.h"
#include "exec/runtime.h"


static void usage(FILE *f)
{
    fprintf(f,
        "usage: sluice calibrate --hw cpu xN [--out FILE] [options]\n"
        "       sluice-cuda calibrate --hw GPU xN   (this machine's GPUs)\n"
        "       mpirun -np 2 sluice calibrate --hw cpu x2   (MPI messages "
        "too)\n"
        "\nMeasures this machine's devices with microbenchmarks (every op of "
        "GPT-2\nand Llama layers over widths, lengths and microbatches: the "
        "GEMM shapes\nthe model zoo makes and the memory-bound ops beside "
        "them; AdamW steps;\ncopies between cores; MPI messages under "
        "mpirun; the runtime's cost per\nop a task runs; the host's AdamW "
        "and a drive's reads and writes, which\nthe offload schedules use), "
        "fits the cost model's figures to them (GSL\nleast squares) and "
        "writes the device type's calibrated profile, which\nsim, plan and "
        "exec then use.\n"
        "\noptions:\n"
        "  --hw cpu xN         the devices: N cores of this machine (or N "
        "GPUs of a\n                      catalog type, e.g. rtx4090 x2, in "
        "bin/sluice-cuda)\n"
        "  --out FILE          where to write (default: the profile\n"
        "                      directory's DIR/cpu.json; sluice profile list\n"
        "                      names it)\n"
        "  --quick             fewer, shorter microbenchmarks (seconds; a\n"
        "                      rougher fit, the backward's halves apart\n"
        "                      not measured; it does not replace a full\n"
        "                      calibration of this machine)\n"
        "  --data FILE         text for the runtime measurement (default\n"
        "                      " EXEC_DEFAULT_CORPUS ")\n"
        "  --offload-path DIR  the drive to measure: a file there, removed "
        "at\n                      once (default: the working directory; "
        "give exec's\n                      --offload-path)\n"
        "  --json              the calibration as one JSON document\n"
        "\nsluice exec --plan P --calibrate adds the times a real run "
        "measured.\n");
}

typedef struct cmd {
    char hw[256];
    const char *out, *data, *drive_dir;
    int quick, json;
} cmd;

static int parse(int argc, char **argv, cmd *c, util_err *e)
{
    memset(c, 0, sizeof *c);
    c->data = EXEC_DEFAULT_CORPUS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--hw")) {
            size_t n = 0;
            c->hw[0] = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) &&
                   n < sizeof c->hw - 1)
                n += (size_t)snprintf(c->hw + n, sizeof c->hw - n, "%s%s",
                                      n ? " " : "", argv[++i]);
            if (!n)
                return util_errf(e, UTIL_EXIT_USAGE, "sluice calibrate: --hw "
                                 "needs a device type and count, e.g. --hw "
                                 "cpu x2");
        } else if (!strcmp(a, "--out") || !strcmp(a, "--data") ||
                   !strcmp(a, "--offload-path")) {
            if (i + 1 >= argc)
                return util_errf(e, UTIL_EXIT_USAGE, "sluice calibrate: %s "
                                 "needs a value", a);
            if (!strcmp(a, "--out")) c->out = argv[++i];
            else if (!strcmp(a, "--data")) c->data = argv[++i];
            else c->drive_dir = argv[++i];
        } else if (!strcmp(a, "--quick")) {
            c->quick = 1;
        } else if (!strcmp(a, "--json")) {
            c->json = 1;
        } else {
            return util_errf(e, UTIL_EXIT_USAGE, "sluice calibrate: unknown "
                             "option '%s' (see sluice calibrate --help)", a);
        }
    }
    if (!c->hw[0])
        return util_errf(e, UTIL_EXIT_USAGE, "sluice calibrate: --hw is "
                         "required (e.g. --hw cpu x2)");
    if (c->out && util_utf8_check("--out", c->out, e))
        return util_err_prefix(e, "sluice calibrate");
    return 0;
}

/* The folder of path, made with its parents (0755). */
static int make_parent(const char *path, util_err *e)
{
    char d[1100];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (!slash || slash == d) return 0;
    *slash = 0;
    for (char *p = d + 1; ; p++) {
        if (*p && *p != '/') continue;
        char c = *p;
        *p = 0;
        if (mkdir(d, 0755) && errno != EEXIST)
            return util_errf(e, UTIL_EXIT_FAIL, "cannot make the folder "
                             "%s: %s", d, strerror(errno));
        if (!c) break;
        *p = c;
    }
    return 0;
}

/* Whether make_parent could make path's folder: the nearest of its
 * folders that exists is one this user may write (nothing is made:
 * a refused or failed run leaves no folders behind). */
static int parent_makeable(const char *flag, const char *path, util_err *e)
{
    char d[1100];
    snprintf(d, sizeof d, "%s", path);
    for (;;) {
        char *slash = strrchr(d, '/');
        if (!slash) snprintf(d, sizeof d, ".");
        else if (slash == d) d[1] = 0;
        else *slash = 0;
        struct stat st;
        if (stat(d, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': '%s' is not a "
                                 "folder", flag, path, d);
            if (access(d, W_OK | X_OK))
                return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': folder '%s' "
                                 "is not writable (%s)", flag, path, d,
                                 strerror(errno));
            return 0;
        }
        if (errno != ENOENT || !slash || slash == d)
            return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': folder '%s': %s",
                             flag, path, d, strerror(errno));
    }
}

/* hw "cpu x2" as a topology: its device type and count. */
static int device_of(const char *hw, char *dev, size_t n, int *count,
                     int *gpu, util_err *e)
{
    char buf[256], *words[8];
    snprintf(buf, sizeof buf, "%s", hw);
    int nw = 0;
    for (char *t = strtok(buf, " "); t && nw < 8; t = strtok(NULL, " "))
        words[nw++] = t;
    /* the built-in type: the calibration there may be what is replaced,
     * and may not load */
    const char *d = prof_profile_dir();
    char *dir = d ? util_strdup(d) : NULL;
    prof_profile_dir_set(NULL);
    prof_topo *t = prof_topo_from_args(nw, words, NULL, e);
    prof_profile_dir_set(dir);
    free(dir);
    if (!t) return -1;
    int types = t->n_gpu_types;
    if (types != 1) {
        prof_topo_free(t);
        return util_errf(e, UTIL_EXIT_USAGE, "--hw %s: %d device types; "
                         "calibrate one at a time", hw, types);
    }
    snprintf(dev, n, "%s", t->gpu_types[0].name);
    *count = t->n_gpus;
    *gpu = t->gpu_types[0].form != PROF_FORM_CPU;
    prof_topo_free(t);
    return 0;
}

/* How a value of this run compares with the previous calibration's. */
static const char *versus(const prof_calib_param *now,
                          const prof_calib_param *was, char *buf, size_t n)
{
    if (!was) return "-";
    int inside = now->value >= was->lo && now->value <= was->hi;
    snprintf(buf, n, "%.4g [%.4g, %.4g] %s", was->value, was->lo, was->hi,
             inside ? "holds" : "MOVED");
    return buf;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The fit's error (model / measured - 1) over the samples of each op kind
 * and phase: where the cost model's shape fits this machine and where a
 * kind's factor has to average ops unlike each other. */
static void report_kinds(const exec_calib_result *r)
{
    const prof_gpu *g = &r->calib.gpu;
    int n = r->n_samples;
    if (n < 1) return;
    double *err = util_malloc(sizeof(double) * (size_t)n);
    util_table *t = util_table_new(6);
    const char *h[] = {"op kind", "phase", "samples", "median", "smallest",
                       "largest"};
    for (int i = 0; i < 6; i++) util_table_col(t, i, h[i], i < 2 ? 'l' : 'r');
    for (int k = 0; k <= PROF_OP_KIND_COUNT; k++)
        for (int ph = SIM_F; ph <= SIM_OPT; ph++) {
            int m = 0;
            for (int i = 0; i < n; i++) {
                const exec_calib_sample *x = &r->samples[i];
                int xk = x->kind == SIM_OPT ? PROF_OP_KIND_COUNT
                                            : (int)x->op.kind;
                if (xk == k && (int)x->kind == ph)
                    err[m++] = exec_calib_model_ns(g, x) / x->ns - 1;
            }
            if (!m) continue;
            qsort(err, (size_t)m, sizeof *err, cmp_dbl);
            char c[16], md[16], lo[16], hi[16];
            snprintf(c, sizeof c, "%d", m);
            snprintf(md, sizeof md, "%+.1f%%",
                     100 * (m % 2 ? err[m / 2]
                                  : (err[m / 2 - 1] + err[m / 2]) / 2));
            snprintf(lo, sizeof lo, "%+.1f%%", 100 * err[0]);
            snprintf(hi, sizeof hi, "%+.1f%%", 100 * err[m - 1]);
            const char *row[] = {k == PROF_OP_KIND_COUNT
                                     ? "adamw"
                                     : prof_op_kind_name((prof_op_kind)k),
                                 sim_kind_name((sim_kind)ph), c, md, lo, hi};
            util_table_row(t, row);
        }
    printf("\nthe fit's error by op kind and phase (model / measured - 1; "
           "positive: priced slow):\n");
    util_table_print(t, stdout, "  ");
    util_table_free(t);
    free(err);
}

static void report_text(const exec_calib_result *r, const prof_calib *prev,
                        const char *path, const char *note)
{
    const prof_calib *c = &r->calib;
    char mach[256], buf[160];
    prof_machine_str(&c->machine, mach, sizeof mach);
    printf("sluice calibrate: %s on %s, %.0f s\n", c->device, mach,
           r->seconds);
    printf("\nfit of the cost model to %d microbenchmarks: median error "
           "%.1f%%, largest %.1f%%\n", c->fit_samples,
           100 * c->fit_median_err, 100 * c->fit_max_err);
    util_table *t = util_table_new(4);
    const char *h[] = {"figure", "fitted", "95% interval",
                       prev ? "previous [interval]" : "previous"};
    for (int i = 0; i < 4; i++) util_table_col(t, i, h[i], i ? 'r' : 'l');
    for (int i = 0; i < c->n_param; i++) {
        const prof_calib_param *p = &c->param[i];
        char v[32], ci[64];
        snprintf(v, sizeof v, "%.4g", p->value);
        /* the figure the fit holds (a core's cache size) */
        if (!strcmp(p->name, "cache_bytes") && p->lo == p->value &&
            p->hi == p->value)
            snprintf(ci, sizeof ci, "held, the machine's");
        /* the fit's interval for a value nothing pins (a curve the
         * samples never bend, a value at a bound the model is flat
         * beyond) spans the doubles: say so */
        else if (!(p->hi <= 1e100 * p->lo))
            snprintf(ci, sizeof ci, "none: the samples do not pin it");
        else
            snprintf(ci, sizeof ci, "[%.4g, %.4g]", p->lo, p->hi);
        const char *row[] = {p->name, v, ci,
                             versus(p, prof_calib_param_get(prev, p->name),
                                    buf, sizeof buf)};
        util_table_row(t, row);
    }
    util_table_print(t, stdout, "  ");
    util_table_free(t);
    report_kinds(r);
    const prof_gpu *g = &c->gpu;
    printf("\nas the profile has it: fp32 peak %.1f GFLOP/s x GEMM "
           "efficiency %.2f; memory %.1f GB/s x %.2f; launch %.0f ns; "
           "a task %.1f us and %.2f us per op it runs\n",
           g->peak_flops[PROF_DT_FP32] / 1e9, g->eff.gemm_max,
           g->mem_bw_bytes_per_s / 1e9, g->eff.mem_max, g->eff.launch_ns,
           g->eff.task_ns / 1e3, g->eff.op_task_ns / 1e3);
    for (int x = 0; x < PROF_XFER_COUNT; x++) {
        const prof_calib_link *l = &c->link[x];
        if (!l->present) continue;
        printf("%s transfers: %.2f GB/s, latency %.1f us (%d sizes, largest "
               "error %.0f%%)\n", prof_xfer_name((prof_xfer)x),
               l->bw_bytes_per_s / 1e9, l->latency_ns / 1e3, l->samples,
               100 * l->max_err);
    }
    if (g->eff.split_factor[0] > 0)
        printf("the backward's halves as tasks of their own (zero-bubble's B "
               "and W): x%.3f and x%.3f their time within one backward\n",
               g->eff.split_factor[0], g->eff.split_factor[1]);
    const prof_calib_tiers *tc = &c->tiers;
    if (tc->present) {
        printf("host: AdamW %.1f M parameters/s on %d thread%s",
               tc->adam_params_per_s / 1e6, r->host_threads,
               r->host_threads == 1 ? "" : "s");
        if (r->drive_measured)
            printf("; drive: read %.2f GB/s, write %.2f GB/s (%s)\n",
                   tc->read_bytes_per_s / 1e9, tc->write_bytes_per_s / 1e9,
                   r->drive_note);
        else
            printf("; drive %s\n", r->drive_note);
    }
    if (r->n_checks) {
        printf("\nall-reduce, measured against the ring the simulator "
               "prices:\n");
        t = util_table_new(5);
        const char *hh[] = {"collective", "group", "bytes", "measured",
                            "simulated"};
        for (int i = 0; i < 5; i++) util_table_col(t, i, hh[i], i ? 'r' : 'l');
        for (int i = 0; i < r->n_checks; i++) {
            const exec_calib_check *k = &r->checks[i];
            char gs[16], b[32], m[32], p[32];
            snprintf(gs, sizeof gs, "%d", k->group);
            util_fmt_bytes(k->bytes, b, sizeof b);
            snprintf(m, sizeof m, "%.0f us", k->measured_ns / 1e3);
            snprintf(p, sizeof p, "%.0f us (%+.0f%%)", k->predicted_ns / 1e3,
                     k->measured_ns > 0
                         ? 100 * (k->predicted_ns / k->measured_ns - 1)
                         : 0);
            const char *row[] = {k->what, gs, b, m, p};
            util_table_row(t, row);
        }
        util_table_print(t, stdout, "  ");
        util_table_free(t);
    }
    if (note[0]) printf("\n%s\n", note);
    printf("\nwrote %s (%d measured op times kept)\n", path, c->n_ops);
}

static json_t *report_json(const exec_calib_result *r, const char *path)
{
    json_t *j = prof_calib_json(&r->calib);
    json_object_set_new(j, "file", json_string(path));
    json_object_set_new(j, "seconds", json_real(r->seconds));
    json_t *ck = json_array();
    for (int i = 0; i < r->n_checks; i++) {
        const exec_calib_check *k = &r->checks[i];
        json_array_append_new(ck, json_pack("{s:s,s:i,s:f,s:f,s:f}", "what",
                              k->what, "group", k->group, "bytes", k->bytes,
                              "measured_ns", k->measured_ns, "predicted_ns",
                              k->predicted_ns));
    }
    json_object_set_new(j, "allreduce", ck);
    json_t *xf = json_object();
    for (int x = 0; x < PROF_XFER_COUNT; x++) {
        if (!r->n_xfers[x]) continue;
        json_t *a = json_array();
        for (int i = 0; i < r->n_xfers[x]; i++)
            json_array_append_new(a, json_pack("[f,f]", r->xfers[x][i].bytes,
                                               r->xfers[x][i].ns));
        json_object_set_new(xf, prof_xfer_name((prof_xfer)x), a);
    }
    json_object_set_new(j, "transfers_bytes_ns", xf);
    json_t *sm = json_array();
    for (int i = 0; i < r->n_samples; i++) {
        const exec_calib_sample *s = &r->samples[i];
        const char *op = s->kind == SIM_OPT ? "adamw"
                                            : prof_op_role_name(s->op.role);
        char sig[128] = "";
        if (s->kind != SIM_OPT)
            sim_op_signature(&r->calib.gpu, &s->op, s->mbs, s->kind, sig,
                             sizeof sig);
        json_array_append_new(sm, json_pack("{s:s,s:s,s:s,s:i,s:f,s:f}", "op",
                              op, "signature", sig,
                              "kind", sim_kind_name(s->kind), "mbs", s->mbs,
                              "measured_ns", s->ns, "fitted_ns",
                              exec_calib_model_ns(&r->calib.gpu, s)));
    }
    json_object_set_new(j, "samples", sm);
    return j;
}

int exec_calibrate_main(int argc, char **argv)
{
    cmd c;
    util_err e;
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (parse(argc, argv, &c, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return e.code;
    }
    char dev[32], path[1100], note[400] = "";
    int count = 1, gpu = 0;
    if (device_of(c.hw, dev, sizeof dev, &count, &gpu, &e)) {
        fprintf(stderr, "sluice calibrate: %s\n", e.msg);
        return e.code ? e.code : UTIL_EXIT_USAGE;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (!gpu && cores > 0 && count > cores)
        fprintf(stderr, "sluice calibrate: warning: --hw %s on %ld cores: "
                "devices computing at once are measured up to %ld\n", c.hw,
                cores, cores);
    /* a GPU type is measured on this machine's GPUs, by the CUDA backend
     * (a build without it says so here) */
    const exec_backend *be = exec_backend_get(gpu ? "cuda" : "cpu", &e);
    if (!be) {
        fprintf(stderr, "sluice calibrate: %s is measured on this machine's "
                "GPUs: %s\n", dev, e.msg);
        return e.code ? e.code : UTIL_EXIT_USAGE;
    }
    if (c.out) {
        snprintf(path, sizeof path, "%s", c.out);
    } else if (!prof_calib_path(dev, path, sizeof path)) {
        fprintf(stderr, "sluice calibrate: no profile directory "
                "(%s): give --out FILE or --profile-dir DIR\n",
                prof_profile_dir_none());
        return UTIL_EXIT_USAGE;
    }
    /* where it goes and the drive's folder, before a minute of
     * measuring: --out in a folder that exists, as every output; the
     * profile directory's folders made when the profile is written,
     * the nearest that exists writable now; the file not a folder */
    struct stat sp;
    int pdir = !c.out && stat(path, &sp) && errno == ENOENT;
    if (pdir ? parent_makeable("the profile", path, &e)
             : util_out_check(c.out ? "--out" : "the profile", path, 0, NULL,
                              0, &e)) {
        fprintf(stderr, "sluice calibrate: %s\n", e.msg);
        return UTIL_EXIT_USAGE;
    }
    if (c.drive_dir) {
        struct stat sd;
        int bad = stat(c.drive_dir, &sd);
        int dir = !bad && S_ISDIR(sd.st_mode);
        if (bad || !dir || access(c.drive_dir, W_OK | X_OK)) {
            fprintf(stderr, "sluice calibrate: --offload-path '%s': %s%s%s\n",
                    c.drive_dir, bad || !dir ? "" : "a folder this user "
                    "cannot write (", bad ? strerror(errno)
                    : !dir ? "not a folder" : strerror(errno),
                    bad || !dir ? "" : ")");
            return UTIL_EXIT_USAGE;
        }
    }
    /* what the file holds now: its values to compare with, its measured
     * op times kept when they are of this hardware */
    prof_calib prev;
    int have_prev = 0;
    if (access(path, F_OK) == 0) {
        util_err pe;
        if (prof_calib_load(path, &prev, &pe) == 0)
            have_prev = 1;
        else
            snprintf(note, sizeof note, "replacing %s, which did not load: "
                     "%s", path, pe.msg);
    }
    /* a rough fit does not replace a full one unasked */
    if (have_prev && c.quick && !prev.quick) {
        prof_machine here;
        prof_machine_this(&here);
        snprintf(here.device, sizeof here.device, "%s",
                 !strcmp(dev, "cpu") ? "CPU core" : dev);
        if (prof_machine_same(&prev.machine, &here)) {
            fprintf(stderr, "sluice calibrate: %s holds a full calibration "
                    "of this machine (%s); --quick would replace it with a "
                    "rougher one: give --out FILE for another file, or run "
                    "without --quick\n", path, prev.date);
            prof_calib_free(&prev);
            return UTIL_EXIT_USAGE;
        }
    }
    /* measured against the built-in figures: the calibration being
     * replaced plays no part */
    prof_profile_dir_set(NULL);
    signal(SIGINT, exec_on_stop);
    signal(SIGTERM, exec_on_stop);
    /* a closed terminal or a dropped ssh session stops it as Ctrl-C
     * does: the default action ended it with its scratch folder left in
     * TMPDIR */
    signal(SIGHUP, exec_on_stop);
    exec_calib_opts o = {.device = dev, .devices = count, .backend = be,
                         .quick = c.quick,
                         .data = c.data, .stop = &exec_stop_flag,
                         .log = c.json ? NULL : stderr,
                         .drive_dir = c.drive_dir};
    exec_calib_result r;
    int rc = exec_calibrate(&o, &r, &e);
    if (rc) {
        if (exec_stop_flag)
            fprintf(stderr, "sluice calibrate: stopped; %s is as it was\n",
                    path);
        else
            fprintf(stderr, "sluice calibrate: %s\n", e.msg);
        exec_calib_result_free(&r);
        if (have_prev) prof_calib_free(&prev);
        return exec_stop_flag ? UTIL_EXIT_FAIL : (e.code ? e.code : 1);
    }
    if (r.mpi_rank) {           /* another rank of the job: its part done */
        exec_calib_result_free(&r);
        if (have_prev) prof_calib_free(&prev);
        return 0;
    }
    prof_calib *cal = &r.calib;
    if (have_prev) {
        if (prof_machine_same(&prev.machine, &cal->machine)) {
            for (int i = 0; i < prev.n_ops; i++)
                prof_calib_add_op(cal, prev.ops[i].sig, prev.ops[i].ns,
                                  prev.ops[i].samples, prev.ops[i].model,
                                  prev.ops[i].busy);
            /* an MPI link measured before stays until measured again,
             * and so do the drive's rates */
            for (int x = 0; x < PROF_XFER_COUNT; x++)
                if (!cal->link[x].present && prev.link[x].present)
                    cal->link[x] = prev.link[x];
            if (!r.drive_measured && prev.tiers.read_bytes_per_s > 0) {
                cal->tiers.read_bytes_per_s = prev.tiers.read_bytes_per_s;
                cal->tiers.write_bytes_per_s = prev.tiers.write_bytes_per_s;
            }
        } else if (prev.n_ops) {
            char m[256];
            prof_machine_str(&prev.machine, m, sizeof m);
            snprintf(note, sizeof note, "the %d op times measured on %s are "
                     "dropped (other hardware)", prev.n_ops, m);
        }
    }
    if (make_parent(path, &e) || prof_calib_save(cal, path, &e)) {
        fprintf(stderr, "sluice calibrate: %s\n", e.msg);
        exec_calib_result_free(&r);
        if (have_prev) prof_calib_free(&prev);
        return e.code ? e.code : 1;
    }
    if (c.json) {
        json_t *j = report_json(&r, path);
        util_json_print(j, stdout);
        json_decref(j);
    } else {
        report_text(&r, have_prev ? &prev : NULL, path, note);
    }
    exec_calib_result_free(&r);
    if (have_prev) prof_calib_free(&prev);
    return 0;
}
