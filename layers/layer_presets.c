/* The presets: the named tuples of docs/math.md §4 as C data, and their lookup. */
#include "layer.h"

#include <stdio.h>
#include <string.h>

#include "layer_config.h"

/* ------------------------------------------------------------------------------------------ */
/* Presets (docs/math.md §4). Presets whose gates are per-token (mamba2, gla, gated_deltanet, titans)
 * take them from the task when it supplies them; the optimizer's constant `decay` below is what
 * they use otherwise. */

/* A preset's optimizer options: a typed array and its length. */
#define OPTS(...)                                                                              \
    (const ttt_opt_value[]){__VA_ARGS__},                                                      \
        (int)(sizeof((const ttt_opt_value[]){__VA_ARGS__}) / sizeof(ttt_opt_value))
#define NO_OPTS NULL, 0

/* Each preset's block in the trained sequence model (ttt_block_defaults, layer.h): the paper's
 * and FLA's choices, with their sources per row in docs/mixers.md "The default block of each
 * mixer".  conv  act  qk_norm  eta  gate  out_norm  out_gate  learn_init  rope  normalize */
#define BLOCK(conv, act, qk, eta, gate, on, og, li, rope, nz) \
    .block = {conv, act, qk, eta, gate, on, og, li, rope, nz}

static const ttt_preset presets[] = {
    {"linear_attention", "linear attention: Hebbian writes, no forgetting", "linear", "dot",
     "sgd", NO_OPTS, 1, "update_then_apply", "per_block", "none",
     "S_t = S_{t-1} + k_t^T v_t,  o_t = q_t S_t",
     BLOCK("0", "none", "false", "false", "none", "false", "false", "false", "false", "ratio")},
    {"retnet", "RetNet: linear attention with a constant decay gamma", "linear", "dot", "sgd",
     OPTS({"decay", 0.96875, NULL}), 1, "update_then_apply", "per_block", "none",
     "S_t = gamma S_{t-1} + k_t^T v_t",
     BLOCK("0", "none", "false", "false", "multiscale", "true", "true", "false", "true", "none")},
    {"mamba2", "Mamba2 (SSD): a scalar forget gate per token", "linear", "dot", "sgd",
     OPTS({"decay", 0.97, NULL}), 1, "update_then_apply", "per_block", "none",
     "S_t = alpha_t S_{t-1} + k_t^T v_t",
     BLOCK("4", "silu", "false", "dt", "scalar", "true", "true", "false", "false", "none")},
    {"gla", "gated linear attention: a forget gate per token and key dimension", "linear", "dot",
     "sgd", OPTS({"decay", 0.97, NULL}), 1, "update_then_apply", "per_block", "none",
     "S_t = Diag(alpha_t) S_{t-1} + k_t^T v_t",
     BLOCK("0", "none", "false", "false", "vector", "true", "true", "false", "false", "none")},
    {"deltanet", "DeltaNet: online regression with the delta rule", "linear", "squared", "sgd",
     OPTS({"decay_placement", 0, "coupled"}), 1, "update_then_apply", "per_block", "none",
     "S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})",
     BLOCK("4", "silu", "true", "true", "none", "true", "false", "false", "false", "none")},
    {"gated_deltanet", "Gated DeltaNet: delta rule with a coupled forget gate", "linear",
     "squared", "sgd", OPTS({"decay", 0.99, NULL}, {"decay_placement", 0, "coupled"}), 1,
     "update_then_apply", "per_block", "none",
     "S_t = alpha_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t",
     BLOCK("4", "silu", "true", "true", "scalar", "true", "true", "false", "false", "none")},
    /* KDA: Gated DeltaNet's tuple with the gate per key dimension (docs/math.md §4.5); the
     * recurrent and chunkwise (kda/chunkwise) forms and the generic driver compute it. Block as
     * FLA's kda.py: convolution 4 + SiLU, L2 q/k, β = sigmoid, per-key gate, output norm with a
     * gate. */
    {"kda", "KDA (Kimi Delta Attention): delta rule with a coupled forget gate per key dimension",
     "linear", "squared", "sgd", OPTS({"decay", 0.99, NULL}, {"decay_placement", 0, "coupled"}),
     1, "update_then_apply", "per_block", "none",
     "S_t = (I - beta_t k_t^T k_t) Diag(alpha_t) S_{t-1} + beta_t k_t^T v_t",
     BLOCK("4", "silu", "true", "true", "vector", "true", "true", "false", "false", "none")},
    /* Gated DeltaProduct: Gated DeltaNet's tuple taking n_h = 2 steps per token on two key/value
     * pairs (docs/math.md §4.7); the delta_product forms compute it. Block as FLA's
     * gated_deltaproduct.py: convolution 4 + SiLU on q and on the n_h keys and values, L2 q/k,
     * β = sigmoid per pair, scalar gate once per token, output norm with a gate. */
    {"deltaproduct",
     "Gated DeltaProduct: n_h delta steps per token (a product of Householder transitions)",
     "linear", "squared", "sgd", OPTS({"decay", 0.99, NULL}, {"decay_placement", 0, "coupled"}),
     1, "update_then_apply", "per_block", "none",
     "S_t = alpha_t prod_j (I - beta_tj k_tj^T k_tj) S_{t-1} + ..., j = 1..n_h",
     BLOCK("4", "silu", "true", "true", "scalar", "true", "true", "false", "false", "none"), 2},
    /* Log-linear attention (docs/math.md §4.8): Mamba-2's and Gated DeltaNet's tuples with 12
     * Fenwick levels of state (exact up to 2048 tokens; older buckets share the top level); the
     * loglinear form computes them. Blocks as those rules' with λ = softplus(x W_λ) per head and
     * level on the queries (FLA's log_linear_mamba2.py, the authors' h_gated_deltanet). */
    {"loglinear_mamba2", "log-linear Mamba-2: a Fenwick tree of gated linear-attention states",
     "linear", "dot", "sgd", OPTS({"decay", 0.97, NULL}), 1, "update_then_apply", "per_block",
     "none", "S_t^l = alpha_t S_{t-1}^l merged by the Fenwick schedule, o_t = sum_l lambda_t^l q_t S_t^l",
     BLOCK("4", "silu", "false", "dt", "scalar", "true", "true", "false", "false", "none"), 0,
     12},
    {"loglinear_gdn", "log-linear Gated DeltaNet: a Fenwick tree of gated delta-rule states",
     "linear", "squared", "sgd", OPTS({"decay", 0.99, NULL}, {"decay_placement", 0, "coupled"}),
     1, "update_then_apply", "per_block", "none",
     "S_t^l = alpha_t (I - beta_t k_t^T k_t) S_{t-1}^l (+ beta_t k_t^T v_t on l = 0), o_t = sum_l lambda_t^l q_t S_t^l",
     BLOCK("4", "silu", "true", "true", "scalar", "true", "true", "false", "false", "none"), 0,
     12},
    /* MesaNet (docs/math.md §3.11): the exact ridge regression over every past pair, its
     * regularizer λ never forgotten, read at the query through (H_t + λI) x_t = q_t solved by 30
     * conjugate-gradient steps (FLA's default); the mesa_net forms compute it (cg; recurrent
     * solves exactly). Block as FLA's mesa_net.py: convolution 4 + SiLU, L2 q/k, β = sigmoid,
     * a scalar forget gate, output norm without a gate. */
    {"mesanet", "MesaNet: the exact ridge regression of the past at every token (conjugate "
     "gradients)", "linear", "squared", "mesa", OPTS({"decay", 0.99, NULL}, {"cg_steps", 30, NULL}),
     1, "update_then_apply", "per_block", "none",
     "H_t = g_t H_{t-1} + b_t k_t^T k_t, G_t = g_t G_{t-1} + b_t k_t^T v_t, o_t = q_t (H_t + lambda I)^-1 G_t",
     BLOCK("4", "silu", "true", "true", "scalar", "true", "false", "false", "false", "none")},
    {"ttt_linear", "TTT-Linear: x + LN(xW + b) trained by mini-batch GD on reconstruction",
     "ttt_linear", "recon", "sgd", NO_OPTS, 16, "update_then_apply", "per_block", "inverse",
     "mini-batch GD, E_ij = lr_j/(i+1) (dual form, docs/math.md 5.4)",
     BLOCK("0", "none", "false", "true", "none", "true", "false", "true", "true", "none")},
    {"ttt_mlp", "TTT-MLP: x + LN(gelu(x W1 + b1) W2 + b2), mini-batch GD", "ttt_mlp", "recon",
     "sgd", OPTS({"lr", 0.1, NULL}), 16, "update_then_apply", "per_block", "inverse",
     "primal mini-batch GD",
     BLOCK("0", "none", "false", "true", "none", "true", "false", "true", "true", "none")},
    {"titans", "Titans: momentum with a decoupled forget gate, gradients per chunk", "linear",
     "squared", "momentum",
     OPTS({"lr", 0.1, NULL}, {"momentum", 0.9, NULL}, {"decay", 0.99, NULL}), 16,
     "update_then_apply", "per_token", "none",
     "M_t = mu M_{t-1} - theta grad_t(W_chunk start), W_t = alpha W_{t-1} + M_t",
     BLOCK("4", "silu", "true", "true", "scalar", "true", "true", "true", "false", "none")},
    {"lact", "LaCT: SwiGLU fast weight, one large-batch update per block, Muon, renormalized",
     "swiglu", "dot", "large_batch", OPTS({"muon", 1, NULL}), 2048, "apply_then_update",
     "per_block", "none", "W <- renorm(W - lr NS(sum_s eta_s grad_s(W_0))) once per block",
     BLOCK("0", "silu", "true", "true", "none", "true", "false", "true", "true", "none")},
    /* Normalized linear attention with random features (docs/math.md "Random features"): the
     * tuple of linear attention, with the ratio and a feature map φ on q and k; their block is
     * linear attention's (Performer and RFA replace the attention of a plain Transformer
     * block: no convolution, gate or output norm). */
    {"performer", "Performer: normalized linear attention, positive orthogonal random features",
     "linear", "dot", "sgd", NO_OPTS, 1, "update_then_apply", "per_block", "none",
     "S_t = S_{t-1} + phi(k_t)^T v_t, z_t = z_{t-1} + phi(k_t), o_t = phi(q_t) S_t / phi(q_t) z_t",
     "ratio", "favor_orth",
     BLOCK("0", "none", "false", "false", "none", "false", "false", "false", "false", "ratio")},
    {"rfa", "RFA: normalized linear attention, random Fourier features of unit q, k", "linear",
     "dot", "sgd", NO_OPTS, 1, "update_then_apply", "per_block", "none",
     "as performer; feature_gate: S_t = g_t S_{t-1} + (1 - g_t) phi(k_t)^T v_t, z likewise",
     "ratio", "rfa",
     BLOCK("0", "none", "false", "false", "none", "false", "false", "false", "false", "ratio")},
};

static const char *const preset_names[] = {"linear_attention", "retnet", "mamba2", "gla",
                                           "deltanet", "gated_deltanet", "kda", "deltaproduct",
                                           "loglinear_mamba2", "loglinear_gdn", "mesanet",
                                           "ttt_linear", "ttt_mlp", "titans", "lact",
                                           "performer", "rfa"};

#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))
_Static_assert(sizeof preset_names / sizeof preset_names[0] == sizeof presets / sizeof presets[0],
               "preset_names must list every preset");

const ttt_preset *ttt_preset_find(const char *name) {
    for (int i = 0; i < N_PRESETS; i++)
        if (name && strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}
int ttt_preset_count(void) { return N_PRESETS; }
const ttt_preset *ttt_preset_at(int i) { return (i >= 0 && i < N_PRESETS) ? &presets[i] : NULL; }
const char *const *ttt_preset_names(void) { return preset_names; }

const char *ttt_preset_optimizer_text(const ttt_preset *p, char *buf, size_t len) {
    const ttt_optim *o = ttt_optim_find(p->optimizer);
    size_t at = (size_t)snprintf(buf, len, "{name: %s", p->optimizer);
    for (int i = 0; i < p->n_opts && at < len; i++) {
        char num[64];
        const ttt_option *opt = ttt_option_find(o->options, p->opts[i].key);
        at += (size_t)snprintf(buf + at, len - at, ", %s: %s", p->opts[i].key,
                               ttt_opt_value_text(opt, &p->opts[i], num, sizeof num));
    }
    if (at < len) snprintf(buf + at, len - at, "}");
    return buf;
}
