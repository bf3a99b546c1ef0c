#include "params.h"
#include "fault.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void ttt_params_init(ttt_params *ps) { memset(ps, 0, sizeof *ps); }

static size_t floats_bytes(size_t n) {
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    return bytes ? bytes : 64;
}

void ttt_params_free(ttt_params *ps) {
    if (!ps) return;
    for (int i = ps->n - 1; i >= 0; i--) {
        ttt_mem_track(-2.0 * (double)floats_bytes(ps->p[i]->n));
        free(ps->p[i]->grad);
        free(ps->p[i]->data);
        free(ps->p[i]);
    }
    free(ps->p);
    memset(ps, 0, sizeof *ps);
}

/* 64-byte aligned zeroed floats (aligned_alloc needs a size that is a multiple of the alignment). */
static float *alloc_floats(size_t n) {
    const size_t bytes = floats_bytes(n);
    float *x = (ttt_fault_alloc() ? NULL : aligned_alloc(64, bytes));
    if (x) memset(x, 0, bytes);
    return x;
}

ttt_status ttt_params_add(ttt_params *ps, const char *name, int ndim, const int *shape, int decay,
                          ttt_param **out, ttt_error *err) {
    if (out) *out = NULL;
    if (!name || !name[0]) return ttt_error_set(err, TTT_ERR_NAME, "parameter name is empty");
    if (strlen(name) >= TTT_PARAM_NAME_LEN)
        return ttt_error_set(err, TTT_ERR_NAME, "parameter name '%.40s...' is longer than %d bytes",
                             name, TTT_PARAM_NAME_LEN - 1);
    if (ttt_params_find(ps, name))
        return ttt_error_set(err, TTT_ERR_NAME, "parameter '%s' is defined twice", name);
    if (ndim < 1 || ndim > TTT_MAX_DIMS)
        return ttt_error_set(err, TTT_ERR_SHAPE, "parameter '%s': %d dimensions (allowed 1 to %d)",
                             name, ndim, TTT_MAX_DIMS);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return ttt_error_set(err, TTT_ERR_SHAPE, "parameter '%s': dimension %d is %d", name, i,
                                 shape[i]);
        if (n > SIZE_MAX / sizeof(float) / (size_t)shape[i])
            return ttt_error_set(err, TTT_ERR_NOMEM, "parameter '%s' is too large", name);
        n *= (size_t)shape[i];
    }
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 16;
        ttt_param **np = ttt_fault_realloc(ps->p, (size_t)cap * sizeof *np);
        if (!np)
            return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory adding parameter '%s'", name);
        ps->p = np;
        ps->cap = cap;
    }
    ttt_param *p = ttt_fault_calloc(1, sizeof *p);
    float *data = alloc_floats(n), *grad = alloc_floats(n);
    if (!p || !data || !grad) {
        free(p);
        free(data);
        free(grad);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for parameter '%s' (%zu floats)",
                             name, n);
    }
    ttt_mem_track(2.0 * (double)floats_bytes(n));
    strcpy(p->name, name);
    p->ndim = ndim;
    for (int i = 0; i < ndim; i++) p->shape[i] = shape[i];
    p->n = n;
    p->data = data;
    p->grad = grad;
    p->decay = decay != 0;
    ps->p[ps->n++] = p;
    if (out) *out = p;
    return TTT_OK;
}

ttt_param *ttt_params_find(const ttt_params *ps, const char *name) {
    for (int i = 0; i < ps->n; i++)
        if (strcmp(ps->p[i]->name, name) == 0) return ps->p[i];
    return NULL;
}

size_t ttt_params_numel(const ttt_params *ps) {
    size_t n = 0;
    for (int i = 0; i < ps->n; i++) n += ps->p[i]->n;
    return n;
}

void ttt_params_zero_grad(ttt_params *ps) {
    for (int i = 0; i < ps->n; i++) memset(ps->p[i]->grad, 0, ps->p[i]->n * sizeof(float));
}

double ttt_params_grad_norm(const ttt_params *ps) {
    double s = 0.0;
    for (int i = 0; i < ps->n; i++) {
        const float *g = ps->p[i]->grad;
        for (size_t j = 0; j < ps->p[i]->n; j++) s += (double)g[j] * (double)g[j];
    }
    return sqrt(s);
}

double ttt_params_clip_grad_norm(ttt_params *ps, double max_norm) {
    double norm = ttt_params_grad_norm(ps);
    if (!isfinite(norm) || max_norm <= 0.0 || norm <= max_norm) return norm;
    float scale = (float)(max_norm / norm);
    for (int i = 0; i < ps->n; i++) {
        float *g = ps->p[i]->grad;
        for (size_t j = 0; j < ps->p[i]->n; j++) g[j] *= scale;
    }
    return norm;
}

static int first_nonfinite(const float *x, size_t n, size_t *at) {
    for (size_t j = 0; j < n; j++)
        if (!isfinite(x[j])) {
            *at = j;
            return 1;
        }
    return 0;
}

int ttt_params_find_nonfinite(const ttt_params *ps, ttt_params_check what, int *param_index,
                              size_t *elem_index, int *in_grad) {
    for (int i = 0; i < ps->n; i++) {
        size_t at;
        if ((what & TTT_PARAMS_CHECK_DATA) && first_nonfinite(ps->p[i]->data, ps->p[i]->n, &at)) {
            *param_index = i;
            *elem_index = at;
            *in_grad = 0;
            return 1;
        }
        if ((what & TTT_PARAMS_CHECK_GRAD) && first_nonfinite(ps->p[i]->grad, ps->p[i]->n, &at)) {
            *param_index = i;
            *elem_index = at;
            *in_grad = 1;
            return 1;
        }
    }
    return 0;
}

ttt_status ttt_params_check_finite(const ttt_params *ps, ttt_params_check what, ttt_error *err) {
    int pi, in_grad;
    size_t at;
    if (!ttt_params_find_nonfinite(ps, what, &pi, &at, &in_grad)) return TTT_OK;
    const ttt_param *p = ps->p[pi];
    /* the multi-index, row-major: last dimension fastest */
    size_t idx[TTT_MAX_DIMS], rest = at;
    for (int d = p->ndim - 1; d >= 0; d--) {
        idx[d] = rest % (size_t)p->shape[d];
        rest /= (size_t)p->shape[d];
    }
    char pos[96];
    size_t off = 0;
    for (int d = 0; d < p->ndim; d++)
        off += (size_t)snprintf(pos + off, sizeof pos - off, "%s%zu", d ? ", " : "[", idx[d]);
    snprintf(pos + off, sizeof pos - off, "]");
    float v = in_grad ? p->grad[at] : p->data[at];
    return ttt_error_set(err, TTT_ERR_NUMERIC, "%s of parameter '%s' is %s at element %zu = %s",
                         in_grad ? "gradient" : "value", p->name,
                         isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf"), at, pos);
}

void ttt_param_init_normal(ttt_param *p, ttt_rng *rng, float std) {
    ttt_rng_fill_normal(rng, p->data, p->n, 0.0f, std);
}

void ttt_param_init_uniform(ttt_param *p, ttt_rng *rng, float lo, float hi) {
    ttt_rng_fill_uniform(rng, p->data, p->n, lo, hi);
}

void ttt_param_init_const(ttt_param *p, float value) {
    for (size_t j = 0; j < p->n; j++) p->data[j] = value;
}

void ttt_param_init_zeros(ttt_param *p) { ttt_param_init_const(p, 0.0f); }
void ttt_param_init_ones(ttt_param *p) { ttt_param_init_const(p, 1.0f); }

ttt_tensor ttt_param_view(const ttt_param *p) {
    return ttt_tensor_view(p->data, p->ndim, p->shape);
}
ttt_tensor ttt_param_grad_view(const ttt_param *p) {
    return ttt_tensor_view(p->grad, p->ndim, p->shape);
}
