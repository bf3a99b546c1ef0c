/* The memory task reproduces the known shape of docs/math.md §7. The expected numbers come from the
 * theory there, not from this code's output:
 *  - Hebbian writes: o_i = v_i + Σ_{j≠i} (k_i·k_j) v_j, and for unit random keys E[(k_i·k_j)²] =
 *    1/d, so the relative RMS recall error is sqrt((N−1)/d);
 *  - overwriting with Hebbian writes returns v_old + v_new: a coin flip between the two;
 *  - the delta rule with η = 1 replaces the value of a re-written key: ~100 % for N ≤ d/2. */
#include <math.h>
#include <string.h>

#include "memory.h"
#include "testutil.h"
#include "internal.h"

static ttt_memory_result measure(const char *preset, int N, int overwrite, int trials) {
    char text[256];
    snprintf(text, sizeof text, "layer: {preset: %s}\n", preset);
    ttt_cfg_node *root;
    ttt_error err = {0};
    ck_assert(ttt_cfg_load_string(text, "m.yaml", &root, &err) == TTT_OK);
    ttt_layer L;
    ck_assert_msg(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), 64, 64, &L, &err) ==
                      TTT_OK,
                  "%s", err.msg);
    ttt_arena arena;
    ttt_arena_init(&arena, 1 << 20);
    ttt_ctx ctx = {.arena = &arena};
    ttt_rng rng;
    ttt_rng_seed(&rng, 2024);
    ttt_memory_spec spec = {.n_pairs = N, .d_k = 64, .d_v = 64, .overwrite = overwrite};
    ttt_memory_result sum = {0};
    for (int t = 0; t < trials; t++) {
        ttt_memory_result r;
        ck_assert(ttt_memory_eval(&ctx, &L, &spec, &rng, &r, &err) == TTT_OK);
        sum.recall_error += r.recall_error / trials;
        sum.accuracy += r.accuracy / trials;
    }
    ttt_arena_free(&arena);
    ttt_cfg_free(root);
    return sum;
}

START_TEST(hebbian_error_grows_like_sqrt_n_over_d) {
    const int Ns[] = {16, 64, 256};
    for (int i = 0; i < 3; i++) {
        ttt_memory_result r = measure("linear_attention", Ns[i], 0, 8);
        double theory = sqrt((Ns[i] - 1) / 64.0);
        ck_assert_msg(fabs(r.recall_error - theory) < 0.1 * theory,
                      "N = %d: recall error %.4f, theory sqrt((N-1)/d) = %.4f", Ns[i],
                      r.recall_error, theory);
    }
}
END_TEST

START_TEST(delta_rule_wins_the_overwrite_test) {
    ttt_memory_result heb = measure("linear_attention", 32, 1, 8);
    ttt_memory_result del = measure("deltanet", 32, 1, 8);
    ck_assert_msg(del.accuracy >= 0.95, "delta overwrite accuracy %.3f", del.accuracy);
    ck_assert_msg(heb.accuracy > 0.3 && heb.accuracy < 0.7,
                  "Hebbian overwrite accuracy %.3f, expected a coin flip", heb.accuracy);
}
END_TEST

START_TEST(delta_rule_recalls_small_memories_exactly_enough) {
    ttt_memory_result del = measure("deltanet", 16, 0, 4);
    ck_assert_msg(del.accuracy >= 0.99, "delta accuracy %.3f at N = d/4", del.accuracy);
    /* and degrades past capacity: N = 4d cannot be stored in a d×d memory */
    ttt_memory_result big = measure("deltanet", 256, 0, 2);
    ck_assert_msg(big.accuracy < 0.9, "delta accuracy %.3f at N = 4d", big.accuracy);
}
END_TEST

static Suite *memory_suite(void) {
    Suite *s = suite_create("memory");
    TCase *tc = tcase_create("shape");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, hebbian_error_grows_like_sqrt_n_over_d);
    tcase_add_test(tc, delta_rule_wins_the_overwrite_test);
    tcase_add_test(tc, delta_rule_recalls_small_memories_exactly_enough);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(memory_suite()); }
