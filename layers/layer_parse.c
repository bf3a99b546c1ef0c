/* The `layer:` section of an experiment → the layer (ttt_layer_parse_section): its given keys
 * checked and read once into a descriptor, resolved (layers/layer_resolve.c), built
 * (layers/layer_build.c), and the section rendered for config.resolved.yaml (the given keys, then
 * the resolved values it left out). The section as given is never written. */
#include "layer.h"

#include <stdio.h>
#include <string.h>

#include "feature_maps.h"
#include "layer_config.h"

static ttt_cfg_node *get_mut(ttt_cfg_node *map, const char *key) {
    return (ttt_cfg_node *)ttt_cfg_get(map, key);
}

static ttt_status check_scalar_name(const ttt_cfg_node *n, const char *what,
                                    const char *const *names, int count, ttt_error *err) {
    if (n->kind != TTT_CFG_SCALAR || !n->scalar)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n, "expected the name of a %s", what);
    return ttt_cfg_check_name(n, what, names, count, err);
}

/* ------------------------------------------------------------------------------------------ */
/* YAML → descriptor */

/* The given value of key `key` of a validated map into the descriptor's field, by the option's
 * type; an absent key leaves the field unset. */
static void given_text(const ttt_cfg_node *map, const char *key, const char **out) {
    if (ttt_cfg_get(map, key)) *out = ttt_cfg_str(map, key);
}
static void given_int(const ttt_cfg_node *map, const char *key, int *out) {
    if (ttt_cfg_get(map, key)) *out = (int)ttt_cfg_int(map, key);
}
static void given_bool(const ttt_cfg_node *map, const char *key, int *out) {
    if (ttt_cfg_get(map, key)) *out = ttt_cfg_bool(map, key);
}
static void given_float(const ttt_cfg_node *map, const char *key, double *out) {
    if (ttt_cfg_get(map, key)) *out = ttt_cfg_float(map, key);
}

/* The keys the `layer:` section gave, read once into a descriptor (opts: storage for
 * TTT_LAYER_MAX_OPTIM_OPTIONS of the optimizer's own options). The section has been checked
 * (ttt_cfg_check_given). */
static void read_given(const ttt_cfg_node *map, const ttt_optim *o, ttt_layer_desc *d,
                       ttt_opt_value *opts) {
    ttt_layer_desc_init(d);
    given_text(map, "preset", &d->preset);
    given_text(map, "model", &d->model);
    given_text(map, "loss", &d->loss);
    given_int(map, "mini_batch", &d->mini_batch);
    given_text(map, "order", &d->order);
    given_text(map, "steps", &d->steps);
    given_text(map, "position_scale", &d->position_scale);
    given_text(map, "form", &d->form);
    given_int(map, "chunk", &d->chunk);
    given_float(map, "scale", &d->scale);
    given_bool(map, "rope", &d->rope);
    given_float(map, "rope_base", &d->rope_base);
    given_text(map, "normalize", &d->normalize);
    given_text(map, "feature_map", &d->feature_map);
    given_int(map, "features", &d->features);
    given_int(map, "feature_seed", &d->feature_seed);
    given_bool(map, "feature_gate", &d->feature_gate);
    given_int(map, "steps_per_token", &d->steps_per_token);
    given_int(map, "levels", &d->levels);
    const ttt_cfg_node *opt = ttt_cfg_get(map, "optimizer");
    if (!opt) return;
    given_text(opt, "name", &d->optimizer);
    given_float(opt, "lr", &d->lr);
    given_float(opt, "decay", &d->decay);
    given_text(opt, "decay_placement", &d->decay_placement);
    for (const ttt_option *oo = ttt_optim_own_options(o); oo->name; oo++) {
        if (!ttt_cfg_get(opt, oo->name)) continue;
        ttt_opt_value *v = &opts[d->n_opts++];
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
    d->opts = opts;
}

/* A resolved value the section left out, as the text the YAML reader would accept, located at
 * `where` (what a later message about the value names). */
static void record_key(ttt_cfg_node *map, const ttt_cfg_node *where, const char *key,
                       const ttt_option *o, const ttt_opt_value *v) {
    char buf[64];
    if (!ttt_cfg_get(map, key))
        ttt_cfg_map_set(map, key,
                        ttt_cfg_new_scalar(ttt_opt_value_text(o, v, buf, sizeof buf), where));
}

/* A layer-level key the section left out, when its value came from `from` (number or text by
 * the option's type). */
static void record_layer_key(ttt_cfg_node *map, ttt_layer_spec *s, int from, const char *key,
                             double number, const char *text) {
    if (*ttt_layer_spec_from(s, key) != from) return;
    const ttt_opt_value v = {key, number, text};
    record_key(map, map, key, ttt_option_find(ttt_layer_options, key), &v);
}

/* config.resolved.yaml shows every value the run used: the resolved values the section left out
 * are rendered from their typed values into the plan's copy of the section, after resolution and
 * before the build reads their locations — the block row's, then the preset's (located at the
 * preset key for the optimizer's options), then the tables' defaults. The keys keep this order
 * in the file. */
static ttt_status record_resolved(ttt_cfg_node *map, ttt_layer_spec *s, ttt_error *err) {
    const ttt_layer_desc *d = &s->d;
    record_layer_key(map, s, TTT_FROM_BLOCK, "rope", d->rope, NULL);
    record_layer_key(map, s, TTT_FROM_BLOCK, "normalize", 0.0, d->normalize);
    const ttt_preset *p = s->preset;
    if (p) {
        record_layer_key(map, s, TTT_FROM_PRESET, "model", 0.0, d->model);
        record_layer_key(map, s, TTT_FROM_PRESET, "loss", 0.0, d->loss);
        record_layer_key(map, s, TTT_FROM_PRESET, "mini_batch", d->mini_batch, NULL);
        record_layer_key(map, s, TTT_FROM_PRESET, "order", 0.0, d->order);
        record_layer_key(map, s, TTT_FROM_PRESET, "steps", 0.0, d->steps);
        record_layer_key(map, s, TTT_FROM_PRESET, "position_scale", 0.0, d->position_scale);
        record_layer_key(map, s, TTT_FROM_PRESET, "normalize", 0.0, d->normalize);
        record_layer_key(map, s, TTT_FROM_PRESET, "feature_map", 0.0, d->feature_map);
        record_layer_key(map, s, TTT_FROM_PRESET, "steps_per_token", d->steps_per_token, NULL);
        record_layer_key(map, s, TTT_FROM_PRESET, "levels", d->levels, NULL);
        const ttt_cfg_node *pn = ttt_cfg_get(map, "preset");
        ttt_cfg_node *opt = get_mut(map, "optimizer");
        if (!opt) {
            ttt_cfg_map_set(map, "optimizer", ttt_cfg_new_map(map));
            if (!(opt = get_mut(map, "optimizer"))) return ttt_cfg_out_of_memory(err, "layer");
        }
        const ttt_optim *o = s->optim;
        /* the preset's values in the preset's order, each where the section left it out */
        if (s->opt_from[0] == TTT_FROM_PRESET)
            record_key(opt, pn, "name", &o->options[0], &s->opt[0]);
        for (int j = 0; j < p->n_opts; j++) {
            const ttt_option *oo = ttt_option_find(o->options, p->opts[j].key);
            if (oo && s->opt_from[oo - o->options] == TTT_FROM_PRESET)
                record_key(opt, pn, oo->name, oo, &s->opt[oo - o->options]);
        }
    }
    TTT_TRY(ttt_cfg_check_map(map, "layer", ttt_layer_options, NULL, err));
    ttt_cfg_node *opt = get_mut(map, "optimizer");
    if (!ttt_cfg_get(opt, "name")) /* the default optimizer, as for `optimizer:` left out */
        ttt_cfg_map_set(opt, "name", ttt_cfg_new_scalar(s->optim->name, opt));
    return ttt_cfg_check_map(opt, "layer.optimizer", s->optim->options, NULL, err);
}

/* The `layer:` section → the layer: its given keys checked and read once into a descriptor, the
 * descriptor resolved once (the preset, and in a TTT mixer's block the preset's block row), the
 * layer built from the resolved values. `map` is the plan's own copy of the section, which the
 * checks normalize (`optimizer: sgd` → {name: sgd}) and the resolved values are rendered into:
 * the section as config.resolved.yaml shows it. */
static ttt_status parse_layer(ttt_cfg_node *map, int d_k, int d_v, int in_block, ttt_layer *L,
                              ttt_error *err) {
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
    /* in a block, `mixer` is the sequence model's key (shorthand for model.mixer, which the
     * model reads from the section as given and shows in its own section) */
    if (in_block) ttt_cfg_map_remove(map, "mixer");
    const ttt_cfg_node *pn = ttt_cfg_get(map, "preset");
    const ttt_preset *p = NULL;
    if (pn && !(pn->kind == TTT_CFG_SCALAR && pn->scalar && strcmp(pn->scalar, "none") == 0)) {
        TTT_TRY(check_scalar_name(pn, "preset", ttt_preset_names(), ttt_preset_count(), err));
        p = ttt_preset_find(pn->scalar);
    }
    TTT_TRY(ttt_cfg_check_given(map, "layer", ttt_layer_options, NULL, err));
    const ttt_cfg_node *n;
    if ((n = ttt_cfg_get(map, "model")))
        TTT_TRY(check_scalar_name(n, "model", ttt_model_names(), ttt_model_count(), err));
    if ((n = ttt_cfg_get(map, "loss")))
        TTT_TRY(check_scalar_name(n, "loss", ttt_loss_names(), ttt_loss_count(), err));
    if ((n = ttt_cfg_get(map, "feature_map")))
        TTT_TRY(check_scalar_name(n, "feature map", ttt_feature_map_names(),
                                  ttt_feature_map_count(), err));
    opt = get_mut(map, "optimizer");
    const ttt_cfg_node *on = opt ? ttt_cfg_get(opt, "name") : NULL;
    if (on)
        TTT_TRY(check_scalar_name(on, "optimizer", ttt_optim_names(), ttt_optim_count(), err));
    /* the optimizer whose table the given options are checked against */
    const ttt_optim *o = ttt_optim_find(on ? on->scalar : p ? p->optimizer : "sgd");
    if (opt) TTT_TRY(ttt_cfg_check_given(opt, "layer.optimizer", o->options, NULL, err));

    ttt_layer_desc d;
    ttt_opt_value opts[TTT_LAYER_MAX_OPTIM_OPTIONS];
    read_given(map, o, &d, opts);
    ttt_layer_spec s;
    TTT_TRY(ttt_layer_resolve(&d, in_block && p && p->block.conv ? &p->block : NULL, &s, err));
    TTT_TRY(record_resolved(map, &s, err));
    /* `form: auto` stays auto in the resolved configuration: the form is chosen per call, for
     * that call's inputs (ttt_form_choose); records name the form used (ttt_layer_form_used). */
    return ttt_layer_build_spec(&s, d_k, d_v, L, map, err);
}

ttt_status ttt_layer_parse_section(const ttt_cfg_node *map, int d_k, int d_v, int in_block,
                                   ttt_layer *L, ttt_cfg_node **resolved, ttt_error *err) {
    memset(L, 0, sizeof *L);
    if (resolved) *resolved = NULL;
    if (map->kind != TTT_CFG_MAP)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, map, "layer: expected a mapping");
    ttt_cfg_node *copy = ttt_cfg_clone(map);
    if (!copy) return ttt_cfg_out_of_memory(err, "layer");
    ttt_status s = parse_layer(copy, d_k, d_v, in_block, L, err);
    if (s == TTT_OK && resolved) *resolved = copy;
    else ttt_cfg_free(copy);
    return s;
}

/* The in-place forms: the section a caller holds becomes its rendering. */
static ttt_status parse_in_place(ttt_cfg_node *map, int d_k, int d_v, int in_block, ttt_layer *L,
                                 ttt_error *err) {
    ttt_cfg_node *r = NULL;
    ttt_status s = ttt_layer_parse_section(map, d_k, d_v, in_block, L, &r, err);
    if (r) {
        ttt_cfg_swap(map, r);
        ttt_cfg_free(r);
    }
    return s;
}

ttt_status ttt_layer_parse(ttt_cfg_node *map, int d_k, int d_v, ttt_layer *L, ttt_error *err) {
    return parse_in_place(map, d_k, d_v, 0, L, err);
}

ttt_status ttt_layer_parse_block(ttt_cfg_node *map, int d_k, int d_v, ttt_layer *L,
                                 ttt_error *err) {
    return parse_in_place(map, d_k, d_v, 1, L, err);
}
