/* sim: the discrete-event simulator of pipeline-parallel training.
 * A schedule generator emits the task IR (per device, an ordered task list
 * with dependencies); the engine runs it over a cost table (per stage and
 * task kind, precomputed once) and a server graph, in integer nanoseconds
 * with ties broken by sequence number, so the same input gives the same
 * output byte for byte. The IR, schedules, costs and plan file are in
 * sim/ir.h (the executor reads them too). Ownership: *_new and
 * *_build return objects freed with the matching *_free (NULL is fine);
 * getters lend. Errors: functions taking util_err return 0 or -1. */
#ifndef SLUICE_SIM_H
#define SLUICE_SIM_H

#include <stdint.h>
#include <stdio.h>

#include "sim/ir.h"
#include "util/util.h"

/* ===================================================================== *
 * Link sharing                                                          *
 * ===================================================================== */

/* Scratch for sim_maxmin: rem, cnt and touched sized by the number of
 * directed links (cnt zeroed once), frozen by the number of flows. */
typedef struct sim_maxmin_scratch {
    double *rem;
    int *cnt;
    int *touched;
    uint8_t *frozen;
} sim_maxmin_scratch;

/* Max-min fair rates (bytes/s) of nf flows, flow f crossing the directed
 * links route[f][0..route_len[f]) of capacities cap[] (every route has at
 * least one link). Progressive filling; no allocation. */
void sim_maxmin(int nf, const int *const *route, const int *route_len,
                const double *cap, double *rate, sim_maxmin_scratch *w);

/* ===================================================================== *
 * The engine                                                            *
 * ===================================================================== */

typedef struct sim_engine sim_engine;

typedef struct sim_run_opts {
    int record;         /* keep the memory timeline (traces, plots) */
    int stop_at_oom;    /* end the run when a device first goes over its
                         * capacity: only the verdict is wanted (see
                         * sim_result.stopped) */
    int ring_steps;     /* a folded ring's repeated steps each a flow of
                         * its own, as the explicit replicas' rings run
                         * them: their timeline to the nanosecond (tests
                         * of folding); 0: the steps move as one flow,
                         * their latencies after it, the same time where
                         * it shares no link and the same bytes on the
                         * links, in an event instead of 2(R-1) */
} sim_run_opts;

typedef struct sim_dev_stats {
    int64_t compute_ns;     /* F, B, W, BW */
    int64_t recompute_ns;
    int64_t opt_ns;
    int64_t comm_exposed_ns;/* compute idle waiting for a transfer in flight,
                             * plus tensor-parallel all-reduces (they block
                             * the layer; not in compute_ns) */
    int64_t bubble_ns;      /* compute idle otherwise */
    /* per sim_comm: time the device's transfers of that kind were in
     * flight (pipeline: its send stream busy; data-parallel: its
     * collective stream busy; tensor-parallel: inside F and B), and the
     * part of it the compute stream waited for (exposed; hidden = busy -
     * exposed). Data-parallel exposed: idle before an optimizer step that
     * waits for its all-reduce. */
    int64_t comm_busy_ns[SIM_COMM_COUNT];
    int64_t comm_exp_ns[SIM_COMM_COUNT];
    double bubble_fraction; /* (bubble + exposed comm) / iteration */
    double static_bytes;    /* weights, grads, optimizer state */
    double peak_bytes;
    double capacity_bytes;
} sim_dev_stats;

typedef struct sim_mem_point {
    int64_t t_ns;
    int32_t device;
    double bytes;
} sim_mem_point;

/* The simulated clock stops at SIM_T_MAX ns (31.7 years): a plan that
 * runs past it is refused (sim_result.too_slow; its hardware's figures
 * make its ops too slow to simulate). A task's cost is held to
 * SIM_TASK_NS_MAX (sim_task_ns), so the clock's sums stay inside 64
 * bits. */
#define SIM_T_MAX 1e18
#define SIM_TASK_NS_MAX 1e17
static inline int64_t sim_task_ns(double ns)
{
    return ns > 0 ? (int64_t)(ns < SIM_TASK_NS_MAX ? ns : SIM_TASK_NS_MAX)
                  : 0;
}

struct sim_result;
/* The exit code of a run that failed: 2 where the input made it too
 * slow to simulate, 1 otherwise (a deadlock). */
int sim_result_code(const struct sim_result *r);

typedef struct sim_result {
    int ok;                 /* 0: deadlock or too slow (see msg) */
    int too_slow;           /* the clock ran past SIM_T_MAX: the input's
                             * fault (exit code 2), not a deadlock */
    char msg[1024];
    int n_devices, n_stages;
    int64_t makespan_ns;    /* end of the last task */
    int64_t iteration_ns;   /* sync: makespan; async: steady state */
    int64_t window_t0, window_t1; /* window the per-device stats cover */
    int window_iters;       /* iterations in the window */
    sim_dev_stats *dev;     /* n_devices (per iteration) */
    int *max_inflight;      /* per stage: microbatches between F and last backward */
    int *max_versions;      /* per stage: weight versions alive at once */
    int oom;                /* a device went over capacity */
    int oom_task;           /* the first task that did */
    int64_t oom_t_ns;
    int stopped;            /* stop_at_oom ended the run there: only oom,
                             * oom_task, oom_t_ns and the peaks so far
                             * (dev[].peak_bytes, a lower bound) hold */
    int64_t events;         /* events processed */
    const int64_t *start_ns, *end_ns; /* per task (lent from the engine) */
    const int64_t *flow_start_ns;     /* per task: sends/recvs, transfer start */
    const sim_mem_point *mem;         /* record only */
    int n_mem;
} sim_result;

/* An offloaded iteration's resources (device 0, rank 0 of several):
 * busy time (the union of its tasks' intervals; the drives' reads and
 * writes count as one resource, as they share the drives) and bytes
 * moved; bound is the busiest. Data-parallel ranks also gather weights
 * and reduce gradients between the GPUs (the ring: its sends). */
enum {
    SIM_OFL_GPU, SIM_OFL_PCIE_IN, SIM_OFL_PCIE_OUT, SIM_OFL_NVME,
    SIM_OFL_CPU, SIM_OFL_RING, SIM_OFL_RES_COUNT
};
typedef struct sim_offload_use {
    int64_t busy_ns[SIM_OFL_RES_COUNT];
    double bytes[SIM_OFL_RES_COUNT];
    int bound;
} sim_offload_use;
/* "GPU compute", ... ("device compute", ... on CPU devices; t may be
 * NULL: GPUs) */
const char *sim_offload_res_name(int k, const prof_topo *t);
const char *sim_offload_res_key(int k);    /* JSON: "gpu", ... */
void sim_offload_usage(const sim_ir *ir, const sim_result *r,
                       sim_offload_use *u);
/* Host DRAM and drive use over an offloaded iteration: what stays (the
 * states on their tier) and, in time, the swapped activations (in DRAM
 * from their copy out to their copy back, on the drives from their write
 * to their read), what the drives' reads stage (a fetch's weights until
 * their copy up, a step's state until its write-back), and, made once and
 * kept, the buffer where a stage's copies out after its first land before
 * their sum and the fp32 gradients' buffers (as many as the steps hold at
 * once at their most: from a stage's first copy out to its step). Points
 * (t_ns, bytes) after each change; the peaks stay within what
 * sim_offload_costs checked (sim_costs host_bytes, of it the staging
 * window's most host_staging, and nvme_bytes). */
typedef struct sim_tier_use {
    double host_resident, nvme_resident;
    double host_peak, nvme_peak;
    double grad_most;           /* the gradients' host buffers the steps
                                 * hold at once at their most: made once
                                 * and kept, what a later iteration finds */
    int n;
    int64_t *t_ns;
    double *host, *nvme;
} sim_tier_use;
/* A stage tier's step (sim_add_stage_tiers) in result r: stage s's tier
 * tasks of the first minibatch, by part (each summed, ns), and from the
 * gradient's copy out to the end of the last (the drives read ahead). */
typedef struct sim_tier_step {
    double out_ns, cpu_ns, drives_ns, in_ns, span_ns;
} sim_tier_step;
void sim_stage_tier_step(const sim_ir *ir, const sim_result *r, int s,
                         sim_tier_step *x);
void sim_offload_tier_use(const sim_ir *ir, const sim_result *r,
                          const sim_costs *c, sim_tier_use *u);
/* The same for a run's first iteration, which makes the gradients'
 * buffers as it first needs them (its times r, say, measured). */
void sim_offload_tier_use_cold(const sim_ir *ir, const sim_result *r,
                               const sim_costs *c, sim_tier_use *u);
void sim_tier_use_free(sim_tier_use *u);
/* Fuyou's pool of gradient buffers on the host, one rule for the
 * executor's pool (exec/tiers.c) and the simulator's count of it: an
 * idle buffer of `have` bytes serves a gradient of `need` when it is at
 * least that and at most twice it (a larger one stays for the stage it
 * fits; the smallest that serves is taken). */
static inline int sim_grad_pool_fits(double have, double need)
{
    return have >= need && have - need <= need;
}

/* Prepares an engine for one IR and cost table (lent; must outlive it).
 * Everything the event loop needs is allocated here. */
sim_engine *sim_engine_new(const sim_ir *ir, const sim_costs *c,
                           const sim_run_opts *o);
void sim_engine_free(sim_engine *e);
/* The bytes an iteration of the IR moves across links of kind k (each
 * send's and host copy's lanes whose route crosses one; a transfer
 * repeated, each time; folded, every replica group's): its PCIe traffic,
 * say. 0 without a server graph. */
double sim_engine_link_kind_bytes(const sim_engine *e, prof_link_kind k);
/* Runs the simulation; no allocation. The result lends arrays from the
 * engine (valid until the next run or free). Returns 0, or -1 on deadlock
 * with stuck tasks named in res->msg. */
int sim_engine_run(sim_engine *e, sim_result *res);

/* The engine's accounting of a finished run from task times alone, as
 * sim_engine_run applies it to simulated times; an executor passes the
 * times it measured, so the two documents compare quantity by quantity.
 * Needs r->makespan_ns; fills r->window_t0/t1, window_iters, iteration_ns
 * and, per device, dev[d]'s compute, recompute, optimizer, communication
 * (in flight and exposed, by kind), bubble and bubble_fraction (memory
 * fields are left alone). start/end: per task, ns; fstart: per send, when
 * its data started to move (NULL: its start); tp_ns: per compute task,
 * its tensor-parallel all-reduce time (NULL: none). */
void sim_stats_times(const sim_ir *ir, const int64_t *start,
                     const int64_t *end, const int64_t *fstart,
                     const int64_t *tp_ns, sim_result *r, sim_dev_stats *dev);

/* ===================================================================== *
 * Reports, traces, command                                              *
 * ===================================================================== */

/* Summary of a run for people and programs. */
void sim_report_print(const sim_plan *p, const prof_model *m,
                      const prof_topo *t, const sim_costs *c,
                      const sim_result *r, const sim_ir *ir, FILE *f);
json_t *sim_report_json(const sim_plan *p, const prof_model *m,
                        const prof_topo *t, const sim_costs *c,
                        const sim_result *r, const sim_ir *ir);
/* A line per device type of t priced from a calibration (its date and
 * file), each begun with lead; nothing for the other types. */
void sim_report_figures(const prof_topo *t, const char *lead, FILE *f);
/* --ops: each op's F, B and W per microbatch on its stage's device and
 * its share of the stage's compute, as a table and as a JSON array. */
void sim_report_ops_print(const prof_model *m, const sim_costs *c, FILE *f);
json_t *sim_report_ops_json(const prof_model *m, const sim_costs *c);
/* Chrome/Perfetto trace-event JSON: a process per device, a thread per
 * stream, X events in microseconds, memory counters, send->recv flows. */
int sim_trace_write(const char *path, const sim_ir *ir, const sim_result *r,
                    const sim_costs *c, util_err *e);

int sim_cmd_main(int argc, char **argv);

#endif
