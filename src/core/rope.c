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
