/* Server files (profiles/hw/README.md) and `--hw` arguments. A file is
 * either a template plus overrides or explicit GPU types, nodes and links;
 * every error names file:line:col and the field, exit code 2. The explicit
 * form is also what prof_topo_json writes, so a printed topology can be
 * edited and loaded again. */
#include "profiles/hw_internal.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const node_kinds[] = {"gpu", "cpu", "pcie_switch", "dram",
    "nvme", "nic", "nvswitch", "net_switch", NULL};
static const char *const link_kinds[] = {"pcie", "nvlink", "socket",
    "memory", "network", NULL};

static int opts_set(const prof_hw_opts *o)
{
    return o && (o->host_mem_bytes > 0 || o->nvme > 0 || o->nvme_set ||
                 o->gpus_per_server > 0 || o->pcie_gen > 0);
}

/* ---- template form ---- */

static prof_topo *load_template(const util_jobj *root, const prof_hw_opts *cli,
                                util_err *e)
{
    static const char *const keys[] = {"format", "name", "template",
        "host_mem_gib", "nvme", "nvme_model", "gpus_per_server", "pcie_gen",
        "gpu", "link_bw_scale", NULL};
    static const char *const tkeys[] = {"gpu", "count", NULL};
    if (util_jkeys(root, keys, e)) return NULL;
    util_jobj tp, go, sc;
    int have_gpu, have_sc;
    char gname[32], dname[64] = "";
    long count = 0, nvme = 0, gps = 0, gen = 0;
    double mem_gib = 0;
    if (util_jchild(root, "template", 1, &tp, NULL, e) ||
        util_jkeys(&tp, tkeys, e) ||
        util_jstr(&tp, "gpu", 1, gname, sizeof gname, e) ||
        util_jint(&tp, "count", 0, 1, 65536, &count, e) ||
        util_jnum(root, "host_mem_gib", 0, UTIL_HW_MIN, 1048576, &mem_gib, e) ||
        util_jint(root, "nvme", 0, 0, 64, &nvme, e) ||
        util_jstr(root, "nvme_model", 0, dname, sizeof dname, e) ||
        util_jint(root, "gpus_per_server", 0, 1, 16, &gps, e) ||
        util_jint(root, "pcie_gen", 0, 3, 5, &gen, e) ||
        util_jchild(root, "gpu", 0, &go, &have_gpu, e) ||
        util_jchild(root, "link_bw_scale", 0, &sc, &have_sc, e))
        return NULL;
    prof_gpu g;
    util_err e2;
    if (prof_gpu_get(gname, &g, &e2)) {
        util_jerr(e, &tp, "gpu", "%s", e2.msg);
        return NULL;
    }
    if (have_gpu) {
        if (json_object_get(go.j, "base")) {
            util_jerr(e, &go, "base", "not allowed here (the base is the "
                      "template's GPU)");
            return NULL;
        }
        if (prof_gpu_parse_ex(&go, &g, 1, e)) return NULL;
    }
    int drive = dname[0] ? prof_drive_find(dname) : -1;
    if (dname[0] && drive < 0) {
        util_jerr(e, root, "nvme_model", "'%s': not a drive sluice knows "
                  "(sluice profile list)", dname);
        return NULL;
    }
    prof_hw_opts o = {.host_mem_bytes = mem_gib * 1073741824.0,
                      .drive = drive + 1,
                      .nvme = (int)nvme,
                      .nvme_set = json_object_get(root->j, "nvme") != NULL,
                      .gpus_per_server = (int)gps,
                      .pcie_gen = (int)gen, .xfer = cli ? cli->xfer : 0};
    if (cli) {  /* command-line options win over the file */
        if (cli->host_mem_bytes > 0) o.host_mem_bytes = cli->host_mem_bytes;
        if (cli->nvme > 0 || cli->nvme_set)
            o.nvme = cli->nvme, o.nvme_set = 1;
        if (cli->gpus_per_server > 0) o.gpus_per_server = cli->gpus_per_server;
        if (cli->pcie_gen > 0) o.pcie_gen = cli->pcie_gen;
        if (cli->drive > 0) o.drive = cli->drive;
    }
    int n = count ? (int)count : prof_template_default_count(&g, &o);
    prof_topo *t = prof_topo_template_gpu(&g, n, &o, &e2);
    if (!t) {
        /* point at the field the template refused */
        static const char *const opt[][2] = {
            {"--gpus-per-server", "gpus_per_server"}, {"--nvme", "nvme"},
            {"--pcie-gen", "pcie_gen"}, {"--host-mem", "host_mem_gib"}};
        const char *key = "template";
        for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
            if (!strncmp(e2.msg, opt[i][0], strlen(opt[i][0])) &&
                json_object_get(root->j, opt[i][1]))
                key = opt[i][1];
        util_jerr(e, root, key, "%s", e2.msg);
        return NULL;
    }
    if (have_sc) {
        if (util_jkeys(&sc, link_kinds, e)) goto fail;
        for (int k = 0; k < PROF_LINK_KIND_COUNT; k++) {
            double f = 1;
            if (util_jnum(&sc, link_kinds[k], 0, UTIL_HW_MIN, 100, &f, e))
                goto fail;
            for (int i = 0; i < t->n_links; i++)
                if (t->links[i].kind == (prof_link_kind)k)
                    t->links[i].bw_bytes_per_s *= f;
        }
        if (prof_topo_finish(t, e)) goto fail;
    }
    if (json_object_get(root->j, "name") &&
        util_jstr(root, "name", 0, t->name, sizeof t->name, e))
        goto fail;
    return t;
fail:
    prof_topo_free(t);
    return NULL;
}

/* ---- explicit form ---- */

static int find_type(const prof_topo *t, const char *name)
{
    for (int i = 0; i < t->n_gpu_types; i++)
        if (!strcmp(t->gpu_types[i].name, name)) return i;
    return -1;
}

static int parse_node(const util_jobj *o, prof_topo *t, util_err *e)
{
    static const char *const keys[] = {"name", "kind", "server", "type",
        "mem_gib", "bw_gb_per_s", "capacity_tb", "read_gb_per_s",
        "write_gb_per_s", NULL};
    char name[32], type[32];
    int kind;
    long server = 0;
    if (util_jkeys(o, keys, e) ||
        util_jstr(o, "name", 1, name, sizeof name, e) ||
        util_jenum(o, "kind", 1, node_kinds, &kind, e) ||
        util_jint(o, "server", 0, kind == PROF_NODE_NET_SWITCH ? -1 : 0,
                  65535, &server, e))
        return -1;
    if (!name[0]) return util_jerr(e, o, "name", "empty name");
    /* fields that belong to other kinds are mistakes, not decoration */
    static const struct { const char *key; int kind, kind2; } own[] = {
        {"type", PROF_NODE_GPU, -1}, {"mem_gib", PROF_NODE_DRAM, -1},
        {"bw_gb_per_s", PROF_NODE_DRAM, -1},
        {"capacity_tb", PROF_NODE_NVME, -1},
        {"read_gb_per_s", PROF_NODE_NVME, -1},
        {"write_gb_per_s", PROF_NODE_NVME, -1}};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (json_object_get(o->j, own[i].key) && kind != own[i].kind)
            return util_jerr(e, o, own[i].key, "only %s nodes have this "
                             "field (this node is a %s)",
                             node_kinds[own[i].kind], node_kinds[kind]);
    int v = prof_topo_add_node(t, (prof_node_kind)kind, name, (int)server);
    prof_node *nd = &t->nodes[v];
    if (kind == PROF_NODE_GPU) {
        if (util_jstr(o, "type", 1, type, sizeof type, e)) return -1;
        int ti = find_type(t, type);
        if (ti < 0) {
            prof_gpu g;
            util_err e2;
            if (prof_gpu_get(type, &g, &e2))
                return util_jerr(e, o, "type", "%s (or one of this file's "
                                 "gpu_types)", e2.msg);
            ti = prof_topo_add_gpu_type(t, &g);
        }
        t->nodes[v].gpu_type = ti;
    } else if (kind == PROF_NODE_DRAM) {
        double gib, bw;
        if (util_jnum(o, "mem_gib", 1, UTIL_HW_MIN, 1048576, &gib, e) ||
            util_jnum(o, "bw_gb_per_s", 1, UTIL_HW_MIN, 1e5, &bw, e))
            return -1;
        nd->capacity_bytes = gib * 1073741824.0;
        nd->read_bw_bytes_per_s = nd->write_bw_bytes_per_s = bw * 1e9;
    } else if (kind == PROF_NODE_NVME) {
        double tb, rd, wr;
        if (util_jnum(o, "capacity_tb", 1, UTIL_POSITIVE, 1e4, &tb, e) ||
            util_jnum(o, "read_gb_per_s", 1, UTIL_HW_MIN, 1e4, &rd, e) ||
            util_jnum(o, "write_gb_per_s", 1, UTIL_HW_MIN, 1e4, &wr, e))
            return -1;
        nd->capacity_bytes = tb * 1e12;
        nd->read_bw_bytes_per_s = rd * 1e9;
        nd->write_bw_bytes_per_s = wr * 1e9;
    }
    return 0;
}

static int node_ref(const util_jobj *o, const char *key, const prof_topo *t,
                    const char *const *names, int *out, util_err *e)
{
    char s[64];
    if (util_jstr(o, key, 1, s, sizeof s, e)) return -1;
    *out = prof_topo_find(t, s);
    if (*out >= 0) return 0;
    const char *near = util_closest(s, names, (size_t)t->n_nodes);
    if (near)
        return util_jerr(e, o, key, "unknown node '%s' (did you mean '%s'?)",
                         s, near);
    return util_jerr(e, o, key, "unknown node '%s'", s);
}

static int parse_link(const util_jobj *o, prof_topo *t,
                      const char *const *names, util_err *e)
{
    static const char *const keys[] = {"a", "b", "kind", "bw_gb_per_s",
        "pcie_gen", "lanes", "latency_ns", NULL};
    int a, b, kind;
    if (util_jkeys(o, keys, e) || node_ref(o, "a", t, names, &a, e) ||
        node_ref(o, "b", t, names, &b, e) ||
        util_jenum(o, "kind", 1, link_kinds, &kind, e))
        return -1;
    if (a == b) return util_jerr(e, o, "b", "a link joins two different "
                                 "nodes");
    double bw = 0, lat = prof_link_default_latency_ns((prof_link_kind)kind);
    int has_gen = json_object_get(o->j, "pcie_gen") != NULL;
    int has_lanes = json_object_get(o->j, "lanes") != NULL;
    if (has_gen || has_lanes) {
        long gen = 0, lanes = 0;
        if (kind != PROF_LINK_PCIE)
            return util_jerr(e, o, has_gen ? "pcie_gen" : "lanes",
                             "only pcie links have this field");
        if (json_object_get(o->j, "bw_gb_per_s"))
            return util_jerr(e, o, "bw_gb_per_s", "give either bw_gb_per_s "
                             "or pcie_gen and lanes, not both");
        if (util_jint(o, "pcie_gen", 1, 1, 6, &gen, e) ||
            util_jint(o, "lanes", 1, 1, 32, &lanes, e))
            return -1;
        /* the link widths the PCIe specification defines */
        if (lanes & (lanes - 1))
            return util_jerr(e, o, "lanes", "%ld lanes: a PCIe link is x1, "
                             "x2, x4, x8, x16 or x32", lanes);
        bw = prof_pcie_bw((int)gen, (int)lanes);
    } else {
        if (util_jnum(o, "bw_gb_per_s", 1, UTIL_HW_MIN, 1e5, &bw, e))
            return -1;
        bw *= 1e9;
    }
    if (util_jnum(o, "latency_ns", 0, 0, 1e9, &lat, e)) return -1;
    prof_topo_add_link(t, a, b, (prof_link_kind)kind, bw, lat);
    return 0;
}

static int uf_find(int *p, int v)
{
    while (p[v] != v) v = p[v] = p[p[v]];
    return v;
}

static prof_topo *load_explicit(const util_jobj *root, util_err *e)
{
    static const char *const keys[] = {"format", "name", "host", "n_servers",
        "n_gpus", "gpus_per_server", "gpu_types", "nodes", "links", NULL};
    if (util_jkeys(root, keys, e)) return NULL;
    char name[96] = "";
    json_t *types, *nodes, *links;
    if (util_jstr(root, "name", 0, name, sizeof name, e) ||
        util_jarray(root, "gpu_types", 0, &types, e) ||
        util_jarray(root, "nodes", 1, &nodes, e) ||
        util_jarray(root, "links", 1, &links, e))
        return NULL;
    if (!name[0]) snprintf(name, sizeof name, "%s", root->doc->file);
    prof_topo *t = prof_topo_new(name);
    const char **names = NULL;
    int *uf = NULL;
    if (util_jstr(root, "host", 0, t->host, sizeof t->host, e)) goto fail;
    util_jobj o;
    for (size_t i = 0; types && i < json_array_size(types); i++) {
        prof_gpu g;
        if (util_jelem(root, "gpu_types", types, i, &o, e) ||
            prof_gpu_parse(&o, &g, e))
            goto fail;
        if (find_type(t, g.name) >= 0) {
            util_jerr(e, &o, "name", "GPU type '%s' is defined twice",
                      g.name);
            goto fail;
        }
        prof_topo_add_gpu_type(t, &g);
    }
    if (json_array_size(nodes) == 0) {
        util_jerr(e, root, "nodes", "no nodes");
        goto fail;
    }
    for (size_t i = 0; i < json_array_size(nodes); i++) {
        if (util_jelem(root, "nodes", nodes, i, &o, e) ||
            parse_node(&o, t, e))
            goto fail;
        for (int j = 0; j + 1 < t->n_nodes; j++)
            if (!strcmp(t->nodes[j].name, t->nodes[t->n_nodes - 1].name)) {
                util_jerr(e, &o, "name", "node '%s' is defined twice (first "
                          "as nodes[%d])", t->nodes[j].name, j);
                goto fail;
            }
    }
    names = util_malloc(sizeof *names * (size_t)t->n_nodes);
    for (int i = 0; i < t->n_nodes; i++) names[i] = t->nodes[i].name;
    for (size_t i = 0; i < json_array_size(links); i++)
        if (util_jelem(root, "links", links, i, &o, e) ||
            parse_link(&o, t, names, e))
            goto fail;
    /* every GPU must be reachable from the first one */
    uf = util_malloc(sizeof(int) * (size_t)t->n_nodes);
    for (int v = 0; v < t->n_nodes; v++) uf[v] = v;
    for (int i = 0; i < t->n_links; i++) {
        int ra = uf_find(uf, t->links[i].a), rb = uf_find(uf, t->links[i].b);
        if (ra != rb) uf[ra] = rb;
    }
    int first = -1;
    for (int v = 0; v < t->n_nodes; v++) {
        if (t->nodes[v].kind != PROF_NODE_GPU) continue;
        if (first < 0) { first = v; continue; }
        if (uf_find(uf, v) != uf_find(uf, first)) {
            util_jelem(root, "nodes", nodes, (size_t)v, &o, e);
            util_jerr(e, &o, "name", "GPU '%s' is not connected to GPU '%s' "
                      "(no chain of links joins them)", t->nodes[v].name,
                      t->nodes[first].name);
            goto fail;
        }
    }
    if (first < 0) {
        util_jerr(e, root, "nodes", "no node of kind gpu");
        goto fail;
    }
    util_err e2;
    if (prof_topo_finish(t, &e2)) {
        util_jerr(e, root, "nodes", "%s", e2.msg);
        goto fail;
    }
    long ng = t->n_gpus;
    if (util_jint(root, "n_gpus", 0, 0, 1 << 30, &ng, e)) goto fail;
    if (ng != t->n_gpus) {
        util_jerr(e, root, "n_gpus", "says %ld but the nodes hold %d GPU%s",
                  ng, t->n_gpus, t->n_gpus == 1 ? "" : "s");
        goto fail;
    }
    free(names);
    free(uf);
    return t;
fail:
    free(names);
    free(uf);
    prof_topo_free(t);
    return NULL;
}

static prof_topo *load(const char *path, const char *text,
                       const prof_hw_opts *o, util_err *e)
{
    util_jdoc d;
    if (util_jdoc_load(&d, path, text, e)) return NULL;
    util_jobj root = util_jroot(&d);
    prof_topo *t = NULL;
    char fmt[32] = "sluice-server";
    if (!json_is_object(root.j)) {
        int line, col;
        util_json_locate(d.text, "", &line, &col);
        util_errf(e, UTIL_EXIT_USAGE, "%s:%d:%d: expected an object (a "
                  "server file)", path, line ? line : 1, col ? col : 1);
    } else if (util_jstr(&root, "format", 0, fmt, sizeof fmt, e)) {
        /* error filled */
    } else if (!strcmp(fmt, "sluice-gpus")) {
        util_jerr(e, &root, "format", "this is a GPU catalog, not a server "
                  "file (prof_gpu_catalog_load reads it; a server file can "
                  "define GPU types under gpu_types)");
    } else if (strcmp(fmt, "sluice-server")) {
        util_jerr(e, &root, "format", "'%s' is not a server file (expected "
                  "\"sluice-server\")", fmt);
    } else if (json_object_get(root.j, "template")) {
        t = load_template(&root, o, e);
    } else if (opts_set(o)) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: --host-mem, --nvme, "
                  "--gpus-per-server and --pcie-gen adjust templates; this "
                  "file lists its nodes itself", path);
    } else {
        t = load_explicit(&root, e);
        if (t) t->own_nodes = 1;
    }
    util_jdoc_free(&d);
    return t;
}

prof_topo *prof_topo_load(const char *path, util_err *e)
{
    return load(path, NULL, NULL, e);
}

prof_topo *prof_topo_load_text(const char *name, const char *text,
                               const prof_hw_opts *o, util_err *e)
{
    return load(name, text, o, e);
}

/* ---- --hw arguments ---- */

int prof_hw_is_file(const char *s)
{
    size_t n = strlen(s);
    if (strchr(s, '/') || (n > 5 && !strcmp(s + n - 5, ".json"))) return 1;
    prof_gpu g;
    return prof_gpu_get(s, &g, NULL) != 0 && access(s, R_OK) == 0;
}

static int parse_count(const char *s, int *out, util_err *e)
{
    const char *p = s;
    if (*p == 'x' || *p == 'X') p++;
    long v;
    if (util_parse_int(p, -1000000000L, 1000000000L, &v) != 0)
        return util_errf(e, UTIL_EXIT_USAGE, "--hw: bad GPU count '%s' "
                         "(expected xN, e.g. x8)", s);
    if (v < 1)
        return util_errf(e, UTIL_EXIT_USAGE, "--hw: GPU count '%s': must be "
                         "at least 1", s);
    if (v > 65536)
        return util_errf(e, UTIL_EXIT_USAGE, "--hw: GPU count '%s': at most "
                         "65536", s);
    *out = (int)v;
    return 0;
}

prof_topo *prof_topo_from_args(int argc, char **argv, const prof_hw_opts *o,
                               util_err *e)
{
    char *tok[3];
    int nt = 0;
    /* "rtx2080ti x8" as one argument or two: split all on blanks */
    static const char *const seps = " \t";
    size_t used = 0;
    char all[256];
    all[0] = 0;
    for (int i = 0; i < argc; i++) {
        int w = snprintf(all + used, sizeof all - used, "%s%s", i ? " " : "",
                         argv[i]);
        if (w < 0 || (size_t)w >= sizeof all - used) {
            util_errf(e, UTIL_EXIT_USAGE, "--hw: arguments too long");
            return NULL;
        }
        used += (size_t)w;
    }
    char *save = NULL;
    /* the template's options may ride along ("rtx4090 x1 --host-mem 256G
     * --nvme 12": what a plan file's "hw" keeps), over those given */
    prof_hw_opts ho = {0};
    if (o) ho = *o;
    char *pending = NULL;
    for (char *s = strtok_r(all, seps, &save); s;
         s = strtok_r(NULL, seps, &save)) {
        if (pending) {
            char *av[2] = {pending, s};
            int k = 0;
            if (prof_hw_opts_arg(2, av, &k, &ho, e) < 0) return NULL;
            pending = NULL;
            continue;
        }
        if (!strncmp(s, "--", 2)) {
            char *av[1] = {s};
            int k = 0;
            int r = prof_hw_opts_arg(1, av, &k, &ho, e);
            if (r == 0) {
                util_errf(e, UTIL_EXIT_USAGE, "--hw: unknown option '%s' "
                          "(--host-mem, --nvme, --gpus-per-server, "
                          "--pcie-gen)", s);
                return NULL;
            }
            pending = s;   /* its value is the next word */
            continue;
        }
        if (nt == 3) {
            util_errf(e, UTIL_EXIT_USAGE, "--hw: unexpected '%s' (expected a "
                      "GPU type and a count, e.g. rtx2080ti x8, or a server "
                      "file)", s);
            return NULL;
        }
        tok[nt++] = s;
    }
    if (pending) {
        char *av[1] = {pending};
        int k = 0;
        prof_hw_opts_arg(1, av, &k, &ho, e);
        return NULL;
    }
    o = &ho;
    if (nt == 0) {
        util_errf(e, UTIL_EXIT_USAGE, "--hw: expected a GPU type and a count "
                  "(e.g. rtx2080ti x8) or a server file (FILE.json)");
        return NULL;
    }
    if (nt > 2) {
        util_errf(e, UTIL_EXIT_USAGE, "--hw: unexpected '%s' (expected a GPU "
                  "type and a count, e.g. rtx2080ti x8, or a server file)",
                  tok[2]);
        return NULL;
    }
    if (prof_hw_is_file(tok[0])) {
        if (nt > 1) {
            util_errf(e, UTIL_EXIT_USAGE, "--hw %s: a server file takes no "
                      "count (unexpected '%s')", tok[0], tok[1]);
            return NULL;
        }
        return load(tok[0], NULL, o, e);
    }
    prof_gpu g;
    if (prof_gpu_get(tok[0], &g, e)) {
        util_err_prefix(e, "--hw");
        return NULL;
    }
    int n = prof_template_default_count(&g, o);
    if (nt == 2 && parse_count(tok[1], &n, e)) return NULL;
    return prof_topo_template_gpu(&g, n, o, e);
}

const char *prof_topo_more_dram(const prof_topo *t)
{
    return t && t->own_nodes
               ? "raise mem_gib of the server file's dram nodes"
               : "give --host-mem";
}

const char *prof_topo_more_drives(const prof_topo *t)
{
    return t && t->own_nodes ? "add nvme nodes to the server file"
                             : "give --nvme N";
}
