/* The generic TTT layer: a tuple (fast-weight model, inner loss, inner optimizer, mini-batch size
 * b, ordering) run over a sequence (docs/math.md §1), plus the presets that name the classic layers
 * (docs/math.md §4) and the closed forms they can use instead of the generic driver.
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
 *     form: auto                  # generic | recurrent | parallel | chunkwise | dual (the
 *                                 # registry's names, layers/forms/form_list.h); auto picks per
 *                                 # call among the forms available for the call's inputs
 *     chunk: 16                   # chunk size of the chunkwise forms
 *     scale: 1.0                  # queries are multiplied by this before read-out
 *     rope: false                 # rotary positions on q and k (rope_base: 10000)
 *     normalize: none             # ratio (normalized linear attention) | rms (post-norm)
 *     feature_map: elu1           # φ of normalize: ratio: elu1 | favor | favor_orth | rfa
 *                                 # (layers/forms/linear_attention/feature_maps.h)
 *     features: 64                # m, random features of favor, favor_orth, rfa
 *     feature_seed: 0             # seeds the random matrix (fixed for the layer's life)
 *     feature_gate: false         # RFA's gate: token t writes with weight 1 − α_t
 *     steps_per_token: 1          # n_h delta-rule steps per token on n_h key/value pairs
 *                                 # (Gated DeltaProduct, docs/math.md §4.7)
 *     levels: 1                   # Λ Fenwick levels of state, each read with its own query
 *                                 # (log-linear attention, docs/math.md §4.8) */
#ifndef TTT_LAYER_H
#define TTT_LAYER_H

#include <stdint.h>

#include "config.h"
#include "form.h"

/* The block a preset's layer sits in when the sequence model trains it (src/train/mixers/ttt.c):
 * the choices of the preset's paper and of FLA's layer of the same name, one row per preset,
 * with their sources in docs/mixers.md. Each string is a value of the `model:` option of the
 * same name, and is what that option's `auto` means for the preset; rope and normalize are the
 * layer's own options, applied when the `layer:` section leaves them unset. A preset without a
 * row (conv = 0 and every string NULL) leaves `auto` to the rules of the tuple's traits. */
typedef struct ttt_block_defaults {
    const char *conv;       /* short causal convolution kernel on q, k, v: "4", or "0" = none */
    const char *act;        /* activation of q, k, v (after the convolution): silu | none */
    const char *qk_norm;    /* L2 normalization of q and k per head: true | false */
    const char *eta;        /* per-token write strength: true (sigmoid) | false | dt */
    const char *gate;       /* forget gate: none | constant | scalar | vector | multiscale */
    const char *out_norm;   /* RMSNorm of each head's output: true | false */
    const char *out_gate;   /* output gate silu(x W_g): true | false */
    const char *learn_init; /* initial fast weights learned: true | false */
    const char *rope;       /* layer.rope when unset: true | false */
    const char *normalize;  /* layer.normalize when unset: none | ratio | rms */
} ttt_block_defaults;

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
    const char *normalize;      /* NULL (the option's default) or none | ratio | rms */
    const char *feature_map;    /* NULL (the option's default) or a feature map's name */
    ttt_block_defaults block;   /* its block in the trained sequence model */
    int steps_per_token;        /* 0 (= 1) or n_h, the delta steps per token (DeltaProduct) */
    int levels;                 /* 0 (= 1) or Λ, the Fenwick levels (log-linear attention) */
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
    const char *feature_map;       /* elu1 | favor | favor_orth | rfa (normalize: ratio) */
    int features;                  /* m */
    int feature_seed;
    int feature_gate;              /* 0 or 1 */
    int steps_per_token;           /* n_h ≥ 1: delta-rule steps per token (form.h, substeps) */
    int levels;                    /* Λ ≥ 1: Fenwick levels of state (form.h, levels) */
} ttt_layer_desc;

/* Every field unset. */
void ttt_layer_desc_init(ttt_layer_desc *d);
/* Build the layer a descriptor names for key/value dims d_k, d_v. Errors name the field:
 * "layer.optimizer.momentum: expected a number in [0, 1], got 1.5". */
ttt_status ttt_layer_build(const ttt_layer_desc *d, int d_k, int d_v, ttt_layer *out,
                           ttt_error *err);

/* Check the keys the `layer:` mapping gives and read them once into a descriptor, resolve it
 * (the preset's values, then the defaults) and build the layer from the resolved values, as
 * ttt_layer_build does, for key/value dims d_k, d_v. `map` is only read. *resolved (when not
 * NULL) receives the section as config.resolved.yaml shows it, a new tree the caller owns: the
 * given keys, then every resolved value the section left out, rendered from its typed value
 * (`form: auto` stays auto: the form is chosen per call, for the inputs given). in_block: the
 * layer of a TTT mixer's block (src/train/mixers/ttt.c), where the preset's block row
 * (ttt_block_defaults) also gives rope and normalize when the section leaves them unset, as the
 * preset gives the rest of the tuple, and where `mixer` (the sequence model's shorthand) is left
 * to the model. Errors name the file:line:col. */
ttt_status ttt_layer_parse_section(const ttt_cfg_node *map, int d_k, int d_v, int in_block,
                                   ttt_layer *out, ttt_cfg_node **resolved, ttt_error *err);
/* The same for a caller that holds the section alone (`ttt apply`, the tests): layer_map is
 * replaced by its rendering (ttt_layer_parse: not in a block; ttt_layer_parse_block: in one). */
ttt_status ttt_layer_parse(ttt_cfg_node *layer_map, int d_k, int d_v, ttt_layer *out,
                           ttt_error *err);
ttt_status ttt_layer_parse_block(ttt_cfg_node *layer_map, int d_k, int d_v, ttt_layer *out,
                                 ttt_error *err);
/* The layer its computation forms see: key width d_phi (the feature map's output width) in place
 * of the input width d_k. Forms, their scratch estimates and the state are sized by it. */
ttt_layer ttt_layer_inner(const ttt_layer *L);
/* A short name for tables: the preset's name, or "model/loss/optimizer/b" for a custom tuple. */
const char *ttt_layer_describe(const ttt_layer *L, char *buf, size_t len);

/* Build a layer from names and numbers (tests, programs); optimizer options take defaults. */
ttt_status ttt_layer_init(ttt_layer *L, const char *model, const char *loss, const char *optim,
                          int mini_batch, ttt_order order, const char *form, int d_k, int d_v,
                          ttt_error *err);

/* The name of the form a call with inputs `in` runs (form: auto resolves per call), or "none"
 * when no form is available for them: what records and descriptions report. */
const char *ttt_layer_form_used(const ttt_layer *L, const ttt_form_inputs *in);
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
 * top of q, k, v, o and the state: the transformed inputs (scale, RoPE, feature map) and the
 * largest scratch_bytes (form.h) among the registry entries the call may run (L->form's entries;
 * for auto, every entry auto may choose, the generic driver included). Sizes the machine cannot
 * hold are refused by ttt_size_check (tensor.h) before anything is allocated. */
double ttt_layer_forward_bytes(const ttt_layer *L, long T);

/* ---- batched runs on caller buffers (layers/batch.c) ---- */

#define TTT_BATCH_MAX_STATE (TTT_MAX_WEIGHTS * (1 + TTT_MAX_OPT_STATE) + 1)
#define TTT_BATCH_MAX_THREADS 256

/* The tensors of a layer's carried state, in order: the model's weights, then for each weight the
 * optimizer's state tensors, then the normalizer z of normalize: ratio. Per sequence. Names:
 * "W" (or "W.0", "W.1", … for models with several weights), "W.opt0", … ("W.0.opt0", …) for the
 * optimizer's state of each weight, "z". */
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
    const float *const *state_in;   /* NULL, or state_in[i] (B, H, shape_i…) or NULL = the layer's initial state */
    float *const *state_out;        /* NULL, or state_out[i] (B, H, shape_i…) or NULL = not wanted */
    uint64_t seed;                  /* initial weights of models with random init */
} ttt_layer_io;

/* Run layer L (no tape) on every (batch, head) sequence of the (B, T, H, D) arrays of io, in
 * parallel over `threads` OpenMP threads (0: OpenMP's default), single-threaded BLAS inside each;
 * the outputs are bit-identical for every thread count. Each sequence starts from state_in (a
 * weight given without its optimizer state gets that state rebuilt from it, as at
 * initialization) and ends in state_out, so a sequence split in two and continued with the full
 * carried state gives the output of one call. Models with random initial weights draw them from
 * `seed`, one stream per head (the same for every batch element). RoPE positions start at 0 in
 * every call. Layers whose form has a strided kernel (form.h, forward_strided) run in place on
 * the arrays (TTT_APPLY_GATHER=1 in the environment forces the copies). Errors name the batch
 * and head. */
ttt_status ttt_layer_forward_batch(const ttt_layer *L, const ttt_layer_io *io, int threads, ttt_error *err);
/* TTT_OK when every buffer of a (B, T, H) call of L — inputs, outputs, gates per key dimension,
 * each state tensor — has a byte count that fits in a ptrdiff_t, so that no index computed from
 * the sizes can wrap; else TTT_ERR_SHAPE naming the sizes. B, T, H ≥ 0. */
ttt_status ttt_layer_batch_check_sizes(const ttt_layer *L, long B, long T, long H, ttt_error *err);

/* Packed variable-length batches (docs/api.md "Packed sequences"): cu holds n_seqs + 1 token
 * offsets 0 = cu[0] ≤ … ≤ cu[n_seqs] = T of B = 1 rows; sequence n is tokens
 * [cu[n], cu[n+1]). The check names the offsets `what` ("io->cu_seqlens", "tensor
 * 'cu_seqlens'") and the index of the first bad one. */
ttt_status ttt_layer_check_cu_seqlens(const int64_t *cu, int n_seqs, int B, int T,
                                      const char *what, ttt_error *err);
/* ttt_layer_forward_batch on each sequence of a packed io as a call of its own (B = 1, T = its
 * length, its state afresh), one after the other: the outputs are those calls' bit for bit.
 * io's states are (n_seqs, H, shape_i…). */
ttt_status ttt_layer_forward_packed(const ttt_layer *L, const ttt_layer_io *io,
                                    const int64_t *cu, int n_seqs, int threads, ttt_error *err);

/* The inputs the form registry sees for a batched call on `device`: a constant decay other than
 * 1 is a gate per token (as ttt_layer_forward_batch describes it). */
ttt_form_inputs ttt_layer_batch_inputs(const ttt_layer *L, int T, int has_eta, int has_la,
                                       int alpha_vec, ttt_device_kind device);
/* Layer L on every (batch, head) sequence of io at once, through the batched call of the entry
 * that form: L->form chooses for io's device (docs/design.md "Devices"): a CUDA entry launches
 * one grid for the batch on io->stream and returns before the device is done. The caller has
 * checked where the buffers live (src/app/api_device.c). *used (may be NULL) gets the entry.
 * TTT_ERR_UNSUPPORTED, naming the tuple, when no entry of that device computes L. */
ttt_status ttt_layer_forward_batched(const ttt_layer *L, const ttt_form_batch *io,
                                     const ttt_form_entry **used, ttt_error *err);
/* Its gradients (form.h, ttt_form_batch_grad), o and the final state written as by the
 * forward. */
ttt_status ttt_layer_backward_batched(const ttt_layer *L, const ttt_form_batch *io,
                                      const ttt_form_batch_grad *g, ttt_error *err);
/* The bytes io->kept needs for a kept forward of io (0: the entry that computes it keeps
 * nothing, or no entry does). */
size_t ttt_layer_kept_bytes_batched(const ttt_layer *L, const ttt_form_batch *io);

/* The threads ttt_layer_forward_batch runs for `threads` and n_seq sequences. */
int ttt_layer_batch_threads(int threads, long n_seq);
/* Bytes one of its threads allocates for a sequence of T tokens (slices and arena). */
double ttt_layer_batch_work_bytes(const ttt_layer *L, long T);
/* A buffer for large outputs written once: 2 MiB aligned and advised as huge pages (fewer page
 * faults on first touch). Released with free(). */
void *ttt_batch_alloc(size_t bytes);

#endif
