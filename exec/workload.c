/* Many GPT models at once on CPU devices, as Hydra runs them: each job
 * cut by the planner into the fewest shards that fit one device, its
 * weights and AdamW state in a host pool, a thread per device running one
 * shard-step at a time (forwards keep only the boundary activation; a
 * backward recomputes its shard from it) through the pipeline's own op
 * code (stage_gpt.c), a copy thread per device loading the next step's
 * state while the current one computes. Every sum runs in the reference
 * trainer's order, so each job ends with the reference's bits. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "exec/runtime.h"
#include "planner/planner.h"
#include "planner/workload.h"
#include "planner/workload_int.h"

static const char *const pol_names[] = {"hydra", "random", "round-robin",
                                        "sequential", "pipeline"};

const char *exec_wl_policy_name(exec_wl_policy p)
{
    return p < EXEC_WL_POLICY_COUNT ? pol_names[p] : "?";
}

int exec_wl_policy_parse(const char *s, exec_wl_policy *p)
{
    for (int i = 0; i < EXEC_WL_POLICY_COUNT; i++)
        if (!strcmp(s, pol_names[i])) {
            *p = (exec_wl_policy)i;
            return 0;
        }
    return -1;
}

/* ---------------------------------------------------------------- jobs */

typedef struct wl_shard {
    exec_stage st;          /* op range and parameter slices (tp 1) */
    int ext_op;             /* the boundary op it reads (first - 1) */
    int embed_sl;           /* the token table's slice when it holds the
                             * embedding of a tied model, -1 */
    int copy_sl;            /* the slice of a tied head's copy, -1: its
                             * gradient goes to the embedding's shard */
    double act_bytes;       /* the executor's activations in a backward */
} wl_shard;

typedef struct wl_job {
    const plan_wl_job *j;   /* lent from the workload */
    wl_prep prep;           /* the planner's cut and shard-steps */
    exec_gpt_config cfg;
    int B, T, steps, warmup, k;
    uint64_t seed;
    size_t P;
    exec_tensor tt[EXEC_P_COUNT];
    exec_xop *xop;
    exec_runtime rt;        /* what stage_gpt.c reads of a run */
    wl_shard *sh;
    int sgd;                /* plain SGD (no moments), else AdamW */
    int defer;              /* clipping: the step waits for every shard's
                             * gradient and is taken on the host */
    int64_t ref_step_ns;    /* the cost model's step of the whole model
                             * on one device (the baseline) */
    plan_result pipe;       /* the pipeline baseline's search */
    int pipe_done;
    double pipe_extra;      /* bytes kept off the planner's budget */
} wl_job;

struct exec_wl {
    exec_wl_opts o;
    plan_wl w;
    prof_topo *t;
    exec_corpus corpus;
    int corpus_ok;
    double budget;
    int n;
    wl_job *job;
};

int exec_wl_jobs(const exec_wl *w) { return w->n; }

int exec_wl_job_sgd(const exec_wl *w, int j) { return w->job[j].sgd; }

void exec_wl_job_info(const exec_wl *w, int j, const char **name,
                      const char **model, int *k, const int **first,
                      int *B, int *T, int *steps)
{
    const wl_job *J = &w->job[j];
    *name = J->j->name;
    *model = J->j->model;
    *k = J->k;
    *first = J->prep.first;
    *B = J->B;
    *T = J->T;
    *steps = J->steps;
}

/* Ops of planner layers [a, b). */
static void layer_ops(const prof_model *m, int a, int b, int *first,
                      int *last)
{
    *first = m->layers[a].first_op;
    *last = m->layers[b - 1].first_op + m->layers[b - 1].n_ops - 1;
}

/* What the executor holds on a device for a backward of layers [a, b):
 * the shard's weights, gradients and AdamW moments, every op's output
 * and what it keeps (recomputed), their gradients, the boundary and its
 * gradient, the tokens. Bytes; *n gets the trained floats. */
static double shard_need(const wl_job *J, int a, int b, size_t *n,
                         double *act)
{
    int f, l, ns;
    layer_ops(J->prep.m, a, b, &f, &l);
    exec_slice *sl = NULL;
    size_t nn = exec_slices_build(J->prep.m, &J->cfg, f, l, 1, 0, 0, 0, &sl,
                                  &ns, NULL);
    free(sl);
    size_t N = (size_t)J->B * J->T;
    double fl = 2.0 * N * J->cfg.hidden + 2.0 * N;
    for (int i = f; i <= l; i++)
        fl += 2.0 * J->xop[i].out_n + J->xop[i].aux_n;
    if (n) *n = nn;
    if (act) *act = 4 * fl;
    return 4 * ((J->sgd || J->defer ? 2.0 : 4.0) * nn + fl);
}

/* The planner's cut of job J with the device's budget less what the
 * executor holds beyond the cost model's count (recomputed activations
 * and their gradients live at once here): the reserve grows until every
 * shard's backward fits. */
static int cut_job(exec_wl *W, wl_job *J, util_err *e)
{
    const prof_gpu *g = prof_topo_gpu(W->t, 0);
    double extra = 0;
    for (int it = 0; it < 64; it++) {
        util_err e2 = {0};
        double reserve = g->mem_bytes - W->budget + extra;
        int rc = wl_prep_job(&J->prep, J->j, W->t, reserve, &e2);
        if (rc == 0 && !J->xop &&
            exec_xops_build(J->prep.m, &J->cfg, J->B, J->T, 1, 0, &J->xop,
                            e)) {
            util_err_prefix(e, "%s", J->j->model_where);
            return -1;
        }
        if (rc) {
            /* the planner found no cut: name the layer that does not fit
             * when the executor's own count says so */
            wl_prep_free(&J->prep);
            prof_model *m = prof_model_load(J->j->model, e);
            if (!m) return util_err_prefix(e, "%s", J->j->model_where);
            int worst = 0;
            double wn = 0;
            if (!J->xop) {
                J->prep.m = m;
                rc = exec_xops_build(m, &J->cfg, J->B, J->T, 1, 0, &J->xop,
                                     e);
                J->prep.m = NULL;
                if (rc) {
                    prof_model_free(m);
                    return util_err_prefix(e, "%s", J->j->model_where);
                }
            }
            wl_job tmp = *J;
            tmp.prep.m = m;
            for (int l = 0; l < m->n_layers; l++) {
                double need = shard_need(&tmp, l, l + 1, NULL, NULL);
                if (need > wn) { wn = need; worst = l; }
            }
            char a[32], b[32];
            if (wn > W->budget)
                util_errf(e, UTIL_EXIT_USAGE, "%s: job '%s' (%s, batch %d x "
                          "%d tokens) does not fit a device of %s even one "
                          "layer per shard: layer %s needs %s (its weights, "
                          "gradients, AdamW state and activations); give a "
                          "larger --mem-per-device%s",
                          J->j->where, J->j->name, J->j->model, J->B, J->T,
                          util_fmt_bytes(W->budget, a, sizeof a),
                          m->layers[worst].name,
                          util_fmt_bytes(wn, b, sizeof b),
                          J->B > 1 ? " or a smaller batch" : "");
            else
                *e = e2;
            e->code = UTIL_EXIT_USAGE;
            prof_model_free(m);
            return -1;
        }
        double over = 0;
        for (int s = 0; s < J->prep.k; s++) {
            double need = shard_need(J, J->prep.first[s],
                                     J->prep.first[s + 1], NULL, NULL);
            if (need - W->budget > over) over = need - W->budget;
        }
        if (over <= 0) return 0;
        wl_prep_free(&J->prep);
        extra += over;
    }
    return util_errf(e, UTIL_EXIT_FAIL, "%s: no shard cut of job '%s' "
                     "settled", J->j->where, J->j->name);
}

/* The shards of a cut job as stages of the pipeline's op code. */
static void build_shards(wl_job *J)
{
    const prof_model *m = J->prep.m;
    J->k = J->prep.k;
    J->sh = util_calloc((size_t)J->k, sizeof *J->sh);
    for (int s = 0; s < J->k; s++) {
        wl_shard *S = &J->sh[s];
        exec_stage *st = &S->st;
        layer_ops(m, J->prep.first[s], J->prep.first[s + 1], &st->first,
                  &st->last);
        st->n_ops = st->last - st->first + 1;
        st->id = st->model_stage = s;
        /* tied_owner 0: a head without the embedding holds a copy that
         * is neither updated nor saved here */
        st->n = exec_slices_build(m, &J->cfg, st->first, st->last, 1, 0, 0, 0,
                                  &st->sl, &st->n_sl, &st->n_frozen);
        exec_stage_op_slices(&J->rt, st);
        S->ext_op = st->first - 1;
        st->n_ext = s > 0;
        st->ext_op = &S->ext_op;
        S->embed_sl = S->copy_sl = -1;
        for (int i = 0; i < st->n_sl; i++) {
            if (st->sl[i].tensor != EXEC_P_WTE || !J->cfg.tied) continue;
            if (st->sl[i].save_owner) S->embed_sl = J->k > 1 ? i : -1;
            else S->copy_sl = i;
        }
        for (int i = st->first; i <= st->last; i++) {
            st->has_embed |= m->ops[i].role == PROF_ROLE_EMBED;
            st->has_loss |= m->ops[i].role == PROF_ROLE_LOSS;
        }
        shard_need(J, J->prep.first[s], J->prep.first[s + 1], NULL,
                   &S->act_bytes);
    }
    J->ref_step_ns = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const sim_stage_cost *c = &J->prep.lc->stage[l];
        J->ref_step_ns += c->f_ns + c->b_ns + c->w_ns + c->opt_ns;
    }
    J->ref_step_ns += J->prep.lc->stage[0].task_ns;
}

/* Every input of a shard's ops is inside it or the boundary before it:
 * what one boundary activation carries (GPT is a chain of layers). */
static int check_chain(const wl_job *J, util_err *e)
{
    for (int s = 0; s < J->k; s++) {
        const exec_stage *st = &J->sh[s].st;
        for (int i = st->first; i <= st->last; i++)
            for (int q = 0; q < J->xop[i].n_in; q++) {
                int p = J->xop[i].in[q];
                if (p < st->first - 1 || p > st->last)
                    return util_errf(e, UTIL_EXIT_USAGE, "%s: op %s of shard "
                                     "%d reads op %s, across more than one "
                                     "shard boundary", J->j->model_where,
                                     J->prep.m->ops[i].name, s,
                                     J->prep.m->ops[p].name);
            }
    }
    return 0;
}

/* The targets of a row of job J: every token's, an encoder's masked. */
static int wl_targets(const wl_job *J)
{
    return J->cfg.encoder ? exec_mlm_count(J->T) : J->T;
}

static int prep_job(exec_wl *W, wl_job *J, int idx, util_err *e)
{
    const plan_wl_job *j = J->j;
    J->sgd = j->optim == PLAN_WL_SGD;
    J->defer = W->o.adamw.clip > 0;
    prof_model_spec spec;
    if (prof_model_spec_get(j->model, &spec, e)) {
        e->code = UTIL_EXIT_USAGE;
        return util_err_prefix(e, "%s", j->model_where);
    }
    char where[400];
    snprintf(where, sizeof where, "%s: model '%s'", j->model_where, j->model);
    if (exec_gpt_config_from_spec(&spec, &J->cfg, where, e)) return -1;
    if (J->cfg.t5)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: an encoder-decoder (T5): "
                         "a workload's jobs are decoders or encoders", where);
    if (exec_corpus_vocab_check(&J->cfg, where, e)) return -1;
    J->B = j->batch;
    J->T = spec.seq_len > 0 &&
                   (exec_rope(&J->cfg) || spec.seq_len <= J->cfg.max_pos)
         ? spec.seq_len : J->cfg.max_pos;
    if (J->T < 1)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: the model has neither a "
                         "sequence length nor a position table", where);
    J->steps = W->o.steps > 0 ? W->o.steps : (int)plan_wl_minibatches(j);
    J->warmup = W->o.warmup >= 0 ? W->o.warmup : J->steps / 10;
    if (J->warmup < 1) J->warmup = 1;
    J->seed = W->o.seed + (uint64_t)idx;
    J->P = exec_gpt_param_table(&J->cfg, J->tt);
    if (cut_job(W, J, e)) return -1;
    /* clipping: the steps as run_step takes them (the host steps the job) */
    if (J->defer) wl_prep_clip(&J->prep, J->sgd);
    J->prep.sj.minibatches = J->steps;
    J->rt.model = J->prep.m;
    J->rt.cfg = J->cfg;
    J->rt.xop = J->xop;
    J->rt.be = &exec_backend_cpu;
    J->rt.mbs = J->B;
    J->rt.T = J->T;
    J->rt.tp = J->rt.dp = J->rt.pipes = 1;
    /* the mean over the batch's targets: an encoder's masked tokens */
    J->rt.scale = 1.0 / ((double)J->B * wl_targets(J));
    build_shards(J);
    return check_chain(J, e);
}

exec_wl *exec_wl_new(const exec_wl_opts *o, util_err *e)
{
    exec_wl *W = util_calloc(1, sizeof *W);
    W->o = *o;
    if (!(o->adamw.clip >= 0)) {
        util_errf(e, UTIL_EXIT_USAGE, "--clip %g: expected 0 (none) or a "
                  "positive norm", o->adamw.clip);
        goto fail;
    }
    if (plan_wl_load(o->workload, &W->w, e)) {
        e->code = UTIL_EXIT_USAGE;
        goto fail;
    }
    char dev[16], *av[2] = {"cpu", dev};
    snprintf(dev, sizeof dev, "x%d", o->devices);
    if (!(W->t = prof_topo_from_args(2, av, NULL, e))) goto fail;
    W->budget = o->mem_bytes > 0 ? o->mem_bytes
              : prof_topo_gpu(W->t, 0)->mem_bytes;
    W->n = W->w.n_jobs;
    W->job = util_calloc((size_t)W->n, sizeof *W->job);
    int T = 0;
    for (int i = 0; i < W->n; i++) {
        W->job[i].j = &W->w.jobs[i];
        if (prep_job(W, &W->job[i], i, e)) goto fail;
        if (W->job[i].T > T) T = W->job[i].T;
    }
    if (exec_corpus_load(&W->corpus, o->data, T, e)) goto fail;
    W->corpus_ok = 1;
    return W;
fail:
    exec_wl_free(W);
    return NULL;
}

void exec_wl_free(exec_wl *W)
{
    if (!W) return;
    for (int i = 0; W->job && i < W->n; i++) {
        wl_job *J = &W->job[i];
        for (int s = 0; J->sh && s < J->k; s++) {
            exec_stage *st = &J->sh[s].st;
            free(st->sl);
            free(st->sl_w);
            free(st->sl_b);
            free(st->sl_l);
            free(st->sl_x);
        }
        free(J->sh);
        free(J->xop);
        wl_prep_free(&J->prep);
        if (J->pipe_done) plan_result_free(&J->pipe);
    }
    free(W->job);
    if (W->corpus_ok) exec_corpus_free(&W->corpus);
    prof_topo_free(W->t);
    plan_wl_free(&W->w);
    free(W);
}

/* ----------------------------------------------------------------- run */

typedef struct jrun {       /* a job during a run */
    float *p, *am, *av;     /* host pool: its state, arena order */
    float *tied_g;          /* a tied table's gradient from the head's
                             * backward, for the embedding's */
    float **act;            /* [k]: the boundary entering shard s */
    float *grad;            /* the boundary gradient going back */
    float *gfull;           /* clipping: the minibatch's gradient, arena
                             * order, filled shard by shard */
    long next, total;       /* shard-steps started, in all */
    int held;               /* device running or holding it next, -1 */
    int64_t remaining_ns;   /* predicted compute of the steps to start */
    double loss;
} jrun;

typedef struct slot {       /* a shard's state in a device's arena */
    int job, shard, opt;    /* job -1: empty; opt: moments and gradients */
    size_t n;
    float *w, *g, *m, *v;
} slot;

struct run;

typedef struct wdev {
    struct run *R;
    int id;
    exec_worker w;
    pthread_t th, cth;
    int started, cstarted;
    /* the copy thread: one request at a time */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int req, done, quit;
    slot *target;
    double busy_ns;
} wdev;

typedef struct run {
    exec_wl *W;
    exec_wl_policy pol;
    jrun *J;
    wdev *D;
    int nd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int rr;
    unsigned rng;
    int64_t t0;
    double host, host_peak, h2d, d2h;
    long prefetched, steps;
    exec_wl_seg *seg;
    int n_seg, cap_seg;
    int failed;
    util_err err;
} run;

static void host_add(run *R, double bytes)
{
    pthread_mutex_lock(&R->mu);
    R->host += bytes;
    if (R->host > R->host_peak) R->host_peak = R->host;
    pthread_mutex_unlock(&R->mu);
}

static void count_copy(run *R, double h2d, double d2h)
{
    pthread_mutex_lock(&R->mu);
    R->h2d += h2d;
    R->d2h += d2h;
    pthread_mutex_unlock(&R->mu);
}

static void fail(run *R, const util_err *e)
{
    pthread_mutex_lock(&R->mu);
    if (!R->failed) R->err = *e;
    R->failed = 1;
    pthread_cond_broadcast(&R->cv);
    pthread_mutex_unlock(&R->mu);
}

/* The job device d runs next, or -1 (R->mu held). Candidates: jobs no
 * device holds, and with `own` (d's current job, lookahead) its next
 * step. Priority first, then the policy's rule, as the planner's
 * scheduler decides (planner/workload_sched.c). */
static int pick(run *R, int d, int own)
{
    int n = R->W->n, nc = 0, *cand = util_malloc(sizeof(int) * (size_t)n);
    for (int j = 0; j < n; j++) {
        const jrun *q = &R->J[j];
        if (q->held == -1 ? q->next < q->total
                          : q->held == d && j == own && q->next + 1 < q->total)
            cand[nc++] = j;
    }
    int best = -1;
    if (nc) {
        int top = R->W->job[cand[0]].j->priority, m = 0;
        for (int i = 1; i < nc; i++)
            if (R->W->job[cand[i]].j->priority > top)
                top = R->W->job[cand[i]].j->priority;
        for (int i = 0; i < nc; i++)
            if (R->W->job[cand[i]].j->priority == top) cand[m++] = cand[i];
        nc = m;
        switch (R->pol) {
        case EXEC_WL_HYDRA:
            /* ties: the job already here, then the lower index */
            best = cand[0];
            for (int i = 1; i < nc; i++) {
                int64_t rc = R->J[cand[i]].remaining_ns,
                        rb = R->J[best].remaining_ns;
                if (rc > rb || (rc == rb && cand[i] == own)) best = cand[i];
            }
            break;
        case EXEC_WL_RANDOM:
            R->rng ^= R->rng << 13;
            R->rng ^= R->rng >> 17;
            R->rng ^= R->rng << 5;
            best = cand[R->rng % (unsigned)nc];
            break;
        default:
            for (int i = 0; i < nc && best < 0; i++)
                if (cand[i] >= R->rr) best = cand[i];
            if (best < 0) best = cand[0];
            R->rr = best + 1 >= n ? 0 : best + 1;
            break;
        }
    }
    free(cand);
    return best;
}

/* The shard and kind of step i of a minibatch of k shards (Hydra's
 * shard alternator: forwards 0..k-2, the last shard's forward and
 * backward at once, backwards k-2..0). */
static int step_shard(int k, long i, int *kind)
{
    *kind = i < k - 1 ? 0 : i == k - 1 ? 1 : 2;
    return i < k ? (int)i : (int)(2 * k - 2 - i);
}

static void slot_free(exec_worker *w, slot *s)
{
    float **a[4] = {&s->w, &s->g, &s->m, &s->v};
    for (int i = 0; i < 4; i++)
        if (*a[i]) {
            exec_mem_put(&w->mem, *a[i], s->n);
            exec_mem_charge(&w->mem, -(double)s->n * sizeof(float));
            *a[i] = NULL;
        }
    s->job = -1;
}

/* The arrays of a shard's state a step needs: weights, and for a
 * backward the gradients and (AdamW stepping on the device) the
 * moments. */
static int job_arrays(const wl_job *J, int opt)
{
    return !opt ? 1 : J->sgd || J->defer ? 2 : 4;
}

/* Arena for job j's shard: `arrays` of n floats (job_arrays). -1 when
 * over the budget (nothing kept). */
static int slot_alloc(exec_worker *w, slot *s, int j, int shard, size_t n,
                      int arrays)
{
    s->n = n;
    float **a[4] = {&s->w, &s->g, &s->m, &s->v};
    int opt = arrays > 1;
    for (int i = 0; i < arrays; i++) {
        if (exec_mem_charge(&w->mem, (double)n * sizeof(float))) {
            slot_free(w, s);
            return -1;
        }
        if (!(*a[i] = exec_mem_get(&w->mem, n ? n : 1))) {
            exec_mem_charge(&w->mem, -(double)n * sizeof(float));
            slot_free(w, s);
            return -1;
        }
    }
    s->job = j;
    s->shard = shard;
    s->opt = opt;
    return 0;
}

/* Copies a shard's state from the host pool into a slot. */
static void slot_load(run *R, int j, slot *s)
{
    const wl_job *J = &R->W->job[j];
    const jrun *q = &R->J[j];
    const exec_stage *st = &J->sh[s->shard].st;
    exec_parr a = {J->tt, NULL, q->p, NULL};
    exec_stage_gather(st, &a, s->w, NULL);
    double b = (double)s->n * sizeof(float);
    if (s->opt && s->m) {
        a.p = q->am;
        exec_stage_gather(st, &a, s->m, NULL);
        a.p = q->av;
        exec_stage_gather(st, &a, s->v, NULL);
        b *= 3;
    }
    count_copy(R, b, 0);
}

static void *copier_main(void *arg)
{
    wdev *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->req && !d->quit) pthread_cond_wait(&d->cv, &d->mu);
        if (d->quit) break;
        slot *s = d->target;
        pthread_mutex_unlock(&d->mu);
        slot_load(d->R, s->job, s);
        pthread_mutex_lock(&d->mu);
        d->req = 0;
        d->done = 1;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static void copier_wait(wdev *d)
{
    pthread_mutex_lock(&d->mu);
    while (d->req) pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

/* A shard's record (the runtime's, with one external input: the
 * activation from the shard before). */
static exec_rec *rec_new(int n_ops)
{
    return exec_rec_new(n_ops, 1);
}

static void rec_free(exec_rec *r, int n_ops)
{
    exec_rec_free(r, n_ops, 1);
}

/* A device tensor of n floats holding h (host), charged to w. */
static int upload(exec_worker *w, exec_view *v, const void *h, size_t n,
                  const char *what, util_err *e)
{
    if (!(v->b = exec_buf_new(&w->mem, n, 0))) return exec_oom(w, what, e);
    v->off = 0;
    v->n = n;
    memcpy(v->b->p, h, n * sizeof(float));
    return 0;
}

static float *host_copy(run *R, const float *p, size_t n)
{
    float *h = util_malloc(n * sizeof *h);
    memcpy(h, p, n * sizeof *h);
    host_add(R, (double)n * sizeof *h);
    count_copy(R, 0, (double)n * sizeof *h);
    return h;
}

static void host_drop(run *R, float **p, size_t n)
{
    if (!*p) return;
    free(*p);
    *p = NULL;
    host_add(R, -(double)n * sizeof(float));
}

/* Clipping: minibatch mb's step of job j on the host, once the last
 * shard's gradient is in q->gfull: the reference trainer's own step over
 * the job's arena in the pool, so the bits are its. */
static void host_step(const run *R, const wl_job *J, jrun *q, long mb)
{
    exec_adamw a = R->W->o.adamw;
    a.lr = exec_lr_at(a.lr, J->warmup, J->steps, (int)mb);
    exec_params_step(NULL, J->tt, J->P, q->p, q->gfull, q->am, q->av, &a,
                     (int)mb + 1, J->sgd);
}

/* One shard-step of job j (its step q->next) with its state in slot s. */
static int run_step(run *R, wdev *d, int j, slot *s, util_err *e)
{
    wl_job *J = &R->W->job[j];
    jrun *q = &R->J[j];
    int k = J->k, kind, ns = 2 * k - 1;
    long mb = q->next / ns;
    int sh = step_shard(k, q->next % ns, &kind);
    wl_shard *S = &J->sh[sh];
    exec_stage *st = &S->st;
    exec_worker *w = &d->w;
    w->rt = &J->rt;
    const exec_backend *bk = J->rt.be;
    size_t N = (size_t)J->B * J->T, NC = N * J->cfg.hidden;
    float *wv[1] = {s->w};
    st->w = wv;
    st->g = s->g;
    st->am = s->m;
    st->av = s->v;
    w->loss_sum = 0;
    int64_t tp = 0;
    int rc = 0;
    exec_rec *r = rec_new(st->n_ops);
    if (st->has_embed || st->has_loss) {
        int *ids = util_malloc(2 * N * sizeof *ids);
        exec_corpus_batch(&R->W->corpus, 0, J->seed, (uint64_t)mb, J->B,
                          J->T, ids, ids + N);
        exec_mlm_mask(&J->cfg, 0, J->seed, (uint64_t)mb, 0, J->B, J->T, ids,
                      ids + N);
        rc = upload(w, &r->ids, ids, 2 * N, "the tokens", e);
        free(ids);
    }
    if (!rc && sh > 0) {
        rc = upload(w, &r->ext[0], q->act[sh], NC, "a boundary activation",
                    e);
        count_copy(R, (double)NC * sizeof(float), 0);
    }
    for (int op = st->first; !rc && op <= st->last; op++)
        rc = exec_op_forward(w, st, r, op, st->has_loss, &tp, e);
    if (!rc && kind == 0) {
        q->act[sh + 1] = host_copy(R, exec_view_p(&r->out[st->n_ops - 1]),
                                   NC);
    } else if (!rc) {
        if (kind == 2) {
            rc = upload(w, &r->dout[st->n_ops - 1], q->grad, NC,
                        "a boundary gradient", e);
            count_copy(R, (double)NC * sizeof(float), 0);
            host_drop(R, &q->grad, NC);
        }
        bk->zero(s->g, s->n);
        /* the tied table's gradient continues from the head's, in the
         * reference's order (head first, then the embedding) */
        if (S->embed_sl >= 0) {
            const exec_slice *t = &st->sl[S->embed_sl];
            memcpy(s->g + t->off, q->tied_g, t->n * sizeof(float));
            count_copy(R, (double)t->n * sizeof(float), 0);
        }
        for (int op = st->last; !rc && op >= st->first; op--)
            rc = exec_op_backward(w, st, r, op, 1, 1, &tp, e);
        if (!rc && sh > 0) {
            q->grad = host_copy(R, exec_view_p(&r->dext[0]), NC);
            host_drop(R, &q->act[sh], NC);
        }
        if (!rc && S->copy_sl >= 0) {
            const exec_slice *t = &st->sl[S->copy_sl];
            memcpy(q->tied_g, s->g + t->off, t->n * sizeof(float));
            count_copy(R, 0, (double)t->n * sizeof(float));
        }
        if (!rc && J->defer) {
            /* clipping: the gradient goes to the host; the last shard's
             * completes it and the step is taken there (the device's
             * copy of the weights is then stale: dropped) */
            exec_parr dst = {J->tt, NULL, q->gfull, NULL};
            exec_stage_scatter(st, s->g, NULL, &dst);
            count_copy(R, 0, (double)s->n * sizeof(float));
            if (kind == 1)
                q->loss = w->loss_sum / ((double)J->B * wl_targets(J));
            if (sh == 0) {
                host_step(R, J, q, mb);
                s->job = -1;
            }
        } else if (!rc) {
            /* AdamW or SGD on the slices this shard owns: elementwise,
             * so a slice gets the reference's bits */
            exec_adamw a = R->W->o.adamw;
            float lr = exec_lr_at(a.lr, J->warmup, J->steps, (int)mb);
            for (int i = 0; i < st->n_sl; i++) {
                const exec_slice *sl = &st->sl[i];
                if (!sl->save_owner) continue;
                float wd = sl->decay ? a.weight_decay : 0.0f;
                if (J->sgd)
                    exec_sgd_update(s->w + sl->off, s->g + sl->off, sl->n,
                                    lr, wd, 1.0f);
                else
                    bk->k->adamw_update(s->w + sl->off, s->m + sl->off,
                                        s->v + sl->off, s->g + sl->off,
                                        sl->n, lr, a.beta1, a.beta2, a.eps,
                                        wd, 1.0f, (int)mb + 1);
            }
            exec_parr dst = {J->tt, NULL, q->p, NULL};
            exec_stage_scatter(st, s->w, NULL, &dst);
            if (!J->sgd) {
                dst.p = q->am;
                exec_stage_scatter(st, s->m, NULL, &dst);
                dst.p = q->av;
                exec_stage_scatter(st, s->v, NULL, &dst);
            }
            count_copy(R, 0, (J->sgd ? 1.0 : 3.0) * (double)s->n *
                                 sizeof(float));
            if (kind == 1)
                q->loss = w->loss_sum / ((double)J->B * wl_targets(J));
        }
    }
    rec_free(r, st->n_ops);
    if (rc)
        util_err_prefix(e, "device %d, job '%s', shard %d (%s step %ld)",
                        d->id, J->j->name, sh,
                        kind == 0 ? "forward" : "backward", mb + 1);
    return rc;
}

/* Device d's thread: a shard-step at a time, the next one picked (and
 * its state loaded by the copy thread) as the current one starts. */
static void *dev_main(void *arg)
{
    wdev *d = arg;
    run *R = d->R;
    exec_wl *W = R->W;
    util_err e = {0};
    d->w.dev.be->bind(&d->w.dev, EXEC_ROLE_COMPUTE, &e);
    slot sl[2] = {{.job = -1}, {.job = -1}};
    slot *cur = &sl[0], *nxt = &sl[1];
    int prefetched = 0;
    pthread_mutex_lock(&R->mu);
    int j;
    for (;;) {
        j = R->failed ? -1 : pick(R, d->id, -1);
        int left = 0;
        for (int i = 0; i < W->n; i++) left |= R->J[i].next < R->J[i].total;
        if (j >= 0 || !left || R->failed) break;
        pthread_cond_wait(&R->cv, &R->mu);
    }
    if (j >= 0) R->J[j].held = d->id;
    pthread_mutex_unlock(&R->mu);
    while (j >= 0) {
        wl_job *J = &W->job[j];
        jrun *q = &R->J[j];
        int kind, sh = step_shard(J->k, q->next % (2 * J->k - 1), &kind);
        int opt = kind != 0;
        if (prefetched) {
            copier_wait(d);
            slot *t = cur;
            cur = nxt;
            nxt = t;
            slot_free(&d->w, nxt);
            prefetched = 0;
        }
        if (!(cur->job == j && cur->shard == sh && cur->opt >= opt)) {
            /* not here: the last slot goes, this one is loaded now */
            slot_free(&d->w, cur);
            if (slot_alloc(&d->w, cur, j, sh, J->sh[sh].st.n,
                           job_arrays(J, opt))) {
                exec_oom(&d->w, "a shard's weights and state", &e);
                util_err_prefix(&e, "device %d, job '%s', shard %d", d->id,
                                J->j->name, sh);
                fail(R, &e);
                break;
            }
            slot_load(R, j, cur);
        }
        /* pick the next step now and load it while this one computes */
        pthread_mutex_lock(&R->mu);
        int64_t t0 = (int64_t)exec_now_ns() - R->t0;
        q->remaining_ns -= J->prep.step[q->next % (2 * J->k - 1)].compute_ns;
        int nj = R->failed ? -1 : pick(R, d->id, j);
        if (nj >= 0) R->J[nj].held = d->id;
        pthread_mutex_unlock(&R->mu);
        /* clipping: after the minibatch's last backward the host steps
         * the job; its next state is loaded once that is done */
        int stepping = J->defer && opt && sh == 0;
        if (nj >= 0 && W->o.prefetch && !(stepping && nj == j)) {
            wl_job *NJ = &W->job[nj];
            long nstep = R->J[nj].next + (nj == j);
            int nk, nsh = step_shard(NJ->k, nstep % (2 * NJ->k - 1), &nk);
            int stays = nj == j && nsh == sh;
            /* the device's use now, the next state, and what this step's
             * activations will take must fit the budget together */
            double room = d->w.mem.budget - d->w.mem.cur - J->sh[sh].act_bytes;
            size_t nn = NJ->sh[nsh].st.n;
            int arr = job_arrays(NJ, nk != 0);
            double need = (double)nn * sizeof(float) * arr;
            if (!stays && (d->w.mem.budget <= 0 || need <= room) &&
                !slot_alloc(&d->w, nxt, nj, nsh, nn, arr)) {
                pthread_mutex_lock(&d->mu);
                d->target = nxt;
                d->req = 1;
                d->done = 0;
                pthread_cond_broadcast(&d->cv);
                pthread_mutex_unlock(&d->mu);
                prefetched = 1;
            }
        }
        int rc = run_step(R, d, j, cur, &e);
        int64_t t1 = (int64_t)exec_now_ns() - R->t0;
        d->busy_ns += (double)(t1 - t0);
        pthread_mutex_lock(&R->mu);
        if (!rc) {
            if (R->n_seg == R->cap_seg) {
                R->cap_seg = R->cap_seg ? 2 * R->cap_seg : 256;
                R->seg = util_realloc(R->seg, sizeof *R->seg *
                                      (size_t)R->cap_seg);
            }
            R->seg[R->n_seg++] = (exec_wl_seg){d->id, j, sh, kind, t0, t1};
            R->steps++;
            R->prefetched += prefetched;
            q->next++;
        }
        if (nj != j) q->held = -1;
        pthread_cond_broadcast(&R->cv);
        pthread_mutex_unlock(&R->mu);
        if (rc) {
            if (prefetched) copier_wait(d);
            fail(R, &e);
            break;
        }
        if (nj < 0) {
            pthread_mutex_lock(&R->mu);
            for (;;) {
                nj = R->failed ? -1 : pick(R, d->id, -1);
                int left = 0;
                for (int i = 0; i < W->n; i++)
                    left |= R->J[i].next < R->J[i].total;
                if (nj >= 0 || !left || R->failed) break;
                pthread_cond_wait(&R->cv, &R->mu);
            }
            if (nj >= 0) R->J[nj].held = d->id;
            pthread_mutex_unlock(&R->mu);
        }
        j = nj;
    }
    if (prefetched) copier_wait(d);
    slot_free(&d->w, &sl[0]);
    slot_free(&d->w, &sl[1]);
    d->w.dev.be->unbind();
    return NULL;
}

static void result_init(exec_wl *W, exec_wl_policy p, exec_wl_result *r)
{
    memset(r, 0, sizeof *r);
    r->policy = p;
    r->n_jobs = W->n;
    r->n_devices = W->o.devices;
    r->busy_s = util_calloc((size_t)W->o.devices, sizeof(double));
    r->predicted_busy_s = util_calloc((size_t)W->o.devices, sizeof(double));
    r->dev_peak_bytes = util_calloc((size_t)W->o.devices, sizeof(double));
    r->job = util_calloc((size_t)W->n, sizeof *r->job);
    for (int j = 0; j < W->n; j++) {
        exec_wl_jobres *o = &r->job[j];
        snprintf(o->name, sizeof o->name, "%s", W->job[j].j->name);
        o->shards = W->job[j].k;
        o->steps = W->job[j].steps;
        o->n_params = W->job[j].P;
    }
}

/* The pipeline baseline's plan of job J: the planner's best synchronous
 * plan of the job alone on every device, in the devices' budget less
 * J->pipe_extra (searched once per budget). NULL with e filled when
 * nothing fits. */
static const plan_alt *pipe_plan(exec_wl *W, wl_job *J, util_err *e)
{
    if (!J->pipe_done) {
        plan_opts o;
        plan_opts_init(&o);
        o.batch = J->B;
        o.reserve_bytes = prof_topo_gpu(W->t, 0)->mem_bytes - W->budget +
                          J->pipe_extra;
        o.progress = 0;
        o.sched_mask = plan_sync_mask(0);
        char hw[32];
        snprintf(hw, sizeof hw, "cpu x%d", W->o.devices);
        if (plan_search(J->prep.m, W->t, J->j->model, hw, &o, &J->pipe, e))
            return NULL;
        J->pipe_done = 1;
    }
    if (!J->pipe.found) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: no pipeline plan of %s on %d "
                  "devices fits (%s)", J->j->where, J->j->model, W->o.devices,
                  J->pipe.advice);
        return NULL;
    }
    return &J->pipe.alt[J->pipe.best];
}

int exec_wl_pipe_plannable(exec_wl *W, util_err *e)
{
    for (int j = 0; j < W->n; j++) {
        wl_job *J = &W->job[j];
        if (!pipe_plan(W, J, e)) return J->pipe_done && !J->pipe.found ? 1 : -1;
    }
    return 0;
}

/* The simulated run: the planner's scheduler over the same cut, with the
 * CPU profile's times. */
static void predict(exec_wl *W, exec_wl_policy p, exec_wl_result *r)
{
    if (p == EXEC_WL_PIPELINE) return;      /* the plans that ran: below */
    if (p == EXEC_WL_SEQUENTIAL) {
        for (int j = 0; j < W->n; j++) {
            const wl_job *J = &W->job[j];
            double s = (double)J->ref_step_ns * 1e-9 * J->steps;
            r->predicted_makespan_s += s;
        }
        /* no host pool: the device holds each job whole (its bytes are
         * the run's device peak, counted as the run goes) */
        r->predicted_busy_s[0] = r->predicted_makespan_s;
        return;
    }
    plan_wl_sjob *sj = util_calloc((size_t)W->n, sizeof *sj);
    for (int j = 0; j < W->n; j++) sj[j] = W->job[j].prep.sj;
    plan_wl_sched_opts o = {0};
    o.policy = p == EXEC_WL_HYDRA ? PLAN_WL_LRTF
             : p == EXEC_WL_RANDOM ? PLAN_WL_RANDOM : PLAN_WL_RR;
    o.seed = W->o.policy_seed;
    /* the devices' copies share the host's links, as the planner's do */
    plan_wl_net net;
    util_err e2 = {0};
    if (!plan_wl_net_build(W->t, &net, &e2)) o.net = &net;
    plan_wl_run pr;
    plan_wl_schedule(sj, W->n, W->o.devices, &o, &pr);
    if (o.net) plan_wl_net_free(&net);
    r->predicted_makespan_s = (double)pr.makespan_ns * 1e-9;
    for (int g = 0; g < W->o.devices; g++)
        r->predicted_busy_s[g] = (double)pr.busy_ns[g] * 1e-9;
    r->predicted_host_peak_bytes = pr.host_peak_bytes;
    r->predicted_copy_bytes = pr.pcie_bytes;
    plan_wl_run_free(&pr);
    free(sj);
}

/* The baseline: each job in turn trained by the reference model on one
 * device, as `sluice exec --model` trains. */
static int run_sequential(exec_wl *W, exec_wl_result *r, util_err *e)
{
    (void)e;
    /* one thread, as `sluice exec --model` trains by default */
    kern_set_threads(1);
    int64_t t0 = (int64_t)exec_now_ns();
    for (int j = 0; j < W->n; j++) {
        const wl_job *J = &W->job[j];
        exec_gpt *m = exec_gpt_new(&J->cfg, J->B, J->T, J->seed);
        /* the device holds the whole job (no host pool, no budget) */
        exec_gpt_mem need = exec_gpt_mem_need(&J->cfg, J->B, J->T);
        if (need.total_bytes > r->dev_peak_bytes[0])
            r->dev_peak_bytes[0] = need.total_bytes;
        size_t N = (size_t)J->B * J->T;
        int *tok = util_malloc(N * sizeof *tok), *tgt = util_malloc(N * sizeof *tgt);
        float loss = 0;
        for (int s = 0; s < J->steps; s++) {
            exec_corpus_batch(&W->corpus, 0, J->seed, (uint64_t)s, J->B, J->T,
                              tok, tgt);
            exec_mlm_mask(&J->cfg, 0, J->seed, (uint64_t)s, 0, J->B, J->T,
                          tok, tgt);
            loss = exec_gpt_forward(m, tok, tgt);
            exec_gpt_zero_grad(m);
            exec_gpt_backward(m);
            exec_adamw a = W->o.adamw;
            a.lr = exec_lr_at(a.lr, J->warmup, J->steps, s);
            if (J->sgd) exec_gpt_sgd_step(m, &a);
            else exec_gpt_step(m, &a, s + 1);
        }
        exec_wl_jobres *o = &r->job[j];
        size_t P = J->P;
        o->params = util_malloc(P * sizeof(float));
        memcpy(o->params, exec_gpt_params(m), P * sizeof(float));
        if (!J->sgd) {
            o->adam_m = util_malloc(P * sizeof(float));
            o->adam_v = util_malloc(P * sizeof(float));
            memcpy(o->adam_m, exec_gpt_adam_m(m), P * sizeof(float));
            memcpy(o->adam_v, exec_gpt_adam_v(m), P * sizeof(float));
        }
        o->last_loss = loss;
        r->steps += J->steps;
        free(tok);
        free(tgt);
        exec_gpt_free(m);
    }
    r->makespan_s = (double)((int64_t)exec_now_ns() - t0) * 1e-9;
    r->busy_s[0] = r->makespan_s;
    return 0;
}

/* One run of job J on plan a by the pipeline executor, from the job's
 * seed on the same batches as the reference. */
static int pipe_once(const exec_wl *W, const wl_job *J, const plan_alt *a,
                     exec_pipe_result *pr, util_err *e)
{
    exec_pipe_opts po;
    memset(&po, 0, sizeof po);
    po.plan_path = J->j->where;
    po.plan = &a->plan;
    po.data = W->o.data;
    po.steps = J->steps;
    po.adamw = W->o.adamw;
    po.warmup = J->warmup;
    po.seed = J->seed;
    po.mem_budget_bytes = W->budget;
    po.xport = EXEC_XPORT_INPROC;
    po.fault_worker = -1;
    return exec_pipe_run(&po, pr, e);
}

/* The pipeline baseline: each job in turn run by the pipeline executor
 * (sluice exec --plan) on the planner's best synchronous plan over every
 * device, from the job's seed on the same batches; its final state is
 * the reference's within the pipeline's summation order. Predicted: the
 * planner's iteration of the plan that ran, times the job's steps. */
static int run_pipeline(exec_wl *W, exec_wl_result *r, util_err *e)
{
    for (int j = 0; j < W->n; j++)
        if (W->job[j].sgd)
            return util_errf(e, UTIL_EXIT_USAGE, "%s: the pipeline baseline "
                             "trains with AdamW only (the pipeline executor's "
                             "optimizer) and job %s is SGD: leave pipeline out "
                             "of --policy", W->job[j].j->where,
                             W->job[j].j->name);
    for (int j = 0; j < W->n; j++) {
        wl_job *J = &W->job[j];
        exec_pipe_result pr;
        const plan_alt *a;
        /* the executor holds more than the simulator plans for (its
         * workspace): a plan the budget cannot take is planned again with
         * an eighth of the budget more held back, as a user would */
        int64_t j0 = 0;
        for (int tries = 0;; tries++) {
            if (!(a = pipe_plan(W, J, e))) return -1;
            j0 = (int64_t)exec_now_ns();
            if (!pipe_once(W, J, a, &pr, e)) break;
            if (tries == 6 || !strstr(e->msg, "out of memory"))
                return util_err_prefix(e, "pipeline baseline, job %s",
                                       J->j->name);
            plan_result_free(&J->pipe);
            J->pipe_done = 0;
            J->pipe_extra += W->budget / 8;
        }
        /* the run that trained (not the planning, nor a refused try):
         * its steps, from the first task to the last (the executor's
         * clock starts with them), as the prediction covers them; the
         * rest of the run is setup */
        double wall = (double)((int64_t)exec_now_ns() - j0) * 1e-9;
        int64_t last = 0;
        for (int ep = 0; ep < pr.epochs; ep++)
            for (int t = 0; t < pr.n_tasks; t++) {
                int64_t x = exec_pipe_times(&pr, ep, t)[EXEC_T_END];
                if (x > last) last = x;
            }
        double train = last > 0 ? (double)last * 1e-9 : wall;
        r->makespan_s += train;
        r->setup_s += wall > train ? wall - train : 0;
        const sim_plan *pl = &a->plan;
        snprintf(r->job[j].plan, sizeof r->job[j].plan, "%s, %dx%dx%d "
                 "(pp x dp x tp), microbatch %d x %d%s", sim_sched_name(
                 pl->sched), pl->pp, pl->dp, pl->tp, pl->mbs, pl->n_mb,
                 J->pipe_extra > 0 ? ", planned in a smaller budget" : "");
        double s = a->iteration_s * J->steps;
        r->predicted_makespan_s += s;
        int used = a->plan.gpus_used ? a->plan.gpus_used : W->o.devices;
        for (int g = 0; g < used && g < W->o.devices; g++)
            r->predicted_busy_s[g] += s;
        /* busy: every compute task of every measured epoch, on each of
         * its device's tensor-parallel ranks (a core each) */
        int tp = pr.costs->tp > 1 ? pr.costs->tp : 1;
        for (int ep = 0; ep < pr.epochs; ep++)
            for (int t = 0; t < pr.n_tasks; t++) {
                const sim_task *k = &pr.ir->tasks[t];
                const int64_t *tm = exec_pipe_times(&pr, ep, t);
                if (k->kind > SIM_OPT || tm[0] < 0 || tm[1] < tm[0])
                    continue;
                for (int q = 0; q < tp; q++)
                    if (k->device * tp + q < W->o.devices)
                        r->busy_s[k->device * tp + q] +=
                            (double)(tm[1] - tm[0]) * 1e-9;
            }
        for (int d = 0; d < pr.n_devices && d < W->o.devices; d++)
            if (pr.peak_bytes[d] > r->dev_peak_bytes[d])
                r->dev_peak_bytes[d] = pr.peak_bytes[d];
        /* the run's final state becomes the job's */
        exec_wl_jobres *o = &r->job[j];
        o->params = pr.params;
        o->adam_m = pr.adam_m;
        o->adam_v = pr.adam_v;
        pr.params = pr.adam_m = pr.adam_v = NULL;
        o->last_loss = pr.steps_run > 0 ? pr.loss[pr.steps_run - 1] : 0;
        r->steps += J->steps;
        exec_pipe_result_free(&pr);
    }
    return 0;
}

static int run_sharded(exec_wl *W, exec_wl_policy p, exec_wl_result *r,
                       util_err *e)
{
    run R;
    memset(&R, 0, sizeof R);
    R.W = W;
    R.pol = p;
    R.nd = W->o.devices;
    R.rng = W->o.policy_seed ? W->o.policy_seed : 1;
    pthread_mutex_init(&R.mu, NULL);
    pthread_cond_init(&R.cv, NULL);
    R.J = util_calloc((size_t)W->n, sizeof *R.J);
    for (int j = 0; j < W->n; j++) {
        const wl_job *J = &W->job[j];
        jrun *q = &R.J[j];
        q->p = util_malloc(J->P * sizeof(float));
        if (!J->sgd) {
            q->am = util_calloc(J->P, sizeof(float));
            q->av = util_calloc(J->P, sizeof(float));
        }
        if (J->defer) q->gfull = util_calloc(J->P, sizeof(float));
        exec_gpt_init_params(&J->cfg, J->seed, q->p);
        R.host += ((J->sgd ? 1.0 : 3.0) + (J->defer ? 1.0 : 0.0)) *
                  (double)J->P * sizeof(float);
        if (J->k > 1 && J->cfg.tied) {
            q->tied_g = util_calloc((size_t)J->cfg.vocab * J->cfg.hidden,
                                    sizeof(float));
            R.host += (double)J->cfg.vocab * J->cfg.hidden * sizeof(float);
        }
        q->act = util_calloc((size_t)J->k, sizeof *q->act);
        q->held = -1;
        q->total = (long)J->steps * (2 * J->k - 1);
        q->remaining_ns = J->prep.mb_compute_ns * J->steps;
    }
    R.host_peak = R.host;
    kern_set_threads(1);
    R.D = util_calloc((size_t)R.nd, sizeof *R.D);
    R.t0 = (int64_t)exec_now_ns();
    int rc = 0;
    for (int g = 0; g < R.nd && !rc; g++) {
        wdev *d = &R.D[g];
        d->R = &R;
        d->id = g;
        d->w.id = d->w.device = g;
        d->w.dev.be = &exec_backend_cpu;
        d->w.dev.worker = g;
        d->w.dev.pin = R.nd > 1;
        exec_backend_cpu.open(&d->w.dev, e);
        exec_mem_init(&d->w.mem, W->budget, &d->w.dev);
        pthread_mutex_init(&d->mu, NULL);
        pthread_cond_init(&d->cv, NULL);
        if (pthread_create(&d->cth, NULL, copier_main, d))
            rc = util_errf(e, UTIL_EXIT_FAIL, "cannot start a copy thread");
        else d->cstarted = 1;
    }
    for (int g = 0; g < R.nd && !rc; g++) {
        if (pthread_create(&R.D[g].th, NULL, dev_main, &R.D[g])) {
            util_err e2;
            util_errf(&e2, UTIL_EXIT_FAIL, "cannot start device %d's thread",
                      g);
            fail(&R, &e2);
        } else {
            R.D[g].started = 1;
        }
    }
    for (int g = 0; g < R.nd; g++)
        if (R.D[g].started) pthread_join(R.D[g].th, NULL);
    int64_t t1 = (int64_t)exec_now_ns();
    for (int g = 0; g < R.nd; g++) {
        wdev *d = &R.D[g];
        if (d->cstarted) {
            pthread_mutex_lock(&d->mu);
            d->quit = 1;
            pthread_cond_broadcast(&d->cv);
            pthread_mutex_unlock(&d->mu);
            pthread_join(d->cth, NULL);
        }
        r->busy_s[g] = d->busy_ns * 1e-9;
        r->dev_peak_bytes[g] = d->w.mem.peak;
        exec_mem_destroy(&d->w.mem);
        exec_backend_cpu.close(&d->w.dev);
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
    }
    if (!rc && R.failed) {
        *e = R.err;
        rc = -1;
    }
    r->makespan_s = (double)(t1 - R.t0) * 1e-9;
    r->host_peak_bytes = R.host_peak;
    r->h2d_bytes = R.h2d;
    r->d2h_bytes = R.d2h;
    r->steps = R.steps;
    r->prefetched = R.prefetched;
    r->seg = R.seg;
    r->n_seg = R.n_seg;
    for (int j = 0; j < W->n; j++) {
        jrun *q = &R.J[j];
        exec_wl_jobres *o = &r->job[j];
        o->params = q->p;
        o->adam_m = q->am;
        o->adam_v = q->av;
        o->last_loss = q->loss;
        free(q->tied_g);
        free(q->gfull);
        for (int s = 0; s < W->job[j].k; s++) free(q->act[s]);
        free(q->act);
        free(q->grad);
    }
    free(R.J);
    free(R.D);
    pthread_mutex_destroy(&R.mu);
    pthread_cond_destroy(&R.cv);
    return rc;
}

int exec_wl_run(exec_wl *W, exec_wl_policy p, exec_wl_result *r, util_err *e)
{
    result_init(W, p, r);
    predict(W, p, r);
    return p == EXEC_WL_SEQUENTIAL ? run_sequential(W, r, e)
         : p == EXEC_WL_PIPELINE   ? run_pipeline(W, r, e)
                                   : run_sharded(W, p, r, e);
}

void exec_wl_result_free(exec_wl_result *r)
{
    if (!r) return;
    for (int j = 0; r->job && j < r->n_jobs; j++) {
        free(r->job[j].params);
        free(r->job[j].adam_m);
        free(r->job[j].adam_v);
    }
    free(r->job);
    free(r->busy_s);
    free(r->predicted_busy_s);
    free(r->dev_peak_bytes);
    free(r->seg);
    memset(r, 0, sizeof *r);
}
