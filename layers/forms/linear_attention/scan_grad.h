/* The scan form of gated linear attention as a recorded op (scan_grad.c, docs/math.md §5.5). */
#ifndef TTT_SCAN_GRAD_H
#define TTT_SCAN_GRAD_H

#include "tensor.h"

/* Y (T + d_k, d_v) = [O; S_T]: the outputs o_t = q_t S_t and the final state of
 * S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t from S_0, computed by ttt_linear_attention_scan with
 * `blocks` blocks; gradients (hand-written, a backward two-level scan) to q, k, v (T, d_k|d_v),
 * β (T), log α ((T) or, with alpha_vec, (T, d_k); may be NULL) and S_0 (d_k, d_v). */
ttt_tensor *ttt_la_scan_op(ttt_ctx *ctx, const ttt_tensor *q, const ttt_tensor *k,
                           const ttt_tensor *v, const ttt_tensor *beta,
                           const ttt_tensor *log_alpha, int alpha_vec, const ttt_tensor *S0,
                           int blocks);

#endif
