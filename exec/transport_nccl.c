/* The NCCL transport (bin/sluice-cuda: mpirun -np N sluice-cuda exec
 * --plan P --backend cuda --transport nccl): one worker per MPI rank and a
 * GPU each. Messages go by NCCL send and receive on a communicator of two
 * ranks per channel (sender, receiver, send queue: pipeline or
 * collective stream), so a channel carries the sender's messages in the
 * sender's order and the receiver posts each receive in advance: the IR
 * says which receives follow on a channel and their sizes. A channel has
 * a stream of its own at each end, so no receive waits behind another.
 * Tensor-parallel sums are NCCL all-reduces on the device's group (in
 * NCCL's order: not the other transports' bits); the step's host sums and
 * failures go through an MPI transport beside it. Communicators come
 * from one world communicator (unique id on rank 0, MPI_Bcast) split in
 * the same order on every rank, and each channel is connected by a first
 * one-float message at setup, in that order, so no rank waits on a
 * connection while its peer waits on another. A failure prints its
 * message and aborts the job. C against CUDA's and NCCL's headers: built
 * only by make cuda. Not run on the machine this was written on (no
 * GPU); tests/gpu/run.sh is where it runs. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "exec/runtime.h"

#ifdef SLUICE_HAVE_MPI
#include <mpi.h>

/* A channel at this rank's end. */
typedef struct chan {
    int src, dst, q;            /* workers, send queue (1: collective) */
    ncclComm_t comm;            /* src is its rank 0, dst its rank 1 */
    cudaStream_t stream;
    cudaEvent_t ready;          /* orders the stream after a thread's */
    /* receiving end: the receive tasks of one epoch in the sender's
     * order, the next to post, the one posted */
    int *rid, n_rid;
    int pos, epoch;
    exec_buf *buf;
    int buf_rid, buf_epoch;
    cudaEvent_t landed;
} chan;

typedef struct ncclx {
    exec_xport *mpi;            /* host sums, failures */
    ncclComm_t world, tp;
    chan *ch;
    int n_ch;
    int me, gpu;
} ncclx;

/* A send in flight: done when its event is; the packed copy goes then. */
typedef struct sreq {
    cudaEvent_t done;
    exec_buf *pack;
} sreq;

static int nccl_err(util_err *e, int gpu, const char *what, ncclResult_t r)
{
    return util_errf(e, UTIL_EXIT_FAIL, "NCCL %s failed on GPU %d: %s (%s)",
                     what, gpu, ncclGetErrorString(r), ncclGetLastError(NULL));
}

static int cuda_err(util_err *e, int gpu, const char *what, cudaError_t r)
{
    return util_errf(e, UTIL_EXIT_FAIL, "%s failed on GPU %d: %s", what, gpu,
                     cudaGetErrorString(r));
}

/* Checked calls inside functions with util_err *e and int gpu. */
#define NCHK(fn, args)                                                        \
    do {                                                                      \
        ncclResult_t r_ = fn args;                                            \
        if (r_ != ncclSuccess) return nccl_err(e, gpu, #fn, r_);              \
    } while (0)
#define CCHK(fn, args)                                                        \
    do {                                                                      \
        cudaError_t r_ = fn args;                                             \
        if (r_ != cudaSuccess) return cuda_err(e, gpu, #fn, r_);              \
    } while (0)

/* --------------------------------------------------------- channels */

typedef struct ckey { int src, dst, q; } ckey;

static int ckey_cmp(const void *a, const void *b)
{
    const ckey *x = a, *y = b;
    if (x->src != y->src) return x->src < y->src ? -1 : 1;
    if (x->dst != y->dst) return x->dst < y->dst ? -1 : 1;
    return (x->q > y->q) - (x->q < y->q);
}

/* The send queue of a send task, as the runtime's worker lists it. */
static int queue_of(const sim_task *send)
{
    return send->stream == SIM_STREAM_COLL;
}

/* Every channel of the IR's sends (rank r of a device sends to rank r of
 * the next), sorted: the same list on every rank. */
static ckey *all_channels(const exec_runtime *rt, int *n)
{
    const sim_ir *ir = rt->ir;
    int cap = 16, k = 0;
    ckey *c = util_malloc(sizeof *c * (size_t)cap);
    for (int id = 0; id < ir->n_tasks; id++) {
        const sim_task *t = &ir->tasks[id];
        if (t->kind != SIM_SEND) continue;
        int dd = ir->tasks[t->peer].device;
        for (int r = 0; r < rt->tp; r++) {
            if (k == cap) c = util_realloc(c, sizeof *c * (size_t)(cap *= 2));
            c[k++] = (ckey){t->device * rt->tp + r, dd * rt->tp + r,
                            queue_of(t)};
        }
    }
    qsort(c, (size_t)k, sizeof *c, ckey_cmp);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (!u || ckey_cmp(&c[u - 1], &c[i])) c[u++] = c[i];
    *n = u;
    return c;
}

/* The receive tasks of a channel into this rank, in the order its sender
 * walks its send queue in an epoch. */
static void channel_receives(const exec_runtime *rt, chan *c)
{
    const sim_ir *ir = rt->ir;
    int ds = c->src / rt->tp, r = c->src % rt->tp;
    int n = ir->dev_off[ds + 1] - ir->dev_off[ds];
    c->rid = util_malloc(sizeof(int) * (size_t)(n + 1));
    for (int j = ir->dev_off[ds]; j < ir->dev_off[ds + 1]; j++) {
        const sim_task *t = &ir->tasks[ir->seq[j]];
        if (t->kind == SIM_SEND && queue_of(t) == c->q &&
            ir->tasks[t->peer].device * rt->tp + r == c->dst)
            c->rid[c->n_rid++] = t->peer;
    }
}

static chan *find(ncclx *n, int src, int dst, int q)
{
    for (int i = 0; i < n->n_ch; i++)
        if (n->ch[i].src == src && n->ch[i].dst == dst && n->ch[i].q == q)
            return &n->ch[i];
    return NULL;
}

/* ---------------------------------------------------------- sending */

static int nc_send(exec_xport *x, exec_runtime *rt, int src, int dst,
                   int epoch, int rid, const exec_piece *pc, int np, void **h,
                   util_err *e)
{
    (void)epoch;
    ncclx *n = x->impl;
    int gpu = n->gpu;
    const sim_task *send = &rt->ir->tasks[rt->ir->tasks[rid].peer];
    chan *c = find(n, src, dst, queue_of(send));
    if (!c)
        return util_errf(e, UTIL_EXIT_FAIL, "no NCCL channel from worker %d "
                         "to %d", src, dst);
    exec_worker *w = exec_rt_worker(rt, src);
    const exec_backend *be = rt->be;
    size_t total = 0;
    for (int i = 0; i < np; i++) total += pc[i].n;
    sreq *r = util_calloc(1, sizeof *r);
    const float *p = np ? pc[0].p : NULL;
    if (np > 1) {
        /* pieces packed on the device: one message, one size to post */
        if (!(r->pack = exec_buf_new(&w->mem, total, 0))) {
            free(r);
            return exec_oom(w, "a message to send", e);
        }
        size_t off = 0;
        for (int i = 0; i < np; i++) {
            be->copy(r->pack->p + off, pc[i].p, pc[i].n * sizeof(float));
            off += pc[i].n;
        }
        p = r->pack->p;
    }
    int rc = 0;
    /* after what this thread queued: the packing, integrate's sums */
    cudaError_t cr = cudaEventRecord(c->ready, (cudaStream_t)be->stream());
    if (cr == cudaSuccess) cr = cudaStreamWaitEvent(c->stream, c->ready, 0);
    if (cr != cudaSuccess) rc = cuda_err(e, gpu, "cudaEventRecord", cr);
    ncclResult_t nr = ncclSuccess;
    if (!rc) nr = ncclSend(p, total, ncclFloat, 1, c->comm, c->stream);
    if (!rc && nr != ncclSuccess) rc = nccl_err(e, gpu, "ncclSend", nr);
    if (!rc) cr = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
    if (!rc && cr == cudaSuccess) cr = cudaEventRecord(r->done, c->stream);
    if (!rc && cr != cudaSuccess) rc = cuda_err(e, gpu, "cudaEventRecord", cr);
    if (rc) {
        /* the job ends (wake aborts it): the pack may stay queued */
        free(r);
        return -1;
    }
    *h = r;
    return 0;
}

static int nc_send_test(exec_xport *x, void *h, int *done, util_err *e)
{
    ncclx *n = x->impl;
    int gpu = n->gpu;
    sreq *r = h;
    cudaError_t cr = cudaEventQuery(r->done);
    *done = 0;
    if (cr == cudaErrorNotReady) return 0;
    CCHK(cudaEventQuery, (r->done));
    *done = 1;
    exec_buf_unref(r->pack);
    cudaEventDestroy(r->done);
    free(r);
    return 0;
}

/* -------------------------------------------------------- receiving */

/* The last epoch the run still goes to (the comm thread's bound). */
static int last_epoch(exec_runtime *rt)
{
    int stop = atomic_load(&rt->stop_epoch);
    int last = rt->epochs < stop ? rt->epochs : stop;
    return last < 1 ? (rt->async ? 1 : 0) : last;
}

/* Posts a channel's next receive: a buffer charged to this device, the
 * channel's stream after the allocation's fence; a ring's once this
 * device has joined it (exec_recv_ready). */
static int post(ncclx *n, exec_runtime *rt, exec_worker *w, chan *c,
                util_err *e)
{
    int gpu = n->gpu;
    if (!c->n_rid) return 0;
    if (c->pos == c->n_rid) {
        c->pos = 0;
        c->epoch++;
    }
    if (c->epoch > last_epoch(rt)) return 0;
    int rid = c->rid[c->pos];
    /* a ring's chunk is posted for once this device has joined the ring
     * (the sender's NCCL send waits for it): tried again next poll */
    if (!exec_recv_ready(w, rid, c->epoch)) return 0;
    size_t len = exec_recv_floats(rt, w, rid);
    exec_buf *b = exec_buf_new(&w->mem, len, 0);
    if (!b) {
        char s[160];
        exec_oom(w, sim_task_str(rt->ir, rid, s, sizeof s), e);
        return util_err_prefix(e, "receiving");
    }
    c->buf = b;
    c->buf_rid = rid;
    c->buf_epoch = c->epoch;
    c->pos++;
    CCHK(cudaEventRecord, (c->ready, (cudaStream_t)rt->be->stream()));
    CCHK(cudaStreamWaitEvent, (c->stream, c->ready, 0));
    NCHK(ncclRecv, (b->p, len, ncclFloat, 0, c->comm, c->stream));
    CCHK(cudaEventRecord, (c->landed, c->stream));
    return 0;
}

static int nc_poll(exec_xport *x, exec_runtime *rt, int wid, int *got,
                   util_err *e)
{
    ncclx *n = x->impl;
    int gpu = n->gpu;
    exec_worker *w = exec_rt_worker(rt, wid);
    *got = 0;
    for (int i = 0; i < n->n_ch; i++) {
        chan *c = &n->ch[i];
        ncclResult_t ae = ncclSuccess;
        NCHK(ncclCommGetAsyncError, (c->comm, &ae));
        if (ae != ncclSuccess && ae != ncclInProgress)
            return nccl_err(e, gpu, "a transfer", ae);
        if (c->dst != wid) continue;
        if (c->buf) {
            cudaError_t cr = cudaEventQuery(c->landed);
            if (cr == cudaErrorNotReady) continue;
            CCHK(cudaEventQuery, (c->landed));
            /* when it started is not seen: the receive is timed as
             * landing when it was found */
            exec_deliver(rt, wid, c->buf_epoch, c->buf_rid, c->buf,
                         (int64_t)exec_now_ns());
            c->buf = NULL;
            (*got)++;
        }
        if (post(n, rt, w, c, e)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------- sums */

static int nc_allreduce(exec_xport *x, exec_runtime *rt, int w, int which,
                        void *buf, size_t len, int is_double, util_err *e)
{
    ncclx *n = x->impl;
    int gpu = n->gpu;
    if (is_double || which == EXEC_GROUP_WORLD)
        return n->mpi->allreduce(n->mpi, rt, w, which, buf, len, is_double,
                                 e);
    /* on the compute stream, after the kernels that made buf; waited for,
     * so the task's tensor-parallel time is the collective's */
    NCHK(ncclAllReduce, (buf, buf, len, ncclFloat, ncclSum, n->tp,
                         (cudaStream_t)rt->be->stream()));
    return rt->be->sync(e);
}

/* Sequence parallelism's pair, NCCL's own (its sums' order is NCCL's:
 * not the CPU transports' bits) */
static int nc_reduce_scatter(exec_xport *x, exec_runtime *rt, int w,
                             const float *whole, float *part, size_t n,
                             util_err *e)
{
    (void)w;
    ncclx *nx = x->impl;
    int gpu = nx->gpu;
    NCHK(ncclReduceScatter, (whole, part, n / (size_t)rt->tp, ncclFloat,
                             ncclSum, nx->tp, (cudaStream_t)rt->be->stream()));
    return rt->be->sync(e);
}

static int nc_allgather(exec_xport *x, exec_runtime *rt, int w,
                        const float *part, float *whole, size_t n,
                        util_err *e)
{
    (void)w;
    ncclx *nx = x->impl;
    int gpu = nx->gpu;
    NCHK(ncclAllGather, (part, whole, n / (size_t)rt->tp, ncclFloat, nx->tp,
                         (cudaStream_t)rt->be->stream()));
    return rt->be->sync(e);
}

static void nc_wake(exec_xport *x, exec_runtime *rt)
{
    ncclx *n = x->impl;
    n->mpi->wake(n->mpi, rt);
}

static void nc_free(exec_xport *x)
{
    if (!x) return;
    ncclx *n = x->impl;
    cudaSetDevice(n->gpu);
    for (int i = 0; i < n->n_ch; i++) {
        chan *c = &n->ch[i];
        /* every send finished and every receive the run read landed; what
         * is left is a receive posted for a step the run did not go to:
         * abort (local, waits for no peer) ends it with the channel */
        if (c->comm) ncclCommAbort(c->comm);
        if (c->stream) cudaStreamSynchronize(c->stream);
        exec_buf_unref(c->buf);
        if (c->ready) cudaEventDestroy(c->ready);
        if (c->landed) cudaEventDestroy(c->landed);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c->rid);
    }
    if (n->tp) ncclCommDestroy(n->tp);
    if (n->world) ncclCommDestroy(n->world);
    free(n->ch);
    if (n->mpi) n->mpi->free(n->mpi);
    free(n);
    free(x);
}

/* ------------------------------------------------------------ setup */

/* The communicators, in the same order on every rank, and a first
 * message on each channel. Returns -1 with e set; the caller ends the
 * job (peers wait inside NCCL for this rank). */
static int nc_connect(ncclx *n, exec_runtime *rt, int size, util_err *e)
{
    int gpu = n->gpu, me = n->me;
    CCHK(cudaSetDevice, (gpu));
    ncclUniqueId id;
    if (me == 0) NCHK(ncclGetUniqueId, (&id));
    if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return util_errf(e, UTIL_EXIT_FAIL, "MPI broadcast of NCCL's id "
                         "failed");
    NCHK(ncclCommInitRank, (&n->world, size, id, me));
    if (rt->tp > 1)
        NCHK(ncclCommSplit, (n->world, me / rt->tp, me % rt->tp, &n->tp,
                             NULL));
    int nk = 0;
    ckey *k = all_channels(rt, &nk);
    n->ch = util_calloc((size_t)nk + 1, sizeof *n->ch);
    int rc = 0;
    for (int i = 0; i < nk && !rc; i++) {
        int member = k[i].src == me || k[i].dst == me;
        ncclComm_t comm = NULL;
        ncclResult_t r = ncclCommSplit(n->world, member ? i
                                                        : NCCL_SPLIT_NOCOLOR,
                                       k[i].src == me ? 0 : 1, &comm, NULL);
        if (r != ncclSuccess) rc = nccl_err(e, gpu, "ncclCommSplit", r);
        if (rc || !member) continue;
        chan *c = &n->ch[n->n_ch++];
        c->src = k[i].src;
        c->dst = k[i].dst;
        c->q = k[i].q;
        c->comm = comm;
        c->epoch = 1;
        if (c->dst == me) channel_receives(rt, c);
    }
    free(k);
    if (rc) return -1;
    float *one = NULL;
    CCHK(cudaMalloc, ((void **)&one, sizeof *one));
    for (int i = 0; i < n->n_ch && !rc; i++) {
        chan *c = &n->ch[i];
        cudaError_t cr = cudaStreamCreateWithFlags(&c->stream,
                                                   cudaStreamNonBlocking);
        if (cr == cudaSuccess)
            cr = cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming);
        if (cr == cudaSuccess)
            cr = cudaEventCreateWithFlags(&c->landed, cudaEventDisableTiming);
        if (cr != cudaSuccess) {
            rc = cuda_err(e, gpu, "cudaStreamCreateWithFlags", cr);
            break;
        }
        /* connected now, in the global order, not at the first message */
        ncclResult_t r = c->src == me
                       ? ncclSend(one, 1, ncclFloat, 1, c->comm, c->stream)
                       : ncclRecv(one, 1, ncclFloat, 0, c->comm, c->stream);
        if (r != ncclSuccess) rc = nccl_err(e, gpu, "connecting", r);
        else if ((cr = cudaStreamSynchronize(c->stream)) != cudaSuccess)
            rc = cuda_err(e, gpu, "connecting", cr);
    }
    if (!rc && n->tp) {
        ncclResult_t r = ncclAllReduce(one, one, 1, ncclFloat, ncclSum, n->tp,
                                       cudaStreamPerThread);
        cudaError_t cr = cudaStreamSynchronize(cudaStreamPerThread);
        if (r != ncclSuccess) rc = nccl_err(e, gpu, "ncclAllReduce", r);
        else if (cr != cudaSuccess) rc = cuda_err(e, gpu, "connecting", cr);
    }
    cudaFree(one);
    return rc;
}

exec_xport *exec_xport_nccl_new(exec_runtime *rt, util_err *e)
{
    if (strcmp(rt->be->name, "cuda")) {
        util_errf(e, UTIL_EXIT_USAGE, "--transport nccl moves GPU memory: "
                  "use it with --backend cuda");
        return NULL;
    }
    exec_xport *mpi = exec_xport_mpi_new(rt, e);
    if (!mpi) return NULL;
    int me = rt->first_local, size = rt->n_workers, count = 0;
    exec_worker *w = exec_rt_worker(rt, me);
    /* NCCL puts no two ranks of a communicator on one GPU: every rank
     * checks its node, all agree before any NCCL call */
    MPI_Comm node;
    int local = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me,
                            MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    int ok = local <= count, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        util_errf(e, UTIL_EXIT_USAGE, "--transport nccl needs a GPU per "
                  "worker: %s (NCCL cannot put two ranks of a communicator "
                  "on one GPU; --transport mpi can)",
                  ok ? "a node of the job has fewer GPUs than ranks"
                     : "this node has fewer GPUs than ranks");
        mpi->free(mpi);
        return NULL;
    }
    ncclx *n = util_calloc(1, sizeof *n);
    n->mpi = mpi;
    n->me = me;
    n->gpu = w->dev.index;
    exec_xport *x = util_malloc(sizeof *x);
    *x = (exec_xport){.name = "nccl", .send = nc_send,
                      .send_test = nc_send_test, .poll = nc_poll,
                      .allreduce = nc_allreduce,
                      .reduce_scatter = nc_reduce_scatter,
                      .allgather = nc_allgather, .wake = nc_wake,
                      .free = nc_free, .impl = n};
    if (nc_connect(n, rt, size, e)) {
        /* the peers wait inside NCCL for this rank: end the job */
        fprintf(stderr, "sluice exec: %s\n", e->msg);
        fflush(stderr);
        exec_mpi_abort(UTIL_EXIT_FAIL);
    }
    return x;
}

#else /* no MPI */

exec_xport *exec_xport_nccl_new(exec_runtime *rt, util_err *e)
{
    (void)rt;
    util_errf(e, UTIL_EXIT_USAGE, "--transport nccl: this sluice-cuda was "
              "built without MPI, which starts NCCL's communicators (install "
              "libopenmpi-dev and rebuild)");
    return NULL;
}

#endif
