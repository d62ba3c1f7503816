/* PipeDream-2BW (Narayanan et al., ICML 2021): 1F1B without flushes over
 * consecutive minibatches; each stage coalesces the gradients of m
 * microbatches and then updates, W(t+1) = W(t) - lr * grad f(W(t-1)):
 * every microbatch of minibatch t runs on version t-1 (one update behind,
 * whatever the stage), so each stage keeps two versions, the newest and
 * the one its in-flight minibatch uses (double buffering); m >= p makes
 * version t-1 ready before minibatch t's first forward. The optimizer
 * steps and version numbers are added by sim_add_async_updates
 * (sim_ir.version_delay); the iteration time is measured in steady
 * state. */
#include "sim/sim.h"


void sim_gen_2bw(sim_ir *ir, const sim_sched_opts *o)
{
    sim_gen_1f1b_n(ir, o, o->n_mb * ir->n_minibatches);
}
