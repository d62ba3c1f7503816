/* Private to the engine (engine.c, memory.c): its state, laid out so the
 * event loop touches flat arrays only. */
#ifndef SLUICE_SIM_ENGINE_INT_H
#define SLUICE_SIM_ENGINE_INT_H

#include "sim/sim.h"

/* A step of a task's memory ramp: delta bytes at time t. */
typedef struct sim_mem_step {
    int64_t t;
    uint64_t seq;           /* the event's it stands for (heap order) */
    double delta;
    int32_t task;
} sim_mem_step;

typedef struct sim_ev {
    int64_t t;
    uint64_t seq;
    int32_t id;         /* task end; -1: flow check */
    uint32_t epoch;
} sim_ev;

struct sim_engine {
    const sim_ir *ir;
    const sim_costs *c;
    sim_run_opts opts;
    int n, nd, ns, nq;      /* tasks, devices, stages, device*stream queues */
    int K;                  /* minibatches */
    /* static, per task */
    int64_t *dur;
    double *mem_start, *mem_end;
    /* what a forward keeps (> 0) or a backward frees (< 0) as it runs:
     * a SIM_MEM_STEPS-th of it at each of its stage's step times
     * (sim_stage_cost.mem_f, mem_b), a backward's last at its end */
    double *mem_ramp;
    int32_t *nxt;           /* next task in the same (device, stream) */
    int32_t *head0;         /* first task per queue */
    /* sends: one route per lane, lanes at lane_off[i]..lane_off[i+1] of
     * route/route_len (a route NULL when the lane needs no link) */
    int *lane_off;
    const int **route;
    int *route_len;
    int64_t *lat_ns;        /* per task: the slowest lane's latency */
    int *fold_routes;       /* folded replicas: routes over link orbits
                             * (sim_costs.fold_rep), owned */
    int32_t *lanes_left;    /* run state: lanes of a send still moving */
    int32_t *steps_left;    /* run state: steps of a repeated transfer
                             * still to run, this one included */
    int64_t *tp_ns;         /* per task: tensor-parallel part of its time */
    /* static, per device / stage */
    double *static_bytes;
    int32_t *pending0;      /* [stage*(K+2)+version] tasks using it */
    int vstride;
    /* run state */
    int32_t *unmet, *head;
    uint8_t *busy;
    int64_t *start, *end, *fstart;
    sim_ev *heap;
    int nheap, capheap;
    uint64_t seq;
    int64_t now;
    double *mem_cur;
    /* devices whose memory changed at `now` (sim_mem_settle), and the
     * last task that added to each */
    int32_t *mem_dirty, *mem_task;
    int n_dirty;
    /* ramp steps still to come, per device in time order: each applied
     * where its device's memory next changes, or at the run's end, at
     * its own time (sim_mem_step_add): no event of their own */
    sim_mem_step **mstep;
    int *mstep_n, *mstep_cap;
    int mem_late;           /* a point was recorded after a later one */
    /* the order an instant's changes had as events: the event being
     * handled (cur_seq), each dirty device's first change (mem_seq) and
     * the named overflow's (oom_seq), so that of several devices over
     * at one instant the first changed is named, as with events */
    uint64_t cur_seq, oom_seq, *mem_seq;
    int32_t *pending;
    int32_t *cur_ver, *live;
    int32_t *inflight;
    /* flows */
    int nflow;
    int32_t *flow_task;     /* active flows: send task ids */
    double *flow_rem, *flow_rate;
    int64_t flow_last;
    const int **flow_route;
    int *flow_rlen;
    uint32_t flow_epoch;
    double *link_cap;
    int32_t *link_use;      /* active flows per directed link */
    int n_dl;               /* directed links; then one resource per NVMe
                             * drive (n_res in all): reads and writes share
                             * the drive, so both cross it */
    int n_res;
    double *lane_scale;     /* bytes a lane moves per byte of its task: a
                             * drive's read over write bandwidth for NVMe
                             * writes, so the drive's one resource times
                             * both; else 1 */
    int *xroute;            /* NVMe lanes' routes (route points here) */
    sim_maxmin_scratch mm;
    /* results */
    sim_dev_stats *dev;
    int *max_inflight, *max_versions;
    sim_mem_point *mem;
    int n_mem, cap_mem;
    int oom, oom_task;
    int64_t oom_t;
    int64_t events;
    int64_t *scratch_k, *scratch_dw; /* stats: per minibatch, per device */
};

/* memory.c: fills mem_start/mem_end/mem_ramp, static_bytes and
 * pending0. */
void sim_mem_setup(sim_engine *e);
/* memory.c: applies a delta on device d at the engine's time. */
void sim_mem_add(sim_engine *e, int d, double delta, int task);
/* memory.c: before the engine's time moves on, the devices' memory at
 * `now` (every change of that instant applied: what ends then frees its
 * memory before what starts then, whatever order the events came in)
 * counts toward their peaks, capacity checks and recorded points. */
void sim_mem_settle(sim_engine *e);
/* memory.c: a ramp step of task on device d at time t >= now, applied
 * with d's next change at or after t (sim_mem_add), else by
 * sim_mem_steps_flush. */
void sim_mem_step_add(sim_engine *e, int d, int64_t t, double delta,
                      int task);
/* memory.c: applies every device's steps at or before `upto`, each at
 * its time (the run's end: all of them; an overflow that stops the run:
 * those before it, so the first is named), and puts the recorded points
 * back in time order. */
void sim_mem_steps_flush(sim_engine *e, int64_t upto);
/* memory.c: version bookkeeping at the end of a stage task / an OPT. */
void sim_mem_task_end(sim_engine *e, int id);

#endif
