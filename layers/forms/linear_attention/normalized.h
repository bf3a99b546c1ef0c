/* Normalized linear attention (the early "imitation of softmax" era) and TransNormer's
 * post-normalization, docs/math.md §4 "Normalized linear attention", §6 item 9.
 *
 * Normalized linear attention, with the positive feature map φ(x) = elu(x) + 1 applied
 * elementwise to the queries AND the keys (not to the values), inside these functions (callers
 * pass raw q, k):
 *     S_t = S_{t−1} + φ(k_t)ᵀ v_t        (d_k, d_v)   numerator state
 *     z_t = z_{t−1} + φ(k_t)             (d_k)        denominator state (Σ_{s≤t} φ(k_s)ᵀ)
 *     o_t = (φ(q_t) S_t) / (φ(q_t) · z_t + eps)
 * i.e. the ratio of two linear-attention states over the same (φ(q), φ(k)): values v and values 1
 * (docs/math.md §6.9). φ > 0, so the denominator is positive once a key has been written; eps (default
 * TTT_NLA_EPS = 1e-6, added to the denominator, not clamped) only guards an empty state or
 * denominators that underflow, and biases ordinary outputs by a relative ~eps/(φ(q)·z), i.e.
 * ≤ 1e-6 for denominators ≥ 1. S and z are the state: initial on entry, final on return
 * (zeros for an empty memory), so a sequence can be processed in pieces.
 *
 * Post-norm (TransNormer): o_t = RMSNorm(q_t S_t) = x_t / sqrt(mean_j x_tj² + eps) with no
 * learnable gain, eps default TTT_POSTNORM_EPS = 1e-6 inside the square root; a helper applied
 * to the output of any form (e.g. ttt_linear_attention_chunkwise). */
#ifndef TTT_NORMALIZED_H
#define TTT_NORMALIZED_H

#include "tensor.h"

#define TTT_NLA_EPS 1e-6f
#define TTT_POSTNORM_EPS 1e-6f

/* Token-by-token definition (no allocation; also the decoding path). */
void ttt_normalized_la_recurrent(float *o,       /* (T, d_v) */
                                 float *S,       /* (d_k, d_v) in/out */
                                 float *z,       /* (d_k) in/out */
                                 const float *q, /* (T, d_k) raw queries (φ applied here) */
                                 const float *k, /* (T, d_k) raw keys (φ applied here) */
                                 const float *v, /* (T, d_v) */
                                 int T, int d_k, int d_v, float eps);

/* Chunkwise (docs/math.md §5.2) through ttt_linear_attention_chunkwise on the augmented values
 * [v | 1] with state [S | z] (d_k, d_v + 1): numerator and denominator in the same sgemms.
 * chunk ≥ T is the parallel form (§5.1). Scratch from ctx->arena, O(T (d_k + d_v)). */
void ttt_normalized_la_chunkwise(ttt_ctx *ctx, float *o, float *S, float *z, const float *q,
                                 const float *k, const float *v, int T, int d_k, int d_v,
                                 int chunk, float eps);

/* RMS post-normalization of each row; out may equal x. */
void ttt_rms_postnorm(float *out,     /* (T, d) */
                      const float *x, /* (T, d) */
                      int T, int d, float eps);

#endif
