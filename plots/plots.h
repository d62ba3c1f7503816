/* plots: pictures of traces through gnuplot, run as an external program.
 * Reads a Chrome/Perfetto trace as sluice writes it (simulated or
 * measured), never simulator internals. */
#ifndef SLUICE_PLOTS_H
#define SLUICE_PLOTS_H

#include "util/util.h"

/* The longest --plot prefix taken (the file names add to it). */
#define PLOT_MAX_PREFIX 1000

/* The kinds both pictures draw, the compute kinds (F, B, W, BW, R, OPT:
 * k from 0 to PLOT_COMPUTE_KINDS - 1) and the rings', with their legend
 * names and colours (0xRRGGBB), the timeline's and the measured-against-
 * simulated picture's alike; NULL and 0 past them. */
#define PLOT_COMPUTE_KINDS 6
/* and the data-parallel rings' steps (category "RING"), named
 * "data-parallel" */
#define PLOT_KIND_RING PLOT_COMPUTE_KINDS
const char *plot_kind_name(int k);
int plot_kind_rgb(int k);
/* The kind of a trace's category ("F", "BW", ..., "RING"), or -1. */
int plot_kind_of(const char *name);
/* A kind's colour, lighter or darker by microbatch so neighbours
 * differ. */
int plot_shade(int rgb, int mb);

/* Writes PREFIX-timeline.{png,svg} (a row per device, F/B/W boxes coloured
 * by kind, shaded and labelled by microbatch, bubbles left blank) and
 * PREFIX-memory.{png,svg} (memory per device over time, capacity dashed),
 * with their data and the gnuplot script beside them. Returns 0 when
 * drawn, 1 when gnuplot is not installed (e says so; data and script are
 * still written), -1 on error. */
int plot_pipeline(const char *trace_path, const char *prefix, util_err *e);

/* A measured run over its prediction: PREFIX-compare.{png,svg} with the
 * measured timeline above the simulated one (same time axis) and the
 * memory of each device in both, from two traces as sluice writes them.
 * Returns as plot_pipeline does. */
int plot_compare(const char *measured_trace, const char *simulated_trace,
                 const char *prefix, util_err *e);

/* Runs `gnuplot -e sluice_tmp=SUFFIX SCRIPT`: the script draws each of
 * outs[] to its name with the string variable sluice_tmp appended (empty
 * when a person runs the script). Each image is checked whole (a PNG ends
 * with its IEND chunk, an SVG with </svg>) and moved over its name with
 * util_write_atomic only when all are, so a failure leaves the images that
 * were there untouched and no temporary behind. Returns 0 when drawn, 1
 * when gnuplot is not installed (e says so), -1 when it failed (gnuplot's
 * exit status, an image missing or cut short). */
int plot_run_gnuplot(const char *script, const char *const *outs, int n_out,
                     util_err *e);
/* s as a double-quoted gnuplot string (malloc'd): quotes and backslashes
 * escaped, backquotes (command substitution even inside double quotes)
 * and control characters as octal escapes. data_file: s names a data
 * file, which gnuplot would run as a command if it began with '<'. */
char *plot_quote(const char *s, int data_file);

/* What the small plots share (plot_script.c). A text that grows as it is
 * written ({0} is empty); plot_text_save writes it to path atomically and
 * empties it. */
typedef struct plot_text {
    char *p;
    size_t len, cap;
} plot_text;
void plot_text_add(plot_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int plot_text_save(plot_text *t, const char *path, util_err *e);
/* Saves t as the data file PREFIX-KIND.dat and returns its name quoted
 * for the script (plot_quote; the caller frees); NULL with t freed when
 * the file cannot be written. */
char *plot_data_save(plot_text *t, const char *prefix, const char *kind,
                     util_err *e);
/* The unit a memory axis reads in, for curves whose largest value is
 * max_bytes: GiB, MiB or KiB (a model of kilobytes in KiB, not in 1e-5
 * GiB); *per_gib gets how many of it a GiB is (the data files stay in
 * GiB: the script multiplies). */
const char *plot_mem_unit(double max_bytes, double *per_gib);
/* A --plot prefix longer than PLOT_MAX_PREFIX: code 2. */
int plot_prefix_check(const char *prefix, util_err *e);
/* A script that draws PREFIX-KIND.png and .svg: its header, then for each
 * image (svg 0, then 1) the terminal and output lines before its plot;
 * plot_script_run ends it, writes PREFIX-KIND.gp, frees t and runs it
 * (returns as plot_run_gnuplot). */
void plot_script_begin(plot_text *t);
void plot_script_image(plot_text *t, int svg, int w, int h,
                       const char *prefix, const char *kind);
int plot_script_run(plot_text *t, const char *prefix, const char *kind,
                    util_err *e);

/* Capacity planning: throughput against GPU count, one line per GPU type,
 * with linear scaling from each type's first point dashed. Series i has
 * n[i] points (gpus, samples/s). Writes PREFIX-capacity.{png,svg}, the data
 * and the script. Returns as plot_pipeline does. */
int plot_capacity(const char *prefix, const char *title, int nseries,
                  const char *const *names, const int *n,
                  const double *const *gpus, const double *const *sps,
                  util_err *e);

/* Lines of points: series i has n[i] points (x, y), drawn with the
 * labels given. Writes PREFIX-KIND.{png,svg}, the data and the script.
 * Returns as plot_pipeline does. */
int plot_lines(const char *prefix, const char *kind, const char *title,
               const char *xlabel, const char *ylabel, int nseries,
               const char *const *names, const int *n,
               const double *const *x, const double *const *y, util_err *e);

/* Jobs over GPUs over time: a row per GPU, a box per segment (seconds)
 * coloured by its job, n_jobs colours in the key; under each row, thin
 * bars for the n_cp copies (cp_dir 0 into the GPU, 1 out of it) in their
 * job's colour; unit names a row ("GPU", "device"). Writes
 * PREFIX-gantt.{png,svg}, the data and the script. Returns as
 * plot_pipeline does. */
int plot_gantt(const char *prefix, const char *title, const char *unit,
               int n_gpus, int n_jobs,
               const char *const *job_names, int n_seg, const int *gpu,
               const int *job, const double *t0_s, const double *t1_s,
               int n_cp, const int *cp_gpu, const int *cp_dir,
               const int *cp_job, const double *cp_t0_s,
               const double *cp_t1_s, util_err *e);

#endif
