/* Byte-level language modelling data from a text file (see data.h, docs/math.md §7). */
#include "data.h"
#include "fault.h"

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

/* The checks a load makes that need only the file's size: val_fraction and seq_len in range,
 * and both splits at least seq_len + 1 bytes long. */
static ttt_status check_sizes(const char *path, size_t size, double val_fraction, int seq_len,
                              size_t *n_train, ttt_error *err) {
    if (size == 0) return ttt_error_set(err, TTT_ERR_FORMAT, "lm: text file '%s' is empty", path);
    size_t n_val = (size_t)floor((double)size * val_fraction);
    *n_train = size - n_val;
    size_t need = (size_t)seq_len + 1;
    if (*n_train < need || (n_val > 0 && n_val < need)) {
        int train_short = *n_train < need;
        return ttt_error_set(
            err, TTT_ERR_RANGE,
            "lm: text file '%s' has %zu bytes: its %s split (%zu bytes%s) is shorter than "
            "seq_len + 1 = %zu bytes; use a larger file%s",
            path, size, train_short ? "training" : "validation", train_short ? *n_train : n_val,
            train_short ? "" : ", the last val_fraction of it", need,
            train_short ? " or a shorter seq_len" : ", a larger val_fraction or a shorter seq_len");
    }
    return TTT_OK;
}

/* Open `path` for reading as a regular file; its size in *size. */
static ttt_status open_text(const char *path, double val_fraction, int seq_len, FILE **fp,
                            size_t *size, ttt_error *err) {
    *fp = NULL;
    if (!(val_fraction >= 0 && val_fraction < 1))
        return ttt_error_set(err, TTT_ERR_RANGE,
                             "lm: val_fraction = %g must be in [0, 1) (0 = no validation split)",
                             val_fraction);
    if (seq_len < 1)
        return ttt_error_set(err, TTT_ERR_RANGE, "lm: seq_len = %d must be >= 1", seq_len);
    FILE *f = fopen(path, "rb");
    if (!f)
        return ttt_error_set(err, TTT_ERR_IO, "lm: cannot open text file '%s': %s", path,
                             strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return ttt_error_set(err, TTT_ERR_IO, "lm: '%s' is not a regular file", path);
    }
    *fp = f;
    *size = (size_t)sb.st_size;
    return TTT_OK;
}

ttt_status ttt_text_check(const char *path, double val_fraction, int seq_len, ttt_error *err) {
    FILE *fp;
    size_t size = 0, n_train = 0;
    TTT_TRY(open_text(path, val_fraction, seq_len, &fp, &size, err));
    fclose(fp);
    return check_sizes(path, size, val_fraction, seq_len, &n_train, err);
}

ttt_status ttt_text_load(ttt_text *t, const char *path, double val_fraction, int seq_len,
                         ttt_error *err) {
    memset(t, 0, sizeof *t);
    FILE *fp;
    size_t size = 0, n_train = 0;
    TTT_TRY(open_text(path, val_fraction, seq_len, &fp, &size, err));
    ttt_status s = check_sizes(path, size, val_fraction, seq_len, &n_train, err);
    if (s != TTT_OK) {
        fclose(fp);
        return s;
    }
    t->bytes = ttt_fault_malloc(size);
    t->path = ttt_fault_malloc(strlen(path) + 1);
    if (!t->bytes || !t->path) {
        fclose(fp);
        ttt_text_free(t);
        return ttt_error_set(err, TTT_ERR_NOMEM, "lm: out of memory for '%s' (%zu bytes)", path,
                             size);
    }
    strcpy(t->path, path);
    size_t got = fread(t->bytes, 1, size, fp);
    fclose(fp);
    if (got != size) {
        ttt_text_free(t);
        return ttt_error_set(err, TTT_ERR_IO, "lm: read %zu of the %zu bytes of '%s'", got, size,
                             path);
    }
    t->size = size;
    t->n_train = n_train;
    return TTT_OK;
}

size_t ttt_text_split_start(const ttt_text *t, ttt_split s) {
    return s == TTT_SPLIT_TRAIN ? 0 : t->n_train;
}

size_t ttt_text_split_size(const ttt_text *t, ttt_split s) {
    return s == TTT_SPLIT_TRAIN ? t->n_train : t->size - t->n_train;
}

/* One window of L+1 bytes starting at absolute offset `at`. */
static void window(int *tokens /* (L) */, int *labels /* (L) */, const unsigned char *bytes,
                   size_t at, int L) {
    for (int i = 0; i < L; i++) {
        tokens[i] = bytes[at + (size_t)i];
        labels[i] = bytes[at + (size_t)i + 1];
    }
}

void ttt_text_sample(const ttt_text *t, ttt_split s, ttt_rng *rng, ttt_batch *b) {
    size_t start = ttt_text_split_start(t, s), size = ttt_text_split_size(t, s);
    size_t L = (size_t)b->L;
    TTT_ASSERT(size >= L + 1); /* ensured by ttt_text_load for its seq_len */
    for (int r = 0; r < b->B; r++) {
        size_t at = start + (size_t)ttt_rng_below(rng, (uint64_t)(size - L));
        window(b->tokens + (size_t)r * L, b->labels + (size_t)r * L, t->bytes, at, b->L);
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
            window(tok, lab, t->bytes, start + j * L, b->L);
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
