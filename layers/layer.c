/* The generic TTT layer driver (MATH.md §1), its presets (§4) and configuration. */
#include "layer.h"

#include <math.h>
#include <string.h>

#include "autograd.h"
#include "composed.h"
#include "kernels.h"
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
    {"form", TTT_OPT_STRING, "auto", TTT_NO_RANGE, NULL,
     "computation form (see `ttt list`); auto = per call, the fastest form available for the "
     "call's inputs, else the generic driver"},
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

static ttt_status parse_optimizer(ttt_cfg_node *opt, ttt_layer *L, ttt_error *err) {
    if (!ttt_cfg_get(opt, "name")) /* the default optimizer, as for `optimizer:` left out */
        ttt_cfg_map_set(opt, "name", ttt_cfg_new_scalar("sgd", opt));
    const ttt_cfg_node *name = ttt_cfg_get(opt, "name");
    TTT_TRY(check_scalar_name(name, "optimizer", ttt_optim_names(), ttt_optim_count(), err));
    L->optim = ttt_optim_find(name->scalar);
    TTT_TRY(ttt_cfg_check_map(opt, "layer.optimizer", L->optim->options, NULL, err));
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
    if (L->normalize == TTT_NORMALIZE_RATIO && !ttt_layer_is_linear_attention(L))
        return ttt_cfg_error(err, TTT_ERR_CONFIG, ttt_cfg_get(map, "normalize"),
                             "layer.normalize: ratio is normalized linear attention, the ratio of "
                             "two linear-attention states (MATH.md §4); it needs model linear, "
                             "loss dot, plain sgd and update_then_apply");
    /* `form: auto` stays auto: the form is chosen per call, for that call's inputs
     * (ttt_form_choose); records name the form used (ttt_layer_form_used). */
    ttt_cfg_node *fn = get_mut(map, "form");
    if (fn->kind != TTT_CFG_SCALAR || !fn->scalar)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, fn, "layer.form: expected one of %s",
                             ttt_form_choices());
    if (strcmp(fn->scalar, "auto") == 0) {
        L->form = "auto";
        return TTT_OK;
    }
    for (int i = 0; i < ttt_form_count() && !L->form; i++)
        if (strcmp(ttt_form_at(i)->form, fn->scalar) == 0) L->form = ttt_form_at(i)->form;
    if (!L->form)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, fn, "layer.form: unknown form '%s'; expected "
                             "one of %s", fn->scalar, ttt_form_choices());
    const char *why = ttt_form_unavailable(L);
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
                          int mini_batch, ttt_order order, const char *form, int d_k, int d_v,
                          ttt_error *err) {
    char text[512];
    snprintf(text, sizeof text,
             "layer: {model: %s, loss: %s, optimizer: {name: %s}, mini_batch: %d, order: %s, "
             "form: %s}\n",
             model, loss, optim, mini_batch,
             order == TTT_ORDER_UPDATE_THEN_APPLY ? "update_then_apply" : "apply_then_update",
             form ? form : "auto");
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

/* One pass of the form the registry chooses for these inputs (form.h): its forward, or — with a
 * tape — its differentiable forward_diff (fused ops where the entry has them). */
static ttt_status run_form(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o, ttt_layer_state *st,
                           const ttt_form_args *a, ttt_error *err) {
    const ttt_form_inputs in = {.T = TTT_ROWS(a->k), .eta = a->eta != NULL,
                                .gate = !a->log_alpha ? TTT_FORM_GATE_NONE
                                        : a->alpha_vec ? TTT_FORM_GATE_KEY
                                                       : TTT_FORM_GATE_TOKEN,
                                .tape = ttt_recording(ctx)};
    const ttt_form_entry *e = ttt_form_choose(L, &in, err);
    if (!e) return TTT_ERR_UNSUPPORTED;
    return in.tape ? e->forward_diff(ctx, L, o, st, a, err) : e->forward(ctx, L, o, st, a, err);
}

const char *ttt_layer_form_used(const ttt_layer *L, const ttt_form_inputs *in) {
    const ttt_form_entry *e = ttt_form_choose(L, in, NULL);
    return e ? e->form : "none";
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
    ttt_status s = run_form(ctx, L, res, st, &args, err);
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
        ttt_form_args a1 = args;
        a1.v = ones;
        s = run_form(ctx, &L1, den, &s1, &a1, err);
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
