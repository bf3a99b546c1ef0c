/* Runs a researcher can reproduce and configurations that say what they mean: --set against a
 * sweep that covers it, hints for mis-indented sections and for axes that only some values take,
 * `ttt check --brief`, `ttt list`'s columns, and the run folder's provenance.json
 * (docs/training.md "Provenance"). Every test runs the real program (TTT_BIN). */
#define _GNU_SOURCE
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Run `ttt <fmt…>`; returns the exit code, stdout and stderr in *out / *err (caller frees). */
static int run(char **out, char **err, const char *fmt, const char *a, const char *b) {
    char *args;
    ck_assert(asprintf(&args, fmt, a, b) > 0);
    int rc = tu_run_ttt(args, out, err);
    free(args);
    return rc;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

static const char *optimizers =
    "task: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8, trials: 1}\n"
    "layer: {preset: deltanet}\n"
    "sweep:\n"
    "  layer.optimizer:\n"
    "    - {name: sgd, lr: 1.0}\n"
    "    - {name: momentum, lr: 0.1, momentum: 0.9}\n"
    "    - {name: muon, lr: 0.5}\n";

/* An override inside a swept mapping is pinned in every point; before, each point's mapping
 * replaced it and the three points kept lr 1.0, 0.1 and 0.5. */
START_TEST(set_inside_a_swept_mapping_applies_to_every_point) {
    char *cfg = tu_dir_write("opt.yaml", optimizers), *out, *err;
    int rc = run(&out, &err, "check %s --brief --set layer.optimizer.lr=0.25", cfg, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    /* each point's label is its axis value with the override inside */
    ck_assert_msg(strstr(out, "layer.optimizer={name: sgd, lr: 0.25}") &&
                      strstr(out, "layer.optimizer={name: momentum, lr: 0.25, momentum: 0.9}") &&
                      strstr(out, "layer.optimizer={name: muon, lr: 0.25}"),
                  "%s", out);
    free(out), free(err), free(cfg);
}
END_TEST

/* An override that would make the values of a covering axis the same is an error naming the
 * axis and how to choose one value of it (before: every value ran, the override lost). */
START_TEST(set_that_collapses_an_axis_is_refused) {
    char *cfg = tu_dir_write("layers.yaml",
                           "task: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8, "
                           "trials: 1}\nsweep:\n  layer:\n    - {preset: deltanet}\n"
                           "    - {preset: gated_deltanet}\n    - {preset: linear_attention}\n"),
         *out, *err;
    int rc = run(&out, &err, "check %s --set layer.preset=deltanet", cfg, NULL);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "sweep axis 'layer'") && strstr(err, "layers.yaml:4:") &&
                      strstr(err, "--set 'sweep.layer=[{preset: deltanet}]'"),
                  "%s", err);
    free(out), free(err);
    /* a covering axis of plain values cannot hold a key at all */
    char *cfg2 = tu_dir_write("scalar.yaml",
                            "task: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8, "
                            "trials: 1}\nlayer: {preset: deltanet}\nsweep:\n"
                            "  layer.optimizer: [sgd, momentum]\n");
    rc = run(&out, &err, "check %s --set layer.optimizer.lr=0.5", cfg2, NULL);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "sweep axis 'layer.optimizer'") && strstr(err, "would be lost"),
                  "%s", err);
    free(out), free(err), free(cfg), free(cfg2);
}
END_TEST

/* A typo in an override is about the override: no "(in sweep point …)" after it. */
START_TEST(set_typo_names_no_sweep_point) {
    char *cfg = tu_dir_write("opt.yaml", optimizers), *out, *err;
    int rc = run(&out, &err, "check %s --set layer.mini_bach=4", cfg, NULL);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "did you mean 'mini_batch'") && !strstr(err, "in sweep point"),
                  "%s", err);
    free(out), free(err), free(cfg);
}
END_TEST

START_TEST(empty_or_unindented_sections_are_named) {
    char *cfg = tu_dir_write("empty.yaml", "task: {kind: memory, pairs: [4], key_dim: 8, "
                                         "value_dim: 8, trials: 1}\nlayer:\n  preset: deltanet\n"
                                         "  optimizer:\n  name: momentum\n"),
         *out, *err;
    int rc = run(&out, &err, "check %s", cfg, NULL);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "empty.yaml:4:") && strstr(err, "layer.optimizer: the value is "
                                                              "empty") &&
                      strstr(err, "indent them under 'optimizer:'"),
                  "%s", err);
    free(out), free(err);
    char *cfg2 = tu_dir_write("train.yaml", "task: {kind: memory, pairs: [4], key_dim: 8, "
                                          "value_dim: 8, trials: 1}\ntrain:\nlr: 3\n");
    rc = run(&out, &err, "check %s", cfg2, NULL);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "train.yaml:3:1: unknown key 'lr'") &&
                      strstr(err, "'train' at ") && strstr(err, "indent it under 'train:'"),
                  "%s", err);
    free(out), free(err), free(cfg), free(cfg2);
}
END_TEST

/* Sweeping the name and an option only some names take: the hint says to sweep mappings. */
START_TEST(independent_axes_hint_at_a_list_of_mappings) {
    char *cfg = tu_dir_write("axes.yaml", "task: {kind: memory, pairs: [4], key_dim: 8, "
                                        "value_dim: 8, trials: 1}\nlayer: {preset: deltanet}\n"
                                        "sweep:\n  layer.optimizer.name: [sgd, momentum]\n"
                                        "  layer.optimizer.momentum: [0.5]\n"),
         *out, *err;
    int rc = run(&out, &err, "check %s", cfg, NULL);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "unknown key 'momentum'") &&
                      strstr(err, "sweep one list of mappings instead"),
                  "%s", err);
    free(out), free(err), free(cfg);
}
END_TEST

START_TEST(check_brief_prints_one_line_per_point) {
    char *cfg = tu_dir_write("opt.yaml", optimizers), *out, *err;
    int rc = run(&out, &err, "check %s --brief", cfg, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    int lines = count(out, "\n");
    ck_assert_msg(lines == 1 + 3 + 1, "%d lines:\n%s", lines, out); /* header, 3 points, folder */
    ck_assert_msg(strstr(out, "layer.optimizer={name: momentum, lr: 0.1, momentum: 0.9}") &&
                      strstr(out, "memory"),
                  "%s", out);
    free(out), free(err), free(cfg);
}
END_TEST

/* `ttt list`: within each block of options the "default" column starts at one position, and
 * ranges print integers in full. */
START_TEST(list_columns_align_and_ranges_are_plain) {
    char *out, *err;
    int rc = run(&out, &err, "list", NULL, NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(!strstr(out, "e+0"), "a range in exponent form");
    ck_assert(strstr(out, "[1, 1048576]")); /* layer.chunk's bound */
    int col = -1, checked = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        const char *d = strstr(line, " default ");
        if (!d || strncmp(line, "      ", 6) != 0) { /* a line outside an option block */
            col = -1;
            continue;
        }
        const int c = (int)(d - line);
        if (col >= 0) ck_assert_msg(c == col, "misaligned: %s", line);
        col = c;
        checked++;
    }
    ck_assert_int_gt(checked, 20);
    free(out), free(err);
}
END_TEST

START_TEST(run_folder_records_its_provenance) {
    char *cfg = tu_dir_write("opt.yaml", optimizers), *out, *err;
    char *outdir;
    ck_assert(asprintf(&outdir, "%s/run", tu_dir) > 0);
    int rc = run(&out, &err, "run %s --out %s --quiet --set layer.mini_batch=2", cfg, outdir);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    char p[600];
    snprintf(p, sizeof p, "%s/provenance.json", outdir);
    char *j = tu_read_file(p);
    ck_assert_ptr_nonnull(j);
    const char *keys[] = {"\"version\": \"" TTT_VERSION "\"", "\"git_commit\": ", "\"git_dirty\": ",
                          "\"compiler\": ", "\"build_flags\": ", "\"host\": ", "\"cpu_model\": ",
                          "\"openmp_max_threads\": ", "\"OPENBLAS_NUM_THREADS\": \"1\"",
                          "\"blas\": \"", "\"blas_core\": \"", "\"blas_threads\": ",
                          "\"sets\": [\"layer.mini_batch=2\"]", "\"outcome\": \"complete\""};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        ck_assert_msg(strstr(j, keys[i]), "no %s in\n%s", keys[i], j);
    /* the command line as given, argument by argument */
    ck_assert_msg(strstr(j, "\"run\", ") && strstr(j, "\"--set\", \"layer.mini_batch=2\""), "%s", j);
    /* a 40-digit commit (this suite runs from a git checkout) or "unknown" outside one */
    regex_t re;
    ck_assert_int_eq(regcomp(&re, "\"git_commit\": \"([0-9a-f]{40}|unknown)\"", REG_EXTENDED), 0);
    ck_assert_msg(regexec(&re, j, 0, NULL, 0) == 0, "%s", j);
    regfree(&re);
    /* started and ended are ISO 8601 UTC times, ended not before started */
    char started[32] = "", ended[32] = "";
    const char *s = strstr(j, "\"started\": \""), *e = strstr(j, "\"ended\": \"");
    ck_assert(s && e);
    sscanf(s + 12, "%20[^\"]", started);
    sscanf(e + 10, "%20[^\"]", ended);
    ck_assert_int_eq((int)strlen(started), 20);
    ck_assert_msg(strcmp(started, ended) <= 0, "%s > %s", started, ended);
    free(j), free(out), free(err), free(cfg), free(outdir);
}
END_TEST

static Suite *repro_suite(void) {
    Suite *s = suite_create("repro");
    TCase *tc = tcase_create("repro");
    tcase_add_checked_fixture(tc, tu_dir_setup, tu_dir_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, set_inside_a_swept_mapping_applies_to_every_point);
    tcase_add_test(tc, set_that_collapses_an_axis_is_refused);
    tcase_add_test(tc, set_typo_names_no_sweep_point);
    tcase_add_test(tc, empty_or_unindented_sections_are_named);
    tcase_add_test(tc, independent_axes_hint_at_a_list_of_mappings);
    tcase_add_test(tc, check_brief_prints_one_line_per_point);
    tcase_add_test(tc, list_columns_align_and_ranges_are_plain);
    tcase_add_test(tc, run_folder_records_its_provenance);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(repro_suite()); }
