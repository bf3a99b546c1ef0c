/* Matmul-heavy forms of the (gated) delta rule: chunkwise WY / UT transform (docs/math.md §5.3) and
 * the quadratic parallel form (docs/math.md §5.1). Both must equal the recurrent definition
 * ttt_delta_rule_recurrent (layers/forms/delta_rule/recurrent.c):
 *     S_t = α_t (I − β_t k_tᵀ k_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t.
 *
 * Derivation of one chunk (used by both forms). With G_t = Σ_{s ≤ t in chunk} log α_s and the
 * state S at the chunk start, write S_t = exp(G_t) S + Σ_{j ≤ t} exp(G_t − G_j) k_jᵀ v'_j. The
 * recurrence S_t = α_t S_{t−1} + β_t k_tᵀ(v_t − α_t k_t S_{t−1}) then fixes the pseudo-values
 *     v'_t + β_t Σ_{j<t} Γ_tj (k_t·k_j) v'_j = β_t v_t − β_t exp(G_t) k_t S,
 * i.e. A V' = β⊙V − (β⊙exp(G)⊙K) S with A = I + strictly_lower(diag(β) K Kᵀ ⊙ Γ), so
 * V' = U − W S with U = A⁻¹(β⊙V), W = A⁻¹(β⊙exp(G)⊙K) (two unit-lower triangular solves), and
 *     O = (exp(G)⊙Q) S + ((Q Kᵀ) ⊙ Γ) V'        (Γ masked to i ≥ j, diagonal included)
 *     S ← exp(G_C) S + (exp(G_C − G)⊙K)ᵀ V'.
 *
 * Numerics (docs/math.md §0): gates enter only as exp of differences G_i − G_j with i ≥ j, exp(G_i)
 * and exp(G_C − G_i), all ≤ 0 in the exponent for retentions α ≤ 1, so nothing overflows; the
 * cumulative sums are kept in double so that the differences of long sums (the parallel form
 * over a whole sequence) do not lose the small in-between gate values to cancellation. Only the
 * difference is rounded to float before the exponential (ttt_fast_expf, ≤ 2 ulp): a relative
 * error of 2^-24·|G_i − G_j| in Γ_ij, negligible wherever Γ_ij itself is not. A is used through
 * its lower triangle only (ssyrk writes it; the explicit inverse, strmm and strsm read it); the
 * read-out's (Q Kᵀ) ⊙ Γ is zeroed above the diagonal and applied as one dense product together
 * with the inter-chunk read (see delta_chunk). Hard resets (log α < −104, −inf included;
 * docs/math.md §0 "Hard resets") enter G as −104 (ttt_gate_floor, kernels.h): every factor that
 * spans a reset is ≤ e^−104, 0 in float, so A splits into independent blocks at the reset and
 * exp(G) ⊙ K, the part of W that sees the incoming state, is 0 from it on. */
#include "blas.h"
#include <math.h>
#include <string.h>

#include "fastexp.h"
#include "kernels.h"

/* Chunks of at most this many tokens invert A explicitly (n³/6 multiply-adds, small next to the
 * chunk's n·d² work) and apply the inverse with strmm, which OpenBLAS runs ~2.5× faster than strsm
 * at these sizes (perf, n = 64, d = 128: strsm_kernel 15 % of the time for 11 % of the FLOPs).
 * Longer ones (the parallel form, one chunk of T) solve with strsm: n² per right-hand side
 * instead of n³. */
#define DELTA_INVERT_MAX 128

/* Scratch for one chunk of at most C tokens, allocated once per call from the arena. */
typedef struct delta_scratch {
    float *A;   /* (C, C): strictly lower part of A, then of A⁻¹ (unit diagonal implied) */
    float *Gam; /* (C, C): Γ_ij = exp(G_i − G_j), i > j (only with decay) */
    float *X;   /* (C, d_k + C): [exp(G)⊙Q | (Q Kᵀ) ⊙ Γ masked to i ≥ j], the read-out's left
                 * factor, so that O = X Y is one sgemm */
    float *Y;   /* (d_k + C, d_v): [S; V'], the working state stacked on the pseudo-values */
    float *Wk;  /* (C, d_k): β⊙exp(G)⊙K → W, then exp(G_C − G)⊙K */
    float *eg;  /* (C): exp(G_i) */
    double *g;  /* (C): G_i, in-chunk cumulative log retention */
    double *Xd; /* (Cp, Cp), Cp = C rounded up to 8, when C ≤ DELTA_INVERT_MAX: the inverse of A
                 * formed in float64 (ttt_unit_lower_invert) */
} delta_scratch;

static void scratch_alloc(ttt_ctx *ctx, delta_scratch *w, int C, int d_k, int d_v, int decay) {
    ttt_arena *a = ctx->arena;
    w->A = ttt_arena_alloc(a, (size_t)C * C * sizeof(float));
    w->Gam = decay ? ttt_arena_alloc(a, (size_t)C * C * sizeof(float)) : NULL;
    w->X = ttt_arena_alloc(a, (size_t)C * (d_k + C) * sizeof(float));
    w->Y = ttt_arena_alloc(a, (size_t)(d_k + C) * d_v * sizeof(float));
    w->Wk = ttt_arena_alloc(a, (size_t)C * d_k * sizeof(float));
    w->eg = ttt_arena_alloc(a, (size_t)C * sizeof(float));
    w->g = ttt_arena_alloc(a, (size_t)C * sizeof(double));
    const size_t Cp = (size_t)((C + 7) & ~7); /* ttt_unit_lower_invert's padded size */
    w->Xd = C <= DELTA_INVERT_MAX ? ttt_arena_alloc(a, Cp * Cp * sizeof(double)) : NULL;
    /* The kernels have no error channel (kernels.h): running out of scratch is fatal. */
    TTT_ASSERT(w->A && (w->Gam || !decay) && w->X && w->Y && w->Wk && w->eg && w->g &&
               (w->Xd || C > DELTA_INVERT_MAX));
}

/* Eight doubles: the row blocks the inverse below works in (gcc/clang vector extension; with
 * AVX-512 one register, otherwise split by the compiler). Loads and stores go through memcpy,
 * which compiles to one unaligned move and says nothing about alignment or aliasing; they are
 * macros, not functions, because passing such a vector by value has a different ABI with and
 * without AVX-512 (gcc's -Wpsabi). */
typedef double inv_v8 __attribute__((vector_size(64)));
#define INV_LOAD(v, p) memcpy(&(v), (p), sizeof(inv_v8))
#define INV_STORE(p, v) memcpy((p), &(v), sizeof(inv_v8))

/* In place: the strictly lower part L of A (n, n) becomes that of (I + L)⁻¹, whose diagonal is 1.
 * Row i of X = (I + L)⁻¹ follows from (I + L) X = I: X_i = e_i − Σ_{j<i} L_ij X_j, where the
 * rows X_j (j < i) are already formed above it. X is formed in float64 and rounded once: the
 * substitution's n steps amplify float32 rounding when the keys are far from orthogonal and β
 * near 2 (halved the chunkwise error at β = 2, C = 64: docs/forms.md "Precision on hard
 * inputs"), for n³/6 multiply-adds.
 *
 * Blocked by eight rows, in np = n rounded up to 8 columns (X is np × np), so that every inner step is a whole 8-wide vector: for the rows i of a block
 * starting at r0, (1) the columns left of the block, X_i[c0, c0+8) = −Σ_{c0 ≤ j < r0} L_ij X_j[c0,
 * c0+8) (X_j is zero right of its diagonal), eight independent accumulators per column block, and
 * (2) the substitution inside the block, X_i −= L_ij X_j for r0 ≤ j < i over columns [0, r0 + 8).
 * Row by row with axpys of length j instead, the substitution ran at a fraction of the vector
 * rate (each short row's tail reloaded what the step before had just stored): it was about 60 %
 * of the chunk kernel's own time outside BLAS at d_k = d_v = 8, C = 64 (the MQAR model's heads;
 * perf, docs/benchmarks.md "Training step"). */
TTT_FP_CONTRACT
void ttt_unit_lower_invert(float *A, /* (n, n) in/out, strictly lower part only */
                              double *X, /* (np, np) scratch */
                              int n) {
    const int np = (n + 7) & ~7;
    /* X_i's columns [r0, r0 + 8) of its own block, before (2) (step (1) writes those left of
     * them, and nothing reads those right of them) */
    for (int i = 0; i < n; i++) { /* padding rows: nothing reads them */
        double *Xi = X + (size_t)i * np;
        const int r0 = i & ~7;
        for (int c = r0; c < r0 + 8; c++) Xi[c] = 0.0;
        Xi[i] = 1.0;
    }
    for (int r0 = 0; r0 < n; r0 += 8) {
        /* the block's rows of L; padding rows (r0 + r ≥ n) read row n − 1 instead: step (1)
         * fills their rows of X, which no real row reads, so their values do not matter */
        const float *Lr[8];
        for (int r = 0; r < 8; r++) Lr[r] = A + (size_t)(r0 + r < n ? r0 + r : n - 1) * n;
        for (int c0 = 0; c0 < r0; c0 += 8) { /* (1) */
            inv_v8 acc[8] = {{0}};
            for (int j = c0; j < r0; j++) {
                inv_v8 xj;
                INV_LOAD(xj, X + (size_t)j * np + c0);
                for (int r = 0; r < 8; r++) acc[r] += (double)Lr[r][j] * xj;
            }
            for (int r = 0; r < 8; r++) {
                acc[r] = -acc[r];
                INV_STORE(X + (size_t)(r0 + r) * np + c0, acc[r]);
            }
        }
        for (int r = 1; r < 8 && r0 + r < n; r++) { /* (2); padding rows are never read */
            double *Xi = X + (size_t)(r0 + r) * np;
            for (int j = r0; j < r0 + r; j++) {
                const double l = Lr[r][j];
                const double *Xj = X + (size_t)j * np;
                for (int c = 0; c < r0 + 8; c += 8) {
                    inv_v8 xi, xj;
                    INV_LOAD(xi, Xi + c);
                    INV_LOAD(xj, Xj + c);
                    xi -= l * xj;
                    INV_STORE(Xi + c, xi);
                }
            }
        }
    }
    for (int i = 1; i < n; i++)
        for (int c = 0; c < i; c++) A[(size_t)i * n + c] = (float)X[(size_t)i * np + c];
}

void ttt_unit_lower_apply(float *A, double *X, int n, float *U, int d_v, float *W, int d_k) {
    if (X) {
        ttt_unit_lower_invert(A, X, n);
        cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, n, d_v, 1.0f,
                    A, n, U, d_v);
        cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, n, d_k, 1.0f,
                    A, n, W, d_k);
    } else {
        cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, n, d_v, 1.0f,
                    A, n, U, d_v);
        cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, n, d_k, 1.0f,
                    A, n, W, d_k);
    }
}

/* One chunk of n tokens (docs/math.md §5.3). The state lives in rows 0…d_k−1 of w->Y (the caller
 * copies it in and out), on entry at the chunk start and on return at its end. Rows of the
 * sequence arrays are ld->q, ld->k, … floats apart (kernels.h, ttt_form_ld). */
static void delta_chunk(float *o,               /* (n, d_v) row stride ld->o */
                        const float *q,         /* (n, d_k) row stride ld->q */
                        const float *k,         /* (n, d_k) row stride ld->k */
                        const float *v,         /* (n, d_v) row stride ld->v */
                        const float *beta,      /* (n) stride ld->beta, or NULL */
                        const float *log_alpha, /* (n) stride ld->la, or NULL */
                        int n, int d_k, int d_v, const ttt_form_ld *ld,
                        const delta_scratch *w,
                        double *drift) { /* the state decays' rounding so far (kernels.h) */
    const int ldq = ld->q, ldk = ld->k, ldv = ld->v, ldb = ld->beta;
    const int ldx = d_k + n; /* row stride of X for this chunk */
    float *A = w->A, *Gam = w->Gam, *X = w->X, *Wk = w->Wk, *eg = w->eg;
    float *S = w->Y, *U = w->Y + (size_t)d_k * d_v; /* (d_k, d_v) state, (n, d_v) U → V' */
    float *M = X + d_k;                               /* right block of X, row stride ldx */
    double *g = w->g;
    const int decay = log_alpha != NULL;
    if (decay) {
        double acc = 0.0;
        for (int i = 0; i < n; i++) {
            acc += ttt_gate_floor(log_alpha[(size_t)i * ld->la]); /* resets: kernels.h */
            g[i] = acc;
            eg[i] = (float)exp(acc);
        }
        /* n²/2 exponentials per chunk: the vectorizable ttt_fast_expf (fastexp.h, ≤ 2 ulp) */
        for (int i = 0; i < n; i++) {
            float *Gi = Gam + (size_t)i * n;
            for (int j = 0; j < i; j++) Gi[j] = ttt_fast_expf((float)(g[i] - g[j]));
        }
    }

    /* A = I + strictly_lower(diag(β) K Kᵀ ⊙ Γ): ssyrk writes the lower triangle of K Kᵀ; the
     * unit diagonal is implied by the solves, which never read it. */
    cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, n, d_k, 1.0f, k, ldk, 0.0f, A, n);
    for (int i = 1; i < n; i++) {
        float bi = beta ? beta[(size_t)i * ldb] : 1.0f;
        float *Ai = A + (size_t)i * n;
        if (decay) {
            const float *Gi = Gam + (size_t)i * n;
            for (int j = 0; j < i; j++) Ai[j] *= bi * Gi[j];
        } else {
            for (int j = 0; j < i; j++) Ai[j] *= bi;
        }
    }
    /* right-hand sides β⊙V (in U) and β⊙exp(G)⊙K (in Wk) */
    for (int i = 0; i < n; i++) {
        float bi = beta ? beta[(size_t)i * ldb] : 1.0f;
        float bk = decay ? bi * eg[i] : bi;
        const float *vi = v + (size_t)i * ldv, *ki = k + (size_t)i * ldk;
        float *Ui = U + (size_t)i * d_v, *Wi = Wk + (size_t)i * d_k;
        for (int j = 0; j < d_v; j++) Ui[j] = bi * vi[j];
        for (int j = 0; j < d_k; j++) Wi[j] = bk * ki[j];
    }
    /* U = A⁻¹(β⊙V), W = A⁻¹(β⊙exp(G)⊙K) */
    /* the inverse for chunks of at most DELTA_INVERT_MAX tokens (w->Xd), else solves */
    ttt_unit_lower_apply(A, w->Xd, n, U, d_v, Wk, d_k);
    /* V' = U − W S (in U) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d_v, d_k, -1.0f, Wk, d_k, S, d_v,
                1.0f, U, d_v);
    /* X = [exp(G)⊙Q | (Q Kᵀ) ⊙ Γ, masked to i ≥ j: token t reads its own write] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, d_k, 1.0f, q, ldq, k, ldk, 0.0f, M,
                ldx);
    for (int i = 0; i < n; i++) {
        float *Xi = X + (size_t)i * ldx, *Mi = M + (size_t)i * ldx;
        const float *qi = q + (size_t)i * ldq;
        const float e = decay ? eg[i] : 1.0f;
        for (int c = 0; c < d_k; c++) Xi[c] = e * qi[c];
        if (decay) {
            const float *Gi = Gam + (size_t)i * n;
            for (int j = 0; j < i; j++) Mi[j] *= Gi[j];
        }
        for (int j = i + 1; j < n; j++) Mi[j] = 0.0f;
    }
    /* O = (exp(G)⊙Q) S + ((Q Kᵀ) ⊙ Γ) V' = X [S; V'], one product, from the state at the chunk
     * start */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d_v, ldx, 1.0f, X, ldx, S, d_v,
                0.0f, o, ld->o);
    /* S ← exp(G_C) S + (exp(G_C − G)⊙K)ᵀ V' (W is dead: its buffer holds the decayed keys) */
    float eC = 1.0f;
    if (decay) {
        /* exp(G_C) rounded so that its product over the chunks stays exact (a weak gate would
         * otherwise round the same way every chunk; docs/forms.md "Precision on hard inputs") */
        eC = ttt_gate_dither(drift, exp(g[n - 1]));
        for (int i = 0; i < n; i++) {
            float c = expf((float)(g[n - 1] - g[i]));
            const float *ki = k + (size_t)i * ldk;
            float *Wi = Wk + (size_t)i * d_k;
            for (int j = 0; j < d_k; j++) Wi[j] = c * ki[j];
        }
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d_k, d_v, n, 1.0f, decay ? Wk : k,
                decay ? d_k : ldk, U, d_v, eC, S, d_v);
}

static void delta_chunks(ttt_ctx *ctx, float *o, float *S, const float *q, const float *k,
                         const float *v, const float *beta, const float *log_alpha, int T,
                         int d_k, int d_v, int chunk, const ttt_form_ld *ld) {
    TTT_ASSERT(chunk >= 1 && T >= 0 && d_k >= 1 && d_v >= 1);
    TTT_ASSERT(ld->q >= d_k && ld->k >= d_k && ld->v >= d_v && ld->o >= d_v);
    TTT_ASSERT((!beta || ld->beta >= 1) && (!log_alpha || ld->la >= 1));
    if (T == 0) return;
    const int C = chunk < T ? chunk : T;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
    delta_scratch w;
    scratch_alloc(ctx, &w, C, d_k, d_v, log_alpha != NULL);
    memcpy(w.Y, S, sizeof(float) * (size_t)d_k * d_v);
    double drift = 1.0;
    /* rows apart (a head of a (B, T, H, D) tensor): request the next chunk's rows ahead */
    const int spread = ttt_form_ld_spread(ld, d_k, d_v);
    for (int t0 = 0; t0 < T; t0 += C) {
        const int n = t0 + C <= T ? C : T - t0;
        const size_t r = (size_t)t0;
        if (spread && t0 + C < T) {
            const int n1 = t0 + 2 * C <= T ? C : T - t0 - C;
            ttt_prefetch_seq(ld, o, q, k, v, beta, log_alpha, 1, r + (size_t)C, n1, d_k, d_v);
        }
        delta_chunk(o + r * ld->o, q + r * ld->q, k + r * ld->k, v + r * ld->v,
                    beta ? beta + r * ld->beta : NULL, log_alpha ? log_alpha + r * ld->la : NULL,
                    n, d_k, d_v, ld, &w, &drift);
    }
    memcpy(S, w.Y, sizeof(float) * (size_t)d_k * d_v);
    ttt_arena_release(ctx->arena, mark);
}

/* Chunkwise (gated) delta rule, docs/math.md §5.3. Per chunk of C tokens (multiply-adds): one ssyrk
 * (C²d_k/2), the explicit inverse of A (C³/6), two strmm on d_v and d_k columns
 * (C²(d_k + d_v)/2), four sgemm (W S and the state write C d_k d_v each, Q Kᵀ C² d_k, the
 * read-out [exp(G)⊙Q | (Q Kᵀ)⊙Γ] [S; V'] C d_v (d_k + C)); C²/2 exponentials with decay. The
 * scratch is O(C² + C(d_k + d_v) + d_k d_v) floats, allocated once per call. Cost is linear in T.
 * Measured (docs/benchmarks.md; one thread, T = 4K–64K, d = 128, C = 64): 0.77–0.82 of
 * the single-thread sgemm rate on the docs/math.md §5.3 FLOP count; C = 16 gives the most tokens/s (1.5×
 * C = 64 for the gated delta rule), and the recurrent kernel is faster still for a single
 * sequence on this CPU (0.70 vs 0.46 M tokens/s at d = 128): its 64 KiB state stays in L2. */
void ttt_delta_rule_chunkwise(ttt_ctx *ctx, float *o, /* (T, d_v) */
                              float *S,               /* (d_k, d_v) in/out */
                              const float *q,         /* (T, d_k) */
                              const float *k,         /* (T, d_k) */
                              const float *v,         /* (T, d_v) */
                              const float *beta,      /* (T) or NULL */
                              const float *log_alpha, /* (T) or NULL */
                              int T, int d_k, int d_v, int chunk) {
    const ttt_form_ld ld = {.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1, .la = 1};
    delta_chunks(ctx, o, S, q, k, v, beta, log_alpha, T, d_k, d_v, chunk, &ld);
}

/* docs/math.md §5.3 on rows ld floats apart (kernels.h): what ttt apply runs on a head of a
 * (B, T, H, D) tensor in place. */
void ttt_delta_rule_chunkwise_ld(ttt_ctx *ctx, float *o, float *S, const float *q,
                                 const float *k, const float *v, const float *beta,
                                 const float *log_alpha, int T, int d_k, int d_v, int chunk,
                                 const ttt_form_ld *ld) {
    delta_chunks(ctx, o, S, q, k, v, beta, log_alpha, T, d_k, d_v, chunk, ld);
}

/* Parallel (quadratic) delta rule, docs/math.md §5.1: the quadratic reference form.
 *     O = (Q Kᵀ ⊙ M) (I + diag(β)(K Kᵀ ⊙ M⁻))⁻¹ diag(β) V        for S_0 = 0.
 * Generalized to an initial state S_0 and to decay exactly as §5.3 with ONE chunk of length T:
 * V' = A⁻¹(β⊙V) − A⁻¹(β⊙exp(G)⊙K) S_0, O = (exp(G)⊙Q) S_0 + ((Q Kᵀ) ⊙ Γ) V', with G the
 * cumulative log retention over the whole call; with S_0 = 0 and no decay this is the formula
 * above verbatim. The final state S_T is returned as for the other forms. It costs O(T² (d_k +
 * d_v)) time and T² floats (2T² with decay) of scratch: a reference for tests and short
 * sequences, not a production path (use the chunkwise form). */
void ttt_delta_rule_parallel(ttt_ctx *ctx, float *o, /* (T, d_v) */
                             float *S,               /* (d_k, d_v) in/out */
                             const float *q,         /* (T, d_k) */
                             const float *k,         /* (T, d_k) */
                             const float *v,         /* (T, d_v) */
                             const float *beta,      /* (T) or NULL */
                             const float *log_alpha, /* (T) or NULL */
                             int T, int d_k, int d_v) {
    const ttt_form_ld ld = {.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1, .la = 1};
    delta_chunks(ctx, o, S, q, k, v, beta, log_alpha, T, d_k, d_v, T > 0 ? T : 1, &ld);
}
