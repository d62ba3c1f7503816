/* The pipeline executor against the single-device reference trainer: every
 * schedule with a flush, with recomputation, data and tensor parallelism,
 * ends 5 steps with the weights the reference gets from the same batches
 * (within 1e-5 of the largest weight; bit for bit where every sum runs in
 * the same order); PipeDream-2BW equals a single-device emulation of its
 * rule W(t+1) = W(t) - lr grad f(W(t-1)); asynchronous Mixed-pipe runs each
 * backward on its forward's weight version, as the IR says, and learns as
 * fast as its synchronous form.
 *
 * AdamW's eps is 1e-6 here, not 1e-8: with 1e-8 a weight whose gradient is
 * near 1e-8 moves by a sizeable part of lr, so an fp32 reordering of that
 * gradient's sum (splitting GEMMs over tensor-parallel ranks) moves it by
 * up to 4e-5; the test is of the executor's gradients, not of that. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"
#include "sim/sim.h"
#include "tests/harness.h"

#define PICO "tests/data/exec/gpt-pico.json"
#define PICO_UNTIED "tests/data/exec/gpt-pico-untied.json"
#define CORPUS TEST_CORPUS

/* ...with sequence parallelism where sp */
static void check_sync_sp(const pspec *s, float clip, int sp)
{
    sim_plan p;
    pipe_plan(s, &p);
    p.sp = sp;
    exec_pipe_result r;
    pipe_run(&p, 5, clip, &r);
    cr_assert_eq(r.steps_run, 5);
    for (int k = 1; k < 5; k++)
        cr_expect(isfinite(r.loss[k]) && r.loss[k] > 0);
    /* the mean over the targets (an encoder's masked ones) starts near
     * ln V, the small initial weights' */
    cr_expect(fabs(r.loss[0] / log(r.cfg.vocab) - 1) < 0.2, "first loss "
              "%g, ln V %g", r.loss[0], log(r.cfg.vocab));
    size_t P;
    float *ref = pipe_reference(s->model, r.B, 5, clip, &P);
    cr_assert_eq(P, r.n_params);
    char what[96];
    snprintf(what, sizeof what, "%s %s pp%d dp%d tp%d%s%s%s", s->model,
             sim_sched_name(s->sched), s->pp, p.dp, p.tp, sp ? " sp" : "",
             s->recompute ? " recompute " : "",
             s->recompute ? sim_recompute_name(s->recompute) : "");
    expect_close(ref, r.params, P, 1e-5, what);
    free(ref);
    exec_pipe_result_free(&r);
    sim_plan_free(&p);
}

static void check_sync(const pspec *s, float clip)
{
    check_sync_sp(s, clip, 0);
}

Test(exec_pipe, every_flush_schedule_equals_the_reference)
{
    const pspec cases[] = {
        {PICO, SIM_SCHED_GPIPE, 2, 1, 1, 2, 4, 0, 0},
        {PICO, SIM_SCHED_GPIPE, 2, 1, 1, 2, 4, 1, 0},
        {PICO, SIM_SCHED_1F1B, 2, 1, 1, 2, 4, 0, 0},
        {PICO, SIM_SCHED_1F1B, 3, 1, 1, 2, 4, 1, 0},
        {PICO, SIM_SCHED_1F1B, 2, 1, 1, 2, 4, SIM_RC_SELECTIVE, 0},
        {PICO, SIM_SCHED_ZBH1, 2, 1, 1, 2, 4, SIM_RC_FULL, 0},
        {PICO, SIM_SCHED_INTERLEAVED, 2, 1, 1, 2, 4, 0, 4},
        {PICO, SIM_SCHED_ZBH1, 2, 1, 1, 2, 4, 0, 0},
        {PICO, SIM_SCHED_ZBH2, 3, 1, 1, 2, 6, 0, 0},
        {PICO, SIM_SCHED_ZB2P, 2, 1, 1, 2, 4, 0, 0},
        {PICO, SIM_SCHED_ZBV, 2, 1, 1, 2, 4, 0, 4},
        {PICO, SIM_SCHED_WAVE, 2, 1, 1, 2, 4, 0, 4},
        {PICO, SIM_SCHED_DUALPIPEV, 2, 1, 1, 2, 4, 0, 4},
        {PICO, SIM_SCHED_CHIMERA, 2, 1, 1, 2, 4, 0, 0},
        {PICO, SIM_SCHED_MIXED_1F1B, 2, 1, 1, 2, 4, 0, 5},
        {PICO, SIM_SCHED_MIXED_GPIPE, 2, 1, 1, 2, 4, 1, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_sync(&cases[i], 1.0f);
}

Test(exec_pipe, data_and_tensor_parallel_equal_the_reference)
{
    const pspec cases[] = {
        /* 257 words over 2 ranks: the last shard padded, its padded
         * logits out of the loss (as Megatron-LM pads) */
        {"tests/data/exec/gpt-pico-v257.json", SIM_SCHED_1F1B, 2, 1, 2, 2, 4,
         0, 0},
        {PICO, SIM_SCHED_1F1B, 2, 2, 1, 2, 2, 0, 0},
        {PICO, SIM_SCHED_1F1B, 1, 2, 1, 4, 2, 0, 0},
        {PICO, SIM_SCHED_1F1B, 2, 1, 2, 2, 4, 1, 0},
        {PICO, SIM_SCHED_1F1B, 2, 1, 2, 2, 4, SIM_RC_SELECTIVE, 0},
        {PICO, SIM_SCHED_ZBV, 2, 2, 2, 1, 4, 0, 4},
        {PICO, SIM_SCHED_CHIMERA, 2, 2, 1, 1, 4, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_sync(&cases[i], 1.0f);
}

/* Sequence parallelism (Korthikanti et al. 2022): the residual stream's
 * tokens split over the tensor-parallel group, gathered before each
 * column-parallel GEMM and reduce-scattered after each row-parallel one.
 * A GPT-2, a Llama (RMSNorm, RoPE, SwiGLU) and an OPT (positions from
 * row 2 of the table, ReLU) decoder end 5 steps with the reference's
 * weights, with recomputation, zero bubble's split backward, interleaved
 * stages, data parallelism beside it, four ranks, and a microbatch of
 * three sequences whose tokens split mid-sequence. */
Test(exec_pipe, sequence_parallel_equals_the_reference)
{
    const pspec cases[] = {
        {PICO, SIM_SCHED_1F1B, 2, 1, 2, 3, 2, 0, 0},
        {PICO, SIM_SCHED_GPIPE, 1, 2, 2, 2, 2, SIM_RC_FULL, 0},
        {PICO, SIM_SCHED_ZBH1, 2, 1, 2, 2, 4, SIM_RC_SELECTIVE, 0},
        {PICO, SIM_SCHED_GPIPE, 1, 1, 4, 2, 4, 0, 0},
        {"tests/data/exec/llama-pico.json", SIM_SCHED_1F1B, 2, 1, 2, 2, 4, 0,
         0},
        {"tests/data/exec/opt-pico.json", SIM_SCHED_INTERLEAVED, 2, 1, 2, 2,
         4, 0, 4},
        {"tests/data/exec/bert-pico.json", SIM_SCHED_1F1B, 2, 1, 2, 2, 4, 0,
         0},
        {"tests/data/exec/bert-pico-untied.json", SIM_SCHED_ZBH1, 1, 1, 4, 3,
         2, SIM_RC_SELECTIVE, 0},
        {"tests/data/exec/bert-pico-flash.json", SIM_SCHED_GPIPE, 2, 2, 2, 1,
         4, SIM_RC_FULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_sync_sp(&cases[i], 1.0f, 1);
}

/* Its forward is tensor parallelism's bits (a reduce-scatter gives the
 * all-reduce's chunk): the first step's loss is the same. Each device
 * keeps less than under tensor parallelism alone (the norms', residual
 * adds' and stage messages' tokens split) and peaks within 5% of the
 * simulator's prediction. */
static void sp_keeps_less(const char *model)
{
    double tp_peak[2] = {0, 0}, tp_loss = 0;
    for (int sp = 0; sp < 2; sp++) {
        pspec s = {model, SIM_SCHED_1F1B, 2, 1, 2, 2, 4, 0, 0};
        sim_plan p;
        pipe_plan(&s, &p);
        p.sp = sp;
        exec_pipe_result r;
        pipe_run(&p, 2, 1.0f, &r);
        if (!sp) tp_loss = r.loss[0];
        else
            cr_expect_eq(r.loss[0], tp_loss, "first loss %.9g, tensor "
                         "parallel %.9g", r.loss[0], tp_loss);
        for (int d = 0; d < 2; d++) {
            double meas = r.peak_bytes[d], sim = test_sim_peak(&r, d);
            if (!sp) {
                tp_peak[d] = meas;
                continue;
            }
            cr_expect_lt(meas, tp_peak[d], "%s device %d: %.0f bytes, "
                         "tensor parallel %.0f", model, d, meas, tp_peak[d]);
            cr_expect(fabs(meas - sim) <= 0.05 * sim, "%s device %d: "
                      "measured %.0f bytes, simulated %.0f", model, d, meas,
                      sim);
            cr_log_info("%s device %d: measured %.0f bytes, simulated "
                        "%.0f", model, d, meas, sim);
        }
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
}

Test(exec_pipe, sequence_parallel_keeps_less_than_tensor_parallel)
{
    sp_keeps_less(PICO);
    sp_keeps_less("tests/data/exec/bert-pico.json");
    sp_keeps_less("tests/data/exec/t5-tiny.json");
}

/* One microbatch of the whole batch, no clipping, an untied head: every
 * sum runs in the reference's order, so the weights are the same bits,
 * with cuts inside layers and inside attention. */
/* Each case run 3 steps without clipping: the reference's bits. */
static void check_bits(const pspec *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sim_plan p;
        pipe_plan(&cases[i], &p);
        exec_pipe_result r;
        pipe_run(&p, 3, 0, &r);
        size_t P;
        float *ref = pipe_reference(cases[i].model, r.B, 3, 0, &P);
        cr_assert_eq(P, r.n_params);
        cr_expect(!memcmp(ref, r.params, P * sizeof *ref), "%s %s: weights "
                  "differ from the reference's", cases[i].model,
                  sim_sched_name(p.sched));
        free(ref);
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
}

Test(exec_pipe, one_microbatch_is_bit_identical)
{
    const pspec cases[] = {
        {PICO_UNTIED, SIM_SCHED_1F1B, 2, 1, 1, 8, 1, 0, 0},
        {PICO_UNTIED, SIM_SCHED_GPIPE, 3, 1, 1, 8, 1, 1, 0},
        {PICO_UNTIED, SIM_SCHED_ZBH1, 2, 1, 1, 8, 1, 0, 0},
        {PICO_UNTIED, SIM_SCHED_INTERLEAVED, 2, 1, 1, 8, 1, 0, 6},
    };
    check_bits(cases, sizeof cases / sizeof *cases);
}

/* PipeDream-2BW on one device: minibatch t's gradient at W(t-1) (W(0) for
 * the first), applied to W(t). No clipping: 2BW's stages clip alone. */
static float *emulate_2bw(const char *model, int B, int steps, size_t *P)
{
    util_err e;
    prof_model_spec spec;
    exec_gpt_config c;
    cr_assert_eq(prof_model_spec_get(model, &spec, &e), 0);
    cr_assert_eq(exec_gpt_config_from_spec(&spec, &c, model, &e), 0);
    int T = spec.seq_len;
    exec_gpt *m = exec_gpt_new(&c, B, T, 1337);
    exec_corpus corpus;
    cr_assert_eq(exec_corpus_load(&corpus, CORPUS, T, &e), 0, "%s", e.msg);
    *P = exec_gpt_num_params(m);
    size_t bytes = sizeof(float) * *P;
    float *prev = malloc(bytes), *cur = malloc(bytes);
    memcpy(prev, exec_gpt_params(m), bytes);
    int *tok = malloc(sizeof(int) * (size_t)B * T);
    int *tgt = malloc(sizeof(int) * (size_t)B * T);
    exec_adamw a = pipe_adamw(0);
    int warmup = steps / 10 > 0 ? steps / 10 : 1;
    for (int s = 0; s < steps; s++) {
        memcpy(cur, exec_gpt_params(m), bytes);
        memcpy(exec_gpt_params(m), prev, bytes);   /* run on W(t-1) */
        exec_corpus_batch(&corpus, 0, 1337, (uint64_t)s, B, T, tok, tgt);
        exec_gpt_forward(m, tok, tgt);
        exec_gpt_zero_grad(m);
        exec_gpt_backward(m);
        memcpy(exec_gpt_params(m), cur, bytes);    /* update W(t) */
        a.lr = exec_lr_at(2e-3f, warmup, steps, s);
        exec_gpt_step(m, &a, s + 1);
        memcpy(prev, cur, bytes);
    }
    float *w = malloc(bytes);
    memcpy(w, exec_gpt_params(m), bytes);
    free(prev); free(cur); free(tok); free(tgt);
    exec_corpus_free(&corpus);
    exec_gpt_free(m);
    return w;
}

/* Device d's measured memory at time t (the last point at or before). */
static double mem_at(const exec_pipe_result *r, int d, int64_t t)
{
    double v = 0;
    for (int k = r->mem_off[d]; k < r->mem_off[d + 1]; k++)
        if (r->mem_t[k] <= t) v = r->mem_b[k];
    return v;
}

/* Zero Bubble's deferred weight gradient holds, from B to W, each
 * weighted op's saved input and the gradient of its output (dW = X^T dY):
 * what the executor frees at a W is what the simulator's W releases
 * (wkeep_bytes), within 1%. One device, so nothing else allocates. */
/* gpt-tiny under sched on one device, microbatch 2 x 2, two steps, its
 * memory recorded. */
static void mem_run(sim_sched sched, sim_plan *p, exec_pipe_result *r)
{
    pspec s = {"gpt-tiny", sched, 1, 1, 1, 2, 2, 0, 0};
    pipe_plan(&s, p);
    exec_pipe_opts o = pipe_opts(p, 2, 1.0f);
    o.record_mem = 1;
    util_err e = {0};
    cr_assert_eq(exec_pipe_run(&o, r, &e), 0, "%s", e.msg);
}

Test(exec_pipe, what_w_holds_is_the_simulators)
{
    sim_plan p;
    exec_pipe_result r;
    mem_run(SIM_SCHED_ZBH1, &p, &r);
    double want = r.costs->stage[0].wkeep_bytes;
    cr_assert_gt(want, 0);
    int nw = 0;
    for (int i = 0; i < r.ir->n_tasks; i++) {
        if (r.ir->tasks[i].kind != SIM_W) continue;
        const int64_t *ts = exec_pipe_times(&r, r.epochs - 1, i);
        double freed = mem_at(&r, 0, ts[EXEC_T_START]) -
                       mem_at(&r, 0, ts[EXEC_T_END]);
        cr_expect(fabs(freed - want) <= 0.01 * want, "W of microbatch %d "
                  "frees %.0f bytes, the simulator %.0f",
                  r.ir->tasks[i].mb, freed, want);
        nw++;
    }
    cr_expect_eq(nw, 2);
    exec_pipe_result_free(&r);
    sim_plan_free(&p);
}

/* A device's peak as the simulator predicts it is the median step's past
 * the warm-up, as the iteration time (exec_pipe_peak); the run's peak is
 * its largest step's. */
Test(exec_pipe, a_devices_peak_is_its_median_steps)
{
    double steps[5] = {5, 10, 11, 12, 30}, run = 30;
    exec_pipe_result r;
    memset(&r, 0, sizeof r);
    r.n_devices = 1;
    r.epochs = r.steps_run = 5;
    r.step_peak_bytes = steps;
    r.peak_bytes = &run;
    const struct { int warm; double want; } cases[] = {
        {0, 11}, {1, 12}, {3, 30}, {5, 11}, {9, 11}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        cr_expect_eq(exec_pipe_peak(&r, cases[i].warm, 0), cases[i].want,
                     "warm %d: %g", cases[i].warm,
                     exec_pipe_peak(&r, cases[i].warm, 0));
    r.steps_run = 3;            /* stopped after step 3: {10, 11} */
    cr_expect_eq(exec_pipe_peak(&r, 1, 0), 11);
    r.async = 1;                /* one epoch: the run's */
    cr_expect_eq(exec_pipe_peak(&r, 1, 0), 30);

    /* a run over two replicas, whose ring chunks land on each other */
    pspec s = {PICO, SIM_SCHED_1F1B, 1, 2, 1, 2, 2, 0, 0};
    sim_plan p;
    pipe_plan(&s, &p);
    exec_pipe_result q;
    pipe_run(&p, 4, 1.0f, &q);
    cr_assert_eq(q.epochs, 4);
    for (int d = 0; d < 2; d++) {
        double lo = HUGE_VAL, hi = 0;
        for (int ep = 0; ep < 4; ep++) {
            double v = q.step_peak_bytes[d * 4 + ep];
            lo = fmin(lo, v);
            hi = fmax(hi, v);
        }
        cr_expect_gt(lo, 0, "device %d: a step without a peak", d);
        cr_expect_eq(hi, q.peak_bytes[d], "device %d: the largest step's "
                     "%.0f bytes, the run's %.0f", d, hi, q.peak_bytes[d]);
        double med = exec_pipe_peak(&q, 1, d);
        cr_expect(med >= lo && med <= hi, "device %d: median %.0f outside "
                  "%.0f-%.0f", d, med, lo, hi);
    }
    exec_pipe_result_free(&q);
    sim_plan_free(&p);
}

/* The largest memory device 0 held while task id ran (last epoch),
 * beyond what it held as it started. */
static double task_rise(const exec_pipe_result *r, int id)
{
    const int64_t *ts = exec_pipe_times(r, r->epochs - 1, id);
    double base = mem_at(r, 0, ts[EXEC_T_START]), top = base;
    for (int k = r->mem_off[0]; k < r->mem_off[1]; k++)
        if (r->mem_t[k] >= ts[EXEC_T_START] && r->mem_t[k] <= ts[EXEC_T_END])
            top = fmax(top, r->mem_b[k]);
    return top - base;
}

/* The backward's gradients in flight: what a B or BW holds at most
 * beyond its start (the simulator's bwd_ws_bytes, walking the ops as the
 * executor frees them: an activation after its last reader's backward)
 * against the executor's measured rise, one device. The split B keeps
 * its W's output gradients as it goes; the fused BW frees them, so it
 * rises far less. The fused rise is the walk's to 2%; the split one's
 * within a tenth (one hidden-sized tensor more on gpt-tiny, not yet
 * pinned down). */
Test(exec_pipe, the_backwards_rise_is_the_simulators)
{
    const sim_sched sched[2] = {SIM_SCHED_1F1B, SIM_SCHED_ZBH1};
    double rise[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        sim_plan p;
        exec_pipe_result r;
        mem_run(sched[k], &p, &r);
        double want = r.costs->stage[0].bwd_ws_bytes[k ? 0 : 1];
        int n = 0;
        for (int i = 0; i < r.ir->n_tasks; i++) {
            int kd = r.ir->tasks[i].kind;
            if (kd != SIM_B && kd != SIM_BW) continue;
            double got = task_rise(&r, i);
            cr_expect(fabs(got - want) <= (k ? 0.1 : 0.02) * got,
                      "%s, microbatch %d: the backward rises %.0f bytes, "
                      "the simulator %.0f", sim_sched_name(sched[k]),
                      r.ir->tasks[i].mb, got, want);
            rise[k] = got;
            n++;
        }
        cr_expect_eq(n, 2);
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
    cr_expect_gt(rise[1], 2 * rise[0]);
}

Test(exec_pipe, twobw_is_its_weight_update_rule)
{
    const pspec cases[] = {
        {PICO_UNTIED, SIM_SCHED_2BW, 2, 1, 1, 2, 4, 0, 0},
        {PICO_UNTIED, SIM_SCHED_2BW, 3, 1, 1, 1, 4, 0, 0},
        {PICO_UNTIED, SIM_SCHED_2BW, 2, 2, 1, 2, 2, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sim_plan p;
        pipe_plan(&cases[i], &p);
        exec_pipe_result r;
        pipe_run(&p, 6, 0, &r);
        cr_assert_eq(r.steps_run, 6);
        size_t P;
        float *emu = emulate_2bw(cases[i].model, r.B, 6, &P);
        cr_assert_eq(P, r.n_params);
        char what[64];
        snprintf(what, sizeof what, "2bw pp%d dp%d", p.pp, p.dp);
        expect_close(emu, r.params, P, 1e-5, what);
        /* and not the synchronous rule: the delay is real */
        float *sync = pipe_reference(cases[i].model, r.B, 6, 0, &P);
        double md = 0;
        for (size_t k = 0; k < P; k++)
            md = fmax(md, fabs((double)sync[k] - r.params[k]));
        cr_expect_gt(md, 1e-3, "%s: equal to synchronous training", what);
        free(emu);
        free(sync);
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
}

/* Asynchronous Mixed-pipe: every compute task ran on the weight version
 * the IR gives it (a backward on its forward's), and over 200 steps on
 * gpt-tiny the loss keeps within 2% of the synchronous run's. Stale
 * weights want a smaller step: at lr 1e-3 the curves keep within 1.4%,
 * at 2e-3 the asynchronous one trails by up to 5% (measured). */
Test(exec_pipe, async_mixed_uses_each_forwards_version)
{
    sim_plan p;
    cli_plan("--hw cpu x2 --model gpt-tiny --schedule mixed --pp 2 --mbs 1 "
             "--microbatches 4 --stages 4", &p);
    exec_pipe_result a;
    pipe_run_lr(&p, 200, 1.0f, 1e-3f, &a);
    cr_assert_eq(a.steps_run, 200);
    int checked = 0, stale = 0;
    for (int id = 0; id < a.ir->n_tasks; id++) {
        const sim_task *t = &a.ir->tasks[id];
        if (t->stream != SIM_STREAM_COMPUTE || t->kind > SIM_RECOMP) continue;
        cr_expect_eq(a.version_used[id], t->version, "task %d (%s): ran on "
                     "version %d, the IR says %d", id,
                     sim_kind_name((sim_kind)t->kind), a.version_used[id],
                     t->version);
        checked++;
        stale += t->version < t->minibatch;
    }
    cr_expect_gt(checked, 200 * 4 * 4);
    cr_expect_gt(stale, 0, "no task ran on an older version");
    sim_plan q;
    cli_plan("--hw cpu x2 --model gpt-tiny --schedule mixed-1f1b --pp 2 "
             "--mbs 1 --microbatches 4 --stages 4", &q);
    exec_pipe_result b;
    pipe_run_lr(&q, 200, 1.0f, 1e-3f, &b);
    /* the curves, smoothed over 40 steps, agree within 2% from step 40 */
    for (int k = 40; k + 40 <= 200; k += 40) {
        double x = 0, y = 0;
        for (int j = k; j < k + 40; j++) x += a.loss[j], y += b.loss[j];
        cr_expect(fabs(x - y) <= 0.02 * y, "steps %d-%d: async %.4f, sync "
                  "%.4f", k + 1, k + 40, x / 40, y / 40);
    }
    exec_pipe_result_free(&a);
    exec_pipe_result_free(&b);
    sim_plan_free(&p);
    sim_plan_free(&q);
}

/* ------------------------------------------------ Hugging Face weights */

#define HF "tests/data/hf/gpt2-tiny/"

static float *load_hf(const char *file, exec_gpt_config *c, size_t *P,
                      util_err *e)
{
    prof_model_spec spec;
    cr_assert_eq(prof_model_spec_get(HF "config.json", &spec, e), 0, "%s",
                 e->msg);
    cr_assert_eq(exec_gpt_config_from_spec(&spec, c, "gpt2-tiny", e), 0);
    exec_tensor tt[EXEC_P_COUNT];
    *P = exec_gpt_param_table(c, tt);
    float *w = malloc(sizeof *w * (*P + 1));
    if (exec_safetensors_load(file, c, w, e)) {
        free(w);
        return NULL;
    }
    return w;
}

/* A GPT-2 saved by Hugging Face (tests/data/hf/gpt2-tiny/gen.py): its
 * weights, Conv1D layers transposed, give the loss transformers' own
 * GPT2LMHeadModel gives on the same tokens. */
Test(exec_init, hugging_face_gpt2_computes_what_transformers_does)
{
    util_err e;
    exec_gpt_config c;
    size_t P;
    float *w = load_hf(HF "model.safetensors", &c, &P, &e);
    cr_assert_not_null(w, "%s", e.msg);
    json_error_t je;
    json_t *x = json_load_file(HF "expected.json", 0, &je);
    cr_assert_not_null(x, "%s", je.text);
    const char *text = json_string_value(json_object_get(x, "text"));
    double want = json_number_value(json_object_get(x, "loss_32"));
    cr_assert_geq(strlen(text), 33);
    exec_gpt *m = exec_gpt_new(&c, 1, 32, 1);
    memcpy(exec_gpt_params(m), w, sizeof *w * P);
    int tok[32], tgt[32];
    for (int i = 0; i < 32; i++) {
        tok[i] = (unsigned char)text[i];
        tgt[i] = (unsigned char)text[i + 1];
    }
    double got = exec_gpt_forward(m, tok, tgt);
    cr_expect(fabs(got - want) <= 1e-5 * want, "loss %.7f, transformers "
              "%.7f", got, want);
    /* the same weights in half precisions: each to its rounding */
    const char *half[2] = {HF "model-f16.safetensors",
                           HF "model-bf16.safetensors"};
    const double tol[2] = {1e-3, 8e-3};
    for (int k = 0; k < 2; k++) {
        size_t P2;
        exec_gpt_config c2;
        float *h = load_hf(half[k], &c2, &P2, &e);
        cr_assert_not_null(h, "%s", e.msg);
        cr_assert_eq(P2, P);
        expect_close(w, h, P, tol[k], half[k]);
        free(h);
    }
    exec_gpt_free(m);
    json_decref(x);
    free(w);
}

/* The loss of the first 32 next-byte predictions of a Hugging Face model
 * folder's expected.json text, from its config.json and safetensors as
 * --init reads them, with the config's RoPE base replaced by theta (> 0);
 * *want gets transformers' loss. */
static double hf_llama_loss(const char *dir, float theta, double *want,
                            exec_gpt_config *c)
{
    char path[256];
    util_err e;
    prof_model_spec spec;
    snprintf(path, sizeof path, "%s/config.json", dir);
    cr_assert_eq(prof_model_spec_get(path, &spec, &e), 0, "%s", e.msg);
    cr_assert_eq(exec_gpt_config_from_spec(&spec, c, dir, &e), 0, "%s",
                 e.msg);
    if (theta > 0) c->rope_theta = theta;
    exec_gpt *m = exec_gpt_new(c, 1, 32, 1);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_assert_eq(exec_safetensors_load(path, c, exec_gpt_params(m), &e), 0,
                 "%s", e.msg);
    json_error_t je;
    snprintf(path, sizeof path, "%s/expected.json", dir);
    json_t *x = json_load_file(path, 0, &je);
    cr_assert_not_null(x, "%s", je.text);
    const char *text = json_string_value(json_object_get(x, "text"));
    *want = json_number_value(json_object_get(x, "loss_32"));
    cr_assert_geq(strlen(text), 33);
    int tok[32], tgt[32];
    for (int i = 0; i < 32; i++) {
        tok[i] = (unsigned char)text[i];
        tgt[i] = (unsigned char)text[i + 1];
    }
    double got = exec_gpt_forward(m, tok, tgt);
    exec_gpt_free(m);
    json_decref(x);
    return got;
}

/* Llamas saved by Hugging Face (tests/data/hf/llama-tiny/gen.py: RoPE,
 * RMSNorm, SwiGLU, two query heads per key and value head, an untied
 * head; Llama 2's RoPE base and epsilon, and Llama 3's in llama3-tiny):
 * their weights give the loss transformers' own LlamaForCausalLM gives on
 * the same tokens, the config's base and epsilon read; another base gives
 * another loss. */
Test(exec_init, hugging_face_llama_computes_what_transformers_does)
{
    const char *dirs[] = {"tests/data/hf/llama-tiny",
                          "tests/data/hf/llama3-tiny"};
    const float theta[] = {10000.0f, 500000.0f}, eps[] = {1e-5f, 1e-6f};
    for (int k = 0; k < 2; k++) {
        exec_gpt_config c;
        double want, got = hf_llama_loss(dirs[k], 0, &want, &c);
        cr_assert(exec_rope(&c) && c.rmsnorm && c.swiglu && c.kv_heads == 2 &&
                  !c.tied);
        cr_expect_eq(c.rope_theta, theta[k]);
        cr_expect_eq(c.norm_eps, eps[k]);
        cr_expect(fabs(got - want) <= 1e-6 * want, "%s: loss %.7f, "
                  "transformers %.7f", dirs[k], got, want);
        got = hf_llama_loss(dirs[k], theta[1 - k], &want, &c);
        cr_expect(fabs(got - want) > 1e-4 * want, "%s: RoPE's base %g gave "
                  "the loss of %g", dirs[k], (double)theta[1 - k],
                  (double)theta[k]);
    }
    /* GPT-2's loader refuses them */
    util_err e;
    exec_gpt_config g;
    double want;
    hf_llama_loss(dirs[0], 0, &want, &g);
    g.rmsnorm = g.swiglu = 0;
    g.kv_heads = 0;
    g.max_pos = 64;
    g.bias = 1;
    g.rope_theta = g.norm_eps = 0;
    exec_tensor tt[EXEC_P_COUNT];
    float *w = malloc(sizeof *w * (exec_gpt_param_table(&g, tt) + 1));
    cr_expect_eq(exec_safetensors_load("tests/data/hf/llama-tiny/"
                                       "model.safetensors", &g, w, &e), -1);
    cr_expect(strstr(e.msg, "Llama weights"), "%s", e.msg);
    free(w);
}

/* An OPT saved by Hugging Face (tests/data/hf/opt-tiny/gen.py: positions
 * from row 2 of the table, ReLU, biases, a tied head): its weights give
 * the loss transformers' own OPTForCausalLM gives on the same tokens; the
 * table's two leading rows are never read, and GELU in place of ReLU
 * gives another loss. GPT-2's loader refuses the file. */
Test(exec_init, hugging_face_opt_computes_what_transformers_does)
{
    const char *dir = "tests/data/hf/opt-tiny";
    exec_gpt_config c;
    double want, got = hf_llama_loss(dir, 0, &want, &c);
    cr_assert(c.relu && c.pos_offset == 2 && c.tied && c.bias &&
              !exec_rope(&c) && c.max_pos == 64);
    cr_expect(fabs(got - want) <= 1e-6 * want, "loss %.7f, transformers "
              "%.7f", got, want);
    util_err e;
    exec_tensor tt[EXEC_P_COUNT];
    size_t P = exec_gpt_param_table(&c, tt);
    cr_assert_eq(tt[EXEC_P_WPE].n, (size_t)66 * c.hidden);
    exec_gpt *m = exec_gpt_new(&c, 1, 32, 1);
    float *w = exec_gpt_params(m);
    cr_assert_eq(exec_safetensors_load("tests/data/hf/opt-tiny/"
                                       "model.safetensors", &c, w, &e), 0,
                 "%s", e.msg);
    int tok[32], tgt[32];
    const char *text = "Everyone is permitted to copy and";
    for (int i = 0; i < 32; i++) {
        tok[i] = (unsigned char)text[i];
        tgt[i] = (unsigned char)text[i + 1];
    }
    float l0 = exec_gpt_forward(m, tok, tgt);
    memset(w + tt[EXEC_P_WPE].off, 0, sizeof *w * 2 * (size_t)c.hidden);
    cr_expect_eq(exec_gpt_forward(m, tok, tgt), l0, "rows 0 and 1 read");
    exec_gpt_free(m);
    exec_gpt_config g = c;
    g.relu = 0;
    m = exec_gpt_new(&g, 1, 32, 1);
    cr_assert_eq(exec_safetensors_load("tests/data/hf/opt-tiny/"
                                       "model.safetensors", &c,
                                       exec_gpt_params(m), &e), 0);
    cr_expect(fabs(exec_gpt_forward(m, tok, tgt) - l0) > 1e-4 * l0,
              "GELU gave ReLU's loss");
    exec_gpt_free(m);
    g = c;
    g.relu = 0;
    g.pos_offset = 0;
    g.max_pos = 66;
    float *w2 = malloc(sizeof *w2 * (P + 1));
    cr_expect_eq(exec_safetensors_load("tests/data/hf/opt-tiny/"
                                       "model.safetensors", &g, w2, &e), -1);
    cr_expect(strstr(e.msg, "OPT weights"), "%s", e.msg);
    free(w2);
}

/* A BERT saved by Hugging Face (tests/data/hf/bert-tiny/gen.py:
 * BertForPreTraining with GELU's erf form, LayerNorm's epsilon 1e-12,
 * token types, the pooler, the tied decoder with its bias): its weights
 * give the masked-LM loss transformers' own model gives on the same
 * masked tokens and sentence-pair types, also from a file naming a
 * LayerNorm's weight and bias gamma and beta as the Hub's older BERTs do;
 * GELU's tanh form or GPT-2's epsilon give another. */
static double bert_tiny_loss(const exec_gpt_config *c, const int *tok,
                             const int *tgt, const char *file)
{
    util_err e;
    char path[128];
    snprintf(path, sizeof path, "tests/data/hf/bert-tiny/%s", file);
    exec_gpt *m = exec_gpt_new(c, 1, 32, 1);
    cr_assert_eq(exec_safetensors_load(path, c, exec_gpt_params(m), &e), 0,
                 "%s", e.msg);
    double l = exec_gpt_forward(m, tok, tgt);
    exec_gpt_free(m);
    return l;
}

Test(exec_init, hugging_face_bert_computes_what_transformers_does)
{
    util_err e;
    prof_model_spec spec;
    exec_gpt_config c;
    cr_assert_eq(prof_model_spec_get("tests/data/hf/bert-tiny/config.json",
                                     &spec, &e), 0, "%s", e.msg);
    cr_assert_eq(exec_gpt_config_from_spec(&spec, &c, "bert-tiny", &e), 0,
                 "%s", e.msg);
    cr_assert(c.encoder && c.gelu_erf && c.pooler && c.tied &&
              c.type_vocab == 2 && fabsf(c.norm_eps - 1e-12f) < 1e-15f);
    json_error_t je;
    json_t *x = json_load_file("tests/data/hf/bert-tiny/expected.json", 0,
                               &je);
    cr_assert_not_null(x, "%s", je.text);
    int tok[32], tgt[32];
    json_t *ids = json_object_get(x, "input_ids"),
           *lab = json_object_get(x, "labels"),
           *typ = json_object_get(x, "token_type_ids");
    cr_assert(json_array_size(ids) == 32 && json_array_size(lab) == 32);
    for (int i = 0; i < 32; i++) {
        tok[i] = (int)json_integer_value(json_array_get(ids, i));
        tgt[i] = (int)json_integer_value(json_array_get(lab, i));
        /* the pair's types as the executor gives them */
        cr_assert_eq(json_integer_value(json_array_get(typ, i)),
                     i >= exec_type_split(&c, 32));
    }
    double want = json_number_value(json_object_get(x, "mlm_loss"));
    double got = bert_tiny_loss(&c, tok, tgt, "model.safetensors");
    cr_expect(fabs(got - want) <= 1e-6 * want, "loss %.7f, transformers "
              "%.7f", got, want);
    exec_gpt_config g = c;
    g.gelu_erf = 0;
    double tanh_form = bert_tiny_loss(&g, tok, tgt, "model.safetensors");
    cr_expect(fabs(tanh_form - want) > 1e-5 * want, "GELU's tanh form gave "
              "the erf form's loss (%.7f)", tanh_form);
    g = c;
    g.norm_eps = 0;
    double eps5 = bert_tiny_loss(&g, tok, tgt, "model.safetensors");
    cr_expect(eps5 != got, "epsilon 1e-5 gave 1e-12's loss");
    /* the Hub's older files name a LayerNorm's weight and bias gamma and
     * beta: the same weights */
    cr_expect_eq(bert_tiny_loss(&c, tok, tgt, "model-gamma.safetensors"),
                 got, "gamma and beta read as weight and bias");
    /* a GPT-2 of the same sizes reads no BERT file */
    g = c;
    g.encoder = g.type_vocab = g.pooler = g.gelu_erf = 0;
    g.norm_eps = 0;
    float *w = malloc(sizeof(float) * 400000);
    cr_expect_eq(exec_safetensors_load("tests/data/hf/bert-tiny/"
                                       "model.safetensors", &g, w, &e), -1);
    cr_expect(strstr(e.msg, "BERT weights"), "%s", e.msg);
    free(w);
    json_decref(x);
}

Test(exec_init, wrong_weights_say_which_tensor)
{
    util_err e;
    /* another model's sizes */
    prof_model_spec spec;
    exec_gpt_config c;
    cr_assert_eq(prof_model_spec_get(PICO, &spec, &e), 0);
    cr_assert_eq(exec_gpt_config_from_spec(&spec, &c, "pico", &e), 0);
    exec_tensor tt[EXEC_P_COUNT];
    size_t P = exec_gpt_param_table(&c, tt);
    float *w = malloc(sizeof *w * (P + 1));
    cr_expect_eq(exec_safetensors_load(HF "model.safetensors", &c, w, &e), -1);
    cr_expect_eq(e.code, 2);
    cr_expect(strstr(e.msg, "model.safetensors: tensor 'transformer.h.0.mlp."
                            "c_fc.weight' dimension 1 is 128, the model "
                            "needs 64"), "%s", e.msg);
    /* a truncated file and a file that is not one */
    char *dir = test_tmpdir(), cut[600], junk[600];
    snprintf(cut, sizeof cut, "%s/cut.safetensors", dir);
    snprintf(junk, sizeof junk, "%s/junk.safetensors", dir);
    sh_run("head -c 5000 " HF "model.safetensors > %s; printf 'not a "
           "safetensors file' > %s", cut, junk);
    size_t P2;
    exec_gpt_config c2;
    cr_expect_null(load_hf(cut, &c2, &P2, &e));
    cr_expect(strstr(e.msg, "cut.safetensors: tensor") &&
              strstr(e.msg, "do not hold"), "%s", e.msg);
    cr_expect_null(load_hf(junk, &c2, &P2, &e));
    cr_expect(strstr(e.msg, "not a safetensors file"), "%s", e.msg);
    test_rm_rf(dir);
    free(w);
}

/* --init: a tensor-parallel pipeline starts from the Hugging Face weights
 * (its first loss is theirs on the first batch); what it saves, the
 * reference trainer continues and --init reads, whatever the plan. */
Test(exec_init, runs_start_from_weights_and_save_for_any_reader)
{
    pspec s = {HF "config.json", SIM_SCHED_1F1B, 2, 1, 2, 2, 2, 0, 0};
    sim_plan p;
    pipe_plan(&s, &p);
    exec_pipe_opts o = {0};
    o.plan = &p;
    o.data = CORPUS;
    o.steps = 3;
    o.adamw = pipe_adamw(1.0f);
    o.warmup = -1;
    o.seed = 1337;
    o.init = HF "model.safetensors";
    exec_pipe_result r;
    util_err e;
    cr_assert_eq(exec_pipe_run(&o, &r, &e), 0, "%s", e.msg);
    exec_gpt_config c;
    size_t P;
    float *w = load_hf(HF "model.safetensors", &c, &P, &e);
    cr_assert_not_null(w, "%s", e.msg);
    exec_gpt *m = exec_gpt_new(&c, r.B, r.T, 1);
    memcpy(exec_gpt_params(m), w, sizeof *w * P);
    exec_corpus corpus;
    cr_assert_eq(exec_corpus_load(&corpus, CORPUS, r.T, &e), 0);
    int *tok = malloc(sizeof(int) * (size_t)r.B * r.T);
    int *tgt = malloc(sizeof(int) * (size_t)r.B * r.T);
    exec_corpus_batch(&corpus, 0, 1337, 0, r.B, r.T, tok, tgt);
    double first = exec_gpt_forward(m, tok, tgt);
    cr_expect(fabs(first - r.loss[0]) <= 1e-5 * first, "first loss %.6f, "
              "the weights give %.6f", r.loss[0], first);
    /* saved as the trainer saves, read by the trainer and by --init */
    char *dir = test_tmpdir(), ck[600];
    snprintf(ck, sizeof ck, "%s/tp.ckpt", dir);
    exec_ckpt_meta meta = {r.cfg, r.B, r.T, 1337, 3, {0}};
    cr_assert_eq(exec_ckpt_save_state(ck, r.params, r.adam_m, r.adam_v,
                                      &meta, &e), 0, "%s", e.msg);
    cli_result x = cli_run("exec --model " HF "config.json --resume %s "
                           "--steps 4 --quiet --eval-batches 0", ck);
    cr_expect_eq(x.code, 0, "%s", x.err);
    cr_expect(strstr(x.out, "resumed from") && strstr(x.out, "at step 3"),
              "%s", x.out);
    cli_result_free(&x);
    o.init = ck;
    o.steps = 1;
    exec_pipe_result r2;
    cr_assert_eq(exec_pipe_run(&o, &r2, &e), 0, "%s", e.msg);
    cr_expect_eq(r2.step_first, 0);
    exec_pipe_result_free(&r2);
    test_rm_rf(dir);
    free(tok);
    free(tgt);
    exec_corpus_free(&corpus);
    exec_gpt_free(m);
    free(w);
    exec_pipe_result_free(&r);
    sim_plan_free(&p);
}

/* Llama's decoder (RoPE, RMSNorm, SwiGLU, grouped key and value heads),
 * OPT's (tests/data/exec/opt-pico.json: learned positions from the
 * table's row 2, ReLU, biases, a tied head)
 * and a graph with fused attention (one op, FlashAttention's):
 * every kind of schedule, data and tensor parallelism (the rank's query
 * heads with their key and value heads, gate and up columns) end with
 * the reference's weights, and with one microbatch and an untied head
 * its bits. */
#define LLAMA "tests/data/exec/llama-pico.json"
#define LLAMA_MHA "tests/data/exec/llama-pico-mha.json"
#define OPT "tests/data/exec/opt-pico.json"

Test(exec_pipe, llama_and_fused_attention_equal_the_reference)
{
    const pspec cases[] = {
        {LLAMA, SIM_SCHED_GPIPE, 2, 1, 1, 2, 4, 1, 0},
        {LLAMA, SIM_SCHED_1F1B, 3, 1, 1, 2, 4, SIM_RC_SELECTIVE, 0},
        {LLAMA, SIM_SCHED_ZBH1, 2, 1, 1, 2, 4, 0, 0},
        {LLAMA, SIM_SCHED_INTERLEAVED, 2, 1, 1, 2, 4, 0, 4},
        {LLAMA, SIM_SCHED_ZBV, 2, 1, 1, 2, 4, 0, 4},
        {LLAMA, SIM_SCHED_DUALPIPEV, 2, 1, 1, 2, 4, 0, 4},
        {LLAMA, SIM_SCHED_MIXED_1F1B, 2, 1, 1, 2, 4, 0, 5},
        {LLAMA, SIM_SCHED_1F1B, 2, 1, 2, 2, 4, 0, 0},
        {LLAMA, SIM_SCHED_ZBV, 2, 2, 2, 1, 4, 0, 4},
        {LLAMA_MHA, SIM_SCHED_1F1B, 2, 2, 2, 1, 4, 1, 0},
        {"tests/data/exec/gpt-pico-flash.json", SIM_SCHED_1F1B, 2, 1, 2, 2,
         4, SIM_RC_SELECTIVE, 0},
        /* OPT's: positions from the table's row 2, ReLU */
        {OPT, SIM_SCHED_1F1B, 3, 1, 1, 2, 4, 1, 0},
        {OPT, SIM_SCHED_ZBV, 2, 1, 1, 2, 4, 0, 4},
        {OPT, SIM_SCHED_1F1B, 2, 1, 2, 2, 4, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_sync(&cases[i], 1.0f);
}

Test(exec_pipe, llama_and_fused_attention_one_microbatch_bits)
{
    const pspec cases[] = {
        {LLAMA, SIM_SCHED_1F1B, 2, 1, 1, 8, 1, 0, 0},
        /* fused attention (FlashAttention) in the graph: one op, its
         * scores computed again in its backward, the same bits */
        {"tests/data/exec/gpt-pico-flash.json", SIM_SCHED_ZBH1, 2, 1, 1, 8,
         1, 1, 0},
        {LLAMA, SIM_SCHED_ZBH1, 3, 1, 1, 8, 1, 1, 0},
        {LLAMA, SIM_SCHED_INTERLEAVED, 2, 1, 1, 8, 1, 0, 6},
    };
    check_bits(cases, sizeof cases / sizeof *cases);
}

/* BERT: an encoder trained as a masked LM (exec_mlm_mask), post-LayerNorm
 * layers attending to every token, token types, the pooler no loss reads
 * and the head's transform before a decoder with a bias. Pipelines cut
 * it anywhere, with data and tensor parallelism, recomputation and
 * zero-bubble schedules, and end where the reference does. */
#define BERT "tests/data/exec/bert-pico.json"
#define BERT_UNTIED "tests/data/exec/bert-pico-untied.json"
#define BERT_FLASH "tests/data/exec/bert-pico-flash.json"

Test(exec_pipe, bert_equals_the_reference)
{
    const pspec cases[] = {
        {BERT, SIM_SCHED_GPIPE, 2, 1, 1, 2, 4, 1, 0},
        {BERT, SIM_SCHED_1F1B, 3, 1, 1, 2, 4, SIM_RC_SELECTIVE, 0},
        {BERT, SIM_SCHED_1F1B, 2, 2, 1, 2, 2, 0, 0},
        {BERT, SIM_SCHED_ZBH1, 2, 1, 1, 2, 4, 0, 0},
        {BERT, SIM_SCHED_INTERLEAVED, 2, 1, 1, 2, 4, 0, 4},
        {BERT, SIM_SCHED_ZBV, 2, 1, 1, 2, 4, 0, 4},
        {BERT_FLASH, SIM_SCHED_DUALPIPEV, 2, 1, 1, 2, 4, 0, 4},
        {BERT, SIM_SCHED_MIXED_1F1B, 2, 1, 1, 2, 4, 0, 5},
        /* tensor parallel: 257 words over 2 ranks (the decoder's bias
         * split with its rows, the last shard padded), the pooler and
         * the head's transform replicated */
        {BERT, SIM_SCHED_1F1B, 2, 1, 2, 2, 4, SIM_RC_SELECTIVE, 0},
        {BERT_FLASH, SIM_SCHED_ZBV, 2, 2, 2, 1, 4, 0, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_sync(&cases[i], 1.0f);
}

Test(exec_pipe, bert_one_microbatch_bits)
{
    const pspec cases[] = {
        {BERT_UNTIED, SIM_SCHED_1F1B, 2, 1, 1, 8, 1, 0, 0},
        {BERT_UNTIED, SIM_SCHED_GPIPE, 3, 1, 1, 8, 1, 1, 0},
        {BERT_FLASH, SIM_SCHED_ZBH1, 2, 1, 1, 8, 1, 1, 0},
        {BERT_UNTIED, SIM_SCHED_INTERLEAVED, 2, 1, 1, 8, 1, 0, 6},
    };
    check_bits(cases, sizeof cases / sizeof *cases);
}

/* A masked LM's batch: 15% of each row's tokens predicted, the others'
 * targets -1; of the predicted inputs most are the mask token; the same
 * rows drawn alike whatever batch they are read in (a pipeline's
 * microbatches against the reference's whole batch). */
Test(exec_pipe, bert_masks_what_it_predicts)
{
    util_err e;
    exec_corpus corpus;
    int B = 64, T = 40;
    cr_assert_eq(exec_corpus_load(&corpus, CORPUS, T, &e), 0, "%s", e.msg);
    exec_gpt_config c = {.vocab = 257, .encoder = 1};
    int *tok = malloc(sizeof(int) * B * T), *tgt = malloc(sizeof(int) * B * T);
    int *tok2 = malloc(sizeof(int) * B * T), *tgt2 = malloc(sizeof(int) * B * T);
    exec_corpus_rows(&corpus, 0, 7, 3, 0, B, T, tok, tgt);
    exec_mlm_mask(&c, 0, 7, 3, 0, B, T, tok, tgt);
    int K = exec_mlm_count(T), masked = 0, kept = 0;
    cr_assert_eq(K, 6);
    for (int b = 0; b < B; b++) {
        int n = 0;
        for (int t = 0; t < T; t++) {
            int i = b * T + t;
            if (tgt[i] < 0) continue;
            n++;
            cr_assert(tgt[i] < 256, "a target is a byte of the text");
            masked += tok[i] == 256;
            kept += tok[i] == tgt[i];
        }
        cr_assert_eq(n, K, "row %d predicts %d tokens", b, n);
    }
    /* 80% mask, 10% random, 10% kept (and a random one may be the same) */
    cr_assert(masked > 0.7 * B * K && masked < 0.9 * B * K, "%d", masked);
    cr_assert(kept > 0.05 * B * K && kept < 0.2 * B * K, "%d", kept);
    /* rows 10..19 read alone: the same draws */
    exec_corpus_rows(&corpus, 0, 7, 3, 10, 10, T, tok2, tgt2);
    exec_mlm_mask(&c, 0, 7, 3, 10, 10, T, tok2, tgt2);
    cr_assert(!memcmp(tok + 10 * T, tok2, sizeof(int) * 10 * T));
    cr_assert(!memcmp(tgt + 10 * T, tgt2, sizeof(int) * 10 * T));
    /* the validation split draws other positions */
    exec_corpus_rows(&corpus, 0, 7, 3, 0, B, T, tok2, tgt2);
    exec_mlm_mask(&c, 1, 7, 3, 0, B, T, tok2, tgt2);
    cr_assert(memcmp(tgt, tgt2, sizeof(int) * B * T));
    /* a decoder's batch is left as it is */
    c.encoder = 0;
    exec_corpus_rows(&corpus, 0, 7, 3, 0, B, T, tok2, tgt2);
    memcpy(tok, tok2, sizeof(int) * B * T);
    memcpy(tgt, tgt2, sizeof(int) * B * T);
    exec_mlm_mask(&c, 0, 7, 3, 0, B, T, tok2, tgt2);
    cr_assert(!memcmp(tok, tok2, sizeof(int) * B * T));
    cr_assert(!memcmp(tgt, tgt2, sizeof(int) * B * T));
    free(tok); free(tgt); free(tok2); free(tgt2);
    exec_corpus_free(&corpus);
}

/* A tied table's copies are summed in the first copy's buffer, with no
 * buffer of their own beside them: each holder's peak is the
 * simulator's (device 0 held a table more: 6.28 MiB against 5.40 with
 * gpt-pico-table's 8192-row table, 1F1B on two devices). */
Test(exec_pipe, a_tied_tables_sum_takes_no_buffer_of_its_own)
{
    sim_plan p;
    cli_plan("--hw 'cpu x2' --model tests/data/exec/gpt-pico-table.json "
             "--schedule 1f1b --pp 2 --mbs 2 --microbatches 4", &p);
    exec_pipe_result r;
    pipe_run(&p, 3, 1.0f, &r);
    for (int d = 0; d < 2; d++) {
        double sim = test_sim_peak(&r, d);
        cr_expect(fabs(r.peak_bytes[d] - sim) <= 0.03 * sim, "device %d: "
                  "measured %.0f bytes, simulated %.0f", d, r.peak_bytes[d],
                  sim);
    }
    exec_pipe_result_free(&r);
    sim_plan_free(&p);
}
