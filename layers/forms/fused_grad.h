/* Fused differentiable closed forms: custom ops (autograd.h "Custom ops") whose forward is the
 * fast chunkwise kernel of kernels.h and whose backward is written by hand (layers/forms/fused_grad.c).
 * They must agree with the composed forms of composed.h (tests/test_form_grads.c).
 *
 * Memory: the forward saves only the state at the start of every chunk, ⌈T/C⌉·d_k·d_v floats
 * (no per-token state); the backward walks the chunks from last to first, recomputes each
 * chunk's intra-chunk quantities from its saved start state and carries dL/dS backward.
 *
 * Both ops take q, k (T, d_k), v (T, d_v), beta (T) or NULL (= 1), log_alpha as documented,
 * the initial state S0 (d_k·d_v elements), chunk size C ≥ 1; return O (T, d_v) and the final
 * state *S_out (d_k, d_v). Gradients reach q, k, v, beta, log_alpha and S0 (whichever require
 * grad). O and *S_out are two parts of one recorded result, so a loss may use either or both. */
#ifndef TTT_FUSED_GRAD_H
#define TTT_FUSED_GRAD_H

#include "autograd.h"
#include "ops.h"

/* Chunkwise gated linear attention (docs/math.md §5.2): forward = ttt_linear_attention_chunkwise;
 * log_alpha (T) scalar or (T, d_k) vector decay or NULL. */
ttt_tensor *ttt_la_chunkwise_fused(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                   const ttt_tensor *k, const ttt_tensor *v,
                                   const ttt_tensor *beta, const ttt_tensor *log_alpha,
                                   const ttt_tensor *S0, int chunk);

/* Chunkwise gated delta rule, coupled scalar decay (docs/math.md §5.3): forward =
 * ttt_delta_rule_chunkwise; log_alpha (T) or NULL. */
ttt_tensor *ttt_delta_chunkwise_fused(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                      const ttt_tensor *k, const ttt_tensor *v,
                                      const ttt_tensor *beta, const ttt_tensor *log_alpha,
                                      const ttt_tensor *S0, int chunk);

/* ---- shared by the fused ops (fused_grad.c, dual_grad.c) ---- */

/* C (m, n) = alpha·op(A)·op(B) + beta·C, row-major with explicit leading dimensions; nothing
 * when a dimension is 0. */
void ttt_fused_gemm(int ta, int tb, int m, int n, int kd, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc);
/* Zeroed scratch from ctx's arena (asserts on exhaustion, like the tape's own allocations). */
void *ttt_fused_scratch(ttt_ctx *ctx, size_t bytes);
/* A view of the packed result P at element off with the given shape, recorded so that its
 * gradient lands in P's: a fused op returns several outputs as parts of one tape entry. */
ttt_tensor *ttt_fused_part(ttt_ctx *ctx, ttt_tensor *P, size_t off, int ndim, const int *shape,
                           const char *name);

/* The packed result P = [O (T, d_v); S (dkv = d_k·d_v)] of a fused op, S starting as S0 = in[5]
 * (in: q, k, v, beta, log_alpha, S0), and in *rec whether the op is recorded: a recording context
 * and an input that wants a gradient. */
ttt_tensor *ttt_fused_result(ttt_ctx *ctx, const ttt_tensor *const in[6], int T, int d_v,
                             size_t dkv, int *rec);
/* What every hand-written backward of a (q, k, v, beta, log_alpha, S0) op starts from: the six
 * inputs (the tape entry's in[0..5]) and their gradient buffers (NULL where none is wanted), taken
 * in that order and before any scratch mark (autograd.h). */
typedef struct {
    const ttt_tensor *q, *k, *v, *beta, *la, *S0;
    float *gq, *gk, *gv, *gb, *gla, *gS0;
} ttt_fused_io;
ttt_fused_io ttt_fused_io_get(ttt_ctx *ctx, const ttt_tape_entry *e);
/* How such a backward ends: the adjoint dS (n floats) carried back past the first chunk is ∂S_0
 * (added to gS0 when S0 wants a gradient), and the scratch taken since `mark` is released. */
void ttt_fused_io_end(ttt_ctx *ctx, const ttt_fused_io *io, const float *dS, size_t n,
                      ttt_arena_mark mark);

/* d(log α) from dG (n, gd), the gradient of the cumulative gates G = cumsum(ttt_gate_floor(log α))
 * inside a chunk: the reverse cumulative sum, added to gla (n, gd); a reset gate (log α below
 * TTT_GATE_RESET, kernels.h) gets 0. la: the chunk's gates (n, gd). */
void ttt_fused_add_reverse_cumsum(float *gla, const double *dG, const float *la, int n, int gd);

#endif
