/* Hardware profiles: the GPU catalog and its sources, the efficiency model,
 * server templates, routes (checked against brute force on small graphs),
 * server files, `--hw` arguments, printing, and the bad-file corpus in
 * tests/bad/hw (each FILE.json beside FILE.expect, the message it must
 * give). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "profiles/hw_internal.h"
#include "tests/harness.h"

static int near(double a, double b, double rel)
{
    return fabs(a - b) <= rel * fabs(b);
}

/* Is every node on the route a proper chain from a to b? */
static void assert_chain(const prof_topo *t, int a, int b, const int *dl,
                         int n)
{
    int at = a;
    for (int i = 0; i < n; i++) {
        cr_assert_eq(prof_dl_tail(t, dl[i]), at, "hop %d does not start at "
                     "%s", i, t->nodes[at].name);
        at = prof_dl_head(t, dl[i]);
    }
    cr_assert_eq(at, b);
}

static int route_visits(const prof_topo *t, const int *dl, int n,
                        const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t->nodes[prof_dl_head(t, dl[i])].name, name)) return 1;
    return 0;
}

/* ---------------------------------------------------------------- catalog */

Test(hw_catalog, required_gpus_with_sources_and_sane_values)
{
    const char *need[] = {"rtx2080ti", "rtx3090", "rtx4090", "v100-pcie-16gb",
        "v100-sxm2-32gb", "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb",
        "h100-sxm", "h100-pcie", "h200", "h800-sxm", "v100s", "l40s", "a6000",
        "t4", "l4", "a10", "a40", "rtx4080", "rtx5090", "a100-pcie-40gb",
        "rtx6000-ada"};
    const char *const *names = prof_gpu_names();
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        int found = 0;
        for (int j = 0; names[j]; j++) found |= !strcmp(names[j], need[i]);
        cr_assert(found, "%s missing from the catalog", need[i]);
    }
    for (int j = 0; names[j]; j++) {
        prof_gpu g;
        util_err e;
        cr_assert_eq(prof_gpu_get(names[j], &g, &e), 0);
        cr_assert_gt(strlen(g.source), 40, "%s: no source", g.name);
        if (g.form == PROF_FORM_CPU) {
            /* a core of the CPU executor: fp32 only, GFLOP/s, GB/s */
            cr_assert(g.peak_flops[PROF_DT_FP32] > 10e9 &&
                      g.peak_flops[PROF_DT_FP32] < 1e12, "%s fp32", g.name);
            cr_assert_eq(g.peak_flops[PROF_DT_FP16], 0);
            cr_assert(g.mem_bw_bytes_per_s > 1e9 &&
                      g.mem_bw_bytes_per_s < 200e9);
            continue;
        }
        cr_assert(g.mem_bytes >= 8.0 * (1 << 30) && g.mem_bytes <= 256.0 *
                  (1 << 30), "%s memory", g.name);
        /* the L4's 300 GB/s is the least */
        cr_assert(g.mem_bw_bytes_per_s >= 300e9 && g.mem_bw_bytes_per_s < 10e12,
                  "%s mem bw", g.name);
        cr_assert(g.peak_flops[PROF_DT_FP32] > 5e12 &&
                  g.peak_flops[PROF_DT_FP32] < 200e12, "%s fp32", g.name);
        /* tensor fp16 beats plain fp32 on every card listed */
        cr_assert_gt(g.peak_flops[PROF_DT_FP16], g.peak_flops[PROF_DT_FP32]);
        cr_assert_leq(g.peak_flops[PROF_DT_TF32], g.peak_flops[PROF_DT_FP16]);
        cr_assert(g.peak_flops[PROF_DT_BF16] == 0 ||
                  g.peak_flops[PROF_DT_BF16] == g.peak_flops[PROF_DT_FP16],
                  "%s: bf16 runs at the fp16 rate", g.name);
        cr_assert(g.pcie_gen >= 3 && g.pcie_gen <= 5 && g.pcie_lanes == 16);
        /* the T4 (70 W) and L4 (72 W) are the least */
        cr_assert(g.tdp_w >= 60 && g.tdp_w <= 1000, "%s tdp", g.name);
        cr_assert(g.price_per_hour >= 0);
        cr_assert(g.eff.gemm_max > 0.5 && g.eff.gemm_max <= 0.95);
        cr_assert(g.eff.mem_max > 0.5 && g.eff.mem_max <= 0.95);
        cr_assert(g.eff.launch_ns >= 1000 && g.eff.launch_ns <= 10000);
        cr_assert((g.nvlink_links > 0) == (g.nvlink_bw_bytes_per_s > 0));
        cr_assert_eq(g.nvlink_links > 0, g.form == PROF_FORM_SXM,
                     "%s: NVLink exactly on SXM parts", g.name);
        if (g.consumer) {
            /* GeForce: fp32 accumulate at half the fp16-accumulate rate */
            cr_assert(near(g.fp16_acc16_flops,
                           2 * g.peak_flops[PROF_DT_FP16], 0.002),
                      "%s: fp16 acc16 %.1f vs 2 x %.1f", g.name,
                      g.fp16_acc16_flops / 1e12,
                      g.peak_flops[PROF_DT_FP16] / 1e12);
        }
    }
}

Test(hw_catalog, datasheet_figures)
{
    prof_gpu g;
    util_err e;
    cr_assert_eq(prof_gpu_get("a100-sxm-40gb", &g, &e), 0);
    cr_assert_eq(g.peak_flops[PROF_DT_TF32], 156e12);
    cr_assert_eq(g.peak_flops[PROF_DT_FP16], 312e12);
    cr_assert_eq(g.mem_bytes, 40.0 * (1 << 30));
    cr_assert_eq(g.nvlink_links, 12);
    cr_assert_eq(g.nvlink_bw_bytes_per_s, 25e9);
    cr_assert_eq(prof_gpu_get("rtx2080ti", &g, &e), 0);
    /* Turing: 68 SMs x 512 FP16 FMA/clk x 1545 MHz = 107.6 (fp16 acc) */
    cr_assert(near(68 * 1024 * 1.545e9, g.fp16_acc16_flops, 0.001));
    cr_assert(near(g.peak_flops[PROF_DT_FP16], 53.8e12, 0.001));
    cr_assert_eq(g.peak_flops[PROF_DT_BF16], 0);
    cr_assert_eq(g.peak_flops[PROF_DT_TF32], 0);
    cr_assert_eq(g.consumer, 1);
    cr_assert_eq(g.mem_bytes, 11.0 * (1 << 30));
    cr_assert_eq(prof_gpu_get("v100-sxm2-32gb", &g, &e), 0);
    cr_assert_eq(g.nvlink_links * g.nvlink_bw_bytes_per_s, 150e9);
    cr_assert_eq(g.peak_flops[PROF_DT_FP16], 125e12);
    cr_assert_eq(prof_gpu_get("h100-sxm", &g, &e), 0);
    cr_assert_eq(g.nvlink_links, 18);
    cr_assert_eq(g.pcie_gen, 5);
    cr_assert(near(g.peak_flops[PROF_DT_BF16], 989.5e12, 0.001));
    cr_assert_eq(prof_gpu_get("rtx4090", &g, &e), 0);
    cr_assert_eq(g.pcie_gen, 4);
    cr_assert_eq(g.pcie_lanes, 16);
    cr_assert(near(g.peak_flops[PROF_DT_FP16], 165.2e12, 0.001));
}

/* Issue 15's GPUs, each figure as its datasheet prints it (the source
 * field names the datasheet): dense tensor rates (half the sparse figure),
 * FP32, memory, host link, NVLink, power, price. */
Test(hw_catalog, datasheet_table)
{
    static const struct {
        const char *name;
        double fp32, tf32, fp16, bf16; /* TFLOP/s */
        double mem_gib, bw_gb_per_s;
        int pcie_gen, nvlink_links;
        double nvlink_gb_per_s, tdp_w, price;
        const char *cites;              /* in the source field */
    } want[] = {
        {"h800-sxm", 67.0, 494.5, 989.5, 989.5, 80, 3350, 5, 8, 25, 700, 0,
         "H800 Tensor Core GPU datasheet"},
        {"v100s", 16.4, 0, 130.0, 0, 32, 1134, 3, 0, 0, 250, 0,
         "V100 Tensor Core GPU datasheet"},
        {"l40s", 91.6, 183.0, 362.05, 362.05, 48, 864, 4, 0, 0, 350, 1.861,
         "L40S datasheet"},
        {"rtx3090", 35.6, 35.6, 71.0, 71.0, 24, 936, 4, 0, 0, 350, 0,
         "GA102 GPU Architecture whitepaper"},
        {"a6000", 38.7, 77.4, 154.8, 154.8, 48, 768, 4, 0, 0, 300, 0,
         "RTX A6000 datasheet"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        prof_gpu g;
        util_err e;
        cr_assert_eq(prof_gpu_get(want[i].name, &g, &e), 0, "%s", e.msg);
        const char *n = want[i].name;
        cr_expect(near(g.peak_flops[PROF_DT_FP32], want[i].fp32 * 1e12, 1e-9),
                  "%s fp32", n);
        cr_expect(near(g.peak_flops[PROF_DT_TF32], want[i].tf32 * 1e12, 1e-9),
                  "%s tf32", n);
        cr_expect(near(g.peak_flops[PROF_DT_FP16], want[i].fp16 * 1e12, 1e-9),
                  "%s fp16", n);
        cr_expect(near(g.peak_flops[PROF_DT_BF16], want[i].bf16 * 1e12, 1e-9),
                  "%s bf16", n);
        cr_expect_eq(g.mem_bytes, want[i].mem_gib * (1 << 30), "%s mem", n);
        cr_expect(near(g.mem_bw_bytes_per_s, want[i].bw_gb_per_s * 1e9, 1e-9),
                  "%s mem bw", n);
        cr_expect_eq(g.pcie_gen, want[i].pcie_gen, "%s pcie", n);
        cr_expect_eq(g.pcie_lanes, 16, "%s lanes", n);
        cr_expect_eq(g.nvlink_links, want[i].nvlink_links, "%s nvlink", n);
        cr_expect(near(g.nvlink_bw_bytes_per_s, want[i].nvlink_gb_per_s * 1e9,
                       1e-9), "%s nvlink bw", n);
        cr_expect_eq(g.tdp_w, want[i].tdp_w, "%s tdp", n);
        cr_expect(near(g.price_per_hour, want[i].price, 1e-9), "%s price", n);
        cr_expect(strstr(g.source, want[i].cites), "%s: source '%s' does not "
                  "cite the %s", n, g.source, want[i].cites);
    }
    /* the H800's datasheet NVLink figure is both directions together */
    prof_gpu g;
    util_err e;
    cr_assert_eq(prof_gpu_get("h800-sxm", &g, &e), 0);
    cr_expect_eq(2 * g.nvlink_links * g.nvlink_bw_bytes_per_s, 400e9);
}

/* GPUs people fine-tune on, each figure as its datasheet or architecture
 * whitepaper prints it (dense: half the sparse figure; GeForce: the FP32
 * accumulate rate, half the FP16 accumulate one), and the server each
 * gets: the host platform follows the card's PCIe generation. */
Test(hw_catalog, finetune_gpus_datasheet_table)
{
    static const struct {
        const char *name;
        double fp32, tf32, fp16, bf16, acc16; /* TFLOP/s; acc16 0: absent */
        double mem_gib, bw_gb_per_s, tdp_w;
        int pcie_gen, consumer;
        const char *cites, *host;     /* in the source field; the x2 host */
    } want[] = {
        {"t4", 8.1, 0, 65.0, 0, 0, 16, 320, 70, 3, 0,
         "T4 Tensor Core GPU datasheet", "Cascade Lake"},
        {"l4", 30.3, 60.0, 121.0, 121.0, 0, 24, 300, 72, 4, 0,
         "L4 Tensor Core GPU datasheet", "Ice Lake"},
        {"a10", 31.2, 62.5, 125.0, 125.0, 0, 24, 600, 150, 4, 0,
         "A10 Tensor Core GPU datasheet", "Ice Lake"},
        {"a40", 37.4, 74.8, 149.7, 149.7, 0, 48, 696, 300, 4, 0,
         "A40 datasheet", "Ice Lake"},
        {"rtx4080", 48.7, 48.7, 97.5, 97.5, 194.9, 16, 716.8, 320, 4, 1,
         "Ada GPU Architecture whitepaper", "Ice Lake"},
        {"rtx5090", 104.8, 104.8, 209.5, 209.5, 419.0, 32, 1792, 575, 5, 1,
         "RTX Blackwell GPU Architecture whitepaper", "Sapphire Rapids"},
        {"a100-pcie-40gb", 19.5, 156.0, 312.0, 312.0, 0, 40, 1555, 250, 4, 0,
         "A100 Tensor Core GPU datasheet", "Ice Lake"},
        {"rtx6000-ada", 91.1, 182.1, 364.2, 364.2, 0, 48, 960, 300, 4, 0,
         "RTX 6000 Ada Generation datasheet", "Ice Lake"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        prof_gpu g;
        util_err e;
        const char *n = want[i].name;
        cr_assert_eq(prof_gpu_get(n, &g, &e), 0, "%s", e.msg);
        cr_expect(near(g.peak_flops[PROF_DT_FP32], want[i].fp32 * 1e12, 1e-9),
                  "%s fp32", n);
        cr_expect(near(g.peak_flops[PROF_DT_TF32], want[i].tf32 * 1e12, 1e-9),
                  "%s tf32", n);
        cr_expect(near(g.peak_flops[PROF_DT_FP16], want[i].fp16 * 1e12, 1e-9),
                  "%s fp16", n);
        cr_expect(near(g.peak_flops[PROF_DT_BF16], want[i].bf16 * 1e12, 1e-9),
                  "%s bf16", n);
        /* listed only where it differs from the fp32-accumulate rate */
        cr_expect(want[i].acc16 ? near(g.fp16_acc16_flops, want[i].acc16 * 1e12,
                                       1e-9) : g.fp16_acc16_flops == 0,
                  "%s acc16", n);
        cr_expect_eq(g.mem_bytes, want[i].mem_gib * (1 << 30), "%s mem", n);
        cr_expect(near(g.mem_bw_bytes_per_s, want[i].bw_gb_per_s * 1e9, 1e-9),
                  "%s mem bw", n);
        cr_expect_eq(g.tdp_w, want[i].tdp_w, "%s tdp", n);
        cr_expect_eq(g.pcie_gen, want[i].pcie_gen, "%s pcie", n);
        cr_expect_eq(g.pcie_lanes, 16, "%s lanes", n);
        cr_expect_eq(g.consumer, want[i].consumer, "%s consumer", n);
        cr_expect_eq(g.form, PROF_FORM_PCIE, "%s form", n);
        cr_expect_eq(g.nvlink_links, 0, "%s: a bridge is not in the standard "
                     "server", n);
        cr_expect(strstr(g.source, want[i].cites), "%s: source '%s' does not "
                  "cite the %s", n, g.source, want[i].cites);
        prof_topo *t = test_topo(n, 2);
        cr_expect(strstr(t->host, want[i].host), "%s x2: host %s", n, t->host);
        prof_topo_free(t);
    }
}

Test(hw_catalog, unknown_name_lists_known_and_closest)
{
    prof_gpu g;
    util_err e;
    cr_assert_eq(prof_gpu_get("rtx2080", &g, &e), -1);
    cr_assert_eq(e.code, 2);
    cr_assert(strstr(e.msg, "unknown GPU type 'rtx2080'"), "%s", e.msg);
    cr_assert(strstr(e.msg, "did you mean 'rtx2080ti'?"), "%s", e.msg);
    cr_assert(strstr(e.msg, "h100-sxm"), "%s", e.msg);
    cr_assert_eq(prof_gpu_get("zzzzzzzzzzzz", &g, &e), -1);
    cr_assert_null(strstr(e.msg, "did you mean"));
    /* a family's name: its members, not the A10 one letter away */
    cr_assert_eq(prof_gpu_get("a100", &g, &e), -1);
    cr_assert(strstr(e.msg, "did you mean one of 'a100-sxm-40gb', "
                            "'a100-sxm-80gb', 'a100-pcie-40gb', "
                            "'a100-pcie-80gb'?"), "%s", e.msg);
    cr_assert_eq(prof_gpu_get("rtx409", &g, &e), -1);
    cr_assert(strstr(e.msg, "did you mean 'rtx4090'?"), "%s", e.msg);
}

Test(hw_catalog, dtypes)
{
    cr_assert_str_eq(prof_dtype_name(PROF_DT_BF16), "bf16");
    cr_assert_eq(prof_dtype_bytes(PROF_DT_FP16), 2);
    cr_assert_eq(prof_dtype_bytes(PROF_DT_BF16), 2);
    cr_assert_eq(prof_dtype_bytes(PROF_DT_TF32), 4);
    cr_assert_eq(prof_dtype_bytes(PROF_DT_FP32), 4);
}

/* ------------------------------------------------------------ efficiency */

Test(hw_eff, monotone_and_in_unit_interval)
{
    const char *const *names = prof_gpu_names();
    for (int j = 0; names[j]; j++) {
        prof_gpu g;
        util_err e;
        cr_assert_eq(prof_gpu_get(names[j], &g, &e), 0);
        double prev = 0;
        for (double s = 0; s <= 65536; s = s ? s * 2 : 1) {
            double f = prof_gemm_eff(&g.eff, s, s, s);
            cr_assert(f > 0 && f <= 1, "%s %g: %g", g.name, s, f);
            cr_assert_geq(f, prev);
            /* each dimension alone is monotone too */
            cr_assert_geq(prof_gemm_eff(&g.eff, 2 * s + 1, s, s), f);
            cr_assert_geq(prof_gemm_eff(&g.eff, s, 2 * s + 1, s), f);
            cr_assert_geq(prof_gemm_eff(&g.eff, s, s, 2 * s + 1), f);
            prev = f;
        }
        cr_assert_leq(prev, g.eff.gemm_max);
        cr_assert_gt(prev, 0.98 * g.eff.gemm_max);
        prev = 0;
        for (double b = 0; b < 1e11; b = b ? b * 4 : 1) {
            double f = prof_mem_eff(&g.eff, b);
            cr_assert(f > 0 && f <= 1);
            cr_assert_geq(f, prev);
            prev = f;
        }
        cr_assert_gt(prev, 0.99 * g.eff.mem_max);
        /* a 4096^3 GEMM is near the top; on a GPU a 64-row one is far
         * below (a CPU core fills its FMA units with small tiles) */
        cr_assert_gt(prof_gemm_eff(&g.eff, 4096, 4096, 4096),
                     0.85 * g.eff.gemm_max);
        if (g.form != PROF_FORM_CPU)
            cr_assert_lt(prof_gemm_eff(&g.eff, 64, 4096, 4096),
                         0.5 * g.eff.gemm_max);
    }
    prof_eff one = {.gemm_max = 1, .mem_max = 1};
    cr_assert_eq(prof_gemm_eff(&one, 1, 1, 1), 1);
    cr_assert_eq(prof_mem_eff(&one, 1), 1);
}

/* ----------------------------------------------------------------- routes */

Test(hw_routes, commodity_box_socket_and_switches)
{
    prof_topo *t = test_topo("rtx2080ti", 8);
    cr_assert_eq(t->n_gpus, 8);
    cr_assert_eq(t->n_servers, 1);
    int n;
    const int *dl = prof_topo_gpu_route(t, 0, 7, &n);
    assert_chain(t, t->gpu_node[0], t->gpu_node[7], dl, n);
    cr_assert(prof_route_has_link_kind(t, dl, n, PROF_LINK_SOCKET));
    cr_assert(route_visits(t, dl, n, "n0.sw0"));
    cr_assert(route_visits(t, dl, n, "n0.sw1"));
    /* GeForce: no P2P, the copy stages through host memory */
    cr_assert(route_visits(t, dl, n, "n0.dram0"));
    cr_assert_eq(prof_route_bw(t, dl, n), prof_pcie_bw(3, 16));
    cr_assert(near(prof_route_bw(t, dl, n), 12.6e9, 0.001));
    cr_assert_gt(prof_route_latency_ns(t, dl, n), 0);

    dl = prof_topo_gpu_route(t, 0, 1, &n);
    assert_chain(t, t->gpu_node[0], t->gpu_node[1], dl, n);
    cr_assert_not(prof_route_has_link_kind(t, dl, n, PROF_LINK_SOCKET));
    cr_assert(route_visits(t, dl, n, "n0.sw0"));
    cr_assert_not(route_visits(t, dl, n, "n0.sw1"));

    /* host memory and drive next to each GPU */
    cr_assert_str_eq(t->nodes[prof_topo_gpu_host_mem(t, 0)].name, "n0.dram0");
    cr_assert_str_eq(t->nodes[prof_topo_gpu_host_mem(t, 7)].name, "n0.dram1");
    cr_assert_geq(prof_topo_gpu_nvme(t, 0), 0);
    const int *h = prof_topo_route(t, t->gpu_node[5],
                                   prof_topo_gpu_host_mem(t, 5), &n);
    cr_assert_eq(n, 3);     /* gpu > switch > cpu > dram */
    cr_assert_eq(prof_route_bw(t, h, n), prof_pcie_bw(3, 16));
    prof_topo_free(t);
}

Test(hw_routes, pcie_datacenter_cards_use_p2p)
{
    prof_topo *t = test_topo("v100-pcie-16gb", 8);
    int n;
    const int *dl = prof_topo_gpu_route(t, 0, 1, &n);
    cr_assert_eq(n, 2);     /* gpu > switch > gpu */
    dl = prof_topo_gpu_route(t, 0, 7, &n);
    cr_assert(prof_route_has_link_kind(t, dl, n, PROF_LINK_SOCKET));
    cr_assert_not(prof_route_has_node_kind(t, dl, n, PROF_NODE_DRAM));
    prof_topo_free(t);
}

Test(hw_routes, dgx_a100_all_pairs_through_nvswitch)
{
    prof_topo *t = test_topo("a100-sxm-80gb", 8);
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++) {
            int n;
            const int *dl = prof_topo_gpu_route(t, a, b, &n);
            if (a == b) {
                cr_assert_eq(n, 0);
                continue;
            }
            cr_assert_eq(n, 2);
            cr_assert(prof_route_has_node_kind(t, dl, n, PROF_NODE_NVSWITCH));
            cr_assert(near(prof_route_bw(t, dl, n), 12 * 25e9 * 0.9, 1e-9));
        }
    prof_topo_free(t);
}

Test(hw_routes, dgx1_cube_mesh)
{
    prof_topo *t = test_topo("v100-sxm2-32gb", 8);
    /* six NVLinks per GPU */
    for (int g = 0; g < 8; g++) {
        double sum = 0;
        for (int i = 0; i < t->n_links; i++)
            if (t->links[i].kind == PROF_LINK_NVLINK &&
                (t->links[i].a == t->gpu_node[g] ||
                 t->links[i].b == t->gpu_node[g]))
                sum += t->links[i].bw_bytes_per_s;
        cr_assert(near(sum, 6 * 25e9 * 0.9, 1e-9), "gpu%d %g", g, sum);
    }
    int n;
    const int *dl = prof_topo_gpu_route(t, 0, 3, &n);
    cr_assert_eq(n, 1);
    cr_assert(near(prof_route_bw(t, dl, n), 2 * 25e9 * 0.9, 1e-9));
    dl = prof_topo_gpu_route(t, 0, 1, &n);
    cr_assert_eq(n, 1);
    cr_assert(near(prof_route_bw(t, dl, n), 25e9 * 0.9, 1e-9));
    dl = prof_topo_gpu_route(t, 0, 5, &n);   /* no NVLink: PCIe */
    cr_assert_not(prof_route_has_link_kind(t, dl, n, PROF_LINK_NVLINK));
    prof_topo_free(t);
}

Test(hw_routes, multi_node_crosses_infiniband)
{
    prof_topo *t = test_topo("a100-sxm-80gb", 20);
    cr_assert_eq(t->n_servers, 3);
    cr_assert_eq(t->n_gpus, 20);
    cr_assert_eq(t->gpus_per_server, 8);
    int n;
    const int *dl = prof_topo_gpu_route(t, 1, 9, &n);
    assert_chain(t, t->gpu_node[1], t->gpu_node[9], dl, n);
    cr_assert(prof_route_has_link_kind(t, dl, n, PROF_LINK_NETWORK));
    cr_assert(near(prof_route_bw(t, dl, n), 200e9 / 8 * 0.95, 1e-9));
    /* rail-matched: GPU 1 leaves through its own NIC */
    cr_assert(route_visits(t, dl, n, "n0.nic1"));
    dl = prof_topo_gpu_route(t, 0, 7, &n);
    cr_assert_not(prof_route_has_link_kind(t, dl, n, PROF_LINK_NETWORK));
    /* last server partly filled */
    cr_assert_eq(t->nodes[t->gpu_node[19]].server, 2);
    prof_topo_free(t);

    t = test_topo("rtx2080ti", 16);
    dl = prof_topo_gpu_route(t, 0, 15, &n);
    assert_chain(t, t->gpu_node[0], t->gpu_node[15], dl, n);
    cr_assert(prof_route_has_link_kind(t, dl, n, PROF_LINK_NETWORK));
    cr_assert(route_visits(t, dl, n, "n0.dram0"));
    cr_assert(route_visits(t, dl, n, "n1.dram0") ||
              route_visits(t, dl, n, "n1.dram1"));
    prof_topo_free(t);
}

Test(hw_routes, deterministic)
{
    prof_topo *a = test_topo("rtx3090", 24), *b = test_topo("rtx3090", 24);
    for (int x = 0; x < 24; x += 5)
        for (int y = 0; y < 24; y += 3) {
            int na, nb;
            const int *ra = prof_topo_gpu_route(a, x, y, &na);
            const int *rb = prof_topo_gpu_route(b, x, y, &nb);
            cr_assert_eq(na, nb);
            if (na) cr_assert_eq(memcmp(ra, rb, sizeof(int) * (size_t)na), 0);
            /* asking again lends the same route */
            int n2;
            cr_assert_eq(prof_topo_gpu_route(a, x, y, &n2), ra);
        }
    prof_topo_free(a);
    prof_topo_free(b);
}

/* Routes searched one at a time from both ends are those of one search
 * from the source to all: clusters with NVLink islands, rails of NICs and
 * GeForce cards staging through host memory. */
Test(hw_routes, one_at_a_time_as_all_at_once)
{
    const char *gpus[] = {"a100-sxm-80gb", "rtx3090", "v100-sxm2-32gb"};
    for (int k = 0; k < 3; k++) {
        prof_topo *one = test_topo(gpus[k], 64), *all = test_topo(gpus[k], 64);
        one->x->bulk_after = 1 << 30;
        all->x->bulk_after = 0;
        for (int a = 0; a < one->n_nodes; a += 3)
            for (int b = 0; b < one->n_nodes; b += 5) {
                int n1, n2;
                const int *r1 = prof_topo_route(one, a, b, &n1);
                const int *r2 = prof_topo_route(all, a, b, &n2);
                cr_assert_eq(n1, n2, "%s %s->%s", gpus[k], one->nodes[a].name,
                             one->nodes[b].name);
                if (n1) cr_assert(!memcmp(r1, r2, sizeof(int) * (size_t)n1),
                                  "%s %s->%s", gpus[k], one->nodes[a].name,
                                  one->nodes[b].name);
            }
        prof_topo_free(one);
        prof_topo_free(all);
    }
}

Test(hw_routes, big_cluster_on_demand)
{
    prof_topo *t = test_topo("h100-sxm", 1024);
    cr_assert_eq(t->n_servers, 128);
    int n;
    for (int g = 1; g < 1024; g += 37) {
        const int *dl = prof_topo_gpu_route(t, 0, g, &n);
        assert_chain(t, t->gpu_node[0], t->gpu_node[g], dl, n);
        cr_assert_eq(prof_route_has_link_kind(t, dl, n, PROF_LINK_NETWORK),
                     g >= 8);
    }
    /* a pair of nodes that are neither GPUs nor in the same server */
    int a = prof_topo_find(t, "n3.dram1"), b = prof_topo_find(t, "n90.nvme2");
    cr_assert(a >= 0 && b >= 0);
    const int *dl = prof_topo_route(t, a, b, &n);
    assert_chain(t, a, b, dl, n);
    prof_topo_free(t);
}

typedef struct { const prof_topo *t; int first; long sum; } worker;

static void *route_worker(void *arg)
{
    worker *w = arg;
    for (int a = w->first; a < w->t->n_gpus; a += 4)
        for (int b = 0; b < w->t->n_gpus; b++) {
            int n;
            prof_topo_gpu_route(w->t, a, b, &n);
            w->sum += n;
        }
    return NULL;
}

Test(hw_routes, concurrent_queries_agree)
{
    prof_topo *t = test_topo("rtx3090", 32), *u = test_topo("rtx3090", 32);
    pthread_t th[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){t, i, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, route_worker, &w[i]), 0);
    }
    long total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        total += w[i].sum;
    }
    worker one = {u, 0, 0};
    long serial = 0;
    for (int f = 0; f < 4; f++) {
        one.first = f;
        route_worker(&one);
    }
    serial = one.sum;
    cr_assert_eq(total, serial);
    for (int a = 0; a < 32; a += 7)
        for (int b = 0; b < 32; b++) {
            int n1, n2;
            const int *r1 = prof_topo_gpu_route(t, a, b, &n1);
            const int *r2 = prof_topo_gpu_route(u, a, b, &n2);
            cr_assert_eq(n1, n2);
            if (n1) cr_assert(!memcmp(r1, r2, sizeof(int) * (size_t)n1));
        }
    prof_topo_free(t);
    prof_topo_free(u);
}

/* Brute force: every simple path whose inner nodes forward, best by
 * (widest, fewest hops, lexicographically smallest node sequence). */
typedef struct bf {
    const prof_topo *t;
    int b, best_len, len;
    double best_bw;
    int best[32], path[32], on[32];
} bf;

static int lex_less(const int *x, const int *y, int n)
{
    for (int i = 0; i < n; i++)
        if (x[i] != y[i]) return x[i] < y[i];
    return 0;
}

static void bf_walk(bf *s, int v, double bw)
{
    const prof_topo *t = s->t;
    if (v == s->b) {
        if (bw > s->best_bw ||
            (bw == s->best_bw && (s->len < s->best_len ||
             (s->len == s->best_len && lex_less(s->path, s->best, s->len))))) {
            s->best_bw = bw;
            s->best_len = s->len;
            memcpy(s->best, s->path, sizeof(int) * (size_t)s->len);
        }
        return;
    }
    if (s->len > 1 && (t->nodes[v].kind == PROF_NODE_GPU ||
                       t->nodes[v].kind == PROF_NODE_DRAM ||
                       t->nodes[v].kind == PROF_NODE_NVME))
        return;
    for (int i = 0; i < t->n_links; i++) {
        const prof_link *l = &t->links[i];
        int u = l->a == v ? l->b : l->b == v ? l->a : -1;
        if (u < 0 || s->on[u]) continue;
        s->on[u] = 1;
        s->path[s->len++] = u;
        bf_walk(s, u, bw < l->bw_bytes_per_s ? bw : l->bw_bytes_per_s);
        s->len--;
        s->on[u] = 0;
    }
}

Test(hw_routes, matches_brute_force_on_random_graphs)
{
    prof_gpu g;
    util_err e;
    cr_assert_eq(prof_gpu_get("a100-pcie-80gb", &g, &e), 0);  /* P2P ok */
    unsigned seed = 12345;
    const double bws[] = {10e9, 25e9, 50e9};
    for (int trial = 0; trial < 150; trial++) {
        prof_topo *t = prof_topo_new("random");
        int ty = prof_topo_add_gpu_type(t, &g);
        int nn = 5 + trial % 5;
        char name[16];
        for (int i = 0; i < nn; i++) {
            /* GPUs, switches and now and then a DRAM (which never forwards) */
            seed = seed * 1103515245 + 12345;
            int r = (seed >> 16) % 10;
            prof_node_kind k = i < 2 || r < 3 ? PROF_NODE_GPU :
                               r < 9 ? PROF_NODE_PCIE_SWITCH : PROF_NODE_DRAM;
            snprintf(name, sizeof name, "v%d", i);
            int v = prof_topo_add_node(t, k, name, 0);
            if (k == PROF_NODE_GPU) t->nodes[v].gpu_type = ty;
            if (k == PROF_NODE_DRAM) {
                t->nodes[v].capacity_bytes = 1e9;
                t->nodes[v].read_bw_bytes_per_s = 1e9;
                t->nodes[v].write_bw_bytes_per_s = 1e9;
            }
        }
        /* a spanning chain keeps it connected, then random extra links */
        for (int i = 1; i < nn; i++) {
            seed = seed * 1103515245 + 12345;
            prof_topo_add_link(t, (int)((seed >> 16) % (unsigned)i), i,
                               PROF_LINK_PCIE, bws[(seed >> 8) % 3], 100);
        }
        for (int k = 0; k < nn; k++) {
            seed = seed * 1103515245 + 12345;
            int a = (int)((seed >> 16) % (unsigned)nn);
            int b = (int)((seed >> 4) % (unsigned)nn);
            if (a != b)
                prof_topo_add_link(t, a, b, PROF_LINK_PCIE,
                                   bws[(seed >> 24) % 3], 100);
        }
        cr_assert_eq(prof_topo_finish(t, &e), 0, "%s", e.msg);
        /* routes one at a time (searched from both ends), or every route
         * from a source at once (one search from the source) */
        if (trial % 2) t->x->bulk_after = 0;
        for (int a = 0; a < nn; a++)
            for (int b = 0; b < nn; b++) {
                if (a == b) continue;
                bf s = {.t = t, .b = b, .best_len = 0, .best_bw = -1};
                s.on[a] = 1;
                s.path[0] = a;
                s.len = 1;
                bf_walk(&s, a, HUGE_VAL);
                int n;
                const int *dl = prof_topo_route(t, a, b, &n);
                if (s.best_bw < 0) {
                    cr_assert_eq(n, 0, "trial %d %d->%d", trial, a, b);
                    continue;
                }
                cr_assert_eq(n, s.best_len - 1, "trial %d %d->%d hops",
                             trial, a, b);
                cr_assert_eq(prof_route_bw(t, dl, n), s.best_bw);
                for (int i = 0; i < n; i++)
                    cr_assert_eq(prof_dl_head(t, dl[i]), s.best[i + 1],
                                 "trial %d %d->%d hop %d", trial, a, b, i);
            }
        prof_topo_free(t);
    }
}

/* -------------------------------------------------------------- templates */

Test(hw_template, sizes_and_options)
{
    prof_topo *t = test_topo("rtx4090", 1);
    cr_assert_eq(t->n_servers, 1);
    int nvme = 0, nic = 0;
    for (int v = 0; v < t->n_nodes; v++) {
        nvme += t->nodes[v].kind == PROF_NODE_NVME;
        nic += t->nodes[v].kind == PROF_NODE_NIC;
    }
    cr_assert_eq(nvme, 1);
    cr_assert_eq(nic, 0);
    cr_assert_geq(prof_topo_gpu_nvme(t, 0), 0);
    prof_topo_free(t);

    util_err e;
    prof_hw_opts o = {.host_mem_bytes = 256.0 * (1 << 30), .nvme = 4,
                      .gpus_per_server = 4, .pcie_gen = 4};
    t = prof_topo_template("rtx2080ti", 12, &o, &e);
    cr_assert_not_null(t, "%s", e.msg);
    cr_assert_eq(t->n_servers, 3);
    cr_assert_eq(t->gpus_per_server, 4);
    double mem = 0;
    nvme = 0;
    for (int v = 0; v < t->n_nodes; v++) {
        if (t->nodes[v].server != 0) continue;
        if (t->nodes[v].kind == PROF_NODE_DRAM)
            mem += t->nodes[v].capacity_bytes;
        nvme += t->nodes[v].kind == PROF_NODE_NVME;
    }
    cr_assert_eq(mem, 256.0 * (1 << 30));
    cr_assert_eq(nvme, 4);
    /* PCIe 4.0 host, but the card negotiates its own 3.0 */
    int n;
    const int *dl = prof_topo_route(t, t->gpu_node[0],
                                    prof_topo_gpu_host_mem(t, 0), &n);
    cr_assert_eq(prof_route_bw(t, dl, n), prof_pcie_bw(3, 16));
    cr_assert(strstr(t->host, "Ice Lake"));
    prof_topo_free(t);

    prof_hw_opts bad = {.gpus_per_server = 12};
    cr_assert_null(prof_topo_template("h100-sxm", 16, &bad, &e));
    cr_assert_eq(e.code, 2);
    cr_assert(strstr(e.msg, "at most 8"), "%s", e.msg);
    cr_assert_null(prof_topo_template("h100-sxm", 0, NULL, &e));
    cr_assert(strstr(e.msg, "GPU count 0"), "%s", e.msg);
    prof_hw_opts gen = {.pcie_gen = 7};
    cr_assert_null(prof_topo_template("rtx3090", 8, &gen, &e));
    cr_assert(strstr(e.msg, "--pcie-gen 7"), "%s", e.msg);
}

Test(hw_template, every_catalog_gpu_builds)
{
    const char *const *names = prof_gpu_names();
    for (int j = 0; names[j]; j++)
        for (int n = 1; n <= 17; n += 8) {
            prof_topo *t = test_topo(names[j], n);
            cr_assert_eq(t->n_gpus, n);
            for (int g = 0; g < n; g++) {
                cr_assert_geq(prof_topo_gpu_host_mem(t, g), 0);
                cr_assert_str_eq(prof_topo_gpu(t, g)->name, names[j]);
                int k;
                const int *dl = prof_topo_gpu_route(t, 0, g, &k);
                if (g) assert_chain(t, t->gpu_node[0], t->gpu_node[g], dl, k);
            }
            prof_topo_free(t);
        }
}

/* ------------------------------------------------------- files, arguments */

static prof_topo *args(const char *a, const char *b, util_err *e)
{
    char *argv[2] = {(char *)a, (char *)b};
    return prof_topo_from_args(b ? 2 : 1, argv, NULL, e);
}

Test(hw_args, forms_and_errors)
{
    util_err e;
    prof_topo *t = args("rtx2080ti x8", NULL, &e);
    cr_assert_not_null(t, "%s", e.msg);
    cr_assert_eq(t->n_gpus, 8);
    prof_topo_free(t);
    t = args("rtx2080ti", "x4", &e);
    cr_assert_not_null(t, "%s", e.msg);
    cr_assert_eq(t->n_gpus, 4);
    prof_topo_free(t);
    t = args("rtx2080ti", "12", &e);    /* a bare count, two servers */
    cr_assert_not_null(t, "%s", e.msg);
    cr_assert_eq(t->n_gpus, 12);
    cr_assert_eq(t->n_servers, 2);
    prof_topo_free(t);
    t = args("h100-sxm", NULL, &e);     /* one node */
    cr_assert_not_null(t, "%s", e.msg);
    cr_assert_eq(t->n_gpus, 8);
    prof_topo_free(t);
    t = args("profiles/hw/example-desktop.json", NULL, &e);
    cr_assert_not_null(t, "%s", e.msg);
    prof_topo_free(t);

    cr_assert_null(args("rtx2080ti", "x0", &e));
    cr_assert_eq(e.code, 2);
    cr_assert(strstr(e.msg, "'x0': must be at least 1"), "%s", e.msg);
    cr_assert_null(args("rtx2080ti", "xabc", &e));
    cr_assert(strstr(e.msg, "bad GPU count 'xabc'"), "%s", e.msg);
    cr_assert_null(args("rtx2080", "x8", &e));
    cr_assert(strstr(e.msg, "did you mean 'rtx2080ti'"), "%s", e.msg);
    cr_assert(strstr(e.msg, "known: "), "%s", e.msg);
    cr_assert_null(args("rtx2080ti x8 extra", NULL, &e));
    cr_assert(strstr(e.msg, "unexpected 'extra'"), "%s", e.msg);
    cr_assert_null(args("", NULL, &e));
    cr_assert_eq(e.code, 2);
    cr_assert_null(args("nosuch/file.json", NULL, &e));
    cr_assert_eq(e.code, 2);
    cr_assert_null(args("profiles/hw/example-desktop.json", "x8", &e));
    cr_assert(strstr(e.msg, "takes no count"), "%s", e.msg);
}

Test(hw_load, examples)
{
    util_err e;
    prof_topo *t = prof_topo_load("profiles/hw/example-desktop.json", &e);
    cr_assert_not_null(t, "%s", e.msg);
    cr_assert_eq(t->n_gpus, 2);
    cr_assert_str_eq(prof_topo_gpu(t, 0)->name, "rtx3090-oc");
    cr_assert_eq(prof_topo_gpu(t, 0)->tdp_w, 390);
    cr_assert_eq(prof_topo_gpu(t, 0)->consumer, 1);     /* from the base */
    int n;
    const int *dl = prof_topo_gpu_route(t, 0, 1, &n);
    /* the bridge gives GeForce cards a peer path */
    cr_assert_eq(n, 1);
    cr_assert_eq(t->links[dl[0] >> 1].kind, PROF_LINK_NVLINK);
    /* a x8 slot from the pcie_gen/lanes shorthand */
    int nv = prof_topo_find(t, "gpu0");
    dl = prof_topo_route(t, nv, prof_topo_gpu_host_mem(t, 0), &n);
    cr_assert_eq(prof_route_bw(t, dl, n), prof_pcie_bw(4, 8));
    prof_topo_free(t);

    t = prof_topo_load("profiles/hw/example-template.json", &e);
    cr_assert_not_null(t, "%s", e.msg);
    cr_assert_eq(t->n_gpus, 16);
    cr_assert_eq(t->n_servers, 4);
    cr_assert_eq(prof_topo_gpu(t, 3)->eff.gemm_max, 0.78);
    cr_assert_str_eq(t->name, "16x rtx4090 in 4-GPU servers");
    prof_topo_free(t);

    /* options on an explicit file are refused, on a template file applied */
    prof_hw_opts o = {.nvme = 3};
    char *argv[1] = {"profiles/hw/example-desktop.json"};
    cr_assert_null(prof_topo_from_args(1, argv, &o, &e));
    cr_assert(strstr(e.msg, "adjust templates"), "%s", e.msg);
    argv[0] = "profiles/hw/example-template.json";
    t = prof_topo_from_args(1, argv, &o, &e);
    cr_assert_not_null(t, "%s", e.msg);
    int drives = 0;
    for (int v = 0; v < t->n_nodes; v++)
        drives += t->nodes[v].server == 0 && t->nodes[v].kind == PROF_NODE_NVME;
    cr_assert_eq(drives, 3);
    prof_topo_free(t);
}

Test(hw_load, json_round_trip)
{
    const char *cases[] = {"rtx2080ti", "v100-sxm2-32gb", "a100-sxm-40gb"};
    for (int c = 0; c < 3; c++) {
        prof_topo *t = test_topo(cases[c], 12);
        json_t *j = prof_topo_json(t);
        char *text = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER |
                                       JSON_REAL_PRECISION(17));
        json_decref(j);
        util_err e;
        prof_topo *u = prof_topo_load_text("dump.json", text, NULL, &e);
        free(text);
        cr_assert_not_null(u, "%s", e.msg);
        cr_assert_eq(u->n_nodes, t->n_nodes);
        cr_assert_eq(u->n_links, t->n_links);
        cr_assert_eq(u->n_gpus, t->n_gpus);
        cr_assert_eq(u->n_servers, t->n_servers);
        cr_assert_str_eq(u->name, t->name);
        cr_assert(!memcmp(&u->gpu_types[0].peak_flops, &t->gpu_types[0]
                          .peak_flops, sizeof t->gpu_types[0].peak_flops));
        for (int i = 0; i < t->n_links; i++) {
            cr_assert_eq(u->links[i].a, t->links[i].a);
            cr_assert(near(u->links[i].bw_bytes_per_s,
                           t->links[i].bw_bytes_per_s, 1e-12));
        }
        for (int a = 0; a < 12; a += 3)
            for (int b = 0; b < 12; b++) {
                int n1, n2;
                const int *r1 = prof_topo_gpu_route(t, a, b, &n1);
                const int *r2 = prof_topo_gpu_route(u, a, b, &n2);
                cr_assert_eq(n1, n2);
                if (n1) cr_assert(!memcmp(r1, r2, sizeof(int) * (size_t)n1));
            }
        prof_topo_free(u);
        prof_topo_free(t);
    }
}

Test(hw_load, builder_rejects_bad_graphs)
{
    prof_gpu g;
    util_err e;
    cr_assert_eq(prof_gpu_get("rtx3090", &g, &e), 0);
    prof_topo *t = prof_topo_new("two islands");
    int ty = prof_topo_add_gpu_type(t, &g);
    int a = prof_topo_add_node(t, PROF_NODE_GPU, "a", 0);
    int b = prof_topo_add_node(t, PROF_NODE_GPU, "b", 0);
    t->nodes[a].gpu_type = t->nodes[b].gpu_type = ty;
    cr_assert_eq(prof_topo_finish(t, &e), -1);
    cr_assert(strstr(e.msg, "not connected"), "%s", e.msg);
    prof_topo_add_link(t, a, b, PROF_LINK_NVLINK, 0, 0);
    cr_assert_eq(prof_topo_finish(t, &e), -1);
    cr_assert(strstr(e.msg, "positive bandwidth"), "%s", e.msg);
    t->links[0].bw_bytes_per_s = 1e9;
    cr_assert_eq(prof_topo_finish(t, &e), 0, "%s", e.msg);
    prof_topo_add_node(t, PROF_NODE_CPU, "a", 0);
    cr_assert_eq(prof_topo_finish(t, &e), -1);
    cr_assert(strstr(e.msg, "two nodes are named 'a'"), "%s", e.msg);
    prof_topo_free(t);
    prof_topo_free(NULL);
}

/* Every bad file is refused with the message in its .expect file. */
Test(hw_bad, corpus)
{
    const char *dir = "tests/bad/hw";
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot open %s (run from the repository root)",
                       dir);
    struct dirent *de;
    int count = 0;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
        char path[512], exp_path[512];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        snprintf(exp_path, sizeof exp_path, "%s/%.*s.expect", dir,
                 (int)(l - 5), de->d_name);
        char *expect;
        util_err e;
        cr_assert_eq(util_read_file(exp_path, &expect, NULL, &e), 0,
                     "%s has no .expect file", path);
        expect[strcspn(expect, "\n")] = 0;
        cr_assert_gt(strlen(expect), 10);
        /* the message names the file, a line and column, and the field */
        cr_assert(!strncmp(expect, path, strlen(path)) &&
                  expect[strlen(path)] == ':', "%s: %s", path, expect);
        e.code = 0;
        if (!strncmp(de->d_name, "gpus_", 5)) {     /* a GPU catalog */
            prof_gpu *g = NULL;
            int n;
            cr_assert_eq(prof_gpu_catalog_load(path, &g, &n, &e), -1,
                         "%s was accepted", path);
            cr_assert_null(g);
        } else {
            prof_topo *t = prof_topo_load(path, &e);
            cr_assert_null(t, "%s was accepted", path);
        }
        cr_assert_eq(e.code, 2, "%s: exit code %d", path, e.code);
        cr_assert(strstr(e.msg, expect), "%s:\n  got:  %s\n  want: %s", path,
                  e.msg, expect);
        free(expect);
        count++;
    }
    closedir(d);
    cr_assert_geq(count, 40);
}

Test(hw_catalog, file_on_disk_is_the_built_in_one)
{
    prof_gpu *g;
    int n;
    util_err e;
    cr_assert_eq(prof_gpu_catalog_load("profiles/hw/gpus.json", &g, &n, &e),
                 0, "%s", e.msg);
    const char *const *names = prof_gpu_names();
    for (int i = 0; i < n; i++) {
        prof_gpu b;
        cr_assert_str_eq(names[i], g[i].name);
        cr_assert_eq(prof_gpu_get(g[i].name, &b, &e), 0);
        cr_assert_eq(memcmp(&b, &g[i], sizeof b), 0);
    }
    cr_assert_null(names[n]);
    free(g);
}

/* -------------------------------------------------------------- printing */

static char *print_to_string(const prof_topo *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    prof_topo_print(t, f);
    fclose(f);
    return buf;
}

static void assert_width(const char *s, int max)
{
    int col = 0, line = 1;
    for (const char *p = s; *p; p++) {
        if (*p == '\n') { col = 0; line++; continue; }
        col++;
        cr_assert_leq(col, max, "line %d is wider than %d columns", line, max);
    }
}

Test(hw_print, tree_fits_100_columns)
{
    const char *gpus[] = {"rtx2080ti", "v100-sxm2-32gb", "a100-sxm-80gb",
                          "h200", "rtx4090"};
    int counts[] = {8, 8, 20, 1024, 1};
    for (int i = 0; i < 5; i++) {
        prof_topo *t = test_topo(gpus[i], counts[i]);
        char *s = print_to_string(t);
        assert_width(s, 100);
        cr_assert(strstr(s, t->name));
        cr_assert(strstr(s, "n0.gpu0"));
        if (i == 0) {
            cr_assert(strstr(s, "n0.sw1"));
            cr_assert(strstr(s, "socket"));
            cr_assert(strstr(s, "12.6 GB/s"));
        }
        if (i == 1) cr_assert(strstr(s, "n0.gpu0 <-> n0.gpu3 45.0 GB/s"));
        if (i == 3) {
            cr_assert(strstr(s, "servers n1..n127: like n0, 8 GPUs each"));
            cr_assert_null(strstr(s, "n5.gpu0"));   /* summarised */
            cr_assert(strstr(s, "network ib"));
        }
        free(s);
        json_t *j = prof_topo_json(t);
        cr_assert_eq(json_integer_value(json_object_get(j, "n_gpus")),
                     counts[i]);
        cr_assert_eq(json_array_size(json_object_get(j, "links")),
                     (size_t)t->n_links);
        json_decref(j);
        prof_topo_free(t);
    }
}
