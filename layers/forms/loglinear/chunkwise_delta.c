/* The log-linear (gated) delta rule in chunks (docs/math.md §4.8 "Forms", the chunkwise form of
 * log-linear Gated DeltaNet): chunks of C = 2^c tokens aligned to absolute positions, as the
 * chunked log-linear Mamba-2 (chunkwise.c), with the delta rule's transitions in the WY form of
 * the ordinary chunkwise delta rule (docs/math.md §5.3).
 *
 * Every level takes the same step, S ← A_t S + [ℓ = 0] β_t k_tᵀ v_t with A_t = α_t (I − β_t
 * k_tᵀ k_t), and merges are sums, so within a chunk (tokens i, j = 0 … n − 1, G_i = Σ_{s≤i}
 * log α_s floored at resets) a level that starts at X and takes the writes w_j (v_j on level 0,
 * else 0) is
 *     S_i = e^{G_i} X + Σ_{j≤i} e^{G_i − G_j} β_j k_jᵀ e_j,
 *     (I + L) E = W − Diag(e^{G}) K X,     L[i, j] = e^{G_i − G_j} β_j (k_i · k_j)  (j < i),
 * e_j the step's residual. With T = (I + L)⁻¹ (the chunk's transitions in WY form, one
 * triangular inverse shared by every level):
 *   - levels ℓ > c (every token of the chunk reads the earlier tokens there, and no merge inside
 *     the chunk reaches them; chunkwise.c): E^ℓ = −T Diag(e^G) K S^ℓ, the read
 *     o_i += e^{G_i} q_i^ℓ S^ℓ + Σ_{j≤i} A^ℓ[i, j] E^ℓ_j with A^ℓ[i, j] = e^{G_i − G_j} β_j
 *     (q_i^ℓ · k_j), and at the chunk's end S^ℓ ← e^{G_{n−1}} S^ℓ + Σ_j e^{G_{n−1} − G_j} β_j
 *     k_jᵀ E^ℓ_j;
 *   - the chunk's own tokens (levels 0 … c, empty at its start): the residuals of the writes are
 *     E = T V, so v_m reaches o_i with the coefficient Σ_{m≤j≤i} A^{ℓ(i, m)}[i, j] T[j, m], the
 *     level that of the source token m (ℓ(i, m) = bitlen(i xor m)): o_intra = M V; at the end,
 *     level ℓ holds the tokens m of level ℓ(n − 1, m) = ℓ (a contiguous run), S^ℓ = Σ_j
 *     e^{G_{n−1} − G_j} β_j k_jᵀ (Σ_{m at ℓ} T[j, m] v_m).
 * L, T, the pair factors and M are float64 (T's substitution chain is where a float32 sum loses
 * most, as in the DPLR chunk); the products with the d_k × d_v levels are float32 GEMMs. The
 * tokens before a call's first aligned chunk, and a chunk whose start leaves levels 0 … c
 * non-empty (a state given from outside), run token by token with the recurrent form's step. */
#include <math.h>
#include <string.h>

#include "composed.h"
#include "fused_grad.h"
#include "kernels.h"
#include "loglinear.h"

typedef struct lld_ws {
    double *G;  /* (C) cumulative floored log α within the chunk */
    double *D;  /* (C, C) e^{G_i − G_j} β_j, j ≤ i */
    double *Td; /* (C, C) L, then T = (I + L)⁻¹ in place */
    double *Md; /* (C, C) the intra-chunk coefficients */
    float *Tf;  /* (C, C) T in float for the GEMMs */
    float *P;   /* (C, C) q^ℓ kᵀ, then a level's A^ℓ */
    float *M;   /* (C, C) Md in float */
    float *R;   /* (C, d_v) −Diag(e^G) K S^ℓ, or a level's Σ_m T[j, m] v_m */
    float *E;   /* (C, d_v) a level's residuals */
    float *Kw;  /* (C, d_k) e^{G_{n−1} − G_j} β_j k_j */
    float *Qs;  /* (C, Λ·d_k) e^{G_i} q_i^ℓ of the levels above c */
    float *e;   /* (d_v) the token step's residual */
} lld_ws;

/* One token of the recurrence, the recurrent form's arithmetic (recurrent.c ll_step with δ =
 * 1): merge, on every level e = [ℓ = 0] v − a (k S), S ← a S + b kᵀ e, then o = Σ_ℓ q^ℓ S^ℓ. */
TTT_FP_CONTRACT static void lld_token(float *o, float *S, long p, const float *q,
                                      const float *k, const float *v, float b, float a, int nl,
                                      int d_k, int d_v, float *e) {
    const size_t dkv = (size_t)d_k * d_v;
    const int m = ttt_ll_merge_target(p, nl);
    for (int l = 0; l < m; l++)
        for (size_t x = 0; x < dkv; x++) {
            S[(size_t)m * dkv + x] += S[(size_t)l * dkv + x];
            S[(size_t)l * dkv + x] = 0.0f;
        }
    for (int l = 0; l < nl; l++) {
        float *Sl = S + (size_t)l * dkv;
        for (int j = 0; j < d_v; j++) e[j] = 0.0f;
        for (int i = 0; i < d_k; i++)
            for (int j = 0; j < d_v; j++) e[j] += k[i] * Sl[(size_t)i * d_v + j];
        for (int j = 0; j < d_v; j++) e[j] = (l ? 0.0f : v[j]) - a * e[j];
        for (int i = 0; i < d_k; i++) {
            const float bki = b * k[i];
            for (int j = 0; j < d_v; j++)
                Sl[(size_t)i * d_v + j] = a * Sl[(size_t)i * d_v + j] + bki * e[j];
        }
    }
    for (int j = 0; j < d_v; j++) o[j] = 0.0f;
    for (int r = 0; r < nl * d_k; r++)
        for (int j = 0; j < d_v; j++) o[j] += q[r] * S[(size_t)r * d_v + j];
}

/* The chunk of n ≤ C tokens at an aligned position, levels 0 … c empty after its first merge
 * (done by the caller): q (n, Λ·d_k), k (n, d_k), v (n, d_v), beta, la (n) or NULL; o (n, d_v)
 * written, S (Λ·d_k, d_v) in/out. */
static void lld_chunk(float *o, float *S, const float *q, const float *k, const float *v,
                      const float *beta, const float *la, int n, int c, int nl, int d_k, int d_v,
                      const lld_ws *w) {
    const size_t dkv = (size_t)d_k * d_v;
    const int Q = nl * d_k, lo = c + 1 < nl ? c + 1 : nl; /* lo: the first level above c */
    double g = 0.0;
    for (int i = 0; i < n; i++) {
        g += la ? (double)ttt_gate_floor(la[i]) : 0.0;
        w->G[i] = g;
    }
    /* the pair factors, L and T = (I + L)⁻¹ (row by row; in row i, entry m is replaced by T's
     * once the entries right of it, still L's, have been used) */
    for (int i = 0; i < n; i++) {
        double *Di = w->D + (size_t)i * n, *Ti = w->Td + (size_t)i * n;
        const float *ki = k + (size_t)i * d_k;
        for (int j = 0; j <= i; j++) {
            Di[j] = exp(w->G[i] - w->G[j]) * (beta ? beta[j] : 1.0f);
            if (j == i) break;
            const float *kj = k + (size_t)j * d_k;
            double s = 0.0;
            for (int x = 0; x < d_k; x++) s += (double)ki[x] * kj[x];
            Ti[j] = Di[j] * s;
        }
        for (int m = 0; m < i; m++) {
            double s = Ti[m];
            for (int r = m + 1; r < i; r++) s += Ti[r] * w->Td[(size_t)r * n + m];
            Ti[m] = -s;
        }
        Ti[i] = 1.0;
        for (int j = i + 1; j < n; j++) Ti[j] = 0.0;
    }
    for (size_t x = 0; x < (size_t)n * n; x++) w->Tf[x] = (float)w->Td[x];
    /* Kw_j = e^{G_{n−1} − G_j} β_j k_j */
    for (int j = 0; j < n; j++) {
        const float f = (float)w->D[(size_t)(n - 1) * n + j];
        for (int x = 0; x < d_k; x++) w->Kw[(size_t)j * d_k + x] = f * k[(size_t)j * d_k + x];
    }
    /* the chunk's own tokens: M[i, m] = Σ_{m≤j≤i} A^{ℓ(i, m)}[i, j] T[j, m], then o = M V */
    memset(w->Md, 0, (size_t)n * n * sizeof(double));
    for (int l = 0; l < lo; l++) {
        ttt_fused_gemm(0, 1, n, n, d_k, 1.0f, q + (size_t)l * d_k, Q, k, d_k, 0.0f, w->P, n);
        for (int i = 0; i < n; i++) {
            const float *Pi = w->P + (size_t)i * n;
            const double *Di = w->D + (size_t)i * n;
            for (int m = 0; m <= i; m++) {
                if (ttt_ll_level(i, m, nl) != l) continue;
                double s = 0.0;
                for (int j = m; j <= i; j++) s += Pi[j] * Di[j] * w->Td[(size_t)j * n + m];
                w->Md[(size_t)i * n + m] = s;
            }
        }
    }
    for (size_t x = 0; x < (size_t)n * n; x++) w->M[x] = (float)w->Md[x];
    ttt_fused_gemm(0, 0, n, d_v, n, 1.0f, w->M, n, v, d_v, 0.0f, o, d_v);
    /* the levels above c */
    if (lo < nl) {
        const int wq = (nl - lo) * d_k;
        for (int i = 0; i < n; i++) {
            const float f = (float)exp(w->G[i]);
            const float *qi = q + (size_t)i * Q + (size_t)lo * d_k;
            for (int r = 0; r < wq; r++) w->Qs[(size_t)i * wq + r] = f * qi[r];
        }
        ttt_fused_gemm(0, 0, n, d_v, wq, 1.0f, w->Qs, wq, S + (size_t)lo * dkv, d_v, 1.0f, o,
                       d_v);
        const double gn = exp(w->G[n - 1]);
        for (int l = lo; l < nl; l++) {
            float *X = S + (size_t)l * dkv;
            /* E = −T Diag(e^G) K X */
            ttt_fused_gemm(0, 0, n, d_v, d_k, 1.0f, k, d_k, X, d_v, 0.0f, w->R, d_v);
            for (int j = 0; j < n; j++) {
                const float f = (float)-exp(w->G[j]);
                for (int x = 0; x < d_v; x++) w->R[(size_t)j * d_v + x] *= f;
            }
            ttt_fused_gemm(0, 0, n, d_v, n, 1.0f, w->Tf, n, w->R, d_v, 0.0f, w->E, d_v);
            /* o += A^ℓ E */
            ttt_fused_gemm(0, 1, n, n, d_k, 1.0f, q + (size_t)l * d_k, Q, k, d_k, 0.0f, w->P, n);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++)
                    w->P[(size_t)i * n + j] =
                        j <= i ? (float)(w->P[(size_t)i * n + j] * w->D[(size_t)i * n + j]) : 0.0f;
            ttt_fused_gemm(0, 0, n, d_v, n, 1.0f, w->P, n, w->E, d_v, 1.0f, o, d_v);
            /* S^ℓ ← e^{G_{n−1}} S^ℓ + Kwᵀ E (the decay rounded per entry, in double: a factor
             * rounded once and applied every chunk would err the same way every chunk) */
            for (size_t x = 0; x < dkv; x++) X[x] = (float)(X[x] * gn);
            ttt_fused_gemm(1, 0, d_k, d_v, n, 1.0f, w->Kw, d_k, w->E, d_v, 1.0f, X, d_v);
        }
    }
    /* levels 0 … c at the end: level ℓ holds the tokens m with ℓ(n − 1, m) = ℓ, a contiguous
     * run [m0, m1); rows j < m0 of T have nothing there */
    for (int l = 0; l < lo; l++) {
        int m0 = -1, m1 = -1;
        for (int m = 0; m < n; m++)
            if (ttt_ll_level(n - 1, m, nl) == l) {
                if (m0 < 0) m0 = m;
                m1 = m + 1;
            }
        float *Sl = S + (size_t)l * dkv;
        if (m0 < 0) { /* empty, as it started */
            memset(Sl, 0, dkv * sizeof(float));
            continue;
        }
        ttt_fused_gemm(0, 0, n - m0, d_v, m1 - m0, 1.0f, w->Tf + (size_t)m0 * n + m0, n,
                       v + (size_t)m0 * d_v, d_v, 0.0f, w->R, d_v);
        ttt_fused_gemm(1, 0, d_k, d_v, n - m0, 1.0f, w->Kw + (size_t)m0 * d_k, d_k, w->R, d_v,
                       0.0f, Sl, d_v);
    }
}

/* The merge of position p (every level is current: the delta rule keeps no pending decay). */
static void lld_merge(float *S, long p, int nl, size_t dkv) {
    const int m = ttt_ll_merge_target(p, nl);
    for (int l = 0; l < m; l++)
        for (size_t x = 0; x < dkv; x++) {
            S[(size_t)m * dkv + x] += S[(size_t)l * dkv + x];
            S[(size_t)l * dkv + x] = 0.0f;
        }
}

static int lld_low_empty(const float *S, int c, int nl, size_t dkv) {
    const int lo = c + 1 < nl ? c + 1 : nl;
    for (size_t x = 0; x < (size_t)lo * dkv; x++)
        if (S[x] != 0.0f) return 0;
    return 1;
}

double ttt_loglinear_delta_chunkwise_scratch(const ttt_layer *L, long T, int C) {
    const double nl = L->levels > 1 ? L->levels : 1, dk = L->d_k, dv = L->d_v;
    /* β (T); in double G (C) and D, Td, Md (C² each); in float Tf, P, M (C² each), R, E (C d_v
     * each), Kw (C d_k), Qs (C Λ d_k), e (d_v); 256 floats for the headers and the arena's
     * alignment */
    return (double)T * sizeof(float) + (C + 3.0 * C * C) * sizeof(double) +
           (3.0 * C * C + 2.0 * C * dv + C * dk + C * nl * dk + dv + 256) * sizeof(float);
}

ttt_status ttt_loglinear_delta_chunkwise(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                         ttt_layer_state *st, const ttt_form_args *a, int c) {
    const int T = TTT_ROWS(a->q), d_k = TTT_COLS(a->k), d_v = TTT_COLS(a->v);
    const int nl = L->levels > 1 ? L->levels : 1, C = 1 << c;
    const size_t dkv = (size_t)d_k * d_v, CC = (size_t)C * C;
    const float *beta = ttt_form_beta_array(ctx, L, a->eta, T);
    const float *la = a->log_alpha ? a->log_alpha->data : NULL;
    const float *q = a->q->data, *k = a->k->data, *v = a->v->data;
    float *S = st->W[0]->data, *out = o->data;
    lld_ws w = {.G = ttt_arena_alloc(ctx->arena, (size_t)C * sizeof(double)),
                .D = ttt_arena_alloc(ctx->arena, CC * sizeof(double)),
                .Td = ttt_arena_alloc(ctx->arena, CC * sizeof(double)),
                .Md = ttt_arena_alloc(ctx->arena, CC * sizeof(double)),
                .Tf = ttt_arena_alloc(ctx->arena, CC * sizeof(float)),
                .P = ttt_arena_alloc(ctx->arena, CC * sizeof(float)),
                .M = ttt_arena_alloc(ctx->arena, CC * sizeof(float)),
                .R = ttt_arena_alloc(ctx->arena, (size_t)C * d_v * sizeof(float)),
                .E = ttt_arena_alloc(ctx->arena, (size_t)C * d_v * sizeof(float)),
                .Kw = ttt_arena_alloc(ctx->arena, (size_t)C * d_k * sizeof(float)),
                .Qs = ttt_arena_alloc(ctx->arena, (size_t)C * nl * d_k * sizeof(float)),
                .e = ttt_arena_alloc(ctx->arena, (size_t)d_v * sizeof(float))};
    TTT_ASSERT(w.G && w.D && w.Td && w.Md && w.Tf && w.P && w.M && w.R && w.E && w.Kw && w.Qs &&
               w.e);
    const long p0 = st->pos;
    int t = 0;
    while (t < T) {
        const long p = p0 + t;
        if (p % C == 0) { /* the merge of the chunk's first position, then the premise */
            lld_merge(S, p, nl, dkv);
            if (lld_low_empty(S, c, nl, dkv)) {
                const int n = T - t < C ? T - t : C;
                lld_chunk(out + (size_t)t * d_v, S, q + (size_t)t * nl * d_k,
                          k + (size_t)t * d_k, v + (size_t)t * d_v, beta ? beta + t : NULL,
                          la ? la + t : NULL, n, c, nl, d_k, d_v, &w);
                t += n;
                continue;
            }
        }
        /* token by token up to the next chunk start (a merge done above is idempotent: the
         * levels below its target are empty) */
        const long next = (p / C + 1) * C;
        for (; t < T && p0 + t < next; t++)
            lld_token(out + (size_t)t * d_v, S, p0 + t, q + (size_t)t * nl * d_k,
                      k + (size_t)t * d_k, v + (size_t)t * d_v, beta ? beta[t] : 1.0f,
                      la ? expf(la[t]) : 1.0f, nl, d_k, d_v, w.e);
    }
    return TTT_OK;
}
