/* A float64 LaCT layer written from docs/math.md §2 (SwiGLU fast weight) and §3 (large_batch:
 * one step per block from the block-start weights, Newton–Schulz, renormalization), shared by
 * tests/test_lact_composed.c (its forward and finite differences against the closed form) and
 * tests/test_contract_forms.c (the truth each float32 evaluation of LaCT is measured against);
 * both run it one block at a time from a float32 state, and take the block's Newton–Schulz
 * input for its bound (ref_block). Header-only: static functions, included by one test file
 * each. */
#ifndef TTT_TEST_LACT_REF_H
#define TTT_TEST_LACT_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { GATE_NONE, GATE_TOKEN, GATE_CONST }; /* per-token log α (decoupled) or optimizer decay */
enum { RENORM_OFF, RENORM_COLS, RENORM_ROWS };
#define CONST_DECAY 0.9f

typedef struct lcase {
    const char *name;
    int T, b, d_k, d_v;
    float lr, mu;                 /* θ, momentum over blocks */
    int muon, ns_lact, renorm;    /* Newton–Schulz on, lact coefficients, renormalization */
    int squared, pos_inverse;     /* loss squared (else dot), position_scale inverse */
    int eta, gate;                /* per-token η given; decay (GATE_*) */
} lcase;

/* the inputs x[] of ref_lact, in this order (absent ones NULL) */
enum { LR_Q, LR_K, LR_V, LR_ETA, LR_LA, LR_W0, LR_W1, LR_W2, LR_N };

enum { VAR_OK, VAR_READ_AFTER, VAR_AXIS_SWAP, VAR_NO_DECAY_WEIGHTS };

static const double NS_MUON[3] = {3.4445, -4.7750, 2.0315};
static const double NS_LACT[5][3] = {
    {4.0848, -6.8946, 2.9270}, {3.9505, -6.3029, 2.6377}, {3.7418, -5.5913, 2.3037},
    {2.8769, -3.1427, 1.2046}, {2.8366, -3.0525, 1.2012},
};

static double sig(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Newton–Schulz of A (r, c) in place, 5 steps: X = A/(‖A‖_F + 1e-7) in the orientation with
 * rows ≤ cols, X ← aX + (bP + cP²)X with P = X Xᵀ. */
static void ref_ns(double *A, int r, int c, int lact) {
    const int tr = r > c, m = tr ? c : r, n = tr ? r : c;
    double *X = malloc(sizeof(double) * (size_t)m * n), *P = malloc(sizeof(double) * m * m);
    double *B = malloc(sizeof(double) * m * m), *Y = malloc(sizeof(double) * (size_t)m * n);
    double fro = 0;
    for (int i = 0; i < r * c; i++) fro += A[i] * A[i];
    fro = sqrt(fro) + 1e-7;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) X[i * n + j] = (tr ? A[j * c + i] : A[i * c + j]) / fro;
    for (int s = 0; s < 5; s++) {
        const double *abc = lact ? NS_LACT[s] : NS_MUON;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                double acc = 0;
                for (int l = 0; l < n; l++) acc += X[i * n + l] * X[j * n + l];
                P[i * m + j] = acc;
            }
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                double acc = 0;
                for (int l = 0; l < m; l++) acc += P[i * m + l] * P[l * m + j];
                B[i * m + j] = abc[1] * P[i * m + j] + abc[2] * acc;
            }
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double acc = 0;
                for (int l = 0; l < m; l++) acc += B[i * m + l] * X[l * n + j];
                Y[i * n + j] = abc[0] * X[i * n + j] + acc;
            }
        memcpy(X, Y, sizeof(double) * (size_t)m * n);
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) *(tr ? &A[j * c + i] : &A[i * c + j]) = X[i * n + j];
    free(X), free(P), free(B), free(Y);
}

/* norms of the channels of W (r, c): per column, or per row */
static void ref_norms(double *nrm, const double *W, int r, int c, int rows) {
    for (int ch = 0; ch < (rows ? r : c); ch++) {
        double acc = 0;
        for (int l = 0; l < (rows ? c : r); l++) {
            const double w = rows ? W[ch * c + l] : W[l * c + ch];
            acc += w * w;
        }
        nrm[ch] = sqrt(acc);
    }
}

/* f(W; x) for one row x (d_k): z (d_v); also h, u (d_h) */
static void ref_apply(double *z, double *h, double *u, double *const *W, const double *x, int dk,
                      int dv) {
    const int dh = dk;
    for (int j = 0; j < dh; j++) {
        h[j] = u[j] = 0;
        for (int i = 0; i < dk; i++) {
            h[j] += x[i] * W[0][i * dh + j];
            u[j] += x[i] * W[2][i * dh + j];
        }
    }
    for (int j = 0; j < dv; j++) {
        z[j] = 0;
        for (int l = 0; l < dh; l++) z[j] += h[l] * sig(h[l]) * u[l] * W[1][l * dv + j];
    }
}

/* What the last block of a ref_lact run hands to Newton–Schulz, for the bounds of a comparison
 * a block at a time: the NS input of each weight (the block gradient after momentum, rows[w] ×
 * cols[w], caller-allocated) and the renormalization's largest factor on it (≥ 1). */
typedef struct ref_block {
    double *G[3];
    double rmax[3];
} ref_block;

/* The LaCT layer over the whole sequence: O (T, d_v), final weights Wf[3], momentum Mf[3].
 * x holds the (possibly perturbed) inputs, x[LR_W0 + w] the initial weights; the
 * renormalization norms are those of W_init (the unperturbed initial weights of the layer: the
 * optimizer takes them once, as constants; a run that starts mid-sequence passes the layer's
 * first weights here and its current ones in x). M0: the initial momentum (NULL: zero); last:
 * the last block's NS inputs (NULL: not wanted). */
static void ref_lact(const lcase *c, double *const *x, double *const *W_init,
                     double *const *M0, double *O, double **Wf, double **Mf, ref_block *last,
                     int var) {
    const int T = c->T, dk = c->d_k, dv = c->d_v, dh = dk;
    const int rows[3] = {dk, dh, dk}, cols[3] = {dh, dv, dh};
    const int axis_rows = (c->renorm == RENORM_ROWS) != (var == VAR_AXIS_SWAP);
    double *N[3], *G[3], *Wc[3];
    for (int w = 0; w < 3; w++) {
        const int sz = rows[w] * cols[w];
        memcpy(Wf[w], x[LR_W0 + w], sizeof(double) * sz);
        if (M0) memcpy(Mf[w], M0[w], sizeof(double) * sz);
        else memset(Mf[w], 0, sizeof(double) * sz);
        N[w] = malloc(sizeof(double) * (size_t)(rows[w] > cols[w] ? rows[w] : cols[w]));
        ref_norms(N[w], W_init[w], rows[w], cols[w], axis_rows);
        G[w] = malloc(sizeof(double) * sz);
        Wc[w] = Wf[w];
    }
    double h[16], u[16], z[16];
    for (int t0 = 0; t0 < T; t0 += c->b) {
        const int n = t0 + c->b < T ? c->b : T - t0;
        /* read-out with the block-start weights (apply_then_update) */
        if (var != VAR_READ_AFTER)
            for (int t = t0; t < t0 + n; t++)
                ref_apply(O + (size_t)t * dv, h, u, Wc, x[LR_Q] + (size_t)t * dk, dk, dv);
        /* block gradient Σ_i w_i ∇ℓ_i at the block start, w_i = η_i Π_{i<j<n} α_j */
        for (int w = 0; w < 3; w++) memset(G[w], 0, sizeof(double) * rows[w] * cols[w]);
        const double *la = c->gate == GATE_TOKEN ? x[LR_LA] : NULL;
        double A = 1;
        for (int t = t0; t < t0 + n; t++) {
            const double lat = la ? la[t] : c->gate == GATE_CONST ? log((double)CONST_DECAY) : 0;
            A *= exp(lat);
        }
        for (int t = t0; t < t0 + n; t++) {
            double wt = c->eta ? x[LR_ETA][t] : 1.0;
            if (var != VAR_NO_DECAY_WEIGHTS)
                for (int j = t + 1; j < t0 + n; j++)
                    wt *= exp(la ? la[j] : c->gate == GATE_CONST ? log((double)CONST_DECAY) : 0);
            const double *xk = x[LR_K] + (size_t)t * dk, *xv = x[LR_V] + (size_t)t * dv;
            ref_apply(z, h, u, Wc, xk, dk, dv);
            double e[16], dl[16];
            for (int j = 0; j < dv; j++) e[j] = wt * (c->squared ? z[j] - xv[j] : -xv[j]);
            for (int l = 0; l < dh; l++) {
                const double s = sig(h[l]), a = h[l] * s;
                dl[l] = 0;
                for (int j = 0; j < dv; j++) {
                    G[1][l * dv + j] += a * u[l] * e[j];
                    dl[l] += e[j] * Wc[1][l * dv + j];
                }
                const double dsilu = s * (1 + h[l] * (1 - s));
                for (int i = 0; i < dk; i++) {
                    G[2][i * dh + l] += xk[i] * dl[l] * a;
                    G[0][i * dh + l] += xk[i] * dl[l] * u[l] * dsilu;
                }
            }
        }
        const double theta = c->pos_inverse ? (double)c->lr / n : (double)c->lr;
        for (int w = 0; w < 3; w++) {
            const int r = rows[w], cc = cols[w], sz = r * cc;
            double *U = G[w];
            if (c->mu > 0) {
                for (int i = 0; i < sz; i++) Mf[w][i] = c->mu * Mf[w][i] + G[w][i];
                memcpy(G[w], Mf[w], sizeof(double) * sz);
            }
            if (last) memcpy(last->G[w], U, sizeof(double) * sz), last->rmax[w] = 1.0;
            if (c->muon) ref_ns(U, r, cc, c->ns_lact);
            for (int i = 0; i < sz; i++) Wc[w][i] = A * Wc[w][i] - theta * U[i];
            if (c->renorm) {
                double nrm[16];
                ref_norms(nrm, Wc[w], r, cc, axis_rows);
                for (int ch = 0; last && ch < (axis_rows ? r : cc); ch++)
                    if (N[w][ch] > 0)
                        last->rmax[w] = fmax(last->rmax[w], N[w][ch] / (nrm[ch] + 1e-5));
                for (int i = 0; i < r; i++)
                    for (int j = 0; j < cc; j++) {
                        const int ch = axis_rows ? i : j;
                        if (N[w][ch] > 0) Wc[w][i * cc + j] *= N[w][ch] / (nrm[ch] + 1e-5);
                    }
            }
        }
        if (var == VAR_READ_AFTER)
            for (int t = t0; t < t0 + n; t++)
                ref_apply(O + (size_t)t * dv, h, u, Wc, x[LR_Q] + (size_t)t * dk, dk, dv);
    }
    for (int w = 0; w < 3; w++) free(N[w]), free(G[w]);
}

#endif
