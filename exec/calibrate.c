/* `sluice calibrate`'s measurements: every op of GPT-2's and Llama's
 * layers over a range of widths, sequence lengths and microbatches (the
 * GEMM shapes the model zoo produces, and the memory-bound ops beside
 * them: LayerNorm and RMSNorm, GELU and SwiGLU, RoPE) and AdamW
 * steps, each as the executor runs it in training (short runs of small
 * two-layer models with every op timed: caches, allocations and the
 * runtime's own cost per op a task runs, as a real run has them); how
 * much slower ops get when several devices of the host compute at once;
 * the pipeline's and data-parallel ring's transfers and the
 * tensor-parallel all-reduces the executor makes between two devices; MPI
 * messages under mpirun. The fits are in calib_fit.c. */
#include "exec/exec.h"
#include "exec/runtime.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- ops */

/* One size of layer to measure (hs: head size): GPT-2's, or with llama
 * set Llama's (RMSNorm, RoPE, two query heads per key and value head,
 * SwiGLU about 8/3 of the width, no biases). */
typedef struct layer_size {
    int C, T, mbs, V, hs, llama;
} layer_size;

/* Widths, lengths and microbatches that span the zoo's small GPTs and
 * Llamas (and the tokens per microbatch planners pick for them), one with
 * a larger vocabulary; a step of each takes well under a second on a
 * core. */
static const layer_size full_sizes[] = {
    {64, 128, 1, 256, 32, 0},   {64, 256, 4, 256, 32, 0},
    {128, 64, 2, 256, 32, 0},   {128, 128, 8, 256, 32, 0},
    {128, 512, 1, 256, 32, 0},  {192, 256, 4, 256, 32, 0},
    {256, 128, 1, 256, 32, 0},  {256, 128, 4, 256, 32, 0},
    {256, 128, 16, 256, 32, 0}, {256, 256, 2, 256, 32, 0},
    {384, 128, 8, 256, 64, 0},  {512, 64, 4, 256, 64, 0},
    {512, 256, 1, 256, 64, 0},  {512, 128, 1, 8192, 64, 0},
    {768, 128, 2, 256, 64, 0},  {768, 64, 8, 256, 64, 0},
    {1024, 128, 1, 256, 64, 0},
    {64, 256, 2, 256, 32, 1},  {128, 128, 4, 256, 32, 1},
    {256, 64, 8, 256, 64, 1},  {512, 128, 2, 256, 64, 1},
    {768, 64, 4, 256, 64, 1},
};
static const layer_size quick_sizes[] = {
    {64, 32, 1, 256, 32, 0},  {128, 64, 1, 256, 32, 0},
    {128, 32, 2, 256, 32, 0}, {128, 32, 1, 256, 32, 1},
};
/* A GPU's: its ops take microseconds at the CPU's sizes, where the launch
 * alone is measured; these span GPT-2 to GPT-3 XL widths and sequences of
 * 256 to 1024 (the tokens per microbatch its plans pick), with the small
 * end kept so the launch's cost is still seen, one larger vocabulary, two
 * Llamas. */
static const layer_size gpu_sizes[] = {
    {128, 128, 1, 256, 32, 0},    {256, 256, 4, 256, 64, 0},
    {512, 256, 8, 256, 64, 0},    {512, 1024, 2, 256, 64, 0},
    {768, 512, 4, 256, 64, 0},    {768, 1024, 8, 256, 64, 0},
    {1024, 512, 8, 256, 64, 0},   {1024, 1024, 4, 256, 64, 0},
    {1536, 512, 4, 256, 96, 0},   {2048, 512, 4, 256, 128, 0},
    {2048, 1024, 2, 256, 128, 0}, {768, 512, 4, 8192, 64, 0},
    {1024, 512, 4, 256, 64, 1}, {2048, 1024, 2, 256, 128, 1},
};
/* the size whose slowdown with several devices at once is measured */

#define SYN_LAYERS 2

typedef struct samples {
    exec_calib_sample *s;
    double *n;              /* calls behind each sample's mean */
    int count, cap;
    int set;                /* the run new samples come from */
} samples;

/* Adds calls of an op part averaging ns, merged into a sample of the same
 * costs at the same microbatch (the layers of a model are alike). */
static void add_sample(samples *v, const prof_op *op, int mbs, sim_kind k,
                       double ns, double calls)
{
    for (int i = 0; i < v->count; i++) {
        exec_calib_sample *s = &v->s[i];
        if (s->mbs == mbs && s->kind == k && s->op.kind == op->kind &&
            s->op.role == op->role && s->op.fwd_flops == op->fwd_flops &&
            s->op.params == op->params &&
            s->op.bytes_read == op->bytes_read &&
            s->op.bytes_written == op->bytes_written &&
            s->op.n_gemm == op->n_gemm &&
            !memcmp(s->op.gemm, op->gemm, sizeof op->gemm)) {
            s->ns = (s->ns * v->n[i] + ns * calls) / (v->n[i] + calls);
            v->n[i] += calls;
            return;
        }
    }
    if (v->count == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 64;
        v->s = util_realloc(v->s, sizeof *v->s * (size_t)v->cap);
        v->n = util_realloc(v->n, sizeof *v->n * (size_t)v->cap);
    }
    exec_calib_sample *s = &v->s[v->count];
    memset(s, 0, sizeof *s);
    s->op = *op;
    s->mbs = mbs;
    s->kind = k;
    s->ns = ns;
    s->set = v->set;
    v->n[v->count++] = calls;
}

/* A model of SYN_LAYERS layers of one size as a spec file. */
static int write_spec(const char *path, const layer_size *L, util_err *e)
{
    char text[1024];
    int n;
    if (L->llama)
        n = snprintf(text, sizeof text,
            "{\"name\": \"calib-llama-%dx%d\", \"family\": \"llama\", "
            "\"hidden\": %d, \"layers\": %d, \"heads\": %d, "
            "\"kv_heads\": %d, \"ffn\": %d, \"vocab\": %d, "
            "\"seq_len\": %d, \"tied_embeddings\": false, "
            "\"gated_mlp\": true, \"rmsnorm\": true, \"bias\": false, "
            "\"dropout\": false, \"fused_loss\": true, \"batch\": %d, "
            "\"dtype\": \"fp32\", \"source\": \"sluice calibrate: a "
            "Llama of one layer size\"}\n", L->C, L->T, L->C, SYN_LAYERS,
            L->C / L->hs, L->C / L->hs / 2, (8 * L->C / 3 + 7) / 8 * 8, L->V,
            L->T, L->mbs);
    else
        n = snprintf(text, sizeof text,
            "{\"name\": \"calib-%dx%d\", \"family\": \"gpt\", "
            "\"hidden\": %d, \"layers\": %d, \"heads\": %d, "
            "\"ffn\": %d, \"vocab\": %d, \"seq_len\": %d, "
            "\"max_pos\": %d, \"tied_embeddings\": true, \"bias\": true, "
            "\"dropout\": false, \"fused_loss\": true, \"batch\": %d, "
            "\"dtype\": \"fp32\", \"source\": \"sluice calibrate: a GPT "
            "of one layer size\"}\n", L->C, L->T, L->C, SYN_LAYERS,
            L->C / L->hs, 4 * L->C, L->V, L->T, L->T, L->mbs);
    return util_write_atomic(path, text, (size_t)n, e);
}

/* Runs the model of spec on cores as a plan of schedule sched, pp
 * stages (the ops cut in halves), dp data-parallel replicas and tp
 * tensor-parallel ranks, n_mb microbatches; with op_timing every op
 * timed. */
static int run_layout(const exec_calib_opts *o, const char *spec,
                      const layer_size *L, sim_sched sched, int pp, int dp,
                      int tp, int n_mb, int steps, int op_timing,
                      exec_pipe_result *r, util_err *e)
{
    util_err me;
    prof_model *m = prof_model_load(spec, &me);
    if (!m) return util_errf(e, me.code, "%s", me.msg);
    sim_plan p;
    sim_plan_init(&p);
    snprintf(p.model, sizeof p.model, "%s", spec);
    snprintf(p.hw, sizeof p.hw, "%s x%d", o->device, pp * dp * tp);
    p.sched = sched;
    p.pp = pp;
    p.dp = dp;
    p.tp = tp;
    p.mbs = L->mbs;
    p.n_mb = n_mb;
    p.n_minibatches = 1;
    sim_plan_stages(&p, pp);
    for (int s = 0; s < pp; s++) {
        p.first_op[s] = s * m->n_ops / pp;
        p.last_op[s] = (s + 1) * m->n_ops / pp - 1;
        p.stage_device[s] = s;
    }
    prof_model_free(m);
    exec_pipe_opts po = {0};
    po.plan_path = spec;
    po.plan = &p;
    po.data = o->data;
    po.steps = steps;
    po.adamw = (exec_adamw){1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    po.warmup = -1;
    po.seed = 1;
    po.xport = EXEC_XPORT_INPROC;
    po.stop = o->stop;
    po.fault_worker = -1;
    po.op_timing = op_timing;
    po.backend = o->backend;
    int rc = exec_pipe_run(&po, r, e);
    sim_plan_free(&p);
    return rc;
}

static int run_spec(const exec_calib_opts *o, const char *spec,
                    const layer_size *L, int devices, int steps,
                    exec_pipe_result *r, util_err *e)
{
    return run_layout(o, spec, L, SIM_SCHED_GPIPE, 1, devices, 1, 1, steps, 1,
                      r, e);
}

/* The run's op parts as samples; its optimizer steps (device 0, past the
 * first step) as one; its tasks' own cost into *rest_ns, the ops they
 * ran into *rest_n. */
static void take_samples(samples *v, const exec_pipe_result *r, int mbs,
                         double *rest_ns, double *rest_n)
{
    static const sim_kind kinds[PROF_PHASES] = {SIM_F, SIM_B, SIM_W};
    for (int i = 0; i < r->model->n_ops; i++)
        for (int ph = 0; ph < PROF_PHASES; ph++) {
            double n = r->op_calls[i * PROF_PHASES + ph];
            const prof_op *op = &r->model->ops[i];
            /* parts the cost model prices (an op without weights has no
             * weight gradient, the embedding no input gradient) */
            if (!(n > 0) || (ph == PROF_PHASE_W && op->bwd_w_flops <= 0 &&
                             op->kind != PROF_OP_EMBED) ||
                (ph == PROF_PHASE_B && op->kind == PROF_OP_EMBED))
                continue;
            add_sample(v, op, mbs, kinds[ph],
                       r->op_ns[i * PROF_PHASES + ph] / n, n);
        }
    double opt = 0, nopt = 0;
    for (int ep = 1; ep < r->epochs; ep++)
        for (int t = 0; t < r->n_tasks; t++) {
            const sim_task *k = &r->ir->tasks[t];
            const int64_t *tm = exec_pipe_times(r, ep, t);
            if (k->kind != SIM_OPT || k->device != 0 || tm[0] < 0) continue;
            opt += (double)(tm[1] - tm[0]);
            nopt += 1;
        }
    if (nopt > 0) {
        prof_op op;
        memset(&op, 0, sizeof op);
        snprintf(op.name, sizeof op.name, "adamw");
        op.params = r->costs->stage[0].params;
        add_sample(v, &op, 1, SIM_OPT, opt / nopt, nopt);
    }
    *rest_ns += r->task_rest_ns;
    *rest_n += r->task_rest_ops;
}

static int measure_layers(const exec_calib_opts *o, int gpu, const char *tmp,
                          samples *v, exec_calib_result *res, util_err *e)
{
    const layer_size *sz = o->quick ? quick_sizes
                           : gpu    ? gpu_sizes
                                    : full_sizes;
    int nsz = o->quick ? (int)(sizeof quick_sizes / sizeof *quick_sizes)
              : gpu    ? (int)(sizeof gpu_sizes / sizeof *gpu_sizes)
                       : (int)(sizeof full_sizes / sizeof *full_sizes);
    int steps = o->quick ? 3 : 5;
    double rest_ns = 0, rest_n = 0;
    char spec[600];
    snprintf(spec, sizeof spec, "%s/layer.json", tmp);
    for (int z = 0; z < nsz; z++) {
        if (o->stop && *o->stop)
            return util_errf(e, UTIL_EXIT_FAIL, "stopped");
        const layer_size *L = &sz[z];
        exec_pipe_result r;
        int from = v->count;
        v->set = z + 1;
        if (write_spec(spec, L, e) || run_spec(o, spec, L, 1, steps, &r, e))
            return util_err_prefix(e, "ops of width %d", L->C);
        take_samples(v, &r, L->mbs, &rest_ns, &rest_n);
        exec_pipe_result_free(&r);
        if (o->log)
            fprintf(o->log, "  ops: hidden %d, sequence %d, microbatch "
                    "%d%s%s: %d samples\n", L->C, L->T, L->mbs,
                    L->V > 256 ? ", vocabulary 8192" : "",
                    L->llama ? ", Llama's layer" : "", v->count - from);
    }
    res->op_task_ns = rest_n > 0 ? fmin(1e9, fmax(0, rest_ns / rest_n)) : 0;
    return 0;
}

/* The slowdown of ops with n devices computing at once. A training step
 * of one layer size (the reference trainer: forward, backward, AdamW) is
 * timed on core 0 alone, then with cores 1..n-1 running the same at the
 * same time, alternately many times, so the machine's other load and its
 * clocks drift through both alike; the ratio of the medians. */
typedef struct busy_ctx {
    const layer_size *L;
    int core, n_iters;
    volatile int *go;           /* 1: run, -1: stop */
    pthread_barrier_t *bar;
    double *t;                  /* core 0: one time per iteration */
} busy_ctx;

static void busy_step(exec_gpt *m, const int *tok, const int *tgt)
{
    exec_adamw a = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.0f};
    exec_gpt_forward(m, tok, tgt);
    exec_gpt_zero_grad(m);
    exec_gpt_backward(m);
    exec_gpt_step(m, &a, 1);
}

static void *busy_worker(void *arg)
{
    busy_ctx *c = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(c->core, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    exec_gpt_config g = {.vocab = c->L->V, .max_pos = c->L->T,
                         .hidden = c->L->C, .layers = 2,
                         .heads = c->L->C / c->L->hs, .ffn = 4 * c->L->C,
                         .bias = 1, .tied = 1};
    int B = c->L->mbs, T = c->L->T;
    exec_gpt *m = exec_gpt_new(&g, B, T, 7 + (uint64_t)c->core);
    int *tok = util_malloc(sizeof(int) * (size_t)(2 * B * T));
    for (int i = 0; i < 2 * B * T; i++) tok[i] = (i * 7919) % g.vocab;
    busy_step(m, tok, tok + B * T);      /* warm */
    for (;;) {
        pthread_barrier_wait(c->bar);
        int go = *c->go;
        if (go < 0) break;
        if (go == 0 && c->core) {       /* not this core's round */
            pthread_barrier_wait(c->bar);
            continue;
        }
        for (int i = 0; i < c->n_iters; i++) {
            int64_t t0 = (int64_t)exec_now_ns();
            busy_step(m, tok, tok + B * T);
            if (c->t) c->t[i] = (double)((int64_t)exec_now_ns() - t0);
        }
        pthread_barrier_wait(c->bar);
    }
    free(tok);
    exec_gpt_free(m);
    return NULL;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int measure_busy(const exec_calib_opts *o, prof_calib *c, util_err *e)
{
    static const layer_size full = {256, 128, 8, 256, 32, 0};
    static const layer_size quick = {128, 64, 1, 256, 32, 0};
    const layer_size *L = o->quick ? &quick : &full;
    int top = o->devices, rounds = o->quick ? 3 : 8, iters = 3;
    /* more devices than cores would time the scheduler, not the socket */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && top > cores) top = (int)cores;
    if (top > PROF_CALIB_MAX_BUSY) top = PROF_CALIB_MAX_BUSY;
    c->busy[0] = 1;
    c->n_busy = 1;
    int saved = kern_get_threads();
    kern_set_threads(1);
    for (int n = 2; n <= top; n++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)n);
        volatile int go = 0;
        double *t = util_malloc(sizeof(double) * (size_t)iters);
        double *alone = util_malloc(sizeof(double) * (size_t)(rounds * iters));
        double *both = util_malloc(sizeof(double) * (size_t)(rounds * iters));
        busy_ctx *ctx = util_calloc((size_t)n, sizeof *ctx);
        pthread_t *th = util_calloc((size_t)n, sizeof *th);
        for (int k = 0; k < n; k++) {
            ctx[k] = (busy_ctx){L, k, iters, &go, &bar, k ? NULL : t};
            if (k) pthread_create(&th[k], NULL, busy_worker, &ctx[k]);
        }
        /* core 0 is this thread's share of the work */
        cpu_set_t old, set;
        pthread_getaffinity_np(pthread_self(), sizeof old, &old);
        CPU_ZERO(&set);
        CPU_SET(0, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        exec_gpt_config g = {.vocab = L->V, .max_pos = L->T, .hidden = L->C,
                             .layers = 2, .heads = L->C / L->hs,
                             .ffn = 4 * L->C, .bias = 1, .tied = 1};
        exec_gpt *m = exec_gpt_new(&g, L->mbs, L->T, 7);
        int BT = L->mbs * L->T;
        int *tok = util_malloc(sizeof(int) * (size_t)(2 * BT));
        for (int i = 0; i < 2 * BT; i++) tok[i] = (i * 7919) % g.vocab;
        busy_step(m, tok, tok + BT);
        int na = 0, nb = 0;
        for (int r = 0; r < 2 * rounds; r++) {
            go = r % 2;                 /* alone, then all at once */
            pthread_barrier_wait(&bar);
            for (int i = 0; i < iters; i++) {
                int64_t t0 = (int64_t)exec_now_ns();
                busy_step(m, tok, tok + BT);
                double dt = (double)((int64_t)exec_now_ns() - t0);
                if (go) both[nb++] = dt;
                else alone[na++] = dt;
            }
            pthread_barrier_wait(&bar);
        }
        go = -1;
        pthread_barrier_wait(&bar);
        for (int k = 1; k < n; k++) pthread_join(th[k], NULL);
        pthread_setaffinity_np(pthread_self(), sizeof old, &old);
        qsort(alone, (size_t)na, sizeof *alone, cmp_dbl);
        qsort(both, (size_t)nb, sizeof *both, cmp_dbl);
        double f = alone[na / 2] > 0 ? both[nb / 2] / alone[na / 2] : 1;
        /* sharing the machine never speeds an op up: below 1 is noise */
        c->busy[n - 1] = fmax(1, fmin(100, f));
        c->n_busy = n;
        if (o->log)
            fprintf(o->log, "  %d devices at once: ops take %.3fx their time "
                    "alone%s\n", n, f, f < 1 ? " (noise: 1 kept)" : "");
        exec_gpt_free(m);
        free(tok);
        free(t);
        free(alone);
        free(both);
        free(ctx);
        free(th);
        pthread_barrier_destroy(&bar);
        if (o->stop && *o->stop) break;
    }
    kern_set_threads(saved);
    if (o->stop && *o->stop) return util_errf(e, UTIL_EXIT_FAIL, "stopped");
    return 0;
}

/* ------------------------------------------------------ transfers */

/* A run's task times: [epoch][task][EXEC_T_*]. */
/* Each transfer of the run past its first step, from the moment its send
 * could start (the last task it waits for done, and the send before it on
 * its stream) to its delivery: what the simulator prices as latency +
 * bytes / bandwidth. */
static void take_transfers(const exec_pipe_result *r, exec_calib_xfer **x,
                           int *n, int *cap)
{
    const sim_ir *ir = r->ir;
    for (int ep = 1; ep < r->epochs; ep++)
        for (int t = 0; t < ir->n_tasks; t++) {
            const sim_task *k = &ir->tasks[t];
            if (k->kind != SIM_SEND || k->peer < 0 ||
                (k->comm != SIM_COMM_PP && k->comm != SIM_COMM_DP))
                continue;
            int64_t ready = -1, start = exec_pipe_times(r, ep, t)[EXEC_T_START];
            for (int d = 0; d < k->n_dep; d++) {
                int64_t end = exec_pipe_times(r, ep, ir->deps[k->dep_off + d])[EXEC_T_END];
                if (end > ready) ready = end;
            }
            /* the stream busy with an earlier send: not this one's time */
            for (int u = 0; u < ir->n_tasks; u++) {
                const sim_task *q = &ir->tasks[u];
                int64_t end = exec_pipe_times(r, ep, u)[EXEC_T_END];
                if (u != t && q->kind == SIM_SEND && q->device == k->device &&
                    q->stream == k->stream && end <= start && end > ready)
                    ready = end;
            }
            int64_t got = exec_pipe_times(r, ep, k->peer)[EXEC_T_END];
            if (ready < 0 || got < ready) continue;
            if (*n == *cap) {
                *cap = *cap ? 2 * *cap : 64;
                *x = util_realloc(*x, sizeof **x * (size_t)*cap);
            }
            (*x)[(*n)++] = (exec_calib_xfer){k->bytes, (double)(got - ready)};
        }
}

static int cmp_xfer(const void *a, const void *b)
{
    const exec_calib_xfer *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
    return (x->ns > y->ns) - (x->ns < y->ns);
}

/* One transfer per size: the median of those measured (sorts x). */
static int median_by_size(exec_calib_xfer *x, int n, exec_calib_xfer **out)
{
    qsort(x, (size_t)n, sizeof *x, cmp_xfer);
    *out = util_malloc(sizeof **out * (size_t)(n + 1));
    int m = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && x[j].bytes == x[i].bytes) j++;
        (*out)[m++] = x[i + (j - i) / 2];
        i = j;
    }
    return m;
}

/* Tensor-parallel all-reduces of a tp-rank run: per forward and backward
 * task, the ring steps the simulator would count and their bytes, and
 * the time the task spent in them. */
typedef struct tp_sample {
    double steps, bytes, ns;
} tp_sample;

static void take_tp(const exec_pipe_result *r, int tp, tp_sample **x,
                    int *n, int *cap)
{
    const sim_ir *ir = r->ir;
    const prof_model *m = r->model;
    int mbs = (int)llround(r->costs->samples_per_mb);
    for (int ep = 1; ep < r->epochs; ep++)
        for (int t = 0; t < ir->n_tasks; t++) {
            const sim_task *k = &ir->tasks[t];
            if (k->kind != SIM_F && k->kind != SIM_BW) continue;
            const sim_stage_cost *sc = &r->costs->stage[k->stage];
            double steps = 0, bytes = 0;
            for (int i = sc->first_op; i <= sc->last_op; i++) {
                double f, b;
                sim_tp_allreduces(m, i, &f, &b);
                double v = k->kind == SIM_F ? f : b;
                if (v > 0) {
                    steps += 2.0 * (tp - 1);
                    bytes += 2.0 * (tp - 1) / tp * v * mbs;
                }
            }
            double ns = (double)exec_pipe_times(r, ep, t)[EXEC_T_TP];
            if (steps <= 0 || ns <= 0) continue;
            if (*n == *cap) {
                *cap = *cap ? 2 * *cap : 64;
                *x = util_realloc(*x, sizeof **x * (size_t)*cap);
            }
            (*x)[(*n)++] = (tp_sample){steps, bytes, ns};
        }
}

/* ns = steps * latency + bytes / bandwidth, least squares relative to
 * ns (no intercept); *lat_ns, *bw (bytes/s). */
static int fit_tp(const tp_sample *x, int n, prof_calib_link *l,
                  util_err *e)
{
    double a = 0, b = 0, c = 0, d = 0, f = 0;   /* normal equations */
    for (int i = 0; i < n; i++) {
        double w = 1 / (x[i].ns * x[i].ns);
        a += w * x[i].steps * x[i].steps;
        b += w * x[i].steps * x[i].bytes;
        c += w * x[i].bytes * x[i].bytes;
        d += w * x[i].steps * x[i].ns;
        f += w * x[i].bytes * x[i].ns;
    }
    double det = a * c - b * b;
    if (n < 3 || !(fabs(det) > 0))
        return util_errf(e, UTIL_EXIT_FAIL, "%d all-reduce samples: too few "
                         "to fit", n);
    double lat = (d * c - b * f) / det, inv = (a * f - b * d) / det;
    if (!(inv > 1e-5)) {    /* latency-bound: the bytes tell little */
        inv = 1e-5;         /* 100 TB/s: no limit worth the name */
        lat = (d - b * inv) / a;
    }
    memset(l, 0, sizeof *l);
    l->present = 1;
    l->latency_ns = fmax(0, lat);
    l->bw_bytes_per_s = 1e9 / inv;
    l->samples = n;
    for (int i = 0; i < n; i++) {
        double g = x[i].steps * l->latency_ns + x[i].bytes * inv;
        double r = fabs(g / x[i].ns - 1);
        if (r > l->max_err) l->max_err = r;
    }
    return 0;
}

/* Pipeline and data-parallel transfers and tensor-parallel all-reduces as
 * the executor makes them between two devices, over sizes: the in-process
 * link and all-reduce figures. The data-parallel rings are also checked
 * whole against the link fitted. */
/* A ring's time as measured: bytes a step, from both replicas' backward
 * done to its last step */
typedef struct ringrun { double bytes, ns; } ringrun;

/* One round of the transfer runs over sizes sz[0..nsz): pipeline sends
 * (x), the gradients' ring (x, and its whole time in rings), the
 * tensor-parallel all-reduces (tpx). */
static int transfer_runs(const exec_calib_opts *o, const char *spec,
                         const layer_size *sz, int nsz, int steps,
                         exec_calib_xfer **x, int *n, int *cap,
                         tp_sample **tpx, int *ntp, int *captp,
                         ringrun *rings, int *nring, util_err *e)
{
    int rc = 0;
    for (int z = 0; z < nsz && !rc; z++) {
        const layer_size *L = &sz[z];
        exec_pipe_result r;
        if ((rc = write_spec(spec, L, e))) break;
        /* two stages, two microbatches: activations and gradients */
        if ((rc = run_layout(o, spec, L, SIM_SCHED_GPIPE, 2, 1, 1, 2, steps,
                             0, &r, e)))
            break;
        take_transfers(&r, x, n, cap);
        exec_pipe_result_free(&r);
        /* two replicas: the gradients' ring; the whole ring timed too */
        if ((rc = run_layout(o, spec, L, SIM_SCHED_GPIPE, 1, 2, 1, 1, steps,
                             0, &r, e)))
            break;
        take_transfers(&r, x, n, cap);
        /* the ring from both replicas' backward done to its last step */
        double ring = 0, cnt = 0, bytes = 0;
        for (int ep = 1; ep < r.epochs; ep++) {
            int64_t ready = -1, last = -1;
            for (int t = 0; t < r.ir->n_tasks; t++) {
                const sim_task *k = &r.ir->tasks[t];
                if (k->comm != SIM_COMM_DP) continue;
                if (k->kind == SIM_RECV) {
                    int64_t end = exec_pipe_times(&r, ep, t)[EXEC_T_END];
                    if (end > last) last = end;
                    bytes = k->bytes * 2;   /* a chunk of two */
                } else if (k->kind == SIM_SEND && k->mb == 0) {
                    for (int d = 0; d < k->n_dep; d++) {
                        int u = r.ir->deps[k->dep_off + d];
                        int64_t end = exec_pipe_times(&r, ep, u)[EXEC_T_END];
                        if (r.ir->tasks[u].kind != SIM_RECV && end > ready)
                            ready = end;
                    }
                }
            }
            if (ready >= 0 && last > ready) {
                ring += (double)(last - ready);
                cnt++;
            }
        }
        if (cnt > 0 && *nring < 4) rings[(*nring)++] = (ringrun){bytes,
                                                                  ring / cnt};
        exec_pipe_result_free(&r);
        /* two tensor-parallel ranks */
        if ((rc = run_layout(o, spec, L, SIM_SCHED_GPIPE, 1, 1, 2, 1, steps,
                             0, &r, e)))
            break;
        take_tp(&r, 2, tpx, ntp, captp);
        exec_pipe_result_free(&r);
        if (o->log)
            fprintf(o->log, "  transfers: hidden %d, sequence %d, microbatch "
                    "%d: %d samples, %d all-reduce samples\n", L->C, L->T,
                    L->mbs, *n, *ntp);
    }
    return rc;
}

static int measure_transfers(const exec_calib_opts *o, const char *tmp,
                             exec_calib_result *res, util_err *e)
{
    static const layer_size full[] = {{128, 64, 1, 256, 32, 0},
                                      {256, 128, 4, 256, 32, 0},
                                      {512, 128, 8, 256, 64, 0}};
    /* --quick's two sizes 64 times apart in bytes (8 KiB and 512 KiB of
     * activations): two sizes 8 times apart took a few microseconds each,
     * within a loaded machine's noise, and the link's fit found no
     * growth with size and failed the calibration */
    static const layer_size quick[] = {{64, 32, 1, 256, 32, 0},
                                       {256, 128, 4, 256, 32, 0}};
    const layer_size *sz = o->quick ? quick : full;
    int nsz = o->quick ? 2 : 3, steps = o->quick ? 3 : 4;
    exec_calib_xfer *x = NULL;
    tp_sample *tpx = NULL;
    int n = 0, cap = 0, ntp = 0, captp = 0, rc = 0;
    char spec[600];
    snprintf(spec, sizeof spec, "%s/xfer.json", tmp);
    ringrun rings[4];
    int nring = 0, unfit = 0;
    prof_calib *c = &res->calib;
    prof_calib_param pl, pb;
    /* a machine busy with other work can still hide the copies' growth
     * with size in one round (the fit finds none): the transfers are
     * measured once more before the calibration fails */
    for (int round = 0; !rc; round++) {
        rc = transfer_runs(o, spec, sz, nsz, steps, &x, &n, &cap, &tpx,
                           &ntp, &captp, rings, &nring, e);
        if (rc) break;
        /* the median of each size: whatever else runs only delays some */
        exec_calib_xfer *med = NULL;
        int nm = median_by_size(x, n, &med);
        /* SLUICE_CALIBRATE_NOISY=K: the first K rounds' times as a busy
         * machine can leave them, not growing with size (tests) */
        const char *nz = getenv("SLUICE_CALIBRATE_NOISY");
        for (int i = 0; nz && round < atoi(nz) && i < nm; i++)
            med[i].ns = med[0].ns;
        rc = unfit = exec_calib_fit_link(med, nm, &c->link[PROF_XFER_INPROC],
                                         &pl, &pb, e);
        free(med);
        if (!rc || round || (o->stop && *o->stop)) break;
        if (o->log)
            fprintf(o->log, "  transfers: %s; measured again\n", e->msg);
        free(x);
        free(tpx);
        x = NULL;
        tpx = NULL;
        n = cap = ntp = captp = nring = 0;
        rc = unfit = 0;
    }
    unlink(spec);
    if (rc && unfit) util_err_prefix(e, "in-process transfers");
    if (!rc) {
        res->xfers[PROF_XFER_INPROC] = x;
        res->n_xfers[PROF_XFER_INPROC] = n;
        x = NULL;
        if (c->n_param + 2 <= PROF_CALIB_MAX_PARAMS) {
            snprintf(pl.name, sizeof pl.name, "copy_latency_us");
            snprintf(pb.name, sizeof pb.name, "copy_gb_per_s");
            c->param[c->n_param++] = pl;
            c->param[c->n_param++] = pb;
        }
    }
    if (!rc && (rc = fit_tp(tpx, ntp, &c->link[PROF_XFER_COLL], e)))
        util_err_prefix(e, "tensor-parallel all-reduces");
    const prof_calib_link *l = &c->link[PROF_XFER_INPROC];
    /* the ring as the simulator prices it: two steps of half the bytes
     * over the fitted link; on cores the first's chunk is then added to
     * the gradient at the fitted streaming rate (two reads and a write)
     * before the second goes (sim_task.fold_ns; GPUs: none). The window
     * measured ends as the last chunk lands: its copy into place, which
     * the simulator adds to that step, comes after it */
    double mem = c->gpu.form == PROF_FORM_CPU
               ? c->gpu.mem_bw_bytes_per_s * c->gpu.eff.mem_max : 0;
    for (int i = 0; !rc && i < nring && res->n_checks < 16; i++)
        res->checks[res->n_checks++] = (exec_calib_check){
            "in-process ring (dp 2)", 2, rings[i].bytes, rings[i].ns,
            2.0 * (l->latency_ns + rings[i].bytes / 2 /
                                       l->bw_bytes_per_s * 1e9) +
                (mem > 0 ? 3 * rings[i].bytes / 2 / mem * 1e9 : 0)};
    free(x);
    free(tpx);
    return rc;
}

/* ------------------------------------------- the backward's halves apart */

/* The backward's halves run as tasks of their own (the zero-bubble
 * schedules' B and W) against within one backward task: one layer size
 * run under GPipe and ZB-H1 on one device, alternately, every op timed;
 * each phase's summed op times split over combined, the median of the
 * rounds (prof_eff.split_factor). */
static int measure_split(const exec_calib_opts *o, int gpu, const char *tmp,
                         exec_calib_result *res, util_err *e)
{
    static const layer_size cpu_sz = {256, 128, 4, 256, 32, 0},
                            quick_sz = {128, 64, 2, 256, 32, 0},
                            gpu_sz = {1024, 512, 4, 256, 64, 0};
    const layer_size *L = o->quick ? &quick_sz : gpu ? &gpu_sz : &cpu_sz;
    int rounds = o->quick ? 1 : 3, steps = o->quick ? 3 : 5;
    char spec[600];
    snprintf(spec, sizeof spec, "%s/layer.json", tmp);
    if (write_spec(spec, L, e)) return -1;
    double ratio[2][3];
    for (int k = 0; k < rounds; k++) {
        double sum[2][2] = {{0, 0}, {0, 0}};    /* [split][B, W] */
        for (int s = 0; s < 2; s++) {
            if (o->stop && *o->stop)
                return util_errf(e, UTIL_EXIT_FAIL, "stopped");
            exec_pipe_result r;
            if (run_layout(o, spec, L, s ? SIM_SCHED_ZBH1 : SIM_SCHED_GPIPE,
                           1, 1, 1, 2, steps, 1, &r, e))
                return util_err_prefix(e, "the backward's halves");
            for (int i = 0; i < r.model->n_ops; i++)
                for (int q = 0; q < 2; q++) {
                    int ph = q ? PROF_PHASE_W : PROF_PHASE_B;
                    double n = r.op_calls[i * PROF_PHASES + ph];
                    if (n > 0)
                        sum[s][q] += r.op_ns[i * PROF_PHASES + ph] / n;
                }
            exec_pipe_result_free(&r);
        }
        for (int q = 0; q < 2; q++)
            ratio[q][k] = sum[0][q] > 0 && sum[1][q] > 0
                        ? sum[1][q] / sum[0][q] : 1;
    }
    for (int q = 0; q < 2; q++) {
        qsort(ratio[q], (size_t)rounds, sizeof(double), cmp_dbl);
        /* within what a profile takes (gpu.c) */
        res->calib.gpu.eff.split_factor[q] =
            fmin(10, fmax(0.1, ratio[q][rounds / 2]));
    }
    if (o->log)
        fprintf(o->log, "  the backward's halves apart: B x%.3f, W x%.3f\n",
                res->calib.gpu.eff.split_factor[0],
                res->calib.gpu.eff.split_factor[1]);
    return 0;
}

/* ------------------------------------------ the host's side of offload */

typedef struct adam_bench {
    float *w, *m, *v, *g;
    size_t n;
    int step;
} adam_bench;

static void adam_part(void *ctx, int p, int n)
{
    adam_bench *a = ctx;
    size_t lo, hi;
    exec_part_range(a->n, p, n, &lo, &hi);
    if (hi > lo)
        kern_cpu.adamw_update(a->w + lo, a->m + lo, a->v + lo, a->g + lo,
                              hi - lo, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f,
                              a->step);
}

/* The host's side of offloaded training, which the simulator prices from
 * these rates (calib.tiers): AdamW stepping parameters on the host's
 * threads as the tiers run it (exec_host_threads' default), the fastest
 * of a few steps; and a tier file's drive in o->drive_dir, written then
 * read in regions of a large stage's size (O_DIRECT where the file
 * system takes it, as the executor's tiers). A working directory that
 * cannot take the file leaves the drive unmeasured, and r->drive_note
 * says why; so does a disk that fills up. */
static int measure_host(const exec_calib_opts *o, exec_calib_result *r,
                        util_err *e)
{
    prof_calib_tiers *tc = &r->calib.tiers;
    size_t n = o->quick ? (size_t)1 << 21 : (size_t)1 << 23;
    adam_bench a = {.n = n};
    float **arr[4] = {&a.w, &a.m, &a.v, &a.g};
    for (int k = 0; k < 4; k++) {
        *arr[k] = exec_tfile_buf(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            (*arr[k])[i] = k == 1 || k == 2 ? 0.0f
                                            : 1e-3f * (float)(i % 997);
    }
    r->host_threads = exec_host_threads_for(0);
    double best = HUGE_VAL;
    int rc = 0;
    for (int rep = 0; rep < (o->quick ? 3 : 5) && !rc; rep++) {
        if (o->stop && *o->stop) {
            rc = util_errf(e, UTIL_EXIT_FAIL, "stopped");
            break;
        }
        a.step = rep + 1;
        int64_t t0 = (int64_t)exec_now_ns();
        exec_host_par(r->host_threads, adam_part, &a);
        best = fmin(best, (double)((int64_t)exec_now_ns() - t0));
    }
    for (int k = 0; k < 4; k++) free(*arr[k]);
    if (rc) return rc;
    tc->adam_params_per_s = (double)n / (best * 1e-9);
    tc->present = 1;
    snprintf(tc->model, sizeof tc->model, "microbenchmarks");
    /* the drive: whole regions, as the tiers read and write a stage */
    size_t blk = (size_t)(o->quick ? 4 : 16) << 20;
    int nblk = o->quick ? 4 : 16;
    exec_tfile f;
    exec_tfile_init(&f);
    util_err fe;
    const char *dir = o->drive_dir && *o->drive_dir ? o->drive_dir : ".";
    if (exec_tfile_open(&f, dir, 0, &fe)) {
        /* a folder given was tried before the microbenchmarks
         * (exec_calibrate): this is the working directory's */
        exec_tfile_close(&f);
        snprintf(r->drive_note, sizeof r->drive_note, "not measured: %s "
                 "(give --offload-path DIR)", fe.msg);
        return 0;
    }
    unsigned char *buf = exec_tfile_buf(blk);
    for (size_t i = 0; i < blk; i++) buf[i] = (unsigned char)(i * 131);
    int64_t *off = util_malloc(sizeof *off * (size_t)nblk);
    int bad = 0;
    for (int i = 0; i < nblk && !bad; i++) {
        off[i] = exec_tfile_grow(&f, blk);
        bad = exec_tfile_io(&f, 1, buf, blk, off[i], &fe);
    }
    for (int i = 0; i < nblk && !bad; i++)
        bad = exec_tfile_io(&f, 0, buf, blk, off[i], &fe);
    if (bad) {
        snprintf(r->drive_note, sizeof r->drive_note, "not measured: %s",
                 fe.msg);
    } else if (f.rd_ns > 0 && f.wr_ns > 0) {
        tc->read_bytes_per_s = f.rd_bytes / (f.rd_ns * 1e-9);
        tc->write_bytes_per_s = f.wr_bytes / (f.wr_ns * 1e-9);
        r->drive_measured = 1;
        snprintf(r->drive_note, sizeof r->drive_note, "a file in %s (%s), "
                 "%d regions of %zu MiB", dir, f.note, nblk, blk >> 20);
    }
    free(off);
    free(buf);
    exec_tfile_close(&f);
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

/* ---- scratch ----
 * A calibration's scratch folder in TMPDIR holds its measuring runs'
 * plans and a note of its owner (pid and host), which the owner keeps
 * locked (flock) while it runs. Ctrl-C, SIGTERM and a hangup remove it;
 * SIGKILL cannot, so the next calibration removes the folders of this
 * user's calibrations on this host whose note nobody holds: a lock goes
 * with its process, whatever its process id means here (a container
 * with a process space of its own sharing TMPDIR and the host's name; a
 * number a later process took). Where the file system takes no locks,
 * a process id that is gone says so instead. */
#define SCRATCH_PREFIX "sluice-calibrate-"
static const char *const scratch_files[] = {"layer.json", "xfer.json",
                                            "owner"};

static void scratch_remove(const char *dir)
{
    for (size_t i = 0; i < sizeof scratch_files / sizeof *scratch_files;
         i++) {
        char p[700];
        snprintf(p, sizeof p, "%s/%s", dir, scratch_files[i]);
        unlink(p);
    }
    rmdir(dir);     /* not if something else is in it */
}

static void host_name(char *h, size_t n)
{
    if (gethostname(h, n)) snprintf(h, n, "?");
    h[n - 1] = 0;
}

/* Writes the owner note and holds its lock: the descriptor to close
 * once the folder is gone, or -1. */
static int scratch_owner(const char *dir)
{
    char p[700], h[256], line[300];
    snprintf(p, sizeof p, "%s/owner", dir);
    host_name(h, sizeof h);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    flock(fd, LOCK_EX | LOCK_NB);   /* new: nobody else has it */
    int n = snprintf(line, sizeof line, "%ld %s\n", (long)getpid(), h);
    if (n < 0 || write(fd, line, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    return fd;
}

static void sweep_scratch(const char *td)
{
    DIR *d = opendir(td);
    if (!d) return;
    char h[256];
    host_name(h, sizeof h);
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t pl = strlen(SCRATCH_PREFIX);
        if (strncmp(de->d_name, SCRATCH_PREFIX, pl) ||
            strlen(de->d_name) != pl + 6)
            continue;
        char dir[700], p[720], host[256];
        snprintf(dir, sizeof dir, "%s/%s", td, de->d_name);
        struct stat st;
        if (lstat(dir, &st) || !S_ISDIR(st.st_mode) ||
            st.st_uid != getuid())
            continue;
        snprintf(p, sizeof p, "%s/owner", dir);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;   /* an older sluice's, or not ours */
        FILE *f = fdopen(fd, "r");
        if (!f) {
            close(fd);
            continue;
        }
        long pid = 0;
        int got = fscanf(f, "%ld %255s", &pid, host);
        /* another host's (a TMPDIR shared over the network) stays */
        int gone = 0;
        if (got == 2 && pid > 0 && !strcmp(host, h)) {
            if (!flock(fd, LOCK_EX | LOCK_NB)) gone = 1;
            else if (errno != EWOULDBLOCK)
                /* no locks here: a process of that number alive
                 * (perhaps another's by now) keeps it */
                gone = kill((pid_t)pid, 0) && errno == ESRCH;
        }
        if (gone) scratch_remove(dir);
        fclose(f);
    }
    closedir(d);
}

int exec_calibrate(const exec_calib_opts *o, exec_calib_result *r,
                   util_err *e)
{
    memset(r, 0, sizeof *r);
    r->mpi_ranks = 1;
    int64_t t0 = (int64_t)exec_now_ns();
    prof_gpu base;
    if (prof_gpu_get_builtin(o->device, &base, e)) return -1;
    int gpu = base.form != PROF_FORM_CPU;
    /* a core streams from its own cache faster: the cache's size is the
     * machine's, not the fit's to choose (fitted, it slid between the
     * per-core level and one ten times larger from one calibration to
     * the next, and took the memory rate with it) */
    if (!gpu) base.eff.cache_bytes = exec_host_cache_bytes();
    if (gpu && (!o->backend || o->backend->host_memory))
        return util_errf(e, UTIL_EXIT_USAGE, "calibrating %s needs that GPU "
                         "and the CUDA backend (bin/sluice-cuda, built by "
                         "make cuda)", o->device);
    if (!gpu && o->backend && !o->backend->host_memory)
        return util_errf(e, UTIL_EXIT_USAGE, "calibrating %s: the CUDA "
                         "backend measures GPUs; CPU cores need the CPU "
                         "backend", o->device);
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
    /* a drive folder given that cannot take the file: said before the
     * microbenchmarks, not after them */
    if (o->drive_dir && *o->drive_dir) {
        exec_tfile f;
        exec_tfile_init(&f);
        int bad = exec_tfile_open(&f, o->drive_dir, 0, e);
        exec_tfile_close(&f);
        if (bad) return -1;
    }
    int saved = kern_get_threads();
    /* scratch for the measuring runs' plans, where the user keeps
     * temporary files; what a killed calibration left there goes first */
    const char *td = getenv("TMPDIR");
    char tmp[512];
    if (snprintf(tmp, sizeof tmp, "%s/" SCRATCH_PREFIX "XXXXXX",
                 td && *td ? td : "/tmp") >= (int)sizeof tmp)
        return util_errf(e, UTIL_EXIT_USAGE, "TMPDIR '%s': too long", td);
    sweep_scratch(td && *td ? td : "/tmp");
    if (!mkdtemp(tmp))
        return util_errf(e, UTIL_EXIT_FAIL, "cannot make a temporary "
                         "folder in %s: %s", td && *td ? td : "/tmp",
                         strerror(errno));
    int owner = scratch_owner(tmp);
    samples v = {0};
    prof_calib *c = &r->calib;
    snprintf(c->device, sizeof c->device, "%s", o->device);
    machine_now(c, o->device);
    c->quick = o->quick;
    if (o->log)
        fprintf(o->log, "sluice calibrate: ops of GPT-2 and Llama layers, "
                "run by the executor on one %s\n", gpu ? "GPU" : "core");
    int rc = measure_layers(o, gpu, tmp, &v, r, e);
    if (!rc && o->log && o->devices > 1 && !gpu)
        fprintf(o->log, "sluice calibrate: devices computing at once\n");
    /* cores share the socket's caches and memory; GPUs share nothing
     * while they compute, so theirs stays 1 */
    if (!rc && !gpu) rc = measure_busy(o, c, e);
    if (gpu) {
        c->busy[0] = 1;
        c->n_busy = 1;
    }
    r->samples = v.s;
    r->n_samples = v.count;
    free(v.n);
    if (!rc) {
        rc = exec_calib_fit(v.s, v.count, &base, &c->gpu, c->param,
                            &c->n_param, &c->fit_median_err, &c->fit_max_err,
                            e);
        c->fit_samples = v.count;
    }
    if (!rc && o->log && o->devices > 1)
        fprintf(o->log, "sluice calibrate: transfers between %s\n",
                gpu ? "GPUs" : "cores");
    if (!rc && o->devices > 1) rc = measure_transfers(o, tmp, r, e);
    /* one short round gives a factor anywhere from 0.3 to 6 (two quick
     * runs on one machine): --quick leaves it at 1 */
    if (!rc && o->log)
        fprintf(o->log, "sluice calibrate: the backward's halves apart%s\n",
                o->quick ? ": not measured with --quick (too noisy in one "
                           "short round)" : "");
    if (!rc && !o->quick) rc = measure_split(o, gpu, tmp, r, e);
    if (!rc && o->log)
        fprintf(o->log, "sluice calibrate: the host's AdamW and drive\n");
    if (!rc) rc = measure_host(o, r, e);
    scratch_remove(tmp);
    if (owner >= 0) close(owner);
    for (int x = 0; !rc && x < PROF_XFER_COUNT; x++) {
        if (!r->n_xfers[x] || x == PROF_XFER_INPROC) continue;
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
    kern_set_threads(saved);
    if (!rc) {
        c->gpu.eff.task_ns = 0;
        c->gpu.eff.op_task_ns = r->op_task_ns;
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
    if (r->shared_gpu)
        return util_errf(e, UTIL_EXIT_USAGE, "the run's workers shared GPU "
                         "%d, so each op's time holds the other workers' "
                         "kernels: calibrate from a run with a GPU per "
                         "worker (the calibration is unchanged)",
                         r->shared_gpu - 1);
    int tp = r->costs->tp > 1 ? r->costs->tp : 1;
    int mbs = (int)llround(r->costs->samples_per_mb);
    const sim_kind kinds[PROF_PHASES] = {SIM_F, SIM_B, SIM_W};
    /* a TF32 run's products have signatures of their own */
    prof_dtype dt = r->tf32 ? prof_gpu_math(g, PROF_DT_TF32) : PROF_DT_FP32;
    /* op times are kept as within one backward task: a run whose
     * backward's halves ran apart (zero-bubble's B and W) has its halves'
     * times divided by what calibration measured that costs */
    int split = 0;
    for (int t = 0; t < r->n_tasks && !split; t++)
        split = r->ir->tasks[t].kind == SIM_W;
    for (int i = 0; i < r->model->n_ops; i++) {
        prof_op op = sim_op_tp(&r->model->ops[i], tp);
        for (int ph = 0; ph < PROF_PHASES; ph++) {
            double n = r->op_calls[i * PROF_PHASES + ph];
            if (!(n > 0)) continue;
            double f = split && ph != PROF_PHASE_F
                     ? c->gpu.eff.split_factor[ph - 1] : 0;
            char sig[140];
            sim_op_signature_dt(g, &op, mbs, kinds[ph], dt, sig, sizeof sig);
            /* an op that ran no kernel of its own may read 0 on a
             * device's clock: a profile's times are positive */
            prof_calib_add_op(c, sig,
                              fmax(1, r->op_ns[i * PROF_PHASES + ph] / n /
                                          (f > 0 ? f : 1)),
                              (long)n, model, r->n_workers);
            (*n_added)++;
        }
    }
    if (r->task_rest_ops > 0) {
        c->gpu.eff.task_ns = 0;
        c->gpu.eff.op_task_ns = fmin(1e9, fmax(0, r->task_rest_ns /
                                                      r->task_rest_ops));
    }
    /* a plan of an offload schedule or with stage tiers: its drive's
     * rates where it used the drive, and AdamW's; a rate it did not
     * measure stays as it was */
    int stiers = r->costs && r->costs->stage_tiers;
    if ((r->tiers || stiers) &&
        (r->ofl_read_s > 0 || r->ofl_write_s > 0 || r->adam_s > 0)) {
        prof_calib_tiers *t = &c->tiers;
        if (r->ofl_read_s > 0 && r->ofl_read_bytes > 0)
            t->read_bytes_per_s = r->ofl_read_bytes / r->ofl_read_s;
        if (r->ofl_write_s > 0 && r->ofl_write_bytes > 0)
            t->write_bytes_per_s = r->ofl_write_bytes / r->ofl_write_s;
        if (r->adam_s > 0 && r->adam_params > 0)
            t->adam_params_per_s = r->adam_params / r->adam_s;
        snprintf(t->model, sizeof t->model, "%s", model);
        t->present = 1;
    }
    return 0;
}
