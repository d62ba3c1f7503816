/* Data-parallel gradient all-reduce as real transfers: for every stage,
 * a ring over its replicas (data-parallel ranks, and Chimera's two
 * directions), reduce-scatter then all-gather, 2(R-1) steps in which
 * every member sends bytes/R to the next. Each step is a send/receive
 * pair on the collective stream, so the steps share links max-min with
 * the pipeline's transfers; lanes run one ring per tensor-parallel rank.
 * One bucket per stage and minibatch, started by the stage's last
 * backward (W or BW) on each member: later stages finish their backward
 * first, so their all-reduce overlaps the backward of earlier ones.
 * Before it, the stages of one replica that hold copies of a tied table
 * (embedding and LM head) exchange their gradients of it, as Megatron-LM
 * all-reduces the embedding's gradient over its first and last stage.
 * Folded (one replica simulated for all), the ring's steps are one
 * transfer repeated 2(R-1) times: two tasks per ring, not 4(R-1).
 * Sharded plans (ZeRO, FSDP) replace the all-reduce by the halves of the
 * ring over the shard group, placed as the ZeRO paper places them
 * (sim_add_sharded). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

/* The last backward (W or BW) and the optimizer step of every stage per
 * minibatch, in each device's list order; pos[id] is a task's index in its
 * device's list. */
static void stage_marks(const sim_ir *ir, int *lastb, int *opt, int *pos)
{
    const int N = ir->n_stages, K = ir->n_minibatches;
    for (int i = 0; i < K * N; i++) lastb[i] = opt[i] = -1;
    for (int d = 0; d < ir->n_devices; d++)
        for (int j = 0; j < ir->dlen[d]; j++) {
            int id = ir->dlist[d][j];
            if (pos) pos[id] = j;
            const sim_task *t = &ir->tasks[id];
            if (t->stream != SIM_STREAM_COMPUTE || t->stage < 0) continue;
            size_t k = (size_t)t->minibatch * N + t->stage;
            if (t->kind == SIM_W || t->kind == SIM_BW) lastb[k] = id;
            else if (t->kind == SIM_OPT) opt[k] = id;
        }
}

static void add_tied_table(sim_ir *ir, const sim_costs *c, int g,
                           const int *lastb, const int *opt);

/* The bytes of stage s's copy of tied table g (sim_task.table). */
static double table_bytes(const sim_costs *c, int s, int g)
{
    return g ? c->stage[s].rel_bytes[g - 1] : c->stage[s].tied_bytes;
}

void sim_add_tied(sim_ir *ir, const sim_costs *c)
{
    /* Without a flush each stage updates alone: waiting for the other
     * copy's gradient would stall the head's device every minibatch (and
     * can deadlock list-scheduled orders), so asynchronous schedules train
     * the copies apart. */
    if (ir->n_minibatches > 1) return;
    const int S = c->n_model_stages;
    int held = 0;
    for (int s = 0; s < S; s++)
        held += table_bytes(c, s, 0) > 0 || table_bytes(c, s, 1) > 0 ||
                table_bytes(c, s, 2) > 0;
    if (held < 2) return;
    /* the marks once: the tasks they name keep their ids as the tables'
     * transfers are added */
    size_t n = (size_t)ir->n_minibatches * ir->n_stages;
    int *lastb = util_malloc(sizeof(int) * n);
    int *opt = util_malloc(sizeof(int) * n);
    stage_marks(ir, lastb, opt, NULL);
    for (int g = 0; g < 3; g++) add_tied_table(ir, c, g, lastb, opt);
    free(lastb);
    free(opt);
}

static void add_tied_table(sim_ir *ir, const sim_costs *c, int g,
                           const int *lastb, const int *opt)
{
    const int N = ir->n_stages, S = c->n_model_stages, K = ir->n_minibatches;
    int mem[64], nm = 0;
    for (int s = 0; s < S && nm < 64; s++)
        if (table_bytes(c, s, g) > 0) mem[nm++] = s;
    if (nm < 2) return;
    int R = N / S, lanes = c->tp > 1 ? c->tp : 1;
    /* new tasks go right after an anchor in their device's list */
    int n0 = ir->n_tasks, cap = 2 * K * R * nm * nm + 1, na = 0;
    int *anchor = util_malloc(sizeof(int) * (size_t)cap);
    int *task = util_malloc(sizeof(int) * (size_t)cap);
    for (int k = 0; k < K; k++)
        for (int r = 0; r < R; r++)
            for (int i = 0; i < nm; i++)
                for (int j = 0; j < nm; j++) {
                    if (i == j) continue;
                    int v = r * S + mem[i], w = r * S + mem[j];
                    int lv = lastb[(size_t)k * N + v];
                    int lw = lastb[(size_t)k * N + w];
                    if (lv < 0 || lw < 0) continue; /* validate names it */
                    sim_task x = {0};
                    x.stream = SIM_STREAM_SEND;
                    x.comm = SIM_COMM_EMB;
                    x.grad = 1;
                    x.device = ir->stage_device[v];
                    x.stage = v;
                    x.stage2 = w;
                    x.mb = -1;
                    x.minibatch = k;
                    x.version = -1;
                    x.lanes = lanes;
                    x.table = (uint8_t)g;
                    x.bytes = table_bytes(c, mem[i], g);
                    int rid;
                    int sid = sim_ir_transfer(ir, &x, ir->stage_device[w],
                                              &rid);
                    sim_ir_dep(ir, sid, lv);
                    int o = opt[(size_t)k * N + w];
                    if (o >= 0) sim_ir_dep(ir, o, rid);
                    /* and the sender's update waits until its gradient
                     * has left (it clears the gradient) */
                    o = opt[(size_t)k * N + v];
                    if (o >= 0) sim_ir_dep(ir, o, sid);
                    anchor[na] = lv, task[na++] = sid;
                    anchor[na] = lw, task[na++] = rid;
                }
    sim_ir_place_after(ir, n0, anchor, task, na);
    free(anchor);
    free(task);
}

/* The tied-embedding transfers each (minibatch, stage) pair's reduction
 * starts after: the copies it receives and its own sends (they read the
 * gradient reduced). CSR: (*tied)[(*off)[k*N+v] .. (*off)[k*N+v+1]). */
static void tied_index(const sim_ir *ir, int **off, int **tied)
{
    const int N = ir->n_stages, K = ir->n_minibatches;
    int *tied_off = util_calloc((size_t)K * N + 1, sizeof(int));
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->comm != SIM_COMM_EMB) continue;
        int v = t->kind == SIM_RECV ? t->stage2 : t->stage;
        tied_off[(size_t)t->minibatch * N + v + 1]++;
    }
    for (int i = 0; i < K * N; i++) tied_off[i + 1] += tied_off[i];
    int *tl = util_malloc(sizeof(int) * (size_t)(tied_off[K * N] + 1));
    int *tfill = util_malloc(sizeof(int) * (size_t)(K * N + 1));
    memcpy(tfill, tied_off, sizeof(int) * (size_t)(K * N + 1));
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->comm != SIM_COMM_EMB) continue;
        int v = t->kind == SIM_RECV ? t->stage2 : t->stage;
        tl[tfill[(size_t)t->minibatch * N + v]++] = i;
    }
    free(tfill);
    *off = tied_off;
    *tied = tl;
}

typedef struct grp { int key, k, s; } grp;

static int grp_cmp(const void *a, const void *b)
{
    const grp *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    if (x->k != y->k) return x->k < y->k ? -1 : 1;
    return (y->s > x->s) - (y->s < x->s);
}

/* The server of simulated replica r's copy of plan stage s. */
static int replica_server(const sim_ir *ir, const sim_costs *c, int s, int r)
{
    const prof_topo *t = c->topo;
    int g = c->dev_gpu[ir->stage_device[r * c->n_model_stages + s]];
    return t->nodes[t->gpu_node[g]].server;
}

/* What a step of a ring over the simulated replicas mem[0..nm) of plan
 * stage s takes beyond its bytes (sim_task.lat_ns): NCCL's latency for a
 * collective of `steps` steps standing for `calls` calls
 * (sim_ring_step_ns) over R GPUs, the nm members or, folded (wrap), the
 * fold groups' nm x fold, each group on servers of its own. A hop inside
 * a server is NVLink's where the ring's first two members there are
 * joined by NVLink, else PCIe's. 0 on CPU cores (the executor's own
 * ring: its calibrated link's latency is the route's) or without a
 * topology. */
static int32_t ring_lat(const sim_ir *ir, const sim_costs *c, int s,
                        const int *mem, int nm, int wrap, int steps,
                        double calls)
{
    const prof_topo *t = c->topo;
    const int S = c->n_model_stages;
    if (!t || !c->dev_gpu || nm < 1) return 0;
    int g0 = c->dev_gpu[ir->stage_device[mem[0] * S + s]];
    if (prof_topo_gpu(t, g0)->form == PROF_FORM_CPU) return 0;
    int F = wrap && c->fold > 1 ? c->fold : 1, distinct = 0;
    double intra = NCCL_STEP_PCIE_NS;
    int *srv = util_malloc(sizeof(int) * (size_t)nm);
    for (int i = 0; i < nm; i++) {
        srv[i] = replica_server(ir, c, s, mem[i]);
        int seen = 0;
        for (int k = 0; k < i && !seen; k++) seen = srv[k] == srv[i];
        distinct += !seen;
    }
    for (int i = 0; i + 1 < nm; i++) {
        if (srv[i] != srv[i + 1]) continue;
        int n = 0;
        const int *r = prof_topo_gpu_route(
            t, c->dev_gpu[ir->stage_device[mem[i] * S + s]],
            c->dev_gpu[ir->stage_device[mem[i + 1] * S + s]], &n);
        if (r && n && prof_route_has_link_kind(t, r, n, PROF_LINK_NVLINK))
            intra = NCCL_STEP_NVLINK_NS;
        break;
    }
    free(srv);
    const char *a = prof_topo_gpu(t, g0)->arch;
    int old = !strcmp(a, "volta") || !strcmp(a, "turing") ||
              !strcmp(a, "pascal");
    double v = sim_ring_step_ns(nm * F, distinct * F, intra, steps, calls,
                                old);
    return (int32_t)llround(fmin(v, INT32_MAX));
}

/* What the receiver of a ring step on CPU cores takes to fold the chunk
 * in after it lands (sim_task.fold_ns): the executor's ring adds it to the
 * gradient (two reads and a write: passes 3) or copies it into place (a
 * read and a write: 2) in a pass of its own, at the core's streaming
 * rate; `bytes` are all lanes', a lane a core. 0 on GPUs, where NCCL
 * reduces as it moves. */
static int32_t ring_fold(const sim_ir *ir, const sim_costs *c, int v,
                         double bytes, int lanes, double passes)
{
    const prof_topo *t = c->topo;
    if (!t || !c->dev_gpu) return 0;
    const prof_gpu *g = prof_topo_gpu(t, c->dev_gpu[ir->stage_device[v]]);
    double bw = g->mem_bw_bytes_per_s * (g->eff.mem_max > 0 ? g->eff.mem_max
                                                            : 1);
    if (g->form != PROF_FORM_CPU || !(bw > 0)) return 0;
    /* a step of gigabytes on a core takes seconds: kept within the field */
    return (int32_t)llround(fmin(passes * bytes / (lanes > 1 ? lanes : 1) /
                                     bw * 1e9,
                                 INT32_MAX));
}

/* Passes of step st of a ring collective (steps of them; repeated: a
 * send standing for every step): an all-reduce adds for its first half
 * and copies for its second, a reduce-scatter adds, a gather copies. */
static double fold_passes(sim_coll coll, int st, int steps, int repeated)
{
    if (coll == SIM_COLL_REDUCE_SCATTER) return 3;
    if (coll == SIM_COLL_ALLGATHER) return 2;
    if (repeated) return 2.5;
    return st < steps / 2 ? 3 : 2;
}

/* NCCL's channels for each step of a ring over consecutive replicas
 * mem[0..nm) of plan stage s, from member i to the next (wrap: the last
 * member's to the next simulated group's first, folded), into ch[0..nm):
 * where a step crosses servers, NCCL runs a ring per channel, each
 * crossing through another GPU's network port, so the step takes as many
 * ports as the two servers hold members in a row on each side; one
 * elsewhere. The same for every step of the ring. */
static void ring_chans(const sim_ir *ir, const sim_costs *c, int s,
                       const int *mem, int nm, int wrap, int *ch)
{
    for (int i = 0; i < nm; i++) ch[i] = 1;
    if (!c->topo || !c->dev_gpu || nm < 2) return;
    int *srv = util_malloc(sizeof(int) * (size_t)nm);
    for (int i = 0; i < nm; i++) srv[i] = replica_server(ir, c, s, mem[i]);
    for (int i = 0; i < nm; i++) {
        int w = wrap && i == nm - 1, j = w ? 0 : (i + 1) % nm;
        if (!w && srv[i] == srv[j]) continue;
        int ks = 1, kd = 1;
        while (i - ks >= 0 && mem[i - ks] == mem[i] - ks &&
               srv[i - ks] == srv[i])
            ks++;
        while (j + kd < nm && mem[j + kd] == mem[j] + kd &&
               srv[j + kd] == srv[j])
            kd++;
        ch[i] = ks < kd ? ks : kd;
    }
    free(srv);
}

void sim_add_allreduce(sim_ir *ir, const sim_costs *c)
{
    /* Rs rings members are simulated (replicas, and Chimera's two
     * pipelines); folded, they stand for Rs x fold: the last member's
     * step sends to the first member of the next replica (the engine
     * routes it there) and the first member's receive is the one from the
     * previous replica, which by symmetry ends at the same time. With one
     * member (Rs = 1) each step waits for the one before on the same
     * device and nothing else, so the chain is one send repeated
     * (sim_task.steps), which the engine moves as one flow, the steps'
     * latencies after it (sim_run_opts.ring_steps: a step at a time,
     * exactly as the chain of pairs would be). */
    const int Rs = c->replicas, S = c->n_model_stages, K = ir->n_minibatches;
    const int R = Rs * (c->fold > 1 ? c->fold : 1);
    const int N = ir->n_stages;
    /* offloaded, the host reduces the gradients (sim_add_offload) */
    if (R <= 1 || c->offload) return;
    UTIL_NEVER(N != Rs * S);
    if (c->zero > 0) {
        sim_add_sharded(ir, c);
        return;
    }
    int *lastb = util_malloc(sizeof(int) * (size_t)K * N);
    int *opt = util_malloc(sizeof(int) * (size_t)K * N);
    int *pos = util_malloc(sizeof(int) * (size_t)(ir->n_tasks + 1));
    int *rmem = util_malloc(sizeof(int) * (size_t)(Rs + 1));
    int *chans = util_malloc(sizeof(int) * (size_t)(Rs + 1));
    for (int r = 0; r < Rs; r++) rmem[r] = r;
    stage_marks(ir, lastb, opt, pos);
    /* tied-embedding transfers of a stage (sim_add_tied) its ring starts
     * after: the copies it receives, and its own sends (they read the
     * gradient the ring reduces); tied_off/tied CSR per (minibatch,
     * stage) */
    int *tied_off, *tied;
    tied_index(ir, &tied_off, &tied);
    int *last_send = util_malloc(sizeof(int) * (size_t)R);
    int lanes = c->tp > 1 ? c->tp : 1;
    int *prev = util_malloc(sizeof(int) * (size_t)R);
    int *cur = util_malloc(sizeof(int) * (size_t)R);
    /* One global order of the rings, so the collective streams of the
     * members agree (no ring waits behind another that waits for it):
     * by where the first replica's last backward sits in its device's
     * compute order, then minibatch, then deepest stage first. Without a
     * flush an optimizer step waits for its ring inside the compute
     * stream, so rings must follow the compute order. */
    grp *g = util_malloc(sizeof(grp) * (size_t)K * S);
    for (int k = 0; k < K; k++)
        for (int s = 0; s < S; s++) {
            int lb = lastb[(size_t)k * N + s];
            g[k * S + s] = (grp){lb >= 0 ? pos[lb] : 0, k, s};
        }
    qsort(g, (size_t)K * S, sizeof *g, grp_cmp);
    for (int gi = 0; gi < K * S; gi++) {
        int k = g[gi].k, s = g[gi].s;
        /* the stage's buckets in the order its backward fills them: the
         * ring of each starts once every member's backward has computed
         * its ops. A stage exchanging the token table's gradient first
         * (sim_add_tied) reduces the bucket holding its copy after that,
         * last; one exchanging a T5's relative-position tables reduces
         * its whole gradient after them, as one bucket. */
        int nt = 0, whole = !c->bkt_off;
        for (int r = 0; r < Rs; r++)
            for (int q = tied_off[(size_t)k * N + r * S + s];
                 q < tied_off[(size_t)k * N + r * S + s + 1]; q++, nt++)
                whole |= ir->tasks[tied[q]].table != 0;
        int b0 = whole ? 0 : c->bkt_off[s], b1 = whole ? 1 : c->bkt_off[s + 1];
        int tb = -1;                    /* the bucket waiting for the tied */
        for (int b = b0; b < b1 && nt && !whole; b++)
            if (c->stage[s].tied_op >= c->bkt_lo[b] &&
                (b == b0 || c->stage[s].tied_op < c->bkt_lo[b - 1]))
                tb = b;
        if (nt && !whole && tb < 0) {
            whole = 1;
            b0 = 0;
            b1 = 1;
        }
        for (int bi = b0; bi < b1; bi++) {
            /* the tied table's bucket moves to the end */
            int b = tb < 0 || bi < tb ? bi : bi + 1 < b1 ? bi + 1 : tb;
            double share = whole ? 1 : c->bkt_share[b];
            int lo = whole ? 0 : c->bkt_lo[b];
            int hi = b > b0 ? c->bkt_lo[b - 1] - 1 : c->stage[s].last_op;
            int tied_deps = nt && (whole || b == tb);
            double bytes = c->stage[s].grad_bytes * share / R * lanes;
            int steps = 2 * (R - 1), pairs = Rs == 1 ? 1 : steps;
            ring_chans(ir, c, s, rmem, Rs, c->fold > 1, chans);
            int32_t lat = ring_lat(ir, c, s, rmem, Rs, 1, steps, 1);
            for (int st = 0; st < pairs; st++) {
                for (int r = 0; r < Rs; r++) {
                    int v = r * S + s, w = ((r + 1) % Rs) * S + s;
                    sim_task x = {0};
                    x.stream = SIM_STREAM_COLL;
                    x.comm = SIM_COMM_DP;
                    x.grad = 1;
                    x.device = ir->stage_device[v];
                    x.stage = v;
                    x.stage2 = w;
                    x.mb = st;
                    x.minibatch = k;
                    x.version = -1;
                    x.lanes = lanes;
                    x.chans = chans[r];
                    x.steps = pairs == 1 ? steps : 1;
                    x.bytes = bytes;
                    if (!whole) {
                        x.bkt_first = lo;
                        x.bkt_ops = hi - lo + 1;
                    }
                    x.lat_ns = lat;
                    x.fold_ns = ring_fold(
                        ir, c, w, bytes, lanes,
                        fold_passes(SIM_COLL_ALLREDUCE, st, steps,
                                    pairs == 1));
                    int rid;
                    int sid = sim_ir_transfer(ir, &x, ir->stage_device[w],
                                              &rid);
                    /* a member forwards what it received (reduced);
                     * the first step waits for the receiver as well: a
                     * collective moves nothing before every member is
                     * in it (NCCL's), so no chunk waits on a member
                     * still computing, taking its memory */
                    int dep = st ? prev[r] : lastb[(size_t)k * N + v];
                    if (dep >= 0) sim_ir_dep(ir, sid, dep);
                    int rdep = st || w == v ? -1 : lastb[(size_t)k * N + w];
                    if (rdep >= 0) sim_ir_dep(ir, sid, rdep);
                    for (int q = tied_off[(size_t)k * N + v];
                         !st && tied_deps &&
                         q < tied_off[(size_t)k * N + v + 1]; q++)
                        sim_ir_dep(ir, sid, tied[q]);
                    cur[(r + 1) % Rs] = rid;
                    last_send[r] = sid;
                }
                int *tmp = prev; prev = cur; cur = tmp;
            }
            /* the update waits for the ring's last receive, and for its
             * last send to have read the gradient it clears */
            for (int r = 0; r < Rs; r++) {
                int o = opt[(size_t)k * N + r * S + s];
                if (o >= 0) sim_ir_dep(ir, o, prev[r]);
                if (o >= 0) sim_ir_dep(ir, o, last_send[r]);
            }
        }
    }
    free(g);
    free(rmem);
    free(chans);
    free(last_send);
    free(tied);
    free(tied_off);
    free(pos);
    free(prev);
    free(cur);
    free(lastb);
    free(opt);
}

/* ---- sharded data parallelism (ZeRO, FSDP) ---- */

/* Per member of a ring: its first send, last send and last receive. */
typedef struct ring_end { int first, last_send, last_recv; } ring_end;

/* A ring over the simulated replicas mem[0..nm) of plan stage s: `steps`
 * steps in which each member sends `bytes` (all lanes) to the next. With
 * one member (folded: fold > 1) one send repeated `steps` times, which
 * the engine routes to the next group's copy of the member; with more,
 * the last member's send goes to the next group too, unless `inner`
 * closes the ring inside the simulated group. Member i's first send waits
 * for dep[i] and for its receiver's (-1: nothing). */
static void ring_emit(sim_ir *ir, const sim_costs *c, int s, const int *mem,
                      int nm, int steps, double bytes, sim_coll coll,
                      int inner, const int *dep, ring_end *out)
{
    const int S = c->n_model_stages;
    int pairs = nm == 1 ? 1 : steps;
    int *prev = util_malloc(sizeof(int) * (size_t)nm);
    int *cur = util_malloc(sizeof(int) * (size_t)nm);
    int *chans = util_malloc(sizeof(int) * (size_t)nm);
    ring_chans(ir, c, s, mem, nm, c->fold > 1 && !inner, chans);
    /* FSDP gathers and reduces unit by unit, a call each: ZeRO-3's
     * collectives, and ZeRO-2's reduce-scatters after each backward,
     * which the memory model holds a layer at a time as FSDP's
     * SHARD_GRAD_OP does (sim_stage_cost.rs_bytes); the other
     * collectives move a stage's flat buffer in one */
    int units = c->stage[s].units > 1 ? c->stage[s].units : 1;
    double calls = c->zero >= 3 || (c->zero == 2 &&
                                     coll == SIM_COLL_REDUCE_SCATTER)
                 ? units : 1;
    int32_t lat = ring_lat(ir, c, s, mem, nm, !inner, steps, calls);
    for (int st = 0; st < pairs; st++) {
        for (int i = 0; i < nm; i++) {
            int v = mem[i] * S + s, w = mem[(i + 1) % nm] * S + s;
            sim_task x = {0};
            x.stream = SIM_STREAM_COLL;
            x.comm = SIM_COMM_DP;
            x.coll = (uint8_t)coll;
            x.inner = (uint8_t)inner;
            x.grad = coll != SIM_COLL_ALLGATHER;
            x.device = ir->stage_device[v];
            x.stage = v;
            x.stage2 = w;
            x.mb = st;
            x.version = -1;
            x.lanes = c->tp > 1 ? c->tp : 1;
            x.chans = chans[i];
            x.steps = pairs == 1 ? steps : 1;
            x.bytes = bytes;
            x.lat_ns = lat;
            x.fold_ns = ring_fold(ir, c, w, bytes, x.lanes,
                                  fold_passes(coll, st, steps, pairs == 1));
            int rid;
            int sid = sim_ir_transfer(ir, &x, ir->stage_device[w], &rid);
            /* sluice's executor receives a gather's chunk into a buffer
             * of its own, copied into place (NCCL and FSDP write into
             * the output): ZeRO-3's between two ops of the task then
             * running, ZeRO-1 and 2's after the update by the next
             * step's first task, when little else is held. A
             * reduce-scatter's chunk is added into the microbatch's
             * gradient and goes before the rank's shard is taken: the
             * shard, counted from the first ring's receive, is the
             * chunk's size and stands for it there. A step's bytes are
             * its tensor-parallel lanes' together; a device holds its
             * own lane's. */
            if (c->whole_shards && coll == SIM_COLL_ALLGATHER)
                sim_ir_buffer(ir, rid, rid, bytes / x.lanes);
            int d = st ? prev[i] : dep[i];
            if (d >= 0) sim_ir_dep(ir, sid, d);
            /* the first step also waits for the receiver to be in the
             * collective (sim_add_allreduce) */
            int rd = st || nm < 2 ? -1 : dep[(i + 1) % nm];
            if (rd >= 0 && rd != d) sim_ir_dep(ir, sid, rd);
            if (!st) out[i].first = sid;
            out[i].last_send = sid;
            cur[(i + 1) % nm] = rid;
        }
        int *tmp = prev; prev = cur; cur = tmp;
    }
    for (int i = 0; i < nm; i++) out[i].last_recv = prev[i];
    free(prev);
    free(cur);
    free(chans);
}

void sim_ring_all(sim_ir *ir, const sim_costs *c, int s, sim_coll coll,
                  double bytes, const int *dep, int *last_send,
                  int *last_recv)
{
    const int R = c->replicas;
    int *mem = util_malloc(sizeof(int) * (size_t)(R + 1));
    ring_end *out = util_malloc(sizeof *out * (size_t)(R + 1));
    for (int r = 0; r < R; r++) mem[r] = r;
    /* the ring's R-1 steps, each member sending its neighbour 1/R of
     * the bytes a step, after what it received the step before */
    ring_emit(ir, c, s, mem, R, R - 1, bytes / R, coll, 1, dep, out);
    for (int r = 0; r < R; r++) {
        last_send[r] = out[r].last_send;
        last_recv[r] = out[r].last_recv;
    }
    free(mem);
    free(out);
}

/* A reduce-scatter of plan stage s's gradients, or an all-gather of its
 * parameters, over every shard group, each simulated replica r starting
 * after dep[r]; out[r] says when it is done. A shard group of H ranks
 * runs H-1 steps of 1/H of the stage's bytes each (half a ring). Hybrid
 * sharding (H below the data-parallel width R) then all-reduces each
 * reduced shard across the R/H groups, as FSDP's HYBRID_SHARD does. */
static void shard_coll(sim_ir *ir, const sim_costs *c, int s, sim_coll coll,
                       const int *dep, ring_end *out)
{
    const int Rs = c->replicas, F = c->fold > 1 ? c->fold : 1;
    const int R = Rs * F, H = c->shard, G = R / H;
    /* gathered: every weight; reduced: the gradients of those that train */
    double P = (coll == SIM_COLL_ALLGATHER ? c->stage[s].param_bytes
                                           : c->stage[s].train_bytes) *
               (c->tp > 1 ? c->tp : 1);
    int *mem = util_malloc(sizeof(int) * (size_t)(Rs + 1));
    int *d2 = util_malloc(sizeof(int) * (size_t)(Rs + 1));
    ring_end *o2 = util_malloc(sizeof *o2 * (size_t)(Rs + 1));
    if (H == R || F > 1) {
        /* the whole group (folded: the simulated members stand for it),
         * or, folded hybrid, the simulated group is one shard group */
        UTIL_NEVER(H < R && Rs != H);
        for (int r = 0; r < Rs; r++) mem[r] = r;
        ring_emit(ir, c, s, mem, Rs, H - 1, P / H, coll, H < R, dep, out);
    } else {
        for (int g = 0; g < G; g++) {
            for (int i = 0; i < H; i++) mem[i] = g * H + i;
            ring_emit(ir, c, s, mem, H, H - 1, P / H, coll, 0, dep + g * H,
                      out + g * H);
        }
    }
    if (coll == SIM_COLL_REDUCE_SCATTER && H < R) {
        /* rank i of every group holds the same shard: a ring over them
         * (folded: member i alone, repeated, wrapping to the next group) */
        int rows = F > 1 ? 1 : G, lanes_of = F > 1 ? Rs : H;
        for (int i = 0; i < lanes_of; i++) {
            for (int g = 0; g < rows; g++) {
                mem[g] = g * H + i;
                d2[g] = out[mem[g]].last_recv;
            }
            ring_emit(ir, c, s, mem, rows, 2 * (G - 1), P / H / G,
                      SIM_COLL_ALLREDUCE, 0, d2, o2);
            for (int g = 0; g < rows; g++) {
                o2[g].first = out[mem[g]].first;
                out[mem[g]] = o2[g];
            }
        }
    }
    free(mem);
    free(d2);
    free(o2);
}

/* Whether compute task id (a B or BW) follows a recompute of its stage
 * and microbatch that gathered its parameters already. */
static int after_recompute(const sim_ir *ir, const int *list, int j)
{
    const sim_task *t = &ir->tasks[list[j]];
    for (int k = j - 1; k >= 0; k--) {
        const sim_task *u = &ir->tasks[list[k]];
        if (u->stage == t->stage && u->mb == t->mb)
            return u->kind == SIM_RECOMP;
    }
    return 0;
}

/* The reduce-scatter of plan stage s's gradients after compute task j of
 * the device's order L[r] in every replica r: after the tied-table
 * exchange where j is the stage's last backward; its update waits. */
static void reduce_grads(sim_ir *ir, const sim_costs *c, int s, int **L,
                         int j, int *seen, const int *lastb,
                         const int *tied_off,
                         const int *tied, const int *opt, int *dep,
                         ring_end *out)
{
    const int S = c->n_model_stages, Rs = c->replicas;
    for (int r = 0; r < Rs; r++) dep[r] = L[r][j];
    shard_coll(ir, c, s, SIM_COLL_REDUCE_SCATTER, dep, out);
    /* sluice's executor: the microbatch's whole gradient, from the task
     * making it until its ring is done (the executor frees it when the
     * next compute task starts: where the ring ends during one, later);
     * under ZeRO-2 the rank's shard of the step's sum from the first
     * ring's end to the update (ZeRO-3's is counted all along: its peaks,
     * measured, hold it) */
    for (int r = 0; c->whole_shards && r < Rs; r++) {
        int v = r * S + s;
        if (out[r].last_recv < 0) continue;
        sim_ir_buffer(ir, L[r][j], out[r].last_recv, c->stage[s].train_bytes);
        if (c->zero == 2 && !seen[v]++ && opt[v] >= 0)
            sim_ir_buffer(ir, out[r].last_recv, opt[v],
                          c->stage[s].grad_bytes);
    }
    for (int r = 0; r < Rs; r++) {
        int v = r * S + s;
        for (int q = tied_off[v]; L[r][j] == lastb[v] && q < tied_off[v + 1];
             q++)
            sim_ir_dep(ir, out[r].first, tied[q]);
        if (opt[v] < 0) continue;
        sim_ir_dep(ir, opt[v], out[r].last_recv);
        sim_ir_dep(ir, opt[v], out[r].last_send);
    }
}

void sim_add_sharded(sim_ir *ir, const sim_costs *c)
{
    const int S = c->n_model_stages, Rs = c->replicas, pp = c->pp;
    const int N = ir->n_stages, z = c->zero;
    UTIL_NEVER(ir->n_minibatches != 1 || N != Rs * S || c->shard < 2);
    int *lastb = util_malloc(sizeof(int) * (size_t)N);
    int *opt = util_malloc(sizeof(int) * (size_t)N);
    int *seen = util_calloc((size_t)N + 1, sizeof(int));
    stage_marks(ir, lastb, opt, NULL);
    int *tied_off, *tied;
    tied_index(ir, &tied_off, &tied);
    int *dep = util_malloc(sizeof(int) * (size_t)Rs);
    ring_end *out = util_malloc(sizeof *out * (size_t)Rs);
    int **L = util_calloc((size_t)Rs, sizeof *L);
    /* sluice's executor (whole_shards, ZeRO-2 and 3): per replica's
     * stage, the last reduce-scatter's ring so far */
    ring_end *prs = util_malloc(sizeof *prs * (size_t)N);
    for (int v = 0; v < N; v++) prs[v].last_recv = prs[v].last_send = -1;
    for (int d = 0; d < pp; d++) {
        /* the compute order of pipeline device d in every replica: the
         * replicas run the same order (sim_schedule copies it) */
        int n = 0;
        for (int r = 0; r < Rs; r++) {
            int dv = r * pp + d, k = 0;
            L[r] = util_realloc(L[r], sizeof(int) * (size_t)(ir->dlen[dv] + 1));
            for (int q = 0; q < ir->dlen[dv]; q++) {
                int id = ir->dlist[dv][q];
                if (ir->tasks[id].stream == SIM_STREAM_COMPUTE &&
                    ir->tasks[id].stage >= 0)
                    L[r][k++] = id;
            }
            UTIL_NEVER(r && k != n);
            n = k;
        }
        /* ZeRO-3: the parameters of a stage are gathered before its F
         * and before its backward (before the recompute where there is
         * one), held until that compute ends; task j's gather may start
         * when task j-1 starts (it waits for the end of j-2): the next
         * group's prefetch overlaps the current one's compute. The whole
         * stage is gathered (its bytes move), but as FSDP and ZeRO-3
         * gather a layer at a time, two layers' weights are held at once
         * (sim_stage_cost.gather_bytes) */
        int *rel = util_malloc(sizeof(int) * (size_t)(n + 1));
        int *deferred = util_malloc(sizeof(int) * (size_t)(n + 1)), nd = 0;
        for (int j = 0; j < n; j++) {
            const sim_task *t = &ir->tasks[L[0][j]];
            rel[j] = -1;
            if (z < 3) continue;
            if (t->kind == SIM_F) rel[j] = j;
            else if ((t->kind == SIM_B || t->kind == SIM_BW) &&
                     !after_recompute(ir, L[0], j))
                rel[j] = j;
            else if (t->kind == SIM_RECOMP)
                for (int k = j + 1; k < n && rel[j] < 0; k++) {
                    const sim_task *u = &ir->tasks[L[0][k]];
                    if (u->stage == t->stage && u->mb == t->mb &&
                        (u->kind == SIM_B || u->kind == SIM_BW))
                        rel[j] = k;
                }
        }
        for (int j = -2; j < n; j++) {
            int g = j + 2;
            if (g < n && rel[g] >= 0) {
                int s = ir->tasks[L[0][g]].stage;
                for (int r = 0; r < Rs; r++) dep[r] = j >= 0 ? L[r][j] : -1;
                shard_coll(ir, c, s, SIM_COLL_ALLGATHER, dep, out);
                for (int r = 0; r < Rs; r++) {
                    sim_ir_dep(ir, L[r][g], out[r].last_recv);
                    sim_ir_dep(ir, L[r][g], out[r].last_send);
                    sim_ir_buffer(ir, out[r].first, L[r][rel[g]],
                                  c->stage[s].gather_bytes);
                }
            }
            if (j < 0) continue;
            /* a copy: emitting tasks moves the task array */
            const sim_task tj = ir->tasks[L[0][j]], *t = &tj;
            int s = t->stage;
            /* gradients: ZeRO-1 reduce-scatters once, after the stage's
             * last backward (each rank accumulated them whole); 2 and 3
             * after every microbatch's, into the rank's shard */
            int bw = t->kind == SIM_W || t->kind == SIM_BW;
            int tied_last = L[0][j] == lastb[s] && tied_off[s + 1] > tied_off[s];
            /* sluice's executor holds a microbatch's whole gradient
             * until its ring is done: a stage's next one is made after
             * the ring before it ends, or a replica running ahead of the
             * others (waiting for nothing of theirs) held two */
            for (int r = 0; bw && z >= 2 && c->whole_shards && r < Rs; r++) {
                const ring_end *pv = &prs[r * S + s];
                if (pv->last_recv >= 0) sim_ir_dep(ir, L[r][j], pv->last_recv);
                if (pv->last_send >= 0) sim_ir_dep(ir, L[r][j], pv->last_send);
            }
            if (bw && (z >= 2 || L[0][j] == lastb[s]) && !tied_last) {
                reduce_grads(ir, c, s, L, j, seen, lastb, tied_off, tied,
                             opt, dep, out);
                for (int r = 0; r < Rs; r++) prs[r * S + s] = out[r];
            }
            else if (bw && tied_last)
                deferred[nd++] = j;
            /* ZeRO-1 and 2: each rank updated its shard of the weights;
             * the others get it by an all-gather */
            /* a copy of a tied table is reduced once the other copy's
             * gradient came (sim_add_tied), which waits for a backward
             * later in the order: behind the gathers, or they would wait
             * for it (before the first update, which waits for it) */
            if (t->kind == SIM_OPT)
                for (int q = 0; q < nd; q++)
                    reduce_grads(ir, c, ir->tasks[L[0][deferred[q]]].stage,
                                 L, deferred[q], seen, lastb, tied_off,
                                 tied, opt, dep, out);
            if (t->kind == SIM_OPT) nd = 0;
            if (t->kind == SIM_OPT && z <= 2) {
                for (int r = 0; r < Rs; r++) dep[r] = L[r][j];
                shard_coll(ir, c, s, SIM_COLL_ALLGATHER, dep, out);
            }
        }
        free(rel);
        free(deferred);
    }
    for (int r = 0; r < Rs; r++) free(L[r]);
    free(L);
    free(prs);
    free(out);
    free(dep);
    free(tied);
    free(tied_off);
    free(lastb);
    free(opt);
    free(seen);
}
