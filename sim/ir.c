/* The task IR: per device an ordered task list, dependencies by task id
 * (across devices too). Built by appending, frozen by sim_ir_finish into
 * CSR arrays the engine walks without allocating. Lowering turns a compute
 * order into the full IR: dependencies from the stage graph plus sends and
 * receives wherever data crosses devices. */
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

static const char *const kind_names[SIM_KIND_COUNT] = {
    "F", "B", "W", "BW", "R", "OPT", "SEND", "RECV", "ALLREDUCE",
    "SWAP_OUT", "SWAP_IN", "NVME_READ", "NVME_WRITE", "CPU_OPT"};
static const char *const stream_names[SIM_STREAM_COUNT] = {
    "compute", "copy-in", "copy-out", "send", "collective", "io-in", "io-out",
    "host",
    "recv"};
static const char *const comm_names[SIM_COMM_COUNT] = {
    "pipeline", "data-parallel", "tensor-parallel", "embedding"};

const char *sim_comm_name(sim_comm c)
{
    return (unsigned)c < SIM_COMM_COUNT ? comm_names[c] : "?";
}

const char *sim_coll_name(sim_coll c)
{
    static const char *const names[SIM_COLL_COUNT] = {
        "all-reduce", "reduce-scatter", "all-gather"};
    return (unsigned)c < SIM_COLL_COUNT ? names[c] : "?";
}

const char *sim_kind_name(sim_kind k)
{
    return (unsigned)k < SIM_KIND_COUNT ? kind_names[k] : "?";
}

const char *sim_stream_name(sim_stream s)
{
    return (unsigned)s < SIM_STREAM_COUNT ? stream_names[s] : "?";
}

sim_ir *sim_ir_new(const char *schedule, int n_devices, int n_stages,
                   const int *stage_device, int n_mb, int n_minibatches)
{
    sim_ir *ir = util_calloc(1, sizeof *ir);
    snprintf(ir->schedule, sizeof ir->schedule, "%s", schedule);
    ir->n_devices = n_devices;
    ir->n_stages = n_stages;
    ir->n_mb = n_mb;
    ir->n_minibatches = n_minibatches < 1 ? 1 : n_minibatches;
    ir->stage_device = util_malloc(sizeof(int) * (size_t)(n_stages + 1));
    memcpy(ir->stage_device, stage_device, sizeof(int) * (size_t)n_stages);
    ir->dlist = util_calloc((size_t)n_devices, sizeof *ir->dlist);
    ir->dlen = util_calloc((size_t)n_devices, sizeof(int));
    ir->dcap = util_calloc((size_t)n_devices, sizeof(int));
    return ir;
}

void sim_ir_free(sim_ir *ir)
{
    if (!ir) return;
    for (int d = 0; d < ir->n_devices; d++) free(ir->dlist[d]);
    free(ir->dlist);
    free(ir->dlen);
    free(ir->dcap);
    free(ir->stage_device);
    free(ir->tasks);
    free(ir->deps);
    free(ir->seq);
    free(ir->dev_off);
    free(ir->succ);
    free(ir->succ_off);
    free(ir->edge);
    free(ir->bufs);
    free(ir);
}

int sim_ir_add(sim_ir *ir, const sim_task *t)
{
    UTIL_NEVER(ir->finished);
    UTIL_NEVER(t->device < 0 || t->device >= ir->n_devices);
    if (ir->n_tasks == ir->cap_tasks) {
        ir->cap_tasks = ir->cap_tasks ? 2 * ir->cap_tasks : 256;
        ir->tasks = util_realloc(ir->tasks,
                                 sizeof *ir->tasks * (size_t)ir->cap_tasks);
    }
    int id = ir->n_tasks++;
    ir->tasks[id] = *t;
    ir->tasks[id].n_dep = 0;
    ir->tasks[id].dep_off = 0;
    int d = t->device;
    if (ir->dlen[d] == ir->dcap[d]) {
        ir->dcap[d] = ir->dcap[d] ? 2 * ir->dcap[d] : 64;
        ir->dlist[d] = util_realloc(ir->dlist[d],
                                    sizeof(int32_t) * (size_t)ir->dcap[d]);
    }
    ir->dlist[d][ir->dlen[d]++] = id;
    return id;
}

void sim_ir_dep(sim_ir *ir, int task, int dep)
{
    UTIL_NEVER(ir->finished);
    UTIL_NEVER(task < 0 || task >= ir->n_tasks || dep < 0 ||
               dep >= ir->n_tasks || task == dep);
    if (ir->n_edge == ir->cap_edge) {
        ir->cap_edge = ir->cap_edge ? 2 * ir->cap_edge : 512;
        ir->edge = util_realloc(ir->edge,
                                2 * sizeof(int32_t) * (size_t)ir->cap_edge);
    }
    ir->edge[2 * ir->n_edge] = task;
    ir->edge[2 * ir->n_edge + 1] = dep;
    ir->n_edge++;
}

void sim_ir_finish(sim_ir *ir)
{
    UTIL_NEVER(ir->finished);
    int n = ir->n_tasks;
    /* dependencies: counting sort by task; duplicates removed */
    int *cnt = util_calloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < ir->n_edge; i++) cnt[ir->edge[2 * i] + 1]++;
    for (int i = 0; i < n; i++) cnt[i + 1] += cnt[i];
    int32_t *deps = util_malloc(sizeof(int32_t) * (size_t)(ir->n_edge + 1));
    int *fill = util_malloc(sizeof(int) * (size_t)(n + 1));
    memcpy(fill, cnt, sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < ir->n_edge; i++)
        deps[fill[ir->edge[2 * i]]++] = ir->edge[2 * i + 1];
    int nd = 0;
    /* last[d]: the last task that listed d, so duplicates go in one pass
     * (an optimizer step depends on every microbatch: a scan of the list
     * so far made it quadratic in the microbatches) */
    int *last = util_malloc(sizeof(int) * (size_t)(n + 1));
    for (int t = 0; t < n; t++) last[t] = -1;
    for (int t = 0; t < n; t++) {
        int beg = nd;
        for (int k = cnt[t]; k < cnt[t + 1]; k++) {
            if (last[deps[k]] == t) continue;
            last[deps[k]] = t;
            deps[nd++] = deps[k];
        }
        ir->tasks[t].dep_off = beg;
        ir->tasks[t].n_dep = nd - beg;
    }
    free(last);
    ir->deps = deps;
    ir->n_deps = nd;
    /* successors */
    memset(cnt, 0, sizeof(int) * ((size_t)n + 1));
    for (int i = 0; i < nd; i++) cnt[deps[i] + 1]++;
    for (int i = 0; i < n; i++) cnt[i + 1] += cnt[i];
    ir->succ = util_malloc(sizeof(int32_t) * (size_t)(nd + 1));
    memcpy(fill, cnt, sizeof(int) * (size_t)(n + 1));
    for (int t = 0; t < n; t++)
        for (int k = 0; k < ir->tasks[t].n_dep; k++)
            ir->succ[fill[deps[ir->tasks[t].dep_off + k]]++] = t;
    ir->succ_off = cnt;
    free(fill);
    /* device order */
    ir->dev_off = util_malloc(sizeof(int) * (size_t)(ir->n_devices + 1));
    ir->seq = util_malloc(sizeof(int32_t) * (size_t)(n + 1));
    int k = 0;
    for (int d = 0; d < ir->n_devices; d++) {
        ir->dev_off[d] = k;
        if (ir->dlen[d])
            memcpy(ir->seq + k, ir->dlist[d],
                   sizeof(int32_t) * (size_t)ir->dlen[d]);
        k += ir->dlen[d];
    }
    ir->dev_off[ir->n_devices] = k;
    free(ir->edge);
    ir->edge = NULL;
    ir->n_edge = ir->cap_edge = 0;
    ir->finished = 1;
}

void sim_ir_place_after(sim_ir *ir, int n0, const int *anchor,
                        const int *task, int n)
{
    int *first = util_malloc(sizeof(int) * (size_t)(n0 + 1));
    int *next = util_malloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n0; i++) first[i] = -1;
    /* linked lists in the order given: build them backwards */
    for (int q = n - 1; q >= 0; q--) {
        UTIL_NEVER(anchor[q] < 0 || anchor[q] >= n0);
        next[q] = first[anchor[q]];
        first[anchor[q]] = q;
    }
    for (int d = 0; d < ir->n_devices; d++) {
        int len = ir->dlen[d];
        int32_t *out = util_malloc(sizeof(int32_t) * (size_t)(len + 1));
        int o = 0;
        for (int j = 0; j < len; j++) {
            int id = ir->dlist[d][j];
            if (id >= n0) continue;
            out[o++] = id;
            for (int q = first[id]; q >= 0; q = next[q]) out[o++] = task[q];
        }
        UTIL_NEVER(o != len);
        free(ir->dlist[d]);
        ir->dlist[d] = out;
        ir->dcap[d] = len + 1;
    }
    free(first);
    free(next);
}

int sim_ir_transfer(sim_ir *ir, const sim_task *send, int device2, int *rid)
{
    sim_task x = *send;
    x.kind = SIM_SEND;
    x.peer = -1;
    int sid = sim_ir_add(ir, &x);
    x.kind = SIM_RECV;
    x.stream = SIM_STREAM_RECV;
    x.device = device2;
    int r = sim_ir_add(ir, &x);
    ir->tasks[sid].peer = r;
    ir->tasks[r].peer = sid;
    sim_ir_dep(ir, r, sid);
    *rid = r;
    return sid;
}

void sim_ir_buffer(sim_ir *ir, int alloc, int release, double bytes)
{
    UTIL_NEVER(alloc < 0 || alloc >= ir->n_tasks || release < 0 ||
               release >= ir->n_tasks ||
               ir->tasks[alloc].device != ir->tasks[release].device);
    if (ir->n_bufs == ir->cap_bufs) {
        ir->cap_bufs = ir->cap_bufs ? 2 * ir->cap_bufs : 64;
        ir->bufs = util_realloc(ir->bufs,
                                sizeof *ir->bufs * (size_t)ir->cap_bufs);
    }
    ir->bufs[ir->n_bufs++] = (sim_ir_buf){alloc, release,
                                          ir->tasks[alloc].device, bytes, 0};
}

void sim_ir_hole(sim_ir *ir, int out, int in, double bytes)
{
    sim_ir_buffer(ir, out, in, bytes);
    ir->bufs[ir->n_bufs - 1].hole = 1;
}

char *sim_task_str(const sim_ir *ir, int id, char *buf, size_t n)
{
    const sim_task *t = &ir->tasks[id];
    char mbs[48] = "";
    if (t->mb >= 0) {
        if (ir->n_minibatches > 1)
            snprintf(mbs, sizeof mbs, " mb %d of minibatch %d", t->mb,
                     t->minibatch);
        else
            snprintf(mbs, sizeof mbs, " mb %d", t->mb);
    } else if (ir->n_minibatches > 1) {
        snprintf(mbs, sizeof mbs, " minibatch %d", t->minibatch);
    }
    if ((t->kind == SIM_SEND || t->kind == SIM_RECV) &&
        t->comm == SIM_COMM_DP) {
        /* all-reduce steps: mb holds the step of the ring */
        char kb[32] = "";
        if (ir->n_minibatches > 1)
            snprintf(kb, sizeof kb, " minibatch %d", t->minibatch);
        snprintf(buf, n, "dev %d %s %s stage %d->%d step %d%s",
                 t->device, sim_kind_name(t->kind),
                 sim_coll_name((sim_coll)t->coll), t->stage, t->stage2,
                 t->mb, kb);
    } else if ((t->kind == SIM_SEND || t->kind == SIM_RECV) &&
               t->comm == SIM_COMM_EMB) {
        char kb[32] = "";
        if (ir->n_minibatches > 1)
            snprintf(kb, sizeof kb, " minibatch %d", t->minibatch);
        snprintf(buf, n, "dev %d %s tied-embedding grad stage %d->%d%s",
                 t->device, sim_kind_name(t->kind), t->stage, t->stage2, kb);
    } else if (t->kind == SIM_SEND || t->kind == SIM_RECV)
        snprintf(buf, n, "dev %d %s %s stage %d->%d%s", t->device,
                 sim_kind_name(t->kind), t->grad ? "grad" : "act", t->stage,
                 t->stage2, mbs);
    else
        snprintf(buf, n, "dev %d %s stage %d%s", t->device,
                 sim_kind_name(t->kind), t->stage, mbs);
    return buf;
}

/* ---------------------------------------------------------------------
 * Lowering */

enum { LK_F, LK_B, LK_W, LK_BW, LK_R, LK_N };

static int lk_of(int kind)
{
    switch (kind) {
    case SIM_F: return LK_F;
    case SIM_B: return LK_B;
    case SIM_W: return LK_W;
    case SIM_BW: return LK_BW;
    case SIM_RECOMP: return LK_R;
    default: return -1;
    }
}

int sim_lower(sim_ir *ir, const sim_costs *c, util_err *e)
{
    UTIL_NEVER(ir->finished);
    const int S = ir->n_stages, M = ir->n_mb, K = ir->n_minibatches;
    if (c->n_stages != S)
        return util_errf(e, UTIL_EXIT_USAGE,
                         "schedule has %d stages, cost table %d", S,
                         c->n_stages);
    size_t nslot = (size_t)K * S * M * LK_N;
    int *slot = util_malloc(sizeof(int) * nslot);
    for (size_t i = 0; i < nslot; i++) slot[i] = -1;
    int *opt = util_malloc(sizeof(int) * (size_t)(K * S));
    for (int i = 0; i < K * S; i++) opt[i] = -1;
#define SLOT(k, s, mb, lk) slot[(((size_t)(k) * S + (s)) * M + (mb)) * LK_N + (lk)]
    int n0 = ir->n_tasks;
    for (int i = 0; i < n0; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->stage < 0 || t->stage >= S || t->minibatch < 0 ||
            t->minibatch >= K) {
            free(slot); free(opt);
            return util_errf(e, UTIL_EXIT_FAIL,
                             "task %d: stage %d or minibatch %d out of range",
                             i, t->stage, t->minibatch);
        }
        if (t->kind == SIM_OPT) {
            opt[t->minibatch * S + t->stage] = i;
            continue;
        }
        int lk = lk_of(t->kind);
        if (lk < 0 || t->mb < 0 || t->mb >= M) {
            free(slot); free(opt);
            return util_errf(e, UTIL_EXIT_FAIL,
                             "task %d: kind %s or microbatch %d not allowed "
                             "before lowering", i, sim_kind_name(t->kind),
                             t->mb);
        }
        int *sl = &SLOT(t->minibatch, t->stage, t->mb, lk);
        if (*sl >= 0) {
            char b[96];
            free(slot); free(opt);
            return util_errf(e, UTIL_EXIT_FAIL,
                             "schedule %s: %s appears twice", ir->schedule,
                             sim_task_str(ir, i, b, sizeof b));
        }
        *sl = i;
    }
    /* Transfers are appended by sim_ir_add (end of the lists) and moved
     * next to their anchors once all exist: for each, the compute task it
     * sits beside (send: after its producer; recv: before its consumer). */
    int cap_pos = 256, n_pos = 0;
    int32_t *pos_anchor = util_malloc(sizeof(int32_t) * (size_t)cap_pos);
    int32_t *pos_task = util_malloc(sizeof(int32_t) * (size_t)cap_pos);
    int8_t *pos_before = util_malloc((size_t)cap_pos);
#define ADD_POS(task_, anchor_, before_)                                    \
    do {                                                                    \
        if (n_pos == cap_pos) {                                             \
            cap_pos *= 2;                                                   \
            pos_anchor = util_realloc(pos_anchor, sizeof(int32_t) * (size_t)cap_pos); \
            pos_task = util_realloc(pos_task, sizeof(int32_t) * (size_t)cap_pos); \
            pos_before = util_realloc(pos_before, (size_t)cap_pos);         \
        }                                                                   \
        pos_anchor[n_pos] = (anchor_);                                      \
        pos_task[n_pos] = (task_);                                          \
        pos_before[n_pos] = (int8_t)(before_);                              \
        n_pos++;                                                            \
    } while (0)
    /* consumers of each stage (stages of different replicas never
     * exchange activations) */
    int *cons_off = util_calloc((size_t)S + 1, sizeof(int));
    for (int s = 0; s < S; s++)
        for (int t = 0; t < S; t++)
            if (t != s && c->xfer_bytes[(size_t)s * S + t] > 0)
                cons_off[s + 1]++;
    for (int s = 0; s < S; s++) cons_off[s + 1] += cons_off[s];
    int *cons = util_malloc(sizeof(int) * (size_t)(cons_off[S] + 1));
    for (int s = 0, k = 0; s < S; s++)
        for (int t = 0; t < S; t++)
            if (t != s && c->xfer_bytes[(size_t)s * S + t] > 0) cons[k++] = t;
    int lanes = c->tp > 1 ? c->tp : 1;
    int rc = 0;
    for (int k = 0; k < K && !rc; k++)
        for (int s = 0; s < S && !rc; s++)
            for (int mb = 0; mb < M && !rc; mb++) {
                int f = SLOT(k, s, mb, LK_F);
                int bw = SLOT(k, s, mb, LK_BW);
                int bb = SLOT(k, s, mb, LK_B);
                int w = SLOT(k, s, mb, LK_W);
                int r = SLOT(k, s, mb, LK_R);
                int back = bw >= 0 ? bw : bb; /* the input-gradient task */
                if (f < 0) {
                    rc = util_errf(e, UTIL_EXIT_FAIL,
                                   "schedule %s: stage %d has no F for "
                                   "microbatch %d (minibatch %d)",
                                   ir->schedule, s, mb, k);
                    break;
                }
                if (back < 0 || (bb >= 0 && w < 0) || (bw >= 0 && bb >= 0)) {
                    rc = util_errf(e, UTIL_EXIT_FAIL,
                                   "schedule %s: stage %d microbatch %d "
                                   "(minibatch %d) needs one BW or one B and "
                                   "one W", ir->schedule, s, mb, k);
                    break;
                }
                if (r >= 0) {
                    sim_ir_dep(ir, r, f);
                    sim_ir_dep(ir, back, r);
                }
                sim_ir_dep(ir, back, f);
                if (w >= 0) sim_ir_dep(ir, w, back);
                for (int ci = cons_off[s]; ci < cons_off[s + 1]; ci++) {
                    int t = cons[ci];
                    double by = c->xfer_bytes[(size_t)s * S + t];
                    int ft = SLOT(k, t, mb, LK_F);
                    int bt = SLOT(k, t, mb, LK_BW);
                    if (bt < 0) bt = SLOT(k, t, mb, LK_B);
                    if (ft < 0 || bt < 0) continue; /* reported in its turn */
                    int ds = ir->stage_device[s], dt = ir->stage_device[t];
                    if (ds == dt) {
                        sim_ir_dep(ir, ft, f);
                        sim_ir_dep(ir, back, bt);
                        continue;
                    }
                    for (int g = 0; g < 2; g++) {
                        /* g=0: activation s->t after F(s), before F(t);
                         * g=1: gradient t->s after back(t), before back(s) */
                        sim_task x = {0};
                        x.kind = SIM_SEND;
                        x.stream = SIM_STREAM_SEND;
                        x.grad = (uint8_t)g;
                        x.device = g ? dt : ds;
                        x.stage = g ? t : s;
                        x.stage2 = g ? s : t;
                        x.mb = mb;
                        x.minibatch = k;
                        x.version = ir->tasks[g ? bt : f].version;
                        x.bytes = by;
                        x.peer = -1;
                        /* Megatron's scatter-gather: each tensor-parallel
                         * rank sends its 1/t to its peer rank */
                        x.lanes = lanes;
                        x.comm = SIM_COMM_PP;
                        int sid = sim_ir_add(ir, &x);
                        x.kind = SIM_RECV;
                        x.stream = SIM_STREAM_RECV;
                        x.device = g ? ds : dt;
                        int rid = sim_ir_add(ir, &x);
                        ir->tasks[sid].peer = rid;
                        ir->tasks[rid].peer = sid;
                        int prod = g ? bt : f, cons = g ? back : ft;
                        sim_ir_dep(ir, sid, prod);
                        sim_ir_dep(ir, rid, sid);
                        sim_ir_dep(ir, cons, rid);
                        ADD_POS(sid, prod, 0);
                        ADD_POS(rid, cons, 1);
                    }
                }
                if (opt[k * S + s] >= 0)
                    sim_ir_dep(ir, opt[k * S + s], w >= 0 ? w : back);
            }
    if (!rc) {
        /* rebuild each device list with transfers at their anchors:
         * receives just before their consumer, sends just after their
         * producer, in creation order (stage order) */
        int n = ir->n_tasks;
        int *first_before = util_malloc(sizeof(int) * (size_t)n);
        int *first_after = util_malloc(sizeof(int) * (size_t)n);
        int *next = util_malloc(sizeof(int) * (size_t)(n_pos + 1));
        for (int i = 0; i < n; i++) first_before[i] = first_after[i] = -1;
        /* build linked lists in creation order: iterate backwards */
        for (int i = n_pos - 1; i >= 0; i--) {
            int *head = pos_before[i] ? &first_before[pos_anchor[i]]
                                      : &first_after[pos_anchor[i]];
            next[i] = *head;
            *head = i;
        }
        for (int d = 0; d < ir->n_devices; d++) {
            int len = ir->dlen[d];
            int32_t *lst = ir->dlist[d];
            int32_t *out = util_malloc(sizeof(int32_t) * (size_t)(len + 1));
            int o = 0;
            for (int j = 0; j < len; j++) {
                int id = lst[j];
                if (id >= n0) continue;
                for (int q = first_before[id]; q >= 0; q = next[q])
                    out[o++] = pos_task[q];
                out[o++] = id;
                for (int q = first_after[id]; q >= 0; q = next[q])
                    out[o++] = pos_task[q];
            }
            UTIL_NEVER(o != len);
            free(lst);
            ir->dlist[d] = out;
            ir->dcap[d] = len + 1;
        }
        free(first_before);
        free(first_after);
        free(next);
    }
    free(pos_anchor);
    free(pos_task);
    free(pos_before);
    free(cons_off);
    free(cons);
    free(slot);
    free(opt);
#undef SLOT
#undef ADD_POS
    return rc;
}

int sim_ir_compute(sim_ir *ir, sim_kind k, int stage, int mb, int minibatch,
                   int version)
{
    sim_task t = {0};
    t.kind = (uint8_t)k;
    t.stream = SIM_STREAM_COMPUTE;
    t.device = ir->stage_device[stage];
    t.stage = stage;
    t.stage2 = -1;
    t.mb = mb;
    t.minibatch = minibatch;
    t.version = version;
    t.peer = -1;
    return sim_ir_add(ir, &t);
}
