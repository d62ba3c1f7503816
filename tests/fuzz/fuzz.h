/* Fuzz targets: every parser of sluice behind libFuzzer's signature, one
 * function per target. `make fuzz` links each with libFuzzer (clang, ASan,
 * UBSan); `make test` replays the committed corpora and crash files through
 * the same functions (tests/fuzz/replay.c, gcc, plain and sanitised).
 * Targets write only inside a scratch folder of their own, removed after
 * every input, and print to /dev/null. */
#ifndef SLUICE_FUZZ_H
#define SLUICE_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* A target returns 0, or -1 for an input its limits refuse (too large to
 * run in milliseconds, or naming something outside the scratch folder):
 * libFuzzer then keeps it out of the corpus. */
typedef int (*fuzz_fn)(const uint8_t *data, size_t size);

typedef struct fuzz_target {
    const char *name;   /* folder under tests/fuzz/corpus and crashes */
    fuzz_fn fn;
} fuzz_target;

/* Every target, NULL-terminated. */
extern const fuzz_target fuzz_targets[];
const fuzz_target *fuzz_target_find(const char *name);

/* The file targets (fuzz_files.c) and the command-line targets
 * (fuzz_cli.c). */
int fuzz_gpus(const uint8_t *data, size_t size);
int fuzz_hw(const uint8_t *data, size_t size);
int fuzz_model(const uint8_t *data, size_t size);
int fuzz_plan(const uint8_t *data, size_t size);
int fuzz_schedcsv(const uint8_t *data, size_t size);
int fuzz_ckpt(const uint8_t *data, size_t size);
int fuzz_cli_profile(const uint8_t *data, size_t size);
int fuzz_cli_sim(const uint8_t *data, size_t size);
int fuzz_cli_plan(const uint8_t *data, size_t size);
int fuzz_cli_validate(const uint8_t *data, size_t size);
int fuzz_cli_exec(const uint8_t *data, size_t size);

/* ---- the scratch folder (fuzz_common.c) ---- */

/* Makes a scratch folder for one input (under $TMPDIR, else /dev/shm or
 * /tmp), enters it and sends stdout and stderr to /dev/null (unless
 * FUZZ_SHOW is set in the environment); sanitizer reports still reach
 * fd 2. */
void fuzz_enter(void);
/* Goes back, removes the scratch folder and restores the streams. */
void fuzz_leave(void);
/* Writes a file into the scratch folder (call between enter and leave). */
void fuzz_put(const char *name, const void *data, size_t size);

/* Whether every run of digits in data, read as a number, is at most cap
 * (digits in the name of a built-in GPU type or model aside): the sizes
 * (GPUs, microbatches, rows) a command-line input may ask for, so that one
 * input runs in milliseconds. */
int fuzz_small_numbers(const char *data, size_t size, long cap);

/* Whether a loaded plan is small enough to simulate in milliseconds and
 * names nothing outside the scratch folder (fuzz_files.c). */
struct sim_plan;
int fuzz_plan_small(const struct sim_plan *p);

#endif
