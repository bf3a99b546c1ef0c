/* Memory estimates cover reality (docs/hardening.md "Out of memory"): over random small
 * configurations of several tasks, presets and sizes (fixed seeds), the estimate the plan pass
 * makes for a point (what `ttt check` compares with the machine) is at least the peak the run
 * really holds of what the estimates count — arena blocks, parameters with their gradients,
 * AdamW's moments, the shards' gradient copies (ttt_mem_peak, src/core/tensor.h) — and not
 * absurdly above it, so that an estimate returning huge numbers fails too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "experiment.h"
#include "plan.h"
#include "rng.h"
#include "testutil.h"

/* The loosest over-estimate accepted. Measured over these 40 configurations: 1.01 to 2.9 times
 * the peak (the estimates count scratch for the largest form a layer may choose and every
 * optional parameter, and a tape of 64·d_model + 4·heads·head_dim² floats per token and block,
 * which small heads do not fill). Ten times would be an estimate that refuses runs the machine
 * could hold. */
#define MAX_RATIO 10.0

static const char *const presets[] = {"deltanet", "gated_deltanet", "linear_attention",
                                      "ttt_linear", "mamba2", "retnet"};

static int pick(ttt_rng *r, int n) { return (int)ttt_rng_below(r, (uint64_t)n); }

/* A random small experiment of task kind k (0 mqar, 1 lm, 2 memory, 3 equivalence,
 * 4 regression). */
static void random_yaml(char *buf, size_t n, ttt_rng *r, int k) {
    const char *preset = presets[pick(r, 6)];
    const int d = 8 << pick(r, 4), layers = 1 + pick(r, 2), batch = 2 << pick(r, 4);
    const int shards = 1 + pick(r, 2), seq = 16 << pick(r, 4);
    char model[256], train[256];
    snprintf(model, sizeof model,
             "model: {d_model: %d, layers: %d, heads: %d, mlp: %d}\nlayer: {preset: %s}\n", d,
             layers, d >= 16 ? 2 : 1, pick(r, 3), preset);
    snprintf(train, sizeof train,
             "train: {steps: 2, batch: %d, shards: %d, threads: 1, log_every: 1, eval_every: 0, "
             "checkpoint_every: 0}\n",
             batch, shards);
    if (k == 0)
        snprintf(buf, n,
                 "task: {kind: mqar, vocab: %d, seq_len: %d, pairs: 2, train_examples: 16, "
                 "test_examples: 8, eval_batch: 4}\n%s%s",
                 32 << pick(r, 3), seq, model, train);
    else if (k == 1)
        snprintf(buf, n,
                 "task: {kind: lm, path: tiny.txt, seq_len: %d, eval_windows: 4, eval_batch: 4}\n"
                 "%s%s",
                 seq, model, train);
    else if (k == 2)
        snprintf(buf, n,
                 "task: {kind: memory, pairs: [%d, %d], key_dim: %d, value_dim: %d, trials: 1}\n"
                 "layer: {preset: %s}\n",
                 4 << pick(r, 3), 64 << pick(r, 5), d, d, preset);
    else if (k == 3)
        snprintf(buf, n,
                 "task: {kind: equivalence, tokens: %d, key_dim: %d, value_dim: %d, heads: %d, "
                 "repeats: 1}\nlayer: {preset: %s}\n",
                 seq * 4, d, d, 1 + pick(r, 3), pick(r, 2) ? "linear_attention" : "deltanet");
    else
        snprintf(buf, n,
                 "task: {kind: regression, dim: %d, points: %d, eval_sequences: 8}\n%s%s",
                 2 << pick(r, 3), 8 << pick(r, 2), model, train);
}

START_TEST(estimates_cover_the_peak) {
    char *dir = tu_mkdtemp();
    char cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(dir), 0);
    char text[8192] = "";
    while (strlen(text) < sizeof text - 200)
        strcat(text, "The quick brown fox jumps over the lazy dog; a rolling stone gathers no "
                     "moss. ");
    ck_assert_int_eq(tu_write_file("tiny.txt", text), 0);
    ttt_rng r;
    ttt_rng_seed(&r, 20261201);
    double lo = 1e300, hi = 0;
    for (int i = 0; i < 40; i++) {
        char yaml[2048], out[64];
        random_yaml(yaml, sizeof yaml, &r, i % 5);
        ttt_error err = {0};
        ttt_experiment *e = NULL;
        ck_assert_msg(ttt_experiment_load_string(yaml, "est.yaml", NULL, 0, &e, &err) == TTT_OK,
                      "%s: %s", yaml, err.msg);
        const double estimate = e->plan->points[0].memory;
        snprintf(out, sizeof out, "run%d", i);
        ttt_mem_peak_reset();
        const double base = ttt_mem_peak();
        ck_assert_msg(ttt_experiment_run(e, out, 0, NULL, &err) == TTT_OK, "%s: %s", yaml,
                      err.msg);
        const double peak = ttt_mem_peak() - base;
        ttt_experiment_free(e);
        ck_assert_msg(peak > 0, "%s: nothing was counted", yaml);
        const double ratio = estimate / peak;
        if (getenv("TTT_TEST_VERBOSE"))
            printf("%5.2f  estimate %10.0f  peak %10.0f  %s", ratio, estimate, peak, yaml);
        ck_assert_msg(estimate >= peak, "the estimate %.0f bytes is below the peak %.0f of\n%s",
                      estimate, peak, yaml);
        ck_assert_msg(ratio <= MAX_RATIO,
                      "the estimate %.0f bytes is %.1f times the peak %.0f of\n%s", estimate,
                      ratio, peak, yaml);
        if (ratio < lo) lo = ratio;
        if (ratio > hi) hi = ratio;
    }
    printf("estimate / peak over 40 configurations: %.2f to %.2f\n", lo, hi);
    ck_assert_int_eq(chdir(cwd), 0);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("estimates");
    TCase *tc = tcase_create("estimates");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, estimates_cover_the_peak);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
