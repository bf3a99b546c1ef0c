/* The Forgetting Transformer (model.mixer: fox): softmax attention whose scores decay with a
 * learned, data-dependent forget gate per head (docs/math.md §4 "Quadratic baselines"):
 *     log f_t = logsigmoid(h_t W_f + b_f)                       (B·T, H)
 *     o_i = Σ_{j ≤ i} softmax_j(q_i·k_j / sqrt(D) + Σ_{r=j+1}^{i} log f_r) v_j
 * The decay bias is G_i − G_j with G the prefix sum of log f, never a product of gates; the
 * kernel layers/attention/softmax_attention.c computes the same function without a tape and
 * tests/test_mixer_defaults.c holds the two together. Default block: the FoX paper's basic
 * model and FLA's ForgettingAttention layer — no positions (the gate is the position signal),
 * no convolution, no q/k normalization, no output norm or gate (docs/mixers.md). */
#include "mixer.h"

#include <math.h>
#include <string.h>

#include "ops.h"

enum { W_F, B_F };     /* this mixer's parameters in ttt_block_ids.own */
enum { FGATE_BIAS };   /* its options in ttt_seq_model_config.own */

static const ttt_option options[] = {
    {"fgate_bias", TTT_OPT_FLOAT, "0.0", -20.0, 20.0, NULL,
     "fox: initial bias b_f of the forget gate; 0 = FoX's (f = 1/2 per token at init), larger "
     "keeps more of the past at init (f = sigmoid(b_f))"},
    TTT_OPTION_END,
};

static ttt_status parse(ttt_seq_model_config *c, const ttt_cfg_node *map,
                        const ttt_cfg_node *layer_map, ttt_cfg_node **layer_resolved,
                        ttt_error *err) {
    (void)layer_map;
    (void)layer_resolved;
    const int eta = strcmp(ttt_cfg_str(map, "eta"), "dt") == 0 ? TTT_ETA_DT
                                                                 : ttt_mixer_tri(map, "eta");
    if (eta > 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "eta"),
                             "model.eta: forgetting attention has no inner learning rate");
    const char *gate = ttt_cfg_str(map, "gate");
    if (strcmp(gate, "auto") != 0 && strcmp(gate, "scalar") != 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "gate"),
                             "model.gate: forgetting attention's gate is its learned scalar "
                             "forget gate per head (auto or scalar), not %s",
                             gate);
    if (c->conv < 0) c->conv = 0;
    if (c->act < 0) c->act = 0;
    c->qk_norm = ttt_mixer_tri(map, "qk_norm") > 0;
    c->eta = TTT_ETA_NONE;
    c->gate = TTT_GATE_SCALAR;
    c->out_norm = ttt_mixer_tri(map, "out_norm") > 0;
    c->out_gate = ttt_mixer_tri(map, "out_gate") > 0;
    c->learn_init = 0;
    c->own[FGATE_BIAS] = ttt_cfg_float(map, "fgate_bias");
    return TTT_OK;
}

static void add_params(ttt_mixer_builder *b, const ttt_seq_model_config *c, int l,
                       ttt_block_ids *k) {
    ttt_mixer_add_qkv(b, c, l, k);
    const int d = c->d_model, H = c->n_heads;
    /* W_f ~ N(0, init_std²), b_f = fgate_bias (0: f ≈ 1/2 at init, as the FoX code starts) */
    k->own[W_F] = ttt_mixer_add(b, "w_f", 2, (int[]){d, H}, 1, TTT_INIT_NORMAL, c->init_std);
    k->own[B_F] = ttt_mixer_add(b, "b_f", 1, (int[]){H}, 0, TTT_INIT_ZEROS, 0.0f);
    if (k->own[B_F] >= 0) {
        ttt_param *bf = ttt_mixer_param(b, k->own[B_F]);
        for (size_t i = 0; i < bf->n; i++) bf->data[i] = (float)c->own[FGATE_BIAS];
    }
}

static double param_bound(const ttt_seq_model_config *c) {
    return (double)c->d_model * c->n_heads + c->n_heads;
}

static ttt_status forward(const ttt_mixer_call *call, ttt_tensor **out, ttt_error *err) {
    (void)err;
    ttt_ctx *ctx = call->ctx;
    const ttt_seq_model_config *c = &call->m->cfg;
    const int *own = call->ids->own;
    const int H = c->n_heads, D = c->head_dim, B = call->B, T = call->T;
    ttt_tensor *q, *kk, *v; /* (B, T, H·D) */
    ttt_mixer_qkv(call, &q, &kk, &v);
    /* log f = logsigmoid(z) = −softplus(−z), (B, T, H) */
    ttt_tensor *z = ttt_add(ctx, ttt_matmul(ctx, call->h, 0, ttt_mixer_p(call, own[W_F]), 0),
                            ttt_mixer_p(call, own[B_F]));
    ttt_tensor *lf = ttt_mixer_reshape3(ctx, ttt_neg(ctx, ttt_softplus(ctx, ttt_neg(ctx, z))), B,
                                        T, H);
    ttt_tensor *ones = ttt_tensor_1d(ctx, T);
    ttt_tensor_fill(ones, 1.0f);
    /* host arrays of headers, also when the tensors are on a device */
    ttt_tensor **rows = ttt_arena_alloc(ttt_arena_host(ctx->arena), (size_t)B * sizeof *rows);
    ttt_tensor **heads = ttt_arena_alloc(ttt_arena_host(ctx->arena), (size_t)H * sizeof *heads);
    TTT_ASSERT(rows && heads);
    const float scale = 1.0f / sqrtf((float)D);
    for (int b = 0; b < B; b++) {
        ttt_tensor *qb = ttt_mixer_seq(ctx, q, b), *kb = ttt_mixer_seq(ctx, kk, b),
                   *vb = ttt_mixer_seq(ctx, v, b), *fb = ttt_mixer_seq(ctx, lf, b);
        for (int hh = 0; hh < H; hh++) {
            const int c0 = hh * D, c1 = c0 + D;
            ttt_tensor *qh = ttt_slice_cols(ctx, qb, c0, c1); /* (T, D) */
            ttt_tensor *kh = ttt_slice_cols(ctx, kb, c0, c1);
            ttt_tensor *vh = ttt_slice_cols(ctx, vb, c0, c1);
            ttt_mixer_attention_qk(ctx, c, T, &qh, &kh);
            /* G = cumsum(log f) (T); the bias G_i − G_j as two outer products with ones */
            ttt_tensor *g = ttt_cumsum(
                ctx, ttt_reshape(ctx, ttt_slice_cols(ctx, fb, hh, hh + 1), 1, (int[]){T}));
            ttt_tensor *bias = ttt_sub(ctx, ttt_outer(ctx, g, ones), ttt_outer(ctx, ones, g));
            ttt_tensor *s = ttt_add(ctx, ttt_scale(ctx, ttt_matmul(ctx, qh, 0, kh, 1), scale),
                                    bias); /* (T, T) */
            ttt_tensor *p = ttt_softmax_rows(ctx, ttt_causal_fill(ctx, s));
            heads[hh] = ttt_matmul(ctx, p, 0, vh, 0); /* (T, D) */
        }
        rows[b] = H == 1 ? heads[0] : ttt_concat_cols_n(ctx, (const ttt_tensor *const *)heads, H);
    }
    *out = B == 1 ? rows[0] : ttt_concat_rows_n(ctx, (const ttt_tensor *const *)rows, B);
    return TTT_OK; /* (B·T, H·D) */
}

/* Every op of the forward has a device implementation (docs/device_ops.md): the projections,
 * the gate's softplus, the prefix sum, the outer products of the bias, the masked softmax and the
 * products; the T × T scores of each head are stored on the device as on the host. */
static const char *device_refuse(const ttt_seq_model_config *c, char *buf, size_t len) {
    (void)c, (void)buf, (void)len;
    return NULL;
}

const ttt_mixer ttt_mixer_fox = {
    .name = "fox",
    .help = "Forgetting Transformer: softmax attention with a learned forget gate per head",
    .positions = TTT_POS_NONE,
    .options = options,
    .parse = parse,
    .add_params = add_params,
    .param_bound = param_bound,
    .forward = forward,
    .device_refuse = device_refuse,
};
