/* Test helpers: run the sluice binary under test (SLUICE_BIN, default
 * bin/sluice) and capture its output and exit code. */
#ifndef SLUICE_TEST_HARNESS_H
#define SLUICE_TEST_HARNESS_H

#include "exec/exec.h"
#include "sim/sim.h"

typedef struct cli_result {
    int code;     /* exit code, or 128+signal */
    char *out;    /* stdout, malloc'd */
    char *err;    /* stderr, malloc'd */
} cli_result;

/* Runs `sluice ARGS` through /bin/sh (ARGS is shell words). */
cli_result cli_run(const char *args_fmt, ...)
    __attribute__((format(printf, 1, 2)));
/* Runs `sluice ARGS` and expects exit code `code` and, where want is not
 * NULL, want in its stdout (code 0) or its stderr (any other code). */
void cli_expect(int code, const char *want, const char *args_fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Runs the command, which must exit 0 (or 1 with "oom": true, a sim
 * answer over a device's memory) and print JSON; the parsed output
 * (json_decref it). */
json_t *cli_json(const char *args_fmt, ...)
    __attribute__((format(printf, 1, 2)));
/* Runs the binary with args (NULL-terminated, no shell: any bytes pass)
 * in folder cwd (NULL: the current one), stdin from /dev/null. */
cli_result cli_runv(const char *cwd, const char *const *args);
/* mpirun for two ranks as the tests run it (as root too; MPI's own
 * allocations are not ours: leak checks off), for sh_run commands. */
#define MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " \
               "OMPI_MCA_rmaps_base_oversubscribe=1 ASAN_OPTIONS=detect_leaks=0 " \
               "mpirun -np 2"
/* Runs `sh -c CMD` where CMD may name the binary under test as $SLUICE
 * (an absolute path); returns the exit code, or 128+signal. */
int sh_run(const char *cmd_fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_result_free(cli_result *r);
/* A fresh temporary folder for a test (removed by the caller if wanted). */
char *test_tmpdir(void);
/* Removes a folder of test_tmpdir and all in it, and frees dir. */
void test_rm_rf(char *dir);
/* Writes buf (len bytes, a checkpoint or LoRA state edited by a test) to
 * path atomically with its last 8 bytes the FNV-1a 64 checksum of the
 * rest, as exec/checkpoint.c seals them (computed here, apart from it),
 * and frees buf. */
void test_ckpt_reseal(const char *path, char *buf, size_t len);
/* The standard server or cluster of n GPUs of a built-in type (`--hw GPU
 * xN`); fails the test when there is none. */
struct prof_topo;
struct prof_topo *test_topo(const char *gpu, int n);


/* ---------------------------------------------- pipeline executor runs */

/* The text the executor's tests train on. */
#define TEST_CORPUS "/usr/share/common-licenses/GPL-3"

/* A plan for tests: model, schedule, layout, microbatches, recomputation,
 * stages (0: pp). */
typedef struct pspec {
    const char *model;
    sim_sched sched;
    int pp, dp, tp, mbs, nmb, recompute, stages;
} pspec;

/* A plan as `sluice sim` makes it: balanced cuts on the CPU device, the
 * schedule's own stage map (LPT for Mixed-pipe, as sim does). */
void pipe_plan(const pspec *s, sim_plan *p);
/* The plan `sluice sim ARGS --out` writes. */
void cli_plan(const char *args, sim_plan *p);
/* The tests' AdamW: lr 2e-3, eps 1e-6 (see tests/test_exec_pipe.c). */
exec_adamw pipe_adamw(float clip);
/* Options of a run of plan p for steps from seed 1337 on the test text,
 * AdamW pipe_adamw(clip), the default warm-up. */
exec_pipe_opts pipe_opts(const sim_plan *p, int steps, float clip);
/* Runs plan p for steps from seed 1337 (fails the test on error); lr >
 * 0: that peak and the trainer's own eps (1e-8). */
void pipe_run_lr(const sim_plan *p, int steps, float clip, float lr,
                 exec_pipe_result *r);
void pipe_run(const sim_plan *p, int steps, float clip, exec_pipe_result *r);
/* Sets plan p's fine-tuning mode (the test fails on a bad one). */
void pipe_set_ft(sim_plan *p, const char *ft);
/* The executor's config of a model name or spec file. */
exec_gpt_config test_gpt_config(const char *model);
/* The reference trainer for steps of batch B from seed with AdamW a: its
 * final weights, then with moments its AdamW m and v (P floats each,
 * malloc'd). */
float *train_reference(const char *model, int B, int steps, uint64_t seed,
                       exec_adamw a, int moments, size_t *P);
/* The reference trainer on the same global batches: its final weights
 * (P floats, malloc'd). */
float *pipe_reference(const char *model, int B, int steps, float clip,
                      size_t *P);
/* Plan p simulated on topology t with its model (the test fails on an
 * error); test_sim_free frees all but t. */
typedef struct test_sim {
    struct prof_model *m;
    sim_costs *c;
    sim_ir *ir;
    sim_engine *en;
    sim_result r;
} test_sim;
void test_sim_plan(const sim_plan *p, const struct prof_topo *t,
                   test_sim *x);
void test_sim_free(test_sim *x);
/* The simulator's peak of a run's own IR and costs on device d. */
double test_sim_peak(const exec_pipe_result *r, int d);
/* Plan s under each fine-tuning mode of modes (the first "full"), 2
 * steps: each device's peak within tol of the simulator's, and below
 * full training's under the others. */
void expect_mode_peaks(const pspec *s, const char *const *modes, int n,
                       double tol);
/* QLoRA is LoRA over the base as NF4 rounds it: q, plan p's run of 5
 * steps under qlora:4 (clip 1); LoRA on QLoRA's default targets from
 * that rounded base saved and read back (--init) gives its adapters
 * and base bit for bit; plan tp (tensor parallel) rounds the base
 * alike, its adapters within fp32 reordering; the 4-bit base leaves
 * each device less than LoRA's. p's mode is left lora:4:all. */
void expect_qlora_is_lora(sim_plan *p, const exec_pipe_result *q,
                          const pspec *tp);

/* Expects the drives' bytes a run moved per step (every worker's) to be
 * those of its IR's NVMe tasks, each rounded up to whole O_DIRECT blocks
 * (at most four regions a task: weights, moments, frozen weights; on
 * each tensor-parallel rank). */
void expect_drive_bytes(const exec_pipe_result *r, const char *what);
/* Expects max |a-b| <= tol * max |a| over n floats. */
void expect_close(const float *a, const float *b, size_t n, double tol,
                  const char *what);

#endif
