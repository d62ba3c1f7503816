/* `sluice calibrate`'s measurements: every op of GPT-family layers over a
 * range of widths, sequence lengths and microbatches (the GEMM shapes the
 * model zoo produces, and the memory-bound ops beside them), AdamW steps
 * over sizes, copies between two devices' threads and ring all-reduces
 * over groups of them, MPI messages under mpirun, and the runtime's cost
 * per task from a short pipeline run. Each microbenchmark runs the
 * executor's kernels on the core of device 0 until it has a median of
 * enough repeats. The fits are in calib_fit.c. */
#include "exec/exec.h"
#include "exec/runtime.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------- timing */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

#define MAX_REPS 400

/* Median time of fn: one call to warm caches, then repeats until min_ns
 * have passed (at least 3, at most MAX_REPS). */
static double median_ns(void (*fn)(void *), void *ctx, double min_ns)
{
    int64_t t[MAX_REPS], sum = 0;
    int n = 0;
    fn(ctx);
    while (n < MAX_REPS && (n < 3 || (double)sum < min_ns)) {
        int64_t t0 = (int64_t)exec_now_ns();
        fn(ctx);
        t[n] = (int64_t)exec_now_ns() - t0;
        sum += t[n++];
    }
    qsort(t, (size_t)n, sizeof *t, cmp_i64);
    return n % 2 ? (double)t[n / 2] : 0.5 * (double)(t[n / 2 - 1] + t[n / 2]);
}

static int pin_self(int core, cpu_set_t *old)
{
    if (old) pthread_getaffinity_np(pthread_self(), sizeof *old, old);
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(core, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* ---------------------------------------------------------------- ops */

/* Buffers for one layer's ops at one size; every kernel reads and writes
 * its own, so repeats never feed each other. */
typedef struct obench {
    int B, T, N, C, NH, F, V;
    float *x, *y, *dx, *dy, *w, *dw, *a, *bb, *db;
    int *tok, *tgt;
    prof_op_role role;
    sim_kind kind;
    size_t n_opt;
} obench;

static void fill(float *p, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(*seed >> 11) / 9007199254740992.0 - 0.5) *
               0.2f;
    }
}

/* The kernels the executor runs for one op's part (stage_gpt.c, one
 * tensor-parallel rank). */
static void ob_run(void *ctx)
{
    obench *o = ctx;
    int B = o->B, T = o->T, N = o->N, C = o->C, NH = o->NH, F = o->F,
        V = o->V;
    int K = C, OC = C;
    const float *bias = o->bb;
    switch (o->role) {
    case PROF_ROLE_QKV: OC = 3 * C; break;
    case PROF_ROLE_MLP_UP: OC = F; break;
    case PROF_ROLE_MLP_DOWN: K = F; break;
    case PROF_ROLE_LM_HEAD: OC = V; bias = NULL; break;
    default: break;
    }
    sim_kind k = o->kind;
    switch (o->role) {
    case PROF_ROLE_EMBED:
        if (k == SIM_F) kern_embed_forward(o->y, o->tok, o->w, o->bb, B, T, C);
        else kern_embed_backward(o->dw, o->db, o->dy, o->tok, B, T, C);
        break;
    case PROF_ROLE_NORM:
        if (k == SIM_F)
            kern_layernorm_forward(o->y, o->a, o->a + N, o->x, o->w, o->bb, N,
                                   C);
        else if (k == SIM_B)
            kern_layernorm_backward_input(o->dx, o->dy, o->x, o->w, o->a,
                                          o->a + N, N, C);
        else
            kern_layernorm_backward_weight(o->dw, o->db, o->dy, o->x, o->a,
                                           o->a + N, N, C);
        break;
    case PROF_ROLE_QKV:
    case PROF_ROLE_ATTN_OUT:
    case PROF_ROLE_MLP_UP:
    case PROF_ROLE_MLP_DOWN:
    case PROF_ROLE_LM_HEAD:
        if (k == SIM_F)
            kern_linear_forward(o->y, o->x, o->w, bias, N, K, OC);
        else if (k == SIM_B)
            kern_linear_backward_input(o->dx, o->dy, o->w, N, K, OC);
        else
            kern_linear_backward_weight(o->dw, bias ? o->db : NULL, o->dy,
                                        o->x, N, K, OC);
        break;
    case PROF_ROLE_ATTN_SCORES:
        if (k == SIM_F) kern_attn_scores_forward(o->y, o->x, B, T, C, NH);
        else kern_attn_scores_backward(o->dx, o->dy, o->x, B, T, C, NH);
        break;
    case PROF_ROLE_ATTN_SOFTMAX:
        if (k == SIM_F) kern_attn_softmax_forward(o->y, o->x, B, T, NH);
        else kern_attn_softmax_backward(o->dx, o->dy, o->y, B, T, NH);
        break;
    case PROF_ROLE_ATTN_CONTEXT:
        if (k == SIM_F)
            kern_attn_context_forward(o->y, o->x, o->w, B, T, C, NH);
        else
            kern_attn_context_backward(o->dx, o->dw, o->dy, o->x, o->w, B, T,
                                       C, NH);
        break;
    case PROF_ROLE_RESIDUAL:
        if (k == SIM_F) kern_residual_forward(o->y, o->x, o->w, (size_t)N * C);
        else kern_residual_backward(o->dx, o->dw, o->dy, (size_t)N * C);
        break;
    case PROF_ROLE_MLP_ACT:
        if (k == SIM_F) kern_gelu_forward(o->y, o->x, (size_t)N * F);
        else kern_gelu_backward(o->dx, o->x, o->dy, (size_t)N * F);
        break;
    case PROF_ROLE_LOSS:
        if (k == SIM_F)
            kern_softmax_xent_forward(o->y, o->a, o->x, o->tgt, N, V);
        else
            kern_softmax_xent_backward(o->dx, o->a, o->tgt, 1.0f / N, N, V);
        break;
    default:
        break;
    }
}

static void ob_opt(void *ctx)
{
    obench *o = ctx;
    kern_adamw_update(o->w, o->x, o->y, o->dw, o->n_opt, 1e-4f, 0.9f, 0.95f,
                      1e-8f, 0.1f, 1.0f, 1);
}

/* The parts of an op the executor runs: F, the input gradient (every op
 * with an input but the embedding), the weight gradient (ops with
 * weights). */
static int runs(prof_op_role r, sim_kind k)
{
    if (k == SIM_F) return 1;
    if (k == SIM_B) return r != PROF_ROLE_EMBED;
    switch (r) {
    case PROF_ROLE_EMBED: case PROF_ROLE_NORM: case PROF_ROLE_QKV:
    case PROF_ROLE_ATTN_OUT: case PROF_ROLE_MLP_UP: case PROF_ROLE_MLP_DOWN:
    case PROF_ROLE_LM_HEAD:
        return 1;
    default:
        return 0;
    }
}

/* One size of layer to measure. */
typedef struct layer_size {
    int C, T, mbs, V, hs;
} layer_size;

static const layer_size full_sizes[] = {
    {64, 128, 1, 256, 32},   {64, 128, 4, 256, 32},
    {128, 64, 1, 256, 32},   {128, 128, 4, 256, 32},
    {256, 128, 1, 256, 32},  {256, 128, 4, 256, 32},
    {256, 64, 2, 256, 32},   {256, 256, 1, 256, 32},
    {384, 128, 2, 256, 64},  {512, 128, 1, 8192, 64},
    {512, 256, 2, 256, 64},  {768, 128, 1, 256, 64},
    {768, 64, 4, 256, 64},   {1024, 128, 1, 256, 64},
};
static const layer_size quick_sizes[] = {
    {64, 32, 1, 256, 32}, {128, 64, 1, 256, 32}, {128, 32, 2, 256, 32},
};

typedef struct samples {
    exec_calib_sample *s;
    int n, cap;
} samples;

static void push(samples *v, const prof_op *op, int mbs, sim_kind k,
                 double ns)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 64;
        v->s = util_realloc(v->s, sizeof *v->s * (size_t)v->cap);
    }
    exec_calib_sample *s = &v->s[v->n++];
    memset(s, 0, sizeof *s);
    s->op = *op;
    s->mbs = mbs;
    s->kind = k;
    s->ns = ns;
}

/* Whether an op of the same kind and costs was measured at this size. */
static int seen(const samples *v, int from, const prof_op *op, int mbs,
                sim_kind k)
{
    for (int i = from; i < v->n; i++) {
        const exec_calib_sample *s = &v->s[i];
        if (s->mbs == mbs && s->kind == k && s->op.kind == op->kind &&
            s->op.fwd_flops == op->fwd_flops &&
            s->op.bytes_read == op->bytes_read &&
            s->op.bytes_written == op->bytes_written &&
            s->op.n_gemm == op->n_gemm &&
            !memcmp(s->op.gemm, op->gemm, sizeof op->gemm))
            return 1;
    }
    return 0;
}

static int measure_layers(const exec_calib_opts *o, samples *v, util_err *e)
{
    const layer_size *sz = o->quick ? quick_sizes : full_sizes;
    int nsz = o->quick ? (int)(sizeof quick_sizes / sizeof *quick_sizes)
                       : (int)(sizeof full_sizes / sizeof *full_sizes);
    double min_ns = o->quick ? 2e6 : 25e6;
    prof_model_spec base;
    if (prof_model_spec_get("gpt-mini", &base, e)) return -1;
    uint64_t seed = 0x5eed;
    for (int z = 0; z < nsz; z++) {
        if (o->stop && *o->stop)
            return util_errf(e, UTIL_EXIT_FAIL, "stopped");
        const layer_size *L = &sz[z];
        prof_model_spec s = base;
        snprintf(s.name, sizeof s.name, "calib-%d", z);
        s.hidden = L->C;
        s.heads = L->C / L->hs;
        s.kv_heads = s.heads;
        s.head_dim = L->hs;
        s.ffn = 4 * L->C;
        s.vocab = L->V;
        s.seq_len = s.max_pos = L->T;
        s.layers = 1;
        s.dtype = PROF_DT_FP32;
        prof_model *m = prof_model_build(&s, e);
        if (!m) return -1;
        obench b = {.B = L->mbs, .T = L->T, .C = L->C, .NH = s.heads,
                    .F = s.ffn, .V = L->V};
        b.N = b.B * b.T;
        size_t N = (size_t)b.N, C = (size_t)b.C, E = N * 3 * C;
        size_t cand[] = {N * (size_t)b.F, N * (size_t)b.V,
                         (size_t)b.B * b.NH * b.T * b.T, (size_t)b.V * C,
                         (size_t)b.F * C, 3 * C * C, 2 * N + N * (size_t)b.V};
        for (size_t i = 0; i < sizeof cand / sizeof *cand; i++)
            if (cand[i] > E) E = cand[i];
        float **bufs[] = {&b.x, &b.y, &b.dx, &b.dy, &b.w, &b.dw, &b.a};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
            *bufs[i] = util_malloc(sizeof(float) * E);
            fill(*bufs[i], E, &seed);
        }
        size_t nb = (size_t)b.T * C + 4 * C + (size_t)b.V + (size_t)b.F;
        b.bb = util_malloc(sizeof(float) * nb);
        b.db = util_malloc(sizeof(float) * nb);
        fill(b.bb, nb, &seed);
        fill(b.db, nb, &seed);
        b.tok = util_malloc(sizeof(int) * N);
        b.tgt = util_malloc(sizeof(int) * N);
        for (size_t i = 0; i < N; i++) {
            b.tok[i] = (int)((i * 7919u) % (unsigned)b.V);
            b.tgt[i] = (int)((i * 104729u + 3) % (unsigned)b.V);
        }
        int from = v->n;
        for (int i = 0; i < m->n_ops; i++) {
            const prof_op *op = &m->ops[i];
            for (int k = SIM_F; k <= SIM_W; k++) {
                if (!runs(op->role, (sim_kind)k) ||
                    seen(v, from, op, L->mbs, (sim_kind)k))
                    continue;
                b.role = op->role;
                b.kind = SIM_F;
                ob_run(&b);         /* what the backward reads */
                b.kind = (sim_kind)k;
                push(v, op, L->mbs, (sim_kind)k, median_ns(ob_run, &b, min_ns));
            }
        }
        /* AdamW over a layer's parameters and a quarter of them */
        for (int q = 0; q < 2; q++) {
            prof_op op = {0};
            op.params = (double)(12 * C * C) / (q ? 4 : 1);
            b.n_opt = (size_t)op.params;
            if (b.n_opt > E) b.n_opt = E;
            op.params = (double)b.n_opt;
            snprintf(op.name, sizeof op.name, "adamw");
            push(v, &op, 1, SIM_OPT, median_ns(ob_opt, &b, min_ns));
        }
        if (o->log)
            fprintf(o->log, "  ops: hidden %d, sequence %d, microbatch %d%s: "
                    "%d samples\n", L->C, L->T, L->mbs,
                    L->V > 256 ? ", vocabulary 8192" : "", v->n - from);
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(*bufs[i]);
        free(b.bb);
        free(b.db);
        free(b.tok);
        free(b.tgt);
        prof_model_free(m);
    }
    return 0;
}

/* ------------------------------------------------- in-process copies */

/* Two threads on two cores hand a message back and forth as the
 * in-process transport does: copy into a buffer of the receiver's, then
 * wake it. A one-way time is half a round trip. */
typedef struct pingpong {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int turn;               /* whose move: 0 or 1; -1 stop */
    size_t bytes;
    char *buf[2];           /* each side's receive buffer */
    int core[2];
    int rounds;
} pingpong;

static void pp_wait(pingpong *p, int me)
{
    pthread_mutex_lock(&p->mu);
    while (p->turn != me && p->turn != -1) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void pp_pass(pingpong *p, int me)
{
    memcpy(p->buf[!me], p->buf[me], p->bytes);
    pthread_mutex_lock(&p->mu);
    p->turn = !me;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void *pp_peer(void *arg)
{
    pingpong *p = arg;
    pin_self(p->core[1], NULL);
    for (;;) {
        pp_wait(p, 1);
        if (p->turn == -1) break;
        pp_pass(p, 1);
    }
    return NULL;
}

static void pp_round(void *arg)
{
    pingpong *p = arg;
    for (int i = 0; i < p->rounds; i++) {
        pp_pass(p, 0);
        pp_wait(p, 0);
    }
}

static int measure_copies(const exec_calib_opts *o, exec_calib_result *r,
                          util_err *e)
{
    int cores = o->devices > 1 ? 2 : 1;
    pingpong p = {.turn = 0, .core = {0, cores - 1}};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    size_t maxb = o->quick ? (4u << 20) : (64u << 20);
    p.buf[0] = util_calloc(maxb, 1);
    p.buf[1] = util_calloc(maxb, 1);
    pthread_t th;
    cpu_set_t old;
    pin_self(0, &old);
    if (pthread_create(&th, NULL, pp_peer, &p))
        return util_errf(e, UTIL_EXIT_FAIL, "cannot start a thread");
    exec_calib_xfer *x = util_calloc(16, sizeof *x);
    int n = 0;
    for (size_t b = 64; b <= maxb && n < 16; b *= 4) {
        if (o->stop && *o->stop) break;
        p.bytes = b;
        p.rounds = b < 65536 ? 64 : b < (4u << 20) ? 8 : 1;
        double ns = median_ns(pp_round, &p, o->quick ? 2e6 : 20e6);
        x[n++] = (exec_calib_xfer){(double)b, ns / (2.0 * p.rounds)};
    }
    pthread_mutex_lock(&p.mu);
    p.turn = -1;
    pthread_cond_broadcast(&p.cv);
    pthread_mutex_unlock(&p.mu);
    pthread_join(th, NULL);
    pthread_setaffinity_np(pthread_self(), sizeof old, &old);
    free(p.buf[0]);
    free(p.buf[1]);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    r->xfers[PROF_XFER_INPROC] = x;
    r->n_xfers[PROF_XFER_INPROC] = n;
    if (o->stop && *o->stop) return util_errf(e, UTIL_EXIT_FAIL, "stopped");
    return 0;
}

/* A ring all-reduce over g threads (one per core) with the same copies:
 * reduce-scatter then all-gather, 2(g-1) steps of bytes/g, a barrier
 * between steps as the pipeline's ring steps wait for their receive. */
typedef struct ring {
    int g;
    size_t n;               /* floats per member */
    float **data, **inbox;
    pthread_barrier_t bar;
    int core0;
    int reps;
    int64_t ns;
} ring;

typedef struct ring_arg {
    ring *r;
    int me;
} ring_arg;

static void *ring_member(void *arg)
{
    ring_arg *a = arg;
    ring *r = a->r;
    int g = r->g, me = a->me;
    pin_self(me, NULL);
    size_t chunk = (r->n + (size_t)g - 1) / (size_t)g;
    int64_t t0 = 0;
    for (int rep = 0; rep <= r->reps; rep++) {
        pthread_barrier_wait(&r->bar);
        if (rep == 1 && me == 0) t0 = (int64_t)exec_now_ns();
        for (int st = 0; st < 2 * (g - 1); st++) {
            /* send chunk c to the next member */
            int c = ((me - st) % g + g) % g;
            size_t lo = (size_t)c * chunk;
            size_t len = lo >= r->n ? 0 : (r->n - lo < chunk ? r->n - lo
                                                              : chunk);
            memcpy(r->inbox[(me + 1) % g], r->data[me] + lo,
                   len * sizeof(float));
            pthread_barrier_wait(&r->bar);
            int cr = ((me - st - 1) % g + g) % g;
            size_t lr = (size_t)cr * chunk;
            size_t ln = lr >= r->n ? 0 : (r->n - lr < chunk ? r->n - lr
                                                             : chunk);
            float *d = r->data[me] + lr;
            if (st < g - 1)
                for (size_t i = 0; i < ln; i++) d[i] += r->inbox[me][i];
            else
                memcpy(d, r->inbox[me], ln * sizeof(float));
            pthread_barrier_wait(&r->bar);
        }
    }
    if (me == 0) r->ns = ((int64_t)exec_now_ns() - t0) / r->reps;
    return NULL;
}

static void check_ring(const exec_calib_opts *o, exec_calib_result *r)
{
    const prof_calib_link *l = &r->calib.link[PROF_XFER_INPROC];
    int cores = o->devices;
    if (cores > 8) cores = 8;
    for (int g = 2; g <= cores && l->present; g++) {
        ring rg = {.g = g, .n = o->quick ? (1u << 16) : (1u << 20),
                   .reps = o->quick ? 3 : 10};
        rg.data = util_calloc((size_t)g, sizeof *rg.data);
        rg.inbox = util_calloc((size_t)g, sizeof *rg.inbox);
        size_t chunk = (rg.n + (size_t)g - 1) / (size_t)g;
        for (int i = 0; i < g; i++) {
            rg.data[i] = util_calloc(rg.n, sizeof(float));
            rg.inbox[i] = util_calloc(chunk, sizeof(float));
        }
        pthread_barrier_init(&rg.bar, NULL, (unsigned)g);
        pthread_t th[8];
        ring_arg a[8];
        for (int i = 0; i < g; i++) {
            a[i] = (ring_arg){&rg, i};
            pthread_create(&th[i], NULL, ring_member, &a[i]);
        }
        for (int i = 0; i < g; i++) pthread_join(th[i], NULL);
        pthread_barrier_destroy(&rg.bar);
        double bytes = (double)rg.n * sizeof(float);
        double step = l->latency_ns + bytes / g / l->bw_bytes_per_s * 1e9;
        if (r->n_checks < 16)
            r->checks[r->n_checks++] = (exec_calib_check){
                "in-process ring all-reduce", g, bytes, (double)rg.ns,
                2.0 * (g - 1) * step};
        for (int i = 0; i < g; i++) {
            free(rg.data[i]);
            free(rg.inbox[i]);
        }
        free(rg.data);
        free(rg.inbox);
    }
}

/* ------------------------------------------------- the runtime's cost */

/* A run of a tiny model on one device, whose tasks take tens of
 * microseconds: the runtime's share of each step (not in kernels; one
 * device neither waits nor sends) over its tasks is the cost of running
 * one. */
static int measure_runtime(const exec_calib_opts *o, exec_calib_result *r,
                           util_err *e)
{
    sim_plan p;
    sim_plan_init(&p);
    snprintf(p.model, sizeof p.model, "gpt-tiny");
    snprintf(p.hw, sizeof p.hw, "%s x1", o->device);
    p.sched = SIM_SCHED_1F1B;
    p.pp = p.dp = p.tp = 1;
    p.mbs = 1;
    p.n_mb = 16;
    p.n_minibatches = 1;
    prof_model *m = prof_model_load("gpt-tiny", e);
    if (!m) return -1;
    sim_plan_stages(&p, 1);
    p.first_op[0] = 0;
    p.last_op[0] = m->n_ops - 1;
    p.stage_device[0] = 0;
    prof_model_free(m);
    exec_pipe_opts po = {0};
    po.plan_path = "(calibration)";
    po.plan = &p;
    po.data = o->data;
    po.steps = o->quick ? 3 : 8;
    po.adamw = (exec_adamw){1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    po.warmup = -1;
    po.seed = 1;
    po.xport = EXEC_XPORT_INPROC;
    po.stop = o->stop;
    po.fault_worker = -1;
    exec_pipe_result pr;
    int rc = exec_pipe_run(&po, &pr, e);
    sim_plan_free(&p);
    if (rc) return util_err_prefix(e, "runtime cost");
    double it = exec_pipe_iteration_s(&pr, 1, NULL, NULL);
    double share = exec_pipe_overhead(&pr, 1);
    /* compute tasks per worker per step */
    int per = 0;
    for (int t = 0; t < pr.ir->n_tasks; t++)
        per += pr.ir->tasks[t].stream == SIM_STREAM_COMPUTE &&
               pr.ir->tasks[t].device == 0;
    r->task_ns = per > 0 && it > 0 && share > 0 ? share * it * 1e9 / per : 0;
    exec_pipe_result_free(&pr);
    return 0;
}

/* ---------------------------------------------------------- the whole */

static void machine_now(prof_calib *c, const char *device)
{
    prof_machine_this(&c->machine);
    snprintf(c->machine.device, sizeof c->machine.device, "%s",
             !strcmp(device, "cpu") ? "CPU core" : device);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(c->date, sizeof c->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int exec_calibrate(const exec_calib_opts *o, exec_calib_result *r,
                   util_err *e)
{
    memset(r, 0, sizeof *r);
    r->mpi_ranks = 1;
    int64_t t0 = (int64_t)exec_now_ns();
    prof_gpu base;
    if (prof_gpu_get_builtin(o->device, &base, e)) return -1;
    if (base.form != PROF_FORM_CPU)
        return util_errf(e, UTIL_EXIT_USAGE, "calibrating %s needs that GPU "
                         "and the CUDA backend (bin/sluice-cuda, built by "
                         "make cuda); this build measures CPU devices "
                         "(--hw cpu xN)", o->device);
    /* MPI first: the other ranks leave once it is measured */
    if (exec_mpi_launched()) {
        int rank = 0, size = 1;
        if (exec_mpi_init(&rank, &size, e)) return -1;
        r->mpi_rank = rank;
        r->mpi_ranks = size;
        int rc = 0;
        if (size > 1) {
            exec_calib_xfer *x = util_calloc(16, sizeof *x);
            int n = 0;
            rc = exec_mpi_calibrate(o->quick, x, &n, r->checks, &r->n_checks,
                                    e);
            r->xfers[PROF_XFER_MPI] = x;
            r->n_xfers[PROF_XFER_MPI] = n;
        }
        exec_mpi_finalize();
        if (rc || rank) return rc;
    }
    int saved = kern_get_threads();
    kern_set_threads(1);
    cpu_set_t old;
    pin_self(0, &old);
    samples v = {0};
    if (o->log) fprintf(o->log, "sluice calibrate: ops on core 0\n");
    int rc = measure_layers(o, &v, e);
    pthread_setaffinity_np(pthread_self(), sizeof old, &old);
    r->samples = v.s;
    r->n_samples = v.n;
    prof_calib *c = &r->calib;
    if (!rc) {
        snprintf(c->device, sizeof c->device, "%s", o->device);
        machine_now(c, o->device);
        rc = exec_calib_fit(v.s, v.n, &base, &c->gpu, c->param, &c->n_param,
                            &c->fit_median_err, &c->fit_max_err, e);
        c->fit_samples = v.n;
    }
    if (!rc && o->log)
        fprintf(o->log, "sluice calibrate: copies between cores\n");
    if (!rc) rc = measure_copies(o, r, e);
    for (int x = 0; !rc && x < PROF_XFER_COUNT; x++) {
        if (!r->n_xfers[x]) continue;
        prof_calib_param pl, pb;
        if (exec_calib_fit_link(r->xfers[x], r->n_xfers[x], &c->link[x], &pl,
                                &pb, e)) {
            rc = util_err_prefix(e, "%s link", prof_xfer_name((prof_xfer)x));
            break;
        }
        if (c->n_param + 2 <= PROF_CALIB_MAX_PARAMS) {
            snprintf(pl.name, sizeof pl.name, "%s_latency_us",
                     x == PROF_XFER_MPI ? "mpi" : "copy");
            snprintf(pb.name, sizeof pb.name, "%s_gb_per_s",
                     x == PROF_XFER_MPI ? "mpi" : "copy");
            c->param[c->n_param++] = pl;
            c->param[c->n_param++] = pb;
        }
        /* the MPI all-reduces were measured before the fit */
        for (int i = 0; i < r->n_checks && x == PROF_XFER_MPI; i++) {
            exec_calib_check *k = &r->checks[i];
            double step = c->link[x].latency_ns +
                          k->bytes / k->group / c->link[x].bw_bytes_per_s * 1e9;
            k->predicted_ns = 2.0 * (k->group - 1) * step;
        }
    }
    if (!rc) check_ring(o, r);
    if (!rc && o->log)
        fprintf(o->log, "sluice calibrate: the runtime's cost per task\n");
    if (!rc) rc = measure_runtime(o, r, e);
    kern_set_threads(saved);
    if (!rc) {
        c->gpu.eff.task_ns = r->task_ns;
        char mach[256];
        prof_machine_str(&c->machine, mach, sizeof mach);
        snprintf(c->gpu.source, sizeof c->gpu.source, "calibrated %s on %s: "
                 "%d microbenchmarks fitted, median error %.1f%%; built-in "
                 "figures: %s", c->date, mach, c->fit_samples,
                 100 * c->fit_median_err, base.source);
    }
    r->seconds = ((int64_t)exec_now_ns() - t0) / 1e9;
    return rc;
}

void exec_calib_result_free(exec_calib_result *r)
{
    if (!r) return;
    free(r->samples);
    for (int x = 0; x < PROF_XFER_COUNT; x++) free(r->xfers[x]);
    prof_calib_free(&r->calib);
    memset(r, 0, sizeof *r);
}

int exec_calib_add_run(prof_calib *c, const exec_pipe_result *r,
                       const char *model, int *n_added, util_err *e)
{
    const prof_gpu *g = prof_topo_gpu(r->topo, 0);
    *n_added = 0;
    if (strcmp(g->name, c->device))
        return util_errf(e, UTIL_EXIT_USAGE, "a run on %s cannot calibrate "
                         "%s", g->name, c->device);
    if (!r->op_ns)
        return util_errf(e, UTIL_EXIT_USAGE, "the run timed no ops");
    int tp = r->costs->tp > 1 ? r->costs->tp : 1;
    int mbs = (int)llround(r->costs->samples_per_mb);
    const sim_kind kinds[PROF_PHASES] = {SIM_F, SIM_B, SIM_W};
    for (int i = 0; i < r->model->n_ops; i++) {
        prof_op op = sim_op_tp(&r->model->ops[i], tp);
        for (int ph = 0; ph < PROF_PHASES; ph++) {
            double n = r->op_calls[i * PROF_PHASES + ph];
            if (!(n > 0)) continue;
            char sig[128];
            sim_op_signature(g, &op, mbs, kinds[ph], sig, sizeof sig);
            prof_calib_add_op(c, sig, r->op_ns[i * PROF_PHASES + ph] / n,
                              (long)n, model);
            (*n_added)++;
        }
    }
    if (r->task_rest_n > 0)
        c->gpu.eff.task_ns = fmax(0, r->task_rest_ns / r->task_rest_n);
    return 0;
}
