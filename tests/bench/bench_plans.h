/* Plans the benches share (header only: each bench is a program of its
 * own). */
#ifndef SLUICE_BENCH_PLANS_H
#define SLUICE_BENCH_PLANS_H

#include <stdio.h>

#include "sim/sim.h"

/* A plan of offload schedule s for model m (zoo name `model`) on `dp`
 * CPU devices with its states in `tier`: a stage per layer, microbatches
 * of 2, 4 of them split over the ranks, full recomputation. 0, or -1
 * with e set (p freed). */
static inline int bench_offload_plan(sim_plan *p, const prof_model *m,
                                     const char *model, sim_sched s,
                                     int tier, int dp, util_err *e)
{
    sim_plan_init(p);
    snprintf(p->model, sizeof p->model, "%s", model);
    snprintf(p->hw, sizeof p->hw, "cpu x%d", dp);
    p->sched = s;
    p->pp = p->tp = 1;
    p->dp = dp;
    p->mbs = 2;
    p->n_mb = 4 / dp;
    p->waves = 1;
    p->recompute = SIM_RC_FULL;
    p->tier = tier;
    sim_plan_stages(p, m->n_layers);
    if (sim_partition_even(m, m->n_layers, p->first_op, p->last_op, e)) {
        sim_plan_free(p);
        return -1;
    }
    return 0;
}

#endif
