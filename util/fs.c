/* Files in and out. Inputs are regular files of bounded size, checked
 * before the first byte is read (a device or FIFO could be read for ever).
 * Outputs replace a regular file atomically: the data go to an unnamed
 * file (O_TMPFILE) in the target's folder, are synced, and are linked in
 * place by rename, so the target is the old file or the new one, never
 * half of each; a symbolic link keeps pointing where it did, the file it
 * points to is replaced; the file's mode and owner are kept. Devices,
 * FIFOs and our own stdout (/dev/stdout) are written through. Where a temporary needs a name (the instant
 * between link and rename, or a file system without O_TMPFILE) it is
 * PATH.sluice-tmp.PID.TAG, and the next write of PATH removes those whose
 * process is gone. Standard output is checked at exit (util_stdout_close). */
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define TMP_MARK ".sluice-tmp."

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISFIFO(m) ? "a FIFO (named pipe)"
         : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

int util_open_regular(const char *path, size_t max_bytes, size_t *size,
                      util_err *e)
{
    /* O_NONBLOCK: opening a FIFO with no writer would wait for one. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: cannot open: %s", path,
                         strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return util_errf(e, UTIL_EXIT_USAGE, "%s: cannot read: %s", path,
                         strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return util_errf(e, UTIL_EXIT_USAGE, "%s: is %s, not a regular file "
                         "(sluice reads its inputs from files)", path,
                         kind_of(st.st_mode));
    }
    if ((unsigned long long)st.st_size > max_bytes) {
        char a[32], b[32];
        close(fd);
        return util_errf(e, UTIL_EXIT_USAGE, "%s: %s is more than the %s "
                         "sluice reads from such a file", path,
                         util_fmt_bytes((double)st.st_size, a, sizeof a),
                         util_fmt_bytes((double)max_bytes, b, sizeof b));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    *size = (size_t)st.st_size;
    return fd;
}

uint64_t util_fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

int util_file_fnv(const char *path, size_t max_bytes, uint64_t *sum,
                  util_err *e)
{
    char *text;
    size_t len;
    if (util_read_file_max(path, max_bytes, &text, &len, e)) return -1;
    *sum = util_fnv1a(text, len, UTIL_FNV_INIT);
    free(text);
    return 0;
}

int util_read_file_max(const char *path, size_t max_bytes, char **out,
                       size_t *len, util_err *e)
{
    size_t size;
    int fd = util_open_regular(path, max_bytes, &size, e);
    if (fd < 0) return -1;
    /* The size is a hint: the file may grow or shrink while it is read,
     * so reading goes on to the end, never past max_bytes. */
    size_t cap = size + 1 < 4096 ? 4096 : size + 1, n = 0;
    char *buf = util_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            if (cap - 1 > max_bytes) break;
            buf = util_realloc(buf, cap *= 2);
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int err = errno;
            close(fd);
            free(buf);
            return util_errf(e, UTIL_EXIT_USAGE, "%s: read error: %s", path,
                             strerror(err));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (n > max_bytes) {
        char b[32];
        free(buf);
        return util_errf(e, UTIL_EXIT_USAGE, "%s: grew past the %s sluice "
                         "reads from such a file while it was read", path,
                         util_fmt_bytes((double)max_bytes, b, sizeof b));
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return 0;
}

int util_read_file(const char *path, char **out, size_t *len, util_err *e)
{
    return util_read_file_max(path, UTIL_READ_MAX_BYTES, out, len, e);
}

char *util_tmp_suffix(const char *tag, char *buf, size_t n)
{
    snprintf(buf, n, TMP_MARK "%ld.%s", (long)getpid(), tag);
    return buf;
}

/* Removes BASE.sluice-tmp.PID.* in dir whose process has ended: what a
 * write killed at the wrong instant left. Best effort, silent. */
static void clean_stale(const char *dir, const char *base)
{
    DIR *d = opendir(dir);
    if (!d) return;
    size_t bl = strlen(base), ml = strlen(TMP_MARK);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (strncmp(nm, base, bl) || strncmp(nm + bl, TMP_MARK, ml)) continue;
        char *end;
        long pid = strtol(nm + bl + ml, &end, 10);
        if (pid <= 0 || *end != '.' || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        unlinkat(dirfd(d), nm, 0);
    }
    closedir(d);
}

/* The file a write of path lands in: path itself, or where its chain of
 * symbolic links ends (which may not exist yet). malloc'd; NULL with
 * errno set when the chain loops. */
static char *resolve(const char *path)
{
    char *cur = util_strdup(path);
    for (int hops = 0; hops < 40; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) return cur;
        /* an existing target: the kernel resolves it */
        char *real = realpath(cur, NULL);
        if (real) {
            free(cur);
            return real;
        }
        /* a dangling link: follow it by hand to the name to create */
        char to[PATH_MAX];
        ssize_t n = readlink(cur, to, sizeof to - 1);
        if (n < 0) return cur;
        to[n] = 0;
        char *next;
        const char *slash = strrchr(cur, '/');
        if (to[0] == '/' || !slash) {
            next = util_strdup(to);
        } else {
            size_t dl = (size_t)(slash - cur) + 1;
            next = util_malloc(dl + (size_t)n + 1);
            memcpy(next, cur, dl);
            memcpy(next + dl, to, (size_t)n + 1);
        }
        free(cur);
        cur = next;
    }
    free(cur);
    errno = ELOOP;
    return NULL;
}

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Gives the unnamed file fd the name `name`. */
static int link_tmpfile(int fd, const char *name)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW) == 0)
        return 0;
    if (errno == EEXIST) return -1;
    /* no /proc: AT_EMPTY_PATH does the same where it is allowed */
    return linkat(fd, "", AT_FDCWD, name, AT_EMPTY_PATH);
}

/* Writes a new version of the regular file (or new name) real. unnamed:
 * try O_TMPFILE first. Returns 0, -1 with errno, or 1 when the unnamed
 * file could not be linked (the caller retries with a named one). */
static int replace(const char *real, const struct stat *old, int unnamed,
                   const void *data, size_t len)
{
    char *dir = util_strdup(real), *slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = 0;
    else if (slash) *slash = 0;
    else strcpy(dir, ".");
    char sfx[64];
    size_t tl = strlen(real) + sizeof sfx;
    char *tmp = util_malloc(tl);
    snprintf(tmp, tl, "%s%s", real, util_tmp_suffix("w", sfx, sizeof sfx));
    int fd = -1, named = 0, rc = -1, err = 0;
    if (unnamed) {
        fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR &&
            errno != EINVAL)
            goto out;
    }
    if (fd < 0) {
        named = 1;
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        /* a name of this process id left by an earlier process */
        if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) goto out;
    }
    if (write_all(fd, data, len)) goto out;
    if (old) {
        /* keep the owner (root may change it; others get EPERM and keep
         * their own), then the mode, which a change of owner may clear */
        if (fchown(fd, old->st_uid, old->st_gid)) {}
        if (fchmod(fd, old->st_mode & 07777)) goto out;
    }
    if (fsync(fd)) goto out;
    if (!named) {
        /* a new file: linked in one step, no name in between */
        if (!old && link_tmpfile(fd, real) == 0) {
            rc = 0;
            goto out;
        }
        if (!old && errno != EEXIST) { rc = 1; goto out; }
        if (link_tmpfile(fd, tmp) != 0) {
            if (errno != EEXIST || unlink(tmp) || link_tmpfile(fd, tmp)) {
                rc = 1;
                goto out;
            }
        }
        named = 1;
    }
    if (rename(tmp, real)) goto out;
    named = 0;
    rc = 0;
out:
    err = errno;
    if (fd >= 0) close(fd);
    if (named) unlink(tmp);
    if (rc == 0) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    free(tmp);
    free(dir);
    errno = err;
    return rc;
}

int util_write_atomic_line(const char *path, const char *text, util_err *e)
{
    size_t n = strlen(text);
    char *t = util_malloc(n + 1);
    memcpy(t, text, n);
    t[n] = '\n';
    int rc = util_write_atomic(path, t, n + 1, e);
    free(t);
    return rc;
}

/* The folder util_write_atomic puts path's temporary in, that of the
 * file a link names: *dir points into the returned buffer (free it) or
 * at "." or "/"; NULL when path cannot be resolved (errno says why). */
static char *landing_dir(const char *path, const char **dir)
{
    char *real = resolve(path);
    if (!real) return NULL;
    char *slash = strrchr(real, '/');
    *dir = !slash ? "." : slash == real ? "/" : real;
    if (slash && slash != real) *slash = 0;
    return real;
}

int util_out_check(const char *flag, const char *path, int prefix,
                   const char *const *inputs, int n, util_err *e)
{
    if (!path) return 0;
    if (!*path)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: an empty path", flag);
    if (prefix && path[strlen(path) - 1] == '/')
        return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': a prefix the files' "
                         "names begin with, not a folder (e.g. '%srun')",
                         flag, path, path);
    struct stat st;
    int exists = !prefix && stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': is a directory "
                         "(name a file in it)", flag, path);
    if (exists && !S_ISREG(st.st_mode)) return 0;   /* written through */
    for (int i = 0; exists && i < n; i++) {
        struct stat si;
        if (inputs[i] && !stat(inputs[i], &si) && si.st_dev == st.st_dev &&
            si.st_ino == st.st_ino)
            return util_errf(e, UTIL_EXIT_USAGE, "%s '%s' is also an input "
                             "of this run ('%s'), which it would overwrite: "
                             "name another file", flag, path, inputs[i]);
    }
    const char *dir;
    char *real = landing_dir(path, &dir);
    if (!real)
        return util_errf(e, UTIL_EXIT_USAGE, "%s '%s': %s", flag, path,
                         strerror(errno));
    struct stat sd;
    int rc = 0;
    if (stat(dir, &sd))
        rc = util_errf(e, UTIL_EXIT_USAGE, "%s '%s': folder '%s': %s", flag,
                       path, dir, strerror(errno));
    else if (!S_ISDIR(sd.st_mode))
        rc = util_errf(e, UTIL_EXIT_USAGE, "%s '%s': '%s' is not a folder",
                       flag, path, dir);
    else if (access(dir, W_OK | X_OK))
        rc = util_errf(e, UTIL_EXIT_USAGE, "%s '%s': folder '%s' is not "
                       "writable (%s)", flag, path, dir, strerror(errno));
    /* in a sticky folder (/tmp) another user's file cannot be replaced:
     * the rename at the end would fail, after the whole run (a training
     * run's checkpoint lost); said first */
    else if (exists && (sd.st_mode & S_ISVTX) && geteuid() != 0 &&
             st.st_uid != geteuid() && sd.st_uid != geteuid())
        rc = util_errf(e, UTIL_EXIT_USAGE, "%s '%s': the file is another "
                       "user's in sticky folder '%s', which lets only its "
                       "owner replace it (%s): name another file", flag,
                       path, dir, strerror(EPERM));
    if (!rc) {
        /* the name, with the temporary's ending (TMP_MARK, a process id,
         * a tag) and a prefix's file endings (-simulated-memory.dat and
         * the like), within what the folder's file system takes */
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        size_t len = strlen(base),
               add = strlen(TMP_MARK) + 12 + (prefix ? 32 : 0);
        long max = pathconf(dir, _PC_NAME_MAX);
        if (max > 0 && len + add > (size_t)max)
            rc = util_errf(e, UTIL_EXIT_USAGE, "%s: a file name of %zu bytes "
                           "in folder '%s', whose file system takes %ld at "
                           "most (sluice's temporary name%s up to %zu)",
                           flag, len, dir, max,
                           prefix ? " and the files' endings add" : " adds",
                           add);
    }
    free(real);
    return rc;
}

int util_out_room(const char *flag, const char *path, double bytes,
                  util_err *e)
{
    if (!path) return 0;
    struct stat st;
    if (!stat(path, &st) && !S_ISREG(st.st_mode)) return 0; /* through */
    const char *dir;
    char *real = landing_dir(path, &dir);
    if (!real) return 0;   /* util_out_check said why */
    struct statvfs vs;
    int rc = 0;
    if (!statvfs(dir, &vs)) {
        double room = (double)vs.f_bavail * (double)vs.f_frsize;
        char a[32], b[32], c[32];
        int old = !stat(path, &st);
        if (room < bytes)
            rc = util_errf(e, UTIL_EXIT_USAGE, "%s '%s': folder '%s' has "
                           "%s free, the file needs %s%s: free %s there or "
                           "name another folder", flag, path, dir,
                           util_fmt_bytes(room, a, sizeof a),
                           util_fmt_bytes(bytes, b, sizeof b),
                           old ? " (written whole before the old one goes)"
                               : "",
                           util_fmt_bytes(bytes - room, c, sizeof c));
    }
    free(real);
    return rc;
}

/* Where a --plot prefix's files land: its folder resolved where it
 * exists (else as given), its name as given (the files are made beside
 * a link of that name, not in what it names). malloc'd. */
static char *prefix_landing(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = util_strdup(slash ? path : ".");
    if (slash) dir[slash == path ? 1 : slash - path] = 0;
    char *real = realpath(dir, NULL);
    free(dir);
    if (!real) return util_strdup(path);
    const char *base = slash ? slash + 1 : path;
    size_t n = strlen(real) + strlen(base) + 2;
    char *out = util_malloc(n);
    snprintf(out, n, "%s/%s", real, base);
    free(real);
    return out;
}

/* Where a write of path lands, for comparing: its links followed and its
 * folder resolved where it exists (else as given). malloc'd. */
static char *landing(const char *path)
{
    char *r = resolve(path);
    char *out = prefix_landing(r ? r : path);
    free(r);
    return out;
}

/* Whether a --plot prefix (kind: UTIL_OUT_PLOT...) that lands at pre
 * writes the file landing at f: PREFIX.gp, PREFIX-NAME ending .dat,
 * .png, .svg or .gp, or the traces sluice exec's plot compares. */
static int prefix_writes(int kind, const char *pre, const char *f)
{
    size_t n = strlen(pre);
    if (strncmp(f, pre, n)) return 0;
    const char *rest = f + n;
    if (!strcmp(rest, ".gp") ||
        (!strcmp(rest, "-simulated.json") && (kind & UTIL_OUT_SIMULATED)) ||
        (!strcmp(rest, "-measured.json") && (kind & UTIL_OUT_MEASURED)))
        return 1;
    if (rest[0] != '-' || !rest[1] || strchr(rest, '/')) return 0;
    const char *dot = strrchr(rest, '.');
    static const char *const ext[] = {".dat", ".png", ".svg", ".gp"};
    for (size_t i = 0; dot && i < sizeof ext / sizeof *ext; i++)
        if (!strcmp(dot, ext[i])) return 1;
    return 0;
}

int util_outs_apart(int n, const char *const *flag, const char *const *path,
                    const int *prefix, const char *const *in, int ni,
                    util_err *e)
{
    char **at = util_calloc((size_t)(n + ni), sizeof *at);
    struct stat st;
    for (int i = 0; i < n; i++)
        /* a device or FIFO is written through: /dev/null twice is fine */
        if (path[i] && (prefix[i] || stat(path[i], &st) ||
                        S_ISREG(st.st_mode)))
            at[i] = prefix[i] ? prefix_landing(path[i]) : landing(path[i]);
    for (int i = 0; i < ni; i++)
        if (in[i]) at[n + i] = landing(in[i]);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (!at[i]) continue;
        for (int j = 0; j < n + ni && !rc; j++) {
            if (j == i || !at[j]) continue;
            const char *what = j < n ? flag[j] : "an input of this run";
            const char *jp = j < n ? path[j] : in[j - n];
            if (j < n && !prefix[i] && !prefix[j] && j > i &&
                !strcmp(at[i], at[j]))
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s '%s' and %s '%s' name "
                               "the same file: give each output its own",
                               flag[i], path[i], flag[j], path[j]);
            else if (prefix[i] && (j >= n || !prefix[j]) &&
                     prefix_writes(prefix[i], at[i], at[j]))
                rc = util_errf(e, UTIL_EXIT_USAGE, "%s '%s' writes '%s', "
                               "which is %s%s: name another prefix or file",
                               flag[i], path[i], jp,
                               j < n ? "also " : "", what);
        }
    }
    for (int i = 0; i < n + ni; i++) free(at[i]);
    free(at);
    return rc;
}

int util_write_atomic(const char *path, const void *data, size_t len,
                      util_err *e)
{
    struct stat st;
    int exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return util_errf(e, UTIL_EXIT_FAIL, "%s: cannot write: is a "
                         "directory", path);
    /* /dev/stdout and the like, where that is a file: written where the
     * other output goes, after it, not by replacing the file under it */
    for (int fd = 1; exists && fd <= 2; fd++) {
        struct stat sf;
        if (fstat(fd, &sf) || sf.st_dev != st.st_dev || sf.st_ino != st.st_ino)
            continue;
        fflush(fd == 1 ? stdout : stderr);
        if (write_all(fd, data, len))
            return util_errf(e, UTIL_EXIT_FAIL, "%s: cannot write: %s", path,
                             strerror(errno));
        return 0;
    }
    if (exists && !S_ISREG(st.st_mode)) {
        /* a device, FIFO or socket: what is there stays, the data go
         * through it (as `cat > /dev/null` does) */
        int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0 || write_all(fd, data, len)) {
            int err = errno;
            if (fd >= 0) close(fd);
            return util_errf(e, UTIL_EXIT_FAIL, "%s: cannot write: %s", path,
                             strerror(err));
        }
        if (close(fd))
            return util_errf(e, UTIL_EXIT_FAIL, "%s: cannot write: %s", path,
                             strerror(errno));
        return 0;
    }
    char *real = resolve(path);
    if (!real)
        return util_errf(e, UTIL_EXIT_FAIL, "%s: cannot write: %s", path,
                         strerror(errno));
    int have_old = stat(real, &st) == 0;
    char *base = strrchr(real, '/');
    char *dir = base ? util_strdup(real) : util_strdup(".");
    if (base) dir[base - real > 0 ? base - real : 1] = 0;
    clean_stale(dir, base ? base + 1 : real);
    free(dir);
    int rc = replace(real, have_old ? &st : NULL, 1, data, len);
    if (rc > 0) rc = replace(real, have_old ? &st : NULL, 0, data, len);
    int err = errno;
    free(real);
    if (rc)
        return util_errf(e, UTIL_EXIT_FAIL, "%s: cannot write: %s", path,
                         strerror(err));
    return 0;
}

/* ---------------------------------------------------------------------
 * Standard output */

static int stdout_was_closed;

void util_stdio_init(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        /* stdout on /dev/full: every write fails, as it should */
        int nfd = open(fd == 1 ? "/dev/full" : "/dev/null",
                       (fd ? O_WRONLY : O_RDONLY) | O_NOCTTY);
        if (nfd < 0) continue;
        if (nfd != fd) {
            dup2(nfd, fd);
            close(nfd);
        }
        if (fd == 1) stdout_was_closed = 1;
    }
}

int util_stdout_close(void)
{
    int bad = ferror(stdout), err = 0;
    if (fflush(stdout) != 0) {
        bad = 1;
        err = errno;
    }
    if (fclose(stdout) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    if (!bad) return 0;
    fprintf(stderr, "sluice: cannot write to standard output: %s\n",
            stdout_was_closed ? "standard output is closed"
            : err ? strerror(err) : "a write to standard output failed");
    return UTIL_EXIT_FAIL;
}
