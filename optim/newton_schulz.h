/* Newton–Schulz orthogonalization (docs/math.md §3, "muon"), shared by the muon and large_batch
 * optimizers.
 *
 *     X = A / (‖A‖_F + 1e-7);  transpose so that rows ≤ cols;
 *     `steps` times:  P = X Xᵀ,  X ← a X + (b P + c P²) X;  transpose back.
 *
 * In exact arithmetic every step maps each singular value σ of X through the odd polynomial
 * σ ← aσ + bσ³ + cσ⁵ and keeps the singular vectors, so NS(A) = U p(Σ/(‖A‖_F + 1e-7)) Vᵀ for
 * A = U Σ Vᵀ, with p the composition of the per-step polynomials. The coefficient sets:
 *   muon  — Keller Jordan's quintic (3.4445, −4.7750, 2.0315), the same at every step. It does
 *           not converge to U Vᵀ: for inputs σ/‖A‖_F in [0.002, 1] five steps land in about
 *           [0.68, 1.20] (p(1) ≈ 0.69644; tests/test_optim.c measures the band).
 *   lact  — LaCT's five per-step tuples. Step i (from 0) uses tuple min(i, 4): with more than
 *           five steps the last tuple is repeated (it is the most conservative one, p(1) ≈ 0.985
 *           for one application), never cycled back to the aggressive first tuple.
 *   cubic — the classical (1.5, −0.5, 0): converges to the polar factor U Vᵀ (quadratically once
 *           σ is near 1; from a small σ it first grows by 1.5× per step, so it needs about
 *           log(1/σ_min)/log(1.5) + 5 steps).
 *
 * Weights that are not matrices: a 1-D weight of n elements is treated as a (1, n) row, for which
 * NS(g) = p(‖g‖/(‖g‖ + 1e-7)) · g/‖g‖ — a normalized-gradient step (the direction of g with a
 * fixed length). A weight of more than two dimensions is treated as (shape[0], rest). */
#ifndef TTT_NEWTON_SCHULZ_H
#define TTT_NEWTON_SCHULZ_H

#include "ops.h"
#include "optim.h"

typedef enum ttt_ns_set {
    TTT_NS_MUON,  /* (3.4445, −4.7750, 2.0315) at every step */
    TTT_NS_LACT,  /* LaCT's five tuples, the last one repeated beyond step 5 */
    TTT_NS_CUBIC, /* (1.5, −0.5, 0) */
} ttt_ns_set;

/* The parsed NS options of an optimizer. */
typedef struct ttt_ns_cfg {
    ttt_ns_set set;
    int steps;
} ttt_ns_cfg;

/* The two YAML options (for the option tables of muon and large_batch). */
#define TTT_NS_OPTIONS                                                                         \
    {"coefficients", TTT_OPT_CHOICE, "muon", TTT_NO_RANGE, "muon|lact|cubic",                \
     "Newton-Schulz coefficients: muon = fixed quintic (singular values land in ~[0.68, 1.2]), " \
     "lact = LaCT's 5 per-step quintics (last repeated), cubic = (1.5, -0.5, 0) -> exact U V^T"}, \
    {"steps", TTT_OPT_INT, "5", 1, 100, NULL,                                                  \
     "Newton-Schulz iterations (cubic needs ~15-30 to converge to U V^T)"}

/* Read the TTT_NS_OPTIONS of a validated optimizer mapping. */
void ttt_ns_parse(ttt_ns_cfg *out, const ttt_optim_args *opts);

/* The (a, b, c) of step `step` (from 0) of a set. */
void ttt_ns_coefficients(ttt_ns_set set, int step, double abc[3]);

/* NS(A) in float32 (a new tensor of A's shape). Intermediates are released from ctx->arena
 * before returning. Under a tape, with A requiring grad, it is ONE recorded op with a
 * hand-written backward (the exact reverse of the iteration above, derived in newton_schulz.c):
 * it saves the `steps` iterates (steps·rows·cols floats) instead of keeping the composed form's
 * 3 entries per step plus 3–5 for the normalization and transposes, with their tensors. Its
 * forward runs the composed form's own ops, so the two give the same floats
 * (tests/test_optim.c). */
ttt_tensor *ttt_newton_schulz(ttt_ctx *ctx, const ttt_tensor *A, ttt_ns_set set, int steps);

/* The same function built from recorded small ops (norm, div, matmul, gemm, transpose), each
 * with its own backward: the reference twin of the fused op, which the tests hold it to. Under a
 * tape every iterate stays on the tape (nothing is released). */
ttt_tensor *ttt_newton_schulz_composed(ttt_ctx *ctx, const ttt_tensor *A, ttt_ns_set set,
                                       int steps);

/* rows × cols of the matrix a weight is treated as (see above). */
void ttt_ns_matrix_dims(const ttt_tensor *W, int *rows, int *cols);

#endif
