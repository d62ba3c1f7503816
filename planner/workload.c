/* Workloads of many jobs: reading them, cutting each job's model into the
 * fewest shards that fit one GPU (the planner's partitioner over the
 * simulator's per-layer costs), and the shard-steps Hydra runs per
 * minibatch with their PCIe copies to and from host DRAM. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "planner/workload.h"
#include "planner/workload_int.h"

double plan_wl_state_bytes(plan_wl_optim o)
{
    return o == PLAN_WL_SGD ? 8 : 16;
}

void plan_wl_free(plan_wl *w)
{
    if (!w) return;
    free(w->jobs);
    memset(w, 0, sizeof *w);
}

static const char *const optim_names[] = {"adam", "sgd", NULL};

const char *plan_wl_optim_name(plan_wl_optim o)
{
    return o == PLAN_WL_SGD ? optim_names[1] : optim_names[0];
}

int plan_wl_load(const char *path, plan_wl *w, util_err *e)
{
    memset(w, 0, sizeof *w);
    util_jdoc d;
    if (util_jdoc_load(&d, path, NULL, e)) return -1;
    util_jobj root = util_jroot(&d);
    const char *top[] = {"jobs", "note", NULL};
    json_t *arr = NULL;
    int rc = -1;
    if (!json_is_object(root.j)) {
        util_jerr(e, &root, NULL, "expected an object {\"jobs\": [...]}");
        goto out;
    }
    if (util_jkeys(&root, top, e) || util_jarray(&root, "jobs", 1, &arr, e))
        goto out;
    if (!json_array_size(arr)) {
        util_jerr(e, &root, "jobs", "a workload needs at least one job");
        goto out;
    }
    w->n_jobs = (int)json_array_size(arr);
    w->jobs = util_calloc((size_t)w->n_jobs, sizeof *w->jobs);
    for (int i = 0; i < w->n_jobs; i++) {
        util_jobj o;
        plan_wl_job *j = &w->jobs[i];
        const char *keys[] = {"name", "model", "batch", "samples", "epochs",
                              "dataset_samples", "optimizer", "priority", NULL};
        if (util_jelem(&root, "jobs", arr, (size_t)i, &o, e) ||
            util_jkeys(&o, keys, e))
            goto out;
        int line, col;
        util_json_locate(d.text, o.path, &line, &col);
        snprintf(j->where, sizeof j->where, "%s:%d:%d: field '%s'", path,
                 line, col, o.path);
        char mp[300];
        snprintf(mp, sizeof mp, "%s.model", o.path);
        util_json_locate(d.text, mp, &line, &col);
        snprintf(j->model_where, sizeof j->model_where, "%s:%d:%d: field "
                 "'%s'", path, line, col, mp);
        long batch = 0, prio = 0;
        double samples = 0, epochs = 0, ds = 0;
        int optim = PLAN_WL_ADAM;
        if (util_jstr(&o, "model", 1, j->model, sizeof j->model, e) ||
            util_jint(&o, "batch", 1, 1, 1 << 20, &batch, e) ||
            util_jnum(&o, "samples", 0, 1, 1e15, &samples, e) ||
            util_jnum(&o, "epochs", 0, UTIL_POSITIVE, 1e6, &epochs, e) ||
            util_jnum(&o, "dataset_samples", 0, 1, 1e15, &ds, e) ||
            util_jenum(&o, "optimizer", 0, optim_names, &optim, e) ||
            util_jint(&o, "priority", 0, -1000, 1000, &prio, e))
            goto out;
        if (samples != floor(samples)) {
            util_jerr(e, &o, "samples", "%g: a whole number of samples",
                      samples);
            goto out;
        }
        if (ds != floor(ds)) {
            util_jerr(e, &o, "dataset_samples", "%g: a whole number of "
                      "samples", ds);
            goto out;
        }
        /* a spec file named relative to the workload's folder, where it
         * is not found from the working directory */
        const char *slash = strrchr(path, '/');
        size_t ml = strlen(j->model);
        int file = strchr(j->model, '/') ||
                   (ml > 5 && !strcmp(j->model + ml - 5, ".json"));
        if (slash && j->model[0] != '/' && file && access(j->model, F_OK)) {
            char alt[sizeof j->model + 8];
            int n = snprintf(alt, sizeof alt, "%.*s/%s",
                             (int)(slash - path), path, j->model);
            if (n > 0 && (size_t)n < sizeof j->model && !access(alt, F_OK))
                memcpy(j->model, alt, (size_t)n + 1);
        }
        int has_s = json_object_get(o.j, "samples") != NULL;
        int has_e = json_object_get(o.j, "epochs") != NULL;
        int has_d = json_object_get(o.j, "dataset_samples") != NULL;
        if (has_s == (has_e || has_d) || has_e != has_d) {
            util_jerr(e, &o, has_s ? "samples" : "epochs", "give either "
                      "\"samples\" or both \"epochs\" and \"dataset_samples\"");
            goto out;
        }
        j->batch = (int)batch;
        j->samples = samples;
        if (!has_s && plan_wl_epoch_samples(epochs, ds, &j->samples)) {
            util_jerr(e, &o, "epochs", "%g epochs of %.0f samples are %g "
                      "samples: give a whole number", epochs, ds, j->samples);
            goto out;
        }
        /* a job that never fills a batch would be planned as one */
        if (j->samples < j->batch) {
            util_jerr(e, &o, has_s ? "samples" : "epochs", "%.0f samples, "
                      "fewer than one batch of %d: give a batch of %.0f or "
                      "less", j->samples, j->batch, j->samples);
            goto out;
        }
        if (plan_wl_minibatches(j) > PLAN_WL_MAX_STEPS) {
            util_jerr(e, &o, has_s ? "samples" : "epochs", "%.0f minibatches "
                      "of %d are more than sluice runs or simulates (%.0f)",
                      plan_wl_minibatches(j), j->batch,
                      PLAN_WL_MAX_STEPS);
            goto out;
        }
        j->optim = (plan_wl_optim)optim;
        j->priority = (int)prio;
        j->name[0] = 0;
        if (util_jstr(&o, "name", 0, j->name, sizeof j->name, e)) goto out;
        /* a name is a table's cell and a file's word: one line of text */
        for (const char *q = j->name; *q; q++)
            if ((unsigned char)*q < 0x20 || *q == 0x7f) {
                util_jerr(e, &o, "name", "a control character (0x%02x): a "
                          "job's name is one line of text", (unsigned char)*q);
                goto out;
            }
        /* reports, traces and checkpoints tell jobs apart by name */
        for (int k = 0; k < i && j->name[0]; k++)
            if (!strcmp(w->jobs[k].name, j->name)) {
                util_jerr(e, &o, "name", "'%s' names job %d too", j->name,
                          k);
                goto out;
            }
    }
    /* a job without a name is jobI, or jobI.K where another job is named
     * so */
    for (int i = 0; i < w->n_jobs; i++) {
        plan_wl_job *j = &w->jobs[i];
        if (j->name[0]) continue;
        for (int k = 0;; k++) {
            if (k) snprintf(j->name, sizeof j->name, "job%d.%d", i, k);
            else snprintf(j->name, sizeof j->name, "job%d", i);
            int taken = 0;
            for (int q = 0; q < w->n_jobs && !taken; q++)
                taken = q != i && !strcmp(w->jobs[q].name, j->name);
            if (!taken) break;
        }
    }
    rc = 0;
out:
    if (rc) plan_wl_free(w);
    util_jdoc_free(&d);
    return rc;
}

/* ---- sharding ---- */

/* Per-layer costs at the job's batch on GPU 0 of t: the simulator's stage
 * costs, one stage per layer on one device. */
static sim_costs *layer_costs(const prof_model *m, const prof_topo *t,
                              int batch, double state, util_err *e)
{
    int n = m->n_layers;
    int *fo = util_malloc(sizeof(int) * (size_t)n);
    int *lo = util_malloc(sizeof(int) * (size_t)n);
    int *dev = util_calloc((size_t)n, sizeof(int));
    for (int l = 0; l < n; l++) {
        fo[l] = m->layers[l].first_op;
        lo[l] = m->layers[l].first_op + m->layers[l].n_ops - 1;
    }
    sim_cost_opts co = {0};
    co.mbs = batch;
    co.state_bytes_per_param = state;
    co.recompute = SIM_RC_FULL;
    sim_costs *c = sim_costs_build(m, t, n, fo, lo, dev, 1, &co, e);
    free(fo);
    free(lo);
    free(dev);
    return c;
}

static double lstat(const sim_stage_cost *s)
{
    return s->weight_bytes + s->grad_bytes + s->opt_bytes;
}

/* What comes from the host to run a shard: its weights, and in the
 * backward (which steps the optimizer on the GPU) its optimizer state. */
static double lload(const sim_stage_cost *s, int bwd)
{
    return s->weight_bytes + (bwd ? s->opt_bytes : 0);
}

/* Boundary activation entering layer l (0 for the first), per minibatch. */
static double in_act(const prof_model *m, int l, int batch)
{
    if (l == 0) return 0;
    int last = m->layers[l - 1].first_op + m->layers[l - 1].n_ops - 1;
    return prof_model_cut_bytes(m, last) * batch;
}

/* Bytes on the GPU while shard [a, b] runs with its neighbours' state
 * arriving into the second slot. */
static double shard_need(const wl_prep *p, int a, int b, int pa, int pb,
                         int na, int nb)
{
    const sim_costs *c = p->lc;
    double need = in_act(p->m, a, p->job->batch), slot = 0, s2 = 0;
    for (int l = a; l <= b; l++)
        need += lstat(&c->stage[l]) + c->stage[l].act_bytes;
    for (int l = pa; l <= pb && pa >= 0; l++) slot += lload(&c->stage[l], 1);
    for (int l = na; l <= nb && na >= 0; l++) s2 += lload(&c->stage[l], 1);
    return need + fmax(slot, s2);
}

static int fits(const wl_prep *p, const int *first, int k)
{
    for (int s = 0; s < k; s++) {
        int pa = s > 0 ? first[s - 1] : -1, pb = s > 0 ? first[s] - 1 : -1;
        int na = s + 1 < k ? first[s + 1] : -1;
        int nb = s + 1 < k ? first[s + 2] - 1 : -1;
        if (shard_need(p, first[s], first[s + 1] - 1, pa, pb, na, nb) > p->cap)
            return 0;
    }
    return 1;
}

/* The fewest shards that fit, balanced by the partitioner: a unit's static
 * memory counts its state twice (its own slot and the slot the next
 * shard's state is prefetched into), then the exact neighbours are
 * checked. */
static int cut_shards(wl_prep *p, util_err *e)
{
    const sim_costs *c = p->lc;
    int n = p->m->n_layers;
    double *tm = util_calloc((size_t)n, sizeof(double));
    double *ct = util_calloc((size_t)n, sizeof(double));
    double *sm = util_calloc((size_t)n, sizeof(double));
    double *am = util_calloc((size_t)n, sizeof(double));
    double *inf = util_malloc(sizeof(double) * (size_t)n);
    double *cap = util_malloc(sizeof(double) * (size_t)n);
    int *first = util_malloc(sizeof(int) * (size_t)(n + 1));
    for (int l = 0; l < n; l++) {
        const sim_stage_cost *s = &c->stage[l];
        tm[l] = (double)(2 * s->f_ns + s->b_ns + s->w_ns);
        sm[l] = lstat(s) + lload(s, 1);
        am[l] = s->act_bytes + (l + 1 < n ? in_act(p->m, l + 1, p->job->batch) : 0);
        inf[l] = 1;
        cap[l] = p->cap;
    }
    int k = 0;
    for (int kk = 1; kk <= n && !k; kk++) {
        plan_chain ch = {n, tm, ct, sm, am, kk, inf, cap, 1};
        if (plan_partition_chain(&ch, first) >= 0 && fits(p, first, kk)) k = kk;
    }
    if (!k) {
        /* one layer per shard: every boundary a cut, the worst layer named */
        for (int l = 0; l <= n; l++) first[l] = l;
        int worst = 0;
        double wn = 0;
        for (int l = 0; l < n; l++) {
            double need = shard_need(p, l, l, l ? l - 1 : -1, l ? l - 1 : -1,
                                     l + 1 < n ? l + 1 : -1,
                                     l + 1 < n ? l + 1 : -1);
            if (need > wn) { wn = need; worst = l; }
        }
        p->worst_layer = worst;
        p->worst_need = wn;
        util_errf(e, UTIL_EXIT_USAGE, "%s: job '%s' (%s at batch %d) does "
                  "not fit one %s even sharded into single layers with host "
                  "spilling: layer %s needs %.2f GiB of the %.2f GiB left "
                  "after the reserve; %s",
                  p->job->where, p->job->name, p->m->spec.name,
                  p->job->batch, p->gpu->name, p->m->layers[worst].name,
                  wn / 1073741824.0, p->cap / 1073741824.0,
                  p->job->batch > 1 ? "try a smaller batch"
                                    : "its layers need a larger GPU");
    } else {
        p->k = k;
        p->first = util_malloc(sizeof(int) * (size_t)(k + 1));
        memcpy(p->first, first, sizeof(int) * (size_t)(k + 1));
    }
    free(tm); free(ct); free(sm); free(am); free(inf); free(cap); free(first);
    return k ? 0 : -1;
}

/* The 2k-1 shard-steps of a minibatch (Hydra's shard alternator): forwards
 * 1..k-1 keep only their output on the host; the last shard runs forward,
 * loss and backward at once; backwards k-1..1 recompute their forward from
 * the saved input, then backward and the optimizer step on the GPU, and
 * write their state back. Copies at the route's bandwidth plus latency.
 * Clipped (p->clip): a backward loads the weights only, takes no step and
 * sends its gradient to the host instead of its state; the host steps the
 * job after the minibatch (sj.host_step_ns, as a CPU's step is priced:
 * AdamW's bytes, SGD's 12 of their 28). */
static void make_steps(wl_prep *p)
{
    const sim_costs *c = p->lc;
    int clip = p->clip;
    int k = p->k, b = p->job->batch;
    p->n_steps = 2 * k - 1;
    p->step = util_calloc((size_t)p->n_steps, sizeof(plan_wl_step));
    for (int i = 0; i < p->n_steps; i++) {
        int s = i < k ? i : 2 * k - 2 - i;    /* shard */
        int fwd = i < k - 1, last = i == k - 1;
        double f = 0, bw = 0, opt = 0, ld = 0, st = 0, tk = 0;
        for (int l = p->first[s]; l < p->first[s + 1]; l++) {
            const sim_stage_cost *sc = &c->stage[l];
            f += (double)sc->f_ns;
            bw += (double)(sc->b_ns + sc->w_ns);
            opt += clip ? 0 : (double)sc->opt_ns;
            ld += lload(sc, !fwd && !clip);
            st += clip ? sc->train_bytes : sc->weight_bytes + sc->opt_bytes;
            tk = (double)sc->task_ns;
        }
        double in = in_act(p->m, p->first[s], b);
        double out = p->first[s + 1] < p->m->n_layers
                   ? in_act(p->m, p->first[s + 1], b) : 0;
        plan_wl_step *x = &p->step[i];
        x->shard = s;
        if (fwd) {
            x->compute_ns = (int64_t)llround(f + tk);
            x->load_bytes = ld + in;
            x->evict_bytes = out;           /* weights unchanged: dropped */
            x->host_delta_bytes = out;
        } else {
            /* the last shard's forward with its loss, or a recompute of
             * the forward from the saved input; the backward; the
             * optimizer step */
            x->compute_ns = (int64_t)llround(f + bw + opt + tk);
            x->load_bytes = ld + in + (last ? 0 : out);
            x->evict_bytes = st + in;       /* state (clipped: the
                                             * gradient), and the input
                                             * gradient */
            x->host_delta_bytes = -in;      /* the saved input is consumed */
        }
        x->load_ns = (int64_t)llround(x->load_bytes / p->pcie_bw * 1e9 + p->pcie_lat_ns);
        x->evict_ns = (int64_t)llround(x->evict_bytes / p->pcie_bw * 1e9 + p->pcie_lat_ns);
        p->mb_compute_ns += x->compute_ns;
    }
    p->sj.n_steps = p->n_steps;
    p->sj.step = p->step;
    p->sj.host_step_ns = 0;
    if (clip) {
        double params = 0;
        for (int l = 0; l < c->n_stages; l++)
            params += c->stage[l].train_params;
        double adam = sim_cpu_opt_ns(p->t, 0, params);
        p->sj.host_step_ns = (int64_t)llround(clip == 2 ? adam * 12.0 / 28.0
                                                        : adam);
    }
    p->sj.minibatches = p->minibatches;
    p->sj.priority = p->job->priority;
    p->sj.host_bytes = 0;
    /* clipped, the host also holds the minibatch's whole gradient */
    for (int l = 0; l < p->m->n_layers; l++)
        p->sj.host_bytes += c->stage[l].weight_bytes + c->stage[l].opt_bytes +
                            (clip ? c->stage[l].train_bytes : 0);
}

int wl_prep_model(wl_prep *p, const plan_wl_job *j, prof_model *m,
                  const prof_topo *t, double reserve, util_err *e)
{
    memset(p, 0, sizeof *p);
    p->job = j;
    p->t = t;
    p->m = m;
    p->gpu = prof_topo_gpu(t, 0);
    p->cap = p->gpu->mem_bytes - reserve;
    p->state = plan_wl_state_bytes(j->optim);
    p->minibatches = (long)plan_wl_minibatches(j);
    int n;
    int host = prof_topo_gpu_host_mem(t, 0);
    const int *r = host >= 0 ? prof_topo_route(t, t->gpu_node[0], host, &n) : NULL;
    if (!r || !n)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: no route from GPU 0 to "
                         "host memory on %s", j->where, t->name);
    p->pcie_bw = prof_route_bw(t, r, n);
    p->pcie_lat_ns = prof_route_latency_ns(t, r, n);
    if (!(p->lc = layer_costs(p->m, t, j->batch, p->state, e))) {
        util_err_prefix(e, "%s", j->where);
        return -1;
    }
    if (cut_shards(p, e)) {
        p->no_fit = 1;
        return -1;
    }
    make_steps(p);
    p->flops = prof_model_train_flops(p->m, 0) * j->samples;
    return 0;
}

int wl_prep_job(wl_prep *p, const plan_wl_job *j, const prof_topo *t,
                double reserve, util_err *e)
{
    memset(p, 0, sizeof *p);
    prof_model *m = prof_model_load(j->model, e);
    if (!m) {
        util_err_prefix(e, "%s", j->model_where[0] ? j->model_where : j->where);
        e->code = UTIL_EXIT_USAGE;
        return -1;
    }
    return wl_prep_model(p, j, m, t, reserve, e);
}

void wl_prep_clip(wl_prep *p, int sgd)
{
    free(p->step);
    p->step = NULL;
    p->mb_compute_ns = 0;
    p->clip = sgd ? 2 : 1;
    make_steps(p);
}

void wl_prep_free(wl_prep *p)
{
    if (!p) return;
    sim_costs_free(p->lc);
    prof_model_free(p->m);
    free(p->first);
    free(p->step);
    memset(p, 0, sizeof *p);
}

int plan_wl_net_build(const prof_topo *t, plan_wl_net *n, util_err *e)
{
    memset(n, 0, sizeof *n);
    n->n_gpus = t->n_gpus;
    n->n_dl = 2 * t->n_links;
    n->cap = util_calloc((size_t)(n->n_dl ? n->n_dl : 1), sizeof(double));
    for (int dl = 0; dl < n->n_dl; dl++)
        n->cap[dl] = t->links[dl / 2].bw_bytes_per_s * 1e-9;
    for (int d = 0; d < 2; d++) {
        n->route[d] = util_calloc((size_t)t->n_gpus, sizeof(int *));
        n->len[d] = util_calloc((size_t)t->n_gpus, sizeof(int));
        n->lat_ns[d] = util_calloc((size_t)t->n_gpus, sizeof(double));
    }
    for (int g = 0; g < t->n_gpus; g++) {
        int host = prof_topo_gpu_host_mem(t, g);
        for (int d = 0; d < 2; d++) {
            int k = 0;
            const int *r = host < 0 ? NULL
                         : d ? prof_topo_route(t, t->gpu_node[g], host, &k)
                             : prof_topo_route(t, host, t->gpu_node[g], &k);
            if (!r || !k) {
                plan_wl_net_free(n);
                return util_errf(e, UTIL_EXIT_USAGE, "no route between GPU "
                                 "%d and host memory on %s", g, t->name);
            }
            n->route[d][g] = util_malloc(sizeof(int) * (size_t)k);
            memcpy(n->route[d][g], r, sizeof(int) * (size_t)k);
            n->len[d][g] = k;
            n->lat_ns[d][g] = prof_route_latency_ns(t, r, k);
        }
    }
    return 0;
}

void plan_wl_net_free(plan_wl_net *n)
{
    if (!n) return;
    for (int d = 0; d < 2; d++) {
        for (int g = 0; n->route[d] && g < n->n_gpus; g++) free(n->route[d][g]);
        free(n->route[d]);
        free(n->len[d]);
        free(n->lat_ns[d]);
    }
    free(n->cap);
    memset(n, 0, sizeof *n);
}

double plan_wl_net_share(const plan_wl_net *n, int k, int dir)
{
    if (k > n->n_gpus) k = n->n_gpus;
    if (k < 1) return 0;
    size_t nd = (size_t)(n->n_dl ? n->n_dl : 1);
    sim_maxmin_scratch w = {util_calloc(nd, sizeof(double)),
                            util_calloc(nd, sizeof(int)),
                            util_calloc(nd, sizeof(int)),
                            util_calloc((size_t)k, 1)};
    const int **r = util_calloc((size_t)k, sizeof *r);
    double *rate = util_calloc((size_t)k, sizeof *rate);
    for (int g = 0; g < k; g++) r[g] = n->route[dir][g];
    sim_maxmin(k, r, n->len[dir], n->cap, rate, &w);
    double m = rate[0];
    for (int g = 1; g < k; g++) if (rate[g] < m) m = rate[g];
    free(w.rem);
    free(w.cnt);
    free(w.touched);
    free(w.frozen);
    free(r);
    free(rate);
    return m * 1e9;
}
