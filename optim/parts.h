/* Reusable pieces of inner optimizers (docs/optimizers.md "Parts"; docs/math.md §3).
 *
 * An optimizer's step is a short composition of these: muon is momentum → orthogonalize →
 * update, large_batch is momentum → (orthogonalize) → update → renormalize, momentum is
 * momentum → update. Each part is built from recorded ops, so a composed step is differentiable
 * on the tape like any op, and no part keeps hidden state: what must survive a step (a momentum
 * buffer, target norms) is a state tensor the optimizer declares (optim.h n_state /
 * state_shape) and passes in and out. */
#ifndef TTT_OPTIM_PARTS_H
#define TTT_OPTIM_PARTS_H

#include "newton_schulz.h"
#include "optim.h"

/* ---- momentum ---- */

/* The momentum accumulator. With the buffer M (any shape, G's) and the gradient G:
 *     M_new = μ M + g G                      (*M_out)
 *     d     = M_new                          (heavy ball; returned)
 *     d     = μ M_new + g G                  (nesterov: the look-ahead, Sutskever et al.)
 * g is the gradient's coefficient: −θ keeps M in weight units (momentum.c, Titans: then
 * W ← αW + d), 1 keeps it a sum of gradients that the caller scales later (muon, large_batch).
 * d is M_new itself in the heavy-ball case (no copy: ops never modify their inputs). */
ttt_tensor *ttt_part_momentum(ttt_ctx *ctx, ttt_tensor **M_out, const ttt_tensor *M,
                              const ttt_tensor *G, float mu, float g, int nesterov);

/* ---- orthogonalization ---- */

/* NS(A) with the parsed coefficient set and step count (TTT_NS_OPTIONS in an option table,
 * ttt_ns_parse in parse): the fused Newton–Schulz op of newton_schulz.h, which says what each
 * coefficient set converges to and how 1-D weights are treated. A new tensor of A's shape. */
ttt_tensor *ttt_part_orthogonalize(ttt_ctx *ctx, const ttt_tensor *A, const ttt_ns_cfg *ns);

/* ---- the weight update ---- */

/* keep · α W + scale · U, with α the block's decay (scalar or per row, ttt_optim_apply_decay):
 * the last line of most rules. keep = 1 − λ is a decoupled weight decay λ (muon), scale = −θ a
 * descent step along U, scale = 1 adds a step already in weight units (momentum.c). */
ttt_tensor *ttt_part_update(ttt_ctx *ctx, const ttt_tensor *W, const ttt_optim_block *blk,
                            float keep, float scale, const ttt_tensor *U);

/* ---- renormalization (LaCT) ---- */

/* Which norms renormalization keeps. Our weights are (fan_in, fan_out) (models compute x·W,
 * docs/math.md §0), so an output channel is a COLUMN. A 1-D weight is one vector, one norm; a
 * weight of more than two dimensions is viewed as (shape[0], rest). */
typedef enum ttt_renorm_axis {
    TTT_RENORM_COLUMNS, /* one norm per column (output channel; LaCT's rule) */
    TTT_RENORM_ROWS,    /* one norm per row (input dimension) */
} ttt_renorm_axis;

/* The shape of the target-norm state for a weight of shape w_shape: (channels). For an
 * optimizer's state_shape slot. */
int ttt_part_renorm_shape(int *shape, ttt_renorm_axis axis, const int *w_shape, int w_ndim);

/* The target norms ‖W‖ per channel into N (channels, the shape above), computed in double from
 * W's values (for init_state). */
void ttt_part_renorm_init(ttt_tensor *N, ttt_renorm_axis axis, const ttt_tensor *W);

/* The same norms through recorded ops (for init_state_ops: learned initial weights, the outer
 * loop differentiates through the target). A new (channels) tensor. */
ttt_tensor *ttt_part_renorm_init_ops(ttt_ctx *ctx, ttt_renorm_axis axis, const ttt_tensor *W);

/* W with every channel rescaled to its target norm: W ⊙ N / (‖W‖ + 1e-5) per channel, through
 * ops (gradients reach W and, when N is a graph node, the initial weights behind it). A channel
 * whose target is 0 has no norm to return to and is left as it is (factor 1). A new tensor of
 * W's shape. */
ttt_tensor *ttt_part_renormalize(ttt_ctx *ctx, const ttt_tensor *W, const ttt_tensor *N,
                                 ttt_renorm_axis axis);

#endif
