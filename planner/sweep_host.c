/* The largest model each offload policy fits on one GPU, by host DRAM
 * (`sluice plan --sweep-host-mem`): the model's layer shape kept, its
 * layer count grown until the plan no longer fits, each size planned by
 * the planner itself (microbatches, tier, activation swaps), so the limit
 * is whichever tier runs out first: GPU, DRAM or the drives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"
#include "planner/workload.h"
#include "planner/workload_int.h"
#include "plots/plots.h"

#define MAX_SIZES 16
#define SWEEP_BATCH 16

/* the offload schedules, then Hydra's shards (not a schedule of the
 * simulator: the workload planner's) */
#define POL_HYDRA PLAN_SWEEP_HYDRA
static const int policies[] = {SIM_SCHED_ZERO_OFFLOAD,
                               SIM_SCHED_ZERO_INFINITY, SIM_SCHED_FUYOU,
                               POL_HYDRA};
#define N_POL ((int)(sizeof policies / sizeof *policies))

static const char *pol_name(int p)
{
    return p == POL_HYDRA ? "hydra" : sim_sched_name((sim_sched)p);
}

static int parse_sizes(const char *s, double *out, util_err *e)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    int n = 0;
    /* every entry a size with its unit (an empty one, "128G,,256G", or a
     * bare number, bytes, is a slip) */
    for (char *t = buf, *c; *s && t; t = c ? c + 1 : NULL) {
        c = strchr(t, ',');
        if (c) *c = 0;
        double v;
        /* each one --host-mem takes: a host of a KiB is a slip there */
        if (n == MAX_SIZES || util_parse_size_unit(t, &v) ||
            !(v >= UTIL_HW_MIN * (1 << 30)) || v > UTIL_SIZE_MAX_BYTES)
            return util_errf(e, UTIL_EXIT_USAGE, "--sweep-host-mem '%s': "
                             "expected up to %d sizes with their units, "
                             "comma-separated, each 0.001G to 1024T as "
                             "--host-mem takes, e.g. 128G,256G,512G,768G", s,
                             MAX_SIZES);
        for (int k = 0; k < n; k++)
            if (out[k] == v)
                return util_errf(e, UTIL_EXIT_USAGE, "--sweep-host-mem "
                                 "'%s': '%s' names a size given before (its "
                                 "rows would repeat)", s, t);
        out[n++] = v;
    }
    if (!n)
        return util_errf(e, UTIL_EXIT_USAGE, "--sweep-host-mem needs sizes, "
                         "e.g. 128G,256G,512G,768G");
    return n;
}

/* One size of the sweep: the plan of policy pol for `layers` layers of
 * the shape, or why none fits. */
typedef struct fit {
    int found, layers;
    double params, samples_per_s, tflops;
    char why[640];
} fit;

static int plan_size(const prof_model_spec *shape, int layers,
                     const prof_finetune *ft, const prof_topo *t,
                     const char *hw, sim_sched pol, const plan_opts *po,
                     fit *f, util_err *e)
{
    prof_model_spec s = *shape;
    s.layers = layers;
    memset(f, 0, sizeof *f);
    f->layers = layers;
    prof_model *m = prof_model_for_topo(prof_model_build(&s, e), t, e);
    if (!m || prof_model_finetune(m, ft, e)) {
        prof_model_free(m);
        return -1;
    }
    f->params = m->params;
    plan_opts o = *po;
    o.progress = 0;
    o.sched_mask = 1u << pol;
    plan_result r;
    if (plan_search(m, t, s.name, hw, &o, &r, e)) {
        prof_model_free(m);
        return -1;
    }
    if (r.found) {
        const plan_alt *a = &r.alt[r.best];
        f->found = 1;
        f->samples_per_s = a->samples_per_s;
        f->tflops = prof_model_train_flops(m, 0) * a->samples_per_s / 1e12;
    } else {
        snprintf(f->why, sizeof f->why, "%s", r.alt[pol].reason[0]
                 ? r.alt[pol].reason : r.advice);
    }
    plan_result_free(&r);
    prof_model_free(m);
    return 0;
}

/* Hydra's fit of `layers` layers (Nagrecha and Kumar, arXiv
 * 2110.08633): the fewest shards that fit the GPU, each job's state
 * spilled to host DRAM, trained with the policy's AdamW as the other
 * columns are. It fits when every layer fits the GPU as a shard of its
 * own and host DRAM holds the state and the boundary activations at
 * their peak; its speed is the shard scheduler's over HYDRA_MB
 * minibatches, the copies sharing the GPU's route to host memory. */
#define HYDRA_MB 4

static int hydra_size(const prof_model_spec *shape, int layers,
                      const prof_topo *t, const plan_opts *po, fit *f,
                      util_err *e)
{
    prof_model_spec s = *shape;
    s.layers = layers;
    memset(f, 0, sizeof *f);
    f->layers = layers;
    prof_model *m = prof_model_for_topo(prof_model_build(&s, e), t, e);
    if (!m) return -1;
    f->params = m->params;
    plan_wl_job j;
    memset(&j, 0, sizeof j);
    snprintf(j.name, sizeof j.name, "%s", s.name);
    snprintf(j.where, sizeof j.where, "--sweep-host-mem");
    j.batch = po->batch;
    j.samples = (double)po->batch * HYDRA_MB;
    j.optim = PLAN_WL_ADAM;
    double reserve = po->reserve_bytes >= 0 ? po->reserve_bytes
                                            : PLAN_DEFAULT_RESERVE;
    wl_prep p;
    util_err e2 = {0};
    if (wl_prep_model(&p, &j, m, t, reserve, &e2)) {
        int nofit = p.no_fit;
        if (nofit)
            snprintf(f->why, sizeof f->why, "a shard of one layer does not "
                     "fit the GPU: %s needs %.2f GiB of %.2f GiB at batch %d "
                     "(a shard takes the whole batch)",
                     p.m->layers[p.worst_layer].name,
                     p.worst_need / 1073741824.0, p.cap / 1073741824.0,
                     j.batch);
        wl_prep_free(&p);
        if (!nofit) return *e = e2, -1;
        return 0;
    }
    plan_wl_net net;
    if (plan_wl_net_build(t, &net, e)) {
        wl_prep_free(&p);
        return -1;
    }
    plan_wl_sched_opts o = {0};
    o.net = &net;
    plan_wl_run r;
    plan_wl_schedule(&p.sj, 1, 1, &o, &r);
    double dram = prof_topo_server_dram(t, 0);
    if (r.host_peak_bytes > dram) {
        char need[32], have[32];
        util_fmt_bytes(r.host_peak_bytes, need, sizeof need);
        util_fmt_bytes(dram, have, sizeof have);
        snprintf(f->why, sizeof f->why, "host DRAM: needs %s of %s (state "
                 "and boundary activations)", need, have);
    } else if (r.makespan_ns > 0) {
        f->found = 1;
        f->samples_per_s = j.samples / ((double)r.makespan_ns * 1e-9);
        f->tflops = prof_model_train_flops(p.m, 0) * f->samples_per_s / 1e12;
    }
    plan_wl_run_free(&r);
    plan_wl_net_free(&net);
    wl_prep_free(&p);
    return 0;
}

/* One size of the sweep under policy pol (a schedule, or Hydra). */
static int size_of(const prof_model_spec *shape, int layers,
                   const prof_finetune *ft, const prof_topo *t,
                   const char *hw, int pol, const plan_opts *po, fit *f,
                   util_err *e)
{
    if (pol == POL_HYDRA) return hydra_size(shape, layers, t, po, f, e);
    return plan_size(shape, layers, ft, t, hw, (sim_sched)pol, po, f, e);
}

/* The most layers of the shape that pol fits (0: not even one); *best
 * that plan, *next why one more layer does not fit. Doubling from the
 * shape's own depth, then bisection: fitting is monotone in depth (every
 * tier holds a share per layer). */
static int largest(const prof_model_spec *shape, const prof_finetune *ft,
                   const prof_topo *t, const char *hw, int pol,
                   const plan_opts *po, fit *best, fit *next, util_err *e)
{
    int lo = 0, hi = -1;        /* lo fits (0: trivially), hi does not */
    fit f;
    memset(best, 0, sizeof *best);
    memset(next, 0, sizeof *next);
    for (int l = shape->layers; hi < 0;) {
        if (size_of(shape, l, ft, t, hw, pol, po, &f, e)) return -1;
        if (f.found) {
            lo = l;
            *best = f;
            if (l >= PROF_MAX_LAYERS / 2) {
                hi = PROF_MAX_LAYERS + 1;
                break;
            }
            l *= 2;
        } else {
            hi = l;
            *next = f;
        }
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (size_of(shape, mid, ft, t, hw, pol, po, &f, e)) return -1;
        if (f.found) lo = mid, *best = f;
        else hi = mid, *next = f;
    }
    return 0;
}

int plan_sweep_host_mem(int hw_n, char **hw, const prof_hw_opts *ho,
                        const char *model, const prof_finetune *ft,
                        const char *sizes, const plan_opts *po, int json,
                        const char *plot, util_err *e)
{
    double mem[MAX_SIZES];
    int n = parse_sizes(sizes, mem, e);
    if (n < 0) return -1;
    prof_model_spec shape;
    if (plan_model_spec(model, po, &shape, e)) return -1;
    if (shape.dec_layers > 0)
        return util_errf(e, UTIL_EXIT_USAGE, "--sweep-host-mem grows a "
                         "model by its layers: %s has an encoder and a "
                         "decoder (give a decoder-only model)", shape.name);
    unsigned want = 0;
    for (int p = 0; p < N_POL; p++) want |= 1u << policies[p];
    /* Hydra trains the whole model: without a fine-tuning mode only */
    if (ft && ft->kind != PROF_FT_FULL) want &= ~(1u << POL_HYDRA);
    if (po->sched_mask & ~want)
        return util_errf(e, UTIL_EXIT_USAGE, "--sweep-host-mem compares the "
                         "offload schedules: --schedule may name only "
                         "zero-offload, zero-infinity, fuyou and hydra "
                         "(Hydra: full training only)");
    if (po->sched_mask) want = po->sched_mask;
    /* a fine-tuning batch unless one is given (the zoo's default is the
     * pretraining batch, thousands of samples for GPT-3) */
    plan_opts pb = *po;
    if (pb.batch <= 0) pb.batch = SWEEP_BATCH;
    po = &pb;
    util_table *tb = util_table_new(7);
    const char *h[] = {"host DRAM", "policy", "largest", "layers",
                       "samples/s", "TFLOP/s", "one layer more"};
    for (int i = 0; i < 7; i++)
        util_table_col(tb, i, h[i], i == 1 || i == 6 ? 'l' : 'r');
    json_t *rows = json_array();
    double px[N_POL][MAX_SIZES], py[N_POL][MAX_SIZES];
    int pc[N_POL] = {0};
    char gpu[64] = "", drives[96] = "";
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        prof_hw_opts o = *ho;
        o.host_mem_bytes = mem[i];
        prof_topo *t = prof_topo_from_args(hw_n, hw, &o, e);
        if (!t) return json_decref(rows), util_table_free(tb), -1;
        if (t->n_gpus != 1) {
            prof_topo_free(t);
            json_decref(rows);
            util_table_free(tb);
            return util_errf(e, UTIL_EXIT_USAGE, "--sweep-host-mem plans one "
                             "GPU offloading to its host: give --hw GPU x1");
        }
        int nd = prof_topo_server_drives(t, t->nodes[t->gpu_node[0]].server);
        snprintf(gpu, sizeof gpu, "%s", prof_topo_gpu(t, 0)->name);
        snprintf(drives, sizeof drives, "%d NVMe drive%s", nd,
                 nd == 1 ? "" : "s");
        char hwname[256], dram[32];
        snprintf(hwname, sizeof hwname, "%s%s --host-mem %.0fG", hw[0],
                 hw_n > 1 ? " x1" : "", mem[i] / 1073741824.0);
        util_fmt_bytes(mem[i], dram, sizeof dram);
        for (int p = 0; p < N_POL && !rc; p++) {
            if (!(want & (1u << policies[p]))) continue;
            fit best, next;
            if (largest(&shape, ft, t, hwname, policies[p], po, &best, &next,
                        e)) {
                rc = -1;
                break;
            }
            char big[32] = "-", lay[16] = "-", sps[32] = "-", tf[32] = "-";
            if (best.found) {
                /* in billions as the papers count; a small shape's in
                 * millions or fewer (util_fmt_count), not 0.0B */
                if (best.params >= 1e9)
                    snprintf(big, sizeof big, "%.1fB", best.params / 1e9);
                else
                    util_fmt_count(best.params, big, sizeof big);
                snprintf(lay, sizeof lay, "%d", best.layers);
                snprintf(sps, sizeof sps, "%.3f", best.samples_per_s);
                snprintf(tf, sizeof tf, "%.1f", best.tflops);
                px[p][pc[p]] = mem[i] / 1073741824.0;
                py[p][pc[p]++] = best.params / 1e9;
            }
            const char *pol = pol_name(policies[p]);
            const char *why = next.why[0] ? next.why : "(the most layers "
                              "sluice builds)";
            const char *cells[] = {dram, pol, big, lay, sps, tf, why};
            util_table_row(tb, cells);
            json_t *row = json_pack("{s:f,s:s,s:b}", "host_mem_bytes", mem[i],
                                    "policy", pol, "fits", best.found);
            if (best.found) {
                json_object_set_new(row, "params", json_real(best.params));
                json_object_set_new(row, "layers", json_integer(best.layers));
                json_object_set_new(row, "samples_per_s",
                                    json_real(best.samples_per_s));
                json_object_set_new(row, "model_tflops",
                                    json_real(best.tflops));
            }
            json_object_set_new(row, "one_more_layer", json_string(why));
            json_array_append_new(rows, row);
        }
        prof_topo_free(t);
    }
    if (rc == 0 && json) {
        json_t *j = json_pack("{s:s,s:i,s:i,s:i,s:o}", "shape", shape.name,
                              "hidden", shape.hidden, "heads", shape.heads,
                              "batch", po->batch, "sweep", rows);
        util_json_print(j, stdout);
        json_decref(j);
        rows = NULL;
    } else if (rc == 0) {
        printf("largest model each offload policy fits on one %s with %s, "
               "by host DRAM: %s's layers (hidden %d, %d heads, %d tokens), "
               "as many as fit, batch %d; TFLOP/s are model FLOPs\n", gpu,
               drives, shape.name, shape.hidden, shape.heads, shape.seq_len,
               po->batch);
        util_table_print(tb, stdout, "  ");
    }
    if (rc == 0 && plot) {
        const char *pn[N_POL];
        const double *x[N_POL], *y[N_POL];
        int np = 0, cnt[N_POL];
        for (int p = 0; p < N_POL; p++)
            if (pc[p]) {
                pn[np] = pol_name(policies[p]);
                x[np] = px[p];
                y[np] = py[p];
                cnt[np++] = pc[p];
            }
        char title[160];
        snprintf(title, sizeof title, "largest %s-shaped model on one %s",
                 shape.name, gpu);
        int prc = plot_lines(plot, "host-mem", title, "host DRAM (GiB)",
                             "parameters (billions)", np, pn, cnt, x, y, e);
        if (prc < 0) rc = -1;
        else if (prc > 0) fprintf(stderr, "sluice plan: %s\n", e->msg);
    }
    json_decref(rows);
    util_table_free(tb);
    return rc;
}
