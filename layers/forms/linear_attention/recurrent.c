/* Recurrent (gated) linear attention, docs/math.md §4: the token-by-token definition
 *     S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t.
 * This is also the decoding path, so it is written to be tight: the state stays in one
 * (d_k, d_v) buffer updated in place (64 KiB at d = 128: L2-resident, L1 at d = 64), with no
 * allocation or library call per token, and the state is swept ONCE per token: each row S_i is
 * decayed, written and immediately read by q_t (o_t += q_ti S_i), in column blocks of LA_JB
 * floats so that the v_t and o_t pieces stay in vector registers while the rows stream past.
 * (The plain form — update all of S, then read all of S — sweeps the state twice.) The blocks use
 * GCC/Clang vector extensions (8 floats: one AVX2 register, or SSE pairs), which compile to the
 * same arithmetic on any x86-64 or ARM target; columns past the last full block take a scalar
 * loop. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fastexp.h"
#include "fault.h"
#include "kernels.h"
#include "vec8.h"

/* Column block: 32 floats = 4 vectors of 8 for each of v_t and o_t (8 of the 16 AVX2 registers). */
#define LA_JB 32
#define LA_NV (LA_JB / 8)

/* The full-block version of la_block below: v and o in registers. */
TTT_FP_CONTRACT static void la_block_v(float *restrict o,       /* (LA_JB) */
                       float *restrict S,       /* (n, ·) row stride d_v, in/out */
                       const float *restrict q, /* (n) */
                       const float *restrict k, /* (n) */
                       const float *restrict v, /* (LA_JB) */
                       const float *restrict a, /* (n) or NULL */
                       float a0, float b, int n, int d_v, int first) {
    ttt_v8f acc[LA_NV], vb[LA_NV];
    for (int u = 0; u < LA_NV; u++) {
        acc[u] = (ttt_v8f){0};
        if (!first) TTT_V8_LOAD(acc[u], o + 8 * u);
        TTT_V8_LOAD(vb[u], v + 8 * u);
    }
    for (int i = 0; i < n; i++) {
        const float ai = a ? a[i] : a0, bk = b * k[i], qi = q[i];
        float *restrict Si = S + (size_t)i * d_v;
        for (int u = 0; u < LA_NV; u++) {
            ttt_v8f x;
            TTT_V8_LOAD(x, Si + 8 * u);
            x = ai * x + bk * vb[u];
            TTT_V8_STORE(Si + 8 * u, x);
            acc[u] += qi * x;
        }
    }
    for (int u = 0; u < LA_NV; u++) TTT_V8_STORE(o + 8 * u, acc[u]);
}

/* Rows 0…n−1 of S, columns [0, jn) of the block at S (row stride d_v), jn ≤ LA_JB:
 *   S_i ← a_i S_i + bk_i v,   o += q_i S_i (after the write);
 * o starts from zero when `first`, else from its contents (the rows of a token in several groups).
 * `a` is one retention per row (vector gates) or NULL with the scalar `a0`. */
static void
la_block(float *restrict o,       /* (jn) */
         float *restrict S,       /* (n, ·) row stride d_v, in/out */
         const float *restrict q, /* (n) */
         const float *restrict k, /* (n) */
         const float *restrict v, /* (jn) */
         const float *restrict a, /* (n) or NULL */
         float a0, float b, int jn, int n, int d_v, int first) {
    float acc[LA_JB], vb[LA_JB];
    for (int j = 0; j < jn; j++) {
        acc[j] = first ? 0.0f : o[j];
        vb[j] = v[j];
    }
    for (int i = 0; i < n; i++) {
        const float ai = a ? a[i] : a0, bk = b * k[i], qi = q[i];
        float *restrict Si = S + (size_t)i * d_v;
        for (int j = 0; j < jn; j++) {
            const float s = ai * Si[j] + bk * vb[j];
            Si[j] = s;
            acc[j] += qi * s;
        }
    }
    for (int j = 0; j < jn; j++) o[j] = acc[j];
}

/* Rows of a token are taken in groups of at most LA_ROWS, the size of the stack buffers holding
 * their scaled queries, keys and anchor factors. */
#define LA_ROWS 512

/* Tokens ahead whose rows are requested (ttt_prefetch_rows) when they are strided. */
#define LA_AHEAD 4

/* With gates the state is kept as S̃ = S / A, A = exp(c) the retention accumulated since the
 * row's last anchor (c in float64, per row with vector gates):
 *     S̃_t = S̃_{t−1} + (β_t / A_t) k_tᵀ v_t,      o_t = (q_t ⊙ A_t) S̃_t,
 * so that the state is never multiplied by a retention rounded to float32. That product is what
 * drifts: with a weak constant gate (log α = −1e-5) each step rounds α S the same way and the
 * error adds up linearly in T (9e-5 relative at T = 16K; docs/forms.md "Precision on hard
 * inputs"). Here every contribution carries two roundings (of A_t and of β_s / A_s) whatever
 * its age. A row is re-anchored (S̃ ← A S̃, c ← 0: one rounding) when c falls below −LA_ANCHOR,
 * which bounds 1/A by e^LA_ANCHOR; at the end of the call S̃ is turned back into S. */
#define LA_ANCHOR 20.0

/* Rows of the sequence arrays are ld->q, ld->k, … floats apart (kernels.h, ttt_form_ld). */
ttt_status ttt_linear_attention_recurrent_ld(float *o,               /* (T, d_v) */
                                       float *S,               /* (d_k, d_v) in/out */
                                       const float *q,         /* (T, d_k) */
                                       const float *k,         /* (T, d_k) */
                                       const float *v,         /* (T, d_v) */
                                       const float *beta,      /* (T) or NULL */
                                       const float *log_alpha, /* (T) or (T, d_k) or NULL */
                                       int alpha_vec, int T, int d_k, int d_v,
                                       const ttt_form_ld *ld) {
    /* the current row group: anchor factors, scaled queries and keys */
    float f_rows[LA_ROWS], qs[LA_ROWS], ks[LA_ROWS];
    const int vec = log_alpha && alpha_vec;
    /* c: log of A per row (vector gates) or for the whole state */
    double c_stack[LA_ROWS];
    double *c = vec && d_k > LA_ROWS ? ttt_fault_malloc(sizeof(double) * (size_t)d_k) : c_stack;
    if (!c) return TTT_ERR_NOMEM; /* before anything is written (kernels.h) */
    for (int i = 0; i < (vec ? d_k : 1); i++) c[i] = 0.0;
    const int spread = ttt_form_ld_spread(ld, d_k, d_v);
    for (int t = 0; t < T; t++) {
        const float *qt = q + (size_t)t * ld->q, *kt = k + (size_t)t * ld->k;
        const float *vt = v + (size_t)t * ld->v;
        float *ot = o + (size_t)t * ld->o;
        const float b = beta ? beta[(size_t)t * ld->beta] : 1.0f;
        /* scalar gate: one A for all rows; the anchor factor f0 multiplies S̃ (1 = none) */
        float f0 = 1.0f, A0 = 1.0f, bA0 = b;
        if (log_alpha && !vec) {
            c[0] += (double)log_alpha[(size_t)t * ld->la];
            if (c[0] < -LA_ANCHOR) {
                f0 = (float)exp(c[0]);
                c[0] = 0.0;
            }
            const double A = exp(c[0]);
            A0 = (float)A;
            bA0 = (float)((double)b / A);
        }
        if (spread && t + LA_AHEAD < T) { /* request a later token's rows */
            ttt_prefetch_seq(ld, o, q, k, v, NULL, vec ? log_alpha : NULL, d_k,
                             (size_t)t + LA_AHEAD, 1, d_k, d_v);
        }
        for (int i0 = 0; i0 < d_k; i0 += LA_ROWS) {
            const int n = d_k - i0 < LA_ROWS ? d_k - i0 : LA_ROWS;
            const float *qg = qt + i0, *kg = kt + i0, *a = NULL;
            float bg = b;
            if (vec) {
                /* three loops the compiler vectorizes: the logs, the rare anchors, the scales */
                double *cg = c + i0;
                const float *lg = log_alpha + (size_t)t * ld->la + i0;
                int anchor = 0;
                for (int i = 0; i < n; i++) {
                    cg[i] += (double)lg[i];
                    anchor |= cg[i] < -LA_ANCHOR;
                }
                if (anchor)
                    for (int i = 0; i < n; i++) {
                        f_rows[i] = 1.0f;
                        if (cg[i] < -LA_ANCHOR) {
                            f_rows[i] = (float)exp(cg[i]);
                            cg[i] = 0.0;
                        }
                    }
                /* float accuracy (fastexp.h) is enough: each contribution carries its own
                 * two roundings, nothing accumulates */
                for (int i = 0; i < n; i++) {
                    const float A = ttt_fast_exp_d(cg[i]);
                    qs[i] = qg[i] * A;
                    ks[i] = kg[i] * (b / A);
                }
                qg = qs, kg = ks, a = anchor ? f_rows : NULL, bg = 1.0f;
            } else if (log_alpha) {
                for (int i = 0; i < n; i++) {
                    qs[i] = qg[i] * A0;
                    ks[i] = kg[i] * bA0;
                }
                qg = qs, kg = ks, bg = 1.0f;
            }
            float *Sg = S + (size_t)i0 * d_v;
            int j0 = 0;
            for (; j0 + LA_JB <= d_v; j0 += LA_JB)
                la_block_v(ot + j0, Sg + j0, qg, kg, vt + j0, a, f0, bg, n, d_v, i0 == 0);
            if (j0 < d_v)
                la_block(ot + j0, Sg + j0, qg, kg, vt + j0, a, f0, bg, d_v - j0, n, d_v, i0 == 0);
        }
    }
    /* S = A ⊙ S̃ */
    if (log_alpha)
        for (int i = 0; i < d_k; i++) {
            const double ci = c[vec ? i : 0];
            if (ci == 0.0) continue;
            const float A = (float)exp(ci);
            float *Si = S + (size_t)i * d_v;
            for (int j = 0; j < d_v; j++) Si[j] *= A;
        }
    if (c != c_stack) free(c);
    return TTT_OK;
}

ttt_status ttt_linear_attention_recurrent(float *o, float *S, const float *q, const float *k,
                                    const float *v, const float *beta, const float *log_alpha,
                                    int alpha_vec, int T, int d_k, int d_v) {
    const ttt_form_ld ld = {.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1,
                            .la = alpha_vec ? d_k : 1};
    return ttt_linear_attention_recurrent_ld(o, S, q, k, v, beta, log_alpha, alpha_vec, T, d_k,
                                             d_v, &ld);
}
