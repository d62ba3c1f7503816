/* `sluice exec`: the single-device reference trainer (--model), or a
 * plan's schedule run for real by the pipeline executor (--plan), in this
 * process or one rank per worker under mpirun, reported beside the
 * simulator's prediction. Exit codes: 0 ok, 1 failed run, 2 bad usage or
 * input. */
#include "exec/exec.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "exec/runtime.h"

/* Ctrl-C (or SIGTERM, or SIGUSR1 for plan runs: mpirun forwards it to the
 * ranks) stops after the current step; with --save the checkpoint is
 * written first. A second one half a second or more after the first
 * kills as usual; those that come together are one request (timeout(1)
 * signals the process and then its process group: two at once, the
 * second of which killed a run before it could save). */
volatile int exec_stop_flag;
static struct timespec stop_at;

void exec_on_stop(int sig)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!exec_stop_flag) {
        stop_at = now;
        exec_stop_flag = 1;
        return;
    }
    double dt = (double)(now.tv_sec - stop_at.tv_sec) +
                (double)(now.tv_nsec - stop_at.tv_nsec) * 1e-9;
    if (dt >= 0.5) {
        /* delivered once this handler returns (it is blocked here) */
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: sluice exec --model NAME|FILE [options]   (one device)\n"
        "       sluice exec --plan PLAN.json [options]    (the plan's "
        "pipeline)\n"
        "       mpirun -np N sluice exec --plan PLAN.json [options]\n"
        "       sluice exec --workload FILE --hw cpu xN [options]  (many "
        "models;\n                       sluice exec --workload F --help)\n"
        "\nTrains a GPT-2-, Llama- or OPT-style decoder, BERT's encoder "
        "as a masked\nLM, or T5's encoder-decoder as a prefix LM (a plan's "
        "only), on byte-level\ntext: on one CPU device (the reference "
        "trainer), or as a plan says\n(sluice plan --out): one worker per "
        "device and tensor-parallel rank running\nthe plan's schedule, "
        "threads of this process or MPI ranks, on CPU cores or\nCUDA GPUs "
        "(--backend), measured and compared with the simulator's "
        "prediction\nfor the same plan.\n"
        "\noptions:\n"
        "  --model NAME|FILE   model zoo name (gpt-tiny, gpt-mini, gpt2, "
        "llama-tiny,\n                      bert-large) or spec file\n"
        "  --plan FILE         run a plan file (its model, schedule, layout, "
        "batch)\n"
        "  --steps N           train until N steps are done (default 50;\n"
        "                      with --resume, counts the steps already done)\n"
        "  --data FILE         text to train on (default " EXEC_DEFAULT_CORPUS ")\n"
        "  --lr X              peak learning rate (default 2e-3); linear\n"
        "                      warm-up, cosine decay to lr/10 at the last step\n"
        "  --warmup N          warm-up steps (default steps/10)\n"
        "  --weight-decay X    AdamW decoupled decay of matrices (default 0.1)\n"
        "  --clip X            global gradient-norm clip, 0 for none (default 1;\n"
        "                      0 for fuyou, which cannot clip)\n"
        "  --seed N            initialisation and batch order (default 1337)\n"
        "  --save FILE         write a checkpoint at the end (atomic), or when\n"
        "                      Ctrl-C or SIGTERM stops the run after a step\n"
        "                      (under mpirun: kill -USR1 MPIRUN_PID, which\n"
        "                      mpirun forwards; its Ctrl-C ends the job);\n"
        "                      the reference trainer and --init read it\n"
        "                      (a LoRA plan's: adapters merged in, and\n"
        "                      FILE.lora its own state, for --resume)\n"
        "  --resume FILE       continue from a checkpoint (bit for bit with the\n"
        "                      same --steps, --lr, plan or --threads)\n"
        "  --stop-after N      stop after step N (the learning rate's schedule\n"
        "                      still spans --steps; pair with --save, then\n"
        "                      --resume)\n"
        "  --save-every N      also save every N steps (a plan runs in pieces\n"
        "                      of N steps, each continuing from the one\n"
        "                      before's checkpoint, bit for bit)\n"
        "  --mem-budget SIZE   memory per device (default: the plan's device\n"
        "                      memory; one device: the machine's RAM)\n"
        "  --json              the run as one JSON document on stdout\n"
        "  --quiet             no line per step\n"
        "\nwith --model only:\n"
        "  --batch B           sequences per step (default 16)\n"
        "  --seq T             tokens per sequence (default: the model's)\n"
        "  --threads N         CPU threads for the kernels (default 1)\n"
        "  --timings FILE      per-op timings as JSON (op, shapes, GEMM m/n/k,\n"
        "                      bytes, ns), the cost model's signature\n"
        "  --eval-batches N    validation batches before and after (default 4)\n"
        "\nwith --plan only:\n"
        "  --init FILE         start from these weights: a checkpoint of the\n"
        "                      same model, or a Hugging Face GPT-2, "
        "Llama, OPT,\n                      BERT or T5 model.safetensors\n"
        "  --trace FILE        the measured run as a Perfetto trace (the same\n"
        "                      tasks and tracks as sluice sim --trace)\n"
        "  --plot PREFIX       PREFIX-compare.{png,svg}: the measured timeline\n"
        "                      above the simulated one, with memory (gnuplot),\n"
        "                      from PREFIX-{measured,simulated}.json (or\n"
        "                      --trace), with PREFIX-*.dat and .gp\n"
        "  --warm N            steps left out of the timing summary (default 1)\n"
        "  --backend B         cpu (default: a device is a core) or cuda (a "
        "GPU per\n"
        "                      worker, the worker modulo the GPUs; needs\n"
        "                      bin/sluice-cuda from make cuda)\n"
        "  --transport T       auto (MPI under mpirun, else in-process),\n"
        "                      inproc, mpi, or nccl (under mpirun, --backend\n"
        "                      cuda, a GPU per worker)\n"
        "  --offload P         where each device's model states live: none\n"
        "                      (default), zero-offload (host tier, AdamW on\n"
        "                      the CPU after the backward pass) or fuyou\n"
        "                      (each layer's AdamW on a CPU thread as soon\n"
        "                      as its gradients are in; unclipped);\n"
        "                      layers are fetched to the device one by one\n"
        "  --offload-tier T    dram (host memory, default) or nvme (a file)\n"
        "  --offload-path DIR  where nvme's files go (default .): unique\n"
        "                      names, removed however the run ends; also\n"
        "                      for plans of zero-infinity and fuyou, whose\n"
        "                      tier tasks run as planned, and for stages\n"
        "                      whose state_tier is nvme\n"
        "  --calibrate         time every op of the run and add the times\n"
        "                      (and the runtime's cost per op a task\n"
        "                      runs) to the\n"
        "                      device type's calibration (sluice calibrate\n"
        "                      first); sim and plan then use them (with\n"
        "                      --tf32, the products' times price TF32\n"
        "                      plans only)\n"
        "  --tf32              the products in TF32 on the GPU's tensor\n"
        "                      cores (--backend cuda; Ampere and later),\n"
        "                      predicted at its TF32 peak; default fp32,\n"
        "                      or TF32 for a plan made with --dtype tf32\n"
        "\n" UTIL_SIZE_HELP
        "\nA plan for more workers than cores runs oversubscribed (with a "
        "warning).\nSLUICE_EXEC_FAULT=W:N[:kill] makes worker W fail at its "
        "N-th compute task\n(tests).\n");
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

/* Everything the command line says; seen[] marks what was given. */
typedef struct cmd {
    exec_train_opts t;
    const char *model, *plan, *init, *trace, *plot;
    exec_xport_kind xport;
    const char *backend;
    int warm, calibrate, tf32;
    int paths_bad;              /* a path, not an option, was refused: no
                                 * hint at --help */
    exec_offload offload;
    int tier_given;
    int clip_given;
    int seed_given;
    int steps_given;
    const char *ref_only, *plan_only; /* first option of each kind given */
    const char *sched_arg[6];   /* --lr --warmup --weight-decay --clip
                                 * --data --threads as given, or NULL */
} cmd;

static const char *const sched_opt[6] = {"--lr", "--warmup",
    "--weight-decay", "--clip", "--data", "--threads"};

/* Appends " OPT VALUE" to buf, the value quoted for a shell where it
 * holds more than letters, digits and ._/+-=:, */
static void again_add(char *buf, size_t n, const char *opt, const char *v)
{
    size_t at = strlen(buf);
    int plain = *v != 0;
    for (const char *q = v; *q; q++)
        if (!isalnum((unsigned char)*q) && !strchr("._/+-=:,", *q)) plain = 0;
    if (plain) {
        snprintf(buf + at, n - at, " %s %s", opt, v);
        return;
    }
    snprintf(buf + at, n - at, " %s '", opt);
    for (const char *q = v; *q; q++) {
        at = strlen(buf);
        if (*q == '\'')
            snprintf(buf + at, n - at, "'\\''");
        else
            snprintf(buf + at, n - at, "%c", *q);
    }
    at = strlen(buf);
    snprintf(buf + at, n - at, "'");
}

/* Appends ", NAME VALUE" (the first without the comma) to buf. */
static void said(char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void said(char *buf, size_t n, const char *fmt, ...)
{
    size_t at = strlen(buf);
    if (at + 3 >= n) return;
    if (at) {
        snprintf(buf + at, n - at, ", ");
        at += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + at, n - at, fmt, ap);
    va_end(ap);
}

/* A resumed run goes on as the run that saved its checkpoint: the
 * options it leaves out are the checkpoint's (--steps, --lr, --warmup,
 * --weight-decay, --clip), the ones it gives that differ are said, as
 * other text than the run trained on; the run's own text left out while
 * the default is another is refused. Checkpoints before format 6 keep
 * none of them. */
static int resume_run(cmd *c, exec_train_opts *o, const exec_ckpt_run *u,
                      util_err *e)
{
    if (!u->has) return 0;
    char took[256] = "", diff[384] = "";
    if (!c->steps_given) {
        o->steps = u->steps;
        said(took, sizeof took, "--steps %d", u->steps);
    } else if (o->steps != u->steps) {
        said(diff, sizeof diff, "--steps %d (it had %d)", o->steps,
             u->steps);
    }
    if (!c->sched_arg[0]) {
        o->adamw.lr = u->lr;
        said(took, sizeof took, "--lr %g", (double)u->lr);
    } else if (o->adamw.lr != u->lr) {
        said(diff, sizeof diff, "--lr %g (it had %g)", (double)o->adamw.lr,
             (double)u->lr);
    }
    if (!c->sched_arg[1]) {
        o->warmup = u->warmup;
        if (u->warmup >= 0) said(took, sizeof took, "--warmup %d", u->warmup);
    } else if (o->warmup != u->warmup) {
        char was[32] = "a tenth of its steps";
        if (u->warmup >= 0) snprintf(was, sizeof was, "%d", u->warmup);
        said(diff, sizeof diff, "--warmup %d (it had %s)", o->warmup, was);
    }
    if (!c->sched_arg[2]) {
        o->adamw.weight_decay = u->weight_decay;
        said(took, sizeof took, "--weight-decay %g", (double)u->weight_decay);
    } else if (o->adamw.weight_decay != u->weight_decay) {
        said(diff, sizeof diff, "--weight-decay %g (it had %g)",
             (double)o->adamw.weight_decay, (double)u->weight_decay);
    }
    if (!c->clip_given) {
        o->adamw.clip = u->clip;
        c->clip_given = 1;      /* the run's: kept as given */
        said(took, sizeof took, "--clip %g", (double)u->clip);
    } else if (o->adamw.clip != u->clip) {
        said(diff, sizeof diff, "--clip %g (it had %g)", (double)o->adamw.clip,
             (double)u->clip);
    }
    if (o->data_sum && u->data_sum && o->data_sum != u->data_sum) {
        if (!c->sched_arg[4])
            return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: the run %s "
                             "continues trained on other text than %s (the "
                             "default): give its --data again", o->resume,
                             o->data);
        said(diff, sizeof diff, "--data (other text than it trained on)");
    }
    size_t n = sizeof o->resumed;
    if (took[0])
        snprintf(o->resumed, n, "resumed as the run that saved %s: %s",
                 o->resume, took);
    if (diff[0]) {
        size_t at = strlen(o->resumed);
        snprintf(o->resumed + at, n - at, "%snote: this run changes what "
                 "the run that saved %s had: %s; it does not go on as that "
                 "run would have", at ? "\n" : "", o->resume, diff);
    }
    return 0;
}

static int parse(int argc, char **argv, cmd *c, util_err *e)
{
    static const char *const opts[] = {
        "--model", "--steps", "--stop-after", "--batch", "--seq", "--data",
        "--lr", "--warmup", "--weight-decay", "--clip", "--seed", "--threads",
        "--save", "--save-every", "--resume", "--timings", "--mem-budget",
        "--eval-batches", "--quiet", "--json", "--help", "--plan", "--init",
        "--trace", "--plot", "--warm", "--transport", "--backend",
        "--calibrate", "--offload", "--offload-tier", "--offload-path",
        "--tf32"};
    static const char *const ref[] = {"--model", "--batch", "--seq",
        "--threads", "--timings", "--eval-batches", NULL};
    static const char *const pln[] = {"--plan", "--init", "--trace",
        "--plot", "--warm", "--transport", "--backend", "--calibrate",
        "--offload", "--offload-tier", "--offload-path", "--tf32", NULL};
    exec_train_opts *o = &c->t;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        for (int k = 0; ref[k]; k++)
            if (!strcmp(a, ref[k]) && !c->ref_only) c->ref_only = ref[k];
        for (int k = 0; pln[k]; k++)
            if (!strcmp(a, pln[k]) && !c->plan_only) c->plan_only = pln[k];
        if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "--calibrate")) { c->calibrate = 1; continue; }
        if (!strcmp(a, "--tf32")) { c->tf32 = 1; continue; }
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
        for (int k = 0; k < 6; k++)
            if (!strcmp(a, sched_opt[k])) c->sched_arg[k] = v;
        if (!strcmp(a, "--model")) c->model = v;
        else if (!strcmp(a, "--plan")) c->plan = v;
        else if (!strcmp(a, "--init")) c->init = v;
        else if (!strcmp(a, "--trace")) c->trace = v;
        else if (!strcmp(a, "--plot")) c->plot = v;
        else if (!strcmp(a, "--warm"))
            rc = int_arg(a, v, 0, BIG, &c->warm, e);
        else if (!strcmp(a, "--transport")) {
            if (!strcmp(v, "auto")) c->xport = EXEC_XPORT_AUTO;
            else if (!strcmp(v, "inproc")) c->xport = EXEC_XPORT_INPROC;
            else if (!strcmp(v, "mpi")) c->xport = EXEC_XPORT_MPI;
            else if (!strcmp(v, "nccl")) c->xport = EXEC_XPORT_NCCL;
            else
                return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: "
                                 "--transport '%s': expected auto, inproc, "
                                 "mpi or nccl", v);
        } else if (!strcmp(a, "--backend")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda"))
                return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --backend "
                                 "'%s': expected cpu or cuda", v);
            c->backend = v;
        } else if (!strcmp(a, "--offload")) {
            if (exec_offload_parse(v, &c->offload.policy))
                return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --offload "
                                 "'%s': expected none, zero-offload or fuyou",
                                 v);
        } else if (!strcmp(a, "--offload-tier")) {
            if (exec_tier_parse(v, &c->offload.tier))
                return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: "
                                 "--offload-tier '%s': expected dram or nvme",
                                 v);
            c->tier_given = 1;
        } else if (!strcmp(a, "--offload-path")) {
            c->offload.path = v;
        } else if (!strcmp(a, "--steps")) {
            rc = int_arg(a, v, 0, BIG, &o->steps, e);
            c->steps_given = 1;
        } else if (!strcmp(a, "--stop-after"))
            rc = int_arg(a, v, 1, BIG, &o->stop_after, e);
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
        else if (!strcmp(a, "--clip")) {
            rc = float_arg(a, v, 0, 1e9, &o->adamw.clip, e);
            c->clip_given = 1;
        }
        else if (!strcmp(a, "--seed")) {
            rc = int_arg(a, v, 0, 2147483647, &seed, e);
            o->seed = (uint64_t)seed;
            c->seed_given = 1;
        } else if (!strcmp(a, "--threads"))
            rc = int_arg(a, v, 1, 256, &o->threads, e);
        else if (!strcmp(a, "--save")) o->save = v;
        else if (!strcmp(a, "--save-every"))
            rc = int_arg(a, v, 1, BIG, &o->save_every, e);
        else if (!strcmp(a, "--resume")) o->resume = v;
        else if (!strcmp(a, "--timings")) o->timings = v;
        else if (!strcmp(a, "--eval-batches"))
            rc = int_arg(a, v, 0, 10000, &o->eval_batches, e);
        else if (!strcmp(a, "--mem-budget")) {
            /* up to a petabyte: a budget is memory someone has */
            if (util_parse_size_unit(v, &o->mem_budget_bytes) ||
                !(o->mem_budget_bytes > 0) ||
                o->mem_budget_bytes > UTIL_SIZE_MAX_BYTES)
                return util_errf(e, UTIL_EXIT_USAGE,
                                 "sluice exec: --mem-budget '%s': expected a "
                                 "size with its unit, such as 512M or 4G (at "
                                 "most 1024T)", v);
        }
        if (rc) return -1;
    }
    if (c->plan && c->model)
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --plan and --model "
                         "exclude each other: the plan names its model");
    if (c->plan && c->ref_only)
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: %s does not apply "
                         "with --plan (%s)", c->ref_only,
                         !strcmp(c->ref_only, "--threads")
                         ? "a plan's worker is one device: one thread each"
                         : !strcmp(c->ref_only, "--timings")
                         ? "its timings are --trace's"
                         : !strcmp(c->ref_only, "--eval-batches")
                         ? "it trains; the reference trainer evaluates"
                         : "the plan fixes the model, batch and sequence");
    if (c->plan && o->steps == 0)
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --steps 0: a plan "
                         "runs 1 step or more (0 is the reference trainer's "
                         "evaluation alone, with --model)");
    if (c->plan && o->save_every > 0 && !o->save)
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --save-every %d "
                         "needs --save FILE (the checkpoint it rewrites)",
                         o->save_every);
    if (c->plan && o->save_every > 0 && c->calibrate)
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --calibrate "
                         "measures one run: give it without --save-every");
    if (!c->plan && c->plan_only)
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: %s needs --plan",
                         c->plan_only);
    if (c->xport == EXEC_XPORT_NCCL &&
        (!c->backend || strcmp(c->backend, "cuda")))
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --transport nccl "
                         "moves GPU memory: use it with --backend cuda");
    if (c->offload.policy == EXEC_OFFLOAD_NONE && c->tier_given)
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --offload-tier "
                         "needs --offload zero-offload or fuyou");
    if (c->offload.policy == EXEC_OFFLOAD_NONE && c->offload.path &&
        !c->plan)
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --offload-path "
                         "needs --offload zero-offload or fuyou, or the "
                         "plan of an offload schedule");
    if (c->offload.policy != EXEC_OFFLOAD_NONE && c->offload.path &&
        c->offload.tier != EXEC_TIER_NVME)
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --offload-path "
                         "names where the nvme tier's files go: give "
                         "--offload-tier nvme");
    /* the drive tier's folder is an input: one that is missing, not a
     * folder or not writable is refused before the run, as calibrate
     * does (the run would fail at its first tier file) */
    if (c->offload.path) {
        struct stat sd;
        int bad = stat(c->offload.path, &sd);
        int dir = !bad && S_ISDIR(sd.st_mode);
        if (bad || !dir || access(c->offload.path, W_OK | X_OK)) {
            c->paths_bad = 1;
            return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: "
                             "--offload-path '%s': %s%s%s", c->offload.path,
                             bad || !dir ? "" : "a folder this user cannot "
                             "write (", bad ? strerror(errno)
                             : !dir ? "not a folder" : strerror(errno),
                             bad || !dir ? "" : ")");
        }
    }
    if (c->init && o->resume)
        return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --init and "
                         "--resume exclude each other (--resume continues a "
                         "run, --init starts one from weights)");
    if (!c->model && !c->plan)
        return util_errf(e, UTIL_EXIT_USAGE,
                         "sluice exec: --model or --plan is required (e.g. "
                         "--model gpt-tiny, or --plan plan.json from sluice "
                         "plan --out)");
    /* a resumed run goes on with its checkpoint's seed (the batches'
     * order): another given is refused, and the header says the one
     * that runs */
    /* the text's checksum, for a checkpoint written or read */
    /* (one that cannot be read: loading it says why) */
    if (!(o->save || o->resume) ||
        util_file_fnv(o->data, (size_t)1 << 30, &o->data_sum, NULL))
        o->data_sum = 0;
    if (o->resume) {
        exec_ckpt_meta old;
        util_err pe;
        if (!exec_ckpt_peek(o->resume, &old, &pe)) {
            if (c->seed_given && old.seed != o->seed)
                return util_errf(e, UTIL_EXIT_USAGE, "sluice exec: --seed "
                                 "%llu: the run %s continues has seed %llu, "
                                 "which decides its batches; leave --seed "
                                 "out", (unsigned long long)o->seed,
                                 o->resume, (unsigned long long)old.seed);
            o->seed = old.seed;
            if (resume_run(c, o, &old.run, e)) return -1;
        }
    }
    /* a run resumed from its checkpoint goes on as this one only with
     * the same schedule of learning rates (it spans --steps), data and
     * threads: the hint after --stop-after or an interrupt says them */
    snprintf(o->again, sizeof o->again, " --steps %d", o->steps);
    for (int k = 0; k < 6; k++)
        if (c->sched_arg[k])
            again_add(o->again, sizeof o->again, sched_opt[k],
                      c->sched_arg[k]);
    /* outputs that could not be written, or would overwrite an input,
     * are refused before the run (a checkpoint may be saved over the one
     * it resumed or started from: --save-every does so) */
    const char *ins[] = {c->model, c->plan, o->data, c->init, o->resume};
    const char *oflag[] = {"--save", "--timings", "--trace", "--plot"};
    const char *opath[] = {o->save, o->timings, c->trace, c->plot};
    /* its plot compares PREFIX-measured.json (else --trace) with
     * PREFIX-simulated.json */
    const int opre[] = {0, 0, 0, c->trace ? UTIL_OUT_PLOT_SIMULATED
                                          : UTIL_OUT_PLOT_TRACES};
    if (util_out_check("--save", o->save, 0, ins, 3, e) ||
        util_out_check("--timings", o->timings, 0, ins, 5, e) ||
        util_out_check("--trace", c->trace, 0, ins, 5, e) ||
        util_out_check("--plot", c->plot, 1, ins, 0, e) ||
        util_outs_apart(4, oflag, opath, opre, ins, 5, e)) {
        c->paths_bad = 1;
        return util_err_prefix(e, "sluice exec");
    }
    /* paths the JSON document names must be text JSON can hold */
    if (o->json) {
        const char *what[] = {"--model", "--plan", "--data", "--save"};
        const char *path[] = {c->model, c->plan, o->data, o->save};
        for (int i = 0; i < 4; i++)
            if (path[i] && util_utf8_check(what[i], path[i], e))
                return util_err_prefix(e, "sluice exec");
    }
    return 0;
}

/* The reference trainer on one device. */
static int run_model(cmd *c)
{
    exec_train_opts o = c->t;
    const char *model = c->model;
    util_err e = {0};
    prof_model_spec spec;
    if (prof_model_spec_get(model, &spec, &e) ||
        exec_gpt_config_from_spec(&spec, &o.cfg, model, &e)) {
        fprintf(stderr, "sluice exec: %s\n", e.msg);
        return e.code ? e.code : UTIL_EXIT_USAGE;
    }
    if (o.cfg.t5) {
        fprintf(stderr, "sluice exec: %s: an encoder-decoder (T5) trains as "
                "a plan: sluice plan --hw 'cpu x1' --model %s --out "
                "P.json, then sluice exec --plan P.json (the reference "
                "trainer runs decoders and encoders)\n", model, model);
        return UTIL_EXIT_USAGE;
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
    o.stop = &exec_stop_flag;
    signal(SIGINT, exec_on_stop);
    signal(SIGTERM, exec_on_stop);
    exec_train_result r;
    if (exec_train(&o, &r, &e)) {
        fprintf(stderr, "sluice exec: %s\n", e.msg);
        return e.code ? e.code : UTIL_EXIT_FAIL;
    }
    return 0;
}

/* Progress lines of a flushed run, from the process holding worker 0. */
typedef struct progress {
    FILE *f;
    int steps;
} progress;

static void on_step(void *ctx, int step, double loss, double norm, double lr,
                    double ms)
{
    progress *p = ctx;
    fprintf(p->f, "step %5d/%d | loss %.6f | lr %.3e | norm %7.4f | %8.2f "
            "ms\n", step, p->steps, loss, lr, norm, ms);
    fflush(p->f);
}

/* SLUICE_EXEC_FAULT=W:N[:kill]: worker W fails at its N-th compute task. */
static int fault_from_env(exec_pipe_opts *po, util_err *e)
{
    const char *f = getenv("SLUICE_EXEC_FAULT");
    if (!f || !*f) return 0;
    char kill[8] = "";
    int w = -1, n = 0;
    if (sscanf(f, "%d:%d:%7s", &w, &n, kill) < 2 || w < 0 || n < 1 ||
        (kill[0] && strcmp(kill, "kill")))
        return util_errf(e, UTIL_EXIT_USAGE, "SLUICE_EXEC_FAULT '%s': "
                         "expected WORKER:TASK[:kill]", f);
    po->fault_worker = w;
    po->fault_task = n;
    po->fault_kill = kill[0] != 0;
    return 0;
}

/* SLUICE_EXEC_SLOW=W:US: worker W sleeps US microseconds before each
 * compute task (tests: a replica falling behind, under mpirun too). */
static int slow_from_env(exec_pipe_opts *po, util_err *e)
{
    const char *f = getenv("SLUICE_EXEC_SLOW");
    if (!f || !*f) return 0;
    int w = -1, us = 0;
    char end = 0;
    if (sscanf(f, "%d:%d%c", &w, &us, &end) != 2 || w < 0 || us < 1 ||
        us > 10000000)
        return util_errf(e, UTIL_EXIT_USAGE, "SLUICE_EXEC_SLOW '%s': "
                         "expected WORKER:MICROSECONDS", f);
    po->slow_worker = w;
    po->slow_us = us;
    return 0;
}

/* SLUICE_OFFLOAD_FULL=BYTES: the offload file takes that many bytes,
 * then writes fail as on a full disk (tests). */
static int offload_fault_from_env(exec_pipe_opts *po, util_err *e)
{
    const char *f = getenv("SLUICE_OFFLOAD_FULL");
    if (!f || !*f) return 0;
    if (util_parse_size(f, &po->offload.full_after_bytes) ||
        !(po->offload.full_after_bytes > 0))
        return util_errf(e, UTIL_EXIT_USAGE, "SLUICE_OFFLOAD_FULL '%s': "
                         "expected a size such as 64K", f);
    return 0;
}

/* --calibrate: the calibration of the plan's device type, of this
 * machine, must be there to add to (sluice calibrate makes it). */
static int calib_check(const sim_plan *plan, const exec_backend *be,
                       char *path, size_t n, util_err *e)
{
    char *hw = (char *)plan->hw;
    prof_topo *t = prof_topo_from_args(1, &hw, NULL, e);
    if (!t) return -1;
    char dev[32];
    snprintf(dev, sizeof dev, "%s", t->gpu_types[0].name);
    int types = t->n_gpu_types;
    int cpu = t->gpu_types[0].form == PROF_FORM_CPU;
    prof_topo_free(t);
    if (types != 1)
        return util_errf(e, UTIL_EXIT_USAGE, "--calibrate: the plan's "
                         "hardware has %d device types; calibrate one at a "
                         "time", types);
    /* a run's op times are its backend's: a CPU core's are no GPU's */
    if (cpu != (be->host_memory != 0))
        return util_errf(e, UTIL_EXIT_USAGE, "--calibrate: the plan is for "
                         "%s, this run's devices are %s (--backend %s): its "
                         "op times would go into another device's "
                         "calibration; run the plan on its devices, or plan "
                         "for %s", plan->hw, be->host_memory ? "CPU cores"
                         : "GPUs", be->name, be->host_memory ? "cpu xN"
                                                              : "the GPUs");
    if (!prof_calib_path(dev, path, n))
        return util_errf(e, UTIL_EXIT_USAGE, "--calibrate: no profile "
                         "directory (%s): give --profile-dir DIR",
                         prof_profile_dir_none());
    if (access(path, F_OK))
        return util_errf(e, UTIL_EXIT_USAGE, "--calibrate: %s does not "
                         "exist: run sluice calibrate --hw %s first (this "
                         "run's op times are added to it)", path, plan->hw);
    prof_calib c;
    if (prof_calib_load(path, &c, e)) return -1;
    prof_machine m;
    prof_machine_this(&m);
    /* a GPU's name is the calibration's to say */
    snprintf(m.device, sizeof m.device, "%s",
             be->host_memory ? "CPU core" : c.machine.device);
    int same = prof_machine_same(&c.machine, &m);
    char a[256], b[256];
    prof_machine_str(&c.machine, a, sizeof a);
    prof_machine_str(&m, b, sizeof b);
    prof_calib_free(&c);
    if (!same)
        return util_errf(e, UTIL_EXIT_USAGE, "--calibrate: %s was measured "
                         "on %s; this is %s: its figures are not this "
                         "machine's (calibrate here into another "
                         "--profile-dir)", path, a, b);
    return 0;
}

/* Adds the run's op times to the calibration, re-read now (atomic
 * write: the file is the old one or the new one). */
static int calib_write(const char *path, const sim_plan *plan,
                       const exec_pipe_result *r, FILE *f, util_err *e)
{
    prof_calib c;
    int n = 0;
    if (prof_calib_load(path, &c, e)) return -1;
    int before = c.n_ops;
    int rc = exec_calib_add_run(&c, r, plan->model, &n, e) ||
             prof_calib_save(&c, path, e) ? -1 : 0;
    if (!rc)
        fprintf(f, "calibration: %d op times measured, %d new signatures "
                "(%d in all) and %.2f us per op a task runs added to %s\n",
                n, c.n_ops - before, c.n_ops, c.gpu.eff.op_task_ns / 1e3,
                path);
    prof_calib_free(&c);
    return rc;
}

/* The run's state as a checkpoint at t->save (atomic). */
static int save_ckpt(const exec_train_opts *t, const sim_plan *plan,
                     exec_pipe_result *r, util_err *e)
{
    /* (a resumed run's seed is its checkpoint's: parse set it) */
    exec_ckpt_meta meta = {r->cfg, r->B, r->T, t->seed,
                           r->step_first + r->steps_run, exec_train_run(t)};
    /* LoRA: the run's own state (base, adapters, their moments) beside,
     * for --resume; the checkpoint itself the adapters merged into the
     * weights, a plain model any reader takes. An offload schedule's tier
     * keeps the adapters' moments: no state to go on from. */
    if (r->lora && exec_plan_resumable(plan)) {
        char lp[4096];
        exec_lora_ckpt_path(t->save, lp, sizeof lp);
        if (exec_lora_ckpt_save(lp, &meta, &plan->ft, r->base, r->lora,
                                r->lora_m, r->lora_v, r->n_lora, e))
            return -1;
    }
    if (r->lora) exec_lora_merge(&r->cfg, &plan->ft, r->lora, r->params);
    return exec_ckpt_save_state(t->save, r->params, r->adam_m, r->adam_v,
                                &meta, e);
}

/* How a run of plan saved at FILE goes on: "--resume", or (a LoRA plan of
 * an offload schedule, exec_plan_resumable) another fine-tuning. */
static const char *go_on(const sim_plan *plan)
{
    return exec_plan_resumable(plan) ? "--resume"
                                     : "another fine-tuning from the merged "
                                       "weights, --init";
}

/* What a plan's run says of itself before its first step (once, though
 * --save-every runs it in pieces): after the checks that refuse it. */
typedef struct banner {
    const cmd *c;
    const sim_plan *plan;
    const exec_pipe_opts *po;
    int unclipped, mpi;
    FILE *out;
    int shown;
} banner;

static void show_banner(void *ctx)
{
    banner *b = ctx;
    if (b->shown) return;
    b->shown = 1;
    const cmd *c = b->c;
    const exec_train_opts *t = &c->t;
    const sim_plan *plan = b->plan;
    const exec_pipe_opts *po = b->po;
    FILE *out = b->out;
    int mpi = b->mpi, unclipped = b->unclipped;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long devs = sim_plan_gpus(plan);
    if (out && !mpi && po->backend == &exec_backend_cpu && cores > 0 &&
        devs > cores)
        fprintf(stderr, "sluice exec: warning: %ld workers on %ld cores run "
                "oversubscribed; timings will not be one core's per device\n",
                devs, cores);
    if (out && !t->json) {
        fprintf(stdout, "sluice exec: %s on %s, plan %s\n", plan->model,
                plan->hw, c->plan);
        char ft[64];
        char seq[48] = "";
        if (plan->seq_len)
            snprintf(seq, sizeof seq, " of %d tokens", plan->seq_len);
        fprintf(stdout, "schedule %s, pipeline %d x data %d x tensor %d%s, "
                "microbatch %d x %d%s%s%s%s%s; AdamW lr %.2e, clip %.2f, "
                "seed %llu\n", sim_sched_name(plan->sched), plan->pp, plan->dp,
                plan->tp, plan->sp && plan->tp > 1 ? " (sequence parallel)" : "",
                plan->mbs, plan->n_mb, seq,
                plan->recompute ? ", recomputation " : "",
                plan->recompute ? sim_recompute_name(plan->recompute) : "",
                prof_finetune_full(&plan->ft) ? "" : ", fine-tuning ",
                prof_finetune_full(&plan->ft)
                    ? "" : prof_finetune_name(&plan->ft, ft, sizeof ft),
                t->adamw.lr, t->adamw.clip, (unsigned long long)t->seed);
        if (t->resumed[0]) fprintf(stdout, "%s\n", t->resumed);
        if (unclipped)
            fprintf(stdout, "note: fuyou steps each layer as its gradients "
                    "come, before the global gradient norm is known: no "
                    "clipping (--clip 0)\n");
        if (plan->math && !po->tf32)
            fprintf(stdout, "note: the plan trains in %s; this backend "
                    "computes in fp32, as it predicts\n",
                    prof_math_name(plan->math));
        if (t->warmup > t->steps)
            fprintf(stdout, "note: --warmup %d is longer than the %d steps: "
                    "the learning rate never reaches its peak\n", t->warmup,
                    t->steps);
        if (t->stop_after > t->steps)
            fprintf(stdout, "note: --stop-after %d is past --steps %d: the "
                    "run ends at step %d\n", t->stop_after, t->steps,
                    t->steps);
        /* exec/README.md, "Sharded data parallelism" */
        if (sim_zero_stage(plan->zero, plan->fsdp) >= 2)
            fprintf(stdout, "note: this executor %s, as the simulated "
                    "columns price it (sluice sim prices FSDP's layer at a "
                    "time, the next prefetched: the report gives its "
                    "figures)\n",
                    sim_zero_stage(plan->zero, plan->fsdp) >= 3
                        ? "gathers a stage's whole weights for a task and "
                          "the next, and keeps each microbatch's whole "
                          "gradient until its reduce-scatter is done"
                        : "keeps each microbatch's whole gradient until its "
                          "reduce-scatter is done");
        fflush(stdout);
    }
}

static int run_plan(cmd *c)
{
    exec_train_opts *t = &c->t;
    util_err e = {0};
    int rank = 0, size = 1, mpi = 0, rc = 0;
    /* under mpirun every rank runs this; rank 0 speaks */
    /* MPI asked for outside mpirun starts one rank of its own: a plan of
     * one worker runs so; one of more is told to start under mpirun,
     * before MPI starts (a plan that does not load is said below) */
    int singleton = (c->xport == EXEC_XPORT_MPI ||
                     c->xport == EXEC_XPORT_NCCL) && !exec_mpi_launched();
    if (singleton) {
        sim_plan q;
        sim_plan_init(&q);
        util_err qe;
        long w = sim_plan_load(c->plan, &q, &qe) ? 1 : sim_plan_gpus(&q);
        sim_plan_free(&q);
        if (w > 1) {
            fprintf(stderr, "sluice exec: --transport %s runs a rank per "
                    "worker, started by mpirun, and this process was not: "
                    "mpirun -np %ld sluice exec ... (or leave --transport "
                    "out to run in-process)\n",
                    c->xport == EXEC_XPORT_NCCL ? "nccl" : "mpi", w);
            return UTIL_EXIT_USAGE;
        }
    }
    if (c->xport == EXEC_XPORT_MPI || c->xport == EXEC_XPORT_NCCL ||
        (c->xport == EXEC_XPORT_AUTO && exec_mpi_launched())) {
        if (exec_mpi_init(&rank, &size, &e)) {
            fprintf(stderr, "sluice exec: %s\n", e.msg);
            return e.code ? e.code : UTIL_EXIT_FAIL;
        }
        mpi = 1;
    }
    FILE *out = rank == 0 ? stdout : NULL;
    /* --calibrate refuses another machine's cpu calibration itself */
    if (rank || c->calibrate) prof_calib_foreign_notes(0);
    sim_plan plan;
    sim_plan_init(&plan);
    exec_pipe_opts po = {0};
    exec_pipe_result r;
    memset(&r, 0, sizeof r);
    exec_pieces pieces;         /* --save-every's pieces before the last */
    memset(&pieces, 0, sizeof pieces);
    /* the backend first: one line and code 2 when it cannot be had */
    if (!(po.backend = exec_backend_get(c->backend ? c->backend : "cpu",
                                        &e))) {
        rc = -1;
        goto out;
    }
    if (sim_plan_load(c->plan, &plan, &e) || fault_from_env(&po, &e) ||
        slow_from_env(&po, &e)) {
        rc = -1;
        goto out;
    }
    char what[600];
    if (sim_plan_files_changed(&plan, what, sizeof what) && (!mpi || !rank))
        fprintf(stderr, "note: %s: %s changed since the plan was made: "
                "its cuts and batch were chosen for the file as it was\n",
                c->plan, what);
    /* the files the plan names are inputs too (its model spec, its
     * server): no output may replace them */
    const char *plan_ins[] = {plan.model, plan.hw};
    const char *oflag[] = {"--plot"};
    const char *opath[] = {c->plot};
    const int opre[] = {c->trace ? UTIL_OUT_PLOT_SIMULATED
                                 : UTIL_OUT_PLOT_TRACES};
    if (util_out_check("--save", t->save, 0, plan_ins, 2, &e) ||
        util_out_check("--timings", t->timings, 0, plan_ins, 2, &e) ||
        util_out_check("--trace", c->trace, 0, plan_ins, 2, &e) ||
        util_outs_apart(1, oflag, opath, opre, plan_ins, 2, &e)) {
        rc = -1;
        goto out;
    }
    int on_drives = 0;
    for (int s = 0; plan.state_tier && s < plan.n_stages; s++)
        on_drives |= plan.state_tier[s] == SIM_TIER_NVME;
    if (c->offload.path && c->offload.policy == EXEC_OFFLOAD_NONE &&
        !sim_sched_offload(plan.sched) && !on_drives) {
        rc = util_errf(&e, UTIL_EXIT_USAGE, "--offload-path "
                       "names where the drive tier's files go: schedule %s "
                       "of %s keeps its states on the device (give --offload "
                       "zero-offload or fuyou, plan with --schedule "
                       "zero-infinity or fuyou, or give a stage state_tier "
                       "nvme)", sim_sched_name(plan.sched), c->plan);
        goto out;
    }
    if (t->save_every > 0 && sim_sched_async(plan.sched)) {
        rc = util_errf(&e, UTIL_EXIT_USAGE, "--save-every: "
                       "schedule %s has no flush, so a checkpoint is not the "
                       "state of the run in flight (its stashed weight "
                       "versions; the LM head's copy of a tied table): "
                       "pieces would train another run; save at the end",
                       sim_sched_name(plan.sched));
        goto out;
    }
    if (t->save_every > 0 && !exec_plan_resumable(&plan)) {
        rc = util_errf(&e, UTIL_EXIT_USAGE, "--save-every: a "
                       "%s plan of schedule %s keeps its adapters' AdamW "
                       "state in the tier, so its checkpoints cannot go on "
                       "(save at the end, then --init another fine-tuning)",
                       plan.ft.kind == PROF_FT_QLORA ? "QLoRA" : "LoRA",
                       sim_sched_name(plan.sched));
        goto out;
    }
    po.plan_path = c->plan;
    po.plan = &plan;
    po.data = t->data;
    po.steps = t->steps;
    po.adamw = t->adamw;
    po.warmup = t->warmup;
    po.seed = t->seed;
    po.init = c->init;
    po.resume = t->resume;
    po.save = t->save;
    po.mem_budget_bytes = t->mem_budget_bytes;
    po.xport = c->xport;
    po.record_mem = c->trace || c->plot;
    po.op_timing = c->calibrate;
    po.own_gpus = c->calibrate;
    po.offload = c->offload;
    /* Fuyou steps each layer during the backward pass, before the global
     * norm is known: without a --clip of the user's, it runs unclipped */
    int fuyou = plan.sched == SIM_SCHED_FUYOU ||
                c->offload.policy == EXEC_OFFLOAD_FUYOU;
    int unclipped = fuyou && !c->clip_given && po.adamw.clip > 0;
    if (unclipped) po.adamw.clip = t->adamw.clip = 0;
    /* a plan in TF32 (--dtype tf32) runs so where the backend can; every
     * other precision is computed in fp32 */
    po.tf32 = c->tf32 || (plan.math == 1 + PROF_DT_TF32 && po.backend &&
                          po.backend->set_tf32);
    if (offload_fault_from_env(&po, &e)) {
        rc = -1;
        goto out;
    }
    char cpath[1100] = "";
    if (c->calibrate && calib_check(&plan, po.backend, cpath, sizeof cpath,
                                    &e)) {
        rc = -1;
        goto out;
    }
    po.stop = &exec_stop_flag;
    progress pg = {stdout, t->steps};
    if (out && !t->quiet && !t->json) {
        po.on_step = on_step;
        po.on_step_ctx = &pg;
    }
    banner bn = {c, &plan, &po, unclipped, mpi, out, 0};
    po.on_start = show_banner;
    po.on_start_ctx = &bn;
    signal(SIGINT, exec_on_stop);
    signal(SIGTERM, exec_on_stop);
    /* mpirun ends the job on Ctrl-C itself, but forwards SIGUSR1 to the
     * ranks: `kill -USR1 MPIRUN_PID` stops after the step and saves */
    signal(SIGUSR1, exec_on_stop);
    /* --stop-after ends the run early (the learning rate's schedule
     * still spans --steps); --save-every runs it in pieces, each
     * continuing from the checkpoint the one before saved (--resume's
     * bits) */
    int end = t->stop_after > 0 && t->stop_after < t->steps ? t->stop_after
                                                            : t->steps;
    int every = t->save && t->save_every > 0 ? t->save_every : 0;
    int at = 0;
    if (t->resume) {
        exec_ckpt_meta old;
        if (!exec_ckpt_peek(t->resume, &old, &e)) at = old.step;
    }
    for (;;) {
        int seg = every ? (at / every + 1) * every : end;
        if (seg > end) seg = end;
        po.stop_after = seg < t->steps ? seg : 0;
        if (exec_pipe_run(&po, &r, &e)) {
            rc = -1;
            goto out;
        }
        if (out && !t->quiet && !t->json && r.async)
            for (int k = 0; k < r.steps_run; k++)
                fprintf(stdout, "step %5d/%d | loss %.6f | lr %.3e (no "
                        "flush: each stage steps on its own)\n",
                        r.step_first + k + 1, t->steps, r.loss[k],
                        exec_lr_at(t->adamw.lr, po.warmup >= 0 ? po.warmup
                                   : (t->steps / 10 > 0 ? t->steps / 10 : 1),
                                   t->steps, r.step_first + k));
        int saved = !(out && t->save && save_ckpt(t, &plan, &r, &e));
        at = r.step_first + r.steps_run;
        if (at >= end || r.stopped) {
            if (saved) break;
            rc = -1;
            goto out;
        }
        /* the next piece reads it: every rank waits for rank 0's write,
         * and learns whether it was made */
        if (mpi && exec_mpi_bcast(&saved, sizeof saved, &e)) {
            rc = -1;
            goto out;
        }
        if (!saved) {
            if (!out)
                util_errf(&e, UTIL_EXIT_FAIL, "rank 0 could not save %s",
                          t->save);
            rc = -1;
            goto out;
        }
        if (out && !t->json)
            printf("saved %s at step %d\n", t->save, at);
        /* the report takes the whole run in: each piece's steps and step
         * times */
        if (out) exec_pieces_add(&pieces, &r);
        exec_pipe_result_free(&r);
        memset(&r, 0, sizeof r);
        t->resume = po.resume = t->save;
        po.init = NULL;
    }
    if (out) {
        exec_report_opts ro = {.plan_path = c->plan, .json = t->json,
                               .warm = c->warm, .trace = c->trace,
                               .plot = c->plot, .out = stdout,
                               .before = pieces.n ? &pieces : NULL};
        if (exec_pipe_report(&po, &r, &ro, &e)) {
            rc = -1;
            goto out;
        }
        if (!t->json && t->save)
            printf("saved %s at step %d%s%s%s\n", t->save,
                   r.step_first + r.steps_run,
                   r.lora ? " (LoRA adapters merged into the weights" : "",
                   r.lora && exec_plan_resumable(&plan)
                       ? "; the run's own state in "
                                                "the .lora file beside it"
                                              : "",
                   r.lora ? ")" : "");
        if (c->calibrate && !r.stopped &&
            calib_write(cpath, &plan, &r, t->json ? stderr : stdout, &e)) {
            rc = -1;
            goto out;
        }
        if (r.async && r.cfg.tied && prof_finetune_full(&plan.ft) &&
            !t->json)
            printf("note: without a flush each stage updates alone, so the "
                   "LM head's copy of the tied token table trains apart from "
                   "the embedding's; checkpoints keep the embedding's\n");
        if (!r.stopped && end < t->steps && !t->json)
            printf("stopped after step %d of %d (--stop-after)%s%s%s%s%s%s\n",
                   end, t->steps, t->save ? "; continue with "
                                          : "; without --save its state is "
                                            "not kept",
                   t->save ? go_on(&plan) : "", t->save ? " " : "",
                   t->save ? t->save : "",
                   t->save && exec_plan_resumable(&plan) ? t->again : "",
                   t->save && r.async ? " (no flush: the run resumed from "
                   "it is not the one that would have gone on, its weight "
                   "versions in flight are not kept)" : "");
    }
    if (r.stopped) {
        char saved[2048] = "";
        if (t->save)
            snprintf(saved, sizeof saved, "; saved %s, continue with "
                     "%s %s%s", t->save, go_on(&plan), t->save,
                     exec_plan_resumable(&plan) ? t->again : "");
        util_errf(&e, UTIL_EXIT_FAIL, "interrupted after step %d%s",
                  r.step_first + r.steps_run, saved);
        rc = -1;
    }
out:
    if (rc && out) fprintf(stderr, "sluice exec: %s\n", e.msg);
    int code = rc ? (e.code ? e.code : UTIL_EXIT_FAIL) : 0;
    exec_pipe_result_free(&r);
    exec_pieces_free(&pieces);
    sim_plan_free(&plan);
    if (mpi) exec_mpi_finalize();
    return code;
}

int exec_cmd_main(int argc, char **argv)
{
    /* many models at once: a command of its own (exec/cmd_workload.c) */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--workload")) return exec_wl_main(argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    cmd c;
    memset(&c, 0, sizeof c);
    exec_train_defaults(&c.t);
    c.t.data = EXEC_DEFAULT_CORPUS;
    c.warm = -1;
    util_err e = {0};
    if (parse(argc, argv, &c, &e)) {
        fprintf(stderr, "%s\n%s", e.msg, c.paths_bad ? "" :
                "(sluice exec --help lists the options)\n");
        return e.code;
    }
    return c.plan ? run_plan(&c) : run_model(&c);
}
