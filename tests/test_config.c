/* Tests of src/config/config_*.c: locations, error messages, schemas, --set overrides, sweeps, writing. */
#include <check.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "testutil.h"

/* ---- helpers ---- */

static ttt_cfg_node *load(const char *text) {
    ttt_error e = {0};
    ttt_cfg_node *root = NULL;
    ttt_status s = ttt_cfg_load_string(text, "exp.yaml", &root, &e);
    ck_assert_msg(s == TTT_OK, "load failed (%d): %s", (int)s, e.msg);
    ck_assert_ptr_nonnull(root);
    return root;
}

/* Assert the status and that the message contains every substring (NULL-terminated list). */
static void expect_msg(ttt_status got, const ttt_error *e, ttt_status want, ...) {
    ck_assert_msg(got == want, "status %d, want %d; message: %s", (int)got, (int)want, e->msg);
    va_list ap;
    va_start(ap, want);
    for (const char *sub; (sub = va_arg(ap, const char *)) != NULL;)
        ck_assert_msg(strstr(e->msg, sub) != NULL, "message \"%s\" lacks \"%s\"", e->msg, sub);
    va_end(ap);
}

/* Load `text`, which must fail; the tree pointer must stay NULL. */
static ttt_status load_fail(const char *text, ttt_error *e) {
    ttt_cfg_node *root = (ttt_cfg_node *)0x1;
    ttt_status s = ttt_cfg_load_string(text, "exp.yaml", &root, e);
    ck_assert_ptr_null(root);
    return s;
}

static const ttt_cfg_node *path(const ttt_cfg_node *root, const char *p) {
    const ttt_cfg_node *n = ttt_cfg_get_path(root, p);
    ck_assert_msg(n != NULL, "no value at '%s'", p);
    return n;
}

static void assert_scalar(const ttt_cfg_node *n, const char *text) {
    ck_assert_int_eq(n->kind, TTT_CFG_SCALAR);
    ck_assert_ptr_nonnull(n->scalar);
    ck_assert_str_eq(n->scalar, text);
}

static void assert_loc(const ttt_cfg_node *n, int line, int col) {
    ck_assert_msg(n->line == line && n->col == col, "location %d:%d, want %d:%d", n->line,
                  n->col, line, col);
}

static char *write_to_string(const ttt_cfg_node *root) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    ttt_cfg_write_yaml(root, f);
    fclose(f);
    return buf;
}

/* Two scalars mean the same when their texts match and they convert to the same typed values
 * (a quoted "64" is text, a plain 64 an integer). */
static int same_meaning(const ttt_cfg_node *a, const ttt_cfg_node *b) {
    if (!a->scalar || !b->scalar) return a->scalar == b->scalar;
    if (strcmp(a->scalar, b->scalar) != 0) return 0;
    long ia = 0, ib = 0;
    double fa = 0, fb = 0;
    int ba = 0, bb = 0;
    int oka = ttt_cfg_as_int(a, &ia, NULL) == TTT_OK, okb = ttt_cfg_as_int(b, &ib, NULL) == TTT_OK;
    if (oka != okb || ia != ib) return 0;
    oka = ttt_cfg_as_float(a, &fa, NULL) == TTT_OK;
    okb = ttt_cfg_as_float(b, &fb, NULL) == TTT_OK;
    if (oka != okb || fa != fb) return 0;
    oka = ttt_cfg_as_bool(a, &ba, NULL) == TTT_OK;
    okb = ttt_cfg_as_bool(b, &bb, NULL) == TTT_OK;
    return oka == okb && ba == bb;
}

static int tree_equal(const ttt_cfg_node *a, const ttt_cfg_node *b) {
    if (a->kind != b->kind) return 0;
    if (a->kind == TTT_CFG_SCALAR) return same_meaning(a, b);
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++) {
        if (a->kind == TTT_CFG_MAP && strcmp(a->keys[i], b->keys[i]) != 0) return 0;
        if (!tree_equal(a->items[i], b->items[i])) return 0;
    }
    return 1;
}

/* ---- loading and locations ---- */

START_TEST(test_locations) {
    ttt_cfg_node *root = load("name: demo\n"
                              "task:\n"
                              "  kind: memory\n"
                              "  pairs: [16, 32]\n"
                              "layer:\n"
                              "  optimizer: {name: sgd, lr: 0.5}\n"
                              "  list:\n"
                              "    - a\n"
                              "    - b: 1\n");
    ck_assert_int_eq(root->kind, TTT_CFG_MAP);
    ck_assert_int_eq(root->n, 3);
    ck_assert_str_eq(root->keys[0], "name");
    ck_assert_str_eq(root->keys[2], "layer");
    assert_loc(path(root, "name"), 1, 7);
    ck_assert_str_eq(path(root, "name")->file, "exp.yaml");
    assert_scalar(path(root, "task.kind"), "memory");
    assert_loc(path(root, "task.kind"), 3, 9);
    const ttt_cfg_node *pairs = path(root, "task.pairs");
    ck_assert_int_eq(pairs->kind, TTT_CFG_SEQ);
    ck_assert_int_eq(pairs->n, 2);
    assert_loc(pairs, 4, 10);
    assert_loc(pairs->items[1], 4, 15);
    assert_scalar(pairs->items[1], "32");
    assert_loc(path(root, "layer.optimizer"), 6, 14);
    assert_loc(path(root, "layer.optimizer.lr"), 6, 30);
    const ttt_cfg_node *opt = path(root, "layer.optimizer");
    ck_assert_int_eq(opt->key_line[1], 6); /* "lr" */
    ck_assert_int_eq(opt->key_col[1], 26);
    const ttt_cfg_node *task = path(root, "task");
    ck_assert_int_eq(task->key_line[1], 4);
    ck_assert_int_eq(task->key_col[1], 3);
    const ttt_cfg_node *list = path(root, "layer.list");
    ck_assert_int_eq(list->n, 2);
    assert_loc(list->items[0], 8, 7);
    ck_assert_int_eq(list->items[1]->kind, TTT_CFG_MAP);
    assert_loc(list->items[1], 9, 7);
    assert_loc(ttt_cfg_get(list->items[1], "b"), 9, 10);

    char buf[64];
    ck_assert_str_eq(ttt_cfg_where(path(root, "layer.optimizer.lr"), buf, sizeof buf),
                     "exp.yaml:6:30");
    ttt_error e;
    ck_assert_int_eq(ttt_cfg_error(&e, TTT_ERR_CONFIG, path(root, "task.kind"), "bad %s", "kind"),
                     TTT_ERR_CONFIG);
    ck_assert_str_eq(e.msg, "exp.yaml:3:9: bad kind");
    ck_assert_ptr_null(ttt_cfg_get_path(root, "task.nope"));
    ck_assert_ptr_null(ttt_cfg_get_path(root, "name.x"));
    ttt_cfg_free(root);
}
END_TEST

START_TEST(test_scalar_styles) {
    ttt_cfg_node *root = load("a:\n"
                              "b: ~\n"
                              "c: null\n"
                              "d: \"\"\n"
                              "e: '7'\n"
                              "f: 7\n"
                              "g: |\n"
                              "  two\n"
                              "  lines\n"
                              "i: \"null\"\n");
    ck_assert_ptr_null(path(root, "a")->scalar);
    ck_assert_int_eq(path(root, "a")->kind, TTT_CFG_SCALAR);
    ck_assert_int_eq(path(root, "a")->line, 1);
    ck_assert_ptr_null(path(root, "b")->scalar);
    ck_assert_ptr_null(path(root, "c")->scalar);
    assert_scalar(path(root, "d"), "");
    ck_assert_int_eq(path(root, "d")->quoted, 1);
    assert_scalar(path(root, "e"), "7");
    ck_assert_int_eq(path(root, "e")->quoted, 1);
    ck_assert_int_eq(path(root, "f")->quoted, 0);
    assert_scalar(path(root, "g"), "two\nlines\n");
    ck_assert_int_eq(path(root, "g")->quoted, 1);
    assert_scalar(path(root, "i"), "null");
    ttt_cfg_free(root);
}
END_TEST

START_TEST(test_conversions) {
    ttt_cfg_node *root = load("i1: 42\ni2: +7\ni3: -3\nbad1: sixty\nbad2: 1.5\nbad3: 12abc\n"
                              "big: 99999999999999999999\nq: \"64\"\n"
                              "f1: 1e-3\nf2: 2\nf3: -.5\nf4: nan\nf5: inf\nf6: 0x10\nf7: 1e999\n"
                              "b1: true\nb2: Yes\nb3: OFF\nb4: 2\nb5: 'true'\nlst: [1]\n");
    ttt_error e;
    long v = 0;
    ck_assert_int_eq(ttt_cfg_as_int(path(root, "i1"), &v, &e), TTT_OK);
    ck_assert_int_eq(v, 42);
    ck_assert_int_eq(ttt_cfg_as_int(path(root, "i2"), &v, &e), TTT_OK);
    ck_assert_int_eq(v, 7);
    ck_assert_int_eq(ttt_cfg_as_int(path(root, "i3"), &v, &e), TTT_OK);
    ck_assert_int_eq(v, -3);
    expect_msg(ttt_cfg_as_int(path(root, "bad1"), &v, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:4:7: expected an integer, got 'sixty'", NULL);
    expect_msg(ttt_cfg_as_int(path(root, "bad2"), &v, &e), &e, TTT_ERR_CONFIG, "got '1.5'", NULL);
    expect_msg(ttt_cfg_as_int(path(root, "bad3"), &v, &e), &e, TTT_ERR_CONFIG, "'12abc'", NULL);
    expect_msg(ttt_cfg_as_int(path(root, "big"), &v, &e), &e, TTT_ERR_RANGE, "exp.yaml:7:6",
               "too large", NULL);
    expect_msg(ttt_cfg_as_int(path(root, "q"), &v, &e), &e, TTT_ERR_CONFIG, "quoted",
               "without quotes", NULL);
    expect_msg(ttt_cfg_as_int(path(root, "lst"), &v, &e), &e, TTT_ERR_CONFIG, "got a list", NULL);

    double d = 0;
    ck_assert_int_eq(ttt_cfg_as_float(path(root, "f1"), &d, &e), TTT_OK);
    ck_assert_double_eq(d, 1e-3);
    ck_assert_int_eq(ttt_cfg_as_float(path(root, "f2"), &d, &e), TTT_OK);
    ck_assert_double_eq(d, 2.0);
    ck_assert_int_eq(ttt_cfg_as_float(path(root, "f3"), &d, &e), TTT_OK);
    ck_assert_double_eq(d, -0.5);
    expect_msg(ttt_cfg_as_float(path(root, "f4"), &d, &e), &e, TTT_ERR_CONFIG,
               "expected a number, got 'nan'", NULL);
    expect_msg(ttt_cfg_as_float(path(root, "f5"), &d, &e), &e, TTT_ERR_CONFIG, "'inf'", NULL);
    expect_msg(ttt_cfg_as_float(path(root, "f6"), &d, &e), &e, TTT_ERR_CONFIG, "'0x10'", NULL);
    expect_msg(ttt_cfg_as_float(path(root, "f7"), &d, &e), &e, TTT_ERR_RANGE, "1e999", NULL);

    int b = -1;
    ck_assert_int_eq(ttt_cfg_as_bool(path(root, "b1"), &b, &e), TTT_OK);
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(ttt_cfg_as_bool(path(root, "b2"), &b, &e), TTT_OK);
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(ttt_cfg_as_bool(path(root, "b3"), &b, &e), TTT_OK);
    ck_assert_int_eq(b, 0);
    expect_msg(ttt_cfg_as_bool(path(root, "b4"), &b, &e), &e, TTT_ERR_CONFIG,
               "expected true or false, got '2'", NULL);
    expect_msg(ttt_cfg_as_bool(path(root, "b5"), &b, &e), &e, TTT_ERR_CONFIG, "quoted", NULL);
    ttt_cfg_free(root);
}
END_TEST

START_TEST(test_files) {
    char *dir = tu_mkdtemp();
    ck_assert_ptr_nonnull(dir);
    char file[512];
    snprintf(file, sizeof file, "%s/exp.yaml", dir);
    ck_assert_int_eq(tu_write_file(file, "seed: 3\ntask:\n  kind: memory\n"), 0);
    ttt_error e;
    ttt_cfg_node *root = NULL;
    ck_assert_int_eq(ttt_cfg_load_file(file, &root, &e), TTT_OK);
    ck_assert_str_eq(path(root, "task.kind")->file, file);
    assert_loc(path(root, "task.kind"), 3, 9);
    ttt_cfg_free(root);

    char missing[512];
    snprintf(missing, sizeof missing, "%s/x.yaml", dir);
    root = (ttt_cfg_node *)0x1;
    expect_msg(ttt_cfg_load_file(missing, &root, &e), &e, TTT_ERR_IO, "cannot open '", "x.yaml'",
               ": No such file or directory", NULL);
    ck_assert_ptr_null(root);
    expect_msg(ttt_cfg_load_file(dir, &root, &e), &e, TTT_ERR_IO, "cannot read", NULL);

    ck_assert_int_eq(tu_write_file(file, "task:\n  kind: [memory\n"), 0);
    char want[600];
    snprintf(want, sizeof want, "%s:3:1:", file);
    expect_msg(ttt_cfg_load_file(file, &root, &e), &e, TTT_ERR_YAML, want, "flow sequence",
               "line 2, column 9", NULL);
    ck_assert_ptr_null(root);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_malformed) {
    ttt_error e;
    /* "key_dim" is indented one space less than its siblings. */
    expect_msg(load_fail("task:\n  kind: memory\n key_dim: 8\n", &e), &e, TTT_ERR_YAML,
               "exp.yaml:3:2: did not find expected key", "line up", NULL);
    expect_msg(load_fail("a: [1, 2\nb: 3\n", &e), &e, TTT_ERR_YAML, "exp.yaml:2:2:",
               "while parsing a flow sequence at line 1, column 4", "closing ']'", NULL);
    expect_msg(load_fail("a: {x: 1\n", &e), &e, TTT_ERR_YAML, "exp.yaml:", "'}'", NULL);
    expect_msg(load_fail("a:\n\tb: 1\n", &e), &e, TTT_ERR_YAML, "exp.yaml:2:1:", "tabs", NULL);
    expect_msg(load_fail("a: \"open\nb: 2\n", &e), &e, TTT_ERR_YAML, "exp.yaml:",
               "closing quote", NULL);
    expect_msg(load_fail("a: b: c\n", &e), &e, TTT_ERR_YAML, "exp.yaml:1:5:",
               "mapping values are not allowed", NULL);
    expect_msg(load_fail("a: 1\n---\nb: 2\n", &e), &e, TTT_ERR_YAML, "exp.yaml:2:1:",
               "second YAML document", NULL);
    expect_msg(load_fail("? [a, b]\n: 1\n", &e), &e, TTT_ERR_YAML, "exp.yaml:1:3:",
               "key must be a name", NULL);
}
END_TEST

START_TEST(test_top_level) {
    ttt_error e;
    expect_msg(load_fail("- a\n- b\n", &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:1:1: the top level is a list; expected a mapping", NULL);
    expect_msg(load_fail("hello\n", &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:1:1: the top level is a value", NULL);
    expect_msg(load_fail("", &e), &e, TTT_ERR_CONFIG, "exp.yaml:1:1: the file is empty", NULL);
    expect_msg(load_fail("# only a comment\n", &e), &e, TTT_ERR_CONFIG, "empty", NULL);
}
END_TEST

START_TEST(test_duplicate_key) {
    ttt_error e;
    expect_msg(load_fail("a: 1\nb:\n  x: 1\n  y: 2\n  x: 3\n", &e), &e, TTT_ERR_YAML,
               "exp.yaml:5:3: duplicate key 'x' in b (first written at line 3, column 3)", NULL);
    expect_msg(load_fail("a: 1\na: 2\n", &e), &e, TTT_ERR_YAML,
               "exp.yaml:2:1: duplicate key 'a' (first written at line 1", NULL);
    expect_msg(load_fail("a: {p: 1, p: 2}\n", &e), &e, TTT_ERR_YAML, "exp.yaml:1:11:",
               "duplicate key 'p' in a", NULL);
}
END_TEST

START_TEST(test_aliases) {
    ttt_cfg_node *root = load("base: &b {lr: 0.1, decay: 0.9}\n"
                              "opt: *b\n"
                              "sizes: &s [1, 2]\n"
                              "more: *s\n"
                              "word: &w hello\n"
                              "again: *w\n");
    const ttt_cfg_node *opt = path(root, "opt");
    ck_assert_int_eq(opt->kind, TTT_CFG_MAP);
    ck_assert_ptr_ne(opt, path(root, "base")); /* an independent copy */
    assert_scalar(path(root, "opt.lr"), "0.1");
    assert_scalar(path(root, "opt.decay"), "0.9");
    assert_loc(opt, 2, 6);                     /* the copy is used at the alias ... */
    assert_loc(path(root, "opt.lr"), 1, 15);   /* ... its values were written at the anchor */
    ck_assert_int_eq(path(root, "more")->n, 2);
    assert_scalar(path(root, "more")->items[1], "2");
    assert_scalar(path(root, "again"), "hello");
    assert_loc(path(root, "again"), 6, 8);
    ttt_cfg_free(root);

    ttt_error e;
    expect_msg(load_fail("a: *nope\n", &e), &e, TTT_ERR_YAML,
               "exp.yaml:1:4: unknown alias '*nope'", NULL);
    /* An anchor cannot be used inside itself. */
    expect_msg(load_fail("a: &x [1, *x]\n", &e), &e, TTT_ERR_YAML, "unknown alias '*x'", NULL);

    /* "Billion laughs": each level multiplies the size by ten. */
    char text[4096] = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
    for (int lvl = 1; lvl <= 8; lvl++) {
        char line[256];
        int k = snprintf(line, sizeof line, "l%d: &l%d [", lvl, lvl);
        for (int j = 0; j < 10; j++)
            k += snprintf(line + k, sizeof line - (size_t)k, "%s*l%d", j ? ", " : "", lvl - 1);
        snprintf(line + k, sizeof line - (size_t)k, "]\n");
        strcat(text, line);
    }
    expect_msg(load_fail(text, &e), &e, TTT_ERR_YAML, "exp.yaml:5:", "aliases expand to more than",
               NULL);

    char deep[512] = "a: ";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    for (int i = 0; i < 100; i++) strcat(deep, "]");
    strcat(deep, "\n");
    expect_msg(load_fail(deep, &e), &e, TTT_ERR_YAML, "nested more than", NULL);
}
END_TEST

START_TEST(test_tree_editing) {
    ttt_cfg_node *root = load("a: 1\nb: [x]\nc: {d: 2}\n");
    ttt_cfg_node *copy = ttt_cfg_clone(root);
    ck_assert(tree_equal(root, copy));
    assert_loc(ttt_cfg_get_path(copy, "c.d"), 3, 8);
    ttt_cfg_map_set(root, "a", ttt_cfg_new_scalar("5", NULL));
    ck_assert_str_eq(root->keys[0], "a"); /* replaced in place */
    assert_scalar(path(root, "a"), "5");
    assert_scalar(path(copy, "a"), "1");
    ttt_cfg_map_set(root, "z", ttt_cfg_new_map(path(root, "c")));
    ck_assert_str_eq(root->keys[3], "z");
    assert_loc(path(root, "z"), 3, 4);
    ttt_cfg_seq_push((ttt_cfg_node *)path(root, "b"), ttt_cfg_new_scalar("y", NULL));
    ck_assert_int_eq(path(root, "b")->n, 2);
    ck_assert_int_eq(ttt_cfg_map_remove(root, "b"), 1);
    ck_assert_int_eq(ttt_cfg_map_remove(root, "b"), 0);
    ck_assert_int_eq(root->n, 3);
    ck_assert_str_eq(root->keys[1], "c");
    char buf[64];
    ck_assert_str_eq(ttt_cfg_where(path(root, "a"), buf, sizeof buf), "<built-in default>");
    ttt_cfg_free(root);
    ttt_cfg_free(copy);
}
END_TEST

/* ---- schemas ---- */

static const ttt_option task_opts[] = {
    {"kind", TTT_OPT_CHOICE, NULL, TTT_NO_RANGE, "memory|copy|induction", "which task"},
    {"key_dim", TTT_OPT_INT, "64", 1, 4096, NULL, "key width"},
    {"pairs", TTT_OPT_INT_LIST, "[16, 32]", 1, 1024, NULL, "number of pairs"},
    {"noise", TTT_OPT_FLOAT, "0.0", 0, 1, NULL, "input noise"},
    {"lrs", TTT_OPT_FLOAT_LIST, "1e-3", 0, 10, NULL, "learning rates"},
    {"shuffle", TTT_OPT_BOOL, "true", TTT_NO_RANGE, NULL, "shuffle pairs"},
    {"label", TTT_OPT_STRING, "~", TTT_NO_RANGE, NULL, "free text"},
    {"extra", TTT_OPT_MAP, NULL, TTT_NO_RANGE, NULL, "owner-checked options"},
    TTT_OPTION_END,
};

static const ttt_option opt_opts[] = {
    {"name", TTT_OPT_STRING, NULL, TTT_NO_RANGE, NULL, "optimizer name"},
    {"lr", TTT_OPT_FLOAT, "1.0", 0, 100, NULL, "step size"},
    {"decay", TTT_OPT_FLOAT, "1.0", 0, 1, NULL, "forgetting"},
    TTT_OPTION_END,
};

/* Load `text` and check its "task" mapping; returns the status, the tree in *root. */
static ttt_status check_task(const char *text, ttt_cfg_node **root, ttt_error *e) {
    *root = load(text);
    ttt_cfg_node *task = (ttt_cfg_node *)path(*root, "task");
    return ttt_cfg_check_map(task, "task", task_opts, NULL, e);
}

/* ttt_cfg_check_given checks what the map gives, with the errors of ttt_cfg_check_map, and
 * fills nothing in: not a default, not even a required key (kind) the caller resolves. */
START_TEST(test_check_given) {
    ttt_cfg_node *root = load("task:\n  noise: 0.25\n  pairs: 8\n");
    ttt_cfg_node *task = (ttt_cfg_node *)path(root, "task");
    ttt_error e;
    ck_assert_int_eq(ttt_cfg_check_given(task, "task", task_opts, NULL, &e), TTT_OK);
    ck_assert_int_eq(task->n, 2);
    ck_assert_ptr_null(ttt_cfg_get(task, "kind"));
    ck_assert_ptr_null(ttt_cfg_get(task, "key_dim"));
    /* a list option given as one value is normalized as by the full check */
    ck_assert_int_eq(path(root, "task.pairs")->kind, TTT_CFG_SEQ);
    /* the full check then fills what is absent (and refuses the missing required key) */
    ck_assert_int_eq(ttt_cfg_check_map(task, "task", task_opts, NULL, &e), TTT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "missing required key 'kind'"), "%s", e.msg);
    ttt_cfg_free(root);
    /* a bad value and an unknown key are refused, located */
    root = load("task:\n  noise: 2\n");
    task = (ttt_cfg_node *)path(root, "task");
    ck_assert_int_eq(ttt_cfg_check_given(task, "task", task_opts, NULL, &e), TTT_ERR_RANGE);
    ck_assert_msg(strstr(e.msg, "exp.yaml:2:10: task.noise: 2 is out of range"), "%s", e.msg);
    ck_assert_int_eq(task->n, 1);
    ttt_cfg_free(root);
    root = load("task:\n  nosie: 0.5\n");
    task = (ttt_cfg_node *)path(root, "task");
    ck_assert_int_eq(ttt_cfg_check_given(task, "task", task_opts, NULL, &e), TTT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "did you mean 'noise'"), "%s", e.msg);
    ttt_cfg_free(root);
}
END_TEST

START_TEST(test_check_defaults) {
    ttt_cfg_node *root;
    ttt_error e;
    ck_assert_int_eq(check_task("task:\n  kind: memory\n  noise: 0.25\n", &root, &e), TTT_OK);
    const ttt_cfg_node *task = path(root, "task");
    ck_assert_int_eq(task->n, 8);
    ck_assert_str_eq(task->keys[0], "kind");
    ck_assert_str_eq(task->keys[1], "noise"); /* written keys first, then defaults in order */
    ck_assert_str_eq(task->keys[2], "key_dim");
    ck_assert_int_eq(ttt_cfg_int(task, "key_dim"), 64);
    assert_loc(path(root, "task.key_dim"), 2, 3); /* defaults sit at the map */
    ck_assert_double_eq(ttt_cfg_float(task, "noise"), 0.25);
    ck_assert_int_eq(ttt_cfg_bool(task, "shuffle"), 1);
    ck_assert_str_eq(ttt_cfg_str(task, "kind"), "memory");
    ck_assert_ptr_null(ttt_cfg_str(task, "label"));
    const ttt_cfg_node *pairs = path(root, "task.pairs");
    ck_assert_int_eq(pairs->kind, TTT_CFG_SEQ);
    ck_assert_int_eq(pairs->n, 2);
    assert_scalar(pairs->items[0], "16");
    assert_scalar(pairs->items[1], "32");
    assert_loc(pairs->items[1], 2, 3);
    const ttt_cfg_node *lrs = path(root, "task.lrs"); /* scalar default normalized to a list */
    ck_assert_int_eq(lrs->kind, TTT_CFG_SEQ);
    ck_assert_int_eq(lrs->n, 1);
    assert_scalar(lrs->items[0], "1e-3");
    ck_assert_int_eq(path(root, "task.extra")->kind, TTT_CFG_MAP);
    ck_assert_int_eq(path(root, "task.extra")->n, 0);
    /* Checking again is a no-op. */
    ck_assert_int_eq(ttt_cfg_check_map((ttt_cfg_node *)task, "task", task_opts, NULL, &e), TTT_OK);
    ck_assert_int_eq(task->n, 8);
    ttt_cfg_free(root);

    /* An empty value is refused (docs/hardening.md "Bad input: the classes of error and their
     * guarantees"): the author forgot it, and the default would be taken silently. */
    ck_assert_int_eq(check_task("task:\n  kind: copy\n  key_dim:\n", &root, &e), TTT_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "task.key_dim: the value is empty (null)"), "%s", e.msg);
    ttt_cfg_free(root);

    /* A single value for a list option becomes a list of one, at the value's location. */
    ck_assert_int_eq(check_task("task:\n  kind: copy\n  pairs: 8\n  lrs: [0.5, 2]\n", &root, &e),
                     TTT_OK);
    pairs = path(root, "task.pairs");
    ck_assert_int_eq(pairs->kind, TTT_CFG_SEQ);
    ck_assert_int_eq(pairs->n, 1);
    assert_loc(pairs, 3, 10);
    assert_scalar(pairs->items[0], "8");
    assert_loc(pairs->items[0], 3, 10);
    ck_assert_int_eq(path(root, "task.lrs")->n, 2);
    ttt_cfg_free(root);
}
END_TEST

START_TEST(test_check_errors) {
    ttt_cfg_node *root;
    ttt_error e;
    expect_msg(check_task("task:\n  kind: memory\n  key_dim: sixty\n", &root, &e), &e,
               TTT_ERR_CONFIG, "exp.yaml:3:12: task.key_dim: expected an integer, got 'sixty'",
               NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: memory\n  key_dim: 0\n", &root, &e), &e, TTT_ERR_RANGE,
               "exp.yaml:3:12: task.key_dim: 0 is out of range; expected an integer from 1 to "
               "4096",
               NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: memory\n  key_dim: \"64\"\n", &root, &e), &e,
               TTT_ERR_CONFIG, "exp.yaml:3:12: task.key_dim: expected an integer",
               "quoted text \"64\"", NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: memory\n  noise: 2\n", &root, &e), &e, TTT_ERR_RANGE,
               "exp.yaml:3:10: task.noise: 2 is out of range; expected a number from 0 to 1",
               NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: memory\n  pairs: [16, 0, 32]\n", &root, &e), &e,
               TTT_ERR_RANGE,
               "exp.yaml:3:15: task.pairs[1]: 0 is out of range; expected an integer from 1 "
               "to 1024",
               NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: memory\n  pairs: [16, x]\n", &root, &e), &e,
               TTT_ERR_CONFIG, "exp.yaml:3:15: task.pairs[1]: expected an integer, got 'x'",
               NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: memory\n  pairs: {a: 1}\n", &root, &e), &e,
               TTT_ERR_CONFIG,
               "exp.yaml:3:10: task.pairs: expected an integer or a list of integers, got a "
               "mapping",
               NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: memroy\n", &root, &e), &e, TTT_ERR_NAME,
               "exp.yaml:2:9: task.kind: unknown value 'memroy'; did you mean 'memory'? (valid: "
               "memory, copy, induction)",
               NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: zebra\n", &root, &e), &e, TTT_ERR_NAME,
               "exp.yaml:2:9: task.kind: unknown value 'zebra'; expected one of: memory, copy, "
               "induction",
               NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  key_dim: 8\n", &root, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:2:3: task: missing required key 'kind'", "which task", NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind:\n", &root, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:2:", "task.kind: a value is required", NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: copy\n  shuffle: maybe\n", &root, &e), &e,
               TTT_ERR_CONFIG, "exp.yaml:3:12: task.shuffle: expected true or false, got 'maybe'",
               NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: copy\n  extra: 5\n", &root, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:3:10: task.extra: expected a mapping, got '5'", NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: copy\n  label: [a]\n", &root, &e), &e, TTT_ERR_CONFIG,
               "task.label: expected a string, got a list", NULL);
    ttt_cfg_free(root);
    expect_msg(check_task("task:\n  kind: copy\n  lrs: [1, -1]\n", &root, &e), &e, TTT_ERR_RANGE,
               "exp.yaml:3:12: task.lrs[1]: -1 is out of range; expected a number from 0 to 10",
               NULL);
    ttt_cfg_free(root);

    /* Unknown keys point at the key, suggest the closest and list the valid ones. */
    root = load("layer:\n  optimizer:\n    name: sgd\n    lrr: 0.1\n");
    ttt_cfg_node *opt = (ttt_cfg_node *)path(root, "layer.optimizer");
    expect_msg(ttt_cfg_check_map(opt, "layer.optimizer", opt_opts, NULL, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:4:5: unknown key 'lrr' in layer.optimizer; did you mean 'lr'? (valid "
               "keys: name, lr, decay)",
               NULL);
    ttt_cfg_free(root);
    root = load("layer:\n  optimizer:\n    name: sgd\n    zzzzzz: 1\n");
    opt = (ttt_cfg_node *)path(root, "layer.optimizer");
    expect_msg(ttt_cfg_check_map(opt, "layer.optimizer", opt_opts, NULL, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:4:5: unknown key 'zzzzzz' in layer.optimizer; expected one of: name, lr, "
               "decay",
               NULL);
    /* Keys in `extra` are allowed (and left alone). */
    static const char *const extra[] = {"zzzzzz", NULL};
    ck_assert_int_eq(ttt_cfg_check_map(opt, "layer.optimizer", opt_opts, extra, &e), TTT_OK);
    assert_scalar(path(opt, "zzzzzz"), "1");
    ck_assert_double_eq(ttt_cfg_float(opt, "lr"), 1.0);
    ttt_cfg_free(root);

    root = load("seed: 1\nsed: 2\n");
    static const ttt_option top[] = {
        {"seed", TTT_OPT_INT, "0", TTT_NO_RANGE, NULL, "seed"},
        TTT_OPTION_END,
    };
    expect_msg(ttt_cfg_check_map(root, "", top, NULL, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:2:1: unknown key 'sed' at the top level; did you mean 'seed'?", NULL);
    ttt_cfg_free(root);

    root = load("layer: 5\n");
    expect_msg(ttt_cfg_check_map((ttt_cfg_node *)path(root, "layer"), "layer", opt_opts, NULL, &e),
               &e, TTT_ERR_CONFIG, "exp.yaml:1:8: layer: expected a mapping, got '5'", NULL);
    ttt_cfg_free(root);
}
END_TEST

START_TEST(test_check_name) {
    static const char *const names[] = {"sgd", "momentum"};
    ttt_cfg_node *root = load("layer:\n  opt: sdg\n  o2: xyz\n  o3: momentum\n  o4: [sgd]\n");
    ttt_error e;
    expect_msg(ttt_cfg_check_name(path(root, "layer.opt"), "optimizer", names, 2, &e), &e,
               TTT_ERR_NAME,
               "exp.yaml:2:8: unknown optimizer 'sdg'; did you mean 'sgd'? (valid: sgd, momentum)",
               NULL);
    expect_msg(ttt_cfg_check_name(path(root, "layer.o2"), "optimizer", names, 2, &e), &e,
               TTT_ERR_NAME,
               "exp.yaml:3:7: unknown optimizer 'xyz'; expected one of: sgd, momentum", NULL);
    ck_assert_int_eq(ttt_cfg_check_name(path(root, "layer.o3"), "optimizer", names, 2, &e), TTT_OK);
    expect_msg(ttt_cfg_check_name(path(root, "layer.o4"), "optimizer", names, 2, &e), &e,
               TTT_ERR_CONFIG, "exp.yaml:5:7: expected an optimizer name (one of: sgd, momentum), "
               "got a list",
               NULL);
    ttt_cfg_free(root);
}
END_TEST

START_TEST(test_closest_name) {
    static const char *const names[] = {"lr", "decay", "momentum", "sgd", "mini_batch"};
    ck_assert_str_eq(ttt_closest_name("lrr", names, 5), "lr");
    ck_assert_str_eq(ttt_closest_name("sdg", names, 5), "sgd");
    ck_assert_str_eq(ttt_closest_name("SGD", names, 5), "sgd");
    ck_assert_str_eq(ttt_closest_name("momentun", names, 5), "momentum");
    ck_assert_str_eq(ttt_closest_name("minibatch", names, 5), "mini_batch");
    ck_assert_str_eq(ttt_closest_name("decay", names, 5), "decay");
    ck_assert_ptr_null(ttt_closest_name("x", names, 5));
    ck_assert_ptr_null(ttt_closest_name("zebra", names, 5));
    ck_assert_ptr_null(ttt_closest_name("optimizer", names, 5));
    ck_assert_ptr_null(ttt_closest_name("lr", names, 0));
}
END_TEST

START_TEST(test_getter_asserts) {
    ttt_cfg_node *root = load("a: hello\n");
    ttt_cfg_int(root, "a"); /* not an integer: a programmer error, aborts */
    ttt_cfg_free(root);
}
END_TEST

/* ---- --set ---- */

static const char *const set_base = "layer:\n"
                                    "  optimizer:\n"
                                    "    name: sgd\n"
                                    "    lr: 0.1\n"
                                    "  model: linear\n"
                                    "sweep:\n"
                                    "  layer.mini_batch: [1, 16]\n"
                                    "  layer.optimizer.name: [sgd, momentum]\n"
                                    "  task.kind: [memory, copy]\n";

START_TEST(test_set_values) {
    ttt_cfg_node *root = load(set_base);
    ttt_error e;
    ck_assert_int_eq(ttt_cfg_apply_set(root, "layer.optimizer.lr=0.5", &e), TTT_OK);
    const ttt_cfg_node *lr = path(root, "layer.optimizer.lr");
    assert_scalar(lr, "0.5");
    ck_assert_str_eq(lr->file, "--set layer.optimizer.lr=0.5");
    ck_assert_int_eq(lr->line, 0);
    char buf[128];
    ck_assert_str_eq(ttt_cfg_where(lr, buf, sizeof buf), "--set layer.optimizer.lr=0.5");
    ck_assert_str_eq(path(root, "layer.optimizer")->keys[1], "lr"); /* order kept */
    ck_assert_int_eq(path(root, "layer.optimizer")->key_line[1], 4);

    /* New nested keys create their maps. */
    ck_assert_int_eq(ttt_cfg_apply_set(root, "task.pairs=[8, 16]", &e), TTT_OK);
    const ttt_cfg_node *pairs = path(root, "task.pairs");
    ck_assert_int_eq(pairs->kind, TTT_CFG_SEQ);
    ck_assert_int_eq(pairs->n, 2);
    assert_scalar(pairs->items[1], "16");
    ck_assert_str_eq(pairs->items[1]->file, "--set task.pairs=[8, 16]");
    ck_assert_str_eq(path(root, "task")->file, "--set task.pairs=[8, 16]");
    ck_assert_int_eq(ttt_cfg_apply_set(root, "output.dir.name = runs/x", &e), TTT_OK);
    assert_scalar(path(root, "output.dir.name"), "runs/x");
    ck_assert_int_eq(ttt_cfg_apply_set(root, "note=", &e), TTT_OK);
    ck_assert_ptr_null(path(root, "note")->scalar);
    ck_assert_int_eq(ttt_cfg_apply_set(root, "layer.model=\"5\"", &e), TTT_OK);
    assert_scalar(path(root, "layer.model"), "5");
    ck_assert_int_eq(path(root, "layer.model")->quoted, 1);
    /* Block-looking text is a string: only [..] and {..} make structure on a command line. */
    ck_assert_int_eq(ttt_cfg_apply_set(root, "title=a: b", &e), TTT_OK);
    assert_scalar(path(root, "title"), "a: b");
    ck_assert_int_eq(ttt_cfg_apply_set(root, "layer.optimizer={name: muon}", &e), TTT_OK);
    assert_scalar(path(root, "layer.optimizer.name"), "muon");
    ck_assert_ptr_null(ttt_cfg_get_path(root, "layer.optimizer.lr"));
    /* A value may itself contain '='. */
    ck_assert_int_eq(ttt_cfg_apply_set(root, "name=a=b", &e), TTT_OK);
    assert_scalar(path(root, "name"), "a=b");
    ttt_cfg_free(root);
}
END_TEST

START_TEST(test_set_errors) {
    ttt_cfg_node *root = load(set_base);
    ttt_error e;
    expect_msg(ttt_cfg_apply_set(root, "layer.optimizer.lr", &e), &e, TTT_ERR_ARG,
               "--set 'layer.optimizer.lr': expected KEY.PATH=VALUE", NULL);
    expect_msg(ttt_cfg_apply_set(root, "=3", &e), &e, TTT_ERR_ARG, "--set '=3'",
               "expected KEY.PATH=VALUE", NULL);
    expect_msg(ttt_cfg_apply_set(root, "a..b=1", &e), &e, TTT_ERR_ARG, "--set 'a..b=1'",
               "'a..b' is not a key path", NULL);
    expect_msg(ttt_cfg_apply_set(root, ".a=1", &e), &e, TTT_ERR_ARG, "not a key path", NULL);
    expect_msg(ttt_cfg_apply_set(root, "a.=1", &e), &e, TTT_ERR_ARG, "not a key path", NULL);
    expect_msg(ttt_cfg_apply_set(root, "layer.model.width=4", &e), &e, TTT_ERR_ARG,
               "--set 'layer.model.width=4': 'layer.model' (at exp.yaml:5:10) is a value, so it "
               "cannot hold 'width'",
               NULL);
    expect_msg(ttt_cfg_apply_set(root, "layer.sizes=[1, 2", &e), &e, TTT_ERR_ARG,
               "--set 'layer.sizes=[1, 2': the value is not valid YAML: did not find expected",
               "expected KEY.PATH=VALUE", NULL);
    expect_msg(ttt_cfg_apply_set(root, "layer.x={a: 1, a: 2}", &e), &e, TTT_ERR_ARG,
               "--set 'layer.x={a: 1, a: 2}': the value is not valid YAML: duplicate key 'a'",
               NULL);
    /* Nothing was changed by the failed assignments. */
    ck_assert_ptr_null(ttt_cfg_get(root, "a"));
    ck_assert_ptr_null(ttt_cfg_get_path(root, "layer.sizes"));
    assert_scalar(path(root, "layer.model"), "linear");
    ttt_cfg_free(root);
}
END_TEST

START_TEST(test_set_sweep) {
    ttt_cfg_node *root = load(set_base);
    ttt_error e;
    ck_assert_int_eq(path(root, "sweep")->n, 3);
    /* Pinning a swept value removes its axis. */
    ck_assert_int_eq(ttt_cfg_apply_set(root, "layer.mini_batch=4", &e), TTT_OK);
    const ttt_cfg_node *sweep = path(root, "sweep");
    ck_assert_int_eq(sweep->n, 2);
    ck_assert_ptr_null(ttt_cfg_get(sweep, "layer.mini_batch"));
    assert_scalar(path(root, "layer.mini_batch"), "4");
    /* Setting a whole map pins the axes inside it. */
    ck_assert_int_eq(ttt_cfg_apply_set(root, "layer.optimizer={name: momentum, lr: 0.2}", &e),
                     TTT_OK);
    ck_assert_int_eq(sweep->n, 1);
    ck_assert_str_eq(sweep->keys[0], "task.kind");
    assert_scalar(path(root, "layer.optimizer.name"), "momentum");
    ck_assert_int_eq(path(root, "layer.optimizer")->kind, TTT_CFG_MAP);
    /* "task" is not a prefix match of "task.kind"'s sibling "tasks". */
    ck_assert_int_eq(ttt_cfg_apply_set(root, "tasks=1", &e), TTT_OK);
    ck_assert_int_eq(sweep->n, 1);
    /* The last axis pinned: no sweep left. */
    ck_assert_int_eq(ttt_cfg_apply_set(root, "task.kind=copy", &e), TTT_OK);
    ck_assert_ptr_null(ttt_cfg_get(root, "sweep"));

    /* Axes can be added or replaced through the sweep itself. */
    ck_assert_int_eq(ttt_cfg_apply_set(root, "sweep.layer.preset=[deltanet, mamba]", &e), TTT_OK);
    sweep = path(root, "sweep");
    ck_assert_int_eq(sweep->n, 1);
    ck_assert_str_eq(sweep->keys[0], "layer.preset");
    const ttt_cfg_node *axis = path(root, "sweep.layer.preset");
    ck_assert_int_eq(axis->kind, TTT_CFG_SEQ);
    ck_assert_int_eq(axis->n, 2);
    assert_scalar(axis->items[1], "mamba");
    ck_assert_int_eq(ttt_cfg_apply_set(root, "sweep.layer.preset=[a, b, c]", &e), TTT_OK);
    ck_assert_int_eq(path(root, "sweep.layer.preset")->n, 3);
    ck_assert_int_eq(sweep->n, 1);
    ttt_cfg_free(root);

    root = load("sweep: 5\n");
    expect_msg(ttt_cfg_apply_set(root, "sweep.a.b=[1]", &e), &e, TTT_ERR_ARG,
               "'sweep' (at exp.yaml:1:8) is a value", NULL);
    ttt_cfg_free(root);
}
END_TEST

/* ---- sweeps ---- */

START_TEST(test_sweep_expand) {
    ttt_cfg_node *root = load("name: s\n"
                              "layer:\n"
                              "  model: linear\n"
                              "sweep:\n"
                              "  layer.optimizer.name: [sgd, momentum, muon]\n"
                              "  layer.mini_batch: [1, 16]\n");
    ttt_cfg_node **pts;
    char **labels;
    int n;
    ttt_error e;
    ck_assert_int_eq(ttt_cfg_sweep_expand(root, &pts, &labels, &n, &e), TTT_OK);
    ck_assert_int_eq(n, 6);
    static const char *const want_names[] = {"sgd", "sgd", "momentum", "momentum", "muon", "muon"};
    static const char *const want_mb[] = {"1", "16", "1", "16", "1", "16"};
    for (int i = 0; i < n; i++) {
        assert_scalar(path(pts[i], "layer.optimizer.name"), want_names[i]);
        assert_scalar(path(pts[i], "layer.mini_batch"), want_mb[i]);
        assert_scalar(path(pts[i], "layer.model"), "linear");
        assert_scalar(path(pts[i], "name"), "s");
        ck_assert_ptr_null(ttt_cfg_get(pts[i], "sweep"));
        char want[128];
        snprintf(want, sizeof want, "layer.optimizer.name=%s, layer.mini_batch=%s",
                 want_names[i], want_mb[i]);
        ck_assert_str_eq(labels[i], want);
    }
    /* Swept values keep their place in the sweep list. */
    assert_loc(path(pts[2], "layer.optimizer.name"), 5, 31);
    assert_loc(path(pts[5], "layer.mini_batch"), 6, 25);
    ttt_cfg_points_free(pts, labels, n);
    ck_assert_ptr_nonnull(ttt_cfg_get(root, "sweep")); /* the input is untouched */
    ttt_cfg_free(root);

    /* No sweep: a single copy and an empty label. */
    root = load("a: 1\n");
    ck_assert_int_eq(ttt_cfg_sweep_expand(root, &pts, &labels, &n, &e), TTT_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(labels[0], "");
    ck_assert(tree_equal(pts[0], root));
    ck_assert_ptr_ne(pts[0], root);
    ttt_cfg_points_free(pts, labels, n);
    ttt_cfg_free(root);

    /* Non-scalar values get a flow-style label. */
    root = load("layer: {}\nsweep:\n  layer.optimizer: [{name: sgd, lr: 0.1}, {name: muon}]\n");
    ck_assert_int_eq(ttt_cfg_sweep_expand(root, &pts, &labels, &n, &e), TTT_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(labels[0], "layer.optimizer={name: sgd, lr: 0.1}");
    ck_assert_str_eq(labels[1], "layer.optimizer={name: muon}");
    assert_scalar(path(pts[0], "layer.optimizer.lr"), "0.1");
    ttt_cfg_points_free(pts, labels, n);
    ttt_cfg_free(root);
}
END_TEST

START_TEST(test_sweep_errors) {
    ttt_cfg_node **pts = (ttt_cfg_node **)0x1;
    char **labels = NULL;
    int n = -1;
    ttt_error e;
    ttt_cfg_node *root = load("layer: {}\nsweep:\n  layer.mini_batch: 4\n");
    expect_msg(ttt_cfg_sweep_expand(root, &pts, &labels, &n, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:3:21: sweep axis 'layer.mini_batch': expected a list of values", "got '4'",
               NULL);
    ck_assert_ptr_null(pts);
    ck_assert_int_eq(n, 0);
    ttt_cfg_free(root);

    root = load("sweep:\n  layer.mini_batch: []\n");
    expect_msg(ttt_cfg_sweep_expand(root, &pts, &labels, &n, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:2:21: sweep axis 'layer.mini_batch': the list is empty", NULL);
    ttt_cfg_free(root);

    root = load("sweep: [a, b]\n");
    expect_msg(ttt_cfg_sweep_expand(root, &pts, &labels, &n, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:1:8: sweep: expected a mapping", NULL);
    ttt_cfg_free(root);

    root = load("sweep:\n  a..b: [1]\n");
    expect_msg(ttt_cfg_sweep_expand(root, &pts, &labels, &n, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:2:3: sweep axis 'a..b' is not a key path", NULL);
    ttt_cfg_free(root);

    root = load("layer: linear\nsweep:\n  layer.mini_batch: [1, 2]\n");
    expect_msg(ttt_cfg_sweep_expand(root, &pts, &labels, &n, &e), &e, TTT_ERR_CONFIG,
               "exp.yaml:3:3: sweep axis 'layer.mini_batch': 'layer' (at exp.yaml:1:8) is a value",
               NULL);
    ck_assert_ptr_null(pts);
    ttt_cfg_free(root);

    /* 10^5 points is over the limit. */
    char text[1024] = "sweep:\n";
    for (int a = 0; a < 5; a++) {
        char line[128];
        snprintf(line, sizeof line, "  x.a%d: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n", a);
        strcat(text, line);
    }
    root = load(text);
    expect_msg(ttt_cfg_sweep_expand(root, &pts, &labels, &n, &e), &e, TTT_ERR_RANGE,
               "exp.yaml:2:3: sweep: 10 x 10 x 10 x 10 x 10 combinations is too many",
               "at most 10000", NULL);
    ttt_cfg_free(root);
}
END_TEST

/* ---- writing ---- */

START_TEST(test_write_format) {
    const char *text = "name: x\n"
                       "task:\n"
                       "  kind: memory\n"
                       "  pairs: [16, 32]\n"
                       "layer:\n"
                       "  optimizer:\n"
                       "    name: sgd\n"
                       "    lr: 0.1\n"
                       "maps:\n"
                       "  - a: 1\n"
                       "    b: 2\n"
                       "  - c\n"
                       "  - [1, 2]\n"
                       "empty: []\n"
                       "none: {}\n"
                       "nothing: null\n"
                       "quoted: \"64\"\n"
                       "sweep:\n"
                       "  layer.mini_batch: [1, 16]\n";
    ttt_cfg_node *root = load(text);
    char *out = write_to_string(root);
    ck_assert_str_eq(out, text);
    free(out);
    ttt_cfg_free(root);
}
END_TEST

START_TEST(test_write_roundtrip) {
    const char *text = "name: \"demo run\"\n"
                       "n: 5\n"
                       "s: \"64\"\n"
                       "t: 'true'\n"
                       "o: 'off'\n"
                       "nul: 'null'\n"
                       "f: '1e-3'\n"
                       "neg: -3\n"
                       "plain: hello world\n"
                       "colon: \"a: b\"\n"
                       "url: http://x.org/a#b\n"
                       "hash: \"x #y\"\n"
                       "end: 'ends with:'\n"
                       "empty: \"\"\n"
                       "nothing: ~\n"
                       "dash: \"- x\"\n"
                       "lone: '-'\n"
                       "at: \"@home\"\n"
                       "star: '*x'\n"
                       "bang: '!x'\n"
                       "quote: 'it''s \"fine\"'\n"
                       "space: ' padded '\n"
                       "doc: '--- x'\n"
                       "multi: |\n"
                       "  line one\n"
                       "  line two\n"
                       "uni: \"h\xc3\xa9llo\"\n"
                       "esc: \"tab\\there\\u0001\"\n"
                       "breaks: \"a\\Lb\\Nc\"\n"
                       "list: [1, 2, 3]\n"
                       "strs: [\"a,b\", \"[x]\", plain, 'c: d', \"{y}\", '']\n"
                       "emptylist: []\n"
                       "emptymap: {}\n"
                       "maps:\n"
                       "  - name: sgd\n"
                       "    lr: 0.1\n"
                       "  - name: momentum\n"
                       "    inner: {a: [1, {b: 2}]}\n"
                       "  - []\n"
                       "nested: [[1, 2], [3]]\n"
                       "deep:\n"
                       "  a:\n"
                       "    b:\n"
                       "      c: 1\n"
                       "\"dotted.key\": 1\n"
                       "\"key: with colon\": 2\n"
                       "'true': 3\n"
                       "'~': 4\n"
                       "long: [100000, 100001, 100002, 100003, 100004, 100005, 100006, 100007, "
                       "100008, 100009, 100010, 100011, 100012, 100013]\n";
    ttt_cfg_node *a = load(text);
    char *out = write_to_string(a);
    ttt_error e;
    ttt_cfg_node *b = NULL;
    ttt_status s = ttt_cfg_load_string(out, "written.yaml", &b, &e);
    ck_assert_msg(s == TTT_OK, "reload failed: %s\n--- written ---\n%s", e.msg, out);
    ck_assert_msg(tree_equal(a, b), "round trip changed the tree:\n%s", out);
    /* Spot checks that quoting kept the meaning. */
    ck_assert_int_eq(path(b, "s")->quoted, 1);
    ck_assert_int_eq(path(b, "n")->quoted, 0);
    assert_scalar(path(b, "nul"), "null");
    ck_assert_ptr_null(path(b, "nothing")->scalar);
    assert_scalar(path(b, "esc"), "tab\there\x01");
    assert_scalar(path(b, "breaks"), "a\xe2\x80\xa8" "b\xc2\x85" "c");
    assert_scalar(path(b, "multi"), "line one\nline two\n");
    assert_scalar(path(b, "quote"), "it's \"fine\"");
    assert_scalar(path(b, "space"), " padded ");
    assert_scalar(ttt_cfg_get(b, "~"), "4");
    ck_assert_int_eq(path(b, "long")->n, 14);
    /* Plain strings stay unquoted. */
    ck_assert_ptr_nonnull(strstr(out, "\nplain: hello world\n"));
    ck_assert_ptr_nonnull(strstr(out, "\nurl: http://x.org/a#b\n"));
    ck_assert_msg(strncmp(out, "name: demo run\n", 15) == 0, "%s", out);
    /* Writing is stable: write(load(write(x))) == write(x). */
    char *out2 = write_to_string(b);
    ck_assert_str_eq(out, out2);
    free(out);
    free(out2);
    ttt_cfg_free(a);
    ttt_cfg_free(b);
}
END_TEST

START_TEST(test_to_flow) {
    ttt_cfg_node *root = load("o: {name: sgd, lr: 0.1}\nl: [\"a,b\", 2, [x]]\ns: \"5\"\nn: ~\n");
    char *f = ttt_cfg_to_flow(path(root, "o"));
    ck_assert_str_eq(f, "{name: sgd, lr: 0.1}");
    free(f);
    f = ttt_cfg_to_flow(path(root, "l"));
    ck_assert_str_eq(f, "[\"a,b\", 2, [x]]");
    free(f);
    f = ttt_cfg_to_flow(path(root, "s"));
    ck_assert_str_eq(f, "\"5\"");
    free(f);
    f = ttt_cfg_to_flow(path(root, "n"));
    ck_assert_str_eq(f, "null");
    free(f);
    ttt_cfg_free(root);
}
END_TEST

static Suite *config_suite(void) {
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("load");
    tcase_add_test(tc, test_locations);
    tcase_add_test(tc, test_scalar_styles);
    tcase_add_test(tc, test_conversions);
    tcase_add_test(tc, test_files);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_top_level);
    tcase_add_test(tc, test_duplicate_key);
    tcase_add_test(tc, test_aliases);
    tcase_add_test(tc, test_tree_editing);
    suite_add_tcase(s, tc);

    tc = tcase_create("schema");
    tcase_add_test(tc, test_check_defaults);
    tcase_add_test(tc, test_check_given);
    tcase_add_test(tc, test_check_errors);
    tcase_add_test(tc, test_check_name);
    tcase_add_test(tc, test_closest_name);
    suite_add_tcase(s, tc);

    /* Separate so that CK_FORK=no runs can exclude it (it must abort). */
    tc = tcase_create("asserts");
    tcase_add_test_raise_signal(tc, test_getter_asserts, SIGABRT);
    suite_add_tcase(s, tc);

    tc = tcase_create("overrides");
    tcase_add_test(tc, test_set_values);
    tcase_add_test(tc, test_set_errors);
    tcase_add_test(tc, test_set_sweep);
    tcase_add_test(tc, test_sweep_expand);
    tcase_add_test(tc, test_sweep_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("write");
    tcase_add_test(tc, test_write_format);
    tcase_add_test(tc, test_write_roundtrip);
    tcase_add_test(tc, test_to_flow);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(config_suite()); }
