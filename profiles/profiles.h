/* profiles: what the hardware is and what the model is. GPU types come from
 * a JSON catalog (profiles/hw/), servers are graphs of GPUs, switches,
 * sockets, memories, drives and NICs joined by full-duplex links; a model is
 * a compact spec (profiles/models/, or a Hugging Face config.json) expanded
 * into a DAG of ops with per-sample costs. All units are SI (bytes, bytes/s,
 * FLOP, FLOP/s, ns). Ownership: *_new/_load return objects the caller frees
 * with the matching *_free; getters lend. Built-in JSON files are compiled
 * into the binary, so sluice runs from any folder. */
#ifndef SLUICE_PROFILES_H
#define SLUICE_PROFILES_H

#include "util/util.h"

/* ===================================================================== *
 * GPU types                                                             *
 * ===================================================================== */

/* Math precisions with a dense peak. Half precisions are with fp32
 * accumulation, the rate mixed-precision training gets (GeForce cards run
 * it at half their fp16-accumulate rate). */
typedef enum {
    PROF_DT_FP32, PROF_DT_TF32, PROF_DT_FP16, PROF_DT_BF16, PROF_DT_COUNT
} prof_dtype;

const char *prof_dtype_name(prof_dtype d);
/* Bytes of one element stored in this precision (tf32 is stored as fp32). */
int prof_dtype_bytes(prof_dtype d);

/* What an op of the model graph is, by the cost it has (defined here:
 * the efficiency model has figures per kind). */
typedef enum {
    PROF_OP_EMBED, PROF_OP_NORM, PROF_OP_LINEAR, PROF_OP_ATTN,
    PROF_OP_ACT, PROF_OP_RESIDUAL, PROF_OP_LM_HEAD, PROF_OP_LOSS,
    PROF_OP_POOLER,
    PROF_OP_ROPE,       /* RoPE's rotation, grouped heads repeated */
    PROF_OP_KIND_COUNT
} prof_op_kind;

/* How close an op gets to peak.
 *   GEMM (m x k) @ (k x n):  eff = gemm_max * m/(m+gemm_half_mn)
 *                                  * n/(n+gemm_half_mn) * k/(k+gemm_half_k)
 *   memory-bound op moving b bytes: eff = mem_max * b/(b+mem_half_bytes)
 * and every kernel pays launch_ns on top; every task of a schedule (a
 * stage's forward, backward, weight gradient, optimizer step) pays
 * task_ns, and op_task_ns for each op it runs (an optimizer step: one),
 * the executor's own cost of running it (0 unless measured: a task's
 * time outside its ops grows with its ops, the buffers each allocates
 * and the gradients each zeroes, so a calibration measures it per op).
 * An op of kind k with GEMMs takes gemm_factor[k][phase] times the GEMM
 * curve's time in its forward, input-gradient and weight-gradient phases,
 * one without mem_factor[k][phase] times the time of streaming its bytes,
 * and the optimizer step opt_factor times: how much slower (or, with
 * caches, faster) a kind's kernels run than the curves (a BLAS's
 * transposed layouts, the exponentials of a softmax). 0 stands for 1,
 * the datasheet assumption; calibration fits them. Streaming is
 * cache_gain times faster for an op whose bytes fit cache_bytes (a
 * device's last private cache level), falling off smoothly past it
 * (0: no such tier). A tensor-core GEMM (16-bit or TF32) whose rows are
 * not 16 bytes aligned (a layer's width or depth not a multiple of 8
 * 16-bit or 4 TF32 elements: GPT-2's vocabulary of 50257) runs at most
 * unaligned of its precision's peak, half that where they are 2 bytes
 * aligned (an odd width in 16 bits); 0: not modelled. */
enum { PROF_PHASE_F, PROF_PHASE_B, PROF_PHASE_W, PROF_PHASES };
typedef struct prof_eff {
    double gemm_max;
    double gemm_half_mn;
    double gemm_half_k;
    double mem_max;
    double mem_half_bytes;
    double launch_ns;
    double task_ns, op_task_ns;
    double gemm_factor[PROF_OP_KIND_COUNT][PROF_PHASES];
    double mem_factor[PROF_OP_KIND_COUNT][PROF_PHASES];
    double opt_factor;
    double cache_bytes, cache_gain;
    double unaligned;
    /* The backward's two halves run as tasks of their own (the
     * zero-bubble schedules' B and W): their time over the same ops'
     * within one backward task, [0] B and [1] W; measured by calibration
     * (0: not measured, as 1). */
    double split_factor[2];
} prof_eff;

/* Fraction of peak for a GEMM of this shape, in (0, 1]. */
double prof_gemm_eff(const prof_eff *e, double m, double n, double k);
/* Fraction of memory bandwidth for an op that moves bytes, in (0, 1]. */
double prof_mem_eff(const prof_eff *e, double bytes);

/* PROF_FORM_CPU: a CPU core standing for a device (the CPU executor). */
typedef enum { PROF_FORM_PCIE, PROF_FORM_SXM, PROF_FORM_CPU } prof_form;

typedef struct prof_gpu {
    char name[32];          /* catalog key, e.g. "rtx2080ti" */
    char full_name[64];     /* "NVIDIA GeForce RTX 2080 Ti" */
    char arch[24];          /* "turing" */
    prof_form form;
    int consumer;           /* GeForce: no P2P over PCIe on recent drivers */
    double mem_bytes;
    double mem_bw_bytes_per_s;
    double peak_flops[PROF_DT_COUNT]; /* dense; 0 where unsupported */
    int pcie_gen;           /* 3, 4, 5 */
    int pcie_lanes;
    int nvlink_links;       /* 0 when none */
    double nvlink_bw_bytes_per_s; /* per link, per direction */
    double tdp_w;
    double price_per_hour;  /* USD, rental reference; 0 when unknown */
    /* Tensor FP16 with FP16 accumulation, FLOP/s; on GeForce cards twice
     * peak_flops[FP16]. 0 when not listed (same rate as FP32 accumulate). */
    double fp16_acc16_flops;
    prof_eff eff;
    char source[768];
    /* The calibration this type's figures come from (lent, lives until
     * exit), NULL for datasheet figures. */
    const struct prof_calib *calib;
    /* Calibrated: the built-in figures (lent, lives until exit), for the
     * precisions calibration did not measure; NULL otherwise. */
    const struct prof_gpu *datasheet;
    /* Devices of a plan computing at once on this device's host (the
     * cost model sets it; 0 or 1: alone): cores share caches, memory
     * bandwidth and clocks, and the calibration says what that costs. */
    int busy;
} prof_gpu;

/* Names of the built-in GPU types, NULL-terminated (lent). */
const char *const *prof_gpu_names(void);
/* Looks a built-in GPU type up by name, with the figures of its
 * calibration in the profile directory when there is one; an unknown name
 * is an error listing the known ones and the closest match, a calibration
 * that does not load an error naming its file, line and field. */
int prof_gpu_get(const char *name, prof_gpu *out, util_err *e);
/* The figures that price math in dt: a calibration measured the
 * executor's kernels, which compute in fp32, so another precision is
 * priced by the datasheet's figures. */
const prof_gpu *prof_gpu_at(const prof_gpu *g, prof_dtype dt);
/* g's peak for math in dt (FLOP/s): bf16 on a GPU without it (Volta,
 * Turing) runs in fp16, as people train there; fp32 on a CPU without an
 * fp32 figure at its tf32 one. 0 where g has neither. */
double prof_gpu_peak(const prof_gpu *g, prof_dtype dt);
/* The precision math in dt runs in on g: TF32 runs as fp32 on a GPU
 * without tensor cores for it (Volta, Turing) and on a CPU, with the
 * fp32 figures and calibration. */
prof_dtype prof_gpu_math(const prof_gpu *g, prof_dtype dt);
/* The built-in figures alone (what calibration starts from). */
int prof_gpu_get_builtin(const char *name, prof_gpu *out, util_err *e);
/* Parses one GPU object (catalog entry or inline in a server file). */
int prof_gpu_parse(const util_jobj *o, prof_gpu *out, util_err *e);
/* Loads a GPU catalog file ("format": "sluice-gpus", as hw/gpus.json);
 * *out (caller frees) gets *n GPU types. */
int prof_gpu_catalog_load(const char *path, prof_gpu **out, int *n,
                          util_err *e);

/* ===================================================================== *
 * Servers and clusters: a graph                                         *
 * ===================================================================== */

typedef enum {
    PROF_NODE_GPU, PROF_NODE_CPU, PROF_NODE_PCIE_SWITCH, PROF_NODE_DRAM,
    PROF_NODE_NVME, PROF_NODE_NIC, PROF_NODE_NVSWITCH, PROF_NODE_NET_SWITCH,
    PROF_NODE_KIND_COUNT
} prof_node_kind;

typedef enum {
    PROF_LINK_PCIE, PROF_LINK_NVLINK, PROF_LINK_SOCKET, PROF_LINK_MEMORY,
    PROF_LINK_NETWORK, PROF_LINK_KIND_COUNT
} prof_link_kind;

const char *prof_node_kind_name(prof_node_kind k);
const char *prof_link_kind_name(prof_link_kind k);

typedef struct prof_node {
    prof_node_kind kind;
    char name[32];      /* unique in the topology, e.g. "n0.gpu3" */
    int server;         /* index of the server (node of the cluster) */
    int gpu;            /* global GPU index for GPU nodes, else -1 */
    int gpu_type;       /* index into prof_topo.gpu_types for GPUs, else -1 */
    double capacity_bytes;       /* DRAM and NVMe; 0 otherwise */
    double read_bw_bytes_per_s;  /* NVMe: sequential read; DRAM: bandwidth */
    double write_bw_bytes_per_s; /* NVMe: sequential write; DRAM: bandwidth */
} prof_node;

/* A full-duplex link: each direction has bw_bytes_per_s of its own.
 * Directed link ids: 2*i for a->b, 2*i+1 for b->a. */
typedef struct prof_link {
    int a, b;
    prof_link_kind kind;
    double bw_bytes_per_s;
    double latency_ns;
} prof_link;

typedef struct prof_topo {
    char name[96];            /* "8x rtx2080ti, 2-socket PCIe 3.0 server" */
    char host[160];           /* host platform in words; "" when unknown */
    int n_servers;
    int gpus_per_server;
    prof_gpu *gpu_types;
    int n_gpu_types;
    prof_node *nodes;
    int n_nodes;
    prof_link *links;
    int n_links;
    int n_gpus;
    int *gpu_node;            /* node index of GPU g */
    /* Unused (NULL): routes are computed on demand per source node and
     * cached (prof_topo_route), so large clusters cost nothing up front. */
    int *route_off;
    int *route_dl;
    struct prof_topo_x *x;    /* internal: adjacency, nearest tiers, cache */
    int own_nodes;            /* a server file listing its nodes itself:
                               * --host-mem and --nvme do not adjust it */
} prof_topo;

/* How a user gives the server more host DRAM, or NVMe drives, as advice
 * ("give --host-mem"): the options that adjust a template, or for a file
 * that lists its nodes, what to change in it. */
const char *prof_topo_more_dram(const prof_topo *t);
const char *prof_topo_more_drives(const prof_topo *t);

/* Options that adjust a template (0 = template default). */
typedef struct prof_hw_opts {
    double host_mem_bytes;    /* per server */
    int nvme;                 /* drives per server */
    int nvme_set;             /* nvme given (0: a server without drives) */
    int drive;                /* the drives' model: 1 + its index in the
                               * catalog (prof_drive_name), 0: the
                               * template's */
    int gpus_per_server;      /* force a node size */
    int pcie_gen;             /* override the host's PCIe generation */
    int xfer;                 /* CPU devices: how they exchange tensors
                               * (prof_xfer; 0 in-process), priced by the
                               * calibration when it measured it */
    char text[128];           /* the options prof_hw_opts_arg took, as
                               * given (" --host-mem 256G --nvme 12"):
                               * what a plan's hw keeps after the GPUs */
} prof_hw_opts;

/* NVMe drive models from their datasheets (--nvme N:MODEL): sequential
 * read and write (bytes/s), capacity, PCIe generation and lanes. Entry k
 * (NULL past the end); the entry of a name, -1. */
typedef struct prof_drive {
    const char *name;
    double cap, read, write;
    int gen, lanes;
} prof_drive;
const prof_drive *prof_drive_at(int k);
int prof_drive_find(const char *name);

/* The server template's options on a command line (--host-mem SIZE,
 * --nvme N, --gpus-per-server N, --pcie-gen G) at argv[*i]: 1 when it is
 * one of them (*i moves past its value, o set and the option appended to
 * o->text), 0 when not, -1 with a message naming the option and value
 * (exit code 2). */
int prof_hw_opts_arg(int argc, char **argv, int *i, prof_hw_opts *o,
                     util_err *e);

/* Builds the standard server or cluster for n GPUs of a built-in type:
 * GeForce cards on a two-socket PCIe server with PCIe switches, SXM cards
 * as DGX-like nodes, more GPUs than one node holds as several nodes joined
 * by InfiniBand. */
prof_topo *prof_topo_template(const char *gpu, int n, const prof_hw_opts *o,
                              util_err *e);
/* Loads a user's server or cluster file (see profiles/hw/README.md). */
prof_topo *prof_topo_load(const char *path, util_err *e);
/* Resolves --hw arguments: "rtx2080ti x8", "rtx2080ti" "x8", "FILE.json". */
prof_topo *prof_topo_from_args(int argc, char **argv, const prof_hw_opts *o,
                               util_err *e);
/* Whether a --hw word names a server file (a path with '/' or ending
 * .json, or an existing file that is no catalog GPU's name), not a GPU. */
int prof_hw_is_file(const char *s);
void prof_topo_free(prof_topo *t);

/* Building a topology by hand (templates and loaders use these too):
 * prof_topo_new, add GPU types, nodes and links, then prof_topo_finish,
 * which checks it (unique names, every GPU reachable, positive bandwidths)
 * and prepares routing. add_* return the new index. */
prof_topo *prof_topo_new(const char *name);
int prof_topo_add_gpu_type(prof_topo *t, const prof_gpu *g);
int prof_topo_add_node(prof_topo *t, prof_node_kind kind, const char *name,
                       int server);
int prof_topo_add_link(prof_topo *t, int a, int b, prof_link_kind kind,
                       double bw_bytes_per_s, double latency_ns);
int prof_topo_finish(prof_topo *t, util_err *e);
/* Node index by name, or -1. */
int prof_topo_find(const prof_topo *t, const char *name);
/* Whether a route crosses a link of this kind / a node of this kind. */
int prof_route_has_link_kind(const prof_topo *t, const int *dl, int n,
                             prof_link_kind k);
int prof_route_has_node_kind(const prof_topo *t, const int *dl, int n,
                             prof_node_kind k);
/* Node at the head (destination end) of directed link dl. */
int prof_dl_head(const prof_topo *t, int dl);
int prof_dl_tail(const prof_topo *t, int dl);

/* The GPU type of global GPU g (lent). */
const prof_gpu *prof_topo_gpu(const prof_topo *t, int g);
/* The first GPU type of t without math in dt that computes it in
 * another precision (bf16 in fp16, TF32 in fp32: prof_gpu_peak), NULL
 * when none: reports say so. */
const prof_gpu *prof_topo_dtype_fallback(const prof_topo *t,
                                         prof_dtype dt);
/* The precision math in dt runs in on a GPU without it: bf16 in fp16,
 * TF32 in fp32; dt itself for the others. */
prof_dtype prof_dtype_fallback(prof_dtype dt);
/* Route from node a to node b as directed link ids; *n gets the count.
 * Lent, valid until prof_topo_free; empty (NULL, 0) when a == b or b
 * cannot be reached. Routes are widest-path (largest bottleneck
 * bandwidth), then fewest hops, then the lexicographically smallest node
 * sequence: deterministic. Computed on first use and cached (thread-safe);
 * consumer GPUs stage through host memory (profiles/hw/README.md). */
const int *prof_topo_route(const prof_topo *t, int a, int b, int *n);
/* Route between GPUs (by global GPU index). */
const int *prof_topo_gpu_route(const prof_topo *t, int ga, int gb, int *n);
/* Bottleneck bandwidth and summed latency along a route. */
double prof_route_bw(const prof_topo *t, const int *dl, int n);
double prof_route_latency_ns(const prof_topo *t, const int *dl, int n);
/* Nearest host DRAM node and NVMe node (or -1) to GPU g. */
int prof_topo_gpu_host_mem(const prof_topo *t, int g);
int prof_topo_gpu_nvme(const prof_topo *t, int g);
/* Host DRAM of a server: its DRAM nodes' capacity summed, bytes. */
double prof_topo_server_dram(const prof_topo *t, int server);
/* Whether t's devices are CPU cores standing for GPUs (0 for NULL). */
int prof_topo_cpu(const prof_topo *t);
/* What a device of t is called: "device" (CPU cores standing for
 * devices) or "GPU" (also for NULL); "s" makes the plural. */
const char *prof_topo_unit(const prof_topo *t);
/* The NVMe drives of server `server`. */
int prof_topo_server_drives(const prof_topo *t, int server);

/* Whether shifting GPUs by `stride` (whole servers) within the first
 * stride*count GPUs, g -> (g + stride) mod (stride*count), extends to an
 * automorphism of the server graph: the servers of that group are built
 * alike (nodes, GPU types, memories, links of the same kind, bandwidth and
 * latency) and joined alike to what lies outside them. Then data-parallel
 * replicas of stride GPUs each see the same links and the same sharing
 * (the simulator folds them into one). */
int prof_topo_shift_symmetric(const prof_topo *t, int stride, int count);
/* The automorphism itself, on directed links: map[dl] is the image of
 * directed link dl (2*i: a->b of link i, 2*i+1: b->a); malloc'd, or NULL
 * where the shift is not one. */
int *prof_topo_shift_map(const prof_topo *t, int stride, int count);
/* The orbits of the directed links under that shift: *rep[dl] is the
 * smallest directed link of dl's orbit and *mult[dl] = count / (the
 * orbit's size), how often the count copies of a flow that crosses dl
 * cross its orbit. Returns 1 with both arrays lent (computed once per
 * (stride, count) and kept by the topology until it is freed), or 0 where
 * the shift is not an automorphism. Safe from several threads. */
int prof_topo_link_orbits(const prof_topo *t, int stride, int count,
                          const int **rep, const int **mult);

/* Prints the topology as a tree with link bandwidths; or as JSON. */
void prof_topo_print(const prof_topo *t, FILE *f);
json_t *prof_topo_json(const prof_topo *t);

/* ===================================================================== *
 * Models: compact spec and op graph                                     *
 * ===================================================================== */

typedef enum {
    PROF_FAM_GPT, PROF_FAM_BERT, PROF_FAM_T5, PROF_FAM_LLAMA, PROF_FAM_OPT,
    PROF_FAM_COUNT
} prof_family;

const char *prof_family_name(prof_family f);

typedef enum { PROF_ACT_GELU, PROF_ACT_RELU, PROF_ACT_SILU } prof_act;

typedef struct prof_model_spec {
    char name[64];
    prof_family family;
    int hidden;          /* d_model */
    int layers;          /* decoder-only: layers; BERT: layers; T5: encoder */
    int dec_layers;      /* T5 decoder layers; 0 otherwise */
    int heads;
    int kv_heads;        /* grouped-query attention; = heads when absent */
    int head_dim;        /* T5's d_kv may differ from hidden/heads */
    int ffn;             /* MLP inner size */
    int vocab;
    int seq_len;         /* training sequence length (encoder for T5) */
    int dec_seq_len;     /* T5 target length; 0 otherwise */
    int max_pos;         /* learned position table size; 0 when none */
    int type_vocab;      /* BERT token types; 0 otherwise */
    int tied_embeddings; /* LM head shares the input embedding */
    int gated_mlp;       /* SwiGLU / gated-GELU: three MLP matrices */
    int rmsnorm;         /* RMSNorm (no bias) instead of LayerNorm */
    int bias;            /* linear layers carry biases */
    int rel_pos_buckets; /* T5 relative attention buckets; 0 otherwise */
    int rel_pos_max_distance; /* T5: distances from which one bucket
                          * holds them all (128); 0 otherwise */
    int pooler;          /* BERT pooler */
    int dropout;         /* dropout masks kept for backward */
    int flash_attn;      /* fused attention: no s*s scores kept, recomputed
                          * in backward */
    int fused_loss;      /* the loss is one fused kernel (flash-attn's
                          * cross-entropy, LLM Foundry's default): it reads
                          * the logits once and writes their gradient over
                          * them; else the framework's fp32 log-softmax and
                          * NLL (PyTorch's under autocast, Megatron-LM's) */
    prof_act act;        /* MLP activation (gated with gated_mlp) */
    int gelu_erf;        /* GELU's exact form, x Phi(x) by erf (Hugging
                          * Face's "gelu": BERT's); 0: the tanh form
                          * ("gelu_new": GPT-2's, the original BERT's) */
    int act_other;       /* a variant of act the kernels do not compute
                          * (quick_gelu, gelu_10, relu6, relu2,
                          * leaky_relu): priced as act, not trained */
    prof_dtype dtype;    /* training precision of weights and activations */
    int tf32;            /* fp32 GEMMs on tensor cores in TF32 (PyTorch's
                          * allow_tf32, cuBLAS's TF32 math mode): priced
                          * at the GPU's TF32 peak where it has one */
    double rope_theta;   /* RoPE's base (models without a position
                          * table); 0: 10000, Llama 2's */
    double norm_eps;     /* the norms' epsilon; 0: 1e-5 */
    int rope_scaled;     /* RoPE with a scaling (Llama 3.1's, YaRN, ...) */
    int batch;           /* default global batch (sequences) for planning;
                          * 0: the planner's default */
    char source[512];
} prof_model_spec;

/* The precision a model's GEMMs are priced in: TF32 for an fp32 spec that
 * asks for it, else its dtype. */
prof_dtype prof_spec_math(const prof_model_spec *s);

/* Whether the model rotates q and k (RoPE) in place of a learned position
 * table: a decoder without one (Llama's family). */
int prof_spec_rope(const prof_model_spec *s);

typedef enum { PROF_PART_NONE, PROF_PART_ENC, PROF_PART_DEC } prof_part;

/* What an op computes, set by the graph builder, so that code which needs
 * an op's meaning (the executor's kernels, tensor parallelism) reads it
 * here and never parses the op's name. */
typedef enum {
    PROF_ROLE_EMBED,        /* token (+ position, type) embedding */
    PROF_ROLE_NORM,         /* LayerNorm or RMSNorm */
    PROF_ROLE_QKV,          /* fused q|k|v projection */
    PROF_ROLE_Q, PROF_ROLE_KV, /* cross-attention projections */
    PROF_ROLE_ATTN_SCORES,  /* q k^T / sqrt(d) per head */
    PROF_ROLE_ATTN_SOFTMAX, /* (masked) softmax of the scores */
    PROF_ROLE_ATTN_CONTEXT, /* probabilities times v */
    PROF_ROLE_ATTN_FUSED,   /* the three above as one kernel (FlashAttention) */
    PROF_ROLE_ATTN_OUT,     /* attention output projection */
    PROF_ROLE_RESIDUAL,     /* x + branch */
    PROF_ROLE_MLP_UP, PROF_ROLE_MLP_ACT, PROF_ROLE_MLP_DOWN,
    PROF_ROLE_POOLER,       /* BERT's pooler */
    PROF_ROLE_MLM_DENSE, PROF_ROLE_MLM_ACT, /* BERT's masked-LM transform */
    PROF_ROLE_LM_HEAD, PROF_ROLE_LOSS,
    PROF_ROLE_QKV_EXPAND,   /* RoPE on q and k; grouped k, v heads repeated */
    PROF_ROLE_COUNT
} prof_op_role;

const char *prof_op_role_name(prof_op_role r);

const char *prof_op_kind_name(prof_op_kind k);

/* How far backward reaches an op: its weights train, or they are frozen
 * and only the input gradient flows through it, or no backward at all
 * (every op before the first trainable one). */
typedef enum { PROF_GRAD_TRAIN, PROF_GRAD_INPUT, PROF_GRAD_NONE } prof_grad;

/* One GEMM per sample: (m x k) @ (k x n), repeated batch times (attention
 * runs one per head). m counts rows of one sample, so a microbatch of b
 * samples runs m*b rows (attention: batch*b). */
typedef struct prof_gemm {
    double m, n, k, batch;
    /* fine-tuning (prof_model_finetune): a frozen weight's GEMM has no
     * weight-gradient GEMM; a LoRA adapter's two GEMMs are marked
     * PROF_ADAPTER_A (x A: k -> r) and PROF_ADAPTER_B (-> n) */
    int frozen, adapter;
} prof_gemm;

enum { PROF_ADAPTER_NONE, PROF_ADAPTER_A, PROF_ADAPTER_B };

#define PROF_OP_MAX_IN 4
#define PROF_OP_MAX_GEMM 3

/* All costs per sample (one sequence); backward split into the input
 * gradient (B) and the weight gradient (W). */
typedef struct prof_op {
    char name[48];          /* "dec.l3.cross_attn.q" */
    prof_op_kind kind;
    prof_op_role role;
    prof_part part;
    int layer;              /* index into prof_model.layers */
    int tied;               /* params shared with an earlier op (the LM head
                             * tied to the embedding): counted once in the
                             * model, but a stage holding it keeps a copy */
    double fwd_flops, bwd_in_flops, bwd_w_flops;
    double bytes_read, bytes_written;   /* forward memory traffic */
    double bwd_bytes;       /* the input gradient's memory traffic; 0:
                             * twice the forward's (it reads the saved
                             * input and the output's gradient, writes
                             * the input's) */
    /* what the op holds while its forward (its input gradient) runs,
     * beyond what it keeps and the gradients of its inputs (the unfused
     * loss's fp32 copies) */
    double fwd_scratch, bwd_scratch;
    double params;          /* the op's parameters (a LoRA adapter's too) */
    /* of them, those every tensor-parallel rank holds whole where the op
     * is split (Megatron-LM's layout): a learned position or token-type
     * table beside the vocabulary-split token table, a row-parallel
     * linear's bias (added once after the sum) */
    double tp_rep;
    /* Fine-tuning (prof_model_finetune; full training: train_params =
     * params and the rest 0): the parameters that get gradients and
     * optimizer state, the bytes the frozen rest takes (4-bit under
     * QLoRA), the bytes a 4-bit base moves to be dequantized before each
     * forward and input-gradient GEMM, and how far backward reaches: */
    double train_params, frozen_bytes, dequant_bytes;
    int grad;               /* prof_grad */
    double act_bytes;       /* kept from forward for backward */
    double out_bytes;       /* output, what crosses a cut after this op */
    int n_gemm;
    prof_gemm gemm[PROF_OP_MAX_GEMM];
    int n_in;
    int in[PROF_OP_MAX_IN]; /* op indices this op reads; earlier ops only */
} prof_op;

/* The parameters of an op that get gradients and optimizer state: all of
 * them while it trains (an op built by hand need not set train_params),
 * its adapters' when it is frozen. */
static inline double prof_op_train_params(const prof_op *o)
{
    return o->grad == PROF_GRAD_TRAIN ? o->params : o->train_params;
}

/* A layer: a contiguous run of ops (embeddings and head are layers too). */
typedef struct prof_layer {
    char name[32];          /* "embed", "enc.3", "dec.0", "head" */
    prof_part part;
    int first_op, n_ops;
} prof_layer;


/* Fine-tuning: which parameters train. full: all; frozen:N: the embedding
 * and the first N transformer blocks frozen (a tied LM head with them);
 * lora:R[:targets]: every base weight frozen, a rank-R adapter x A B
 * beside each target linear (Hu et al. 2021); qlora:R[:targets]: LoRA
 * over a base whose block linears are stored in 4-bit NormalFloat with
 * double quantization, 4.127 bits a weight, and dequantized to 16 bits
 * for each forward and input-gradient GEMM (Dettmers et al. 2023, sec.
 * 3); norms, embeddings and the head stay 16-bit. An adapter is one per
 * weight matrix, as PEFT puts them on Hugging Face models (a fused q|k|v
 * projection carries three). Targets, joined by '+': q, k, v, out (the
 * attention's projections), gate, up, down (the MLP's; gate only in a
 * gated MLP), qkv, attn (qkv+out), mlp (gate+up+down), all. LoRA's
 * default is q+v (the paper's Wq and Wv, PEFT's default for Llama),
 * QLoRA's all (the paper: every linear is needed to match 16-bit
 * fine-tuning). */
typedef enum {
    PROF_FT_FULL, PROF_FT_FROZEN, PROF_FT_LORA, PROF_FT_QLORA, PROF_FT_COUNT
} prof_ft_kind;
enum {
    PROF_LORA_Q = 1, PROF_LORA_K = 2, PROF_LORA_V = 4, PROF_LORA_OUT = 8,
    PROF_LORA_GATE = 16, PROF_LORA_UP = 32, PROF_LORA_DOWN = 64,
    PROF_LORA_ALL = 127
};
typedef struct prof_finetune {
    prof_ft_kind kind;
    int frozen;             /* frozen:N */
    int rank;               /* lora, qlora */
    unsigned targets;       /* PROF_LORA_* */
} prof_finetune;
/* Bytes a QLoRA base weight takes: 4-bit NF4 plus 0.127 bits of
 * double-quantized block constants (Dettmers et al. 2023). */
#define PROF_NF4_BYTES (4.127 / 8)
/* The name of one LoRA target bit ("q", "out", ...), NULL for others. */
const char *prof_lora_target_name(unsigned bit);
/* Parses a mode ("full", "frozen:12", "lora:16", "lora:8:attn+mlp",
 * "qlora:64"); errors name the value and what is expected (exit 2). */
int prof_finetune_parse(const char *s, prof_finetune *out, util_err *e);
/* The canonical text: "full", "frozen:12", "lora:16:qkv", ... */
const char *prof_finetune_name(const prof_finetune *f, char *buf, size_t n);
/* Whether a mode trains everything (the default). */
int prof_finetune_full(const prof_finetune *f);

typedef struct prof_model {
    prof_model_spec spec;
    prof_finetune ft;       /* the mode the ops describe (full as built) */
    double train_params;    /* parameters that train (unique) */
    prof_op *ops;           /* topological order */
    int n_ops;
    prof_layer *layers;
    int n_layers;
    double params;          /* unique parameters (tied ones counted once) */
    double *cut_bytes;      /* per op: see prof_model_cut_bytes */
} prof_model;

/* Names of the built-in models, NULL-terminated (lent). */
const char *const *prof_model_names(void);
/* A zoo name or a file (sluice spec or Hugging Face config.json). Unknown
 * names list the known ones and the closest match. */
int prof_model_spec_get(const char *name_or_file, prof_model_spec *out,
                        util_err *e);
/* The most layers a model may have, encoder and decoder together: DeepNet,
 * the deepest published transformer, has 1000 (500 + 500). More would
 * take gigabytes to expand and far longer to plan. */
#define PROF_MAX_LAYERS 1024
/* The widest dimensions a spec may give (hidden, ffn, heads, head_dim)
 * and the longest sequence: far past any published model (hidden 25600,
 * 128 heads of 256 at most, contexts of a few million tokens), low
 * enough that no size the graph builder and the cost model multiply
 * overflows or leaves a double's integers. */
#define PROF_MAX_WIDTH (1 << 20)
#define PROF_MAX_HEADS (1 << 16)
#define PROF_MAX_SEQ (1 << 24)
/* Checks a spec's values (heads divide hidden, sizes positive, at most
 * PROF_MAX_LAYERS layers with the size they would take, ...). */
int prof_model_spec_check(const prof_model_spec *s, const char *where,
                          util_err *e);
/* Expands a spec into the op graph. */
prof_model *prof_model_build(const prof_model_spec *s, util_err *e);
/* Both steps. */
prof_model *prof_model_load(const char *name_or_file, util_err *e);
/* A precision a model trains in instead of its spec's (--dtype): "fp32",
 * "tf32" (fp32 with TF32 products), "fp16" or "bf16" into *out (0: the
 * spec's, as sim_plan.math keeps it; else 1 + prof_dtype). Error, code
 * 2: another name. */
int prof_math_parse(const char *s, int *out, util_err *e);
/* Its name ("" for 0). */
const char *prof_math_name(int math);
/* Sets a spec's precision to math (0: leaves it). */
void prof_spec_set_math(prof_model_spec *s, int math);
/* Sets a spec's sequence length to seq tokens (0: leaves it; a T5's
 * decoder keeps its own): at most its learned positions and what sluice
 * takes, else an error naming --seq (code 2). */
int prof_spec_set_seq(prof_model_spec *s, int seq, util_err *e);
/* Runs a spec's attention fused (flash > 0: one kernel that keeps no
 * scores, as FlashAttention and PyTorch's fused attention run it) or as
 * its separate ops (flash < 0); 0 leaves the spec's (--flash-attn,
 * --no-flash-attn). */
void prof_spec_set_flash(prof_model_spec *s, int flash);
/* The model as it runs on topology t: on CPU devices (sluice's CPU
 * executor computes in fp32) a spec in another precision is rebuilt in
 * fp32, so times and bytes are the executor's. Returns m, or the rebuilt
 * model (m freed); NULL on error (m freed). */
prof_model *prof_model_for_topo(prof_model *m, const prof_topo *t,
                                util_err *e);
void prof_model_free(prof_model *m);
/* Sets m->params and m->train_params from the ops: unique parameters,
 * a table tied across ops counted once. */
void prof_model_count_params(prof_model *m);
/* Applies a fine-tuning mode to a model as built (full training): marks
 * what is frozen and how far backward reaches, adds the adapters'
 * parameters, FLOPs, GEMMs and kept activations to the ops they adapt,
 * drops the weight gradients (and the inputs kept only for them) of
 * frozen ops, and stores a QLoRA base in 4 bits. Applied once, after
 * prof_model_for_topo (which rebuilds). Errors: frozen:N past the
 * model's blocks, QLoRA on an fp32 model (exit 2). */
int prof_model_finetune(prof_model *m, const prof_finetune *f, util_err *e);

/* Totals per sample over ops [first, first+n). */
typedef struct prof_cost {
    double fwd_flops, bwd_in_flops, bwd_w_flops;
    double params, act_bytes;
} prof_cost;
prof_cost prof_model_cost(const prof_model *m, int first_op, int n_ops);

/* Training FLOPs per sample (forward + backward), and with full activation
 * recomputation (one more forward). */
double prof_model_train_flops(const prof_model *m, int recompute);

/* Bytes that cross a cut placed after op `last` (everything at or before
 * `last` on one side): the outputs of ops <= last read by ops > last,
 * each counted once. Non-chain graphs (T5) carry the encoder output.
 * O(1): precomputed when the model is built. */
double prof_model_cut_bytes(const prof_model *m, int last);

void prof_model_print(const prof_model *m, int ops, FILE *f);
json_t *prof_model_json(const prof_model *m, int ops);

/* ===================================================================== *
 * Calibration: measured figures that replace the datasheet's            *
 * ===================================================================== */

/* `sluice calibrate` measures a device type on this machine and fits the
 * efficiency model (GEMM curve, memory bandwidth curve, launches, the
 * executor's cost per task) and the links between devices; `sluice exec
 * --calibrate` adds the time of every op a real run measured. The result
 * is one file per device type, DIR/TYPE.json ("format":
 * "sluice-calibration"), in the profile directory: `--profile-dir DIR`,
 * else $SLUICE_PROFILE_DIR (set but empty: none), else
 * $XDG_CONFIG_HOME/sluice/profiles (~/.config/sluice/profiles). Every
 * command that looks a device type up (prof_gpu_get) gets the calibrated
 * figures; the built-in ones stay for the types not calibrated. */

/* Transfers a calibration measures: a copy between two devices of one
 * process (the executor's in-process transport), a message between
 * processes (its MPI transport), and one step of a tensor-parallel
 * all-reduce among a process's devices (priced as a ring step:
 * latency + bytes / ranks / bandwidth). */
typedef enum {
    PROF_XFER_INPROC, PROF_XFER_MPI, PROF_XFER_COLL, PROF_XFER_COUNT
} prof_xfer;
/* "in-process", "mpi", "all-reduce" */
const char *prof_xfer_name(prof_xfer x);

/* A transfer's fitted cost: latency + bytes / bandwidth. */
typedef struct prof_calib_link {
    int present;
    double bw_bytes_per_s, latency_ns;
    int samples;
    double max_err;          /* largest |fit / measured - 1| */
} prof_calib_link;

/* A fitted value and its 95% confidence interval. */
typedef struct prof_calib_param {
    char name[32];
    double value, lo, hi;
} prof_calib_param;

/* A task time the executor measured for one op signature
 * (sim_op_signature): it replaces the efficiency model's figure. */
typedef struct prof_calib_op {
    char sig[128];
    double ns;               /* mean over the samples */
    long samples;
    char model[64];          /* the model whose run measured it */
    int busy;                /* devices computing at once when measured */
} prof_calib_op;

/* What runs of offload schedules' plans measured of the host's tiers
 * (`sluice exec --calibrate`): the drive's read and write rates through
 * the tier's file and the CPU's AdamW; the simulator's drives and CPU
 * steps on a server of this device type use them. A rate no run measured
 * is 0 (a run with its states in DRAM measures AdamW alone). */
typedef struct prof_calib_tiers {
    int present;             /* some rate is measured */
    double read_bytes_per_s, write_bytes_per_s, adam_params_per_s;
    char model[64];          /* the model whose run measured them */
} prof_calib_tiers;

/* The machine a calibration comes from. Two calibrations are of the same
 * hardware when the CPU model, core count and device name agree (host
 * names change with every container). */
typedef struct prof_machine {
    char host[64];
    char cpu[96];            /* /proc/cpuinfo's model name */
    int cores;
    char device[96];         /* what was measured: "CPU core", a GPU name */
} prof_machine;

#define PROF_CALIB_MAX_PARAMS 48
#define PROF_CALIB_MAX_BUSY 64

typedef struct prof_calib {
    char file[512];          /* where it was read from; "" when new */
    char device[32];         /* the device type it calibrates */
    char date[32];           /* ISO 8601, UTC */
    int quick;               /* sluice calibrate --quick's rougher fit */
    prof_machine machine;
    prof_gpu gpu;            /* the type with the fitted figures */
    prof_calib_link link[PROF_XFER_COUNT];
    prof_calib_param param[PROF_CALIB_MAX_PARAMS];
    int n_param;
    int fit_samples;         /* microbenchmarks the fit used */
    double fit_median_err, fit_max_err; /* |fit / measured - 1| over them */
    prof_calib_op *ops;      /* sorted by signature */
    int n_ops;
    /* busy[n-1]: how much longer ops take with n devices of the host
     * computing at once than alone (busy[0] = 1), n = 1..n_busy; beyond,
     * the last. The fitted figures are for a device alone. */
    double busy[PROF_CALIB_MAX_BUSY];
    int n_busy;
    prof_calib_tiers tiers;
} prof_calib;

/* The profile directory in force: set (NULL: none), or found as above. */
void prof_profile_dir_set(const char *dir);
/* The directory, or NULL when there is none. Lent. */
const char *prof_profile_dir(void);
/* Why prof_profile_dir is NULL ("SLUICE_PROFILE_DIR is empty", ...). */
const char *prof_profile_dir_none(void);
/* DIR/device.json in buf, or NULL when there is no profile directory. */
char *prof_calib_path(const char *device, char *buf, size_t n);

/* This machine (host, CPU model, cores); device is left to the caller. */
void prof_machine_this(prof_machine *m);
int prof_machine_same(const prof_machine *a, const prof_machine *b);
/* "AMD EPYC 7B13, 2 cores (host x)" */
char *prof_machine_str(const prof_machine *m, char *buf, size_t n);

/* Reads a calibration file: its GPU figures are checked as a catalog
 * entry's are (an efficiency above 1, a negative bandwidth: an error
 * naming the file, line and field). */
int prof_calib_load(const char *path, prof_calib *c, util_err *e);
/* Writes it atomically (the previous file stays whole until the rename). */
int prof_calib_save(const prof_calib *c, const char *path, util_err *e);
json_t *prof_calib_json(const prof_calib *c);
void prof_calib_free(prof_calib *c);
/* The calibration of a device type in the profile directory (lent, kept
 * until exit; re-read when the file changes), *out NULL when none. */
int prof_calib_find(const char *device, const prof_calib **out, util_err *e);
/* Whether prof_calib_find says on stderr when the cpu calibration it
 * reads was measured on another machine (default on; off where the
 * command says so itself: exec --calibrate refuses such a file, profile
 * list shows the machine; other MPI ranks than 0). */
void prof_calib_foreign_notes(int on);
/* Every calibration in the profile directory, one per built-in type
 * calibrated: copies that share the cached ones' ops (free the array
 * only). A file that does not load is skipped, its error in e (each such
 * file's on a line of its own) and -1 returned; *n counts those that
 * loaded. */
int prof_calib_list(prof_calib **out, int *n, util_err *e);
/* The measured time of an op signature with `busy` devices of the host
 * computing at once (scaled from how it was measured), or -1. */
double prof_calib_op_ns(const prof_calib *c, const char *sig, int busy);
/* The slowdown with n devices computing at once (1 without c). */
double prof_calib_busy(const prof_calib *c, int n);
/* Adds measured samples of a signature, taken with `busy` devices
 * computing at once (their mean merged with what the calibration has,
 * both as if alone). */
void prof_calib_add_op(prof_calib *c, const char *sig, double mean_ns,
                       long samples, const char *model, int busy);
/* A value fitted earlier, or NULL. */
const prof_calib_param *prof_calib_param_get(const prof_calib *c,
                                             const char *name);

/* ===================================================================== *
 * Built-in files                                                        *
 * ===================================================================== */

/* The JSON text of a built-in file such as "hw/gpus.json", or NULL. */
const char *prof_builtin(const char *relpath);
/* Names of built-in files under a folder prefix ("models/"), NULL-ended. */
const char *const *prof_builtin_list(void);

/* Validates any profile file (GPU catalog, server, model spec, HF config
 * or calibration) and says what it is. */
int prof_validate_file(const char *path, FILE *out, util_err *e);
/* Whether a JSON document's "format" is `format` ("sluice-calibration"). */
struct json_t;
int prof_json_format_is(const struct json_t *root, const char *format);

#endif
