/* The generic TTT layer driver (MATH.md §1), its presets (§4) and configuration. */
#include "ttt_layer.h"

#include <math.h>
#include <string.h>

#include "autograd.h"
#include "composed.h"
#include "forms.h"
#include "normalized.h"
#include "rope.h"
#include "ttt_dual.h"

/* ------------------------------------------------------------------------------------------ */
/* Presets (MATH.md §4). Presets whose gates are per-token (mamba2, gla, gated_deltanet, titans)
 * take them from the task when it supplies them; the optimizer's constant `decay` below is what
 * they use otherwise. */

static const ttt_preset presets[] = {
    {"linear_attention", "linear attention: Hebbian writes, no forgetting", "linear", "dot",
     "{name: sgd}", 1, "update_then_apply", "per_block", "none",
     "S_t = S_{t-1} + k_t^T v_t,  o_t = q_t S_t"},
    {"retnet", "RetNet: linear attention with a constant decay gamma", "linear", "dot",
     "{name: sgd, decay: 0.96875}", 1, "update_then_apply", "per_block", "none",
     "S_t = gamma S_{t-1} + k_t^T v_t"},
    {"mamba2", "Mamba2 (SSD): a scalar forget gate per token", "linear", "dot",
     "{name: sgd, decay: 0.97}", 1, "update_then_apply", "per_block", "none",
     "S_t = alpha_t S_{t-1} + k_t^T v_t"},
    {"gla", "gated linear attention: a forget gate per token and key dimension", "linear", "dot",
     "{name: sgd, decay: 0.97}", 1, "update_then_apply", "per_block", "none",
     "S_t = Diag(alpha_t) S_{t-1} + k_t^T v_t"},
    {"deltanet", "DeltaNet: online regression with the delta rule", "linear", "squared",
     "{name: sgd, decay_placement: coupled}", 1, "update_then_apply", "per_block", "none",
     "S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})"},
    {"gated_deltanet", "Gated DeltaNet: delta rule with a coupled forget gate", "linear",
     "squared", "{name: sgd, decay: 0.99, decay_placement: coupled}", 1, "update_then_apply",
     "per_block", "none", "S_t = alpha_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t"},
    {"ttt_linear", "TTT-Linear: x + LN(xW + b) trained by mini-batch GD on reconstruction",
     "ttt_linear", "recon", "{name: sgd}", 16, "update_then_apply", "per_block", "inverse",
     "mini-batch GD, E_ij = lr_j/(i+1) (dual form, MATH.md 5.4)"},
    {"ttt_mlp", "TTT-MLP: x + LN(gelu(x W1 + b1) W2 + b2), mini-batch GD", "ttt_mlp", "recon",
     "{name: sgd, lr: 0.1}", 16, "update_then_apply", "per_block", "inverse",
     "primal mini-batch GD"},
    {"titans", "Titans: momentum with a decoupled forget gate, gradients per chunk", "linear",
     "squared", "{name: momentum, lr: 0.1, momentum: 0.9, decay: 0.99}", 16,
     "update_then_apply", "per_token", "none",
     "M_t = mu M_{t-1} - theta grad_t(W_chunk start), W_t = alpha W_{t-1} + M_t"},
    {"lact", "LaCT: SwiGLU fast weight, one large-batch update per block, Muon, renormalized",
     "swiglu", "dot", "{name: large_batch, muon: true}", 2048, "apply_then_update", "per_block",
     "none", "W <- renorm(W - lr NS(sum_s eta_s grad_s(W_0))) once per block"},
};

static const char *const preset_names[] = {"linear_attention", "retnet", "mamba2", "gla",
                                           "deltanet", "gated_deltanet", "ttt_linear",
                                           "ttt_mlp", "titans", "lact"};

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
    {"form", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE,
     "auto|generic|recurrent|parallel|chunkwise|dual",
     "computation form; auto = the fastest closed form the tuple has, else the generic driver"},
    {"chunk", TTT_OPT_INT, "16", 1, 1 << 20, NULL,
     "chunk size C of the chunkwise forms; 16 = the fastest forward and training step measured "
     "(README \"Chunk size\")"},
    {"scale", TTT_OPT_FLOAT, "1.0", 0.0, 1e6, NULL, "queries are multiplied by this"},
    {"rope", TTT_OPT_BOOL, "false", TTT_NO_RANGE, NULL,
     "rotate q and k by their positions (RoPE, interleaved pairs) before the inner loop"},
    {"rope_base", TTT_OPT_FLOAT, "10000.0", 1.0, 1e9, NULL, "RoPE frequency base"},
    {"normalize", TTT_OPT_CHOICE, "none", TTT_NO_RANGE, "none|ratio|rms",
     "ratio: normalized linear attention (elu+1 features, o = qS/(qz + 1e-6)); rms: post-norm"},
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

/* Fill a preset's tuple into the keys the user left out. */
static ttt_status apply_preset(ttt_cfg_node *map, ttt_error *err) {
    const ttt_cfg_node *pn = ttt_cfg_get(map, "preset");
    if (!pn || (pn->kind == TTT_CFG_SCALAR && pn->scalar && strcmp(pn->scalar, "none") == 0))
        return TTT_OK;
    TTT_TRY(check_scalar_name(pn, "preset", preset_names, N_PRESETS, err));
    const ttt_preset *p = ttt_preset_find(pn->scalar);
    char buf[256];
    set_default(map, "model", p->model);
    set_default(map, "loss", p->loss);
    snprintf(buf, sizeof buf, "%d", p->mini_batch);
    set_default(map, "mini_batch", buf);
    set_default(map, "order", p->order);
    set_default(map, "steps", p->steps);
    set_default(map, "position_scale", p->position_scale);
    ttt_cfg_node *opt = get_mut(map, "optimizer");
    if (!opt) {
        opt = ttt_cfg_new_map(map);
        ttt_cfg_map_set(map, "optimizer", opt);
    }
    if (opt->kind != TTT_CFG_MAP) return TTT_OK; /* reported by the schema check */
    /* The preset's optimizer options fill the keys the user did not give — but only when the
     * user kept the preset's optimizer: options of another optimizer would not fit it. */
    snprintf(buf, sizeof buf, "optimizer: %s\n", p->optimizer);
    ttt_cfg_node *doc = NULL;
    ttt_status s = ttt_cfg_load_string(buf, "<preset>", &doc, err);
    TTT_ASSERT(s == TTT_OK); /* the preset table is ours */
    const ttt_cfg_node *popt = ttt_cfg_get(doc, "optimizer");
    const ttt_cfg_node *uname = ttt_cfg_get(opt, "name");
    const char *pname = ttt_cfg_str(popt, "name");
    if (!uname || (uname->kind == TTT_CFG_SCALAR && uname->scalar &&
                   strcmp(uname->scalar, pname) == 0)) {
        for (int i = 0; i < popt->n; i++)
            if (!ttt_cfg_get(opt, popt->keys[i])) {
                ttt_cfg_node *val = ttt_cfg_clone(popt->items[i]);
                /* locate preset-supplied values at the preset key, for messages */
                free(val->file);
                val->file = strdup(pn->file ? pn->file : "");
                val->line = pn->line;
                val->col = pn->col;
                ttt_cfg_map_set(opt, popt->keys[i], val);
            }
    }
    ttt_cfg_free(doc);
    return TTT_OK;
}

static const char *const form_names[TTT_FORM_COUNT] = {
    [TTT_FORM_GENERIC] = "generic",     [TTT_FORM_RECURRENT] = "recurrent",
    [TTT_FORM_PARALLEL] = "parallel",   [TTT_FORM_CHUNKWISE] = "chunkwise",
    [TTT_FORM_DUAL] = "dual",
};

const char *ttt_form_name(ttt_form f) {
    return (f >= 0 && f < TTT_FORM_COUNT) ? form_names[f] : "?";
}

int ttt_form_from_name(const char *s) {
    for (int i = 0; s && i < TTT_FORM_COUNT; i++)
        if (strcmp(form_names[i], s) == 0) return i;
    return -1;
}

int ttt_layer_family(const ttt_layer *L) {
    const char *m = L->model->name, *l = L->loss->name;
    /* LaCT: every gradient of a block at its start weights and one step per block, so the block
     * is one batched gradient and one optimizer step (layers/lact_composed.c). η = β/θ needs
     * θ > 0; coupled placement with a decay would take each gradient at other weights. */
    if (L->order == TTT_ORDER_APPLY_THEN_UPDATE && strcmp(m, "swiglu") == 0 &&
        strcmp(L->optim->name, "large_batch") == 0 && !L->step_per_token && L->lr > 0.0f &&
        (!L->coupled || L->decay == 1.0f) &&
        (strcmp(l, "dot") == 0 || strcmp(l, "squared") == 0 || strcmp(l, "recon") == 0))
        return TTT_FAMILY_LACT;
    if (L->order != TTT_ORDER_UPDATE_THEN_APPLY) return TTT_FAMILY_NONE;
    if (L->momentum_plain && strcmp(m, "linear") == 0 && strcmp(l, "squared") == 0 &&
        L->step_per_token && !L->pos_inverse && (!L->coupled || L->decay == 1.0f))
        return TTT_FAMILY_TITANS;
    if (!L->sgd_plain) return TTT_FAMILY_NONE;
    if (strcmp(m, "linear") == 0 && strcmp(l, "dot") == 0 && !L->pos_inverse)
        return TTT_FAMILY_LINEAR_ATTENTION;
    /* The closed delta rule decays before the error is measured (coupled placement). */
    if (strcmp(m, "linear") == 0 && strcmp(l, "squared") == 0 && L->mini_batch == 1 &&
        !L->pos_inverse && (L->coupled || L->decay == 1.0f))
        return TTT_FAMILY_DELTA_RULE;
    if (strcmp(m, "ttt_linear") == 0 && L->pos_inverse && L->decay == 1.0f &&
        (strcmp(l, "recon") == 0 || strcmp(l, "squared") == 0))
        return TTT_FAMILY_TTT_LINEAR;
    return TTT_FAMILY_NONE;
}

const char *ttt_layer_form_unavailable(const ttt_layer *L, ttt_form f) {
    if (f == TTT_FORM_GENERIC) return NULL;
    int fam = ttt_layer_family(L);
    int ok = (fam == TTT_FAMILY_LINEAR_ATTENTION || fam == TTT_FAMILY_DELTA_RULE)
                 ? (f == TTT_FORM_RECURRENT || f == TTT_FORM_PARALLEL || f == TTT_FORM_CHUNKWISE)
                 : fam == TTT_FAMILY_TTT_LINEAR ? f == TTT_FORM_DUAL
                 : fam == TTT_FAMILY_TITANS     ? f == TTT_FORM_CHUNKWISE
                 : fam == TTT_FAMILY_LACT       ? f == TTT_FORM_CHUNKWISE
                                            : 0;
    if (!ok)
        return fam == TTT_FAMILY_NONE
                   ? "closed forms exist for linear attention (model linear, loss dot, plain sgd, "
                     "update_then_apply), the delta rule (model linear, loss squared, plain sgd, "
                     "mini_batch 1, update_then_apply, no decay or coupled decay) and "
                     "TTT-Linear (model ttt_linear, position_scale inverse, no decay: dual) and "
                     "Titans (model linear, loss squared, momentum without nesterov, steps "
                     "per_token, decoupled decay: chunkwise) and LaCT (model swiglu, loss dot, "
                     "squared or recon, optimizer large_batch, apply_then_update, steps "
                     "per_block, lr > 0, no coupled decay: chunkwise)"
                   : "this tuple's family does not have that form";
    return NULL;
}

ttt_form ttt_layer_auto_form(const ttt_layer *L) {
    /* Measured side by side (experiments/equivalence.yaml, T = 1000, d = 64, one thread):
     * chunkwise linear attention 1.5× the recurrent kernel; the chunkwise delta rule 0.6–0.8× (its
     * per-chunk triangular solves do not pay off at d = 64 yet), so the recurrence stays the
     * default there; Titans' chunked form 6× and the TTT-Linear dual form 4.7× the generic
     * driver. LaCT's per-block form (layers/lact_composed.c), forward + backward under the tape
     * at T = 64, b = 16, d = 8: 435 tape entries against 1992, 2.5–3× faster. */
    switch (ttt_layer_family(L)) {
    case TTT_FAMILY_LINEAR_ATTENTION: return TTT_FORM_CHUNKWISE;
    case TTT_FAMILY_DELTA_RULE: return TTT_FORM_RECURRENT;
    case TTT_FAMILY_TITANS: return TTT_FORM_CHUNKWISE;
    case TTT_FAMILY_TTT_LINEAR: return TTT_FORM_DUAL;
    case TTT_FAMILY_LACT: return TTT_FORM_CHUNKWISE;
    default: return TTT_FORM_GENERIC;
    }
}

static ttt_status parse_optimizer(ttt_cfg_node *opt, ttt_layer *L, ttt_error *err) {
    if (!ttt_cfg_get(opt, "name")) /* the default optimizer, as for `optimizer:` left out */
        ttt_cfg_map_set(opt, "name", ttt_cfg_new_scalar("sgd", opt));
    const ttt_cfg_node *name = ttt_cfg_get(opt, "name");
    TTT_TRY(check_scalar_name(name, "optimizer", ttt_optim_names(), ttt_optim_count(), err));
    L->optim = ttt_optim_find(name->scalar);
    TTT_TRY(ttt_cfg_check_map(opt, "layer.optimizer", L->optim->options, NULL, err));
    const ttt_cfg_node *l2 = ttt_cfg_get(opt, "l2");
    L->sgd_plain = strcmp(L->optim->name, "sgd") == 0 && (!l2 || ttt_cfg_float(opt, "l2") == 0.0);
    if (strcmp(L->optim->name, "momentum") == 0) {
        L->momentum_plain = !ttt_cfg_bool(opt, "nesterov");
        L->momentum_mu = (float)ttt_cfg_float(opt, "momentum");
    }
    L->lr = (float)ttt_cfg_float(opt, "lr");
    L->decay = (float)ttt_cfg_float(opt, "decay");
    L->coupled = strcmp(ttt_cfg_str(opt, "decay_placement"), "coupled") == 0;
    TTT_ASSERT(L->optim->cfg_size <= TTT_OPTIM_CFG_MAX);
    memset(L->optim_cfg, 0, sizeof L->optim_cfg);
    if (L->optim->parse) TTT_TRY(L->optim->parse(L->optim_cfg, opt, err));
    return TTT_OK;
}

ttt_status ttt_layer_parse(ttt_cfg_node *map, int d_k, int d_v, ttt_layer *L, ttt_error *err) {
    memset(L, 0, sizeof *L);
    if (map->kind != TTT_CFG_MAP)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, map, "layer: expected a mapping");
    /* `optimizer: sgd` is shorthand for `optimizer: {name: sgd}`. */
    ttt_cfg_node *opt = get_mut(map, "optimizer");
    if (opt && opt->kind == TTT_CFG_SCALAR && opt->scalar) {
        ttt_cfg_node *m = ttt_cfg_new_map(opt);
        ttt_cfg_map_set(m, "name", ttt_cfg_new_scalar(opt->scalar, opt));
        ttt_cfg_map_set(map, "optimizer", m);
    }
    TTT_TRY(apply_preset(map, err));
    TTT_TRY(ttt_cfg_check_map(map, "layer", ttt_layer_options, NULL, err));
    const char *pname = ttt_cfg_str(map, "preset");
    L->preset = strcmp(pname, "none") == 0 ? NULL : ttt_preset_find(pname)->name;

    const ttt_cfg_node *mn = ttt_cfg_get(map, "model");
    TTT_TRY(check_scalar_name(mn, "model", ttt_model_names(), ttt_model_count(), err));
    L->model = ttt_model_find(mn->scalar);
    const ttt_cfg_node *ln = ttt_cfg_get(map, "loss");
    TTT_TRY(check_scalar_name(ln, "loss", ttt_loss_names(), ttt_loss_count(), err));
    L->loss = ttt_loss_find(ln->scalar);
    TTT_TRY(parse_optimizer(get_mut(map, "optimizer"), L, err));

    L->mini_batch = (int)ttt_cfg_int(map, "mini_batch");
    L->order = strcmp(ttt_cfg_str(map, "order"), "apply_then_update") == 0
                   ? TTT_ORDER_APPLY_THEN_UPDATE
                   : TTT_ORDER_UPDATE_THEN_APPLY;
    L->scale = (float)ttt_cfg_float(map, "scale");
    L->step_per_token = strcmp(ttt_cfg_str(map, "steps"), "per_token") == 0;
    L->rope = ttt_cfg_bool(map, "rope");
    L->rope_base = (float)ttt_cfg_float(map, "rope_base");
    const char *nz = ttt_cfg_str(map, "normalize");
    L->normalize = strcmp(nz, "ratio") == 0 ? TTT_NORMALIZE_RATIO
                   : strcmp(nz, "rms") == 0 ? TTT_NORMALIZE_RMS
                                            : TTT_NORMALIZE_NONE;
    L->pos_inverse = strcmp(ttt_cfg_str(map, "position_scale"), "inverse") == 0;
    if (L->model->square && d_k != d_v)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, mn,
                             "layer.model: %s adds its input to its output, so it needs equal key "
                             "and value dimensions; got d_k = %d, d_v = %d",
                             L->model->name, d_k, d_v);
    L->d_k = d_k;
    L->d_v = d_v;

    L->chunk = (int)ttt_cfg_int(map, "chunk");
    if (L->normalize == TTT_NORMALIZE_RATIO && ttt_layer_family(L) != TTT_FAMILY_LINEAR_ATTENTION)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "normalize"),
                             "layer.normalize: ratio is normalized linear attention, the ratio of "
                             "two linear-attention states (MATH.md §4); it needs model linear, "
                             "loss dot, plain sgd and update_then_apply");
    ttt_cfg_node *fn = get_mut(map, "form");
    if (strcmp(fn->scalar, "auto") == 0) {
        L->form = ttt_layer_auto_form(L);
        ttt_cfg_map_set(map, "form", ttt_cfg_new_scalar(ttt_form_name(L->form), fn));
        return TTT_OK;
    }
    L->form = (ttt_form)ttt_form_from_name(fn->scalar);
    const char *why = ttt_layer_form_unavailable(L, L->form);
    if (why)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, fn,
                             "layer.form: no %s form for (model %s, loss %s, optimizer %s, "
                             "mini_batch %d, order %s): %s; expected form: generic",
                             fn->scalar, L->model->name, L->loss->name, L->optim->name,
                             L->mini_batch,
                             L->order == TTT_ORDER_UPDATE_THEN_APPLY ? "update_then_apply"
                                                                     : "apply_then_update",
                             why);
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
                          int mini_batch, ttt_order order, ttt_form form, int d_k, int d_v,
                          ttt_error *err) {
    char text[512];
    snprintf(text, sizeof text,
             "layer: {model: %s, loss: %s, optimizer: {name: %s}, mini_batch: %d, order: %s, "
             "form: %s}\n",
             model, loss, optim, mini_batch,
             order == TTT_ORDER_UPDATE_THEN_APPLY ? "update_then_apply" : "apply_then_update",
             ttt_form_name(form));
    ttt_cfg_node *root = NULL;
    TTT_TRY(ttt_cfg_load_string(text, "<ttt_layer_init>", &root, err));
    ttt_status s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d_k, d_v, L, err);
    ttt_cfg_free(root);
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* State */

void ttt_layer_state_init(ttt_ctx *ctx, const ttt_layer *L, ttt_layer_state *st, ttt_rng *rng) {
    memset(st, 0, sizeof *st);
    st->n_w = L->model->n_weights;
    st->n_opt = L->optim->n_state ? L->optim->n_state(L->optim_cfg) : 0;
    TTT_ASSERT(st->n_w <= TTT_MAX_WEIGHTS && st->n_opt <= TTT_MAX_OPT_STATE);
    for (int w = 0; w < st->n_w; w++) {
        int shape[TTT_MAX_DIMS];
        int nd = L->model->shape(w, L->d_k, L->d_v, shape);
        st->W[w] = ttt_tensor_new(ctx, nd, shape);
        ttt_tensor_fill(st->W[w], 0.0f);
    }
    L->model->init(st->W, L->d_k, L->d_v, rng);
    if (L->normalize == TTT_NORMALIZE_RATIO) {
        st->z = ttt_tensor_2d(ctx, L->d_k, 1);
        ttt_tensor_fill(st->z, 0.0f);
    }
    for (int w = 0; w < st->n_w; w++) {
        for (int s = 0; s < st->n_opt; s++) st->opt[w][s] = ttt_tensor_zeros_like(ctx, st->W[w]);
        if (L->optim->init_state) L->optim->init_state(L->optim_cfg, st->opt[w], st->W[w]);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The generic driver (MATH.md §1).
 *
 * Inside a block starting at W_0, token i of the block (global t) contributes
 *     g_i = η_t ∇ℓ(f(W_g; k_t), v_t),  W_g = W_0 (decoupled) or A_i·W_0 (coupled),
 * with A_i the product of the retentions α over the block prefix 0..i.
 *
 * steps: per_block — the optimizer receives the decayed running sum G_i = α_t G_{i−1} + g_i (so
 * earlier writes fade exactly as in the recurrence, and for a W-independent gradient any b
 * reproduces b = 1) and the decay A_i; token t reads f(step(W_0, G_i, A_i); q_t), and the block
 * ends with that step's weights and state.
 * steps: per_token — the optimizer steps after every token from the previous token's weights and
 * state with g_i and the token's own α_t (gradients still at W_0): Titans' chunked momentum.
 * For SGD the two coincide. apply_then_update: every token reads f(W_0; q_t).
 * With b = 1 every variant is exactly the per-token rule of MATH.md §3. */

static void copy_into(ttt_tensor *dst, const ttt_tensor *src) {
    TTT_ASSERT(dst->n == src->n);
    memcpy(dst->data, src->data, src->n * sizeof(float));
}

/* Without a tape, per-token temporaries are released after every token: what must survive (the
 * stepped weights and state, the running gradient, the prefix decay) is copied into a buffer
 * allocated once. With a tape nothing is released or copied: every tensor stays a node of the
 * graph, so outer-loop training differentiates through the whole inner loop. */
static void keep(ttt_ctx *ctx, ttt_tensor **t, ttt_tensor *buffer) {
    if (ttt_recording(ctx) || *t == buffer) return;
    copy_into(buffer, *t);
    *t = buffer;
}

/* Backward of the output assembly: row t of dL/do goes to the row tensor that produced it. */
static void gather_rows_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dout) {
    const int d = e->iarg[0];
    for (int t = 0; t < e->n_in; t++) {
        if (!e->in[t]->requires_grad) continue;
        float *g = ttt_grad(ctx, e->in[t]);
        for (int j = 0; j < d; j++) g[j] += dout[(size_t)t * d + j];
    }
}

static ttt_status forward_generic(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                  ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                                  const ttt_tensor *v, const ttt_tensor *eta,
                                  const ttt_tensor *log_alpha, int alpha_vec, ttt_error *err) {
    const ttt_model *M = L->model;
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v), nw = st->n_w,
              ns = st->n_opt, tape = ttt_recording(ctx);
    /* A retention per key dimension scales the rows of S (GLA): it is defined for the linear
     * model, whose rows are key dimensions, and not for models with hidden layers. */
    if (alpha_vec && strcmp(M->name, "linear") != 0)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "a decay per key dimension (log_alpha of shape (T, d_k)) is defined "
                             "for the linear model only, not for model %s",
                             M->name);
    /* Buffers that outlive a token when nothing is recorded. */
    ttt_tensor *bG[TTT_MAX_WEIGHTS], *bW[TTT_MAX_WEIGHTS], *bS[TTT_MAX_WEIGHTS][TTT_MAX_OPT_STATE];
    ttt_tensor *bA = ttt_tensor_1d(ctx, alpha_vec ? d_k : 1);
    for (int w = 0; w < nw; w++) {
        bG[w] = ttt_tensor_zeros_like(ctx, st->W[w]);
        bW[w] = ttt_tensor_zeros_like(ctx, st->W[w]);
        for (int s = 0; s < ns; s++) bS[w][s] = ttt_tensor_zeros_like(ctx, st->W[w]);
    }
    ttt_tensor **rows = tape ? ttt_tape_alloc(ctx, (size_t)T * sizeof *rows) : NULL;
    const int b = L->mini_batch;
    const ttt_tensor *la_rows =
        log_alpha && alpha_vec ? log_alpha : NULL; /* (T, d_k): a row per token */

    for (int t0 = 0; t0 < T; t0 += b) {
        const int n = t0 + b <= T ? b : T - t0;
        /* block start: W_0 and the optimizer state at it */
        ttt_tensor *W0[TTT_MAX_WEIGHTS], *S0[TTT_MAX_WEIGHTS][TTT_MAX_OPT_STATE];
        ttt_tensor *Wn[TTT_MAX_WEIGHTS], *Sn[TTT_MAX_WEIGHTS][TTT_MAX_OPT_STATE];
        ttt_tensor *G[TTT_MAX_WEIGHTS] = {0}, *A = NULL;
        for (int w = 0; w < nw; w++) {
            W0[w] = Wn[w] = st->W[w];
            for (int s = 0; s < ns; s++) S0[w][s] = Sn[w][s] = st->opt[w][s];
        }
        for (int i = 0; i < n; i++) {
            const int t = t0 + i;
            ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
            /* this token's retention α_t and the block prefix decay A_i = α_{t0} ⋯ α_t, as
             * tensors so that learned gates receive gradients */
            ttt_tensor *alpha_t = NULL;
            if (log_alpha) {
                ttt_tensor *la = ttt_slice_rows(ctx, la_rows ? la_rows : log_alpha, t, t + 1);
                if (la_rows) la = ttt_reshape(ctx, la, 1, (int[]){d_k});
                alpha_t = ttt_exp(ctx, la);
                A = i == 0 ? alpha_t : ttt_mul(ctx, A, alpha_t);
            }
            const float theta = L->pos_inverse ? L->lr / (float)(i + 1) : L->lr;
            ttt_optim_block blk = {.t0 = t0, .n = i + 1, .theta = theta, .decay = A};
            ttt_optim_block tok = {.t0 = t, .n = 1, .theta = theta, .decay = alpha_t};
            /* the point where the gradient is taken */
            const ttt_tensor *Wg[TTT_MAX_WEIGHTS];
            for (int w = 0; w < nw; w++)
                Wg[w] = L->coupled && A ? ttt_optim_apply_decay(ctx, W0[w], &blk) : W0[w];
            ttt_tensor *xk = ttt_slice_rows(ctx, k, t, t + 1); /* (1, d_k) */
            ttt_tensor *xv = ttt_slice_rows(ctx, v, t, t + 1); /* (1, d_v) */
            ttt_tensor *et = eta ? ttt_slice_rows(ctx, eta, t, t + 1) : NULL; /* (1) */
            ttt_tensor *z = L->loss->z_free ? NULL : M->apply(ctx, Wg, xk);
            ttt_tensor *dz = L->loss->grad(ctx, z, xv);
            ttt_tensor *g[TTT_MAX_WEIGHTS];
            M->grad(ctx, g, Wg, xk, dz, et);
            const int last = i == n - 1;
            for (int w = 0; w < nw; w++) {
                ttt_tensor *wo = NULL, *so[TTT_MAX_OPT_STATE] = {0};
                if (L->step_per_token) {
                    L->optim->step(ctx, L->optim_cfg, &wo, so, Wn[w],
                                   (const ttt_tensor *const *)Sn[w], g[w], &tok);
                } else {
                    /* G_i = α_t G_{i−1} + g_i, stepped from the block start */
                    G[w] = i == 0 ? g[w]
                                  : ttt_add(ctx, alpha_t ? ttt_optim_apply_decay(ctx, G[w], &tok)
                                                         : G[w],
                                            g[w]);
                    if (L->order == TTT_ORDER_APPLY_THEN_UPDATE && !last) {
                        keep(ctx, &G[w], bG[w]);
                        continue;
                    }
                    L->optim->step(ctx, L->optim_cfg, &wo, so, W0[w],
                                   (const ttt_tensor *const *)S0[w], G[w], &blk);
                    keep(ctx, &G[w], bG[w]);
                }
                Wn[w] = wo;
                keep(ctx, &Wn[w], bW[w]);
                for (int s = 0; s < ns; s++) {
                    Sn[w][s] = so[s];
                    keep(ctx, &Sn[w][s], bS[w][s]);
                }
            }
            if (A) keep(ctx, &A, bA);
            /* read-out */
            ttt_tensor *xq = ttt_slice_rows(ctx, q, t, t + 1);
            ttt_tensor *ot = M->apply(ctx,
                                      L->order == TTT_ORDER_UPDATE_THEN_APPLY
                                          ? (const ttt_tensor *const *)Wn
                                          : (const ttt_tensor *const *)W0,
                                      xq);
            memcpy(o->data + (size_t)t * d_v, ot->data, (size_t)d_v * sizeof(float));
            if (tape) rows[t] = ot;
            else ttt_arena_release(ctx->arena, mark);
        }
        /* block end: the state moves to the last step's weights */
        for (int w = 0; w < nw; w++) {
            if (tape) {
                st->W[w] = Wn[w];
                for (int s = 0; s < ns; s++) st->opt[w][s] = Sn[w][s];
            } else {
                if (Wn[w] != st->W[w]) copy_into(st->W[w], Wn[w]);
                for (int s = 0; s < ns; s++)
                    if (Sn[w][s] != st->opt[w][s]) copy_into(st->opt[w][s], Sn[w][s]);
            }
        }
    }
    if (tape) {
        ttt_tape_entry *e = ttt_tape_record(ctx, gather_rows_backward, o,
                                            (const ttt_tensor *const *)rows, T);
        if (e) e->iarg[0] = d_v;
    }
    return TTT_OK;
}

static ttt_status forward_closed(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                    ttt_layer_state *st, const ttt_tensor *q,
                                    const ttt_tensor *k, const ttt_tensor *v,
                                    const ttt_tensor *eta, const ttt_tensor *log_alpha,
                                    int alpha_vec, ttt_error *err) {
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    ttt_tensor *beta = ttt_tensor_1d(ctx, T); /* β_t = θ η_t */
    for (int t = 0; t < T; t++) beta->data[t] = L->lr * (eta ? eta->data[t] : 1.0f);
    const float *la = log_alpha ? log_alpha->data : NULL;
    float *S = st->W[0]->data;
    const int fam = ttt_layer_family(L), C = L->chunk;
    if (fam == TTT_FAMILY_DELTA_RULE && log_alpha && !L->coupled)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "the closed delta-rule forms decay before the error is measured "
                             "(decay_placement: coupled); this layer has per-token gates with "
                             "decoupled placement: use form: generic or decay_placement: coupled");
    if (fam == TTT_FAMILY_TTT_LINEAR && log_alpha)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "the TTT-Linear dual form has no forget gate; use form: generic");
    if ((fam == TTT_FAMILY_DELTA_RULE || fam == TTT_FAMILY_TITANS || fam == TTT_FAMILY_TTT_LINEAR) &&
        alpha_vec)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "this closed form takes a scalar decay per token, not a vector; use "
                             "form: generic");
    if (fam == TTT_FAMILY_LINEAR_ATTENTION) {
        switch (L->form) {
        case TTT_FORM_RECURRENT:
            ttt_linear_attention_recurrent(o->data, S, q->data, k->data, v->data, beta->data, la,
                                           alpha_vec, T, d_k, d_v);
            return TTT_OK;
        case TTT_FORM_PARALLEL:
            ttt_linear_attention_parallel(ctx, o->data, S, q->data, k->data, v->data, beta->data,
                                          la, alpha_vec, T, d_k, d_v);
            return TTT_OK;
        case TTT_FORM_CHUNKWISE:
            ttt_linear_attention_chunkwise(ctx, o->data, S, q->data, k->data, v->data,
                                           beta->data, la, alpha_vec, T, d_k, d_v, C);
            return TTT_OK;
        default: break;
        }
    } else if (fam == TTT_FAMILY_DELTA_RULE) {
        switch (L->form) {
        case TTT_FORM_RECURRENT:
            ttt_delta_rule_recurrent(o->data, S, q->data, k->data, v->data, beta->data, la, T,
                                     d_k, d_v);
            return TTT_OK;
        case TTT_FORM_PARALLEL:
            ttt_delta_rule_parallel(ctx, o->data, S, q->data, k->data, v->data, beta->data, la,
                                    T, d_k, d_v);
            return TTT_OK;
        case TTT_FORM_CHUNKWISE:
            ttt_delta_rule_chunkwise(ctx, o->data, S, q->data, k->data, v->data, beta->data, la,
                                     T, d_k, d_v, C);
            return TTT_OK;
        default: break;
        }
    } else if (fam == TTT_FAMILY_TITANS && L->form == TTT_FORM_CHUNKWISE) {
        /* gradients are taken once per mini-batch: the chunk of the closed form is b */
        ttt_momentum_chunked(ctx, o->data, S, st->opt[0][0]->data, q->data, k->data, v->data,
                             eta ? eta->data : NULL, la, L->lr, L->momentum_mu, T, d_k, d_v,
                             L->mini_batch);
        return TTT_OK;
    } else if (fam == TTT_FAMILY_TTT_LINEAR && L->form == TTT_FORM_DUAL) {
        /* lr_j = θ η_j; the layer state is (W, b) */
        ttt_ttt_linear_dual(ctx, o->data, S, st->W[1]->data, q->data, k->data, v->data,
                            beta->data, T, d_k, L->mini_batch);
        return TTT_OK;
    } else if (fam == TTT_FAMILY_LACT && L->form == TTT_FORM_CHUNKWISE) {
        /* the composed form runs untaped: per block, temporaries released */
        return ttt_lact_composed(ctx, L, o, st, q, k, v, eta, log_alpha, err);
    }
    return ttt_error_set(err, TTT_ERR_UNSUPPORTED, "layer form %s is not available here: %s",
                         ttt_form_name(L->form),
                         ttt_layer_form_unavailable(L, L->form) ? ttt_layer_form_unavailable(L, L->form) : "internal");
}

/* One pass of the layer's form over (q, k, v): the generic driver, a closed-form kernel, or — with
 * a tape — the differentiable closed form. */
static ttt_status run_form(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o, ttt_layer_state *st,
                           const ttt_tensor *q, const ttt_tensor *k, const ttt_tensor *v,
                           const ttt_tensor *eta, const ttt_tensor *beta,
                           const ttt_tensor *log_alpha, int alpha_vec, ttt_error *err) {
    if (L->form == TTT_FORM_GENERIC)
        return forward_generic(ctx, L, o, st, q, k, v, eta, log_alpha, alpha_vec, err);
    if (ttt_recording(ctx))
        return ttt_layer_forward_diff(ctx, L, o, st, q, k, v, beta, log_alpha, 1, err);
    return forward_closed(ctx, L, o, st, q, k, v, eta, log_alpha, alpha_vec, err);
}

ttt_status ttt_layer_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                             ttt_layer_state *st, const ttt_tensor *q, const ttt_tensor *k,
                             const ttt_tensor *v, const ttt_tensor *eta,
                             const ttt_tensor *log_alpha, ttt_error *err) {
    const int T = TTT_ROWS(k);
    char s1[48], s2[48], s3[48];
    if (TTT_COLS(q) != L->d_k || TTT_COLS(k) != L->d_k || TTT_COLS(v) != L->d_v ||
        TTT_ROWS(q) != T || TTT_ROWS(v) != T || TTT_ROWS(o) != T || TTT_COLS(o) != L->d_v)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "layer inputs q %s, k %s, v %s do not fit d_k = %d, d_v = %d",
                             ttt_tensor_shape_str(q, s1, sizeof s1),
                             ttt_tensor_shape_str(k, s2, sizeof s2),
                             ttt_tensor_shape_str(v, s3, sizeof s3), L->d_k, L->d_v);
    if (eta && (int)eta->n != T)
        return ttt_error_set(err, TTT_ERR_SHAPE, "eta has %zu entries for %d tokens", eta->n, T);
    int alpha_vec = log_alpha && log_alpha->ndim == 2;
    if (log_alpha && !((log_alpha->ndim == 1 && (int)log_alpha->n == T) ||
                       (alpha_vec && TTT_ROWS(log_alpha) == T && TTT_COLS(log_alpha) == L->d_k)))
        return ttt_error_set(err, TTT_ERR_SHAPE, "log_alpha %s fits neither (T) nor (T, d_k)",
                             ttt_tensor_shape_str(log_alpha, s1, sizeof s1));

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
        q = ttt_elu1(ctx, q);
        k = ttt_elu1(ctx, k);
    }
    /* With a tape the closed forms run differentiably (layers/composed.c: fused ops with
     * hand-written backward where they exist, composed ops elsewhere); β = θ·η is recorded so
     * that learned learning rates receive gradients. */
    const ttt_tensor *beta = tape && L->form != TTT_FORM_GENERIC && eta ? ttt_scale(ctx, eta, L->lr)
                                                                        : NULL;
    /* The form's output (T, d_v). Without a tape the form writes straight into the caller's o
     * (which must not alias the inputs): no temporary to fault in, no copy. With a tape o is
     * recorded as a separate node below. */
    ttt_tensor *res = !tape && o->ndim == 2 ? o : ttt_tensor_2d(ctx, T, L->d_v);
    ttt_status s = run_form(ctx, L, res, st, q, k, v, eta, beta, log_alpha, alpha_vec, err);
    if (s == TTT_OK && L->normalize == TTT_NORMALIZE_RATIO) {
        /* The denominator q_t z_t is the same layer run with a single value column of ones
         * (MATH.md §6 item 9): z is its (d_k, 1) state. */
        ttt_layer L1 = *L;
        L1.d_v = 1;
        L1.normalize = TTT_NORMALIZE_NONE;
        L1.rope = 0;
        L1.scale = 1.0f;
        ttt_layer_state s1 = {.n_w = 1, .W = {st->z}};
        ttt_tensor *ones = ttt_tensor_2d(ctx, T, 1), *den = ttt_tensor_2d(ctx, T, 1);
        ttt_tensor_fill(ones, 1.0f);
        s = run_form(ctx, &L1, den, &s1, q, k, ones, eta, beta, log_alpha, alpha_vec, err);
        st->z = s1.W[0];
        /* o / (q z + ε), as ops: 1/x = exp(−log x) is safe since q z > 0 for φ = elu+1 */
        ttt_tensor *inv = ttt_exp(ctx, ttt_neg(ctx, ttt_log(ctx, ttt_add_scalar(ctx, den, TTT_NLA_EPS))));
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
    if (TTT_COLS(q) != L->d_k || TTT_ROWS(o) != n || TTT_COLS(o) != L->d_v)
        return ttt_error_set(err, TTT_ERR_SHAPE, "layer read: queries (%d, %d) for d_k = %d",
                             n, TTT_COLS(q), L->d_k);
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    if (L->scale != 1.0f) q = ttt_scale(ctx, q, L->scale);
    if (L->rope) {
        ttt_tensor *qr = ttt_tensor_2d(ctx, n, L->d_k);
        for (int i = 0; i < n; i++) /* every query at the next position */
            ttt_rope_apply(qr->data + (size_t)i * L->d_k, q->data + (size_t)i * L->d_k, 1, L->d_k,
                           (int)st->pos, L->rope_base);
        q = qr;
    }
    if (L->normalize == TTT_NORMALIZE_RATIO) q = ttt_elu1(ctx, q);
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
