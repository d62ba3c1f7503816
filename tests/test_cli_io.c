/* Output and input through the binary: stdout on a full disk or closed
 * fails the run (exit 1) with a message; --out and --trace keep devices,
 * links and modes; inputs that are not files are refused at once; plots
 * are drawn beside their names and moved only when whole, and no prefix
 * becomes a gnuplot command. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/harness.h"
#include "util/util.h"

#define SIM "sim --hw rtx2080ti x4 --model gpt-tiny --schedule 1f1b --pp 4 " \
            "--mbs 1 --microbatches 4"

static char *slurp(const char *path)
{
    char *s = NULL;
    util_err e;
    return util_read_file(path, &s, NULL, &e) ? NULL : s;
}

static int have_gnuplot(void)
{
    return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

/* Every command that prints: to a full disk, and to a closed stdout. */
Test(cli_io, lost_stdout_fails_the_run)
{
    const char *cmds[] = {
        "--version", "--help", "profile list", "profile list --json",
        "profile show t5-3b --ops", "profile show --hw rtx2080ti x8 --json",
        "profile validate profiles/models/gpt-tiny.json",
        SIM, SIM " --json", SIM " --emit-schedule",
        "plan --hw rtx2080ti x2 --model gpt-tiny --no-progress",
        "plan --hw rtx2080ti x2 --model gpt-tiny --no-progress --json",
        "validate validation/megatron-sc21-table1.csv",
        "exec --model gpt-tiny --batch 2 --seq 16 --steps 1 --threads 1 "
        "--eval-batches 1 --json",
    };
    char *d = test_tmpdir();
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        int rc = sh_run("\"$SLUICE\" %s >/dev/null 2>%s/err", cmds[i], d);
        cr_assert_eq(rc, 0, "%s: exit %d to /dev/null", cmds[i], rc);
        rc = sh_run("\"$SLUICE\" %s >/dev/full 2>%s/err", cmds[i], d);
        cr_assert_eq(rc, 1, "%s: exit %d to /dev/full", cmds[i], rc);
        cr_assert_eq(sh_run("grep -q 'cannot write to standard output: No "
                            "space left on device' %s/err", d), 0,
                     "%s: no message", cmds[i]);
        rc = sh_run("\"$SLUICE\" %s >&- 2>%s/err", cmds[i], d);
        cr_assert_eq(rc, 1, "%s: exit %d with stdout closed", cmds[i], rc);
        cr_assert_eq(sh_run("grep -q 'standard output is closed' %s/err", d),
                     0, "%s: no message", cmds[i]);
    }
    /* a usage error keeps its own exit code */
    cr_assert_eq(sh_run("\"$SLUICE\" sim --pp x >/dev/full 2>/dev/null"), 2);
    /* with stdout closed, a file written is not taken for stdout */
    cr_assert_eq(sh_run("\"$SLUICE\" " SIM " --out %s/p.json >&- 2>/dev/null",
                        d), 1);
    char p[600];
    snprintf(p, sizeof p, "%s/p.json", d);
    char *plan = slurp(p);
    cr_assert_not_null(plan);
    cr_assert(!strncmp(plan, "{\n  \"sluice_plan\"", 17), "%.60s", plan);
    free(plan);
    test_rm_rf(d);
}

Test(cli_io, outputs_keep_devices_links_and_modes)
{
    struct stat st;
    cli_result r = cli_run(SIM " --out /dev/null --trace /dev/null --plot "
                           "/dev/null/p");
    /* /dev/null/p cannot be a folder's file: refused before the work,
     * the devices stay devices */
    cr_assert_eq(r.code, 2, "%s", r.err);
    cli_result_free(&r);
    r = cli_run(SIM " --out /dev/null --trace /dev/null");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    cr_assert_eq(stat("/dev/null", &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "/dev/null was replaced");
    r = cli_run(SIM " --out /dev/full");
    cr_assert_eq(r.code, 1);
    cr_assert(strstr(r.err, "/dev/full: cannot write: No space left"), "%s",
              r.err);
    cli_result_free(&r);
    cr_assert_eq(stat("/dev/full", &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "/dev/full was replaced");

    char *d = test_tmpdir();
    cr_assert_eq(sh_run("cd %s && echo old > real.json && chmod 600 real.json "
                        "&& ln -s real.json link.json", d), 0);
    /* two outputs into one file through its link: refused, nothing
     * written; one: the link kept, the file it names replaced */
    cli_expect(2, "name the same file", SIM " --out %s/link.json --trace "
               "%s/real.json", d, d);
    r = cli_run(SIM " --out %s/plan.json --trace %s/link.json", d, d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    char p[600];
    snprintf(p, sizeof p, "%s/link.json", d);
    cr_assert_eq(lstat(p, &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "the link was replaced");
    snprintf(p, sizeof p, "%s/real.json", d);
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0600, "mode %o", st.st_mode & 07777);
    char *t = slurp(p);
    cr_assert(strstr(t, "traceEvents"), "%.80s", t);
    free(t);
    /* /dev/stdout redirected to a file: the plan goes where the report
     * goes, before it, and /dev/stdout stays a link */
    cr_assert_eq(sh_run("\"$SLUICE\" " SIM " --out /dev/stdout >%s/so.txt "
                        "&& test -L /dev/stdout && head -2 %s/so.txt | grep -q "
                        "sluice_plan && grep -q 'sluice sim: gpt-tiny' "
                        "%s/so.txt && rm %s/so.txt", d, d, d, d), 0);
    DIR *dd = opendir(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dd))) n += de->d_name[0] != '.';
    closedir(dd);
    cr_assert_eq(n, 3, "temporaries left in %s", d);
    test_rm_rf(d);
}

/* Inputs that are not regular files: refused at once, never read for
 * ever (a /dev/zero model was read until memory ran out). */
Test(cli_io, inputs_that_are_not_files)
{
    const char *cmds[] = {
        "sim --plan /dev/zero",
        "sim --hw rtx2080ti x2 --model /dev/zero --schedule 1f1b --pp 2 "
        "--mbs 1 --microbatches 2",
        "sim --hw /dev/zero --model gpt-tiny --schedule 1f1b --pp 2 --mbs 1 "
        "--microbatches 2",
        "plan --hw rtx2080ti x2 --model /dev/zero",
        "plan --hw /dev/stdin --model gpt-tiny",
        "profile show /dev/zero",
        "profile validate /dev/zero",
        "validate /dev/zero",
        "sim --plan tests",
    };
    char *d = test_tmpdir();
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        /* bounded: a regression reads for ever (timeout's exit is 124) */
        int rc = sh_run("timeout 20 \"$SLUICE\" %s </dev/null >/dev/null "
                        "2>%s/err", cmds[i], d);
        cr_assert_eq(rc, 2, "%s: exit %d", cmds[i], rc);
        cr_assert_eq(sh_run("grep -q 'not a regular file' %s/err", d), 0,
                     "%s: no message", cmds[i]);
    }
    test_rm_rf(d);
}

/* A prefix holding quotes, a backquote command and a newline draws files
 * of exactly that name, and runs nothing; so does one starting with '<'
 * (a data file gnuplot would read from a command). */
/* An output whose name its folder's file system cannot take (with the
 * temporary's ending, and a plot prefix's files' endings) is refused
 * before any work, naming the flag, not after the run as a failed
 * write (exit 1). */
Test(cli_io, an_output_name_too_long_is_refused_first)
{
    char *d = test_tmpdir(), name[400];
    memset(name, 'a', 240);
    name[240] = 0;
    cli_expect(2, "--out: a file name of 245 bytes", SIM " --out %s/%s.json",
               d, name);
    cli_expect(2, "--plot: a file name of 240 bytes", SIM " --plot %s/%s", d,
               name);
    name[200] = 0;      /* room for the endings */
    cli_expect(0, "", SIM " --out %s/%s.json", d, name);
    test_rm_rf(d);
}

Test(cli_io, plot_prefix_is_a_name_not_a_command)
{
    if (!have_gnuplot()) {
        cli_result r = cli_run(SIM " --plot /tmp/sluice-no-gnuplot");
        cr_assert(strstr(r.err, "gnuplot not found"), "%s", r.err);
        cli_result_free(&r);
        return;
    }
    /* run in d: the names are relative to it */
    char *d = test_tmpdir(), inj[600], p[1200];
    snprintf(inj, sizeof inj, "%s/INJECTED", d);
    const char *prefix = "a'b\"c`touch INJECTED`\nd'; system('touch "
                         "INJECTED'); '";
    const char *args[] = {"sim", "--hw", "rtx2080ti", "x4", "--model",
                          "gpt-tiny", "--schedule", "1f1b", "--pp", "4",
                          "--mbs", "1", "--microbatches", "4", "--plot",
                          prefix, NULL};
    cli_result r = cli_runv(d, args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    cr_assert_neq(access(inj, F_OK), 0, "the prefix ran a command");
    const char *sfx[] = {"-timeline.png", "-timeline.svg", "-memory.png",
                         "-memory.svg", ".gp"};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s%s", d, prefix, sfx[i]);
        struct stat st;
        cr_assert_eq(stat(p, &st), 0, "%s missing", sfx[i]);
        cr_assert_gt(st.st_size, 0);
    }
    /* the capacity plot too */
    const char *cap[] = {"plan", "--hw", "rtx2080ti", "--gpus", "1,2",
                         "--model", "gpt-tiny", "--no-progress", "--plot",
                         prefix, NULL};
    r = cli_runv(d, cap);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    cr_assert_neq(access(inj, F_OK), 0, "the prefix ran a command");
    snprintf(p, sizeof p, "%s/%s-capacity.svg", d, prefix);
    cr_assert_eq(access(p, F_OK), 0);
    /* '<' first, relative to the folder the command runs in */
    const char *lt[] = {"sim", "--hw", "rtx2080ti", "x4", "--model",
                        "gpt-tiny", "--schedule", "1f1b", "--pp", "4",
                        "--mbs", "1", "--microbatches", "4", "--plot",
                        "<touch INJECTED2;", NULL};
    r = cli_runv(d, lt);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    snprintf(p, sizeof p, "%s/INJECTED2", d);
    cr_assert_neq(access(p, F_OK), 0, "the data file name ran a command");
    snprintf(p, sizeof p, "%s/<touch INJECTED2;-timeline.png", d);
    cr_assert_eq(access(p, F_OK), 0);
    test_rm_rf(d);
}

/* gnuplot that exits 0 without drawing, or draws empty images (a full
 * disk), or fails: exit 1 with the reason, the images there before are
 * kept, and no temporary is left. A stand-in gnuplot on PATH plays each. */
Test(cli_io, plots_only_replace_whole_images)
{
    char *d = test_tmpdir(), p[600];
    struct { const char *body, *want; } c[] = {
        {"exit 0", "did not draw"},
        {"t=${2#sluice_tmp=\\'}; t=${t%%\\'}; for f in timeline memory; do "
         "for x in png svg; do : > \"$D/p-$f.$x$t\"; done; done; exit 0",
         "is empty (a full disk?): the old image is kept"},
        {"t=${2#sluice_tmp=\\'}; t=${t%%\\'}; for f in timeline memory; do "
         "for x in png svg; do printf x > \"$D/p-$f.$x$t\"; done; done; "
         "exit 0", "is cut short"},
        {"exit 3", "failed with exit code 3"},
    };
    cr_assert_eq(sh_run("mkdir %s/bin && cd %s && for f in timeline memory; "
                        "do for x in png svg; do echo old > p-$f.$x; done; "
                        "done", d, d), 0);
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        snprintf(p, sizeof p, "%s/bin/gnuplot", d);
        FILE *f = fopen(p, "w");
        cr_assert_not_null(f);
        fprintf(f, "#!/bin/sh\nD='%s'\n%s\n", d, c[i].body);
        fclose(f);
        cr_assert_eq(chmod(p, 0755), 0);
        int rc = sh_run("PATH=%s/bin:$PATH \"$SLUICE\" " SIM " --plot %s/p "
                        ">/dev/null 2>%s/err", d, d, d);
        cr_assert_eq(rc, 1, "case %zu: exit %d", i, rc);
        snprintf(p, sizeof p, "%s/err", d);
        char *err = slurp(p);
        cr_assert(strstr(err, c[i].want), "case %zu: expected '%s' in: %s", i,
                  c[i].want, err);
        free(err);
        cr_assert_eq(sh_run("cd %s && for f in timeline memory; do for x in "
                            "png svg; do grep -qx old p-$f.$x || exit 1; "
                            "done; done", d), 0, "case %zu: an old image "
                            "changed", i);
        cr_assert_eq(sh_run("ls %s | grep -q sluice-tmp", d), 1,
                     "case %zu: a temporary was left", i);
    }
    test_rm_rf(d);
}

/* validate: a bad cell is named by file, line and column; a table with a
 * catalog model, fixed knobs and iterations in seconds is predicted; a
 * fine-tuning mode per row, and a measured peak compared. */
Test(cli_io, validate_rows_and_knobs)
{
    char *dir = test_tmpdir();
    char bad[512], good[512];
    snprintf(bad, sizeof bad, "%s/bad.csv", dir);
    snprintf(good, sizeof good, "%s/good.csv", dir);
    FILE *f = fopen(bad, "w");
    cr_assert_not_null(f);
    fputs("# sluice: gpu=a100-sxm-80gb\n"
          "model,tensor_parallel,pipeline_parallel,gpus,batch,recompute,iteration_s\n"
          "gpt2,1,1,1,8,sometimes,0.5\n", f);
    fclose(f);
    cli_expect(2, "bad.csv:3: column 'recompute': 'sometimes' is not none, "
               "selective or full", "validate %s", bad);
    f = fopen(bad, "w");
    fputs("# sluice: gpu=a100-sxm-80gb\n"
          "model,tensor_parallel,pipeline_parallel,gpus,batch\n", f);
    fclose(f);
    cli_expect(2, "bad.csv:2: the header has no measurement column", "validate %s",
               bad);
    /* comments only: no header names the columns */
    f = fopen(bad, "w");
    fputs("# sluice: gpu=a100-sxm-80gb\n", f);
    fclose(f);
    cli_expect(2, "no header line names the columns", "validate %s", bad);
    f = fopen(bad, "w");
    fputs("# sluice: gpu=a100-sxm-80gb\n"
          "heads,hidden,layers,tensor_parallel,pipeline_parallel,gpus,batch,tokens_per_s_per_gpu\n"
          "12,768,12,2,1,3,8,1000\n", f);
    fclose(f);
    cli_expect(2, "bad.csv:3: column 'gpus': 3 is not a multiple", "validate %s", bad);
    f = fopen(good, "w");
    fputs("# sluice: gpu=a100-sxm-80gb seq=1024\n"
          "model,tensor_parallel,pipeline_parallel,gpus,batch,microbatch,recompute,iteration_s\n"
          "gpt2,1,1,1,8,8,selective,0.1\n", f);
    fclose(f);
    cli_result r = cli_run("validate --json %s", good);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\"measure\": \"iteration_s\"") != NULL, "%s", r.out);
    cr_expect(strstr(r.out, "\"knobs\": \"sel\"") != NULL, "%s", r.out);
    cli_result_free(&r);
    /* what trains (finetune) and the measured peak memory: LoRA plans
     * for less memory than full training, and the peak is compared */
    f = fopen(good, "w");
    fputs("# sluice: gpu=a100-sxm-80gb seq=1024\n"
          "model,tensor_parallel,pipeline_parallel,gpus,batch,microbatch,"
          "finetune,peak_mem_gib,iteration_s\n"
          "gpt2,1,1,1,8,8,full,10,0.1\n"
          "gpt2,1,1,1,8,8,lora:8,10,0.1\n", f);
    fclose(f);
    json_t *j = cli_json("validate --json %s", good);
    json_t *rows = json_object_get(j, "rows");
    cr_assert_eq(json_array_size(rows), 2);
    double full = json_number_value(json_object_get(
        json_array_get(rows, 0), "predicted_peak_mem_gib"));
    double lora = json_number_value(json_object_get(
        json_array_get(rows, 1), "predicted_peak_mem_gib"));
    cr_expect(full > 0 && lora > 0 && lora < full,
              "LoRA's peak %.3f GiB, full training's %.3f", lora, full);
    json_decref(j);
    cli_expect(0, "peak memory per GPU, measured and predicted", "validate %s",
               good);
    f = fopen(bad, "w");
    fputs("# sluice: gpu=a100-sxm-80gb\n"
          "model,tensor_parallel,pipeline_parallel,gpus,batch,finetune,"
          "iteration_s\n"
          "gpt2,1,1,1,8,lora:zero,0.5\n", f);
    fclose(f);
    cli_expect(2, "bad.csv:3: column 'finetune'", "validate %s", bad);
    test_rm_rf(dir);
}

/* validate: what a table cannot say is refused naming file, line and
 * column (fuzzed tables divided by a zero head count, cast 1e30 to an
 * int, and aborted on a GPU name JSON cannot hold); blank lines count. */
/* Writes text (printf-style) to path. */
static void put(const char *path, const char *fmt, ...)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

Test(cli_io, validate_cells_that_cannot_be)
{
    char *dir = test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/t.csv", dir);
    const char *hdr = "heads,hidden,layers,tensor_parallel,pipeline_parallel,"
                      "gpus,batch,tflops_per_gpu";
    const char *cases[][3] = {
        {"gpu=a100-sxm-80gb", "0.5,64,2,1,1,1,8,1",
         "t.csv:3: column 'heads': '0.5' is not a whole number"},
        {"gpu=a100-sxm-80gb", "1,1e30,2,1,1,1,8,1",
         "t.csv:3: column 'hidden': '1e30' is not a whole number"},
        {"gpu=a100-sxm-80gb", "1,64,2,1.5,2,3,8,1",
         "t.csv:3: column 'tensor_parallel': '1.5' is not a whole number"},
        {"gpu=a100-sxm-80gb dtype=bogus", "1,64,2,1,1,1,8,1",
         "t.csv:1: '# sluice:' line: dtype='bogus': expected fp32, tf32, "
         "fp16 or bf16"},
        {"gpu=a100-sxm-80gb vocab=-5", "1,64,2,1,1,1,8,1",
         "t.csv:1: '# sluice:' line: vocab='-5': expected a whole number"},
        {"gpu=a100-sxm-80gb grad_bucket=lots", "1,64,2,1,1,1,8,1",
         "t.csv:1: '# sluice:' line: grad_bucket='lots': expected a size "
         "from 1K to 1T (25M), 0 or stage"},
        {"gpu=\xff\xfe", "1,64,2,1,1,1,8,1",
         "t.csv:1: '# sluice:' line: gpu= is not UTF-8 text"},
        /* an unknown GPU: the line's setting, once, not each row's --hw */
        {"gpu=a100", "1,64,2,1,1,1,8,1",
         "t.csv:1: '# sluice:' line: gpu=: unknown GPU type 'a100' (did you "
         "mean one of 'a100-sxm-40gb'"},
        {"gpu=a100-sxm-80gb", "1,64,2,1,1,1,8,1,9,9,9,9,9,9,9,9,9,9,9,9,9,9,"
         "9,9,9,9,9,9,9,9,9,9,9", "t.csv:3: more than 32 columns"},
        /* a stray comma would shift the cells after it */
        {"gpu=a100-sxm-80gb", "1,64,2,1,1,1,8,1,",
         "t.csv:3: 9 cells where the header names 8 columns"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        put(path, "# sluice: %s\n%s\n%s\n", cases[i][0], hdr, cases[i][1]);
        cli_expect(2, cases[i][2], "validate --json %s", path);
    }
    /* how a row's framework all-reduced its gradients */
    put(path, "# sluice: gpu=a100-sxm-80gb\n%s,grad_bucket\n"
        "1,64,2,1,1,2,8,1,25M\n1,64,2,1,1,2,8,1,stage\n"
        "1,64,2,1,1,2,8,1,2T\n", hdr);
    cli_expect(2, "t.csv:5: column 'grad_bucket': '2T' is not a size from "
               "1K to 1T (25M), 0 or stage", "validate --json %s", path);
    /* a NUL byte does not end the table quietly */
    FILE *z = fopen(path, "wb");
    cr_assert_not_null(z);
    fprintf(z, "# sluice: gpu=a100-sxm-80gb\n%s\n", hdr);
    fputc(0, z);
    fputs("1,64,2,1,1,1,8,1\n", z);
    fclose(z);
    cli_expect(2, "t.csv:3: a NUL byte", "validate %s", path);
    /* blank lines (and a spreadsheet's rows of commas) are lines: the
     * error names the file's fifth */
    put(path, "# sluice: gpu=a100-sxm-80gb\n\n%s\n,,,\n1,64,2,1,1,1,8,x\n",
        hdr);
    cli_expect(2, "t.csv:5: column 'tflops_per_gpu'", "validate %s", path);
    /* a line longer than the parser reads is refused, not cut */
    put(path, "# sluice: gpu=a100-sxm-80gb\n%s\n1,64,2,1,1,1,8,1%01100d\n",
        hdr, 0);
    cli_expect(2, "t.csv:3: a line of", "validate %s", path);
    /* an empty knob cell is one not given; sequence parallelism needs a
     * tensor-parallel group */
    put(path, "# sluice: gpu=a100-sxm-80gb seq=1024\nmodel,tensor_parallel,"
        "pipeline_parallel,gpus,batch,microbatch,sequence_parallel,"
        "iteration_s\ngpt2,1,1,1,8,,,0.1\n");
    cli_expect(0, "gpt2", "validate %s", path);
    put(path, "# sluice: gpu=a100-sxm-80gb seq=1024\nmodel,tensor_parallel,"
        "pipeline_parallel,gpus,batch,sequence_parallel,iteration_s\n"
        "gpt2,1,1,1,8,1,0.1\n");
    cli_expect(2, "t.csv:3: column 'sequence_parallel': 1 needs "
               "tensor_parallel above 1", "validate %s", path);
    /* a model the zoo does not have, and a microbatch that does not
     * divide its row's batch: the table's errors, not rows left out of
     * the mean with an exit of 0 (nor with no reason given) */
    put(path, "# sluice: gpu=a100-sxm-80gb seq=1024\nmodel,tensor_parallel,"
        "pipeline_parallel,gpus,batch,microbatch,iteration_s\n"
        "gpt2,1,1,1,8,2,0.1\nnosuch,1,1,1,8,2,0.1\n");
    cli_expect(2, "t.csv:4: column 'model': unknown model 'nosuch'",
               "validate %s", path);
    put(path, "# sluice: gpu=a100-sxm-80gb seq=1024\nmodel,tensor_parallel,"
        "pipeline_parallel,gpus,batch,microbatch,iteration_s\n"
        "gpt2,1,1,2,8,3,0.1\n");
    cli_expect(2, "t.csv:3: batch 8 cannot be split into microbatches of 3",
               "validate %s", path);
    test_rm_rf(dir);
}

/* validate: a row's own schedule and chunks (its run's configuration),
 * an empty cell before a given one, and the cells that cannot be. */
Test(cli_io, validate_row_schedule_and_chunks)
{
    char *dir = test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/t.csv", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("# sluice: gpu=a100-sxm-80gb schedule=interleaved seq=1024\n"
          "model,tensor_parallel,pipeline_parallel,gpus,batch,microbatch,"
          "schedule,chunks,iteration_s\n"
          "gpt2,1,2,2,16,1,,2,0.1\n"
          "gpt2,1,2,2,16,1,interleaved,3,0.1\n"
          "gpt2,1,2,2,16,1,1f1b,,0.1\n", f);
    fclose(f);
    json_t *j = cli_json("validate --json %s", path);
    json_t *rows = json_object_get(j, "rows");
    cr_assert_eq(json_array_size(rows), 3);
    double p[3];
    for (int i = 0; i < 3; i++)
        p[i] = json_number_value(json_object_get(json_array_get(rows, i),
                                                 "predicted"));
    cr_expect(p[0] > 0 && p[1] > 0 && p[2] > 0 && p[0] != p[1] &&
              p[0] != p[2], "2 chunks %.4f s, 3 chunks %.4f s, 1F1B %.4f s",
              p[0], p[1], p[2]);
    /* a schedule other than the table's is said beside the knobs */
    cr_expect(strstr(json_string_value(json_object_get(
                  json_array_get(rows, 2), "knobs")), "1f1b") != NULL);
    json_decref(j);
    const char *bad[][2] = {
        {"gpt2,1,1,1,8,1,,2,0.1", "t.csv:3: column 'chunks': 2 chunks per "
         "device, but the row runs no pipeline"},
        {"gpt2,1,2,2,16,1,gpipe,2,0.1", "t.csv:3: column 'chunks': 2 chunks "
         "per device, but the row runs gpipe"},
        {"gpt2,1,2,2,16,1,zigzag,,0.1", "t.csv:3: column 'schedule': 'zigzag' "
         "is not a schedule the planner searches"},
        {"gpt2,1,2,2,16,1,,many,0.1", "t.csv:3: column 'chunks': 'many' is "
         "not a count of chunks per device"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "# sluice: gpu=a100-sxm-80gb schedule=interleaved\n"
                "model,tensor_parallel,pipeline_parallel,gpus,batch,"
                "microbatch,schedule,chunks,iteration_s\n%s\n", bad[i][0]);
        fclose(f);
        cli_expect(2, bad[i][1], "validate %s", path);
    }
    test_rm_rf(dir);
}

/* A plan or a workload given to `profile validate` is named for what it
 * is, and the command that reads it (it read as a profile with an
 * unknown field) */
Test(cli_io, validate_names_plans_and_workloads)
{
    cli_expect(2, "tests/bad/plan/dp.json:1:17: field 'sluice_plan': a plan, "
               "not a profile: `sluice sim --plan tests/bad/plan/dp.json`",
               "profile validate tests/bad/plan/dp.json");
    cli_expect(2, "field 'jobs': a workload, not a profile: `sluice plan "
               "--hw ... --workload tests/data/workload/tiny.json`",
               "profile validate tests/data/workload/tiny.json");
}

/* `profile validate` takes files only: an option is refused before any
 * file is checked (--json was reported "cannot open" after the files
 * before it had been called valid, --help was opened as a file) */
Test(cli_io, validate_refuses_options)
{
    cli_result r = cli_run("profile validate profiles/hw/example-desktop.json "
                           "--json");
    cr_expect_eq(r.code, 2);
    cr_expect_str_eq(r.out, "");
    cr_expect(strstr(r.err, "validate: unknown option '--json'"), "%s",
              r.err);
    cli_result_free(&r);
    cli_expect(0, "usage: sluice profile", "profile validate --help");
}

/* In a sticky folder (/tmp) only a file's owner may replace it: another
 * user's file named as an output is refused before any work, naming the
 * flag, where the rename at the end failed after the whole run (a
 * training run's checkpoint lost). Needs a second user: as root, the
 * binary runs as nobody (skipped where it cannot). */
Test(cli_io, another_users_file_in_a_sticky_folder_is_refused_first)
{
#define NOBODY "setpriv --reuid=65534 --regid=65534 --clear-groups "
    if (geteuid() != 0 ||
        sh_run(NOBODY "\"$SLUICE\" --version > /dev/null 2>&1"))
        cr_skip_test("needs root, setpriv and a binary nobody may run");
    char *d = test_tmpdir();
    cr_assert_eq(sh_run("chmod 1777 %s && echo keep > %s/f.json", d, d), 0);
    int rc = sh_run(NOBODY "\"$SLUICE\" " SIM " --out %s/f.json > %s/out "
                    "2> %s/err", d, d, d);
    cr_expect_eq(rc, 2, "exit %d", rc);
    cr_expect_eq(sh_run("grep -q \"^sluice sim: --out '%s/f.json': the file "
                        "is another user's in sticky folder\" %s/err", d, d),
                 0, "the refusal names the flag and says why");
    cr_expect_eq(sh_run("grep -qx keep %s/f.json", d), 0, "the file kept");
    /* nobody's own file there is replaced as before */
    cr_expect_eq(sh_run(NOBODY "\"$SLUICE\" " SIM " --out %s/g.json > "
                        "/dev/null 2>&1 && " NOBODY "\"$SLUICE\" " SIM
                        " --out %s/g.json > /dev/null 2>&1", d, d), 0);
#undef NOBODY
    test_rm_rf(d);
}
