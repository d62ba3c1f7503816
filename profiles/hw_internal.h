/* Private to the hardware half of profiles/: GPU parsing with a base type,
 * the catalog, the topology's internal state and link-kind helpers. */
#ifndef SLUICE_PROFILES_HW_INTERNAL_H
#define SLUICE_PROFILES_HW_INTERNAL_H

#include "profiles/profiles.h"

#include <pthread.h>

/* UTIL_NEVER as a statement. */
#define HW_NEVER(c) \
    do { if (c) util_never_(__FILE__, __LINE__, #c); } while (0)

/* Parses a GPU object. With partial, every field is optional and *out
 * (already filled, e.g. from a built-in base type) keeps what is absent. */
int prof_gpu_parse_ex(const util_jobj *o, prof_gpu *out, int partial,
                      util_err *e);
/* The GPU object in the catalog's JSON format (what prof_gpu_parse reads). */
json_t *prof_gpu_json(const prof_gpu *g);
/* "unknown GPU type 'x' (did you mean 'y'?); known: a, b, ..." */
int prof_gpu_unknown(const char *name, util_err *e);

/* Hash map (a,b) -> route, filled on demand. */
typedef struct prof_route_rec { int *dl; int n; } prof_route_rec;

#define HW_REC_CHUNK 1024

/* After this many single routes from one source, its routes to every GPU
 * and every node of its server are searched at once: one-to-all use (a
 * table of routes from GPU 0) then costs one search per level, while a
 * search's usual use, a few targets per source over a large cluster,
 * keeps only the routes it asks for (each found from both ends). */
#define HW_BULK_AFTER 64

typedef struct prof_topo_x {
    /* Adjacency (CSR): for node v, entries [adj_off[v], adj_off[v+1]) hold
     * the neighbour and the directed link v->neighbour, sorted by
     * neighbour index then link id, so searches break ties by index. */
    int *adj_off, *adj_node, *adj_dl;
    int *gpu_dram, *gpu_nvme;     /* nearest tier per GPU, -1 when none */
    /* route cache */
    pthread_mutex_t mu;
    uint64_t *keys;               /* a*n_nodes+b+1; 0 = empty */
    int *vals;                    /* index into the records */
    size_t cap, used;
    /* Records live in chunks that never move: route lookups keep pointers
     * to records while computing and storing others. */
    prof_route_rec **rec_chunks;  /* HW_REC_CHUNK records each */
    size_t n_recs, n_rec_chunks;
    int **blocks;                 /* pool of route storage, never moved */
    size_t n_blocks, block_used, block_cap;
    int *src_queries;             /* per source: routes asked so far */
    double *levels;               /* distinct link bandwidths, descending */
    int n_levels;
    unsigned *seen, *want;        /* search scratch, by stamp */
    unsigned stamp;
    int *par, *queue, *path;
    /* two-ended search scratch: backward marks, distances from the
     * source and to the target, memo of the walk, the two frontiers */
    unsigned *bseen, *gseen;
    int *df, *db, *good, *bqueue;
    int bulk_after;               /* single routes from one source before
                                   * the rest are searched at once */
    /* link orbits under shifts of whole servers, one entry per (stride,
     * count) asked (topo_symmetry.c); under mu */
    struct prof_orbits *orbits;
    int n_orbits;
    /* capacities of the growable arrays */
    int cap_nodes, cap_links, cap_types;
} prof_topo_x;

/* Drops the cached link orbits (the graph changed, or it is freed). */
void prof_topo_orbits_clear(prof_topo_x *x);

/* Achievable PCIe bandwidth per direction, bytes/s (topo_template.c). */
double prof_pcie_bw(int gen, int lanes);
/* The template for a GPU type that need not be built in. */
prof_topo *prof_topo_template_gpu(const prof_gpu *g, int n,
                                  const prof_hw_opts *o, util_err *e);
/* GPUs in one standard server of this type (the count `--hw GPU` means). */
int prof_template_default_count(const prof_gpu *g, const prof_hw_opts *o);
/* Loads a server file from text (name is for messages); o as for --hw. */
prof_topo *prof_topo_load_text(const char *name, const char *text,
                               const prof_hw_opts *o, util_err *e);
/* Default one-way latency of a link kind, ns. */
double prof_link_default_latency_ns(prof_link_kind k);

#endif
