/* Test helpers: run the sluice binary under test (SLUICE_BIN, default
 * bin/sluice) and capture its output and exit code. */
#ifndef SLUICE_TEST_HARNESS_H
#define SLUICE_TEST_HARNESS_H

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
/* The standard server or cluster of n GPUs of a built-in type (`--hw GPU
 * xN`); fails the test when there is none. */
struct prof_topo;
struct prof_topo *test_topo(const char *gpu, int n);

#endif
