/* Recurrent (gated) delta rule, MATH.md §4: the token-by-token definition.
 *     S' = α_t S;  e = v_t − k_t S';  S = S' + β_t k_tᵀ e;  o_t = q_t S
 * which is α_t (I − β_t k_tᵀk_t) S + β_t k_tᵀ v_t expanded without forming the d_k×d_k matrix. */
#include <math.h>
#include <stdlib.h>

#include "forms.h"

void ttt_delta_rule_recurrent(float *o, float *S, const float *q, const float *k, const float *v,
                              const float *beta, const float *log_alpha, int T, int d_k,
                              int d_v) {
    float stack_e[256];
    float *e = d_v <= 256 ? stack_e : malloc((size_t)d_v * sizeof *e); /* (d_v) */
    if (!e) abort();
    for (int t = 0; t < T; t++) {
        const float *qt = q + (size_t)t * d_k, *kt = k + (size_t)t * d_k;
        const float *vt = v + (size_t)t * d_v;
        float *ot = o + (size_t)t * d_v;
        float b = beta ? beta[t] : 1.0f;
        float a = log_alpha ? expf(log_alpha[t]) : 1.0f;
        /* e = v_t − α k_t S (the prediction error at the decayed state) */
        for (int j = 0; j < d_v; j++) e[j] = 0.0f;
        for (int i = 0; i < d_k; i++) {
            float ki = kt[i];
            const float *Si = S + (size_t)i * d_v;
            for (int j = 0; j < d_v; j++) e[j] += ki * Si[j];
        }
        for (int j = 0; j < d_v; j++) e[j] = vt[j] - a * e[j];
        /* S ← α S + β k_tᵀ e */
        for (int i = 0; i < d_k; i++) {
            float bk = b * kt[i];
            float *Si = S + (size_t)i * d_v;
            for (int j = 0; j < d_v; j++) Si[j] = a * Si[j] + bk * e[j];
        }
        for (int j = 0; j < d_v; j++) ot[j] = 0.0f;
        for (int i = 0; i < d_k; i++) {
            float qi = qt[i];
            const float *Si = S + (size_t)i * d_v;
            for (int j = 0; j < d_v; j++) ot[j] += qi * Si[j];
        }
    }
    if (e != stack_e) free(e);
}
