/* `sluice exec --workload FILE --hw cpu xN`: many GPT jobs trained at once
 * on CPU devices under Hydra's policy and others (exec/workload.c), and
 * the baselines of one job at a time (on one device; as a pipeline over
 * all); each policy's measured makespan beside the simulated one,
 * utilisation, host pool, copies, the speedups over the baselines, and
 * whether every job's weights equal the baseline's. Exit codes: 0 ok, 1
 * failed run, 2 bad usage or input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"
#include "exec/runtime.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: sluice exec --workload FILE --hw cpu xN [options]\n"
        "\nTrains every job of a workload file (sluice plan --workload's "
        "format;\nGPT models the executor trains) at once on N CPU devices "
        "as Hydra does:\neach model cut into the fewest shards that fit one "
        "device (the planner's\ncut), weights and AdamW state in a host pool "
        "between uses, a device\nrunning one shard-step at a time and loading "
        "the next while it computes.\nThe baseline (sequential) trains the "
        "jobs in turn, each on one device with\nthe reference model; the "
        "pipeline baseline runs each job in turn as the\nplanner's best "
        "synchronous pipeline over every device. Each policy's\nmakespan is "
        "measured and simulated.\n"
        "\noptions:\n"
        "  --policy P[,P...]    hydra (Sharded-LRTF), random, round-robin,\n"
        "                       sequential, pipeline (default: all five)\n"
        "  --steps K            steps of every job (default: the file's "
        "samples\n"
        "                       over its batch)\n"
        "  --mem-per-device SIZE  each device's budget (default: the cpu "
        "type's)\n"
        "  --data FILE          text to train on (default " EXEC_DEFAULT_CORPUS
        ")\n"
        "  --lr X, --warmup N, --weight-decay X   AdamW as sluice exec\n"
        "  --clip X             each job's global gradient-norm clip (default "
        "0: none,\n"
        "                       as Hydra trains); with X > 0 a job's step "
        "waits for\n"
        "                       its last shard's gradient and is taken on "
        "the host\n"
        "  --seed N             job j starts from seed N + j (default 1337)\n"
        "  --policy-seed N      the random policy's seed (default 1)\n"
        "  --no-prefetch        load each shard-step's state when it starts\n"
        "  --trace FILE         the first sharded policy's shard-steps over "
        "devices\n"
        "                       (Perfetto trace, written atomically)\n"
        "  --json               the answer as JSON\n"
        "\n" UTIL_SIZE_HELP
        "\nexit codes: 0 done, 1 a run failed, 2 bad usage or input\n");
}

typedef struct wcmd {
    exec_wl_opts o;
    int pol[EXEC_WL_POLICY_COUNT], n_pol;
    int pol_default;        /* no --policy: all of them */
    const char *trace;
    int json;
} wcmd;

static int parse(int argc, char **argv, wcmd *c, util_err *e)
{
    exec_wl_opts *o = &c->o;
    o->devices = 0;
    o->data = EXEC_DEFAULT_CORPUS;
    o->adamw = (exec_adamw){.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                            .eps = 1e-8f, .weight_decay = 0.1f, .clip = 0};
    o->warmup = -1;
    o->seed = 1337;
    o->policy_seed = 1;
    o->prefetch = 1;
    int hw = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        double x;
        if (!strcmp(a, "--json")) { c->json = 1; continue; }
        if (!strcmp(a, "--no-prefetch")) { o->prefetch = 0; continue; }
        if (!strcmp(a, "--quiet")) continue;
        static const char *const opts[] = {"--workload", "--hw", "--policy",
            "--steps", "--mem-per-device", "--data", "--lr", "--warmup",
            "--weight-decay", "--clip", "--seed", "--policy-seed", "--trace", "--json",
            "--no-prefetch", "--quiet"};
        int known = 0;
        for (size_t k = 0; k < sizeof opts / sizeof *opts; k++)
            known |= !strcmp(a, opts[k]);
        if (!known) {
            const char *near = util_closest(a, opts, sizeof opts / sizeof *opts);
            return util_errf(e, UTIL_EXIT_USAGE, "unknown option '%s' for a "
                             "workload%s%s%s", a, near ? " (did you mean '" : "",
                             near ? near : "", near ? "'?)" : "");
        }
        if (!v) return util_errf(e, UTIL_EXIT_USAGE, "%s needs a value", a);
        i++;
        if (!strcmp(a, "--workload")) o->workload = v;
        else if (!strcmp(a, "--hw")) {
            hw = 1;
            /* "cpu x2" as one word or two */
            char gpu[64], cnt[64] = "x1";
            if (sscanf(v, "%63s %63s", gpu, cnt) < 1) gpu[0] = 0;
            if (!strchr(v, ' ') && i + 1 < argc && argv[i + 1][0] == 'x')
                snprintf(cnt, sizeof cnt, "%s", argv[++i]);
            if (strcmp(gpu, "cpu"))
                return util_errf(e, UTIL_EXIT_USAGE, "--hw '%s': a workload "
                                 "runs on CPU devices, e.g. --hw cpu x2", v);
            if (cnt[0] != 'x' || util_parse_int(cnt + 1, 1, 4096, &n))
                return util_errf(e, UTIL_EXIT_USAGE, "--hw cpu %s: expected "
                                 "a count of 1 to 4096 devices, e.g. x2",
                                 cnt);
            o->devices = (int)n;
        } else if (!strcmp(a, "--policy")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            c->n_pol = 0;
            for (char *s = strtok(buf, ","); s; s = strtok(NULL, ",")) {
                exec_wl_policy p;
                if (exec_wl_policy_parse(s, &p))
                    return util_errf(e, UTIL_EXIT_USAGE, "--policy '%s': "
                                     "expected hydra, random, round-robin, "
                                     "sequential or pipeline", s);
                int dup = 0;
                for (int k = 0; k < c->n_pol; k++) dup |= c->pol[k] == (int)p;
                if (!dup) c->pol[c->n_pol++] = (int)p;
            }
            if (!c->n_pol)
                return util_errf(e, UTIL_EXIT_USAGE, "--policy needs a name");
        } else if (!strcmp(a, "--steps")) {
            if (util_parse_int(v, 1, 100000000, &n))
                return util_errf(e, UTIL_EXIT_USAGE, "--steps '%s': expected "
                                 "a whole number of steps in [1, 100000000]",
                                 v);
            o->steps = (int)n;
        } else if (!strcmp(a, "--mem-per-device")) {
            if (util_parse_size_unit(v, &o->mem_bytes) ||
                !(o->mem_bytes > 0) || o->mem_bytes > UTIL_SIZE_MAX_BYTES)
                return util_errf(e, UTIL_EXIT_USAGE, "--mem-per-device '%s': "
                                 "expected a size with its unit, such as "
                                 "64M (at most 1024T)", v);
        } else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--trace")) c->trace = v;
        else if (!strcmp(a, "--clip")) {
            if (util_parse_double(v, &x) || !(x >= 0 && x <= 1e9))
                return util_errf(e, UTIL_EXIT_USAGE, "--clip '%s': expected "
                                 "0 (none) or a positive norm", v);
            o->adamw.clip = (float)x;
        } else if (!strcmp(a, "--lr") || !strcmp(a, "--weight-decay")) {
            if (util_parse_double(v, &x) || !(x >= 0 && x <= 10))
                return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': expected a "
                                 "number in [0, 10]", a, v);
            if (a[2] == 'l') o->adamw.lr = (float)x;
            else o->adamw.weight_decay = (float)x;
        } else {
            if (util_parse_int(v, 0, 2147483647L, &n))
                return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': expected a "
                                 "non-negative integer", a, v);
            if (!strcmp(a, "--warmup")) o->warmup = (int)n;
            else if (!strcmp(a, "--seed")) o->seed = (uint64_t)n;
            else o->policy_seed = (unsigned)n;
        }
    }
    if (!o->workload)
        return util_errf(e, UTIL_EXIT_USAGE, "--workload FILE is required");
    /* one process runs a workload's devices as threads: every rank of
     * an mpirun job would run the whole workload again */
    if (exec_mpi_launched())
        return util_errf(e, UTIL_EXIT_USAGE, "--workload runs in one "
                         "process (its devices are threads): run it "
                         "without mpirun");
    if (!hw)
        return util_errf(e, UTIL_EXIT_USAGE, "--hw cpu xN is required: the "
                         "devices the jobs share");
    if (!c->n_pol) {
        for (int p = 0; p < EXEC_WL_POLICY_COUNT; p++) c->pol[c->n_pol++] = p;
        c->pol_default = 1;
    }
    /* what the run writes at its end, checked before it trains */
    if (c->trace) {
        int sharded = 0;
        for (int i = 0; i < c->n_pol; i++)
            sharded |= c->pol[i] != EXEC_WL_SEQUENTIAL &&
                       c->pol[i] != EXEC_WL_PIPELINE;
        if (!sharded)
            return util_errf(e, UTIL_EXIT_USAGE, "--trace: the baselines "
                             "have no shard-steps to trace; add a sharded "
                             "--policy");
        const char *ins[] = {o->workload};
        if (util_out_check("--trace", c->trace, 0, ins, 1, e)) return -1;
    }
    /* as exec --plan says it: more devices than cores time no core's
     * (the sequential baseline runs on one device alone) */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int many = 0;
    for (int i = 0; i < c->n_pol; i++)
        many |= c->pol[i] != EXEC_WL_SEQUENTIAL;
    if (many && cores > 0 && o->devices > cores)
        fprintf(stderr, "sluice exec: warning: %d devices on %ld cores run "
                "oversubscribed; timings will not be one core's per "
                "device\n", o->devices, cores);
    /* the budget the run holds devices to, said in the report */
    prof_gpu g;
    if (!o->mem_bytes) {
        if (prof_gpu_get("cpu", &g, e)) return -1;
        o->mem_bytes = g.mem_bytes;
    }
    return 0;
}

/* Whether job j's final state under r equals the baseline's, bit for bit. */
static int same_bits(const exec_wl_result *r, const exec_wl_result *b, int j)
{
    const exec_wl_jobres *x = &r->job[j], *y = &b->job[j];
    size_t n = x->n_params * sizeof(float);
    if (memcmp(x->params, y->params, n)) return 0;
    if (!x->adam_m || !y->adam_m) return !x->adam_m && !y->adam_m; /* SGD */
    return !memcmp(x->adam_m, y->adam_m, n) && !memcmp(x->adam_v, y->adam_v, n);
}

/* The largest difference of job j's final state from b's, over the
 * largest weight of b's (the pipeline baseline sums in its own order). */
static double max_diff(const exec_wl_result *r, const exec_wl_result *b,
                       int j)
{
    const exec_wl_jobres *x = &r->job[j], *y = &b->job[j];
    double d = 0, w = 0;
    for (size_t i = 0; i < x->n_params; i++) {
        d = fmax(d, fabs((double)x->params[i] - y->params[i]));
        w = fmax(w, fabs((double)y->params[i]));
    }
    return w > 0 ? d / w : d;
}

static double mean(const double *v, int n, double over)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return over > 0 ? s / n / over : 0;
}

static int write_trace(const char *path, const exec_wl *W,
                       const exec_wl_result *r, util_err *e)
{
    json_t *ev = json_array();
    for (int g = 0; g < r->n_devices; g++) {
        char nm[32];
        snprintf(nm, sizeof nm, "cpu %d", g);
        json_array_append_new(ev, json_pack("{s:s,s:s,s:i,s:{s:s}}", "ph", "M",
                                            "name", "process_name", "pid", g,
                                            "args", "name", nm));
    }
    static const char *kinds[] = {"F", "FB", "B"};
    for (int i = 0; i < r->n_seg; i++) {
        const exec_wl_seg *s = &r->seg[i];
        const char *name, *model;
        int k, B, T, steps;
        const int *first;
        exec_wl_job_info(W, s->job, &name, &model, &k, &first, &B, &T, &steps);
        char nm[96];
        snprintf(nm, sizeof nm, "%s %s%d", name, kinds[s->kind], s->shard);
        json_array_append_new(ev, json_pack(
            "{s:s,s:s,s:i,s:i,s:f,s:f,s:{s:i,s:i}}", "ph", "X", "name", nm,
            "pid", s->dev, "tid", 0, "ts", (double)s->start_ns / 1e3, "dur",
            (double)(s->end_ns - s->start_ns) / 1e3, "args", "job", s->job,
            "shard", s->shard));
    }
    json_t *root = json_pack("{s:s,s:o}", "displayTimeUnit", "ms",
                             "traceEvents", ev);
    char *txt = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    int rc = util_write_atomic_line(path, txt, e);
    free(txt);
    return rc;
}

static json_t *dvec(const double *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

/* The most any device held in a policy's run, and which (device 0 was
 * printed: 0 B where the policy left device 0 idle). */
static const char *peak_most(const exec_wl_result *r, int nd, char *buf,
                             size_t cap)
{
    int g = 0;
    for (int d = 1; d < nd; d++)
        if (r->dev_peak_bytes[d] > r->dev_peak_bytes[g]) g = d;
    char b[32];
    snprintf(buf, cap, "%s (device %d)",
             util_fmt_bytes(r->dev_peak_bytes[g], b, sizeof b), g);
    return buf;
}

static int report(const wcmd *c, const exec_wl *W, exec_wl_result *res,
                  int n, util_err *e)
{
    int base = -1, hyd = -1, pipe = -1, nd = c->o.devices;
    int nj = exec_wl_jobs(W);
    for (int i = 0; i < n; i++) {
        if (res[i].policy == EXEC_WL_SEQUENTIAL) base = i;
        if (res[i].policy == EXEC_WL_HYDRA) hyd = i;
        if (res[i].policy == EXEC_WL_PIPELINE) pipe = i;
    }
    /* every policy but the pipeline's sums in the reference's order:
     * equal bits; the pipeline's within its own order's rounding */
    int *eq = util_calloc((size_t)n, sizeof(int));
    double *dev = util_calloc((size_t)n, sizeof(double));
    for (int i = 0; i < n; i++) {
        eq[i] = base >= 0;
        for (int j = 0; j < nj && base >= 0; j++) {
            eq[i] &= same_bits(&res[i], &res[base], j);
            dev[i] = fmax(dev[i], max_diff(&res[i], &res[base], j));
        }
    }
    double sp = hyd >= 0 && base >= 0 ? res[base].makespan_s / res[hyd].makespan_s : 0;
    double spp = hyd >= 0 && base >= 0
               ? res[base].predicted_makespan_s / res[hyd].predicted_makespan_s : 0;
    double sq = hyd >= 0 && pipe >= 0 ? res[pipe].makespan_s / res[hyd].makespan_s : 0;
    double sqp = hyd >= 0 && pipe >= 0
               ? res[pipe].predicted_makespan_s / res[hyd].predicted_makespan_s : 0;
    static const char *base_note = "jobs in turn, each on one device with the "
        "reference model (exec_gpt: the whole model, no shards)";
    static const char *pipe_note = "jobs in turn, each the planner's best "
        "synchronous pipeline over every device, run by the pipeline "
        "executor";
    if (c->json) {
        json_t *root = json_pack("{s:s,s:i,s:f,s:f,s:s,s:s}", "workload",
                                 c->o.workload, "devices", nd,
                                 "mem_per_device_bytes", c->o.mem_bytes,
                                 "clip", (double)c->o.adamw.clip,
                                 "baseline", base_note, "pipeline", pipe_note);
        json_t *jobs = json_array(), *pa = json_array();
        for (int j = 0; j < nj; j++) {
            const char *name, *model;
            int k, B, T, steps;
            const int *first;
            exec_wl_job_info(W, j, &name, &model, &k, &first, &B, &T, &steps);
            json_t *fl = json_array();
            for (int s = 0; s <= k; s++) json_array_append_new(fl, json_integer(first[s]));
            json_array_append_new(jobs, json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:o}",
                "name", name, "model", model, "batch", B, "seq", T, "steps",
                steps, "shards", k, "shard_first_layers", fl));
        }
        for (int i = 0; i < n; i++) {
            const exec_wl_result *r = &res[i];
            json_t *p = json_pack("{s:s,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I}",
                "policy", exec_wl_policy_name(r->policy), "makespan_s",
                r->makespan_s, "predicted_makespan_s", r->predicted_makespan_s,
                "host_peak_bytes", r->host_peak_bytes,
                "predicted_host_peak_bytes", r->predicted_host_peak_bytes,
                "h2d_bytes", r->h2d_bytes, "d2h_bytes", r->d2h_bytes,
                "predicted_copy_bytes", r->predicted_copy_bytes,
                "shard_steps", (json_int_t)r->steps,
                "prefetched", (json_int_t)r->prefetched);
            double *u = util_calloc((size_t)nd, sizeof(double));
            double *pu = util_calloc((size_t)nd, sizeof(double));
            for (int g = 0; g < nd; g++) {
                u[g] = r->makespan_s > 0 ? r->busy_s[g] / r->makespan_s : 0;
                pu[g] = r->predicted_makespan_s > 0
                      ? r->predicted_busy_s[g] / r->predicted_makespan_s : 0;
            }
            json_object_set_new(p, "utilization", dvec(u, nd));
            json_object_set_new(p, "predicted_utilization", dvec(pu, nd));
            json_object_set_new(p, "device_peak_bytes", dvec(r->dev_peak_bytes, nd));
            free(u);
            free(pu);
            json_t *loss = json_array();
            for (int j = 0; j < nj; j++)
                json_array_append_new(loss, json_real(r->job[j].last_loss));
            json_object_set_new(p, "last_loss", loss);
            if (r->policy == EXEC_WL_PIPELINE) {
                json_t *pls = json_array();
                for (int j = 0; j < nj; j++)
                    json_array_append_new(pls, json_string(r->job[j].plan));
                json_object_set_new(p, "plans", pls);
                json_object_set_new(p, "setup_s", json_real(r->setup_s));
            }
            json_object_set_new(p, "weights_equal_baseline",
                                base >= 0 ? json_boolean(eq[i]) : json_null());
            json_object_set_new(p, "weights_max_diff_baseline",
                                base >= 0 ? json_real(dev[i]) : json_null());
            json_array_append_new(pa, p);
        }
        json_object_set_new(root, "jobs", jobs);
        json_object_set_new(root, "policies", pa);
        json_object_set_new(root, "hydra_speedup", sp > 0 ? json_real(sp) : json_null());
        json_object_set_new(root, "hydra_speedup_predicted",
                            spp > 0 ? json_real(spp) : json_null());
        json_object_set_new(root, "hydra_speedup_over_pipeline",
                            sq > 0 ? json_real(sq) : json_null());
        json_object_set_new(root, "hydra_speedup_over_pipeline_predicted",
                            sqp > 0 ? json_real(sqp) : json_null());
        util_json_print(root, stdout);
        json_decref(root);
    } else {
        char b1[32], b2[32], b3[32], b4[32];
        printf("\n");
        util_table *t = util_table_new(9);
        const char *h[] = {"policy", "makespan", "simulated", "meas/sim",
                           "device util", "host pool peak", "host->dev",
                           "dev->host", "prefetched"};
        for (int i = 0; i < 9; i++) util_table_col(t, i, h[i], i ? 'r' : 'l');
        for (int i = 0; i < n; i++) {
            const exec_wl_result *r = &res[i];
            char ms[32], pm[32], ratio[32], ut[32], pf[32];
            util_fmt_time(r->makespan_s, ms, sizeof ms);
            util_fmt_time(r->predicted_makespan_s, pm, sizeof pm);
            snprintf(ratio, sizeof ratio, "%.2f", r->predicted_makespan_s > 0
                     ? r->makespan_s / r->predicted_makespan_s : 0);
            snprintf(ut, sizeof ut, "%.0f%% (%.0f%%)",
                     100 * mean(r->busy_s, nd, r->makespan_s),
                     100 * mean(r->predicted_busy_s, nd, r->predicted_makespan_s));
            snprintf(pf, sizeof pf, "%ld/%ld", r->prefetched, r->steps);
            const char *row[] = {exec_wl_policy_name(r->policy), ms, pm, ratio,
                                 ut, r->policy == EXEC_WL_SEQUENTIAL ? "-"
                                 : util_fmt_bytes(r->host_peak_bytes, b1, sizeof b1),
                                 util_fmt_bytes(r->h2d_bytes, b2, sizeof b2),
                                 util_fmt_bytes(r->d2h_bytes, b3, sizeof b3),
                                 r->policy == EXEC_WL_SEQUENTIAL ||
                                 r->policy == EXEC_WL_PIPELINE ? "-" : pf};
            util_table_row(t, row);
        }
        util_table_print(t, stdout, "  ");
        util_table_free(t);
        printf("  device util: measured (simulated)\n");
        for (int i = 0; i < n; i++)
            if (res[i].policy == EXEC_WL_SEQUENTIAL)
                printf("  sequential: %s; its device holds %s, not held to "
                       "the %s budget\n", base_note,
                       util_fmt_bytes(res[i].dev_peak_bytes[0], b1, sizeof b1),
                       util_fmt_bytes(c->o.mem_bytes, b2, sizeof b2));
        if (pipe >= 0)
            printf("  pipeline: %s; its makespan is the runs' training, "
                   "%.2f s more went to setting them up (the plan's IR and "
                   "prediction, the corpus, the workers)\n", pipe_note,
                   res[pipe].setup_s);
        for (int i = 0; i < n; i++) {
            const exec_wl_result *r = &res[i];
            if (r->policy == EXEC_WL_SEQUENTIAL) continue;
            if (r->policy == EXEC_WL_PIPELINE) {
                printf("  pipeline per device:");
                for (int g = 0; g < nd; g++)
                    printf(" %.0f%%", r->makespan_s > 0
                                          ? 100 * r->busy_s[g] / r->makespan_s
                                          : 0);
                printf("; device peak %s\n", peak_most(r, nd, b1, sizeof b1));
                for (int j = 0; j < nj; j++)
                    printf("    %-14s %s\n", r->job[j].name, r->job[j].plan);
                continue;
            }
            printf("  %s per device:", exec_wl_policy_name(r->policy));
            for (int g = 0; g < nd; g++)
                printf(" %.0f%%", r->makespan_s > 0 ? 100 * r->busy_s[g] / r->makespan_s : 0);
            printf("; device peak %s; simulated host peak %s, copies %s\n",
                   peak_most(r, nd, b1, sizeof b1),
                   util_fmt_bytes(r->predicted_host_peak_bytes, b2, sizeof b2),
                   util_fmt_bytes(r->predicted_copy_bytes, b4, sizeof b4));
        }
        if (sp > 0)
            printf("\nhydra: %.2fx the baseline's throughput measured, %.2fx "
                   "simulated\n", sp, spp);
        if (sq > 0)
            printf("%s%.2fx the pipeline's throughput measured, %.2fx "
                   "simulated\n", sp > 0 ? "       " : "\nhydra: ", sq, sqp);
        int shards = 0;
        for (int i = 0; i < n; i++)
            shards += i != base && i != pipe;
        if (base >= 0 && shards) {
            int all = 1;
            for (int i = 0; i < n; i++)
                if (i != pipe) all &= eq[i];
            printf("weights: %s\n", all ? "every job's final weights and AdamW "
                   "state equal the baseline's bit for bit under every "
                   "sharded policy"
                   : "some jobs' final weights differ from the baseline's:");
            for (int i = 0; i < n && !all; i++)
                if (!eq[i] && i != pipe)
                    printf("  %s differs\n", exec_wl_policy_name(res[i].policy));
            if (pipe >= 0)
                printf("  pipeline: within %.1e of the largest weight (it "
                       "sums in its own order)\n", dev[pipe]);
        }
    }
    int rc = 0;
    if (c->trace) {
        int k = -1;
        for (int i = 0; i < n && k < 0; i++)
            if (res[i].policy != EXEC_WL_SEQUENTIAL &&
                res[i].policy != EXEC_WL_PIPELINE)
                k = i;
        if (k < 0)
            rc = util_errf(e, UTIL_EXIT_USAGE, "--trace: the baselines have "
                           "no shard-steps to trace; add a sharded --policy");
        else rc = write_trace(c->trace, W, &res[k], e);
    }
    free(eq);
    free(dev);
    return rc;
}

int exec_wl_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    wcmd c;
    memset(&c, 0, sizeof c);
    util_err e = {0};
    exec_wl *W = NULL;
    exec_wl_result res[EXEC_WL_POLICY_COUNT];
    memset(res, 0, sizeof res);
    int n = 0, rc = 0;
    if (parse(argc, argv, &c, &e) || !(W = exec_wl_new(&c.o, &e))) {
        rc = -1;
        goto out;
    }
    /* the default leaves the pipeline baseline out where it cannot run
     * (asked for by name, that is an error): the pipeline executor trains
     * with AdamW, not a job's SGD, and a job may have no pipeline plan on
     * these devices (a batch that splits over no layout of them) */
    int pipe = 0, sgd = 0;
    for (int i = 0; i < c.n_pol; i++) pipe |= c.pol[i] == EXEC_WL_PIPELINE;
    for (int j = 0; j < exec_wl_jobs(W); j++) sgd |= exec_wl_job_sgd(W, j);
    util_err pe = {0};
    if (pipe && c.pol_default) {
        int pk = 1;
        if (sgd)
            snprintf(pe.msg, sizeof pe.msg, "it trains with AdamW and the "
                     "workload has SGD jobs");
        else if ((pk = exec_wl_pipe_plannable(W, &pe)) < 0) {
            e = pe;
            rc = -1;
            goto out;
        }
        if (pk > 0) {
            int k = 0;
            for (int i = 0; i < c.n_pol; i++)
                if (c.pol[i] != EXEC_WL_PIPELINE) c.pol[k++] = c.pol[i];
            c.n_pol = k;
            fprintf(stderr, "sluice exec: the pipeline baseline is left out: "
                    "%s\n", pe.msg);
        }
    }
    if (!c.json) {
        char b[32];
        printf("sluice exec: workload %s, %d job%s on %d CPU device%s of %s; "
               "AdamW (SGD where a job says) lr %.2e, clip %g, seed %llu\n",
               c.o.workload, exec_wl_jobs(W), exec_wl_jobs(W) > 1 ? "s" : "",
               c.o.devices, c.o.devices > 1 ? "s" : "",
               util_fmt_bytes(c.o.mem_bytes, b, sizeof b),
               c.o.adamw.lr, (double)c.o.adamw.clip,
               (unsigned long long)c.o.seed);
        for (int j = 0; j < exec_wl_jobs(W); j++) {
            const char *name, *model;
            int k, B, T, steps;
            const int *first;
            exec_wl_job_info(W, j, &name, &model, &k, &first, &B, &T, &steps);
            printf("  %-14s %s, batch %d x %d, %d steps%s: %d shard%s "
                   "(layers", name, model, B, T, steps,
                   exec_wl_job_sgd(W, j) ? ", SGD" : "", k, k > 1 ? "s" : "");
            for (int s = 0; s < k; s++)
                printf("%s%d-%d", s ? ", " : " ", first[s], first[s + 1] - 1);
            printf(")\n");
        }
        fflush(stdout);
    }
    for (int i = 0; i < c.n_pol && !rc; i++, n++)
        rc = exec_wl_run(W, (exec_wl_policy)c.pol[i], &res[i], &e);
    if (!rc) rc = report(&c, W, res, n, &e);
out:
    if (rc) fprintf(stderr, "sluice exec: %s\n", e.msg);
    for (int i = 0; i < n; i++) exec_wl_result_free(&res[i]);
    exec_wl_free(W);
    return rc ? (e.code ? e.code : UTIL_EXIT_FAIL) : 0;
}
