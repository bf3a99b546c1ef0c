/* The float32 Newton–Schulz bound (docs/hardening.md "Portable tolerances"), shared by the suites
 * that hold a Newton–Schulz step to float64 (tests/test_optim.c, tests/test_contract_forms.c,
 * tests/test_lact_composed.c). Header-only: static functions, included by one test file each. */
#ifndef TTT_TEST_NS_BOUND_H
#define TTT_TEST_NS_BOUND_H

#include <check.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Singular values (min(m, n), descending) of a float64 (m, n) matrix. */
static void nsb_sing(double *s, const double *A, int m, int n) {
    const int p = m < n ? m : n;
    double *a = malloc(sizeof(double) * m * n), *superb = malloc(sizeof(double) * (p + 1));
    memcpy(a, A, sizeof(double) * m * n);
    lapack_int info = LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'N', 'N', m, n, a, n, s, NULL, 1, NULL, 1,
                                     superb);
    ck_assert_int_eq(info, 0);
    free(a), free(superb);
}

/* The float32 Newton–Schulz bound (docs/hardening.md "Portable tolerances"), relative to the
 * largest entry of the result, from the float64 singular values of its input (r, c; r = 0: a
 * vector of c). A step X ← aX + (bP + cP²)X, P = XXᵀ, rounds each entry of the (m, n) iterate
 * (m ≤ n) through n + 2m + 4 operations (P's n-term sums, P²'s and the product's m-term sums, a
 * few element-wise) on the scale of its terms, which are up to |a| + |b| + |c| times an entry
 * before they cancel (about 10 for the quintics). The later steps carry a rounding made before
 * step k + 1 on, along the singular direction of x_j = σ/‖A‖_F's trajectory, by
 * g_j = max(|p_j'(x_j)|, |p_j(x_j)/x_j|) per step (the slope along the direction, or the scale
 * the step gives a direction off the iterate's row space), so step k's roundings arrive
 * multiplied by Π_{j>k} g_j (up to a^steps ≈ 490 near σ = 0, about 1 near the fixed point).
 * Independent from step to step, they add as a walk: the deviation is
 * ε·√(n + 2m + 4)·max_k(|a|+|b|+|c|)·κ, κ = max over the singular values of
 * √(Σ_{k=−1}^{steps−1} (Π_{j>k} g_j)²) (k = −1: the normalized input's rounding), and c = 6.
 * backward: the adjoint repeats each rounding transposed, with the same gains (2× the
 * operations). *input_gain (may be NULL) gets max over the singular values of Π_j g_j: the gain
 * on a change of the normalized input, so a change δA moves NS(A) by at most
 * input_gain·‖δA‖_F/‖A‖_F in Frobenius norm. */
static double ns_rtol_gain(const double *A, int r, int c, const double (*abc)[3], int steps,
                           int backward, double *input_gain) {
    const int rows = r ? r : 1, m = rows < c ? rows : c, n = rows < c ? c : rows;
    double *sv = calloc((size_t)m, sizeof(double)), fro = 0.0, kappa = 0.0, cs = 0.0, gain = 0.0;
    nsb_sing(sv, A, rows, c);
    for (int i = 0; i < m; i++) fro += sv[i] * sv[i];
    fro = sqrt(fro) + 1e-7;
    for (int k = 0; k < steps; k++)
        cs = fmax(cs, fabs(abc[k][0]) + fabs(abc[k][1]) + fabs(abc[k][2]));
    for (int i = 0; i < m; i++) {
        double g[101], x = sv[i] / fro;
        ck_assert(steps <= 100);
        for (int k = 0; k < steps; k++) {
            const double a = abc[k][0], b = abc[k][1], cc = abc[k][2];
            const double slope = a + 3 * b * x * x + 5 * cc * pow(x, 4);
            const double ratio = a + b * x * x + cc * pow(x, 4);
            g[k] = fmax(fabs(slope), fabs(ratio));
            x = x * ratio;
        }
        double sum = 0.0, prod = 1.0; /* Σ_{k=−1}^{steps−1} (Π_{j>k} g_j)², from k = steps − 1 */
        for (int k = steps - 1; k >= -1; k--) {
            sum += prod * prod;
            if (k >= 0) prod *= g[k];
        }
        kappa = fmax(kappa, sqrt(sum));
        gain = fmax(gain, prod);
    }
    if (input_gain) *input_gain = gain;
    free(sv);
    return 6 * 0x1p-24 * sqrt((backward ? 2.0 : 1.0) * (n + 2 * m + 4)) * cs * kappa;
}
static double ns_rtol(const double *A, int r, int c, const double (*abc)[3], int steps,
                      int backward) {
    return ns_rtol_gain(A, r, c, abc, steps, backward, NULL);
}

#endif
