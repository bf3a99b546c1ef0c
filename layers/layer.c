/* The generic TTT layer driver (docs/math.md §1), its presets (§4) and configuration. */
#include "layer.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "composed.h"
#include "feature_maps.h"
#include "kernels.h"
#include "normalized.h"
#include "rope.h"
#include "ttt_dual.h"

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
     * recurrent form and the generic driver compute it. Block as FLA's kda.py: convolution 4 +
     * SiLU, L2 q/k, β = sigmoid, per-key gate, output norm with a gate. */
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
                                           "loglinear_mamba2", "loglinear_gdn",
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

/* ------------------------------------------------------------------------------------------ */
/* Configuration */

const ttt_option ttt_layer_options[] = {
    {"preset", TTT_OPT_STRING, "none", TTT_NO_RANGE, NULL,
     "a named tuple (see `ttt list`); its values are the defaults of the keys below"},
    {"model", TTT_OPT_STRING, "linear", TTT_NO_RANGE, NULL, "fast-weight model f(W; x)"},
    {"loss", TTT_OPT_STRING, "dot", TTT_NO_RANGE, NULL, "inner loss l(f(W; k), v)"},
    {"optimizer", TTT_OPT_MAP, "{name: sgd}", TTT_NO_RANGE, NULL,
     "inner optimizer and its options (a name alone is accepted)"},
    {"mini_batch", TTT_OPT_INT, "1", 1, 1e9, NULL, "tokens per inner step b"},
    {"order", TTT_OPT_CHOICE, "update_then_apply", TTT_NO_RANGE,
     "update_then_apply|apply_then_update", "whether a token reads its own block's update"},
    {"steps", TTT_OPT_CHOICE, "per_block", TTT_NO_RANGE, "per_block|per_token",
     "one optimizer step per block (summed gradient) or one per token (gradients at the block "
     "start)"},
    {"position_scale", TTT_OPT_CHOICE, "none", TTT_NO_RANGE, "none|inverse",
     "inverse: token i of a block reads with lr/(i+1) (TTT-Linear/MLP)"},
    {"form", TTT_OPT_STRING, "auto", TTT_NO_RANGE, NULL,
     "computation form (see `ttt list`); auto = per call, the fastest form available for the "
     "call's inputs, else the generic driver"},
    {"chunk", TTT_OPT_INT, "16", 1, 1 << 20, NULL,
     "chunk size C of the chunkwise forms; 16 = the fastest forward and training step measured "
     "(docs/benchmarks.md \"Chunk size\")"},
    {"scale", TTT_OPT_FLOAT, "1.0", 0.0, 1e6, NULL, "queries are multiplied by this"},
    {"rope", TTT_OPT_BOOL, "false", TTT_NO_RANGE, NULL,
     "rotate q and k by their positions (RoPE, interleaved pairs) before the inner loop"},
    {"rope_base", TTT_OPT_FLOAT, "10000.0", 1.0, 1e9, NULL, "RoPE frequency base"},
    {"normalize", TTT_OPT_CHOICE, "none", TTT_NO_RANGE, "none|ratio|rms",
     "ratio: normalized linear attention (o = phi(q)S/(phi(q)z + 1e-6), phi = feature_map); "
     "rms: post-norm"},
    {"feature_map", TTT_OPT_STRING, "elu1", TTT_NO_RANGE, NULL,
     "phi of normalize: ratio, on q and k: elu1, or random features favor, "
     "favor_orth (Performer), rfa (RFA); the random ones include the softmax scale 1/sqrt(d_k)"},
    {"features", TTT_OPT_INT, "64", 1, 65536, NULL,
     "m, the random features of feature_map favor, favor_orth (width m) and rfa (width 2m)"},
    {"feature_seed", TTT_OPT_INT, "0", 0, 2147483647.0, NULL,
     "seed of the feature map's random matrix: drawn once, fixed for the layer's life (not "
     "trained; the same for every head)"},
    {"feature_gate", TTT_OPT_BOOL, "false", TTT_NO_RANGE, NULL,
     "RFA's gate with normalize: ratio: token t writes with weight 1 - alpha_t (the per-token "
     "gate of the task or sequence model, or the constant decay)"},
    {"steps_per_token", TTT_OPT_INT, "1", 1, 64, NULL,
     "n_h: delta-rule steps per token on n_h key/value pairs (Gated DeltaProduct, docs/math.md "
     "4.6); k, v and eta then have n_h rows per token, q and the gate one"},
    {"levels", TTT_OPT_INT, "1", 1, 48, NULL,
     "log-linear attention (docs/math.md 4.8): this many fast weights at the time scales of a "
     "Fenwick tree, each read with its own query: q then has levels * d_k columns (lambda_t^l "
     "q_t); 1 is the ordinary rule"},
    TTT_OPTION_END,
};

static ttt_cfg_node *get_mut(ttt_cfg_node *map, const char *key) {
    return (ttt_cfg_node *)ttt_cfg_get(map, key);
}

static void set_default(ttt_cfg_node *map, const char *key, const char *text) {
    if (!ttt_cfg_get(map, key)) ttt_cfg_map_set(map, key, ttt_cfg_new_scalar(text, map));
}

static ttt_status check_scalar_name(const ttt_cfg_node *n, const char *what,
                                    const char *const *names, int count, ttt_error *err) {
    if (n->kind != TTT_CFG_SCALAR || !n->scalar)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n, "expected the name of a %s", what);
    return ttt_cfg_check_name(n, what, names, count, err);
}

/* ------------------------------------------------------------------------------------------ */
/* Typed option values (the descriptor's path; YAML values are checked by ttt_cfg_check_map). */

static const ttt_option *find_option(const ttt_option *table, const char *key) {
    for (const ttt_option *o = table; o->name; o++)
        if (strcmp(o->name, key) == 0) return o;
    return NULL;
}

static int option_count(const ttt_option *table) {
    int n = 0;
    while (table[n].name) n++;
    return n;
}

static int is_numeric(ttt_opt_type t) {
    return t == TTT_OPT_INT || t == TTT_OPT_FLOAT || t == TTT_OPT_BOOL;
}

/* The scalar text of a typed value, as the YAML reader would accept it: the shortest decimal that
 * reads back to the same double, so that a value survives the trip through a node exactly. */
static const char *value_text(const ttt_option *o, const ttt_opt_value *v, char *buf, size_t len) {
    if (!is_numeric(o->type)) return v->text;
    if (o->type == TTT_OPT_BOOL)
        snprintf(buf, len, "%s", v->number != 0 ? "true" : "false");
    else if (o->type == TTT_OPT_INT)
        snprintf(buf, len, "%.0f", v->number);
    else {
        snprintf(buf, len, "%.15g", v->number);
        if (strtod(buf, NULL) != v->number) snprintf(buf, len, "%.17g", v->number);
    }
    return buf;
}

/* The option's default (its table's YAML scalar text) as a typed value. */
static ttt_opt_value option_default(const ttt_option *o) {
    ttt_opt_value v = {o->name, 0.0, NULL};
    if (o->type == TTT_OPT_BOOL)
        v.number = o->def && strcmp(o->def, "true") == 0;
    else if (is_numeric(o->type))
        v.number = o->def ? strtod(o->def, NULL) : 0.0;
    else
        v.text = o->def;
    return v;
}

/* Check a typed value against its option: the table says which member it must use, the range
 * and the choices. path names the field in messages ("layer.optimizer.momentum"). */
static ttt_status check_value(const ttt_option *o, const char *path, const ttt_opt_value *v,
                              ttt_error *err) {
    if (is_numeric(o->type) && v->text)
        return ttt_error_set(err, TTT_ERR_CONFIG, "%s: expected %s, got the text '%s'", path,
                             o->type == TTT_OPT_BOOL ? "0 or 1 (false or true)" : "a number",
                             v->text);
    if (!is_numeric(o->type) && !v->text)
        return ttt_error_set(err, TTT_ERR_CONFIG, "%s: expected %s, got no text", path,
                             o->type == TTT_OPT_CHOICE ? o->choices : "a string");
    const double x = v->number;
    switch (o->type) {
    case TTT_OPT_BOOL:
        if (x != 0.0 && x != 1.0)
            return ttt_error_set(err, TTT_ERR_CONFIG,
                                 "%s: expected 0 or 1 (false or true), got %g", path, x);
        return TTT_OK;
    case TTT_OPT_INT:
    case TTT_OPT_FLOAT: {
        const int is_int = o->type == TTT_OPT_INT;
        if (!isfinite(x) || (is_int && x != floor(x)))
            return ttt_error_set(err, TTT_ERR_CONFIG, "%s: expected %s, got %g", path,
                                 is_int ? "an integer" : "a finite number", x);
        if (o->min <= o->max && (x < o->min || x > o->max))
            return ttt_error_set(err, TTT_ERR_RANGE, "%s: expected %s in [%g, %g], got %g", path,
                                 is_int ? "an integer" : "a number", o->min, o->max, x);
        return TTT_OK;
    }
    case TTT_OPT_CHOICE: {
        /* split "a|b|c" in place (no strtok: builds may run on several threads) */
        char choices[256], *names[16];
        snprintf(choices, sizeof choices, "%s", o->choices);
        int n = 0;
        for (char *tok = choices; tok && n < 16;) {
            names[n++] = tok;
            tok = strchr(tok, '|');
            if (tok) *tok++ = '\0';
        }
        for (int i = 0; i < n; i++)
            if (strcmp(names[i], v->text) == 0) return TTT_OK;
        const char *close = ttt_closest_name(v->text, (const char *const *)names, n);
        if (close)
            return ttt_error_set(err, TTT_ERR_CONFIG,
                                 "%s: expected one of %s, got '%s'; did you mean '%s'?", path,
                                 o->choices, v->text, close);
        return ttt_error_set(err, TTT_ERR_CONFIG, "%s: expected one of %s, got '%s'", path,
                             o->choices, v->text);
    }
    default:
        return TTT_OK;
    }
}

/* "layer.model: unknown model 'lineer'; did you mean 'linear'? (valid: ...)". */
static ttt_status check_name(const char *path, const char *what, const char *name,
                             const char *const *names, int count, ttt_error *err) {
    for (int i = 0; i < count; i++)
        if (strcmp(names[i], name) == 0) return TTT_OK;
    char valid[512] = "";
    for (int i = 0; i < count; i++) {
        size_t l = strlen(valid);
        snprintf(valid + l, sizeof valid - l, "%s%s", i ? ", " : "", names[i]);
    }
    const char *close = ttt_closest_name(name, names, count);
    if (close)
        return ttt_error_set(err, TTT_ERR_NAME,
                             "%s: unknown %s '%s'; did you mean '%s'? (valid: %s)", path, what,
                             name, close, valid);
    return ttt_error_set(err, TTT_ERR_NAME, "%s: unknown %s '%s'; expected one of: %s", path, what,
                         name, valid);
}

const char *ttt_preset_optimizer_text(const ttt_preset *p, char *buf, size_t len) {
    const ttt_optim *o = ttt_optim_find(p->optimizer);
    size_t at = (size_t)snprintf(buf, len, "{name: %s", p->optimizer);
    for (int i = 0; i < p->n_opts && at < len; i++) {
        char num[64];
        const ttt_option *opt = find_option(o->options, p->opts[i].key);
        at += (size_t)snprintf(buf + at, len - at, ", %s: %s", p->opts[i].key,
                               value_text(opt, &p->opts[i], num, sizeof num));
    }
    if (at < len) snprintf(buf + at, len - at, "}");
    return buf;
}

/* ------------------------------------------------------------------------------------------ */
/* The descriptor → the layer */

void ttt_layer_desc_init(ttt_layer_desc *d) {
    memset(d, 0, sizeof *d);
    d->lr = d->decay = d->scale = d->rope_base = TTT_UNSET_NUM;
    d->mini_batch = d->chunk = d->rope = TTT_UNSET_INT;
    d->features = d->feature_seed = d->feature_gate = TTT_UNSET_INT;
    d->steps_per_token = TTT_UNSET_INT;
    d->levels = TTT_UNSET_INT;
}

/* Where a field of the `layer:` mapping was written, when the descriptor came from YAML. Errors
 * of the build are then located there (file:line:col), exactly as the YAML reader locates its
 * own; from a C descriptor they name the field alone. */
static ttt_status field_error(ttt_error *err, ttt_status s, const ttt_cfg_node *src,
                              const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static ttt_status field_error(ttt_error *err, ttt_status s, const ttt_cfg_node *src,
                              const char *key, const char *fmt, ...) {
    char msg[TTT_ERROR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const ttt_cfg_node *at = src ? ttt_cfg_get(src, key) : NULL;
    if (at) return ttt_cfg_error(err, s, at, "%s", msg);
    return ttt_error_set(err, s, "%s", msg);
}

/* A layer-level field: the given value (checked against ttt_layer_options), else the preset's,
 * else the table's default. */
static ttt_status layer_number(const char *key, double given, double preset, double *out,
                               ttt_error *err) {
    const ttt_option *o = find_option(ttt_layer_options, key);
    if (given == TTT_UNSET_NUM) {
        *out = preset != TTT_UNSET_NUM ? preset : option_default(o).number;
        return TTT_OK;
    }
    char path[64];
    snprintf(path, sizeof path, "layer.%s", key);
    ttt_opt_value v = {key, given, NULL};
    TTT_TRY(check_value(o, path, &v, err));
    *out = given;
    return TTT_OK;
}

static double int_field(int x) { return x == TTT_UNSET_INT ? TTT_UNSET_NUM : (double)x; }

static ttt_status layer_choice(const char *key, const char *given, const char *preset,
                               const char **out, ttt_error *err) {
    const ttt_option *o = find_option(ttt_layer_options, key);
    if (!given) {
        *out = preset ? preset : o->def;
        return TTT_OK;
    }
    char path[64];
    snprintf(path, sizeof path, "layer.%s", key);
    ttt_opt_value v = {key, 0.0, given};
    TTT_TRY(check_value(o, path, &v, err));
    *out = given;
    return TTT_OK;
}

/* The location given to optimizer options of a C descriptor: optimizers report their own
 * cross-field errors through ttt_cfg_error at a node, and this pseudo-file is cut off again. */
#define DESC_WHERE "<layer descriptor>"
static const ttt_cfg_node desc_where = {.kind = TTT_CFG_SCALAR, .file = DESC_WHERE};

/* The optimizer's options as a detached node, every option present (defaults, then the preset's
 * values when the preset's optimizer is kept, then the descriptor's): the optimizer's `parse`
 * reads a node. Values are located where the YAML wrote them (src_opt) or at DESC_WHERE. */
#define MAX_OPTIM_OPTIONS 32
static ttt_status optimizer_node(const ttt_layer_desc *d, const ttt_preset *p,
                                 const ttt_optim *o, const ttt_cfg_node *src_opt,
                                 ttt_cfg_node **out, ttt_error *err) {
    const int n = option_count(o->options);
    TTT_ASSERT(n <= MAX_OPTIM_OPTIONS);
    ttt_opt_value vals[MAX_OPTIM_OPTIONS];
    for (int i = 0; i < n; i++) vals[i] = option_default(&o->options[i]);
    if (p && strcmp(p->optimizer, o->name) == 0)
        for (int j = 0; j < p->n_opts; j++) {
            const ttt_option *opt = find_option(o->options, p->opts[j].key);
            TTT_ASSERT(opt); /* the preset table is ours */
            vals[opt - o->options] = p->opts[j];
        }
    /* the common options, which are descriptor fields */
    const ttt_opt_value common[3] = {{"lr", d->lr, NULL},
                                     {"decay", d->decay, NULL},
                                     {"decay_placement", 0.0, d->decay_placement}};
    for (int j = 0; j < 3; j++) {
        if (j < 2 ? common[j].number == TTT_UNSET_NUM : !common[j].text) continue;
        const ttt_option *opt = find_option(o->options, common[j].key);
        char path[80];
        snprintf(path, sizeof path, "layer.optimizer.%s", common[j].key);
        TTT_TRY(check_value(opt, path, &common[j], err));
        vals[opt - o->options] = common[j];
    }
    const char *names[MAX_OPTIM_OPTIONS];
    int n_own = 0;
    for (int i = 4; i < n; i++) names[n_own++] = o->options[i].name; /* after the common four */
    for (int j = 0; j < d->n_opts; j++) {
        const ttt_opt_value *v = &d->opts[j];
        const ttt_option *opt = v->key ? find_option(o->options, v->key) : NULL;
        if (opt && opt - o->options < 4)
            return ttt_error_set(err, TTT_ERR_CONFIG,
                                 "layer.optimizer.%s: set through the descriptor's field `%s`, "
                                 "not as an option",
                                 v->key, strcmp(v->key, "name") == 0 ? "optimizer" : v->key);
        if (!opt) {
            char path[64];
            snprintf(path, sizeof path, "layer.optimizer (%s)", o->name);
            if (!n_own)
                return ttt_error_set(err, TTT_ERR_CONFIG,
                                     "%s: unknown option '%s'; %s has no options besides lr, "
                                     "decay and decay_placement",
                                     path, v->key ? v->key : "(null)", o->name);
            return check_name(path, "option", v->key ? v->key : "(null)", names, n_own, err);
        }
        char path[80];
        snprintf(path, sizeof path, "layer.optimizer.%s", v->key);
        TTT_TRY(check_value(opt, path, v, err));
        vals[opt - o->options] = *v;
    }
    const unsigned long oom_mark = ttt_cfg_alloc_failures();
    ttt_cfg_node *node = ttt_cfg_new_map(src_opt ? src_opt : &desc_where);
    const ttt_cfg_node *nw = src_opt ? ttt_cfg_get(src_opt, "name") : NULL;
    ttt_cfg_map_set(node, "name", ttt_cfg_new_scalar(o->name, nw ? nw : &desc_where));
    for (int i = 1; i < n; i++) {
        char num[64];
        const ttt_cfg_node *w = src_opt ? ttt_cfg_get(src_opt, o->options[i].name) : NULL;
        ttt_cfg_map_set(node, o->options[i].name,
                        ttt_cfg_new_scalar(value_text(&o->options[i], &vals[i], num, sizeof num),
                                           w ? w : &desc_where));
    }
    if (ttt_cfg_alloc_failures() != oom_mark) { /* a value was lost: never read a partial map */
        ttt_cfg_free(node);
        return ttt_cfg_out_of_memory(err, "layer.optimizer");
    }
    *out = node;
    return TTT_OK;
}

static ttt_status build_optimizer(const ttt_layer_desc *d, const ttt_preset *p, ttt_layer *L,
                                  const ttt_cfg_node *src, ttt_error *err) {
    const char *name = d->optimizer ? d->optimizer : p ? p->optimizer : "sgd";
    TTT_TRY(check_name("layer.optimizer", "optimizer", name, ttt_optim_names(), ttt_optim_count(),
                       err));
    L->optim = ttt_optim_find(name);
    const ttt_cfg_node *src_opt = src ? ttt_cfg_get(src, "optimizer") : NULL;
    ttt_cfg_node *opt = NULL;
    TTT_TRY(optimizer_node(d, p, L->optim, src_opt, &opt, err));
    L->lr = (float)ttt_cfg_float(opt, "lr");
    L->decay = (float)ttt_cfg_float(opt, "decay");
    L->coupled = strcmp(ttt_cfg_str(opt, "decay_placement"), "coupled") == 0;
    TTT_ASSERT(L->optim->cfg_size <= TTT_OPTIM_CFG_MAX);
    memset(L->optim_cfg, 0, sizeof L->optim_cfg);
    ttt_status s = L->optim->parse ? L->optim->parse(L->optim_cfg, opt, err) : TTT_OK;
    ttt_cfg_free(opt);
    const size_t cut = strlen(DESC_WHERE ": ");
    if (s != TTT_OK && err && strncmp(err->msg, DESC_WHERE ": ", cut) == 0)
        memmove(err->msg, err->msg + cut, strlen(err->msg + cut) + 1);
    return s;
}

/* The feature map of normalize: ratio and its options (docs/math.md "Random features"). */
static ttt_status build_features(const ttt_layer_desc *d, const ttt_preset *p, ttt_layer *L,
                                 int d_k, const ttt_cfg_node *src, ttt_error *err) {
    double x;
    const char *name = d->feature_map ? d->feature_map
                       : p && p->feature_map ? p->feature_map
                                             : find_option(ttt_layer_options, "feature_map")->def;
    TTT_TRY(check_name("layer.feature_map", "feature map", name, ttt_feature_map_names(),
                       ttt_feature_map_count(), err));
    const ttt_feature_map *fm = ttt_feature_map_find(name);
    TTT_TRY(layer_number("features", int_field(d->features), TTT_UNSET_NUM, &x, err));
    L->features = (int)x;
    TTT_TRY(layer_number("feature_seed", int_field(d->feature_seed), TTT_UNSET_NUM, &x, err));
    L->feature_seed = (uint64_t)x;
    TTT_TRY(layer_number("feature_gate", int_field(d->feature_gate), TTT_UNSET_NUM, &x, err));
    L->feature_gate = x != 0.0;
    const int ratio = L->normalize == TTT_NORMALIZE_RATIO;
    if (!ratio && fm != ttt_feature_map_at(0))
        return field_error(err, TTT_ERR_CONFIG, src, "feature_map",
                           "layer.feature_map: %s is a feature map of normalized linear "
                           "attention; it needs normalize: ratio (got normalize: %s)",
                           fm->name, L->normalize == TTT_NORMALIZE_RMS ? "rms" : "none");
    if (!ratio && L->feature_gate)
        return field_error(err, TTT_ERR_CONFIG, src, "feature_gate",
                           "layer.feature_gate: RFA's gate weights the writes of normalized "
                           "linear attention; it needs normalize: ratio");
    if (ratio && fm->rows(L->features) > 0 && d_k > 1024)
        return field_error(err, TTT_ERR_RANGE, src, "feature_map",
                           "layer.feature_map: %s draws its random matrix for key dimensions up "
                           "to 1024; got d_k = %d",
                           fm->name, d_k);
    L->fmap = ratio ? fm : NULL;
    return TTT_OK;
}

/* steps_per_token (docs/math.md §4.7): n_h delta-rule steps per token are defined for the delta
 * rule's tuple, whose forms (delta_product) take the n_h·T keys; any other tuple is refused
 * here, naming the option. */
static ttt_status build_substeps(const ttt_layer_desc *d, const ttt_preset *p, ttt_layer *L,
                                 const ttt_cfg_node *src, ttt_error *err) {
    double x;
    TTT_TRY(layer_number("steps_per_token", int_field(d->steps_per_token),
                         p && p->steps_per_token > 0 ? p->steps_per_token : TTT_UNSET_NUM, &x,
                         err));
    L->substeps = (int)x;
    if (L->substeps == 1) return TTT_OK;
    const char *why =
        !(L->model->traits & TTT_MODEL_LINEAR_MAP) || !(L->loss->traits & TTT_LOSS_RESIDUAL)
            ? "a linear model and the squared loss (the delta rule)"
        : !ttt_layer_optim_traits(L).plain_sgd ? "plain sgd"
        : L->mini_batch != 1                   ? "mini_batch 1"
        : L->order != TTT_ORDER_UPDATE_THEN_APPLY ? "order update_then_apply"
        : L->pos_inverse                       ? "position_scale none"
        : !L->coupled && L->decay != 1.0f      ? "decay_placement coupled"
        : L->rope                              ? "rope false (the n_h keys of a token share its "
                                                 "position)"
        : L->normalize != TTT_NORMALIZE_NONE && L->normalize != TTT_NORMALIZE_RMS
            ? "normalize none or rms"
        : L->feature_gate ? "feature_gate false"
                          : NULL;
    if (why)
        return field_error(err, TTT_ERR_CONFIG, src, "steps_per_token",
                           "layer.steps_per_token: %d delta steps per token (Gated "
                           "DeltaProduct, docs/math.md §4.7) need %s; expected steps_per_token: "
                           "1 for this tuple",
                           L->substeps, why);
    return TTT_OK;
}

/* levels (docs/math.md §4.8): log-linear attention is defined on linear attention and the
 * (gated) delta rule, whose loglinear form takes the Λ·d_k query columns; any other tuple is
 * refused here, naming the option. */
static ttt_status build_levels(const ttt_layer_desc *d, const ttt_preset *p, ttt_layer *L,
                               const ttt_cfg_node *src, ttt_error *err) {
    double x;
    TTT_TRY(layer_number("levels", int_field(d->levels),
                         p && p->levels > 0 ? p->levels : TTT_UNSET_NUM, &x, err));
    L->levels = (int)x;
    if (L->levels == 1) return TTT_OK;
    const int delta =
        (L->model->traits & TTT_MODEL_LINEAR_MAP) && (L->loss->traits & TTT_LOSS_RESIDUAL);
    const char *why =
        !delta && !ttt_layer_is_linear_attention(L)
            ? "linear attention or the delta rule (a linear model, the dot or squared loss)"
        : !ttt_layer_optim_traits(L).plain_sgd    ? "plain sgd"
        : L->mini_batch != 1                      ? "mini_batch 1"
        : L->order != TTT_ORDER_UPDATE_THEN_APPLY ? "order update_then_apply"
        : L->pos_inverse                          ? "position_scale none"
        : delta && !L->coupled && L->decay != 1.0f ? "decay_placement coupled"
        : L->rope                                 ? "rope false"
        : L->normalize != TTT_NORMALIZE_NONE && L->normalize != TTT_NORMALIZE_RMS
            ? "normalize none or rms"
        : L->feature_gate  ? "feature_gate false"
        : L->substeps > 1  ? "steps_per_token 1"
                           : NULL;
    if (why)
        return field_error(err, TTT_ERR_CONFIG, src, "levels",
                           "layer.levels: %d levels of state (log-linear attention, "
                           "docs/math.md §4.8) need %s; expected levels: 1 for this tuple",
                           L->levels, why);
    return TTT_OK;
}

/* The build behind ttt_layer_build and ttt_layer_parse; src is the validated `layer:` mapping
 * the descriptor was read from (for error locations), or NULL. */
static ttt_status build_at(const ttt_layer_desc *d, int d_k, int d_v, ttt_layer *L,
                           const ttt_cfg_node *src, ttt_error *err) {
    memset(L, 0, sizeof *L);
    const ttt_preset *p = NULL;
    if (d->preset && strcmp(d->preset, "none") != 0) {
        TTT_TRY(check_name("layer.preset", "preset", d->preset, preset_names, N_PRESETS, err));
        p = ttt_preset_find(d->preset);
        L->preset = p->name;
    }
    const char *model = d->model ? d->model : p ? p->model : "linear";
    TTT_TRY(check_name("layer.model", "model", model, ttt_model_names(), ttt_model_count(), err));
    L->model = ttt_model_find(model);
    const char *loss = d->loss ? d->loss : p ? p->loss : "dot";
    TTT_TRY(check_name("layer.loss", "loss", loss, ttt_loss_names(), ttt_loss_count(), err));
    L->loss = ttt_loss_find(loss);
    TTT_TRY(build_optimizer(d, p, L, src, err));

    double x;
    const char *c;
    TTT_TRY(layer_number("mini_batch", int_field(d->mini_batch),
                         p ? p->mini_batch : TTT_UNSET_NUM, &x, err));
    L->mini_batch = (int)x;
    TTT_TRY(layer_choice("order", d->order, p ? p->order : NULL, &c, err));
    L->order = strcmp(c, "apply_then_update") == 0 ? TTT_ORDER_APPLY_THEN_UPDATE
                                                   : TTT_ORDER_UPDATE_THEN_APPLY;
    TTT_TRY(layer_number("scale", d->scale, TTT_UNSET_NUM, &x, err));
    L->scale = (float)x;
    TTT_TRY(layer_choice("steps", d->steps, p ? p->steps : NULL, &c, err));
    L->step_per_token = strcmp(c, "per_token") == 0;
    TTT_TRY(layer_number("rope", int_field(d->rope), TTT_UNSET_NUM, &x, err));
    L->rope = x != 0.0;
    TTT_TRY(layer_number("rope_base", d->rope_base, TTT_UNSET_NUM, &x, err));
    L->rope_base = (float)x;
    TTT_TRY(layer_choice("normalize", d->normalize, p ? p->normalize : NULL, &c, err));
    L->normalize = strcmp(c, "ratio") == 0 ? TTT_NORMALIZE_RATIO
                   : strcmp(c, "rms") == 0 ? TTT_NORMALIZE_RMS
                                           : TTT_NORMALIZE_NONE;
    TTT_TRY(layer_choice("position_scale", d->position_scale, p ? p->position_scale : NULL, &c,
                         err));
    L->pos_inverse = strcmp(c, "inverse") == 0;
    TTT_TRY(build_features(d, p, L, d_k, src, err));
    if (L->model->square && d_k != d_v)
        return field_error(err, TTT_ERR_CONFIG, src, "model",
                           "layer.model: %s adds its input to its output, so it needs equal key "
                           "and value dimensions; got d_k = %d, d_v = %d",
                           L->model->name, d_k, d_v);
    L->d_k = d_k;
    L->d_v = d_v;
    L->d_phi = L->fmap ? L->fmap->width(d_k, L->features) : d_k;

    TTT_TRY(layer_number("chunk", int_field(d->chunk), TTT_UNSET_NUM, &x, err));
    L->chunk = (int)x;
    TTT_TRY(build_substeps(d, p, L, src, err));
    TTT_TRY(build_levels(d, p, L, src, err));
    if (L->normalize == TTT_NORMALIZE_RATIO && !ttt_layer_is_linear_attention(L))
        return field_error(err, TTT_ERR_CONFIG, src, "normalize",
                           "layer.normalize: ratio is normalized linear attention, the ratio of "
                           "two linear-attention states (docs/math.md §4); it needs model linear, "
                           "loss dot, plain sgd and update_then_apply");
    /* `form: auto` stays auto: the form is chosen per call, for that call's inputs
     * (ttt_form_choose). A named form must be a registry entry's (the pointer kept is the
     * registry's own string, so the layer outlives the text it was read from) and must apply to
     * the tuple for some inputs; the inputs of each call are checked again then. */
    const char *form = d->form ? d->form : "auto";
    if (strcmp(form, "auto") == 0) {
        L->form = "auto";
        return TTT_OK;
    }
    for (int i = 0; i < ttt_form_count() && !L->form; i++)
        if (strcmp(ttt_form_at(i)->form, form) == 0) L->form = ttt_form_at(i)->form;
    if (!L->form)
        return field_error(err, TTT_ERR_CONFIG, src, "form",
                           "layer.form: unknown form '%s'; expected one of %s", form,
                           ttt_form_choices());
    const char *why = ttt_form_unavailable(L);
    if (why)
        return field_error(err, TTT_ERR_CONFIG, src, "form",
                           "layer.form: no %s form for (model %s, loss %s, optimizer %s, "
                           "mini_batch %d, order %s): %s; expected form: generic",
                           form, L->model->name, L->loss->name, L->optim->name, L->mini_batch,
                           L->order == TTT_ORDER_UPDATE_THEN_APPLY ? "update_then_apply"
                                                                   : "apply_then_update",
                           why);
    return TTT_OK;
}

ttt_status ttt_layer_build(const ttt_layer_desc *d, int d_k, int d_v, ttt_layer *out,
                           ttt_error *err) {
    return build_at(d, d_k, d_v, out, NULL, err);
}

/* ------------------------------------------------------------------------------------------ */
/* YAML → descriptor */

/* Fill a preset's tuple into the keys the user left out, so that the resolved configuration
 * shows every value the run used. */
static ttt_status apply_preset(ttt_cfg_node *map, ttt_error *err) {
    const ttt_cfg_node *pn = ttt_cfg_get(map, "preset");
    if (!pn || (pn->kind == TTT_CFG_SCALAR && pn->scalar && strcmp(pn->scalar, "none") == 0))
        return TTT_OK;
    TTT_TRY(check_scalar_name(pn, "preset", preset_names, N_PRESETS, err));
    const ttt_preset *p = ttt_preset_find(pn->scalar);
    char buf[64];
    set_default(map, "model", p->model);
    set_default(map, "loss", p->loss);
    snprintf(buf, sizeof buf, "%d", p->mini_batch);
    set_default(map, "mini_batch", buf);
    set_default(map, "order", p->order);
    set_default(map, "steps", p->steps);
    set_default(map, "position_scale", p->position_scale);
    if (p->normalize) set_default(map, "normalize", p->normalize);
    if (p->feature_map) set_default(map, "feature_map", p->feature_map);
    if (p->steps_per_token > 0) {
        snprintf(buf, sizeof buf, "%d", p->steps_per_token);
        set_default(map, "steps_per_token", buf);
    }
    if (p->levels > 0) {
        snprintf(buf, sizeof buf, "%d", p->levels);
        set_default(map, "levels", buf);
    }
    ttt_cfg_node *opt = get_mut(map, "optimizer");
    if (!opt) {
        ttt_cfg_map_set(map, "optimizer", ttt_cfg_new_map(map));
        if (!(opt = get_mut(map, "optimizer"))) return ttt_cfg_out_of_memory(err, "layer");
    }
    if (opt->kind != TTT_CFG_MAP) return TTT_OK; /* reported by the schema check */
    /* The preset's optimizer options fill the keys the user did not give — but only when the
     * user kept the preset's optimizer: options of another optimizer would not fit it. */
    const ttt_cfg_node *uname = ttt_cfg_get(opt, "name");
    if (uname && !(uname->kind == TTT_CFG_SCALAR && uname->scalar &&
                   strcmp(uname->scalar, p->optimizer) == 0))
        return TTT_OK;
    /* preset-supplied values are located at the preset key, for messages */
    if (!uname) ttt_cfg_map_set(opt, "name", ttt_cfg_new_scalar(p->optimizer, pn));
    const ttt_optim *o = ttt_optim_find(p->optimizer);
    for (int i = 0; i < p->n_opts; i++)
        if (!ttt_cfg_get(opt, p->opts[i].key)) {
            const ttt_option *oo = find_option(o->options, p->opts[i].key);
            ttt_cfg_map_set(opt, p->opts[i].key,
                            ttt_cfg_new_scalar(value_text(oo, &p->opts[i], buf, sizeof buf), pn));
        }
    return TTT_OK;
}

/* The validated optimizer mapping: its name, then its schema (defaults filled in). */
static ttt_status check_optimizer(ttt_cfg_node *opt, ttt_error *err) {
    if (!ttt_cfg_get(opt, "name")) /* the default optimizer, as for `optimizer:` left out */
        ttt_cfg_map_set(opt, "name", ttt_cfg_new_scalar("sgd", opt));
    const ttt_cfg_node *name = ttt_cfg_get(opt, "name");
    TTT_TRY(check_scalar_name(name, "optimizer", ttt_optim_names(), ttt_optim_count(), err));
    const ttt_optim *o = ttt_optim_find(name->scalar);
    return ttt_cfg_check_map(opt, "layer.optimizer", o->options, NULL, err);
}

ttt_status ttt_layer_parse(ttt_cfg_node *map, int d_k, int d_v, ttt_layer *L, ttt_error *err) {
    memset(L, 0, sizeof *L);
    if (map->kind != TTT_CFG_MAP)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, map, "layer: expected a mapping");
    /* `optimizer: sgd` is shorthand for `optimizer: {name: sgd}`. An empty `optimizer:` is
     * refused rather than read as the default: it is most often a section whose keys were not
     * indented under it, and sgd would then run without a word. */
    ttt_cfg_node *opt = get_mut(map, "optimizer");
    if (opt && opt->kind == TTT_CFG_SCALAR && !opt->scalar)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, opt,
                             "layer.optimizer: the value is empty; expected an optimizer name "
                             "or a mapping such as {name: momentum, lr: 0.1} (leave the key out "
                             "for the preset's optimizer; if its options follow on the next "
                             "lines, indent them under 'optimizer:')");
    if (opt && opt->kind == TTT_CFG_SCALAR && opt->scalar) {
        ttt_cfg_node *m = ttt_cfg_new_map(opt);
        ttt_cfg_map_set(m, "name", ttt_cfg_new_scalar(opt->scalar, opt));
        ttt_cfg_map_set(map, "optimizer", m);
    }
    TTT_TRY(apply_preset(map, err));
    TTT_TRY(ttt_cfg_check_map(map, "layer", ttt_layer_options, NULL, err));
    TTT_TRY(check_scalar_name(ttt_cfg_get(map, "model"), "model", ttt_model_names(),
                              ttt_model_count(), err));
    TTT_TRY(check_scalar_name(ttt_cfg_get(map, "loss"), "loss", ttt_loss_names(),
                              ttt_loss_count(), err));
    TTT_TRY(check_scalar_name(ttt_cfg_get(map, "feature_map"), "feature map",
                              ttt_feature_map_names(), ttt_feature_map_count(), err));
    opt = get_mut(map, "optimizer");
    TTT_TRY(check_optimizer(opt, err));

    /* Every value is now present and of its type: read them into a descriptor. */
    ttt_layer_desc d;
    ttt_layer_desc_init(&d);
    const char *pname = ttt_cfg_str(map, "preset");
    d.preset = strcmp(pname, "none") == 0 ? NULL : pname;
    d.model = ttt_cfg_str(map, "model");
    d.loss = ttt_cfg_str(map, "loss");
    d.optimizer = ttt_cfg_str(opt, "name");
    const ttt_optim *o = ttt_optim_find(d.optimizer);
    ttt_opt_value opts[MAX_OPTIM_OPTIONS];
    for (const ttt_option *oo = o->options + 4; oo->name; oo++) { /* after the common four */
        ttt_opt_value *v = &opts[d.n_opts++];
        *v = (ttt_opt_value){oo->name, 0.0, NULL};
        if (oo->type == TTT_OPT_INT)
            v->number = (double)ttt_cfg_int(opt, oo->name);
        else if (oo->type == TTT_OPT_FLOAT)
            v->number = ttt_cfg_float(opt, oo->name);
        else if (oo->type == TTT_OPT_BOOL)
            v->number = ttt_cfg_bool(opt, oo->name);
        else
            v->text = ttt_cfg_str(opt, oo->name);
    }
    d.opts = opts;
    d.lr = ttt_cfg_float(opt, "lr");
    d.decay = ttt_cfg_float(opt, "decay");
    d.decay_placement = ttt_cfg_str(opt, "decay_placement");
    d.mini_batch = (int)ttt_cfg_int(map, "mini_batch");
    d.order = ttt_cfg_str(map, "order");
    d.steps = ttt_cfg_str(map, "steps");
    d.position_scale = ttt_cfg_str(map, "position_scale");
    d.form = ttt_cfg_str(map, "form");
    d.chunk = (int)ttt_cfg_int(map, "chunk");
    d.scale = ttt_cfg_float(map, "scale");
    d.rope = ttt_cfg_bool(map, "rope");
    d.rope_base = ttt_cfg_float(map, "rope_base");
    d.normalize = ttt_cfg_str(map, "normalize");
    d.feature_map = ttt_cfg_str(map, "feature_map");
    d.features = (int)ttt_cfg_int(map, "features");
    d.feature_seed = (int)ttt_cfg_int(map, "feature_seed");
    d.feature_gate = ttt_cfg_bool(map, "feature_gate");
    d.steps_per_token = (int)ttt_cfg_int(map, "steps_per_token");
    d.levels = (int)ttt_cfg_int(map, "levels");
    /* `form: auto` stays auto in the resolved configuration: the form is chosen per call, for
     * that call's inputs (ttt_form_choose); records name the form used (ttt_layer_form_used). */
    TTT_TRY(build_at(&d, d_k, d_v, L, map, err));
    return TTT_OK;
}

const char *ttt_layer_describe(const ttt_layer *L, char *buf, size_t len) {
    if (L->preset)
        snprintf(buf, len, "%s", L->preset);
    else
        snprintf(buf, len, "%s/%s/%s/b%d", L->model->name, L->loss->name, L->optim->name,
                 L->mini_batch);
    return buf;
}

ttt_status ttt_layer_init(ttt_layer *L, const char *model, const char *loss, const char *optim,
                          int mini_batch, ttt_order order, const char *form, int d_k, int d_v,
                          ttt_error *err) {
    ttt_layer_desc d;
    ttt_layer_desc_init(&d);
    d.model = model;
    d.loss = loss;
    d.optimizer = optim;
    d.mini_batch = mini_batch;
    d.order = order == TTT_ORDER_UPDATE_THEN_APPLY ? "update_then_apply" : "apply_then_update";
    d.form = form ? form : "auto";
    return ttt_layer_build(&d, d_k, d_v, L, err);
}

/* ------------------------------------------------------------------------------------------ */
/* State */

ttt_layer ttt_layer_inner(const ttt_layer *L) {
    ttt_layer in = *L;
    in.d_k = L->d_phi;
    return in;
}

void ttt_layer_state_init(ttt_ctx *ctx, const ttt_layer *Lo, ttt_layer_state *st, ttt_rng *rng) {
    const ttt_layer inner = ttt_layer_inner(Lo), *L = &inner; /* rows: the feature width */
    memset(st, 0, sizeof *st);
    st->n_w = L->model->n_weights;
    st->n_opt = ttt_optim_n_state(L->optim, L->optim_cfg);
    TTT_ASSERT(st->n_w <= TTT_MAX_WEIGHTS && st->n_opt <= TTT_MAX_OPT_STATE);
    for (int w = 0; w < st->n_w; w++) {
        int shape[TTT_MAX_DIMS];
        int nd = L->model->shape(w, L->d_k, L->d_v, shape);
        if (L->levels > 1) shape[0] *= L->levels; /* the levels, one after the other (docs/math.md §4.8) */
        st->W[w] = ttt_tensor_new(ctx, nd, shape);
        ttt_tensor_fill(st->W[w], 0.0f);
    }
    L->model->init(st->W, L->d_k, L->d_v, rng);
    if (L->normalize == TTT_NORMALIZE_RATIO) {
        st->z = ttt_tensor_2d(ctx, L->d_k, 1);
        ttt_tensor_fill(st->z, 0.0f);
    }
    /* the state of the shapes the optimizer declares (optim.h state_shape), from the
     * initialized weights */
    for (int w = 0; w < st->n_w; w++)
        ttt_optim_state_new(ctx, L->optim, L->optim_cfg, st->opt[w], st->W[w]);
    /* the rule's own outer parameters at their initialization (none for hand-written rules) */
    st->n_outer = ttt_optim_outer_new(ctx, L->optim, L->optim_cfg, st->outer);
}

/* One pass of the form the registry chooses for these inputs (form.h): its forward, or — with a
 * tape — its differentiable forward_diff (fused ops where the entry has them). */
static ttt_status run_form(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o, ttt_layer_state *st,
                           const ttt_form_args *a, ttt_error *err) {
    const ttt_form_inputs in = {.T = TTT_ROWS(a->q), .eta = a->eta != NULL,
                                .gate = !a->log_alpha ? TTT_FORM_GATE_NONE
                                        : a->alpha_vec ? TTT_FORM_GATE_KEY
                                                       : TTT_FORM_GATE_TOKEN,
                                .tape = ttt_recording(ctx)};
    ttt_form_plan plan;
    const ttt_form_entry *e = ttt_form_plan_with(NULL, L, &in, &plan, err);
    if (!e) return TTT_ERR_UNSUPPORTED;
    /* form: auto may run another chunk than layer.chunk (the measured fastest) */
    ttt_layer run = *L;
    run.chunk = plan.chunk;
    return in.tape ? e->forward_diff(ctx, &run, o, st, a, err)
                   : e->forward(ctx, &run, o, st, a, err);
}

const char *ttt_layer_form_used(const ttt_layer *L, const ttt_form_inputs *in) {
    const ttt_form_entry *e = ttt_form_choose(L, in, NULL);
    return e ? e->form : "none";
}

ttt_status ttt_layer_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                             ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                             const ttt_tensor *v, const ttt_tensor *eta,
                             const ttt_tensor *log_alpha, ttt_error *err) {
    /* n_h steps per token (docs/math.md §4.7): k, v and η have n_h rows per token */
    const int nh = L->substeps > 1 ? L->substeps : 1;
    const int T = TTT_ROWS(q);
    const long Tk = (long)nh * T;
    /* levels Λ (docs/math.md §4.8): q holds every level's query, (T, Λ·d_k) */
    const int nq = L->levels > 1 ? L->levels : 1;
    char s1[48], s2[48], s3[48];
    if (nq > 1 && (TTT_COLS(q) != nq * L->d_k || TTT_COLS(k) != L->d_k ||
                   TTT_COLS(v) != L->d_v || TTT_ROWS(k) != T || TTT_ROWS(v) != T ||
                   TTT_ROWS(o) != T || TTT_COLS(o) != L->d_v))
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "layer inputs q %s, k %s, v %s do not fit d_k = %d, d_v = %d "
                             "with levels = %d (q: the %d levels' queries side by side, %d "
                             "columns)",
                             ttt_tensor_shape_str(q, s1, sizeof s1),
                             ttt_tensor_shape_str(k, s2, sizeof s2),
                             ttt_tensor_shape_str(v, s3, sizeof s3), L->d_k, L->d_v, nq, nq,
                             nq * L->d_k);
    if (nq == 1 && (TTT_COLS(q) != L->d_k || TTT_COLS(k) != L->d_k || TTT_COLS(v) != L->d_v ||
        TTT_ROWS(k) != Tk || TTT_ROWS(v) != Tk || TTT_ROWS(o) != T || TTT_COLS(o) != L->d_v)) {
        if (nh > 1)
            return ttt_error_set(err, TTT_ERR_SHAPE,
                                 "layer inputs q %s, k %s, v %s do not fit d_k = %d, d_v = %d "
                                 "with steps_per_token = %d (k and v: %d rows per query row)",
                                 ttt_tensor_shape_str(q, s1, sizeof s1),
                                 ttt_tensor_shape_str(k, s2, sizeof s2),
                                 ttt_tensor_shape_str(v, s3, sizeof s3), L->d_k, L->d_v, nh,
                                 nh);
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "layer inputs q %s, k %s, v %s do not fit d_k = %d, d_v = %d",
                             ttt_tensor_shape_str(q, s1, sizeof s1),
                             ttt_tensor_shape_str(k, s2, sizeof s2),
                             ttt_tensor_shape_str(v, s3, sizeof s3), L->d_k, L->d_v);
    }
    if (eta && (long)eta->n != Tk)
        return nh > 1 ? ttt_error_set(err, TTT_ERR_SHAPE,
                                      "eta has %zu entries for %ld key/value rows (%d tokens, "
                                      "steps_per_token = %d)",
                                      eta->n, Tk, T, nh)
                      : ttt_error_set(err, TTT_ERR_SHAPE, "eta has %zu entries for %d tokens",
                                      eta->n, T);
    int alpha_vec = log_alpha && log_alpha->ndim == 2;
    if (log_alpha && !((log_alpha->ndim == 1 && (int)log_alpha->n == T) ||
                       (alpha_vec && TTT_ROWS(log_alpha) == T && TTT_COLS(log_alpha) == L->d_k)))
        return ttt_error_set(err, TTT_ERR_SHAPE, "log_alpha %s fits neither (T) nor (T, d_k)",
                             ttt_tensor_shape_str(log_alpha, s1, sizeof s1));
    if (alpha_vec && L->d_phi != L->d_k)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "log_alpha %s: a gate per key dimension does not apply to the %d "
                             "features of feature_map %s (they are not key dimensions); give a "
                             "gate per token (T)",
                             ttt_tensor_shape_str(log_alpha, s1, sizeof s1), L->d_phi,
                             L->fmap->name);
    if (L->feature_gate && (alpha_vec || (!log_alpha && L->decay == 1.0f)))
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "feature_gate weights token t's write by 1 - alpha_t: it needs a "
                             "gate per token (T) or a constant decay < 1, got %s",
                             alpha_vec ? "a gate per key dimension" : "no gate");

    const int tape = ttt_recording(ctx);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    /* Constant decay from the optimizer options when no per-token gates are given. */
    if (!log_alpha && L->decay != 1.0f) {
        ttt_tensor *la = ttt_tensor_1d(ctx, T);
        ttt_tensor_fill(la, logf(L->decay));
        log_alpha = la;
    }
    if (L->scale != 1.0f) q = ttt_scale(ctx, q, L->scale);
    if (L->rope && tape) {
        /* the recorded op (its backward is the inverse rotation) */
        q = ttt_rope(ctx, q, (int)st->pos, L->rope_base);
        k = ttt_rope(ctx, k, (int)st->pos, L->rope_base);
    } else if (L->rope) {
        /* positions continue from the carried state, so a split sequence resumes exactly */
        ttt_tensor *qr = ttt_tensor_2d(ctx, T, L->d_k), *kr = ttt_tensor_2d(ctx, T, L->d_k);
        ttt_rope_apply(qr->data, q->data, T, L->d_k, (int)st->pos, L->rope_base);
        ttt_rope_apply(kr->data, k->data, T, L->d_k, (int)st->pos, L->rope_base);
        q = qr;
        k = kr;
    }
    if (L->normalize == TTT_NORMALIZE_RATIO) {
        /* φ on q and k (feature_maps.h); a random map's matrix is drawn again from its seed at
         * every call, so it is the same for every call, head and training step */
        const float *omega = ttt_feature_omega(ctx, L->fmap, L->d_k, L->features, L->feature_seed);
        q = ttt_feature_apply(ctx, L->fmap, omega, L->features, TTT_FEATURE_QUERY, q);
        k = ttt_feature_apply(ctx, L->fmap, omega, L->features, TTT_FEATURE_KEY, k);
    }
    if (L->feature_gate) {
        /* RFA's gate: S_t = α_t S_{t−1} + (1 − α_t) φ(k_t)ᵀ v_t (and z likewise), i.e. the
         * per-token rates η_t scaled by 1 − α_t (docs/math.md "Random features") */
        ttt_tensor *w = ttt_add_scalar(ctx, ttt_neg(ctx, ttt_exp(ctx, log_alpha)), 1.0f);
        eta = eta ? ttt_mul(ctx, eta, w) : w;
    }
    const ttt_layer inner = ttt_layer_inner(L); /* what the forms see: key width d_phi */
    /* With a tape the closed forms run differentiably (layers/forms/composed.c: fused ops with
     * hand-written backward where they exist, composed ops elsewhere); β = θ·η is recorded so
     * that learned learning rates receive gradients. */
    const ttt_tensor *beta = tape && eta ? ttt_scale(ctx, eta, L->lr) : NULL;
    const ttt_form_args args = {.q = q, .k = k, .v = v, .eta = eta, .beta = beta,
                                .log_alpha = log_alpha, .alpha_vec = alpha_vec, .fused = 1};
    /* The form's output (T, d_v). Without a tape the form writes straight into the caller's o
     * (which must not alias the inputs): no temporary to fault in, no copy. With a tape o is
     * recorded as a separate node below. */
    ttt_tensor *res = !tape && o->ndim == 2 ? o : ttt_tensor_2d(ctx, T, L->d_v);
    ttt_status s = run_form(ctx, &inner, res, st, &args, err);
    if (s == TTT_OK && L->normalize == TTT_NORMALIZE_RATIO) {
        /* The denominator q_t z_t is the same layer run with a single value column of ones
         * (docs/math.md §6 item 9): z is its (d_k, 1) state. */
        ttt_layer L1 = inner;
        L1.d_v = 1;
        L1.normalize = TTT_NORMALIZE_NONE;
        L1.rope = 0;
        L1.scale = 1.0f;
        ttt_layer_state s1 = {.n_w = 1, .W = {st->z}};
        ttt_tensor *ones = ttt_tensor_2d(ctx, T, 1), *den = ttt_tensor_2d(ctx, T, 1);
        ttt_tensor_fill(ones, 1.0f);
        ttt_form_args a1 = args;
        a1.v = ones;
        s = run_form(ctx, &L1, den, &s1, &a1, err);
        st->z = s1.W[0];
        /* o / (φ(q) z + ε), as ops; the denominator is positive for the positive maps (elu1,
         * favor) and of either sign for rfa, whose features can be negative */
        ttt_tensor *inv = ttt_div(ctx, ones, ttt_add_scalar(ctx, den, TTT_NLA_EPS));
        res = ttt_scale_rows(ctx, res, ttt_reshape(ctx, inv, 1, (int[]){T}));
    }
    if (s == TTT_OK && L->normalize == TTT_NORMALIZE_RMS)
        res = ttt_rmsnorm(ctx, res, NULL, TTT_POSTNORM_EPS);
    if (s == TTT_OK) {
        if (res != o) memcpy(o->data, res->data, res->n * sizeof(float));
        if (tape) {
            /* o is the caller's tensor: make it the graph's output */
            const ttt_tensor *in[1] = {res};
            ttt_tape_record(ctx, ttt_backward_identity, o, in, 1);
        }
        st->pos += T;
    }
    /* With a tape every intermediate is part of the graph and stays; without one, release. */
    if (!tape) ttt_arena_release(ctx->arena, mark);
    return s;
}

ttt_status ttt_layer_read(ttt_ctx *ctx, const ttt_layer *L, const ttt_layer_state *st,
                          ttt_tensor *o, const ttt_tensor *q, ttt_error *err) {
    const int n = TTT_ROWS(q);
    /* levels Λ > 1 (docs/math.md §4.8): each query row holds the Λ levels' queries, read
     * against the levels as they stand: o = Σ_ℓ q^ℓ S^ℓ */
    const int nq = L->levels > 1 ? L->levels : 1;
    if (TTT_COLS(q) != nq * L->d_k || TTT_ROWS(o) != n || TTT_COLS(o) != L->d_v)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "layer read: queries (%d, %d) for d_k = %d and %d level(s): "
                             "expected %d columns",
                             n, TTT_COLS(q), L->d_k, nq, nq * L->d_k);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    if (L->scale != 1.0f) q = ttt_scale(ctx, q, L->scale);
    if (L->rope) {
        ttt_tensor *qr = ttt_tensor_2d(ctx, n, L->d_k);
        for (int i = 0; i < n; i++) /* every query at the next position */
            ttt_rope_apply(qr->data + (size_t)i * L->d_k, q->data + (size_t)i * L->d_k, 1, L->d_k,
                           (int)st->pos, L->rope_base);
        q = qr;
    }
    if (L->normalize == TTT_NORMALIZE_RATIO) {
        const float *omega = ttt_feature_omega(ctx, L->fmap, L->d_k, L->features, L->feature_seed);
        q = ttt_feature_apply(ctx, L->fmap, omega, L->features, TTT_FEATURE_QUERY, q);
    }
    ttt_tensor *z = L->model->apply(ctx, (const ttt_tensor *const *)st->W, q);
    memcpy(o->data, z->data, z->n * sizeof(float));
    if (L->normalize == TTT_NORMALIZE_RATIO) {
        ttt_tensor *den = ttt_matmul(ctx, q, 0, st->z, 0); /* (n, 1) */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < L->d_v; j++)
                o->data[(size_t)i * L->d_v + j] /= den->data[i] + TTT_NLA_EPS;
    }
    if (L->normalize == TTT_NORMALIZE_RMS)
        ttt_rms_postnorm(o->data, o->data, n, L->d_v, TTT_POSTNORM_EPS);
    ttt_arena_release(ctx->arena, mark);
    return TTT_OK;
}
