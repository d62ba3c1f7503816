/* Topologies for people (a tree per server: sockets, switches, devices,
 * with each link's bandwidth per direction and latency; big clusters show
 * one server in full and summarise the rest) and as JSON in the server
 * file format, so a printed topology can be edited and loaded again. */
#include "profiles/hw_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COL_LINK 58     /* where the link column starts; lines fit 100 */

static void desc(const prof_topo *t, int v, char *buf, size_t n)
{
    const prof_node *nd = &t->nodes[v];
    char a[32], b[32], c[32];
    switch (nd->kind) {
    case PROF_NODE_GPU: {
        const prof_gpu *g = &t->gpu_types[nd->gpu_type];
        snprintf(buf, n, "%s, %s", g->name,
                 util_fmt_bytes(g->mem_bytes, a, sizeof a));
        break;
    }
    case PROF_NODE_DRAM:
        snprintf(buf, n, "host memory %s, %s",
                 util_fmt_bytes(nd->capacity_bytes, a, sizeof a),
                 util_fmt_bw(nd->read_bw_bytes_per_s, b, sizeof b));
        break;
    case PROF_NODE_NVME:
        snprintf(buf, n, "NVMe %.2f TB, rd %s wr %s",
                 nd->capacity_bytes / 1e12,
                 util_fmt_bw(nd->read_bw_bytes_per_s, b, sizeof b),
                 util_fmt_bw(nd->write_bw_bytes_per_s, c, sizeof c));
        break;
    case PROF_NODE_CPU: snprintf(buf, n, "CPU socket"); break;
    case PROF_NODE_PCIE_SWITCH: snprintf(buf, n, "PCIe switch"); break;
    case PROF_NODE_NIC: snprintf(buf, n, "NIC"); break;
    case PROF_NODE_NVSWITCH: snprintf(buf, n, "NVSwitch fabric"); break;
    default: snprintf(buf, n, "network switch"); break;
    }
}

static void link_txt(const prof_topo *t, int li, char *buf, size_t n)
{
    const prof_link *l = &t->links[li];
    char b[32];
    snprintf(buf, n, "%-6s %10s %6.0f ns", prof_link_kind_name(l->kind),
             util_fmt_bw(l->bw_bytes_per_s, b, sizeof b), l->latency_ns);
}

/* One tree line: prefix, name and description, then the link to the
 * parent in its own column. */
static void line(FILE *f, const char *prefix, const prof_topo *t, int v,
                 int li)
{
    char d[96], left[160], lk[64] = "";
    desc(t, v, d, sizeof d);
    snprintf(left, sizeof left, "%s%s  %s", prefix, t->nodes[v].name, d);
    if (li >= 0) link_txt(t, li, lk, sizeof lk);
    if (!lk[0]) fprintf(f, "%s\n", left);
    else if (strlen(left) >= COL_LINK) fprintf(f, "%s  %s\n", left, lk);
    else fprintf(f, "%-*s%s\n", COL_LINK, left, lk);
}

typedef struct tree {
    int *parent_link;   /* link to the parent; -1 for roots */
    int *placed;
} tree;

static int tree_edge(prof_link_kind k)
{
    return k == PROF_LINK_PCIE || k == PROF_LINK_MEMORY;
}

static void print_sub(FILE *f, const prof_topo *t, tree *tr, int v,
                      char *prefix, size_t plen)
{
    const prof_topo_x *x = t->x;
    /* children: unplaced neighbours over PCIe/memory in the same server */
    int deg = x->adj_off[v + 1] - x->adj_off[v];
    int *kids = util_malloc(sizeof(int) * (size_t)(2 * deg + 1));
    int *kl = kids + deg, nk = 0;
    for (int i = x->adj_off[v]; i < x->adj_off[v + 1]; i++) {
        int u = x->adj_node[i], li = x->adj_dl[i] >> 1;
        if (tr->placed[u] || !tree_edge(t->links[li].kind) ||
            t->nodes[u].server != t->nodes[v].server)
            continue;
        tr->placed[u] = 1;
        kids[nk] = u;
        kl[nk++] = li;
    }
    for (int i = 0; i < nk; i++) {
        int last = i == nk - 1;
        char p2[128];
        snprintf(p2, sizeof p2, "%s%s", prefix, last ? "`- " : "|- ");
        line(f, p2, t, kids[i], kl[i]);
        size_t l = strlen(prefix);
        if (l + 4 < plen) {
            snprintf(prefix + l, plen - l, "%s", last ? "   " : "|  ");
            print_sub(f, t, tr, kids[i], prefix, plen);
            prefix[l] = 0;
        }
    }
    free(kids);
}

static void print_server(FILE *f, const prof_topo *t, tree *tr, int s)
{
    int ng = 0;
    for (int v = 0; v < t->n_nodes; v++)
        if (t->nodes[v].server == s && t->nodes[v].kind == PROF_NODE_GPU) ng++;
    fprintf(f, "server n%d: %d GPU%s\n", s, ng, ng == 1 ? "" : "s");
    char prefix[128];
    for (int v = 0; v < t->n_nodes; v++) {
        if (t->nodes[v].server != s || t->nodes[v].kind != PROF_NODE_CPU)
            continue;
        tr->placed[v] = 1;
        line(f, "  ", t, v, -1);
        snprintf(prefix, sizeof prefix, "  ");
        print_sub(f, t, tr, v, prefix, sizeof prefix);
    }
    /* whatever no CPU reaches: roots of their own */
    for (int v = 0; v < t->n_nodes; v++) {
        if (t->nodes[v].server != s || tr->placed[v] ||
            t->nodes[v].kind == PROF_NODE_NVSWITCH)
            continue;
        tr->placed[v] = 1;
        line(f, "  ", t, v, -1);
        snprintf(prefix, sizeof prefix, "  ");
        print_sub(f, t, tr, v, prefix, sizeof prefix);
    }
    /* socket links */
    char lk[64];
    for (int i = 0; i < t->n_links; i++) {
        const prof_link *l = &t->links[i];
        if (l->kind != PROF_LINK_SOCKET || t->nodes[l->a].server != s) continue;
        char left[96];
        link_txt(t, i, lk, sizeof lk);
        snprintf(left, sizeof left, "  %s <-> %s", t->nodes[l->a].name,
                 t->nodes[l->b].name);
        fprintf(f, "%-*s%s\n", COL_LINK, left, lk);
    }
    /* NVLink: switches as one line each, direct links in pairs per line */
    int pairs = 0;
    for (int v = 0; v < t->n_nodes; v++) {
        if (t->nodes[v].server != s || t->nodes[v].kind != PROF_NODE_NVSWITCH)
            continue;
        tr->placed[v] = 1;
        int cnt = 0, li0 = -1, same = 1;
        for (int i = t->x->adj_off[v]; i < t->x->adj_off[v + 1]; i++) {
            int li = t->x->adj_dl[i] >> 1;
            const prof_link *l = &t->links[li], *l0 = &t->links[li0 < 0 ? li
                                                                  : li0];
            if (l->bw_bytes_per_s != l0->bw_bytes_per_s ||
                l->latency_ns != l0->latency_ns)
                same = 0;
            if (li0 < 0) li0 = li;
            cnt++;
        }
        char left[96];
        snprintf(left, sizeof left, "  %s  NVSwitch fabric, %d GPU links%s",
                 t->nodes[v].name, cnt, same ? " of" : " (first)");
        if (li0 >= 0) link_txt(t, li0, lk, sizeof lk);
        else lk[0] = 0;
        fprintf(f, "%-*s%s\n", COL_LINK, left, lk);
    }
    for (int i = 0; i < t->n_links; i++) {
        const prof_link *l = &t->links[i];
        if (l->kind != PROF_LINK_NVLINK || t->nodes[l->a].server != s ||
            t->nodes[l->a].kind == PROF_NODE_NVSWITCH ||
            t->nodes[l->b].kind == PROF_NODE_NVSWITCH)
            continue;
        if (!pairs++) fprintf(f, "  NVLink (GPU pairs):\n");
        char bw[32];
        fprintf(f, "    %s <-> %s %s %.0f ns\n", t->nodes[l->a].name,
                t->nodes[l->b].name,
                util_fmt_bw(l->bw_bytes_per_s, bw, sizeof bw), l->latency_ns);
    }
}

/* Servers alike: the same node kinds in the same order apart from GPUs.
 * Every server's counts by kind, from one pass over the nodes (a pass per
 * server would grow with the square of the cluster). */
static int *signatures(const prof_topo *t)
{
    int *sig = util_calloc((size_t)(t->n_servers > 0 ? t->n_servers : 1) *
                               PROF_NODE_KIND_COUNT, sizeof(int));
    for (int v = 0; v < t->n_nodes; v++) {
        int s = t->nodes[v].server;
        if (s >= 0 && s < t->n_servers)
            sig[s * PROF_NODE_KIND_COUNT + t->nodes[v].kind]++;
    }
    return sig;
}

static void signature(const int *sigs, int s, int *counts)
{
    memcpy(counts, sigs + s * PROF_NODE_KIND_COUNT,
           sizeof(int) * PROF_NODE_KIND_COUNT);
}

static void print_route(FILE *f, const prof_topo *t, int ga, int gb,
                        const char *label)
{
    int n;
    const int *dl = prof_topo_gpu_route(t, ga, gb, &n);
    char bw[32], buf[1024];
    int at = snprintf(buf, sizeof buf, "  %-14s %s, %.0f ns, %d link%s: %s",
                      label, util_fmt_bw(prof_route_bw(t, dl, n), bw,
                                         sizeof bw),
                      prof_route_latency_ns(t, dl, n), n, n == 1 ? "" : "s",
                      t->nodes[t->gpu_node[ga]].name);
    for (int i = 0; i < n && at < (int)sizeof buf - 40; i++)
        at += snprintf(buf + at, sizeof buf - (size_t)at, " > %s",
                       t->nodes[prof_dl_head(t, dl[i])].name);
    /* wrap at 100 columns, continuation lines indented */
    const char *p = buf;
    int first = 1;
    while (*p) {
        int width = first ? 100 : 92;
        int len = (int)strlen(p);
        if (len <= width) {
            fprintf(f, "%s%s\n", first ? "" : "        ", p);
            break;
        }
        int cut = width;
        while (cut > 0 && p[cut] != ' ') cut--;
        if (cut == 0) cut = width;
        fprintf(f, "%s%.*s\n", first ? "" : "        ", cut, p);
        p += cut;
        while (*p == ' ') p++;
        first = 0;
    }
}

void prof_topo_print(const prof_topo *t, FILE *f)
{
    char a[32], b[32];
    fprintf(f, "%s\n", t->name);
    if (t->host[0]) fprintf(f, "  host: %s\n", t->host);
    for (int i = 0; i < t->n_gpu_types; i++) {
        const prof_gpu *g = &t->gpu_types[i];
        fprintf(f, "  GPU %s: %s (%s), %s at %s\n", g->name, g->full_name,
                g->arch, util_fmt_bytes(g->mem_bytes, a, sizeof a),
                util_fmt_bw(g->mem_bw_bytes_per_s, b, sizeof b));
        fprintf(f, "    dense TFLOP/s (fp32 accumulate):");
        for (int d = 0; d < PROF_DT_COUNT; d++) {
            if (g->peak_flops[d] > 0)
                fprintf(f, " %s %.1f", prof_dtype_name((prof_dtype)d),
                        g->peak_flops[d] / 1e12);
            else
                fprintf(f, " %s -", prof_dtype_name((prof_dtype)d));
        }
        fprintf(f, "; PCIe %d.0 x%d\n", g->pcie_gen, g->pcie_lanes);
        fprintf(f, "    NVLink: ");
        if (g->nvlink_links)
            fprintf(f, "%d x %s", g->nvlink_links,
                    util_fmt_bw(g->nvlink_bw_bytes_per_s, a, sizeof a));
        else
            fprintf(f, "none");
        fprintf(f, "; %s; TDP %.0f W\n", g->consumer ? "GeForce: no PCIe "
                "peer-to-peer, copies stage through host memory" :
                "PCIe peer-to-peer", g->tdp_w);
    }
    fprintf(f, "  %d GPU%s in %d server%s; link bandwidths are achievable, "
            "per direction\n", t->n_gpus, t->n_gpus == 1 ? "" : "s",
            t->n_servers, t->n_servers == 1 ? "" : "s");

    fprintf(f, "%-*s%s\n", COL_LINK, "", "link to parent, per direction");
    tree tr;
    tr.placed = util_calloc((size_t)t->n_nodes, sizeof(int));
    tr.parent_link = NULL;
    int sig0[PROF_NODE_KIND_COUNT], sig[PROF_NODE_KIND_COUNT];
    int *sigs = signatures(t);
    signature(sigs, 0, sig0);
    print_server(f, t, &tr, 0);
    int full = t->n_servers <= 2;
    for (int s = 1; s < t->n_servers;) {
        signature(sigs, s, sig);
        int g0 = sig[PROF_NODE_GPU];
        sig[PROF_NODE_GPU] = sig0[PROF_NODE_GPU];
        if (full || memcmp(sig, sig0, sizeof sig)) {
            print_server(f, t, &tr, s++);
            continue;
        }
        int e2 = s;     /* run of servers like n0 with the same GPU count */
        while (e2 + 1 < t->n_servers) {
            signature(sigs, e2 + 1, sig);
            int gg = sig[PROF_NODE_GPU];
            sig[PROF_NODE_GPU] = sig0[PROF_NODE_GPU];
            if (gg != g0 || memcmp(sig, sig0, sizeof sig)) break;
            e2++;
        }
        if (e2 > s)
            fprintf(f, "servers n%d..n%d: like n0, %d GPUs each\n", s, e2, g0);
        else
            fprintf(f, "server n%d: like n0, %d GPU%s\n", s, g0,
                    g0 == 1 ? "" : "s");
        s = e2 + 1;
    }
    /* the network */
    for (int v = 0; v < t->n_nodes; v++) {
        if (t->nodes[v].kind != PROF_NODE_NET_SWITCH) continue;
        int cnt = 0, li0 = -1;
        for (int i = t->x->adj_off[v]; i < t->x->adj_off[v + 1]; i++) {
            if (li0 < 0) li0 = t->x->adj_dl[i] >> 1;
            cnt++;
        }
        char left[96], lk[64] = "";
        snprintf(left, sizeof left, "network %s: switch, %d ports%s",
                 t->nodes[v].name, cnt, li0 >= 0 ? ", e.g." : "");
        if (li0 >= 0) link_txt(t, li0, lk, sizeof lk);
        fprintf(f, "%-*s%s\n", COL_LINK, left, lk);
    }
    free(tr.placed);
    free(sigs);

    /* routes from GPU 0: one example per distinct kind of path */
    if (t->n_gpus > 1) {
        fprintf(f, "routes from GPU 0 (widest path, then fewest links):\n");
        double seen_bw[8];
        int seen_n[8], ns = 0;
        for (int g = 1; g < t->n_gpus && ns < 8; g++) {
            int n;
            const int *dl = prof_topo_gpu_route(t, 0, g, &n);
            double bw = prof_route_bw(t, dl, n);
            int k;
            for (k = 0; k < ns; k++)
                if (seen_bw[k] == bw && seen_n[k] == n) break;
            if (k < ns) continue;
            seen_bw[ns] = bw;
            seen_n[ns++] = n;
            char label[32];
            snprintf(label, sizeof label, "to GPU %d:", g);
            print_route(f, t, 0, g, label);
        }
    }
}

json_t *prof_topo_json(const prof_topo *t)
{
    json_t *o = json_object();
    json_object_set_new(o, "format", json_string("sluice-server"));
    json_object_set_new(o, "name", json_string(t->name));
    if (t->host[0]) json_object_set_new(o, "host", json_string(t->host));
    json_object_set_new(o, "n_servers", json_integer(t->n_servers));
    json_object_set_new(o, "n_gpus", json_integer(t->n_gpus));
    json_object_set_new(o, "gpus_per_server",
                        json_integer(t->gpus_per_server));
    json_t *types = json_array();
    for (int i = 0; i < t->n_gpu_types; i++)
        json_array_append_new(types, prof_gpu_json(&t->gpu_types[i]));
    json_object_set_new(o, "gpu_types", types);
    json_t *nodes = json_array();
    for (int v = 0; v < t->n_nodes; v++) {
        const prof_node *nd = &t->nodes[v];
        json_t *n = json_object();
        json_object_set_new(n, "name", json_string(nd->name));
        json_object_set_new(n, "kind",
                            json_string(prof_node_kind_name(nd->kind)));
        json_object_set_new(n, "server", json_integer(nd->server));
        if (nd->kind == PROF_NODE_GPU)
            json_object_set_new(n, "type",
                                json_string(t->gpu_types[nd->gpu_type].name));
        if (nd->kind == PROF_NODE_DRAM) {
            json_object_set_new(n, "mem_gib",
                                json_real(nd->capacity_bytes / 1073741824.0));
            json_object_set_new(n, "bw_gb_per_s",
                                json_real(nd->read_bw_bytes_per_s / 1e9));
        }
        if (nd->kind == PROF_NODE_NVME) {
            json_object_set_new(n, "capacity_tb",
                                json_real(nd->capacity_bytes / 1e12));
            json_object_set_new(n, "read_gb_per_s",
                                json_real(nd->read_bw_bytes_per_s / 1e9));
            json_object_set_new(n, "write_gb_per_s",
                                json_real(nd->write_bw_bytes_per_s / 1e9));
        }
        json_array_append_new(nodes, n);
    }
    json_object_set_new(o, "nodes", nodes);
    json_t *links = json_array();
    for (int i = 0; i < t->n_links; i++) {
        const prof_link *l = &t->links[i];
        json_t *k = json_object();
        json_object_set_new(k, "a", json_string(t->nodes[l->a].name));
        json_object_set_new(k, "b", json_string(t->nodes[l->b].name));
        json_object_set_new(k, "kind",
                            json_string(prof_link_kind_name(l->kind)));
        json_object_set_new(k, "bw_gb_per_s",
                            json_real(l->bw_bytes_per_s / 1e9));
        json_object_set_new(k, "latency_ns", json_real(l->latency_ns));
        json_array_append_new(links, k);
    }
    json_object_set_new(o, "links", links);
    return o;
}
