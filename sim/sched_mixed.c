/* Mixed-pipe (FTPipe, Eliad et al., USENIX ATC 2021): the model is cut
 * into blocks finer than layers and a device may own several stages that
 * are not adjacent. Each device orders its stages' work by list
 * scheduling, forwards first under in-flight caps: 1F1B-like (stage s
 * keeps at most S-s microbatches in flight, PipeDream's stage-depth rule)
 * or GPipe-like (no cap). "mixed" is FTPipe's default asynchronous pipeline
 * (no flush, weight stashing: each microbatch keeps the version its
 * forward used, updates every m microbatches per stage); mixed-1f1b and
 * mixed-gpipe are the synchronous variants with a flush. */
#include <stdlib.h>

#include "sim/sim.h"

int sim_gen_mixed(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                  util_err *e)
{
    int S = o->n_stages;
    int *cap = util_malloc(sizeof(int) * (size_t)S);
    int G = o->n_mb * ir->n_minibatches;
    for (int s = 0; s < S; s++) {
        cap[s] = o->sched == SIM_SCHED_MIXED_GPIPE ? G : S - s;
        if (cap[s] > G) cap[s] = G;
    }
    int rc = sim_order_greedy(ir, o, c, SIM_POL_FFIRST, cap, e);
    free(cap);
    return rc;
}
