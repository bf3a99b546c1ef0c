/* The layer descriptor (layers/layer.h, ttt_layer_build) against the YAML reader
 * (ttt_layer_parse), which reads a `layer:` mapping into a descriptor and builds it: both paths
 * must give the same ttt_layer, byte for byte (including the optimizer's parsed configuration),
 * for every preset and for overrides of every kind of field and option type. The public
 * descriptor (include/ttt/ttt.h) is a third path: ttt_layer_new copies it into a ttt_layer_desc,
 * and its feature_* fields must arrive as the YAML's do. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"

/* after the internal headers, as in src/app/api.c: ttt.h then reuses their status types */
#include <ttt/ttt.h>

static void yaml_layer(const char *text, int d_k, int d_v, ttt_layer *L) {
    char doc[512];
    snprintf(doc, sizeof doc, "layer: %s\n", text);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert(ttt_cfg_load_string(doc, "d.yaml", &root, &err) == TTT_OK);
    memset(L, 0xA5, sizeof *L); /* the build must write every byte it is compared on */
    ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d_k, d_v, L,
                                  &err) == TTT_OK,
                  "%s: %s", text, err.msg);
    ttt_cfg_free(root);
}

static void desc_layer(const ttt_layer_desc *d, int d_k, int d_v, ttt_layer *L) {
    ttt_error err = {0};
    memset(L, 0x5A, sizeof *L);
    ck_assert_msg(ttt_layer_build(d, d_k, d_v, L, &err) == TTT_OK, "%s", err.msg);
}

static void assert_same(const ttt_layer *a, const ttt_layer *b, const char *what) {
    ck_assert_msg((a->preset == NULL) == (b->preset == NULL) &&
                      (!a->preset || strcmp(a->preset, b->preset) == 0),
                  "%s: preset differs", what);
    ttt_layer x = *a, y = *b;
    x.preset = y.preset = NULL;
    ck_assert_msg(memcmp(&x, &y, sizeof x) == 0, "%s: the layers differ", what);
}

/* The optimizer's configuration parsed by the optimizer itself from YAML flow text, without the
 * layer code: what the descriptor's typed values must arrive at. */
static void assert_optim_cfg(const ttt_layer *L, const char *flow) {
    char doc[256];
    snprintf(doc, sizeof doc, "o: %s\n", flow);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert(ttt_cfg_load_string(doc, "o.yaml", &root, &err) == TTT_OK);
    ttt_cfg_node *o = (ttt_cfg_node *)ttt_cfg_get(root, "o");
    const ttt_optim *opt = ttt_optim_find(ttt_cfg_str(o, "name"));
    ck_assert(ttt_cfg_check_map(o, "o", opt->options, NULL, &err) == TTT_OK);
    /* the checked mapping's values by the table's types, as the YAML reader gives them */
    ttt_opt_value vals[32];
    int n = 0;
    for (const ttt_option *oo = opt->options; oo->name; oo++, n++) {
        ck_assert(n < 32);
        vals[n] = (ttt_opt_value){oo->name, 0.0, NULL};
        if (oo->type == TTT_OPT_INT)
            vals[n].number = (double)ttt_cfg_int(o, oo->name);
        else if (oo->type == TTT_OPT_FLOAT)
            vals[n].number = ttt_cfg_float(o, oo->name);
        else if (oo->type == TTT_OPT_BOOL)
            vals[n].number = ttt_cfg_bool(o, oo->name);
        else
            vals[n].text = ttt_cfg_str(o, oo->name);
    }
    const ttt_optim_args args = {opt->options, vals, NULL};
    _Alignas(16) unsigned char cfg[TTT_OPTIM_CFG_MAX] = {0};
    ck_assert(opt->parse(cfg, &args, &err) == TTT_OK);
    ttt_cfg_free(root);
    ck_assert_ptr_eq(L->optim, opt);
    ck_assert_msg(memcmp(cfg, L->optim_cfg, opt->cfg_size) == 0, "%s: configuration differs",
                  flow);
}

/* The `layer:` section after ttt_layer_parse (or, in_block, ttt_layer_parse_block), in flow
 * style, and the layer. */
static char *parsed_section(const char *text, int in_block, ttt_layer *L) {
    char doc[512];
    snprintf(doc, sizeof doc, "layer: %s\n", text);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert(ttt_cfg_load_string(doc, "d.yaml", &root, &err) == TTT_OK);
    ttt_cfg_node *map = (ttt_cfg_node *)ttt_cfg_get(root, "layer");
    ttt_status s = in_block ? ttt_layer_parse_block(map, 8, 8, L, &err)
                            : ttt_layer_parse(map, 8, 8, L, &err);
    ck_assert_msg(s == TTT_OK, "%s: %s", text, err.msg);
    char *flow = ttt_cfg_to_flow(map);
    ttt_cfg_free(root);
    return flow;
}

/* The resolved section: the given keys as written, then the preset's values the section left
 * out (in the preset's order; its optimizer's options after any given ones), then the tables'
 * defaults. This text is what config.resolved.yaml shows. */
START_TEST(the_section_records_the_resolved_values) {
    ttt_layer L;
    char *got = parsed_section("{preset: titans, optimizer: {decay: 0.5}, chunk: 8}", 0, &L);
    ck_assert_str_eq(got, "{preset: titans, optimizer: {decay: 0.5, name: momentum, lr: 0.1, "
                          "momentum: 0.9, decay_placement: decoupled, nesterov: false}, "
                          "chunk: 8, model: linear, loss: squared, mini_batch: 16, "
                          "order: update_then_apply, steps: per_token, position_scale: none, "
                          "form: auto, scale: 1.0, rope: false, rope_base: 10000.0, "
                          "normalize: none, feature_map: elu1, features: 64, feature_seed: 0, "
                          "feature_gate: false, steps_per_token: 1, levels: 1}");
    free(got);
    ck_assert_float_eq(L.decay, 0.5f); /* given beats the preset's 0.99 */
    ck_assert_float_eq(L.lr, 0.1f);
    ck_assert_int_eq(L.chunk, 8);
    /* another optimizer than the preset's takes none of the preset's options */
    got = parsed_section("{preset: titans, optimizer: sgd}", 0, &L);
    ck_assert_msg(strstr(got, "optimizer: {name: sgd, lr: 1.0, decay: 1.0, "
                              "decay_placement: decoupled, l2: 0.0}"),
                  "%s", got);
    free(got);
    ck_assert_float_eq(L.decay, 1.0f);
}
END_TEST

/* In a TTT mixer's block the preset's row gives rope and normalize (before the preset's own
 * values); outside it, and where the section gives them, it does not. */
START_TEST(the_block_row_resolves_rope_and_normalize) {
    for (int i = 0; i < ttt_preset_count(); i++) {
        const ttt_preset *p = ttt_preset_at(i);
        if (!p->block.conv) continue;
        char text[128];
        snprintf(text, sizeof text, "{preset: %s}", p->name);
        ttt_layer a, b, c;
        char *plain = parsed_section(text, 0, &a);
        char *block = parsed_section(text, 1, &b);
        const int rope = strcmp(p->block.rope, "true") == 0;
        ck_assert_int_eq(a.rope, 0);
        ck_assert_int_eq(b.rope, rope);
        const int nz = strcmp(p->block.normalize, "ratio") == 0 ? TTT_NORMALIZE_RATIO
                       : strcmp(p->block.normalize, "rms") == 0 ? TTT_NORMALIZE_RMS
                                                                : TTT_NORMALIZE_NONE;
        ck_assert_int_eq(b.normalize, nz);
        char want[160];
        snprintf(want, sizeof want, "{preset: %s, rope: %s, normalize: %s, model: ", p->name,
                 p->block.rope, p->block.normalize);
        ck_assert_msg(strncmp(block, want, strlen(want)) == 0, "%s", block);
        ck_assert_msg(strncmp(plain, want, strlen(want)) != 0, "%s", plain);
        free(plain);
        free(block);
        /* n_h keys of a token share its position, and the levels of log-linear attention are
         * read with one query per token: no rope for either */
        if (p->steps_per_token > 1 || p->levels > 1) continue;
        snprintf(text, sizeof text, "{preset: %s, rope: %s}", p->name, rope ? "false" : "true");
        free(parsed_section(text, 1, &c));
        ck_assert_int_eq(c.rope, !rope);
    }
}
END_TEST

START_TEST(every_preset_builds_the_same_both_ways) {
    for (int i = 0; i < ttt_preset_count(); i++) {
        const char *name = ttt_preset_at(i)->name;
        char text[128];
        snprintf(text, sizeof text, "{preset: %s}", name);
        ttt_layer a, b;
        yaml_layer(text, 8, 8, &a);
        ttt_layer_desc d;
        ttt_layer_desc_init(&d);
        d.preset = name;
        desc_layer(&d, 8, 8, &b);
        assert_same(&a, &b, name);
    }
}
END_TEST

START_TEST(overrides_build_the_same_both_ways) {
    ttt_layer a, b;
    ttt_layer_desc d;
    /* layer fields of every type, and typed optimizer options (float, bool) over a preset's */
    yaml_layer("{preset: titans, mini_batch: 4, chunk: 4, scale: 0.5, rope: true, rope_base: 500, "
               "form: generic, optimizer: {lr: 0.25, momentum: 0.5, nesterov: true}}",
               6, 6, &a);
    ttt_layer_desc_init(&d);
    d.preset = "titans";
    d.mini_batch = 4;
    d.chunk = 4;
    d.scale = 0.5;
    d.rope = 1;
    d.rope_base = 500;
    d.form = "generic";
    d.lr = 0.25;
    const ttt_opt_value titans[] = {{"momentum", 0.5, NULL}, {"nesterov", 1, NULL}};
    d.opts = titans;
    d.n_opts = 2;
    desc_layer(&d, 6, 6, &b);
    assert_same(&a, &b, "titans with overrides");
    assert_optim_cfg(&b, "{name: momentum, momentum: 0.5, nesterov: true}");
    ck_assert_float_eq(b.optim->traits(b.optim_cfg).mu, 0.5f);

    /* int and choice options */
    yaml_layer("{model: swiglu, loss: squared, mini_batch: 2, order: apply_then_update, "
               "optimizer: {name: muon, steps: 3, scale: fan, coefficients: cubic, decay: 0.9, "
               "decay_placement: coupled}}",
               4, 5, &a);
    ttt_layer_desc_init(&d);
    d.model = "swiglu";
    d.loss = "squared";
    d.mini_batch = 2;
    d.order = "apply_then_update";
    d.optimizer = "muon";
    d.decay = 0.9;
    d.decay_placement = "coupled";
    const ttt_opt_value muon[] = {{"steps", 3, NULL}, {"scale", 0, "fan"},
                                  {"coefficients", 0, "cubic"}};
    d.opts = muon;
    d.n_opts = 3;
    desc_layer(&d, 4, 5, &b);
    assert_same(&a, &b, "muon");
    assert_optim_cfg(&b, "{name: muon, steps: 3, scale: fan, coefficients: cubic}");

    /* the descriptor differs from the preset where it is set, and only there */
    ttt_layer_desc_init(&d);
    d.preset = "gated_deltanet";
    desc_layer(&d, 4, 4, &a);
    d.decay = 0.5;
    desc_layer(&d, 4, 4, &b);
    ck_assert_float_eq(a.decay, 0.99f);
    ck_assert_float_eq(b.decay, 0.5f);
    b.decay = a.decay;
    assert_same(&a, &b, "gated_deltanet, decay 0.5");

    /* ttt_layer_init is a descriptor too */
    ttt_error err = {0};
    ck_assert(ttt_layer_init(&b, "linear", "squared", "sgd", 2, TTT_ORDER_APPLY_THEN_UPDATE,
                             "generic", 3, 3, &err) == TTT_OK);
    yaml_layer("{model: linear, loss: squared, mini_batch: 2, order: apply_then_update, "
               "form: generic}",
               3, 3, &a);
    assert_same(&a, &b, "ttt_layer_init");
}
END_TEST

/* A layer built through the public API. The handle's first member is its ttt_layer
 * (src/app/api.c), so the handle's address is the layer's. */
static const ttt_layer *public_layer(ttt_layer_handle **h, const ttt_layer_descriptor *d,
                                     int d_k, int d_v) {
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_new(h, d, d_k, d_v, &err) == TTT_OK, "%s", err.msg);
    return (const ttt_layer *)(const void *)*h;
}

START_TEST(feature_fields_build_the_same_all_ways) {
    /* every feature_* field set away from its default and from the preset's (rfa: feature_map
     * rfa, features 64, feature_seed 0, feature_gate false) */
    const char *yaml = "{preset: rfa, feature_map: favor, features: 16, feature_seed: 7, "
                       "feature_gate: false}";
    ttt_layer a, b;
    yaml_layer(yaml, 8, 8, &a);
    ttt_layer_desc d;
    ttt_layer_desc_init(&d);
    d.preset = "rfa";
    d.feature_map = "favor";
    d.features = 16;
    d.feature_seed = 7;
    d.feature_gate = 0;
    desc_layer(&d, 8, 8, &b);
    assert_same(&a, &b, "rfa, favor 16 seed 7 (internal descriptor)");
    ttt_layer_descriptor p;
    ttt_layer_descriptor_init(&p, sizeof p);
    p.preset = "rfa";
    p.feature_map = "favor";
    p.features = 16;
    p.feature_seed = 7;
    p.feature_gate = 0;
    ttt_layer_handle *h = NULL;
    assert_same(&a, public_layer(&h, &p, 8, 8), "rfa, favor 16 seed 7 (public descriptor)");
    ttt_layer_free(h);
    ck_assert_int_eq(a.features, 16);
    ck_assert_uint_eq(a.feature_seed, 7);
    ck_assert(!a.feature_gate);

    /* the gate, through a preset without it: normalized linear attention with rfa's map */
    yaml_layer("{model: linear, loss: dot, normalize: ratio, feature_map: rfa, features: 8, "
               "feature_gate: true}", 8, 8, &a);
    ttt_layer_descriptor_init(&p, sizeof p);
    p.model = "linear";
    p.loss = "dot";
    p.normalize = "ratio";
    p.feature_map = "rfa";
    p.features = 8;
    p.feature_gate = 1;
    assert_same(&a, public_layer(&h, &p, 8, 8), "rfa map with the gate (public descriptor)");
    ttt_layer_free(h);
    ck_assert(a.feature_gate);

    /* controls: each field, changed alone, changes the layer the comparison sees */
    static const char *const changed[] = {
        "{model: linear, loss: dot, normalize: ratio, feature_map: favor, features: 8, "
        "feature_gate: true}",
        "{model: linear, loss: dot, normalize: ratio, feature_map: rfa, features: 9, "
        "feature_gate: true}",
        "{model: linear, loss: dot, normalize: ratio, feature_map: rfa, features: 8, "
        "feature_seed: 1, feature_gate: true}",
        "{model: linear, loss: dot, normalize: ratio, feature_map: rfa, features: 8}"};
    for (int i = 0; i < 4; i++) {
        ttt_layer c;
        yaml_layer(changed[i], 8, 8, &c);
        ttt_layer x = a, y = c;
        x.preset = y.preset = NULL;
        ck_assert_msg(memcmp(&x, &y, sizeof x) != 0, "%s: the same layer", changed[i]);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("layer_desc");
    TCase *tc = tcase_create("layer_desc");
    tcase_add_test(tc, every_preset_builds_the_same_both_ways);
    tcase_add_test(tc, overrides_build_the_same_both_ways);
    tcase_add_test(tc, feature_fields_build_the_same_all_ways);
    tcase_add_test(tc, the_section_records_the_resolved_values);
    tcase_add_test(tc, the_block_row_resolves_rope_and_normalize);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
