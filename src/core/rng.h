/* The project's seeded random number generator (xoshiro256**, seeded through splitmix64).
 * Every random draw in ttt comes from here, never from rand(): same seed, same bits, on any
 * machine. Streams for independent purposes are derived with ttt_rng_fork so that adding draws
 * to one part of a program does not shift the numbers another part sees. */
#ifndef TTT_RNG_H
#define TTT_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct ttt_rng {
    uint64_t s[4];
} ttt_rng;

void ttt_rng_seed(ttt_rng *r, uint64_t seed);
/* An independent stream identified by `stream` (e.g. a hash of a purpose name or an index). */
ttt_rng ttt_rng_fork(const ttt_rng *r, uint64_t stream);
uint64_t ttt_rng_u64(ttt_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double ttt_rng_uniform(ttt_rng *r);
/* Standard normal (Box–Muller, both values used in turn is NOT done: one draw per call keeps
 * streams simple to reason about). */
double ttt_rng_normal(ttt_rng *r);
/* Uniform integer in [0, n), unbiased (rejection). n must be > 0. */
uint64_t ttt_rng_below(ttt_rng *r, uint64_t n);
/* out[i] ~ N(mean, std^2) as float. */
void ttt_rng_fill_normal(ttt_rng *r, float *out, size_t n, float mean, float std);
void ttt_rng_fill_uniform(ttt_rng *r, float *out, size_t n, float lo, float hi);
/* A uniformly random permutation of 0..n-1 (Fisher–Yates). */
void ttt_rng_permutation(ttt_rng *r, int *out, int n);
/* FNV-1a hash of a string, for naming fork streams. */
uint64_t ttt_hash_str(const char *s);

#endif
