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
 * non-empty (a state given from outside), run token by token with the recurrent form's step.
 * Under a tape the same chunks run as one custom op whose backward is written by hand (the
 * second half of this file). */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "autograd.h"
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

/* ---- the chunked backward (docs/math.md §4.8 "The chunked backward") ----
 * Chunk by chunk from the last, in float64 from the levels the forward saved at each chunk's
 * start (after that position's merge): the forward's pieces are recomputed (G, the pair factors
 * D, L, T, the pair products q^ℓ · k_j of every level, and per level above c its residuals E^ℓ),
 * and each step of lld_chunk is reversed:
 *   - the chunk's own tokens: dv += Mᵀ dO, dM[i, m] = dO_i · v_m, which reaches the pair
 *     products, D and T through M[i, m] = Σ_j A^{ℓ(i, m)}[i, j] T[j, m];
 *   - each level above c: the read e^{G_i} q_i^ℓ S^ℓ (dq, dG, dS^ℓ), the read A^ℓ E^ℓ (the pair
 *     products, D, dE^ℓ), the end state e^{G_{n−1}} S^ℓ + Σ_j D[n−1, j] k_jᵀ E^ℓ_j, then
 *     E^ℓ = T R^ℓ (dT += dE Rᵀ, dR = Tᵀ dE) and R^ℓ = −Diag(e^G) K S^ℓ;
 *   - levels 0 … c: their end states Σ_j D[n−1, j] k_jᵀ Σ_{m at ℓ} T[j, m] v_m;
 *   - T = (I + L)⁻¹: dL = −Tᵀ dT Tᵀ (strictly lower), L[i, j] = D[i, j] (k_i · k_j);
 *   - D[i, j] = e^{G_i − G_j} β_j: dβ_j, and ±D·dD to G_i and G_j, whose reverse cumulative sum
 *     is ∂L/∂log α (0 at a reset);
 * and the merge before the chunk, S^m += S^0 + … + S^{m−1}, gives dS^ℓ = dS^m for ℓ < m. Levels
 * 0 … c start every chunk empty (the op runs only when they do), so nothing flows to them. The
 * large products are float64 GEMMs. */


static void dgemm(int ta, int tb, int m, int n, int kd, double alpha, const double *A, int lda,
                  const double *B, int ldb, double beta, double *C, int ldc) {
    if (m <= 0 || n <= 0 || kd <= 0) return;
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                n, kd, alpha, A, lda, B, ldb, beta, C, ldc);
}

typedef struct lldb_saved {
    const float *S; /* (nch, Λ·d_k·d_v) the levels at each chunk's start, after its merge */
    long p0;
    int T, nl, d_k, d_v, c;
} lldb_saved;

/* The backward's float64 scratch for chunks of C tokens (lldb_chunk's layout). */
static size_t lldb_doubles(int C, int nl, int d_k, int d_v) {
    const size_t n = (size_t)C, nn = n * n, Q = (size_t)nl * d_k, dkv = (size_t)d_k * d_v;
    /* G, e^G, dG, dβ (n each); D, KK, T, M, dT, dD, dL (n² each); the pair products and their
     * adjoints (2 Λ n²); K, dk, tmp (n d_k each); q, dq (n Λ d_k each); V, dV, dO, R, E, dE,
     * dR, Y (n d_v each); S^ℓ, dS^ℓ, dS' (d_k d_v each) */
    return 4 * n + 7 * nn + 2 * (size_t)nl * nn + 3 * n * d_k + 2 * n * Q + 8 * n * d_v +
           3 * dkv;
}

/* One chunk's backward: dS (Λ·d_k·d_v, float64) the adjoint of the levels after the chunk in,
 * of the levels at its start (after its merge) out; Sx the saved levels at its start; rows of
 * the chunk's inputs; gradients ADDED into gq … gla (any may be NULL). */
static void lldb_chunk(float *gq, float *gk, float *gv, float *gb, float *gla, double *dS,
                       const float *dO, const float *Sx, const float *q, const float *k,
                       const float *v, const float *beta, const float *la, int n, int c, int nl,
                       int d_k, int d_v, double *ws) {
    const size_t nn = (size_t)n * n, dkv = (size_t)d_k * d_v;
    const int Q = nl * d_k, lo = c + 1 < nl ? c + 1 : nl;
    double *G = ws, *eg = G + n, *dG = eg + n, *db = dG + n;
    double *D = db + n, *KK = D + nn, *T = KK + nn, *M = T + nn, *dT = M + nn, *dD = dT + nn,
           *dL = dD + nn;
    double *Pq = dL + nn, *dPq = Pq + (size_t)nl * nn;
    double *Kd = dPq + (size_t)nl * nn, *dk = Kd + (size_t)n * d_k, *tmp = dk + (size_t)n * d_k;
    double *Qd = tmp + (size_t)n * d_k, *dq = Qd + (size_t)n * Q;
    double *Vd = dq + (size_t)n * Q, *dV = Vd + (size_t)n * d_v, *dOd = dV + (size_t)n * d_v;
    double *R = dOd + (size_t)n * d_v, *E = R + (size_t)n * d_v, *dE = E + (size_t)n * d_v;
    double *dR = dE + (size_t)n * d_v, *Y = dR + (size_t)n * d_v;
    double *X = Y + (size_t)n * d_v, *dX = X + dkv, *dXn = dX + dkv;
    /* zero the adjoints */
    memset(dG, 0, 2 * (size_t)n * sizeof(double));
    memset(dT, 0, 3 * nn * sizeof(double));
    memset(dPq, 0, (size_t)nl * nn * sizeof(double));
    memset(dk, 0, (size_t)n * d_k * sizeof(double));
    memset(dq, 0, (size_t)n * Q * sizeof(double));
    memset(dV, 0, (size_t)n * d_v * sizeof(double));
    for (size_t x = 0; x < (size_t)n * d_k; x++) Kd[x] = k[x];
    for (size_t x = 0; x < (size_t)n * Q; x++) Qd[x] = q[x];
    for (size_t x = 0; x < (size_t)n * d_v; x++) Vd[x] = v[x], dOd[x] = dO[x];
    /* the forward's pieces */
    double g = 0.0;
    for (int i = 0; i < n; i++) {
        g += la ? (double)ttt_gate_floor(la[i]) : 0.0;
        G[i] = g;
        eg[i] = exp(g);
    }
    dgemm(0, 1, n, n, d_k, 1.0, Kd, d_k, Kd, d_k, 0.0, KK, n);
    for (int i = 0; i < n; i++) {
        double *Ti = T + (size_t)i * n;
        for (int j = 0; j <= i; j++) D[(size_t)i * n + j] = exp(G[i] - G[j]) * (beta ? beta[j] : 1.0f);
        for (int j = 0; j < i; j++) Ti[j] = D[(size_t)i * n + j] * KK[(size_t)i * n + j];
        for (int m = 0; m < i; m++) {
            double s = Ti[m];
            for (int r = m + 1; r < i; r++) s += Ti[r] * T[(size_t)r * n + m];
            Ti[m] = -s;
        }
        Ti[i] = 1.0;
        for (int j = i + 1; j < n; j++) Ti[j] = 0.0;
    }
    for (int l = 0; l < nl; l++)
        dgemm(0, 1, n, n, d_k, 1.0, Qd + (size_t)l * d_k, Q, Kd, d_k, 0.0, Pq + (size_t)l * nn, n);
    /* the chunk's own tokens: o += M V */
    for (int i = 0; i < n; i++)
        for (int m = 0; m <= i; m++) {
            const int l = ttt_ll_level(i, m, nl);
            const double *Pi = Pq + (size_t)l * nn + (size_t)i * n, *Di = D + (size_t)i * n;
            double s = 0.0;
            for (int j = m; j <= i; j++) s += Pi[j] * Di[j] * T[(size_t)j * n + m];
            M[(size_t)i * n + m] = s;
        }
    for (int i = 0; i < n; i++)
        for (int m = i + 1; m < n; m++) M[(size_t)i * n + m] = 0.0;
    dgemm(1, 0, n, d_v, n, 1.0, M, n, dOd, d_v, 1.0, dV, d_v);
    dgemm(0, 1, n, n, d_v, 1.0, dOd, d_v, Vd, d_v, 0.0, dL, n); /* dM, in dL's place */
    for (int i = 0; i < n; i++)
        for (int m = 0; m <= i; m++) {
            const double dm = dL[(size_t)i * n + m];
            const int l = ttt_ll_level(i, m, nl);
            const double *Pi = Pq + (size_t)l * nn + (size_t)i * n, *Di = D + (size_t)i * n;
            double *dPi = dPq + (size_t)l * nn + (size_t)i * n, *dDi = dD + (size_t)i * n;
            for (int j = m; j <= i; j++) {
                const double tj = T[(size_t)j * n + m];
                dPi[j] += dm * Di[j] * tj;
                dDi[j] += dm * Pi[j] * tj;
                dT[(size_t)j * n + m] += dm * Pi[j] * Di[j];
            }
        }
    /* the levels above c */
    for (int l = lo; l < nl; l++) {
        const float *Xf = Sx + (size_t)l * dkv;
        double *dSl = dS + (size_t)l * dkv;
        const double *Pl = Pq + (size_t)l * nn;
        double *dPl = dPq + (size_t)l * nn;
        for (size_t x = 0; x < dkv; x++) X[x] = Xf[x], dXn[x] = dSl[x], dX[x] = 0.0;
        /* R = −Diag(e^G) K X, E = T R */
        dgemm(0, 0, n, d_v, d_k, 1.0, Kd, d_k, X, d_v, 0.0, R, d_v);
        for (int j = 0; j < n; j++)
            for (int x = 0; x < d_v; x++) R[(size_t)j * d_v + x] *= -eg[j];
        dgemm(0, 0, n, d_v, n, 1.0, T, n, R, d_v, 0.0, E, d_v);
        /* the read e^{G_i} q_i^ℓ X: y = dO Xᵀ */
        dgemm(0, 1, n, d_k, d_v, 1.0, dOd, d_v, X, d_v, 0.0, tmp, d_k);
        for (int i = 0; i < n; i++) {
            const double *yi = tmp + (size_t)i * d_k, *qi = Qd + (size_t)i * Q + (size_t)l * d_k;
            double *dqi = dq + (size_t)i * Q + (size_t)l * d_k, s = 0.0;
            for (int x = 0; x < d_k; x++) {
                dqi[x] += eg[i] * yi[x];
                s += qi[x] * yi[x];
            }
            dG[i] += eg[i] * s;
        }
        for (int i = 0; i < n; i++) /* tmp = e^{G_i} q_i^ℓ, for dX += tmpᵀ dO */
            for (int x = 0; x < d_k; x++)
                tmp[(size_t)i * d_k + x] = eg[i] * Qd[(size_t)i * Q + (size_t)l * d_k + x];
        dgemm(1, 0, d_k, d_v, n, 1.0, tmp, d_k, dOd, d_v, 1.0, dX, d_v);
        /* the read Σ_j A^ℓ[i, j] E_j, A^ℓ = P^ℓ ⊙ D: s = dO Eᵀ */
        dgemm(0, 1, n, n, d_v, 1.0, dOd, d_v, E, d_v, 0.0, M, n);
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) {
                const size_t ij = (size_t)i * n + j;
                dPl[ij] += D[ij] * M[ij];
                dD[ij] += Pl[ij] * M[ij];
                M[ij] = Pl[ij] * D[ij]; /* A^ℓ, for dE = A^ℓᵀ dO */
            }
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) M[(size_t)i * n + j] = 0.0;
        dgemm(1, 0, n, d_v, n, 1.0, M, n, dOd, d_v, 0.0, dE, d_v);
        /* the end state e^{G_{n−1}} X + Σ_j D[n−1, j] k_jᵀ E_j */
        const double *Dn = D + (size_t)(n - 1) * n;
        double sx = 0.0;
        for (size_t x = 0; x < dkv; x++) {
            dX[x] += eg[n - 1] * dXn[x];
            sx += X[x] * dXn[x];
        }
        dG[n - 1] += eg[n - 1] * sx;
        dgemm(0, 0, n, d_v, d_k, 1.0, Kd, d_k, dXn, d_v, 0.0, Y, d_v); /* z_j = k_j dXn */
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int x = 0; x < d_v; x++) {
                const size_t jx = (size_t)j * d_v + x;
                s += Y[jx] * E[jx];
                dE[jx] += Dn[j] * Y[jx];
            }
            dD[(size_t)(n - 1) * n + j] += s;
        }
        dgemm(0, 1, n, d_k, d_v, 1.0, E, d_v, dXn, d_v, 0.0, tmp, d_k); /* E dXnᵀ */
        for (int j = 0; j < n; j++)
            for (int x = 0; x < d_k; x++) dk[(size_t)j * d_k + x] += Dn[j] * tmp[(size_t)j * d_k + x];
        /* E = T R: dT += dE Rᵀ (lower), dR = Tᵀ dE */
        dgemm(0, 1, n, n, d_v, 1.0, dE, d_v, R, d_v, 1.0, dT, n);
        dgemm(1, 0, n, d_v, n, 1.0, T, n, dE, d_v, 0.0, dR, d_v);
        /* R_j = −e^{G_j} k_j X */
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int x = 0; x < d_v; x++) {
                const size_t jx = (size_t)j * d_v + x;
                s += dR[jx] * R[jx];
                dR[jx] *= -eg[j]; /* w_j */
            }
            dG[j] += s;
        }
        dgemm(0, 1, n, d_k, d_v, 1.0, dR, d_v, X, d_v, 1.0, dk, d_k);
        dgemm(1, 0, d_k, d_v, n, 1.0, Kd, d_k, dR, d_v, 1.0, dX, d_v);
        memcpy(dSl, dX, dkv * sizeof(double));
    }
    /* levels 0 … c: their end states from the chunk's tokens; they start the chunk empty */
    for (int l = 0; l < lo; l++) {
        double *dSl = dS + (size_t)l * dkv;
        int m0 = -1, m1 = -1;
        for (int m = 0; m < n; m++)
            if (ttt_ll_level(n - 1, m, nl) == l) {
                if (m0 < 0) m0 = m;
                m1 = m + 1;
            }
        if (m0 >= 0) {
            const int nr = n - m0, nb = m1 - m0;
            const double *Dn = D + (size_t)(n - 1) * n;
            /* Y_j = Σ_{m at ℓ} T[j, m] v_m (rows j ≥ m0) */
            dgemm(0, 0, nr, d_v, nb, 1.0, T + (size_t)m0 * n + m0, n, Vd + (size_t)m0 * d_v, d_v,
                  0.0, Y, d_v);
            /* z_j = k_j dS^ℓ into R, then dY = D[n−1, j] z_j into dR */
            dgemm(0, 0, nr, d_v, d_k, 1.0, Kd + (size_t)m0 * d_k, d_k, dSl, d_v, 0.0, R, d_v);
            for (int r = 0; r < nr; r++) {
                const int j = m0 + r;
                double s = 0.0;
                for (int x = 0; x < d_v; x++) {
                    const size_t rx = (size_t)r * d_v + x;
                    s += R[rx] * Y[rx];
                    dR[rx] = Dn[j] * R[rx];
                }
                dD[(size_t)(n - 1) * n + j] += s;
            }
            dgemm(0, 1, nr, d_k, d_v, 1.0, Y, d_v, dSl, d_v, 0.0, tmp, d_k); /* Y dS^ℓᵀ */
            for (int r = 0; r < nr; r++)
                for (int x = 0; x < d_k; x++)
                    dk[(size_t)(m0 + r) * d_k + x] += Dn[m0 + r] * tmp[(size_t)r * d_k + x];
            /* dT[j, m] += dY_j · v_m, dv_m += Σ_j T[j, m] dY_j */
            dgemm(0, 1, nr, nb, d_v, 1.0, dR, d_v, Vd + (size_t)m0 * d_v, d_v, 1.0,
                  dT + (size_t)m0 * n + m0, n);
            dgemm(1, 0, nb, d_v, nr, 1.0, T + (size_t)m0 * n + m0, n, dR, d_v, 1.0,
                  dV + (size_t)m0 * d_v, d_v);
        }
        memset(dSl, 0, dkv * sizeof(double));
    }
    /* T = (I + L)⁻¹: dL = −Tᵀ dT Tᵀ, strictly lower; L[i, j] = D[i, j] (k_i · k_j) */
    dgemm(0, 1, n, n, n, 1.0, dT, n, T, n, 0.0, M, n);
    dgemm(1, 0, n, n, n, -1.0, T, n, M, n, 0.0, dL, n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) {
            const size_t ij = (size_t)i * n + j;
            dD[ij] += dL[ij] * KK[ij];
            const double dkk = dL[ij] * D[ij];
            for (int x = 0; x < d_k; x++) {
                dk[(size_t)i * d_k + x] += dkk * Kd[(size_t)j * d_k + x];
                dk[(size_t)j * d_k + x] += dkk * Kd[(size_t)i * d_k + x];
            }
        }
    /* the pair products q_i^ℓ · k_j (j ≤ i) */
    for (int l = 0; l < nl; l++) {
        double *dPl = dPq + (size_t)l * nn;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) dPl[(size_t)i * n + j] = 0.0;
        dgemm(0, 0, n, d_k, n, 1.0, dPl, n, Kd, d_k, 1.0, dq + (size_t)l * d_k, Q);
        dgemm(1, 0, n, d_k, n, 1.0, dPl, n, Qd + (size_t)l * d_k, Q, 1.0, dk, d_k);
    }
    /* D[i, j] = e^{G_i − G_j} β_j */
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            const size_t ij = (size_t)i * n + j;
            db[j] += dD[ij] * exp(G[i] - G[j]);
            const double e = dD[ij] * D[ij];
            dG[i] += e;
            dG[j] -= e;
        }
    if (gq)
        for (size_t x = 0; x < (size_t)n * Q; x++) gq[x] += (float)dq[x];
    if (gk)
        for (size_t x = 0; x < (size_t)n * d_k; x++) gk[x] += (float)dk[x];
    if (gv)
        for (size_t x = 0; x < (size_t)n * d_v; x++) gv[x] += (float)dV[x];
    if (gb)
        for (int j = 0; j < n; j++) gb[j] += (float)db[j];
    if (gla && la) ttt_fused_add_reverse_cumsum(gla, dG, la, n, 1);
}

static void lldb_backward(ttt_ctx *ctx, const ttt_tape_entry *ent, const float *dP) {
    const ttt_fused_io io = ttt_fused_io_get(ctx, ent);
    const lldb_saved *sv = ent->aux;
    const float *q = io.q->data, *k = io.k->data, *v = io.v->data;
    const float *beta = io.beta ? io.beta->data : NULL, *la = io.la ? io.la->data : NULL;
    const int T = sv->T, nl = sv->nl, d_k = sv->d_k, d_v = sv->d_v, c = sv->c, C = 1 << c;
    const int nch = (T + C - 1) / C, Q = nl * d_k;
    const size_t dkv = (size_t)d_k * d_v, all = (size_t)nl * dkv;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    double *ws = ttt_fused_scratch(ctx, lldb_doubles(C, nl, d_k, d_v) * sizeof(double));
    double *dS = ttt_fused_scratch(ctx, all * sizeof(double));
    float *dSf = ttt_fused_scratch(ctx, all * sizeof(float));
    for (size_t x = 0; x < all; x++) dS[x] = dP[(size_t)T * d_v + x];
    for (int ch = nch - 1; ch >= 0; ch--) {
        const int t0 = ch * C, n = t0 + C <= T ? C : T - t0;
        lldb_chunk(io.gq ? io.gq + (size_t)t0 * Q : NULL, io.gk ? io.gk + (size_t)t0 * d_k : NULL,
                   io.gv ? io.gv + (size_t)t0 * d_v : NULL, io.gb && beta ? io.gb + t0 : NULL,
                   io.gla && la ? io.gla + t0 : NULL, dS, dP + (size_t)t0 * d_v,
                   sv->S + (size_t)ch * all, q + (size_t)t0 * Q, k + (size_t)t0 * d_k,
                   v + (size_t)t0 * d_v, beta ? beta + t0 : NULL, la ? la + t0 : NULL, n, c, nl,
                   d_k, d_v, ws);
        /* the merge before the chunk: levels below m were added into m */
        const int m = ttt_ll_merge_target(sv->p0 + t0, nl);
        for (int l = 0; l < m; l++)
            memcpy(dS + (size_t)l * dkv, dS + (size_t)m * dkv, dkv * sizeof(double));
    }
    for (size_t x = 0; x < all; x++) dSf[x] = (float)dS[x];
    ttt_fused_io_end(ctx, &io, dSf, all, mark);
}

int ttt_loglinear_delta_chunk_op_fits(const ttt_layer *L, const ttt_tensor *S0, long p0, int T,
                                      int c) {
    const int nl = L->levels > 1 ? L->levels : 1, C = 1 << c;
    const size_t dkv = (size_t)L->d_k * L->d_v;
    /* chunks beyond 256 tokens: the backward's float64 pair products of every level (2 Λ C²)
     * would outgrow the forward's scratch by far; the recurrent op runs those */
    if (T < 1 || nl < c + 2 || p0 % C || C > 256) return 0;
    /* at position 0 nothing merges: levels 0 … c must start empty, and their gradient would be
     * the chunks' to give, which they do not compute */
    if (p0 == 0) {
        if (S0->requires_grad) return 0;
        for (size_t x = 0; x < (size_t)(c + 1) * dkv; x++)
            if (S0->data[x] != 0.0f) return 0;
    }
    return 1;
}

ttt_tensor *ttt_loglinear_delta_chunk_op(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_layer *L,
                                         const ttt_tensor *q, const ttt_tensor *k,
                                         const ttt_tensor *v, const ttt_tensor *beta,
                                         const ttt_tensor *log_alpha, const ttt_tensor *S0,
                                         long p0, int c) {
    const int T = TTT_ROWS(q), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    const int nl = L->levels > 1 ? L->levels : 1, C = 1 << c, nch = (T + C - 1) / C;
    const size_t dkv = (size_t)d_k * d_v, all = (size_t)nl * dkv, CC = (size_t)C * C;
    TTT_ASSERT(TTT_COLS(q) == nl * d_k && TTT_ROWS(k) == T && TTT_ROWS(v) == T && S0->n == all);
    const ttt_tensor *in[6] = {q, k, v, beta, log_alpha, S0};
    int rec;
    ttt_tensor *P = ttt_fused_result(ctx, in, T, d_v, all, &rec);
    float *o = P->data, *S = P->data + (size_t)T * d_v;
    float *saved = rec ? ttt_tape_alloc(ctx, (size_t)nch * all * sizeof(float)) : NULL;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    lld_ws w = {.G = ttt_fused_scratch(ctx, (size_t)C * sizeof(double)),
                .D = ttt_fused_scratch(ctx, CC * sizeof(double)),
                .Td = ttt_fused_scratch(ctx, CC * sizeof(double)),
                .Md = ttt_fused_scratch(ctx, CC * sizeof(double)),
                .Tf = ttt_fused_scratch(ctx, CC * sizeof(float)),
                .P = ttt_fused_scratch(ctx, CC * sizeof(float)),
                .M = ttt_fused_scratch(ctx, CC * sizeof(float)),
                .R = ttt_fused_scratch(ctx, (size_t)C * d_v * sizeof(float)),
                .E = ttt_fused_scratch(ctx, (size_t)C * d_v * sizeof(float)),
                .Kw = ttt_fused_scratch(ctx, (size_t)C * d_k * sizeof(float)),
                .Qs = ttt_fused_scratch(ctx, (size_t)C * nl * d_k * sizeof(float)),
                .e = NULL};
    for (int ch = 0; ch < nch; ch++) {
        const int t0 = ch * C, n = t0 + C <= T ? C : T - t0;
        lld_merge(S, p0 + t0, nl, dkv);
        if (saved) memcpy(saved + (size_t)ch * all, S, all * sizeof(float));
        lld_chunk(o + (size_t)t0 * d_v, S, q->data + (size_t)t0 * nl * d_k,
                  k->data + (size_t)t0 * d_k, v->data + (size_t)t0 * d_v,
                  beta ? beta->data + t0 : NULL, log_alpha ? log_alpha->data + t0 : NULL, n, c,
                  nl, d_k, d_v, &w);
    }
    ttt_arena_release(ctx->arena, mark);
    ttt_tape_entry *ent = ttt_tape_record(ctx, lldb_backward, P, in, 6);
    if (ent) {
        lldb_saved *sv = ttt_tape_alloc(ctx, sizeof *sv);
        *sv = (lldb_saved){.S = saved, .p0 = p0, .T = T, .nl = nl, .d_k = d_k, .d_v = d_v,
                           .c = c};
        ent->aux = sv;
        ent->name = "loglinear_delta_chunkwise";
    }
    *S_out = ttt_fused_part(ctx, P, (size_t)T * d_v, 2, (const int[]){nl * d_k, d_v},
                            "loglinear_state");
    return ttt_fused_part(ctx, P, 0, 2, (const int[]){T, d_v}, "loglinear_o");
}
