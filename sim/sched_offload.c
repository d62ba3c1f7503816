/* Offloaded training on one GPU: ZeRO-Offload, ZeRO-Infinity and Fuyou as
 * schedules of the IR (see sim_gen_offload and sim_add_offload in
 * sim/ir.h). The GPU computes the stages in order; PCIe copies, drive
 * reads and writes and the CPU's optimizer steps are tasks on their own
 * streams, so how much of the traffic hides behind compute, and which
 * resource bounds the step, come out of the engine (max-min sharing of
 * PCIe, the host's memory links and the drives). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

/* Whether stage s swaps its whole activations (the last swap_full
 * stages), or its checkpoint (the first swap_ckpt of the others). */
static int swaps_full(const sim_costs *c, int s)
{
    const int S = c->n_model_stages;
    return s % S >= S - c->swap_full;
}

static int swaps_ckpt(const sim_costs *c, int s)
{
    return s % c->n_model_stages < c->swap_ckpt && !swaps_full(c, s);
}

/* The data-parallel ranks of an offload plan: each runs the schedule on
 * its GPU over its share of the batch (sim_add_offload). */
static int ranks(const sim_costs *c)
{
    return c->replicas > 1 ? c->replicas : 1;
}

int sim_gen_offload(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                    util_err *e)
{
    const int S = o->n_stages, M = o->n_mb;
    if (!c->offload || c->n_devices != ranks(c))
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s needs costs built "
                         "for offload, one device per rank",
                         sim_sched_name(o->sched));
    int layer_major = o->sched == SIM_SCHED_FUYOU;
    for (int mb = 0; mb < (layer_major ? 1 : M); mb++) {
        int m0 = layer_major ? 0 : mb, m1 = layer_major ? M : mb + 1;
        for (int s = 0; s < S; s++)
            for (int m = m0; m < m1; m++)
                sim_ir_compute(ir, SIM_F, s, m, 0, 0);
        for (int s = S - 1; s >= 0; s--)
            for (int m = m0; m < m1; m++) {
                /* a stage whose whole activations come back recomputes
                 * nothing */
                if (o->recompute && !swaps_full(c, s))
                    sim_ir_compute(ir, SIM_RECOMP, s, m, 0, 0);
                sim_ir_compute(ir, SIM_BW, s, m, 0, 0);
            }
    }
    return 0;
}

/* A tier task of stage s on its device (lanes: the drives it stripes
 * over, for NVMe); its dependency dep when >= 0. */
static int tier_task(sim_ir *ir, const sim_costs *c, sim_kind k, int s,
                     double bytes, int dep)
{
    sim_task x = {0};
    x.kind = (uint8_t)k;
    x.stream = (uint8_t)sim_tier_stream(k);
    x.device = c->stage_device[s];
    x.stage = s;
    x.stage2 = -1;
    x.mb = -1;
    x.version = -1;
    x.peer = -1;
    x.lanes = sim_kind_nvme(k) && c->n_drives > 1 ? c->n_drives : 1;
    x.bytes = bytes;
    int id = sim_ir_add(ir, &x);
    if (dep >= 0) sim_ir_dep(ir, id, dep);
    return id;
}

/* A tier task moving microbatch m's activation of stage s (its mb says
 * so: tier tasks of model states have none). */
static int act_task(sim_ir *ir, const sim_costs *c, sim_kind k, int s, int m,
                    double bytes, int dep)
{
    int id = tier_task(ir, c, k, s, bytes, dep);
    ir->tasks[id].mb = m;
    return id;
}

/* The CPU's steps of model stage s, one per rank for its share of the
 * parameters and state, rank r's after dep[r] (all: after every rank's,
 * as ZeRO's gradient norm needs every gradient) and the drives' read of
 * its share of the state on the NVMe tier; the write-backs after them,
 * or ZeRO-Offload's copy of each rank's new weights to its GPU, then
 * gathered by all. With several ranks a step is traffic on the host's
 * memory, which the ranks share (sim_task bytes); one alone takes the
 * CPU's time. On the drives a rank stages three steps' state at most
 * (one read ahead, one stepped, one written back: the host memory
 * sim_offload_costs gives them), so a read waits for the write-back
 * three steps before it: wb[r] holds rank r's last three (-1: none).
 * ops[r] (unless NULL): rank r's step. */
static void cpu_step(sim_ir *ir, const sim_costs *c, int s, const int *dep,
                     int all, int (*wb)[3], int *ops)
{
    const int S = c->n_model_stages, D = ranks(c);
    int nvme = c->tier == SIM_TIER_NVME, in[SIM_OFL_MAX_RANKS];
    for (int r = 0; r < D; r++) {
        int v = r * S + s;
        const sim_stage_cost *sc = &c->stage[v];
        int rd = nvme ? tier_task(ir, c, SIM_NVME_READ, v,
                                  sc->host_state_bytes / D, wb[r][2])
                      : -1;
        int op = tier_task(ir, c, SIM_CPU_OPT, v,
                           D > 1 ? sc->cpu_opt_bytes : 0, -1);
        if (ops) ops[r] = op;
        for (int q = all ? 0 : r; q < (all ? D : r + 1); q++)
            if (dep[q] >= 0) sim_ir_dep(ir, op, dep[q]);
        if (rd >= 0) sim_ir_dep(ir, op, rd);
        if (nvme) {
            wb[r][2] = wb[r][1];
            wb[r][1] = wb[r][0];
            wb[r][0] = tier_task(ir, c, SIM_NVME_WRITE, v,
                                 (sc->opt_bytes + sc->train_bytes) / D, op);
        }
        in[r] = c->offload == SIM_SCHED_ZERO_OFFLOAD
              ? tier_task(ir, c, SIM_SWAP_IN, v, sc->train_bytes / D, op)
              : -1;
    }
    if (c->offload == SIM_SCHED_ZERO_OFFLOAD && D > 1) {
        int ls[SIM_OFL_MAX_RANKS], lr[SIM_OFL_MAX_RANKS];
        sim_ring_all(ir, c, s, SIM_COLL_ALLGATHER, c->stage[s].train_bytes,
                     in, ls, lr);
    }
}

/* A stage's gradient as the host holds it for the step (ZeRO sums the
 * microbatches' into it): in fp32, twice a 16-bit gradient's bytes, as
 * many as an fp32 one's. */
static double grad32_bytes(const sim_stage_cost *sc)
{
    return 4 * sc->train_params;
}

/* The bytes stage s swaps per microbatch: its whole activations, its
 * checkpoint, or none. */
static double swap_bytes(const sim_costs *c, int s)
{
    const sim_stage_cost *sc = &c->stage[s];
    return swaps_full(c, s) ? sc->act_bytes
         : swaps_ckpt(c, s) ? sc->keep_bytes : 0;
}

/* The activation swaps of the compute tasks L[j..k] (a group of one
 * stage): after each forward of a swapping stage, its activation goes to
 * the host (after the copy, to the drives when they hold activations)
 * and leaves the GPU; before the recompute or backward that needs it, it
 * comes back in a window of compute tasks, not groups, since a group may
 * hold every microbatch (the copy after the end of the compute task two
 * before, the drive read after the one three before), and after its own
 * copy out or write. The compute task two after a forward waits for its
 * copy out, so activations leave no faster than the link takes them. */
static void swap_group(sim_ir *ir, const sim_costs *c, const int *L, int n,
                       int j, int k, int *act_out, int *act_wr, int aw[2])
{
    const int M = ir->n_mb;
    int disk = c->act_tier == SIM_TIER_NVME;
    for (int q = j; q <= k; q++) {
        const sim_task *t = &ir->tasks[L[q]];
        int s = t->stage, m = t->mb, slot = s * M + m;
        double by = swap_bytes(c, s);
        if (by <= 0 || m < 0 || m >= M) continue;
        int id = L[q];
        if (t->kind == SIM_F) {
            act_out[slot] = act_task(ir, c, SIM_SWAP_OUT, s, m, by, id);
            act_wr[slot] = disk ? act_task(ir, c, SIM_NVME_WRITE, s, m, by,
                                           act_out[slot])
                                : -1;
            /* on their way to the drives, two wait in DRAM at most: a
             * copy out waits for the write two before it (aw: the
             * rank's last two writes) */
            if (disk) {
                if (aw[1] >= 0) sim_ir_dep(ir, act_out[slot], aw[1]);
                aw[1] = aw[0];
                aw[0] = act_wr[slot];
            }
            /* the forward two on waits for this copy: activations leave
             * at the pace the link takes them */
            if (q + 2 < n) sim_ir_dep(ir, L[q + 2], act_out[slot]);
            continue;
        }
        /* the first task of the backward that needs it */
        if (t->kind != (swaps_full(c, s) ? SIM_BW : SIM_RECOMP)) continue;
        int rd = -1;
        if (disk) {
            rd = act_task(ir, c, SIM_NVME_READ, s, m, by, act_wr[slot]);
            if (q >= 3) sim_ir_dep(ir, rd, L[q - 3]);
        }
        int si = act_task(ir, c, SIM_SWAP_IN, s, m, by,
                          disk ? rd : act_out[slot]);
        if (disk) sim_ir_dep(ir, si, act_out[slot]);
        if (q >= 2) sim_ir_dep(ir, si, L[q - 2]);
        sim_ir_dep(ir, id, si);
        sim_ir_hole(ir, act_out[slot], si, by);
    }
}

void sim_add_offload(sim_ir *ir, const sim_costs *c)
{
    const int D = ranks(c), S = c->n_model_stages;
    UTIL_NEVER(ir->n_devices != D || ir->n_stages != D * S ||
               D > SIM_OFL_MAX_RANKS);
    /* the compute orders, copied (adding tasks moves the lists): every
     * rank runs rank 0's, on its own stages */
    int n = ir->dlen[0];
    int *L[SIM_OFL_MAX_RANKS];
    for (int r = 0; r < D; r++) {
        UTIL_NEVER(ir->dlen[r] != n);
        L[r] = util_malloc(sizeof(int) * (size_t)(n + 1));
        for (int j = 0; j < n; j++) L[r][j] = ir->dlist[r][j];
    }
    int fetch = c->offload != SIM_SCHED_ZERO_OFFLOAD;
    int fuyou = c->offload == SIM_SCHED_FUYOU;
    int nvme = c->tier == SIM_TIER_NVME;
    /* per rank, the last compute task of the groups one, two and three
     * back (the window) */
    int back[SIM_OFL_MAX_RANKS][3];
    /* the gradients' last two copies out: a gradient's buffer is not
     * taken while two wait for the link (double buffering, as
     * DeepSpeed's backward hooks block on a bucket still being copied),
     * so the backward runs no faster than the link drains it */
    int gout[SIM_OFL_MAX_RANKS][2];
    int last_out[SIM_OFL_MAX_RANKS];
    /* per rank, the drives' last three write-backs of a step; Fuyou's
     * last two steps: a gradient comes to the host once the step two
     * before it is done, so two wait there at most (the host memory
     * sim_offload_costs gives them) */
    int wb[SIM_OFL_MAX_RANKS][3], fst[SIM_OFL_MAX_RANKS][2];
    /* per rank, the last two activations written to the drives */
    int aw[SIM_OFL_MAX_RANKS][2];
    for (int r = 0; r < D; r++) {
        back[r][0] = back[r][1] = back[r][2] = -1;
        gout[r][0] = gout[r][1] = -1;
        last_out[r] = -1;
        wb[r][0] = wb[r][1] = wb[r][2] = -1;
        fst[r][0] = fst[r][1] = -1;
        aw[r][0] = aw[r][1] = -1;
    }
    int *first_bw = util_malloc(sizeof(int) * (size_t)(S + 1));
    int *last_bw = util_malloc(sizeof(int) * (size_t)(S + 1));
    for (int s = 0; s < S; s++) first_bw[s] = last_bw[s] = -1;
    for (int j = 0; j < n; j++) {
        const sim_task *t = &ir->tasks[L[0][j]];
        if (t->kind == SIM_BW) {
            if (first_bw[t->stage] < 0) first_bw[t->stage] = j;
            last_bw[t->stage] = j;
        }
    }
    /* per stage of every rank and microbatch, a swapped activation's
     * copy out and its drive write (-1: none) */
    const int M = ir->n_mb;
    int *act_out = util_malloc(sizeof(int) * (size_t)(D * S * M + 1));
    int *act_wr = util_malloc(sizeof(int) * (size_t)(D * S * M + 1));
    int dep[SIM_OFL_MAX_RANKS], ls[SIM_OFL_MAX_RANKS], lr[SIM_OFL_MAX_RANKS];
    for (int j = 0; j < n;) {
        int s = ir->tasks[L[0][j]].stage, k = j;
        while (k + 1 < n && ir->tasks[L[0][k + 1]].stage == s) k++;
        /* group L[r][j..k] of model stage s on every rank r */
        const sim_stage_cost *sc = &c->stage[s];
        double wr = sc->weight_bytes / D;
        for (int r = 0; fetch && r < D; r++) {
            int v = r * S + s;
            int rd = nvme ? tier_task(ir, c, SIM_NVME_READ, v, wr,
                                      back[r][2])
                          : -1;
            int sw = tier_task(ir, c, SIM_SWAP_IN, v, wr, rd);
            if (back[r][1] >= 0) sim_ir_dep(ir, sw, back[r][1]);
            dep[r] = sw;
            sim_ir_buffer(ir, sw, L[r][k], sc->weight_bytes);
        }
        if (fetch && D > 1)
            /* the others' shares, between the GPUs */
            sim_ring_all(ir, c, s, SIM_COLL_ALLGATHER, sc->weight_bytes, dep,
                         ls, lr);
        for (int r = 0; fetch && r < D; r++) {
            sim_ir_dep(ir, L[r][j], D > 1 ? lr[r] : dep[r]);
            if (D > 1) sim_ir_dep(ir, L[r][j], ls[r]);
        }
        for (int r = 0; r < D; r++)
            swap_group(ir, c, L[r], n, j, k, act_out, act_wr, aw[r]);
        for (int q = j; q <= k; q++) {
            if (ir->tasks[L[0][q]].kind != SIM_BW) continue;
            if (fuyou && q != last_bw[s]) continue;
            for (int r = 0; r < D; r++) dep[r] = L[r][q];
            if (D > 1)
                sim_ring_all(ir, c, s, SIM_COLL_REDUCE_SCATTER,
                             sc->train_bytes, dep, ls, lr);
            int so[SIM_OFL_MAX_RANKS];
            for (int r = 0; r < D; r++) {
                int v = r * S + s;
                int holder = fuyou ? L[r][first_bw[s]] : L[r][q];
                so[r] = tier_task(ir, c, SIM_SWAP_OUT, v,
                                  sc->train_bytes / D,
                                  D > 1 ? lr[r] : L[r][q]);
                if (D > 1) sim_ir_dep(ir, so[r], ls[r]);
                if (fuyou && fst[r][1] >= 0) sim_ir_dep(ir, so[r], fst[r][1]);
                sim_ir_buffer(ir, holder, so[r], sc->train_bytes);
                if (gout[r][1] >= 0) sim_ir_dep(ir, holder, gout[r][1]);
                gout[r][1] = gout[r][0];
                gout[r][0] = so[r];
                last_out[r] = so[r];
            }
            if (fuyou) {
                int ops[SIM_OFL_MAX_RANKS];
                cpu_step(ir, c, s, so, 0, wb, ops);
                for (int r = 0; r < D; r++) {
                    fst[r][1] = fst[r][0];
                    fst[r][0] = ops[r];
                }
            }
        }
        for (int r = 0; r < D; r++) {
            back[r][2] = back[r][1];
            back[r][1] = back[r][0];
            back[r][0] = L[r][k];
        }
        j = k + 1;
    }
    /* ZeRO: the step after the whole backward pass, deepest stage first
     * (the order its gradients arrived in) */
    for (int s = S - 1; !fuyou && s >= 0; s--)
        cpu_step(ir, c, s, last_out, 1, wb, NULL);
    free(act_out);
    free(act_wr);
    free(first_bw);
    free(last_bw);
    for (int r = 0; r < D; r++) free(L[r]);
}

/* ------------------------------------------------------------ the tiers */

const char *sim_tier_name(int t)
{
    static const char *const names[SIM_TIER_COUNT] = {"auto", "dram", "nvme"};
    return (unsigned)t < SIM_TIER_COUNT ? names[t] : "?";
}

int sim_err_lacks(util_err *e, int tier, double need, double have)
{
    if (e && tier) {
        e->lack = tier;
        e->lack_by = need / fmax(have, 1 << 30);
    }
    return -1;
}

int sim_tier_parse(const char *s)
{
    for (int t = 0; t < SIM_TIER_COUNT; t++)
        if (!strcmp(s, sim_tier_name(t))) return t;
    return -1;
}

int sim_offload_costs(sim_costs *c, const prof_topo *t,
                      const sim_cost_opts *o, util_err *e)
{
    const char *pol = sim_sched_name(c->offload);
    /* before sim_costs_build replicates the stages, or after (the swap
     * search prices them again): totals over one rank's stages, each
     * replica's stages priced alike */
    int tier = o->tier, S = c->n_model_stages, N = c->n_stages;
    int D = o->dp > 1 ? o->dp : 1;
    if (D > SIM_OFL_MAX_RANKS)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s: dp %d: at most "
                         "%d ranks offload to one host", pol, D,
                         SIM_OFL_MAX_RANKS);
    if (c->tp > 1 || c->zero)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s partitions the "
                         "states over its data-parallel ranks itself: no "
                         "--tp or --zero", pol);
    if (o->swap_ckpt < 0 || o->swap_ckpt > S || o->swap_full < 0 ||
        o->swap_full > S)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s: swapped "
                         "activations %d:%d: each must be 0..%d (the "
                         "stages)", pol, o->swap_ckpt, o->swap_full, S);
    if (o->swap_full && c->offload != SIM_SCHED_FUYOU)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s recomputes every "
                         "stage from its checkpoint: only fuyou swaps whole "
                         "activations instead (give :0)", pol);
    if (o->swap_ckpt && !o->recompute)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s without "
                         "recomputation keeps no checkpoints to swap (give "
                         "0:J, or --recompute full)", pol);
    c->swap_ckpt = o->swap_ckpt;
    c->swap_full = o->swap_full;
    c->swap_mb = o->n_mb > 0 ? o->n_mb : 1;
    int g = c->dev_gpu[0], host = prof_topo_gpu_host_mem(t, g);
    int server = t->nodes[t->gpu_node[g]].server;
    if (host < 0)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s: GPU %d has no "
                         "host memory in %s", pol, g, t->name);
    if (D > 1 && (D > t->n_gpus ||
                  t->nodes[t->gpu_node[g + D - 1]].server != server))
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s: its %d ranks "
                         "share one server's host (%d GPUs per server in "
                         "%s)", pol, D, t->gpus_per_server, t->name);
    c->host_cap = prof_topo_server_dram(t, server);
    c->nvme_cap = 0;
    c->n_drives = 0;
    free(c->drive);
    c->drive = util_malloc(sizeof(int) * (size_t)(t->n_nodes + 1));
    for (int v = 0; v < t->n_nodes; v++) {
        const prof_node *nd = &t->nodes[v];
        if (nd->server != server) continue;
        if (nd->kind == PROF_NODE_NVME) {
            c->nvme_cap += nd->capacity_bytes;
            c->drive[c->n_drives++] = v;
        }
    }
    if (tier == SIM_TIER_AUTO)
        tier = c->offload == SIM_SCHED_ZERO_OFFLOAD || !c->n_drives
             ? SIM_TIER_DRAM : SIM_TIER_NVME;
    if (tier == SIM_TIER_NVME && !c->n_drives)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s --offload-tier nvme:"
                         " %s has no NVMe drive (%s)", pol,
                         t->name, prof_topo_more_drives(t));
    if (tier == SIM_TIER_NVME && c->offload == SIM_SCHED_ZERO_OFFLOAD)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule zero-offload keeps its "
                         "states in host DRAM; zero-infinity and fuyou use "
                         "the nvme tier");
    c->tier = tier;
    /* Fuyou: each holder of the table the head shares with the first
     * stage (the head; a T5's decoder's embedding too) keeps its fp32
     * gradient of it from its step until the first stage sums and steps
     * the table */
    c->tied_keep32 = c->offload == SIM_SCHED_FUYOU && c->tied_table32 > 0
                   ? (c->tied_holders - 1) * c->tied_table32 : 0;
    double hbw = t->nodes[host].read_bw_bytes_per_s;
    /* one GPU holds the one table a tied head shares with the embedding:
     * fetched for each (on the drives, its newest weights wait in DRAM
     * in fp32, as the step writes them), stepped once, by the first stage
     * (its step comes last), over the sum of its holders' gradients (both
     * read, the sum written); each step reads its gradients once more for
     * the norm. (ZeRO's executor sums the table and takes every norm at
     * its first step; its steps run back to back, so the total is what
     * counts.) */
    double tparams = c->tied_table32 / 4;
    for (int v = 0; v < N; v++) {
        sim_stage_cost *sc = &c->stage[v];
        /* (and a T5's relative-position tables: one copy each) */
        sc->tied_bytes = sc->rel_bytes[0] = sc->rel_bytes[1] = 0;
        int ms = sc->model_stage;
        /* a holder but the first steps no copy of the table */
        double steps = sc->train_params -
                       (sc->tied_holder && ms ? tparams : 0);
        double pass = 4 * steps + (ms == 0 ? 12 * tparams : 0);
        /* a rank steps its share; several share the host's memory, so
         * their steps are priced as traffic on it (sim_add_offload) */
        sc->cpu_opt_ns = sim_task_ns(round(sim_cpu_opt_ns(t, g, steps / D) +
                                          sim_cpu_pass_ns(t, g, pass / D)));
        sc->cpu_opt_bytes = hbw > 0 ? (double)sc->cpu_opt_ns * 1e-9 * hbw
                                    : 0;
    }
    double w = 0, g32 = 0, opt = 0, hst = 0, big_io = 0, big_st = 0,
           big_g = 0, big_g32 = 0;
    for (int s = 0; s < S; s++) {
        sim_stage_cost *sc = &c->stage[s];
        w += sc->weight_bytes;
        g32 += grad32_bytes(sc);
        opt += sc->opt_bytes;
        hst += sc->host_state_bytes;
        big_g = fmax(big_g, sc->train_bytes);
        big_g32 = fmax(big_g32, grad32_bytes(sc));
        /* what crosses PCIe for a stage: its weights in (ZeRO-Offload's
         * stay on the GPU: only the updated ones, what trains, come back)
         * and its gradients out */
        big_io = fmax(big_io, (c->offload == SIM_SCHED_ZERO_OFFLOAD
                               ? sc->train_bytes : sc->weight_bytes) +
                                  sc->train_bytes);
        /* what a step on the drives stages: the state it reads and the
         * new weights it writes, those that train (frozen weights are
         * fetched, never stepped) */
        big_st = fmax(big_st, sc->opt_bytes + sc->train_bytes);
    }
    /* host DRAM: on the NVMe tier, staging for the stages in flight over
     * PCIe (weights read from the drives on their way up, gradients on
     * their way down: four stages' worth) and the state of three stages
     * (one read ahead, one stepped, one written back); on the DRAM tier
     * the copies go straight to and from the states, pinned where they
     * live, but for a gradient's copy on its way to its sum; ZeRO keeps
     * every gradient there until the step, in fp32 (grad32_bytes), where
     * Fuyou steps each stage as its gradients come, two at most waiting
     * (a copy out waits for the step two before it); on the DRAM tier the
     * states live there too: the weights and the optimizer state, or
     * under ZeRO-Offload, whose 16-bit weights stay on the GPU, what a
     * step reads (the fp32 master weights: the weights themselves when
     * they train in fp32); on the drives, a tied table's newest weights
     * wait in DRAM (fp32) for the fetches of the holders that do not step
     * it (in DRAM they are the stepping holder's own) */
    int zero = c->offload != SIM_SCHED_FUYOU;
    int nvme = tier == SIM_TIER_NVME;
    c->nvme_bytes = nvme ? w + opt : 0;
    c->host_staging = (nvme ? 4 * big_io + 3 * big_st : big_g) +
                      (zero ? 0 : 2 * big_g32 + c->tied_keep32);
    c->host_bytes = c->host_staging + (zero ? g32 : 0) +
                    (nvme ? c->tied_table32 : 0) +
                    (nvme ? 0
                          : c->offload == SIM_SCHED_ZERO_OFFLOAD ? hst
                                                                 : w + opt);
    /* swapped activations wait in DRAM where it holds them beside the
     * rest; Fuyou's go on to the drives where it does not (ZeRO keeps
     * them in DRAM). At most one microbatch's wait at once under ZeRO
     * (each runs its forward and backward before the next), every
     * microbatch's under Fuyou (each layer over the whole batch). */
    double one_mb = 0;
    for (int s = 0; s < S; s++) one_mb += swap_bytes(c, s);
    /* every rank's */
    c->act_swap_bytes = one_mb * c->swap_mb * D;
    double held = zero ? one_mb * D : c->act_swap_bytes;
    /* on the drives, DRAM holds the ones on their way: two going (a
     * copy out waits for the write two before it) and two coming back (a
     * read waits for the compute three before its use), a stage's
     * microbatch each, every rank's; they go there where DRAM cannot
     * hold them all and that needs less of it */
    double big_a = 0;
    for (int s = 0; s < S; s++) big_a = fmax(big_a, swap_bytes(c, s));
    c->act_tier = SIM_TIER_DRAM;
    if (c->host_bytes + held > c->host_cap &&
        c->offload == SIM_SCHED_FUYOU && c->n_drives && 4 * big_a * D < held)
        c->act_tier = SIM_TIER_NVME;
    if (c->act_tier == SIM_TIER_NVME) {
        c->nvme_bytes += held;
        c->host_staging += 4 * big_a * D;
        c->host_bytes += 4 * big_a * D;
    } else {
        c->host_bytes += held;
    }
    char need[32], have[32], miss[32];
    if (c->host_bytes > c->host_cap) {
        util_fmt_bytes2(c->host_bytes, need, c->host_cap, have, sizeof need);
        util_errf(e, UTIL_EXIT_USAGE, "schedule %s: host DRAM cannot "
                         "hold what the %s tier needs there%s: %s, the server "
                         "has %s (%s missing in DRAM; %s%s%s)", pol,
                         sim_tier_name(tier), c->act_swap_bytes > 0
                         ? " with the swapped activations" : "",
                         need, have,
                         util_fmt_bytes(c->host_bytes - c->host_cap, miss,
                                        sizeof miss),
                         prof_topo_more_dram(t),
                         tier != SIM_TIER_DRAM || c->offload ==
                         SIM_SCHED_ZERO_OFFLOAD ? ""
                         : c->n_drives ? " or --offload-tier nvme"
                                       : ", or ",
                         tier != SIM_TIER_DRAM || c->offload ==
                         SIM_SCHED_ZERO_OFFLOAD || c->n_drives
                         ? "" : prof_topo_more_drives(t));
        return sim_err_lacks(e, SIM_TIER_DRAM, c->host_bytes, c->host_cap);
    }
    if (c->nvme_bytes > c->nvme_cap) {
        util_fmt_bytes2(c->nvme_bytes, need, c->nvme_cap, have, sizeof need);
        util_errf(e, UTIL_EXIT_USAGE, "schedule %s: the NVMe drives "
                         "cannot hold the model states%s: %s, %d drive%s "
                         "hold%s %s (%s missing on NVMe; %s)", pol,
                         c->act_tier == SIM_TIER_NVME
                         ? " and the swapped activations" : "",
                         need, c->n_drives, c->n_drives == 1 ? "" : "s",
                         c->n_drives == 1 ? "s" : "", have,
                         util_fmt_bytes(c->nvme_bytes - c->nvme_cap, miss,
                                        sizeof miss),
                         prof_topo_more_drives(t));
        return sim_err_lacks(e, SIM_TIER_NVME, c->nvme_bytes, c->nvme_cap);
    }
    return 0;
}

/* ----------------------------------------------------- what bounds it */

static const char *const res_names[2][SIM_OFL_RES_COUNT] = {
    {"GPU compute", "PCIe to GPU", "PCIe from GPU", "NVMe", "CPU optimizer",
     "GPU to GPU"},
    /* CPU devices: cores, their copies memory to memory, their drive
     * whatever holds the folder */
    {"device compute", "copies in", "copies out", "drive", "CPU optimizer",
     "between devices"}};

const char *sim_offload_res_name(int k, const prof_topo *t)
{
    return (unsigned)k < SIM_OFL_RES_COUNT ? res_names[prof_topo_cpu(t)][k]
                                           : "?";
}

const char *sim_offload_res_key(int k)
{
    static const char *const keys[SIM_OFL_RES_COUNT] = {
        "gpu", "pcie_in", "pcie_out", "nvme", "cpu", "gpu_ring"};
    return (unsigned)k < SIM_OFL_RES_COUNT ? keys[k] : "?";
}

static int res_of(const sim_task *t)
{
    switch (t->stream) {
    case SIM_STREAM_COMPUTE: return SIM_OFL_GPU;
    case SIM_STREAM_COPY_IN: return SIM_OFL_PCIE_IN;
    case SIM_STREAM_COPY_OUT: return SIM_OFL_PCIE_OUT;
    case SIM_STREAM_IO_IN: case SIM_STREAM_IO_OUT: return SIM_OFL_NVME;
    case SIM_STREAM_HOST: return SIM_OFL_CPU;
    case SIM_STREAM_COLL: return SIM_OFL_RING;
    default: return -1;
    }
}

typedef struct ivl { int64_t a, b; } ivl;

static int ivl_cmp(const void *x, const void *y)
{
    const ivl *p = x, *q = y;
    return (p->a > q->a) - (p->a < q->a);
}

void sim_offload_usage(const sim_ir *ir, const sim_result *r,
                       sim_offload_use *u)
{
    memset(u, 0, sizeof *u);
    ivl *v = util_malloc(sizeof *v * (size_t)(ir->n_tasks + 1));
    for (int k = 0; k < SIM_OFL_RES_COUNT; k++) {
        int n = 0;
        for (int i = 0; i < ir->n_tasks; i++) {
            const sim_task *t = &ir->tasks[i];
            if (t->device != 0 || res_of(t) != k) continue;
            if (r->end_ns[i] > r->start_ns[i])
                v[n++] = (ivl){r->start_ns[i], r->end_ns[i]};
            if (k != SIM_OFL_GPU && k != SIM_OFL_CPU)
                u->bytes[k] += t->bytes;
        }
        /* busy: the union of the intervals (reads and writes of the
         * drives overlap: one resource) */
        qsort(v, (size_t)n, sizeof *v, ivl_cmp);
        int64_t busy = 0, a = 0, b = -1;
        for (int j = 0; j < n; j++) {
            if (v[j].a > b) {
                if (b > a) busy += b - a;
                a = v[j].a;
                b = v[j].b;
            } else if (v[j].b > b) {
                b = v[j].b;
            }
        }
        if (b > a) busy += b - a;
        u->busy_ns[k] = busy;
        if (busy > u->busy_ns[u->bound]) u->bound = k;
    }
    free(v);
}

/* ----------------------------------------- how much activation to swap */

typedef struct swap_eval {
    sim_plan *p;
    sim_costs *c;
    const prof_topo *t;
    double *tj;                 /* iteration by whole-swapped stages, NAN:
                                 * not yet simulated (at the chosen K) */
    int n_runs;
} swap_eval;

/* The iteration (seconds) with k checkpoints and j whole activations
 * swapped; INFINITY where it overflows a tier or the GPU. Leaves the
 * costs priced for (k, j). */
static double swap_time(swap_eval *v, int k, int j, util_err *e)
{
    sim_plan *p = v->p;
    p->swap_ckpt = k;
    p->swap_full = j;
    sim_cost_opts co = sim_plan_cost_opts(p);
    util_err ce;
    if (sim_offload_costs(v->c, v->t, &co, &ce)) return INFINITY;
    sim_sched_opts so = sim_plan_sched_opts(p);
    sim_ir *ir = sim_schedule(&so, v->c, e);
    if (!ir) return NAN;
    sim_run_opts ro = {.stop_at_oom = 1};
    sim_engine *en = sim_engine_new(ir, v->c, &ro);
    sim_result r;
    double it = sim_engine_run(en, &r) ? NAN
              : r.oom ? INFINITY : (double)r.iteration_ns * 1e-9;
    if (isnan(it))
        util_errf(e, sim_result_code(&r), "%s",
                  r.msg);
    sim_engine_free(en);
    sim_ir_free(ir);
    v->n_runs++;
    return it;
}

/* Whether the host tiers refuse k checkpoints swapped (why in *why). */
static int swap_priced(swap_eval *v, int k, util_err *why)
{
    v->p->swap_ckpt = k;
    v->p->swap_full = 0;
    sim_cost_opts co = sim_plan_cost_opts(v->p);
    return sim_offload_costs(v->c, v->t, &co, why) != 0;
}

static double swap_time_j(swap_eval *v, int k, int j, util_err *e)
{
    if (isnan(v->tj[j])) v->tj[j] = swap_time(v, k, j, e);
    return v->tj[j];
}

int sim_offload_swap_search(sim_plan *p, sim_costs *c, const prof_topo *t,
                            util_err *e)
{
    const int S = p->n_stages;
    swap_eval v = {.p = p, .c = c, .t = t};
    /* The checkpoints first, as few as fit: more only add traffic (the
     * first stages' go first, their wait for the backward being the
     * longest). Fewer fit only if more do. */
    int kmax = p->recompute ? S : 0, kcap = kmax;
    util_err over;              /* why one more than kcap does not fit */
    if (swap_priced(&v, kmax, &over)) {
        /* the most checkpoints the host tiers hold (none always: the
         * costs were built) */
        int a = 0, b = kmax;
        while (b - a > 1) {
            int mid = a + (b - a) / 2;
            if (swap_priced(&v, mid, &over)) b = mid;
            else a = mid;
        }
        swap_priced(&v, b, &over);
        kcap = a;
    }
    int lo = 0, hi = kcap;
    double thi = swap_time(&v, hi, 0, e);
    if (isnan(thi)) return -1;
    if (isinf(thi) && kcap < kmax)
        /* the GPU needs more swapped than the host can hold */
    {
        /* more host DRAM or drives would hold them: what they lacked */
        util_errf(e, UTIL_EXIT_USAGE, "%s; the GPU holds the run only with "
                  "more than the %d checkpoint stage(s) swapped that fit "
                  "there", over.msg, kcap);
        if (e) {
            e->lack = over.lack;
            e->lack_by = over.lack_by;
        }
        return -1;
    }
    if (isinf(thi)) hi = lo = kmax; /* nothing fits: the run says so */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        double tm = swap_time(&v, mid, 0, e);
        if (isnan(tm)) return -1;
        if (isinf(tm)) lo = mid + 1;
        else hi = mid;
    }
    int k = hi, best_j = 0;
    if (c->offload == SIM_SCHED_FUYOU && !isinf(thi)) {
        /* Then the whole activations of the last stages, each sparing
         * its recomputation for traffic that competes with the model
         * states': the iteration is convex in how many (Fuyou's premise),
         * so a ternary search over them finds the fastest. Where some
         * overflow the GPU it is not (their whole activations come back
         * early), so none swapped, which fits, stays a candidate */
        v.tj = util_malloc(sizeof(double) * (size_t)(S + 1));
        for (int j = 0; j <= S; j++) v.tj[j] = NAN;
        int a = 0, b = S;
        while (b - a > 2) {
            int m1 = a + (b - a) / 3, m2 = b - (b - a) / 3;
            double t1 = swap_time_j(&v, k, m1, e),
                   t2 = swap_time_j(&v, k, m2, e);
            if (isnan(t1) || isnan(t2)) {
                free(v.tj);
                return -1;
            }
            if (t1 <= t2) b = m2;
            else a = m1;
        }
        double bt = swap_time_j(&v, k, 0, e);
        for (int j = a; j <= b; j++) {
            double tj = swap_time_j(&v, k, j, e);
            if (isnan(tj) || isnan(bt)) {
                free(v.tj);
                return -1;
            }
            if (tj < bt) bt = tj, best_j = j;
        }
        free(v.tj);
    }
    p->swap_ckpt = k;
    p->swap_full = best_j;
    sim_cost_opts co = sim_plan_cost_opts(p);
    util_err ce;
    if (sim_offload_costs(c, t, &co, &ce)) {
        /* over a tier even so: the choice stays, the costs as the
         * smallest swap left them for the caller's run to refuse */
        p->swap_ckpt = p->swap_full = 0;
        co = sim_plan_cost_opts(p);
        return sim_offload_costs(c, t, &co, e);
    }
    return 0;
}

int sim_swap_parse(const char *s, int *ckpt, int *full, util_err *e)
{
    char k[24] = "", j[24] = "0";
    const char *colon = strchr(s, ':');
    size_t n = colon ? (size_t)(colon - s) : strlen(s);
    long a, b;
    if (n >= sizeof k || (colon && strlen(colon + 1) >= sizeof j))
        return util_errf(e, UTIL_EXIT_USAGE, "--act-swap '%s': expected "
                         "auto or K[:J]", s);
    memcpy(k, s, n);
    if (colon) strcpy(j, colon + 1);
    if (util_parse_int(k, 0, 1 << 20, &a) || util_parse_int(j, 0, 1 << 20, &b))
        return util_errf(e, UTIL_EXIT_USAGE, "--act-swap '%s': expected "
                         "auto or K[:J], K stages' checkpoints and J stages' "
                         "whole activations (whole numbers >= 0)", s);
    *ckpt = (int)a;
    *full = (int)b;
    return 0;
}

/* ------------------------------------------- host DRAM and drives in time */

typedef struct tev {
    int64_t t;
    double host, nvme;
} tev;

static int tev_cmp(const void *x, const void *y)
{
    const tev *p = x, *q = y;
    if (p->t != q->t) return (p->t > q->t) - (p->t < q->t);
    /* at one instant, what leaves before what arrives */
    double a = p->host + p->nvme, b = q->host + q->nvme;
    return (a > b) - (a < b);
}

/* A gradient's buffer taken (get) or handed back, by stage. */
typedef struct gq {
    int64_t t;
    int s, get;
} gq;

static int gq_cmp(const void *x, const void *y)
{
    const gq *p = x, *q = y;
    if (p->t != q->t) return (p->t > q->t) - (p->t < q->t);
    if (p->get != q->get) return p->get - q->get;   /* handed back first */
    return p->s - q->s;
}

/* Fuyou's gradient buffers as the executor's pool makes them (exec/
 * tiers.c, grad_get): a stage's first copy out takes the smallest idle
 * buffer at least its size and at most twice it, else the largest idle
 * one smaller than it goes and one of its size is made; its step hands
 * it back. The maximum of the buffers' sum over time, which the count
 * took, merges buffers no pool can: stages of unlike sizes (a T5's, a
 * BERT's) keep buffers of their own. */
typedef struct gpool {
    double *n;
    char *idle;
    int cnt;
    int *held;                  /* per stage: its buffer, -1 */
    double total;
} gpool;

/* One iteration's gets and puts through the pool; each buffer made or
 * dropped is an event of the host's (ev, where given). */
static void pool_run(gpool *p, const gq *q, int nq, const sim_costs *c,
                     tev *ev, int *n_ev)
{
    for (int k = 0; k < nq; k++) {
        int s = q[k].s;
        if (!q[k].get) {
            if (p->held[s] >= 0) p->idle[p->held[s]] = 1;
            p->held[s] = -1;
            continue;
        }
        double need = grad32_bytes(&c->stage[s]);
        int best = -1, drop = -1;
        for (int i = 0; i < p->cnt; i++)
            if (p->idle[i] && sim_grad_pool_fits(p->n[i], need) &&
                (best < 0 || p->n[i] < p->n[best]))
                best = i;
        if (best >= 0) {
            p->idle[best] = 0;
            p->held[s] = best;
            continue;
        }
        for (int i = 0; i < p->cnt; i++)
            if (p->idle[i] && p->n[i] < need &&
                (drop < 0 || p->n[i] > p->n[drop]))
                drop = i;
        if (drop >= 0) {
            p->total -= p->n[drop];
            if (ev) ev[(*n_ev)++] = (tev){q[k].t, -p->n[drop], 0};
            int last = --p->cnt;
            p->n[drop] = p->n[last];
            p->idle[drop] = p->idle[last];
            for (int v = 0; v < c->n_model_stages; v++)
                if (p->held[v] == last) p->held[v] = drop;
        }
        p->n[p->cnt] = need;
        p->idle[p->cnt] = 0;
        p->held[s] = p->cnt++;
        p->total += need;
        if (ev) ev[(*n_ev)++] = (tev){q[k].t, need, 0};
    }
}

/* cold: the iteration makes the gradients' buffers as it needs them (a
 * run's first); else they are there from the start, as an iteration
 * after it finds them */
static void tier_use(const sim_ir *ir, const sim_result *r,
                     const sim_costs *c, sim_tier_use *u, int cold)
{
    memset(u, 0, sizeof *u);
    const int S = c->n_model_stages, D = ranks(c);
    int zero = c->offload != SIM_SCHED_FUYOU;
    int disk = c->act_tier == SIM_TIER_NVME;
    double g32 = 0, one_mb = 0;
    for (int s = 0; s < S; s++) {
        g32 += grad32_bytes(&c->stage[s]);
        one_mb += swap_bytes(c, s);
    }
    double held = zero ? one_mb * D : c->act_swap_bytes;
    /* what stays all iteration: the states (the buffers on their way
     * follow the tasks that use them, below) */
    u->host_resident = c->host_bytes - c->host_staging -
                       (zero ? g32 : 0) - (disk ? 0 : held);
    u->nvme_resident = c->nvme_bytes - (disk ? held : 0);
    tev *ev = util_malloc(sizeof *ev * (size_t)(5 * ir->n_tasks + 3));
    gq *qv = util_malloc(sizeof *qv * (size_t)(2 * ir->n_tasks + 2));
    int n = 0, nq = 0;
    double transit = 0;
    int64_t t_transit = INT64_MAX;
    int *seen = util_calloc((size_t)S + 1, sizeof(int));
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->stage < 0 || t->stage >= D * S) continue;
        int64_t a = r->start_ns[i], b = r->end_ns[i];
        double by = t->bytes;
        int act = t->mb >= 0 && t->kind != SIM_CPU_OPT &&
                  (t->kind == SIM_SWAP_IN || t->kind == SIM_SWAP_OUT ||
                   sim_kind_nvme(t->kind));
        if (act) {
            /* an activation: in DRAM from the start of its copy out
             * until its copy back, or, on the drives, until written and
             * again from its read */
            switch (t->kind) {
            case SIM_SWAP_OUT: ev[n++] = (tev){a, by, 0}; break;
            case SIM_SWAP_IN: ev[n++] = (tev){b, -by, 0}; break;
            case SIM_NVME_WRITE: ev[n++] = (tev){b, -by, by}; break;
            case SIM_NVME_READ:
                ev[n++] = (tev){a, by, 0};
                ev[n++] = (tev){b, 0, -by};
                break;
            default: break;
            }
        } else if (t->device) {
            continue;           /* the model states: rank 0's, times the
                                 * ranks (they run alike) */
        } else if (t->kind == SIM_NVME_READ) {
            /* staged from the drives: a fetch's weights until their
             * copy up, a step's state (with the new weights it writes)
             * until written back */
            int step = 0, end = -1;
            for (int k = ir->succ_off[i]; k < ir->succ_off[i + 1]; k++) {
                int q = ir->succ[k];
                if (ir->tasks[q].kind == SIM_SWAP_IN) end = q;
                if (ir->tasks[q].kind == SIM_CPU_OPT) {
                    step = 1;
                    for (int j = ir->succ_off[q]; j < ir->succ_off[q + 1];
                         j++)
                        if (ir->tasks[ir->succ[j]].kind == SIM_NVME_WRITE)
                            end = ir->succ[j];
                }
            }
            if (end < 0) continue;
            double st = D * (step ? ir->tasks[end].bytes : by);
            ev[n++] = (tev){a, st, 0};
            ev[n++] = (tev){r->end_ns[end], -st, 0};
        } else if (t->kind == SIM_SWAP_OUT && t->stream ==
                   SIM_STREAM_COPY_OUT) {
            /* a gradient on its way to the host, where it stays in fp32
             * (every rank's share) from the stage's first copy out until
             * its step; the copies after the first land in a buffer of
             * their own, then join the sum (one buffer, kept, the size
             * of the largest) */
            if (!seen[t->stage]++) {
                qv[nq++] = (gq){a, t->stage, 1};
            } else {
                transit = fmax(transit, D * by);
                if (a < t_transit) t_transit = a;
            }
        } else if (t->kind == SIM_CPU_OPT) {
            qv[nq++] = (gq){b, t->stage, 0};
            /* Fuyou's tied table: each other holder's piece of its
             * gradient (the head's, a T5's decoder embedding's) waits
             * from its step for the first stage's, which sums and steps
             * the table, in a buffer of its own made at its first step
             * and kept (no gradient's buffer: below) */
            if (cold && c->tied_keep32 > 0 && t->stage &&
                c->stage[t->stage].tied_holder)
                ev[n++] = (tev){b, c->tied_table32, 0};
        }
    }
    free(seen);
    /* the fp32 gradients' buffers (pinned, as the copies out need) are
     * made once and kept: under ZeRO one a stage, every stage's waiting
     * for the step, what the steps hold at once at their most, all
     * along; Fuyou's as its pool makes them (an iteration after the
     * first finds the pool one iteration made) */
    double g = 0, g_most = 0;
    qsort(qv, (size_t)nq, sizeof *qv, gq_cmp);
    if (zero) {
        for (int k = 0; k < nq; k++) {
            double by = grad32_bytes(&c->stage[qv[k].s]);
            g += qv[k].get ? by : -by;
            /* cold, each buffer made where the most so far grows */
            if (cold && g > g_most) ev[n++] = (tev){qv[k].t, g - g_most, 0};
            g_most = fmax(g_most, g);
        }
    } else {
        gpool p = {util_malloc(sizeof(double) * (size_t)(nq + 1)),
                   util_malloc((size_t)nq + 1), 0,
                   util_malloc(sizeof(int) * (size_t)(S + 1)), 0};
        for (int v = 0; v <= S; v++) p.held[v] = -1;
        if (!cold) {
            pool_run(&p, qv, nq, c, NULL, NULL);
            for (int i = 0; i < p.cnt; i++) p.idle[i] = 1;
            for (int v = 0; v <= S; v++) p.held[v] = -1;
            g_most = p.total;
        }
        pool_run(&p, qv, nq, c, ev, &n);
        if (cold) g_most = p.total;
        free(p.n);
        free(p.idle);
        free(p.held);
    }
    free(qv);
    u->grad_most = g_most;
    if (!cold) u->host_resident += g_most + transit + c->tied_keep32;
    else if (transit > 0) ev[n++] = (tev){t_transit, transit, 0};
    qsort(ev, (size_t)n, sizeof *ev, tev_cmp);
    u->n = n + 1;
    u->t_ns = util_malloc(sizeof(int64_t) * (size_t)u->n);
    u->host = util_malloc(sizeof(double) * (size_t)u->n);
    u->nvme = util_malloc(sizeof(double) * (size_t)u->n);
    double h = u->host_resident, v = u->nvme_resident;
    u->t_ns[0] = 0;
    u->host[0] = u->host_peak = h;
    u->nvme[0] = u->nvme_peak = v;
    for (int k = 0; k < n; k++) {
        h += ev[k].host;
        v += ev[k].nvme;
        u->t_ns[k + 1] = ev[k].t;
        u->host[k + 1] = h;
        u->nvme[k + 1] = v;
        if (h > u->host_peak) u->host_peak = h;
        if (v > u->nvme_peak) u->nvme_peak = v;
    }
    free(ev);
}

void sim_offload_tier_use(const sim_ir *ir, const sim_result *r,
                          const sim_costs *c, sim_tier_use *u)
{
    tier_use(ir, r, c, u, 0);
}

void sim_offload_tier_use_cold(const sim_ir *ir, const sim_result *r,
                               const sim_costs *c, sim_tier_use *u)
{
    tier_use(ir, r, c, u, 1);
}

void sim_tier_use_free(sim_tier_use *u)
{
    free(u->t_ns);
    free(u->host);
    free(u->nvme);
    memset(u, 0, sizeof *u);
}
