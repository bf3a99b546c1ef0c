/* The op layer: all inner-loop math goes through these functions.
 *
 * Ops are functional: they allocate their result in ctx->arena and never modify their inputs, so
 * that a tape (outer-loop training) can replay them backward. Shapes are checked when an op is
 * called; a mismatch is a programmer error (TTT_ASSERT with both shapes printed).
 * Conventions follow docs/math.md §0: row-major, tokens as rows, row vectors.
 *
 * Autodiff (autograd.h): every op below has a hand-written backward and records itself on
 * ctx->tape when ctx->grad is set and one of its inputs requires grad; the comparisons at the end
 * are utilities, not ops. Integer inputs (ids, targets) and scalar arguments (eps, flags, scales)
 * are constants. Derivatives at kinks: relu' = 0 and elu1' = 1 at x = 0, ‖·‖' = 0 at 0.
 *
 * Broadcasting (add, sub, mul, div): `b` may have the same shape as `a`, be a single element
 * (n == 1), or be a row vector with as many elements as a's last dimension (applied to every row).
 * The backward sums b's gradient over the broadcast positions.
 * Every fast kernel here keeps a naive twin in tests/test_ops.c as its reference.
 *
 * Devices (docs/design.md "Devices", docs/device_ops.md): an op runs where its inputs live.
 * Host tensors take the CPU code below as before; tensors of a CUDA device take that op's CUDA
 * implementation (src/core/ops_device.c), which allocates its result in ctx->arena (a device
 * arena of the same device) and records a backward that runs on the device. Inputs on different
 * devices, or a device input with a host arena, are a programmer error reported like a shape
 * mismatch; ops never copy between devices (ttt_tensor_to does). Integer inputs follow their
 * tensor: `ids` of ttt_embedding and `targets` of ttt_cross_entropy are device memory when the
 * table or logits are on a device. Device ops are queued on the arena's stream and return before
 * the device is done; a CUDA failure inside one cannot be returned by the op and is kept as the
 * thread's sticky device error, read with ttt_device_ops_status. */
#ifndef TTT_OPS_H
#define TTT_OPS_H

#include "autograd.h"
#include "tensor.h"

/* ---- matrix products (cblas_sgemm underneath) ---- */

/* op(a) · op(b), op = transpose when the flag is set. 2-D: (m,k)·(k,n) → (m,n).
 * 3-D: batched over dim 0, (B,m,k)·(B,k,n) → (B,m,n); a 2-D operand is shared by every batch.
 * A 1-D operand is a (1, k) row vector; a 1-D a (not transposed) times a 2-D b gives a 1-D (n)
 * result (q_t S), otherwise the result is 2-D. */
ttt_tensor *ttt_matmul(ttt_ctx *ctx, const ttt_tensor *a, int trans_a, const ttt_tensor *b,
                       int trans_b);
/* alpha · op(a)·op(b) + beta · c, 2-D; c may be NULL (beta ignored). */
ttt_tensor *ttt_gemm(ttt_ctx *ctx, float alpha, const ttt_tensor *a, int trans_a,
                     const ttt_tensor *b, int trans_b, float beta, const ttt_tensor *c);
/* xᵀ y for vectors x (m), y (n) → (m, n). A vector is any tensor with at most one dim ≠ 1. */
ttt_tensor *ttt_outer(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *y);

/* ---- elementwise, binary (broadcasting as above) ---- */
ttt_tensor *ttt_add(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b);
ttt_tensor *ttt_sub(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b);
ttt_tensor *ttt_mul(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b);
ttt_tensor *ttt_div(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b);
/* alpha·a + beta·b (same shape). */
ttt_tensor *ttt_axpby(ttt_ctx *ctx, float alpha, const ttt_tensor *a, float beta,
                      const ttt_tensor *b);
ttt_tensor *ttt_scale(ttt_ctx *ctx, const ttt_tensor *a, float s);
ttt_tensor *ttt_add_scalar(ttt_ctx *ctx, const ttt_tensor *a, float s);
/* diag(v)·a: row i of a (m,n) times v[i], v has m elements. */
ttt_tensor *ttt_scale_rows(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *v);
/* a·diag(v): column j of a (m,n) times v[j], v has n elements. */
ttt_tensor *ttt_scale_cols(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *v);

/* ---- elementwise, unary ---- */
ttt_tensor *ttt_neg(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_exp(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_log(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_sqrt(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_square(ttt_ctx *ctx, const ttt_tensor *a);
/* Activations. gelu is the tanh approximation used by TTT-MLP:
 * 0.5 x (1 + tanh(sqrt(2/π)(x + 0.044715 x³))). elu1(x) = elu(x) + 1 (positive feature map). */
ttt_tensor *ttt_silu(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_gelu(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_sigmoid(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_softplus(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_elu1(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_relu(ttt_ctx *ctx, const ttt_tensor *a);
/* Ops for writing optimizer rules (sign-SGD, Lion, clipped updates). Gradient conventions, as
 * PyTorch's (docs/extending.md "Adding an op"): sign' = 0 everywhere (a step function; 0 also at
 * x = 0); abs' = sign(x), 0 at x = 0; clamp passes the gradient where lo ≤ x ≤ hi (boundaries
 * included) and 0 outside; maximum/minimum route it to the larger/smaller input and split it
 * evenly on a tie; pow_scalar(x, p) = x^p elementwise with p·x^(p−1) (0 when p = 0; x < 0
 * with a non-integer p is NaN, as in libm). */
ttt_tensor *ttt_sign(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_abs(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_clamp(ttt_ctx *ctx, const ttt_tensor *a, float lo, float hi);
ttt_tensor *ttt_maximum(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b);
ttt_tensor *ttt_minimum(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b);
ttt_tensor *ttt_pow_scalar(ttt_ctx *ctx, const ttt_tensor *a, float p);
/* Derivatives of the activations, evaluated at a (for analytic inner gradients, docs/math.md §2):
 * silu'(x) = σ(x)(1 + x(1 − σ(x))). */
ttt_tensor *ttt_silu_grad(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_gelu_grad(ttt_ctx *ctx, const ttt_tensor *a);

/* ---- reductions ---- */
/* Results of full reductions are 1-element tensors (shape (1)). */
ttt_tensor *ttt_sum(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_dot(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b);
ttt_tensor *ttt_norm_fro(ttt_ctx *ctx, const ttt_tensor *a);
/* (m,n) → (n): sum over rows.  (m,n) → (m): sum over columns. */
ttt_tensor *ttt_sum_rows(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_sum_cols(ttt_ctx *ctx, const ttt_tensor *a);
/* (m,n) → (m): Euclidean norm of each row. */
ttt_tensor *ttt_row_norms(ttt_ctx *ctx, const ttt_tensor *a);
/* Cumulative sum along dim 0: (T) → (T) prefix sums, (T,d) → (T,d) per column. */
ttt_tensor *ttt_cumsum(ttt_ctx *ctx, const ttt_tensor *a);
/* Mean of all elements → (1). a must not be empty. */
ttt_tensor *ttt_mean(ttt_ctx *ctx, const ttt_tensor *a);

/* ---- norms (over the last dimension, row by row) ---- */
/* (x − mean)/sqrt(var + eps) · gamma + beta; gamma, beta (n) may be NULL (1 and 0). */
ttt_tensor *ttt_layernorm(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *gamma,
                          const ttt_tensor *beta, float eps);
/* Backward of ttt_layernorm w.r.t. x given dy (same shape as x). As an op it is differentiable
 * too (w.r.t. dy, x and gamma): training through an analytic inner gradient needs it. */
ttt_tensor *ttt_layernorm_backward(ttt_ctx *ctx, const ttt_tensor *dy, const ttt_tensor *x,
                                   const ttt_tensor *gamma, float eps);
/* x / sqrt(mean(x²) + eps) · gamma; gamma may be NULL. */
ttt_tensor *ttt_rmsnorm(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *gamma, float eps);
/* x / sqrt(Σ x² + eps): unit L2 norm per row. */
ttt_tensor *ttt_l2norm_rows(ttt_ctx *ctx, const ttt_tensor *x, float eps);
/* Row-wise softmax of a (m,n); entries equal to -INFINITY get probability 0. */
ttt_tensor *ttt_softmax_rows(ttt_ctx *ctx, const ttt_tensor *a);

/* ---- masks ---- */
/* Keep a[i][j] where j ≤ i + k, zero elsewhere: k = 0 is M (causal incl. diagonal),
 * k = -1 is M⁻ (strictly lower). */
ttt_tensor *ttt_tril(ttt_ctx *ctx, const ttt_tensor *a, int k);
/* Decay mask from cumulative log gates g (T): D[i][j] = exp(g[i] − g[j]) for i ≥ j (i > j when
 * strict), else 0. Computed from differences, never from products (docs/math.md §0). */
ttt_tensor *ttt_decay_mask(ttt_ctx *ctx, const ttt_tensor *g, int strict);
/* Additive causal mask for softmax: 0 where j ≤ i, -INFINITY elsewhere, added to a (m,m). */
ttt_tensor *ttt_causal_fill(ttt_ctx *ctx, const ttt_tensor *a);

/* ---- triangular solves (cblas_strsm) ---- */
/* X with L·X = B, L (n,n) lower triangular, B (n,m). unit != 0: the diagonal of L is taken as 1
 * and not read. */
ttt_tensor *ttt_solve_lower(ttt_ctx *ctx, const ttt_tensor *L, const ttt_tensor *B, int unit);

/* ---- shape ---- */
ttt_tensor *ttt_transpose(ttt_ctx *ctx, const ttt_tensor *a);
/* Rows [r0, r1) of a (dim 0): copied, or, when recorded, a view of a's storage (like
 * ttt_reshape; a recorded tensor is never written in place). */
ttt_tensor *ttt_slice_rows(ttt_ctx *ctx, const ttt_tensor *a, int r0, int r1);
/* Stack along dim 0 (other dims equal). */
ttt_tensor *ttt_concat_rows(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b);
/* Same for n ≥ 1 parts in one copy (joining a batch of sequences back into (B·T, …)). */
ttt_tensor *ttt_concat_rows_n(ttt_ctx *ctx, const ttt_tensor *const *parts, int n);
/* Same data, new shape (element counts equal); the result shares a's storage. For autodiff it is
 * a tensor of its own whose gradient is added into a's (element order is the same). */
ttt_tensor *ttt_reshape(ttt_ctx *ctx, const ttt_tensor *a, int ndim, const int *shape);
/* Columns [c0, c1) of the last dim, copied: (…, n) → (…, c1 − c0). Splits heads out of (T, H·D). */
ttt_tensor *ttt_slice_cols(ttt_ctx *ctx, const ttt_tensor *a, int c0, int c1);
/* Join along the last dim (all other dims equal): (…, n_a), (…, n_b) → (…, n_a + n_b). */
ttt_tensor *ttt_concat_cols(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b);
/* Same for n ≥ 1 parts in one copy (joining H heads back into (T, H·D)). */
ttt_tensor *ttt_concat_cols_n(ttt_ctx *ctx, const ttt_tensor *const *parts, int n);
/* Rows [r0, r1) and columns [c0, c1) of a read as a (rows, last dim) matrix, copied:
 * → (r1 − r0, c1 − c0). One head of one sequence out of (B, T, H·D) in one copy
 * (slice_rows then slice_cols would copy twice). */
ttt_tensor *ttt_slice_block(ttt_ctx *ctx, const ttt_tensor *a, int r0, int r1, int c0, int c1);
/* The inverse: an nr × nc grid of 2-D parts (parts[i·nc + j]; the parts of a grid row share
 * their row count, of a grid column their column count) joined into one matrix, in one copy:
 * B sequences × H heads of (T, D) back into (B·T, H·D). */
ttt_tensor *ttt_concat_grid(ttt_ctx *ctx, const ttt_tensor *const *parts, int nr, int nc);

/* ---- sequence-model ops ---- */
/* Rows of table (V, d) picked by ids (n, each in [0, V)) → (n, d). The backward scatter-adds into
 * the table rows (repeated ids accumulate). ids is copied when recording. */
ttt_tensor *ttt_embedding(ttt_ctx *ctx, const ttt_tensor *table, const int *ids, int n);

/* What a cross-entropy call saw, for metrics: counted rows, how many had their target as the
 * (first) arg-max, and the summed loss in nats. */
typedef struct ttt_ce_stats {
    int count;
    int correct;
    double loss_sum;
} ttt_ce_stats;

/* Mean cross-entropy (nats) of logits (N, V) (any tensor with N rows of V) against targets (N):
 * (1/count)·Σ_{i: t_i ≥ 0} (logsumexp(z_i) − z_{i,t_i}); rows with a negative target are ignored
 * (count = 0 gives 0). Log-sum-exp after subtracting the row max, in double. → (1). stats may be
 * NULL. targets is copied when recording. */
ttt_tensor *ttt_cross_entropy(ttt_ctx *ctx, const ttt_tensor *logits, const int *targets, int N,
                              ttt_ce_stats *stats);
/* The same, consuming the logits: its backward writes their gradient over their values instead
 * of into a buffer of their size (N·V floats: 2 GiB for 16384 tokens of a 32000-word
 * vocabulary; docs/training.md "Memory of a training step"). The same bits as
 * ttt_cross_entropy. For logits that nothing reads after this op's backward: no other op uses
 * them, the caller does not read them after the backward, and the op that made them does not
 * read its own result in its backward (a product, a sum do not). */
ttt_tensor *ttt_cross_entropy_consume(ttt_ctx *ctx, const ttt_tensor *logits, const int *targets,
                                      int N, ttt_ce_stats *stats);

/* Depthwise causal convolution along time: y_{t,c} = Σ_{j<K} w_{j,c}·x_{t−j,c} + b_c, with zero
 * padding before t = 0 (y_t never sees a future token). x is one sequence (T, C) or a batch of
 * independent sequences (B, T, C) (padding restarts at each sequence); w (K, C), j = 0 is the
 * current token; bias (C) or NULL. Result has x's shape. */
ttt_tensor *ttt_conv1d_causal(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *w,
                              const ttt_tensor *bias);
/* silu(ttt_conv1d_causal(x, w, NULL)) as one op, the same values: the convolution's output is
 * neither stored nor passed through memory again (the backward recomputes it per sequence), which
 * saves two passes over (B, T, C) forward and two backward (the sequence model's q, k, v). */
ttt_tensor *ttt_conv1d_causal_silu(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *w);

/* Causal softmax attention as one op (docs/device_ops.md "Fused causal attention"):
 * O = softmax(scale·Q Kᵀ + log M) V row by row, M the causal mask (query i sees keys j ≤ i;
 * docs/math.md §4), for one sequence, q and k (T, Dk) and v (T, Dv), or a batch of independent
 * ones (B, T, ·): the softmax mixer's (B, T, D) per head, or (B·H, T, D). → (T, Dv) or
 * (B, T, Dv). The T × T probabilities are never stored: the op keeps each row's log-sum-exp
 * and its backward recomputes them from it. On the host every sum is in double and each output
 * rounded once; on a CUDA device the kernel is tiled over keys with an online softmax (flash
 * attention), for head dims up to 128 (larger ones take the unfused ops on the device). */
ttt_tensor *ttt_attention_causal(ttt_ctx *ctx, const ttt_tensor *q, const ttt_tensor *k,
                                 const ttt_tensor *v, float scale);

/* The first CUDA failure of a device op on this thread since the last call (TTT_ERR_DEVICE with
 * its message in err), or TTT_OK; reading it clears it. A trainer reads it once per step. */
ttt_status ttt_device_ops_status(ttt_error *err);

/* ---- comparisons (not ops: utilities for tests and equivalence reports) ---- */
float ttt_max_abs(const ttt_tensor *a);
float ttt_max_abs_diff(const ttt_tensor *a, const ttt_tensor *b);
/* sqrt(Σ(a−b)²) / sqrt(Σ b²) (b is the reference); 0 when both are zero. */
double ttt_rel_rms_diff(const ttt_tensor *a, const ttt_tensor *b);
/* First non-finite element index, or -1. */
long ttt_find_nonfinite(const float *x, size_t n);

#endif
