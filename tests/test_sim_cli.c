/* sim: the command line on built-in profiles: golden scenarios (plan in,
 * summary out, compared with checked-in text), the bad-plan corpus, bad
 * arguments, JSON keys, plan round trip through --out, trace and plots. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profiles/profiles.h"
#include "tests/harness.h"
#include "util/util.h"

static char *slurp(const char *path)
{
    char *s = NULL;
    size_t n;
    util_err e;
    if (util_read_file(path, &s, &n, &e)) return NULL;
    return s;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Golden scenarios: tests/golden/NAME.plan.json -> NAME.expected.
 * SLUICE_GOLDEN_UPDATE=1 rewrites the expected files. */
Test(sim_cli, golden)
{
    DIR *d = opendir("tests/golden");
    cr_assert_not_null(d);
    struct dirent *de;
    int n = 0;
    const char *upd = getenv("SLUICE_GOLDEN_UPDATE");
    while ((de = readdir(d))) {
        if (!ends_with(de->d_name, ".plan.json")) continue;
        char plan[512], exp[512];
        snprintf(plan, sizeof plan, "tests/golden/%s", de->d_name);
        snprintf(exp, sizeof exp, "tests/golden/%.*s.expected",
                 (int)(strlen(de->d_name) - strlen(".plan.json")), de->d_name);
        cli_result r = cli_run("sim --plan %s", plan);
        cr_assert_eq(r.code, 0, "%s: %s", plan, r.err);
        if (upd && *upd == '1') {
            util_err e;
            util_write_atomic(exp, r.out, strlen(r.out), &e);
        }
        char *want = slurp(exp);
        cr_assert_not_null(want, "%s missing (SLUICE_GOLDEN_UPDATE=1 makes it)",
                           exp);
        cr_assert_str_eq(r.out, want, "%s differs from %s", plan, exp);
        free(want);
        cli_result_free(&r);
        n++;
    }
    closedir(d);
    cr_assert_geq(n, 3);
}

Test(sim_cli, bad_plan_corpus)
{
    DIR *d = opendir("tests/bad/plan");
    cr_assert_not_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (!ends_with(de->d_name, ".json")) continue;
        char plan[512], exp[512];
        snprintf(plan, sizeof plan, "tests/bad/plan/%s", de->d_name);
        snprintf(exp, sizeof exp, "tests/bad/plan/%.*s.expect",
                 (int)(strlen(de->d_name) - 5), de->d_name);
        char *want = slurp(exp);
        cr_assert_not_null(want, "%s missing", exp);
        want[strcspn(want, "\n")] = 0;
        cli_result r = cli_run("sim --plan %s", plan);
        cr_assert_eq(r.code, 2, "%s: exit %d, stderr: %s", plan, r.code, r.err);
        cr_assert(strstr(r.err, want), "%s: expected '%s' in: %s", plan, want,
                  r.err);
        int lines = 0;
        for (const char *q = r.err; *q; q++) lines += *q == '\n';
        cr_assert_eq(lines, 1, "%s: one message expected: %s", plan, r.err);
        free(want);
        cli_result_free(&r);
        n++;
    }
    closedir(d);
    cr_assert_geq(n, 10);
}

Test(sim_cli, bad_arguments)
{
    struct { const char *args, *want; } c[] = {
        {"--hw rtx2080ti x4 --model gpt-tiny --schedule 2bw --pp 4 --mbs 1 "
         "--microbatches 2", "cannot take 2 microbatches"},
        {"--hw rtx2080ti x4 --model gpt-tiny --schedule 1f1b --pp 4 --mbs 1 "
         "--microbatches 4 --partition 1,x,2,3", "item 2 'x'"},
        {"--hw rtx2080ti x4 --model gpt-tiny --schedule 1f1b --pp 4 --mbs 1 "
         "--microbatches 4 --partition 1,2,3", "3 entries for 4 stages"},
        {"--hw rtx2080ti x4 --model gpt-tiny --schedule 1f1c --pp 4 --mbs 1 "
         "--microbatches 4", "did you mean '1f1b'"},
        {"--hw rtx2080ti x4 --model gpt-tiny --schedule 1f1b --pp 8 --mbs 1 "
         "--microbatches 4", "has 4 GPUs"},
        /* CPU cores standing for devices are called devices */
        {"--hw cpu x2 --model gpt-tiny --schedule 1f1b --pp 4 --mbs 1 "
         "--microbatches 4", "= 4 devices but"},
        {"--hw rtx2080ti x4 --model gpt-tiny --schedule 1f1b --pp 4 --mbs 1",
         "--microbatches is required"},
        {"--hw rtx2080ti x4 --model gpt-tiny --schedule 1f1b --pp 4 --mbs 1 "
         "--microbatches 4 --stages 8", "one stage per device"},
        {"--hw rtx2080ti x4 --model gpt-tiny --schedule 1f1b --pp 4 --mbs 1 "
         "--microbatches 4 --dp 2", "--dp 2 x --pp 4 x --tp 1 = 8 GPUs but"},
        {"--hw rtx2080ti x8 --model gpt-tiny --schedule 1f1b --pp 2 --mbs 1 "
         "--microbatches 4 --dp 2", "dp 2 x pp 2 x tp 1 = 4 GPUs, not the 8"},
        {"--hw a100-sxm-80gb x16 --model gpt-tiny --schedule 1f1b --pp 1 "
         "--mbs 1 --microbatches 4 --tp 16", "tp 16 is larger than a node"},
        {"--hw rtx2080ti x4 --model gpt-tiny --schedule interleaved --pp 2 "
         "--chunks 2 --mbs 1 --microbatches 5", "cannot take 5 microbatches"},
        {"--hw rtx2080ti x4 --model gpt-tiny --schedule chimera --pp 4 "
         "--mbs 1 --microbatches 5", "even number"},
        {"--hw rtx2080ti x4 --model gpt-tiny --schedule 1f1b --pp 4 --mbs 1 "
         "--microbatches 4 --recompte", "did you mean '--recompute'"},
        {"--hw rtx2080ti x2 --model gpt-tiny --schedule mixed --pp 2 --mbs 1 "
         "--microbatches 4 --minibatches 2", "at least 3 minibatches"},
        {"--hw rtx2080ti x2 --model gpt-tiny --schedule 1f1b --pp 2 --mbs 1 "
         "--microbatches 4 --minibatches 3", "schedule 1f1b flushes every"},
        {"--hw rtx2080ti x2 --model gpt-tiny --schedule 1f1b --pp 2 --mbs 1 "
         "--microbatches 4 --waves 2", "only the wave schedule has waves"},
        {"--plan tests/golden/gpt-mini-1f1b.plan.json --schedule gpipe",
         "--schedule cannot be combined with --plan"},
        {"--plan /nonexistent/plan.json", "/nonexistent/plan.json"},
        {"--hw rtx2080ti x2 --model gpt-tiny --schedule wave --pp 2 --mbs 1 "
         "--microbatches 4 --stages 6", "the wave maps 2*W*p = 4 stages"},
        /* less than the weights and gradients: it was taken as theirs */
        {"--hw rtx2080ti x2 --model gpt-tiny --schedule 1f1b --pp 2 --mbs 1 "
         "--microbatches 4 --state-bytes 2", "state bytes per parameter 2 "
         "(--state-bytes, a plan's state_bytes_per_param): gpt-tiny's fp32 "
         "weights and their gradients alone take 8"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        cli_result r = cli_run("sim %s", c[i].args);
        cr_assert_eq(r.code, 2, "%s: exit %d: %s", c[i].args, r.code, r.err);
        cr_assert(strstr(r.err, c[i].want), "%s: expected '%s' in: %s",
                  c[i].args, c[i].want, r.err);
        cli_result_free(&r);
    }
}

Test(sim_cli, json_keys_and_plan_round_trip)
{
    char *dir = test_tmpdir();
    cli_result r = cli_run("sim --hw rtx2080ti x4 --model gpt-mini --schedule "
                           "1f1b --pp 4 --mbs 2 --microbatches 8 --json "
                           "--out %s/p.json", dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    cr_assert_not_null(j, "%s", r.out);
    const char *keys[] = {"iteration_time_s", "samples_per_s", "tflops_per_gpu",
                          "mfu", "bubble_fraction", "peak_mem_bytes", "oom",
                          "schedule", "tokens_per_s", "devices"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        cr_assert_not_null(json_object_get(j, keys[i]), "no %s", keys[i]);
    cr_assert_eq(json_array_size(json_object_get(j, "peak_mem_bytes")), 4);
    cr_assert(json_is_false(json_object_get(j, "oom")));
    cr_assert_str_eq(json_string_value(json_object_get(j, "schedule")), "1f1b");
    /* the plan written reproduces the same numbers */
    cli_result q = cli_run("sim --plan %s/p.json --json", dir);
    cr_assert_eq(q.code, 0, "%s", q.err);
    cr_assert_str_eq(q.out, r.out);
    json_decref(j);
    cli_result_free(&r);
    cli_result_free(&q);
    char p[512];
    snprintf(p, sizeof p, "%s/p.json", dir);
    unlink(p);
    rmdir(dir);
    free(dir);
}

/* A plan names its model file as it was given; run from elsewhere, a
 * relative name not found from there is read beside the plan. */
Test(sim_cli, plan_files_beside_the_plan)
{
    char *dir = test_tmpdir();
    char m[512];
    snprintf(m, sizeof m, "%s/m.json", dir);
    FILE *f = fopen(m, "w");
    cr_assert_not_null(f);
    fputs("{\"name\": \"mine\", \"family\": \"gpt\", \"hidden\": 64, "
          "\"layers\": 4, \"heads\": 4, \"vocab\": 256, \"seq_len\": 32}",
          f);
    fclose(f);
    const char *mk[] = {"sim", "--hw", "rtx2080ti x2", "--model", "m.json",
                        "--schedule", "1f1b", "--pp", "2", "--mbs", "1",
                        "--microbatches", "4", "--out", "p.json", "--json",
                        NULL};
    cli_result w = cli_runv(dir, mk);
    cr_assert_eq(w.code, 0, "%s", w.err);
    cli_result r = cli_run("sim --plan %s/p.json --json", dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, w.out);
    cli_result_free(&r);
    cli_result_free(&w);
    /* gone from beside it too: the error names the plan's field */
    unlink(m);
    r = cli_run("sim --plan %s/p.json", dir);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "p.json:3:") && strstr(r.err, "'model'"), "%s",
              r.err);
    cli_result_free(&r);
    test_rm_rf(dir);
}

Test(sim_cli, every_schedule_on_t5)
{
    /* T5 is not a chain: decoder stages read the encoder's output */
    const char *s[] = {"gpipe --recompute", "1f1b", "2bw", "mixed",
                       "mixed-1f1b", "mixed-gpipe", "wave", "wave --waves 2"};
    for (size_t i = 0; i < sizeof s / sizeof *s; i++) {
        cli_result r = cli_run("sim --hw rtx2080ti x8 --model t5-3b --pp 8 "
                               "--mbs 4 --microbatches 16 --json --schedule %s",
                               s[i]);
        json_t *j = json_loads(r.out, 0, NULL);
        cr_assert_not_null(j, "%s: %s", s[i], r.err);
        /* answered; over a device's memory (1f1b here) it exits 1 */
        cr_assert(r.code == 0 || (r.code == 1 &&
                  json_is_true(json_object_get(j, "oom"))), "%s: %s", s[i],
                  r.err);
        cr_assert_gt(json_real_value(json_object_get(j, "samples_per_s")), 0);
        /* the error points into the JSON, not at a table not printed */
        if (r.code == 1)
            cr_assert(strstr(r.err, "\"oom_task\"") &&
                      !strstr(r.err, "above"), "%s: %s", s[i], r.err);
        json_decref(j);
        cli_result_free(&r);
    }
}

/* Identical tensor-parallel ranks and replicas overflow at one instant,
 * by their forwards' memory steps alone: the first device whose memory
 * changed then is named (the one the events' order gives), not whichever
 * the engine happened to count first. */
Test(sim_cli, of_devices_over_at_once_the_first_is_named)
{
    cli_result r = cli_run("sim --hw rtx2080ti x8 --model gpt2 --schedule "
                           "chimera --pp 2 --tp 2 --dp 2 --mbs 16 "
                           "--microbatches 4 --json");
    cr_assert_eq(r.code, 1, "%s", r.err);
    json_t *j = json_loads(r.out, 0, NULL);
    cr_assert_not_null(j, "%s", r.err);
    cr_expect_str_eq(json_string_value(json_object_get(j, "oom_task")),
                     "dev 0 F stage 0 mb 1");
    json_decref(j);
    cli_result_free(&r);
}

Test(sim_cli, trace_and_plot)
{
    char *dir = test_tmpdir();
    cli_result r = cli_run("sim --hw rtx2080ti x4 --model gpt-mini --schedule "
                           "1f1b --pp 4 --mbs 2 --microbatches 6 --trace "
                           "%s/t.json --plot %s/p", dir, dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    char p[512];
    snprintf(p, sizeof p, "%s/t.json", dir);
    char *t = slurp(p);
    cr_assert_not_null(t);
    json_t *j = json_loads(t, 0, NULL);
    cr_assert_not_null(j);
    json_decref(j);
    free(t);
    int have_gnuplot = system("command -v gnuplot >/dev/null 2>&1") == 0;
    const char *outs[] = {"p-timeline.png", "p-timeline.svg", "p-memory.png",
                          "p-memory.svg"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, outs[i]);
        if (have_gnuplot)
            cr_assert_eq(access(p, R_OK), 0, "%s missing", outs[i]);
        unlink(p);
    }
    if (!have_gnuplot) cr_assert(strstr(r.err, "gnuplot not found"));
    /* peaks of 50 MiB read in MiB (the data file stays in GiB) */
    snprintf(p, sizeof p, "%s/p.gp", dir);
    char *gp = slurp(p);
    cr_assert_not_null(gp);
    cr_expect(strstr(gp, "set ylabel 'MiB'") &&
              strstr(gp, "using 1:($2*1024) with steps"), "%s", gp);
    /* a box narrower than a pixel is drawn a little wider, not lost
     * under its border: the time axis' 1/1000 at least each side */
    cr_expect(strstr(gp, "with boxxyerror") && strstr(gp, "using 1:2:($3 < "),
              "%s", gp);
    /* one flushed iteration: its title says nothing more */
    cr_expect(strstr(gp, "set title \"pipeline timeline: 1f1b\" "), "%s", gp);
    free(gp);
    /* a schedule without a flush draws several minibatches, each an
     * iteration of the report: its title says so (it read as one
     * iteration five times as long) */
    cli_result r2 = cli_run("sim --hw rtx2080ti x4 --model gpt-mini "
                            "--schedule 2bw --pp 4 --mbs 2 --microbatches 6 "
                            "--minibatches 5 --plot %s/a", dir);
    cr_assert_eq(r2.code, 0, "%s", r2.err);
    cli_result_free(&r2);
    snprintf(p, sizeof p, "%s/a.gp", dir);
    gp = slurp(p);
    cr_assert_not_null(gp);
    cr_expect(strstr(gp, "pipeline timeline: 2bw (5 minibatches, each an "
                     "iteration: no flush)"), "%s", gp);
    free(gp);
    const char *rest[] = {"t.json", "p-timeline.dat", "p-memory.dat", "p.gp"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, rest[i]);
        unlink(p);
    }
    cli_result_free(&r);
    /* a capacity line above the curves is drawn inside the axis (an
     * autoscaled one could end at the line: plan's 10 GiB of a 2080 Ti
     * after the reserve lay on the frame, unseen) */
    cli_expect(0, "8.18 GiB", "sim --hw rtx2080ti x1 --model gpt2 --schedule "
               "gpipe --pp 1 --mbs 4 --microbatches 1 --plot %s/c", dir);
    snprintf(p, sizeof p, "%s/c.gp", dir);
    gp = slurp(p);
    cr_assert_not_null(gp);
    const char *yr = strstr(gp, "set yrange [0:");
    const char *cl = strstr(gp, " with lines dt 2");
    cr_assert(yr && cl, "%s", gp);
    while (cl > gp && cl[-1] != ' ') cl--;
    double top = atof(yr + 14), cap = atof(cl);
    cr_expect(cap == 11 && top > 1.05 * cap, "axis to %g, capacity %g", top,
              cap);
    free(gp);
    cr_assert_eq(sh_run("rm -f %s/c-* %s/c.gp %s/a-* %s/a.gp", dir, dir, dir,
                        dir), 0);
    rmdir(dir);
    free(dir);
}

/* A plan keeps its model file's checksum: the file edited under it, sim
 * and exec say so (they ran the new widths silently) */
Test(sim_cli, a_model_file_edited_under_its_plan_is_named)
{
    char *dir = test_tmpdir();
    cr_assert_eq(sh_run("cp tests/bench/t5-mini.json %s/m.json", dir), 0);
    cli_expect(0, "", "sim --hw 'cpu x2' --model %s/m.json --schedule 1f1b "
               "--pp 2 --mbs 1 --microbatches 2 --out %s/p.json", dir, dir);
    cli_result r = cli_run("sim --plan %s/p.json", dir);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(!strstr(r.err, "changed since"), "%s", r.err);
    cli_result_free(&r);
    cr_assert_eq(sh_run("sed -i 's/\"ffn\": 1024/\"ffn\": 2048/' "
                        "%s/m.json", dir), 0);
    const char *cmd[] = {"sim --plan %s/p.json",
                         "exec --plan %s/p.json --steps 1 --quiet"};
    for (int k = 0; k < 2; k++) {
        r = cli_run(cmd[k], dir);
        cr_expect_eq(r.code, 0, "%s", r.err);
        cr_expect(strstr(r.err, "m.json changed since the plan was made"),
                  "%s: %s", cmd[k], r.err);
        cli_result_free(&r);
    }
    /* a server file with template options riding along */
    cr_assert_eq(sh_run("printf '{\"format\": \"sluice-server\", "
                        "\"name\": \"s\", \"template\": {\"gpu\": "
                        "\"rtx4090\", \"count\": 2}}\\n' > %s/hw.json",
                        dir), 0);
    cli_expect(0, "", "sim --hw %s/hw.json --host-mem 128G --model gpt2 "
               "--schedule 1f1b --pp 2 --mbs 1 --microbatches 2 --out "
               "%s/h.json", dir, dir);
    cr_assert_eq(sh_run("sed -i 's/\"count\": 2/\"count\":  2/' "
                        "%s/hw.json", dir), 0);
    r = cli_run("sim --plan %s/h.json", dir);
    cr_expect(strstr(r.err, "hw.json changed since the plan was made"), "%s",
              r.err);
    cli_result_free(&r);
    /* a file gone is not one changed: the error alone names it */
    cr_assert_eq(sh_run("rm %s/m.json", dir), 0);
    r = cli_run("sim --plan %s/p.json", dir);
    cr_expect_eq(r.code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "m.json: cannot open") &&
              !strstr(r.err, "changed since"), "%s", r.err);
    cli_result_free(&r);
    test_rm_rf(dir);
}

Test(sim_cli, same_input_same_trace)
{
    char *dir = test_tmpdir();
    for (int k = 0; k < 2; k++) {
        cli_result r = cli_run("sim --hw rtx2080ti x8 --model t5-3b --schedule "
                               "mixed --pp 8 --mbs 4 --microbatches 8 --trace "
                               "%s/t%d.json", dir, k);
        /* over a device's memory: simulated, traced, exit 1 */
        cr_assert(r.code == 0 || (r.code == 1 && strstr(r.err, "does not "
                  "fit")), "%s", r.err);
        cli_result_free(&r);
    }
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/t0.json", dir);
    snprintf(b, sizeof b, "%s/t1.json", dir);
    char *x = slurp(a), *y = slurp(b);
    cr_assert_not_null(x);
    cr_assert_not_null(y);
    cr_assert_str_eq(x, y);
    free(x);
    free(y);
    unlink(a);
    unlink(b);
    rmdir(dir);
    free(dir);
}

/* The timeline's legend sits in the margin above the graph however many
 * rows the chart has: at 4% of the graph's height it rose past the
 * image's top on tall charts (32 devices: 64 pixels up, under a 45-pixel
 * margin) and was not drawn. */
Test(sim_cli, tall_timeline_keeps_its_legend)
{
    char *dir = test_tmpdir();
    /* data parallel, the rings' rows put the legend on a row of its own
     * under the title (46 pixels above the graph); else 17 */
    const char *shapes[] = {"--pp 4 --dp 8", "--pp 4"};
    const int most[] = {50, 30};
    for (int k = 0; k < 2; k++) {
        cli_result r = cli_run("sim --hw rtx2080ti x32 --model gpt-mini "
                               "--schedule 1f1b %s --mbs 2 --microbatches 4 "
                               "--plot %s/p", shapes[k], dir);
        cr_assert(r.code == 0, "%s", r.err);
        cli_result_free(&r);
        char p[512];
        snprintf(p, sizeof p, "%s/p.gp", dir);
        char *gp = slurp(p);
        cr_assert_not_null(gp);
        int h = 0;
        double x = 0, y = 0;
        const char *t = strstr(gp, "set terminal pngcairo size 1400,");
        const char *o = strstr(gp, "set object 1 rect at graph ");
        cr_assert(t && o, "%s", gp);
        cr_assert_eq(sscanf(t, "set terminal pngcairo size 1400,%d", &h), 1);
        cr_assert_eq(sscanf(o, "set object 1 rect at graph %lf, %lf", &x,
                            &y), 2);
        /* above the graph, and no more than most[k] pixels (the graph
         * is shorter than the image) */
        cr_expect_gt(y, 1.0, "%s", o);
        cr_expect_lt((y - 1) * h, most[k], "legend %.0f pixels up of %d: %s",
                     (y - 1) * h, h, o);
        free(gp);
    }
    test_rm_rf(dir);
}

/* Every track an event lands on has a name: zb-v's turn of the V sends
 * from a device to itself, which had no 'recv from' track and read as an
 * unnamed thread 10+d in Perfetto. */
Test(sim_cli, every_trace_track_is_named)
{
    char *dir = test_tmpdir();
    cli_result r = cli_run("sim --hw rtx2080ti x4 --model gpt-mini --schedule "
                           "zb-v --pp 4 --mbs 2 --microbatches 8 --trace "
                           "%s/t.json", dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    char p[512];
    snprintf(p, sizeof p, "%s/t.json", dir);
    json_t *j = json_load_file(p, 0, NULL);
    cr_assert_not_null(j);
    json_t *ev = json_object_get(j, "traceEvents");
    cr_assert(json_is_array(ev));
    size_t i, k;
    json_t *x, *y;
    int self = 0;
    json_array_foreach(ev, i, x) {
        const char *ph = json_string_value(json_object_get(x, "ph"));
        if (!ph || strcmp(ph, "X")) continue;
        json_int_t pid = json_integer_value(json_object_get(x, "pid"));
        json_int_t tid = json_integer_value(json_object_get(x, "tid"));
        if (tid == 10 + pid) self++;
        int named = 0;
        json_array_foreach(ev, k, y) {
            const char *n = json_string_value(json_object_get(y, "name"));
            if (n && !strcmp(n, "thread_name") &&
                json_integer_value(json_object_get(y, "pid")) == pid &&
                json_integer_value(json_object_get(y, "tid")) == tid) {
                named = 1;
                break;
            }
        }
        cr_assert(named, "pid %lld tid %lld (%s) has no thread_name",
                  (long long)pid, (long long)tid,
                  json_string_value(json_object_get(x, "name")));
    }
    cr_expect_gt(self, 0, "zb-v receives on its own device");
    json_decref(j);
    unlink(p);
    rmdir(dir);
    free(dir);
}

/* --ops: every op once, in its stage, the shares of each stage summing
 * to one; the table names the same ops. */
Test(sim_cli, ops_say_where_each_stage_spends_its_time)
{
    const char *args = "sim --hw h100-sxm x2 --model gpt2 --schedule 1f1b "
                       "--pp 2 --mbs 2 --microbatches 4 --ops";
    cli_result r = cli_run("%s --json", args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_t *j = json_loads(r.out, 0, NULL);
    cr_assert_not_null(j, "%s", r.out);
    json_t *ops = json_object_get(j, "ops");
    cr_assert(json_is_array(ops));
    util_err e;
    prof_model *m = prof_model_load("gpt2", &e);
    cr_assert_not_null(m, "%s", e.msg);
    cr_assert_eq(json_array_size(ops), (size_t)m->n_ops);
    double share[2] = {0, 0};
    int last_stage = 0;
    for (size_t i = 0; i < json_array_size(ops); i++) {
        json_t *o = json_array_get(ops, i);
        int st = (int)json_integer_value(json_object_get(o, "stage"));
        cr_assert(st == 0 || st == 1, "stage %d", st);
        cr_assert_geq(st, last_stage, "ops in stage order");
        last_stage = st;
        cr_assert_str_eq(json_string_value(json_object_get(o, "op")),
                         m->ops[i].name);
        cr_assert_geq(json_real_value(json_object_get(o, "fwd_s")), 0);
        share[st] += json_real_value(json_object_get(o, "share"));
    }
    cr_expect_float_eq(share[0], 1, 1e-9);
    cr_expect_float_eq(share[1], 1, 1e-9);
    json_decref(j);
    cli_result q = cli_run("%s", args);
    cr_assert_eq(q.code, 0, "%s", q.err);
    cr_assert(strstr(q.out, "ops, per microbatch of 2"), "%s", q.out);
    cr_assert(strstr(q.out, "head.loss"), "%s", q.out);
    cr_assert(strstr(q.out, "l0.attn.core"), "%s", q.out);
    cli_result_free(&q);
    cli_result_free(&r);
    prof_model_free(m);
}

/* --seq: a fine-tuning's length instead of the spec's. The header says
 * it, the plan file keeps it and reads back the same answer, a plan of
 * sluice plan too, and the executor runs it (its tokens a second are
 * 32 a sample's worth); past the learned positions it is refused, and
 * with --plan it is the plan's to fix. */
/* Fused attention (--flash-attn) on the command line: kept by the plan
 * file, priced without the scores (less memory at a long sequence), and
 * run by the executor with the unfused graph's bits; a model whose spec
 * fuses it is unfused by --no-flash-attn. */
Test(sim_cli, fused_attention_of_its_own)
{
    char *dir = test_tmpdir();
    const char *base = "sim --hw cpu x2 --model gpt-tiny --schedule 1f1b "
                       "--pp 2 --mbs 2 --microbatches 2";
    cli_result r = cli_run("%s --flash-attn --out %s/f.json", base, dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, ", fused attention (--flash-attn)"), "%s", r.out);
    cli_result_free(&r);
    r = cli_run("%s --out %s/u.json", base, dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(!strstr(r.out, "attention"), "%s", r.out);
    cli_result_free(&r);
    json_t *f = cli_json("sim --plan %s/f.json --json", dir),
           *u = cli_json("sim --plan %s/u.json --json", dir);
    cr_expect(json_is_true(json_object_get(f, "flash_attn")));
    cr_expect(json_is_false(json_object_get(u, "flash_attn")));
    double pf = json_number_value(
               json_array_get(json_object_get(f, "peak_mem_bytes"), 0)),
           pu = json_number_value(
               json_array_get(json_object_get(u, "peak_mem_bytes"), 0));
    cr_expect_lt(pf, pu, "fused %.0f bytes, unfused %.0f", pf, pu);
    json_decref(f);
    json_decref(u);
    /* run: the same losses, bit for bit, in less memory */
    json_t *ra = cli_json("exec --plan %s/f.json --steps 2 --json", dir),
           *rb = cli_json("exec --plan %s/u.json --steps 2 --json", dir);
    cr_expect(json_is_true(json_object_get(ra, "flash_attn")));
    json_t *sa = json_object_get(ra, "steps"), *sb = json_object_get(rb, "steps");
    cr_assert_eq(json_array_size(sa), 2);
    cr_assert_eq(json_array_size(sb), 2);
    for (size_t k = 0; k < 2; k++) {
        double la = json_number_value(json_object_get(json_array_get(sa, k),
                                                      "loss")),
               lb = json_number_value(json_object_get(json_array_get(sb, k),
                                                      "loss"));
        cr_expect(la == lb, "step %zu: loss %.17g fused, %.17g not", k + 1,
                  la, lb);
    }
    double ma = json_number_value(
               json_array_get(json_object_get(ra, "peak_mem_bytes"), 0)),
           mb = json_number_value(
               json_array_get(json_object_get(rb, "peak_mem_bytes"), 0));
    cr_expect_lt(ma, mb, "measured: fused %.0f bytes, unfused %.0f", ma, mb);
    json_decref(ra);
    json_decref(rb);
    /* the planner: said, and kept */
    r = cli_run("plan --hw cpu x2 --model gpt-tiny --flash-attn --out "
                "%s/p.json", dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "attention fused, no scores kept "
                            "(--flash-attn)"), "%s", r.out);
    cli_result_free(&r);
    r = cli_run("sim --plan %s/p.json", dir);
    cr_expect(r.code == 0 && strstr(r.out, "fused attention"), "%s%s",
              r.out, r.err);
    cli_result_free(&r);
    r = cli_run("plan --hw cpu x2 --model tests/data/exec/gpt-pico-flash.json "
                "--no-flash-attn");
    cr_expect(r.code == 0 && strstr(r.out, "attention as separate ops, its "
                                           "scores kept (--no-flash-attn)"),
              "%s%s", r.out, r.err);
    cli_result_free(&r);
    cli_expect(2, "--flash-attn cannot be combined with --plan", "sim --plan "
               "%s/f.json --flash-attn", dir);
    sh_run("sed 's/\"flash_attn\": true/\"flash_attn\": 1/' %s/f.json > "
           "%s/bad.json", dir, dir);
    cli_expect(2, "bad.json:", "sim --plan %s/bad.json", dir);
    cli_expect(2, "flash_attn", "exec --plan %s/bad.json --steps 1", dir);
    /* fused attention set on a plan made unfused: its stages' ops are
     * another graph's, and the field is named as the likely cause */
    sh_run("sed 's/\"schedule\": \"1f1b\",/\"schedule\": \"1f1b\", "
           "\"flash_attn\": true,/' %s/u.json > %s/flip.json", dir, dir);
    cli_expect(2, "(its flash_attn changes the ops", "sim --plan %s/flip.json",
               dir);
    test_rm_rf(dir);
}

Test(sim_cli, a_sequence_length_of_its_own)
{
    char *dir = test_tmpdir();
    cli_result r = cli_run("sim --hw cpu x2 --model gpt-tiny --schedule 1f1b "
                           "--pp 2 --mbs 2 --microbatches 4 --seq 32 --out "
                           "%s/s.json", dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "= 8 samples of 32 tokens/iteration"), "%s",
              r.out);
    cli_result_free(&r);
    json_t *a = cli_json("sim --plan %s/s.json --json", dir),
           *b = cli_json("sim --hw cpu x2 --model gpt-tiny --schedule 1f1b "
                         "--pp 2 --mbs 2 --microbatches 4 --json");
    double ta = json_number_value(json_object_get(a, "tokens_per_s")),
           sa = json_number_value(json_object_get(a, "samples_per_s")),
           tb = json_number_value(json_object_get(b, "tokens_per_s")),
           sb = json_number_value(json_object_get(b, "samples_per_s"));
    cr_expect_float_eq(ta / sa, 32, 1e-6, "%g tokens a sample", ta / sa);
    cr_expect_float_eq(tb / sb, 64, 1e-6, "%g tokens a sample", tb / sb);
    cr_expect_gt(sa, sb, "half the tokens, no faster");
    json_decref(a);
    json_decref(b);
    r = cli_run("exec --plan %s/s.json --steps 2 --json", dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_t *x = json_loads(r.out, 0, NULL);
    cr_assert_not_null(x, "%s", r.out);
    double tx = json_number_value(json_object_get(x, "tokens_per_s")),
           sx = json_number_value(json_object_get(x, "samples_per_s"));
    cr_expect_float_eq(tx / sx, 32, 1e-6, "%g tokens a sample run", tx / sx);
    json_decref(x);
    cli_result_free(&r);
    r = cli_run("plan --hw cpu x2 --model gpt-tiny --seq 32 --out %s/p.json",
                dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "samples of 32 tokens"), "%s", r.out);
    cli_result_free(&r);
    r = cli_run("sim --plan %s/p.json", dir);
    cr_expect(r.code == 0 && strstr(r.out, "of 32 tokens/iteration"), "%s%s",
              r.out, r.err);
    cli_result_free(&r);
    cli_expect(2, "--seq cannot be combined with --plan", "sim --plan "
               "%s/s.json --seq 16", dir);
    cli_expect(2, "2048 tokens a sample (--seq): gpt2 has 1024 learned "
               "positions (max_pos)", "plan --hw rtx4090 x1 --model gpt2 "
               "--seq 2048");
    cli_expect(2, "--seq '0': expected a token count", "plan --hw rtx4090 x1 "
               "--model gpt2 --seq 0");
    test_rm_rf(dir);
}

/* The interleaved schedule interleaves unless told otherwise: two chunks
 * a device by default (one chunk was plain 1F1B under another name, the
 * same prediction), one when asked, and the header says which. */
Test(sim_cli, interleaved_is_two_chunks_unless_told)
{
    cli_result a = cli_run("sim --hw 'cpu x2' --model gpt-mini --schedule "
                           "interleaved --pp 2 --mbs 2 --microbatches 4");
    cr_assert_eq(a.code, 0, "%s", a.err);
    cr_expect(strstr(a.out, "4 stages") && strstr(a.out, "2 chunks per "
                                                  "device"), "%s", a.out);
    cli_result b = cli_run("sim --hw 'cpu x2' --model gpt-mini --schedule "
                           "interleaved --chunks 1 --pp 2 --mbs 2 "
                           "--microbatches 4");
    cr_assert_eq(b.code, 0, "%s", b.err);
    cr_expect(strstr(b.out, "2 stages") && strstr(b.out, "1 chunk per "
                                                  "device"), "%s", b.out);
    cli_result c = cli_run("sim --hw 'cpu x2' --model gpt-mini --schedule "
                           "1f1b --pp 2 --mbs 2 --microbatches 4");
    cr_assert_eq(c.code, 0, "%s", c.err);
    /* one chunk is 1F1B's prediction; two are not */
    const char *ta = strstr(a.out, "iteration time"),
               *tb = strstr(b.out, "iteration time"),
               *tc = strstr(c.out, "iteration time");
    cr_assert(ta && tb && tc);
    cr_expect(!strncmp(tb, tc, strcspn(tc, "\n")), "%.40s against %.40s",
              tb, tc);
    cr_expect(strncmp(ta, tc, strcspn(tc, "\n")), "%.40s", ta);
    cli_result_free(&a);
    cli_result_free(&b);
    cli_result_free(&c);
}
