/* Data-parallel gradient all-reduce as real transfers: for every stage,
 * a ring over its replicas (data-parallel ranks, and Chimera's two
 * directions), reduce-scatter then all-gather, 2(R-1) steps in which
 * every member sends bytes/R to the next. Each step is a send/receive
 * pair on the collective stream, so the steps share links max-min with
 * the pipeline's transfers; lanes run one ring per tensor-parallel rank.
 * One bucket per stage and minibatch, started by the stage's last
 * backward (W or BW) on each member: later stages finish their backward
 * first, so their all-reduce overlaps the backward of earlier ones.
 * Folded (one replica simulated for all), the ring's steps are one
 * transfer repeated 2(R-1) times: two tasks per ring, not 4(R-1). */
#include <stdlib.h>

#include "sim/sim.h"

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
    for (int i = 0; i < K * N; i++) lastb[i] = opt[i] = -1;
    for (int d = 0; d < ir->n_devices; d++)
        for (int j = 0; j < ir->dlen[d]; j++) {
            int id = ir->dlist[d][j];
            pos[id] = j;
            const sim_task *t = &ir->tasks[id];
            if (t->stream != SIM_STREAM_COMPUTE || t->stage < 0) continue;
            size_t k = (size_t)t->minibatch * N + t->stage;
            if (t->kind == SIM_W || t->kind == SIM_BW) lastb[k] = id;
            else if (t->kind == SIM_OPT) opt[k] = id;
        }
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
                    x.kind = SIM_SEND;
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
                    x.peer = -1;
                    int sid = sim_ir_add(ir, &x);
                    x.kind = SIM_RECV;
                    x.stream = SIM_STREAM_RECV;
                    x.device = ir->stage_device[w];
                    int rid = sim_ir_add(ir, &x);
                    ir->tasks[sid].peer = rid;
                    ir->tasks[rid].peer = sid;
                    sim_ir_dep(ir, rid, sid);
                    /* a member forwards what it received (reduced) */
                    int dep = st ? prev[r] : lastb[(size_t)k * N + v];
                    if (dep >= 0) sim_ir_dep(ir, sid, dep);
                    cur[(r + 1) % Rs] = rid;
                }
                int *tmp = prev; prev = cur; cur = tmp;
            }
            for (int r = 0; r < Rs; r++) {
                int o = opt[(size_t)k * N + r * S + s];
                if (o >= 0) sim_ir_dep(ir, o, prev[r]);
            }
        }
    }
    free(g);
    free(pos);
    free(prev);
    free(cur);
    free(lastb);
    free(opt);
}
