/* Rotary position embedding (RoPE), docs/math.md §4 "RoPE": q_t and k_t are rotated by the position-t
 * rotation before the inner loop, so that (q_t R_t)(k_s R_s)ᵀ = q_t R_{t−s} k_sᵀ depends on the
 * positions only through t − s.
 *
 * Convention: INTERLEAVED pairs (the RoFormer paper's): dimensions (2i, 2i+1), i = 0 … d/2 − 1,
 * of the row at position p turn by the angle p·ω_i with ω_i = base^{−2i/d}:
 *     y_{2i}   = x_{2i} cos(p ω_i) − x_{2i+1} sin(p ω_i)
 *     y_{2i+1} = x_{2i} sin(p ω_i) + x_{2i+1} cos(p ω_i)
 * i.e. y = x R_p (row vectors) with R_p block diagonal, blocks [[cos, sin], [−sin, cos]], and
 * R_t R_sᵀ = R_{t−s}. (Checkpoints from libraries that use the half-split convention, pairs
 * (i, i + d/2), need their q/k projection columns permuted.) With an odd d the last dimension is
 * not rotated. Angles are formed and their sines taken in float64 (positions in the thousands
 * times ω_0 = 1 would lose digits in float32). */
#ifndef TTT_ROPE_H
#define TTT_ROPE_H

/* Default base (RoFormer, Llama 1/2). */
#define TTT_ROPE_BASE 10000.0f

/* Row t of x (position pos0 + t) rotated into row t of out; out may equal x (in place).
 * pos0 lets a sequence processed in pieces continue its positions (and may be negative). */
void ttt_rope_apply(float *out,     /* (T, d) */
                    const float *x, /* (T, d), may be out */
                    int T, int d, int pos0, float base);

/* The backward of ttt_rope_apply: row t of dy turned back by the rotation of position pos0 + t
 * (dy R_pᵀ = dy R_{−p}) and added into row t of out (a gradient buffer, not dy); any d. */
void ttt_rope_inverse_add(float *out,      /* (T, d) += */
                          const float *dy, /* (T, d) */
                          int T, int d, int pos0, float base);

#include "ops.h"

/* RoPE as a recorded op (docs/math.md §4 "RoPE", convention of rope.h): row t of x (T, d) rotated by
 * the angle of position pos0 + t (y = x R_p). Its backward is the inverse rotation,
 * dx = dy R_pᵀ = dy R_{−p}. Implemented in rope_op.c. */
ttt_tensor *ttt_rope(ttt_ctx *ctx, const ttt_tensor *x, int pos0, float base);

#endif
