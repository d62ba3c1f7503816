/* Calibrations: the figures `sluice calibrate` fitted and `sluice exec
 * --calibrate` measured for a device type on one machine, one JSON file
 * per type in the profile directory. Reading checks them as strictly as
 * the built-in catalog (file:line:col and field); writing is atomic, so a
 * calibration killed midway leaves the previous file as it was. Loaded
 * files are kept until exit: device types lend pointers into them. */
#include "profiles/hw_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const xfer_names[] = {"in-process", "mpi",
                                         "all-reduce"};

const char *prof_xfer_name(prof_xfer x)
{
    return x >= 0 && x < PROF_XFER_COUNT ? xfer_names[x] : "?";
}

/* ------------------------------------------------------------ the folder */

static struct {
    pthread_mutex_t mu;
    int set;                 /* prof_profile_dir_set was called */
    int found;               /* the environment was read */
    char *dir;               /* NULL: none */
    const char *none;        /* why there is none */
} pdir = {PTHREAD_MUTEX_INITIALIZER, 0, 0, NULL, NULL};

void prof_profile_dir_set(const char *dir)
{
    pthread_mutex_lock(&pdir.mu);
    free(pdir.dir);
    pdir.dir = dir && *dir ? util_strdup(dir) : NULL;
    /* NULL restores none (a caller's save and restore): why stays */
    if (dir) pdir.none = "--profile-dir is empty";
    else if (!pdir.none) pdir.none = "none in force";
    pdir.set = 1;
    pthread_mutex_unlock(&pdir.mu);
}

const char *prof_profile_dir(void)
{
    pthread_mutex_lock(&pdir.mu);
    if (!pdir.set && !pdir.found) {
        pdir.found = 1;
        const char *env = getenv("SLUICE_PROFILE_DIR");
        const char *xdg = getenv("XDG_CONFIG_HOME");
        const char *home = getenv("HOME");
        char buf[1024];
        buf[0] = 0;
        if (env)
            snprintf(buf, sizeof buf, "%s", env);
        else if (xdg && *xdg)
            snprintf(buf, sizeof buf, "%s/sluice/profiles", xdg);
        else if (home && *home)
            snprintf(buf, sizeof buf, "%s/.config/sluice/profiles", home);
        pdir.dir = buf[0] ? util_strdup(buf) : NULL;
        pdir.none = env ? "SLUICE_PROFILE_DIR is empty"
                        : "neither SLUICE_PROFILE_DIR, XDG_CONFIG_HOME nor "
                          "HOME is set";
    }
    const char *d = pdir.dir;
    pthread_mutex_unlock(&pdir.mu);
    return d;
}

const char *prof_profile_dir_none(void)
{
    prof_profile_dir();
    pthread_mutex_lock(&pdir.mu);
    const char *w = pdir.none ? pdir.none : "none given";
    pthread_mutex_unlock(&pdir.mu);
    return w;
}

char *prof_calib_path(const char *device, char *buf, size_t n)
{
    const char *d = prof_profile_dir();
    if (!d) return NULL;
    snprintf(buf, n, "%s/%s.json", d, device);
    return buf;
}

/* ----------------------------------------------------------- the machine */

void prof_machine_this(prof_machine *m)
{
    memset(m, 0, sizeof *m);
    if (gethostname(m->host, sizeof m->host - 1)) m->host[0] = 0;
    util_utf8_fix(m->host);
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    m->cores = c > 0 ? (int)c : 1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        for (v++; *v == ' ' || *v == '\t'; v++) {}
        snprintf(m->cpu, sizeof m->cpu, "%s", v);
        m->cpu[strcspn(m->cpu, "\n")] = 0;
        break;
    }
    if (f) fclose(f);
    if (!m->cpu[0]) snprintf(m->cpu, sizeof m->cpu, "unknown CPU");
    util_utf8_fix(m->cpu);
}

int prof_machine_same(const prof_machine *a, const prof_machine *b)
{
    return !strcmp(a->cpu, b->cpu) && a->cores == b->cores &&
           !strcmp(a->device, b->device);
}

char *prof_machine_str(const prof_machine *m, char *buf, size_t n)
{
    snprintf(buf, n, "%s, %d core%s%s%s%s%s", m->cpu, m->cores,
             m->cores == 1 ? "" : "s", m->device[0] ? ", " : "", m->device,
             m->host[0] ? ", host " : "", m->host);
    return buf;
}

/* ------------------------------------------------------------- reading */

static int op_cmp(const void *a, const void *b)
{
    return strcmp(((const prof_calib_op *)a)->sig,
                  ((const prof_calib_op *)b)->sig);
}

static int parse_link(const util_jobj *o, prof_calib_link *l, util_err *e)
{
    static const char *const keys[] = {"gb_per_s", "latency_us", "samples",
                                       "max_error", NULL};
    double bw = 0, lat = 0, err = 0;
    long n = 0;
    if (util_jkeys(o, keys, e) ||
        util_jnum(o, "gb_per_s", 1, UTIL_HW_MIN, 1e6, &bw, e) ||
        util_jnum(o, "latency_us", 1, 0, 1e7, &lat, e) ||
        util_jint(o, "samples", 0, 0, 1000000, &n, e) ||
        util_jnum(o, "max_error", 0, 0, 1e6, &err, e))
        return -1;
    l->present = 1;
    l->bw_bytes_per_s = bw * 1e9;
    l->latency_ns = lat * 1e3;
    l->samples = (int)n;
    l->max_err = err;
    return 0;
}

static int parse_machine(const util_jobj *o, prof_machine *m, util_err *e)
{
    static const char *const keys[] = {"host", "cpu", "cores", "device",
                                       NULL};
    long cores = 0;
    if (util_jkeys(o, keys, e) ||
        util_jstr(o, "host", 0, m->host, sizeof m->host, e) ||
        util_jstr(o, "cpu", 1, m->cpu, sizeof m->cpu, e) ||
        util_jint(o, "cores", 1, 1, 1 << 20, &cores, e) ||
        util_jstr(o, "device", 1, m->device, sizeof m->device, e))
        return -1;
    m->cores = (int)cores;
    return 0;
}

static int parse_fit(const util_jobj *o, prof_calib *c, util_err *e)
{
    static const char *const keys[] = {"samples", "median_error",
                                       "max_error", "params", NULL};
    static const char *const pkeys[] = {"name", "value", "ci95", NULL};
    long n = 0;
    json_t *arr;
    if (util_jkeys(o, keys, e) ||
        util_jint(o, "samples", 1, 0, 100000000, &n, e) ||
        util_jnum(o, "median_error", 1, 0, 1e6, &c->fit_median_err, e) ||
        util_jnum(o, "max_error", 1, 0, 1e6, &c->fit_max_err, e) ||
        util_jarray(o, "params", 1, &arr, e))
        return -1;
    c->fit_samples = (int)n;
    if (json_array_size(arr) > PROF_CALIB_MAX_PARAMS)
        return util_jerr(e, o, "params", "%zu values, at most %d",
                         json_array_size(arr), PROF_CALIB_MAX_PARAMS);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        util_jobj p;
        prof_calib_param *q = &c->param[c->n_param];
        if (util_jelem(o, "params", arr, i, &p, e) ||
            util_jkeys(&p, pkeys, e) ||
            util_jstr(&p, "name", 1, q->name, sizeof q->name, e) ||
            util_jnum(&p, "value", 1, -HUGE_VAL, HUGE_VAL, &q->value, e))
            return -1;
        json_t *ci = json_object_get(p.j, "ci95");
        if (!json_is_array(ci) || json_array_size(ci) != 2 ||
            !json_is_number(json_array_get(ci, 0)) ||
            !json_is_number(json_array_get(ci, 1)))
            return util_jerr(e, &p, "ci95", "expected [low, high]");
        q->lo = json_number_value(json_array_get(ci, 0));
        q->hi = json_number_value(json_array_get(ci, 1));
        if (!(q->lo <= q->value && q->value <= q->hi))
            return util_jerr(e, &p, "ci95", "[%g, %g] does not hold the "
                             "value %g", q->lo, q->hi, q->value);
        c->n_param++;
    }
    return 0;
}

static int parse_ops(const util_jobj *o, json_t *arr, prof_calib *c,
                     util_err *e)
{
    static const char *const keys[] = {"signature", "ns", "samples",
                                       "model", "busy", NULL};
    size_t n = json_array_size(arr);
    c->ops = util_calloc(n + 1, sizeof *c->ops);
    for (size_t i = 0; i < n; i++) {
        util_jobj p;
        prof_calib_op *q = &c->ops[i];
        long samples = 1, busy = 1;
        if (util_jelem(o, "ops", arr, i, &p, e) ||
            util_jkeys(&p, keys, e) ||
            util_jstr(&p, "signature", 1, q->sig, sizeof q->sig, e) ||
            util_jnum(&p, "ns", 1, UTIL_POSITIVE, 1e15, &q->ns, e) ||
            util_jint(&p, "samples", 0, 1, 1L << 40, &samples, e) ||
            util_jstr(&p, "model", 0, q->model, sizeof q->model, e) ||
            util_jint(&p, "busy", 0, 1, 1 << 20, &busy, e))
            return -1;
        q->samples = samples;
        q->busy = (int)busy;
        /* "GPU|kind|F/B/W|mbs|gemms": the type must be this file's */
        size_t dl = strlen(c->device);
        if (strncmp(q->sig, c->device, dl) || q->sig[dl] != '|')
            return util_jerr(e, &p, "signature", "'%s' is not a signature "
                             "of %s ('%s|op kind|F, B or W|microbatch|"
                             "GEMMs')", q->sig, c->device, c->device);
        c->n_ops++;
    }
    qsort(c->ops, (size_t)c->n_ops, sizeof *c->ops, op_cmp);
    for (int i = 1; i < c->n_ops; i++)
        if (!strcmp(c->ops[i].sig, c->ops[i - 1].sig))
            return util_jerr(e, o, "ops", "signature '%s' is listed twice",
                             c->ops[i].sig);
    return 0;
}

/* "busy": [1, 1.04, ...]: the slowdown with 1, 2, ... devices at once. */
static int parse_busy(const util_jobj *root, prof_calib *c, util_err *e)
{
    json_t *arr;
    c->busy[0] = 1;
    c->n_busy = 1;
    if (util_jarray(root, "busy", 0, &arr, e)) return -1;
    if (!arr) return 0;
    size_t n = json_array_size(arr);
    if (n < 1 || n > PROF_CALIB_MAX_BUSY)
        return util_jerr(e, root, "busy", "%zu values: 1 to %d (the first "
                         "for one device alone, 1)", n, PROF_CALIB_MAX_BUSY);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        double f = json_is_number(v) ? json_number_value(v) : -1;
        if (!(f >= 0.5 && f <= 100) || (i == 0 && f != 1))
            return util_jerr(e, root, "busy", "value %zu: %s (a slowdown "
                             "between 0.5 and 100, the first 1)", i,
                             json_is_number(v) ? "out of range"
                                               : "not a number");
        c->busy[i] = f;
    }
    c->n_busy = (int)n;
    return 0;
}

/* "tiers": the drive's rates (GB/s) and AdamW's (M parameters/s), each
 * where a run measured it, one at least. */
static int parse_tiers(const util_jobj *o, prof_calib_tiers *t, util_err *e)
{
    static const char *const keys[] = {"drive_read_gb_per_s",
        "drive_write_gb_per_s", "adam_mparams_per_s", "model", NULL};
    double rd = 0, wr = 0, ad = 0;
    if (util_jkeys(o, keys, e) ||
        util_jnum(o, "drive_read_gb_per_s", 0, 1e-6, 1e6, &rd, e) ||
        util_jnum(o, "drive_write_gb_per_s", 0, 1e-6, 1e6, &wr, e) ||
        util_jnum(o, "adam_mparams_per_s", 0, 1e-6, 1e9, &ad, e) ||
        util_jstr(o, "model", 0, t->model, sizeof t->model, e))
        return -1;
    if (!(rd > 0 || wr > 0 || ad > 0))
        return util_jerr(e, o, "adam_mparams_per_s", "the tiers' rates: "
                         "none given (drive_read_gb_per_s, "
                         "drive_write_gb_per_s or adam_mparams_per_s)");
    t->read_bytes_per_s = rd * 1e9;
    t->write_bytes_per_s = wr * 1e9;
    t->adam_params_per_s = ad * 1e6;
    t->present = 1;
    return 0;
}

/* Whether d is YYYY-MM-DDTHH:MM:SSZ with a day its month has: fixed
 * digits, since profile list sorts the text (sscanf's %2d would take
 * " 1", "+1" and "-1"); second 60 only at 23:59, a leap second. */
static int utc_date_ok(const char *d)
{
    static const char form[] = "dddd-dd-ddTdd:dd:ddZ";
    if (strlen(d) != sizeof form - 1) return 0;
    for (size_t i = 0; form[i]; i++)
        if (form[i] == 'd' ? !isdigit((unsigned char)d[i]) : d[i] != form[i])
            return 0;
    int yr, mo, dy, hh, mi, ss;
    sscanf(d, "%4d-%2d-%2dT%2d:%2d:%2d", &yr, &mo, &dy, &hh, &mi, &ss);
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30,
                                  31};
    int leap = (yr % 4 == 0 && yr % 100 != 0) || yr % 400 == 0;
    return yr >= 1970 && mo >= 1 && mo <= 12 && dy >= 1 &&
           dy <= (mo == 2 && !leap ? 28 : mdays[mo - 1]) && hh <= 23 &&
           mi <= 59 && (ss <= 59 || (ss == 60 && hh == 23 && mi == 59));
}

static int parse(const util_jdoc *d, prof_calib *c, util_err *e)
{
    static const char *const keys[] = {"format", "version", "device", "date",
        "quick", "machine", "gpu", "links", "fit", "ops", "busy", "tiers",
        NULL};
    util_jobj root = util_jroot(d), o;
    char fmt[32] = "";
    long version = 1;
    int have;
    if (!json_is_object(root.j))
        return util_errf(e, UTIL_EXIT_USAGE, "%s:1:1: expected an object (a "
                         "calibration)", d->file);
    if (util_jkeys(&root, keys, e) ||
        util_jstr(&root, "format", 1, fmt, sizeof fmt, e))
        return -1;
    if (strcmp(fmt, "sluice-calibration"))
        return util_jerr(e, &root, "format", "'%s' is not a calibration "
                         "(expected \"sluice-calibration\")", fmt);
    if (util_jint(&root, "version", 0, 1, 1, &version, e) ||
        util_jstr(&root, "device", 1, c->device, sizeof c->device, e) ||
        util_jstr(&root, "date", 1, c->date, sizeof c->date, e) ||
        util_jbool(&root, "quick", 0, &c->quick, e) ||
        util_jchild(&root, "machine", 1, &o, &have, e) ||
        parse_machine(&o, &c->machine, e))
        return -1;
    /* the date `profile list` shows and sorts by: UTC as calibrate
     * writes it (2026-11-29T12:05:52Z), not any text */
    if (!utc_date_ok(c->date))
        return util_jerr(e, &root, "date", "'%s' is not a UTC time as "
                         "sluice calibrate writes it (2026-11-29T12:05:52Z)",
                         c->date);
    util_err e2;
    if (prof_gpu_get_builtin(c->device, &c->gpu, &e2))
        return util_jerr(e, &root, "device", "%s", e2.msg);
    if (util_jchild(&root, "gpu", 1, &o, &have, e) ||
        prof_gpu_parse_ex(&o, &c->gpu, 1, e))
        return -1;
    if (strcmp(c->gpu.name, c->device))
        return util_jerr(e, &o, "name", "'%s' in a calibration of '%s'",
                         c->gpu.name, c->device);
    if (util_jchild(&root, "links", 0, &o, &have, e)) return -1;
    if (have) {
        static const char *const lkeys[] = {"in-process", "mpi",
                                            "all-reduce", NULL};
        if (util_jkeys(&o, lkeys, e)) return -1;
        for (int x = 0; x < PROF_XFER_COUNT; x++) {
            util_jobj l;
            int here;
            if (util_jchild(&o, xfer_names[x], 0, &l, &here, e)) return -1;
            if (here && parse_link(&l, &c->link[x], e)) return -1;
        }
    }
    if (util_jchild(&root, "fit", 0, &o, &have, e)) return -1;
    if (have && parse_fit(&o, c, e)) return -1;
    if (util_jchild(&root, "tiers", 0, &o, &have, e)) return -1;
    if (have && parse_tiers(&o, &c->tiers, e)) return -1;
    if (parse_busy(&root, c, e)) return -1;
    json_t *arr;
    if (util_jarray(&root, "ops", 0, &arr, e)) return -1;
    if (arr && parse_ops(&root, arr, c, e)) return -1;
    return 0;
}

int prof_calib_load(const char *path, prof_calib *c, util_err *e)
{
    memset(c, 0, sizeof *c);
    util_jdoc d;
    if (util_jdoc_load(&d, path, NULL, e)) return -1;
    int rc = parse(&d, c, e);
    util_jdoc_free(&d);
    if (rc) {
        prof_calib_free(c);
        return -1;
    }
    snprintf(c->file, sizeof c->file, "%s", path);
    return 0;
}

void prof_calib_free(prof_calib *c)
{
    if (!c) return;
    free(c->ops);
    c->ops = NULL;
    c->n_ops = 0;
}

/* ------------------------------------------------------------- writing */

json_t *prof_calib_json(const prof_calib *c)
{
    json_t *j = json_object();
    json_object_set_new(j, "format", json_string("sluice-calibration"));
    json_object_set_new(j, "version", json_integer(1));
    json_object_set_new(j, "device", json_string(c->device));
    json_object_set_new(j, "date", json_string(c->date));
    if (c->quick) json_object_set_new(j, "quick", json_true());
    json_object_set_new(j, "machine", json_pack("{s:s,s:s,s:i,s:s}",
        "host", c->machine.host, "cpu", c->machine.cpu, "cores",
        c->machine.cores, "device", c->machine.device));
    json_object_set_new(j, "gpu", prof_gpu_json(&c->gpu));
    json_t *links = json_object();
    for (int x = 0; x < PROF_XFER_COUNT; x++) {
        const prof_calib_link *l = &c->link[x];
        if (!l->present) continue;
        json_object_set_new(links, xfer_names[x], json_pack(
            "{s:f,s:f,s:i,s:f}", "gb_per_s", l->bw_bytes_per_s / 1e9,
            "latency_us", l->latency_ns / 1e3, "samples", l->samples,
            "max_error", l->max_err));
    }
    json_object_set_new(j, "links", links);
    if (c->tiers.present) {
        const prof_calib_tiers *t = &c->tiers;
        json_t *o = json_object();
        const char *k[] = {"drive_read_gb_per_s", "drive_write_gb_per_s",
                           "adam_mparams_per_s"};
        double v[] = {t->read_bytes_per_s / 1e9, t->write_bytes_per_s / 1e9,
                      t->adam_params_per_s / 1e6};
        for (int i = 0; i < 3; i++)
            if (v[i] > 0) json_object_set_new(o, k[i], json_real(v[i]));
        json_object_set_new(o, "model", json_string(t->model));
        json_object_set_new(j, "tiers", o);
    }
    json_t *params = json_array();
    for (int i = 0; i < c->n_param; i++) {
        const prof_calib_param *p = &c->param[i];
        json_array_append_new(params, json_pack("{s:s,s:f,s:[f,f]}", "name",
                              p->name, "value", p->value, "ci95", p->lo,
                              p->hi));
    }
    json_object_set_new(j, "fit", json_pack("{s:i,s:f,s:f,s:o}", "samples",
                        c->fit_samples, "median_error", c->fit_median_err,
                        "max_error", c->fit_max_err, "params", params));
    json_t *busy = json_array();
    for (int i = 0; i < c->n_busy; i++)
        json_array_append_new(busy, json_real(c->busy[i]));
    if (!c->n_busy) json_array_append_new(busy, json_real(1));
    json_object_set_new(j, "busy", busy);
    json_t *ops = json_array();
    for (int i = 0; i < c->n_ops; i++) {
        const prof_calib_op *q = &c->ops[i];
        json_t *o = json_pack("{s:s,s:f,s:I,s:i}", "signature", q->sig,
                              "ns", q->ns, "samples", (json_int_t)q->samples,
                              "busy", q->busy > 0 ? q->busy : 1);
        if (q->model[0])
            json_object_set_new(o, "model", json_string(q->model));
        json_array_append_new(ops, o);
    }
    json_object_set_new(j, "ops", ops);
    return j;
}

int prof_calib_save(const prof_calib *c, const char *path, util_err *e)
{
    json_t *j = prof_calib_json(c);
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
                         JSON_REAL_PRECISION(10));
    json_decref(j);
    /* what is written must load: checked before the file is touched */
    util_jdoc d;
    prof_calib back;
    memset(&back, 0, sizeof back);
    int bad = util_jdoc_load(&d, path, s, e);
    if (!bad) {
        bad = parse(&d, &back, e);
        util_jdoc_free(&d);
        prof_calib_free(&back);
    }
    if (bad) {
        free(s);
        return util_err_prefix(e, "the calibration would not load again, "
                               "so %s is as it was", path);
    }
    int rc = util_write_atomic_line(path, s, e);
    free(s);
    return rc;
}

/* ------------------------------------------------------------ lookups */

double prof_calib_busy(const prof_calib *c, int n)
{
    if (!c || c->n_busy < 1 || n <= 1) return 1;
    /* devices at once share the machine: never faster than alone (a
     * value below 1 is a measurement's noise, which an earlier
     * calibration could store; taken as 1, or the simulation runs below
     * the planner's compute bound) */
    return fmax(1, c->busy[(n < c->n_busy ? n : c->n_busy) - 1]);
}

double prof_calib_op_ns(const prof_calib *c, const char *sig, int busy)
{
    if (!c || !c->n_ops) return -1;
    prof_calib_op key;
    snprintf(key.sig, sizeof key.sig, "%s", sig);
    const prof_calib_op *q = bsearch(&key, c->ops, (size_t)c->n_ops,
                                     sizeof *c->ops, op_cmp);
    if (!q) return -1;
    return q->ns * prof_calib_busy(c, busy) / prof_calib_busy(c, q->busy);
}

void prof_calib_add_op(prof_calib *c, const char *sig, double mean_ns,
                       long samples, const char *model, int busy)
{
    if (samples < 1) return;
    if (busy < 1) busy = 1;
    for (int i = 0; i < c->n_ops; i++) {
        prof_calib_op *q = &c->ops[i];
        if (strcmp(q->sig, sig)) continue;
        /* merged as if measured with the entry's devices at once */
        double v = mean_ns * prof_calib_busy(c, q->busy) /
                   prof_calib_busy(c, busy);
        double n = (double)q->samples + (double)samples;
        q->ns = (q->ns * (double)q->samples + v * (double)samples) / n;
        q->samples += samples;
        if (model && *model) snprintf(q->model, sizeof q->model, "%s", model);
        return;
    }
    c->ops = util_realloc(c->ops, sizeof *c->ops * (size_t)(c->n_ops + 1));
    prof_calib_op *q = &c->ops[c->n_ops++];
    memset(q, 0, sizeof *q);
    snprintf(q->sig, sizeof q->sig, "%s", sig);
    q->ns = mean_ns;
    q->samples = samples;
    q->busy = busy;
    if (model) snprintf(q->model, sizeof q->model, "%s", model);
    qsort(c->ops, (size_t)c->n_ops, sizeof *c->ops, op_cmp);
}

const prof_calib_param *prof_calib_param_get(const prof_calib *c,
                                             const char *name)
{
    for (int i = 0; c && i < c->n_param; i++)
        if (!strcmp(c->param[i].name, name)) return &c->param[i];
    return NULL;
}

/* Loaded calibrations, never freed before exit: device types point into
 * them. A file that changed (size or time) is read again. */
typedef struct loaded {
    prof_calib c;
    struct timespec mtime;
    off_t size;
    struct loaded *next;
} loaded;

static struct {
    pthread_mutex_t mu;
    loaded *head;
    int atexit_set;
} cache = {PTHREAD_MUTEX_INITIALIZER, NULL, 0};

static void cache_free(void)
{
    for (loaded *l = cache.head; l;) {
        loaded *nx = l->next;
        prof_calib_free(&l->c);
        free(l);
        l = nx;
    }
    cache.head = NULL;
}

/* Whether prof_calib_find notes a cpu calibration from another machine
 * (under mpirun, rank 0 alone says it). */
static int foreign_notes = 1;

int prof_calib_find(const char *device, const prof_calib **out, util_err *e)
{
    char path[1100];
    struct stat sb;
    *out = NULL;
    if (!prof_calib_path(device, path, sizeof path)) return 0;
    if (stat(path, &sb)) {
        /* none there; one that cannot be looked for is an error, not the
         * built-in figures in silence */
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        return util_errf(e, UTIL_EXIT_USAGE, "%s: %s", path, strerror(errno));
    }
    pthread_mutex_lock(&cache.mu);
    for (loaded *l = cache.head; l; l = l->next)
        if (!strcmp(l->c.file, path) && l->size == sb.st_size &&
            l->mtime.tv_sec == sb.st_mtim.tv_sec &&
            l->mtime.tv_nsec == sb.st_mtim.tv_nsec) {
            *out = &l->c;
            pthread_mutex_unlock(&cache.mu);
            return 0;
        }
    loaded *l = util_calloc(1, sizeof *l);
    int rc = prof_calib_load(path, &l->c, e);
    if (rc) {
        free(l);
        pthread_mutex_unlock(&cache.mu);
        return -1;
    }
    if (strcmp(l->c.device, device)) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: a calibration of '%s' in the "
                  "file for '%s'", path, l->c.device, device);
        prof_calib_free(&l->c);
        free(l);
        pthread_mutex_unlock(&cache.mu);
        return -1;
    }
    l->c.gpu.calib = &l->c;
    /* CPU cores are this machine's: figures measured on another describe
     * that one (said once a file is read, after the lock; a GPU's
     * calibration is the GPU's, wherever its host) */
    char note[700] = "";
    if (!strcmp(device, "cpu") && foreign_notes) {
        prof_machine me;
        prof_machine_this(&me);
        snprintf(me.device, sizeof me.device, "%s", l->c.machine.device);
        if (!prof_machine_same(&l->c.machine, &me)) {
            char a[256], b[256];
            snprintf(note, sizeof note, "note: %s was measured on %s; this "
                     "is %s: predictions for cpu use that machine's "
                     "figures (calibrate here: sluice calibrate --hw cpu "
                     "xN)\n", path,
                     prof_machine_str(&l->c.machine, a, sizeof a),
                     prof_machine_str(&me, b, sizeof b));
        }
    }
    l->mtime = sb.st_mtim;
    l->size = sb.st_size;
    l->next = cache.head;
    cache.head = l;
    if (!cache.atexit_set) {
        cache.atexit_set = 1;
        atexit(cache_free);
    }
    *out = &l->c;
    pthread_mutex_unlock(&cache.mu);
    if (note[0]) fputs(note, stderr);
    return 0;
}

void prof_calib_foreign_notes(int on) { foreign_notes = on; }

int prof_calib_list(prof_calib **out, int *n, util_err *e)
{
    *out = NULL;
    *n = 0;
    const char *const *names = prof_gpu_names();
    int rc = 0;
    for (int i = 0; names[i]; i++) {
        const prof_calib *c;
        util_err e2;
        if (prof_calib_find(names[i], &c, &e2)) {
            /* every broken file is named, a line each: with only the
             * first, a second broken one went unsaid until the first was
             * mended */
            if (!rc) {
                *e = e2;
            } else {
                size_t l = strlen(e->msg);
                snprintf(e->msg + l, sizeof e->msg - l, "\n%s", e2.msg);
            }
            rc = -1;
            continue;
        }
        if (!c) continue;
        *out = util_realloc(*out, sizeof **out * (size_t)(*n + 1));
        (*out)[(*n)++] = *c;
    }
    return rc;
}
