/* `sluice profile`: list, show and validate hardware and model profiles. */
#include "profiles/profiles.h"

#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
        "usage: sluice profile list [--json]\n"
        "       sluice profile show MODEL [--ops] [--seq N] [--dtype T]\n"
        "                           [--finetune MODE] [--json]\n"
        "       sluice profile show --hw GPU xN | FILE.json [--host-mem SIZE]\n"
        "                           [--nvme N[:DRIVE]] [--gpus-per-server N] [--pcie-gen G] [--json]\n"
        "       sluice profile validate FILE...\n"
        "\n"
        "MODEL is a built-in name (sluice profile list) or a file: a sluice\n"
        "model spec or a Hugging Face config.json as published beside weights.\n"
        "show prints a per-layer table (per sample: params, FLOPs, activation\n"
        "bytes kept for backward, bytes crossing a cut after the layer); --ops\n"
        "prints every op; --finetune MODE shows the model as that mode trains\n"
        "it (sluice sim --help). --hw prints the server as a tree with link bandwidths;\n"
        "a GPU without a count is one standard 8-GPU server (GPU x8).\n"
        "\n" UTIL_SIZE_HELP);
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "sluice profile: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see sluice profile --help)\n");
    return UTIL_EXIT_USAGE;
}

static int fail(const util_err *e)
{
    fprintf(stderr, "sluice profile: %s\n", e->msg);
    return e->code ? e->code : UTIL_EXIT_FAIL;
}

static int cmd_list(int argc, char **argv)
{
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else return bad("list: unknown option '%s'", argv[i]);
    }
    util_err e;
    const char *const *g = prof_gpu_names(), *const *mn = prof_model_names();
    json_t *jg = json_array(), *jm = json_array();
    util_table *tg = util_table_new(7), *tm = util_table_new(6);
    const char *hg[] = {"gpu", "memory", "mem BW", "fp16 TFLOP/s",
                        "bf16 TFLOP/s", "host link", "NVLink"};
    for (int i = 0; i < 7; i++) util_table_col(tg, i, hg[i], i ? 'r' : 'l');
    const char *hm[] = {"model", "family", "params", "layers", "hidden",
                        "sequence"};
    for (int i = 0; i < 6; i++) util_table_col(tm, i, hm[i], i < 2 ? 'l' : 'r');
    for (int i = 0; g[i]; i++) {
        prof_gpu gpu;   /* the catalog's; calibrations are listed below */
        if (prof_gpu_get_builtin(g[i], &gpu, &e)) return fail(&e);
        char mem[32], bw[32], f16[32], b16[32], host[32], nvl[48];
        util_fmt_bytes(gpu.mem_bytes, mem, sizeof mem);
        util_fmt_bw(gpu.mem_bw_bytes_per_s, bw, sizeof bw);
        snprintf(f16, sizeof f16, "%.1f", gpu.peak_flops[PROF_DT_FP16] / 1e12);
        snprintf(b16, sizeof b16, gpu.peak_flops[PROF_DT_BF16] > 0 ? "%.1f" : "-",
                 gpu.peak_flops[PROF_DT_BF16] / 1e12);
        snprintf(host, sizeof host, "PCIe %d.0 x%d", gpu.pcie_gen, gpu.pcie_lanes);
        if (gpu.nvlink_links)
            snprintf(nvl, sizeof nvl, "%d x %.0f GB/s", gpu.nvlink_links,
                     gpu.nvlink_bw_bytes_per_s / 1e9);
        else
            snprintf(nvl, sizeof nvl, "-");
        const char *row[] = {gpu.name, mem, bw, f16, b16, host, nvl};
        util_table_row(tg, row);
        json_array_append_new(jg, json_pack(
            "{s:s,s:f,s:f,s:f,s:f,s:f,s:f,s:i,s:i,s:i,s:f}", "name", gpu.name,
            "mem_bytes", gpu.mem_bytes, "mem_bw_bytes_per_s",
            gpu.mem_bw_bytes_per_s, "fp32_flops", gpu.peak_flops[PROF_DT_FP32],
            "tf32_flops", gpu.peak_flops[PROF_DT_TF32], "fp16_flops",
            gpu.peak_flops[PROF_DT_FP16], "bf16_flops",
            gpu.peak_flops[PROF_DT_BF16], "pcie_gen", gpu.pcie_gen,
            "pcie_lanes", gpu.pcie_lanes, "nvlink_links", gpu.nvlink_links,
            "nvlink_bw_bytes_per_s", gpu.nvlink_bw_bytes_per_s));
    }
    for (int i = 0; mn[i]; i++) {
        prof_model *m = prof_model_load(mn[i], &e);
        if (!m) return fail(&e);
        const prof_model_spec *s = &m->spec;
        char p[32], l[32], h[16], sq[32];
        util_fmt_count(m->params, p, sizeof p);
        if (s->dec_layers) snprintf(l, sizeof l, "%d+%d", s->layers, s->dec_layers);
        else snprintf(l, sizeof l, "%d", s->layers);
        snprintf(h, sizeof h, "%d", s->hidden);
        if (s->dec_seq_len) snprintf(sq, sizeof sq, "%d/%d", s->seq_len, s->dec_seq_len);
        else snprintf(sq, sizeof sq, "%d", s->seq_len);
        const char *row[] = {s->name, prof_family_name(s->family), p, l, h, sq};
        util_table_row(tm, row);
        json_array_append_new(jm, json_pack("{s:s,s:s,s:f,s:i,s:i,s:i,s:i}",
                                            "name", s->name, "family",
                                            prof_family_name(s->family),
                                            "params", m->params, "layers",
                                            s->layers, "dec_layers",
                                            s->dec_layers, "hidden", s->hidden,
                                            "seq_len", s->seq_len));
        prof_model_free(m);
    }
    /* calibrations: a broken file is named, the others still listed */
    prof_calib *cal;
    int ncal;
    util_err ce;
    prof_calib_foreign_notes(0);    /* the table names each machine */
    int cal_rc = prof_calib_list(&cal, &ncal, &ce);
    const char *dir = prof_profile_dir();
    json_t *jc = json_array();
    util_table *tc = util_table_new(7);
    const char *hc[] = {"device", "calibrated", "machine", "fit error",
                        "ops measured", "links", "host (offload)"};
    for (int i = 0; i < 7; i++) util_table_col(tc, i, hc[i], 'l');
    for (int i = 0; i < ncal; i++) {
        const prof_calib *c = &cal[i];
        char mach[256], err[48], ops[16], links[64] = "";
        prof_machine_str(&c->machine, mach, sizeof mach);
        snprintf(err, sizeof err, "%.1f%% median, %.1f%% max (%d)%s",
                 100 * c->fit_median_err, 100 * c->fit_max_err,
                 c->fit_samples, c->quick ? ", --quick" : "");
        snprintf(ops, sizeof ops, "%d", c->n_ops);
        for (int x = 0; x < PROF_XFER_COUNT; x++)
            if (c->link[x].present) {
                size_t l = strlen(links);
                snprintf(links + l, sizeof links - l, "%s%s", l ? ", " : "",
                         prof_xfer_name((prof_xfer)x));
            }
        /* the offload schedules' rates: AdamW on the host, the drive */
        char host[96] = "-";
        const prof_calib_tiers *t = &c->tiers;
        if (t->present && t->read_bytes_per_s > 0)
            snprintf(host, sizeof host, "AdamW %.0f M/s, drive %.2f/%.2f "
                     "GB/s", t->adam_params_per_s / 1e6,
                     t->read_bytes_per_s / 1e9, t->write_bytes_per_s / 1e9);
        else if (t->present)
            snprintf(host, sizeof host, "AdamW %.0f M/s",
                     t->adam_params_per_s / 1e6);
        const char *row[] = {c->device, c->date, mach, err, ops,
                             links[0] ? links : "-", host};
        util_table_row(tc, row);
        json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:i,s:f,s:f,s:i}", "device",
                              c->device, "date", c->date, "file", c->file,
                              "machine", mach, "fit_samples", c->fit_samples,
                              "fit_median_error", c->fit_median_err,
                              "fit_max_error", c->fit_max_err, "ops_measured",
                              c->n_ops);
        json_object_set_new(o, "quick", json_boolean(c->quick));
        if (t->present)
            json_object_set_new(o, "tiers", json_pack(
                "{s:f,s:f,s:f,s:s}", "adam_params_per_s",
                t->adam_params_per_s, "drive_read_bytes_per_s",
                t->read_bytes_per_s, "drive_write_bytes_per_s",
                t->write_bytes_per_s, "measured_by", t->model));
        json_array_append_new(jc, o);
    }
    free(cal);
    /* the broken ones, a line each, in the answer as well as on stderr:
     * a reader of the output alone must not take them for none */
    json_t *jb = json_array();
    if (cal_rc) {
        char *msg = util_strdup(ce.msg);
        for (char *l = msg, *nl; l && *l; l = nl) {
            nl = strchr(l, '\n');
            if (nl) *nl++ = '\0';
            json_array_append_new(jb, json_string(l));
        }
        free(msg);
    }
    /* the drives --nvme N:MODEL knows */
    json_t *jd = json_array();
    util_table *td = util_table_new(5);
    const char *hd[] = {"drive", "capacity", "read", "write", "host link"};
    for (int i = 0; i < 5; i++) util_table_col(td, i, hd[i], i ? 'r' : 'l');
    for (int k = 0; prof_drive_at(k); k++) {
        const prof_drive *d = prof_drive_at(k);
        char cap[32], rd[32], wr[32], ln[32];
        snprintf(cap, sizeof cap, "%.2f TB", d->cap / 1e12);
        util_fmt_bw(d->read, rd, sizeof rd);
        util_fmt_bw(d->write, wr, sizeof wr);
        snprintf(ln, sizeof ln, "PCIe %d.0 x%d", d->gen, d->lanes);
        const char *row[] = {d->name, cap, rd, wr, ln};
        util_table_row(td, row);
        json_array_append_new(jd, json_pack(
            "{s:s,s:f,s:f,s:f,s:i,s:i}", "name", d->name, "capacity_bytes",
            d->cap, "read_bytes_per_s", d->read, "write_bytes_per_s",
            d->write, "pcie_gen", d->gen, "pcie_lanes", d->lanes));
    }
    if (json) {
        json_t *root = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "gpus", jg,
                                 "models", jm, "drives", jd, "profile_dir",
                                 dir ? json_string(dir) : json_null(),
                                 "calibrated", jc, "broken", jb);
        util_json_print(root, stdout);
        json_decref(root);
    } else {
        printf("GPUs (dense peaks with fp32 accumulation; --hw GPU xN builds "
               "a server)\n");
        util_table_print(tg, stdout, "  ");
        printf("\nmodels (--model NAME, or a spec / config.json file)\n");
        util_table_print(tm, stdout, "  ");
        printf("\nNVMe drives (--nvme N:MODEL; sequential rates from their "
               "datasheets)\n");
        util_table_print(td, stdout, "  ");
        if (ncal) {
            printf("\ncalibrated on a machine (in %s; these replace the "
                   "figures above)\n", dir);
            util_table_print(tc, stdout, "  ");
        } else if (!cal_rc) {
            printf("\ncalibrated: none %s%s (sluice calibrate --hw cpu x2 "
                   "measures this machine's cores)\n",
                   dir ? "in " : "(no profile directory)", dir ? dir : "");
        }
        if (cal_rc) {
            printf("\ncalibrations that do not load (fix or remove them; "
                   "sluice calibrate writes them anew)\n");
            for (size_t i = 0; i < json_array_size(jb); i++)
                printf("  %s\n", json_string_value(json_array_get(jb, i)));
        }
        json_decref(jb);
        json_decref(jg);
        json_decref(jm);
        json_decref(jc);
        json_decref(jd);
    }
    util_table_free(td);
    util_table_free(tg);
    util_table_free(tm);
    util_table_free(tc);
    if (cal_rc) {
        /* a line per broken file */
        for (char *l = ce.msg, *nl; l; l = nl) {
            nl = strchr(l, '\n');
            if (nl) *nl++ = '\0';
            fprintf(stderr, "sluice profile: %s\n", l);
        }
        return ce.code ? ce.code : UTIL_EXIT_USAGE;
    }
    return 0;
}

static int cmd_show(int argc, char **argv)
{
    int json = 0, ops = 0, hw_at = -1, hw_n = 0;
    const char *model = NULL;
    long seq = 0;
    int dtype = -1;
    prof_finetune ft = {PROF_FT_FULL, 0, 0, 0};
    prof_hw_opts ho = {0};
    util_err e;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--ops")) ops = 1;
        else if (!strcmp(a, "--hw")) {
            /* a repeated --hw replaces the earlier one, as other options do */
            hw_at = i + 1;
            hw_n = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) { i++; hw_n++; }
            if (!hw_n) return bad("show: --hw needs a GPU type and count, e.g. "
                                  "--hw rtx2080ti x8%s", "");
        } else if (!strcmp(a, "--seq")) {
            if (!v || util_parse_int(v, 1, PROF_MAX_SEQ, &n)) {
                char m[160];
                snprintf(m, sizeof m, "'%.100s': expected a token count in "
                         "[1, %d]", v ? v : "", PROF_MAX_SEQ);
                return bad("show: --seq %s", m);
            }
            seq = n;
            i++;
        } else if (!strcmp(a, "--finetune")) {
            if (!v) return bad("show: --finetune needs a mode%s", "");
            if (prof_finetune_parse(v, &ft, &e)) return bad("show: %s", e.msg);
            i++;
        } else if (!strcmp(a, "--dtype")) {
            const char *d[] = {"fp32", "tf32", "fp16", "bf16"};
            dtype = -1;
            for (int k = 0; v && k < 4; k++) if (!strcmp(v, d[k])) dtype = k;
            if (dtype < 0 || dtype == PROF_DT_TF32)
                return bad("show: --dtype is one of fp32, fp16, bf16, got '%s'", v ? v : "");
            i++;
        } else if ((n = prof_hw_opts_arg(argc, argv, &i, &ho, &e))) {
            if (n < 0) return bad("show: %s", e.msg);
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-') {
            return bad("show: unknown option '%s'", a);
        } else if (!model) {
            model = a;
        } else {
            return bad("show: one model at a time, got another: '%s'", a);
        }
    }
    if (hw_at >= 0) {
        if (model) return bad("show: give a model or --hw, not both ('%s')", model);
        prof_topo *t = prof_topo_from_args(hw_n, argv + hw_at, &ho, &e);
        if (!t) return fail(&e);
        if (json) {
            json_t *j = prof_topo_json(t);
            util_json_print(j, stdout);
            json_decref(j);
        } else {
            prof_topo_print(t, stdout);
        }
        prof_topo_free(t);
        return 0;
    }
    if (!model) return bad("show: name a model or --hw GPU xN%s", "");
    /* a calibration file (sluice calibrate's) is shown as validate says
     * it, not read as a model spec */
    json_t *cj = strchr(model, '/') || strstr(model, ".json")
                     ? json_load_file(model, 0, NULL) : NULL;
    int is_cal = cj && prof_json_format_is(cj, "sluice-calibration");
    json_decref(cj);
    if (is_cal)
        return prof_validate_file(model, stdout, &e) ? fail(&e) : 0;
    prof_model_spec s;
    if (prof_model_spec_get(model, &s, &e)) return fail(&e);
    if (seq) {
        if (s.max_pos && seq > s.max_pos) {
            fprintf(stderr, "sluice profile: --seq %ld is longer than the %d "
                    "learned positions of %s\n", seq, s.max_pos, s.name);
            return UTIL_EXIT_USAGE;
        }
        s.seq_len = (int)seq;
    }
    if (dtype >= 0) s.dtype = (prof_dtype)dtype;
    prof_model *m = prof_model_build(&s, &e);
    if (!m) return fail(&e);
    if (prof_model_finetune(m, &ft, &e)) {
        prof_model_free(m);
        return fail(&e);
    }
    if (json) {
        json_t *j = prof_model_json(m, ops);
        util_json_print(j, stdout);
        json_decref(j);
    } else {
        prof_model_print(m, ops, stdout);
    }
    prof_model_free(m);
    return 0;
}

static int cmd_validate(int argc, char **argv)
{
    /* options first, before any file is checked: a --json or --help
     * was opened as a file after the files before it were reported */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1])
            return bad("validate: unknown option '%s' (it takes files "
                       "only; name a file beginning with '-' as ./-FILE)",
                       argv[i]);
    }
    if (argc < 2) return bad("validate: name at least one file%s", "");
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        util_err e;
        if (prof_validate_file(argv[i], stdout, &e)) {
            fprintf(stderr, "sluice profile: %s\n", e.msg);
            if (e.code > rc) rc = e.code;
        }
    }
    return rc;
}

int prof_cmd_main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return UTIL_EXIT_USAGE;
    }
    const char *c = argv[1];
    if (!strcmp(c, "--help") || !strcmp(c, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(c, "list")) return cmd_list(argc - 1, argv + 1);
    if (!strcmp(c, "show")) return cmd_show(argc - 1, argv + 1);
    if (!strcmp(c, "validate")) return cmd_validate(argc - 1, argv + 1);
    const char *subs[] = {"list", "show", "validate"};
    const char *near = util_closest(c, subs, 3);
    fprintf(stderr, "sluice profile: unknown subcommand '%s'%s%s%s\n", c,
            near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
    usage(stderr);
    return UTIL_EXIT_USAGE;
}
