/* Whole-file reads and atomic writes (temporary file, fsync, rename, fsync
 * of the folder), so nothing a user owns is ever left half-written. */
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int util_read_file(const char *path, char **out, size_t *len, util_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: cannot open: %s", path,
                         strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return util_errf(e, UTIL_EXIT_USAGE, "%s: is a directory", path);
    }
    size_t cap = 4096, n = 0;
    char *buf = util_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = util_realloc(buf, cap *= 2);
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return util_errf(e, UTIL_EXIT_USAGE, "%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return 0;
}

int util_write_atomic(const char *path, const void *data, size_t len,
                      util_err *e)
{
    size_t pl = strlen(path);
    char *tmp = util_malloc(pl + 32);
    snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        util_errf(e, UTIL_EXIT_FAIL, "%s: cannot write: %s", path,
                  strerror(errno));
        free(tmp);
        return -1;
    }
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            goto fail;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0) goto fail;
    if (close(fd) != 0) { fd = -1; goto fail; }
    fd = -1;
    if (rename(tmp, path) != 0) goto fail;
    {
        char *dcopy = util_strdup(path);
        int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) { fsync(dfd); close(dfd); }
        free(dcopy);
    }
    free(tmp);
    return 0;
fail:
    util_errf(e, UTIL_EXIT_FAIL, "%s: cannot write: %s", path,
              strerror(errno));
    if (fd >= 0) close(fd);
    unlink(tmp);
    free(tmp);
    return -1;
}
