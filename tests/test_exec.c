/* sluice exec (the reference trainer) end to end: the loss falls, resume is
 * bit for bit, checkpoints and corpora that are wrong fail with one clear
 * message and exit 2, a failed save leaves the user's file alone, and the
 * per-op timing JSON carries the cost model's signature. Small batches and
 * few steps: the suite also runs under ASan. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/harness.h"

#define SMALL "--model gpt-tiny --batch 2 --seq 16 --threads 1 --eval-batches 1"

/* The losses printed on "step N/M | loss X" lines, in order. */
static int losses(const char *out, double *v, int max)
{
    int n = 0;
    const char *p = out;
    while (n < max && (p = strstr(p, "| loss ")) != NULL) {
        v[n++] = strtod(p + 7, NULL);
        p += 7;
    }
    return n;
}

/* The "step N/M | loss X" lines from step `from` on, as text. */
static char *step_lines(const char *out, int from)
{
    char *res = calloc(1, strlen(out) + 1);
    for (const char *p = out; *p;) {
        const char *eol = strchr(p, '\n');
        if (!eol) break;
        int s = atoi(p + 5);
        const char *loss = strstr(p, "| loss ");
        if (!strncmp(p, "step ", 5) && loss && loss < eol && s >= from) {
            /* up to the timing columns, which differ run to run */
            const char *ms = strstr(p, "| norm");
            const char *end = ms && ms < eol ? ms : eol;
            strncat(res, p, (size_t)(end - p));
            strcat(res, "\n");
        }
        p = eol + 1;
    }
    return res;
}

static int files_equal(const char *a, const char *b)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
    return system(cmd) == 0;
}

Test(exec_cli, loss_falls_below_start)
{
    cli_result r = cli_run("exec --model gpt-tiny --batch 4 --seq 32 "
                           "--steps 10 --lr 3e-3 --eval-batches 1 --seed 3");
    cr_assert_eq(r.code, 0, "%s", r.err);
    double v[16];
    int n = losses(r.out, v, 16);
    cr_assert_eq(n, 10, "%s", r.out);
    /* ln 256 = 5.545 at the start (uniform over bytes); ten steps of AdamW
     * learn at least the byte frequencies. */
    cr_assert(v[0] > 5.3 && v[0] < 5.8, "first loss %g", v[0]);
    cr_assert(v[9] < v[0] - 1.0, "loss %g -> %g", v[0], v[9]);
    cr_assert(strstr(r.out, "unigram entropy"), "%s", r.out);
    cr_assert(strstr(r.out, "tokens/s"), "%s", r.out);
    cli_result_free(&r);
}

/* Run A trains 6 steps; run B stops after 3 (same schedule) and saves;
 * run C resumes B to 6. C's steps 4-6 and final checkpoint equal A's. */
static void resume_check(int threads)
{
    char *d = test_tmpdir();
#define RUN_ARGS "--model gpt-tiny --batch 2 --seq 16 --eval-batches 1 "     \
                 "--threads %d"
    cli_result a = cli_run("exec " RUN_ARGS " --steps 6 --save %s/a.ck",
                           threads, d);
    cr_assert_eq(a.code, 0, "%s", a.err);
    cli_result b = cli_run("exec " RUN_ARGS " --steps 6 --stop-after 3 "
                           "--save %s/b.ck", threads, d);
    cr_assert_eq(b.code, 0, "%s", b.err);
    /* --batch/--seq come from the checkpoint. */
    cli_result c = cli_run("exec --model gpt-tiny --threads %d "
                           "--eval-batches 1 --steps 6 --resume %s/b.ck "
                           "--save %s/c.ck",
                           threads, d, d);
#undef RUN_ARGS
    cr_assert_eq(c.code, 0, "%s", c.err);
    cr_assert(strstr(c.out, "resumed from"), "%s", c.out);
    char *la = step_lines(a.out, 4), *lc = step_lines(c.out, 4);
    cr_assert(strlen(la) > 0);
    cr_assert_str_eq(la, lc);
    char pa[512], pc[512];
    snprintf(pa, sizeof pa, "%s/a.ck", d);
    snprintf(pc, sizeof pc, "%s/c.ck", d);
    cr_assert(files_equal(pa, pc), "checkpoints after 6 steps differ");
    free(la);
    free(lc);
    cli_result_free(&a);
    cli_result_free(&b);
    cli_result_free(&c);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
    free(d);
}

Test(exec_cli, resume_is_bit_for_bit) { resume_check(1); }

Test(exec_cli, resume_is_bit_for_bit_two_threads) { resume_check(2); }

Test(exec_cli, bad_checkpoints_exit_2)
{
    char *d = test_tmpdir();
    cli_result a = cli_run("exec " SMALL " --steps 1 --save %s/t.ck", d);
    cr_assert_eq(a.code, 0, "%s", a.err);
    /* another model */
    cli_result b = cli_run("exec --model gpt-mini --steps 2 --resume %s/t.ck",
                           d);
    cr_assert_eq(b.code, 2);
    cr_assert(strstr(b.err, "another model") && strstr(b.err, "hidden 128"),
              "%s", b.err);
    /* truncated */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "head -c 5000 %s/t.ck > %s/short.ck", d, d);
    cr_assert_eq(system(cmd), 0);
    cli_result c = cli_run("exec " SMALL " --steps 2 --resume %s/short.ck", d);
    cr_assert_eq(c.code, 2);
    cr_assert(strstr(c.err, "truncated"), "%s", c.err);
    /* one flipped byte */
    snprintf(cmd, sizeof cmd,
             "cp %s/t.ck %s/bad.ck && printf 'X' | dd of=%s/bad.ck bs=1 "
             "seek=9000 conv=notrunc 2>/dev/null",
             d, d, d);
    cr_assert_eq(system(cmd), 0);
    cli_result f = cli_run("exec " SMALL " --steps 2 --resume %s/bad.ck", d);
    cr_assert_eq(f.code, 2);
    cr_assert(strstr(f.err, "checksum"), "%s", f.err);
    /* not a checkpoint, missing file */
    cli_result g = cli_run("exec " SMALL " --steps 2 --resume "
                           "/usr/share/common-licenses/GPL-3");
    cr_assert_eq(g.code, 2);
    cr_assert(strstr(g.err, "not a sluice checkpoint"), "%s", g.err);
    cli_result h = cli_run("exec " SMALL " --steps 2 --resume %s/none.ck", d);
    cr_assert_eq(h.code, 2);
    cr_assert(strstr(h.err, "none.ck"), "%s", h.err);
    cli_result_free(&a); cli_result_free(&b); cli_result_free(&c);
    cli_result_free(&f); cli_result_free(&g); cli_result_free(&h);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
    free(d);
}

Test(exec_cli, failed_save_keeps_the_old_file)
{
    char *d = test_tmpdir();
    cli_result a = cli_run("exec " SMALL " --steps 1 --save %s/k.ck", d);
    cr_assert_eq(a.code, 0, "%s", a.err);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp %s/k.ck %s/orig.ck", d, d);
    cr_assert_eq(system(cmd), 0);
    /* A file-size limit below the checkpoint's size makes the write fail
     * part way (EFBIG; SIGXFSZ ignored), as a full disk would. */
    const char *bin = getenv("SLUICE_BIN");
    snprintf(cmd, sizeof cmd,
             "sh -c 'trap \"\" XFSZ; ulimit -f 1000; exec %s exec " SMALL
             " --steps 2 --seed 9 --save %s/k.ck' >%s/out 2>%s/err",
             bin ? bin : "bin/sluice", d, d, d);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/k.ck", d);
    snprintf(p2, sizeof p2, "%s/orig.ck", d);
    cr_assert(files_equal(p1, p2), "the old checkpoint was changed");
    snprintf(cmd, sizeof cmd, "grep -q 'checkpoint not saved' %s/err", d);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp >/dev/null", d);
    cr_assert_neq(system(cmd), 0, "a temporary file was left behind");
    cli_result_free(&a);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
    free(d);
}

/* --steps 0 is the reference trainer's evaluation alone (a plan refuses
 * it): not a resumed run with no step left. */
Test(exec_cli, steps_0_evaluates)
{
    cli_result r = cli_run("exec --model gpt-tiny --batch 4 --seq 32 "
                           "--steps 0 --eval-batches 1");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "validation loss"), "%s", r.out);
    cr_assert(!strstr(r.err, "done already"), "%s", r.err);
    cli_result_free(&r);
}

Test(exec_cli, bad_input_exit_2)
{
    cli_expect(2, "--mem-budget '4096': expected a size with its unit",
               "exec --model gpt-tiny --mem-budget 4096 --steps 1");
    cli_result r = cli_run("exec --model gpt-tiny --mem-budget 1M --steps 1");
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "needs") && strstr(r.err, "MiB") &&
                  strstr(r.err, "--mem-budget"),
              "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec " SMALL " --steps 1 --data /nonexistent/corpus.txt");
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "/nonexistent/corpus.txt"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec " SMALL " --steps 1 --data /dev/null");
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "not a regular file"), "%s", r.err);
    cli_result_free(&r);
    char *d = test_tmpdir(), cmd[600];
    snprintf(cmd, sizeof cmd, ": > %s/empty.txt", d);
    cr_assert_eq(system(cmd), 0);
    r = cli_run("exec " SMALL " --steps 1 --data %s/empty.txt", d);
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "empty"), "%s", r.err);
    cli_result_free(&r);
    snprintf(cmd, sizeof cmd, "head -c 5000 /usr/share/common-licenses/GPL-3 "
             "> %s/short.txt", d);
    cr_assert_eq(system(cmd), 0);
    r = cli_run("exec " SMALL " --steps 1 --data %s/short.txt", d);
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "too short") && strstr(r.err, "10240"), "%s",
              r.err);
    cli_result_free(&r);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
    free(d);
    r = cli_run("exec --model gpt-tiny --stpes 3");
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "--steps"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --steps 3");
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "--model"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --model gpt-tiny --seq 65 --steps 1");
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "position"), "%s", r.err);
    cli_result_free(&r);
}

Test(exec_cli, timings_json_has_cost_model_signature)
{
    char *d = test_tmpdir();
    cli_result r = cli_run("exec " SMALL " --steps 2 --timings %s/t.json", d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    char p[512];
    snprintf(p, sizeof p, "%s/t.json", d);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    json_t *ops = json_object_get(root, "ops");
    cr_assert(json_array_size(ops) > 10);
    int found_qkv = 0, found_w = 0, kinds = 0;
    size_t i;
    json_t *o;
    json_array_foreach(ops, i, o) {
        const char *op = json_string_value(json_object_get(o, "op"));
        json_t *g = json_object_get(o, "gemm");
        cr_assert(json_integer_value(json_object_get(o, "ns_total")) > 0);
        cr_assert(json_integer_value(json_object_get(o, "calls")) > 0);
        if (!strcmp(op, "linear_forward") &&
            json_integer_value(json_object_get(g, "m")) == 2 * 16 &&
            json_integer_value(json_object_get(g, "n")) == 3 * 128 &&
            json_integer_value(json_object_get(g, "k")) == 128) {
            found_qkv = 1;
            /* one call per layer per step */
            cr_assert_eq(json_integer_value(json_object_get(o, "calls")), 8);
        }
        if (!strcmp(op, "linear_backward_weight") &&
            json_integer_value(json_object_get(g, "k")) == 2 * 16)
            found_w = 1;
        if (!strcmp(op, "layernorm_forward")) {
            kinds++;
            cr_assert(json_real_value(json_object_get(o, "bytes")) > 0);
            cr_assert_str_eq(json_string_value(json_object_get(o, "kind")),
                             "norm");
        }
        if (!strcmp(op, "linear_forward") &&
            json_integer_value(json_object_get(g, "n")) == 256)
            cr_assert_str_eq(json_string_value(json_object_get(o, "kind")),
                             "lm_head");
    }
    cr_assert(found_qkv && found_w && kinds > 0);
    json_decref(root);
    cli_result_free(&r);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
    free(d);
}

Test(exec_cli, model_files_and_unsupported_models)
{
    char *d = test_tmpdir(), p[512];
    snprintf(p, sizeof p, "%s/micro.json", d);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("{\"name\": \"gpt-micro\", \"family\": \"gpt\", \"hidden\": 32, "
          "\"layers\": 2, \"heads\": 2, \"ffn\": 64, \"vocab\": 256, "
          "\"seq_len\": 16, \"max_pos\": 16, \"tied_embeddings\": false, "
          "\"bias\": false, \"dtype\": \"fp16\"}\n", f);
    fclose(f);
    cli_result r = cli_run("exec --model %s --batch 2 --steps 2 "
                           "--eval-batches 1", p);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert(strstr(r.out, "hidden 32, layers 2") &&
                  strstr(r.out, "computes in fp32"),
              "%s", r.out);
    cli_result_free(&r);
    /* an encoder-decoder trains as a plan, which says how */
    r = cli_run("exec --model t5-3b --steps 1");
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "T5") && strstr(r.err, "trains as a plan") &&
                  strstr(r.err, "sluice exec --plan"), "%s", r.err);
    cli_result_free(&r);
    /* and the commands it says run */
    char *dt = test_tmpdir();
    r = cli_run("plan --hw 'cpu x1' --model tests/data/exec/t5-tiny.json "
                "--out %s/P.json", dt);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --plan %s/P.json --steps 2", dt);
    cr_assert_eq(r.code, 0, "%s", r.err);
    test_rm_rf(dt);
    cli_result_free(&r);
    /* A model the zoo knows but memory cannot hold: says how much. */
    r = cli_run("exec --model gpt2-xl --steps 1 --mem-budget 16G");
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "needs") && strstr(r.err, "GiB"), "%s", r.err);
    cli_result_free(&r);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
    free(d);
}

Test(exec_cli, json_output)
{
    cli_result r = cli_run("exec " SMALL " --steps 3 --json");
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    cr_assert_not_null(j, "%s\n%s", je.text, r.out);
    json_t *steps = json_object_get(j, "steps");
    cr_assert_eq(json_array_size(steps), 3);
    json_t *s0 = json_array_get(steps, 0);
    cr_assert(json_real_value(json_object_get(s0, "loss")) > 5.0);
    cr_assert(json_integer_value(json_object_get(s0, "ns")) > 0);
    cr_assert(json_real_value(json_object_get(j, "tokens_per_s")) > 0);
    cr_assert(json_integer_value(json_object_get(
                  json_object_get(j, "kernel_ns"), "linear")) > 0);
    cr_assert(json_real_value(json_object_get(
                  json_object_get(j, "corpus"), "unigram_entropy_nats")) > 2);
    json_decref(j);
    cli_result_free(&r);
}

/* Forty steps learn more than the byte frequencies: the held-out loss
 * falls below the unigram entropy of the text (what a model that knows
 * only byte frequencies scores). Seeded and single-threaded: the numbers
 * are the same on every run (2.95 against 3.18 nats when written). */
Test(exec_cli, beats_unigram_entropy, .timeout = 120)
{
    cli_result r = cli_run("exec --model gpt-tiny --batch 16 --seq 32 "
                           "--steps 40 --threads 1 --quiet --json");
    cr_assert_eq(r.code, 0, "%s", r.err);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    cr_assert_not_null(j, "%s", je.text);
    double h = json_real_value(json_object_get(json_object_get(j, "corpus"),
                                               "unigram_entropy_nats"));
    double v0 = json_real_value(json_object_get(j, "val_loss_start"));
    double v1 = json_real_value(json_object_get(j, "val_loss_end"));
    cr_assert(v0 > 5.3, "start %g", v0);
    cr_assert(v1 < h - 0.15, "validation loss %g, unigram entropy %g", v1, h);
    json_decref(j);
    cli_result_free(&r);
}

/* Ctrl-C stops after the current step and, with --save, writes the
 * checkpoint first; the run then resumes from it. */
Test(exec_cli, interrupt_saves_checkpoint, .timeout = 120)
{
    char *d = test_tmpdir(), cmd[2048];
    const char *bin = getenv("SLUICE_BIN");
    snprintf(cmd, sizeof cmd,
             "%s exec " SMALL " --steps 1000000 --quiet --save %s/i.ck "
             ">%s/out 2>%s/err & pid=$!; sleep 1.5; kill -INT $pid; "
             "wait $pid; exit $?",
             bin ? bin : "bin/sluice", d, d, d);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
    snprintf(cmd, sizeof cmd, "grep -q 'interrupted after step' %s/err", d);
    cr_assert_eq(system(cmd), 0);
    cli_result r = cli_run("exec --model gpt-tiny --threads 1 --eval-batches 1 "
                           "--steps 1000000 --stop-after 1 --resume %s/i.ck",
                           d);
    /* the checkpoint's steps read back: --stop-after below them leaves
     * nothing to run, said (exit 2, as a plan's run says it) */
    cr_assert_eq(r.code, 2, "%s", r.err);
    cr_assert(strstr(r.err, "--stop-after 1: ") &&
              strstr(r.err, " done already"), "%s", r.err);
    cli_result_free(&r);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
    free(d);
}
