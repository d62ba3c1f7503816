/* A pipeline run from a plan: the model and hardware it names, the cost
 * table and schedule IR the simulator builds for it (the same IR, so the
 * two compare task by task), the starting weights (the reference
 * trainer's initialisation, a checkpoint, or a Hugging Face GPT-2), the
 * workers on a backend and a transport, and what they measured gathered
 * on rank 0. A
 * schedule with a flush runs its IR once per step; one without runs one
 * IR of as many minibatches as steps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/runtime.h"
#include "sim/sim.h"

/* Present in bin/sluice-cuda only (make cuda). */
exec_xport *exec_xport_nccl_new(exec_runtime *rt, util_err *e)
    __attribute__((weak));

/* The run's transport. */
static exec_xport *xport_new(const exec_pipe_opts *o, exec_runtime *rt,
                             int mpi, util_err *e)
{
    if (o->xport != EXEC_XPORT_NCCL)
        return mpi ? exec_xport_mpi_new(rt, e) : exec_xport_inproc_new(rt);
    if (!exec_xport_nccl_new) {
        util_errf(e, UTIL_EXIT_USAGE, "--transport nccl: this sluice was "
                  "built without CUDA; build bin/sluice-cuda with `make "
                  "cuda`");
        return NULL;
    }
    return exec_xport_nccl_new(rt, e);
}

static prof_topo *load_hw(const char *hw, util_err *e)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", hw);
    char *words[16], *save = NULL;
    int n = 0;
    for (char *t = strtok_r(buf, " \t", &save); t && n < 16;
         t = strtok_r(NULL, " \t", &save))
        words[n++] = t;
    if (!n) {
        util_errf(e, UTIL_EXIT_USAGE, "the plan names no hardware");
        return NULL;
    }
    return prof_topo_from_args(n, words, NULL, e);
}

/* The weights to start from: --resume (state and step), --init (weights:
 * a checkpoint or a safetensors file), or the reference's initialisation
 * from the seed. */
static int initial_state(const exec_pipe_opts *o, const exec_gpt_config *c,
                         int B, int T, float *p, float *am, float *av,
                         float *lora, float *lm, float *lv, size_t NL,
                         int *step0, uint64_t *seed, util_err *e)
{
    *step0 = 0;
    if (o->resume && exec_ft_adapts(&o->plan->ft)) {
        /* a LoRA run goes on from its own state beside the checkpoint
         * (the checkpoint has the adapters merged in) */
        char lp[4096], fn[64];
        exec_lora_ckpt_path(o->resume, lp, sizeof lp);
        exec_ckpt_meta meta;
        prof_finetune_name(&o->plan->ft, fn, sizeof fn);
        if (exec_lora_ckpt_missing(o->resume, c, fn, e)) return -1;
        if (exec_lora_ckpt_load(lp, c, &o->plan->ft, p, lora, lm, lv, NL,
                                &meta, e))
            return -1;
        if (meta.B != B || meta.T != T)
            return util_errf(e, UTIL_EXIT_USAGE, "%s: the state of batch %d "
                             "x %d tokens, the plan trains %d x %d (resume "
                             "with the plan that saved it)", lp, meta.B,
                             meta.T, B, T);
        /* the two files are one save's: a state beside another run's
         * checkpoint, or one step's beside another's, went on silently
         * from the state while the checks before the run read the
         * checkpoint */
        exec_ckpt_meta cm;
        if (exec_ckpt_peek(o->resume, &cm, e)) return -1;
        if (cm.step != meta.step || cm.seed != meta.seed)
            return util_errf(e, UTIL_EXIT_USAGE, "%s is step %lld of a run "
                             "of seed %llu, %s step %lld of seed %llu: not "
                             "the pair one --save writes (a run stopped "
                             "between writing them, or files of two runs); "
                             "resume from a pair saved together, or start "
                             "from %s's weights with --init", o->resume,
                             (long long)cm.step, (unsigned long long)cm.seed,
                             lp, (long long)meta.step,
                             (unsigned long long)meta.seed, o->resume);
        *step0 = (int)meta.step;
        *seed = meta.seed;
        return 0;
    }
    if (o->resume) {
        exec_ckpt_meta meta;
        if (exec_ckpt_load_state(o->resume, c, p, am, av, &meta, e))
            return -1;
        if (meta.B != B || meta.T != T)
            return util_errf(e, UTIL_EXIT_USAGE, "%s: checkpoint of batch %d "
                             "x %d tokens, the plan trains %d x %d (resume "
                             "with the plan that saved it)", o->resume,
                             meta.B, meta.T, B, T);
        if (meta.step < 0 || meta.step > 100000000)
            return util_errf(e, UTIL_EXIT_USAGE, "%s: implausible step %lld",
                             o->resume, (long long)meta.step);
        char pf[64];
        prof_finetune_name(&o->plan->ft, pf, sizeof pf);
        if (exec_ckpt_not_lora(o->resume, &meta, pf, e)) return -1;
        *step0 = (int)meta.step;
        *seed = meta.seed;
        return 0;
    }
    if (o->init) {
        size_t n = strlen(o->init);
        if (n > 12 && !strcmp(o->init + n - 12, ".safetensors"))
            return exec_safetensors_load(o->init, c, p, e);
        exec_ckpt_meta meta;
        return exec_ckpt_load_state(o->init, c, p, NULL, NULL, &meta, e);
    }
    exec_gpt_init_params(c, *seed, p);
    return 0;
}

int exec_plan_resumable(const sim_plan *p)
{
    return !exec_ft_adapts(&p->ft) || !sim_sched_offload(p->sched);
}

/* What the executor does not run of a fine-tuning mode: --offload with
 * any mode, and resuming a LoRA run whose tier kept the adapters'
 * moments. */
static int finetune_check(const exec_pipe_opts *o, const sim_plan *p,
                          const char *where, util_err *e)
{
    if (prof_finetune_full(&p->ft)) return 0;
    char ft[64];
    prof_finetune_name(&p->ft, ft, sizeof ft);
    if (o->offload.policy != EXEC_OFFLOAD_NONE)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: --offload %s does not run "
                         "fine-tuning mode %s yet (its tier holds every "
                         "weight with its gradient and moments)", where,
                         exec_offload_name(o->offload.policy), ft);
    if (o->resume && !exec_plan_resumable(p))
        return util_errf(e, UTIL_EXIT_USAGE, "%s: --resume %s: schedule %s's "
                         "tier does not hand back the adapters' AdamW "
                         "state, so a %s run of it cannot go on; start "
                         "another fine-tuning from the merged weights with "
                         "--init", where, o->resume, sim_sched_name(p->sched),
                         ft);
    return 0;
}

/* What the executor does not run of sharded data parallelism (the plan
 * passed sim_zero_check). */
static int zero_check(const exec_pipe_opts *o, const sim_plan *p,
                      const char *where, util_err *e)
{
    int z = sim_zero_stage(p->zero, p->fsdp);
    if (!z) return 0;
    char what[32];
    if (p->fsdp) snprintf(what, sizeof what, "fsdp %s", sim_fsdp_name(p->fsdp));
    else snprintf(what, sizeof what, "zero %d", z);
    if (o->offload.policy != EXEC_OFFLOAD_NONE)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: --offload %s with %s: the "
                         "tier holds a stage's whole state, not a shard",
                         where, exec_offload_name(o->offload.policy), what);
    return 0;
}

/* What the executor does not run of stage tiers (the plan's state_tier):
 * beside sharding, weight stashing or --offload, each of which places the
 * state its own way. */
static int stier_check(const exec_pipe_opts *o, const sim_plan *p,
                       const char *where, util_err *e)
{
    if (!sim_plan_tiered(p)) return 0;
    char tiers[256], why[64] = "";
    sim_state_tiers_str(p, tiers, sizeof tiers);
    if (sim_zero_stage(p->zero, p->fsdp))
        snprintf(why, sizeof why, "with zero %d", sim_zero_stage(p->zero,
                                                                 p->fsdp));
    else if (sim_sched_async(p->sched))
        snprintf(why, sizeof why, "with schedule %s (no flush)",
                 sim_sched_name(p->sched));
    else if (o->offload.policy != EXEC_OFFLOAD_NONE)
        snprintf(why, sizeof why, "with --offload %s",
                 exec_offload_name(o->offload.policy));
    if (why[0])
        return util_errf(e, UTIL_EXIT_USAGE, "%s: stage tiers %s %s: the "
                         "executor steps a stage tier's whole state on the "
                         "host after a flush (give every stage \"state_tier\""
                         ": \"gpu\", or leave the other out)", where, tiers,
                         why);
    return 0;
}

void exec_pipe_result_free(exec_pipe_result *r)
{
    if (!r) return;
    free(r->loss);
    free(r->grad_norm);
    free(r->times);
    free(r->peak_bytes);
    free(r->step_peak_bytes);
    free(r->max_versions);
    free(r->version_used);
    free(r->static_bytes);
    free(r->budget_bytes);
    free(r->overhead);
    free(r->mem_t);
    free(r->mem_b);
    free(r->mem_off);
    free(r->params);
    free(r->adam_m);
    free(r->adam_v);
    free(r->lora);
    free(r->lora_m);
    free(r->lora_v);
    free(r->base);
    free(r->op_ns);
    free(r->op_calls);
    sim_ir_free(r->ir);
    sim_costs_free(r->costs);
    prof_model_free(r->model);
    prof_topo_free(r->topo);
    memset(r, 0, sizeof *r);
}

/* Calibration's op times, summed over the workers and ranks. */
static int gather_op_times(exec_runtime *rt, exec_pipe_result *r, int mpi,
                           util_err *e)
{
    if (!rt->op_timing) return 0;
    size_t n = (size_t)rt->model->n_ops * PROF_PHASES;
    double *v = util_calloc(2 * n + 2, sizeof *v);
    for (int i = 0; i < rt->n_local; i++) {
        const exec_worker *w = &rt->w[i];
        for (size_t k = 0; k < n; k++) {
            v[k] += w->op_ns[k];
            v[n + k] += w->op_n[k];
        }
        v[2 * n] += w->rest_ns;
        v[2 * n + 1] += w->rest_ops;
    }
    if (mpi && exec_mpi_sum(v, 2 * n + 2, 1, e)) {
        free(v);
        return -1;
    }
    r->op_ns = util_malloc(sizeof(double) * (n + 1));
    r->op_calls = util_malloc(sizeof(double) * (n + 1));
    memcpy(r->op_ns, v, sizeof(double) * n);
    memcpy(r->op_calls, v + n, sizeof(double) * n);
    r->task_rest_ns = v[2 * n];
    r->task_rest_ops = v[2 * n + 1];
    free(v);
    return 0;
}

/* Everything the workers measured, summed over ranks (each rank fills
 * what it holds, zeros elsewhere; one owner per value makes the sum
 * exact). */
static int gather(exec_runtime *rt, exec_pipe_result *r, int mpi,
                  util_err *e)
{
    const sim_ir *ir = rt->ir;
    int n = ir->n_tasks, E = rt->epochs, D = ir->n_devices;
    int nep = rt->async ? rt->K : rt->epochs;
    size_t nt = (size_t)E * n * EXEC_T_N;
    /* times, shifted by one so "not run" (-1) sums as 0 */
    double *tv = util_calloc(nt + 1, sizeof *tv);
    double *dv = util_calloc((size_t)4 * D + 3 * (size_t)E + 2 * nep + 4,
                             sizeof *dv);
    double *peak = dv, *stat = dv + D, *bud = dv + 2 * D;
    double *ovh = dv + 3 * D, *loss = ovh + E, *norm = loss + nep;
    double *nw = norm + nep;
    /* per device and epoch: the step's peak ([d * E + ep]) */
    double *sp = util_calloc((size_t)D * (size_t)E + 1, sizeof *sp);
    double *ver = util_calloc((size_t)rt->S + (size_t)n + 1, sizeof *ver);
    double *used = ver + rt->S;
    for (int i = 0; i < rt->n_local; i++)
        for (int id = 0; rt->w[i].rank == 0 && id < n; id++)
            if (rt->w[i].used_ver[id] >= 0)
                used[id] = rt->w[i].used_ver[id] + 1;
    for (int i = 0; i < rt->n_local; i++)
        for (int k = 0; rt->w[i].rank == 0 && k < rt->w[i].n_st; k++)
            ver[rt->w[i].st[k].id] = rt->w[i].st[k].max_live;
    for (int i = 0; i < rt->n_local; i++) {
        exec_worker *w = &rt->w[i];
        if (w->rank == 0)
            for (int ep = 0; ep < E; ep++)
                for (int id = 0; id < n; id++) {
                    if (ir->tasks[id].device != w->device) continue;
                    for (int k = 0; k < EXEC_T_N; k++) {
                        size_t at = ((size_t)ep * n + id) * EXEC_T_N + k;
                        tv[at] = (double)w->tm[at] + 1;
                    }
                }
        /* per device, as tensor-parallel rank 0 holds it */
        if (w->rank == 0) {
            peak[w->device] += w->mem.peak;
            for (int ep = 0; ep < E; ep++)
                sp[(size_t)w->device * (size_t)E + (size_t)ep] +=
                    w->ep_peak[ep];
            double s = 0;
            for (int k = 0; k < w->n_st; k++)
                s += exec_stage_state_bytes(rt, &w->st[k]);
            stat[w->device] += s;
            bud[w->device] += w->mem.budget;
        }
        for (int ep = 0; ep < E; ep++) {
            double wall = (double)w->ep_wall[ep];
            double busy = (double)(w->ep_kern[ep] + w->ep_wait[ep]);
            if (wall > 0) ovh[ep] += fmax(0, wall - busy) / wall;
        }
        /* a flush agrees the loss and norm on every worker: take one */
        for (int k = 0; k < nep; k++) {
            if (rt->async) loss[k] += w->ep_loss[k];
            else if (w->id == 0) {
                loss[k] += w->ep_loss[k];
                norm[k] += w->ep_norm[k];
            }
        }
        nw[0] += 1;
    }
    int rc = 0;
    if (mpi && (exec_mpi_sum(tv, nt, 1, e) || exec_mpi_sum(ver, (size_t)rt->S + (size_t)n, 1, e) ||
                exec_mpi_sum(dv, (size_t)4 * D + 3 * (size_t)E + 2 * nep + 1,
                             1, e) ||
                exec_mpi_sum(sp, (size_t)D * (size_t)E, 1, e)))
        rc = -1;
    if (!rc) {
        r->n_tasks = n;
        r->epochs = E;
        r->times = util_malloc(sizeof(int64_t) * (nt + 1));
        for (size_t k = 0; k < nt; k++) r->times[k] = (int64_t)tv[k] - 1;
        r->peak_bytes = util_malloc(sizeof(double) * (size_t)(D + 1));
        r->static_bytes = util_malloc(sizeof(double) * (size_t)(D + 1));
        r->budget_bytes = util_malloc(sizeof(double) * (size_t)(D + 1));
        memcpy(r->peak_bytes, peak, sizeof(double) * (size_t)D);
        r->step_peak_bytes = sp;
        sp = NULL;
        memcpy(r->static_bytes, stat, sizeof(double) * (size_t)D);
        memcpy(r->budget_bytes, bud, sizeof(double) * (size_t)D);
        r->max_versions = util_malloc(sizeof(int) * (size_t)(rt->S + 1));
        for (int v = 0; v < rt->S; v++) r->max_versions[v] = (int)ver[v];
        r->version_used = util_malloc(sizeof(int) * (size_t)(n + 1));
        for (int id = 0; id < n; id++) r->version_used[id] = (int)used[id] - 1;
        r->overhead = util_malloc(sizeof(double) * (size_t)(E + 1));
        for (int ep = 0; ep < E; ep++)
            r->overhead[ep] = nw[0] > 0 ? ovh[ep] / nw[0] : 0;
        r->loss = util_malloc(sizeof(double) * (size_t)(nep + 1));
        r->grad_norm = util_malloc(sizeof(double) * (size_t)(nep + 1));
        /* the mean over the minibatch's targets (rt->scale: one over
         * their count, an encoder's masked ones, a T5's decoder's) */
        for (int k = 0; k < nep; k++) {
            r->loss[k] = loss[k] * rt->scale;
            r->grad_norm[k] = rt->async ? NAN : norm[k];
        }
    }
    /* memory curves, per device as its rank 0 recorded them: counts
     * first, then each process fills its devices' segments */
    if (!rc && rt->record_mem) {
        double *cnt = util_calloc((size_t)D + 1, sizeof *cnt);
        for (int d = 0; d < D; d++) {
            exec_worker *w = exec_rt_worker(rt, d * rt->tp);
            if (w) cnt[d] = w->mem.n_pt;
        }
        if (mpi && exec_mpi_sum(cnt, (size_t)D, 1, e)) rc = -1;
        r->mem_off = util_calloc((size_t)D + 1, sizeof(int));
        for (int d = 0; d < D; d++)
            r->mem_off[d + 1] = r->mem_off[d] + (int)cnt[d];
        int tot = r->mem_off[D];
        double *pt = util_calloc(2 * (size_t)tot + 1, sizeof *pt);
        for (int d = 0; d < D && !rc; d++) {
            exec_worker *w = exec_rt_worker(rt, d * rt->tp);
            for (int i = 0; w && i < w->mem.n_pt; i++) {
                pt[2 * (r->mem_off[d] + i)] = (double)w->mem.pt_t[i];
                pt[2 * (r->mem_off[d] + i) + 1] = w->mem.pt_b[i];
            }
        }
        if (!rc && mpi && exec_mpi_sum(pt, 2 * (size_t)tot, 1, e)) rc = -1;
        r->mem_t = util_malloc(sizeof(int64_t) * (size_t)(tot + 1));
        r->mem_b = util_malloc(sizeof(double) * (size_t)(tot + 1));
        for (int i = 0; i < tot; i++) {
            r->mem_t[i] = (int64_t)pt[2 * i];
            r->mem_b[i] = pt[2 * i + 1];
        }
        free(pt);
        free(cnt);
    }
    free(tv);
    free(dv);
    free(sp);
    free(ver);
    return rc;
}

/* The tiers' traffic (the offload schedules' and the stage tiers' drives)
 * and the CPU's AdamW, summed over every worker. */
static int gather_offload(exec_runtime *rt, exec_pipe_result *r, int mpi,
                          util_err *e)
{
    double v[EXEC_TIER_STATS] = {0}, one[EXEC_TIER_STATS];
    for (int i = 0; i < rt->n_local; i++) {
        if (rt->tiers) exec_tiers_stats(&rt->w[i], one);
        else exec_ofl_stats(&rt->w[i], one);
        for (int k = 0; k < (rt->tiers ? EXEC_TIER_STATS : 6); k++)
            v[k] += one[k];
        /* stage tiers' drives and AdamW: the same columns */
        exec_stier_stats(&rt->w[i], one);
        for (int k = 0; k < 6; k++) v[k] += one[k];
        if (!r->ofl_note[0])
            snprintf(r->ofl_note, sizeof r->ofl_note, "%s",
                     rt->tiers ? exec_tiers_note(&rt->w[i])
                               : exec_ofl_note(&rt->w[i]));
    }
    /* host memory: the process's workers' at once; under mpirun each
     * machine's processes' at once, summed over the machines */
    if (rt->tiers)
        v[10] = rt->host_share ? exec_host_share_peak(rt->host_share)
                               : rt->host_peak;
    if (mpi && exec_mpi_sum(v, EXEC_TIER_STATS, 1, e)) return -1;
    r->tier_up_bytes = v[6];
    r->tier_up_s = v[7];
    r->tier_down_bytes = v[8];
    r->tier_down_s = v[9];
    r->tier_host_peak = v[10];
    r->tier_ring_bytes = v[11];
    r->ofl_read_bytes = v[0];
    r->ofl_read_s = v[1];
    r->ofl_write_bytes = v[2];
    r->ofl_write_s = v[3];
    r->adam_params = v[4];
    r->adam_s = v[5];
    return 0;
}

/* On host memory (the CPU backend): the devices this process runs, at
 * their predicted peaks, and its share of the tiers' host memory must
 * fit what the machine has free, or the run would die in an allocation
 * or swap; said before anything is allocated. */
static int host_fits(const exec_runtime *rt, const sim_ir *ir,
                     const sim_costs *c, util_err *e)
{
    sim_run_opts so = {0};
    sim_engine *en = sim_engine_new(ir, c, &so);
    sim_result pr;
    int rc = 0;
    if (sim_engine_run(en, &pr)) {
        sim_engine_free(en);
        return 0;   /* the report says why after the run */
    }
    double dev = 0;
    for (int i = 0; i < rt->n_local; i++) {
        int d = (rt->first_local + i) / (rt->tp > 1 ? rt->tp : 1);
        if (d < pr.n_devices) dev += pr.dev[d].peak_bytes;
    }
    double tiers = c->offload ? c->host_bytes * rt->n_local / rt->n_workers
                              : 0;
    const char *why;
    double have = exec_host_free_bytes(&why);
    if (dev + tiers > have) {
        char a[32], b[32], x[32], y[32] = "";
        if (tiers > 0) {
            char t[32];
            snprintf(y, sizeof y, ", the tiers' %s",
                     util_fmt_bytes(tiers, t, sizeof t));
        }
        rc = util_errf(e, UTIL_EXIT_FAIL, "the run needs about %s of host "
                       "memory (%d device%s at %s predicted%s), and %s is "
                       "%s: plan a smaller run (fewer devices or a smaller "
                       "microbatch) or free memory",
                       util_fmt_bytes(dev + tiers, a, sizeof a), rt->n_local,
                       rt->n_local == 1 ? "" : "s",
                       util_fmt_bytes(dev, b, sizeof b), y,
                       util_fmt_bytes(have, x, sizeof x), why);
    }
    sim_engine_free(en);
    return rc;
}

/* The NVMe tier's files: what the plan keeps on the drives (this
 * process's devices' share) against what their file system has, before
 * the run writes them; a drive filling up midway stops the run too,
 * later and with less said. Exit 1 where it is short. */
static int drive_fits(const exec_runtime *rt, const sim_costs *c,
                      util_err *e)
{
    double drive = c->nvme_bytes * rt->n_local / rt->n_workers;
    if (!(drive > 0)) return 0;
    double room = exec_drive_free_bytes(rt->offload.path);
    if (drive <= room) return 0;
    char a[32], b[32];
    const char *dir = rt->offload.path && *rt->offload.path
                    ? rt->offload.path : ".";
    return util_errf(e, UTIL_EXIT_FAIL, "the run keeps about %s on the "
                     "drive (its NVMe tier, predicted), and '%s' has %s "
                     "free: make room there, give --offload-path a larger "
                     "drive, or plan %s", util_fmt_bytes(drive, a, sizeof a),
                     dir, util_fmt_bytes(room, b, sizeof b),
                     c->offload ? "the states in host memory (--offload-tier "
                                  "dram)"
                                : "the stages' state in host memory "
                                  "(--state-tiers with dram, not nvme)");
}

int exec_pipe_run(const exec_pipe_opts *o, exec_pipe_result *r, util_err *e)
{
    memset(r, 0, sizeof *r);
    const sim_plan *p = o->plan;
    const char *where = o->plan_path ? o->plan_path : "plan";
    prof_model_spec spec;
    exec_gpt_config cfg;
    /* a plan file's field that fails names its line */
#define FIELD_ERR(f) \
    (o->plan_path ? sim_plan_field_err(e, o->plan_path, f) \
                  : util_err_prefix(e, "%s", where))
    if (prof_model_spec_get(p->model, &spec, e))
        return FIELD_ERR("model");
    if (prof_spec_set_seq(&spec, p->seq_len, e)) return FIELD_ERR("seq_len");
    prof_spec_set_flash(&spec, p->flash);
    if (exec_gpt_config_from_spec(&spec, &cfg, p->model, e))
        return FIELD_ERR("model");
    /* the run is predicted as it runs: every backend computes and keeps
     * its weights in fp32 (a GPU's bf16 peak would price it 10x too
     * fast), without dropout (the masks would add memory it never uses),
     * and its loss is one kernel (softmax_xent: the probabilities kept,
     * the gradient written in place) */
    spec.dtype = PROF_DT_FP32;
    spec.dropout = 0;
    spec.fused_loss = 1;
    spec.tf32 = o->tf32;   /* its products on tensor cores (CUDA) */
    if (!(r->topo = load_hw(p->hw, e))) return FIELD_ERR("hw");
    if (!(r->model = prof_model_build(&spec, e))) return FIELD_ERR("model");
    if (prof_model_finetune(r->model, &p->ft, e)) return FIELD_ERR("finetune");
#undef FIELD_ERR
    char pfield[64];
    if (sim_plan_check_at(p, r->model, r->topo->n_gpus,
                          prof_topo_unit(r->topo), pfield, sizeof pfield, e))
        return o->plan_path && pfield[0]
                   ? sim_plan_field_err(e, o->plan_path, pfield)
                   : util_err_prefix(e, "%s", where);
    if (sim_plan_check_topo(p, r->topo, e))
        return o->plan_path ? sim_plan_field_err(e, o->plan_path, "tp")
                            : util_err_prefix(e, "%s", where);
    if (finetune_check(o, p, where, e) || zero_check(o, p, where, e))
        return -1;
    if (stier_check(o, p, where, e)) return -1;
    int T = spec.seq_len > 0 ? spec.seq_len : cfg.max_pos;
    if (T < 1)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: model %s has neither a "
                         "sequence length nor a position table", where,
                         p->model);
    if (!exec_rope(&cfg) && !cfg.t5 && T > cfg.max_pos)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: sequence %d exceeds the "
                         "model's position table (%d)", where, T, cfg.max_pos);
    if (exec_corpus_vocab_check(&cfg, where, e)) return -1;
    exec_runtime rt;
    memset(&rt, 0, sizeof rt);
    rt.plan = p;
    rt.model = r->model;
    rt.cfg = cfg;
    rt.mbs = p->mbs;
    rt.T = T;
    /* T5: the decoder's length and each stack's buckets per offset */
    rt.Td = cfg.t5 ? spec.dec_seq_len : 0;
    rt.tp = p->tp > 1 ? p->tp : 1;
    rt.sp = p->sp && rt.tp > 1;
    rt.dp = p->dp > 1 ? p->dp : 1;
    rt.pipes = sim_sched_pipes(p->sched);
    rt.async = sim_sched_async(p->sched);
    rt.recompute = p->recompute;
    r->cfg = cfg;
    r->T = T;
    r->B = p->mbs * p->n_mb * rt.dp;
    r->async = rt.async;
    /* the starting state, before the schedule (its size depends on the
     * steps left) */
    exec_tensor tt[EXEC_P_COUNT];
    size_t P = exec_gpt_param_table(&cfg, tt);
    const exec_backend *be = o->backend ? o->backend : &exec_backend_cpu;
    if (o->xport == EXEC_XPORT_NCCL && strcmp(be->name, "cuda"))
        return util_errf(e, UTIL_EXIT_USAGE, "--transport nccl moves GPU "
                         "memory: use it with --backend cuda");
    if (o->tf32 && !be->set_tf32)
        return util_errf(e, UTIL_EXIT_USAGE, "--tf32: the %s backend has no "
                         "TF32 math (it is a GPU's tensor-core mode): use it "
                         "with --backend cuda", be->name);
    /* the whole state at the start and end (weights, AdamW m and v) and,
     * when devices are cores, every device's stages (weights, gradients,
     * m, v): refused up front when the machine cannot hold it, whatever
     * the budget says */
    double need = 12.0 * (double)P;
    if (be->host_memory) need += 16.0 * (double)P * (p->dp > 1 ? p->dp : 1);
    const char *why;
    double host = exec_host_mem_bytes(), avail = exec_host_free_bytes(&why);
    if (host > 0 && need > host) {
        char a[32], b[32];
        return util_errf(e, UTIL_EXIT_USAGE, "%s: %s does not fit this "
                         "machine: its state needs %s (whole, and its "
                         "devices' parts), the machine has %s of memory",
                         where, p->model, util_fmt_bytes(need, a, sizeof a),
                         util_fmt_bytes(host, b, sizeof b));
    }
    if (need > avail) {
        char a[32], b[32];
        return util_errf(e, UTIL_EXIT_FAIL, "%s: %s does not fit now: its "
                         "state needs %s (whole, and its devices' parts), "
                         "and %s is %s", where, p->model,
                         util_fmt_bytes(need, a, sizeof a),
                         util_fmt_bytes(avail, b, sizeof b), why);
    }
    int n_lt;
    size_t NL = exec_lora_table(&cfg, &p->ft, NULL, &n_lt);
    /* a checkpoint that cannot fit its folder is said now, not after
     * the training it was to keep */
    if (util_out_room("--save", o->save,
                      exec_ckpt_bytes(P, exec_plan_resumable(p) ? NL : 0), e))
        return util_err_prefix(e, "%s", where);
    if (exec_xops_build(r->model, &cfg, p->mbs, T, rt.tp, rt.sp, &rt.xop,
                        e))
        return util_err_prefix(e, "%s", where);
    float *full = util_malloc(sizeof(float) * (P + 1));
    float *am = util_calloc(P + 1, sizeof(float));
    float *av = util_calloc(P + 1, sizeof(float));
    float *lora = NL ? util_calloc(NL, sizeof(float)) : NULL;
    float *lm = NL ? util_calloc(NL, sizeof(float)) : NULL;
    float *lv = NL ? util_calloc(NL, sizeof(float)) : NULL;
    float *base = NULL;
    uint64_t seed = o->seed;
    int step0 = 0, rc = -1;
    exec_corpus corpus = {0};
    exec_xport *x = NULL;
    int mpi = 0, rank = 0, size = 1, ran = 0;
    if (initial_state(o, &cfg, r->B, T, full, am, av, lora, lm, lv, NL,
                      &step0, &seed, e))
        goto out;
    /* a LoRA run's base as it starts (QLoRA's before rounding): what
     * its own state keeps, to go on from */
    if (lora) {
        base = util_malloc(sizeof(float) * (P + 1));
        memcpy(base, full, sizeof(float) * P);
    }
    if (lora && !(o->resume && step0)) exec_lora_init(&cfg, &p->ft, seed,
                                                      lora);
    if (exec_steps_left(o->resume, o->steps, o->stop_after, step0, e))
        goto out;
    int end = o->stop_after > 0 && o->stop_after < o->steps ? o->stop_after
                                                            : o->steps;
    int left = end - step0;
    if (rt.async && left < 3) {
        /* --stop-after is what ends it, and --steps leaves room */
        int cut = end < o->steps && step0 + 3 <= o->steps;
        util_errf(e, UTIL_EXIT_USAGE, "schedule %s has no flush: its "
                  "minibatches overlap, so a run takes at least 3 steps in "
                  "one go; %d %s left to run (--steps %d%s): give %s %d or "
                  "more", sim_sched_name(p->sched), left,
                  left == 1 ? "is" : "are", o->steps,
                  end < o->steps ? " and --stop-after" : "",
                  cut ? "--stop-after" : "--steps", step0 + 3);
        goto out;
    }
    sim_cost_opts co = sim_plan_cost_opts(p);
    co.fold = 0;
    /* its sharding as it runs: whole stages gathered, whole gradients
     * reduced (sluice sim prices FSDP's layer at a time) */
    co.whole_shards = 1;
    /* and its sequence parallelism's weight-gradient collectives, which
     * it runs exposed (sluice sim prices Megatron-LM's overlap) */
    co.sp_exposed = 1;
    r->costs = sim_costs_build(r->model, r->topo, p->n_stages, p->first_op,
                               p->last_op, p->stage_device, p->pp, &co, e);
    if (!r->costs) {
        if (o->plan_path)
            sim_plan_costs_err(p, r->topo, o->plan_path, e);
        else
            util_err_prefix(e, "%s", where);
        goto out;
    }
    sim_sched_opts so = sim_plan_sched_opts(p);
    if (rt.async) so.n_minibatches = left;
    if (p->sched_file[0]) {
        if (!sim_sched_check(&so, e))
            r->ir = sim_schedule_file(p->sched_file, &so, r->costs, e);
    } else {
        r->ir = sim_schedule(&so, r->costs, e);
    }
    if (!r->ir) {
        util_err_prefix(e, "%s", where);
        goto out;
    }
    rt.ir = r->ir;
    rt.tiers = r->costs->offload != 0;
    rt.stage_tiers = r->costs->stage_tiers > 0;
    rt.tier_sched = r->costs->offload;
    rt.tier = r->costs->tier;
    rt.act_tier = r->costs->act_tier;
    r->tiers = rt.tiers;
    r->tier_sched = rt.tier_sched;
    r->tier = rt.tier;
    r->act_tier = rt.act_tier;
    if (rt.tiers && o->offload.policy != EXEC_OFFLOAD_NONE) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: schedule %s moves the model "
                  "states itself: --offload %s is for plans that keep them "
                  "on the device (give --offload-path only)", where,
                  sim_sched_name(p->sched),
                  exec_offload_name(o->offload.policy));
        goto out;
    }
    rt.zero = r->costs->zero;
    rt.shard = r->costs->shard;
    rt.epochs = rt.async ? 1 : left;
    rt.n_workers = r->ir->n_devices * rt.tp;
    r->n_devices = r->ir->n_devices;
    r->n_workers = rt.n_workers;
    r->step_first = step0;
    if (cfg.t5) {
        rt.n_t5_buckets = 2 * T - 1 + 2 * rt.Td - 1;
        rt.t5_buckets = util_malloc(sizeof(int) * (size_t)rt.n_t5_buckets);
        exec_t5_buckets(rt.t5_buckets, T, T, 1, cfg.rel_buckets,
                        cfg.rel_max_dist);
        exec_t5_buckets(rt.t5_buckets + 2 * T - 1, rt.Td, rt.Td, 0,
                        cfg.rel_buckets, cfg.rel_max_dist);
    }
    /* a T5 reads a window of both lengths (fill_t5) */
    if (exec_corpus_load(&corpus, o->data, T + rt.Td, e)) goto out;
    /* a device is one core: OpenBLAS and the kernels' pool single-threaded
     * (OpenBLAS's own threads would spin against the other workers) */
    kern_set_threads(1);
    rt.corpus = &corpus;
    rt.be = be;
    snprintf(r->backend, sizeof r->backend, "%s", be->name);
    r->tf32 = o->tf32;
    if (be->set_tf32) be->set_tf32(o->tf32);
    rt.seed = seed;
    rt.adamw = o->adamw;
    rt.total_steps = o->steps;
    rt.warmup = o->warmup >= 0 ? o->warmup : o->steps / 10;
    if (rt.warmup < 1) rt.warmup = 1;
    rt.step0 = step0;
    /* the loss is the mean over the minibatch's targets: every token's,
     * an encoder's masked ones (exec_mlm_mask: as many in every row) */
    rt.scale = 1.0 / ((double)r->B * (rt.cfg.encoder ? exec_mlm_count(T)
                                      : rt.cfg.t5 ? rt.Td : T));
    rt.budget = o->mem_budget_bytes > 0 ? o->mem_budget_bytes
                                        : prof_topo_gpu(r->topo, 0)->mem_bytes;
    rt.budget_given = o->mem_budget_bytes > 0;
    rt.record_mem = o->record_mem;
    rt.op_timing = o->op_timing;
    rt.offload = o->offload;
    r->offload = o->offload;
    rt.stop_flag = o->stop;
    rt.on_step = o->on_step;
    rt.on_step_ctx = o->on_step_ctx;
    rt.fault_worker = o->fault_task > 0 ? o->fault_worker : -1;
    rt.fault_task = o->fault_task;
    rt.fault_kill = o->fault_kill;
    rt.slow_worker = o->slow_us > 0 ? o->slow_worker : -1;
    rt.slow_us = o->slow_us;
    mpi = o->xport == EXEC_XPORT_MPI || o->xport == EXEC_XPORT_NCCL ||
          (o->xport == EXEC_XPORT_AUTO && exec_mpi_launched());
    if (mpi) {
        if (exec_mpi_init(&rank, &size, e)) goto out;
        /* before any rank sets up a device the plan does not have */
        if (size != rt.n_workers) {
            char tpw[64] = "";
            if (rt.tp > 1)
                snprintf(tpw, sizeof tpw, " (%d workers with tensor "
                         "parallelism)", rt.n_workers);
            util_errf(e, UTIL_EXIT_USAGE, "the plan runs on %d device%s%s, "
                      "mpirun started %d rank%s: use mpirun -np %d",
                      rt.n_workers / rt.tp, rt.n_workers / rt.tp == 1 ? ""
                      : "s", tpw, size, size == 1 ? "" : "s", rt.n_workers);
            goto out;
        }
        rt.first_local = rank;
        rt.n_local = 1;
    } else {
        rt.n_local = rt.n_workers;
    }
    r->rank = rank;
    r->n_ranks = size;
    rt.lora_m0 = step0 ? lm : NULL;
    rt.lora_v0 = step0 ? lv : NULL;
    if ((be->host_memory && host_fits(&rt, r->ir, r->costs, e)) ||
        drive_fits(&rt, r->costs, e)) {
        util_err_prefix(e, "%s", where);
        goto out;
    }
    /* the offload tiers' host memory, one count a machine (every rank
     * has the plan: all of them or none make it) */
    if (mpi && rt.tiers && exec_mpi_host_share(&rt.host_share, e)) goto out;
    if (exec_rt_setup(&rt, full, step0 ? am : NULL, step0 ? av : NULL, lora,
                      e) ||
        exec_mpi_host_share_start(rt.host_share, e))
        goto out_rt;
    /* GPUs fewer than workers: workers share one (worker modulo GPUs) */
    for (int i = 0; i < rt.n_local && !be->host_memory; i++)
        for (int j = i + 1; j < rt.n_local; j++)
            if (rt.w[i].dev.index == rt.w[j].dev.index && !r->shared_gpu)
                r->shared_gpu = 1 + rt.w[i].dev.index;
    if (o->own_gpus && r->shared_gpu) {
        util_errf(e, UTIL_EXIT_USAGE, "%s: its %d workers would share "
                  "GPU %d, and a shared GPU's op times hold the other "
                  "workers' kernels; calibrate from a plan with a GPU per "
                  "worker (nothing was run)", where, rt.n_local,
                  r->shared_gpu - 1);
        goto out_rt;
    }
    x = xport_new(o, &rt, mpi, e);
    if (!x) goto out_rt;
    rt.x = x;
    snprintf(r->xport, sizeof r->xport, "%s", x->name);
    if (o->on_start) o->on_start(o->on_start_ctx);
    ran = 1;
    if (exec_rt_run(&rt)) {
        *e = rt.err;
        goto out_rt;
    }
    int stop = atomic_load(&rt.stop_epoch);
    r->steps_run = rt.async ? (stop < rt.K ? stop + 1 : rt.K)
                            : (stop < rt.epochs ? stop : rt.epochs);
    r->stopped = rt.async ? stop < rt.K - 1 : stop < rt.epochs;
    if (r->steps_run > left) r->steps_run = left;
    if (gather(&rt, r, mpi, e) || gather_op_times(&rt, r, mpi, e) ||
        gather_offload(&rt, r, mpi, e))
        goto out_rt;
    /* the final state, whole (each value from its one owner) */
    memset(full, 0, sizeof(float) * P);
    memset(am, 0, sizeof(float) * P);
    memset(av, 0, sizeof(float) * P);
    if (lora) {
        memset(lora, 0, sizeof(float) * NL);
        memset(lm, 0, sizeof(float) * NL);
        memset(lv, 0, sizeof(float) * NL);
    }
    if (exec_rt_collect(&rt, full, am, av, lora, lm, lv, e)) goto out_rt;
    if (mpi && (exec_mpi_sum(full, P, 0, e) || exec_mpi_sum(am, P, 0, e) ||
                exec_mpi_sum(av, P, 0, e) ||
                (lora && (exec_mpi_sum(lora, NL, 0, e) ||
                          exec_mpi_sum(lm, NL, 0, e) ||
                          exec_mpi_sum(lv, NL, 0, e)))))
        goto out_rt;
    r->params = full;
    r->adam_m = am;
    r->adam_v = av;
    r->n_params = P;
    r->lora = lora;
    r->lora_m = lm;
    r->lora_v = lv;
    r->base = base;
    r->n_lora = NL;
    full = am = av = lora = lm = lv = base = NULL;
    rc = 0;
out_rt:
    if (x) x->free(x);
    exec_rt_free(&rt);
    rt.xop = NULL;
out:
    /* under mpirun a rank that fails before the run (its host short of
     * memory, its device) leaves the others waiting in a collective, and
     * only rank 0 prints: it says why and ends the job (the run's own
     * failures reach every rank through the runtime) */
    if (rc && mpi && size > 1 && !ran) {
        fprintf(stderr, "sluice exec: rank %d: %s\n", rank, e->msg);
        fflush(stderr);
        exec_mpi_abort(e->code ? e->code : UTIL_EXIT_FAIL);
    }
    free(rt.xop);
    free(rt.t5_buckets);
    free(full);
    free(am);
    free(av);
    free(lora);
    free(lm);
    free(lv);
    free(base);
    exec_corpus_free(&corpus);
    return rc;
}
