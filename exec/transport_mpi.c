/* The MPI transport: one worker per rank (OpenMPI, MPI_THREAD_MULTIPLE:
 * the communication thread sends and receives while the compute thread
 * runs collectives). Messages travel on a communicator of their own,
 * tagged with their receive task and epoch; the receiver probes for any
 * message, takes a buffer from its device's memory when one arrives (as a
 * pre-posted receive would) and receives into it. Collectives gather every
 * member's values and add them in rank order, the in-process transport's
 * order, so both give the same bits. Device memory that is not host
 * memory (GPUs) is staged through host buffers on both sides. A failure
 * prints its message and aborts the job (no rank is left waiting for a
 * peer that stopped). Built only where MPI is found; elsewhere it answers
 * "unavailable". */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "exec/runtime.h"

/* What the processes of one machine add their host memory to: the bytes
 * held at once, and their most (exec_mpi_host_share). */
typedef struct host_count {
    _Atomic int64_t cur, peak;
} host_count;

struct exec_host_share {
    host_count *c;              /* the machine's mapping */
    int first;                  /* the machine's first process */
#ifdef SLUICE_HAVE_MPI
    void *node;                 /* its MPI_Comm, the machine's processes */
#endif
};

void exec_host_share_add(exec_host_share *h, double bytes)
{
    if (!h) return;
    int64_t now = atomic_fetch_add(&h->c->cur, (int64_t)bytes) +
                  (int64_t)bytes;
    int64_t pk = atomic_load(&h->c->peak);
    while (now > pk && !atomic_compare_exchange_weak(&h->c->peak, &pk, now))
        ;
}

double exec_host_share_peak(const exec_host_share *h)
{
    return h && h->first ? (double)atomic_load(&h->c->peak) : 0;
}

int exec_mpi_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") ||
           getenv("PMIX_RANK");
}

#ifdef SLUICE_HAVE_MPI
#include <mpi.h>

/* A message matched but not received: its receiver has not joined the
 * collective it belongs to (exec_recv_ready); MPI keeps its bytes. */
typedef struct held {
    MPI_Message msg;
    int count, rid, epoch;
} held;

typedef struct mpix {
    MPI_Comm data, ctrl, tp;
    int n_tasks;
    held *held;
    int n_held, cap_held;
} mpix;

typedef struct mreq {
    MPI_Request req;
    float *buf;
} mreq;

int exec_mpi_available(void) { return 1; }

static int mpi_err(util_err *e, int rc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(rc, s, &n);
    return util_errf(e, UTIL_EXIT_FAIL, "MPI %s failed: %.*s", what, n, s);
}

int exec_mpi_init(int *rank, int *size, util_err *e)
{
    int inited = 0, prov = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &prov);
        if (rc != MPI_SUCCESS) return mpi_err(e, rc, "init");
        if (prov < MPI_THREAD_MULTIPLE) {
            MPI_Finalize();
            return util_errf(e, UTIL_EXIT_FAIL, "this MPI gives no "
                             "MPI_THREAD_MULTIPLE (the executor's "
                             "communication thread needs it)");
        }
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 0;
}

void exec_mpi_finalize(void)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) MPI_Finalize();
}

void exec_mpi_abort(int code)
{
    MPI_Abort(MPI_COMM_WORLD, code);
}

/* Gathers every member's n values and adds them in rank order. */
static int sum_in_order(MPI_Comm c, void *buf, size_t n, int is_double,
                        util_err *e)
{
    int size;
    MPI_Comm_size(c, &size);
    size_t es = is_double ? sizeof(double) : sizeof(float);
    if (n > (size_t)1 << 30)
        return util_errf(e, UTIL_EXIT_FAIL, "a collective of %zu values", n);
    char *all = util_malloc(n * es * (size_t)size + es);
    int rc = MPI_Allgather(buf, (int)n, is_double ? MPI_DOUBLE : MPI_FLOAT,
                           all, (int)n, is_double ? MPI_DOUBLE : MPI_FLOAT, c);
    if (rc != MPI_SUCCESS) {
        free(all);
        return mpi_err(e, rc, "all-gather");
    }
    memcpy(buf, all, n * es);
    for (int q = 1; q < size; q++)
        exec_sum_into(buf, all + (size_t)q * n * es, n, is_double);
    free(all);
    return 0;
}

int exec_mpi_sum(void *buf, size_t n, int is_double, util_err *e)
{
    /* in slices, so the gathered copy stays small */
    size_t es = is_double ? sizeof(double) : sizeof(float);
    size_t step = (size_t)1 << 22;
    for (size_t o = 0; o < n; o += step)
        if (sum_in_order(MPI_COMM_WORLD, (char *)buf + o * es,
                         n - o < step ? n - o : step, is_double, e))
            return -1;
    return 0;
}

int exec_mpi_bcast(void *buf, size_t n, util_err *e)
{
    size_t step = (size_t)1 << 30;
    for (size_t o = 0; o < n; o += step) {
        int rc = MPI_Bcast((char *)buf + o, (int)(n - o < step ? n - o : step),
                           MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_err(e, rc, "broadcast");
    }
    return 0;
}

static int tag_of(const mpix *m, int epoch, int rid)
{
    return ((epoch - 1) & 3) * m->n_tasks + rid;
}

static int mx_send(exec_xport *x, exec_runtime *rt, int src, int dst,
                   int epoch, int rid, const exec_piece *pc, int np, void **h,
                   util_err *e)
{
    (void)src;
    mpix *m = x->impl;
    size_t total = 0;
    for (int i = 0; i < np; i++) total += pc[i].n;
    if (total > (size_t)1 << 30)
        return util_errf(e, UTIL_EXIT_FAIL, "a message of %zu floats", total);
    mreq *q = util_malloc(sizeof *q);
    q->buf = util_malloc(total * sizeof(float) + sizeof(float));
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        rt->be->to_host(q->buf + off, pc[i].p, pc[i].n * sizeof(float));
        off += pc[i].n;
    }
    if (rt->be->sync(e)) {
        free(q->buf);
        free(q);
        return -1;
    }
    int rc = MPI_Isend(q->buf, (int)total, MPI_FLOAT, dst,
                       tag_of(m, epoch, rid), m->data, &q->req);
    if (rc != MPI_SUCCESS) {
        free(q->buf);
        free(q);
        return mpi_err(e, rc, "send");
    }
    *h = q;
    return 0;
}

static int mx_send_test(exec_xport *x, void *h, int *done, util_err *e)
{
    (void)x;
    mreq *q = h;
    int flag = 0;
    int rc = MPI_Test(&q->req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_err(e, rc, "send");
    *done = flag;
    if (flag) {
        free(q->buf);
        free(q);
    }
    return 0;
}

/* Receives a matched message into a buffer of the worker's device and
 * completes its receive task. */
static int land(exec_runtime *rt, exec_worker *w, int wid, MPI_Message *msg,
                int count, int rid, int epoch, int64_t t0, util_err *e)
{
    exec_buf *b = exec_buf_new(&w->mem, (size_t)count, 0);
    if (!b) {
        char a[32], c[32], d[32], s[160];
        return util_errf(e, UTIL_EXIT_FAIL, "out of memory receiving %s "
                         "(%s more, %s of %s in use)",
                         sim_task_str(rt->ir, rid, s, sizeof s),
                         util_fmt_bytes(w->mem.need, a, sizeof a),
                         util_fmt_bytes(w->mem.cur, c, sizeof c),
                         util_fmt_bytes(w->mem.budget, d, sizeof d));
    }
    /* straight into host memory, else staged and uploaded */
    const exec_backend *be = rt->be;
    float *h = be->host_memory ? b->p
             : util_malloc(sizeof(float) * ((size_t)count + 1));
    int rc = MPI_Mrecv(h, count, MPI_FLOAT, msg, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && h != b->p)
        be->from_host(b->p, h, sizeof(float) * (size_t)count);
    if (h != b->p) free(h);
    if (rc != MPI_SUCCESS) {
        exec_buf_unref(b);
        return mpi_err(e, rc, "receive");
    }
    if (be->sync(e)) {
        exec_buf_unref(b);
        return -1;
    }
    exec_deliver(rt, wid, epoch, rid, b, t0);
    return 0;
}

static int mx_poll(exec_xport *x, exec_runtime *rt, int wid, int *got,
                   util_err *e)
{
    mpix *m = x->impl;
    exec_worker *w = exec_rt_worker(rt, wid);
    *got = 0;
    /* held messages whose receiver has joined since */
    for (int i = 0; i < m->n_held;) {
        held h = m->held[i];
        if (!exec_recv_ready(w, h.rid, h.epoch)) {
            i++;
            continue;
        }
        m->held[i] = m->held[--m->n_held];
        /* it moves now, as far as the receiver can tell */
        if (land(rt, w, wid, &h.msg, h.count, h.rid, h.epoch,
                 (int64_t)exec_now_ns(), e))
            return -1;
        (*got)++;
    }
    for (;;) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status stt;
        int rc = MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->data, &flag,
                             &msg, &stt);
        if (rc != MPI_SUCCESS) return mpi_err(e, rc, "probe");
        if (!flag) return 0;
        int64_t t0 = (int64_t)exec_now_ns();
        int count = 0;
        MPI_Get_count(&stt, MPI_FLOAT, &count);
        int rid = stt.MPI_TAG % m->n_tasks, eb = stt.MPI_TAG / m->n_tasks;
        pthread_mutex_lock(&w->mu);
        int epoch = w->done[rid] + 1;
        pthread_mutex_unlock(&w->mu);
        const sim_task *t = &rt->ir->tasks[rid];
        if (rid < 0 || t->kind != SIM_RECV || ((epoch - 1) & 3) != eb)
            return util_errf(e, UTIL_EXIT_FAIL, "a message from rank %d for "
                             "task %d of epoch bits %d matches no receive",
                             stt.MPI_SOURCE, rid, eb);
        /* a collective's chunk waits, in MPI, for its receiver to join */
        if (!exec_recv_ready(w, rid, epoch)) {
            if (m->n_held == m->cap_held) {
                m->cap_held = m->cap_held ? 2 * m->cap_held : 8;
                m->held = util_realloc(m->held, sizeof *m->held *
                                                    (size_t)m->cap_held);
            }
            m->held[m->n_held++] = (held){msg, count, rid, epoch};
            continue;
        }
        if (land(rt, w, wid, &msg, count, rid, epoch, t0, e)) return -1;
        (*got)++;
    }
}

static int mx_allreduce(exec_xport *x, exec_runtime *rt, int w, int which,
                        void *buf, size_t n, int is_double, util_err *e)
{
    (void)w;
    mpix *m = x->impl;
    MPI_Comm c = which == EXEC_GROUP_WORLD ? m->ctrl : m->tp;
    const exec_backend *be = rt->be;
    /* doubles and host-memory devices: in place */
    if (is_double || be->host_memory) {
        if (be->sync(e)) return -1;
        return sum_in_order(c, buf, n, is_double, e);
    }
    float *h = util_malloc(sizeof *h * (n + 1));
    be->to_host(h, buf, n * sizeof *h);
    int rc = be->sync(e);
    if (!rc) rc = sum_in_order(c, h, n, 0, e);
    if (!rc) {
        be->from_host(buf, h, n * sizeof *h);
        rc = be->sync(e);
    }
    free(h);
    return rc;
}

/* A part's floats of a whole of n over the tensor-parallel group (*len,
 * its size *size) once the device's work is done; -1 where MPI cannot
 * count them. */
static int tp_part(const exec_xport *x, const exec_runtime *rt, size_t n,
                   size_t *len, int *size, util_err *e)
{
    const mpix *m = x->impl;
    const exec_backend *be = rt->be;
    MPI_Comm_size(m->tp, size);
    *len = n / (size_t)*size;
    if (*len > (size_t)1 << 30)
        return util_errf(e, UTIL_EXIT_FAIL, "a part of %zu values", *len);
    return be->sync(e);
}

/* Sequence parallelism's reduce-scatter: each member's chunk m goes to
 * member m (all-to-all), which adds them in member order (the bits of
 * the in-process transport's). */
static int mx_reduce_scatter(exec_xport *x, exec_runtime *rt, int w,
                             const float *whole, float *part, size_t n,
                             util_err *e)
{
    (void)w;
    int size;
    size_t len;
    if (tp_part(x, rt, n, &len, &size, e)) return -1;
    mpix *m = x->impl;
    const exec_backend *be = rt->be;
    const float *src = whole;
    float *h = NULL;
    if (!be->host_memory) {
        h = util_malloc(sizeof *h * (n + 1));
        be->to_host(h, whole, n * sizeof *h);
        src = h;
    }
    float *all = util_malloc(sizeof *all * (n + 1));
    int rc = MPI_Alltoall(src, (int)len, MPI_FLOAT, all, (int)len, MPI_FLOAT,
                          m->tp);
    if (rc != MPI_SUCCESS) {
        free(h);
        free(all);
        return mpi_err(e, rc, "all-to-all");
    }
    for (int q = 1; q < size; q++)
        exec_sum_into(all, all + (size_t)q * len, len, 0);
    if (be->host_memory) {
        memcpy(part, all, len * sizeof *all);
    } else {
        be->from_host(part, all, len * sizeof *all);
        rc = be->sync(e);
    }
    free(h);
    free(all);
    return rc ? -1 : 0;
}

static int mx_allgather(exec_xport *x, exec_runtime *rt, int w,
                        const float *part, float *whole, size_t n,
                        util_err *e)
{
    (void)w;
    int size;
    size_t len;
    if (tp_part(x, rt, n, &len, &size, e)) return -1;
    const mpix *m = x->impl;
    const exec_backend *be = rt->be;
    if (be->host_memory) {
        int rc = MPI_Allgather(part, (int)len, MPI_FLOAT, whole, (int)len,
                               MPI_FLOAT, m->tp);
        return rc != MPI_SUCCESS ? mpi_err(e, rc, "all-gather") : 0;
    }
    float *h = util_malloc(sizeof *h * (n + len + 1)), *hp = h + n;
    be->to_host(hp, part, len * sizeof *h);
    int rc = MPI_Allgather(hp, (int)len, MPI_FLOAT, h, (int)len, MPI_FLOAT,
                           m->tp);
    if (rc != MPI_SUCCESS) {
        free(h);
        return mpi_err(e, rc, "all-gather");
    }
    be->from_host(whole, h, n * sizeof *h);
    rc = be->sync(e);
    free(h);
    return rc ? -1 : 0;
}

/* A failure: say it here, the peers cannot, and end the job. */
static void mx_wake(exec_xport *x, exec_runtime *rt)
{
    (void)x;
    fprintf(stderr, "sluice exec: %s\n", rt->err.msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, rt->err.code ? rt->err.code : UTIL_EXIT_FAIL);
}

static void mx_free(exec_xport *x)
{
    if (!x) return;
    mpix *m = x->impl;
    MPI_Comm_free(&m->data);
    MPI_Comm_free(&m->ctrl);
    MPI_Comm_free(&m->tp);
    free(m->held);
    free(m);
    free(x);
}

exec_xport *exec_xport_mpi_new(exec_runtime *rt, util_err *e)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* the run checked it before setting up (exec_pipe_run) */
    UTIL_NEVER(size != rt->n_workers);
    int ub_ok = 0, *ub = NULL;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &ub_ok);
    if (ub_ok && ub && (long)4 * rt->ir->n_tasks > (long)*ub) {
        util_errf(e, UTIL_EXIT_USAGE, "the schedule has %d tasks, more than "
                  "this MPI's tags can name (%d)", rt->ir->n_tasks, *ub / 4);
        return NULL;
    }
    mpix *m = util_calloc(1, sizeof *m);
    m->n_tasks = rt->ir->n_tasks;
    MPI_Comm_dup(MPI_COMM_WORLD, &m->data);
    MPI_Comm_dup(MPI_COMM_WORLD, &m->ctrl);
    MPI_Comm_split(MPI_COMM_WORLD, rank / rt->tp, rank % rt->tp, &m->tp);
    exec_xport *x = util_calloc(1, sizeof *x);
    x->name = "mpi";
    x->send = mx_send;
    x->send_test = mx_send_test;
    x->poll = mx_poll;
    x->allreduce = mx_allreduce;
    x->reduce_scatter = mx_reduce_scatter;
    x->allgather = mx_allgather;
    x->wake = mx_wake;
    x->free = mx_free;
    x->impl = m;
    return x;
}

/* The machine's count: its first process makes a shared mapping under a
 * name of its own (its pid and clock), the others open it, and once all
 * have it the name goes, so nothing outlives the job. Every process of
 * the job calls it. Where a process cannot map it (no shared memory in
 * a container), every process goes without (the ranks agree) and says
 * so: the run then sums each process's own peak, as a measurement's
 * lack must not stop a training run. */
int exec_mpi_host_share(exec_host_share **out, util_err *e)
{
    *out = NULL;
    MPI_Comm node;
    int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0,
                                 MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS) return mpi_err(e, rc, "split by machine");
    int nr;
    MPI_Comm_rank(node, &nr);
    struct { char name[64]; int ok; } msg = {{0}, 1};
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(msg.name, sizeof msg.name, "/sluice-host-%ld-%lld",
             (long)getpid(), (long long)ts.tv_sec * 1000000000LL +
                             ts.tv_nsec);
    int fd = -1, err = 0, made = 0;
    if (nr == 0) {
        fd = shm_open(msg.name, O_CREAT | O_EXCL | O_RDWR, 0600);
        made = fd >= 0;
        if (fd < 0 || ftruncate(fd, sizeof(host_count))) {
            err = errno;
            msg.ok = 0;
            if (fd >= 0) close(fd);
            fd = -1;
        }
    }
    MPI_Bcast(&msg, sizeof msg, MPI_BYTE, 0, node);
    if (nr && msg.ok) {
        fd = shm_open(msg.name, O_RDWR, 0600);
        if (fd < 0) err = errno;
    }
    host_count *c = NULL;
    if (fd >= 0) {
        void *m = mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE, MAP_SHARED,
                       fd, 0);
        if (m == MAP_FAILED) err = errno;
        else c = m;
        close(fd);
    }
    int ok = c != NULL, all = 0;
    MPI_Barrier(node);          /* every process has opened it */
    if (made) shm_unlink(msg.name);
    rc = MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS || !all) {
        if (c) munmap(c, sizeof *c);
        MPI_Comm_free(&node);
        if (rc != MPI_SUCCESS) return mpi_err(e, rc, "all-reduce");
        if (err)                /* the process that failed says why */
            fprintf(stderr, "sluice exec: no memory shared between this "
                    "machine's processes (%s): the host memory reported "
                    "sums each process's own peak\n", strerror(err));
        return 0;
    }
    exec_host_share *h = util_calloc(1, sizeof *h);
    h->c = c;
    h->first = nr == 0;
    h->node = util_malloc(sizeof node);
    memcpy(h->node, &node, sizeof node);
    *out = h;
    return 0;
}

/* Once every process is set up: the machine's peak from what it holds
 * now (each process's own peak starts there too: exec_tiers_ready). */
int exec_mpi_host_share_start(exec_host_share *h, util_err *e)
{
    if (!h) return 0;
    MPI_Comm node;
    memcpy(&node, h->node, sizeof node);
    int rc = MPI_Barrier(node);
    if (rc == MPI_SUCCESS && h->first) {
        atomic_store(&h->c->peak, atomic_load(&h->c->cur));
        /* an add between the two reads kept the peak it saw: what is
         * held now is at most the peak */
        exec_host_share_add(h, 0);
    }
    if (rc == MPI_SUCCESS) rc = MPI_Barrier(node);
    return rc == MPI_SUCCESS ? 0 : mpi_err(e, rc, "barrier");
}

void exec_host_share_free(exec_host_share *h)
{
    if (!h) return;
    MPI_Comm node;
    memcpy(&node, h->node, sizeof node);
    MPI_Comm_free(&node);
    free(h->node);
    munmap(h->c, sizeof *h->c);
    free(h);
}

#else /* no MPI */

int exec_mpi_available(void) { return 0; }

int exec_mpi_init(int *rank, int *size, util_err *e)
{
    *rank = 0;
    *size = 1;
    return util_errf(e, UTIL_EXIT_USAGE, "this sluice was built without MPI "
                     "(install libopenmpi-dev and rebuild)");
}

void exec_mpi_finalize(void) {}
void exec_mpi_abort(int code) { exit(code); }

int exec_mpi_sum(void *buf, size_t n, int is_double, util_err *e)
{
    (void)buf;
    (void)n;
    (void)is_double;
    (void)e;
    return 0;
}

int exec_mpi_bcast(void *buf, size_t n, util_err *e)
{
    (void)buf;
    (void)n;
    (void)e;
    return 0;
}

int exec_mpi_host_share(exec_host_share **out, util_err *e)
{
    (void)e;
    *out = NULL;
    return 0;
}

int exec_mpi_host_share_start(exec_host_share *h, util_err *e)
{
    (void)h;
    (void)e;
    return 0;
}

void exec_host_share_free(exec_host_share *h) { (void)h; }

exec_xport *exec_xport_mpi_new(exec_runtime *rt, util_err *e)
{
    (void)rt;
    util_errf(e, UTIL_EXIT_USAGE, "this sluice was built without MPI "
              "(install libopenmpi-dev and rebuild)");
    return NULL;
}

#endif
