/* A float exponential the compiler can vectorize (no library call, no branch), for the gate
 * factors of the chunkwise forms (layers/forms/linear_attention/chunkwise.c, layers/forms/delta_rule/chunkwise.c): C² or C·d_k of them
 * per chunk, which through libm's scalar exp/expf took ~8 % (gated delta rule) to ~30 % (GLA) of a
 * chunk's time at d = 128, C = 64.
 *
 * exp(x) = 2^n · exp(r), n = round(x / ln 2), r = x − n ln 2 split in two constants (Cody–Waite,
 * exact for |n| ≤ 2^11), |r| ≤ ln2/2, exp(r) by its Taylor polynomial of degree 7 (truncation
 * error r^8/8! ≤ 5.6e-9 relative, under one float ulp), 2^n built in the exponent bits. Accuracy:
 * ≤ 2 ulp over [−87, 88] (the polynomial's rounding plus r's). Below −87 it returns 0 (exp is
 * ≤ 1.6e-38 there: what multiplies it underflows in float32 anyway); above 88 it saturates at
 * e^88 (gates are retentions ≤ 1, so arguments are ≤ 0 in the forms' use). */
#ifndef TTT_FASTEXP_H
#define TTT_FASTEXP_H

#include <stdint.h>
#include <string.h>

static inline float ttt_fast_expf(float x) {
    /* NaN in, NaN out (and no float-to-int conversion of a NaN below, which is undefined) */
    const float xc = x > 88.0f ? 88.0f : (x < -87.0f ? -87.0f : (x == x ? x : 0.0f));
    /* round(x·log2 e) with the 1.5·2^23 trick (round-to-nearest, exact for |t| < 2^22) */
    const float t = xc * 1.44269504088896341f;
    const float n = (t + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693145751953125f; /* ln 2 high part: 12 bits, n·hi exact */
    r = r - n * 1.428606765330187e-06f;    /* ln 2 − hi */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < -87.0f ? 0.0f : (x == x ? p * scale : x);
}

/* exp of a float64 argument to float accuracy: the argument is rounded to float (g_hi) and the
 * rounding error g_lo = g − g_hi (|g_lo| ≤ 2^-25 |g|) enters as the factor 1 + g_lo, so the
 * result does not carry the |g|·2^-24 relative error that exp((float)g) would for large |g|. */
static inline float ttt_fast_exp_d(double g) {
    const float hi = (float)g;
    const float lo = (float)(g - (double)hi);
    return ttt_fast_expf(hi) * (1.0f + lo);
}

#endif
