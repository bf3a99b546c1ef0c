/* Dense LU solves in double (optim/ridge.h): the exact solve of the ridge rules, docs/math.md
 * §3.11. O(n³/3) per factorization, O(n²) per right-hand side. */
#include "ridge.h"

#include <math.h>
#include <string.h>

int ttt_ridge_lu(double *A, int *piv, int n) {
    for (int c = 0; c < n; c++) {
        int p = c;
        double best = fabs(A[(size_t)c * n + c]);
        for (int r = c + 1; r < n; r++)
            if (fabs(A[(size_t)r * n + c]) > best) best = fabs(A[(size_t)r * n + c]), p = r;
        piv[c] = p;
        if (best == 0.0 || !isfinite(best)) return 0;
        if (p != c)
            for (int j = 0; j < n; j++) {
                const double t = A[(size_t)c * n + j];
                A[(size_t)c * n + j] = A[(size_t)p * n + j];
                A[(size_t)p * n + j] = t;
            }
        const double inv = 1.0 / A[(size_t)c * n + c];
        for (int r = c + 1; r < n; r++) {
            double *Ar = A + (size_t)r * n;
            const double l = Ar[c] * inv;
            Ar[c] = l;
            if (l == 0.0) continue;
            const double *Ac = A + (size_t)c * n;
            for (int j = c + 1; j < n; j++) Ar[j] -= l * Ac[j];
        }
    }
    return 1;
}

void ttt_ridge_lu_solve(const double *LU, const int *piv, int n, double *X, int m) {
    for (int c = 0; c < n; c++) /* the row swaps, in the factorization's order */
        if (piv[c] != c)
            for (int j = 0; j < m; j++) {
                const double t = X[(size_t)c * m + j];
                X[(size_t)c * m + j] = X[(size_t)piv[c] * m + j];
                X[(size_t)piv[c] * m + j] = t;
            }
    for (int r = 1; r < n; r++) /* L (unit lower) */
        for (int c = 0; c < r; c++) {
            const double l = LU[(size_t)r * n + c];
            if (l != 0.0)
                for (int j = 0; j < m; j++) X[(size_t)r * m + j] -= l * X[(size_t)c * m + j];
        }
    for (int r = n - 1; r >= 0; r--) { /* U */
        for (int c = r + 1; c < n; c++) {
            const double u = LU[(size_t)r * n + c];
            if (u != 0.0)
                for (int j = 0; j < m; j++) X[(size_t)r * m + j] -= u * X[(size_t)c * m + j];
        }
        const double inv = 1.0 / LU[(size_t)r * n + r];
        for (int j = 0; j < m; j++) X[(size_t)r * m + j] *= inv;
    }
}

void ttt_ridge_lu_solve1(const double *LU, const int *piv, int n, double *x) {
    ttt_ridge_lu_solve(LU, piv, n, x, 1);
}
