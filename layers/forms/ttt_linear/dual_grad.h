/* TTT-Linear mini-batch dual form (docs/math.md §5.4) as one fused differentiable op: the forward is
 * the fast kernel of ttt_dual.h run block by block, the backward is written by hand
 * (layers/forms/ttt_linear/dual_grad.c). It must agree with ttt_ttt_linear_dual_composed (composed.h), which is the
 * same function differentiated through recorded ops (tests/test_form_grads.c).
 *
 * Memory: the forward saves only the weights (W, b) at the start of every block of mini_batch
 * tokens, ⌈T/b⌉·(d² + d) floats; the backward walks the blocks from last to first, recomputes
 * each block's intermediates from its saved start weights and carries dL/dW, dL/db backward. */
#ifndef TTT_DUAL_GRAD_H
#define TTT_DUAL_GRAD_H

#include "ops.h"

/* Same contract as ttt_ttt_linear_dual_composed: q, k, v (T, d); lr (T) per-token learning rates
 * (θ·η) or NULL (= 1); W0 (d·d elements), b0 (d elements); mini_batch b ≥ 1. Returns O (T, d);
 * the final weights through *W_out (d, d) and *b_out (d). O, *W_out and *b_out are parts of one
 * recorded result, so a loss may use any of them. Gradients reach q, k, v, lr, W0 and b0
 * (whichever require grad). */
ttt_tensor *ttt_ttt_linear_dual_fused(ttt_ctx *ctx, ttt_tensor **W_out, /* (d, d) */
                                      ttt_tensor **b_out,                /* (d) */
                                      const ttt_tensor *q, const ttt_tensor *k,
                                      const ttt_tensor *v, const ttt_tensor *lr,
                                      const ttt_tensor *W0, const ttt_tensor *b0,
                                      int mini_batch);

#endif
