/* MesaNet's rule (von Oswald et al. 2025): the exact ridge-regression solution after every token
 * with a regularizer that is never forgotten (docs/math.md §3.11, beside recursive least
 * squares, §3.9).
 *
 * For the linear fast weight W (d_k, d_v) read as o = q W, the squared loss, write strengths
 * β_t = θ η_t and retentions γ_t (`decay` or the layer's gates), the weights after token t are
 *
 *     W_t = argmin_W  Σ_{s≤t} (Γ_t/Γ_s) β_s ‖k_s W − v_s‖² + λ ‖W‖²_F,    Γ_t = γ_1 ⋯ γ_t,
 *
 * i.e. W_t = (H_t + λI)⁻¹ G_t with the two statistics kept as state,
 *
 *     H_t = γ_t H_{t−1} + β_t k_tᵀ k_t,     G_t = γ_t G_{t−1} + β_t k_tᵀ v_t.
 *
 * rls (docs/math.md §3.9) minimizes the same sum with the regularizer forgotten too
 * (Γ_t λ ‖W‖²); the two are the same rule without forgetting. Because λ stays, H_t + λI is not a
 * rank-one update of (H_{t−1} + λI)/γ_t, so there is no Sherman–Morrison recursion: each step
 * solves, here by LU in double (O(d_k³)). The mesa_net forms (layers/forms/mesa_net/) compute the
 * same layer without ever forming W: they solve (H_t + λI)ᵀ x_t = q_t per token, exactly or by
 * `cg_steps` steps of conjugate gradients, and read o_t = x_tᵀ G_t.
 *
 * The step receives the block gradient (the sum of η_s k_sᵀ(k_s W_g − v_s), W_g = W, or γW with
 * decay_placement: coupled) and the block's keys (traits.inputs); from them
 *     ΔH = Σ η_s k_sᵀ k_s,   Σ η_s k_sᵀ v_s = ΔH W_g − G,
 * so the state moves to H' = γH + θ ΔH, G' = γG + θ (ΔH W_g − G) and W' = (H' + λI)⁻¹ G'.
 * b = 1 is the definition (with a decay inside a longer block the earlier tokens' ΔH is not
 * decayed, as in rls). A decay per key dimension a rescales the past keys by a^½:
 * H ← D^½ H D^½, G ← D^½ G, D = diag(a).
 *
 * Under a tape the solve is made differentiable without differentiating the factorization: with
 * X* = (H' + λI)⁻¹ G' computed as a constant and A⁻¹ its constant inverse,
 *     W' = X* + A⁻¹ (G' − (H' + λI) X*)
 * has the value X* (the bracket is the residual, zero up to rounding) and the derivative of the
 * solve, dW' = A⁻¹ (dG' − dH' X*) (the implicit-function theorem); tests/test_contract_optim.c
 * holds it to finite differences.
 *
 * Without the keys (the weights of deeper models, or a caller that passes none) the state stays
 * as it is and the step is W − (θ/λ) G: gradient descent at the ridge's rate.
 *
 * State: H (d_k, d_k) and G (W's shape); for a vector weight (a bias) a 1-element H. */
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "optim.h"
#include "ridge.h"

typedef struct mesa_cfg {
    float lambda;
    int cg_steps;
    int cg_jacobi;
    int coupled;
} mesa_cfg;

static const ttt_option mesa_options[] = {
    TTT_OPTIM_COMMON_OPTIONS,
    {"lambda", TTT_OPT_FLOAT, "1.0", 1e-6, 1e6, NULL,
     "ridge lambda, never forgotten: W = (H + lambda I)^-1 G"},
    {"cg_steps", TTT_OPT_INT, "0", 0, 1000, NULL,
     "conjugate-gradient steps per token of the mesa_net cg form's solve (H + lambda I) x = q "
     "(0: the exact solve; the generic driver and the recurrent form always solve exactly)"},
    {"cg_start", TTT_OPT_CHOICE, "zero", TTT_NO_RANGE, "zero|jacobi",
     "where CG starts: zero (FLA's training kernel) or the Jacobi guess q/(diag H + lambda) "
     "(FLA's decoding step)"},
    TTT_OPTION_END,
};

static ttt_status mesa_parse(void *cfg, const ttt_optim_args *opts, ttt_error *err) {
    (void)err;
    mesa_cfg *c = cfg;
    c->lambda = (float)ttt_optim_arg_num(opts, "lambda");
    c->cg_steps = (int)ttt_optim_arg_num(opts, "cg_steps");
    c->cg_jacobi = strcmp(ttt_optim_arg_text(opts, "cg_start"), "jacobi") == 0;
    c->coupled = strcmp(ttt_optim_arg_text(opts, "decay_placement"), "coupled") == 0;
    return TTT_OK;
}

static int mesa_n_state(const void *cfg) {
    (void)cfg;
    return 2; /* H, G */
}

static int mesa_state_shape(const void *cfg, int *shape, int i, const int *w_shape, int w_ndim) {
    (void)cfg;
    if (i == 1) { /* G: the weight's shape */
        for (int j = 0; j < w_ndim; j++) shape[j] = w_shape[j];
        return w_ndim;
    }
    if (w_ndim == 1) {
        shape[0] = 1;
        return 1;
    }
    shape[0] = shape[1] = w_shape[0];
    return 2;
}

/* A (d, d) decayed as the key dimensions: γA for a scalar, D^½ A D^½ for a vector (two_sided),
 * D^½ A for G (one side). */
static ttt_tensor *forget(ttt_ctx *ctx, const ttt_tensor *A, const ttt_optim_block *blk,
                          int two_sided) {
    if (!blk->decay) return (ttt_tensor *)A;
    if (blk->decay->n == 1) return ttt_mul(ctx, A, blk->decay);
    /* a reset (a = 0) would meet sqrt's infinite slope: below 1e-30 the clamp passes no
     * gradient, so a reset gate's gradient is 0, and 1e-30 A is 0 to float32 for any state */
    ttt_tensor *s = ttt_sqrt(ctx, ttt_clamp(ctx, blk->decay, 1e-30f, 1.0f));
    ttt_tensor *r = ttt_scale_rows(ctx, A, s);
    return two_sided ? ttt_scale_cols(ctx, r, s) : r;
}

static void mesa_step(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out, ttt_tensor **state_out,
                      const ttt_tensor *W, const ttt_tensor *const *state, const ttt_tensor *G,
                      const ttt_optim_block *blk) {
    const mesa_cfg *c = cfg;
    const int d = W->ndim == 2 ? W->shape[0] : 0;
    if (W->ndim != 2 || !blk->x || TTT_COLS(blk->x) != d) { /* no keys: descent at rate θ/λ */
        state_out[0] = (ttt_tensor *)state[0];
        state_out[1] = (ttt_tensor *)state[1];
        *W_out = ttt_axpby(ctx, 1.0f, W, -blk->theta / c->lambda, G);
        return;
    }
    const int dv = W->shape[1];
    const ttt_tensor *x = blk->x;                                          /* (n, d) */
    const ttt_tensor *xe = blk->x_eta ? ttt_scale_rows(ctx, x, blk->x_eta) : x;
    ttt_tensor *dH = ttt_matmul(ctx, xe, 1, x, 0);                         /* Σ η kᵀk */
    const ttt_tensor *Wg = c->coupled ? ttt_optim_apply_decay(ctx, W, blk) : W;
    ttt_tensor *KV = ttt_sub(ctx, ttt_matmul(ctx, dH, 0, Wg, 0), G);       /* Σ η kᵀv */
    ttt_tensor *H = ttt_axpby(ctx, 1.0f, forget(ctx, state[0], blk, 1), blk->theta, dH);
    ttt_tensor *B = ttt_axpby(ctx, 1.0f, forget(ctx, state[1], blk, 0), blk->theta, KV);
    ttt_tensor *lam = ttt_tensor_2d(ctx, d, d);
    ttt_tensor_fill(lam, 0.0f); /* arena memory is not cleared */
    for (int i = 0; i < d; i++) lam->data[(size_t)i * d + i] = c->lambda;
    ttt_tensor *A = ttt_add(ctx, H, lam);
    state_out[0] = H;
    state_out[1] = B;
    /* X* = A⁻¹ G' in double (and A⁻¹ itself under a tape) */
    const int rec = ttt_recording(ctx);
    double *LU = malloc(sizeof(double) * ((size_t)d * d + (size_t)d * (dv + (rec ? d : 0))));
    int *piv = malloc(sizeof(int) * (size_t)(d > 0 ? d : 1));
    TTT_ASSERT(LU && piv);
    double *X = LU + (size_t)d * d, *Ai = X + (size_t)d * dv;
    for (size_t i = 0; i < (size_t)d * d; i++) LU[i] = A->data[i];
    for (size_t i = 0; i < (size_t)d * dv; i++) X[i] = B->data[i];
    if (!ttt_ridge_lu(LU, piv, d)) { /* only a caller's state makes A singular: keep W */
        free(LU), free(piv);
        *W_out = ttt_axpby(ctx, 1.0f, W, 0.0f, W);
        return;
    }
    ttt_ridge_lu_solve(LU, piv, d, X, dv);
    ttt_tensor *Xs = ttt_tensor_2d(ctx, d, dv);
    for (size_t i = 0; i < (size_t)d * dv; i++) Xs->data[i] = (float)X[i];
    if (!rec) {
        *W_out = Xs;
    } else {
        memset(Ai, 0, sizeof(double) * (size_t)d * d);
        for (int i = 0; i < d; i++) Ai[(size_t)i * d + i] = 1.0;
        ttt_ridge_lu_solve(LU, piv, d, Ai, d);
        ttt_tensor *Ainv = ttt_tensor_2d(ctx, d, d);
        for (size_t i = 0; i < (size_t)d * d; i++) Ainv->data[i] = (float)Ai[i];
        ttt_tensor *R = ttt_sub(ctx, B, ttt_matmul(ctx, A, 0, Xs, 0)); /* the residual */
        *W_out = ttt_add(ctx, Xs, ttt_matmul(ctx, Ainv, 0, R, 0));
    }
    free(LU), free(piv);
}

static ttt_optim_traits mesa_traits(const void *cfg) {
    const mesa_cfg *c = cfg;
    return (ttt_optim_traits){.inputs = 1, .ridge = c->lambda, .cg_steps = c->cg_steps,
                              .cg_jacobi = c->cg_jacobi};
}

const ttt_optim ttt_optim_mesa = {
    .name = "mesa",
    .help = "MesaNet: exact ridge regression after every token with an unforgotten lambda "
            "(linear model, squared loss); H <- decay*H + lr*k^T k, G <- decay*G + lr*k^T v, "
            "W = (H + lambda I)^-1 G",
    .options = mesa_options,
    .cfg_size = sizeof(mesa_cfg),
    .parse = mesa_parse,
    .n_state = mesa_n_state,
    .state_shape = mesa_state_shape,
    .step = mesa_step,
    .traits = mesa_traits,
};
