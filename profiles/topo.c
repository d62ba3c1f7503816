/* Server and cluster graphs: building, checking, and routing.
 * Routes are the widest path (largest bottleneck bandwidth), then fewest
 * hops, then the lexicographically smallest node sequence. GPUs, DRAM and
 * NVMe never forward traffic. A consumer GPU has no PCIe peer-to-peer: its
 * traffic to anything but host memory is staged through the DRAM nearest
 * to it, unless an NVLink path is at least as wide. Routes are computed on
 * demand per source and cached under a mutex; lent pointers stay valid
 * until prof_topo_free. */
#include "profiles/hw_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const node_kind_names[] = {"gpu", "cpu", "pcie_switch",
    "dram", "nvme", "nic", "nvswitch", "net_switch"};
static const char *const link_kind_names[] = {"pcie", "nvlink", "socket",
    "memory", "network"};

const char *prof_node_kind_name(prof_node_kind k)
{
    return k >= 0 && k < PROF_NODE_KIND_COUNT ? node_kind_names[k] : "?";
}

const char *prof_link_kind_name(prof_link_kind k)
{
    return k >= 0 && k < PROF_LINK_KIND_COUNT ? link_kind_names[k] : "?";
}

/* ---- building ---- */

prof_topo *prof_topo_new(const char *name)
{
    prof_topo *t = util_calloc(1, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name ? name : "");
    t->x = util_calloc(1, sizeof *t->x);
    pthread_mutex_init(&t->x->mu, NULL);
    t->x->bulk_after = HW_BULK_AFTER;
    return t;
}

int prof_topo_add_gpu_type(prof_topo *t, const prof_gpu *g)
{
    prof_topo_x *x = t->x;
    if (t->n_gpu_types == x->cap_types) {
        x->cap_types = x->cap_types ? 2 * x->cap_types : 4;
        t->gpu_types = util_realloc(t->gpu_types,
                                    sizeof *t->gpu_types * x->cap_types);
    }
    t->gpu_types[t->n_gpu_types] = *g;
    return t->n_gpu_types++;
}

int prof_topo_add_node(prof_topo *t, prof_node_kind kind, const char *name,
                       int server)
{
    prof_topo_x *x = t->x;
    if (t->n_nodes == x->cap_nodes) {
        x->cap_nodes = x->cap_nodes ? 2 * x->cap_nodes : 64;
        t->nodes = util_realloc(t->nodes, sizeof *t->nodes * x->cap_nodes);
    }
    prof_node *n = &t->nodes[t->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    snprintf(n->name, sizeof n->name, "%s", name);
    n->server = server;
    n->gpu = -1;
    n->gpu_type = -1;
    return t->n_nodes++;
}

int prof_topo_add_link(prof_topo *t, int a, int b, prof_link_kind kind,
                       double bw_bytes_per_s, double latency_ns)
{
    prof_topo_x *x = t->x;
    if (t->n_links == x->cap_links) {
        x->cap_links = x->cap_links ? 2 * x->cap_links : 64;
        t->links = util_realloc(t->links, sizeof *t->links * x->cap_links);
    }
    t->links[t->n_links] = (prof_link){a, b, kind, bw_bytes_per_s,
                                       latency_ns};
    return t->n_links++;
}

static void cache_clear(prof_topo_x *x)
{
    prof_topo_orbits_clear(x);
    for (size_t i = 0; i < x->n_blocks; i++) free(x->blocks[i]);
    free(x->blocks);
    free(x->keys);
    free(x->vals);
    for (size_t i = 0; i < x->n_rec_chunks; i++) free(x->rec_chunks[i]);
    free(x->rec_chunks);
    free(x->src_queries);
    free(x->seen);
    free(x->want);
    free(x->par);
    free(x->queue);
    free(x->path);
    free(x->bseen);
    free(x->gseen);
    free(x->df);
    free(x->db);
    free(x->good);
    free(x->bqueue);
    x->seen = x->want = x->bseen = x->gseen = NULL;
    x->par = x->queue = x->path = NULL;
    x->df = x->db = x->good = x->bqueue = NULL;
    x->stamp = 0;
    x->src_queries = NULL;
    x->blocks = NULL;
    x->keys = NULL;
    x->vals = NULL;
    x->rec_chunks = NULL;
    x->n_blocks = x->block_used = x->block_cap = 0;
    x->cap = x->used = x->n_recs = x->n_rec_chunks = 0;
}

void prof_topo_free(prof_topo *t)
{
    if (!t) return;
    prof_topo_x *x = t->x;
    if (x) {
        cache_clear(x);
        free(x->adj_off);
        free(x->adj_node);
        free(x->adj_dl);
        free(x->gpu_dram);
        free(x->gpu_nvme);
        free(x->levels);
        pthread_mutex_destroy(&x->mu);
        free(x);
    }
    free(t->gpu_types);
    free(t->nodes);
    free(t->links);
    free(t->gpu_node);
    free(t->route_off);
    free(t->route_dl);
    free(t);
}

int prof_topo_find(const prof_topo *t, const char *name)
{
    for (int i = 0; i < t->n_nodes; i++)
        if (!strcmp(t->nodes[i].name, name)) return i;
    return -1;
}

int prof_dl_head(const prof_topo *t, int dl)
{
    const prof_link *l = &t->links[dl >> 1];
    return dl & 1 ? l->a : l->b;
}

int prof_dl_tail(const prof_topo *t, int dl)
{
    const prof_link *l = &t->links[dl >> 1];
    return dl & 1 ? l->b : l->a;
}

/* ---- finishing: checks and indexes ---- */

typedef struct { const char *name; int idx; } name_ent;

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const name_ent *)a)->name, ((const name_ent *)b)->name);
}

typedef struct { int node, dl; } adj_ent;

static int cmp_adj(const void *a, const void *b)
{
    const adj_ent *x = a, *y = b;
    if (x->node != y->node) return x->node < y->node ? -1 : 1;
    return (x->dl > y->dl) - (x->dl < y->dl);
}

static int cmp_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

static int uf_find(int *p, int v)
{
    while (p[v] != v) v = p[v] = p[p[v]];
    return v;
}

static int forwards(prof_node_kind k)
{
    return k != PROF_NODE_GPU && k != PROF_NODE_DRAM && k != PROF_NODE_NVME;
}

/* Nearest node of kind k to node s within its server: fewest hops through
 * forwarding nodes, then lowest index. -1 when none. */
static int nearest(const prof_topo *t, int s, prof_node_kind k, int *dist,
                   int *queue)
{
    const prof_topo_x *x = t->x;
    int qh = 0, qt = 0, best = -1, bestd = 0;
    dist[s] = 0;
    queue[qt++] = s;
    while (qh < qt) {
        int v = queue[qh++];
        if (best >= 0 && dist[v] >= bestd) continue;
        if (v != s && !forwards(t->nodes[v].kind)) continue;
        for (int i = x->adj_off[v]; i < x->adj_off[v + 1]; i++) {
            int u = x->adj_node[i];
            if (dist[u] >= 0 || t->nodes[u].server != t->nodes[s].server)
                continue;
            dist[u] = dist[v] + 1;
            queue[qt++] = u;
            if (t->nodes[u].kind == k &&
                (best < 0 || dist[u] < bestd ||
                 (dist[u] == bestd && u < best))) {
                best = u;
                bestd = dist[u];
            }
        }
    }
    for (int i = 0; i < qt; i++) dist[queue[i]] = -1;
    return best;
}

int prof_topo_finish(prof_topo *t, util_err *e)
{
    prof_topo_x *x = t->x;
    int n = t->n_nodes;
    cache_clear(x);
    free(x->adj_off);
    free(x->adj_node);
    free(x->adj_dl);
    free(x->gpu_dram);
    free(x->gpu_nvme);
    free(t->gpu_node);
    x->adj_off = x->adj_node = x->adj_dl = NULL;
    x->gpu_dram = x->gpu_nvme = NULL;
    t->gpu_node = NULL;

    /* names: non-empty and unique */
    name_ent *ne = util_malloc(sizeof *ne * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        if (!t->nodes[i].name[0]) {
            free(ne);
            return util_errf(e, UTIL_EXIT_USAGE, "%s: node %d has no name",
                             t->name, i);
        }
        ne[i] = (name_ent){t->nodes[i].name, i};
    }
    qsort(ne, (size_t)n, sizeof *ne, cmp_name);
    for (int i = 1; i < n; i++)
        if (!strcmp(ne[i].name, ne[i - 1].name)) {
            int r = util_errf(e, UTIL_EXIT_USAGE, "%s: two nodes are named "
                              "'%s'", t->name, ne[i].name);
            free(ne);
            return r;
        }
    free(ne);

    /* nodes: GPU indices in node order, servers */
    t->n_gpus = 0;
    t->n_servers = 0;
    for (int i = 0; i < n; i++) {
        prof_node *nd = &t->nodes[i];
        /* -1: outside every server (the network fabric) */
        if (nd->server < -1 ||
            (nd->server < 0 && nd->kind != PROF_NODE_NET_SWITCH))
            return util_errf(e, UTIL_EXIT_USAGE, "%s: node '%s' has server "
                             "%d", t->name, nd->name, nd->server);
        if (nd->server + 1 > t->n_servers) t->n_servers = nd->server + 1;
        if (nd->kind == PROF_NODE_GPU) {
            if (nd->gpu_type < 0 || nd->gpu_type >= t->n_gpu_types)
                return util_errf(e, UTIL_EXIT_USAGE, "%s: GPU '%s' has no "
                                 "GPU type", t->name, nd->name);
            nd->gpu = t->n_gpus++;
        } else {
            nd->gpu = -1;
        }
        if ((nd->kind == PROF_NODE_DRAM || nd->kind == PROF_NODE_NVME) &&
            !(nd->capacity_bytes > 0 && nd->read_bw_bytes_per_s > 0 &&
              nd->write_bw_bytes_per_s > 0))
            return util_errf(e, UTIL_EXIT_USAGE, "%s: %s '%s' needs a "
                             "positive capacity and bandwidth", t->name,
                             node_kind_names[nd->kind], nd->name);
    }
    if (t->n_gpus == 0)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: no GPUs", t->name);
    t->gpu_node = util_malloc(sizeof(int) * (size_t)t->n_gpus);
    int *per_server = util_calloc((size_t)t->n_servers, sizeof(int));
    t->gpus_per_server = 0;
    for (int i = 0; i < n; i++)
        if (t->nodes[i].kind == PROF_NODE_GPU) {
            t->gpu_node[t->nodes[i].gpu] = i;
            int c = ++per_server[t->nodes[i].server];
            if (c > t->gpus_per_server) t->gpus_per_server = c;
        }
    free(per_server);

    /* links */
    for (int i = 0; i < t->n_links; i++) {
        const prof_link *l = &t->links[i];
        if (l->a < 0 || l->a >= n || l->b < 0 || l->b >= n || l->a == l->b)
            return util_errf(e, UTIL_EXIT_USAGE, "%s: link %d joins bad "
                             "nodes", t->name, i);
        if (!(l->bw_bytes_per_s > 0) || !isfinite(l->bw_bytes_per_s) ||
            !(l->latency_ns >= 0))
            return util_errf(e, UTIL_EXIT_USAGE, "%s: link %d (%s-%s) needs "
                             "a positive bandwidth and latency >= 0",
                             t->name, i, t->nodes[l->a].name,
                             t->nodes[l->b].name);
    }

    /* adjacency, sorted by neighbour then link */
    x->adj_off = util_calloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < t->n_links; i++) {
        x->adj_off[t->links[i].a + 1]++;
        x->adj_off[t->links[i].b + 1]++;
    }
    for (int v = 0; v < n; v++) x->adj_off[v + 1] += x->adj_off[v];
    int m = x->adj_off[n];
    adj_ent *ent = util_malloc(sizeof *ent * (size_t)(m ? m : 1));
    int *fill = util_malloc(sizeof(int) * (size_t)(n ? n : 1));
    memcpy(fill, x->adj_off, sizeof(int) * (size_t)n);
    for (int i = 0; i < t->n_links; i++) {
        const prof_link *l = &t->links[i];
        ent[fill[l->a]++] = (adj_ent){l->b, 2 * i};
        ent[fill[l->b]++] = (adj_ent){l->a, 2 * i + 1};
    }
    free(fill);
    x->adj_node = util_malloc(sizeof(int) * (size_t)(m ? m : 1));
    x->adj_dl = util_malloc(sizeof(int) * (size_t)(m ? m : 1));
    for (int v = 0; v < n; v++) {
        int o = x->adj_off[v], c = x->adj_off[v + 1] - o;
        if (c > 1) qsort(ent + o, (size_t)c, sizeof *ent, cmp_adj);
        for (int i = o; i < o + c; i++) {
            x->adj_node[i] = ent[i].node;
            x->adj_dl[i] = ent[i].dl;
        }
    }
    free(ent);

    /* every GPU in one connected piece with GPU 0 */
    int *uf = util_malloc(sizeof(int) * (size_t)n);
    for (int v = 0; v < n; v++) uf[v] = v;
    for (int i = 0; i < t->n_links; i++) {
        int ra = uf_find(uf, t->links[i].a), rb = uf_find(uf, t->links[i].b);
        if (ra != rb) uf[ra] = rb;
    }
    int r0 = uf_find(uf, t->gpu_node[0]);
    for (int g = 1; g < t->n_gpus; g++)
        if (uf_find(uf, t->gpu_node[g]) != r0) {
            int r = util_errf(e, UTIL_EXIT_USAGE, "%s: GPU '%s' is not "
                              "connected to GPU '%s'", t->name,
                              t->nodes[t->gpu_node[g]].name,
                              t->nodes[t->gpu_node[0]].name);
            free(uf);
            return r;
        }
    free(uf);

    /* nearest host memory and drive per GPU */
    x->gpu_dram = util_malloc(sizeof(int) * (size_t)t->n_gpus);
    x->gpu_nvme = util_malloc(sizeof(int) * (size_t)t->n_gpus);
    int *dist = util_malloc(sizeof(int) * (size_t)n);
    int *queue = util_malloc(sizeof(int) * (size_t)n);
    for (int v = 0; v < n; v++) dist[v] = -1;
    for (int g = 0; g < t->n_gpus; g++) {
        x->gpu_dram[g] = nearest(t, t->gpu_node[g], PROF_NODE_DRAM, dist,
                                 queue);
        x->gpu_nvme[g] = nearest(t, t->gpu_node[g], PROF_NODE_NVME, dist,
                                 queue);
    }
    free(dist);
    free(queue);
    x->src_queries = util_calloc((size_t)n, sizeof *x->src_queries);

    /* distinct link bandwidths, highest first: the search levels */
    free(x->levels);
    x->levels = util_malloc(sizeof(double) * (size_t)(t->n_links + 1));
    for (int i = 0; i < t->n_links; i++)
        x->levels[i] = t->links[i].bw_bytes_per_s;
    qsort(x->levels, (size_t)t->n_links, sizeof(double), cmp_desc);
    x->n_levels = 0;
    for (int i = 0; i < t->n_links; i++)
        if (!x->n_levels || x->levels[i] != x->levels[x->n_levels - 1])
            x->levels[x->n_levels++] = x->levels[i];
    return 0;
}

/* ---- getters ---- */

const prof_gpu *prof_topo_gpu(const prof_topo *t, int g)
{
    HW_NEVER(g < 0 || g >= t->n_gpus);
    return &t->gpu_types[t->nodes[t->gpu_node[g]].gpu_type];
}

int prof_topo_gpu_host_mem(const prof_topo *t, int g)
{
    HW_NEVER(g < 0 || g >= t->n_gpus);
    return t->x->gpu_dram[g];
}

int prof_topo_gpu_nvme(const prof_topo *t, int g)
{
    HW_NEVER(g < 0 || g >= t->n_gpus);
    return t->x->gpu_nvme[g];
}

int prof_topo_cpu(const prof_topo *t)
{
    return t && t->n_gpus > 0 && prof_topo_gpu(t, 0)->form == PROF_FORM_CPU;
}

const char *prof_topo_unit(const prof_topo *t)
{
    return prof_topo_cpu(t) ? "device" : "GPU";
}

double prof_topo_server_dram(const prof_topo *t, int server)
{
    double c = 0;
    for (int i = 0; i < t->n_nodes; i++)
        if (t->nodes[i].kind == PROF_NODE_DRAM && t->nodes[i].server == server)
            c += t->nodes[i].capacity_bytes;
    return c;
}

int prof_topo_server_drives(const prof_topo *t, int server)
{
    int n = 0;
    for (int i = 0; i < t->n_nodes; i++)
        n += t->nodes[i].kind == PROF_NODE_NVME && t->nodes[i].server == server;
    return n;
}

double prof_route_bw(const prof_topo *t, const int *dl, int n)
{
    if (n <= 0) return HUGE_VAL;
    double bw = HUGE_VAL;
    for (int i = 0; i < n; i++)
        if (t->links[dl[i] >> 1].bw_bytes_per_s < bw)
            bw = t->links[dl[i] >> 1].bw_bytes_per_s;
    return bw;
}

double prof_route_latency_ns(const prof_topo *t, const int *dl, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += t->links[dl[i] >> 1].latency_ns;
    return s;
}

int prof_route_has_link_kind(const prof_topo *t, const int *dl, int n,
                             prof_link_kind k)
{
    for (int i = 0; i < n; i++)
        if (t->links[dl[i] >> 1].kind == k) return 1;
    return 0;
}

int prof_route_has_node_kind(const prof_topo *t, const int *dl, int n,
                             prof_node_kind k)
{
    for (int i = 0; i < n; i++)
        if (t->nodes[prof_dl_head(t, dl[i])].kind == k ||
            t->nodes[prof_dl_tail(t, dl[i])].kind == k)
            return 1;
    return 0;
}

/* ---- route cache ---- */

enum { KEY_PLAIN = 0, KEY_FINAL = 1, KEY_NVLINK = 2 };

static uint64_t mkkey(const prof_topo *t, int space, int a, int b)
{
    return ((uint64_t)space << 60 | ((uint64_t)a * (uint64_t)t->n_nodes +
                                     (uint64_t)b)) + 1;
}

static uint64_t hash64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    return k ^ (k >> 33);
}

static const prof_route_rec *cache_get(const prof_topo_x *x, uint64_t key)
{
    if (!x->cap) return NULL;
    size_t mask = x->cap - 1;
    for (size_t i = hash64(key) & mask;; i = (i + 1) & mask) {
        if (x->keys[i] == key)
            return &x->rec_chunks[x->vals[i] / HW_REC_CHUNK]
                                 [x->vals[i] % HW_REC_CHUNK];
        if (!x->keys[i]) return NULL;
    }
}

static void cache_slot(prof_topo_x *x, uint64_t key, int val)
{
    size_t mask = x->cap - 1;
    size_t i = hash64(key) & mask;
    while (x->keys[i]) i = (i + 1) & mask;
    x->keys[i] = key;
    x->vals[i] = val;
}

/* Stores a copy of dl[0..n) under key; returns the stored record. */
static const prof_route_rec *cache_put(prof_topo_x *x, uint64_t key,
                                       const int *dl, int n)
{
    if (2 * (x->used + 1) > x->cap) {
        size_t oc = x->cap;
        uint64_t *ok = x->keys;
        int *ov = x->vals;
        x->cap = oc ? 2 * oc : 1024;
        x->keys = util_calloc(x->cap, sizeof *x->keys);
        x->vals = util_malloc(x->cap * sizeof *x->vals);
        for (size_t i = 0; i < oc; i++)
            if (ok[i]) cache_slot(x, ok[i], ov[i]);
        free(ok);
        free(ov);
    }
    if (x->n_recs == x->n_rec_chunks * HW_REC_CHUNK) {
        x->rec_chunks = util_realloc(x->rec_chunks, (x->n_rec_chunks + 1) *
                                                        sizeof *x->rec_chunks);
        x->rec_chunks[x->n_rec_chunks++] =
            util_malloc(HW_REC_CHUNK * sizeof **x->rec_chunks);
    }
    if (x->block_used + (size_t)n > x->block_cap || !x->n_blocks) {
        size_t bc = (size_t)n > 65536 ? (size_t)n : 65536;
        x->blocks = util_realloc(x->blocks,
                                 (x->n_blocks + 1) * sizeof *x->blocks);
        x->blocks[x->n_blocks++] = util_malloc(bc * sizeof(int));
        x->block_cap = bc;
        x->block_used = 0;
    }
    int *p = x->blocks[x->n_blocks - 1] + x->block_used;
    x->block_used += (size_t)n;
    if (n) memcpy(p, dl, (size_t)n * sizeof(int));
    prof_route_rec *rec = &x->rec_chunks[x->n_recs / HW_REC_CHUNK]
                                        [x->n_recs % HW_REC_CHUNK];
    *rec = (prof_route_rec){n ? p : NULL, n};
    cache_slot(x, key, (int)x->n_recs);
    x->used++;
    x->n_recs++;
    return rec;
}

/* ---- search ----
 * The widest bottleneck to b is one of the link bandwidths, and it is the
 * largest level T at which b is reachable over links of at least T. So a
 * route is found by breadth-first searches at the distinct bandwidth levels,
 * highest first: the first search that reaches b gives the widest path, and
 * breadth-first order with neighbours sorted by index gives the fewest hops
 * and then the lexicographically smallest node sequence. High levels span
 * small islands (NVLink, one server's PCIe), so most searches are tiny.
 * One route alone is searched from both ends (two_ended): on a cluster a
 * search from one end reaches every server before the other end's, one
 * from each end meets at the fabric. */

/* Which links and nodes a search may use. */
typedef struct rules {
    int nvlink_only;    /* NVLink links only; only NVSwitches forward */
} rules;

static int fwd_ok(const prof_topo *t, const rules *r, int v)
{
    prof_node_kind k = t->nodes[v].kind;
    if (r->nvlink_only) return k == PROF_NODE_NVSWITCH;
    return forwards(k);
}

static int link_ok(const prof_topo *t, const rules *r, int dl, double thr)
{
    const prof_link *l = &t->links[dl >> 1];
    return l->bw_bytes_per_s >= thr &&
           (!r->nvlink_only || l->kind == PROF_LINK_NVLINK);
}

/* Scratch kept in x between searches (under the mutex); stamps avoid
 * clearing n-sized arrays for every search. */
static unsigned next_stamp(prof_topo_x *x, int n)
{
    if (!x->seen) {
        x->seen = util_calloc((size_t)n, sizeof *x->seen);
        x->want = util_calloc((size_t)n, sizeof *x->want);
        x->bseen = util_calloc((size_t)n, sizeof *x->bseen);
        x->gseen = util_calloc((size_t)n, sizeof *x->gseen);
        x->par = util_malloc(sizeof(int) * (size_t)n);
        x->queue = util_malloc(sizeof(int) * (size_t)n);
        x->bqueue = util_malloc(sizeof(int) * (size_t)n);
        x->path = util_malloc(sizeof(int) * (size_t)n);
        x->df = util_malloc(sizeof(int) * (size_t)n);
        x->db = util_malloc(sizeof(int) * (size_t)n);
        x->good = util_malloc(sizeof(int) * (size_t)n);
    }
    return ++x->stamp;
}

/* BFS from src over links of at least thr, stopping once `left` wanted
 * nodes (marked want == wstamp) are found. Returns how many were found. */
static int bfs(const prof_topo *t, const rules *r, int src, double thr,
               unsigned stamp, unsigned wstamp, int left)
{
    prof_topo_x *x = t->x;
    int qh = 0, qt = 0, found = 0;
    x->seen[src] = stamp;
    x->par[src] = -1;
    x->queue[qt++] = src;
    while (qh < qt && found < left) {
        int v = x->queue[qh++];
        if (v != src && !fwd_ok(t, r, v)) continue;
        for (int i = x->adj_off[v]; i < x->adj_off[v + 1]; i++) {
            int u = x->adj_node[i], dl = x->adj_dl[i];
            const prof_link *l = &t->links[dl >> 1];
            if (x->seen[u] == stamp || l->bw_bytes_per_s < thr ||
                (r->nvlink_only && l->kind != PROF_LINK_NVLINK))
                continue;
            x->seen[u] = stamp;
            x->par[u] = dl;
            x->queue[qt++] = u;
            if (x->want[u] == wstamp && ++found == left) break;
        }
    }
    return found;
}

/* The two-ended search for one route src->b over links of at least thr.
 *
 * The breadth-first route is the shortest path (inner nodes forwarding)
 * whose node sequence is lexicographically smallest: a node's parent is
 * the first node of the level before to reach it, and nodes of a level
 * are reached in the order of their own routes. So it is found by
 * learning the length D and then walking from src, taking at each node
 * the first neighbour (adjacency order) that still lies on a shortest
 * path. D comes from breadth-first searches from src (distances df) and
 * backwards from b (db, over nodes that may forward into b's direction),
 * a level at a time on whichever side is cheaper; the first level that
 * meets the other side gives D as the least df + db among the meetings
 * (before it, every node within df_max of src and db_max of b was known
 * and none met, so D > df_max + db_max - 1). The walk knows "on a
 * shortest path" from db near b and, nearer src, from the neighbours on
 * it (on_path). Returns D and leaves the route in x->path, or 0 when b is
 * not reachable at this level. */
typedef struct two_end {
    const prof_topo *t;
    const rules *r;
    double thr;
    int src, b, D, rb;
    unsigned fs, bs, gs;
} two_end;

/* One end's search: marks (seen == stamp), distances, its queue and the
 * adjacency its next level will scan. */
typedef struct end {
    unsigned *seen, stamp;
    int *dist, *queue, head, tail;
    long cost;
} end;

/* Expands one level of an end's search; a node reached that the other
 * end knows is a meeting, and *best the shortest route through one so
 * far. Forward, only src and forwarding nodes go on; backward, a node
 * before another must forward (or be src) to be on a route, and src goes
 * no further back. */
static void expand(const two_end *s, end *me, const end *other, int backward,
                   int *best)
{
    prof_topo_x *x = s->t->x;
    int last = me->tail;
    me->cost = 0;
    for (; me->head < last; me->head++) {
        int v = me->queue[me->head];
        if (backward ? v == s->src : v != s->src && !fwd_ok(s->t, s->r, v))
            continue;
        for (int i = x->adj_off[v]; i < x->adj_off[v + 1]; i++) {
            int u = x->adj_node[i];
            if (me->seen[u] == me->stamp ||
                (backward && u != s->src && !fwd_ok(s->t, s->r, u)) ||
                !link_ok(s->t, s->r, x->adj_dl[i], s->thr))
                continue;
            me->seen[u] = me->stamp;
            me->dist[u] = me->dist[v] + 1;
            me->queue[me->tail++] = u;
            me->cost += x->adj_off[u + 1] - x->adj_off[u];
            if (other->seen[u] == other->stamp &&
                (!*best || me->dist[u] + other->dist[u] < *best))
                *best = me->dist[u] + other->dist[u];
        }
    }
}

/* Whether node w, forwarding, j hops from src, lies on a shortest path
 * to b (w then needs D - j more hops). */
static int on_path(const two_end *s, int w, int j)
{
    prof_topo_x *x = s->t->x;
    if (s->D - j <= s->rb) return x->bseen[w] == s->bs && x->db[w] == s->D - j;
    if (x->seen[w] != s->fs || x->df[w] != j) return 0;
    if (x->gseen[w] == s->gs) return x->good[w];
    int ok = 0;
    for (int i = x->adj_off[w]; i < x->adj_off[w + 1] && !ok; i++) {
        int u = x->adj_node[i];
        if (!link_ok(s->t, s->r, x->adj_dl[i], s->thr)) continue;
        ok = j + 1 == s->D ? u == s->b
                           : fwd_ok(s->t, s->r, u) && on_path(s, u, j + 1);
    }
    x->gseen[w] = s->gs;
    x->good[w] = ok;
    return ok;
}

static int two_ended(const prof_topo *t, const rules *r, int src, int b,
                     double thr)
{
    prof_topo_x *x = t->x;
    int n = t->n_nodes;
    two_end s = {t, r, thr, src, b, 0, 0, 0, 0, 0};
    s.fs = next_stamp(x, n);
    s.bs = next_stamp(x, n);
    s.gs = next_stamp(x, n);
    end f = {x->seen, s.fs, x->df, x->queue, 0, 1,
             x->adj_off[src + 1] - x->adj_off[src]};
    end k = {x->bseen, s.bs, x->db, x->bqueue, 0, 1,
             x->adj_off[b + 1] - x->adj_off[b]};
    x->seen[src] = s.fs;
    x->df[src] = 0;
    x->queue[0] = src;
    x->bseen[b] = s.bs;
    x->db[b] = 0;
    x->bqueue[0] = b;
    int best = 0;
    while (!best && f.head < f.tail && k.head < k.tail) {
        if (f.cost <= k.cost) {
            expand(&s, &f, &k, 0, &best);
        } else {
            expand(&s, &k, &f, 1, &best);
            s.rb++;
        }
    }
    if (!best) return 0;
    s.D = best;
    /* the walk: the first neighbour on a shortest path, hop by hop */
    int v = src;
    for (int j = 0; j < s.D; j++) {
        int take = -1;
        for (int i = x->adj_off[v]; i < x->adj_off[v + 1] && take < 0; i++) {
            int u = x->adj_node[i];
            if (!link_ok(t, r, x->adj_dl[i], thr)) continue;
            if (j + 1 == s.D ? u == b
                             : fwd_ok(t, r, u) && on_path(&s, u, j + 1))
                take = i;
        }
        HW_NEVER(take < 0);
        x->path[j] = x->adj_dl[take];
        v = x->adj_node[take];
    }
    return s.D;
}

/* Computes routes from src to each of targets[0..nt) not cached yet and
 * stores them under key space `space`; unreachable ones get an empty
 * record. The caller holds the mutex. */
static void compute_routes(const prof_topo *t, const rules *r, int space,
                           int src, const int *targets, int nt)
{
    prof_topo_x *x = t->x;
    int n = t->n_nodes;
    /* one search uses at most 3 n_levels + 1 stamps; clear before a wrap */
    if (x->seen && x->stamp > UINT_MAX - 3 * (unsigned)x->n_levels - 2) {
        memset(x->seen, 0, sizeof *x->seen * (size_t)n);
        memset(x->want, 0, sizeof *x->want * (size_t)n);
        memset(x->bseen, 0, sizeof *x->bseen * (size_t)n);
        memset(x->gseen, 0, sizeof *x->gseen * (size_t)n);
        x->stamp = 0;
    }
    unsigned wstamp = next_stamp(x, n);
    int left = 0;
    for (int i = 0; i < nt; i++) {
        int b = targets[i];
        if (b == src || x->want[b] == wstamp ||
            cache_get(x, mkkey(t, space, src, b)))
            continue;
        x->want[b] = wstamp;
        left++;
    }
    if (nt == 1 && left == 1) {
        int b = targets[0];
        x->want[b] = 0;
        for (int lv = 0; lv < x->n_levels; lv++) {
            int len = two_ended(t, r, src, b, x->levels[lv]);
            if (len) {
                cache_put(x, mkkey(t, space, src, b), x->path, len);
                return;
            }
        }
        cache_put(x, mkkey(t, space, src, b), NULL, 0);
        return;
    }
    for (int lv = 0; lv < x->n_levels && left > 0; lv++) {
        unsigned stamp = next_stamp(x, n);
        if (!bfs(t, r, src, x->levels[lv], stamp, wstamp, left)) continue;
        for (int i = 0; i < nt; i++) {
            int b = targets[i];
            if (x->want[b] != wstamp || x->seen[b] != stamp) continue;
            x->want[b] = 0;     /* done */
            left--;
            int len = 0;
            for (int v = b; v != src; v = prof_dl_tail(t, x->par[v]))
                x->path[len++] = x->par[v];
            for (int k = 0; k < len / 2; k++) {
                int tmp = x->path[k];
                x->path[k] = x->path[len - 1 - k];
                x->path[len - 1 - k] = tmp;
            }
            cache_put(x, mkkey(t, space, src, b), x->path, len);
        }
    }
    for (int i = 0; i < nt && left > 0; i++)
        if (x->want[targets[i]] == wstamp) {
            x->want[targets[i]] = 0;
            left--;
            cache_put(x, mkkey(t, space, src, targets[i]), NULL, 0);
        }
}


/* Plain (unstaged) route a->b; caller holds the mutex. */
static const prof_route_rec *plain(const prof_topo *t, int a, int b)
{
    prof_topo_x *x = t->x;
    uint64_t key = mkkey(t, KEY_PLAIN, a, b);
    const prof_route_rec *rec = cache_get(x, key);
    if (rec) return rec;
    rules r = {0};
    if (x->src_queries[a] < x->bulk_after) {
        x->src_queries[a]++;
        compute_routes(t, &r, KEY_PLAIN, a, &b, 1);
    } else if (x->src_queries[a] == x->bulk_after) {
        x->src_queries[a]++;
        int *tg = util_malloc(sizeof(int) * (size_t)(t->n_nodes + 1));
        int nt = 0;
        for (int v = 0; v < t->n_nodes; v++)
            if (t->nodes[v].kind == PROF_NODE_GPU ||
                t->nodes[v].server == t->nodes[a].server || v == b)
                tg[nt++] = v;
        compute_routes(t, &r, KEY_PLAIN, a, tg, nt);
        free(tg);
    } else {
        compute_routes(t, &r, KEY_PLAIN, a, &b, 1);
    }
    rec = cache_get(x, key);
    HW_NEVER(!rec);
    return rec;
}

static int is_consumer_gpu(const prof_topo *t, int v)
{
    const prof_node *nd = &t->nodes[v];
    return nd->kind == PROF_NODE_GPU && t->gpu_types[nd->gpu_type].consumer;
}

static int route_len_ok(const prof_route_rec *r, int a, int b)
{
    return a == b || r->n > 0;
}

/* The route a->b with consumer staging; caller holds the mutex. */
static const prof_route_rec *route_locked(const prof_topo *t, int a, int b)
{
    prof_topo_x *x = t->x;
    int ka = is_consumer_gpu(t, a) && t->nodes[b].kind != PROF_NODE_DRAM;
    int kb = is_consumer_gpu(t, b) && t->nodes[a].kind != PROF_NODE_DRAM;
    if (a == b || (!ka && !kb)) return plain(t, a, b);
    uint64_t key = mkkey(t, KEY_FINAL, a, b);
    const prof_route_rec *rec = cache_get(x, key);
    if (rec) return rec;

    /* staging chain: a, DRAM near a, DRAM near b (other server), b */
    int chain[4], nc = 0;
    chain[nc++] = a;
    if (ka) {
        int h = x->gpu_dram[t->nodes[a].gpu];
        if (h >= 0) chain[nc++] = h;
    }
    if (kb) {
        int h = x->gpu_dram[t->nodes[b].gpu];
        if (h >= 0 && t->nodes[h].server != t->nodes[chain[nc - 1]].server)
            chain[nc++] = h;
        else if (h >= 0 && nc == 1)
            chain[nc++] = h;
    }
    chain[nc++] = b;
    int total = 0, ok = 1;
    const prof_route_rec *seg[3];
    for (int i = 0; i + 1 < nc; i++) {
        seg[i] = plain(t, chain[i], chain[i + 1]);
        if (!route_len_ok(seg[i], chain[i], chain[i + 1])) ok = 0;
        total += seg[i]->n;
    }
    int *buf = util_malloc(sizeof(int) * (size_t)(total ? total : 1));
    int len = 0;
    if (ok)
        for (int i = 0; i + 1 < nc; i++) {
            if (seg[i]->n) memcpy(buf + len, seg[i]->dl,
                                  sizeof(int) * (size_t)seg[i]->n);
            len += seg[i]->n;
        }
    else
        len = 0;
    /* an NVLink path (bridge or switch) needs no staging */
    if (t->nodes[a].kind == PROF_NODE_GPU &&
        t->nodes[b].kind == PROF_NODE_GPU) {
        uint64_t nk = mkkey(t, KEY_NVLINK, a, b);
        const prof_route_rec *nv = cache_get(x, nk);
        if (!nv) {
            rules r = {1};
            compute_routes(t, &r, KEY_NVLINK, a, &b, 1);
            nv = cache_get(x, nk);
        }
        if (nv->n > 0) {
            double bn = prof_route_bw(t, nv->dl, nv->n);
            double bs = len ? prof_route_bw(t, buf, len) : 0;
            if (!len || bn > bs || (bn == bs && nv->n <= len)) {
                free(buf);
                return cache_put(x, key, nv->dl, nv->n);
            }
        }
    }
    rec = cache_put(x, key, buf, len);
    free(buf);
    return rec;
}

const int *prof_topo_route(const prof_topo *t, int a, int b, int *n)
{
    HW_NEVER(a < 0 || a >= t->n_nodes || b < 0 || b >= t->n_nodes);
    HW_NEVER(!t->x->adj_off);     /* prof_topo_finish not called */
    if (a == b) {
        *n = 0;
        return NULL;
    }
    prof_topo_x *x = t->x;
    pthread_mutex_lock(&x->mu);
    const prof_route_rec *r = route_locked(t, a, b);
    const int *dl = r->dl;
    *n = r->n;
    pthread_mutex_unlock(&x->mu);
    return dl;
}

const int *prof_topo_gpu_route(const prof_topo *t, int ga, int gb, int *n)
{
    HW_NEVER(ga < 0 || ga >= t->n_gpus || gb < 0 || gb >= t->n_gpus);
    return prof_topo_route(t, t->gpu_node[ga], t->gpu_node[gb], n);
}
