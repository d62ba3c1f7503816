/* `sluice exec`: for now the single-device reference trainer on the CPU.
 * Parses options, resolves the model through the model zoo, runs
 * exec_train. Exit codes: 0 ok, 1 failed run, 2 bad usage or input. */
#include "exec/exec.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CORPUS "/usr/share/common-licenses/GPL-3"

/* Ctrl-C (or SIGTERM) stops after the current step; with --save the
 * checkpoint is written first. A second Ctrl-C kills as usual. */
static volatile int stop_flag;

static void on_signal(int sig)
{
    stop_flag = 1;
    signal(sig, SIG_DFL);
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: sluice exec --model NAME|FILE [options]\n"
        "\nTrains a GPT-style model on one CPU device (the reference trainer)\n"
        "on byte-level text and prints the loss per step and tokens/s.\n"
        "\noptions:\n"
        "  --model NAME|FILE   model zoo name (gpt-tiny, gpt-mini) or spec file\n"
        "  --steps N           train until N steps are done (default 50;\n"
        "                      with --resume, counts the steps already done)\n"
        "  --stop-after N      stop after step N as if interrupted (the\n"
        "                      schedule still spans --steps; pair with --save)\n"
        "  --batch B           sequences per step (default 16)\n"
        "  --seq T             tokens per sequence (default: the model's)\n"
        "  --data FILE         text to train on (default " DEFAULT_CORPUS ")\n"
        "  --lr X              peak learning rate (default 2e-3); linear\n"
        "                      warm-up, cosine decay to lr/10 at the last step\n"
        "  --warmup N          warm-up steps (default steps/10)\n"
        "  --weight-decay X    AdamW decoupled decay of matrices (default 0.1)\n"
        "  --clip X            global gradient-norm clip, 0 for none (default 1)\n"
        "  --seed N            initialisation and batch order (default 1337)\n"
        "  --threads N         CPU threads for the kernels (default 1)\n"
        "  --save FILE         write a checkpoint at the end (atomic), or when\n"
        "                      Ctrl-C or SIGTERM stops the run after a step\n"
        "  --save-every N      also every N steps\n"
        "  --resume FILE       continue from a checkpoint: bit for bit when\n"
        "                      --steps, --lr, --threads are those of the run\n"
        "                      that saved it (batch, length, seed are stored)\n"
        "  --timings FILE      per-op timings as JSON (op, shapes, GEMM m/n/k,\n"
        "                      bytes, ns), the cost model's signature\n"
        "  --mem-budget SIZE   refuse models that need more (default: RAM)\n"
        "  --eval-batches N    validation batches before and after (default 4)\n"
        "  --quiet             no line per step\n"
        "  --json              the run as one JSON document on stdout (steps\n"
        "                      with loss, lr, gradient norm, ns; kernel ns\n"
        "                      per op kind; validation loss; tokens/s)\n");
}

static int need_arg(int i, int argc, char **argv, util_err *e)
{
    if (i + 1 >= argc)
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: %s needs a value",
                         argv[i]);
    return 0;
}

static int int_arg(const char *opt, const char *s, long lo, long hi, int *out,
                   util_err *e)
{
    long v;
    if (util_parse_int(s, lo, hi, &v))
        return util_errf(e, UTIL_EXIT_USAGE,
                         "sluice exec: %s '%s': expected an integer in "
                         "[%ld, %ld]",
                         opt, s, lo, hi);
    *out = (int)v;
    return 0;
}

static int float_arg(const char *opt, const char *s, double lo, double hi,
                     float *out, util_err *e)
{
    double v;
    if (util_parse_double(s, &v) || !(v >= lo && v <= hi))
        return util_errf(e, UTIL_EXIT_USAGE,
                         "sluice exec: %s '%s': expected a number in [%g, %g]",
                         opt, s, lo, hi);
    *out = (float)v;
    return 0;
}

static int parse(int argc, char **argv, exec_train_opts *o,
                 const char **model, util_err *e)
{
    static const char *const opts[] = {
        "--model", "--steps", "--stop-after", "--batch", "--seq", "--data", "--lr",
        "--warmup", "--weight-decay", "--clip", "--seed", "--threads",
        "--save", "--save-every", "--resume", "--timings", "--mem-budget",
        "--eval-batches", "--quiet", "--json", "--help"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        int known = 0;
        for (size_t k = 0; k < sizeof opts / sizeof *opts; k++)
            known |= !strcmp(a, opts[k]);
        if (!known) {
            const char *near = util_closest(a, opts, sizeof opts / sizeof *opts);
            return util_errf(e, UTIL_EXIT_USAGE,
                             "sluice exec: unknown option '%s'%s%s%s", a,
                             near ? " (did you mean '" : "", near ? near : "",
                             near ? "'?)" : "");
        }
        if (need_arg(i, argc, argv, e)) return -1;
        const char *v = argv[++i];
        int rc = 0, seed = 0;
        const long BIG = 100000000;
        if (!strcmp(a, "--model")) *model = v;
        else if (!strcmp(a, "--steps"))
            rc = int_arg(a, v, 0, BIG, &o->steps, e);
        else if (!strcmp(a, "--stop-after"))
            rc = int_arg(a, v, 0, BIG, &o->stop_after, e);
        else if (!strcmp(a, "--batch"))
            rc = int_arg(a, v, 1, 1 << 20, &o->B, e);
        else if (!strcmp(a, "--seq")) rc = int_arg(a, v, 1, 1 << 20, &o->T, e);
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--lr"))
            rc = float_arg(a, v, 0, 10, &o->adamw.lr, e);
        else if (!strcmp(a, "--warmup"))
            rc = int_arg(a, v, 0, BIG, &o->warmup, e);
        else if (!strcmp(a, "--weight-decay"))
            rc = float_arg(a, v, 0, 10, &o->adamw.weight_decay, e);
        else if (!strcmp(a, "--clip"))
            rc = float_arg(a, v, 0, 1e9, &o->adamw.clip, e);
        else if (!strcmp(a, "--seed")) {
            rc = int_arg(a, v, 0, 2147483647, &seed, e);
            o->seed = (uint64_t)seed;
        } else if (!strcmp(a, "--threads"))
            rc = int_arg(a, v, 1, 256, &o->threads, e);
        else if (!strcmp(a, "--save")) o->save = v;
        else if (!strcmp(a, "--save-every"))
            rc = int_arg(a, v, 0, BIG, &o->save_every, e);
        else if (!strcmp(a, "--resume")) o->resume = v;
        else if (!strcmp(a, "--timings")) o->timings = v;
        else if (!strcmp(a, "--eval-batches"))
            rc = int_arg(a, v, 0, 10000, &o->eval_batches, e);
        else if (!strcmp(a, "--mem-budget")) {
            if (util_parse_size(v, &o->mem_budget_bytes) ||
                o->mem_budget_bytes <= 0)
                return util_errf(e, UTIL_EXIT_USAGE,
                                 "sluice exec: --mem-budget '%s': expected a "
                                 "size such as 512M or 4G",
                                 v);
        }
        if (rc) return -1;
    }
    if (!*model)
        return util_errf(e, UTIL_EXIT_USAGE,
                         "sluice exec: --model is required (e.g. --model "
                         "gpt-tiny)");
    return 0;
}

int exec_cmd_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    exec_train_opts o;
    exec_train_defaults(&o);
    o.data = DEFAULT_CORPUS;
    const char *model = NULL;
    util_err e = {0};
    if (parse(argc, argv, &o, &model, &e)) {
        fprintf(stderr, "%s\n(sluice exec --help lists the options)\n", e.msg);
        return e.code;
    }
    prof_model_spec spec;
    if (prof_model_spec_get(model, &spec, &e) ||
        exec_gpt_config_from_spec(&spec, &o.cfg, model, &e)) {
        fprintf(stderr, "sluice exec: %s\n", e.msg);
        return e.code ? e.code : UTIL_EXIT_USAGE;
    }
    snprintf(o.model, sizeof o.model, "%s", model);
    /* Said in the run's header, not as errors: they change nothing the
     * user must fix. */
    if (spec.dtype != PROF_DT_FP32 || spec.dropout)
        snprintf(o.note, sizeof o.note, "note: %s%s%s%s",
                 spec.dtype != PROF_DT_FP32 ? "the spec's precision is " : "",
                 spec.dtype != PROF_DT_FP32 ? prof_dtype_name(spec.dtype) : "",
                 spec.dtype != PROF_DT_FP32 ? ", the CPU computes in fp32" : "",
                 spec.dropout ? (spec.dtype != PROF_DT_FP32
                                     ? "; dropout is off (deterministic)"
                                     : "dropout is off (deterministic)")
                              : "");
    if (!o.T && !o.resume && spec.seq_len > 0) o.T = spec.seq_len;
    o.stop = &stop_flag;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    exec_train_result r;
    if (exec_train(&o, &r, &e)) {
        fprintf(stderr, "sluice exec: %s\n", e.msg);
        return e.code ? e.code : UTIL_EXIT_FAIL;
    }
    return 0;
}
