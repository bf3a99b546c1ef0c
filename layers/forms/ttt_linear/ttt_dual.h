/* TTT-Linear: the mini-batch dual form (docs/math.md §5.4) and its primal twin.
 *
 * One head, d = d_k = d_v. Fast-weight model f(W, b; x) = x + LN(x W + b) with a layer norm of
 * fixed γ = 1, β = 0 (biased variance, eps TTT_LINEAR_DUAL_LN_EPS, the value the ttt_linear model
 * uses), inner loss ½‖f(k) − v‖² = ½‖LN(k W + b) − (v − k)‖² (docs/math.md §2, TTT reconstruction).
 *
 * The sequence is cut into blocks of b = mini_batch tokens (the last may be shorter). In a block
 * starting at (W_0, b_0), every gradient g_j = ∂ℓ_j/∂z_j is taken at (W_0, b_0), and token i
 * (position in the block, from 0) reads with
 *     W_i = W_0 − Σ_{j ≤ i} E_ij k_jᵀ g_j,   b_i = b_0 − Σ_{j ≤ i} E_ij g_j,
 *     E_ij = τ_i lr_j [i ≥ j],   τ_i = 1/(i + 1),
 *     o_i = q_i + LN(q_i W_i + b_i);
 * the block ends with the last token's weights (row n−1 of E, n = block length).
 * This is the generic driver's (model ttt_linear, loss squared, sgd lr = 1, position_scale
 * inverse, η = lr) rule.
 *
 * W and bias are the state: initial on entry, final on return, so a sequence can be processed
 * in pieces. Each call starts a new block: splitting a sequence at a multiple of b gives the
 * result of one pass. Scratch memory comes from ctx->arena and is released before returning. */
#ifndef TTT_DUAL_H
#define TTT_DUAL_H

#include "tensor.h"

/* Must equal the eps of the ttt_linear model's layer norm (layers/models/ttt_linear_model.c). */
#define TTT_LINEAR_DUAL_LN_EPS 1e-6f

/* Dual form (docs/math.md §5.4): per block, with Z = K W_0 + b_0 and G = ∂ℓ/∂Z,
 *     Z̄ = Q W_0 − (E ⊙ tril(Q Kᵀ)) G + b_0 − E G,   O = Q + LN(Z̄),
 *     W ← W_0 − (E_{n−1,·}ᵀ ⊙ K)ᵀ G,   b ← b_0 − E_{n−1,·} G.
 * Matrix products only (sgemm / strmm on b×d and b×b blocks); no per-token weights. */
void ttt_ttt_linear_dual(ttt_ctx *ctx, float *o, /* (T, d) */
                         float *W,               /* (d, d) in/out */
                         float *bias,            /* (d) in/out */
                         const float *q,         /* (T, d) */
                         const float *k,         /* (T, d) */
                         const float *v,         /* (T, d) */
                         const float *lr,        /* (T) per-token learning rates, or NULL (= 1) */
                         int T, int d, int mini_batch);

/* Primal form: the same rule with the per-token weights W_i materialized (a d×d matrix per
 * token, O(b d²) per token). The reference the dual form must reproduce. */
void ttt_ttt_linear_primal(ttt_ctx *ctx, float *o, /* (T, d) */
                           float *W,               /* (d, d) in/out */
                           float *bias,            /* (d) in/out */
                           const float *q,         /* (T, d) */
                           const float *k,         /* (T, d) */
                           const float *v,         /* (T, d) */
                           const float *lr,        /* (T) or NULL (= 1) */
                           int T, int d, int mini_batch);

#endif
