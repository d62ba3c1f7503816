/* Errors, allocation that aborts on failure, and small string helpers. */
#include "util/util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <string.h>
#include <unistd.h>

int util_errf(util_err *e, int code, const char *fmt, ...)
{
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    e->lack = 0;
    e->lack_by = 0;
    return -1;
}

int util_err_prefix(util_err *e, const char *fmt, ...)
{
    if (!e) return -1;
    char pre[512], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%s: %s", pre, old);
    return -1;
}

void util_never_(const char *file, int line, const char *what)
{
    fprintf(stderr, "sluice: internal error at %s:%d: %s\n", file, line, what);
    abort();
}

/* Out of memory is the machine's, not a fault of sluice: said, and the
 * run ends with exit code 1 (no core dump); what it wrote is flushed,
 * its offload files are unlinked already (exec/offload.c) */
static void *oom(size_t n)
{
    fprintf(stderr, "sluice: out of memory allocating %zu bytes (the "
            "machine's memory, or this process's limit of it, is used "
            "up)\n", n);
    fflush(stdout);
    fflush(stderr);
    _exit(UTIL_EXIT_FAIL);
}

void *util_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    return p ? p : oom(n);
}

void *util_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    return p ? p : oom(n * size);
}

void *util_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    return q ? q : oom(n);
}

void util_heap_keep(void)
{
#ifdef __GLIBC__
    /* below 256 MiB an array comes from the heap, and the heap's top is
     * given back only beyond 512 MiB free: the engine's arrays of a
     * 100,000-task simulation (tens of MiB each) are otherwise mapped and
     * unmapped per simulation, a tenth of a 16,384-GPU search's time in
     * page faults */
    static int done;
    if (done) return;
    done = 1;
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

char *util_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(util_malloc(n), s, n);
}

int util_edit_distance(const char *a, const char *b)
{
    enum { MAXL = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la > MAXL) la = MAXL;
    if (lb > MAXL) lb = MAXL;
    int prev[MAXL + 1], cur[MAXL + 1];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = tolower((unsigned char)a[i - 1]) !=
                      tolower((unsigned char)b[j - 1]);
            int best = prev[j - 1] + sub;
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            cur[j] = best;
        }
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

const char *util_closest(const char *word, const char *const *cands, size_t n)
{
    int limit = (int)strlen(word) / 3;
    if (limit < 2) limit = 2;
    const char *best = NULL;
    /* in halves: a prefix match ("rtx2080" for "rtx2080ti", "a100" for
     * "a100-sxm-40gb") is a better guess than one edit ("a10") */
    int bestd = 2 * limit + 1;
    for (size_t i = 0; i < n; i++) {
        int d = 2 * util_edit_distance(word, cands[i]);
        size_t lw = strlen(word);
        if (lw >= 3 && strncasecmp(cands[i], word, lw) == 0 && d > 1) d = 1;
        if (d < bestd) { bestd = d; best = cands[i]; }
    }
    return best;
}

/* Whether [s, end), which strtod read as a number, is written as a
 * decimal one: digits, a point, an exponent, a sign; not hexadecimal
 * ("0x10"), "inf" or "nan", nor after blanks strtod skips. */
static int decimal(const char *s, const char *end)
{
    for (const char *p = s; p < end; p++)
        if (!isdigit((unsigned char)*p) && *p != '.' && *p != 'e' &&
            *p != 'E' && *p != '+' && *p != '-')
            return 0;
    return end > s;
}

int util_parse_double(const char *s, double *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || !decimal(s, end)) return -1;
    *out = v;
    return 0;
}

int util_parse_int(const char *s, long lo, long hi, long *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int util_parse_size(const char *s, double *bytes)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0 || !decimal(s, end))
        return -1;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    case 'B': break;
    default: return -1;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    *bytes = v * mul;
    return 0;
}

int util_parse_size_unit(const char *s, double *bytes)
{
    double v;
    if (util_parse_size(s, &v)) return -1;
    char *end;
    strtod(s, &end);
    if (!strchr("KMGT", toupper((unsigned char)*end)) || !*end) return -1;
    *bytes = v;
    return 0;
}

static void fmt_bytes_prec(double b, int prec, char *buf, size_t n);

char *util_fmt_bytes(double b, char *buf, size_t n)
{
    fmt_bytes_prec(b, 2, buf, n);
    return buf;
}

static void fmt_bytes_prec(double b, int prec, char *buf, size_t n)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int i = 0;
    double v = b < 0 ? -b : b;
    while (v >= 1024 && i < 5) { v /= 1024; i++; }
    if (b < 0) v = -v;
    if (i == 0) snprintf(buf, n, "%.0f B", v);
    else snprintf(buf, n, "%.*f %s", prec, v, u[i]);
}

void util_fmt_bytes2(double a, char *ba, double b, char *bb, size_t n)
{
    for (int prec = 2; prec <= 6; prec++) {
        fmt_bytes_prec(a, prec, ba, n);
        fmt_bytes_prec(b, prec, bb, n);
        if (a == b || strcmp(ba, bb)) return;
    }
}

char *util_fmt_bw(double bps, char *buf, size_t n)
{
    if (bps >= 1e9) snprintf(buf, n, "%.1f GB/s", bps / 1e9);
    else if (bps >= 1e6) snprintf(buf, n, "%.1f MB/s", bps / 1e6);
    else snprintf(buf, n, "%.0f B/s", bps);
    return buf;
}

char *util_fmt_count(double v, char *buf, size_t n)
{
    double a = fabs(v);
    if (a >= 1e12) snprintf(buf, n, "%.2fT", v / 1e12);
    else if (a >= 1e9) snprintf(buf, n, "%.2fB", v / 1e9);
    else if (a >= 1e6) snprintf(buf, n, "%.1fM", v / 1e6);
    else if (a >= 1e3) snprintf(buf, n, "%.1fk", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
    return buf;
}

char *util_fmt_time(double s, char *buf, size_t n)
{
    double a = fabs(s);
    if (a >= 1) snprintf(buf, n, "%.2f s", s);
    else if (a >= 1e-3) snprintf(buf, n, "%.2f ms", s * 1e3);
    else if (a >= 1e-6) snprintf(buf, n, "%.1f us", s * 1e6);
    else snprintf(buf, n, "%.0f ns", s * 1e9);
    return buf;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when there is none
 * (stray continuation byte, overlong form, surrogate, past U+10FFFF, cut
 * short). */
static int utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (!n || c > 0xF4) return 0;
    unsigned cp = c & (0x3F >> (n - 1));
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

int util_utf8_check(const char *what, const char *s, util_err *e)
{
    const unsigned char *p = (const unsigned char *)s;
    int bad = 0;
    for (int n; *p; p += n ? n : 1) {
        n = utf8_len(p);
        bad |= !n;
    }
    if (!bad) return 0;
    char shown[512];
    size_t k = 0;
    for (p = (const unsigned char *)s; *p && k + 5 < sizeof shown; p++) {
        if (*p >= 0x20 && *p < 0x7F) shown[k++] = (char)*p;
        else k += (size_t)snprintf(shown + k, sizeof shown - k, "\\x%02X", *p);
    }
    shown[k] = 0;
    return util_errf(e, UTIL_EXIT_USAGE, "%s '%s' is not valid UTF-8, which "
                     "a JSON file cannot hold: rename it, or give it through "
                     "a symbolic link with a UTF-8 name", what, shown);
}

void util_utf8_fix(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int n = utf8_len(p);
        if (n) {
            p += n;
        } else {
            *p++ = '?';
        }
    }
}
