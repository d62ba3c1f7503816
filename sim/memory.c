/* Memory per device over time. Static: weights, gradients and optimizer
 * state of the device's stages. Dynamic: activations allocated as F runs
 * and freed as the backward runs (B frees what W does not need, W the
 * rest at its end), each in SIM_MEM_STEPS steps of equal bytes timed by
 * the stage's ops (sim_stage_cost.mem_f, mem_b), as a framework's
 * allocations grow and shrink op by op; what a task
 * holds only while it runs (working sets) is taken at its start and
 * given back at its end. A recomputed forward (one a recompute follows)
 * holds its kept bytes (checkpoints) plus, while it runs, its largest
 * working set, and keeps only the former; the recompute adds one layer's
 * activations
 * (layers are recomputed one at a time, each just before its backward),
 * held to the backward's end; its ops free theirs as their backward ends
 * (what the backward holds beyond it, bwd_ws_bytes, falls by them until
 * the next layer's recompute; split, the inputs a W reads stay). A
 * forward also holds, while it runs,
 * the largest transient of its ops (the unfused loss's fp32 copies; the
 * loss is never recomputed; QLoRA's dequantized weight), and a backward
 * its ops' (bwd_ws, each op's dequantized weight beside what it holds).
 * Receive
 * buffers live from the transfer's start to their consumer's start (the
 * consumer takes the tensor over), a gradient bucket's last ring step
 * to its end (copied into place, the backward going on); every extra
 * weight version alive (stashing) costs one more copy of the stage's
 * weights. Under ZeRO the
 * static state is the GPU's shard; ZeRO-3's gathered parameters are held
 * from their all-gather's start to the end of the compute using them
 * (sim_ir.bufs), and the steps of sharded collectives land in those
 * buffers, the sharded gradients or the weights, so they take no receive
 * buffer of their own; under ZeRO-2 and 3 a task making weight gradients
 * holds two layers' unsharded ones (the one computing, the one being
 * reduce-scattered). Offloaded
 * (sim_add_offload), the GPU keeps no state but ZeRO-Offload's fp16
 * weights; fetched weights and outgoing gradients are buffers too, and a
 * swapped activation is a hole (sim_ir_hole) from its copy out to its
 * copy back. A pipeline stage with its optimizer state on a host tier
 * (sim_add_stage_tiers) keeps its weights and gradients only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/engine_int.h"

/* Whether compute task i (F: a successor, B or BW: a dependency) is a
 * recompute of its stage and microbatch. */
static int recomputed(const sim_ir *ir, int i, int succ)
{
    const sim_task *t = &ir->tasks[i];
    const int32_t *l = succ ? ir->succ + ir->succ_off[i]
                            : ir->deps + t->dep_off;
    int n = succ ? ir->succ_off[i + 1] - ir->succ_off[i] : t->n_dep;
    for (int k = 0; k < n; k++) {
        const sim_task *u = &ir->tasks[l[k]];
        if (u->kind == SIM_RECOMP && u->stage == t->stage &&
            u->mb == t->mb && u->minibatch == t->minibatch)
            return 1;
    }
    return 0;
}

void sim_mem_setup(sim_engine *e)
{
    const sim_ir *ir = e->ir;
    const sim_costs *c = e->c;
    memset(e->mem_start, 0, sizeof(double) * (size_t)e->n);
    memset(e->mem_end, 0, sizeof(double) * (size_t)e->n);
    memset(e->mem_ramp, 0, sizeof(double) * (size_t)e->n);
    memset(e->static_bytes, 0, sizeof(double) * (size_t)e->nd);
    memset(e->pending0, 0, sizeof(int32_t) * (size_t)e->ns * e->vstride);
    /* offloaded, the GPU keeps no state (ZeRO-Offload: its fp16
     * weights): fetched weights and gradients on their way out are the
     * IR's buffers (sim_add_offload) */
    for (int s = 0; s < e->ns; s++) {
        const sim_stage_cost *sc = &c->stage[s];
        e->static_bytes[ir->stage_device[s]] +=
            c->offload ? (c->offload == SIM_SCHED_ZERO_OFFLOAD
                          ? sc->weight_bytes : 0)
            : sc->weight_bytes +
              /* whole_shards, ZeRO-2: the shard a buffer
               * (sim_add_sharded) */
              (c->whole_shards && c->zero == 2 ? 0 : sc->grad_bytes) +
              (sc->state_tier ? 0 : sc->opt_bytes);
        /* ZeRO-2 and 3 shard each microbatch's gradient as its backward
         * ends, but a tied table's copies are summed once (sim_add_tied):
         * each holder keeps its copy's gradient whole until then */
        double tied = sc->tied_bytes + sc->rel_bytes[0] + sc->rel_bytes[1];
        if (c->zero >= 2 && tied > 0 && ir->n_minibatches == 1 &&
            !c->offload)
            e->static_bytes[ir->stage_device[s]] +=
                tied / (c->tp > 1 ? c->tp : 1);   /* a rank's rows, heads */
    }
    for (int i = 0; i < e->n; i++) {
        const sim_task *t = &ir->tasks[i];
        const sim_stage_cost *sc = t->stage >= 0 && t->stage < e->ns
                                 ? &c->stage[t->stage] : NULL;
        switch (t->kind) {
        case SIM_F: {
            /* what it keeps, and holds at most while it runs: the kept
             * activations (recomputed: the checkpoints and a layer's
             * working set) beside what a frozen prefix hands to later
             * stages, or, before them, the prefix's tensors
             * (none_ws_bytes); what later stages read of those is held
             * until each send is done */
            int rec = recomputed(ir, i, 1);
            double keep = rec ? sc->keep_bytes : sc->act_bytes;
            double sends = 0;
            for (int k = ir->succ_off[i]; k < ir->succ_off[i + 1]; k++) {
                const sim_task *u = &ir->tasks[ir->succ[k]];
                if (u->kind == SIM_SEND && u->comm == SIM_COMM_PP && !u->grad)
                    sends += u->bytes;
            }
            double sent = sends > 0 ? sc->none_sent_bytes : 0;
            double own = (rec ? keep + sc->fwd_ws_bytes : keep) + sent;
            double run = fmax(own, sc->none_ws_bytes);
            /* what it keeps grows as it runs, op by op; a frozen
             * prefix's tensors, when more, are all there from its start */
            double ramp = own >= sc->none_ws_bytes ? keep : 0;
            e->mem_start[i] += run - ramp;
            e->mem_ramp[i] = ramp;
            e->mem_end[i] -= run - keep - sent;
            for (int k = ir->succ_off[i]; sent > 0 && k < ir->succ_off[i + 1];
                 k++) {
                const sim_task *u = &ir->tasks[ir->succ[k]];
                if (u->kind == SIM_SEND && u->comm == SIM_COMM_PP && !u->grad)
                    e->mem_end[ir->succ[k]] -= sent * u->bytes / sends;
            }
            /* an op's transient (the unfused loss's fp32 copies) */
            e->mem_start[i] += sc->fwd_scratch_bytes;
            e->mem_end[i] -= sc->fwd_scratch_bytes;
            break;
        }
        case SIM_RECOMP:
            e->mem_start[i] += sc->rec_ws_bytes + sc->deq_bytes;
            e->mem_end[i] -= sc->deq_bytes;
            break;
        case SIM_BW:
        case SIM_B: {
            /* its gradients in flight at most, from its start */
            int rec = recomputed(ir, i, 0);
            /* (QLoRA's dequantized weights within, op by op) */
            double ws = sc->bwd_ws_bytes[(t->kind == SIM_BW) | rec << 1];
            e->mem_start[i] += ws;
            e->mem_end[i] -= ws;
            /* its ops' activations freed as their backwards end, from
             * the last op; what a W still reads stays (a split backward
             * under recomputation may keep more than it frees: its
             * layers' recomputed inputs, counted at its end) */
            double freed = (rec ? sc->keep_bytes + sc->rec_ws_bytes
                                : sc->act_bytes) -
                           (t->kind == SIM_B ? sc->wkeep_bytes : 0);
            if (freed > 0) e->mem_ramp[i] = -freed;
            else e->mem_end[i] -= freed;
            if (t->kind == SIM_BW && !c->offload) { /* sharded gradients */
                e->mem_start[i] += sc->rs_bytes;
                e->mem_end[i] -= sc->rs_bytes;
            }
            break;
        }
        case SIM_W:
            e->mem_end[i] -= sc->wkeep_bytes;
            if (!c->offload) {
                e->mem_start[i] += sc->rs_bytes;
                e->mem_end[i] -= sc->rs_bytes;
            }
            break;
        case SIM_RECV: {
            if (t->comm == SIM_COMM_DP && (c->zero > 0 || c->offload))
                break;
            /* a pipeline receive ends as the whole activation on every
             * tensor-parallel rank; an all-reduce step or a tied-table
             * gradient brings each rank its own lane's share */
            double by = t->comm != SIM_COMM_PP && t->lanes > 1
                      ? t->bytes / t->lanes : t->bytes;
            e->mem_start[i] += by;
            /* a gradient bucket's last step is copied into place as it
             * lands, its backward still running */
            if (sim_bucket_landing(ir, i)) {
                e->mem_end[i] -= by;
                break;
            }
            for (int k = ir->succ_off[i]; k < ir->succ_off[i + 1]; k++) {
                int u = ir->succ[k];
                if (ir->tasks[u].device == t->device) {
                    e->mem_start[u] -= by;
                    break;
                }
            }
            break;
        }
        default:
            break;
        }
        if ((t->kind <= SIM_RECOMP) && sc && t->version >= 0 &&
            t->version < e->vstride)
            e->pending0[t->stage * e->vstride + t->version]++;
    }
    for (int b = 0; b < ir->n_bufs; b++) {
        const sim_ir_buf *x = &ir->bufs[b];
        if (x->hole) {
            e->mem_end[x->alloc] -= x->bytes;
            e->mem_start[x->release] += x->bytes;
        } else {
            e->mem_start[x->alloc] += x->bytes;
            e->mem_end[x->release] -= x->bytes;
        }
    }
    /* a forward's input received (handed to it at its start, above) is
     * among what it keeps: its steps take only the rest */
    for (int i = 0; i < e->n; i++)
        if (e->mem_ramp[i] > 0 && e->mem_start[i] < 0) {
            double m = fmin(-e->mem_start[i], e->mem_ramp[i]);
            e->mem_start[i] += m;
            e->mem_ramp[i] -= m;
        }
}

/* Device d's memory at instant t counts toward its peak, the capacity
 * check and the recorded points: at the engine's time (sim_mem_settle),
 * or for ramp steps applied after the engine's time passed t, nothing
 * else having changed d at t (every change of d applies d's steps before
 * it first). Of overflows, the first in time is named, and of those at
 * one instant the first changed (as events: the least seq; a joined
 * step's may precede its instant's first). */
static void settle_at(sim_engine *e, int d, int64_t t, uint64_t seq)
{
    double v = e->mem_cur[d];
    sim_dev_stats *ds = &e->dev[d];
    if (v > ds->peak_bytes) ds->peak_bytes = v;
    if (ds->capacity_bytes > 0 && v > ds->capacity_bytes &&
        (!e->oom || t < e->oom_t || (t == e->oom_t && seq < e->oom_seq))) {
        e->oom = 1;
        e->oom_task = e->mem_task[d];
        e->oom_t = t;
        e->oom_seq = seq;
    }
    if (e->opts.record && e->n_mem < e->cap_mem) {
        if (e->n_mem && e->mem[e->n_mem - 1].t_ns > t) e->mem_late = 1;
        e->mem[e->n_mem++] = (sim_mem_point){t, d, v};
    }
}

/* Device d's ramp steps at or before upto: those of an instant past
 * each counted as that instant (settle_at), those of `now` joining this
 * one's changes unless own (the run stopped: `now` is settled). */
static void steps_apply(sim_engine *e, int d, int64_t upto, int own)
{
    sim_mem_step *q = e->mstep[d];
    int n = e->mstep_n[d], k = 0;
    while (k < n && q[k].t <= upto) {
        int64_t t = q[k].t;
        if (t == e->now && !own) {
            e->mstep_n[d] = 0;      /* sim_mem_add applies no steps */
            uint64_t cur = e->cur_seq;
            for (; k < n && q[k].t == t; k++) {
                e->cur_seq = q[k].seq;
                sim_mem_add(e, d, q[k].delta, q[k].task);
            }
            e->cur_seq = cur;
            break;
        }
        uint64_t seq = q[k].seq;
        for (; k < n && q[k].t == t; k++) {
            e->mem_cur[d] += q[k].delta;
            if (q[k].delta > 0) e->mem_task[d] = q[k].task;
            if (q[k].seq < seq) seq = q[k].seq;
        }
        settle_at(e, d, t, seq);
    }
    if (k) memmove(q, q + k, sizeof *q * (size_t)(n - k));
    e->mstep_n[d] = n - k;
}

void sim_mem_step_add(sim_engine *e, int d, int64_t t, double delta,
                      int task)
{
    if (delta == 0) return;
    uint64_t seq = e->seq++;        /* as its event's would be */
    if (t <= e->now) {
        sim_mem_add(e, d, delta, task);
        return;
    }
    if (e->mstep_n[d] == e->mstep_cap[d]) {
        e->mstep_cap[d] = e->mstep_cap[d] ? 2 * e->mstep_cap[d] : 8;
        e->mstep[d] = util_realloc(e->mstep[d], sizeof(sim_mem_step) *
                                                    (size_t)e->mstep_cap[d]);
    }
    /* in time order, after those of the same time */
    sim_mem_step *q = e->mstep[d];
    int i = e->mstep_n[d]++;
    while (i > 0 && q[i - 1].t > t) {
        q[i] = q[i - 1];
        i--;
    }
    q[i] = (sim_mem_step){t, seq, delta, task};
}

typedef struct mem_ix { sim_mem_point p; size_t i; } mem_ix;

static int mem_ix_cmp(const void *a, const void *b)
{
    const mem_ix *x = a, *y = b;
    if (x->p.t_ns != y->p.t_ns) return x->p.t_ns > y->p.t_ns ? 1 : -1;
    return (x->i > y->i) - (x->i < y->i);
}

void sim_mem_steps_flush(sim_engine *e, int64_t upto)
{
    for (int d = 0; d < e->nd; d++)
        if (e->mstep_n[d]) steps_apply(e, d, upto, 1);
    if (!e->mem_late) return;
    /* each device's points are in time order already (a step applies
     * before any later change of its device): order them by time, each
     * device's kept (their index breaks ties) */
    sim_mem_point *m = e->mem;
    size_t n = (size_t)e->n_mem;
    mem_ix *v = util_malloc(sizeof *v * (n + 1));
    for (size_t i = 0; i < n; i++) v[i] = (mem_ix){m[i], i};
    qsort(v, n, sizeof *v, mem_ix_cmp);
    for (size_t i = 0; i < n; i++) m[i] = v[i].p;
    free(v);
    e->mem_late = 0;
}

void sim_mem_add(sim_engine *e, int d, double delta, int task)
{
    if (delta == 0) return;
    if (e->mstep_n[d]) steps_apply(e, d, e->now, 0);
    e->mem_cur[d] += delta;
    if (!(e->mem_dirty[d] & 1)) {
        e->mem_dirty[d] |= 1;
        e->mem_dirty[e->nd + e->n_dirty++] = d;
        e->mem_seq[d] = e->cur_seq;
    } else if (e->cur_seq < e->mem_seq[d]) {
        e->mem_seq[d] = e->cur_seq;     /* a step joined: its event's */
    }
    /* an overflow is named for the last task that added */
    if (delta > 0 || !(e->mem_dirty[d] & 2)) e->mem_task[d] = task;
    if (delta > 0) e->mem_dirty[d] |= 2;
}

void sim_mem_settle(sim_engine *e)
{
    for (int k = 0; k < e->n_dirty; k++) {
        int d = e->mem_dirty[e->nd + k];
        e->mem_dirty[d] = 0;
        settle_at(e, d, e->now, e->mem_seq[d]);
    }
    e->n_dirty = 0;
}

void sim_mem_task_end(sim_engine *e, int id)
{
    const sim_task *t = &e->ir->tasks[id];
    int s = t->stage;
    if (s < 0 || s >= e->ns) return;
    /* a version of the weights that train (frozen ones never change) */
    double wb = e->c->stage[s].weight_bytes - e->c->stage[s].frozen_bytes;
    int d = t->device;
    if (t->kind == SIM_OPT) {
        int old = e->cur_ver[s]++;
        /* the old version dies at once unless in-flight work still
         * uses it (stashing): then both are alive */
        if (old < e->vstride && e->pending[s * e->vstride + old] > 0) {
            e->live[s]++;
            sim_mem_add(e, d, wb, id);
            if (e->live[s] > e->max_versions[s])
                e->max_versions[s] = e->live[s];
        }
        return;
    }
    if (t->kind > SIM_RECOMP) return;
    int v = t->version;
    if (v < 0 || v >= e->vstride) return;
    if (--e->pending[s * e->vstride + v] == 0 && v < e->cur_ver[s]) {
        e->live[s]--;
        sim_mem_add(e, d, -wb, id);
    }
}
