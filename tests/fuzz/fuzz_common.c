/* Fuzz targets' common ground: the table of targets, the scratch folder
 * every input runs in, silenced output and the size limit of command-line
 * inputs. */
#include "profiles/profiles.h"
#include "tests/fuzz/fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const fuzz_target fuzz_targets[] = {
    {"gpus", fuzz_gpus},
    {"hw", fuzz_hw},
    {"model", fuzz_model},
    {"plan", fuzz_plan},
    {"schedcsv", fuzz_schedcsv},
    {"ckpt", fuzz_ckpt},
    {"cli_profile", fuzz_cli_profile},
    {"cli_sim", fuzz_cli_sim},
    {"cli_plan", fuzz_cli_plan},
    {"cli_validate", fuzz_cli_validate},
    {"cli_exec", fuzz_cli_exec},
    {NULL, NULL},
};

const fuzz_target *fuzz_target_find(const char *name)
{
    for (const fuzz_target *t = fuzz_targets; t->name; t++)
        if (!strcmp(t->name, name)) return t;
    return NULL;
}

/* One scratch folder per input, named after the process: one that died
 * inside an input (a crash, a timeout) leaves its folder, which the next
 * run removes. */
static char tmp_dir[4096], box[4096];
static int box_fd = -1, home_fd = -1;
static FILE *null_f, *saved_out, *saved_err;
static int show_output;

static void die(const char *what)
{
    /* fd 2 is the real stderr whatever stdio's stderr points at */
    dprintf(2, "fuzz: %s: %m\n", what);
    abort();
}

/* Removes a scratch folder and what a command left in it; folders one
 * deep too (no command makes deeper ones). */
static int remove_box(int parent, const char *name)
{
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) return -1;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (unlinkat(fd, de->d_name, 0) &&
            unlinkat(fd, de->d_name, AT_REMOVEDIR))
            rc = -1;
    }
    closedir(d);
    return rc || unlinkat(parent, name, AT_REMOVEDIR) ? -1 : 0;
}

/* Folders of processes that are gone. */
static void sweep(void)
{
    DIR *d = opendir(tmp_dir);
    if (!d) return;
    struct dirent *de;
    long pid;
    while ((de = readdir(d)))
        if (sscanf(de->d_name, "sluice-fuzz-%ld-", &pid) == 1 && pid > 0 &&
            kill((pid_t)pid, 0) && errno == ESRCH)
            remove_box(dirfd(d), de->d_name);
    closedir(d);
}

void fuzz_enter(void)
{
    if (!null_f) {
        /* memory, where there is some: commands fsync what they write */
        const char *t = getenv("TMPDIR");
        if (!t || !*t) t = access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm";
        snprintf(tmp_dir, sizeof tmp_dir, "%s", t);
        null_f = fopen("/dev/null", "w");
        if (!null_f) die("cannot open /dev/null");
        show_output = getenv("FUZZ_SHOW") != NULL;
        sweep();
    }
    snprintf(box, sizeof box, "%s/sluice-fuzz-%ld-XXXXXX", tmp_dir,
             (long)getpid());
    if (!mkdtemp(box)) die("cannot make a scratch folder");
    box_fd = open(box, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    home_fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (box_fd < 0 || home_fd < 0 || fchdir(box_fd))
        die("cannot enter the scratch folder");
    saved_out = stdout;
    saved_err = stderr;
    if (!show_output) {
        stdout = null_f;
        stderr = null_f;
    }
}

void fuzz_leave(void)
{
    fflush(null_f);
    clearerr(null_f);
    stdout = saved_out;
    stderr = saved_err;
    if (fchdir(home_fd) || remove_box(AT_FDCWD, box))
        die("cannot remove the scratch folder");
    close(home_fd);
    close(box_fd);
    home_fd = box_fd = -1;
}

void fuzz_put(const char *name, const void *data, size_t size)
{
    int fd = openat(box_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                    0644);
    if (fd < 0) die("cannot write into the scratch folder");
    const char *p = data;
    while (size) {
        ssize_t w = write(fd, p, size);
        if (w <= 0) die("cannot write into the scratch folder");
        p += w;
        size -= (size_t)w;
    }
    close(fd);
}

int fuzz_small_numbers(const char *data, size_t size, long cap)
{
    /* digits inside a built-in name (rtx2080ti, gpt3-175b, the
     * precisions) are no size: mark them */
    char *name_at = calloc(size + 1, 1);
    static const char *const dtypes[] = {"fp32", "tf32", "fp16", "bf16",
                                         NULL};
    const char *const *lists[] = {prof_gpu_names(), prof_model_names(),
                                  dtypes};
    for (int l = 0; l < 3; l++)
        for (const char *const *g = lists[l]; *g; g++) {
            size_t n = strlen(*g);
            for (const char *p = data;
                 (p = memmem(p, size - (size_t)(p - data), *g, n)); p++)
                memset(name_at + (p - data), 1, n);
        }
    long v = 0;
    int digits = 0, ok = 1;
    for (size_t i = 0; i <= size && ok; i++) {
        if (i < size && data[i] >= '0' && data[i] <= '9' && !name_at[i]) {
            if (++digits > 9) ok = 0;
            v = v * 10 + (data[i] - '0');
            continue;
        }
        if (digits && v > cap) ok = 0;
        v = 0;
        digits = 0;
    }
    free(name_at);
    return ok;
}
