/* util file input and output: inputs must be regular files of bounded
 * size; util_write_atomic keeps links, modes and devices as they are,
 * leaves no temporary behind, even when killed mid-write; UTF-8 checks. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/harness.h"
#include "util/util.h"

static void path_in(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

/* The names in dir, sorted and joined by spaces. */
static char *listing(const char *dir)
{
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort);
    cr_assert_geq(n, 0);
    char *s = calloc(1, 4096);
    for (int i = 0; i < n; i++) {
        if (strcmp(ents[i]->d_name, ".") && strcmp(ents[i]->d_name, "..")) {
            if (*s) strcat(s, " ");
            strncat(s, ents[i]->d_name, 4000 - strlen(s));
        }
        free(ents[i]);
    }
    free(ents);
    return s;
}

static char *read_all(const char *p)
{
    char *s = NULL;
    util_err e;
    cr_assert_eq(util_read_file(p, &s, NULL, &e), 0, "%s", e.msg);
    return s;
}

Test(fs, inputs_that_are_not_regular_files_are_refused)
{
    char *d = test_tmpdir(), p[512];
    util_err e;
    char *s;
    cr_assert_eq(util_read_file("/dev/zero", &s, NULL, &e), -1);
    cr_assert_eq(e.code, UTIL_EXIT_USAGE);
    cr_assert(strstr(e.msg, "/dev/zero: is a character device"), "%s", e.msg);
    cr_assert_eq(util_read_file(d, &s, NULL, &e), -1);
    cr_assert(strstr(e.msg, "is a directory"), "%s", e.msg);
    /* a FIFO without a writer: refused at once, not waited on */
    path_in(p, sizeof p, d, "fifo");
    cr_assert_eq(mkfifo(p, 0600), 0);
    cr_assert_eq(util_read_file(p, &s, NULL, &e), -1);
    cr_assert(strstr(e.msg, "FIFO"), "%s", e.msg);
    test_rm_rf(d);
}

Test(fs, inputs_are_capped)
{
    char *d = test_tmpdir(), p[512];
    util_err e;
    char *s;
    path_in(p, sizeof p, d, "big.json");
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    cr_assert_geq(fd, 0);
    /* sparse: one byte past the cap costs no disk */
    cr_assert_eq(ftruncate(fd, (off_t)UTIL_READ_MAX_BYTES + 1), 0);
    close(fd);
    cr_assert_eq(util_read_file(p, &s, NULL, &e), -1);
    cr_assert(strstr(e.msg, "more than the 64.00 MiB"), "%s", e.msg);
    cr_assert_eq(util_read_file_max(p, 10, &s, NULL, &e), -1);
    cr_assert(strstr(e.msg, "more than the 10 B"), "%s", e.msg);
    /* exactly the cap is fine */
    cr_assert_eq(truncate(p, 10), 0);
    size_t n;
    cr_assert_eq(util_read_file_max(p, 10, &s, &n, &e), 0, "%s", e.msg);
    cr_assert_eq(n, 10);
    free(s);
    test_rm_rf(d);
}

Test(fs, write_keeps_mode_and_makes_new_files_by_umask)
{
    char *d = test_tmpdir(), p[512], q[512];
    util_err e;
    path_in(p, sizeof p, d, "plan.json");
    cr_assert_eq(util_write_atomic(p, "one", 3, &e), 0, "%s", e.msg);
    cr_assert_eq(chmod(p, 0640), 0);
    cr_assert_eq(util_write_atomic(p, "two", 3, &e), 0, "%s", e.msg);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0640, "mode %o", st.st_mode & 07777);
    char *s = read_all(p);
    cr_assert_str_eq(s, "two");
    free(s);
    mode_t um = umask(027);
    path_in(q, sizeof q, d, "new.json");
    cr_assert_eq(util_write_atomic(q, "x", 1, &e), 0, "%s", e.msg);
    umask(um);
    cr_assert_eq(stat(q, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0640, "mode %o", st.st_mode & 07777);
    char *l = listing(d);
    cr_assert_str_eq(l, "new.json plan.json");
    free(l);
    test_rm_rf(d);
}

Test(fs, write_through_symlinks_keeps_the_links)
{
    char *d = test_tmpdir(), real[512], link1[512], link2[512], dang[512],
         sub[512];
    util_err e;
    path_in(sub, sizeof sub, d, "sub");
    cr_assert_eq(mkdir(sub, 0755), 0);
    path_in(real, sizeof real, d, "sub/real.json");
    path_in(link1, sizeof link1, d, "l1");
    path_in(link2, sizeof link2, d, "l2");
    cr_assert_eq(util_write_atomic(real, "old", 3, &e), 0, "%s", e.msg);
    cr_assert_eq(symlink("sub/real.json", link1), 0);
    cr_assert_eq(symlink("l1", link2), 0);   /* a chain: l2 -> l1 -> real */
    cr_assert_eq(util_write_atomic(link2, "new", 3, &e), 0, "%s", e.msg);
    struct stat st;
    cr_assert_eq(lstat(link1, &st), 0);
    cr_assert(S_ISLNK(st.st_mode));
    cr_assert_eq(lstat(link2, &st), 0);
    cr_assert(S_ISLNK(st.st_mode));
    char *s = read_all(real);
    cr_assert_str_eq(s, "new");
    free(s);
    /* a dangling link: the file it names is created, the link stays */
    path_in(dang, sizeof dang, d, "dangling");
    cr_assert_eq(symlink("sub/made.json", dang), 0);
    cr_assert_eq(util_write_atomic(dang, "made", 4, &e), 0, "%s", e.msg);
    cr_assert_eq(lstat(dang, &st), 0);
    cr_assert(S_ISLNK(st.st_mode));
    path_in(real, sizeof real, d, "sub/made.json");
    s = read_all(real);
    cr_assert_str_eq(s, "made");
    free(s);
    char *l = listing(sub);
    cr_assert_str_eq(l, "made.json real.json");
    free(l);
    /* a loop is an error, not a hang */
    path_in(link1, sizeof link1, d, "loop");
    cr_assert_eq(symlink("loop", link1), 0);
    cr_assert_eq(util_write_atomic(link1, "x", 1, &e), -1);
    cr_assert(strstr(e.msg, "cannot write"), "%s", e.msg);
    test_rm_rf(d);
}

Test(fs, devices_and_fifos_are_written_through)
{
    util_err e;
    struct stat st;
    cr_assert_eq(util_write_atomic("/dev/null", "plan", 4, &e), 0, "%s", e.msg);
    cr_assert_eq(stat("/dev/null", &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "/dev/null was replaced");
    cr_assert_eq(util_write_atomic("/dev/full", "plan", 4, &e), -1);
    cr_assert_eq(e.code, UTIL_EXIT_FAIL);
    cr_assert(strstr(e.msg, "/dev/full: cannot write: No space left"), "%s",
              e.msg);
    cr_assert_eq(stat("/dev/full", &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "/dev/full was replaced");
    /* a FIFO: the reader gets the data, the FIFO stays a FIFO */
    char *d = test_tmpdir(), p[512];
    path_in(p, sizeof p, d, "fifo");
    cr_assert_eq(mkfifo(p, 0600), 0);
    pid_t pid = fork();
    if (pid == 0) _exit(util_write_atomic(p, "through", 7, NULL) ? 1 : 0);
    int fd = open(p, O_RDONLY);
    cr_assert_geq(fd, 0);
    char buf[32] = "";
    size_t n = 0;
    ssize_t r;
    while ((r = read(fd, buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    close(fd);
    int wst;
    waitpid(pid, &wst, 0);
    cr_assert(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    cr_assert_str_eq(buf, "through");
    cr_assert_eq(lstat(p, &st), 0);
    cr_assert(S_ISFIFO(st.st_mode));
    cr_assert_eq(util_write_atomic(d, "x", 1, &e), -1);
    cr_assert(strstr(e.msg, "is a directory"), "%s", e.msg);
    test_rm_rf(d);
}

/* A leftover of a process that has ended is removed by the next write of
 * its target; one of a live process, or of another file, is not. */
Test(fs, stale_temporaries_are_cleaned_up)
{
    char *d = test_tmpdir(), p[512], dead[600], live[600], other[600];
    util_err e;
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, NULL, 0);
    path_in(p, sizeof p, d, "out.json");
    snprintf(dead, sizeof dead, "%s.sluice-tmp.%ld.w", p, (long)pid);
    snprintf(live, sizeof live, "%s.sluice-tmp.%ld.gp", p, (long)getppid());
    snprintf(other, sizeof other, "%s/other.json.sluice-tmp.%ld.w", d,
             (long)pid);
    const char *mk[] = {dead, live, other};
    for (int i = 0; i < 3; i++) {
        int fd = open(mk[i], O_WRONLY | O_CREAT, 0644);
        cr_assert_geq(fd, 0);
        close(fd);
    }
    cr_assert_eq(util_write_atomic(p, "x", 1, &e), 0, "%s", e.msg);
    cr_assert_neq(access(dead, F_OK), 0, "%s was left", dead);
    cr_assert_eq(access(live, F_OK), 0);
    cr_assert_eq(access(other, F_OK), 0);
    test_rm_rf(d);
}

/* Children rewrite a 16 MiB file in a loop (all 'a', then all 'b'); each
 * is killed with SIGKILL while its temporary file is open. The target is
 * always one whole version, and after the next write the folder holds the
 * target alone. */
Test(fs, killed_mid_write_leaves_no_temporary)
{
    enum { N = 16 << 20 };
    char *d = test_tmpdir(), p[512];
    path_in(p, sizeof p, d, "ck.bin");
    char *a = malloc(N), *b = malloc(N);
    memset(a, 'a', N);
    memset(b, 'b', N);
    util_err e;
    cr_assert_eq(util_write_atomic(p, a, N, &e), 0, "%s", e.msg);
    size_t dl = strlen(d);
    for (int round = 0; round < 4; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int k = 0;; k++) util_write_atomic(p, k & 1 ? a : b, N, NULL);
        }
        /* wait until the child holds a file in the folder open */
        int seen = 0;
        for (int tries = 0; !seen && tries < 20000; tries++) {
            char fdd[64];
            snprintf(fdd, sizeof fdd, "/proc/%ld/fd", (long)pid);
            DIR *fds = opendir(fdd);
            struct dirent *de;
            while (fds && (de = readdir(fds))) {
                char lp[600], to[600];
                snprintf(lp, sizeof lp, "%s/%s", fdd, de->d_name);
                ssize_t n = readlink(lp, to, sizeof to - 1);
                if (n <= 0) continue;
                to[n] = 0;
                if (!strncmp(to, d, dl) && to[dl] == '/') seen = 1;
            }
            if (fds) closedir(fds);
            if (!seen) usleep(200);
        }
        cr_assert(seen, "the child never opened a file in %s", d);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        size_t n = 0;
        char *s = NULL;
        cr_assert_eq(util_read_file(p, &s, &n, &e), 0, "%s", e.msg);
        cr_assert_eq(n, (size_t)N, "round %d: %zu bytes", round, n);
        cr_assert(!memcmp(s, a, N) || !memcmp(s, b, N), "round %d: mixed",
                  round);
        free(s);
    }
    cr_assert_eq(util_write_atomic(p, a, 1, &e), 0, "%s", e.msg);
    char *l = listing(d);
    cr_assert_str_eq(l, "ck.bin");
    free(l);
    free(a);
    free(b);
    test_rm_rf(d);
}

Test(fs, utf8)
{
    util_err e;
    cr_assert_eq(util_utf8_check("path", "models/\xC3\xA9t\xC3\xA9.json", &e),
                 0);
    cr_assert_eq(util_utf8_check("path", "\xF0\x9F\x9A\x80", &e), 0);
    const char *bad[] = {"caf\xE9.json", "\xC0\xAF", "\xED\xA0\x80",
                         "\xF4\x90\x80\x80", "cut \xE2\x82"};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(util_utf8_check("--model", bad[i], &e), -1, "%d", i);
        cr_assert_eq(e.code, UTIL_EXIT_USAGE);
        cr_assert(strstr(e.msg, "not valid UTF-8"), "%s", e.msg);
    }
    cr_assert(strstr(e.msg, "'cut \\xE2\\x82'"), "%s", e.msg);
    char s[] = "caf\xE9 \xC3\xA9 cut \xE2\x82";
    util_utf8_fix(s);
    cr_assert_str_eq(s, "caf? \xC3\xA9 cut ??");
}

/* util_out_room: a folder that cannot hold the bytes is refused (code 2)
 * saying what is free and missing, with or without an old file to
 * replace; one that can, a device written through, and no output pass.
 * (tests/test_exec_ckpt.c checks --save on a small file system where a
 * mount namespace can be made.) */
Test(fs, room_for_an_output_is_checked)
{
    char *d = test_tmpdir(), p[600];
    path_in(p, sizeof p, d, "out.ck");
    util_err e;
    e.code = 0;
    cr_expect_eq(util_out_room("--save", p, 1e30, &e), -1);
    cr_expect_eq(e.code, 2);
    cr_expect(strstr(e.msg, "--save '") && strstr(e.msg, "free, the file "
                     "needs ") && strstr(e.msg, "name another folder") &&
              !strstr(e.msg, "old one"), "%s", e.msg);
    cr_assert_eq(util_write_atomic(p, "x", 1, &e), 0, "%s", e.msg);
    cr_expect_eq(util_out_room("--save", p, 1e30, &e), -1);
    cr_expect(strstr(e.msg, "(written whole before the old one goes)"), "%s",
              e.msg);
    cr_expect_eq(util_out_room("--save", p, 1, &e), 0);
    cr_expect_eq(util_out_room("--save", "/dev/null", 1e30, &e), 0);
    cr_expect_eq(util_out_room("--save", NULL, 1e30, &e), 0);
    test_rm_rf(d);
}
