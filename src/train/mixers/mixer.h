/* The registry of token mixers of the sequence model (seqmodel.h), and the shared pieces every
 * mixer builds on.
 *
 * A block of the sequence model is  x = x + W_o · post(mixer(norm(x)))  (then the MLP). The
 * mixer turns h = norm(x) (B·T, d) into o (B·T, H·D); the block owns what comes after it — the
 * output RMSNorm per head, the output gate and W_o — so every mixer gets them the same way, under
 * the same parameter names, and switches them with the resolved config flags (out_norm,
 * out_gate). What comes before it (the q/k/v projections with their short convolution and SiLU,
 * the L2 normalization of q and k) is a set of helpers below that a mixer calls when its
 * architecture has those pieces.
 *
 * To add a mixer, write src/train/mixers/NAME.c defining
 *     const ttt_mixer ttt_mixer_NAME = {...};
 * and add TTT_MIXER(NAME, ID) to mixer_list.h: NAME becomes a value of `model.mixer` and of the
 * `layer: {mixer: NAME}` shorthand, appears in `ttt list`, and TTT_MIXER_ID names it in C
 * (docs/extending.md "Adding a mixer"). Parameters the mixer owns live in its block's `own`
 * array at indices of the mixer's own choosing (an enum in its file), so no shared struct
 * changes; options only it reads live in its `options` table and their resolved values in the
 * config's `own` array. */
#ifndef TTT_MIXER_H
#define TTT_MIXER_H

#include <stddef.h>
#include <stdint.h>

#include "seqmodel.h"

/* How ttt_mixer_add initializes a parameter. */
typedef enum ttt_mixer_init {
    TTT_INIT_NORMAL,  /* N(0, std²) */
    TTT_INIT_ONES,
    TTT_INIT_ZEROS,
    TTT_INIT_A_LOG,   /* log A with A ~ U[1, 16] (Mamba2's decay rates) */
    TTT_INIT_DT_BIAS, /* softplus⁻¹(dt), dt log-uniform in [cfg.dt_min, cfg.dt_max] (Mamba2) */
} ttt_mixer_init;

/* Adds the parameters of one block, in order, each from its own random stream (seqmodel.h). */
typedef struct ttt_mixer_builder ttt_mixer_builder;

/* One call of a mixer on block `layer`. */
typedef struct ttt_mixer_call {
    ttt_ctx *ctx;
    const ttt_seq_model *m;
    const ttt_tensor *pt;     /* parameter tensors (m->params order) */
    const ttt_block_ids *ids; /* this block's parameter indices */
    const ttt_tensor *h;      /* (B·T, d) the normalized input of the block */
    int layer, B, T;
} ttt_mixer_call;

typedef struct ttt_mixer {
    const char *name; /* the value of model.mixer */
    const char *help; /* one line for `ttt list` */
    /* Nonzero: the mixer is built from the `layer:` section (a TTT layer); otherwise that
     * section is not read and may be absent. */
    int uses_layer;
    /* What model.positions: auto means for this mixer (a recurrence or a causal convolution
     * knows positions already; attention does not). */
    ttt_pos_kind positions;
    /* model.* options only this mixer reads (NULL = none), validated beside the shared
     * ttt_seq_model_options; their values reach the config through `parse`. */
    const ttt_option *options;
    /* Resolve the mixer's part of the config: every `auto` of the shared options it decides
     * (conv and act arrive as −1 for auto; positions, qk_norm, eta, gate, out_norm, out_gate,
     * learn_init), its own options into c->own, and, when uses_layer, c->layer from layer_map
     * (the `layer:` section as given) with *layer_resolved its rendering for
     * config.resolved.yaml (ttt_layer_parse_section). `map` is the model section, validated,
     * with every default; c holds every shared value already. Both maps are only read. Errors
     * name the file:line:col. */
    ttt_status (*parse)(ttt_seq_model_config *c, const ttt_cfg_node *map,
                        const ttt_cfg_node *layer_map, ttt_cfg_node **layer_resolved,
                        ttt_error *err);
    /* Add this block's mixer parameters (named "layer<l>.mixer.<name>") in their fixed order,
     * recording their indices in ids (the shared ones through the helpers below, the mixer's
     * own in ids->own). The block adds the output norm, gate and W_o after these. */
    void (*add_params)(ttt_mixer_builder *b, const ttt_seq_model_config *c, int l,
                       ttt_block_ids *ids);
    /* An upper bound of the number of parameters add_params creates for one block, the
     * optional ones all counted (feeds the memory check, which must never underestimate). */
    double (*param_bound)(const ttt_seq_model_config *c);
    /* *o = the mixer's output (B·T, H·D) for call->h, recorded on ctx->tape when training. */
    ttt_status (*forward)(const ttt_mixer_call *call, ttt_tensor **o, ttt_error *err);
    /* The short name of tables ("deltanet", "softmax"); NULL = the mixer's name. */
    const char *(*describe)(const ttt_seq_model_config *c, char *buf, size_t len);
    /* Whether the block runs on a CUDA device (docs/training.md "Device and precision"): NULL
     * = it does not (the trainer refuses train.device: cuda for it); otherwise NULL from the
     * call when the mixer of config c runs there, or a sentence in buf saying why not. */
    const char *(*device_refuse)(const ttt_seq_model_config *c, char *buf, size_t len);
    /* The form the block's layer runs in on a CUDA device, for reports (the benchmark's `form`
     * column); NULL = the mixer runs no form, or none there. */
    const char *(*device_form)(const ttt_seq_model_config *c);
} ttt_mixer;

/* The registry (mixer_list.h order; index = ttt_mixer_kind). */
int ttt_mixer_count(void);
const ttt_mixer *ttt_mixer_at(int i);
/* The entry named `name`, or NULL. */
const ttt_mixer *ttt_mixer_find(const char *name);

/* ---- building parameters ---------------------------------------------------------------- */

/* Add "layer<l>.mixer.<name>" of the given shape (decay: AdamW weight decay applies), drawn
 * from its own stream ttt_rng_fork(model stream, hash(full name)). Returns its index, or −1
 * after an error (kept in the builder; ttt_seq_model_init reports it). */
int ttt_mixer_add(ttt_mixer_builder *b, const char *name, int ndim, const int *shape, int decay,
                  ttt_mixer_init init, float std);
/* The parameter at index i (to fill an initialization of the mixer's own making). */
ttt_param *ttt_mixer_param(ttt_mixer_builder *b, int i);
/* A random stream derived from the model's initialization stream by `key`. */
ttt_rng ttt_mixer_rng(const ttt_mixer_builder *b, uint64_t key);
/* Nonzero once an add failed: stop adding. */
int ttt_mixer_failed(const ttt_mixer_builder *b);
/* An initialization computed with ops (a fast-weight model's own initial state, a learned
 * rule's network): runs work(arg, err) with the ops' arena `a` armed (ttt_arena_run, tensor.h),
 * so that running out of memory in it is the builder's error, which ttt_seq_model_init returns,
 * instead of ending the process; `what` names it in the message. Does nothing after an error. */
void ttt_mixer_run(ttt_mixer_builder *b, ttt_arena *a,
                   ttt_status (*work)(void *arg, ttt_error *err), void *arg, const char *what);
/* The shared q, k, v projections (d, H·D) N(0, init_std²) and, when cfg.conv > 0, their
 * depthwise kernels (conv, H·D) N(0, 1/conv): ids->wq … ids->conv_v. */
void ttt_mixer_add_qkv(ttt_mixer_builder *b, const ttt_seq_model_config *c, int l,
                       ttt_block_ids *ids);

/* ---- forward helpers -------------------------------------------------------------------- */

/* Parameter tensor i of the call. */
ttt_tensor *ttt_mixer_p(const ttt_mixer_call *call, int i);
/* q, k, v (B, T, H·D) each: h W, then, when cfg.conv > 0, the causal short convolution
 * restarting at each sequence, then SiLU when cfg.act. */
void ttt_mixer_qkv(const ttt_mixer_call *call, ttt_tensor **q, ttt_tensor **k, ttt_tensor **v);
/* The same q, k, v side by side in one (B, T, 3·H·D) tensor [q | k | v], from one product with
 * the three projections packed (and one convolution with the three kernels packed); the
 * parameters stay wq, wk, wv, conv_q, conv_k, conv_v. Head h of q is columns [h·D, (h+1)·D), of
 * k the same plus H·D, of v plus 2·H·D. */
ttt_tensor *ttt_mixer_qkv_packed(const ttt_mixer_call *call);
/* Rows divided by their L2 norm (eps 1e-6): the q/k normalization of one head. */
ttt_tensor *ttt_mixer_l2norm(ttt_ctx *ctx, const ttt_tensor *x);
/* Sequence b of a (B, T, n) tensor as (T, n). */
ttt_tensor *ttt_mixer_seq(ttt_ctx *ctx, const ttt_tensor *x, int b);
/* RoPE on a batch of sequences x (B, T, D) (or (T, D)), recorded (src/core/rope.h). */
ttt_tensor *ttt_mixer_rope(ttt_ctx *ctx, const ttt_tensor *x, int T, float base);
/* One head's q and k (T, D) or (B, T, D) for attention: L2-normalized when model.qk_norm, then
 * turned by RoPE when model.positions is rope (the order softmax and FoX share). */
void ttt_mixer_attention_qk(ttt_ctx *ctx, const ttt_seq_model_config *c, int T, ttt_tensor **q,
                            ttt_tensor **k);
ttt_tensor *ttt_mixer_reshape2(ttt_ctx *ctx, const ttt_tensor *x, int r, int c);
ttt_tensor *ttt_mixer_reshape3(ttt_ctx *ctx, const ttt_tensor *x, int a, int b, int c);

/* ---- parsing helpers -------------------------------------------------------------------- */

/* auto|true|false of a validated option → −1|1|0. */
int ttt_mixer_tri(const ttt_cfg_node *map, const char *key);

#endif
