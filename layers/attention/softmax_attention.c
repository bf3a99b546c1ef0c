/* Causal softmax attention and its forget-gate form (FoX), docs/math.md §4 "Quadratic baselines".
 * Tiling and numerics are described in softmax_attention.h. */
#include "softmax_attention.h"

#include "blas.h"
#include <math.h>
#include <string.h>

#define SA_TILE 64 /* query rows per tile */

void ttt_softmax_attention(ttt_ctx *ctx, float *o, const float *q, const float *k,
                           const float *v, const float *log_alpha, float scale, int T, int d_k,
                           int d_v) {
    TTT_ASSERT(T >= 0 && d_k >= 1 && d_v >= 1);
    if (T == 0) return;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    const int B = T < SA_TILE ? T : SA_TILE;
    float *P = ttt_arena_alloc(ctx->arena, sizeof(float) * (size_t)B * T); /* (B, T) */
    TTT_ASSERT(P != NULL);
    double *G = NULL; /* (T) cumulative log gates */
    if (log_alpha) {
        G = ttt_arena_alloc(ctx->arena, sizeof(double) * (size_t)T);
        TTT_ASSERT(G != NULL);
        double g = 0.0;
        for (int t = 0; t < T; t++) G[t] = g += (double)log_alpha[t];
    }
    for (int i0 = 0; i0 < T; i0 += B) {
        const int m = i0 + B <= T ? B : T - i0; /* rows in this tile */
        const int nk = i0 + m;                  /* keys the tile can see */
        /* scores: scale · Q_tile K[0:nk]ᵀ, (m, nk) with leading dimension nk */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nk, d_k, scale,
                    q + (size_t)i0 * d_k, d_k, k, d_k, 0.0f, P, nk);
        for (int r = 0; r < m; r++) {
            const int i = i0 + r;
            float *p = P + (size_t)r * nk;
            if (G)
                for (int j = 0; j <= i; j++) p[j] += (float)(G[i] - G[j]); /* log Γ_ij */
            float mx = p[0];
            for (int j = 1; j <= i; j++) mx = p[j] > mx ? p[j] : mx;
            double sum = 0.0;
            for (int j = 0; j <= i; j++) {
                p[j] = expf(p[j] - mx);
                sum += p[j];
            }
            const float inv = (float)(1.0 / sum); /* sum ≥ 1: the max term is exp(0) */
            for (int j = 0; j <= i; j++) p[j] *= inv;
            if (i + 1 < nk) memset(p + i + 1, 0, sizeof(float) * (size_t)(nk - i - 1));
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d_v, nk, 1.0f, P, nk, v, d_v,
                    0.0f, o + (size_t)i0 * d_v, d_v);
    }
    ttt_arena_release(ctx->arena, mark);
}
