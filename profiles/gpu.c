/* GPU types: the built-in catalog (profiles/hw/gpus.json, compiled in and
 * parsed once), parsing of GPU objects with file:line:col errors, and the
 * efficiency model. Catalog figures are datasheet peaks; the efficiency
 * model says how much of them an op of a given shape gets. */
#include "profiles/hw_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const dtype_names[] = {"fp32", "tf32", "fp16", "bf16"};

const char *prof_dtype_name(prof_dtype d)
{
    if (d < 0 || d >= PROF_DT_COUNT) return "?";
    return dtype_names[d];
}

int prof_dtype_bytes(prof_dtype d)
{
    switch (d) {
    case PROF_DT_FP16:
    case PROF_DT_BF16: return 2;
    default: return 4;      /* fp32; tf32 is stored as fp32 */
    }
}

/* A dimension below one element is treated as one: efficiencies stay
 * positive and every factor is monotone increasing in its dimension. */
static double frac(double x, double half)
{
    if (!(x >= 1)) x = 1;
    if (!(half > 0)) return 1;
    return x / (x + half);
}

double prof_gemm_eff(const prof_eff *e, double m, double n, double k)
{
    double r = e->gemm_max * frac(m, e->gemm_half_mn) *
               frac(n, e->gemm_half_mn) * frac(k, e->gemm_half_k);
    if (r > 1) r = 1;
    return r > 0 ? r : 1e-12;
}

double prof_mem_eff(const prof_eff *e, double bytes)
{
    double r = e->mem_max * frac(bytes, e->mem_half_bytes);
    if (r > 1) r = 1;
    return r > 0 ? r : 1e-12;
}

/* ---- parsing ---- */

static const char *const form_names[] = {"pcie", "sxm", "cpu", NULL};

static int name_ok(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == '.'))
            return 0;
    return 1;
}

static const char *const phase_names[PROF_PHASES + 1] = {"F", "B", "W",
                                                        NULL};

/* "mem_factor": {"norm": {"F": 1.1, "B": 0.7}, ...} (and "gemm_factor"):
 * kinds and phases absent keep their value. */
static int parse_factors(const util_jobj *o, const char *key,
                         double (*f)[PROF_PHASES], util_err *e)
{
    util_jobj m;
    int have;
    if (util_jchild(o, key, 0, &m, &have, e)) return -1;
    if (!have) return 0;
    const char *kinds[PROF_OP_KIND_COUNT + 1];
    for (int k = 0; k < PROF_OP_KIND_COUNT; k++)
        kinds[k] = prof_op_kind_name((prof_op_kind)k);
    kinds[PROF_OP_KIND_COUNT] = NULL;
    if (util_jkeys(&m, kinds, e)) return -1;
    for (int k = 0; k < PROF_OP_KIND_COUNT; k++) {
        util_jobj p;
        if (util_jchild(&m, kinds[k], 0, &p, &have, e)) return -1;
        if (!have) continue;
        if (util_jkeys(&p, phase_names, e)) return -1;
        for (int q = 0; q < PROF_PHASES; q++)
            if (util_jnum(&p, phase_names[q], 0, 1e-3, 1e3, &f[k][q], e))
                return -1;
    }
    return 0;
}

/* "split_factor": {"B": 1.02, "W": 1.03}: a phase absent keeps its
 * value. */
static int parse_split(const util_jobj *o, double f[2], util_err *e)
{
    static const char *const ph[] = {"B", "W", NULL};
    util_jobj m;
    int have;
    if (util_jchild(o, "split_factor", 0, &m, &have, e)) return -1;
    if (!have) return 0;
    if (util_jkeys(&m, ph, e)) return -1;
    for (int q = 0; q < 2; q++)
        if (util_jnum(&m, ph[q], 0, 0.1, 10, &f[q], e)) return -1;
    return 0;
}

static json_t *factors_json(const double (*f)[PROF_PHASES])
{
    json_t *mf = json_object();
    for (int k = 0; k < PROF_OP_KIND_COUNT; k++) {
        json_t *p = json_object();
        for (int q = 0; q < PROF_PHASES; q++)
            if (f[k][q] > 0)
                json_object_set_new(p, phase_names[q], json_real(f[k][q]));
        if (json_object_size(p))
            json_object_set_new(mf, prof_op_kind_name((prof_op_kind)k), p);
        else
            json_decref(p);
    }
    if (json_object_size(mf)) return mf;
    json_decref(mf);
    return NULL;
}

static int parse_eff(const util_jobj *o, prof_eff *f, int partial,
                     util_err *e)
{
    static const char *const keys[] = {"gemm_max", "gemm_half_mn",
        "gemm_half_k", "mem_max", "mem_half_bytes", "launch_ns", "task_ns",
        "op_task_ns", "gemm_factor", "mem_factor", "opt_factor", "cache_bytes",
        "cache_gain", "unaligned", "split_factor", NULL};
    int req = !partial;
    if (util_jkeys(o, keys, e) ||
        util_jnum(o, "unaligned", 0, UTIL_HW_MIN, 1, &f->unaligned, e) ||
        util_jnum(o, "cache_bytes", 0, 0, 1e12, &f->cache_bytes, e) ||
        util_jnum(o, "cache_gain", 0, 0, 1e3, &f->cache_gain, e) ||
        parse_factors(o, "gemm_factor", f->gemm_factor, e) ||
        parse_factors(o, "mem_factor", f->mem_factor, e) ||
        parse_split(o, f->split_factor, e) ||
        util_jnum(o, "opt_factor", 0, 1e-3, 1e3, &f->opt_factor, e) ||
        util_jnum(o, "gemm_max", req, UTIL_HW_MIN, 1, &f->gemm_max, e) ||
        util_jnum(o, "gemm_half_mn", req, 0, 1e6, &f->gemm_half_mn, e) ||
        util_jnum(o, "gemm_half_k", req, 0, 1e6, &f->gemm_half_k, e) ||
        util_jnum(o, "mem_max", req, UTIL_HW_MIN, 1, &f->mem_max, e) ||
        util_jnum(o, "mem_half_bytes", req, 0, 1e12, &f->mem_half_bytes,
                  e) ||
        util_jnum(o, "launch_ns", req, 0, 1e7, &f->launch_ns, e) ||
        util_jnum(o, "task_ns", 0, 0, 1e9, &f->task_ns, e) ||
        util_jnum(o, "op_task_ns", 0, 0, 1e9, &f->op_task_ns, e))
        return -1;
    return 0;
}

int prof_gpu_parse_ex(const util_jobj *o, prof_gpu *g, int partial,
                      util_err *e)
{
    static const char *const keys[] = {"name", "full_name", "arch", "form",
        "consumer", "mem_gib", "mem_bw_gb_per_s", "peak_tflops",
        "fp16_acc16_tflops", "pcie_gen", "pcie_lanes", "nvlink_links",
        "nvlink_gb_per_s", "tdp_w", "price_usd_per_hour", "eff", "source",
        "base", NULL};
    static const char *const peak_keys[] = {"fp32", "tf32", "fp16", "bf16",
                                            NULL};
    int req = !partial;
    if (util_jkeys(o, keys, e)) return -1;
    if (!partial && json_object_get(o->j, "base"))
        return util_jerr(e, o, "base", "not allowed here (the catalog "
                         "defines base types)");
    if (!partial) memset(g, 0, sizeof *g);
    if (util_jstr(o, "name", req, g->name, sizeof g->name, e)) return -1;
    if (!name_ok(g->name))
        return util_jerr(e, o, "name", "'%s' is not a valid name (use "
                         "a-z, 0-9, '-', '_', '.')", g->name);
    int form = g->form;
    double mem_gib = g->mem_bytes / 1073741824.0;
    double bw = g->mem_bw_bytes_per_s / 1e9, acc16 = g->fp16_acc16_flops / 1e12;
    double nvbw = g->nvlink_bw_bytes_per_s / 1e9;
    long gen = g->pcie_gen, lanes = g->pcie_lanes, links = g->nvlink_links;
    if (util_jstr(o, "full_name", req, g->full_name, sizeof g->full_name,
                  e) ||
        util_jstr(o, "arch", req, g->arch, sizeof g->arch, e) ||
        util_jenum(o, "form", req, form_names, &form, e) ||
        util_jbool(o, "consumer", req, &g->consumer, e) ||
        util_jnum(o, "mem_gib", req, UTIL_HW_MIN, 1e6, &mem_gib, e) ||
        util_jnum(o, "mem_bw_gb_per_s", req, UTIL_HW_MIN, 1e6, &bw, e) ||
        util_jnum(o, "fp16_acc16_tflops", 0, 0, 1e6, &acc16, e) ||
        util_jint(o, "pcie_gen", req, 1, 6, &gen, e) ||
        util_jint(o, "pcie_lanes", req, 1, 32, &lanes, e) ||
        util_jint(o, "nvlink_links", req, 0, 64, &links, e) ||
        util_jnum(o, "nvlink_gb_per_s", req, 0, 1e4, &nvbw, e) ||
        util_jnum(o, "tdp_w", req, UTIL_POSITIVE, 1e5, &g->tdp_w, e) ||
        util_jnum(o, "price_usd_per_hour", req, 0, 1e6, &g->price_per_hour,
                  e) ||
        util_jstr(o, "source", req, g->source, sizeof g->source, e))
        return -1;
    if (!partial && !g->source[0])
        return util_jerr(e, o, "source", "empty: say where the figures come "
                         "from (a datasheet, or \"measured\")");
    if (lanes != 1 && lanes != 2 && lanes != 4 && lanes != 8 && lanes != 16 &&
        lanes != 32)
        return util_jerr(e, o, "pcie_lanes", "%ld lanes (expected 1, 2, 4, "
                         "8, 16 or 32)", lanes);
    if (links > 0 && !(nvbw > 0))
        return util_jerr(e, o, "nvlink_gb_per_s", "must be > 0 when "
                         "nvlink_links is %ld", links);
    g->form = (prof_form)form;
    g->mem_bytes = mem_gib * 1073741824.0;
    g->mem_bw_bytes_per_s = bw * 1e9;
    g->fp16_acc16_flops = acc16 * 1e12;
    g->pcie_gen = (int)gen;
    g->pcie_lanes = (int)lanes;
    g->nvlink_links = (int)links;
    g->nvlink_bw_bytes_per_s = links > 0 ? nvbw * 1e9 : 0;

    util_jobj p;
    int have;
    if (util_jchild(o, "peak_tflops", req, &p, &have, e)) return -1;
    if (have) {
        if (util_jkeys(&p, peak_keys, e)) return -1;
        for (int d = 0; d < PROF_DT_COUNT; d++) {
            double v = g->peak_flops[d] / 1e12;
            /* fp32 and fp16 exist on every GPU; tf32/bf16 may be 0; a CPU
             * device computes in fp32 only. */
            int must = d == PROF_DT_FP32 ||
                       (d == PROF_DT_FP16 && form != PROF_FORM_CPU);
            if (util_jnum(&p, dtype_names[d], req,
                          must ? UTIL_HW_MIN : 0, 1e6, &v, e))
                return -1;
            if (v > 0 && v < UTIL_HW_MIN)
                return util_jerr(e, &p, dtype_names[d], "%g is too small "
                                 "(must be 0 or >= %g)", v, UTIL_HW_MIN);
            g->peak_flops[d] = v * 1e12;
        }
        if (g->peak_flops[PROF_DT_TF32] > g->peak_flops[PROF_DT_FP16])
            return util_jerr(e, &p, "tf32", "tf32 peak above the fp16 peak");
    }
    if (g->fp16_acc16_flops > 0 &&
        g->fp16_acc16_flops < g->peak_flops[PROF_DT_FP16])
        return util_jerr(e, o, "fp16_acc16_tflops", "below the fp16 (fp32 "
                         "accumulate) peak");
    util_jobj eo;
    if (util_jchild(o, "eff", req, &eo, &have, e)) return -1;
    if (have && parse_eff(&eo, &g->eff, partial, e)) return -1;
    return 0;
}

int prof_gpu_parse(const util_jobj *o, prof_gpu *out, util_err *e)
{
    char base[32] = "";
    if (json_is_object(o->j) && json_object_get(o->j, "base")) {
        if (util_jstr(o, "base", 1, base, sizeof base, e)) return -1;
        util_err e2;
        if (prof_gpu_get(base, out, &e2))
            return util_jerr(e, o, "base", "%s", e2.msg);
        return prof_gpu_parse_ex(o, out, 1, e);
    }
    return prof_gpu_parse_ex(o, out, 0, e);
}

json_t *prof_gpu_json(const prof_gpu *g)
{
    json_t *peak = json_object();
    for (int d = 0; d < PROF_DT_COUNT; d++)
        json_object_set_new(peak, dtype_names[d],
                            json_real(g->peak_flops[d] / 1e12));
    json_t *eff = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f}",
        "gemm_max", g->eff.gemm_max, "gemm_half_mn", g->eff.gemm_half_mn,
        "gemm_half_k", g->eff.gemm_half_k, "mem_max", g->eff.mem_max,
        "mem_half_bytes", g->eff.mem_half_bytes,
        "launch_ns", g->eff.launch_ns);
    if (g->eff.task_ns > 0)
        json_object_set_new(eff, "task_ns", json_real(g->eff.task_ns));
    if (g->eff.op_task_ns > 0)
        json_object_set_new(eff, "op_task_ns", json_real(g->eff.op_task_ns));
    if (g->eff.unaligned > 0)
        json_object_set_new(eff, "unaligned", json_real(g->eff.unaligned));
    json_t *gf = factors_json(g->eff.gemm_factor);
    json_t *mf = factors_json(g->eff.mem_factor);
    if (gf) json_object_set_new(eff, "gemm_factor", gf);
    if (mf) json_object_set_new(eff, "mem_factor", mf);
    if (g->eff.opt_factor > 0)
        json_object_set_new(eff, "opt_factor", json_real(g->eff.opt_factor));
    if (g->eff.split_factor[0] > 0 && g->eff.split_factor[1] > 0)
        json_object_set_new(eff, "split_factor",
                            json_pack("{s:f,s:f}", "B",
                                      g->eff.split_factor[0], "W",
                                      g->eff.split_factor[1]));
    if (g->eff.cache_bytes > 0 && g->eff.cache_gain > 0) {
        json_object_set_new(eff, "cache_bytes", json_real(g->eff.cache_bytes));
        json_object_set_new(eff, "cache_gain", json_real(g->eff.cache_gain));
    }
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(g->name));
    json_object_set_new(o, "full_name", json_string(g->full_name));
    json_object_set_new(o, "arch", json_string(g->arch));
    json_object_set_new(o, "form", json_string(form_names[g->form]));
    json_object_set_new(o, "consumer", json_boolean(g->consumer));
    json_object_set_new(o, "mem_gib", json_real(g->mem_bytes / 1073741824.0));
    json_object_set_new(o, "mem_bw_gb_per_s",
                        json_real(g->mem_bw_bytes_per_s / 1e9));
    json_object_set_new(o, "peak_tflops", peak);
    if (g->fp16_acc16_flops > 0)
        json_object_set_new(o, "fp16_acc16_tflops",
                            json_real(g->fp16_acc16_flops / 1e12));
    json_object_set_new(o, "pcie_gen", json_integer(g->pcie_gen));
    json_object_set_new(o, "pcie_lanes", json_integer(g->pcie_lanes));
    json_object_set_new(o, "nvlink_links", json_integer(g->nvlink_links));
    json_object_set_new(o, "nvlink_gb_per_s",
                        json_real(g->nvlink_bw_bytes_per_s / 1e9));
    json_object_set_new(o, "tdp_w", json_real(g->tdp_w));
    json_object_set_new(o, "price_usd_per_hour", json_real(g->price_per_hour));
    json_object_set_new(o, "eff", eff);
    json_object_set_new(o, "source", json_string(g->source));
    return o;
}

/* ---- the built-in catalog ---- */

static struct {
    pthread_once_t once;
    prof_gpu *gpus;
    int n;
    const char **names;
} cat = {PTHREAD_ONCE_INIT, NULL, 0, NULL};

static void cat_free(void)
{
    free(cat.gpus);
    free(cat.names);
}

/* Parses a catalog document: its GPUs into a new array. */
static int catalog_parse(const util_jdoc *d, prof_gpu **out, int *nout,
                         util_err *e)
{
    util_jobj root = util_jroot(d), g;
    static const char *const keys[] = {"format", "version", "notes", "gpus",
                                       NULL};
    json_t *arr;
    char fmt[32] = "";
    long version = 1;
    *out = NULL;
    *nout = 0;
    if (!json_is_object(root.j))
        return util_errf(e, UTIL_EXIT_USAGE, "%s:1:1: expected an object (a "
                         "GPU catalog)", d->file);
    if (util_jkeys(&root, keys, e) ||
        util_jstr(&root, "format", 1, fmt, sizeof fmt, e))
        return -1;
    if (strcmp(fmt, "sluice-gpus"))
        return util_jerr(e, &root, "format", "'%s' is not a GPU catalog "
                         "(expected \"sluice-gpus\")", fmt);
    if (util_jint(&root, "version", 0, 1, 1, &version, e) ||
        util_jarray(&root, "gpus", 1, &arr, e))
        return -1;
    size_t n = json_array_size(arr);
    if (n == 0) return util_jerr(e, &root, "gpus", "no GPUs");
    prof_gpu *gs = util_calloc(n, sizeof *gs);
    for (size_t i = 0; i < n; i++) {
        if (util_jelem(&root, "gpus", arr, i, &g, e) ||
            prof_gpu_parse_ex(&g, &gs[i], 0, e))
            goto fail;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(gs[j].name, gs[i].name)) {
                util_jerr(e, &g, "name", "'%s' is defined twice (first as "
                          "gpus[%zu])", gs[i].name, j);
                goto fail;
            }
    }
    *out = gs;
    *nout = (int)n;
    return 0;
fail:
    free(gs);
    return -1;
}

int prof_gpu_catalog_load(const char *path, prof_gpu **out, int *n,
                          util_err *e)
{
    util_jdoc d;
    *out = NULL;
    *n = 0;
    if (util_jdoc_load(&d, path, NULL, e)) return -1;
    int r = catalog_parse(&d, out, n, e);
    util_jdoc_free(&d);
    return r;
}

static void cat_load(void)
{
    const char *text = prof_builtin("hw/gpus.json");
    HW_NEVER(!text);
    util_jdoc d;
    util_err e;
    if (util_jdoc_load(&d, "hw/gpus.json", text, &e) ||
        catalog_parse(&d, &cat.gpus, &cat.n, &e)) {
        fprintf(stderr, "sluice: built-in catalog: %s\n", e.msg);
        HW_NEVER(1);
    }
    cat.names = util_calloc((size_t)cat.n + 1, sizeof *cat.names);
    for (int i = 0; i < cat.n; i++) cat.names[i] = cat.gpus[i].name;
    util_jdoc_free(&d);
    atexit(cat_free);
}

const char *const *prof_gpu_names(void)
{
    pthread_once(&cat.once, cat_load);
    return cat.names;
}

int prof_gpu_unknown(const char *name, util_err *e)
{
    const char *const *names = prof_gpu_names();
    char list[1024] = "", pre[512] = "";
    size_t lw = strlen(name);
    int npre = 0;
    for (int i = 0; names[i]; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", names[i]);
        if (lw >= 2 && !strncasecmp(names[i], name, lw)) {
            l = strlen(pre);
            snprintf(pre + l, sizeof pre - l, "%s'%s'", npre++ ? ", " : "",
                     names[i]);
        }
    }
    /* a family's name ("a100", "h100"): its members */
    if (npre > 1)
        return util_errf(e, UTIL_EXIT_USAGE, "unknown GPU type '%s' (did you "
                         "mean one of %s?); known: %s", name, pre, list);
    const char *near = util_closest(name, names, (size_t)cat.n);
    if (near)
        return util_errf(e, UTIL_EXIT_USAGE, "unknown GPU type '%s' (did you "
                         "mean '%s'?); known: %s", name, near, list);
    return util_errf(e, UTIL_EXIT_USAGE, "unknown GPU type '%s'; known: %s",
                     name, list);
}

int prof_gpu_get_builtin(const char *name, prof_gpu *out, util_err *e)
{
    prof_gpu_names();
    for (int i = 0; i < cat.n; i++)
        if (!strcmp(cat.gpus[i].name, name)) {
            *out = cat.gpus[i];
            return 0;
        }
    return prof_gpu_unknown(name, e);
}

int prof_gpu_get(const char *name, prof_gpu *out, util_err *e)
{
    if (prof_gpu_get_builtin(name, out, e)) return -1;
    const prof_calib *c;
    util_err e2;
    if (prof_calib_find(name, &c, &e2)) {
        if (e) *e = e2;
        return -1;
    }
    if (c) {
        *out = c->gpu;
        for (int i = 0; i < cat.n; i++)
            if (!strcmp(cat.gpus[i].name, name)) out->datasheet = &cat.gpus[i];
    }
    return 0;
}

const prof_gpu *prof_gpu_at(const prof_gpu *g, prof_dtype dt)
{
    return dt != PROF_DT_FP32 && g->datasheet ? g->datasheet : g;
}

double prof_gpu_peak(const prof_gpu *g, prof_dtype dt)
{
    if ((unsigned)dt >= PROF_DT_COUNT) return 0;
    double p = g->peak_flops[dt];
    if (!(p > 0)) p = g->peak_flops[prof_dtype_fallback(dt)];
    if (dt == PROF_DT_FP32 && !(p > 0)) p = g->peak_flops[PROF_DT_TF32];
    return p > 0 ? p : 0;
}

prof_dtype prof_dtype_fallback(prof_dtype dt)
{
    return dt == PROF_DT_BF16 ? PROF_DT_FP16
         : dt == PROF_DT_TF32 ? PROF_DT_FP32 : dt;
}

prof_dtype prof_spec_math(const prof_model_spec *s)
{
    return s->tf32 && s->dtype == PROF_DT_FP32 ? PROF_DT_TF32 : s->dtype;
}

prof_dtype prof_gpu_math(const prof_gpu *g, prof_dtype dt)
{
    if (dt != PROF_DT_TF32) return dt;
    const prof_gpu *d = g->datasheet ? g->datasheet : g;
    return d->form != PROF_FORM_CPU && d->peak_flops[PROF_DT_TF32] > 0
         ? PROF_DT_TF32 : PROF_DT_FP32;
}

const prof_gpu *prof_topo_dtype_fallback(const prof_topo *t, prof_dtype dt)
{
    for (int i = 0; t && prof_dtype_fallback(dt) != dt &&
                    i < t->n_gpu_types; i++) {
        const prof_gpu *g = prof_gpu_at(&t->gpu_types[i], dt);
        if (g->form != PROF_FORM_CPU && !(g->peak_flops[dt] > 0)) return g;
    }
    return NULL;
}
