/* gpu_check: the comparisons tests/gpu/run.sh makes (built by make cuda;
 * no CUDA in it).
 *   gpu_check weights A.ckpt B.ckpt ATOL FRACTION
 *     the weights of two checkpoints of one model: every weight within
 *     ATOL, except at most FRACTION of them (AdamW's first steps move a
 *     weight by about lr in the sign of its gradient, so a gradient within
 *     fp32 rounding of zero may step the other way on another device);
 *     exit 0 when so, 1 when not, 2 on bad input.
 *   gpu_check report RUN.json
 *     a run's `exec --json` document: measured against simulated
 *     iteration time and per-device compute.
 *   gpu_check tiers RUN.json REL
 *     an offload plan's run (`exec --json`): each tier resource's busy
 *     share and bytes, and host memory at its peak, measured against
 *     simulated; exit 1 where the bytes moved are more than REL from the
 *     simulation's, or the host's peak from the simulator's count over
 *     the run's own task times (busy shares are reported). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"

static float *load(const char *path, exec_gpt_config *c, size_t *n,
                   util_err *e)
{
    exec_ckpt_meta m;
    if (exec_ckpt_peek(path, &m, e)) return NULL;
    exec_tensor tt[EXEC_P_COUNT];
    *n = exec_gpt_param_table(&m.cfg, tt);
    *c = m.cfg;
    float *p = util_malloc(sizeof *p * (*n + 1));
    if (exec_ckpt_load_state(path, &m.cfg, p, NULL, NULL, &m, e)) {
        free(p);
        return NULL;
    }
    return p;
}

static int weights(const char *a, const char *b, double atol, double frac)
{
    util_err e;
    exec_gpt_config ca, cb;
    size_t na = 0, nb = 0;
    float *pa = load(a, &ca, &na, &e), *pb = pa ? load(b, &cb, &nb, &e) : NULL;
    if (!pa || !pb || na != nb) {
        fprintf(stderr, "gpu_check: %s\n", !pa || !pb ? e.msg
                                                       : "different models");
        free(pa);
        free(pb);
        return 2;
    }
    double worst = 0, big = 0;
    size_t over = 0, at = 0;
    for (size_t i = 0; i < na; i++) {
        double d = fabs((double)pa[i] - pb[i]);
        if (!(d <= atol)) over++;
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
        big = fmax(big, fabs(pa[i]));
    }
    double f = (double)over / (double)na;
    int ok = f <= frac;
    printf("weights: %zu compared, largest |weight| %.4g; largest "
           "difference %.3g (at %zu: %.9g vs %.9g); %zu beyond %.1g "
           "(%.2g of them, at most %.1g allowed): %s\n", na, big, worst, at,
           pa[at], pb[at], over, atol, f, frac, ok ? "agree" : "DIFFER");
    free(pa);
    free(pb);
    return ok ? 0 : 1;
}

static double num(json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

/* A JSON file, or NULL after saying why. */
static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        fprintf(stderr, "gpu_check: %s:%d: %s\n", path, je.line, je.text);
    return j;
}

static int report(const char *path)
{
    json_t *j = load_json(path);
    if (!j) return 2;
    json_t *p = json_object_get(j, "predicted");
    double m = num(j, "iteration_time_s"), s = num(p, "iteration_time_s");
    printf("%s backend, %s transport: iteration measured %.3f ms, "
           "simulated %.3f ms (measured/simulated %.3f)\n",
           json_string_value(json_object_get(j, "backend")),
           json_string_value(json_object_get(j, "transport")), m * 1e3,
           s * 1e3, s > 0 ? m / s : 0);
    if (json_is_true(json_object_get(j, "tf32")))
        printf("products in TF32 (predicted at the GPU's TF32 peak)\n");
    json_t *dm = json_object_get(j, "devices");
    json_t *ds = json_object_get(p, "devices");
    printf("%-6s %12s %12s %8s %12s %12s %8s\n", "device", "compute ms",
           "simulated", "ratio", "peak GiB", "simulated", "ratio");
    for (size_t d = 0; d < json_array_size(dm); d++) {
        json_t *x = json_array_get(dm, d), *y = json_array_get(ds, d);
        double a = num(x, "compute_s"), b = num(y, "compute_s");
        double pa = num(x, "peak_mem_bytes") / (1 << 30);
        double pb = num(y, "peak_mem_bytes") / (1 << 30);
        printf("%-6zu %12.3f %12.3f %8.3f %12.3f %12.3f %8.3f\n", d, a * 1e3,
               b * 1e3, b > 0 ? a / b : 0, pa, pb, pb > 0 ? pa / pb : 0);
    }
    json_t *st = json_object_get(j, "steps");
    size_t ns = json_array_size(st);
    if (ns)
        printf("loss: step 1 %.4f, step %zu %.4f\n",
               num(json_array_get(st, 0), "loss"), ns,
               num(json_array_get(st, ns - 1), "loss"));
    json_decref(j);
    return 0;
}

/* An offload plan's tiers, measured against simulated: the bytes and the
 * host's peak within rel. */
static int tiers(const char *path, double rel)
{
    json_t *j = load_json(path);
    if (!j) return 2;
    json_t *t = json_object_get(j, "tiers");
    json_t *res = json_object_get(t, "resources");
    if (!json_is_object(t) || !json_is_array(res)) {
        fprintf(stderr, "gpu_check: %s: no tiers (not an offload plan's "
                        "run)\n", path);
        json_decref(j);
        return 2;
    }
    double it = num(j, "iteration_time_s");
    double ps = num(json_object_get(j, "predicted"), "iteration_time_s");
    printf("%s, states in %s: iteration %.3f s measured, %.3f s simulated "
           "(measured/simulated %.3f)\n",
           json_string_value(json_object_get(t, "schedule")),
           json_string_value(json_object_get(t, "tier")), it, ps,
           ps > 0 ? it / ps : 0);
    printf("%-14s %6s %9s %12s %12s\n", "resource", "busy", "sim busy",
           "bytes", "sim bytes");
    int ok = 1;
    for (size_t k = 0; k < json_array_size(res); k++) {
        json_t *x = json_array_get(res, k);
        double b = num(x, "bytes"), sb = num(x, "simulated_bytes");
        int off = fabs(b - sb) > rel * sb;
        ok &= !off;
        printf("%-14s %5.0f%% %8.0f%% %12.0f %12.0f%s\n",
               json_string_value(json_object_get(x, "resource")),
               it > 0 ? 100 * num(x, "busy_s") / it : 0,
               ps > 0 ? 100 * num(x, "simulated_busy_s") / ps : 0, b, sb,
               off ? "  OFF" : "");
    }
    /* the host's peak follows the timing (how many fetches from the
     * drives are in flight at once): it is checked against the
     * simulator's count over the run's own task times where the report
     * has it, the plan's simulation beside it */
    double h = num(t, "host_peak_bytes"), sh = num(t, "simulated_host_peak_bytes");
    json_t *cj = json_object_get(t, "counted_host_peak_bytes");
    double ch = json_is_number(cj) ? json_number_value(cj) : sh;
    int hoff = !(fabs(h - ch) <= rel * ch);
    ok &= !hoff;
    printf("host memory at most %.3f GiB, simulated %.3f GiB "
           "(measured/simulated %.3f)", h / (1 << 30), sh / (1 << 30),
           sh > 0 ? h / sh : 0);
    if (json_is_number(cj))
        printf("; over the run's own task times %.3f GiB (measured/counted "
               "%.3f)", ch / (1 << 30), ch > 0 ? h / ch : 0);
    printf("%s\n", hoff ? "  OFF" : "");
    printf("bytes within %.0f%% of the simulation's, host peak of its count%s: "
           "%s\n", 100 * rel, json_is_number(cj) ? " over the run's times" : "",
           ok ? "agree" : "DIFFER");
    json_decref(j);
    return ok ? 0 : 1;
}

/* Two runs' losses step by step: every step's within rel of a's. */
static int losses(const char *pa, const char *pb, double rel)
{
    json_t *a = load_json(pa), *b = a ? load_json(pb) : NULL;
    if (!b) {
        json_decref(a);
        return 2;
    }
    json_t *sa = json_object_get(a, "steps"), *sb = json_object_get(b, "steps");
    size_t n = json_array_size(sa);
    double worst = 0;
    size_t at = 0;
    int ok = n > 0 && n == json_array_size(sb);
    for (size_t k = 0; ok && k < n; k++) {
        double x = num(json_array_get(sa, k), "loss");
        double y = num(json_array_get(sb, k), "loss");
        double d = fabs(y - x) / fabs(x);
        if (!(d <= worst)) worst = d, at = k;
    }
    ok = ok && worst <= rel;
    printf("losses: %zu steps compared, largest relative difference %.3g "
           "(step %zu), at most %.1g allowed: %s\n", n, worst, at + 1, rel,
           ok ? "agree" : "DIFFER");
    json_decref(a);
    json_decref(b);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "weights"))
        return weights(argv[2], argv[3], atof(argv[4]), atof(argv[5]));
    if (argc == 3 && !strcmp(argv[1], "report")) return report(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "tiers"))
        return tiers(argv[2], atof(argv[3]));
    if (argc == 5 && !strcmp(argv[1], "losses"))
        return losses(argv[2], argv[3], atof(argv[4]));
    fprintf(stderr, "usage: gpu_check weights A.ckpt B.ckpt ATOL FRACTION\n"
                    "       gpu_check report RUN.json\n"
                    "       gpu_check tiers RUN.json RELATIVE\n"
                    "       gpu_check losses A.json B.json RELATIVE\n");
    return 2;
}
