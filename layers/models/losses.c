/* Inner losses (docs/math.md §2). */
#include "model.h"

/* dot (Hebbian): ℓ = −⟨z, v⟩, ∂ℓ/∂z = −v. */
static ttt_tensor *dot_grad(ttt_ctx *ctx, const ttt_tensor *z, const ttt_tensor *v) {
    return ttt_neg(ctx, v);
}

static double dot_value(const ttt_tensor *z, const ttt_tensor *v) {
    double s = 0;
    for (size_t i = 0; i < z->n; i++) s -= (double)z->data[i] * v->data[i];
    return s;
}

const ttt_loss ttt_loss_dot = {
    .name = "dot",
    .help = "Hebbian: l = -<z, v>, dl/dz = -v (linear attention family)",
    .grad = dot_grad,
    .value = dot_value,
    .z_free = 1,
};

/* squared (delta rule): ℓ = ½‖z − v‖², ∂ℓ/∂z = z − v. */
static ttt_tensor *squared_grad(ttt_ctx *ctx, const ttt_tensor *z, const ttt_tensor *v) {
    return ttt_sub(ctx, z, v);
}

static double squared_value(const ttt_tensor *z, const ttt_tensor *v) {
    double s = 0;
    for (size_t i = 0; i < z->n; i++) {
        double d = (double)z->data[i] - v->data[i];
        s += 0.5 * d * d;
    }
    return s;
}

const ttt_loss ttt_loss_squared = {
    .name = "squared",
    .help = "delta rule: l = 1/2 |z - v|^2, dl/dz = z - v",
    .grad = squared_grad,
    .value = squared_value,
    .z_free = 0,
    .traits = TTT_LOSS_RESIDUAL,
};

/* recon (TTT view reconstruction, docs/math.md §2): for a residual model z = f(W; k) = k + g(W; k)
 * (ttt_linear, ttt_mlp) the TTT inner loss ½‖g(W; k) − (v − k)‖² (e.g. ½‖LN(kW + b) − (v − k)‖²)
 * equals ½‖z − v‖²: the same value and ∂ℓ/∂z = z − v as `squared`, the residual's −k sitting
 * inside z. It is registered under its own name so configurations say which view they mean;
 * the model's grad carries ∂ℓ/∂z back through LN. Being the same function, it shares `squared`'s
 * grad and value. */
const ttt_loss ttt_loss_recon = {
    .name = "recon",
    .help = "TTT view reconstruction for residual models z = k + g(k): "
            "l = 1/2 |g(k) - (v - k)|^2 = 1/2 |z - v|^2, dl/dz = z - v",
    .grad = squared_grad,
    .value = squared_value,
    .z_free = 0,
    .traits = TTT_LOSS_RESIDUAL,
};
