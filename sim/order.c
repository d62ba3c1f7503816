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

static int64_t xfer_ns(const sim_costs *c, int s, int t)
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
    int64_t *finW = util_malloc(sizeof(int64_t) * SG);
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
    for (size_t i = 0; i < SG; i++) finF[i] = finB[i] = finW[i] = -1;
    for (int s = 0; s < S; s++)
        for (int t = 0; t < S; t++) {
            xf[s * S + t] = xfer_ns(c, s, t);
            if (t != s && c->xfer_bytes[(size_t)s * NS + t] > 0) {
                prod[t * S + np[t]++] = s;
                cons[s * S + nc[s]++] = t;
            }
        }
    long total = (long)S * G * (split ? 3 : 2), issued = 0;
    int rc = 0;
    while (issued < total) {
        int best_d = -1, best_s = -1, best_q = -1;
        int64_t best_t = 0;
        for (int d = 0; d < D; d++) {
            /* candidates of device d: earliest ready time and policy rank */
            int cs = -1, cq = -1;
            int64_t ct = 0;
            int64_t tau = -1;
            /* first pass: decision time = max(free, earliest ready) */
            int64_t rdy[3];
            for (int pass = 0; pass < 2; pass++) {
                for (int si = dev_off[d]; si < dev_off[d + 1]; si++) {
                    int s = dev_st[si];
                    for (int q = Q_F; q <= Q_W; q++) {
                        int64_t r = -1;
                        if (q == Q_F) {
                            int g = nf[s];
                            if (g >= G || nf[s] - (split ? nw[s] : nb[s]) >=
                                          inflight_cap[s])
                                continue;
                            r = 0;
                            for (int k = 0; k < np[s] && r >= 0; k++) {
                                int p = prod[s * S + k];
                                int64_t f = finF[(size_t)p * G + g];
                                if (f < 0) r = -1;
                                else if (f + xf[p * S + s] > r)
                                    r = f + xf[p * S + s];
                            }
                        } else if (q == Q_B) {
                            int g = nb[s];
                            if (g >= nf[s]) continue;
                            r = finF[(size_t)s * G + g];
                            if (r < 0) continue;
                            for (int k = 0; k < nc[s] && r >= 0; k++) {
                                int t = cons[s * S + k];
                                int64_t f = finB[(size_t)t * G + g];
                                if (f < 0) r = -1;
                                else if (f + xf[t * S + s] > r)
                                    r = f + xf[t * S + s];
                            }
                        } else {
                            if (!split) continue;
                            int g = nw[s];
                            if (g >= nb[s]) continue;
                            r = finB[(size_t)s * G + g];
                        }
                        if (r < 0) continue;
                        if (r < free_at[d]) r = free_at[d];
                        rdy[q] = r;
                        if (pass == 0) {
                            if (tau < 0 || r < tau) tau = r;
                            continue;
                        }
                        if (r > tau) continue;
                        /* policy rank among tasks ready at tau */
                        int better;
                        if (cs < 0) better = 1;
                        else {
                            int pg = pol == SIM_POL_FFIRST;
                            int rq = pg
                                   ? (q == Q_F ? 0 : q == Q_B ? 1 : 2)
                                   : (q == Q_B ? 0 : q == Q_F ? 1 : 2);
                            int rc2 = pg
                                    ? (cq == Q_F ? 0 : cq == Q_B ? 1 : 2)
                                    : (cq == Q_B ? 0 : cq == Q_F ? 1 : 2);
                            if (rq != rc2) better = rq < rc2;
                            else if (q == Q_F)   /* deepest stage first */
                                better = c->stage[s].model_stage !=
                                         c->stage[cs].model_stage
                                       ? c->stage[s].model_stage >
                                         c->stage[cs].model_stage
                                       : s > cs;
                            else                 /* earliest microbatch */
                                better = (q == Q_B ? nb[s] : nw[s]) <
                                         (q == Q_B ? nb[cs] : nw[cs]);
                        }
                        if (better) { cs = s; cq = q; ct = r; }
                    }
                }
                if (tau < 0) break;
            }
            (void)rdy;
            if (cs < 0) continue;
            if (best_d < 0 || ct < best_t) {
                best_d = d; best_s = cs; best_q = cq; best_t = ct;
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
            int64_t dur = sc->b_ns + (split ? 0 : sc->w_ns) +
                          (o->recompute ? sc->f_ns : 0);
            fin = best_t + dur;
            finB[(size_t)s * G + g] = fin;
            if (o->recompute) sim_ir_compute(ir, SIM_RECOMP, s, g % M, g / M, 0);
            sim_ir_compute(ir, split ? SIM_B : SIM_BW, s, g % M, g / M, 0);
        } else {
            int g = nw[s]++;
            fin = best_t + sc->w_ns;
            finW[(size_t)s * G + g] = fin;
            sim_ir_compute(ir, SIM_W, s, g % M, g / M, 0);
        }
        free_at[best_d] = fin;
        issued++;
    }
    free(dev_off); free(dev_st);
    free(finF); free(finB); free(finW); free(xf); free(nf); free(nb);
    free(nw); free(free_at); free(np); free(nc); free(prod); free(cons);
    return rc;
}
