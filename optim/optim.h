/* The inner-optimizer interface (docs/math.md §3).
 *
 * The generic TTT layer (layers/layer.c) turns a block of tokens into a block gradient
 *     G = Σ_s (A_blk / A_s) η_s ∇ℓ_s          (per-token learning rates η_s, decay A, docs/math.md §1)
 * and hands it to an optimizer, which owns everything after that: momentum buffers,
 * orthogonalization, renormalization, and how the decay factor enters its rule. An optimizer is
 * one C file that defines a `const ttt_optim` and one line in optim/optim_list.h. Its rule is
 * usually a short composition of the parts in optim/parts.h (momentum, orthogonalization,
 * update, renormalization), and tests/test_contract_optim.c checks every registered optimizer
 * against the contract below without being edited (docs/optimizers.md).
 *
 * Every optimizer accepts the common options of TTT_OPTIM_COMMON_OPTIONS (lr = θ, decay,
 * decay_placement); the layer reads those, the optimizer reads its own through `parse`. */
#ifndef TTT_OPTIM_H
#define TTT_OPTIM_H

#include "config.h"
#include "ops.h"

/* One optimizer option given as a typed value (no YAML): the option's type in the optimizer's
 * table (ttt_optim.options) says which member is read. int, float and bool options read `number`
 * (bool: 0 or 1); choice and string options read `text`. */
typedef struct ttt_opt_value {
    const char *key;
    double number;
    const char *text;
} ttt_opt_value;

/* An optimizer's options as `parse` receives them: read once into typed values by the layer
 * (layers/layer_resolve.c), one per entry of the optimizer's table and in its order, each with
 * where it was written: the YAML node of the value, or NULL for a C descriptor's field, a
 * preset's value or the table's default. A cross-field error is located there from the start
 * (ttt_optim_arg_error). */
typedef struct ttt_optim_args {
    const ttt_option *options;      /* the optimizer's table (ttt_optim.options) */
    const ttt_opt_value *values;    /* one per table entry */
    const ttt_cfg_node *const *at;  /* one per table entry, each NULL or the value's node */
} ttt_optim_args;

/* What one step knows about its block. */
typedef struct ttt_optim_block {
    int t0;                   /* index of the block's first token */
    int n;                    /* tokens in the block (the last block may be shorter than b) */
    float theta;              /* block-level learning rate θ (option `lr`) */
    /* Decay to apply to the weights in this step (the product of the per-token retentions over
     * the block, docs/math.md §3): a 1-element tensor (scalar decay) or a tensor with one entry per
     * row of W (GLA's decay per key dimension); NULL = no decay. A tensor, not a float, so that
     * outer-loop training differentiates through learned gates. Apply it with
     * ttt_optim_apply_decay. */
    const ttt_tensor *decay;
    /* The optimizer's outer-loop parameters (its `outer` declaration below, in that order), as
     * tensors so that the tape differentiates into them; NULL = their initial values (what
     * `outer_init` writes). The layer passes the ones its state carries (ttt_layer_state.outer). */
    const ttt_tensor *const *outer;
    /* The inputs of the block's tokens to the fast-weight model, one row per token (the keys
     * k_{t0..t0+n−1} for the linear model; (n, d_k)), and their learning rates η ((n), NULL =
     * 1). Second-order rules need them (rls: the curvature of a linear layer under the squared
     * loss is Σ η k kᵀ, which the block gradient G alone does not determine). NULL when the
     * caller has none to give; every rule must then still step (see optim/rls.c). */
    const ttt_tensor *x;
    const ttt_tensor *x_eta;
} ttt_optim_block;

/* Most outer-loop parameter tensors an optimizer may declare. */
#define TTT_OPTIM_MAX_OUTER 8

/* One outer-loop parameter tensor of an optimizer (a learned optimizer's network weights). */
typedef struct ttt_optim_param {
    const char *name;            /* short name for parameter tables and checkpoints ("w1") */
    int ndim;
    int shape[TTT_MAX_DIMS];
} ttt_optim_param;

/* What a step does, declared by the optimizer for its parsed options, so that computation forms
 * can tell whether their closed-form algebra holds (docs/forms.md "Traits") without knowing
 * optimizers by name. Zero = not claimed. */
typedef struct ttt_optim_traits {
    int plain_sgd;   /* the step is exactly W ← α·W − θ·G (no state, no extra terms): linear
                      * attention, the delta rule, TTT's dual form */
    int momentum;    /* heavy-ball momentum without Nesterov, M ← μ·M − θ·G, W ← α·W + M, one
                      * state tensor M: Titans' chunked form */
    float mu;        /* its μ */
    int linear_in_G; /* the step is linear in G (θ·η may be folded into the gradient) */
    int block_step;  /* meant to step once per block of many tokens, from the block-start
                      * weights (LaCT's large-batch update): the per-block form applies */
    int inputs;      /* the step reads the block's inputs blk->x, blk->x_eta (rls): callers
                      * that can supply them do; others may leave them NULL */
    float ridge;     /* > 0: the step is the exact ridge solution W = (H + ridge·I)⁻¹ G of
                      * statistics H = Σ γ-decayed β kᵀk, G = Σ γ-decayed β kᵀv kept as its two
                      * state tensors, the regularizer never decayed (mesa, MesaNet): the
                      * mesa_net forms */
    int cg_steps;    /* with ridge: conjugate-gradient steps of the mesa_net cg form's query-side
                      * solve (0: exact) */
    int cg_jacobi;   /* with ridge: CG starts from the Jacobi guess q/(diag H + ridge), not 0 */
} ttt_optim_traits;

typedef struct ttt_optim {
    /* Registry name, used in YAML (`layer.optimizer.name`). */
    const char *name;
    /* One line for `ttt list`. */
    const char *help;
    /* Its YAML options (layer.optimizer.*), TTT_OPTION_END-terminated; must begin with
     * TTT_OPTIM_COMMON_OPTIONS. */
    const ttt_option *options;
    /* Size in bytes of its parsed configuration (0 if it has none). */
    size_t cfg_size;
    /* Read the validated options into cfg (cfg_size bytes, zeroed): ttt_optim_arg_num and
     * ttt_optim_arg_text by key. Cross-field checks return a located error
     * (ttt_optim_arg_error). May be NULL when cfg_size == 0. */
    ttt_status (*parse)(void *cfg, const ttt_optim_args *opts, ttt_error *err);
    /* Number of state tensors it keeps per weight tensor (at most TTT_OPTIM_MAX_STATE; it may
     * depend on the options: muon keeps its momentum buffer only when μ > 0). State tensor s of
     * weight w lives in ttt_layer_state.opt[w][s], in the order the optimizer chooses. */
    int (*n_state)(const void *cfg);
    /* The shape of state tensor i (0 ≤ i < n_state) kept for a weight of shape
     * w_shape[0..w_ndim-1]: writes shape[0..nd-1] and returns nd (1 ≤ nd ≤ TTT_MAX_DIMS). The
     * layer allocates exactly these shapes (zeroed) before init_state, copies and estimates
     * them (layers/layer.c, layers/layer_memory.c, the generic driver's block buffers), and
     * step / init_state_ops must return tensors of the same shapes. A scalar (Adam's step
     * count) is shape (1); a statistic per channel a vector (large_batch's target norms);
     * a moment buffer the weight's own shape. State stays tensors, never hidden C fields, so
     * that the tape differentiates through it and callers can carry it from one call to the
     * next. Must depend only on cfg and the weight's shape. NULL: every state tensor has the
     * weight's shape. See docs/optimizers.md "State". */
    int (*state_shape)(const void *cfg, int *shape, int i, const int *w_shape, int w_ndim);
    /* Initialize the state of one weight tensor W (state[0..n_state-1], preallocated with the
     * shapes of state_shape, zeroed). NULL: zeros are the initial state. */
    void (*init_state)(const void *cfg, ttt_tensor **state, const ttt_tensor *W);
    /* The same initial state built through ops from W (new tensors in state[0..n_state-1], of
     * the shapes of state_shape), for an optimizer whose state depends on the weights
     * (large_batch: the renormalization target ‖W_0‖ per channel). Initial weights that are
     * themselves outer-loop parameters (learned W_0, src/train/seqmodel.c) replace the weights
     * after ttt_layer_state_init and rebuild the state with it (ttt_optim_reinit_state below),
     * so that the state holds THEIR values and, under a tape, the outer loop differentiates
     * through them (LaCT computes ‖W_0‖ in its graph). NULL: the state does not depend on W
     * beyond what init_state computes. */
    void (*init_state_ops)(ttt_ctx *ctx, const void *cfg, ttt_tensor **state,
                           const ttt_tensor *W);
    /* One step for one weight tensor: from W (before the block), the block gradient G and the
     * state, compute the new weights and state. Functional: results are new tensors allocated
     * through ops in ctx (or an input passed on unchanged, see large_batch's norms); inputs are
     * not modified. state_out has n_state slots, each receiving a tensor of its declared
     * shape. tests/test_contract_optim.c holds every registered optimizer to this. */
    void (*step)(ttt_ctx *ctx, const void *cfg, ttt_tensor **W_out, ttt_tensor **state_out,
                 const ttt_tensor *W, const ttt_tensor *const *state, const ttt_tensor *G,
                 const ttt_optim_block *blk);
    /* Its traits for the parsed options cfg. NULL: none claimed (only the generic driver
     * computes layers with it). */
    ttt_optim_traits (*traits)(const void *cfg);
    /* Outer-loop parameters of the rule itself (docs/optimizers.md "Outer parameters"): writes
     * the declaration of each into decl[0..n−1] and returns n (at most TTT_OPTIM_MAX_OUTER), for
     * the parsed options cfg. They are shared by every weight tensor and every token of a layer
     * (a learned optimizer's network, applied coordinatewise), trained by the outer loop like
     * any model parameter (AdamW), and reach `step` as blk->outer. Must depend only on cfg.
     * NULL: none (every hand-written rule). */
    int (*outer)(const void *cfg, ttt_optim_param *decl);
    /* Their initial values into P[0..n−1] (preallocated with the declared shapes, zeroed): a
     * deterministic function of cfg, chosen so that the rule at its initialization is a
     * hand-written one it can express (learned: sgd or momentum). NULL: zeros. */
    void (*outer_init)(const void *cfg, ttt_tensor **P);
} ttt_optim;

/* The options every optimizer accepts (first in its table). */
#define TTT_OPTIM_COMMON_OPTIONS                                                               \
    {"name", TTT_OPT_STRING, NULL, TTT_NO_RANGE, NULL, "which optimizer (see `ttt list`)"},    \
    {"lr", TTT_OPT_FLOAT, "1.0", 0.0, 1e6, NULL, "block learning rate θ (docs/math.md §3)"},        \
    {"decay", TTT_OPT_FLOAT, "1.0", 1e-9, 1.0, NULL,                                          \
     "constant retention α per token (1 = no forgetting); per-token gates override it"},     \
    {"decay_placement", TTT_OPT_CHOICE, "decoupled", TTT_NO_RANGE, "coupled|decoupled",        \
     "coupled: gradient at the decayed weights (Gated DeltaNet); decoupled: at the old ones"}

/* α·W with the block's scalar or per-row decay (helper for optimizers' rules); returns W itself
 * when there is no decay (ops never modify their inputs, so sharing is safe). */
ttt_tensor *ttt_optim_apply_decay(ttt_ctx *ctx, const ttt_tensor *W, const ttt_optim_block *blk);

/* ---- state (declared by n_state / state_shape, see docs/optimizers.md "State") ---- */

/* Most state tensors per weight an optimizer may declare (the size of ttt_layer_state.opt's
 * second dimension). */
#define TTT_OPTIM_MAX_STATE 4

/* n_state(cfg), 0 when the slot is NULL. */
int ttt_optim_n_state(const ttt_optim *o, const void *cfg);

/* The declared shape of state tensor i for a weight of shape w_shape[0..w_ndim-1] (the
 * weight's own shape when state_shape is NULL): writes shape, returns its ndim. */
int ttt_optim_state_shape(const ttt_optim *o, const void *cfg, int *shape, int i,
                          const int *w_shape, int w_ndim);

/* Floats of all the state kept for one weight of shape w_shape (memory estimates). */
double ttt_optim_state_floats(const ttt_optim *o, const void *cfg, const int *w_shape,
                              int w_ndim);

/* Allocate the initial state of weight W in ctx: n_state zeroed tensors of the declared shapes
 * in state[0..n_state-1], then init_state. Returns n_state. What ttt_layer_state_init runs for
 * every weight. */
int ttt_optim_state_new(ttt_ctx *ctx, const ttt_optim *o, const void *cfg, ttt_tensor **state,
                        const ttt_tensor *W);

/* Rebuild the n_state state tensors of weight W after W replaced the weights that
 * ttt_layer_state_init initialized them from: through init_state_ops when the optimizer has it
 * (differentiable w.r.t. W), else by init_state on fresh zeroed tensors of the declared shapes
 * (the right values, as constants), else nothing (zero state does not depend on W). */
void ttt_optim_reinit_state(ttt_ctx *ctx, const ttt_optim *o, const void *cfg,
                            ttt_tensor **state, int n_state, const ttt_tensor *W);

/* Read the `momentum` option μ ∈ [0, 1) (the table's ranges are inclusive; μ = 1 would never
 * forget a gradient) with a located error. */
ttt_status ttt_optim_read_momentum(const ttt_optim_args *opts, float *mu, ttt_error *err);

/* ---- options (ttt_optim_args) ---- */

/* The value of option `key` of an int, float or bool option (bool: 0 or 1), and the text of a
 * choice or string option. The key must be in the optimizer's table (a bug otherwise). */
double ttt_optim_arg_num(const ttt_optim_args *a, const char *key);
const char *ttt_optim_arg_text(const ttt_optim_args *a, const char *key);
/* An error about option `key`: "file:line:col: message" when the value was written in YAML,
 * the message alone otherwise. */
ttt_status ttt_optim_arg_error(ttt_error *err, ttt_status s, const ttt_optim_args *a,
                               const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The first of the optimizer's own options in its table: the entry after the common ones
 * (TTT_OPTIM_COMMON_OPTIONS, which every table begins with). */
const ttt_option *ttt_optim_own_options(const ttt_optim *o);
/* Whether table entry `opt` of optimizer o is one of the common options. */
int ttt_optim_is_common(const ttt_optim *o, const ttt_option *opt);

/* ---- outer parameters (declared by `outer`, docs/optimizers.md "Outer parameters") ---- */

/* outer(cfg, decl), 0 when the slot is NULL; decl may be NULL when only the count is wanted. */
int ttt_optim_n_outer(const ttt_optim *o, const void *cfg, ttt_optim_param *decl);

/* Allocate the initial outer parameters in ctx: n zeroed tensors of the declared shapes in
 * P[0..n−1], then outer_init. Returns n. */
int ttt_optim_outer_new(ttt_ctx *ctx, const ttt_optim *o, const void *cfg, ttt_tensor **P);

/* Floats of all the outer parameters (parameter counts, memory estimates). */
double ttt_optim_outer_floats(const ttt_optim *o, const void *cfg);

/* ---- registry ---- */

const ttt_optim *ttt_optim_find(const char *name);
int ttt_optim_count(void);
const ttt_optim *ttt_optim_at(int i);
/* Names of all registered optimizers (static array, n = ttt_optim_count()). */
const char *const *ttt_optim_names(void);

#endif
