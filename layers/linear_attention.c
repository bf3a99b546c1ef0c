/* Recurrent (gated) linear attention, MATH.md §4: the token-by-token definition.
 * The state stays in one (d_k, d_v) buffer that is updated in place, with no allocation or
 * library call per token: this is also the decoding path. */
#include <math.h>
#include <stddef.h>

#include "forms.h"

void ttt_linear_attention_recurrent(float *o, float *S, const float *q, const float *k,
                                    const float *v, const float *beta, const float *log_alpha,
                                    int alpha_vec, int T, int d_k, int d_v) {
    for (int t = 0; t < T; t++) {
        const float *qt = q + (size_t)t * d_k, *kt = k + (size_t)t * d_k;
        const float *vt = v + (size_t)t * d_v;
        float *ot = o + (size_t)t * d_v;
        float b = beta ? beta[t] : 1.0f;
        float a = (log_alpha && !alpha_vec) ? expf(log_alpha[t]) : 1.0f;
        /* S ← Diag(α_t) S + β_t k_tᵀ v_t, row i of S is key dimension i */
        for (int i = 0; i < d_k; i++) {
            float ai = (log_alpha && alpha_vec) ? expf(log_alpha[(size_t)t * d_k + i]) : a;
            float bk = b * kt[i];
            float *Si = S + (size_t)i * d_v;
            for (int j = 0; j < d_v; j++) Si[j] = ai * Si[j] + bk * vt[j];
        }
        /* o_t = q_t S_t */
        for (int j = 0; j < d_v; j++) ot[j] = 0.0f;
        for (int i = 0; i < d_k; i++) {
            float qi = qt[i];
            const float *Si = S + (size_t)i * d_v;
            for (int j = 0; j < d_v; j++) ot[j] += qi * Si[j];
        }
    }
}
