/* File targets: the input is the file a user gives (GPU catalog, server or
 * cluster, model spec or config.json, plan, schedule CSV, checkpoint),
 * loaded by the library's own loader; what loads is then used the way the
 * commands use it, within limits that keep one input to milliseconds. */
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "sim/sim.h"
#include "tests/fuzz/fuzz.h"

/* Larger inputs add nothing a parser has not seen at this size. */
#define FILE_MAX (64 * 1024)
/* Topologies whose every GPU pair is routed; models that are built. */
#define TOPO_MAX_GPUS 64
#define MODEL_MAX_LAYERS 1024

/* Refuses an input over FILE_MAX, or enters the scratch folder and writes
 * it there as name. */
static int file_enter(const uint8_t *data, size_t size, const char *name)
{
    if (size > FILE_MAX) return -1;
    fuzz_enter();
    fuzz_put(name, data, size);
    return 0;
}

int fuzz_gpus(const uint8_t *data, size_t size)
{
    if (file_enter(data, size, "gpus.json")) return -1;
    prof_gpu *g = NULL;
    int n = 0;
    util_err e;
    if (!prof_gpu_catalog_load("gpus.json", &g, &n, &e)) {
        free(g);
        prof_validate_file("gpus.json", stdout, &e);
    }
    fuzz_leave();
    return 0;
}

/* Everything the simulator asks of a topology: the tree, JSON, routes
 * between all GPUs and to their host memory and drives, symmetry. */
static void use_topo(const prof_topo *t)
{
    prof_topo_print(t, stdout);
    json_decref(prof_topo_json(t));
    for (int a = 0; a < t->n_gpus; a++) {
        prof_topo_gpu_host_mem(t, a);
        prof_topo_gpu_nvme(t, a);
        for (int b = 0; b < t->n_gpus; b++) {
            int n;
            const int *dl = prof_topo_gpu_route(t, a, b, &n);
            prof_route_bw(t, dl, n);
            prof_route_latency_ns(t, dl, n);
        }
    }
    if (t->n_servers > 1 && t->gpus_per_server > 0 &&
        (long)t->gpus_per_server * t->n_servers <= t->n_gpus) {
        prof_topo_shift_symmetric(t, t->gpus_per_server, t->n_servers);
        free(prof_topo_shift_map(t, t->gpus_per_server, t->n_servers));
    }
}

int fuzz_hw(const uint8_t *data, size_t size)
{
    if (file_enter(data, size, "server.json")) return -1;
    util_err e;
    prof_topo *t = prof_topo_load("server.json", &e);
    if (t && t->n_gpus <= TOPO_MAX_GPUS) {
        use_topo(t);
        prof_validate_file("server.json", stdout, &e);
    }
    prof_topo_free(t);
    fuzz_leave();
    return 0;
}

int fuzz_model(const uint8_t *data, size_t size)
{
    if (file_enter(data, size, "config.json")) return -1;
    util_err e;
    prof_model_spec s;
    if (!prof_model_spec_get("config.json", &s, &e) &&
        (long)s.layers + s.dec_layers <= MODEL_MAX_LAYERS) {
        prof_model *m = prof_model_build(&s, &e);
        if (m) {
            prof_model_print(m, 1, stdout);
            json_decref(prof_model_json(m, 1));
            prof_model_train_flops(m, 1);
            for (int i = 0; i < m->n_ops; i++) prof_model_cut_bytes(m, i);
            prof_model_free(m);
        }
        prof_validate_file("config.json", stdout, &e);
    }
    fuzz_leave();
    return 0;
}

int fuzz_plan_small(const sim_plan *p)
{
    return !strchr(p->model, '/') && !strchr(p->hw, '/') &&
           !strchr(p->sched_file, '/') &&
           fuzz_small_numbers(p->hw, strlen(p->hw), TOPO_MAX_GPUS) &&
           (long)p->pp * p->dp * p->tp <= 32 && p->n_mb <= 32 &&
           p->n_minibatches <= 64 &&
           (long)p->n_mb * (p->n_minibatches ? p->n_minibatches : 1) <= 256 &&
           p->n_stages <= 64 && p->waves <= 4;
}

int fuzz_plan(const uint8_t *data, size_t size)
{
    if (file_enter(data, size, "plan.json")) return -1;
    util_err e;
    sim_plan p;
    int rc = sim_plan_load("plan.json", &p, &e);
    int small = !rc && fuzz_plan_small(&p);
    sim_plan_free(&p);
    if (small) {
        /* as `sluice sim --plan` runs it; a plan it ran and saved again
         * must load again (the written form is the read form) */
        char *argv[] = {"sim", "--plan", "plan.json", "--json", "--out",
                        "again.json", "--trace", "trace.json", NULL};
        if (!sim_cmd_main(8, argv)) {
            if (sim_plan_load("again.json", &p, &e)) {
                dprintf(2, "fuzz plan: a plan sim wrote does not load: %s\n",
                        e.msg);
                abort();
            }
            sim_plan_free(&p);
        }
    }
    fuzz_leave();
    return rc || small ? 0 : -1;
}

/* The input's first line holds sim options (schedule, pp, microbatches,
 * chunks, ...), the rest is the CSV: seeds are what `sim --emit-schedule`
 * wrote for those options. */
int fuzz_schedcsv(const uint8_t *data, size_t size)
{
    if (size > FILE_MAX) return -1;
    const char *nl = memchr(data, '\n', size);
    size_t head = nl ? (size_t)(nl - (const char *)data) : size;
    if (head > 200 || memchr(data, 0, head) || memchr(data, '/', head) ||
        !fuzz_small_numbers((const char *)data, head, 16))
        return -1;
    char line[201];
    memcpy(line, data, head);
    line[head] = 0;
    char *argv[32] = {"sim", "--hw", "rtx2080ti x8", "--model", "gpt-tiny",
                      "--mbs", "1"};
    int argc = 7;
    for (char *w = strtok(line, " \t\r"); w; w = strtok(NULL, " \t\r")) {
        if (argc == 28 || !strcmp(w, "--plot")) return -1;
        argv[argc++] = w;
    }
    argv[argc++] = "--schedule-file";
    argv[argc++] = "sched.csv";
    argv[argc++] = "--json";
    argv[argc] = NULL;
    fuzz_enter();
    fuzz_put("sched.csv", data + head + (nl != NULL),
             size - head - (nl != NULL));
    sim_cmd_main(argc, argv);
    fuzz_leave();
    return 0;
}

/* FNV-1a 64 over what precedes the last 8 bytes, stored there: the format's
 * checksum, so that mutations reach the checks behind it. */
static void ckpt_seal(uint8_t *b, size_t n)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i + 8 < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    memcpy(b + n - 8, &h, 8);
}

/* As `sluice exec --resume` of a LoRA plan reads the run's own state
 * beside the checkpoint: the header, then the state of the model and mode
 * it names, where small. */
static void lora_state(void)
{
    util_err e;
    exec_ckpt_meta meta;
    prof_finetune ft;
    if (exec_lora_ckpt_peek("run.ckpt.lora", &meta, &ft, &e)) return;
    if (exec_gpt_mem_need(&meta.cfg, 1, 1).total_bytes >= 64e6) return;
    exec_tensor tt[EXEC_P_COUNT];
    size_t P = exec_gpt_param_table(&meta.cfg, tt);
    int nt;
    size_t NL = exec_lora_table(&meta.cfg, &ft, NULL, &nt);
    if (NL > ((size_t)16 << 20)) return;
    float *p = malloc(sizeof *p * (P + 3 * NL + 1));
    exec_lora_ckpt_load("run.ckpt.lora", &meta.cfg, &ft, p, p + P,
                        p + P + NL, p + P + 2 * NL, NL, &meta, &e);
    free(p);
}

/* As `sluice exec --resume` reads a checkpoint: the header, the memory its
 * batch and length need, then a model of its configuration loaded; or, a
 * file with a LoRA run's header, that state. */
int fuzz_ckpt(const uint8_t *data, size_t size)
{
    if (size > 4 * FILE_MAX) return -1;
    uint8_t *b = malloc(size ? size : 1);
    memcpy(b, data, size);
    if (size >= 16) ckpt_seal(b, size);
    fuzz_enter();
    int lora = size >= 8 && !memcmp(b, "SLUICEL1", 8);
    fuzz_put(lora ? "run.ckpt.lora" : "run.ckpt", b, size);
    free(b);
    if (lora) {
        lora_state();
        fuzz_leave();
        return 0;
    }
    util_err e;
    exec_ckpt_meta meta;
    if (!exec_ckpt_peek("run.ckpt", &meta, &e)) {
        exec_gpt_mem_need(&meta.cfg, meta.B, meta.T);
        if (exec_gpt_mem_need(&meta.cfg, 1, 1).total_bytes < 64e6) {
            exec_gpt *m = exec_gpt_new(&meta.cfg, 1, 1, meta.seed);
            exec_ckpt_load("run.ckpt", m, &meta, &e);
            exec_gpt_free(m);
        }
    }
    fuzz_leave();
    return 0;
}
