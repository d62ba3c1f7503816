/* Checkpoints whose bytes are intact (the checksum matches) but whose
 * contents cannot be right: weights that are not finite, a negative second
 * moment, a step count no run reaches; and inputs that are not files. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "util/util.h"

#define SMALL "--model gpt-tiny --batch 2 --seq 16 --threads 1 --eval-batches 1"

/* The on-disk layout exec/checkpoint.c writes: a 184-byte header (format
 * version at 8, header bytes at 12, step at 64, parameter count at 72,
 * Llama's, OPT's, BERT's and T5's choices from 80, the run's options from
 * 148), 3 P floats, an FNV-1a checksum of all that. Version 1 ended its
 * header at 80, version 2 at 104, version 3 at 112, version 4 at 128,
 * version 5 at 152. */
enum { HDR = 184, HDR_V1 = 80, HDR_V2 = 104, HDR_V3 = 112, HDR_V4 = 128,
       HDR_V5 = 152, OFF_STEP = 64, OFF_NPARAMS = 72, OFF_RUN = 148 };

/* Copies src to dst with the float at index i of the body set to x, or
 * (i < 0) the step set to step; the checksum is made to match. */
static void tamper(const char *src, const char *dst, long i, float x,
                   int64_t step)
{
    char *buf;
    size_t len;
    util_err e;
    cr_assert_eq(util_read_file_max(src, 1 << 30, &buf, &len, &e), 0, "%s",
                 e.msg);
    uint64_t np;
    memcpy(&np, buf + OFF_NPARAMS, sizeof np);
    cr_assert_eq(len, HDR + 12 * np + 8, "layout changed: %zu bytes", len);
    if (i >= 0) memcpy(buf + HDR + 4 * (size_t)i, &x, sizeof x);
    else memcpy(buf + OFF_STEP, &step, sizeof step);
    test_ckpt_reseal(dst, buf, len);
}

/* A step's checkpoint saved in folder d as t.ck (ck), its bytes read
 * (*len of them); bad: where a test writes its edited copy. */
static char *saved(const char *d, char ck[512], char bad[512], size_t *len)
{
    cli_result a = cli_run("exec " SMALL " --steps 1 --save %s/t.ck", d);
    cr_assert_eq(a.code, 0, "%s", a.err);
    cli_result_free(&a);
    snprintf(ck, 512, "%s/t.ck", d);
    snprintf(bad, 512, "%s/bad.ck", d);
    char *buf;
    util_err e;
    cr_assert_eq(util_read_file_max(ck, 1 << 30, &buf, len, &e), 0);
    return buf;
}

Test(exec_ckpt, contents_that_cannot_be_right_exit_2)
{
    char *d = test_tmpdir(), ck[512], bad[512];
    size_t len;
    char *buf = saved(d, ck, bad, &len);
    uint64_t np;
    memcpy(&np, buf + OFF_NPARAMS, sizeof np);
    free(buf);
    struct {
        long at;
        float x;
        int64_t step;
        const char *want;
    } c[] = {
        {5, NAN, 0, "weight 5 of"},
        {7, INFINITY, 0, "weight 7 of"},
        {(long)np + 3, -INFINITY, 0, "AdamW first moment 3 of"},
        {2 * (long)np + 1, -1.0f, 0, "AdamW second moment 1 of"},
        {-1, 0, (int64_t)1 << 40, "implausible checkpoint: step 1099511627776"},
        {-1, 0, -5, "implausible checkpoint: step -5"},
    };
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        tamper(ck, bad, c[k].at, c[k].x, c[k].step);
        cli_result r = cli_run("exec " SMALL " --steps 3 --resume %s", bad);
        cr_assert_eq(r.code, 2, "%zu: exit %d: %s", k, r.code, r.err);
        cr_assert(strstr(r.err, c[k].want), "%zu: expected '%s' in: %s", k,
                  c[k].want, r.err);
        cli_result_free(&r);
    }
    /* the untouched checkpoint still resumes */
    cli_result r = cli_run("exec " SMALL " --steps 2 --resume %s", ck);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    /* with its own seed, given or not; another is refused (it was taken
     * by --plan runs, ignored by the reference trainer) */
    cli_expect(2, "--seed 5: the run", "exec " SMALL " --steps 2 --resume "
               "%s --seed 5", ck);
    cli_expect(0, "seed 1337", "exec " SMALL " --steps 2 --resume %s --seed "
               "1337", ck);
    /* nothing left to run is said, as a plan's run says it (it resumed
     * and ended without a step before) */
    cli_expect(2, "t.ck: 1 step is done already (--steps counts them", "exec "
               SMALL " --steps 1 --resume %s", ck);
    cli_expect(2, "--stop-after 1: 1 step is done already", "exec " SMALL
               " --steps 3 --stop-after 1 --resume %s", ck);
    test_rm_rf(d);
}

/* A header of this version whose size field is damaged is said to be
 * damaged: it read "format version 6, this sluice reads version 6". */
Test(exec_ckpt, a_damaged_header_size_is_called_corrupt)
{
    char *d = test_tmpdir(), ck[512], bad[512];
    size_t len;
    char *buf = saved(d, ck, bad, &len);
    uint32_t hb = 4242;
    memcpy(buf + 12, &hb, sizeof hb);
    test_ckpt_reseal(bad, buf, len);
    cli_expect(2, "bad.ck: corrupt checkpoint header: format version 6 with "
               "a header of 4242 bytes (version 6's has 184)", "exec " SMALL
               " --steps 2 --resume %s", bad);
    test_rm_rf(d);
}

Test(exec_ckpt, inputs_that_are_not_files_exit_2_at_once)
{
    const char *args[] = {"--resume /dev/zero", "--data /dev/zero",
                          "--resume /dev/stdin", "--data tests"};
    char *d = test_tmpdir();
    for (size_t k = 0; k < sizeof args / sizeof *args; k++) {
        /* bounded: a regression reads for ever (timeout's exit is 124) */
        int rc = sh_run("timeout 60 \"$SLUICE\" exec " SMALL " --steps 1 %s "
                        "</dev/null >/dev/null 2>%s/err", args[k], d);
        cr_assert_eq(rc, 2, "%s: exit %d", args[k], rc);
        cr_assert_eq(sh_run("grep -q 'not a regular file' %s/err", d), 0,
                     "%s: no message", args[k]);
    }
    test_rm_rf(d);
}

/* A --save whose folder cannot hold the checkpoint is refused before
 * the first step, by the reference trainer and by a plan's run, naming
 * what is missing; the folder is a 64 KiB file system of a private
 * mount namespace (skipped where this process may not make one). */
Test(exec_ckpt, a_save_without_room_is_refused_before_training)
{
    char *d = test_tmpdir();
    if (sh_run("mkdir %s/small && unshare -m sh -c 'mount -t tmpfs -o "
               "size=64k tmpfs %s/small' 2>/dev/null", d, d)) {
        test_rm_rf(d);
        cr_skip_test("no private mount namespace here (needs root)");
    }
    cli_result p = cli_run("sim --hw 'cpu x2' --model gpt-tiny --schedule "
                           "1f1b --pp 2 --mbs 1 --microbatches 2 --out "
                           "%s/p.json", d);
    cr_assert_eq(p.code, 0, "%s", p.err);
    cli_result_free(&p);
    const char *runs[] = {"exec " SMALL " --steps 3", "exec --plan %s/p.json "
                          "--steps 3"};
    for (int k = 0; k < 2; k++) {
        char run[256];
        snprintf(run, sizeof run, runs[k], d);
        int rc = sh_run("unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs "
                        "%s/small && \"$SLUICE\" %s --save %s/small/x.ck' "
                        ">%s/out 2>%s/err", d, run, d, d, d);
        cr_expect_eq(rc, 2, "%s: exit %d", run, rc);
        cr_expect_eq(sh_run("grep -q \"folder '.*small' has 64.00 KiB free, "
                            "the file needs .* MiB: free .* MiB there\" "
                            "%s/err", d), 0, "%s: no message", run);
        cr_expect_eq(sh_run("grep -q '^step' %s/out", d), 1,
                     "%s: trained before refusing", run);
    }
    test_rm_rf(d);
}

/* A checkpoint of model saved and resumed as that model; model other,
 * GPT-2's of the same sizes, refuses it naming what it holds (want). */
static void keeps_its_model(const char *d, const char *model,
                            const char *other, const char *want)
{
    const char *common = "--batch 2 --seq 16 --threads 1 --eval-batches 1";
    cli_result r = cli_run("exec --model %s %s --steps 1 --save %s/m.ck",
                           model, common, d);
    cr_assert_eq(r.code, 0, "%s: %s", model, r.err);
    cli_result_free(&r);
    r = cli_run("exec --model %s %s --steps 2 --resume %s/m.ck", model,
                common, d);
    cr_expect_eq(r.code, 0, "%s: %s", model, r.err);
    cli_result_free(&r);
    r = cli_run("exec --model %s %s --steps 2 --resume %s/m.ck", other,
                common, d);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "checkpoint of another model") &&
                  strstr(r.err, want), "%s", r.err);
    cli_result_free(&r);
}

/* Checkpoints of format versions 1 to 5 (written before Llama's
 * choices were kept, whose header ends at byte 80, before OPT's, at byte
 * 104, before BERT's, at 112, before T5's, at 128, and before the run's
 * options, at 152) still resume, as GPT-2's layout; one whose OPT fields make no model, or
 * whose RoPE flag disagrees with its base, is corrupt; a Llama or OPT checkpoint resumes as its model and is refused
 * by GPT's. */
Test(exec_ckpt, version_1_and_llama_checkpoints)
{
    char *d = test_tmpdir(), ck[512], old[512];
    cli_result a = cli_run("exec " SMALL " --steps 1 --save %s/t.ck", d);
    cr_assert_eq(a.code, 0, "%s", a.err);
    cli_result_free(&a);
    snprintf(ck, sizeof ck, "%s/t.ck", d);
    cli_result r;
    for (uint32_t ver = 1; ver <= 5; ver++) {
        snprintf(old, sizeof old, "%s/v%u.ck", d, ver);
        char *buf;
        size_t len;
        util_err e;
        cr_assert_eq(util_read_file_max(ck, 1 << 30, &buf, &len, &e), 0);
        uint32_t hb = ver == 1 ? HDR_V1 : ver == 2 ? HDR_V2
                    : ver == 3 ? HDR_V3 : ver == 4 ? HDR_V4 : HDR_V5;
        memcpy(buf + 8, &ver, 4);
        memcpy(buf + 12, &hb, 4);
        /* version 5's padding after T5's fields is zeros */
        if (ver == 5) memset(buf + OFF_RUN, 0, HDR_V5 - OFF_RUN);
        memmove(buf + hb, buf + HDR, len - HDR);
        len -= HDR - hb;
        test_ckpt_reseal(old, buf, len);
        r = cli_run("exec " SMALL " --steps 2 --resume %s", old);
        cr_expect_eq(r.code, 0, "version %u: %s", ver, r.err);
        cr_expect(strstr(r.out, "step     2/2"), "%s", r.out);
        cli_result_free(&r);
    }
    /* a header whose OPT fields make no model, or whose RoPE flag
     * disagrees with its base (0 here) */
    const size_t at[] = {HDR_V2 + 4, HDR_V1 + 12};
    const int32_t val[] = {-3, 1};
    for (int k = 0; k < 2; k++) {
        char *buf, bad[600];
        size_t len;
        util_err e;
        cr_assert_eq(util_read_file_max(ck, 1 << 30, &buf, &len, &e), 0);
        memcpy(buf + at[k], &val[k], sizeof val[k]);
        snprintf(bad, sizeof bad, "%s/bad.ck", d);
        test_ckpt_reseal(bad, buf, len);
        r = cli_run("exec " SMALL " --steps 2 --resume %s", bad);
        cr_expect_eq(r.code, 2, "field at byte %zu", at[k]);
        cr_expect(strstr(r.err, "corrupt checkpoint (invalid header "
                                "values)"), "%s", r.err);
        cli_result_free(&r);
    }
    /* Llama's, OPT's and BERT's choices are kept */
    keeps_its_model(d, "llama-tiny", "gpt-tiny",
                    "RMSNorm (eps 1e-05), SwiGLU, RoPE (base 10000)");
    keeps_its_model(d, "tests/data/exec/opt-pico.json",
                    "tests/data/exec/gpt-pico.json",
                    "ReLU, learned positions from row 2");
    keeps_its_model(d, "tests/data/exec/bert-pico.json",
                    "tests/data/exec/gpt-pico.json",
                    "an encoder (2 token types, a pooler)");
    test_rm_rf(d);
}

/* A checkpoint keeps the options that decide how its run goes on
 * (--steps, --lr, --warmup, --weight-decay, --clip, a checksum of the
 * text): --resume alone ends with the uninterrupted run's bits, from the
 * reference trainer and from a plan; an option given that differs is
 * said; the default text where the run trained on another is refused. A
 * header whose options no command line gives is corrupt. */
Test(exec_ckpt, resume_goes_on_as_the_run_that_saved)
{
    char *d = test_tmpdir();
    const char *opts = "--steps 6 --lr 1e-3 --warmup 2 --weight-decay 0.05 "
                       "--clip 0.5";
    cli_result r = cli_run("exec " SMALL " %s --save %s/full.ck", opts, d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec " SMALL " %s --stop-after 2 --save %s/part.ck", opts,
                d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --model gpt-tiny --threads 1 --eval-batches 1 "
                "--resume %s/part.ck --save %s/part.ck", d, d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "resumed as the run that saved") &&
              strstr(r.out, "--steps 6, --lr 0.001, --warmup 2, "
                            "--weight-decay 0.05, --clip 0.5"), "%s", r.out);
    cli_result_free(&r);
    cr_expect_eq(sh_run("cmp -s %s/full.ck %s/part.ck", d, d), 0,
                 "the resumed run's weights are not the uninterrupted one's");
    /* a plan's run too */
    r = cli_run("sim --hw 'cpu x2' --model gpt-tiny --schedule 1f1b --pp 2 "
                "--mbs 2 --microbatches 2 --out %s/p.json", d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --plan %s/p.json %s --quiet --save %s/pf.ck", d, opts,
                d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --plan %s/p.json %s --stop-after 3 --quiet --save "
                "%s/pp.ck", d, opts, d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --plan %s/p.json --resume %s/pp.ck --save %s/pp.ck", d,
                d, d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "--lr 0.001"), "%s", r.out);
    cli_result_free(&r);
    cr_expect_eq(sh_run("cmp -s %s/pf.ck %s/pp.ck", d, d), 0,
                 "the plan's resumed run is not the uninterrupted one");
    /* an option that differs is said; another text than the default the
     * run trained on is refused without --data */
    r = cli_run("exec " SMALL " --resume %s/full.ck --steps 8 --lr 2e-3", d);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "--steps 8 (it had 6), --lr 0.002 (it had "
                            "0.001)") && strstr(r.out, "does not go on"),
              "%s", r.out);
    cli_result_free(&r);
    char txt[600];
    snprintf(txt, sizeof txt, "%s/other.txt", d);
    FILE *f = fopen(txt, "w");
    cr_assert_not_null(f);
    for (int k = 0; k < 400; k++)
        fprintf(f, "line %d of a text that is not the default one\n", k);
    fclose(f);
    r = cli_run("exec " SMALL " --steps 4 --stop-after 1 --data %s --save "
                "%s/d.ck", txt, d);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec " SMALL " --resume %s/d.ck", d);
    cr_expect_eq(r.code, 2, "%s", r.out);
    cr_expect(strstr(r.err, "trained on other text than") &&
              strstr(r.err, "give its --data again"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec " SMALL " --resume %s/d.ck --data %s", d, txt);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    /* options no command line gives: a corrupt header */
    char ck[600], *buf;
    size_t len;
    util_err e;
    snprintf(ck, sizeof ck, "%s/full.ck", d);
    cr_assert_eq(util_read_file_max(ck, 1 << 30, &buf, &len, &e), 0);
    float lr = -1;
    memcpy(buf + OFF_RUN + 16, &lr, sizeof lr);
    snprintf(ck, sizeof ck, "%s/bad.ck", d);
    test_ckpt_reseal(ck, buf, len);
    r = cli_run("exec " SMALL " --resume %s", ck);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "corrupt checkpoint (invalid header values)"),
              "%s", r.err);
    cli_result_free(&r);
    test_rm_rf(d);
}
