/* Input checks (see checks.h). */
#include "checks.h"

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

ttt_status ttt_apply_check_outputs(const ttt_apply_out *out, const ttt_st_file *in,
                                   ttt_error *err) {
    const char *where = in && in->path ? in->path : "<input>";
    for (int i = 0; i < out->n; i++) {
        const ttt_st_tensor *t = &out->t[i];
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

/* ---- memory estimates ---- */

/* Elements of each fast-weight tensor, their sum, and Σ min(rows, cols)² over the matrices
 * (Newton–Schulz works on the Gram matrix of the smaller side). */
static double weight_floats(const ttt_layer *L, double *gram) {
    double total = 0;
    *gram = 0;
    for (int w = 0; w < L->model->n_weights; w++) {
        int shape[TTT_MAX_DIMS];
        const int nd = L->model->shape(w, L->d_k, L->d_v, shape);
        double n = 1;
        for (int d = 0; d < nd; d++) n *= shape[d];
        total += n;
        if (nd == 2) {
            const double m = shape[0] < shape[1] ? shape[0] : shape[1];
            *gram += m * m;
        }
    }
    return total;
}

static int n_opt_state(const ttt_layer *L) {
    return L->optim->n_state ? L->optim->n_state(L->optim_cfg) : 0;
}

double ttt_layer_state_bytes(const ttt_layer *L) {
    double gram;
    const double w = weight_floats(L, &gram);
    double floats = w * (1 + n_opt_state(L));
    if (L->normalize == TTT_NORMALIZE_RATIO) floats += L->d_k;
    return floats * sizeof(float);
}

/* Scratch of one form over `C` tokens at a time (the whole sequence for the parallel forms),
 * in floats, following the allocations in layers/la_forms.c, delta_forms.c, titans.c and
 * ttt_dual.c (a double counts as two floats). */
static double form_floats(const ttt_layer *L, long T) {
    const double dk = L->d_k, dv = L->d_v;
    double C;
    switch (L->form) {
    case TTT_FORM_PARALLEL: C = (double)T; break;
    case TTT_FORM_CHUNKWISE: /* Titans and LaCT take one gradient per mini-batch */
        C = ttt_layer_family(L) == TTT_FAMILY_TITANS || ttt_layer_family(L) == TTT_FAMILY_LACT
                ? L->mini_batch
                : L->chunk;
        break;
    case TTT_FORM_DUAL: C = L->mini_batch; break;
    default: C = 0; break;
    }
    if (C > (double)T) C = (double)T; /* every form clamps its block to the sequence */
    const int fam = ttt_layer_family(L);
    switch (L->form) {
    case TTT_FORM_PARALLEL:
    case TTT_FORM_CHUNKWISE:
        if (fam == TTT_FAMILY_LINEAR_ATTENTION) /* A (C, C); qs, qs2, ks, E (C, d_k); G double */
            return C * C + C * (6 * dk + 4);
        if (fam == TTT_FAMILY_DELTA_RULE) /* A, Γ (C, C); UW (C, d_k + d_v); exp G, G */
            return 2 * C * C + C * (dk + dv + 4);
        if (fam == TTT_FAMILY_LACT) {
            /* one block: the driver's weight-sized step temporaries (as the generic estimate
             * below, Newton–Schulz Gram matrices included) plus the block's activations, a
             * handful of (C, hidden) and (C, d) matrices; hidden from the SwiGLU weight count
             * w = hidden·(2 d_k + d_v) */
            double gram;
            const double w = weight_floats(L, &gram), hidden = w / (2 * dk + dv);
            return (12.0 + 3 * n_opt_state(L)) * w + 6 * gram + C * (8 * hidden + 4 * (dk + dv));
        }
        /* Titans: D (n, n) float and double, per-row coefficients, and matmul results */
        return 3 * C * C + C * (4 * dk + 4 * dv + 16) + 4 * dk * dv;
    case TTT_FORM_DUAL: /* G, Zb (B, d); M (B, B); (d, d) sums; bias vectors */
        return C * C + 2 * C * dk + 3 * dk * dk + 8 * dk;
    case TTT_FORM_RECURRENT:
        return 2 * dk * dv + 2 * (dk + dv);
    default: {
        /* The generic driver keeps (2 + n_state) block buffers per weight and makes per token a
         * handful of weight-sized temporaries (decayed copy, gradient, sum, step results);
         * Newton–Schulz adds Gram-sized matrices. Per-token activations are (1, width). */
        double gram;
        const double w = weight_floats(L, &gram);
        const int ns = n_opt_state(L);
        return (12.0 + 3 * ns) * w + 6 * gram + 64 * (dk + dv);
    }
    }
}

double ttt_layer_forward_bytes(const ttt_layer *L, long T) {
    const double dk = L->d_k, dv = L->d_v, t = (double)T;
    /* β, a constant log α (T); scaled, rotated and feature-mapped q and k (T, d_k) each; the
     * form's result, the normalized result and the ratio denominator (T, d_v) or (T) */
    double floats = t * (5 * dk + 3 * dv + 8);
    floats += form_floats(L, T);
    return floats * sizeof(float);
}
