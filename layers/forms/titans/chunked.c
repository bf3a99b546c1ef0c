/* Titans' chunked momentum for the linear model and the squared loss (docs/math.md §3 "momentum",
 * §6 item 5): the recurrence the generic driver runs with optimizer `momentum`,
 * `steps: per_token`, mini_batch C and decoupled decay, computed chunk by chunk with matmuls.
 *
 * Inside a chunk starting at (S_0, M_in), token i (from 0) has the gradient at the chunk start
 * g_i = η_i k_iᵀ e_i, e_i = k_i S_0 − v_i, and
 *     M_i = μ M_{i−1} − θ g_i,        S_i = α_i S_{i−1} + M_i,        o_i = q_i S_i.
 * Unrolling both recurrences (A_i = α_0 ⋯ α_i, so A_i/A_j = exp(G_i − G_j) with G the cumulative
 * log gate inside the chunk):
 *     M_i = μ^{i+1} M_in − θ Σ_{s≤i} μ^{i−s} g_s
 *     S_i = A_i S_0 + c_i M_in − θ Σ_{s≤i} D_is g_s
 *     c_i = Σ_{j≤i} (A_i/A_j) μ^{j+1},      D_is = Σ_{j=s..i} (A_i/A_j) μ^{j−s}
 * so that, with E the rows e_s scaled by η_s,
 *     O = diag(A) Q S_0 + diag(c) Q M_in − θ ((Q Kᵀ) ⊙ D) E
 *     S_end = A_{n−1} S_0 + c_{n−1} M_in − θ (D_{n−1,·} ⊙ K)ᵀ E
 *     M_end = μ^n M_in − θ (μ^{n−1−s} ⊙ K)ᵀ E.
 * c and D follow c_i = α_i c_{i−1} + μ^{i+1} and D_ss = 1, D_is = α_i D_{i−1,s} + μ^{i−s}: only
 * products of retentions ≤ 1 and no division, so nothing can overflow, and an underflow to zero
 * is the correct limit (docs/math.md §0 asks for log space where products could blow up; here A_i is
 * formed from the log-space G directly). */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "ops.h"

void ttt_momentum_chunked(ttt_ctx *ctx, float *o, float *S, float *M, const float *q,
                          const float *k, const float *v, const float *eta,
                          const float *log_alpha, float theta, float mu, int T, int d_k, int d_v,
                          int chunk) {
    TTT_ASSERT(chunk >= 1);
    if (T <= 0) return;
    if (chunk > T) chunk = T; /* one chunk holds the whole sequence */
    ttt_arena_mark mark0 = ttt_arena_mark_get(ctx->arena);
    /* per-chunk coefficient scratch, sized for a full chunk */
    double *Gl = ttt_arena_alloc(ctx->arena, sizeof(double) * (size_t)chunk);       /* log A_i */
    double *pw = ttt_arena_alloc(ctx->arena, sizeof(double) * (size_t)(chunk + 1)); /* μ^m */
    double *cc = ttt_arena_alloc(ctx->arena, sizeof(double) * (size_t)chunk);       /* c_i */
    TTT_ASSERT(Gl && pw && cc);
    pw[0] = 1.0; /* μ^0 = 1 also for μ = 0: the fresh gradient enters undamped */
    for (int m = 1; m <= chunk; m++) pw[m] = pw[m - 1] * mu;
    ttt_tensor S0 = ttt_tensor_view2(S, d_k, d_v); /* (d_k, d_v) state, in/out */
    ttt_tensor M0 = ttt_tensor_view2(M, d_k, d_v); /* (d_k, d_v) momentum, in/out */

    for (int t0 = 0; t0 < T; t0 += chunk) {
        const int n = t0 + chunk <= T ? chunk : T - t0;
        ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
        ttt_tensor Qc = ttt_tensor_view2((float *)q + (size_t)t0 * d_k, n, d_k); /* (n, d_k) */
        ttt_tensor Kc = ttt_tensor_view2((float *)k + (size_t)t0 * d_k, n, d_k); /* (n, d_k) */
        ttt_tensor Vc = ttt_tensor_view2((float *)v + (size_t)t0 * d_v, n, d_v); /* (n, d_v) */

        /* chunk coefficients: A_i, c_i, D (n, n), and the last-row / momentum key weights */
        double acc = 0.0;
        for (int i = 0; i < n; i++) {
            acc += log_alpha ? (double)log_alpha[t0 + i] : 0.0;
            Gl[i] = acc;
        }
        ttt_tensor *D = ttt_tensor_2d(ctx, n, n);     /* D_is, zero above the diagonal */
        ttt_tensor *a_row = ttt_tensor_1d(ctx, n);    /* A_i */
        ttt_tensor *c_row = ttt_tensor_1d(ctx, n);    /* c_i */
        ttt_tensor *w_mom = ttt_tensor_1d(ctx, n);    /* θ μ^{n−1−s} */
        ttt_tensor *w_state = ttt_tensor_1d(ctx, n);  /* θ D_{n−1,s} */
        ttt_tensor_fill(D, 0.0f);
        double cprev = 0.0;
        for (int i = 0; i < n; i++) {
            const double ai = log_alpha ? exp((double)log_alpha[t0 + i]) : 1.0; /* α_i */
            cc[i] = ai * cprev + pw[i + 1];
            cprev = cc[i];
            a_row->data[i] = (float)exp(Gl[i]);
            c_row->data[i] = (float)cc[i];
        }
        /* D row by row in double: D_is = α_i D_{i−1,s} + μ^{i−s} */
        double *Dd = ttt_arena_alloc(ctx->arena, sizeof(double) * (size_t)n * n); /* (n, n) */
        TTT_ASSERT(Dd != NULL);
        for (int i = 0; i < n; i++) {
            const double ai = log_alpha ? exp((double)log_alpha[t0 + i]) : 1.0; /* α_i */
            for (int s = 0; s < i; s++)
                Dd[(size_t)i * n + s] = ai * Dd[(size_t)(i - 1) * n + s] + pw[i - s];
            Dd[(size_t)i * n + i] = 1.0;
            for (int s = 0; s <= i; s++) D->data[(size_t)i * n + s] = (float)Dd[(size_t)i * n + s];
        }
        for (int s = 0; s < n; s++) {
            w_mom->data[s] = (float)(theta * pw[n - 1 - s]);
            w_state->data[s] = (float)(theta * Dd[(size_t)(n - 1) * n + s]);
        }

        /* E = diag(η)(K S_0 − V): the chunk's loss gradients at its start, one matmul */
        ttt_tensor *E = ttt_gemm(ctx, 1.0f, &Kc, 0, &S0, 0, -1.0f, &Vc); /* (n, d_v) */
        if (eta) {
            ttt_tensor et = ttt_tensor_view((float *)eta + t0, 1, (int[]){n});
            E = ttt_scale_rows(ctx, E, &et);
        }
        /* O = diag(A) Q S_0 + diag(c) Q M_in − θ ((Q Kᵀ) ⊙ D) E */
        ttt_tensor *P = ttt_mul(ctx, ttt_matmul(ctx, &Qc, 0, &Kc, 1), D); /* (n, n) */
        ttt_tensor *O = ttt_scale_rows(ctx, ttt_matmul(ctx, &Qc, 0, &S0, 0), a_row);
        O = ttt_add(ctx, O, ttt_scale_rows(ctx, ttt_matmul(ctx, &Qc, 0, &M0, 0), c_row));
        O = ttt_gemm(ctx, -theta, P, 0, E, 0, 1.0f, O); /* (n, d_v) */
        memcpy(o + (size_t)t0 * d_v, O->data, O->n * sizeof(float));

        /* end-of-chunk state and momentum (both from the chunk-start values) */
        ttt_tensor *Sn = ttt_axpby(ctx, a_row->data[n - 1], &S0, c_row->data[n - 1], &M0);
        Sn = ttt_gemm(ctx, -1.0f, ttt_scale_rows(ctx, &Kc, w_state), 1, E, 0, 1.0f, Sn);
        ttt_tensor *Mn = ttt_scale(ctx, &M0, (float)pw[n]);
        Mn = ttt_gemm(ctx, -1.0f, ttt_scale_rows(ctx, &Kc, w_mom), 1, E, 0, 1.0f, Mn);
        memcpy(S, Sn->data, Sn->n * sizeof(float));
        memcpy(M, Mn->data, Mn->n * sizeof(float));
        ttt_arena_release(ctx->arena, mark);
    }
    ttt_arena_release(ctx->arena, mark0);
}
