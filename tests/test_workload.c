/* Many jobs at once: the shard scheduler against a hand-computed
 * schedule and against brute force over every order on a tiny case; the
 * command's lower bound, JSON keys, plot and trace; bad workloads. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "planner/workload.h"
#include "tests/harness.h"

static plan_wl_run sched(const plan_wl_sjob *j, int n, int ng,
                         plan_wl_policy p)
{
    plan_wl_sched_opts o = {0};
    o.policy = p;
    o.seed = 7;
    plan_wl_run r;
    plan_wl_schedule(j, n, ng, &o, &r);
    return r;
}

/* Two GPUs; jobs of one shard: J0 and J1 one minibatch of 10 ns, J2 two.
 * Loads take 4 ns, write-backs 3. Sharded-LRTF: gpu0 takes J2 (20 ns
 * left), gpu1 J0 (tie with J1: lower index), both loaded by 4. gpu0 keeps
 * J2 (its shard stays: no copy), computes 4..14 and 14..24, writes back
 * 24..27. gpu1 prefetches J1 during J0 (4..8), writes J0 back 14..17,
 * computes J1 14..24, writes it back 24..27. Makespan 27 ns. Round robin
 * takes J0 and J1 first and leaves J2's two minibatches for the end. */
Test(workload, lrtf_matches_hand_computed_schedule)
{
    plan_wl_step st = {10, 4, 3, 100, 50, 0, 0};
    plan_wl_sjob j[3] = {{1, &st, 1, 0, 0, 0}, {1, &st, 1, 0, 0, 0},
                         {1, &st, 2, 0, 0, 0}};
    plan_wl_run r = sched(j, 3, 2, PLAN_WL_LRTF);
    cr_expect_eq(r.makespan_ns, 27);
    cr_expect_eq(r.busy_ns[0], 20);
    cr_expect_eq(r.busy_ns[1], 20);
    /* three loads and three write-backs: J2's second minibatch stays */
    cr_expect_float_eq(r.pcie_bytes, 3 * 100 + 3 * 50, 1e-9);
    plan_wl_run_free(&r);
    r = sched(j, 3, 2, PLAN_WL_RR);
    cr_expect_gt(r.makespan_ns, 27);
    plan_wl_run_free(&r);
}

/* Clipping: the host steps the job on the device's thread after each
 * minibatch's last step (5 ns), and its shard, stale then, goes and
 * loads again. One GPU, J2 of the schedule above alone: load 0..4,
 * compute 4..14 and the host's step 14..19, write-back 19..22 and the
 * load again 19..23 (copies both ways at once), compute 23..33, the
 * host's step 33..38, write-back 38..41. Without clipping, 27 ns. */
Test(workload, a_clipped_job_steps_on_the_host)
{
    plan_wl_step st = {10, 4, 3, 100, 50, 0, 0};
    plan_wl_sjob j = {1, &st, 2, 0, 0, 5};
    plan_wl_run r = sched(&j, 1, 1, PLAN_WL_LRTF);
    cr_expect_eq(r.makespan_ns, 41);
    cr_expect_eq(r.busy_ns[0], 30, "compute and the host's steps");
    cr_expect_float_eq(r.pcie_bytes, 2 * 100 + 2 * 50, 1e-9,
                       "loaded and written back twice");
    plan_wl_run_free(&r);
    j.host_step_ns = 0;
    r = sched(&j, 1, 1, PLAN_WL_LRTF);
    cr_expect_eq(r.makespan_ns, 27);
    plan_wl_run_free(&r);
}

/* Every order a GPU may pick, by scripted choices (an odometer over the
 * candidates at each decision); returns the shortest makespan. */
static int64_t brute(const plan_wl_sjob *j, int n, int ng, long *orders)
{
    int script[64] = {0}, branch[64];
    int64_t best = -1;
    *orders = 0;
    for (;;) {
        plan_wl_sched_opts o = {0};
        o.policy = PLAN_WL_SCRIPT;
        o.script = script;
        o.n_script = 64;
        o.branch = branch;
        o.max_branch = 64;
        plan_wl_run r;
        plan_wl_schedule(j, n, ng, &o, &r);
        cr_assert_leq(r.decisions, 64);
        if (best < 0 || r.makespan_ns < best) best = r.makespan_ns;
        (*orders)++;
        int d = (int)r.decisions - 1;
        plan_wl_run_free(&r);
        while (d >= 0 && script[d] + 1 >= branch[d]) script[d--] = 0;
        if (d < 0) return best;
        script[d]++;
    }
}

/* 2 GPUs, 3 jobs of 2 shards (3 steps a minibatch), unequal steps and
 * copies: no policy beats the best order, and Sharded-LRTF, a list
 * schedule that never idles a GPU while a job waits, stays within
 * Graham's bound (2 - 1/m) of it. */
Test(workload, policies_against_brute_force)
{
    plan_wl_step a[3] = {{7, 2, 1, 1, 1, 1, 0}, {11, 3, 2, 1, 1, 0, 1},
                         {5, 2, 2, 1, 1, -1, 0}};
    plan_wl_step b[3] = {{3, 1, 1, 1, 1, 1, 0}, {4, 1, 1, 1, 1, 0, 1},
                         {2, 1, 1, 1, 1, -1, 0}};
    plan_wl_step c[3] = {{9, 5, 1, 1, 1, 1, 0}, {2, 1, 4, 1, 1, 0, 1},
                         {6, 3, 3, 1, 1, -1, 0}};
    plan_wl_sjob j[3] = {{3, a, 2, 0, 0, 0}, {3, b, 3, 0, 0, 0},
                         {3, c, 1, 0, 0, 0}};
    long orders;
    int64_t opt = brute(j, 3, 2, &orders);
    cr_assert_gt(orders, 10, "only %ld orders", orders);
    for (int p = 0; p < PLAN_WL_SCRIPT; p++) {
        plan_wl_run r = sched(j, 3, 2, (plan_wl_policy)p);
        cr_expect_geq(r.makespan_ns, opt, "%s", plan_wl_policy_name(p));
        if (p == PLAN_WL_LRTF)
            cr_expect_leq(2 * r.makespan_ns, 3 * opt, "lrtf %lld, optimum %lld",
                          (long long)r.makespan_ns, (long long)opt);
        plan_wl_run_free(&r);
    }
}

/* Priorities come before the policy: the urgent job runs first. */
Test(workload, priority_first)
{
    plan_wl_step st = {10, 0, 0, 0, 0, 0, 0};
    plan_wl_sjob j[2] = {{1, &st, 5, 0, 0, 0}, {1, &st, 1, 1, 0, 0}};
    plan_wl_sched_opts o = {0};
    o.record = 1;
    plan_wl_run r;
    plan_wl_schedule(j, 2, 1, &o, &r);
    cr_assert_gt(r.n_seg, 0);
    cr_expect_eq(r.seg[0].job, 1);
    cr_expect_eq(r.makespan_ns, 60);
    plan_wl_run_free(&r);
}

/* Links by hand: directed link 0 an uplink that two GPUs' loads share,
 * links 1 and 2 theirs alone, 3 and 4 their write-backs'. */
static plan_wl_net shared_uplink(double up_cap, double own_cap)
{
    static int in0[] = {0, 1}, in1[] = {0, 2}, out0[] = {3}, out1[] = {4};
    static int *in[] = {in0, in1}, *out[] = {out0, out1};
    static int len_in[] = {2, 2}, len_out[] = {1, 1};
    static double lat[] = {0, 0}, cap[5];
    cap[0] = up_cap;
    for (int i = 1; i < 5; i++) cap[i] = own_cap;
    plan_wl_net n = {0};
    n.n_gpus = 2;
    n.n_dl = 5;
    n.cap = cap;
    n.route[0] = in;
    n.route[1] = out;
    n.len[0] = len_in;
    n.len[1] = len_out;
    n.lat_ns[0] = n.lat_ns[1] = lat;
    return n;
}

/* Two GPUs load 100 bytes each at once through an uplink of 1 byte/ns:
 * each gets half, so both loads end at 200 ns, the steps at 210, and the
 * 50-byte write-backs, on links of 1 byte/ns of their own, at 260. Alone
 * on the uplink a load takes 100 ns; with an uplink of 2 bytes/ns neither
 * waits for the other. */
Test(workload, copies_share_the_links_they_cross)
{
    plan_wl_step st = {10, 1, 1, 100, 50, 0, 0};
    plan_wl_sjob j[2] = {{1, &st, 1, 0, 0, 0}, {1, &st, 1, 0, 0, 0}};
    plan_wl_net n = shared_uplink(1, 1);
    plan_wl_sched_opts o = {0};
    o.net = &n;
    plan_wl_run r;
    plan_wl_schedule(j, 2, 2, &o, &r);
    cr_expect_eq(r.makespan_ns, 260);
    plan_wl_run_free(&r);
    plan_wl_schedule(j, 1, 2, &o, &r);
    cr_expect_eq(r.makespan_ns, 160, "one job: its load alone on the uplink");
    plan_wl_run_free(&r);
    n = shared_uplink(2, 1);
    plan_wl_schedule(j, 2, 2, &o, &r);
    cr_expect_eq(r.makespan_ns, 160);
    plan_wl_run_free(&r);
}

/* With links to spare the copies take their own time: the hand-computed
 * schedule above (loads of 100 bytes at 25 bytes/ns: 4 ns; write-backs of
 * 48 bytes at 16: 3 ns) ends at 27 ns as with fixed copy times. */
Test(workload, unshared_links_give_the_fixed_schedule)
{
    plan_wl_step st = {10, 0, 0, 100, 48, 0, 0};
    plan_wl_sjob j[3] = {{1, &st, 1, 0, 0, 0}, {1, &st, 1, 0, 0, 0},
                         {1, &st, 2, 0, 0, 0}};
    static int in0[] = {0}, in1[] = {1}, out0[] = {2}, out1[] = {3};
    static int *in[] = {in0, in1}, *out[] = {out0, out1};
    static int len[] = {1, 1};
    static double lat[] = {0, 0}, cap[] = {25, 25, 16, 16};
    plan_wl_net n = {2, 4, cap, {in, out}, {len, len}, {lat, lat}};
    plan_wl_sched_opts o = {0};
    o.net = &n;
    plan_wl_run r;
    plan_wl_schedule(j, 3, 2, &o, &r);
    cr_expect_eq(r.makespan_ns, 27);
    cr_expect_eq(r.busy_ns[0], 20);
    cr_expect_eq(r.busy_ns[1], 20);
    plan_wl_run_free(&r);
}

static json_t *plan_json(const char *args)
{
    cli_result r = cli_run("plan --hw rtx2080ti x2 %s --json", args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    cr_assert(j, "%s", je.text);
    cli_result_free(&r);
    return j;
}

/* The lower bound is below every policy's makespan; the keys are there. */
Test(workload, json_keys_and_lower_bound)
{
    json_t *j = plan_json("--workload tests/data/workload/tiny.json");
    double lb = json_number_value(json_object_get(j, "lower_bound_s"));
    cr_assert_gt(lb, 0);
    json_t *ps = json_object_get(j, "policies");
    cr_assert_eq(json_array_size(ps), 6);
    const char *names[] = {"sharded-lrtf", "random", "round-robin",
                           "pipeline-each", "gpu-each", "gpu-groups"};
    for (size_t i = 0; i < json_array_size(ps); i++) {
        json_t *p = json_array_get(ps, i);
        cr_expect_str_eq(json_string_value(json_object_get(p, "policy")), names[i]);
        cr_assert(json_is_true(json_object_get(p, "feasible")), "%s", names[i]);
        double ms = json_number_value(json_object_get(p, "makespan_s"));
        cr_expect_geq(ms, lb, "%s: %g below the bound %g", names[i], ms, lb);
        for (int k = 0; k < 4; k++) {
            const char *key[] = {"gap_to_bound", "mean_utilization",
                                 "host_peak_bytes", "pcie_bytes"};
            cr_expect(json_object_get(p, key[k]), "%s: %s", names[i], key[k]);
        }
        /* on two PCIe cards every plan's sends cross PCIe (it read 0 for
         * the pipeline baselines) */
        if (!strcmp(names[i], "pipeline-each"))
            cr_expect_gt(json_number_value(json_object_get(p, "pcie_bytes")),
                         0, "pipeline-each: no PCIe traffic");
    }
    json_t *jobs = json_object_get(j, "jobs");
    cr_assert_eq(json_array_size(jobs), 3);
    /* epochs x dataset samples: 2 x 800 at batch 16 */
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(jobs, 1),
                                                    "minibatches")), 100);
    json_decref(j);
}

/* The host memory the summary states is a server's: said so where the
 * hardware has several. */
Test(workload, host_memory_is_a_servers)
{
    cli_expect(0, "host memory 384.00 GiB a server;", "plan --hw rtx2080ti "
               "x16 --gpus-per-server 8 --models gpt2 x4 --samples 1000");
    cli_expect(0, "host memory 384.00 GiB;", "plan --hw rtx2080ti x8 "
               "--models gpt2 x4 --samples 1000");
}

/* Past PLAN_WL_SIM_STEPS shard steps the shard schedules run a part of
 * each job and scale it back: twelve GPT-2 XL jobs on eight 2080 Ti, 100k
 * samples each (3.6 million steps, run whole) and 400k (14.6 million,
 * run at 1/3.6 and scaled): the makespans are 4x within 0.1%, the
 * utilisation and host peak as run. Whole, a million samples took 15 s
 * here (1.1 s in part), and the time grows with the samples. */
Test(workload, a_long_workload_is_simulated_in_part_and_scaled)
{
    json_t *a = plan_json("--hw rtx2080ti x8 --models gpt2-xl x12 --samples "
                          "100000"),
           *b = plan_json("--hw rtx2080ti x8 --models gpt2-xl x12 --samples "
                          "400000");
    cr_expect_eq(json_number_value(json_object_get(
                     a, "shard_schedules_scaled_by")), 1);
    double k = json_number_value(json_object_get(b,
                                                 "shard_schedules_scaled_by"));
    cr_expect(k > 3.5 && k < 3.7, "scaled by %g", k);
    for (int i = 0; i < 3; i++) {
        json_t *pa = json_array_get(json_object_get(a, "policies"), (size_t)i),
               *pb = json_array_get(json_object_get(b, "policies"), (size_t)i);
        double ma = json_number_value(json_object_get(pa, "makespan_s")),
               mb = json_number_value(json_object_get(pb, "makespan_s"));
        cr_expect(fabs(mb / (4 * ma) - 1) < 1e-3, "%s: %g s for 400k "
                  "samples, %g for 100k", json_string_value(json_object_get(
                  pa, "policy")), mb, ma);
        double ua = json_number_value(json_object_get(pa, "mean_utilization")),
               ub = json_number_value(json_object_get(pb, "mean_utilization"));
        cr_expect(fabs(ua - ub) < 0.01, "utilisation %g against %g", ub, ua);
    }
    json_decref(a);
    json_decref(b);
    cli_result r = cli_run("plan --hw rtx2080ti x8 --models gpt2-xl x12 "
                           "--samples 400000");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "note: 14.6M shard steps: the shard schedules "
                     "ran 4.0M of them"), "%s", r.err);
    cli_result_free(&r);
}

/* A run simulated in part draws the part: its plot's title and its
 * trace's metadata say by how much each job's minibatches were divided
 * (the table gives the whole run's makespan; the pictures' time axis is
 * the part's). One small job on one GPU, 12.5M shard steps. */
Test(workload, a_run_simulated_in_part_says_so_in_its_plot_and_trace)
{
    char *dir = test_tmpdir();
    cli_result r = cli_run("plan --hw rtx2080ti x1 --models gpt-mini x1 "
                           "--samples 200000000 --trace %s/t.json --plot %s/w",
                           dir, dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "(--plot and --trace draw the run as "
                     "simulated)"), "%s", r.err);
    char p[512];
    snprintf(p, sizeof p, "%s/t.json", dir);
    json_error_t je;
    json_t *t = json_load_file(p, 0, &je);
    cr_assert(t, "%s", je.text);
    json_t *od = json_object_get(t, "otherData");
    cr_expect_float_eq(json_number_value(json_object_get(od,
                       "minibatches_divided_by")), 3.125, 1e-9);
    json_decref(t);
    snprintf(p, sizeof p, "%s/w-gantt.gp", dir);
    FILE *f = fopen(p, "r");
    cr_assert(f, "%s", p);
    char line[512];
    int titled = 0;
    while (fgets(line, sizeof line, f))
        titled |= strstr(line, "set title \"Sharded-LRTF: jobs over GPUs, "
                         "about 1/3.125 of each job's minibatches "
                         "simulated\"") != NULL;
    fclose(f);
    cr_expect(titled, "no title naming the part in %s", p);
    cli_result_free(&r);
    test_rm_rf(dir);
}

/* CPU devices are cores: the table, the notes and the bound say
 * devices, not GPUs, and one of something is not plural */
Test(workload, cpu_devices_are_called_devices)
{
    cli_result r = cli_run("plan --hw cpu x2 --models gpt-mini x2 --samples 200");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "device util"), "%s", r.out);
    cr_expect(strstr(r.out, "over 2 devices at"), "%s", r.out);
    cr_expect(strstr(r.out, "2 groups of 1 device, "), "%s", r.out);
    cr_expect(!strstr(r.out, "GPU"), "%s", r.out);
    cli_result_free(&r);
    r = cli_run("plan --hw rtx2080ti x1 --models gpt2 x1 --samples 200");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "synchronous plan on the GPU\n"), "%s", r.out);
    cr_expect(strstr(r.out, "over 1 GPU at"), "%s", r.out);
    cli_result_free(&r);
}

/* A policy needing more host DRAM than the server has runs nowhere: not
 * feasible, its note says how much is missing (it was answered, marked
 * OVER in the table only) */
Test(workload, over_the_hosts_memory_is_not_feasible)
{
    json_t *j = plan_json("--models gpt2-xl x2 --samples 100 --host-mem 8G");
    json_t *ps = json_object_get(j, "policies");
    for (size_t i = 0; i < json_array_size(ps); i++) {
        json_t *p = json_array_get(ps, i);
        double peak = json_number_value(json_object_get(p, "host_peak_bytes"));
        int ok = json_is_true(json_object_get(p, "feasible"));
        const char *nm = json_string_value(json_object_get(p, "policy"));
        cr_expect(peak <= 8.0 * (1 << 30) || !ok, "%s: %g bytes of 8 GiB, "
                  "feasible", nm, peak);
        if (peak > 8.0 * (1 << 30))
            cr_expect(strstr(json_string_value(json_object_get(p, "note")),
                             "missing; give --host-mem"), "%s", nm);
    }
    json_decref(j);
    /* one GPU, whose every policy needs the host: the --host-mem given
     * is the input to change (2, as a plan's host tiers), said once with
     * the policy that lacks it */
    cli_expect(2, "no policy runs this workload on 1 x rtx4090: "
               "sharded-lrtf: host DRAM: needs", "plan --hw rtx4090 x1 "
               "--models gpt2-xl x2 --samples 100 --host-mem 8G");
}

/* --epochs E --samples N, as people say it: E passes over N samples */
Test(workload, epochs_over_samples)
{
    json_t *j = plan_json("--models gpt-tiny x2 --epochs 2 --samples 800 "
                          "--batch 16");
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(
                     json_object_get(j, "jobs"), 0), "minibatches")), 100);
    json_decref(j);
}

/* A model too large for one shard of one GPU is cut into several, each
 * within the GPU after the reserve. */
Test(workload, large_model_is_sharded)
{
    json_t *j = plan_json("--models gpt2-xl x2 --samples 64 --batch 8");
    json_t *sh = json_object_get(json_array_get(json_object_get(j, "jobs"), 0),
                                 "shards");
    cr_expect_gt(json_array_size(sh), 2);
    int layers = 0;
    for (size_t i = 0; i < json_array_size(sh); i++)
        layers += (int)json_integer_value(json_object_get(json_array_get(sh, i),
                                                          "layers"));
    cr_expect_eq(layers, 50, "embed, 48 blocks, head");
    json_decref(j);
}

Test(workload, trace_and_plot_files)
{
    char *dir = test_tmpdir();
    cli_result r = cli_run("plan --hw rtx2080ti x2 --workload "
                           "tests/data/workload/tiny.json --trace %s/t.json "
                           "--plot %s/w", dir, dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    char p[512];
    snprintf(p, sizeof p, "%s/t.json", dir);
    json_error_t je;
    json_t *t = json_load_file(p, 0, &je);
    cr_assert(t, "%s", je.text);
    json_t *ev = json_object_get(t, "traceEvents");
    cr_expect_gt(json_array_size(ev), 4);
    /* the copies: each load ends before a step of its job starts on
     * that GPU, and the write-backs go out after one */
    int in = 0, out = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *x = json_array_get(ev, i);
        if (strcmp(json_string_value(json_object_get(x, "ph")), "X"))
            continue;
        int tid = (int)json_integer_value(json_object_get(x, "tid"));
        if (tid != 1 && tid != 2) continue;
        double b = json_number_value(json_object_get(json_object_get(x,
                                                     "args"), "bytes"));
        cr_expect_gt(b, 0);
        in += tid == 1;
        out += tid == 2;
        double t0 = json_number_value(json_object_get(x, "ts"));
        double t1 = t0 + json_number_value(json_object_get(x, "dur"));
        json_int_t pid = json_integer_value(json_object_get(x, "pid"));
        const char *job = json_string_value(json_object_get(x, "name"));
        int found = 0;
        for (size_t k = 0; k < json_array_size(ev) && !found; k++) {
            json_t *y = json_array_get(ev, k);
            if (strcmp(json_string_value(json_object_get(y, "ph")), "X") ||
                json_integer_value(json_object_get(y, "tid")) != 0 ||
                json_integer_value(json_object_get(y, "pid")) != pid ||
                strcmp(json_string_value(json_object_get(y, "name")), job))
                continue;
            double c0 = json_number_value(json_object_get(y, "ts"));
            double c1 = c0 + json_number_value(json_object_get(y, "dur"));
            found = tid == 1 ? c0 >= t1 - 1e-3 : c1 <= t0 + 1e-3;
        }
        cr_expect(found, "%s copy of %s on gpu %lld at %g us: no step of "
                  "it %s there", tid == 1 ? "a load" : "a write-back", job,
                  (long long)pid, t0, tid == 1 ? "after" : "before");
    }
    cr_expect_gt(in, 0, "no copy in");
    cr_expect_gt(out, 0, "no write-back");
    json_decref(t);
    snprintf(p, sizeof p, "%s/w-gantt.dat", dir);
    char *dat = NULL;
    size_t dlen = 0;
    util_err fe;
    cr_expect_eq(util_read_file(p, &dat, &dlen, &fe), 0, "no Gantt data");
    cr_expect(dat && strstr(dat, "# copies in") && strstr(dat, "# copies out"),
              "the Gantt's data has no copies");
    free(dat);
    snprintf(p, sizeof p, "%s/w-gantt.gp", dir);
    char *gp = NULL;
    size_t glen = 0;
    cr_expect_eq(util_read_file(p, &gp, &glen, &fe), 0, "no gnuplot script");
    /* GPU 0 on top, each row's copies under it: the axis runs down (an
     * explicit range; gnuplot ignores 'reverse' beside one) */
    cr_expect(gp && strstr(gp, "set yrange [1.6:-0.6]") &&
              !strstr(gp, "reverse"), "%s", gp ? gp : "");
    free(gp);
    cli_result_free(&r);
    test_rm_rf(dir);
}

static void bad(const char *args, const char *want)
{
    cli_result r = cli_run("plan --hw rtx2080ti x2 %s", args);
    cr_expect_eq(r.code, 2, "%s: %s", args, r.err);
    cr_expect(strstr(r.err, want), "%s: '%s' not in %s", args, want, r.err);
    cli_result_free(&r);
}

Test(workload, bad_inputs_name_file_line_and_field)
{
    bad("--workload tests/data/workload/unknown_model.json",
        "unknown_model.json:3:13: field 'jobs[1].model'");
    bad("--workload tests/data/workload/too_big.json",
        "too_big.json:2:3: field 'jobs[0]'");
    bad("--workload tests/data/workload/bad_field.json", "'jobs[0].optimiser'");
    bad("--workload tests/data/workload/bad_json.json", "bad_json.json:2:");
    bad("--workload tests/data/workload/no_samples.json", "dataset_samples");
    bad("--workload tests/data/workload/dup_names.json",
        "dup_names.json:3:12: field 'jobs[1].name': 'a' names job 0 too");
    bad("--workload tests/data/workload/too_many_steps.json",
        "too_many_steps.json:2:48: field 'jobs[0].samples': "
        "1000000000000000 minibatches of 1 are more than sluice runs");
    bad("--models gpt-tiny x2 --epochs 1e6 --dataset-samples 1e9",
        "--epochs: 62500000000000 minibatches of 16");
    bad("--models gpt-tiny x2 --epochs 1e30 --samples 100",
        "--epochs '1e30': expected a positive number up to 1e15");
    /* a job that never fills one batch (it was planned as one) */
    bad("--models gpt-tiny x2 --samples 10 --batch 16",
        "--samples: 10 samples, fewer than one batch of 16");
    bad("--workload tests/data/workload/missing.json", "missing.json");
    bad("--models gpt-tiny x3", "--samples");
    bad("--models gpt-tiny x3 --epochs 2 --samples 8 --dataset-samples 8",
        "give the dataset's size once");
    bad("--models gpt-tiny x0 --samples 10", "x0");
    /* a count past the limit says the limit */
    bad("--models gpt-tiny x5000 --samples 10", "x5000: expected a count "
        "from x1 to x4096");
    bad("--models gpt-tiny x2 --samples 10 --optimizer lamb", "lamb");
    bad("--models gpt-tiny x2 --workload tests/data/workload/tiny.json",
        "not both");
}

/* A spec file named relative to the workload's folder is found from any
 * working directory (it was looked for from the working directory only);
 * samples are whole. */
Test(workload, spec_files_beside_the_workload)
{
    char *dir = test_tmpdir();
    char sub[600], wl[600], cmd[1400];
    snprintf(sub, sizeof sub, "%s/specs", dir);
    cr_assert_eq(mkdir(sub, 0755), 0);
    snprintf(cmd, sizeof cmd, "cp tests/data/exec/gpt-pico.json %s/pico.json",
             sub);
    cr_assert_eq(system(cmd), 0);
    snprintf(wl, sizeof wl, "%s/w.json", dir);
    FILE *f = fopen(wl, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"jobs\": [{\"model\": \"specs/pico.json\", \"batch\": 4, "
               "\"samples\": 8}]}\n");
    fclose(f);
    cli_result r = cli_run("plan --hw rtx2080ti x2 --workload %s", wl);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    f = fopen(wl, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"jobs\": [{\"model\": \"specs/pico.json\", \"batch\": 4, "
               "\"samples\": 8.5}]}\n");
    fclose(f);
    cli_expect(2, "w.json:1:63: field 'jobs[0].samples': 8.5: a whole "
               "number of samples", "plan --hw rtx2080ti x2 --workload %s",
               wl);
    /* epochs of a dataset: whole samples too */
    f = fopen(wl, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"jobs\": [{\"model\": \"specs/pico.json\", \"batch\": 4, "
               "\"epochs\": 0.5, \"dataset_samples\": 3}]}\n");
    fclose(f);
    cli_expect(2, "field 'jobs[0].epochs': 0.5 epochs of 3 samples are 1.5",
               "plan --hw rtx2080ti x2 --workload %s", wl);
    bad("--models gpt-tiny x2 --epochs 0.5 --samples 3", "are 1.5 samples");
    /* --samples and --dataset-samples are counted, as the file's are (a
     * fraction was rounded to the nearest sample) */
    bad("--models gpt-tiny x2 --samples 100 --out plan.json",
        "unknown option '--out' for a workload: its answer is no plan "
        "file; --json prints it");
    bad("--models gpt-tiny x2 --samples 100.7",
        "--samples '100.7': a whole number of samples");
    bad("--models gpt-tiny x2 --epochs 2 --dataset-samples 50.5",
        "--dataset-samples '50.5': a whole number of samples");
    /* whole but for the product's rounding */
    cli_expect(0, "makespan", "plan --hw rtx2080ti x2 --models gpt-tiny x2 "
               "--epochs 2.3 --dataset-samples 100 --batch 2");
    bad("--models gpt-tiny x2 --samples 8 --dataset-samples 4",
        "--dataset-samples is the dataset's size for --epochs E");
    /* a name with a line break would break the tables it heads */
    f = fopen(wl, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"jobs\": [{\"model\": \"specs/pico.json\", \"batch\": 4, "
               "\"samples\": 8, \"name\": \"a\\nb\"}]}\n");
    fclose(f);
    cli_expect(2, "field 'jobs[0].name': a control character (0x0a)",
               "plan --hw rtx2080ti x2 --workload %s", wl);
    bad("--workload tests/data/workload/tiny.json --optimizer sgd",
        "optimizer come from the file");
    /* a spec named without a folder, beside the workload */
    snprintf(cmd, sizeof cmd, "cp tests/data/exec/gpt-pico.json %s/p.json",
             dir);
    cr_assert_eq(system(cmd), 0);
    f = fopen(wl, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"jobs\": [{\"model\": \"p.json\", \"batch\": 4, "
               "\"samples\": 8}]}\n");
    fclose(f);
    cli_expect(0, "makespan", "plan --hw rtx2080ti x2 --workload %s", wl);
    test_rm_rf(dir);
}

/* Eight RTX 2080 Ti behind two PCIe switches: every byte a shard policy
 * copies crosses one of the switches' uplinks, so no schedule moves its
 * bytes faster than the four directed uplinks carry them. At batch 1 the
 * copies outweigh the compute (each copy once priced in seconds as if
 * nanoseconds, and unshared, the schedule was 12x faster than this). */
Test(workload, copies_take_no_less_than_the_uplinks_carry)
{
    util_err e = {0};
    prof_topo *t = prof_topo_template("rtx2080ti", 8, NULL, &e);
    cr_assert(t, "%s", e.msg);
    int sw = prof_topo_find(t, "n0.sw0"), cpu = prof_topo_find(t, "n0.cpu0");
    double up = 0;
    for (int l = 0; l < t->n_links; l++)
        if ((t->links[l].a == sw && t->links[l].b == cpu) ||
            (t->links[l].a == cpu && t->links[l].b == sw))
            up = t->links[l].bw_bytes_per_s;
    prof_topo_free(t);
    cr_assert_gt(up, 0);
    cli_result r = cli_run("plan --hw rtx2080ti x8 --models gpt2-xl x8 "
                           "--samples 16 --batch 1 --json");
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_t *j = json_loads(r.out, 0, NULL);
    cr_assert(j);
    for (int k = 0; k < 3; k++) {
        json_t *p = json_array_get(json_object_get(j, "policies"), (size_t)k);
        double ms = json_number_value(json_object_get(p, "makespan_s"));
        double b = json_number_value(json_object_get(p, "pcie_bytes"));
        cr_expect_geq(ms, b / (4 * up), "%s: %g s for %g bytes",
                      json_string_value(json_object_get(p, "policy")), ms, b);
        /* and says which link is busiest: a switch's uplink, nearly
         * always busy, as the copies outweigh the compute */
        json_t *bl = json_object_get(p, "busiest_link");
        const char *ln = json_string_value(json_object_get(bl, "link"));
        double busy = json_number_value(json_object_get(bl, "busy"));
        cr_expect(ln && strstr(ln, ".sw") && strstr(ln, ".cpu"), "%s",
                  ln ? ln : "none");
        cr_expect(busy > 0.6 && busy <= 1 + 1e-9, "busy %g", busy);
    }
    json_decref(j);
    cli_result_free(&r);
}

/* `plan ARGS --json` of a workload, and its policy named name. */
static json_t *wl_json(const char *args)
{
    cli_result r = cli_run("plan %s --json", args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_t *j = json_loads(r.out, 0, NULL);
    cr_assert_not_null(j, "%s", r.out);
    cli_result_free(&r);
    return j;
}

static json_t *policy_named(json_t *j, const char *name)
{
    json_t *ps = json_object_get(j, "policies");
    for (size_t i = 0; i < json_array_size(ps); i++) {
        json_t *p = json_array_get(ps, i);
        if (!strcmp(json_string_value(json_object_get(p, "policy")), name))
            return p;
    }
    cr_assert_fail("no policy %s", name);
    return NULL;
}

/* The baselines' host DRAM is what their plans keep there: two Llama 2 7B
 * jobs on two RTX 4090s fit a pipeline only with their optimizer state
 * offloaded, so pipeline-each and gpu-groups hold host DRAM (they read
 * 0 B before), within the server's. */
Test(workload, baselines_count_the_host_their_plans_hold)
{
    json_t *j = wl_json("--hw rtx4090 x2 --models llama2-7b x2 --samples 64 "
                        "--batch 4");
    const char *names[] = {"pipeline-each", "gpu-groups"};
    for (int k = 0; k < 2; k++) {
        json_t *p = policy_named(j, names[k]);
        double h = json_number_value(json_object_get(p, "host_peak_bytes"));
        cr_expect_gt(h, 7e9 * 12 / 2, "%s: %g bytes", names[k], h);
        cr_expect_lt(h, 512.0 * (1 << 30), "%s: %g bytes", names[k], h);
    }
    json_decref(j);
}

/* A group plans with its share of the host: eight jobs on the eight 2080
 * Ti of the 2-socket server (four GPUs under each switch, one switch a
 * socket) run as eight groups of one, each with an eighth of the DRAM
 * and drives and a quarter of its socket's memory link and switch's
 * uplink; the note says so. */
Test(workload, groups_share_the_host)
{
    json_t *j = wl_json("--hw rtx2080ti x8 --models gpt2 x8 --samples 512 "
                        "--batch 8");
    const char *note = json_string_value(
        json_object_get(policy_named(j, "gpu-groups"), "note"));
    cr_assert_not_null(note);
    cr_expect(strstr(note, "8 groups of 1 GPU") &&
              strstr(note, "1/8 of the host's DRAM and drives, 1/4 of a "
                     "socket's memory link, 1/4 of a PCIe switch's uplink"),
              "%s", note);
    json_decref(j);
}
