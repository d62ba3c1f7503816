/* util: sizes, suggestions, JSON locations and typed getters, atomic write. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"
#include "util/util.h"

Test(util, parse_size)
{
    double b;
    cr_assert_eq(util_parse_size("256G", &b), 0);
    cr_assert_eq(b, 256.0 * (1 << 30));
    cr_assert_eq(util_parse_size("11GiB", &b), 0);
    cr_assert_eq(b, 11.0 * (1 << 30));
    cr_assert_eq(util_parse_size("4096", &b), 0);
    cr_assert_eq(b, 4096);
    cr_assert_eq(util_parse_size("1.5T", &b), 0);
    cr_assert_eq(b, 1.5 * 1024 * 1024 * 1024 * 1024);
    cr_assert_eq(util_parse_size("12X", &b), -1);
    cr_assert_eq(util_parse_size("-1G", &b), -1);
    cr_assert_eq(util_parse_size("", &b), -1);
    /* written as decimal numbers only: strtod also reads hexadecimal,
     * infinities and leading blanks */
    cr_assert_eq(util_parse_size("0x10G", &b), -1);
    cr_assert_eq(util_parse_size(" 5G", &b), -1);
    cr_assert_eq(util_parse_size("infG", &b), -1);
    cr_assert_eq(util_parse_size("2e1G", &b), 0);
    cr_assert_eq(b, 20.0 * (1 << 30));
    /* with its unit required: a bare number, or bytes said as B, is not
     * a memory size anyone means */
    cr_assert_eq(util_parse_size_unit("64m", &b), 0);
    cr_assert_eq(b, 64.0 * (1 << 20));
    cr_assert_eq(util_parse_size_unit("1.5GiB", &b), 0);
    cr_assert_eq(b, 1.5 * (1 << 30));
    cr_assert_eq(util_parse_size_unit("4096", &b), -1);
    cr_assert_eq(util_parse_size_unit("4096B", &b), -1);
    cr_assert_eq(util_parse_size_unit("12X", &b), -1);
    double x;
    cr_assert_eq(util_parse_double("0x10", &x), -1);
    cr_assert_eq(util_parse_double(" 1", &x), -1);
    cr_assert_eq(util_parse_double("-1.5e-3", &x), 0);
    cr_assert_eq(x, -1.5e-3);
}

/* Two sizes that differ are never said alike: "needs 21.83 TiB, the
 * drives hold 21.83 TiB (103.23 MiB missing)" read as a contradiction */
Test(util, fmt_bytes2_tells_sizes_apart)
{
    char a[32], b[32];
    util_fmt_bytes2(21.828e12 * 1.0995116, a, 21.828e12 * 1.0995116 -
                    103.23 * 1048576, b, sizeof a);
    cr_expect(strcmp(a, b), "%s against %s", a, b);
    util_fmt_bytes2(3.0 * 1073741824, a, 2.0 * 1073741824, b, sizeof a);
    cr_expect_str_eq(a, "3.00 GiB");
    cr_expect_str_eq(b, "2.00 GiB");
    util_fmt_bytes2(2.0 * 1073741824, a, 2.0 * 1073741824, b, sizeof a);
    cr_expect_str_eq(a, "2.00 GiB");
    cr_expect_str_eq(b, "2.00 GiB");
    util_fmt_bytes2(2.0 * 1073741824 + 1585446, a, 2.0 * 1073741824, b,
                    sizeof a);
    cr_expect_str_eq(a, "2.001 GiB");
    cr_expect_str_eq(b, "2.000 GiB");
}

Test(util, closest)
{
    const char *names[] = {"rtx2080ti", "rtx3090", "rtx4090", "h100-sxm"};
    cr_assert_str_eq(util_closest("rtx2080", names, 4), "rtx2080ti");
    cr_assert_str_eq(util_closest("rtx4080", names, 4), "rtx4090");
    cr_assert_null(util_closest("zzzzzzzzzz", names, 4));
    cr_assert_eq(util_edit_distance("kitten", "sitting"), 3);
}

Test(util, json_locate)
{
    const char *t = "{\n  \"a\": 1,\n  \"b\": [ {\"x\": 2}, {\"x\": \"s\"} ]\n}";
    int l, c;
    util_json_locate(t, "b[1].x", &l, &c);
    cr_assert_eq(l, 3);
    cr_assert_eq(c, 26);
    util_json_locate(t, "a", &l, &c);
    cr_assert_eq(l, 2);
    cr_assert_eq(c, 8);
    util_json_locate(t, "nope", &l, &c);
    cr_assert_eq(l, 0);
}

/* A NUL in a string is said as what the text holds, not by the parser's
 * flag (it read "not allowed without JSON_ALLOW_NUL") */
Test(util, json_nul_in_a_string_is_named)
{
    util_jdoc d;
    util_err e = {0};
    cr_assert_eq(util_jdoc_load(&d, "w.json", "{\"name\": \"a\\u0000b\"}",
                                &e), -1);
    cr_expect_str_eq(e.msg, "w.json:1:19: malformed JSON: a string holds "
                     "\\u0000 (a NUL character), which no name or value "
                     "here may");
    util_jdoc_free(&d);
}

Test(util, json_getters_name_file_line_field)
{
    util_jdoc d;
    util_err e;
    const char *t = "{\n \"gpus\": [\n  {\"mem\": 1},\n  {\"mem\": \"x\"}\n ]\n}";
    cr_assert_eq(util_jdoc_load(&d, "hw.json", t, &e), 0);
    util_jobj root = util_jroot(&d), g;
    json_t *arr;
    cr_assert_eq(util_jarray(&root, "gpus", 1, &arr, &e), 0);
    cr_assert_eq(util_jelem(&root, "gpus", arr, 1, &g, &e), 0);
    double v = 0;
    cr_assert_eq(util_jnum(&g, "mem", 1, 0, HUGE_VAL, &v, &e), -1);
    cr_assert_str_eq(e.msg, "hw.json:4:11: field 'gpus[1].mem': expected a "
                            "number, got a string");
    cr_assert_eq(e.code, 2);
    const char *allowed[] = {"memory", NULL};
    util_jobj g0;
    cr_assert_eq(util_jelem(&root, "gpus", arr, 0, &g0, &e), 0);
    cr_assert_eq(util_jkeys(&g0, allowed, &e), -1);
    cr_assert(strstr(e.msg, "did you mean 'memory'"), "%s", e.msg);
    cr_assert_eq(util_jnum(&g0, "mem", 1, UTIL_POSITIVE, HUGE_VAL, &v, &e), 0);
    cr_assert_eq(v, 1);
    util_jdoc_free(&d);

    cr_assert_eq(util_jdoc_load(&d, "bad.json", "{\n \"a\": ,\n}", &e), -1);
    cr_assert(!strncmp(e.msg, "bad.json:2:", 11), "%s", e.msg);
}

Test(util, atomic_write_replaces_whole)
{
    char *dir = test_tmpdir();
    char p[512];
    snprintf(p, sizeof p, "%s/f.json", dir);
    util_err e;
    cr_assert_eq(util_write_atomic(p, "one", 3, &e), 0);
    cr_assert_eq(util_write_atomic(p, "second", 6, &e), 0);
    char *s;
    size_t n;
    cr_assert_eq(util_read_file(p, &s, &n, &e), 0);
    cr_assert_str_eq(s, "second");
    free(s);
    /* A write into a missing folder fails and says where. */
    char q[600];
    snprintf(q, sizeof q, "%s/none/f.json", dir);
    cr_assert_eq(util_write_atomic(q, "x", 1, &e), -1);
    cr_assert(strstr(e.msg, "cannot write"));
    unlink(p);
    rmdir(dir);
    free(dir);
}

Test(cli, usage_and_unknown_command)
{
    cli_result r = cli_run("--help");
    cr_assert_eq(r.code, 0);
    cr_assert(strstr(r.out, "commands:"));
    cli_result_free(&r);
    r = cli_run("proflie");
    cr_assert_eq(r.code, 2);
    cr_assert(strstr(r.err, "did you mean 'profile'"), "%s", r.err);
    cli_result_free(&r);
    r = cli_run("%s", "");
    cr_assert_eq(r.code, 2);
    cli_result_free(&r);
}
