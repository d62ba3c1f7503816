/* `sluice sim`: simulate one training iteration of a plan given on the
 * command line or as a plan file; print the summary (or JSON), and write
 * the plan, a Perfetto trace and gnuplot plots on request. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "plots/plots.h"
#include "sim/sim.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: sluice sim --hw GPU xN --model NAME --schedule S --pp P\n"
        "                  --mbs B --microbatches M [options]\n"
        "       sluice sim --plan plan.json [options]\n\n"
        "--hw GPU without a count is one standard 8-GPU server of that GPU\n"
        "(GPU x8); sluice profile list names the GPUs.\n\n"
        "schedules (--schedule S):\n");
    sim_sched_help(f, "  ");
    fprintf(f,
        "\noptions:\n"
        "  --dp D                 data-parallel replicas of the pipeline (of\n"
        "                         an offload schedule: D GPUs of one server\n"
        "                         sharing its host, the states partitioned)\n"
        "  --tp T                 tensor-parallel GPUs per stage (inside a node);\n"
        "                         GPU = (dp_rank*pp + pp_rank)*tp + tp_rank\n"
        "  --chunks V             interleaved: chunks (stages) per device\n"
        "                         (default 2; 1 is 1F1B)\n"
        "  --schedule-file FILE   run the per-rank action lists of a PyTorch\n"
        "                         pipelining CSV (0F0,0F1,0B0,...) with the\n"
        "                         stage mapping of --schedule (default 1f1b)\n"
        "  --emit-schedule        print the schedule in that form and stop\n"
        "  --partition even|balanced|LIST  stage cuts (LIST: layers per stage,\n"
        "                         e.g. 4,4,5,3); default balanced\n"
        "  --stages S             stages for mixed (default 2 x pp)\n"
        "  --waves W              waves of the wave schedule (default 1)\n"
        "  --recompute [MODE]     activation recomputation: full (the\n"
        "                         default: each layer keeps its input and\n"
        "                         is recomputed before its backward),\n"
        "                         selective (the attention core only) or\n"
        "                         none (also --no-recompute)\n"
        "  --sequence-parallel    split norms and dropouts over the tensor-\n"
        "                         parallel group (needs --tp 2 or more)\n"
        "  --zero N               ZeRO stage over each stage's data-parallel\n"
        "                         group: 1 shards the optimizer state, 2 also\n"
        "                         the gradients, 3 also the parameters\n"
        "  --fsdp full|hybrid     PyTorch FSDP: full = ZeRO-3 over the group,\n"
        "                         hybrid = ZeRO-3 inside a server, replicated\n"
        "                         across servers\n"
        "  --finetune MODE        which parameters train: full (default),\n"
        "                         frozen:N (embedding and first N blocks\n"
        "                         frozen), lora:R[:TARGETS] (rank-R adapters,\n"
        "                         base frozen; TARGETS from q, k, v, out,\n"
        "                         gate, up, down, qkv, attn, mlp, all, joined\n"
        "                         by '+'; default q+v), qlora:R[:TARGETS]\n"
        "                         (LoRA over a 4-bit base; default all)\n"
        "  --dtype fp32|tf32|fp16|bf16  the precision it trains in instead\n"
        "                         of the model spec's (tf32: fp32 with the\n"
        "                         products in TF32 on the tensor cores)\n"
        "  --seq N                tokens a sample instead of the model spec's\n"
        "                         (a fine-tuning's length; at most its\n"
        "                         learned positions)\n"
        "  --flash-attn, --no-flash-attn  attention as one fused kernel\n"
        "                         that keeps no scores (FlashAttention,\n"
        "                         PyTorch's fused attention), or as its\n"
        "                         separate ops, instead of as the model\n"
        "                         spec says (flash_attn)\n"
        "  --grad-bucket SIZE     the data-parallel all-reduce in buckets of\n"
        "                         SIZE of gradients, each reduced as soon as\n"
        "                         the backward has computed it (default on\n"
        "                         GPUs 25M, PyTorch DDP's); 0 or stage: one\n"
        "                         per stage after its backward, as Megatron-LM\n"
        "                         without --overlap-grad-reduce (default on\n"
        "                         CPU devices, whose cores do the copies)\n"
        "  --minibatches K        minibatches simulated by schedules without\n"
        "                         flush (default 4 + ceil(2 depth / m), so the\n"
        "                         measured steady state is past the fill)\n"
        "  --offload-tier auto|dram|nvme  where zero-offload, zero-infinity\n"
        "                         and fuyou keep the model states (auto:\n"
        "                         DRAM for zero-offload, else the NVMe\n"
        "                         drives when the server has any)\n"
        "  --act-swap auto|K[:J]  activations an offload schedule swaps to\n"
        "                         the host (then the drives where DRAM is\n"
        "                         short): the checkpoints of the first K\n"
        "                         stages, and (fuyou) the whole activations\n"
        "                         of the last J, which skip recomputation;\n"
        "                         auto (default) simulates to choose: the\n"
        "                         fewest K that fit, the fastest J\n"
        "  --state-tiers LIST     where each pipeline stage keeps its fp32\n"
        "                         weights and Adam moments: gpu (default),\n"
        "                         dram or nvme (stepped by the host's CPU;\n"
        "                         fp16 weights and gradients stay on the\n"
        "                         GPU); one for every stage, or one per\n"
        "                         stage: gpu,dram,dram,gpu\n"
        "  --host-mem SIZE, --nvme N[:DRIVE], --gpus-per-server N, --pcie-gen G\n"
        "                         the server template's host memory, drives,\n"
        "                         size and PCIe (kept with the plan's hw)\n"
        "  --state-bytes N        weights+grads+optimizer bytes per parameter\n"
        "                         (default 16: Adam, mixed precision)\n"
        "  --json                 print the summary as JSON\n"
        "  --ops                  also each op's forward, input-gradient and\n"
        "                         weight-gradient time per microbatch on its\n"
        "                         stage's device, and its share of the stage\n"
        "  --trace FILE           write a Chrome/Perfetto trace\n"
        "  --plot PREFIX          write PREFIX-timeline.{png,svg} and\n"
        "                         PREFIX-memory.{png,svg} (needs gnuplot)\n"
        "  --measured TRACE       with --plot: PREFIX-compare.{png,svg}, a run\n"
        "                         of this plan (sluice exec --trace) above the\n"
        "                         simulation, memory below; beside the\n"
        "                         images their PREFIX-*.dat and PREFIX*.gp\n"
        "  --out FILE             write the plan file\n"
        "\n" UTIL_SIZE_HELP
        "\nexit codes: 0 simulated and it fits, 1 a device's memory runs over\n"
        "(the answer is printed, with the task where it does), 2 bad usage or\n"
        "input\n");
}

static int need(int i, int argc, char **argv, util_err *e)
{
    if (i + 1 >= argc)
        return util_errf(e, UTIL_EXIT_USAGE, "%s needs a value", argv[i]);
    return 0;
}

static int int_arg(const char *opt, const char *s, long lo, long hi, int *out,
                   util_err *e)
{
    long v;
    if (util_parse_int(s, lo, hi, &v))
        return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': expected an integer "
                         "from %ld to %ld", opt, s, lo, hi);
    *out = (int)v;
    return 0;
}

/* Copies an option's value that the plan file keeps; one too long for it
 * is an error, never cut short. */
static int copy_arg(const char *opt, char *dst, size_t n, const char *v,
                    util_err *e)
{
    if (strlen(v) >= n)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: '%.40s...' is longer than "
                         "the %zu bytes a plan keeps", opt, v, n - 1);
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* Splits "rtx2080ti x8" into words for prof_topo_from_args. */
static prof_topo *load_hw(const char *hw, util_err *e)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", hw);
    char *words[16];
    int n = 0;
    for (char *t = strtok(buf, " \t"); t && n < 16; t = strtok(NULL, " \t"))
        words[n++] = t;
    if (!n) {
        util_errf(e, UTIL_EXIT_USAGE, "--hw needs a GPU type and count, e.g. "
                  "--hw rtx2080ti x8");
        return NULL;
    }
    return prof_topo_from_args(n, words, NULL, e);
}

/* Longest-processing-time assignment of mixed stages to devices. */
static void map_lpt(const prof_model *m, const prof_gpu *g, sim_plan *p)
{
    int S = p->n_stages;
    double *cost = util_calloc((size_t)S, sizeof(double));
    double *load = util_calloc((size_t)p->pp, sizeof(double));
    int *order = util_malloc(sizeof(int) * (size_t)S);
    for (int s = 0; s < S; s++) {
        order[s] = s;
        for (int i = p->first_op[s]; i <= p->last_op[s]; i++)
            for (int k = SIM_F; k <= SIM_W; k++)
                cost[s] += (double)sim_op_ns(g, prof_spec_math(&m->spec), &m->ops[i],
                                             p->mbs, (sim_kind)k, NULL);
    }
    for (int i = 1; i < S; i++) /* insertion sort: by cost, then index */
        for (int j = i; j > 0 && cost[order[j]] > cost[order[j - 1]]; j--) {
            int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    for (int i = 0; i < S; i++) {
        int best = 0;
        for (int d = 1; d < p->pp; d++)
            if (load[d] < load[best]) best = d;
        p->stage_device[order[i]] = best;
        load[best] += cost[order[i]];
    }
    free(cost);
    free(load);
    free(order);
}

typedef struct cmd_opts {
    const char *plan_file, *partition, *trace, *plot, *out, *measured;
    int json, stages, emit, ops;
    int swap_given;             /* --act-swap K[:J] (else auto) */
    int tier_given;             /* --offload-tier */
    int waves_given;            /* --waves */
    int chunks_given;           /* --chunks */
    int minibatches_given;      /* --minibatches */
    const char *state_tiers;    /* --state-tiers LIST */
} cmd_opts;

/* The outputs, before the simulation: each writable, none an input of
 * the run (the plan file, the measured trace, and the model spec,
 * server and schedule files the plan names: an --hw or --model that is
 * no file, a zoo name, is skipped by the check), no two one file. */
static int outputs_check(const cmd_opts *c, const sim_plan *p, util_err *e)
{
    const char *ins[] = {c->plan_file, c->measured, p->model, p->hw,
                         p->sched_file[0] ? p->sched_file : NULL};
    const char *oflag[] = {"--out", "--trace", "--plot"};
    const char *opath[] = {c->out, c->trace, c->plot};
    const int opre[] = {0, 0, UTIL_OUT_PLOT};
    return util_out_check("--out", c->out, 0, ins, 5, e) ||
                   util_out_check("--trace", c->trace, 0, ins, 5, e) ||
                   util_outs_apart(3, oflag, opath, opre, ins, 5, e)
               ? -1 : 0;
}

static int parse(int argc, char **argv, sim_plan *p, cmd_opts *c, util_err *e)
{
    char hw[sizeof p->hw + 1] = "";
    prof_hw_opts ho = {0};         /* template options, kept with --hw */
    int have_sched = 0, have_pp = 0, have_mbs = 0, have_mb = 0, have_rc = 0;
    const char *defining = NULL; /* an option a plan file already fixes */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        static const char *const fixed[] = {
            "--hw", "--model", "--schedule", "--pp", "--mbs",
            "--microbatches", "--waves", "--stages", "--minibatches",
            "--state-bytes", "--partition", "--recompute", "--dp", "--tp",
            "--chunks", "--schedule-file", "--no-recompute",
            "--sequence-parallel", "--zero", "--fsdp", "--finetune",
            "--offload-tier", "--host-mem", "--nvme", "--gpus-per-server",
            "--pcie-gen", "--act-swap", "--state-tiers", "--dtype", "--seq",
            "--flash-attn", "--no-flash-attn", "--grad-bucket", NULL};
        int hn;
        for (int k = 0; fixed[k]; k++)
            if (!strcmp(a, fixed[k]) && !defining) defining = fixed[k];
        if (!strcmp(a, "--hw")) {
            if (need(i, argc, argv, e)) return -1;
            /* a repeated --hw replaces the earlier one */
            size_t n = 0;
            hw[0] = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
                n += (size_t)snprintf(hw + n, sizeof hw - n, "%s%s",
                                      n ? " " : "", argv[++i]);
                if (n >= sizeof hw) n = sizeof hw - 1;
            }
            if (!n)
                return util_errf(e, UTIL_EXIT_USAGE, "--hw needs a GPU type "
                                 "and count, e.g. --hw rtx2080ti x8");
            if (copy_arg("--hw", p->hw, sizeof p->hw, hw, e)) return -1;
        } else if (!strcmp(a, "--model")) {
            if (need(i, argc, argv, e)) return -1;
            if (copy_arg(a, p->model, sizeof p->model, argv[++i], e))
                return -1;
        } else if (!strcmp(a, "--schedule")) {
            if (need(i, argc, argv, e)) return -1;
            const char *s = argv[++i];
            int k = sim_sched_parse(s);
            if (k < 0 || k == SIM_SCHED_FILE) {
                char known[256];
                const char *near = util_closest(s, sim_sched_names(),
                                                SIM_SCHED_FILE);
                return util_errf(e, UTIL_EXIT_USAGE, "--schedule '%s' is not "
                                 "known%s%s%s (known: %s; an order from a "
                                 "file: --schedule-file)", s,
                                 near ? " (did you mean '" : "",
                                 near ? near : "", near ? "'?)" : "",
                                 sim_sched_list(known, sizeof known));
            }
            p->sched = (sim_sched)k;
            have_sched = 1;
        } else if (!strcmp(a, "--pp")) {
            if (need(i, argc, argv, e) ||
                int_arg(a, argv[++i], 1, 4096, &p->pp, e)) return -1;
            have_pp = 1;
        } else if (!strcmp(a, "--mbs")) {
            if (need(i, argc, argv, e) ||
                int_arg(a, argv[++i], 1, 1 << 20, &p->mbs, e)) return -1;
            have_mbs = 1;
        } else if (!strcmp(a, "--microbatches")) {
            if (need(i, argc, argv, e) ||
                int_arg(a, argv[++i], 1, 1000000, &p->n_mb, e)) return -1;
            have_mb = 1;
        } else if (!strcmp(a, "--waves")) {
            if (need(i, argc, argv, e) ||
                int_arg(a, argv[++i], 1, 64, &p->waves, e)) return -1;
            c->waves_given = 1;
        } else if (!strcmp(a, "--stages")) {
            if (need(i, argc, argv, e) ||
                int_arg(a, argv[++i], 1, 1 << 16, &c->stages, e)) return -1;
        } else if (!strcmp(a, "--minibatches")) {
            if (need(i, argc, argv, e) ||
                int_arg(a, argv[++i], 1, 64, &p->n_minibatches, e)) return -1;
            c->minibatches_given = 1;
        } else if (!strcmp(a, "--state-bytes")) {
            if (need(i, argc, argv, e)) return -1;
            if (util_parse_double(argv[++i], &p->state_bytes_per_param) ||
                p->state_bytes_per_param <= 0)
                return util_errf(e, UTIL_EXIT_USAGE, "--state-bytes '%s': "
                                 "expected a positive number", argv[i]);
        } else if (!strcmp(a, "--partition")) {
            if (need(i, argc, argv, e)) return -1;
            c->partition = argv[++i];
        } else if (!strcmp(a, "--recompute")) {
            if (sim_recompute_arg(argc, argv, &i, &p->recompute, e)) return -1;
            have_rc = 1;
        } else if (!strcmp(a, "--no-recompute")) {
            p->recompute = SIM_RC_NONE;
            have_rc = 1;
        } else if (!strcmp(a, "--sequence-parallel")) {
            p->sp = 1;
        } else if (!strcmp(a, "--zero") || !strcmp(a, "--fsdp")) {
            if (sim_shard_arg(argc, argv, &i, &p->zero, &p->fsdp, e) < 0)
                return -1;
        } else if (!strcmp(a, "--finetune")) {
            if (need(i, argc, argv, e) ||
                prof_finetune_parse(argv[++i], &p->ft, e))
                return -1;
        } else if (!strcmp(a, "--dtype")) {
            if (need(i, argc, argv, e) ||
                prof_math_parse(argv[++i], &p->math, e))
                return -1;
        } else if (!strcmp(a, "--seq")) {
            if (need(i, argc, argv, e) ||
                int_arg(a, argv[++i], 1, PROF_MAX_SEQ, &p->seq_len, e))
                return -1;
        } else if (!strcmp(a, "--grad-bucket")) {
            if (sim_grad_bucket_arg(argc, argv, &i, &p->grad_bucket, e))
                return -1;
        } else if (!strcmp(a, "--flash-attn")) {
            p->flash = 1;
        } else if (!strcmp(a, "--no-flash-attn")) {
            p->flash = -1;
        } else if (!strcmp(a, "--json")) {
            c->json = 1;
        } else if (!strcmp(a, "--ops")) {
            c->ops = 1;
        } else if (!strcmp(a, "--plan")) {
            if (need(i, argc, argv, e)) return -1;
            c->plan_file = argv[++i];
        } else if (!strcmp(a, "--trace")) {
            if (need(i, argc, argv, e)) return -1;
            c->trace = argv[++i];
        } else if (!strcmp(a, "--plot")) {
            if (need(i, argc, argv, e)) return -1;
            c->plot = argv[++i];
            if (plot_prefix_check(c->plot, e)) return -1;
        } else if (!strcmp(a, "--out")) {
            if (need(i, argc, argv, e)) return -1;
            c->out = argv[++i];
        } else if (!strcmp(a, "--measured")) {
            if (need(i, argc, argv, e)) return -1;
            c->measured = argv[++i];
        } else if (!strcmp(a, "--dp")) {
            if (need(i, argc, argv, e) ||
                int_arg(a, argv[++i], 1, 4096, &p->dp, e)) return -1;
        } else if (!strcmp(a, "--tp")) {
            if (need(i, argc, argv, e) ||
                int_arg(a, argv[++i], 1, 4096, &p->tp, e)) return -1;
        } else if (!strcmp(a, "--chunks")) {
            if (need(i, argc, argv, e) ||
                int_arg(a, argv[++i], 1, 64, &p->chunks, e)) return -1;
            c->chunks_given = 1;
        } else if (!strcmp(a, "--schedule-file")) {
            if (need(i, argc, argv, e)) return -1;
            if (copy_arg(a, p->sched_file, sizeof p->sched_file, argv[++i],
                         e))
                return -1;
            if (!have_sched) p->sched = SIM_SCHED_1F1B;
            have_sched = 1;
        } else if (!strcmp(a, "--emit-schedule")) {
            c->emit = 1;
        } else if (!strcmp(a, "--offload-tier")) {
            if (need(i, argc, argv, e)) return -1;
            int t = sim_tier_parse(argv[++i]);
            if (t < 0)
                return util_errf(e, UTIL_EXIT_USAGE, "--offload-tier '%s': "
                                 "expected auto, dram or nvme", argv[i]);
            p->tier = t;
            c->tier_given = t != SIM_TIER_AUTO;
        } else if (!strcmp(a, "--state-tiers")) {
            if (need(i, argc, argv, e)) return -1;
            c->state_tiers = argv[++i];
        } else if (!strcmp(a, "--act-swap")) {
            if (need(i, argc, argv, e)) return -1;
            if (strcmp(argv[++i], "auto")) {
                if (sim_swap_parse(argv[i], &p->swap_ckpt, &p->swap_full, e))
                    return -1;
                c->swap_given = 1;
            }
        } else if ((hn = prof_hw_opts_arg(argc, argv, &i, &ho, e))) {
            if (hn < 0) return -1;
        } else {
            static const char *const known[] = {
                "--hw", "--model", "--schedule", "--pp", "--mbs",
                "--microbatches", "--waves", "--stages", "--minibatches",
                "--state-bytes", "--partition", "--recompute", "--json",
                "--plan", "--trace", "--plot", "--out", "--help", "--dp",
                "--tp", "--chunks", "--schedule-file", "--emit-schedule",
                "--measured", "--no-recompute", "--sequence-parallel",
                "--zero", "--fsdp", "--finetune", "--offload-tier",
                "--host-mem", "--nvme", "--gpus-per-server", "--pcie-gen",
                "--act-swap", "--state-tiers", "--ops", "--dtype", "--seq",
                "--flash-attn", "--no-flash-attn", "--grad-bucket"};
            const char *near = util_closest(a, known, sizeof known / sizeof *known);
            return util_errf(e, UTIL_EXIT_USAGE, "unknown option '%s'%s%s%s", a,
                             near ? " (did you mean '" : "", near ? near : "",
                             near ? "'?)" : "");
        }
    }
    if (ho.text[0] && !c->plan_file && p->hw[0]) {
        char all[sizeof hw + sizeof ho.text];
        snprintf(all, sizeof all, "%s%s", p->hw, ho.text);
        if (copy_arg("--hw", p->hw, sizeof p->hw, all, e)) return -1;
    }
    if (c->plan_file && defining)
        return util_errf(e, UTIL_EXIT_USAGE, "%s cannot be combined with "
                         "--plan: the plan file fixes the run (edit it, or "
                         "leave --plan out)", defining);
    if (c->measured && !c->plot)
        return util_errf(e, UTIL_EXIT_USAGE, "--measured draws a run above "
                         "the simulation: give --plot PREFIX too");
    if (outputs_check(c, p, e)) return -1;
    if (c->plan_file) return 0;
    if (c->state_tiers && sim_sched_offload(p->sched))
        return util_errf(e, UTIL_EXIT_USAGE, "--state-tiers: schedule %s "
                         "places every stage's states itself (stage tiers "
                         "are for pipelines)", sim_sched_name(p->sched));
    if (c->tier_given && !sim_sched_offload(p->sched))
        return util_errf(e, UTIL_EXIT_USAGE, "--offload-tier: schedule %s "
                         "keeps the model states on the GPUs (zero-offload, "
                         "zero-infinity and fuyou place them; a pipeline's "
                         "stages take --state-tiers)",
                         sim_sched_name(p->sched));
    if (c->swap_given && !sim_sched_offload(p->sched))
        return util_errf(e, UTIL_EXIT_USAGE, "--act-swap: schedule %s swaps "
                         "no activations (zero-offload, zero-infinity and "
                         "fuyou do)", sim_sched_name(p->sched));
    /* an offload schedule runs on one GPU and checkpoints each layer's
     * input, as the systems it models do */
    if (have_sched && sim_sched_offload(p->sched)) {
        if (!have_pp) p->pp = 1;
        if (!have_rc) p->recompute = SIM_RC_FULL;
        have_pp = 1;
    }
    const char *miss = !p->hw[0] ? "--hw" : !p->model[0] ? "--model"
                     : !have_sched ? "--schedule" : !have_pp ? "--pp"
                     : !have_mbs ? "--mbs" : !have_mb ? "--microbatches" : NULL;
    if (miss)
        return util_errf(e, UTIL_EXIT_USAGE, "%s is required (or --plan FILE);"
                         " see sluice sim --help", miss);
    return 0;
}

/* Every replica is simulated where that fits the size budget; beyond it
 * they are folded where the cluster allows (the same timeline, said on
 * stderr), and a plan that still would not fit is refused with the
 * estimate. */
static int size_check(const sim_plan *p, const prof_topo *tp,
                      sim_cost_opts *co, util_err *e)
{
    int K = sim_sched_async(p->sched) ? p->n_minibatches : 1;
    sim_size z = sim_costs_size(tp, p->n_stages, p->pp, co, p->n_mb, K);
    if (z.bytes <= SIM_SIZE_BUDGET_BYTES) return 0;
    co->fold = 1;
    sim_size f = sim_costs_size(tp, p->n_stages, p->pp, co, p->n_mb, K);
    if (f.bytes > SIM_SIZE_BUDGET_BYTES)
        return util_errf(e, UTIL_EXIT_USAGE, "simulating this plan would take "
                         "about %.1f GB (%.0f million tasks), more than the "
                         "%.0f GB a simulation may use; fewer data-parallel "
                         "replicas, microbatches or stages would fit",
                         f.bytes / 1e9, f.tasks / 1e6,
                         SIM_SIZE_BUDGET_BYTES / 1e9);
    int g = f.simulated_replicas / sim_sched_pipes(p->sched);
    fprintf(stderr, "sluice sim: all %d replicas would take about %.1f GB; "
            "the first %d simulated stand%s for all (the cluster is "
            "symmetric: the same timeline)\n", p->dp, z.bytes / 1e9, g,
            g == 1 ? "s" : "");
    return 0;
}

/* The events a plot draws (ph X: a task's box; C: a counter) as sluice
 * exec --trace writes them: a device of the run (pid), a time in
 * microseconds (ts, dur) and bytes (args.bytes) a run can have. */
static int events_check(const util_jobj *root, json_t *ev, long devices,
                        util_err *e)
{
    const double day_us = 86400e6 * 366; /* a year: no run is longer */
    for (size_t i = 0; i < json_array_size(ev); i++) {
        util_jobj x, a;
        char ph[8] = "";
        long pid, mb;
        double v;
        int have = 0;
        if (util_jelem(root, "traceEvents", ev, i, &x, e) ||
            util_jstr(&x, "ph", 1, ph, sizeof ph, e))
            return -1;
        if (strcmp(ph, "X") && strcmp(ph, "C")) continue;
        if (util_jint(&x, "pid", 1, 0, devices - 1, &pid, e) ||
            util_jnum(&x, "ts", 1, 0, day_us, &v, e) ||
            (!strcmp(ph, "X") && util_jnum(&x, "dur", 1, 0, day_us, &v, e)) ||
            util_jchild(&x, "args", 0, &a, &have, e))
            return -1;
        if (have && !strcmp(ph, "C") &&
            util_jnum(&a, "bytes", 0, 0, 1e18, &v, e))
            return -1;
        if (have && !strcmp(ph, "X") &&
            util_jint(&a, "mb", 0, -1, 1L << 30, &mb, e))
            return -1;
    }
    return 0;
}

/* A measured run to draw above the simulation: a trace sluice exec
 * wrote (--trace) of the same schedule on as many devices. */
static int measured_check(const char *path, const sim_ir *ir, util_err *e)
{
    util_jdoc d;
    if (util_jdoc_load(&d, path, NULL, e)) return -1;
    util_jobj root = util_jroot(&d), od;
    json_t *ev;
    char sched[64] = "";
    long dev = 0;
    int have, rc = -1;
    if (!json_is_object(root.j)) {
        util_errf(e, UTIL_EXIT_USAGE, "%s:1:1: expected a trace (sluice exec "
                  "--trace)", path);
    } else if (!util_jarray(&root, "traceEvents", 1, &ev, e) &&
               !util_jchild(&root, "otherData", 1, &od, &have, e) &&
               !util_jstr(&od, "schedule", 1, sched, sizeof sched, e) &&
               !util_jint(&od, "devices", 1, 1, 1 << 20, &dev, e)) {
        if (strcmp(sched, ir->schedule))
            util_jerr(e, &od, "schedule", "'%s': a run of another schedule "
                      "than this plan's %s", sched, ir->schedule);
        else if (dev != ir->n_devices)
            util_jerr(e, &od, "devices", "%ld: the plan has %d", dev,
                      ir->n_devices);
        else
            rc = events_check(&root, ev, dev, e);
    }
    util_jdoc_free(&d);
    return rc ? util_err_prefix(e, "--measured") : 0;
}

static int run(int argc, char **argv, util_err *e)
{
    sim_plan p;
    sim_plan_init(&p);
    cmd_opts c = {0};
    prof_topo *tp = NULL;
    prof_model *m = NULL;
    sim_costs *cs = NULL;
    sim_ir *ir = NULL;
    sim_engine *en = NULL;
    int rc = -1;
    if (parse(argc, argv, &p, &c, e)) goto out;
    if (c.plan_file) {
        sim_plan loaded;
        if (sim_plan_load(c.plan_file, &loaded, e)) {
            sim_plan_free(&loaded);
            goto out;
        }
        p = loaded;
        char what[600];
        if (sim_plan_files_changed(&p, what, sizeof what))
            fprintf(stderr, "note: %s: %s changed since the plan was made: "
                    "its cuts and batch were chosen for the file as it "
                    "was\n", c.plan_file, what);
        /* the files the plan names are inputs too (its model spec, its
         * server, its schedule): no output may replace them */
        if (outputs_check(&c, &p, e)) goto out;
    }
    if ((c.out || c.json) && sim_plan_paths_utf8(&p, e)) goto out;
    if (!(tp = load_hw(p.hw, e))) {
        if (c.plan_file) sim_plan_field_err(e, c.plan_file, "hw");
        goto out;
    }
    if (!(m = sim_plan_model_file(&p, tp, c.plan_file, e))) goto out;
    if (p.sched_file[0] && (sim_sched_async(p.sched) ||
                            p.sched == SIM_SCHED_CHIMERA)) {
        util_errf(e, UTIL_EXIT_USAGE, "--schedule-file takes the stage "
                  "mapping of a schedule with a flush and one pipeline, not "
                  "%s", sim_sched_name(p.sched));
        goto out;
    }
    if (sim_plan_check_topo(&p, tp, e)) {
        if (c.plan_file) sim_plan_field_err(e, c.plan_file, "tp");
        goto out;
    }
    if (!c.plan_file) {
        int S = p.pp;
        if (p.sched != SIM_SCHED_INTERLEAVED && p.chunks > 1) {
            util_errf(e, UTIL_EXIT_USAGE, "--chunks %d: only the interleaved "
                      "schedule has chunks", p.chunks);
            goto out;
        }
        /* a knob the schedule has not is refused, not ignored */
        if (c.waves_given && p.sched != SIM_SCHED_WAVE) {
            util_errf(e, UTIL_EXIT_USAGE, "--waves %d: only the wave "
                      "schedule has waves (schedule %s)", p.waves,
                      sim_sched_name(p.sched));
            goto out;
        }
        if (c.minibatches_given && !sim_sched_async(p.sched)) {
            util_errf(e, UTIL_EXIT_USAGE, "--minibatches %d: schedule %s "
                      "flushes every iteration, so one is simulated; only "
                      "the schedules without a flush (2bw, mixed) run "
                      "several", p.n_minibatches, sim_sched_name(p.sched));
            goto out;
        }
        /* interleaving is two chunks a device unless told (Megatron-LM
         * asks for them; the planner tries 2 first): one chunk was 1F1B
         * under another name */
        if (p.sched == SIM_SCHED_INTERLEAVED && !c.chunks_given)
            p.chunks = 2;
        if (p.sched == SIM_SCHED_INTERLEAVED) {
            S = p.chunks * p.pp;
        } else if (p.sched == SIM_SCHED_ZBV || p.sched == SIM_SCHED_DUALPIPEV) {
            S = 2 * p.pp;
        }
        int fixed_s = p.sched == SIM_SCHED_INTERLEAVED ||
                      p.sched == SIM_SCHED_ZBV || p.sched == SIM_SCHED_DUALPIPEV;
        if (fixed_s && c.stages && c.stages != S) {
            util_errf(e, UTIL_EXIT_USAGE, "--stages %d: schedule %s maps %d "
                      "stages (%s)", c.stages, sim_sched_name(p.sched), S,
                      p.sched == SIM_SCHED_INTERLEAVED ? "set --chunks instead"
                                                       : "two per device");
            goto out;
        }
        if (fixed_s) {
        } else if (p.sched == SIM_SCHED_WAVE) {
            S = 2 * p.waves * p.pp;
            if (c.stages && c.stages != S) {
                util_errf(e, UTIL_EXIT_USAGE, "--stages %d: the wave maps "
                          "2*W*p = %d stages (set --waves instead)", c.stages,
                          S);
                goto out;
            }
        }
        else if (p.sched == SIM_SCHED_MIXED || p.sched == SIM_SCHED_MIXED_1F1B ||
                 p.sched == SIM_SCHED_MIXED_GPIPE)
            S = c.stages ? c.stages : 2 * p.pp;
        else if (sim_sched_offload(p.sched))
            /* offloaded: a stage per layer, fetched and stepped alone */
            S = c.stages ? c.stages : m->n_layers;
        else if (c.stages && c.stages != p.pp) {
            util_errf(e, UTIL_EXIT_USAGE, "--stages %d: schedule %s runs one "
                      "stage per device (%d)", c.stages,
                      sim_sched_name(p.sched), p.pp);
            goto out;
        }
        if (sim_plan_gpus(&p) > tp->n_gpus) {
            const char *u = prof_topo_unit(tp);     /* GPU or device */
            util_errf(e, UTIL_EXIT_USAGE, "--dp %d x --pp %d x --tp %d = %ld "
                      "%ss but %s has %d %s%s", p.dp, p.pp, p.tp,
                      sim_plan_gpus(&p), u, tp->name, tp->n_gpus, u,
                      tp->n_gpus == 1 ? "" : "s");
            goto out;
        }
        /* on the command line, a pipeline on part of a server is asked
         * for: the plan says so */
        if (sim_plan_gpus(&p) < tp->n_gpus)
            p.gpus_used = (int)sim_plan_gpus(&p);
        sim_plan_stages(&p, S);
        const char *part = c.partition ? c.partition
                         : sim_sched_offload(p.sched) ? "even" : "balanced";
        const prof_gpu *g = prof_topo_gpu(tp, 0);
        int prc;
        /* stage times for balancing: with tensor parallelism each GPU
         * runs a share, the balance is the same */
        if (!strcmp(part, "even"))
            prc = sim_partition_even(m, S, p.first_op, p.last_op, e);
        else if (!strcmp(part, "balanced"))
            prc = sim_partition_balanced(m, g, p.mbs, S, p.first_op,
                                         p.last_op, e);
        else
            prc = sim_partition_list(m, part, S, p.first_op, p.last_op, e);
        if (prc) goto out;
        sim_sched_opts so = {.sched = p.sched, .pp = p.pp, .n_stages = S,
                             .waves = p.waves};
        if (p.sched == SIM_SCHED_MIXED || p.sched == SIM_SCHED_MIXED_1F1B ||
            p.sched == SIM_SCHED_MIXED_GPIPE) {
            if (S < p.pp) {
                util_errf(e, UTIL_EXIT_USAGE, "--stages %d: mixed needs at "
                          "least one stage per device (pp %d)", S, p.pp);
                goto out;
            }
            map_lpt(m, g, &p);
        } else {
            sim_sched_map(&so, p.stage_device);
        }
        if (c.state_tiers &&
            sim_state_tiers_parse(c.state_tiers, S, p.state_tier, e)) {
            util_err_prefix(e, "--state-tiers");
            goto out;
        }
    }
    if (!p.n_minibatches)
        p.n_minibatches = sim_default_minibatches(p.sched, p.pp, p.n_stages,
                                                  p.n_mb);
    char pfield[64];
    if (sim_plan_check_at(&p, m, tp->n_gpus, prof_topo_unit(tp), pfield,
                          sizeof pfield, e)) {
        if (c.plan_file && pfield[0])
            sim_plan_field_err(e, c.plan_file, pfield);
        else if (c.plan_file)
            util_err_prefix(e, "%s", c.plan_file);
        goto out;
    }
    sim_cost_opts co = sim_plan_cost_opts(&p);
    co.op_times = c.ops;
    if (size_check(&p, tp, &co, e)) goto out;
    cs = sim_costs_build(m, tp, p.n_stages, p.first_op, p.last_op,
                         p.stage_device, p.pp, &co, e);
    if (!cs) {
        if (c.plan_file) sim_plan_costs_err(&p, tp, c.plan_file, e);
        goto out;
    }
    if (sim_sched_offload(p.sched) && !c.plan_file && !c.swap_given &&
        sim_offload_swap_search(&p, cs, tp, e))
        goto out;
    sim_sched_opts so = sim_plan_sched_opts(&p);
    if (p.sched_file[0]) {
        if (sim_sched_check(&so, e)) goto out;
        if (!(ir = sim_schedule_file(p.sched_file, &so, cs, e))) goto out;
    } else if (!(ir = sim_schedule(&so, cs, e))) {
        goto out;
    }
    if (c.emit) {
        if (ir->n_minibatches > 1 || sim_sched_pipes(p.sched) > 1) {
            util_errf(e, UTIL_EXIT_USAGE, "--emit-schedule: schedule %s has "
                      "%s, which PyTorch's schedule CSV cannot say",
                      sim_sched_name(p.sched), ir->n_minibatches > 1
                      ? "no flush" : "two pipelines");
            goto out;
        }
        sim_schedule_emit(ir, stdout);
        rc = 0;
        goto out;
    }
    sim_run_opts ro = {.record = c.trace || c.plot};
    en = sim_engine_new(ir, cs, &ro);
    sim_result r;
    if (sim_engine_run(en, &r)) {
        util_errf(e, sim_result_code(&r), "%s",
                  r.msg);
        goto out;
    }
    /* every input read before any output is written */
    if (c.measured && measured_check(c.measured, ir, e)) goto out;
    if (c.out && sim_plan_save(c.out, &p, m, e)) goto out;
    if (c.trace && sim_trace_write(c.trace, ir, &r, cs, e)) goto out;
    int drawn = 0;
    if (c.plot) {
        char tpath[1100], sfx[64];
        snprintf(tpath, sizeof tpath, "%s%s", c.plot,
                 util_tmp_suffix("trace", sfx, sizeof sfx));
        /* the plot reads the trace back: from --trace only when that is
         * a file (not a device or FIFO the trace went through), else
         * from one written for it and removed */
        struct stat st;
        int reuse = c.trace && stat(c.trace, &st) == 0 && S_ISREG(st.st_mode);
        const char *src = reuse ? c.trace : tpath;
        if (!reuse && sim_trace_write(tpath, ir, &r, cs, e)) goto out;
        int prc = c.measured ? plot_compare(c.measured, src, c.plot, e)
                             : plot_pipeline(src, c.plot, e);
        if (!reuse) unlink(tpath);
        if (prc < 0) goto out;
        if (prc > 0) fprintf(stderr, "sluice sim: %s\n", e->msg);
        drawn = prc == 0;
    }
    if (c.json) {
        json_t *j = sim_report_json(&p, m, tp, cs, &r, ir);
        if (c.ops) json_object_set_new(j, "ops", sim_report_ops_json(m, cs));
        util_json_print(j, stdout);
        json_decref(j);
    } else {
        sim_report_print(&p, m, tp, cs, &r, ir, stdout);
        if (c.ops) sim_report_ops_print(m, cs, stdout);
        /* the pictures' names are the prefix's plus what each draws:
         * said, so they need not be looked for */
        if (drawn && c.measured)
            printf("plot: %s-compare.png and .svg (the measured run above "
                   "the simulation)\n", c.plot);
        else if (drawn)
            printf("plot: %s-timeline.png, %s-memory.png and their .svg\n",
                   c.plot, c.plot);
    }
    /* the answer is printed; a plan over a device's memory does not run */
    if (r.oom) {
        util_errf(e, UTIL_EXIT_FAIL, "the plan does not fit: %s",
                  r.oom_task < 0 ? "the model state does not fit a device"
                  : c.json ? "a device's memory runs over (the JSON's "
                  "\"oom_task\" and \"oom_time_s\" say where)"
                  : "a device's memory runs over (OOM above)");
        goto out;
    }
    rc = 0;
out:
    sim_engine_free(en);
    sim_ir_free(ir);
    sim_costs_free(cs);
    prof_model_free(m);
    prof_topo_free(tp);
    sim_plan_free(&p);
    return rc;
}

int sim_cmd_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    util_err e = {0};
    if (argc < 2) {
        usage(stderr);
        return UTIL_EXIT_USAGE;
    }
    if (run(argc, argv, &e)) {
        fprintf(stderr, "sluice sim: %s\n", e.msg);
        return e.code ? e.code : UTIL_EXIT_FAIL;
    }
    return 0;
}
