/* libttt's public C API: the one header a program needs (docs/api.md).
 *
 * Build a layer — linear attention, RetNet, Mamba2, GLA, DeltaNet, Gated DeltaNet, TTT-Linear/MLP,
 * Titans, LaCT, or any tuple (fast-weight model, inner loss, inner optimizer, mini-batch size,
 * ordering) — from a descriptor, run it on float32 buffers in the (B, T, H, D) layout with an
 * optional initial state in and final state out, differentiate it, and run experiments.
 *
 * Conventions:
 *   - every fallible function returns a ttt_status (TTT_OK = 0) and, when `err` is not NULL,
 *     writes the message there (ttt_errmsg). Nothing exits; the library keeps no global error,
 *     so calls on different handles may run on different threads;
 *   - handles are opaque and come in new/free pairs; free accepts NULL;
 *   - buffers are the caller's: the library reads inputs during the call and writes outputs,
 *     and keeps no pointer after it returns;
 *   - outputs come first in argument lists, then inputs, then sizes;
 *   - misuse (NULL, zero, negative or overflowing arguments) is refused with a status, never a
 *     crash; the few functions that cannot return a status say below what they do with NULL
 *     (docs/api.md "Misuse"). Buffer sizes cannot be checked: each buffer must hold what its
 *     comment says for the call's (B, T, H). */
#ifndef TTT_TTT_H
#define TTT_TTT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status and errors ------------------------------------------------------------------ */

#include <ttt/status.h>

/* The message of the last failure recorded in err ("" after success); never NULL. */
TTT_API const char *ttt_errmsg(const ttt_error *err);

/* The version of this header. CMakeLists.txt reads project(VERSION) from these three lines, so
 * the header, libttt.so's file name and ttt_version() cannot disagree; libttt.so's SOVERSION is
 * the major (docs/api.md "Versions and the ABI"). TTT_VERSION_NUMBER orders versions:
 * MAJOR·10000 + MINOR·100 + PATCH, e.g. `#if TTT_VERSION_NUMBER >= 10000` for 1.0.0 or later. */
#define TTT_VERSION_MAJOR 1
#define TTT_VERSION_MINOR 1
#define TTT_VERSION_PATCH 0
#define TTT_VERSION_NUMBER (TTT_VERSION_MAJOR * 10000 + TTT_VERSION_MINOR * 100 + TTT_VERSION_PATCH)

/* The version of the library loaded, "MAJOR.MINOR.PATCH": a program built against this header
 * runs with any libttt.so of the same major and an equal or later minor. */
TTT_API const char *ttt_version(void);

/* ---- registries --------------------------------------------------------------------------- */

typedef enum ttt_registry {
    TTT_REGISTRY_OPTIMIZERS, /* layer optimizer names */
    TTT_REGISTRY_MODELS,     /* fast-weight models */
    TTT_REGISTRY_LOSSES,     /* inner losses */
    TTT_REGISTRY_PRESETS,    /* named layers */
    TTT_REGISTRY_FORMS,      /* computation forms (besides "auto") */
    TTT_REGISTRY_TASKS,      /* experiment tasks */
    TTT_REGISTRY_COUNT
} ttt_registry;

/* Number of entries, or -1 for an unknown registry. */
TTT_API int ttt_registry_count(ttt_registry r);
/* Entry i: its name and a one-line help (static strings). TTT_ERR_ARG when r or i is out of
 * range. */
TTT_API ttt_status ttt_registry_entry(const char **name, const char **help, ttt_registry r,
                                      int i, ttt_error *err);

/* ---- devices (docs/design.md "Devices") ------------------------------------------------ */

/* Where the buffers of a call live. */
typedef enum ttt_device_kind {
    TTT_DEVICE_HOST = 0, /* host memory (the default of a zeroed struct) */
    TTT_DEVICE_CUDA = 1, /* CUDA device memory of GPU device_index */
} ttt_device_kind;

/* Element type of the activations of a call (q, k, v, o and their gradients); gates, rates
 * and states are float32 always. */
typedef enum ttt_dtype {
    TTT_DTYPE_F32 = 0,
    TTT_DTYPE_BF16 = 1, /* bfloat16: CUDA calls only */
} ttt_dtype;

/* The CUDA devices this build can use: 0 when it was built without CUDA or when no GPU or
 * driver is present, with the reason in err (when not NULL). */
TTT_API int ttt_cuda_device_count(ttt_error *err);
/* One line naming the CUDA runtime, the driver and the GPUs ("CUDA runtime 13.0, driver 13.0,
 * cuda:0 NVIDIA H200 (132 SMs, 139 GiB)"), or why there are none. A static string. */
TTT_API const char *ttt_cuda_describe(void);

/* ---- layer descriptor --------------------------------------------------------------------- */

/* "Unset": the field takes the preset's value, else the documented default (docs/api.md). */
#define TTT_DESC_UNSET_INT (-2147483647 - 1)
#define TTT_DESC_UNSET_NUM (-1.0e300)

/* An optimizer option: int, float and bool options (bool: 0 or 1) read `number`; choice and
 * string options read `text`. Which one is given by the optimizer's option table. Each key may
 * appear once in a descriptor's options (a repeated key is TTT_ERR_CONFIG; a NULL key
 * TTT_ERR_ARG). */
typedef struct ttt_option_value {
    const char *key;
    double number;
    const char *text;
} ttt_option_value;

/* Growable structs (ttt_layer_descriptor, ttt_batch_io, ttt_batch_grad; docs/api.md
 * "Versions and the ABI"): the first field `size` is sizeof the struct the caller was compiled
 * with, set by the struct's init function (ttt_layer_descriptor_init(&d, sizeof d)) or by an
 * initializer (ttt_batch_io io = {.size = sizeof io, …}). Later versions append fields only at
 * the end; the library reads the first `size` bytes and takes every field beyond them as unset
 * (zero, or TTT_DESC_UNSET_* in a descriptor). A size below the struct's first layout, or above
 * the library's own (a header newer than the library), is refused with TTT_ERR_ARG. */

/* A layer as C fields (the `layer:` mapping of an experiment file, docs/api.md). Start from
 * ttt_layer_descriptor_init (every field unset); strings are read during ttt_layer_new only.
 * The first layout ends at `normalize`; the feature_* fields were appended in 1.0.0. */
typedef struct ttt_layer_descriptor {
    size_t size;                     /* sizeof(ttt_layer_descriptor) of the caller */
    const char *preset;              /* "gated_deltanet", …; NULL = none */
    const char *model, *loss;        /* registry names */
    const char *optimizer;           /* registry name */
    const ttt_option_value *options; /* (n_options) the optimizer's own options */
    int n_options;
    double lr;                       /* θ, the block learning rate */
    double decay;                    /* constant retention α per token (1 = no forgetting) */
    const char *decay_placement;     /* "coupled" | "decoupled" */
    int mini_batch;                  /* tokens per inner step b */
    const char *order;               /* "update_then_apply" | "apply_then_update" */
    const char *steps;               /* "per_block" | "per_token" */
    const char *position_scale;      /* "none" | "inverse" */
    const char *form;                /* "auto" | "generic" | "recurrent" | "parallel" | … */
    int chunk;                       /* chunk size of the chunkwise forms */
    double scale;                    /* queries are multiplied by this */
    int rope;                        /* 0 or 1 */
    double rope_base;
    const char *normalize;           /* "none" | "ratio" | "rms" */
    const char *feature_map;         /* φ of normalize "ratio": "elu1" | "favor" | "favor_orth"
                                      * | "rfa" */
    int features;                    /* m, the random features of favor, favor_orth, rfa */
    int feature_seed;                /* seed of the feature map's random matrix */
    int feature_gate;                /* 0 or 1: rfa's gated writes */
    int steps_per_token;             /* n_h ≥ 1 delta steps per token (Gated DeltaProduct): k,
                                      * v and the rates then have n_h rows per token */
    int levels;                      /* Λ ≥ 1 Fenwick levels of state (log-linear attention):
                                      * q then has Λ·d_k columns, level ℓ's query λ^ℓ q */
} ttt_layer_descriptor;

/* Every field of the first `size` bytes unset and desc->size = size; pass sizeof *desc. Writes
 * nothing beyond `size` bytes (nor beyond this library's layout). NULL: does nothing. */
TTT_API void ttt_layer_descriptor_init(ttt_layer_descriptor *desc, size_t size);

/* ---- layers ------------------------------------------------------------------------------- */

typedef struct ttt_layer_handle ttt_layer_handle;

/* Build the layer `desc` describes for key dimension d_k and value dimension d_v (each from 1 to
 * 65536, else TTT_ERR_ARG). On failure
 * *out is NULL and err names the field ("layer.optimizer.momentum: expected a number in [0, 1],
 * got 1.5"). */
TTT_API ttt_status ttt_layer_new(ttt_layer_handle **out, const ttt_layer_descriptor *desc,
                                 int d_k, int d_v, ttt_error *err);
TTT_API void ttt_layer_free(ttt_layer_handle *h);

/* The resolved tuple, every value: "gated_deltanet = (model linear, loss squared, …)". Owned by
 * the handle; "" for a NULL handle. */
TTT_API const char *ttt_layer_tuple(const ttt_layer_handle *h);
/* The layer's d_k and d_v into the non-NULL pointers; 0 and 0 for a NULL handle. */
TTT_API void ttt_layer_dims(int *d_k, int *d_v, const ttt_layer_handle *h);

/* The state of one sequence is a list of tensors: the fast weights, then each weight's
 * optimizer state, then the normalizer z of normalize: ratio. Their number; -1 for a NULL
 * handle. */
TTT_API int ttt_layer_state_tensors(const ttt_layer_handle *h);
/* Tensor i's name and shape for one sequence (the batched buffers are (B, H, shape…)); returns
 * its number of dimensions, or -1 when i is out of range or h or shape is NULL (then *name, when
 * name is given, is NULL). name may be NULL. */
TTT_API int ttt_layer_state_shape(const char **name, int shape[4], const ttt_layer_handle *h,
                                  int i);

/* The buffers of one batched call, all float32, row-major, in the (B, T, H, D) layout.
 * Sequence (b, h) is independent of every other. */
typedef struct ttt_batch_io {
    size_t size;                  /* sizeof(ttt_batch_io) of the caller (growable, above) */
    int B, T, H;
    float *o;                     /* (B, T, H, d_v) written */
    const float *q, *k;           /* (B, T, H, d_k) */
    const float *v;               /* (B, T, H, d_v) */
    const float *eta;             /* (B, T, H) per-token learning rates, or NULL (= 1) */
    const float *log_alpha;       /* (B, T, H), or with alpha_vec (B, T, H, d_k), log retention
                                   * per token; NULL = the constant decay */
    int alpha_vec;                /* 0 or 1; 1 needs log_alpha */
    const float *const *state_in; /* NULL, or one pointer per state tensor i: (B, H, shape_i)
                                   * or NULL = the layer's initial value */
    float *const *state_out;      /* NULL, or one pointer per state tensor i: (B, H, shape_i)
                                   * written, or NULL = not wanted */
    uint64_t seed;                /* random initial weights (models that have them) */
    /* Where every buffer of the call lives (those of ttt_batch_grad too): TTT_DEVICE_HOST (0)
     * or TTT_DEVICE_CUDA on GPU device_index. A CUDA call is queued on `stream` (a
     * cudaStream_t; NULL = the default stream) and returns before the GPU is done, as CUDA
     * calls do (docs/api.md "Device buffers"). */
    ttt_device_kind device;
    int device_index;
    void *stream;
    ttt_dtype dtype;              /* of q, k, v, o (and d_o, d_q, d_k, d_v); host: F32 only */
    /* Packed variable-length batches (docs/api.md "Packed sequences"): NULL, or n_seqs + 1
     * token offsets 0 = cu_seqlens[0] ≤ cu_seqlens[1] ≤ … ≤ cu_seqlens[n_seqs] = T with B = 1:
     * tokens [cu_seqlens[n], cu_seqlens[n+1]) are sequence n, run as its own sequence (its
     * state starts afresh, RoPE positions from 0). state_in/state_out (and the gradients'
     * d_state_in/d_state_out) are then (n_seqs, H, shape_i). Empty sequences are allowed: their
     * final state is their initial state. cu_seqlens is host memory also on a device call
     * (each sequence then runs as a device call of its own). */
    const int64_t *cu_seqlens;
    int n_seqs;
    /* Kept forward (docs/api.md "Kept forward"; appended in 1.1.0): NULL, or device memory of
     * kept_bytes ≥ ttt_layer_kept_bytes(h, io), 256-byte aligned. ttt_layer_forward_run then
     * stores there what the backward of the same call would recompute, and
     * ttt_layer_backward_run on the same io reads it instead: memory traded for time. A kept
     * forward serves one backward, which overwrites it. CUDA calls only. */
    void *kept;
    size_t kept_bytes;
} ttt_batch_io;

/* The first `size` bytes zeroed (no buffers, host, float32) and io->size = size; pass sizeof
 * *io. NULL: does nothing. */
TTT_API void ttt_batch_io_init(ttt_batch_io *io, size_t size);

/* The forward pass. threads ≥ 1 runs that many threads, 0 = the default (negative:
 * TTT_ERR_ARG). B, H ≥ 1 and T ≥ 0 (else TTT_ERR_SHAPE, as when a buffer's size in bytes would
 * exceed PTRDIFF_MAX); o, q, k, v are required. */
TTT_API ttt_status ttt_layer_forward_run(const ttt_layer_handle *h, const ttt_batch_io *io,
                                         int threads, ttt_error *err);

/* The bytes io->kept needs for a kept forward of this call; 0 when the form that runs it keeps
 * nothing (every host form, the CUDA linear-attention family), and for a NULL h or io or an
 * io the calls refuse. No buffer is read. */
TTT_API size_t ttt_layer_kept_bytes(const ttt_layer_handle *h, const ttt_batch_io *io);

/* The computation form ttt_layer_forward_run runs for a call on io: `auto` resolved as every
 * call resolves it, from io's T, whether io->eta and io->log_alpha are given and io->alpha_vec
 * ("chunkwise", "recurrent", "generic", …; "none" when no form takes these inputs, and for a
 * NULL h or io or an io->size the calls refuse). No buffer is read. A static string. */
TTT_API const char *ttt_layer_form_for(const ttt_layer_handle *h, const ttt_batch_io *io);

/* Gradients of L = Σ d_o ⊙ o + Σ_i d_state_out[i] ⊙ final_state_i with respect to the inputs and
 * the initial state. Every output pointer may be NULL (not wanted); d_eta and d_log_alpha need
 * io->eta and io->log_alpha. Outputs are overwritten, not accumulated. */
typedef struct ttt_batch_grad {
    size_t size;                      /* sizeof(ttt_batch_grad) of the caller (growable) */
    const float *d_o;                 /* (B, T, H, d_v) */
    const float *const *d_state_out;  /* NULL, or per state tensor: (B, H, shape_i) or NULL */
    float *d_q, *d_k;                 /* (B, T, H, d_k) written */
    float *d_v;                       /* (B, T, H, d_v) written */
    float *d_eta;                     /* (B, T, H) written */
    float *d_log_alpha;               /* like io->log_alpha, written */
    float *const *d_state_in;         /* NULL, or per state tensor: (B, H, shape_i) written */
} ttt_batch_grad;

/* The first `size` bytes zeroed (no gradient wanted) and g->size = size; pass sizeof *g. NULL:
 * does nothing. */
TTT_API void ttt_batch_grad_init(ttt_batch_grad *g, size_t size);

/* The forward pass (io->o and io->state_out are written as by ttt_layer_forward_run) recorded
 * per sequence, then its backward with the layer's differentiable forms. io is checked as by
 * the forward; g and g->d_o are required. */
TTT_API ttt_status ttt_layer_backward_run(const ttt_layer_handle *h, const ttt_batch_io *io,
                                          const ttt_batch_grad *g, ttt_error *err);

/* ---- the generalized delta rule (DPLR, RWKV-7's rule; docs/math.md "RWKV-7") ------------- */

/* One call of the rule on float32 host buffers in the (B, T, H, D) layout. Per (batch, head)
 * sequence, in ttt's row convention (S (d_k, d_v), o_t = q_t S_t):
 *     S_t = Diag(exp(log_w_t)) S_{t-1} + b_t^T (a_t S_{t-1}) + k_t^T v_t,    o_t = q_t S_t.
 * RWKV-7 is a = -kappa_hat, b = kappa_hat * alpha (elementwise). q is used as given (scale it
 * first). */
typedef struct ttt_dplr_io {
    int B, T, H, d_k, d_v;
    float *o;                  /* (B, T, H, d_v) written */
    const float *q, *k, *a, *b; /* (B, T, H, d_k) */
    const float *v;            /* (B, T, H, d_v) */
    const float *log_w;        /* (B, T, H, d_k) log retentions <= 0 (-inf: reset), or NULL = 0 */
    const float *state_in;     /* (B, H, d_k, d_v), or NULL = zeros */
    float *state_out;          /* (B, H, d_k, d_v) written, or NULL = not wanted */
    int chunk;                 /* 0 = the recurrence, C >= 1 = the chunkwise form in chunks
                                * of C tokens (the same function), forward and backward */
} ttt_dplr_io;

/* The forward. B, H, d_k, d_v >= 1, T >= 0 (else TTT_ERR_SHAPE); o, q, k, a, b, v required
 * (else TTT_ERR_ARG); chunk >= 0 (else TTT_ERR_ARG). The chunkwise form's workspace grows as
 * min(chunk, T)²: TTT_ERR_NOMEM when it cannot be had. */
TTT_API ttt_status ttt_dplr_forward(const ttt_dplr_io *io, ttt_error *err);

/* Gradients of L = sum d_o * o + sum d_state_out * final state. Every output may be NULL (not
 * wanted; d_log_w needs io->log_w) and is overwritten. io->o and io->state_out are written as
 * by the forward. */
typedef struct ttt_dplr_grad {
    const float *d_o;         /* (B, T, H, d_v), required */
    const float *d_state_out; /* (B, H, d_k, d_v) or NULL = 0 */
    float *d_q, *d_k, *d_a, *d_b, *d_log_w; /* (B, T, H, d_k) written */
    float *d_v;               /* (B, T, H, d_v) written */
    float *d_state_in;        /* (B, H, d_k, d_v) written */
} ttt_dplr_grad;

TTT_API ttt_status ttt_dplr_backward(const ttt_dplr_io *io, const ttt_dplr_grad *g,
                                     ttt_error *err);

/* ---- experiments -------------------------------------------------------------------------- */

/* Load an experiment (a YAML file, or YAML text standing for the file `name`), apply the
 * "a.b.c=value" overrides in sets[0..n_sets-1] and run every point into the run folder out_dir
 * (NULL = the experiment's `output`): config.resolved.yaml, metrics.jsonl, summary.csv, …
 * n_sets ≥ 0; with n_sets > 0, sets holds n_sets non-NULL strings (else TTT_ERR_ARG). */
TTT_API ttt_status ttt_experiment_run_file(const char *path, const char *const *sets,
                                           int n_sets, const char *out_dir, ttt_error *err);
TTT_API ttt_status ttt_experiment_run_string(const char *yaml, const char *name,
                                             const char *const *sets, int n_sets,
                                             const char *out_dir, ttt_error *err);

#ifdef __cplusplus
}
#endif

#endif
