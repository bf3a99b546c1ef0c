/* A layer descriptor resolved: every field the given value, else the preset's (in a TTT mixer's
 * block, the preset's block row first for rope and normalize), else the table's default — the
 * one place a preset applies (docs/design.md "Data flow"). */
#include "layer.h"

#include <stdio.h>
#include <string.h>

#include "feature_maps.h"
#include "layer_config.h"

void ttt_layer_desc_init(ttt_layer_desc *d) {
    memset(d, 0, sizeof *d);
    d->lr = d->decay = d->scale = d->rope_base = TTT_UNSET_NUM;
    d->mini_batch = d->chunk = d->rope = TTT_UNSET_INT;
    d->features = d->feature_seed = d->feature_gate = TTT_UNSET_INT;
    d->steps_per_token = TTT_UNSET_INT;
    d->levels = TTT_UNSET_INT;
}

unsigned char *ttt_layer_spec_from(ttt_layer_spec *s, const char *key) {
    const ttt_option *o = ttt_option_find(ttt_layer_options, key);
    TTT_ASSERT(o && o - ttt_layer_options < TTT_LAYER_MAX_OPTIONS);
    return &s->from[o - ttt_layer_options];
}

/* A layer-level number: the given value (checked against ttt_layer_options), else the preset's
 * (`from` says whether the preset or its block row), else the table's default. */
static ttt_status resolve_number(ttt_layer_spec *s, const char *key, double given, double preset,
                                 int from, double *out, ttt_error *err) {
    const ttt_option *o = ttt_option_find(ttt_layer_options, key);
    unsigned char *f = ttt_layer_spec_from(s, key);
    if (given == TTT_UNSET_NUM) {
        *f = (unsigned char)(preset != TTT_UNSET_NUM ? from : TTT_FROM_DEFAULT);
        *out = preset != TTT_UNSET_NUM ? preset : ttt_opt_value_default(o).number;
        return TTT_OK;
    }
    char path[64];
    snprintf(path, sizeof path, "layer.%s", key);
    ttt_opt_value v = {key, given, NULL};
    TTT_TRY(ttt_opt_value_check(o, path, &v, err));
    *f = TTT_FROM_GIVEN;
    *out = given;
    return TTT_OK;
}

static double int_field(int x) { return x == TTT_UNSET_INT ? TTT_UNSET_NUM : (double)x; }

static ttt_status resolve_int(ttt_layer_spec *s, const char *key, int given, double preset,
                              int from, int *out, ttt_error *err) {
    double x;
    TTT_TRY(resolve_number(s, key, int_field(given), preset, from, &x, err));
    *out = (int)x;
    return TTT_OK;
}

/* A layer-level choice or name: the given text (a choice checked against its table), else the
 * preset's, else the table's default. */
static ttt_status resolve_text(ttt_layer_spec *s, const char *key, const char *given,
                               const char *preset, int from, const char **out, ttt_error *err) {
    const ttt_option *o = ttt_option_find(ttt_layer_options, key);
    unsigned char *f = ttt_layer_spec_from(s, key);
    if (!given) {
        *f = (unsigned char)(preset ? from : TTT_FROM_DEFAULT);
        *out = preset ? preset : o->def;
        return TTT_OK;
    }
    if (o->type == TTT_OPT_CHOICE) {
        char path[64];
        snprintf(path, sizeof path, "layer.%s", key);
        ttt_opt_value v = {key, 0.0, given};
        TTT_TRY(ttt_opt_value_check(o, path, &v, err));
    }
    *f = TTT_FROM_GIVEN;
    *out = given;
    return TTT_OK;
}

/* The optimizer's values over its whole table: defaults, then the preset's values when the
 * preset's optimizer is kept, then the descriptor's (the common options are its fields lr, decay
 * and decay_placement; its own options are `opts`). */
static ttt_status resolve_optimizer(const ttt_layer_desc *d, ttt_layer_spec *s, ttt_error *err) {
    const ttt_preset *p = s->preset;
    const char *name = d->optimizer ? d->optimizer : p ? p->optimizer : "sgd";
    TTT_TRY(ttt_layer_check_name("layer.optimizer", "optimizer", name, ttt_optim_names(),
                                 ttt_optim_count(), err));
    const ttt_optim *o = s->optim = ttt_optim_find(name);
    const int n = ttt_option_count(o->options);
    TTT_ASSERT(n <= TTT_LAYER_MAX_OPTIM_OPTIONS);
    for (int i = 0; i < n; i++) {
        s->opt[i] = ttt_opt_value_default(&o->options[i]);
        s->opt_from[i] = TTT_FROM_DEFAULT;
    }
    s->opt[0].text = o->name; /* the table's first entry is `name` (TTT_OPTIM_COMMON_OPTIONS) */
    s->opt_from[0] = (unsigned char)(d->optimizer ? TTT_FROM_GIVEN
                                     : p          ? TTT_FROM_PRESET
                                                  : TTT_FROM_DEFAULT);
    if (p && strcmp(p->optimizer, o->name) == 0)
        for (int j = 0; j < p->n_opts; j++) {
            const ttt_option *opt = ttt_option_find(o->options, p->opts[j].key);
            TTT_ASSERT(opt); /* the preset table is ours */
            s->opt[opt - o->options] = p->opts[j];
            s->opt_from[opt - o->options] = TTT_FROM_PRESET;
        }
    /* the common options, which are descriptor fields */
    const ttt_opt_value common[3] = {{"lr", d->lr, NULL},
                                     {"decay", d->decay, NULL},
                                     {"decay_placement", 0.0, d->decay_placement}};
    for (int j = 0; j < 3; j++) {
        if (j < 2 ? common[j].number == TTT_UNSET_NUM : !common[j].text) continue;
        const ttt_option *opt = ttt_option_find(o->options, common[j].key);
        char path[80];
        snprintf(path, sizeof path, "layer.optimizer.%s", common[j].key);
        TTT_TRY(ttt_opt_value_check(opt, path, &common[j], err));
        s->opt[opt - o->options] = common[j];
        s->opt_from[opt - o->options] = TTT_FROM_GIVEN;
    }
    const char *names[TTT_LAYER_MAX_OPTIM_OPTIONS];
    int n_own = 0;
    for (const ttt_option *oo = ttt_optim_own_options(o); oo->name; oo++)
        names[n_own++] = oo->name;
    for (int j = 0; j < d->n_opts; j++) {
        const ttt_opt_value *v = &d->opts[j];
        const ttt_option *opt = v->key ? ttt_option_find(o->options, v->key) : NULL;
        if (opt && ttt_optim_is_common(o, opt))
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
            return ttt_layer_check_name(path, "option", v->key ? v->key : "(null)", names,
                                        n_own, err);
        }
        char path[80];
        snprintf(path, sizeof path, "layer.optimizer.%s", v->key);
        TTT_TRY(ttt_opt_value_check(opt, path, v, err));
        s->opt[opt - o->options] = *v;
        s->opt_from[opt - o->options] = TTT_FROM_GIVEN;
    }
    return TTT_OK;
}

/* The one place a preset applies: every field of d resolved into s. `block` (NULL but in a TTT
 * mixer's block) is the preset's row of ttt_block_defaults, whose rope and normalize come before
 * the preset's own values. Values are checked in the order the fields are built. */
ttt_status ttt_layer_resolve(const ttt_layer_desc *d, const ttt_block_defaults *block,
                             ttt_layer_spec *s, ttt_error *err) {
    memset(s, 0, sizeof *s);
    ttt_layer_desc_init(&s->d);
    ttt_layer_desc *r = &s->d;
    const ttt_preset *p = NULL;
    if (d->preset && strcmp(d->preset, "none") != 0) {
        TTT_TRY(ttt_layer_check_name("layer.preset", "preset", d->preset, ttt_preset_names(),
                                     ttt_preset_count(), err));
        p = ttt_preset_find(d->preset);
        r->preset = p->name;
        *ttt_layer_spec_from(s, "preset") = TTT_FROM_GIVEN;
    }
    s->preset = p;
    TTT_TRY(resolve_text(s, "model", d->model, p ? p->model : NULL, TTT_FROM_PRESET, &r->model,
                         err));
    TTT_TRY(ttt_layer_check_name("layer.model", "model", r->model, ttt_model_names(),
                                 ttt_model_count(), err));
    TTT_TRY(resolve_text(s, "loss", d->loss, p ? p->loss : NULL, TTT_FROM_PRESET, &r->loss, err));
    TTT_TRY(ttt_layer_check_name("layer.loss", "loss", r->loss, ttt_loss_names(),
                                 ttt_loss_count(), err));
    TTT_TRY(resolve_optimizer(d, s, err));
    r->optimizer = s->optim->name;

    TTT_TRY(resolve_int(s, "mini_batch", d->mini_batch, p ? p->mini_batch : TTT_UNSET_NUM,
                        TTT_FROM_PRESET, &r->mini_batch, err));
    TTT_TRY(resolve_text(s, "order", d->order, p ? p->order : NULL, TTT_FROM_PRESET, &r->order,
                         err));
    TTT_TRY(resolve_number(s, "scale", d->scale, TTT_UNSET_NUM, TTT_FROM_PRESET, &r->scale, err));
    TTT_TRY(resolve_text(s, "steps", d->steps, p ? p->steps : NULL, TTT_FROM_PRESET, &r->steps,
                         err));
    const double block_rope =
        block && block->rope ? (double)(strcmp(block->rope, "true") == 0) : TTT_UNSET_NUM;
    TTT_TRY(resolve_int(s, "rope", d->rope, block_rope, TTT_FROM_BLOCK, &r->rope, err));
    TTT_TRY(resolve_number(s, "rope_base", d->rope_base, TTT_UNSET_NUM, TTT_FROM_PRESET,
                           &r->rope_base, err));
    const int nz_block = block && block->normalize;
    TTT_TRY(resolve_text(s, "normalize", d->normalize,
                         nz_block ? block->normalize : p ? p->normalize : NULL,
                         nz_block ? TTT_FROM_BLOCK : TTT_FROM_PRESET, &r->normalize, err));
    TTT_TRY(resolve_text(s, "position_scale", d->position_scale, p ? p->position_scale : NULL,
                         TTT_FROM_PRESET, &r->position_scale, err));
    TTT_TRY(resolve_text(s, "feature_map", d->feature_map, p ? p->feature_map : NULL,
                         TTT_FROM_PRESET, &r->feature_map, err));
    TTT_TRY(ttt_layer_check_name("layer.feature_map", "feature map", r->feature_map,
                                 ttt_feature_map_names(), ttt_feature_map_count(), err));
    TTT_TRY(resolve_int(s, "features", d->features, TTT_UNSET_NUM, TTT_FROM_PRESET, &r->features,
                        err));
    TTT_TRY(resolve_int(s, "feature_seed", d->feature_seed, TTT_UNSET_NUM, TTT_FROM_PRESET,
                        &r->feature_seed, err));
    TTT_TRY(resolve_int(s, "feature_gate", d->feature_gate, TTT_UNSET_NUM, TTT_FROM_PRESET,
                        &r->feature_gate, err));
    TTT_TRY(resolve_int(s, "chunk", d->chunk, TTT_UNSET_NUM, TTT_FROM_PRESET, &r->chunk, err));
    TTT_TRY(resolve_int(s, "steps_per_token", d->steps_per_token,
                        p && p->steps_per_token > 0 ? p->steps_per_token : TTT_UNSET_NUM,
                        TTT_FROM_PRESET, &r->steps_per_token, err));
    TTT_TRY(resolve_int(s, "levels", d->levels, p && p->levels > 0 ? p->levels : TTT_UNSET_NUM,
                        TTT_FROM_PRESET, &r->levels, err));
    TTT_TRY(resolve_text(s, "form", d->form, NULL, TTT_FROM_PRESET, &r->form, err));
    return TTT_OK;
}
