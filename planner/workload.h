/* Many models at once (Hydra, Nagrecha and Kumar, arXiv 2110.08633): jobs
 * cut into shards that fit one GPU, parameters and optimizer state spilled
 * to host DRAM between uses, shards of different jobs scheduled over the
 * GPUs; against the baselines of one job at a time. Prefix plan_wl_.
 * Times are integer nanoseconds, ties broken by index: same input, same
 * schedule. Ownership: *_free releases what the call filled. */
#ifndef SLUICE_PLANNER_WORKLOAD_H
#define SLUICE_PLANNER_WORKLOAD_H

#include <math.h>
#include <stdint.h>

#include "planner/planner.h"

/* ---- the shard scheduler, on abstract jobs (tests build them by hand) ---- */

/* One shard-step of a minibatch: the GPU loads its shard's state (and the
 * boundary activation it reads) from host DRAM, computes, and writes back
 * what changed. Steps of a job run strictly in order. */
typedef struct plan_wl_step {
    int64_t compute_ns, load_ns, evict_ns;
    double load_bytes, evict_bytes;
    double host_delta_bytes;  /* boundary activations the host holds after
                               * it, less those it consumed */
    int shard;                /* the same shard back to back on one GPU
                               * stays there: no load, no write-back */
} plan_wl_step;

typedef struct plan_wl_sjob {
    int n_steps;              /* per minibatch (2k-1 for k shards) */
    const plan_wl_step *step; /* lent */
    long minibatches;
    int priority;             /* higher first, before any policy's rule */
    double host_bytes;        /* state the host keeps throughout */
    int64_t host_step_ns;     /* clipping (sluice exec --clip): the job's
                               * optimizer step on the host, run by the
                               * device's thread after each minibatch's
                               * last step (as sluice exec runs it), whose
                               * shard then goes and loads again for the
                               * next step (the device's copy is stale);
                               * 0: none */
} plan_wl_sjob;

typedef enum {
    PLAN_WL_LRTF,             /* Sharded-LRTF: longest remaining time first */
    PLAN_WL_RANDOM,           /* uniformly among the free jobs (seeded) */
    PLAN_WL_RR,               /* round robin over job indices */
    PLAN_WL_SCRIPT,           /* the candidate given at each decision
                               * (brute force over orders) */
    PLAN_WL_POLICY_COUNT
} plan_wl_policy;
const char *plan_wl_policy_name(plan_wl_policy p);

typedef struct plan_wl_seg {  /* consecutive steps of one job on one GPU */
    int gpu, job;
    int64_t start_ns, end_ns;
    long steps;
} plan_wl_seg;

typedef struct plan_wl_copy { /* a load (dir 0) or write-back (1) of a */
    int gpu, dir, job;        /* shard on GPU gpu, from its start on its */
    int64_t start_ns, end_ns; /* stream to its last byte's arrival */
    double bytes;
} plan_wl_copy;

/* The links that host-GPU copies share: each GPU's route from its host
 * memory (in) and back (out) as directed links of the topology, each
 * direction of a link its own capacity, shared max-min fair among the
 * copies crossing it at each moment, as the simulator shares links; a
 * copy's route latency follows its last byte. */
typedef struct plan_wl_net {
    int n_gpus, n_dl;
    double *cap;              /* [n_dl] bytes per ns */
    int **route[2];           /* [0] host to GPU g, [1] GPU g to host */
    int *len[2];
    double *lat_ns[2];
} plan_wl_net;

/* The routes of t's GPUs to the host memory nearest each. -1 with a
 * message when a GPU has none (exit code 2). */
int plan_wl_net_build(const prof_topo *t, plan_wl_net *n, util_err *e);
void plan_wl_net_free(plan_wl_net *n);
/* The rate (bytes/s) the slowest of GPUs 0..k-1 gets when all of them
 * copy in direction dir at once. */
double plan_wl_net_share(const plan_wl_net *n, int k, int dir);

typedef struct plan_wl_sched_opts {
    plan_wl_policy policy;
    unsigned seed;            /* random */
    int record;               /* keep the segments (plots, traces) */
    const int *script;        /* PLAN_WL_SCRIPT: index into the candidates
                               * (by job index) at decision i; 0 beyond */
    int n_script;
    int *branch;              /* optional out: candidates at decision i */
    int max_branch;
    const plan_wl_net *net;   /* copies share these links (load_bytes,
                               * evict_bytes); NULL: each copy takes its
                               * step's load_ns, evict_ns, as alone */
} plan_wl_sched_opts;

typedef struct plan_wl_run {
    int n_gpus;
    int64_t makespan_ns;      /* last write-back of the last step */
    int64_t *busy_ns;         /* [n_gpus] computing */
    double pcie_bytes;        /* host <-> GPU, both directions */
    double host_peak_bytes;   /* state of every job plus boundary
                               * activations held, at its highest */
    long decisions;           /* choices made (branch[] entries) */
    double *link_bytes;       /* [n_dl] with a net: bytes each directed
                               * link carried */
    int n_dl;
    plan_wl_seg *seg;         /* record only */
    int n_seg, cap_seg;
    plan_wl_copy *cp;         /* record only: every copy */
    int n_cp, cap_cp;
} plan_wl_run;

/* The event-driven schedule of n jobs over n_gpus GPUs. A GPU that starts
 * a step at once picks what it runs next (one-deep lookahead, as Hydra's
 * orchestrator does) among the jobs running nowhere else and its own, and
 * prefetches it on its copy-in stream, into the slot the step before the
 * current one freed (double buffering); write-backs run on the copy-out
 * stream, in order. A step starts once its shard is loaded and the job's
 * write-back from another GPU is done. A GPU with nothing to pick idles
 * until a job is released. */
void plan_wl_schedule(const plan_wl_sjob *jobs, int n, int n_gpus,
                      const plan_wl_sched_opts *o, plan_wl_run *r);
/* The directed link of n busy the largest share of r's makespan, and
 * that share (0..1); -1 when r used no net. */
int plan_wl_busiest_link(const plan_wl_run *r, const plan_wl_net *n,
                         double *busy);
void plan_wl_run_free(plan_wl_run *r);

/* ---- workloads ---- */

typedef enum { PLAN_WL_ADAM, PLAN_WL_SGD } plan_wl_optim;


typedef struct plan_wl_job {
    char name[64];            /* "gpt2-xl.3", or the file's "name" */
    char model[256];          /* zoo name or spec file */
    int batch;                /* samples per minibatch */
    double samples;           /* to train on (epochs x dataset) */
    plan_wl_optim optim;
    int priority;
    char where[300];          /* "FILE:LINE:COL: field 'jobs[i]'" or
                               * "--models NAME", for errors */
    char model_where[300];    /* the same for its "model" */
} plan_wl_job;

/* The most minibatches a job may take: the executor counts steps in an
 * int. */
#define PLAN_WL_MAX_STEPS 1e8
/* The most shard steps (every job's steps a minibatch times its
 * minibatches) the planner's shard schedules simulate one by one, about
 * a microsecond and a half each here: a larger workload's run 1/k of
 * each job's minibatches, their makespan and traffic scaled back by the
 * ratio of the compute they simulated (plan --models, --workload). */
#define PLAN_WL_SIM_STEPS 4e6
/* Epochs of a dataset as whole samples: *out the product, rounded where
 * only the product's rounding keeps it from whole (2.3 x 100 is 230).
 * Returns 0, or -1 where it is not whole (*out then the product). */
static inline int plan_wl_epoch_samples(double epochs, double dataset,
                                        double *out)
{
    double x = epochs * dataset, w = nearbyint(x);
    *out = fabs(x - w) <= 1e-9 * fmax(1, w) ? w : x;
    return *out == w ? 0 : -1;
}
/* A job's minibatches: its samples in batches, the last one partial. */
static inline double plan_wl_minibatches(const plan_wl_job *j)
{
    return ceil(j->samples / j->batch);
}

typedef struct plan_wl {
    int n_jobs;
    plan_wl_job *jobs;
} plan_wl;

/* Reads a workload file: {"jobs": [{"model": ..., "batch": ...,
 * "samples": N | "epochs": E with "dataset_samples": N, "optimizer":
 * "adam"|"sgd", "priority": P, "name": ...}, ...]}. Errors name
 * file:line:col and the field (exit code 2). */
int plan_wl_load(const char *path, plan_wl *w, util_err *e);
void plan_wl_free(plan_wl *w);

/* State bytes per parameter of an optimizer in mixed precision: Adam 16
 * (fp16 weights and gradients, fp32 master, two moments), SGD 8 (no
 * momentum, as Hydra trains: fp16 weights and gradients, fp32 master). */
double plan_wl_state_bytes(plan_wl_optim o);
const char *plan_wl_optim_name(plan_wl_optim o);   /* "adam", "sgd" */

/* `sluice plan --models NAME xN ... | --workload FILE`: whether argv asks
 * for a workload, and the command itself (exit code). */
int plan_wl_wanted(int argc, char **argv);
int plan_wl_main(int argc, char **argv);

#endif
