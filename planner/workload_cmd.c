/* `sluice plan --models NAME xN | --workload FILE`: Hydra's shard
 * schedules (Sharded-LRTF, random, round robin) against running the jobs
 * one at a time as pipelines, each on its own GPU, or packed on groups;
 * makespan, utilisation, host DRAM and PCIe per policy, the lower bound,
 * a Gantt chart and a trace. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "planner/workload.h"
#include "planner/workload_int.h"
#include "plots/plots.h"

int plan_wl_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--models") || !strcmp(argv[i], "--workload"))
            return 1;
    return 0;
}

typedef struct wcmd {
    int hw_at, hw_n;
    char **argv;
    const char *wfile, *plot, *trace;
    int json, batch;
    double samples, epochs, dataset;
    int optim;
    int optim_given;          /* --optimizer was on the command line */
    unsigned seed;
    double reserve;
    prof_hw_opts ho;
    plan_wl w;
} wcmd;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: sluice plan --hw GPU xN --models NAME xK [NAME xK...]\n"
        "                   (--samples N | --epochs E --samples N) [options]\n"
        "       sluice plan --hw GPU xN --workload FILE.json [options]\n\n"
        "Many jobs at once: each model cut into the fewest shards that fit one\n"
        "GPU, state spilled to host DRAM between uses, shards of the jobs\n"
        "scheduled over the GPUs (Hydra's Sharded-LRTF, random, round robin),\n"
        "against the jobs one at a time as the planner's best pipeline, each\n"
        "on its own GPU (ZeRO-Offload where it does not fit) and packed on\n"
        "GPU groups.\n\noptions:\n"
        "  --batch N          samples per minibatch of --models jobs (default:\n"
        "                     the model's)\n"
        "  --samples N        samples each --models job trains; with --epochs\n"
        "                     E, the dataset's size (E passes over it; also\n"
        "                     --dataset-samples N)\n"
        "  --optimizer adam|sgd  of --models jobs (default adam)\n"
        "  --seed N           the random policy's seed (default 1)\n"
        "  --reserve SIZE     memory kept per GPU (default 1G)\n"
        "  --host-mem SIZE, --nvme N[:DRIVE], --gpus-per-server N, --pcie-gen G\n"
        "                      adjust the server template\n"
        "  --json             the answer as JSON\n"
        "  --plot PREFIX      Gantt chart of Sharded-LRTF (PREFIX-gantt.png/svg),\n"
        "                     its copies as thin bars under each GPU\n"
        "  --trace FILE       Perfetto trace of Sharded-LRTF: compute and\n"
        "                     every copy in and out\n"
        "\nworkload file: {\"jobs\": [{\"model\": \"gpt2-xl\", \"batch\": 16,\n"
        "  \"samples\": 100000 | \"epochs\": 1, \"dataset_samples\": N,\n"
        "  \"optimizer\": \"adam\", \"priority\": 0, \"name\": \"lr3e-4\"}, ...]}\n"
        "\n" UTIL_SIZE_HELP
        "\nexit codes: 0 answered, 1 no policy runs the workload on the GPUs,\n"
        "2 bad usage or input (a job that no GPU holds even cut into shards,\n"
        "named with its file, line and field; a host too small for the DRAM\n"
        "every policy that fits the GPUs needs)\n");
}

static int add_jobs(wcmd *c, const char *model, long n)
{
    c->w.jobs = util_realloc(c->w.jobs, sizeof(plan_wl_job) *
                             (size_t)(c->w.n_jobs + n));
    for (long i = 0; i < n; i++) {
        plan_wl_job *j = &c->w.jobs[c->w.n_jobs++];
        memset(j, 0, sizeof *j);
        snprintf(j->model, sizeof j->model, "%s", model);
        snprintf(j->name, sizeof j->name, "%.50s.%ld", model, i);
        snprintf(j->where, sizeof j->where, "--models %.200s", model);
    }
    return 0;
}

static int parse(int argc, char **argv, wcmd *c, util_err *e)
{
    memset(c, 0, sizeof *c);
    c->argv = argv;
    c->hw_at = -1;
    c->seed = 1;
    c->reserve = PLAN_DEFAULT_RESERVE;
    int models = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
#define NEED() do { if (!v) return util_errf(e, UTIL_EXIT_USAGE, "%s needs a value", a); i++; } while (0)
        if (!strcmp(a, "--hw")) {
            c->hw_at = i + 1;
            c->hw_n = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) { i++; c->hw_n++; }
            if (!c->hw_n)
                return util_errf(e, UTIL_EXIT_USAGE, "--hw needs a GPU type "
                                 "and count, e.g. --hw rtx2080ti x8");
        } else if (!strcmp(a, "--models")) {
            models = 1;
            int any = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
                const char *name = argv[++i];
                long k = 1;
                if (i + 1 < argc && argv[i + 1][0] == 'x') {
                    if (util_parse_int(argv[i + 1] + 1, 1, 4096, &k))
                        return util_errf(e, UTIL_EXIT_USAGE, "--models %s %s: "
                                         "expected a count from x1 to "
                                         "x4096, such as x12", name,
                                         argv[i + 1]);
                    i++;
                }
                add_jobs(c, name, k);
                any = 1;
            }
            if (!any)
                return util_errf(e, UTIL_EXIT_USAGE, "--models needs a model "
                                 "and a count, e.g. --models gpt2-xl x12");
        } else if (!strcmp(a, "--workload")) { NEED(); c->wfile = v; }
        else if (!strcmp(a, "--json")) c->json = 1;
        else if (!strcmp(a, "--no-progress")) ;
        else if (!strcmp(a, "--plot")) {
            NEED();
            if (plot_prefix_check(v, e)) return -1;
            c->plot = v;
        } else if (!strcmp(a, "--trace")) { NEED(); c->trace = v; }
        else if (!strcmp(a, "--batch")) {
            NEED();
            if (util_parse_int(v, 1, 1 << 20, &n))
                return util_errf(e, UTIL_EXIT_USAGE, "--batch '%s': expected a positive integer", v);
            c->batch = (int)n;
        } else if (!strcmp(a, "--samples") || !strcmp(a, "--dataset-samples") ||
                   !strcmp(a, "--epochs")) {
            NEED();
            double x = 0;
            if (util_parse_double(v, &x) || !(x > 0) || x > 1e15)
                return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': expected a "
                                 "positive number%s", a, v,
                                 x > 1e15 ? " up to 1e15" : "");
            if (a[2] != 'e' && x != floor(x))
                return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': a whole "
                                 "number of samples", a, v);
            if (a[2] == 's') c->samples = x;
            else if (a[2] == 'd') c->dataset = x;
            else c->epochs = x;
        } else if (!strcmp(a, "--optimizer")) {
            NEED();
            c->optim_given = 1;
            if (!strcmp(v, "adam")) c->optim = PLAN_WL_ADAM;
            else if (!strcmp(v, "sgd")) c->optim = PLAN_WL_SGD;
            else return util_errf(e, UTIL_EXIT_USAGE, "--optimizer '%s': "
                                  "expected adam or sgd", v);
        } else if (!strcmp(a, "--seed")) {
            NEED();
            if (util_parse_int(v, 0, 4294967295L, &n))
                return util_errf(e, UTIL_EXIT_USAGE, "--seed '%s': expected "
                                 "a non-negative integer", v);
            c->seed = (unsigned)n;
        } else if (!strcmp(a, "--reserve")) {
            NEED();
            if (util_parse_size(v, &c->reserve))
                return util_errf(e, UTIL_EXIT_USAGE, "--reserve '%s': expected a size such as 1G", v);
        } else if ((n = prof_hw_opts_arg(argc, argv, &i, &c->ho, e))) {
            if (n < 0) return -1;
        } else {
            const char *opts[] = {"--hw", "--models", "--workload", "--json",
                                  "--plot", "--trace", "--batch", "--samples",
                                  "--epochs", "--dataset-samples", "--optimizer",
                                  "--seed", "--reserve", "--host-mem",
                                  "--nvme", "--gpus-per-server", "--pcie-gen",
                                  "--no-progress"};
            const char *near = util_closest(a, opts, sizeof opts / sizeof *opts);
            /* a workload's answer is no plan file: what --out would have
             * written is --json's, to stdout */
            if (!strcmp(a, "--out"))
                return util_errf(e, UTIL_EXIT_USAGE, "unknown option '--out' "
                                 "for a workload: its answer is no plan file; "
                                 "--json prints it as JSON (redirect it to "
                                 "a file), --plot and --trace draw it");
            return util_errf(e, UTIL_EXIT_USAGE, "unknown option '%s' for a "
                             "workload%s%s%s", a,
                             near ? " (did you mean '" : "", near ? near : "",
                             near ? "'?)" : "");
        }
#undef NEED
    }
    if (c->hw_at < 0)
        return util_errf(e, UTIL_EXIT_USAGE, "--hw is required, e.g. --hw rtx2080ti x8");
    if (models == !!c->wfile)
        return util_errf(e, UTIL_EXIT_USAGE, "give --models NAME xN or "
                         "--workload FILE, not both");
    const char *ins[] = {c->wfile};
    const char *oflag[] = {"--trace", "--plot"};
    const char *opath[] = {c->trace, c->plot};
    const int opre[] = {0, UTIL_OUT_PLOT};
    if (util_out_check("--trace", c->trace, 0, ins, 1, e) ||
        util_outs_apart(2, oflag, opath, opre, ins, 1, e))
        return -1;
    if (c->wfile) {
        if (c->samples || c->epochs || c->dataset || c->batch ||
            c->optim_given)
            return util_errf(e, UTIL_EXIT_USAGE, "--workload: batch, "
                             "samples and optimizer come from the file, not "
                             "the command line");
        return plan_wl_load(c->wfile, &c->w, e);
    }
    /* --epochs E --samples N: E passes over a dataset of N samples */
    if (c->epochs && c->samples && c->dataset)
        return util_errf(e, UTIL_EXIT_USAGE, "--epochs with --samples and "
                         "--dataset-samples: give the dataset's size once");
    if (c->dataset && !c->epochs)
        return util_errf(e, UTIL_EXIT_USAGE, "--dataset-samples is the "
                         "dataset's size for --epochs E: give --epochs too, "
                         "or --samples N alone (each job's samples)");
    if (c->epochs && c->samples) c->dataset = c->samples, c->samples = 0;
    double whole = c->samples;
    if (c->epochs && c->dataset &&
        plan_wl_epoch_samples(c->epochs, c->dataset, &whole))
        return util_errf(e, UTIL_EXIT_USAGE, "--epochs %g of %.0f samples "
                         "are %g samples: give a whole number", c->epochs,
                         c->dataset, whole);
    if (!c->samples == !(c->epochs && c->dataset) || (c->epochs && !c->dataset))
        return util_errf(e, UTIL_EXIT_USAGE, "--models needs --samples N "
                         "(each job's samples), or --epochs E with the "
                         "dataset's size (--samples N or --dataset-samples "
                         "N)");
    for (int i = 0; i < c->w.n_jobs; i++) {
        plan_wl_job *j = &c->w.jobs[i];
        j->samples = whole;
        j->optim = (plan_wl_optim)c->optim;
        if (c->batch) j->batch = c->batch;
        else {
            prof_model_spec s;
            if (prof_model_spec_get(j->model, &s, e)) {
                util_err_prefix(e, "%s", j->where);
                e->code = UTIL_EXIT_USAGE;
                return -1;
            }
            j->batch = s.batch > 0 ? s.batch : PLAN_DEFAULT_BATCH;
        }
        if (j->samples < j->batch)
            return util_errf(e, UTIL_EXIT_USAGE, "%s: %.0f samples, fewer "
                             "than one batch of %d: give --batch %.0f or less",
                             c->samples ? "--samples" : "--epochs",
                             j->samples, j->batch, j->samples);
        if (plan_wl_minibatches(j) > PLAN_WL_MAX_STEPS)
            return util_errf(e, UTIL_EXIT_USAGE, "%s: %.0f minibatches of %d "
                             "are more than sluice runs or simulates (%.0f)",
                             c->samples ? "--samples" : "--epochs",
                             plan_wl_minibatches(j), j->batch,
                             PLAN_WL_MAX_STEPS);
    }
    return 0;
}

/* ---- one policy's answer ---- */

typedef struct pol {
    char name[32];
    int feasible;
    char note[256];
    double makespan_s;
    double *util;             /* [n_gpus]; NULL: only the mean is known */
    double util_mean;
    double host_peak_bytes;
    double pcie_bytes;
    char link[96];            /* shard policies: the busiest link, "" */
    double link_busy;         /* its bytes' share of the makespan */
    int host_short;           /* refused for the host DRAM it lacks */
} pol;

/* A shard policy's result, its run's makespan and traffic multiplied by
 * scale (a scaled-down run's: its utilisation and host peak as run). */
static void pol_from_run(pol *p, const char *name, const plan_wl_run *r,
                         double scale)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->feasible = 1;
    p->makespan_s = (double)r->makespan_ns * 1e-9 * scale;
    p->util = util_calloc((size_t)r->n_gpus, sizeof(double));
    for (int g = 0; g < r->n_gpus; g++) {
        p->util[g] = r->makespan_ns ? (double)r->busy_ns[g] / (double)r->makespan_ns : 0;
        p->util_mean += p->util[g] / r->n_gpus;
    }
    p->host_peak_bytes = r->host_peak_bytes;
    p->pcie_bytes = r->pcie_bytes * scale;
}

/* The most GPUs one node of kind k of t has as its children (a PCIe
 * switch's, a CPU socket's below its switches), 0 when none. */
static int gpus_under(const prof_topo *t, prof_node_kind k)
{
    int best = 0;
    for (int v = 0; v < t->n_nodes; v++) {
        if (t->nodes[v].kind != k) continue;
        int n = 0;
        for (int gi = 0; gi < t->n_gpus; gi++) {
            /* the GPU's route to its host memory passes v */
            int h = prof_topo_gpu_host_mem(t, gi), len = 0;
            const int *r = h >= 0 ? prof_topo_route(t, t->gpu_node[gi], h,
                                                    &len) : NULL;
            for (int q = 0; q < len; q++) {
                const prof_link *l = &t->links[r[q] / 2];
                if (l->a == v || l->b == v) { n++; break; }
            }
        }
        if (n > best) best = n;
    }
    return best;
}

/* The planner's best synchronous plan of job p alone on g GPUs of its
 * type: its iteration and the mean compute-busy fraction of the GPUs it
 * uses. Returns 1 found, 0 nothing fits, -1 error. */
static int best_plan(const wl_prep *p, int g, const int share[3],
                     const prof_hw_opts *ho, double reserve, double *iter_s,
                     double *busy, double *host, double *pcie, util_err *e)
{
    prof_topo *t = prof_topo_template(p->gpu->name, g, ho, e);
    if (!t) return -1;
    /* Groups running at once on one server share its host: each plans
     * with its share of the DRAM and drives (room and bandwidth, which
     * the CPU's optimizer steps stream through; share[0] groups a server),
     * of each socket's memory link (share[1] a socket) and of each PCIe
     * switch's uplink (share[2] a switch), which copies through host
     * memory cross. */
    for (int i = 0; share[0] > 1 && i < t->n_nodes; i++) {
        prof_node *nd = &t->nodes[i];
        if (nd->kind != PROF_NODE_DRAM && nd->kind != PROF_NODE_NVME)
            continue;
        nd->capacity_bytes /= share[0];
        nd->read_bw_bytes_per_s /= share[0];
        nd->write_bw_bytes_per_s /= share[0];
    }
    for (int i = 0; i < t->n_links; i++) {
        prof_link *l = &t->links[i];
        prof_node_kind ka = t->nodes[l->a].kind, kb = t->nodes[l->b].kind;
        int cpu = ka == PROF_NODE_CPU || kb == PROF_NODE_CPU;
        if (l->kind == PROF_LINK_MEMORY && cpu && share[1] > 1)
            l->bw_bytes_per_s /= share[1];
        else if (l->kind == PROF_LINK_PCIE && cpu && share[2] > 1 &&
                 (ka == PROF_NODE_PCIE_SWITCH || kb == PROF_NODE_PCIE_SWITCH))
            l->bw_bytes_per_s /= share[2];
    }
    plan_opts o;
    plan_opts_init(&o);
    o.batch = p->job->batch;
    o.reserve_bytes = reserve;
    o.state_bytes_per_param = p->state;
    o.progress = 0;
    /* synchronous training, as every job of the workload is */
    o.sched_mask = plan_sync_mask(0);
    char hw[64];
    snprintf(hw, sizeof hw, "%s x%d", p->gpu->name, g);
    plan_result r;
    int rc = plan_search(p->m, t, p->job->model, hw, &o, &r, e);
    if (rc == 0 && r.found) {
        const sim_plan *pl = &r.alt[r.best].plan;
        sim_costs *cs = NULL;
        sim_ir *ir = NULL;
        sim_engine *en = NULL;
        sim_result res;
        rc = plan_simulate(pl, p->m, t, r.reserve_bytes, 0, &cs, &ir, &en, &res, e);
        if (rc == 0) {
            *iter_s = r.alt[r.best].iteration_s;
            double b = 0;
            for (int d = 0; d < res.n_devices; d++)
                b += (double)(res.dev[d].compute_ns + res.dev[d].recompute_ns +
                              res.dev[d].opt_ns) / (double)res.iteration_ns;
            int used = pl->gpus_used ? pl->gpus_used : g;
            *busy = b / res.n_devices * used / g;
            *host = cs->host_bytes; /* stage tiers' or offload's state */
            /* an iteration's sends and host copies over PCIe */
            *pcie = sim_engine_link_kind_bytes(en, PROF_LINK_PCIE);
            rc = 1;
        }
        sim_engine_free(en);
        sim_ir_free(ir);
        sim_costs_free(cs);
    }
    plan_result_free(&r);
    prof_topo_free(t);
    return rc;
}

/* ZeRO-Offload on one GPU (Ren et al., ATC'21): fp16 weights and gradients
 * on the GPU, fp32 master and optimizer state on the host, the update on
 * the CPU. Full recomputation; the batch split into microbatches until
 * the activations fit. Per iteration: the compute, gradients to the host
 * behind the backward, the CPU step (memory-bound: 28 bytes a parameter
 * over host DRAM shared by `concurrent` jobs), the weights back; copies
 * at d2h and h2d bytes/s, each GPU's share of the links while every job
 * copies at once. Returns the iteration in s, or -1 when no microbatch
 * fits. */
static double zero_offload_s(const wl_prep *p, int concurrent, double d2h_bw,
                             double h2d_bw, util_err *e)
{
    double wb = prof_dtype_bytes(p->m->spec.dtype);
    for (int mbs = p->job->batch; mbs >= 1; mbs /= 2) {
        if (p->job->batch % mbs) continue;
        util_err e2 = {0};
        sim_cost_opts co = {0};
        co.mbs = mbs;
        co.state_bytes_per_param = p->state;
        co.recompute = SIM_RC_FULL;
        int f0 = 0, l0 = p->m->n_ops - 1, d0 = 0;
        sim_costs *c = sim_costs_build(p->m, p->t, 1, &f0, &l0, &d0, 1, &co, &e2);
        if (!c) { *e = e2; return -2; }
        const sim_stage_cost *s = &c->stage[0];
        double need = 2 * wb * s->params + s->keep_bytes +
                      fmax(s->fwd_ws_bytes, s->rec_ws_bytes) +
                      s->fwd_scratch_bytes;
        double nmb = (double)p->job->batch / mbs;
        double fw = (double)s->f_ns * nmb * 1e-9;
        double bw = (double)(s->r_ns + s->b_ns + s->w_ns) * nmb * 1e-9;
        double params = s->params;
        sim_costs_free(c);
        if (need > p->cap) continue;
        double d2h = wb * params / d2h_bw;
        double cpu = sim_cpu_opt_ns(p->t, 0, params) * 1e-9 * concurrent;
        return fw + fmax(bw, d2h) + cpu + wb * params / h2d_bw;
    }
    return -1;
}

/* Longest job first onto the group free earliest; returns the makespan. */
static double lpt(const double *dur, int n, int groups)
{
    double *load = util_calloc((size_t)groups, sizeof(double));
    int *done = util_calloc((size_t)n, sizeof(int));
    double ms = 0;
    for (int k = 0; k < n; k++) {
        int j = -1;
        for (int i = 0; i < n; i++)
            if (!done[i] && (j < 0 || dur[i] > dur[j])) j = i;
        done[j] = 1;
        int g = 0;
        for (int q = 1; q < groups; q++) if (load[q] < load[g]) g = q;
        load[g] += dur[j];
        if (load[g] > ms) ms = load[g];
    }
    free(load);
    free(done);
    return ms;
}

/* Baselines: (a) one job at a time over all GPUs, (b) a job per GPU,
 * (c) jobs packed on groups of GPUs; plans shared by jobs alike. */
static int baselines(wl_prep *P, int n, const prof_topo *t,
                     const plan_wl_net *net, const wcmd *c, pol *out,
                     util_err *e)
{
    int ng = t->n_gpus;
    const char *unit = prof_topo_unit(t);
    int sizes[8], ns = 0;
    for (int g = ng; g >= 1; g /= 2)
        if (ng % g == 0 && ns < 8) sizes[ns++] = g;
    double *it = util_malloc(sizeof(double) * (size_t)(n * ns));
    double *bz = util_malloc(sizeof(double) * (size_t)(n * ns));
    double *hb = util_calloc((size_t)(n * ns), sizeof(double));
    double *pc = util_calloc((size_t)(n * ns), sizeof(double));
    /* groups of sizes[s] GPUs at once on one server, a socket and a
     * switch, no more than there are jobs: what each group's plan shares
     * the host with (shr[s]) */
    int per[3] = {t->gpus_per_server > 0 && t->gpus_per_server < ng
                  ? t->gpus_per_server : ng, gpus_under(t, PROF_NODE_CPU),
                  gpus_under(t, PROF_NODE_PCIE_SWITCH)};
    int shr[8][3];
    for (int s = 0; s < ns; s++)
        for (int k = 0; k < 3; k++) {
            shr[s][k] = per[k] / sizes[s] < n ? per[k] / sizes[s] : n;
            if (shr[s][k] < 1) shr[s][k] = 1;
        }
    for (int j = 0; j < n; j++)
        for (int s = 0; s < ns; s++) {
            int same = -1;
            for (int q = 0; q < j && same < 0; q++)
                if (!strcmp(P[q].job->model, P[j].job->model) &&
                    P[q].job->batch == P[j].job->batch && P[q].state == P[j].state)
                    same = q;
            if (same >= 0) {
                it[j * ns + s] = it[same * ns + s];
                bz[j * ns + s] = bz[same * ns + s];
                hb[j * ns + s] = hb[same * ns + s];
                pc[j * ns + s] = pc[same * ns + s];
                continue;
            }
            int rc = best_plan(&P[j], sizes[s], shr[s], &c->ho, c->reserve,
                               &it[j * ns + s], &bz[j * ns + s],
                               &hb[j * ns + s], &pc[j * ns + s], e);
            if (rc < 0) { free(it); free(bz); free(hb); free(pc); return -1; }
            if (rc == 0) it[j * ns + s] = -1;
        }
    /* (a) */
    pol *a = &out[0];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "pipeline-each");
    a->feasible = 1;
    double work = 0;
    for (int j = 0; j < n; j++) {
        if (it[j * ns] < 0) {
            a->feasible = 0;
            snprintf(a->note, sizeof a->note, "%s fits no plan on %d %s%s",
                     P[j].job->name, ng, unit, ng == 1 ? "" : "s");
            break;
        }
        double d = it[j * ns] * (double)P[j].minibatches;
        a->makespan_s += d;
        a->pcie_bytes += pc[j * ns] * (double)P[j].minibatches;
        work += d * bz[j * ns];
        a->host_peak_bytes = fmax(a->host_peak_bytes, hb[j * ns]);
    }
    if (a->feasible) {
        a->util_mean = work / a->makespan_s;
        if (ng == 1)
            snprintf(a->note, sizeof a->note, "jobs in turn, planner's best "
                     "synchronous plan on the %s", unit);
        else
            snprintf(a->note, sizeof a->note, "jobs in turn, planner's best "
                     "synchronous plan on all %d %ss", ng, unit);
    }
    /* (b) */
    pol *b = &out[1];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "gpu-each");
    b->feasible = 1;
    double *dur = util_malloc(sizeof(double) * (size_t)n);
    int conc = n < ng ? n : ng, offl = 0;
    /* each GPU's share of the links while every job copies at once */
    double d2h = plan_wl_net_share(net, conc, 1),
           h2d = plan_wl_net_share(net, conc, 0);
    work = 0;
    for (int j = 0; j < n && b->feasible; j++) {
        double i1 = it[j * ns + ns - 1];
        if (i1 < 0) {
            i1 = zero_offload_s(&P[j], conc, d2h, h2d, e);
            if (i1 == -2) {
                free(it); free(bz); free(hb); free(pc); free(dur);
                return -1;
            }
            if (i1 < 0) {
                b->feasible = 0;
                snprintf(b->note, sizeof b->note, "%s fits one %s neither "
                         "alone nor with ZeRO-Offload", P[j].job->name, unit);
                break;
            }
            offl++;
            double wb = prof_dtype_bytes(P[j].m->spec.dtype);
            b->pcie_bytes += 2 * wb * P[j].m->params * (double)P[j].minibatches;
            /* fp32 master and state on the host, and the fp16 gradients */
            double hb = P[j].m->params * (P[j].state - wb);
            if (j < conc) b->host_peak_bytes += hb;
            work += (double)P[j].mb_compute_ns * 1e-9 * (double)P[j].minibatches;
        } else {
            work += i1 * bz[j * ns + ns - 1] * (double)P[j].minibatches;
            b->pcie_bytes += pc[j * ns + ns - 1] * (double)P[j].minibatches;
            if (j < conc) b->host_peak_bytes += hb[j * ns + ns - 1];
        }
        dur[j] = i1 * (double)P[j].minibatches;
    }
    if (b->feasible) {
        b->makespan_s = lpt(dur, n, ng);
        b->util_mean = fmin(1, work / (b->makespan_s * ng));
        snprintf(b->note, sizeof b->note, "a job per %s, longest first%s",
                 unit, offl ? "; ZeRO-Offload where it does not fit" : "");
    }
    /* (c): the group size whose packing ends first */
    pol *cc = &out[2];
    memset(cc, 0, sizeof *cc);
    snprintf(cc->name, sizeof cc->name, "gpu-groups");
    for (int s = 0; s < ns; s++) {
        int ok = 1;
        double w = 0, bytes = 0;
        for (int j = 0; j < n && ok; j++) {
            ok = it[j * ns + s] > 0;
            dur[j] = it[j * ns + s] * (double)P[j].minibatches;
            w += dur[j] * bz[j * ns + s] * sizes[s];
            bytes += pc[j * ns + s] * (double)P[j].minibatches;
        }
        if (!ok) continue;
        double ms = lpt(dur, n, ng / sizes[s]);
        if (!cc->feasible || ms < cc->makespan_s) {
            cc->feasible = 1;
            cc->makespan_s = ms;
            cc->pcie_bytes = bytes;
            cc->util_mean = w / (ms * ng);
            /* the groups at once, each at its largest job's */
            double top = 0;
            for (int j = 0; j < n; j++) top = fmax(top, hb[j * ns + s]);
            int at_once = ng / sizes[s] < n ? ng / sizes[s] : n;
            cc->host_peak_bytes = top * at_once;
            int len = snprintf(cc->note, sizeof cc->note, "%d group%s of "
                               "%d %s%s, the planner's plan for %d, longest "
                               "job first", ng / sizes[s],
                               ng / sizes[s] > 1 ? "s" : "", sizes[s], unit,
                               sizes[s] > 1 ? "s" : "", sizes[s]);
            /* the shares a group has of what groups share (whole ones
             * go unsaid) */
            const int *q = shr[s];
            static const char *const what[3] = {
                "the host's DRAM and drives", "a socket's memory link",
                "a PCIe switch's uplink"};
            for (int i = 0, k = 0; i < 3; i++) {
                if (q[i] <= 1 || len <= 0 || (size_t)len >= sizeof cc->note)
                    continue;
                len += snprintf(cc->note + len, sizeof cc->note - (size_t)len,
                                "%s1/%d of %s", k++ ? ", " : "; each with ",
                                q[i], what[i]);
            }
        }
    }
    if (!cc->feasible)
        snprintf(cc->note, sizeof cc->note, "no group size fits every job");
    free(dur);
    free(it);
    free(bz);
    free(hb);
    free(pc);
    return 0;
}

/* One shard policy's schedule, on a thread of its own. */
typedef struct sched_job {
    const plan_wl_sjob *jobs;
    int n, ng;
    plan_wl_sched_opts o;
    plan_wl_run r;
} sched_job;

static void *sched_main(void *arg)
{
    sched_job *j = arg;
    plan_wl_schedule(j->jobs, j->n, j->ng, &j->o, &j->r);
    return NULL;
}

/* ---- output ---- */

/* The copies a trace or plot draws at most: every copy of a long
 * workload is millions of boxes (the paper's grid at 100,000 samples a
 * job has 5.2 million); the first ones show the pattern. */
#define COPIES_SHOWN 400000

static int copies_shown(const plan_wl_run *r)
{
    return r->n_cp <= COPIES_SHOWN ? r->n_cp : COPIES_SHOWN;
}

/* Said once for the trace and the plot together. */
static void copies_note(const plan_wl_run *r, int trace, int plot)
{
    if (r->n_cp <= COPIES_SHOWN || !(trace || plot)) return;
    fprintf(stderr, "sluice plan: %s show%s the first %d of %d copies "
            "(every compute box); fewer --samples show them all\n",
            trace && plot ? "--trace and --plot" : trace ? "--trace"
                                                          : "--plot",
            trace && plot ? "" : "s", COPIES_SHOWN, r->n_cp);
}

static int write_trace(const char *path, const plan_wl_run *r,
                       const wl_prep *P, int n, double part, util_err *e)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return util_errf(e, UTIL_EXIT_FAIL, "out of memory");
    /* each job's name as a JSON string, once (a trace has millions of
     * boxes, each naming its job) */
    char **qn = util_malloc(sizeof(char *) * (size_t)(n + 1));
    for (int j = 0; j < n; j++) {
        json_t *nm = json_string(P[j].job->name);
        qn[j] = json_dumps(nm, JSON_ENCODE_ANY);
        json_decref(nm);
    }
    fprintf(f, "{\"displayTimeUnit\": \"ns\", ");
    /* a run simulated in part says so where the trace viewer shows its
     * metadata: its times are the part's, not the table's (each job's
     * minibatches divided and rounded, at least one) */
    if (part > 1)
        fprintf(f, "\"otherData\": {\"simulated\": \"about 1/%.4g of each "
                "job's minibatches\", \"minibatches_divided_by\": %.6g}, ",
                part, part);
    fprintf(f, "\"traceEvents\": [\n");
    static const char *const tname[3] = {"compute", "copy in", "copy out"};
    for (int g = 0; g < r->n_gpus; g++) {
        fprintf(f, "%s{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, "
                "\"args\": {\"name\": \"gpu %d\"}}", g ? ",\n" : "", g, g);
        for (int k = 0; k < 3; k++)
            fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", "
                    "\"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                    g, k, tname[k]);
    }
    for (int i = 0; i < r->n_seg; i++) {
        const plan_wl_seg *s = &r->seg[i];
        const char *q = qn[s->job];
        fprintf(f, ",\n{\"ph\": \"X\", \"name\": %s, \"pid\": %d, \"tid\": 0, "
                "\"ts\": %lld.%03lld, \"dur\": %lld.%03lld, \"args\": "
                "{\"job\": %d, \"steps\": %ld}}", q, s->gpu,
                (long long)(s->start_ns / 1000), (long long)(s->start_ns % 1000),
                (long long)((s->end_ns - s->start_ns) / 1000),
                (long long)((s->end_ns - s->start_ns) % 1000), s->job, s->steps);
    }
    /* the copies on each GPU's streams, named by their job */
    int n_cp = copies_shown(r);
    for (int i = 0; i < n_cp; i++) {
        const plan_wl_copy *x = &r->cp[i];
        const char *q = qn[x->job];
        int64_t d = x->end_ns - x->start_ns;
        fprintf(f, ",\n{\"ph\": \"X\", \"name\": %s, \"pid\": %d, \"tid\": %d, "
                "\"ts\": %lld.%03lld, \"dur\": %lld.%03lld, \"args\": "
                "{\"job\": %d, \"bytes\": %.0f}}", q, x->gpu, 1 + x->dir,
                (long long)(x->start_ns / 1000), (long long)(x->start_ns % 1000),
                (long long)(d / 1000), (long long)(d % 1000), x->job, x->bytes);
    }
    fprintf(f, "\n]}\n");
    fclose(f);
    for (int k = 0; k < n; k++) free(qn[k]);
    free(qn);
    int rc = util_write_atomic(path, buf, len, e);
    free(buf);
    return rc;
}

static json_t *pol_json(const pol *p, double lb, int ng)
{
    json_t *j = json_pack("{s:s,s:b,s:s}", "policy", p->name, "feasible",
                          p->feasible, "note", p->note);
    json_object_set_new(j, "makespan_s", p->feasible ? json_real(p->makespan_s) : json_null());
    if (p->link[0])
        json_object_set_new(j, "busiest_link", json_pack("{s:s,s:f}", "link",
                            p->link, "busy", p->link_busy));
    json_object_set_new(j, "gap_to_bound", p->feasible ? json_real(p->makespan_s / lb) : json_null());
    json_object_set_new(j, "mean_utilization", p->feasible ? json_real(p->util_mean) : json_null());
    json_t *u = json_array();
    for (int g = 0; p->util && g < ng; g++) json_array_append_new(u, json_real(p->util[g]));
    json_object_set_new(j, "utilization", p->util ? u : (json_decref(u), json_null()));
    json_object_set_new(j, "host_peak_bytes", json_real(p->host_peak_bytes));
    json_object_set_new(j, "pcie_bytes", json_real(p->pcie_bytes));
    return j;
}

static int run(wcmd *c, util_err *e)
{
    prof_topo *t = prof_topo_from_args(c->hw_n, c->argv + c->hw_at, &c->ho, e);
    if (!t) return -1;
    int n = c->w.n_jobs, ng = t->n_gpus, rc = 0;
    for (int g = 1; g < ng; g++)
        if (strcmp(prof_topo_gpu(t, g)->name, prof_topo_gpu(t, 0)->name)) {
            prof_topo_free(t);
            return util_errf(e, UTIL_EXIT_USAGE, "a workload needs one GPU "
                             "type; %s mixes them", t->name);
        }
    wl_prep *P = util_calloc((size_t)n, sizeof *P);
    plan_wl_sjob *sj = util_calloc((size_t)n, sizeof *sj);
    double flops = 0;
    plan_wl_net net;
    if (plan_wl_net_build(t, &net, e)) rc = -1;
    for (int j = 0; j < n && !rc; j++) {
        if (wl_prep_job(&P[j], &c->w.jobs[j], t, c->reserve, e)) rc = -1;
        else {
            sj[j] = P[j].sj;
            flops += P[j].flops;
        }
    }
    pol pols[6];
    memset(pols, 0, sizeof pols);
    plan_wl_run lr = {0};
    const prof_gpu *gp = prof_topo_gpu(t, 0);
    /* CPU devices are cores, not GPUs */
    const char *unit = prof_topo_unit(t);
    double lb = 0, hostcap = prof_topo_server_dram(t, 0), scale = 1;
    double divided = 1; /* > 1: each job's minibatches divided by it */
    if (!rc) {
        prof_dtype mt = prof_gpu_math(gp, prof_spec_math(&P[0].m->spec));
        gp = prof_gpu_at(gp, mt);
        double peak = prof_gpu_peak(gp, mt);
        /* every model FLOP at the GPU's best GEMM efficiency, over all GPUs */
        lb = flops / (ng * peak * gp->eff.gemm_max);
        /* a workload of more shard steps than PLAN_WL_SIM_STEPS: the
         * shard schedules run 1/k of each job's minibatches (at least
         * one), scaled back by the compute they left out */
        double steps = 0, full = 0, part = 0;
        for (int j = 0; j < n; j++)
            steps += (double)sj[j].n_steps * (double)sj[j].minibatches;
        if (steps > PLAN_WL_SIM_STEPS) {
            double k = steps / PLAN_WL_SIM_STEPS, sim = 0;
            for (int j = 0; j < n; j++) {
                long mb = lround((double)sj[j].minibatches / k);
                mb = mb > 0 ? mb : 1;
                full += (double)P[j].mb_compute_ns *
                        (double)sj[j].minibatches;
                part += (double)P[j].mb_compute_ns * (double)mb;
                sim += (double)sj[j].n_steps * (double)mb;
                sj[j].minibatches = mb;
            }
            scale = part > 0 ? full / part : 1;
            divided = k;
            char a[32], b[32];
            if (!c->json)
                fprintf(stderr, "note: %s shard steps: the shard schedules "
                        "ran %s of them (each job's minibatches / %.4g) and "
                        "scale their makespan and traffic by %.4g; fewer "
                        "--samples simulate them whole%s\n",
                        util_fmt_count(steps, a, sizeof a),
                        util_fmt_count(sim, b, sizeof b), k, scale,
                        c->plot || c->trace ? " (--plot and --trace draw "
                        "the run as simulated)" : "");
        }
        const plan_wl_policy pl[] = {PLAN_WL_LRTF, PLAN_WL_RANDOM, PLAN_WL_RR};
        /* the three schedules are independent: side by side */
        sched_job sjobs[3];
        pthread_t th[3];
        int started[3] = {0};
        for (int k = 0; k < 3; k++) {
            plan_wl_sched_opts *o = &sjobs[k].o;
            memset(&sjobs[k], 0, sizeof sjobs[k]);
            o->policy = pl[k];
            o->net = &net;
            o->seed = c->seed;
            o->record = k == 0 && (c->plot || c->trace);
            sjobs[k].jobs = sj;
            sjobs[k].n = n;
            sjobs[k].ng = ng;
            if (k) started[k] = !pthread_create(&th[k], NULL, sched_main,
                                                &sjobs[k]);
        }
        for (int k = 0; k < 3; k++)
            if (!started[k]) sched_main(&sjobs[k]);
        for (int k = 1; k < 3; k++)
            if (started[k]) pthread_join(th[k], NULL);
        for (int k = 0; k < 3; k++) {
            plan_wl_run r = sjobs[k].r;
            pol_from_run(&pols[k], plan_wl_policy_name(pl[k]), &r, scale);
            snprintf(pols[k].note, sizeof pols[k].note, "Hydra: shards over "
                     "all %ss, state spilled to host DRAM", unit);
            double busy;
            int dl = plan_wl_busiest_link(&r, &net, &busy);
            if (dl >= 0) {
                snprintf(pols[k].link, sizeof pols[k].link, "%s > %s",
                         t->nodes[prof_dl_tail(t, dl)].name,
                         t->nodes[prof_dl_head(t, dl)].name);
                pols[k].link_busy = busy;
            }
            if (k == 0) lr = r;
            else plan_wl_run_free(&r);
        }
        rc = baselines(P, n, t, &net, c, pols + 3, e);
    }
    /* a policy whose host DRAM the servers do not have runs nowhere:
     * not feasible, and by how much (its peaks are summed over the
     * servers, as their DRAM is here) */
    int nsrv = t->n_servers > 0 ? t->n_servers : 1;
    double hosttot = hostcap * nsrv;
    for (int k = 0; k < 6 && !rc && hostcap > 0; k++) {
        pol *p = &pols[k];
        if (!p->feasible || p->host_peak_bytes <= hosttot) continue;
        char nb[32], hb[32], mb[32];
        p->feasible = 0;
        p->host_short = 1;
        util_fmt_bytes2(p->host_peak_bytes, nb, hosttot, hb, sizeof nb);
        snprintf(p->note, sizeof p->note, "host DRAM: needs %s, %s %s "
                 "(%s missing; %s)", nb,
                 nsrv > 1 ? "the servers have" : "the server has", hb,
                 util_fmt_bytes(p->host_peak_bytes - hosttot, mb, sizeof mb),
                 prof_topo_more_dram(t));
    }
    if (!rc && c->json) {
        json_t *root = json_pack("{s:s,s:i,s:f,s:f}", "hw", t->name, "gpus", ng,
                                 "lower_bound_s", lb, "host_capacity_bytes", hostcap);
        /* > 1: the shard schedules ran a part of each job, scaled back */
        json_object_set_new(root, "shard_schedules_scaled_by",
                            json_real(scale));
        json_t *jobs = json_array(), *pa = json_array();
        for (int j = 0; j < n; j++) {
            json_t *sh = json_array();
            for (int s = 0; s < P[j].k; s++)
                json_array_append_new(sh, json_pack("{s:i,s:i}", "first_layer",
                                      P[j].first[s], "layers",
                                      P[j].first[s + 1] - P[j].first[s]));
            json_array_append_new(jobs, json_pack(
                "{s:s,s:s,s:i,s:f,s:I,s:s,s:i,s:o,s:f}", "name", P[j].job->name,
                "model", P[j].job->model, "batch", P[j].job->batch,
                "samples", P[j].job->samples, "minibatches",
                (json_int_t)P[j].minibatches, "optimizer",
                plan_wl_optim_name(P[j].job->optim), "priority", P[j].job->priority,
                "shards", sh, "minibatch_compute_s",
                (double)P[j].mb_compute_ns * 1e-9));
        }
        for (int k = 0; k < 6; k++) json_array_append_new(pa, pol_json(&pols[k], lb, ng));
        json_object_set_new(root, "jobs", jobs);
        json_object_set_new(root, "policies", pa);
        util_json_print(root, stdout);
        json_decref(root);
    } else if (!rc) {
        char b1[32], b2[32];
        printf("%d job%s on %s\n", n, n == 1 ? "" : "s", t->name);
        for (int j = 0; j < n; j++) {
            if (j >= 3 && j < n - 1) {
                if (j == 3) printf("  ...\n");
                continue;
            }
            printf("  %-16s %s, batch %d, %ld minibatches, %s: %d shard%s, "
                   "%s of shard-steps a minibatch\n", P[j].job->name,
                   P[j].m->spec.name, P[j].job->batch, P[j].minibatches,
                   plan_wl_optim_name(P[j].job->optim), P[j].k, P[j].k > 1 ? "s" : "",
                   util_fmt_time((double)P[j].mb_compute_ns * 1e-9, b1, sizeof b1));
        }
        printf("\n");
        util_table *tb = util_table_new(7);
        char uh[32];
        snprintf(uh, sizeof uh, "%s util", unit);
        const char *h[] = {"policy", "makespan", "x bound", uh,
                           "util min..max", "host DRAM peak", "PCIe traffic"};
        for (int i = 0; i < 7; i++) util_table_col(tb, i, h[i], i ? 'r' : 'l');
        for (int k = 0; k < 6; k++) {
            const pol *p = &pols[k];
            char ms[32] = "-", xb[32] = "-", um[32] = "-", mm[32] = "-",
                 hp[32] = "-", pc[32] = "-";
            if (!p->feasible && p->host_peak_bytes > 0) {
                util_fmt_bytes(p->host_peak_bytes, b1, sizeof b1);
                snprintf(hp, sizeof hp, "%s%s", b1,
                         hostcap > 0 && p->host_peak_bytes > hosttot ? " OVER" : "");
            }
            if (p->feasible) {
                util_fmt_time(p->makespan_s, ms, sizeof ms);
                snprintf(xb, sizeof xb, "%.2f", p->makespan_s / lb);
                snprintf(um, sizeof um, "%.0f%%", 100 * p->util_mean);
                if (p->util) {
                    double lo = 1, hi = 0;
                    for (int g = 0; g < ng; g++) {
                        lo = fmin(lo, p->util[g]);
                        hi = fmax(hi, p->util[g]);
                    }
                    snprintf(mm, sizeof mm, "%.0f..%.0f%%", 100 * lo, 100 * hi);
                }
                util_fmt_bytes(p->host_peak_bytes, b1, sizeof b1);
                snprintf(hp, sizeof hp, "%s%s", b1,
                         hostcap > 0 && p->host_peak_bytes > hosttot ? " OVER" : "");
                util_fmt_bytes(p->pcie_bytes, b2, sizeof b2);
                snprintf(pc, sizeof pc, "%s", b2);
            }
            const char *row[] = {p->name, ms, xb, um, mm, hp, pc};
            util_table_row(tb, row);
        }
        util_table_print(tb, stdout, "  ");
        util_table_free(tb);
        for (int k = 0; k < 3; k++)
            if (pols[k].feasible && pols[k].link[0])
                printf("  %s: the busiest link, %s, is busy %.0f%% of the "
                       "makespan\n", pols[k].name, pols[k].link,
                       100 * pols[k].link_busy);
        for (int k = 0; k < 6; k++)
            if (k >= 3 || !pols[k].feasible)
                printf("  %s: %s\n", pols[k].name, pols[k].note);
        util_fmt_bytes(hostcap, b2, sizeof b2);
        printf("\nlower bound: %s (all model FLOPs over %d %s%s at %.0f%% of "
               "%s's peak); host memory %s%s",
               util_fmt_time(lb, b1, sizeof b1), ng, unit, ng == 1 ? "" : "s",
               100 * gp->eff.gemm_max,
               gp->name, b2, nsrv > 1 ? " a server" : "");
        if (pols[3].feasible && pols[0].feasible)
            printf("; sharded-lrtf %.2fx the throughput of pipeline-each",
                   pols[3].makespan_s / pols[0].makespan_s);
        printf("\n");
    }
    int any = 0;
    for (int k = 0; k < 6; k++) any |= pols[k].feasible;
    /* where some policy lacks only host DRAM, the --host-mem given is
     * the input to change (2), as a plan's host tiers are; else the
     * GPUs are what is short (1) */
    int hs = -1;
    for (int k = 0; k < 6 && hs < 0; k++)
        if (pols[k].host_short) hs = k;
    if (!rc && !any)
        rc = util_errf(e, hs >= 0 ? UTIL_EXIT_USAGE : UTIL_EXIT_FAIL,
                       "no policy runs this workload on %d x %s: %s%s%s", ng,
                       gp->name, hs >= 0 ? pols[hs].name : "",
                       hs >= 0 ? ": " : "", pols[hs >= 0 ? hs : 0].note);
    if (!rc) copies_note(&lr, c->trace != NULL, c->plot != NULL);
    if (!rc && c->trace && write_trace(c->trace, &lr, P, n, divided, e)) rc = -1;
    if (!rc && c->plot) {
        const char **names = util_malloc(sizeof(char *) * (size_t)n);
        for (int j = 0; j < n; j++) names[j] = P[j].job->name;
        size_t ns = (size_t)(lr.n_seg ? lr.n_seg : 1);
        int *sg = util_malloc(sizeof(int) * ns), *sjb = util_malloc(sizeof(int) * ns);
        double *t0 = util_malloc(sizeof(double) * ns), *t1 = util_malloc(sizeof(double) * ns);
        for (int i = 0; i < lr.n_seg; i++) {
            sg[i] = lr.seg[i].gpu;
            sjb[i] = lr.seg[i].job;
            t0[i] = (double)lr.seg[i].start_ns * 1e-9;
            t1[i] = (double)lr.seg[i].end_ns * 1e-9;
        }
        int n_cp = copies_shown(&lr);
        size_t nc = (size_t)(n_cp ? n_cp : 1);
        int *cg = util_malloc(sizeof(int) * nc), *cd = util_malloc(sizeof(int) * nc);
        int *cj = util_malloc(sizeof(int) * nc);
        double *c0 = util_malloc(sizeof(double) * nc), *c1 = util_malloc(sizeof(double) * nc);
        for (int i = 0; i < n_cp; i++) {
            cg[i] = lr.cp[i].gpu;
            cd[i] = lr.cp[i].dir;
            cj[i] = lr.cp[i].job;
            c0[i] = (double)lr.cp[i].start_ns * 1e-9;
            c1[i] = (double)lr.cp[i].end_ns * 1e-9;
        }
        char title[128];
        snprintf(title, sizeof title, "Sharded-LRTF: jobs over %ss", unit);
        if (divided > 1)
            snprintf(title + strlen(title), sizeof title - strlen(title),
                     ", about 1/%.4g of each job's minibatches simulated",
                     divided);
        int prc = plot_gantt(c->plot, title, unit, ng, n,
                             names, lr.n_seg, sg, sjb, t0, t1, n_cp, cg,
                             cd, cj, c0, c1, e);
        free(sg);
        free(sjb);
        free(t0);
        free(t1);
        free(cg);
        free(cd);
        free(cj);
        free(c0);
        free(c1);
        free(names);
        if (prc < 0) rc = -1;
        else if (prc > 0) fprintf(stderr, "sluice plan: %s\n", e->msg);
    }
    plan_wl_run_free(&lr);
    for (int k = 0; k < 6; k++) free(pols[k].util);
    for (int j = 0; j < n; j++) wl_prep_free(&P[j]);
    plan_wl_net_free(&net);
    free(P);
    free(sj);
    prof_topo_free(t);
    return rc;
}

int plan_wl_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    wcmd c;
    util_err e = {0};
    int rc = parse(argc, argv, &c, &e) ? -1 : run(&c, &e);
    plan_wl_free(&c.w);
    if (rc == 0) return 0;
    fprintf(stderr, "sluice plan: %s\n", e.msg);
    return e.code ? e.code : UTIL_EXIT_FAIL;
}
