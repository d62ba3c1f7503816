/* The cost model: an op's task time is max(FLOPs / (peak x GEMM efficiency
 * of its shape), bytes / (memory bandwidth x efficiency of its size)) plus
 * a launch per kernel, unless a measured time for the same signature
 * overrides it. Stage costs are summed once per simulation, so the event
 * loop only looks numbers up. Memory per stage comes from the same pass. */
#include <limits.h>
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
/* a host without a DRAM node in its server file: dual-channel DDR4's
 * order, 20 GB/s */
#define HOST_BW_UNKNOWN 20e9

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
    /* without GEMMs, the bytes tell sizes apart */
    if (!op->n_gemm && len > 0 && (size_t)len < n)
        snprintf(out + len, n - (size_t)len, "b%.0f",
                 op->bytes_read + op->bytes_written);
}

void sim_op_signature_dt(const prof_gpu *g, const prof_op *op, int mbs,
                         sim_kind k, prof_dtype dt, char *out, size_t n)
{
    sim_op_signature(g, op, mbs, k, out, n);
    size_t len = strlen(out);
    if (dt == PROF_DT_TF32 && op->n_gemm > 0 && len < n)
        snprintf(out + len, n - len, "|tf32");
}

int64_t sim_op_ns(const prof_gpu *g, prof_dtype dt, const prof_op *op,
                  int mbs, sim_kind k, const sim_measured *meas)
{
    if (k == SIM_W && op->bwd_w_flops <= 0) return 0; /* no weights */
    /* a calibration's op times and fit are the executor's, which
     * computes in fp32 (its products in TF32 with exec --tf32): a plan at
     * another precision is priced by the datasheet's formula
     * (prof_gpu_at leaves no calibration); measurements given for this
     * simulation (meas) are taken as they are; TF32 where the GPU has
     * none is fp32, with its calibration */
    dt = prof_gpu_math(g, dt);
    /* TF32 changes cuBLAS's products only: any other op is the fp32
     * kernel, priced (and calibrated) as such; a product has the times
     * TF32 runs measured, else the datasheet's TF32 formula */
    if (dt == PROF_DT_TF32 && op->n_gemm == 0) dt = PROF_DT_FP32;
    const prof_calib *cal = dt == PROF_DT_FP32 || dt == PROF_DT_TF32
                          ? g->calib : NULL;
    int busy = g->busy;
    g = prof_gpu_at(g, dt);
    if ((meas && meas->n) || (cal && cal->n_ops)) {
        char key[140];
        sim_op_signature_dt(g, op, mbs, k, dt, key, sizeof key);
        int64_t v = sim_measured_get(meas, key);
        if (v >= 0) return v;
        double c = prof_calib_op_ns(cal, key, busy);
        if (c >= 0) return (int64_t)llround(c);
    }
    /* at most 1e15 ns (11.6 days) an op; a stage's sums of them are
     * held to SIM_TASK_NS_MAX, and a plan whose clock runs past
     * SIM_T_MAX is refused (the hardware files' least rates,
     * UTIL_HW_MIN, can price a large model's ops at years) */
    double ns = sim_op_model_ns(g, dt, op, mbs, k);
    return (int64_t)llround(ns < 1e15 ? ns : 1e15);
}

/* Streaming from a cache: cache_gain times faster for bytes well inside
 * cache_bytes, the gain fading as they outgrow it. */
static double cache_speedup(const prof_gpu *g, double bytes)
{
    double c = g->eff.cache_bytes, gain = g->eff.cache_gain;
    if (!(c > 0) || !(gain > 1)) return 1;
    double x = bytes / c;
    return 1 + (gain - 1) / (1 + x * x * x);
}

/* The efficiency model's factor for an op's kind and phase: of the GEMM
 * curve for ops with GEMMs, of streaming for the others (1 unset). */
static double kind_factor(const prof_gpu *g, const prof_op *op, sim_kind k)
{
    int ph = k == SIM_F ? PROF_PHASE_F : k == SIM_B ? PROF_PHASE_B
                                                    : PROF_PHASE_W;
    if (op->kind < 0 || op->kind >= PROF_OP_KIND_COUNT) return 1;
    double f = op->n_gemm > 0 ? g->eff.gemm_factor[op->kind][ph]
                              : g->eff.mem_factor[op->kind][ph];
    return f > 0 ? f : 1;
}

/* The ceiling of a tensor-core GEMM whose rows are not 16 bytes aligned
 * (prof_eff.unaligned), 1 where they are or it is not modelled. Whatever
 * the phase, the layer's width n and depth k are the rows' lengths of
 * its operands (the tokens, m, are rows), so the forward, the input
 * gradient and the weight gradient share it. */
double sim_gemm_unaligned_cap(const prof_gpu *g, prof_dtype dt,
                              const prof_gemm *q, long *width)
{
    double u = g->eff.unaligned;
    if (width) *width = 0;
    if (!(u > 0)) return 1;
    int eb = dt == PROF_DT_TF32 ? 4
           : dt == PROF_DT_FP16 || dt == PROF_DT_BF16 ? 2 : 0;
    if (!eb) return 1;          /* fp32 runs on the CUDA cores */
    int align = 16;
    long d[2] = {(long)q->n, (long)q->k};
    for (int i = 0; i < 2; i++) {
        int a = 1;
        while (a < 16 && d[i] * eb % (2 * a) == 0) a *= 2;
        if (a < align) {
            align = a;
            if (width) *width = d[i];
        }
    }
    return align >= 16 ? 1 : align >= 4 ? u : u / 2;
}

/* Whether a GEMM of an op runs in task kind k: a frozen weight has no
 * weight-gradient GEMM (a LoRA adapter's run). */
static int gemm_runs(const prof_gemm *q, sim_kind k)
{
    return k != SIM_W || !q->frozen;
}

double sim_op_model_ns(const prof_gpu *g, prof_dtype dt, const prof_op *op,
                       int mbs, sim_kind k)
{
    double flops = k == SIM_F ? op->fwd_flops
                 : k == SIM_B ? op->bwd_in_flops : op->bwd_w_flops;
    if (k == SIM_W && flops <= 0) return 0; /* no weights: no kernel */
    if (k != SIM_F && op->grad == PROF_GRAD_NONE) return 0;
    double b = mbs, peak = prof_gpu_peak(g, dt);
    flops *= b;
    double t_comp = 0;
    double gsum = 0;
    for (int i = 0; i < op->n_gemm; i++)
        if (gemm_runs(&op->gemm[i], k))
            gsum += 2 * op->gemm[i].m * op->gemm[i].n * op->gemm[i].k *
                    (op->gemm[i].batch > 0 ? op->gemm[i].batch : 1);
    /* TF32 is cuBLAS's math mode: what is not a GEMM computes in fp32 */
    if (dt == PROF_DT_TF32 && !(gsum > 0))
        peak = prof_gpu_peak(g, PROF_DT_FP32);
    if (peak > 0) {
        if (gsum > 0) {
            for (int i = 0; i < op->n_gemm; i++) {
                const prof_gemm *q = &op->gemm[i];
                if (!gemm_runs(q, k)) continue;
                double bt = q->batch > 0 ? q->batch : 1;
                /* a microbatch multiplies rows, or the batch of
                 * batched GEMMs (attention: one per head) */
                double M = bt > 1 ? q->m : q->m * b, N = q->n, K = q->k;
                double gm = M, gn = N, gk = K;
                if (k == SIM_B) { gn = K; gk = N; }        /* dY W^T */
                else if (k == SIM_W) { gm = K; gk = M; }   /* X^T dY */
                double share = 2 * q->m * q->n * q->k * bt / gsum;
                double eff = prof_gemm_eff(&g->eff, gm, gn, gk);
                eff = fmin(eff, sim_gemm_unaligned_cap(g, dt, q, NULL));
                if (eff <= 0) eff = 1e-3;
                t_comp += flops * share / (peak * eff);
            }
            t_comp *= kind_factor(g, op, k);
        } else {
            t_comp = flops / peak;
        }
    }
    double bytes = (op->bytes_read + op->bytes_written) * b;
    if (k == SIM_B) /* reads the saved input and dY, writes dX */
        bytes = op->bwd_bytes > 0 ? op->bwd_bytes * b : 2 * bytes;
    double t_mem = 0;
    if (bytes > 0 && g->mem_bw_bytes_per_s > 0) {
        double eff = prof_mem_eff(&g->eff, bytes);
        if (eff <= 0) eff = 1e-3;
        t_mem = bytes / (g->mem_bw_bytes_per_s * eff) / cache_speedup(g, bytes);
        if (op->n_gemm == 0) t_mem *= kind_factor(g, op, k);
    }
    int kernels = 0;
    for (int i = 0; i < op->n_gemm; i++) kernels += gemm_runs(&op->gemm[i], k);
    if (!kernels) kernels = 1;
    double t = fmax(t_comp, t_mem) * 1e9 + kernels * g->eff.launch_ns;
    /* a 4-bit base (QLoRA) is dequantized to 16 bits by a kernel of its
     * own before the forward's and the input gradient's GEMM */
    if (op->dequant_bytes > 0 && k != SIM_W && g->mem_bw_bytes_per_s > 0) {
        double qb = op->dequant_bytes;
        t += qb / (g->mem_bw_bytes_per_s * prof_mem_eff(&g->eff, qb)) * 1e9 +
             g->eff.launch_ns;
    }
    return t * prof_calib_busy(g->calib, g->busy);
}

double sim_opt_model_ns(const prof_gpu *g, double params)
{
    double ob = params * ADAM_BYTES_PER_PARAM;
    if (!(ob > 0) || !(g->mem_bw_bytes_per_s > 0)) return 0;
    double f = g->eff.opt_factor > 0 ? g->eff.opt_factor : 1;
    return (f * ob / (g->mem_bw_bytes_per_s * prof_mem_eff(&g->eff, ob)) /
                cache_speedup(g, ob) * 1e9 + g->eff.launch_ns) *
           prof_calib_busy(g->calib, g->busy);
}

double sim_cpu_opt_ns(const prof_topo *t, int g, double params)
{
    /* calibrated: AdamW as fast as a run's CPU steps were */
    const prof_calib *c = prof_topo_gpu(t, g)->calib;
    if (c && c->tiers.adam_params_per_s > 0)
        return params / c->tiers.adam_params_per_s * 1e9;
    int h = prof_topo_gpu_host_mem(t, g);
    double bw = h >= 0 && t->nodes[h].read_bw_bytes_per_s > 0
              ? t->nodes[h].read_bw_bytes_per_s : HOST_BW_UNKNOWN;
    return params * ADAM_BYTES_PER_PARAM / bw * 1e9;
}

double sim_cpu_pass_ns(const prof_topo *t, int g, double bytes)
{
    return sim_cpu_opt_ns(t, g, bytes / ADAM_BYTES_PER_PARAM);
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
    for (int st = 0; st < n_stages; st++) c->stage[st].model_stage = st;
    c->n_model_stages = n_stages;
    c->pp = n_devices;
    c->dp = c->tp = c->replicas = 1;
    c->fold = 1;
    return c;
}

void sim_costs_replicate(sim_costs *c, int dp, int pipes)
{
    UTIL_NEVER(c->replicas != 1 || c->fold > 1);
    if (dp < 1) dp = 1;
    if (pipes < 1) pipes = 1;
    int S = c->n_stages, pp = c->n_devices, R = dp * pipes, N = R * S;
    if (R == 1) return;
    sim_stage_cost *st = util_calloc((size_t)N, sizeof *st);
    int *sd = util_malloc(sizeof(int) * (size_t)N);
    double *xb = util_calloc((size_t)N * N, sizeof(double));
    for (int r = 0; r < R; r++) {
        int q = r / pipes, b = r % pipes;
        for (int s = 0; s < S; s++) {
            int v = r * S + s;
            st[v] = c->stage[s];
            st[v].model_stage = s;
            int d = c->stage_device[s];
            sd[v] = q * pp + (b ? pp - 1 - d : d);
            for (int t = 0; t < S; t++)
                xb[(size_t)v * N + r * S + t] = c->xfer_bytes[(size_t)s * S + t];
        }
    }
    int nd = pp * dp;
    int *gpu = util_malloc(sizeof(int) * (size_t)nd);
    double *cap = util_malloc(sizeof(double) * (size_t)nd);
    double *pk = util_malloc(sizeof(double) * (size_t)nd);
    for (int d = 0; d < nd; d++) {
        gpu[d] = d * c->tp;
        cap[d] = c->dev_capacity[d % pp];
        pk[d] = c->dev_peak_flops[d % pp];
    }
    free(c->stage); free(c->stage_device); free(c->xfer_bytes);
    free(c->dev_gpu); free(c->dev_capacity); free(c->dev_peak_flops);
    c->stage = st;
    c->stage_device = sd;
    c->xfer_bytes = xb;
    c->dev_gpu = gpu;
    c->dev_capacity = cap;
    c->dev_peak_flops = pk;
    c->n_stages = N;
    c->n_devices = nd;
    c->dp = dp;
    c->replicas = R;
}

/* ---- tensor parallelism (Megatron-LM, Shoeybi et al. 2019) ---- */

typedef enum { TP_NONE, TP_COL, TP_ROW, TP_SPLIT } tp_role;

/* How Megatron splits an op, by the role the graph builder gave it:
 * column-parallel GEMMs (QKV, Q, KV, MLP up, the vocabulary-parallel
 * head), row-parallel ones (attention output, MLP down), ops split with
 * them (attention heads and their RoPE, the MLP activation, the embedding
 * table, the vocabulary-parallel loss); the rest (norms, residual adds,
 * pooler, the masked-LM transform: its dense layer, GELU and norm, whose
 * input and output are whole on every rank) is replicated. */
static tp_role tp_role_of(const prof_op *op)
{
    switch (op->role) {
    case PROF_ROLE_QKV: case PROF_ROLE_Q: case PROF_ROLE_KV:
    case PROF_ROLE_MLP_UP: case PROF_ROLE_LM_HEAD:
        return TP_COL;
    case PROF_ROLE_ATTN_OUT: case PROF_ROLE_MLP_DOWN:
        return TP_ROW;
    case PROF_ROLE_ATTN_SCORES: case PROF_ROLE_ATTN_SOFTMAX:
    case PROF_ROLE_ATTN_CONTEXT: case PROF_ROLE_ATTN_FUSED:
    case PROF_ROLE_MLP_ACT: case PROF_ROLE_EMBED:
    case PROF_ROLE_LOSS: case PROF_ROLE_QKV_EXPAND:
        return TP_SPLIT;
    default:
        return TP_NONE;
    }
}

/* Whether a tensor-parallel rank runs a t-th of the op: replicated GEMMs
 * stay whole, and the other replicated ops (norms, residual adds,
 * dropouts) unless sequence parallel; with it, the masked-LM transform's
 * dense layer runs on a rank's tokens (Megatron-LM's BERT head), the
 * pooler on every sequence's first token, whole. */
static int op_is_split(const prof_op *op, int t, int sp)
{
    return t > 1 && (tp_role_of(op) != TP_NONE ||
                     (sp && (!op->n_gemm || op->role == PROF_ROLE_MLM_DENSE)));
}

/* The op one tensor-parallel rank runs; with sequence parallelism the
 * replicated ops (norms, residual adds, dropouts) run on s/t tokens. */
static prof_op op_split(const prof_op *op, int t, int sp)
{
    prof_op o = *op;
    tp_role r = tp_role_of(op);
    if (!op_is_split(op, t, sp)) return o;
    o.fwd_flops /= t;
    o.bwd_in_flops /= t;
    o.bwd_w_flops /= t;
    o.bytes_read /= t;
    o.bytes_written /= t;
    o.bwd_bytes /= t;
    o.fwd_scratch /= t;
    o.bwd_scratch /= t;
    if (r != TP_NONE) {
        /* what every rank holds whole (op->tp_rep) is not split: of the
         * trained parameters, or of the frozen base's bytes */
        double rep = op->tp_rep > 0 && op->tp_rep < op->params ? op->tp_rep
                                                                : 0;
        int trains = op->grad == PROF_GRAD_TRAIN;
        double base = op->params - (trains ? 0 : op->train_params);
        o.params = (op->params - rep) / t + rep;
        o.train_params = trains && op->train_params >= rep
                       ? (op->train_params - rep) / t + rep
                       : op->train_params / t;
        double fr = !trains && base > rep ? op->frozen_bytes * rep / base : 0;
        o.frozen_bytes = (op->frozen_bytes - fr) / t + fr;
        o.dequant_bytes /= t;
    }
    /* a column-parallel GEMM keeps its (replicated) input */
    if (r != TP_COL || sp) o.act_bytes /= t;
    for (int i = 0; i < o.n_gemm; i++) {
        prof_gemm *g = &o.gemm[i];
        /* a LoRA adapter: A (k -> r) beside a column-parallel weight is
         * replicated and B split by columns; beside a row-parallel one A
         * is split by rows and B replicated */
        if (g->adapter == PROF_ADAPTER_A) {
            if (r == TP_ROW) g->k /= t;
            continue;
        }
        if (g->adapter == PROF_ADAPTER_B) {
            if (r == TP_COL) g->n /= t;
            continue;
        }
        if (g->batch > 1) g->batch = fmax(1, g->batch / t); /* heads */
        else if (r == TP_NONE) g->m /= t;   /* a rank's tokens */
        else if (r == TP_ROW) g->k /= t;
        else g->n /= t;
    }
    return o;
}

prof_op sim_op_tp(const prof_op *op, int t) { return op_split(op, t, 0); }

int sim_sp_splits(const prof_model *m, int tp)
{
    return tp > 0 && m->spec.seq_len % tp == 0 &&
           (m->spec.dec_seq_len <= 0 || m->spec.dec_seq_len % tp == 0);
}

int sim_tp_heads_check(const prof_model *m, int tp, const char *what,
                       util_err *e)
{
    const prof_model_spec *s = &m->spec;
    if (tp <= 1 || (s->heads % tp == 0 && s->kv_heads % tp == 0)) return 0;
    int kv = s->heads % tp == 0;
    return util_errf(e, UTIL_EXIT_USAGE, "%s %d does not divide the %d "
                     "attention heads%s of %s (Megatron splits heads over "
                     "the tensor-parallel GPUs)", what, tp,
                     kv ? s->kv_heads : s->heads,
                     kv ? " of keys and values" : "", s->name);
}

double sim_op_act_rank(const prof_model *m, int i, int t, int sp)
{
    const prof_op *op = &m->ops[i];
    if (t <= 1) return op->act_bytes;
    if (sp) return op->act_bytes / t;
    switch (tp_role_of(op)) {
    case TP_SPLIT: return op->act_bytes / t;
    case TP_ROW: {
        /* its input is split; a dropout mask on its all-reduced output
         * is whole on every rank */
        double in = op->n_in > 0 && op->in[0] >= 0
                  ? fmin(m->ops[op->in[0]].out_bytes, op->act_bytes)
                  : op->act_bytes;
        return in / t + (op->act_bytes - in);
    }
    default: return op->act_bytes;
    }
}

/* Bytes of op i's output on one rank: split along heads or the hidden
 * dimension after split ops, whole after all-reduces and replicated ops
 * (the residual stream), split along the sequence with sp. */
static double out_rank(const prof_op *op, int t, int sp)
{
    if (t <= 1) return op->out_bytes;
    tp_role r = tp_role_of(op);
    if (sp || r == TP_COL || (r == TP_SPLIT && op->role != PROF_ROLE_EMBED))
        return op->out_bytes / t;
    return op->out_bytes;
}

/* ---- recomputation (Korthikanti et al. 2022) ---- */

static const char *const rc_names[SIM_RC_COUNT] = {"none", "full",
                                                   "selective"};

const char *sim_recompute_name(int rc)
{
    return rc >= 0 && rc < SIM_RC_COUNT ? rc_names[rc] : "?";
}

int sim_recompute_parse(const char *s)
{
    for (int i = 0; i < SIM_RC_COUNT; i++)
        if (!strcmp(s, rc_names[i])) return i;
    return -1;
}

int sim_recompute_arg(int argc, char **argv, int *i, int *out, util_err *e)
{
    *out = SIM_RC_FULL;
    if (*i + 1 >= argc || argv[*i + 1][0] == '-') return 0;
    int rc = sim_recompute_parse(argv[*i + 1]);
    if (rc < 0)
        return util_errf(e, UTIL_EXIT_USAGE, "--recompute '%s': expected "
                         "full, selective or none", argv[*i + 1]);
    *out = rc;
    ++*i;
    return 0;
}

double sim_grad_bucket(double grad_bucket, const prof_topo *t)
{
    if (grad_bucket >= 0) return grad_bucket;
    return t && prof_topo_cpu(t) ? 0 : SIM_GRAD_BUCKET_DDP;
}

int sim_costs_allreduce(const sim_costs *c)
{
    return c->replicas * (c->fold > 1 ? c->fold : 1) > 1 && !c->zero &&
           !c->offload;
}

int sim_grad_bucket_arg(int argc, char **argv, int *i, double *out,
                        util_err *e)
{
    if (*i + 1 >= argc)
        return util_errf(e, UTIL_EXIT_USAGE, "--grad-bucket needs a size "
                         "(25M, as PyTorch's DDP; 0 or stage: one all-reduce "
                         "per stage, after its backward)");
    const char *v = argv[++*i];
    if (sim_grad_bucket_parse(v, out))
        return util_errf(e, UTIL_EXIT_USAGE, "--grad-bucket '%s': expected "
                         SIM_GRAD_BUCKET_TAKES " (25M is PyTorch DDP's; 0 "
                         "or stage: one all-reduce a stage)", v);
    return 0;
}

int sim_grad_bucket_ok(double bytes)
{
    return bytes == 0 ||
           (bytes >= 1024 && bytes <= 1024.0 * 1024 * 1024 * 1024);
}

int sim_grad_bucket_parse(const char *v, double *out)
{
    double b = 0;
    if (strcmp(v, "stage") &&
        (util_parse_size(v, &b) || !sim_grad_bucket_ok(b)))
        return -1;
    *out = b;
    return 0;
}

/* ---- sharded data parallelism (ZeRO; PyTorch FSDP) ---- */

static const char *const fsdp_names[SIM_FSDP_COUNT] = {"none", "full",
                                                       "hybrid"};

const char *sim_fsdp_name(int f)
{
    return f >= 0 && f < SIM_FSDP_COUNT ? fsdp_names[f] : "?";
}

int sim_fsdp_parse(const char *s)
{
    for (int i = SIM_FSDP_FULL; i < SIM_FSDP_COUNT; i++)
        if (!strcmp(s, fsdp_names[i])) return i;
    return -1;
}

int sim_shard_arg(int argc, char **argv, int *i, int *zero, int *fsdp,
                  util_err *e)
{
    const char *a = argv[*i];
    int isz = !strcmp(a, "--zero"), isf = !strcmp(a, "--fsdp");
    if (!isz && !isf) return 0;
    if (*i + 1 >= argc)
        return util_errf(e, UTIL_EXIT_USAGE, "%s needs a value (%s)", a,
                         isz ? "0, 1, 2 or 3" : "full or hybrid");
    const char *v = argv[++*i];
    if (isz) {
        if (strlen(v) != 1 || v[0] < '0' || v[0] > '3')
            return util_errf(e, UTIL_EXIT_USAGE, "--zero '%s': expected 0, "
                             "1, 2 or 3", v);
        *zero = v[0] - '0';
    } else {
        int f = sim_fsdp_parse(v);
        if (f < 0)
            return util_errf(e, UTIL_EXIT_USAGE, "--fsdp '%s': expected "
                             "full or hybrid", v);
        *fsdp = f;
    }
    return 1;
}

int sim_zero_stage(int zero, int fsdp)
{
    return fsdp > SIM_FSDP_NONE ? 3 : zero;
}

int sim_shard_group(const prof_topo *t, int zero, int fsdp, int dp,
                    int rgpus, util_err *e)
{
    if (zero <= 0 || dp < 2) return 1;
    if (fsdp != SIM_FSDP_HYBRID) return dp;
    int gps = t->gpus_per_server;
    int h = gps > 0 && gps % rgpus == 0 ? gps / rgpus : 1;
    if (h > dp) h = dp;
    if (h < 2 || dp % h)
        return util_errf(e, UTIL_EXIT_USAGE, "fsdp hybrid: a replica takes "
                         "%d GPU(s) (pp x tp) of a server's %d, so %s; "
                         "hybrid sharding shards inside a server (use fsdp "
                         "full, or a smaller pp x tp)", rgpus, gps,
                         h < 2 ? "no two data-parallel ranks of a stage "
                         "share a server" : "the data-parallel group does "
                         "not split into whole servers"), 0;
    return h;
}

int sim_state_bytes_check(const prof_model *m, double state, util_err *e)
{
    double wb = prof_dtype_bytes(m->spec.dtype);
    if (state <= 0 || state >= 2 * wb) return 0;
    /* (it was taken as the weights' and gradients' alone) */
    return util_errf(e, UTIL_EXIT_USAGE, "state bytes per parameter %g "
                     "(--state-bytes, a plan's state_bytes_per_param): %s's "
                     "%s weights and their gradients alone take %g; the "
                     "optimizer's state comes on top (Adam in mixed "
                     "precision: 16 in all)", state,
                     m->spec.name, prof_dtype_name(m->spec.dtype), 2 * wb);
}

void sim_zero_bytes(double params, double wbytes, double state, int zero,
                    int shard, double *w, double *g, double *opt)
{
    *w = *g = params * wbytes;
    *opt = fmax(0, params * (state - 2 * wbytes));
    if (shard < 2) return;
    if (zero >= 1) *opt /= shard;
    if (zero >= 2) *g /= shard;
    if (zero >= 3) *w /= shard;
}

static int attn_core_role(prof_op_role r)
{
    return r == PROF_ROLE_ATTN_SCORES || r == PROF_ROLE_ATTN_SOFTMAX ||
           r == PROF_ROLE_ATTN_CONTEXT;
}

int sim_op_recomputed(const prof_model *m, int i, int rc)
{
    const prof_op *op = &m->ops[i];
    /* a frozen prefix runs no backward: nothing of it is recomputed */
    if (op->grad == PROF_GRAD_NONE) return 0;
    if (rc == SIM_RC_SELECTIVE) return attn_core_role(op->role);
    if (rc != SIM_RC_FULL || op->layer < 0 || op->layer >= m->n_layers)
        return 0;
    /* a transformer layer: one with attention (embeddings and the head
     * keep theirs, as Megatron checkpoints its transformer layers only) */
    const prof_layer *L = &m->layers[op->layer];
    for (int k = L->first_op; k < L->first_op + L->n_ops; k++)
        if (attn_core_role(m->ops[k].role) ||
            m->ops[k].role == PROF_ROLE_ATTN_FUSED)
            return 1;
    return 0;
}

/* One recomputed segment [a, b] (ops of one layer, or one attention
 * core): its checkpoint, the outputs of ops before it that it reads, each
 * once; what its forward holds at most beyond the checkpoint when each
 * tensor is freed once its last reader in the segment ran (the segment's
 * output stays: the next checkpoint); its activations. */
static void segment(const prof_model *m, int a, int b, int t, int sp,
                    double *ckpt, double *fwd_ws, double *act)
{
    enum { MAXP = 64 };
    int prod[MAXP], np = 0;
    double live = 0;
    *ckpt = *fwd_ws = *act = 0;
    /* each of the segment's tensors' last reader in it (-1: none) */
    int *last = util_malloc(sizeof(int) * (size_t)(b - a + 1));
    for (int p = a; p <= b; p++) last[p - a] = -1;
    for (int q = a; q <= b; q++)
        for (int j = 0; j < m->ops[q].n_in; j++) {
            int p = m->ops[q].in[j];
            if (p >= a && p < q) last[p - a] = q;
        }
    for (int k = a; k <= b; k++) {
        const prof_op *op = &m->ops[k];
        *act += sim_op_act_rank(m, k, t, sp);
        for (int j = 0; j < op->n_in; j++) {
            int p = op->in[j], seen = 0;
            if (p < 0 || p >= a) continue;
            for (int q = 0; q < np; q++) seen |= prod[q] == p;
            if (seen || np == MAXP) continue;
            prod[np++] = p;
            *ckpt += out_rank(&m->ops[p], t, sp);
        }
        live += out_rank(op, t, sp);
        if (live > *fwd_ws) *fwd_ws = live;
        /* free the segment's tensors whose last reader in it was op k */
        for (int p = a; p < k; p++)
            if (last[p - a] == k) live -= out_rank(&m->ops[p], t, sp);
    }
    free(last);
}

/* The forward of ops first..last that run no backward (PROF_GRAD_NONE:
 * before the model's first op that trains), per sample: *ws what it
 * holds at most, each tensor until its last reader in the stage ran
 * (outputs a later stage reads until the end; an input from an earlier
 * stage from the start: its receive's bytes go as the F starts,
 * sim/memory.c); *sent the outputs a later stage reads. A tensor an op
 * that trains reads is its kept activation, not counted here. These ops
 * come first in the model, so in a stage they run before any op that
 * keeps an activation. */
static void none_fwd(const prof_model *m, int first, int last, int t, int sp,
                     double *ws, double *sent)
{
    *ws = *sent = 0;
    if (m->ops[first].grad != PROF_GRAD_NONE) return;
    /* per tensor (produced by op p <= last): whether it is held here, and
     * its last reader in the stage (INT_MAX: a later stage reads it) */
    int *lastr = util_malloc(sizeof(int) * (size_t)(last + 1));
    int *head = util_malloc(sizeof(int) * (size_t)(last + 1));
    int *next = util_malloc(sizeof(int) * (size_t)(last + 1));
    uint8_t *held = util_calloc((size_t)last + 1, 1);
    for (int p = 0; p <= last; p++) {
        lastr[p] = -1;
        held[p] = m->ops[p].grad == PROF_GRAD_NONE;
    }
    for (int q = first; q < m->n_ops; q++)
        for (int j = 0; j < m->ops[q].n_in; j++) {
            int p = m->ops[q].in[j];
            if (p < 0 || p > last || p >= q || !held[p]) continue;
            if (p < first && q > last) continue;  /* another stage's */
            if (m->ops[q].grad != PROF_GRAD_NONE && q <= last)
                held[p] = 0;                    /* a kept activation */
            else if (q > last)
                lastr[p] = INT_MAX;
            else if (lastr[p] != INT_MAX)
                lastr[p] = q;
        }
    /* the tensors each op reads last, listed by that op */
    for (int k = 0; k <= last; k++) head[k] = -1;
    for (int p = 0; p <= last; p++)
        if (held[p] && lastr[p] >= first && lastr[p] <= last) {
            next[p] = head[lastr[p]];
            head[lastr[p]] = p;
        }
    double live = 0;
    for (int p = 0; p < first; p++)
        if (held[p] && lastr[p] >= first) live += out_rank(&m->ops[p], t, sp);
    for (int k = first; k <= last; k++) {
        if (held[k]) live += out_rank(&m->ops[k], t, sp);
        if (live > *ws) *ws = live;
        for (int p = head[k]; p >= 0; p = next[p])
            live -= out_rank(&m->ops[p], t, sp);
    }
    for (int p = first; p <= last; p++)
        if (held[p] && lastr[p] == INT_MAX)
            *sent += out_rank(&m->ops[p], t, sp);
    free(lastr);
    free(head);
    free(next);
    free(held);
}

/* What a stage's backward holds at most beyond what it starts with, per
 * sample, walking its ops last to first as the executor runs them, from
 * the gradients of its outputs the next stages sent: an op
 * allocates the gradient of each input not yet given one (a tensor read
 * twice gets one, summed), then frees the gradient of its output and its
 * saved activation, unless its weight gradient waits for a later W
 * (split: the op's input and output gradient stay, wkeep_bytes). An
 * activation a recomputation brings back is the recomputation's working
 * set (rec_ws, one layer's, held from the recompute to the backward's
 * end); the layer's ops free theirs as their backward ends all the same,
 * which lowers what the rest of its backward holds, until the next
 * layer is recomputed (a new segment: the working set is whole again).
 * Split (a later W), the ops with weights keep theirs for it: once the
 * next layer is recomputed into the working set they are held beside
 * it, to the W.
 * QLoRA's op dequantizes its weight (deq_of of its dequant_bytes) while
 * its backward runs, beside what that op holds, not the stage's largest
 * beside the stage's peak. The four variants in one walk (which
 * gradients exist does not depend on them): ws[k], k & 1 fused (B and W
 * in one task, BW), k & 2 recomputed under rc (sim_stage_cost's
 * bwd_ws_bytes, here per sample of a microbatch of mbs: the dequantized
 * weight is the microbatch's, counted as 1/mbs a sample). */
static void bwd_ws(const prof_model *m, int first, int last, int t, int sp,
                   int rc, int mbs, double deq_of, double ws[4])
{
    uint8_t *has = util_calloc((size_t)(last - first + 2), 1);
    double live[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) ws[k] = 0;
    /* the gradients of the outputs later stages read arrive before it
     * and stay until their op's backward (the receive's bytes go as the
     * backward starts: sim/memory.c) */
    for (int j = last + 1; j < m->n_ops; j++)
        for (int k = 0; k < m->ops[j].n_in; k++) {
            int p = m->ops[j].in[k];
            if (p < first || p > last || has[p - first] ||
                m->ops[p].grad == PROF_GRAD_NONE ||
                m->ops[j].grad == PROF_GRAD_NONE)
                continue;
            has[p - first] = 1;
            for (int q = 0; q < 4; q++) live[q] += out_rank(&m->ops[p], t, sp);
        }
    for (int k = 0; k < 4; k++) ws[k] = live[k];
    /* what the recomputed segment being walked has freed of its working
     * set (a segment: consecutive recomputed ops of one layer, as
     * sim_act_range cuts them) */
    double seg_free[4] = {0, 0, 0, 0};
    /* ...and what it keeps for a later W (split): held beyond the
     * working set once the next layer is recomputed into it */
    double seg_held[4] = {0, 0, 0, 0};
    /* the segments as sim_act_range cuts them (seg: each op's, -1 for
     * one not recomputed) and each one's working set: the recompute's
     * (rec_ws) is the largest's, so a smaller one being walked holds
     * that much less (corr); before the first, the stage's last one,
     * which the recompute task brings back */
    int n = last - first + 1, ns = 0, *seg = util_malloc(sizeof(int) *
                                                         (size_t)(n + 1));
    double *sws = util_malloc(sizeof(double) * (size_t)(n + 1)), big = 0;
    for (int i = first; i <= last;) {
        if (m->ops[i].grad == PROF_GRAD_NONE || !sim_op_recomputed(m, i, rc)) {
            seg[i - first] = -1;
            i++;
            continue;
        }
        int j = i;
        while (j < last && m->ops[j + 1].layer == m->ops[i].layer &&
               sim_op_recomputed(m, j + 1, rc))
            j++;
        double ck, fw, ac;
        segment(m, i, j, t, sp, &ck, &fw, &ac);
        sws[ns] = ac - ck;
        big = fmax(big, sws[ns]);
        for (int q = i; q <= j; q++) seg[q - first] = ns;
        ns++;
        i = j + 1;
    }
    double corr = ns ? sws[ns - 1] - big : 0;
    int cur = ns - 1;
    for (int i = last; i >= first; i--) {
        const prof_op *op = &m->ops[i];
        if (op->grad == PROF_GRAD_NONE) continue;
        double add = 0;
        for (int j = 0; j < op->n_in; j++) {
            int p = op->in[j];
            if (p < 0) continue;
            /* an input from another stage: a gradient to send, its own */
            if (p >= first) {
                if (has[p - first]) continue;
                has[p - first] = 1;
            }
            add += out_rank(&m->ops[p], t, sp);
        }
        double dy = has[i - first] ? out_rank(op, t, sp) : 0;
        double act = sim_op_act_rank(m, i, t, sp);
        double scratch = op->bwd_scratch > 0 && op_is_split(op, t, sp)
                       ? op->bwd_scratch / t : op->bwd_scratch;
        if (op->dequant_bytes > 0) {
            prof_op x = op_split(op, t, sp);
            scratch += x.dequant_bytes * deq_of / (mbs > 0 ? mbs : 1);
        }
        int rec = seg[i - first] >= 0, waits = op->bwd_w_flops > 0;
        if (rec && seg[i - first] != cur) {
            cur = seg[i - first];
            corr = sws[cur] - big;
            for (int k = 0; k < 4; k++) {
                live[k] += seg_held[k];
                seg_free[k] = seg_held[k] = 0;
            }
        }
        for (int k = 0; k < 4; k++) {
            live[k] += add;
            double held = live[k] - (k & 2 ? seg_free[k] - corr : 0);
            if (held + scratch > ws[k]) ws[k] = held + scratch;
            /* (a segment's first op frees its checkpoint too, as its
             * backward ends: keep_bytes, not the working set; counted
             * again once the next segment starts, a checkpoint too many
             * at most) */
            if ((k & 1) || !waits) {
                live[k] -= dy + (k & 2 && rec ? 0 : act);
                if (k & 2 && rec) seg_free[k] += act;
            } else if (k & 2 && rec) {
                seg_held[k] += act;
            }
        }
    }
    free(seg);
    free(sws);
    free(has);
}

/* Tensors two ops share, counted on one of them, kept twice where a cut
 * falls between them: what stage [first, last] keeps beyond its ops' own
 * counts, per sample (negative: less). A ReLU keeps nothing of its own:
 * its backward reads the signs of its output, which the MLP's second
 * linear keeps as its input (or, frozen, keeps for it:
 * prof_model_finetune). With a cut between them the ReLU's stage keeps
 * that output itself, and a frozen linear on the next stage keeps
 * nothing. */
static int bare_relu(const prof_model *m, int i)
{
    const prof_op *o = &m->ops[i];
    return o->role == PROF_ROLE_MLP_ACT && m->spec.act == PROF_ACT_RELU &&
           !m->spec.gated_mlp && o->act_bytes == 0 &&
           o->grad != PROF_GRAD_NONE;
}

static double relu_cut(const prof_model *m, int first, int last, int t,
                       int sp)
{
    double d = 0;
    if (last + 1 < m->n_ops && bare_relu(m, last))
        d += out_rank(&m->ops[last], t, sp);
    const prof_op *o = &m->ops[first];
    if (first > 0 && o->n_in > 0 && o->in[0] == first - 1 &&
        bare_relu(m, first - 1) && o->grad != PROF_GRAD_TRAIN &&
        o->n_gemm == 1)
        d -= fmin(out_rank(&m->ops[first - 1], t, sp),
                  sim_op_act_rank(m, first, t, sp));
    return d;
}

/* An attention's context reads the probabilities the softmax keeps for
 * its own backward (without dropout, counted on the softmax): a context
 * that begins stage `first` keeps the copy it received, per sample. */
static double ctx_cut(const prof_model *m, int first, int t, int sp)
{
    const prof_op *o = &m->ops[first];
    if (o->role == PROF_ROLE_ATTN_CONTEXT && o->n_in > 0 &&
        o->in[0] >= 0 && o->in[0] < first && !m->spec.dropout &&
        o->grad != PROF_GRAD_NONE)
        return out_rank(&m->ops[o->in[0]], t, sp);
    return 0;
}

sim_act sim_act_range(const prof_model *m, int first, int last, int t,
                      int sp, int rc)
{
    sim_act r = {0, 0, 0, 0};
    if (rc == SIM_RC_NONE) rc = SIM_RC_FULL;
    for (int i = first; i <= last && i < m->n_ops;) {
        if (!sim_op_recomputed(m, i, rc)) {
            double a = sim_op_act_rank(m, i, t, sp);
            r.act += a;
            r.keep += a;
            i++;
            continue;
        }
        int j = i;
        while (j < last && j + 1 < m->n_ops && m->ops[j + 1].layer ==
               m->ops[i].layer && sim_op_recomputed(m, j + 1, rc))
            j++;
        double ck, fw, ac;
        segment(m, i, j, t, sp, &ck, &fw, &ac);
        r.act += ac;
        r.keep += ck;
        r.fwd_ws = fmax(r.fwd_ws, fw);
        r.rec_ws = fmax(r.rec_ws, ac - ck);
        i = j + 1;
    }
    return r;
}

/* What NCCL's ring (Simple protocol, the one it picks for the megabyte
 * messages of tensor parallelism) adds to the wire, from NCCL's own cost
 * model (NCCL_BASE_NS and the steps' in sim/ir.h): a base latency of 8.4
 * us per collective and 3.4 us per ring step over NVLink (5.7 us over
 * PCIe). NVLink carries packet headers: NCCL's maintainers give ~20%
 * protocol overhead (450 GB/s line rate, ~370 GB/s effective on H100;
 * NVIDIA/nccl-tests issue 212), so a ring over NVLink moves 370/450 of
 * the links' rate. */
#define NVLINK_DATA_EFF (370.0 / 450.0)

double sim_ring_step_ns(int R, int nodes, double intra_ns, int steps,
                        double calls, int pre_ampere)
{
    if (R < 2 || steps < 1) return 0;
    if (nodes < 1) nodes = 1;
    if (nodes > R) nodes = R;
    /* an all-reduce's ring goes round twice */
    int ar = steps > R - 1;
    int inter = ar ? (nodes > 1 ? 2 * nodes : 0) : nodes - 1;
    if (inter > steps) inter = steps;
    double call = NCCL_BASE_NS + (steps - inter) * intra_ns +
                  inter * NCCL_STEP_NET_NS;
    if (ar && nodes > 1) call *= pre_ampere ? 1.9 : 1.4;
    return call / steps * calls;
}

/* The ring of tensor-parallel GPUs g0..g0+t-1, every GPU sending to the
 * next at once: *lat_ns is the slowest route's latency, *bw the slowest of
 * the t flows' max-min rates on the server graph (0: nothing moves). The
 * ring's links are numbered afresh in the order its routes name them;
 * max-min visits links in that order, so the rates are those it finds on
 * the whole graph, for the work of the ring's routes alone. A step takes at
 * least NCCL's per-step latency; NVLink links count at their data rate. */
static void tp_ring(const prof_topo *tp, int g0, int t, double *lat_ns,
                    double *bw)
{
    enum { MAXF = 64, MAXL = 1024 };
    const int *rt[MAXF];
    int len[MAXF], nf = 0, used = 0, nl = 0;
    int hop[MAXL], dl[MAXL]; /* routes in local numbers; local -> link */
    *lat_ns = 0;
    *bw = 0;
    for (int i = 0; i < t && i < MAXF; i++) {
        int n = 0;
        const int *r = prof_topo_gpu_route(tp, g0 + i, g0 + (i + 1) % t, &n);
        if (!r || !n) continue;
        UTIL_NEVER(used + n > MAXL);
        for (int k = 0; k < n; k++) {
            int j = 0;
            while (j < nl && dl[j] != r[k]) j++;
            if (j == nl) dl[nl++] = r[k];
            hop[used + k] = j;
        }
        rt[nf] = hop + used;
        len[nf++] = n;
        used += n;
        double l = prof_route_latency_ns(tp, r, n);
        for (int k = 0; k < n; k++)
            l = fmax(l, tp->links[r[k] / 2].kind == PROF_LINK_NVLINK
                        ? NCCL_STEP_NVLINK_NS : NCCL_STEP_PCIE_NS);
        if (l > *lat_ns) *lat_ns = l;
    }
    if (!nf) return;
    double cap[MAXL], rem[MAXL], rate[MAXF], b = HUGE_VAL;
    int cnt[MAXL] = {0}, touched[MAXL];
    uint8_t frozen[MAXF];
    for (int j = 0; j < nl; j++) {
        const prof_link *lk = &tp->links[dl[j] / 2];
        cap[j] = lk->bw_bytes_per_s *
                 (lk->kind == PROF_LINK_NVLINK ? NVLINK_DATA_EFF : 1);
    }
    sim_maxmin_scratch w = {rem, cnt, touched, frozen};
    sim_maxmin(nf, rt, len, cap, rate, &w);
    for (int f = 0; f < nf; f++) b = fmin(b, rate[f]);
    if (b > 0 && b != HUGE_VAL) *bw = b;
}

/* Ring all-reduce of `bytes` over the t GPUs of a ring found by tp_ring:
 * 2(t-1) steps of bytes/t. */
void sim_tp_allreduces(const prof_model *m, int i, double *fwd_bytes,
                       double *bwd_bytes)
{
    /* Megatron's g after row-parallel GEMMs and the vocabulary-parallel
     * embedding (forward), f before column-parallel GEMMs (backward):
     * all-reduces of the activation */
    const prof_op *op = &m->ops[i];
    tp_role r = tp_role_of(op);
    *fwd_bytes = r == TP_ROW || op->kind == PROF_OP_EMBED ? op->out_bytes : 0;
    *bwd_bytes = r == TP_COL && op->n_in > 0 && op->in[0] >= 0
               ? m->ops[op->in[0]].out_bytes : 0;
}

double sim_ring_coll_ns(double base_ns, double lat_ns, double bw, int t,
                        double bytes, int steps)
{
    if (t <= 1 || bytes <= 0 || !(bw > 0)) return 0;
    double step = lat_ns + bytes / t / bw * 1e9;
    return (double)llround(base_ns + steps * step);
}

/* `steps` ring steps of bytes/t each: 2(t-1) for an all-reduce, t-1 for
 * a reduce-scatter or an all-gather; NCCL's base latency once, except
 * where a measured latency already holds it (base 0). */
static double tp_ring_ns(double base, double lat_ns, double bw, int t,
                         double bytes, int steps)
{
    return sim_ring_coll_ns(base, lat_ns, bw, t, bytes, steps);
}

/* The tensor-parallel collectives of op i for a microbatch of mbs samples,
 * forward and backward, ns. Without sequence parallelism the all-reduces
 * of sim_tp_allreduces. With it (Korthikanti et al., Sec. 4.2.2) the
 * forward's all-reduce after a row-parallel GEMM (or the embedding) is a
 * reduce-scatter, and a column-parallel GEMM all-gathers its sequence-
 * split input first; the backward mirrors them (the column-parallel
 * input gradient reduce-scattered, the row-parallel output gradient
 * all-gathered): the same bytes over the ring as the all-reduces. */
static void tp_colls(const prof_model *m, int i, int t, int sp, double base,
                     double lat, double bw, int mbs, double *f_ns,
                     double *b_ns)
{
    double fb, bb;
    sim_tp_allreduces(m, i, &fb, &bb);
    if (!sp) {
        *f_ns += tp_ring_ns(base, lat, bw, t, fb * mbs, 2 * (t - 1));
        *b_ns += tp_ring_ns(base, lat, bw, t, bb * mbs, 2 * (t - 1));
        return;
    }
    *f_ns += tp_ring_ns(base, lat, bw, t, fb * mbs, t - 1) +
             tp_ring_ns(base, lat, bw, t, bb * mbs, t - 1);
    *b_ns += tp_ring_ns(base, lat, bw, t, bb * mbs, t - 1) +
             tp_ring_ns(base, lat, bw, t, fb * mbs, t - 1);
}

/* Sequence parallelism as sluice's executor runs it
 * (sim_cost_opts.sp_exposed), what op i's weight gradient adds for a
 * microbatch of mbs samples, ns: a column-parallel linear's input
 * gathered again (Megatron-LM overlaps this all-gather with the input
 * gradient's GEMM; the executor waits for it), and a weight every rank
 * holds whole but computes on its own tokens (a norm's, BERT's head
 * transform's) has its gradient all-reduced over the group each
 * microbatch (Megatron-LM sums those once a step, after the last
 * backward). Weights that do not train have no gradient to make. */
static double tp_wgrad_colls(const prof_model *m, int i, int t, double base,
                             double lat, double bw, int mbs)
{
    const prof_op *op = &m->ops[i];
    double trained = prof_op_train_params(op);
    if (t <= 1 || trained <= 0) return 0;
    double fb, bb;
    sim_tp_allreduces(m, i, &fb, &bb);
    if (tp_role_of(op) == TP_COL)
        return tp_ring_ns(base, lat, bw, t, bb * mbs, t - 1);
    if (tp_role_of(op) == TP_NONE && op_is_split(op, t, 1) && op->params > 0)
        return tp_ring_ns(base, lat, bw, t,
                          trained * prof_dtype_bytes(m->spec.dtype),
                          2 * (t - 1));
    return 0;
}

void sim_costs_free(sim_costs *c)
{
    if (!c) return;
    free(c->stage);
    free(c->op_ns);
    free(c->bkt_off);
    free(c->bkt_lo);
    free(c->bkt_share);
    free(c->bwd_done);
    free(c->stage_device);
    free(c->xfer_bytes);
    free(c->dev_gpu);
    free(c->dev_capacity);
    free(c->dev_peak_flops);
    free(c->drive);
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
        sc->b_ns = sc->bs_ns = b_ns;
        sc->w_ns = sc->ws_ns = w_ns;
        sc->act_bytes = act_bytes;
        sc->input_bytes = s ? xfer_bytes : 0;
        sc->wkeep_bytes = act_bytes / 2;
        /* recomputation as a whole-stage checkpoint: F keeps the input */
        sc->r_ns = f_ns;
        sc->keep_bytes = s ? xfer_bytes : 0;
        sc->fwd_ws_bytes = sc->rec_ws_bytes = act_bytes - sc->keep_bytes;
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

/* The replicas simulated for all where folding may apply: the fewest
 * whose GPUs fill whole servers (rgpus GPUs a replica); 0 where it cannot
 * (no folding asked, one replica, or no group of fewer than dp). Whether
 * the cluster is symmetric under the shift is the topology's to say. */
static int fold_group(const prof_topo *t, int rgpus, int dp,
                      const sim_cost_opts *o, int n_stages)
{
    int gps = t->gpus_per_server;
    if (!o || !o->fold || dp < 2 || gps <= 0 || rgpus <= 0) return 0;
    /* offloaded, every rank's traffic goes to the one host: every
     * replica simulated */
    if (sim_sched_offload(o->offload)) return 0;
    /* a stage tier's traffic goes to its own server's host: every
     * replica simulated */
    for (int i = 0; o->state_tier && i < n_stages; i++)
        if (o->state_tier[i]) return 0;
    int a = rgpus, b = gps;
    while (b) { int x = a % b; a = b; b = x; }
    int group = gps / a;              /* lcm(rgpus, gps) / rgpus */
    return group < dp && dp % group == 0 ? group : 0;
}

/* PyTorch's DDP: a bucket of at most bucket_cap_mb (25 MiB by default),
 * the first (the last layers') at most 1 MiB so that its all-reduce
 * starts early (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES). */
#define DDP_FIRST_BUCKET_BYTES (1024.0 * 1024.0)

/* sim_costs' bwd_done and buckets (bkt_*), from each op's backward
 * times and gradient bytes (opb[3i..3i+2]). */
static void grad_buckets(sim_costs *c, const int *first_op,
                         const int *last_op, const double *opb, double cap)
{
    const int S = c->n_stages;
    for (int s = 0; s < S; s++) {
        double tb = 0, tw = 0, ab = 0, aw = 0;
        for (int i = first_op[s]; i <= last_op[s]; i++) {
            tb += opb[3 * (size_t)i];
            tw += opb[3 * (size_t)i + 1];
        }
        for (int i = last_op[s]; i >= first_op[s]; i--) {
            ab += opb[3 * (size_t)i];
            aw += opb[3 * (size_t)i + 1];
            c->bwd_done[2 * (size_t)i] = tb > 0 ? fmin(ab / tb, 1) : 1;
            c->bwd_done[2 * (size_t)i + 1] = tw > 0 ? fmin(aw / tw, 1) : 1;
        }
        c->bwd_done[2 * (size_t)first_op[s]] = 1;
        c->bwd_done[2 * (size_t)first_op[s] + 1] = 1;
    }
    if (!(cap > 0)) return;
    int n_ops = last_op[S - 1] + 1;
    c->bkt_off = util_malloc(sizeof(int) * (size_t)(S + 1));
    c->bkt_lo = util_malloc(sizeof(int) * (size_t)(n_ops + 1));
    c->bkt_share = util_malloc(sizeof(double) * (size_t)(n_ops + 1));
    int nb = 0;
    for (int s = 0; s < S; s++) {
        c->bkt_off[s] = nb;
        double total = 0;
        for (int i = first_op[s]; i <= last_op[s]; i++)
            total += opb[3 * (size_t)i + 2];
        double big = fmax(cap, total / SIM_MAX_BUCKETS), acc = 0;
        c->bkt_cap = fmax(c->bkt_cap, big);
        int b0 = nb;
        for (int i = last_op[s]; i >= first_op[s]; i--) {
            double ob = opb[3 * (size_t)i + 2];
            acc += ob;
            double lim = nb == b0 ? fmin(big, DDP_FIRST_BUCKET_BYTES) : big;
            if (acc > 0 && (acc >= lim || i == first_op[s])) {
                c->bkt_lo[nb] = i;
                c->bkt_share[nb++] = total > 0 ? acc / total : 1;
                acc = 0;
            }
        }
        /* a stage where nothing trains: one bucket; what is left below
         * the lowest op that trains (a frozen prefix) joins the last
         * bucket, whose ring the backward's end starts */
        if (nb == b0) {
            c->bkt_lo[nb] = first_op[s];
            c->bkt_share[nb++] = 1;
        }
        c->bkt_lo[nb - 1] = first_op[s];
    }
    c->bkt_off[S] = nb;
}

/* Each stage's memory step times (sim_stage_cost.mem_f, mem_b) from its
 * ops' forward times and activations (opa[2i], opa[2i+1]) and the
 * backward's progress (bwd_done): a forward's step k begins with the op
 * whose activation takes its kept bytes past k steps' worth; a
 * backward's step k ends with the op whose backward frees its k+1-th
 * step's worth, counted from the stage's last op. */
static void mem_steps(sim_costs *c, const int *first_op,
                      const int *last_op, const double *opa)
{
    const int K = SIM_MEM_STEPS;
    for (int s = 0; s < c->n_stages; s++) {
        sim_stage_cost *sc = &c->stage[s];
        double tt = 0, at = 0;
        for (int i = first_op[s]; i <= last_op[s]; i++) {
            tt += opa[2 * (size_t)i];
            at += opa[2 * (size_t)i + 1];
        }
        if (!(tt > 0) || !(at > 0)) continue;  /* equal steps */
        double tb = 0, a = 0;
        int k = 0;
        for (int i = first_op[s]; i <= last_op[s] && k < K; i++) {
            a += opa[2 * (size_t)i + 1];
            while (k < K && a > at * k / K) sc->mem_f[k++] = tb / tt;
            tb += opa[2 * (size_t)i];
        }
        a = 0;
        k = 0;
        for (int i = last_op[s]; i >= first_op[s] && k < K - 1; i--) {
            a += opa[2 * (size_t)i + 1];
            while (k < K - 1 && a >= at * (k + 1) / K * (1 - 1e-12))
                sc->mem_b[k++] = c->bwd_done[2 * (size_t)i];
        }
        while (k < K - 1) sc->mem_b[k++] = 1;
        sc->mem_b[K - 1] = 1;
    }
}

sim_costs *sim_costs_build(const prof_model *m, const prof_topo *t,
                           int n_stages, const int *first_op,
                           const int *last_op, const int *stage_device,
                           int n_devices, const sim_cost_opts *o,
                           util_err *e)
{
    int tpw = o && o->tp > 1 ? o->tp : 1;
    int dpw = o && o->dp > 1 ? o->dp : 1;
    if ((long)n_devices * tpw * dpw > t->n_gpus) {
        util_errf(e, UTIL_EXIT_USAGE, "dp %d x pp %d x tp %d = %ld %ss but "
                  "the server has %d", dpw, n_devices, tpw,
                  (long)n_devices * tpw * dpw, prof_topo_unit(t), t->n_gpus);
        return NULL;
    }
    for (int d = 0; d < n_devices * dpw && tpw > 1; d++) {
        int g0 = d * tpw;
        int sv = t->nodes[t->gpu_node[g0]].server;
        int sv1 = t->nodes[t->gpu_node[g0 + tpw - 1]].server;
        if (sv != sv1) {
            util_errf(e, UTIL_EXIT_USAGE, "tp %d: the tensor-parallel group "
                      "of GPUs %d..%d spans servers %d and %d (%d GPUs per "
                      "server); tensor parallelism stays inside a node",
                      tpw, g0, g0 + tpw - 1, sv, sv1, t->gpus_per_server);
            return NULL;
        }
    }
    int mbs = o && o->mbs > 0 ? o->mbs : 1;
    int sp = o && o->sp && tpw > 1;
    if (sp && !sim_sp_splits(m, tpw)) {
        util_errf(e, UTIL_EXIT_USAGE, "sequence parallelism splits each "
                  "sequence over the tensor-parallel group: tp %d must "
                  "divide its %d tokens%s", tpw, m->spec.seq_len,
                  m->spec.dec_seq_len > 0 ? " and the decoder's" : "");
        return NULL;
    }
    int rc = o && o->recompute > 0 && o->recompute < SIM_RC_COUNT
           ? o->recompute : SIM_RC_FULL;
    double state = o && o->state_bytes_per_param > 0
                 ? o->state_bytes_per_param : DEFAULT_STATE_BYTES;
    const sim_measured *meas = o ? o->measured : NULL;
    prof_dtype mt = prof_spec_math(&m->spec); /* the GEMMs' precision */
    double wb = prof_dtype_bytes(m->spec.dtype);
    if (sim_state_bytes_check(m, state, e)) return NULL;
    int zst = o ? sim_zero_stage(o->zero, o->fsdp) : 0;
    int fsdp = o && zst > 0 ? o->fsdp : SIM_FSDP_NONE;
    int shard = sim_shard_group(t, zst, fsdp, dpw, n_devices * tpw, e);
    if (!shard) return NULL;
    if (shard < 2) zst = 0;
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
    if (o && o->op_times) {
        c->n_ops = m->n_ops;
        c->op_ns = util_calloc((size_t)m->n_ops * 3, sizeof(double));
    }
    c->tp = tpw;
    c->sp = sp;
    c->recompute = rc;
    c->zero = zst;
    c->fsdp = zst ? fsdp : SIM_FSDP_NONE;
    c->whole_shards = o && o->whole_shards && zst >= 2;
    c->shard = shard;
    for (int d = 0; d < n_devices; d++) {
        c->dev_gpu[d] = d * tpw;
        const prof_gpu *g0 = prof_topo_gpu(t, c->dev_gpu[d]);
        prof_dtype dt = prof_gpu_math(g0, mt);
        const prof_gpu *g = prof_gpu_at(g0, dt);
        c->dev_capacity[d] = g->mem_bytes;
        c->dev_peak_flops[d] = prof_gpu_peak(g, dt);
    }
    /* per op: its fused backward's time, its W's and the gradient bytes
     * it trains (buckets) */
    double *opb = util_calloc((size_t)m->n_ops * 3 + 1, sizeof(double));
    /* and its forward's time and activation (memory steps) */
    double *opa = util_calloc((size_t)m->n_ops * 2 + 1, sizeof(double));
    c->bwd_done = util_calloc((size_t)m->n_ops * 2 + 1, sizeof(double));
    /* marks[i] = last consumer stage counted for producer op i */
    int *mark = util_malloc(sizeof(int) * (size_t)(m->n_ops + 1));
    for (int i = 0; i < m->n_ops; i++) mark[i] = -1;
    /* devices of the plan computing at once on one host */
    long busy = (long)n_devices * tpw * dpw;
    if (t->gpus_per_server > 0 && busy > t->gpus_per_server)
        busy = t->gpus_per_server;
    for (int s = 0; s < n_stages; s++) {
        sim_stage_cost *sc = &c->stage[s];
        c->stage_device[s] = stage_device[s];
        int g0 = stage_device[s] * tpw;
        prof_dtype dt = prof_gpu_math(prof_topo_gpu(t, g0), mt);
        /* under TF32 only the products leave the calibration (sim_op_ns) */
        prof_gpu gb = *prof_gpu_at(prof_topo_gpu(t, g0),
                                   dt == PROF_DT_TF32 ? PROF_DT_FP32 : dt);
        gb.busy = (int)busy;
        const prof_gpu *g = &gb;
        sc->first_op = first_op[s];
        sc->last_op = last_op[s];
        double f = 0, bb = 0, w = 0, r = 0, arf = 0, arb = 0, arr = 0, arw = 0;
        double frozen = 0, scratch = 0, deq = 0;
        /* QLoRA: a product's weight dequantized to the model's precision
         * is held while the product runs (dequant_bytes counts its 4-bit
         * reads and that write) */
        double deq_eb = prof_dtype_bytes(m->spec.dtype),
               deq_of = deq_eb / (PROF_NF4_BYTES + deq_eb);
        /* a tied table (the LM head's, T5's decoder embedding) held by
         * the stage that holds the embedding it shares: one copy */
        int own_table = 0, n_tied = 0;
        double tied_p = 0, tied_tr = 0, tied_fz = 0;
        /* ZeRO-3's unit: a layer's weights (trained params, frozen
         * bytes), the largest of the stage's */
        double unit = 0, unit_tp = 0, unit_fz = 0, unit_g = 0;
        int unit_layer = -1;
        double ring_lat = 0, ring_bw = 0, ring_base = NCCL_BASE_NS;
        if (tpw > 1) tp_ring(t, g0, tpw, &ring_lat, &ring_bw);
        /* measured: the executor's own all-reduce between devices */
        const prof_calib_link *cl = g->calib
                                  ? &g->calib->link[PROF_XFER_COLL] : NULL;
        if (tpw > 1 && cl && cl->present) {
            ring_lat = cl->latency_ns;
            ring_bw = cl->bw_bytes_per_s;
            ring_base = 0;
        }
        for (int i = first_op[s]; i <= last_op[s]; i++) {
            prof_op opx = op_split(&m->ops[i], tpw, sp);
            const prof_op *op = &opx;
            scratch = fmax(scratch, op->fwd_scratch);
            deq = fmax(deq, op->dequant_bytes * deq_of);
            double tmp[3], *on = c->op_ns ? c->op_ns + 3 * (size_t)i : tmp;
            double fi = on[0] = (double)sim_op_ns(g, dt, op, mbs, SIM_F, meas);
            double cf = 0, cb = 0;
            f += fi;
            bb += on[1] = (double)sim_op_ns(g, dt, op, mbs, SIM_B, meas);
            w += on[2] = (double)sim_op_ns(g, dt, op, mbs, SIM_W, meas);
            if (tpw > 1)
                tp_colls(m, i, tpw, sp, ring_base, ring_lat, ring_bw, mbs, &cf,
                         &cb);
            if (sp && o && o->sp_exposed)
                arw += tp_wgrad_colls(m, i, tpw, ring_base, ring_lat, ring_bw,
                                      mbs);
            arf += cf;
            arb += cb;
            opa[2 * (size_t)i] = fi + cf;
            opa[2 * (size_t)i + 1] = sim_op_act_rank(m, i, tpw, sp);
            opb[3 * (size_t)i] = on[1] + on[2] + cb;
            opb[3 * (size_t)i + 1] = on[2];
            opb[3 * (size_t)i + 2] = prof_op_train_params(op) * wb;
            if (sim_op_recomputed(m, i, rc)) {
                r += fi;
                arr += cf;
            }
            sc->fwd_flops += op->fwd_flops * mbs;
            sc->bwd_flops += (op->bwd_in_flops + op->bwd_w_flops) * mbs;
            sc->params += op->params;
            sc->train_params += prof_op_train_params(op);
            frozen += op->frozen_bytes;
            if (op->kind == PROF_OP_EMBED && !op->tied && i == 0)
                own_table = 1;
            /* copies after the stage's first are the same table (a T5's
             * decoder embedding and its tied head on one stage) */
            if (op->tied && (op->kind == PROF_OP_LM_HEAD ||
                             op->kind == PROF_OP_EMBED) &&
                (n_tied++ || own_table)) {
                tied_p += op->params;
                tied_tr += prof_op_train_params(op);
                tied_fz += op->frozen_bytes;
                /* one table: its gradient is whole, and its bucket
                 * ready, with the backward of the stage's first copy */
                opb[3 * (size_t)i + 2] = 0;
            }
            if (op->layer != unit_layer) {
                sc->units++;
                unit = fmax(unit, unit_tp * wb + unit_fz);
                unit_g = fmax(unit_g, unit_tp * wb);
                unit_tp = unit_fz = 0;
                unit_layer = op->layer;
            }
            unit_tp += prof_op_train_params(op);
            unit_fz += op->frozen_bytes;
            /* a deferred weight gradient (dW = X^T dY) needs the op's
             * saved input and the gradient of its output; LoRA's
             * adapters the d(x A) of the input pass too (x A's size:
             * whole on every tensor-parallel rank) */
            if (op->bwd_w_flops > 0) {
                double dxa = op->n_gemm > 1 &&
                                     op->gemm[1].adapter == PROF_ADAPTER_A
                           ? op->gemm[1].m * op->gemm[1].n *
                                 prof_dtype_bytes(m->spec.dtype)
                           : 0;
                sc->wkeep_bytes += (sim_op_act_rank(m, i, tpw, sp) +
                                    out_rank(&m->ops[i], tpw, sp) + dxa) *
                                   mbs;
            }
            for (int k = 0; k < op->n_in; k++) {
                int p = op->in[k];
                if (p < 0 || p >= m->n_ops || op_stage[p] == s || mark[p] == s)
                    continue;
                mark[p] = s;
                c->xfer_bytes[(size_t)op_stage[p] * n_stages + s] +=
                    m->ops[p].out_bytes * mbs;
            }
        }
        if (own_table || n_tied > 1) {
            sc->params -= tied_p;
            sc->train_params -= tied_tr;
            frozen -= tied_fz;
        }
        sc->task_ns = (int64_t)llround(g->eff.task_ns +
                                       g->eff.op_task_ns *
                                           (last_op[s] - first_op[s] + 1));
        sc->opt_task_ns = (int64_t)llround(g->eff.task_ns +
                                           g->eff.op_task_ns);
        sim_act ac = sim_act_range(m, first_op[s], last_op[s], tpw, sp, rc);
        /* (a recomputed ReLU's output comes back with its layer; a
         * recomputed context's probabilities are its checkpoint) */
        double rk = relu_cut(m, first_op[s], last_op[s], tpw, sp),
               ck = ctx_cut(m, first_op[s], tpw, sp);
        ac.act += rk + ck;
        if (rc == SIM_RC_NONE || !sim_op_recomputed(m, last_op[s], rc))
            ac.keep += rk;
        if (rc == SIM_RC_NONE || !sim_op_recomputed(m, first_op[s], rc))
            ac.keep += ck;
        sc->act_bytes = ac.act * mbs;
        sc->keep_bytes = ac.keep * mbs;
        sc->fwd_ws_bytes = ac.fwd_ws * mbs;
        double nws, nsent;
        none_fwd(m, first_op[s], last_op[s], tpw, sp, &nws, &nsent);
        sc->none_ws_bytes = nws * mbs;
        sc->none_sent_bytes = nsent * mbs;
        sc->rec_ws_bytes = ac.rec_ws * mbs;
        sc->fwd_scratch_bytes = fmax(scratch * mbs, deq);
        sc->deq_bytes = deq;
        bwd_ws(m, first_op[s], last_op[s], tpw, sp, rc, mbs, deq_of,
               sc->bwd_ws_bytes);
        for (int k = 0; k < 4; k++) sc->bwd_ws_bytes[k] *= mbs;
        sc->tp_f_ns = sim_task_ns(arf);
        sc->tp_b_ns = sim_task_ns(arb);
        sc->tp_r_ns = sim_task_ns(arr);
        sc->tp_w_ns = sim_task_ns(arw);
        sc->f_ns = sim_task_ns(f + arf);
        sc->b_ns = sim_task_ns(bb + arb);
        sc->r_ns = sim_task_ns(r + arr);
        sc->w_ns = sim_task_ns(w + arw);
        /* the halves apart (zero-bubble's B and W tasks), as calibration
         * measured this machine run them: the collectives inside B are
         * not the ops' */
        double fb = g->eff.split_factor[0] > 0 ? g->eff.split_factor[0] : 1;
        double fw = g->eff.split_factor[1] > 0 ? g->eff.split_factor[1] : 1;
        sc->bs_ns = sim_task_ns(bb * fb + arb);
        sc->ws_ns = sim_task_ns(w * fw + arw);
        /* what trains has gradients and optimizer state; frozen weights
         * (a fine-tuning mode's) only their storage, sharded with the
         * rest under ZeRO-3 */
        sc->train_bytes = sc->train_params * wb;
        sc->param_bytes = sc->train_bytes + frozen;
        /* held gathered at once: the layer computing and the next one
         * prefetched, as FSDP's units and ZeRO-3's prefetch hold them */
        unit = fmax(unit, unit_tp * wb + unit_fz);
        unit_g = fmax(unit_g, unit_tp * wb);
        sc->gather_bytes = c->whole_shards ? sc->param_bytes
                                           : fmin(sc->param_bytes, 2 * unit);
        /* sharded gradients: a layer's whole gradient exists from its
         * backward until its reduce-scatter is done, as FSDP's units and
         * ZeRO-2's buckets hold them, the next layer's computing beside */
        /* (whole: each microbatch's whole gradient, a buffer until its
         * reduce-scatter is done: sim_add_sharded) */
        sc->rs_bytes = zst >= 2 && !c->whole_shards
                           ? fmin(sc->train_bytes, 2 * unit_g) : 0;
        sc->frozen_bytes = frozen;
        sim_zero_bytes(sc->train_params, wb, state, zst, shard,
                       &sc->weight_bytes, &sc->grad_bytes, &sc->opt_bytes);
        sc->weight_bytes += zst >= 3 ? frozen / shard : frozen;
        sc->host_state_bytes =
            sc->opt_bytes +
            (wb >= 4 ? sc->train_bytes / (zst >= 1 ? shard : 1) : 0);
        sc->opt_ns = sim_task_ns(round(sim_opt_model_ns(
            g, zst ? sc->train_params / shard : sc->train_params)));
        sc->state_tier = o && o->state_tier ? o->state_tier[s] : 0;
    }
    for (int s = 0; s < n_stages; s++)
        for (int q = 0; q < n_stages; q++)
            c->stage[s].input_bytes += c->xfer_bytes[(size_t)q * n_stages + s];
    grad_buckets(c, first_op, last_op, opb,
                 o ? sim_grad_bucket(o->grad_bucket, t) : 0);
    mem_steps(c, first_op, last_op, opa);
    free(opb);
    free(opa);
    /* A table tied across ops (the token embedding, op 0, with a tied LM
     * head or decoder embedding): each stage holding one keeps a copy, and
     * the copies' gradients are exchanged (sim_add_tied) when they sit in
     * more than one stage. */
    int holders = 0, any_tied = 0;
    for (int i = 0; i < m->n_ops; i++)
        any_tied |= m->ops[i].tied && m->ops[i].grad == PROF_GRAD_TRAIN;
    for (int s = 0; s < n_stages && any_tied; s++) {
        int hold = m->ops[first_op[s]].role == PROF_ROLE_EMBED &&
                   first_op[s] == 0;
        for (int i = first_op[s]; i <= last_op[s]; i++)
            hold |= m->ops[i].tied;
        if (hold) {
            c->stage[s].tied_bytes =
                (double)m->spec.vocab * m->spec.hidden * wb;
            holders++;
        }
    }
    if (holders < 2)
        for (int s = 0; s < n_stages; s++) c->stage[s].tied_bytes = 0;
    for (int s = 0; s < n_stages; s++) {
        sim_stage_cost *sc = &c->stage[s];
        sc->tied_holder = sc->tied_bytes > 0;
        sc->tied_op = -1;
        for (int i = first_op[s]; i <= last_op[s] && sc->tied_holder &&
                                  sc->tied_op < 0; i++)
            if (m->ops[i].tied || (i == 0 && m->ops[i].role == PROF_ROLE_EMBED))
                sc->tied_op = i;
    }
    c->tied_holders = holders < 2 ? 0 : holders;
    /* A T5's relative-position tables (rel_pos_buckets x heads, one per
     * stack): a copy on every stage holding an op that adds the bias (a
     * self-attention's softmax, whose scores read one input, or its fused
     * op), exchanged as the tied table is when two stages or more hold
     * one */
    for (int k = 0; k < 2 && m->spec.family == PROF_FAM_T5; k++) {
        prof_part part = k ? PROF_PART_DEC : PROF_PART_ENC;
        double bytes = (double)m->spec.rel_pos_buckets * m->spec.heads * wb;
        /* the table is its stack's embedding's (prof_model_build): it
         * trains with it */
        int trains = 0;
        for (int i = 0; i < m->n_ops; i++)
            if (m->ops[i].role == PROF_ROLE_EMBED && m->ops[i].part == part)
                trains = m->ops[i].grad == PROF_GRAD_TRAIN;
        int n = 0;
        for (int s = 0; s < n_stages && trains; s++) {
            int hold = 0;
            for (int i = first_op[s]; i <= last_op[s] && !hold; i++) {
                const prof_op *op = &m->ops[i];
                hold = op->part == part &&
                       ((op->role == PROF_ROLE_ATTN_SOFTMAX &&
                         m->ops[op->in[0]].n_in == 1) ||
                        (op->role == PROF_ROLE_ATTN_FUSED && op->n_in == 1));
            }
            c->stage[s].rel_bytes[k] = hold ? bytes : 0;
            n += hold;
        }
        if (n < 2)
            for (int s = 0; s < n_stages; s++) c->stage[s].rel_bytes[k] = 0;
    }
    /* the first stage (the embedding's) and another: a tied head, or a
     * T5's decoder embedding (T5 1.1's head is its own) */
    c->tied_table32 = c->tied_holders
                          ? (double)m->spec.vocab * m->spec.hidden * 4
                          : 0;
    free(mark);
    free(op_stage);
    c->topo = t;
    c->offload = o && sim_sched_offload(o->offload) ? o->offload : 0;
    if (c->offload && sim_offload_costs(c, t, o, e)) {
        sim_costs_free(c);
        return NULL;
    }
    c->samples_per_mb = mbs;
    c->tokens_per_sample = m->spec.seq_len + m->spec.dec_seq_len;
    c->model_flops_per_sample = prof_model_train_flops(m, 0);
    int pipes = o && o->pipes > 1 ? o->pipes : 1;
    int group = fold_group(t, n_devices * tpw, dpw, o, n_stages);
    /* hybrid sharding folds only where the group simulated is one
     * server's shard group: its rings close inside it */
    if (shard > 1 && shard < dpw && group != shard) group = 0;
    if (group && prof_topo_link_orbits(t, group * n_devices * tpw, dpw / group,
                                       &c->fold_rep, &c->fold_mult)) {
        /* the group's replicas (and Chimera's two pipelines, which share
         * a replica's devices) are simulated, the groups folded */
        sim_costs_replicate(c, group, pipes);
        c->fold = dpw / group;
        c->dp = dpw;
    } else if (dpw > 1 || pipes > 1) {
        sim_costs_replicate(c, dpw, pipes);
    }
    if (sim_stage_tier_costs(c, t, e)) {
        sim_costs_free(c);
        return NULL;
    }
    return c;
}

sim_size sim_costs_size(const prof_topo *t, int n_stages, int pp,
                        const sim_cost_opts *o, int n_mb, int n_minibatches)
{
    int tpw = o && o->tp > 1 ? o->tp : 1;
    int dpw = o && o->dp > 1 ? o->dp : 1;
    int pipes = o && o->pipes > 1 ? o->pipes : 1;
    int K = n_minibatches > 1 ? n_minibatches : 1;
    sim_size z = {dpw * pipes, 1, 0, 0};
    int group = fold_group(t, pp * tpw, dpw, o, n_stages);
    const int *rep, *mult;
    if (group && prof_topo_link_orbits(t, group * pp * tpw, dpw / group, &rep,
                                       &mult)) {
        z.simulated_replicas = group * pipes;
        z.fold = dpw / group;
    }
    double Rs = z.simulated_replicas, R = (double)dpw * pipes;
    double S = n_stages, N = Rs * S;
    /* a stage's work per microbatch: forward, backward, weight gradient,
     * recomputation, and a send and a receive each way; per minibatch an
     * optimizer step and the all-reduce ring's steps (one repeated send
     * where a single member is simulated) */
    double ring = R > 1 ? (Rs > 1 ? Rs * 2 * (R - 1) * 2 : 2) : 0;
    /* sharded: a reduce-scatter and an all-gather per stage (ZeRO-1), a
     * reduce-scatter per microbatch (2), and two gathers per microbatch
     * (3), each half a ring (hybrid: and a ring across servers) */
    int zst = o && R > 1 ? sim_zero_stage(o->zero, o->fsdp) : 0;
    if (zst) {
        double half = Rs > 1 ? Rs * (R - 1) * 2 : 2;
        double rings = zst == 1 ? 2 : zst == 2 ? n_mb + 1 : 3.0 * n_mb;
        if (o->fsdp == SIM_FSDP_HYBRID) rings += n_mb;
        ring = rings * half;
    }
    z.tasks = K * (N * (double)n_mb / pipes * 8 + N + S * ring);
    /* about 300 bytes a task (task, dependencies, order, engine state),
     * and the cost table's stage-to-stage transfer matrix */
    z.bytes = z.tasks * 300 + N * N * 8;
    return z;
}
