/* The shard scheduler of many-model training: an event loop over GPUs,
 * each with a compute stream and two copy streams (PCIe is full duplex),
 * two slots of shard state (double buffering) and a one-deep lookahead.
 * Events are ordered by time, then by sequence number: deterministic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/workload.h"

const char *plan_wl_policy_name(plan_wl_policy p)
{
    static const char *n[] = {"sharded-lrtf", "random", "round-robin",
                              "script"};
    return p < PLAN_WL_POLICY_COUNT ? n[p] : "?";
}

typedef enum { EV_START, EV_END, EV_IN, EV_OUT } ev_kind;

typedef struct ev {
    int64_t t;
    long seq;
    ev_kind kind;             /* a reserved step starts computing, the
                               * current one ends, a load or a write-back
                               * is done */
    int gpu;
} ev;

typedef struct heap {
    ev *a;
    int n, cap;
} heap;

static int ev_less(const ev *x, const ev *y)
{
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static void heap_push(heap *h, ev v)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 64;
        h->a = util_realloc(h->a, sizeof(ev) * (size_t)h->cap);
    }
    int i = h->n++;
    while (i > 0 && ev_less(&v, &h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = v;
}

static ev heap_pop(heap *h)
{
    ev top = h->a[0], last = h->a[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && ev_less(&h->a[c + 1], &h->a[c])) c++;
        if (!ev_less(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n) h->a[i] = last;
    return top;
}

/* A copy moving bytes on its share of the links (net): left bytes at
 * t0, moving at rate, the last one at fin. */
typedef struct xfer {
    int gpu, dir, grp;
    double left, rate;        /* bytes at t0; bytes per ns */
    int64_t t0, fin;
} xfer;

typedef struct evq {          /* a write-back waiting for the stream */
    int job;
    double bytes;
    int64_t ns;
} evq;

typedef struct gstate {
    int cur, nxt;             /* jobs: computing, reserved next; -1 */
    const plan_wl_step *cur_step, *nxt_step;
    int64_t cur_ns;
    /* the load of nxt: 0 none, 1 waiting, 2 moving, 3 done */
    int ld;
    int ld_after;             /* waits for the current step's end */
    int ld_stays;             /* the shard is here already: no copy */
    long ld_evicts;           /* waits for this many write-backs done */
    int start_queued;
    xfer in, out;
    evq q[4];                 /* write-backs in order; q[0] moving */
    int nq;
    long evicts_queued, evicts_done;
    int idle;
    int last_seg;
    int cp_open[2];           /* record: the copy moving on each stream */
} gstate;

typedef struct jstate {
    long next, total;         /* steps started, steps in all */
    int held;                 /* GPU computing or holding it next; -1 */
    int wb_gpu;               /* the GPU writing its steps back; -1 */
    int wb_n;                 /* write-backs not yet done */
    int64_t remaining_ns;     /* compute of the steps not yet started */
    int done;
} jstate;

typedef struct loop {
    const plan_wl_sjob *jobs;
    int n, ng;
    const plan_wl_sched_opts *o;
    const plan_wl_net *net;
    plan_wl_run *r;
    gstate *g;
    jstate *j;
    heap h;
    long seq;
    int rr;                   /* round robin: the next job index to favour */
    unsigned rng;
    double host;
    int *cand;
    /* net: the copies moving; copies in different groups share no
     * link, so one starting or ending rerates its group alone */
    int *grp;                 /* [2 * ng]: dir * ng + gpu */
    uint8_t *dirty;           /* [2 * ng] groups to rerate */
    int *dlist, rerate;       /* those groups, rerate of them */
    xfer **act;               /* the copies moving */
    int n_act;
    const int **fr;
    int *fl;
    double *frate;
    xfer **fx;
    sim_maxmin_scratch mm;
} loop;

static const plan_wl_step *step_of(const loop *L, int j, long s)
{
    const plan_wl_sjob *b = &L->jobs[j];
    return &b->step[s % b->n_steps];
}

/* The job GPU gi runs next at this moment, or -1. */
static int pick(loop *L, int gi)
{
    int nc = 0;
    for (int j = 0; j < L->n; j++) {
        const jstate *s = &L->j[j];
        if (s->done || s->next >= s->total) continue;
        if (s->held == -1 || (s->held == gi && L->g[gi].cur == j))
            L->cand[nc++] = j;
    }
    if (!nc) return -1;
    /* Priority first: only the highest priority's jobs are candidates. */
    int top = L->jobs[L->cand[0]].priority, m = 0;
    for (int i = 1; i < nc; i++)
        if (L->jobs[L->cand[i]].priority > top) top = L->jobs[L->cand[i]].priority;
    for (int i = 0; i < nc; i++)
        if (L->jobs[L->cand[i]].priority == top) L->cand[m++] = L->cand[i];
    nc = m;
    long d = L->r->decisions++;
    if (L->o->branch && d < L->o->max_branch) L->o->branch[d] = nc;
    switch (L->o->policy) {
    case PLAN_WL_LRTF: {
        /* ties: the job already here (no swap), then the lower index */
        int best = L->cand[0];
        for (int i = 1; i < nc; i++) {
            int c = L->cand[i];
            int64_t rc = L->j[c].remaining_ns, rb = L->j[best].remaining_ns;
            if (rc > rb || (rc == rb && c == L->g[gi].cur)) best = c;
        }
        return best;
    }
    case PLAN_WL_RANDOM:
        L->rng ^= L->rng << 13;
        L->rng ^= L->rng >> 17;
        L->rng ^= L->rng << 5;
        return L->cand[L->rng % (unsigned)nc];
    case PLAN_WL_RR: {
        int best = -1;
        for (int i = 0; i < nc && best < 0; i++)
            if (L->cand[i] >= L->rr) best = L->cand[i];
        if (best < 0) best = L->cand[0];
        L->rr = best + 1 >= L->n ? 0 : best + 1;
        return best;
    }
    case PLAN_WL_SCRIPT: {
        int k = d < L->o->n_script ? L->o->script[d] : 0;
        return L->cand[k < nc ? k : nc - 1];
    }
    default:
        break;
    }
    util_never_(__FILE__, __LINE__, "workload policy");
}

static void push(loop *L, int64_t t, ev_kind k, int gpu)
{
    ev v = {t, L->seq++, k, gpu};
    heap_push(&L->h, v);
}

/* Whether job j's step `step` ends a minibatch that the host steps
 * (clipping). */
static int host_steps(const loop *L, int j, long step)
{
    const plan_wl_sjob *J = &L->jobs[j];
    return J->host_step_ns > 0 && (step + 1) % J->n_steps == 0;
}

/* ---- copies ---- */

/* record: a copy of job j's shard starts on GPU gi's stream dir */
static void cp_begin(loop *L, int gi, int dir, int j, double bytes,
                     int64_t now)
{
    plan_wl_run *r = L->r;
    if (!L->o->record) return;
    if (r->n_cp == r->cap_cp) {
        r->cap_cp = r->cap_cp ? 2 * r->cap_cp : 256;
        r->cp = util_realloc(r->cp, sizeof *r->cp * (size_t)r->cap_cp);
    }
    r->cp[r->n_cp] = (plan_wl_copy){gi, dir, j, now, now, bytes};
    L->g[gi].cp_open[dir] = r->n_cp++;
}

static void cp_end(loop *L, int gi, int dir, int64_t now)
{
    int k = L->g[gi].cp_open[dir];
    if (!L->o->record || k < 0) return;
    L->r->cp[k].end_ns = now;
    L->g[gi].cp_open[dir] = -1;
}

static void mark(loop *L, int grp)
{
    if (!L->dirty[grp]) L->dlist[L->rerate++] = grp;
    L->dirty[grp] = 1;
}

/* Starts a copy of `bytes` (fixed: ns) on GPU gi's stream dir; its end
 * comes as EV_IN or EV_OUT. */
static void xfer_start(loop *L, int gi, int dir, double bytes, int64_t ns,
                       int64_t now)
{
    xfer *x = dir ? &L->g[gi].out : &L->g[gi].in;
    if (!L->net || !(bytes > 0) || !L->net->len[dir][gi]) {
        push(L, now + (L->net ? (int64_t)llround(L->net->lat_ns[dir][gi])
                              : ns), dir ? EV_OUT : EV_IN, gi);
        return;
    }
    x->gpu = gi;
    x->dir = dir;
    x->grp = L->grp[dir * L->ng + gi];
    x->left = bytes;
    x->rate = 0;
    x->t0 = now;
    x->fin = INT64_MAX;
    L->act[L->n_act++] = x;
    mark(L, x->grp);
    for (int k = 0; k < L->net->len[dir][gi]; k++)
        L->r->link_bytes[L->net->route[dir][gi][k]] += bytes;
}

/* Max-min rates, at `now`, of the copies in the groups that changed, and
 * when each would end. */
static void net_rerate(loop *L, int64_t now)
{
    for (int q = 0; q < L->rerate; q++) {
        int gr = L->dlist[q];
        L->dirty[gr] = 0;
        int nf = 0;
        for (int i = 0; i < L->n_act; i++) {
            xfer *x = L->act[i];
            if (x->grp != gr) continue;
            x->left -= x->rate * (double)(now - x->t0);
            x->t0 = now;
            L->fr[nf] = L->net->route[x->dir][x->gpu];
            L->fl[nf] = L->net->len[x->dir][x->gpu];
            L->fx[nf++] = x;
        }
        if (!nf) continue;
        sim_maxmin(nf, L->fr, L->fl, L->net->cap, L->frate, &L->mm);
        for (int f = 0; f < nf; f++) {
            xfer *x = L->fx[f];
            x->rate = L->frate[f];
            double left = x->left > 0 ? x->left : 0;
            x->fin = x->rate > 0 ? now + (int64_t)ceil(left / x->rate)
                                 : INT64_MAX;
        }
    }
    L->rerate = 0;
}

/* The earliest end of a copy's bytes. */
static int64_t net_next(const loop *L)
{
    int64_t t = INT64_MAX;
    for (int i = 0; i < L->n_act; i++)
        if (L->act[i]->fin < t) t = L->act[i]->fin;
    return t;
}

/* The copies whose bytes are all moved by t: their latency follows. */
static void net_finish(loop *L, int64_t t)
{
    for (int i = 0; i < L->n_act;) {
        xfer *x = L->act[i];
        if (x->fin > t) { i++; continue; }
        L->act[i] = L->act[--L->n_act];
        mark(L, x->grp);
        push(L, t + (int64_t)llround(L->net->lat_ns[x->dir][x->gpu]),
             x->dir ? EV_OUT : EV_IN, x->gpu);
    }
}

/* Groups of GPU streams whose routes share a directed link (union-find
 * over the links). */
static void net_groups(loop *L)
{
    int ng = L->ng, m = 2 * ng;
    int *owner = util_malloc(sizeof(int) * (size_t)(L->net->n_dl ? L->net->n_dl : 1));
    for (int i = 0; i < L->net->n_dl; i++) owner[i] = -1;
    for (int i = 0; i < m; i++) L->grp[i] = i;
    for (int i = 0; i < m; i++) {
        int d = i / ng, g = i % ng;
        for (int k = 0; k < L->net->len[d][g]; k++) {
            int dl = L->net->route[d][g][k];
            if (owner[dl] < 0) { owner[dl] = i; continue; }
            int a = owner[dl], b = i;
            while (L->grp[a] != a) a = L->grp[a];
            while (L->grp[b] != b) b = L->grp[b];
            if (a != b) L->grp[a > b ? a : b] = a < b ? a : b;
        }
    }
    for (int i = 0; i < m; i++) {
        int r = i;
        while (L->grp[r] != r) r = L->grp[r];
        L->grp[i] = r;
    }
    free(owner);
}

/* ---- steps ---- */

/* GPU gi's reserved step starts once its load is done, the GPU is free
 * and the job's write-back from another GPU is done. */
static void try_start(loop *L, int gi, int64_t now)
{
    gstate *g = &L->g[gi];
    if (g->cur >= 0 || g->nxt < 0 || g->ld != 3 || g->start_queued) return;
    const jstate *s = &L->j[g->nxt];
    if (s->wb_gpu >= 0 && s->wb_gpu != gi) return;
    g->start_queued = 1;
    push(L, now, EV_START, gi);
}

/* GPU gi's load starts once the step before the current one is written
 * back (its slot is free) and, when the shard must load again after the
 * host's step, once the current step is done. */
static void try_load(loop *L, int gi, int64_t now)
{
    gstate *g = &L->g[gi];
    if (g->ld != 1 || g->evicts_done < g->ld_evicts ||
        (g->ld_after && g->cur >= 0))
        return;
    const plan_wl_step *st = g->nxt_step;
    if (g->ld_stays) {
        g->ld = 3;
        try_start(L, gi, now);
        return;
    }
    g->ld = 2;
    L->r->pcie_bytes += st->load_bytes;
    cp_begin(L, gi, 0, g->nxt, st->load_bytes, now);
    xfer_start(L, gi, 0, st->load_bytes, st->load_ns, now);
}

/* GPU gi reserves job j's next step and loads it when it can. */
static void reserve(loop *L, int gi, int j, int64_t now)
{
    gstate *g = &L->g[gi];
    jstate *s = &L->j[j];
    s->held = gi;
    g->nxt = j;
    g->nxt_step = step_of(L, j, s->next);
    /* after the host's step the copy here is stale: it loads again once
     * that is done */
    g->ld_after = g->cur == j && g->cur_step && host_steps(L, j, s->next - 1);
    /* the same shard again on this GPU stays where it is */
    g->ld_stays = g->cur == j && g->cur_step &&
                  g->cur_step->shard == g->nxt_step->shard && !g->ld_after;
    g->ld_evicts = g->evicts_queued;
    g->ld = 1;
    try_load(L, gi, now);
}

static void dispatch(loop *L, int gi, int64_t now)
{
    gstate *g = &L->g[gi];
    int j = pick(L, gi);
    if (j < 0) return;
    g->idle = 0;
    reserve(L, gi, j, now);
}

static void start(loop *L, int gi, int64_t now)
{
    gstate *g = &L->g[gi];
    g->start_queued = 0;
    int j = g->nxt;
    jstate *s = &L->j[j];
    g->cur = j;
    g->cur_step = g->nxt_step;
    /* the host's step under clipping runs on the device's thread, as
     * sluice exec runs it */
    g->cur_ns = g->cur_step->compute_ns +
                (host_steps(L, j, s->next) ? L->jobs[j].host_step_ns : 0);
    g->nxt = -1;
    g->nxt_step = NULL;
    g->ld = 0;
    s->next++;
    s->remaining_ns -= g->cur_step->compute_ns;
    push(L, now + g->cur_ns, EV_END, gi);
    plan_wl_run *r = L->r;
    if (L->o->record) {
        plan_wl_seg *ls = g->last_seg >= 0 ? &r->seg[g->last_seg] : NULL;
        if (ls && ls->job == j) {
            ls->end_ns = now + g->cur_ns;
            ls->steps++;
        } else {
            if (r->n_seg == r->cap_seg) {
                r->cap_seg = r->cap_seg ? 2 * r->cap_seg : 256;
                r->seg = util_realloc(r->seg, sizeof *r->seg * (size_t)r->cap_seg);
            }
            plan_wl_seg sg = {gi, j, now, now + g->cur_ns, 1};
            g->last_seg = r->n_seg;
            r->seg[r->n_seg++] = sg;
        }
    }
    int k = pick(L, gi);
    if (k >= 0) reserve(L, gi, k, now);
}

/* The head of GPU gi's write-backs moves when the stream is free. */
static void evict_next(loop *L, int gi, int64_t now)
{
    gstate *g = &L->g[gi];
    if (!g->nq) return;
    L->r->pcie_bytes += g->q[0].bytes;
    cp_begin(L, gi, 1, g->q[0].job, g->q[0].bytes, now);
    xfer_start(L, gi, 1, g->q[0].bytes, g->q[0].ns, now);
}

static void end(loop *L, int gi, int64_t now)
{
    gstate *g = &L->g[gi];
    int j = g->cur;
    jstate *s = &L->j[j];
    const plan_wl_step *st = g->cur_step;
    L->r->busy_ns[gi] += g->cur_ns;
    /* after the host's step the shard here is stale: it goes */
    int stays = g->nxt == j && g->nxt_step->shard == st->shard &&
                !host_steps(L, j, s->next - 1);
    g->evicts_queued++;
    if (stays) {
        g->evicts_done++;
    } else {
        if (UTIL_NEVER(g->nq == 4)) return;
        g->q[g->nq++] = (evq){j, st->evict_bytes, st->evict_ns};
        s->wb_gpu = gi;
        s->wb_n++;
        if (g->nq == 1) evict_next(L, gi, now);
    }
    /* Boundary activations are counted on the host from the step's end. */
    L->host += st->host_delta_bytes;
    if (L->host > L->r->host_peak_bytes) L->r->host_peak_bytes = L->host;
    int released = 0;
    if (s->next >= s->total) {
        s->done = 1;
        s->held = -1;
        if (stays && now > L->r->makespan_ns) L->r->makespan_ns = now;
    } else if (g->nxt != j) {
        s->held = -1;
        released = 1;
    }
    g->cur = -1;
    g->cur_step = NULL;
    if (g->nxt >= 0) {
        try_load(L, gi, now);
        try_start(L, gi, now);
    } else {
        g->idle = 1;
        dispatch(L, gi, now);
    }
    for (int h = 0; released && h < L->ng; h++)
        if (L->g[h].idle) dispatch(L, h, now);
}

static void load_done(loop *L, int gi, int64_t now)
{
    cp_end(L, gi, 0, now);
    L->g[gi].ld = 3;
    try_start(L, gi, now);
}

static void evict_done(loop *L, int gi, int64_t now)
{
    gstate *g = &L->g[gi];
    int j = g->q[0].job;
    cp_end(L, gi, 1, now);
    memmove(g->q, g->q + 1, sizeof *g->q * (size_t)--g->nq);
    g->evicts_done++;
    jstate *s = &L->j[j];
    if (!--s->wb_n) s->wb_gpu = -1;
    if (s->done && now > L->r->makespan_ns) L->r->makespan_ns = now;
    evict_next(L, gi, now);
    try_load(L, gi, now);
    for (int h = 0; h < L->ng; h++)
        if (L->g[h].nxt == j) try_start(L, h, now);
}

void plan_wl_schedule(const plan_wl_sjob *jobs, int n, int n_gpus,
                      const plan_wl_sched_opts *o, plan_wl_run *r)
{
    memset(r, 0, sizeof *r);
    r->n_gpus = n_gpus;
    r->busy_ns = util_calloc((size_t)n_gpus, sizeof(int64_t));
    loop L = {0};
    L.jobs = jobs;
    L.n = n;
    L.ng = n_gpus;
    L.o = o;
    L.r = r;
    L.net = o->net && o->net->n_gpus >= n_gpus ? o->net : NULL;
    L.rng = o->seed ? o->seed : 1;
    L.g = util_calloc((size_t)n_gpus, sizeof(gstate));
    L.j = util_calloc((size_t)(n ? n : 1), sizeof(jstate));
    L.cand = util_malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (L.net) {
        size_t nf = 2 * (size_t)n_gpus, nd = (size_t)L.net->n_dl;
        r->n_dl = L.net->n_dl;
        r->link_bytes = util_calloc(nd + 1, sizeof(double));
        L.grp = util_calloc(nf, sizeof *L.grp);
        L.dirty = util_calloc(nf, 1);
        L.dlist = util_calloc(nf, sizeof *L.dlist);
        L.act = util_calloc(nf, sizeof *L.act);
        net_groups(&L);
        L.fr = util_calloc(nf, sizeof *L.fr);
        L.fl = util_calloc(nf, sizeof *L.fl);
        L.frate = util_calloc(nf, sizeof *L.frate);
        L.fx = util_calloc(nf, sizeof *L.fx);
        L.mm.rem = util_calloc(nd, sizeof(double));
        L.mm.cnt = util_calloc(nd, sizeof(int));
        L.mm.touched = util_calloc(nd, sizeof(int));
        L.mm.frozen = util_calloc(nf, 1);
    }
    for (int i = 0; i < n; i++) {
        jstate *s = &L.j[i];
        s->total = jobs[i].minibatches * jobs[i].n_steps;
        s->held = -1;
        s->wb_gpu = -1;
        int64_t mb = 0;
        for (int k = 0; k < jobs[i].n_steps; k++) mb += jobs[i].step[k].compute_ns;
        s->remaining_ns = mb * jobs[i].minibatches;
        s->done = s->total == 0;
        L.host += jobs[i].host_bytes;
    }
    r->host_peak_bytes = L.host;
    for (int gi = 0; gi < n_gpus; gi++) {
        L.g[gi].cur = L.g[gi].nxt = -1;
        L.g[gi].idle = 1;
        L.g[gi].last_seg = -1;
        L.g[gi].cp_open[0] = L.g[gi].cp_open[1] = -1;
    }
    for (int gi = 0; gi < n_gpus; gi++)
        if (L.g[gi].idle) dispatch(&L, gi, 0);
    int64_t now = 0;
    for (;;) {
        if (L.rerate) net_rerate(&L, now);
        int64_t tf = net_next(&L);
        int64_t th = L.h.n ? L.h.a[0].t : INT64_MAX;
        if (tf == INT64_MAX && th == INT64_MAX) break;
        if (tf < th) {
            net_finish(&L, now = tf);
            continue;
        }
        ev v = heap_pop(&L.h);
        now = v.t;
        switch (v.kind) {
        case EV_START: start(&L, v.gpu, v.t); break;
        case EV_END: end(&L, v.gpu, v.t); break;
        case EV_IN: load_done(&L, v.gpu, v.t); break;
        case EV_OUT: evict_done(&L, v.gpu, v.t); break;
        }
    }
    for (int i = 0; i < n; i++)
        if (UTIL_NEVER(!L.j[i].done)) break;
    free(L.h.a);
    free(L.g);
    free(L.j);
    free(L.cand);
    free(L.grp);
    free(L.dirty);
    free(L.dlist);
    free(L.act);
    free(L.fr);
    free(L.fl);
    free(L.frate);
    free(L.fx);
    free(L.mm.rem);
    free(L.mm.cnt);
    free(L.mm.touched);
    free(L.mm.frozen);
}

int plan_wl_busiest_link(const plan_wl_run *r, const plan_wl_net *n,
                         double *busy)
{
    int best = -1;
    *busy = 0;
    if (!r->link_bytes || !n || r->n_dl != n->n_dl || r->makespan_ns <= 0)
        return -1;
    for (int dl = 0; dl < r->n_dl; dl++) {
        double b = n->cap[dl] > 0
                 ? r->link_bytes[dl] / (n->cap[dl] * (double)r->makespan_ns)
                 : 0;
        if (b > *busy) *busy = b, best = dl;
    }
    return best;
}

void plan_wl_run_free(plan_wl_run *r)
{
    if (!r) return;
    free(r->link_bytes);
    free(r->busy_ns);
    free(r->seg);
    free(r->cp);
    memset(r, 0, sizeof *r);
}
