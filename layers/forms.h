/* Closed-form kernels of the classic layers: the fast paths presets pick, each tied to the generic
 * TTT driver (ttt_layer.c) by the equivalence tests.
 *
 * Raw row-major float arrays, outputs first, then inputs, then sizes. Per head, per sequence.
 * Gates: `log_alpha` holds log retentions (MATH.md §0: log space), either one per token (T) or,
 * with alpha_vec set, one per token and key dimension (T, d_k) (GLA); NULL = no decay.
 * `beta` (T) holds the per-token write strength (θ·η_t); NULL = 1. */
#ifndef TTT_FORMS_H
#define TTT_FORMS_H

/* Recurrent (gated) linear attention (MATH.md §4, rows linear_attention/retnet/mamba2/gla):
 *     S_t = Diag(α_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t.
 * S is the state: initial on entry, final on return. */
void ttt_linear_attention_recurrent(float *o,             /* (T, d_v) */
                                    float *S,             /* (d_k, d_v) in/out */
                                    const float *q,       /* (T, d_k) */
                                    const float *k,       /* (T, d_k) */
                                    const float *v,       /* (T, d_v) */
                                    const float *beta,    /* (T) or NULL */
                                    const float *log_alpha, /* (T) or (T, d_k) or NULL */
                                    int alpha_vec, int T, int d_k, int d_v);

/* Recurrent (gated) delta rule (MATH.md §4, rows deltanet/gated_deltanet; coupled decay):
 *     S_t = α_t (I − β_t k_tᵀ k_t) S_{t−1} + β_t k_tᵀ v_t,      o_t = q_t S_t. */
void ttt_delta_rule_recurrent(float *o,               /* (T, d_v) */
                              float *S,               /* (d_k, d_v) in/out */
                              const float *q,         /* (T, d_k) */
                              const float *k,         /* (T, d_k) */
                              const float *v,         /* (T, d_v) */
                              const float *beta,      /* (T) or NULL */
                              const float *log_alpha, /* (T) or NULL */
                              int T, int d_k, int d_v);

#endif
