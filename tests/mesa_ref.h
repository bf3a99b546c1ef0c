/* A float64 MesaNet written from docs/math.md §3.11, shared by tests/test_mesa_net.c and
 * tests/test_hard_inputs.c: per token
 *     H_t = γ_t H_{t−1} + β_t k_tᵀ k_t,  G_t = γ_t G_{t−1} + β_t k_tᵀ v_t,
 *     x_t = (H_t + λI)⁻ᵀ q_t (Gauss–Jordan with partial pivoting, double),  o_t = x_tᵀ G_t
 *     (= q_t W_t; the transpose matters only for a state H that is not symmetric),
 * the final weights W_T = (H_T + λI)⁻¹ G_T, and per token the 1-norm condition number
 * κ_t = ‖A_t‖₁ ‖A_t⁻¹‖₁ of A_t = H_t + λI (an upper bound of its 2-norm condition number for a
 * symmetric A: ‖A‖₂ ≤ ‖A‖₁ then, and the same for A⁻¹). With cg > 0, x_t is instead the
 * iterate of cg conjugate-gradient steps from 0, in double; with cg < 0, of −cg steps from the
 * Jacobi guess q_t/diag A_t. Header-only: static functions. */
#ifndef TTT_TEST_MESA_REF_H
#define TTT_TEST_MESA_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MESA_REF_DMAX 32

/* Ainv = A⁻¹ (n ≤ MESA_REF_DMAX) by Gauss–Jordan with partial pivoting; returns 0 if singular. */
static int mesa_ref_inverse(const double *A, double *Ainv, int n) {
    double M[MESA_REF_DMAX][2 * MESA_REF_DMAX];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 2 * n; j++) M[i][j] = j < n ? A[i * n + j] : (j - n == i);
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(M[r][c]) > fabs(M[p][c])) p = r;
        if (M[p][c] == 0.0) return 0;
        for (int j = 0; j < 2 * n; j++) {
            const double t = M[c][j];
            M[c][j] = M[p][j], M[p][j] = t;
        }
        const double inv = 1.0 / M[c][c];
        for (int j = 0; j < 2 * n; j++) M[c][j] *= inv;
        for (int r = 0; r < n; r++) {
            if (r == c || M[r][c] == 0.0) continue;
            const double l = M[r][c];
            for (int j = 0; j < 2 * n; j++) M[r][j] -= l * M[c][j];
        }
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) Ainv[i * n + j] = M[i][n + j];
    return 1;
}

static double mesa_ref_norm1(const double *A, int n) {
    double m = 0;
    for (int j = 0; j < n; j++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += fabs(A[i * n + j]);
        m = fmax(m, s);
    }
    return m;
}

/* x = cg steps of conjugate gradients on A x = b from 0, or with jacobi from b/diag A (stopping
 * when the residual is 0). */
static void mesa_ref_cg(const double *A, const double *b, double *x, int n, int cg, int jacobi) {
    double r[MESA_REF_DMAX], p[MESA_REF_DMAX], Ap[MESA_REF_DMAX], delta = 0;
    for (int i = 0; i < n; i++) x[i] = jacobi ? b[i] / A[i * n + i] : 0;
    for (int i = 0; i < n; i++) {
        double acc = b[i];
        for (int j = 0; j < n; j++) acc -= A[i * n + j] * x[j];
        r[i] = p[i] = acc, delta += acc * acc;
    }
    for (int s = 0; s < cg && delta > 0; s++) {
        double pAp = 0;
        for (int i = 0; i < n; i++) {
            double acc = 0;
            for (int j = 0; j < n; j++) acc += A[i * n + j] * p[j];
            Ap[i] = acc, pAp += p[i] * acc;
        }
        if (!(pAp > 0)) break;
        const double alpha = delta / pAp;
        double dn = 0;
        for (int i = 0; i < n; i++) x[i] += alpha * p[i], r[i] -= alpha * Ap[i], dn += r[i] * r[i];
        for (int i = 0; i < n; i++) p[i] = r[i] + dn / delta * p[i];
        delta = dn;
    }
}

/* The layer over T tokens: q, k (T, dk), v (T, dv), beta (T) or NULL (= 1), la (T) log γ or
 * NULL; H (dk, dk), G (dk, dv) in/out (double); o (T, dv) and W (dk, dv) out; kappa (T), x_out
 * (T, dk), G_all (T, dk·dv, every G_t) and walk (T) or NULL. walk_t = 1 + γ_t² walk_{t−1}: the
 * variance, in units of one rounding's, of a float32 state entry's accumulated rounding error
 * when every step adds one independent rounding and the gates scale the earlier ones (≤ t + 1;
 * a window of ~1/(1 − γ²) tokens under a constant gate). Inputs are float (what the forms receive)
 * read as doubles. Returns 0 if a matrix was singular. */
static int mesa_ref(const float *q, const float *k, const float *v, const float *beta,
                    const float *la, int T, int dk, int dv, double lam, int cg, double *H,
                    double *G, double *o, double *W, double *kappa, double *x_out,
                    double *G_all, double *walk) {
    double A[MESA_REF_DMAX * MESA_REF_DMAX], Ai[MESA_REF_DMAX * MESA_REF_DMAX];
    double x[MESA_REF_DMAX], qd[MESA_REF_DMAX];
    if (dk > MESA_REF_DMAX) return 0;
    double n_eff = 0;
    for (int t = 0; t < T; t++) {
        const double a = la ? exp((double)la[t]) : 1.0, b = beta ? beta[t] : 1.0;
        n_eff = 1 + a * a * n_eff;
        if (walk) walk[t] = n_eff;
        const float *kt = k + (size_t)t * dk, *vt = v + (size_t)t * dv;
        for (int i = 0; i < dk; i++) {
            for (int j = 0; j < dk; j++)
                H[i * dk + j] = a * H[i * dk + j] + b * (double)kt[i] * kt[j];
            for (int j = 0; j < dv; j++)
                G[i * dv + j] = a * G[i * dv + j] + b * (double)kt[i] * vt[j];
        }
        for (int i = 0; i < dk * dk; i++) A[i] = H[i];
        for (int i = 0; i < dk; i++) A[i * dk + i] += lam;
        if (!mesa_ref_inverse(A, Ai, dk)) return 0;
        if (kappa) kappa[t] = mesa_ref_norm1(A, dk) * mesa_ref_norm1(Ai, dk);
        for (int i = 0; i < dk; i++) qd[i] = q[(size_t)t * dk + i];
        if (cg != 0)
            mesa_ref_cg(A, qd, x, dk, cg > 0 ? cg : -cg, cg < 0);
        else
            for (int i = 0; i < dk; i++) {
                double s = 0;
                for (int j = 0; j < dk; j++) s += Ai[j * dk + i] * qd[j]; /* A⁻ᵀ q */
                x[i] = s;
            }
        if (x_out)
            for (int i = 0; i < dk; i++) x_out[(size_t)t * dk + i] = x[i];
        if (G_all) memcpy(G_all + (size_t)t * dk * dv, G, sizeof(double) * (size_t)dk * dv);
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += x[i] * G[i * dv + j];
            o[(size_t)t * dv + j] = s;
        }
    }
    for (int i = 0; i < dk * dk; i++) A[i] = H[i];
    for (int i = 0; i < dk; i++) A[i * dk + i] += lam;
    if (!mesa_ref_inverse(A, Ai, dk)) return 0;
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int c = 0; c < dk; c++) s += Ai[i * dk + c] * G[c * dv + j];
            W[i * dv + j] = s;
        }
    return 1;
}

/* The largest ratio over tokens of |o_t − o*_t|_∞ to the bound of a float32 evaluation
 * (tests/test_mesa_net.c derives it):
 *     c·ε·(1 + κ_t·√walk_t)·‖x*_t‖₁·max|G*_t|   (c = 3, ε = 2^-24; walk_t ≤ t + 1 above),
 * plus, for k > 0 CG steps from 0, CG's 2√κ_t ρ_t^k ‖x*_t‖₂ ‖G*_t‖_F, ρ = (√κ − 1)/(√κ + 1).
 * got (T, dv) float; want (T, dv) the float64 layer measured against; kappa, x, G_all those of
 * the exact float64 layer (mesa_ref with cg = 0), walk its walk. */
static double mesa_ref_ratio(const float *got, const double *want, const double *kappa,
                             const double *x, const double *G_all, const double *walk, int T,
                             int dk, int dv, int k) {
    double worst = 0;
    for (int t = 0; t < T; t++) {
        const double kap = kappa[t];
        double x1 = 0, x2 = 0, gmax = 0, gf = 0;
        for (int i = 0; i < dk; i++) {
            const double xi = x[(size_t)t * dk + i];
            x1 += fabs(xi), x2 += xi * xi;
        }
        for (int i = 0; i < dk * dv; i++) {
            const double g = G_all[(size_t)t * dk * dv + i];
            gmax = fmax(gmax, fabs(g)), gf += g * g;
        }
        double bound = 3.0 * 0x1p-24 * (1 + kap * sqrt(walk[t])) * x1 * gmax;
        if (k > 0) {
            const double rho = (sqrt(kap) - 1) / (sqrt(kap) + 1);
            bound += 2 * sqrt(kap) * pow(rho, k) * sqrt(x2) * sqrt(gf);
        }
        double err = 0;
        for (int j = 0; j < dv; j++)
            err = fmax(err, fabs((double)got[(size_t)t * dv + j] - want[(size_t)t * dv + j]));
        if (bound > 0 || err > 0) worst = fmax(worst, bound > 0 ? err / bound : INFINITY);
    }
    return worst;
}

#endif
