/* The optimizer registry, generated from optim/optim_list.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "optim.h"

#define TTT_OPTIM(id) extern const ttt_optim ttt_optim_##id;
#include "optim_list.h"
#undef TTT_OPTIM

static const ttt_optim *const registry[] = {
#define TTT_OPTIM(id) &ttt_optim_##id,
#include "optim_list.h"
#undef TTT_OPTIM
};

static const char *const registry_names[] = {
#define TTT_OPTIM(id) #id,
#include "optim_list.h"
#undef TTT_OPTIM
};

#define N_OPTIM ((int)(sizeof registry / sizeof registry[0]))

const ttt_optim *ttt_optim_find(const char *name) {
    for (int i = 0; i < N_OPTIM; i++)
        if (name && strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

int ttt_optim_count(void) { return N_OPTIM; }
const ttt_optim *ttt_optim_at(int i) { return (i >= 0 && i < N_OPTIM) ? registry[i] : NULL; }
const char *const *ttt_optim_names(void) { return registry_names; }

ttt_tensor *ttt_optim_apply_decay(ttt_ctx *ctx, const ttt_tensor *W, const ttt_optim_block *blk) {
    if (!blk->decay) return (ttt_tensor *)W;
    return blk->decay->n == 1 ? ttt_mul(ctx, W, blk->decay) : ttt_scale_rows(ctx, W, blk->decay);
}

ttt_status ttt_optim_read_momentum(const ttt_optim_args *opts, float *mu, ttt_error *err) {
    *mu = (float)ttt_optim_arg_num(opts, "momentum");
    if (*mu >= 1.0f)
        return ttt_optim_arg_error(err, TTT_ERR_RANGE, opts, "momentum",
                                   "layer.optimizer.momentum: %g is out of range; expected a "
                                   "value in [0, 1) (mu = 1 accumulates every gradient forever)",
                                   (double)*mu);
    return TTT_OK;
}

/* ---- options ---- */

/* The common options once, to count them: every table begins with these entries. */
static const ttt_option common_options[] = {TTT_OPTIM_COMMON_OPTIONS, TTT_OPTION_END};
#define N_COMMON ((int)(sizeof common_options / sizeof common_options[0]) - 1)

const ttt_option *ttt_optim_own_options(const ttt_optim *o) { return o->options + N_COMMON; }

int ttt_optim_is_common(const ttt_optim *o, const ttt_option *opt) {
    return opt >= o->options && opt < o->options + N_COMMON;
}

static int arg_index(const ttt_optim_args *a, const char *key) {
    for (int i = 0; a->options[i].name; i++)
        if (strcmp(a->options[i].name, key) == 0) return i;
    TTT_ASSERT(!"an optimizer read an option its table does not have");
    return 0;
}

double ttt_optim_arg_num(const ttt_optim_args *a, const char *key) {
    return a->values[arg_index(a, key)].number;
}

const char *ttt_optim_arg_text(const ttt_optim_args *a, const char *key) {
    return a->values[arg_index(a, key)].text;
}

ttt_status ttt_optim_arg_error(ttt_error *err, ttt_status s, const ttt_optim_args *a,
                               const char *key, const char *fmt, ...) {
    char msg[TTT_ERROR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const ttt_cfg_node *at = a->at ? a->at[arg_index(a, key)] : NULL;
    return at ? ttt_cfg_error(err, s, at, "%s", msg) : ttt_error_set(err, s, "%s", msg);
}

/* ---- state ---- */

int ttt_optim_n_state(const ttt_optim *o, const void *cfg) {
    const int n = o->n_state ? o->n_state(cfg) : 0;
    TTT_ASSERT(n >= 0 && n <= TTT_OPTIM_MAX_STATE);
    return n;
}

int ttt_optim_state_shape(const ttt_optim *o, const void *cfg, int *shape, int i,
                          const int *w_shape, int w_ndim) {
    TTT_ASSERT(i >= 0 && i < ttt_optim_n_state(o, cfg));
    if (!o->state_shape) {
        memcpy(shape, w_shape, (size_t)w_ndim * sizeof *shape);
        return w_ndim;
    }
    const int nd = o->state_shape(cfg, shape, i, w_shape, w_ndim);
    TTT_ASSERT(nd >= 1 && nd <= TTT_MAX_DIMS);
    for (int d = 0; d < nd; d++) TTT_ASSERT(shape[d] >= 1);
    return nd;
}

double ttt_optim_state_floats(const ttt_optim *o, const void *cfg, const int *w_shape,
                              int w_ndim) {
    double total = 0;
    for (int s = 0; s < ttt_optim_n_state(o, cfg); s++) {
        int shape[TTT_MAX_DIMS];
        const int nd = ttt_optim_state_shape(o, cfg, shape, s, w_shape, w_ndim);
        double n = 1;
        for (int d = 0; d < nd; d++) n *= shape[d];
        total += n;
    }
    return total;
}

/* Fresh zeroed tensors of the declared shapes in state[0..n-1]. */
static int alloc_zero_state(ttt_ctx *ctx, const ttt_optim *o, const void *cfg, ttt_tensor **state,
                            const ttt_tensor *W) {
    const int n = ttt_optim_n_state(o, cfg);
    for (int s = 0; s < n; s++) {
        int shape[TTT_MAX_DIMS];
        const int nd = ttt_optim_state_shape(o, cfg, shape, s, W->shape, W->ndim);
        state[s] = ttt_tensor_new(ctx, nd, shape);
        ttt_tensor_fill(state[s], 0.0f);
    }
    return n;
}

int ttt_optim_state_new(ttt_ctx *ctx, const ttt_optim *o, const void *cfg, ttt_tensor **state,
                        const ttt_tensor *W) {
    const int n = alloc_zero_state(ctx, o, cfg, state, W);
    if (o->init_state) o->init_state(cfg, state, W);
    return n;
}

void ttt_optim_reinit_state(ttt_ctx *ctx, const ttt_optim *o, const void *cfg,
                            ttt_tensor **state, int n_state, const ttt_tensor *W) {
    TTT_ASSERT(n_state == ttt_optim_n_state(o, cfg));
    if (o->init_state_ops) {
        o->init_state_ops(ctx, cfg, state, W);
        for (int s = 0; s < n_state; s++) { /* the declaration is a contract for the ops too */
            int shape[TTT_MAX_DIMS];
            const int nd = ttt_optim_state_shape(o, cfg, shape, s, W->shape, W->ndim);
            TTT_ASSERT(state[s]->ndim == nd &&
                       memcmp(state[s]->shape, shape, (size_t)nd * sizeof *shape) == 0);
        }
    } else if (o->init_state) {
        alloc_zero_state(ctx, o, cfg, state, W);
        o->init_state(cfg, state, W);
    }
}

/* ---- outer parameters ---- */

int ttt_optim_n_outer(const ttt_optim *o, const void *cfg, ttt_optim_param *decl) {
    if (!o->outer) return 0;
    ttt_optim_param tmp[TTT_OPTIM_MAX_OUTER];
    const int n = o->outer(cfg, decl ? decl : tmp);
    TTT_ASSERT(n >= 0 && n <= TTT_OPTIM_MAX_OUTER);
    return n;
}

int ttt_optim_outer_new(ttt_ctx *ctx, const ttt_optim *o, const void *cfg, ttt_tensor **P) {
    ttt_optim_param decl[TTT_OPTIM_MAX_OUTER];
    const int n = ttt_optim_n_outer(o, cfg, decl);
    for (int i = 0; i < n; i++) {
        TTT_ASSERT(decl[i].ndim >= 1 && decl[i].ndim <= TTT_MAX_DIMS);
        P[i] = ttt_tensor_new(ctx, decl[i].ndim, decl[i].shape);
        ttt_tensor_fill(P[i], 0.0f);
    }
    if (n > 0 && o->outer_init) o->outer_init(cfg, P);
    return n;
}

double ttt_optim_outer_floats(const ttt_optim *o, const void *cfg) {
    ttt_optim_param decl[TTT_OPTIM_MAX_OUTER];
    const int n = ttt_optim_n_outer(o, cfg, decl);
    double total = 0;
    for (int i = 0; i < n; i++) {
        double c = 1;
        for (int d = 0; d < decl[i].ndim; d++) c *= decl[i].shape[d];
        total += c;
    }
    return total;
}
