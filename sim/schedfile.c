/* Schedules from outside, in the text form of PyTorch's pipelining CSV
 * (torch.distributed.pipelining.schedules: _dump_csv writes one rank per
 * line, its actions comma-separated as _Action's repr, "0F0", "1I3",
 * "1W3", "2B1"; an idle slot (None) is an empty field). Both of its forms
 * are read: the compute order, and the runtime's lowered order with every
 * communication action and overlapped pairs. Read into the compute order
 * of data-parallel rank 0 and checked action by action, so every error
 * names the rank and the action: placement, ranges, duplicates, missing
 * work, order within a rank, and a dry run across ranks that finds the
 * rank waiting forever. Communication actions are checked against the
 * transfers the lowering derives, then skipped (why: beside their names
 * below). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

/* The actions PyTorch writes (its _ComputationType), compute first. */
enum {
    A_F, A_I, A_W, A_B, A_N,
    A_SEND_F = A_N, A_RECV_F, A_SEND_B, A_RECV_B, A_WAIT_SEND_F,
    A_WAIT_SEND_B, A_UNSHARD, A_RESHARD, A_REDUCE_GRAD, A_WAIT_REDUCE_GRAD,
    A_KINDS
};

/* Names as _Action writes them; compute actions need a microbatch, the
 * others carry one where PyTorch writes it. Why each of the others is
 * skipped:
 * - SEND_F, RECV_F, SEND_B, RECV_B: the lowering sends a stage's output
 *   when its F ends (its input gradient when its B or I ends), and
 *   receives are pre-posted, so where PyTorch puts them in a rank's list
 *   changes no time here (checked: the transfer exists);
 * - WAIT_SEND_F, WAIT_SEND_B: wait for a send whose receive is posted
 *   (PyTorch puts them after the backward that proves the peer has it);
 *   a send never holds the compute stream here;
 * - UNSHARD, RESHARD: FSDP gathers and frees a stage's sharded weights;
 *   weights are resident in this model;
 * - REDUCE_GRAD, WAIT_REDUCE_GRAD: the data-parallel all-reduce (--dp)
 *   starts after the stage's last backward, where PyTorch puts
 *   REDUCE_GRAD (checked), and the optimizer step waits for it. */
static const struct akind {
    const char *name;
    int mb;             /* 1: a microbatch follows; 0: optional */
} kinds[A_KINDS] = {
    {"F", 1}, {"I", 1}, {"W", 1}, {"B", 1}, {"SEND_F", 1}, {"RECV_F", 1},
    {"SEND_B", 1}, {"RECV_B", 1}, {"WAIT_SEND_F", 1}, {"WAIT_SEND_B", 1},
    {"UNSHARD", 0}, {"RESHARD", 0}, {"REDUCE_GRAD", 0},
    {"WAIT_REDUCE_GRAD", 0},
};

typedef struct act {
    int stage, kind, mb, line, field;   /* mb -1: none */
} act;

static void act_str(const act *a, char *b, size_t n)
{
    if (a->mb < 0) snprintf(b, n, "%d%s", a->stage, kinds[a->kind].name);
    else snprintf(b, n, "%d%s%d", a->stage, kinds[a->kind].name, a->mb);
}

/* Parses one action, STAGE NAME [MICROBATCH], at *p and moves past it;
 * 0 or -1. */
static int parse_one(const char **p, act *a)
{
    const char *s = *p;
    while (isspace((unsigned char)*s)) s++;
    if (!isdigit((unsigned char)*s)) return -1;
    long st = strtol(s, (char **)&s, 10);
    size_t len = 0;
    while (isupper((unsigned char)s[len]) || s[len] == '_') len++;
    int k = A_KINDS;
    for (int i = 0; i < A_KINDS; i++)
        if (strlen(kinds[i].name) == len && !strncmp(s, kinds[i].name, len))
            k = i;
    if (k == A_KINDS) return -1;
    s += len;
    long mb = -1;
    if (isdigit((unsigned char)*s)) mb = strtol(s, (char **)&s, 10);
    else if (kinds[k].mb) return -1;
    while (isspace((unsigned char)*s)) s++;
    if (st > 1 << 20 || mb > 1 << 24) return -1;
    a->stage = (int)st;
    a->kind = k;
    a->mb = (int)mb;
    *p = s;
    return 0;
}

enum { MAX_PAIR = 8 };

/* Parses one field into out[] (an overlapped pair gives each of its
 * actions, in order); returns how many, 0 for an idle slot, -1 when it
 * is not an action (*why says what was expected). */
static int parse_field(const char *s, act *out, const char **why)
{
    *why = "expected STAGE F|I|W|B MICROBATCH, e.g. 0F0, a communication "
           "action (0SEND_F0, 1RECV_B2, 0WAIT_SEND_F0, 0UNSHARD, "
           "0REDUCE_GRAD, ...) or an overlapped pair (0F7;7B3)OVERLAP_F_B";
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') { s++; n -= 2; }
    if (!n) return 0;
    char buf[256];
    if (n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    const char *p = buf;
    if (*p != '(') {
        if (parse_one(&p, &out[0]) || *p) return -1;
        return 1;
    }
    /* (A;B;...)OVERLAP_F_B: actions PyTorch's runtime runs together (to
     * hide communication); here one after the other, in order */
    char *close = strchr(buf, ')');
    if (!close || strcmp(close + 1, "OVERLAP_F_B")) return -1;
    *close = 0;
    int k = 0;
    for (p = buf + 1;;) {
        if (k == MAX_PAIR) {
            *why = "an overlapped group holds at most 8 actions";
            return -1;
        }
        if (parse_one(&p, &out[k])) return -1;
        if (out[k++].kind >= A_N) {
            *why = "an OVERLAP_F_B group holds compute actions only (F, I, "
                   "W, B)";
            return -1;
        }
        if (!*p) break;
        if (*p++ != ';') return -1;
    }
    return k;
}

/* Whether stage s has a transfer of this kind to or from another rank:
 * outputs read by a later stage (SEND_F, RECV_B), inputs from an earlier
 * one (RECV_F, SEND_B). */
static int has_transfer(const sim_ir *ir, const sim_costs *c, int S, int s,
                        int kind)
{
    int out = kind == A_SEND_F || kind == A_RECV_B;
    for (int t = 0; t < S; t++) {
        double by = out ? c->xfer_bytes[(size_t)s * c->n_stages + t]
                        : c->xfer_bytes[(size_t)t * c->n_stages + s];
        if (t != s && by > 0 && ir->stage_device[t] != ir->stage_device[s])
            return 1;
    }
    return 0;
}

/* What the reader knows while it checks actions. */
typedef struct rd {
    const char *path;
    const sim_ir *ir;
    const sim_costs *c;
    const char *sched;
    int S, M;
    int *seen;      /* [stage][mb][compute kind]: times read */
    int *nback;     /* per stage: microbatches whose last backward was read */
} rd;

/* Checks an action read on a rank; 0, or -1 with e filled. */
static int check_act(rd *x, const act *a, int rank, util_err *e)
{
    char b[64];
    act_str(a, b, sizeof b);
    if (a->stage >= x->S || a->mb >= x->M)
        return util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, action '%s': "
                         "stage must be below %d and microbatch below %d",
                         x->path, a->line, rank, b, x->S, x->M);
    if (x->ir->stage_device[a->stage] != rank)
        return util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, action '%s': "
                         "stage %d runs on rank %d with schedule %s's "
                         "mapping", x->path, a->line, rank, b, a->stage,
                         x->ir->stage_device[a->stage], x->sched);
    const char *bad = NULL;
    if (a->kind >= A_N) {
        static const char *const none[] = {
            [A_SEND_F - A_N] = "sends its outputs to",
            [A_RECV_F - A_N] = "receives its inputs from",
            [A_SEND_B - A_N] = "sends input gradients to",
            [A_RECV_B - A_N] = "receives output gradients from"};
        if (a->kind <= A_RECV_B &&
            !has_transfer(x->ir, x->c, x->S, a->stage, a->kind))
            return util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, action "
                             "'%s' matches no transfer: stage %d %s no "
                             "stage on another rank", x->path, a->line, rank,
                             b, a->stage, none[a->kind - A_N]);
        if (a->kind == A_REDUCE_GRAD && x->nback[a->stage] < x->M)
            return util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, action "
                             "'%s' comes before stage %d's last backward "
                             "(the all-reduce starts after it)", x->path,
                             a->line, rank, b, a->stage);
        return 0;
    }
    int *sn = &x->seen[((size_t)a->stage * x->M + a->mb) * A_N];
    if (sn[a->kind]++)
        return util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, action '%s' "
                         "appears twice", x->path, a->line, rank, b);
    if (a->kind != A_F && !sn[A_F])
        bad = "comes before the microbatch's F";
    else if (a->kind == A_W && !sn[A_I])
        bad = "comes before its I (W needs the input gradient first)";
    else if ((a->kind == A_I || a->kind == A_W) && sn[A_B])
        bad = "but the microbatch already has a full backward B";
    else if (a->kind == A_B && sn[A_I])
        bad = "but the microbatch's backward is split into I and W";
    if (bad)
        return util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, action '%s' %s",
                         x->path, a->line, rank, b, bad);
    if (a->kind == A_B || a->kind == A_W) x->nback[a->stage]++;
    return 0;
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
    int *nback = util_calloc((size_t)S, sizeof(int));
    rd x = {path, ir, c, sim_sched_name(o->sched), S, M, seen, nback};
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
            act pair[MAX_PAIR];
            const char *why;
            int k = parse_field(q, pair, &why);
            field++;
            if (k < 0)
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s:%d: rank %d, action %d "
                               "'%s': %s", path, line, rank, field, q, why);
            for (int i = 0; i < k && !rc; i++) {
                pair[i].line = line;
                pair[i].field = field;
                rc = check_act(&x, &pair[i], rank, e);
                if (rc || pair[i].kind >= A_N) continue;
                if (n == capa)
                    acts = util_realloc(acts, sizeof(act) *
                                        (size_t)(capa *= 2));
                acts[n++] = pair[i];
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
    free(nback);
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
