/* RWKV-7's time mixing (model.mixer: rwkv7, or `layer: {mixer: rwkv7}`; Peng et al. 2025,
 * "RWKV-7 Goose", as FLA's fla/layers/rwkv7.py builds it), docs/math.md "RWKV-7": H heads of
 * the generalized delta rule
 *     S_t = Diag(w_t) S_{t−1} − (κ̂_t ⊙ α_t)ᵀ (κ̂_t S_{t−1}) + k̃_tᵀ v_t,     o_t = r_t S_t
 * (a_t = −κ̂_t, b_t = κ̂_t ⊙ α_t; the kernel and its backward: layers/forms/delta_rule/dplr.c),
 * with what the rule needs from RWKV-7's block:
 *   - token shift: each projection reads x_t + μ ⊙ (x_{t−1} − x_t) with its own learned μ
 *     (a causal width-2 convolution with kernel rows 1 − μ, μ);
 *   - r, k, v = x W_r, x W_k, x W_v;
 *   - the decay log w = −e^{−1/2} σ(b_w + tanh(x W_w1) W_w2) ∈ (−0.607, 0) (a low-rank map);
 *   - the in-context rate α = σ(b_α + (x W_α1) W_α2);
 *   - the removal key κ̂ = normalize(k ⊙ k_k) per head, the write key k̃ = k ⊙ (1 + (α − 1) ⊙ k_a);
 *   - the bonus o_t += (Σ_i r_{t,i} k̃_{t,i} ρ_i) v_t per head (ρ = r_k).
 * Not reproduced (the block gives its own): RWKV-7's GroupNorm (the block's per-head RMSNorm,
 * model.out_norm), its low-rank sigmoid output gate g (the block's SiLU gate, model.out_gate),
 * the value residual to the first layer's v (v_first), the channel-mixing MLP (the block's MLP),
 * and the layer-dependent zigzag parts of the initialization. */
#include "mixer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cuda_kernels.h"
#include "dplr.h"
#include "ops.h"

enum { W_R, W_K, W_V, MU, W_W1, W_W2, B_W, W_A1, W_A2, B_A, K_K, K_A, R_K, N_OWN }; /* own */
enum { LORA };                                                                      /* cfg */
_Static_assert(N_OWN <= TTT_MIXER_MAX_IDS, "the rwkv7 mixer's ids fit in ttt_block_ids.own");

/* the token-shifted inputs, rows of MU: one per projection that reads one */
enum { MIX_R, MIX_W, MIX_K, MIX_V, MIX_A, N_MIX };

/* −e^{−1/2}: the least log w (FLA's bound: w ≥ exp(−e^{−1/2}) ≈ 0.545 per token) */
#define RWKV7_LOG_W_MIN (-0.6065306597126334f)
/* tokens between the states the backward keeps (dplr.h) */
#define RWKV7_CHUNK 64

static const ttt_option options[] = {
    {"rwkv7_lora", TTT_OPT_INT, "32", 1, 4096, NULL,
     "rwkv7 mixer: rank of the low-rank maps of the decay w and the in-context rate alpha"},
    TTT_OPTION_END,
};

static ttt_status parse(ttt_seq_model_config *c, const ttt_cfg_node *map,
                        const ttt_cfg_node *layer_map, ttt_cfg_node **layer_resolved,
                        ttt_error *err) {
    (void)layer_map;
    (void)layer_resolved;
    c->own[LORA] = (double)ttt_cfg_int(map, "rwkv7_lora");
    if (c->positions == TTT_POS_ROPE)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "positions"),
                             "model.positions: rope applies to softmax attention; RWKV-7's "
                             "token shift and recurrence know positions (use auto or none)");
    if (ttt_mixer_tri(map, "eta") > 0 || strcmp(ttt_cfg_str(map, "eta"), "dt") == 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "eta"),
                             "model.eta: RWKV-7's write strength is its in-context rate alpha, "
                             "computed by the mixer; model.eta does not apply");
    /* its own projections: the shared q/k/v pieces (short convolution, activation, q/k norm) do
     * not apply; the token shift takes the convolution's place (resolved off, as mamba) */
    if (c->conv < 0) c->conv = 0;
    if (c->act < 0) c->act = 0;
    c->qk_norm = 0;
    c->eta = TTT_ETA_NONE;
    c->gate = TTT_GATE_NONE;
    c->learn_init = 0;
    c->out_norm = ttt_mixer_tri(map, "out_norm") != 0; /* auto: on (RWKV-7's GroupNorm) */
    c->out_gate = ttt_mixer_tri(map, "out_gate") != 0; /* auto: on (RWKV-7's gate g) */
    return TTT_OK;
}

static void add_params(ttt_mixer_builder *b, const ttt_seq_model_config *c, int l,
                       ttt_block_ids *k) {
    const int d = c->d_model, C = c->n_heads * c->head_dim, R = (int)c->own[LORA];
    const float std = c->init_std;
    int *own = k->own;
    own[W_R] = ttt_mixer_add(b, "w_r", 2, (int[]){d, C}, 1, TTT_INIT_NORMAL, std);
    own[W_K] = ttt_mixer_add(b, "w_k", 2, (int[]){d, C}, 1, TTT_INIT_NORMAL, std);
    own[W_V] = ttt_mixer_add(b, "w_v", 2, (int[]){d, C}, 1, TTT_INIT_NORMAL, std);
    own[MU] = ttt_mixer_add(b, "mu", 2, (int[]){N_MIX, d}, 0, TTT_INIT_ZEROS, 0);
    own[W_W1] = ttt_mixer_add(b, "w_w1", 2, (int[]){d, R}, 1, TTT_INIT_NORMAL, std);
    own[W_W2] = ttt_mixer_add(b, "w_w2", 2, (int[]){R, C}, 1, TTT_INIT_ZEROS, 0);
    own[B_W] = ttt_mixer_add(b, "b_w", 1, (int[]){C}, 0, TTT_INIT_ZEROS, 0);
    own[W_A1] = ttt_mixer_add(b, "w_a1", 2, (int[]){d, R}, 1, TTT_INIT_NORMAL, std);
    own[W_A2] = ttt_mixer_add(b, "w_a2", 2, (int[]){R, C}, 1, TTT_INIT_ZEROS, 0);
    own[B_A] = ttt_mixer_add(b, "b_a", 1, (int[]){C}, 0, TTT_INIT_ZEROS, 0);
    own[K_K] = ttt_mixer_add(b, "k_k", 1, (int[]){C}, 0, TTT_INIT_ZEROS, 0);
    own[K_A] = ttt_mixer_add(b, "k_a", 1, (int[]){C}, 0, TTT_INIT_ZEROS, 0);
    own[R_K] = ttt_mixer_add(b, "r_k", 1, (int[]){C}, 0, TTT_INIT_ZEROS, 0);
    if (ttt_mixer_failed(b)) return;
    /* FLA's initialization without its zigzag terms: layer l of L, channel n of d or C */
    const double L = c->n_layers, r01 = L > 1 ? l / (L - 1) : 0.0, r10 = 1.0 - l / L;
    static const double mix_pow[N_MIX] = {0.2, 0.9, 0.7, 0.7, 0.9}; /* r, w, k, v, a */
    float *mu = ttt_mixer_param(b, own[MU])->data;
    for (int j = 0; j < N_MIX; j++)
        for (int n = 0; n < d; n++)
            mu[j * d + n] = (float)(1.0 - pow((double)n / d, mix_pow[j] * r10));
    float *bw = ttt_mixer_param(b, own[B_W])->data, *ba = ttt_mixer_param(b, own[B_A])->data;
    float *kk = ttt_mixer_param(b, own[K_K])->data, *ka = ttt_mixer_param(b, own[K_A])->data;
    float *rk = ttt_mixer_param(b, own[R_K])->data;
    for (int n = 0; n < C; n++) {
        const double lin = C > 1 ? (double)n / (C - 1) - 0.5 : 0.0;
        const double www = -6.0 + 6.0 * pow(C > 1 ? (double)n / (C - 1) : 0.0,
                                            1.0 + pow(r01, 0.3));
        bw[n] = (float)(www + 0.5);
        ba[n] = (float)(-0.19 + 0.4 * lin);
        kk[n] = (float)(0.71 - 0.1 * lin);
        ka[n] = 1.02f;
        rk[n] = -0.04f;
    }
}

static double param_bound(const ttt_seq_model_config *c) {
    const double d = c->d_model, C = (double)c->n_heads * c->head_dim, R = c->own[LORA];
    return 3 * d * C + N_MIX * d + 2 * (d * R + R * C + C) + 3 * C;
}

/* x_t + μ_j ⊙ (x_{t−1} − x_t) for every token of h (B, T, d): the causal convolution of width
 * 2 with kernel rows (1 − μ_j, μ_j); padding restarts at each sequence. */
static ttt_tensor *shifted(ttt_ctx *ctx, const ttt_tensor *h3, const ttt_tensor *mu, int j,
                           int B, int T) {
    const int d = TTT_COLS(mu);
    ttt_tensor *m = ttt_slice_rows(ctx, mu, j, j + 1); /* (1, d) */
    ttt_tensor *w = ttt_concat_rows(ctx, ttt_add_scalar(ctx, ttt_neg(ctx, m), 1.0f), m);
    return ttt_mixer_reshape2(ctx, ttt_conv1d_causal(ctx, h3, w, NULL), B * T, d);
}

/* tanh x = 2 σ(2x) − 1, from the ops there are */
static ttt_tensor *tanh_op(ttt_ctx *ctx, const ttt_tensor *x) {
    return ttt_add_scalar(ctx, ttt_scale(ctx, ttt_sigmoid(ctx, ttt_scale(ctx, x, 2.0f)), 2.0f),
                          -1.0f);
}

static ttt_status forward(const ttt_mixer_call *call, ttt_tensor **out, ttt_error *err) {
    (void)err;
    ttt_ctx *ctx = call->ctx;
    const ttt_seq_model_config *c = &call->m->cfg;
    const int *own = call->ids->own;
    const int H = c->n_heads, D = c->head_dim, B = call->B, T = call->T, d = c->d_model;
#define PW(i) ttt_mixer_p(call, own[i])
    ttt_tensor *h3 = ttt_mixer_reshape3(ctx, call->h, B, T, d), *mu = PW(MU);
    ttt_tensor *r = ttt_matmul(ctx, shifted(ctx, h3, mu, MIX_R, B, T), 0, PW(W_R), 0);
    ttt_tensor *k = ttt_matmul(ctx, shifted(ctx, h3, mu, MIX_K, B, T), 0, PW(W_K), 0);
    ttt_tensor *v = ttt_matmul(ctx, shifted(ctx, h3, mu, MIX_V, B, T), 0, PW(W_V), 0);
    /* log w = −e^{−1/2} σ(b_w + tanh(x W_w1) W_w2), α = σ(b_α + (x W_α1) W_α2): (B·T, C) */
    ttt_tensor *xw = shifted(ctx, h3, mu, MIX_W, B, T), *xa = shifted(ctx, h3, mu, MIX_A, B, T);
    ttt_tensor *zw = ttt_matmul(ctx, tanh_op(ctx, ttt_matmul(ctx, xw, 0, PW(W_W1), 0)), 0,
                                PW(W_W2), 0);
    ttt_tensor *lw = ttt_scale(ctx, ttt_sigmoid(ctx, ttt_add(ctx, zw, PW(B_W))),
                               RWKV7_LOG_W_MIN);
    ttt_tensor *za = ttt_matmul(ctx, ttt_matmul(ctx, xa, 0, PW(W_A1), 0), 0, PW(W_A2), 0);
    ttt_tensor *alpha = ttt_sigmoid(ctx, ttt_add(ctx, za, PW(B_A)));
    /* κ = k ⊙ k_k (normalized per head below); k̃ = k ⊙ (1 + (α − 1) ⊙ k_a) */
    ttt_tensor *kap = ttt_mul(ctx, k, PW(K_K));
    ttt_tensor *kt = ttt_mul(ctx, k, ttt_add_scalar(ctx, ttt_mul(ctx, ttt_add_scalar(ctx, alpha,
                                                                                     -1.0f),
                                                                 PW(K_A)),
                                                    1.0f));
    /* the bonus's weights r ⊙ k̃ ⊙ ρ, summed per head below */
    ttt_tensor *rkr = ttt_mul(ctx, ttt_mul(ctx, r, kt), PW(R_K));
#undef PW
    /* a host array of headers, also when the tensors are on a device */
    ttt_tensor **heads =
        ttt_arena_alloc(ttt_arena_host(ctx->arena), (size_t)B * H * sizeof *heads);
    TTT_ASSERT(heads);
    ttt_tensor *S0 = ttt_tensor_2d(ctx, D, D);
    ttt_tensor_fill(S0, 0.0f);
    for (int bb = 0; bb < B; bb++) {
        const int r0 = bb * T, r1 = r0 + T;
        for (int hh = 0; hh < H; hh++) {
            const int c0 = hh * D, c1 = c0 + D;
            ttt_tensor *rh = ttt_slice_block(ctx, r, r0, r1, c0, c1);
            ttt_tensor *kh = ttt_slice_block(ctx, kt, r0, r1, c0, c1);
            ttt_tensor *vh = ttt_slice_block(ctx, v, r0, r1, c0, c1);
            ttt_tensor *lh = ttt_slice_block(ctx, lw, r0, r1, c0, c1);
            ttt_tensor *ah = ttt_slice_block(ctx, alpha, r0, r1, c0, c1);
            ttt_tensor *kn = ttt_mixer_l2norm(ctx, ttt_slice_block(ctx, kap, r0, r1, c0, c1));
            ttt_tensor *S = NULL;
            ttt_tensor *o = ttt_dplr_recurrent_op(ctx, &S, rh, kh, vh, ttt_neg(ctx, kn),
                                                  ttt_mul(ctx, kn, ah), lh, S0, RWKV7_CHUNK);
            ttt_tensor *bonus = ttt_sum_cols(ctx, ttt_slice_block(ctx, rkr, r0, r1, c0, c1));
            heads[(size_t)bb * H + hh] = ttt_add(ctx, o, ttt_scale_rows(ctx, vh, bonus));
        }
    }
    *out = B * H == 1 ? heads[0] : ttt_concat_grid(ctx, (const ttt_tensor *const *)heads, B, H);
    return TTT_OK; /* (B·T, H·D) */
}

/* Every step of the block has a device implementation (docs/device_ops.md): the token shift
 * (the causal convolution), the projections and maps, and the DPLR recurrence per (sequence,
 * head), whose device op is "Recurrences" there; its backward holds a row of a head's width in
 * shared memory, which bounds the head. */
static const char *device_refuse(const ttt_seq_model_config *c, char *buf, size_t len) {
    if (c->head_dim > TTT_CUDA_DPLR_MAX_DV) {
        snprintf(buf, len,
                 "model.head_dim = %d: the DPLR recurrence's CUDA backward takes heads of at most "
                 "%d columns",
                 c->head_dim, TTT_CUDA_DPLR_MAX_DV);
        return buf;
    }
    return NULL;
}

const ttt_mixer ttt_mixer_rwkv7 = {
    .name = "rwkv7",
    .help = "RWKV-7 time mixing: the generalized delta rule S_t = (Diag(w_t) - (kappa_t * "
            "alpha_t)^T kappa_t) S_{t-1} + k_t^T v_t with token shift (docs/math.md \"RWKV-7\")",
    .positions = TTT_POS_NONE,
    .options = options,
    .parse = parse,
    .add_params = add_params,
    .param_bound = param_bound,
    .forward = forward,
    .device_refuse = device_refuse,
};
