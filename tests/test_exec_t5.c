/* T5 in the pipeline executor: the relative-position buckets are Hugging
 * Face's; a tiny T5 saved by transformers (tests/data/hf/t5-tiny/gen.py)
 * gives the loss and the gradient norm transformers' own
 * T5ForConditionalGeneration gives on the same rows, heads of
 * hidden / heads and wider ones (T5-3B's kind), in pipelines and tensor
 * parallel; every schedule's pipeline, with recomputation, data and
 * tensor parallelism, ends 5 steps with the weights one device gets from
 * the same batches (within 1e-5 of the largest weight), the
 * relative-position tables copied to every stage holding one of their
 * self-attentions and their gradients exchanged. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "sim/sim.h"
#include "tests/harness.h"

#define T5 "tests/data/exec/t5-tiny.json"
#define T5_WIDE "tests/data/exec/t5-tiny-wide.json"
#define HF "tests/data/hf/t5-tiny/"

static json_t *expected(void)
{
    json_error_t je;
    json_t *x = json_load_file(HF "expected.json", 0, &je);
    cr_assert_not_null(x, "%s", je.text);
    return x;
}

Test(exec_t5, buckets_are_hugging_faces)
{
    json_t *x = expected();
    const int cfg[2][2] = {{32, 128}, {8, 20}};
    int *got = malloc(sizeof(int) * 1201);
    for (int c = 0; c < 2; c++)
        for (int bi = 0; bi < 2; bi++) {
            char key[64];
            snprintf(key, sizeof key, "buckets_%d_%d_%s", cfg[c][0],
                     cfg[c][1], bi ? "bi" : "causal");
            json_t *want = json_object_get(x, key);
            cr_assert_eq(json_array_size(want), 1201, "%s", key);
            /* offsets -600..600: 601 queries over 601 keys */
            exec_t5_buckets(got, 601, 601, bi, cfg[c][0], cfg[c][1]);
            for (int o = 0; o < 1201; o++)
                cr_assert_eq(got[o],
                             json_integer_value(json_array_get(want, o)),
                             "%s: offset %d", key, o - 600);
        }
    free(got);
    json_decref(x);
}

/* The first step's loss (before any update) and gradient norm of a
 * 1F1B plan (pp stages of tp ranks) of mbs x nmb rows from the Hugging
 * Face file. */
static void first_step(const char *model, const char *weights, int mbs,
                       int nmb, int pp, int tp, double *loss, double *norm)
{
    pspec s = {model, SIM_SCHED_1F1B, pp, 1, tp, mbs, nmb, 0, 0};
    sim_plan p;
    pipe_plan(&s, &p);
    exec_pipe_opts o = pipe_opts(&p, 1, 0);
    o.init = weights;
    o.data = HF "corpus.txt";
    exec_pipe_result r;
    util_err e = {0};
    cr_assert_eq(exec_pipe_run(&o, &r, &e), 0, "%s", e.msg);
    *loss = r.loss[0];
    *norm = r.grad_norm[0];
    exec_pipe_result_free(&r);
    sim_plan_free(&p);
}

Test(exec_t5, hugging_face_t5_computes_what_transformers_does)
{
    json_t *x = expected();
    struct {
        const char *model, *weights, *key, *rows;
        int mbs, nmb, pp, tp;
    } cases[] = {
        {T5, HF "model.safetensors", "tiny", "row0", 1, 1, 1, 1},
        {T5, HF "model.safetensors", "tiny", "both", 2, 1, 1, 1},
        {T5, HF "model.safetensors", "tiny", "both", 1, 2, 2, 1},
        {T5, HF "model.safetensors", "tiny", "both", 2, 1, 1, 2},
        {T5_WIDE, HF "wide/model.safetensors", "wide", "row0", 1, 1, 1, 1},
        {T5_WIDE, HF "wide/model.safetensors", "wide", "both", 1, 2, 3, 1},
        {T5_WIDE, HF "wide/model.safetensors", "wide", "both", 1, 2, 2, 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        json_t *want = json_object_get(
            json_object_get(x, cases[k].key), cases[k].rows);
        double wl = json_number_value(json_object_get(want, "loss")),
               wn = json_number_value(json_object_get(want, "grad_norm"));
        cr_assert(wl > 1 && wn > 0);
        double loss, norm;
        first_step(cases[k].model, cases[k].weights, cases[k].mbs,
                   cases[k].nmb, cases[k].pp, cases[k].tp, &loss, &norm);
        cr_expect(fabs(loss - wl) <= 1e-6 * wl, "%s %s pp%d tp%d: loss "
                  "%.8f, transformers %.8f", cases[k].key, cases[k].rows,
                  cases[k].pp, cases[k].tp, loss, wl);
        cr_expect(fabs(norm - wn) <= 1e-5 * wn, "%s %s pp%d tp%d: gradient "
                  "norm %.8f, transformers %.8f", cases[k].key,
                  cases[k].rows, cases[k].pp, cases[k].tp, norm, wn);
    }
    json_decref(x);
}

/* Plan s after 5 steps against one stage on one device fed the same
 * global batch. */
static void check_t5(const pspec *s)
{
    sim_plan p, q;
    pipe_plan(s, &p);
    int dp = s->dp ? s->dp : 1;
    pspec one = {s->model, SIM_SCHED_1F1B, 1, 1, 1, s->mbs, s->nmb * dp,
                 0, 0};
    pipe_plan(&one, &q);
    exec_pipe_result r, ref;
    pipe_run(&p, 5, 0, &r);
    pipe_run(&q, 5, 0, &ref);
    cr_assert_eq(r.n_params, ref.n_params);
    for (int k = 0; k < 5; k++)
        cr_expect(isfinite(r.loss[k]) &&
                      fabs(r.loss[k] - ref.loss[k]) <= 1e-5 * ref.loss[k],
                  "step %d: loss %g, one device %g", k + 1, r.loss[k],
                  ref.loss[k]);
    char what[96];
    snprintf(what, sizeof what, "T5 %s pp%d dp%d tp%d %d stages%s%s",
             sim_sched_name(s->sched), s->pp, dp, p.tp, p.n_stages,
             s->recompute ? " recompute " : "",
             s->recompute ? sim_recompute_name(s->recompute) : "");
    expect_close(ref.params, r.params, r.n_params, 1e-5, what);
    /* it learns */
    cr_expect(ref.loss[4] < ref.loss[0], "%s: loss %g then %g", what,
              ref.loss[0], ref.loss[4]);
    exec_pipe_result_free(&r);
    exec_pipe_result_free(&ref);
    sim_plan_free(&p);
    sim_plan_free(&q);
}

Test(exec_t5, pipelines_equal_one_device)
{
    const pspec cases[] = {
        /* the decoder's table on both stages */
        {T5, SIM_SCHED_1F1B, 2, 1, 1, 1, 4, 0, 0},
        /* both tables on several stages, an attention cut between its
         * scores and its softmax */
        {T5, SIM_SCHED_1F1B, 4, 1, 1, 1, 4, 0, 0},
        {T5, SIM_SCHED_GPIPE, 3, 1, 1, 2, 2, SIM_RC_FULL, 0},
        {T5, SIM_SCHED_ZBH1, 2, 1, 1, 1, 4, SIM_RC_SELECTIVE, 0},
        {T5, SIM_SCHED_INTERLEAVED, 2, 1, 1, 1, 4, 0, 4},
        {T5, SIM_SCHED_1F1B, 2, 2, 1, 1, 2, 0, 0},
        {T5_WIDE, SIM_SCHED_1F1B, 3, 1, 1, 1, 3, 0, 0},
        /* tensor parallel: heads, their tables' columns, the MLP, the
         * vocabulary of the embeddings, head and loss */
        {T5, SIM_SCHED_1F1B, 2, 1, 2, 1, 4, 0, 0},
        {T5_WIDE, SIM_SCHED_GPIPE, 1, 1, 4, 2, 2, SIM_RC_SELECTIVE, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        check_t5(&cases[k]);
}

/* Under mpirun (a process per device) the decoder's table's exchange and
 * the encoder's output to the decoder's stage are messages: the same bits
 * as in-process. */
Test(exec_t5, mpi_gives_the_in_process_weights)
{
    cr_assert(system("command -v mpirun >/dev/null 2>&1") == 0,
              "mpirun is missing (./deps.sh installs openmpi-bin)");
    char *dir = test_tmpdir(), data[PATH_MAX], model[PATH_MAX];
    cr_assert_not_null(realpath(HF "corpus.txt", data));
    cr_assert_not_null(realpath(T5, model));
    cli_result r = cli_run("sim --hw 'cpu x2' --model %s --schedule 1f1b "
                           "--pp 2 --mbs 1 --microbatches 4 --out %s/p.json",
                           model, dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    int rc = sh_run("cd %s && %s \"$SLUICE\" exec --plan p.json --steps 3 "
                    "--quiet --data %s --save mpi.ckpt > mpi.out 2>&1", dir,
                    MPIRUN, data);
    cr_assert_eq(rc, 0, "mpirun failed (%s/mpi.out)", dir);
    r = cli_run("exec --plan %s/p.json --steps 3 --quiet --data %s --save "
                "%s/in.ckpt", dir, data, dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    cr_expect_eq(sh_run("cmp -s %s/mpi.ckpt %s/in.ckpt", dir, dir), 0,
                 "weights differ between mpirun and in-process");
    test_rm_rf(dir);
}

/* Buckets the bias cannot be computed from are named where the spec says
 * them, in the simulator as in the executor */
Test(exec_t5, spec_buckets_the_bias_cannot_use_are_refused)
{
    const char *bad[][2] = {
        {"\"rel_pos_buckets\": 2", "rel_pos_buckets"},
        {"\"rel_pos_buckets\": 8, \"rel_pos_max_distance\": 4",
         "rel_pos_max_distance"},
        {"\"head_dim\": 65536, \"rel_pos_buckets\": 0", "head_dim"},
    };
    char *dir = test_tmpdir();
    for (int k = 0; k < 3; k++) {
        char path[600];
        snprintf(path, sizeof path, "%s/t5.json", dir);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "{\"name\": \"t\", \"family\": \"t5\", \"hidden\": 32, "
                "\"layers\": 1, \"dec_layers\": 1, \"heads\": 32, "
                "\"vocab\": 256, \"seq_len\": 8, %s}\n", bad[k][0]);
        fclose(f);
        cli_result r = cli_run("sim --hw 'cpu x1' --model %s --schedule 1f1b "
                               "--pp 1 --mbs 1 --microbatches 1", path);
        cr_expect_eq(r.code, 2, "%s", bad[k][0]);
        cr_expect(strstr(r.err, bad[k][1]), "%s: %s", bad[k][0], r.err);
        cli_result_free(&r);
    }
    test_rm_rf(dir);
}
