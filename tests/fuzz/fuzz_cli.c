/* Command-line targets: `sluice profile`, `sim`, `plan`, `validate` and
 * `exec` run in the scratch folder on a fuzzed command line. An input is the
 * arguments, one per line, up to the first NUL byte; each later
 * NUL-separated part is a file, in1, in2, in3, that the arguments may name
 * (a model spec, a server, a plan, a schedule CSV, a validation table).
 *
 * Limits, so that an input runs in milliseconds and touches nothing
 * outside the scratch folder: no '/' or '\' anywhere (paths, and JSON
 * escapes that could spell one); no --plot (it runs gnuplot); at most 32
 * arguments and 3 files; every number on the command line at most the
 * target's cap, and so every number of a file that is not JSON (a table,
 * a CSV, of at most 20 lines); a file that loads as a model, a server or a
 * plan no larger than the target allows (a JSON file that loads as none of
 * them fails fast wherever it is read). */
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "tests/fuzz/fuzz.h"

/* The commands' entry points, declared where they are called, as in
 * cli/main.c. */
int prof_cmd_main(int argc, char **argv);
int plan_cmd_main(int argc, char **argv);
int plan_validate_main(int argc, char **argv);
int exec_cmd_main(int argc, char **argv);

#define CLI_MAX_SIZE (16 * 1024)
#define CLI_MAX_ARGS 32
#define CLI_MAX_FILES 3
#define CLI_MAX_LINES 20

/* What one target's inputs may ask for. */
typedef struct cli_limits {
    long num_cap;       /* numbers on the command line and in tables */
    int max_layers;     /* of a model, named or in a file */
    int max_gpus;       /* of a server file */
} cli_limits;

typedef struct cli_input {
    char *text;     /* the input, NUL-terminated parts */
    char **argv;    /* argc + 1 entries, exactly: reading past the end is
                     * an overflow ASan sees */
    int argc;
} cli_input;

static int count_arg(const cli_input *c, const char *a)
{
    int n = 0;
    for (int i = 1; i < c->argc; i++) n += !strcmp(c->argv[i], a);
    return n;
}

static int model_small(const char *name, const cli_limits *l)
{
    util_err e;
    prof_model_spec s;
    return prof_model_spec_get(name, &s, &e) ||
           (long)s.layers + s.dec_layers <= l->max_layers;
}

/* Whether a file is within the limits, judged by what it loads as. */
static int file_small(const char *name, const char *text, size_t len,
                      const cli_limits *l)
{
    size_t i = 0;
    while (i < len && strchr(" \t\r\n", text[i])) i++;
    if (i == len || text[i] != '{') {
        size_t lines = 0;
        for (size_t k = 0; k < len; k++) lines += text[k] == '\n';
        return lines <= CLI_MAX_LINES &&
               fuzz_small_numbers(text, len, l->num_cap);
    }
    util_err e;
    prof_topo *t = prof_topo_load(name, &e);
    int ok = !t || t->n_gpus <= l->max_gpus;
    prof_topo_free(t);
    sim_plan p;
    if (!sim_plan_load(name, &p, &e))
        ok = ok && fuzz_plan_small(&p) && model_small(p.model, l);
    sim_plan_free(&p);
    return ok && model_small(name, l);
}

static void cli_free(cli_input *c)
{
    free(c->text);
    free(c->argv);
}

/* Splits data into arguments after cmd and files in the scratch folder
 * (so call it after fuzz_enter). 0, or -1 when the limits refuse it;
 * either way the caller frees c. */
static int cli_split(const uint8_t *data, size_t size, const char *cmd,
                     const cli_limits *l, cli_input *c)
{
    memset(c, 0, sizeof *c);
    size_t args_len = strnlen((const char *)data, size);
    if (size > CLI_MAX_SIZE || memchr(data, '/', size) ||
        memchr(data, '\\', size) ||
        !fuzz_small_numbers((const char *)data, args_len, l->num_cap))
        return -1;
    c->text = malloc(size + 1);
    memcpy(c->text, data, size);
    c->text[size] = 0;
    char *files = args_len < size ? c->text + args_len + 1 : NULL;
    char *a[CLI_MAX_ARGS + 1];
    int n = 0;
    a[n++] = (char *)cmd;
    char *p = c->text;
    /* a final newline ends the last argument, it does not start one */
    if (args_len && p[args_len - 1] == '\n') p[args_len - 1] = 0;
    while (args_len && p) {
        if (n > CLI_MAX_ARGS) return -1;
        a[n++] = p;
        p = strchr(p, '\n');
        if (p) *p++ = 0;
    }
    c->argc = n;
    c->argv = malloc(sizeof(char *) * (size_t)(n + 1));
    memcpy(c->argv, a, sizeof(char *) * (size_t)n);
    c->argv[n] = NULL;
    if (count_arg(c, "--plot")) return -1;
    for (int k = 1; files; k++) {
        if (k > CLI_MAX_FILES) return -1;
        const char *end = memchr(files, 0, size - (size_t)(files - c->text));
        size_t len = end ? (size_t)(end - files) : strlen(files);
        char name[8];
        snprintf(name, sizeof name, "in%d", k);
        fuzz_put(name, files, len);
        if (!file_small(name, files, len, l)) return -1;
        files = end && end < c->text + size ? (char *)end + 1 : NULL;
    }
    return 0;
}

/* exec trains: steps asked for (the default, 50, takes seconds), a
 * plan's global batch of at most 16 sequences, and no MPI (a process
 * initialises it once). */
static int skip_exec(const cli_input *c)
{
    int steps = 0;
    for (int i = 1; i < c->argc; i++) {
        const char *a = c->argv[i], *v = i + 1 < c->argc ? c->argv[i + 1] : "";
        if (!strcmp(a, "--steps")) steps = 1;
        if (!strcmp(a, "--transport") && !strcmp(v, "mpi")) return 1;
        if (!strcmp(a, "--plan")) {
            util_err e;
            sim_plan p;
            int big = !sim_plan_load(v, &p, &e) &&
                      (long)p.mbs * p.n_mb * (p.dp > 1 ? p.dp : 1) > 16;
            sim_plan_free(&p);
            if (big) return 1;
        }
    }
    return !steps;
}

/* A subcommand, its entry point and limits; skip refuses arguments. */
typedef struct cli_cmd {
    const char *name;
    int (*main_fn)(int, char **);
    cli_limits limits;
    int (*skip)(const cli_input *);
} cli_cmd;

/* The search grows with layers, GPUs and batch: small models for plan and
 * validate (every row of a table is a search). */
static const cli_cmd cli_profile = {"profile", prof_cmd_main, {64, 1024, 64},
                                    NULL};
static const cli_cmd cli_sim = {"sim", sim_cmd_main, {16, 1024, 16}, NULL};
static const cli_cmd cli_plan = {"plan", plan_cmd_main, {16, 8, 16},
                                 NULL};
static const cli_cmd cli_validate = {"validate", plan_validate_main,
                                     {16, 16, 16}, NULL};
static const cli_cmd cli_exec = {"exec", exec_cmd_main, {4, 4, 4},
                                 skip_exec};

static int run_cli(const uint8_t *data, size_t size, const cli_cmd *cmd)
{
    const cli_limits *l = &cmd->limits;
    cli_input c;
    fuzz_enter();
    int rc = cli_split(data, size, cmd->name, l, &c);
    for (int i = 1; !rc && i + 1 < c.argc; i++)
        if (!strcmp(c.argv[i], "--model") && !model_small(c.argv[i + 1], l))
            rc = -1;
    if (!rc && cmd->skip && cmd->skip(&c)) rc = -1;
    if (!rc) cmd->main_fn(c.argc, c.argv);
    cli_free(&c);
    fuzz_leave();
    return rc;
}

#define FUZZ_CLI(cmd) \
    int fuzz_##cmd(const uint8_t *data, size_t size) \
    { return run_cli(data, size, &cmd); }
FUZZ_CLI(cli_profile)
FUZZ_CLI(cli_sim)
FUZZ_CLI(cli_plan)
FUZZ_CLI(cli_validate)
FUZZ_CLI(cli_exec)
