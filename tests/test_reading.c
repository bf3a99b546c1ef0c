/* Reading results (docs/results.md): the swept keys are columns of summary.csv, metrics.jsonl and
 * the printed table (a mapping-valued axis by its leaves); `seeds: N` runs each point N times and
 * summary.csv holds mean, std, min and max over them (recomputed here from summary_seeds.csv);
 * the seeds are points for --shard jobs and merge; `ttt compare` puts runs side by side and
 * refuses what it cannot compare. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compare.h"
#include "experiment.h"
#include "plan.h"
#include "results.h"
#include "testutil.h"

static char *g_dir;

static void setup(void) { g_dir = tu_mkdtemp(); }
static void teardown(void) {
    tu_rmtree(g_dir);
    free(g_dir);
}

/* ---- a small CSV reader (RFC 4180 quotes: series labels hold commas) ---- */

typedef struct csv {
    int rows, cols;
    char ***cell; /* [rows + 1][cols]: row 0 is the header */
} csv;

static char *csv_cell_next(const char **p, int *end_of_line) {
    const char *s = *p;
    char *out = malloc(strlen(s) + 1);
    size_t n = 0;
    if (*s == '"') {
        for (s++; *s; s++) {
            if (*s == '"' && s[1] == '"') s++;
            else if (*s == '"') {
                s++;
                break;
            }
            out[n++] = *s;
        }
    } else {
        while (*s && *s != ',' && *s != '\n') out[n++] = *s++;
    }
    out[n] = '\0';
    *end_of_line = *s != ',';
    *p = *s ? s + 1 : s;
    return out;
}

static csv csv_read(const char *path) {
    char *text = tu_read_file(path);
    ck_assert_msg(text != NULL, "no %s", path);
    csv c = {0};
    const char *p = text;
    while (*p) {
        c.cell = realloc(c.cell, (size_t)(c.rows + 1) * sizeof *c.cell);
        char **row = NULL;
        int n = 0, eol = 0;
        while (!eol) {
            row = realloc(row, (size_t)(n + 1) * sizeof *row);
            row[n++] = csv_cell_next(&p, &eol);
        }
        if (c.rows == 0) c.cols = n;
        ck_assert_msg(n == c.cols, "%s: row %d has %d cells, the header %d", path, c.rows, n, c.cols);
        c.cell[c.rows++] = row;
    }
    c.rows--; /* the header */
    free(text);
    return c;
}

static void csv_free(csv *c) {
    for (int r = 0; r <= c->rows; r++) {
        for (int k = 0; k < c->cols; k++) free(c->cell[r][k]);
        free(c->cell[r]);
    }
    free(c->cell);
}

static int csv_col(const csv *c, const char *name) {
    for (int k = 0; k < c->cols; k++)
        if (strcmp(c->cell[0][k], name) == 0) return k;
    return -1;
}

/* The cell of data row r (0-based) in column `name` ("" when empty; the test fails when the
 * column is missing). */
static const char *at(const csv *c, int r, const char *name) {
    int k = csv_col(c, name);
    ck_assert_msg(k >= 0, "no column %s", name);
    return c->cell[r + 1][k];
}

static double num(const csv *c, int r, const char *name) { return strtod(at(c, r, name), NULL); }

/* Run YAML text into g_dir/<out>; the printed table is returned (malloc'd). */
static char *run_yaml(const char *yaml, const char *out) {
    char path[512], dir[512];
    snprintf(path, sizeof path, "%s/%s.yaml", g_dir, out);
    snprintf(dir, sizeof dir, "%s/%s", g_dir, out);
    ck_assert_int_eq(tu_write_file(path, yaml), 0);
    ttt_error err = {0};
    ttt_experiment *e = NULL;
    ck_assert_msg(ttt_experiment_load(path, NULL, 0, &e, &err) == TTT_OK, "%s", err.msg);
    char *table = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&table, &len);
    ck_assert_msg(ttt_experiment_run(e, dir, 0, f, &err) == TTT_OK, "%s", err.msg);
    fclose(f);
    ttt_experiment_free(e);
    return table;
}

static csv read_in(const char *out, const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", g_dir, out, file);
    return csv_read(path);
}

/* ---- columns ---- */

static const char *const TWO_AXES =
    "seed: 1\n"
    "task: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8, trials: 1}\n"
    "layer: {preset: deltanet}\n"
    "sweep:\n"
    "  task.key_dim: [8, 16]\n"
    "  layer.optimizer:\n"
    "    - {name: sgd, lr: 0.1}\n"
    "    - {name: momentum, lr: 0.5, momentum: 0.8}\n";

/* Two axes, one of them a list of mappings: summary.csv has a column per swept key path and per
 * leaf of the mappings, each row the values of its point (the first axis slowest); a leaf a
 * point does not have (sgd's momentum) is empty; metrics.jsonl carries the same columns; the
 * printed table heads them by short names and leaves out `series`. */
START_TEST(swept_keys_are_columns) {
    char *table = run_yaml(TWO_AXES, "cols");
    csv c = read_in("cols", "summary.csv");
    ck_assert_int_eq(c.rows, 4);
    const double key_dim[4] = {8, 8, 16, 16}, lr[4] = {0.1, 0.5, 0.1, 0.5};
    const char *name[4] = {"sgd", "momentum", "sgd", "momentum"};
    const char *momentum[4] = {"", "0.8", "", "0.8"};
    for (int r = 0; r < 4; r++) {
        ck_assert_double_eq(num(&c, r, "task.key_dim"), key_dim[r]);
        ck_assert_double_eq(num(&c, r, "d_k"), key_dim[r]); /* what the point measured */
        ck_assert_str_eq(at(&c, r, "layer.optimizer.name"), name[r]);
        ck_assert_double_eq(num(&c, r, "layer.optimizer.lr"), lr[r]);
        ck_assert_str_eq(at(&c, r, "layer.optimizer.momentum"), momentum[r]);
    }
    /* the swept columns come first, in the sweep's order */
    ck_assert_str_eq(c.cell[0][0], "task.key_dim");
    ck_assert_str_eq(c.cell[0][1], "layer.optimizer.name");
    ck_assert_str_eq(c.cell[0][2], "layer.optimizer.lr");
    ck_assert_str_eq(c.cell[0][3], "layer.optimizer.momentum");
    csv_free(&c);

    char path[512];
    snprintf(path, sizeof path, "%s/cols/metrics.jsonl", g_dir);
    char *m = tu_read_file(path);
    ck_assert_msg(strstr(m, "{\"task.key_dim\":8,\"layer.optimizer.name\":\"sgd\","
                            "\"layer.optimizer.lr\":0.1,"), "%s", m);
    ck_assert_msg(strstr(m, "\"layer.optimizer.momentum\":0.8"), "%s", m);
    free(m);

    const char *nl = strchr(table, '\n');
    ck_assert_ptr_nonnull(nl);
    char head[512];
    snprintf(head, sizeof head, "%.*s", (int)(nl - table), table);
    ck_assert_msg(strncmp(head, "task.key_dim", 12) == 0, "%s", head);
    ck_assert_msg(strstr(head, "optimizer.name") && strstr(head, "optimizer.lr") &&
                  strstr(head, "optimizer.momentum"), "%s", head);
    ck_assert_msg(!strstr(head, "series"), "%s", head);
    /* the second row: key_dim 8, momentum, lr 0.5, momentum 0.8 */
    const char *row2 = strchr(nl + 1, '\n') + 1;
    ck_assert_msg(strncmp(row2, "8 ", 2) == 0 && strstr(row2, "momentum") &&
                  strstr(row2, "0.5") && strstr(row2, "0.8"), "%s", row2);
    free(table);
}
END_TEST

/* ---- seeds ---- */

static const char *const SEEDS =
    "seed: 4\n"
    "seeds: 3\n"
    "task: {kind: memory, pairs: [8, 32], key_dim: 8, value_dim: 8, trials: 1}\n"
    "layer: {preset: linear_attention}\n"
    "sweep: {task.key_dim: [8, 16]}\n";

/* mean, sample std (n − 1), min and max of v (n values) */
static void stats(const double *v, int n, double *mean, double *sd, double *lo, double *hi) {
    double s = 0;
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        s += v[i];
        *lo = fmin(*lo, v[i]);
        *hi = fmax(*hi, v[i]);
    }
    *mean = s / n;
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (v[i] - *mean) * (v[i] - *mean);
    *sd = sqrt(ss / (n - 1));
}

/* Tolerance: summary.csv prints 6 significant digits (%.6g), so a value read back from it is
 * within 5e-6 relative of the double it was; the expected statistics are computed from the
 * exact values in metrics.jsonl. */
static void assert_near(double got, double want, const char *what) {
    ck_assert_msg(fabs(got - want) <= 5e-6 * fmax(fabs(want), 1e-12), "%s: %.9g, want %.9g",
                  what, got, want);
}

/* The seed axis: 2 configurations × 3 seeds are 6 points with seeds 4, 5, 6 each; every seed's
 * summary records are in summary_seeds.csv, and summary.csv has one row per configuration and
 * N whose recall_error, _std, _min and _max are the statistics of the three seeds' values,
 * computed here independently; numbers equal across seeds (d_k) stay plain. */
START_TEST(seeds_aggregate_to_mean_std_min_max) {
    char path[512];
    snprintf(path, sizeof path, "%s/seeds.yaml", g_dir);
    ck_assert_int_eq(tu_write_file(path, SEEDS), 0);
    ttt_error err = {0};
    ttt_experiment *e = NULL;
    ck_assert_msg(ttt_experiment_load(path, NULL, 0, &e, &err) == TTT_OK, "%s", err.msg);
    ck_assert_int_eq(e->n_points, 6);
    for (int i = 0; i < 6; i++) {
        ck_assert_uint_eq(e->plan->points[i].seed, 4 + (uint64_t)(i % 3));
        ck_assert_int_eq(e->plan->points[i].group, i / 3);
        ck_assert_msg(strstr(e->plan->points[i].label, ", seed="), "%s", e->plan->points[i].label);
    }
    ttt_experiment_free(e);

    char *table = run_yaml(SEEDS, "seeds");
    csv all = read_in("seeds", "summary_seeds.csv");
    csv agg = read_in("seeds", "summary.csv");
    ck_assert_int_eq(all.rows, 12); /* 2 configurations × 3 seeds × 2 values of N */
    ck_assert_int_eq(agg.rows, 4);
    ck_assert_int_lt(csv_col(&agg, "seed"), 0);
    /* the exact values of every seed: metrics.jsonl (summary_seeds.csv rounds to 6 digits) */
    snprintf(path, sizeof path, "%s/seeds/metrics.jsonl", g_dir);
    char *jl = tu_read_file(path);
    ck_assert_ptr_nonnull(jl);
    for (int r = 0; r < agg.rows; r++) {
        double v[3];
        int n = 0;
        char *save = NULL, *copy = strdup(jl);
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            ttt_record rec;
            ck_assert_int_eq(ttt_record_parse_json(&rec, line), TTT_OK);
            if (ttt_record_get(&rec, "task.key_dim")->num == num(&agg, r, "task.key_dim") &&
                ttt_record_get(&rec, "N")->num == num(&agg, r, "N") && n < 3)
                v[n++] = ttt_record_get(&rec, "recall_error")->num;
        }
        free(copy);
        ck_assert_int_eq(n, 3);
        ck_assert_msg(v[0] != v[1] || v[1] != v[2], "the seeds measured the same"); /* they differ */
        double mean, sd, lo, hi;
        stats(v, 3, &mean, &sd, &lo, &hi);
        assert_near(num(&agg, r, "recall_error"), mean, "mean");
        assert_near(num(&agg, r, "recall_error_std"), sd, "std");
        assert_near(num(&agg, r, "recall_error_min"), lo, "min");
        assert_near(num(&agg, r, "recall_error_max"), hi, "max");
        ck_assert_double_eq(num(&agg, r, "seeds"), 3);
        ck_assert_double_eq(num(&agg, r, "d_k"), num(&agg, r, "task.key_dim"));
    }
    ck_assert_int_lt(csv_col(&agg, "d_k_std"), 0);
    /* the printed table: mean ± std, a seeds column */
    ck_assert_msg(strstr(table, " ± ") && strstr(table, "seeds"), "%s", table);
    ck_assert_int_eq(csv_col(&all, "seed"), csv_col(&all, "task.key_dim") + 1);
    csv_free(&all);
    csv_free(&agg);
    free(jl);
    free(table);
}
END_TEST

/* A swept `seed` is the same axis: its values aggregate like `seeds:` (2 seeds per row). */
START_TEST(swept_seed_aggregates) {
    char *table = run_yaml("task: {kind: memory, pairs: [8], key_dim: 8, value_dim: 8, trials: 1}\n"
                           "layer: {preset: linear_attention}\n"
                           "sweep: {seed: [3, 9], task.value_dim: [8, 16]}\n", "swept");
    csv agg = read_in("swept", "summary.csv");
    ck_assert_int_eq(agg.rows, 2);
    ck_assert_double_eq(num(&agg, 0, "task.value_dim"), 8);
    ck_assert_double_eq(num(&agg, 1, "task.value_dim"), 16);
    ck_assert_double_eq(num(&agg, 0, "seeds"), 2);
    csv_free(&agg);
    free(table);
}
END_TEST

/* Every seed is a point for --shard jobs: two shards and a merge give the summary one process
 * gives (the recall errors; times differ). */
START_TEST(seeds_are_points_for_shards) {
    char path[512], dir[512];
    snprintf(path, sizeof path, "%s/sh.yaml", g_dir);
    ck_assert_int_eq(tu_write_file(path, SEEDS), 0);
    ttt_error err = {0};
    ttt_experiment *e = NULL;
    ck_assert_msg(ttt_experiment_load(path, NULL, 0, &e, &err) == TTT_OK, "%s", err.msg);
    int owner[6];
    ttt_plan_assign(e->plan, 2, owner);
    int n0 = 0;
    for (int i = 0; i < 6; i++) n0 += owner[i] == 0;
    ck_assert_int_eq(n0, 3); /* six equal points over two shards */
    snprintf(dir, sizeof dir, "%s/sharded", g_dir);
    for (int s = 0; s < 2; s++) {
        ttt_plan_exec x = {.shard = s, .n_shards = 2};
        ck_assert_msg(ttt_plan_run_exec(e->plan, dir, 0, NULL, &x, &err) == TTT_OK, "%s", err.msg);
    }
    ck_assert_msg(ttt_plan_merge(e->plan, dir, NULL, &err) == TTT_OK, "%s", err.msg);
    ttt_experiment_free(e);
    free(run_yaml(SEEDS, "whole"));
    csv a = read_in("sharded", "summary.csv"), b = read_in("whole", "summary.csv");
    ck_assert_int_eq(a.rows, b.rows);
    for (int r = 0; r < a.rows; r++) {
        ck_assert_str_eq(at(&a, r, "recall_error"), at(&b, r, "recall_error"));
        ck_assert_str_eq(at(&a, r, "recall_error_std"), at(&b, r, "recall_error_std"));
    }
    csv_free(&a);
    csv_free(&b);
}
END_TEST

/* ---- charts of a run ---- */

/* The file `name` of run folder `out` (malloc'd; the test fails when it is missing). */
static char *file_in(const char *out, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", g_dir, out, name);
    char *t = tu_read_file(path);
    ck_assert_msg(t != NULL, "no %s", path);
    return t;
}

/* The Hebbian crosstalk curve is drawn for a Hebbian memory, labelled as docs/math.md §7.1
 * writes it, and passes through sqrt((N−1)/d) — at N = 1 it is 0, so the dashed path starts on
 * the y = 0 grid line (sqrt(N/d) would start at 0.25); for the delta rule there is no curve. */
START_TEST(theory_curve_only_where_it_applies) {
    /* linear y (the YAML option): the error at N = 1 is ~1e-8, which `auto` would put on a log
     * axis, where the curve's 0 has no place */
    free(run_yaml("task: {kind: memory, pairs: [1, 64], key_dim: 16, value_dim: 16, trials: 1}\n"
                  "layer: {preset: linear_attention}\n"
                  "charts: {log_y: false}\n", "heb"));
    free(run_yaml("task: {kind: memory, pairs: [1, 64], key_dim: 16, value_dim: 16, trials: 1}\n"
                  "layer: {preset: deltanet}\n", "delta"));
    char *h = file_in("heb", "recall_error.svg"), *d = file_in("delta", "recall_error.svg");
    ck_assert_msg(strstr(h, ">sqrt((N−1)/d), Hebbian theory (d = 16)</text>"), "no label");
    ck_assert_ptr_null(strstr(h, "sqrt(N/d)"));
    ck_assert_ptr_null(strstr(d, "stroke-dasharray"));
    ck_assert_ptr_null(strstr(d, "Hebbian theory"));
    /* the curve's first point (N = 1) is at y = 0: the y of the tick labelled 0 */
    const char *path = strstr(h, "stroke-dasharray=\"6,4\" d=\"M");
    ck_assert_ptr_nonnull(path);
    double x0, y0;
    ck_assert_int_eq(sscanf(path + strlen("stroke-dasharray=\"6,4\" d=\"M"), "%lf,%lf", &x0, &y0), 2);
    const char *zero = strstr(h, "dy=\"0.35em\" fill=\"#333333\">0.0</text>");
    if (!zero) zero = strstr(h, "dy=\"0.35em\" fill=\"#333333\">0</text>");
    ck_assert_ptr_nonnull(zero);
    const char *ytag = zero;
    while (ytag > h && strncmp(ytag, " y=\"", 4) != 0) ytag--;
    ck_assert_double_eq_tol(strtod(ytag + 4, NULL), y0, 0.01);
    free(h), free(d);
}
END_TEST

/* A trained run charts what training logs: the gradient norm, the learning rate and the
 * evaluation loss, each with data. Its sweep over `layer` mappings gives the columns
 * layer.mixer and layer.preset, with the value each point was given even where the task moves
 * the key (layer.mixer becomes model.mixer in the resolved configuration). */
START_TEST(trained_runs_chart_what_is_logged) {
    free(run_yaml("task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 32,\n"
                  "       test_examples: 8, eval_batch: 8}\n"
                  "model: {d_model: 8, layers: 1, heads: 1, mlp: 0}\n"
                  "layer: {preset: deltanet}\n"
                  "train: {steps: 4, batch: 4, log_every: 1, eval_every: 2, checkpoint_every: 0}\n"
                  "sweep: {layer: [{mixer: softmax}, {preset: gla}]}\n",
                  "trained"));
    csv c = read_in("trained", "summary.csv");
    ck_assert_int_eq(c.rows, 2);
    ck_assert_str_eq(at(&c, 0, "layer.mixer"), "softmax");
    ck_assert_str_eq(at(&c, 1, "layer.preset"), "gla");
    ck_assert_str_eq(at(&c, 1, "mixer"), "gla");
    csv_free(&c);
    const char *charts[] = {"grad_norm.svg", "lr.svg", "eval_loss.svg", "train_loss.svg",
                            "eval_accuracy.svg"};
    for (int i = 0; i < 5; i++) {
        char *svg = file_in("trained", charts[i]);
        ck_assert_msg(strstr(svg, "<polyline") && !strstr(svg, "no data"), "%s is empty",
                      charts[i]);
        free(svg);
    }
}
END_TEST

/* ---- compare ---- */

/* Two runs side by side: the table has a `run` column and the union of both runs' swept
 * columns; --out writes the merged summary (a row per run's row) and a page whose charts hold
 * both runs' lines. */
START_TEST(compare_two_runs) {
    free(run_yaml(SEEDS, "ra"));
    free(run_yaml("task: {kind: memory, pairs: [8, 32], key_dim: 8, value_dim: 8, trials: 1}\n"
                  "layer: {preset: deltanet}\n"
                  "sweep: {layer.optimizer.lr: [0.5, 1.0]}\n", "rb"));
    char a[512], b[512], out[512];
    snprintf(a, sizeof a, "%s/ra", g_dir);
    snprintf(b, sizeof b, "%s/rb", g_dir);
    snprintf(out, sizeof out, "%s/cmp", g_dir);
    const char *dirs[2] = {a, b};
    char *table = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&table, &len);
    ttt_error err = {0};
    ck_assert_msg(ttt_compare(dirs, 2, out, f, &err) == TTT_OK, "%s", err.msg);
    fclose(f);
    ck_assert_msg(strncmp(table, "run ", 4) == 0 && strstr(table, "key_dim") &&
                  strstr(table, "optimizer.lr"), "%s", table);
    ck_assert_msg(strstr(table, "\nra ") && strstr(table, "\nrb "), "%s", table);
    csv m = read_in("cmp", "summary.csv");
    ck_assert_int_eq(m.rows, 4 + 4); /* ra: 2 configurations × 2 N (aggregated); rb: 2 × 2 */
    ck_assert_str_eq(at(&m, 0, "run"), "ra");
    ck_assert_str_eq(at(&m, 4, "run"), "rb");
    ck_assert_str_eq(at(&m, 0, "layer.optimizer.lr"), "");
    ck_assert_double_eq(num(&m, 4, "layer.optimizer.lr"), 0.5);
    ck_assert_double_eq(num(&m, 0, "task.key_dim"), 8);
    csv_free(&m);
    char path[600];
    snprintf(path, sizeof path, "%s/accuracy.svg", out);
    char *svg = tu_read_file(path);
    ck_assert_ptr_nonnull(svg);
    ck_assert_msg(strstr(svg, ">ra: task.key_dim=8</text>") && strstr(svg, ">rb: optimizer.lr=0.5</text>"),
                  "legend of %s", path);
    free(svg);
    snprintf(path, sizeof path, "%s/index.html", out);
    char *html = tu_read_file(path);
    ck_assert_ptr_nonnull(html);
    ck_assert_ptr_nonnull(strstr(html, "<table class=\"pivot\">"));
    free(html);
    free(table);
}
END_TEST

/* What cannot be compared is refused, naming the folder: a folder that is not a run, a run that
 * has not completed, runs of different task kinds, and an output folder that is a run. */
START_TEST(compare_refusals) {
    free(run_yaml("task: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8, trials: 1}\n"
                  "layer: {preset: deltanet}\n", "mem"));
    free(run_yaml("task: {kind: equivalence, tokens: 16, key_dim: 8, value_dim: 8, repeats: 1}\n"
                  "layer: {preset: linear_attention, chunk: 8}\n", "eq"));
    char mem[512], eq[512], none[512], half[512];
    snprintf(mem, sizeof mem, "%s/mem", g_dir);
    snprintf(eq, sizeof eq, "%s/eq", g_dir);
    snprintf(none, sizeof none, "%s/none", g_dir);
    snprintf(half, sizeof half, "%s/half", g_dir);
    mkdir(none, 0777);
    mkdir(half, 0777);
    char path[600];
    snprintf(path, sizeof path, "%s/config.resolved.yaml", mem);
    char *cfg = tu_read_file(path);
    snprintf(path, sizeof path, "%s/config.resolved.yaml", half);
    ck_assert_int_eq(tu_write_file(path, cfg), 0);
    free(cfg);
    ttt_error err = {0};
    const char *kinds[2] = {mem, eq};
    ck_assert_int_ne(ttt_compare(kinds, 2, NULL, NULL, &err), TTT_OK);
    ck_assert_msg(strstr(err.msg, "task memory") && strstr(err.msg, "task equivalence"), "%s",
                  err.msg);
    const char *notrun[2] = {mem, none};
    ck_assert_int_ne(ttt_compare(notrun, 2, NULL, NULL, &err), TTT_OK);
    ck_assert_msg(strstr(err.msg, none) && strstr(err.msg, "not a run folder"), "%s", err.msg);
    const char *halfrun[2] = {mem, half};
    ck_assert_int_ne(ttt_compare(halfrun, 2, NULL, NULL, &err), TTT_OK);
    ck_assert_msg(strstr(err.msg, half) && strstr(err.msg, "no summary.csv"), "%s", err.msg);
    const char *self[1] = {mem};
    ck_assert_int_ne(ttt_compare(self, 1, mem, NULL, &err), TTT_OK);
    ck_assert_msg(strstr(err.msg, "is one of the runs"), "%s", err.msg);
}
END_TEST


/* ---- best over an axis (docs/results.md "Best over an axis") ---- */

static const char *const BEST =
    "seeds: 2\n"
    "task: {kind: memory, pairs: [8, 32], key_dim: 8, value_dim: 8, trials: 1}\n"
    "layer: {preset: deltanet}\n"
    "results: {best_over: layer.optimizer.lr}\n"
    "sweep: {layer.optimizer.lr: [0.05, 0.5, 1.0]}\n";

/* A run that asks for the best rate per N: summary.csv's `best` marks, for each N, the row of
 * largest mean accuracy (the first on a tie), found here from summary.csv itself;
 * summary_best.csv holds those rows; `ttt compare` of two such runs keeps each run's choice and
 * prints the best table. */
START_TEST(best_over_a_swept_key) {
    char *table = run_yaml(BEST, "best");
    ck_assert_msg(strstr(table, "\nbest optimizer.lr: the largest accuracy, mean over seeds"),
                  "%s", table);
    free(table);
    csv m = read_in("best", "summary.csv");
    ck_assert_int_eq(m.rows, 6); /* 3 rates × 2 N */
    int chosen = 0;
    for (int r = 0; r < m.rows; r++) {
        int want = 1; /* no row of the same N before it at least as good, none after better */
        for (int q = 0; q < m.rows; q++) {
            if (q == r || num(&m, q, "N") != num(&m, r, "N")) continue;
            const double a = num(&m, q, "accuracy"), b = num(&m, r, "accuracy");
            if (a > b || (a == b && q < r)) want = 0;
        }
        ck_assert_msg(num(&m, r, "best") == want, "row %d (N = %s, lr = %s): best %s", r,
                      at(&m, r, "N"), at(&m, r, "layer.optimizer.lr"), at(&m, r, "best"));
        chosen += want;
    }
    ck_assert_int_eq(chosen, 2);
    csv b = read_in("best", "summary_best.csv");
    ck_assert_int_eq(b.rows, 2);
    for (int i = 0; i < b.rows; i++) {
        int found = 0;
        for (int r = 0; r < m.rows; r++)
            found |= num(&m, r, "best") == 1 && num(&m, r, "N") == num(&b, i, "N") &&
                     !strcmp(at(&m, r, "layer.optimizer.lr"), at(&b, i, "layer.optimizer.lr"));
        ck_assert_msg(found, "summary_best.csv row %d is no best row of summary.csv", i);
    }
    csv_free(&b);
    free(run_yaml(BEST, "best2"));
    char d1[512], d2[512];
    snprintf(d1, sizeof d1, "%s/best", g_dir);
    snprintf(d2, sizeof d2, "%s/best2", g_dir);
    const char *dirs[2] = {d1, d2};
    char *ct = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&ct, &len);
    ttt_error err = {0};
    ck_assert_msg(ttt_compare(dirs, 2, NULL, f, &err) == TTT_OK, "%s", err.msg);
    fclose(f);
    const char *sect = strstr(ct, "\nbest optimizer.lr:");
    ck_assert_msg(sect, "%s", ct);
    /* two runs × two N, each the row its run chose */
    int lines = 0;
    for (const char *p = sect + 1; (p = strchr(p, '\n')) != NULL; p++) lines++;
    ck_assert_msg(lines == 2 + 4, "%s", sect); /* its line, the heads, the rows */
    for (int r = 0; r < m.rows; r++) {
        if (num(&m, r, "best") != 1) continue;
        int found = 0; /* a line "best <its lr> …" (run, then optimizer.lr) */
        for (const char *p = strchr(sect + 1, '\n'); p && !found; p = strchr(p + 1, '\n')) {
            char run[64], lr[64];
            found = sscanf(p + 1, "%63s %63s", run, lr) == 2 && !strcmp(run, "best") &&
                    !strcmp(lr, at(&m, r, "layer.optimizer.lr"));
        }
        ck_assert_msg(found, "no row of run best at lr %s in %s", at(&m, r, "layer.optimizer.lr"),
                      sect);
    }
    free(ct);
    csv_free(&m);
}
END_TEST

/* `results:` that cannot be honoured is refused where it is written, saying what was expected. */
START_TEST(best_over_refusals) {
    static const struct {
        const char *results, *want[2];
    } cases[] = {
        {"{best_over: train.lr}", {"results.best_over: 'train.lr' is not a swept column",
                                   "layer.optimizer.lr"}},
        {"{best_over: layer.optimizer.lr, metric: acc}",
         {"results.metric: 'acc' is not a column of the memory task", "accuracy"}},
        {"{best_over: layer.optimizer.lr, goal: up}", {"results.goal: 'up'", "max"}},
        {"{metric: accuracy}", {"without best_over", "train.lr"}},
        {"{best: layer.optimizer.lr}", {"results: unknown key 'best'", "best_over"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char yaml[512], path[512];
        snprintf(yaml, sizeof yaml,
                 "task: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8, trials: 1}\n"
                 "layer: {preset: deltanet}\n"
                 "sweep: {layer.optimizer.lr: [0.5, 1.0]}\n"
                 "results: %s\n", cases[i].results);
        snprintf(path, sizeof path, "%s/refuse%zu.yaml", g_dir, i);
        ck_assert_int_eq(tu_write_file(path, yaml), 0);
        ttt_error err = {0};
        ttt_experiment *e = NULL;
        ck_assert_int_ne(ttt_experiment_load(path, NULL, 0, &e, &err), TTT_OK);
        ck_assert_msg(strstr(err.msg, ":4:") && strstr(err.msg, cases[i].want[0]) &&
                          strstr(err.msg, cases[i].want[1]),
                      "%s: %s", cases[i].results, err.msg);
    }
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("reading");
    TCase *c = tcase_create("reading");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_set_timeout(c, 300);
    tcase_add_test(c, swept_keys_are_columns);
    tcase_add_test(c, seeds_aggregate_to_mean_std_min_max);
    tcase_add_test(c, swept_seed_aggregates);
    tcase_add_test(c, seeds_are_points_for_shards);
    tcase_add_test(c, theory_curve_only_where_it_applies);
    tcase_add_test(c, trained_runs_chart_what_is_logged);
    tcase_add_test(c, compare_two_runs);
    tcase_add_test(c, compare_refusals);
    tcase_add_test(c, best_over_a_swept_key);
    tcase_add_test(c, best_over_refusals);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run(suite()); }
