/* Recursive least squares: the exact ridge-regression solution after every token
 * (docs/math.md §3.9; the direction of MesaNet).
 *
 * For the linear fast weight W (d_k, d_v) read as o = k W, with the squared loss and learning
 * rates η_t, the weights after token t are
 *
 *     W_t = argmin_W  Σ_{s≤t} α^{t−s} η_s ‖k_s W − v_s‖² + α^t λ ‖W‖²_F
 *
 * (α the retention, `decay` or the layer's gates: a forgetting factor). With the curvature
 * C_t = α C_{t−1} + η_t k_tᵀ k_t, C_0 = λ I, and its inverse P = C⁻¹ kept as state, one token is
 *
 *     P' = P / α
 *     P_t = P' − η_t (P' k_tᵀ)(k_t P') / (1 + η_t k_t P' k_tᵀ)          (Sherman–Morrison)
 *     W_t = W_{t−1} − θ P_t G_t,      G_t = η_t k_tᵀ (k_t W_{t−1} − v_t)
 *
 * and with θ = 1 this is the minimizer above (a Newton step on a quadratic lands on its minimum;
 * docs/math.md derives it, tests/test_rls.c checks it against the normal equations solved in
 * float64 after every token). A decay per key dimension a (GLA's gates) forgets per direction,
 * C ← D^½ C D^½ with D = diag(a), i.e. P' = D^−½ P D^−½. W itself is not decayed: forgetting
 * acts on the evidence, not on the solution.
 *
 * The step needs the tokens' inputs k (the block gradient G = Σ η k(kW − v) alone does not
 * determine Σ η kᵀk): the layer gives them as blk->x, blk->x_eta when the model is linear
 * (traits.inputs). Without them — the weights of deeper models, or a caller that passes none —
 * P stays as it is and the step is the preconditioned gradient step W − θ P G (P = I/λ: SGD with
 * rate θ/λ). For a block of b > 1 tokens the step folds in every token of the block, P from the
 * block start: exact ridge after each block when there is no decay; with decay inside a block
 * the curvature of earlier tokens of the block is not decayed (b = 1 is the definition).
 *
 * State: P, (d_k, d_k) for a matrix weight of d_k rows; a 1-element tensor for a vector (a
 * bias). */
#include <string.h>

#include "autograd.h"
#include "optim.h"

typedef struct rls_cfg {
    float lambda;
} rls_cfg;

static const ttt_option rls_options[] = {
    TTT_OPTIM_COMMON_OPTIONS,
    {"lambda", TTT_OPT_FLOAT, "1.0", 1e-6, 1e6, NULL,
     "ridge lambda: P starts at I/lambda (the solution minimizes the squared errors + "
     "lambda*|W|^2)"},
    TTT_OPTION_END,
};

static ttt_status rls_parse(void *cfg, const ttt_optim_args *opts, ttt_error *err) {
    ((rls_cfg *)cfg)->lambda = (float)ttt_optim_arg_num(opts, "lambda");
    return TTT_OK;
}

static int rls_n_state(const void *cfg) { return 1; /* P */ }

static int rls_state_shape(const void *cfg, int *shape, int i, const int *w_shape, int w_ndim) {
    if (w_ndim == 1) {
        shape[0] = 1;
        return 1;
    }
    shape[0] = shape[1] = w_shape[0];
    return 2;
}

/* P_0 = I/λ. */
static void rls_init_state(const void *cfg, ttt_tensor **state, const ttt_tensor *W) {
    const rls_cfg *c = cfg;
    ttt_tensor *P = state[0];
    if (P->ndim == 1) {
        P->data[0] = 1.0f / c->lambda;
        return;
    }
    const int d = P->shape[0];
    for (int i = 0; i < d; i++) P->data[(size_t)i * d + i] = 1.0f / c->lambda;
}

/* P with the block's forgetting applied: P/α, or D^−½ P D^−½ for a decay per row. */
static ttt_tensor *forget(ttt_ctx *ctx, ttt_tensor *P, const ttt_optim_block *blk) {
    if (!blk->decay) return P;
    if (blk->decay->n == 1) return ttt_div(ctx, P, blk->decay);
    TTT_ASSERT(P->ndim == 2 && blk->decay->n == (size_t)P->shape[0]);
    ttt_tensor *s = ttt_sqrt(ctx, blk->decay);                    /* (d) */
    ttt_tensor *ones = ttt_tensor_zeros_like(ctx, s);
    ttt_tensor_fill(ones, 1.0f);
    return ttt_scale_rows(ctx, ttt_div(ctx, P, s), ttt_div(ctx, ones, s)); /* P_ij / (s_i s_j) */
}

/* P ← P − η (P kᵀ)(k P) / (1 + η k P kᵀ) for every row k of x, in place on the symmetric P
 * (d, d), accumulating in double; u = k P is the row (P kᵀ)ᵀ. */
static void sm_inplace(ttt_ctx *ctx, ttt_tensor *P, const ttt_tensor *x,
                       const ttt_tensor *x_eta) {
    const int d = P->shape[0];
    float *u = ttt_tensor_1d(ctx, d)->data; /* (d) */
    for (int s = 0; s < TTT_ROWS(x); s++) {
        const float *k = x->data + (size_t)s * d;
        double kPk = 0;
        for (int j = 0; j < d; j++) {
            double acc = 0;
            for (int i = 0; i < d; i++) acc += (double)k[i] * P->data[(size_t)i * d + j];
            u[j] = (float)acc;
            kPk += acc * k[j];
        }
        const double eta = x_eta ? x_eta->data[s] : 1.0;
        const float coef = (float)(eta / (1.0 + eta * kPk));
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) P->data[(size_t)i * d + j] -= coef * (u[i] * u[j]); /* exactly symmetric */
    }
}

static void rls_step(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out, ttt_tensor **state_out,
                     const ttt_tensor *W, const ttt_tensor *const *state, const ttt_tensor *G,
                     const ttt_optim_block *blk) {
    TTT_ASSERT(W->ndim <= 2);
    ttt_tensor *P = (ttt_tensor *)state[0];
    if (W->ndim == 1) { /* a vector: no inputs to learn a curvature from, P is a number */
        state_out[0] = P;
        *W_out = ttt_axpby(ctx, 1.0f, W, -blk->theta, ttt_mul(ctx, G, P));
        return;
    }
    const int d = W->shape[0];
    if (blk->x && TTT_COLS(blk->x) == d && !ttt_recording(ctx)) {
        /* nothing recorded: the same updates in place on one fresh P, without the d × d
         * temporaries of the ops below (tests/test_contract_optim.c compares this path, which its
         * finite differences run, with the recorded one, which its tape runs) */
        P = forget(ctx, P, blk);
        if (P == state[0]) P = ttt_tensor_copy(ctx, P);
        sm_inplace(ctx, P, blk->x, blk->x_eta);
    } else if (blk->x && TTT_COLS(blk->x) == d) {
        P = forget(ctx, P, blk);
        for (int s = 0; s < TTT_ROWS(blk->x); s++) {
            ttt_tensor *k = ttt_slice_rows(ctx, blk->x, s, s + 1); /* (1, d) */
            ttt_tensor *u = ttt_matmul(ctx, k, 0, P, 0);          /* k P = (P kᵀ)ᵀ, (1, d) */
            ttt_tensor *kPk = ttt_dot(ctx, u, k);                 /* (1) */
            /* η/(1 + η kPkᵀ), or 1/(1 + kPkᵀ) without learning rates */
            ttt_tensor *coef;
            if (blk->x_eta) {
                ttt_tensor *eta = ttt_slice_rows(ctx, blk->x_eta, s, s + 1); /* (1) */
                coef = ttt_div(ctx, eta, ttt_add_scalar(ctx, ttt_mul(ctx, eta, kPk), 1.0f));
            } else {
                ttt_tensor *one = ttt_tensor_zeros_like(ctx, kPk);
                ttt_tensor_fill(one, 1.0f);
                coef = ttt_div(ctx, one, ttt_add_scalar(ctx, kPk, 1.0f));
            }
            P = ttt_sub(ctx, P, ttt_mul(ctx, ttt_outer(ctx, u, u), coef));
        }
    }
    state_out[0] = P;
    *W_out = ttt_gemm(ctx, -blk->theta, P, 0, G, 0, 1.0f, W); /* W − θ P G */
}

static ttt_optim_traits rls_traits(const void *cfg) {
    return (ttt_optim_traits){.inputs = 1};
}

const ttt_optim ttt_optim_rls = {
    .name = "rls",
    .help = "recursive least squares: exact ridge regression after every token (linear model, "
            "squared loss); P <- Sherman-Morrison(P/decay, k); W <- W - lr*P*G",
    .options = rls_options,
    .cfg_size = sizeof(rls_cfg),
    .parse = rls_parse,
    .n_state = rls_n_state,
    .state_shape = rls_state_shape,
    .init_state = rls_init_state,
    .step = rls_step,
    .traits = rls_traits,
};
