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
 *     iteration time and per-device compute. */
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

static int report(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        fprintf(stderr, "gpu_check: %s:%d: %s\n", path, je.line, je.text);
        return 2;
    }
    json_t *p = json_object_get(j, "predicted");
    double m = num(j, "iteration_time_s"), s = num(p, "iteration_time_s");
    printf("%s backend, %s transport: iteration measured %.3f ms, "
           "simulated %.3f ms (measured/simulated %.3f)\n",
           json_string_value(json_object_get(j, "backend")),
           json_string_value(json_object_get(j, "transport")), m * 1e3,
           s * 1e3, s > 0 ? m / s : 0);
    json_t *dm = json_object_get(j, "devices");
    json_t *ds = json_object_get(p, "devices");
    printf("%-6s %16s %16s %8s\n", "device", "compute ms", "simulated ms",
           "ratio");
    for (size_t d = 0; d < json_array_size(dm); d++) {
        double a = num(json_array_get(dm, d), "compute_s");
        double b = num(json_array_get(ds, d), "compute_s");
        printf("%-6zu %16.3f %16.3f %8.3f\n", d, a * 1e3, b * 1e3,
               b > 0 ? a / b : 0);
    }
    json_decref(j);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "weights"))
        return weights(argv[2], argv[3], atof(argv[4]), atof(argv[5]));
    if (argc == 3 && !strcmp(argv[1], "report")) return report(argv[2]);
    fprintf(stderr, "usage: gpu_check weights A.ckpt B.ckpt ATOL FRACTION\n"
                    "       gpu_check report RUN.json\n");
    return 2;
}
