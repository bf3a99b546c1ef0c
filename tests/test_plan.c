/* The plan pass (src/app/plan.h): a sweep becomes typed points carrying the values the YAML
 * gives, in sweep order; the configuration hash ignores exactly the keys that do not change
 * results; every registered task plans and runs its own tiny experiment into a run folder and
 * writes its whole `task:` section from its struct; a plan does not depend on the tree it was
 * built from (changed, then freed, before the run); and the pass writes nothing into that tree. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "experiment.h"
#include "memory.h"
#include "plan.h"
#include "task.h"
#include "testutil.h"

static char *g_dir;

static void setup(void) { g_dir = tu_mkdtemp(); }
static void teardown(void) {
    tu_rmtree(g_dir);
    free(g_dir);
}

/* The plan of YAML text (the test fails on a plan error). */
static ttt_plan *plan_of(const char *yaml) {
    ttt_error err = {0};
    ttt_cfg_node *doc = NULL;
    ck_assert_msg(ttt_cfg_load_string(yaml, "exp.yaml", &doc, &err) == TTT_OK, "%s", err.msg);
    ttt_plan *p = NULL;
    ck_assert_msg(ttt_plan_build(doc, "exp", &p, &err) == TTT_OK, "%s", err.msg);
    ttt_cfg_free(doc);
    return p;
}

static const char *const SWEEP =
    "seed: 7\n"
    "task: {kind: memory, key_dim: 8, value_dim: 8, trials: 1}\n"
    "layer: {preset: deltanet}\n"
    "sweep:\n"
    "  layer.optimizer.lr: [0.5, 0.25]\n"
    "  task.pairs: [8, [16, 4], 32]\n";

/* Two axes of 2 and 3 values: 6 points, the first axis slowest, each carrying its own typed
 * values (the layer's θ and the list of N) and the experiment's name and seed. */
START_TEST(sweep_gives_typed_points_in_order) {
    ttt_plan *p = plan_of(SWEEP);
    ck_assert_int_eq(p->n_points, 6);
    const double lr[2] = {0.5, 0.25};
    const long pairs[3][2] = {{8, 0}, {16, 4}, {32, 0}};
    const int n_pairs[3] = {1, 2, 1};
    for (int i = 0; i < 6; i++) {
        const ttt_plan_point *pt = &p->points[i];
        const ttt_memory_cfg *c = pt->cfg;
        ck_assert_int_eq(pt->index, i);
        ck_assert_ptr_eq(pt->task, ttt_task_find("memory"));
        ck_assert_str_eq(pt->name, "exp");
        ck_assert_str_eq(pt->output, "runs/exp");
        ck_assert_uint_eq(pt->seed, 7);
        /* lr is exact in float: 0.5 and 0.25 are powers of two */
        ck_assert_float_eq(c->L.lr, (float)lr[i / 3]);
        ck_assert_int_eq(c->n_pairs, n_pairs[i % 3]);
        for (int j = 0; j < c->n_pairs; j++) ck_assert_int_eq(c->pairs[j], pairs[i % 3][j]);
        ck_assert_int_eq(c->spec.d_k, 8);
        ck_assert_int_eq(c->trials, 1);
        char want[128];
        snprintf(want, sizeof want, "layer.optimizer.lr=%g, task.pairs=", lr[i / 3]);
        ck_assert_msg(strncmp(pt->label, want, strlen(want)) == 0, "label %s", pt->label);
    }
    ck_assert_ptr_nonnull(strstr(p->resolved_yaml, "resolved:"));
    ttt_plan_free(p);
}
END_TEST

/* The hash of a trained point, with one override. */
static void hash_with(const char *set, char hash[17]) {
    const char *yaml = "name: h\n"
                       "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2}\n"
                       "model: {d_model: 8, layers: 1, heads: 1}\n"
                       "train: {steps: 3, batch: 4}\n";
    ttt_error err = {0};
    ttt_cfg_node *doc = NULL;
    ck_assert_msg(ttt_cfg_load_string(yaml, "exp.yaml", &doc, &err) == TTT_OK, "%s", err.msg);
    if (set) ck_assert_msg(ttt_cfg_apply_set(doc, set, &err) == TTT_OK, "%s", err.msg);
    ttt_plan *p = NULL;
    ck_assert_msg(ttt_plan_build(doc, "exp", &p, &err) == TTT_OK, "%s", err.msg);
    ttt_cfg_free(doc);
    memcpy(hash, p->points[0].config_hash, 17);
    ck_assert_int_eq((int)strlen(hash), 16);
    ttt_plan_free(p);
}

/* A checkpoint resumes only under the same hash, so the hash must ignore exactly what does not
 * change results (naming, placing, stopping early, threads, how ranks share the work) and see
 * everything else. */
START_TEST(hash_ignores_only_what_does_not_change_results) {
    char base[17], h[17];
    hash_with(NULL, base);
    static const char *const same[] = {"name=other", "description=words", "output=elsewhere",
                                       "train.stop_at=2", "train.threads=2",
                                       "train.data_parallel=true"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        hash_with(same[i], h);
        ck_assert_msg(strcmp(h, base) == 0, "%s changed the hash", same[i]);
    }
    static const char *const differ[] = {"train.lr=0.5", "seed=1", "task.pairs=3",
                                         "layer.preset=gla", "model.d_model=16",
                                         "train.shards=1"};
    for (size_t i = 0; i < sizeof differ / sizeof differ[0]; i++) {
        hash_with(differ[i], h);
        ck_assert_msg(strcmp(h, base) != 0, "%s left the hash unchanged", differ[i]);
    }
}
END_TEST

/* Rows of a CSV file (lines after the header), or -1 when it cannot be read. */
static int csv_rows(const char *path) {
    char *t = tu_read_file(path);
    if (!t) return -1;
    int lines = 0;
    for (const char *c = t; *c; c++) lines += *c == '\n';
    if (t[0] && t[strlen(t) - 1] != '\n') lines++;
    free(t);
    return lines - 1;
}

/* The contract every task keeps: its `tiny` experiment plans and runs into a run folder that
 * holds config.resolved.yaml and a summary.csv with at least one row. A new task is covered by
 * this loop as soon as it is registered (it must have a `tiny` experiment). */
START_TEST(every_task_runs_its_tiny_experiment) {
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(g_dir), 0); /* tiny experiments find `tiny.txt` here */
    char text[8192] = "";
    while (strlen(text) < sizeof text - 200)
        strcat(text, "The quick brown fox jumps over the lazy dog; a rolling stone gathers "
                     "no moss. ");
    ck_assert_int_eq(tu_write_file("tiny.txt", text), 0);
    ck_assert_int_gt(ttt_task_count(), 0);
    for (int i = 0; i < ttt_task_count(); i++) {
        const ttt_task *t = ttt_task_at(i);
        ck_assert_msg(t->tiny != NULL, "task %s has no tiny experiment", t->name);
        ttt_error err = {0};
        ttt_experiment *e = NULL;
        ck_assert_msg(ttt_experiment_load_string(t->tiny, "tiny.yaml", NULL, 0, &e, &err) ==
                          TTT_OK,
                      "%s: %s", t->name, err.msg);
        ck_assert_ptr_eq(e->plan->points[0].task, t);
        char dir[4096], path[4200];
        snprintf(dir, sizeof dir, "%s/run_%s", g_dir, t->name);
        ck_assert_msg(ttt_experiment_run(e, dir, 0, NULL, &err) == TTT_OK, "%s: %s", t->name,
                      err.msg);
        ttt_experiment_free(e);
        snprintf(path, sizeof path, "%s/summary.csv", dir);
        const int rows = csv_rows(path);
        ck_assert_msg(rows >= 1, "%s: summary.csv has %d rows", t->name, rows);
        snprintf(path, sizeof path, "%s/config.resolved.yaml", dir);
        char *resolved = tu_read_file(path);
        ck_assert_msg(resolved && strstr(resolved, t->name), "%s: no resolved configuration",
                      t->name);
        free(resolved);
    }
    ck_assert_int_eq(chdir(cwd), 0); /* unforked (CK_FORK=no), later tests share the process */
}
END_TEST

/* The values of column `col` in the rows of a CSV text, as numbers, into v (at most n). */
static int csv_column(const char *csv, const char *col, double *v, int n) {
    char *t = strdup(csv);
    char *save = NULL;
    int idx = -1, got = 0;
    for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int k = 0;
        char *s2 = NULL;
        for (char *f = strtok_r(line, ",", &s2); f; f = strtok_r(NULL, ",", &s2), k++) {
            if (idx < 0 && strcmp(f, col) == 0) idx = k;
            else if (idx >= 0 && k == idx && got < n) v[got++] = strtod(f, NULL);
        }
    }
    free(t);
    return got;
}

/* A plan holds everything its points need: after it is built, the tree it came from is changed
 * (other N, another layer, other dimensions) and freed, and the run still measures what the
 * YAML said — the same numbers as a run of the same YAML through the ordinary path. */
START_TEST(plan_does_not_depend_on_its_tree) {
    const char *yaml = "seed: 3\n"
                       "task: {kind: memory, pairs: [4, 8], key_dim: 8, value_dim: 8, trials: 2}\n"
                       "layer: {preset: deltanet}\n"
                       "sweep: {task.value_dim: [8]}\n";
    ttt_error err = {0};
    ttt_cfg_node *doc = NULL;
    ck_assert_msg(ttt_cfg_load_string(yaml, "exp.yaml", &doc, &err) == TTT_OK, "%s", err.msg);
    ttt_plan *p = NULL;
    ck_assert_msg(ttt_plan_build(doc, "exp", &p, &err) == TTT_OK, "%s", err.msg);
    static const char *const changes[] = {"task.pairs=[2]", "task.key_dim=4", "layer.preset=gla",
                                          "seed=99", "sweep={task.value_dim: [4]}"};
    for (size_t i = 0; i < sizeof changes / sizeof changes[0]; i++)
        ck_assert_msg(ttt_cfg_apply_set(doc, changes[i], &err) == TTT_OK, "%s", err.msg);
    ttt_cfg_free(doc);
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/frozen", g_dir);
    ck_assert_msg(ttt_plan_run(p, dir, 0, NULL, &err) == TTT_OK, "%s", err.msg);
    ttt_plan_free(p);
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    char *frozen = tu_read_file(path);
    ck_assert_ptr_nonnull(frozen);

    /* the same YAML, planned and run without touching anything */
    char ypath[4096], dir2[4096];
    snprintf(ypath, sizeof ypath, "%s/exp.yaml", g_dir);
    snprintf(dir2, sizeof dir2, "%s/plain", g_dir);
    ck_assert_int_eq(tu_write_file(ypath, yaml), 0);
    ttt_experiment *e = NULL;
    ck_assert_msg(ttt_experiment_load(ypath, NULL, 0, &e, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(ttt_experiment_run(e, dir2, 0, NULL, &err) == TTT_OK, "%s", err.msg);
    ttt_experiment_free(e);
    snprintf(path, sizeof path, "%s/summary.csv", dir2);
    char *plain = tu_read_file(path);
    ck_assert_ptr_nonnull(plain);

    double n_frozen[4], n_plain[4], d_frozen[4], e_frozen[4], e_plain[4];
    ck_assert_int_eq(csv_column(frozen, "N", n_frozen, 4), 2);
    ck_assert_int_eq(csv_column(plain, "N", n_plain, 4), 2);
    ck_assert_double_eq(n_frozen[0], 4);
    ck_assert_double_eq(n_frozen[1], 8);
    ck_assert_int_eq(csv_column(frozen, "d_k", d_frozen, 4), 2);
    ck_assert_double_eq(d_frozen[0], 8);
    ck_assert_ptr_nonnull(strstr(frozen, "deltanet"));
    ck_assert_ptr_nonnull(strstr(frozen, "\n8,task.value_dim=8,")); /* the swept column, the series */
    ck_assert_ptr_null(strstr(frozen, "gla"));
    /* Same seed, same data, same layer: the recall errors are the same computation, so they
     * agree to the digits summary.csv prints. */
    ck_assert_int_eq(csv_column(frozen, "recall_error", e_frozen, 4), 2);
    ck_assert_int_eq(csv_column(plain, "recall_error", e_plain, 4), 2);
    for (int i = 0; i < 2; i++) ck_assert_double_eq(e_frozen[i], e_plain[i]);
    free(frozen);
    free(plain);
}
END_TEST

/* The pass only reads the experiment it is given (docs/design.md "The plan pass"): the document,
 * its `resolved:` list, a sweep over `layer` whose first value is the shorthand layer.mixer and
 * whose second gives a preset and the optimizer as a name, are the same text after planning as
 * before. The resolved configuration shows the shorthand as model.mixer (rendered there, the
 * layer section without it) and the optimizer as a mapping. The comparison is the document's
 * whole flow text, which one changed key alters (checked at the end). */
START_TEST(plan_only_reads_its_document) {
    const char *yaml = "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 32,\n"
                       "       test_examples: 8, eval_batch: 8}\n"
                       "model: {d_model: 8, layers: 1, heads: 1, mlp: 0}\n"
                       "train: {steps: 3, batch: 4}\n"
                       "sweep:\n"
                       "  layer: [{mixer: softmax}, {preset: gla, optimizer: sgd}]\n"
                       "resolved: [{point: earlier, config: {seed: 1}}]\n";
    ttt_error err = {0};
    ttt_cfg_node *doc = NULL;
    ck_assert_msg(ttt_cfg_load_string(yaml, "exp.yaml", &doc, &err) == TTT_OK, "%s", err.msg);
    char *before = ttt_cfg_to_flow(doc);
    ck_assert_ptr_nonnull(before);
    ttt_plan *p = NULL;
    ck_assert_msg(ttt_plan_build(doc, "exp", &p, &err) == TTT_OK, "%s", err.msg);
    char *after = ttt_cfg_to_flow(doc);
    ck_assert_ptr_nonnull(after);
    ck_assert_str_eq(after, before);
    ck_assert_ptr_nonnull(strstr(after, "resolved"));

    ttt_cfg_node *res = NULL;
    ck_assert_msg(ttt_cfg_load_string(p->resolved_yaml, "resolved.yaml", &res, &err) == TTT_OK,
                  "%s", err.msg);
    const ttt_cfg_node *list = ttt_cfg_get(res, "resolved");
    ck_assert_ptr_nonnull(list);
    ck_assert_int_eq(list->n, 2);
    const ttt_cfg_node *c0 = ttt_cfg_get(list->items[0], "config");
    const ttt_cfg_node *c1 = ttt_cfg_get(list->items[1], "config");
    ck_assert_str_eq(ttt_cfg_get_path(c0, "model.mixer")->scalar, "softmax");
    ck_assert_ptr_null(ttt_cfg_get_path(c0, "layer.mixer"));
    ck_assert_str_eq(ttt_cfg_get_path(c1, "model.mixer")->scalar, "ttt");
    ck_assert_str_eq(ttt_cfg_get_path(c1, "layer.optimizer.name")->scalar, "sgd");
    ck_assert_ptr_nonnull(ttt_cfg_get_path(c1, "layer.optimizer.lr"));
    ttt_cfg_free(res);
    ttt_plan_free(p);

    /* the comparison sees a change of one key */
    ck_assert_msg(ttt_cfg_apply_set(doc, "train.steps=4", &err) == TTT_OK, "%s", err.msg);
    char *changed = ttt_cfg_to_flow(doc);
    ck_assert_ptr_nonnull(changed);
    ck_assert_str_ne(changed, before);
    free(changed);
    free(after);
    free(before);
    ttt_cfg_free(doc);
}
END_TEST

/* Planning validates: an error in any sweep point is located and names the point, and nothing
 * is planned. */
START_TEST(plan_errors_are_located) {
    ttt_error err = {0};
    ttt_cfg_node *doc = NULL;
    const char *yaml = "task: {kind: memory, key_dim: 8, value_dim: 8}\n"
                       "sweep:\n"
                       "  layer.preset: [deltanet, deltanot]\n";
    ck_assert_int_eq(ttt_cfg_load_string(yaml, "exp.yaml", &doc, &err), TTT_OK);
    ttt_plan *p = (ttt_plan *)1;
    ck_assert_int_ne(ttt_plan_build(doc, "exp", &p, &err), TTT_OK);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(err.msg, "exp.yaml:3:") == err.msg, "%s", err.msg);
    ck_assert_msg(strstr(err.msg, "(in sweep point layer.preset=deltanot)"), "%s", err.msg);
    ttt_cfg_free(doc);
}
END_TEST

/* Every task writes its whole `task:` section from its struct (ttt_task.section): the
 * resolved configuration of its tiny experiment holds every option of its table, and planning
 * that configuration again gives the same text (what a task writes back reads back as what it
 * read). */
START_TEST(every_task_writes_its_section) {
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(g_dir), 0); /* tiny experiments find `tiny.txt` here */
    ck_assert_int_eq(tu_write_file("tiny.txt", "The quick brown fox jumps over the lazy dog. "
                                               "The quick brown fox jumps over the lazy dog. "
                                               "The quick brown fox jumps over the lazy dog. "
                                               "The quick brown fox jumps over the lazy dog. "
                                               "The quick brown fox jumps over the lazy dog. "),
                     0);
    for (int i = 0; i < ttt_task_count(); i++) {
        const ttt_task *t = ttt_task_at(i);
        ck_assert_msg(t->section != NULL, "task %s writes no section", t->name);
        ttt_error err = {0};
        ttt_experiment *e = NULL;
        ck_assert_msg(ttt_experiment_load_string(t->tiny, "tiny.yaml", NULL, 0, &e, &err) ==
                          TTT_OK,
                      "%s: %s", t->name, err.msg);
        ttt_cfg_node *res = NULL;
        ck_assert_msg(ttt_cfg_load_string(e->plan->resolved_yaml, "r.yaml", &res, &err) ==
                          TTT_OK,
                      "%s: %s", t->name, err.msg);
        const ttt_cfg_node *task = ttt_cfg_get(res, "task");
        for (const ttt_option *o = t->options; o->name; o++) {
            /* written only when given, as train.device (lm.c: the resolved file of an
             * experiment without packed documents is what it was before the option existed) */
            const int when_given =
                strcmp(t->name, "lm") == 0 && strcmp(o->name, "doc_separator") == 0;
            ck_assert_msg(when_given || ttt_cfg_get(task, o->name), "%s: task.%s missing",
                          t->name, o->name);
            ck_assert_msg(!when_given || !ttt_cfg_get(task, o->name), "%s: task.%s written",
                          t->name, o->name);
        }
        ttt_experiment *again = NULL;
        ck_assert_msg(ttt_experiment_load_string(e->plan->resolved_yaml, "tiny.yaml", NULL, 0,
                                                 &again, &err) == TTT_OK,
                      "%s: %s", t->name, err.msg);
        ck_assert_str_eq(again->plan->resolved_yaml, e->plan->resolved_yaml);
        ttt_experiment_free(again);
        ttt_cfg_free(res);
        ttt_experiment_free(e);
    }
    ck_assert_int_eq(chdir(cwd), 0);
}
END_TEST

/* ttt_task_section: the keys given stay as written and first; each option left out is written
 * from the value the task holds, in the table's order (a default in the table's spelling, at the
 * precision held; another value in the shortest text that reads back the same), and one without
 * a value is refused by name. */
START_TEST(task_section_is_written_from_values) {
    static const ttt_option opts[] = {
        {"count", TTT_OPT_INT, "4", 1, 100, NULL, "h"},
        {"x", TTT_OPT_FLOAT, "0.0", 0, 1, NULL, "h"},
        {"f", TTT_OPT_FLOAT, "1e-3", 0, 1, NULL, "h"},
        {"s", TTT_OPT_STRING, "", TTT_NO_RANGE, NULL, "h"},
        {"c", TTT_OPT_CHOICE, "a", TTT_NO_RANGE, "a|b", "h"},
        {"l", TTT_OPT_INT_LIST, "[1, 2]", 1, 100, NULL, "h"},
        {"b", TTT_OPT_BOOL, "false", TTT_NO_RANGE, NULL, "h"},
        TTT_OPTION_END,
    };
    ttt_error err = {0};
    ttt_cfg_node *given = NULL;
    ck_assert_int_eq(ttt_cfg_load_string("{l: [7], kind: t, count: 0x10}", "g.yaml", &given, &err),
                     TTT_OK);
    const long list[] = {3, 5};
    ttt_task_value v[] = {
        {.key = "count", .number = 16}, {.key = "x", .number = 0.0f, .single = 1},
        {.key = "f", .number = 0.001}, {.key = "s", .text = NULL},
        {.key = "c", .text = "b"}, {.key = "l", .list = list, .n = 2},
        {.key = "b", .number = 1},
    };
    ttt_cfg_node *out = NULL;
    ck_assert_msg(ttt_task_section(opts, given, v, 7, &out, &err) == TTT_OK, "%s", err.msg);
    char *flow = ttt_cfg_to_flow(out);
    ck_assert_str_eq(flow, "{l: [7], kind: t, count: 0x10, x: 0.0, f: 1e-3, s: null, c: b, "
                           "b: true}");
    free(flow);
    ttt_cfg_free(out);
    /* values other than the defaults: written from the value, not the table */
    ttt_cfg_node *bare = NULL;
    ck_assert_int_eq(ttt_cfg_load_string("{kind: t}", "g.yaml", &bare, &err), TTT_OK);
    v[1].number = 0.1f;
    v[2].number = 0.25;
    v[3].text = "a b";
    ck_assert_msg(ttt_task_section(opts, bare, v, 7, &out, &err) == TTT_OK, "%s", err.msg);
    flow = ttt_cfg_to_flow(out);
    ck_assert_str_eq(flow, "{kind: t, count: 16, x: 0.1, f: 0.25, s: a b, c: b, l: [3, 5], "
                           "b: true}");
    free(flow);
    ttt_cfg_free(out);
    /* an option the task gives no value of */
    ck_assert_int_eq(ttt_task_section(opts, bare, v, 6, &out, &err), TTT_ERR_ARG);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err.msg, "task.b"), "%s", err.msg);
    ttt_cfg_free(bare);
    ttt_cfg_free(given);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("plan");
    TCase *c = tcase_create("plan");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_set_timeout(c, 300);
    tcase_add_test(c, sweep_gives_typed_points_in_order);
    tcase_add_test(c, hash_ignores_only_what_does_not_change_results);
    tcase_add_test(c, every_task_runs_its_tiny_experiment);
    tcase_add_test(c, plan_does_not_depend_on_its_tree);
    tcase_add_test(c, plan_errors_are_located);
    tcase_add_test(c, plan_only_reads_its_document);
    tcase_add_test(c, every_task_writes_its_section);
    tcase_add_test(c, task_section_is_written_from_values);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run(suite()); }
