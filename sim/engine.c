/* The discrete-event engine. Events (task ends, flow checks) sit in a
 * binary heap ordered by (time in ns, sequence number), so runs are
 * deterministic. A task starts when its dependencies are done and it is at
 * the head of its (device, stream) queue with the stream idle; a send
 * starts a flow over its route, sharing links max-min fairly with the
 * other flows (re-solved when a flow starts or ends); the matching receive
 * runs from the flow's start to its end plus the route latency; a
 * repeated transfer (sim_task.steps) restarts its flow a latency after
 * each step, so it ends where the chain of sends it stands for would have
 * ended, event for event. All memory
 * is allocated by sim_engine_new; a run allocates nothing (the heap only
 * grows if a first run needs more room). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/engine_int.h"

/* ----------------------------------------------------------------- heap */

static inline int ev_less(const sim_ev *a, const sim_ev *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void heap_push(sim_engine *e, int64_t t, int32_t id, uint32_t epoch)
{
    if (e->nheap == e->capheap) {
        e->capheap *= 2;
        e->heap = util_realloc(e->heap, sizeof(sim_ev) * (size_t)e->capheap);
    }
    sim_ev ev = {t, e->seq++, id, epoch};
    int i = e->nheap++;
    sim_ev *h = e->heap;
    while (i > 0) {
        int p = (i - 1) >> 1;
        if (!ev_less(&ev, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = ev;
}

static sim_ev heap_pop(sim_engine *e)
{
    sim_ev *h = e->heap;
    sim_ev top = h[0];
    sim_ev last = h[--e->nheap];
    int n = e->nheap, i = 0;
    for (;;) {
        int l = 2 * i + 1;
        if (l >= n) break;
        int r = l + 1;
        int m = (r < n && ev_less(&h[r], &h[l])) ? r : l;
        if (!ev_less(&h[m], &last)) break;
        h[i] = h[m];
        i = m;
    }
    if (n) h[i] = last;
    return top;
}

/* ---------------------------------------------------------------- setup */

static int64_t task_dur(const sim_costs *c, const sim_task *t)
{
    const sim_stage_cost *sc = t->stage >= 0 && t->stage < c->n_stages
                             ? &c->stage[t->stage] : NULL;
    switch (t->kind) {
    case SIM_F: return sc->f_ns + sc->task_ns;
    case SIM_RECOMP: return sc->r_ns + sc->task_ns;
    /* split, each half as the machine runs it apart (calibrated) */
    case SIM_B: return sc->bs_ns + sc->task_ns;
    case SIM_W: return sc->ws_ns + sc->task_ns;
    case SIM_BW: return sc->b_ns + sc->w_ns + sc->task_ns;
    case SIM_OPT: return sc ? sc->opt_ns + sc->opt_task_ns : 0;
    case SIM_CPU_OPT: return sc ? sc->cpu_opt_ns : 0;
    default: return 0;
    }
}

static int64_t task_tp(const sim_costs *c, const sim_task *t)
{
    if (t->stage < 0 || t->stage >= c->n_stages) return 0;
    const sim_stage_cost *sc = &c->stage[t->stage];
    switch (t->kind) {
    case SIM_F: return sc->tp_f_ns;
    case SIM_RECOMP: return sc->tp_r_ns;
    case SIM_B: return sc->tp_b_ns;
    case SIM_W: return sc->tp_w_ns;
    case SIM_BW: return sc->tp_b_ns + sc->tp_w_ns;
    default: return 0;
    }
}

/* The NVMe drives of every server: those of server v are
 * drv[off[v] .. off[v + 1]), in node order (malloc'd; free both). */
static void server_drives(const prof_topo *tp, int **off, int **drv)
{
    int ns = tp->n_servers > 0 ? tp->n_servers : 1;
    *off = util_calloc((size_t)ns + 2, sizeof(int));
    *drv = util_malloc(sizeof(int) * (size_t)(tp->n_nodes + 1));
    for (int v = 0; v < tp->n_nodes; v++)
        if (tp->nodes[v].kind == PROF_NODE_NVME && tp->nodes[v].server < ns)
            (*off)[tp->nodes[v].server + 1]++;
    for (int v = 0; v < ns; v++) (*off)[v + 1] += (*off)[v];
    int *fill = util_malloc(sizeof(int) * (size_t)(ns + 1));
    memcpy(fill, *off, sizeof(int) * (size_t)ns);
    for (int v = 0; v < tp->n_nodes; v++)
        if (tp->nodes[v].kind == PROF_NODE_NVME && tp->nodes[v].server < ns)
            (*drv)[fill[tp->nodes[v].server]++] = v;
    free(fill);
}

/* Drive j of the server of device d's GPU, -1. */
static int drive_of(const sim_costs *c, const int *off, const int *drv,
                    int d, int j)
{
    const prof_topo *tp = c->topo;
    int srv = tp->nodes[tp->gpu_node[c->dev_gpu[d]]].server;
    return off[srv] + j < off[srv + 1] ? drv[off[srv] + j] : -1;
}

/* Whether task t is a CPU step priced as traffic on its host's memory (a
 * stage tier's, sim_add_stage_tiers). */
static int cpu_flow(const sim_task *t)
{
    return t->kind == SIM_CPU_OPT && t->bytes > 0;
}

/* The routes of a simulation's transfers by their ends: many lanes go
 * between the same two nodes (every microbatch's send, every ring step),
 * and each such pair's route, its latency and its folded copy are made
 * once (open addressing, grown at half full). */
typedef struct route_memo {
    int64_t key;                /* a * n_nodes + b; -1 empty */
    const int *rt;
    int len, flen;
    size_t off;                 /* folded: its copy in fold_routes */
    double lat;
} route_memo;

typedef struct route_memos {
    route_memo *m;
    size_t cap, n;
} route_memos;

static size_t memo_hash(int64_t key, size_t cap)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

/* The slot of key: its entry, or the empty one it goes in. */
static route_memo *memo_slot(route_memos *t, int64_t key)
{
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        route_memo *m = util_malloc(sizeof *m * cap);
        for (size_t i = 0; i < cap; i++) m[i].key = -1;
        for (size_t i = 0; i < t->cap; i++) {
            if (t->m[i].key < 0) continue;
            size_t h = memo_hash(t->m[i].key, cap);
            while (m[h].key >= 0) h = (h + 1) & (cap - 1);
            m[h] = t->m[i];
        }
        free(t->m);
        t->m = m;
        t->cap = cap;
    }
    size_t h = memo_hash(key, t->cap);
    while (t->m[h].key >= 0 && t->m[h].key != key) h = (h + 1) & (t->cap - 1);
    return &t->m[h];
}

/* Routes that end in a node's own resource. NVMe transfers: lane j of a
 * read or write of a device's states stripes over drive j of its server,
 * from the drive to the host memory nearest the device's GPU or back, and
 * crosses the drive's own resource, which reads and writes share: a
 * write's lane moves read/write bandwidth times its bytes there, so alone
 * it takes bytes over the write bandwidth. A CPU step as traffic: lane j
 * crosses the host memory nearest GPU j of the device's group, which the
 * steps of the server's GPUs share. */
static void node_routes(sim_engine *e, const sim_ir *ir, const sim_costs *c)
{
    const prof_topo *tp = c->topo;
    int *off, *drv;
    server_drives(tp, &off, &drv);
    size_t need = 0;
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *t = &ir->tasks[i];
        int nl = e->lane_off[i + 1] - e->lane_off[i];
        if (cpu_flow(t)) {
            need += (size_t)nl;
        } else if (sim_kind_nvme(t->kind)) {
            int h = prof_topo_gpu_host_mem(tp, c->dev_gpu[t->device]);
            for (int j = 0; j < nl; j++) {
                int dv = drive_of(c, off, drv, t->device, j), n = 0;
                if (dv >= 0) prof_topo_route(tp, dv, h, &n);
                need += (size_t)n + 1;
            }
        }
    }
    if (!need) {
        free(off);
        free(drv);
        return;
    }
    e->xroute = util_malloc(sizeof(int) * need);
    size_t used = 0;
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *t = &ir->tasks[i];
        int nl = e->lane_off[i + 1] - e->lane_off[i];
        if (cpu_flow(t)) {
            for (int j = 0; j < nl; j++) {
                int h = prof_topo_gpu_host_mem(tp, c->dev_gpu[t->device] + j);
                if (h < 0 || e->link_cap[e->n_dl + h] <= 0) continue;
                int L = e->lane_off[i] + j;
                e->xroute[used] = e->n_dl + h;
                e->route[L] = e->xroute + used++;
                e->route_len[L] = 1;
            }
            continue;
        }
        if (!sim_kind_nvme(t->kind)) continue;
        int h = prof_topo_gpu_host_mem(tp, c->dev_gpu[t->device]);
        for (int j = 0; j < nl; j++) {
            int dv = drive_of(c, off, drv, t->device, j), n = 0;
            if (dv < 0) continue;
            int rd = t->kind == SIM_NVME_READ;
            const int *r = prof_topo_route(tp, rd ? dv : h, rd ? h : dv, &n);
            if (h < 0 || !r || !n) continue;
            int L = e->lane_off[i] + j;
            int *x = e->xroute + used;
            memcpy(x, r, sizeof(int) * (size_t)n);
            x[n] = e->n_dl + dv;
            used += (size_t)n + 1;
            e->route[L] = x;
            e->route_len[L] = n + 1;
            const prof_node *nd = &tp->nodes[dv];
            if (!rd && nd->write_bw_bytes_per_s > 0)
                e->lane_scale[L] = nd->read_bw_bytes_per_s /
                                   nd->write_bw_bytes_per_s;
            double lat = prof_route_latency_ns(tp, r, n);
            if ((int64_t)llround(lat) > e->lat_ns[i])
                e->lat_ns[i] = (int64_t)llround(lat);
        }
    }
    free(off);
    free(drv);
}

sim_engine *sim_engine_new(const sim_ir *ir, const sim_costs *c,
                           const sim_run_opts *o)
{
    UTIL_NEVER(!ir->finished);
    sim_engine *e = util_calloc(1, sizeof *e);
    e->ir = ir;
    e->c = c;
    if (o) e->opts = *o;
    int n = e->n = ir->n_tasks;
    e->nd = ir->n_devices;
    e->ns = ir->n_stages;
    e->nq = e->nd * SIM_STREAM_COUNT;
    e->K = ir->n_minibatches;
    e->vstride = e->K + 2;
    size_t N = (size_t)n + 1;
    e->dur = util_calloc(N, sizeof(int64_t));
    e->mem_start = util_calloc(N, sizeof(double));
    e->mem_end = util_calloc(N, sizeof(double));
    e->mem_ramp = util_calloc(N, sizeof(double));
    e->nxt = util_malloc(N * sizeof(int32_t));
    e->head0 = util_malloc(sizeof(int32_t) * (size_t)e->nq);
    e->lane_off = util_calloc(N + 1, sizeof(int));
    for (int i = 0; i < n; i++) {
        const sim_task *t = &ir->tasks[i];
        int l = (t->kind == SIM_SEND || sim_kind_nvme(t->kind) ||
                 t->kind == SIM_SWAP_IN || t->kind == SIM_SWAP_OUT ||
                 cpu_flow(t)) && t->lanes > 1 ? t->lanes : 1;
        if (t->kind == SIM_SEND && t->chans > 1) l *= t->chans;
        e->lane_off[i + 1] = e->lane_off[i] + l;
    }
    size_t NL = (size_t)e->lane_off[n] + 1;
    e->route = util_calloc(NL, sizeof(int *));
    e->route_len = util_calloc(NL, sizeof(int));
    e->lane_scale = util_malloc(NL * sizeof(double));
    for (size_t L = 0; L < NL; L++) e->lane_scale[L] = 1;
    e->lat_ns = util_calloc(N, sizeof(int64_t));
    e->lanes_left = util_calloc(N, sizeof(int32_t));
    e->steps_left = util_calloc(N, sizeof(int32_t));
    e->tp_ns = util_calloc(N, sizeof(int64_t));
    e->static_bytes = util_calloc((size_t)e->nd, sizeof(double));
    e->pending0 = util_calloc((size_t)e->ns * e->vstride, sizeof(int32_t));
    e->pending = util_calloc((size_t)e->ns * e->vstride, sizeof(int32_t));
    e->unmet = util_malloc(N * sizeof(int32_t));
    e->head = util_malloc(sizeof(int32_t) * (size_t)e->nq);
    e->busy = util_calloc((size_t)e->nq, 1);
    e->start = util_malloc(N * sizeof(int64_t));
    e->end = util_malloc(N * sizeof(int64_t));
    e->fstart = util_malloc(N * sizeof(int64_t));
    e->capheap = 2 * n + 64;
    e->heap = util_malloc(sizeof(sim_ev) * (size_t)e->capheap);
    e->mem_cur = util_calloc((size_t)e->nd, sizeof(double));
    e->mem_dirty = util_calloc(2 * (size_t)e->nd, sizeof(int32_t));
    e->mem_task = util_calloc((size_t)e->nd, sizeof(int32_t));
    e->mstep = util_calloc((size_t)e->nd, sizeof(sim_mem_step *));
    e->mstep_n = util_calloc((size_t)e->nd, sizeof(int));
    e->mstep_cap = util_calloc((size_t)e->nd, sizeof(int));
    e->mem_seq = util_calloc((size_t)e->nd, sizeof(uint64_t));
    e->cur_ver = util_calloc((size_t)e->ns, sizeof(int32_t));
    e->live = util_calloc((size_t)e->ns, sizeof(int32_t));
    e->inflight = util_calloc((size_t)e->ns, sizeof(int32_t));
    e->flow_task = util_malloc(NL * sizeof(int32_t));
    e->flow_rem = util_malloc(NL * sizeof(double));
    e->flow_rate = util_malloc(NL * sizeof(double));
    e->flow_route = util_malloc(NL * sizeof(int *));
    e->flow_rlen = util_malloc(NL * sizeof(int));
    e->dev = util_calloc((size_t)e->nd, sizeof(sim_dev_stats));
    e->max_inflight = util_calloc((size_t)e->ns, sizeof(int));
    e->max_versions = util_calloc((size_t)e->ns, sizeof(int));
    if (e->opts.record) {
        e->cap_mem = (4 + SIM_MEM_STEPS) * n + 4 * e->ns + e->nd + 16;
        e->mem = util_malloc(sizeof(sim_mem_point) * (size_t)e->cap_mem);
    }
    /* queues */
    int32_t *last = util_malloc(sizeof(int32_t) * (size_t)e->nq);
    for (int q = 0; q < e->nq; q++) e->head0[q] = last[q] = -1;
    /* the tasks in their order in memory, then the queues in each
     * device's order from their streams alone (a 100,000-task IR's tasks
     * visited in sequence order miss the cache at every one) */
    uint8_t *stream = util_malloc((size_t)n + 1);
    for (int i = 0; i < n; i++) {
        const sim_task *t = &ir->tasks[i];
        e->nxt[i] = -1;
        e->dur[i] = task_dur(c, t);
        e->tp_ns[i] = task_tp(c, t);
        stream[i] = t->stream;
    }
    for (int d = 0; d < e->nd; d++)
        for (int j = ir->dev_off[d]; j < ir->dev_off[d + 1]; j++) {
            int id = ir->seq[j];
            if (stream[id] == SIM_STREAM_RECV) continue;
            int q = d * SIM_STREAM_COUNT + stream[id];
            if (last[q] < 0) e->head0[q] = id;
            else e->nxt[last[q]] = id;
            last[q] = id;
        }
    free(last);
    free(stream);
    /* routes of sends; swaps go to the nearest host memory */
    const prof_topo *tp = c->topo;
    if (tp) {
        e->n_dl = 2 * tp->n_links;
        e->n_res = e->n_dl + tp->n_nodes;
        e->link_cap = util_malloc(sizeof(double) * (size_t)(e->n_res + 1));
        for (int l = 0; l < tp->n_links; l++)
            e->link_cap[2 * l] = e->link_cap[2 * l + 1] =
                tp->links[l].bw_bytes_per_s;
        /* a drive's resource (per node, used by NVMe nodes only) */
        for (int v = 0; v < tp->n_nodes; v++)
            e->link_cap[e->n_dl + v] = tp->nodes[v].read_bw_bytes_per_s;
        e->link_use = util_calloc((size_t)e->n_res + 1, sizeof(int32_t));
        e->mm.rem = util_calloc((size_t)e->n_res + 1, sizeof(double));
        e->mm.cnt = util_calloc((size_t)e->n_res + 1, sizeof(int));
        e->mm.touched = util_calloc((size_t)e->n_res + 1, sizeof(int));
        node_routes(e, ir, c);
        e->mm.frozen = util_calloc(NL, 1);
        /* folded: replica 0's routes, each link replaced by its orbit's
         * stand-in as often as the flow's copies cross that orbit */
        int F = c->fold > 1 ? c->fold : 1;
        /* folded, an all-reduce step from the ring's last simulated
         * member goes to the next replica's device */
        int next_replica = c->n_devices * c->tp;
        int S = c->n_model_stages > 0 ? c->n_model_stages : 1;
        size_t *off = F > 1 ? util_calloc(NL, sizeof(size_t)) : NULL;
        size_t used = 0, capr = 0;
        route_memos memo = {0};
        for (int i = 0; i < n; i++) {
            const sim_task *t = &ir->tasks[i];
            int tl = t->lanes > 1 ? t->lanes : 1;
            for (int j = 0; j < e->lane_off[i + 1] - e->lane_off[i]; j++) {
                int a = -1, b = -1;
                if (t->kind == SIM_SEND && t->peer >= 0) {
                    /* lane j: tensor-parallel rank j % tl of channel
                     * j / tl, which leaves from the member ch before the
                     * sender and arrives at the one ch after the
                     * receiver (sim_task.chans) */
                    int ch = j / tl, sd = t->device;
                    int rd = ir->tasks[t->peer].device;
                    if (ch) {
                        sd = ir->stage_device[t->stage - ch * S];
                        rd = ir->stage_device[t->stage2 + ch * S];
                    }
                    a = tp->gpu_node[c->dev_gpu[sd] + j % tl];
                    int wrap = F > 1 && t->comm == SIM_COMM_DP &&
                               !t->inner && t->stage2 / S <= t->stage / S;
                    b = tp->gpu_node[c->dev_gpu[rd] + j % tl +
                                     (wrap ? next_replica : 0)];
                } else if (t->kind == SIM_SWAP_OUT ||
                           t->kind == SIM_SWAP_IN) {
                    /* lane j: GPU j of the device's group */
                    int g = c->dev_gpu[t->device] + j;
                    int gn = tp->gpu_node[g], h = prof_topo_gpu_host_mem(tp, g);
                    a = t->kind == SIM_SWAP_IN ? h : gn;
                    b = t->kind == SIM_SWAP_IN ? gn : h;
                }
                if (a < 0 || b < 0 || a == b) continue;
                route_memo *r = memo_slot(&memo, (int64_t)a * tp->n_nodes + b);
                if (r->key < 0) {
                    r->key = (int64_t)a * tp->n_nodes + b;
                    memo.n++;
                    r->rt = prof_topo_route(tp, a, b, &r->len);
                    r->lat = 0;
                    r->flen = 0;
                    r->off = 0;
                    for (int k = 0; r->rt && k < r->len; k++)
                        r->lat += tp->links[r->rt[k] / 2].latency_ns;
                    for (int k = 0; F > 1 && r->rt && k < r->len; k++)
                        r->flen += c->fold_mult[r->rt[k]];
                    if (F > 1 && r->rt && r->len) {
                        if (used + (size_t)r->flen > capr) {
                            capr = 2 * (used + (size_t)r->flen) + 64;
                            e->fold_routes = util_realloc(
                                e->fold_routes, sizeof(int) * capr);
                        }
                        r->off = used;
                        for (int k = 0; k < r->len; k++)
                            for (int x = 0; x < c->fold_mult[r->rt[k]]; x++)
                                e->fold_routes[used++] =
                                    c->fold_rep[r->rt[k]];
                    }
                }
                if (!r->rt || !r->len) continue;
                int L = e->lane_off[i] + j;
                e->route[L] = r->rt;
                e->route_len[L] = F > 1 ? r->flen : r->len;
                if (F > 1) off[L] = r->off;
                double lat = r->lat;
                /* a collective's step: NCCL's own latency, where more,
                 * and on CPU cores the fold after it */
                if (t->lat_ns > lat) lat = t->lat_ns;
                lat += t->fold_ns;
                if ((int64_t)llround(lat) > e->lat_ns[i])
                    e->lat_ns[i] = (int64_t)llround(lat);
            }
        }
        free(memo.m);
        if (F > 1)
            for (size_t L = 0; L < NL; L++)
                if (e->route[L]) e->route[L] = e->fold_routes + off[L];
        free(off);
    }
    e->scratch_k = util_calloc((size_t)e->K + 1, sizeof(int64_t));
    e->scratch_dw = util_calloc(2 * (size_t)e->nd + 1, sizeof(int64_t));
    sim_mem_setup(e);
    return e;
}

double sim_engine_link_kind_bytes(const sim_engine *e, prof_link_kind k)
{
    const sim_ir *ir = e->ir;
    const sim_costs *c = e->c;
    if (!c->topo || !e->lane_off) return 0;
    double sum = 0;
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *t = &ir->tasks[i];
        int nl = e->lane_off[i + 1] - e->lane_off[i];
        double rep = t->steps > 1 ? t->steps : 1;
        for (int L = e->lane_off[i]; L < e->lane_off[i + 1]; L++)
            if (e->route[L] && prof_route_has_link_kind(c->topo, e->route[L],
                                                        e->route_len[L], k))
                sum += t->bytes / nl * rep;
    }
    return sum * (c->fold > 1 ? c->fold : 1);
}

void sim_engine_free(sim_engine *e)
{
    if (!e) return;
    free(e->dur); free(e->mem_start); free(e->mem_end);
    free(e->mem_ramp); free(e->nxt);
    free(e->head0); free(e->route); free(e->route_len); free(e->lat_ns);
    free(e->lane_off); free(e->lanes_left); free(e->steps_left); free(e->tp_ns);
    free(e->static_bytes); free(e->pending0); free(e->pending);
    free(e->unmet); free(e->head); free(e->busy); free(e->start);
    free(e->end); free(e->fstart); free(e->heap); free(e->mem_cur);
    free(e->mem_dirty); free(e->mem_task);
    for (int d = 0; e->mstep && d < e->nd; d++) free(e->mstep[d]);
    free(e->mstep); free(e->mstep_n); free(e->mstep_cap); free(e->mem_seq);
    free(e->cur_ver); free(e->live); free(e->inflight); free(e->flow_task);
    free(e->flow_rem); free(e->flow_rate); free(e->flow_route);
    free(e->flow_rlen); free(e->fold_routes); free(e->lane_scale);
    free(e->xroute); free(e->link_cap); free(e->link_use); free(e->mm.rem); free(e->mm.cnt);
    free(e->mm.touched); free(e->mm.frozen); free(e->dev);
    free(e->max_inflight); free(e->max_versions); free(e->mem);
    free(e->scratch_k); free(e->scratch_dw);
    free(e);
}

/* ---------------------------------------------------------------- flows */

static void flows_advance(sim_engine *e)
{
    double dt = (double)(e->now - e->flow_last) * 1e-9;
    if (dt > 0)
        for (int f = 0; f < e->nflow; f++)
            e->flow_rem[f] -= e->flow_rate[f] * dt;
    e->flow_last = e->now;
}

static void flows_solve(sim_engine *e)
{
    e->flow_epoch++;
    if (!e->nflow) return;
    sim_maxmin(e->nflow, e->flow_route, e->flow_rlen, e->link_cap,
               e->flow_rate, &e->mm);
    double best = HUGE_VAL;
    for (int f = 0; f < e->nflow; f++) {
        double r = e->flow_rate[f];
        double t = r > 0 ? fmax(e->flow_rem[f], 0) / r : HUGE_VAL;
        if (t < best) best = t;
    }
    if (best == HUGE_VAL) return; /* zero-bandwidth links: never ends */
    heap_push(e, e->now + sim_task_ns(ceil(best * 1e9)), -1, e->flow_epoch);
}

static void task_start(sim_engine *e, int id);

static void try_start(sim_engine *e, int id)
{
    if (id < 0 || e->unmet[id]) return;
    const sim_task *t = &e->ir->tasks[id];
    if (t->stream == SIM_STREAM_RECV) return; /* started by its send */
    int q = t->device * SIM_STREAM_COUNT + t->stream;
    if (e->busy[q] || e->head[q] != id) return;
    task_start(e, id);
}

/* The end of a transfer's step a latency from now: the send's, and with
 * the last step its receive's. */
static void step_end(sim_engine *e, int id)
{
    const sim_task *t = &e->ir->tasks[id];
    /* a repeated transfer's steps moved as one (flow_step): their
     * latencies after it */
    int64_t lat = e->lat_ns[id];
    if (!e->opts.ring_steps && e->steps_left[id] > 1) {
        lat *= e->steps_left[id];
        e->steps_left[id] = 1;
    }
    heap_push(e, e->now + lat, id, 0);
    if (t->kind == SIM_SEND && t->peer >= 0 && e->steps_left[id] <= 1)
        heap_push(e, e->now + lat, t->peer, 0);
}

/* Puts a transfer's bytes on its lanes' routes: a repeated transfer's
 * steps at once (sim_task.steps: a folded ring's, each the same bytes on
 * the same routes), their latencies after them (step_end), so a ring of
 * R members costs an event, not 2(R-1); the links carry the same bytes,
 * its gaps come together at its end. With sim_run_opts.ring_steps a
 * step at a time. */
static void flow_step(sim_engine *e, int id)
{
    const sim_task *t = &e->ir->tasks[id];
    int l0 = e->lane_off[id], nl = e->lane_off[id + 1] - l0, moving = 0;
    for (int j = 0; j < nl && t->bytes > 0; j++)
        if (e->route[l0 + j]) moving++;
    if (!moving) {
        step_end(e, id);
        return;
    }
    flows_advance(e);
    e->lanes_left[id] = moving;
    /* Flows on links no other flow uses change no other rate: they get
     * their bottleneck at once and the others keep theirs (an exact
     * shortcut of max-min, which large clusters mostly take). */
    int alone = 1;
    for (int j = 0; j < nl; j++) {
        const int *rt = e->route[l0 + j];
        if (!rt) continue;
        for (int k = 0; k < e->route_len[l0 + j]; k++)
            if (e->link_use[rt[k]]++) alone = 0;
    }
    int64_t soon = INT64_MAX;
    for (int j = 0; j < nl; j++) {
        if (!e->route[l0 + j]) continue;
        int f = e->nflow++;
        e->flow_task[f] = id;
        e->flow_rem[f] = t->bytes / nl * e->lane_scale[l0 + j] *
                         (!e->opts.ring_steps && e->steps_left[id] > 1
                              ? e->steps_left[id] : 1);
        e->flow_rate[f] = 0;
        e->flow_route[f] = e->route[l0 + j];
        e->flow_rlen[f] = e->route_len[l0 + j];
        if (alone) {
            double r = e->link_cap[e->flow_route[f][0]];
            for (int k = 1; k < e->flow_rlen[f]; k++)
                r = fmin(r, e->link_cap[e->flow_route[f][k]]);
            e->flow_rate[f] = r;
            if (r > 0) {
                int64_t x = e->now +
                            sim_task_ns(ceil(e->flow_rem[f] / r * 1e9));
                if (x < soon) soon = x;
            }
        }
    }
    if (!alone) flows_solve(e);
    else if (soon != INT64_MAX) heap_push(e, soon, -1, e->flow_epoch);
}

static void flow_begin(sim_engine *e, int id)
{
    const sim_task *t = &e->ir->tasks[id];
    int r = t->kind == SIM_SEND ? t->peer : -1;
    e->fstart[id] = e->now;
    if (r >= 0) {
        e->start[r] = e->fstart[r] = e->now;
        sim_mem_add(e, e->ir->tasks[r].device, e->mem_start[r], r);
    }
    flow_step(e, id);
}

static void flows_check(sim_engine *e)
{
    flows_advance(e);
    int w = 0, shared = 0, ended = 0;
    for (int f = 0; f < e->nflow; f++) {
        /* done when less than a nanosecond's worth is left */
        if (e->flow_rem[f] <= e->flow_rate[f] * 1e-9) {
            int id = e->flow_task[f];
            ended++;
            for (int k = 0; k < e->flow_rlen[f]; k++)
                if (--e->link_use[e->flow_route[f][k]]) shared = 1;
            if (--e->lanes_left[id] > 0) continue; /* other lanes move */
            step_end(e, id);
            continue;
        }
        e->flow_task[w] = e->flow_task[f];
        e->flow_rem[w] = e->flow_rem[f];
        e->flow_rate[w] = e->flow_rate[f];
        e->flow_route[w] = e->flow_route[f];
        e->flow_rlen[w] = e->flow_rlen[f];
        w++;
    }
    e->nflow = w;
    if (shared || !ended) {
        flows_solve(e);
        return;
    }
    /* the flows that ended shared no link: the others keep their rates;
     * the next check is the earliest end among them */
    double best = HUGE_VAL;
    for (int f = 0; f < e->nflow; f++) {
        double r = e->flow_rate[f];
        double t = r > 0 ? fmax(e->flow_rem[f], 0) / r : HUGE_VAL;
        if (t < best) best = t;
    }
    if (best != HUGE_VAL)
        heap_push(e, e->now + sim_task_ns(ceil(best * 1e9)), -1,
                  e->flow_epoch);
}

/* ---------------------------------------------------------------- tasks */

/* A backward's successors met part-way through it: each when the
 * backward has computed its bucket's ops, their share of its time
 * (sim_costs.bwd_done) from its start (an event whose epoch is 1). */
static void early_deps(sim_engine *e, int id)
{
    const sim_ir *ir = e->ir;
    const sim_task *t = &ir->tasks[id];
    if ((t->kind != SIM_BW && t->kind != SIM_W) || !e->c->bwd_done) return;
    for (int k = ir->succ_off[id]; k < ir->succ_off[id + 1]; k++) {
        int s = ir->succ[k];
        if (!sim_dep_early(&ir->tasks[s], t)) continue;
        double f = e->c->bwd_done[2 * (size_t)ir->tasks[s].bkt_first +
                                  (t->kind == SIM_W)];
        heap_push(e, e->now + (int64_t)llround(f * (double)e->dur[id]), s, 1);
    }
}

/* When step k of compute task t's ramp (a forward's, growing, or a
 * backward's) comes, as a share of its time: its stage's, else equal
 * steps (a forward's first at its start, a backward's last at its end). */
static double mem_at(const sim_engine *e, const sim_task *t, int grow,
                     int k)
{
    const sim_stage_cost *sc = t->stage >= 0 && t->stage < e->ns
                             ? &e->c->stage[t->stage] : NULL;
    /* a backward's last step is at its end: 0 there, none were set */
    if (!sc || !(sc->mem_b[SIM_MEM_STEPS - 1] > 0))
        return (double)(k + !grow) / SIM_MEM_STEPS;
    return grow ? sc->mem_f[k] : sc->mem_b[k];
}

static void task_start(sim_engine *e, int id)
{
    const sim_task *t = &e->ir->tasks[id];
    int q = t->device * SIM_STREAM_COUNT + t->stream;
    e->busy[q] = 1;
    e->start[id] = e->now;
    early_deps(e, id);
    /* a ramp's steps: what a forward keeps from the start of the op
     * that begins each step (all of it, if it takes no time), what a
     * backward frees once the ops holding it are done, its last step at
     * its end: a step early for the one, late for the other, never less
     * than the task holds */
    double ramp = e->mem_ramp[id], now_add = e->mem_start[id];
    if (ramp != 0) {
        int last = ramp > 0 ? SIM_MEM_STEPS : SIM_MEM_STEPS - 1;
        for (int k = 0; k < last; k++) {
            int64_t dt = e->dur[id] > 0
                       ? (int64_t)llround(mem_at(e, t, ramp > 0, k) *
                                          (double)e->dur[id]) : 0;
            if (ramp > 0 && dt <= 0) now_add += ramp / SIM_MEM_STEPS;
            else sim_mem_step_add(e, t->device, e->now + dt,
                                  ramp / SIM_MEM_STEPS, id);
        }
    }
    sim_mem_add(e, t->device, now_add, id);
    if (t->kind == SIM_F) {
        int s = t->stage;
        if (++e->inflight[s] > e->max_inflight[s])
            e->max_inflight[s] = e->inflight[s];
    }
    if (t->kind == SIM_SEND || t->kind == SIM_SWAP_IN ||
        t->kind == SIM_SWAP_OUT || sim_kind_nvme(t->kind) || cpu_flow(t))
        flow_begin(e, id);
    else
        heap_push(e, e->now + e->dur[id], id, 0);
}

static void task_end(sim_engine *e, int id)
{
    const sim_task *t = &e->ir->tasks[id];
    const sim_ir *ir = e->ir;
    e->end[id] = e->now;
    double ramp = e->mem_ramp[id];
    sim_mem_add(e, t->device, e->mem_end[id] +
                (ramp < 0 ? ramp / SIM_MEM_STEPS : 0), id);
    if (t->kind == SIM_BW || t->kind == SIM_W) e->inflight[t->stage]--;
    sim_mem_task_end(e, id);
    int q = -1;
    if (t->stream != SIM_STREAM_RECV) {
        q = t->device * SIM_STREAM_COUNT + t->stream;
        e->busy[q] = 0;
        e->head[q] = e->nxt[id];
    }
    for (int k = ir->succ_off[id]; k < ir->succ_off[id + 1]; k++) {
        int s = ir->succ[k];
        if (e->c->bwd_done && sim_dep_early(&ir->tasks[s], t)) continue;
        if (--e->unmet[s] == 0) try_start(e, s);
    }
    if (q >= 0) try_start(e, e->head[q]);
}

/* ---------------------------------------------------------------- stats */

static int64_t clip_len(int64_t a, int64_t b, int64_t t0, int64_t t1)
{
    if (a < t0) a = t0;
    if (b > t1) b = t1;
    return b > a ? b - a : 0;
}

typedef struct span { int64_t a, b; } span;

static int span_cmp(const void *x, const void *y)
{
    const span *p = x, *q = y;
    return (p->a > q->a) - (p->a < q->a);
}

/* Appends span [a, b] to *v (n of cap; grows it). */
static void span_push(span **v, int *n, int *cap, int64_t a, int64_t b)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *v = util_realloc(*v, sizeof **v * (size_t)*cap);
    }
    (*v)[(*n)++] = (span){a, b};
}

/* The length of the union of spans v[0..n) inside [t0, t1] (sorts v). */
static int64_t union_len(span *v, int n, int64_t t0, int64_t t1)
{
    if (n < 1) return 0;
    qsort(v, (size_t)n, sizeof *v, span_cmp);
    int64_t tot = 0, a = 0, b = 0;
    int open = 0;
    for (int i = 0; i < n; i++) {
        if (open && v[i].a <= b) {
            if (v[i].b > b) b = v[i].b;
            continue;
        }
        if (open) tot += clip_len(a, b, t0, t1);
        a = v[i].a;
        b = v[i].b;
        open = 1;
    }
    if (open) tot += clip_len(a, b, t0, t1);
    return tot;
}

/* The accounting of a finished run from its task times alone (see
 * sim_stats_times); scratch_k has K entries, scratch_dw 2 per device. */
static void stats_times(const sim_ir *ir, const int64_t *start,
                        const int64_t *end, const int64_t *fstart,
                        const int64_t *tp_ns, sim_result *r,
                        sim_dev_stats *dev, int64_t *scratch_k,
                        int64_t *scratch_dw)
{
    const int K = ir->n_minibatches, nd = ir->n_devices, n = ir->n_tasks;
    int64_t t0 = 0, t1 = r->makespan_ns;
    int iters = 1;
    if (K > 1) {
        /* steady state: from the end of the first minibatch's updates to
         * the end of a later one's */
        int64_t *done = scratch_k;
        memset(done, 0, sizeof(int64_t) * (size_t)K);
        for (int i = 0; i < n; i++) {
            const sim_task *t = &ir->tasks[i];
            if (t->minibatch >= 0 && t->minibatch < K &&
                end[i] > done[t->minibatch])
                done[t->minibatch] = end[i];
        }
        /* the first minibatches hold the fill and the last ones the drain
         * of the simulated run, not steady state: with a deep pipeline
         * and few microbatches per minibatch, several of each (the
         * default count, sim_default_minibatches, is 4 + twice the fill):
         * trim f = (K-4)/2 from the start and f+1 from the end */
        int f = K >= 4 ? (K - 4) / 2 : 0;
        int last = (K >= 3 ? K - 2 : K - 1) - f;
        int first = f;
        t0 = done[first];
        t1 = done[last];
        iters = last - first;
        if (t1 <= t0) { t0 = 0; t1 = r->makespan_ns; iters = K; }
    }
    r->window_t0 = t0;
    r->window_t1 = t1;
    r->window_iters = iters;
    r->iteration_ns = (t1 - t0) / iters;
    int64_t *dw = NULL;
    if (K > 1) {
        /* per device: from its own end of the first minibatch to its end
         * of the last one, so the drain of the simulated run is not
         * counted as a bubble of a schedule that never drains */
        dw = scratch_dw;
        memset(dw, 0, 2 * sizeof(int64_t) * (size_t)nd);
        int wf = K >= 4 ? (K - 4) / 2 : 0;
        int wlast = (K >= 3 ? K - 2 : K - 1) - wf;
        int wfirst = wf;
        for (int i = 0; i < n; i++) {
            const sim_task *t = &ir->tasks[i];
            int64_t *w = &dw[2 * t->device];
            if (t->minibatch == wfirst && end[i] > w[0]) w[0] = end[i];
            if (t->minibatch == wlast && end[i] > w[1])
                w[1] = end[i];
        }
    }
    /* a device's data-parallel collectives are in flight while any of
     * its ring steps moves and while its compute waits on one (the wait
     * counted exposed: for the replicas to join, and the steps' latency,
     * which sends alone leave out) */
    span *dps = NULL;
    int ndps = 0, cdps = 0;
    for (int d = 0; d < nd; d++) {
        sim_dev_stats *ds = &dev[d];
        int64_t comp = 0, rec = 0, opt = 0, idle = 0;
        ndps = 0;
        int64_t busy[SIM_COMM_COUNT] = {0}, exp[SIM_COMM_COUNT] = {0};
        int64_t g0 = t0, g1 = t1;
        if (dw && dw[2 * d + 1] > dw[2 * d]) {
            t0 = dw[2 * d];
            t1 = dw[2 * d + 1];
        }
        int64_t prev = t0;
        for (int j = ir->dev_off[d]; j < ir->dev_off[d + 1]; j++) {
            int id = ir->seq[j];
            const sim_task *t = &ir->tasks[id];
            if (t->kind == SIM_SEND && t->comm < SIM_COMM_COUNT &&
                t->comm != SIM_COMM_DP)
                busy[t->comm] += clip_len((fstart ? fstart : start)[id], end[id], t0, t1);
            if ((t->kind == SIM_SEND || t->kind == SIM_RECV) &&
                t->comm == SIM_COMM_DP)
                span_push(&dps, &ndps, &cdps, (fstart ? fstart : start)[id],
                          end[id]);
            if (t->stream != SIM_STREAM_COMPUTE) continue;
            int64_t len = clip_len(start[id], end[id], t0, t1);
            /* tensor-parallel all-reduces inside the task (pro rata when
             * the window cuts it) */
            int64_t full = end[id] - start[id], tpn = (tp_ns ? tp_ns[id] : 0);
            if (tpn > 0 && len < full)
                tpn = full > 0 ? (int64_t)((double)tpn * len / full) : 0;
            if (tpn > len) tpn = len;
            exp[SIM_COMM_TP] += tpn;
            len -= tpn;
            if (t->kind == SIM_RECOMP) rec += len;
            else if (t->kind == SIM_OPT) opt += len;
            else comp += len;
            int64_t gs = prev, ge = start[id];
            int64_t gap = clip_len(gs, ge, t0, t1);
            if (gap > 0) {
                int64_t xp = 0, xd = 0, xe = 0, dend = gs;
                /* waiting for a gradient all-reduce (a ring of steps, the
                 * receive its last): all of the wait up to its end */
                for (int k = 0; k < t->n_dep; k++) {
                    int dd = ir->deps[t->dep_off + k];
                    const sim_task *u = &ir->tasks[dd];
                    if (u->kind != SIM_RECV || u->comm != SIM_COMM_DP)
                        continue;
                    int64_t b = end[dd] < ge ? end[dd] : ge;
                    if (b > dend) dend = b;
                }
                xd = clip_len(gs, dend, t0, t1);
                if (xd > 0) span_push(&dps, &ndps, &cdps, gs, dend);
                /* a pipeline transfer, or a tied table's copy from
                 * another stage: while it moves (after the ring's wait,
                 * not counted twice); before, the device waits for that
                 * stage's compute (a bubble) */
                for (int k = 0; k < t->n_dep; k++) {
                    int dd = ir->deps[t->dep_off + k];
                    const sim_task *u = &ir->tasks[dd];
                    if (u->kind != SIM_RECV || u->comm == SIM_COMM_DP)
                        continue;
                    int64_t b = end[dd] < ge ? end[dd] : ge;
                    int64_t a = (fstart ? fstart : start)[dd];
                    if (a < dend) a = dend;
                    int64_t o = clip_len(a, b, t0, t1);
                    if (u->comm == SIM_COMM_EMB) {
                        if (o > xe) xe = o;
                    } else if (o > xp) {
                        xp = o;
                    }
                }
                if (xd > gap) xd = gap;
                if (xe > gap - xd) xe = gap - xd;
                if (xp > gap - xd - xe) xp = gap - xd - xe;
                exp[SIM_COMM_DP] += xd;
                exp[SIM_COMM_EMB] += xe;
                exp[SIM_COMM_PP] += xp;
                idle += gap - xd - xe - xp;
            }
            if (end[id] > prev) prev = end[id];
        }
        idle += clip_len(prev, t1, t0, t1);
        busy[SIM_COMM_TP] = exp[SIM_COMM_TP];
        busy[SIM_COMM_DP] = union_len(dps, ndps, t0, t1);
        ds->compute_ns = comp / iters;
        ds->recompute_ns = rec / iters;
        ds->opt_ns = opt / iters;
        ds->comm_exposed_ns = 0;
        for (int k = 0; k < SIM_COMM_COUNT; k++) {
            ds->comm_busy_ns[k] = busy[k] / iters;
            ds->comm_exp_ns[k] = exp[k] / iters;
            ds->comm_exposed_ns += exp[k] / iters;
        }
        ds->bubble_ns = idle / iters;
        ds->bubble_fraction = t1 > t0 ? (double)idle / (double)(t1 - t0) : 0;
        t0 = g0;
        t1 = g1;
    }
    free(dps);
}

void sim_stats_times(const sim_ir *ir, const int64_t *start,
                     const int64_t *end, const int64_t *fstart,
                     const int64_t *tp_ns, sim_result *r, sim_dev_stats *dev)
{
    int64_t *k = util_calloc((size_t)ir->n_minibatches + 1, sizeof *k);
    int64_t *dw = util_calloc(2 * (size_t)ir->n_devices + 1, sizeof *dw);
    stats_times(ir, start, end, fstart, tp_ns, r, dev, k, dw);
    free(k);
    free(dw);
}

static void stats(sim_engine *e, sim_result *r)
{
    stats_times(e->ir, e->start, e->end, e->fstart, e->tp_ns, r, e->dev,
                e->scratch_k, e->scratch_dw);
    for (int d = 0; d < e->nd; d++) e->dev[d].static_bytes = e->static_bytes[d];
}

int sim_result_code(const sim_result *r)
{
    return r->too_slow ? UTIL_EXIT_USAGE : UTIL_EXIT_FAIL;
}

int sim_engine_run(sim_engine *e, sim_result *r)
{
    const sim_ir *ir = e->ir;
    int n = e->n;
    for (int i = 0; i < n; i++) {
        e->unmet[i] = ir->tasks[i].n_dep;
        e->steps_left[i] = ir->tasks[i].steps > 1 ? ir->tasks[i].steps : 1;
        e->start[i] = e->end[i] = e->fstart[i] = -1;
    }
    memcpy(e->head, e->head0, sizeof(int32_t) * (size_t)e->nq);
    memset(e->busy, 0, (size_t)e->nq);
    memcpy(e->pending, e->pending0,
           sizeof(int32_t) * (size_t)e->ns * e->vstride);
    memset(e->cur_ver, 0, sizeof(int32_t) * (size_t)e->ns);
    memset(e->inflight, 0, sizeof(int32_t) * (size_t)e->ns);
    memset(e->max_inflight, 0, sizeof(int) * (size_t)e->ns);
    for (int s = 0; s < e->ns; s++) e->live[s] = e->max_versions[s] = 1;
    e->nheap = 0;
    e->seq = 0;
    e->now = 0;
    e->nflow = 0;
    e->flow_last = 0;
    e->flow_epoch = 0;
    if (e->link_use)
        memset(e->link_use, 0, sizeof(int32_t) * (size_t)(e->n_res + 1));
    e->n_mem = 0;
    e->oom = 0;
    e->oom_task = -1;
    e->oom_t = 0;
    e->events = 0;
    e->n_dirty = 0;
    e->mem_late = 0;
    e->cur_seq = e->oom_seq = 0;
    memset(e->mstep_n, 0, sizeof(int) * (size_t)e->nd);
    for (int d = 0; d < e->nd; d++) {
        memset(&e->dev[d], 0, sizeof e->dev[d]);
        e->dev[d].capacity_bytes = e->c->dev_capacity[d];
        e->mem_cur[d] = 0;
        e->mem_dirty[d] = 0;
        sim_mem_add(e, d, e->static_bytes[d], -1);
    }
    for (int q = 0; q < e->nq; q++) try_start(e, e->head[q]);
    int64_t ended = 0;
    int cut = 0;
    while (e->nheap) {
        /* an instant's memory counts once all of it is applied */
        if (e->heap[0].t != e->now) {
            sim_mem_settle(e);
            if (e->oom && e->opts.stop_at_oom) {
                /* a step before it may have overflowed first */
                sim_mem_steps_flush(e, e->now);
                cut = 1;
                break;
            }
        }
        sim_ev ev = heap_pop(e);
        if (ev.t > SIM_T_MAX) {
            char b[128];
            memset(r, 0, sizeof *r);
            r->too_slow = 1;
            snprintf(r->msg, sizeof r->msg, "the simulated clock ran past "
                     "%.3g years at %s: the hardware's figures make the "
                     "plan's work too slow to simulate (check the GPU's "
                     "peak_tflops and mem_bw_gb_per_s, and the links' "
                     "bandwidth)", SIM_T_MAX * 1e-9 / 31557600,
                     ev.id >= 0 ? sim_task_str(ir, ev.id, b, sizeof b)
                                : "a transfer");
            return -1;
        }
        e->now = ev.t;
        e->cur_seq = ev.seq;
        e->events++;
        if (ev.id < 0) {
            if (ev.epoch == e->flow_epoch) flows_check(e);
            continue;
        }
        if (ev.epoch == 1) {
            /* a dependency met part-way through a backward */
            if (--e->unmet[ev.id] == 0) try_start(e, ev.id);
            continue;
        }
        if (e->steps_left[ev.id] > 1) {
            /* a step of a repeated transfer (ring_steps): the next one
             * starts now, as the next send of the chain would when its
             * receive ends */
            e->steps_left[ev.id]--;
            flow_step(e, ev.id);
            continue;
        }
        task_end(e, ev.id);
        ended++;
    }
    sim_mem_settle(e);
    if (!cut) sim_mem_steps_flush(e, INT64_MAX);
    memset(r, 0, sizeof *r);
    r->n_devices = e->nd;
    r->n_stages = e->ns;
    r->events = e->events;
    r->start_ns = e->start;
    r->end_ns = e->end;
    r->flow_start_ns = e->fstart;
    r->mem = e->mem;
    r->n_mem = e->n_mem;
    r->dev = e->dev;
    r->max_inflight = e->max_inflight;
    r->max_versions = e->max_versions;
    r->oom = e->oom;
    r->oom_task = e->oom_task;
    r->oom_t_ns = e->oom_t;
    for (int i = 0; i < n; i++)
        if (e->end[i] > r->makespan_ns) r->makespan_ns = e->end[i];
    /* an overflow by a step whose device never changed again is found by
     * the last flush, every task ended: an answer with the whole
     * timeline (the planner takes its peak as a stopped run's re-run
     * would give it) */
    if (e->oom && e->opts.stop_at_oom && ended < n) {
        /* the verdict is in; the timeline is not, so no statistics */
        r->stopped = 1;
        r->ok = 1;
        return 0;
    }
    if (ended < n) {
        char b[128];
        int len = snprintf(r->msg, sizeof r->msg, "deadlock: %lld of %d "
                           "tasks never ran; stuck:",
                           (long long)(n - ended), n);
        int shown = 0;
        for (int q = 0; q < e->nq && shown < 6; q++) {
            int h = e->head[q];
            if (h < 0 || len >= (int)sizeof r->msg - 1) continue;
            len += snprintf(r->msg + len, sizeof r->msg - (size_t)len,
                            "\n  %s", sim_task_str(ir, h, b, sizeof b));
            shown++;
        }
        r->ok = 0;
        return -1;
    }
    r->ok = 1;
    stats(e, r);
    return 0;
}
