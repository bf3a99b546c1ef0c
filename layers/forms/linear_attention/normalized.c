/* Normalized linear attention and RMS post-normalization, docs/math.md §4, §6.9 (see normalized.h). */
#include "normalized.h"

#include <math.h>
#include <string.h>

#include "kernels.h"

static inline float elu1(float x) { return x > 0.0f ? x + 1.0f : expf(x); } /* φ = elu + 1 */

void ttt_normalized_la_recurrent(float *o, float *S, float *z, const float *q, const float *k,
                                 const float *v, int T, int d_k, int d_v, float eps) {
    for (int t = 0; t < T; t++) {
        const float *qt = q + (size_t)t * d_k, *kt = k + (size_t)t * d_k;
        const float *vt = v + (size_t)t * d_v;
        float *ot = o + (size_t)t * d_v;
        /* S += φ(k_t)ᵀ v_t, z += φ(k_t) */
        for (int i = 0; i < d_k; i++) {
            const float pk = elu1(kt[i]);
            float *Si = S + (size_t)i * d_v;
            z[i] += pk;
            for (int j = 0; j < d_v; j++) Si[j] += pk * vt[j];
        }
        /* o_t = φ(q_t) S / (φ(q_t)·z + eps) */
        float den = 0.0f;
        for (int j = 0; j < d_v; j++) ot[j] = 0.0f;
        for (int i = 0; i < d_k; i++) {
            const float pq = elu1(qt[i]);
            const float *Si = S + (size_t)i * d_v;
            den += pq * z[i];
            for (int j = 0; j < d_v; j++) ot[j] += pq * Si[j];
        }
        const float inv = 1.0f / (den + eps);
        for (int j = 0; j < d_v; j++) ot[j] *= inv;
    }
}

void ttt_normalized_la_chunkwise(ttt_ctx *ctx, float *o, float *S, float *z, const float *q,
                                 const float *k, const float *v, int T, int d_k, int d_v,
                                 int chunk, float eps) {
    if (T <= 0) return;
    const int da = d_v + 1; /* augmented value width: [v | 1] */
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    float *pq = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)T * d_k); /* (T, d_k) φ(q) */
    float *pk = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)T * d_k); /* (T, d_k) φ(k) */
    float *va = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)T * da);  /* (T, d_v+1) */
    float *oa = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)T * da);  /* (T, d_v+1) */
    float *Sa = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)d_k * da); /* [S | z] */
    TTT_ASSERT(pq && pk && va && oa && Sa);
    for (size_t i = 0; i < (size_t)T * d_k; i++) {
        pq[i] = elu1(q[i]);
        pk[i] = elu1(k[i]);
    }
    for (int t = 0; t < T; t++) {
        memcpy(va + (size_t)t * da, v + (size_t)t * d_v, sizeof(float) * (size_t)d_v);
        va[(size_t)t * da + d_v] = 1.0f;
    }
    for (int i = 0; i < d_k; i++) {
        memcpy(Sa + (size_t)i * da, S + (size_t)i * d_v, sizeof(float) * (size_t)d_v);
        Sa[(size_t)i * da + d_v] = z[i];
    }
    ttt_linear_attention_chunkwise(ctx, oa, Sa, pq, pk, va, NULL, NULL, 0, T, d_k, da, chunk);
    for (int t = 0; t < T; t++) {
        const float *ot = oa + (size_t)t * da;
        const float inv = 1.0f / (ot[d_v] + eps);
        for (int j = 0; j < d_v; j++) o[(size_t)t * d_v + j] = ot[j] * inv;
    }
    for (int i = 0; i < d_k; i++) {
        memcpy(S + (size_t)i * d_v, Sa + (size_t)i * da, sizeof(float) * (size_t)d_v);
        z[i] = Sa[(size_t)i * da + d_v];
    }
    ttt_arena_release(ctx->arena, mark);
}

void ttt_rms_postnorm(float *out, const float *x, int T, int d, float eps) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * d;
        float *yt = out + (size_t)t * d;
        double ss = 0.0;
        for (int j = 0; j < d; j++) ss += (double)xt[j] * xt[j];
        const float r = (float)(1.0 / sqrt(ss / d + (double)eps));
        for (int j = 0; j < d; j++) yt[j] = xt[j] * r;
    }
}
