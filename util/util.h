/* util: the lowest layer. Error reporting, JSON input with file:line:col
 * locations, "did you mean" suggestions, size parsing, atomic writes and
 * human tables. Nothing here knows about models, hardware or schedules.
 * Ownership: functions returning char* hand the caller a malloc'd string. */
#ifndef SLUICE_UTIL_H
#define SLUICE_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <jansson.h>

/* Exit codes of the command line, also carried by util_err.code. */
enum { UTIL_EXIT_OK = 0, UTIL_EXIT_FAIL = 1, UTIL_EXIT_USAGE = 2 };

/* An error message that already says where. code is an exit code:
 * UTIL_EXIT_USAGE for bad input or usage, UTIL_EXIT_FAIL for a failed run. */
typedef struct util_err {
    int code;
    /* a capacity the input lacks, where that is why it failed (the
     * module's own code, 0 none: sim's is the tier, SIM_TIER_DRAM or
     * SIM_TIER_NVME); util_errf clears it */
    int lack;
    double lack_by;           /* how many times what it has would do */
    char msg[1536];
} util_err;

/* Fills e (if not NULL) and returns -1, so callers can `return util_errf(..)`. */
int util_errf(util_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepends "prefix: " to an existing message. Returns -1. */
int util_err_prefix(util_err *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Impossible states: abort with file and line in every build. */
#define UTIL_NEVER(cond) \
    ((cond) ? util_never_(__FILE__, __LINE__, #cond), 1 : 0)
void util_never_(const char *file, int line, const char *what)
    __attribute__((noreturn));

/* malloc/calloc/realloc that abort on failure with the size asked for. */
void *util_malloc(size_t n);
void *util_calloc(size_t n, size_t size);
void *util_realloc(void *p, size_t n);
char *util_strdup(const char *s);
/* Keeps freed memory in the process for the next allocation of its size
 * (glibc: no fresh mapping, and no page faults, for each large array a
 * search allocates and frees thousands of times); a no-op elsewhere.
 * Idempotent. */
void util_heap_keep(void);

/* Levenshtein distance, case-insensitive, capped at 64 bytes of input. */
int util_edit_distance(const char *a, const char *b);
/* The candidate closest to word, or NULL when none is close enough
 * (distance at most max(2, strlen(word)/3)). Lends from candidates. */
const char *util_closest(const char *word, const char *const *candidates,
                         size_t n);

/* Parses sizes such as "256G", "11GiB", "1.5T", "4096" (bytes). K/M/G/T are
 * binary (1024-based) for memory; returns 0 and sets *bytes, or -1. */
int util_parse_size(const char *s, double *bytes);
/* The same, with its unit (K, M, G or T) required: a bare number is
 * bytes, which no one giving a memory size means. */
int util_parse_size_unit(const char *s, double *bytes);
/* What the help texts say of SIZE, as util_parse_size reads it: its own
 * paragraph, so a table's column widths do not bear on it. */
#define UTIL_SIZE_HELP \
    "SIZE is binary: K, M, G and T are KiB, MiB, GiB and TiB (768G, 768GB\n" \
    "and 768GiB are all 768 GiB, 768 x 2^30 bytes).\n"
/* Parses a positive or non-negative integer fully; -1 on junk or range. */
int util_parse_int(const char *s, long lo, long hi, long *out);
/* Parses a double fully; -1 on junk. */
int util_parse_double(const char *s, double *out);

/* Formats bytes as "10.75 GiB" into buf; returns buf. */
char *util_fmt_bytes(double bytes, char *buf, size_t n);
/* Two sizes as util_fmt_bytes gives them, with more decimals (up to six)
 * where two would say two different sizes alike ("needs 21.83 TiB, the
 * drives hold 21.83 TiB"). */
void util_fmt_bytes2(double a, char *ba, double b, char *bb, size_t n);
/* Formats a rate in bytes/s as "12.0 GB/s" (decimal, as datasheets do). */
char *util_fmt_bw(double bytes_per_s, char *buf, size_t n);
/* Formats a count with a metric suffix: 2.85B, 335.1M, 12.3k. */
char *util_fmt_count(double n, char *buf, size_t len);
/* Formats seconds as "812 us", "3.41 ms", "1.20 s". */
char *util_fmt_time(double s, char *buf, size_t n);

/* The most util_read_file reads: JSON, CSV and schedule text. */
#define UTIL_READ_MAX_BYTES ((size_t)64 << 20)
/* Opens path for reading when it is a regular file of at most max_bytes;
 * a directory, device, FIFO or socket is refused without reading (it
 * could be read for ever, or wait for a writer). Returns the descriptor
 * (close-on-exec) with the file's size in *size, or -1 with e filled
 * (exit code 2, the message names path and what it is). */
int util_open_regular(const char *path, size_t max_bytes, size_t *size,
                      util_err *e);
/* Reads a whole regular file of at most max_bytes into a NUL-terminated
 * malloc'd buffer; *len (if not NULL) excludes the NUL. Errors as
 * util_open_regular's, and read errors (exit code 2). */
int util_read_file_max(const char *path, size_t max_bytes, char **out,
                       size_t *len, util_err *e);
/* util_read_file_max with UTIL_READ_MAX_BYTES. */
int util_read_file(const char *path, char **out, size_t *len, util_err *e);
/* FNV-1a, 64 bits, of n bytes at p, going on from h (UTIL_FNV_INIT to
 * start): the checksum of checkpoints and of the files plans and
 * checkpoints name. */
#define UTIL_FNV_INIT 0xCBF29CE484222325ull
uint64_t util_fnv1a(const void *p, size_t n, uint64_t h);
/* util_fnv1a of a regular file's bytes (at most max_bytes) into *sum;
 * errors as util_read_file_max's. */
int util_file_fnv(const char *path, size_t max_bytes, uint64_t *sum,
                  util_err *e);
/* Writes data to path so that path is never half-written: a regular file
 * (or a new one) is replaced atomically (unnamed temporary in the same
 * folder, fsync, rename, fsync of the folder) keeping its mode and, where
 * allowed, its owner; a symbolic link is kept and the file it points to
 * replaced; a device, FIFO or socket is written through, and a file that
 * is this process's stdout or stderr (/dev/stdout) is written to that
 * descriptor, after what went there before. No temporary is
 * left behind by a failure, and those of a killed process are removed by
 * the next write of path. Errors have exit code 1. */
int util_write_atomic(const char *path, const void *data, size_t len,
                      util_err *e);
/* Before any work: whether output `path` (given as `flag`; NULL: none)
 * can be written where util_write_atomic will write it: not a directory,
 * in a folder that exists and this process may write, and not one of the
 * n inputs (paths, NULL skipped), which it would overwrite. A device,
 * FIFO or socket is written through and passes. prefix: path is a
 * prefix the files' names extend (--plot PREFIX), so only its folder is
 * checked. Errors, code 2, name the flag and the path. */
int util_out_check(const char *flag, const char *path, int prefix,
                   const char *const *inputs, int n, util_err *e);
/* Before any work, after util_out_check: whether the folder output
 * `path` lands in has `bytes` free for util_write_atomic's whole copy
 * (the file it replaces goes only at the rename). A device or FIFO, or a
 * folder whose free space cannot be read, passes. Error, code 2, says
 * how much is free and how much is missing. */
int util_out_room(const char *flag, const char *path, double bytes,
                  util_err *e);
/* Before any work, after util_out_check of each: the n outputs of one
 * run (flag[i] and path[i], NULL: not given) name n different files, and
 * an output that is a --plot prefix (prefix[i]) writes none of the other
 * outputs nor of the ni inputs (in, NULL skipped): its files are
 * PREFIX.gp, PREFIX-NAME.dat, .png, .svg or .gp, and where prefix[i] says
 * so PREFIX-simulated.json and PREFIX-measured.json (sluice exec's; the
 * prefix's folder resolved, its name as given); a device or FIFO is
 * written through and may be named twice. Files are
 * compared where a write lands (links followed, folders resolved).
 * Errors, code 2, name both. */
int util_outs_apart(int n, const char *const *flag, const char *const *path,
                    const int *prefix, const char *const *in, int ni,
                    util_err *e);
/* util_outs_apart's prefix[i]: a --plot prefix (its images, data and
 * scripts), with sluice exec's traces beside them where it writes them */
#define UTIL_OUT_PLOT 1
#define UTIL_OUT_SIMULATED 2        /* PREFIX-simulated.json */
#define UTIL_OUT_MEASURED 4         /* PREFIX-measured.json */
#define UTIL_OUT_PLOT_SIMULATED (UTIL_OUT_PLOT | UTIL_OUT_SIMULATED)
#define UTIL_OUT_PLOT_TRACES (UTIL_OUT_PLOT_SIMULATED | UTIL_OUT_MEASURED)
/* util_write_atomic of a text and a final newline (a JSON document as
 * json_dumps gives it). */
int util_write_atomic_line(const char *path, const char *text, util_err *e);
/* ".sluice-tmp.PID.TAG" in buf (returned): appended to a path, the name of
 * a temporary file of this process beside it, which the next
 * util_write_atomic of that path removes once the process has ended. */
char *util_tmp_suffix(const char *tag, char *buf, size_t n);

/* First thing in main: a standard descriptor the caller closed (`>&-`) is
 * reopened (stdout on /dev/full, stdin and stderr on /dev/null), so no
 * file opened later takes its number and gets output meant for it, and
 * writing to a closed stdout fails as it should. */
void util_stdio_init(void);
/* Last thing in main: flushes and closes stdout and reports on stderr a
 * write that failed at any point (full disk, closed stdout). Returns 0,
 * or UTIL_EXIT_FAIL after a failure. */
int util_stdout_close(void);
/* 0 when s is valid UTF-8; else -1 with e saying that `what` (a path the
 * user gave) cannot go into a JSON file, the bad bytes shown as \xNN. */
int util_utf8_check(const char *what, const char *s, util_err *e);
/* Replaces in place every byte of s that is not part of a valid UTF-8
 * sequence by '?' (names derived from paths, cut to fit a buffer). */
void util_utf8_fix(char *s);

/* ---------------------------------------------------------------------
 * JSON input. A document keeps its text so that any error can name the
 * line and column of the offending value, found again by walking the text
 * along the JSON path (errors are rare; locating costs nothing otherwise).
 * Paths use the form `gpus[3].mem_bytes`. */
typedef struct util_jdoc {
    char *file;   /* as given by the user, for messages */
    char *text;
    json_t *root;
} util_jdoc;

/* Parses path (or text, when text != NULL; file then only names it). */
int util_jdoc_load(util_jdoc *d, const char *file, const char *text,
                   util_err *e);
void util_jdoc_free(util_jdoc *d);
/* Line and column (1-based) of the value at path, or 0/0 when not found. */
void util_json_locate(const char *text, const char *path, int *line, int *col);

/* A view of one object inside a document with the path that reaches it. */
typedef struct util_jobj {
    const util_jdoc *doc;
    json_t *j;
    char path[256];
} util_jobj;

util_jobj util_jroot(const util_jdoc *d);
/* Fills e with "FILE:LINE:COL: field 'PATH.key': msg". Returns -1. */
int util_jerr(util_err *e, const util_jobj *o, const char *key,
              const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Rejects any key of o not in allowed (NULL-terminated), suggesting the
 * closest allowed key. Returns 0 or -1. */
int util_jkeys(const util_jobj *o, const char *const *allowed, util_err *e);

/* Pass as lo to require a value > 0 (the message then says so). */
#define UTIL_POSITIVE 2.2250738585072014e-308
/* The least a hardware rate (GB/s, TFLOP/s) or efficiency may be:
 * slower, a simulated task could outlast the 64-bit nanoseconds the
 * simulator counts in (1e-300 GB/s hung it). */
#define UTIL_HW_MIN 1e-3
/* The most a memory size given on the command line may be (1024T, as
 * --host-mem, --sweep-host-mem, --mem-budget and --mem-per-device take):
 * larger is a slip, and 1e300G would be infinite bytes. */
#define UTIL_SIZE_MAX_BYTES 1125899906842624.0

/* Getters: required fields missing are errors; optional ones keep *out.
 * Numbers are checked against [lo, hi]; pass -HUGE_VAL/HUGE_VAL for none. */
int util_jnum(const util_jobj *o, const char *key, int required, double lo,
              double hi, double *out, util_err *e);
/* Like util_jnum but also requires an integral value. */
int util_jint(const util_jobj *o, const char *key, int required, long lo,
              long hi, long *out, util_err *e);
int util_jbool(const util_jobj *o, const char *key, int required, int *out,
               util_err *e);
/* Copies a string into out (size n); too long is an error. */
int util_jstr(const util_jobj *o, const char *key, int required, char *out,
              size_t n, util_err *e);
/* One of choices (NULL-terminated); *out is its index. */
int util_jenum(const util_jobj *o, const char *key, int required,
               const char *const *choices, int *out, util_err *e);
/* Child object; *present says whether the key existed (optional case). */
int util_jchild(const util_jobj *o, const char *key, int required,
                util_jobj *out, int *present, util_err *e);
/* Array under key: *arr is borrowed, NULL when absent and optional. */
int util_jarray(const util_jobj *o, const char *key, int required,
                json_t **arr, util_err *e);
/* Element i of array under key, which must be an object. */
int util_jelem(const util_jobj *o, const char *key, json_t *arr, size_t i,
               util_jobj *out, util_err *e);

/* ---------------------------------------------------------------------
 * Tables people read: right-aligned numbers, units in the header. */
typedef struct util_table util_table;
util_table *util_table_new(int ncols);
void util_table_free(util_table *t);
/* Column header and alignment ('l' or 'r'). */
void util_table_col(util_table *t, int col, const char *header, char align);
/* Adds a row; cells given as printf-formatted strings one per column. */
void util_table_row(util_table *t, const char *const *cells);
/* Adds a separator line before the next row. */
void util_table_sep(util_table *t);
void util_table_print(const util_table *t, FILE *f, const char *indent);

/* Prints a JSON value (pretty, keys in insertion order) and a newline.
 * Integral reals are turned into integers in place first. */
int util_json_print(json_t *v, FILE *f);

#endif
