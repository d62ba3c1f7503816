/* See harness.h. Output goes through temporary files, so long outputs
 * cannot dead-lock a pipe. */
#include "tests/harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "profiles/profiles.h"

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

cli_result cli_run(const char *fmt, ...)
{
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *bin = getenv("SLUICE_BIN");
    if (!bin) bin = "bin/sluice";
    char *dir = test_tmpdir();
    snprintf(cmd, sizeof cmd, "%s %s </dev/null >%s/out 2>%s/err", bin, args,
             dir, dir);
    int st = system(cmd);
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

void cli_result_free(cli_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}
