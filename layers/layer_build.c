/* The resolved options → the layer (ttt_layer_build, ttt_layer_init): the optimizer's
 * configuration from its typed values, the feature map, the checks that span several fields, and
 * the form. */
#include "layer.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "feature_maps.h"
#include "layer_config.h"

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

/* The optimizer reads its typed values once (its `parse`), each located where the YAML wrote it
 * (src's optimizer mapping), or unlocated for a C descriptor. */
static ttt_status build_optimizer(const ttt_layer_spec *s, ttt_layer *L, const ttt_cfg_node *src,
                                  ttt_error *err) {
    const ttt_optim *o = L->optim = s->optim;
    const ttt_cfg_node *src_opt = src ? ttt_cfg_get(src, "optimizer") : NULL;
    const ttt_cfg_node *at[TTT_LAYER_MAX_OPTIM_OPTIONS] = {NULL};
    for (int i = 0; src_opt && o->options[i].name; i++)
        at[i] = ttt_cfg_get(src_opt, o->options[i].name);
    const ttt_optim_args args = {o->options, s->opt, at};
    L->lr = (float)ttt_optim_arg_num(&args, "lr");
    L->decay = (float)ttt_optim_arg_num(&args, "decay");
    L->coupled = strcmp(ttt_optim_arg_text(&args, "decay_placement"), "coupled") == 0;
    TTT_ASSERT(o->cfg_size <= TTT_OPTIM_CFG_MAX);
    memset(L->optim_cfg, 0, sizeof L->optim_cfg);
    return o->parse ? o->parse(L->optim_cfg, &args, err) : TTT_OK;
}

/* The feature map of normalize: ratio and its options (docs/math.md "Random features"). */
static ttt_status build_features(const ttt_layer_desc *d, ttt_layer *L, int d_k,
                                 const ttt_cfg_node *src, ttt_error *err) {
    const ttt_feature_map *fm = ttt_feature_map_find(d->feature_map);
    L->features = d->features;
    L->feature_seed = (uint64_t)d->feature_seed;
    L->feature_gate = d->feature_gate != 0;
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
static ttt_status build_substeps(const ttt_layer_desc *d, ttt_layer *L, const ttt_cfg_node *src,
                                 ttt_error *err) {
    L->substeps = d->steps_per_token;
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
static ttt_status build_levels(const ttt_layer_desc *d, ttt_layer *L, const ttt_cfg_node *src,
                               ttt_error *err) {
    L->levels = d->levels;
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

/* The build behind ttt_layer_build and ttt_layer_parse, from resolved options; src is the
 * validated `layer:` mapping they were read from (for error locations), or NULL. */
ttt_status ttt_layer_build_spec(const ttt_layer_spec *s, int d_k, int d_v, ttt_layer *L,
                                const ttt_cfg_node *src, ttt_error *err) {
    memset(L, 0, sizeof *L);
    const ttt_layer_desc *d = &s->d;
    L->preset = s->preset ? s->preset->name : NULL;
    L->model = ttt_model_find(d->model);
    L->loss = ttt_loss_find(d->loss);
    TTT_TRY(build_optimizer(s, L, src, err));
    L->mini_batch = d->mini_batch;
    L->order = strcmp(d->order, "apply_then_update") == 0 ? TTT_ORDER_APPLY_THEN_UPDATE
                                                          : TTT_ORDER_UPDATE_THEN_APPLY;
    L->scale = (float)d->scale;
    L->step_per_token = strcmp(d->steps, "per_token") == 0;
    L->rope = d->rope != 0;
    L->rope_base = (float)d->rope_base;
    L->normalize = strcmp(d->normalize, "ratio") == 0 ? TTT_NORMALIZE_RATIO
                   : strcmp(d->normalize, "rms") == 0 ? TTT_NORMALIZE_RMS
                                                      : TTT_NORMALIZE_NONE;
    L->pos_inverse = strcmp(d->position_scale, "inverse") == 0;
    TTT_TRY(build_features(d, L, d_k, src, err));
    if (L->model->square && d_k != d_v)
        return field_error(err, TTT_ERR_CONFIG, src, "model",
                           "layer.model: %s adds its input to its output, so it needs equal key "
                           "and value dimensions; got d_k = %d, d_v = %d",
                           L->model->name, d_k, d_v);
    L->d_k = d_k;
    L->d_v = d_v;
    L->d_phi = L->fmap ? L->fmap->width(d_k, L->features) : d_k;
    L->chunk = d->chunk;
    TTT_TRY(build_substeps(d, L, src, err));
    TTT_TRY(build_levels(d, L, src, err));
    if (L->normalize == TTT_NORMALIZE_RATIO && !ttt_layer_is_linear_attention(L))
        return field_error(err, TTT_ERR_CONFIG, src, "normalize",
                           "layer.normalize: ratio is normalized linear attention, the ratio of "
                           "two linear-attention states (docs/math.md §4); it needs model linear, "
                           "loss dot, plain sgd and update_then_apply");
    /* `form: auto` stays auto: the form is chosen per call, for that call's inputs
     * (ttt_form_choose). A named form must be a registry entry's (the pointer kept is the
     * registry's own string, so the layer outlives the text it was read from) and must apply to
     * the tuple for some inputs; the inputs of each call are checked again then. */
    const char *form = d->form;
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
    memset(out, 0, sizeof *out);
    ttt_layer_spec s;
    TTT_TRY(ttt_layer_resolve(d, NULL, &s, err));
    return ttt_layer_build_spec(&s, d_k, d_v, out, NULL, err);
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
