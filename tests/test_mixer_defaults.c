/* Each mixer's default block (docs/mixers.md "The default block of each mixer"): what every
 * `auto` of the `model:` options resolves to per preset and per mixer, written here from the
 * papers and FLA's layers (not read back from layers/layer_presets.c), the old block reachable through
 * options, and the FoX mixer against the forgetting-attention kernel. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixer.h"
#include "ops.h"
#include "seqmodel.h"
#include "softmax_attention.h"
#include "testutil.h"

#define NV 11
#define NT 7

/* Parse model_yaml / layer_yaml into *c (the maps are validated in place); the resolved model
 * map is returned (caller frees root). */
static ttt_cfg_node *parse(const char *model_yaml, const char *layer_yaml,
                           ttt_seq_model_config *c) {
    char text[1024];
    snprintf(text, sizeof text, "model: %s\nlayer: %s\n", model_yaml, layer_yaml);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_cfg_load_string(text, "<test>", &root, &err), TTT_OK);
    ttt_seq_model_io io = {.vocab = NV, .seq_len = NT};
    ttt_status s = ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"),
                                       (ttt_cfg_node *)ttt_cfg_get(root, "layer"), &io, c, &err);
    ck_assert_msg(s == TTT_OK, "%s / %s: %s", model_yaml, layer_yaml, err.msg);
    return root;
}

/* One row of a block: every choice the defaults make. */
typedef struct block {
    const char *name;
    int conv, silu, qk_norm, eta, gate, out_norm, out_gate, learn_init, rope, ratio;
} block;

enum { E0 = TTT_ETA_NONE, E1 = TTT_ETA_SIGMOID, EDT = TTT_ETA_DT };
enum {
    GN = TTT_GATE_NONE,
    GC = TTT_GATE_CONSTANT,
    GS = TTT_GATE_SCALAR,
    GV = TTT_GATE_VECTOR,
    GM = TTT_GATE_MULTISCALE
};

/* From the papers and FLA's layers of the same name (sources per row in docs/mixers.md):
 *  linear_attention  Katharopoulos et al. 2020: φ = elu+1 and the ratio q S / q z; no
 *                    convolution, no gate, no norm.
 *  retnet            Sun et al. 2023 / FLA multiscale_retention.py: no convolution, multi-scale
 *                    decay, rotary positions, per-head norm, swish output gate.
 *  mamba2            Dao & Gu 2024 / FLA mamba2.py: short convolution + SiLU on x, B, C,
 *                    write x·Δ, scalar gate exp(−A Δ), gated RMSNorm of the output.
 *  gla               Yang et al. 2024 / FLA gla.py: no short convolution, no q/k norm, per-key
 *                    gate logsigmoid/16, per-head RMSNorm with swish output gate.
 *  deltanet          Yang et al. 2024 / FLA delta_net.py: convolution + SiLU, L2 q/k,
 *                    β = sigmoid, per-head RMSNorm, no output gate.
 *  gated_deltanet    Yang et al. 2025 / FLA gated_deltanet.py: as DeltaNet plus the Mamba2 gate
 *                    and the swish output gate.
 *  kda               FLA kda.py: as Gated DeltaNet with the gate per key dimension.
 *  deltaproduct      Siems et al. 2025 / FLA gated_deltaproduct.py: as Gated DeltaNet, with
 *                    n_h keys, values and β per token (the same convolution, SiLU and L2 norm).
 *  loglinear_mamba2  Guo et al. 2025 / FLA log_linear_mamba2.py: Mamba2's block, with λ per
 *                    head and level on the queries.
 *  loglinear_gdn     Guo et al. 2025 (the authors' hattention): Gated DeltaNet's block, λ as above.
 *  mesanet           von Oswald et al. 2025 / FLA mesa_net.py: convolution + SiLU, L2 q/k,
 *                    β = sigmoid, a scalar forget gate, per-head RMSNorm without an output gate.
 *  ttt_linear/mlp    Sun et al. 2024 / ttt-lm-pytorch (Transformer backbone): no convolution, no
 *                    activation, RoPE, learned η, learned W_0, output norm, no gate.
 *  titans            Behrouz et al. 2025 (section 4.4): convolution + SiLU, L2 q/k, data-dependent θ and
 *                    α, output norm and gate, memory initialized from outer parameters.
 *  lact              Zhang et al. 2025 / LaCT layer_lact_swiglu.py: SiLU without convolution,
 *                    L2 q/k, RoPE, learned per-token lr, learned W_0, per-head RMSNorm, no
 *                    gate.
 *  performer, rfa    Choromanski et al. 2021, Peng et al. 2021: the attention of a plain
 *                    Transformer block replaced by the ratio with random features; no
 *                    convolution, gate or norm (as linear_attention). */
static const block presets[] = {
    /* name              conv silu qk eta  gate on og li rope ratio */
    {"linear_attention", 0, 0, 0, E0, GN, 0, 0, 0, 0, 1},
    {"retnet", 0, 0, 0, E0, GM, 1, 1, 0, 1, 0},
    {"mamba2", 4, 1, 0, EDT, GS, 1, 1, 0, 0, 0},
    {"gla", 0, 0, 0, E0, GV, 1, 1, 0, 0, 0},
    {"deltanet", 4, 1, 1, E1, GN, 1, 0, 0, 0, 0},
    {"gated_deltanet", 4, 1, 1, E1, GS, 1, 1, 0, 0, 0},
    {"kda", 4, 1, 1, E1, GV, 1, 1, 0, 0, 0},
    {"deltaproduct", 4, 1, 1, E1, GS, 1, 1, 0, 0, 0},
    {"loglinear_mamba2", 4, 1, 0, EDT, GS, 1, 1, 0, 0, 0},
    {"loglinear_gdn", 4, 1, 1, E1, GS, 1, 1, 0, 0, 0},
    {"mesanet", 4, 1, 1, E1, GS, 1, 0, 0, 0, 0},
    {"ttt_linear", 0, 0, 0, E1, GN, 1, 0, 1, 1, 0},
    {"ttt_mlp", 0, 0, 0, E1, GN, 1, 0, 1, 1, 0},
    {"titans", 4, 1, 1, E1, GS, 1, 1, 1, 0, 0},
    {"lact", 0, 1, 1, E1, GN, 1, 0, 1, 1, 0},
    {"performer", 0, 0, 0, E0, GN, 0, 0, 0, 0, 1},
    {"rfa", 0, 0, 0, E0, GN, 0, 0, 0, 0, 1},
};

static void check_block(const block *w, const ttt_seq_model_config *c) {
    ck_assert_msg(c->conv == w->conv, "%s: conv %d, want %d", w->name, c->conv, w->conv);
    ck_assert_msg(c->act == w->silu, "%s: act %d, want %d", w->name, c->act, w->silu);
    ck_assert_msg(c->qk_norm == w->qk_norm, "%s: qk_norm %d", w->name, c->qk_norm);
    ck_assert_msg((int)c->eta == w->eta, "%s: eta %d, want %d", w->name, c->eta, w->eta);
    ck_assert_msg((int)c->gate == w->gate, "%s: gate %d, want %d", w->name, c->gate, w->gate);
    ck_assert_msg(c->out_norm == w->out_norm, "%s: out_norm %d", w->name, c->out_norm);
    ck_assert_msg(c->out_gate == w->out_gate, "%s: out_gate %d", w->name, c->out_gate);
    ck_assert_msg(c->learn_init == w->learn_init, "%s: learn_init %d", w->name, c->learn_init);
}

START_TEST(each_preset_has_its_papers_block) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const block *w = &presets[i];
        char layer[128];
        snprintf(layer, sizeof layer, "{preset: %s}", w->name);
        ttt_seq_model_config c;
        ttt_cfg_node *root = parse("{d_model: 8, heads: 2}", layer, &c);
        check_block(w, &c);
        ck_assert_msg(c.layer.rope == w->rope, "%s: layer.rope %d", w->name, c.layer.rope);
        ck_assert_msg((c.layer.normalize == TTT_NORMALIZE_RATIO) == w->ratio,
                      "%s: layer.normalize %d", w->name, (int)c.layer.normalize);
        /* config.resolved.yaml shows the resolved values, not auto */
        const ttt_cfg_node *model = ttt_cfg_get(root, "model");
        char conv[8];
        snprintf(conv, sizeof conv, "%d", w->conv);
        ck_assert_str_eq(ttt_cfg_str(model, "conv"), conv);
        ck_assert_str_eq(ttt_cfg_str(model, "act"), w->silu ? "silu" : "none");
        ck_assert_str_eq(ttt_cfg_str(model, "out_gate"), w->out_gate ? "true" : "false");
        ck_assert_str_eq(ttt_cfg_str(ttt_cfg_get(root, "layer"), "rope"),
                         w->rope ? "true" : "false");
        ttt_cfg_free(root);
    }
    /* every preset of the registry has a row here */
    ck_assert_int_eq(ttt_preset_count(), (int)(sizeof presets / sizeof presets[0]));
}
END_TEST

/* The attention mixers: softmax is FLA's Transformer++ attention (RoPE, plain projections);
 * FoX is the Forgetting Transformer's basic model (Lin et al. 2025; FLA forgetting_attn.py): no
 * positions, no convolution, no q/k norm, no output norm or gate; PaTH (Yang et al. 2025; FLA
 * path_attn.py) the same on q, k, v (its convolution is on w alone, tests/test_path.c), its
 * Householder products the position signal. */
START_TEST(attention_mixers_have_their_papers_block) {
    static const struct {
        const char *mixer;
        ttt_pos_kind pos;
        int gate;
    } want[] = {{"softmax", TTT_POS_ROPE, GN},
                {"fox", TTT_POS_NONE, GS},
                {"path", TTT_POS_NONE, GN}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char model[128];
        snprintf(model, sizeof model, "{d_model: 8, heads: 2, mixer: %s}", want[i].mixer);
        ttt_seq_model_config c;
        ttt_cfg_node *root = parse(model, "{}", &c);
        const block w = {want[i].mixer, 0, 0, 0, E0, want[i].gate, 0, 0, 0, 0, 0};
        check_block(&w, &c);
        ck_assert_msg(c.positions == want[i].pos, "%s: positions %d", want[i].mixer,
                      (int)c.positions);
        ttt_cfg_free(root);
    }
}
END_TEST

/* RWKV-7's mixer (docs/math.md "RWKV-7"): its token shift replaces the short convolution, no
 * q/k norm or η of the shared pieces (its rate α and keys are its own), and the block's output
 * norm and gate on in place of RWKV-7's GroupNorm and gate g. */
START_TEST(rwkv7_mixer_has_its_block) {
    ttt_seq_model_config c;
    ttt_cfg_node *root = parse("{d_model: 8, heads: 2, mixer: rwkv7}", "{}", &c);
    const block w = {"rwkv7", 0, 0, 0, E0, GN, 1, 1, 0, 0, 0};
    check_block(&w, &c);
    ck_assert_msg(c.positions == TTT_POS_NONE, "rwkv7: positions %d", (int)c.positions);
    ttt_cfg_free(root);
}
END_TEST

/* A mixer's name given as a layer preset is a located error that says where it lives; an unknown
 * name still lists the presets. */
START_TEST(a_mixer_named_as_a_preset_is_pointed_to_its_place) {
    static const char *const layers[] = {"{preset: rwkv7}", "{preset: rwkv8}"};
    for (int i = 0; i < 2; i++) {
        char text[256];
        snprintf(text, sizeof text, "model: {d_model: 8, heads: 2}\nlayer: %s\n", layers[i]);
        ttt_cfg_node *root = NULL;
        ttt_error err = {0};
        ck_assert_int_eq(ttt_cfg_load_string(text, "m.yaml", &root, &err), TTT_OK);
        ttt_seq_model_io io = {.vocab = NV, .seq_len = NT};
        ttt_seq_model_config c;
        ck_assert_int_ne(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"),
                                             (ttt_cfg_node *)ttt_cfg_get(root, "layer"), &io, &c,
                                             &err),
                         TTT_OK);
        ck_assert_msg(strstr(err.msg, "m.yaml:2"), "%s", err.msg);
        if (i == 0) ck_assert_msg(strstr(err.msg, "layer: {mixer: rwkv7}"), "%s", err.msg);
        else ck_assert_msg(strstr(err.msg, "unknown preset 'rwkv8'"), "%s", err.msg);
        ttt_cfg_free(root);
    }
}
END_TEST

/* A tuple without a preset keeps the rules of its traits (seqmodel.h): the delta rule written
 * as a tuple gets convolution + SiLU, unit keys, a learned η and both output pieces. */
START_TEST(custom_tuples_follow_their_traits) {
    ttt_seq_model_config c;
    ttt_cfg_node *root = parse("{d_model: 8, heads: 2}", "{model: linear, loss: squared}", &c);
    const block delta = {"linear/squared", 4, 1, 1, E1, GN, 1, 1, 0, 0, 0};
    check_block(&delta, &c);
    ttt_cfg_free(root);
    root = parse("{d_model: 8, heads: 2}",
                 "{model: linear, loss: dot, optimizer: {name: sgd, decay: 0.9}}", &c);
    const block decayed = {"linear/dot/decay", 4, 1, 0, E0, GC, 1, 1, 0, 0, 0};
    check_block(&decayed, &c);
    ttt_cfg_free(root);
}
END_TEST

/* The block every preset had before the per-preset table (conv 4 + SiLU, output norm and gate
 * on; q/k norm for the delta-rule family; η by the traits and dt for Mamba2; gates as now;
 * learned W_0 for models other than linear; no RoPE, no ratio) is one set of options away. */
START_TEST(the_previous_block_is_reachable_by_options) {
    static const block old[] = {
        {"linear_attention", 4, 1, 0, E0, GN, 1, 1, 0, 0, 0},
        {"retnet", 4, 1, 0, E0, GM, 1, 1, 0, 0, 0},
        {"mamba2", 4, 1, 0, EDT, GS, 1, 1, 0, 0, 0},
        {"gla", 4, 1, 0, E0, GV, 1, 1, 0, 0, 0},
        {"deltanet", 4, 1, 1, E1, GN, 1, 1, 0, 0, 0},
        {"gated_deltanet", 4, 1, 1, E1, GS, 1, 1, 0, 0, 0},
        {"ttt_linear", 4, 1, 0, E1, GN, 1, 1, 1, 0, 0},
        {"ttt_mlp", 4, 1, 0, E1, GN, 1, 1, 1, 0, 0},
        {"titans", 4, 1, 1, E1, GS, 1, 1, 0, 0, 0},
        {"lact", 4, 1, 0, E1, GN, 1, 1, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
        const block *w = &old[i];
        char model[256], layer[128];
        snprintf(model, sizeof model,
                 "{d_model: 8, heads: 2, conv: 4, act: silu, out_norm: true, out_gate: true, "
                 "qk_norm: %s, learn_init: %s}",
                 w->qk_norm ? "true" : "false", w->learn_init ? "true" : "false");
        snprintf(layer, sizeof layer, "{preset: %s, rope: false, normalize: none}", w->name);
        ttt_seq_model_config c;
        ttt_cfg_node *root = parse(model, layer, &c);
        check_block(w, &c);
        ck_assert(!c.layer.rope && c.layer.normalize == TTT_NORMALIZE_NONE);
        ttt_cfg_free(root);
    }
    ttt_seq_model_config c;
    ttt_cfg_node *root =
        parse("{d_model: 8, heads: 2, mixer: softmax, conv: 4, act: silu, positions: learned}",
              "{}", &c);
    ck_assert(c.conv == 4 && c.act == 1 && c.positions == TTT_POS_LEARNED);
    ttt_cfg_free(root);
}
END_TEST

/* Wrong values of the new options are located errors. */
START_TEST(conv_and_act_are_checked) {
    static const char *const bad[] = {"{conv: 65}", "{conv: -1}", "{conv: four}", "{act: relu}"};
    for (int i = 0; i < 4; i++) {
        char text[256];
        snprintf(text, sizeof text, "model: %s\nlayer: {preset: deltanet}\n", bad[i]);
        ttt_cfg_node *root = NULL;
        ttt_error err = {0};
        ck_assert_int_eq(ttt_cfg_load_string(text, "m.yaml", &root, &err), TTT_OK);
        ttt_seq_model_io io = {.vocab = NV, .seq_len = NT};
        ttt_seq_model_config c;
        ck_assert_int_ne(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"),
                                             (ttt_cfg_node *)ttt_cfg_get(root, "layer"), &io, &c,
                                             &err),
                         TTT_OK);
        ck_assert_msg(strstr(err.msg, "m.yaml:1"), "%s", err.msg);
        ttt_cfg_free(root);
    }
}
END_TEST

/* The FoX mixer's output equals the forgetting-attention kernel (layers/attention, tested
 * against its definition in test_attention) on q, k, v and log f computed here in double from
 * the model's parameters. Both sides are float32 with different summation orders (the kernel
 * accumulates G in float64, the mixer in float32 over T = 7 terms), so they differ by at most
 * the sum of their error bounds (docs/hardening.md "Portable tolerances"). Each output is a
 * convex combination of rows of v; along a path to it a value passes through at most
 * n = d + D + 3T + 5 roundings of at most ε = 2^-24 (the d-term projections, the D-term q·k,
 * the T-term prefix sum of log f, the softmax's T-term normalizer and weighted sum, five
 * element-wise), so the sums are off by at most n·ε·max|v|, and the weights by n·ε of the
 * logits' terms (scale·Σ|q_j k_j| + Σ|log f|, at most L), which exp turns into a relative error
 * of the weights: per path ≤ n·ε·(1 + L)·max|v| (the worst case, no c). A wrong bias sign, a
 * missing mask or scale is O(1). */
START_TEST(fox_equals_the_forgetting_attention_kernel) {
    ttt_seq_model_config c;
    ttt_cfg_node *root = parse("{d_model: 8, heads: 2, layers: 1, mlp: 0, mixer: fox}", "{}", &c);
    ttt_cfg_free(root);
    ttt_seq_model m;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_seq_model_init(&m, &c, 3, &err), TTT_OK);
    const int B = 2, T = NT, d = 8, H = 2, D = 4;
    ttt_rng r;
    ttt_rng_seed(&r, 17);
    /* gates far from the init's 1/2 and varied per head, so that forgetting matters */
    for (int i = 0; i < m.params.n; i++) {
        ttt_param *p = m.params.p[i];
        if (strstr(p->name, ".w_f")) ttt_param_init_normal(p, &r, 1.0f);
        if (strstr(p->name, ".b_f"))
            for (size_t j = 0; j < p->n; j++) p->data[j] = j == 0 ? 2.0f : -0.5f;
        if (strstr(p->name, ".wq") || strstr(p->name, ".wk")) ttt_param_init_normal(p, &r, 0.7f);
    }
    ttt_arena arena;
    ttt_arena_init(&arena, 0);
    ttt_ctx ctx = {.arena = &arena};
    ttt_tensor *h = ttt_tensor_2d(&ctx, B * T, d);
    for (size_t i = 0; i < h->n; i++) h->data[i] = (float)(2.0 * ttt_rng_uniform(&r) - 1.0);
    const ttt_mixer_call call = {.ctx = &ctx, .m = &m, .pt = m.pt, .ids = &m.blk[0], .h = h,
                                 .layer = 0, .B = B, .T = T};
    ttt_tensor *o;
    ck_assert_int_eq(ttt_mixer_at(TTT_MIXER_FOX)->forward(&call, &o, &err), TTT_OK);
    ck_assert_int_eq(TTT_ROWS(o), B * T);
    ck_assert_int_eq(TTT_COLS(o), H * D);
    const float *wq = m.params.p[m.blk[0].wq]->data, *wk = m.params.p[m.blk[0].wk]->data,
                *wv = m.params.p[m.blk[0].wv]->data;
    const ttt_param *wf = m.params.p[m.blk[0].own[0]], *bf = m.params.p[m.blk[0].own[1]];
    ck_assert_str_eq(wf->name, "layer0.mixer.w_f");
    float want[2 * NT * 8], want0[2 * NT * 8], qh[NT * 4], kh[NT * 4], vh[NT * 4], lf[NT], oh[NT * 4];
    double big = 0, L = 0, vmax = 0;
    for (int b = 0; b < B; b++)
        for (int hh = 0; hh < H; hh++) {
            for (int t = 0; t < T; t++) {
                const float *x = h->data + (size_t)(b * T + t) * d;
                for (int j = 0; j < D; j++) {
                    double sq = 0, sk = 0, sv = 0;
                    for (int i = 0; i < d; i++) {
                        sq += (double)x[i] * wq[i * H * D + hh * D + j];
                        sk += (double)x[i] * wk[i * H * D + hh * D + j];
                        sv += (double)x[i] * wv[i * H * D + hh * D + j];
                    }
                    qh[t * D + j] = (float)sq;
                    kh[t * D + j] = (float)sk;
                    vh[t * D + j] = (float)sv;
                }
                double zf = bf->data[hh];
                for (int i = 0; i < d; i++) zf += (double)x[i] * wf->data[i * H + hh];
                lf[t] = (float)(-log1p(exp(-zf))); /* log sigmoid */
            }
            double cum = 0;
            for (int t = 0; t < T; t++) {
                cum += fabs(lf[t]);
                for (int u = 0; u <= t; u++) {
                    double qk = 0;
                    for (int j = 0; j < D; j++) qk += fabs((double)qh[t * D + j] * kh[u * D + j]);
                    L = fmax(L, qk / sqrt((double)D) + cum);
                }
                for (int j = 0; j < D; j++) vmax = fmax(vmax, fabs(vh[t * D + j]));
            }
            /* the perturbed input the comparison must reject: no forgetting gates */
            ttt_softmax_attention(&ctx, oh, qh, kh, vh, NULL, 1.0f / sqrtf((float)D), T, D, D);
            for (int t = 0; t < T; t++)
                for (int j = 0; j < D; j++) want0[(b * T + t) * H * D + hh * D + j] = oh[t * D + j];
            ttt_softmax_attention(&ctx, oh, qh, kh, vh, lf, 1.0f / sqrtf((float)D), T, D, D);
            for (int t = 0; t < T; t++)
                for (int j = 0; j < D; j++) {
                    want[(b * T + t) * H * D + hh * D + j] = oh[t * D + j];
                    big = fmax(big, fabs(oh[t * D + j]));
                }
        }
    const double n_round = d + D + 3 * T + 5;
    const double tol = 2 * n_round * 0x1p-24 * (1 + L) * vmax; /* the sum of the two paths' */
    ck_assert(tol < 1e-3 * big); /* the bound leaves an O(1) error visible */
    TU_ASSERT_CLOSE_F(o->data, want, (size_t)B * T * H * D, tol, 0.0);
    ck_assert(!tu_close_f(o->data, want0, (size_t)B * T * H * D, tol, 0.0, NULL, 0));
    ttt_arena_free(&arena);
    ttt_seq_model_free(&m);
}
END_TEST

/* FoX's own option sets the gate's initial bias, and is refused under other mixers. */
START_TEST(fox_gate_bias_is_its_own_option) {
    ttt_seq_model_config c;
    ttt_cfg_node *root =
        parse("{d_model: 8, heads: 2, layers: 1, mixer: fox, fgate_bias: 3.5}", "{}", &c);
    ttt_cfg_free(root);
    ttt_seq_model m;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_seq_model_init(&m, &c, 1, &err), TTT_OK);
    const ttt_param *bf = m.params.p[m.blk[0].own[1]];
    ck_assert_str_eq(bf->name, "layer0.mixer.b_f");
    for (size_t i = 0; i < bf->n; i++) ck_assert_float_eq(bf->data[i], 3.5f);
    ttt_seq_model_free(&m);
    ck_assert_int_eq(ttt_cfg_load_string("model: {d_model: 8, fgate_bias: 1}\n"
                                         "layer: {preset: deltanet}\n",
                                         "m.yaml", &root, &err),
                     TTT_OK);
    ttt_seq_model_io io = {.vocab = NV, .seq_len = NT};
    ck_assert_int_ne(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"),
                                         (ttt_cfg_node *)ttt_cfg_get(root, "layer"), &io, &c,
                                         &err),
                     TTT_OK);
    ck_assert_msg(strstr(err.msg, "fgate_bias") && strstr(err.msg, "m.yaml:1"), "%s", err.msg);
    ttt_cfg_free(root);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("mixer_defaults");
    TCase *t = tcase_create("core");
    tcase_add_test(t, each_preset_has_its_papers_block);
    tcase_add_test(t, attention_mixers_have_their_papers_block);
    tcase_add_test(t, rwkv7_mixer_has_its_block);
    tcase_add_test(t, a_mixer_named_as_a_preset_is_pointed_to_its_place);
    tcase_add_test(t, custom_tuples_follow_their_traits);
    tcase_add_test(t, the_previous_block_is_reachable_by_options);
    tcase_add_test(t, conv_and_act_are_checked);
    tcase_add_test(t, fox_equals_the_forgetting_attention_kernel);
    tcase_add_test(t, fox_gate_bias_is_its_own_option);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return tu_run(suite()); }
