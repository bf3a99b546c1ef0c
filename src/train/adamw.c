#include "adamw.h"
#include "fault.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ttt_adamw_config_default(ttt_adamw_config *c) {
    c->lr = 1e-3;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->weight_decay = 0.1;
    c->warmup = 0;
    c->total_steps = 0;
    c->min_lr_ratio = 0.1;
    c->clip_norm = 1.0;
}

ttt_status ttt_adamw_config_check(const ttt_adamw_config *c, ttt_error *err) {
    if (!(isfinite(c->lr) && c->lr > 0))
        return ttt_error_set(err, TTT_ERR_RANGE, "learning rate %g must be finite and > 0", c->lr);
    if (!(c->beta1 >= 0 && c->beta1 < 1))
        return ttt_error_set(err, TTT_ERR_RANGE, "beta1 = %g must be in [0, 1)", c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
        return ttt_error_set(err, TTT_ERR_RANGE, "beta2 = %g must be in [0, 1)", c->beta2);
    if (!(isfinite(c->eps) && c->eps > 0))
        return ttt_error_set(err, TTT_ERR_RANGE, "eps = %g must be finite and > 0", c->eps);
    if (!(isfinite(c->weight_decay) && c->weight_decay >= 0))
        return ttt_error_set(err, TTT_ERR_RANGE, "weight_decay = %g must be finite and >= 0",
                             c->weight_decay);
    if (c->warmup < 0)
        return ttt_error_set(err, TTT_ERR_RANGE, "warmup = %ld must be >= 0", c->warmup);
    if (c->total_steps < 0 || (c->total_steps > 0 && c->total_steps <= c->warmup))
        return ttt_error_set(err, TTT_ERR_RANGE,
                             "total_steps = %ld must be 0 (no decay) or larger than warmup = %ld",
                             c->total_steps, c->warmup);
    if (!(c->min_lr_ratio >= 0 && c->min_lr_ratio <= 1))
        return ttt_error_set(err, TTT_ERR_RANGE, "min_lr_ratio = %g must be in [0, 1]",
                             c->min_lr_ratio);
    if (!(isfinite(c->clip_norm) && c->clip_norm >= 0))
        return ttt_error_set(err, TTT_ERR_RANGE, "clip_norm = %g must be finite and >= 0 (0 = off)",
                             c->clip_norm);
    return TTT_OK;
}

double ttt_lr_schedule(const ttt_adamw_config *c, long s) {
    if (s < 0) s = 0;
    if (s < c->warmup) return c->lr * (double)(s + 1) / (double)c->warmup;
    if (c->total_steps <= 0) return c->lr;
    if (s >= c->total_steps) return c->lr * c->min_lr_ratio;
    double progress = (double)(s - c->warmup) / (double)(c->total_steps - c->warmup);
    double cosine = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    return c->lr * (c->min_lr_ratio + (1.0 - c->min_lr_ratio) * cosine);
}

void ttt_adamw_free(ttt_adamw *opt) {
    if (!opt) return;
    for (int i = opt->n_params - 1; i >= 0; i--) {
        if (opt->v && opt->v[i]) ttt_mem_track(-4.0 * (double)opt->numel[i]);
        if (opt->m && opt->m[i]) ttt_mem_track(-4.0 * (double)opt->numel[i]);
        if (opt->v) free(opt->v[i]);
        if (opt->m) free(opt->m[i]);
    }
    free(opt->numel);
    free(opt->v);
    free(opt->m);
    memset(opt, 0, sizeof *opt);
}

ttt_status ttt_adamw_init(ttt_adamw *opt, const ttt_params *ps, const ttt_adamw_config *c,
                          ttt_error *err) {
    memset(opt, 0, sizeof *opt);
    TTT_TRY(ttt_adamw_config_check(c, err));
    opt->cfg = *c;
    int n = ps->n;
    opt->m = ttt_fault_calloc(n ? (size_t)n : 1, sizeof *opt->m);
    opt->v = ttt_fault_calloc(n ? (size_t)n : 1, sizeof *opt->v);
    opt->numel = ttt_fault_calloc(n ? (size_t)n : 1, sizeof *opt->numel);
    if (!opt->m || !opt->v || !opt->numel) {
        ttt_adamw_free(opt);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the AdamW state");
    }
    opt->n_params = n;
    for (int i = 0; i < n; i++) {
        size_t k = ps->p[i]->n;
        opt->numel[i] = k;
        opt->m[i] = ttt_fault_calloc(k, sizeof(float));
        opt->v[i] = ttt_fault_calloc(k, sizeof(float));
        if (opt->m[i]) ttt_mem_track(4.0 * (double)k);
        if (opt->v[i]) ttt_mem_track(4.0 * (double)k);
        if (!opt->m[i] || !opt->v[i]) {
            ttt_adamw_free(opt);
            return ttt_error_set(err, TTT_ERR_NOMEM,
                                 "out of memory for the AdamW state of '%s' (%zu floats)",
                                 ps->p[i]->name, k);
        }
    }
    return TTT_OK;
}

ttt_status ttt_adamw_step(ttt_adamw *opt, ttt_params *ps, ttt_adamw_stats *stats, ttt_error *err) {
    /* The state was built for this list: anything else is a programmer error. */
    TTT_ASSERT(ps->n == opt->n_params);
    for (int i = 0; i < ps->n; i++) TTT_ASSERT(ps->p[i]->n == opt->numel[i]);

    const ttt_adamw_config *c = &opt->cfg;
    double norm = ttt_params_grad_norm(ps);
    if (!isfinite(norm)) {
        ttt_status s = ttt_params_check_finite(ps, TTT_PARAMS_CHECK_GRAD, err);
        if (s == TTT_OK) /* the sum of squares overflowed although every gradient is finite */
            s = ttt_error_set(err, TTT_ERR_NUMERIC, "the gradient norm overflowed (> 1e308)");
        ttt_error_prefix(err, "AdamW update %lld", (long long)opt->step);
        return s;
    }
    int clipped = 0;
    if (c->clip_norm > 0 && norm > c->clip_norm) {
        ttt_params_clip_grad_norm(ps, c->clip_norm);
        clipped = 1;
    }

    double lr = ttt_lr_schedule(c, (long)opt->step);
    double t = (double)(opt->step + 1);
    double bc1 = 1.0 - pow(c->beta1, t);
    double bc2_sqrt = sqrt(1.0 - pow(c->beta2, t));
    const float b1 = (float)c->beta1, b2 = (float)c->beta2;
    const float one_m_b1 = (float)(1.0 - c->beta1), one_m_b2 = (float)(1.0 - c->beta2);
    const float step_size = (float)(lr / bc1);
    const float inv_bc2_sqrt = (float)(1.0 / bc2_sqrt);
    const float eps = (float)c->eps;
    const float shrink = (float)(1.0 - lr * c->weight_decay);

    for (int i = 0; i < ps->n; i++) {
        ttt_param *p = ps->p[i];
        float *w = p->data;       /* (n) */
        const float *g = p->grad; /* (n) */
        float *m = opt->m[i];     /* (n) */
        float *v = opt->v[i];     /* (n) */
        int decay = p->decay && c->weight_decay > 0;
        for (size_t j = 0; j < p->n; j++) {
            float wj = decay ? w[j] * shrink : w[j];
            float mj = b1 * m[j] + one_m_b1 * g[j];
            float vj = b2 * v[j] + one_m_b2 * g[j] * g[j];
            m[j] = mj;
            v[j] = vj;
            w[j] = wj - step_size * mj / (sqrtf(vj) * inv_bc2_sqrt + eps);
        }
    }
    opt->step++;
    if (stats) {
        stats->lr = lr;
        stats->grad_norm = norm;
        stats->clipped = clipped;
    }
    return TTT_OK;
}
