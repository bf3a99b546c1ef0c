/* Outer-loop training (src/train/train.h) through the experiment runner: a tiny MQAR model learns;
 * an interrupted run resumed from its checkpoint ends bit-identical to an uninterrupted one
 * (also when its newest checkpoint is corrupt and the previous one is used); the result does
 * not depend on the number of threads; a non-finite loss or parameter stops the run with the
 * documented message and leaves the last good checkpoint intact. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "experiment.h"
#include "safetensors.h"
#include "testutil.h"
#include "train.h"

/* A tiny MQAR problem: V = 16 (keys 1…7, values 8…15), L = 16, N = 3 pairs; a 1-block DeltaNet
 * of width 16 (generic form: the closed forms record through another path). */
static const char *const TINY =
    "name: tiny\n"
    "seed: 5\n"
    "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 3, train_examples: 512,\n"
    "       test_examples: 64, eval_batch: 32}\n"
    "model: {d_model: 16, layers: 1, heads: 2, mlp: 0, conv: 3}\n"
    "layer: {preset: deltanet, form: generic}\n"
    "train: {steps: 40, batch: 8, lr: 1e-2, warmup: 5, log_every: 5, eval_every: 10,\n"
    "        checkpoint_every: 10}\n";

static char *g_dir;

static void setup(void) { g_dir = tu_mkdtemp(); }
static void teardown(void) {
    tu_rmtree(g_dir);
    free(g_dir);
}

/* Run the experiment text with overrides into <g_dir>/<out>; returns the status. */
static ttt_status run(const char *yaml, const char *out, const char *const *sets, int n_sets,
                      ttt_error *err) {
    char path[4096], dir[4096];
    snprintf(path, sizeof path, "%s/exp.yaml", g_dir);
    snprintf(dir, sizeof dir, "%s/%s", g_dir, out);
    ck_assert_int_eq(tu_write_file(path, yaml), 0);
    ttt_experiment *e = NULL;
    ttt_status s = ttt_experiment_load(path, sets, n_sets, &e, err);
    ck_assert_msg(s == TTT_OK, "%s", err->msg);
    s = ttt_experiment_run(e, dir, 0, NULL, err);
    ttt_experiment_free(e);
    return s;
}

static char *read_out(const char *out, const char *file) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", g_dir, out, file);
    return tu_read_file(path);
}

/* The value of "key": in a JSON line (NAN when absent). */
static double json_num(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* metrics.jsonl without the wall-clock fields and the summary record: what must be identical
 * between an interrupted and an uninterrupted run. */
static char *deterministic_metrics(const char *out) {
    char *m = read_out(out, "metrics.jsonl");
    ck_assert_ptr_nonnull(m);
    char *res = calloc(strlen(m) + 1, 1), *w = res;
    for (char *line = strtok(m, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\"kind\":\"summary\"")) continue;
        char *tp = strstr(line, ",\"tokens_per_s\":");
        if (tp) { /* drop the field: up to the next ',' or '}' */
            char *end = tp + 1;
            while (*end && *end != ',' && *end != '}') end++;
            memmove(tp, end, strlen(end) + 1);
        }
        w += sprintf(w, "%s\n", line);
    }
    free(m);
    return res;
}

static ttt_st_file *load_ckpt(const char *out, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/checkpoints/point0/%s", g_dir, out, name);
    ttt_st_file *f = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_st_read(path, &f, &err) == TTT_OK, "%s", err.msg);
    return f;
}

/* Every tensor (parameters and AdamW moments) equal bit for bit, and the same step. */
static void assert_same_checkpoint(const char *out_a, const char *out_b) {
    ttt_st_file *a = load_ckpt(out_a, TTT_CHECKPOINT_LAST), *b = load_ckpt(out_b, TTT_CHECKPOINT_LAST);
    ck_assert_int_eq(a->n, b->n);
    ck_assert_str_eq(ttt_st_meta(a, "ttt.step"), ttt_st_meta(b, "ttt.step"));
    for (int i = 0; i < a->n; i++) {
        const ttt_st_tensor *tb = ttt_st_find(b, a->t[i].name);
        ck_assert_ptr_nonnull(tb);
        ck_assert_int_eq(ttt_st_numel(&a->t[i]), ttt_st_numel(tb));
        ck_assert_msg(memcmp(a->t[i].data, tb->data, (size_t)ttt_st_numel(tb) * sizeof(float)) == 0,
                      "tensor %s differs", a->t[i].name);
    }
    ttt_st_free(a);
    ttt_st_free(b);
}

/* ------------------------------------------------------------------------------------------ */

START_TEST(tiny_mqar_learns) {
    /* 300 steps: the query loss must fall well below chance (ln 8 ≈ 2.08 nats among the values;
     * the untrained model is near ln 16 = 2.77 over the whole vocabulary) */
    ttt_error err = {0};
    const char *sets[] = {"train.steps=300", "train.eval_every=0", "train.checkpoint_every=0",
                          "train.log_every=20"};
    ttt_status s = run(TINY, "learn", sets, 4, &err);
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    char *m = read_out("learn", "metrics.jsonl");
    ck_assert_ptr_nonnull(m);
    double first = NAN, last = NAN, acc = NAN;
    for (char *line = strtok(m, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\"kind\":\"train\"")) {
            if (isnan(first)) first = json_num(line, "loss");
            last = json_num(line, "loss");
        }
        if (strstr(line, "\"kind\":\"eval\"")) acc = json_num(line, "eval_accuracy");
    }
    free(m);
    fprintf(stderr, "tiny mqar: loss %.3f -> %.3f, test accuracy %.3f\n", first, last, acc);
    ck_assert(first > 2.0);
    ck_assert_msg(last < 0.5 * first, "loss %.3f -> %.3f", first, last);
    ck_assert_msg(acc > 0.5, "test accuracy %.3f", acc);
}
END_TEST

/* Stop at step 25 (checkpoints at 10, 20 and the stop), run again: resumes from 25 and ends
 * with the same parameters, AdamW state and records as one uninterrupted run. */
START_TEST(resume_is_bit_identical) {
    ttt_error err = {0};
    ck_assert_int_eq(run(TINY, "full", NULL, 0, &err), TTT_OK);
    const char *stop[] = {"train.stop_at=25"};
    ck_assert_msg(run(TINY, "split", stop, 1, &err) == TTT_OK, "%s", err.msg);
    char *summary = read_out("split", "summary.csv");
    ck_assert_ptr_nonnull(summary);
    ck_assert_ptr_null(strstr(summary, "deltanet")); /* stopped: no summary row yet */
    free(summary);
    ck_assert_msg(run(TINY, "split", NULL, 0, &err) == TTT_OK, "%s", err.msg);
    assert_same_checkpoint("full", "split");
    char *a = deterministic_metrics("full"), *b = deterministic_metrics("split");
    ck_assert_str_eq(a, b);
    ck_assert_ptr_nonnull(strstr(a, "\"kind\":\"eval\",\"step\":40"));
    free(a);
    free(b);
    char *m = read_out("split", "metrics.jsonl");
    ck_assert(json_num(strstr(m, "\"kind\":\"summary\""), "resumed_from") == 25);
    free(m);
    /* a run of a different configuration into the same folder is refused, not mixed in: before
     * it writes anything (docs/hardening.md "What a command may overwrite") */
    const char *other[] = {"train.lr=2e-2"};
    ck_assert_int_eq(run(TINY, "split", other, 1, &err), TTT_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "holds a run of another configuration"), "%s", err.msg);
}
END_TEST

/* A corrupt ckpt-last is refused and ckpt-prev used; the run still ends bit-identical. */
START_TEST(corrupt_checkpoint_falls_back) {
    ttt_error err = {0};
    ck_assert_int_eq(run(TINY, "full", NULL, 0, &err), TTT_OK);
    const char *stop[] = {"train.stop_at=30"};
    ck_assert_int_eq(run(TINY, "split", stop, 1, &err), TTT_OK);
    /* flip one bit in the last float of ckpt-last (step 30); ckpt-prev holds step 20 */
    char path[4096];
    snprintf(path, sizeof path, "%s/split/checkpoints/point0/%s", g_dir, TTT_CHECKPOINT_LAST);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, -2, SEEK_END);
    int c = fgetc(f);
    fseek(f, -2, SEEK_END);
    fputc(c ^ 0x10, f);
    fclose(f);
    ck_assert_msg(run(TINY, "split", NULL, 0, &err) == TTT_OK, "%s", err.msg);
    char *m = read_out("split", "metrics.jsonl");
    ck_assert(json_num(strstr(m, "\"kind\":\"summary\""), "resumed_from") == 20);
    free(m);
    assert_same_checkpoint("full", "split");
    char *a = deterministic_metrics("full"), *b = deterministic_metrics("split");
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
}
END_TEST

/* Shards fix the arithmetic; threads only run them: 1 and 2 threads give the same bits. */
START_TEST(threads_do_not_change_results) {
    ttt_error err = {0};
    const char *t1[] = {"train.threads=1", "train.shards=2"};
    const char *t2[] = {"train.threads=2", "train.shards=2"};
    ck_assert_int_eq(run(TINY, "t1", t1, 2, &err), TTT_OK);
    ck_assert_int_eq(run(TINY, "t2", t2, 2, &err), TTT_OK);
    assert_same_checkpoint("t1", "t2");
}
END_TEST

/* Parameters driven to overflow (AdamW's decay factor 1 − lr·λ = −999 per step) stop the run
 * with a message naming the step and the parameter; the last checkpoint before it is intact. */
START_TEST(nonfinite_parameters_stop_the_run) {
    ttt_error err = {0};
    const char *sets[] = {"train.lr=10", "train.weight_decay=100", "train.warmup=0",
                          "train.checkpoint_every=1", "train.clip=0"};
    ttt_status s = run(TINY, "nan", sets, 5, &err);
    ck_assert_int_eq(s, TTT_ERR_NUMERIC);
    fprintf(stderr, "message: %s\n", err.msg);
    ck_assert_ptr_nonnull(strstr(err.msg, "step "));
    ck_assert_ptr_nonnull(strstr(err.msg, "training stopped"));
    ck_assert_ptr_nonnull(strstr(err.msg, "last good checkpoint (step "));
    long bad_step = strtol(strstr(err.msg, "step ") + 5, NULL, 10);
    long good = strtol(strstr(err.msg, "checkpoint (step ") + 17, NULL, 10);
    ck_assert_int_eq(good, bad_step - 1);
    /* the checkpoint loads (checksum intact), is the step named, and holds finite numbers */
    ttt_st_file *f = load_ckpt("nan", TTT_CHECKPOINT_LAST);
    ck_assert_int_eq(strtol(ttt_st_meta(f, "ttt.step"), NULL, 10), good);
    for (int i = 0; i < f->n; i++)
        for (int64_t j = 0; j < ttt_st_numel(&f->t[i]); j++)
            ck_assert_msg(isfinite(f->t[i].data[j]), "%s[%ld] = %g", f->t[i].name, (long)j,
                          f->t[i].data[j]);
    ttt_st_free(f);
}
END_TEST

/* A NaN in the data (a vector task's input) makes the loss NaN: the documented message. */
typedef struct nan_data {
    float x[4 * 3 * 2], y[4 * 3], mask[4 * 3];
    int calls;
} nan_data;

static ttt_status nan_next(void *user, ttt_seq_batch *out, ttt_error *err) {
    nan_data *d = user;
    for (int i = 0; i < 24; i++) d->x[i] = (float)((i * 7 + d->calls) % 5) - 2.0f;
    for (int i = 0; i < 12; i++) {
        d->y[i] = d->x[2 * i] - d->x[2 * i + 1];
        d->mask[i] = 1.0f;
    }
    if (++d->calls == 4) d->x[5] = NAN;
    *out = (ttt_seq_batch){.B = 4, .T = 3, .inputs = d->x, .targets = d->y, .mask = d->mask};
    return TTT_OK;
}
static ttt_status nan_eval(void *user, int i, ttt_seq_batch *out, ttt_error *err) {
    return nan_next(user, out, err);
}

START_TEST(nan_loss_stops_the_run) {
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_cfg_load_string("model: {d_model: 8, heads: 2, layers: 1, mlp: 0}\n"
                                         "layer: {preset: deltanet, form: generic}\n"
                                         "train: {steps: 10, batch: 4, shards: 1, warmup: 0}\n",
                                         "<t>", &root, &err),
                     TTT_OK);
    ttt_seq_model_io io = {.in_dim = 2, .out_dim = 1, .seq_len = 3};
    ttt_seq_model_config mc;
    ttt_train_config tc;
    ck_assert_int_eq(ttt_seq_model_parse((ttt_cfg_node *)ttt_cfg_get(root, "model"),
                                         (ttt_cfg_node *)ttt_cfg_get(root, "layer"), &io, &mc,
                                         &err),
                     TTT_OK);
    ck_assert_int_eq(ttt_train_config_parse((ttt_cfg_node *)ttt_cfg_get(root, "train"), &tc, &err),
                     TTT_OK);
    ttt_seq_model m;
    ck_assert_int_eq(ttt_seq_model_init(&m, &mc, 1, &err), TTT_OK);
    nan_data d = {0};
    ttt_train_data td = {.user = &d, .next = nan_next, .n_eval = 1, .eval_batch = nan_eval};
    ttt_train_run tr = {.ckpt_dir = g_dir, .config_hash = "h", .series = "t"};
    ttt_train_result res;
    ttt_status s = ttt_train(&m, &tc, &td, &tr, &res, &err);
    ck_assert_int_eq(s, TTT_ERR_NUMERIC);
    fprintf(stderr, "message: %s\n", err.msg);
    ck_assert_ptr_nonnull(strstr(err.msg, "step 4: the training loss is nan"));
    ck_assert_ptr_nonnull(strstr(err.msg, "no checkpoint was written yet"));
    ttt_seq_model_free(&m);
    ttt_cfg_free(root);
}
END_TEST

/* The lm task on a small text file made here: bits per byte are recorded, and a few dozen steps
 * take the model well below the 8 bits of a uniform guess over bytes (the text repeats a short
 * sentence, so its byte distribution alone is worth < 4.2 bits). */
START_TEST(lm_task_runs_on_a_text_file) {
    char text_path[4096], yaml[8192];
    snprintf(text_path, sizeof text_path, "%s/text.txt", g_dir);
    char *text = malloc(20001);
    const char *s = "the quick brown fox jumps over the lazy dog. ";
    for (int i = 0; i < 20000; i++) text[i] = s[i % strlen(s)];
    text[20000] = 0;
    ck_assert_int_eq(tu_write_file(text_path, text), 0);
    free(text);
    snprintf(yaml, sizeof yaml,
             "task: {kind: lm, path: '%s', seq_len: 16, eval_windows: 32, eval_batch: 16}\n"
             "model: {d_model: 16, layers: 1, heads: 2, mlp: 1}\n"
             "layer: {preset: gated_deltanet, form: generic}\n"
             "train: {steps: 60, batch: 8, lr: 1e-2, warmup: 5, log_every: 10}\n",
             text_path);
    ttt_error err = {0};
    ck_assert_msg(run(yaml, "lm", NULL, 0, &err) == TTT_OK, "%s", err.msg);
    char *m = read_out("lm", "metrics.jsonl");
    const char *sum = strstr(m, "\"kind\":\"summary\"");
    ck_assert_ptr_nonnull(sum);
    double bpb = json_num(sum, "eval_bpb");
    fprintf(stderr, "lm on a repeated sentence: %.3f bits per byte\n", bpb);
    ck_assert(bpb < 3.0);
    free(m);
    /* a missing file is an error naming it, when the plan is built (before anything runs) */
    snprintf(yaml, sizeof yaml,
             "task: {kind: lm, path: '%s/nope.txt', seq_len: 16}\n"
             "model: {d_model: 16, layers: 1, heads: 2}\n"
             "train: {steps: 2, batch: 2}\n",
             g_dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/exp.yaml", g_dir);
    ck_assert_int_eq(tu_write_file(path, yaml), 0);
    ttt_experiment *e = NULL;
    ck_assert_int_eq(ttt_experiment_load(path, NULL, 0, &e, &err), TTT_ERR_IO);
    ck_assert_ptr_null(e);
    ck_assert_ptr_nonnull(strstr(err.msg, "nope.txt"));
}
END_TEST

/* The regression task records the error curve next to least squares, which is exact (up to
 * round-off) once the context holds d = 4 points. */
START_TEST(regression_task_records_the_curve) {
    const char *yaml = "task: {kind: regression, dim: 4, points: 8, eval_sequences: 64}\n"
                       "model: {d_model: 16, layers: 1, heads: 2, mlp: 1}\n"
                       "layer: {preset: deltanet, form: generic}\n"
                       "train: {steps: 20, batch: 8, lr: 3e-3, warmup: 2}\n";
    ttt_error err = {0};
    ck_assert_msg(run(yaml, "reg", NULL, 0, &err) == TTT_OK, "%s", err.msg);
    char *m = read_out("reg", "metrics.jsonl");
    int curve = 0;
    for (char *line = strtok(m, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "\"kind\":\"curve\"")) continue;
        curve++;
        if (strstr(line, "least squares") && json_num(line, "k") >= 5)
            ck_assert_msg(json_num(line, "mse") < 1e-6, "%s", line);
        if (strstr(line, "least squares") && json_num(line, "k") == 0)
            ck_assert(json_num(line, "mse") > 1.0); /* E[y²] = d = 4 with no data */
    }
    ck_assert_int_eq(curve, 2 * 8);
    free(m);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("train");
    TCase *c = tcase_create("train");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_set_timeout(c, 300);
    tcase_add_test(c, tiny_mqar_learns);
    tcase_add_test(c, resume_is_bit_identical);
    tcase_add_test(c, corrupt_checkpoint_falls_back);
    tcase_add_test(c, threads_do_not_change_results);
    tcase_add_test(c, nonfinite_parameters_stop_the_run);
    tcase_add_test(c, nan_loss_stops_the_run);
    tcase_add_test(c, lm_task_runs_on_a_text_file);
    tcase_add_test(c, regression_task_records_the_curve);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run(suite()); }
