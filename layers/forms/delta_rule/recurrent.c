/* Recurrent (gated) delta rule, docs/math.md §4: the token-by-token definition
 *     S_t = α_t (I − β_t k_tᵀ k_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t,
 * computed without forming the d_k×d_k matrix, from two products with the previous state,
 * p_t = k_t S_{t−1} and r_t = q_t S_{t−1}:
 *     e_t = v_t − α_t p_t                   (the prediction error at the decayed state)
 *     S_t = α_t S_{t−1} + β_t k_tᵀ e_t
 *     o_t = q_t S_t = α_t r_t + β_t (q_t·k_t) e_t.
 * This is also the decoding path, so it is written to be tight: no allocation or library call per
 * token, and the state (64 KiB at d = 128: L2-resident) is swept ONCE per token: while row S_i
 * is written for token t, the products of the next token with the new state, p_{t+1} and
 * r_{t+1}, are accumulated from it (the plain form — k S, update, q S — sweeps it three times).
 * The sweep goes in column blocks of DR_JB floats so that the e_t, p_{t+1} and r_{t+1} pieces stay
 * in vector registers (GCC/Clang vector extensions, 8 floats per vector); columns past the last
 * full block take a scalar loop.
 *
 * A gate per key dimension (KDA, docs/math.md §4.5), S_t = (I − β_t k_tᵀ k_t) Diag(α_t) S_{t−1}
 * + β_t k_tᵀ v_t, takes the same sweep: row i of the state decays by its own α_{t,i}, and the
 * products with the decayed state are those of the gated vectors with the undecayed one,
 * p_t = (k_t ⊙ α_t) S_{t−1}, r_t = (q_t ⊙ α_t) S_{t−1}; the sweep that writes token t accumulates
 * them for token t + 1 with k_{t+1} ⊙ α_{t+1} and q_{t+1} ⊙ α_{t+1}. Then e_t = v_t − p_t and
 * o_t = r_t + β_t (q_t·k_t) e_t. A gate of −inf (α = 0) zeroes its row before the write: a hard
 * reset of that key dimension. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "kernels.h"
#include "vec8.h"

/* Column block: 32 floats = 4 vectors of 8 for each of e, p, r (12 of the 16 AVX2 registers). */
#define DR_JB 32
#define DR_NV (DR_JB / 8)
/* Tokens ahead whose rows are requested (ttt_prefetch_rows) when they are strided. */
#define DR_AHEAD 4

/* Columns [0, DR_JB) of the block at S (row stride d_v), all d_k rows:
 *   S_i ← a S_i + bk_i e,   and with `next`: p += kn_i S_i, r += qn_i S_i (after the write). */
TTT_FP_CONTRACT static void dr_block_v(float *restrict p,        /* (DR_JB) k_{t+1} S_t, written if next */
                       float *restrict r,        /* (DR_JB) q_{t+1} S_t, written if next */
                       float *restrict S,        /* (d_k, ·) row stride d_v, in/out */
                       const float *restrict e,  /* (DR_JB) */
                       const float *restrict bk, /* (d_k) β_t k_t */
                       const float *restrict kn, /* (d_k) k_{t+1} */
                       const float *restrict qn, /* (d_k) q_{t+1} */
                       const float *restrict ar, /* (d_k) α_{t,i} per row, or NULL: a */
                       float a, int next, int d_k, int d_v) {
    ttt_v8f eb[DR_NV], pa[DR_NV], ra[DR_NV];
    for (int u = 0; u < DR_NV; u++) {
        TTT_V8_LOAD(eb[u], e + 8 * u);
        pa[u] = (ttt_v8f){0};
        ra[u] = (ttt_v8f){0};
    }
    if (next) {
        for (int i = 0; i < d_k; i++) {
            const float bki = bk[i], kni = kn[i], qni = qn[i], ai = ar ? ar[i] : a;
            float *restrict Si = S + (size_t)i * d_v;
            for (int u = 0; u < DR_NV; u++) {
                ttt_v8f x;
                TTT_V8_LOAD(x, Si + 8 * u);
                x = ai * x + bki * eb[u];
                TTT_V8_STORE(Si + 8 * u, x);
                pa[u] += kni * x;
                ra[u] += qni * x;
            }
        }
        for (int u = 0; u < DR_NV; u++) {
            TTT_V8_STORE(p + 8 * u, pa[u]);
            TTT_V8_STORE(r + 8 * u, ra[u]);
        }
    } else {
        for (int i = 0; i < d_k; i++) {
            const float bki = bk[i], ai = ar ? ar[i] : a;
            float *restrict Si = S + (size_t)i * d_v;
            for (int u = 0; u < DR_NV; u++) {
                ttt_v8f x;
                TTT_V8_LOAD(x, Si + 8 * u);
                x = ai * x + bki * eb[u];
                TTT_V8_STORE(Si + 8 * u, x);
            }
        }
    }
}

/* The same for jn < DR_JB columns, scalar. */
static void dr_block(float *p, float *r, float *S, const float *e, const float *bk,
                     const float *kn, const float *qn, const float *ar, float a, int next, int jn,
                     int d_k, int d_v) {
    if (next)
        for (int j = 0; j < jn; j++) p[j] = r[j] = 0.0f;
    for (int i = 0; i < d_k; i++) {
        float *Si = S + (size_t)i * d_v;
        const float ai = ar ? ar[i] : a;
        for (int j = 0; j < jn; j++) {
            const float x = ai * Si[j] + bk[i] * e[j];
            Si[j] = x;
            if (next) {
                p[j] += kn[i] * x;
                r[j] += qn[i] * x;
            }
        }
    }
}

/* p = k S, r = q S for the first token (a plain read sweep). */
static void dr_products(float *p, float *r, const float *S, const float *k, const float *q,
                        int d_k, int d_v) {
    for (int j = 0; j < d_v; j++) p[j] = r[j] = 0.0f;
    for (int i = 0; i < d_k; i++) {
        const float *Si = S + (size_t)i * d_v;
        const float ki = k[i], qi = q[i];
        for (int j = 0; j < d_v; j++) {
            p[j] += ki * Si[j];
            r[j] += qi * Si[j];
        }
    }
}

/* Rows of the sequence arrays are ld->q, ld->k, … floats apart (kernels.h, ttt_form_ld). */
ttt_status ttt_delta_rule_recurrent_ld(float *o,               /* (T, d_v) */
                                 float *S,               /* (d_k, d_v) in/out */
                                 const float *q,         /* (T, d_k) */
                                 const float *k,         /* (T, d_k) */
                                 const float *v,         /* (T, d_v) */
                                 const float *beta,      /* (T) or NULL */
                                 const float *log_alpha, /* (T) or NULL */
                                 int T, int d_k, int d_v, const ttt_form_ld *ld) {
    if (T <= 0) return TTT_OK;
    /* e, p, r (d_v each) and β k (d_k): on the stack for the usual sizes, else one allocation
     * per call (never per token) */
    float stack[4 * 256];
    const size_t need = 3 * (size_t)d_v + (size_t)d_k;
    float *buf = need <= 4 * 256 ? stack : ttt_fault_malloc(need * sizeof(float));
    if (!buf) return TTT_ERR_NOMEM; /* before anything is written (kernels.h) */
    float *e = buf, *p = buf + d_v, *r = buf + 2 * (size_t)d_v, *bk = buf + 3 * (size_t)d_v;
    dr_products(p, r, S, k, q, d_k, d_v);
    double drift = 1.0; /* the retentions' accumulated rounding (ttt_gate_dither, kernels.h) */
    const int spread = ttt_form_ld_spread(ld, d_k, d_v);
    for (int t = 0; t < T; t++) {
        const float *qt = q + (size_t)t * ld->q, *kt = k + (size_t)t * ld->k;
        const float *vt = v + (size_t)t * ld->v;
        float *ot = o + (size_t)t * ld->o;
        const float b = beta ? beta[(size_t)t * ld->beta] : 1.0f;
        const float a =
            log_alpha ? ttt_gate_dither(&drift, exp((double)log_alpha[(size_t)t * ld->la])) : 1.0f;
        if (spread && t + DR_AHEAD < T) { /* request a later token's rows */
            ttt_prefetch_seq(ld, o, q, k, v, NULL, NULL, 1, (size_t)t + DR_AHEAD, 1, d_k, d_v);
        }
        float qk = 0.0f;
        for (int i = 0; i < d_k; i++) {
            bk[i] = b * kt[i];
            qk += qt[i] * kt[i];
        }
        const float bqk = b * qk;
        for (int j = 0; j < d_v; j++) {
            e[j] = vt[j] - a * p[j];
            ot[j] = a * r[j] + bqk * e[j];
        }
        /* one sweep: write token t, accumulate k_{t+1} S_t and q_{t+1} S_t into p, r */
        const int next = t + 1 < T;
        const float *kn = next ? kt + ld->k : kt, *qn = next ? qt + ld->q : qt;
        int j0 = 0;
        for (; j0 + DR_JB <= d_v; j0 += DR_JB)
            dr_block_v(p + j0, r + j0, S + j0, e + j0, bk, kn, qn, NULL, a, next, d_k, d_v);
        if (j0 < d_v)
            dr_block(p + j0, r + j0, S + j0, e + j0, bk, kn, qn, NULL, a, next, d_v - j0, d_k,
                     d_v);
    }
    if (buf != stack) free(buf);
    return TTT_OK;
}

/* α_{t,i} = exp(log α_{t,i}) for one row of gates, each key dimension with its own drift (the
 * dither of kernels.h, ttt_gate_dither: one per state row). */
static void dr_gate_row(float *a, double *drift, const float *la, int d_k) {
    for (int i = 0; i < d_k; i++) a[i] = ttt_gate_dither(&drift[i], exp((double)la[i]));
}

ttt_status ttt_delta_rule_recurrent_key_ld(float *o, float *S, const float *q, const float *k,
                                           const float *v, const float *beta,
                                           const float *log_alpha, int T, int d_k, int d_v,
                                           const ttt_form_ld *ld) {
    if (T <= 0) return TTT_OK;
    /* e, p, r (d_v each); β k, α_t, α_{t+1}, k_{t+1} ⊙ α_{t+1}, q_{t+1} ⊙ α_{t+1} (d_k each);
     * the per-row drifts (d_k doubles) */
    float stack[8 * 256];
    double dstack[256];
    const size_t need = 3 * (size_t)d_v + 5 * (size_t)d_k;
    float *buf = need <= 8 * 256 ? stack : ttt_fault_malloc(need * sizeof(float));
    double *drift = d_k <= 256 ? dstack : ttt_fault_malloc((size_t)d_k * sizeof(double));
    if (!buf || !drift) { /* before anything is written (kernels.h) */
        if (buf != stack) free(buf);
        if (drift != dstack) free(drift);
        return TTT_ERR_NOMEM;
    }
    float *e = buf, *p = buf + d_v, *r = buf + 2 * (size_t)d_v, *bk = buf + 3 * (size_t)d_v;
    float *acur = bk + d_k, *anext = acur + d_k, *kw = anext + d_k, *qw = kw + d_k;
    for (int i = 0; i < d_k; i++) drift[i] = 1.0;
    dr_gate_row(acur, drift, log_alpha, d_k);
    for (int i = 0; i < d_k; i++) {
        kw[i] = k[i] * acur[i];
        qw[i] = q[i] * acur[i];
    }
    dr_products(p, r, S, kw, qw, d_k, d_v);
    const int spread = ttt_form_ld_spread(ld, d_k, d_v);
    for (int t = 0; t < T; t++) {
        const float *qt = q + (size_t)t * ld->q, *kt = k + (size_t)t * ld->k;
        const float *vt = v + (size_t)t * ld->v;
        float *ot = o + (size_t)t * ld->o;
        const float b = beta ? beta[(size_t)t * ld->beta] : 1.0f;
        if (spread && t + DR_AHEAD < T)
            ttt_prefetch_seq(ld, o, q, k, v, NULL, NULL, 1, (size_t)t + DR_AHEAD, 1, d_k, d_v);
        float qk = 0.0f;
        for (int i = 0; i < d_k; i++) {
            bk[i] = b * kt[i];
            qk += qt[i] * kt[i];
        }
        const float bqk = b * qk;
        for (int j = 0; j < d_v; j++) { /* p, r are already the decayed state's products */
            e[j] = vt[j] - p[j];
            ot[j] = r[j] + bqk * e[j];
        }
        const int next = t + 1 < T;
        if (next) {
            const float *kn = kt + ld->k, *qn = qt + ld->q;
            dr_gate_row(anext, drift, log_alpha + (size_t)(t + 1) * ld->la, d_k);
            for (int i = 0; i < d_k; i++) {
                kw[i] = kn[i] * anext[i];
                qw[i] = qn[i] * anext[i];
            }
        }
        int j0 = 0;
        for (; j0 + DR_JB <= d_v; j0 += DR_JB)
            dr_block_v(p + j0, r + j0, S + j0, e + j0, bk, kw, qw, acur, 1.0f, next, d_k, d_v);
        if (j0 < d_v)
            dr_block(p + j0, r + j0, S + j0, e + j0, bk, kw, qw, acur, 1.0f, next, d_v - j0,
                     d_k, d_v);
        float *sw = acur;
        acur = anext;
        anext = sw;
    }
    if (buf != stack) free(buf);
    if (drift != dstack) free(drift);
    return TTT_OK;
}

ttt_status ttt_delta_rule_recurrent(float *o, float *S, const float *q, const float *k,
                                    const float *v, const float *beta, const float *log_alpha,
                                    int T, int d_k, int d_v) {
    const ttt_form_ld ld = {.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1, .la = 1};
    return ttt_delta_rule_recurrent_ld(o, S, q, k, v, beta, log_alpha, T, d_k, d_v, &ld);
}
