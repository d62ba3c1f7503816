/* Schedules from outside, in the text form of PyTorch's pipelining CSV
 * (torch.distributed.pipelining.schedules: _dump_csv writes one rank per
 * line, its actions comma-separated as _Action's repr, "0F0", "1I3",
 * "1W3", "2B1"; an idle slot (None) is an empty field). Read into the
 * compute order of data-parallel rank 0 and checked action by action, so
 * every error names the rank and the action: placement, ranges,
 * duplicates, missing work, order within a rank, and a dry run across
 * ranks that finds the rank waiting forever. Communication actions and
 * UNSHARD/RESHARD are derived by the lowering, so they are skipped. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

enum { A_F, A_I, A_W, A_B, A_N };
static const char act_ch[A_N] = {'F', 'I', 'W', 'B'};

typedef struct act {
    int stage, kind, mb, line, field;
} act;

static void act_str(const act *a, char *b, size_t n)
{
    snprintf(b, n, "%d%c%d", a->stage, act_ch[a->kind], a->mb);
}

/* Parses one field; 1: a compute action, 0: skipped, -1: bad. */
static int parse_field(const char *s, act *a)
{
    while (isspace((unsigned char)*s)) s++;
    if (!*s) return 0;
    if (!isdigit((unsigned char)*s)) return -1;
    long st = strtol(s, (char **)&s, 10);
    static const char *const comm[] = {"UNSHARD", "RESHARD", "SEND_F",
                                       "RECV_F", "SEND_B", "RECV_B", NULL};
    for (int k = 0; comm[k]; k++)
        if (!strncmp(s, comm[k], strlen(comm[k]))) return 0;
    const char *c = strchr("FIWB", *s);
    if (!*s || !c) return -1;
    s++;
    if (!isdigit((unsigned char)*s)) return -1;
    long mb = strtol(s, (char **)&s, 10);
    while (isspace((unsigned char)*s)) s++;
    if (*s || st > 1 << 20 || mb > 1 << 24) return -1;
    a->stage = (int)st;
    a->kind = (int)(c - "FIWB");
    a->mb = (int)mb;
    return 1;
}

sim_ir *sim_schedule_file(const char *path, const sim_sched_opts *o,
                          const sim_costs *c, util_err *e)
{
    char *text = NULL;
    if (util_read_file(path, &text, NULL, e)) {
        util_err_prefix(e, "schedule file");
        return NULL;
    }
    sim_ir *ir = sim_schedule_new(o, c, e);
    if (!ir) { free(text); return NULL; }
    const int P = ir->n_gen_devices, S = ir->n_gen_stages, M = ir->n_mb;
    const int NS = c->n_stages;
    int n = 0, capa = 256;
    act *acts = util_malloc(sizeof(act) * (size_t)capa);
    int *rank_off = util_calloc((size_t)P + 2, sizeof(int));
    int *seen = util_calloc((size_t)S * M * A_N, sizeof(int));
    int rc = 0, rank = 0, line = 1;
    char b[64];
    char *p = text;
    /* one rank per line; a final newline ends the last rank */
    while (!rc && *p) {
        char *eol = strchr(p, '\n');
        if (eol) *eol = 0;
        if (eol && eol > p && eol[-1] == '\r') eol[-1] = 0;
        if (rank >= P) {
            int blank = 1;
            for (char *q = p; *q; q++)
                if (!isspace((unsigned char)*q)) blank = 0;
            if (!blank)
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d: the "
                               "schedule has more ranks than pp %d", path,
                               line, rank, P);
        }
        int field = 0;
        for (char *q = p; !rc && rank < P;) {
            char *comma = strchr(q, ',');
            if (comma) *comma = 0;
            act a = {0};
            a.line = line;
            a.field = ++field;
            int k = parse_field(q, &a);
            if (k < 0) {
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, action %d "
                               "'%s': expected STAGE F|I|W|B MICROBATCH, e.g. "
                               "0F0", path, line, rank, field, q);
            } else if (k > 0) {
                act_str(&a, b, sizeof b);
                if (a.stage >= S || a.mb >= M)
                    rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, action "
                                   "'%s': stage must be below %d and "
                                   "microbatch below %d", path, line, rank, b,
                                   S, M);
                else if (ir->stage_device[a.stage] != rank)
                    rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, action "
                                   "'%s': stage %d runs on rank %d with "
                                   "schedule %s's mapping", path, line, rank,
                                   b, a.stage, ir->stage_device[a.stage],
                                   sim_sched_name(o->sched));
                else if (seen[((size_t)a.stage * M + a.mb) * A_N + a.kind]++)
                    rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, action "
                                   "'%s' appears twice", path, line, rank, b);
                else {
                    int *sn = &seen[((size_t)a.stage * M + a.mb) * A_N];
                    const char *bad = NULL;
                    if (a.kind != A_F && !sn[A_F])
                        bad = "comes before the microbatch's F";
                    else if (a.kind == A_W && !sn[A_I])
                        bad = "comes before its I (W needs the input "
                              "gradient first)";
                    else if ((a.kind == A_I || a.kind == A_W) && sn[A_B])
                        bad = "but the microbatch already has a full "
                              "backward B";
                    else if (a.kind == A_B && sn[A_I])
                        bad = "but the microbatch's backward is split into "
                              "I and W";
                    if (bad)
                        rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, "
                                       "action '%s' %s", path, line, rank, b,
                                       bad);
                }
                if (!rc) {
                    if (n == capa)
                        acts = util_realloc(acts, sizeof(act) *
                                            (size_t)(capa *= 2));
                    acts[n++] = a;
                }
            }
            if (!comma) break;
            q = comma + 1;
        }
        if (rank < P) rank_off[rank + 1] = n;
        rank++;
        line++;
        if (!eol) break;
        p = eol + 1;
    }
    if (!rc && rank == 0)
        rc = util_errf(e, UTIL_EXIT_USAGE, "%s: the schedule file is empty "
                       "(expected a line of actions per rank, e.g. "
                       "0F0,0F1,0B0,0B1)", path);
    else if (!rc && rank < P)
        rc = util_errf(e, UTIL_EXIT_USAGE, "%s: %d rank(s) in the file, pp "
                       "is %d", path, rank, P);
    /* every microbatch's F and backward on every stage */
    for (int s = 0; s < S && !rc; s++)
        for (int mb = 0; mb < M && !rc; mb++) {
            int *sn = &seen[((size_t)s * M + mb) * A_N];
            const char *miss = !sn[A_F] ? "F" : (!sn[A_B] && !sn[A_I]) ? "B"
                             : (sn[A_I] && !sn[A_W]) ? "W" : NULL;
            if (miss)
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s: rank %d never runs "
                               "action '%d%s%d' (stage %d, microbatch %d is "
                               "missing)", path, ir->stage_device[s], s, miss,
                               mb, s, mb);
        }
    /* dry run across ranks: an action runs when what it needs has run */
    if (!rc) {
        int *head = util_calloc((size_t)P, sizeof(int));
        char *done = util_calloc((size_t)S * M * A_N, 1);
        int left = n, moved = 1;
        while (left && moved) {
            moved = 0;
            for (int r = 0; r < P; r++)
                while (rank_off[r] + head[r] < rank_off[r + 1]) {
                    const act *a = &acts[rank_off[r] + head[r]];
                    int ok = 1;
                    for (int t = 0; t < S && ok; t++) {
                        if (t == a->stage) continue;
                        if (a->kind == A_F &&
                            c->xfer_bytes[(size_t)t * NS + a->stage] > 0)
                            ok = done[((size_t)t * M + a->mb) * A_N + A_F];
                        if ((a->kind == A_I || a->kind == A_B) &&
                            c->xfer_bytes[(size_t)a->stage * NS + t] > 0)
                            ok = done[((size_t)t * M + a->mb) * A_N + A_I] ||
                                 done[((size_t)t * M + a->mb) * A_N + A_B];
                    }
                    if (!ok) break;
                    done[((size_t)a->stage * M + a->mb) * A_N + a->kind] = 1;
                    head[r]++;
                    left--;
                    moved = 1;
                }
        }
        for (int r = 0; r < P && left; r++)
            if (rank_off[r] + head[r] < rank_off[r + 1]) {
                const act *a = &acts[rank_off[r] + head[r]];
                act_str(a, b, sizeof b);
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d waits "
                               "forever at action '%s' (action %d of the "
                               "line): what it needs from another stage "
                               "never runs before it (deadlock)", path,
                               a->line, r, b, a->field);
                break;
            }
        free(head);
        free(done);
    }
    if (!rc)
        for (int i = 0; i < n; i++) {
            const act *a = &acts[i];
            if ((a->kind == A_I || a->kind == A_B) && o->recompute)
                sim_ir_compute(ir, SIM_RECOMP, a->stage, a->mb, 0, 0);
            sim_kind k = a->kind == A_F ? SIM_F : a->kind == A_I ? SIM_B
                       : a->kind == A_W ? SIM_W : SIM_BW;
            sim_ir_compute(ir, k, a->stage, a->mb, 0, 0);
        }
    free(acts);
    free(rank_off);
    free(seen);
    free(text);
    if (!rc) rc = sim_schedule_finish(ir, c, e);
    if (rc) {
        sim_ir_free(ir);
        return NULL;
    }
    snprintf(ir->schedule, sizeof ir->schedule, "file");
    return ir;
}

void sim_schedule_emit(const sim_ir *ir, FILE *f)
{
    int P = ir->n_gen_devices ? ir->n_gen_devices : ir->n_devices;
    int S = ir->n_gen_stages ? ir->n_gen_stages : ir->n_stages;
    for (int d = 0; d < P; d++) {
        int first = 1;
        const int *lst = ir->finished ? ir->seq + ir->dev_off[d] : ir->dlist[d];
        int len = ir->finished ? ir->dev_off[d + 1] - ir->dev_off[d]
                               : ir->dlen[d];
        for (int j = 0; j < len; j++) {
            const sim_task *t = &ir->tasks[lst[j]];
            if (t->stream != SIM_STREAM_COMPUTE || t->stage >= S ||
                t->minibatch != 0)
                continue;
            char k = t->kind == SIM_F ? 'F' : t->kind == SIM_B ? 'I'
                   : t->kind == SIM_W ? 'W' : t->kind == SIM_BW ? 'B' : 0;
            if (!k) continue;
            fprintf(f, "%s%d%c%d", first ? "" : ",", t->stage, k, t->mb);
            first = 0;
        }
        fprintf(f, "\n");
    }
}
