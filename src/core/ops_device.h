/* The device half of the op table (docs/device_ops.md): each op of ops.h starts with one
 * branch, TTT_OPS_ON_DEVICE, on the kinds of its inputs' devices and of the context's arena;
 * when any of them is not the host, the op continues here, in ttt_dev_<op>, which checks that
 * every input and the arena are on the same device (mixed devices are a programmer error,
 * reported like a shape mismatch), computes with the CUDA kernels of cuda_kernels.h on the
 * arena's stream, and records a tape entry whose backward runs on the device as well. Host
 * tensors never come here, so the host ops are what they were. */
#ifndef TTT_OPS_DEVICE_H
#define TTT_OPS_DEVICE_H

#include "ops.h"

/* Nonzero when the op must go to its device implementation: one OR of the device kinds and one
 * branch. b and c may be NULL (optional inputs). */
static inline int ttt_dev_kind_(const ttt_tensor *t) { return t ? (int)t->device_kind : 0; }
#define TTT_DEV_KIND_(t) ttt_dev_kind_(t)
#define TTT_OPS_ON_DEVICE(ctx, a, b)                                                       \
    __builtin_expect(((int)(ctx)->arena->device.kind | (int)(a)->device_kind |              \
                      TTT_DEV_KIND_(b)) != 0,                                              \
                     0)
#define TTT_OPS_ON_DEVICE3(ctx, a, b, c)                                                   \
    __builtin_expect(((int)(ctx)->arena->device.kind | (int)(a)->device_kind |              \
                      TTT_DEV_KIND_(b) | TTT_DEV_KIND_(c)) != 0,                           \
                     0)

/* The same for the n parts of a concatenation: the OR of their kinds (a part on a device among
 * host parts goes to the device half, which names the mix). */
static inline int ttt_dev_parts_kind_(const ttt_tensor *const *parts, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) k |= (int)parts[i]->device_kind;
    return k;
}
#define TTT_OPS_ON_DEVICE_N(ctx, parts, n)                                                 \
    __builtin_expect(((int)(ctx)->arena->device.kind | ttt_dev_parts_kind_((parts), (n))) != 0, 0)

/* The sticky error of the device ops on this thread (ops.h ttt_device_ops_status): `note`
 * keeps the first failure since the last read; `err` is the record a failing call writes. */
void ttt_device_ops_note(ttt_status s);
ttt_error *ttt_device_ops_err(void);

/* An op that has no device implementation yet, called with device inputs: says so and stops,
 * as a shape mismatch does (the op list in docs/device_ops.md). */
_Noreturn void ttt_dev_unsupported(const char *op, const ttt_tensor *a);

ttt_tensor *ttt_dev_copy(ttt_ctx *ctx, const ttt_tensor *t);
ttt_tensor *ttt_dev_matmul(ttt_ctx *ctx, const ttt_tensor *a, int ta, const ttt_tensor *b,
                           int tb);
ttt_tensor *ttt_dev_gemm(ttt_ctx *ctx, float alpha, const ttt_tensor *a, int ta,
                         const ttt_tensor *b, int tb, float beta, const ttt_tensor *c);
ttt_tensor *ttt_dev_outer(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *y);
/* op: TTT_MAP_ADD, SUB, MUL or DIV. */
ttt_tensor *ttt_dev_binary(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b, int op,
                           const char *name);
ttt_tensor *ttt_dev_axpby(ttt_ctx *ctx, float alpha, const ttt_tensor *a, float beta,
                          const ttt_tensor *b);
ttt_tensor *ttt_dev_scale(ttt_ctx *ctx, const ttt_tensor *a, float s, int add_scalar);
ttt_tensor *ttt_dev_scale_rows(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *v);
ttt_tensor *ttt_dev_scale_cols(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *v);
/* y = fop(a; p0, p1), dy·bop(a; bp0, bp1) backward. */
ttt_tensor *ttt_dev_unary(ttt_ctx *ctx, const ttt_tensor *a, int fop, float p0, float p1, int bop,
                          float bp0, float bp1, const char *name);
ttt_tensor *ttt_dev_extremum(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b, int is_max);
/* Σ a · scale (sum: 1, mean: 1/n). */
ttt_tensor *ttt_dev_sum(ttt_ctx *ctx, const ttt_tensor *a, double scale, const char *name);
ttt_tensor *ttt_dev_dot(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b);
ttt_tensor *ttt_dev_norm_fro(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_dev_sum_rows(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_dev_sum_cols(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_dev_row_norms(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_dev_cumsum(ttt_ctx *ctx, const ttt_tensor *a);
/* kind: TTT_NORM_LAYER (gamma, beta), RMS (gamma), L2, SOFTMAX. */
ttt_tensor *ttt_dev_rownorm(ttt_ctx *ctx, int kind, const ttt_tensor *x, const ttt_tensor *gamma,
                            const ttt_tensor *beta, float eps, const char *name);
ttt_tensor *ttt_dev_solve_lower(ttt_ctx *ctx, const ttt_tensor *L, const ttt_tensor *B, int unit);
/* The forward of ttt_layernorm_backward; recording it (training through it) is not supported
 * on the device yet. */
ttt_tensor *ttt_dev_layernorm_backward(ttt_ctx *ctx, const ttt_tensor *dy, const ttt_tensor *x,
                                       const ttt_tensor *gamma, float eps);
/* kind: TTT_MASK_TRIL (k) or TTT_MASK_CAUSAL_FILL. */
ttt_tensor *ttt_dev_mask(ttt_ctx *ctx, const ttt_tensor *a, int kind, int k, const char *name);
ttt_tensor *ttt_dev_decay_mask(ttt_ctx *ctx, const ttt_tensor *g, int strict);
ttt_tensor *ttt_dev_transpose(ttt_ctx *ctx, const ttt_tensor *a);
ttt_tensor *ttt_dev_slice_rows(ttt_ctx *ctx, const ttt_tensor *a, int r0, int r1);
ttt_tensor *ttt_dev_concat_rows_n(ttt_ctx *ctx, const ttt_tensor *const *parts, int n);
ttt_tensor *ttt_dev_slice_block(ttt_ctx *ctx, const ttt_tensor *a, int r0, int r1, int c0, int c1,
                                int as_cols);
ttt_tensor *ttt_dev_concat_grid(ttt_ctx *ctx, const ttt_tensor *const *parts, int nr, int nc,
                                int as_cols);
ttt_tensor *ttt_dev_embedding(ttt_ctx *ctx, const ttt_tensor *table, const int *ids, int n);
ttt_tensor *ttt_dev_cross_entropy(ttt_ctx *ctx, const ttt_tensor *logits, const int *targets,
                                  int N, ttt_ce_stats *stats, int consume);
ttt_tensor *ttt_dev_conv1d(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *w,
                           const ttt_tensor *bias, int silu);
ttt_tensor *ttt_dev_rope(ttt_ctx *ctx, const ttt_tensor *x, int pos0, float base);
/* Fused causal attention (ops.h ttt_attention_causal): the tiled kernels of
 * src/core/cuda/ops_attention.cu for head dims up to 128, the unfused device ops beyond. */
ttt_tensor *ttt_dev_attention_causal(ttt_ctx *ctx, const ttt_tensor *q, const ttt_tensor *k,
                                     const ttt_tensor *v, float scale);

/* The recurrences (docs/device_ops.md "Recurrences"): the device halves of the recorded ops
 * ttt_lru_op and ttt_selective_scan_op (layers/diagonal/diagonal.h) and ttt_dplr_recurrent_op
 * (layers/forms/delta_rule/dplr.h), which call them when their inputs are on a device; the same
 * arguments (h0, D, log_w may be NULL), the same tape entries, the same results up to roundings.
 * Inputs must be distinct tensors. */
ttt_tensor *ttt_dev_lru(ttt_ctx *ctx, const ttt_tensor *nu, const ttt_tensor *theta,
                        const ttt_tensor *U, const ttt_tensor *h0);
ttt_tensor *ttt_dev_selective_scan(ttt_ctx *ctx, const ttt_tensor *x, const ttt_tensor *delta,
                                   const ttt_tensor *A_log, const ttt_tensor *B,
                                   const ttt_tensor *C, const ttt_tensor *D,
                                   const ttt_tensor *h0);
/* O (T, d_v) and *S_out (d_k, d_v): two row slices of one recorded result [O; S_T]. */
ttt_tensor *ttt_dev_dplr_recurrent(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                   const ttt_tensor *k, const ttt_tensor *v, const ttt_tensor *a,
                                   const ttt_tensor *b, const ttt_tensor *log_w,
                                   const ttt_tensor *S0, int chunk);

#endif
