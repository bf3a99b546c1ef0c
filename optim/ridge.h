/* Dense solves in double for the ridge rules (optim/mesa.c, layers/forms/mesa_net/): the
 * exact minimizer W = (H + λI)⁻¹ G of docs/math.md §3.11. */
#ifndef TTT_RIDGE_H
#define TTT_RIDGE_H

/* LU factorization with partial pivoting of the n × n row-major A, in place; piv (n) the row
 * swaps. Returns 0 when a pivot is exactly 0 (A singular), 1 otherwise. H + λI with H ⪰ 0 and
 * λ > 0 is never singular; the pivoting keeps any nonsingular state (a caller's H) solvable. */
int ttt_ridge_lu(double *A, int *piv, int n);

/* X ← A⁻¹ X for the factors of ttt_ridge_lu; X (n, m) row-major. */
void ttt_ridge_lu_solve(const double *LU, const int *piv, int n, double *X, int m);

/* The same for one right-hand side stored in a column of stride 1 (x (n)). */
void ttt_ridge_lu_solve1(const double *LU, const int *piv, int n, double *x);

#endif
