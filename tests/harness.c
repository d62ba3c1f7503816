/* See harness.h. Output goes through temporary files, so long outputs
 * cannot dead-lock a pipe. */
#include "tests/harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <math.h>

#include "profiles/profiles.h"
#include "exec/runtime.h"
#include "planner/planner.h"

/* The suite never sees the calibrations of the user running it: no
 * profile directory unless a test names one. */
__attribute__((constructor)) static void no_profile_dir(void)
{
    setenv("SLUICE_PROFILE_DIR", "", 1);
}

prof_topo *test_topo(const char *gpu, int n)
{
    util_err e;
    prof_topo *t = prof_topo_template(gpu, n, NULL, &e);
    cr_assert_not_null(t, "%s x%d: %s", gpu, n, e.msg);
    return t;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t r = fread(b, 1, (size_t)n, f);
    b[r] = 0;
    fclose(f);
    return b;
}

char *test_tmpdir(void)
{
    char tmpl[] = "/tmp/sluice-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

/* The result of a run with wait status st whose output went to dir/out
 * and dir/err; removes them and dir. */
static cli_result collect(int st, char *dir)
{
    cli_result r;
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char p[512];
    snprintf(p, sizeof p, "%s/out", dir);
    r.out = slurp(p);
    unlink(p);
    snprintf(p, sizeof p, "%s/err", dir);
    r.err = slurp(p);
    unlink(p);
    rmdir(dir);
    free(dir);
    return r;
}

void test_rm_rf(char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(dir);
}

void test_ckpt_reseal(const char *path, char *buf, size_t len)
{
    cr_assert_geq(len, 8);
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i + 8 < len; i++) {
        h ^= (unsigned char)buf[i];
        h *= 0x100000001B3ull;
    }
    memcpy(buf + len - 8, &h, sizeof h);
    util_err e;
    cr_assert_eq(util_write_atomic(path, buf, len, &e), 0, "%s", e.msg);
    free(buf);
}

static cli_result cli_vrun(const char *fmt, va_list ap)
{
    char args[4096], cmd[8192];
    vsnprintf(args, sizeof args, fmt, ap);
    const char *bin = getenv("SLUICE_BIN");
    if (!bin) bin = "bin/sluice";
    char *dir = test_tmpdir();
    snprintf(cmd, sizeof cmd, "%s %s </dev/null >%s/out 2>%s/err", bin, args,
             dir, dir);
    return collect(system(cmd), dir);
}

cli_result cli_run(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_result r = cli_vrun(fmt, ap);
    va_end(ap);
    return r;
}

void cli_expect(int code, const char *want, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_result r = cli_vrun(fmt, ap);
    va_end(ap);
    const char *where = code ? r.err : r.out;
    cr_expect_eq(r.code, code, "exit %d, not %d: %s", r.code, code, r.err);
    if (want)
        cr_expect(strstr(where, want), "expected '%s' in: %s", want, where);
    cli_result_free(&r);
}

json_t *cli_json(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_result r = cli_vrun(fmt, ap);
    va_end(ap);
    json_t *j = json_loads(r.out, 0, NULL);
    /* sim answers a plan over a device's memory, and exits 1 */
    int oom = r.code == 1 && j && json_is_true(json_object_get(j, "oom"));
    cr_assert(r.code == 0 || oom, "exit %d: %s", r.code, r.err);
    cr_assert_not_null(j, "not JSON: %s", r.out);
    cli_result_free(&r);
    return j;
}

/* The binary under test as an absolute path, so a child may change
 * folder. */
static void abs_bin(char *out, size_t n)
{
    const char *bin = getenv("SLUICE_BIN");
    if (!bin) bin = "bin/sluice";
    char *r = realpath(bin, NULL);
    snprintf(out, n, "%s", r ? r : bin);
    free(r);
}

cli_result cli_runv(const char *cwd, const char *const *args)
{
    char bin[PATH_MAX], p[512];
    abs_bin(bin, sizeof bin);
    char *dir = test_tmpdir();
    int n = 0;
    while (args[n]) n++;
    char **argv = calloc((size_t)n + 2, sizeof *argv);
    argv[0] = bin;
    for (int i = 0; i < n; i++) argv[i + 1] = (char *)args[i];
    pid_t pid = fork();
    if (pid == 0) {
        snprintf(p, sizeof p, "%s/out", dir);
        int o = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        snprintf(p, sizeof p, "%s/err", dir);
        int er = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (o < 0 || er < 0 || in < 0 || (cwd && chdir(cwd))) _exit(126);
        dup2(in, 0);
        dup2(o, 1);
        dup2(er, 2);
        execv(bin, argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    free(argv);
    return collect(st, dir);
}

int sh_run(const char *fmt, ...)
{
    char bin[PATH_MAX], cmd[8192];
    abs_bin(bin, sizeof bin);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("SLUICE", bin, 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void cli_result_free(cli_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

/* ---------------------------------------------- pipeline executor runs */

void pipe_plan(const pspec *s, sim_plan *p)
{
    util_err e;
    prof_model *m = prof_model_load(s->model, &e);
    cr_assert_not_null(m, "%s", e.msg);
    sim_plan_init(p);
    snprintf(p->model, sizeof p->model, "%s", s->model);
    snprintf(p->hw, sizeof p->hw, "cpu x%d", s->pp * (s->dp ? s->dp : 1) *
                                                (s->tp ? s->tp : 1));
    p->sched = s->sched;
    p->pp = s->pp;
    p->dp = s->dp ? s->dp : 1;
    p->tp = s->tp ? s->tp : 1;
    p->mbs = s->mbs;
    p->n_mb = s->nmb;
    p->recompute = s->recompute;
    p->waves = 1;
    int S = s->stages ? s->stages : s->pp;
    if (s->sched == SIM_SCHED_INTERLEAVED) p->chunks = S / s->pp;
    sim_plan_stages(p, S);
    prof_gpu g;
    cr_assert_eq(prof_gpu_get("cpu", &g, &e), 0);
    cr_assert_eq(sim_partition_balanced(m, &g, s->mbs, S, p->first_op,
                                        p->last_op, &e), 0, "%s", e.msg);
    sim_sched_opts so = {.sched = s->sched, .pp = s->pp, .n_stages = S,
                         .waves = 1};
    sim_sched_map(&so, p->stage_device);
    if (s->sched == SIM_SCHED_MIXED || s->sched == SIM_SCHED_MIXED_1F1B ||
        s->sched == SIM_SCHED_MIXED_GPIPE)
        for (int k = 0; k < S; k++) p->stage_device[k] = (S - 1 - k) % s->pp;
    prof_model_free(m);
}

void cli_plan(const char *args, sim_plan *p)
{
    char *dir = test_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    cli_result r = cli_run("sim %s --out %s", args, path);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    util_err e;
    cr_assert_eq(sim_plan_load(path, p, &e), 0, "%s", e.msg);
    unlink(path);
    rmdir(dir);
    free(dir);
}

exec_adamw pipe_adamw(float clip)
{
    return (exec_adamw){.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                        .eps = 1e-6f, .weight_decay = 0.1f, .clip = clip};
}

exec_pipe_opts pipe_opts(const sim_plan *p, int steps, float clip)
{
    exec_pipe_opts o = {0};
    o.plan = p;
    o.data = TEST_CORPUS;
    o.steps = steps;
    o.adamw = pipe_adamw(clip);
    o.warmup = -1;
    o.seed = 1337;
    return o;
}

void pipe_run_lr(const sim_plan *p, int steps, float clip, float lr,
                 exec_pipe_result *r)
{
    exec_pipe_opts o = pipe_opts(p, steps, clip);
    if (lr > 0) {
        o.adamw.lr = lr;
        o.adamw.eps = 1e-8f;
    }
    util_err e = {0};
    cr_assert_eq(exec_pipe_run(&o, r, &e), 0, "%s: %s",
                 sim_sched_name(p->sched), e.msg);
}

void pipe_run(const sim_plan *p, int steps, float clip, exec_pipe_result *r)
{
    pipe_run_lr(p, steps, clip, 0, r);
}

float *train_reference(const char *model, int B, int steps, uint64_t seed,
                       exec_adamw a, int moments, size_t *P)
{
    util_err e;
    exec_train_opts t;
    exec_train_defaults(&t);
    prof_model_spec spec;
    cr_assert_eq(prof_model_spec_get(model, &spec, &e), 0, "%s", e.msg);
    cr_assert_eq(exec_gpt_config_from_spec(&spec, &t.cfg, model, &e), 0);
    char *dir = test_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/ref.ckpt", dir);
    t.data = TEST_CORPUS;
    t.steps = steps;
    t.B = B;
    t.T = spec.seq_len;
    t.adamw = a;
    t.seed = seed;
    t.quiet = 1;
    t.eval_batches = 0;
    t.save = path;
    FILE *devnull = fopen("/dev/null", "w");
    t.out = devnull;
    exec_train_result tr;
    cr_assert_eq(exec_train(&t, &tr, &e), 0, "%s", e.msg);
    fclose(devnull);
    exec_tensor tt[EXEC_P_COUNT];
    *P = exec_gpt_param_table(&t.cfg, tt);
    float *w = malloc(sizeof *w * ((moments ? 3 : 1) * *P + 1));
    exec_ckpt_meta meta;
    cr_assert_eq(exec_ckpt_load_state(path, &t.cfg, w,
                                      moments ? w + *P : NULL,
                                      moments ? w + 2 * *P : NULL, &meta, &e),
                 0, "%s", e.msg);
    unlink(path);
    rmdir(dir);
    free(dir);
    return w;
}

float *pipe_reference(const char *model, int B, int steps, float clip,
                      size_t *P)
{
    return train_reference(model, B, steps, 1337, pipe_adamw(clip), 0, P);
}

void expect_close(const float *a, const float *b, size_t n, double tol,
                  const char *what)
{
    double md = 0, mw = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md) md = d, at = i;
        if (fabs(a[i]) > mw) mw = fabs(a[i]);
    }
    cr_expect(md <= tol * mw, "%s: max |difference| %.3g at %zu (%g vs %g), "
              "bound %.3g", what, md, at, a[at], b[at], tol * mw);
}

void test_sim_plan(const sim_plan *p, const prof_topo *t, test_sim *x)
{
    util_err e;
    memset(x, 0, sizeof *x);
    x->m = sim_plan_model(p, t, &e);
    cr_assert_not_null(x->m, "%s", e.msg);
    cr_assert_eq(plan_simulate(p, x->m, t, 0, 0, &x->c, &x->ir, &x->en,
                               &x->r, &e), 0, "%s", e.msg);
}

void test_sim_free(test_sim *x)
{
    sim_engine_free(x->en);
    sim_ir_free(x->ir);
    sim_costs_free(x->c);
    prof_model_free(x->m);
    memset(x, 0, sizeof *x);
}

void pipe_set_ft(sim_plan *p, const char *ft)
{
    util_err e;
    cr_assert_eq(prof_finetune_parse(ft, &p->ft, &e), 0, "%s", e.msg);
}

exec_gpt_config test_gpt_config(const char *model)
{
    util_err e;
    prof_model_spec spec;
    exec_gpt_config c;
    cr_assert_eq(prof_model_spec_get(model, &spec, &e), 0, "%s", e.msg);
    cr_assert_eq(exec_gpt_config_from_spec(&spec, &c, model, &e), 0, "%s",
                 e.msg);
    return c;
}

double test_sim_peak(const exec_pipe_result *r, int d)
{
    sim_run_opts so = {0};
    sim_engine *en = sim_engine_new(r->ir, r->costs, &so);
    sim_result res;
    cr_assert_eq(sim_engine_run(en, &res), 0, "%s", res.msg);
    double v = res.dev[d].peak_bytes;
    sim_engine_free(en);
    return v;
}

void expect_mode_peaks(const pspec *s, const char *const *modes, int n,
                       double tol)
{
    double full[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        sim_plan p;
        pipe_plan(s, &p);
        pipe_set_ft(&p, modes[i]);
        exec_pipe_result r;
        pipe_run(&p, 2, 1.0f, &r);
        for (int d = 0; d < 2 && d < r.n_devices; d++) {
            double meas = r.peak_bytes[d], sim = test_sim_peak(&r, d);
            cr_expect(fabs(meas - sim) <= tol * sim, "%s %s, device %d: "
                      "measured %.0f bytes, simulated %.0f", s->model,
                      modes[i], d, meas, sim);
            if (!i) full[d] = meas;
            else
                cr_expect_lt(meas, full[d], "%s %s, device %d: %.0f bytes, "
                             "full training %.0f", s->model, modes[i], d,
                             meas, full[d]);
        }
        exec_pipe_result_free(&r);
        sim_plan_free(&p);
    }
}

void expect_qlora_is_lora(sim_plan *p, const exec_pipe_result *q,
                          const pspec *tp)
{
    size_t P = q->n_params;
    char *dir = test_tmpdir(), ck[600];
    snprintf(ck, sizeof ck, "%s/rounded.ckpt", dir);
    float *zero = calloc(P + 1, sizeof *zero);
    exec_ckpt_meta meta = {q->cfg, q->B, q->T, 1337, 0, {0}};
    util_err e;
    cr_assert_eq(exec_ckpt_save_state(ck, q->params, zero, zero, &meta, &e),
                 0, "%s", e.msg);
    pipe_set_ft(p, "lora:4:all");   /* QLoRA's default targets */
    exec_pipe_opts o = pipe_opts(p, 5, 1.0f);
    o.init = ck;
    exec_pipe_result l;
    cr_assert_eq(exec_pipe_run(&o, &l, &e), 0, "%s", e.msg);
    cr_assert_eq(l.n_lora, q->n_lora);
    cr_expect(!memcmp(l.lora, q->lora, sizeof *l.lora * l.n_lora),
              "%s: the adapters differ from LoRA's over the rounded base",
              p->model);
    cr_expect(!memcmp(l.params, q->params, sizeof *l.params * P),
              "%s: LoRA wrote the rounded base", p->model);
    sim_plan p2;
    pipe_plan(tp, &p2);
    pipe_set_ft(&p2, "qlora:4");
    exec_pipe_result t;
    pipe_run(&p2, 5, 1.0f, &t);
    cr_expect(!memcmp(t.params, q->params, sizeof *t.params * P),
              "%s: tensor parallelism rounded the base otherwise", p->model);
    expect_close(q->lora, t.lora, q->n_lora, 1e-5, "qlora, tensor parallel");
    /* the frozen base held in 4 bits */
    for (int d = 0; d < 2; d++)
        cr_expect_lt(q->peak_bytes[d], l.peak_bytes[d], "%s, device %d: "
                     "QLoRA %.0f bytes, LoRA %.0f", p->model, d,
                     q->peak_bytes[d], l.peak_bytes[d]);
    test_rm_rf(dir);
    free(zero);
    exec_pipe_result_free(&l);
    exec_pipe_result_free(&t);
    sim_plan_free(&p2);
}

void expect_drive_bytes(const exec_pipe_result *r, const char *what)
{
    double sim = 0;
    int ios = 0;
    for (int id = 0; id < r->n_tasks; id++) {
        const sim_task *k = &r->ir->tasks[id];
        if (!sim_kind_nvme(k->kind)) continue;
        sim += k->bytes;
        ios++;
    }
    double got = (r->ofl_read_bytes + r->ofl_write_bytes) /
                 (r->steps_run > 0 ? r->steps_run : 1);
    /* each tensor-parallel rank's regions are aligned on their own */
    int tp = r->costs && r->costs->tp > 1 ? r->costs->tp : 1;
    cr_expect(ios > 0, "%s: no NVMe task in the IR", what);
    cr_expect(got >= sim - 1 &&
                  got <= sim + 4.0 * ios * tp * EXEC_TFILE_ALIGN,
              "%s: the drives moved %.0f bytes a step, the IR %.0f in %d "
              "tasks", what, got, sim, ios);
}
