/* The cost model: an op's task time is max(FLOPs / (peak x GEMM efficiency
 * of its shape), bytes / (memory bandwidth x efficiency of its size)) plus
 * a launch per kernel, unless a measured time for the same signature
 * overrides it. Stage costs are summed once per simulation, so the event
 * loop only looks numbers up. Memory per stage comes from the same pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

/* Adam in mixed precision: fp16 weights (2) + fp16 grads (2) + fp32 master
 * weights, momentum and variance (12) = 16 bytes per parameter (ZeRO,
 * Rajbhandari et al. 2020, sec. 3.1). */
#define DEFAULT_STATE_BYTES 16.0
/* Bytes the Adam step moves per parameter: reads master, m, v (fp32) and
 * the grad (fp16), writes master, m, v and the fp16 weights. */
#define ADAM_BYTES_PER_PARAM 28.0

void sim_measured_init(sim_measured *m) { memset(m, 0, sizeof *m); }

void sim_measured_free(sim_measured *m)
{
    if (!m) return;
    free(m->key);
    free(m->ns);
    memset(m, 0, sizeof *m);
}

void sim_measured_set(sim_measured *m, const char *key, int64_t ns)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->key[i], key)) {
            m->ns[i] = ns;
            return;
        }
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 16;
        m->key = util_realloc(m->key, sizeof *m->key * (size_t)m->cap);
        m->ns = util_realloc(m->ns, sizeof *m->ns * (size_t)m->cap);
    }
    snprintf(m->key[m->n], sizeof m->key[m->n], "%s", key);
    m->ns[m->n++] = ns;
}

int64_t sim_measured_get(const sim_measured *m, const char *key)
{
    if (!m) return -1;
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->key[i], key)) return m->ns[i];
    return -1;
}

void sim_op_signature(const prof_gpu *g, const prof_op *op, int mbs,
                      sim_kind k, char *out, size_t n)
{
    int len = snprintf(out, n, "%s|%s|%s|%d|", g->name,
                       prof_op_kind_name(op->kind), sim_kind_name(k), mbs);
    for (int i = 0; i < op->n_gemm && len > 0 && (size_t)len < n; i++)
        len += snprintf(out + len, n - (size_t)len, "%s%.0f,%.0f,%.0f,%.0f",
                        i ? ";" : "", op->gemm[i].m, op->gemm[i].n,
                        op->gemm[i].k, op->gemm[i].batch);
}

static double peak_for(const prof_gpu *g, prof_dtype dt)
{
    double p = g->peak_flops[dt];
    if (dt == PROF_DT_FP32 && p <= 0) p = g->peak_flops[PROF_DT_TF32];
    return p;
}

int64_t sim_op_ns(const prof_gpu *g, prof_dtype dt, const prof_op *op,
                  int mbs, sim_kind k, const sim_measured *meas)
{
    double flops = k == SIM_F ? op->fwd_flops
                 : k == SIM_B ? op->bwd_in_flops : op->bwd_w_flops;
    if (k == SIM_W && flops <= 0) return 0; /* no weights: no kernel */
    if (meas && meas->n) {
        char key[128];
        sim_op_signature(g, op, mbs, k, key, sizeof key);
        int64_t v = sim_measured_get(meas, key);
        if (v >= 0) return v;
    }
    double b = mbs, peak = peak_for(g, dt);
    flops *= b;
    double t_comp = 0;
    double gsum = 0;
    for (int i = 0; i < op->n_gemm; i++)
        gsum += 2 * op->gemm[i].m * op->gemm[i].n * op->gemm[i].k *
                (op->gemm[i].batch > 0 ? op->gemm[i].batch : 1);
    if (peak > 0) {
        if (gsum > 0) {
            for (int i = 0; i < op->n_gemm; i++) {
                const prof_gemm *q = &op->gemm[i];
                double bt = q->batch > 0 ? q->batch : 1;
                /* a microbatch multiplies rows, or the batch of
                 * batched GEMMs (attention: one per head) */
                double M = bt > 1 ? q->m : q->m * b, N = q->n, K = q->k;
                double gm = M, gn = N, gk = K;
                if (k == SIM_B) { gn = K; gk = N; }        /* dY W^T */
                else if (k == SIM_W) { gm = K; gk = M; }   /* X^T dY */
                double share = 2 * q->m * q->n * q->k * bt / gsum;
                double eff = prof_gemm_eff(&g->eff, gm, gn, gk);
                if (eff <= 0) eff = 1e-3;
                t_comp += flops * share / (peak * eff);
            }
        } else {
            t_comp = flops / peak;
        }
    }
    double bytes = (op->bytes_read + op->bytes_written) * b;
    if (k == SIM_B) bytes *= 2; /* reads the saved input and dY, writes dX */
    double t_mem = 0;
    if (bytes > 0 && g->mem_bw_bytes_per_s > 0) {
        double eff = prof_mem_eff(&g->eff, bytes);
        if (eff <= 0) eff = 1e-3;
        t_mem = bytes / (g->mem_bw_bytes_per_s * eff);
    }
    int kernels = op->n_gemm > 0 ? op->n_gemm : 1;
    double ns = fmax(t_comp, t_mem) * 1e9 + kernels * g->eff.launch_ns;
    return (int64_t)llround(ns);
}

static sim_costs *costs_alloc(int n_stages, int n_devices)
{
    sim_costs *c = util_calloc(1, sizeof *c);
    c->n_stages = n_stages;
    c->n_devices = n_devices;
    c->stage = util_calloc((size_t)n_stages, sizeof *c->stage);
    c->stage_device = util_calloc((size_t)n_stages, sizeof(int));
    c->xfer_bytes = util_calloc((size_t)n_stages * n_stages, sizeof(double));
    c->dev_gpu = util_calloc((size_t)n_devices, sizeof(int));
    c->dev_capacity = util_calloc((size_t)n_devices, sizeof(double));
    c->dev_peak_flops = util_calloc((size_t)n_devices, sizeof(double));
    for (int d = 0; d < n_devices; d++) c->dev_gpu[d] = d;
    return c;
}

void sim_costs_free(sim_costs *c)
{
    if (!c) return;
    free(c->stage);
    free(c->stage_device);
    free(c->xfer_bytes);
    free(c->dev_gpu);
    free(c->dev_capacity);
    free(c->dev_peak_flops);
    free(c);
}

sim_costs *sim_costs_uniform(int n_stages, int n_devices,
                             const int *stage_device, int64_t f_ns,
                             int64_t b_ns, int64_t w_ns, double xfer_bytes,
                             double act_bytes)
{
    sim_costs *c = costs_alloc(n_stages, n_devices);
    for (int s = 0; s < n_stages; s++) {
        sim_stage_cost *sc = &c->stage[s];
        sc->f_ns = f_ns;
        sc->b_ns = b_ns;
        sc->w_ns = w_ns;
        sc->act_bytes = act_bytes;
        sc->input_bytes = s ? xfer_bytes : 0;
        sc->wkeep_bytes = act_bytes / 2;
        sc->first_op = sc->last_op = -1;
        c->stage_device[s] = stage_device[s];
        if (s + 1 < n_stages)
            c->xfer_bytes[(size_t)s * n_stages + s + 1] =
                xfer_bytes > 0 ? xfer_bytes : 1;
    }
    c->samples_per_mb = 1;
    c->tokens_per_sample = 1;
    return c;
}

sim_costs *sim_costs_build(const prof_model *m, const prof_topo *t,
                           int n_stages, const int *first_op,
                           const int *last_op, const int *stage_device,
                           int n_devices, const sim_cost_opts *o,
                           util_err *e)
{
    if (n_devices > t->n_gpus) {
        util_errf(e, UTIL_EXIT_USAGE, "%d pipeline devices but the server "
                  "has %d GPUs", n_devices, t->n_gpus);
        return NULL;
    }
    int mbs = o && o->mbs > 0 ? o->mbs : 1;
    double state = o && o->state_bytes_per_param > 0
                 ? o->state_bytes_per_param : DEFAULT_STATE_BYTES;
    const sim_measured *meas = o ? o->measured : NULL;
    prof_dtype dt = m->spec.dtype;
    double wb = prof_dtype_bytes(dt);
    sim_costs *c = costs_alloc(n_stages, n_devices);
    int *op_stage = util_malloc(sizeof(int) * (size_t)(m->n_ops + 1));
    for (int i = 0; i < m->n_ops; i++) op_stage[i] = -1;
    for (int s = 0; s < n_stages; s++)
        for (int i = first_op[s]; i <= last_op[s]; i++) op_stage[i] = s;
    for (int i = 0; i < m->n_ops; i++)
        if (op_stage[i] < 0) {
            free(op_stage);
            sim_costs_free(c);
            util_errf(e, UTIL_EXIT_USAGE, "op %d (%s) is in no stage", i,
                      m->ops[i].name);
            return NULL;
        }
    for (int d = 0; d < n_devices; d++) {
        const prof_gpu *g = prof_topo_gpu(t, d);
        c->dev_capacity[d] = g->mem_bytes;
        c->dev_peak_flops[d] = peak_for(g, dt);
    }
    /* marks[i] = last consumer stage counted for producer op i */
    int *mark = util_malloc(sizeof(int) * (size_t)(m->n_ops + 1));
    for (int i = 0; i < m->n_ops; i++) mark[i] = -1;
    for (int s = 0; s < n_stages; s++) {
        sim_stage_cost *sc = &c->stage[s];
        c->stage_device[s] = stage_device[s];
        const prof_gpu *g = prof_topo_gpu(t, stage_device[s]);
        sc->first_op = first_op[s];
        sc->last_op = last_op[s];
        double f = 0, bb = 0, w = 0;
        for (int i = first_op[s]; i <= last_op[s]; i++) {
            const prof_op *op = &m->ops[i];
            f += (double)sim_op_ns(g, dt, op, mbs, SIM_F, meas);
            bb += (double)sim_op_ns(g, dt, op, mbs, SIM_B, meas);
            w += (double)sim_op_ns(g, dt, op, mbs, SIM_W, meas);
            sc->fwd_flops += op->fwd_flops * mbs;
            sc->bwd_flops += (op->bwd_in_flops + op->bwd_w_flops) * mbs;
            sc->params += op->params;
            sc->act_bytes += op->act_bytes * mbs;
            if (op->bwd_w_flops > 0) sc->wkeep_bytes += op->act_bytes * mbs;
            for (int k = 0; k < op->n_in; k++) {
                int p = op->in[k];
                if (p < 0 || p >= m->n_ops || op_stage[p] == s || mark[p] == s)
                    continue;
                mark[p] = s;
                c->xfer_bytes[(size_t)op_stage[p] * n_stages + s] +=
                    m->ops[p].out_bytes * mbs;
            }
        }
        sc->f_ns = (int64_t)f;
        sc->b_ns = (int64_t)bb;
        sc->w_ns = (int64_t)w;
        sc->weight_bytes = sc->params * wb;
        sc->grad_bytes = sc->params * wb;
        sc->opt_bytes = fmax(0, sc->params * (state - 2 * wb));
        double ob = sc->params * ADAM_BYTES_PER_PARAM;
        if (ob > 0 && g->mem_bw_bytes_per_s > 0)
            sc->opt_ns = (int64_t)llround(
                ob / (g->mem_bw_bytes_per_s * prof_mem_eff(&g->eff, ob)) * 1e9 +
                g->eff.launch_ns);
    }
    for (int s = 0; s < n_stages; s++)
        for (int q = 0; q < n_stages; q++)
            c->stage[s].input_bytes += c->xfer_bytes[(size_t)q * n_stages + s];
    free(mark);
    free(op_stage);
    c->topo = t;
    c->samples_per_mb = mbs;
    c->tokens_per_sample = m->spec.seq_len + m->spec.dec_seq_len;
    c->model_flops_per_sample = prof_model_train_flops(m, 0);
    return c;
}
