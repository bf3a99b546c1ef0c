/* The generalized delta rule with a diagonal-plus-low-rank transition (DPLR; RWKV-7's rule),
 * docs/math.md "RWKV-7": in ttt's row convention (S (d_k, d_v), o_t = q_t S_t),
 *     u_t = a_t S_{t−1}                                    (d_v: what the state holds along a_t)
 *     S_t = Diag(w_t) S_{t−1} + b_tᵀ u_t + k_tᵀ v_t
 *         = (Diag(w_t) + b_tᵀ a_t) S_{t−1} + k_tᵀ v_t,     o_t = q_t S_t,
 * w_t = exp(log w_t) ∈ [0, 1]^{d_k} a retention per key dimension (−inf: a hard reset of that
 * row). RWKV-7 takes a_t = −κ̂_t and b_t = κ̂_t ⊙ α_t (the unit removal key and the in-context
 * learning rate). The recurrent kernel, its backward, and a differentiable op for the tape. */
#ifndef TTT_DPLR_H
#define TTT_DPLR_H

#include <stddef.h>

#include "ops.h"
#include "kernels.h"

/* The forward, token by token, on rows strided as ld says: q, k, a, b rows ld->k apart except q
 * (ld->q), v ld->v, o ld->o, log_w ld->la (≥ d_k); log_w NULL means w = 1 (identity plus low
 * rank). S (d_k, d_v) is the initial state in and the final state out. TTT_ERR_NOMEM (nothing
 * written) when the row buffers of d_k or d_v beyond 256 cannot be allocated (kernels.h). */
ttt_status ttt_dplr_recurrent_ld(float *o, float *S, const float *q, const float *k, const float *v,
                           const float *a, const float *b, const float *log_w, int T, int d_k,
                           int d_v, const ttt_form_ld *ld);

/* The chunkwise form (dplr_chunk.c, docs/math.md "RWKV-7"): the same function in chunks of C
 * tokens, each from its start state by one triangular solve for the chunk's u_t and matrix
 * products (the WY-like representation of a chunk's transitions), with the strides of
 * ttt_dplr_recurrent_ld. Returns the same values as the recurrence within float32 rounding. Its
 * workspace grows as C² (C clamped to T): TTT_ERR_NOMEM when it cannot be had (nothing
 * written then), so that a caller's chunk size never aborts the process. */
ttt_status ttt_dplr_chunkwise_ld(float *o, float *S, const float *q, const float *k,
                                 const float *v, const float *a, const float *b,
                                 const float *log_w, int T, int d_k, int d_v, int C,
                                 const ttt_form_ld *ld, ttt_error *err);

/* Floats of workspace ttt_dplr_recurrent_backward takes for chunks of C tokens. */
size_t ttt_dplr_recurrent_backward_ws(int C, int d_k, int d_v);

/* The backward of T contiguous tokens (rows d_k, d_v wide): given dO (T, d_v) and dS (d_k, d_v)
 * = ∂L/∂S_T (overwritten: ∂L/∂S_0 on return), ADDS the gradients into gq, gk, gv, ga, gb,
 * glw (any may be NULL). S0s holds the state at the start of each chunk of C tokens
 * (ceil(T / C) states, as the forward left them); ws has ttt_dplr_recurrent_backward_ws floats,
 * 8-byte aligned (it starts with doubles; malloc's and the arena's are). A reset (w = 0) gives
 * its log w the gradient 0. */
void ttt_dplr_recurrent_backward(float *gq, float *gk, float *gv, float *ga, float *gb,
                                 float *glw, float *dS, const float *dO, const float *q,
                                 const float *k, const float *v, const float *a, const float *b,
                                 const float *log_w, const float *S0s, int T, int d_k, int d_v,
                                 int C, float *ws);

/* Doubles of workspace ttt_dplr_chunkwise_backward takes for chunks of C tokens. */
size_t ttt_dplr_chunkwise_backward_ws(int C, int d_k, int d_v);

/* The chunkwise backward (dplr_chunk.c, docs/math.md "RWKV-7", "The chunkwise backward"): the
 * same contract as ttt_dplr_recurrent_backward (T contiguous tokens; dS ∂L/∂S_T in, ∂L/∂S_0
 * out; gradients ADDED, any may be NULL; S0s the state at each chunk's start), computed chunk by
 * chunk in float64 from the chunk's pair matrices instead of token by token; ws has
 * ttt_dplr_chunkwise_backward_ws doubles. A reset's log w (below TTT_GATE_RESET) gets 0. */
void ttt_dplr_chunkwise_backward(float *gq, float *gk, float *gv, float *ga, float *gb,
                                 float *glw, float *dS, const float *dO, const float *q,
                                 const float *k, const float *v, const float *a, const float *b,
                                 const float *log_w, const float *S0s, int T, int d_k, int d_v,
                                 int C, double *ws);

/* What the two ops below share (dplr.c): the inputs checked, the output P = [O | S] with S
 * starting at S0, the chunk C, and where the chunk-start states are saved when a tape records
 * (saved, NULL otherwise); ttt_dplr_op_end records the op (the backward of the chunkwise form
 * when `chunkwise`, else the recurrence's) and returns O, *S_out the final state. */
typedef struct ttt_dplr_op {
    const ttt_tensor *in[7]; /* q, k, v, a, b, log_w, S0 */
    ttt_tensor *P;
    float *o, *S;            /* (T, d_v) and (d_k, d_v) inside P */
    float *saved;            /* (nch, d_k, d_v) or NULL */
    int T, d_k, d_v, C, nch, rec;
} ttt_dplr_op;
ttt_dplr_op ttt_dplr_op_begin(ttt_ctx *ctx, const ttt_tensor *q, const ttt_tensor *k,
                              const ttt_tensor *v, const ttt_tensor *a, const ttt_tensor *b,
                              const ttt_tensor *log_w, const ttt_tensor *S0, int chunk);
ttt_tensor *ttt_dplr_op_end(ttt_ctx *ctx, const ttt_dplr_op *op, int chunkwise,
                            ttt_tensor **S_out);

/* Under a tape: q, k, a, b (T, d_k), v (T, d_v), log_w (T, d_k) or NULL, S0 (d_k·d_v
 * elements); returns O (T, d_v) and the final state *S_out (d_k, d_v), with gradients to every
 * input that requires one. The forward saves the state every `chunk` tokens; the backward
 * recomputes one chunk's states at a time from it. */
ttt_tensor *ttt_dplr_recurrent_op(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                  const ttt_tensor *k, const ttt_tensor *v, const ttt_tensor *a,
                                  const ttt_tensor *b, const ttt_tensor *log_w,
                                  const ttt_tensor *S0, int chunk);

/* The same op in the chunkwise form: the forward of ttt_dplr_chunkwise_ld in chunks of `chunk`
 * tokens (saving each chunk's start state) and ttt_dplr_chunkwise_backward; its scratch comes
 * from ctx's arena (asserts on exhaustion, as the tape's own allocations). */
ttt_tensor *ttt_dplr_chunkwise_op(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                  const ttt_tensor *k, const ttt_tensor *v, const ttt_tensor *a,
                                  const ttt_tensor *b, const ttt_tensor *log_w,
                                  const ttt_tensor *S0, int chunk);

#endif
