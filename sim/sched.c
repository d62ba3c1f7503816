/* Schedules: names, the checks of their options, stage->device maps, and
 * the driver that generates, lowers and validates. The generators hold the
 * whole of each schedule; the engine knows none of them. */
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

static const char *const sched_names[SIM_SCHED_COUNT + 1] = {
    "gpipe", "1f1b", "2bw", "mixed", "mixed-1f1b", "mixed-gpipe", "wave",
    "interleaved", "zb-h1", "zb-v", "chimera", "dualpipev", "zb-h2", "zb-2p",
    "zero-offload", "zero-infinity", "fuyou", "file", NULL};

const char *sim_sched_name(sim_sched s)
{
    return (unsigned)s < SIM_SCHED_COUNT ? sched_names[s] : "?";
}

const char *const *sim_sched_names(void) { return sched_names; }

static const char *const sched_about[SIM_SCHED_COUNT] = {
    "GPipe: all forwards, then all backwards, flush",
    "1F1B with flush (PipeDream-Flush)",
    "PipeDream-2BW: 1F1B, two weight versions, no flush (async)",
    "Mixed-pipe (FTPipe; also mixed-pipe): sub-layer blocks, async",
    "Mixed-pipe's blocks, 1F1B with flush",
    "Mixed-pipe's blocks, GPipe with flush",
    "Hanayo's wave: stages zig-zag over the devices (--waves)",
    "interleaved 1F1B (Megatron-LM): --chunks stages per device",
    "Zero Bubble H1: backward split into input and weight gradients",
    "Zero Bubble V: two stages per device in a V",
    "Chimera: two pipelines in opposite directions",
    "DualPipeV (DeepSeek), as PyTorch orders it",
    "Zero Bubble H2: more warm-up forwards (2p-1 in flight), W's fill the drain",
    "Zero Bubble's automatic schedule under 2x 1F1B's activation memory",
    "ZeRO-Offload: optimizer state in host DRAM, CPU Adam after backward",
    "ZeRO-Infinity: weights and state in DRAM or NVMe, fetched per layer",
    "Fuyou: states on NVMe, CPU Adam per layer overlapped with backward",
    "an order read with --schedule-file"};

int sim_sched_parse(const char *name)
{
    for (int k = 0; k < SIM_SCHED_COUNT; k++)
        if (!strcmp(name, sched_names[k])) return k;
    /* FTPipe's paper calls its schedule Mixed-pipe */
    if (!strcmp(name, "mixed-pipe")) return SIM_SCHED_MIXED;
    return -1;
}

const char *sim_sched_about(sim_sched s)
{
    return (unsigned)s < SIM_SCHED_COUNT ? sched_about[s] : "?";
}

char *sim_sched_list(char *buf, size_t n)
{
    size_t l = 0;
    buf[0] = 0;
    for (int k = 0; k < SIM_SCHED_COUNT && l < n; k++)
        if (k != SIM_SCHED_FILE)
            l += (size_t)snprintf(buf + l, n - l, "%s%s", l ? ", " : "",
                                  sched_names[k]);
    return buf;
}

void sim_sched_help(FILE *f, const char *indent)
{
    for (int k = 0; k < SIM_SCHED_COUNT; k++)
        if (k != SIM_SCHED_FILE)
            fprintf(f, "%s%-12s %s\n", indent, sched_names[k], sched_about[k]);
}

int sim_sched_async(sim_sched s)
{
    return s == SIM_SCHED_2BW || s == SIM_SCHED_MIXED;
}

int sim_sched_plannable(sim_sched s)
{
    /* every built-in generator; an order read from a file is the user's;
     * the offload policies only when named (the planner's offload_search) */
    return s >= 0 && s < SIM_SCHED_COUNT && s != SIM_SCHED_FILE &&
           !sim_sched_offload(s);
}

int sim_sched_pipes(sim_sched s) { return s == SIM_SCHED_CHIMERA ? 2 : 1; }

int sim_sched_offload(sim_sched s)
{
    return s == SIM_SCHED_ZERO_OFFLOAD || s == SIM_SCHED_ZERO_INFINITY ||
           s == SIM_SCHED_FUYOU;
}

int sim_default_minibatches(sim_sched s, int pp, int n_stages, int n_mb)
{
    (void)n_stages;
    if (!sim_sched_async(s)) return 1;
    int mixed = s == SIM_SCHED_MIXED;
    int depth = mixed ? 4 * pp : pp;
    if (n_mb < 1) n_mb = 1;
    int k = 4 + (2 * depth + n_mb - 1) / n_mb;
    return k > 64 ? 64 : k;
}

int sim_sched_check(const sim_sched_opts *o, util_err *e)
{
    const char *n = sim_sched_name(o->sched);
    if ((unsigned)o->sched >= SIM_SCHED_COUNT)
        return util_errf(e, UTIL_EXIT_USAGE, "unknown schedule %d", o->sched);
    if (o->pp < 1)
        return util_errf(e, UTIL_EXIT_USAGE, "--pp must be at least 1");
    if (o->n_mb < 1 || o->n_mb > 1000000)
        return util_errf(e, UTIL_EXIT_USAGE, "--microbatches %d: must be "
                         "between 1 and 1000000", o->n_mb);
    switch (o->sched) {
    case SIM_SCHED_GPIPE: case SIM_SCHED_1F1B: case SIM_SCHED_2BW:
    case SIM_SCHED_ZBH1: case SIM_SCHED_CHIMERA: case SIM_SCHED_ZBH2:
    case SIM_SCHED_ZB2P:
        if (o->n_stages != o->pp)
            return util_errf(e, UTIL_EXIT_USAGE, "schedule %s maps one stage "
                             "per device: %d stages on %d devices (use "
                             "mixed for several stages per device)", n,
                             o->n_stages, o->pp);
        break;
    case SIM_SCHED_MIXED: case SIM_SCHED_MIXED_1F1B: case SIM_SCHED_MIXED_GPIPE:
        if (o->n_stages < o->pp)
            return util_errf(e, UTIL_EXIT_USAGE, "schedule %s needs at least "
                             "one stage per device: %d stages on %d devices",
                             n, o->n_stages, o->pp);
        break;
    case SIM_SCHED_WAVE:
        if (o->waves < 1)
            return util_errf(e, UTIL_EXIT_USAGE, "--waves %d: the wave "
                             "schedule needs at least 1 wave", o->waves);
        if (o->n_stages != 2 * o->waves * o->pp)
            return util_errf(e, UTIL_EXIT_USAGE, "schedule wave with %d "
                             "wave(s) on %d devices maps exactly 2*W*p = %d "
                             "stages, not %d", o->waves, o->pp,
                             2 * o->waves * o->pp, o->n_stages);
        break;
    case SIM_SCHED_INTERLEAVED: {
        int v = o->chunks > 0 ? o->chunks : o->n_stages / o->pp;
        if (v < 1 || o->n_stages != v * o->pp)
            return util_errf(e, UTIL_EXIT_USAGE, "schedule interleaved with "
                             "%d chunk(s) per device on %d devices maps "
                             "v*p = %d stages, not %d", v, o->pp, v * o->pp,
                             o->n_stages);
        /* Megatron needs m % p == 0; PyTorch relaxes it to rounds of
         * m / max(1, m / p) microbatches (pytorch#129597) */
        int rounds = o->n_mb / o->pp > 1 ? o->n_mb / o->pp : 1;
        if (o->n_mb % rounds)
            return util_errf(e, UTIL_EXIT_USAGE, "schedule interleaved cannot "
                             "take %d microbatches on %d devices: they must "
                             "split into %d equal rounds (a multiple of %d, "
                             "or at most %d)", o->n_mb, o->pp, rounds, o->pp,
                             2 * o->pp - 1);
        break;
    }
    case SIM_SCHED_ZBV: case SIM_SCHED_DUALPIPEV:
        if (o->n_stages != 2 * o->pp)
            return util_errf(e, UTIL_EXIT_USAGE, "schedule %s maps exactly "
                             "two stages per device in a V: 2*p = %d stages, "
                             "not %d", n, 2 * o->pp, o->n_stages);
        if (o->sched == SIM_SCHED_DUALPIPEV && o->n_mb < 2 * o->pp)
            return util_errf(e, UTIL_EXIT_USAGE, "schedule dualpipev cannot "
                             "take %d microbatches on %d devices: it needs at "
                             "least as many as stages (2p = %d)", o->n_mb,
                             o->pp, 2 * o->pp);
        break;
    case SIM_SCHED_ZERO_OFFLOAD: case SIM_SCHED_ZERO_INFINITY:
    case SIM_SCHED_FUYOU:
        if (o->pp != 1)
            return util_errf(e, UTIL_EXIT_USAGE, "schedule %s offloads each "
                             "GPU's whole model: --pp 1 (got pp %d; --dp D "
                             "runs it data parallel on D GPUs)", n, o->pp);
        break;
    default:
        break;
    }
    if (o->sched == SIM_SCHED_CHIMERA && (o->pp % 2 || o->n_mb % 2))
        return util_errf(e, UTIL_EXIT_USAGE, "schedule chimera needs an even "
                         "number of devices and of microbatches (half go down, "
                         "half up): pp %d, microbatches %d", o->pp, o->n_mb);
    if (o->sched == SIM_SCHED_2BW && o->n_mb < o->pp)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule 2bw cannot take %d "
                         "microbatches on %d stages: PipeDream-2BW keeps two "
                         "weight versions, which needs at least as many "
                         "microbatches per update as stages (m >= p)",
                         o->n_mb, o->pp);
    if (sim_sched_async(o->sched) && o->n_minibatches < 3)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule %s has no flush: its "
                         "steady state needs at least 3 minibatches "
                         "simulated (got %d)", n, o->n_minibatches);
    return 0;
}

void sim_sched_map(const sim_sched_opts *o, int *stage_device)
{
    for (int s = 0; s < o->n_stages; s++) {
        if (o->sched == SIM_SCHED_WAVE || o->sched == SIM_SCHED_ZBV ||
            o->sched == SIM_SCHED_DUALPIPEV) {
            /* zig-zag: down over the devices, then back up, W times */
            int pass = s / o->pp, pos = s % o->pp;
            stage_device[s] = pass % 2 ? o->pp - 1 - pos : pos;
        } else {
            stage_device[s] = s % o->pp;
        }
    }
}

/* Synchronous schedules end with one optimizer step per stage. */
static void add_final_updates(sim_ir *ir)
{
    for (int s = 0; s < ir->n_stages; s++)
        sim_ir_compute(ir, SIM_OPT, s, -1, 0, 0);
}

void sim_add_async_updates(sim_ir *ir)
{
    const int S = ir->n_stages, M = ir->n_mb, K = ir->n_minibatches;
    int n0 = ir->n_tasks;
    int *ver = util_malloc(sizeof(int) * (size_t)K * S * M);
    int *nopt = util_calloc((size_t)S, sizeof(int));
    int *nback = util_calloc((size_t)K * S, sizeof(int));
    int *opt_after = util_malloc(sizeof(int) * (size_t)(n0 + 1));
    for (int i = 0; i < n0; i++) opt_after[i] = -1;
    for (int d = 0; d < ir->n_devices; d++) {
        int len0 = ir->dlen[d]; /* OPTs appended below are not visited */
        for (int j = 0; j < len0; j++) {
            int id = ir->dlist[d][j];
            sim_task *t = &ir->tasks[id];
            size_t v = ((size_t)t->minibatch * S + t->stage) * M + t->mb;
            if (t->kind == SIM_F) {
                ver[v] = nopt[t->stage];
                if (ir->version_delay) {
                    /* 2BW: the version one update behind the minibatch;
                     * with m >= p the order has always made it by now */
                    int want = t->minibatch > 0 ? t->minibatch - 1 : 0;
                    UTIL_NEVER(want > ver[v]);
                    ver[v] = want;
                }
            }
            t->version = ver[v];
            int last = t->kind == SIM_W || t->kind == SIM_BW;
            int st = t->stage, k = t->minibatch;
            if (last && ++nback[k * S + st] == M) {
                /* the OPT creates version nopt+1; it is numbered by the
                 * version it replaces */
                opt_after[id] = sim_ir_compute(ir, SIM_OPT, st, -1, k,
                                               nopt[st]);
                nopt[st]++;
            }
        }
    }
    /* place each OPT right after the backward that completed its
     * minibatch on that stage */
    int na = 0;
    int *anchor = util_malloc(sizeof(int) * (size_t)(n0 + 1));
    int *task = util_malloc(sizeof(int) * (size_t)(n0 + 1));
    for (int i = 0; i < n0; i++)
        if (opt_after[i] >= 0) anchor[na] = i, task[na++] = opt_after[i];
    sim_ir_place_after(ir, n0, anchor, task, na);
    free(anchor);
    free(task);
    free(ver);
    free(nopt);
    free(nback);
    free(opt_after);
}

static int schedule_finish(sim_ir *ir, const sim_costs *c, int dry,
                           util_err *e);

sim_ir *sim_schedule(const sim_sched_opts *o, const sim_costs *c,
                     util_err *e)
{
    if (sim_sched_check(o, e)) return NULL;
    if (c->n_model_stages != o->n_stages)
        return util_errf(e, UTIL_EXIT_USAGE, "%d stages in the partition, "
                         "%d in the schedule", c->n_model_stages, o->n_stages),
               NULL;
    int K = sim_sched_async(o->sched) ? o->n_minibatches : 1;
    sim_ir *ir = sim_schedule_new(o, c, e);
    if (!ir) return NULL;
    int rc = 0;
    switch (o->sched) {
    case SIM_SCHED_GPIPE: sim_gen_gpipe(ir, o); break;
    case SIM_SCHED_1F1B: sim_gen_1f1b(ir, o); break;
    case SIM_SCHED_2BW: sim_gen_2bw(ir, o); break;
    case SIM_SCHED_MIXED: case SIM_SCHED_MIXED_1F1B:
    case SIM_SCHED_MIXED_GPIPE:
        rc = sim_gen_mixed(ir, o, c, e);
        break;
    case SIM_SCHED_WAVE: rc = sim_gen_wave(ir, o, c, e); break;
    case SIM_SCHED_INTERLEAVED: rc = sim_gen_interleaved(ir, o, c, e); break;
    case SIM_SCHED_ZBH1: rc = sim_gen_zbh1(ir, o, c, e); break;
    case SIM_SCHED_ZBV: rc = sim_gen_zbv(ir, o, c, e); break;
    case SIM_SCHED_ZBH2: rc = sim_gen_zbh2(ir, o, c, e); break;
    case SIM_SCHED_ZB2P: rc = sim_gen_zb2p(ir, o, c, e); break;
    case SIM_SCHED_CHIMERA: rc = sim_gen_chimera(ir, o, c, e); break;
    case SIM_SCHED_DUALPIPEV: sim_gen_dualpipev(ir, o); break;
    case SIM_SCHED_ZERO_OFFLOAD: case SIM_SCHED_ZERO_INFINITY:
    case SIM_SCHED_FUYOU:
        rc = sim_gen_offload(ir, o, c, e);
        break;
    default: rc = util_errf(e, UTIL_EXIT_USAGE, "schedule %s is read from "
                            "a file (sim_schedule_file)",
                            sim_sched_name(o->sched));
        break;
    }
    (void)K;
    if (!rc) rc = schedule_finish(ir, c, !o->no_dry_run, e);
    if (rc) {
        sim_ir_free(ir);
        return NULL;
    }
    return ir;
}

sim_ir *sim_schedule_new(const sim_sched_opts *o, const sim_costs *c,
                         util_err *e)
{
    int pipes = sim_sched_pipes(o->sched);
    int dp = o->dp > 1 ? o->dp : 1;
    int fold = c->fold > 1 ? c->fold : 1;
    if (c->n_model_stages != o->n_stages || c->replicas * fold != dp * pipes)
        return util_errf(e, UTIL_EXIT_USAGE, "%d stage(s) x %d replica(s) "
                         "in the costs, %d x %d (dp %d) in the schedule",
                         c->n_model_stages, c->replicas * fold, o->n_stages,
                         dp * pipes, dp),
               NULL;
    if (c->n_devices * fold != o->pp * dp)
        return util_errf(e, UTIL_EXIT_USAGE, "%d devices in the costs, pp %d "
                         "x dp %d in the schedule", c->n_devices * fold,
                         o->pp, dp),
               NULL;
    for (int s = 0; s < c->n_stages; s++)
        if (c->stage_device[s] < 0 || c->stage_device[s] >= c->n_devices)
            return util_errf(e, UTIL_EXIT_USAGE, "stage %d is mapped to "
                             "device %d, outside 0..%d", s,
                             c->stage_device[s], c->n_devices - 1),
                   NULL;
    int K = sim_sched_async(o->sched) ? o->n_minibatches : 1;
    /* Refused before any task is made: memory grows with the stage and
     * microbatch pairs (about 1 KiB each, tasks, dependencies and the
     * engine's state), time too (a few microseconds each). */
    double work = (double)K * (o->n_mb / pipes) * c->n_stages;
    if (work > SIM_MAX_WORK) {
        char mem[32];
        return util_errf(e, UTIL_EXIT_USAGE, "%d minibatch(es) x %d "
                         "microbatches x %d stages%s = %.0f stage-microbatches "
                         "to simulate, about %s: sluice simulates at most %d "
                         "(use larger or fewer microbatches)", K,
                         o->n_mb / pipes, c->n_stages,
                         c->replicas > 1 ? " (all replicas)" : "", work,
                         util_fmt_bytes(work * 1024, mem, sizeof mem),
                         SIM_MAX_WORK),
               NULL;
    }
    sim_ir *ir = sim_ir_new(sim_sched_name(o->sched), c->n_devices,
                            c->n_stages, c->stage_device, o->n_mb / pipes, K);
    ir->version_delay = o->sched == SIM_SCHED_2BW;
    ir->n_gen_stages = o->n_stages * pipes;
    ir->n_gen_devices = o->pp;
    return ir;
}

/* Copies the order generated for data-parallel rank 0 to the others. */
static void replicate(sim_ir *ir, const sim_costs *c)
{
    int G = ir->n_gen_stages, pp = ir->n_gen_devices;
    int dp = c->n_devices / pp;
    for (int q = 1; q < dp; q++)
        for (int d = 0; d < pp; d++) {
            int len = ir->dlen[d];
            for (int j = 0; j < len; j++) {
                sim_task t = ir->tasks[ir->dlist[d][j]];
                t.stage += q * G;
                t.device += q * pp;
                UTIL_NEVER(ir->stage_device[t.stage] != t.device);
                sim_ir_add(ir, &t);
            }
        }
}

static int schedule_finish(sim_ir *ir, const sim_costs *c, int dry,
                           util_err *e)
{
    replicate(ir, c);
    /* offloaded, the host's CPU steps the optimizer (sim_add_offload) */
    if (ir->n_minibatches > 1) sim_add_async_updates(ir);
    else if (!c->offload) add_final_updates(ir);
    int rc = sim_lower(ir, c, e);
    if (!rc) {
        sim_add_tied(ir, c);
        sim_add_allreduce(ir, c);
        if (c->offload) sim_add_offload(ir, c);
        if (c->stage_tiers) sim_add_stage_tiers(ir, c);
        sim_ir_finish(ir);
        rc = dry ? sim_validate(ir, e) : sim_validate_rules(ir, e);
    }
    return rc;
}

int sim_schedule_finish(sim_ir *ir, const sim_costs *c, util_err *e)
{
    return schedule_finish(ir, c, 1, e);
}
