/* Byte-level text corpus: the file's bytes are the tokens. Batches are a
 * pure function of (seed, split, batch index), so any step's batch can be
 * produced again without replaying the ones before it (resume). */
#include "exec/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int exec_corpus_load(exec_corpus *c, const char *path, int T, util_err *e)
{
    memset(c, 0, sizeof *c);
    char *text;
    size_t len;
    if (util_read_file(path, &text, &len, e)) {
        e->code = UTIL_EXIT_USAGE;
        return util_err_prefix(e, "corpus");
    }
    if (len == 0) {
        free(text);
        return util_errf(e, UTIL_EXIT_USAGE, "corpus %s: file is empty",
                         path);
    }
    /* Both splits must hold at least one window of T+1 bytes. */
    size_t n_train = len - len / 10;
    size_t need = 10 * ((size_t)T + 1);
    if (len < need || len - n_train < (size_t)T + 1) {
        free(text);
        return util_errf(e, UTIL_EXIT_USAGE,
                         "corpus %s: %zu bytes is too short for sequences of "
                         "%d tokens (needs at least %zu bytes: 90%% train, "
                         "10%% validation)",
                         path, len, T, need);
    }
    snprintf(c->path, sizeof c->path, "%s", path);
    c->bytes = (unsigned char *)text;
    c->len = len;
    c->n_train = n_train;
    size_t count[256] = {0};
    for (size_t i = 0; i < n_train; i++) count[c->bytes[i]]++;
    double h = 0;
    for (int i = 0; i < 256; i++)
        if (count[i]) {
            double p = (double)count[i] / (double)n_train;
            h -= p * log(p);
        }
    c->entropy_nats = h;
    return 0;
}

void exec_corpus_free(exec_corpus *c)
{
    if (!c) return;
    free(c->bytes);
    c->bytes = NULL;
}

static uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void exec_corpus_batch(const exec_corpus *c, int split, uint64_t seed,
                       uint64_t index, int B, int T, int *tokens, int *targets)
{
    size_t lo = split ? c->n_train : 0;
    size_t n = split ? c->len - c->n_train : c->n_train;
    size_t span = n - (size_t)T; /* window starts: 0 .. n-T-1 */
    for (int b = 0; b < B; b++) {
        uint64_t h = mix64(seed ^ mix64((uint64_t)split * 0x100000001ull ^
                                        mix64(index * 1315423911ull + b)));
        size_t start = lo + (size_t)(h % span);
        for (int t = 0; t < T; t++) {
            tokens[b * T + t] = c->bytes[start + t];
            targets[b * T + t] = c->bytes[start + t + 1];
        }
    }
}
