/* Predictions against published measurements: every row of a validation
 * table is planned with its own layout (tensor, pipeline and data parallel
 * widths) and batch fixed; the planner chooses the rest. Predicted TFLOP/s
 * per GPU count FLOPs the way the table does (Megatron-LM's closed form,
 * recomputation included where the table says so), so the two columns
 * compare like with like. One profile per GPU type serves every row. */
#include <math.h>
#include <string.h>

#include "planner/planner.h"

typedef struct vrow {
    int line;
    double heads, hidden, layers, tp, pp, gpus, batch, measured;
} vrow;

typedef struct vhead {
    char gpu[32], sched[32], dtype[8];
    int vocab, seq, recompute, sp;
} vhead;

static int directive(const char *line, vhead *h)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", line + strlen("# sluice:"));
    for (char *t = strtok(buf, " \t\r\n"); t; t = strtok(NULL, " \t\r\n")) {
        char *eq = strchr(t, '=');
        if (!eq) return -1;
        *eq = 0;
        const char *v = eq + 1;
        if (!strcmp(t, "gpu")) snprintf(h->gpu, sizeof h->gpu, "%s", v);
        else if (!strcmp(t, "schedule")) snprintf(h->sched, sizeof h->sched, "%s", v);
        else if (!strcmp(t, "dtype")) snprintf(h->dtype, sizeof h->dtype, "%s", v);
        else if (!strcmp(t, "vocab")) h->vocab = atoi(v);
        else if (!strcmp(t, "seq")) h->seq = atoi(v);
        else if (!strcmp(t, "recompute"))
            h->recompute = sim_recompute_parse(v) >= 0
                         ? sim_recompute_parse(v) : atoi(v) != 0;
        else if (!strcmp(t, "sp")) h->sp = atoi(v) != 0;
        else return -1;
    }
    return 0;
}

static int col_of(char **names, int n, const char *want)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], want)) return i;
    return -1;
}

int plan_validate_file(const char *path, int json, FILE *out, util_err *e)
{
    char *text;
    if (util_read_file(path, &text, NULL, e)) return -1;
    vhead h = {.vocab = 51200, .seq = 2048, .recompute = 1};
    snprintf(h.dtype, sizeof h.dtype, "fp16");
    snprintf(h.sched, sizeof h.sched, "1f1b");
    static const char *const need[] = {"heads", "hidden", "layers",
                                       "tensor_parallel", "pipeline_parallel",
                                       "gpus", "batch", "tflops_per_gpu"};
    int col[8], have_header = 0, nrows = 0, rc = 0;
    vrow rows[256];
    int lineno = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (l[0] == '#') {
            if (!strncmp(l, "# sluice:", 9) && directive(l, &h)) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: bad '# sluice:' line "
                               "(gpu=, schedule=, dtype=, vocab=, seq=, recompute=, sp=)",
                               path, lineno);
                goto out;
            }
            continue;
        }
        char buf[1024], *cells[32];
        snprintf(buf, sizeof buf, "%s", l);
        int n = 0;
        for (char *c = strtok(buf, ",\r"); c && n < 32; c = strtok(NULL, ",\r"))
            cells[n++] = c;
        if (!have_header) {
            for (int k = 0; k < 8; k++) {
                col[k] = col_of(cells, n, need[k]);
                if (col[k] < 0) {
                    rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: the header has no "
                                   "column '%s'", path, lineno, need[k]);
                    goto out;
                }
            }
            have_header = 1;
            continue;
        }
        if (nrows == 256) break;
        vrow *r = &rows[nrows];
        r->line = lineno;
        double *dst[8] = {&r->heads, &r->hidden, &r->layers, &r->tp, &r->pp,
                          &r->gpus, &r->batch, &r->measured};
        for (int k = 0; k < 8; k++) {
            if (col[k] >= n || util_parse_double(cells[col[k]], dst[k]) ||
                *dst[k] <= 0) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: column '%s': expected "
                               "a positive number", path, lineno, need[k]);
                goto out;
            }
        }
        nrows++;
    }
    if (!h.gpu[0]) {
        rc = util_errf(e, UTIL_EXIT_USAGE, "%s: no '# sluice: gpu=NAME ...' line "
                       "says which GPU the table was measured on", path);
        goto out;
    }
    int sk = sim_sched_parse(h.sched);
    unsigned mask = sk >= 0 ? 1u << sk : 0;
    if (!mask) {
        rc = util_errf(e, UTIL_EXIT_USAGE, "%s: schedule '%s' is not one sluice "
                       "simulates", path, h.sched);
        goto out;
    }
    json_t *jrows = json_array();
    util_table *tb = util_table_new(10);
    const char *hd[] = {"line", "hidden", "layers", "t", "p", "d", "GPUs", "measured",
                        "predicted", "error"};
    for (int k = 0; k < 10; k++) util_table_col(tb, k, hd[k], 'r');
    double sum_abs = 0, worst = 0;
    int counted = 0;
    for (int i = 0; i < nrows; i++) {
        vrow *r = &rows[i];
        prof_model_spec s;
        memset(&s, 0, sizeof s);
        snprintf(s.name, sizeof s.name, "gpt-h%.0f-l%.0f", r->hidden, r->layers);
        s.family = PROF_FAM_GPT;
        s.hidden = (int)r->hidden;
        s.layers = (int)r->layers;
        s.heads = s.kv_heads = (int)r->heads;
        s.head_dim = s.hidden / s.heads;
        s.ffn = 4 * s.hidden;
        s.vocab = h.vocab;
        s.seq_len = s.max_pos = h.seq;
        s.tied_embeddings = s.bias = s.dropout = 1;
        s.act = PROF_ACT_GELU;
        s.dtype = !strcmp(h.dtype, "bf16") ? PROF_DT_BF16 : PROF_DT_FP16;
        char cnt[16];
        snprintf(cnt, sizeof cnt, "x%.0f", r->gpus);
        char *args[] = {h.gpu, cnt};
        util_err re;
        prof_model *m = prof_model_build(&s, &re);
        prof_topo *t = m ? prof_topo_from_args(2, args, NULL, &re) : NULL;
        double pred = NAN;
        char why[160] = "";
        int d = (int)(r->gpus / (r->tp * r->pp));
        if (m && t) {
            plan_opts o;
            plan_opts_init(&o);
            o.batch = (int)r->batch;
            o.tp = (int)r->tp;
            o.pp = (int)r->pp;
            o.dp = d;
            o.recompute = h.recompute;
            o.sp = h.sp;
            /* Without a pipeline the table's runs are plain gradient
             * accumulation with the data-parallel all-reduce after the
             * backward (Megatron-LM's no-pipelining path): 1F1B on one
             * stage, not a schedule that splits the model into chunks on
             * one GPU to overlap the all-reduce. */
            o.sched_mask = r->pp > 1 ? mask : 1u << SIM_SCHED_1F1B;
            plan_result pr;
            if (plan_search(m, t, s.name, cnt, &o, &pr, &re) == 0 && pr.found) {
                double S = s.seq_len, L = s.layers, H = s.hidden, V = s.vocab;
                double f = (h.recompute ? 96 : 72) * r->batch * S * L * H * H *
                           (1 + S / (6 * H) + V / ((h.recompute ? 16 : 12) * L * H));
                pred = f / pr.alt[pr.best].iteration_s / r->gpus / 1e12;
            } else {
                snprintf(why, sizeof why, "%s", pr.found ? re.msg : pr.advice);
            }
            plan_result_free(&pr);
        } else {
            snprintf(why, sizeof why, "%s", re.msg);
        }
        prof_topo_free(t);
        prof_model_free(m);
        char c[10][32];
        snprintf(c[0], 32, "%d", r->line);
        snprintf(c[1], 32, "%.0f", r->hidden);
        snprintf(c[2], 32, "%.0f", r->layers);
        snprintf(c[3], 32, "%.0f", r->tp);
        snprintf(c[4], 32, "%.0f", r->pp);
        snprintf(c[5], 32, "%d", d);
        snprintf(c[6], 32, "%.0f", r->gpus);
        snprintf(c[7], 32, "%.0f", r->measured);
        json_t *jr = json_pack("{s:i,s:f,s:f,s:f,s:f,s:i,s:f,s:f}", "line", r->line,
                               "hidden", r->hidden, "layers", r->layers, "tp", r->tp,
                               "pp", r->pp, "dp", d, "gpus", r->gpus,
                               "measured_tflops_per_gpu", r->measured);
        if (isfinite(pred)) {
            double err = (pred - r->measured) / r->measured;
            sum_abs += fabs(err);
            worst = fmax(worst, fabs(err));
            counted++;
            snprintf(c[8], 32, "%.1f", pred);
            snprintf(c[9], 32, "%+.1f%%", 100 * err);
            json_object_set_new(jr, "predicted_tflops_per_gpu", json_real(pred));
            json_object_set_new(jr, "error", json_real(err));
        } else {
            snprintf(c[8], 32, "-");
            snprintf(c[9], 32, "-");
            json_object_set_new(jr, "predicted_tflops_per_gpu", json_null());
            json_object_set_new(jr, "reason", json_string(why));
        }
        const char *cells[10];
        for (int k = 0; k < 10; k++) cells[k] = c[k];
        util_table_row(tb, cells);
        json_array_append_new(jrows, jr);
        if (!isfinite(pred) && !json)
            fprintf(out, "  line %d not predicted: %s\n", r->line, why);
    }
    double mape = counted ? sum_abs / counted : NAN;
    if (json) {
        json_t *j = json_pack("{s:s,s:o,s:i,s:f,s:f}", "file", path, "rows", jrows,
                              "predicted", counted, "mape", counted ? mape : 0.0,
                              "max_abs_error", worst);
        util_json_print(j, out);
        json_decref(j);
    } else {
        json_decref(jrows);
        fprintf(out, "%s: TFLOP/s per GPU, measured and predicted (%s, %s, "
                "recomputation %s)\n", path, h.gpu, h.sched, h.recompute ? "on" : "off");
        util_table_print(tb, out, "  ");
        if (counted)
            fprintf(out, "  mean absolute error %.1f%% over %d rows; worst "
                    "%.1f%% (goal: mean under 5%%, no row over 10%%)\n",
                    100 * mape, counted, 100 * worst);
    }
    util_table_free(tb);
    if (!counted)
        rc = util_errf(e, UTIL_EXIT_FAIL, "%s: no row could be predicted", path);
out:
    free(text);
    return rc;
}
