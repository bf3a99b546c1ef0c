/* SwiGLU fast-weight model of LaCT (docs/math.md §2, table row "SwiGLU"):
 *     f(W; x) = (silu(x W0) ⊙ (x W2)) W1,
 *     weights in the order W0 (d_k, d_h), W1 (d_h, d_v), W2 (d_k, d_h).
 * Hidden width d_h = d_k: the model then has 3·d_k·d_v-like capacity per head, the same order
 * as the linear state, and no extra size option is needed (LaCT uses wider hidden layers with
 * its large chunks; a width option can be added when an experiment needs it).
 *
 * Inner gradient, with h = x W0, u = x W2, a = silu(h) ⊙ u and dz = ∂ℓ/∂z:
 *     e = diag(η) dz,       G_W1 = aᵀ e,
 *     δ = e W1ᵀ,            G_W2 = xᵀ (δ ⊙ silu(h)),     G_W0 = xᵀ (δ ⊙ u ⊙ silu'(h)).
 * For the dot loss (dz = −v) this is docs/math.md §2's closed form ∇W1 = −aᵀv, ∇W2 = −kᵀ(δ⊙silu(h)),
 * ∇W0 = −kᵀ(δ⊙u⊙silu'(h)) with §2's δ = v W1ᵀ. */
#include <math.h>

#include "model.h"

static int swiglu_hidden(int d_k) { return d_k; }

static int swiglu_shape(int i, int d_k, int d_v, int *shape) {
    const int h = swiglu_hidden(d_k);
    if (i == 1) { /* W1 */
        shape[0] = h;
        shape[1] = d_v;
    } else { /* W0, W2 */
        shape[0] = d_k;
        shape[1] = h;
    }
    return 2;
}

/* W0, W2 ~ N(0, 1/d_k), W1 ~ N(0, 1/d_h): unit-variance pre-activations for unit-variance
 * inputs (fan-in scaling). Random rather than zero: with W1 = 0 every W0, W2 gradient vanishes,
 * and with W0 = W2 = 0 so does W1's. */
static void swiglu_init(ttt_tensor **W, int d_k, int d_v, ttt_rng *rng) {
    ttt_rng local;
    if (!rng) { /* no stream given: a fixed one, so the result is still reproducible */
        ttt_rng_seed(&local, ttt_hash_str("swiglu.init"));
        rng = &local;
    }
    const float s_in = 1.0f / sqrtf((float)d_k), s_h = 1.0f / sqrtf((float)swiglu_hidden(d_k));
    ttt_rng_fill_normal(rng, W[0]->data, W[0]->n, 0.0f, s_in);
    ttt_rng_fill_normal(rng, W[1]->data, W[1]->n, 0.0f, s_h);
    ttt_rng_fill_normal(rng, W[2]->data, W[2]->n, 0.0f, s_in);
}

static ttt_tensor *swiglu_apply(ttt_ctx *ctx, const ttt_tensor *const *W, const ttt_tensor *x) {
    ttt_tensor *h = ttt_matmul(ctx, x, 0, W[0], 0);           /* (n, d_h) */
    ttt_tensor *u = ttt_matmul(ctx, x, 0, W[2], 0);           /* (n, d_h) */
    ttt_tensor *a = ttt_mul(ctx, ttt_silu(ctx, h), u);        /* (n, d_h) */
    return ttt_matmul(ctx, a, 0, W[1], 0);                    /* (n, d_v) */
}

static void swiglu_grad(ttt_ctx *ctx, ttt_tensor **G, const ttt_tensor *const *W,
                        const ttt_tensor *x, const ttt_tensor *dz, const ttt_tensor *eta) {
    ttt_tensor *h = ttt_matmul(ctx, x, 0, W[0], 0);           /* (n, d_h) */
    ttt_tensor *u = ttt_matmul(ctx, x, 0, W[2], 0);           /* (n, d_h) */
    ttt_tensor *sh = ttt_silu(ctx, h);                        /* (n, d_h) */
    ttt_tensor *a = ttt_mul(ctx, sh, u);                      /* (n, d_h) */
    const ttt_tensor *e = eta ? ttt_scale_rows(ctx, dz, eta) : dz; /* (n, d_v) */
    G[1] = ttt_matmul(ctx, a, 1, e, 0);                       /* (d_h, d_v) */
    ttt_tensor *delta = ttt_matmul(ctx, e, 0, W[1], 1);       /* (n, d_h) */
    G[2] = ttt_matmul(ctx, x, 1, ttt_mul(ctx, delta, sh), 0); /* (d_k, d_h) */
    ttt_tensor *dh = ttt_mul(ctx, ttt_mul(ctx, delta, u), ttt_silu_grad(ctx, h));
    G[0] = ttt_matmul(ctx, x, 1, dh, 0);                      /* (d_k, d_h) */
}

const ttt_model ttt_model_swiglu = {
    .name = "swiglu",
    .help = "LaCT SwiGLU: f(W; x) = (silu(x W0) * (x W2)) W1, hidden d_h = d_k "
            "(W0, W2 ~ N(0, 1/d_k), W1 ~ N(0, 1/d_h))",
    .n_weights = 3,
    .square = 0,
    .shape = swiglu_shape,
    .init = swiglu_init,
    .apply = swiglu_apply,
    .grad = swiglu_grad,
    .traits = TTT_MODEL_SWIGLU,
};
