/* Sequence models trained end to end in the outer loop (the `model:` section of an experiment).
 *
 * A TTT layer has two loops: the inner optimizer updates the fast weights along the sequence
 * (layers/forms/form.h); this model is the outer loop's subject: every other weight (projections,
 * convolutions, gates, learning-rate heads, norms, initial fast weights of non-linear fast-weight
 * models) is a parameter (params.h) learned by backpropagating through the inner updates.
 *
 * (The type is ttt_seq_model: layers/models/model.h already names the fast-weight model `ttt_model`.)
 *
 * Architecture (pre-norm residual stack):
 *     x  = embed(tokens) [+ pos]        tokens (B, T) → (B·T, d)   (vector tasks: x W_in + b_in)
 *     for each of N blocks:
 *         x = x + mixer(norm(x))
 *         x = x + W2 gelu(W1 norm(x))   when mlp > 0 (hidden width mlp · d)
 *     out = norm(x) W_head              (B·T, V) logits, or (B·T, out_dim) (+ b_head) for vectors
 * `norm` is RMSNorm (or LayerNorm, option `norm`) with a learned gain (and bias for LayerNorm).
 *
 * The mixer is one of a registry (src/train/mixers/mixer.h, one file each, mixer_list.h): it maps
 * norm(x) to o (B·T, H·D); the block then applies the shared output norm, gate and W_o.
 *
 * The TTT mixer (model.mixer: ttt), H heads of width D = d / H (or head_dim), built from any
 * `layer:` preset or tuple, for one block with input h (B·T, d):
 *     q, k, v   = h W_q, h W_k, h W_v                             (B·T, H·D) each
 *     conv > 0:  q, k, v = conv1d_causal(·, w_q|k|v)               kernel `conv` per channel,
 *                                                                  restarting at each sequence
 *     act silu:  q, k, v = silu(q), silu(k), silu(v)
 *     qk_norm:   q, k = q/‖q‖, k/‖k‖ per head (eps 1e-6)           (DeltaNet's L2 normalization)
 *     eta:       η_t = sigmoid(h W_η + b_η)  (B·T, H)              per-token learning rate; the
 *                layer multiplies it by its θ (layer.optimizer.lr): β_t = θ η_t
 *     eta dt:    η_t = dt_t, the scalar gate's step below            (Mamba2: the SSM writes
 *                x_t·Δ_t, so one Δ_t sets both how much is written and how much is forgotten)
 *     gate scalar: log α_t = −exp(a_log) · dt_t,  dt_t = softplus(h W_a + dt_bias)  (B·T, H)
 *                                                                   (Mamba2 / GDN)
 *     gate vector: log α_t = logsigmoid(h W_a + b_a) / 16                (B·T, H·D) (GLA)
 *     gate constant: nothing is passed; the tuple's constant decay applies
 *     gate multiscale: head h decays by γ_h = 1 − 2^(−5−h), nothing learned (RetNet's
 *                multi-scale retention: 0.969, 0.984, 0.992, … so some heads keep a long memory)
 *     per (sequence b, head h): o_bh = ttt_layer_forward(q_bh, k_bh, v_bh, η_bh, log α_bh)
 *                starting from the initial fast weights (zeros for the linear model; learned
 *                parameters `w0_<i>`, one set per head, for models with hidden structure)
 *     out_norm:  o = RMSNorm(o) per head with a gain shared by the heads (D)
 *     out_gate:  o = o ⊙ silu(h W_g)
 *     mixer(h) = o W_o
 * The softmax mixer (model.mixer: softmax) uses the same q/k/v, conv, output norm/gate and W_o
 * with o_bh = softmax(q_bh k_bhᵀ / sqrt(D) + log M) v_bh (docs/math.md §4 quadratic baseline);
 * positions: learned (a (max_len, d) table added to the embedding) or rope (q, k rotated per head).
 * The fox mixer adds a learned forget gate per head to the scores (mixers/fox.c).
 *
 * Every `auto` (conv, act, qk_norm, eta, gate, out_norm, out_gate, learn_init, and the layer's
 * rope and normalize when unset, which the layer resolves: ttt_layer_parse_block) resolves from
 * the preset's row of block defaults (ttt_block_defaults in layers/layer_presets.c: its paper's
 * and FLA's block, docs/mixers.md "The default block of each mixer"). A tuple without a preset
 * follows the rules of its traits:
 *   conv 4 and SiLU; out_norm and out_gate on;
 *   eta    on unless the fast-weight model is linear with the dot loss (where η would only
 *          rescale v);
 *   gate   constant (the tuple's own γ) when its decay is not 1, else none;
 *   qk_norm on for the linear model with the squared loss: the delta rule is stable for
 *          β‖k‖² ≤ 2, so keys must be bounded;
 *   learn_init on for models other than `linear`.
 * Gate parameterizations: scalar: A = exp(a_log) with A ~ U[1, 16] at init, dt_bias =
 *          softplus⁻¹(dt), dt = exp(U[log dt_min, log dt_max]), by default [1e-3, 1e-1] (Mamba2's
 *          initialization; options model.dt_min / dt_max): α ∈ [0.2, 0.999] at init,
 *          log α ≤ 0 always, finite for any input (softplus never overflows, its exp is bounded).
 *          Vector: GLA's logsigmoid/16 (α ≈ 0.958 at b_a = 0, never below e^(−1/16)… per token
 *          for moderate inputs: the 1/16 keeps the memory long).
 * Parameters are initialized from the seed: every parameter draws from its own stream
 * ttt_rng_fork(seed stream, hash(name)), so adding a parameter never changes another's values.
 * Matrices ~ N(0, init_std²), the output projections W_o and W2 scaled by 1/sqrt(2N) (GPT-2),
 * norm gains 1, biases 0, gate parameters as above. */
#ifndef TTT_SEQ_MODEL_H
#define TTT_SEQ_MODEL_H

#include <stdint.h>

#include "config.h"
#include "params.h"
#include "tensor.h"
#include "layer.h"

/* The `model:` options every mixer shares (for `ttt list` and validation); a mixer's own
 * options are in its registry entry (mixers/mixer.h). */
extern const ttt_option ttt_seq_model_options[];

/* The registered token mixers (src/train/mixers/mixer_list.h): TTT_MIXER_TTT, TTT_MIXER_SOFTMAX,
 * …; ttt_mixer_at(kind) is the entry (mixers/mixer.h). */
typedef enum ttt_mixer_kind {
#define TTT_MIXER(name, ID) TTT_MIXER_##ID,
#include "mixer_list.h"
#undef TTT_MIXER
    TTT_MIXER_COUNT
} ttt_mixer_kind;
/* Room for a mixer's own options and its own parameters per block (mixers/mixer.h). */
#define TTT_MIXER_MAX_OPTS 16
#define TTT_MIXER_MAX_IDS 28
typedef enum ttt_pos_kind { TTT_POS_NONE, TTT_POS_LEARNED, TTT_POS_ROPE } ttt_pos_kind;
typedef enum ttt_gate_kind {
    TTT_GATE_NONE,
    TTT_GATE_CONSTANT, /* the tuple's constant decay (nothing learned) */
    TTT_GATE_SCALAR,   /* learned log α per token and head */
    TTT_GATE_VECTOR,   /* learned log α per token, head and key dimension */
    TTT_GATE_MULTISCALE, /* a constant γ_h = 1 − 2^(−5−h) per head, nothing learned (RetNet) */
} ttt_gate_kind;

/* Per-token write strength η_t (the layer's β_t = θ η_t). */
typedef enum ttt_eta_kind {
    TTT_ETA_NONE,    /* β_t = θ */
    TTT_ETA_SIGMOID, /* η_t = sigmoid(h W_η + b_η), its own projection */
    TTT_ETA_DT,      /* η_t = dt_t, the scalar gate's step: Mamba2's x_t·Δ_t write */
} ttt_eta_kind;

/* What the task feeds in and reads out. */
typedef struct ttt_seq_model_io {
    int vocab;   /* > 0: token ids in, logits over vocab out */
    int in_dim;  /* vocab == 0: features per input position */
    int out_dim; /* vocab == 0: outputs per position */
    int seq_len; /* longest sequence the task produces (learned positions) */
    /* Packed documents (token models; docs/training.md "Packed documents"): nonzero when token
     * doc_sep begins a new document wherever it stands in a sequence. The model then runs every
     * document of a sequence as a sequence of its own: each mixer starts from its initial
     * state, the short convolution and the positions (learned or RoPE) restart at it. 0 (every
     * task's default): a sequence is one document. */
    int packed;
    int doc_sep;
} ttt_seq_model_io;

typedef struct ttt_seq_model_config {
    ttt_seq_model_io io;
    int d_model, n_layers, n_heads, head_dim;
    int mlp;            /* hidden width multiple of the MLP, 0 = no MLP */
    int layernorm;      /* block norms are LayerNorm (else RMSNorm) */
    ttt_mixer_kind mixer;
    ttt_pos_kind positions;
    int max_len;        /* rows of the learned position table */
    int conv;           /* short-convolution kernel, 0 = off */
    int act;            /* SiLU on q, k, v after the convolution (or the projection) */
    int qk_norm, out_norm, out_gate, learn_init;
    ttt_eta_kind eta;
    ttt_gate_kind gate;
    float init_std;
    double dt_min, dt_max; /* initial dt range of the scalar gate (Mamba2: 1e-3, 1e-1) */
    float rope_base;
    float norm_eps;
    ttt_layer layer;    /* the TTT tuple (d_k = d_v = head_dim), for mixers built from `layer:` */
    /* the resolved values of the mixer's own options, indexed as its file says */
    double own[TTT_MIXER_MAX_OPTS];
} ttt_seq_model_config;

/* Validate the `model:` section and the `layer:` section (layer_map may be NULL for a mixer that
 * is not built from a layer, and is then not read; `layer: {mixer: NAME}` is shorthand for
 * model.mixer: NAME) for the task's io and read them into cfg, every auto resolved. Both
 * sections are only read. *model_resolved and *layer_resolved receive the sections as
 * config.resolved.yaml shows them, new trees the caller owns: the given keys, the defaults and
 * the resolved values rendered from cfg (the shorthand shows as model.mixer; *layer_resolved is
 * NULL when layer_map is). Errors name the file:line:col. */
ttt_status ttt_seq_model_parse_section(const ttt_cfg_node *model_map,
                                       const ttt_cfg_node *layer_map, const ttt_seq_model_io *io,
                                       ttt_seq_model_config *cfg, ttt_cfg_node **model_resolved,
                                       ttt_cfg_node **layer_resolved, ttt_error *err);
/* The same for a caller that holds the sections alone (the tests): model_map and layer_map are
 * replaced by their renderings. */
ttt_status ttt_seq_model_parse(ttt_cfg_node *model_map, ttt_cfg_node *layer_map,
                               const ttt_seq_model_io *io, ttt_seq_model_config *cfg,
                               ttt_error *err);
/* An upper bound of the number of parameters ttt_seq_model_init creates for cfg (without
 * allocating): the embedding (vocab × d_model) and head, position table, every block's weights. */
double ttt_seq_model_param_bound(const ttt_seq_model_config *cfg);
/* "deltanet", "softmax", … for tables. */
const char *ttt_seq_model_describe(const ttt_seq_model_config *cfg, char *buf, size_t len);

#define TTT_SEQ_MAX_LAYERS 64

/* Parameter indices of one block (−1 = absent): the shared pieces, and the mixer's own
 * parameters at indices its file defines. */
typedef struct ttt_block_ids {
    int norm1, norm1_b, norm2, norm2_b;
    int wq, wk, wv, conv_q, conv_k, conv_v;
    int onorm, w_g, wo;
    int mlp_w1, mlp_w2;
    int own[TTT_MIXER_MAX_IDS];
} ttt_block_ids;

typedef struct ttt_seq_model {
    ttt_seq_model_config cfg;
    ttt_params params;
    /* A tensor per parameter (same order), aliasing its data and accumulating into its grad:
     * what the forward reads when the caller passes no tensors of its own. */
    ttt_tensor *pt;
    int embed, embed_b, pos, norm_f, norm_f_b, head, head_b;
    ttt_block_ids blk[TTT_SEQ_MAX_LAYERS];
} ttt_seq_model;

/* Build the parameters and initialize them from `seed`. */
ttt_status ttt_seq_model_init(ttt_seq_model *m, const ttt_seq_model_config *cfg, uint64_t seed,
                              ttt_error *err);
void ttt_seq_model_free(ttt_seq_model *m);
/* Tensors over the parameters' data whose gradients go to grads[i] (grads[i] has
 * params.p[i]->n floats): a replica for data-parallel shards. out has params.n entries. */
void ttt_seq_model_bind(const ttt_seq_model *m, ttt_tensor *out, float *const *grads);

/* One batch of B sequences of T positions (row-major, sequence b's position t at b·T + t). */
typedef struct ttt_seq_batch {
    int B, T;
    const int *tokens;    /* (B, T) token ids (token tasks) or NULL */
    const float *inputs;  /* (B, T, in_dim) features (vector tasks) or NULL */
    const int *labels;    /* (B, T) targets of token tasks, TTT_LABEL_IGNORE = not scored */
    const float *targets; /* (B, T, out_dim) targets of vector tasks */
    const float *mask;    /* (B, T) 1 where a vector target is scored, else 0 */
} ttt_seq_batch;

/* What a loss call saw: scored positions, correct arg-maxes (token tasks) and the summed loss
 * (nats for tokens; squared error summed over outputs for vectors). */
typedef struct ttt_seq_stats {
    long count, correct;
    double loss_sum;
} ttt_seq_stats;

/* Forward pass: *out = (B·T, V) logits or (B·T, out_dim) predictions. Records on ctx->tape when
 * ctx->grad is set. pt: parameter tensors (NULL = m->pt). With cfg.io.packed, each document of
 * a sequence (from position 0 or a token cfg.io.doc_sep to the next) runs as a sequence of its
 * own: the mixer is called once per group of documents of one length (learned positions
 * restart too); on the host only (TTT_ERR_UNSUPPORTED on a device). Labels are the caller's:
 * the lm task ignores the separator's (ttt_batch_ignore_label). */
ttt_status ttt_seq_model_forward(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_tensor *pt,
                                 const ttt_seq_batch *batch, ttt_tensor **out, ttt_error *err);
/* Forward + mean loss over the scored positions (cross-entropy in nats, or mean squared error
 * per scored output) as a (1) tensor; `denominator` > 0 replaces the count (so that shards of
 * one batch sum to the batch mean). stats may be NULL; *out_pred (may be NULL) gets the output. */
ttt_status ttt_seq_model_loss(ttt_ctx *ctx, const ttt_seq_model *m, const ttt_tensor *pt,
                              const ttt_seq_batch *batch, double denominator, ttt_tensor **loss,
                              ttt_seq_stats *stats, ttt_tensor **out_pred, ttt_error *err);

#endif
