/* exec's device backends: the CPU backend's operations against plain
 * loops (bit for bit: the runtime's bits rest on them), the caching
 * allocator through a backend, and how a build without CUDA answers a
 * request for it (library and command line). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/runtime.h"
#include "tests/harness.h"

#define PICO "tests/data/exec/gpt-pico.json"

static float *ramp(size_t n, float a)
{
    float *x = malloc(sizeof *x * (n + 1));
    for (size_t i = 0; i < n; i++) x[i] = a * (float)(i % 97) - 0.37f;
    return x;
}

Test(exec_backend, cpu_operations_are_the_loops)
{
    util_err e;
    const exec_backend *be = exec_backend_get("cpu", &e);
    cr_assert_eq(be, &exec_backend_cpu);
    cr_assert(be->host_memory && be->k == &kern_cpu && !be->fence);
    exec_dev d = {.be = be, .worker = 3};
    cr_assert_eq(be->open(&d, &e), 0);
    cr_assert_eq(d.index, 3);
    cr_assert_eq(be->bind(&d, EXEC_ROLE_SETUP, &e), 0);
    size_t n = 1001;
    char why[64];
    float *a = be->alloc(&d, n * sizeof *a, why, sizeof why);
    float *b = be->alloc(&d, n * sizeof *b, why, sizeof why);
    cr_assert(a && b);
    float *x = ramp(n, 0.013f), *y = ramp(n, -0.021f), *h = ramp(n, 0);
    be->from_host(a, x, n * sizeof *x);
    be->copy(b, y, n * sizeof *y);
    be->acc(a, b, n);
    be->to_host(h, a, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(h[i], x[i] + y[i], "acc[%zu]", i);
    /* the norm continues one double sum in index order, across calls */
    double want = 0, got = 0;
    for (size_t i = 0; i < n; i++) want += (double)h[i] * h[i];
    be->norm_sq(&got, a, 400);
    be->norm_sq(&got, a + 400, n - 400);
    cr_assert_eq(got, want);
    be->zero(a, n);
    be->to_host(h, a, n * sizeof *h);
    for (size_t i = 0; i < n; i++) cr_assert_eq(h[i], 0.0f);
    cr_assert_eq(be->sync(&e), 0);
    be->release(&d, a);
    be->release(&d, b);
    be->unbind();
    be->close(&d);
    free(x);
    free(y);
    free(h);
}

/* Blocks come back for the next tensor of the same size; the budget
 * counts live tensors and names what did not fit. */
Test(exec_backend, memory_reuses_blocks_within_the_budget)
{
    exec_dev d = {.be = &exec_backend_cpu};
    exec_mem m;
    exec_mem_init(&m, 1000.0, &d);
    exec_buf *a = exec_buf_new(&m, 100, 1);
    cr_assert_not_null(a);
    for (int i = 0; i < 100; i++) cr_assert_eq(a->p[i], 0.0f);
    a->p[7] = 5;
    float *p = a->p;
    exec_buf_unref(a);
    cr_assert_eq(m.cur, 0);
    exec_buf *b = exec_buf_new(&m, 100, 1);
    cr_assert_eq(b->p, p, "a freed block is reused");
    cr_assert_eq(b->p[7], 0.0f, "and zeroed when asked");
    cr_assert_null(exec_buf_new(&m, 200, 0), "600 more bytes than 1000");
    util_err e;
    exec_mem_oom(&m, "a test tensor", &e);
    cr_assert(strstr(e.msg, "out of memory") &&
              strstr(e.msg, "a test tensor"), "%s", e.msg);
    cr_assert_eq(m.peak, 400);
    exec_buf_unref(b);
    exec_mem_destroy(&m);
}

Test(exec_backend, cuda_without_cuda_is_refused)
{
    util_err e;
    cr_assert_null(exec_backend_get("cuda", &e));
    cr_assert_eq(e.code, UTIL_EXIT_USAGE);
    cr_assert(strstr(e.msg, "make cuda"), "%s", e.msg);
    cr_assert_null(exec_backend_get("tpu", &e));
    cr_assert(strstr(e.msg, "expected cpu or cuda"), "%s", e.msg);
}

/* The command line: one line and code 2, before any work. */
Test(exec_backend, cli_names_what_is_missing)
{
    char *dir = test_tmpdir();
    cli_result r = cli_run("sim --hw cpu x2 --model %s --schedule 1f1b --pp 2 "
                           "--mbs 2 --microbatches 2 --out %s/p.json", PICO,
                           dir);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_result_free(&r);
    /* the suite runs bin/sluice, built without CUDA */
    r = cli_run("exec --plan %s/p.json --steps 1 --backend cuda", dir);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "built without CUDA") &&
                  strstr(r.err, "make cuda"), "%s", r.err);
    cr_expect_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1,
                 "one line: %s", r.err);
    cr_expect_str_empty(r.out, "no work before the refusal");
    cli_result_free(&r);
    /* a GPU type is calibrated on GPUs: refused before anything runs */
    r = cli_run("calibrate --hw rtx4090 x1 --quick --out %s/g.json", dir);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "rtx4090") && strstr(r.err, "make cuda"), "%s",
              r.err);
    cr_expect_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1,
                 "one line: %s", r.err);
    char g[600];
    snprintf(g, sizeof g, "%s/g.json", dir);
    cr_expect_neq(access(g, F_OK), 0, "nothing written");
    cli_result_free(&r);
    r = cli_run("exec --plan %s/p.json --steps 1 --backend tpu", dir);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "expected cpu or cuda"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --plan %s/p.json --steps 1 --transport nccl", dir);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "--backend cuda"), "%s", r.err);
    cli_result_free(&r);
    /* MPI outside mpirun: said (it said mpirun started one rank) */
    r = cli_run("exec --plan %s/p.json --steps 1 --transport mpi", dir);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "started by mpirun, and this process was not"),
              "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --model %s --backend cpu", PICO);
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "--backend needs --plan"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("exec --help");
    cr_expect(strstr(r.out, "--backend B"), "%s", r.out);
    cli_result_free(&r);
    test_rm_rf(dir);
}
