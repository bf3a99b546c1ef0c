/* KDA's recurrent form under a tape (docs/math.md §4.5): a custom op (autograd.h "Custom ops")
 * whose forward is the recurrent kernel with a gate per key dimension
 * (ttt_delta_rule_recurrent_key_ld) and whose backward is written by hand (kda_grad.c). */
#ifndef TTT_KDA_GRAD_H
#define TTT_KDA_GRAD_H

#include "ops.h"

/* q, k (T, d_k), v (T, d_v), beta (T) or NULL (= 1), log_alpha (T, d_k), S0 (d_k·d_v elements);
 * returns O (T, d_v) and the final state *S_out (d_k, d_v), gradients to every input that
 * requires one. Memory: the forward saves the state at the start of every `chunk` tokens; the
 * backward recomputes the states of one chunk at a time from it. */
ttt_tensor *ttt_kda_recurrent_fused(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                    const ttt_tensor *k, const ttt_tensor *v,
                                    const ttt_tensor *beta, const ttt_tensor *log_alpha,
                                    const ttt_tensor *S0, int chunk);

#endif
