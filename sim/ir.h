/* sim/ir.h: the task IR, its schedule generators and the plan file: what
 * the simulator and the executor both read. A schedule generator emits, per
 * device, an ordered task list with dependencies; list-scheduled orders
 * (Mixed-pipe, the wave, ZB-V, Chimera) rank tasks by the cost table, so
 * the costs the generators order by live here too. The engine, reports and
 * traces are in sim/sim.h, which the executor's runtime never includes.
 * Ownership: *_new and *_build return objects freed with the matching
 * *_free (NULL is fine); getters lend. Errors: functions taking util_err
 * return 0 or -1. */
#ifndef SLUICE_SIM_IR_H
#define SLUICE_SIM_IR_H

#include <stdint.h>
#include <stdio.h>

#include "profiles/profiles.h"
#include "util/util.h"


/* ===================================================================== *
 * The task IR                                                           *
 * ===================================================================== */

typedef enum {
    SIM_F,          /* forward of one stage for one microbatch */
    SIM_B,          /* backward for inputs only (zero-bubble split) */
    SIM_W,          /* backward for weights only */
    SIM_BW,         /* full backward (B and W fused) */
    SIM_RECOMP,     /* activation recomputation before the backward */
    SIM_OPT,        /* optimizer step of one stage */
    SIM_SEND,       /* peer-to-peer send (activation or gradient) */
    SIM_RECV,       /* the matching receive */
    SIM_ALLREDUCE,  /* collective over a group (data/replica parallelism) */
    SIM_SWAP_OUT,   /* device -> host copy */
    SIM_SWAP_IN,    /* host -> device copy */
    SIM_NVME_READ,  /* NVMe -> host DRAM, striped over the server's drives */
    SIM_NVME_WRITE, /* host DRAM -> NVMe */
    SIM_CPU_OPT,    /* optimizer step of one stage on the host's CPU */
    SIM_KIND_COUNT
} sim_kind;

/* Streams of a device, as on a GPU. Tasks of one stream run one at a time
 * in list order, except receives: they are pre-posted (a receive buffer is
 * ready whenever the sender is), so SIM_STREAM_RECV tasks run concurrently,
 * each from its sender's start to the end of the transfer. */
typedef enum {
    SIM_STREAM_COMPUTE, SIM_STREAM_COPY_IN, SIM_STREAM_COPY_OUT,
    SIM_STREAM_SEND, SIM_STREAM_COLL,
    SIM_STREAM_IO_IN,   /* the device's NVMe reads (offload) */
    SIM_STREAM_IO_OUT,  /* its NVMe writes (they share the drives with
                         * the reads, at the same time) */
    SIM_STREAM_HOST,    /* the CPU optimizer working for the device */
    SIM_STREAM_RECV, SIM_STREAM_COUNT
} sim_stream;

/* What a transfer is for: pipeline activations and gradients, data-
 * parallel (and Chimera replica) gradient all-reduce steps, tensor-
 * parallel all-reduces (inside F and B: they block the compute stream),
 * and the exchange of tied-embedding gradients between the stages that
 * hold a copy of the table (the embedding and a tied LM head). */
typedef enum {
    SIM_COMM_PP, SIM_COMM_DP, SIM_COMM_TP, SIM_COMM_EMB, SIM_COMM_COUNT
} sim_comm;
const char *sim_comm_name(sim_comm c); /* "pipeline", ... */

/* Which collective a data-parallel transfer is a step of: the ring
 * all-reduce of gradients (no sharding), or, under ZeRO (Rajbhandari et
 * al., SC'20), a reduce-scatter of gradients or an all-gather of
 * parameters over the shard group. */
typedef enum {
    SIM_COLL_ALLREDUCE, SIM_COLL_REDUCE_SCATTER, SIM_COLL_ALLGATHER,
    SIM_COLL_COUNT
} sim_coll;
const char *sim_coll_name(sim_coll c); /* "all-reduce", ... */

const char *sim_kind_name(sim_kind k);     /* "F", "B", "W", "BW", ... */
/* Whether a task kind is an NVMe read or write. */
static inline int sim_kind_nvme(int k)
{
    return k == SIM_NVME_READ || k == SIM_NVME_WRITE;
}
/* Whether a task kind is a tier task: copies to and from the host, the
 * drives, the CPU's step. */
static inline int sim_kind_tier(int k)
{
    return k == SIM_SWAP_IN || k == SIM_SWAP_OUT || k == SIM_CPU_OPT ||
           sim_kind_nvme(k);
}
const char *sim_stream_name(sim_stream s); /* "compute", ... */
/* The stream a tier task runs on: copies in and out, the drives' reads
 * and writes, else (the CPU's step) the host's. */
static inline sim_stream sim_tier_stream(int k)
{
    return k == SIM_SWAP_IN ? SIM_STREAM_COPY_IN
         : k == SIM_SWAP_OUT ? SIM_STREAM_COPY_OUT
         : k == SIM_NVME_READ ? SIM_STREAM_IO_IN
         : k == SIM_NVME_WRITE ? SIM_STREAM_IO_OUT : SIM_STREAM_HOST;
}

typedef struct sim_task {
    uint8_t kind;       /* sim_kind */
    uint8_t stream;     /* sim_stream */
    uint8_t grad;       /* transfers: 1 = gradient (backward direction) */
    uint8_t comm;       /* transfers: sim_comm */
    uint8_t coll;       /* data-parallel transfers: sim_coll */
    uint8_t inner;      /* folded data-parallel transfers: the ring closes
                         * inside the simulated group (hybrid sharding's
                         * ring inside a server), its last member sends to
                         * its first, not to the next group's */
    uint8_t table;      /* tied-table transfers (SIM_COMM_EMB): which
                         * table, 0 the token table, 1 and 2 a T5's
                         * encoder's and decoder's relative-position
                         * tables */
    int32_t lat_ns;     /* data-parallel ring steps between GPUs: what
                         * NCCL takes a step beyond moving the bytes
                         * (sim_ring_step_ns); the engine takes it where
                         * the route's latency is less; 0: the route's */
    int32_t fold_ns;    /* such steps between CPU cores: the receiver's
                         * pass over the chunk after it lands (the
                         * executor's ring adds it to the gradient or
                         * copies it into place); added to the step */
    int32_t device;
    int32_t stage;      /* compute: its stage; transfers: the sending stage
                         * (stages of replicas: r*S + s, see sim_costs) */
    int32_t stage2;     /* transfers: the receiving stage; else -1 */
    int32_t mb;         /* microbatch index within its minibatch; -1: none */
    int32_t minibatch;  /* 0.. n_minibatches-1 */
    int32_t version;    /* weight version the task uses (stashing) */
    int32_t peer;       /* send <-> recv partner task id; -1 */
    int32_t lanes;      /* transfers: parallel flows, one per tensor-parallel
                         * rank (GPU j of the sender's group to GPU j of the
                         * receiver's), each bytes/lanes; 0 or 1: one */
    int32_t chans;      /* data-parallel ring steps between servers:
                         * NCCL's channels, each crossing through another
                         * member's network port (the c-th member before
                         * the sender to the c-th after the receiver),
                         * every lane's bytes split over them; 0 or 1:
                         * one (sim_ring_chans) */
    int32_t steps;      /* transfers: the transfer repeated back to back,
                         * the route's latency between repeats (a folded
                         * ring all-reduce, sim_add_allreduce; the engine
                         * moves the repeats as one flow, their latencies
                         * after it, unless sim_run_opts.ring_steps); 0
                         * or 1: once */
    double bytes;       /* transfers, swaps, all-reduce (all lanes) */
    /* data-parallel all-reduce steps of a gradient bucket (sim_costs
     * bkt_*): its ops bkt_first..bkt_first+bkt_ops-1 (model op indices),
     * whose gradients it reduces; a dependency of such a step on a
     * backward (BW or W) is met once that backward has run those ops
     * (backward runs last op to first), not at its end. bkt_ops 0: the
     * whole stage's gradient, after its backward. */
    int32_t bkt_first, bkt_ops;
    int32_t dep_off, n_dep; /* into sim_ir.deps (valid after finish) */
} sim_task;

/* A buffer the memory account holds from the start of task `alloc` to the
 * end of task `release` (both on `device`): ZeRO-3's gathered parameters,
 * from their all-gather's first step to the end of the compute using
 * them. */
typedef struct sim_ir_buf {
    int32_t alloc, release, device;
    double bytes;
    int hole;           /* sim_ir_hole: absent from the end of alloc to
                         * the start of release */
} sim_ir_buf;

typedef struct sim_ir {
    char schedule[32];
    int n_devices, n_stages;
    int n_mb;           /* microbatches per minibatch */
    int n_minibatches;  /* >1: steady-state schedules (no flush) */
    int version_delay;  /* no flush: 1 = every microbatch of minibatch k
                         * uses weight version k-1 (PipeDream-2BW's
                         * W(t+1) = W(t) - lr grad f(W(t-1))); 0 = the
                         * newest version when its F starts (stashing) */
    int *stage_device;  /* n_stages */
    /* Generators order one pipeline's worth of work: stages
     * 0..n_gen_stages-1 on devices 0..n_gen_devices-1 (both 0: all);
     * data-parallel copies are made from it by sim_schedule. */
    int n_gen_stages, n_gen_devices;
    sim_task *tasks;
    int n_tasks, cap_tasks;
    int32_t *deps;      /* CSR after sim_ir_finish */
    int n_deps;
    int32_t *seq;       /* per device task order: seq[dev_off[d]..dev_off[d+1]) */
    int *dev_off;
    int32_t *succ;      /* successors CSR (built by finish) */
    int *succ_off;
    /* building state */
    int32_t **dlist; int *dlen, *dcap;
    int32_t *edge;      /* (task, dep) pairs before finish */
    int n_edge, cap_edge;
    sim_ir_buf *bufs;   /* buffers by liveness (sim_ir_buffer) */
    int n_bufs, cap_bufs;
    int finished;
} sim_ir;

sim_ir *sim_ir_new(const char *schedule, int n_devices, int n_stages,
                   const int *stage_device, int n_mb, int n_minibatches);
void sim_ir_free(sim_ir *ir);
/* Appends a copy of t to the end of t->device's list; returns its id. */
int sim_ir_add(sim_ir *ir, const sim_task *t);
/* Task `task` may start only after task `dep` ended (any devices). */
void sim_ir_dep(sim_ir *ir, int task, int dep);
/* Freezes the IR: dependency and successor CSR, device order. */
void sim_ir_finish(sim_ir *ir);
/* Appends a compute task (F, B, W, BW, RECOMP, OPT) for a stage on the
 * stage's device, compute stream; mb = -1 for OPT. Returns its id. */
int sim_ir_compute(sim_ir *ir, sim_kind k, int stage, int mb, int minibatch,
                   int version);
/* Moves tasks appended since task n0 (ids >= n0) to just after their
 * anchors in their devices' lists: task[q] after anchor[q], those with
 * one anchor in the order given; anchor[q] is a task id < n0 on the
 * same device. Every task >= n0 must have one. */
void sim_ir_place_after(sim_ir *ir, int n0, const int *anchor,
                        const int *task, int n);
/* Appends a send on `device` and its receive on `device2` (stream of the
 * send as given, receive on SIM_STREAM_RECV), peers of each other, the
 * receive after the send; *rid gets the receive. Returns the send. */
int sim_ir_transfer(sim_ir *ir, const sim_task *send, int device2, int *rid);
/* Records a buffer of `bytes` on alloc's device, live from the start of
 * task alloc to the end of task release (same device). */
void sim_ir_buffer(sim_ir *ir, int alloc, int release, double bytes);
/* Records the opposite: `bytes` of out's device that leave it when task
 * out ends and are back when task in starts (a swapped activation). */
void sim_ir_hole(sim_ir *ir, int out, int in, double bytes);
/* Human name of a task: "dev 2 F stage 3 mb 5" (buf returned). */
char *sim_task_str(const sim_ir *ir, int id, char *buf, size_t n);
/* Whether task t's dependency on task u is met part-way through u: t a
 * gradient bucket's ring step, u a backward (BW or W) computing the
 * bucket (sim_task.bkt_ops); the engine and the executor both ask. */
static inline int sim_dep_early(const sim_task *t, const sim_task *u)
{
    return t->bkt_ops > 0 && (u->kind == SIM_BW || u->kind == SIM_W) &&
           u->stream == SIM_STREAM_COMPUTE;
}
/* Whether task i (after sim_ir_finish) is a gradient bucket's last ring
 * receive: it forwards nothing, so it goes into place as it lands. */
static inline int sim_bucket_landing(const sim_ir *ir, int i)
{
    const sim_task *t = &ir->tasks[i];
    if (t->kind != SIM_RECV || t->bkt_ops <= 0) return 0;
    for (int k = ir->succ_off[i]; k < ir->succ_off[i + 1]; k++)
        if (ir->tasks[ir->succ[k]].kind == SIM_SEND) return 0;
    return 1;
}

/* Compute order before lowering: generators append compute tasks (F, B, W,
 * BW, RECOMP, OPT) per device in order, then sim_lower() wires the
 * dependencies and inserts sends and receives between devices. Passes
 * that add more (collectives, swaps) run after it; sim_ir_finish() then
 * freezes the IR. */
typedef struct sim_costs sim_costs;
int sim_lower(sim_ir *ir, const sim_costs *c, util_err *e);

/* Checks what every schedule must satisfy: each stage gets each
 * microbatch's F and backward exactly once (BW, or B and W), in the order
 * F, (RECOMP), B, W on its device; sends and receives matched; stages on
 * one device. Then a dry run in list order finds deadlocks and names the
 * stuck tasks (device, kind, stage, microbatch). */
int sim_validate(const sim_ir *ir, util_err *e);
/* The same without the dry run. */
int sim_validate_rules(const sim_ir *ir, util_err *e);

/* ===================================================================== *
 * Costs: what one stage task costs, precomputed                         *
 * ===================================================================== */

/* Activation recomputation (Korthikanti et al., "Reducing Activation
 * Recomputation in Large Transformer Models", arXiv 2205.05198). Full:
 * each transformer layer keeps only its input (the checkpoint) from its
 * forward, freeing its internals as they are consumed, and is recomputed
 * one layer at a time just before that layer's backward (Megatron-LM's
 * uniform method with one layer per checkpoint, PyTorch's checkpoint);
 * selective: only the attention core (QK^T, softmax, its dropout,
 * attention over V: the a*s*s-sized tensors) is dropped and recomputed.
 * Embeddings, head and loss keep their activations. NONE and FULL keep
 * the values of the boolean this replaces. */
typedef enum {
    SIM_RC_NONE = 0, SIM_RC_FULL = 1, SIM_RC_SELECTIVE = 2, SIM_RC_COUNT
} sim_recompute;
const char *sim_recompute_name(int rc);  /* "none", "full", "selective" */
/* A mode a user names; -1 when none. */
int sim_recompute_parse(const char *s);
/* The command line's `--recompute [full|selective|none]` at argv[*i]: a
 * mode when the next word names one (*i moves past it), else full; a next
 * word that is no option and no mode is an error naming it (exit code 2). */
int sim_recompute_arg(int argc, char **argv, int *i, int *out, util_err *e);
/* --grad-bucket SIZE at argv[*i]: the gradient bytes of a data-parallel
 * all-reduce bucket ("25M"; 0 or "stage": one per stage, after its
 * backward), into *out; advances *i. */
int sim_grad_bucket_arg(int argc, char **argv, int *i, double *out,
                        util_err *e);
/* A gradient bucket as --grad-bucket, a plan file or a validation table
 * gives it: a size from 1K to 1T, or 0 or "stage" (one all-reduce a
 * stage); -1 for anything else. */
int sim_grad_bucket_parse(const char *v, double *out);
/* What such a value may be, for messages. */
#define SIM_GRAD_BUCKET_TAKES "a size from 1K to 1T (25M), 0 or stage"
/* Whether bytes is such a size (or 0). */
int sim_grad_bucket_ok(double bytes);

/* Sharded data parallelism (ZeRO, Rajbhandari et al., SC'20; PyTorch
 * FSDP): ZeRO stage 1 splits the optimizer state of each stage over its
 * data-parallel group, 2 the gradients too, 3 the parameters too. FSDP's
 * FULL_SHARD is ZeRO-3 over the whole group; HYBRID_SHARD is ZeRO-3 over
 * the group's ranks inside one server, replicated across servers. */
typedef enum {
    SIM_FSDP_NONE = 0, SIM_FSDP_FULL, SIM_FSDP_HYBRID, SIM_FSDP_COUNT
} sim_fsdp;
const char *sim_fsdp_name(int f);   /* "none", "full", "hybrid" */
/* A mode a user names ("full", "hybrid"); -1 when none. */
int sim_fsdp_parse(const char *s);
/* The command line's `--zero N` or `--fsdp MODE` at argv[*i]: 1 when it
 * is one of them (*i moves past the value, *zero or *fsdp set), 0 when
 * it is not, -1 on a missing or bad value (exit code 2). */
int sim_shard_arg(int argc, char **argv, int *i, int *zero, int *fsdp,
                  util_err *e);
/* The ZeRO stage a plan runs: zero, or 3 under FSDP. */
int sim_zero_stage(int zero, int fsdp);
/* The ranks of a data-parallel group of dp replicas (rgpus GPUs each)
 * that a stage's state is sharded over under ZeRO stage `zero`: all of
 * them, or under FSDP's hybrid sharding those inside one server (the
 * replicas lie rgpus GPUs apart, so a server of gps GPUs holds gps/rgpus
 * of them); 1: none. 0 with a message when hybrid sharding cannot take
 * the layout (code 2). */
int sim_shard_group(const prof_topo *t, int zero, int fsdp, int dp,
                    int rgpus, util_err *e);
/* A state size per parameter (0: the default) that holds at least the
 * model's weights and gradients; else an error (code 2). */
int sim_state_bytes_check(const prof_model *m, double state, util_err *e);
/* ZeRO's Figure 1 for `params` parameters of wbytes each and `state`
 * bytes of model state per parameter: the weights, gradients and
 * optimizer state a rank keeps when stage `zero` shards them over
 * `shard` ranks (*w, *g, *opt in bytes). */
void sim_zero_bytes(double params, double wbytes, double state, int zero,
                    int shard, double *w, double *g, double *opt);

/* The steps in which a forward's kept activations grow and a
 * backward's shrink (sim_stage_cost.mem_f, mem_b). */
#define SIM_MEM_STEPS 4

typedef struct sim_stage_cost {
    int64_t f_ns, b_ns, w_ns;   /* full backward = b_ns + w_ns */
    int64_t bs_ns, ws_ns;       /* the two halves as tasks of their own
                                 * (prof_eff.split_factor) */
    int64_t r_ns;               /* recomputation before a backward (the
                                 * forward of what the mode recomputes) */
    int64_t opt_ns;             /* optimizer step of the stage */
    int64_t cpu_opt_ns;         /* the same on the host's CPU (offload) */
    double fwd_flops, bwd_flops;/* per microbatch (model FLOPs) */
    double params;
    double act_bytes;           /* kept from F for the backward, per mb */
    double input_bytes;         /* the stage's inputs, per mb (recompute keeps these) */
    double wkeep_bytes;         /* what W still needs after B: the weighted
                                 * ops' saved inputs (part of act_bytes)
                                 * and their output gradients */
    /* With recomputation, per mb: what F keeps for the backward instead of
     * act_bytes (checkpoints, and the activations of ops not recomputed),
     * what F holds on top of that while it runs (its largest moment of
     * live tensors in a recomputed layer), and what a recompute adds on
     * top of the kept bytes until the backward ends (one layer's, or one
     * attention core's, activations less its checkpoint). */
    double keep_bytes, fwd_ws_bytes, rec_ws_bytes;
    /* The ops before the model's first that trains run no backward and
     * keep nothing (a frozen prefix, PROF_GRAD_NONE): what their forward
     * holds at most while it runs, per mb (each tensor until its last
     * reader in the stage ran; those later stages read until the F
     * ends), before any activation the stage keeps exists; and of it,
     * what later stages read, held after the F until its sends are done
     * (the outputs of ops that train are kept activations already). */
    double none_ws_bytes, none_sent_bytes;
    /* what an op of the stage holds at most while its forward runs,
     * beyond the stage's activations; of it, QLoRA's largest weight
     * dequantized for a product, which the input gradients hold too */
    double fwd_scratch_bytes, deq_bytes;
    /* what the backward holds at most beyond its start: gradients in
     * flight, and (split B) those its W keeps; [k]: k & 1 fused (BW, else
     * B), k & 2 the stage recomputed (cost.c: bwd_ws) */
    double bwd_ws_bytes[4];
    /* when, as shares of the task's time, a forward takes each
     * SIM_MEM_STEPS-th of what it keeps (mem_f: at the start of the op
     * that begins it) and a backward frees each of what it frees
     * (mem_b: once the ops holding it have run their backward), from
     * its ops' times and activations; all 0 (hand-built costs): equal
     * steps of the time */
    double mem_f[SIM_MEM_STEPS], mem_b[SIM_MEM_STEPS];
    double weight_bytes, grad_bytes, opt_bytes; /* one copy each, as this
                                 * GPU holds them (sharded under ZeRO) */
    double host_state_bytes;    /* what a step on the host reads of the
                                 * stage's state and writes back: the
                                 * optimizer state (with the fp32 master
                                 * weights of 16-bit training) and, where
                                 * the weights train in fp32 and are their
                                 * own master copy, the weights (sharded
                                 * as the optimizer state) */
    double param_bytes;         /* the stage's weights unsharded: what a
                                 * ZeRO-3 gather brings */
    int units;                  /* the stage's layers (with the embedding
                                 * and the head, a layer each): FSDP's
                                 * units, gathered and reduced by a
                                 * collective call each */
    double gather_bytes;        /* what a ZeRO-3 gather holds at once: two
                                 * layers' weights (the one computing,
                                 * the next prefetched), at most the
                                 * stage's */
    double rs_bytes;            /* ZeRO-2 and 3: the unsharded weight
                                 * gradients a backward holds at once, two
                                 * layers' (the one computing, the one
                                 * being reduce-scattered), at most the
                                 * stage's; 0 otherwise */
    double train_params;        /* those that train (all but under a
                                 * fine-tuning mode: prof_model_finetune) */
    double train_bytes;         /* their gradients unsharded: what a
                                 * gradient reduction reduces */
    double frozen_bytes;        /* frozen weights, unsharded (in
                                 * weight_bytes; never stashed) */
    int first_op, last_op;      /* op range; -1 when hand-built */
    int tied_op;                /* the op holding its copy of the token
                                 * table where the copies are exchanged
                                 * (tied_bytes > 0): its gradient bucket
                                 * is reduced after the exchange; -1 */
    int model_stage;            /* stage of the plan this one copies */
    int state_tier;             /* where a pipeline stage keeps its
                                 * optimizer state (sim_add_stage_tiers):
                                 * 0 on the GPU, SIM_TIER_DRAM, SIM_TIER_NVME */
    double tier_bytes;          /* such a stage's step moves this each way
                                 * over PCIe: its gradient out, its new
                                 * weights back (all tensor-parallel ranks) */
    double cpu_opt_bytes;       /* its CPU step as traffic on the host's
                                 * memory: alone, cpu_opt_ns of it; 0: a
                                 * fixed cpu_opt_ns (the host's bandwidth
                                 * unknown) */
    int64_t task_ns;            /* the executor's own cost of each compute
                                 * task of the stage (prof_eff.task_ns and
                                 * op_task_ns for each of its ops), added
                                 * to each */
    int64_t opt_task_ns;        /* and of its optimizer step (one op) */
    int64_t tp_f_ns, tp_b_ns;   /* tensor-parallel collectives inside f_ns
                                 * and inside b_ns */
    int64_t tp_r_ns;            /* those inside r_ns (full recomputation
                                 * repeats the forward's) */
    int64_t tp_w_ns;            /* those inside w_ns (and ws_ns): a weight
                                 * gradient's own (sim_cost_opts.sp_exposed;
                                 * 0 otherwise) */
    double tied_bytes;          /* the stage's copy of a table tied across
                                 * stages (one tensor-parallel rank's
                                 * share x tp); 0: none, or one stage holds
                                 * every tied op */
    int tied_holder;            /* it holds such a copy (an offload
                                 * schedule keeps this where it clears
                                 * tied_bytes: one GPU holds the table) */
    double rel_bytes[2];        /* T5: its copies of the encoder's and the
                                 * decoder's relative-position tables,
                                 * which every stage holding one of the
                                 * stack's self-attentions reads (0: none,
                                 * or one stage holds them all) */
} sim_stage_cost;

/* A measured-timing override: an op's task time on a GPU type at a
 * microbatch size, keyed by signature (sim_op_signature). The cost model
 * uses a hit instead of its formula, before the GPU type's calibration
 * (prof_calib_op_ns), which is consulted the same way. */
typedef struct sim_measured {
    char (*key)[128];
    int64_t *ns;
    int n, cap;
} sim_measured;
void sim_measured_init(sim_measured *m);
void sim_measured_free(sim_measured *m);
void sim_measured_set(sim_measured *m, const char *key, int64_t ns);
/* -1 when absent. */
int64_t sim_measured_get(const sim_measured *m, const char *key);
/* "gpu|op-kind|kind|mbs|m,n,k,batch;..." for an op and task kind (F/B/W);
 * an op without GEMMs ends in "bBYTES" (forward bytes per sample). */
void sim_op_signature(const prof_gpu *g, const prof_op *op, int mbs,
                      sim_kind k, char *out, size_t n);
/* The same for an op whose math is in precision dt: a product in TF32
 * ends in "|tf32" (its own times); any other op is the fp32 kernel and
 * shares fp32's signature. */
void sim_op_signature_dt(const prof_gpu *g, const prof_op *op, int mbs,
                         sim_kind k, prof_dtype dt, char *out, size_t n);

/* Stages of the cost table are the plan's S stages replicated R times
 * (R = dp x pipelines per data-parallel rank, 2 for Chimera): stage
 * r*S + s is replica r of plan stage s. Replica r = q*Rb + b (q the data-
 * parallel rank, b the direction) runs on device q*pp + map(s), map the
 * plan's for b = 0 and mirrored (pp-1-map) for Chimera's upward pipeline.
 * A device is one tensor-parallel group: device d uses GPUs d*tp ..
 * d*tp+tp-1, so global GPU = (dp_rank*pp + pp_rank)*tp + tp_rank (tensor
 * parallelism inside a node, pipeline and data parallelism across). */
struct sim_costs {
    int n_stages, n_devices;    /* all replicas */
    int n_model_stages;         /* S: stages of one pipeline */
    int pp, dp, tp, replicas;   /* replicas R = dp * pipelines per rank */
    int recompute;              /* sim_recompute the stages' r_ns and
                                 * keep/ws bytes describe (built without
                                 * one: full, for schedules that recompute) */
    int sp;                     /* sequence parallelism */
    int zero;                   /* ZeRO stage 0..3 (FSDP: 3) */
    int fsdp;                   /* sim_fsdp */
    int whole_shards;           /* sim_cost_opts.whole_shards */
    int shard;                  /* data-parallel ranks a stage's sharded
                                 * state is split over: dp (ZeRO, FSDP
                                 * full), the ranks inside a server (FSDP
                                 * hybrid); 1 without sharding */
    int offload;                /* the offload schedule (sim_sched_offload)
                                 * whose tiers the costs price; 0: none */
    int tier;                   /* sim_tier the model states live in */
    /* Activations an offload schedule swaps out of the GPU in the forward
     * pass and back for the backward: the checkpoints (kept inputs) of
     * stages 0..swap_ckpt-1, and the whole activations of the last
     * swap_full stages, which then skip their recomputation (Fuyou);
     * act_tier (sim_tier) is where they wait, act_swap_bytes how much of
     * it an iteration swaps (swap_mb microbatches). */
    int swap_ckpt, swap_full, swap_mb, act_tier;
    double act_swap_bytes;
    int stage_tiers;            /* stages of a pipeline keeping their
                                 * optimizer state on a host tier
                                 * (sim_stage_cost.state_tier) */
    int n_drives;               /* NVMe drives the states stripe over */
    int *drive;                 /* their nodes in topo */
    double host_bytes, host_cap;/* host DRAM the plan holds, and has
                                 * (stage tiers: the fullest server's) */
    double host_staging;        /* of host_bytes, an offload schedule's
                                 * buffers on their way (weights and state
                                 * read from the drives, gradients copied
                                 * out): the most its window holds, which
                                 * sim_offload_tier_use follows in time */
    double tied_keep32;         /* Fuyou with a tied head: the fp32
                                 * table gradient of each holder but the
                                 * first stage (the head; a T5's decoder
                                 * embedding too), kept from its step (it
                                 * cannot step the table) to the first
                                 * stage's, which sums and steps it; 0:
                                 * none */
    double tied_table32;        /* the tied table's fp32 gradient where
                                 * two stages or more hold it (and it
                                 * trains); 0: none */
    int tied_holders;           /* the model stages holding a copy of
                                 * the tied table that trains, where two
                                 * or more do (else 0) */
    double nvme_bytes, nvme_cap;/* the same on the drives */
    sim_stage_cost *stage;
    /* with sim_cost_opts.op_times, each op's task times on its stage's
     * device, per microbatch (one tensor-parallel rank's share):
     * op_ns[3 * i + k], k a sim_kind of F, B, W; n_ops of them (else 0
     * and NULL) */
    int n_ops;
    double *op_ns;
    /* Gradient buckets (sim_cost_opts.grad_bucket), as PyTorch's DDP
     * forms them: the trained parameters of a model stage from its last
     * op back, a bucket closed at the op that fills it (the first at
     * most DDP's 1 MiB); model stage s's are bkt_off[s]..bkt_off[s+1]-1,
     * bucket b the ops bkt_lo[b]..(the one before's low op - 1, or the
     * stage's last), bkt_share[b] of the stage's gradient bytes. NULL:
     * one bucket per stage. bwd_done[2i] (fused backward, BW) and
     * [2i+1] (W): the share of its stage's backward task the ops from
     * the stage's last down to op i take (a bucket's ring starts then). */
    int *bkt_off, *bkt_lo;
    double *bkt_share, *bwd_done;
    double bkt_cap;             /* the largest cap a stage's buckets took:
                                 * the plan's, or a SIM_MAX_BUCKETS-th of
                                 * a stage's gradient where larger */
    int *stage_device;          /* n_stages */
    double *xfer_bytes;         /* [s*n_stages+t]: s's outputs read by t, per mb */
    const prof_topo *topo;      /* lent; NULL: communication is free */
    int *dev_gpu;               /* device -> GPU index in topo */
    double *dev_capacity;       /* bytes; 0 = unlimited */
    double *dev_peak_flops;     /* for MFU; 0 unknown */
    double samples_per_mb;      /* microbatch size */
    double tokens_per_sample;
    double model_flops_per_sample; /* forward + backward, no recompute */
    /* Folding: with fold > 1 the table holds the first group of
     * data-parallel replicas (one replica where it fills whole servers,
     * else the fewest that do; Chimera's two pipelines each) and stands
     * for `fold` such groups, n_devices * tp GPUs apart. The server graph
     * is symmetric under that shift (prof_topo_shift_symmetric), so every
     * group runs the same timeline and every copy of a transfer gets the
     * same max-min rate: the engine runs the first group's tasks; the
     * all-reduce step of its last ring member sends to the next group's
     * first, and the first member's receive stands for the one from the
     * previous group. A flow crosses, instead of its links,
     * their orbits under the shift: fold_rep[dl] stands for the orbit of
     * directed link dl, crossed fold_mult[dl] times by the flow's copies
     * for each time the flow crosses dl. 1: every replica explicit. */
    int fold;
    const int *fold_rep, *fold_mult; /* per directed link, lent by the
                                      * topology; NULL without fold */
};

/* Options of the cost model. */
typedef struct sim_cost_opts {
    int mbs;                    /* microbatch size (samples) */
    int dp, tp;                 /* data and tensor parallel widths; 0: 1 */
    int pipes;                  /* pipelines per data-parallel rank: 2 for
                                 * Chimera (sim_sched_pipes); 0: 1 */
    double state_bytes_per_param; /* weights+grads+optimizer; 0: 16 (Adam, mixed) */
    int recompute;              /* sim_recompute */
    int sp;                     /* sequence parallelism (Korthikanti et
                                 * al.; tp > 1): norms and dropouts split
                                 * over the tensor-parallel group along
                                 * the sequence, each all-reduce a
                                 * reduce-scatter and an all-gather */
    int zero;                   /* ZeRO stage 0..3 (sim_zero_check) */
    int fsdp;                   /* sim_fsdp: full or hybrid sharding */
    const sim_measured *measured; /* may be NULL */
    int op_times;               /* keep each op's task times
                                 * (sim_costs.op_ns: sim --ops); 0: the
                                 * stages' sums only */
    int offload;                /* an offload schedule (sim_sched_offload),
                                 * 0: none */
    int tier;                   /* sim_tier: where its states live */
    int swap_ckpt, swap_full;   /* activations it swaps (sim_costs) */
    int n_mb;                   /* microbatches of an iteration: how many
                                 * activations swap (offload only) */
    const unsigned char *state_tier; /* per plan stage, where it keeps its
                                 * optimizer state (sim_stage_cost); NULL:
                                 * every stage on its GPU */
    int sp_exposed;             /* sequence parallelism as sluice's
                                 * executor runs it: a column-parallel
                                 * input gathered again for the weight
                                 * gradient, replicated weights' gradients
                                 * summed each microbatch, both in the
                                 * W part (sim_stage_cost.tp_w_ns) and not
                                 * overlapped; 0: as Megatron-LM runs it */
    int whole_shards;           /* sharded (ZeRO-2, 3) as sluice's executor
                                 * runs it, not FSDP: a gather holds a
                                 * stage's whole weights, a microbatch's
                                 * whole gradient waits for its reduce-
                                 * scatter (sim_costs.whole_shards) */
    double grad_bucket;         /* the data-parallel all-reduce in
                                 * buckets of this many gradient bytes,
                                 * each started as the backward of its
                                 * last stage's microbatch has computed it
                                 * (sim_costs bkt_*); 0: one per stage,
                                 * after that backward; < 0:
                                 * sim_grad_bucket's */
    int fold;                   /* fold the data-parallel replicas where
                                 * the server graph allows it: the fewest
                                 * replicas that fill whole servers (one,
                                 * where a replica does) are simulated for
                                 * all of them, the cluster being symmetric
                                 * under a shift by that many servers; the
                                 * timeline is the same, the run smaller */
} sim_cost_opts;

/* What simulating a plan of n_stages stages on pp devices would hold
 * before it is built (replicas folded as sim_costs_build would fold them):
 * the tasks of its schedule and the bytes of cost table, schedule and
 * engine, an estimate within a small factor for n_mb microbatches and
 * n_minibatches minibatches. */
typedef struct sim_size {
    int simulated_replicas;     /* replicas (and pipelines) run explicitly */
    int fold;                   /* replicas each stands for */
    double tasks, bytes;
} sim_size;
sim_size sim_costs_size(const prof_topo *t, int n_stages, int pp,
                        const sim_cost_opts *o, int n_mb, int n_minibatches);
/* What one simulation may hold: the planner does not simulate a candidate
 * estimated beyond it, sim refuses such a plan up front. */
#define SIM_SIZE_BUDGET_BYTES (2.0 * 1024 * 1024 * 1024)

/* Builds costs from a model and topology for a partition: stage s holds
 * ops [first_op[s], last_op[s]] and runs on pipeline device
 * stage_device[s] (0..n_devices-1, n_devices = pp); replicas and device
 * layout as above. With tp > 1 each layer is split Megatron-style: GEMMs,
 * attention heads, the MLP activation, vocabulary-parallel embedding, head
 * and loss run 1/tp of the FLOPs and hold 1/tp of the weights; norms and
 * residual adds are replicated; activations kept for backward are 1/tp
 * except the inputs of column-parallel GEMMs (replicated, as Megatron
 * without sequence parallelism). Each row-parallel GEMM (attention output,
 * MLP down) and the embedding end with an all-reduce of the activation in
 * the forward, each column-parallel GEMM's input gradient is all-reduced
 * in the backward: a ring over the group's GPUs at the max-min rates of
 * its flows on the server graph, added to F and B. Errors: more GPUs than
 * the topology has, a tensor-parallel group across servers. topo is lent
 * and must outlive the costs. */
sim_costs *sim_costs_build(const prof_model *m, const prof_topo *t,
                           int n_stages, const int *first_op,
                           const int *last_op, const int *stage_device,
                           int n_devices, const sim_cost_opts *o,
                           util_err *e);
/* Expands costs built for one pipeline (replicas 1) to dp data-parallel
 * ranks of `pipes` pipelines (layout above); c is changed in place. */
void sim_costs_replicate(sim_costs *c, int dp, int pipes);
/* Uniform hand-made costs for tests and benches: n_stages stages, each
 * F/B/W long, one microbatch moving xfer_bytes to the next stage (chain). */
sim_costs *sim_costs_uniform(int n_stages, int n_devices,
                             const int *stage_device, int64_t f_ns,
                             int64_t b_ns, int64_t w_ns, double xfer_bytes,
                             double act_bytes);
void sim_costs_free(sim_costs *c);
/* Time of one op's task (F, B or W) at microbatch size mbs on GPU g with
 * model dtype dt: max(compute, memory) + launches (or a measured value). */
int64_t sim_op_ns(const prof_gpu *g, prof_dtype dt, const prof_op *op,
                  int mbs, sim_kind k, const sim_measured *meas);
/* The tensor-parallel all-reduces op i of m ends with, per sample:
 * bytes of its forward's (after row-parallel GEMMs and the embedding) and
 * its backward's (of the input gradient of column-parallel GEMMs); 0 when
 * none. Each costs 2(t-1) ring steps of bytes/t over t ranks. */
/* A ring collective of `steps` steps over t ranks, each step sending
 * bytes/t at bw bytes/s after lat_ns, plus base_ns once (NCCL's launch and
 * synchronisation): base + steps (lat + bytes/(t bw)), ns rounded; 0 when
 * t <= 1 or nothing moves. An all-reduce is 2(t-1) steps, a
 * reduce-scatter or an all-gather t-1. */
double sim_ring_coll_ns(double base_ns, double lat_ns, double bw, int t,
                        double bytes, int steps);
void sim_tp_allreduces(const prof_model *m, int i, double *fwd_bytes,
                       double *bwd_bytes);
/* What one of tp tensor-parallel ranks runs of an op, Megatron-style
 * (sim_costs_build's split without sequence parallelism): its FLOPs,
 * bytes and GEMMs. */
prof_op sim_op_tp(const prof_op *op, int tp);
/* The most a GEMM of precision dt reaches on g, as a share of the peak,
 * where its rows are not 16 bytes aligned (prof_eff.unaligned); 1 where
 * they are, or g does not model it. *width (may be NULL) gets its width
 * or depth that is least aligned, 0 where none is short. */
double sim_gemm_unaligned_cap(const prof_gpu *g, prof_dtype dt,
                              const prof_gemm *q, long *width);
/* Bytes op i of m keeps for its backward, per sample, on one of tp
 * tensor-parallel ranks (sp: sequence parallel). Without sequence
 * parallelism the inputs of norms and of column-parallel GEMMs and the
 * dropout masks after row-parallel GEMMs are whole on every rank, the
 * rest split: s*b*h*(10 + 24/t) + 5*a*s*s*b/t bytes a GPT layer; with it
 * everything is split: s*b*h*34/t + 5*a*s*s*b/t (Korthikanti et al.,
 * Table 2). */
double sim_op_act_rank(const prof_model *m, int i, int tp, int sp);
/* Whether sequence parallelism over tp ranks splits each of m's
 * sequences (a T5's encoder's and decoder's) evenly, as Megatron-LM
 * requires of it. */
int sim_sp_splits(const prof_model *m, int tp);
/* Whether tp splits m's attention heads and its key and value heads, as
 * Megatron-LM splits them over the tensor-parallel GPUs; -1 (code 2) with
 * a message naming `what` (the option or field: "--tp", "tp") where not. */
int sim_tp_heads_check(const prof_model *m, int tp, const char *what,
                       util_err *e);
/* Whether op i of m runs again before its backward under recomputation
 * rc (sim_recompute): full, every op of a transformer layer (a layer with
 * attention); selective, the attention core's unfused ops (fused
 * attention already recomputes its scores). */
int sim_op_recomputed(const prof_model *m, int i, int rc);
/* Activation bytes of ops [first, last] per sample on one of tp ranks:
 * act, what the forward keeps without recomputation; keep, fwd_ws and
 * rec_ws as sim_stage_cost's keep_bytes, fwd_ws_bytes and rec_ws_bytes
 * under rc (none: as full has them). The one account the simulator's
 * stage costs and the planner's partitions share. */
typedef struct sim_act {
    double act, keep, fwd_ws, rec_ws;
} sim_act;
sim_act sim_act_range(const prof_model *m, int first, int last, int tp,
                      int sp, int rc);
/* The efficiency model's figure alone (no measured value), unrounded:
 * what calibration fits, with g's figures as given (sim_op_ns gives
 * prof_gpu_at's for dt). */
double sim_op_model_ns(const prof_gpu *g, prof_dtype dt, const prof_op *op,
                       int mbs, sim_kind k);
/* An optimizer step over `params` parameters (AdamW: 28 bytes moved per
 * parameter, memory-bound), ns. */
double sim_opt_model_ns(const prof_gpu *g, double params);
/* The same step on the host of GPU g (AdamW on the CPU, as ZeRO-Offload
 * and Fuyou run it): the 28 bytes a parameter over the bandwidth of the
 * DRAM nearest the GPU (20 GB/s where the server file has none), ns. */
double sim_cpu_opt_ns(const prof_topo *t, int g, double params);
/* A pass of the host's over `bytes` (read and written: a gradient norm, a
 * sum of copies), at the rate its AdamW streams its 28 bytes a
 * parameter, ns. */
double sim_cpu_pass_ns(const prof_topo *t, int g, double bytes);

/* ===================================================================== *
 * Schedules                                                             *
 * ===================================================================== */

typedef enum {
    SIM_SCHED_GPIPE, SIM_SCHED_1F1B, SIM_SCHED_2BW, SIM_SCHED_MIXED,
    SIM_SCHED_MIXED_1F1B, SIM_SCHED_MIXED_GPIPE, SIM_SCHED_WAVE,
    SIM_SCHED_INTERLEAVED, SIM_SCHED_ZBH1, SIM_SCHED_ZBV, SIM_SCHED_CHIMERA,
    SIM_SCHED_DUALPIPEV, SIM_SCHED_ZBH2, SIM_SCHED_ZB2P,
    SIM_SCHED_ZERO_OFFLOAD, SIM_SCHED_ZERO_INFINITY, SIM_SCHED_FUYOU,
    SIM_SCHED_FILE,     /* an order read with --schedule-file */
    SIM_SCHED_COUNT
} sim_sched;

/* The schedules the planner searches (the others are simulated on
 * request). */
int sim_sched_plannable(sim_sched s);
/* Whether a schedule offloads model states to host tiers (ZeRO-Offload,
 * ZeRO-Infinity, Fuyou). */
int sim_sched_offload(sim_sched s);
/* Pipelines per data-parallel rank: 2 for Chimera, else 1. */
int sim_sched_pipes(sim_sched s);
/* Minibatches an asynchronous schedule simulates by default, so that the
 * measured window lies past the pipeline's fill: 4 + ceil(2*depth/m),
 * depth = stages (4p for Mixed-pipe, whose stages are finer). 1 for
 * schedules with a flush. */
int sim_default_minibatches(sim_sched s, int pp, int n_stages, int n_mb);

const char *sim_sched_name(sim_sched s);
/* NULL-terminated list of names, index = sim_sched. */
const char *const *sim_sched_names(void);
/* The schedule a user names: one of sim_sched_names, or an alias
 * ("mixed-pipe" for mixed); -1 when none. */
int sim_sched_parse(const char *name);
/* The schedule in a few words, for --help (lent). */
const char *sim_sched_about(sim_sched s);
/* The names of the built-in schedules (all but "file"), comma-separated,
 * into buf; returns buf. */
char *sim_sched_list(char *buf, size_t n);
/* Prints one line per built-in schedule, "INDENT name  about". */
void sim_sched_help(FILE *f, const char *indent);
/* Whether the schedule runs without flushes (steady state is measured
 * over several minibatches). */
int sim_sched_async(sim_sched s);

typedef struct sim_sched_opts {
    sim_sched sched;
    int pp;             /* devices of the pipeline */
    int n_stages;       /* = pp, except mixed (>= pp) and wave (2*waves*pp) */
    int n_mb;           /* microbatches per minibatch */
    int recompute;      /* sim_recompute: not none emits a recompute
                         * before each backward */
    int waves;          /* wave: W >= 1 */
    int chunks;         /* interleaved: v chunks per device (n_stages = v*p);
                         * 0: n_stages / pp */
    int dp;             /* data-parallel replicas of the pipeline; 0: 1 */
    int split_bw;       /* emit B and W separately (zero-bubble family) */
    int n_minibatches;  /* async schedules: minibatches simulated (>= 3;
                         * the first and last are start-up and drain) */
    int no_dry_run;     /* validate the rules only, not by a dry run: for
                         * an IR the engine then runs to its end, which
                         * finds a deadlock itself (the planner's) */
} sim_sched_opts;

/* Checks the options against the schedule (microbatch count, stage count,
 * mapping); the message says which value and why. */
int sim_sched_check(const sim_sched_opts *o, util_err *e);
/* The stage -> device map the schedule uses (n_stages entries): identity
 * for one stage per device, zig-zag for the wave and ZB-V, looped (s mod
 * pp) for interleaved and Mixed-pipe, whose plans normally carry their
 * own map. */
void sim_sched_map(const sim_sched_opts *o, int *stage_device);
/* Generates, lowers and validates the IR. */
sim_ir *sim_schedule(const sim_sched_opts *o, const sim_costs *c,
                     util_err *e);

/* The most stage-microbatch pairs (minibatches x microbatches x stages of
 * every replica simulated) one schedule may hold: about 1 GiB and a few
 * seconds. Larger ones are refused with the estimate (exit code 2). */
#define SIM_MAX_WORK (1 << 20)
/* The steps of sim_schedule, for orders from elsewhere: an empty IR for
 * the options and costs (checks they agree, and the size), then, once the
 * order of data-parallel rank 0 is in, copies for the other ranks,
 * optimizer steps, lowering, all-reduces, freezing and validation. */
sim_ir *sim_schedule_new(const sim_sched_opts *o, const sim_costs *c,
                         util_err *e);
int sim_schedule_finish(sim_ir *ir, const sim_costs *c, util_err *e);

/* Generators (compute order only; sim_schedule lowers them). */
void sim_gen_gpipe(sim_ir *ir, const sim_sched_opts *o);
void sim_gen_1f1b(sim_ir *ir, const sim_sched_opts *o);
/* 1F1B order over `total` microbatches g = minibatch*m + mb, no flush. */
void sim_gen_1f1b_n(sim_ir *ir, const sim_sched_opts *o, int total);
void sim_gen_2bw(sim_ir *ir, const sim_sched_opts *o);
int sim_gen_mixed(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                  util_err *e);
int sim_gen_wave(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                 util_err *e);
/* Megatron-LM's interleaved 1F1B (PyTorch's rounds when m is not a
 * multiple of p; with m = p, the better of Megatron's and PyTorch's
 * warm-up, simulated); ZB-H1; ZB-V (the best of PyTorch's order and list
 * scheduling, simulated); Chimera (list-scheduled). */
int sim_gen_interleaved(sim_ir *ir, const sim_sched_opts *o,
                        const sim_costs *c, util_err *e);
int sim_gen_zbh1(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                 util_err *e);
int sim_gen_zbv(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                util_err *e);
/* ZB-H2 (Qi et al.'s handcrafted schedule with up to 2p-1 microbatches in
 * flight) and ZB-2P (their automatic heuristic under twice 1F1B's
 * activation memory, the best of its eight hyperparameter settings as
 * this engine runs them): one stage per device, B and W split. */
int sim_gen_zbh2(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                 util_err *e);
int sim_gen_zb2p(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                 util_err *e);
int sim_gen_chimera(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                    util_err *e);
/* DualPipeV (DeepSeek-V3's DualPipe cut in half, as PyTorch's
 * ScheduleDualPipeV orders it): two stages per device in a V. */
void sim_gen_dualpipev(sim_ir *ir, const sim_sched_opts *o);

/* Data-parallel all-reduce of every stage's gradients across its
 * replicas (sim_costs): a ring, reduce-scatter then all-gather, 2(R-1)
 * steps of bytes/R per GPU, each a send/receive pair on the collective
 * stream over the server graph (lanes: one ring per tensor-parallel
 * rank). A stage's ring starts when its last backward of the minibatch
 * ends on each replica (one bucket per stage, so it overlaps the
 * backward of earlier stages) and its optimizer step waits for it. Runs
 * after sim_lower; does nothing with one replica. */
void sim_add_allreduce(sim_ir *ir, const sim_costs *c);
/* NCCL's cost model of its ring (Simple protocol; src/graph/tuning.cc of
 * NCCL 2.18 and later): a call takes a base latency, each step of the
 * ring a hop's (its hwLat): between GPUs of a server over NVLink or PCIe,
 * or between servers over the network. */
#define NCCL_BASE_NS 8400.0
#define NCCL_STEP_NVLINK_NS 3400.0
#define NCCL_STEP_PCIE_NS 5700.0
#define NCCL_STEP_NET_NS 14000.0
/* What a step of a ring over R GPUs on `nodes` servers takes beyond its
 * bytes, for a collective of `steps` steps (R - 1 for a reduce-scatter or
 * an all-gather, 2(R - 1) for an all-reduce) standing for `calls` NCCL
 * calls: NCCL's latency of the call shared evenly over its steps, times
 * the calls. A reduce-scatter's or gather's call: base + (nodes - 1) hops
 * between servers + the other steps' hops inside them (intra_ns each);
 * an all-reduce's: 2 nodes hops between servers where there are several
 * (at most its steps) and the rest of its steps inside, the whole times
 * NCCL's "plateau" factor across servers (1.4 from Ampere on, 1.9
 * before: pre_ampere). */
double sim_ring_step_ns(int R, int nodes, double intra_ns, int steps,
                        double calls, int pre_ampere);
/* Sharded plans (sim_costs.zero > 0; sim_add_allreduce calls it): the
 * gradient all-reduce becomes a reduce-scatter over the shard group (half
 * a ring: H-1 steps of 1/H of the stage's bytes), after the stage's last
 * backward (ZeRO-1) or every microbatch's (2, 3); the optimizer step
 * waits for it; ZeRO-1 and 2 all-gather the updated weights after it,
 * ZeRO-3 gathers the parameters before every forward and backward (the
 * recompute's, where there is one), the gather of the compute task after
 * next starting when the current one ends (prefetch), the gathered bytes
 * held from the gather's start to the end of the compute using them.
 * Hybrid sharding all-reduces each reduced shard across servers. Per
 * step and GPU: 2(H-1)/H of the stage's bytes for stages 1 and 2 (an
 * all-reduce's), 3(H-1)/H for stage 3 with one microbatch (ZeRO paper,
 * section 7). */
void sim_add_sharded(sim_ir *ir, const sim_costs *c);
/* A reduce-scatter or all-gather of `bytes` of plan stage s over every
 * replica, unfolded: half a ring, R-1 steps of 1/R of the bytes from each
 * member to the next (a step's send after the member's receive of the
 * step before), member r's first after dep[r] (-1: nothing); last_send[r]
 * and last_recv[r] get its last send and receive. */
void sim_ring_all(sim_ir *ir, const sim_costs *c, int s, sim_coll coll,
                  double bytes, const int *dep, int *last_send,
                  int *last_recv);

/* Offloaded training (Rajbhandari et al., ZeRO-Offload, ATC'21 and
 * ZeRO-Infinity, SC'21; Liao et al., Fuyou, arXiv 2403.06504): the
 * plan's stages are layer groups, all on one GPU (replicated on each of
 * dp GPUs of one server, each rank over its share of the batch), all
 * recomputed from their inputs when the plan recomputes. ZeRO-Offload and ZeRO-Infinity
 * run the microbatches one after the other through every stage (gradient
 * accumulation); Fuyou runs each stage over all microbatches before the
 * next (its layer-by-layer sweep over the batch). Compute order only;
 * sim_add_offload adds what moves. */
int sim_gen_offload(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                    util_err *e);
/* The tiers' tasks of an offload schedule (c->offload), after lowering.
 * A run of compute tasks of one stage is a group; its weights reach the
 * GPU (SWAP_IN on copy-in, after an NVMe read when they live there) while
 * the group before it computes (two groups' weights at most on the GPU:
 * a fetch waits for the end of the group two back; a drive read for the
 * group three back) and are held until the group ends; ZeRO-Offload
 * keeps its fp16 weights on the GPU instead and copies the updated ones
 * back after each stage's CPU step. Gradients go to the host (SWAP_OUT
 * on copy-out): ZeRO after every backward, Fuyou after a stage's last
 * (accumulated on the GPU over the microbatches), each held on the GPU
 * from its backward's start to the copy's end. The host's CPU steps the
 * optimizer one stage at a time (SIM_CPU_OPT on the host stream): ZeRO
 * after the whole backward pass (the gradient norm needs every gradient),
 * from the deepest stage up; Fuyou as soon as the stage's gradients
 * arrive, overlapped with the backward of the stages before it. On the
 * NVMe tier the step reads the stage's optimizer state from the drives
 * first and writes it back, with the new fp16 weights, after. With D
 * data-parallel ranks, as DeepSpeed runs ZeRO-Offload and ZeRO-Infinity
 * on several GPUs: each rank fetches its 1/D of a group's weights (read
 * from the drives by it) and the ranks all-gather the rest between the
 * GPUs (a ring over the server graph, through the host where GPUs lack
 * peer-to-peer); each gradient is reduce-scattered between them and each
 * rank copies its reduced 1/D out; each rank's CPU step covers its 1/D of
 * the parameters and state, the steps of all ranks sharing the host's
 * memory bandwidth (sim_task bytes); ZeRO-Offload's updated shards go up
 * to their ranks and are all-gathered. */
void sim_add_offload(sim_ir *ir, const sim_costs *c);
/* The most data-parallel ranks of an offload plan (one server's GPUs). */
#define SIM_OFL_MAX_RANKS 64
/* Prices the tiers of an offload schedule (c->offload set) as o asks:
 * the tier (auto resolved), the drives of the GPU's server, each stage's
 * CPU step, the activations swapped and where they wait (host DRAM where
 * it holds them beside the rest, else the drives), and what host DRAM
 * and the drives hold against what they have; an error (code 2) says
 * which tier lacks how much, or which swap cannot be. sim_costs_build
 * calls it. */
int sim_offload_costs(sim_costs *c, const prof_topo *t,
                      const sim_cost_opts *o, util_err *e);

/* Prices the stage tiers of a pipeline (some sim_stage_cost.state_tier
 * set; after replication): each such stage's CPU step (AdamW of what it
 * trains, on the host of its GPU) and what moves; what each server's
 * host DRAM and drives hold against what they have. An error (code 2)
 * says which server's tier lacks how much. sim_costs_build calls it. */
int sim_stage_tier_costs(sim_costs *c, const prof_topo *t, util_err *e);
/* The tier tasks of such stages, after lowering and the data-parallel
 * reduction: before each step of a stage with its state on the host, the
 * gradient goes to the host (SWAP_OUT, after what the step waited for),
 * the drives give the state (NVMe tier), the CPU steps it (SIM_CPU_OPT
 * on the device's host stream, as traffic on the host's memory: steps of
 * GPUs on one server share it), the drives take the state back, and the
 * new weights come to the GPU (SWAP_IN), which the step (then free on
 * the GPU) waits for. The tasks sit in the device's list just before
 * the step. */
void sim_add_stage_tiers(sim_ir *ir, const sim_costs *c);

/* Tied embeddings (the token table shared with the LM head, or T5's
 * decoder embedding), and a T5's relative-position tables, one per stack,
 * which every stage holding one of the stack's self-attentions keeps
 * (Megatron-LM and NeMo replicate them over pipeline stages alike): for
 * each table, every stage holding a copy (tied_bytes, rel_bytes > 0)
 * sends its gradient of the table to every other holder of its replica
 * once its
 * last backward of the minibatch ends; each adds the copies in stage
 * order, so all hold the same sum, as a single device's one table gets.
 * Sends sit after that backward on the send stream (comm SIM_COMM_EMB);
 * the stage's optimizer step, or its data-parallel ring's first step,
 * waits for the receives. Schedules without a flush (several
 * minibatches) update each copy with its own gradient instead: there a
 * stage updates whenever its own backward completes a minibatch, and
 * waiting for the other copy would stall it. Runs after sim_lower, before
 * sim_add_allreduce. */
void sim_add_tied(sim_ir *ir, const sim_costs *c);

/* ===================================================================== *
 * Schedules from outside: PyTorch's pipelining CSV                      *
 * ===================================================================== */

/* Reads the text of torch.distributed.pipelining's schedule CSV (one rank
 * per line, actions such as 0F0, 1I3, 1W3, 2B1: stage, F / I (input
 * backward) / W (weight backward) / B (full backward), microbatch; empty
 * fields are idle slots; overlapped pairs (0F7;7B3)OVERLAP_F_B run one
 * after the other; the runtime's communication, FSDP and gradient-
 * reduction actions (SEND_F, RECV_B, WAIT_SEND_F, UNSHARD, REDUCE_GRAD,
 * ...) are checked against the transfers the lowering derives and
 * skipped) into the compute order of an IR for o (stages n_stages, pp
 * ranks, n_mb microbatches; stage s runs where map says). Errors name the
 * line, rank and action: a stage on the wrong rank, out-of-range numbers,
 * duplicates, a missing microbatch, B before its F, W without I, a
 * transfer no stage makes, a rank that waits forever. Exit code 2. */
sim_ir *sim_schedule_file(const char *path, const sim_sched_opts *o,
                          const sim_costs *c, util_err *e);
/* Writes the compute order of replica 0 of an IR in that form. */
void sim_schedule_emit(const sim_ir *ir, FILE *f);

/* List scheduling with estimated times (stage costs, transfers at their
 * route's bottleneck bandwidth, no sharing): each device, when free, runs
 * the best ready task under a policy; inflight_cap[s] bounds the F's of
 * stage s started but not yet backed. Forwards-first with caps p-i on a
 * chain of one stage per device is 1F1B; with caps m it is GPipe. Used to
 * order devices that hold several stages (Mixed-pipe, wave, ZB-V,
 * Chimera); with B and W split, W ranks last, so W's fill the gaps. Among
 * forwards, the deepest stage of the model goes first (model_stage:
 * Chimera's two pipelines compare by depth). The result
 * is an order the list scheduler executed, so it cannot deadlock. */
/* The list scheduler's estimate of a transfer from stage s to stage t:
 * its route's latency plus the bytes over the bottleneck bandwidth,
 * unshared; 0 on one device or without a topology. */
int64_t sim_xfer_est_ns(const sim_costs *c, int s, int t);
typedef enum { SIM_POL_FFIRST, SIM_POL_BFIRST } sim_policy;
int sim_order_greedy(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                     sim_policy pol, const int *inflight_cap, util_err *e);
/* Several orders for one schedule, the best kept: gen appends candidate k
 * (0..n-1) to an empty IR for o and returns 0, or -1 when k has no order
 * for these options. Each is lowered and run in the engine, and the one
 * that fits in memory, then runs fastest, then holds the least memory
 * (highest device peak, then the sum) wins; ties go to the lower k. Its
 * compute order is appended to ir. With n = 1 nothing is simulated.
 * Errors: the first candidate's when none has an order. */
typedef int (*sim_order_gen)(sim_ir *ir, const sim_sched_opts *o,
                             const sim_costs *c, int k, util_err *e);
int sim_order_best(sim_ir *ir, const sim_sched_opts *o, const sim_costs *c,
                   int n, sim_order_gen gen, util_err *e);
/* Async schedules: inserts an optimizer step per stage after its m-th
 * backward of each minibatch and numbers the weight versions (version v:
 * the weights after v steps of the stage; see sim_ir.version_delay).
 * Operates on the compute order of ir (before lowering). */
void sim_add_async_updates(sim_ir *ir);

/* ===================================================================== *
 * Plans                                                               *
 * ===================================================================== */

typedef struct sim_plan {
    char model[256];        /* zoo name or spec file */
    char hw[256];           /* "rtx2080ti x8" or a server file */
    sim_sched sched;
    int pp, dp, tp;         /* layout: global GPU = (dp_rank*pp + pp_rank)*tp
                             * + tp_rank ("dp-pp-tp") */
    int chunks;             /* interleaved: chunks per device (stages/pp) */
    int gpus_used;          /* 0: every GPU of the server (dp*pp*tp of
                             * them); else dp*pp*tp, fewer than the server
                             * has: a pipeline on part of it, said so */
    char sched_file[256];   /* order read from a PyTorch schedule CSV ("":
                             * generated); sched gives the stage mapping */
    int mbs, n_mb;
    int recompute;          /* sim_recompute */
    int sp;                 /* sequence parallelism (tp > 1) */
    int zero;               /* ZeRO stage 0..3 */
    int fsdp;               /* sim_fsdp */
    prof_finetune ft;       /* which parameters train (full as default) */
    int math;               /* the precision it trains in instead of the
                             * model spec's (--dtype; prof_math_parse), 0:
                             * the spec's */
    int seq_len;            /* tokens a sample (--seq), 0: the spec's */
    int flash;              /* attention fused (1) or not (-1) instead
                             * of as the spec says (0): --flash-attn,
                             * prof_spec_set_flash */
    int waves;
    double grad_bucket;     /* the data-parallel all-reduce in buckets of
                             * this many gradient bytes, overlapping the
                             * backward (sim_cost_opts.grad_bucket); 0:
                             * one per stage, after it;
                             * SIM_GRAD_BUCKET_AUTO: sim_grad_bucket */
    int tier;               /* offload schedules: sim_tier */
    int swap_ckpt, swap_full; /* and the activations they swap (sim_costs) */
    unsigned char *state_tier; /* per stage: where the pipeline stage keeps
                             * its optimizer state (0 its GPU, SIM_TIER_DRAM,
                             * SIM_TIER_NVME; sim_add_stage_tiers) */
    int n_minibatches;      /* 0: sim_default_minibatches */
    double state_bytes_per_param;
    int n_stages;
    int *first_op, *last_op;/* per stage op range (inclusive) */
    int *stage_device;
    /* names of each stage's first and last op as the plan file gives
     * them ("" when absent); checked against the model */
    char (*from_op)[48], (*to_op)[48];
    /* checksums of the model's and the server's files as the plan was
     * made ("" when a zoo name or template, or not kept) */
    char model_sum[17], hw_sum[17];
} sim_plan;

/* PyTorch DDP's bucket_cap_mb: 25 MiB, the gradient bucket on GPUs */
#define SIM_GRAD_BUCKET_DDP (25.0 * 1024 * 1024)
/* sim_plan.grad_bucket's default: DDP's on GPUs; on CPU devices one
 * all-reduce a stage after its backward, since a CPU device has no copy
 * engine of its own: a ring step's copies and sums take the cores the
 * backward computes on, so overlapping them gains nothing (sim_grad_bucket) */
#define SIM_GRAD_BUCKET_AUTO (-1.0)
/* A stage's gradient buckets at most (its bucket grows to a 32nd of its
 * gradient where the plan's is smaller): more, smaller ones add a
 * collective's latency each for little overlap, and tasks to simulate */
#define SIM_MAX_BUCKETS 32
/* The bucket a plan's grad_bucket means on server t. */
double sim_grad_bucket(double grad_bucket, const prof_topo *t);
/* Whether costs c all-reduce gradients over data-parallel replicas
 * (unsharded, the states on the devices): what --grad-bucket shapes. */
int sim_costs_allreduce(const sim_costs *c);

/* Whether the model's or the server's file differs from what the plan
 * was made with (its checksum); *what names the file (for a note: the
 * plan's cuts and batch were chosen for the file as it was). */
int sim_plan_files_changed(const sim_plan *p, char *what, size_t n);

/* Where an offloaded plan keeps its model states: host DRAM or the
 * server's NVMe drives. Auto: DRAM for ZeRO-Offload, the drives for
 * ZeRO-Infinity and Fuyou where the server has any. */
typedef enum {
    SIM_TIER_AUTO = 0, SIM_TIER_DRAM, SIM_TIER_NVME, SIM_TIER_COUNT
} sim_tier;
const char *sim_tier_name(int t);      /* "auto", "dram", "nvme" */
int sim_tier_parse(const char *s);     /* -1 when none */
/* Marks e's error as a host tier's capacity (SIM_TIER_DRAM or
 * SIM_TIER_NVME) lacking, which more --host-mem or drives would give, as
 * opposed to a GPU's (util_err.lack): `need` bytes where a server has
 * `have` (util_err.lack_by: need over have, a GiB at least, as the
 * planner scales a host). Returns -1. */
int sim_err_lacks(util_err *e, int tier, double need, double have);

/* A pipeline stage's optimizer state on a host tier, as DeepSpeed runs
 * ZeRO-Offload's optimizer inside a pipeline: the stage's fp16 weights
 * and gradients stay on its GPU, its fp32 master weights and Adam moments
 * live in host DRAM or on the server's drives, and its step runs on the
 * host's CPU. Names: "gpu" (0), "dram", "nvme". */
const char *sim_state_tier_name(int t);
int sim_state_tier_parse(const char *s);   /* -1 when none */
/* "T" (every stage) or "T0,T1,..." (one per stage) into out[n_stages];
 * the message names the value and says what was expected. */
int sim_state_tiers_parse(const char *s, int n_stages, unsigned char *out,
                          util_err *e);
/* Whether any stage of p keeps its optimizer state off its GPU. */
int sim_plan_tiered(const sim_plan *p);
/* "gpu,dram,..." for p's stages into buf. */
char *sim_state_tiers_str(const sim_plan *p, char *buf, size_t n);

/* Chooses the activations offload plan p swaps (p->swap_ckpt,
 * p->swap_full) by simulating it on its costs c: the fewest checkpoints
 * that let the GPU hold the run (a binary search), then, under Fuyou, how
 * many stages swap their whole activations instead of recomputing them
 * (a ternary search over the iteration, convex in it as Fuyou's paper
 * finds). c is left priced for the choice. Where nothing fits, every
 * checkpoint swaps and the caller's run shows the overflow. Returns 0, or
 * -1 when a simulation fails. */
int sim_offload_swap_search(sim_plan *p, sim_costs *c, const prof_topo *t,
                            util_err *e);
/* "K" or "K:J" (J 0 when left out) into *ckpt and *full; an error names
 * the option --act-swap. */
int sim_swap_parse(const char *s, int *ckpt, int *full, util_err *e);

/* Whether sharding applies to a plan: zero 0..3, FSDP with zero 0 or 3,
 * data parallelism (dp >= 2: ZeRO shards over the data-parallel group),
 * a schedule with a flush and one pipeline per rank (weight stashing and
 * Chimera's two replicas are not sharded). The message says which value
 * and why (exit code 2). */
int sim_zero_check(int zero, int fsdp, int dp, sim_sched s, util_err *e);

/* The model a plan trains, as it runs on topology t: loaded, rebuilt for
 * CPU devices (prof_model_for_topo), its fine-tuning mode applied. NULL
 * on error (the message names the model or the mode). */
prof_model *sim_plan_model(const sim_plan *p, const prof_topo *t,
                           util_err *e);
/* The same, errors of a plan file's model or fine-tuning mode naming the
 * file, the field's line and the field (file NULL: as sim_plan_model). */
prof_model *sim_plan_model_file(const sim_plan *p, const prof_topo *t,
                                const char *file, util_err *e);
/* Prefixes e with "FILE:LINE:COL: field 'FIELD'" (the field's place in
 * the plan file, where found); returns -1. */
int sim_plan_field_err(util_err *e, const char *file, const char *field);
/* Prefixes e, an error of sim_costs_build for plan p on t, with the plan
 * file: with field 'hw' (sim_plan_field_err) where the server lacks the
 * host DRAM or drives the plan keeps states on (util_err.lack, or no
 * drive at all), else with the file alone; returns -1. */
int sim_plan_costs_err(const sim_plan *p, const prof_topo *t,
                       const char *file, util_err *e);

void sim_plan_init(sim_plan *p);
void sim_plan_free(sim_plan *p);
/* Sets n_stages and allocates the per-stage arrays (zeroed). */
void sim_plan_stages(sim_plan *p, int n_stages);
/* Loads a plan file; errors are FILE:LINE:COL: field '...': why. */
int sim_plan_load(const char *path, sim_plan *p, util_err *e);
/* The schedule and cost options a plan stands for (minibatches: the
 * plan's, else the schedule's default). */
sim_sched_opts sim_plan_sched_opts(const sim_plan *p);
sim_cost_opts sim_plan_cost_opts(const sim_plan *p);
/* Checks a plan against its model (stages cover the ops in order, devices
 * in range, schedule constraints) and its GPUs: dp*pp*tp GPUs, exactly as
 * many as the topology has, or fewer when the plan says so in gpus_used
 * (dp and tp 1 only). */
/* The GPUs (devices, workers) a plan runs on: dp x pp x tp. */
long sim_plan_gpus(const sim_plan *p);
int sim_plan_check(const sim_plan *p, const prof_model *m, int n_gpus,
                   util_err *e);
/* The same, its messages counting in unit (prof_topo_unit: "GPU" or
 * "device"); field (n bytes) gets the plan file's field an error is
 * about ("stages[2].ops", "tp"; "" when none), for sim_plan_field_err. */
int sim_plan_check_at(const sim_plan *p, const prof_model *m, int n_gpus,
                      const char *unit, char *field, size_t n, util_err *e);
/* Checks a plan's tensor parallelism against t's servers (its errors are
 * the tp field's). */
int sim_plan_check_topo(const sim_plan *p, const prof_topo *t, util_err *e);
/* The plan's paths (model, hw, schedule file) as JSON takes them: valid
 * UTF-8, else an error (exit code 2) naming the path. */
int sim_plan_paths_utf8(const sim_plan *p, util_err *e);
json_t *sim_plan_json(const sim_plan *p, const prof_model *m);
/* Writes the plan file (util_write_atomic); paths as sim_plan_paths_utf8
 * requires. */
int sim_plan_save(const char *path, const sim_plan *p, const prof_model *m,
                  util_err *e);

/* Partitions: stage op ranges for n stages. even: equal layer counts;
 * balanced: cuts between any ops minimising the slowest stage's F+B+W on
 * GPU g; list: layers per stage, "4,4,5,3". */
int sim_partition_even(const prof_model *m, int n, int *first, int *last,
                       util_err *e);
int sim_partition_balanced(const prof_model *m, const prof_gpu *g, int mbs,
                           int n, int *first, int *last, util_err *e);
int sim_partition_list(const prof_model *m, const char *list, int n,
                       int *first, int *last, util_err *e);

#endif
