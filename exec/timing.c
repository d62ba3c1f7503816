/* Per-op timing, aggregated by signature (kernel op, shape letters, GEMM
 * m/n/k): the rows the executor's calibration fits the cost model's GEMM
 * efficiency and memory-bandwidth curves to. A linear table: a model has
 * a few dozen distinct signatures. */
#include "exec/exec.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct timing_row {
    kern_op op;
    const char *as;          /* model op kind when not the kernel's */
    int dims[6];
    double gemm[3];
    double flops, bytes;     /* per call */
    uint64_t calls, ns_total, ns_min;
} timing_row;

struct exec_timing {
    timing_row *rows;
    int n, cap;
};

uint64_t exec_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

exec_timing *exec_timing_new(void) { return util_calloc(1, sizeof(exec_timing)); }

void exec_timing_free(exec_timing *t)
{
    if (!t) return;
    free(t->rows);
    free(t);
}

void exec_timing_reset(exec_timing *t) { t->n = 0; }

void exec_timing_add(exec_timing *t, kern_op op, const char *as,
                     const int dims[6], const double gemm[3], double flops,
                     double bytes, uint64_t ns)
{
    timing_row *r = NULL;
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].op == op && t->rows[i].as == as &&
            !memcmp(t->rows[i].dims, dims,
                                           sizeof t->rows[i].dims) &&
            !memcmp(t->rows[i].gemm, gemm, sizeof t->rows[i].gemm) &&
            t->rows[i].bytes == bytes) {
            r = &t->rows[i];
            break;
        }
    if (!r) {
        if (t->n == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 32;
            t->rows = util_realloc(t->rows, (size_t)t->cap * sizeof *t->rows);
        }
        r = &t->rows[t->n++];
        memset(r, 0, sizeof *r);
        r->op = op;
        r->as = as;
        memcpy(r->dims, dims, sizeof r->dims);
        memcpy(r->gemm, gemm, sizeof r->gemm);
        r->flops = flops;
        r->bytes = bytes;
        r->ns_min = UINT64_MAX;
    }
    r->calls++;
    r->ns_total += ns;
    if (ns < r->ns_min) r->ns_min = ns;
}

uint64_t exec_timing_kind_ns(const exec_timing *t, kern_kind k)
{
    uint64_t s = 0;
    for (int i = 0; i < t->n; i++)
        if (kern_op_kind(t->rows[i].op) == k) s += t->rows[i].ns_total;
    return s;
}

uint64_t exec_timing_op_ns(const exec_timing *t, kern_op op)
{
    uint64_t s = 0;
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].op == op) s += t->rows[i].ns_total;
    return s;
}

uint64_t exec_timing_total_ns(const exec_timing *t)
{
    uint64_t s = 0;
    for (int i = 0; i < t->n; i++) s += t->rows[i].ns_total;
    return s;
}

uint64_t exec_timing_gemm_ns(const exec_timing *t)
{
    return exec_timing_kind_ns(t, KERN_KIND_LINEAR);
}

static const char *phase_of(kern_op op)
{
    const char *n = kern_op_name(op);
    if (strstr(n, "_backward_input")) return "bwd_in";
    if (strstr(n, "_backward_weight")) return "bwd_w";
    if (strstr(n, "_backward")) return "bwd";
    if (strstr(n, "_forward")) return "fwd";
    return "step";
}

json_t *exec_timing_json(const exec_timing *t)
{
    static const char *const letters[6] = {"B", "T", "C", "NH", "V", "OC"};
    json_t *ops = json_array();
    for (int i = 0; i < t->n; i++) {
        const timing_row *r = &t->rows[i];
        json_t *o = json_object();
        json_object_set_new(o, "op", json_string(kern_op_name(r->op)));
        json_object_set_new(o, "kind",
                            json_string(r->as ? r->as
                                              : kern_kind_name(
                                                    kern_op_kind(r->op))));
        json_object_set_new(o, "phase", json_string(phase_of(r->op)));
        json_t *sh = json_object();
        for (int d = 0; d < 6; d++)
            if (r->dims[d]) json_object_set_new(sh, letters[d],
                                                json_integer(r->dims[d]));
        json_object_set_new(o, "shape", sh);
        if (r->gemm[0] > 0) {
            json_t *g = json_object();
            json_object_set_new(g, "m", json_integer((json_int_t)r->gemm[0]));
            json_object_set_new(g, "n", json_integer((json_int_t)r->gemm[1]));
            json_object_set_new(g, "k", json_integer((json_int_t)r->gemm[2]));
            json_object_set_new(o, "gemm", g);
        }
        json_object_set_new(o, "flops", json_real(r->flops));
        json_object_set_new(o, "bytes", json_real(r->bytes));
        json_object_set_new(o, "calls", json_integer((json_int_t)r->calls));
        json_object_set_new(o, "ns_total",
                            json_integer((json_int_t)r->ns_total));
        json_object_set_new(o, "ns_mean",
                            json_integer((json_int_t)(r->ns_total / r->calls)));
        json_object_set_new(o, "ns_min", json_integer((json_int_t)r->ns_min));
        json_array_append_new(ops, o);
    }
    json_t *root = json_object();
    json_object_set_new(root, "ops", ops);
    return root;
}
