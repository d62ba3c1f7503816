/* Optimal contiguous partitioning of a chain into pipeline stages.
 * best[s][j]: the least possible bottleneck over stages 0..s when stage s
 * ends at unit j. Each transition tries every start of stage s; with prefix
 * sums a stage's cost and memory are O(1), so the whole search is
 * O(k n^2) time and O(k n) space, exact for any per-stage cost. */
#include "planner/planner.h"

#include <math.h>
#include <stdlib.h>

/* Prefix sums are recomputed per call; callers pass small chains (layers
 * or coarsened ops), so this is cheap next to the search itself. */
typedef struct prefix {
    double *time, *smem, *amem;
} prefix;

static double cut_in(const plan_chain *c, int a)
{
    return a > 0 ? c->cut_time[a - 1] : 0;
}

static double cut_out(const plan_chain *c, int b)
{
    return b < c->n - 1 ? c->cut_time[b] : 0;
}

static double cost_of(const plan_chain *c, double compute, int a, int b)
{
    double in = cut_in(c, a), out = cut_out(c, b);
    if (c->overlap) {
        double m = compute;
        if (in > m) m = in;
        if (out > m) m = out;
        return m;
    }
    return compute + in + out;
}

double plan_stage_cost(const plan_chain *c, int s, int a, int b)
{
    (void)s;
    double t = 0;
    for (int u = a; u <= b; u++) t += c->time[u];
    return cost_of(c, t, a, b);
}

double plan_stage_mem(const plan_chain *c, int s, int a, int b)
{
    double st = 0, ac = 0;
    for (int u = a; u <= b; u++) {
        st += c->static_mem[u];
        ac += c->act_mem[u];
    }
    return st + ac * c->inflight[s];
}

double plan_partition_chain(const plan_chain *c, int *first)
{
    int n = c->n, k = c->k;
    if (k <= 0 || n < k) return -1;
    prefix p;
    p.time = util_calloc((size_t)n + 1, sizeof(double));
    p.smem = util_calloc((size_t)n + 1, sizeof(double));
    p.amem = util_calloc((size_t)n + 1, sizeof(double));
    for (int u = 0; u < n; u++) {
        p.time[u + 1] = p.time[u] + c->time[u];
        p.smem[u + 1] = p.smem[u] + c->static_mem[u];
        p.amem[u + 1] = p.amem[u] + c->act_mem[u];
    }
    double *best = util_malloc(sizeof(double) * (size_t)k * (size_t)n);
    int *from = util_malloc(sizeof(int) * (size_t)k * (size_t)n);
    for (int i = 0; i < k * n; i++) {
        best[i] = INFINITY;
        from[i] = -1;
    }
#define B(s, j) best[(size_t)(s) * (size_t)n + (size_t)(j)]
#define F(s, j) from[(size_t)(s) * (size_t)n + (size_t)(j)]
    for (int s = 0; s < k; s++) {
        /* Stage s ends at j; stages s+1..k-1 need one unit each after it. */
        for (int j = s; j <= n - (k - s); j++) {
            /* Start a of stage s: a == 0 for the first stage, else after a
             * feasible end of stage s-1. Walk a downwards so memory grows
             * monotonically and we can stop once it no longer fits. */
            int amin = s == 0 ? 0 : s;
            int amax = s == 0 ? 0 : j;
            for (int a = amax; a >= amin; a--) {
                double mem = p.smem[j + 1] - p.smem[a] +
                             (p.amem[j + 1] - p.amem[a]) * c->inflight[s];
                if (mem > c->cap[s]) break; /* larger stages hold more */
                /* a stage costs at least its compute, which only grows
                 * as it starts earlier: nothing below can beat the best */
                if (p.time[j + 1] - p.time[a] >= B(s, j)) break;
                double prev = s == 0 ? 0 : B(s - 1, a - 1);
                if (prev == INFINITY) continue;
                double cost = cost_of(c, p.time[j + 1] - p.time[a], a, j);
                double v = prev > cost ? prev : cost;
                if (v < B(s, j)) {
                    B(s, j) = v;
                    F(s, j) = a;
                }
            }
        }
    }
    double ans = B(k - 1, n - 1);
    if (ans != INFINITY) {
        first[k] = n;
        int j = n - 1;
        for (int s = k - 1; s >= 0; s--) {
            int a = F(s, j);
            first[s] = a;
            j = a - 1;
        }
    }
#undef B
#undef F
    free(best);
    free(from);
    free(p.time);
    free(p.smem);
    free(p.amem);
    return ans == INFINITY ? -1 : ans;
}
