/* Chain partitioning: the dynamic program against brute force over every
 * contiguous partition of small random chains, with memory limits. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "planner/planner.h"

/* Deterministic xorshift so failures reproduce. */
static unsigned long long rng = 88172645463325252ULL;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng % 1000000) / 1e6;
}

static double brute(const plan_chain *c, int s, int a, double sofar)
{
    /* Stage s starts at a; try every end. */
    int n = c->n, k = c->k;
    if (s == k - 1) {
        if (plan_stage_mem(c, s, a, n - 1) > c->cap[s]) return INFINITY;
        double v = plan_stage_cost(c, s, a, n - 1);
        return v > sofar ? v : sofar;
    }
    double best = INFINITY;
    for (int b = a; b <= n - (k - s); b++) {
        if (plan_stage_mem(c, s, a, b) > c->cap[s]) continue;
        double v = plan_stage_cost(c, s, a, b);
        double r = brute(c, s + 1, b + 1, v > sofar ? v : sofar);
        if (r < best) best = r;
    }
    return best;
}

Test(partition, dp_matches_brute_force)
{
    int tried = 0, infeasible = 0;
    for (int trial = 0; trial < 400; trial++) {
        int n = 2 + trial % 9, k = 1 + trial % 5;
        if (k > n) k = n;
        double t[16], ct[16], sm[16], am[16], inf[8], cap[8];
        for (int u = 0; u < n; u++) {
            t[u] = 0.1 + urand();
            ct[u] = urand() * 0.8;
            sm[u] = 1 + 10 * urand();
            am[u] = 1 + 3 * urand();
        }
        double total = 0;
        for (int u = 0; u < n; u++) total += sm[u] + am[u] * k;
        for (int s = 0; s < k; s++) {
            inf[s] = k - s; /* 1F1B in-flight counts */
            cap[s] = total * (0.25 + urand()) * 2 / k;
        }
        plan_chain c = {n, t, ct, sm, am, k, inf, cap, trial % 2};
        int first[9];
        double dp = plan_partition_chain(&c, first);
        double bf = brute(&c, 0, 0, 0);
        tried++;
        if (bf == INFINITY) {
            infeasible++;
            cr_expect_eq(dp, -1, "trial %d: dp found %g, none exists", trial, dp);
            continue;
        }
        cr_assert(fabs(dp - bf) < 1e-12, "trial %d n=%d k=%d: dp %g brute %g",
                  trial, n, k, dp, bf);
        /* The returned boundaries achieve the bottleneck and fit. */
        cr_expect_eq(first[0], 0);
        cr_expect_eq(first[k], n);
        double worst = 0;
        for (int s = 0; s < k; s++) {
            cr_expect_lt(first[s], first[s + 1]);
            double v = plan_stage_cost(&c, s, first[s], first[s + 1] - 1);
            if (v > worst) worst = v;
            cr_expect_leq(plan_stage_mem(&c, s, first[s], first[s + 1] - 1),
                          cap[s]);
        }
        cr_expect(fabs(worst - dp) < 1e-12);
    }
    /* Both regimes were exercised. */
    cr_expect_gt(infeasible, 10);
    cr_expect_gt(tried - infeasible, 100);
}

Test(partition, uniform_chain_splits_evenly)
{
    double t[12], ct[12], sm[12], am[12], inf[4] = {4, 3, 2, 1}, cap[4];
    for (int u = 0; u < 12; u++) { t[u] = 1; ct[u] = 0; sm[u] = 1; am[u] = 0; }
    for (int s = 0; s < 4; s++) cap[s] = 100;
    plan_chain c = {12, t, ct, sm, am, 4, inf, cap, 1};
    int first[5];
    cr_assert_eq(plan_partition_chain(&c, first), 3);
    for (int s = 0; s <= 4; s++) cr_expect_eq(first[s], 3 * s);
    cr_expect_eq(plan_partition_chain(&(plan_chain){3, t, ct, sm, am, 4, inf, cap, 1}, first), -1);
}

/* Mixed-pipe: never worse than the contiguous optimum, and strictly better
 * where non-adjacent placement balances what contiguity cannot. */
Test(partition, mixed_pipe_beats_contiguous_on_unbalanced_chain)
{
    /* Heavy units at both ends, light ones between: 14 units of work. */
    enum { N = 8 };
    double t[N] = {4, 1, 1, 1, 1, 1, 1, 4}, ct[N] = {0}, sm[N], am[N] = {0};
    for (int u = 0; u < N; u++) sm[u] = 1;
    plan_mixed_in in = {N, t, ct, sm, am, 3, 100, 1, NULL};
    plan_mixed m;
    cr_assert_eq(plan_mixed_partition(&in, &m), 0);
    /* The contiguous optimum over 3 devices is 5 ([4,1] [1,1,1,1] [1,4]). */
    cr_expect_leq(m.objective, 5 + 1e-12);
    plan_mixed_free(&m);
    /* Over 2 devices both reach 7, half the work: never worse. */
    in.p = 2;
    cr_assert_eq(plan_mixed_partition(&in, &m), 0);
    cr_expect_leq(m.objective, 7 + 1e-12);
    plan_mixed_free(&m);

    /* Three heavy units spread so that contiguous pairs must share. */
    double t2[N] = {5, 5, 1, 1, 1, 1, 5, 1};
    plan_mixed_in in2 = {N, t2, ct, sm, am, 3, 100, 1, NULL};
    double inf[3] = {1, 1, 1}, cap[3] = {100, 100, 100};
    int first[4];
    plan_chain c = {N, t2, ct, sm, am, 3, inf, cap, 1};
    double contiguous = plan_partition_chain(&c, first);
    cr_assert_eq(plan_mixed_partition(&in2, &m), 0);
    cr_expect_lt(m.objective, contiguous, "mixed %g vs contiguous %g",
                 m.objective, contiguous);
    /* A device owns non-adjacent stages. */
    int split = 0;
    for (int a = 0; a < m.n_stages; a++)
        for (int b = a + 2; b < m.n_stages; b++)
            split |= m.dev[a] == m.dev[b];
    cr_expect(split);
    cr_expect_float_eq(m.objective, plan_mixed_objective(&in2, m.n_stages,
                                                         m.first, m.dev), 1e-12);
    plan_mixed_free(&m);
}

Test(partition, mixed_pipe_respects_memory)
{
    enum { N = 6 };
    double t[N] = {1, 1, 1, 1, 1, 1}, ct[N] = {0}, sm[N] = {5, 5, 5, 5, 5, 5},
           am[N] = {0};
    plan_mixed_in in = {N, t, ct, sm, am, 2, 14, 1, NULL};
    plan_mixed m;
    cr_expect_eq(plan_mixed_partition(&in, &m), -1); /* 30 bytes > 2 x 14 */
    in.cap = 15;
    cr_assert_eq(plan_mixed_partition(&in, &m), 0);
    plan_mixed_free(&m);
}

/* Random chains with transfers and memory limits: the objective reported
 * is plan_mixed_objective's to the bit (the partitioner sums ranges from
 * tables, in sum order), every device fits, and the result is never worse
 * than the contiguous optimum. */
Test(partition, mixed_pipe_figures_exact_on_random_chains)
{
    enum { N = 60, P = 6 };
    double t[N], ct[N], sm[N], am[N];
    int tried = 0;
    for (int it = 0; it < 40; it++) {
        int n = 8 + (int)(urand() * (N - 8)), p = 2 + (int)(urand() * (P - 1));
        double total = 0;
        for (int u = 0; u < n; u++) {
            t[u] = 0.2 + urand();
            ct[u] = urand() * (it % 2 ? 2.0 : 0.2);
            sm[u] = 1 + urand();
            am[u] = urand();
            total += sm[u] + 2 * am[u];
        }
        plan_mixed_in in = {n, t, ct, sm, am, p, total / p * (1.1 + urand()),
                            2, NULL};
        plan_mixed m;
        if (plan_mixed_partition(&in, &m)) continue;
        tried++;
        cr_expect_eq(m.objective, plan_mixed_objective(&in, m.n_stages, m.first,
                                                       m.dev), "instance %d", it);
        double mem[P] = {0};
        for (int s = 0; s < m.n_stages; s++)
            for (int u = m.first[s]; u < m.first[s + 1]; u++)
                mem[m.dev[s]] += sm[u] + am[u] * in.inflight;
        for (int d = 0; d < p; d++)
            cr_expect_leq(mem[d], in.cap * (1 + 1e-12), "instance %d dev %d", it, d);
        double inf[P], cap[P];
        int first[P + 1];
        for (int d = 0; d < p; d++) {
            inf[d] = in.inflight;
            cap[d] = in.cap;
        }
        plan_chain c = {n, t, ct, sm, am, p, inf, cap, 1};
        if (plan_partition_chain(&c, first) >= 0) {
            int dev[P];
            for (int d = 0; d < p; d++) dev[d] = d;
            cr_expect_leq(m.objective,
                          plan_mixed_objective(&in, p, first, dev) * (1 + 1e-12),
                          "instance %d", it);
        }
        plan_mixed_free(&m);
    }
    cr_expect_gt(tried, 20);
}

/* Cuts remembered across calls change nothing: the same placements with a
 * memo (asked twice, the second from it) as without. */
Test(partition, mixed_pipe_memo_changes_nothing)
{
    enum { N = 50, P = 5 };
    double t[N], ct[N], sm[N], am[N];
    plan_mixed_memo *memo = plan_mixed_memo_new();
    for (int it = 0; it < 12; it++) {
        int n = 10 + it * 3, p = 2 + it % (P - 1);
        double total = 0;
        for (int u = 0; u < n; u++) {
            t[u] = 0.2 + urand();
            ct[u] = urand() * 0.5;
            sm[u] = 1 + urand();
            am[u] = urand();
            total += sm[u] + 2 * am[u];
        }
        plan_mixed_in in = {n, t, ct, sm, am, p, total / p * 1.3, 2, NULL};
        plan_mixed ref, got;
        int rc = plan_mixed_partition(&in, &ref);
        in.memo = memo;
        for (int k = 0; k < 2; k++) {
            /* memory differs between the schedules sharing a cut */
            in.inflight = k ? 1 : 2;
            if (k) {
                plan_mixed_free(&ref);
                in.memo = NULL;
                rc = plan_mixed_partition(&in, &ref);
                in.memo = memo;
            }
            cr_assert_eq(plan_mixed_partition(&in, &got), rc, "instance %d", it);
            if (rc) continue;
            cr_expect_eq(got.n_stages, ref.n_stages, "instance %d", it);
            cr_expect_eq(got.objective, ref.objective, "instance %d", it);
            for (int s = 0; s < ref.n_stages && s < got.n_stages; s++) {
                cr_expect_eq(got.first[s], ref.first[s]);
                cr_expect_eq(got.dev[s], ref.dev[s]);
            }
            plan_mixed_free(&got);
        }
        if (!rc) plan_mixed_free(&ref);
    }
    plan_mixed_memo_free(memo);
}
