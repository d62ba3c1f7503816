/* Chrome/Perfetto trace-event JSON: a process per device, a thread per
 * stream (receives on one thread per sending device, so they never
 * overlap), complete X events with microsecond times at nanosecond
 * precision, memory as a counter per device, and flow arrows from each
 * send to its receive. Written in task order: same run, same bytes. */
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

static void us(FILE *f, int64_t ns)
{
    if (ns < 0) ns = 0;
    fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

static int tid_of(const sim_ir *ir, const sim_task *t)
{
    if (t->stream == SIM_STREAM_RECV && t->peer >= 0)
        return 10 + ir->tasks[t->peer].device;
    return t->stream;
}

int sim_trace_write(const char *path, const sim_ir *ir, const sim_result *r,
                    const sim_costs *c, util_err *e)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return util_errf(e, UTIL_EXIT_FAIL, "out of memory");
    fprintf(f, "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n");
    int first = 1;
#define SEP() (first ? (first = 0, "") : ",\n")
    /* a device can receive from itself (zb-v's turn of the V, the tied
     * embedding's gradients when the first and last stage share one):
     * its track gets a name too */
    char *self = util_calloc((size_t)ir->n_devices, 1);
    for (int i = 0; i < ir->n_tasks; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->stream == SIM_STREAM_RECV && t->peer >= 0 &&
            ir->tasks[t->peer].device == t->device)
            self[t->device] = 1;
    }
    for (int d = 0; d < ir->n_devices; d++) {
        fprintf(f, "%s{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, "
                "\"args\": {\"name\": \"device %d\"}}", SEP(), d, d);
        fprintf(f, "%s{\"ph\": \"M\", \"name\": \"process_sort_index\", "
                "\"pid\": %d, \"args\": {\"sort_index\": %d}}", SEP(), d, d);
        for (int s = 0; s < SIM_STREAM_COUNT; s++) {
            if (s == SIM_STREAM_RECV) continue;
            fprintf(f, "%s{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": "
                    "%d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}", SEP(), d,
                    s, sim_stream_name((sim_stream)s));
        }
        for (int q = 0; q < ir->n_devices; q++)
            if (q != d || self[d])
                fprintf(f, "%s{\"ph\": \"M\", \"name\": \"thread_name\", "
                        "\"pid\": %d, \"tid\": %d, \"args\": {\"name\": "
                        "\"recv from %d\"}}", SEP(), d, 10 + q, q);
    }
    free(self);
    for (int d = 0; d < ir->n_devices; d++)
        for (int j = ir->dev_off[d]; j < ir->dev_off[d + 1]; j++) {
            int id = ir->seq[j];
            const sim_task *t = &ir->tasks[id];
            int64_t st = r->start_ns[id], en = r->end_ns[id];
            if (st < 0 || en < 0) continue;
            const char *kn = sim_kind_name((sim_kind)t->kind);
            fprintf(f, "%s{\"ph\": \"X\", \"name\": \"", SEP());
            if (t->mb >= 0) fprintf(f, "%s%d", kn, t->mb);
            else fprintf(f, "%s", kn);
            if (t->kind == SIM_SEND || t->kind == SIM_RECV)
                fprintf(f, " %s %d->%d", t->grad ? "grad" : "act", t->stage,
                        t->stage2);
            /* a data-parallel ring's steps (all-reduce, reduce-scatter,
             * all-gather; an offload's between its ranks) have a
             * category of their own: the plots draw them on a row */
            const char *cat = t->kind == SIM_SEND && t->comm == SIM_COMM_DP
                            ? "RING" : kn;
            fprintf(f, "\", \"cat\": \"%s\", \"pid\": %d, \"tid\": %d, "
                    "\"ts\": ", cat, d, tid_of(ir, t));
            us(f, st);
            fprintf(f, ", \"dur\": ");
            us(f, en - st);
            fprintf(f, ", \"args\": {\"task\": %d, \"stage\": %d, \"mb\": %d, "
                    "\"minibatch\": %d, \"version\": %d", id, t->stage, t->mb,
                    t->minibatch, t->version);
            if (t->bytes > 0) fprintf(f, ", \"bytes\": %.0f", t->bytes);
            fprintf(f, "}}");
            if (t->kind == SIM_SEND && t->peer >= 0) {
                fprintf(f, "%s{\"ph\": \"s\", \"name\": \"transfer\", \"cat\": "
                        "\"transfer\", \"id\": %d, \"pid\": %d, \"tid\": %d, "
                        "\"ts\": ", SEP(), id, d, tid_of(ir, t));
                us(f, st);
                fprintf(f, "}");
                const sim_task *rv = &ir->tasks[t->peer];
                fprintf(f, "%s{\"ph\": \"f\", \"bp\": \"e\", \"name\": "
                        "\"transfer\", \"cat\": \"transfer\", \"id\": %d, "
                        "\"pid\": %d, \"tid\": %d, \"ts\": ", SEP(), id,
                        rv->device, tid_of(ir, rv));
                us(f, r->end_ns[t->peer]);
                fprintf(f, "}");
            }
        }
    for (int i = 0; i < r->n_mem; i++) {
        const sim_mem_point *p = &r->mem[i];
        fprintf(f, "%s{\"ph\": \"C\", \"name\": \"memory\", \"pid\": %d, "
                "\"ts\": ", SEP(), p->device);
        us(f, p->t_ns);
        fprintf(f, ", \"args\": {\"bytes\": %.0f}}", p->bytes);
    }
    /* offloaded: host DRAM and the drives in time, counters of the GPU's
     * process named for their tier */
    sim_tier_use tu = {0};
    if (c && c->offload) sim_offload_tier_use(ir, r, c, &tu);
    for (int i = 0; i < tu.n; i++)
        for (int k = 0; k < 2; k++) {
            if (k && c->tier != SIM_TIER_NVME &&
                c->act_tier != SIM_TIER_NVME)
                continue;
            fprintf(f, "%s{\"ph\": \"C\", \"name\": \"%s\", \"pid\": 0, "
                    "\"ts\": ", SEP(), k ? "NVMe" : "host DRAM");
            us(f, tu.t_ns[i]);
            fprintf(f, ", \"args\": {\"bytes\": %.0f}}",
                    k ? tu.nvme[i] : tu.host[i]);
        }
    sim_tier_use_free(&tu);
    /* stage tiers: the fullest server's DRAM and drives hold the states
     * (and the gradients the CPU reads) from setup to the end */
    if (c && c->stage_tiers && !c->offload) {
        for (int k = 0; k < 2; k++) {
            double by = k ? c->nvme_bytes : c->host_bytes;
            if (!(by > 0)) continue;
            for (int j = 0; j < 2; j++) {
                fprintf(f, "%s{\"ph\": \"C\", \"name\": \"%s\", \"pid\": "
                        "0, \"ts\": ", SEP(), k ? "NVMe" : "host DRAM");
                us(f, j ? r->makespan_ns : 0);
                fprintf(f, ", \"args\": {\"bytes\": %.0f}}", by);
            }
        }
    }
    /* what a device is: a GPU, or a CPU core (the plots name its rows) */
    fprintf(f, "\n], \"otherData\": {\"schedule\": \"%s\", \"devices\": %d, "
            "\"unit\": \"%s\", \"minibatches\": %d, \"capacity_bytes\": [",
            ir->schedule, ir->n_devices, prof_topo_unit(c ? c->topo : NULL),
            ir->n_minibatches);
    for (int d = 0; d < ir->n_devices; d++)
        fprintf(f, "%s%.0f", d ? ", " : "", c ? c->dev_capacity[d] : 0.0);
    fprintf(f, "]}}\n");
#undef SEP
    fclose(f);
    int rc = util_write_atomic(path, buf, len, e);
    free(buf);
    return rc;
}
