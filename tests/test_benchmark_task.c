/* The `benchmark` task (src/tasks/benchmark.c) on tiny sizes: it runs every (T, d, H, threads)
 * point, writes one record each with the documented fields, and its FLOP counts are the formulas
 * stated in its header, recomputed here from docs/math.md §5.2 / §5.3 independently (chunks of C
 * tokens, the last one shorter). measure: train_step writes its records and its dump. Timings are not asserted (benchmarks are programs, not timed
 * tests); only that they are positive and finite. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiment.h"
#include "safetensors.h"
#include "testutil.h"
#include "internal.h"

static char *g_dir;
static void setup(void) { g_dir = tu_mkdtemp(); }
static void teardown(void) {
    tu_rmtree(g_dir);
    free(g_dir);
}

/* The value of "key": in a JSON line (NAN when absent). */
static double json_num(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static int json_has_str(const char *line, const char *key, const char *value) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\":\"%s\"", key, value);
    return strstr(line, pat) != NULL;
}

/* Run `yaml` and return metrics.jsonl (malloc'd). */
static char *run(const char *yaml) {
    char path[4096], dir[4096];
    snprintf(path, sizeof path, "%s/exp.yaml", g_dir);
    snprintf(dir, sizeof dir, "%s/out", g_dir);
    ck_assert_int_eq(tu_write_file(path, yaml), 0);
    ttt_error err = {0};
    ttt_experiment *e = NULL;
    ck_assert_msg(ttt_experiment_load(path, NULL, 0, &e, &err) == TTT_OK, "%s", err.msg);
    ck_assert_msg(ttt_experiment_run(e, dir, 0, NULL, &err) == TTT_OK, "%s", err.msg);
    ttt_experiment_free(e);
    snprintf(path, sizeof path, "%s/out/metrics.jsonl", g_dir);
    char *m = tu_read_file(path);
    ck_assert_ptr_nonnull(m);
    return m;
}

/* docs/math.md §5.2 (linear attention) and §5.3 (delta rule) per chunk of n tokens, d_k = d_v = d:
 *   LA:    Q Kᵀ 2n²d, masked product with V 2n²d, Q S and Kᵀ V 2nd² each
 *   delta: K Kᵀ 2n²d, A⁻¹ on 2d columns 2n²d, Q Kᵀ 2n²d, masked product with V' 2n²d,
 *          W S, Q S, Kᵀ V' 2nd² each */
static double chunk_flops(int delta, int T, int d, int C) {
    double f = 0;
    for (int t0 = 0; t0 < T; t0 += C) {
        double n = t0 + C <= T ? C : T - t0;
        f += delta ? 8 * n * n * d + 6 * n * d * d : 4 * n * n * d + 4 * n * d * d;
    }
    return f;
}

START_TEST(records_and_flop_counts) {
    const char *yaml = "name: b\nseed: 0\n"
                       "task: {kind: benchmark, tokens: [100, 37], head_dims: [8], heads: [1, 3],"
                       " threads: [1, 2], repeats: 1}\n"
                       "layer: {preset: mamba2, chunk: 16}\n"
                       "sweep:\n  layer.preset: [mamba2, gated_deltanet]\n"
                       "  layer.form: [recurrent, chunkwise]\n";
    char *m = run(yaml);
    int n = 0, seen_speedup = 0;
    for (char *line = strtok(m, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "\"tokens_per_s\"")) continue;
        n++;
        const int delta = json_has_str(line, "preset", "gated_deltanet");
        const int chunk = json_has_str(line, "form", "chunkwise");
        ck_assert_msg(chunk || json_has_str(line, "form", "recurrent"), "%s", line);
        ck_assert_msg(json_has_str(line, "gates", "scalar"), "%s", line);
        const int T = (int)json_num(line, "T"), d = (int)json_num(line, "d_head"),
                  H = (int)json_num(line, "heads"), th = (int)json_num(line, "threads");
        ck_assert_int_eq(d, 8);
        ck_assert_msg(T == 100 || T == 37, "%s", line);
        ck_assert_msg(th >= 1 && th <= H, "threads beyond the heads: %s", line);
        const double want = H * (chunk ? chunk_flops(delta, T, d, 16)
                                       : (double)T * d * d * (delta ? 6 : 4));
        const double got = json_num(line, "gflop") * 1e9;
        ck_assert_msg(fabs(got - want) <= 1e-9 * want, "gflop %g, want %g: %s", got, want, line);
        const double secs = json_num(line, "seconds"), tps = json_num(line, "tokens_per_s");
        ck_assert_msg(secs > 0 && isfinite(secs), "%s", line);
        ck_assert_msg(json_num(line, "cpu_seconds") > 0, "%s", line);
        ck_assert_msg(fabs(tps * secs - (double)H * T) <= 1e-6 * H * T, "%s", line);
        ck_assert_msg(json_num(line, "sgemm64_gflops") > 0, "%s", line);
        ck_assert_msg(json_num(line, "peak_mb") > 0, "%s", line);
        const double frac = json_num(line, "frac_sgemm");
        ck_assert_msg(fabs(frac - json_num(line, "gflops") /
                                      (th * json_num(line, "sgemm_shape_gflops"))) <= 1e-9 * frac,
                      "%s", line);
        if (th == 2) seen_speedup += !isnan(json_num(line, "speedup_1t"));
    }
    /* 2 presets × 2 forms × 2 T × (1 head: 1 thread; 3 heads: 1 and 2 threads, where OpenMP
     * exists) */
#ifdef _OPENMP
    ck_assert_int_eq(n, 2 * 2 * 2 * 3);
    ck_assert_int_eq(seen_speedup, 2 * 2 * 2);
#else
    ck_assert_int_eq(n, 2 * 2 * 2 * 2);
#endif
    free(m);
}
END_TEST

/* measure: train_step on a tiny model: one record per (seq_len, threads) with the documented
 * fields, and the dump (dump: true) holds what it says. The dump is checked against properties
 * that do not come from the code under test:
 *   - MQAR queries every one of the N keys once per sequence (data.h): B·N scored positions;
 *   - at initialization the logits are small (head ~ N(0, 0.02²) on a unit-RMS input of width
 *     d = 8: logit std ≈ 0.02·sqrt(8) ≈ 0.06), so the mean cross-entropy is ln V to within
 *     E[½ var] ≈ 0.002 — a loss summed instead of averaged, or over the wrong positions'
 *     count, would be far off (tolerance 0.05);
 *   - softmax cross-entropy gradients sum to 0 over the vocabulary at every position, so every
 *     row of grad.head (d, V) sums to 0 (float32 rounding: 1e-6 of the row's absolute sum);
 *   - a token absent from the batch gets an exactly zero embedding gradient, a present one does
 *     not (all rows together). */
START_TEST(train_step_records_and_dump) {
    const char *yaml = "name: b\nseed: 3\n"
                       "task: {kind: benchmark, measure: train_step, seq_len: [16, 20], vocab: 16,"
                       " pairs: 2, threads: [1, 2], repeats: 2, dump: true}\n"
                       "model: {d_model: 8, layers: 1, heads: 2, mlp: 0, conv: 2}\n"
                       "layer: {preset: deltanet, form: chunkwise, chunk: 8}\n"
                       "train: {batch: 4}\n";
    char *m = run(yaml);
    int n = 0;
    for (char *line = strtok(m, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "\"tokens_per_s\"")) continue;
        n++;
        ck_assert_msg(json_has_str(line, "measure", "train_step"), "%s", line);
        ck_assert_msg(json_has_str(line, "preset", "deltanet"), "%s", line);
        ck_assert_msg(json_has_str(line, "form", "chunkwise"), "%s", line);
        ck_assert_msg(json_num(line, "chunk") == 8, "%s", line);
        ck_assert_msg(json_num(line, "batch") == 4 && json_num(line, "d_model") == 8, "%s", line);
        const double L = json_num(line, "seq_len"), th = json_num(line, "threads");
        ck_assert_msg(L == 16 || L == 20, "%s", line);
        ck_assert_msg(th == 1 || th == 2, "%s", line);
        ck_assert_msg(json_num(line, "shards") == th, "%s", line);
        const double secs = json_num(line, "seconds"), tps = json_num(line, "tokens_per_s");
        ck_assert_msg(secs > 0 && isfinite(secs), "%s", line);
        ck_assert_msg(json_num(line, "seconds_median") >= secs, "%s", line);
        ck_assert_msg(json_num(line, "cpu_seconds") > 0, "%s", line);
        ck_assert_msg(fabs(tps * secs - 4 * L) <= 1e-6 * 4 * L, "%s", line);
        ck_assert_msg(json_num(line, "peak_mb") > 0, "%s", line);
        if (th == 2) ck_assert_msg(json_num(line, "speedup_1t") > 0, "%s", line);
    }
#ifdef _OPENMP
    ck_assert_int_eq(n, 2 * 2);
#else
    ck_assert_int_ge(n, 2);
#endif
    free(m);

    for (int L = 16; L <= 20; L += 4) {
        char path[4096];
        snprintf(path, sizeof path, "%s/out/train_step_point0_L%d.safetensors", g_dir, L);
        ttt_st_file *f = NULL;
        ttt_error err = {0};
        ck_assert_msg(ttt_st_read(path, &f, &err) == TTT_OK, "%s", err.msg);
        const ttt_st_tensor *tok = ttt_st_find(f, "tokens"), *lab = ttt_st_find(f, "labels"),
                            *loss = ttt_st_find(f, "loss"), *head = ttt_st_find(f, "grad.head"),
                            *emb = ttt_st_find(f, "grad.embed");
        ck_assert_ptr_nonnull(tok);
        ck_assert_ptr_nonnull(lab);
        ck_assert_ptr_nonnull(loss);
        ck_assert_ptr_nonnull(head);
        ck_assert_ptr_nonnull(emb);
        ck_assert_ptr_nonnull(ttt_st_find(f, "param.layer0.mixer.wq"));
        ck_assert_ptr_nonnull(ttt_st_find(f, "grad.layer0.mixer.conv_k"));
        ck_assert_int_eq((int)tok->shape[0], 4);
        ck_assert_int_eq((int)tok->shape[1], L);
        long scored = 0;
        int present[16] = {0};
        for (int i = 0; i < 4 * L; i++) {
            scored += lab->data[i] >= 0;
            present[(int)tok->data[i]] = 1;
        }
        ck_assert_int_eq(scored, 4 * 2);
        ck_assert_str_eq(ttt_st_meta(f, "scored"), "8");
        ck_assert_str_eq(ttt_st_meta(f, "layer.preset"), "deltanet");
        ck_assert_str_eq(ttt_st_meta(f, "resolved.head_dim"), "4");
        ck_assert_msg(fabs(loss->data[0] - log(16.0)) < 0.05, "loss %g", loss->data[0]);
        double habs = 0;
        for (int r = 0; r < 8; r++) {
            double s = 0, a = 0;
            for (int v = 0; v < 16; v++) {
                s += head->data[r * 16 + v];
                a += fabs(head->data[r * 16 + v]);
            }
            ck_assert_msg(fabs(s) <= 1e-6 * a + 1e-12, "row %d of grad.head sums to %g", r, s);
            habs += a;
        }
        ck_assert_msg(habs > 0, "grad.head is zero");
        for (int t = 0; t < 16; t++) {
            double a = 0;
            for (int c = 0; c < 8; c++) a += fabs(emb->data[t * 8 + c]);
            ck_assert_msg(present[t] ? a > 0 : a == 0, "token %d (present %d): |grad| %g", t,
                          present[t], a);
        }
        ttt_st_free(f);
    }
}
END_TEST

/* A sequence too short for its pairs is refused at load time, naming the value. */
START_TEST(train_step_checks_mqar) {
    char path[4096];
    snprintf(path, sizeof path, "%s/exp.yaml", g_dir);
    ck_assert_int_eq(tu_write_file(path, "name: b\ntask: {kind: benchmark, measure: train_step,"
                                         " seq_len: [64, 12], pairs: 8}\n"
                                         "layer: {preset: deltanet}\n"),
                     0);
    ttt_error err = {0};
    ttt_experiment *e = NULL;
    ck_assert_int_ne(ttt_experiment_load(path, NULL, 0, &e, &err), TTT_OK);
    ck_assert_msg(strstr(err.msg, "task.seq_len = 12"), "%s", err.msg);
    ck_assert_msg(strstr(err.msg, "exp.yaml:2:"), "%s", err.msg);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("benchmark_task");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, records_and_flop_counts);
    tcase_add_test(tc, train_step_records_and_dump);
    tcase_add_test(tc, train_step_checks_mqar);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
