/* The single-device training loop: batches from the corpus, forward,
 * backward, AdamW with warm-up and cosine decay, checkpoints, validation
 * loss, per-op timing. Everything that decides the numbers (seed, step
 * index, batch, length) is in the checkpoint or a pure function of it, so
 * a resumed run continues bit for bit. */
#include "exec/exec.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

void exec_train_defaults(exec_train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->steps = 50;
    o->B = 0;           /* 0: 16, or the checkpoint's */
    o->T = 0;           /* 0: the model's sequence length, or the checkpoint's */
    o->adamw = (exec_adamw){.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                            .eps = 1e-8f, .weight_decay = 0.1f, .clip = 1.0f};
    o->warmup = -1;     /* steps/10 */
    o->seed = 1337;
    o->threads = 1;
    o->eval_batches = 4;
    o->out = stdout;
}

exec_ckpt_run exec_train_run(const exec_train_opts *o)
{
    exec_ckpt_run u = {.has = 1, .steps = o->steps, .warmup = o->warmup,
                       .lr = o->adamw.lr,
                       .weight_decay = o->adamw.weight_decay,
                       .clip = o->adamw.clip, .data_sum = o->data_sum};
    return u;
}

/* printf to f, or nothing when f is NULL. */
static void say(FILE *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(FILE *f, const char *fmt, ...)
{
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
}

float exec_lr_at(float peak, int warmup, int steps, int s)
{
    if (s < warmup) return peak * (float)(s + 1) / (float)warmup;
    int span = steps - warmup - 1;
    double prog = span > 0 ? (double)(s - warmup) / span : 1.0;
    if (prog > 1) prog = 1;
    return (float)(peak * (0.1 + 0.9 * 0.5 * (1.0 + cos(M_PI * prog))));
}

static float lr_at(const exec_train_opts *o, int warmup, int s)
{
    return exec_lr_at(o->adamw.lr, warmup, o->steps, s);
}

static float eval_loss(exec_gpt *m, const exec_corpus *c, uint64_t seed,
                       int n, int B, int T, int *tok, int *tgt)
{
    double s = 0;
    for (int i = 0; i < n; i++) {
        exec_corpus_batch(c, 1, seed, (uint64_t)i, B, T, tok, tgt);
        exec_mlm_mask(exec_gpt_cfg(m), 1, seed, (uint64_t)i, 0, B, T, tok,
                      tgt);
        s += exec_gpt_forward(m, tok, tgt);
    }
    return n ? (float)(s / n) : NAN;
}

double exec_host_mem_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), sz = sysconf(_SC_PAGESIZE);
    return pages > 0 && sz > 0 ? (double)pages * sz : 0;
}

/* A field of a /proc file in kB ("MemAvailable:"), as bytes; -1: none. */
static double proc_kb(const char *file, const char *key)
{
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) {
            v = strtod(line + n, NULL) * 1024;
            break;
        }
    fclose(f);
    return v;
}

double exec_host_free_bytes(const char **why)
{
    const char *t = getenv("SLUICE_HOST_AVAILABLE");
    double v;
    *why = "free on this machine";
    if (t && *t && !util_parse_size(t, &v)) return v;
    double a = proc_kb("/proc/meminfo", "MemAvailable:");
    if (!(a > 0)) a = HUGE_VAL;
    struct rlimit rl;
    double vm = proc_kb("/proc/self/status", "VmSize:");
    if (!getrlimit(RLIMIT_AS, &rl) && rl.rlim_cur != RLIM_INFINITY &&
        vm > 0 && (double)rl.rlim_cur - vm < a) {
        a = fmax((double)rl.rlim_cur - vm, 0);
        *why = "left under this process's address-space limit (ulimit -v)";
    }
    return a;
}

double exec_drive_free_bytes(const char *dir)
{
    const char *t = getenv("SLUICE_DRIVE_AVAILABLE");
    double v;
    if (t && *t && !util_parse_size(t, &v)) return v;
    struct statvfs sv;
    if (statvfs(dir && *dir ? dir : ".", &sv)) return HUGE_VAL;
    return (double)sv.f_bavail * sv.f_frsize;
}

static int write_timings(const char *path, const exec_train_opts *o, int B,
                         int T, int steps, const exec_timing *tm, util_err *e)
{
    json_t *root = exec_timing_json(tm);
    json_t *meta = json_object();
    json_object_set_new(meta, "device", json_string("cpu"));
    json_object_set_new(meta, "blas", json_string(kern_blas_core()));
    json_object_set_new(meta, "isa", json_string(kern_get_isa()));
    json_object_set_new(meta, "threads", json_integer(o->threads));
    json_object_set_new(meta, "model", json_string(o->model));
    json_object_set_new(meta, "B", json_integer(B));
    json_object_set_new(meta, "T", json_integer(T));
    json_object_set_new(meta, "steps", json_integer(steps));
    json_object_set_new(root, "run", meta);
    char *s = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    size_t n = strlen(s);
    s = util_realloc(s, n + 2);
    s[n] = '\n';
    int rc = util_write_atomic(path, s, n + 1, e);
    free(s);
    return rc;
}

int exec_steps_left(const char *resume, int steps, int stop_after,
                    int step0, util_err *e)
{
    const char *are = step0 == 1 ? " is" : "s are";
    if (steps <= step0)
        return resume ? util_errf(e, UTIL_EXIT_USAGE, "%s: %d step%s done "
                                  "already (--steps counts them; ask for "
                                  "more)", resume, step0, are)
                      : util_errf(e, UTIL_EXIT_USAGE, "--steps %d: nothing "
                                  "to run (give 1 or more)", steps);
    if (stop_after > 0 && stop_after <= step0)
        return util_errf(e, UTIL_EXIT_USAGE, "--stop-after %d: %d step%s "
                         "done already", stop_after, step0, are);
    return 0;
}

int exec_train(const exec_train_opts *o, exec_train_result *r, util_err *e)
{
    memset(r, 0, sizeof *r);
    exec_gpt_config cfg = o->cfg;
    if (exec_gpt_config_check(&cfg, e)) return -1;
    int B = o->B, T = o->T;
    exec_ckpt_meta meta = {0};
    if (o->resume) {
        if (exec_ckpt_peek(o->resume, &meta, e) ||
            exec_ckpt_not_lora(o->resume, &meta, "full", e))
            return -1;
        if (B && B != meta.B)
            return util_errf(e, UTIL_EXIT_USAGE,
                             "%s: checkpoint was trained with batch %d, not "
                             "%d (leave --batch out to continue it)",
                             o->resume, meta.B, B);
        if (T && T != meta.T)
            return util_errf(e, UTIL_EXIT_USAGE,
                             "%s: checkpoint was trained with sequences of %d "
                             "tokens, not %d (leave --seq out to continue it)",
                             o->resume, meta.T, T);
        B = meta.B;
        T = meta.T;
    }
    if (!B) B = 16;
    if (!T) T = cfg.max_pos;
    if (!T)
        return util_errf(e, UTIL_EXIT_USAGE,
                         "the model has no position table to take its "
                         "sequence length from: give --seq");
    if (!exec_rope(&cfg) && T > cfg.max_pos)
        return util_errf(e, UTIL_EXIT_USAGE,
                         "sequence length %d exceeds the model's position "
                         "table (%d)",
                         T, cfg.max_pos);
    if (exec_corpus_vocab_check(&cfg, o->model, e)) return -1;
    exec_gpt_mem need = exec_gpt_mem_need(&cfg, B, T);
    double host = exec_host_mem_bytes();
    if (host > 0 && need.total_bytes > host) {
        /* whatever --mem-budget says: memory the machine does not have
         * is not there to allocate */
        char a[32], b[32];
        return util_errf(
            e, UTIL_EXIT_USAGE,
            "%s does not fit this machine: training it with batch %d x %d "
            "tokens needs %s, the machine has %s of memory",
            o->model, B, T, util_fmt_bytes(need.total_bytes, a, sizeof a),
            util_fmt_bytes(host, b, sizeof b));
    }
    const char *why;
    double avail = exec_host_free_bytes(&why);
    if (need.total_bytes > avail) {
        char a[32], b[32];
        return util_errf(e, UTIL_EXIT_FAIL, "%s does not fit now: training "
                         "it with batch %d x %d tokens needs %s, and %s is "
                         "%s", o->model, B, T,
                         util_fmt_bytes(need.total_bytes, a, sizeof a),
                         util_fmt_bytes(avail, b, sizeof b), why);
    }
    double budget = o->mem_budget_bytes > 0 ? o->mem_budget_bytes : host;
    if (budget > 0 && need.total_bytes > budget) {
        char a[32], b[32], c[32], d[32], p[32];
        return util_errf(
            e, UTIL_EXIT_USAGE,
            "%s does not fit: training it with batch %d x %d tokens needs %s "
            "(%s parameters: %s for weights, gradients and AdamW state; %s "
            "for activations), the memory budget is %s%s",
            o->model, B, T, util_fmt_bytes(need.total_bytes, a, sizeof a),
            util_fmt_count((double)need.params, p, sizeof p),
            util_fmt_bytes(need.param_bytes, b, sizeof b),
            util_fmt_bytes(need.act_bytes, c, sizeof c),
            util_fmt_bytes(budget, d, sizeof d),
            o->mem_budget_bytes > 0 ? " (--mem-budget)"
                                    : " (physical memory)");
    }
    /* a checkpoint that cannot fit its folder is said now, not after
     * the training it was to keep */
    if (util_out_room("--save", o->save, exec_ckpt_bytes(need.params, 0), e))
        return -1;
    exec_corpus corpus;
    if (exec_corpus_load(&corpus, o->data, T, e)) return -1;

    kern_set_threads(o->threads);
    uint64_t seed = o->resume ? meta.seed : o->seed;
    exec_gpt *m = exec_gpt_new(&cfg, B, T, seed);
    int step0 = 0;
    if (o->resume) {
        if (exec_ckpt_load(o->resume, m, &meta, e)) {
            exec_gpt_free(m);
            exec_corpus_free(&corpus);
            return -1;
        }
        step0 = (int)meta.step;
    }
    /* nothing left to run: said, as a plan's run says it (--steps 0 is
     * the evaluation alone, a resumed checkpoint's too) */
    int end = o->stop_after > 0 && o->stop_after < o->steps ? o->stop_after
                                                            : o->steps;
    if (o->steps > 0 &&
        exec_steps_left(o->resume, o->steps, o->stop_after, step0, e)) {
        exec_gpt_free(m);
        exec_corpus_free(&corpus);
        return -1;
    }
    int warmup = o->warmup >= 0 ? o->warmup : o->steps / 10;
    if (warmup < 1) warmup = 1;
    int *tok = util_malloc((size_t)B * T * sizeof(int));
    int *tgt = util_malloc((size_t)B * T * sizeof(int));
    exec_timing *tm = exec_timing_new();
    FILE *out = o->out ? o->out : stdout;
    FILE *hu = o->json ? NULL : out; /* human lines, off with --json */
    json_t *jsteps = json_array();
    char pc[32], mb[32], kind[96] = "";
    if (exec_rope(&cfg) || cfg.rmsnorm || cfg.swiglu || cfg.relu ||
        cfg.pos_offset || cfg.kv_heads)
        snprintf(kind, sizeof kind, "; %s, %s, %s, %d key/value heads",
                 exec_rope(&cfg) ? "RoPE" : "learned positions",
                 cfg.rmsnorm ? "RMSNorm" : "LayerNorm",
                 cfg.swiglu ? "SwiGLU" : cfg.relu ? "ReLU" : "GELU",
                 exec_kv_heads(&cfg));
    say(hu,
            "model %s: %s parameters (hidden %d, layers %d, heads %d, ffn %d, "
            "vocab %d%s), %s to train\n",
            o->model, util_fmt_count((double)need.params, pc, sizeof pc),
            cfg.hidden, cfg.layers, cfg.heads, cfg.ffn, cfg.vocab, kind,
            util_fmt_bytes(need.total_bytes, mb, sizeof mb));
    if (o->note[0]) say(hu, "%s\n", o->note);
    if (o->resumed[0]) say(hu, "%s\n", o->resumed);
    if (o->warmup > o->steps)
        say(hu, "note: --warmup %d is longer than the %d steps: the "
            "learning rate never reaches its peak\n", o->warmup, o->steps);
    if (o->stop_after > o->steps)
        say(hu, "note: --stop-after %d is past --steps %d: the run ends "
            "at step %d\n", o->stop_after, o->steps, o->steps);
    say(hu,
            "corpus %s: %zu bytes (%zu train, %zu validation in blocks of "
            "%zu), unigram entropy %.4f nats = %.3f bits/byte\n",
            corpus.path, corpus.len, corpus.n_train, corpus.n_val,
            corpus.block, corpus.entropy_nats,
            corpus.entropy_nats / M_LN2);
    say(hu,
            "batch %d x %d tokens, seed %llu, %d thread%s (OpenBLAS %s, "
            "row kernels %s), AdamW lr %.2e warm-up %d cosine to %.2e, "
            "clip %.2f\n",
            B, T, (unsigned long long)seed, o->threads,
            o->threads == 1 ? "" : "s", kern_blas_core(), kern_get_isa(),
            o->adamw.lr, warmup,
            o->adamw.lr * 0.1, o->adamw.clip);
    if (o->resume)
        say(hu, "resumed from %s at step %d\n", o->resume, step0);
    r->entropy_nats = corpus.entropy_nats;
    r->val_loss_start = eval_loss(m, &corpus, seed, o->eval_batches, B, T,
                                  tok, tgt);
    if (o->eval_batches)
        say(hu, "validation loss %.4f (%d batches)\n", r->val_loss_start,
                o->eval_batches);

    int rc = 0, interrupted = 0;
    /* The last steps' losses: one batch is noisy, their mean is not. */
    enum { RECENT = 10 };
    float recent[RECENT];
    uint64_t train_ns = 0;
    exec_ckpt_meta sm = {cfg, B, T, seed, step0, exec_train_run(o)};
    exec_gpt_set_timing(m, tm);
    for (int s = step0; s < end; s++) {
        exec_corpus_batch(&corpus, 0, seed, (uint64_t)s, B, T, tok, tgt);
        exec_mlm_mask(exec_gpt_cfg(m), 0, seed, (uint64_t)s, 0, B, T, tok,
                      tgt);
        uint64_t t0 = exec_now_ns();
        float loss = exec_gpt_forward(m, tok, tgt);
        exec_gpt_zero_grad(m);
        exec_gpt_backward(m);
        exec_adamw ad = o->adamw;
        ad.lr = lr_at(o, warmup, s);
        float norm = exec_gpt_step(m, &ad, s + 1);
        uint64_t dt = exec_now_ns() - t0;
        train_ns += dt;
        if (!isfinite(loss) || !isfinite(norm)) {
            rc = util_errf(e, UTIL_EXIT_FAIL,
                           "step %d: the %s is not finite (%g); try a lower "
                           "--lr",
                           s + 1, isfinite(loss) ? "gradient norm" : "loss",
                           isfinite(loss) ? norm : loss);
            break;
        }
        if (s == step0) r->first_loss = loss;
        r->last_loss = loss;
        recent[r->steps_run % RECENT] = loss;
        r->steps_run++;
        json_t *js = json_object();
        json_object_set_new(js, "step", json_integer(s + 1));
        json_object_set_new(js, "loss", json_real(loss));
        json_object_set_new(js, "lr", json_real(ad.lr));
        json_object_set_new(js, "grad_norm", json_real(norm));
        json_object_set_new(js, "ns", json_integer((json_int_t)dt));
        json_array_append_new(jsteps, js);
        if (!o->quiet)
            say(hu,
                    "step %5d/%d | loss %.6f | lr %.3e | norm %7.4f | "
                    "%8.2f ms | %9.0f tok/s\n",
                    s + 1, o->steps, loss, ad.lr, norm, dt / 1e6,
                    (double)B * T / (dt / 1e9));
        sm.step = s + 1;
        if (o->stop && *o->stop && s + 1 < end) {
            interrupted = s + 1;
            break;
        }
        if (o->save && o->save_every > 0 && (s + 1) % o->save_every == 0 &&
            s + 1 < end && exec_ckpt_save(o->save, m, &sm, e)) {
            rc = -1;
            break;
        }
    }
    exec_gpt_set_timing(m, NULL);
    if (!rc && !interrupted) {
        r->val_loss_end = eval_loss(m, &corpus, seed, o->eval_batches, B, T,
                                    tok, tgt);
        if (o->save && exec_ckpt_save(o->save, m, &sm, e)) rc = -1;
    }
    if (!rc && !interrupted && o->timings &&
        write_timings(o->timings, o, B, T, r->steps_run, tm, e))
        rc = -1;
    if (!rc && !interrupted) {
        uint64_t tot = exec_timing_total_ns(tm);
        r->tokens_per_s = train_ns ? (double)B * T * r->steps_run /
                                         (train_ns / 1e9)
                                   : 0;
        r->gemm_share = tot ? (double)exec_timing_gemm_ns(tm) / tot : 0;
        if (r->steps_run) {
            say(hu,
                    "trained %d steps (%d to %d), %.0f tokens in %.3f s: "
                    "%.0f tokens/s\n",
                    r->steps_run, step0 + 1, end,
                    (double)B * T * r->steps_run, train_ns / 1e9,
                    r->tokens_per_s);
            int k = r->steps_run < RECENT ? r->steps_run : RECENT;
            double mean = 0;
            for (int i = 0; i < k; i++) mean += recent[i];
            mean /= k;
            say(hu,
                "train loss %.4f at step %d, %.4f over steps %d-%d (mean)\n",
                r->first_loss, step0 + 1, mean, end - k + 1, end);
            util_table *t = util_table_new(4);
            util_table_col(t, 0, "op kind", 'l');
            util_table_col(t, 1, "ms/step", 'r');
            util_table_col(t, 2, "share", 'r');
            util_table_col(t, 3, "what runs", 'l');
            for (int k = 0; k < KERN_KIND_COUNT; k++) {
                uint64_t ns = exec_timing_kind_ns(tm, (kern_kind)k);
                char a[32], b[32];
                snprintf(a, sizeof a, "%.3f", ns / 1e6 / r->steps_run);
                snprintf(b, sizeof b, "%.1f%%", tot ? 100.0 * ns / tot : 0);
                const char *what =
                    k == KERN_KIND_LINEAR ? "sgemm"
                    : k == KERN_KIND_ATTN ? "sgemm per head + softmax loops"
                                          : "C loops";
                const char *row[4] = {kern_kind_name((kern_kind)k), a, b,
                                      what};
                util_table_row(t, row);
            }
            say(hu, "kernel time per step (outside linear-layer GEMMs: "
                         "%.1f%%):\n",
                    100.0 * (1 - r->gemm_share));
            if (hu) util_table_print(t, hu, "  ");
            util_table_free(t);
            /* Llama's q|k|v expansion: time the simulator's graph has no
             * op for (exec/README.md) */
            uint64_t xp = exec_timing_op_ns(tm, KERN_OP_qkv_expand_forward) +
                          exec_timing_op_ns(tm, KERN_OP_qkv_expand_backward);
            if (xp)
                say(hu, "  of attn: the q|k|v expansion (RoPE, grouped "
                        "heads) %.3f ms/step, %.1f%%\n",
                    xp / 1e6 / r->steps_run, tot ? 100.0 * xp / tot : 0);
        }
        if (o->eval_batches)
            say(hu,
                    "validation loss %.4f (%.3f bits/byte; unigram entropy "
                    "%.4f nats)\n",
                    r->val_loss_end, r->val_loss_end / M_LN2,
                    corpus.entropy_nats);
        if (o->save) say(hu, "saved %s at step %lld\n", o->save,
                             (long long)sm.step);
        if (end < o->steps)
            say(hu, "stopped after step %d of %d (--stop-after)%s%s%s\n",
                end, o->steps, o->save ? "; continue with --resume " : "",
                o->save ? o->save : "; without --save its state is not kept",
                o->save ? o->again : "");
        if (o->timings) say(hu, "per-op timings in %s\n", o->timings);
    }
    if (!rc && interrupted) {
        if (o->save && exec_ckpt_save(o->save, m, &sm, e)) {
            rc = -1;
        } else {
            char saved[2048] = "";
            if (o->save)
                snprintf(saved, sizeof saved,
                         "; saved %s, continue with --resume %s%s", o->save,
                         o->save, o->again);
            rc = util_errf(e, UTIL_EXIT_FAIL, "interrupted after step %d%s",
                           interrupted, saved);
        }
    }
    if (!rc && o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "model", json_string(o->model));
        json_object_set_new(j, "params", json_integer((json_int_t)need.params));
        json_object_set_new(j, "mem_bytes", json_real(need.total_bytes));
        json_t *jc = json_object();
        json_object_set_new(jc, "path", json_string(corpus.path));
        json_object_set_new(jc, "bytes", json_integer((json_int_t)corpus.len));
        json_object_set_new(jc, "unigram_entropy_nats",
                            json_real(corpus.entropy_nats));
        json_object_set_new(j, "corpus", jc);
        json_object_set_new(j, "B", json_integer(B));
        json_object_set_new(j, "T", json_integer(T));
        json_object_set_new(j, "seed", json_integer((json_int_t)seed));
        json_object_set_new(j, "threads", json_integer(o->threads));
        json_object_set_new(j, "steps", jsteps);
        jsteps = NULL;
        json_object_set_new(j, "tokens_per_s", json_real(r->tokens_per_s));
        if (o->eval_batches) {
            json_object_set_new(j, "val_loss_start",
                                json_real(r->val_loss_start));
            json_object_set_new(j, "val_loss_end", json_real(r->val_loss_end));
        }
        json_t *jk = json_object();
        for (int k = 0; k < KERN_KIND_COUNT; k++)
            json_object_set_new(
                jk, kern_kind_name((kern_kind)k),
                json_integer((json_int_t)exec_timing_kind_ns(tm, (kern_kind)k)));
        json_object_set_new(j, "kernel_ns", jk);
        if (o->save) json_object_set_new(j, "saved", json_string(o->save));
        util_json_print(j, out);
        json_decref(j);
    }
    json_decref(jsteps);
    exec_timing_free(tm);
    free(tok);
    free(tgt);
    exec_gpt_free(m);
    exec_corpus_free(&corpus);
    return rc ? -1 : 0;
}
