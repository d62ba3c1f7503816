/* bench_kern: how fast the CPU kernels and the reference trainer run on
 * this machine. Prints (no assertions):
 *   1. the core's theoretical fp32 peak and how it was computed;
 *   2. sgemm GFLOP/s of the linear layers' GEMMs (forward, input gradient,
 *      weight gradient) for gpt-tiny and for a 1024-wide layer, against
 *      that peak;
 *   3. trainer tokens/s with 1 thread and with all cores, and the share of
 *      kernel time spent outside the linear layers' GEMMs.
 * Goals from the issue: 1024-wide GEMMs at >= 70% of one core's peak; at
 * most 30% of a gpt-tiny step outside GEMMs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "exec/exec.h"
#include "kernels/kernels.h"

/* ------------------------------------------------------------ the peak */

typedef struct cpu_info {
    char model[128];
    int family, model_no;
    int avx2, fma, avx512f, amd, intel;
    double mhz_cpuinfo;
} cpu_info;

static void read_cpuinfo(cpu_info *c)
{
    memset(c, 0, sizeof *c);
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 2;
        v[strcspn(v, "\n")] = 0;
        if (!strncmp(line, "model name", 10) && !c->model[0])
            snprintf(c->model, sizeof c->model, "%s", v);
        else if (!strncmp(line, "cpu family", 10)) c->family = atoi(v);
        else if (!strncmp(line, "model\t", 6)) c->model_no = atoi(v);
        else if (!strncmp(line, "cpu MHz", 7) && !c->mhz_cpuinfo)
            c->mhz_cpuinfo = atof(v);
        else if (!strncmp(line, "vendor_id", 9)) {
            c->amd = strstr(v, "AMD") != NULL;
            c->intel = strstr(v, "Intel") != NULL;
        } else if (!strncmp(line, "flags", 5)) {
            char *p = v;
            for (char *tok = strtok(p, " "); tok; tok = strtok(NULL, " ")) {
                if (!strcmp(tok, "avx2")) c->avx2 = 1;
                if (!strcmp(tok, "fma")) c->fma = 1;
                if (!strcmp(tok, "avx512f")) c->avx512f = 1;
            }
            break; /* first CPU is enough */
        }
    }
    fclose(f);
}

/* The clock the core really runs at while busy: a chain of dependent
 * integer adds retires one per cycle on every x86 core of the last 15
 * years, so cycles = adds and GHz = adds / ns. Turbo included (the GEMM
 * runs at the same clock); the VM's cpuinfo MHz is often the base clock. */
static double measure_ghz(void)
{
#if defined(__x86_64__)
    /* Many short runs (about 2 ms each), best kept: on a shared machine
     * a run that lost the core to another process for part of its time
     * reads as a slower clock, and short runs often go unpreempted. */
    double best = 0;
    for (int rep = 0; rep < 300; rep++) {
        uint64_t iters = 1000000, x = 0;
        uint64_t t0 = exec_now_ns();
        for (uint64_t i = 0; i < iters; i++)
            __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                             "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                             "add $1, %0\n\tadd $1, %0\n\t"
                             : "+r"(x));
        uint64_t dt = exec_now_ns() - t0;
        double ghz = 8.0 * iters / dt;
        if (ghz > best) best = ghz;
    }
    return best;
#else
    return 0;
#endif
}

/* fp32 FLOP per cycle per core from the microarchitecture (FMA = 2 FLOP):
 *   AMD Zen 2/3/4 (family 23 model >= 0x30, family 25): 2 FMA pipes of
 *     256 bits = 2 x 8 x 2 = 32 (Zen 4 runs AVX-512 as two 256-bit halves:
 *     still 32);  Zen 1: 2 x 128-bit = 16;  Zen 5 (family 26): 2 x 512 = 64.
 *   Intel with AVX-512: assumed 2 FMA units x 16 = 64 (Xeon Gold/Platinum;
 *     parts with one 512-bit unit get 32);  Intel AVX2+FMA: 2 x 8 x 2 = 32.
 *   Otherwise SSE: one 4-wide add and one 4-wide multiply = 8.
 * Sources: AMD Software Optimization Guides for families 17h, 19h, 1Ah;
 * Intel 64 and IA-32 Optimization Reference Manual. */
static int flops_per_cycle(const cpu_info *c, const char **why)
{
    if (c->amd && c->family == 26 && c->avx512f) {
        *why = "AMD Zen 5: 2 FMA pipes x 16 fp32 lanes x 2";
        return 64;
    }
    if (c->amd && (c->family == 25 || (c->family == 23 && c->model_no >= 0x30))) {
        *why = c->avx512f ? "AMD Zen 4: 2 FMA pipes x 8 fp32 lanes (256-bit "
                            "datapath, AVX-512 double-pumped) x 2"
                          : "AMD Zen 2/3: 2 FMA pipes x 8 fp32 lanes x 2";
        return 32;
    }
    if (c->amd && c->family == 23) {
        *why = "AMD Zen 1: 2 FMA pipes x 4 fp32 lanes x 2";
        return 16;
    }
    if (c->avx512f) {
        *why = "AVX-512, assumed 2 FMA units x 16 fp32 lanes x 2";
        return 64;
    }
    if (c->avx2 && c->fma) {
        *why = "AVX2: 2 FMA units x 8 fp32 lanes x 2";
        return 32;
    }
    *why = "SSE: 4-wide add + 4-wide multiply";
    return 8;
}

/* --------------------------------------------------------------- GEMMs */

static float *rnd(size_t n)
{
    float *x = util_malloc(n * sizeof *x);
    uint64_t s = n * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) / 16777216.0 - 0.5);
    }
    return x;
}

/* Times one linear layer's three GEMMs at N rows; best of reps after one
 * warm-up call, repeated until 0.3 s have passed (at least 3 runs). */
static void bench_linear(util_table *t, const char *name, int N, int C,
                         int OC, double peak_gflops, int threads)
{
    float *x = rnd((size_t)N * C), *w = rnd((size_t)OC * C);
    float *out = rnd((size_t)N * OC), *dx = rnd((size_t)N * C);
    float *dw = rnd((size_t)OC * C);
    double flops = 2.0 * N * C * OC;
    const char *ph[3] = {"fwd", "bwd_in", "bwd_w"};
    for (int p = 0; p < 3; p++) {
        uint64_t best = UINT64_MAX, spent = 0;
        for (int r = 0; r < 1000 && (r < 4 || spent < 300000000); r++) {
            uint64_t t0 = exec_now_ns();
            if (p == 0) kern_linear_forward(out, x, w, NULL, N, C, OC);
            else if (p == 1) kern_linear_backward_input(dx, out, w, N, C, OC);
            else kern_linear_backward_weight(dw, NULL, out, x, N, C, OC);
            uint64_t dt = exec_now_ns() - t0;
            spent += dt;
            if (r > 0 && dt < best) best = dt;
        }
        int m = p == 0 ? N : p == 1 ? N : OC;
        int n = p == 0 ? OC : C;
        int k = p == 0 ? C : p == 1 ? OC : N;
        double gf = flops / best;
        char c0[64], c1[16], c2[16], c3[16], c4[16], c5[16], c6[16], c7[16];
        snprintf(c0, sizeof c0, "%s %s", name, ph[p]);
        snprintf(c1, sizeof c1, "%d", m);
        snprintf(c2, sizeof c2, "%d", n);
        snprintf(c3, sizeof c3, "%d", k);
        snprintf(c4, sizeof c4, "%d", threads);
        snprintf(c5, sizeof c5, "%.3f", best / 1e6);
        snprintf(c6, sizeof c6, "%.1f", gf);
        snprintf(c7, sizeof c7, "%.0f%%", 100 * gf / (peak_gflops * threads));
        const char *row[8] = {c0, c1, c2, c3, c4, c5, c6, c7};
        util_table_row(t, row);
    }
    free(x); free(w); free(out); free(dx); free(dw);
}

/* ------------------------------------------------------------- trainer */

/* Time of the per-head products inside attention for one step (forward 2,
 * backward 4 per (b, h), as kernels/ops_cpu.c issues them), measured by
 * issuing the same sgemm calls alone: attention's GEMM share, which the
 * per-op timer cannot separate from its softmax loops. */
static double attn_gemm_ns(int B, int T, int C, int NH, int L)
{
    int hs = C / NH, C3 = 3 * C;
    float *qkv = rnd((size_t)B * T * C3), *att = rnd((size_t)T * T);
    float *o = rnd((size_t)B * T * C), *dq = rnd((size_t)B * T * C3);
    uint64_t best = UINT64_MAX;
    for (int rep = 0; rep < 3; rep++) {
        uint64_t t0 = exec_now_ns();
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            const float *q = qkv + (size_t)b * T * C3 + h * hs;
            float *out = o + (size_t)b * T * C + h * hs;
            float *d = dq + (size_t)b * T * C3 + h * hs;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs,
                        1.0f, q, C3, q + C, C3, 0.0f, att, T);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T,
                        1.0f, att, T, q + 2 * C, C3, 0.0f, out, C);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs,
                        1.0f, out, C, q + 2 * C, C3, 0.0f, att, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T,
                        1.0f, att, T, out, C, 1.0f, d + 2 * C, C3);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T,
                        1.0f, att, T, q + C, C3, 1.0f, d, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T,
                        1.0f, att, T, q, C3, 1.0f, d + C, C3);
        }
        uint64_t dt = exec_now_ns() - t0;
        if (dt < best) best = dt;
    }
    free(qkv); free(att); free(o); free(dq);
    return (double)best * L;
}

static void bench_trainer(util_table *t, const char *model, int B, int T,
                          int threads, int steps)
{
    prof_model_spec s;
    util_err e;
    exec_gpt_config c;
    if (prof_model_spec_get(model, &s, &e) ||
        exec_gpt_config_from_spec(&s, &c, model, &e)) {
        fprintf(stderr, "bench_kern: %s\n", e.msg);
        return;
    }
    kern_set_threads(threads);
    exec_gpt *m = exec_gpt_new(&c, B, T, 1);
    int *tok = util_malloc((size_t)B * T * sizeof(int));
    int *tgt = util_malloc((size_t)B * T * sizeof(int));
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 131 + 7) % c.vocab;
        tgt[i] = (i * 71 + 3) % c.vocab;
    }
    exec_adamw ad = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    exec_timing *tm = exec_timing_new();
    uint64_t total = 0;
    for (int s = 0; s < steps + 2; s++) {
        if (s == 2) exec_gpt_set_timing(m, tm); /* two warm-up steps */
        uint64_t t0 = exec_now_ns();
        exec_gpt_forward(m, tok, tgt);
        exec_gpt_zero_grad(m);
        exec_gpt_backward(m);
        exec_gpt_step(m, &ad, s + 1);
        if (s >= 2) total += exec_now_ns() - t0;
    }
    double kern_ns = (double)exec_timing_total_ns(tm);
    double gemm = (double)exec_timing_gemm_ns(tm);
    double attn = (double)exec_timing_kind_ns(tm, KERN_KIND_ATTN) / steps;
    double attn_gemm = threads == 1
                           ? attn_gemm_ns(B, T, c.hidden, c.heads, c.layers)
                           : 0;
    if (attn_gemm > attn) attn_gemm = attn;
    kern_ns /= steps;
    gemm /= steps;
    char c0[48], c1[16], c2[16], c3[16], c4[16], c5[16], c6[16];
    snprintf(c0, sizeof c0, "%s B=%d T=%d", model, B, T);
    snprintf(c1, sizeof c1, "%d", threads);
    snprintf(c2, sizeof c2, "%.1f", total / 1e6 / steps);
    snprintf(c3, sizeof c3, "%.0f", (double)B * T * steps / (total / 1e9));
    snprintf(c4, sizeof c4, "%.1f%%", 100 * (1 - gemm / kern_ns));
    if (threads == 1)
        snprintf(c5, sizeof c5, "%.1f%%",
                 100 * (1 - (gemm + attn_gemm) / kern_ns));
    else
        snprintf(c5, sizeof c5, "-");
    snprintf(c6, sizeof c6, "%.1f%%", 100 * (1 - kern_ns * steps / total));
    const char *row[7] = {c0, c1, c2, c3, c4, c5, c6};
    util_table_row(t, row);
    exec_timing_free(tm);
    exec_gpt_free(m);
    free(tok);
    free(tgt);
}

int main(void)
{
    cpu_info ci;
    read_cpuinfo(&ci);
    const char *why;
    int fpc = flops_per_cycle(&ci, &why);
    kern_set_threads(1);
    double ghz = measure_ghz();
    const char *clock_src = "measured (dependent integer adds, 1/cycle)";
    if (ghz <= 0) {
        ghz = ci.mhz_cpuinfo / 1000;
        clock_src = "/proc/cpuinfo cpu MHz";
    }
    double peak = fpc * ghz;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("CPU: %s (family %d model %d), %ld online, OpenBLAS core %s, "
           "row kernels %s\n",
           ci.model, ci.family, ci.model_no, ncpu, kern_blas_core(),
           kern_get_isa());
    printf("clock: %.2f GHz %s; /proc/cpuinfo says %.0f MHz\n", ghz,
           clock_src, ci.mhz_cpuinfo);
    printf("peak fp32 per core: %d FLOP/cycle (%s) x %.2f GHz = %.1f "
           "GFLOP/s\n\n",
           fpc, why, ghz, peak);

    util_table *t = util_table_new(8);
    const char *hd[8] = {"GEMM (linear layer, phase)", "m", "n", "k",
                         "threads", "ms", "GFLOP/s", "of peak"};
    for (int i = 0; i < 8; i++) util_table_col(t, i, hd[i], i ? 'r' : 'l');
    /* gpt-tiny at the trainer's default batch: N = 16 x 64 rows. */
    int N = 16 * 64;
    bench_linear(t, "tiny qkv", N, 128, 384, peak, 1);
    bench_linear(t, "tiny attn proj", N, 128, 128, peak, 1);
    bench_linear(t, "tiny fc", N, 128, 512, peak, 1);
    bench_linear(t, "tiny fc proj", N, 512, 128, peak, 1);
    bench_linear(t, "tiny lm head", N, 128, 256, peak, 1);
    util_table_sep(t);
    /* A 1024-wide layer (ffn 4096) at 1024 tokens. */
    bench_linear(t, "w1024 qkv", 1024, 1024, 3072, peak, 1);
    bench_linear(t, "w1024 attn proj", 1024, 1024, 1024, peak, 1);
    bench_linear(t, "w1024 fc", 1024, 1024, 4096, peak, 1);
    bench_linear(t, "w1024 fc proj", 1024, 4096, 1024, peak, 1);
    if (ncpu > 1) {
        util_table_sep(t);
        kern_set_threads((int)ncpu);
        bench_linear(t, "w1024 fc", 1024, 1024, 4096, peak, (int)ncpu);
        kern_set_threads(1);
    }
    printf("sgemm through kern_linear_* (row-major, fp32), best of >= 3 "
           "timed runs:\n");
    util_table_print(t, stdout, "  ");
    util_table_free(t);

    util_table *tr = util_table_new(7);
    const char *h2[7] = {"trainer step", "threads", "ms/step", "tokens/s",
                         "outside linear GEMMs", "outside all GEMMs",
                         "untimed"};
    for (int i = 0; i < 7; i++) util_table_col(tr, i, h2[i], i ? 'r' : 'l');
    bench_trainer(tr, "gpt-tiny", 16, 64, 1, 8);
    if (ncpu > 1) bench_trainer(tr, "gpt-tiny", 16, 64, (int)ncpu, 8);
    bench_trainer(tr, "gpt-mini", 8, 128, 1, 3);
    if (ncpu > 1) bench_trainer(tr, "gpt-mini", 8, 128, (int)ncpu, 3);
    kern_set_threads(1);
    printf("\nreference trainer, forward + backward + AdamW per step, after "
           "2 warm-up steps\n(shares are of measured kernel time; 'all "
           "GEMMs' adds attention's per-head\nproducts, timed alone, 1 "
           "thread only; 'untimed' is step time outside any kernel):\n");
    util_table_print(tr, stdout, "  ");
    util_table_free(tr);
    return 0;
}
