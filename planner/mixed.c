/* Mixed-pipe partitioning (FTPipe, USENIX ATC'21): cut the op chain into
 * blocks finer than layers and place blocks on devices without requiring
 * neighbouring blocks to sit on neighbouring devices. The objective is
 * FTPipe's: a device's cost is the compute of all its blocks plus, for each
 * of its stages, the transfer time in and out that exceeds that stage's
 * compute (the part its copy streams cannot hide). The slowest device sets
 * the pipeline's period. */
#include "planner/planner.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* fmax without the library call (the refinement evaluates this often) */
static inline double dmax(double a, double b) { return a > b ? a : b; }

static double sum(const double *v, int a, int b)
{
    double s = 0;
    for (int i = a; i < b; i++) s += v[i];
    return s;
}

double plan_mixed_objective(const plan_mixed_in *in, int ns, const int *first,
                            const int *dev)
{
    double *load = util_calloc((size_t)in->p, sizeof *load);
    for (int s = 0; s < ns; s++) {
        int a = first[s], b = first[s + 1];
        double c = sum(in->time, a, b);
        /* Transfers between stages on one device are free. */
        double cin = a > 0 && dev[s - 1] != dev[s] ? in->cut_time[a - 1] : 0;
        double cout = b < in->n && dev[s + 1] != dev[s] ? in->cut_time[b - 1] : 0;
        load[dev[s]] += c + dmax(0, cin - c) + dmax(0, cout - c);
    }
    double worst = 0;
    for (int d = 0; d < in->p; d++) worst = dmax(worst, load[d]);
    free(load);
    return worst;
}

/* What the local search evaluates thousands of times, precomputed: the
 * sums of time, static and activation memory over every range of units,
 * each added left to right as sum() does (row a: 0, v[a], v[a]+v[a+1],
 * ...), so every figure is bit for bit sum()'s; and scratch per device. */
typedef struct ranges {
    int n, w;                 /* units; row width n+1 */
    double *time, *smem, *amem; /* [a*w+b]: units a..b-1; NULL: use sum() */
    double *load, *mem;       /* [p] scratch */
} ranges;

/* Above this many units the tables (3 (n+1)^2 doubles) cost more memory
 * than they save time: ranges are summed as they are asked. */
#define RANGES_MAX_UNITS 1024

static void ranges_init(ranges *r, const plan_mixed_in *in)
{
    memset(r, 0, sizeof *r);
    r->n = in->n;
    r->w = in->n + 1;
    r->load = util_malloc(sizeof(double) * (size_t)in->p);
    r->mem = util_malloc(sizeof(double) * (size_t)in->p);
    if (in->n > RANGES_MAX_UNITS) return;
    size_t cells = (size_t)r->w * r->w;
    r->time = util_malloc(sizeof(double) * cells);
    r->smem = util_malloc(sizeof(double) * cells);
    r->amem = util_malloc(sizeof(double) * cells);
    for (int a = 0; a <= in->n; a++) {
        size_t row = (size_t)a * r->w;
        r->time[row + a] = r->smem[row + a] = r->amem[row + a] = 0;
        for (int b = a + 1; b <= in->n; b++) {
            r->time[row + b] = r->time[row + b - 1] + in->time[b - 1];
            r->smem[row + b] = r->smem[row + b - 1] + in->static_mem[b - 1];
            r->amem[row + b] = r->amem[row + b - 1] + in->act_mem[b - 1];
        }
    }
}

static void ranges_free(ranges *r)
{
    free(r->time);
    free(r->smem);
    free(r->amem);
    free(r->load);
    free(r->mem);
}

static double range_time(const ranges *r, const plan_mixed_in *in, int a,
                         int b)
{
    return r->time ? r->time[(size_t)a * r->w + b] : sum(in->time, a, b);
}

/* Bytes a stage of units [a, b) needs. */
static double range_need(const ranges *r, const plan_mixed_in *in, int a,
                         int b)
{
    if (!r->time)
        return sum(in->static_mem, a, b) + sum(in->act_mem, a, b) * in->inflight;
    size_t i = (size_t)a * r->w + b;
    return r->smem[i] + r->amem[i] * in->inflight;
}

static int fits(const plan_mixed_in *in, const ranges *r, int ns,
                const int *first, const int *dev)
{
    double *mem = r->mem;
    int ok = 1;
    for (int d = 0; d < in->p; d++) mem[d] = 0;
    for (int s = 0; s < ns; s++)
        mem[dev[s]] += range_need(r, in, first[s], first[s + 1]);
    for (int d = 0; d < in->p; d++) ok &= mem[d] <= in->cap;
    return ok;
}

/* plan_mixed_objective over the tables. */
static double objective(const plan_mixed_in *in, const ranges *r, int ns,
                        const int *first, const int *dev)
{
    double *load = r->load;
    for (int d = 0; d < in->p; d++) load[d] = 0;
    for (int s = 0; s < ns; s++) {
        int a = first[s], b = first[s + 1];
        double c = range_time(r, in, a, b);
        double cin = a > 0 && dev[s - 1] != dev[s] ? in->cut_time[a - 1] : 0;
        double cout = b < in->n && dev[s + 1] != dev[s] ? in->cut_time[b - 1] : 0;
        load[dev[s]] += c + dmax(0, cin - c) + dmax(0, cout - c);
    }
    double worst = 0;
    for (int d = 0; d < in->p; d++) worst = dmax(worst, load[d]);
    return worst;
}

/* Merges neighbouring blocks placed on the same device into one stage. */
static int merge(int nb, int *first, int *dev)
{
    int ns = 0;
    for (int b = 0; b < nb; b++) {
        if (ns && dev[ns - 1] == dev[b]) {
            first[ns] = first[b + 1];
            continue;
        }
        first[ns] = first[b];
        dev[ns] = dev[b];
        first[ns + 1] = first[b + 1];
        ns++;
    }
    return ns;
}

typedef struct cand {
    int ns;
    int *first, *dev;
    double obj;
} cand;

static void keep(cand *best, int ns, const int *first, const int *dev,
                 double obj)
{
    if (best->first && obj >= best->obj) return;
    free(best->first);
    free(best->dev);
    best->ns = ns;
    best->first = util_malloc(sizeof(int) * (size_t)(ns + 1));
    best->dev = util_malloc(sizeof(int) * (size_t)ns);
    memcpy(best->first, first, sizeof(int) * (size_t)(ns + 1));
    memcpy(best->dev, dev, sizeof(int) * (size_t)ns);
    best->obj = obj;
}

/* Greedy best fit, largest block first: each block to the least-loaded
 * device that still has memory room. Ties go to the lowest device, so the
 * result is deterministic. Returns 0 or -1 when a block fits nowhere. */
static int assign(const plan_mixed_in *in, const ranges *r, int nb,
                  const int *first, int *dev)
{
    int *order = util_malloc(sizeof(int) * (size_t)nb);
    double *t = util_malloc(sizeof(double) * (size_t)nb);
    double *load = util_calloc((size_t)in->p, sizeof *load);
    double *mem = util_calloc((size_t)in->p, sizeof *mem);
    for (int b = 0; b < nb; b++) {
        order[b] = b;
        t[b] = range_time(r, in, first[b], first[b + 1]);
    }
    /* Insertion sort by time descending, index ascending: nb is small. */
    for (int i = 1; i < nb; i++)
        for (int j = i; j > 0 && (t[order[j]] > t[order[j - 1]]); j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    int ok = 0;
    for (int i = 0; i < nb; i++) {
        int b = order[i];
        double need = range_need(r, in, first[b], first[b + 1]);
        int pick = -1;
        for (int d = 0; d < in->p; d++)
            if (mem[d] + need <= in->cap && (pick < 0 || load[d] < load[pick]))
                pick = d;
        if (pick < 0) { ok = -1; break; }
        dev[b] = pick;
        load[pick] += t[b];
        mem[pick] += need;
    }
    free(order);
    free(t);
    free(load);
    free(mem);
    return ok;
}

/* Objective of the blocks as stages (neighbours on one device merged),
 * or INFINITY when they do not fit; f2/d2 are scratch. */
static double evaluate(const plan_mixed_in *in, const ranges *r, int nb,
                       const int *first, const int *dev, int *f2, int *d2)
{
    memcpy(f2, first, sizeof(int) * (size_t)(nb + 1));
    memcpy(d2, dev, sizeof(int) * (size_t)nb);
    int ns = merge(nb, f2, d2);
    if (!fits(in, r, ns, f2, d2)) return INFINITY;
    return objective(in, r, ns, f2, d2);
}

/* Compute of each device's blocks, summed exactly as the objective does
 * not (block by block): only for a bound with a margin. */
static void device_compute(const plan_mixed_in *in, const ranges *r, int nb,
                           const int *first, const int *dev, double *comp)
{
    for (int d = 0; d < in->p; d++) comp[d] = 0;
    for (int b = 0; b < nb; b++)
        comp[dev[b]] += range_time(r, in, first[b], first[b + 1]);
}

/* Local search on block boundaries and placements: move one unit across a
 * boundary, or move a block to another device; accept strict improvements
 * that still fit (*slot is the value changed, restored on rejection).
 * Bounded passes keep it fast and deterministic. A device costs at least
 * its compute, so moving a block to a device whose compute would then
 * exceed the objective cannot improve it: such moves are not evaluated
 * (the margin is far above rounding, so only moves evaluation would
 * reject are skipped and the result is the same). */
static void refine(const plan_mixed_in *in, const ranges *r, int nb,
                   int *first, int *dev)
{
    int *f2 = util_malloc(sizeof(int) * (size_t)(nb + 1));
    int *d2 = util_malloc(sizeof(int) * (size_t)nb);
    double *comp = util_malloc(sizeof(double) * (size_t)in->p);
    double cur = evaluate(in, r, nb, first, dev, f2, d2);
#define TRY(slot, value) do { \
        int old_ = (slot); \
        (slot) = (value); \
        double v_ = evaluate(in, r, nb, first, dev, f2, d2); \
        if (v_ < cur - 1e-15) { cur = v_; improved = 1; } \
        else (slot) = old_; \
    } while (0)
    for (int pass = 0; pass < 64; pass++) {
        int improved = 0;
        for (int b = 1; b < nb; b++)
            for (int dir = -1; dir <= 1; dir += 2) {
                int nf = first[b] + dir;
                if (nf > first[b - 1] && nf < first[b + 1]) TRY(first[b], nf);
            }
        device_compute(in, r, nb, first, dev, comp);
        for (int b = 0; b < nb; b++) {
            double tb = range_time(r, in, first[b], first[b + 1]);
            for (int d = 0; d < in->p; d++) {
                if (d == dev[b] || comp[d] + tb > cur * (1 + 1e-9) + 1e-15)
                    continue;
                TRY(dev[b], d);
                if (dev[b] == d) device_compute(in, r, nb, first, dev, comp);
            }
        }
        if (!improved) break;
    }
#undef TRY
    free(comp);
    free(f2);
    free(d2);
}

/* ---- balanced cuts, remembered ---- */

typedef struct memo_ent {
    uint64_t hash;
    int n, L;
    double *time, *cut;       /* the chain, compared in full on a hit */
    int *first;               /* [L+1]; NULL: no cut exists */
} memo_ent;

struct plan_mixed_memo {
    memo_ent *e;
    int n, cap;
};

plan_mixed_memo *plan_mixed_memo_new(void)
{
    return util_calloc(1, sizeof(plan_mixed_memo));
}

void plan_mixed_memo_free(plan_mixed_memo *m)
{
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        free(m->e[i].time);
        free(m->e[i].cut);
        free(m->e[i].first);
    }
    free(m->e);
    free(m);
}

static uint64_t chain_hash(const double *time, const double *cut, int n, int L)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n ^ ((uint64_t)L << 32);
    const unsigned char *b[2] = {(const unsigned char *)time,
                                 (const unsigned char *)cut};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof(double) * (size_t)n; i++)
            h = (h ^ b[k][i]) * 1099511628211ULL;
    return h;
}

/* The cut of the chain into L blocks of balanced compute, no memory limit
 * (placement checks it): from the memo when the same chain was cut
 * before. Returns 0, or -1 when no cut exists. */
static int balanced_cut(const plan_mixed_in *in, int L, const double *zero,
                        double *inf, double *cap, int *first)
{
    plan_mixed_memo *m = in->memo;
    int n = in->n;
    uint64_t h = m ? chain_hash(in->time, in->cut_time, n, L) : 0;
    for (int i = 0; m && i < m->n; i++) {
        memo_ent *x = &m->e[i];
        if (x->hash != h || x->n != n || x->L != L ||
            memcmp(x->time, in->time, sizeof(double) * (size_t)n) ||
            memcmp(x->cut, in->cut_time, sizeof(double) * (size_t)n))
            continue;
        if (!x->first) return -1;
        memcpy(first, x->first, sizeof(int) * (size_t)(L + 1));
        return 0;
    }
    for (int s = 0; s < L; s++) {
        inf[s] = 0;
        cap[s] = INFINITY;
    }
    plan_chain c = {n, in->time, in->cut_time, zero, zero, L, inf, cap, 0};
    int rc = plan_partition_chain(&c, first) >= 0 ? 0 : -1;
    if (m) {
        if (m->n == m->cap)
            m->e = util_realloc(m->e, sizeof *m->e *
                                (size_t)(m->cap = m->cap ? 2 * m->cap : 64));
        memo_ent *x = &m->e[m->n++];
        x->hash = h;
        x->n = n;
        x->L = L;
        x->time = util_malloc(sizeof(double) * (size_t)n);
        x->cut = util_malloc(sizeof(double) * (size_t)n);
        memcpy(x->time, in->time, sizeof(double) * (size_t)n);
        memcpy(x->cut, in->cut_time, sizeof(double) * (size_t)n);
        x->first = NULL;
        if (!rc) {
            x->first = util_malloc(sizeof(int) * (size_t)(L + 1));
            memcpy(x->first, first, sizeof(int) * (size_t)(L + 1));
        }
    }
    return rc;
}

int plan_mixed_partition(const plan_mixed_in *in, plan_mixed *out)
{
    int n = in->n, p = in->p;
    if (p <= 0 || n <= 0) return -1;
    cand best = {0};
    ranges rg;
    ranges_init(&rg, in);
    double *zero = util_calloc((size_t)n, sizeof *zero);
    double *inf = util_malloc(sizeof(double) * (size_t)(4 * p + 1));
    double *cap = util_malloc(sizeof(double) * (size_t)(4 * p + 1));
    /* Candidate 0: the contiguous optimum, one stage per device. */
    if (n >= p) {
        int *first = util_malloc(sizeof(int) * (size_t)(p + 1));
        int *dev = util_malloc(sizeof(int) * (size_t)p);
        for (int s = 0; s < p; s++) {
            inf[s] = in->inflight;
            cap[s] = in->cap;
            dev[s] = s;
        }
        plan_chain c = {n, in->time, in->cut_time, in->static_mem,
                        in->act_mem, p, inf, cap, 1};
        if (plan_partition_chain(&c, first) >= 0)
            keep(&best, p, first, dev, objective(in, &rg, p, first, dev));
        free(first);
        free(dev);
    }
    /* Blocks: balanced compute, no memory limit (placement checks it). */
    for (int L = p; L <= 4 * p && L <= n; L += p / 2 > 0 ? p / 2 : 1) {
        int *first = util_malloc(sizeof(int) * (size_t)(L + 1));
        int *dev = util_malloc(sizeof(int) * (size_t)L);
        if (balanced_cut(in, L, zero, inf, cap, first) == 0 &&
            assign(in, &rg, L, first, dev) == 0) {
            refine(in, &rg, L, first, dev);
            int ns = merge(L, first, dev);
            if (fits(in, &rg, ns, first, dev))
                keep(&best, ns, first, dev, objective(in, &rg, ns, first, dev));
        }
        free(first);
        free(dev);
    }
    free(zero);
    free(inf);
    free(cap);
    ranges_free(&rg);
    if (!best.first) return -1;
    out->n_stages = best.ns;
    out->first = best.first;
    out->dev = best.dev;
    out->objective = best.obj;
    return 0;
}

void plan_mixed_free(plan_mixed *m)
{
    if (!m) return;
    free(m->first);
    free(m->dev);
    m->first = m->dev = NULL;
}
