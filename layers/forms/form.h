/* What every computation form of a layer sees: the resolved layer (a tuple with its numbers,
 * docs/math.md §1), its state, and the choice among forms. The forms themselves are in the
 * family folders beside this header; layers/layer.h builds layers and runs them. */
#ifndef TTT_FORM_H
#define TTT_FORM_H

#include "model.h"
#include "optim.h"

#define TTT_MAX_OPT_STATE TTT_OPTIM_MAX_STATE /* optim.h: most state tensors per weight */
#define TTT_OPTIM_CFG_MAX 512

typedef enum ttt_order {
    TTT_ORDER_UPDATE_THEN_APPLY, /* token t reads the weights after its own update */
    TTT_ORDER_APPLY_THEN_UPDATE, /* every token of a block reads the weights from before it */
} ttt_order;

typedef enum ttt_form {
    TTT_FORM_GENERIC,   /* the generic driver over (model, loss, optimizer) */
    TTT_FORM_RECURRENT, /* a closed-form token-by-token kernel (layers/forms/kernels.h) */
    TTT_FORM_PARALLEL,  /* quadratic in T (MATH.md §5.1) */
    TTT_FORM_CHUNKWISE, /* chunks of `chunk` tokens (MATH.md §5.2, §5.3) */
    TTT_FORM_DUAL,      /* TTT-Linear mini-batch dual form (MATH.md §5.4) */
    TTT_FORM_COUNT
} ttt_form;

const char *ttt_form_name(ttt_form f);
/* The form named s, or -1. */
int ttt_form_from_name(const char *s);

typedef struct ttt_layer {
    const char *preset; /* name of the preset it came from, or NULL */
    const ttt_model *model;
    const ttt_loss *loss;
    const ttt_optim *optim;
    _Alignas(16) unsigned char optim_cfg[TTT_OPTIM_CFG_MAX]; /* the optimizer's parsed options */
    float lr;          /* θ */
    float decay;       /* constant retention, used when no per-token gates are given */
    int coupled;       /* decay placement: gradient at the decayed weights */
    int mini_batch;    /* b */
    ttt_order order;
    int step_per_token; /* steps: per_token — the optimizer steps after every token of a block
                         * (gradients still taken at the block start; Titans' chunked momentum);
                         * per_block (default) — one step per block with the summed gradient */
    int pos_inverse;   /* position_scale: inverse — token i of a block (from 0) reads with
                        * θ/(i+1) (TTT's τ_i, MATH.md §5.4); none (default) — θ */
    ttt_form form;
    int chunk;         /* chunk size C of the chunkwise forms */
    int sgd_plain;     /* the optimizer is sgd without extra terms (closed forms apply) */
    int momentum_plain; /* the optimizer is momentum without Nesterov (Titans' chunked form) */
    float momentum_mu;  /* its μ */
    float scale;
    int rope;          /* rotate q and k by their positions before the inner loop (MATH.md §4) */
    float rope_base;
    int normalize;     /* TTT_NORMALIZE_*: output normalization */
    int d_k, d_v;
} ttt_layer;

enum {
    TTT_NORMALIZE_NONE,
    TTT_NORMALIZE_RATIO, /* normalized linear attention: φ = elu+1 on q, k; o = q S / (q z + ε) */
    TTT_NORMALIZE_RMS,   /* post-norm (TransNormer): o = RMSNorm(o) */
};

/* Fast weights and optimizer state carried along a sequence (and across calls: a sequence split
 * in two and resumed with the carried state gives the same output as one pass). */
typedef struct ttt_layer_state {
    int n_w;                                          /* model->n_weights */
    int n_opt;                                        /* optimizer state tensors per weight */
    ttt_tensor *W[TTT_MAX_WEIGHTS];                   /* fast weights */
    /* optimizer state: opt[w][s] is state tensor s of weight w, of the shape the optimizer
     * declares (optim.h n_state, state_shape) */
    ttt_tensor *opt[TTT_MAX_WEIGHTS][TTT_MAX_OPT_STATE];
    ttt_tensor *z;    /* (d_k, 1) normalizer state of normalize: ratio, else NULL */
    long pos;         /* tokens processed so far (RoPE positions continue from here) */
} ttt_layer_state;

/* The closed-form family of a tuple (which fast forms exist for it). */
enum {
    TTT_FAMILY_NONE,
    TTT_FAMILY_LINEAR_ATTENTION, /* linear, dot, plain sgd, update_then_apply */
    TTT_FAMILY_DELTA_RULE,       /* linear, squared, plain sgd, b = 1, coupled or no decay */
    TTT_FAMILY_TTT_LINEAR,       /* ttt_linear, recon/squared, plain sgd, position_scale inverse */
    TTT_FAMILY_TITANS,           /* linear, squared, momentum (no Nesterov), steps per_token */
    TTT_FAMILY_LACT,             /* swiglu, dot/squared/recon, large_batch, apply_then_update,
                                  * steps per_block, lr > 0, no coupled decay */
};
int ttt_layer_family(const ttt_layer *L);

/* NULL when the layer's tuple can be computed in form f; otherwise a sentence saying why not.
 * Linear-attention family (linear model, dot loss, plain sgd, update_then_apply; any b, since
 * the dot loss's gradient does not depend on W): recurrent, parallel, chunkwise.
 * Delta-rule family (linear, squared, plain sgd, b = 1, update_then_apply, no decay or coupled
 * decay): recurrent, parallel, chunkwise. TTT-Linear (ttt_linear, recon or squared, plain sgd,
 * position_scale inverse, no decay, update_then_apply): dual. Titans (linear, squared, momentum
 * without Nesterov, steps per_token, no or decoupled scalar decay, update_then_apply): chunkwise
 * with the chunk = mini_batch. LaCT (swiglu, dot/squared/recon, large_batch, apply_then_update,
 * steps per_block, lr > 0, no coupled decay): chunkwise with the chunk = mini_batch
 * (layers/forms/lact/block.c). The generic form always applies. */
const char *ttt_layer_form_unavailable(const ttt_layer *L, ttt_form f);
/* The default for `form: auto`: the chunkwise form where it exists, else recurrent, else
 * generic. */
ttt_form ttt_layer_auto_form(const ttt_layer *L);

/* The generic driver (forms/generic/driver.c): any (model, loss, optimizer, b, ordering), token
 * by token, through ops (differentiable under a tape). Same contract as ttt_layer_forward after
 * its input transforms; alpha_vec: log_alpha is (T, d_k). */
ttt_status ttt_forward_generic(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                               ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                               const ttt_tensor *v, const ttt_tensor *eta,
                               const ttt_tensor *log_alpha, int alpha_vec, ttt_error *err);
/* The closed-form kernels without a tape (forms/registry.c). */
ttt_status ttt_forward_closed(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                              ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                              const ttt_tensor *v, const ttt_tensor *eta,
                              const ttt_tensor *log_alpha, int alpha_vec, ttt_error *err);

#endif
