/* The ttt program end to end: commands, run folders, and one clear message per bad input with
 * a non-zero exit and nothing written. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static char *dir;

static void setup(void) { dir = tu_mkdtemp(); }
static void teardown(void) {
    tu_rmtree(dir);
    free(dir);
}

static char *write_yaml(const char *name, const char *text) {
    char *path;
    ck_assert(asprintf(&path, "%s/%s", dir, name) > 0);
    ck_assert_int_eq(tu_write_file(path, text), 0);
    return path;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static const char *small =
    "name: small\n"
    "task:\n"
    "  kind: memory\n"
    "  pairs: [4, 8]\n"
    "  key_dim: 8\n"
    "  value_dim: 8\n"
    "  trials: 1\n"
    "layer:\n"
    "  optimizer: {name: sgd}\n"
    "sweep:\n"
    "  layer.preset: [linear_attention, deltanet]\n";

START_TEST(run_writes_a_complete_run_folder) {
    char *cfg = write_yaml("small.yaml", small), *args, *out, *err;
    ck_assert(asprintf(&args, "run %s --out %s/run --quiet", cfg, dir) > 0);
    int rc = tu_run_ttt(args, &out, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    const char *files[] = {"config.resolved.yaml", "metrics.jsonl", "summary.csv",
                           "accuracy.svg", "recall_error.svg", "index.html"};
    for (int i = 0; i < 6; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/run/%s", dir, files[i]);
        ck_assert_msg(exists(p), "missing %s", p);
    }
    char p[512];
    snprintf(p, sizeof p, "%s/run/metrics.jsonl", dir);
    char *m = tu_read_file(p);
    int lines = 0;
    for (char *c = m; *c; c++) lines += *c == '\n';
    ck_assert_int_eq(lines, 4); /* 2 presets × 2 values of N */
    ck_assert(strstr(m, "\"layer\":\"deltanet\"") || strstr(m, "\"layer\": \"deltanet\""));
    free(m);
    snprintf(p, sizeof p, "%s/run/config.resolved.yaml", dir);
    m = tu_read_file(p);
    ck_assert_msg(strstr(m, "decay_placement") && strstr(m, "trials: 1"), "%s", m);
    free(m);
    /* no temporary files left behind */
    char *cmd;
    ck_assert(asprintf(&cmd, "ls -A %s/run | grep -c tmp", dir) > 0);
    FILE *f = popen(cmd, "r");
    int n = -1;
    ck_assert(fscanf(f, "%d", &n) == 1);
    pclose(f);
    ck_assert_int_eq(n, 0);
    /* the table shows each swept key once: `layer.preset`, not also the task's `layer` column,
     * which holds the same names */
    const size_t hl = strcspn(out, "\n");
    char *header = strndup(out, hl);
    ck_assert_msg(strncmp(header, "layer.preset  ", 14) == 0, "%s", out);
    int layer_cols = 0;
    for (char *t = strtok(header, " "); t; t = strtok(NULL, " "))
        layer_cols += strcmp(t, "layer") == 0;
    ck_assert_msg(layer_cols == 0, "the swept key is shown twice:\n%s", out);
    free(header);
    free(cmd), free(args), free(out), free(err), free(cfg);
}
END_TEST

/* A task column that differs from the swept key is kept: with layer.optimizer.lr swept, the
 * task's `layer` column (the preset) says something the axis does not. */
START_TEST(the_table_keeps_a_task_column_that_says_more) {
    char *cfg = write_yaml("lr.yaml", "name: lr\n"
                                      "task: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8, "
                                      "trials: 1}\n"
                                      "layer: {preset: deltanet}\n"
                                      "sweep: {layer.optimizer.lr: [0.5, 1.0]}\n");
    char *args, *out = NULL, *err = NULL;
    ck_assert(asprintf(&args, "run %s --out %s/lr --quiet", cfg, dir) > 0);
    ck_assert_int_eq(tu_run_ttt(args, &out, &err), 0);
    ck_assert_msg(strstr(out, "lr  ") && strstr(out, "  layer  "), "%s", out);
    free(args), free(out), free(err), free(cfg);
}
END_TEST

/* The lm task's corpus is read when the plan is built: `ttt check` refuses a missing one,
 * located at task.path, as the run would (before, check passed and the run failed). */
START_TEST(check_refuses_a_missing_lm_corpus) {
    char *err = NULL;
    int rc = tu_run_ttt("check experiments/lm.yaml --set task.path=/nonexistent/corpus.txt",
                        NULL, &err);
    ck_assert_msg(rc != 0 && err && strstr(err, "--set task.path=/nonexistent/corpus.txt: "
                                                "task.path: ") &&
                      strstr(err, "No such file or directory"),
                  "exit %d: %s", rc, err ? err : "");
    free(err);
    /* a FIFO is refused, not opened (the open would wait for a writer forever) */
    char *fifo, *cmd;
    ck_assert(asprintf(&fifo, "%s/corpus.fifo", dir) > 0);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    const char *bin = getenv("TTT_BIN");
    ck_assert(asprintf(&cmd, "timeout 60 %s check experiments/lm.yaml --set task.path=%s "
                             ">/dev/null 2>%s/fifo.err", bin ? bin : "build/ttt", fifo, dir) > 0);
    const int st = system(cmd);
    char *ferr;
    ck_assert(asprintf(&ferr, "%s/fifo.err", dir) > 0);
    char *msg = tu_read_file(ferr);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1 && msg &&
                      strstr(msg, "task.path: lm: '") && strstr(msg, "is not a regular file"),
                  "status %d: %s", st, msg ? msg : "");
    free(fifo), free(cmd), free(ferr), free(msg);
    /* and the shipped experiment finds the corpus CI installs (.ci/deps: dasher-data) */
    ck_assert_int_eq(tu_run_ttt("check experiments/lm.yaml", NULL, NULL), 0);
}
END_TEST

/* Each bad input: exit code 2, one message with file:line:col and what was expected, and the
 * run folder is not created. */
static void expect_error(const char *yaml, const char *extra_args, const char *want1,
                         const char *want2) {
    char *cfg = write_yaml("bad.yaml", yaml), *args, *out, *err;
    ck_assert(asprintf(&args, "run %s --out %s/badrun --quiet %s", cfg, dir, extra_args) > 0);
    int rc = tu_run_ttt(args, &out, &err);
    ck_assert_msg(rc == 2, "exit %d for %s: %s", rc, yaml, err);
    ck_assert_msg(strstr(err, want1) != NULL, "wanted '%s' in: %s", want1, err);
    if (want2) ck_assert_msg(strstr(err, want2) != NULL, "wanted '%s' in: %s", want2, err);
    char p[512];
    snprintf(p, sizeof p, "%s/badrun", dir);
    ck_assert_msg(!exists(p), "a run folder was written for an invalid config");
    free(cfg), free(args), free(out), free(err);
}

START_TEST(unknown_key) {
    expect_error("task:\n  kind: memory\n  pairz: [4]\n", "", "bad.yaml:3:3", "did you mean 'pairs'");
}
END_TEST
START_TEST(wrong_type) {
    expect_error("task:\n  kind: memory\n  key_dim: sixty\n", "", "bad.yaml:3:12", "integer");
}
END_TEST
START_TEST(out_of_range) {
    expect_error("task:\n  kind: memory\n  key_dim: 0\n", "", "bad.yaml:3:12", "range");
}
END_TEST
START_TEST(unknown_optimizer) {
    expect_error("task: {kind: memory}\nlayer:\n  optimizer: {name: sdg}\n", "", "bad.yaml:3:21",
                 "'sgd'");
}
END_TEST
START_TEST(unknown_task) {
    expect_error("task:\n  kind: memroy\n", "", "bad.yaml:2:9", "'memory'");
}
END_TEST
START_TEST(unknown_model_and_loss) {
    expect_error("task: {kind: memory}\nlayer: {model: linaer}\n", "", "bad.yaml:2:16", "'linear'");
    expect_error("task: {kind: memory}\nlayer: {loss: squred}\n", "", "bad.yaml:2:15", "'squared'");
}
END_TEST
START_TEST(malformed_yaml) {
    expect_error("task:\n  kind: memory\n  pairs: [4, 8\n", "", "bad.yaml:", NULL);
}
END_TEST
START_TEST(bad_sweep_value) {
    expect_error("task: {kind: memory}\nsweep:\n  layer.preset: [deltanet, retnett]\n", "",
                 "bad.yaml:3:28", "'retnet'");
}
END_TEST
START_TEST(bad_override) {
    expect_error("task: {kind: memory}\n", "--set task.key_dim=big", "--set task.key_dim=big",
                 "integer");
    expect_error("task: {kind: memory}\n", "--set nokey", "--set", NULL);
}
END_TEST

START_TEST(missing_file) {
    char *args, *out, *err;
    ck_assert(asprintf(&args, "run %s/nope.yaml --out %s/badrun", dir, dir) > 0);
    int rc = tu_run_ttt(args, &out, &err);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "nope.yaml") && strstr(err, "No such file"), "%s", err);
    free(args), free(out), free(err);
}
END_TEST

START_TEST(check_prints_every_default_and_applies_overrides) {
    char *cfg = write_yaml("c.yaml", "task: {kind: memory}\nlayer: {preset: deltanet}\n"), *args,
         *out, *err;
    ck_assert(asprintf(&args, "check %s --set task.key_dim=16 --set layer.optimizer.lr=0.5", cfg) > 0);
    int rc = tu_run_ttt(args, &out, &err);
    ck_assert_msg(rc == 0, "%s", err);
    const char *want[] = {"key_dim: 16", "value_dim: 64", "trials: 4", "overwrite: false",
                          "loss: squared", "lr: 0.5", "form: auto", "mini_batch: 1",
                          "seed: 0", "output: runs/c"};
    for (int i = 0; i < 10; i++) ck_assert_msg(strstr(out, want[i]), "no '%s' in:\n%s", want[i], out);
    free(cfg), free(args), free(out), free(err);
}
END_TEST

START_TEST(set_pins_a_swept_key) {
    char *cfg = write_yaml("small.yaml", small), *args, *out, *err;
    ck_assert(asprintf(&args, "check %s --set layer.preset=deltanet", cfg) > 0);
    int rc = tu_run_ttt(args, &out, &err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_msg(strstr(err, "1 run point") != NULL, "%s", err);
    free(args), free(out), free(err);
    ck_assert(asprintf(&args, "check %s", cfg) > 0);
    rc = tu_run_ttt(args, &out, &err);
    ck_assert_msg(strstr(err, "2 run points") != NULL, "%s", err);
    free(cfg), free(args), free(out), free(err);
}
END_TEST

START_TEST(list_help_version) {
    char *out, *err;
    ck_assert_int_eq(tu_run_ttt("list", &out, &err), 0);
    const char *want[] = {"sgd", "linear", "dot", "squared", "linear_attention", "deltanet",
                          "memory", "decay_placement", "pairs"};
    for (int i = 0; i < 9; i++) ck_assert_msg(strstr(out, want[i]), "list lacks %s", want[i]);
    free(out), free(err);
    ck_assert_int_eq(tu_run_ttt("--help", &out, &err), 0);
    ck_assert(strstr(out, "usage: ttt"));
    free(out), free(err);
    ck_assert_int_eq(tu_run_ttt("--version", &out, &err), 0);
    ck_assert(strncmp(out, "ttt ", 4) == 0);
    free(out), free(err);
    ck_assert_int_eq(tu_run_ttt("runn x.yaml", &out, &err), 2);
    ck_assert_msg(strstr(err, "did you mean 'run'"), "%s", err);
    free(out), free(err);
}
END_TEST

/* Every experiment file shipped in experiments/ is valid (tests run from the source tree). */
START_TEST(shipped_experiments_are_valid) {
    FILE *f = popen("ls experiments/*.yaml", "r");
    ck_assert_ptr_nonnull(f);
    char path[512];
    int n = 0;
    while (fgets(path, sizeof path, f)) {
        path[strcspn(path, "\n")] = '\0';
        char *args, *out, *err;
        ck_assert(asprintf(&args, "check %s", path) > 0);
        int rc = tu_run_ttt(args, &out, &err);
        ck_assert_msg(rc == 0, "%s: %s", path, err);
        free(args), free(out), free(err);
        n++;
    }
    pclose(f);
    ck_assert_int_ge(n, 1);
}
END_TEST

/* export and logits share one argument parser: each usage error exits 2 naming the command and
 * what it needs, before any run folder is read. */
START_TEST(export_and_logits_usage_errors) {
    const struct {
        const char *args, *want;
    } cases[] = {
        {"export", "export needs RUN_DIR OUT.safetensors"},
        {"export a", "export needs RUN_DIR OUT.safetensors"},
        {"export a b c", "export: unexpected argument 'c'"},
        {"export a b --zz", "export: unknown option or missing value '--zz'"},
        {"export a b --point -1", "--point needs a point index >= 0, not '-1'"},
        {"logits a b", "logits needs RUN_DIR IN.safetensors OUT.safetensors"},
        {"logits a b c d", "logits: unexpected argument 'd'"},
        {"logits a b c --point x", "--point needs a point index >= 0, not 'x'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *err = NULL;
        int rc = tu_run_ttt(cases[i].args, NULL, &err);
        ck_assert_msg(rc == 2 && err && strstr(err, cases[i].want),
                      "ttt %s: exit %d, wanted 2 and '%s': %s", cases[i].args, rc, cases[i].want,
                      err ? err : "");
        free(err);
    }
}
END_TEST

static Suite *cli_suite(void) {
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, run_writes_a_complete_run_folder);
    tcase_add_test(tc, unknown_key);
    tcase_add_test(tc, wrong_type);
    tcase_add_test(tc, out_of_range);
    tcase_add_test(tc, unknown_optimizer);
    tcase_add_test(tc, unknown_task);
    tcase_add_test(tc, unknown_model_and_loss);
    tcase_add_test(tc, malformed_yaml);
    tcase_add_test(tc, bad_sweep_value);
    tcase_add_test(tc, bad_override);
    tcase_add_test(tc, missing_file);
    tcase_add_test(tc, check_prints_every_default_and_applies_overrides);
    tcase_add_test(tc, set_pins_a_swept_key);
    tcase_add_test(tc, list_help_version);
    tcase_add_test(tc, shipped_experiments_are_valid);
    tcase_add_test(tc, export_and_logits_usage_errors);
    tcase_add_test(tc, the_table_keeps_a_task_column_that_says_more);
    tcase_add_test(tc, check_refuses_a_missing_lm_corpus);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(cli_suite()); }
