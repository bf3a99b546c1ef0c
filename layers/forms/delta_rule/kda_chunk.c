/* KDA's chunkwise form (docs/math.md §4.5 "Chunkwise form"): the delta rule with a gate per key
 * dimension,
 *     S_t = (I − β_t k_tᵀ k_t) Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t,
 * in chunks of C tokens, forward and backward. One registry entry, family kda, form chunkwise.
 *
 * One chunk of n tokens from the state S at its start (rows t, s = 0 … n − 1 of the chunk;
 * G_t = Σ_{s ≤ t} max(log α_s, −104) per key dimension, in float64; kernels.h "Hard resets"):
 * with the pseudo-values u_t = β_t (v_t − (k_t ⊙ α_t) S_{t−1}), S_t = Diag(α_t) S_{t−1} + k_tᵀ u_t
 * unrolls to S_t = Diag(e^{G_t}) S + Σ_{s ≤ t} Diag(e^{G_t − G_s}) k_sᵀ u_s, so
 *     u_t + β_t Σ_{s<t} KK_ts u_s = β_t v_t − β_t (k_t ⊙ e^{G_t}) S,
 *     KK_ts = Σ_i k_ti k_si e^{G_ti − G_si},     P_ts = Σ_i q_ti k_si e^{G_ti − G_si} (s ≤ t),
 * i.e. A V' = β⊙V − (β⊙e^G⊙K) S with A = I + strictly_lower(diag(β) KK) unit lower triangular:
 *     U = A⁻¹(β⊙V),  W = A⁻¹(β⊙e^G⊙K),  V' = U − W S,
 *     O = (e^G⊙Q) S + P V',      S ← Diag(e^{G_n}) S + (e^{G_n − G}⊙K)ᵀ V'.
 *
 * Numerics. No exponent can be large and positive: the pair products KK and P are formed by
 * blocks (block_at, kda_pairs). A chunk whose gates span at most KDA_SPAN = 60 nats is one block
 * factored through the chunk start, (X ⊙ e^G)(K ⊙ e^{−G})ᵀ, every factor within [e^−60, e^60].
 * Otherwise, in row blocks of KDA_SUB tokens: the columns before a row block go through the gate
 * sum just before it, r, where rows take e^{G_t − r} ≤ 1 and columns e^{r − G_s} ≤ 1 (s < r ≤ t),
 * one sgemm; a diagonal block through its own start when its span is at most 60 nats, else pair
 * by pair, e^{G_t − G_s} per key dimension (KDA_SUB/2 exponentials per token and key). A hard
 * reset (log α = −inf or below −104) enters G as −104, so every factor that spans it is
 * ≤ e^−104: 0 in float32 (fastexp.h returns 0 below −87), and that key row forgets exactly,
 * never NaN (a span over a reset is > 60 nats, so it is never factored through). The inverse
 * of A is formed in float64 and rounded once (ttt_unit_lower_invert, as the delta rule's
 * chunkwise form; longer chunks than KDA_INVERT_MAX solve with strsm); the state's per-row
 * chunk decay e^{G_n} is dithered (ttt_gate_dither), so that a weak gate's rounding does not
 * add up over the chunks.
 *
 * Backward (under a tape: one custom op; the forward saves the state at every chunk start and
 * the backward recomputes one chunk at a time from it), with dS' = ∂L/∂S at the chunk's end:
 *     dV' = Pᵀ dO + Kd dS',  Kd = e^{G_n − G}⊙K;   dP = tril(dO V'ᵀ)
 *     dKd = V' dS'ᵀ → dK += e^{G_n − G}⊙dKd, dG_n += Σ_s dKd_s⊙Kd_s, dG_s −= dKd_s⊙Kd_s
 *     dQ += e^G ⊙ (dO Sᵀ), dG += (dO Sᵀ)⊙e^G⊙Q;  dG_n += e^{G_n} ⊙ rowsum(dS' ⊙ S)
 *     dS = Diag(e^{G_n}) dS' + (e^G⊙Q)ᵀ dO − Wᵀ dV'
 *     [Y_U Y_W] = A⁻ᵀ [dV'  −dV' Sᵀ];  dV += β⊙Y_U, dβ += rowdot(Y_U, V) + rowdot(Y_W, e^G⊙K),
 *     dK += β e^G⊙Y_W, dG += β Y_W⊙e^G⊙K
 *     dAr = −strictly_lower(Y_U Uᵀ + Y_W Wᵀ): dβ_t += Σ_s dAr_ts KK_ts, dKK = diag(β) dAr
 *     dP and dKK through the pair products, block by block (kda_pairs_grad)
 *     ∂L/∂log α: the reverse cumulative sum of dG in the chunk, 0 at a reset
 *       (ttt_fused_add_reverse_cumsum). */
#include "blas.h"
#include <math.h>
#include <string.h>

#include "autograd.h"
#include "composed.h"
#include "fastexp.h"
#include "fused_grad.h"
#include "kernels.h"

/* Chunks of at most this many tokens invert A explicitly in float64 and apply the inverse with
 * strmm; longer ones solve with strsm (n² per right-hand side instead of the inverse's n³/6), as
 * the delta rule's chunkwise form does (delta_rule/chunkwise.c DELTA_INVERT_MAX). */
#define KDA_INVERT_MAX 128

/* Tokens per sub-block of the pair products: the diagonal blocks cost KDA_SUB/2 exponentials
 * per token and key dimension, the off-diagonal ones one sgemm per row block. */
#define KDA_SUB 16

/* Scratch of the pair products (kda_pairs), (C, d_k) each. */
typedef struct kda_pw {
    float *Ex, *Ek;      /* e^{G_t − r} of a block's rows, e^{r − G_s} of its columns */
    float *Xk, *Xq, *Ks; /* the rows of K and Q and the columns of K, scaled by them */
    float *T1k, *T1q, *T2; /* the backward's products */
} kda_pw;

/* Scratch of one call, for chunks of at most C tokens (allocated once from the arena). */
typedef struct kda_ws {
    float *Q, *K, *V, *b; /* (C, d_k), (C, d_k), (C, d_v), (C): the chunk's rows, contiguous */
    double *G;            /* (C, d_k) cumulative gates */
    float *Ge;            /* (C, d_k) e^G */
    kda_pw pw;            /* the pair products' scratch */
    float *X;             /* (C, d_k + C): [e^G⊙Q | P], the read-out's left factor */
    float *A;             /* (C, C): strictly lower diag(β) KK, then that of A⁻¹ */
    double *Xd;           /* (Cp, Cp) the float64 inverse's scratch, Cp = C rounded up to 8;
                           * NULL for chunks longer than KDA_INVERT_MAX */
    float *Y;             /* (d_k + C, d_v): [S; U → V'] */
    float *Wk;            /* (C, d_k): β e^G⊙K → W, then e^{G_n − G}⊙K */
    double *drift;        /* (d_k) the dithered row decays' drift (kernels.h) */
} kda_ws;

static void *ws_alloc(ttt_ctx *ctx, size_t bytes) {
    void *p = ttt_arena_alloc(ctx->arena, bytes ? bytes : 1);
    /* the kernels have no error channel (kernels.h): running out of scratch is fatal */
    TTT_ASSERT(p != NULL);
    return p;
}

static void pw_init(ttt_ctx *ctx, kda_pw *p, int C, int d_k) {
    float **f[8] = {&p->Ex, &p->Ek, &p->Xk, &p->Xq, &p->Ks, &p->T1k, &p->T1q, &p->T2};
    for (int i = 0; i < 8; i++) *f[i] = ws_alloc(ctx, (size_t)C * d_k * sizeof(float));
}

static size_t pad8(int C) { return (size_t)((C + 7) & ~7); }

static void ws_init(ttt_ctx *ctx, kda_ws *w, int C, int d_k, int d_v) {
    const size_t ck = (size_t)C * d_k;
    w->Q = ws_alloc(ctx, ck * sizeof(float));
    w->K = ws_alloc(ctx, ck * sizeof(float));
    w->V = ws_alloc(ctx, (size_t)C * d_v * sizeof(float));
    w->b = ws_alloc(ctx, (size_t)C * sizeof(float));
    w->G = ws_alloc(ctx, ck * sizeof(double));
    w->Ge = ws_alloc(ctx, ck * sizeof(float));
    pw_init(ctx, &w->pw, C, d_k);
    w->X = ws_alloc(ctx, (size_t)C * (d_k + C) * sizeof(float));
    w->A = ws_alloc(ctx, (size_t)C * C * sizeof(float));
    w->Xd = C <= KDA_INVERT_MAX ? ws_alloc(ctx, pad8(C) * pad8(C) * sizeof(double)) : NULL;
    w->Y = ws_alloc(ctx, (size_t)(d_k + C) * d_v * sizeof(float));
    w->Wk = ws_alloc(ctx, ck * sizeof(float));
    w->drift = ws_alloc(ctx, (size_t)d_k * sizeof(double));
}

/* G = cumsum(max(log α, −104)) per key dimension (float64) and e^G, for n rows of la (row
 * stride ldl). */
static void kda_gates(double *G, float *Ge, const float *la, int ldl, int n, int d_k) {
    for (int c = 0; c < d_k; c++) G[c] = ttt_gate_floor(la[c]);
    for (int t = 1; t < n; t++)
        for (int c = 0; c < d_k; c++)
            G[(size_t)t * d_k + c] =
                G[(size_t)(t - 1) * d_k + c] + ttt_gate_floor(la[(size_t)t * ldl + c]);
    for (size_t i = 0; i < (size_t)n * d_k; i++) Ge[i] = ttt_fast_exp_d(G[i]);
}

/* The largest span max_c (G_{r,c} − G_{last,c}) ≥ 0 of the gates after row r (r = −1: the
 * chunk start, G = 0) up to row `last`. */
static double span_of(const double *G, int r, int last, int d_k) {
    double m = 0.0;
    for (int c = 0; c < d_k; c++) {
        const double x = (r < 0 ? 0.0 : G[(size_t)r * d_k + c]) - G[(size_t)last * d_k + c];
        m = x > m ? x : m;
    }
    return m;
}

/* One block of the pair products: rows [t0, t1) and columns [s0, s1) through the reference
 * point r (a row index, or −1 for the chunk start, where e^{G_t − r} is Ge): Ex, Xk, Xq
 * (rows − t0) and Ek, Ks (columns − s0) as kda_pw says. Exponents are ≤ 0 when r lies between
 * the columns and the rows, and at most KDA_SPAN otherwise (block_at). */
static void block_factors(const kda_pw *p, const float *Q, const float *K, const double *G,
                          const float *Ge, int r, int t0, int t1, int s0, int s1, int d_k) {
    const size_t nt = (size_t)(t1 - t0) * d_k, ns = (size_t)(s1 - s0) * d_k;
    const size_t o_t = (size_t)t0 * d_k, o_s = (size_t)s0 * d_k;
    /* plain loops over whole rows (no test inside), which the compiler vectorizes */
    if (r < 0) {
        memcpy(p->Ex, Ge + o_t, nt * sizeof(float));
        for (size_t jc = 0; jc < ns; jc++) p->Ek[jc] = ttt_fast_exp_d(-G[o_s + jc]);
    } else {
        const double *Gr = G + (size_t)r * d_k;
        for (int t = t0; t < t1; t++) {
            const double *Gt = G + (size_t)t * d_k;
            float *Ex = p->Ex + (size_t)(t - t0) * d_k;
            for (int c = 0; c < d_k; c++) Ex[c] = ttt_fast_exp_d(Gt[c] - Gr[c]);
        }
        for (int s = s0; s < s1; s++) {
            const double *Gs = G + (size_t)s * d_k;
            float *Ek = p->Ek + (size_t)(s - s0) * d_k;
            for (int c = 0; c < d_k; c++) Ek[c] = ttt_fast_exp_d(Gr[c] - Gs[c]);
        }
    }
    for (size_t ic = 0; ic < nt; ic++) {
        p->Xk[ic] = K[o_t + ic] * p->Ex[ic];
        p->Xq[ic] = Q[o_t + ic] * p->Ex[ic];
    }
    for (size_t jc = 0; jc < ns; jc++) p->Ks[jc] = K[o_s + jc] * p->Ek[jc];
}

/* Factored blocks may scale a column by up to e^KDA_SPAN (a reference point after it by at most
 * that span; 60 nats, as linear_attention/chunkwise.c's vector decay): within float32's range,
 * and the products keep the relative rounding of a product of two factors. */
#define KDA_SPAN 60.0

/* The blocks of the pair products of a chunk of n tokens, in the order both passes take them:
 * the whole chunk as one factored block when its span is at most KDA_SPAN (reference: the chunk
 * start; `whole`); otherwise, per row block [a0, a1) of KDA_SUB tokens, the columns before it
 * through r = a0 − 1 (both exponents ≤ 0; index 2a), and the diagonal block through r = a0 − 1
 * when its own span is at most KDA_SPAN, else pair by pair (index 2a + 1). Block i of
 * n_blocks: b = {kind (1 factored, 2 per pair), r, t0, t1, s0, s1}; 0 when it is empty. */
static int n_blocks(int n, int whole) { return whole ? 1 : 2 * ((n + KDA_SUB - 1) / KDA_SUB); }

static int block_at(int *b, int i, const double *G, int n, int d_k, int whole) {
    if (whole) {
        b[0] = 1, b[1] = -1, b[2] = 0, b[3] = n, b[4] = 0, b[5] = n;
        return 1;
    }
    const int a0 = (i / 2) * KDA_SUB, a1 = a0 + KDA_SUB < n ? a0 + KDA_SUB : n;
    if (i % 2 == 0) {
        b[0] = 1, b[1] = a0 - 1, b[2] = a0, b[3] = a1, b[4] = 0, b[5] = a0;
        return a0 > 0;
    }
    b[0] = span_of(G, a0 - 1, a1 - 1, d_k) <= KDA_SPAN ? 1 : 2;
    b[1] = a0 - 1, b[2] = a0, b[3] = a1, b[4] = a0, b[5] = a1;
    return 1;
}

/* The chunk's two pair products, Q and K (n, d_k) contiguous:
 *     KK_ts = Σ_i K_ti K_si e^{G_ti − G_si} (s < t),   P_ts = Σ_i Q_ti K_si e^{G_ti − G_si} (s ≤ t),
 * zero elsewhere; KK and P (n, n) with row strides ldk, ldp. They share the column factors of
 * each block, and a per-pair block the exponentials. */
static void kda_pairs(float *KK, int ldk, float *P, int ldp, const float *Q, const float *K,
                      const double *G, const float *Ge, int n, int d_k, const kda_pw *p) {
    const int whole = span_of(G, -1, n - 1, d_k) <= KDA_SPAN;
    for (int i = 0, b[6]; i < n_blocks(n, whole); i++) {
        if (!block_at(b, i, G, n, d_k, whole)) continue;
        const int t0 = b[2], t1 = b[3], s0 = b[4], s1 = b[5];
        if (b[0] == 1) {
            block_factors(p, Q, K, G, Ge, b[1], t0, t1, s0, s1, d_k);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t1 - t0, s1 - s0, d_k, 1.0f,
                        p->Xk, d_k, p->Ks, d_k, 0.0f, KK + (size_t)t0 * ldk + s0, ldk);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t1 - t0, s1 - s0, d_k, 1.0f,
                        p->Xq, d_k, p->Ks, d_k, 0.0f, P + (size_t)t0 * ldp + s0, ldp);
            continue;
        }
        for (int t = t0; t < t1; t++) {
            const float *kt = K + (size_t)t * d_k, *qt = Q + (size_t)t * d_k;
            const double *Gt = G + (size_t)t * d_k;
            for (int s = s0; s <= t; s++) {
                const float *ks = K + (size_t)s * d_k;
                const double *Gs = G + (size_t)s * d_k;
                double ak = 0.0, aq = 0.0;
                TTT_SIMD_SUM(ak, aq)
                for (int c = 0; c < d_k; c++) {
                    const double e = (double)ks[c] * ttt_fast_exp_d(Gt[c] - Gs[c]);
                    ak += e * kt[c];
                    aq += e * qt[c];
                }
                KK[(size_t)t * ldk + s] = (float)ak;
                P[(size_t)t * ldp + s] = (float)aq;
            }
        }
    }
    /* outside the triangles: zero */
    for (int t = 0; t < n; t++) {
        for (int s = t; s < n; s++) KK[(size_t)t * ldk + s] = 0.0f;
        for (int s = t + 1; s < n; s++) P[(size_t)t * ldp + s] = 0.0f;
    }
}

/* One chunk of n tokens (their rows already in w->Q, K, V, b; gates la with row stride ldl).
 * The state is rows 0 … d_k − 1 of w->Y: at the chunk start on entry, at its end on return. */
static void kda_chunk(const kda_ws *w, float *o, int ldo, const float *la, int ldl, int n,
                      int d_k, int d_v) {
    const int ldx = d_k + n;
    float *S = w->Y, *U = w->Y + (size_t)d_k * d_v, *A = w->A, *X = w->X, *Wk = w->Wk;
    const float *Q = w->Q, *K = w->K, *V = w->V, *b = w->b;
    double *G = w->G;
    float *Ge = w->Ge;
    kda_gates(G, Ge, la, ldl, n, d_k);
    /* A's strictly lower part diag(β) KK, and P into X's right block */
    kda_pairs(A, n, X + d_k, ldx, Q, K, G, Ge, n, d_k, &w->pw);
    for (int t = 1; t < n; t++)
        for (int s = 0; s < t; s++) A[(size_t)t * n + s] *= b[t];
    /* right-hand sides β⊙V (in U) and β e^G⊙K (in Wk); the read-out's e^G⊙Q */
    for (int t = 0; t < n; t++) {
        for (int j = 0; j < d_v; j++) U[(size_t)t * d_v + j] = b[t] * V[(size_t)t * d_v + j];
        for (int c = 0; c < d_k; c++) {
            const size_t tc = (size_t)t * d_k + c;
            Wk[tc] = b[t] * Ge[tc] * K[tc];
            X[(size_t)t * ldx + c] = Ge[tc] * Q[tc];
        }
    }
    ttt_unit_lower_apply(A, w->Xd, n, U, d_v, Wk, d_k);
    /* V' = U − W S; O = [e^G⊙Q | P] [S; V'] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d_v, d_k, -1.0f, Wk, d_k, S, d_v,
                1.0f, U, d_v);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d_v, ldx, 1.0f, X, ldx, S, d_v, 0.0f,
                o, ldo);
    /* S ← Diag(e^{G_n}) S + (e^{G_n − G}⊙K)ᵀ V' */
    const double *Gn = G + (size_t)(n - 1) * d_k;
    for (int c = 0; c < d_k; c++) {
        const float en = ttt_gate_dither(&w->drift[c], exp(Gn[c]));
        for (int j = 0; j < d_v; j++) S[(size_t)c * d_v + j] *= en;
    }
    for (int t = 0; t < n; t++)
        for (int c = 0; c < d_k; c++) {
            const size_t tc = (size_t)t * d_k + c;
            Wk[tc] = K[tc] * ttt_fast_exp_d(Gn[c] - G[tc]);
        }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d_k, d_v, n, 1.0f, Wk, d_k, U, d_v, 1.0f,
                S, d_v);
}

/* The whole sequence in chunks of `chunk` tokens, rows strided as ld says (kernels.h); S (d_k,
 * d_v) in/out. saved, when not NULL, receives the state at every chunk start (⌈T/C⌉ · d_k d_v
 * floats): the backward's. beta NULL = 1. */
static void kda_chunks(ttt_ctx *ctx, float *o, float *S, const float *q, const float *k,
                       const float *v, const float *beta, const float *la, int T, int d_k,
                       int d_v, int chunk, const ttt_form_ld *ld, float *saved) {
    TTT_ASSERT(chunk >= 1 && T >= 0 && d_k >= 1 && d_v >= 1 && la);
    TTT_ASSERT(ld->q >= d_k && ld->k >= d_k && ld->v >= d_v && ld->o >= d_v && ld->la >= d_k);
    if (T == 0) return;
    const int C = chunk < T ? chunk : T;
    const size_t dkv = (size_t)d_k * d_v;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    kda_ws w;
    ws_init(ctx, &w, C, d_k, d_v);
    memcpy(w.Y, S, dkv * sizeof(float));
    for (int c = 0; c < d_k; c++) w.drift[c] = 1.0;
    for (int t0 = 0, ci = 0; t0 < T; t0 += C, ci++) {
        const int n = t0 + C <= T ? C : T - t0;
        if (saved) memcpy(saved + (size_t)ci * dkv, w.Y, dkv * sizeof(float));
        for (int t = 0; t < n; t++) {
            const size_t r = (size_t)(t0 + t);
            memcpy(w.Q + (size_t)t * d_k, q + r * ld->q, (size_t)d_k * sizeof(float));
            memcpy(w.K + (size_t)t * d_k, k + r * ld->k, (size_t)d_k * sizeof(float));
            memcpy(w.V + (size_t)t * d_v, v + r * ld->v, (size_t)d_v * sizeof(float));
            w.b[t] = beta ? beta[r * ld->beta] : 1.0f;
        }
        kda_chunk(&w, o + (size_t)t0 * ld->o, ld->o, la + (size_t)t0 * ld->la, ld->la, n, d_k,
                  d_v);
    }
    memcpy(S, w.Y, dkv * sizeof(float));
    ttt_arena_release(ctx->arena, mark);
}

/* ---- backward ---- */

/* The adjoint of kda_pairs: given dKK and dP (zero outside their triangles; row stride n),
 * adds to dQ, dK (n, d_k) and dG (n, d_k) what KK and P pass back,
 *     dX_ti += Σ_s dM_ts K_si e^{G_ti − G_si},   dK_si += Σ_t dM_ts X_ti e^{G_ti − G_si},
 *     dG_ti += Σ_s dM_ts X_ti K_si e^{G_ti − G_si},   dG_si −= the same summed over t,
 * for (M, X) = (KK, K) and (P, Q), over the forward's blocks (block_at): a factored block
 * through its factors (T1 = dM Ks, T2 = dMᵀ Xs; dX += T1 ⊙ Ex, dG += T1 ⊙ Xs, dK += T2 ⊙ Ek,
 * dG −= T2 ⊙ Ks), the others pair by pair. */
static void kda_pairs_grad(const float *dKK, const float *dP, const float *Q, const float *K,
                           const double *G, const float *Ge, int n, int d_k, float *dQ,
                           float *dK, double *dG, const kda_pw *p) {
    const int whole = span_of(G, -1, n - 1, d_k) <= KDA_SPAN;
    for (int i = 0, b[6]; i < n_blocks(n, whole); i++) {
        if (!block_at(b, i, G, n, d_k, whole)) continue;
        const int t0 = b[2], t1 = b[3], s0 = b[4], s1 = b[5];
        const int nt = t1 - t0, ns = s1 - s0;
        if (b[0] == 1) {
            block_factors(p, Q, K, G, Ge, b[1], t0, t1, s0, s1, d_k);
            const float *dKb = dKK + (size_t)t0 * n + s0, *dPb = dP + (size_t)t0 * n + s0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nt, d_k, ns, 1.0f, dKb, n,
                        p->Ks, d_k, 0.0f, p->T1k, d_k);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nt, d_k, ns, 1.0f, dPb, n,
                        p->Ks, d_k, 0.0f, p->T1q, d_k);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ns, d_k, nt, 1.0f, dKb, n,
                        p->Xk, d_k, 0.0f, p->T2, d_k);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ns, d_k, nt, 1.0f, dPb, n,
                        p->Xq, d_k, 1.0f, p->T2, d_k);
            for (size_t ic = 0; ic < (size_t)nt * d_k; ic++) {
                const size_t tc = (size_t)t0 * d_k + ic;
                dK[tc] += p->T1k[ic] * p->Ex[ic];
                dQ[tc] += p->T1q[ic] * p->Ex[ic];
                dG[tc] += (double)p->T1k[ic] * p->Xk[ic] + (double)p->T1q[ic] * p->Xq[ic];
            }
            for (size_t jc = 0; jc < (size_t)ns * d_k; jc++) {
                const size_t sc = (size_t)s0 * d_k + jc;
                dK[sc] += p->T2[jc] * p->Ek[jc];
                dG[sc] -= (double)p->T2[jc] * p->Ks[jc];
            }
            continue;
        }
        for (int t = t0; t < t1; t++) {
            const float *kt = K + (size_t)t * d_k, *qt = Q + (size_t)t * d_k;
            const double *Gt = G + (size_t)t * d_k;
            float *dkt = dK + (size_t)t * d_k, *dqt = dQ + (size_t)t * d_k;
            double *dGt = dG + (size_t)t * d_k;
            for (int s = s0; s <= t; s++) {
                const float mk = s < t ? dKK[(size_t)t * n + s] : 0.0f;
                const float mq = dP[(size_t)t * n + s];
                if (mk == 0.0f && mq == 0.0f) continue;
                const float *ks = K + (size_t)s * d_k;
                const double *Gs = G + (size_t)s * d_k;
                float *dks = dK + (size_t)s * d_k;
                double *dGs = dG + (size_t)s * d_k;
                for (int c = 0; c < d_k; c++) {
                    const float e = ttt_fast_exp_d(Gt[c] - Gs[c]);
                    const float xk = mk * e, xq = mq * e;
                    dkt[c] += xk * ks[c];
                    dqt[c] += xq * ks[c];
                    const float w = xk * kt[c] + xq * qt[c];
                    dks[c] += w;
                    const double y = (double)w * ks[c];
                    dGt[c] += y;
                    dGs[c] -= y;
                }
            }
        }
    }
}

/* Scratch of the backward, chunks of at most C tokens. */
typedef struct kda_bws {
    double *G, *dG, *db;                 /* (C, d_k), (C, d_k), (C) */
    float *Ge;                           /* (C, d_k) */
    kda_pw pw;                           /* the pair products' scratch */
    float *KK, *Ai, *P, *dP, *dA;        /* (C, C) each */
    double *Xd;                          /* (Cp, Cp), or NULL past KDA_INVERT_MAX */
    float *UW, *Y;                       /* (C, d_v + d_k) each: [U W], then [Y_U Y_W] */
    float *Vp, *dVp;                     /* (C, d_v) */
    float *Kd, *Qe, *dQ, *dK, *T3;       /* (C, d_k) each */
} kda_bws;

static void bws_init(ttt_ctx *ctx, kda_bws *w, int C, int d_k, int d_v) {
    const size_t ck = (size_t)C * d_k, cc = (size_t)C * C, cw = (size_t)C * (d_v + d_k);
    w->G = ws_alloc(ctx, ck * sizeof(double));
    w->dG = ws_alloc(ctx, ck * sizeof(double));
    w->db = ws_alloc(ctx, (size_t)C * sizeof(double));
    w->Ge = ws_alloc(ctx, ck * sizeof(float));
    pw_init(ctx, &w->pw, C, d_k);
    w->KK = ws_alloc(ctx, cc * sizeof(float));
    w->Ai = ws_alloc(ctx, cc * sizeof(float));
    w->P = ws_alloc(ctx, cc * sizeof(float));
    w->dP = ws_alloc(ctx, cc * sizeof(float));
    w->dA = ws_alloc(ctx, cc * sizeof(float));
    w->Xd = C <= KDA_INVERT_MAX ? ws_alloc(ctx, pad8(C) * pad8(C) * sizeof(double)) : NULL;
    w->UW = ws_alloc(ctx, cw * sizeof(float));
    w->Y = ws_alloc(ctx, cw * sizeof(float));
    w->Vp = ws_alloc(ctx, (size_t)C * d_v * sizeof(float));
    w->dVp = ws_alloc(ctx, (size_t)C * d_v * sizeof(float));
    w->Kd = ws_alloc(ctx, ck * sizeof(float));
    w->Qe = ws_alloc(ctx, ck * sizeof(float));
    w->dQ = ws_alloc(ctx, ck * sizeof(float));
    w->dK = ws_alloc(ctx, ck * sizeof(float));
    w->T3 = ws_alloc(ctx, ck * sizeof(float));
}

/* One chunk backward (notation of the header): dS (d_k, d_v) holds dS' on entry, ∂L/∂S at the
 * chunk start on return; gradients are added to gq … gla (each may be NULL). */
static void kda_chunk_backward(const kda_bws *w, float *dS, const float *S, const float *q,
                               const float *k, const float *v, const float *beta,
                               const float *la, const float *dO, float *gq, float *gk, float *gv,
                               float *gb, float *gla, int n, int d_k, int d_v) {
    const int ld = d_v + d_k;
    const size_t nk = (size_t)n * d_k;
    double *G = w->G, *dG = w->dG, *db = w->db;
    float *Ge = w->Ge, *KK = w->KK, *Ai = w->Ai, *P = w->P, *dP = w->dP, *UW = w->UW, *Y = w->Y;
    float *Vp = w->Vp, *dVp = w->dVp, *Kd = w->Kd, *Qe = w->Qe, *dQ = w->dQ, *dK = w->dK,
          *T3 = w->T3;
    memset(dG, 0, nk * sizeof(double));
    memset(db, 0, (size_t)n * sizeof(double));
    memset(dQ, 0, nk * sizeof(float));
    memset(dK, 0, nk * sizeof(float));
#define BETA(t) (beta ? beta[t] : 1.0f)

    /* ---- the chunk again (kda_chunk) ---- */
    kda_gates(G, Ge, la, d_k, n, d_k);
    kda_pairs(KK, n, P, n, q, k, G, Ge, n, d_k, &w->pw);
    for (int t = 0; t < n; t++)
        for (int s = 0; s < n; s++)
            Ai[(size_t)t * n + s] = s < t ? BETA(t) * KK[(size_t)t * n + s] : 0.0f;
    if (w->Xd) ttt_unit_lower_invert(Ai, w->Xd, n); /* else Ai stays A: solves below */
    for (int t = 0; t < n; t++) {
        const float bt = BETA(t);
        for (int j = 0; j < d_v; j++) UW[(size_t)t * ld + j] = bt * v[(size_t)t * d_v + j];
        for (int c = 0; c < d_k; c++) {
            const size_t tc = (size_t)t * d_k + c;
            UW[(size_t)t * ld + d_v + c] = bt * Ge[tc] * k[tc];
            Qe[tc] = Ge[tc] * q[tc];
        }
    }
    if (w->Xd)
        cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, n, ld, 1.0f,
                    Ai, n, UW, ld);
    else
        cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, n, ld, 1.0f,
                    Ai, n, UW, ld);
    for (int t = 0; t < n; t++)
        memcpy(Vp + (size_t)t * d_v, UW + (size_t)t * ld, (size_t)d_v * sizeof(float));
    ttt_fused_gemm(0, 0, n, d_v, d_k, -1.0f, UW + d_v, ld, S, d_v, 1.0f, Vp, d_v); /* V' */
    const double *Gn = G + (size_t)(n - 1) * d_k;
    for (int t = 0; t < n; t++)
        for (int c = 0; c < d_k; c++) {
            const size_t tc = (size_t)t * d_k + c;
            Kd[tc] = k[tc] * ttt_fast_exp_d(Gn[c] - G[tc]);
        }

    /* ---- backward ---- */
    /* dV' = Pᵀ dO + Kd dS' */
    ttt_fused_gemm(1, 0, n, d_v, n, 1.0f, P, n, dO, d_v, 0.0f, dVp, d_v);
    ttt_fused_gemm(0, 0, n, d_v, d_k, 1.0f, Kd, d_k, dS, d_v, 1.0f, dVp, d_v);
    /* the intra-chunk read: dP = tril(dO V'ᵀ) */
    ttt_fused_gemm(0, 1, n, n, d_v, 1.0f, dO, d_v, Vp, d_v, 0.0f, dP, n);
    for (int t = 0; t < n; t++)
        for (int s = t + 1; s < n; s++) dP[(size_t)t * n + s] = 0.0f;
    /* the state write: dKd = V' dS'ᵀ */
    ttt_fused_gemm(0, 1, n, d_k, d_v, 1.0f, Vp, d_v, dS, d_v, 0.0f, T3, d_k);
    for (int t = 0; t < n; t++)
        for (int c = 0; c < d_k; c++) {
            const size_t tc = (size_t)t * d_k + c;
            dK[tc] += T3[tc] * ttt_fast_exp_d(Gn[c] - G[tc]);
            const double y = (double)T3[tc] * Kd[tc];
            dG[(size_t)(n - 1) * d_k + c] += y;
            dG[tc] -= y;
        }
    /* the inter-chunk read: dQe = dO Sᵀ */
    ttt_fused_gemm(0, 1, n, d_k, d_v, 1.0f, dO, d_v, S, d_v, 0.0f, T3, d_k);
    for (size_t tc = 0; tc < nk; tc++) {
        dQ[tc] += Ge[tc] * T3[tc];
        dG[tc] += (double)T3[tc] * Qe[tc];
    }
    /* the state decay: dG_n += e^{G_n} ⊙ rowsum(dS' ⊙ S), dS = Diag(e^{G_n}) dS'; then
     * dS += (e^G⊙Q)ᵀ dO − Wᵀ dV' */
    for (int c = 0; c < d_k; c++) {
        const float en = Ge[(size_t)(n - 1) * d_k + c];
        float *dSc = dS + (size_t)c * d_v;
        const float *Sc = S + (size_t)c * d_v;
        double s = 0.0;
        for (int j = 0; j < d_v; j++) s += (double)dSc[j] * Sc[j];
        dG[(size_t)(n - 1) * d_k + c] += s * en;
        for (int j = 0; j < d_v; j++) dSc[j] *= en;
    }
    ttt_fused_gemm(1, 0, d_k, d_v, n, 1.0f, Qe, d_k, dO, d_v, 1.0f, dS, d_v);
    ttt_fused_gemm(1, 0, d_k, d_v, n, -1.0f, UW + d_v, ld, dVp, d_v, 1.0f, dS, d_v);
    /* through the solve: [Y_U Y_W] = A⁻ᵀ [dV'  −dV' Sᵀ] */
    for (int t = 0; t < n; t++)
        memcpy(Y + (size_t)t * ld, dVp + (size_t)t * d_v, (size_t)d_v * sizeof(float));
    ttt_fused_gemm(0, 1, n, d_k, d_v, -1.0f, dVp, d_v, S, d_v, 0.0f, Y + d_v, ld);
    if (w->Xd)
        cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasUnit, n, ld, 1.0f, Ai,
                    n, Y, ld);
    else
        cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasTrans, CblasUnit, n, ld, 1.0f, Ai,
                    n, Y, ld);
    for (int t = 0; t < n; t++) {
        const float *yu = Y + (size_t)t * ld, *yw = yu + d_v;
        const float bt = BETA(t);
        double su = 0.0, sw = 0.0;
        for (int j = 0; j < d_v; j++) {
            if (gv) gv[(size_t)t * d_v + j] += bt * yu[j];
            su += (double)yu[j] * v[(size_t)t * d_v + j];
        }
        for (int c = 0; c < d_k; c++) {
            const size_t tc = (size_t)t * d_k + c;
            const double x = (double)yw[c] * Ge[tc] * k[tc];
            dK[tc] += bt * Ge[tc] * yw[c];
            sw += x;
            dG[tc] += bt * x;
        }
        db[t] += su + sw;
    }
    /* dAr = −strictly_lower(Y [U W]ᵀ) (into dA); dβ_t += Σ_s dAr_ts KK_ts; dKK = diag(β) dAr */
    ttt_fused_gemm(0, 1, n, n, ld, -1.0f, Y, ld, UW, ld, 0.0f, w->dA, n);
    for (int t = 0; t < n; t++) {
        float *Nt = w->dA + (size_t)t * n;
        const float *KKt = KK + (size_t)t * n, bt = BETA(t);
        double sb = 0.0;
        for (int s = 0; s < t; s++) {
            sb += (double)Nt[s] * KKt[s];
            Nt[s] *= bt;
        }
        for (int s = t; s < n; s++) Nt[s] = 0.0f;
        db[t] += sb;
    }
    /* the pair products KK and P */
    kda_pairs_grad(w->dA, dP, q, k, G, Ge, n, d_k, dQ, dK, dG, &w->pw);
    for (size_t tc = 0; tc < nk; tc++) {
        if (gq) gq[tc] += dQ[tc];
        if (gk) gk[tc] += dK[tc];
    }
    if (gla) ttt_fused_add_reverse_cumsum(gla, dG, la, n, d_k);
    if (gb)
        for (int t = 0; t < n; t++) gb[t] += (float)db[t];
#undef BETA
}

typedef struct kda_saved {
    const float *S; /* (chunks, d_k, d_v) the state at every chunk start */
    int T, d_k, d_v, C;
} kda_saved;

static void kda_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dP) {
    const ttt_fused_io io = ttt_fused_io_get(ctx, e);
    const kda_saved *sv = e->aux;
    const int T = sv->T, d_k = sv->d_k, d_v = sv->d_v, C = sv->C, nch = (T + C - 1) / C;
    const size_t dkv = (size_t)d_k * d_v;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    kda_bws w;
    bws_init(ctx, &w, C, d_k, d_v);
    float *dS = ws_alloc(ctx, dkv * sizeof(float));
    memcpy(dS, dP + (size_t)T * d_v, dkv * sizeof(float));
    for (int c = nch - 1; c >= 0; c--) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        const size_t rk = (size_t)t0 * d_k, rv = (size_t)t0 * d_v;
        kda_chunk_backward(&w, dS, sv->S + (size_t)c * dkv, io.q->data + rk, io.k->data + rk,
                           io.v->data + rv, io.beta ? io.beta->data + t0 : NULL,
                           io.la->data + rk, dP + rv, io.gq ? io.gq + rk : NULL,
                           io.gk ? io.gk + rk : NULL, io.gv ? io.gv + rv : NULL,
                           io.gb ? io.gb + t0 : NULL, io.gla ? io.gla + rk : NULL, n, d_k, d_v);
    }
    ttt_fused_io_end(ctx, &io, dS, dkv, mark);
}

/* The differentiable chunkwise form: q, k (T, d_k), v (T, d_v), beta (T) or NULL, log_alpha
 * (T, d_k), S0 (d_k·d_v); O (T, d_v) and the final state *S_out, one recorded op. */
static ttt_tensor *kda_chunk_op(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                const ttt_tensor *k, const ttt_tensor *v, const ttt_tensor *beta,
                                const ttt_tensor *log_alpha, const ttt_tensor *S0, int chunk) {
    const int T = TTT_ROWS(k), d_k = TTT_COLS(k), d_v = TTT_COLS(v);
    TTT_ASSERT(TTT_ROWS(q) == T && TTT_ROWS(v) == T && TTT_COLS(q) == d_k && chunk >= 1);
    TTT_ASSERT(log_alpha && TTT_ROWS(log_alpha) == T && TTT_COLS(log_alpha) == d_k);
    TTT_ASSERT(!beta || beta->n == (size_t)T);
    TTT_ASSERT(S0->n == (size_t)d_k * d_v);
    const size_t dkv = (size_t)d_k * d_v;
    const ttt_tensor *in[6] = {q, k, v, beta, log_alpha, S0};
    int rec;
    ttt_tensor *P = ttt_fused_result(ctx, in, T, d_v, dkv, &rec);
    const int C = T > 0 ? (chunk < T ? chunk : T) : 1, nch = (T + C - 1) / C;
    float *saved = rec && nch ? ttt_tape_alloc(ctx, (size_t)nch * dkv * sizeof(float)) : NULL;
    const ttt_form_ld ld = {.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1, .la = d_k};
    kda_chunks(ctx, P->data, P->data + (size_t)T * d_v, q->data, k->data, v->data,
               beta ? beta->data : NULL, log_alpha->data, T, d_k, d_v, C, &ld, saved);
    ttt_tape_entry *e = ttt_tape_record(ctx, kda_backward, P, in, 6);
    if (e) {
        kda_saved *sv = ttt_tape_alloc(ctx, sizeof *sv);
        *sv = (kda_saved){.S = saved, .T = T, .d_k = d_k, .d_v = d_v, .C = C};
        e->aux = sv;
        e->name = "kda_chunkwise_fused";
    }
    *S_out = ttt_fused_part(ctx, P, (size_t)T * d_v, 2, (const int[]){d_k, d_v}, "kda_state");
    return ttt_fused_part(ctx, P, 0, 2, (const int[]){T, d_v}, "kda_o");
}

/* ---- the registry entry ---- */

extern const ttt_form_entry ttt_form_delta_rule_recurrent;

/* The tuple of the delta rule's closed forms (asked of its recurrent entry, which takes a gate
 * per key too), with a gate per key dimension. */
static const char *kda_available(const ttt_layer *L, const ttt_form_inputs *in) {
    const char *why = ttt_form_delta_rule_recurrent.available(L, in);
    if (why) return why;
    if (in && in->gate != TTT_FORM_GATE_KEY)
        return "KDA's chunkwise form takes a gate per key dimension; a scalar gate or none is "
               "the delta rule's chunkwise form (family delta_rule)";
    return NULL;
}

static ttt_status kda_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                              ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    (void)err;
    TTT_ASSERT(a->alpha_vec && a->log_alpha);
    const int T = TTT_ROWS(a->k), d_k = TTT_COLS(a->k), d_v = TTT_COLS(a->v);
    const float *beta = ttt_form_beta_array(ctx, L, a->eta, T);
    const ttt_form_ld ld = {.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1, .la = d_k};
    kda_chunks(ctx, o->data, st->W[0]->data, a->q->data, a->k->data, a->v->data, beta,
               a->log_alpha->data, T, d_k, d_v, L->chunk, &ld, NULL);
    return TTT_OK;
}

/* Under a tape: the op above (fused), or the generic driver's ops (the composed reference). */
static ttt_status kda_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o, ttt_layer_state *st,
                           const ttt_form_args *a, ttt_error *err) {
    TTT_ASSERT(a->alpha_vec && a->log_alpha);
    if (!a->fused)
        return ttt_forward_generic(ctx, L, o, st, a->q, a->k, a->v, a->eta, a->log_alpha, 1,
                                   err);
    const int T = TTT_ROWS(a->k);
    const ttt_tensor *beta = ttt_form_beta_node(ctx, L, a, T);
    ttt_tensor *S = NULL;
    ttt_tensor *O = kda_chunk_op(ctx, &S, a->q, a->k, a->v, beta, a->log_alpha, st->W[0],
                                 L->chunk);
    ttt_form_diff_output(ctx, o, O);
    ttt_form_set_state(ctx, &st->W[0], S);
    return TTT_OK;
}

static ttt_status kda_strided(ttt_ctx *ctx, const ttt_layer *L, float *S,
                              const ttt_form_strided *a, ttt_error *err) {
    (void)err;
    TTT_ASSERT(a->alpha_vec && a->log_alpha);
    kda_chunks(ctx, a->o, S, a->q, a->k, a->v, a->beta, a->log_alpha, a->T, L->d_k, L->d_v,
               L->chunk, &a->ld, NULL);
    return TTT_OK;
}

/* ws_init's allocations for chunks of C (≤ T) tokens, plus the β array (T), with 64 bytes of
 * the arena's alignment per allocation. */
static double kda_scratch(const ttt_layer *L, long T) {
    const double C = L->chunk < T ? L->chunk : (double)(T > 0 ? T : 1);
    const double dk = L->d_k, dv = L->d_v, Cp = 8 * ceil(C / 8);
    const double floats = 12 * C * dk + C * dv + C + C * (dk + C) + C * C + (dk + C) * dv +
                          (double)T;
    const double doubles = C * dk + Cp * Cp + dk;
    return floats * sizeof(float) + doubles * sizeof(double) + 24 * 64;
}

/* FLOPs per chunk of n tokens: the pair products KK and P (2 n² d_k, the diagonal blocks'
 * per-pair factors counted as products), the explicit inverse (n³/3), the two strmm
 * (n² (d_k + d_v)), W S, the read-out [e^G⊙Q | P][S; V'] and the state write (2 n d_v (3 d_k
 * + n)). */
static double kda_flops(const ttt_layer *L, long T) {
    const double dk = L->d_k, dv = L->d_v;
    double f = 0;
    for (long t0 = 0; t0 < T; t0 += L->chunk) {
        const double n = (double)(t0 + L->chunk <= T ? L->chunk : T - t0);
        f += 2 * n * n * dk + n * n * n / 3 + n * n * (dk + dv) + 2 * n * dv * (3 * dk + n);
    }
    return f;
}

const ttt_form_entry ttt_form_kda_chunkwise = {
    .family = "kda",
    .form = "chunkwise",
    .chunked = 1,
    .help = "KDA (the delta rule with a gate per key dimension) in chunks via the UT transform, "
            "the decay inside the key products (docs/math.md 4.5)",
    /* above the recurrent entry (10), the only other closed form of a gate per key: measured
     * (docs/math.md §4.5 "Chunkwise form") its backward runs 1.7× (d = 64) to 3.4× (d = 128)
     * the recurrent one's speed and its forward 0.9× to 1.1× */
    .auto_rank = 12,
    .available = kda_available,
    .forward = kda_forward,
    .forward_diff = kda_diff,
    .forward_strided = kda_strided,
    .scratch_bytes = kda_scratch,
    .flops = kda_flops,
};
