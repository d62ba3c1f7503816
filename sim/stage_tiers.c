/* Pipeline stages that keep their optimizer state on a host tier (see
 * sim_add_stage_tiers in sim/ir.h): the stage's GPU holds its fp16
 * weights and gradients, the host its fp32 master weights and Adam
 * moments, in DRAM or on the server's drives, and the host's CPU steps
 * them. What the step moves (PCIe both ways, the drives), and the CPU's
 * share of the host's memory, are tasks of the IR, so they contend with
 * the pipeline's own transfers and with the other GPUs' steps on the
 * same server. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

/* The drives' share of a step is streamed in chunks of at most this much
 * state (read, stepped, written back; three chunks in host memory at
 * most), as ZeRO-Infinity steps sub-groups of parameters. */
#define NVME_CHUNK_BYTES (1024.0 * 1024 * 1024)
#define NVME_MAX_CHUNKS 64

static const char *const names[SIM_TIER_COUNT] = {"gpu", "dram", "nvme"};

const char *sim_state_tier_name(int t)
{
    return (unsigned)t < SIM_TIER_COUNT ? names[t] : "?";
}

int sim_state_tier_parse(const char *s)
{
    for (int t = 0; t < SIM_TIER_COUNT; t++)
        if (!strcmp(s, names[t])) return t;
    return -1;
}

int sim_state_tiers_parse(const char *s, int n, unsigned char *out,
                          util_err *e)
{
    int k = 0;
    for (const char *p = s;;) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        char w[16];
        int t = -1;
        if (len < sizeof w) {
            memcpy(w, p, len);
            w[len] = 0;
            t = sim_state_tier_parse(w);
        }
        if (t < 0)
            return util_errf(e, UTIL_EXIT_USAGE, "'%.*s' is not a tier: "
                             "expected gpu, dram or nvme", (int)len, p);
        if (k == n)
            return util_errf(e, UTIL_EXIT_USAGE, "'%s' gives more tiers than "
                             "the plan's %d stages", s, n);
        out[k++] = (unsigned char)t;
        if (!q) break;
        p = q + 1;
    }
    if (k == 1)
        for (int i = 1; i < n; i++) out[i] = out[0];
    else if (k != n)
        return util_errf(e, UTIL_EXIT_USAGE, "'%s' gives %d tiers for %d "
                         "stages: give one for every stage, or one per "
                         "stage", s, k, n);
    return 0;
}

int sim_plan_tiered(const sim_plan *p)
{
    for (int s = 0; p->state_tier && s < p->n_stages; s++)
        if (p->state_tier[s]) return 1;
    return 0;
}

char *sim_state_tiers_str(const sim_plan *p, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = 0;
    for (int s = 0; s < p->n_stages && o < n; s++) {
        int w = snprintf(buf + o, n - o, "%s%s", s ? "," : "",
                         sim_state_tier_name(p->state_tier
                                             ? p->state_tier[s] : 0));
        if (w < 0) break;
        o += (size_t)w;
    }
    return buf;
}

/* What a stage's step takes in (the gradient) and gives back (the
 * weights): the rank's shard of it under ZeRO. */
static double stepped_bytes(const sim_costs *c, const sim_stage_cost *sc)
{
    return c->zero && c->shard > 1 ? sc->train_bytes / c->shard
                                   : sc->train_bytes;
}

/* The chunks of a drive-held step: one where the CPU's share is a fixed
 * time, not traffic. */
static int chunks_of(const sim_stage_cost *sc)
{
    if (sc->cpu_opt_bytes <= 0) return 1;
    double k = ceil(sc->host_state_bytes / NVME_CHUNK_BYTES);
    return k < 1 ? 1 : k > NVME_MAX_CHUNKS ? NVME_MAX_CHUNKS : (int)k;
}

int sim_stage_tier_costs(sim_costs *c, const prof_topo *t, util_err *e)
{
    c->stage_tiers = 0;
    for (int s = 0; s < c->n_stages; s++)
        if (c->stage[s].state_tier) c->stage_tiers++;
    if (!c->stage_tiers) return 0;
    if (c->offload)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s places every "
                         "stage's states itself: give no stage tiers",
                         sim_sched_name(c->offload));
    if (!t)
        return util_errf(e, UTIL_EXIT_USAGE, "stage tiers need a server "
                         "with host memory");

    int tp = c->tp > 1 ? c->tp : 1;
    int ns = t->n_servers > 0 ? t->n_servers : 1;
    double *host = util_calloc((size_t)ns, sizeof(double));
    double *disk = util_calloc((size_t)ns, sizeof(double));
    double *chunk = util_calloc((size_t)c->n_devices + 1, sizeof(double));
    int *drives = util_calloc((size_t)ns, sizeof(int));
    double *dcap = util_calloc((size_t)ns, sizeof(double));
    for (int v = 0; v < t->n_nodes; v++)
        if (t->nodes[v].kind == PROF_NODE_NVME &&
            t->nodes[v].server < ns) {
            drives[t->nodes[v].server]++;
            dcap[t->nodes[v].server] += t->nodes[v].capacity_bytes;
        }
    int rc = 0;
    for (int s = 0; s < c->n_stages && !rc; s++) {
        sim_stage_cost *sc = &c->stage[s];
        if (!sc->state_tier) continue;
        int d = c->stage_device[s], g = c->dev_gpu[d];
        int srv = t->nodes[t->gpu_node[g]].server;
        int h = prof_topo_gpu_host_mem(t, g);
        if (h < 0) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "stage %d keeps its optimizer "
                           "state in %s, but GPU %d has no host memory in %s",
                           sc->model_stage, sim_state_tier_name(sc->state_tier),
                           g, t->name);
            break;
        }
        if (sc->state_tier == SIM_TIER_NVME && !drives[srv]) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "stage %d keeps its optimizer "
                           "state on nvme, but server %d of %s has no NVMe "
                           "drive (%s)", sc->model_stage, srv,
                           t->name, prof_topo_more_drives(t));
            break;
        }
        double params = (c->zero && c->shard > 1
                         ? sc->train_params / c->shard : sc->train_params) * tp;
        double step = stepped_bytes(c, sc) * tp;
        sc->cpu_opt_ns = sim_task_ns(round(sim_cpu_opt_ns(t, g, params)));
        double bw = t->nodes[h].read_bw_bytes_per_s;
        sc->cpu_opt_bytes = bw > 0 ? (double)sc->cpu_opt_ns * 1e-9 * bw : 0;
        sc->tier_bytes = step;
        sc->opt_ns = 0;
        /* host DRAM: the fp32 gradient the step reads (4 bytes a
         * parameter it steps), and the state where it lives there; on
         * the drives the state, three chunks of it staged in DRAM per
         * GPU at most (the state: the fp32 weights too where they are
         * the weights that train, sim_stage_cost.host_state_bytes) */
        host[srv] += 4 * params;
        if (sc->state_tier == SIM_TIER_DRAM) {
            host[srv] += sc->host_state_bytes * tp;
        } else {
            disk[srv] += sc->host_state_bytes * tp;
            int K = chunks_of(sc);
            chunk[d] = fmax(chunk[d], (K < 3 ? K : 3) *
                                          sc->host_state_bytes * tp / K);
        }
    }
    for (int d = 0; d < c->n_devices && !rc; d++)
        host[t->nodes[t->gpu_node[c->dev_gpu[d]]].server] += chunk[d];
    c->host_bytes = c->host_cap = c->nvme_bytes = c->nvme_cap = 0;
    for (int v = 0; v < ns && !rc; v++) {
        double cap = prof_topo_server_dram(t, v);
        char need[32], have[32], miss[32];
        if (host[v] > cap) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "stage tiers: server %d's host "
                           "DRAM cannot hold the optimizer state kept there: "
                           "%s, it has %s (%s missing in DRAM; %s%s%s)",
                           v, util_fmt_bytes(host[v], need, sizeof need),
                           util_fmt_bytes(cap, have, sizeof have),
                           util_fmt_bytes(host[v] - cap, miss, sizeof miss),
                           prof_topo_more_dram(t),
                           drives[v] ? ", or put more stages on nvme"
                                     : ", or ",
                           drives[v] ? "" : prof_topo_more_drives(t));
            sim_err_lacks(e, SIM_TIER_DRAM, host[v], cap);
        } else if (disk[v] > dcap[v]) {
            rc = util_errf(e, UTIL_EXIT_USAGE, "stage tiers: server %d's NVMe "
                           "drives cannot hold the optimizer state kept "
                           "there: %s, %d drive%s hold%s %s (%s missing on "
                           "NVMe; %s)", v,
                           util_fmt_bytes(disk[v], need, sizeof need),
                           drives[v], drives[v] == 1 ? "" : "s",
                           drives[v] == 1 ? "s" : "",
                           util_fmt_bytes(dcap[v], have, sizeof have),
                           util_fmt_bytes(disk[v] - dcap[v], miss, sizeof miss),
                           prof_topo_more_drives(t));
            sim_err_lacks(e, SIM_TIER_NVME, disk[v], dcap[v]);
        }
        if (host[v] > c->host_bytes) {
            c->host_bytes = host[v];
            c->host_cap = cap;
        }
        if (disk[v] > c->nvme_bytes) {
            c->nvme_bytes = disk[v];
            c->nvme_cap = dcap[v];
        }
    }
    free(host);
    free(disk);
    free(chunk);
    free(drives);
    free(dcap);
    return rc;
}

/* A tier task of stage s on its device (lanes: the tensor-parallel
 * ranks' PCIe links or CPU shares, or the drives a transfer stripes
 * over), after dep when >= 0. */
static int stage_task(sim_ir *ir, const sim_costs *c, sim_kind k, int s,
                      double bytes, int lanes, int dep)
{
    sim_task x = {0};
    x.kind = (uint8_t)k;
    x.stream = (uint8_t)sim_tier_stream(k);
    x.device = c->stage_device[s];
    x.stage = s;
    x.stage2 = -1;
    x.mb = -1;
    x.minibatch = 0;
    x.version = -1;
    x.peer = -1;
    x.lanes = lanes > 1 ? lanes : 1;
    x.bytes = bytes;
    int id = sim_ir_add(ir, &x);
    if (dep >= 0) sim_ir_dep(ir, id, dep);
    return id;
}

/* Drives of the server of stage s's GPU. */
static int server_drives(const sim_costs *c, int s)
{
    const prof_topo *t = c->topo;
    return prof_topo_server_drives(
        t, t->nodes[t->gpu_node[c->dev_gpu[c->stage_device[s]]]].server);
}

void sim_add_stage_tiers(sim_ir *ir, const sim_costs *c)
{
    int n0 = ir->n_tasks, tp = c->tp > 1 ? c->tp : 1;
    /* each step's list predecessor: the tier tasks go after it */
    int *prev = util_malloc(sizeof(int) * (size_t)(n0 + 1));
    for (int i = 0; i < n0; i++) prev[i] = -1;
    for (int d = 0; d < ir->n_devices; d++)
        for (int j = 1; j < ir->dlen[d]; j++)
            prev[ir->dlist[d][j]] = ir->dlist[d][j - 1];
    /* what each step waits for, gathered in one pass over the edges:
     * deps[doff[i] .. doff[i + 1]) for step i */
    int *doff = util_calloc((size_t)n0 + 2, sizeof(int));
    for (int k = 0; k < ir->n_edge; k++)
        if (ir->tasks[ir->edge[2 * k]].kind == SIM_OPT)
            doff[ir->edge[2 * k] + 1]++;
    for (int i = 0; i < n0; i++) doff[i + 1] += doff[i];
    int *deps = util_malloc(sizeof(int) * (size_t)(doff[n0] + 1));
    int *fill = util_malloc(sizeof(int) * (size_t)(n0 + 1));
    memcpy(fill, doff, sizeof(int) * (size_t)n0);
    for (int k = 0; k < ir->n_edge; k++)
        if (ir->tasks[ir->edge[2 * k]].kind == SIM_OPT)
            deps[fill[ir->edge[2 * k]]++] = ir->edge[2 * k + 1];
    free(fill);
    int cap = 16, na = 0;
    int *anchor = util_malloc(sizeof(int) * (size_t)cap);
    int *task = util_malloc(sizeof(int) * (size_t)cap);
    /* per stage, the last drive write of its step before: the next step
     * reads the state after it */
    int *wlast = util_malloc(sizeof(int) * (size_t)(ir->n_stages + 1));
    for (int s = 0; s < ir->n_stages; s++) wlast[s] = -1;
    for (int i = 0; i < n0; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->kind != SIM_OPT || t->stage < 0 ||
            !c->stage[t->stage].state_tier || prev[i] < 0)
            continue;
        /* t moves as tasks are added: what it says is kept here */
        int s = t->stage, opt = i, mbk = t->minibatch;
        const sim_stage_cost *sc = &c->stage[s];
        int chain[3 * NVME_MAX_CHUNKS + 4], nc = 0;
        int out = stage_task(ir, c, SIM_SWAP_OUT, s, sc->tier_bytes, tp, -1);
        for (int k = doff[opt]; k < doff[opt + 1]; k++)
            sim_ir_dep(ir, out, deps[k]);
        chain[nc++] = out;
        int last;
        if (sc->state_tier == SIM_TIER_NVME) {
            int K = chunks_of(sc), dr = server_drives(c, s);
            double by = sc->host_state_bytes * tp / K;
            int rd[NVME_MAX_CHUNKS], wr[NVME_MAX_CHUNKS], op = -1;
            for (int k = 0; k < K; k++) {
                rd[k] = stage_task(ir, c, SIM_NVME_READ, s, by, dr,
                                   k >= 2 ? wr[k - 2] : wlast[s]);
                op = stage_task(ir, c, SIM_CPU_OPT, s,
                                sc->cpu_opt_bytes / K, tp, rd[k]);
                sim_ir_dep(ir, op, out);
                wr[k] = stage_task(ir, c, SIM_NVME_WRITE, s, by, dr, op);
                chain[nc++] = rd[k];
                chain[nc++] = op;
                chain[nc++] = wr[k];
            }
            /* the new weights go up once the last chunk is stepped */
            last = op;
            wlast[s] = wr[K - 1];
        } else {
            last = stage_task(ir, c, SIM_CPU_OPT, s, sc->cpu_opt_bytes, tp,
                              out);
            chain[nc++] = last;
        }
        int in = stage_task(ir, c, SIM_SWAP_IN, s, sc->tier_bytes, tp, last);
        chain[nc++] = in;
        sim_ir_dep(ir, opt, in);
        for (int k = 0; k < nc; k++) {
            ir->tasks[chain[k]].minibatch = mbk;
            if (na == cap) {
                cap *= 2;
                anchor = util_realloc(anchor, sizeof(int) * (size_t)cap);
                task = util_realloc(task, sizeof(int) * (size_t)cap);
            }
            anchor[na] = prev[opt];
            task[na++] = chain[k];
        }
    }
    if (na) sim_ir_place_after(ir, n0, anchor, task, na);
    free(wlast);
    free(deps);
    free(anchor);
    free(task);
    free(doff);
    free(prev);
}

void sim_stage_tier_step(const sim_ir *ir, const sim_result *r, int s,
                         sim_tier_step *x)
{
    memset(x, 0, sizeof *x);
    int64_t a = INT64_MAX, b = 0;
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->stage != s || t->minibatch || t->mb >= 0 ||
            !sim_kind_tier(t->kind))
            continue;
        double d = (double)(r->end_ns[i] - r->start_ns[i]);
        switch (t->kind) {
        case SIM_SWAP_OUT:
            x->out_ns += d;
            if (r->start_ns[i] < a) a = r->start_ns[i];
            break;
        case SIM_CPU_OPT: x->cpu_ns += d; break;
        case SIM_SWAP_IN: x->in_ns += d; break;
        default: x->drives_ns += d; break;
        }
        if (r->end_ns[i] > b) b = r->end_ns[i];
    }
    x->span_ns = a < b ? (double)(b - a) : 0;
}
