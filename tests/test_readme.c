/* Every `bin/sluice` command the README shows runs and succeeds, those
 * shown under `mpirun -np N` under mpirun (paths under /tmp/ are moved
 * into a fresh folder of the test's own). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

Test(readme, every_command_shown_runs)
{
    FILE *f = fopen("README.md", "r");
    cr_assert_not_null(f, "README.md not found (run from the repository root)");
    char *dir = test_tmpdir();
    char line[2048];
    int in_sh = 0, ran = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "```", 3)) {
            in_sh = !in_sh && !strncmp(line, "```sh", 5);
            continue;
        }
        /* mpirun -np N bin/sluice ...: the same under MPI */
        int mpi = 0;
        char *cmd = line;
        if (in_sh && !strncmp(line, "mpirun -np ", 11)) {
            char *b = strstr(line, " bin/sluice ");
            if (!b) continue;
            mpi = atoi(line + 11);
            cmd = b + 1;
        }
        if (!in_sh || strncmp(cmd, "bin/sluice ", 11)) continue;
        char *hash = strstr(cmd, "  #");
        if (hash) *hash = 0;
        cmd[strcspn(cmd, "\n")] = 0;
        /* Rewrite /tmp/ into the test's folder. */
        char args[4096] = "";
        for (const char *p = cmd + 11; *p;) {
            if (!strncmp(p, "/tmp/", 5)) {
                strncat(args, dir, sizeof args - strlen(args) - 1);
                strncat(args, "/", sizeof args - strlen(args) - 1);
                p += 5;
            } else {
                size_t l = strlen(args);
                if (l + 1 < sizeof args) { args[l] = *p; args[l + 1] = 0; }
                p++;
            }
        }
        if (mpi) {
            int rc = sh_run("OMPI_ALLOW_RUN_AS_ROOT=1 "
                            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                            "OMPI_MCA_rmaps_base_oversubscribe=1 "
                            "ASAN_OPTIONS=detect_leaks=0 mpirun -np %d "
                            "\"$SLUICE\" %s >/dev/null 2>&1", mpi, args);
            cr_expect_eq(rc, 0, "README command failed (%d): mpirun -np %d "
                         "bin/sluice %s", rc, mpi, args);
            ran++;
            continue;
        }
        cli_result r = cli_run("%s", args);
        cr_expect_eq(r.code, 0, "README command failed (%d): bin/sluice %s\n%s",
                     r.code, args, r.err);
        cli_result_free(&r);
        ran++;
    }
    fclose(f);
    cr_expect_geq(ran, 10, "only %d commands found", ran);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    free(dir);
}
