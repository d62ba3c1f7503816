/* The plan search. Candidates are every (schedule, pipeline depth,
 * microbatch size and count, recomputation, waves) the simulator accepts;
 * each gets its partition first (exact dynamic programming for chains,
 * the Mixed-pipe partitioner for blocks finer than layers, the zig-zag
 * chunk map for the wave), from which a lower bound on its iteration time
 * follows (the bottleneck device must run all its microbatches). Candidates
 * are simulated in order of estimated time; one whose bound cannot beat the
 * best simulated plan of its schedule is pruned. The chosen plan's time and
 * memory are the simulator's, never a formula's. Shortcuts never change
 * an answer: replicas are folded only where the timeline is the same, and
 * a run is cut at its first overflow only where that verdict is all that
 * is used. plan_search at the end reads as the outline of the steps. */
#include "planner/planner.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

unsigned plan_sync_mask(unsigned given)
{
    unsigned m = 0;
    for (int k = 0; k < SIM_SCHED_COUNT; k++)
        if ((given ? (given & (1u << k)) != 0
                   : sim_sched_plannable((sim_sched)k)) &&
            !sim_sched_async((sim_sched)k))
            m |= 1u << k;
    return m;
}

/* The NVMe drives of the first GPU's server (the offload plans'). */
static int server_drives(const prof_topo *t)
{
    return t->n_gpus
         ? prof_topo_server_drives(t, t->nodes[t->gpu_node[0]].server) : 0;
}

void plan_opts_init(plan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->reserve_bytes = -1;
    o->recompute = -1;
    o->sp = -1;
    o->zero = -1;
    o->grad_bucket = SIM_GRAD_BUCKET_AUTO;
}

char *plan_knob_tag(const sim_plan *p, char *buf, size_t n)
{
    char z[8] = "";
    if (p->fsdp) snprintf(z, sizeof z, " %s",
                          p->fsdp == SIM_FSDP_HYBRID ? "hsdp" : "fsdp");
    else if (p->zero) snprintf(z, sizeof z, " z%d", p->zero);
    snprintf(buf, n, "%s%s%s", p->recompute == SIM_RC_SELECTIVE ? " sel"
             : p->recompute ? " rc" : "", p->sp ? " sp" : "", z);
    return buf;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The cost table of a plan, capacity less the reserve; fold: one
 * data-parallel replica simulated for all where the server graph is
 * symmetric (the same timeline, dp times fewer tasks). */
static sim_costs *plan_costs(const sim_plan *p, const prof_model *m,
                             const prof_topo *t, double reserve, int fold,
                             util_err *e)
{
    if (sim_plan_check(p, m, t->n_gpus, e)) return NULL;
    sim_cost_opts co = sim_plan_cost_opts(p);
    co.fold = fold;
    sim_costs *c = sim_costs_build(m, t, p->n_stages, p->first_op, p->last_op,
                                   p->stage_device, p->pp, &co, e);
    if (!c) return NULL;
    for (int d = 0; d < c->n_devices; d++)
        if (c->dev_capacity[d] > 0) c->dev_capacity[d] -= reserve;
    return c;
}

/* Schedule and engine for a plan whose costs are built. */
static int plan_run(const sim_plan *p, const sim_costs *c, int record,
                    int stop_at_oom, sim_ir **ir, sim_engine **engine,
                    sim_result *res, util_err *e)
{
    sim_sched_opts so = sim_plan_sched_opts(p);
    /* no dry run (a tenth of the search on 16,384 GPUs): run to its end,
     * the engine finds a deadlock itself; stopped at an overflow, the
     * candidate does not fit, whatever it would have done after */
    so.no_dry_run = 1;
    if (!(*ir = sim_schedule(&so, c, e))) return -1;
    sim_run_opts ro = {.record = record, .stop_at_oom = stop_at_oom};
    *engine = sim_engine_new(*ir, c, &ro);
    if (sim_engine_run(*engine, res))
        return util_errf(e, sim_result_code(res),
                         "%s", res->msg);
    return 0;
}

int plan_simulate(const sim_plan *p, const prof_model *m, const prof_topo *t,
                  double reserve, int record, sim_costs **costs, sim_ir **ir,
                  sim_engine **engine, sim_result *res, util_err *e)
{
    *ir = NULL;
    *engine = NULL;
    if (!(*costs = plan_costs(p, m, t, reserve, 1, e))) return -1;
    return plan_run(p, *costs, record, 0, ir, engine, res, e);
}

/* A lower bound on the simulated iteration from the cost table alone (the
 * simulator's own stage times, tensor-parallel all-reduces included): every
 * device runs all its stages' tasks for every microbatch, one at a time on
 * its compute stream. For schedules with one stage per device and a flush,
 * device d also cannot start before the first forward crossed the stages
 * before it, nor (with a fused backward) finish before its last input
 * gradient travelled back. */
static double costs_lower_bound(const sim_costs *c, const sim_plan *p)
{
    int S = c->n_model_stages, pp = p->pp;
    int pipes = sim_sched_pipes(p->sched);
    double per_stage_mb = (double)p->n_mb / pipes;
    double *work = util_calloc((size_t)pp, sizeof(double));
    for (int r = 0; r < pipes; r++)
        for (int s = 0; s < S; s++) {
            const sim_stage_cost *sc = &c->stage[r * S + s];
            int d = c->stage_device[r * S + s];
            if (d < 0 || d >= pp) continue;
            /* the backward fused or apart, whichever is cheaper: a
             * bound (a calibrated split factor may be below 1) */
            double one = (double)(sc->f_ns + (p->recompute ? sc->r_ns : 0)) +
                         fmin((double)(sc->b_ns + sc->w_ns),
                              (double)(sc->bs_ns + sc->ws_ns));
            work[d] += one * per_stage_mb;
        }
    double lb = 0;
    int chain = S == pp && pipes == 1 && !sim_sched_async(p->sched);
    /* Only with a fused backward is a device's last task the input
     * gradient that must still travel back (the split ones, ZB-H1 and
     * every schedule listed after it, may end on a W). */
    int tail = chain && p->sched < SIM_SCHED_ZBH1;
    double fwd_before = 0, bwd_before = 0;
    for (int d = 0; d < pp; d++) {
        double v = work[d];
        if (chain) {
            v += fwd_before + (tail ? bwd_before : 0);
            fwd_before += (double)c->stage[d].f_ns;
            bwd_before += (double)c->stage[d].b_ns;
        }
        if (v > lb) lb = v;
    }
    free(work);
    return lb * 1e-9;
}

/* ---- per-op times, cached per microbatch size ---- */

typedef struct op_times {
    int mbs;
    double *f, *b, *w;        /* seconds, per op */
} op_times;

static void op_times_fill(op_times *ot, const prof_model *m,
                          const prof_gpu *g, int mbs)
{
    ot->mbs = mbs;
    ot->f = util_malloc(sizeof(double) * (size_t)m->n_ops);
    ot->b = util_malloc(sizeof(double) * (size_t)m->n_ops);
    ot->w = util_malloc(sizeof(double) * (size_t)m->n_ops);
    for (int i = 0; i < m->n_ops; i++) {
        const prof_op *o = &m->ops[i];
        ot->f[i] = sim_op_ns(g, prof_spec_math(&m->spec), o, mbs, SIM_F, NULL) * 1e-9;
        ot->b[i] = sim_op_ns(g, prof_spec_math(&m->spec), o, mbs, SIM_B, NULL) * 1e-9;
        ot->w[i] = sim_op_ns(g, prof_spec_math(&m->spec), o, mbs, SIM_W, NULL) * 1e-9;
    }
}

static void op_times_free(op_times *ot)
{
    free(ot->f);
    free(ot->b);
    free(ot->w);
}

/* ---- units: runs of ops the partitioners cut between ---- */

typedef struct units {
    int n;
    int *first, *last;        /* op ranges */
} units;

/* Layers, or sub-layer blocks ending at each residual add (the attention
 * and MLP halves of a transformer layer) for partitioners that place
 * blocks finer than layers. */
static void units_make(const prof_model *m, int fine, units *u)
{
    u->first = util_malloc(sizeof(int) * (size_t)m->n_ops);
    u->last = util_malloc(sizeof(int) * (size_t)m->n_ops);
    u->n = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const prof_layer *L = &m->layers[l];
        int a = L->first_op, end = L->first_op + L->n_ops - 1;
        for (int i = a; i <= end; i++) {
            if (i == end || (fine && m->ops[i].kind == PROF_OP_RESIDUAL)) {
                u->first[u->n] = a;
                u->last[u->n] = i;
                u->n++;
                a = i + 1;
            }
        }
    }
}

static void units_free(units *u)
{
    free(u->first);
    free(u->last);
}

/* Chain inputs over units for one candidate. */
typedef struct chain_in {
    double *time, *cut, *smem, *amem, *compute;
} chain_in;

/* With tensor parallelism t, a unit's compute is taken as 1/t of its
 * single-GPU time (a lower bound: smaller GEMMs are no more efficient) and
 * its weights as 1/t; its activations are the simulator's account
 * (sim_act_range: what one rank keeps, whole or split as Megatron keeps
 * them, and under recomputation the checkpoints; the one layer being
 * recomputed is the simulator's to add, once per stage). */
static void chain_fill(chain_in *ci, const units *u, const prof_model *m,
                       const op_times *ot, int recompute, int sp,
                       int versions, double state_bytes, double bw,
                       double lat_s, int tp, int zero, int shard)
{
    int n = u->n, mbs = ot->mbs;
    double wbytes = prof_dtype_bytes(m->spec.dtype);
    ci->time = util_malloc(sizeof(double) * (size_t)n);
    ci->cut = util_malloc(sizeof(double) * (size_t)n);
    ci->smem = util_malloc(sizeof(double) * (size_t)n);
    ci->amem = util_malloc(sizeof(double) * (size_t)n);
    for (int k = 0; k < n; k++) {
        double t = 0, params = 0, frozen = 0;
        for (int i = u->first[k]; i <= u->last[k]; i++) {
            t += ot->f[i] * (sim_op_recomputed(m, i, recompute) ? 2 : 1) +
                 ot->b[i] + ot->w[i];
            params += prof_op_train_params(&m->ops[i]);
            frozen += m->ops[i].frozen_bytes;
        }
        ci->time[k] = t / tp;
        /* weights that train, with their gradients, optimizer state and
         * stashed versions; frozen ones (fine-tuning) as stored */
        ci->smem[k] = (params * (state_bytes + (versions - 1) * wbytes) +
                       frozen) / tp;
        if (zero > 0 && shard > 1) {
            /* ZeRO's Figure 1; ZeRO-3's gathered layers (two per stage,
             * sim_stage_cost.gather_bytes) are not a unit's to add: the
             * bound leaves them to the simulation */
            double w, g, opt;
            sim_zero_bytes(params, wbytes, state_bytes, zero, shard, &w, &g,
                           &opt);
            w += zero >= 3 ? frozen / shard : frozen;
            ci->smem[k] = (w + g + opt) / tp;
        }
        sim_act a = sim_act_range(m, u->first[k], u->last[k], tp, sp,
                                  recompute);
        ci->amem[k] = (recompute ? a.keep : a.act) * mbs;
        ci->cut[k] = prof_model_cut_bytes(m, u->last[k]) * mbs / bw + lat_s;
    }
}

static void chain_free(chain_in *ci)
{
    free(ci->time);
    free(ci->cut);
    free(ci->smem);
    free(ci->amem);
}

/* ---- candidates ---- */

typedef struct cand {
    sim_sched sched;
    int pp, dp, tp, mbs, n_mb, recompute, sp, waves, chunks;
    int zero, fsdp;           /* sharding (sim_zero_check holds) */
    double lb_s, est_s;       /* lower bound and estimate of iteration */
    double need_bytes;        /* estimated worst-device memory */
    sim_plan plan;            /* partition filled; owned */
    int ok;                   /* a partition exists */
    int stopped;              /* its run ended at the first overflow */
    int partitioned;          /* its partition was tried (a time limit may
                               * end the search before) */
    int idx;                  /* enumeration order, for deterministic ties */
} cand;

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->est_s != y->est_s) return x->est_s < y->est_s ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int is_mixed(sim_sched s)
{
    return s == SIM_SCHED_MIXED || s == SIM_SCHED_MIXED_1F1B ||
           s == SIM_SCHED_MIXED_GPIPE;
}

/* In-flight microbatches the schedule keeps on stage s of p. */
static double inflight(sim_sched s, int stage, int p, int m)
{
    if (s == SIM_SCHED_GPIPE || s == SIM_SCHED_MIXED_GPIPE) return m;
    int k = p - stage;
    return k < m ? k : m;
}

static int stages_per_device(const cand *c)
{
    switch (c->sched) {
    case SIM_SCHED_WAVE: return 2 * c->waves;
    case SIM_SCHED_ZBV: case SIM_SCHED_DUALPIPEV: return 2;
    case SIM_SCHED_INTERLEAVED: return c->chunks;
    default: return 1;
    }
}

/* The slowest link between consecutive pipeline devices (tensor parallel
 * ranks innermost: stage s starts at GPU s*tp): bandwidth and latency a
 * cut's transfer is priced at. */
static void pipeline_link(const prof_topo *t, int p, int tp, double *bw,
                          double *lat_s)
{
    *bw = INFINITY;
    *lat_s = 0;
    for (int d = 0; d + 1 < p; d++) {
        int n;
        const int *r = prof_topo_gpu_route(t, d * tp, (d + 1) * tp, &n);
        double b = prof_route_bw(t, r, n);
        if (b < *bw) *bw = b;
        double l = prof_route_latency_ns(t, r, n) * 1e-9;
        if (l > *lat_s) *lat_s = l;
    }
    if (!isfinite(*bw)) *bw = 1e30;
}

/* The candidate's plan but its stages; schedules without a flush are
 * measured in steady state, so they simulate enough minibatches that the
 * window lies past the pipeline's fill. */
static void plan_skeleton(cand *c, const plan_opts *o, const prof_model *m,
                          const char *model_name, const char *hw_name)
{
    sim_plan_init(&c->plan);
    c->plan.ft = m->ft;
    c->plan.math = o->math;
    c->plan.seq_len = o->seq_len;
    c->plan.flash = o->flash;
    c->plan.grad_bucket = o->grad_bucket;
    snprintf(c->plan.model, sizeof c->plan.model, "%s", model_name);
    snprintf(c->plan.hw, sizeof c->plan.hw, "%s", hw_name);
    c->plan.sched = c->sched;
    c->plan.pp = c->pp;
    c->plan.dp = c->dp;
    c->plan.tp = c->tp;
    c->plan.mbs = c->mbs;
    c->plan.n_mb = c->n_mb;
    c->plan.recompute = c->recompute;
    c->plan.sp = c->sp;
    c->plan.zero = c->zero;
    c->plan.fsdp = c->fsdp;
    c->plan.waves = c->waves > 0 ? c->waves : 1;
    c->plan.chunks = c->chunks;
    c->plan.state_bytes_per_param = o->state_bytes_per_param;
    c->plan.n_minibatches = 1;
    if (sim_sched_async(c->sched)) {
        int depth = is_mixed(c->sched) ? 4 * c->pp : c->pp;
        c->plan.n_minibatches = 4 + (2 * depth + c->n_mb - 1) / c->n_mb;
    }
}

/* Mixed-pipe's blocks and placement over sub-layer units; the bound is the
 * busiest device's compute, the estimate the partitioner's objective. */
static void partition_blocks(cand *c, const units *fine, const chain_in *ci,
                             double cap, plan_mixed_memo *memo)
{
    int p = c->pp, mb = c->n_mb, flush = !sim_sched_async(c->sched);
    plan_mixed_in in = {fine->n, ci->time, ci->cut, ci->smem, ci->amem, p, cap,
                        inflight(c->sched, 0, p, mb), memo};
    plan_mixed pm;
    if (plan_mixed_partition(&in, &pm)) return;
    sim_plan_stages(&c->plan, pm.n_stages);
    for (int s = 0; s < pm.n_stages; s++) {
        c->plan.first_op[s] = fine->first[pm.first[s]];
        c->plan.last_op[s] = fine->last[pm.first[s + 1] - 1];
        c->plan.stage_device[s] = pm.dev[s];
    }
    double busiest = 0, *load = util_calloc((size_t)p, sizeof(double));
    for (int s = 0; s < pm.n_stages; s++)
        for (int k = pm.first[s]; k < pm.first[s + 1]; k++)
            load[pm.dev[s]] += ci->time[k];
    for (int d = 0; d < p; d++) busiest = fmax(busiest, load[d]);
    free(load);
    c->lb_s = mb * busiest;
    c->est_s = mb * pm.objective + (flush ? (p - 1) * pm.objective / p : 0);
    c->ok = 1;
    plan_mixed_free(&pm);
}

/* The optimal contiguous cut of units u into the schedule's stages, mapped
 * onto devices as the schedule places them; the bound is the busiest
 * device's work, the estimate adds a flushed pipeline's fill. Stages per
 * device: the wave's 2W chunks, ZB-V's and DualPipeV's V, interleaved's
 * v; Chimera's devices hold a stage of each of its two pipelines (their
 * weights twice). Where nothing fits, need_bytes says what the balanced
 * cut would need. */
static void partition_chain(cand *c, const units *u, const chain_in *ci,
                            double cap)
{
    int p = c->pp, mb = c->n_mb, flush = !sim_sched_async(c->sched);
    int per_dev = stages_per_device(c);
    int S = per_dev * p;
    int mirrored = c->sched == SIM_SCHED_CHIMERA;
    double *inf = util_malloc(sizeof(double) * (size_t)S);
    double *caps = util_malloc(sizeof(double) * (size_t)S);
    int *first = util_malloc(sizeof(int) * (size_t)(S + 1));
    for (int s = 0; s < S; s++) {
        /* A device's chunks share its memory; the simulator checks the
         * sum, the partition only keeps each chunk to its share. */
        inf[s] = per_dev > 1 ? inflight(SIM_SCHED_1F1B, s % p, p, mb)
                             : inflight(c->sched, s, p, mb);
        caps[s] = cap / (per_dev * (mirrored ? 2 : 1));
    }
    plan_chain pc = {u->n, ci->time, ci->cut, ci->smem, ci->amem, S, inf, caps, 1};
    double T = plan_partition_chain(&pc, first);
    if (T < 0) {
        for (int s = 0; s < S; s++) caps[s] = INFINITY;
        if (plan_partition_chain(&pc, first) >= 0) {
            double worst = 0;
            for (int s = 0; s < S; s++)
                worst = fmax(worst, plan_stage_mem(&pc, s, first[s],
                                                   first[s + 1] - 1));
            c->need_bytes = worst * per_dev * (mirrored ? 2 : 1);
        }
    } else {
        sim_plan_stages(&c->plan, S);
        for (int s = 0; s < S; s++) {
            c->plan.first_op[s] = u->first[first[s]];
            c->plan.last_op[s] = u->last[first[s + 1] - 1];
        }
        sim_sched_opts so = {.sched = c->sched, .pp = p, .n_stages = S,
                             .waves = c->waves, .chunks = c->chunks};
        sim_sched_map(&so, c->plan.stage_device);
        /* Work per device per minibatch: every stage it holds runs every
         * microbatch (Chimera: half of them in each direction, on stage s
         * and its mirror p-1-s). */
        double *load = util_calloc((size_t)p, sizeof(double));
        for (int s = 0; s < S; s++) {
            double ts = 0;
            for (int k = first[s]; k < first[s + 1]; k++) ts += ci->time[k];
            if (mirrored) {
                load[c->plan.stage_device[s]] += ts * mb / 2;
                load[p - 1 - c->plan.stage_device[s]] += ts * mb / 2;
            } else {
                load[c->plan.stage_device[s]] += ts * mb;
            }
        }
        double busiest = 0;
        for (int d = 0; d < p; d++) busiest = fmax(busiest, load[d]);
        free(load);
        c->lb_s = busiest;
        c->est_s = busiest + (flush ? (p - 1) * T / per_dev : 0);
        c->ok = 1;
    }
    free(inf);
    free(caps);
    free(first);
}

/* The candidate's partition, bound and estimate: blocks for Mixed-pipe,
 * layers (or sub-layer units where stages outnumber layers) otherwise. */
static void cand_partition(cand *c, const prof_model *m, const prof_topo *t,
                           const units *lay, const units *fine,
                           const op_times *ot, const plan_opts *o,
                           double cap, const char *model_name,
                           const char *hw_name, plan_mixed_memo *memo)
{
    double state = o->state_bytes_per_param > 0 ? o->state_bytes_per_param : 16;
    /* stage tiers: the GPU keeps the weights and gradients at least */
    if (o->state_tiers)
        state = fmin(state, 2 * prof_dtype_bytes(m->spec.dtype));
    double bw, lat;
    pipeline_link(t, c->pp, c->tp, &bw, &lat);
    plan_skeleton(c, o, m, model_name, hw_name);
    int versions = c->sched == SIM_SCHED_2BW || c->sched == SIM_SCHED_MIXED ? 2 : 1;
    int S = stages_per_device(c) * c->pp;
    /* the search makes no layout of more stages than fine has */
    const units *u = is_mixed(c->sched) ? fine : lay->n >= S ? lay : fine;
    chain_in ci;
    /* the shard group: the data-parallel width, or under hybrid sharding
     * the ranks of a stage inside a server (sim_costs_build checks it) */
    util_err se;
    int shard = sim_shard_group(t, sim_zero_stage(c->zero, c->fsdp), c->fsdp,
                                c->dp, c->pp * c->tp, &se);
    if (!shard) return;     /* the layout hybrid sharding cannot take */
    chain_fill(&ci, u, m, ot, c->recompute, c->sp, versions, state, bw, lat,
               c->tp, sim_zero_stage(c->zero, c->fsdp), shard);
    if (is_mixed(c->sched)) partition_blocks(c, fine, &ci, cap, memo);
    else partition_chain(c, u, &ci, cap);
    chain_free(&ci);
}

/* ---- the search's state ---- */

enum { MAX_LOG_MBS = 16 };

/* The search's op times of microbatch size mbs: a power of two's by its
 * log, the one other size a search may have (--mbs) in the last slot. */
static int ot_slot(int mbs)
{
    int lb = 0;
    while (lb < MAX_LOG_MBS && (1 << lb) < mbs) lb++;
    return (1 << lb) == mbs ? lb : MAX_LOG_MBS + 1;
}

typedef struct search {
    const prof_model *m;
    const prof_topo *t;
    const char *model_name, *hw_name;
    const plan_opts *o;
    plan_result *r;
    const prof_gpu *g;
    double cap;               /* bytes per GPU less the reserve */
    units lay, fine;
    op_times ot[MAX_LOG_MBS + 2]; /* per microbatch size, filled on use
                               * (ot_slot) */
    plan_mixed_memo *memo;    /* Mixed-pipe's balanced cuts, shared by the
                               * three Mixed schedules of a layout */
    cand *cs;
    int ncand;
    long partitioned;         /* candidates whose partition was tried */
    double t0, deadline;      /* deadline: INFINITY without a time limit */
    unsigned offload;         /* offload schedules to search (bits) */
    double shown;             /* when progress was last drawn; 0: never */
} search;

static int expired(const search *s) { return now_s() >= s->deadline; }

/* ---- progress on a terminal ----
 * A bar on stderr for each phase, drawn only on a terminal, only once the
 * search has run a second, at most ten times a second; cleared at the
 * end so the answer starts on a clean line. */

static void progress(search *s, const char *phase, long done, long total)
{
    if (!s->o->progress || !isatty(2)) return;
    double t = now_s();
    if (t - s->t0 < 1.0 || t - s->shown < 0.1) return;
    s->shown = t;
    int w = 30, fill = total ? (int)(w * done / total) : w;
    char left[48] = "";
    if (isfinite(s->deadline))
        snprintf(left, sizeof left, ", %.0f s of the time limit left",
                 fmax(0, s->deadline - t));
    fprintf(stderr, "\r%s [%.*s%*s] %ld/%ld, %.0f s%s\033[K", phase, fill,
            "##############################", w - fill, "", done, total,
            t - s->t0, left);
}

static void progress_end(search *s)
{
    if (s->shown > 0) fprintf(stderr, "\r\033[K");
    s->shown = 0;
}

/* ---- the steps ---- */

/* Whether the request can be searched at all: one GPU type, memory left
 * after the reserve, fixed widths that fit the cluster and batch. Fills
 * the batch, reserve, capacity and the FLOP lower bound. */
static int check_request(search *s, util_err *e)
{
    const prof_model *m = s->m;
    const prof_topo *t = s->t;
    const plan_opts *o = s->o;
    plan_result *r = s->r;
    int n = t->n_gpus;
    const prof_gpu *g = s->g = prof_topo_gpu(t, 0);
    for (int d = 1; d < n; d++)
        if (strcmp(prof_topo_gpu(t, d)->name, g->name))
            return util_errf(e, UTIL_EXIT_USAGE, "the planner needs one GPU "
                             "type; %s mixes %s and %s", t->name, g->name,
                             prof_topo_gpu(t, d)->name);
    r->batch = o->batch > 0 ? o->batch
               : m->spec.batch > 0 ? m->spec.batch : PLAN_DEFAULT_BATCH;
    r->reserve_bytes = o->reserve_bytes >= 0 ? o->reserve_bytes
                                             : PLAN_DEFAULT_RESERVE;
    r->capacity_bytes = g->mem_bytes;
    s->cap = g->mem_bytes - r->reserve_bytes;
    if (s->cap <= 0)
        return util_errf(e, UTIL_EXIT_USAGE, "a reserve of %.2f GiB leaves "
                         "nothing of %s's %.2f GiB", r->reserve_bytes / 1073741824.0,
                         g->name, g->mem_bytes / 1073741824.0);
    if (o->pp > n)
        return util_errf(e, UTIL_EXIT_USAGE, "--pp %d but %s has %d %s%s",
                         o->pp, t->name, n, prof_topo_unit(t),
                         n == 1 ? "" : "s");
    const char *flag[] = {"--pp", "--dp", "--tp"};
    int want[] = {o->pp, o->dp, o->tp};
    for (int i = 0; i < 3; i++)
        if (want[i] > 0 && want[i] <= n && n % want[i])
            return util_errf(e, UTIL_EXIT_USAGE, "%s %d does not divide the "
                             "%d GPUs of %s", flag[i], want[i], n, t->name);
    if (o->mbs > 0 && r->batch % o->mbs)
        return util_errf(e, UTIL_EXIT_USAGE, "--mbs %d does not divide the "
                         "batch of %d samples (--batch, else the model's): "
                         "give a --batch it divides, or another --mbs",
                         o->mbs, r->batch);
    if (o->offload_tier == SIM_TIER_NVME && !server_drives(t))
        return util_errf(e, UTIL_EXIT_USAGE, "--offload-tier nvme: %s has no "
                         "NVMe drive (%s)", t->name,
                         prof_topo_more_drives(t));
    if (o->offload_tier == SIM_TIER_NVME &&
        o->sched_mask == 1u << SIM_SCHED_ZERO_OFFLOAD)
        return util_errf(e, UTIL_EXIT_USAGE, "--offload-tier nvme: schedule "
                         "zero-offload keeps its states in host DRAM; "
                         "zero-infinity and fuyou use the nvme tier");
    if (o->tp > 0 && (t->gpus_per_server > 0 ? o->tp > t->gpus_per_server : o->tp > n))
        return util_errf(e, UTIL_EXIT_USAGE, "--tp %d is larger than a server "
                         "of %s (%d GPUs): tensor parallelism stays inside one",
                         o->tp, t->name, t->gpus_per_server);
    if (sim_tp_heads_check(m, o->tp, "--tp", e)) return -1;
    if (o->sp == 1 && (o->tp == 1 || n == 1))
        return util_errf(e, UTIL_EXIT_USAGE, "--sequence-parallel needs "
                         "tensor parallelism (--tp 2 or more): the sequence "
                         "is split over the tensor-parallel group");
    if ((o->pp ? o->pp : 1) * (o->dp ? o->dp : 1) * (o->tp ? o->tp : 1) > n ||
        (o->pp && o->dp && o->tp && o->pp * o->dp * o->tp != n))
        return util_errf(e, UTIL_EXIT_USAGE, "pp %d x dp %d x tp %d does not "
                         "match the %d GPUs of %s", o->pp ? o->pp : 1,
                         o->dp ? o->dp : 1, o->tp ? o->tp : 1, n, t->name);
    /* Lower bound: every model FLOP at the GPU's best GEMM efficiency. */
    prof_dtype mt = prof_gpu_math(g, prof_spec_math(&m->spec));
    g = prof_gpu_at(g, mt);
    double peak = prof_gpu_peak(g, mt);
    if (peak <= 0)
        return util_errf(e, UTIL_EXIT_USAGE, "%s has no %s peak; choose "
                         "another precision for %s", g->name,
                         prof_dtype_name(m->spec.dtype), m->spec.name);
    r->lower_bound_s = prof_model_train_flops(m, 0) * r->batch /
                       (n * peak * g->eff.gemm_max);
    /* no plan can run faster: one past the simulator's clock is refused
     * here, not candidate by candidate */
    if (r->lower_bound_s > SIM_T_MAX * 1e-9) {
        char b[32];
        return util_errf(e, UTIL_EXIT_USAGE, "%s on %d x %s takes at least "
                         "%s an iteration (its FLOPs at the GPUs' peak), "
                         "past the %.3g years the simulator's clock holds: "
                         "check the GPU's peak_tflops, or plan a smaller "
                         "batch (--batch)", m->spec.name, n, g->name,
                         util_fmt_time(r->lower_bound_s, b, sizeof b),
                         SIM_T_MAX * 1e-9 / 31557600);
    }
    return 0;
}

/* The schedule's knob on a pipeline of p devices, into out (at most
 * MAX_KNOBS): waves of the wave (1, 2, 4); chunks of interleaved 1F1B (one
 * chunk is 1F1B): 2 and 4, and where neither gives every chunk the same
 * whole number of layers, as Megatron-LM requires of its virtual stages,
 * the counts up to 8 that do (105 layers on 35 devices: 3 chunks of one
 * layer, as Korthikanti et al. ran their 530B model). Not every such
 * count: more chunks multiply the pipeline's sends, which the simulator
 * overlaps with compute where Megatron-LM's code of those runs blocked
 * on them, so plans of many chunks would gain a few percent on paper
 * only; or the count plan_opts.chunks fixes. Other schedules have one
 * setting. */
#define MAX_KNOBS 8
static int knobs(int sc, int p, const prof_model *m, const plan_opts *o,
                 int *out)
{
    int n = 0;
    if (sc == SIM_SCHED_INTERLEAVED && o->chunks > 0) {
        out[n++] = o->chunks;
    } else if (sc == SIM_SCHED_WAVE) {
        for (int w = 1; w <= 4; w *= 2) out[n++] = w;
    } else if (sc == SIM_SCHED_INTERLEAVED) {
        int layers = m->spec.layers + m->spec.dec_layers;
        int whole = layers > 0 && (layers % (2 * p) == 0 ||
                                   layers % (4 * p) == 0);
        out[n++] = 2;
        out[n++] = 4;
        for (int v = 3; v <= MAX_KNOBS && !whole && layers > 0; v++)
            if (v != 4 && layers % (p * v) == 0) out[n++] = v;
    } else {
        out[n++] = 1;
    }
    return n;
}

/* Adds candidate c if the simulator accepts its schedule on its layout;
 * otherwise records why for its schedule. */
static void add_candidate(search *s, const cand *c, int *capc)
{
    sim_sched_opts so = {
        .sched = c->sched, .pp = c->pp,
        .n_stages = is_mixed(c->sched) ? 2 * c->pp : stages_per_device(c) * c->pp,
        .n_mb = c->n_mb, .recompute = c->recompute, .waves = c->waves,
        .chunks = c->chunks, .dp = c->dp, .n_minibatches = 4};
    util_err ce;
    plan_alt *a = &s->r->alt[c->sched];
    if (sim_sched_check(&so, &ce)) {
        if (!a->na_reason[0])
            snprintf(a->na_reason, sizeof a->na_reason, "not applicable: %s",
                     ce.msg);
        return;
    }
    a->tried = 1;
    if (s->ncand == *capc)
        s->cs = util_realloc(s->cs, sizeof *s->cs * (size_t)(*capc *= 2));
    s->cs[s->ncand++] = *c;
}

/* Which candidates exist: tensor parallel width inside a server (dividing
 * the heads), pipeline depth, data parallel width = the rest; microbatch
 * size (powers of two dividing a replica's batch, or --mbs); every schedule the
 * options allow; recomputation; the schedule's knob. */
/* Adds a reason a layout was not taken to buf (n bytes), once. */
static void why_add(char *buf, size_t n, const char *why)
{
    size_t l = strlen(buf);
    if (strstr(buf, why) || l + strlen(why) + 3 >= n) return;
    snprintf(buf + l, n - l, "%s%s", l ? "; " : "", why);
}

static void enumerate_candidates(search *s)
{
    const prof_model *m = s->m;
    const plan_opts *o = s->o;
    int n = s->t->n_gpus, batch = s->r->batch, capc = 64;
    s->cs = util_calloc((size_t)capc, sizeof *s->cs);
    int per_server = s->t->gpus_per_server > 0 ? s->t->gpus_per_server : n;
    char layout_why[400] = "", w1[160];
    /* powers of two, or the one width asked for */
    for (int tp = o->tp ? o->tp : 1; tp <= per_server && tp <= n;
         tp = o->tp ? n + 1 : tp * 2) {
        if (m->spec.heads % tp || m->spec.kv_heads % tp) continue;
        for (int p = 1; p <= n / tp; p++) {
            if ((n / tp) % p || (o->pp && p != o->pp)) continue;
            int d = n / (tp * p);
            if (n % tp || (o->dp && d != o->dp)) continue;
            if (batch % d) {
                snprintf(w1, sizeof w1, "batch %d does not split over %d "
                         "data-parallel replicas", batch, d);
                why_add(layout_why, sizeof layout_why, w1);
                continue;
            }
            int bd = batch / d;
            /* powers of two, or the one size asked for */
            for (int lb = 0; lb <= MAX_LOG_MBS && (1 << lb) <= bd; lb++) {
                int mbs = o->mbs > 0 ? o->mbs : 1 << lb;
                if (o->mbs > 0 && lb) break;
                if (bd % mbs) continue;
                for (int sc = 0; sc < SIM_SCHED_COUNT; sc++) {
                    if (!sim_sched_plannable((sim_sched)sc)) continue;
                    if (o->sched_mask && !(o->sched_mask & (1u << sc))) continue;
                    int wave = sc == SIM_SCHED_WAVE, inter = sc == SIM_SCHED_INTERLEAVED;
                    int kn[MAX_KNOBS];
                    int nk = knobs(sc, p, m, o, kn);
                    for (int rc = 0; rc < SIM_RC_COUNT; rc++)
                    for (int sp = 0; sp <= (tp > 1 && sim_sp_splits(m, tp));
                         sp++) {
                        if (o->recompute >= 0 && rc != o->recompute) continue;
                        if (o->sp >= 0 && sp != o->sp) continue;
                        for (int z = 0; z <= 3; z++)
                        for (int ki = 0; ki < nk; ki++) {
                            int w = kn[ki];
                            int fs = o->fsdp;
                            if (fs ? z != 3 : o->zero >= 0 && z != o->zero)
                                continue;
                            util_err ze;
                            if (sim_zero_check(z, fs, d, (sim_sched)sc, &ze)) {
                                if (o->zero > 0 || fs)
                                    why_add(layout_why, sizeof layout_why,
                                            ze.msg);
                                continue;
                            }
                            /* interleaving on one device gains
                             * nothing (ZeRO-3 gathers a layer at a
                             * time, however the chunks cut) */
                            if (inter && p == 1) {
                                why_add(layout_why, sizeof layout_why,
                                        "interleaved 1F1B runs on a "
                                        "pipeline of 2 or more devices "
                                        "(its chunks on one gain nothing)");
                                continue;
                            }
                            if (inter && w * p > s->fine.n) {
                                snprintf(w1, sizeof w1, "interleaved with %d "
                                         "chunks on %d devices needs %d "
                                         "stages, %s splits into %d at "
                                         "most", w, p, w * p, m->spec.name,
                                         s->fine.n);
                                why_add(layout_why, sizeof layout_why, w1);
                                continue;
                            }
                            cand c = {.sched = (sim_sched)sc, .pp = p, .dp = d,
                                      .tp = tp, .mbs = mbs, .n_mb = bd / mbs,
                                      .recompute = rc, .sp = sp,
                                      .waves = wave ? w : 1,
                                      .chunks = inter ? w : 0,
                                      .zero = z, .fsdp = fs};
                            /* the finest cuts the partitioners make: a
                             * layer's attention and MLP halves */
                            int S = stages_per_device(&c) * p;
                            if (S > s->fine.n) {
                                snprintf(w1, sizeof w1, "a pipeline of %d "
                                         "stages needs %d pieces of %s, "
                                         "which splits into %d at most "
                                         "(its layers' halves)", S, S,
                                         m->spec.name, s->fine.n);
                                why_add(layout_why, sizeof layout_why, w1);
                                continue;
                            }
                            add_candidate(s, &c, &capc);
                        }
                    }
                }
            }
        }
    }
    if (!s->ncand && layout_why[0])
        for (int sc = 0; sc < SIM_SCHED_COUNT; sc++)
            snprintf(s->r->alt[sc].na_reason, sizeof s->r->alt[sc].na_reason,
                     "not applicable: %s", layout_why);
    s->r->candidates = s->ncand;
    for (int i = 0; i < s->ncand; i++) s->cs[i].idx = i;
}

/* A step through 0..n-1 that visits every index once and spreads over
 * the range from the start: a stride near n/phi, coprime with n. */
static int spread_stride(int n)
{
    for (int k = (int)(n * 0.618) | 1;; k -= 2) {
        int a = n, b = k;
        while (b) { int x = a % b; a = b; b = x; }
        if (a == 1 || k <= 1) return k > 1 ? k : 1;
    }
}

/* Each candidate's partition, lower bound and estimate; the least memory
 * any candidate needed is kept for advice. The order does not change the
 * answers; it is spread over layouts and schedules so that a time limit,
 * which gives partitioning at most half of it, leaves the simulation a
 * sample of the whole space, not its first layouts. */
static void bound_candidates(search *s)
{
    plan_result *r = s->r;
    double stop = s->t0 + (s->deadline - s->t0) / 2;
    int step = spread_stride(s->ncand);
    r->min_need_bytes = INFINITY;
    for (int i = 0; i < s->ncand; i++) {
        cand *c = &s->cs[(long)i * step % s->ncand];
        progress(s, "partitioning", i, s->ncand);
        if (now_s() >= stop) break; /* the rest: never simulated */
        int lb = ot_slot(c->mbs);
        if (!s->ot[lb].f) op_times_fill(&s->ot[lb], s->m, s->g, c->mbs);
        cand_partition(c, s->m, s->t, &s->lay, &s->fine, &s->ot[lb], s->o,
                       s->cap, s->model_name, s->hw_name, s->memo);
        c->partitioned = 1;
        s->partitioned++;
        if (!c->ok) {
            if (c->need_bytes > 0 && c->need_bytes + r->reserve_bytes < r->min_need_bytes)
                r->min_need_bytes = c->need_bytes + r->reserve_bytes;
            c->est_s = INFINITY;
        }
    }
    for (int i = 0; i < s->ncand; i++)
        if (!s->cs[i].partitioned) s->cs[i].est_s = INFINITY;
    /* Most promising first; equal estimates keep enumeration order. */
    qsort(s->cs, (size_t)s->ncand, sizeof *s->cs, cmp_cand);
}

/* The host tier e says a candidate of a lacked, if any. */
static void alt_lack(plan_alt *a, const util_err *e)
{
    if (!e->lack) return;
    if (!a->lack || e->lack_by < a->lack_by) a->lack_by = e->lack_by;
    a->lack = e->lack;
}

static void alt_reason(plan_alt *a, const char *fmt, const char *s)
{
    if (!a->reason[0]) snprintf(a->reason, sizeof a->reason, fmt, s);
}

/* Whether a simulated candidate becomes its schedule's best: below the
 * compute bound is a broken invariant, over memory is a miss (remembered
 * for advice), else the faster plan wins. */
static void keep_if_best(search *s, cand *c, const sim_result *res)
{
    plan_result *r = s->r;
    plan_alt *a = &r->alt[c->sched];
    double peak_b = 0;
    for (int d = 0; d < res->n_devices; d++)
        peak_b = fmax(peak_b, res->dev[d].peak_bytes);
    double it = res->iteration_ns * 1e-9;
    if (it < c->lb_s * (1 - 1e-6)) {
        /* No device can finish its microbatches faster than their
         * compute: a broken invariant, never a plan. */
        alt_reason(a, "simulation inconsistent (%s): below its "
                   "compute bound", sim_sched_name(c->sched));
    } else if (res->oom) {
        if (peak_b + r->reserve_bytes < r->min_need_bytes)
            r->min_need_bytes = peak_b + r->reserve_bytes;
        alt_reason(a, "out of memory: simulated peak exceeds %s", s->g->name);
    } else if (!a->feasible || it < a->iteration_s) {
        if (a->feasible) sim_plan_free(&a->plan);
        a->feasible = 1;
        a->iteration_s = it;
        a->samples_per_s = r->batch / it;
        a->peak_bytes = peak_b;
        a->plan = c->plan;
        memset(&c->plan, 0, sizeof c->plan); /* moved */
        a->reason[0] = 0;
    }
}

/* The costs of candidate c; NULL (its schedule told why) on failure. */
static sim_costs *candidate_costs(search *s, const cand *c)
{
    util_err se;
    sim_costs *sc = plan_costs(&c->plan, s->m, s->t, s->r->reserve_bytes,
                               !s->o->no_fold, &se);
    if (!sc) alt_reason(&s->r->alt[c->sched], "simulation failed: %s", se.msg);
    return sc;
}

/* Schedule and engine for candidate c on its costs sc (freed here), and
 * what the result decides; with stop_at_oom a run over memory ends at
 * the first overflow (c->stopped). */
static void run_candidate(search *s, cand *c, sim_costs *sc, int stop_at_oom)
{
    plan_alt *a = &s->r->alt[c->sched];
    sim_ir *ir = NULL;
    sim_engine *en = NULL;
    sim_result res;
    util_err se;
    if (plan_run(&c->plan, sc, 0, stop_at_oom, &ir, &en, &res, &se)) {
        alt_reason(a, "simulation failed: %s", se.msg);
    } else if (res.stopped) {
        c->stopped = 1;
        alt_reason(a, "out of memory: simulated peak exceeds %s", s->g->name);
    } else {
        c->stopped = 0;
        keep_if_best(s, c, &res);
    }
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(sc);
}

/* Candidate c in the stage-tier pass, on its costs sc (freed here):
 * simulated whole; while a device of the first replica overflows, the
 * stages on it move their optimizer state to the host, the largest first,
 * until what they free covers the overflow, and it runs again. The host
 * takes them in DRAM where its servers hold them, else the deepest
 * stages' go to the drives one by one. */
static void run_tiered(search *s, cand *c, sim_costs *sc)
{
    plan_alt *a = &s->r->alt[c->sched];
    sim_plan *p = &c->plan;
    const int S = p->n_stages;
    for (int round = 0; round <= S; round++) {
        sim_ir *ir = NULL;
        sim_engine *en = NULL;
        sim_result res;
        util_err se;
        if (plan_run(p, sc, 0, 0, &ir, &en, &res, &se)) {
            alt_reason(a, "simulation failed: %s", se.msg);
            sim_engine_free(en);
            sim_ir_free(ir);
            break;
        }
        int moved = 0, stuck = 0;
        for (int d = 0; res.oom && d < p->pp && d < res.n_devices; d++) {
            double cap = res.dev[d].capacity_bytes;
            double over = cap > 0 ? res.dev[d].peak_bytes - cap : 0;
            while (over > 0) {
                int best = -1;
                for (int k = 0; k < S; k++)
                    if (p->stage_device[k] == d && !p->state_tier[k] &&
                        (best < 0 || sc->stage[k].opt_bytes >
                                     sc->stage[best].opt_bytes))
                        best = k;
                if (best < 0 || sc->stage[best].opt_bytes <= 0) {
                    stuck = 1;
                    break;
                }
                p->state_tier[best] = SIM_TIER_DRAM;
                over -= sc->stage[best].opt_bytes;
                moved = 1;
            }
        }
        if (!moved || stuck) {
            /* fits (or cannot be helped): its result decides */
            keep_if_best(s, c, &res);
            sim_engine_free(en);
            sim_ir_free(ir);
            break;
        }
        sim_engine_free(en);
        sim_ir_free(ir);
        sim_costs_free(sc);
        util_err ce;
        int fold = !s->o->no_fold;
        double res_b = s->r->reserve_bytes;
        sc = plan_costs(p, s->m, s->t, res_b, fold, &ce);
        if (!sc) alt_lack(a, &ce);
        for (int k = S - 1; !sc && k >= 0; k--)
            if (p->state_tier[k] == SIM_TIER_DRAM) {
                p->state_tier[k] = SIM_TIER_NVME;
                sc = plan_costs(p, s->m, s->t, res_b, fold, &ce);
                if (!sc) alt_lack(a, &ce);
            }
        if (!sc) {
            alt_reason(a, "%s", ce.msg);
            return;
        }
    }
    sim_costs_free(sc);
}

/* Simulates candidate c unless a bound shows it cannot beat its
 * schedule's best: first the partitioner's, then the simulator's own
 * stage costs. */
static void simulate_candidate(search *s, cand *c)
{
    const plan_opts *o = s->o;
    plan_result *r = s->r;
    plan_alt *a = &r->alt[c->sched];
    if (!c->ok) {
        alt_reason(a, "out of memory: no partition fits %s", s->g->name);
        return;
    }
    if (!o->exhaustive && a->feasible && c->lb_s >= a->iteration_s) {
        r->pruned++;
        return;
    }
    sim_cost_opts co = sim_plan_cost_opts(&c->plan);
    co.fold = !o->no_fold;
    sim_size z = sim_costs_size(s->t, c->plan.n_stages, c->pp, &co, c->n_mb,
                                c->plan.n_minibatches);
    if (z.bytes > SIM_SIZE_BUDGET_BYTES) {
        char why[160];
        snprintf(why, sizeof why, "too large to simulate: about %.1f GB "
                 "(%.0f million tasks; a simulation may use %.0f GB)",
                 z.bytes / 1e9, z.tasks / 1e6, SIM_SIZE_BUDGET_BYTES / 1e9);
        alt_reason(a, "%s", why);
        return;
    }
    sim_costs *sc = candidate_costs(s, c);
    if (!sc) return;
    if (!o->exhaustive && a->feasible &&
        costs_lower_bound(sc, &c->plan) >= a->iteration_s) {
        /* The simulator's own stage times already rule it out. */
        r->pruned++;
        sim_costs_free(sc);
        return;
    }
    r->simulated++;
    if (o->state_tiers) {
        run_tiered(s, c, sc);
        return;
    }
    /* Once its schedule has a plan or a reason, a candidate over memory
     * changes nothing but the advice for when nothing fits (settled at
     * the end): its run may end at the first overflow. */
    run_candidate(s, c, sc, a->feasible || a->reason[0]);
}

/* Offload candidate c of schedule k: dp ranks of microbatch mbs, a stage
 * per layer, the states on `tier`; its partition made (-1, e says why,
 * where none is). */
static int offload_cand(search *s, int k, int dp, int mbs, int rc, int tier,
                        cand *c, util_err *e)
{
    memset(c, 0, sizeof *c);
    c->sched = (sim_sched)k;
    c->pp = c->tp = 1;
    c->dp = dp;
    c->mbs = mbs;
    c->n_mb = s->r->batch / (mbs * dp);
    c->recompute = rc;
    plan_skeleton(c, s->o, s->m, s->model_name, s->hw_name);
    c->plan.tier = tier;
    if (s->t->n_gpus > dp) c->plan.gpus_used = dp;
    sim_plan_stages(&c->plan, s->m->n_layers);
    if (sim_partition_even(s->m, c->plan.n_stages, c->plan.first_op,
                           c->plan.last_op, e)) {
        sim_plan_free(&c->plan);
        return -1;
    }
    return 0;
}

/* Schedule k's best offload plan on one GPU run data parallel on 2, 4,
 * ... of the server's gps GPUs, each rank over its share of the batch:
 * its tier, activation swaps and microbatch kept (halved where a rank's
 * share needs it; a rank's GPU holds what the one GPU did, host DRAM
 * the ranks' swaps), each width simulated once. */
static void offload_ranks(search *s, int k, int gps)
{
    plan_result *r = s->r;
    /* what the one-GPU plan says (a faster one found here replaces it) */
    const sim_plan *one = &r->alt[k].plan;
    const int mbs1 = one->mbs, rc = one->recompute, tier = one->tier;
    const int sk = one->swap_ckpt, sf = one->swap_full;
    for (int dp = 2; dp <= gps; dp *= 2) {
        /* widths left untried: the search was cut short */
        if (expired(s)) {
            r->cut_short = 1;
            break;
        }
        /* the microbatch, or the largest below it a rank's share takes */
        int mbs = mbs1;
        while (mbs > 1 && r->batch % (mbs * dp)) mbs /= 2;
        if (r->batch % (mbs * dp)) continue;
        cand c;
        util_err e;
        if (offload_cand(s, k, dp, mbs, rc, tier, &c, &e)) continue;
        c.plan.swap_ckpt = sk;
        c.plan.swap_full = sf;
        sim_costs *sc = plan_costs(&c.plan, s->m, s->t, r->reserve_bytes, 0,
                                   &e);
        r->candidates++;
        r->covered++;
        if (sc) {
            r->simulated++;
            run_candidate(s, &c, sc, 0);
        }
        sim_plan_free(&c.plan);
    }
}

/* The offload schedules a request names (--schedule): one GPU, a stage
 * per layer recomputed from its input, every power-of-two microbatch
 * size the batch allows (or the one asked), the states where the
 * schedule keeps them by default, the activations swapped as
 * sim_offload_swap_search chooses; each simulated, the fastest that fits
 * its schedule's best. */
static void offload_search(search *s)
{
    const plan_opts *o = s->o;
    plan_result *r = s->r;
    for (int k = 0; k < SIM_SCHED_COUNT; k++) {
        if (!(s->offload & (1u << k))) continue;
        /* offload candidates are not among those the candidates count
         * (they are made here): schedules left are a search cut short */
        if (expired(s)) {
            r->cut_short = 1;
            break;
        }
        plan_alt *a = &r->alt[k];
        a->tried = 1;
        if (o->pp > 1 || o->tp > 1 || o->zero > 0 || o->fsdp) {
            alt_reason(a, "%s", "offloads each GPU's whole model: pp and "
                       "tp 1, its own partitioning (no --zero)");
            continue;
        }
        /* data-parallel ranks on one server, powers of two (or as asked):
         * they share its host and drives */
        int gps = s->t->gpus_per_server > 0 ? s->t->gpus_per_server
                                            : s->t->n_gpus;
        if (gps > s->t->n_gpus) gps = s->t->n_gpus;
        if (gps > SIM_OFL_MAX_RANKS) gps = SIM_OFL_MAX_RANKS;
        if (o->dp > gps) {
            char why[96];
            snprintf(why, sizeof why, "dp %d: its ranks share one server's "
                     "host (%d GPUs)", o->dp, gps);
            alt_reason(a, "%s", why);
            continue;
        }
        /* the tiers: as asked, else DRAM and (not ZeRO-Offload's) the
         * drives where the server has them */
        int tiers[2], nt = 0;
        if (o->offload_tier != SIM_TIER_AUTO) {
            tiers[nt++] = o->offload_tier;
        } else {
            if (k != SIM_SCHED_ZERO_OFFLOAD && server_drives(s->t))
                tiers[nt++] = SIM_TIER_NVME;
            tiers[nt++] = SIM_TIER_DRAM;
        }
        /* powers of two, or the one size asked for; on one GPU, or the
         * data-parallel width asked for */
        const int dp = o->dp > 0 ? o->dp : 1;
        for (int q = 0; q < nt; q++)
        for (int mbs = o->mbs > 0 ? o->mbs : 1; mbs <= r->batch / dp;
             mbs = o->mbs > 0 ? INT_MAX : 2 * mbs) {
            if (r->batch % (mbs * dp)) continue;
            if (expired(s)) {
                r->cut_short = 1;
                break;
            }
            cand c;
            util_err e;
            if (offload_cand(s, k, dp, mbs, o->recompute >= 0 ? o->recompute
                                                              : SIM_RC_FULL,
                             tiers[q], &c, &e)) {
                alt_reason(a, "%s", e.msg);
                alt_lack(a, &e);
                continue;
            }
            r->candidates++;
            r->covered++;
            sim_costs *sc = plan_costs(&c.plan, s->m, s->t, r->reserve_bytes,
                                       0, &e);
            if (sc && sim_offload_swap_search(&c.plan, sc, s->t, &e)) {
                sim_costs_free(sc);
                sc = NULL;
            }
            if (!sc) {
                alt_reason(a, "%s", e.msg);
                alt_lack(a, &e);
            } else {
                r->simulated++;
                run_candidate(s, &c, sc, 0);
            }
            sim_plan_free(&c.plan);
        }
        if (o->dp <= 0 && a->feasible) offload_ranks(s, k, gps);
    }
}

/* Which candidates are simulated, most promising first, until all are
 * decided or the time limit ends the search. */
static void simulate_survivors(search *s)
{
    plan_result *r = s->r;
    for (int i = 0; i < s->ncand; i++) {
        progress(s, "simulating", i, s->ncand);
        if (expired(s) || !s->cs[i].partitioned) {
            r->cut_short = 1;
            if (expired(s)) break;
            continue;
        }
        simulate_candidate(s, &s->cs[i]);
        r->covered++;
    }
    progress_end(s);
}

/* Runs over memory were ended at the first overflow; where nothing fits,
 * the advice needs their whole peaks, so those runs are finished now
 * (their schedules' reasons were set before them and stay). */
static void settle_needs(search *s)
{
    for (int k = 0; k < SIM_SCHED_COUNT; k++)
        if (s->r->alt[k].feasible) return;
    if (s->r->cut_short) return; /* the advice is the time limit's */
    for (int i = 0; i < s->ncand; i++) {
        sim_costs *sc;
        if (s->cs[i].stopped && (sc = candidate_costs(s, &s->cs[i])))
            run_candidate(s, &s->cs[i], sc, 0);
    }
}

/* The offload schedules of the request: those --schedule names; without
 * --schedule, all of them where one GPU alone runs the plan as asked (a
 * CPU device's memory is the host's: nothing to offload to). */
static unsigned offload_mask(const plan_opts *o, const prof_topo *t)
{
    unsigned all = 0;
    for (int k = 0; k < SIM_SCHED_COUNT; k++)
        if (sim_sched_offload((sim_sched)k)) all |= 1u << k;
    if (o->sched_mask) return o->sched_mask & all;
    const prof_gpu *g = prof_topo_gpu(t, 0);
    if (g->form == PROF_FORM_CPU || o->pp > 1 || o->dp > 1 || o->tp > 1 ||
        o->zero > 0 || o->fsdp)
        return 0;
    return all;
}

/* Appends to the advice why Fuyou's offload (the one that needs the
 * least of the GPU and of DRAM), else another, did not fit. */
static void offload_why(plan_result *r)
{
    static const sim_sched order[] = {SIM_SCHED_FUYOU, SIM_SCHED_ZERO_INFINITY,
                                      SIM_SCHED_ZERO_OFFLOAD};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
        const plan_alt *a = &r->alt[order[i]];
        if (!a->tried || !a->reason[0]) continue;
        size_t l = strlen(r->advice);
        snprintf(r->advice + l, sizeof r->advice - l, " (%s)", a->reason);
        return;
    }
}

/* Whether an asynchronous schedule may be chosen: synchronous training
 * unless asked otherwise (the weights a user gets are data-parallel
 * training's), or where the schedules named are asynchronous alone. */
static int async_allowed(const plan_opts *o)
{
    if (o->allow_async || !o->sched_mask) return o->allow_async;
    for (int k = 0; k < SIM_SCHED_COUNT; k++)
        if ((o->sched_mask & (1u << k)) && !sim_sched_async((sim_sched)k))
            return 0;
    return 1;
}

/* Whether a plan keeps model states off its GPUs (an offload schedule,
 * or a stage's on a host tier). */
static int plan_offloads(const sim_plan *p)
{
    if (sim_sched_offload(p->sched)) return 1;
    for (int s = 0; p->state_tier && s < p->n_stages; s++)
        if (p->state_tier[s]) return 1;
    return 0;
}

/* An offloading plan is chosen over one that keeps its states on the
 * GPUs only when this much faster: the host's memory and drives it
 * leans on are a machine's to share, and its gain within the
 * simulator's error says little */
#define OFFLOAD_GAIN 0.02

/* The best schedule wins; the others say why they lost or never applied;
 * with nothing feasible, the advice says how much memory the best split
 * needs. */
static void choose_best(search *s)
{
    plan_result *r = s->r;
    const prof_gpu *g = s->g;
    int async_ok = async_allowed(s->o);
    for (int k = 0; k < SIM_SCHED_COUNT; k++) {
        plan_alt *a = &r->alt[k];
        if (!a->feasible) {
            /* A schedule that never applied says why; one that did says
             * what stopped its candidates. */
            if (!a->tried)
                snprintf(a->reason, sizeof a->reason, "%s",
                         a->na_reason[0] ? a->na_reason : "not searched");
            else if (!a->reason[0] && r->cut_short)
                snprintf(a->reason, sizeof a->reason, "not reached within "
                         "the time limit");
            continue;
        }
        if (!async_ok && sim_sched_async((sim_sched)k)) continue;
        if (!r->found || a->samples_per_s > r->alt[r->best].samples_per_s) {
            r->found = 1;
            r->best = (sim_sched)k;
        }
    }
    /* an offloading best within OFFLOAD_GAIN of the fastest plan that
     * keeps its states on the GPUs yields to that one */
    int kept = -1;
    if (r->found && plan_offloads(&r->alt[r->best].plan))
        for (int k = 0; k < SIM_SCHED_COUNT; k++) {
            const plan_alt *a = &r->alt[k];
            if (!a->feasible || plan_offloads(&a->plan) ||
                (!async_ok && sim_sched_async((sim_sched)k)))
                continue;
            if (kept < 0 || a->samples_per_s > r->alt[kept].samples_per_s)
                kept = k;
        }
    if (kept >= 0 && r->alt[kept].samples_per_s >=
                         (1 - OFFLOAD_GAIN) * r->alt[r->best].samples_per_s)
        r->best = (sim_sched)kept;
    int async_fits = 0;
    for (int k = 0; k < SIM_SCHED_COUNT; k++)
        async_fits |= r->alt[k].feasible && sim_sched_async((sim_sched)k);
    if (r->found) {
        double best = r->alt[r->best].samples_per_s;
        for (int k = 0; k < SIM_SCHED_COUNT; k++) {
            plan_alt *a = &r->alt[k];
            if (!a->feasible || k == (int)r->best) continue;
            if (!async_ok && sim_sched_async((sim_sched)k))
                snprintf(a->reason, sizeof a->reason, "async (stale): "
                         "%.1f%%", 100 * a->samples_per_s / best);
            else if (a->samples_per_s > best)
                snprintf(a->reason, sizeof a->reason, "%.1f%% of the best's "
                         "speed, offloading its states: under %.0f%% faster, "
                         "so the chosen keeps them on the GPU%s",
                         100 * a->samples_per_s / best, 100 * OFFLOAD_GAIN,
                         s->t->n_gpus > 1 ? "s" : "");
            else
                snprintf(a->reason, sizeof a->reason, "slower: %.1f%% of the "
                         "best", 100 * a->samples_per_s / best);
        }
    } else if (async_fits) {
        snprintf(r->advice, sizeof r->advice, "only asynchronous schedules "
                 "fit %d x %s (2BW or asynchronous Mixed-pipe: no flush, "
                 "each step on weights one or more updates old); --async "
                 "allows them", s->t->n_gpus, g->name);
    } else if (!r->candidates) {
        /* nothing asked for applies to the machine: say why, not that it
         * does not fit (every schedule has the layouts' reasons) */
        const char *why = r->alt[0].na_reason;
        if (!strncmp(why, "not applicable: ", 16)) why += 16;
        snprintf(r->advice, sizeof r->advice, "no plan applies to %d x %s "
                 "with the options given: %s; give fewer options or other "
                 "schedules", s->t->n_gpus, g->name,
                 why[0] ? why : "no layout takes them");
    } else if (r->cut_short) {
        snprintf(r->advice, sizeof r->advice, "the time limit of %g s ended "
                 "the search before it found a plan that fits (%ld of %ld "
                 "candidates partitioned, %ld simulated); give it more time",
                 s->o->time_limit_s, s->partitioned, r->candidates,
                 r->simulated);
    } else {
        char need[96], have[32];
        double gib = 1024.0 * 1024 * 1024;
        const char *unit = prof_topo_unit(s->t);  /* GPU, or device */
        if (isfinite(r->min_need_bytes))
            snprintf(need, sizeof need, "the best split needs %.1f GiB per "
                     "%s", r->min_need_bytes / gib, unit);
        else
            snprintf(need, sizeof need, "no split of it fits a %s", unit);
        snprintf(have, sizeof have, "%.1f GiB", g->mem_bytes / gib);
        /* full training's model states alone, spread over every GPU (as
         * ZeRO-3 over all of them would), past what a GPU holds: no
         * recomputation or batch helps */
        double state = s->o->state_bytes_per_param > 0
                     ? s->o->state_bytes_per_param : 16;
        double spread = s->m->params * state / s->t->n_gpus;
        int states = prof_finetune_full(&s->m->ft) &&
                     spread + r->reserve_bytes > g->mem_bytes;
        char st[200] = "";
        if (states)
            snprintf(st, sizeof st, "; its model states alone (%g bytes a "
                     "parameter) take %.1f GiB a %s even spread over all "
                     "%d, so recomputation and the batch cannot help",
                     state, spread / gib, unit, s->t->n_gpus);
        /* what else to try, "or" before the last: offload only where
         * no offload is searched, here or next (plan_search's stage
         * tiers over several GPUs: it said to offload, then that
         * offloading fit, or did not fit either), fused attention where
         * a layer's scores are kept and --no-flash-attn did not ask for
         * them */
        int tiers_next = s->t->n_gpus > 1 && s->o->zero < 0 &&
                         !s->o->fsdp && g->form != PROF_FORM_CPU;
        const char *try[6];
        int nt = 0;
        char more[16];
        snprintf(more, sizeof more, "more %ss", unit);
        try[nt++] = more;
        if (!states) {
            try[nt++] = "recomputation";
            try[nt++] = "a smaller batch";
            if (!s->m->spec.flash_attn && s->o->flash >= 0)
                try[nt++] = "fused attention (--flash-attn)";
        }
        /* sharding excludes the offload schedules (they partition the
         * states themselves): the advice says to drop it */
        if (!offload_mask(s->o, s->t) && !tiers_next)
            try[nt++] = s->o->zero > 0 || s->o->fsdp
                            ? "offload (without --zero and --fsdp, which "
                              "it replaces)"
                            : "offload";
        if (prof_finetune_full(&s->m->ft))
            try[nt++] = "training fewer parameters (--finetune lora:16, "
                        "qlora:16 or auto)";
        char tl[256] = "";
        for (int i = 0; i < nt; i++) {
            size_t l = strlen(tl);
            snprintf(tl + l, sizeof tl - l, "%s%s",
                     !i ? "" : i == nt - 1 ? ", or " : ", ", try[i]);
        }
        snprintf(r->advice, sizeof r->advice,
                 "%s does not fit %d x %s: %s (with the %.1f GiB reserve); "
                 "%s has %s%s; try %s%s",
                 s->m->spec.name, s->t->n_gpus, g->name, need,
                 r->reserve_bytes / gib, g->name, have, st, tl,
                 s->offload ? "; offloading the model states to the host "
                              "does not fit either" : "");
    if (!r->found && s->offload) offload_why(r);
    }
}

static void search_free(search *s)
{
    for (int i = 0; i < s->ncand; i++) sim_plan_free(&s->cs[i].plan);
    free(s->cs);
    for (int i = 0; i <= MAX_LOG_MBS + 1; i++)
        if (s->ot[i].f) op_times_free(&s->ot[i]);
    units_free(&s->lay);
    units_free(&s->fine);
    plan_mixed_memo_free(s->memo);
}

static int search_once(const prof_model *m, const prof_topo *t,
                       const char *model_name, const char *hw_name,
                       const plan_opts *o, unsigned offload, plan_result *r,
                       util_err *e)
{
    search s;
    memset(&s, 0, sizeof s);
    memset(r, 0, sizeof *r);
    s.offload = offload;
    s.m = m;
    s.t = t;
    s.model_name = model_name;
    s.hw_name = hw_name;
    s.o = o;
    s.r = r;
    s.t0 = now_s();
    s.deadline = o->time_limit_s > 0 ? s.t0 + o->time_limit_s : INFINITY;
    if (check_request(&s, e)) return -1;
    units_make(m, 0, &s.lay);
    units_make(m, 1, &s.fine);
    s.memo = plan_mixed_memo_new();
    enumerate_candidates(&s);
    bound_candidates(&s);
    simulate_survivors(&s);
    offload_search(&s);
    settle_needs(&s);
    choose_best(&s);
    search_free(&s);
    r->seconds = now_s() - s.t0;
    return 0;
}

/* The rest of the time limit after `spent` seconds. */
static plan_opts opts_after(const plan_opts *o, double spent)
{
    plan_opts x = *o;
    if (o->time_limit_s > 0)
        x.time_limit_s = fmax(1e-3, o->time_limit_s - spent);
    return x;
}

int plan_model_spec(const char *model, const plan_opts *po,
                    prof_model_spec *s, util_err *e)
{
    if (prof_model_spec_get(model, s, e)) return -1;
    prof_spec_set_math(s, po->math);
    prof_spec_set_flash(s, po->flash);
    return prof_spec_set_seq(s, po->seq_len, e);
}

int plan_search(const prof_model *m, const prof_topo *t, const char *model_name,
                const char *hw_name, const plan_opts *o, plan_result *r,
                util_err *e)
{
    /* (each candidate's refusal read as its not fitting) */
    if (sim_state_bytes_check(m, o->state_bytes_per_param, e)) return -1;
    unsigned ofl = offload_mask(o, t);
    /* one GPU: offload competes with keeping everything on it */
    unsigned now = t->n_gpus == 1 ? ofl : o->sched_mask & ofl;
    if (o->zero >= 0 || o->fsdp)
        return search_once(m, t, model_name, hw_name, o, now, r, e);
    /* Unsharded plans first: sharding is searched where none fits, so a
     * plan shards only what memory asks (and a user asks with --zero or
     * --fsdp) */
    plan_opts o0 = *o;
    o0.zero = 0;
    if (search_once(m, t, model_name, hw_name, &o0, now, r, e)) return -1;
    /* no layout takes the options (r->advice says why): sharding, stage
     * tiers or offload would not either */
    if (r->found || r->cut_short || t->n_gpus == 1 || !r->candidates)
        return 0;
    double spent = r->seconds;
    plan_result_free(r);
    plan_opts o1 = opts_after(o, spent);
    if (search_once(m, t, model_name, hw_name, &o1, now, r, e)) return -1;
    spent += r->seconds;
    r->seconds = spent;
    if (r->found || r->cut_short) return 0;
    /* Nothing fits the GPUs, sharded or not: the stages that overflow
     * keep their optimizer state on the host (stage tiers), beside one
     * GPU offloading all its model states (the offload schedules); the
     * faster wins */
    /* CPU devices: their memory is the host's, nothing to move there */
    if (prof_topo_gpu(t, 0)->form == PROF_FORM_CPU) return 0;
    char why[sizeof r->advice];
    snprintf(why, sizeof why, "%s", r->advice);
    plan_result_free(r);
    plan_opts ot = opts_after(o, spent);
    ot.zero = 0;
    ot.state_tiers = 1;
    if (search_once(m, t, model_name, hw_name, &ot, ofl, r, e)) return -1;
    r->seconds += spent;
    if (r->found && !sim_sched_offload(r->best)) {
        const sim_plan *bp = &r->alt[r->best].plan;
        int n = 0, nv = 0;
        for (int k = 0; k < bp->n_stages; k++) {
            n += bp->state_tier[k] != 0;
            nv += bp->state_tier[k] == SIM_TIER_NVME;
        }
        snprintf(r->note, sizeof r->note, "no plan keeps its model states on "
                 "the GPUs: %s; %d of %d stages keep their fp32 weights and "
                 "Adam moments in host %s and step them on the CPU", why, n,
                 bp->n_stages, nv == n ? "NVMe" : nv ? "DRAM and on NVMe"
                                                   : "DRAM");
    } else if (r->found) {
        int dp = r->alt[r->best].plan.dp;
        char dps[48] = "one GPU";
        if (dp > 1) snprintf(dps, sizeof dps, "%d data-parallel GPUs", dp);
        snprintf(r->note, sizeof r->note, "no plan keeps its model states on "
                 "the GPUs: %s; %s offloading them to the host fit%s, "
                 "faster than pipeline stages keeping their optimizer state "
                 "there", why, dps, dp > 1 ? "" : "s");
    } else if (!r->cut_short) {
        snprintf(r->advice, sizeof r->advice, "%s; offloading the model "
                 "states to the host does not fit either", why);
        if (ofl) offload_why(r);
    }
    return 0;
}

/* Scales u's servers' DRAM and drives to f times t's (a node without
 * any, f GiB), an exabyte a node for f infinite. */
static void host_scale(const prof_topo *t, prof_topo *u, double f)
{
    for (int i = 0; i < u->n_nodes && i < t->n_nodes; i++)
        if (u->nodes[i].kind == PROF_NODE_DRAM ||
            u->nodes[i].kind == PROF_NODE_NVME)
            u->nodes[i].capacity_bytes =
                isinf(f) ? 1e18
                         : fmax(t->nodes[i].capacity_bytes, 1 << 30) * f;
}

/* What ru's plan holds per server (the busiest, as the costs count it)
 * against what t's server 0 has. Returns 0, or -1 on an error. */
static int host_needs(const plan_result *ru, const prof_model *m,
                      const prof_topo *t, const prof_topo *u,
                      plan_host_short *hs, util_err *e)
{
    const sim_plan *p = &ru->alt[ru->best].plan;
    sim_costs *cs = NULL;
    sim_ir *ir = NULL;
    sim_engine *en = NULL;
    sim_result res;
    int rc = plan_simulate(p, m, u, ru->reserve_bytes, 0, &cs, &ir, &en,
                           &res, e);
    if (!rc) {
        hs->sched = ru->best;
        hs->dram_need = cs->host_bytes;
        hs->nvme_need = cs->nvme_bytes;
        hs->dram_have = prof_topo_server_dram(t, 0);
        hs->nvme_have = 0;
        for (int i = 0; i < t->n_nodes; i++)
            if (t->nodes[i].kind == PROF_NODE_NVME && t->nodes[i].server == 0)
                hs->nvme_have += t->nodes[i].capacity_bytes;
    }
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(cs);
    return rc;
}

/* One search of plan_search_host_short's on u: the pass of plan_search
 * where host capacity can lack. With several GPUs and nothing sharded by
 * request that is the last, stage tiers beside the offload schedules;
 * the passes before it failed for the GPUs and would again. */
static int host_pass(const prof_model *m, const prof_topo *u,
                     const char *model_name, const char *hw_name,
                     const plan_opts *x, plan_result *ru, util_err *e)
{
    if (u->n_gpus == 1 || x->zero >= 0 || x->fsdp ||
        prof_topo_gpu(u, 0)->form == PROF_FORM_CPU)
        return plan_search(m, u, model_name, hw_name, x, ru, e);
    plan_opts ot = *x;
    ot.zero = 0;
    ot.state_tiers = 1;
    return search_once(m, u, model_name, hw_name, &ot, offload_mask(x, u),
                       ru, e);
}

/* How many times the host it has a plan's needs are (the tier that asks
 * most; from a GiB, as host_scale grows a host). */
static double host_factor(const plan_host_short *hs)
{
    return fmax(hs->dram_need / fmax(hs->dram_have, 1 << 30),
                hs->nvme_need / fmax(hs->nvme_have, 1 << 30));
}

/* One search with the host f times t's, on the schedules of mask lacked,
 * the time limit what is left after *spent (which grows by it). Returns
 * 1 with *hs the plan's needs where a plan fits, 0 where none does
 * (*stop: the limit ended the search), -1 on an error. */
static int host_try(const prof_model *m, const prof_topo *t, prof_topo *u,
                    const char *model_name, const char *hw_name,
                    const plan_opts *o, unsigned lacked, int async_ok,
                    double f, double *spent, plan_host_short *hs, int *stop,
                    util_err *e)
{
    host_scale(t, u, f);
    plan_opts x = opts_after(o, *spent);
    x.progress = 0;
    x.sched_mask = lacked;
    x.allow_async = async_ok;
    plan_result ru;
    if (host_pass(m, u, model_name, hw_name, &x, &ru, e)) return -1;
    *spent += ru.seconds;
    *stop = ru.cut_short;
    int found = ru.found;
    if (found && host_needs(&ru, m, t, u, hs, e)) found = -1;
    plan_result_free(&ru);
    return found;
}

int plan_search_host_short(const prof_model *m, const prof_topo *t,
                           prof_topo *u, const char *model_name,
                           const char *hw_name, const plan_opts *o,
                           const plan_result *r, plan_host_short *hs,
                           util_err *e)
{
    memset(hs, 0, sizeof *hs);
    if (r->found || r->cut_short) return 0;
    /* Only the schedules some candidate of which lacked host capacity
     * can fit with more of it; the others' candidates failed for the
     * GPUs. Asynchronous ones count only where they could be chosen
     * (host_try allows them then: the mask may name them alone). */
    int async_ok = async_allowed(o);
    unsigned lacked = 0;
    for (int k = 0; k < SIM_SCHED_COUNT; k++)
        if (r->alt[k].lack && (async_ok || !sim_sched_async((sim_sched)k)))
            lacked |= 1u << k;
    if (!lacked) return 0;
    /* each search has what is left of the time limit; one it ends
     * settles nothing (exit 1 with the first search's advice) */
    double spent = r->seconds;
    int stop = 0;
    /* First unbounded: where nothing fits even so, the GPUs are what is
     * short */
    int found = host_try(m, t, u, model_name, hw_name, o, lacked, async_ok,
                         INFINITY, &spent, hs, &stop, e);
    if (found < 0) return -1;
    if (stop) {
        memset(hs, 0, sizeof *hs);
        hs->cut = 1;
        return 0;
    }
    if (!found || (!hs->dram_need && !hs->nvme_need)) return 0;
    /* Then the host grown until a plan fits, so what it names is a
     * plan's that asks little more than the host has, not the fastest
     * plan's with a host without end (Fuyou's with every activation
     * swapped, say): from the least factor a refused candidate asked
     * (no plan fits with less; that one, where its other tier holds, fits
     * with it), doubled; the unbounded plan fits by the factor its needs
     * give, where the growing ends */
    double top = host_factor(hs);
    double f0 = INFINITY;
    for (int k = 0; k < SIM_SCHED_COUNT; k++)
        if (lacked & (1u << k)) f0 = fmin(f0, r->alt[k].lack_by);
    f0 = f0 > 1 && isfinite(f0) ? f0 * (1 + 1e-9) : 2;
    double lo = 0;              /* the largest factor that fit nothing */
    found = 0;
    for (double f = f0; f < 2 * top; f *= 2) {
        found = host_try(m, t, u, model_name, hw_name, o, lacked, async_ok,
                         f, &spent, hs, &stop, e);
        if (found < 0) return -1;
        /* cut short: the unbounded plan's needs stand */
        if (found || stop) break;
        lo = f;
    }
    if (stop && !found) hs->cut = 2;
    /* found after a factor that fit nothing: twice more halfway between
     * the largest that fit nothing and what the plan found needs, for a
     * host nearer the least (a plan found there needs less) */
    for (int b = 0; found && lo > 0 && b < 2 && !stop; b++) {
        double need = host_factor(hs);
        if (need <= 1.05 * lo) break;
        double mid = (lo + need) / 2;
        plan_host_short h = *hs;
        int r2 = host_try(m, t, u, model_name, hw_name, o, lacked, async_ok,
                          mid, &spent, &h, &stop, e);
        if (r2 < 0) return -1;
        if (r2 > 0) *hs = h;
        else lo = mid;
    }
    return hs->dram_need > hs->dram_have || hs->nvme_need > hs->nvme_have;
}

void plan_result_free(plan_result *r)
{
    if (!r) return;
    for (int s = 0; s < SIM_SCHED_COUNT; s++)
        if (r->alt[s].feasible) sim_plan_free(&r->alt[s].plan);
}
