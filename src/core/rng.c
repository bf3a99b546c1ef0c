#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void ttt_rng_seed(ttt_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ttt_rng_u64(ttt_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

ttt_rng ttt_rng_fork(const ttt_rng *r, uint64_t stream) {
    /* Mix the parent state with the stream id through splitmix64; the parent is not advanced. */
    uint64_t x = r->s[0] ^ rotl(r->s[1], 17) ^ rotl(r->s[2], 31) ^ rotl(r->s[3], 47) ^
                 (stream * 0xD1B54A32D192ED03ULL);
    ttt_rng c;
    for (int i = 0; i < 4; i++) c.s[i] = splitmix64(&x);
    return c;
}

double ttt_rng_uniform(ttt_rng *r) { return (double)(ttt_rng_u64(r) >> 11) * 0x1.0p-53; }

double ttt_rng_normal(ttt_rng *r) {
    double u1 = ttt_rng_uniform(r), u2 = ttt_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t ttt_rng_below(ttt_rng *r, uint64_t n) {
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = ttt_rng_u64(r);
    while (x >= lim);
    return x % n;
}

void ttt_rng_fill_normal(ttt_rng *r, float *out, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i++) out[i] = mean + std * (float)ttt_rng_normal(r);
}

void ttt_rng_fill_uniform(ttt_rng *r, float *out, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) out[i] = lo + (hi - lo) * (float)ttt_rng_uniform(r);
}

void ttt_rng_permutation(ttt_rng *r, int *out, int n) {
    for (int i = 0; i < n; i++) out[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)ttt_rng_below(r, (uint64_t)i + 1);
        int t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

uint64_t ttt_hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}
