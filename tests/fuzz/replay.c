/* Replays fuzz inputs through the targets without libFuzzer, so that
 * `make test` runs every committed corpus and crash file with the normal
 * build (gcc, plain and under ASan+UBSan): a crash, a sanitizer report or
 * a leak fails it.
 *   fuzz_replay [-v] DIR              every file of DIR/corpus/<target>/
 *                                     and DIR/crashes/<target>/
 *   fuzz_replay [-v] TARGET FILE...   these files through one target
 * -v names each input as it runs; FUZZ_SHOW=1 in the environment shows
 * what the commands print. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/fuzz/fuzz.h"
#include "util/util.h"

static int verbose;

/* 1 when the target ran the file, 0 when its limits refused it, -1 when
 * it cannot be read. */
static int replay_file(const fuzz_target *t, const char *path)
{
    char *buf;
    size_t len;
    util_err e;
    if (util_read_file(path, &buf, &len, &e)) {
        fprintf(stderr, "fuzz_replay: %s\n", e.msg);
        return -1;
    }
    if (verbose) fprintf(stderr, "fuzz_replay: %s %s\n", t->name, path);
    int ran = t->fn((const uint8_t *)buf, len) == 0;
    if (!ran && verbose)
        fprintf(stderr, "fuzz_replay: %s: refused by the target's limits\n",
                path);
    free(buf);
    return ran;
}

static int visible(const struct dirent *d)
{
    return d->d_name[0] != '.';
}

/* Every file of dir/sub/<target>/ in name order; *n counts them, *ran
 * those the target did not refuse. A missing crashes folder is fine, a
 * missing corpus is not. */
static int replay_dir(const fuzz_target *t, const char *dir, const char *sub,
                      int *n, int *ran)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", dir, sub, t->name);
    struct dirent **names;
    int k = scandir(path, &names, visible, alphasort);
    if (k < 0) {
        if (!strcmp(sub, "crashes")) return 0;
        fprintf(stderr, "fuzz_replay: %s: no corpus for target %s\n", path,
                t->name);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < k; i++) {
        char file[4096 + 256];
        snprintf(file, sizeof file, "%s/%s", path, names[i]->d_name);
        int r = rc ? 0 : replay_file(t, file);
        if (r < 0) rc = -1;
        *ran += r > 0;
        (*n)++;
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    int a = 1;
    if (a < argc && !strcmp(argv[a], "-v")) {
        verbose = 1;
        a++;
    }
    if (a + 1 == argc) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int n = 0, targets = 0, ran_all = 0;
        for (const fuzz_target *t = fuzz_targets; t->name; t++, targets++) {
            int ran = 0;
            if (replay_dir(t, argv[a], "corpus", &n, &ran) ||
                replay_dir(t, argv[a], "crashes", &n, &ran))
                return 1;
            /* limits that refuse a whole corpus test nothing */
            if (!ran) {
                fprintf(stderr, "fuzz_replay: target %s refused every input "
                        "of its corpus\n", t->name);
                return 1;
            }
            ran_all += ran;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("fuzz replay: %d inputs through %d targets (%d refused by "
               "their limits) in %.1f s\n", n, targets, n - ran_all,
               (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
        return 0;
    }
    const fuzz_target *t = a + 1 < argc ? fuzz_target_find(argv[a]) : NULL;
    if (!t) {
        fprintf(stderr, "usage: fuzz_replay [-v] DIR | [-v] TARGET FILE...\n"
                        "targets:");
        for (t = fuzz_targets; t->name; t++) fprintf(stderr, " %s", t->name);
        fprintf(stderr, "\n");
        return 2;
    }
    for (a++; a < argc; a++)
        if (replay_file(t, argv[a]) < 0) return 1;
    return 0;
}
