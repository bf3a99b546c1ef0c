/* TTT-MLP fast-weight model (docs/math.md §2, table row "MLP"):
 *     f(W; x) = x + LN(gelu(x W1 + b1) W2 + b2),
 *     W1 (d, 4d), b1 (4d), W2 (4d, d), b2 (d),   d = d_k = d_v; weights in that order.
 * gelu is the tanh approximation (ops.h). The layer norm has no affine part and eps = 1e-6, for
 * the same reasons as TTT-Linear (layers/models/ttt_linear_model.c): γ, β are outer-loop parameters.
 *
 * Inner gradient, by the chain rule with h1 = x W1 + b1, a = gelu(h1), h2 = a W2 + b2:
 *     e2 = diag(η) LN'(h2)ᵀ dz,       G_W2 = aᵀ e2,    G_b2 = Σ_s e2_s,
 *     e1 = (e2 W2ᵀ) ⊙ gelu'(h1),      G_W1 = xᵀ e1,    G_b1 = Σ_s e1_s. */
#include "model.h"

#define TTT_MLP_LN_EPS 1e-6f
#define TTT_MLP_EXPANSION 4 /* hidden width 4d, as in TTT-MLP */
/* W1, W2 ~ N(0, 0.02²) (the TTT reference's initializer): random, so that hidden units differ
 * and the gradient is not degenerate (with W2 = 0 the output would not depend on x and W1 would
 * receive no gradient). Biases start at 0. */
#define TTT_MLP_INIT_STD 0.02f

static int mlp_shape(int i, int d_k, int d_v, int *shape) {
    const int h = TTT_MLP_EXPANSION * d_k;
    switch (i) {
    case 0: shape[0] = d_k; shape[1] = h; return 2;   /* W1 */
    case 1: shape[0] = h; return 1;                   /* b1 */
    case 2: shape[0] = h; shape[1] = d_v; return 2;   /* W2 */
    default: shape[0] = d_v; return 1;                /* b2 */
    }
}

static void mlp_init(ttt_tensor **W, int d_k, int d_v, ttt_rng *rng) {
    ttt_rng local;
    if (!rng) { /* no stream given: a fixed one, so the result is still reproducible */
        ttt_rng_seed(&local, ttt_hash_str("ttt_mlp.init"));
        rng = &local;
    }
    ttt_rng_fill_normal(rng, W[0]->data, W[0]->n, 0.0f, TTT_MLP_INIT_STD);
    ttt_tensor_fill(W[1], 0.0f);
    ttt_rng_fill_normal(rng, W[2]->data, W[2]->n, 0.0f, TTT_MLP_INIT_STD);
    ttt_tensor_fill(W[3], 0.0f);
}

static ttt_tensor *mlp_apply(ttt_ctx *ctx, const ttt_tensor *const *W, const ttt_tensor *x) {
    ttt_tensor *h1 = ttt_add(ctx, ttt_matmul(ctx, x, 0, W[0], 0), W[1]); /* (n, 4d) */
    ttt_tensor *a = ttt_gelu(ctx, h1);                                   /* (n, 4d) */
    ttt_tensor *h2 = ttt_add(ctx, ttt_matmul(ctx, a, 0, W[2], 0), W[3]); /* (n, d) */
    return ttt_add(ctx, x, ttt_layernorm(ctx, h2, NULL, NULL, TTT_MLP_LN_EPS));
}

static void mlp_grad(ttt_ctx *ctx, ttt_tensor **G, const ttt_tensor *const *W,
                     const ttt_tensor *x, const ttt_tensor *dz, const ttt_tensor *eta) {
    ttt_tensor *h1 = ttt_add(ctx, ttt_matmul(ctx, x, 0, W[0], 0), W[1]); /* (n, 4d) */
    ttt_tensor *a = ttt_gelu(ctx, h1);                                   /* (n, 4d) */
    ttt_tensor *h2 = ttt_add(ctx, ttt_matmul(ctx, a, 0, W[2], 0), W[3]); /* (n, d) */
    ttt_tensor *e2 = ttt_layernorm_backward(ctx, dz, h2, NULL, TTT_MLP_LN_EPS); /* (n, d) */
    if (eta) e2 = ttt_scale_rows(ctx, e2, eta);
    G[2] = ttt_matmul(ctx, a, 1, e2, 0); /* (4d, d) */
    G[3] = ttt_sum_rows(ctx, e2);        /* (d) */
    ttt_tensor *e1 = ttt_mul(ctx, ttt_matmul(ctx, e2, 0, W[2], 1), ttt_gelu_grad(ctx, h1));
    G[0] = ttt_matmul(ctx, x, 1, e1, 0); /* (d, 4d) */
    G[1] = ttt_sum_rows(ctx, e1);        /* (4d) */
}

const ttt_model ttt_model_ttt_mlp = {
    .name = "ttt_mlp",
    .help = "TTT-MLP: f(W; x) = x + LN(gelu(x W1 + b1) W2 + b2), hidden 4d (needs d_k = d_v; "
            "tanh gelu, LN without affine, eps 1e-6; W ~ N(0, 0.02^2), biases 0)",
    .n_weights = 4,
    .square = 1,
    .shape = mlp_shape,
    .init = mlp_init,
    .apply = mlp_apply,
    .grad = mlp_grad,
};
