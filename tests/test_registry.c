/* Registries: every listed name is found, unknown names are not, names are unique, and every
 * optimizer follows the interface's contract. */
#include <string.h>

#include "testutil.h"
#include "internal.h"

static void check_unique(const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) ck_assert_str_ne(names[i], names[j]);
}

START_TEST(optimizers_are_registered) {
    ck_assert_int_ge(ttt_optim_count(), 1);
    ck_assert_ptr_nonnull(ttt_optim_find("sgd"));
    ck_assert_ptr_null(ttt_optim_find("sdg"));
    ck_assert_ptr_null(ttt_optim_find(NULL));
    const char *const *names = ttt_optim_names();
    check_unique(names, ttt_optim_count());
    for (int i = 0; i < ttt_optim_count(); i++) {
        const ttt_optim *o = ttt_optim_at(i);
        ck_assert_str_eq(o->name, names[i]);
        ck_assert_ptr_eq(ttt_optim_find(names[i]), o);
        ck_assert_ptr_nonnull(o->step);
        ck_assert_ptr_nonnull(o->help);
        /* the common options come first, in order */
        ck_assert_str_eq(o->options[0].name, "name");
        ck_assert_str_eq(o->options[1].name, "lr");
        ck_assert_str_eq(o->options[2].name, "decay");
        ck_assert_str_eq(o->options[3].name, "decay_placement");
        /* ttt_optim_own_options / ttt_optim_is_common split the table right after them */
        ck_assert_ptr_eq(ttt_optim_own_options(o), &o->options[4]);
        for (int j = 0; o->options[j].name; j++)
            ck_assert_int_eq(ttt_optim_is_common(o, &o->options[j]), j < 4);
        ck_assert(o->cfg_size <= TTT_OPTIM_CFG_MAX);
        ck_assert(o->cfg_size == 0 || o->parse != NULL);
    }
    ck_assert_ptr_null(ttt_optim_at(ttt_optim_count()));
}
END_TEST

START_TEST(models_losses_presets_tasks_are_registered) {
    ck_assert_ptr_nonnull(ttt_model_find("linear"));
    ck_assert_ptr_nonnull(ttt_loss_find("dot"));
    ck_assert_ptr_nonnull(ttt_loss_find("squared"));
    ck_assert_ptr_null(ttt_loss_find("squares"));
    ck_assert_ptr_nonnull(ttt_task_find("memory"));
    ck_assert_ptr_null(ttt_task_find("memroy"));
    check_unique(ttt_model_names(), ttt_model_count());
    check_unique(ttt_loss_names(), ttt_loss_count());
    check_unique(ttt_preset_names(), ttt_preset_count());
    check_unique(ttt_task_names(), ttt_task_count());
    for (int i = 0; i < ttt_model_count(); i++)
        ck_assert_str_eq(ttt_model_at(i)->name, ttt_model_names()[i]);
    for (int i = 0; i < ttt_loss_count(); i++)
        ck_assert_str_eq(ttt_loss_at(i)->name, ttt_loss_names()[i]);
    for (int i = 0; i < ttt_task_count(); i++)
        ck_assert_str_eq(ttt_task_at(i)->name, ttt_task_names()[i]);
    /* every preset names registered parts, so it can be built */
    for (int i = 0; i < ttt_preset_count(); i++) {
        const ttt_preset *p = ttt_preset_at(i);
        ck_assert_str_eq(p->name, ttt_preset_names()[i]);
        ck_assert_ptr_eq(ttt_preset_find(p->name), p);
        ck_assert_msg(ttt_model_find(p->model) && ttt_loss_find(p->loss),
                      "preset %s names an unregistered part", p->name);
        /* and it builds through the YAML path */
        char text[128];
        snprintf(text, sizeof text, "layer: {preset: %s}\n", p->name);
        ttt_cfg_node *root;
        ttt_error err = {0};
        ck_assert(ttt_cfg_load_string(text, "p.yaml", &root, &err) == TTT_OK);
        ttt_layer L;
        ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 8, 8, &L,
                                      &err) == TTT_OK,
                      "preset %s: %s", p->name, err.msg);
        ttt_cfg_free(root);
    }
}
END_TEST

/* Presets resolve to the tuple of docs/math.md §4 through the YAML path. */
START_TEST(presets_resolve_to_their_tuples) {
    const char *text = "layer: {preset: deltanet}\n";
    ttt_cfg_node *root;
    ttt_error err = {0};
    ck_assert(ttt_cfg_load_string(text, "t.yaml", &root, &err) == TTT_OK);
    ttt_layer L;
    ttt_status s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 8, 8, &L, &err);
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    ck_assert_str_eq(L.model->name, "linear");
    ck_assert_str_eq(L.loss->name, "squared");
    ck_assert_str_eq(L.optim->name, "sgd");
    ck_assert_int_eq(L.mini_batch, 1);
    ck_assert_str_eq(tu_form_used(&L), "recurrent"); /* auto: the measured-fastest closed form */
    /* the resolved configuration keeps auto: the form is chosen per call */
    ck_assert_str_eq(ttt_cfg_str(ttt_cfg_get(root, "layer"), "form"), "auto");
    ttt_cfg_free(root);

    /* a key given explicitly wins over the preset, and then no closed form applies */
    text = "layer: {preset: gated_deltanet, mini_batch: 4}\n";
    ck_assert(ttt_cfg_load_string(text, "t.yaml", &root, &err) == TTT_OK);
    s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 8, 8, &L, &err);
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    ck_assert_int_eq(L.mini_batch, 4);
    ck_assert(L.coupled);
    ck_assert_float_eq_tol(L.decay, 0.99f, 1e-7f);
    ck_assert_str_eq(tu_form_used(&L), "generic");
    ttt_cfg_free(root);
}
END_TEST

START_TEST(unknown_names_get_suggestions) {
    const char *text = "layer:\n  preset: deltanett\n";
    ttt_cfg_node *root;
    ttt_error err = {0};
    ck_assert(ttt_cfg_load_string(text, "t.yaml", &root, &err) == TTT_OK);
    ttt_layer L;
    ttt_status s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 8, 8, &L, &err);
    ck_assert_int_ne(s, TTT_OK);
    ck_assert_msg(strstr(err.msg, "t.yaml:2:11") && strstr(err.msg, "deltanet"), "%s", err.msg);
    ttt_cfg_free(root);

    text = "layer:\n  optimizer: {name: sdg}\n";
    ck_assert(ttt_cfg_load_string(text, "t.yaml", &root, &err) == TTT_OK);
    s = ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 8, 8, &L, &err);
    ck_assert_int_ne(s, TTT_OK);
    ck_assert_msg(strstr(err.msg, "t.yaml:2:21") && strstr(err.msg, "sgd"), "%s", err.msg);
    ttt_cfg_free(root);
}
END_TEST

static Suite *registry_suite(void) {
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("registry");
    tcase_add_test(tc, optimizers_are_registered);
    tcase_add_test(tc, models_losses_presets_tasks_are_registered);
    tcase_add_test(tc, presets_resolve_to_their_tuples);
    tcase_add_test(tc, unknown_names_get_suggestions);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(registry_suite()); }
