/* The chunkwise form of the generalized delta rule (DPLR, docs/math.md "RWKV-7"; dplr.h).
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
 * every rounding (float32 sums there put C = 48 at 2.4e-6 of the state at T = 512). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dplr.h"

/* One chunk: o (n rows, stride ldo), S (d_k, d_v) in/out; rows of the inputs contiguous in the
 * chunk's scratch copies (q, k, a, b, lw: n × d_k; v: n × d_v). */
static void dplr_chunk(float *o, int ldo, float *S, const float *q, const float *k,
                       const float *v, const float *a, const float *b, const float *lw, int n,
                       int d_k, int d_v, double *G, double *A, double *U, double *orow,
                       float *W) {
    const size_t nk = (size_t)n * d_k;
    double *Aab = A, *Aak = A + (size_t)n * n, *Aqb = A + 2 * (size_t)n * n,
           *Aqk = A + 3 * (size_t)n * n;
    /* G_0 … G_n */
    for (int i = 0; i < d_k; i++) G[i] = 0.0;
    for (int t = 1; t <= n; t++)
        for (int i = 0; i < d_k; i++)
            G[(size_t)t * d_k + i] = G[(size_t)(t - 1) * d_k + i] +
                                     (lw ? (double)ttt_gate_floor(lw[(size_t)(t - 1) * d_k + i])
                                         : 0.0);
    /* the pair matrices (row t − 1 for token t) */
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
    /* U: u_t = (a_t ⊙ e^{G_{t−1}}) S_0 + Σ_{j<t} (A_ak v_j + A_ab u_j), solved row by row */
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

ttt_status ttt_dplr_chunkwise_ld(float *o, float *S, const float *q, const float *k,
                                 const float *v, const float *a, const float *b,
                                 const float *log_w, int T, int d_k, int d_v, int C,
                                 const ttt_form_ld *ld, ttt_error *err) {
    if (T <= 0) return TTT_OK;
    if (C < 1) C = 1;
    if (C > T) C = T;
    /* the chunk's rows (q, k, a, b, lw; v) and W (2 C d_k) in float; in double: G ((C + 1)
     * d_k), the four pair matrices (4 C²), U (C d_v) and one row (d_v). Counted in double
     * first: with C and d up to INT_MAX the size_t products below could wrap. */
    const double bytes = (7.0 * C * d_k + (double)C * d_v) * sizeof(float) +
                         ((C + 1.0) * d_k + 4.0 * C * C + (double)C * d_v + d_v) * sizeof(double);
    if (bytes > (double)PTRDIFF_MAX)
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "dplr chunkwise: chunks of %d tokens need %.3g bytes of workspace, "
                             "more than any allocation can hold; use a smaller chunk", C, bytes);
    const size_t ck = (size_t)C * d_k, cv = (size_t)C * d_v;
    const size_t nf = 5 * ck + cv + 2 * ck;
    const size_t nd = (size_t)(C + 1) * d_k + 4 * (size_t)C * C + cv + d_v;
    double *G = malloc(nd * sizeof(double));
    float *buf = malloc(nf * sizeof(float));
    if (!G || !buf) {
        free(G);
        free(buf);
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "dplr chunkwise: no memory for the workspace of chunks of %d tokens "
                             "(%.3g bytes); use a smaller chunk", C, bytes);
    }
    float *cq = buf, *ckk = cq + ck, *ca = ckk + ck, *cb = ca + ck, *cl = cb + ck, *cvv = cl + ck;
    float *W = cvv + cv;
    double *A = G + (size_t)(C + 1) * d_k, *U = A + 4 * (size_t)C * C, *orow = U + cv;
    for (int t0 = 0; t0 < T; t0 += C) {
        const int n = t0 + C <= T ? C : T - t0;
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
    free(G);
    free(buf);
    return TTT_OK;
}
