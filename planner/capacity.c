/* Capacity planning: the best plan for each GPU type and count in a sweep,
 * with throughput, memory headroom and cost per sample where the catalog
 * knows a rental price, so a person can decide what to buy or rent. */
#include <math.h>
#include <string.h>

#include "planner/planner.h"
#include "plots/plots.h"

#include <stdlib.h>

static int parse_counts(const char *s, int *out, int max, util_err *e)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    int n = 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        long v;
        if (util_parse_int(t, 1, 1 << 16, &v) || n == max)
            return util_errf(e, UTIL_EXIT_USAGE, "--gpus '%s': expected a "
                             "comma-separated list of up to %d positive "
                             "counts, e.g. 1,2,4,8", s, max);
        out[n++] = (int)v;
    }
    if (!n) return util_errf(e, UTIL_EXIT_USAGE, "--gpus needs counts, e.g. 1,2,4,8");
    return n;
}

int plan_capacity(int hw_n, char **hw, const prof_hw_opts *ho,
                  const char *model, const prof_finetune *ft,
                  const char *gpus, const plan_opts *po, int json,
                  const char *plot, util_err *e)
{
    if (hw_n != 1 || strchr(hw[0], '/') || strstr(hw[0], ".json"))
        return util_errf(e, UTIL_EXIT_USAGE, "--gpus sweeps GPU counts of "
                         "built-in types: give --hw GPU[,GPU...] without a "
                         "count, e.g. --hw rtx2080ti,rtx3090 --gpus 1,2,4,8");
    int counts[32];
    int nc = parse_counts(gpus, counts, 32, e);
    if (nc < 0) return -1;
    prof_model_spec spec;
    if (plan_model_spec(model, po, &spec, e)) return -1;
    prof_model *m = prof_model_build(&spec, e);
    if (!m) return -1;
    if (prof_model_finetune(m, ft, e)) {
        prof_model_free(m);
        return -1;
    }
    char types[256];
    snprintf(types, sizeof types, "%s", hw[0]);
    util_table *tb = util_table_new(9);
    const char *h[] = {"gpu", "GPUs", "plan", "samples/s", "per GPU",
                       "scaling", "headroom", "$/1k samples", "result"};
    for (int i = 0; i < 9; i++) util_table_col(tb, i, h[i], i == 0 || i == 2 || i == 8 ? 'l' : 'r');
    json_t *rows = json_array();
    int any = 0, rc = 0;
    /* Feasible points per GPU type, for the plot. */
    const char *snames[16];
    int spts[16] = {0}, nser = 0;
    double *sx[16], *sy[16];
    char *save = NULL;
    for (char *ty = strtok_r(types, ",", &save); ty && !rc;
         ty = strtok_r(NULL, ",", &save)) {
        double base = 0;
        if (nser < 16) {
            snames[nser] = ty;
            sx[nser] = util_calloc((size_t)nc, sizeof(double));
            sy[nser] = util_calloc((size_t)nc, sizeof(double));
            nser++;
        }
        for (int i = 0; i < nc; i++) {
            char nstr[16], hwname[96];
            snprintf(nstr, sizeof nstr, "x%d", counts[i]);
            snprintf(hwname, sizeof hwname, "%s x%d", ty, counts[i]);
            char *args[] = {ty, nstr};
            prof_topo *t = prof_topo_from_args(2, args, ho, e);
            if (!t) { rc = -1; break; }
            plan_opts o = *po;
            o.progress = 0;
            plan_result r;
            if (plan_search(m, t, model, hwname, &o, &r, e)) {
                prof_topo_free(t);
                rc = -1;
                break;
            }
            const prof_gpu *g = prof_topo_gpu(t, 0);
            char c1[16], pl[64] = "-", sps[32] = "-", per[32] = "-", sc[32] = "-",
                 hr[32] = "-", cost[32] = "-";
            snprintf(c1, sizeof c1, "%d", counts[i]);
            json_t *row = json_pack("{s:s,s:i,s:b}", "gpu", ty, "gpus", counts[i],
                                    "feasible", r.found);
            if (r.found) {
                any = 1;
                const plan_alt *a = &r.alt[r.best];
                char tag[16];
                snprintf(pl, sizeof pl, "%s p%d %dx%d%s", sim_sched_name(r.best),
                         a->plan.pp, a->plan.mbs, a->plan.n_mb,
                         plan_knob_tag(&a->plan, tag, sizeof tag));
                snprintf(sps, sizeof sps, "%.2f", a->samples_per_s);
                int si = nser - 1;
                sx[si][spts[si]] = counts[i];
                sy[si][spts[si]++] = a->samples_per_s;
                snprintf(per, sizeof per, "%.2f", a->samples_per_s / counts[i]);
                if (base == 0) base = a->samples_per_s / counts[i];
                snprintf(sc, sizeof sc, "%.0f%%",
                         100 * a->samples_per_s / counts[i] / base);
                double head = g->mem_bytes - r.reserve_bytes - a->peak_bytes;
                snprintf(hr, sizeof hr, "%.2f GiB", head / 1073741824.0);
                double usd = 0;
                if (g->price_per_hour > 0) {
                    usd = g->price_per_hour * counts[i] / 3600.0 /
                          a->samples_per_s * 1000;
                    snprintf(cost, sizeof cost, "%.3f", usd);
                }
                json_object_set_new(row, "schedule", json_string(sim_sched_name(r.best)));
                json_object_set_new(row, "pp", json_integer(a->plan.pp));
                json_object_set_new(row, "mbs", json_integer(a->plan.mbs));
                json_object_set_new(row, "microbatches", json_integer(a->plan.n_mb));
                json_object_set_new(row, "recompute",
                                    json_string(sim_recompute_name(a->plan.recompute)));
                json_object_set_new(row, "sequence_parallel", json_boolean(a->plan.sp));
                json_object_set_new(row, "samples_per_s", json_real(a->samples_per_s));
                json_object_set_new(row, "headroom_bytes", json_real(head));
                json_object_set_new(row, "usd_per_1k_samples",
                                    usd > 0 ? json_real(usd) : json_null());
            } else {
                json_object_set_new(row, "advice", json_string(r.advice));
            }
            const char *cells[] = {ty, c1, pl, sps, per, sc, hr, cost,
                                   r.found ? "fits" : "does not fit"};
            util_table_row(tb, cells);
            json_array_append_new(rows, row);
            plan_result_free(&r);
            prof_topo_free(t);
        }
    }
    if (rc == 0) {
        if (json) {
            json_t *j = json_pack("{s:s,s:o}", "model", m->spec.name, "sweep", rows);
            util_json_print(j, stdout);
            json_decref(j);
            rows = NULL;
        } else {
            printf("capacity plan for %s (best plan per GPU count; scaling = "
                   "throughput per GPU against the first row; $ from the "
                   "catalog's rental price)\n", m->spec.name);
            util_table_print(tb, stdout, "  ");
        }
        if (!any) rc = util_errf(e, UTIL_EXIT_FAIL, "%s fits none of these "
                                 "configurations", m->spec.name);
    }
    if (rc == 0 && plot) {
        /* Series with no feasible point are left out of the picture. */
        const char *pn[16];
        const double *px[16], *py[16];
        int pc[16], np = 0;
        for (int s = 0; s < nser; s++)
            if (spts[s]) {
                pn[np] = snames[s];
                px[np] = sx[s];
                py[np] = sy[s];
                pc[np++] = spts[s];
            }
        char title[160];
        snprintf(title, sizeof title, "%s: best plan per GPU count", m->spec.name);
        for (char *q = title; *q; q++)
            if (*q == '\'' || *q == '\\') *q = ' ';
        int prc = plot_capacity(plot, title, np, pn, pc, px, py, e);
        if (prc < 0) rc = -1;
        else if (prc > 0) fprintf(stderr, "sluice plan: %s\n", e->msg);
    }
    for (int s = 0; s < nser; s++) {
        free(sx[s]);
        free(sy[s]);
    }
    json_decref(rows);
    util_table_free(tb);
    prof_model_free(m);
    return rc;
}
