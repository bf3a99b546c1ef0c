/* Eight floats as one GNU vector (32 bytes: one AVX2 register, two SSE ones), for the register
 * blocks of the recurrent kernels (linear_attention/recurrent.c, delta_rule/recurrent.c). */
#ifndef TTT_VEC8_H
#define TTT_VEC8_H

#include <string.h>

typedef float ttt_v8f __attribute__((vector_size(32)));

/* Unaligned loads and stores as memcpy (macros: a function taking or returning a vector type
 * would change the ABI between builds with and without AVX). */
#define TTT_V8_LOAD(x, p) memcpy(&(x), (p), sizeof(ttt_v8f))
#define TTT_V8_STORE(p, x) memcpy((p), &(x), sizeof(ttt_v8f))

#endif
