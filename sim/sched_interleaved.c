/* Megatron-LM's interleaved 1F1B (Narayanan et al., SC 2021): each device
 * holds v chunks, chunk k of device r being stage k*p + r (looped).
 * Forwards go in rounds of microbatches through chunk 0, then chunk 1,
 * ...; backwards through the chunks in reverse. Device r first runs
 * (v-1)*n + 2(p-1-r) forwards (n = microbatches per round), then one
 * forward one backward, then the remaining backwards. Megatron's rounds
 * are p microbatches (m a multiple of p); PyTorch's
 * ScheduleInterleaved1F1B relaxes this to max(1, m / p) rounds of equal
 * size (pytorch#129597), which is what this generator does: identical
 * when p divides m. With m = p Megatron runs every forward first, PyTorch
 * keeps the warm-up above: on uniform stages the same time, and later
 * devices hold fewer microbatches; both are simulated and the better
 * kept (sim_order_best). */
#include <stdlib.h>

#include "sim/sim.h"

/* Candidate k: 0 PyTorch's warm-up, 1 every forward first when m = p
 * (Megatron) */
static int order(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                 int all_first, util_err *e)
{
    (void)c;
    int p = o->pp, v = o->n_stages / p, m = o->n_mb;
    int rounds = m / p > 1 ? m / p : 1, per = m / rounds;
    if (v < 1 || m % rounds)
        return util_errf(e, UTIL_EXIT_USAGE, "schedule interleaved: %d "
                         "microbatches do not split into rounds on %d "
                         "devices", m, p);
    int total = m * v;
    int *fn = util_calloc((size_t)v, sizeof(int));
    int *bn = util_calloc((size_t)v, sizeof(int));
    for (int r = 0; r < p; r++) {
        for (int k = 0; k < v; k++) fn[k] = bn[k] = 0;
        int warm = all_first ? total : (v - 1) * per + 2 * (p - 1 - r);
        if (warm > total) warm = total;
        for (int step = 0; step < 2 * total; step++) {
            /* warm-up forwards, then F/B pairs, then backwards */
            int isf, k;
            if (step < warm) { isf = 1; k = step; }
            else if (step < warm + 2 * (total - warm)) {
                int j = step - warm;
                isf = !(j & 1);
                k = isf ? warm + j / 2 : j / 2;
            } else { isf = 0; k = step - total; }
            int chunk = (k / per) % v;
            if (!isf) chunk = v - 1 - chunk;
            int s = chunk * p + r;
            if (isf) {
                sim_ir_compute(ir, SIM_F, s, fn[chunk]++, 0, 0);
            } else {
                int mb = bn[chunk]++;
                if (o->recompute) sim_ir_compute(ir, SIM_RECOMP, s, mb, 0, 0);
                if (o->split_bw) {
                    sim_ir_compute(ir, SIM_B, s, mb, 0, 0);
                    sim_ir_compute(ir, SIM_W, s, mb, 0, 0);
                } else {
                    sim_ir_compute(ir, SIM_BW, s, mb, 0, 0);
                }
            }
        }
    }
    free(fn);
    free(bn);
    return 0;
}

int sim_gen_interleaved(sim_ir *ir, const sim_sched_opts *o,
                        const sim_costs *c, util_err *e)
{
    return sim_order_best(ir, o, c, o->n_mb == o->pp ? 2 : 1, order, e);
}
