/* planner: searches pipeline depth, data and tensor parallel widths,
 * microbatching, schedule, recomputation and partition for the best plan,
 * simulating the survivors of cheap bounds. Prefix plan_. */
#ifndef SLUICE_PLANNER_H
#define SLUICE_PLANNER_H

#include "profiles/profiles.h"

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

#endif
