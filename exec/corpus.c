/* Byte-level text corpus: the file's bytes are the tokens. The text is cut
 * into blocks; every tenth block validates, the rest train, so both splits
 * sample the whole document (a licence's last tenth is its appendix, not
 * more of the same text). A window never crosses a block. Batches are a
 * pure function of (seed, split, batch index), so any step's batch can be
 * produced again without replaying the ones before it (resume). */
#include "exec/exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Block size: 1 KiB, or four windows when sequences are longer. */
static size_t block_bytes(int T)
{
    size_t w = 4 * ((size_t)T + 1);
    return w > 1024 ? w : 1024;
}

static int is_val_block(size_t i) { return i % 10 == 9; }

int exec_corpus_load(exec_corpus *c, const char *path, int T, util_err *e)
{
    memset(c, 0, sizeof *c);
    char *text;
    size_t len;
    /* 1 GiB: enwik9, the largest byte-level benchmark text, fits */
    if (util_read_file_max(path, (size_t)1 << 30, &text, &len, e)) {
        e->code = UTIL_EXIT_USAGE;
        util_err_prefix(e, "corpus");
        size_t l = strlen(e->msg);
        snprintf(e->msg + l, sizeof e->msg - l,
                 " (choose a text file with --data FILE)");
        return -1;
    }
    if (len == 0) {
        free(text);
        return util_errf(e, UTIL_EXIT_USAGE, "corpus %s: file is empty",
                         path);
    }
    /* Ten full blocks: nine train, one validates. */
    size_t bs = block_bytes(T), need = 10 * bs;
    if (len < need) {
        free(text);
        return util_errf(e, UTIL_EXIT_USAGE,
                         "corpus %s: %zu bytes is too short for sequences of "
                         "%d tokens (needs at least %zu bytes: ten blocks of "
                         "%zu, one in ten held out for validation): give "
                         "a longer text with --data FILE",
                         path, len, T, need, bs);
    }
    snprintf(c->path, sizeof c->path, "%s", path);
    c->bytes = (unsigned char *)text;
    c->len = len;
    c->block = bs;
    size_t nblocks = len / bs; /* a short tail block is not used */
    size_t count[256] = {0};
    for (size_t b = 0; b < nblocks; b++) {
        if (is_val_block(b)) {
            c->n_val += bs;
            continue;
        }
        c->n_train += bs;
        for (size_t i = b * bs; i < (b + 1) * bs; i++) count[c->bytes[i]]++;
    }
    double h = 0;
    for (int i = 0; i < 256; i++)
        if (count[i]) {
            double p = (double)count[i] / (double)c->n_train;
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
    exec_corpus_rows(c, split, seed, index, 0, B, T, tokens, targets);
}

void exec_corpus_rows(const exec_corpus *c, int split, uint64_t seed,
                      uint64_t index, int b0, int nb, int T, int *tokens,
                      int *targets)
{
    size_t bs = c->block;
    size_t n_split_blocks = (split ? c->n_val : c->n_train) / bs;
    size_t span = bs - (size_t)T; /* window starts in a block: 0..bs-T-1 */
    for (int b = b0; b < b0 + nb; b++) {
        uint64_t h = mix64(seed ^ mix64((uint64_t)split * 0x100000001ull ^
                                        mix64(index * 1315423911ull + b)));
        /* The k-th block of this split: skip the other split's blocks. */
        size_t k = (size_t)(h % n_split_blocks);
        size_t blk = split ? 10 * k + 9 : k + k / 9;
        size_t start = blk * bs + (size_t)((h >> 32) % span);
        size_t row = (size_t)(b - b0) * T;
        for (int t = 0; t < T; t++) {
            tokens[row + t] = c->bytes[start + t];
            targets[row + t] = c->bytes[start + t + 1];
        }
    }
}

int exec_corpus_vocab_check(const exec_gpt_config *c, const char *where,
                            util_err *e)
{
    if (c->vocab < 256)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: vocabulary %d is smaller "
                         "than the 256 byte tokens of the text", where,
                         c->vocab);
    if (c->encoder && c->vocab < 257)
        return util_errf(e, UTIL_EXIT_USAGE, "%s: vocabulary %d: an "
                         "encoder's mask token is its last word, which "
                         "needs one beside the 256 bytes of the text",
                         where, c->vocab);
    return 0;
}

void exec_mlm_mask(const exec_gpt_config *c, int split, uint64_t seed,
                   uint64_t index, int b0, int nb, int T, int *tokens,
                   int *targets)
{
    if (!c->encoder) return;
    int K = exec_mlm_count(T), V = c->vocab;
    int *pos = util_malloc(sizeof(int) * (size_t)T);
    for (int b = b0; b < b0 + nb; b++) {
        /* apart from the window's draw: another constant in the mix */
        uint64_t s = mix64(seed ^ mix64(0x6D6C6D6D61736Bull ^
                                        (uint64_t)split * 0x100000001ull ^
                                        mix64(index * 1315423911ull + b)));
        int *tok = tokens + (size_t)(b - b0) * T,
            *tgt = targets + (size_t)(b - b0) * T;
        for (int t = 0; t < T; t++) {
            pos[t] = t;
            tgt[t] = -1;
        }
        /* the first K of a Fisher-Yates shuffle */
        for (int k = 0; k < K; k++) {
            int j = k + (int)(exec_splitmix(&s) % (uint64_t)(T - k));
            int t = pos[j];
            pos[j] = pos[k];
            pos[k] = t;
            tgt[t] = tok[t];
            uint64_t r = exec_splitmix(&s);
            if (r % 10 < 8)
                tok[t] = V - 1;
            else if (r % 10 == 8)
                tok[t] = (int)((r / 10) % (uint64_t)V);
        }
    }
    free(pos);
}
