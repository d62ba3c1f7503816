/* Every `bin/sluice` command the README shows runs and succeeds (paths
 * under /tmp/ are moved into a fresh folder of the test's own). */
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
        if (!in_sh || strncmp(line, "bin/sluice ", 11)) continue;
        char *hash = strstr(line, "  #");
        if (hash) *hash = 0;
        line[strcspn(line, "\n")] = 0;
        /* Rewrite /tmp/ into the test's folder. */
        char args[4096] = "";
        for (const char *p = line + 11; *p;) {
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
