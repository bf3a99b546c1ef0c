/* TTT-Linear fast-weight model (docs/math.md §2, table row "linear + LN + residual"):
 *     f(W, b; x) = x + LN(x W + b),      W (d, d), b (d),      d = d_k = d_v.
 *
 * The layer norm inside the inner model has no affine part here (γ = 1, β = 0): in TTT-Linear
 * γ and β are outer-loop parameters that the inner loop never updates, and the outer loop
 * (training through the layer) is not wired in yet; when it is, γ and β belong to the layer, not
 * to the fast weights. eps = 1e-6 (TTT_LINEAR_LN_EPS) as in the TTT reference code: it only
 * guards var = 0, and the hidden pre-activations never come near that at the initial scale below.
 *
 * Inner gradient (docs/math.md §2, "through LN backward"): with h = x W + b and dz = ∂ℓ/∂z, the residual
 * passes dz straight to LN's output, so
 *     dh = LN'(h)ᵀ dz,     G_W = xᵀ diag(η) dh,     G_b = Σ_s η_s dh_s.
 * With the `recon` (or `squared`) loss dz = z − v = LN(h) − (v − x): TTT's view reconstruction. */
#include "model.h"

#define TTT_LINEAR_LN_EPS 1e-6f

/* Standard deviation of the random initial W. W = 0 would make h = b = 0 for every input, where
 * LN divides by sqrt(eps) = 1e-3: the first inner gradient would be ~1000× too large and point
 * in a direction that only depends on the target. 0.02 is the TTT reference's initializer. */
#define TTT_LINEAR_INIT_STD 0.02f

static int ttt_linear_shape(int i, int d_k, int d_v, int *shape) {
    if (i == 0) {
        shape[0] = d_k;
        shape[1] = d_v;
        return 2;
    }
    shape[0] = d_v; /* b */
    return 1;
}

static void ttt_linear_init(ttt_tensor **W, int d_k, int d_v, ttt_rng *rng) {
    ttt_rng local;
    if (!rng) { /* no stream given: a fixed one, so the result is still reproducible */
        ttt_rng_seed(&local, ttt_hash_str("ttt_linear.init"));
        rng = &local;
    }
    ttt_rng_fill_normal(rng, W[0]->data, W[0]->n, 0.0f, TTT_LINEAR_INIT_STD);
    ttt_tensor_fill(W[1], 0.0f); /* b_0 = 0 */
}

/* h = x W + b (n, d) */
static ttt_tensor *pre_activation(ttt_ctx *ctx, const ttt_tensor *const *W, const ttt_tensor *x) {
    return ttt_add(ctx, ttt_matmul(ctx, x, 0, W[0], 0), W[1]);
}

static ttt_tensor *ttt_linear_apply(ttt_ctx *ctx, const ttt_tensor *const *W,
                                    const ttt_tensor *x) {
    ttt_tensor *h = pre_activation(ctx, W, x);                                   /* (n, d) */
    return ttt_add(ctx, x, ttt_layernorm(ctx, h, NULL, NULL, TTT_LINEAR_LN_EPS)); /* (n, d) */
}

static void ttt_linear_grad(ttt_ctx *ctx, ttt_tensor **G, const ttt_tensor *const *W,
                            const ttt_tensor *x, const ttt_tensor *dz, const ttt_tensor *eta) {
    ttt_tensor *h = pre_activation(ctx, W, x);                                   /* (n, d) */
    ttt_tensor *dh = ttt_layernorm_backward(ctx, dz, h, NULL, TTT_LINEAR_LN_EPS); /* (n, d) */
    if (eta) dh = ttt_scale_rows(ctx, dh, eta);                                  /* diag(η) dh */
    G[0] = ttt_matmul(ctx, x, 1, dh, 0);                                         /* (d, d) */
    G[1] = ttt_sum_rows(ctx, dh);                                                /* (d) */
}

const ttt_model ttt_model_ttt_linear = {
    .name = "ttt_linear",
    .help = "TTT-Linear: f(W, b; x) = x + LN(x W + b), W is d x d, b is d (needs d_k = d_v; LN "
            "without affine, eps 1e-6; W_0 ~ N(0, 0.02^2), b_0 = 0)",
    .n_weights = 2,
    .square = 1,
    .shape = ttt_linear_shape,
    .init = ttt_linear_init,
    .apply = ttt_linear_apply,
    .grad = ttt_linear_grad,
    .traits = TTT_MODEL_RESIDUAL_LN,
};
