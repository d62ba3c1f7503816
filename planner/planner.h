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

#endif
