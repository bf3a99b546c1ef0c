/* PaTH attention (model.mixer: path, or `layer: {mixer: path}`; Yang et al. 2025, "PaTH
 * Attention: Position Encoding via Accumulating Householder Transformations", as FLA's
 * fla/layers/path_attn.py builds it), docs/math.md "PaTH attention": softmax attention whose
 * position signal is a data-dependent product of Householder-like factors between query and key,
 *     H_t = I − β_t w_tᵀ w_t,     s_ij = q_i H_i H_{i−1} ⋯ H_{j+1} k_jᵀ  (j ≤ i; s_ii = q_i k_iᵀ),
 *     o_i = Σ_{j ≤ i} softmax_j(s_ij / sqrt(D)) v_j,
 * per head, with the block of FLA's layer:
 *   - q, k, v = h W_q, h W_k, h W_v, no convolution, no activation, no q/k norm (model.qk_norm
 *     and model.positions: rope remain options, applied as the softmax mixer applies them);
 *   - w = l2norm(silu(conv(h W_w1 W_w2))) per head: a low-rank projection of rank
 *     model.path_w_rank (0: one full-rank W_w), a causal depthwise convolution of width
 *     model.path_w_conv with SiLU (0: neither), and the L2 normalization;
 *   - β = 2 σ(h W_β + b_β) per head, in (0, 2): H_t's eigenvalue along w_t is 1 − β_t ∈ (−1, 1).
 * With model.gate: scalar, FLA's optional forget gate (use_forget_gate, off by default; the
 * paper's PaTH-FoX): log f = logsigmoid(h W_f + b_f) per head, and the logits become
 * (s_ij + G_i − G_j) / sqrt(D) with G the prefix sum of log f (FLA scales the gate's bias with the
 * scores, unlike the fox mixer). Not reproduced: grouped key/value heads (num_kv_heads).
 *
 * The scores are one recorded op per (sequence, head) (path_scores below) of O(T²·D) work with a
 * hand-written backward: each query row is carried back over the keys, u ← u H_t, in float64, and
 * the backward recomputes that walk per query instead of storing it. Host only: it has no CUDA
 * form (device_refuse). */
#include "mixer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "autograd.h"
#include "fused_grad.h"
#include "ops.h"

/* own: W_W2 absent at rank 0, W_F and B_F without the forget gate */
enum { W_W1, W_W2, CONV_W, W_B, B_B, W_F, B_F, N_OWN };
enum { W_RANK, W_CONV }; /* cfg */
_Static_assert(N_OWN <= TTT_MIXER_MAX_IDS, "the path mixer's ids fit in ttt_block_ids.own");

static const ttt_option options[] = {
    {"path_w_rank", TTT_OPT_INT, "32", 0, 65536, NULL,
     "path mixer: rank of the low-rank projection h W_w1 W_w2 that makes the Householder "
     "directions w (FLA's use_low_rank_w); 0 = one full-rank projection (d, H*D)"},
    {"path_w_conv", TTT_OPT_INT, "3", 0, 64, NULL,
     "path mixer: kernel of the causal depthwise convolution (with SiLU) on w before its L2 "
     "normalization (FLA's w_conv1d); 0 = neither convolution nor SiLU"},
    TTT_OPTION_END,
};

static ttt_status parse(ttt_seq_model_config *c, const ttt_cfg_node *map,
                        const ttt_cfg_node *layer_map, ttt_cfg_node **layer_resolved,
                        ttt_error *err) {
    (void)layer_map;
    (void)layer_resolved;
    if (ttt_mixer_tri(map, "eta") > 0 || strcmp(ttt_cfg_str(map, "eta"), "dt") == 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "eta"),
                             "model.eta: PaTH attention is softmax attention; its beta (the "
                             "Householder strength 2 sigmoid(h W_b + b_b)) is computed by the "
                             "mixer and model.eta does not apply");
    const char *gate = ttt_cfg_str(map, "gate");
    const int forget = strcmp(gate, "scalar") == 0;
    if (strcmp(gate, "auto") != 0 && strcmp(gate, "none") != 0 && !forget)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "gate"),
                             "model.gate: PaTH attention takes no forget gate (auto or none, its "
                             "paper's default) or a scalar one per head (scalar: PaTH-FoX), not "
                             "%s",
                             gate);
    /* FLA's PaTHAttention: plain q, k, v projections (the convolution is on w alone) */
    if (c->conv < 0) c->conv = 0;
    if (c->act < 0) c->act = 0;
    c->qk_norm = ttt_mixer_tri(map, "qk_norm") > 0;
    c->eta = TTT_ETA_NONE;
    c->gate = forget ? TTT_GATE_SCALAR : TTT_GATE_NONE;
    c->out_norm = ttt_mixer_tri(map, "out_norm") > 0;
    c->out_gate = ttt_mixer_tri(map, "out_gate") > 0;
    c->learn_init = 0;
    c->own[W_RANK] = (double)ttt_cfg_int(map, "path_w_rank");
    c->own[W_CONV] = (double)ttt_cfg_int(map, "path_w_conv");
    return TTT_OK;
}

static void add_params(ttt_mixer_builder *b, const ttt_seq_model_config *c, int l,
                       ttt_block_ids *k) {
    ttt_mixer_add_qkv(b, c, l, k);
    const int d = c->d_model, H = c->n_heads, C = H * c->head_dim;
    const int R = (int)c->own[W_RANK], K = (int)c->own[W_CONV];
    const float std = c->init_std;
    int *own = k->own;
    if (R > 0) {
        own[W_W1] = ttt_mixer_add(b, "w_w1", 2, (int[]){d, R}, 1, TTT_INIT_NORMAL, std);
        own[W_W2] = ttt_mixer_add(b, "w_w2", 2, (int[]){R, C}, 1, TTT_INIT_NORMAL, std);
    } else {
        own[W_W1] = ttt_mixer_add(b, "w_w", 2, (int[]){d, C}, 1, TTT_INIT_NORMAL, std);
        own[W_W2] = -1;
    }
    /* a kernel per channel, N(0, 1/K) as the shared convolutions (seqmodel.c) */
    own[CONV_W] = K > 0 ? ttt_mixer_add(b, "conv_w", 2, (int[]){K, C}, 0, TTT_INIT_NORMAL,
                                        1.0f / sqrtf((float)K))
                        : -1;
    /* b_β = 0: β = 1 at init, H_t a projection that removes w_t's component */
    own[W_B] = ttt_mixer_add(b, "w_b", 2, (int[]){d, H}, 1, TTT_INIT_NORMAL, std);
    own[B_B] = ttt_mixer_add(b, "b_b", 1, (int[]){H}, 0, TTT_INIT_ZEROS, 0.0f);
    own[W_F] = own[B_F] = -1;
    if (c->gate == TTT_GATE_SCALAR) { /* FLA's g_proj: N(0, init_std²), bias 0 (f = 1/2) */
        own[W_F] = ttt_mixer_add(b, "w_f", 2, (int[]){d, H}, 1, TTT_INIT_NORMAL, std);
        own[B_F] = ttt_mixer_add(b, "b_f", 1, (int[]){H}, 0, TTT_INIT_ZEROS, 0.0f);
    }
}

static double param_bound(const ttt_seq_model_config *c) {
    const double d = c->d_model, H = c->n_heads, C = (double)c->n_heads * c->head_dim;
    const double R = c->own[W_RANK], K = c->own[W_CONV];
    return (R > 0 ? d * R + R * C : d * C) + K * C + 2 * (d * H + H);
}

/* ---- the scores: one recorded op ----------------------------------------------------------- */

/* u ← u H_t = u − β_t (u·w_t) w_t, in float64 */
static void householder(double *u, const float *w, double beta, int D) {
    double uw = 0.0;
    for (int c = 0; c < D; c++) uw += u[c] * w[c];
    const double f = beta * uw;
    for (int c = 0; c < D; c++) u[c] -= f * w[c];
}

static double dot_df(const double *u, const float *k, int D) {
    double s = 0.0;
    for (int c = 0; c < D; c++) s += u[c] * k[c];
    return s;
}

/* Backward: for each query i the walk u_{i,j} = q_i H_i ⋯ H_{j+1} (j = i … 0) is recomputed into
 * U, then run back from j = 0: with a = ∂L/∂u_{i,j−1} and u = u_{i,j}, the step
 * u_{i,j−1} = u − β_j (u·w_j) w_j gives ∂β_j −= (u·w_j)(a·w_j), ∂w_j −= β_j ((a·w_j) u +
 * (u·w_j) a) and ∂u_{i,j} = a H_j + dS_ij k_j; ∂k_j += dS_ij u_{i,j}; ∂q_i = ∂u_{i,i}. The sums
 * over queries run in float64 and are added to the gradients once. */
static void path_scores_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dS) {
    const ttt_tensor *q = e->in[0], *k = e->in[1], *w = e->in[2], *be = e->in[3];
    float *gq = ttt_grad(ctx, q), *gk = ttt_grad(ctx, k), *gw = ttt_grad(ctx, w);
    float *gb = ttt_grad(ctx, be);
    const int T = TTT_ROWS(q), D = TTT_COLS(q);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *U = ttt_fused_scratch(ctx, (size_t)T * D * sizeof(double));
    double *dk = ttt_fused_scratch(ctx, (size_t)T * D * sizeof(double));
    double *dw = ttt_fused_scratch(ctx, (size_t)T * D * sizeof(double));
    double *db = ttt_fused_scratch(ctx, (size_t)T * sizeof(double));
    double *g = ttt_fused_scratch(ctx, (size_t)D * sizeof(double));
    const float *Q = q->data, *Kd = k->data, *W = w->data, *Bt = be->data;
    for (int i = 0; i < T; i++) {
        const float *dSi = dS + (size_t)i * T;
        double *u = U + (size_t)i * D;
        for (int c = 0; c < D; c++) u[c] = Q[(size_t)i * D + c];
        for (int j = i; j >= 0; j--) {
            u = U + (size_t)j * D;
            if (j < i) { /* u_{i,j} = u_{i,j+1} H_{j+1} */
                memcpy(u, U + (size_t)(j + 1) * D, (size_t)D * sizeof(double));
                householder(u, W + (size_t)(j + 1) * D, Bt[j + 1], D);
            }
            const double s = dSi[j];
            if (s != 0.0)
                for (int c = 0; c < D; c++) dk[(size_t)j * D + c] += s * u[c];
        }
        for (int c = 0; c < D; c++) g[c] = dSi[0] * Kd[c];
        for (int j = 1; j <= i; j++) {
            const float *wj = W + (size_t)j * D, *kj = Kd + (size_t)j * D;
            const double *uj = U + (size_t)j * D;
            const double bj = Bt[j], s = dSi[j];
            double wa = 0.0, wu = 0.0;
            for (int c = 0; c < D; c++) {
                wa += g[c] * wj[c];
                wu += uj[c] * wj[c];
            }
            db[j] -= wu * wa;
            double *dwj = dw + (size_t)j * D;
            for (int c = 0; c < D; c++) {
                dwj[c] -= bj * (wa * uj[c] + wu * g[c]);
                g[c] += -bj * wa * wj[c] + s * kj[c];
            }
        }
        if (gq)
            for (int c = 0; c < D; c++) gq[(size_t)i * D + c] += (float)g[c];
    }
    const size_t n = (size_t)T * D;
    if (gk)
        for (size_t x = 0; x < n; x++) gk[x] += (float)dk[x];
    if (gw)
        for (size_t x = 0; x < n; x++) gw[x] += (float)dw[x];
    if (gb)
        for (int t = 0; t < T; t++) gb[t] += (float)db[t];
    ttt_arena_release(ctx->arena, mark);
}

/* S (T, T): S_ij = q_i H_i ⋯ H_{j+1} k_jᵀ for j ≤ i, 0 above the diagonal; q, k, w (T, D) on the
 * host, w's rows unit vectors (not checked: any w is a valid input), beta (T elements). */
static ttt_tensor *path_scores(ttt_ctx *ctx, const ttt_tensor *q, const ttt_tensor *k,
                               const ttt_tensor *w, const ttt_tensor *beta) {
    const int T = TTT_ROWS(q), D = TTT_COLS(q);
    TTT_ASSERT(!ttt_tensor_on_device(q) && !ttt_tensor_on_device(k) &&
               !ttt_tensor_on_device(w) && !ttt_tensor_on_device(beta));
    TTT_ASSERT(TTT_ROWS(k) == T && TTT_COLS(k) == D && TTT_ROWS(w) == T && TTT_COLS(w) == D &&
               beta->n == (size_t)T);
    ttt_tensor *S = ttt_tensor_2d(ctx, T, T);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *u = ttt_fused_scratch(ctx, (size_t)D * sizeof(double));
    for (int i = 0; i < T; i++) {
        float *Si = S->data + (size_t)i * T;
        for (int c = 0; c < D; c++) u[c] = q->data[(size_t)i * D + c];
        Si[i] = (float)dot_df(u, k->data + (size_t)i * D, D);
        for (int j = i - 1; j >= 0; j--) {
            householder(u, w->data + (size_t)(j + 1) * D, beta->data[j + 1], D);
            Si[j] = (float)dot_df(u, k->data + (size_t)j * D, D);
        }
        for (int j = i + 1; j < T; j++) Si[j] = 0.0f;
    }
    ttt_arena_release(ctx->arena, mark);
    ttt_tape_entry *e =
        ttt_tape_record(ctx, path_scores_backward, S, (const ttt_tensor *const[]){q, k, w, beta}, 4);
    if (e) e->name = "path_scores";
    return S;
}

/* ---- the block ------------------------------------------------------------------------------ */

static ttt_status forward(const ttt_mixer_call *call, ttt_tensor **out, ttt_error *err) {
    (void)err;
    ttt_ctx *ctx = call->ctx;
    const ttt_seq_model_config *c = &call->m->cfg;
    const int *own = call->ids->own;
    const int H = c->n_heads, D = c->head_dim, B = call->B, T = call->T, C = H * D;
    ttt_tensor *q, *kk, *v; /* (B, T, H·D) */
    ttt_mixer_qkv(call, &q, &kk, &v);
    q = ttt_mixer_reshape2(ctx, q, B * T, C);
    kk = ttt_mixer_reshape2(ctx, kk, B * T, C);
    v = ttt_mixer_reshape2(ctx, v, B * T, C);
    /* w = l2norm(silu(conv(h W_w1 W_w2))) per head, (B·T, H·D) before the norm */
    ttt_tensor *w = ttt_matmul(ctx, call->h, 0, ttt_mixer_p(call, own[W_W1]), 0);
    if (own[W_W2] >= 0) w = ttt_matmul(ctx, w, 0, ttt_mixer_p(call, own[W_W2]), 0);
    if (own[CONV_W] >= 0)
        w = ttt_mixer_reshape2(
            ctx,
            ttt_conv1d_causal_silu(ctx, ttt_mixer_reshape3(ctx, w, B, T, C),
                                   ttt_mixer_p(call, own[CONV_W])),
            B * T, C);
    /* β = 2 σ(h W_β + b_β), (B·T, H) */
    ttt_tensor *beta = ttt_scale(
        ctx,
        ttt_sigmoid(ctx, ttt_add(ctx, ttt_matmul(ctx, call->h, 0, ttt_mixer_p(call, own[W_B]), 0),
                                 ttt_mixer_p(call, own[B_B]))),
        2.0f);
    /* log f = logsigmoid(h W_f + b_f) = −softplus(−z), (B·T, H), with the forget gate */
    ttt_tensor *lf = NULL, *ones = NULL;
    if (own[W_F] >= 0) {
        ttt_tensor *z = ttt_add(ctx, ttt_matmul(ctx, call->h, 0, ttt_mixer_p(call, own[W_F]), 0),
                                ttt_mixer_p(call, own[B_F]));
        lf = ttt_neg(ctx, ttt_softplus(ctx, ttt_neg(ctx, z)));
        ones = ttt_tensor_1d(ctx, T);
        ttt_tensor_fill(ones, 1.0f);
    }
    /* a host array of headers */
    ttt_tensor **heads =
        ttt_arena_alloc(ttt_arena_host(ctx->arena), (size_t)B * H * sizeof *heads);
    TTT_ASSERT(heads);
    const float scale = 1.0f / sqrtf((float)D);
    for (int bb = 0; bb < B; bb++) {
        const int r0 = bb * T, r1 = r0 + T;
        for (int hh = 0; hh < H; hh++) {
            const int c0 = hh * D, c1 = c0 + D;
            ttt_tensor *qh = ttt_slice_block(ctx, q, r0, r1, c0, c1); /* (T, D) */
            ttt_tensor *kh = ttt_slice_block(ctx, kk, r0, r1, c0, c1);
            ttt_tensor *vh = ttt_slice_block(ctx, v, r0, r1, c0, c1);
            ttt_tensor *wh = ttt_mixer_l2norm(ctx, ttt_slice_block(ctx, w, r0, r1, c0, c1));
            ttt_tensor *bh = ttt_slice_block(ctx, beta, r0, r1, hh, hh + 1); /* (T, 1) */
            ttt_mixer_attention_qk(ctx, c, T, &qh, &kh);
            ttt_tensor *s = path_scores(ctx, qh, kh, wh, bh);
            if (lf) { /* + G_i − G_j, G = cumsum(log f), as two outer products with ones */
                ttt_tensor *g = ttt_cumsum(
                    ctx, ttt_reshape(ctx, ttt_slice_block(ctx, lf, r0, r1, hh, hh + 1), 1,
                                     (int[]){T}));
                s = ttt_add(ctx, s,
                            ttt_sub(ctx, ttt_outer(ctx, g, ones), ttt_outer(ctx, ones, g)));
            }
            s = ttt_scale(ctx, s, scale);
            ttt_tensor *p = ttt_softmax_rows(ctx, ttt_causal_fill(ctx, s));
            heads[(size_t)bb * H + hh] = ttt_matmul(ctx, p, 0, vh, 0); /* (T, D) */
        }
    }
    *out = B * H == 1 ? heads[0] : ttt_concat_grid(ctx, (const ttt_tensor *const *)heads, B, H);
    return TTT_OK; /* (B·T, H·D) */
}

/* The scores op (path_scores) runs on the host only. */
static const char *device_refuse(const ttt_seq_model_config *c, char *buf, size_t len) {
    (void)c;
    snprintf(buf, len,
             "PaTH attention's Householder-product scores (src/train/mixers/path.c) have no CUDA "
             "form; the mixer trains on the host");
    return buf;
}

const ttt_mixer ttt_mixer_path = {
    .name = "path",
    .help = "PaTH attention: softmax attention whose positions are data-dependent Householder "
            "products, s_ij = q_i H_i ... H_{j+1} k_j^T, H_t = I - beta_t w_t^T w_t "
            "(docs/math.md \"PaTH attention\")",
    .positions = TTT_POS_NONE,
    .options = options,
    .parse = parse,
    .add_params = add_params,
    .param_bound = param_bound,
    .forward = forward,
    .device_refuse = device_refuse,
};
