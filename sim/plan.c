/* The plan file: everything needed to simulate (or execute) a run again:
 * model, hardware, schedule and its knobs, and the partition as op ranges
 * with a device per stage. Loaded with located errors, written atomically.
 * Also the partitioners the command line offers (even, balanced, list). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sim/sim.h"

#define PLAN_FORMAT 1

void sim_plan_init(sim_plan *p)
{
    memset(p, 0, sizeof *p);
    p->sched = SIM_SCHED_1F1B;
    p->pp = p->dp = p->tp = 1;
    p->mbs = 1;
    p->n_mb = 1;
    p->waves = 1;
    p->chunks = 1;
    p->n_minibatches = 0;
    p->grad_bucket = SIM_GRAD_BUCKET_AUTO;
}

int sim_zero_check(int zero, int fsdp, int dp, sim_sched s, util_err *e)
{
    if (zero < 0 || zero > 3)
        return util_errf(e, UTIL_EXIT_USAGE, "zero %d: a ZeRO stage is 0, "
                         "1, 2 or 3", zero);
    if (fsdp < 0 || fsdp >= SIM_FSDP_COUNT)
        return util_errf(e, UTIL_EXIT_USAGE, "fsdp %d: not a mode", fsdp);
    if (fsdp && zero && zero != 3)
        return util_errf(e, UTIL_EXIT_USAGE, "fsdp %s with zero %d: FSDP "
                         "shards parameters, gradients and optimizer state "
                         "(ZeRO stage 3)", sim_fsdp_name(fsdp), zero);
    if (!sim_zero_stage(zero, fsdp)) return 0;
    char what[32];
    if (fsdp) snprintf(what, sizeof what, "fsdp %s", sim_fsdp_name(fsdp));
    else snprintf(what, sizeof what, "zero %d", zero);
    if (dp < 2)
        return util_errf(e, UTIL_EXIT_USAGE, "%s needs data parallelism "
                         "(dp %d): it shards over the data-parallel group",
                         what, dp);
    if (sim_sched_async(s))
        return util_errf(e, UTIL_EXIT_USAGE, "%s with schedule %s: a "
                         "schedule without flush keeps weight versions, "
                         "which are not sharded here", what,
                         sim_sched_name(s));
    if (sim_sched_pipes(s) > 1)
        return util_errf(e, UTIL_EXIT_USAGE, "%s with schedule %s: its two "
                         "weight replicas per rank are not sharded here",
                         what, sim_sched_name(s));
    return 0;
}

void sim_plan_free(sim_plan *p)
{
    if (!p) return;
    free(p->first_op);
    free(p->last_op);
    free(p->stage_device);
    free(p->from_op);
    free(p->to_op);
    free(p->state_tier);
    p->first_op = p->last_op = p->stage_device = NULL;
    p->from_op = p->to_op = NULL;
    p->state_tier = NULL;
    p->n_stages = 0;
}

void sim_plan_stages(sim_plan *p, int n)
{
    free(p->first_op);
    free(p->last_op);
    free(p->stage_device);
    free(p->from_op);
    free(p->to_op);
    free(p->state_tier);
    p->n_stages = n;
    p->state_tier = util_calloc((size_t)n + 1, 1);
    p->from_op = util_calloc((size_t)n + 1, sizeof *p->from_op);
    p->to_op = util_calloc((size_t)n + 1, sizeof *p->to_op);
    p->first_op = util_calloc((size_t)n + 1, sizeof(int));
    p->last_op = util_calloc((size_t)n + 1, sizeof(int));
    p->stage_device = util_calloc((size_t)n + 1, sizeof(int));
}

/* "recompute": "none", "full" or "selective"; plan files before the
 * modes said true (full) or false. */
static int plan_recompute(const util_jobj *r, sim_plan *p, util_err *e)
{
    json_t *v = json_object_get(r->j, "recompute");
    if (!v) return 0;
    if (json_is_boolean(v)) {
        p->recompute = json_is_true(v) ? SIM_RC_FULL : SIM_RC_NONE;
        return 0;
    }
    int rc = json_is_string(v) ? sim_recompute_parse(json_string_value(v))
                               : -1;
    if (rc < 0)
        return util_jerr(e, r, "recompute", "must be \"full\", "
                         "\"selective\" or \"none\" (or true / false)");
    p->recompute = rc;
    return 0;
}

int sim_plan_field_err(util_err *e, const char *file, const char *field)
{
    char *text = NULL;
    int line = 0, col = 0;
    if (!util_read_file_max(file, (size_t)1 << 30, &text, NULL, NULL))
        util_json_locate(text, field, &line, &col);
    free(text);
    if (line > 0)
        return util_err_prefix(e, "%s:%d:%d: field '%s'", file, line, col,
                               field);
    return util_err_prefix(e, "%s: field '%s' (not in the file: its "
                           "default)", file, field);
}

/* Whether p keeps something on NVMe (its offload tier, a stage's state
 * tier) where t has no drive at all: the costs then fail for the hw. */
static int wants_absent_drives(const sim_plan *p, const prof_topo *t)
{
    for (int v = 0; v < t->n_nodes; v++)
        if (t->nodes[v].kind == PROF_NODE_NVME) return 0;
    if (sim_sched_offload(p->sched) && p->tier == SIM_TIER_NVME) return 1;
    for (int s = 0; p->state_tier && s < p->n_stages; s++)
        if (p->state_tier[s] == SIM_TIER_NVME) return 1;
    return 0;
}

int sim_plan_costs_err(const sim_plan *p, const prof_topo *t,
                       const char *file, util_err *e)
{
    /* host DRAM and drives are the hw's (its --host-mem, --nvme or
     * server file): a plan they cannot hold is that field's error, so
     * the user edits the file, not the command line the message names */
    if (e && (e->lack || wants_absent_drives(p, t)))
        return sim_plan_field_err(e, file, "hw");
    return util_err_prefix(e, "%s", file);
}

prof_model *sim_plan_model_file(const sim_plan *p, const prof_topo *t,
                                const char *file, util_err *e)
{
    prof_model_spec s;
    prof_model *m = NULL;
    if (!prof_model_spec_get(p->model, &s, e)) {
        prof_spec_set_math(&s, p->math);
        prof_spec_set_flash(&s, p->flash);
        if (prof_spec_set_seq(&s, p->seq_len, e)) {
            if (file) sim_plan_field_err(e, file, "seq_len");
            return NULL;
        }
        m = prof_model_for_topo(prof_model_build(&s, e), t, e);
    }
    if (!m) {
        if (file) sim_plan_field_err(e, file, "model");
        return NULL;
    }
    if (prof_model_finetune(m, &p->ft, e)) {
        if (file) sim_plan_field_err(e, file, "finetune");
        prof_model_free(m);
        return NULL;
    }
    return m;
}

prof_model *sim_plan_model(const sim_plan *p, const prof_topo *t,
                           util_err *e)
{
    return sim_plan_model_file(p, t, NULL, e);
}

static void spec_path(const char *spec, char path[256]);

/* A relative file the plan names (model, server, schedule CSV) that is
 * not there from the working directory is looked for beside the plan, so
 * a plan and its files can move together; from the working directory
 * first, where the plan's maker named it from. */
static void plan_rebase(char *val, size_t n, const char *plan)
{
    char file[256], cand[512];
    struct stat st;
    spec_path(val, file);
    const char *slash = strrchr(plan, '/');
    if (!file[0] || file[0] == '/' || !slash || !stat(file, &st)) return;
    size_t rest = strlen(file);
    int k = snprintf(cand, sizeof cand, "%.*s/%s%s", (int)(slash - plan),
                     plan, file, val + rest);
    if (k < 0 || (size_t)k >= n || (size_t)k >= sizeof cand) return;
    char cf[256];
    spec_path(cand, cf);
    if (stat(cf, &st) || !S_ISREG(st.st_mode)) return;
    memcpy(val, cand, (size_t)k + 1);
}

int sim_plan_load(const char *path, sim_plan *p, util_err *e)
{
    static const char *const keys[] = {
        "sluice_plan", "model", "hw", "schedule", "pp", "dp", "tp", "mbs",
        "microbatches", "recompute", "waves", "minibatches",
        "state_bytes_per_param", "stages", "chunks", "layout",
        "schedule_file", "gpus_used", "sequence_parallel", "zero", "fsdp",
        "finetune", "offload_tier", "act_swap_checkpoints",
        "act_swap_whole", "dtype", "seq_len", "flash_attn", "grad_bucket_mib",
        "model_sum", "hw_sum", NULL};
    static const char *const skeys[] = {"ops", "device", "from", "to",
                                        "state_tier", NULL};
    util_jdoc d;
    sim_plan_init(p);
    if (util_jdoc_load(&d, path, NULL, e)) return -1;
    util_jobj r = util_jroot(&d);
    int rc = -1;
    long v;
    int sched = 0;
    json_t *arr;
    if (!json_is_object(r.j)) {
        util_jerr(e, &r, NULL, "a plan is a JSON object");
        goto out;
    }
    if (util_jkeys(&r, keys, e)) goto out;
    if (util_jint(&r, "sluice_plan", 1, 1, PLAN_FORMAT, &v, e)) goto out;
    if (util_jstr(&r, "model", 1, p->model, sizeof p->model, e)) goto out;
    if (util_jstr(&r, "hw", 1, p->hw, sizeof p->hw, e)) goto out;
    if (util_jstr(&r, "model_sum", 0, p->model_sum, sizeof p->model_sum,
                  e) ||
        util_jstr(&r, "hw_sum", 0, p->hw_sum, sizeof p->hw_sum, e))
        goto out;
    {
        /* names and aliases (util_jenum would take the names alone) */
        char sn[128];
        if (util_jstr(&r, "schedule", 1, sn, sizeof sn, e)) goto out;
        if ((sched = sim_sched_parse(sn)) < 0) {
            char known[256];
            const char *near = util_closest(sn, sim_sched_names(),
                                            SIM_SCHED_COUNT);
            util_jerr(e, &r, "schedule", "unknown value '%s'%s%s%s "
                      "(known: %s, file)", sn, near ? " (did you mean '" : "",
                      near ? near : "", near ? "'?)" : "",
                      sim_sched_list(known, sizeof known));
            goto out;
        }
    }
    p->sched = (sim_sched)sched;
    if (util_jint(&r, "pp", 1, 1, 4096, &v, e)) goto out;
    p->pp = (int)v;
    v = 1;
    if (util_jint(&r, "dp", 0, 1, 4096, &v, e)) goto out;
    p->dp = (int)v;
    v = 1;
    if (util_jint(&r, "tp", 0, 1, 4096, &v, e)) goto out;
    p->tp = (int)v;
    v = 1;
    if (util_jint(&r, "chunks", 0, 1, 64, &v, e)) goto out;
    p->chunks = (int)v;
    v = 0;
    if (util_jint(&r, "gpus_used", 0, 1, 65536, &v, e)) goto out;
    if (v && v != sim_plan_gpus(p)) {
        util_jerr(e, &r, "gpus_used", "%ld, but dp %d x pp %d x tp %d = %ld",
                  v, p->dp, p->pp, p->tp, sim_plan_gpus(p));
        goto out;
    }
    p->gpus_used = (int)v;
    {
        static const char *const layouts[] = {"dp-pp-tp", NULL};
        int lay = 0;
        if (json_object_get(r.j, "layout") &&
            util_jenum(&r, "layout", 0, layouts, &lay, e))
            goto out;
    }
    if (util_jstr(&r, "schedule_file", 0, p->sched_file,
                  sizeof p->sched_file, e))
        goto out;
    plan_rebase(p->model, sizeof p->model, path);
    plan_rebase(p->hw, sizeof p->hw, path);
    if (p->sched_file[0])
        plan_rebase(p->sched_file, sizeof p->sched_file, path);
    if (util_jint(&r, "mbs", 1, 1, 1 << 20, &v, e)) goto out;
    p->mbs = (int)v;
    if (util_jint(&r, "microbatches", 1, 1, 1000000, &v, e)) goto out;
    p->n_mb = (int)v;
    if (plan_recompute(&r, p, e)) goto out;
    if (util_jbool(&r, "sequence_parallel", 0, &p->sp, e)) goto out;
    if (p->sp && p->tp < 2) {
        util_jerr(e, &r, "sequence_parallel", "true needs tensor "
                  "parallelism (tp %d): the sequence is split over the "
                  "tensor-parallel group", p->tp);
        goto out;
    }
    v = 0;
    if (util_jint(&r, "zero", 0, 0, 3, &v, e)) goto out;
    p->zero = (int)v;
    if (json_object_get(r.j, "fsdp")) {
        static const char *const fs[] = {"none", "full", "hybrid", NULL};
        if (util_jenum(&r, "fsdp", 0, fs, &p->fsdp, e)) goto out;
    }
    {
        util_err ze;
        if (sim_zero_check(p->zero, p->fsdp, p->dp, p->sched, &ze)) {
            util_jerr(e, &r, p->fsdp ? "fsdp" : "zero", "%s", ze.msg);
            goto out;
        }
    }
    {
        char ft[64] = "full";
        util_err fe;
        if (util_jstr(&r, "finetune", 0, ft, sizeof ft, e)) goto out;
        if (prof_finetune_parse(ft, &p->ft, &fe)) {
            util_jerr(e, &r, "finetune", "%s", fe.msg);
            goto out;
        }
    }
    if (json_object_get(r.j, "dtype")) {
        char dt[16];
        util_err de;
        if (util_jstr(&r, "dtype", 0, dt, sizeof dt, e)) goto out;
        if (prof_math_parse(dt, &p->math, &de)) {
            util_jerr(e, &r, "dtype", "'%s': expected fp32, tf32, fp16 or "
                      "bf16", dt);
            goto out;
        }
    }
    v = 0;
    if (util_jint(&r, "seq_len", 0, 1, PROF_MAX_SEQ, &v, e)) goto out;
    p->seq_len = (int)v;
    if (json_object_get(r.j, "flash_attn")) {
        int f = 0;
        if (util_jbool(&r, "flash_attn", 0, &f, e)) goto out;
        p->flash = f ? 1 : -1;
    }
    if (json_object_get(r.j, "grad_bucket_mib")) {
        double mib = 0;
        if (util_jnum(&r, "grad_bucket_mib", 0, 0, 1 << 20, &mib, e))
            goto out;
        if (!sim_grad_bucket_ok(mib * 1024 * 1024)) {
            util_jerr(e, &r, "grad_bucket_mib", "%g MiB: a bucket is 0 (one "
                      "all-reduce a stage) or from 1 KiB to 1 TiB", mib);
            goto out;
        }
        p->grad_bucket = mib * 1024 * 1024;
    }
    if (json_object_get(r.j, "offload_tier")) {
        static const char *const ts[] = {"auto", "dram", "nvme", NULL};
        if (util_jenum(&r, "offload_tier", 0, ts, &p->tier, e)) goto out;
        if (!sim_sched_offload(p->sched)) {
            util_jerr(e, &r, "offload_tier", "schedule %s keeps its states "
                      "on the GPU (zero-offload, zero-infinity and fuyou "
                      "offload)", sim_sched_name(p->sched));
            goto out;
        }
    }
    for (int k = 0; k < 2; k++) {
        const char *key = k ? "act_swap_whole" : "act_swap_checkpoints";
        if (!json_object_get(r.j, key)) continue;
        if (!sim_sched_offload(p->sched)) {
            util_jerr(e, &r, key, "schedule %s swaps no activations "
                      "(zero-offload, zero-infinity and fuyou do)",
                      sim_sched_name(p->sched));
            goto out;
        }
        v = 0;
        if (util_jint(&r, key, 0, 0, 1 << 20, &v, e)) goto out;
        *(k ? &p->swap_full : &p->swap_ckpt) = (int)v;
        if (v && k && p->sched != SIM_SCHED_FUYOU) {
            util_jerr(e, &r, key, "schedule %s recomputes every stage from "
                      "its checkpoint: only fuyou swaps whole activations",
                      sim_sched_name(p->sched));
            goto out;
        }
        if (v && !k && !p->recompute) {
            util_jerr(e, &r, key, "without recomputation there are no "
                      "checkpoints to swap");
            goto out;
        }
    }
    v = 1;
    if (util_jint(&r, "waves", 0, 1, 64, &v, e)) goto out;
    if (v != 1 && p->sched != SIM_SCHED_WAVE) {
        util_jerr(e, &r, "waves", "%ld waves, but schedule %s has none "
                  "(waves are the wave schedule's; 1 for the others)", v,
                  sim_sched_name(p->sched));
        goto out;
    }
    p->waves = (int)v;
    v = 0;
    /* read by the schedules without a flush only: the first plan files
     * said 4 for every schedule */
    if (util_jint(&r, "minibatches", 0, 1, 64, &v, e)) goto out;
    p->n_minibatches = (int)v;
    if (util_jnum(&r, "state_bytes_per_param", 0, 0, 1024,
                  &p->state_bytes_per_param, e))
        goto out;
    if (util_jarray(&r, "stages", 1, &arr, e)) goto out;
    if (json_array_size(arr) == 0) {
        util_jerr(e, &r, "stages", "a plan needs at least one stage");
        goto out;
    }
    sim_plan_stages(p, (int)json_array_size(arr));
    for (int s = 0; s < p->n_stages; s++) {
        util_jobj so;
        if (util_jelem(&r, "stages", arr, (size_t)s, &so, e)) goto out;
        if (util_jkeys(&so, skeys, e)) goto out;
        json_t *ops;
        if (util_jarray(&so, "ops", 1, &ops, e)) goto out;
        if (json_array_size(ops) != 2 ||
            !json_is_integer(json_array_get(ops, 0)) ||
            !json_is_integer(json_array_get(ops, 1))) {
            util_jerr(e, &so, "ops", "must be [first, last]: two op indices");
            goto out;
        }
        p->first_op[s] = (int)json_integer_value(json_array_get(ops, 0));
        p->last_op[s] = (int)json_integer_value(json_array_get(ops, 1));
        if (util_jint(&so, "device", 1, 0, 4095, &v, e)) goto out;
        p->stage_device[s] = (int)v;
        if (util_jstr(&so, "from", 0, p->from_op[s], sizeof p->from_op[s], e) ||
            util_jstr(&so, "to", 0, p->to_op[s], sizeof p->to_op[s], e))
            goto out;
        if (json_object_get(so.j, "state_tier")) {
            static const char *const ts[] = {"gpu", "dram", "nvme", NULL};
            int t = 0;
            if (util_jenum(&so, "state_tier", 0, ts, &t, e)) goto out;
            if (t && sim_sched_offload(p->sched)) {
                util_jerr(e, &so, "state_tier", "schedule %s places every "
                          "stage's states itself (give none, or \"gpu\")",
                          sim_sched_name(p->sched));
                goto out;
            }
            p->state_tier[s] = (unsigned char)t;
        }
    }
    if (p->swap_ckpt > p->n_stages || p->swap_full > p->n_stages) {
        const char *key = p->swap_ckpt > p->n_stages ? "act_swap_checkpoints"
                                                     : "act_swap_whole";
        util_jerr(e, &r, key, "%d: the plan has %d stages",
                  p->swap_ckpt > p->n_stages ? p->swap_ckpt : p->swap_full,
                  p->n_stages);
        goto out;
    }
    rc = 0;
out:
    util_jdoc_free(&d);
    return rc;
}

/* The plan file's field an error of sim_plan_check is about. */
#define AT(...) snprintf(field, nfield, __VA_ARGS__)

long sim_plan_gpus(const sim_plan *p)
{
    return (long)p->pp * (p->dp > 1 ? p->dp : 1) * (p->tp > 1 ? p->tp : 1);
}

int sim_plan_check_at(const sim_plan *p, const prof_model *m, int n_gpus,
                      const char *unit, char *field, size_t nfield,
                      util_err *e)
{
    if (nfield) field[0] = 0;
    long ngpu = sim_plan_gpus(p);
    /* the GPU counts: what they are checked against is the hw's */
    if (ngpu > n_gpus) {
        AT("hw");
        return util_errf(e, UTIL_EXIT_USAGE, "dp %d x pp %d x tp %d = %ld "
                         "%ss but the server has %d", p->dp, p->pp, p->tp,
                         ngpu, unit, n_gpus);
    }
    /* (an offload schedule's ranks may take part of a server: they
     * share its host, one GPU each) */
    if ((p->dp > 1 || p->tp > 1) && ngpu != n_gpus &&
        !(sim_sched_offload(p->sched) && p->tp <= 1 &&
          p->gpus_used == ngpu)) {
        AT("hw");
        return util_errf(e, UTIL_EXIT_USAGE, "dp %d x pp %d x tp %d = %ld "
                         "%ss, not the %d of the server: data and tensor "
                         "parallelism use every %s (layout dp-pp-tp)",
                         p->dp, p->pp, p->tp, ngpu, unit, n_gpus, unit);
    }
    /* A plan for a server uses all of it, as the planner makes them; one
     * edited to a larger server would run on part of it unnoticed. */
    if (p->gpus_used && p->gpus_used != ngpu) {
        AT("gpus_used");
        return util_errf(e, UTIL_EXIT_USAGE, "gpus_used %d, but dp %d x pp "
                         "%d x tp %d = %ld", p->gpus_used, p->dp, p->pp,
                         p->tp, ngpu);
    }
    if (!p->gpus_used && ngpu != n_gpus) {
        AT("hw");
        return util_errf(e, UTIL_EXIT_USAGE, "dp %d x pp %d x tp %d = %ld "
                         "%ss, not the %d of the server: a plan uses every "
                         "%s of its server (set dp, pp or hw to match, or "
                         "add \"gpus_used\": %ld to run on part of it)",
                         p->dp, p->pp, p->tp, ngpu, unit, n_gpus, unit, ngpu);
    }
    AT("tp");
    if (sim_tp_heads_check(m, p->tp, "tp", e)) return -1;
    if (p->sp && p->tp < 2) {
        AT("sequence_parallel");
        return util_errf(e, UTIL_EXIT_USAGE, "sequence parallelism needs "
                         "tensor parallelism (tp %d): the sequence is split "
                         "over the tensor-parallel group", p->tp);
    }
    AT("recompute");
    if (p->recompute < 0 || p->recompute >= SIM_RC_COUNT)
        return util_errf(e, UTIL_EXIT_USAGE, "recompute %d: not a mode",
                         p->recompute);
    AT("zero");
    if (sim_zero_check(p->zero, p->fsdp, p->dp, p->sched, e)) return -1;
    sim_sched_opts o = sim_plan_sched_opts(p);
    AT("schedule");
    if (sim_sched_check(&o, e)) return -1;
    int next = 0;
    for (int s = 0; s < p->n_stages; s++) {
        AT("stages[%d].ops", s);
        if (p->first_op[s] != next)
            return util_errf(e, UTIL_EXIT_USAGE, "stages do not cover the "
                             "model: stage %d starts at op %d, expected %d "
                             "(stages must be consecutive op ranges in order)",
                             s, p->first_op[s], next);
        if (p->last_op[s] < p->first_op[s])
            return util_errf(e, UTIL_EXIT_USAGE, "stage %d is empty (ops %d.."
                             "%d)", s, p->first_op[s], p->last_op[s]);
        if (p->last_op[s] >= m->n_ops)
            return util_errf(e, UTIL_EXIT_USAGE, "stage %d ends at op %d but "
                             "%s has %d ops (0..%d)", s, p->last_op[s],
                             m->spec.name, m->n_ops, m->n_ops - 1);
        const char *nf = p->from_op ? p->from_op[s] : "";
        const char *nt = p->to_op ? p->to_op[s] : "";
        if ((nf[0] && strcmp(nf, m->ops[p->first_op[s]].name)) ||
            (nt[0] && strcmp(nt, m->ops[p->last_op[s]].name)) ) {
            AT("stages[%d].%s", s, nf[0] && strcmp(nf,
               m->ops[p->first_op[s]].name) ? "from" : "to");
            return util_errf(e, UTIL_EXIT_USAGE, "stage %d: the plan names "
                             "ops '%s'..'%s' but %s's ops %d..%d are '%s'.."
                             "'%s': the plan was made for another version of "
                             "the model%s", s, nf, nt, m->spec.name,
                             p->first_op[s], p->last_op[s],
                             m->ops[p->first_op[s]].name,
                             m->ops[p->last_op[s]].name,
                             p->flash ? " (its flash_attn changes the ops: "
                             "fused attention is one op where the unfused "
                             "is three; plan again with --flash-attn or "
                             "--no-flash-attn)" : "");
        }
        if (p->stage_device[s] < 0 || p->stage_device[s] >= p->pp) {
            AT("stages[%d].device", s);
            return util_errf(e, UTIL_EXIT_USAGE, "stage %d is on device %d, "
                             "outside 0..%d (pp %d)", s, p->stage_device[s],
                             p->pp - 1, p->pp);
        }
        next = p->last_op[s] + 1;
    }
    if (next != m->n_ops) {
        AT("stages[%d].ops", p->n_stages - 1);
        return util_errf(e, UTIL_EXIT_USAGE, "stages do not cover the model: "
                         "they end at op %d but %s has %d ops (last %d, %s)",
                         next - 1, m->spec.name, m->n_ops, m->n_ops - 1,
                         m->ops[m->n_ops - 1].name);
    }
    AT("pp");
    int *used = util_calloc((size_t)p->pp, sizeof(int));
    for (int s = 0; s < p->n_stages; s++) used[p->stage_device[s]]++;
    for (int d = 0; d < p->pp; d++)
        if (!used[d]) {
            /* where a stage shares a device another's was, that stage's
             * device is the field to change */
            int dup = -1, was = -1;
            for (int s = 1; s < p->n_stages && dup < 0; s++)
                for (int r = 0; r < s && dup < 0; r++)
                    if (p->stage_device[r] == p->stage_device[s]) {
                        dup = s;
                        was = r;
                    }
            free(used);
            if (dup < 0)
                return util_errf(e, UTIL_EXIT_USAGE, "device %d of %d holds "
                                 "no stage", d, p->pp);
            AT("stages[%d].device", dup);
            return util_errf(e, UTIL_EXIT_USAGE, "device %d of %d holds no "
                             "stage, and stage %d is on device %d as stage "
                             "%d is", d, p->pp, dup, p->stage_device[dup],
                             was);
        }
    free(used);
    /* one stage per device and the wave's zig-zag are fixed maps */
    if (p->sched != SIM_SCHED_MIXED && p->sched != SIM_SCHED_MIXED_1F1B &&
        p->sched != SIM_SCHED_MIXED_GPIPE && p->sched != SIM_SCHED_FILE) {
        int *map = util_malloc(sizeof(int) * (size_t)p->n_stages);
        sim_sched_map(&o, map);
        for (int s = 0; s < p->n_stages; s++)
            if (map[s] != p->stage_device[s]) {
                int want = map[s];
                AT("stages[%d].device", s);
                free(map);
                return util_errf(e, UTIL_EXIT_USAGE, "schedule %s puts stage "
                                 "%d on device %d, the plan on device %d",
                                 sim_sched_name(p->sched), s, want,
                                 p->stage_device[s]);
            }
        free(map);
    }
    return 0;
}

#undef AT

int sim_plan_check(const sim_plan *p, const prof_model *m, int n_gpus,
                   util_err *e)
{
    char f[8];
    return sim_plan_check_at(p, m, n_gpus, "GPU", f, 0, e);
}

int sim_plan_check_topo(const sim_plan *p, const prof_topo *t, util_err *e)
{
    if (p->tp > t->gpus_per_server && t->gpus_per_server > 0)
        return util_errf(e, UTIL_EXIT_USAGE, "tp %d is larger than a node: "
                         "%s has %d GPUs per server, and tensor parallelism "
                         "stays inside one", p->tp, t->name,
                         t->gpus_per_server);
    long used = sim_plan_gpus(p);
    for (long g0 = 0; p->tp > 1 && g0 + p->tp <= used && g0 + p->tp <= t->n_gpus;
         g0 += p->tp) {
        int a = t->nodes[t->gpu_node[g0]].server;
        int b = t->nodes[t->gpu_node[g0 + p->tp - 1]].server;
        if (a != b)
            return util_errf(e, UTIL_EXIT_USAGE, "tp %d: GPUs %ld..%ld of "
                             "one tensor-parallel group sit on servers %d and "
                             "%d (%d GPUs per server)", p->tp, g0,
                             g0 + p->tp - 1, a, b, t->gpus_per_server);
    }
    return 0;
}

/* The file of a model or hw value: a server file's template options ride
 * along ("hw.json --host-mem 128G"). */
static void spec_path(const char *spec, char path[256])
{
    const char *opt = strstr(spec, " --");
    snprintf(path, 256, "%.*s",
             (int)(opt ? (size_t)(opt - spec) : strlen(spec)), spec);
}

/* The checksum (FNV-1a, 64 bits, hex) of a model or server file, ""
 * for a zoo name or template (no regular file of that name). */
static void file_sum(const char *spec, char out[17])
{
    char path[256];
    uint64_t h;
    out[0] = 0;
    spec_path(spec, path);
    if (!util_file_fnv(path, UTIL_READ_MAX_BYTES, &h, NULL))
        snprintf(out, 17, "%016llx", (unsigned long long)h);
}

int sim_plan_files_changed(const sim_plan *p, char *what, size_t n)
{
    const char *path[2] = {p->model, p->hw}, *sum[2] = {p->model_sum,
                                                        p->hw_sum};
    for (int k = 0; k < 2; k++) {
        char now[17];
        if (!sum[k][0]) continue;
        file_sum(path[k], now);
        /* a file no longer there or readable has not changed: loading
         * it says what is wrong with it */
        if (now[0] && strcmp(now, sum[k])) {
            char file[256];
            spec_path(path[k], file);
            snprintf(what, n, "the %s file %s", k ? "server" : "model",
                     file);
            return 1;
        }
    }
    return 0;
}

json_t *sim_plan_json(const sim_plan *p, const prof_model *m)
{
    json_t *o = json_object();
    json_object_set_new(o, "sluice_plan", json_integer(PLAN_FORMAT));
    json_object_set_new(o, "model", json_string(p->model));
    json_object_set_new(o, "hw", json_string(p->hw));
    /* what the files were, to say when they change under the plan */
    char sum[17];
    file_sum(p->model, sum);
    if (sum[0]) json_object_set_new(o, "model_sum", json_string(sum));
    file_sum(p->hw, sum);
    if (sum[0]) json_object_set_new(o, "hw_sum", json_string(sum));
    json_object_set_new(o, "schedule", json_string(sim_sched_name(p->sched)));
    json_object_set_new(o, "pp", json_integer(p->pp));
    json_object_set_new(o, "dp", json_integer(p->dp));
    json_object_set_new(o, "tp", json_integer(p->tp));
    json_object_set_new(o, "layout", json_string("dp-pp-tp"));
    if (p->sched == SIM_SCHED_INTERLEAVED || p->chunks > 1)
        json_object_set_new(o, "chunks", json_integer(p->chunks));
    if (p->gpus_used)
        json_object_set_new(o, "gpus_used", json_integer(p->gpus_used));
    if (p->sched_file[0])
        json_object_set_new(o, "schedule_file", json_string(p->sched_file));
    json_object_set_new(o, "mbs", json_integer(p->mbs));
    json_object_set_new(o, "microbatches", json_integer(p->n_mb));
    json_object_set_new(o, "recompute",
                        json_string(sim_recompute_name(p->recompute)));
    if (p->sp) json_object_set_new(o, "sequence_parallel", json_true());
    if (sim_zero_stage(p->zero, p->fsdp))
        json_object_set_new(o, "zero",
                            json_integer(sim_zero_stage(p->zero, p->fsdp)));
    if (p->fsdp) json_object_set_new(o, "fsdp",
                                     json_string(sim_fsdp_name(p->fsdp)));
    if (!prof_finetune_full(&p->ft)) {
        char ft[64];
        json_object_set_new(o, "finetune", json_string(
            prof_finetune_name(&p->ft, ft, sizeof ft)));
    }
    if (p->math)
        json_object_set_new(o, "dtype", json_string(prof_math_name(p->math)));
    if (p->seq_len)
        json_object_set_new(o, "seq_len", json_integer(p->seq_len));
    if (p->flash)
        json_object_set_new(o, "flash_attn", json_boolean(p->flash > 0));
    if (p->grad_bucket >= 0)
        json_object_set_new(o, "grad_bucket_mib",
                            json_real(p->grad_bucket / (1024.0 * 1024)));
    if (sim_sched_offload(p->sched) && p->tier)
        json_object_set_new(o, "offload_tier",
                            json_string(sim_tier_name(p->tier)));
    if (sim_sched_offload(p->sched)) {
        json_object_set_new(o, "act_swap_checkpoints",
                            json_integer(p->swap_ckpt));
        json_object_set_new(o, "act_swap_whole", json_integer(p->swap_full));
    }
    json_object_set_new(o, "waves", json_integer(p->waves));
    json_object_set_new(o, "minibatches", json_integer(
        p->n_minibatches ? p->n_minibatches
        : sim_default_minibatches(p->sched, p->pp, p->n_stages, p->n_mb)));
    if (p->state_bytes_per_param > 0)
        json_object_set_new(o, "state_bytes_per_param",
                            json_real(p->state_bytes_per_param));
    json_t *st = json_array();
    for (int s = 0; s < p->n_stages; s++) {
        json_t *x = json_object();
        json_t *ops = json_array();
        json_array_append_new(ops, json_integer(p->first_op[s]));
        json_array_append_new(ops, json_integer(p->last_op[s]));
        json_object_set_new(x, "ops", ops);
        json_object_set_new(x, "device", json_integer(p->stage_device[s]));
        if (p->state_tier && p->state_tier[s])
            json_object_set_new(x, "state_tier", json_string(
                sim_state_tier_name(p->state_tier[s])));
        if (m && p->last_op[s] < m->n_ops) {
            json_object_set_new(x, "from",
                                json_string(m->ops[p->first_op[s]].name));
            json_object_set_new(x, "to",
                                json_string(m->ops[p->last_op[s]].name));
        }
        json_array_append_new(st, x);
    }
    json_object_set_new(o, "stages", st);
    return o;
}

int sim_plan_paths_utf8(const sim_plan *p, util_err *e)
{
    /* Jansson takes UTF-8 only; a path it refused would leave its key
     * out of the file without a word. Refused here, before any work. */
    if (util_utf8_check("the model path", p->model, e) ||
        util_utf8_check("the hardware path", p->hw, e) ||
        util_utf8_check("the schedule file path", p->sched_file, e))
        return -1;
    return 0;
}

int sim_plan_save(const char *path, const sim_plan *p, const prof_model *m,
                  util_err *e)
{
    if (sim_plan_paths_utf8(p, e)) return -1;
    json_t *j = sim_plan_json(p, m);
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    int rc = util_write_atomic_line(path, s, e);
    free(s);
    return rc;
}

/* ---------------------------------------------------------------------
 * Partitions */

static int layers_to_ops(const prof_model *m, const int *nl, int n,
                         int *first, int *last)
{
    int l = 0;
    for (int s = 0; s < n; s++) {
        first[s] = m->layers[l].first_op;
        l += nl[s];
        const prof_layer *ly = &m->layers[l - 1];
        last[s] = ly->first_op + ly->n_ops - 1;
    }
    return 0;
}

int sim_partition_even(const prof_model *m, int n, int *first, int *last,
                       util_err *e)
{
    int L = m->n_layers;
    if (n > L)
        return util_errf(e, UTIL_EXIT_USAGE, "--partition even: %d stages "
                         "but %s has only %d layers (use balanced, which cuts "
                         "between ops)", n, m->spec.name, L);
    int *nl = util_malloc(sizeof(int) * (size_t)n);
    for (int s = 0; s < n; s++)
        nl[s] = (int)((long)(s + 1) * L / n - (long)s * L / n);
    layers_to_ops(m, nl, n, first, last);
    free(nl);
    return 0;
}

int sim_partition_list(const prof_model *m, const char *list, int n,
                       int *first, int *last, util_err *e)
{
    int *nl = util_calloc((size_t)n + 1, sizeof(int));
    int k = 0, sum = 0;
    const char *p = list;
    for (;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        char item[32];
        long v;
        if (len == 0 || len >= sizeof item) {
            free(nl);
            return util_errf(e, UTIL_EXIT_USAGE, "--partition '%s': item %d "
                             "is empty or too long (expected layers per "
                             "stage, e.g. 4,4,5,3)", list, k + 1);
        }
        memcpy(item, p, len);
        item[len] = 0;
        if (util_parse_int(item, 1, 1 << 20, &v)) {
            free(nl);
            return util_errf(e, UTIL_EXIT_USAGE, "--partition '%s': item %d "
                             "'%s' is not a positive number of layers", list,
                             k + 1, item);
        }
        if (k < n) nl[k] = (int)v;
        k++;
        sum += (int)v;
        if (!c) break;
        p = c + 1;
    }
    if (k != n) {
        free(nl);
        return util_errf(e, UTIL_EXIT_USAGE, "--partition '%s' has %d "
                         "entries for %d stages", list, k, n);
    }
    if (sum != m->n_layers) {
        free(nl);
        return util_errf(e, UTIL_EXIT_USAGE, "--partition '%s' covers %d "
                         "layers but %s has %d (embeddings and head count "
                         "as layers)", list, sum, m->spec.name, m->n_layers);
    }
    layers_to_ops(m, nl, n, first, last);
    free(nl);
    return 0;
}

/* greedy packing under a cap; returns the stages used */
static int pack(const double *cost, int n_ops, double cap, int *cut, int n)
{
    int used = 0;
    double acc = 0;
    for (int i = 0; i < n_ops; i++) {
        if (acc > 0 && acc + cost[i] > cap) {
            if (used < n) cut[used] = i - 1;
            used++;
            acc = 0;
        }
        acc += cost[i];
    }
    if (used < n) cut[used] = n_ops - 1;
    return used + 1;
}

int sim_partition_balanced(const prof_model *m, const prof_gpu *g, int mbs,
                           int n, int *first, int *last, util_err *e)
{
    if (n > m->n_ops)
        return util_errf(e, UTIL_EXIT_USAGE, "%d stages but %s has only %d "
                         "ops", n, m->spec.name, m->n_ops);
    double *cost = util_malloc(sizeof(double) * (size_t)m->n_ops);
    double lo = 0, hi = 0;
    prof_dtype mt = prof_spec_math(&m->spec);
    for (int i = 0; i < m->n_ops; i++) {
        const prof_op *op = &m->ops[i];
        cost[i] = (double)(sim_op_ns(g, mt, op, mbs, SIM_F, NULL) +
                           sim_op_ns(g, mt, op, mbs, SIM_B, NULL) +
                           sim_op_ns(g, mt, op, mbs, SIM_W, NULL));
        if (cost[i] > lo) lo = cost[i];
        hi += cost[i];
    }
    int *cut = util_malloc(sizeof(int) * (size_t)(n + 1));
    /* smallest cap that packs into n stages (costs are integral ns;
     * past 2^53 ns a double's steps are coarser: to its precision) */
    while (hi - lo > fmax(0.5, hi * 1e-15)) {
        double mid = floor((lo + hi) / 2);
        if (pack(cost, m->n_ops, mid, cut, n) <= n) hi = mid;
        else lo = mid + 1;
    }
    int used = pack(cost, m->n_ops, hi, cut, n);
    /* fewer stages than asked: split the largest stages further (never
     * raises the maximum) */
    int k = 0;
    for (int s = 0; s < used; s++) {
        first[k] = s ? cut[s - 1] + 1 : 0;
        last[k] = cut[s];
        k++;
    }
    while (k < n) {
        int best = -1;
        double bc = -1;
        for (int s = 0; s < k; s++) {
            if (last[s] == first[s]) continue;
            double c = 0;
            for (int i = first[s]; i <= last[s]; i++) c += cost[i];
            if (c > bc) { bc = c; best = s; }
        }
        UTIL_NEVER(best < 0);
        /* split at the op that halves its cost */
        double acc = 0;
        int at = first[best];
        for (int i = first[best]; i < last[best]; i++) {
            acc += cost[i];
            at = i;
            if (acc >= bc / 2) break;
        }
        memmove(first + best + 2, first + best + 1,
                sizeof(int) * (size_t)(k - best - 1));
        memmove(last + best + 2, last + best + 1,
                sizeof(int) * (size_t)(k - best - 1));
        first[best + 1] = at + 1;
        last[best + 1] = last[best];
        last[best] = at;
        k++;
    }
    free(cut);
    free(cost);
    return 0;
}

sim_sched_opts sim_plan_sched_opts(const sim_plan *p)
{
    sim_sched_opts o = {.sched = p->sched, .pp = p->pp,
                        .n_stages = p->n_stages, .n_mb = p->n_mb,
                        .recompute = p->recompute, .waves = p->waves,
                        .chunks = p->chunks, .dp = p->dp,
                        .n_minibatches = p->n_minibatches ? p->n_minibatches
                        : sim_default_minibatches(p->sched, p->pp,
                                                  p->n_stages, p->n_mb)};
    return o;
}

sim_cost_opts sim_plan_cost_opts(const sim_plan *p)
{
    sim_cost_opts o = {.mbs = p->mbs, .dp = p->dp, .tp = p->tp,
                       .pipes = sim_sched_pipes(p->sched),
                       .state_bytes_per_param = p->state_bytes_per_param,
                       .recompute = p->recompute, .sp = p->sp,
                       .zero = p->zero, .fsdp = p->fsdp,
                       .offload = sim_sched_offload(p->sched) ? p->sched : 0,
                       .tier = p->tier, .swap_ckpt = p->swap_ckpt,
                       .swap_full = p->swap_full, .n_mb = p->n_mb,
                       .grad_bucket = p->grad_bucket,
                       .state_tier = sim_plan_tiered(p) ? p->state_tier
                                                        : NULL};
    return o;
}
