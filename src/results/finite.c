/* Finite-value checks on tensors from outside (see finite.h). */
#include "finite.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- finite values ---- */

/* A tensor name from a file for a message: at most 64 bytes, control characters as \xNN. */
static const char *shown_name(const char *s, char *buf, size_t len) {
    size_t w = 0, i = 0;
    for (; s && s[i] && i < 64 && w + 5 < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7F) w += (size_t)snprintf(buf + w, len - w, "\\x%02x", c);
        else buf[w++] = (char)c;
    }
    if (s && s[i] && w + 4 < len) {
        memcpy(buf + w, "...", 3);
        w += 3;
    }
    buf[w] = '\0';
    return buf;
}

/* The first non-finite element of x (row-major) into *first (-1 when none) and how many. */
static int64_t count_bad(const float *x, int64_t n, int64_t *first) {
    int64_t bad = 0;
    *first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            if (*first < 0) *first = i;
            bad++;
        }
    return bad;
}

/* "(0, 3, 1, 2)": the multi-index of flat index i, the last index varying fastest. */
static void index_str(char *at, size_t len, int64_t i, int ndim, const int64_t *shape) {
    int64_t idx[TTT_ST_MAX_DIMS] = {0}, rest = i;
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = shape[d] > 0 ? rest % shape[d] : 0;
        rest = shape[d] > 0 ? rest / shape[d] : 0;
    }
    size_t w = (size_t)snprintf(at, len, "(");
    for (int d = 0; d < ndim && w < len; d++)
        w += (size_t)snprintf(at + w, len - w, "%s%" PRId64, d ? ", " : "", idx[d]);
    if (w < len) snprintf(at + w, len - w, ")");
}

static const char *kind_of(float v) { return isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf"; }

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

ttt_status ttt_check_finite(const float *x, int ndim, const int64_t *shape, const char *where,
                            const char *name, ttt_error *err) {
    TTT_ASSERT(ndim >= 0 && ndim <= TTT_ST_MAX_DIMS);
    const int64_t n = numel_of(ndim, shape);
    int64_t first;
    const int64_t bad = count_bad(x, n, &first);
    if (bad == 0) return TTT_OK;
    char at[256], nb[300];
    index_str(at, sizeof at, first, ndim, shape);
    if (bad == 1)
        return ttt_error_set(err, TTT_ERR_NUMERIC,
                             "%s: tensor '%s' has %s at %s; it is the only value of its %" PRId64
                             " that is not finite (inputs must be finite numbers)",
                             where, shown_name(name, nb, sizeof nb), kind_of(x[first]), at, n);
    return ttt_error_set(err, TTT_ERR_NUMERIC,
                         "%s: tensor '%s' has %s at %s; %" PRId64 " of its %" PRId64
                         " values are not finite (inputs must be finite numbers)",
                         where, shown_name(name, nb, sizeof nb), kind_of(x[first]), at, bad, n);
}

ttt_status ttt_st_check_outputs(const ttt_st_tensor *outs, int n_out, const ttt_st_file *in,
                                ttt_error *err) {
    const char *where = in && in->path ? in->path : "<input>";
    for (int i = 0; i < n_out; i++) {
        const ttt_st_tensor *t = &outs[i];
        if (!t->data) continue;
        const int64_t n = numel_of(t->ndim, t->shape);
        int64_t first;
        const int64_t bad = count_bad(t->data, n, &first);
        if (bad == 0) continue;
        /* The inputs are finite (checked before the run), so float32 overflowed: say where the
         * largest input is, the usual cause. */
        double big = 0;
        const char *big_name = "";
        for (int j = 0; in && j < in->n; j++) {
            const int64_t m = numel_of(in->t[j].ndim, in->t[j].shape);
            for (int64_t e = 0; in->t[j].data && e < m; e++)
                if (fabs((double)in->t[j].data[e]) > big) {
                    big = fabs((double)in->t[j].data[e]);
                    big_name = in->t[j].name;
                }
        }
        char at[256], nb[300];
        index_str(at, sizeof at, first, t->ndim, t->shape);
        return ttt_error_set(err, TTT_ERR_NUMERIC,
                             "%s: the output '%s' has %s at %s (%" PRId64 " of its %" PRId64
                             " values are not finite): the layer overflowed float32 on these "
                             "inputs (the largest is %.3g, in '%s'); scale the inputs down or "
                             "lower layer.optimizer.lr",
                             where, t->name, kind_of(t->data[first]), at, bad, n, big,
                             shown_name(big_name, nb, sizeof nb));
    }
    return TTT_OK;
}

ttt_status ttt_st_check_finite(const ttt_st_file *f, ttt_error *err) {
    const char *where = f->path ? f->path : "<input>";
    for (int i = 0; i < f->n; i++) {
        const ttt_st_tensor *t = &f->t[i];
        if (!t->data) continue; /* no elements */
        TTT_TRY(ttt_check_finite(t->data, t->ndim, t->shape, where, t->name, err));
    }
    return TTT_OK;
}

