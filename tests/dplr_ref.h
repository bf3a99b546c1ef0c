/* The generalized delta rule's (DPLR, docs/math.md "RWKV-7") backward in float64, and the
 * float32 gradients of the library's two backward forms, shared by tests/test_rwkv7.c (its hard
 * inputs, and central differences) and tests/test_hard_inputs.c (the delta rule's hard inputs
 * written as DPLR steps). Header-only: static functions, included by one test file each. */
#ifndef TTT_TEST_DPLR_REF_H
#define TTT_TEST_DPLR_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dplr.h"

/* One sequence's inputs: rows contiguous, lw NULL for w = 1. */
typedef struct dplr_seq {
    int T, dk, dv;
    const float *q, *k, *v, *a, *b, *lw, *S0;
} dplr_seq;

/* The float64 backward of the recurrence (token by token from the last, every state kept), of
 * L = Σ dO ⊙ o + Σ dS_T ⊙ S_T: g holds 7 arrays (q, k, v, a, b, log w, S_0), overwritten (log w
 * only when lw is given). Returns 0 when its memory cannot be had. */
static int dplr_backward64(double *const *g, const dplr_seq *p, const float *dO,
                           const float *dST) {
    const int T = p->T, dk = p->dk, dv = p->dv;
    const size_t dkv = (size_t)dk * dv;
    double *St = malloc(sizeof(double) * (size_t)(T + 1) * dkv);
    double *U = malloc(sizeof(double) * (size_t)(T > 0 ? T : 1) * dv);
    double *dS = malloc(sizeof(double) * dkv), *du = malloc(sizeof(double) * dv);
    if (!St || !U || !dS || !du) {
        free(St), free(U), free(dS), free(du);
        return 0;
    }
    for (size_t n = 0; n < dkv; n++) St[n] = p->S0[n];
    for (int t = 0; t < T; t++) {
        const double *Sp = St + (size_t)t * dkv;
        double *Sn = St + (size_t)(t + 1) * dkv, *u = U + (size_t)t * dv;
        for (int j = 0; j < dv; j++) {
            u[j] = 0;
            for (int i = 0; i < dk; i++) u[j] += (double)p->a[(size_t)t * dk + i] * Sp[i * dv + j];
        }
        for (int i = 0; i < dk; i++) {
            const double w = p->lw ? exp((double)p->lw[(size_t)t * dk + i]) : 1.0;
            for (int j = 0; j < dv; j++)
                Sn[i * dv + j] = w * Sp[i * dv + j] + (double)p->b[(size_t)t * dk + i] * u[j] +
                                 (double)p->k[(size_t)t * dk + i] * p->v[(size_t)t * dv + j];
        }
    }
    for (size_t n = 0; n < dkv; n++) dS[n] = dST[n];
    for (int t = T - 1; t >= 0; t--) {
        const size_t tk = (size_t)t * dk, tv = (size_t)t * dv;
        const double *Sp = St + (size_t)t * dkv, *Sn = St + (size_t)(t + 1) * dkv;
        const double *u = U + tv;
        const float *dOt = dO + tv;
        for (int i = 0; i < dk; i++) { /* the read-out */
            double s = 0;
            for (int j = 0; j < dv; j++) {
                s += dOt[j] * Sn[i * dv + j];
                dS[i * dv + j] += (double)p->q[tk + i] * dOt[j];
            }
            g[0][tk + i] = s;
        }
        for (int j = 0; j < dv; j++) { /* dv = k dS, du = b dS */
            double sv = 0;
            du[j] = 0;
            for (int i = 0; i < dk; i++) {
                sv += (double)p->k[tk + i] * dS[i * dv + j];
                du[j] += (double)p->b[tk + i] * dS[i * dv + j];
            }
            g[2][tv + j] = sv;
        }
        for (int i = 0; i < dk; i++) {
            const double w = p->lw ? exp((double)p->lw[tk + i]) : 1.0;
            double sk = 0, sb = 0, sw = 0, sa = 0;
            for (int j = 0; j < dv; j++) {
                sk += dS[i * dv + j] * p->v[tv + j];
                sb += dS[i * dv + j] * u[j];
                sw += dS[i * dv + j] * Sp[i * dv + j];
                sa += du[j] * Sp[i * dv + j];
            }
            g[1][tk + i] = sk, g[4][tk + i] = sb, g[3][tk + i] = sa;
            if (p->lw) g[5][tk + i] = w * sw;
            for (int j = 0; j < dv; j++)
                dS[i * dv + j] = w * dS[i * dv + j] + (double)p->a[tk + i] * du[j];
        }
    }
    for (size_t n = 0; n < dkv; n++) g[6][n] = dS[n];
    free(St), free(U), free(dS), free(du);
    return 1;
}

/* The float32 gradients of one backward form into g (7 arrays, overwritten; g[5] untouched
 * without lw): C = 0 the recurrence's (states kept every 64 tokens, as the op keeps them), else
 * the chunkwise form's in chunks of C; the chunk-start states from the same form's forward.
 * Returns 0 when its memory cannot be had. */
static int dplr_backward_form(float *const *g, const dplr_seq *p, const float *dO,
                              const float *dST, int C) {
    const int T = p->T, dk = p->dk, dv = p->dv, step = C ? C : 64;
    const int nch = T > 0 ? (T + step - 1) / step : 0;
    const size_t dkv = (size_t)dk * dv;
    const ttt_form_ld ld = {.o = dv, .q = dk, .k = dk, .v = dv, .beta = 1, .la = dk};
    float *S0s = malloc(sizeof(float) * (size_t)(nch ? nch : 1) * dkv);
    float *S = malloc(sizeof(float) * dkv), *o = malloc(sizeof(float) * (size_t)step * dv);
    void *ws = C ? malloc(sizeof(double) * ttt_dplr_chunkwise_backward_ws(C, dk, dv))
                 : malloc(sizeof(float) * ttt_dplr_recurrent_backward_ws(64, dk, dv));
    if (!S0s || !S || !o || !ws) {
        free(S0s), free(S), free(o), free(ws);
        return 0;
    }
    memcpy(S, p->S0, dkv * sizeof(float));
    for (int c = 0; c < nch; c++) {
        const int t0 = c * step, n = t0 + step <= T ? step : T - t0;
        const size_t rk = (size_t)t0 * dk, rv = (size_t)t0 * dv;
        memcpy(S0s + (size_t)c * dkv, S, dkv * sizeof(float));
        if (C) {
            if (ttt_dplr_chunkwise_ld(o, S, p->q + rk, p->k + rk, p->v + rv, p->a + rk, p->b + rk,
                                      p->lw ? p->lw + rk : NULL, n, dk, dv, n, &ld,
                                      NULL) != TTT_OK) {
                free(S0s), free(S), free(o), free(ws);
                return 0;
            }
        } else
            ttt_dplr_recurrent_ld(o, S, p->q + rk, p->k + rk, p->v + rv, p->a + rk, p->b + rk,
                                  p->lw ? p->lw + rk : NULL, n, dk, dv, &ld);
    }
    const size_t nk = (size_t)T * dk;
    for (int i = 0; i < 6; i++)
        if (i != 5 || p->lw) memset(g[i], 0, sizeof(float) * (i == 2 ? (size_t)T * dv : nk));
    memcpy(S, dST, dkv * sizeof(float));
    if (C)
        ttt_dplr_chunkwise_backward(g[0], g[1], g[2], g[3], g[4], p->lw ? g[5] : NULL, S, dO,
                                    p->q, p->k, p->v, p->a, p->b, p->lw, S0s, T, dk, dv, C, ws);
    else
        ttt_dplr_recurrent_backward(g[0], g[1], g[2], g[3], g[4], p->lw ? g[5] : NULL, S, dO,
                                    p->q, p->k, p->v, p->a, p->b, p->lw, S0s, T, dk, dv, 64, ws);
    memcpy(g[6], S, dkv * sizeof(float));
    free(S0s), free(S), free(o), free(ws);
    return 1;
}

#endif
