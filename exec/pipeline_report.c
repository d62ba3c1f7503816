/* What a pipeline run measured, beside what the simulator predicts for
 * the same plan and IR. The measured times go through the simulator's
 * own accounting (sim_stats_times), so compute, bubble and exposed
 * communication mean the same in both, and the JSON document has the
 * keys `sluice sim --json` has, plus the run's steps, spread and
 * overhead, and the prediction under "predicted". The measured trace is
 * written by the simulator's trace writer: same tasks, names and tracks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "plots/plots.h"
#include "sim/sim.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Median, least and most of n intervals (ns). */
static void spread(const int64_t *iv, int n, int64_t *med, int64_t *lo,
                   int64_t *hi)
{
    int64_t *s = util_malloc(sizeof *s * (size_t)(n + 1));
    memcpy(s, iv, sizeof *s * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_i64);
    /* of an even count, the middle two's mean (the larger one read as
     * the median of two steps) */
    *med = !n       ? 0
         : n % 2    ? s[n / 2]
                    : s[n / 2 - 1] + (s[n / 2] - s[n / 2 - 1]) / 2;
    *lo = n ? s[0] : 0;
    *hi = n ? s[n - 1] : 0;
    free(s);
}

/* A measured epoch as the engine's result: times relative to the epoch's
 * first start, the accounting, the memory measured. */
typedef struct meas {
    sim_result res;
    int64_t *start, *end, *fstart, *tp;
    sim_dev_stats *dev;
    int *inflight;
    sim_mem_point *mem;
    int64_t t0;                 /* the epoch's origin, ns since the run */
    int64_t iter_med, iter_min, iter_max;
    int first, last;            /* steps measured (1-based, global) */
    int n_iter;
    int warm_all;               /* --warm left no step: all are measured */
    int pieces;                 /* --save-every's pieces pooled (0: one run) */
    int pieces_cold;            /* ...each no longer than --warm: all their
                                 * steps pooled, warm-ups too */
    int shown;                  /* the step the device table breaks down
                                 * (1-based, global; 0: the async window) */
} meas;

static void meas_free(meas *m)
{
    free(m->start); free(m->end); free(m->fstart); free(m->tp);
    free(m->dev); free(m->inflight); free(m->mem);
}

/* Microbatches in flight per stage: F starts against backward ends. */
static void inflight(const sim_ir *ir, const int64_t *st, const int64_t *en,
                     int *out)
{
    int n = ir->n_tasks;
    typedef struct ev { int64_t t; int d; } ev;
    for (int s = 0; s < ir->n_stages; s++) {
        ev *v = util_malloc(sizeof *v * (size_t)(2 * n + 1));
        int k = 0, cur = 0, mx = 0;
        for (int i = 0; i < n; i++) {
            const sim_task *t = &ir->tasks[i];
            if (t->stage != s || t->stream != SIM_STREAM_COMPUTE ||
                st[i] < 0)
                continue;
            if (t->kind == SIM_F) v[k++] = (ev){st[i], 1};
            else if (t->kind == SIM_BW || t->kind == SIM_W)
                v[k++] = (ev){en[i], -1};
        }
        /* ends before starts at the same instant */
        for (int i = 1; i < k; i++)
            for (int j = i; j > 0 && (v[j].t < v[j - 1].t ||
                                      (v[j].t == v[j - 1].t &&
                                       v[j].d < v[j - 1].d)); j--) {
                ev x = v[j]; v[j] = v[j - 1]; v[j - 1] = x;
            }
        for (int i = 0; i < k; i++) {
            cur += v[i].d;
            if (cur > mx) mx = cur;
        }
        out[s] = mx;
        free(v);
    }
}

/* The epochs a run timed: a stopped one (Ctrl-C) the steps it finished
 * (an asynchronous run is one epoch, its minibatches counted apart). */
static int timed_epochs(const exec_pipe_result *r)
{
    return !r->async && r->steps_run < r->epochs ? r->steps_run : r->epochs;
}

/* A flushed run's epochs: where each began and ended (ns since the run
 * began), and each step's time, the first from its epoch's start, the
 * others end to end. */
static void epoch_times(const exec_pipe_result *r, int E, int64_t *begs,
                        int64_t *ends, int64_t *step_ns)
{
    for (int ep = 0; ep < E; ep++) {
        begs[ep] = INT64_MAX;
        ends[ep] = 0;
        for (int id = 0; id < r->n_tasks; id++) {
            const int64_t *t = exec_pipe_times(r, ep, id);
            if (t[0] < 0) continue;
            if (t[0] < begs[ep]) begs[ep] = t[0];
            if (t[1] > ends[ep]) ends[ep] = t[1];
        }
        step_ns[ep] = ep ? ends[ep] - ends[ep - 1] : ends[0] - begs[0];
    }
}

/* before: the earlier pieces of a run cut by --save-every, whose step
 * times are pooled with this one's (NULL: none) */
static void measure(const exec_pipe_result *r, int warm,
                    const exec_pieces *before, meas *m)
{
    const sim_ir *ir = r->ir;
    int n = r->n_tasks, E = timed_epochs(r), D = r->n_devices;
    memset(m, 0, sizeof *m);
    int64_t *ends = util_calloc((size_t)(E > 0 ? E : 1) + 1, sizeof *ends);
    int64_t *begs = util_calloc((size_t)(E > 0 ? E : 1) + 1, sizeof *begs);
    int64_t *iv = NULL;
    int pick = 0;
    if (!r->async) {
        int64_t *ns = util_malloc(sizeof *ns * (size_t)(E + 1));
        epoch_times(r, E, begs, ends, ns);
        /* the steps measured: each piece's past its warm-up (its workers
         * start anew; this run is the last piece), or, where no piece
         * has such, every step */
        int nb = before ? before->n_timed : 0;
        iv = util_malloc(sizeof *iv * (size_t)(nb + E + 1));
        int ni = 0, first = -1;
        for (int pass = 0; pass < 2 && !ni; pass++) {
            for (int k = 0; k < nb; k++)
                if (pass || before->pos[k] >= warm) {
                    if (first < 0) first = before->step[k];
                    iv[ni++] = before->step_ns[k];
                }
            for (int ep = 0; ep < E; ep++)
                if (pass || ep >= warm) {
                    if (first < 0) first = r->step_first + ep;
                    iv[ni++] = ns[ep];
                }
            m->warm_all = pass && warm > 0;
        }
        spread(iv, ni, &m->iter_med, &m->iter_min, &m->iter_max);
        m->n_iter = ni;
        m->first = first + 1;
        m->last = r->step_first + E;
        if (before && before->n > 0) {
            m->pieces = before->n + 1;
            m->pieces_cold = m->warm_all;
            m->warm_all = 0;
        }
        /* the epoch drawn and broken down: this run's nearest the median
         * of those measured (all of its, where none of its is) */
        int w0 = E > warm ? warm : 0;
        int64_t best = INT64_MAX;
        for (int ep = w0; ep < E; ep++) {
            int64_t dd = llabs(ns[ep] - m->iter_med);
            if (dd < best) {
                best = dd;
                pick = ep;
            }
        }
        free(ns);
        m->t0 = begs[pick];
        m->shown = r->step_first + pick + 1;
    } else {
        /* one epoch: minibatch k completes when its last task ends */
        int K = ir->n_minibatches;
        int64_t *done = util_calloc((size_t)K + 1, sizeof *done);
        for (int id = 0; id < n; id++) {
            const int64_t *t = exec_pipe_times(r, 0, id);
            int k = ir->tasks[id].minibatch;
            if (t[1] > done[k] && k >= 0 && k < K) done[k] = t[1];
        }
        int kmax = r->steps_run < K ? r->steps_run : K;
        int w0 = kmax > warm + 1 ? warm : 0;
        m->warm_all = warm > 0 && kmax <= warm + 1;
        if (w0 < 1) w0 = 1;
        int ne = 0;
        iv = util_malloc(sizeof *iv * (size_t)(K + 1));
        for (int k = w0; k < kmax; k++) iv[ne++] = done[k] - done[k - 1];
        spread(iv, ne, &m->iter_med, &m->iter_min, &m->iter_max);
        /* without a flush minibatches complete in bursts (two close
         * together, then a gap): the rate is the window's mean, as the
         * simulator's steady state is */
        if (ne) m->iter_med = (done[kmax - 1] - done[w0 - 1]) / ne;
        m->n_iter = ne;
        m->first = r->step_first + w0 + 1;
        m->last = r->step_first + kmax;
        free(done);
        m->t0 = INT64_MAX;
        for (int id = 0; id < n; id++)
            if (exec_pipe_times(r, 0, id)[0] >= 0 && exec_pipe_times(r, 0, id)[0] < m->t0)
                m->t0 = exec_pipe_times(r, 0, id)[0];
    }
    m->start = util_malloc(sizeof(int64_t) * (size_t)(n + 1));
    m->end = util_malloc(sizeof(int64_t) * (size_t)(n + 1));
    m->fstart = util_malloc(sizeof(int64_t) * (size_t)(n + 1));
    m->tp = util_malloc(sizeof(int64_t) * (size_t)(n + 1));
    int64_t mk = 0;
    for (int id = 0; id < n; id++) {
        const int64_t *t = exec_pipe_times(r, pick, id);
        int ran = t[0] >= 0;
        m->start[id] = ran ? t[0] - m->t0 : -1;
        m->end[id] = ran ? t[1] - m->t0 : -1;
        m->fstart[id] = ran && t[2] >= 0 ? t[2] - m->t0 : m->start[id];
        m->tp[id] = ran && t[3] > 0 ? t[3] : 0;
        if (m->end[id] > mk) mk = m->end[id];
    }
    m->dev = util_calloc((size_t)D + 1, sizeof *m->dev);
    m->inflight = util_calloc((size_t)ir->n_stages + 1, sizeof(int));
    sim_result *res = &m->res;
    res->ok = 1;
    res->n_devices = D;
    res->n_stages = ir->n_stages;
    res->makespan_ns = mk;
    sim_stats_times(ir, m->start, m->end, m->fstart, m->tp, res, m->dev);
    res->iteration_ns = m->iter_med;
    for (int d = 0; d < D; d++) {
        m->dev[d].peak_bytes = exec_pipe_peak(r, warm, d);
        m->dev[d].static_bytes = r->static_bytes[d];
        m->dev[d].capacity_bytes = r->budget_bytes[d];
        if (r->budget_bytes[d] > 0 && r->peak_bytes[d] > r->budget_bytes[d])
            res->oom = 1;
    }
    inflight(ir, m->start, m->end, m->inflight);
    res->dev = m->dev;
    res->max_inflight = m->inflight;
    res->max_versions = r->max_versions;
    res->oom_task = -1;
    res->start_ns = m->start;
    res->end_ns = m->end;
    res->flow_start_ns = m->fstart;
    /* memory curves inside the epoch */
    if (r->mem_off) {
        int tot = r->mem_off[D];
        m->mem = util_malloc(sizeof *m->mem * (size_t)(tot + 1));
        int k = 0;
        for (int d = 0; d < D; d++)
            for (int i = r->mem_off[d]; i < r->mem_off[d + 1]; i++) {
                int64_t t = r->mem_t[i] - m->t0;
                if (t < 0 || t > mk) continue;
                m->mem[k++] = (sim_mem_point){t, d, r->mem_b[i]};
            }
        res->mem = m->mem;
        res->n_mem = k;
    }
    free(ends);
    free(begs);
    free(iv);
}

double exec_pipe_iteration_s(const exec_pipe_result *r, int warm,
                             double *min_s, double *max_s)
{
    meas m;
    measure(r, warm >= 0 ? warm : 1, NULL, &m);
    if (min_s) *min_s = m.iter_min * 1e-9;
    if (max_s) *max_s = m.iter_max * 1e-9;
    double it = m.iter_med * 1e-9;
    meas_free(&m);
    return it;
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double exec_pipe_peak(const exec_pipe_result *r, int warm, int d)
{
    int E = timed_epochs(r);
    if (r->async || !r->step_peak_bytes || E < 1) return r->peak_bytes[d];
    int w0 = E > warm ? (warm > 0 ? warm : 0) : 0, n = 0;
    double *v = util_malloc(sizeof *v * (size_t)(E + 1));
    for (int ep = w0; ep < E; ep++)
        v[n++] = r->step_peak_bytes[(size_t)d * (size_t)r->epochs +
                                    (size_t)ep];
    qsort(v, (size_t)n, sizeof *v, dbl_cmp);
    /* a step that ran (of an even count, the upper of the middle two) */
    double p = v[n / 2];
    free(v);
    return p;
}

double exec_pipe_overhead(const exec_pipe_result *r, int warm)
{
    int E = timed_epochs(r), w0 = E > warm ? warm : 0, n = 0;
    double s = 0;
    for (int ep = w0; ep < E; ep++, n++) s += r->overhead[ep];
    return n ? s / n : 0;
}

static json_t *step_json(const exec_pipe_opts *o, int warmup, int g,
                         double loss, double norm)
{
    json_t *s = json_object();
    json_object_set_new(s, "step", json_integer(g + 1));
    json_object_set_new(s, "loss", json_real(loss));
    json_object_set_new(s, "lr", json_real(exec_lr_at(o->adamw.lr, warmup,
                                                      o->steps, g)));
    if (!isnan(norm)) json_object_set_new(s, "grad_norm", json_real(norm));
    return s;
}

/* every step run: the earlier pieces' (before), then this run's */
static json_t *steps_json(const exec_pipe_opts *o, const exec_pipe_result *r,
                          const exec_pieces *before, int warmup)
{
    json_t *a = json_array();
    for (int k = 0; before && k < before->n_steps; k++)
        json_array_append_new(a, step_json(o, warmup, before->step_first + k,
                                           before->loss[k],
                                           before->grad_norm[k]));
    for (int k = 0; k < r->steps_run; k++)
        json_array_append_new(a, step_json(o, warmup, r->step_first + k,
                                           r->loss[k], r->grad_norm[k]));
    return a;
}

void exec_pieces_add(exec_pieces *p, const exec_pipe_result *r)
{
    int E = timed_epochs(r), n = p->n_steps + r->steps_run;
    if (!p->n_steps) p->step_first = r->step_first;
    p->loss = util_realloc(p->loss, sizeof *p->loss * (size_t)(n + 1));
    p->grad_norm = util_realloc(p->grad_norm,
                                sizeof *p->grad_norm * (size_t)(n + 1));
    memcpy(p->loss + p->n_steps, r->loss, sizeof *p->loss *
           (size_t)r->steps_run);
    memcpy(p->grad_norm + p->n_steps, r->grad_norm, sizeof *p->grad_norm *
           (size_t)r->steps_run);
    p->n_steps = n;
    /* its timed steps: their times, and where each stands in the piece */
    int64_t *b = util_malloc(sizeof *b * (size_t)(E + 1)),
            *en = util_malloc(sizeof *en * (size_t)(E + 1));
    int t = p->n_timed + E;
    p->step_ns = util_realloc(p->step_ns, sizeof *p->step_ns * (size_t)(t + 1));
    p->step = util_realloc(p->step, sizeof *p->step * (size_t)(t + 1));
    p->pos = util_realloc(p->pos, sizeof *p->pos * (size_t)(t + 1));
    epoch_times(r, E, b, en, p->step_ns + p->n_timed);
    for (int ep = 0; ep < E; ep++) {
        p->step[p->n_timed + ep] = r->step_first + ep;
        p->pos[p->n_timed + ep] = ep;
    }
    p->n_timed = t;
    p->n++;
    free(b);
    free(en);
}

void exec_pieces_free(exec_pieces *p)
{
    free(p->loss);
    free(p->grad_norm);
    free(p->step_ns);
    free(p->step);
    free(p->pos);
    memset(p, 0, sizeof *p);
}

/* A rate, or 0 when nothing was timed. */
static double rate(double amount, double s)
{
    return s > 0 ? amount / s : 0;
}

/* The tiers' measured rates (issue 13): what the tier read to the device
 * and wrote back, and the CPU's AdamW; null without offload. */
static json_t *offload_json(const exec_pipe_result *r)
{
    if (r->offload.policy == EXEC_OFFLOAD_NONE) return json_null();
    return json_pack("{s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f}",
                     "policy", exec_offload_name(r->offload.policy),
                     "tier", exec_tier_name(r->offload.tier),
                     "io", r->ofl_note,
                     "read_bytes", r->ofl_read_bytes,
                     "read_bytes_per_s", rate(r->ofl_read_bytes,
                                              r->ofl_read_s),
                     "write_bytes", r->ofl_write_bytes,
                     "write_bytes_per_s", rate(r->ofl_write_bytes,
                                               r->ofl_write_s),
                     "adam_params", r->adam_params,
                     "adam_params_per_s", rate(r->adam_params, r->adam_s));
}

static void offload_lines(const exec_pipe_result *r, FILE *f)
{
    if (r->offload.policy == EXEC_OFFLOAD_NONE) return;
    char a[32], b[32], c[32], d[32];
    fprintf(f, "  offload %s, %s tier%s%s%s: read %s/s (%s), write %s/s (%s), "
            "CPU AdamW %.1f M params/s\n",
            exec_offload_name(r->offload.policy),
            exec_tier_name(r->offload.tier), r->ofl_note[0] ? " (" : "",
            r->ofl_note, r->ofl_note[0] ? ")" : "",
            util_fmt_bytes(rate(r->ofl_read_bytes, r->ofl_read_s), a,
                           sizeof a),
            util_fmt_bytes(r->ofl_read_bytes, b, sizeof b),
            util_fmt_bytes(rate(r->ofl_write_bytes, r->ofl_write_s), c,
                           sizeof c),
            util_fmt_bytes(r->ofl_write_bytes, d, sizeof d),
            rate(r->adam_params, r->adam_s) / 1e6);
    fprintf(f, "  (peak mem is the device's window; the simulated columns "
            "keep the states on the device)\n");
}

/* Where a device's run peaked above its median step (a step whose
 * messages landed while it held more): the step, and by how much. */
static void peak_lines(const exec_pipe_result *r, const meas *m, FILE *f)
{
    int said = 0;
    for (int d = 0; d < r->n_devices; d++) {
        double med = m->dev[d].peak_bytes, top = r->peak_bytes[d];
        if (!(top > 1.01 * med)) continue;
        int at = -1, E = timed_epochs(r);
        for (int ep = 0; r->step_peak_bytes && !r->async && ep < E && at < 0;
             ep++)
            if (r->step_peak_bytes[(size_t)d * (size_t)r->epochs +
                                   (size_t)ep] >= top)
                at = ep;
        if (!said++)
            fprintf(f, "  peak mem is the median step's, as the iteration "
                    "time is; the run peaked higher:\n");
        char a[32], b[32];
        util_fmt_bytes(top, a, sizeof a);
        util_fmt_bytes(top - med, b, sizeof b);
        if (at >= 0)
            fprintf(f, "    device %d: %s in step %d (%s more)\n", d, a,
                    r->step_first + at + 1, b);
        else
            fprintf(f, "    device %d: %s outside the steps (%s more)\n",
                    d, a, b);
    }
}

/* A plan of an offload schedule: per resource of the tiers (sim/sim.h's
 * SIM_OFL_*) the measured and simulated busy time and bytes in the
 * iteration, which bounds it in each, and host memory at its peak. */
typedef struct tiers_cmp {
    sim_offload_use mu, su;
    double bytes[SIM_OFL_RES_COUNT];    /* moved per step, measured */
    double host_sim;
    double host_counted;        /* the simulator's count over the run's own
                                 * task times; < 0: not every step's */
} tiers_cmp;

/* The host memory the simulator counts over the run's own task times,
 * its most over the steps timed (the first made cold: it makes the
 * gradients' buffers as it goes; the buffers are kept, so a step holds
 * the most any step before it needed). The host's peak follows the
 * timing (how many fetches from the drives are in flight at once, which
 * steps overlap), so this says whether the memory is the model's where
 * the timing is not the simulation's: the plan's drives or host faster
 * than this machine's. -1 where a step has any task that did not run (a
 * stopped run). */
double exec_pipe_host_counted(const exec_pipe_result *r)
{
    if (!r->times || r->epochs < 1 || !r->costs) return -1;
    int n = r->n_tasks;
    int64_t *st = util_malloc(sizeof *st * (size_t)(n + 1));
    int64_t *en = util_malloc(sizeof *en * (size_t)(n + 1));
    double most = -1, kept = 0;
    for (int ep = 0; ep < r->epochs; ep++) {
        int ran = 1;
        for (int id = 0; id < n && ran; id++) {
            const int64_t *tm = exec_pipe_times(r, ep, id);
            st[id] = tm[EXEC_T_START];
            en[id] = tm[EXEC_T_END];
            ran = st[id] >= 0 && en[id] >= 0;
        }
        if (!ran) {
            most = -1;
            break;
        }
        sim_result sr = {0};
        sr.start_ns = st;
        sr.end_ns = en;
        sim_tier_use tu;
        if (ep) sim_offload_tier_use(r->ir, &sr, r->costs, &tu);
        else sim_offload_tier_use_cold(r->ir, &sr, r->costs, &tu);
        double pk = tu.host_peak;
        if (ep && kept > tu.grad_most) pk += kept - tu.grad_most;
        kept = fmax(kept, tu.grad_most);
        most = fmax(most, pk);
        sim_tier_use_free(&tu);
    }
    free(st);
    free(en);
    return most;
}

static void tiers_compare(const exec_pipe_result *r, const meas *m,
                          const sim_result *pr, tiers_cmp *c)
{
    sim_offload_usage(r->ir, &m->res, &c->mu);
    sim_offload_usage(r->ir, pr, &c->su);
    sim_tier_use tu;
    sim_offload_tier_use(r->ir, pr, r->costs, &tu);
    c->host_sim = tu.host_peak;
    sim_tier_use_free(&tu);
    c->host_counted = exec_pipe_host_counted(r);
    /* the engine's bytes are the IR's: what moved is the run's count,
     * per rank (the simulator's are the first rank's) */
    double n = r->steps_run > 0 ? r->steps_run : 1;
    if (r->n_workers > 1) n *= r->n_workers;
    memset(c->bytes, 0, sizeof c->bytes);
    c->bytes[SIM_OFL_PCIE_IN] = r->tier_up_bytes / n;
    c->bytes[SIM_OFL_PCIE_OUT] = r->tier_down_bytes / n;
    c->bytes[SIM_OFL_NVME] = (r->ofl_read_bytes + r->ofl_write_bytes) / n;
    c->bytes[SIM_OFL_RING] = r->tier_ring_bytes / n;
}

static json_t *tiers_json(const exec_pipe_result *r, const meas *m,
                          const sim_result *pr)
{
    if (!r->tiers) return json_null();
    tiers_cmp c;
    tiers_compare(r, m, pr, &c);
    json_t *res = json_array();
    for (int k = 0; k < SIM_OFL_RES_COUNT; k++)
        json_array_append_new(res, json_pack(
            "{s:s, s:s, s:f, s:f, s:f, s:f}", "key", sim_offload_res_key(k),
            "resource", sim_offload_res_name(k, r->topo),
            "busy_s", c.mu.busy_ns[k] * 1e-9,
            "simulated_busy_s", c.su.busy_ns[k] * 1e-9,
            "bytes", c.bytes[k], "simulated_bytes", c.su.bytes[k]));
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:s, s:f, s:f, s:o, "
                     "s:f, s:f, s:f}",
                     "schedule", sim_sched_name(r->tier_sched),
                     "tier", sim_tier_name(r->tier),
                     "activations_tier", sim_tier_name(r->act_tier),
                     "io", r->ofl_note, "resources", res,
                     "bound_by", sim_offload_res_name(c.mu.bound, r->topo),
                     "simulated_bound_by", sim_offload_res_name(c.su.bound, r->topo),
                     "host_peak_bytes", r->tier_host_peak,
                     "simulated_host_peak_bytes", c.host_sim,
                     "counted_host_peak_bytes",
                     c.host_counted >= 0 ? json_real(c.host_counted)
                                         : json_null(),
                     "read_bytes_per_s", rate(r->ofl_read_bytes,
                                              r->ofl_read_s),
                     "write_bytes_per_s", rate(r->ofl_write_bytes,
                                               r->ofl_write_s),
                     "adam_params_per_s", rate(r->adam_params, r->adam_s));
}

/* Stage tiers: each such stage's step off the device (the first
 * replica's), measured against simulated. */
static void stier_lines(const exec_pipe_result *r, const meas *m,
                        const sim_result *pr, FILE *f)
{
    const sim_costs *c = r->costs;
    if (!c || !c->stage_tiers) return;
    fprintf(f, "\n  stage tiers: each step off the device, ms measured "
            "(simulated)\n");
    util_table *tb = util_table_new(7);
    const char *hd[] = {"stage", "tier", "gradient out", "CPU AdamW",
                        "drives", "weights in", "span"};
    for (int i = 0; i < 7; i++) util_table_col(tb, i, hd[i], i > 1 ? 'r' : 'l');
    for (int s = 0; s < c->n_model_stages; s++) {
        if (!c->stage[s].state_tier) continue;
        sim_tier_step ms, ss;
        sim_stage_tier_step(r->ir, &m->res, s, &ms);
        sim_stage_tier_step(r->ir, pr, s, &ss);
        double mv[5] = {ms.out_ns, ms.cpu_ns, ms.drives_ns, ms.in_ns,
                        ms.span_ns};
        double sv[5] = {ss.out_ns, ss.cpu_ns, ss.drives_ns, ss.in_ns,
                        ss.span_ns};
        char cells[7][40];
        snprintf(cells[0], 40, "%d", s);
        snprintf(cells[1], 40, "%s",
                 sim_state_tier_name(c->stage[s].state_tier));
        for (int k = 0; k < 5; k++)
            snprintf(cells[2 + k], 40, "%.2f (%.2f)", mv[k] / 1e6,
                     sv[k] / 1e6);
        const char *row[7];
        for (int i = 0; i < 7; i++) row[i] = cells[i];
        util_table_row(tb, row);
    }
    util_table_print(tb, f, "  ");
    util_table_free(tb);
    fprintf(f, "  span: from the gradient's copy out to the end of the "
            "last part; the parts overlap, and the drives read ahead, "
            "before it\n");
    double sim = 0, n = r->steps_run > 0 ? r->steps_run : 1;
    for (int id = 0; id < r->ir->n_tasks; id++)
        if (sim_kind_nvme(r->ir->tasks[id].kind))
            sim += r->ir->tasks[id].bytes;
    char a[32], b[32], x[32], y[32], z[32];
    if (sim > 0)
        fprintf(f, "  the drives: %s read and %s written a step, every "
                "stage's (simulated %s in all); read %s/s, write %s/s\n",
                util_fmt_bytes(r->ofl_read_bytes / n, a, sizeof a),
                util_fmt_bytes(r->ofl_write_bytes / n, b, sizeof b),
                util_fmt_bytes(sim, z, sizeof z),
                util_fmt_bytes(rate(r->ofl_read_bytes, r->ofl_read_s), x,
                               sizeof x),
                util_fmt_bytes(rate(r->ofl_write_bytes, r->ofl_write_s), y,
                               sizeof y));
    fprintf(f, "  the CPU's AdamW: %.1f M params/s\n",
            rate(r->adam_params, r->adam_s) / 1e6);
}

static void tiers_lines(const exec_pipe_result *r, const meas *m,
                        const sim_result *pr, FILE *f)
{
    if (!r->tiers) return;
    tiers_cmp c;
    tiers_compare(r, m, pr, &c);
    fprintf(f, "\n  tiers of %s: states in %s, swapped activations in %s%s%s"
            "%s\n", sim_sched_name(r->tier_sched), sim_tier_name(r->tier),
            sim_tier_name(r->act_tier), r->ofl_note[0] ? " (file: " : "",
            r->ofl_note, r->ofl_note[0] ? ")" : "");
    util_table *tb = util_table_new(5);
    const char *hd[] = {"resource", "busy", "sim busy", "bytes",
                        "sim bytes"};
    for (int i = 0; i < 5; i++) util_table_col(tb, i, hd[i], i ? 'r' : 'l');
    double it = (double)m->iter_med, ps = (double)pr->iteration_ns;
    for (int k = 0; k < SIM_OFL_RES_COUNT; k++) {
        char cells[5][32];
        snprintf(cells[0], 32, "%s", sim_offload_res_name(k, r->topo));
        snprintf(cells[1], 32, "%.0f%%", it > 0 ? 100 * c.mu.busy_ns[k] / it
                                                : 0);
        snprintf(cells[2], 32, "%.0f%%", ps > 0 ? 100 * c.su.busy_ns[k] / ps
                                                : 0);
        if (k == SIM_OFL_GPU || k == SIM_OFL_CPU) {
            snprintf(cells[3], 32, "-");
            snprintf(cells[4], 32, "-");
        } else {
            util_fmt_bytes(c.bytes[k], cells[3], 32);
            util_fmt_bytes(c.su.bytes[k], cells[4], 32);
        }
        const char *row[5];
        for (int i = 0; i < 5; i++) row[i] = cells[i];
        util_table_row(tb, row);
    }
    util_table_print(tb, f, "  ");
    util_table_free(tb);
    char a[32], b[32], x[32], y[32], z[48] = "";
    if (c.host_counted >= 0) {
        char t[32];
        snprintf(z, sizeof z, "; %s over this run's task times",
                 util_fmt_bytes(c.host_counted, t, sizeof t));
    }
    fprintf(f, "  bound by %s (simulated: %s); host memory at most %s "
            "(simulated %s%s)\n", sim_offload_res_name(c.mu.bound, r->topo),
            sim_offload_res_name(c.su.bound, r->topo),
            util_fmt_bytes(r->tier_host_peak, a, sizeof a),
            util_fmt_bytes(c.host_sim, b, sizeof b), z);
    fprintf(f, "  drive read %s/s, write %s/s; CPU AdamW %.1f M params/s; "
            "bytes are per iteration%s, busy its share of it%s\n",
            util_fmt_bytes(rate(r->ofl_read_bytes, r->ofl_read_s), x,
                           sizeof x),
            util_fmt_bytes(rate(r->ofl_write_bytes, r->ofl_write_s), y,
                           sizeof y),
            rate(r->adam_params, r->adam_s) / 1e6,
            r->n_workers > 1 ? " and rank" : "",
            r->n_workers > 1 ? " (the first rank's); host memory: every "
                               "rank's" : "");
}

/* `sluice sim`'s answer for a plan this executor runs another way than
 * the simulator prices it (exec_pipe_run's cost options: ZeRO-2 and 3
 * with each stage's weights gathered whole and each microbatch's whole
 * gradient reduced, where `sluice sim` prices FSDP's layer at a time;
 * sequence parallelism's weight-gradient collectives exposed, where it
 * prices Megatron-LM's overlap): its iteration time and each device's
 * peak (n_devices of them, to free), or NULL where the run's prediction
 * is `sluice sim`'s, or it cannot be had. *why: what differs. */
static double *plan_sim(const sim_plan *p, const exec_pipe_result *r,
                        double *iter_s, const char **why)
{
    /* an FSDP plan's stage is 3 whatever its "zero" says (cmd_exec's
     * note, the run's costs) */
    int zs = sim_zero_stage(p->zero, p->fsdp);
    int z = zs >= 2, sp = p->sp && p->tp > 1;
    if (!z && !sp) return NULL;
    *why = z && sp ? "sharded and sequence parallel"
         : z ? (zs >= 3 ? "ZeRO-3" : "ZeRO-2") : "sequence parallel";
    sim_cost_opts co = sim_plan_cost_opts(p);
    util_err e = {0};
    /* the model as `sluice sim` builds it (the plan's precision, the
     * spec's dropout), not the run's (fp32, no dropout: r->model) */
    prof_model *m = sim_plan_model(p, r->topo, &e);
    if (!m) return NULL;
    sim_costs *c = sim_costs_build(m, r->topo, p->n_stages,
                                   p->first_op, p->last_op, p->stage_device,
                                   p->pp, &co, &e);
    if (!c) {
        prof_model_free(m);
        return NULL;
    }
    sim_sched_opts so = sim_plan_sched_opts(p);
    sim_ir *ir = !p->sched_file[0] ? sim_schedule(&so, c, &e)
               : sim_sched_check(&so, &e) ? NULL
               : sim_schedule_file(p->sched_file, &so, c, &e);
    double *pk = NULL;
    if (ir) {
        sim_run_opts ro = {0};
        sim_engine *en = sim_engine_new(ir, c, &ro);
        sim_result res;
        if (!sim_engine_run(en, &res) && res.n_devices == r->n_devices) {
            pk = util_malloc(sizeof(double) * (size_t)(r->n_devices + 1));
            for (int d = 0; d < r->n_devices; d++)
                pk[d] = res.dev[d].peak_bytes;
            *iter_s = res.iteration_ns * 1e-9;
        }
        sim_engine_free(en);
        sim_ir_free(ir);
    }
    sim_costs_free(c);
    prof_model_free(m);
    return pk;
}

int exec_pipe_report(const exec_pipe_opts *o, const exec_pipe_result *r,
                     const exec_report_opts *ro, util_err *e)
{
    FILE *f = ro->out ? ro->out : stdout;
    const sim_plan *p = o->plan;
    int warm = ro->warm >= 0 ? ro->warm : 1;
    int warmup = o->warmup >= 0 ? o->warmup : o->steps / 10;
    if (warmup < 1) warmup = 1;
    meas m;
    measure(r, warm, ro->before, &m);
    /* the prediction: the simulator on the same IR and costs */
    sim_run_opts so = {.record = ro->trace || ro->plot};
    sim_engine *en = sim_engine_new(r->ir, r->costs, &so);
    sim_result pr;
    int rc = -1;
    if (sim_engine_run(en, &pr)) {
        util_errf(e, sim_result_code(&pr),
                  "simulating the plan: %s", pr.msg);
        goto out;
    }
    char tpath[1100] = "";
    int drawn = 0;
    if (ro->trace) {
        if (sim_trace_write(ro->trace, r->ir, &m.res, r->costs, e)) goto out;
        snprintf(tpath, sizeof tpath, "%s", ro->trace);
    }
    if (ro->plot) {
        char mt[1100], st[1100];
        snprintf(mt, sizeof mt, "%s-measured.json", ro->plot);
        snprintf(st, sizeof st, "%s-simulated.json", ro->plot);
        if ((!tpath[0] && sim_trace_write(mt, r->ir, &m.res, r->costs, e)) ||
            sim_trace_write(st, r->ir, &pr, r->costs, e))
            goto out;
        int prc = plot_compare(tpath[0] ? tpath : mt, st, ro->plot, e);
        if (prc < 0) goto out;
        if (prc > 0) fprintf(stderr, "sluice exec: %s\n", e->msg);
        drawn = prc == 0;
    }
    double ovh = exec_pipe_overhead(r, warm);
    if (ro->json) {
        json_t *j = sim_report_json(p, r->model, r->topo, r->costs, &m.res,
                                    r->ir);
        json_object_set_new(j, "measured", json_true());
        json_object_set_new(j, "plan_file", json_string(ro->plan_path
                                                            ? ro->plan_path
                                                            : ""));
        json_object_set_new(j, "transport", json_string(r->xport));
        json_object_set_new(j, "backend", json_string(r->backend));
        json_object_set_new(j, "tf32", json_boolean(r->tf32));
        json_object_set_new(j, "devices_are_cpu_cores", json_boolean(
                                prof_topo_gpu(r->topo, 0)->form ==
                                PROF_FORM_CPU));
        json_object_set_new(j, "workers", json_integer(r->n_workers));
        char ft[64];
        json_object_set_new(j, "finetune", json_string(
                                prof_finetune_name(&p->ft, ft, sizeof ft)));
        json_object_set_new(j, "iteration_time_min_s",
                            json_real(m.iter_min * 1e-9));
        json_object_set_new(j, "iteration_time_max_s",
                            json_real(m.iter_max * 1e-9));
        json_object_set_new(j, "measured_steps", json_pack("[i,i]", m.first,
                                                           m.last));
        json_object_set_new(j, "overhead_fraction", json_real(ovh));
        /* devices' peak_mem_bytes are the median step's; the run's: */
        json_t *rp = json_array();
        for (int d = 0; d < r->n_devices; d++)
            json_array_append_new(rp, json_real(r->peak_bytes[d]));
        json_object_set_new(j, "run_peak_mem_bytes", rp);
        json_object_set_new(j, "steps", steps_json(o, r, ro->before, warmup));
        json_object_set_new(j, "pieces", json_integer(m.pieces ? m.pieces
                                                                : 1));
        json_object_set_new(j, "stopped", json_boolean(r->stopped));
        json_object_set_new(j, "offload", offload_json(r));
        json_object_set_new(j, "tiers", tiers_json(r, &m, &pr));
        json_object_set_new(j, "predicted", sim_report_json(
                                                p, r->model, r->topo,
                                                r->costs, &pr, r->ir));
        /* "predicted" is the plan as this executor runs it; where that
         * is not how `sluice sim` prices it, sluice sim's figures too */
        double ps_plan = 0;
        const char *why = "";
        double *pk = plan_sim(p, r, &ps_plan, &why);
        if (pk) {
            json_t *a = json_array();
            for (int d = 0; d < r->n_devices; d++)
                json_array_append_new(a, json_real(pk[d]));
            json_object_set_new(j, "sluice_sim", json_pack(
                                    "{s:f,s:o,s:s}", "iteration_time_s",
                                    ps_plan, "peak_mem_bytes", a, "differs",
                                    why));
            free(pk);
        }
        if (util_json_print(j, f)) {
            json_decref(j);
            util_errf(e, UTIL_EXIT_FAIL, "writing the report failed");
            goto out;
        }
        json_decref(j);
        rc = 0;
        goto out;
    }
    double it = m.iter_med * 1e-9, ps = pr.iteration_ns * 1e-9;
    double samples = (double)r->B;
    char a[32], b[32], c[32], d[32];
    if (m.warm_all && ro->warm > 0)
        fprintf(f, "\nnote: --warm %d leaves none of the %d steps run: "
                "%s\n", warm, r->steps_run,
                r->async ? "all but the first are measured (a minibatch's "
                           "time runs from the one before's end)"
                         : "all are measured, the first with its warm-up");
    char pcs[160] = "";
    if (m.pieces)
    {
        char lo[64] = "";
        if (m.pieces_cold)
            snprintf(lo, sizeof lo, " no longer than --warm: every step, "
                     "warm-ups too");
        else if (warm == 1)
            snprintf(lo, sizeof lo, ", each leaving out its first step");
        else if (warm > 1)
            snprintf(lo, sizeof lo, ", each leaving out its first %d steps",
                     warm);
        snprintf(pcs, sizeof pcs, " in %d --save-every pieces%s", m.pieces,
                 lo);
    }
    fprintf(f, "\nmeasured over steps %d-%d (%d%s, %s; min-max), %s, %d "
            "worker%s on the %s backend%s:\n", m.first, m.last, m.n_iter,
            pcs, r->async ? "mean" : "median", r->xport, r->n_workers,
            r->n_workers == 1 ? "" : "s", r->backend,
            !r->tf32 ? ""
            : prof_gpu_math(prof_topo_gpu(r->topo, 0), PROF_DT_TF32) ==
                      PROF_DT_TF32
                ? " (products in TF32)"
                : " (TF32 asked; the plan's GPU has none: fp32)");
    /* a step or two on a shared machine says little; an asynchronous
     * plan's minibatches overlap, so few of them say less */
    if ((m.n_iter < 3 || m.pieces_cold) && m.pieces)
        fprintf(f, "  (few steps measured: a step's time moves from run to "
                "run; a --save-every of %d or more measures more of each "
                "piece)\n", warm + 3);
    else if (m.n_iter < (r->async ? 5 : 3))
        fprintf(f, "  (few steps measured%s: a step's time moves from run "
                "to run; give --steps %d or more to compare with the "
                "simulation)\n", r->async ? " of overlapping minibatches" : "",
                /* the next run leaves out its warm steps (an
                 * asynchronous one at least the first) */
                r->step_first + (r->async ? (warm > 1 ? warm : 1) + 5
                                          : warm + 3));
    sim_report_figures(r->topo, "  simulated from   ", f);
    fprintf(f, "  iteration time   %10s  (%s-%s)   simulated %s, measured/"
            "simulated %.3f\n", util_fmt_time(it, a, sizeof a),
            util_fmt_time(m.iter_min * 1e-9, b, sizeof b),
            util_fmt_time(m.iter_max * 1e-9, c, sizeof c),
            util_fmt_time(ps, d, sizeof d), ps > 0 ? it / ps : 0);
    fprintf(f, "  samples/s        %10.2f   simulated %.2f\n",
            it > 0 ? samples / it : 0, ps > 0 ? samples / ps : 0);
    fprintf(f, "  tokens/s         %10.0f\n",
            it > 0 ? samples * r->T / it : 0);
    fprintf(f, "  runtime overhead %9.2f%%   of a step (a worker's time not "
            "in kernels, copies or waits)\n", 100 * ovh);
    /* how the data-parallel all-reduce ran, which --grad-bucket sets */
    const sim_costs *co = r->costs;
    if (co && sim_costs_allreduce(co))
        fprintf(f, "  all-reduce       %s\n", co->bkt_off
                ? "in gradient buckets, each as the backward computed it"
                : "once a stage, after its backward");
    if (prof_topo_gpu(r->topo, 0)->form != PROF_FORM_CPU &&
        !strcmp(r->backend, "cpu"))
        fprintf(f, "  note: the plan is for %s; the run was on this machine's "
                "cores, so the simulated figures are for other hardware\n",
                r->topo->name);
    util_table *tb = util_table_new(9);
    const char *hd[] = {"dev", "compute ms", "comm ms", "bubble ms",
                        "optim ms", "peak mem", "sim compute", "sim bubble",
                        "sim peak"};
    for (int i = 0; i < 9; i++) util_table_col(tb, i, hd[i], i ? 'r' : 'l');
    for (int d = 0; d < r->n_devices; d++) {
        const sim_dev_stats *x = &m.dev[d], *y = &pr.dev[d];
        char cells[9][32];
        snprintf(cells[0], 32, "%d", d);
        snprintf(cells[1], 32, "%.2f", (x->compute_ns + x->recompute_ns) / 1e6);
        snprintf(cells[2], 32, "%.2f", x->comm_exposed_ns / 1e6);
        snprintf(cells[3], 32, "%.2f", x->bubble_ns / 1e6);
        snprintf(cells[4], 32, "%.2f", x->opt_ns / 1e6);
        util_fmt_bytes(x->peak_bytes, cells[5], 32);
        snprintf(cells[6], 32, "%.2f", (y->compute_ns + y->recompute_ns) / 1e6);
        snprintf(cells[7], 32, "%.2f", y->bubble_ns / 1e6);
        util_fmt_bytes(y->peak_bytes, cells[8], 32);
        const char *row[9];
        for (int i = 0; i < 9; i++) row[i] = cells[i];
        util_table_row(tb, row);
    }
    fprintf(f, "\n");
    util_table_print(tb, f, "  ");
    util_table_free(tb);
    /* the columns are one step's, not a sum or a median of each: which
     * step was unsaid, and read as the run's totals */
    if (m.shown)
        fprintf(f, "  ms columns: step %d, the measured step nearest the "
                "median; peak mem: the median of the measured steps' "
                "peaks\n", m.shown);
    double ps_plan = 0;
    const char *why = "";
    double *pk = plan_sim(p, r, &ps_plan, &why);
    /* why is set for a plan sluice sim prices another way, pk only
     * where its answer could be had */
    fprintf(f, "  comm = compute waiting for a transfer in flight; the "
            "simulated columns are %s\n",
            why[0] ? "the simulator's for the plan as this executor runs "
                     "it, not `sluice sim`'s"
                   : "`sluice sim` for the same plan");
    if (pk) {
        double most = 0;
        for (int d = 0; d < r->n_devices; d++) most = fmax(most, pk[d]);
        int zs = sim_zero_stage(p->zero, p->fsdp);
        int z = zs >= 2, sp = p->sp && p->tp > 1;
        fprintf(f, "  (%s: it %s%s%s; `sluice sim` prices %s%s%s: %s an "
                "iteration, peak %s)\n", why,
                !z ? "" : zs >= 3 ? "gathers each stage's weights "
                "whole and reduces each microbatch's whole gradient"
                : "reduces each microbatch's whole gradient",
                z && sp ? ", and " : "",
                sp ? "runs the weight gradients' collectives exposed" : "",
                !z ? "" : zs >= 3 ? "FSDP's layer at a time, the next "
                "prefetched"
                : "ZeRO-2's buckets, a layer's gradient at a time",
                z && sp ? " and " : "",
                sp ? "Megatron-LM's overlap" : "",
                util_fmt_time(ps_plan, a, sizeof a),
                util_fmt_bytes(most, b, sizeof b));
        free(pk);
    }
    peak_lines(r, &m, f);
    offload_lines(r, f);
    tiers_lines(r, &m, &pr, f);
    stier_lines(r, &m, &pr, f);
    if (ro->trace) fprintf(f, "trace: %s\n", ro->trace);
    if (drawn)
        fprintf(f, "plot: %s-compare.png and .svg (the run above the "
                "simulation)\n", ro->plot);
    rc = 0;
out:
    sim_engine_free(en);
    meas_free(&m);
    return rc;
}
