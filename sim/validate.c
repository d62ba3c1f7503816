/* The validator: the rules every schedule obeys (counts, order, matched
 * transfers, stage placement), then a dry run in list order without times
 * that finds deadlocks and names the tasks each stuck stream waits for. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

enum { CK_F, CK_B, CK_W, CK_BW, CK_R, CK_N };

static int ck_of(int kind)
{
    switch (kind) {
    case SIM_F: return CK_F;
    case SIM_B: return CK_B;
    case SIM_W: return CK_W;
    case SIM_BW: return CK_BW;
    case SIM_RECOMP: return CK_R;
    default: return -1;
    }
}

static int check_rules(const sim_ir *ir, util_err *e)
{
    const int S = ir->n_stages, M = ir->n_mb, K = ir->n_minibatches;
    size_t n = (size_t)K * S * M * CK_N;
    int *cnt = util_calloc(n, sizeof(int));
    int *pos = util_malloc(sizeof(int) * n);
    int *where = util_malloc(sizeof(int) * (size_t)(ir->n_tasks + 1));
    for (int d = 0; d < ir->n_devices; d++)
        for (int j = ir->dev_off[d]; j < ir->dev_off[d + 1]; j++)
            where[ir->seq[j]] = j;
    int rc = 0;
    char b[128], b2[128];
    for (int i = 0; i < ir->n_tasks && !rc; i++) {
        const sim_task *t = &ir->tasks[i];
        if (t->kind == SIM_SEND || t->kind == SIM_RECV) {
            int want = t->kind == SIM_SEND ? SIM_RECV : SIM_SEND;
            if (t->peer < 0 || t->peer >= ir->n_tasks ||
                ir->tasks[t->peer].kind != want ||
                ir->tasks[t->peer].peer != i ||
                ir->tasks[t->peer].bytes != t->bytes ||
                ir->tasks[t->peer].stage != t->stage ||
                ir->tasks[t->peer].mb != t->mb) {
                rc = util_errf(e, UTIL_EXIT_FAIL,
                               "schedule %s: %s has no matching %s",
                               ir->schedule, sim_task_str(ir, i, b, sizeof b),
                               want == SIM_RECV ? "receive" : "send");
            }
            continue;
        }
        int ck = ck_of(t->kind);
        if (ck < 0) continue;
        if (t->stage < 0 || t->stage >= S || t->mb < 0 || t->mb >= M ||
            t->minibatch < 0 || t->minibatch >= K) {
            rc = util_errf(e, UTIL_EXIT_FAIL, "schedule %s: task %d (%s) "
                           "names stage %d microbatch %d out of range",
                           ir->schedule, i, sim_kind_name(t->kind), t->stage,
                           t->mb);
            break;
        }
        if (t->device != ir->stage_device[t->stage]) {
            rc = util_errf(e, UTIL_EXIT_FAIL, "schedule %s: %s runs on a "
                           "device other than its stage's (%d)", ir->schedule,
                           sim_task_str(ir, i, b, sizeof b),
                           ir->stage_device[t->stage]);
            break;
        }
        size_t k = (((size_t)t->minibatch * S + t->stage) * M + t->mb) * CK_N + ck;
        if (cnt[k]++) {
            rc = util_errf(e, UTIL_EXIT_FAIL, "schedule %s: %s appears more "
                           "than once", ir->schedule,
                           sim_task_str(ir, i, b, sizeof b));
            break;
        }
        pos[k] = where[i];
    }
    for (int k = 0; k < K && !rc; k++)
        for (int s = 0; s < S && !rc; s++)
            for (int mb = 0; mb < M && !rc; mb++) {
                size_t base = (((size_t)k * S + s) * M + mb) * CK_N;
                int *c = cnt + base, *p = pos + base;
                const char *kb = K > 1 ? " of minibatch " : "";
                char kk[16] = "";
                if (K > 1) snprintf(kk, sizeof kk, "%d", k);
                if (!c[CK_F]) {
                    rc = util_errf(e, UTIL_EXIT_FAIL, "schedule %s: stage %d "
                                   "never runs F for microbatch %d%s%s",
                                   ir->schedule, s, mb, kb, kk);
                } else if (!(c[CK_BW] == 1 && !c[CK_B] && !c[CK_W]) &&
                           !(!c[CK_BW] && c[CK_B] == 1 && c[CK_W] == 1)) {
                    rc = util_errf(e, UTIL_EXIT_FAIL, "schedule %s: stage %d "
                                   "microbatch %d%s%s needs one full backward "
                                   "or one B and one W (has BW %d, B %d, W %d)",
                                   ir->schedule, s, mb, kb, kk, c[CK_BW],
                                   c[CK_B], c[CK_W]);
                } else {
                    int back = c[CK_BW] ? p[CK_BW] : p[CK_B];
                    const char *bad = NULL;
                    if (back < p[CK_F]) bad = "backward before F";
                    else if (c[CK_R] && (p[CK_R] < p[CK_F] || p[CK_R] > back))
                        bad = "recompute outside F..backward";
                    else if (c[CK_W] && p[CK_W] < p[CK_B]) bad = "W before B";
                    if (bad)
                        rc = util_errf(e, UTIL_EXIT_FAIL, "schedule %s: stage "
                                       "%d microbatch %d%s%s: %s",
                                       ir->schedule, s, mb, kb, kk, bad);
                }
            }
    (void)b2;
    free(cnt);
    free(pos);
    free(where);
    return rc;
}

/* Appends to a fixed buffer, truncating quietly. */
static void app(char *buf, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(buf);
    if (len + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

/* Dry run: streams serial in list order, receives done with their send. */
static int dry_run(const sim_ir *ir, util_err *e)
{
    int n = ir->n_tasks, NS = SIM_STREAM_COUNT;
    int *unmet = util_malloc(sizeof(int) * (size_t)(n + 1));
    int *nxt = util_malloc(sizeof(int) * (size_t)(n + 1));
    int *head = util_malloc(sizeof(int) * (size_t)(ir->n_devices * NS));
    int *last = util_malloc(sizeof(int) * (size_t)(ir->n_devices * NS));
    char *done = util_calloc((size_t)n + 1, 1);
    int *stack = util_malloc(sizeof(int) * (size_t)(n + 1));
    int sp = 0, ndone = 0;
    for (int i = 0; i < ir->n_devices * NS; i++) head[i] = last[i] = -1;
    for (int i = 0; i < n; i++) {
        unmet[i] = ir->tasks[i].n_dep;
        nxt[i] = -1;
    }
    for (int d = 0; d < ir->n_devices; d++)
        for (int j = ir->dev_off[d]; j < ir->dev_off[d + 1]; j++) {
            int id = ir->seq[j];
            if (ir->tasks[id].stream == SIM_STREAM_RECV) continue;
            int q = d * NS + ir->tasks[id].stream;
            if (last[q] < 0) head[q] = id;
            else nxt[last[q]] = id;
            last[q] = id;
        }
    for (int q = 0; q < ir->n_devices * NS; q++)
        if (head[q] >= 0 && !unmet[head[q]]) stack[sp++] = head[q];
    for (int i = 0; i < n; i++)
        if (ir->tasks[i].stream == SIM_STREAM_RECV && !unmet[i])
            stack[sp++] = i;
    while (sp) {
        int id = stack[--sp];
        if (done[id]) continue;
        done[id] = 1;
        ndone++;
        const sim_task *t = &ir->tasks[id];
        for (int k = ir->succ_off[id]; k < ir->succ_off[id + 1]; k++) {
            int s = ir->succ[k];
            if (--unmet[s]) continue;
            const sim_task *u = &ir->tasks[s];
            if (u->stream == SIM_STREAM_RECV ||
                head[u->device * NS + u->stream] == s)
                stack[sp++] = s;
        }
        if (t->stream != SIM_STREAM_RECV) {
            int q = t->device * NS + t->stream;
            head[q] = nxt[id];
            if (head[q] >= 0 && !unmet[head[q]]) stack[sp++] = head[q];
        }
    }
    int rc = 0;
    if (ndone < n) {
        char msg[1400] = "";
        app(msg, sizeof msg, "schedule %s deadlocks (%d of %d tasks never "
            "run); stuck:", ir->schedule, n - ndone, n);
        int shown = 0;
        for (int q = 0; q < ir->n_devices * NS && shown < 6; q++) {
            int h = head[q];
            if (h < 0) continue;
            char b[128];
            app(msg, sizeof msg, "\n  %s waits for",
                sim_task_str(ir, h, b, sizeof b));
            int w = 0;
            const sim_task *t = &ir->tasks[h];
            for (int k = 0; k < t->n_dep && w < 2; k++) {
                int dd = ir->deps[t->dep_off + k];
                if (done[dd]) continue;
                app(msg, sizeof msg, "%s %s", w ? "," : "",
                    sim_task_str(ir, dd, b, sizeof b));
                w++;
            }
            shown++;
        }
        rc = util_errf(e, UTIL_EXIT_FAIL, "%s", msg);
    }
    free(unmet); free(nxt); free(head); free(last); free(done); free(stack);
    return rc;
}

int sim_validate(const sim_ir *ir, util_err *e)
{
    UTIL_NEVER(!ir->finished);
    if (check_rules(ir, e)) return -1;
    return dry_run(ir, e);
}

int sim_validate_rules(const sim_ir *ir, util_err *e)
{
    UTIL_NEVER(!ir->finished);
    return check_rules(ir, e);
}
