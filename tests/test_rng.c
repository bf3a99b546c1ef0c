/* The seeded generator: same seed, same bits; the published algorithms' outputs; sane
 * distributions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "internal.h"

/* splitmix64 from seed 0 is the widely published sequence e220a8397b1dcdaf, 6e789e6aa1b965f4,
 * 06c45d188009454f, f88bb8a8724c81ec; xoshiro256** outputs below were computed with a separate
 * Python implementation of the published algorithm. */
START_TEST(seed_expansion_and_first_outputs_match_reference) {
    ttt_rng r;
    ttt_rng_seed(&r, 0);
    ck_assert_uint_eq(r.s[0], 0xe220a8397b1dcdafULL);
    ck_assert_uint_eq(r.s[1], 0x6e789e6aa1b965f4ULL);
    ck_assert_uint_eq(r.s[2], 0x06c45d188009454fULL);
    ck_assert_uint_eq(r.s[3], 0xf88bb8a8724c81ecULL);
    ck_assert_uint_eq(ttt_rng_u64(&r), 0x99ec5f36cb75f2b4ULL);
    ck_assert_uint_eq(ttt_rng_u64(&r), 0xbf6e1f784956452aULL);
    ck_assert_uint_eq(ttt_rng_u64(&r), 0x1a5f849d4933e6e0ULL);
    ttt_rng_seed(&r, 42);
    ck_assert_uint_eq(ttt_rng_u64(&r), 0x15780b2e0c2ec716ULL);
}
END_TEST

START_TEST(same_seed_same_bits) {
    ttt_rng a, b, c;
    ttt_rng_seed(&a, 1234);
    ttt_rng_seed(&b, 1234);
    ttt_rng_seed(&c, 1235);
    float xa[1000], xb[1000], xc[1000];
    ttt_rng_fill_normal(&a, xa, 1000, 0, 1);
    ttt_rng_fill_normal(&b, xb, 1000, 0, 1);
    ttt_rng_fill_normal(&c, xc, 1000, 0, 1);
    ck_assert(memcmp(xa, xb, sizeof xa) == 0);
    ck_assert(memcmp(xa, xc, sizeof xa) != 0);
    /* forks are deterministic, distinct per stream, and do not advance the parent */
    ttt_rng p;
    ttt_rng_seed(&p, 7);
    ttt_rng f1 = ttt_rng_fork(&p, 1), f1b = ttt_rng_fork(&p, 1), f2 = ttt_rng_fork(&p, 2);
    ck_assert_uint_eq(ttt_rng_u64(&f1), ttt_rng_u64(&f1b));
    ck_assert_uint_ne(ttt_rng_u64(&f1), ttt_rng_u64(&f2));
    ttt_rng q;
    ttt_rng_seed(&q, 7);
    ck_assert_uint_eq(ttt_rng_u64(&p), ttt_rng_u64(&q));
}
END_TEST

/* Moments within 5 standard errors for 200k draws (a real bug moves them far more). */
START_TEST(distributions_have_the_right_moments) {
    ttt_rng r;
    ttt_rng_seed(&r, 99);
    const int n = 200000;
    double s = 0, s2 = 0, u = 0;
    for (int i = 0; i < n; i++) {
        double x = ttt_rng_normal(&r);
        s += x;
        s2 += x * x;
        double y = ttt_rng_uniform(&r);
        ck_assert(y >= 0.0 && y < 1.0);
        u += y;
    }
    ck_assert_double_le(fabs(s / n), 5.0 / sqrt(n));
    ck_assert_double_le(fabs(s2 / n - 1.0), 5.0 * sqrt(2.0 / n));
    ck_assert_double_le(fabs(u / n - 0.5), 5.0 * sqrt(1.0 / 12 / n));
    int counts[7] = {0};
    for (int i = 0; i < 70000; i++) counts[ttt_rng_below(&r, 7)]++;
    for (int i = 0; i < 7; i++) ck_assert_int_le(abs(counts[i] - 10000), 5 * 95); /* sd ≈ 92.6 */
}
END_TEST

START_TEST(permutation_is_a_permutation) {
    ttt_rng r;
    ttt_rng_seed(&r, 3);
    int p[100], seen[100] = {0}, moved = 0;
    ttt_rng_permutation(&r, p, 100);
    for (int i = 0; i < 100; i++) {
        ck_assert(p[i] >= 0 && p[i] < 100);
        seen[p[i]]++;
        moved += p[i] != i;
    }
    for (int i = 0; i < 100; i++) ck_assert_int_eq(seen[i], 1);
    ck_assert_int_gt(moved, 50);
}
END_TEST

static Suite *rng_suite(void) {
    Suite *s = suite_create("rng");
    TCase *tc = tcase_create("rng");
    tcase_add_test(tc, seed_expansion_and_first_outputs_match_reference);
    tcase_add_test(tc, same_seed_same_bits);
    tcase_add_test(tc, distributions_have_the_right_moments);
    tcase_add_test(tc, permutation_is_a_permutation);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(rng_suite()); }
