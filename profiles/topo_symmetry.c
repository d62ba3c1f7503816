/* Symmetry of a server graph under a shift of whole servers: the test
 * that lets the simulator run one data-parallel replica for all of them.
 * The map sends server s of the first F servers to server (s + k) mod F,
 * node for node in the order the servers were built, and keeps every node
 * outside them (the network fabric, servers past F) in place. It is an
 * automorphism when every link maps onto a link of the same kind,
 * bandwidth and latency, and every node onto one of the same kind, GPU
 * type and memory figures; then the max-min rates of any set of flows are
 * the same for the set and for its image. The orbits of the links under a
 * shift are kept by the topology: a search asks for the same few shifts
 * for thousands of candidates. */
#include <stdlib.h>
#include <string.h>

#include "profiles/hw_internal.h"

typedef struct edge {
    int a, b, kind;
    double bw, lat;
    int id;             /* link index */
} edge;

static int edge_cmp(const void *x, const void *y)
{
    const edge *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    if (p->b != q->b) return p->b < q->b ? -1 : 1;
    if (p->kind != q->kind) return p->kind < q->kind ? -1 : 1;
    if (p->bw != q->bw) return p->bw < q->bw ? -1 : 1;
    return (p->lat > q->lat) - (p->lat < q->lat);
}

static int edge_cmp_id(const void *x, const void *y)
{
    int c = edge_cmp(x, y);
    if (c) return c;
    const edge *p = x, *q = y;
    return (p->id > q->id) - (p->id < q->id);
}

static edge edge_of(int a, int b, const prof_link *l)
{
    edge x = {a < b ? a : b, a < b ? b : a, (int)l->kind, l->bw_bytes_per_s,
              l->latency_ns, -1};
    return x;
}

static int same_node(const prof_node *x, const prof_node *y)
{
    return x->kind == y->kind && x->gpu_type == y->gpu_type &&
           x->capacity_bytes == y->capacity_bytes &&
           x->read_bw_bytes_per_s == y->read_bw_bytes_per_s &&
           x->write_bw_bytes_per_s == y->write_bw_bytes_per_s;
}

int *prof_topo_shift_map(const prof_topo *t, int stride, int count)
{
    int gps = t->gpus_per_server;
    if (gps <= 0 || stride <= 0 || count < 2 || stride % gps ||
        (long)stride * count > t->n_gpus)
        return NULL;
    int k = stride / gps, F = k * count;
    if (F > t->n_servers) return NULL;
    /* GPUs numbered server by server, every server of the group full */
    for (int g = 0; g < F * gps; g++)
        if (t->nodes[t->gpu_node[g]].server != g / gps) return NULL;
    /* nodes of each server in build order; same shape everywhere */
    int *cnt = util_calloc((size_t)F, sizeof(int));
    int *pos = util_malloc(sizeof(int) * (size_t)t->n_nodes);
    for (int v = 0; v < t->n_nodes; v++) {
        int s = t->nodes[v].server;
        pos[v] = s >= 0 && s < F ? cnt[s]++ : -1;
    }
    int per = cnt[0], ok = 1;
    for (int s = 1; s < F; s++)
        if (cnt[s] != per) ok = 0;
    int *list = NULL, *map = NULL, *dl = NULL;
    edge *es = NULL;
    if (!ok) goto out;
    list = util_malloc(sizeof(int) * (size_t)F * per);
    for (int v = 0; v < t->n_nodes; v++)
        if (pos[v] >= 0) list[t->nodes[v].server * per + pos[v]] = v;
    map = util_malloc(sizeof(int) * (size_t)t->n_nodes);
    for (int v = 0; v < t->n_nodes && ok; v++) {
        int s = t->nodes[v].server;
        map[v] = pos[v] < 0 ? v : list[((s + k) % F) * per + pos[v]];
        if (!same_node(&t->nodes[v], &t->nodes[map[v]])) ok = 0;
    }
    if (!ok) goto out;
    /* every link onto a link alike; parallel twins would make the image
     * ambiguous, so a graph with them is not folded */
    es = util_malloc(sizeof(edge) * (size_t)(t->n_links + 1));
    for (int i = 0; i < t->n_links; i++) {
        es[i] = edge_of(t->links[i].a, t->links[i].b, &t->links[i]);
        es[i].id = i;
    }
    qsort(es, (size_t)t->n_links, sizeof *es, edge_cmp_id);
    for (int i = 1; i < t->n_links && ok; i++)
        if (!edge_cmp(&es[i - 1], &es[i])) ok = 0;
    dl = util_malloc(sizeof(int) * (size_t)(2 * t->n_links + 1));
    for (int i = 0; i < t->n_links && ok; i++) {
        const prof_link *l = &t->links[i];
        edge img = edge_of(map[l->a], map[l->b], l);
        const edge *hit = bsearch(&img, es, (size_t)t->n_links, sizeof *es,
                                  edge_cmp);
        if (!hit) {
            ok = 0;
            break;
        }
        int j = hit->id, fwd = t->links[j].a == map[l->a];
        dl[2 * i] = 2 * j + !fwd;
        dl[2 * i + 1] = 2 * j + fwd;
    }
out:
    free(es);
    free(map);
    free(list);
    free(pos);
    free(cnt);
    if (!ok) {
        free(dl);
        return NULL;
    }
    return dl;
}

int prof_topo_shift_symmetric(const prof_topo *t, int stride, int count)
{
    int *m = prof_topo_shift_map(t, stride, count);
    free(m);
    return m != NULL;
}

/* Orbits of one shift; rep and mult NULL where it is not an automorphism. */
typedef struct prof_orbits {
    int stride, count;
    int *rep, *mult;
} prof_orbits;

void prof_topo_orbits_clear(prof_topo_x *x)
{
    for (int i = 0; i < x->n_orbits; i++) {
        free(x->orbits[i].rep);
        free(x->orbits[i].mult);
    }
    free(x->orbits);
    x->orbits = NULL;
    x->n_orbits = 0;
}

/* Walks each orbit of the shift once: its smallest link stands for it. */
static void orbits_fill(const int *shift, int n, int count, int *rep,
                        int *mult)
{
    for (int l = 0; l < n; l++) rep[l] = -1;
    for (int l = 0; l < n; l++) {
        if (rep[l] >= 0) continue;
        int z = 0, r = l;
        for (int x = l;; x = shift[x]) {
            if (x < r) r = x;
            z++;
            if (shift[x] == l || z > count) break;
        }
        UTIL_NEVER(count % z);
        for (int x = l, i = 0; i < z; x = shift[x], i++) {
            rep[x] = r;
            mult[x] = count / z;
        }
    }
}

int prof_topo_link_orbits(const prof_topo *t, int stride, int count,
                          const int **rep, const int **mult)
{
    prof_topo_x *x = t->x;
    pthread_mutex_lock(&x->mu);
    prof_orbits *o = NULL;
    for (int i = 0; i < x->n_orbits && !o; i++)
        if (x->orbits[i].stride == stride && x->orbits[i].count == count)
            o = &x->orbits[i];
    if (!o) {
        x->orbits = util_realloc(x->orbits,
                                 sizeof *x->orbits * (size_t)(x->n_orbits + 1));
        o = &x->orbits[x->n_orbits++];
        *o = (prof_orbits){stride, count, NULL, NULL};
        int *shift = prof_topo_shift_map(t, stride, count);
        if (shift) {
            int n = 2 * t->n_links;
            o->rep = util_malloc(sizeof(int) * (size_t)(n + 1));
            o->mult = util_malloc(sizeof(int) * (size_t)(n + 1));
            orbits_fill(shift, n, count, o->rep, o->mult);
            free(shift);
        }
    }
    *rep = o->rep;
    *mult = o->mult;
    pthread_mutex_unlock(&x->mu);
    return o->rep != NULL;
}
