/* The host's bfloat16 rounding (src/core/bf16.h), the twin of the device's cast that mixed
 * precision rounds every product operand with (docs/gpu.md "bfloat16 training";
 * tests/test_train_bf16.c checks the device kernel against it bit for bit).
 *
 * The reference is independent of the bit trick: it brackets x between the two bfloat16 values
 * next to it (the truncation toward zero and the next one away from zero), measures both
 * distances in double (exact: every value involved has at most 25 significant bits) and takes
 * the nearer, the one with an even last bit on a tie (IEEE round to nearest, ties to even);
 * beyond the largest finite bf16, the midpoint to 2^128 and above rounds to infinity, as IEEE
 * says. Each case also has a control the comparison must reject: truncation (the rounding a
 * shift would give) and rounding half away from zero. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "autograd.h"
#include "bf16.h"
#include "ops.h"
#include "rng.h"
#include "testutil.h"

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The reference: RN-even (ties = 0), or half away from zero (ties = 1), or truncation (2). */
static uint16_t ref_round(float x, int mode) {
    const uint32_t u = bits_of(x);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40u);
    if (isinf(x)) return (uint16_t)(u >> 16);
    const uint16_t lo = (uint16_t)(u >> 16); /* toward zero */
    if (mode == 2) return lo;
    const uint16_t hi = (uint16_t)(lo + 1); /* away from zero (may be the infinity) */
    const double ax = fabs((double)x), alo = fabs((double)ttt_bf16_to_float(lo));
    /* the value after the largest finite one is 2^128 for rounding purposes */
    const double ahi = (hi & 0x7fffu) == 0x7f80u ? ldexp(1.0, 128)
                                                 : fabs((double)ttt_bf16_to_float(hi));
    const double dlo = ax - alo, dhi = ahi - ax;
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    if (mode == 1) return hi;
    return (lo & 1u) ? hi : lo;
}

START_TEST(chosen_values_round_to_nearest_even) {
    static const struct {
        uint32_t in;
        uint16_t out;
        const char *why;
    } cases[] = {
        {0x3f800000u, 0x3f80u, "1 is a bf16"},
        {0x3f808000u, 0x3f80u, "1 + 2^-8: the tie between 1 and 1 + 2^-7 goes to even 1"},
        {0x3f818000u, 0x3f82u, "1 + 3·2^-8: the tie goes to even 1 + 2^-6"},
        {0x3f808001u, 0x3f81u, "just above the tie rounds up"},
        {0x3f807fffu, 0x3f80u, "just below the tie rounds down"},
        {0xbf808001u, 0xbf81u, "negative: the magnitude rounds"},
        {0x3fffffffu, 0x4000u, "the carry out of the fraction raises the exponent"},
        {0x7f7f7fffu, 0x7f7fu, "below the midpoint to 2^128: the largest finite bf16"},
        {0x7f7f8000u, 0x7f80u, "the midpoint to 2^128 (odd kept part) rounds to infinity"},
        {0x7f7fffffu, 0x7f80u, "FLT_MAX overflows to infinity"},
        {0xff7fffffu, 0xff80u, "-FLT_MAX to -infinity"},
        {0x7f800000u, 0x7f80u, "infinity stays"},
        {0x00000000u, 0x0000u, "zero"},
        {0x80000000u, 0x8000u, "negative zero keeps its sign"},
        {0x00008000u, 0x0000u, "a subnormal tie goes to even 0"},
        {0x00018000u, 0x0002u, "a subnormal tie goes to even 2"},
        {0x007fffffu, 0x0080u, "the largest subnormal rounds to the smallest normal"},
        {0x7fc00000u, 0x7fc0u, "a quiet NaN stays"},
        {0x7f800001u, 0x7fc0u, "a signalling NaN with low payload stays a NaN (not infinity)"},
        {0xffffffffu, 0xffffu, "a NaN with every bit set keeps its sign and stays a NaN"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = ttt_bf16_from_float(from_bits(cases[i].in));
        ck_assert_msg(got == cases[i].out, "0x%08x: 0x%04x, expected 0x%04x (%s)", cases[i].in,
                      got, cases[i].out, cases[i].why);
        const uint16_t ref = ref_round(from_bits(cases[i].in), 0);
        ck_assert_msg(ref == cases[i].out, "the reference: 0x%08x -> 0x%04x (%s)", cases[i].in,
                      ref, cases[i].why);
    }
    /* controls: truncation and half-away-from-zero get some of these wrong */
    int trunc_wrong = 0, away_wrong = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        trunc_wrong += ref_round(from_bits(cases[i].in), 2) != cases[i].out;
        away_wrong += ref_round(from_bits(cases[i].in), 1) != cases[i].out;
    }
    ck_assert_int_ge(trunc_wrong, 5);
    ck_assert_int_ge(away_wrong, 2);
    /* widening is exact and round-trips */
    ck_assert(ttt_bf16_to_float(0x3f81u) == 1.0f + 0x1p-7f);
    ck_assert(ttt_bf16_round(1.0f + 0x1p-8f) == 1.0f);
}
END_TEST

/* Every float of a stride through all 2^32 bit patterns (the stride odd, so every low-bit
 * pattern is met) and random ones: the same bits as the reference, and within the unit
 * roundoff u = 2^-8 of x where x is normal and the result finite. */
START_TEST(all_floats_sampled_match_the_reference) {
    ttt_rng r;
    ttt_rng_seed(&r, 11);
    long n = 0, trunc_differs = 0;
    double worst_rel = 0;
    for (uint64_t k = 0; k < (1ull << 32); k += 1021) {
        const uint32_t u = (uint32_t)k ^ (uint32_t)(ttt_rng_u64(&r) & 0xffu);
        const float x = from_bits(u);
        const uint16_t got = ttt_bf16_from_float(x), ref = ref_round(x, 0);
        if (isnan(x)) {
            ck_assert_msg(isnan(ttt_bf16_to_float(got)) && (got & 0x8000u) == (ref & 0x8000u),
                          "NaN 0x%08x -> 0x%04x", u, got);
        } else {
            ck_assert_msg(got == ref, "0x%08x (%.9g): 0x%04x, the reference 0x%04x", u,
                          (double)x, got, ref);
        }
        if (isnormal(x) && isfinite(ttt_bf16_to_float(got))) {
            const double rel = fabs((double)ttt_bf16_to_float(got) - x) / fabs((double)x);
            if (rel > worst_rel) worst_rel = rel;
        }
        trunc_differs += !isnan(x) && ref_round(x, 2) != got;
        n++;
    }
    printf("%ld floats: worst relative rounding %.6g (u = 2^-8 = %.6g)\n", n, worst_rel,
           0x1p-8);
    TU_ASSERT_LE(worst_rel, 0x1p-8, "rounding error %.3g beyond u", worst_rel);
    /* control: truncation is not this rounding (about half the values differ) */
    ck_assert_msg(trunc_differs > n / 4, "truncation agreed on %ld of %ld", n - trunc_differs,
                  n);
}
END_TEST

/* The host's products under ttt_ctx.mixed (src/core/ops.c, the stand-in of test_train_bf16's
 * self mode): C = A·Bᵀ and its gradients dA = dC·B, dB = dCᵀ·A are the fp32 products of the
 * bf16-rounded operands — the same bits as the plain products of rounded copies (the same sgemm
 * on the same values). Control: the plain product of the unrounded operands differs. */
START_TEST(host_mixed_products_round_every_operand) {
    enum { M = 5, K = 7, N = 3 };
    float a[M * K], b[N * K], dc[M * N], ar[M * K], br[N * K], dcr[M * N];
    ttt_rng r;
    ttt_rng_seed(&r, 4);
    for (int i = 0; i < M * K; i++) ar[i] = ttt_bf16_round(a[i] = (float)ttt_rng_uniform(&r));
    for (int i = 0; i < N * K; i++) br[i] = ttt_bf16_round(b[i] = (float)ttt_rng_uniform(&r));
    for (int i = 0; i < M * N; i++) dcr[i] = ttt_bf16_round(dc[i] = (float)ttt_rng_uniform(&r));
    float got[3][M * K], want[3][M * K], raw[M * N];
    for (int mode = 0; mode < 2; mode++) { /* 0: mixed on the raw values; 1: plain on rounded */
        ttt_arena arena;
        ttt_arena_init(&arena, 0);
        ttt_tape tape;
        ttt_tape_init(&tape);
        static const ttt_mixed mixed = {0};
        ttt_ctx ctx = {.arena = &arena, .grad = 1, .tape = &tape, .mixed = mode ? NULL : &mixed};
        float ga[M * K], gb[N * K];
        ttt_tensor A = ttt_tensor_view(mode ? ar : a, 2, (int[]){M, K});
        ttt_tensor B = ttt_tensor_view(mode ? br : b, 2, (int[]){N, K});
        ttt_tensor_set_param(&A, ga);
        ttt_tensor_set_param(&B, gb);
        ttt_tensor_grad_overwrite(&A);
        ttt_tensor_grad_overwrite(&B);
        ttt_tensor *C = ttt_matmul(&ctx, &A, 0, &B, 1);
        ttt_backward_from(&ctx, C, mode ? dcr : dc);
        float(*out)[M * K] = mode ? want : got;
        memcpy(out[0], C->data, sizeof(float) * M * N);
        memcpy(out[1], ga, sizeof ga);
        memcpy(out[2], gb, sizeof gb);
        if (mode) { /* control: the plain product of the raw operands */
            ctx.grad = 0;
            ttt_tensor Ar = ttt_tensor_view(a, 2, (int[]){M, K});
            ttt_tensor Br = ttt_tensor_view(b, 2, (int[]){N, K});
            memcpy(raw, ttt_matmul(&ctx, &Ar, 0, &Br, 1)->data, sizeof raw);
        }
        ttt_tape_free(&tape);
        ttt_arena_free(&arena);
    }
    ck_assert_msg(memcmp(got[0], want[0], sizeof(float) * M * N) == 0, "C differs");
    ck_assert_msg(memcmp(got[1], want[1], sizeof(float) * M * K) == 0, "dA differs");
    ck_assert_msg(memcmp(got[2], want[2], sizeof(float) * N * K) == 0, "dB differs");
    ck_assert_msg(memcmp(raw, want[0], sizeof raw) != 0, "the control equals the rounded product");
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("bf16");
    TCase *c = tcase_create("bf16");
    tcase_set_timeout(c, 120);
    tcase_add_test(c, chosen_values_round_to_nearest_even);
    tcase_add_test(c, all_floats_sampled_match_the_reference);
    tcase_add_test(c, host_mixed_products_round_every_operand);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run(suite()); }
