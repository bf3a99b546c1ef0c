/* The generic TTT layer: a tuple (fast-weight model, inner loss, inner optimizer, mini-batch size
 * b, ordering) run over a sequence (MATH.md §1), plus the presets that name the classic layers
 * (MATH.md §4) and the closed forms they can use instead of the generic driver.
 *
 * YAML (`layer:` section of an experiment):
 *     preset: deltanet            # optional: fills in the tuple below
 *     model: linear               # see `ttt list`
 *     loss: squared
 *     optimizer: {name: sgd, lr: 1.0, decay: 1.0, decay_placement: decoupled}
 *     mini_batch: 1
 *     order: update_then_apply    # or apply_then_update
 *     steps: per_block            # or per_token (optimizer state advances every token)
 *     position_scale: none        # or inverse: θ_i = θ/(i+1) inside a block (TTT)
 *     form: auto                  # generic | recurrent | parallel | chunkwise | dual; auto picks
 *     chunk: 16                   # chunk size of the chunkwise forms
 *     scale: 1.0                  # queries are multiplied by this before read-out
 *     rope: false                 # rotary positions on q and k (rope_base: 10000)
 *     normalize: none             # ratio (normalized linear attention) | rms (post-norm) */
#ifndef TTT_LAYER_H
#define TTT_LAYER_H

#include "config.h"
#include "model.h"
#include "optim.h"

#define TTT_MAX_OPT_STATE 4
#define TTT_OPTIM_CFG_MAX 512

typedef enum ttt_order {
    TTT_ORDER_UPDATE_THEN_APPLY, /* token t reads the weights after its own update */
    TTT_ORDER_APPLY_THEN_UPDATE, /* every token of a block reads the weights from before it */
} ttt_order;

typedef enum ttt_form {
    TTT_FORM_GENERIC,   /* the generic driver over (model, loss, optimizer) */
    TTT_FORM_RECURRENT, /* a closed-form token-by-token kernel (layers/forms.h) */
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
    ttt_tensor *opt[TTT_MAX_WEIGHTS][TTT_MAX_OPT_STATE]; /* optimizer state, per weight */
    ttt_tensor *z;    /* (d_k, 1) normalizer state of normalize: ratio, else NULL */
    long pos;         /* tokens processed so far (RoPE positions continue from here) */
} ttt_layer_state;

/* A named tuple (MATH.md §4). Every field is a default the user can override in YAML. */
typedef struct ttt_preset {
    const char *name;
    const char *help;
    const char *model, *loss;
    /* The optimizer as YAML flow text, e.g. "{name: momentum, momentum: 0.9, decay: 0.99}". */
    const char *optimizer;
    int mini_batch;
    const char *order;          /* update_then_apply | apply_then_update */
    const char *steps;          /* per_block | per_token */
    const char *position_scale; /* none | inverse */
    const char *recurrence;     /* the recurrence it must equal, for `ttt list` */
} ttt_preset;

const ttt_preset *ttt_preset_find(const char *name);
int ttt_preset_count(void);
const ttt_preset *ttt_preset_at(int i);
const char *const *ttt_preset_names(void);

/* The `layer:` options (for `ttt list` and validation). */
extern const ttt_option ttt_layer_options[];

/* Validate the `layer:` mapping in place (fills every default, resolves `form: auto`) and build
 * the layer for key/value dims d_k, d_v. Errors name the file:line:col. */
ttt_status ttt_layer_parse(ttt_cfg_node *layer_map, int d_k, int d_v, ttt_layer *out,
                           ttt_error *err);
/* A short name for tables: the preset's name, or "model/loss/optimizer/b" for a custom tuple. */
const char *ttt_layer_describe(const ttt_layer *L, char *buf, size_t len);

/* Build a layer from names and numbers (tests, programs); optimizer options take defaults.
 * preset may be NULL. */
ttt_status ttt_layer_init(ttt_layer *L, const char *model, const char *loss, const char *optim,
                          int mini_batch, ttt_order order, ttt_form form, int d_k, int d_v,
                          ttt_error *err);
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
 * (layers/lact_composed.c). The generic form always applies. */
const char *ttt_layer_form_unavailable(const ttt_layer *L, ttt_form f);
/* The default for `form: auto`: the chunkwise form where it exists, else recurrent, else
 * generic. */
ttt_form ttt_layer_auto_form(const ttt_layer *L);

/* Allocate the state in ctx and set it to the model's initial weights and zero optimizer state. */
void ttt_layer_state_init(ttt_ctx *ctx, const ttt_layer *L, ttt_layer_state *st, ttt_rng *rng);

/* Run the layer over one sequence (one head).
 *   o          (T, d_v)   output, written
 *   st         state: initial on entry, final on return (updated in place)
 *   q, k       (T, d_k)
 *   v          (T, d_v)
 *   eta        (T) per-token learning rates η_t, or NULL (= 1)
 *   log_alpha  (T) per-token log retention, or (T, d_k) per key dimension, or NULL (then the
 *              constant L->decay applies)
 * Temporaries are released from ctx->arena before returning. */
ttt_status ttt_layer_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                             ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                             const ttt_tensor *v, const ttt_tensor *eta,
                             const ttt_tensor *log_alpha, ttt_error *err);

/* Query the current fast weights without writing: o = f(W; q) for every row of q, with the layer's
 * query transforms (scale, RoPE at the next position st->pos, feature map) and output
 * normalization, as the next token would read them. Used by tasks that write, then probe.
 *   o (n, d_v), q (n, d_k). */
ttt_status ttt_layer_read(ttt_ctx *ctx, const ttt_layer *L, const ttt_layer_state *st,
                          ttt_tensor *o, const ttt_tensor *q, ttt_error *err);

#endif
