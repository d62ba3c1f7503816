/* The summary of a simulated iteration: throughput, model FLOP/s and MFU
 * (model FLOPs: forward and backward of the model itself, recomputation
 * not counted), per-device time breakdown and memory against capacity.
 * The table and the JSON carry the same numbers. */
#include <math.h>
#include <string.h>

#include "sim/sim.h"

typedef struct totals {
    double iter_s, samples, samples_per_s, tokens_per_s, flops, tflops_gpu,
           peak_mean, mfu;
} totals;

static totals compute(const sim_plan *p, const sim_costs *c,
                      const sim_result *r)
{
    totals t;
    memset(&t, 0, sizeof t);
    t.iter_s = (double)r->iteration_ns * 1e-9;
    int dp = p->dp > 1 ? p->dp : 1, tp = p->tp > 1 ? p->tp : 1;
    t.samples = (double)p->mbs * p->n_mb * dp;
    if (t.iter_s > 0) {
        t.samples_per_s = t.samples / t.iter_s;
        t.tokens_per_s = t.samples_per_s * c->tokens_per_sample;
        t.flops = c->model_flops_per_sample * t.samples;
        int fold = c->fold > 1 ? c->fold : 1; /* devices stand for fold */
        t.tflops_gpu = t.flops / t.iter_s /
                       ((double)r->n_devices * fold * tp) / 1e12;
    }
    for (int d = 0; d < r->n_devices; d++) t.peak_mean += c->dev_peak_flops[d];
    t.peak_mean /= r->n_devices;
    t.mfu = t.peak_mean > 0 ? t.tflops_gpu * 1e12 / t.peak_mean : 0;
    return t;
}

/* Ops whose products are priced as not 16 bytes aligned
 * (sim_gemm_unaligned_cap) on their stage's device: the op, the width
 * that is not, the cap and the time per microbatch beyond the aligned
 * price (the datasheet's formula, F + B + W). */
typedef struct unal {
    int op;
    long width, padded;         /* padded: to a multiple of 64 */
    double cap, extra_ns;
} unal;

static int unaligned_ops(const sim_plan *p, const prof_model *m,
                         const prof_topo *tp, const sim_costs *c, unal *out,
                         int n)
{
    if (!m || !tp || !c || !c->stage) return 0;
    int k = 0, tpw = c->tp > 1 ? c->tp : 1;
    prof_dtype mt = prof_spec_math(&m->spec);
    for (int i = 0; i < m->n_ops && k < n; i++) {
        int s = 0;
        while (s < c->n_stages &&
               (i < c->stage[s].first_op || i > c->stage[s].last_op))
            s++;
        if (s == c->n_stages || m->ops[i].n_gemm == 0) continue;
        const prof_gpu *g0 = prof_topo_gpu(
            tp, c->dev_gpu[c->stage_device[s]]);
        prof_dtype dt = prof_gpu_math(g0, mt);
        const prof_gpu *g = prof_gpu_at(g0, dt);
        prof_op o = sim_op_tp(&m->ops[i], tpw);
        unal u = {i, 0, 0, 1, 0};
        for (int j = 0; j < o.n_gemm; j++) {
            long w;
            double q = sim_gemm_unaligned_cap(g, dt, &o.gemm[j], &w);
            if (q >= u.cap) continue;
            u.cap = q;
            u.width = w;
        }
        if (u.cap >= 1) continue;
        u.padded = (u.width + 63) / 64 * 64;
        prof_gpu ga = *g;
        ga.eff.unaligned = 0;
        for (int ph = 0; ph < 3; ph++)
            u.extra_ns += sim_op_model_ns(g, dt, &o, p->mbs, (sim_kind)ph) -
                          sim_op_model_ns(&ga, dt, &o, p->mbs, (sim_kind)ph);
        out[k++] = u;
    }
    return k;
}

/* Stages of device d (plan stage numbers; Chimera's upward copies
 * marked '). */
/* Device d's stages, runs of three or more as "a-b" (a mirrored
 * pipeline's stage primed), and where they do not fit n, "... (k
 * stages)". */
static void stages_of(const sim_plan *p, const sim_costs *c, int d,
                      char *buf, size_t n)
{
    buf[0] = 0;
    size_t len = 0;
    int pipes = c->replicas * (c->fold > 1 ? c->fold : 1) /
                (c->dp > 0 ? c->dp : 1);
    int total = 0, cut = 0, run0 = -1, prev = -2;
    char tail[32];
    for (int s = 0; s <= c->n_stages; s++) {
        int mine = s < c->n_stages && c->stage_device[s] == d;
        int id = mine ? s % p->n_stages : -1;
        int primed = mine && pipes > 1 && (s / p->n_stages) % pipes;
        total += mine;
        if (mine && !primed && run0 >= 0 && id == prev + 1) {
            prev = id;
            continue;
        }
        /* the run before ends */
        if (run0 >= 0 && !cut) {
            char item[32];
            if (prev > run0 + 1)
                snprintf(item, sizeof item, "%d-%d", run0, prev);
            else if (prev > run0)
                snprintf(item, sizeof item, "%d,%d", run0, prev);
            else
                snprintf(item, sizeof item, "%d", run0);
            if (len + strlen(item) + 2 + sizeof tail < n)
                len += (size_t)snprintf(buf + len, n - len, "%s%s",
                                        len ? "," : "", item);
            else
                cut = 1;
        }
        run0 = prev = -2;
        if (!mine) continue;
        if (primed) {
            if (!cut && len + 16 + sizeof tail < n)
                len += (size_t)snprintf(buf + len, n - len, "%s%d'",
                                        len ? "," : "", id);
            else
                cut = 1;
            continue;
        }
        run0 = prev = id;
    }
    if (cut) {
        snprintf(tail, sizeof tail, ",... (%d stages)", total);
        snprintf(buf + len, n - len, "%s", tail);
    }
}

/* Mean over devices of one kind of communication. */
static void comm_mean(const sim_result *r, int k, double *busy, double *exp)
{
    *busy = *exp = 0;
    for (int d = 0; d < r->n_devices; d++) {
        *busy += (double)r->dev[d].comm_busy_ns[k];
        *exp += (double)r->dev[d].comm_exp_ns[k];
    }
    *busy /= r->n_devices;
    *exp /= r->n_devices;
}

/* The tiers of an offloaded plan: what host DRAM and the drives hold,
 * each resource's busy time, and the one that bounds the iteration. */
static void offload_print(const sim_costs *c, const sim_result *r,
                          const sim_ir *ir, FILE *f)
{
    sim_offload_use u;
    sim_offload_usage(ir, r, &u);
    char a[32], b[32], x[32], y[32];
    fprintf(f, "\n  offload %s: model states in %s", sim_sched_name(c->offload),
            c->tier == SIM_TIER_NVME ? "NVMe" : "host DRAM");
    if (c->replicas > 1)
        fprintf(f, ", partitioned over %d data-parallel %ss", c->replicas,
                prof_topo_unit(c->topo));
    if (c->tier == SIM_TIER_NVME)
        fprintf(f, " (%d drive%s)", c->n_drives, c->n_drives == 1 ? "" : "s");
    fprintf(f, "; host DRAM %s of %s reserved", util_fmt_bytes(c->host_bytes,
                                                               a, sizeof a),
            util_fmt_bytes(c->host_cap, b, sizeof b));
    if (c->tier == SIM_TIER_NVME)
        fprintf(f, ", NVMe %s of %s", util_fmt_bytes(c->nvme_bytes, x, sizeof x),
                util_fmt_bytes(c->nvme_cap, y, sizeof y));
    fprintf(f, "\n");
    sim_tier_use tu;
    sim_offload_tier_use(ir, r, c, &tu);
    fprintf(f, "  in time: host DRAM peaks at %s (%s all along)",
            util_fmt_bytes(tu.host_peak, a, sizeof a),
            util_fmt_bytes(tu.host_resident, b, sizeof b));
    if (c->tier == SIM_TIER_NVME || c->act_tier == SIM_TIER_NVME)
        fprintf(f, ", the drives at %s",
                util_fmt_bytes(tu.nvme_peak, x, sizeof x));
    fprintf(f, "\n");
    sim_tier_use_free(&tu);
    if (c->act_swap_bytes > 0)
        fprintf(f, "  activations swapped to %s: %s an iteration (the "
                "checkpoints of %d stage%s, the whole activations of %d)\n",
                c->act_tier == SIM_TIER_NVME ? "NVMe" : "host DRAM",
                util_fmt_bytes(c->act_swap_bytes, a, sizeof a), c->swap_ckpt,
                c->swap_ckpt == 1 ? "" : "s", c->swap_full);
    double it = (double)r->iteration_ns;
    for (int k = 0; k < SIM_OFL_RES_COUNT; k++) {
        if (k == SIM_OFL_NVME && c->tier != SIM_TIER_NVME &&
            c->act_tier != SIM_TIER_NVME)
            continue;
        if (k == SIM_OFL_RING && c->replicas < 2) continue;
        fprintf(f, "  %-15s busy %9.3f s  %5.1f%% of the iteration",
                sim_offload_res_name(k, c->topo), u.busy_ns[k] * 1e-9,
                it > 0 ? 100.0 * (double)u.busy_ns[k] / it : 0);
        if (u.bytes[k] > 0)
            fprintf(f, "  %s moved", util_fmt_bytes(u.bytes[k], a, sizeof a));
        fprintf(f, "\n");
    }
    fprintf(f, "  bound by: %s\n", sim_offload_res_name(u.bound, c->topo));
}

static json_t *offload_json(const sim_costs *c, const sim_result *r,
                            const sim_ir *ir)
{
    sim_offload_use u;
    sim_offload_usage(ir, r, &u);
    json_t *o = json_object();
    json_object_set_new(o, "policy", json_string(sim_sched_name(c->offload)));
    json_object_set_new(o, "tier", json_string(sim_tier_name(c->tier)));
    json_object_set_new(o, "drives", json_integer(c->n_drives));
    json_object_set_new(o, "host_bytes", json_real(c->host_bytes));
    json_object_set_new(o, "host_staging_bytes", json_real(c->host_staging));
    json_object_set_new(o, "host_capacity_bytes", json_real(c->host_cap));
    json_object_set_new(o, "nvme_bytes", json_real(c->nvme_bytes));
    json_object_set_new(o, "nvme_capacity_bytes", json_real(c->nvme_cap));
    sim_tier_use tu;
    sim_offload_tier_use(ir, r, c, &tu);
    json_object_set_new(o, "host_peak_bytes", json_real(tu.host_peak));
    json_object_set_new(o, "host_resident_bytes", json_real(tu.host_resident));
    json_object_set_new(o, "nvme_peak_bytes", json_real(tu.nvme_peak));
    sim_tier_use_free(&tu);
    json_object_set_new(o, "act_swap_checkpoints", json_integer(c->swap_ckpt));
    json_object_set_new(o, "act_swap_whole", json_integer(c->swap_full));
    json_object_set_new(o, "act_swap_bytes", json_real(c->act_swap_bytes));
    json_object_set_new(o, "act_tier", json_string(sim_tier_name(c->act_tier)));
    json_t *res = json_object();
    for (int k = 0; k < SIM_OFL_RES_COUNT; k++)
        json_object_set_new(res, sim_offload_res_key(k), json_pack(
            "{s:f,s:f}", "busy_s", u.busy_ns[k] * 1e-9, "bytes", u.bytes[k]));
    json_object_set_new(o, "resources", res);
    json_object_set_new(o, "bound_by",
                        json_string(sim_offload_res_key(u.bound)));
    return o;
}

/* A pipeline's stages with their optimizer state on a host tier: per
 * such stage of the first replica, the span of its step off the GPU in s
 * (sim_stage_tier_step) into span[s], -1 for stages on their GPU. */
static void tier_spans(const sim_costs *c, const sim_result *r,
                       const sim_ir *ir, double *span)
{
    for (int s = 0; s < c->n_model_stages; s++) {
        sim_tier_step x;
        span[s] = -1;
        if (!c->stage[s].state_tier) continue;
        sim_stage_tier_step(ir, r, s, &x);
        span[s] = x.span_ns * 1e-9;
    }
}

static void tiers_print(const sim_costs *c, const sim_result *r,
                        const sim_ir *ir, FILE *f)
{
    int S = c->n_model_stages;
    double *span = util_malloc(sizeof(double) * (size_t)(S + 1));
    tier_spans(c, r, ir, span);
    char a[32], b[32];
    const char *u = prof_topo_unit(c->topo);
    fprintf(f, "\n  optimizer state off the %s (fp32 weights and moments, "
            "stepped by the host's CPU):\n", u);
    for (int s = 0; s < S; s++)
        if (span[s] >= 0)
            fprintf(f, "    stage %-3d %-5s step off the %s %9.3f s "
                    "(gradient out, CPU step, weights back)\n", s,
                    sim_state_tier_name(c->stage[s].state_tier), u, span[s]);
    fprintf(f, "  host DRAM %s of %s", util_fmt_bytes(c->host_bytes, a,
                                                      sizeof a),
            util_fmt_bytes(c->host_cap, b, sizeof b));
    if (c->nvme_bytes > 0)
        fprintf(f, ", NVMe %s of %s", util_fmt_bytes(c->nvme_bytes, a,
                                                    sizeof a),
                util_fmt_bytes(c->nvme_cap, b, sizeof b));
    fprintf(f, " (the fullest server)\n");
    free(span);
}

static json_t *tiers_json(const sim_costs *c, const sim_result *r,
                          const sim_ir *ir)
{
    int S = c->n_model_stages;
    double *span = util_malloc(sizeof(double) * (size_t)(S + 1));
    tier_spans(c, r, ir, span);
    json_t *o = json_object(), *st = json_array();
    for (int s = 0; s < S; s++) {
        json_t *x = json_object();
        json_object_set_new(x, "tier", json_string(
            sim_state_tier_name(c->stage[s].state_tier)));
        if (span[s] >= 0)
            json_object_set_new(x, "host_step_s", json_real(span[s]));
        json_array_append_new(st, x);
    }
    json_object_set_new(o, "stages", st);
    json_object_set_new(o, "host_bytes", json_real(c->host_bytes));
    json_object_set_new(o, "host_capacity_bytes", json_real(c->host_cap));
    json_object_set_new(o, "nvme_bytes", json_real(c->nvme_bytes));
    json_object_set_new(o, "nvme_capacity_bytes", json_real(c->nvme_cap));
    free(span);
    return o;
}

void sim_report_figures(const prof_topo *t, const char *lead, FILE *f)
{
    if (!t) return;
    for (int i = 0; i < t->n_gpu_types; i++) {
        const prof_calib *c = t->gpu_types[i].calib;
        if (!c) continue;
        fprintf(f, "%s%s as calibrated %s%s, %s\n", lead,
                t->gpu_types[i].name, c->date, c->quick ? " (--quick)" : "",
                c->file[0] ? c->file : "not yet saved");
    }
}

void sim_report_print(const sim_plan *p, const prof_model *m,
                      const prof_topo *tp, const sim_costs *c,
                      const sim_result *r, const sim_ir *ir, FILE *f)
{
    totals t = compute(p, c, r);
    char b1[32], b2[32], b3[32];
    fprintf(f, "sluice sim: %s%s%s on %s\n", m ? m->spec.name : p->model,
            p->math ? " in " : "", prof_math_name(p->math),
            tp ? tp->name : p->hw);
    fprintf(f, "schedule %s%s%s, pp %d, %d stage%s, microbatch %d x %d",
            p->sched_file[0] ? "from " : "",
            p->sched_file[0] ? p->sched_file : sim_sched_name(p->sched),
            p->sched_file[0] ? "" : "", p->pp,
            p->n_stages, p->n_stages == 1 ? "" : "s", p->mbs, p->n_mb);
    if (p->dp > 1) fprintf(f, " x dp %d", p->dp);
    fprintf(f, " = %.0f samples", t.samples);
    /* a length of its own (--seq): said (the spec's goes unsaid) */
    if (p->seq_len && m) fprintf(f, " of %d tokens", m->spec.seq_len);
    fprintf(f, "/iteration%s%s%s",
            p->recompute == SIM_RC_SELECTIVE ? ", selective recompute"
            : p->recompute ? ", recompute" : "",
            p->sp ? ", sequence parallel" : "",
            p->flash > 0 ? ", fused attention (--flash-attn)"
            : p->flash < 0 ? ", attention unfused (--no-flash-attn)" : "");
    if (c->zero && c->fsdp)
        fprintf(f, ", FSDP %s (ZeRO-3 over %d ranks)", sim_fsdp_name(c->fsdp),
                c->shard);
    else if (c->zero)
        fprintf(f, ", ZeRO-%d over %d ranks", c->zero, c->shard);
    if (p->sched == SIM_SCHED_WAVE)
        fprintf(f, ", %d wave%s", p->waves, p->waves == 1 ? "" : "s");
    if (p->sched == SIM_SCHED_INTERLEAVED)
        fprintf(f, ", %d chunk%s per device", p->chunks,
                p->chunks == 1 ? "" : "s");
    fprintf(f, "\n");
    /* a calibrated profile replaces the built-in figures silently:
     * whether the prediction is this machine's was not said */
    sim_report_figures(tp, "figures: ", f);
    if (p->dp > 1 || p->tp > 1)
        fprintf(f, "dp %d x pp %d x tp %d = %ld %ss; %s = (dp_rank*pp + "
                "pp_rank)*tp + tp_rank\n", p->dp, p->pp, p->tp,
                sim_plan_gpus(p), prof_topo_unit(tp), prof_topo_unit(tp));
    double cap = sim_grad_bucket(p->grad_bucket, tp);
    if (sim_costs_allreduce(c) && c->bkt_off && c->bkt_cap > cap * 1.001)
        fprintf(f, "gradients all-reduced in %s buckets (up to %s, 1/%d "
                "of a stage's gradient, where that is larger), each as the "
                "backward computes it (--grad-bucket)\n",
                util_fmt_bytes(cap, b1, sizeof b1),
                util_fmt_bytes(c->bkt_cap, b2, sizeof b2), SIM_MAX_BUCKETS);
    else if (sim_costs_allreduce(c) && c->bkt_off)
        fprintf(f, "gradients all-reduced in %s buckets, each as the "
                "backward computes it (--grad-bucket)\n",
                util_fmt_bytes(cap, b1, sizeof b1));
    else if (sim_costs_allreduce(c))
        fprintf(f, "gradients all-reduced once a stage, after its backward "
                "(%s)\n", p->grad_bucket < 0 ? "on CPU devices, whose cores "
                "would do the ring's copies beside it; --grad-bucket SIZE "
                "overlaps them" : "--grad-bucket 0");
    else if (c->zero && p->grad_bucket >= 0 && c->replicas > 1)
        fprintf(f, "--grad-bucket: ZeRO reduce-scatters a stage's "
                "gradients after each backward; buckets shape an unsharded "
                "all-reduce only\n");
    if (m && !prof_finetune_full(&m->ft)) {
        char md[64], a[16], b[16];
        fprintf(f, "fine-tuning %s: %s of %s parameters train\n",
                prof_finetune_name(&m->ft, md, sizeof md),
                util_fmt_count(m->train_params, a, sizeof a),
                util_fmt_count(m->params, b, sizeof b));
    }
    if (r->window_iters > 1 || (ir && ir->n_minibatches > 1))
        fprintf(f, "no flush: steady state over %d iteration(s) of %d "
                "simulated\n", r->window_iters, ir ? ir->n_minibatches : 0);
    fprintf(f, "\n");
    fprintf(f, "  iteration time     %s\n", util_fmt_time(t.iter_s, b1, sizeof b1));
    fprintf(f, "  samples/s          %.2f\n", t.samples_per_s);
    fprintf(f, "  tokens/s           %.0f\n", t.tokens_per_s);
    char tl[32];
    snprintf(tl, sizeof tl, "model TFLOP/s/%s", prof_topo_unit(tp));
    fprintf(f, "  %-18s %.2f   (model FLOPs: forward + backward, "
            "recompute not counted)\n", tl, t.tflops_gpu);
    fprintf(f, "  MFU                %.1f%%   (of %.1f TFLOP/s peak)\n",
            100 * t.mfu, t.peak_mean / 1e12);
    prof_dtype mt = m ? prof_spec_math(&m->spec) : PROF_DT_FP32;
    const prof_gpu *fb = m ? prof_topo_dtype_fallback(tp, mt) : NULL;
    if (fb)
        fprintf(f, "  precision          %s runs in %s on %s (no %s)\n",
                prof_dtype_name(mt), prof_dtype_name(prof_dtype_fallback(mt)),
                fb->name, prof_dtype_name(mt));
    unal un[4];
    int nu = unaligned_ops(p, m, tp, c, un, 4);
    for (int i = 0; i < nu; i++) {
        const prof_op *o = &m->ops[un[i].op];
        int voc = o->role == PROF_ROLE_LM_HEAD || o->role == PROF_ROLE_EMBED;
        fprintf(f, "  %-18s %s %ld wide: <= %.1f%% of peak, +%s a "
                "microbatch; pad %s to %ld\n",
                i ? "" : "unaligned GEMMs", o->name, un[i].width,
                100 * un[i].cap,
                util_fmt_time(un[i].extra_ns * 1e-9, b1, sizeof b1),
                voc ? "the vocabulary" : "it", un[i].padded);
    }
    fprintf(f, "  simulated events   %lld\n\n", (long long)r->events);
    int any = 0;
    for (int k = 0; k < SIM_COMM_COUNT; k++) {
        double busy, exp;
        comm_mean(r, k, &busy, &exp);
        if (busy <= 0 && exp <= 0) continue;
        if (!any)
            fprintf(f, "  communication per device and iteration (mean): "
                    "in flight, exposed, hidden\n");
        any = 1;
        fprintf(f, "    %-16s %10.3f ms %10.3f ms %10.3f ms\n",
                sim_comm_name((sim_comm)k), busy * 1e-6, exp * 1e-6,
                fmax(0, busy - exp) * 1e-6);
    }
    if (any) fprintf(f, "\n");
    util_table *tb = util_table_new(10);
    const char *hd[] = {"dev", "stages", "compute ms", "recomp ms",
                        "comm ms", "bubble ms", "optim ms", "bubble %",
                        "peak mem", "of"};
    for (int i = 0; i < 10; i++) util_table_col(tb, i, hd[i], i < 2 ? 'l' : 'r');
    int shown = r->n_devices <= 64 ? r->n_devices : p->pp;
    for (int d = 0; d < shown; d++) {
        const sim_dev_stats *ds = &r->dev[d];
        char c0[16], c1[64], c2[24], c3[24], c4[24], c5[24], c6[24], c7[24];
        snprintf(c0, sizeof c0, "%d", d);
        stages_of(p, c, d, c1, sizeof c1);
        snprintf(c2, sizeof c2, "%.3f", ds->compute_ns * 1e-6);
        snprintf(c3, sizeof c3, "%.3f", ds->recompute_ns * 1e-6);
        snprintf(c4, sizeof c4, "%.3f", ds->comm_exposed_ns * 1e-6);
        snprintf(c5, sizeof c5, "%.3f", ds->bubble_ns * 1e-6);
        snprintf(c6, sizeof c6, "%.3f", ds->opt_ns * 1e-6);
        snprintf(c7, sizeof c7, "%.1f", 100 * ds->bubble_fraction);
        util_fmt_bytes(ds->peak_bytes, b2, sizeof b2);
        if (ds->capacity_bytes > 0)
            util_fmt_bytes(ds->capacity_bytes, b3, sizeof b3);
        else
            snprintf(b3, sizeof b3, "-");
        char peak[48];
        snprintf(peak, sizeof peak, "%s%s", b2,
                 ds->capacity_bytes > 0 && ds->peak_bytes > ds->capacity_bytes
                     ? " OOM" : "");
        const char *row[] = {c0, c1, c2, c3, c4, c5, c6, c7, peak, b3};
        util_table_row(tb, row);
    }
    util_table_print(tb, f, "  ");
    util_table_free(tb);
    if (shown < r->n_devices)
        fprintf(f, "  (devices of data-parallel rank 0 shown; %d in all)\n",
                r->n_devices);
    fprintf(f, "\n  comm = compute idle while a transfer it waits for is in "
            "flight; bubble = other idle time\n");
    /* data-parallel replicas run alike: one replica's stages, where
     * every replica's read the same */
    int ns = r->n_stages;
    if (p->dp > 1 && p->n_stages * p->dp == r->n_stages) {
        int same = 1;
        for (int s = p->n_stages; s < r->n_stages && same; s++)
            same = r->max_inflight[s] == r->max_inflight[s % p->n_stages];
        if (same) ns = p->n_stages;
    }
    fprintf(f, "  in-flight microbatches per stage (max%s):",
            ns < r->n_stages ? ", each data-parallel replica's" : "");
    for (int s = 0; s < ns; s++)
        fprintf(f, " %d", r->max_inflight[s]);
    fprintf(f, "\n");
    int vmax = 1;
    for (int s = 0; s < r->n_stages; s++)
        if (r->max_versions[s] > vmax) vmax = r->max_versions[s];
    if (vmax > 1) {
        fprintf(f, "  weight versions alive per stage (max):");
        for (int s = 0; s < r->n_stages; s++)
            fprintf(f, " %d", r->max_versions[s]);
        fprintf(f, "\n");
    }
    if (c->offload && ir) offload_print(c, r, ir, f);
    if (c->stage_tiers && ir) tiers_print(c, r, ir, f);
    if (r->oom && ir && r->oom_task >= 0) {
        char b[128];
        fprintf(f, "\nOOM: %s would exceed device memory at %s\n",
                sim_task_str(ir, r->oom_task, b, sizeof b),
                util_fmt_time(r->oom_t_ns * 1e-9, b1, sizeof b1));
    } else if (r->oom) {
        fprintf(f, "\nOOM: the model state does not fit before any task runs\n");
    }
}

json_t *sim_report_json(const sim_plan *p, const prof_model *m,
                        const prof_topo *tp, const sim_costs *c,
                        const sim_result *r, const sim_ir *ir)
{
    totals t = compute(p, c, r);
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(m ? m->spec.name : p->model));
    json_object_set_new(o, "hw", json_string(tp ? tp->name : p->hw));
    json_object_set_new(o, "schedule", json_string(sim_sched_name(p->sched)));
    json_object_set_new(o, "pp", json_integer(p->pp));
    json_object_set_new(o, "dp", json_integer(p->dp));
    json_object_set_new(o, "tp", json_integer(p->tp));
    json_object_set_new(o, "gpus", json_integer(p->dp * p->pp * p->tp));
    if (m) {
        char md[64];
        json_object_set_new(o, "finetune", json_string(prof_finetune_name(
                                               &m->ft, md, sizeof md)));
        json_object_set_new(o, "params", json_real(m->params));
        json_object_set_new(o, "trainable_params", json_real(m->train_params));
    }
    if (p->math)
        json_object_set_new(o, "dtype", json_string(prof_math_name(p->math)));
    unal un[8];
    int nu = unaligned_ops(p, m, tp, c, un, 8);
    if (nu) {
        json_t *a = json_array();
        for (int i = 0; i < nu; i++)
            json_array_append_new(a, json_pack(
                "{s:s,s:I,s:f,s:f,s:I}", "op", m->ops[un[i].op].name,
                "width", (json_int_t)un[i].width, "cap", un[i].cap,
                "extra_s_per_microbatch", un[i].extra_ns * 1e-9,
                "padded_width", (json_int_t)un[i].padded));
        json_object_set_new(o, "unaligned_gemms", a);
    }
    json_object_set_new(o, "layout", json_string("dp-pp-tp"));
    if (p->sched == SIM_SCHED_INTERLEAVED)
        json_object_set_new(o, "chunks", json_integer(p->chunks));
    if (p->sched_file[0])
        json_object_set_new(o, "schedule_file", json_string(p->sched_file));
    json_object_set_new(o, "stages", json_integer(p->n_stages));
    json_object_set_new(o, "mbs", json_integer(p->mbs));
    json_object_set_new(o, "microbatches", json_integer(p->n_mb));
    json_object_set_new(o, "recompute",
                        json_string(sim_recompute_name(p->recompute)));
    json_object_set_new(o, "sequence_parallel", json_boolean(p->sp));
    if (m)
        json_object_set_new(o, "flash_attn",
                            json_boolean(m->spec.flash_attn));
    json_object_set_new(o, "zero", json_integer(c->zero));
    if (sim_costs_allreduce(c))
        json_object_set_new(o, "grad_bucket_bytes", json_real(
            c->bkt_off ? sim_grad_bucket(p->grad_bucket, tp) : 0));
    if (sim_costs_allreduce(c) && c->bkt_off)
        json_object_set_new(o, "grad_bucket_largest_bytes",
                            json_real(c->bkt_cap));
    json_object_set_new(o, "fsdp", json_string(sim_fsdp_name(c->fsdp)));
    json_object_set_new(o, "shard_ranks", json_integer(c->shard));
    json_object_set_new(o, "iteration_time_s", json_real(t.iter_s));
    json_object_set_new(o, "samples_per_s", json_real(t.samples_per_s));
    json_object_set_new(o, "tokens_per_s", json_real(t.tokens_per_s));
    json_object_set_new(o, "model_flops_per_iteration", json_real(t.flops));
    json_object_set_new(o, "tflops_per_gpu", json_real(t.tflops_gpu));
    json_object_set_new(o, "mfu", json_real(t.mfu));
    json_object_set_new(o, "flops_note",
                        json_string("model FLOPs: forward + backward of the "
                                    "model, recomputation not counted"));
    json_t *bf = json_array(), *pk = json_array(), *cap = json_array(),
           *dv = json_array();
    for (int d = 0; d < r->n_devices; d++) {
        const sim_dev_stats *ds = &r->dev[d];
        json_array_append_new(bf, json_real(ds->bubble_fraction));
        json_array_append_new(pk, json_real(ds->peak_bytes));
        json_array_append_new(cap, json_real(ds->capacity_bytes));
        json_t *x = json_object();
        json_t *st = json_array();
        for (int s = 0; s < c->n_stages; s++)
            if (c->stage_device[s] == d)
                json_array_append_new(st, json_integer(s % p->n_stages));
        json_object_set_new(x, "stages", st);
        json_t *cm = json_object();
        for (int k = 0; k < SIM_COMM_COUNT; k++) {
            json_t *y = json_object();
            json_object_set_new(y, "in_flight_s",
                                json_real(ds->comm_busy_ns[k] * 1e-9));
            json_object_set_new(y, "exposed_s",
                                json_real(ds->comm_exp_ns[k] * 1e-9));
            json_object_set_new(y, "hidden_s", json_real(fmax(
                0, (double)(ds->comm_busy_ns[k] - ds->comm_exp_ns[k])) * 1e-9));
            json_object_set_new(cm, sim_comm_name((sim_comm)k), y);
        }
        json_object_set_new(x, "comm", cm);
        json_object_set_new(x, "compute_s", json_real(ds->compute_ns * 1e-9));
        json_object_set_new(x, "recompute_s",
                            json_real(ds->recompute_ns * 1e-9));
        json_object_set_new(x, "comm_exposed_s",
                            json_real(ds->comm_exposed_ns * 1e-9));
        json_object_set_new(x, "bubble_s", json_real(ds->bubble_ns * 1e-9));
        json_object_set_new(x, "optimizer_s", json_real(ds->opt_ns * 1e-9));
        json_object_set_new(x, "bubble_fraction",
                            json_real(ds->bubble_fraction));
        /* the model state this GPU holds, as ZeRO's Figure 1 counts it */
        double wb = 0, gb = 0, ob = 0;
        for (int s = 0; s < c->n_stages; s++)
            if (c->stage_device[s] == d) {
                wb += c->stage[s].weight_bytes;
                gb += c->stage[s].grad_bytes;
                ob += c->stage[s].opt_bytes;
            }
        json_object_set_new(x, "weight_bytes", json_real(wb));
        json_object_set_new(x, "grad_bytes", json_real(gb));
        json_object_set_new(x, "optimizer_bytes", json_real(ob));
        json_object_set_new(x, "static_bytes", json_real(ds->static_bytes));
        json_object_set_new(x, "peak_mem_bytes", json_real(ds->peak_bytes));
        json_object_set_new(x, "capacity_bytes",
                            json_real(ds->capacity_bytes));
        json_array_append_new(dv, x);
    }
    json_object_set_new(o, "bubble_fraction", bf);
    json_object_set_new(o, "peak_mem_bytes", pk);
    json_object_set_new(o, "capacity_bytes", cap);
    json_object_set_new(o, "oom", json_boolean(r->oom));
    if (r->oom && ir && r->oom_task >= 0) {
        char b[128];
        json_object_set_new(o, "oom_task", json_string(sim_task_str(
                                ir, r->oom_task, b, sizeof b)));
        json_object_set_new(o, "oom_time_s", json_real(r->oom_t_ns * 1e-9));
    }
    json_object_set_new(o, "devices", dv);
    if (c->offload && ir)
        json_object_set_new(o, "offload", offload_json(c, r, ir));
    if (c->stage_tiers && ir)
        json_object_set_new(o, "state_tiers", tiers_json(c, r, ir));
    json_t *cm = json_object();
    for (int k = 0; k < SIM_COMM_COUNT; k++) {
        double busy, exp;
        comm_mean(r, k, &busy, &exp);
        json_t *y = json_object();
        json_object_set_new(y, "in_flight_s", json_real(busy * 1e-9));
        json_object_set_new(y, "exposed_s", json_real(exp * 1e-9));
        json_object_set_new(y, "hidden_s", json_real(fmax(0, busy - exp) * 1e-9));
        json_object_set_new(cm, sim_comm_name((sim_comm)k), y);
    }
    json_object_set_new(o, "comm", cm);
    json_object_set_new(o, "comm_note", json_string(
        "per device and iteration, mean over devices: in flight = the "
        "device's transfers of that kind moving (tensor-parallel: inside F "
        "and B), exposed = compute waiting for them, hidden = the rest"));
    json_t *inf = json_array(), *ver = json_array();
    for (int s = 0; s < r->n_stages; s++) {
        json_array_append_new(inf, json_integer(r->max_inflight[s]));
        json_array_append_new(ver, json_integer(r->max_versions[s]));
    }
    json_object_set_new(o, "stage_max_inflight_microbatches", inf);
    json_object_set_new(o, "stage_max_weight_versions", ver);
    json_object_set_new(o, "events", json_integer(r->events));
    return o;
}

/* Where a stage's compute goes: each op's F, B and W on its stage's
 * device, per microbatch, and its share of the stage's F + B + W. The
 * stages of one pipeline (the replicas run the same ops). */
static double stage_op_sum(const sim_costs *c, int s)
{
    double sum = 0;
    for (int i = c->stage[s].first_op; i <= c->stage[s].last_op; i++)
        sum += c->op_ns[3 * i] + c->op_ns[3 * i + 1] + c->op_ns[3 * i + 2];
    return sum;
}

void sim_report_ops_print(const prof_model *m, const sim_costs *c, FILE *f)
{
    if (!m || !c->op_ns || c->n_ops != m->n_ops) return;
    util_table *t = util_table_new(7);
    const char *h[] = {"stage", "op", "role", "F ms", "B ms", "W ms",
                       "share"};
    for (int k = 0; k < 7; k++) util_table_col(t, k, h[k], k && k < 3 ? 'l'
                                                                       : 'r');
    for (int s = 0; s < c->n_model_stages; s++) {
        double sum = stage_op_sum(c, s);
        for (int i = c->stage[s].first_op; i <= c->stage[s].last_op; i++) {
            const double *on = c->op_ns + 3 * (size_t)i;
            char st[16], fb[3][32], sh[16];
            snprintf(st, sizeof st, "%d", s);
            for (int k = 0; k < 3; k++)
                snprintf(fb[k], sizeof fb[k], "%.3f", on[k] * 1e-6);
            snprintf(sh, sizeof sh, "%.1f%%",
                     sum > 0 ? 100 * (on[0] + on[1] + on[2]) / sum : 0);
            const char *row[] = {st, m->ops[i].name,
                                 prof_op_role_name(m->ops[i].role), fb[0],
                                 fb[1], fb[2], sh};
            util_table_row(t, row);
        }
        if (s + 1 < c->n_model_stages) util_table_sep(t);
    }
    fprintf(f, "\nops, per microbatch of %g on its stage's device (one "
            "tensor-parallel rank's share, its all-reduces apart; F forward, "
            "B input gradient, W weight gradient; share of the stage's F + "
            "B + W):\n", c->samples_per_mb);
    util_table_print(t, f, "  ");
    util_table_free(t);
}

json_t *sim_report_ops_json(const prof_model *m, const sim_costs *c)
{
    json_t *a = json_array();
    if (!m || !c->op_ns || c->n_ops != m->n_ops) return a;
    for (int s = 0; s < c->n_model_stages; s++) {
        double sum = stage_op_sum(c, s);
        for (int i = c->stage[s].first_op; i <= c->stage[s].last_op; i++) {
            const double *on = c->op_ns + 3 * (size_t)i;
            json_t *o = json_object();
            json_object_set_new(o, "stage", json_integer(s));
            json_object_set_new(o, "op", json_string(m->ops[i].name));
            json_object_set_new(o, "role", json_string(
                prof_op_role_name(m->ops[i].role)));
            json_object_set_new(o, "fwd_s", json_real(on[0] * 1e-9));
            json_object_set_new(o, "bwd_in_s", json_real(on[1] * 1e-9));
            json_object_set_new(o, "bwd_w_s", json_real(on[2] * 1e-9));
            json_object_set_new(o, "share", json_real(
                sum > 0 ? (on[0] + on[1] + on[2]) / sum : 0));
            json_array_append_new(a, o);
        }
    }
    return a;
}
