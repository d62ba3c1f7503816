/* sluice: one binary, git-style subcommands. Each module owns its command
 * (profiles/cmd_profile.c, sim/cmd_sim.c, planner/cmd_plan.c,
 * exec/cmd_exec.c); this file only dispatches, and checks that what went
 * to stdout got there. Exit codes: 0 success, 1 failed run (a lost write
 * to stdout included), 2 bad usage or bad input. */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "profiles/profiles.h"
#include "util/util.h"

#define SLUICE_VERSION "0.1.0"

/* A module that is not built yet leaves its entry NULL (weak reference), so
 * the command says so instead of failing to link. */
int prof_cmd_main(int argc, char **argv) __attribute__((weak));
int sim_cmd_main(int argc, char **argv) __attribute__((weak));
int plan_cmd_main(int argc, char **argv) __attribute__((weak));
int exec_cmd_main(int argc, char **argv) __attribute__((weak));
int plan_validate_main(int argc, char **argv) __attribute__((weak));
int exec_calibrate_main(int argc, char **argv) __attribute__((weak));

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} command;

static void usage(FILE *f, const command *cmds, int n)
{
    fprintf(f,
            "usage: sluice <command> [options]   (sluice <command> --help)\n"
            "\nSimulate, plan and execute pipeline-parallel training.\n\n"
            "commands:\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "  %-9s %s%s\n", cmds[i].name, cmds[i].summary,
                cmds[i].fn ? "" : " (not built yet)");
    fprintf(f, "\n--profile-dir DIR (any command): calibrated profiles from "
            "DIR, else\n$SLUICE_PROFILE_DIR, else ~/.config/sluice/profiles "
            "(sluice calibrate)\n");
    fprintf(f, "\nexit codes: 0 success, 1 failed run, 2 bad usage or input\n");
}

/* `--profile-dir DIR` is every command's: taken out of argv wherever it
 * stands before the command sees the rest (*dir: the last given). */
static int profile_dir_option(int *argc, char **argv, const char **dir)
{
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--profile-dir")) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "sluice: --profile-dir needs a folder\n");
                return -1;
            }
            prof_profile_dir_set(*dir = argv[++i]);
            continue;
        }
        if (!strncmp(a, "--profile-dir=", 14)) {
            prof_profile_dir_set(*dir = a + 14);
            continue;
        }
        argv[n++] = argv[i];
    }
    argv[n] = NULL;
    *argc = n;
    return 0;
}

/* A profile directory given by name must be one: a file is refused; one
 * that is not there yet is only calibrate's to make, so the others say
 * they go on with the built-in figures. */
static int profile_dir_check(const char *how, const char *dir,
                             const char *cmd, int own)
{
    struct stat st;
    if (!dir || !*dir) return 0;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            fprintf(stderr, "sluice: %s %s is not a folder\n", how, dir);
            return -1;
        }
        /* one whose profiles cannot be looked up is not an empty one (they
         * are found by name: searching it is enough) */
        if (access(dir, X_OK)) {
            fprintf(stderr, "sluice: %s %s: %s\n", how, dir,
                    strerror(errno));
            return -1;
        }
        return 0;
    }
    if (errno != ENOENT) {
        fprintf(stderr, "sluice: %s %s: %s\n", how, dir, strerror(errno));
        return -1;
    }
    if (strcmp(cmd, "calibrate")) {
        /* own: the command says it in its own words (exec --calibrate,
         * which needs the profile there) */
        if (!own)
            fprintf(stderr, "sluice: %s %s does not exist (sluice "
                    "calibrate makes it): no calibrated profiles\n", how,
                    dir);
        return 0;
    }
    /* calibrate makes the folder named, not the ones above it: a typo
     * there made a tree of stray folders (the default one, under the
     * user's config folder, is made with its parents) */
    char *up = util_strdup(dir);
    size_t n = strlen(up);
    while (n > 1 && up[n - 1] == '/') up[--n] = 0;
    char *slash = strrchr(up, '/');
    int rc = 0;
    if (slash) {
        if (slash == up) slash[1] = 0;
        else *slash = 0;
        if (stat(up, &st) || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "sluice: %s %s: its folder %s %s (calibrate "
                    "makes the profile folder, not the folders above it)\n",
                    how, dir, up, stat(up, &st) ? "does not exist"
                                                : "is not a folder");
            rc = -1;
        }
    }
    free(up);
    return rc;
}

static int run(int argc, char **argv)
{
    const char *pdir = NULL;
    if (profile_dir_option(&argc, argv, &pdir)) return UTIL_EXIT_USAGE;
    /* the environment's folder is checked as the option's: a file there
     * was read as a folder without profiles */
    const char *env = getenv("SLUICE_PROFILE_DIR");
    int own = 0;
    for (int i = 2; argc > 1 && !strcmp(argv[1], "exec") && i < argc; i++)
        own |= !strcmp(argv[i], "--calibrate");
    if (pdir ? profile_dir_check("--profile-dir", pdir,
                                 argc > 1 ? argv[1] : "", own)
             : profile_dir_check("SLUICE_PROFILE_DIR", env,
                                 argc > 1 ? argv[1] : "", own))
        return UTIL_EXIT_USAGE;
    const command cmds[] = {
        {"plan", plan_cmd_main,
         "search partitions, schedules and knobs for the best plan"},
        {"sim", sim_cmd_main, "simulate one training iteration of a plan"},
        {"exec", exec_cmd_main, "run a plan for real (CPU; CUDA on GPUs)"},
        {"calibrate", exec_calibrate_main,
         "measure this machine and fit its profile"},
        {"profile", prof_cmd_main,
         "list, show and validate hardware and model profiles"},
        {"validate", plan_validate_main,
         "predictions against published measurements (validation/*.csv)"},
    };
    const int n = (int)(sizeof cmds / sizeof cmds[0]);
    if (argc < 2) {
        usage(stderr, cmds, n);
        return UTIL_EXIT_USAGE;
    }
    const char *c = argv[1];
    if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) {
        usage(stdout, cmds, n);
        return 0;
    }
    if (!strcmp(c, "--version") || !strcmp(c, "version")) {
        printf("sluice %s\n", SLUICE_VERSION);
        return 0;
    }
    const char *names[8];
    for (int i = 0; i < n; i++) {
        names[i] = cmds[i].name;
        if (strcmp(c, cmds[i].name)) continue;
        if (!cmds[i].fn) {
            fprintf(stderr, "sluice %s: not built into this version yet\n", c);
            return UTIL_EXIT_FAIL;
        }
        return cmds[i].fn(argc - 1, argv + 1);
    }
    const char *near = util_closest(c, names, (size_t)n);
    fprintf(stderr, "sluice: unknown command '%s'", c);
    if (near) fprintf(stderr, " (did you mean '%s'?)", near);
    fprintf(stderr, "\n");
    usage(stderr, cmds, n);
    return UTIL_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    util_stdio_init();
    int rc = run(argc, argv);
    if (util_stdout_close() && rc == 0) rc = UTIL_EXIT_FAIL;
    return rc;
}
