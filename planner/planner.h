/* planner: searches pipeline depth, data and tensor parallel widths,
 * microbatching, schedule, recomputation and partition for the best plan,
 * simulating the survivors of cheap bounds. Prefix plan_. */
#ifndef SLUICE_PLANNER_H
#define SLUICE_PLANNER_H

#include "profiles/profiles.h"
#include "sim/sim.h"

/* ---- contiguous partitioning of a chain of units into stages ---- */

/* A chain of n units (layers, or ops for finer cuts) to cut into k stages
 * placed on devices 0..k-1 in order. Times are seconds per microbatch. */
typedef struct plan_chain {
    int n;
    const double *time;       /* [n] compute (forward + backward) */
    const double *cut_time;   /* [n] transfer time of the cut after unit u
                               * to the next stage; cut_time[n-1] unused */
    const double *static_mem; /* [n] bytes held regardless of microbatches:
                               * weights, gradients, optimizer state */
    const double *act_mem;    /* [n] bytes kept per microbatch in flight */
    int k;
    const double *inflight;   /* [k] microbatches in flight on stage s */
    const double *cap;        /* [k] bytes available on stage s */
    int overlap;              /* 1: a stage costs max(compute, transfers),
                               * communication hidden on its own streams;
                               * 0: compute + transfers */
} plan_chain;

/* Cost of stage s holding units [a, b] (inclusive). */
double plan_stage_cost(const plan_chain *c, int s, int a, int b);
/* Bytes stage s needs holding units [a, b]. */
double plan_stage_mem(const plan_chain *c, int s, int a, int b);

/* The contiguous partition minimising the slowest stage subject to every
 * stage fitting its capacity, every stage non-empty: exact, by dynamic
 * programming over (stage, last unit), O(k n^2). first[0..k] receives the
 * boundaries (stage s holds [first[s], first[s+1])). Returns the
 * bottleneck cost, or -1 when no partition fits (first untouched). */
double plan_partition_chain(const plan_chain *c, int *first);

/* ---- Mixed-pipe: blocks finer than layers, non-adjacent placement ---- */

/* Balanced cuts of chains into L blocks, remembered across calls: the
 * cut depends on the chain's times and transfers alone, which candidates
 * differing only in memory (schedule, weight versions) share. */
typedef struct plan_mixed_memo plan_mixed_memo;
plan_mixed_memo *plan_mixed_memo_new(void);
void plan_mixed_memo_free(plan_mixed_memo *m);

/* A chain of n units (ops in topological order) to place on p devices as
 * blocks; a device may own several non-adjacent blocks (FTPipe). */
typedef struct plan_mixed_in {
    int n;
    const double *time;       /* [n] compute per microbatch, s */
    const double *cut_time;   /* [n] transfer time of the cut after unit u */
    const double *static_mem; /* [n] bytes held regardless of microbatches */
    const double *act_mem;    /* [n] bytes per microbatch in flight */
    int p;
    double cap;               /* bytes available per device */
    double inflight;          /* microbatches in flight per block (the
                               * schedule's worst stage) */
    plan_mixed_memo *memo;    /* optional (NULL): cuts remembered */
} plan_mixed_in;

typedef struct plan_mixed {
    int n_stages;
    int *first;               /* [n_stages+1] unit boundaries */
    int *dev;                 /* [n_stages] device of each stage */
    double objective;         /* max over devices of compute plus
                               * communication not hidden behind it, s */
} plan_mixed;

/* Coarsens the chain into L balanced blocks for several L (p .. 4p),
 * assigns blocks to the least-loaded device with memory room (largest
 * first), merges neighbours on one device into a stage, then refines block
 * boundaries and placements while the objective falls. The contiguous
 * optimum (one stage per device) is a candidate too, so the result is never
 * worse than it. Returns 0, or -1 when nothing fits (out untouched). */
int plan_mixed_partition(const plan_mixed_in *in, plan_mixed *out);
void plan_mixed_free(plan_mixed *m);
/* The objective of a given placement (for tests and reports). */
double plan_mixed_objective(const plan_mixed_in *in, int n_stages,
                            const int *first, const int *dev);

/* ---- the search ---- */

typedef struct plan_opts {
    int batch;                /* global batch in samples; 0: model default */
    double reserve_bytes;     /* per GPU for the framework and allocator;
                               * < 0: default (PLAN_DEFAULT_RESERVE) */
    int pp, mbs;              /* 0: search */
    int dp, tp;               /* 0: search */
    int recompute;            /* -1: search none, selective and full;
                               * else that sim_recompute */
    int sp;                   /* sequence parallelism: -1 search (where
                               * tp > 1), 0 off, 1 on (tp > 1 only) */
    int zero;                 /* ZeRO stage: -1 unsharded plans, and
                               * where none fits, stages 0..3 (sharding
                               * where dp > 1); else that stage */
    int fsdp;                 /* sim_fsdp: full or hybrid fixes ZeRO-3
                               * sharded that way; 0: as zero says */
    unsigned sched_mask;      /* bit per sim_sched; 0: all */
    int chunks;               /* interleaved 1F1B's chunks per device
                               * (Megatron-LM's virtual pipeline stages):
                               * 0: searched; else that count only */
    int allow_async;          /* an asynchronous schedule (no flush: stale
                               * weights, 2BW, asynchronous Mixed-pipe) may
                               * be chosen; else they are searched and shown
                               * but a synchronous one is chosen, unless
                               * sched_mask names asynchronous ones only */
    double state_bytes_per_param; /* 0: 16 (Adam, mixed precision) */
    int progress;             /* progress bar on stderr (only on a tty) */
    int exhaustive;           /* simulate every candidate: no pruning */
    int no_fold;              /* simulate every data-parallel replica even
                               * where the cluster is symmetric (tests) */
    int state_tiers;          /* the search's own pass where nothing fits
                               * the GPUs: a stage that overflows its GPU
                               * keeps its optimizer state on a host tier
                               * (sim_add_stage_tiers); 0 for callers */
    int offload_tier;         /* sim_tier where the offload schedules
                               * keep the model states; SIM_TIER_AUTO:
                               * searched (DRAM for zero-offload; DRAM and,
                               * where the server has drives, NVMe for
                               * the others) */
    int math;                 /* the precision the model trains in instead
                               * of its spec's (--dtype; prof_math_parse),
                               * 0: the spec's; plans record it */
    int seq_len;              /* tokens a sample (--seq), 0: the spec's;
                               * plans record it */
    int flash;                /* attention fused (1, --flash-attn) or not
                               * (-1), 0: as the spec says; plans record
                               * it */
    double grad_bucket;       /* sim_plan.grad_bucket (--grad-bucket;
                               * SIM_GRAD_BUCKET_AUTO) */
    double time_limit_s;      /* > 0: answer with the best plan found by
                               * then (partitioning takes at most half;
                               * checked between candidates, so a running
                               * simulation finishes); 0: no limit */
} plan_opts;

#define PLAN_DEFAULT_RESERVE (1024.0 * 1024 * 1024)
/* plan_opts.sched_mask's bit for Hydra's shards, past the simulator's
 * schedules: --sweep-host-mem's column of the workload planner. */
#define PLAN_SWEEP_HYDRA SIM_SCHED_COUNT
#define PLAN_DEFAULT_BATCH 32

void plan_opts_init(plan_opts *o);
/* The schedules with a flush (synchronous training: every step sees the
 * weights of the step before) among those of mask `given` (0: every
 * schedule the planner searches by default); 0 when none is. */
unsigned plan_sync_mask(unsigned given);
/* A plan's recomputation, sequence parallelism and sharding as the tables
 * show them after its microbatches: "", " rc" (full), " sel" (selective),
 * then " sp", then " z1".." z3" or " fsdp"/" hsdp"; into buf, returned. */
char *plan_knob_tag(const sim_plan *p, char *buf, size_t n);

/* The best plan of one schedule, or why there is none. */
typedef struct plan_alt {
    int tried;                /* the schedule applied to some candidate */
    int feasible;
    char reason[640];         /* why it lost or does not apply */
    char na_reason[420];      /* why some layouts could not take it */
    sim_plan plan;            /* owned; valid when feasible */
    double iteration_s, samples_per_s;
    double peak_bytes;        /* worst device */
    /* a host tier (SIM_TIER_DRAM or _NVME) that could not hold some
     * candidate's states (0: none; plan_search_host_short asks more) */
    int lack;
    double lack_by;           /* the least factor such a candidate asked
                               * of the host (util_err.lack_by) */
} plan_alt;

typedef struct plan_result {
    int found;
    sim_sched best;           /* index into alt */
    plan_alt alt[SIM_SCHED_COUNT];
    int batch;
    double reserve_bytes;
    double capacity_bytes;    /* per GPU, before the reserve */
    double lower_bound_s;     /* model FLOPs over all GPUs at best efficiency */
    long candidates, simulated, pruned;
    long covered;             /* candidates decided: simulated, pruned by a
                               * bound or without a partition */
    int cut_short;            /* the time limit ended the search with
                               * candidates left (covered < candidates) */
    double seconds;
    double min_need_bytes;    /* least per-GPU memory any candidate needed */
    char advice[1000];        /* when nothing fits */
    char note[1400];          /* said above the answer ("": nothing) */
} plan_result;

/* Model `model`'s spec as the options train it: in their precision
 * (--dtype) and sequence length (--seq). Error, code 2: an unknown model
 * or a length it cannot take. */
int plan_model_spec(const char *model, const plan_opts *po,
                    prof_model_spec *s, util_err *e);

/* Searches the plan space for model m on topology t. model_name and
 * hw_name are what the plan file records. Returns 0 (r->found may be 0
 * when nothing fits; r->advice says why) or -1 on bad input. */
int plan_search(const prof_model *m, const prof_topo *t,
                const char *model_name, const char *hw_name,
                const plan_opts *o, plan_result *r, util_err *e);
void plan_result_free(plan_result *r);

/* Where nothing fit the GPUs with the host as it is, what more host DRAM
 * or drives would give: the plan found with them unbounded, what it
 * needs in each tier per server against what the server has. */
typedef struct plan_host_short {
    sim_sched sched;
    double dram_need, dram_have;
    double nvme_need, nvme_have;
    /* the time limit ended these searches: 1, with the host unbounded
     * (nothing settled, the rest 0); 2, while growing it (the needs are
     * the unbounded plan's, which a smaller host may not need) */
    int cut;
} plan_host_short;

/* After a search of m on t that found nothing (r): when some candidate
 * was refused for host DRAM or drives alone (plan_alt.lack) and the time
 * limit did not end it, searches again on u, t's machine with its
 * servers' DRAM and drives unbounded (the caller's copy: its nodes are
 * changed), with the same options. Returns 1 when a plan fits there and
 * needs more than t's host holds (*hs says what), 0 when the GPUs are
 * what is short, -1 on an error. */
int plan_search_host_short(const prof_model *m, const prof_topo *t,
                           prof_topo *u, const char *model_name,
                           const char *hw_name, const plan_opts *o,
                           const plan_result *r, plan_host_short *hs,
                           util_err *e);

/* Simulates one plan: costs, schedule, engine. The caller frees *costs,
 * *ir and *engine (the result lends from the engine). Capacity is the
 * GPU's memory minus reserve_bytes. Data-parallel replicas are folded as
 * in the search where the cluster is symmetric: the result's devices are
 * then those of replica 0, each standing for its place in every replica
 * ((*costs)->fold of them). */
int plan_simulate(const sim_plan *p, const prof_model *m, const prof_topo *t,
                  double reserve_bytes, int record, sim_costs **costs,
                  sim_ir **ir, sim_engine **engine, sim_result *res,
                  util_err *e);

/* Capacity planning over built-in GPU types hw[0] ("rtx2080ti" or
 * "rtx2080ti,rtx3090") and counts ("1,2,4,8"): prints a table (or JSON) of
 * the best plan of each; with plot (a path prefix), draws throughput
 * against GPU count (PREFIX-capacity.png/svg); the model fine-tuned as ft
 * says (NULL: full training). Returns 0, or -1 (e filled; exit code 1 when
 * nothing fits anywhere). */
int plan_capacity(int hw_n, char **hw, const prof_hw_opts *ho,
                  const char *model, const prof_finetune *ft,
                  const char *gpus, const plan_opts *po, int json,
                  const char *plot, util_err *e);

/* The largest model each offload policy (zero-offload, zero-infinity,
 * fuyou; those po->sched_mask names) fits on one GPU hw[0..hw_n-1] for
 * each host DRAM size in `sizes` ("128G,256G"): model's layer shape with
 * as many layers as the planner fits. Prints a table (or JSON); with
 * plot, draws parameters against DRAM (PREFIX-host-mem.png/svg).
 * Returns 0, or -1 (e filled). */
int plan_sweep_host_mem(int hw_n, char **hw, const prof_hw_opts *ho,
                        const char *model, const prof_finetune *ft,
                        const char *sizes, const plan_opts *po, int json,
                        const char *plot, util_err *e);

/* ---- predictions against published measurements ---- */

/* Runs the planner on every row of a validation table (CSV with '#'
 * comment lines; a "# sluice: gpu=NAME vocab=V seq=S recompute=0|1|MODE
 * sp=0|1 schedule=NAME dtype=T" line says how to read it; columns heads, hidden,
 * layers, tensor_parallel, pipeline_parallel, gpus, batch, tflops_per_gpu)
 * with the row's layout and batch fixed, and prints predicted against
 * measured TFLOP/s per GPU, the error per row and the mean absolute
 * percentage error. Returns 0, or -1 on a bad file. */
int plan_validate_file(const char *path, int json, FILE *out, util_err *e);

#endif
