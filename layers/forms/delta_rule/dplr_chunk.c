/* The chunkwise form of the generalized delta rule (DPLR, docs/math.md "RWKV-7"; dplr.h):
 * the forward, and its backward written by hand.
 *
 * Inside a chunk of n tokens from the state S_0 (t, j = 1 … n), with G_t = Σ_{s≤t} log w_s per
 * key dimension (G_0 = 0; each log w floored at TTT_GATE_RESET, kernels.h: a factor spanning a
 * reset is ≤ e^−104, 0 in float32) and Γ_{t←j} = Diag(exp(G_t − G_j)) the decay from token j to
 * token t, unrolling S_t = Diag(w_t) S_{t−1} + b_tᵀ u_t + k_tᵀ v_t gives
 *     S_t = Γ_{t←0} S_0 + Σ_{j≤t} Γ_{t←j} (b_jᵀ u_j + k_jᵀ v_j),
 * so the removal reads u_t = a_t S_{t−1} satisfy the unit lower-triangular system
 *     u_t − Σ_{j<t} A_ab[t, j] u_j = Σ_{j<t} A_ak[t, j] v_j + (a_t ⊙ e^{G_{t−1}}) S_0,
 *     A_ab[t, j] = Σ_i a_{t,i} e^{G_{t−1,i} − G_{j,i}} b_{j,i},  A_ak likewise with k_j,
 * (I − A_ab)⁻¹ being the chunk's product of diagonal-plus-rank-one transitions in WY-like
 * form), and then
 *     o_t = (q_t ⊙ e^{G_t}) S_0 + Σ_{j≤t} (A_qb[t, j] u_j + A_qk[t, j] v_j),
 *     S_n = e^{G_n} ⊙ S_0 + Σ_j (b_j ⊙ e^{G_n − G_j})ᵀ u_j + (k_j ⊙ e^{G_n − G_j})ᵀ v_j,
 * A_qb[t, j] = Σ_i q_{t,i} e^{G_{t,i} − G_{j,i}} b_{j,i} (j ≤ t) and A_qk likewise. Every
 * exponent is a difference G_t − G_j ≤ 0 of float64 sums taken per pair (never e^{G_t} · e^{−G_j},
 * which overflows over a long chunk of strong decays), so the factors are ≤ 1 and a chunk costs
 * about n² d_k exponentials besides the O(n² (d_k + d_v) + n d_k d_v) products. The pair
 * matrices, the solve for u and the sums into o and S_n are carried in float64 (inputs and
 * results float32): with α = 2 the transitions are reflections, whose substitution chain keeps
 * every rounding (float32 sums there put C = 48 at 2.4e-6 of the state at T = 512).
 *
 * The backward (docs/math.md "RWKV-7", "The chunkwise backward") takes the same three steps in
 * reverse, chunk by chunk from the last, in float64 from the chunk's saved start state: the
 * adjoints of S_n and of O give dU, dV, the pair matrices' adjoints dA_qb, dA_qk and dS_0; the
 * transposed system (I − A_ab)ᵀ dR = dU, solved by back substitution, gives dA_ab, dA_ak and the
 * rest of dS_0; each pair matrix's adjoint then flows to its two rows of inputs and to the
 * cumulative gates (∂/∂G_t of e^{G_t − G_j} is the term itself, ∂/∂G_j its negative), whose
 * reverse cumulative sum is ∂L/∂log w. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "dplr.h"
#include "fused_grad.h"

/* G_0 … G_n ((n + 1) × d_k) of one chunk's gates (NULL: w = 1). */
static void dplr_cum_gates(double *G, const float *lw, int n, int d_k) {
    for (int i = 0; i < d_k; i++) G[i] = 0.0;
    for (int t = 1; t <= n; t++)
        for (int i = 0; i < d_k; i++)
            G[(size_t)t * d_k + i] = G[(size_t)(t - 1) * d_k + i] +
                                     (lw ? (double)ttt_gate_floor(lw[(size_t)(t - 1) * d_k + i])
                                         : 0.0);
}

/* The four pair matrices A_ab, A_ak, A_qb, A_qk (n × n each, row t − 1 for token t) into A. */
static void dplr_pairs(double *A, const double *G, const float *q, const float *k,
                       const float *a, const float *b, int n, int d_k) {
    double *Aab = A, *Aak = A + (size_t)n * n, *Aqb = A + 2 * (size_t)n * n,
           *Aqk = A + 3 * (size_t)n * n;
    memset(A, 0, 4 * (size_t)n * n * sizeof(double));
    for (int t = 1; t <= n; t++) {
        const float *at = a + (size_t)(t - 1) * d_k, *qt = q + (size_t)(t - 1) * d_k;
        const double *Gp = G + (size_t)(t - 1) * d_k, *Gt = G + (size_t)t * d_k;
        for (int j = 1; j <= t; j++) {
            const float *bj = b + (size_t)(j - 1) * d_k, *kj = k + (size_t)(j - 1) * d_k;
            const double *Gj = G + (size_t)j * d_k;
            double sab = 0.0, sak = 0.0, sqb = 0.0, sqk = 0.0;
            for (int i = 0; i < d_k; i++) {
                const double fq = exp(Gt[i] - Gj[i]);
                sqb += (double)qt[i] * fq * bj[i];
                sqk += (double)qt[i] * fq * kj[i];
                if (j < t) {
                    const double fa = exp(Gp[i] - Gj[i]);
                    sab += (double)at[i] * fa * bj[i];
                    sak += (double)at[i] * fa * kj[i];
                }
            }
            const size_t tj = (size_t)(t - 1) * n + (j - 1);
            Aab[tj] = sab, Aak[tj] = sak, Aqb[tj] = sqb, Aqk[tj] = sqk;
        }
    }
}

/* U: u_t = (a_t ⊙ e^{G_{t−1}}) S_0 + Σ_{j<t} (A_ak v_j + A_ab u_j), solved row by row. */
static void dplr_solve_u(double *U, const double *A, const double *G, const float *S,
                         const float *a, const float *v, int n, int d_k, int d_v) {
    const double *Aab = A, *Aak = A + (size_t)n * n;
    for (int t = 1; t <= n; t++) {
        double *ut = U + (size_t)(t - 1) * d_v;
        const float *at = a + (size_t)(t - 1) * d_k;
        const double *Gp = G + (size_t)(t - 1) * d_k;
        for (int jv = 0; jv < d_v; jv++) ut[jv] = 0.0;
        for (int i = 0; i < d_k; i++) {
            const double ai = at[i] * exp(Gp[i]);
            const float *Si = S + (size_t)i * d_v;
            for (int jv = 0; jv < d_v; jv++) ut[jv] += ai * Si[jv];
        }
        for (int j = 1; j < t; j++) {
            const size_t tj = (size_t)(t - 1) * n + (j - 1);
            const double cab = Aab[tj], cak = Aak[tj];
            const double *uj = U + (size_t)(j - 1) * d_v;
            const float *vj = v + (size_t)(j - 1) * d_v;
            for (int jv = 0; jv < d_v; jv++) ut[jv] += cab * uj[jv] + cak * vj[jv];
        }
    }
}

/* One chunk: o (n rows, stride ldo), S (d_k, d_v) in/out; rows of the inputs contiguous (q, k,
 * a, b, lw: n × d_k; v: n × d_v). */
static void dplr_chunk(float *o, int ldo, float *S, const float *q, const float *k,
                       const float *v, const float *a, const float *b, const float *lw, int n,
                       int d_k, int d_v, double *G, double *A, double *U, double *orow,
                       float *W) {
    const size_t nk = (size_t)n * d_k;
    const double *Aqb = A + 2 * (size_t)n * n, *Aqk = A + 3 * (size_t)n * n;
    dplr_cum_gates(G, lw, n, d_k);
    dplr_pairs(A, G, q, k, a, b, n, d_k);
    dplr_solve_u(U, A, G, S, a, v, n, d_k, d_v);
    /* outputs: o_t = (q_t ⊙ e^{G_t}) S_0 + Σ_{j≤t} (A_qb u_j + A_qk v_j) */
    for (int t = 1; t <= n; t++) {
        float *ot = o + (size_t)(t - 1) * ldo;
        const float *qt = q + (size_t)(t - 1) * d_k;
        const double *Gt = G + (size_t)t * d_k;
        for (int jv = 0; jv < d_v; jv++) orow[jv] = 0.0;
        for (int i = 0; i < d_k; i++) {
            const double qi = qt[i] * exp(Gt[i]);
            const float *Si = S + (size_t)i * d_v;
            for (int jv = 0; jv < d_v; jv++) orow[jv] += qi * Si[jv];
        }
        for (int j = 1; j <= t; j++) {
            const size_t tj = (size_t)(t - 1) * n + (j - 1);
            const double cqb = Aqb[tj], cqk = Aqk[tj];
            const double *uj = U + (size_t)(j - 1) * d_v;
            const float *vj = v + (size_t)(j - 1) * d_v;
            for (int jv = 0; jv < d_v; jv++) orow[jv] += cqb * uj[jv] + cqk * vj[jv];
        }
        for (int jv = 0; jv < d_v; jv++) ot[jv] = (float)orow[jv];
    }
    /* the chunk's last state: rows decayed to the end, plus the chunk's writes decayed from
     * their token (W holds b_j ⊙ e^{G_n − G_j} and k_j ⊙ e^{G_n − G_j}, n × d_k each) */
    const double *Gn = G + (size_t)n * d_k;
    float *Wb = W, *Wk = W + nk;
    for (int j = 1; j <= n; j++)
        for (int i = 0; i < d_k; i++) {
            const float f = (float)exp(Gn[i] - G[(size_t)j * d_k + i]);
            const size_t ji = (size_t)(j - 1) * d_k + i;
            Wb[ji] = b[ji] * f;
            Wk[ji] = k[ji] * f;
        }
    for (int i = 0; i < d_k; i++) {
        float *Si = S + (size_t)i * d_v;
        const double gi = exp(Gn[i]);
        for (int jv = 0; jv < d_v; jv++) orow[jv] = gi * Si[jv];
        for (int j = 0; j < n; j++) {
            const double wb = Wb[(size_t)j * d_k + i], wk = Wk[(size_t)j * d_k + i];
            const double *uj = U + (size_t)j * d_v;
            const float *vj = v + (size_t)j * d_v;
            for (int jv = 0; jv < d_v; jv++) orow[jv] += wb * uj[jv] + wk * vj[jv];
        }
        for (int jv = 0; jv < d_v; jv++) Si[jv] = (float)orow[jv];
    }
}

/* Bytes of the forward's workspace for chunks of C tokens, counted in double (with C and d up
 * to INT_MAX the size_t products could wrap): the chunk's rows (q, k, a, b, lw; v) and W (2 C
 * d_k) in float; G ((C + 1) d_k), the four pair matrices (4 C²), U (C d_v) and one row (d_v) in
 * double. */
static double dplr_fwd_bytes(int C, int d_k, int d_v) {
    return (7.0 * C * d_k + (double)C * d_v) * sizeof(float) +
           ((C + 1.0) * d_k + 4.0 * C * C + (double)C * d_v + d_v) * sizeof(double);
}

/* The forward over T tokens with the workspace given (dws: doubles, fws: floats, as
 * dplr_fwd_bytes counts them); saved, when not NULL, receives the state at each chunk's start. */
static void dplr_chunkwise_run(float *o, float *S, const float *q, const float *k,
                               const float *v, const float *a, const float *b,
                               const float *log_w, int T, int d_k, int d_v, int C,
                               const ttt_form_ld *ld, float *saved, double *dws, float *fws) {
    const size_t ck = (size_t)C * d_k, cv = (size_t)C * d_v, dkv = (size_t)d_k * d_v;
    float *cq = fws, *ckk = cq + ck, *ca = ckk + ck, *cb = ca + ck, *cl = cb + ck, *cvv = cl + ck;
    float *W = cvv + cv;
    double *G = dws, *A = G + (size_t)(C + 1) * d_k, *U = A + 4 * (size_t)C * C, *orow = U + cv;
    for (int t0 = 0; t0 < T; t0 += C) {
        const int n = t0 + C <= T ? C : T - t0;
        if (saved) memcpy(saved + (size_t)(t0 / C) * dkv, S, dkv * sizeof(float));
        for (int t = 0; t < n; t++) {
            const size_t r = (size_t)(t0 + t);
            memcpy(cq + (size_t)t * d_k, q + r * ld->q, (size_t)d_k * sizeof(float));
            memcpy(ckk + (size_t)t * d_k, k + r * ld->k, (size_t)d_k * sizeof(float));
            memcpy(ca + (size_t)t * d_k, a + r * ld->k, (size_t)d_k * sizeof(float));
            memcpy(cb + (size_t)t * d_k, b + r * ld->k, (size_t)d_k * sizeof(float));
            if (log_w)
                memcpy(cl + (size_t)t * d_k, log_w + r * ld->la, (size_t)d_k * sizeof(float));
            memcpy(cvv + (size_t)t * d_v, v + r * ld->v, (size_t)d_v * sizeof(float));
        }
        dplr_chunk(o + (size_t)t0 * ld->o, ld->o, S, cq, ckk, cvv, ca, cb, log_w ? cl : NULL, n,
                   d_k, d_v, G, A, U, orow, W);
    }
}

ttt_status ttt_dplr_chunkwise_ld(float *o, float *S, const float *q, const float *k,
                                 const float *v, const float *a, const float *b,
                                 const float *log_w, int T, int d_k, int d_v, int C,
                                 const ttt_form_ld *ld, ttt_error *err) {
    if (T <= 0) return TTT_OK;
    if (C < 1) C = 1;
    if (C > T) C = T;
    const double bytes = dplr_fwd_bytes(C, d_k, d_v);
    if (bytes > (double)PTRDIFF_MAX)
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "dplr chunkwise: chunks of %d tokens need %.3g bytes of workspace, "
                             "more than any allocation can hold; use a smaller chunk", C, bytes);
    const size_t ck = (size_t)C * d_k, cv = (size_t)C * d_v;
    const size_t nf = 7 * ck + cv;
    const size_t nd = (size_t)(C + 1) * d_k + 4 * (size_t)C * C + cv + d_v;
    double *dws = malloc(nd * sizeof(double));
    float *fws = malloc(nf * sizeof(float));
    if (!dws || !fws) {
        free(dws);
        free(fws);
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "dplr chunkwise: no memory for the workspace of chunks of %d tokens "
                             "(%.3g bytes); use a smaller chunk", C, bytes);
    }
    dplr_chunkwise_run(o, S, q, k, v, a, b, log_w, T, d_k, d_v, C, ld, NULL, dws, fws);
    free(dws);
    free(fws);
    return TTT_OK;
}

/* ---- the backward ---- */

/* Doubles of one chunk's backward workspace. */
static size_t dplr_chunk_ws(int C, int d_k, int d_v) {
    const size_t ck = (size_t)(C + 1) * d_k, cv = (size_t)C * d_v, dkv = (size_t)d_k * d_v;
    /* G, dG, dq, dk, da, db ((C + 1) d_k each); A and dA (4 C² each); U, dU, dV (C d_v each);
     * dS_n (d_k d_v) */
    return 6 * ck + 8 * (size_t)C * C + 3 * cv + dkv;
}

/* One chunk's backward. dS (d_k, d_v), float64: ∂L/∂S_n in, ∂L/∂S_0 out. S0 the chunk's start
 * state; rows contiguous (q, k, a, b, lw n × d_k; v, dO n × d_v); gradients ADDED into gq …
 * glw (any may be NULL). */
TTT_FP_CONTRACT static void dplr_chunk_backward(float *gq, float *gk, float *gv, float *ga,
                                                float *gb, float *glw, double *dS,
                                                const float *dO, const float *S0,
                                                const float *q, const float *k, const float *v,
                                                const float *a, const float *b, const float *lw,
                                                int n, int d_k, int d_v, double *ws) {
    const size_t nn = (size_t)n * n, ck = (size_t)(n + 1) * d_k, cv = (size_t)n * d_v;
    const size_t dkv = (size_t)d_k * d_v;
    double *G = ws, *dG = G + ck, *dq = dG + ck, *dk = dq + ck, *da = dk + ck, *db = da + ck;
    double *A = db + ck, *dA = A + 4 * nn, *U = dA + 4 * nn, *dU = U + cv, *dV = dU + cv;
    double *dSn = dV + cv;
    const double *Aab = A, *Aak = A + nn, *Aqb = A + 2 * nn, *Aqk = A + 3 * nn;
    double *dAab = dA, *dAak = dA + nn, *dAqb = dA + 2 * nn, *dAqk = dA + 3 * nn;
    dplr_cum_gates(G, lw, n, d_k);
    dplr_pairs(A, G, q, k, a, b, n, d_k);
    dplr_solve_u(U, A, G, S0, a, v, n, d_k, d_v);
    memset(dG, 0, 5 * ck * sizeof(double)); /* dG, dq, dk, da, db */
    memset(dA, 0, 4 * nn * sizeof(double));
    memset(dU, 0, 2 * cv * sizeof(double)); /* dU, dV */
    memcpy(dSn, dS, dkv * sizeof(double));
    const double *Gn = G + (size_t)n * d_k;
    /* S_n = e^{G_n} ⊙ S_0 + Σ_j (b_j ⊙ e^{G_n − G_j})ᵀ u_j + (k_j ⊙ e^{G_n − G_j})ᵀ v_j */
    for (int i = 0; i < d_k; i++) {
        const double g = exp(Gn[i]);
        const double *dSi = dSn + (size_t)i * d_v;
        const float *Si = S0 + (size_t)i * d_v;
        double s = 0.0;
        for (int c = 0; c < d_v; c++) {
            s += Si[c] * dSi[c];
            dS[(size_t)i * d_v + c] = g * dSi[c];
        }
        dG[(size_t)n * d_k + i] += g * s;
    }
    for (int j = 1; j <= n; j++) {
        const size_t jk = (size_t)(j - 1) * d_k;
        const double *uj = U + (size_t)(j - 1) * d_v, *Gj = G + (size_t)j * d_k;
        const float *vj = v + (size_t)(j - 1) * d_v;
        double *dUj = dU + (size_t)(j - 1) * d_v, *dVj = dV + (size_t)(j - 1) * d_v;
        for (int i = 0; i < d_k; i++) {
            const double f = exp(Gn[i] - Gj[i]), wb = f * b[jk + i], wk = f * k[jk + i];
            const double *dSi = dSn + (size_t)i * d_v;
            double P = 0.0, Q = 0.0;
            for (int c = 0; c < d_v; c++) {
                P += dSi[c] * uj[c];
                Q += dSi[c] * vj[c];
                dUj[c] += wb * dSi[c];
                dVj[c] += wk * dSi[c];
            }
            db[jk + i] += f * P;
            dk[jk + i] += f * Q;
            const double E = wb * P + wk * Q;
            dG[(size_t)n * d_k + i] += E;
            dG[(size_t)j * d_k + i] -= E;
        }
    }
    /* o_t = (q_t ⊙ e^{G_t}) S_0 + Σ_{j≤t} (A_qb[t, j] u_j + A_qk[t, j] v_j) */
    for (int t = 1; t <= n; t++) {
        const size_t tk = (size_t)(t - 1) * d_k;
        const float *dOt = dO + (size_t)(t - 1) * d_v;
        const double *Gt = G + (size_t)t * d_k;
        for (int i = 0; i < d_k; i++) {
            const double e = exp(Gt[i]), qe = q[tk + i] * e;
            const float *Si = S0 + (size_t)i * d_v;
            double *dSi = dS + (size_t)i * d_v, y = 0.0;
            for (int c = 0; c < d_v; c++) {
                y += (double)Si[c] * dOt[c];
                dSi[c] += qe * dOt[c];
            }
            dq[tk + i] += e * y;
            dG[(size_t)t * d_k + i] += qe * y;
        }
        for (int j = 1; j <= t; j++) {
            const size_t tj = (size_t)(t - 1) * n + (j - 1);
            const double *uj = U + (size_t)(j - 1) * d_v;
            const float *vj = v + (size_t)(j - 1) * d_v;
            double *dUj = dU + (size_t)(j - 1) * d_v, *dVj = dV + (size_t)(j - 1) * d_v;
            const double cqb = Aqb[tj], cqk = Aqk[tj];
            double su = 0.0, sv = 0.0;
            for (int c = 0; c < d_v; c++) {
                su += dOt[c] * uj[c];
                sv += (double)dOt[c] * vj[c];
                dUj[c] += cqb * dOt[c];
                dVj[c] += cqk * dOt[c];
            }
            dAqb[tj] = su, dAqk[tj] = sv;
        }
    }
    /* (I − A_ab) U = A_ak V + (A ⊙ e^{G_{t−1}}) S_0: back substitution for dR = (I − A_ab)⁻ᵀ dU,
     * in place of dU (row t is final once every later row has passed its share down) */
    for (int t = n; t >= 1; t--) {
        const size_t tk = (size_t)(t - 1) * d_k;
        const double *dRt = dU + (size_t)(t - 1) * d_v, *Gp = G + (size_t)(t - 1) * d_k;
        for (int j = 1; j < t; j++) {
            const size_t tj = (size_t)(t - 1) * n + (j - 1);
            const double *uj = U + (size_t)(j - 1) * d_v;
            const float *vj = v + (size_t)(j - 1) * d_v;
            double *dUj = dU + (size_t)(j - 1) * d_v, *dVj = dV + (size_t)(j - 1) * d_v;
            const double cab = Aab[tj], cak = Aak[tj];
            double su = 0.0, sv = 0.0;
            for (int c = 0; c < d_v; c++) {
                su += dRt[c] * uj[c];
                sv += dRt[c] * vj[c];
                dUj[c] += cab * dRt[c];
                dVj[c] += cak * dRt[c];
            }
            dAab[tj] = su, dAak[tj] = sv;
        }
        for (int i = 0; i < d_k; i++) {
            const double e = exp(Gp[i]), ae = a[tk + i] * e;
            const float *Si = S0 + (size_t)i * d_v;
            double *dSi = dS + (size_t)i * d_v, y = 0.0;
            for (int c = 0; c < d_v; c++) {
                y += Si[c] * dRt[c];
                dSi[c] += ae * dRt[c];
            }
            da[tk + i] += e * y;
            dG[(size_t)(t - 1) * d_k + i] += ae * y;
        }
    }
    /* the pair matrices' adjoints to their rows and to the gates */
    for (int t = 1; t <= n; t++) {
        const size_t tk = (size_t)(t - 1) * d_k;
        const double *Gp = G + (size_t)(t - 1) * d_k, *Gt = G + (size_t)t * d_k;
        double *dGp = dG + (size_t)(t - 1) * d_k, *dGt = dG + (size_t)t * d_k;
        for (int j = 1; j <= t; j++) {
            const size_t tj = (size_t)(t - 1) * n + (j - 1), jk = (size_t)(j - 1) * d_k;
            const double *Gj = G + (size_t)j * d_k;
            double *dGj = dG + (size_t)j * d_k;
            const double cqb = dAqb[tj], cqk = dAqk[tj];
            const double cab = j < t ? dAab[tj] : 0.0, cak = j < t ? dAak[tj] : 0.0;
            for (int i = 0; i < d_k; i++) {
                const double bj = b[jk + i], kj = k[jk + i];
                const double fq = exp(Gt[i] - Gj[i]), qf = q[tk + i] * fq;
                const double cq = cqb * bj + cqk * kj;
                dq[tk + i] += fq * cq;
                db[jk + i] += qf * cqb;
                dk[jk + i] += qf * cqk;
                const double Eq = qf * cq;
                dGt[i] += Eq;
                dGj[i] -= Eq;
                if (j < t) {
                    const double fa = exp(Gp[i] - Gj[i]), af = a[tk + i] * fa;
                    const double ca = cab * bj + cak * kj;
                    da[tk + i] += fa * ca;
                    db[jk + i] += af * cab;
                    dk[jk + i] += af * cak;
                    const double Ea = af * ca;
                    dGp[i] += Ea;
                    dGj[i] -= Ea;
                }
            }
        }
    }
    const size_t nk = (size_t)n * d_k;
    for (size_t x = 0; x < nk; x++) {
        if (gq) gq[x] += (float)dq[x];
        if (gk) gk[x] += (float)dk[x];
        if (ga) ga[x] += (float)da[x];
        if (gb) gb[x] += (float)db[x];
    }
    if (gv)
        for (size_t x = 0; x < cv; x++) gv[x] += (float)dV[x];
    /* G_t = Σ_{s≤t} floor(log w_s): ∂L/∂log w_s = Σ_{t≥s} ∂L/∂G_t (0 at a reset) */
    if (glw && lw) ttt_fused_add_reverse_cumsum(glw, dG + d_k, lw, n, d_k);
}

size_t ttt_dplr_chunkwise_backward_ws(int C, int d_k, int d_v) {
    return (size_t)d_k * d_v + dplr_chunk_ws(C, d_k, d_v); /* the carried dS, then a chunk's */
}

void ttt_dplr_chunkwise_backward(float *gq, float *gk, float *gv, float *ga, float *gb,
                                 float *glw, float *dS, const float *dO, const float *q,
                                 const float *k, const float *v, const float *a, const float *b,
                                 const float *log_w, const float *S0s, int T, int d_k, int d_v,
                                 int C, double *ws) {
    const size_t dkv = (size_t)d_k * d_v;
    const int nch = T > 0 ? (T + C - 1) / C : 0;
    double *dSd = ws, *cws = ws + dkv;
    for (size_t x = 0; x < dkv; x++) dSd[x] = dS[x];
    for (int c = nch - 1; c >= 0; c--) {
        const int t0 = c * C, n = t0 + C <= T ? C : T - t0;
        const size_t rk = (size_t)t0 * d_k, rv = (size_t)t0 * d_v;
        dplr_chunk_backward(gq ? gq + rk : NULL, gk ? gk + rk : NULL, gv ? gv + rv : NULL,
                            ga ? ga + rk : NULL, gb ? gb + rk : NULL, glw ? glw + rk : NULL, dSd,
                            dO + rv, S0s + (size_t)c * dkv, q + rk, k + rk, v + rv, a + rk,
                            b + rk, log_w ? log_w + rk : NULL, n, d_k, d_v, cws);
    }
    for (size_t x = 0; x < dkv; x++) dS[x] = (float)dSd[x];
}


/* ---- the op on the tape (its scaffolding and backward shared with the recurrence's, dplr.c) */

ttt_tensor *ttt_dplr_chunkwise_op(ttt_ctx *ctx, ttt_tensor **S_out, const ttt_tensor *q,
                                  const ttt_tensor *k, const ttt_tensor *v, const ttt_tensor *a,
                                  const ttt_tensor *b, const ttt_tensor *log_w,
                                  const ttt_tensor *S0, int chunk) {
    ttt_dplr_op op = ttt_dplr_op_begin(ctx, q, k, v, a, b, log_w, S0, chunk);
    const int T = op.T, d_k = op.d_k, d_v = op.d_v, C = op.C;
    if (T > 0) {
        const ttt_form_ld ld = {.o = d_v, .q = d_k, .k = d_k, .v = d_v, .beta = 1, .la = d_k};
        const size_t ck = (size_t)C * d_k, cv = (size_t)C * d_v;
        ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);
        double *dws = ttt_fused_scratch(
            ctx, ((size_t)(C + 1) * d_k + 4 * (size_t)C * C + cv + d_v) * sizeof(double));
        float *fws = ttt_fused_scratch(ctx, (7 * ck + cv) * sizeof(float));
        dplr_chunkwise_run(op.o, op.S, q->data, k->data, v->data, a->data, b->data,
                           log_w ? log_w->data : NULL, T, d_k, d_v, C, &ld, op.saved, dws, fws);
        ttt_arena_release(ctx->arena, mark);
    }
    return ttt_dplr_op_end(ctx, &op, 1, S_out);
}
