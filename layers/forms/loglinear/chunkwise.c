/* Log-linear attention in chunks (docs/math.md §4.8 "Forms"). Log-linear Mamba-2 here: the
 * linear-attention tuple with
 * Λ = ttt_layer.levels > 1 Fenwick levels, chunks of C = 2^c tokens aligned to absolute
 * positions, C the largest power of two ≤ layer.chunk (the paper's chunked algorithm). For token t = P + i of the chunk starting at P and
 * a token j < P, t xor j has its highest bit at c or above, so every token of the chunk reads the
 * earlier tokens in the same levels ℓ > c — the Fenwick tree of the chunks — and the chunk's own
 * tokens in levels ℓ(i, j) = bitlen(i xor j) ≤ c:
 *
 *     o_t = e^{G_i} Σ_{ℓ > c} q_t^ℓ S^ℓ                               (inter-chunk, one GEMM)
 *         + Σ_{j ≤ i} (q_t^{ℓ(i, j)} · k_j) β_j e^{G_i − G_j} v_j      (intra-chunk, hierarchical mask)
 *
 * with S^ℓ the levels after the merge of position P (levels 0 … c are then empty) and G the
 * chunk's cumulative log retentions (floored at resets, kernels.h ttt_gate_floor). At the chunk's
 * end every level ℓ > c decays by e^{G_{n−1}} once, and levels 0 … c take the chunk's tokens as
 * the recurrence leaves them after its last token n − 1: token j in level bitlen((n − 1) xor j).
 * O(T·C·d + T·Λ·d²/C·…) work; the same state, token for token, as the recurrent form
 * (recurrent.c), which computes the chunks this one does not: the tokens before the first
 * aligned chunk of a call, and any chunk whose start leaves levels 0 … c non-empty (a state
 * given from outside at a position that is not a chunk start). The log-linear (gated) delta
 * rule's chunks are chunkwise_delta.c's, on the same chunks and schedule, with a chunked
 * backward under a tape; log-linear Mamba-2 under a tape runs the recurrent form's custom op
 * (its backward is written by hand). */
#include <math.h>
#include <string.h>

#include "composed.h"
#include "fused_grad.h"
#include "kernels.h"
#include "loglinear.h"

extern const ttt_form_entry ttt_form_loglinear_recurrent;

static int n_lev(const ttt_layer *L) { return L->levels > 1 ? L->levels : 1; }

/* log2 of the chunk this form runs: the largest power of two ≤ layer.chunk, at most 4096 (the
 * chunks must be nodes of the Fenwick tree). */
static int chunk_bits(int chunk) {
    int c = 0;
    while (c < 12 && (2 << c) <= chunk) c++;
    return c;
}

/* The recurrent form's tuples (linear attention and the delta rule, recurrent.c). */
static const char *llc_available(const ttt_layer *L, const ttt_form_inputs *in) {
    return ttt_form_loglinear_recurrent.available(L, in);
}

static int merge_target(long p, int nl) { return ttt_ll_merge_target(p, nl); }

/* One token of the recurrence (recurrent.c's arithmetic without its pending decays: the chunks
 * this form leaves to it are few): merge, α S + β kᵀ v on level 0, α S elsewhere, read-out. */
TTT_FP_CONTRACT static void llc_token(float *o, float *S, long p, const float *q, const float *k,
                                      const float *v, float b, float a, int nl, int d_k,
                                      int d_v) {
    const size_t dkv = (size_t)d_k * d_v;
    const int m = merge_target(p, nl);
    for (int l = 0; l < m; l++)
        for (size_t x = 0; x < dkv; x++) {
            S[(size_t)m * dkv + x] += S[(size_t)l * dkv + x];
            S[(size_t)l * dkv + x] = 0.0f;
        }
    for (int i = 0; i < d_k; i++) {
        const float bk = b * k[i];
        float *Si = S + (size_t)i * d_v;
        for (int j = 0; j < d_v; j++) Si[j] = a * Si[j] + bk * v[j];
    }
    for (size_t x = dkv; x < (size_t)nl * dkv; x++) S[x] *= a;
    for (int j = 0; j < d_v; j++) o[j] = 0.0f;
    for (int r = 0; r < nl * d_k; r++)
        for (int j = 0; j < d_v; j++) o[j] += q[r] * S[(size_t)r * d_v + j];
}

typedef struct llc_scratch {
    double *G;  /* (C) cumulative floored log α within the chunk */
    double *cp; /* (nl) the inter-chunk levels' pending decays */
    float *A;   /* (C, C) the masked scores */
    float *eg;  /* (C) e^{G_i} */
    float *W;   /* (C, d_k) the chunk's keys weighted for the state update */
    float *Qs;  /* (C, Λ·d_k) the inter-chunk levels' queries, scaled */
} llc_scratch;

/* The chunk of n ≤ C tokens at absolute position P (a multiple of C), levels 0 … c empty after
 * the merge of P (done by the caller). q (n, nl·d_k), k (n, d_k), v (n, d_v), beta, la (n) or
 * NULL; o (n, d_v) written; S (nl·d_k, d_v) in/out. */
static void llc_chunk(float *o, float *S, const float *q, const float *k, const float *v,
                      const float *beta, const float *la, int n, int c, int nl, int d_k,
                      int d_v, const llc_scratch *w) {
    const size_t dkv = (size_t)d_k * d_v;
    const int lo = c + 1 < nl ? c + 1 : nl; /* the first inter-chunk level */
    double g = 0.0;
    for (int i = 0; i < n; i++) {
        g += la ? (double)ttt_gate_floor(la[i]) : 0.0;
        w->G[i] = g;
        w->eg[i] = (float)exp(g);
    }
    /* intra-chunk: A[i][j] = (q_i^{ℓ(i, j)} · k_j) β_j e^{G_i − G_j}, ℓ(i, j) = bitlen(i xor j),
     * clamped to the top level */
    for (int i = 0; i < n; i++) {
        float *Ai = w->A + (size_t)i * n;
        for (int j = 0; j <= i; j++) {
            const int l = ttt_ll_level(i, j, nl);
            const float *qi = q + ((size_t)i * nl + l) * d_k, *kj = k + (size_t)j * d_k;
            float s = 0.0f;
            for (int x = 0; x < d_k; x++) s += qi[x] * kj[x];
            Ai[j] = s * (beta ? beta[j] : 1.0f) * (float)exp(w->G[i] - w->G[j]);
        }
        for (int j = i + 1; j < n; j++) Ai[j] = 0.0f;
    }
    ttt_fused_gemm(0, 0, n, d_v, n, 1.0f, w->A, n, v, d_v, 0.0f, o, d_v);
    /* inter-chunk: o_i += e^{G_i} Σ_{ℓ ≥ lo} c_ℓ q_i^ℓ S^ℓ (c_ℓ the level's pending decay): the
     * scaled queries of those levels side by side, one GEMM against the levels one after the
     * other */
    if (lo < nl) {
        const int wq = (nl - lo) * d_k;
        for (int i = 0; i < n; i++) {
            const float *qi = q + ((size_t)i * nl + lo) * d_k;
            float *qs = w->Qs + (size_t)i * wq;
            for (int l = lo; l < nl; l++) {
                const float f = (float)(exp(w->G[i]) * w->cp[l]);
                for (int r = (l - lo) * d_k; r < (l - lo + 1) * d_k; r++) qs[r] = qi[r] * f;
            }
        }
        ttt_fused_gemm(0, 0, n, d_v, wq, 1.0f, w->Qs, wq, S + (size_t)lo * dkv, d_v, 1.0f, o,
                       d_v);
        /* the inter-chunk levels decay over the chunk: kept aside until they merge (as the
         * recurrent form keeps linear attention's, recurrent.c: S·α rounded every chunk with S
         * otherwise unchanged errs the same way every chunk) */
        for (int l = lo; l < nl; l++) w->cp[l] *= exp(w->G[n - 1]);
    }
    /* levels 0 … c: the chunk's tokens as the recurrence leaves them after token n − 1 */
    for (int l = 0; l < lo; l++) {
        int any = 0;
        for (int j = 0; j < n; j++) {
            const int lj = ttt_ll_level(n - 1, j, nl);
            const float f = lj == l ? (beta ? beta[j] : 1.0f) * (float)exp(w->G[n - 1] - w->G[j])
                                    : 0.0f;
            any |= f != 0.0f;
            for (int x = 0; x < d_k; x++) w->W[(size_t)j * d_k + x] = f * k[(size_t)j * d_k + x];
        }
        /* levels 0 … c were empty: S^l = Wᵀ V (at l = nl − 1 ≤ c the top level adds) */
        if (any || l < nl - 1)
            ttt_fused_gemm(1, 0, d_k, d_v, n, 1.0f, w->W, d_k, v, d_v,
                           l == nl - 1 && lo == nl ? 1.0f : 0.0f, S + (size_t)l * dkv, d_v);
    }
}

/* The merge of position p with the pending decays: the merged levels and the target settled. */
static void llc_merge(float *S, double *cp, long p, int nl, size_t dkv) {
    const int m = merge_target(p, nl);
    if (!m) return;
    for (int l = 0; l <= m; l++) {
        const float f = (float)cp[l];
        if (f != 1.0f)
            for (size_t x = 0; x < dkv; x++) S[(size_t)l * dkv + x] *= f;
        cp[l] = 1.0;
    }
    for (int l = 0; l < m; l++)
        for (size_t x = 0; x < dkv; x++) {
            S[(size_t)m * dkv + x] += S[(size_t)l * dkv + x];
            S[(size_t)l * dkv + x] = 0.0f;
        }
}

static void llc_settle(float *S, double *cp, int nl, size_t dkv) {
    for (int l = 0; l < nl; l++) {
        const float f = (float)cp[l];
        if (f != 1.0f)
            for (size_t x = 0; x < dkv; x++) S[(size_t)l * dkv + x] *= f;
        cp[l] = 1.0;
    }
}

/* Whether levels 0 … c of S are all zero (the chunk algorithm's premise). */
static int low_levels_empty(const float *S, int c, int nl, size_t dkv) {
    const int lo = c + 1 < nl ? c + 1 : nl;
    for (size_t x = 0; x < (size_t)lo * dkv; x++)
        if (S[x] != 0.0f) return 0;
    return 1;
}

static ttt_status llc_forward(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                              ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    (void)err;
    if (!ttt_layer_is_linear_attention(L)) /* the delta rule */
        return ttt_loglinear_delta_chunkwise(ctx, L, o, st, a, chunk_bits(L->chunk));
    const int T = TTT_ROWS(a->q), d_k = TTT_COLS(a->k), d_v = TTT_COLS(a->v), nl = n_lev(L);
    const int c = chunk_bits(L->chunk), C = 1 << c;
    const size_t dkv = (size_t)d_k * d_v;
    const float *beta = ttt_form_beta_array(ctx, L, a->eta, T);
    const float *la = a->log_alpha ? a->log_alpha->data : NULL;
    const float *q = a->q->data, *k = a->k->data, *v = a->v->data;
    float *S = st->W[0]->data, *out = o->data;
    llc_scratch w = {.G = ttt_arena_alloc(ctx->arena, (size_t)C * sizeof(double)),
                     .A = ttt_arena_alloc(ctx->arena, (size_t)C * C * sizeof(float)),
                     .eg = ttt_arena_alloc(ctx->arena, (size_t)C * sizeof(float)),
                     .W = ttt_arena_alloc(ctx->arena, (size_t)C * d_k * sizeof(float)),
                     .cp = ttt_arena_alloc(ctx->arena, (size_t)nl * sizeof(double)),
                     .Qs = ttt_arena_alloc(ctx->arena, (size_t)C * nl * d_k * sizeof(float))};
    TTT_ASSERT(w.G && w.A && w.eg && w.W && w.cp && w.Qs);
    for (int l = 0; l < nl; l++) w.cp[l] = 1.0;
    const long p0 = st->pos;
    int t = 0;
    while (t < T) {
        const long p = p0 + t;
        const int n = (int)(T - t < C ? T - t : C);
        int chunked = p % C == 0;
        if (chunked) { /* the merge of the chunk's first position, then the premise */
            llc_merge(S, w.cp, p, nl, dkv);
            chunked = low_levels_empty(S, c, nl, dkv);
            if (chunked) {
                llc_chunk(out + (size_t)t * d_v, S, q + (size_t)t * nl * d_k,
                          k + (size_t)t * d_k, v + (size_t)t * d_v, beta ? beta + t : NULL,
                          la ? la + t : NULL, n, c, nl, d_k, d_v, &w);
                t += n;
                continue;
            }
        }
        /* token by token up to the next chunk start (the merge of p, if done above, is
         * idempotent: levels below its target are empty) */
        const long next = (p / C + 1) * C;
        llc_settle(S, w.cp, nl, dkv);
        for (; t < T && p0 + t < next; t++)
            llc_token(out + (size_t)t * d_v, S, p0 + t, q + (size_t)t * nl * d_k,
                      k + (size_t)t * d_k, v + (size_t)t * d_v, beta ? beta[t] : 1.0f,
                      la ? expf(la[t]) : 1.0f, nl, d_k, d_v);
    }
    llc_settle(S, w.cp, nl, dkv);
    return TTT_OK;
}

static double llc_scratch_bytes(const ttt_layer *L, long T) {
    if (!ttt_layer_is_linear_attention(L))
        return ttt_loglinear_delta_chunkwise_scratch(L, T, 1 << chunk_bits(L->chunk));
    const double C = 1 << chunk_bits(L->chunk);
    /* β (T), G (C doubles), the scores (C²), e^G (C), the weighted keys (C·d_k), the pending
     * decays (Λ doubles), the scaled queries (C·Λ·d_k), with 128 floats for the headers and the
     * arena's alignment */
    return ((double)T + 2 * C + C * C + C + C * L->d_k + 2.0 * n_lev(L) +
            C * n_lev(L) * L->d_k + 128) *
           sizeof(float);
}

static double llc_flops(const ttt_layer *L, long T) {
    const double C = 1 << chunk_bits(L->chunk), nl = n_lev(L), dk = L->d_k, dv = L->d_v;
    if (!ttt_layer_is_linear_attention(L)) {
        /* per token, chunkwise_delta.c: L and T (C d_k + C²/3), the pair products q^ℓ kᵀ of
         * every level (2 Λ C d_k) and the coefficients (C²), M V (C d_v); per level above c
         * K S, T R, A E, Kwᵀ E (6 d_k d_v + 4 C d_v), the read e^G q S (2 d_k d_v); the low
         * levels' end states (≤ 4 d_k d_v over all of them, their runs sum to < 2C rows) */
        const double c = chunk_bits(L->chunk), hi = nl - c - 1 > 0 ? nl - c - 1 : 0;
        return (double)T * (C * dk + C * C / 3 + 2 * nl * C * dk + C * C + 2 * C * dv +
                            hi * (8 * dk * dv + 4 * C * dv) + 4 * dk * dv);
    }
    /* per token: the masked scores (C/2 · 2 d_k), their product with V (C d_v), the inter-chunk
     * read-out (2 Λ d_k d_v), the state update (2 d_k d_v per low level, per chunk token) */
    return (double)T * (C * dk + C * dv + 2.0 * nl * dk * dv + 2.0 * dk * dv);
}

/* Under a tape: the log-linear delta rule's chunked op with its hand-written backward
 * (chunkwise_delta.c) where it fits the call, else (and for log-linear Mamba-2) the recurrent
 * form's custom op. */
static ttt_status llc_forward_diff(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor *o,
                                   ttt_layer_state *st, const ttt_form_args *a, ttt_error *err) {
    const int T = TTT_ROWS(a->q), c = chunk_bits(L->chunk);
    if (!ttt_layer_is_linear_attention(L) &&
        ttt_loglinear_delta_chunk_op_fits(L, st->W[0], st->pos, T, c)) {
        const ttt_tensor *beta = ttt_form_beta_node(ctx, L, a, T);
        ttt_tensor *S = NULL;
        ttt_tensor *O = ttt_loglinear_delta_chunk_op(ctx, &S, L, a->q, a->k, a->v, beta,
                                                     a->log_alpha, st->W[0], st->pos, c);
        ttt_form_diff_output(ctx, o, O);
        ttt_form_set_state(ctx, &st->W[0], S);
        return TTT_OK;
    }
    return ttt_form_loglinear_recurrent.forward_diff(ctx, L, o, st, a, err);
}

const ttt_form_entry ttt_form_loglinear_chunkwise = {
    .family = "loglinear",
    .form = "chunkwise",
    .help = "log-linear attention (Mamba-2, gated DeltaNet) in chunks (the largest power of two "
            "<= layer.chunk): the hierarchical mask within a chunk, the Fenwick tree of chunk "
            "states across them (docs/math.md 4.8)",
    /* over the recurrent form's 10 (docs/math.md §4.8, T = 4096, d = 64, Λ = 13): log-linear
     * Mamba-2 0.19M against 0.11M tokens/s, log-linear Gated DeltaNet 125K against 24K – 32K;
     * under a tape the Gated DeltaNet's chunked op takes a training step in a fifth of the
     * recurrent op's time, and Mamba-2 runs the recurrent custom op */
    .auto_rank = 12,
    .chunked = 1,
    .levels = 1,
    .available = llc_available,
    .forward = llc_forward,
    .forward_diff = llc_forward_diff,
    .scratch_bytes = llc_scratch_bytes,
    .flops = llc_flops,
};
