/* exec/runtime.h: internals of the pipeline executor (private to exec/).
 * A run holds the plan's task IR, the model program and one worker per
 * device and tensor-parallel rank; a worker runs its device's compute
 * stream on one thread and its send streams on a communication thread,
 * over a transport (in-process copies, MPI or NCCL). Tensors live in a
 * device's memory, from its backend (exec/backend.h: CPU cores or CUDA
 * GPUs), charged to its budget, and are reference counted. Every cross-device
 * dependency of the IR is a receive waiting for its send, so a worker
 * only waits on its own tasks. Ownership: _new and _free pairs; a view
 * holds one reference to its buffer. */
#ifndef SLUICE_EXEC_RUNTIME_H
#define SLUICE_EXEC_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>

#include "exec/backend.h"
#include "exec/exec.h"
#include "sim/ir.h"

/* ------------------------------------------------------------- memory */

/* One device's memory: a budget every tensor is charged to, what is in
 * use, the peak, and (when recording) the curve over time. Blocks come
 * from the device's backend; freed ones are kept for the next tensor of
 * the same size (a step allocates the same sizes every microbatch), as a
 * GPU framework's caching allocator does, each with the fence its reuse
 * waits for (GPUs); the budget counts live tensors only. Thread-safe: a
 * sender's thread charges a receive buffer to the receiving device. */
typedef struct exec_free {
    size_t n;
    float *p;
    void *fence;            /* backend fence (exec_backend.fence), or NULL */
    struct exec_free *next;
} exec_free;

typedef struct exec_mem {
    pthread_mutex_t mu;
    exec_dev *dev;          /* whose memory (lent) */
    double budget;          /* bytes; 0: unlimited */
    double cur, peak;       /* live tensors (what the budget counts) */
    double step_peak;       /* the peak since exec_mem_step_peak */
    exec_free *cache;       /* freed blocks kept for reuse, by size */
    double need;            /* the request that failed (bytes) */
    char why[160];          /* why the device had no block, or "" */
    int record;
    int64_t t0;             /* clock origin of the curve */
    int64_t *pt_t;          /* curve: time (ns since t0) and bytes */
    double *pt_b;
    int n_pt, cap_pt;
} exec_mem;

void exec_mem_init(exec_mem *m, double budget, exec_dev *dev);
/* Gives every cached block back to the device (none may be in use). */
void exec_mem_destroy(exec_mem *m);
/* n floats of the device, uncharged: a cached block of that size (in
 * stream order after its fence) or a new one; NULL when the device has
 * none left even after giving the cache back (m->why says why). */
float *exec_mem_get(exec_mem *m, size_t n);
/* Takes p (n floats, from exec_mem_get) back into the cache, fenced. */
void exec_mem_put(exec_mem *m, float *p, size_t n);
/* The error of a failed allocation of m (the budget, or the device's
 * own message), naming what it was for; returns -1. */
int exec_mem_oom(exec_mem *m, const char *what, util_err *e);
/* Charges bytes (negative: releases); 0, or -1 when over the budget
 * (nothing charged, m->need set). */
int exec_mem_charge(exec_mem *m, double bytes);
/* The peak since the last call (since the start: the whole peak), and
 * starts the next from the current use: its worker calls it at each
 * step's start and end, so a step's peak counts what other threads
 * charged to the device meanwhile (messages landing). */
double exec_mem_step_peak(exec_mem *m);
/* Starts the curve at clock t0 (exec_now_ns), with the current use. */
void exec_mem_record(exec_mem *m, int64_t t0);

/* A tensor buffer: n floats of a device's memory (p is a device pointer),
 * reference counted (atomically: the communication thread holds
 * references too). */
typedef struct exec_buf {
    float *p;
    size_t n;
    atomic_int refs;
    exec_mem *mem;
} exec_buf;

/* One reference; zeroed when zero != 0. NULL when over budget. */
exec_buf *exec_buf_new(exec_mem *m, size_t n, int zero);
exec_buf *exec_buf_ref(exec_buf *b);
void exec_buf_unref(exec_buf *b);   /* NULL is fine */

/* A tensor inside a buffer; holds one reference to b when b != NULL. */
typedef struct exec_view {
    exec_buf *b;
    size_t off, n;
} exec_view;

static inline float *exec_view_p(const exec_view *v)
{
    return v->b ? v->b->p + v->off : NULL;
}
/* The same memory as ints (token ids): a float's size, asserted below. */
static inline int *exec_view_i(const exec_view *v)
{
    return (int *)exec_view_p(v);
}
_Static_assert(sizeof(int) == sizeof(float), "token ids sit in float blocks");
/* A second reference to the same tensor. */
exec_view exec_view_dup(const exec_view *v);
void exec_view_drop(exec_view *v);

/* ------------------------------------------------------ model program */

/* One op of the graph as the executor runs it (GPT, Llama), with the
 * sizes one tensor-parallel rank holds for a microbatch. */
typedef struct exec_xop {
    prof_op_role role;
    int layer;              /* GPT layer; -1 outside the layers */
    int n_in, in[2];        /* producer ops */
    size_t out_n;           /* floats of the output */
    size_t aux_n;           /* floats kept beside it (LN mean and rstd,
                             * the loss's probabilities) */
    int self_keep;          /* its backward reads its own output */
    int need_in[2];         /* its backward reads input k */
    int has_w;              /* it has a weight-gradient part */
    /* Sequence parallelism (exec_runtime.sp): its output (out_n, aux_n)
     * is this rank's chunk of the tokens, a tensor of the residual stream
     * (the embedding, norms, row-parallel linears, residual adds); a
     * column-parallel linear gathers such an input (seq_in) */
    int seq, seq_in;
    /* Fine-tuning (prof_model_finetune): how far its backward reaches
     * (PROF_GRAD_NONE: none at all), whether its own weights train, and
     * its LoRA adapters (exec_lora_table): how many, where each one's
     * outputs start in the op's (q, k, v of the fused projection; gate
     * and up of SwiGLU's), each one's width and the inputs' on this
     * rank, whether W is row-parallel (A
     * split by rows, x A summed over the group), and the floats of x A
     * kept for the backward (N x n_lora x R). */
    int grad, train_w;
    int n_lora, lora_col[3], lora_n[3], lora_k, lora_rowpar;
    size_t lora_keep_n;
    /* T5 (exec_gpt_config t5): the tokens of a row of its output (the
     * encoder's length or the decoder's), of its keys (attention ops;
     * Tq elsewhere), whether its attention is cross-attention, causal,
     * and which relative-position table its softmax adds (0 none, 1 the
     * encoder's, 2 the decoder's); its layer in the decoder's cross-
     * attention tensors (-1 none) */
    int Tq, Tk, cross, causal, rel, xlayer;
} exec_xop;

/* A slice of a parameter tensor a stage holds: local floats [off, off+n)
 * of the stage's arenas stand for `rows` rows of the reference model's
 * tensor `tensor` (exec_gpt_tensor_id) from row `row0`, columns
 * [col0, col0+ncols) of rows `fcols` wide. Tensors stacked over layers
 * count their rows across layers. */
typedef struct exec_slice {
    int tensor;
    size_t off, n;
    size_t row0, rows, col0, ncols, fcols;
    int decay;              /* AdamW weight decay applies */
    int norm_owner;         /* counted in the global gradient norm (one
                             * copy of what ranks or stages replicate) */
    int tied;               /* a copy of the tied token table */
    int save_owner;         /* written to checkpoints from this copy */
    int frozen;             /* in the stage's frozen arena: no gradient,
                             * no AdamW state, one version */
    int lora;               /* `tensor` is a LoRA adapter's
                             * (exec_lora_table), not the model's */
    int q4;                 /* frozen under QLoRA: stored as NF4 in
                             * nq floats of the frozen arena (exec_nf4) */
    size_t nq;
    int op;                 /* the graph op it belongs to */
} exec_slice;

/* Builds the model program: per op role, sizes, what backward keeps
 * (sp: sequence parallelism, where tp > 1). Errors for ops the
 * kernels do not implement or sizes tensor or sequence parallelism
 * cannot split, code 2. */
int exec_xops_build(const prof_model *m, const exec_gpt_config *c, int mbs,
                    int T, int tp, int sp, exec_xop **out, util_err *e);
/* Rows of the vocabulary one of tp ranks holds: ceil(V / tp); the last
 * rank's shard is padded with rows no token reaches, whose logits the
 * loss leaves out (Megatron-LM pads the vocabulary the same way). */
int exec_vocab_shard(int V, int tp);
/* The parameter slices of ops [first, last] for tensor-parallel rank r of
 * tp in data-parallel replica `replica`, with the LoRA adapters and the
 * frozen weights of the model's fine-tuning mode (m->ft, each op's grad);
 * tied_owner: no stage of the replica holds the embedding, so a tied
 * head's copy is the one saved. *n gets the count, *n_frozen the floats
 * of the frozen arena, the return value those of the trained one. */
size_t exec_slices_build(const prof_model *m, const exec_gpt_config *c,
                         int first, int last, int tp, int r, int replica,
                         int tied_owner, exec_slice **out, int *n,
                         size_t *n_frozen);

/* ------------------------------------------------------------ stages */

/* A stage of the IR (replica `replica` of model stage `model_stage`) as
 * one worker holds it. */
typedef struct exec_stage {
    int id, model_stage, replica;
    int first, last, n_ops;  /* op range */
    int device;
    /* inputs from other stages, in op order: producer op and stage */
    int n_ext, *ext_op, *ext_stage;
    int *keep_out;          /* per op: output kept for the backward */
    int *keep_ext;          /* per external input: kept for the backward */
    int *ext_none_last;     /* per external input: its last reader in the
                             * stage where every reader there runs no
                             * backward (PROF_GRAD_NONE: a frozen
                             * prefix), which the forward drops it after;
                             * -1 otherwise */
    int *w_needs;           /* per op: output read by a weight part */
    int *last_rd;           /* per op: the op whose backward reads its
                             * output last (backward runs last to first:
                             * the lowest reader), -1 none */
    int *w_needs_ext;
    /* Recomputation (the plan's mode, sim_op_recomputed): segments of
     * ops of one layer that run again just before their backward, the
     * last of a stage in its R task, the others inside its backward, so
     * one segment's activations live at a time. Per op its segment or
     * -1; segment k's local op range; what the forward keeps instead of
     * keep_out: the ops' not run again, and the checkpoints (outputs a
     * later segment reads again, or a kept op's backward reads). */
    int *rseg, *seg_first, *seg_last, n_rseg;
    int *keep_rc, *keep_rc_ext;
    int recomp;             /* it recomputes (the plan's mode; not a stage
                             * an offload schedule swaps whole) */
    /* per op: the slices of its weight and bias, of a third tensor (an
     * encoder's embedding: the token types) and the first of its LoRA
     * adapters' (A, B, A, B...) (-1: none), found once
     * (exec_stage_op_slices) rather than by every task */
    int *sl_w, *sl_b, *sl_l, *sl_x;
    int has_embed, has_loss;
    /* parameters: arenas of the n floats that train (gradients, AdamW m
     * and v), their weights per version (stashing): w[v] for each
     * version in use; the n_frozen floats of frozen weights (a
     * fine-tuning mode's) in wf, one version, never written */
    exec_slice *sl;
    int n_sl;
    int tied_sl;            /* the slice holding a tied table's copy that
                             * trains, -1 */
    int rel_sl[2];          /* T5: those holding its copies of the
                             * encoder's and the decoder's relative-
                             * position tables that train, -1 */
    size_t n, n_frozen;
    float *g, *am, *av, *wf;
    float **w;
    int *pending;           /* per version: compute tasks still to use it */
    int n_ver_slots, cur_ver;
    int live, max_live;     /* weight versions held at once */
    int steps;              /* optimizer steps taken */
    /* Sharded data parallelism (ZeRO stage rt->zero over rt->shard
     * ranks): the rank's shard of the trained arena is [sh_lo, sh_lo +
     * sh_n), the chunk the reduce-scatter's ring leaves reduced on it; am
     * and av hold that shard only. ZeRO-2 keeps the gradient as the
     * shard (gsh, from the step's first reduced microbatch to its update;
     * g points at the running backward's buffer, else NULL): each
     * microbatch's whole gradient is a buffer of its own (rsb[k], the
     * stage's k-th reduce-scatter of the step) until its ring is done and
     * its shard added to gsh, in order (rs_next, in step rs_epoch).
     * rs_last[2k], [2k+1]: that ring's last send and receive on this
     * device; ag: the device's
     * all-gather tasks of the stage (sends and receives), ag_done the
     * last step whose all-gather has been waited for. */
    size_t sh_lo, sh_n;
    float *gsh;
    /* ZeRO-2 and 3 with a tied table whose copies the IR exchanges
     * (bit g of tied_x: 0 the token table, 1 and 2 a T5's relative-
     * position tables): each microbatch's gradient of the copy is added
     * to tacc[g] and cleared in its buffer before the ring reduces it;
     * the exchange sends this sum, and the copies' total goes into the
     * buffer of the step's last reduce-scatter, which waits for the
     * exchange (from the step's first backward to that ring) */
    exec_buf *tacc[3];
    unsigned tied_x;
    exec_buf **rsb;
    int n_rs, rs_next, rs_epoch, *rs_last;
    int *ag, n_ag, ag_done;
    /* ZeRO-3: the rank's shard of the trained weights ([sh_lo, sh_lo +
     * sh_n) of the arena), the one copy between steps; w[0] is the
     * gathered arena the running compute task reads (agb[k]'s, lent),
     * each of the n_agb all-gathers of a step bringing its own, from its
     * first send to the compute task after which it goes */
    float *wsh;
    exec_buf **agb;
    int n_agb;
    struct exec_ofl_stage *ofl; /* offloaded model states (offload.c), or
                             * NULL: w, g, am, av on the device */
    struct exec_stier *stier; /* a stage tier (stage_tier.c): AdamW's
                             * moments and the fp32 weights it steps on
                             * the host, am and av NULL; or NULL */
} exec_stage;

/* Activations of one (stage, minibatch, microbatch) between its F and the
 * end of its backward. */
typedef struct exec_rec {
    exec_view *out, *aux;   /* per op of the stage */
    exec_view *ext;         /* per external input */
    exec_view *dout;        /* per op: output gradients */
    exec_view *dext;        /* per external input: its gradient */
    exec_view *xa;          /* per op: its LoRA adapters' x A */
    exec_view *dxa;         /* per op: and their d(x A), from an input
                             * pass to the weight pass after it */
    exec_view ids;          /* the microbatch's tokens then targets (N
                             * ints each, on the device) */
    exec_buf *gb;           /* ZeRO-2: this microbatch's gradient, from
                             * its first backward part to its reduce-
                             * scatter */
    int version;
    int rc_low;             /* recomputation: segments from here up have
                             * run again (n_rseg: none yet) */
} exec_rec;

/* A record for a stage of n_ops ops and n_ext external inputs, empty;
 * freed with every view it holds. */
exec_rec *exec_rec_new(int n_ops, int n_ext);
void exec_rec_free(exec_rec *r, int n_ops, int n_ext);

/* The record slot of minibatch k's microbatch mb (exec_worker.rec). */
#define SLOT(rt, k, mb) ((size_t)(k) * (size_t)(rt)->M + (size_t)(mb))

/* A gradient handed to a producer stage by a consumer on the same
 * device: op j's output gradient from stage `from`. */
typedef struct exec_grad_in {
    int from, op;
    exec_view v;
    struct exec_grad_in *next;
} exec_grad_in;

/* ---------------------------------------------------------- transport */

typedef struct exec_xport exec_xport;
typedef struct exec_runtime exec_runtime;

/* Group of a collective: every worker, or the worker's tensor-parallel
 * group. Float sums are of device memory (tensor-parallel partial
 * results), double sums of host memory (a step's agreed values). */
enum { EXEC_GROUP_WORLD, EXEC_GROUP_TP };

/* A contiguous piece of a message. */
typedef struct exec_piece {
    const float *p;
    size_t n;
} exec_piece;

struct exec_xport {
    const char *name;       /* "in-process", "mpi", "nccl" */
    /* Sends the pieces (concatenated) from worker src to worker dst for
     * receive task rid of epoch `epoch`. In-process: copied into a buffer
     * charged to the receiver and delivered before it returns (*h NULL).
     * MPI: packed and started; *h is tested with send_test. */
    int (*send)(exec_xport *x, exec_runtime *rt, int src, int dst, int epoch,
                int rid, const exec_piece *pieces, int np, void **h,
                util_err *e);
    int (*send_test)(exec_xport *x, void *h, int *done, util_err *e);
    /* Delivers what has arrived for worker w (MPI); *got counts them. */
    int (*poll)(exec_xport *x, exec_runtime *rt, int w, int *got,
                util_err *e);
    /* Sum of n floats (or doubles) over the group, added in group rank
     * order, so every member (and either transport) gets the same bits. */
    int (*allreduce)(exec_xport *x, exec_runtime *rt, int w, int group,
                     void *buf, size_t n, int is_double, util_err *e);
    /* Sequence parallelism's pair over worker w's tensor-parallel group
     * (n: the whole tensor's floats, a multiple of the group's size;
     * member m's part is chunk m of it). reduce_scatter: part = chunk m
     * of the sum of every member's whole, added in member order (the
     * bits of allreduce's chunk). allgather: every member's part, in
     * member order, into whole. */
    int (*reduce_scatter)(exec_xport *x, exec_runtime *rt, int w,
                          const float *whole, float *part, size_t n,
                          util_err *e);
    int (*allgather)(exec_xport *x, exec_runtime *rt, int w,
                     const float *part, float *whole, size_t n, util_err *e);
    /* Wakes everything a worker may wait in, after rt->abort is set. */
    void (*wake)(exec_xport *x, exec_runtime *rt);
    void (*free)(exec_xport *x);
    void *impl;
};

/* acc[i] += src[i] over n floats (or doubles) of host memory: the one
 * addition the transports' host collectives make, member by member in
 * rank order. */
void exec_sum_into(void *acc, const void *src, size_t n, int is_double);

exec_xport *exec_xport_inproc_new(exec_runtime *rt);
/* The MPI transport: one worker per rank (rank = worker id), messages on
 * a communicator of their own, collectives on others (the tensor-
 * parallel groups split by device). NULL with a message when MPI was not
 * compiled in. A failure prints its message and aborts the job. */
exec_xport *exec_xport_mpi_new(exec_runtime *rt, util_err *e);
/* The NCCL transport (transport_nccl.c, in bin/sluice-cuda only): one
 * worker per MPI rank and a GPU each; sends, receives and tensor-parallel
 * sums through NCCL, the step's host sums through MPI. */
exec_xport *exec_xport_nccl_new(exec_runtime *rt, util_err *e);

/* MPI around a run (transport_mpi.c): whether it was compiled in; whether
 * this process was started by mpirun (its environment says so); start
 * (threads: multiple) and stop; rank and size of the job. Without MPI,
 * init answers "unavailable", code 2. */
int exec_mpi_available(void);
int exec_mpi_launched(void);
int exec_mpi_init(int *rank, int *size, util_err *e);
void exec_mpi_finalize(void);
/* Sums n floats (is_double: doubles) over the ranks into every rank,
 * in rank order (the same bits everywhere). */
int exec_mpi_sum(void *buf, size_t n, int is_double, util_err *e);
/* Rank 0's n bytes to every rank. */
int exec_mpi_bcast(void *buf, size_t n, util_err *e);
/* Ends the job at once with code, every rank. */
void exec_mpi_abort(int code);
/* The host memory of one machine's processes under mpirun, counted at
 * once (the offload tiers' buffers; each process adds its own as it
 * takes and frees them): made by every process of the job (collective;
 * NULL without MPI), started once every process is set up (collective:
 * the peak from what is held then), the machine's peak on its first
 * process (0 on the others, so a sum over the job adds each machine
 * once). */
typedef struct exec_host_share exec_host_share;
int exec_mpi_host_share(exec_host_share **out, util_err *e);
int exec_mpi_host_share_start(exec_host_share *h, util_err *e);
void exec_host_share_add(exec_host_share *h, double bytes);
double exec_host_share_peak(const exec_host_share *h);
void exec_host_share_free(exec_host_share *h);
/* Calibration (calibrate_mpi.c), every rank of a job of two or more:
 * ranks 0 and 1 exchange messages of growing size (one-way times into x,
 * *n of them, on rank 0), then MPI_Allreduce over groups of 2..size
 * ranks (appended to checks on rank 0, predicted later). */
int exec_mpi_calibrate(int quick, exec_calib_xfer *x, int *n,
                       exec_calib_check *checks, int *n_checks, util_err *e);

/* ------------------------------------------------------------ workers */


/* A worker: one device and tensor-parallel rank of the plan. */
typedef struct exec_worker {
    int id, device, rank;
    exec_runtime *rt;
    exec_dev dev;           /* its device in the run's backend */
    exec_mem mem;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* this device's tasks: compute order, and per send stream */
    int *comp, n_comp;
    int comp_at;                /* comp's index of the task running */
    int *sendq[2], n_sendq[2];
    int *started;           /* per collective send: the last epoch it
                             * started in (exec_runtime.gate_start) */
    unsigned wakes;         /* under mu: broadcasts of cv so far, so the
                             * communication thread sleeps only if none
                             * came since it last looked */
    int *done;              /* per task: the last epoch it completed */
    int *bkt_rx, n_bkt_rx;  /* the last ring steps' receives of this
                             * device's gradient buckets, copied into
                             * place by the backward as they land */
    int *prog_ep, *prog_op; /* per backward with gradient buckets reduced
                             * from inside it (exec_runtime.early): the
                             * epoch it last ran in and the lowest op it
                             * has computed in it, under mu */
    exec_buf **rbuf;        /* per receive task: what arrived */
    exec_view **outbox;     /* per send task: the pieces to send */
    int *n_outbox;
    /* the device's stages (local index) and their records */
    exec_stage *st;
    int n_st;
    int *lidx;              /* per IR stage: local index, or -1 */
    exec_rec ***rec;        /* [local stage][minibatch * M + mb] */
    exec_view ***lact;      /* [stage][slot]: inputs from local stages */
    exec_grad_in ***lgrad;  /* [stage][slot]: gradients from local ones */
    /* measurements */
    int64_t *tm;            /* [epoch][task][EXEC_T_*], ns since rt->t0 */
    double *ep_loss;        /* per epoch (async: per minibatch) */
    double *ep_norm;        /* per epoch: gradient norm before clipping */
    int64_t *ep_kern, *ep_wait, *ep_wall, *ep_end;
    double *ep_peak;        /* per epoch: the device memory's peak */
    int opt_epoch;          /* the epoch whose norm has been agreed */
    float opt_scale;        /* its clipping factor */
    int64_t kern_ns;        /* compute thread: in kernels, this epoch */
    int64_t wait_ns;        /* compute thread: blocked, this epoch */
    double loss_sum;
    int *used_ver;          /* per compute task: the weight version it ran
                             * on (last epoch), -1 not run */
    /* sharded data parallelism: per task, a ring step's instance among
     * the steps of its kind, collective, stage and step number on this
     * device (the k-th reduce-scatter of a stage in a step, ...), or -1;
     * per compute task, the reduce-scatter its gradient goes to, -1 */
    int *inst, *bw_rs;
    int *dpt, n_dpt;            /* an offload plan's: its ring tasks */
    /* ZeRO-3: per compute task, the stage's all-gather whose weights it
     * computes with, and the one whose weights go after it (-1: none);
     * per task, for a gather's first send, the stage's optimizer step it
     * waits for in the step before (the shard it sends), -1 */
    int *ag_use, *ag_rel, *ag_after;
    pthread_t comp_th, comm_th;
    int threads;            /* which of them were started */
    int comp_finished;
    int tasks_run;          /* for faults on purpose */
    /* calibration (rt->op_timing): per graph op and phase (F, B, W) the
     * ns its parts took and how many ran, past the first step; compute
     * tasks' time outside their ops and the ops they ran */
    double *op_ns, *op_n;
    double rest_ns, rest_ops;
    int epoch_now;          /* the epoch of the task running */
    int64_t task_ops_ns;    /* ops timed in the task running */
    int task_ops_n;         /* and how many */
    /* ops of the task running timed on the device's clock (backend
     * mark), read when it ends: op, phase, and the marks around it */
    struct exec_mark { int op, phase; void *a, *b; } *marks;
    int n_marks, cap_marks;
    struct exec_ofl *ofl;   /* its offload tier and threads, or NULL */
    /* an offload schedule's plan (rt->tiers): the tier tasks per stream
     * (SIM_STREAM_*), a thread for each stream that has some, the
     * iteration the compute thread has opened to them */
    struct exec_tiers *tiers;
    int *tq[SIM_STREAM_COUNT], n_tq[SIM_STREAM_COUNT];
    pthread_t tier_th[SIM_STREAM_COUNT];
    int tier_threads;
    int tier_open;
} exec_worker;

/* The shared part of a run. */
struct exec_runtime {
    const sim_plan *plan;
    const prof_model *model;
    const sim_ir *ir;
    exec_gpt_config cfg;
    int mbs, T, tp, dp, pipes;
    /* sequence parallelism (Korthikanti et al. 2022): the residual
     * stream's tokens split over the tensor-parallel group (exec_xop
     * seq); 0 where the plan has none */
    int sp;
    /* T5: the decoder's length, a record's ids (the encoder's tokens,
     * the decoder's inputs, its targets, then each stack's buckets per
     * relative offset: exec_t5_buckets) */
    int Td;
    int *t5_buckets, n_t5_buckets;
    int zero;                   /* ZeRO stage run (sim_zero_stage) */
    int shard;                  /* ranks a stage's state is sharded over */
    int n_workers, n_local, first_local;
    exec_worker *w;             /* n_local: workers this process holds */
    exec_xop *xop;              /* per graph op */
    int *last_use;              /* per graph op: the last op reading it */
    exec_stage *geo;            /* per IR stage: its geometry (op range,
                                 * inputs, what backward keeps) */
    int S, M, K;                /* IR stages, microbatches, minibatches */
    int S_model;
    int epochs;                 /* steps (flush) or 1 (no flush) */
    int async;
    int recompute;
    const exec_corpus *corpus;
    const exec_backend *be;     /* where tensors live and kernels run */
    uint64_t seed;
    exec_adamw adamw;
    int warmup, total_steps, step0;
    /* the LoRA adapters' AdamW m and v to start from (a resumed run's;
     * NULL: zero), read by exec_rt_setup */
    const float *lora_m0, *lora_v0;
    double scale;               /* loss gradient per token: 1 / tokens */
    double budget;              /* bytes per device; 0: unlimited */
    int budget_given;           /* budget is --mem-budget's (else the
                                 * plan's device memory) */
    exec_xport *x;
    /* per IR stage: the IR stages holding a tied copy in its replica */
    int *tied_group;            /* per stage: bit-free list head, or -1 */
    /* A collective's first send waits for its receiver to be in the
     * collective (the IR's dependency on the receiver's compute, as NCCL
     * moves nothing before every member has joined), so no chunk lands
     * on a device still computing: per IR task, CSR, the tasks of other
     * devices a collective send waits for (gate: their compute, or the
     * receive ending their part of the collective before) and the
     * devices whose communication thread a task's end wakes (wake).
     * A later step of a ring sends once its receiver has started its
     * own send of that step, which folds in what it received the step
     * before (gate_start: the task whose start it waits for, -1;
     * started_by: the other way), so a member holds one received chunk
     * at a time, as NCCL's fixed buffers do. A sender does not see
     * workers of other processes (MPI): there the receiver holds the
     * message until it has joined (exec_recv_ready). */
    int *gate_off, *gate, *wake_off, *wake, *gate_start, *started_by;
    /* Gradient buckets (sim_task.bkt_ops): per task, whether a bucket's
     * ring waits for it part-way (a backward, which then says how far it
     * has come: exec_worker.prog_op); per model op, whether a bucket's
     * lowest op (the backward says so after it) */
    unsigned char *early, *bkt_edge, *bkt_last; /* bkt_last: per task, a
                             * bucket ring's last receive */
    int fault_worker, fault_task, fault_kill;
    int slow_worker, slow_us;   /* exec_pipe_opts' (tests) */
    atomic_int abort;
    pthread_mutex_t err_mu;
    int err_mu_ok;
    /* host memory of the offload schedules' tiers, every local worker's
     * at once (tiers.c), and its peak since they were set up */
    pthread_mutex_t host_mu;
    double host_cur, host_peak;
    exec_host_share *host_share; /* under mpirun: the machine's, every
                                 * process's at once */
    util_err err;               /* the first failure */
    int err_worker;
    const volatile int *stop_flag;  /* Ctrl-C: stop after the step */
    atomic_int stop_epoch;      /* the last epoch to run (stop agreed) */
    int record_mem;
    int op_timing;              /* time every op's parts (calibration) */
    exec_offload offload;       /* where model states live, or none; with
                                 * rt->tiers its path and fault only */
    /* the plan's schedule offloads (sim_sched_offload): its schedule,
     * where the states live and where swapped activations wait
     * (sim_tier), as its costs say */
    int tiers, tier_sched, tier, act_tier;
    /* the plan's stages keeping their optimizer state on a host tier
     * (sim_plan.state_tier): their copies and DRAM steps run on the
     * compute thread in the IR's order, their drive chunks' reads, steps
     * and writes on a tier thread per stream, overlapped as the IR says
     * (stage_tier.c) */
    int stage_tiers;
    int64_t t0;                 /* clock origin (exec_now_ns) */
    /* after each flushed step, on worker 0 (progress lines) */
    void (*on_step)(void *ctx, int step, double loss, double norm,
                    double lr, double ms);
    void *on_step_ctx;
};

/* The run's whole parameter arrays a stage's slices come from and go to:
 * the model's (P floats in the order of table tt) and the LoRA adapters'
 * (exec_lora_table lt; lora NULL: zeros, or not wanted). */
typedef struct exec_parr {
    const exec_tensor *tt, *lt;
    float *p, *lora;
} exec_parr;

/* Sets up the workers this process holds (ids first..first+n-1): task
 * lists, stages with their parameters from full (P floats in arena order;
 * adam_m/adam_v may be NULL for zero state) and the LoRA adapters from
 * lora (exec_lora_table's arena; NULL without), memory. Code 1 when the
 * state does not fit the budget. */
int exec_rt_setup(exec_runtime *rt, const float *full,
                  const float *adam_m, const float *adam_v, const float *lora,
                  util_err *e);
/* Runs every epoch on the workers held here (threads), joins them.
 * Returns 0, or -1 with rt->err set (the first failure). */
int exec_rt_run(exec_runtime *rt);
/* Writes the weights and AdamW state of the slices this process owns for
 * checkpoints into full arrays (P floats; others untouched), the LoRA
 * adapters and their moments into lora, lora_m, lora_v (NULL without;
 * an offload schedule's tier gives the adapters, not their moments); -1
 * when a device failed to hand them back. */
int exec_rt_collect(exec_runtime *rt, float *full, float *adam_m,
                    float *adam_v, float *lora, float *lora_m, float *lora_v,
                    util_err *e);
void exec_rt_free(exec_runtime *rt);

/* Whether worker w, receiving task rid's message for epoch, has joined
 * its collective (exec_runtime.gate: the tasks of w the sender's send
 * waits for are done or started): a transport whose sender cannot see
 * that (MPI) holds the message until then, so it lands on no device still
 * computing. 1 for any other message. */
int exec_recv_ready(exec_worker *w, int rid, int epoch);

/* The floats receive task rid brings worker w (transports that must
 * post receives of a known size: NCCL). */
size_t exec_recv_floats(exec_runtime *rt, exec_worker *w, int rid);
/* Delivers a receive (transport side): takes over b's reference. */
void exec_deliver(exec_runtime *rt, int w, int epoch, int rid, exec_buf *b,
                  int64_t started);
/* The worker object of global worker id, or NULL when another process
 * holds it. */
exec_worker *exec_rt_worker(exec_runtime *rt, int id);
/* Records a failure (the first wins), stops every worker. */
void exec_rt_fail(exec_runtime *rt, int worker, const util_err *e);

/* Forward, input-gradient and weight-gradient parts of one op of a
 * record (stage_gpt.c); *tp_ns gets the tensor-parallel time added. */
int exec_op_forward(exec_worker *w, exec_stage *st, exec_rec *r, int op,
                    int count_loss, int64_t *tp_ns, util_err *e);
int exec_op_backward(exec_worker *w, exec_stage *st, exec_rec *r, int op,
                     int input_part, int weight_part, int64_t *tp_ns,
                     util_err *e);

/* The out-of-memory error of worker w (its budget and the request that
 * failed, or the device's own message; what it was for); returns -1. */
int exec_oom(exec_worker *w, const char *what, util_err *e);

/* Set on a worker's compute thread: kern_ns is that thread's. */
extern _Thread_local int exec_on_compute;

/* Time inside kernels, added to the worker's count on its compute thread
 * (the communication and tier threads' kernels, folds and copies, are
 * theirs: counting them raced with the compute thread, and put their
 * time in its kernels). */
#define EXEC_KERN(w, call)                                                   \
    do {                                                                     \
        int64_t k0_ = (int64_t)exec_now_ns();                                \
        call;                                                                \
        if (exec_on_compute)                                                 \
            (w)->kern_ns += (int64_t)exec_now_ns() - k0_;                    \
    } while (0)

/* --------------------------------------------------------- tier file */

/* A file of the NVMe tier (offload.c): a unique name in a directory,
 * unlinked as soon as it is open, so nothing is left behind however the
 * run ends; O_DIRECT where the file system takes an aligned write (else
 * buffered, and the note says why). Offsets, sizes and buffers of
 * O_DIRECT I/O are multiples of EXEC_TFILE_ALIGN. Thread-safe. */
#define EXEC_TFILE_ALIGN 4096
typedef struct exec_tfile {
    int fd, direct;
    const char *dir;            /* lent */
    char note[160];             /* "O_DIRECT" or why buffered; "" unopened */
    pthread_mutex_t mu;
    int mu_ok;
    int64_t size;               /* bytes handed out (exec_tfile_grow) */
    double written, full_after; /* tests: ENOSPC past full_after bytes */
    double free_at_open;        /* what its file system had free then (the
                                 * test's full_after where given); < 0
                                 * unknown */
    double rd_bytes, rd_ns, wr_bytes, wr_ns;
} exec_tfile;

static inline size_t exec_tfile_up(size_t b)
{
    return (b + EXEC_TFILE_ALIGN - 1) / EXEC_TFILE_ALIGN * EXEC_TFILE_ALIGN;
}
/* Aligned host memory; failure aborts as util_malloc's. */
void *exec_tfile_buf(size_t bytes);
void exec_tfile_init(exec_tfile *f);
/* Creates the file in dir (NULL or "": the working directory); code 1
 * for a directory that cannot take it or a full disk. */
int exec_tfile_open(exec_tfile *f, const char *dir, double full_after,
                    util_err *e);
/* The offset of a new region of bytes (rounded up to the alignment). */
int64_t exec_tfile_grow(exec_tfile *f, size_t bytes);
/* The whole pread (wr 0) or pwrite of bytes at off, timed; code 1 with
 * the directory named on failure (a full disk says so). */
int exec_tfile_io(exec_tfile *f, int wr, void *buf, size_t bytes, int64_t off,
                  util_err *e);
void exec_tfile_close(exec_tfile *f);

/* ------------------------------------------------------------ offload */

/* Model states in a tier below the device (offload.c): a stage's fp32
 * weights and AdamW moments live in a host arena (DRAM) or a file
 * (NVMe), its gradients in host memory; the device holds a window of
 * layers ("chunks": the stage's ops of one GPT layer, the embedding or
 * the head, whose parameters are contiguous in the stage's arena),
 * fetched before a layer's ops and dropped after, the next one
 * prefetched by an I/O thread. AdamW runs on a CPU thread of the worker:
 * at the optimizer task (zero-offload), or for each layer as soon as its
 * last gradient of the step has arrived (fuyou; the step's fetch of a
 * layer waits for its update, so no update is stale). The CPU backend
 * only. */

/* Opens worker w's tier (the file in rt->offload.path, removed at once:
 * nothing is left behind whatever ends the run) and its threads; 0 or -1,
 * code 1 for a path that cannot take a file, code 2 for a plan the
 * policy cannot run. */
int exec_ofl_open(exec_worker *w, util_err *e);
/* Puts stage st's states in the tier, from full, adam_m, adam_v (P
 * floats in arena order; NULL: zeros), tt the arena's tensors. */
int exec_ofl_stage_add(exec_worker *w, exec_stage *st,
                       const exec_tensor *tt, const float *full,
                       const float *adam_m,
                       const float *adam_v, util_err *e);
/* Makes the weights of op's layer resident on the device (and its
 * gradient window when grad), prefetching the next layer in the sweep
 * (backward: the one before); ops without parameters keep what is there. */
int exec_ofl_acquire(exec_worker *w, exec_stage *st, int op, int backward,
                     int grad, util_err *e);
/* The end of a task's sweep: gradient windows written back, the window
 * dropped. epoch: the step's gradients counted for fuyou's early update. */
int exec_ofl_release(exec_worker *w, exec_stage *st, int epoch, util_err *e);
/* The device address of a stage's weight (gradient) at arena offset off:
 * its layer must be resident. */
float *exec_ofl_wp(const exec_stage *st, size_t off);
float *exec_ofl_gp(const exec_stage *st, size_t off);
/* The optimizer task: updates the layers not updated yet with clipping
 * factor scale for step `step` (0-based), waits for every update, clears
 * the gradients. */
int exec_ofl_step(exec_worker *w, exec_stage *st, int step, float scale,
                  util_err *e);
/* The stage's weights and moments (arena order, st->n floats each) into
 * host arrays; NULL skips one. */
int exec_ofl_read_state(exec_worker *w, exec_stage *st, float *wt, float *m,
                        float *v, util_err *e);
/* What the worker's tier measured: bytes and seconds read and written,
 * parameters updated and seconds in AdamW. */
void exec_ofl_stats(const exec_worker *w, double out[6]);
/* How the file is written ("O_DIRECT" or why buffered), "" for DRAM. */
const char *exec_ofl_note(const exec_worker *w);
/* ---------------------------------------------------- the host's step */

/* The most threads the host's share of a step (AdamW, the gradient norm,
 * the sums of gradient copies) takes. */
#define EXEC_HOST_MAX_THREADS 32
/* Its threads: --offload's host_threads, else the host's cores but the
 * one computing (a CPU device's, or the one driving the GPU). */
int exec_host_threads(const exec_runtime *rt);
/* The same for a request of `requested` threads (0: the default). */
int exec_host_threads_for(int requested);
/* fn(ctx, part, n) for every part of n (at most EXEC_HOST_MAX_THREADS),
 * part 0 on the calling thread. Elementwise work split this way keeps its
 * bits; sums are summed per part, then in part order. */
void exec_host_par(int threads, void (*fn)(void *, int, int), void *ctx);
/* Part p of n of [0, len): [*lo, *hi). */
void exec_part_range(size_t len, int p, int n, size_t *lo, size_t *hi);

/* ------------------------------------------------------- stage tiers */

/* A pipeline stage with its optimizer state on the host (the plan's
 * state_tier; sim_add_stage_tiers prices it): its weights and gradients
 * stay on the device; its AdamW moments and fp32 weights live in host
 * memory (dram) or in a file (nvme, read and written in the IR's chunks).
 * Its tier tasks run on the compute thread in the IR's order: the
 * gradient to the host (and cleared on the device), each chunk read,
 * stepped by the CPU's AdamW (elementwise: the CPU backend's bits) and
 * written back, the new weights to the device; the stage's own step then
 * does nothing. */
typedef struct exec_stier exec_stier;
/* Stage st of worker w keeps its state on tier (SIM_TIER_DRAM, _NVME),
 * from weights w0 and moments m0, v0 (NULL: zero), st->n floats each. */
int exec_stier_add(exec_worker *w, exec_stage *st, int tier, const float *w0,
                   const float *m0, const float *v0, util_err *e);
/* Runs tier task id of the device (its stage's; epoch from 1) at clip
 * scale `scale`. */
int exec_stier_task(exec_worker *w, int id, int epoch, float scale,
                    util_err *e);
/* The moments (m, v may be NULL) of a stage tier, st->n floats each. */
int exec_stier_moments(exec_worker *w, exec_stage *st, float *m, float *v,
                       util_err *e);
/* The drives' traffic of worker w's stage tiers since they were set up
 * and their CPU's AdamW: bytes read, seconds reading, bytes written,
 * seconds writing, parameters stepped, seconds stepping (exec_ofl_stats'
 * columns). */
void exec_stier_stats(const exec_worker *w, double out[6]);
void exec_stier_free(exec_worker *w, exec_stage *st);

/* ------------------------------------------------------------- tiers */

/* Plans of the offload schedules (tiers.c): the IR's tier tasks run on a
 * thread per stream; the states of a stage live in host memory or a file
 * (rt->offload.path), its weights come to the device with the fetch of
 * each group of its compute tasks and its gradients go to the host. One
 * worker per data-parallel rank (tensor parallelism 1): with several,
 * each holds its share of every stage's states (exec_tiers_chunk), the
 * IR's rings gather the weights and reduce-scatter the gradients between
 * the devices, and the first step agrees the gradient norm. */
typedef struct exec_tiers exec_tiers;
/* The slice of stage st holding its copy of tied table g (0 the token
 * table, 1 and 2 a T5's encoder's and decoder's relative-position
 * tables; sim_task.table), -1 */
static inline int exec_stage_table_sl(const exec_stage *st, int g)
{
    return g ? st->rel_sl[g - 1] : st->tied_sl;
}

/* The most pieces of a share: three tied tables (the token table, a
 * T5's relative-position tables) cut apart from the rest. */
#define EXEC_TIER_PIECES 7
/* Chunk c of D of stage st's trained arena: each tied table's slice cut
 * apart from the rest (its holders cut it alike), each segment in D;
 * the pieces [lo[k], lo[k] + n[k]), their count returned. Rank p's
 * share is chunk (p + 1) mod D, where a ring's reduce-scatter leaves
 * it; D 1: the whole arena. */
int exec_tiers_chunk(const exec_stage *st, int D, int c,
                     size_t lo[EXEC_TIER_PIECES], size_t n[EXEC_TIER_PIECES]);
/* Chunk c of D of stage st's frozen arena, [*lo, *lo + *n): cut at the
 * first frozen slice from c/D of it on, so that each chunk holds whole
 * slices (QLoRA's 4-bit blocks dequantize together). */
void exec_tiers_frozen_chunk(const exec_stage *st, int D, int c, size_t *lo,
                             size_t *n);
/* The device buffer such a task reads or writes (of the frozen arena
 * where frozen): the weights its fetch brought (zero-offload: the
 * resident ones), or the gradient its reduce-scatter reduces; NULL when
 * none. */
float *exec_tiers_ring_base(exec_worker *w, int id, int frozen);
/* Counts bytes a ring step sent. */
void exec_tiers_sent(exec_worker *w, double bytes);
/* At an iteration's end, its rings done: zero-offload's ranks copy the
 * stepped tied table to its other holders on the device. */
void exec_tiers_settle(exec_worker *w);
/* The runtime's: folds the data-parallel receives task id waits for
 * into their buffers (a gradient copy's last reduce-scatter step). */
int exec_rt_fold(exec_worker *w, int id, util_err *e);
/* Worker w's tiers (its file where a tier is NVMe), before its stages;
 * code 2 for a run the executor cannot make, 1 for a path that cannot
 * take the file. */
int exec_tiers_open(exec_worker *w, util_err *e);
/* Puts stage st's states in its tier: the weights from wsrc (the
 * model's and the adapters'; a fine-tuning mode's frozen weights too,
 * fetched with the rest), AdamW's moments from adam_m, adam_v (NULL:
 * zeros); zero-offload's weights on the device. */
int exec_tiers_stage_add(exec_worker *w, exec_stage *st,
                         const exec_parr *wsrc, const float *adam_m,
                         const float *adam_v, util_err *e);
/* After every stage: which holder of a tied table steps it. */
int exec_tiers_ready(exec_worker *w, util_err *e);
/* Before compute task id of stage st: st->w[0] are the weights its fetch
 * brought (or the resident ones), st->g a new gradient buffer where the
 * IR starts one. */
int exec_tiers_bind(exec_worker *w, int id, exec_stage *st, util_err *e);
/* After it: the weights and gradient it was the last to use go. */
void exec_tiers_after(exec_worker *w, int id, exec_stage *st);
/* Runs tier task id of iteration epoch. */
int exec_tiers_task(exec_worker *w, int id, int epoch, util_err *e);
/* The iteration's gradient norm's square, once its steps are done:
 * every rank's under ZeRO (its first step agrees it), this rank's shares'
 * under Fuyou (the iteration's end sums them). */
double exec_tiers_norm_sq(const exec_worker *w, int epoch);
/* The stage's weights and moments into host arrays of st->n floats (with
 * several ranks, only the rank's share: exec_tiers_chunk), its frozen
 * weights into wf (NULL skips one). */
int exec_tiers_read_state(exec_worker *w, exec_stage *st, float *wt,
                          float *m, float *v, float *wf, util_err *e);
/* Measured: the file's bytes and seconds read and written, parameters
 * and seconds of AdamW, bytes and seconds copied to and from the device,
 * host memory's peak (0: it is every local worker's at once, the
 * runtime's host_peak), bytes the device sent the other ranks. */
enum { EXEC_TIER_STATS = 12 };
void exec_tiers_stats(const exec_worker *w, double out[EXEC_TIER_STATS]);
const char *exec_tiers_note(const exec_worker *w);
void exec_tiers_free(exec_worker *w);

/* Fills st->sl_w, st->sl_b, st->sl_l from its slices (stage_gpt.c). */
void exec_stage_op_slices(const exec_runtime *rt, exec_stage *st);
/* A stage's slices of src into h (st->n floats) and hf (st->n_frozen; NULL
 * when the stage has none), the rest untouched; the slices it saves from
 * h and hf into dst (a NULL array of dst is left out). */
void exec_stage_gather(const exec_stage *st, const exec_parr *src, float *h,
                       float *hf);
void exec_stage_scatter(const exec_stage *st, const float *h,
                        const float *hf, const exec_parr *dst);
/* The bytes of stage st's weights, gradients and AdamW state its
 * device holds for the whole run (sharded under ZeRO; none offloaded). */
double exec_stage_state_bytes(const exec_runtime *rt, const exec_stage *st);
/* Stops the threads, frees the tier (the stages' parts too). */
void exec_ofl_free(exec_worker *w);

#endif
