/* The `benchmark` task (src/task_benchmark.c) on tiny sizes: it runs every (T, d, H, threads)
 * point, writes one record each with the documented fields, and its FLOP counts are the formulas
 * stated in its header, recomputed here from MATH.md §5.2 / §5.3 independently (chunks of C
 * tokens, the last one shorter). Timings are not asserted (benchmarks are programs, not timed
 * tests); only that they are positive and finite. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experiment.h"
#include "testutil.h"
#include "ttt.h"

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

/* MATH.md §5.2 (linear attention) and §5.3 (delta rule) per chunk of n tokens, d_k = d_v = d:
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

START_TEST(train_step_is_a_hook) {
    char path[4096];
    snprintf(path, sizeof path, "%s/exp.yaml", g_dir);
    ck_assert_int_eq(tu_write_file(path, "name: b\ntask: {kind: benchmark, measure: train_step}\n"
                                         "layer: {preset: deltanet}\n"),
                     0);
    ttt_error err = {0};
    ttt_experiment *e = NULL;
    ck_assert_int_ne(ttt_experiment_load(path, NULL, 0, &e, &err), TTT_OK);
    ck_assert_msg(strstr(err.msg, "not wired in yet"), "%s", err.msg);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("benchmark_task");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, records_and_flop_counts);
    tcase_add_test(tc, train_step_is_a_hook);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(suite()); }
