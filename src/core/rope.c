/* Rotary position embedding, docs/math.md §4 "RoPE"; convention and numerics in rope.h. */
#include "rope.h"

#include <math.h>
#include <stddef.h>

void ttt_rope_apply(float *out, const float *x, int T, int d, int pos0, float base) {
    const int half = d / 2;
    for (int i = 0; i < half; i++) {
        const double w = pow((double)base, -2.0 * i / (double)d); /* ω_i = base^{−2i/d} */
        for (int t = 0; t < T; t++) {
            const double a = ((double)pos0 + (double)t) * w; /* angle in float64 */
            const double c = cos(a), s = sin(a);
            const float *xt = x + (size_t)t * d + 2 * i;
            float *yt = out + (size_t)t * d + 2 * i;
            const double x0 = xt[0], x1 = xt[1];
            yt[0] = (float)(x0 * c - x1 * s);
            yt[1] = (float)(x0 * s + x1 * c);
        }
    }
    if (d % 2 && out != x)
        for (int t = 0; t < T; t++) out[(size_t)t * d + d - 1] = x[(size_t)t * d + d - 1];
}

/* The inverse rotation (rope.h), computed directly rather than as ttt_rope_apply at −p into a
 * row buffer, so that no buffer bounds d; cos(−a) = cos a and sin(−a) = −sin a hold exactly, so
 * both ways give the same bits. */
void ttt_rope_inverse_add(float *out, const float *dy, int T, int d, int pos0, float base) {
    const int half = d / 2;
    for (int i = 0; i < half; i++) {
        const double w = pow((double)base, -2.0 * i / (double)d); /* ω_i = base^{−2i/d} */
        for (int t = 0; t < T; t++) {
            const double a = ((double)pos0 + (double)t) * w;
            const double c = cos(a), s = sin(a);
            const float *g = dy + (size_t)t * d + 2 * i;
            float *o = out + (size_t)t * d + 2 * i;
            /* [y0 y1] = [x0 x1] [[c, s], [−s, c]]  ⇒  [x0 x1] = [y0 y1] [[c, −s], [s, c]] */
            o[0] += (float)(g[0] * c + g[1] * s);
            o[1] += (float)(-g[0] * s + g[1] * c);
        }
    }
    if (d % 2)
        for (int t = 0; t < T; t++) out[(size_t)t * d + d - 1] += dy[(size_t)t * d + d - 1];
}
