/* PipeDream-2BW (Narayanan et al., ICML 2021): 1F1B without flushes over
 * consecutive minibatches; each stage coalesces the gradients of m
 * microbatches and then updates, W(t+1) = W(t) - lr * grad f(W(t-1)):
 * microbatches already in flight keep the version they started with
 * (stashing), new ones use the new version, so with m >= p at most two
 * versions are alive. The optimizer steps and version numbers are added by
 * sim_add_async_updates; the iteration time is measured in steady state. */
#include "sim/sim.h"


void sim_gen_2bw(sim_ir *ir, const sim_sched_opts *o)
{
    sim_gen_1f1b_n(ir, o, o->n_mb * ir->n_minibatches);
}
