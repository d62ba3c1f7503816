/* Inside the workload planner: a job prepared for scheduling (its model,
 * per-layer costs, shards and shard-steps). Shared with the workload
 * executor (exec/workload.c), which runs the same cut; not for others. */
#ifndef SLUICE_PLANNER_WORKLOAD_INT_H
#define SLUICE_PLANNER_WORKLOAD_INT_H

#include "planner/workload.h"

typedef struct wl_prep {
    const plan_wl_job *job;     /* lent */
    const prof_topo *t;         /* lent */
    const prof_gpu *gpu;        /* lent: GPU 0's type */
    prof_model *m;
    sim_costs *lc;              /* one stage per layer, at the job's batch */
    double cap;                 /* GPU bytes after the reserve */
    double state;               /* bytes per parameter */
    double pcie_bw, pcie_lat_ns;/* GPU 0 to its host memory */
    long minibatches;
    int k;                      /* shards */
    int *first;                 /* [k+1] layer boundaries */
    plan_wl_step *step;
    int n_steps;
    int64_t mb_compute_ns;      /* one minibatch's shard-steps */
    double flops;               /* model FLOPs of the whole job */
    plan_wl_sjob sj;            /* lends step */
    int clip;                   /* steps of wl_prep_clip: 1 AdamW, 2 SGD */
    int no_fit;                 /* the prep failed: a layer fits no GPU */
    int worst_layer;            /* then the layer needing the most, */
    double worst_need;          /* its bytes on the GPU as a shard */
} wl_prep;

/* Prepares job j for topology t (GPU 0's type for all GPUs). Errors name
 * the job's place in its file (exit code 2). */
int wl_prep_job(wl_prep *p, const plan_wl_job *j, const prof_topo *t,
                double reserve, util_err *e);
/* The same for a model already built, which p owns from then on (freed
 * by wl_prep_free, also after a failure). */
int wl_prep_model(wl_prep *p, const plan_wl_job *j, prof_model *m,
                  const prof_topo *t, double reserve, util_err *e);
/* The job's steps again as a run clipping the gradient takes them (sluice
 * exec --clip): each backward sends its gradient to the host, which steps
 * the whole job after the minibatch (sj.host_step_ns); sgd: the job's
 * optimizer is SGD. */
void wl_prep_clip(wl_prep *p, int sgd);
void wl_prep_free(wl_prep *p);

#endif
