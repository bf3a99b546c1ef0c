/* The optimizer registry, generated from optim/optim_list.h. */
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

ttt_status ttt_optim_read_momentum(const ttt_cfg_node *opts, float *mu, ttt_error *err) {
    *mu = (float)ttt_cfg_float(opts, "momentum");
    if (*mu >= 1.0f)
        return ttt_cfg_error(err, TTT_ERR_RANGE, ttt_cfg_get(opts, "momentum"),
                             "layer.optimizer.momentum: %g is out of range; expected a value in "
                             "[0, 1) (mu = 1 accumulates every gradient forever)",
                             (double)*mu);
    return TTT_OK;
}
