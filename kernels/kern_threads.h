/* The CPU kernels' thread pool (private to kernels/): kern_set_threads(n)
 * keeps n-1 workers; kern_parallel(fn, ctx) runs fn(ctx, part, nparts) for
 * every part in 0..nparts-1 at once, part 0 on the calling thread, and
 * returns when all are done. Each op splits its own rows by part, so the
 * split (and so every result) depends only on the thread count. OpenBLAS
 * itself stays single-threaded: its spinning workers would otherwise take
 * the cores the element-wise loops need between two GEMMs. */
#ifndef SLUICE_KERN_THREADS_H
#define SLUICE_KERN_THREADS_H

#include <stddef.h>

typedef void (*kern_part_fn)(void *ctx, int part, int nparts);

void kern_parallel(kern_part_fn fn, void *ctx);

/* Rows [lo, hi) of n for this part. */
#define KERN_SPLIT(n, part, nparts, lo, hi)                                  \
    size_t lo = (size_t)(n) * (size_t)(part) / (size_t)(nparts);             \
    size_t hi = (size_t)(n) * ((size_t)(part) + 1) / (size_t)(nparts)

#endif
