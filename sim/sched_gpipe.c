/* GPipe (Huang et al. 2019): fill and drain. Every stage runs the forwards
 * of all m microbatches, then their backwards (in microbatch order, as
 * PyTorch's ScheduleGPipe does), then the flush. With recomputation each
 * backward is preceded by a recompute of its forward. */
#include "sim/sim.h"

void sim_gen_gpipe(sim_ir *ir, const sim_sched_opts *o)
{
    for (int s = 0; s < o->n_stages; s++) {
        for (int mb = 0; mb < o->n_mb; mb++)
            sim_ir_compute(ir, SIM_F, s, mb, 0, 0);
        for (int mb = 0; mb < o->n_mb; mb++) {
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
