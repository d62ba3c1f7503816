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

#include "profiles/profiles.h"

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
