/* Differentiable closed forms (outer-loop training through the inner loop, docs/math.md §5).
 *
 * Two ways to differentiate the same closed forms:
 *   (a) COMPOSED (this header, layers/forms/composed.c): each form written with recorded ops (ops.h),
 *       so the tape (autograd.h) differentiates it automatically. Slow but obviously right: it is
 *       the reference the fused ops are checked against.
 *   (b) FUSED (fused_grad.h, dual_grad.h): one custom op per form whose forward is the fast
 *       kernel of kernels.h / ttt_dual.h and whose backward is written by hand, recomputing each
 *       chunk from the states saved at chunk boundaries.
 * tests/test_form_grads.c ties (a) to finite differences of float64 recurrences, (b) to (a), and
 * both to the generic driver's gradients (the definition, docs/math.md §1).
 *
 * Conventions of every form below (one head, one sequence; shapes are checked with TTT_ASSERT):
 *   q, k (T, d_k); v (T, d_v); beta (T) the write strength β_t, or NULL (= 1); log_alpha the log
 *   retentions, (T) per token or (T, d_k) per key dimension where allowed, or NULL (no decay);
 *   the initial state S0 (and M0, W0, b0) are tensors that may require grad (a learned initial
 *   state is a parameter in some models). The result is the output O (T, d_v); the final state
 *   is returned through the out pointers as graph nodes. Nothing is modified in place. */
#ifndef TTT_COMPOSED_H
#define TTT_COMPOSED_H

#include "ops.h"
#include "form.h"

/* Gated linear attention, chunkwise (docs/math.md §5.2; the parallel form §5.1 is chunk = T):
 *     S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,  o_t = q_t S_t.
 * Per chunk (G = cumsum(log α) inside it, Γ_ij = exp(G_i − G_j) [i ≥ j]):
 *     O = (Q ⊙ e^G) S + ((Q Kᵀ) ⊙ Γ) diag(β) V,   S ← e^{G_n} S + (e^{G_n − G} ⊙ K)ᵀ diag(β) V.
 * Vector decay (log_alpha (T, d_k)) forms the scores as (Q ⊙ e^{G−G_0})(K ⊙ e^{G_0−G})ᵀ with
 * the chunk's first row as reference; a chunk whose decay span exceeds 60 nats (strong gates,
 * long chunks, the parallel form) is cut in halves until it fits (down to one token, where the
 * factors are 1), which evaluates the same function in more pieces. */
ttt_tensor *ttt_la_chunkwise_composed(ttt_ctx *ctx, ttt_tensor **S_out, /* (d_k, d_v) */
                                      const ttt_tensor *q, const ttt_tensor *k,
                                      const ttt_tensor *v, const ttt_tensor *beta,
                                      const ttt_tensor *log_alpha, const ttt_tensor *S0,
                                      int chunk);

/* Gated delta rule (coupled scalar decay), chunkwise via the UT transform (docs/math.md §5.3):
 *     S_t = α_t (I − β_t k_tᵀ k_t) S_{t−1} + β_t k_tᵀ v_t,  o_t = q_t S_t.
 * Per chunk: A = strictly_lower(diag(β) K Kᵀ ⊙ Γ) (unit diagonal implied), U = A⁻¹(β ⊙ V),
 * W = A⁻¹(β ⊙ e^G ⊙ K) (ttt_solve_lower), V' = U − W S,
 * O = (e^G ⊙ Q) S + ((Q Kᵀ) ⊙ Γ) V', S ← e^{G_n} S + (e^{G_n − G} ⊙ K)ᵀ V'.
 * log_alpha (T) or NULL. */
ttt_tensor *ttt_delta_chunkwise_composed(ttt_ctx *ctx, ttt_tensor **S_out, /* (d_k, d_v) */
                                         const ttt_tensor *q, const ttt_tensor *k,
                                         const ttt_tensor *v, const ttt_tensor *beta,
                                         const ttt_tensor *log_alpha, const ttt_tensor *S0,
                                         int chunk);

/* TTT-Linear mini-batch dual form (docs/math.md §5.4; the rule of ttt_dual.h), d = d_k = d_v:
 * per block with Z = K W_0 + b_0 and G = LN'(Z)ᵀ(LN(Z) − (V − K)) (ttt_layernorm_backward, whose
 * own backward supplies the second derivatives of LN),
 *     Z̄ = Q W_0 + b_0 − (E ⊙ (tril(Q Kᵀ) + 1)) G,   O = Q + LN(Z̄),   E_ij = lr_j/(i + 1) [i ≥ j]
 *     W ← W_0 − (E_{n−1,·}ᵀ ⊙ K)ᵀ G,   b ← b_0 − E_{n−1,·} G.
 * lr (T) per-token learning rates (θ·η) or NULL (= 1); W0 (d, d), b0 (d). */
ttt_tensor *ttt_ttt_linear_dual_composed(ttt_ctx *ctx, ttt_tensor **W_out, /* (d, d) */
                                         ttt_tensor **b_out,                /* (d) */
                                         const ttt_tensor *q, const ttt_tensor *k,
                                         const ttt_tensor *v, const ttt_tensor *lr,
                                         const ttt_tensor *W0, const ttt_tensor *b0,
                                         int mini_batch);

/* Titans' chunked momentum (layers/forms/titans/chunked.c, docs/math.md §3 "momentum"): inside a chunk from
 * (S_0, M_in), with e_i = β_i (k_i S_0 − v_i) (β = θ·η: the learning rate is folded in),
 *     M_i = μ M_{i−1} − k_iᵀ e_i,  S_i = α_i S_{i−1} + M_i,  o_i = q_i S_i,
 * as O = diag(A) Q S_0 + diag(c) Q M_in − ((Q Kᵀ) ⊙ D) E with A_i = e^{G_i},
 * D = Γ · Mu (Mu_js = μ^{j−s} [j ≥ s]) and c = Γ · (μ^{j+1})_j — products of the decay mask with
 * constant matrices, so gradients reach log_alpha. log_alpha (T) or NULL; μ a constant. */
ttt_tensor *ttt_titans_chunked_composed(ttt_ctx *ctx, ttt_tensor **S_out, /* (d_k, d_v) */
                                        ttt_tensor **M_out,               /* (d_k, d_v) */
                                        const ttt_tensor *q, const ttt_tensor *k,
                                        const ttt_tensor *v, const ttt_tensor *beta,
                                        const ttt_tensor *log_alpha, const ttt_tensor *S0,
                                        const ttt_tensor *M0, float mu, int chunk);


/* LaCT (docs/math.md §3 "large_batch", §4; layers/forms/lact/block.c): the whole layer for the LaCT
 * family (layers/forms/lact/form.c: swiglu model, dot/squared/recon loss, a block-step optimizer,
 * apply_then_update, steps per_block, lr > 0, no coupled decay), one chain of ops per block of
 * b = L->mini_batch tokens: O_blk = f(W; Q_blk) with the block-start weights, the block gradient
 * G = Σ_i η_i (Π_{i<j<n} α_j) ∇ℓ(f(W; k_i), v_i) in closed form (SwiGLU backward as matmuls),
 * then the optimizer's own step (momentum, Newton–Schulz, lr, decay, renormalization) with θ
 * (θ/n with position_scale: inverse) and the block decay Π α_j — what the generic driver does.
 * Same contract as ttt_layer_forward_diff: o (T, d_v) written (a graph node when recording);
 * st->W[0..2] and st->opt replaced by graph nodes when recording, updated in place otherwise.
 * eta (T) the per-token rates η_t (not θ·η: Newton–Schulz is not linear in G) or NULL (= 1);
 * log_alpha (T) or NULL. Errors (TTT_ERR_UNSUPPORTED, "use form: generic"): a tuple outside the
 * family, a vector decay, per-token gates with coupled placement. */
/* NULL when the LaCT form computes L for inputs in (NULL: for some inputs), else why not
 * (layers/forms/lact/form.c). */
const char *ttt_lact_available(const ttt_layer *L, const ttt_form_inputs *in);
ttt_status ttt_lact_composed(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                             ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                             const ttt_tensor *v, const ttt_tensor *eta,
                             const ttt_tensor *log_alpha, ttt_error *err);

/* ---- helpers of the registry entries (form.h) ---- */

/* β_t = θ·η_t (θ without η) as a plain (T) array in ctx: the no-tape kernels' write strengths. */
float *ttt_form_beta_array(ttt_ctx *ctx, const ttt_layer *L, const ttt_tensor *eta, int T);
/* a->beta, or a constant (T) tensor of θ when the call has no per-token rates. */
const ttt_tensor *ttt_form_beta_node(ttt_ctx *ctx, const ttt_layer *L, const ttt_form_args *a,
                                     int T);
/* log_alpha with every reset (log α < TTT_GATE_RESET, kernels.h; −inf included) raised to
 * TTT_GATE_RESET through a recorded clamp, whose gradient is 0 there: what forms built from ops
 * sum into their cumulative gates. log_alpha itself (or NULL) when it has no reset. */
const ttt_tensor *ttt_form_gates_floored(ttt_ctx *ctx, const ttt_tensor *log_alpha);
/* Gated DeltaProduct's n_h steps per token (L->substeps = n_h, docs/math.md §4.7) as the one-step
 * rule on n_h·T interleaved sub-steps: the gate (T) on the first sub-step of each token and
 * log α = 0 on the others, the query on the last and zeros on the others; `run` (a one-step form
 * of the delta rule, or the generic driver) computes them for L with substeps = 1, and o gets
 * the outputs of the last sub-steps. Recorded ops, so differentiable under a tape. q (T, d_k),
 * k (n_h·T, d_k), v (n_h·T, d_v), η and β (n_h·T) or NULL, log α (T) or NULL. */
typedef ttt_status (*ttt_one_step_fn)(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                      ttt_layer_state *st, const ttt_form_args *a,
                                      ttt_error *err);
ttt_status ttt_delta_product_interleaved(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                         ttt_layer_state *st, const ttt_form_args *a,
                                         ttt_one_step_fn run, ttt_error *err);
/* O into the caller's o, recorded as o's producer (a no-op record without a tape). */
void ttt_form_diff_output(ttt_ctx *ctx, ttt_tensor *o, const ttt_tensor *O);
/* A final state into the layer state: the node itself when recording (the graph continues
 * from it), else its values into the existing buffer. */
void ttt_form_set_state(ttt_ctx *ctx, ttt_tensor **slot, ttt_tensor *val);

/* The differentiable form of L for these inputs (the registry's choice, form.h: L->form or, for
 * "auto", the preferred available entry) through its forward_diff: o (T, d_v) written and — when
 * recording — a node of the graph; st's tensors replaced by graph nodes holding the final state
 * when recording, updated in place otherwise.
 *
 * beta (T) is β_t = θ·η_t, already formed by the caller (as a recorded op when η is learned);
 * NULL means η = 1. Entries that need η itself receive β/θ. log_alpha (T) or (T, d_k) or NULL.
 * The recurrent forms are differentiated through the chunkwise math with chunk L->chunk (the
 * same function; the token-by-token kernels have no backward), the parallel forms as one chunk.
 * `fused` selects the fused ops (fused_grad.h, dual_grad.h) where an entry has them.
 * Errors: TTT_ERR_UNSUPPORTED, naming why, when the form is not available for these inputs. */
ttt_status ttt_layer_forward_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                  ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                                  const ttt_tensor *v, const ttt_tensor *beta,
                                  const ttt_tensor *log_alpha, int fused, ttt_error *err);

#endif
