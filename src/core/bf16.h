/* bfloat16 on the host (docs/gpu.md "bfloat16 training"): the 16 high bits of a float32 (sign,
 * the 8 exponent bits, 7 fraction bits: 8 significant bits, unit roundoff u = 2^-8). The host
 * twin of the device's cast (src/core/cuda/ops_blas.cu to_bf16), the same operations in the same
 * order, so that tests compare the two bit for bit and references round as the device does. */
#ifndef TTT_BF16_H
#define TTT_BF16_H

#include <stdint.h>
#include <string.h>

/* x rounded to the nearest bfloat16, ties to even (IEEE's default rounding): adding 0x7fff plus
 * the kept part's lowest bit to the bits carries into the kept part exactly when the dropped
 * half is above the midpoint, or at it with an odd kept part; a carry out of the fraction
 * raises the exponent (1.11…1 → 2.0, the largest finite value → infinity), as rounding does.
 * A NaN stays a NaN, quiet (fraction bit 6 set), with its sign: the addition could carry it
 * into infinity. */
static inline uint16_t ttt_bf16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The float32 of a bfloat16 (exact). */
static inline float ttt_bf16_to_float(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x rounded to bfloat16 and back: the value a bf16 operand holds. */
static inline float ttt_bf16_round(float x) { return ttt_bf16_to_float(ttt_bf16_from_float(x)); }

#endif
