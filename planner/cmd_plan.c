/* `sluice plan`: the best plan for a model on some GPUs, why it won, how
 * far it is from the lower bound; capacity planning over GPU counts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "planner/planner.h"
#include "planner/workload.h"
#include "plots/plots.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: sluice plan --hw GPU xN | FILE.json --model NAME|FILE [options]\n"
        "       sluice plan --hw GPU --gpus 1,2,4,8 --model NAME [options]\n"
        "       sluice plan --hw GPU xN --models NAME xK ... | --workload FILE\n"
        "                   (many jobs at once: sluice plan --models --help)\n\n"
        "Searches the schedule, pipeline depth, microbatch size and count,\n"
        "recomputation and the partition; simulates the survivors; prints the\n"
        "best plan, the best of every other schedule and the gap to the lower\n"
        "bound. --hw GPU without a count is one standard 8-GPU server (GPU x8).\n\n"
        "schedules searched (--schedule LIST picks some):\n");
    sim_sched_help(f, "  ");
    fprintf(f,
        "\noptions:\n"
        "  --batch N          global batch in samples (default: the model's,\n"
        "                     else %d)\n", PLAN_DEFAULT_BATCH);
    fprintf(f,
        "  --schedule LIST    only these schedules, comma-separated\n"
        "  --pp P, --dp D, --tp T, --mbs B\n"
        "                     fix the pipeline depth, data or tensor parallel\n"
        "                     width, or the microbatch size\n"
        "  --chunks V         interleaved 1F1B with V chunks per device only\n"
        "                     (Megatron-LM's virtual pipeline stages); the\n"
        "                     other schedules are searched as before\n"
        "  --recompute [MODE] only plans with this recomputation: full (the\n"
        "                     default), selective (the attention core) or none\n"
        "                     (also --no-recompute); searched when not given\n"
        "  --sequence-parallel, --no-sequence-parallel\n"
        "                     only plans with (tp > 1) or without sequence\n"
        "                     parallelism; searched when not given\n"
        "  --zero N           only plans with ZeRO stage N (0-3) over the data-\n"
        "                     parallel group; searched when not given\n"
        "  --fsdp full|hybrid only FSDP plans: ZeRO-3 over the group, or inside\n"
        "                     a server and replicated across servers\n"
        "  --finetune LIST    fine-tuning modes allowed, comma-separated: full,\n"
        "                     frozen:N, lora:R[:TARGETS], qlora:R[:TARGETS]\n"
        "                     (sluice sim --help); the fastest plan of any is\n"
        "                     chosen, each shown. auto = full,lora:16,qlora:16.\n"
        "                     Default: full, and where full training fits\n"
        "                     nowhere lora:16, then qlora:16, said so\n"
        "  --dtype fp32|tf32|fp16|bf16  the precision the model trains in\n"
        "                     instead of its spec's (tf32: fp32 with TF32\n"
        "                     products); the plan file keeps it\n"
        "  --seq N            tokens a sample instead of the model spec's (a\n"
        "                     fine-tuning's length; at most its learned\n"
        "                     positions); the plan file keeps it\n"
        "  --flash-attn, --no-flash-attn  attention as one fused kernel that\n"
        "                     keeps no scores (FlashAttention, PyTorch's\n"
        "                     fused attention), or as its separate ops,\n"
        "                     instead of as the model spec says; the plan\n"
        "                     file keeps it\n"
        "  --grad-bucket SIZE the data-parallel all-reduce in buckets of SIZE\n"
        "                     of gradients, each reduced as soon as the\n"
        "                     backward has computed it (default on GPUs 25M,\n"
        "                     PyTorch DDP's); 0 or stage: one per stage after\n"
        "                     its backward (default on CPU devices); the plan\n"
        "                     file keeps it\n"
        "  --reserve SIZE     memory kept per GPU for the framework and allocator\n"
        "                     (default 1G)\n"
        "  --state-bytes N    weights+grads+optimizer bytes per parameter (default 16)\n"
        "  --gpus LIST        capacity planning: the best plan for each GPU count\n"
        "  --sweep-host-mem LIST  the largest model (the --model's layer shape,\n"
        "                     as many layers as fit) each offload schedule fits\n"
        "                     on one GPU, for each host DRAM SIZE (128G,256G),\n"
        "                     and Hydra's shards (--schedule hydra alone)\n"
        "  --offload-tier auto|dram|nvme  where the offload schedules keep\n"
        "                     the model states; auto (default) tries DRAM\n"
        "                     and, where the server has drives, NVMe for\n"
        "                     zero-infinity and fuyou, and keeps the faster\n"
        "  --host-mem SIZE, --nvme N[:DRIVE], --gpus-per-server N, --pcie-gen G\n"
        "                      adjust the server template\n"
        "  --json             print the answer as JSON\n"
        "  --out FILE         write the chosen plan (for sluice sim --plan)\n"
        "  --plot PREFIX      draw the chosen plan's timeline and memory, or with\n"
        "                     --gpus the capacity curve, with --sweep-host-mem\n"
        "                     the largest model against DRAM (gnuplot):\n"
        "                     PREFIX-*.{png,svg} with their .dat and .gp\n"
        "  --exhaustive       simulate every candidate (no pruning by bounds)\n"
        "  --time-limit S     answer within about S seconds with the best plan\n"
        "                     found by then, saying how much was searched\n"
        "  --no-progress      no progress bar (it shows on a terminal only)\n"
        "  --async            an asynchronous schedule (2bw, the asynchronous\n"
        "                     mixed: no flush, stale weights) may be chosen;\n"
        "                     by default they are shown beside the chosen\n"
        "                     synchronous plan (or chosen when --schedule\n"
        "                     names only them)\n"
        "  --sync             leave asynchronous schedules out of the search\n"
        "\n" UTIL_SIZE_HELP
        "\nexit codes: 0 a plan was found, 1 nothing fits the GPUs, 2 bad usage\n"
        "or input: options no layout of the machine takes, or host DRAM or\n"
        "drives too small for the states an offloading plan keeps there\n");
}

/* Fine-tuning modes one search may try. */
#define MAX_FT 8

typedef struct cmd {
    int hw_at, hw_n;
    char **argv;
    const char *model, *out, *plot, *gpus, *sweep_mem;
    int json, sync;
    prof_finetune ft[MAX_FT];
    int n_ft;
    int fallback;             /* no --finetune: ft holds ft_auto's modes,
                               * planned in order until one fits */
    plan_opts po;
    prof_hw_opts ho;
} cmd;

/* Whether schedule mask `mask` (0: all) names one that keeps the model
 * states on the GPUs: only then does an offload plan's winning say that
 * nothing fits without offloading. */
static int searched_on_gpu(unsigned mask)
{
    for (int s = 0; s < SIM_SCHED_COUNT; s++)
        if ((!mask || (mask >> s & 1u)) && !sim_sched_offload((sim_sched)s))
            return 1;
    return 0;
}

/* --finetune auto: full training, then LoRA at rank 16 (the QLoRA paper's
 * rank for its 7B-65B runs) on LoRA's default targets, then QLoRA at the
 * same rank on every linear. Without --finetune the same list is planned
 * in order until a mode fits: full training, falling back to the others. */
static const char ft_auto[] = "full,lora:16,qlora:16";

/* --finetune LIST: modes, or auto. */
static int ft_list(const char *v, cmd *c, util_err *e)
{
    const char *list = strcmp(v, "auto") ? v : ft_auto;
    c->n_ft = 0;
    for (const char *p = list;;) {
        size_t len = strcspn(p, ",");
        char tok[64];
        if (!len || len >= sizeof tok)
            return util_errf(e, UTIL_EXIT_USAGE, "--finetune '%s': %s", v,
                             len ? "a mode too long" : "an empty mode");
        if (c->n_ft == MAX_FT)
            return util_errf(e, UTIL_EXIT_USAGE, "--finetune '%s': at most "
                             "%d modes", v, MAX_FT);
        snprintf(tok, sizeof tok, "%.*s", (int)len, p);
        if (!strcmp(tok, "auto"))
            return util_errf(e, UTIL_EXIT_USAGE, "--finetune '%s': auto "
                             "stands alone (it is %s); give auto, or a list "
                             "of modes", v, ft_auto);
        if (prof_finetune_parse(tok, &c->ft[c->n_ft++], e))
            return strchr(v, ',') ? util_err_prefix(e, "in the list '%s'", v)
                                  : -1;
        if (!p[len]) return 0;
        p += len + 1;
    }
}

/* --schedule LIST: names (or aliases) of plannable schedules, every item
 * given; an empty item is an error, not "all". */
static int sched_list(const char *v, unsigned *mask, util_err *e)
{
    char known[256];
    sim_sched_list(known, sizeof known);
    for (const char *p = v;;) {
        size_t len = strcspn(p, ",");
        char tok[64];
        snprintf(tok, sizeof tok, "%.*s", (int)len, p);
        int k = len < sizeof tok ? sim_sched_parse(tok) : -1;
        /* Hydra's shards: a column of --sweep-host-mem (checked there) */
        if (!strcmp(tok, "hydra")) {
            *mask |= 1u << PLAN_SWEEP_HYDRA;
            if (!p[len]) return 0;
            p += len + 1;
            continue;
        }
        if (!len)
            return util_errf(e, UTIL_EXIT_USAGE, "--schedule '%s': an empty "
                             "name (give one or more of %s, comma-separated; "
                             "leave --schedule out for all)", v, known);
        if (k < 0 || (!sim_sched_plannable((sim_sched)k) &&
                      !sim_sched_offload((sim_sched)k))) {
            const char *near = util_closest(tok, sim_sched_names(),
                                            SIM_SCHED_FILE);
            if (!near && util_closest(tok, (const char *const[]){"hydra"},
                                      1))
                near = "hydra";
            return util_errf(e, UTIL_EXIT_USAGE, "--schedule: unknown "
                             "schedule '%s'%s%s%s (known: %s; with "
                             "--sweep-host-mem also hydra)", tok,
                             near ? " (did you mean '" : "", near ? near : "",
                             near ? "'?)" : "", known);
        }
        *mask |= 1u << k;
        if (!p[len]) return 0;
        p += len + 1;
    }
}

static int parse(int argc, char **argv, cmd *c, util_err *e)
{
    memset(c, 0, sizeof *c);
    c->argv = argv;
    c->hw_at = -1;
    if (ft_list(ft_auto, c, e)) return -1;
    c->fallback = 1;
    plan_opts_init(&c->po);
    c->po.progress = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
#define NEED() do { if (!v) return util_errf(e, UTIL_EXIT_USAGE, "%s needs a value", a); i++; } while (0)
        if (!strcmp(a, "--hw")) {
            c->hw_at = i + 1;
            c->hw_n = 0; /* a repeated --hw replaces the earlier one */
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) { i++; c->hw_n++; }
            if (!c->hw_n)
                return util_errf(e, UTIL_EXIT_USAGE, "--hw needs a GPU type "
                                 "and count, e.g. --hw rtx2080ti x8");
        } else if (!strcmp(a, "--model")) { NEED(); c->model = v; }
        else if (!strcmp(a, "--json")) c->json = 1;
        else if (!strcmp(a, "--out")) { NEED(); c->out = v; }
        else if (!strcmp(a, "--plot")) {
            NEED();
            c->plot = v;
            if (plot_prefix_check(v, e)) return -1;
        }
        else if (!strcmp(a, "--gpus")) { NEED(); c->gpus = v; }
        else if (!strcmp(a, "--sweep-host-mem")) { NEED(); c->sweep_mem = v; }
        else if (!strcmp(a, "--recompute")) {
            if (sim_recompute_arg(argc, argv, &i, &c->po.recompute, e))
                return -1;
        }
        else if (!strcmp(a, "--no-recompute")) c->po.recompute = SIM_RC_NONE;
        else if (!strcmp(a, "--zero") || !strcmp(a, "--fsdp")) {
            if (sim_shard_arg(argc, argv, &i, &c->po.zero, &c->po.fsdp, e) < 0)
                return -1;
        }
        else if (!strcmp(a, "--sequence-parallel")) c->po.sp = 1;
        else if (!strcmp(a, "--no-sequence-parallel")) c->po.sp = 0;
        else if (!strcmp(a, "--no-progress")) c->po.progress = 0;
        else if (!strcmp(a, "--exhaustive")) c->po.exhaustive = 1;
        else if (!strcmp(a, "--sync")) c->sync = 1;
        else if (!strcmp(a, "--async")) c->po.allow_async = 1;
        else if (!strcmp(a, "--finetune")) {
            NEED();
            if (ft_list(v, c, e)) return -1;
            c->fallback = 0;
        }
        else if (!strcmp(a, "--dtype")) {
            NEED();
            if (prof_math_parse(v, &c->po.math, e)) return -1;
        }
        else if (!strcmp(a, "--seq")) {
            NEED();
            if (util_parse_int(v, 1, PROF_MAX_SEQ, &n))
                return util_errf(e, UTIL_EXIT_USAGE, "--seq '%s': expected "
                                 "a token count in [1, %d]", v, PROF_MAX_SEQ);
            c->po.seq_len = (int)n;
        }
        else if (!strcmp(a, "--grad-bucket")) {
            if (sim_grad_bucket_arg(argc, argv, &i, &c->po.grad_bucket, e))
                return -1;
        }
        else if (!strcmp(a, "--flash-attn")) c->po.flash = 1;
        else if (!strcmp(a, "--no-flash-attn")) c->po.flash = -1;
        else if (!strcmp(a, "--batch")) {
            NEED();
            if (util_parse_int(v, 1, 1 << 24, &n))
                return util_errf(e, UTIL_EXIT_USAGE, "--batch '%s': expected a positive integer", v);
            c->po.batch = (int)n;
        } else if (!strcmp(a, "--pp")) {
            NEED();
            if (util_parse_int(v, 1, 1 << 16, &n))
                return util_errf(e, UTIL_EXIT_USAGE, "--pp '%s': expected a positive integer", v);
            c->po.pp = (int)n;
        } else if (!strcmp(a, "--dp") || !strcmp(a, "--tp")) {
            NEED();
            if (util_parse_int(v, 1, 1 << 16, &n))
                return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': expected a positive integer", a, v);
            if (a[2] == 'd') c->po.dp = (int)n;
            else c->po.tp = (int)n;
        } else if (!strcmp(a, "--mbs")) {
            NEED();
            if (util_parse_int(v, 1, 1 << 16, &n))
                return util_errf(e, UTIL_EXIT_USAGE, "--mbs '%s': expected a positive integer", v);
            c->po.mbs = (int)n;
        } else if (!strcmp(a, "--chunks")) {
            NEED();
            if (util_parse_int(v, 1, 64, &n))
                return util_errf(e, UTIL_EXIT_USAGE, "--chunks '%s': expected "
                                 "interleaved 1F1B's chunks per device, 1 "
                                 "to 64", v);
            c->po.chunks = (int)n;
        } else if (!strcmp(a, "--reserve")) {
            NEED();
            if (util_parse_size(v, &c->po.reserve_bytes))
                return util_errf(e, UTIL_EXIT_USAGE, "--reserve '%s': expected a size such as 1G", v);
        } else if (!strcmp(a, "--time-limit")) {
            NEED();
            if (util_parse_double(v, &c->po.time_limit_s) ||
                !(c->po.time_limit_s > 0) || c->po.time_limit_s > 1e7)
                return util_errf(e, UTIL_EXIT_USAGE, "--time-limit '%s': "
                                 "expected seconds, more than 0", v);
        } else if (!strcmp(a, "--state-bytes")) {
            NEED();
            if (util_parse_double(v, &c->po.state_bytes_per_param) ||
                c->po.state_bytes_per_param <= 0)
                return util_errf(e, UTIL_EXIT_USAGE, "--state-bytes '%s': expected a positive number", v);
        } else if ((n = prof_hw_opts_arg(argc, argv, &i, &c->ho, e))) {
            if (n < 0) return -1;
        } else if (!strcmp(a, "--schedule")) {
            NEED();
            if (sched_list(v, &c->po.sched_mask, e)) return -1;
        } else if (!strcmp(a, "--offload-tier")) {
            NEED();
            int t = sim_tier_parse(v);
            if (t < 0)
                return util_errf(e, UTIL_EXIT_USAGE, "--offload-tier '%s': "
                                 "expected auto, dram or nvme", v);
            c->po.offload_tier = t;
        } else {
            const char *opts[] = {"--hw", "--model", "--json", "--out", "--plot",
                                  "--gpus", "--recompute", "--no-recompute",
                                  "--sequence-parallel", "--no-sequence-parallel",
                                  "--batch", "--pp", "--dp", "--tp", "--mbs", "--reserve",
                                  "--state-bytes", "--host-mem", "--nvme", "--gpus-per-server",
                                  "--pcie-gen", "--schedule", "--no-progress",
                                  "--exhaustive", "--sync", "--async", "--time-limit",
                                  "--zero", "--fsdp", "--finetune",
                                  "--sweep-host-mem", "--offload-tier",
                                  "--dtype", "--chunks", "--seq",
                                  "--flash-attn", "--no-flash-attn",
                                  "--grad-bucket"};
            /* exec's budget of a device is the planner's reserve: a
             * user coming from exec is told which */
            if (!strcmp(a, "--mem-budget") || !strcmp(a, "--mem-per-device"))
                return util_errf(e, UTIL_EXIT_USAGE, "unknown option '%s' "
                                 "(it is %s's; the planner takes a GPU's "
                                 "memory from --hw and keeps --reserve SIZE "
                                 "of it for the framework)", a,
                                 !strcmp(a, "--mem-budget")
                                 ? "sluice exec" : "plan --workload");
            const char *near = util_closest(a, opts, sizeof opts / sizeof *opts);
            return util_errf(e, UTIL_EXIT_USAGE, "unknown option '%s'%s%s%s", a,
                             near ? " (did you mean '" : "", near ? near : "",
                             near ? "'?)" : "");
        }
#undef NEED
    }
    if (c->sync && c->po.allow_async)
        return util_errf(e, UTIL_EXIT_USAGE, "--sync and --async contradict "
                         "each other: give one");
    if (c->sync) {
        /* Only schedules with a flush: every step sees the weights of the
         * step before, as in single-device training. */
        c->po.sched_mask = plan_sync_mask(c->po.sched_mask);
        if (!c->po.sched_mask)
            return util_errf(e, UTIL_EXIT_USAGE, "--sync leaves no schedule: "
                             "those given all run without a flush");
    }
    /* as --chunks without interleaving: a knob the schedules given
     * cannot use is said, not ignored */
    if (c->po.allow_async && c->po.sched_mask &&
        plan_sync_mask(c->po.sched_mask) == c->po.sched_mask)
        return util_errf(e, UTIL_EXIT_USAGE, "--async lets the planner "
                         "choose a schedule without a flush, and --schedule "
                         "names none (2bw and mixed have none)");
    if (c->po.chunks && c->po.sched_mask &&
        !(c->po.sched_mask & (1u << SIM_SCHED_INTERLEAVED)))
        return util_errf(e, UTIL_EXIT_USAGE, "--chunks %d: chunks per device "
                         "are interleaved 1F1B's, which --schedule leaves "
                         "out", c->po.chunks);
    if (c->hw_at < 0) return util_errf(e, UTIL_EXIT_USAGE, "--hw is required, e.g. --hw rtx2080ti x8");
    /* as sim refuses it: a tier for schedules that keep no state there */
    int ofl_named = 0;
    for (int k = 0; k < SIM_SCHED_COUNT; k++)
        ofl_named |= (c->po.sched_mask & (1u << k)) &&
                     sim_sched_offload((sim_sched)k);
    if (c->po.offload_tier != SIM_TIER_AUTO && c->po.sched_mask && !ofl_named)
        return util_errf(e, UTIL_EXIT_USAGE, "--offload-tier: the schedules "
                         "given keep the model states on the GPUs (the tier "
                         "is zero-offload's, zero-infinity's and fuyou's)");
    /* as sim refuses them (sim_zero_check): FSDP is ZeRO-3 */
    if (c->po.fsdp && c->po.zero > 0 && c->po.zero != 3)
        return util_errf(e, UTIL_EXIT_USAGE, "--fsdp %s with --zero %d: FSDP "
                         "shards parameters, gradients and optimizer state "
                         "(ZeRO stage 3); give one of them",
                         sim_fsdp_name(c->po.fsdp), c->po.zero);
    if (!c->model) return util_errf(e, UTIL_EXIT_USAGE, "--model is required, e.g. --model t5-3b");
    /* the plan written or printed keeps the paths given */
    for (int i = 0; (c->out || c->json) && i <= c->hw_n; i++)
        if (util_utf8_check(i ? "--hw" : "--model",
                            i ? c->argv[c->hw_at + i - 1] : c->model, e))
            return -1;
    if (strlen(c->model) >= sizeof ((sim_plan *)0)->model)
        return util_errf(e, UTIL_EXIT_USAGE, "--model: '%.40s...' is longer "
                         "than the %zu bytes a plan keeps", c->model,
                         sizeof ((sim_plan *)0)->model - 1);
    /* before the search, which may take minutes */
    const char *ins[] = {c->model, c->argv[c->hw_at]};
    const char *oflag[] = {"--out", "--plot"};
    const char *opath[] = {c->out, c->plot};
    const int opre[] = {0, UTIL_OUT_PLOT};
    if (util_out_check("--out", c->out, 0, ins, 2, e) ||
        util_outs_apart(2, oflag, opath, opre, ins, 2, e))
        return -1;
    return 0;
}

static double gib(double b) { return b / (1024.0 * 1024 * 1024); }

/* Layer names an op range spans: "enc.l3 .. enc.l9"; a cut inside a layer
 * shows the op. */
static void span(const prof_model *m, int a, int b, char *buf, size_t n)
{
    const prof_op *oa = &m->ops[a], *ob = &m->ops[b];
    const prof_layer *la = &m->layers[oa->layer], *lb = &m->layers[ob->layer];
    char s1[64], s2[64];
    if (la->first_op == a) snprintf(s1, sizeof s1, "%s", la->name);
    else snprintf(s1, sizeof s1, "%s", oa->name);
    if (lb->first_op + lb->n_ops - 1 == b) snprintf(s2, sizeof s2, "%s", lb->name);
    else snprintf(s2, sizeof s2, "%s", ob->name);
    if (!strcmp(s1, s2)) snprintf(buf, n, "%s", s1);
    else snprintf(buf, n, "%s..%s", s1, s2);
}

static json_t *alt_json(const plan_result *r)
{
    json_t *arr = json_array();
    for (int s = 0; s < SIM_SCHED_COUNT; s++) {
        if (!sim_sched_plannable((sim_sched)s) && !r->alt[s].tried) continue;
        const plan_alt *a = &r->alt[s];
        json_t *j = json_pack("{s:s,s:b,s:s}", "schedule", sim_sched_name((sim_sched)s),
                              "feasible", a->feasible, "reason",
                              s == (int)r->best && r->found ? "chosen" : a->reason);
        json_object_set_new(j, "samples_per_s", a->feasible ? json_real(a->samples_per_s) : json_null());
        json_object_set_new(j, "iteration_time_s", a->feasible ? json_real(a->iteration_s) : json_null());
        if (a->feasible) {
            /* the layout whole, as the table's p x d x t */
            json_object_set_new(j, "pp", json_integer(a->plan.pp));
            json_object_set_new(j, "dp", json_integer(a->plan.dp > 1
                                                      ? a->plan.dp : 1));
            json_object_set_new(j, "tp", json_integer(a->plan.tp > 1
                                                      ? a->plan.tp : 1));
            if (a->plan.zero)
                json_object_set_new(j, "zero", json_integer(a->plan.zero));
            if (a->plan.sched == SIM_SCHED_INTERLEAVED)
                json_object_set_new(j, "chunks", json_integer(a->plan.chunks));
            json_object_set_new(j, "mbs", json_integer(a->plan.mbs));
            json_object_set_new(j, "microbatches", json_integer(a->plan.n_mb));
            json_object_set_new(j, "recompute",
                                json_string(sim_recompute_name(a->plan.recompute)));
            json_object_set_new(j, "sequence_parallel", json_boolean(a->plan.sp));
            json_object_set_new(j, "peak_mem_bytes", json_real(a->peak_bytes));
        }
        json_array_append_new(arr, j);
    }
    return arr;
}

/* A search the time limit ended says so, with how much it covered. */
static void print_cut_short(const plan_result *r, double limit_s, FILE *f)
{
    if (!r->cut_short) return;
    /* the offload schedules' candidates are made as they are tried:
     * those left are not counted */
    if (r->covered >= r->candidates) {
        fprintf(f, "search cut short by --time-limit %g s: all %ld "
                "candidates covered, but not every offload candidate (the "
                "host's policies, microbatches and data-parallel widths) was "
                "tried; a better plan may be among them\n", limit_s,
                r->candidates);
        return;
    }
    fprintf(f, "search cut short by --time-limit %g s: %ld of %ld candidates "
            "covered (simulated or ruled out by bounds), most promising "
            "first; a better plan may be among the rest\n", limit_s,
            r->covered, r->candidates);
}

static json_t *search_json(const plan_result *r, double limit_s)
{
    json_t *j = json_pack("{s:i,s:i,s:i,s:i,s:b,s:f}", "candidates",
                          (int)r->candidates, "simulated", (int)r->simulated,
                          "pruned", (int)r->pruned, "covered", (int)r->covered,
                          "cut_short", r->cut_short, "seconds", r->seconds);
    json_object_set_new(j, "time_limit_s",
                        limit_s > 0 ? json_real(limit_s) : json_null());
    return j;
}

static void print_answer(const plan_result *r, const prof_model *m,
                         const prof_topo *t, const sim_costs *c,
                         const sim_result *res, json_t *rep, double limit_s)
{
    const plan_alt *b = &r->alt[r->best];
    const sim_plan *p = &b->plan;
    char tmp[64];
    printf("plan for %s on %s\n", m->spec.name, t->name);
    print_cut_short(r, limit_s, stdout);
    /* CPU devices are cores, not GPUs */
    int cpu = prof_topo_cpu(t);
    const char *unit = prof_topo_unit(t);
    /* an encoder-decoder's sample is its input and its target: tokens/s
     * counts both */
    char dec[48] = "";
    if (m->spec.dec_seq_len > 0)
        snprintf(dec, sizeof dec, " in, %d out", m->spec.dec_seq_len);
    printf("  batch %d samples of %d tokens%s; %.2f GiB per %s reserved "
           "(framework, allocator)\n", r->batch, m->spec.seq_len, dec,
           gib(r->reserve_bytes), unit);
    if (p->math)
        printf("  trains in %s (--dtype)\n", prof_math_name(p->math));
    if (p->flash < 0)
        printf("  attention as separate ops, its scores kept "
               "(--no-flash-attn)\n");
    else if (m->spec.flash_attn)
        printf("  attention fused, no scores kept (%s)\n",
               p->flash > 0 ? "--flash-attn"
                            : "the model spec's; --no-flash-attn unfuses it");
    else {
        /* unfused as the spec says: said where a microbatch's scores of
         * one layer take a sixteenth of a device or more */
        double sc = (double)m->spec.heads * m->spec.seq_len *
                    m->spec.seq_len * prof_dtype_bytes(m->spec.dtype) * p->mbs;
        if (sc >= r->capacity_bytes / 16)
            printf("  attention as separate ops (the model spec's): a "
                   "layer's scores take %.2f GiB a microbatch;\n  "
                   "--flash-attn prices it fused, as FlashAttention runs "
                   "it\n", gib(sc));
    }
    prof_dtype mt = prof_spec_math(&m->spec);
    const prof_gpu *fb = prof_topo_dtype_fallback(t, mt);
    /* T5 1.1 (Flan-T5) was trained in bf16 and overflows fp16: its
     * activations grow past fp16's 65504 (Hugging Face's T5 clamps
     * infinities in fp16; fine-tuning it there is known to end in NaN) */
    int t5_11 = m->spec.family == PROF_FAM_T5 && m->spec.gated_mlp;
    if (fb && t5_11 && prof_dtype_fallback(mt) == PROF_DT_FP16)
        printf("  %s trains in %s, which %s lacks: priced in %s, but T5 1.1 "
               "overflows fp16\n  (NaN losses): --dtype fp32 prices what "
               "runs there\n", m->spec.name, prof_dtype_name(mt), fb->name,
               prof_dtype_name(prof_dtype_fallback(mt)));
    else if (t5_11 && mt == PROF_DT_FP16)
        printf("  %s trains in fp16, which T5 1.1 overflows (NaN losses): "
               "--dtype %s\n  prices what runs\n", m->spec.name,
               prof_topo_dtype_fallback(t, PROF_DT_BF16) ? "fp32"
                                                         : "bf16 or fp32");
    else if (fb)
        printf("  %s trains in %s, which %s lacks: priced in %s, as it "
               "would run there\n", m->spec.name, prof_dtype_name(mt),
               fb->name, prof_dtype_name(prof_dtype_fallback(mt)));
    printf("\n");
    char knob[48] = "";
    if (p->sched == SIM_SCHED_INTERLEAVED)
        snprintf(knob, sizeof knob, " (%d chunks per device)", p->chunks);
    else if (p->sched == SIM_SCHED_WAVE)
        snprintf(knob, sizeof knob, " (%d wave%s)", p->waves, p->waves > 1 ? "s" : "");
    char shard[48] = "";
    if (p->fsdp) snprintf(shard, sizeof shard, ", FSDP %s",
                          sim_fsdp_name(p->fsdp));
    else if (p->zero) snprintf(shard, sizeof shard, ", ZeRO-%d", p->zero);
    printf("chosen: %s%s, pipeline %d x data %d x tensor %d, microbatch %d x %d "
           "per replica, recomputation %s%s%s%s\n", sim_sched_name(p->sched), knob,
           p->pp, p->dp, p->tp, p->mbs, p->n_mb,
           p->recompute == SIM_RC_SELECTIVE ? "selective"
           : p->recompute ? "full" : "off",
           p->sp ? ", sequence parallel" : "", shard,
           sim_sched_async(p->sched) ? " (asynchronous: no flush, stale weights)" : "");
    if (!prof_finetune_full(&m->ft)) {
        char md[64], a[16], b[16];
        printf("fine-tuning %s: %s of %s parameters train\n",
               prof_finetune_name(&m->ft, md, sizeof md),
               util_fmt_count(m->train_params, a, sizeof a),
               util_fmt_count(m->params, b, sizeof b));
    }
    util_table *tb = util_table_new(6);
    const char *h[] = {"device", "stages", "holds (layers, or ops where a cut "
                       "splits a layer)", "compute/mb", "peak mem", "capacity"};
    for (int i = 0; i < 6; i++) util_table_col(tb, i, h[i], i == 0 || i == 2 ? 'l' : 'r');
    for (int d = 0; d < p->pp; d++) {
        char dev[16], st[32], holds[160] = "", comp[32], mem[32], cap[32];
        int ns = 0;
        double ns_t = 0;
        for (int s = 0; s < p->n_stages; s++) {
            if (p->stage_device[s] != d) continue;
            char sp[96];
            span(m, p->first_op[s], p->last_op[s], sp, sizeof sp);
            size_t l = strlen(holds);
            snprintf(holds + l, sizeof holds - l, "%s%s", ns ? ", " : "", sp);
            ns++;
            const sim_stage_cost *sc = &c->stage[s];
            ns_t += (double)(sc->f_ns + sc->b_ns + sc->w_ns);
        }
        if (strlen(holds) > 44) strcpy(holds + 41, "...");
        snprintf(dev, sizeof dev, "%s%d", cpu ? "cpu" : "gpu", d);
        snprintf(st, sizeof st, "%d", ns);
        util_fmt_time(ns_t * 1e-9, comp, sizeof comp);
        snprintf(mem, sizeof mem, "%.2f GiB", gib(res->dev[d].peak_bytes));
        snprintf(cap, sizeof cap, "%.2f GiB", gib(res->dev[d].capacity_bytes));
        const char *row[] = {dev, st, holds, comp, mem, cap};
        util_table_row(tb, row);
    }
    util_table_print(tb, stdout, "  ");
    util_table_free(tb);
    double it = json_real_value(json_object_get(rep, "iteration_time_s"));
    json_t *bub = json_object_get(rep, "bubble_fraction");
    double bmean = 0;
    for (size_t i = 0; i < json_array_size(bub); i++)
        bmean += json_number_value(json_array_get(bub, i));
    if (json_array_size(bub)) bmean /= (double)json_array_size(bub);
    printf("\npredicted (simulated): iteration %s, %.2f samples/s, %.0f tokens/s, "
           "%.1f TFLOP/s per %s, MFU %.1f%% (model FLOPs), bubble %.1f%%\n",
           util_fmt_time(it, tmp, sizeof tmp),
           json_number_value(json_object_get(rep, "samples_per_s")),
           json_number_value(json_object_get(rep, "tokens_per_s")),
           json_number_value(json_object_get(rep, "tflops_per_gpu")), unit,
           100 * json_number_value(json_object_get(rep, "mfu")), 100 * bmean);
    /* what the iteration waits on the wires for, where it is not small:
     * a data-parallel plan's bubble reads 0% with its all-reduce exposed */
    json_t *cm = json_object_get(rep, "comm");
    const char *ck;
    json_t *cv;
    int nc = 0, dp = 0;
    json_object_foreach(cm, ck, cv) {
        double ex = json_number_value(json_object_get(cv, "exposed_s")),
               hid = json_number_value(json_object_get(cv, "hidden_s"));
        if (!(ex > 0.01 * it)) continue;
        char a[32], b[32];
        printf("%s%s %s", nc++ ? ", " : "exposed communication per device: ",
               ck, util_fmt_time(ex, a, sizeof a));
        if (hid > 0.005 * it)
            printf(" (%s more hidden)", util_fmt_time(hid, b, sizeof b));
        dp |= !strcmp(ck, "data-parallel");
    }
    /* how the all-reduce ran, which --grad-bucket changes */
    json_t *gbj = json_object_get(rep, "grad_bucket_bytes");
    if (dp && gbj && json_number_value(gbj) > 0) {
        char a[32];
        printf("; the all-reduce in %s gradient buckets during the "
               "backward", util_fmt_bytes(json_number_value(gbj), a,
                                          sizeof a));
    } else if (dp && gbj) {
        printf("; the all-reduce once a stage, after its backward");
    }
    if (nc) printf("\n");
    json_t *un = json_object_get(rep, "unaligned_gemms");
    for (size_t i = 0; i < json_array_size(un); i++) {
        json_t *u = json_array_get(un, i);
        printf("note: %s is %lld wide, not 16 bytes aligned: its GEMMs run "
               "at most %.1f%% of peak (+%s a microbatch); padded to %lld "
               "they would not\n",
               json_string_value(json_object_get(u, "op")),
               (long long)json_integer_value(json_object_get(u, "width")),
               100 * json_number_value(json_object_get(u, "cap")),
               util_fmt_time(json_number_value(json_object_get(
                                 u, "extra_s_per_microbatch")),
                             tmp, sizeof tmp),
               (long long)json_integer_value(json_object_get(
                   u, "padded_width")));
    }
    json_t *stt = json_object_get(rep, "state_tiers");
    if (stt) {
        /* stages whose optimizer state the host keeps and steps */
        json_t *sts = json_object_get(stt, "stages");
        char hb[32], hc[32], nb[32];
        printf("optimizer state on the host (fp32 weights and Adam moments, "
               "stepped by the CPU):");
        for (int t = SIM_TIER_DRAM; t <= SIM_TIER_NVME; t++) {
            int n = 0;
            double worst = 0;
            for (size_t k = 0; k < json_array_size(sts); k++) {
                json_t *x = json_array_get(sts, k);
                if (strcmp(json_string_value(json_object_get(x, "tier")),
                           sim_state_tier_name(t)))
                    continue;
                printf("%s", n++ ? "," : t == SIM_TIER_DRAM ? " DRAM: stage "
                                              : "; NVMe: stage ");
                printf("%zu", k);
                worst = fmax(worst, json_number_value(json_object_get(
                    x, "host_step_s")));
            }
            if (n) printf(" (step off the %s at most %s)",
                          unit, util_fmt_time(worst, hb, sizeof hb));
        }
        printf("\n  host DRAM %s of %s", util_fmt_bytes(json_number_value(
                   json_object_get(stt, "host_bytes")), hb, sizeof hb),
               util_fmt_bytes(json_number_value(json_object_get(
                   stt, "host_capacity_bytes")), hc, sizeof hc));
        double nv = json_number_value(json_object_get(stt, "nvme_bytes"));
        if (nv > 0)
            printf(", NVMe %s", util_fmt_bytes(nv, nb, sizeof nb));
        printf(" (the fullest server)\n");
    }
    json_t *ofl = json_object_get(rep, "offload");
    if (ofl) {
        /* the tiers, and the resource that bounds the step */
        json_t *rs = json_object_get(ofl, "resources");
        char hb[32], hc[32];
        const char *tier = json_string_value(json_object_get(ofl, "tier"));
        printf("offload: model states in %s", !strcmp(tier, "nvme")
               ? "NVMe" : "host DRAM");
        if (!strcmp(tier, "nvme")) {
            long long nd = (long long)json_integer_value(
                json_object_get(ofl, "drives"));
            printf(" (%lld drive%s)", nd, nd == 1 ? "" : "s");
        }
        if (p->dp > 1)
            printf(", partitioned over %d data-parallel %ss", p->dp, unit);
        printf(", host DRAM %s of %s; busy:", util_fmt_bytes(
                   json_number_value(json_object_get(ofl, "host_bytes")), hb,
                   sizeof hb),
               util_fmt_bytes(json_number_value(json_object_get(
                   ofl, "host_capacity_bytes")), hc, sizeof hc));
        for (int k = 0; k < SIM_OFL_RES_COUNT; k++) {
            if (k == SIM_OFL_NVME && strcmp(tier, "nvme")) continue;
            if (k == SIM_OFL_RING && p->dp < 2) continue;
            double b = json_number_value(json_object_get(
                json_object_get(rs, sim_offload_res_key(k)), "busy_s"));
            printf("%s %s %.0f%%", k ? "," : "", sim_offload_res_name(k, t),
                   it > 0 ? 100 * b / it : 0);
        }
        const char *bound = json_string_value(json_object_get(ofl, "bound_by"));
        for (int k = 0; k < SIM_OFL_RES_COUNT; k++)
            if (!strcmp(bound, sim_offload_res_key(k)))
                printf("\nbound by: %s\n", sim_offload_res_name(k, t));
    }

    printf("\nbest plan of every schedule:\n");
    util_table *ta = util_table_new(7);
    const char *ha[] = {"schedule", "samples/s", "iteration", "p x d x t",
                        "mbs x n", "peak mem", "result"};
    for (int i = 0; i < 7; i++) util_table_col(ta, i, ha[i], i == 0 || i == 6 ? 'l' : 'r');
    /* Reasons are cut to keep the table within 100 columns (the widest
     * microbatch column, knobs and all, takes from them); --json has
     * them whole. */
    size_t mbw = 10;
    for (int s = 0; s < SIM_SCHED_COUNT; s++) {
        const plan_alt *a = &r->alt[s];
        char tag[16], mb[48];
        if (!a->feasible) continue;
        snprintf(mb, sizeof mb, "%d x %d%s", a->plan.mbs, a->plan.n_mb,
                 plan_knob_tag(&a->plan, tag, sizeof tag));
        if (strlen(mb) > mbw) mbw = strlen(mb);
    }
    size_t why_n = mbw - 10 < 10 ? 30 - (mbw - 10) : 20;
    for (int s = 0; s < SIM_SCHED_COUNT; s++) {
        if (!sim_sched_plannable((sim_sched)s) && !r->alt[s].tried) continue;
        const plan_alt *a = &r->alt[s];
        char sps[32] = "-", itb[32] = "-", pp[32] = "-", mb[32] = "-", pk[32] = "-";
        if (a->feasible) {
            snprintf(sps, sizeof sps, "%.2f", a->samples_per_s);
            util_fmt_time(a->iteration_s, itb, sizeof itb);
            snprintf(pp, sizeof pp, "%dx%dx%d", a->plan.pp, a->plan.dp, a->plan.tp);
            char tag[16];
            snprintf(mb, sizeof mb, "%d x %d%s", a->plan.mbs, a->plan.n_mb,
                     plan_knob_tag(&a->plan, tag, sizeof tag));
            snprintf(pk, sizeof pk, "%.2f GiB", gib(a->peak_bytes));
        }
        char why[31];
        const char *rs = s == (int)r->best ? "chosen" : a->reason;
        snprintf(why, why_n + 1, "%s", rs);
        if (strlen(rs) > why_n) strcpy(why + why_n - 3, "...");
        const char *row[] = {sim_sched_name((sim_sched)s), sps, itb, pp, mb, pk, why};
        util_table_row(ta, row);
    }
    util_table_print(ta, stdout, "  ");
    util_table_free(ta);
    /* the reasons cut above, whole, each once with the schedules it is
     * theirs (an offload schedule's says how much is missing, where) */
    _Static_assert(SIM_SCHED_COUNT <= 32, "a bit per schedule");
    unsigned said = 0;
    for (int s = 0; s < SIM_SCHED_COUNT; s++) {
        const plan_alt *a = &r->alt[s];
        if (s == (int)r->best || (said >> s & 1) ||
            (!sim_sched_plannable((sim_sched)s) && !a->tried) ||
            strlen(a->reason) <= why_n)
            continue;
        printf("  ");
        for (int q = s; q < SIM_SCHED_COUNT; q++)
            if (q != (int)r->best &&
                (sim_sched_plannable((sim_sched)q) || r->alt[q].tried) &&
                !(said >> q & 1) && !strcmp(r->alt[q].reason, a->reason)) {
                printf("%s%s", said >> s & 1 ? ", " : "",
                       sim_sched_name((sim_sched)q));
                said |= 1u << q;
            }
        printf(": %s\n", a->reason);
    }
    /* a faster asynchronous plan left out by default says what it is */
    int fa = -1;
    for (int s = 0; s < SIM_SCHED_COUNT; s++)
        if (r->alt[s].feasible && sim_sched_async((sim_sched)s) &&
            s != (int)r->best &&
            /* faster by a figure the answer shows (0.1%) */
            r->alt[s].samples_per_s > 1.0005 * r->alt[r->best].samples_per_s &&
            (fa < 0 || r->alt[s].samples_per_s > r->alt[fa].samples_per_s))
            fa = s;
    if (fa >= 0)
        printf("%s would be %.1f%% faster, but it is asynchronous: no flush,"
               "\neach step computed on weights one or more updates old, so "
               "the model differs\nfrom data-parallel training's; --async "
               "lets the planner choose it\n", sim_sched_name((sim_sched)fa),
               100 * (r->alt[fa].samples_per_s /
                      r->alt[r->best].samples_per_s - 1));
    const prof_gpu *g = prof_topo_gpu(t, 0);
    printf("\nlower bound: %s per iteration (all model FLOPs spread over %d "
           "%s%s at %.0f%% of %s's peak); the chosen plan is %.2fx the bound\n",
           util_fmt_time(r->lower_bound_s, tmp, sizeof tmp), t->n_gpus, unit,
           t->n_gpus == 1 ? "" : "s",
           100 * g->eff.gemm_max, g->name, it / r->lower_bound_s);
    printf("search: %ld candidates, %ld simulated, %ld pruned by bounds, %.2f s\n",
           r->candidates, r->simulated, r->pruned, r->seconds);
    print_cut_short(r, limit_s, stdout);
}

/* One fine-tuning mode's search. */
typedef struct ft_try {
    prof_finetune ft;
    prof_model *m;            /* NULL: the mode does not apply (why) */
    char why[200];
    plan_result r;
    int searched;
} ft_try;

static const char *ft_str(const prof_finetune *f, char *buf, size_t n)
{
    return prof_finetune_name(f, buf, n);
}

/* What each mode tried gave: a table, or a JSON array. */
static void print_modes(const ft_try *tr, int n, int best, FILE *f)
{
    fprintf(f, "\nfine-tuning modes:\n");
    util_table *tb = util_table_new(6);
    const char *h[] = {"mode", "trains", "samples/s", "iteration",
                       "peak mem", "result"};
    for (int i = 0; i < 6; i++)
        util_table_col(tb, i, h[i], i == 0 || i == 5 ? 'l' : 'r');
    for (int k = 0; k < n; k++) {
        const ft_try *x = &tr[k];
        char md[64], trn[48] = "-", sps[32] = "-", it[32] = "-", pk[32] = "-";
        char why[64];
        ft_str(&x->ft, md, sizeof md);
        if (x->m) {
            char a[16], b[16];
            snprintf(trn, sizeof trn, "%s of %s",
                     util_fmt_count(x->m->train_params, a, sizeof a),
                     util_fmt_count(x->m->params, b, sizeof b));
        }
        const plan_result *r = &x->r;
        if (x->m && x->searched && r->found) {
            const plan_alt *a = &r->alt[r->best];
            snprintf(sps, sizeof sps, "%.2f", a->samples_per_s);
            util_fmt_time(a->iteration_s, it, sizeof it);
            snprintf(pk, sizeof pk, "%.2f GiB", gib(a->peak_bytes));
            if (k == best)
                snprintf(why, sizeof why, "chosen");
            else
                snprintf(why, sizeof why, "slower: %.1f%% of the best",
                         100 * a->samples_per_s /
                         tr[best].r.alt[tr[best].r.best].samples_per_s);
        } else if (x->m && x->searched) {
            if (isfinite(r->min_need_bytes))
                snprintf(why, sizeof why, "does not fit: needs %.1f GiB",
                         gib(r->min_need_bytes));
            else
                snprintf(why, sizeof why, "does not fit");
        } else {
            snprintf(why, sizeof why, "%.60s", x->why);
        }
        const char *row[] = {md, trn, sps, it, pk, why};
        util_table_row(tb, row);
    }
    util_table_print(tb, f, "  ");
    util_table_free(tb);
}

static json_t *modes_json(const ft_try *tr, int n, int best)
{
    json_t *arr = json_array();
    for (int k = 0; k < n; k++) {
        const ft_try *x = &tr[k];
        char md[64];
        json_t *j = json_pack("{s:s,s:b}", "finetune",
                              ft_str(&x->ft, md, sizeof md), "chosen",
                              k == best);
        int found = x->m && x->searched && x->r.found;
        json_object_set_new(j, "feasible", json_boolean(found));
        if (x->m) {
            json_object_set_new(j, "params", json_real(x->m->params));
            json_object_set_new(j, "train_params",
                                json_real(x->m->train_params));
        }
        if (found) {
            const plan_alt *a = &x->r.alt[x->r.best];
            json_object_set_new(j, "samples_per_s",
                                json_real(a->samples_per_s));
            json_object_set_new(j, "iteration_time_s",
                                json_real(a->iteration_s));
            json_object_set_new(j, "peak_mem_bytes", json_real(a->peak_bytes));
        } else if (x->m && x->searched) {
            json_object_set_new(j, "reason", json_string(x->r.advice));
        } else {
            json_object_set_new(j, "reason", json_string(x->why));
        }
        json_array_append_new(arr, j);
    }
    return arr;
}

/* Plans each fine-tuning mode the user allows (by default full, then
 * LoRA and QLoRA only where full training fits nowhere); *best is the
 * fastest mode that fits, -1 for none. A mode that cannot apply to the
 * model is an error when it is the only one asked for, else a row. */
static int search_modes(cmd *c, const prof_topo *t, const char *hw,
                        ft_try *tr, int *n_tr, int *best, util_err *e)
{
    *best = -1;
    *n_tr = 0;
    prof_model_spec spec;
    if (plan_model_spec(c->model, &c->po, &spec, e)) return -1;
    for (int k = 0; k < c->n_ft && !(c->fallback && *best >= 0); k++) {
        ft_try *x = &tr[k];
        memset(x, 0, sizeof *x);
        x->ft = c->ft[k];
        *n_tr = k + 1;
        util_err me = {0};
        x->m = prof_model_for_topo(prof_model_build(&spec, e), t, e);
        if (!x->m) return -1;
        if (prof_model_finetune(x->m, &x->ft, &me)) {
            prof_model_free(x->m);
            x->m = NULL;
            if (c->n_ft == 1) {
                *e = me;
                return -1;
            }
            snprintf(x->why, sizeof x->why, "%s", me.msg);
            continue;
        }
        plan_opts po = c->po;
        if (k > 0) po.progress = 0;
        if (plan_search(x->m, t, c->model, hw, &po, &x->r, e)) return -1;
        x->searched = 1;
        /* no layout takes the options: no other mode would either */
        if (c->fallback && !x->r.found && !x->r.candidates) break;
        if (x->r.found &&
            (*best < 0 || x->r.alt[x->r.best].samples_per_s >
                              tr[*best].r.alt[tr[*best].r.best].samples_per_s))
            *best = k;
    }
    return 0;
}

static void modes_free(ft_try *tr, int n)
{
    for (int k = 0; k < n; k++) {
        if (tr[k].searched) plan_result_free(&tr[k].r);
        prof_model_free(tr[k].m);
    }
}

static int one(cmd *c, util_err *e)
{
    prof_topo *t = prof_topo_from_args(c->hw_n, c->argv + c->hw_at, &c->ho, e);
    if (!t) return -1;
    char hw[256] = "";
    for (int i = 0; i < c->hw_n; i++) {
        size_t l = strlen(hw);
        snprintf(hw + l, sizeof hw - l, "%s%s", i ? " " : "", c->argv[c->hw_at + i]);
    }
    size_t l = strlen(hw);
    snprintf(hw + l, sizeof hw - l, "%s", c->ho.text);
    ft_try tr[MAX_FT];
    int n_tr = 0, best = -1;
    int rc = search_modes(c, t, hw, tr, &n_tr, &best, e);
    /* the table of modes shows when more than one was planned */
    int show_modes = n_tr > 1;
    sim_costs *cs = NULL;
    sim_ir *ir = NULL;
    sim_engine *en = NULL;
    if (rc == 0 && best < 0) {
        /* nothing fits: the first mode's search says why */
        const plan_result *r0 = &tr[0].r;
        int k0 = 0;
        while (k0 < n_tr && !tr[k0].searched) k0++;
        if (k0 < n_tr) r0 = &tr[k0].r;
        /* would more host DRAM or drives hold a plan? Searched again
         * without their limits where some candidate lacked them */
        plan_host_short hs;
        memset(&hs, 0, sizeof hs);
        int hshort = 0;
        /* the first mode some candidate of which lacked the host (full
         * training may need more GPUs whatever the host, LoRA only
         * more DRAM) */
        int kh = -1;
        for (int k = k0; k < n_tr && kh < 0; k++)
            for (int s = 0; tr[k].searched && s < SIM_SCHED_COUNT; s++)
                if (tr[k].r.alt[s].lack) kh = k;
        if (kh >= 0) {
            util_err he;
            prof_topo *u = prof_topo_from_args(c->hw_n, c->argv + c->hw_at,
                                               &c->ho, &he);
            if (u) {
                hshort = plan_search_host_short(tr[kh].m, t, u, c->model, hw,
                                                &c->po, &tr[kh].r, &hs, &he);
                prof_topo_free(u);
            }
            /* a failed search for more host says nothing more: the
             * answer stands as the first search gave it */
            if (!u || hshort < 0) {
                hshort = 0;
                memset(&hs, 0, sizeof hs);
            }
        }
        char more[600] = "";
        if (hs.cut == 1)
            snprintf(more, sizeof more, "; the time limit ended the search "
                     "with more host memory");
        if (hshort) {
            char nd[32], hv[32], nn[32], nh[32], dram[120] = "", nvme[120] = "";
            int dr = hs.dram_need > hs.dram_have;
            int nv = hs.nvme_need > hs.nvme_have;
            if (dr)
                snprintf(dram, sizeof dram, "%s of DRAM a server, which has "
                         "%s", util_fmt_bytes(hs.dram_need, nd, sizeof nd),
                         util_fmt_bytes(hs.dram_have, hv, sizeof hv));
            if (nv)
                snprintf(nvme, sizeof nvme, "%s on a server's drives, which "
                         "hold %s", util_fmt_bytes(hs.nvme_need, nn, sizeof nn),
                         util_fmt_bytes(hs.nvme_have, nh, sizeof nh));
            char md[64] = "";
            if (n_tr > 1) {
                ft_str(&tr[kh].ft, md, sizeof md);
                strcat(md, " with ");
            }
            /* what is short: DRAM, the drives or both */
            snprintf(more, sizeof more, "; with more %s %s%s fits: "
                     "it needs %s%s%s (%s%s%s)%s",
                     dr && nv ? "host memory and drives"
                     : nv ? "drives" : "host memory", md,
                     sim_sched_name(hs.sched), dram, dr && nv ? " and " : "",
                     nvme,
                     dr && nv && !t->own_nodes ? "give --host-mem and --nvme N"
                     : dr ? prof_topo_more_dram(t) : "",
                     dr && nv && t->own_nodes ? " and " : "",
                     nv && (!dr || t->own_nodes) ? prof_topo_more_drives(t)
                                                 : "",
                     hs.cut == 2 ? " (the time limit ended the search for "
                     "the least host: these are its needs with a host "
                     "without bound)" : "");
        }
        if (c->json) {
            json_t *j = json_pack("{s:b,s:s}", "found", 0, "advice",
                                  k0 < n_tr ? r0->advice : tr[0].why);
            if (k0 < n_tr) {
                json_object_set_new(j, "alternatives", alt_json(r0));
                json_object_set_new(j, "lower_bound_s",
                                    json_real(r0->lower_bound_s));
                json_object_set_new(j, "search",
                                    search_json(r0, c->po.time_limit_s));
                if (hshort) {
                    char md[64];
                    json_object_set_new(j, "host_tier_short", json_pack(
                        "{s:s,s:s,s:f,s:f,s:f,s:f,s:b}", "schedule",
                        sim_sched_name(hs.sched), "finetune",
                        ft_str(&tr[kh].ft, md, sizeof md), "dram_need_bytes",
                        hs.dram_need, "dram_bytes", hs.dram_have,
                        "nvme_need_bytes", hs.nvme_need, "nvme_bytes",
                        hs.nvme_have, "settled", hs.cut != 2));
                }
                if (hs.cut == 1)
                    json_object_set_new(j, "host_search_cut_short",
                                        json_true());
            }
            if (show_modes)
                json_object_set_new(j, "finetune_modes",
                                    modes_json(tr, n_tr, best));
            util_json_print(j, stdout);
            json_decref(j);
        } else if (show_modes) {
            print_modes(tr, n_tr, best, stdout);
        }
        /* options no layout takes, and host DRAM or drives given too
         * small to hold what offloading needs there, are the user's to
         * change (code 2); plans that do not fit the GPUs, the
         * machine's (1) */
        int usage = k0 < n_tr && ((!r0->candidates && !r0->found) ||
                                  hshort);
        util_errf(e, usage ? UTIL_EXIT_USAGE : UTIL_EXIT_FAIL, "%s%s%s",
                  k0 < n_tr ? r0->advice : tr[0].why, more,
                  show_modes ? "; no fine-tuning mode tried fits either "
                  "(the table above)" : "");
        rc = -1;
    } else if (rc == 0) {
        plan_result *rp = &tr[best].r;
        const prof_model *m = tr[best].m;
        const sim_plan *p = &rp->alt[rp->best].plan;
        sim_result res;
        rc = plan_simulate(p, m, t, rp->reserve_bytes, c->plot != NULL, &cs,
                           &ir, &en, &res, e);
        if (rc == 0) {
            json_t *rep = sim_report_json(p, m, t, cs, &res, ir);
            if (c->json) {
                json_object_set_new(rep, "found", json_true());
                json_object_set_new(rep, "plan", sim_plan_json(p, m));
                json_object_set_new(rep, "alternatives", alt_json(rp));
                json_object_set_new(rep, "lower_bound_s", json_real(rp->lower_bound_s));
                json_object_set_new(rep, "reserve_bytes", json_real(rp->reserve_bytes));
                if (rp->note[0])
                    json_object_set_new(rep, "note", json_string(rp->note));
                json_object_set_new(rep, "search",
                                    search_json(rp, c->po.time_limit_s));
                if (show_modes)
                    json_object_set_new(rep, "finetune_modes",
                                        modes_json(tr, n_tr, best));
                util_json_print(rep, stdout);
            } else {
                if (c->fallback && best > 0) {
                    char md[64];
                    printf("full fine-tuning does not fit: %s\nfell back to "
                           "%s (only the adapters train; --finetune full "
                           "refuses instead)\n\n", tr[0].r.advice,
                           ft_str(&tr[best].ft, md, sizeof md));
                }
                if (c->fallback && best == 0 && sim_sched_offload(p->sched) &&
                    searched_on_gpu(c->po.sched_mask))
                    printf("full fine-tuning fits only with its model states "
                           "offloaded to the host; --finetune auto also plans "
                           "LoRA and QLoRA (adapters train, on the GPU)\n\n");
                if (rp->note[0]) printf("%s\n\n", rp->note);
                print_answer(rp, m, t, cs, &res, rep, c->po.time_limit_s);
                if (show_modes) print_modes(tr, n_tr, best, stdout);
            }
            json_decref(rep);
            if (c->out && sim_plan_save(c->out, p, m, e)) rc = -1;
            if (rc == 0 && c->plot) {
                /* the plot reads a trace, written for it and removed */
                char tpath[1100], sfx[64];
                snprintf(tpath, sizeof tpath, "%s%s", c->plot,
                         util_tmp_suffix("trace", sfx, sizeof sfx));
                if (sim_trace_write(tpath, ir, &res, cs, e)) rc = -1;
                else {
                    int prc = plot_pipeline(tpath, c->plot, e);
                    if (prc < 0) rc = -1;
                    else if (prc > 0) fprintf(stderr, "sluice plan: %s\n", e->msg);
                }
                unlink(tpath);
            }
        }
    }
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(cs);
    modes_free(tr, n_tr);
    prof_topo_free(t);
    return rc;
}

int plan_cmd_main(int argc, char **argv)
{
    /* thousands of simulations, each allocating and freeing its arrays */
    util_heap_keep();
    if (plan_wl_wanted(argc, argv)) return plan_wl_main(argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    cmd c;
    util_err e = {0};
    int rc;
    if (parse(argc, argv, &c, &e)) rc = -1;
    else if (c.gpus && !c.fallback && c.n_ft > 1) {
        rc = util_errf(&e, UTIL_EXIT_USAGE, "--gpus plans one fine-tuning "
                       "mode: give --finetune a single one");
    } else if (c.sweep_mem && (c.gpus || (!c.fallback && c.n_ft > 1))) {
        rc = util_errf(&e, UTIL_EXIT_USAGE, "--sweep-host-mem sweeps one "
                       "GPU's host with one fine-tuning mode: leave out "
                       "--gpus, give --finetune a single mode");
    } else if ((c.sweep_mem || c.gpus) && c.out) {
        rc = util_errf(&e, UTIL_EXIT_USAGE, "--out writes the chosen plan; "
                       "%s gives a table, no plan (--json prints it)",
                       c.sweep_mem ? "--sweep-host-mem" : "--gpus");
    } else if (c.sweep_mem && c.ho.host_mem_bytes > 0) {
        rc = util_errf(&e, UTIL_EXIT_USAGE, "--sweep-host-mem sets the host's "
                       "memory for each row: leave out --host-mem");
    } else if (!c.sweep_mem && (c.po.sched_mask & (1u << PLAN_SWEEP_HYDRA))) {
        rc = util_errf(&e, UTIL_EXIT_USAGE, "--schedule hydra: Hydra's shards "
                       "are planned for many jobs (--models, --workload) and "
                       "in --sweep-host-mem's table, not as one job's "
                       "schedule");
    } else if (c.sweep_mem)
        rc = plan_sweep_host_mem(c.hw_n, c.argv + c.hw_at, &c.ho, c.model,
                                 &c.ft[0], c.sweep_mem, &c.po, c.json,
                                 c.plot, &e);
    else if (c.gpus)
        rc = plan_capacity(c.hw_n, c.argv + c.hw_at, &c.ho, c.model,
                           &c.ft[0], c.gpus, &c.po, c.json, c.plot, &e);
    else rc = one(&c, &e);
    if (rc == 0) return 0;
    fprintf(stderr, "sluice plan: %s\n", e.msg);
    return e.code ? e.code : UTIL_EXIT_FAIL;
}

/* `sluice validate FILE.csv...`: predicted against measured throughput. */
int plan_validate_main(int argc, char **argv)
{
    int json = 0, nfiles = 0, rc = 0;
    util_heap_keep();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: sluice validate [--json] FILE.csv...\n\n"
                   "Plans every row of a table of published measurements with\n"
                   "its layout and batch fixed and prints predicted against\n"
                   "measured TFLOP/s per GPU, per-row error and the mean\n"
                   "absolute percentage error (validation/ holds the tables).\n");
            return 0;
        }
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "sluice validate: unknown option '%s'\n", argv[i]);
            return UTIL_EXIT_USAGE;
        }
    }
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') continue;
        nfiles++;
        util_err e = {0};
        /* --json names the table */
        if ((json && util_utf8_check("the table path", argv[i], &e)) ||
            plan_validate_file(argv[i], json, stdout, &e)) {
            fprintf(stderr, "sluice validate: %s\n", e.msg);
            if (e.code > rc) rc = e.code;
        }
    }
    if (!nfiles) {
        fprintf(stderr, "sluice validate: name a table, e.g. validation/"
                "megatron-sc21-table1.csv\n");
        return UTIL_EXIT_USAGE;
    }
    return rc;
}
