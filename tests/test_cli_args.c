/* The command line as a careless or hostile user types it: --hw repeated,
 * schedule lists that are empty or use another name, paths a JSON file
 * cannot hold, plan files edited to another server, sizes that would take
 * gigabytes. Every case answers with one clear message and exit code 2
 * (or runs, where the input is fine). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sim/ir.h"
#include "tests/harness.h"
#include "util/util.h"

#define SIM_TINY "--model gpt-tiny --schedule 1f1b --pp 2 --mbs 1 " \
                 "--microbatches 4"

/* sim --hw GPU_N --model gpt-tiny --mbs 1 --microbatches 4 ARGS --out
 * DIR/NAME: a plan file for a test; fails the test when sim does. */
static void write_plan(const char *dir, const char *name, const char *hw,
                       const char *args)
{
    cli_result r = cli_run("sim --hw %s --model gpt-tiny --mbs 1 "
                           "--microbatches 4 %s --out %s/%s", hw, args, dir,
                           name);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A repeated --hw replaces the first (it read past argv before: an
 * environment variable as a GPU name, or a crash with a small
 * environment). */
Test(cli_args, repeated_hw_replaces_the_first)
{
    const char *cmds[] = {
        "profile show --hw a b c d --hw rtx3090",
        "plan --hw a b c d --hw rtx2080ti x2 --model gpt-tiny --no-progress",
        "sim --hw a b c d --hw rtx2080ti x2 " SIM_TINY,
    };
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        /* env -i: no environment after argv to read by mistake */
        int rc = sh_run("env -i \"$SLUICE\" %s >/dev/null 2>&1", cmds[i]);
        cr_assert_eq(rc, 0, "%s: exit %d", cmds[i], rc);
        cli_result r = cli_run("%s", cmds[i]);
        cr_assert_eq(r.code, 0, "%s: %s", cmds[i], r.err);
        cr_assert(strstr(r.out, i ? "rtx2080ti" : "rtx3090"), "%s", r.out);
        cli_result_free(&r);
    }
    cli_result r = cli_run("sim --hw --model gpt-tiny");
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "--hw needs a GPU type and count"), "%s", r.err);
    cli_result_free(&r);
}

/* --hw GPU without a count is the standard 8-GPU server, as --help says. */
Test(cli_args, hw_without_count_is_eight)
{
    cli_result a = cli_run("profile show --hw rtx2080ti --json");
    cli_result b = cli_run("profile show --hw rtx2080ti x8 --json");
    cr_assert_eq(a.code, 0, "%s", a.err);
    cr_assert_str_eq(a.out, b.out);
    cli_result_free(&a);
    cli_result_free(&b);
    const char *helps[] = {"sim --help", "plan --help", "profile --help"};
    for (int i = 0; i < 3; i++) {
        cli_result h = cli_run("%s", helps[i]);
        cr_assert_eq(h.code, 0);
        cr_assert(strstr(h.out, "without a count"), "%s: %s", helps[i], h.out);
        cli_result_free(&h);
    }
}

/* Every help whose options take a SIZE says what its units are: binary,
 * G a GiB whether written G, GB or GiB (the README's tables once said GB
 * of what --host-mem 768G reads as 768 GiB). */
Test(cli_args, helps_say_sizes_are_binary)
{
    const char *helps[] = {"sim --help", "plan --help", "exec --help",
                           "exec --workload x --help",
                           "plan --workload x --help", "profile --help"};
    for (int i = 0; i < 6; i++) {
        cli_result h = cli_run("%s", helps[i]);
        cr_assert_eq(h.code, 0, "%s: %s", helps[i], h.err);
        cr_expect(strstr(h.out, " SIZE") && strstr(h.out, "SIZE is binary: ") &&
                  strstr(h.out, "768G, 768GB\nand 768GiB are all 768 GiB"),
                  "%s: %s", helps[i], h.out);
        cli_result_free(&h);
    }
}

/* Every schedule of the table is in the help of sim and plan and in the
 * "not known" message; mixed-pipe names Mixed-pipe everywhere. */
Test(cli_args, schedule_names_come_from_the_table)
{
    const char *const *names = sim_sched_names();
    cli_result sh = cli_run("sim --help"), ph = cli_run("plan --help");
    cli_result bad = cli_run("sim --hw rtx2080ti x2 --model gpt-tiny "
                             "--schedule nope --pp 2 --mbs 1 "
                             "--microbatches 4");
    cr_assert_eq(bad.code, 2);
    int n = 0;
    for (int k = 0; names[k]; k++) {
        if (k == SIM_SCHED_FILE) continue;
        char line[64];
        snprintf(line, sizeof line, "\n  %s ", names[k]);
        cr_assert(strstr(sh.out, line), "sim --help lacks %s", names[k]);
        cr_assert(strstr(ph.out, line), "plan --help lacks %s", names[k]);
        cr_assert(strstr(bad.err, names[k]), "%s", bad.err);
        n++;
    }
    cr_assert_eq(n, 17);
    cli_result_free(&sh);
    cli_result_free(&ph);
    cli_result_free(&bad);

    cli_result s = cli_run("sim --hw rtx2080ti x2 --model gpt-tiny --schedule "
                           "mixed-pipe --pp 2 --mbs 1 --microbatches 4 --json");
    cr_assert_eq(s.code, 0, "%s", s.err);
    json_t *j = json_loads(s.out, 0, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(j, "schedule")),
                     "mixed");
    json_decref(j);
    cli_result_free(&s);
    cli_result p = cli_run("plan --hw rtx2080ti x2 --model gpt-tiny "
                           "--schedule mixed-pipe,1f1b --json --no-progress");
    cr_assert_eq(p.code, 0, "%s", p.err);
    cli_result_free(&p);
    /* a plan file may say mixed-pipe too */
    char *d = test_tmpdir();
    write_plan(d, "p.json", "rtx2080ti x2", "--schedule mixed --pp 2");
    int rc = sh_run("sed 's/\"schedule\": \"mixed\"/\"schedule\": "
                    "\"mixed-pipe\"/' %s/p.json > %s/q.json && grep -q "
                    "mixed-pipe %s/q.json", d, d, d);
    cr_assert_eq(rc, 0);
    cli_result q = cli_run("sim --plan %s/q.json", d);
    cr_assert_eq(q.code, 0, "%s", q.err);
    cli_result_free(&q);
    test_rm_rf(d);
}

Test(cli_args, schedule_lists_and_files_that_say_nothing)
{
    struct { const char *args, *want; } c[] = {
        {"plan --hw rtx2080ti x2 --model gpt-tiny --schedule ,",
         "--schedule ',': an empty name"},
        {"plan --hw rtx2080ti x2 --model gpt-tiny --schedule gpipe,,1f1b",
         "an empty name"},
        {"plan --hw rtx2080ti x2 --model gpt-tiny --schedule ''",
         "an empty name"},
        {"plan --hw rtx2080ti x2 --model gpt-tiny --schedule file",
         "unknown schedule 'file'"},
        {"plan --hw rtx2080ti x2 --model gpt-tiny --schedule hyrda",
         "(did you mean 'hydra'?)"},
        {"plan --hw rtx2080ti x2 --model gpt-tiny --schedule foo",
         "with --sweep-host-mem also hydra"},
        {"sim --hw rtx2080ti x2 --model gpt-tiny --schedule-file tests "
         "--pp 2 --mbs 1 --microbatches 4", "tests: is a directory"},
        {"sim --hw rtx2080ti x2 --model gpt-tiny --schedule-file /dev/null "
         "--pp 2 --mbs 1 --microbatches 4", "not a regular file"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        cli_result r = cli_run("%s", c[i].args);
        cr_assert_eq(r.code, 2, "%s: exit %d: %s", c[i].args, r.code, r.err);
        cr_assert(strstr(r.err, c[i].want), "%s: expected '%s' in: %s",
                  c[i].args, c[i].want, r.err);
        cli_result_free(&r);
    }
    char *d = test_tmpdir();
    cr_assert_eq(sh_run(": > %s/empty.csv", d), 0);
    cli_result r = cli_run("sim --hw rtx2080ti x2 --model gpt-tiny "
                           "--schedule-file %s/empty.csv --pp 2 --mbs 1 "
                           "--microbatches 4", d);
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "the schedule file is empty"), "%s", r.err);
    cli_result_free(&r);
    test_rm_rf(d);
}

/* A plan file uses every GPU of its server; one edited to a larger server
 * is refused, unless it says it runs on part of it (gpus_used), as sim
 * --out writes for a pipeline given on part of a server. */
Test(cli_args, plan_file_uses_every_gpu_or_says_so)
{
    char *d = test_tmpdir();
    write_plan(d, "p4.json", "rtx2080ti x4", "--schedule 1f1b --pp 4");
    cr_assert_eq(sh_run("sed 's/x4/x8/' %s/p4.json > %s/p8.json", d, d), 0);
    cli_result r = cli_run("sim --plan %s/p8.json", d);
    cr_assert_eq(r.code, 2, "%s", r.out);
    cr_assert(strstr(r.err, "= 4 GPUs, not the 8 of the server") &&
              strstr(r.err, "\"gpus_used\": 4"), "%s", r.err);
    cli_result_free(&r);
    /* on part of a server by choice: written down, read back */
    cli_result b = cli_run("sim --hw rtx2080ti x8 --model gpt-tiny --schedule "
                           "1f1b --pp 4 --mbs 1 --microbatches 4 --json --out "
                           "%s/part.json", d);
    cr_assert_eq(b.code, 0, "%s", b.err);
    cr_assert_eq(sh_run("grep -q '\"gpus_used\": 4' %s/part.json", d), 0);
    cli_result c = cli_run("sim --plan %s/part.json --json", d);
    cr_assert_eq(c.code, 0, "%s", c.err);
    cr_assert_str_eq(c.out, b.out);
    cli_result_free(&b);
    cli_result_free(&c);
    cr_assert_eq(sh_run("sed 's/\"gpus_used\": 4/\"gpus_used\": 6/' "
                        "%s/part.json > %s/bad.json", d, d), 0);
    r = cli_run("sim --plan %s/bad.json", d);
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "bad.json:") &&
              strstr(r.err, "field 'gpus_used': 6, but dp 1 x pp 4 x tp 1 = 4"),
              "%s", r.err);
    cli_result_free(&r);
    test_rm_rf(d);
}

/* A plan file's tensor-parallel group wider than a server of its hw is
 * the tp field's error, its line named, in sim and exec alike. */
Test(cli_args, plan_file_tp_wider_than_a_server_names_tp)
{
    char *d = test_tmpdir();
    cli_result r = cli_run("sim --hw 'rtx2080ti x12 --gpus-per-server 6' "
                           "--model gpt2 --schedule 1f1b --pp 1 --tp 6 --dp 2 "
                           "--mbs 1 --microbatches 1 --out %s/p.json", d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    cr_assert_eq(sh_run("sed 's/\"tp\": 6/\"tp\": 12/; s/\"dp\": 2/"
                        "\"dp\": 1/' %s/p.json > %s/b.json", d, d), 0);
    for (int k = 0; k < 2; k++) {
        r = cli_run("%s --plan %s/b.json", k ? "exec" : "sim", d);
        cr_expect_eq(r.code, 2, "%s", r.err);
        cr_expect(strstr(r.err, "b.json:8:9: field 'tp': tp 12 is larger "
                         "than a node"), "%s", r.err);
        cli_result_free(&r);
    }
    test_rm_rf(d);
}

/* A path that is not UTF-8 cannot go into a plan or JSON output: refused
 * (before the work) when it would; fine when nothing JSON is written. A
 * name derived from such a folder is made valid for the reports. */
Test(cli_args, paths_that_are_not_utf8)
{
    char *d = test_tmpdir(), model[600], out[600], dirp[600];
    snprintf(model, sizeof model, "%s/caf\xE9.json", d);
    cr_assert_eq(sh_run("cp profiles/models/gpt-tiny.json '%s'", model), 0);
    snprintf(out, sizeof out, "%s/p.json", d);
    const char *sim_out[] = {"sim", "--hw", "rtx2080ti", "x2", "--model", model,
                             "--schedule", "1f1b", "--pp", "2", "--mbs", "1",
                             "--microbatches", "4", "--out", out, NULL};
    cli_result r = cli_runv(NULL, sim_out);
    cr_assert_eq(r.code, 2, "%s", r.err);
    cr_assert(strstr(r.err, "the model path '") &&
              strstr(r.err, "caf\\xE9.json' is not valid UTF-8"), "%s", r.err);
    cr_assert_neq(access(out, F_OK), 0, "a plan was written");
    cli_result_free(&r);
    sim_out[14] = "--json";
    sim_out[15] = NULL;
    r = cli_runv(NULL, sim_out);
    cr_assert_eq(r.code, 2, "%s", r.err);
    cli_result_free(&r);
    sim_out[14] = NULL;
    r = cli_runv(NULL, sim_out);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    const char *plan_json[] = {"plan", "--hw", "rtx2080ti", "x2", "--model",
                               model, "--json", "--no-progress", NULL};
    r = cli_runv(NULL, plan_json);
    cr_assert_eq(r.code, 2, "%s", r.err);
    cr_assert(strstr(r.err, "--model '") && strstr(r.err, "not valid UTF-8"),
              "%s", r.err);
    cli_result_free(&r);
    /* exec's JSON report names the model and the save file */
    const char *exec_json[] = {"exec", "--model", model, "--steps", "1",
                               "--json", NULL};
    r = cli_runv(NULL, exec_json);
    cr_assert_eq(r.code, 2, "%s", r.err);
    cr_assert(strstr(r.err, "--model '") && strstr(r.err, "not valid UTF-8"),
              "%s", r.err);
    cli_result_free(&r);
    char save[600];
    snprintf(save, sizeof save, "%s/ckpt\xE9", d);
    const char *exec_save[] = {"exec", "--model",
                               "tests/data/exec/gpt-pico.json", "--steps", "1",
                               "--save", save, "--json", NULL};
    r = cli_runv(NULL, exec_save);
    cr_assert_eq(r.code, 2, "%s", r.err);
    cr_assert(strstr(r.err, "--save '"), "%s", r.err);
    cr_assert_neq(access(save, F_OK), 0, "a checkpoint was written");
    cli_result_free(&r);
    /* a Hugging Face config named by its folder */
    snprintf(dirp, sizeof dirp, "%s/gpt\xFF" "2", d);
    cr_assert_eq(mkdir(dirp, 0755), 0);
    cr_assert_eq(sh_run("cp tests/data/hf/gpt2-xl/config.json '%s/'", dirp), 0);
    snprintf(model, sizeof model, "%s/config.json", dirp);
    const char *show[] = {"profile", "show", model, "--json", NULL};
    r = cli_runv(NULL, show);
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_t *j = json_loads(r.out, 0, NULL);
    cr_assert_not_null(j, "%s", r.out);
    const char *name = json_string_value(json_object_get(
        json_object_get(j, "spec"), "name"));
    cr_assert_str_eq(name, "gpt?2");
    json_decref(j);
    cli_result_free(&r);
    test_rm_rf(d);
}

Test(cli_args, long_paths_are_refused_not_cut)
{
    char longp[400];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = 0;
    memcpy(longp, "/tmp/", 5);
    cli_result r = cli_run("sim --hw rtx2080ti x2 --model %s --schedule 1f1b "
                           "--pp 2 --mbs 1 --microbatches 4", longp);
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "longer than the 255 bytes a plan keeps"), "%s",
              r.err);
    cli_result_free(&r);
    r = cli_run("plan --hw rtx2080ti x2 --model %s", longp);
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "longer than the 255 bytes a plan keeps"), "%s",
              r.err);
    cli_result_free(&r);
}

/* Sizes that would take gigabytes are refused at once, with the estimate. */
Test(cli_args, huge_sizes_refused_up_front_with_an_estimate)
{
    char *d = test_tmpdir();
    cr_assert_eq(sh_run("sed 's/\"layers\": 4/\"layers\": 1000000/' "
                        "profiles/models/gpt-tiny.json > %s/deep.json", d), 0);
    cr_assert_eq(sh_run("sed 's/\"layers\": 4/\"layers\": 1000/' "
                        "profiles/models/gpt-tiny.json > %s/deep1000.json",
                        d), 0);
    struct { const char *args, *want; } c[] = {
        {"profile show %s/deep.json", "1000000 layers would make 12000006 ops"},
        {"sim --hw rtx2080ti x2 --model %s/deep.json --schedule 1f1b --pp 2 "
         "--mbs 1 --microbatches 4", "sluice takes at most 1024"},
        {"plan --hw rtx2080ti x2 --model %s/deep.json", "GiB"},
        {"sim --hw rtx2080ti x8 --model gpt-tiny --schedule 1f1b --pp 8 --mbs 1 "
         "--microbatches 1000000 --trace %s/t.json",
         "simulating this plan would take about 19.2 GB (64 million tasks)"},
        {"sim --hw rtx2080ti x8 --model gpt-tiny --schedule 2bw --pp 4 --dp 2 "
         "--mbs 1 --microbatches 40000 --out %s/p.json",
         "simulating this plan would take about 3.8 GB (13 million tasks)"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char args[512];
        snprintf(args, sizeof args, c[i].args, d);
        double t0 = now_s();
        cli_result r = cli_run("%s", args);
        double s = now_s() - t0;
        cr_assert_eq(r.code, 2, "%s: exit %d: %s", args, r.code, r.err);
        cr_assert(strstr(r.err, c[i].want), "%s: expected '%s' in: %s", args,
                  c[i].want, r.err);
        /* refused before the work: far under the seconds it would take */
        cr_assert_lt(s, 5.0, "%s took %.1f s", args, s);
        cli_result_free(&r);
    }
    /* the deepest published model still expands */
    cli_result r = cli_run("profile show %s/deep1000.json", d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    test_rm_rf(d);
}

/* Hardware figures at their least (a GPU of 0.001 TFLOP/s and 0.001
 * GB/s, tests/data/slow-gpu.json) make GPT-3's ops years long: the
 * simulator's clock stops at 31.7 years and says so (code 2), and the
 * planner refuses what its lower bound already puts past it. Before,
 * the sums ran out of 64 bits and the report said -8.4e12 ms of
 * compute. A model it can time still plans. */
Test(cli_args, hardware_too_slow_to_simulate_is_said)
{
    cli_expect(2, "the simulated clock ran past 31.7 years at dev 0 F stage 0",
               "sim --hw tests/data/slow-gpu.json --model gpt3-175b "
               "--schedule gpipe --pp 1 --mbs 64 --microbatches 64");
    cli_expect(2, "past the 31.7 years the simulator's clock holds",
               "plan --hw tests/data/slow-gpu.json --model gpt3-175b");
    cli_expect(0, "plan for gpt2", "plan --hw tests/data/slow-gpu.json "
               "--model gpt2");
}

/* An output that could not be written, or that names one of the run's
 * inputs, is refused before any work (code 2), naming the flag; a
 * checkpoint may be saved over the one a run resumes (--save-every does
 * so), and /dev/null is written through. */
Test(cli_args, outputs_are_checked_before_the_work)
{
    char *dir = test_tmpdir();
    cli_result r = cli_run("sim --hw 'cpu x2' --model gpt-tiny --schedule "
                           "1f1b --pp 2 --mbs 1 --microbatches 2 --out "
                           "%s/p.json", dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    /* each with the folder twice (%.0s: not printed) */
    const struct { const char *args, *want; } bad[] = {
        {"sim --plan %s/p.json --out %s/none/q.json", "--out '"},
        {"sim --plan %s/p.json --trace %s/p.json", "is also an input"},
        {"plan --hw 'cpu x2' --model gpt-tiny --out %s/.%.0s",
         "is a directory"},
        {"exec --plan %s/p.json --steps 2 --save %s/none/x.ckpt", "--save '"},
        {"exec --plan %s/p.json --steps 2 --trace %s/p.json",
         "is also an input"},
        {"exec --plan %s/p.json --steps 2 --plot %s/none/x", "--plot '"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char args[600];
        snprintf(args, sizeof args, bad[i].args, dir, dir);
        r = cli_run("%s", args);
        cr_expect_eq(r.code, 2, "%s: %d %s", args, r.code, r.err);
        cr_expect(strstr(r.err, bad[i].want), "%s: %s", args, r.err);
        cr_expect(!strstr(r.out, "step "), "%s ran: %s", args, r.out);
        cli_result_free(&r);
    }
    r = cli_run("exec --plan %s/p.json --steps 2 --save %s/x.ckpt --quiet",
                dir, dir);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --plan %s/p.json --steps 3 --resume %s/x.ckpt --save "
                "%s/x.ckpt --trace /dev/null --quiet", dir, dir, dir);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    test_rm_rf(dir);
}
