/* JSON input with locations. Jansson parses; this file keeps the text so an
 * error about a well-formed but wrong value can still say file:line:col, by
 * walking the text along the value's JSON path (Jansson keeps no positions). */
#include "util/util.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int util_jdoc_load(util_jdoc *d, const char *file, const char *text,
                   util_err *e)
{
    memset(d, 0, sizeof *d);
    d->file = util_strdup(file);
    if (text) {
        d->text = util_strdup(text);
    } else if (util_read_file(file, &d->text, NULL, e) != 0) {
        util_jdoc_free(d);
        return -1;
    }
    json_error_t je;
    d->root = json_loads(d->text, JSON_REJECT_DUPLICATES, &je);
    if (!d->root) {
        /* the parser's own words name its flag: say what the text holds */
        const char *nul = strstr(je.text, "\\u0000 is not allowed");
        util_errf(e, UTIL_EXIT_USAGE, "%s:%d:%d: malformed JSON: %s", file,
                  je.line, je.column,
                  nul ? "a string holds \\u0000 (a NUL character), which "
                        "no name or value here may"
                      : je.text);
        util_jdoc_free(d);
        return -1;
    }
    return 0;
}

void util_jdoc_free(util_jdoc *d)
{
    if (!d) return;
    free(d->file);
    free(d->text);
    if (d->root) json_decref(d->root);
    memset(d, 0, sizeof *d);
}

/* ---- locating a path in the text ---- */

static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static const char *skip_string(const char *p)
{
    if (*p != '"') return NULL;
    for (p++; *p && *p != '"'; p++)
        if (*p == '\\' && p[1]) p++;
    return *p == '"' ? p + 1 : NULL;
}

static const char *skip_value(const char *p)
{
    p = ws(p);
    if (*p == '"') return skip_string(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                p = skip_string(ws(p));
                if (!p) return NULL;
                p = ws(p);
                if (*p != ':') return NULL;
                p++;
            }
            p = skip_value(p);
            if (!p) return NULL;
            p = ws(p);
            if (*p == ',') { p++; continue; }
            return *p == close ? p + 1 : NULL;
        }
    }
    if (!*p) return NULL;
    while (*p && !strchr(",]} \t\r\n", *p)) p++;
    return p;
}

/* Does the JSON string at p (with quotes) equal key[0..klen)? */
static int key_eq(const char *p, const char *key, size_t klen)
{
    const char *end = skip_string(p);
    return end && (size_t)(end - p - 2) == klen && !strncmp(p + 1, key, klen);
}

static const char *find_member(const char *p, const char *key, size_t klen)
{
    p = ws(p);
    if (*p != '{') return NULL;
    p = ws(p + 1);
    if (*p == '}') return NULL;
    for (;;) {
        p = ws(p);
        int hit = key_eq(p, key, klen);
        p = skip_string(p);
        if (!p) return NULL;
        p = ws(p);
        if (*p != ':') return NULL;
        p = ws(p + 1);
        if (hit) return p;
        p = skip_value(p);
        if (!p) return NULL;
        p = ws(p);
        if (*p != ',') return NULL;
        p++;
    }
}

static const char *find_index(const char *p, long idx)
{
    p = ws(p);
    if (*p != '[') return NULL;
    p = ws(p + 1);
    for (long i = 0;; i++) {
        if (*p == ']') return NULL;
        if (i == idx) return p;
        p = skip_value(p);
        if (!p) return NULL;
        p = ws(p);
        if (*p != ',') return NULL;
        p = ws(p + 1);
    }
}

void util_json_locate(const char *text, const char *path, int *line, int *col)
{
    *line = *col = 0;
    if (!text) return;
    const char *p = ws(text);
    const char *s = path ? path : "";
    while (*s && p) {
        if (*s == '.') s++;
        if (*s == '[') {
            long idx = strtol(s + 1, (char **)&s, 10);
            if (*s == ']') s++;
            p = find_index(p, idx);
        } else {
            size_t k = strcspn(s, ".[");
            p = find_member(p, s, k);
            s += k;
        }
    }
    if (!p) return;
    int l = 1, c = 1;
    for (const char *q = text; q < p; q++) {
        if (*q == '\n') { l++; c = 1; }
        else c++;
    }
    *line = l;
    *col = c;
}

/* ---- typed getters ---- */

util_jobj util_jroot(const util_jdoc *d)
{
    util_jobj o = {.doc = d, .j = d->root};
    return o;
}

static void join(char *out, size_t n, const char *path, const char *key)
{
    if (!key || !*key) snprintf(out, n, "%s", path);
    else if (!*path) snprintf(out, n, "%s", key);
    else if (key[0] == '[') snprintf(out, n, "%s%s", path, key);
    else snprintf(out, n, "%s.%s", path, key);
}

int util_jerr(util_err *e, const util_jobj *o, const char *key,
              const char *fmt, ...)
{
    char full[320], msg[1024];
    join(full, sizeof full, o->path, key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    util_json_locate(o->doc->text, full, &line, &col);
    if (line == 0) util_json_locate(o->doc->text, o->path, &line, &col);
    if (line == 0) line = col = 1;
    return util_errf(e, UTIL_EXIT_USAGE, "%s:%d:%d: field '%s': %s",
                     o->doc->file, line, col, full, msg);
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

int util_jkeys(const util_jobj *o, const char *const *allowed, util_err *e)
{
    const char *k;
    json_t *v;
    size_t n = 0;
    while (allowed[n]) n++;
    json_object_foreach(o->j, k, v) {
        size_t i;
        for (i = 0; i < n; i++)
            if (!strcmp(k, allowed[i])) break;
        if (i < n) continue;
        const char *near = util_closest(k, allowed, n);
        if (near)
            return util_jerr(e, o, k, "unknown field (did you mean '%s'?)",
                             near);
        return util_jerr(e, o, k, "unknown field");
    }
    return 0;
}

/* Looks key up; 1 if found, 0 if absent and optional, -1 on error. */
static int get(const util_jobj *o, const char *key, int required, json_t **v,
               util_err *e)
{
    if (!json_is_object(o->j))
        return util_jerr(e, o, NULL, "expected an object, got %s",
                         type_name(o->j));
    *v = json_object_get(o->j, key);
    if (*v) return 1;
    if (required) return util_jerr(e, o, key, "missing required field");
    return 0;
}

int util_jnum(const util_jobj *o, const char *key, int required, double lo,
              double hi, double *out, util_err *e)
{
    json_t *v;
    int r = get(o, key, required, &v, e);
    if (r <= 0) return r;
    if (!json_is_number(v))
        return util_jerr(e, o, key, "expected a number, got %s", type_name(v));
    double x = json_number_value(v);
    if (!(x >= lo)) {
        if (lo == UTIL_POSITIVE && x > 0)
            return util_jerr(e, o, key, "%g is too small to compute with "
                             "(must be >= %g)", x, lo);
        if (lo == UTIL_POSITIVE)
            return util_jerr(e, o, key, "%g is not allowed (must be > 0)", x);
        return util_jerr(e, o, key, "%g is too small (must be >= %g)", x, lo);
    }
    if (!(x <= hi))
        return util_jerr(e, o, key, "%g is too large (must be <= %g)", x, hi);
    *out = x;
    return 0;
}

int util_jint(const util_jobj *o, const char *key, int required, long lo,
              long hi, long *out, util_err *e)
{
    json_t *v;
    int r = get(o, key, required, &v, e);
    if (r <= 0) return r;
    if (!json_is_number(v))
        return util_jerr(e, o, key, "expected an integer, got %s",
                         type_name(v));
    double x = json_number_value(v);
    if (x != floor(x))
        return util_jerr(e, o, key, "expected an integer, got %g", x);
    if (x < (double)lo || x > (double)hi)
        return util_jerr(e, o, key, "%g is out of range [%ld, %ld]", x, lo,
                         hi);
    *out = (long)x;
    return 0;
}

int util_jbool(const util_jobj *o, const char *key, int required, int *out,
               util_err *e)
{
    json_t *v;
    int r = get(o, key, required, &v, e);
    if (r <= 0) return r;
    if (!json_is_boolean(v))
        return util_jerr(e, o, key, "expected true or false, got %s",
                         type_name(v));
    *out = json_is_true(v);
    return 0;
}

int util_jstr(const util_jobj *o, const char *key, int required, char *out,
              size_t n, util_err *e)
{
    json_t *v;
    int r = get(o, key, required, &v, e);
    if (r <= 0) return r;
    if (!json_is_string(v))
        return util_jerr(e, o, key, "expected a string, got %s", type_name(v));
    const char *s = json_string_value(v);
    if (strlen(s) >= n)
        return util_jerr(e, o, key, "string longer than %zu characters",
                         n - 1);
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

int util_jenum(const util_jobj *o, const char *key, int required,
               const char *const *choices, int *out, util_err *e)
{
    char s[128];
    json_t *v;
    int r = get(o, key, required, &v, e);
    if (r <= 0) return r;
    if (util_jstr(o, key, 1, s, sizeof s, e)) return -1;
    size_t n = 0;
    char list[512] = "";
    for (; choices[n]; n++) {
        if (!strcmp(s, choices[n])) { *out = (int)n; return 0; }
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", n ? ", " : "", choices[n]);
    }
    const char *near = util_closest(s, choices, n);
    if (near)
        return util_jerr(e, o, key, "unknown value '%s' (did you mean '%s'?)",
                         s, near);
    return util_jerr(e, o, key, "unknown value '%s' (one of: %s)", s, list);
}

int util_jchild(const util_jobj *o, const char *key, int required,
                util_jobj *out, int *present, util_err *e)
{
    json_t *v;
    if (present) *present = 0;
    int r = get(o, key, required, &v, e);
    if (r <= 0) return r;
    if (!json_is_object(v))
        return util_jerr(e, o, key, "expected an object, got %s",
                         type_name(v));
    out->doc = o->doc;
    out->j = v;
    join(out->path, sizeof out->path, o->path, key);
    if (present) *present = 1;
    return 0;
}

int util_jarray(const util_jobj *o, const char *key, int required,
                json_t **arr, util_err *e)
{
    json_t *v;
    *arr = NULL;
    int r = get(o, key, required, &v, e);
    if (r <= 0) return r;
    if (!json_is_array(v))
        return util_jerr(e, o, key, "expected an array, got %s",
                         type_name(v));
    *arr = v;
    return 0;
}

int util_jelem(const util_jobj *o, const char *key, json_t *arr, size_t i,
               util_jobj *out, util_err *e)
{
    char sub[300];
    join(sub, sizeof sub, o->path, key);
    out->doc = o->doc;
    out->j = json_array_get(arr, i);
    snprintf(out->path, sizeof out->path, "%s[%zu]", sub, i);
    if (!json_is_object(out->j)) {
        util_jobj parent = {.doc = o->doc, .j = arr};
        snprintf(parent.path, sizeof parent.path, "%s", sub);
        char idx[32];
        snprintf(idx, sizeof idx, "[%zu]", i);
        return util_jerr(e, &parent, idx, "expected an object, got %s",
                         out->j ? type_name(out->j) : "nothing");
    }
    return 0;
}

/* Integral reals (byte and parameter counts computed in double) print as
 * integers, exactly; other reals with 15 significant digits. */
static void integralise(json_t *v)
{
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            double d = json_real_value(x);
            if (json_is_real(x) && d == floor(d) && fabs(d) < 9e15)
                json_object_set_new(v, k, json_integer((json_int_t)d));
            else
                integralise(x);
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *x = json_array_get(v, i);
            double d = json_real_value(x);
            if (json_is_real(x) && d == floor(d) && fabs(d) < 9e15)
                json_array_set_new(v, i, json_integer((json_int_t)d));
            else
                integralise(x);
        }
    }
}

int util_json_print(json_t *v, FILE *f)
{
    /* a json_pack that failed (a string not UTF-8): never an empty answer */
    if (UTIL_NEVER(!v)) return -1;
    integralise(v);
    int r = json_dumpf(v, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
                                 JSON_REAL_PRECISION(15));
    fputc('\n', f);
    return r;
}
