/* The outer-loop optimizer: AdamW (Loshchilov & Hutter, "Decoupled weight decay
 * regularization") with a warm-up + cosine learning-rate schedule and optional clipping of the
 * gradient by its global norm.
 *
 * Step counting: `step` is the number of updates already applied, starting at 0. Update number
 * s (0-based) uses the learning rate lr(s) below and Adam's bias corrections with t = s + 1.
 *
 * Schedule (peak rate η = lr, W = warmup, T = total_steps, r = min_lr_ratio):
 *     s <  W:            lr(s) = η · (s + 1) / W          (the first update already moves: η/W)
 *     W ≤ s ≤ T:         lr(s) = η · (r + (1 − r) · ½ · (1 + cos(π · (s − W) / (T − W))))
 *     s >  T:            lr(s) = η · r
 * so lr(W) = η (peak) and lr(T) = r·η; a run of T updates (s = 0 … T−1) ends just above r·η.
 * T = 0 means no decay: lr(s) = η for every s ≥ W.
 *
 * Update number s for a parameter p with gradient g (after clipping), in this order
 * (PyTorch's torch.optim.AdamW, whose decay is multiplied by the scheduled rate):
 *     p ← p · (1 − lr(s)·weight_decay)             only when the parameter's `decay` flag is set
 *     m ← β1·m + (1 − β1)·g
 *     v ← β2·v + (1 − β2)·g²
 *     p ← p − (lr(s) / (1 − β1^t)) · m / (sqrt(v) / sqrt(1 − β2^t) + ε),   t = s + 1
 * m, v are float32 like the parameters; the scalar factors are computed in double.
 *
 * Clipping (clip_norm > 0): before the update, when ‖g‖₂ over all parameters exceeds clip_norm,
 * every gradient is scaled by clip_norm / ‖g‖ (in place). A non-finite ‖g‖ stops the step with
 * TTT_ERR_NUMERIC naming the first bad parameter and element; nothing is modified then. */
#ifndef TTT_ADAMW_H
#define TTT_ADAMW_H

#include <stdint.h>

#include "params.h"
#include "status.h"

typedef struct ttt_adamw_config {
    double lr;           /* peak learning rate η (default 1e-3) */
    double beta1;        /* default 0.9 */
    double beta2;        /* default 0.999 */
    double eps;          /* default 1e-8 */
    double weight_decay; /* λ, default 0.1 (applied to parameters with decay set) */
    long warmup;         /* W, default 0 */
    long total_steps;    /* T, default 0 (= no decay) */
    double min_lr_ratio; /* r, default 0.1 */
    double clip_norm;    /* global-norm clipping threshold, 0 = off (default 1.0) */
} ttt_adamw_config;

void ttt_adamw_config_default(ttt_adamw_config *c);
/* TTT_ERR_RANGE naming the field when a value is out of range: lr > 0, 0 ≤ β < 1, ε > 0,
 * λ ≥ 0, W ≥ 0, T = 0 or T > W, 0 ≤ r ≤ 1, clip_norm ≥ 0, all finite. */
ttt_status ttt_adamw_config_check(const ttt_adamw_config *c, ttt_error *err);
/* lr(s) of the schedule above. */
double ttt_lr_schedule(const ttt_adamw_config *c, long s);

typedef struct ttt_adamw {
    ttt_adamw_config cfg;
    int n_params;  /* the parameter list it was built for (same order) */
    float **m;     /* m[i]: (params->p[i]->n) first moment */
    float **v;     /* v[i]: (params->p[i]->n) second moment */
    size_t *numel; /* numel[i]: element count of parameter i, checked at every step */
    int64_t step;  /* updates applied so far */
} ttt_adamw;

/* Zeroed moments for every parameter of `ps` (which must not gain parameters afterwards). */
ttt_status ttt_adamw_init(ttt_adamw *opt, const ttt_params *ps, const ttt_adamw_config *c,
                          ttt_error *err);
void ttt_adamw_free(ttt_adamw *opt);

/* What a step did. */
typedef struct ttt_adamw_stats {
    double lr;        /* lr(s) used */
    double grad_norm; /* ‖g‖₂ before clipping */
    int clipped;      /* 1 when the gradients were scaled */
} ttt_adamw_stats;

/* One update of every parameter from its grad (see the top of this file); stats may be NULL. */
ttt_status ttt_adamw_step(ttt_adamw *opt, ttt_params *ps, ttt_adamw_stats *stats, ttt_error *err);

#endif
