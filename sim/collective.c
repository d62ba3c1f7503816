/* Data-parallel gradient all-reduce as real transfers: for every stage,
 * a ring over its replicas (data-parallel ranks, and Chimera's two
 * directions), reduce-scatter then all-gather, 2(R-1) steps in which
 * every member sends bytes/R to the next. Each step is a send/receive
 * pair on the collective stream, so the steps share links max-min with
 * the pipeline's transfers; lanes run one ring per tensor-parallel rank.
 * One bucket per stage and minibatch, started by the stage's last
 * backward (W or BW) on each member: later stages finish their backward
 * first, so their all-reduce overlaps the backward of earlier ones.
 * Before it, the stages of one replica that hold copies of a tied table
 * (embedding and LM head) exchange their gradients of it, as Megatron-LM
 * all-reduces the embedding's gradient over its first and last stage.
 * Folded (one replica simulated for all), the ring's steps are one
 * transfer repeated 2(R-1) times: two tasks per ring, not 4(R-1). */
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

/* The last backward (W or BW) and the optimizer step of every stage per
 * minibatch, in each device's list order; pos[id] is a task's index in its
 * device's list. */
static void stage_marks(const sim_ir *ir, int *lastb, int *opt, int *pos)
{
    const int N = ir->n_stages, K = ir->n_minibatches;
    for (int i = 0; i < K * N; i++) lastb[i] = opt[i] = -1;
    for (int d = 0; d < ir->n_devices; d++)
        for (int j = 0; j < ir->dlen[d]; j++) {
            int id = ir->dlist[d][j];
            if (pos) pos[id] = j;
            const sim_task *t = &ir->tasks[id];
            if (t->stream != SIM_STREAM_COMPUTE || t->stage < 0) continue;
            size_t k = (size_t)t->minibatch * N + t->stage;
            if (t->kind == SIM_W || t->kind == SIM_BW) lastb[k] = id;
            else if (t->kind == SIM_OPT) opt[k] = id;
        }
}

void sim_add_tied(sim_ir *ir, const sim_costs *c)
{
    const int N = ir->n_stages, S = c->n_model_stages, K = ir->n_minibatches;
    int mem[64], nm = 0;
    for (int s = 0; s < S && nm < 64; s++)
        if (c->stage[s].tied_bytes > 0) mem[nm++] = s;
    /* Without a flush each stage updates alone: waiting for the other
     * copy's gradient would stall the head's device every minibatch (and
     * can deadlock list-scheduled orders), so asynchronous schedules train
     * the copies apart. */
    if (nm < 2 || K > 1) return;
    int R = N / S, lanes = c->tp > 1 ? c->tp : 1;
    int *lastb = util_malloc(sizeof(int) * (size_t)K * N);
    int *opt = util_malloc(sizeof(int) * (size_t)K * N);
    stage_marks(ir, lastb, opt, NULL);
    /* new tasks go right after an anchor in their device's list */
    int n0 = ir->n_tasks, cap = 2 * K * R * nm * nm + 1, na = 0;
    int *anchor = util_malloc(sizeof(int) * (size_t)cap);
    int *task = util_malloc(sizeof(int) * (size_t)cap);
    for (int k = 0; k < K; k++)
        for (int r = 0; r < R; r++)
            for (int i = 0; i < nm; i++)
                for (int j = 0; j < nm; j++) {
                    if (i == j) continue;
                    int v = r * S + mem[i], w = r * S + mem[j];
                    int lv = lastb[(size_t)k * N + v];
                    int lw = lastb[(size_t)k * N + w];
                    if (lv < 0 || lw < 0) continue; /* validate names it */
                    sim_task x = {0};
                    x.stream = SIM_STREAM_SEND;
                    x.comm = SIM_COMM_EMB;
                    x.grad = 1;
                    x.device = ir->stage_device[v];
                    x.stage = v;
                    x.stage2 = w;
                    x.mb = -1;
                    x.minibatch = k;
                    x.version = -1;
                    x.lanes = lanes;
                    x.bytes = c->stage[mem[i]].tied_bytes;
                    int rid;
                    int sid = sim_ir_transfer(ir, &x, ir->stage_device[w],
                                              &rid);
                    sim_ir_dep(ir, sid, lv);
                    int o = opt[(size_t)k * N + w];
                    if (o >= 0) sim_ir_dep(ir, o, rid);
                    /* and the sender's update waits until its gradient
                     * has left (it clears the gradient) */
                    o = opt[(size_t)k * N + v];
                    if (o >= 0) sim_ir_dep(ir, o, sid);
                    anchor[na] = lv, task[na++] = sid;
                    anchor[na] = lw, task[na++] = rid;
                }
    sim_ir_place_after(ir, n0, anchor, task, na);
    free(anchor);
    free(task);
    free(lastb);
    free(opt);
}

typedef struct grp { int key, k, s; } grp;

static int grp_cmp(const void *a, const void *b)
{
    const grp *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    if (x->k != y->k) return x->k < y->k ? -1 : 1;
    return (y->s > x->s) - (y->s < x->s);
}

void sim_add_allreduce(sim_ir *ir, const sim_costs *c)
{
    /* Rs rings members are simulated (replicas, and Chimera's two
     * pipelines); folded, they stand for Rs x fold: the last member's
     * step sends to the first member of the next replica (the engine
     * routes it there) and the first member's receive is the one from the
     * previous replica, which by symmetry ends at the same time. With one
     * member (Rs = 1) each step waits for the one before on the same
     * device and nothing else, so the chain is one send repeated
     * (sim_task.steps), timed by the engine exactly as the chain of pairs
     * would be. */
    const int Rs = c->replicas, S = c->n_model_stages, K = ir->n_minibatches;
    const int R = Rs * (c->fold > 1 ? c->fold : 1);
    const int N = ir->n_stages;
    if (R <= 1) return;
    UTIL_NEVER(N != Rs * S);
    int *lastb = util_malloc(sizeof(int) * (size_t)K * N);
    int *opt = util_malloc(sizeof(int) * (size_t)K * N);
    int *pos = util_malloc(sizeof(int) * (size_t)(ir->n_tasks + 1));
    stage_marks(ir, lastb, opt, pos);
    /* tied-embedding transfers of a stage (sim_add_tied) its ring starts
     * after: the copies it receives, and its own sends (they read the
     * gradient the ring reduces); tied_off/tied CSR per (minibatch,
     * stage) */
    int *tied_off = util_calloc((size_t)K * N + 1, sizeof(int));
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->comm != SIM_COMM_EMB) continue;
        int v = t->kind == SIM_RECV ? t->stage2 : t->stage;
        tied_off[(size_t)t->minibatch * N + v + 1]++;
    }
    for (int i = 0; i < K * N; i++) tied_off[i + 1] += tied_off[i];
    int *tied = util_malloc(sizeof(int) * (size_t)(tied_off[K * N] + 1));
    int *tfill = util_malloc(sizeof(int) * (size_t)(K * N + 1));
    memcpy(tfill, tied_off, sizeof(int) * (size_t)(K * N + 1));
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->comm != SIM_COMM_EMB) continue;
        int v = t->kind == SIM_RECV ? t->stage2 : t->stage;
        tied[tfill[(size_t)t->minibatch * N + v]++] = i;
    }
    free(tfill);
    int *last_send = util_malloc(sizeof(int) * (size_t)R);
    int lanes = c->tp > 1 ? c->tp : 1;
    int *prev = util_malloc(sizeof(int) * (size_t)R);
    int *cur = util_malloc(sizeof(int) * (size_t)R);
    /* One global order of the rings, so the collective streams of the
     * members agree (no ring waits behind another that waits for it):
     * by where the first replica's last backward sits in its device's
     * compute order, then minibatch, then deepest stage first. Without a
     * flush an optimizer step waits for its ring inside the compute
     * stream, so rings must follow the compute order. */
    grp *g = util_malloc(sizeof(grp) * (size_t)K * S);
    for (int k = 0; k < K; k++)
        for (int s = 0; s < S; s++) {
            int lb = lastb[(size_t)k * N + s];
            g[k * S + s] = (grp){lb >= 0 ? pos[lb] : 0, k, s};
        }
    qsort(g, (size_t)K * S, sizeof *g, grp_cmp);
    for (int gi = 0; gi < K * S; gi++) {
        int k = g[gi].k, s = g[gi].s;
        {
            double bytes = c->stage[s].grad_bytes / R * lanes;
            int steps = 2 * (R - 1), pairs = Rs == 1 ? 1 : steps;
            for (int st = 0; st < pairs; st++) {
                for (int r = 0; r < Rs; r++) {
                    int v = r * S + s, w = ((r + 1) % Rs) * S + s;
                    sim_task x = {0};
                    x.stream = SIM_STREAM_COLL;
                    x.comm = SIM_COMM_DP;
                    x.grad = 1;
                    x.device = ir->stage_device[v];
                    x.stage = v;
                    x.stage2 = w;
                    x.mb = st;
                    x.minibatch = k;
                    x.version = -1;
                    x.lanes = lanes;
                    x.steps = pairs == 1 ? steps : 1;
                    x.bytes = bytes;
                    int rid;
                    int sid = sim_ir_transfer(ir, &x, ir->stage_device[w],
                                              &rid);
                    /* a member forwards what it received (reduced) */
                    int dep = st ? prev[r] : lastb[(size_t)k * N + v];
                    if (dep >= 0) sim_ir_dep(ir, sid, dep);
                    for (int q = tied_off[(size_t)k * N + v];
                         !st && q < tied_off[(size_t)k * N + v + 1]; q++)
                        sim_ir_dep(ir, sid, tied[q]);
                    cur[(r + 1) % Rs] = rid;
                    last_send[r] = sid;
                }
                int *tmp = prev; prev = cur; cur = tmp;
            }
            /* the update waits for the ring's last receive, and for its
             * last send to have read the gradient it clears */
            for (int r = 0; r < Rs; r++) {
                int o = opt[(size_t)k * N + r * S + s];
                if (o >= 0) sim_ir_dep(ir, o, prev[r]);
                if (o >= 0) sim_ir_dep(ir, o, last_send[r]);
            }
        }
    }
    free(g);
    free(last_send);
    free(tied);
    free(tied_off);
    free(pos);
    free(prev);
    free(cur);
    free(lastb);
    free(opt);
}
