/* Hanayo's wave-like pipeline (Liu et al., SC 2023): the model is cut into
 * 2*W*p chunks laid zig-zag over p devices (down, then back up, W times;
 * W = 1 is the V shape), one weight copy, a flush at the end. At each turn
 * two consecutive chunks sit on the same device, so that hop needs no
 * transfer (sim_lower only adds transfers between devices). Devices order
 * their chunks' work backward-first with a depth-first forward choice;
 * chunk s keeps at most 2Wp - s microbatches in flight, which on each
 * device adds up to 1F1B's activation memory (chunks are 1/(2W) of a
 * stage). */
#include <stdlib.h>

#include "sim/sim.h"

int sim_gen_wave(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                 util_err *e)
{
    int S = o->n_stages;
    int *cap = util_malloc(sizeof(int) * (size_t)S);
    for (int s = 0; s < S; s++) cap[s] = S - s < o->n_mb ? S - s : o->n_mb;
    int rc = sim_order_greedy(ir, o, c, SIM_POL_1F1B, cap, e);
    free(cap);
    return rc;
}
