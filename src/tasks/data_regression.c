/* In-context linear regression and its least-squares baseline (see data.h, docs/math.md §7). */
#include "data.h"
#include "fault.h"

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void ttt_regression_config_default(ttt_regression_config *c) {
    c->dim = 8;
    c->n_points = 32;
    c->noise_std = 0.0;
    c->layout = TTT_REG_INTERLEAVED;
    c->n_query = 1;
}

ttt_status ttt_regression_config_check(const ttt_regression_config *c, ttt_error *err) {
    if (c->dim < 1)
        return ttt_error_set(err, TTT_ERR_RANGE, "regression: dim = %d must be >= 1", c->dim);
    if (c->n_points < 1)
        return ttt_error_set(err, TTT_ERR_RANGE, "regression: n_points = %d must be >= 1",
                             c->n_points);
    if (!(isfinite(c->noise_std) && c->noise_std >= 0))
        return ttt_error_set(err, TTT_ERR_RANGE, "regression: noise_std = %g must be >= 0",
                             c->noise_std);
    if (c->layout != TTT_REG_INTERLEAVED && c->layout != TTT_REG_PAIRED)
        return ttt_error_set(err, TTT_ERR_RANGE, "regression: unknown layout %d", (int)c->layout);
    if (c->layout == TTT_REG_PAIRED && (c->n_query < 1 || c->n_query > c->n_points))
        return ttt_error_set(err, TTT_ERR_RANGE,
                             "regression: n_query = %d must be in [1, n_points = %d]", c->n_query,
                             c->n_points);
    return TTT_OK;
}

int ttt_regression_seq_len(const ttt_regression_config *c) {
    return c->layout == TTT_REG_INTERLEAVED ? 2 * c->n_points : c->n_points;
}

void ttt_regression_batch_free(ttt_regression_batch *b) {
    if (!b) return;
    free(b->w);
    free(b->y);
    free(b->x);
    free(b->point);
    free(b->n_context);
    free(b->mask);
    free(b->targets);
    free(b->inputs);
    memset(b, 0, sizeof *b);
}

ttt_status ttt_regression_batch_init(ttt_regression_batch *b, const ttt_regression_config *c, int B,
                                     ttt_error *err) {
    memset(b, 0, sizeof *b);
    TTT_TRY(ttt_regression_config_check(c, err));
    if (B <= 0) return ttt_error_set(err, TTT_ERR_RANGE, "regression: batch size %d", B);
    int n = c->n_points, d = c->dim, T = ttt_regression_seq_len(c);
    size_t BT = (size_t)B * (size_t)T;
    b->inputs = ttt_fault_calloc(BT * (size_t)(d + 1), sizeof(float));
    b->targets = ttt_fault_calloc(BT, sizeof(float));
    b->mask = ttt_fault_calloc(BT, sizeof(float));
    b->n_context = ttt_fault_malloc((size_t)T * sizeof(int));
    b->point = ttt_fault_malloc((size_t)T * sizeof(int));
    b->x = ttt_fault_calloc((size_t)B * (size_t)n * (size_t)d, sizeof(float));
    b->y = ttt_fault_calloc((size_t)B * (size_t)n, sizeof(float));
    b->w = ttt_fault_calloc((size_t)B * (size_t)d, sizeof(float));
    if (!b->inputs || !b->targets || !b->mask || !b->n_context || !b->point || !b->x || !b->y ||
        !b->w) {
        ttt_regression_batch_free(b);
        return ttt_error_set(err, TTT_ERR_NOMEM, "regression: out of memory for a batch of %d", B);
    }
    b->B = B;
    b->T = T;
    b->d = d;
    b->n = n;
    /* which point each position predicts and how many pairs it sees: fixed by the layout */
    for (int t = 0; t < T; t++) {
        b->n_context[t] = -1;
        b->point[t] = -1;
    }
    if (c->layout == TTT_REG_INTERLEAVED) {
        for (int i = 0; i < n; i++) {
            b->point[2 * i] = i;
            b->n_context[2 * i] = i;
        }
    } else {
        for (int i = n - c->n_query; i < n; i++) {
            b->point[i] = i;
            b->n_context[i] = n - c->n_query;
        }
    }
    return TTT_OK;
}

void ttt_regression_fill(ttt_regression_batch *b, const ttt_regression_config *c, ttt_rng *rng) {
    TTT_ASSERT(b->d == c->dim && b->n == c->n_points && b->T == ttt_regression_seq_len(c));
    int n = b->n, d = b->d, T = b->T, D = d + 1;
    for (int r = 0; r < b->B; r++) {
        float *w = b->w + (size_t)r * d;           /* (d) */
        float *x = b->x + (size_t)r * n * d;       /* (n, d) */
        float *y = b->y + (size_t)r * n;           /* (n) */
        float *in = b->inputs + (size_t)r * T * D; /* (T, d+1) */
        float *tg = b->targets + (size_t)r * T;    /* (T) */
        float *mk = b->mask + (size_t)r * T;       /* (T) */
        ttt_rng_fill_normal(rng, w, (size_t)d, 0.0f, 1.0f);
        for (int i = 0; i < n; i++) {
            float *xi = x + (size_t)i * d;
            ttt_rng_fill_normal(rng, xi, (size_t)d, 0.0f, 1.0f);
            double yi = 0.0;
            for (int j = 0; j < d; j++) yi += (double)w[j] * (double)xi[j];
            if (c->noise_std > 0) yi += c->noise_std * ttt_rng_normal(rng);
            y[i] = (float)yi;
        }
        memset(in, 0, (size_t)T * D * sizeof(float));
        memset(tg, 0, (size_t)T * sizeof(float));
        memset(mk, 0, (size_t)T * sizeof(float));
        if (c->layout == TTT_REG_INTERLEAVED) {
            for (int i = 0; i < n; i++) {
                memcpy(in + (size_t)(2 * i) * D, x + (size_t)i * d, (size_t)d * sizeof(float));
                in[(size_t)(2 * i + 1) * D + d] = y[i];
                tg[2 * i] = y[i];
                mk[2 * i] = 1.0f;
            }
        } else {
            int n_ctx = n - c->n_query;
            for (int i = 0; i < n; i++) {
                memcpy(in + (size_t)i * D, x + (size_t)i * d, (size_t)d * sizeof(float));
                if (i < n_ctx) {
                    in[(size_t)i * D + d] = y[i];
                } else {
                    tg[i] = y[i];
                    mk[i] = 1.0f;
                }
            }
        }
    }
}

/* Minimum-norm least squares ŵ (d) from the first k rows of x (n, d) and y, in double. a is
 * (k, d) scratch, rhs (max(k, d)) scratch, sv (min(k, d)) scratch. Returns the LAPACK info. */
static int ls_fit(double *w_hat, const float *x, const float *y, int k, int d, double *a,
                  double *rhs, double *sv) {
    if (k == 0) {
        for (int j = 0; j < d; j++) w_hat[j] = 0.0;
        return 0;
    }
    for (int i = 0; i < k; i++) {
        for (int j = 0; j < d; j++) a[(size_t)i * d + j] = x[(size_t)i * d + j];
        rhs[i] = y[i];
    }
    for (int i = k; i < d; i++) rhs[i] = 0.0;
    lapack_int rank;
    /* rcond < 0: singular values below machine precision · σ_max count as zero */
    lapack_int info = LAPACKE_dgelsd(LAPACK_ROW_MAJOR, k, d, 1, a, d, rhs, 1, sv, -1.0, &rank);
    for (int j = 0; j < d; j++) w_hat[j] = rhs[j];
    return (int)info;
}

ttt_status ttt_regression_ls_errors(double *sq_err, const ttt_regression_batch *b, ttt_error *err) {
    int n = b->n, d = b->d, T = b->T;
    int mx = n > d ? n : d;
    double *a = ttt_fault_malloc((size_t)n * d * sizeof(double) + 1);
    double *rhs = ttt_fault_malloc((size_t)mx * sizeof(double));
    double *sv = ttt_fault_malloc((size_t)mx * sizeof(double));
    double *w_hat = ttt_fault_malloc((size_t)d * sizeof(double));
    ttt_status st = TTT_OK;
    if (!a || !rhs || !sv || !w_hat) {
        st = ttt_error_set(err, TTT_ERR_NOMEM, "regression: out of memory for least squares");
        goto done;
    }
    for (int r = 0; r < b->B; r++) {
        const float *x = b->x + (size_t)r * n * d; /* (n, d) */
        const float *y = b->y + (size_t)r * n;     /* (n) */
        int fitted_k = -1;
        for (int t = 0; t < T; t++) {
            double *e = &sq_err[(size_t)r * T + t];
            *e = 0.0;
            int i = b->point[t], k = b->n_context[t];
            if (i < 0) continue;
            if (k != fitted_k) {
                int info = ls_fit(w_hat, x, y, k, d, a, rhs, sv);
                if (info != 0) {
                    st = ttt_error_set(err, TTT_ERR_NUMERIC,
                                       "regression: least squares failed (LAPACK dgelsd info %d)",
                                       info);
                    goto done;
                }
                fitted_k = k;
            }
            double pred = 0.0;
            for (int j = 0; j < d; j++) pred += w_hat[j] * (double)x[(size_t)i * d + j];
            double diff = pred - (double)y[i];
            *e = diff * diff;
        }
    }
done:
    free(w_hat);
    free(sv);
    free(rhs);
    free(a);
    return st;
}

ttt_status ttt_regression_ls_curve(double *curve, const ttt_regression_config *c, int n_seq,
                                   ttt_rng *rng, ttt_error *err) {
    ttt_regression_config ci = *c;
    ci.layout = TTT_REG_INTERLEAVED;
    TTT_TRY(ttt_regression_config_check(&ci, err));
    if (n_seq < 1) return ttt_error_set(err, TTT_ERR_RANGE, "regression: %d sequences", n_seq);
    int n = c->n_points;
    int chunk = n_seq < 256 ? n_seq : 256;
    ttt_regression_batch b;
    TTT_TRY(ttt_regression_batch_init(&b, &ci, chunk, err));
    double *sq = ttt_fault_malloc((size_t)chunk * b.T * sizeof(double));
    if (!sq) {
        ttt_regression_batch_free(&b);
        return ttt_error_set(err, TTT_ERR_NOMEM, "regression: out of memory");
    }
    for (int k = 0; k < n; k++) curve[k] = 0.0;
    ttt_status st = TTT_OK;
    for (int done = 0; done < n_seq && st == TTT_OK; done += chunk) {
        int m = n_seq - done < chunk ? n_seq - done : chunk;
        b.B = m; /* a smaller last batch reuses the front of the buffers */
        ttt_regression_fill(&b, &ci, rng);
        st = ttt_regression_ls_errors(sq, &b, err);
        for (int r = 0; r < m && st == TTT_OK; r++)
            for (int k = 0; k < n; k++) curve[k] += sq[(size_t)r * b.T + 2 * k];
    }
    for (int k = 0; k < n; k++) curve[k] /= n_seq;
    free(sq);
    ttt_regression_batch_free(&b);
    return st;
}
