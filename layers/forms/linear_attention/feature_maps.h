/* Feature maps of normalized linear attention (normalize: ratio): the φ that turns
 * o_t = Σ_s κ(q_t, k_s) v_s / Σ_s κ(q_t, k_s) into a ratio of two linear-attention states,
 * κ(q, k) ≈ φ(q)·φ(k) (docs/math.md "Random features").
 *
 * A registry: one entry per map (name, output width, random matrix, forward, backward), listed in
 * features.c; the layer option `feature_map` names one. Nothing else compares map names.
 *
 *   elu1        φ(x) = elu(x) + 1, elementwise; width d; no random matrix.
 *   favor       Performer's positive random features (FAVOR+):
 *               φ(x) = exp(ω_jᵀx̃ − ‖x̃‖²/2)_j / √m, x̃ = x d^{−1/4} (the softmax scale 1/√d split
 *               between q and k), ω_j ~ N(0, I_d) i.i.d.; width m. E[φ(q)·φ(k)] = exp(qᵀk/√d).
 *   favor_orth  the same with orthogonal random features: blocks of d orthonormal rows (QR of a
 *               Gaussian matrix) each rescaled by the norm of an independent N(0, I_d) vector
 *               (χ_d), so each row is still marginally N(0, I_d); width m.
 *   rfa         RFA's random Fourier features on unit vectors: x̂ = x/‖x‖,
 *               φ(x) = [sin(ω_jᵀx̂)_j, cos(ω_jᵀx̂)_j] / √m, ω_j ~ N(0, I_d); width 2m.
 *               E[φ(q)·φ(k)] = exp(−‖q̂ − k̂‖²/2) = e^{−1} exp(q̂ᵀk̂): softmax's kernel for inputs
 *               of norm d^{1/4}; only directions count. φ can be negative.
 *
 * The numerical stabilizer (favor, favor_orth): a query's features are multiplied by
 * exp(−max_j h_j) (h_j the exponent above), so its largest feature is 1/√m; that factor is common
 * to the numerator and the denominator of the ratio and cancels (up to the ε of the denominator).
 * Keys get no data-dependent factor (it would not cancel, and a state carried across calls could
 * not be rescaled); their exponent is bounded above by max_x (ω_jᵀx − ‖x‖²/2) = ‖ω_j‖²/2 ≈ d/2, so
 * key features cannot overflow float32 for d up to ~150 whatever the input.
 *
 * The random matrix ω (m, d) is drawn from a generator seeded by the layer's `feature_seed`
 * alone: it is fixed for the layer's life (the same for every head, call and training step; it is
 * not a parameter and outer-loop training does not change it). */
#ifndef TTT_FEATURE_MAPS_H
#define TTT_FEATURE_MAPS_H

#include <stdint.h>

#include "tensor.h"

typedef enum ttt_feature_role {
    TTT_FEATURE_KEY,   /* keys: no stabilizer */
    TTT_FEATURE_QUERY, /* queries: the per-row stabilizer (cancels in the ratio) */
} ttt_feature_role;

typedef struct ttt_feature_map {
    const char *name;
    const char *help; /* one line for `ttt list` */
    /* Output width for input width d and `features` m. */
    int (*width)(int d, int m);
    /* Rows of the random matrix ω (m, or 0 for a deterministic map). */
    int (*rows)(int m);
    /* The three below return TTT_ERR_NOMEM, having written nothing, when their row buffers (m or
     * d doubles, the d × d matrix of the orthogonal draw) cannot be allocated; else TTT_OK. */
    /* ω (rows, d), from rng. NULL for a deterministic map. */
    ttt_status (*draw)(float *omega, int rows, int d, uint64_t seed);
    /* y (T, width) = φ(x (T, d)). */
    ttt_status (*forward)(float *y, const float *x, const float *omega, int T, int d, int m,
                          ttt_feature_role role);
    /* gx (T, d) += (∂y/∂x)ᵀ gy, with y = forward(x) (T, width). */
    ttt_status (*backward)(float *gx, const float *gy, const float *x, const float *y,
                           const float *omega, int T, int d, int m, ttt_feature_role role);
} ttt_feature_map;

int ttt_feature_map_count(void);
const ttt_feature_map *ttt_feature_map_at(int i);
const ttt_feature_map *ttt_feature_map_find(const char *name);
const char *const *ttt_feature_map_names(void);

/* The map's ω for input width d and m features, in ctx's arena, or NULL for a deterministic map
 * (rows = 0). The same (map, d, m, seed) gives the same bits. This and the op below take the
 * arena's escape when the map's row buffers cannot be had (ttt_ctx_out_of_memory, tensor.h). */
float *ttt_feature_omega(ttt_ctx *ctx, const ttt_feature_map *fm, int d, int m, uint64_t seed);

/* y (T, width) = φ(x) as an op: recorded on the tape (its backward is the map's) when x requires
 * a gradient. omega must live as long as the tape (ctx's arena). */
ttt_tensor *ttt_feature_apply(ttt_ctx *ctx, const ttt_feature_map *fm, const float *omega, int m,
                              ttt_feature_role role, const ttt_tensor *x);

#endif
