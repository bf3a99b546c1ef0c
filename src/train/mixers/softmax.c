/* Softmax attention (model.mixer: softmax), the quadratic baseline: per head
 * o = softmax(q kᵀ / sqrt(D) + log M) v on the shared q, k, v (docs/math.md §4), with learned
 * positions or RoPE. */
#include "mixer.h"

#include <math.h>
#include <string.h>

#include "ops.h"

static ttt_status parse(ttt_seq_model_config *c, const ttt_cfg_node *map,
                        const ttt_cfg_node *layer_map, ttt_cfg_node **layer_resolved,
                        ttt_error *err) {
    (void)layer_map;
    (void)layer_resolved;
    const int eta = strcmp(ttt_cfg_str(map, "eta"), "dt") == 0 ? TTT_ETA_DT
                                                                 : ttt_mixer_tri(map, "eta");
    /* the Transformer++ block of FLA's attention layer (docs/mixers.md): plain projections,
     * RoPE, no convolution, no q/k normalization, no output norm or gate */
    if (c->conv < 0) c->conv = 0;
    if (c->act < 0) c->act = 0;
    c->qk_norm = ttt_mixer_tri(map, "qk_norm") > 0;
    if (eta > 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "eta"),
                             "model.eta: softmax attention has no inner learning rate");
    c->eta = TTT_ETA_NONE;
    c->gate = TTT_GATE_NONE;
    c->out_norm = ttt_mixer_tri(map, "out_norm") > 0;
    c->out_gate = ttt_mixer_tri(map, "out_gate") > 0;
    c->learn_init = 0;
    return TTT_OK;
}

static void add_params(ttt_mixer_builder *b, const ttt_seq_model_config *c, int l,
                       ttt_block_ids *k) {
    ttt_mixer_add_qkv(b, c, l, k);
}

static ttt_status forward(const ttt_mixer_call *call, ttt_tensor **out, ttt_error *err) {
    (void)err;
    ttt_ctx *ctx = call->ctx;
    const ttt_seq_model_config *c = &call->m->cfg;
    const int H = c->n_heads, D = c->head_dim, B = call->B, T = call->T;
    ttt_tensor *q, *kk, *v; /* (B, T, H·D) */
    ttt_mixer_qkv(call, &q, &kk, &v);
    /* a host array of headers, also when the tensors are on a device */
    ttt_tensor **heads = ttt_arena_alloc(ttt_arena_host(ctx->arena), (size_t)H * sizeof *heads);
    TTT_ASSERT(heads);
    const float scale = 1.0f / sqrtf((float)D);
    for (int hh = 0; hh < H; hh++) {
        const int c0 = hh * D, c1 = c0 + D;
        ttt_tensor *qh = ttt_slice_cols(ctx, q, c0, c1); /* (B, T, D) */
        ttt_tensor *kh = ttt_slice_cols(ctx, kk, c0, c1);
        ttt_tensor *vh = ttt_slice_cols(ctx, v, c0, c1);
        ttt_mixer_attention_qk(ctx, c, T, &qh, &kh);
        /* O = softmax(Q Kᵀ/sqrt(D) + log M) V, batched over sequences (docs/math.md §4). On a
         * device the fused, tiled op (docs/device_ops.md), which never holds the T × T scores;
         * on the host the composition, whose backward is the faster there */
        if (qh->device_kind != TTT_DEVICE_HOST) {
            heads[hh] = ttt_attention_causal(ctx, qh, kh, vh, scale); /* (B, T, D) */
            continue;
        }
        ttt_tensor *s = ttt_scale(ctx, ttt_matmul(ctx, qh, 0, kh, 1), scale); /* (B, T, T) */
        ttt_tensor *p = ttt_softmax_rows(ctx, ttt_causal_fill(ctx, s));
        heads[hh] = ttt_matmul(ctx, p, 0, vh, 0); /* (B, T, D) */
    }
    ttt_tensor *o = H == 1 ? heads[0] : ttt_concat_cols_n(ctx, (const ttt_tensor *const *)heads, H);
    *out = ttt_mixer_reshape2(ctx, o, B * T, H * D);
    return TTT_OK;
}

/* Every op of the forward has a device implementation (docs/device_ops.md), RoPE included
 * (ttt_mixer_rope). */
static const char *device_refuse(const ttt_seq_model_config *c, char *buf, size_t len) {
    (void)c, (void)buf, (void)len;
    return NULL;
}

const ttt_mixer ttt_mixer_softmax = {
    .name = "softmax",
    .help = "softmax attention, the quadratic baseline (learned positions or RoPE)",
    .positions = TTT_POS_ROPE,
    .parse = parse,
    .add_params = add_params,
    .forward = forward,
    .device_refuse = device_refuse,
};
