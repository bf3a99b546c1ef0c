/* Language modelling data: the bytes of a text file, or token ids from uint16/uint32 files (see
 * data.h, docs/math.md §7). */
#include "data.h"
#include "fault.h"
#include "infile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void ttt_text_free(ttt_text *t) {
    if (!t) return;
    free(t->bytes);
    free(t->path);
    memset(t, 0, sizeof *t);
}

/* What a token file is called in messages. */
static const char *file_kind(int width) { return width == 1 ? "text file" : "token file"; }

/* Open `path` for reading: a regular, non-empty file of whole tokens of `width` bytes; its size
 * in bytes in *size. */
static ttt_status open_tokens(const char *path, int width, FILE **fp, size_t *size,
                              ttt_error *err) {
    *fp = NULL;
    const char *kind = ""; /* a FIFO is refused before it can block (infile.h) */
    FILE *f = ttt_open_regular(path, &kind);
    if (!f && kind[0])
        return ttt_error_set(err, TTT_ERR_IO, "lm: '%s' is not a regular file, it is %s (expected "
                             "a %s)", path, kind, file_kind(width));
    if (!f)
        return ttt_error_set(err, TTT_ERR_IO, "lm: cannot open %s '%s': %s", file_kind(width),
                             path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return ttt_error_set(err, TTT_ERR_IO, "lm: '%s' is not a regular file", path);
    }
    const size_t n = (size_t)sb.st_size;
    if (n == 0) {
        fclose(f);
        return ttt_error_set(err, TTT_ERR_FORMAT, "lm: %s '%s' is empty", file_kind(width), path);
    }
    if (n % (size_t)width != 0) {
        fclose(f);
        return ttt_error_set(err, TTT_ERR_FORMAT,
                             "lm: token file '%s' has %zu bytes, not a whole number of %d-byte "
                             "tokens (is `format` right?)",
                             path, n, width);
    }
    *fp = f;
    *size = n;
    return TTT_OK;
}

/* The splits from the files' sizes in tokens (val_tokens: the validation file's, 0 without
 * one), and the error for a split shorter than seq_len + 1 tokens. */
static ttt_status split_sizes(const ttt_token_source *src, size_t train_tokens,
                              size_t val_tokens, size_t *n_train, ttt_error *err) {
    const size_t size = train_tokens + val_tokens;
    const size_t n_val = src->val_path ? val_tokens
                                       : (size_t)floor((double)train_tokens * src->val_fraction);
    *n_train = size - n_val;
    const size_t need = (size_t)src->seq_len + 1;
    if (*n_train < need || (n_val > 0 && n_val < need)) {
        const int train_short = *n_train < need;
        const char *unit = src->width == 1 ? "bytes" : "tokens";
        const char *file = train_short || !src->val_path ? src->path : src->val_path;
        return ttt_error_set(err, TTT_ERR_RANGE,
                             "lm: the %s split of '%s' (%zu of its %zu %s%s) is shorter than "
                             "seq_len + 1 = %zu %s; use a larger file or a shorter seq_len",
                             train_short ? "training" : "validation", file,
                             train_short ? *n_train : n_val,
                             src->val_path ? (train_short ? *n_train : n_val) : size, unit,
                             train_short || src->val_path ? "" : ", the last val_fraction", need,
                             unit);
    }
    return TTT_OK;
}

static ttt_status check_source(const ttt_token_source *src, ttt_error *err) {
    TTT_ASSERT(src->width == 1 || src->width == 2 || src->width == 4);
    const double vf = src->val_path ? 0.0 : src->val_fraction;
    if (!(vf >= 0 && vf < 1))
        return ttt_error_set(err, TTT_ERR_RANGE,
                             "lm: val_fraction = %g must be in [0, 1) (0 = no validation split)",
                             vf);
    if (src->seq_len < 1)
        return ttt_error_set(err, TTT_ERR_RANGE, "lm: seq_len = %d must be >= 1", src->seq_len);
    return TTT_OK;
}

/* Token i of the loaded data (little-endian ids of `width` bytes). */
static inline uint32_t token_at(const ttt_text *t, size_t i) {
    const unsigned char *p = t->bytes + i * (size_t)t->width;
    switch (t->width) {
    case 1: return p[0];
    case 2: return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    default:
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
               (uint32_t)p[3] << 24;
    }
}

/* Every id of tokens [from, from + n) below the vocabulary (a text file's bytes always are). */
static ttt_status check_ids(const ttt_text *t, size_t from, size_t n, const char *path, int vocab,
                            ttt_error *err) {
    if (t->width == 1 && vocab >= 256) return TTT_OK;
    for (size_t i = 0; i < n; i++) {
        const uint32_t id = token_at(t, from + i);
        if (id >= (uint32_t)vocab)
            return ttt_error_set(err, TTT_ERR_RANGE,
                                 "lm: token %u at position %zu of '%s' is not below the "
                                 "vocabulary size %d (task.vocab)",
                                 id, i, path, vocab);
    }
    return TTT_OK;
}

/* Read n bytes of an open file into buf. */
static ttt_status read_all(unsigned char *buf, size_t n, FILE *fp, const char *path,
                           ttt_error *err) {
    const size_t got = fread(buf, 1, n, fp);
    if (got != n)
        return ttt_error_set(err, TTT_ERR_IO, "lm: read %zu of the %zu bytes of '%s'", got, n,
                             path);
    return TTT_OK;
}

ttt_status ttt_tokens_check(const ttt_token_source *src, ttt_error *err) {
    TTT_TRY(check_source(src, err));
    FILE *ft = NULL, *fv = NULL;
    size_t bt = 0, bv = 0, n_train = 0;
    ttt_status s = open_tokens(src->path, src->width, &ft, &bt, err);
    if (s == TTT_OK && src->val_path) s = open_tokens(src->val_path, src->width, &fv, &bv, err);
    if (ft) fclose(ft);
    if (fv) fclose(fv);
    if (s == TTT_OK)
        s = split_sizes(src, bt / (size_t)src->width, bv / (size_t)src->width, &n_train, err);
    return s;
}

ttt_status ttt_tokens_load(ttt_text *t, const ttt_token_source *src, ttt_error *err) {
    memset(t, 0, sizeof *t);
    TTT_TRY(check_source(src, err));
    FILE *ft = NULL, *fv = NULL;
    size_t bt = 0, bv = 0;
    ttt_status s = open_tokens(src->path, src->width, &ft, &bt, err);
    if (s == TTT_OK && src->val_path) s = open_tokens(src->val_path, src->width, &fv, &bv, err);
    t->width = src->width;
    if (s == TTT_OK)
        s = split_sizes(src, bt / (size_t)src->width, bv / (size_t)src->width, &t->n_train, err);
    if (s == TTT_OK) {
        t->bytes = ttt_fault_malloc(bt + bv);
        t->path = ttt_fault_strdup(src->path);
        if (!t->bytes || !t->path)
            s = ttt_error_set(err, TTT_ERR_NOMEM, "lm: out of memory for '%s' (%zu bytes)",
                              src->path, bt + bv);
    }
    if (s == TTT_OK) s = read_all(t->bytes, bt, ft, src->path, err);
    if (s == TTT_OK && fv) s = read_all(t->bytes + bt, bv, fv, src->val_path, err);
    if (ft) fclose(ft);
    if (fv) fclose(fv);
    t->size = (bt + bv) / (size_t)t->width;
    if (s == TTT_OK) s = check_ids(t, 0, bt / (size_t)t->width, src->path, src->vocab, err);
    if (s == TTT_OK && src->val_path)
        s = check_ids(t, bt / (size_t)t->width, bv / (size_t)t->width, src->val_path, src->vocab,
                      err);
    if (s != TTT_OK) ttt_text_free(t);
    return s;
}

ttt_status ttt_text_load(ttt_text *t, const char *path, double val_fraction, int seq_len,
                         ttt_error *err) {
    const ttt_token_source src = {.path = path, .width = 1, .vocab = TTT_LM_VOCAB,
                                  .val_fraction = val_fraction, .seq_len = seq_len};
    return ttt_tokens_load(t, &src, err);
}

ttt_status ttt_text_check(const char *path, double val_fraction, int seq_len, ttt_error *err) {
    const ttt_token_source src = {.path = path, .width = 1, .vocab = TTT_LM_VOCAB,
                                  .val_fraction = val_fraction, .seq_len = seq_len};
    return ttt_tokens_check(&src, err);
}

size_t ttt_text_split_start(const ttt_text *t, ttt_split s) {
    return s == TTT_SPLIT_TRAIN ? 0 : t->n_train;
}

size_t ttt_text_split_size(const ttt_text *t, ttt_split s) {
    return s == TTT_SPLIT_TRAIN ? t->n_train : t->size - t->n_train;
}

/* One window of L+1 tokens starting at absolute token `at`. */
static void window(int *tokens /* (L) */, int *labels /* (L) */, const ttt_text *t, size_t at,
                   int L) {
    for (int i = 0; i < L; i++) {
        tokens[i] = (int)token_at(t, at + (size_t)i);
        labels[i] = (int)token_at(t, at + (size_t)i + 1);
    }
}

void ttt_text_sample(const ttt_text *t, ttt_split s, ttt_rng *rng, ttt_batch *b) {
    size_t start = ttt_text_split_start(t, s), size = ttt_text_split_size(t, s);
    size_t L = (size_t)b->L;
    TTT_ASSERT(size >= L + 1); /* ensured by ttt_text_load for its seq_len */
    for (int r = 0; r < b->B; r++) {
        size_t at = start + (size_t)ttt_rng_below(rng, (uint64_t)(size - L));
        window(b->tokens + (size_t)r * L, b->labels + (size_t)r * L, t, at, b->L);
    }
}

size_t ttt_text_n_windows(const ttt_text *t, ttt_split s, int L) {
    size_t size = ttt_text_split_size(t, s);
    return size < 1 ? 0 : (size - 1) / (size_t)L;
}

int ttt_text_windows(const ttt_text *t, ttt_split s, size_t first, ttt_batch *b) {
    size_t start = ttt_text_split_start(t, s), nw = ttt_text_n_windows(t, s, b->L);
    size_t L = (size_t)b->L;
    int filled = 0;
    for (int r = 0; r < b->B; r++) {
        int *tok = b->tokens + (size_t)r * L, *lab = b->labels + (size_t)r * L;
        size_t j = first + (size_t)r;
        if (j < nw) {
            window(tok, lab, t, start + j * L, b->L);
            filled++;
        } else {
            for (size_t i = 0; i < L; i++) {
                tok[i] = 0;
                lab[i] = TTT_LABEL_IGNORE;
            }
        }
    }
    return filled;
}
