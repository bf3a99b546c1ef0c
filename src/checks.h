/* Checks on what comes from outside before it is used (README "Hardening"):
 *   - every number of an input tensor is finite, and when one is not the message says which
 *     tensor and where: "in.safetensors: tensor 'q' has NaN at (0, 3, 1, 2)";
 *   - the memory a layer run will take is estimated up front, so that sizes the machine cannot
 *     hold are refused by ttt_size_check (tensor.h) with the amount, before anything is allocated
 *     (the kernels abort on a failed arena allocation: they have no error channel). */
#ifndef TTT_CHECKS_H
#define TTT_CHECKS_H

#include <stdint.h>

#include "apply.h"
#include "safetensors.h"
#include "status.h"
#include "ttt_layer.h"

/* x holds a row-major tensor of `ndim` dims (0 = a scalar, at most TTT_ST_MAX_DIMS) called
 * `name`, read from `where`.
 * When an element is NaN or ±Inf: TTT_ERR_NUMERIC with the first such element in row-major
 * order, its multi-index and how many there are, e.g.
 *     in.safetensors: tensor 'q' has NaN at (0, 3, 1, 2); 2 of its 120 values are not finite
 *     (inputs must be finite numbers) */
ttt_status ttt_check_finite(const float *x, int ndim, const int64_t *shape, const char *where,
                            const char *name, ttt_error *err);
/* Every tensor of a file from ttt_st_read / ttt_st_read_mem (`where` is the file's path). */
ttt_status ttt_st_check_finite(const ttt_st_file *f, ttt_error *err);
/* The outputs of ttt_apply on finite inputs `in`: a NaN or Inf there means float32 overflowed
 * inside the layer, reported (TTT_ERR_NUMERIC) rather than written, e.g.
 *     in.safetensors: the output 'o' has NaN at (0, 2, 1, 0) (...): the layer overflowed float32
 *     on these inputs (the largest is 2.8e+32, in 'k'); scale the inputs down or lower ... */
ttt_status ttt_apply_check_outputs(const ttt_apply_out *out, const ttt_st_file *in,
                                   ttt_error *err);

/* Bytes of one sequence's layer state: the fast weights and the optimizer's state tensors (and
 * the normalizer of normalize: ratio). */
double ttt_layer_state_bytes(const ttt_layer *L);
/* An upper estimate of the bytes ttt_layer_forward allocates for one sequence of T tokens on
 * top of q, k, v, o and the state: the transformed inputs (scale, RoPE, feature map), the form's
 * scratch (T² floats for the parallel forms, C² per chunk for the chunkwise ones, b² for the
 * dual and Titans forms) and the generic driver's copies of the state. */
double ttt_layer_forward_bytes(const ttt_layer *L, long T);

#endif
