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
#include "form.h"

/* One optimizer option given as a typed value (no YAML): the option's type in the optimizer's
 * table (ttt_optim.options) says which member is read. int, float and bool options read `number`
 * (bool: 0 or 1); choice and string options read `text`. */
typedef struct ttt_opt_value {
    const char *key;
    double number;
    const char *text;
} ttt_opt_value;

/* A named tuple (docs/math.md §4), as C data. Every field is a default the user can override. */
typedef struct ttt_preset {
    const char *name;
    const char *help;
    const char *model, *loss;
    const char *optimizer;        /* the optimizer's registry name */
    const ttt_opt_value *opts;    /* (n_opts) its options that differ from the table defaults */
    int n_opts;
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
/* The preset's optimizer in flow style for tables ("{name: sgd, decay: 0.99}"); returns buf. */
const char *ttt_preset_optimizer_text(const ttt_preset *p, char *buf, size_t len);

/* The `layer:` options (for `ttt list` and validation). */
extern const ttt_option ttt_layer_options[];

/* ------------------------------------------------------------------------------------------ */
/* A layer descriptor: the `layer:` options as C fields, for programs that build layers without
 * YAML (the public API in include/ttt/ttt.h mirrors it, docs/api.md). Every field starts "unset"
 * (ttt_layer_desc_init): an unset field takes the preset's value when a preset is named and
 * fixes it, else the documented default of ttt_layer_options / the optimizer's option table. */
#define TTT_UNSET_INT (-2147483647 - 1)
#define TTT_UNSET_NUM (-1.0e300) /* below every option's range, so never a real value */

typedef struct ttt_layer_desc {
    const char *preset;            /* NULL or "none": no preset */
    const char *model, *loss;      /* registry names */
    const char *optimizer;         /* registry name */
    const ttt_opt_value *opts;     /* (n_opts) the optimizer's own options (not name/lr/decay/
                                    * decay_placement, which are the fields below) */
    int n_opts;
    double lr, decay;              /* θ and the constant retention α */
    const char *decay_placement;   /* coupled | decoupled */
    int mini_batch;
    const char *order;             /* update_then_apply | apply_then_update */
    const char *steps;             /* per_block | per_token */
    const char *position_scale;    /* none | inverse */
    const char *form;              /* auto | generic | recurrent | parallel | chunkwise | dual */
    int chunk;
    double scale;
    int rope;                      /* 0 or 1 */
    double rope_base;
    const char *normalize;         /* none | ratio | rms */
} ttt_layer_desc;

/* Every field unset. */
void ttt_layer_desc_init(ttt_layer_desc *d);
/* Build the layer a descriptor names for key/value dims d_k, d_v. Errors name the field:
 * "layer.optimizer.momentum: expected a number in [0, 1], got 1.5". */
ttt_status ttt_layer_build(const ttt_layer_desc *d, int d_k, int d_v, ttt_layer *out,
                           ttt_error *err);

/* Validate the `layer:` mapping in place (fills every default, resolves `form: auto`), read it
 * into a descriptor and build the layer with ttt_layer_build for key/value dims d_k, d_v. Errors
 * name the file:line:col. */
ttt_status ttt_layer_parse(ttt_cfg_node *layer_map, int d_k, int d_v, ttt_layer *out,
                           ttt_error *err);
/* A short name for tables: the preset's name, or "model/loss/optimizer/b" for a custom tuple. */
const char *ttt_layer_describe(const ttt_layer *L, char *buf, size_t len);

/* Build a layer from names and numbers (tests, programs); optimizer options take defaults. */
ttt_status ttt_layer_init(ttt_layer *L, const char *model, const char *loss, const char *optim,
                          int mini_batch, ttt_order order, ttt_form form, int d_k, int d_v,
                          ttt_error *err);
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

/* Bytes of one sequence's layer state: the fast weights and the optimizer's state tensors (and
 * the normalizer of normalize: ratio). */
double ttt_layer_state_bytes(const ttt_layer *L);
/* An upper estimate of the bytes ttt_layer_forward allocates for one sequence of T tokens on
 * top of q, k, v, o and the state: the transformed inputs (scale, RoPE, feature map), the form's
 * scratch (T² floats for the parallel forms, C² per chunk for the chunkwise ones, b² for the
 * dual and Titans forms) and the generic driver's copies of the state. Sizes the machine cannot
 * hold are refused by ttt_size_check (tensor.h) before anything is allocated. */
double ttt_layer_forward_bytes(const ttt_layer *L, long T);

/* ------------------------------------------------------------------------------------------ */
/* Batched forward on caller buffers in the (B, T, H, D) layout (layers/batch.c): every
 * (batch, head) pair is one independent sequence (docs/math.md §0).
 *
 * The state of one sequence as a flat list of tensors: the fast weights, then each weight's
 * optimizer state tensors (weight 0's, then weight 1's, …), then the normalizer z of
 * normalize: ratio. */
int ttt_layer_state_count(const ttt_layer *L);
/* Name and shape (one sequence's, without B and H) of state tensor i; returns its ndim, or -1
 * when i is out of range. */
int ttt_layer_state_info(const ttt_layer *L, int i, const char **name, int shape[TTT_MAX_DIMS]);

typedef struct ttt_layer_io {
    int B, T, H;
    float *o;                       /* (B, T, H, d_v) written */
    const float *q, *k;             /* (B, T, H, d_k) */
    const float *v;                 /* (B, T, H, d_v) */
    const float *eta;               /* (B, T, H) or NULL */
    const float *log_alpha;         /* (B, T, H) or, with alpha_vec, (B, T, H, d_k); or NULL */
    int alpha_vec;
    const float *const *state_in;   /* NULL, or state_in[i] (B, H, shape_i…) or NULL = initial
                                     * state */
    float *const *state_out;        /* NULL, or state_out[i] (B, H, shape_i…) or NULL = not
                                     * wanted */
    uint64_t seed;                  /* the models' random initial weights */
} ttt_layer_io;

/* Run the layer over every (b, h) sequence; threads ≥ 1 runs that many, 0 = the default. */
ttt_status ttt_layer_forward_batch(const ttt_layer *L, const ttt_layer_io *io, int threads,
                                   ttt_error *err);

#endif
