/* Predictions against published measurements: every row of a validation
 * table is planned with its own layout (tensor, pipeline and data parallel
 * widths), batch and the knobs the row names (microbatch, recomputation,
 * sequence parallelism, ZeRO stage) fixed; the planner chooses the rest.
 * A row's model is a GPT from its heads, hidden and layers, or a catalog
 * model. Predicted TFLOP/s per GPU count FLOPs the way the table does
 * (Megatron-LM's closed form, recomputation included where it is full);
 * iteration seconds and tokens/s per GPU are the simulation's own. One
 * profile per GPU type serves every row. */
#include <math.h>
#include <string.h>

#include "planner/planner.h"

/* What a table may say per row besides the layout: which measurement
 * column it has (one of meas_cols, in that order of preference), and the
 * knobs a row may fix (absent: the '# sluice:' line's, or the planner's
 * choice). */
enum { M_TFLOPS, M_ITER_S, M_TOKENS, M_COUNT };
static const char *const meas_cols[M_COUNT] = {"tflops_per_gpu", "iteration_s",
                                               "tokens_per_s_per_gpu"};
static const char *const meas_units[M_COUNT] = {"TFLOP/s per GPU",
                                                "seconds per iteration",
                                                "tokens/s per GPU"};

typedef struct vrow {
    int line;
    char model[64];           /* a catalog model, or "" (GPT from columns) */
    double heads, hidden, layers, tp, pp, gpus, batch, measured;
    int recompute, sp, mbs, zero; /* -1: not given in the row */
    int sched;                /* a 'schedule' cell: the run's schedule
                               * where it had a pipeline; -1: the
                               * header's */
    int chunks;               /* a 'chunks' cell: interleaved 1F1B's
                               * chunks per device; 0: searched */
    int has_ft;               /* a 'finetune' cell: what trains */
    prof_finetune ft;
    double mem_gib;           /* a 'peak_mem_gib' cell: the measured peak
                               * per GPU; 0: none */
    double grad_bucket;       /* a 'grad_bucket' cell: how the run's
                               * framework all-reduced its gradients
                               * (sim_plan.grad_bucket); < -1: the
                               * header's */
} vrow;

typedef struct vhead {
    char gpu[32], sched[32], dtype[8];
    int vocab, seq, recompute, sp, zero, flash;
    int fused_loss;
    int set_vocab, set_seq, set_dtype, set_flash, set_fused_loss; /* given:
                                   * overrides a catalog model */
    int math;                   /* dtype= as prof_math_parse reads it */
    double grad_bucket;         /* grad_bucket=: sim_plan.grad_bucket */
} vhead;

/* A flag's value: 0 or 1. */
static int flag(const char *v, int *out)
{
    long x;
    if (util_parse_int(v, 0, 1, &x)) return -1;
    *out = (int)x;
    return 0;
}

/* The '# sluice:' line's settings into h; -1 with why (the setting and
 * what it takes) on a bad one. */
static int directive(const char *line, vhead *h, char *why, size_t wn)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", line + strlen("# sluice:"));
    for (char *t = strtok(buf, " \t\r\n"); t; t = strtok(NULL, " \t\r\n")) {
        char *eq = strchr(t, '=');
        if (!eq) {
            snprintf(why, wn, "'%s' is not KEY=VALUE", t);
            return -1;
        }
        *eq = 0;
        const char *v = eq + 1;
        long x = 0;
        int bad = 0;
        util_err me;
        if (!strcmp(t, "gpu")) {
            snprintf(h->gpu, sizeof h->gpu, "%s", v);
        } else if (!strcmp(t, "schedule")) {
            snprintf(h->sched, sizeof h->sched, "%s", v);
        } else if (!strcmp(t, "dtype")) {
            bad = prof_math_parse(v, &h->math, &me) || !h->math;
            snprintf(h->dtype, sizeof h->dtype, "%s", v);
            h->set_dtype = 1;
        } else if (!strcmp(t, "vocab") || !strcmp(t, "seq")) {
            bad = util_parse_int(v, 1, 1 << 24, &x) != 0;
            if (t[0] == 'v') h->vocab = (int)x, h->set_vocab = 1;
            else h->seq = (int)x, h->set_seq = 1;
        } else if (!strcmp(t, "recompute")) {
            int r = sim_recompute_parse(v);
            if (r < 0 && flag(v, &r)) bad = 1;
            h->recompute = r;
        } else if (!strcmp(t, "sp")) {
            bad = flag(v, &h->sp);
        } else if (!strcmp(t, "flash")) {
            bad = flag(v, &h->flash);
            h->set_flash = 1;
        } else if (!strcmp(t, "fused_loss")) {
            bad = flag(v, &h->fused_loss);
            h->set_fused_loss = 1;
        } else if (!strcmp(t, "zero")) {
            bad = util_parse_int(v, 0, 3, &x) != 0;
            h->zero = (int)x;
        } else if (!strcmp(t, "grad_bucket")) {
            bad = sim_grad_bucket_parse(v, &h->grad_bucket);
        } else {
            snprintf(why, wn, "no setting '%s' (gpu=, schedule=, dtype=, "
                     "vocab=, seq=, recompute=, sp=, zero=, flash=, "
                     "fused_loss=, grad_bucket=)", t);
            return -1;
        }
        if (bad) {
            const char *takes =
                !strcmp(t, "dtype") ? "fp32, tf32, fp16 or bf16"
              : !strcmp(t, "vocab") || !strcmp(t, "seq")
                  ? "a whole number from 1 to 16777216"
              : !strcmp(t, "recompute") ? "none, selective, full, 0 or 1"
              : !strcmp(t, "zero") ? "0 to 3"
              : !strcmp(t, "grad_bucket") ? SIM_GRAD_BUCKET_TAKES
                                          : "0 or 1";
            snprintf(why, wn, "%s='%s': expected %s", t, v, takes);
            return -1;
        }
    }
    return 0;
}

static int col_of(char **names, int n, const char *want)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], want)) return i;
    return -1;
}

/* The optional knob cells of a row; -1 where the column is absent. */
static int row_knobs(const char *path, int lineno, char **cells, int n,
                     const int *kc, vrow *r, util_err *e)
{
    static const char *const names[] = {"recompute", "sequence_parallel",
                                        "microbatch", "zero"};
    int *dst[] = {&r->recompute, &r->sp, &r->mbs, &r->zero};
    for (int k = 0; k < 4; k++) {
        *dst[k] = -1;
        if (kc[k] < 0) continue;
        const char *v = kc[k] < n ? cells[kc[k]] : "";
        if (!v[0]) continue;            /* an empty cell: not given */
        long x = -1;
        if (k == 0) {
            x = sim_recompute_parse(v);
        } else if (util_parse_int(v, k == 1 ? 0 : k == 2 ? 1 : 0,
                                  k == 1 ? 1 : k == 2 ? 65536 : 3, &x)) {
            x = -1;
        }
        if (x < 0)
            return util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column '%s': '%s' is "
                             "not %s", path, lineno, names[k], v,
                             k == 0 ? "none, selective or full"
                             : k == 1 ? "0 or 1"
                             : k == 2 ? "a microbatch size (1 or more)"
                                      : "a ZeRO stage (0 to 3)");
        *dst[k] = (int)x;
    }
    return 0;
}

/* The row's own schedule and interleaving where the table gives them
 * (the run's published configuration): empty cells leave the header's
 * schedule and the searched chunk counts. */
static int row_sched(const char *path, int lineno, const char *sv,
                     const char *cv, vrow *r, util_err *e)
{
    r->sched = -1;
    r->chunks = 0;
    if (sv[0]) {
        int k = sim_sched_parse(sv);
        if (k < 0 || !sim_sched_plannable((sim_sched)k))
            return util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column 'schedule': "
                             "'%s' is not a schedule the planner searches "
                             "(sluice plan --help)", path, lineno, sv);
        r->sched = k;
    }
    if (cv[0]) {
        long x;
        if (util_parse_int(cv, 1, 64, &x))
            return util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column 'chunks': "
                             "'%s' is not a count of chunks per device (1 "
                             "to 64)", path, lineno, cv);
        r->chunks = (int)x;
    }
    return 0;
}

/* A row's model: a catalog model where the table has a 'model' column
 * (the header's vocab, seq and dtype override it where given), else a
 * GPT-3-style decoder from the row's heads, hidden and layers. */
static int row_spec(const vrow *r, const vhead *h, prof_model_spec *s,
                    util_err *e)
{
    memset(s, 0, sizeof *s);
    if (r->model[0]) {
        if (prof_model_spec_get(r->model, s, e)) return -1;
    } else {
        snprintf(s->name, sizeof s->name, "gpt-h%.0f-l%.0f", r->hidden, r->layers);
        s->family = PROF_FAM_GPT;
        s->hidden = (int)r->hidden;
        s->layers = (int)r->layers;
        s->heads = s->kv_heads = (int)r->heads;
        s->head_dim = s->hidden / s->heads;
        s->ffn = 4 * s->hidden;
        s->tied_embeddings = s->bias = s->dropout = 1;
        s->act = PROF_ACT_GELU;
    }
    if (!r->model[0] || h->set_vocab) s->vocab = h->vocab;
    if (!r->model[0] || h->set_seq) {
        s->seq_len = h->seq;
        if (s->max_pos) s->max_pos = h->seq;
        if (!r->model[0]) s->max_pos = h->seq;
    }
    if (h->set_flash) s->flash_attn = h->flash;
    if (h->set_fused_loss) s->fused_loss = h->fused_loss;
    if (!r->model[0] || h->set_dtype)
        prof_spec_set_math(s, h->math);
    return 0;
}

int plan_validate_file(const char *path, int json, FILE *out, util_err *e)
{
    char *text;
    size_t len;
    if (util_read_file(path, &text, &len, e)) return -1;
    if (strlen(text) < len) {
        int line = 1;
        for (const char *c = text; *c; c++) line += *c == '\n';
        free(text);
        return util_errf(e, UTIL_EXIT_USAGE, "%s:%d: a NUL byte: not a "
                         "text table", path, line);
    }
    vhead h = {.vocab = 51200, .seq = 2048, .recompute = 1, .zero = -1,
               .grad_bucket = SIM_GRAD_BUCKET_AUTO};
    snprintf(h.dtype, sizeof h.dtype, "fp16");
    util_err me;
    prof_math_parse("fp16", &h.math, &me);
    snprintf(h.sched, sizeof h.sched, "1f1b");
    /* the layout every row gives; the model's own sizes only where there
     * is no 'model' column */
    static const char *const need[] = {"tensor_parallel", "pipeline_parallel",
                                       "gpus", "batch", "heads", "hidden",
                                       "layers"};
    static const char *const knobs[] = {"recompute", "sequence_parallel",
                                        "microbatch", "zero"};
    int col[7], kc[4], mcol = -1, fcol = -1, pcol = -1, meas = -1, mk = -1;
    int scol = -1, ccol = -1, gcol = -1;
    int have_header = 0, ncols = 0;
    int nrows = 0, rc = 0;
    vrow rows[256];
    int lineno = 0;
    /* line by line, blank ones counted (errors name the file's lines) */
    for (char *l = text, *nl; l; l = nl) {
        nl = strchr(l, '\n');
        if (nl) *nl++ = 0;
        lineno++;
        l[strcspn(l, "\r")] = 0;
        if (!l[0]) continue;
        if (l[0] == '#') {
            char why[200];
            if (!strncmp(l, "# sluice:", 9) &&
                directive(l, &h, why, sizeof why)) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: '# sluice:' line: "
                               "%s", path, lineno, why);
                goto out;
            }
            util_err ue;
            if (!strncmp(l, "# sluice:", 9) &&
                util_utf8_check("gpu=", h.gpu, &ue)) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: '# sluice:' line: "
                               "gpu= is not UTF-8 text (no GPU profile is "
                               "named so)", path, lineno);
                goto out;
            }
            /* an unknown GPU is the line's, not every row's --hw (a
             * server file is read per row) */
            prof_gpu g;
            if (!strncmp(l, "# sluice:", 9) && h.gpu[0] &&
                !prof_hw_is_file(h.gpu) && prof_gpu_get(h.gpu, &g, &ue)) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: '# sluice:' line: "
                               "gpu=: %s", path, lineno, ue.msg);
                goto out;
            }
            continue;
        }
        char buf[1024], *cells[32];
        if (strlen(l) >= sizeof buf) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: a line of %zu "
                           "characters (at most %zu)", path, lineno,
                           strlen(l), sizeof buf - 1);
            goto out;
        }
        snprintf(buf, sizeof buf, "%s", l);
        int n = 0;
        /* every cell, empty ones too (a row may leave an optional cell
         * blank before one it gives) */
        for (char *c = buf; c;) {
            if (n == 32) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: more than 32 "
                               "columns", path, lineno);
                goto out;
            }
            cells[n++] = c;
            c = strchr(c, ',');
            if (c) *c++ = 0;
        }
        /* a line of commas only (a spreadsheet's empty row) is blank */
        int any = 0;
        for (int k = 0; k < n; k++) any |= cells[k][0] != 0;
        if (!any) continue;
        if (!have_header) {
            mcol = col_of(cells, n, "model");
            fcol = col_of(cells, n, "finetune");
            pcol = col_of(cells, n, "peak_mem_gib");
            scol = col_of(cells, n, "schedule");
            ccol = col_of(cells, n, "chunks");
            gcol = col_of(cells, n, "grad_bucket");
            for (int k = 0; k < 7; k++) {
                col[k] = col_of(cells, n, need[k]);
                if (col[k] < 0 && (k < 4 || mcol < 0)) {
                    rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: the header has no "
                                   "column '%s'%s", path, lineno, need[k],
                                   k < 4 ? "" : " (nor 'model')");
                    goto out;
                }
            }
            for (int k = 0; k < M_COUNT && mk < 0; k++)
                if ((meas = col_of(cells, n, meas_cols[k])) >= 0) mk = k;
            if (mk < 0) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: the header has no "
                               "measurement column (tflops_per_gpu, iteration_s "
                               "or tokens_per_s_per_gpu)", path, lineno);
                goto out;
            }
            for (int k = 0; k < 4; k++) kc[k] = col_of(cells, n, knobs[k]);
            have_header = 1;
            ncols = n;
            continue;
        }
        /* a row's cells shifted by a stray comma would be read as other
         * columns' */
        if (n != ncols) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: %d cells where the "
                           "header names %d columns", path, lineno, n, ncols);
            goto out;
        }
        if (nrows == 256) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: more than 256 rows",
                           path, lineno);
            goto out;
        }
        vrow *r = &rows[nrows];
        memset(r, 0, sizeof *r);
        r->line = lineno;
        double *dst[7] = {&r->tp, &r->pp, &r->gpus, &r->batch, &r->heads,
                          &r->hidden, &r->layers};
        if (mcol >= 0) {
            if (mcol >= n || !cells[mcol][0]) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column 'model': "
                               "empty", path, lineno);
                goto out;
            }
            snprintf(r->model, sizeof r->model, "%s", cells[mcol]);
            util_err ue;
            if (util_utf8_check("column 'model'", r->model, &ue)) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column 'model': "
                               "not UTF-8 text (no model is named so)", path,
                               lineno);
                goto out;
            }
        }
        for (int k = 0; k < 8; k++) {
            int c = k < 7 ? col[k] : meas;
            const char *name = k < 7 ? need[k] : meas_cols[mk];
            double *d = k < 7 ? dst[k] : &r->measured;
            if (k >= 4 && k < 7 && mcol >= 0) continue;
            if (c >= n || util_parse_double(cells[c], d) || !(*d > 0)) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column '%s': expected "
                               "a positive number", path, lineno, name);
                goto out;
            }
            /* layout and shape: counts */
            if (k < 7 && (*d != floor(*d) || *d > 1e9)) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column '%s': '%s' "
                               "is not a whole number from 1 to 1000000000",
                               path, lineno, name, cells[c]);
                goto out;
            }
        }
        if (fmod(r->gpus, r->tp * r->pp) != 0) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column 'gpus': %.0f is "
                           "not a multiple of tensor_parallel x pipeline_parallel "
                           "(%.0f)", path, lineno, r->gpus, r->tp * r->pp);
            goto out;
        }
        if (row_knobs(path, lineno, cells, n, kc, r, e)) {
            rc = -1;
            goto out;
        }
        r->grad_bucket = -2;
        if (gcol >= 0 && cells[gcol][0] &&
            sim_grad_bucket_parse(cells[gcol], &r->grad_bucket)) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column 'grad_bucket': "
                           "'%s' is not " SIM_GRAD_BUCKET_TAKES, path, lineno,
                           cells[gcol]);
            goto out;
        }
        if (r->sp == 1 && r->tp < 2) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column "
                           "'sequence_parallel': 1 needs tensor_parallel "
                           "above 1 (it splits the tensor-parallel group's "
                           "activations)", path, lineno);
            goto out;
        }
        if (row_sched(path, lineno, scol < n && scol >= 0 ? cells[scol] : "",
                      ccol < n && ccol >= 0 ? cells[ccol] : "", r, e)) {
            rc = -1;
            goto out;
        }
        if (pcol >= 0 && pcol < n && cells[pcol][0] &&
            (util_parse_double(cells[pcol], &r->mem_gib) ||
             !(r->mem_gib > 0))) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column 'peak_mem_gib': "
                           "expected a positive number", path, lineno);
            goto out;
        }
        /* fine-tuning: which parameters train (sluice plan --finetune) */
        if (fcol >= 0 && fcol < n && cells[fcol][0]) {
            util_err fe;
            if (prof_finetune_parse(cells[fcol], &r->ft, &fe)) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column 'finetune'"
                               ": %s", path, lineno, fe.msg);
                goto out;
            }
            r->has_ft = 1;
        }
        nrows++;
    }
    if (!h.gpu[0]) {
        rc = util_errf(e, UTIL_EXIT_USAGE, "%s: no '# sluice: gpu=NAME ...' line "
                       "says which GPU the table was measured on", path);
        goto out;
    }
    if (!have_header) {
        rc = util_errf(e, UTIL_EXIT_USAGE, "%s: no header line names the "
                       "columns (heads, hidden, layers, ..., and tflops_per_gpu, "
                       "iteration_s or tokens_per_s_per_gpu)", path);
        goto out;
    }
    int sk = sim_sched_parse(h.sched);
    unsigned mask = sk >= 0 ? 1u << sk : 0;
    if (!mask) {
        rc = util_errf(e, UTIL_EXIT_USAGE, "%s: schedule '%s' is not one sluice "
                       "simulates", path, h.sched);
        goto out;
    }
    for (int i = 0; i < nrows; i++) {
        const vrow *r = &rows[i];
        int rs = r->sched >= 0 ? r->sched : sk;
        if (r->chunks && (r->pp <= 1 || rs != SIM_SCHED_INTERLEAVED)) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column 'chunks': %d "
                           "chunks per device, but the row runs %s (chunks "
                           "are interleaved 1F1B's, on a pipeline)", path,
                           r->line, r->chunks,
                           r->pp <= 1 ? "no pipeline" : sim_sched_name(rs));
            goto out;
        }
    }
    json_t *jrows = json_array();
    util_table *tb = util_table_new(10);
    const char *hd[] = {"line", "model", "t", "p", "d", "GPUs", "knobs",
                        "measured", "predicted", "error"};
    for (int k = 0; k < 10; k++) util_table_col(tb, k, hd[k], k == 1 || k == 6 ? 'l' : 'r');
    double sum_abs = 0, worst = 0, mem_abs = 0, mem_worst = 0;
    int counted = 0, mem_counted = 0;
    util_table *mt = util_table_new(5);
    const char *mh[] = {"line", "model", "measured GiB", "predicted GiB",
                        "error"};
    for (int k = 0; k < 5; k++) util_table_col(mt, k, mh[k], k == 1 ? 'l' : 'r');
    for (int i = 0; i < nrows; i++) {
        vrow *r = &rows[i];
        prof_model_spec s;
        util_err re;
        double pred = NAN, pmem = NAN;
        char why[160] = "", tag[48] = "", mname[32];
        int d = (int)(r->gpus / (r->tp * r->pp));
        int rcm = r->recompute >= 0 ? r->recompute : h.recompute;
        /* what the row says that names nothing real is the table's
         * error (exit 2), as its columns' are; a row no plan fits is a
         * finding, listed */
        const char *col = r->model[0] ? "model" : "hidden";
        prof_model *m = row_spec(r, &h, &s, &re) ? NULL : prof_model_build(&s, &re);
        if (m && r->has_ft && prof_model_finetune(m, &r->ft, &re)) {
            prof_model_free(m);
            m = NULL;
            col = "finetune";
        }
        snprintf(mname, sizeof mname, "%s", r->model[0] ? r->model : s.name);
        char cnt[16];
        snprintf(cnt, sizeof cnt, "x%.0f", r->gpus);
        char *args[] = {h.gpu, cnt};
        prof_topo *t = m ? prof_topo_from_args(2, args, NULL, &re) : NULL;
        if (m && !t) col = "gpus";
        int bad = !m || !t;
        if (m && t && r->mbs > 0 && fmod(r->batch, r->mbs)) {
            /* the row's own figures disagree; said in its columns' words,
             * not the planner's flags */
            snprintf(why, sizeof why, "batch %.0f cannot be split into "
                     "microbatches of %d", r->batch, r->mbs);
            bad = 1;
            col = NULL;
        } else if (m && t) {
            plan_opts o;
            plan_opts_init(&o);
            o.batch = (int)r->batch;
            o.tp = (int)r->tp;
            o.pp = (int)r->pp;
            o.dp = d;
            o.recompute = rcm;
            o.sp = r->sp >= 0 ? r->sp : h.sp;
            if (r->mbs > 0) o.mbs = r->mbs;
            int z = r->zero >= 0 ? r->zero : h.zero;
            if (z >= 0) o.zero = z;
            /* Without a pipeline the table's runs are plain gradient
             * accumulation with the data-parallel all-reduce after the
             * backward (Megatron-LM's no-pipelining path): 1F1B on one
             * stage, not a schedule that splits the model into chunks on
             * one GPU to overlap the all-reduce. */
            o.sched_mask = r->pp <= 1 ? 1u << SIM_SCHED_1F1B
                         : r->sched >= 0 ? 1u << r->sched : mask;
            o.chunks = r->chunks;
            o.grad_bucket = r->grad_bucket >= -1 ? r->grad_bucket
                                                 : h.grad_bucket;
            plan_result pr;
            int src = plan_search(m, t, s.name, cnt, &o, &pr, &re);
            if (src == 0 && pr.found) {
                const plan_alt *a = &pr.alt[pr.best];
                double S = s.seq_len, L = s.layers, H = s.hidden, V = s.vocab;
                int full = rcm == SIM_RC_FULL;
                double f = (full ? 96 : 72) * r->batch * S * L * H * H *
                           (1 + S / (6 * H) + V / ((full ? 16 : 12) * L * H));
                pred = mk == M_TFLOPS ? f / a->iteration_s / r->gpus / 1e12
                     : mk == M_ITER_S ? a->iteration_s
                     : r->batch * S / a->iteration_s / r->gpus;
                plan_knob_tag(&a->plan, tag, sizeof tag);
                if (r->pp > 1 && (int)a->plan.sched != sk) {
                    /* the row's own schedule */
                    size_t tl = strlen(tag);
                    snprintf(tag + tl, sizeof tag - tl, " %s",
                             sim_sched_name(a->plan.sched));
                }
                pmem = a->peak_bytes / 1073741824.0;
                if (r->has_ft && !prof_finetune_full(&r->ft)) {
                    /* the mode's kind ("lora", "qlora", "frozen") */
                    char fn[64];
                    prof_finetune_name(&r->ft, fn, sizeof fn);
                    fn[strcspn(fn, ":")] = 0;
                    size_t tl = strlen(tag);
                    snprintf(tag + tl, sizeof tag - tl, " %s", fn);
                }
            } else {
                snprintf(why, sizeof why, "%s", src ? re.msg : pr.advice);
                /* the row's own figures disagree (a microbatch that does
                 * not divide its batch, say) */
                if (src && re.code == UTIL_EXIT_USAGE) {
                    bad = 1;
                    col = NULL;
                }
            }
            plan_result_free(&pr);
        } else {
            snprintf(why, sizeof why, "%s", re.msg);
        }
        prof_topo_free(t);
        prof_model_free(m);
        if (bad) {
            char cw[32] = "";
            if (col) snprintf(cw, sizeof cw, "column '%s': ", col);
            rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: %s%s", path, r->line,
                           cw, why);
            json_decref(jrows);
            util_table_free(tb);
            util_table_free(mt);
            goto out;
        }
        char c[10][40];
        snprintf(c[0], 40, "%d", r->line);
        snprintf(c[1], 40, "%s", mname);
        snprintf(c[2], 40, "%.0f", r->tp);
        snprintf(c[3], 40, "%.0f", r->pp);
        snprintf(c[4], 40, "%d", d);
        snprintf(c[5], 40, "%.0f", r->gpus);
        snprintf(c[6], 40, "%s", tag[0] == ' ' ? tag + 1 : tag);
        snprintf(c[7], 40, "%.*f", mk == M_ITER_S ? 2 : 0, r->measured);
        json_t *jr = json_pack("{s:i,s:s,s:f,s:f,s:i,s:f,s:s,s:f}", "line", r->line,
                               "model", mname, "tp", r->tp, "pp", r->pp, "dp", d,
                               "gpus", r->gpus, "knobs", c[6], "measured", r->measured);
        if (!r->model[0]) {
            json_object_set_new(jr, "hidden", json_real(r->hidden));
            json_object_set_new(jr, "layers", json_real(r->layers));
        }
        if (isfinite(pred)) {
            /* positive: sluice predicts a faster run than was measured */
            double err = mk == M_ITER_S ? r->measured / pred - 1
                                        : (pred - r->measured) / r->measured;
            sum_abs += fabs(err);
            worst = fmax(worst, fabs(err));
            counted++;
            snprintf(c[8], 40, "%.*f", mk == M_ITER_S ? 2 : 1, pred);
            snprintf(c[9], 40, "%+.1f%%", 100 * err);
            json_object_set_new(jr, "predicted", json_real(pred));
            json_object_set_new(jr, "error", json_real(err));
        } else {
            snprintf(c[8], 40, "-");
            snprintf(c[9], 40, "-");
            json_object_set_new(jr, "predicted", json_null());
            json_object_set_new(jr, "reason", json_string(why));
        }
        if (r->mem_gib > 0 && isfinite(pmem)) {
            /* the worst GPU's peak, what the framework's counter shows */
            double err = (pmem - r->mem_gib) / r->mem_gib;
            mem_abs += fabs(err);
            mem_worst = fmax(mem_worst, fabs(err));
            mem_counted++;
            char m[5][40];
            snprintf(m[0], 40, "%d", r->line);
            snprintf(m[1], 40, "%s", mname);
            snprintf(m[2], 40, "%.2f", r->mem_gib);
            snprintf(m[3], 40, "%.2f", pmem);
            snprintf(m[4], 40, "%+.1f%%", 100 * err);
            const char *mc[5] = {m[0], m[1], m[2], m[3], m[4]};
            util_table_row(mt, mc);
            json_object_set_new(jr, "peak_mem_gib", json_real(r->mem_gib));
            json_object_set_new(jr, "predicted_peak_mem_gib", json_real(pmem));
        }
        const char *cells[10];
        for (int k = 0; k < 10; k++) cells[k] = c[k];
        util_table_row(tb, cells);
        json_array_append_new(jrows, jr);
        if (!isfinite(pred) && !json)
            fprintf(out, "  line %d not predicted: %s\n", r->line, why);
    }
    double mape = counted ? sum_abs / counted : NAN;
    if (json && util_utf8_check(path, path, e)) {
        json_decref(jrows);
        rc = -1;
    } else if (json) {
        json_t *j = json_pack("{s:s,s:s,s:s,s:o,s:i,s:f,s:f}", "file", path,
                              "measure", meas_cols[mk], "gpu", h.gpu, "rows", jrows,
                              "predicted", counted, "mape", counted ? mape : 0.0,
                              "max_abs_error", worst);
        util_json_print(j, out);
        json_decref(j);
    } else {
        json_decref(jrows);
        fprintf(out, "%s: %s, measured and predicted (%s, %s where there is a "
                "pipeline)\n", path, meas_units[mk], h.gpu, h.sched);
        util_table_print(tb, out, "  ");
        if (counted)
            fprintf(out, "  mean absolute error %.1f%% over %d rows; worst "
                    "%.1f%% (goal: mean under 5%%, no row over 10%%; positive: "
                    "sluice too fast)\n", 100 * mape, counted, 100 * worst);
        if (mem_counted) {
            fprintf(out, "%s: peak memory per GPU, measured and predicted\n",
                    path);
            util_table_print(mt, out, "  ");
            fprintf(out, "  mean absolute error %.1f%% over %d rows; worst "
                    "%.1f%% (positive: sluice predicts more)\n",
                    100 * mem_abs / mem_counted, mem_counted,
                    100 * mem_worst);
        }
    }
    util_table_free(tb);
    util_table_free(mt);
    if (!rc && !counted)
        rc = util_errf(e, UTIL_EXIT_FAIL, "%s: no row could be predicted", path);
out:
    free(text);
    return rc;
}
