/* The linear fast-weight model f(S; x) = x S, S (d_k, d_v) (docs/math.md §2).
 * With loss gradient dz = ∂ℓ/∂z the weighted inner gradient is Σ_s η_s k_sᵀ dz_s = Kᵀ diag(η) dZ:
 * for the dot loss −Kᵀ diag(η) V, for the squared loss Kᵀ diag(η)(K S − V). */
#include <string.h>

#include "model.h"

static int linear_shape(int i, int d_k, int d_v, int *shape) {
    shape[0] = d_k;
    shape[1] = d_v;
    return 2;
}

static void linear_init(ttt_tensor **W, int d_k, int d_v, ttt_rng *rng) {
    memset(W[0]->data, 0, W[0]->n * sizeof(float)); /* S_0 = 0: an empty memory */
}

static ttt_tensor *linear_apply(ttt_ctx *ctx, const ttt_tensor *const *W, const ttt_tensor *x) {
    return ttt_matmul(ctx, x, 0, W[0], 0); /* (n, d_k)·(d_k, d_v) */
}

static void linear_grad(ttt_ctx *ctx, ttt_tensor **G, const ttt_tensor *const *W,
                        const ttt_tensor *x, const ttt_tensor *dz, const ttt_tensor *eta) {
    const ttt_tensor *wdz = eta ? ttt_scale_rows(ctx, dz, eta) : dz; /* diag(η) dZ (n, d_v) */
    G[0] = ttt_matmul(ctx, x, 1, wdz, 0);                             /* Kᵀ diag(η) dZ */
}

const ttt_model ttt_model_linear = {
    .name = "linear",
    .help = "f(S; x) = x S, S is d_k x d_v (linear attention, DeltaNet)",
    .n_weights = 1,
    .square = 0,
    .shape = linear_shape,
    .init = linear_init,
    .apply = linear_apply,
    .grad = linear_grad,
    .traits = TTT_MODEL_LINEAR_MAP,
};
