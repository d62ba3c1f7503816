/* List scheduling for devices that hold several stages (Mixed-pipe, wave):
 * a quick simulation with estimated times (stage costs; a transfer takes
 * its route's latency plus bytes over the bottleneck bandwidth, unshared)
 * in which each device, whenever it can start something, picks the best
 * ready task under a policy: forwards first (deepest stage first) while
 * the stage is under its in-flight cap, else backwards (earliest
 * microbatch first), or backwards first. With caps p-i on a one-stage-per-
 * device chain, forwards-first is exactly 1F1B; with no caps, GPipe. What it executed is a feasible order, so the
 * order it emits cannot deadlock; the engine then times it exactly. */
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

int64_t sim_xfer_est_ns(const sim_costs *c, int s, int t)
{
    int ds = c->stage_device[s], dt = c->stage_device[t];
    if (ds == dt || !c->topo) return 0;
    const prof_topo *tp = c->topo;
    int n = 0;
    const int *rt = prof_topo_gpu_route(tp, c->dev_gpu[ds], c->dev_gpu[dt], &n);
    if (!rt || !n) return 0;
    double bw = prof_route_bw(tp, rt, n), lat = prof_route_latency_ns(tp, rt, n);
    double by = c->xfer_bytes[(size_t)s * c->n_stages + t];
    return (int64_t)(lat + (bw > 0 ? by / bw * 1e9 : 0));
}

enum { Q_F, Q_B, Q_W };

/* The list scheduler's state. */
typedef struct lst {
    const sim_costs *c;
    sim_policy pol;
    const int *cap;
    int S, G, split;
    int64_t *finF, *finB, *xf, *free_at;
    int *nf, *nb, *nw, *np, *nc, *prod, *cons, *dev_off, *dev_st;
} lst;

/* Rank of a task kind under the policy (lower goes first); W last. */
static int policy_rank(sim_policy pol, int q)
{
    if (q == Q_W) return 2;
    return pol == SIM_POL_FFIRST ? q != Q_F : q != Q_B;
}

/* Device d's choice: the task it would start earliest (ties broken by
 * the policy); *cs < 0 when it has none ready. */
static void device_choice(const lst *x, int d, int *cs_out, int *cq_out,
                          int64_t *ct_out)
{
    const sim_costs *c = x->c;
    const int S = x->S, G = x->G, split = x->split;
    int cs = -1, cq = -1;
    int64_t ct = 0, tau = -1;
    /* first pass: decision time = max(free, earliest ready) */
    for (int pass = 0; pass < 2; pass++) {
        for (int si = x->dev_off[d]; si < x->dev_off[d + 1]; si++) {
            int s = x->dev_st[si];
            for (int q = Q_F; q <= Q_W; q++) {
                int64_t r = -1;
                if (q == Q_F) {
                    int g = x->nf[s];
                    if (g >= G || x->nf[s] - (split ? x->nw[s] : x->nb[s]) >=
                                  x->cap[s])
                        continue;
                    r = 0;
                    for (int k = 0; k < x->np[s] && r >= 0; k++) {
                        int p = x->prod[s * S + k];
                        int64_t f = x->finF[(size_t)p * G + g];
                        if (f < 0) r = -1;
                        else if (f + x->xf[p * S + s] > r)
                            r = f + x->xf[p * S + s];
                    }
                } else if (q == Q_B) {
                    int g = x->nb[s];
                    if (g >= x->nf[s]) continue;
                    r = x->finF[(size_t)s * G + g];
                    if (r < 0) continue;
                    for (int k = 0; k < x->nc[s] && r >= 0; k++) {
                        int t = x->cons[s * S + k];
                        int64_t f = x->finB[(size_t)t * G + g];
                        if (f < 0) r = -1;
                        else if (f + x->xf[t * S + s] > r)
                            r = f + x->xf[t * S + s];
                    }
                } else {
                    if (!split) continue;
                    int g = x->nw[s];
                    if (g >= x->nb[s]) continue;
                    r = x->finB[(size_t)s * G + g];
                }
                if (r < 0) continue;
                if (r < x->free_at[d]) r = x->free_at[d];
                if (pass == 0) {
                    if (tau < 0 || r < tau) tau = r;
                    continue;
                }
                if (r > tau) continue;
                /* policy rank among tasks ready at tau */
                int better;
                if (cs < 0) better = 1;
                else {
                    int rq = policy_rank(x->pol, q);
                    int rc2 = policy_rank(x->pol, cq);
                    if (rq != rc2) better = rq < rc2;
                    else if (q == Q_F)   /* deepest stage first */
                        better = c->stage[s].model_stage !=
                                 c->stage[cs].model_stage
                               ? c->stage[s].model_stage >
                                 c->stage[cs].model_stage
                               : s > cs;
                    else                 /* earliest microbatch */
                        better = (q == Q_B ? x->nb[s] : x->nw[s]) <
                                 (q == Q_B ? x->nb[cs] : x->nw[cs]);
                }
                if (better) { cs = s; cq = q; ct = r; }
            }
        }
        if (tau < 0) break;
    }
    *cs_out = cs;
    *cq_out = cq;
    *ct_out = ct;
}

int sim_order_greedy(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                     sim_policy pol, const int *inflight_cap, util_err *e)
{
    /* the stages and devices of data-parallel rank 0 */
    const int S = ir->n_gen_stages ? ir->n_gen_stages : ir->n_stages;
    const int D = ir->n_gen_devices ? ir->n_gen_devices : ir->n_devices;
    const int NS = c->n_stages, M = ir->n_mb, G = M * ir->n_minibatches;
    const int split = o->split_bw;
    size_t SG = (size_t)S * G;
    int64_t *finF = util_malloc(sizeof(int64_t) * SG);
    int64_t *finB = util_malloc(sizeof(int64_t) * SG);
    int64_t *xf = util_malloc(sizeof(int64_t) * (size_t)S * S);
    int *nf = util_calloc((size_t)S, sizeof(int));
    int *nb = util_calloc((size_t)S, sizeof(int));
    int *nw = util_calloc((size_t)S, sizeof(int));
    int64_t *free_at = util_calloc((size_t)D, sizeof(int64_t));
    /* producers and consumers of each stage */
    int *np = util_calloc((size_t)S, sizeof(int));
    int *nc = util_calloc((size_t)S, sizeof(int));
    int *prod = util_malloc(sizeof(int) * (size_t)S * S);
    int *cons = util_malloc(sizeof(int) * (size_t)S * S);
    /* the stages of each device, so a decision scans only its own */
    int *dev_off = util_calloc((size_t)D + 1, sizeof(int));
    int *dev_st = util_malloc(sizeof(int) * (size_t)(S > 0 ? S : 1));
    for (int s = 0; s < S; s++)
        if (c->stage_device[s] >= 0 && c->stage_device[s] < D)
            dev_off[c->stage_device[s] + 1]++;
    for (int d = 0; d < D; d++) dev_off[d + 1] += dev_off[d];
    {
        int *fill = util_calloc((size_t)D, sizeof(int));
        for (int s = 0; s < S; s++) {
            int d = c->stage_device[s];
            if (d >= 0 && d < D) dev_st[dev_off[d] + fill[d]++] = s;
        }
        free(fill);
    }
    for (size_t i = 0; i < SG; i++) finF[i] = finB[i] = -1;
    for (int s = 0; s < S; s++)
        for (int t = 0; t < S; t++) {
            /* read only between stages that exchange something (forward
             * one way, gradients back): no route for the others */
            int talk = c->xfer_bytes[(size_t)s * NS + t] > 0 ||
                       c->xfer_bytes[(size_t)t * NS + s] > 0;
            xf[s * S + t] = talk ? sim_xfer_est_ns(c, s, t) : 0;
            if (t != s && c->xfer_bytes[(size_t)s * NS + t] > 0) {
                prod[t * S + np[t]++] = s;
                cons[s * S + nc[s]++] = t;
            }
        }
    lst x = {c, pol, inflight_cap, S, G, split, finF, finB, xf, free_at,
             nf, nb, nw, np, nc, prod, cons, dev_off, dev_st};
    /* Each device's choice is kept and recomputed only when what it
     * depends on changed: its own stages and clock, the forwards of the
     * stages feeding it, the backwards of the stages it feeds. */
    int *ch_s = util_malloc(sizeof(int) * (size_t)(D + 1));
    int *ch_q = util_malloc(sizeof(int) * (size_t)(D + 1));
    int64_t *ch_t = util_malloc(sizeof(int64_t) * (size_t)(D + 1));
    uint8_t *stale = util_malloc((size_t)D + 1);
    memset(stale, 1, (size_t)D + 1);
    long total = (long)S * G * (split ? 3 : 2), issued = 0;
    int rc = 0;
    while (issued < total) {
        int best_d = -1, best_s = -1, best_q = -1;
        int64_t best_t = 0;
        for (int d = 0; d < D; d++) {
            if (stale[d]) {
                device_choice(&x, d, &ch_s[d], &ch_q[d], &ch_t[d]);
                stale[d] = 0;
            }
            if (ch_s[d] < 0) continue;
            if (best_d < 0 || ch_t[d] < best_t) {
                best_d = d; best_s = ch_s[d]; best_q = ch_q[d]; best_t = ch_t[d];
            }
        }
        if (best_d < 0) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "schedule %s: no order "
                           "exists under the in-flight limits (stuck after "
                           "%ld of %ld tasks)", ir->schedule, issued, total);
            break;
        }
        int s = best_s;
        const sim_stage_cost *sc = &c->stage[s];
        int64_t fin;
        if (best_q == Q_F) {
            int g = nf[s]++;
            fin = best_t + sc->f_ns;
            finF[(size_t)s * G + g] = fin;
            sim_ir_compute(ir, SIM_F, s, g % M, g / M, 0);
        } else if (best_q == Q_B) {
            int g = nb[s]++;
            /* split, the halves as they run apart (bs_ns, ws_ns) */
            int64_t dur = (split ? sc->bs_ns : sc->b_ns + sc->w_ns) +
                          (o->recompute ? sc->r_ns : 0);
            fin = best_t + dur;
            finB[(size_t)s * G + g] = fin;
            if (o->recompute) sim_ir_compute(ir, SIM_RECOMP, s, g % M, g / M, 0);
            sim_ir_compute(ir, split ? SIM_B : SIM_BW, s, g % M, g / M, 0);
        } else {
            int g = nw[s]++;
            fin = best_t + sc->ws_ns;
            sim_ir_compute(ir, SIM_W, s, g % M, g / M, 0);
        }
        free_at[best_d] = fin;
        issued++;
        stale[best_d] = 1;
        if (best_q == Q_F)
            for (int k = 0; k < nc[s]; k++) {
                int dd = c->stage_device[cons[s * S + k]];
                if (dd >= 0 && dd < D) stale[dd] = 1;
            }
        else if (best_q == Q_B)
            for (int k = 0; k < np[s]; k++) {
                int dd = c->stage_device[prod[s * S + k]];
                if (dd >= 0 && dd < D) stale[dd] = 1;
            }
    }
    free(ch_s); free(ch_q); free(ch_t); free(stale);
    free(dev_off); free(dev_st);
    free(finF); free(finB); free(xf); free(nf); free(nb);
    free(nw); free(free_at); free(np); free(nc); free(prod); free(cons);
    return rc;
}

/* Sums a run up as best-of compares it: fits in memory, then time, then
 * the highest peak (the device that decides what fits), then the sum. */
typedef struct order_score {
    int oom;
    int64_t ns;
    double peak, total;
} order_score;

static int score_better(const order_score *a, const order_score *b)
{
    if (a->oom != b->oom) return a->oom < b->oom;
    if (a->ns != b->ns) return a->ns < b->ns;
    if (a->peak != b->peak) return a->peak < b->peak;
    return a->total < b->total;
}

/* Whether two compute orders are the same task for task (fields, not
 * bytes: padding may differ). */
static int same_order(const sim_task *a, const sim_task *b, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i].kind != b[i].kind || a[i].stage != b[i].stage ||
            a[i].mb != b[i].mb || a[i].minibatch != b[i].minibatch ||
            a[i].version != b[i].version)
            return 0;
    return 1;
}

int sim_order_best(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                   int n, sim_order_gen gen, util_err *e)
{
    sim_task *best = NULL, *cand = NULL;
    int n_best = 0, found = 0, rc = -1;
    order_score sb = {0};
    util_err first = {0}, ce;
    for (int k = 0; k < n; k++) {
        sim_ir *t = sim_schedule_new(o, c, &ce);
        if (!t) { *e = ce; break; }
        int ok = !gen(t, o, c, k, &ce);
        int nt = t->n_tasks;
        if (ok) {
            /* the compute order is the generator's tasks in id order */
            cand = util_realloc(cand, sizeof *cand * (size_t)(nt ? nt : 1));
            memcpy(cand, t->tasks, sizeof *cand * (size_t)nt);
        }
        /* a candidate equal to the best so far needs no second run */
        if (ok && found && nt == n_best && same_order(cand, best, nt)) {
            sim_ir_free(t);
            continue;
        }
        order_score sc = {0};
        if (ok && n > 1) ok = !sim_schedule_finish(t, c, &ce);
        if (ok && n > 1) {
            sim_engine *en = sim_engine_new(t, c, NULL);
            sim_result r;
            ok = !sim_engine_run(en, &r);
            if (!ok)
                util_errf(&ce, sim_result_code(&r),
                          "%s", r.msg);
            sc.oom = r.oom;
            sc.ns = r.iteration_ns;
            for (int d = 0; ok && d < r.n_devices; d++) {
                if (r.dev[d].peak_bytes > sc.peak) sc.peak = r.dev[d].peak_bytes;
                sc.total += r.dev[d].peak_bytes;
            }
            sim_engine_free(en);
        }
        sim_ir_free(t);
        if (!ok) {
            if (!first.msg[0]) first = ce;
            continue;
        }
        if (!found || score_better(&sc, &sb)) {
            sim_task *sw = best;
            best = cand;
            cand = sw;
            n_best = nt;
            sb = sc;
            found = 1;
        }
    }
    if (found) {
        for (int i = 0; i < n_best; i++) sim_ir_add(ir, &best[i]);
        rc = 0;
    } else if (first.msg[0]) {
        *e = first;
    }
    free(best);
    free(cand);
    return rc;
}
