/* Fast-weight models and inner losses (docs/math.md §2).
 *
 * A fast-weight model f(W; x) maps rows x (n, d_k) to predictions z (n, d_v) with weights
 * W = (W_0 … W_{m-1}); its `grad` is the analytic inner gradient, written in ops. An inner loss
 * ℓ(z, v) supplies ∂ℓ/∂z row by row. The generic layer combines the two:
 *     ∇_W Σ_s η_s ℓ(f(W; k_s), v_s) = model.grad(W, K, loss.grad(model.apply(W, K), V), η). */
#ifndef TTT_MODEL_H
#define TTT_MODEL_H

#include "status.h"
#include "ops.h"
#include "rng.h"

#define TTT_MAX_WEIGHTS 8

/* Traits a model declares (flags), for the computation forms' availability tests
 * (docs/forms.md "Traits"). */
enum {
    TTT_MODEL_LINEAR_MAP = 1 << 0,  /* f(W; x) = x W, one weight W (d_k, d_v) whose rows are the
                                     * key dimensions (a per-key gate scales its rows) */
    TTT_MODEL_RESIDUAL_LN = 1 << 1, /* f(W, b; x) = x + LN(x W + b), LN without affine
                                     * (TTT-Linear) */
    TTT_MODEL_SWIGLU = 1 << 2,      /* f(W; x) = (silu(x W0) ⊙ (x W2)) W1, no residual (LaCT) */
};

/* Traits of inner losses (flags). */
enum {
    TTT_LOSS_RESIDUAL = 1 << 0, /* ∂ℓ/∂z = z − v (½‖z − v‖² and its reconstruction variant) */
};

typedef struct ttt_model {
    const char *name;
    const char *help;
    /* Number of weight tensors. */
    int n_weights;
    /* Nonzero when the model needs d_k == d_v (residual models: x + g(x)). */
    int square;
    /* Shape of weight i for key/value dims (d_k, d_v); returns its ndim (1 or 2). */
    int (*shape)(int i, int d_k, int d_v, int *shape);
    /* Initial fast weights (preallocated with their shapes): e.g. zeros for the linear model. */
    void (*init)(ttt_tensor **W, int d_k, int d_v, ttt_rng *rng);
    /* z = f(W; x): x (n, d_k) → z (n, d_v). */
    ttt_tensor *(*apply)(ttt_ctx *ctx, const ttt_tensor *const *W, const ttt_tensor *x);
    /* G_i = Σ_s eta_s ∂ℓ_s/∂W_i given dz = ∂ℓ/∂z (n, d_v) at x (n, d_k); eta (n) or NULL (= 1).
     * Writes n_weights new tensors into G. */
    void (*grad)(ttt_ctx *ctx, ttt_tensor **G, const ttt_tensor *const *W, const ttt_tensor *x,
                 const ttt_tensor *dz, const ttt_tensor *eta);
    /* TTT_MODEL_* flags. */
    unsigned traits;
} ttt_model;

typedef struct ttt_loss {
    const char *name;
    const char *help;
    /* ∂ℓ/∂z (n, d_v) for predictions z and targets v (n, d_v). */
    ttt_tensor *(*grad)(ttt_ctx *ctx, const ttt_tensor *z, const ttt_tensor *v);
    /* Σ over rows of ℓ(z_s, v_s), in double. */
    double (*value)(const ttt_tensor *z, const ttt_tensor *v);
    /* Nonzero when ∂ℓ/∂z does not depend on z (the dot loss): the layer may skip apply. */
    int z_free;
    /* TTT_LOSS_* flags. */
    unsigned traits;
} ttt_loss;

const ttt_model *ttt_model_find(const char *name);
int ttt_model_count(void);
const ttt_model *ttt_model_at(int i);
const char *const *ttt_model_names(void);

const ttt_loss *ttt_loss_find(const char *name);
int ttt_loss_count(void);
const ttt_loss *ttt_loss_at(int i);
const char *const *ttt_loss_names(void);

#endif
