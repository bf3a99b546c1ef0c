/* What every computation form of a layer sees: the resolved layer (a tuple with its numbers,
 * docs/math.md §1), its state, and the registry of forms with the choice among them (docs/forms.md).
 * The forms themselves are in the family folders beside this header, one registry entry each
 * (form_list.h); layers/layer.h builds layers and runs them. */
#ifndef TTT_FORM_H
#define TTT_FORM_H

#include "device.h"
#include "model.h"
#include "optim.h"
#include "kernels.h"

#define TTT_MAX_OPT_STATE TTT_OPTIM_MAX_STATE /* optim.h: most state tensors per weight */
#define TTT_OPTIM_CFG_MAX 512

typedef enum ttt_order {
    TTT_ORDER_UPDATE_THEN_APPLY, /* token t reads the weights after its own update */
    TTT_ORDER_APPLY_THEN_UPDATE, /* every token of a block reads the weights from before it */
} ttt_order;

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
                        * θ/(i+1) (TTT's τ_i, docs/math.md §5.4); none (default) — θ */
    const char *form;  /* the requested form: "auto" or a form name of the registry (static) */
    int chunk;         /* chunk size C of the chunkwise forms */
    float scale;
    int rope;          /* rotate q and k by their positions before the inner loop (docs/math.md §4) */
    float rope_base;
    int normalize;     /* TTT_NORMALIZE_*: output normalization */
    /* normalize: ratio's feature map φ (linear_attention/feature_maps.h), else NULL */
    const struct ttt_feature_map *fmap;
    int features;           /* m: random features of fmap (its output width is fmap->width) */
    uint64_t feature_seed;  /* seeds fmap's random matrix, fixed for the layer's life */
    int feature_gate;       /* RFA's gate: token t writes with weight 1 − α_t */
    int d_k, d_v;           /* key and value widths of the inputs */
    int d_phi;              /* key width the forms and the state see: fmap's output width, or d_k */
    /* steps_per_token: n_h delta-rule steps per token on n_h key/value pairs (Gated
     * DeltaProduct, docs/math.md §4.7); 1 (the default) is one step per token. With n_h > 1 a
     * call's k, v and η have n_h·T rows (token t's pairs at rows n_h·t … n_h·t + n_h − 1), q
     * and the gate T; only the delta_product forms compute it. */
    int substeps;
    /* levels: Λ fast weights at the time scales of a Fenwick tree (log-linear attention,
     * docs/math.md §4.8); 1 (the default) is the one state of the ordinary rule. With Λ > 1 the
     * state W is (Λ·d_k, d_v), level after level, and a call's q is (T, Λ·d_k): token t reads
     * level ℓ with columns ℓ·d_k … (ℓ+1)·d_k − 1 (λ_t^ℓ q_t); only the loglinear forms compute
     * it, and st->pos places the tokens in the tree. */
    int levels;
} ttt_layer;

enum {
    TTT_NORMALIZE_NONE,
    TTT_NORMALIZE_RATIO, /* normalized linear attention: φ (elu+1 or random features) on q, k;
                          * o = φ(q) S / (φ(q) z + ε) */
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
    ttt_tensor *z;    /* (d_phi, 1) normalizer state of normalize: ratio, else NULL */
    /* the optimizer's outer-loop parameters (optim.h `outer`; a learned optimizer's network):
     * their initial values after ttt_layer_state_init; an outer loop that trains them puts its
     * parameter tensors here (as it does for learned initial weights), and the forms hand them
     * to every step (ttt_optim_block.outer). Shared, not carried: never updated by a forward. */
    int n_outer;
    ttt_tensor *outer[TTT_OPTIM_MAX_OUTER];
    long pos;         /* tokens processed so far (RoPE positions continue from here) */
} ttt_layer_state;

/* ---- traits of the tuple, for the forms' availability tests ---- */

/* The optimizer's traits for its parsed options (its `traits` slot, or none). */
ttt_optim_traits ttt_layer_optim_traits(const ttt_layer *L);
/* The tuple is (normalized) linear attention: a linear map, a loss whose gradient does not
 * depend on W, plain SGD, update_then_apply, no position scale. normalize: ratio needs it. */
int ttt_layer_is_linear_attention(const ttt_layer *L);

/* ---- the registry of computation forms (docs/forms.md) ----
 *
 * One entry per (family, form): the closed-form kernels of a family of tuples, and the generic
 * driver (family "generic", form "generic"), which computes every tuple. An entry is one C file
 * defining `const ttt_form_entry ttt_form_FAMILY_FORM = {...};` and one line in
 * layers/forms/form_list.h. Nothing outside an entry knows which tuples it computes: layers,
 * apply, memory estimates and FLOP counts ask the entry. */

/* The gate a call supplies. */
typedef enum ttt_gate_shape {
    TTT_FORM_GATE_NONE,  /* no decay */
    TTT_FORM_GATE_TOKEN, /* log_alpha (T): given per token, or the constant `decay` filled in */
    TTT_FORM_GATE_KEY,   /* log_alpha (T, d_k): per token and key dimension (GLA) */
} ttt_gate_shape;

/* What an entry may depend on besides the tuple: the shapes of one call's inputs. */
typedef struct ttt_form_inputs {
    long T;              /* tokens */
    int eta;             /* per-token learning rates η are given */
    ttt_gate_shape gate; /* the log_alpha the form receives */
    int tape;            /* the call records on a tape (outer-loop training) */
    /* where the call's buffers live (host by default): only entries of that device are
     * available (docs/design.md "Devices", "How forms declare devices") */
    ttt_device_kind device;
} ttt_form_inputs;

/* The inputs of one call of a form, after the layer's input transforms (scale, RoPE, feature
 * map) and with a constant decay already turned into log_alpha (T). */
typedef struct ttt_form_args {
    const ttt_tensor *q, *k;    /* (T, d_k) */
    const ttt_tensor *v;        /* (T, d_v) */
    const ttt_tensor *eta;      /* (T) per-token rates η, or NULL (= 1) */
    const ttt_tensor *beta;     /* (T) β = θ·η (a recorded op under a tape), or NULL (= θ) */
    const ttt_tensor *log_alpha; /* (T) or, with alpha_vec, (T, d_k); or NULL */
    int alpha_vec;
    int fused; /* forward_diff: 1 = the fused ops with hand-written backward (fused_grad.h),
                * 0 = the composed reference (composed.h); entries with one path ignore it */
} ttt_form_args;

/* One sequence of a (B, T, H, D) array, in place: pointers to its first rows and the strides
 * (kernels.h), with β = θ·η and the constant decay already formed by the caller. */
typedef struct ttt_form_strided {
    float *o;                   /* (T, d_v) rows ld.o apart */
    const float *q, *k, *v;     /* rows ld.q, ld.k, ld.v apart */
    const float *beta;          /* (T) β_t, ld.beta apart */
    const float *log_alpha;     /* (T) or (T, d_k), ld.la apart, or NULL */
    int alpha_vec;
    int T;
    ttt_form_ld ld;
} ttt_form_strided;

/* One measured speed of an entry's forward (form: auto's cost model, docs/forms.md "How `auto`
 * chooses"): GFLOP/s on the entry's own `flops` count, one thread, one sequence of T = 4096,
 * for a gate shape, a head size d = d_k = d_v and a chunk. */
typedef struct ttt_form_rate {
    ttt_gate_shape gate;
    int d;         /* head size measured; 0 ends a table */
    int chunk;     /* the layer.chunk measured; 0: forward does not read the chunk */
    double gflops; /* forward's rate, GFLOP per CPU second */
} ttt_form_rate;

/* One batched call of an entry (forward_batched, backward_batched): every (b, h) sequence of
 * (B, T, H, D) arrays, row-major, all on `device`, the work queued on `stream` (a cudaStream_t
 * for CUDA; NULL = the default stream). The caller has checked where every buffer lives, its
 * alignment and the dtype (src/app/api.c); β = θ·η, the query scale and the constant decay are
 * the entry's to form (docs/design.md "Devices"). */
typedef struct ttt_form_batch {
    int B, T, H;
    ttt_device device;
    void *stream;
    ttt_dtype dtype;                /* of q, k, v, o (and d_o, d_q, d_k, d_v) */
    void *o;                        /* (B, T, H, d_v) written */
    const void *q, *k;              /* (B, T, H, d_k) */
    const void *v;                  /* (B, T, H, d_v) */
    const float *eta;               /* (B, T, H) or NULL (= 1) */
    const float *log_alpha;         /* (B, T, H) or with alpha_vec (B, T, H, d_k), or NULL */
    int alpha_vec;
    const float *const *state_in;   /* NULL, or per state tensor (B, H, shape_i) or NULL */
    float *const *state_out;        /* NULL, or per state tensor (B, H, shape_i) or NULL */
    void *kept;                     /* NULL, or kept_bytes of the device memory of a kept forward
                                     * (ttt_form_entry.kept_bytes_batched) */
    size_t kept_bytes;
} ttt_form_batch;

/* The gradients of a batched backward, of L = Σ d_o ⊙ o + Σ d_state_out ⊙ final state; every
 * output may be NULL (not wanted) and is overwritten. Same device and dtype as the call. */
typedef struct ttt_form_batch_grad {
    const void *d_o;                  /* (B, T, H, d_v) */
    const float *const *d_state_out;  /* NULL, or per state tensor: (B, H, shape_i) or NULL */
    void *d_q, *d_k, *d_v;
    float *d_eta, *d_log_alpha;
    float *const *d_state_in;
} ttt_form_batch_grad;

typedef struct ttt_form_entry {
    const char *family; /* e.g. "delta_rule" */
    const char *form;   /* e.g. "chunkwise": the name `layer.form` selects */
    const char *help;   /* one line for `ttt list` */
    /* Preference of `form: auto` among the entries available for a call: the highest wins, ties
     * by registry order; 0 = never chosen by auto (only when asked for by name). The numbers
     * encode measured speed (docs/forms.md "How `auto` chooses"). */
    int auto_rank;
    /* Nonzero when forward runs in blocks of layer.chunk tokens (results name the chunk). */
    int chunked;
    /* NULL when the entry computes layer L for inputs `in`; otherwise a sentence saying why not
     * (ending in what to do instead). in == NULL asks about the tuple alone: whether some call
     * of this layer can use the entry. */
    const char *(*available)(const ttt_layer *L, const ttt_form_inputs *in);
    /* Without a tape: o (T, d_v) written, st updated in place. Temporaries in ctx (the caller
     * releases them). */
    ttt_status (*forward)(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o, ttt_layer_state *st,
                          const ttt_form_args *a, ttt_error *err);
    /* Under a tape, differentiable: o (T, d_v) written and made a graph node; st's tensors
     * replaced by graph nodes holding the final state. Without a tape the same function as
     * forward. */
    ttt_status (*forward_diff)(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                               ttt_layer_state *st, const ttt_form_args *a, ttt_error *err);
    /* Optional (NULL if none): forward on rows inside a larger array (ttt_layer_forward_batch),
     * the same bits as forward on a copy of the rows. S the single (d_k, d_v) weight, in/out.
     * Only called for layers without RoPE and output normalization. TTT_ERR_NOMEM (with err
     * set) when a recurrent kernel's row buffers cannot be had (kernels.h). */
    ttt_status (*forward_strided)(ttt_ctx *ctx, const ttt_layer *L, float *S,
                                  const ttt_form_strided *a, ttt_error *err);
    /* An upper estimate of the bytes forward and forward_diff allocate on top of their inputs,
     * output and state for T tokens (tests/test_contract_forms.c checks it against the arena's
     * measured peak). */
    double (*scratch_bytes)(const ttt_layer *L, long T);
    /* Floating-point operations of forward over T tokens, or NAN when not counted (NULL too). */
    double (*flops)(const ttt_layer *L, long T);
    /* The longest sequence for which this form's outputs and final state stay within 2e-6
     * relative RMS of the float64 recurrence on the hard inputs (weak and strong gates, β up to
     * 2, key norms up to 100; tests/test_hard_inputs.c holds every entry to it, docs/forms.md
     * "Precision on hard inputs" gives the measured numbers); 0 = up to 16K tokens at least. */
    long precise_t;
    /* Measured rates of forward (ttt_form_rate rows ending with d = 0), or NULL: form: auto
     * estimates the time of a call as flops / rate, interpolating the rate in log d between the
     * measured head sizes, and runs the available measured entry and chunk with the least
     * estimate (ttt_form_plan). The chunks of an entry's rows are the ones auto may choose. */
    const ttt_form_rate *rates;
    /* Where the entry computes (docs/design.md "Devices"): TTT_DEVICE_HOST (0, the default of
     * every CPU entry), whose forward and forward_diff take host tensors, or TTT_DEVICE_CUDA,
     * whose only calls are the batched ones below on device pointers (forward, forward_diff
     * and forward_strided are NULL). ttt_form_choose offers an entry only to calls whose
     * buffers are on its device (ttt_form_inputs.device). */
    ttt_device_kind device;
    /* Optional: all B·H sequences of a call at once (a CUDA entry launches one grid for the
     * batch); a host entry without them is looped over the sequences by layers/batch.c.
     * backward_batched also writes io->o and io->state_out, as forward_batched does. */
    ttt_status (*forward_batched)(const ttt_layer *L, const ttt_form_batch *io, ttt_error *err);
    ttt_status (*backward_batched)(const ttt_layer *L, const ttt_form_batch *io,
                                   const ttt_form_batch_grad *g, ttt_error *err);
    /* Optional: the bytes of io->kept a forward_batched stores for its backward_batched
     * (docs/api.md "Kept forward"); NULL or 0: the entry keeps nothing and ignores io->kept. */
    size_t (*kept_bytes_batched)(const ttt_layer *L, const ttt_form_batch *io);
    /* Nonzero for the entries that compute levels > 1 (log-linear attention, docs/math.md
     * §4.8), and only those: the registry offers the others only layers of one level. */
    int levels;
} ttt_form_entry;

/* Whether entry e computes L for `in` (NULL) or why not: the entry's own test, after the one
 * every entry shares: layers of several levels (log-linear attention, docs/math.md §4.8) are
 * the loglinear entries' alone, and those compute nothing else. What every caller asks (never
 * e->available directly). */
const char *ttt_form_entry_available(const ttt_form_entry *e, const ttt_layer *L,
                                     const ttt_form_inputs *in);

int ttt_form_count(void);
const ttt_form_entry *ttt_form_at(int i);
/* Nonzero when some entry has this form name ("auto" is not one). */
int ttt_form_known(const char *form);
/* "auto|generic|recurrent|…": every form name once, in registry order, for the option table. */
const char *ttt_form_choices(void);

/* The entry that computes L for inputs `in`: for L->form "auto" the available entry with the
 * highest auto_rank (the generic driver at worst, on the host), else the available entry of
 * that form name; only entries of in->device are available.
 * NULL when there is none, with a TTT_ERR_UNSUPPORTED error saying why. */
const ttt_form_entry *ttt_form_choose(const ttt_layer *L, const ttt_form_inputs *in,
                                      ttt_error *err);
/* How a call runs: the entry, the chunk it runs with and, when form: auto chose by the measured
 * rates, the estimates behind the choice. */
typedef struct ttt_form_plan {
    const ttt_form_entry *entry;
    int chunk;      /* the layer.chunk to run with: L->chunk unless auto chose by rates */
    int costed;     /* 1: chosen by the rates; 0: by auto_rank (an unmeasured entry ranks
                     * highest, or a tape records: the rates are forward's) or by name */
    const char *why; /* not costed: why not, a phrase for ttt_form_plan_describe */
    double tok_s;   /* costed: estimated tokens per second of the choice */
    const ttt_form_entry *other; /* costed: the fastest other measured entry, or NULL */
    int other_chunk;
    double other_tok_s;
} ttt_form_plan;

/* The measured rates of an entry: e->rates in the library; tests give fake tables. */
typedef const ttt_form_rate *(*ttt_form_rates_fn)(const ttt_form_entry *e);

/* The plan of a call of L with inputs `in` (ttt_form_choose's entry, with the chunk): for a named
 * form its available entry and L->chunk; for form: auto without a tape, among the available
 * entries with auto_rank > 0, when the highest ranked has rates: the measured entry and chunk of
 * least estimated time for in->T tokens (flops / interpolated rate); otherwise the highest
 * auto_rank with L->chunk. rates NULL: the entries' own. NULL with an error when nothing runs. */
const ttt_form_entry *ttt_form_plan_with(ttt_form_rates_fn rates, const ttt_layer *L,
                                         const ttt_form_inputs *in, ttt_form_plan *plan,
                                         ttt_error *err);
/* The estimated rate (GFLOP/s) of entry e for L's head size, gate and chunk from its rows, or 0
 * when it has none for them. */
double ttt_form_rate_of(const ttt_form_rate *rows, const ttt_layer *L, ttt_gate_shape gate,
                        int chunk);
/* One line for `ttt check`: "chunkwise C=32 (est. 1.2M tok/s; recurrent 0.9M)", or the
 * reason when the rates did not decide ("dual (auto_rank 10; no measured rates)"). */
void ttt_form_plan_describe(const ttt_form_plan *plan, char *buf, size_t len);

/* NULL for a layer of one step per token (substeps ≤ 1); otherwise why an entry that takes one
 * step per token does not compute it (docs/math.md §4.7): the delta_product forms do. */
const char *ttt_form_one_step(const ttt_layer *L);

/* NULL when the form name L->form applies to L for some inputs (the check at parse time);
 * otherwise why not. */
const char *ttt_form_unavailable(const ttt_layer *L);
/* The inputs a call makes when it passes no η and no gates (the constant decay, if any, becomes
 * a per-token gate): what tasks that do not pass them use. */
ttt_form_inputs ttt_form_inputs_plain(const ttt_layer *L, long T, int tape);

/* The generic driver (forms/generic/driver.c): any (model, loss, optimizer, b, ordering), token
 * by token, through ops (differentiable under a tape). Same contract as ttt_layer_forward after
 * its input transforms; alpha_vec: log_alpha is (T, d_k). */
ttt_status ttt_forward_generic(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                               ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                               const ttt_tensor *v, const ttt_tensor *eta,
                               const ttt_tensor *log_alpha, int alpha_vec, ttt_error *err);
/* The generic driver's scratch (layers/forms/generic/driver.c), also the estimate of other
 * entries that run the driver's optimizer step (LaCT). */
double ttt_generic_scratch_bytes(const ttt_layer *L, long T);
/* Floats of the model's weights; gram = Σ min(rows, cols)² over its matrices. */
double ttt_layer_weight_floats(const ttt_layer *L, double *gram);
int ttt_layer_opt_state_count(const ttt_layer *L);
/* Floats of the optimizer state over all weights, of the shapes the optimizer declares (optim.h
 * state_shape: Adam's step count is one float, large_batch's norms one per channel). */
double ttt_layer_opt_state_floats(const ttt_layer *L);

/* The error of a recurrent kernel that could not allocate its rows (kernels.h): TTT_ERR_NOMEM,
 * "<form>: out of memory for the recurrent kernel's rows (d_k = …, d_v = …)". */
ttt_status ttt_form_rows_out_of_memory(ttt_error *err, const char *form, int d_k, int d_v);

#endif
