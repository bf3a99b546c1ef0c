/* Quadratic baselines, docs/math.md §4 "Quadratic baselines": causal softmax attention and its
 * forget-gate form (FoX; ALiBi is the case of a constant gate):
 *     O = softmax(Q Kᵀ·scale + log Γ) V,     Γ_ij = Π_{r=j+1}^{i} α_r for j ≤ i, 0 (log −∞) else.
 * log Γ_ij = G_i − G_j with G = cumsum(log α) accumulated in float64 (never a product of gates,
 * docs/math.md §0). log_alpha = NULL gives plain causal attention (log Γ = log M).
 *
 * Computation: tiles of 64 query rows; per tile one sgemm for the scores against the keys up to
 * the tile's last row, an exact softmax over full rows (row max subtracted before exp, so any
 * score magnitude is safe; sums in float64), and one sgemm with V. Scratch is one (64, T) score
 * tile plus G — never T × T — taken from ctx->arena and released before returning.
 * Gates must be finite (log α = −∞ would give −∞ − (−∞)). */
#ifndef TTT_SOFTMAX_ATTENTION_H
#define TTT_SOFTMAX_ATTENTION_H

#include "tensor.h"

void ttt_softmax_attention(ttt_ctx *ctx,
                           float *o,               /* (T, d_v) */
                           const float *q,         /* (T, d_k) */
                           const float *k,         /* (T, d_k) */
                           const float *v,         /* (T, d_v) */
                           const float *log_alpha, /* (T) or NULL */
                           float scale, int T, int d_k, int d_v);

#endif
