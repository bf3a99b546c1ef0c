/* The persistent parameters of an outer-loop (trained) model: an ordered list of named float
 * arrays, each with a gradient buffer of the same size.
 *
 * The list owns plain float arrays (64-byte aligned) so that autodiff tensors can alias them
 * (ttt_param_view over data, the grad buffer shared with the tape), the optimizer can update
 * them in place and checkpoints can write them without a copy. Order is the order of
 * ttt_params_add and is stable: optimizer state and checkpoints follow it.
 *
 * Each parameter carries `decay`: whether AdamW's decoupled weight decay applies to it. By the
 * usual convention matrices (projections, embeddings) decay; norm gains, biases and gate biases
 * do not (decaying a norm gain towards 0 or a bias towards 0 is a prior nobody wants). */
#ifndef TTT_PARAMS_H
#define TTT_PARAMS_H

#include <stddef.h>

#include "rng.h"
#include "status.h"
#include "tensor.h"

#define TTT_PARAM_NAME_LEN 128

typedef struct ttt_param {
    char name[TTT_PARAM_NAME_LEN]; /* unique within the list, e.g. "layer0.attn.wq" */
    int ndim;                      /* 1 … TTT_MAX_DIMS (a scalar is shape (1)) */
    int shape[TTT_MAX_DIMS];
    size_t n;    /* number of elements */
    float *data; /* (n) row-major, owned */
    float *grad; /* (n) same layout as data, owned */
    int decay;   /* nonzero: AdamW weight decay applies */
} ttt_param;

typedef struct ttt_params {
    ttt_param **p; /* p[0..n-1]; each ttt_param is allocated separately so pointers stay valid */
    int n, cap;
} ttt_params;

void ttt_params_init(ttt_params *ps);
void ttt_params_free(ttt_params *ps);

/* Add a parameter with zeroed data and grad; *out (may be NULL) receives a pointer that stays
 * valid until ttt_params_free. Errors: empty/too long/duplicate name (TTT_ERR_NAME), bad shape
 * (TTT_ERR_SHAPE), allocation (TTT_ERR_NOMEM). */
ttt_status ttt_params_add(ttt_params *ps, const char *name, int ndim, const int *shape, int decay,
                          ttt_param **out, ttt_error *err);
/* The parameter called `name`, or NULL. */
ttt_param *ttt_params_find(const ttt_params *ps, const char *name);
/* Total number of elements over all parameters. */
size_t ttt_params_numel(const ttt_params *ps);

void ttt_params_zero_grad(ttt_params *ps);
/* ‖g‖₂ over all gradients together, accumulated in double. NaN/Inf if any gradient is. */
double ttt_params_grad_norm(const ttt_params *ps);
/* Clip by global norm: when ‖g‖ > max_norm, scale every gradient by max_norm / ‖g‖ (exactly,
 * without PyTorch's +1e-6 in the denominator). Returns ‖g‖ before clipping. A non-finite norm
 * leaves the gradients unchanged (the caller reports it; see ttt_params_check_finite). */
double ttt_params_clip_grad_norm(ttt_params *ps, double max_norm);

/* Which buffers ttt_params_check_finite looks at. */
typedef enum ttt_params_check {
    TTT_PARAMS_CHECK_DATA = 1,
    TTT_PARAMS_CHECK_GRAD = 2,
    TTT_PARAMS_CHECK_BOTH = 3
} ttt_params_check;

/* The first NaN/Inf, scanning parameters in order (data before grad within a parameter).
 * Returns 1 and fills *param_index / *elem_index (flat) / *in_grad when found, else 0. */
int ttt_params_find_nonfinite(const ttt_params *ps, ttt_params_check what, int *param_index,
                              size_t *elem_index, int *in_grad);
/* TTT_OK, or TTT_ERR_NUMERIC with a message naming the parameter, the buffer, the element (flat
 * and multi-index) and the value: "gradient of 'layer0.wq' is nan at element 17 = [0, 17]". */
ttt_status ttt_params_check_finite(const ttt_params *ps, ttt_params_check what, ttt_error *err);

/* Initializers (data only; the draws come from `rng` in element order, so the same seed gives
 * the same bits). */
void ttt_param_init_normal(ttt_param *p, ttt_rng *rng, float std);
void ttt_param_init_uniform(ttt_param *p, ttt_rng *rng, float lo, float hi);
void ttt_param_init_const(ttt_param *p, float value);
void ttt_param_init_zeros(ttt_param *p);
void ttt_param_init_ones(ttt_param *p);

/* Tensor headers over a parameter's buffers (no copy). */
ttt_tensor ttt_param_view(const ttt_param *p);
ttt_tensor ttt_param_grad_view(const ttt_param *p);

#endif
