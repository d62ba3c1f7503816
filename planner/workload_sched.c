/* The shard scheduler of many-model training: an event loop over GPUs,
 * each with a compute stream and two copy streams (PCIe is full duplex),
 * two slots of shard state (double buffering) and a one-deep lookahead.
 * Events are ordered by time, then by sequence number: deterministic. */
#include <stdlib.h>
#include <string.h>

#include "planner/workload.h"

const char *plan_wl_policy_name(plan_wl_policy p)
{
    static const char *n[] = {"sharded-lrtf", "random", "round-robin",
                              "script"};
    return p < PLAN_WL_POLICY_COUNT ? n[p] : "?";
}

typedef struct ev {
    int64_t t;
    long seq;
    int start;                /* 1: a reserved step starts computing */
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

typedef struct gstate {
    int cur, nxt;             /* jobs: computing, reserved next; -1 */
    const plan_wl_step *cur_step, *nxt_step;
    int64_t cur_start, cur_ns, nxt_load_end;
    int64_t copy_in_free, copy_out_free;
    int64_t slot_free;        /* write-back of the step before the current
                               * one done: its slot takes the next load */
    int idle;
    int last_seg;
} gstate;

typedef struct jstate {
    long next, total;         /* steps started, steps in all */
    int held;                 /* GPU computing or holding it next; -1 */
    int64_t ready;            /* its last step's output back on the host */
    int64_t remaining_ns;     /* compute of the steps not yet started */
    int done;
} jstate;

typedef struct loop {
    const plan_wl_sjob *jobs;
    int n, ng;
    const plan_wl_sched_opts *o;
    plan_wl_run *r;
    gstate *g;
    jstate *j;
    heap h;
    long seq;
    int rr;                   /* round robin: the next job index to favour */
    unsigned rng;
    double host;
    int *cand;
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

static void push(loop *L, int64_t t, int start, int gpu)
{
    ev v = {t, L->seq++, start, gpu};
    heap_push(&L->h, v);
}

/* Whether job j's step `step` ends a minibatch that the host steps
 * (clipping). */
static int host_steps(const loop *L, int j, long step)
{
    const plan_wl_sjob *J = &L->jobs[j];
    return J->host_step_ns > 0 && (step + 1) % J->n_steps == 0;
}

/* GPU gi reserves job j's next step and starts loading it at `now`. */
static void reserve(loop *L, int gi, int j, int64_t now)
{
    gstate *g = &L->g[gi];
    jstate *s = &L->j[j];
    const plan_wl_step *st = step_of(L, j, s->next);
    s->held = gi;
    g->nxt = j;
    g->nxt_step = st;
    /* the same shard again on this GPU stays where it is, unless the
     * step computing now ends with the host's step of the job: then its
     * copy here is stale, and loads again once that is done */
    int after = g->cur == j && g->cur_step && host_steps(L, j, s->next - 1);
    int stays = g->cur == j && g->cur_step &&
                g->cur_step->shard == st->shard && !after;
    int64_t ls = now;
    if (g->copy_in_free > ls) ls = g->copy_in_free;
    if (g->slot_free > ls) ls = g->slot_free;
    if (after && g->cur_start + g->cur_ns > ls) ls = g->cur_start + g->cur_ns;
    int64_t le = stays ? ls : ls + st->load_ns;
    if (!stays) {
        g->copy_in_free = le;
        L->r->pcie_bytes += st->load_bytes;
    }
    g->nxt_load_end = le;
}

static void dispatch(loop *L, int gi, int64_t now)
{
    gstate *g = &L->g[gi];
    int j = pick(L, gi);
    if (j < 0) return;
    g->idle = 0;
    reserve(L, gi, j, now);
    int64_t t = g->nxt_load_end;
    if (L->j[j].ready > t) t = L->j[j].ready;
    push(L, t, 1, gi);
}

static void start(loop *L, int gi, int64_t now)
{
    gstate *g = &L->g[gi];
    int j = g->nxt;
    jstate *s = &L->j[j];
    g->cur = j;
    g->cur_step = g->nxt_step;
    g->cur_start = now;
    /* the host's step under clipping runs on the device's thread, as
     * sluice exec runs it */
    g->cur_ns = g->cur_step->compute_ns +
                (host_steps(L, j, s->next) ? L->jobs[j].host_step_ns : 0);
    g->nxt = -1;
    g->nxt_step = NULL;
    s->next++;
    s->remaining_ns -= g->cur_step->compute_ns;
    push(L, now + g->cur_ns, 0, gi);
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
    int64_t ee = now;
    if (!stays) {
        ee = (g->copy_out_free > now ? g->copy_out_free : now) + st->evict_ns;
        g->copy_out_free = ee;
        L->r->pcie_bytes += st->evict_bytes;
    }
    g->slot_free = ee;
    /* Boundary activations are counted on the host from the step's end. */
    L->host += st->host_delta_bytes;
    if (L->host > L->r->host_peak_bytes) L->r->host_peak_bytes = L->host;
    s->ready = ee;
    int released = 0;
    if (s->next >= s->total) {
        s->done = 1;
        s->held = -1;
        if (ee > L->r->makespan_ns) L->r->makespan_ns = ee;
    } else if (g->nxt != j) {
        s->held = -1;
        released = 1;
    }
    g->cur = -1;
    g->cur_step = NULL;
    if (g->nxt >= 0) {
        int64_t t = now > g->nxt_load_end ? now : g->nxt_load_end;
        if (g->nxt != j && L->j[g->nxt].ready > t) t = L->j[g->nxt].ready;
        push(L, t, 1, gi);
    } else {
        g->idle = 1;
    }
    if (g->idle) dispatch(L, gi, now);
    for (int h = 0; released && h < L->ng; h++)
        if (L->g[h].idle) dispatch(L, h, now);
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
    L.rng = o->seed ? o->seed : 1;
    L.g = util_calloc((size_t)n_gpus, sizeof(gstate));
    L.j = util_calloc((size_t)(n ? n : 1), sizeof(jstate));
    L.cand = util_malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        jstate *s = &L.j[i];
        s->total = jobs[i].minibatches * jobs[i].n_steps;
        s->held = -1;
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
    }
    for (int gi = 0; gi < n_gpus; gi++)
        if (L.g[gi].idle) dispatch(&L, gi, 0);
    while (L.h.n) {
        ev v = heap_pop(&L.h);
        if (v.start) start(&L, v.gpu, v.t);
        else end(&L, v.gpu, v.t);
    }
    for (int i = 0; i < n; i++)
        if (UTIL_NEVER(!L.j[i].done)) break;
    free(L.h.a);
    free(L.g);
    free(L.j);
    free(L.cand);
}

void plan_wl_run_free(plan_wl_run *r)
{
    if (!r) return;
    free(r->busy_ns);
    free(r->seg);
    memset(r, 0, sizeof *r);
}
