/* `sluice calibrate`'s measurements: every op of GPT-family layers over a
 * range of widths, sequence lengths and microbatches (the GEMM shapes the
 * model zoo produces, and the memory-bound ops beside them) and AdamW
 * steps, each as the executor runs it in training (short runs of small
 * two-layer models with every op timed: caches, allocations and the
 * runtime's own cost per task as a real run has them); how much slower
 * ops get when several devices of the host compute at once; copies
 * between two devices' threads and ring all-reduces over groups of them;
 * MPI messages under mpirun. The fits are in calib_fit.c. */
#include "exec/exec.h"
#include "exec/runtime.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* One size of GPT layer to measure (hs: head size). */
typedef struct layer_size {
    int C, T, mbs, V, hs;
} layer_size;

/* Widths, lengths and microbatches that span the zoo's small GPTs (and
 * the tokens per microbatch planners pick for them), one with a larger
 * vocabulary; a step of each takes well under a second on a core. */
static const layer_size full_sizes[] = {
    {64, 128, 1, 256, 32},   {64, 256, 4, 256, 32},
    {128, 64, 2, 256, 32},   {128, 128, 8, 256, 32},
    {128, 512, 1, 256, 32},  {192, 256, 4, 256, 32},
    {256, 128, 1, 256, 32},  {256, 128, 4, 256, 32},
    {256, 128, 16, 256, 32}, {256, 256, 2, 256, 32},
    {384, 128, 8, 256, 64},  {512, 64, 4, 256, 64},
    {512, 256, 1, 256, 64},  {512, 128, 1, 8192, 64},
    {768, 128, 2, 256, 64},  {768, 64, 8, 256, 64},
    {1024, 128, 1, 256, 64},
};
static const layer_size quick_sizes[] = {
    {64, 32, 1, 256, 32}, {128, 64, 1, 256, 32}, {128, 32, 2, 256, 32},
};
/* the size whose slowdown with several devices at once is measured */
static const layer_size busy_size = {256, 128, 4, 256, 32};
static const layer_size busy_quick = {128, 64, 1, 256, 32};

#define SYN_LAYERS 2

typedef struct samples {
    exec_calib_sample *s;
    double *n;              /* calls behind each sample's mean */
    int count, cap;
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
    v->n[v->count++] = calls;
}

/* A GPT of SYN_LAYERS layers of one size as a spec file. */
static int write_spec(const char *path, const layer_size *L, util_err *e)
{
    char text[1024];
    int n = snprintf(text, sizeof text,
        "{\"name\": \"calib-%dx%d\", \"family\": \"gpt\", \"hidden\": %d, "
        "\"layers\": %d, \"heads\": %d, \"ffn\": %d, \"vocab\": %d, "
        "\"seq_len\": %d, \"max_pos\": %d, \"tied_embeddings\": true, "
        "\"bias\": true, \"dropout\": false, \"batch\": %d, \"dtype\": "
        "\"fp32\", \"source\": \"sluice calibrate: a GPT of one layer "
        "size\"}\n", L->C, L->T, L->C, SYN_LAYERS, L->C / L->hs, 4 * L->C,
        L->V, L->T, L->T, L->mbs);
    return util_write_atomic(path, text, (size_t)n, e);
}

/* Runs the model of spec as a plan of `devices` data-parallel replicas
 * (one stage each, every device computing at once), every op timed. */
static int run_spec(const exec_calib_opts *o, const char *spec,
                    const layer_size *L, int devices, int steps,
                    exec_pipe_result *r, util_err *e)
{
    util_err me;
    prof_model *m = prof_model_load(spec, &me);
    if (!m) return util_errf(e, me.code, "%s", me.msg);
    sim_plan p;
    sim_plan_init(&p);
    snprintf(p.model, sizeof p.model, "%s", spec);
    snprintf(p.hw, sizeof p.hw, "%s x%d", o->device, devices);
    p.sched = SIM_SCHED_GPIPE;
    p.pp = 1;
    p.dp = devices;
    p.tp = 1;
    p.mbs = L->mbs;
    p.n_mb = 1;
    p.n_minibatches = 1;
    sim_plan_stages(&p, 1);
    p.first_op[0] = 0;
    p.last_op[0] = m->n_ops - 1;
    p.stage_device[0] = 0;
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
    po.op_timing = 1;
    int rc = exec_pipe_run(&po, r, e);
    sim_plan_free(&p);
    return rc;
}

/* The run's op parts as samples; its optimizer steps (device 0, past the
 * first step) as one; its tasks' own cost into *rest_ns, *rest_n. */
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
            const int64_t *tm = &r->times[((size_t)ep * r->n_tasks + t) * 4];
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
    *rest_n += r->task_rest_n;
}

static int measure_layers(const exec_calib_opts *o, const char *tmp,
                          samples *v, exec_calib_result *res, util_err *e)
{
    const layer_size *sz = o->quick ? quick_sizes : full_sizes;
    int nsz = o->quick ? (int)(sizeof quick_sizes / sizeof *quick_sizes)
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
        if (write_spec(spec, L, e) || run_spec(o, spec, L, 1, steps, &r, e))
            return util_err_prefix(e, "ops of width %d", L->C);
        take_samples(v, &r, L->mbs, &rest_ns, &rest_n);
        exec_pipe_result_free(&r);
        if (o->log)
            fprintf(o->log, "  ops: hidden %d, sequence %d, microbatch %d%s: "
                    "%d samples\n", L->C, L->T, L->mbs,
                    L->V > 256 ? ", vocabulary 8192" : "", v->count - from);
    }
    res->task_ns = rest_n > 0 ? rest_ns / rest_n : 0;
    return 0;
}

/* The slowdown of ops with n devices computing at once: one size run on
 * n cores as data-parallel replicas against the same size alone, time
 * weighted over its op parts. */
static int measure_busy(const exec_calib_opts *o, const char *tmp,
                        prof_calib *c, util_err *e)
{
    const layer_size *L = o->quick ? &busy_quick : &busy_size;
    int steps = o->quick ? 3 : 5, top = o->devices;
    if (top > PROF_CALIB_MAX_BUSY) top = PROF_CALIB_MAX_BUSY;
    c->busy[0] = 1;
    c->n_busy = 1;
    char spec[600];
    snprintf(spec, sizeof spec, "%s/busy.json", tmp);
    if (write_spec(spec, L, e)) return -1;
    exec_pipe_result one;
    if (top < 2) return 0;
    if (run_spec(o, spec, L, 1, steps, &one, e))
        return util_err_prefix(e, "devices at once");
    size_t n = (size_t)one.model->n_ops * PROF_PHASES;
    for (int d = 2; d <= top; d++) {
        if (o->stop && *o->stop) break;
        exec_pipe_result r;
        if (run_spec(o, spec, L, d, steps, &r, e)) {
            exec_pipe_result_free(&one);
            return util_err_prefix(e, "%d devices at once", d);
        }
        double a = 0, b = 0;
        for (size_t k = 0; k < n; k++)
            if (one.op_calls[k] > 0 && r.op_calls[k] > 0) {
                a += r.op_ns[k] / r.op_calls[k] * one.op_calls[k];
                b += one.op_ns[k];
            }
        c->busy[d - 1] = b > 0 ? fmax(0.5, fmin(100, a / b)) : 1;
        c->n_busy = d;
        exec_pipe_result_free(&r);
        if (o->log)
            fprintf(o->log, "  %d devices at once: ops take %.3fx their time "
                    "alone\n", d, c->busy[d - 1]);
    }
    exec_pipe_result_free(&one);
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
    char tmp[] = "/tmp/sluice-calibrate-XXXXXX";
    if (!mkdtemp(tmp))
        return util_errf(e, UTIL_EXIT_FAIL, "cannot make a temporary "
                         "folder: %s", strerror(errno));
    samples v = {0};
    prof_calib *c = &r->calib;
    snprintf(c->device, sizeof c->device, "%s", o->device);
    machine_now(c, o->device);
    if (o->log)
        fprintf(o->log, "sluice calibrate: ops of GPT layers, run by the "
                "executor on one core\n");
    int rc = measure_layers(o, tmp, &v, r, e);
    if (!rc && o->log && o->devices > 1)
        fprintf(o->log, "sluice calibrate: devices computing at once\n");
    if (!rc) rc = measure_busy(o, tmp, c, e);
    char rm[600];
    snprintf(rm, sizeof rm, "%s/layer.json", tmp);
    unlink(rm);
    snprintf(rm, sizeof rm, "%s/busy.json", tmp);
    unlink(rm);
    rmdir(tmp);
    r->samples = v.s;
    r->n_samples = v.count;
    free(v.n);
    if (!rc) {
        rc = exec_calib_fit(v.s, v.count, &base, &c->gpu, c->param,
                            &c->n_param, &c->fit_median_err, &c->fit_max_err,
                            e);
        c->fit_samples = v.count;
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
                              (long)n, model, r->n_workers);
            (*n_added)++;
        }
    }
    if (r->task_rest_n > 0)
        c->gpu.eff.task_ns = fmax(0, r->task_rest_ns / r->task_rest_n);
    return 0;
}
