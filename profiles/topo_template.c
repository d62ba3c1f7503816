/* Standard servers for `--hw GPU xN`: the commodity two-socket PCIe server
 * (GeForce and PCIe cards), a one-GPU desktop, DGX-1-like V100 nodes with
 * the hybrid cube-mesh NVLink, and DGX A100/H100/H200-like NVSwitch nodes;
 * more GPUs than a server holds become several servers on one non-blocking
 * InfiniBand fabric, the last one partly filled. Link bandwidths are
 * achievable payload rates per direction (raw rate x an efficiency per link
 * kind, see profiles/hw/README.md); latencies are one-way hardware ones. */
#include "profiles/hw_internal.h"

#include <math.h>
#include <string.h>

#define GB 1e9
#define GIB 1073741824.0
#define TB 1e12

/* Efficiency of each link kind: achievable / raw, per direction. */
#define PCIE_EFF 0.80    /* TLP/DLLP overhead; bandwidthTest pinned copies
                            reach ~12.5 of 15.75 GB/s on Gen3 x16 */
#define NVLINK_EFF 0.90  /* p2p copies reach ~90% of 25 GB/s per link */
#define NET_EFF 0.95     /* ib_write_bw reaches ~95% of the port rate */
#define SOCKET_EFF 0.55  /* remote-socket memory bandwidth ~ half of raw
                            UPI/QPI/xGMI (coherence traffic, snoops) */
#define DRAM_EFF 0.75    /* STREAM triad vs channel peak */

/* One-way latencies per link, ns: hardware only, no software overhead. */
#define LAT_PCIE 150.0
#define LAT_NVLINK 200.0
#define LAT_NVSWITCH 250.0
#define LAT_SOCKET 150.0
#define LAT_MEMORY 90.0
#define LAT_NET 500.0

double prof_pcie_bw(int gen, int lanes)
{
    /* per lane, per direction, after line coding: Gen1/2 8b/10b, Gen3+
     * 128b/130b; Gen6 (PAM4, FLIT) taken as twice Gen5 */
    static const double gts[] = {0, 2.5, 5, 8, 16, 32, 64};
    if (gen < 1) gen = 1;
    if (gen > 6) gen = 6;
    double coding = gen <= 2 ? 0.8 : 128.0 / 130.0;
    return gts[gen] * 1e9 * coding / 8 * lanes * PCIE_EFF;
}

/* The host platform of a template. Raw figures; efficiencies applied when
 * links are made. */
typedef struct platform {
    const char *desc;
    int pcie_gen;
    double socket_raw;          /* bytes/s per direction, all socket links */
    double dram_raw;            /* bytes/s per socket */
    double host_mem;            /* bytes per server */
    int nvme;                   /* drives per server */
    double nvme_cap, nvme_read, nvme_write;
    int nvme_gen, nvme_lanes;
    double nic_bits;            /* port rate, bit/s */
    const char *net;            /* "InfiniBand EDR" */
} platform;

/* NVMe drives by model: sequential read and write as their datasheets
 * give them (bursts: a consumer drive writes slower once its SLC cache
 * is full), capacity of the size named, PCIe generation and lanes. */
static const prof_drive drive_models[] = {
    {"samsung-990-pro", 2 * TB, 7.45 * GB, 6.9 * GB, 4, 4},   /* 2 TB */
    {"samsung-980-pro", 2 * TB, 7.0 * GB, 5.1 * GB, 4, 4},    /* 2 TB */
    {"samsung-970-evo-plus", 2 * TB, 3.5 * GB, 3.3 * GB, 3, 4},
    {"wd-sn850x", 2 * TB, 7.3 * GB, 6.6 * GB, 4, 4},          /* 2 TB */
    {"crucial-t700", 2 * TB, 12.4 * GB, 11.8 * GB, 5, 4},     /* 2 TB */
    {"intel-p5800x", 1.6 * TB, 7.2 * GB, 6.2 * GB, 4, 4},     /* Optane */
    {"samsung-pm9a3", 3.84 * TB, 6.9 * GB, 4.1 * GB, 4, 4},   /* U.2 */
};
#define N_DRIVES ((int)(sizeof drive_models / sizeof *drive_models))

const prof_drive *prof_drive_at(int k)
{
    return k >= 0 && k < N_DRIVES ? &drive_models[k] : NULL;
}

int prof_drive_find(const char *name)
{
    for (int k = 0; k < N_DRIVES; k++)
        if (!strcmp(drive_models[k].name, name)) return k;
    return -1;
}

/* Two-socket PCIe servers by PCIe generation. */
static const platform pcie_servers[] = {
    [3] = {"2x Intel Xeon Scalable 2nd gen (Cascade Lake): 3 UPI x 10.4 "
           "GT/s, 6x DDR4-2933 per socket", 3, 3 * 20.8 * GB,
           6 * 2.933 * 8 * GB, 384 * GIB, 1, 2 * TB, 3.2 * GB, 2.0 * GB, 3, 4,
           100e9, "InfiniBand EDR 100 Gb/s"},
    [4] = {"2x Intel Xeon Scalable 3rd gen (Ice Lake): 3 UPI x 11.2 GT/s, "
           "8x DDR4-3200 per socket", 4, 3 * 22.4 * GB, 8 * 3.2 * 8 * GB,
           512 * GIB, 1, 3.84 * TB, 7.0 * GB, 3.8 * GB, 4, 4, 200e9,
           "InfiniBand HDR 200 Gb/s"},
    [5] = {"2x Intel Xeon Scalable 4th gen (Sapphire Rapids): 4 UPI x 16 "
           "GT/s, 8x DDR5-4800 per socket", 5, 4 * 32.0 * GB,
           8 * 4.8 * 8 * GB, 1024 * GIB, 1, 3.84 * TB, 13.0 * GB, 6.6 * GB, 5,
           4, 400e9, "InfiniBand NDR 400 Gb/s"},
};

/* One-socket desktops by PCIe generation (2 memory channels). */
static const platform desktops[] = {
    [3] = {"desktop: 1 CPU socket, 2x DDR4-2666", 3, 0, 2 * 2.666 * 8 * GB,
           64 * GIB, 1, 2 * TB, 3.5 * GB, 2.5 * GB, 3, 4, 0, ""},
    [4] = {"desktop: 1 CPU socket, 2x DDR4-3200", 4, 0, 2 * 3.2 * 8 * GB,
           64 * GIB, 1, 2 * TB, 7.0 * GB, 5.0 * GB, 4, 4, 0, ""},
    [5] = {"desktop: 1 CPU socket, 2x DDR5-5600", 5, 0, 2 * 5.6 * 8 * GB,
           128 * GIB, 1, 2 * TB, 12.0 * GB, 11.0 * GB, 5, 4, 0, ""},
};

static const platform dgx1 = {
    "DGX-1 (V100): 2x Intel Xeon E5-2698 v4, 2 QPI x 9.6 GT/s, 4x "
    "DDR4-2133 per socket", 3, 2 * 19.2 * GB, 4 * 2.133 * 8 * GB, 512 * GIB,
    4, 1.92 * TB, 0.53 * GB, 0.50 * GB, 3, 4, 100e9,
    "InfiniBand EDR 100 Gb/s"};
static const platform dgx_a100 = {
    "DGX A100: 2x AMD EPYC 7742, xGMI socket links, 8x DDR4-3200 per socket",
    4, 4 * 32.0 * GB, 8 * 3.2 * 8 * GB, 1024 * GIB, 4, 3.84 * TB, 7.0 * GB,
    3.8 * GB, 4, 4, 200e9, "InfiniBand HDR 200 Gb/s"};
static const platform dgx_h100 = {
    "DGX H100: 2x Intel Xeon Platinum 8480C, 4 UPI x 16 GT/s, 8x DDR5-4800 "
    "per socket", 5, 4 * 32.0 * GB, 8 * 4.8 * 8 * GB, 2048 * GIB, 8,
    3.84 * TB, 7.0 * GB, 3.8 * GB, 4, 4, 400e9, "InfiniBand NDR 400 Gb/s"};

typedef struct build {
    prof_topo *t;
    const prof_gpu *gpu;
    int type;               /* index of the GPU type in t */
    platform p;
    int s;                  /* server being built */
} build;

static int node(build *b, prof_node_kind k, const char *what, int i)
{
    char name[32];
    snprintf(name, sizeof name, "n%d.%s%d", b->s, what, i);
    return prof_topo_add_node(b->t, k, name, b->s);
}

static int gpu_node(build *b, int local)
{
    int v = node(b, PROF_NODE_GPU, "gpu", local);
    b->t->nodes[v].gpu_type = b->type;
    return v;
}

static int dram_node(build *b, int socket, int sockets)
{
    int v = node(b, PROF_NODE_DRAM, "dram", socket);
    prof_node *n = &b->t->nodes[v];
    n->capacity_bytes = b->p.host_mem / sockets;
    n->read_bw_bytes_per_s = n->write_bw_bytes_per_s = b->p.dram_raw * DRAM_EFF;
    return v;
}

static int nvme_node(build *b, int i)
{
    int v = node(b, PROF_NODE_NVME, "nvme", i);
    prof_node *n = &b->t->nodes[v];
    n->capacity_bytes = b->p.nvme_cap;
    n->read_bw_bytes_per_s = b->p.nvme_read;
    n->write_bw_bytes_per_s = b->p.nvme_write;
    return v;
}

static void pcie(build *b, int a, int c, int gen, int lanes)
{
    prof_topo_add_link(b->t, a, c, PROF_LINK_PCIE, prof_pcie_bw(gen, lanes),
                       LAT_PCIE);
}

static int gpu_gen(const build *b)
{
    return b->gpu->pcie_gen < b->p.pcie_gen ? b->gpu->pcie_gen : b->p.pcie_gen;
}

/* CPU sockets with their memory; returns the first CPU node. */
static int sockets(build *b, int n)
{
    int cpu0 = -1;
    for (int i = 0; i < n; i++) {
        int c = node(b, PROF_NODE_CPU, "cpu", i);
        if (i == 0) cpu0 = c;
        int d = dram_node(b, i, n);
        prof_topo_add_link(b->t, c, d, PROF_LINK_MEMORY,
                           b->p.dram_raw * DRAM_EFF, LAT_MEMORY);
    }
    /* cpu i is node cpu0 + 2*i (each followed by its DRAM) */
    for (int i = 1; i < n; i++)
        prof_topo_add_link(b->t, cpu0, cpu0 + 2 * i, PROF_LINK_SOCKET,
                           b->p.socket_raw * SOCKET_EFF, LAT_SOCKET);
    return cpu0;
}

static void drives(build *b, const int *attach, int n_attach)
{
    for (int i = 0; i < b->p.nvme; i++) {
        int d = nvme_node(b, i);
        pcie(b, attach[i % n_attach], d, b->p.nvme_gen, b->p.nvme_lanes);
    }
}

static int nic(build *b, int i, int attach)
{
    int v = node(b, PROF_NODE_NIC, "nic", i);
    pcie(b, attach, v, b->p.pcie_gen, 16);
    return v;
}

/* Commodity box: 2 sockets, ceil(gps/4) PCIe switches (split over the
 * sockets) of 4 GPUs each, GPUs filling switch 0 first; DRAM per socket;
 * drives and one NIC on CPU 0's root ports. */
static void pcie_server(build *b, int ngpu, int gps, int *nics)
{
    int cpu0 = sockets(b, 2);
    int nsw = (gps + 3) / 4;
    int sw[8];
    for (int i = 0; i < nsw; i++) {
        sw[i] = node(b, PROF_NODE_PCIE_SWITCH, "sw", i);
        int cpu = cpu0 + 2 * (i * 2 / nsw);
        pcie(b, cpu, sw[i], b->p.pcie_gen, 16);
    }
    for (int g = 0; g < ngpu; g++) pcie(b, sw[g / 4], gpu_node(b, g),
                                        gpu_gen(b), b->gpu->pcie_lanes);
    int at[2] = {cpu0, cpu0 + 2};
    drives(b, at, 2);
    nics[0] = nic(b, 0, cpu0);
}

/* One GPU on the CPU's root port, one socket, a drive, no NIC. */
static void desktop(build *b)
{
    int cpu = sockets(b, 1);
    pcie(b, cpu, gpu_node(b, 0), gpu_gen(b), b->gpu->pcie_lanes);
    drives(b, &cpu, 1);
}

/* DGX-1 (V100): NVLink pairs and link counts of the hybrid cube mesh
 * (DGX-1 System Architecture whitepaper, WP-08437-002: two fully connected
 * quads 0-3 and 4-7 plus 0-4, 1-5, 2-6, 3-7; eight pairs doubled; six
 * links per GPU). */
static const int cube_mesh[16][3] = {
    {0, 1, 1}, {0, 2, 1}, {0, 3, 2}, {0, 4, 2}, {1, 2, 2}, {1, 3, 1},
    {1, 5, 2}, {2, 3, 2}, {2, 6, 1}, {3, 7, 1}, {4, 5, 1}, {4, 6, 1},
    {4, 7, 2}, {5, 6, 2}, {5, 7, 1}, {6, 7, 2},
};

/* PCIe: each socket has two switches, each with 2 GPUs and 1 NIC. */
static void dgx1_server(build *b, int ngpu, int *nics)
{
    int cpu0 = sockets(b, 2);
    int sw[4], g[8];
    for (int i = 0; i < 4; i++) {
        sw[i] = node(b, PROF_NODE_PCIE_SWITCH, "sw", i);
        pcie(b, cpu0 + 2 * (i / 2), sw[i], 3, 16);
    }
    for (int i = 0; i < ngpu; i++) {
        g[i] = gpu_node(b, i);
        pcie(b, sw[i / 2], g[i], gpu_gen(b), b->gpu->pcie_lanes);
    }
    for (int i = 0; i < 16; i++) {
        int x = cube_mesh[i][0], y = cube_mesh[i][1];
        if (x < ngpu && y < ngpu)
            prof_topo_add_link(b->t, g[x], g[y], PROF_LINK_NVLINK,
                               cube_mesh[i][2] * b->gpu->nvlink_bw_bytes_per_s
                                   * NVLINK_EFF, LAT_NVLINK);
    }
    for (int i = 0; i < 4; i++) nics[i] = nic(b, i, sw[i]);
    int at[1] = {cpu0};
    drives(b, at, 1);
}

/* DGX A100/H100: the NVSwitch chips as one non-blocking switch (each GPU's
 * link carries all its NVLinks); four host PCIe switches (two per socket),
 * each holding two leaf switches of one GPU and its NIC (rail-matched
 * GPUDirect RDMA); drives spread over the host switches. */
static void dgx_nvswitch_server(build *b, int ngpu, int *nics)
{
    int cpu0 = sockets(b, 2);
    int sw[4];
    for (int i = 0; i < 4; i++) {
        sw[i] = node(b, PROF_NODE_PCIE_SWITCH, "sw", i);
        pcie(b, cpu0 + 2 * (i / 2), sw[i], b->p.pcie_gen, 16);
    }
    int nvs = node(b, PROF_NODE_NVSWITCH, "nvswitch", 0);
    for (int i = 0; i < 8; i++) {
        int leaf = node(b, PROF_NODE_PCIE_SWITCH, "leaf", i);
        pcie(b, sw[i / 2], leaf, b->p.pcie_gen, 16);
        if (i < ngpu) {
            int g = gpu_node(b, i);
            pcie(b, leaf, g, gpu_gen(b), b->gpu->pcie_lanes);
            prof_topo_add_link(b->t, g, nvs, PROF_LINK_NVLINK,
                               b->gpu->nvlink_links *
                                   b->gpu->nvlink_bw_bytes_per_s * NVLINK_EFF,
                               LAT_NVSWITCH);
        }
        nics[i] = nic(b, i, leaf);
    }
    drives(b, sw, 4);
}

/* CPU cores as devices (the CPU executor): every core reaches the others
 * through the socket's memory, so each has a copy link to the socket:
 * in-process copies (memcpy) or shared-memory messages between processes.
 * The latency stands for a thread's wake-up on the receiving side. */
#define CPU_COPY_BW (8.0 * GB)
#define LAT_CPU_COPY 2500.0

static void cpu_host(build *b, int ndev, int xfer)
{
    int cpu = sockets(b, 1);
    double bw = CPU_COPY_BW, lat = LAT_CPU_COPY;
    /* calibrated: a transfer crosses two links (core, host, core), so each
     * has the measured bandwidth and half the measured latency */
    const prof_calib *c = b->gpu->calib;
    if (c && xfer >= 0 && xfer < PROF_XFER_COUNT && c->link[xfer].present) {
        bw = c->link[xfer].bw_bytes_per_s;
        lat = c->link[xfer].latency_ns / 2;
    }
    for (int i = 0; i < ndev; i++) {
        int v = node(b, PROF_NODE_GPU, "core", i);
        b->t->nodes[v].gpu_type = b->type;
        prof_topo_add_link(b->t, cpu, v, PROF_LINK_MEMORY, bw, lat);
    }
    int first = b->t->n_nodes;
    drives(b, &cpu, 1);
    /* calibrated: the drives together read and write as a run's tier
     * file did (the executor writes one file, the simulator stripes) */
    int nd = b->p.nvme > 0 ? b->p.nvme : 1;
    for (int v = first; c && c->tiers.present && v < b->t->n_nodes; v++)
        if (b->t->nodes[v].kind == PROF_NODE_NVME) {
            prof_node *x = &b->t->nodes[v];
            if (c->tiers.read_bytes_per_s > 0)
                x->read_bw_bytes_per_s = c->tiers.read_bytes_per_s / nd;
            if (c->tiers.write_bytes_per_s > 0)
                x->write_bw_bytes_per_s = c->tiers.write_bytes_per_s / nd;
        }
}

typedef enum { T_DESKTOP, T_PCIE, T_DGX1, T_DGX_NVSWITCH, T_CPU } tkind;

prof_topo *prof_topo_template(const char *gpu, int n, const prof_hw_opts *o,
                              util_err *e)
{
    prof_gpu g;
    if (prof_gpu_get(gpu, &g, e)) return NULL;
    return prof_topo_template_gpu(&g, n, o, e);
}

int prof_template_default_count(const prof_gpu *g, const prof_hw_opts *o)
{
    (void)g;    /* every standard server holds 8, PCIe or SXM */
    if (o && o->gpus_per_server > 0) return o->gpus_per_server;
    return 8;
}

prof_topo *prof_topo_template_gpu(const prof_gpu *gp, int n,
                                  const prof_hw_opts *o, util_err *e)
{
    prof_hw_opts none = {0};
    if (!o) o = &none;
    prof_gpu g = *gp;
    if (n < 1 || n > 65536) {
        util_errf(e, UTIL_EXIT_USAGE, "GPU count %d: must be between 1 and "
                  "65536", n);
        return NULL;
    }
    if (o->pcie_gen && (o->pcie_gen < 3 || o->pcie_gen > 5)) {
        util_errf(e, UTIL_EXIT_USAGE, "--pcie-gen %d: templates know PCIe "
                  "3, 4 and 5", o->pcie_gen);
        return NULL;
    }
    if (o->host_mem_bytes < 0 || o->nvme < 0 || o->gpus_per_server < 0) {
        util_errf(e, UTIL_EXIT_USAGE, "hardware options must be positive");
        return NULL;
    }
    tkind k;
    platform p;
    int gps;
    const char *what;
    if (g.form == PROF_FORM_CPU) {
        if (n > 1024 || o->gpus_per_server) {
            util_errf(e, UTIL_EXIT_USAGE, "--hw %s x%d: CPU devices are the "
                      "cores of this one machine (at most 1024, no "
                      "--gpus-per-server)", g.name, n);
            return NULL;
        }
        k = T_CPU, p = desktops[4], gps = n, what = "one host";
        p.desc = "this machine's CPU: one core per device";
        p.pcie_gen = 4;
    } else if (g.form == PROF_FORM_SXM && g.nvlink_links == 6) {
        k = T_DGX1, p = dgx1, gps = 8, what = "DGX-1-like node";
    } else if (g.form == PROF_FORM_SXM) {
        k = T_DGX_NVSWITCH, gps = 8;
        p = g.pcie_gen >= 5 ? dgx_h100 : dgx_a100;
        what = g.pcie_gen >= 5 ? "DGX H100-like node" : "DGX A100-like node";
        if (p.pcie_gen == 4 && g.mem_bytes > 40 * GIB) p.host_mem = 2048 * GIB;
        if (p.pcie_gen == 4 && g.mem_bytes > 40 * GIB) p.nvme = 8;
    } else {
        int gen = o->pcie_gen ? o->pcie_gen : g.pcie_gen;
        if (gen < 3) gen = 3;
        if (gen > 5) gen = 5;
        int one = n == 1 && !o->gpus_per_server;
        k = one ? T_DESKTOP : T_PCIE;
        p = one ? desktops[gen] : pcie_servers[gen];
        gps = one ? 1 : 8;
        what = one ? "desktop" : "2-socket PCIe server";
    }
    if (o->pcie_gen) p.pcie_gen = o->pcie_gen;
    if (o->gpus_per_server) {
        int max = k == T_PCIE ? 16 : 8;
        if (o->gpus_per_server > max) {
            util_errf(e, UTIL_EXIT_USAGE, "--gpus-per-server %d: the %s "
                      "template holds at most %d GPUs", o->gpus_per_server,
                      what, max);
            return NULL;
        }
        gps = o->gpus_per_server;
    }
    if (o->host_mem_bytes > 0) p.host_mem = o->host_mem_bytes;
    if (o->nvme > 0 || o->nvme_set) {
        if (o->nvme > 64) {
            util_errf(e, UTIL_EXIT_USAGE, "--nvme %d: at most 64 drives per "
                      "server", o->nvme);
            return NULL;
        }
        p.nvme = o->nvme;
    }
    if (o->drive > 0 && o->drive <= N_DRIVES) {
        const prof_drive *d = &drive_models[o->drive - 1];
        p.nvme_cap = d->cap;
        p.nvme_read = d->read;
        p.nvme_write = d->write;
        /* its link at the host's generation where that is older */
        p.nvme_gen = d->gen < p.pcie_gen ? d->gen : p.pcie_gen;
        p.nvme_lanes = d->lanes;
    }

    int servers = (n + gps - 1) / gps;
    char name[96];
    if (k == T_CPU)
        snprintf(name, sizeof name, "%dx %s core, %s", n, g.name, what);
    else if (servers == 1)
        snprintf(name, sizeof name, "%dx %s, %s, PCIe %d.0", n, g.name, what,
                 p.pcie_gen);
    else
        snprintf(name, sizeof name, "%dx %s, %d x %s, %s", n, g.name, servers,
                 what, p.net);
    prof_topo *t = prof_topo_new(name);
    snprintf(t->host, sizeof t->host, "%s%s%.10s", p.desc,
             g.calib ? "; calibrated " : "", g.calib ? g.calib->date : "");
    build b = {t, &g, prof_topo_add_gpu_type(t, &g), p, 0};
    int nic_cap = 8 * servers, n_nic = 0;
    int *nics = util_malloc(sizeof(int) * (size_t)nic_cap);
    for (int s = 0; s < servers; s++) {
        b.s = s;
        int here = s + 1 < servers ? gps : n - s * gps;
        int loc[8] = {-1, -1, -1, -1, -1, -1, -1, -1}, nl = 0;
        switch (k) {
        case T_DESKTOP: desktop(&b); break;
        case T_PCIE: pcie_server(&b, here, gps, loc); nl = 1; break;
        case T_DGX1: dgx1_server(&b, here, loc); nl = 4; break;
        case T_DGX_NVSWITCH: dgx_nvswitch_server(&b, here, loc); nl = 8; break;
        case T_CPU: cpu_host(&b, here, o->xfer); break;
        }
        for (int i = 0; i < nl; i++) nics[n_nic++] = loc[i];
    }
    if (servers > 1) {
        /* a non-blocking fat tree, abstracted as one switch */
        int ib = prof_topo_add_node(t, PROF_NODE_NET_SWITCH, "ib", -1);
        for (int i = 0; i < n_nic; i++)
            prof_topo_add_link(t, nics[i], ib, PROF_LINK_NETWORK,
                               p.nic_bits / 8 * NET_EFF, LAT_NET);
    }
    free(nics);
    if (prof_topo_finish(t, e)) {
        prof_topo_free(t);
        return NULL;
    }
    return t;
}

double prof_link_default_latency_ns(prof_link_kind k)
{
    switch (k) {
    case PROF_LINK_PCIE: return LAT_PCIE;
    case PROF_LINK_NVLINK: return LAT_NVLINK;
    case PROF_LINK_SOCKET: return LAT_SOCKET;
    case PROF_LINK_MEMORY: return LAT_MEMORY;
    default: return LAT_NET;
    }
}

int prof_hw_opts_arg(int argc, char **argv, int *i, prof_hw_opts *o,
                     util_err *e)
{
    static const char *const name[] = {"--host-mem", "--nvme",
                                       "--gpus-per-server", "--pcie-gen"};
    static const char *const want[] = {
        "a size with its unit, such as 256G (K, M, G or T; 0.001G to "
        "1024T, as a hardware file's host_mem_gib)",
        "a count 0..64, or COUNT:MODEL with MODEL one of the drives sluice "
        "knows (sluice profile list)", "1..64", "3..6"};
    int k = 0;
    while (k < 4 && strcmp(argv[*i], name[k])) k++;
    if (k == 4) return 0;
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    long n = 0;
    int bad;
    /* a bare number is bytes: 256 is not what anyone means (a plan's
     * hw may keep a byte count, at least a MiB, as given before units
     * were asked for) */
    if (k == 0) {
        double unit;
        bad = !v || util_parse_size(v, &o->host_mem_bytes) ||
              o->host_mem_bytes < UTIL_HW_MIN * 1024 * 1024 * 1024 ||
              (util_parse_size_unit(v, &unit) &&
               o->host_mem_bytes < 1024.0 * 1024) ||
              o->host_mem_bytes > UTIL_SIZE_MAX_BYTES;
    } else if (k == 1 && v && strchr(v, ':')) {
        /* --nvme COUNT:MODEL */
        char cnt[16];
        const char *c = strchr(v, ':');
        int d = prof_drive_find(c + 1);
        bad = c - v >= (long)sizeof cnt || d < 0;
        if (!bad) {
            snprintf(cnt, sizeof cnt, "%.*s", (int)(c - v), v);
            bad = util_parse_int(cnt, 1, 64, &n);
            o->drive = d + 1;
        }
    } else
        bad = !v || util_parse_int(v, k == 1 ? 0 : k == 2 ? 1 : 3,
                                   k == 3 ? 6 : 64, &n);
    if (bad)
        return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': expected %s", name[k],
                         v ? v : "", want[k]);
    if (k == 1) o->nvme = (int)n, o->nvme_set = 1;
    if (k == 2) o->gpus_per_server = (int)n;
    if (k == 3) o->pcie_gen = (int)n;
    size_t l = strlen(o->text);
    if ((size_t)snprintf(o->text + l, sizeof o->text - l, " %s %s", name[k],
                         v) >= sizeof o->text - l)
        return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': hardware options "
                         "longer than the %zu bytes a plan keeps", name[k], v,
                         sizeof o->text - 1);
    (*i)++;
    return 1;
}
