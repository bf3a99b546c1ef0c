/* Checks on what comes from outside before it is used (docs/hardening.md):
 *   - every number of an input tensor is finite, and when one is not the message says which
 *     tensor and where: "in.safetensors: tensor 'q' has NaN at (0, 3, 1, 2)";
 *   - outputs computed from finite inputs are finite, or the overflow is reported.
 * (Memory estimates of a layer run are in layers/layer.h.) */
#ifndef TTT_FINITE_H
#define TTT_FINITE_H

#include <stdint.h>

#include "safetensors.h"
#include "status.h"

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
/* Outputs computed from finite inputs `in` (outs[0..n_out), e.g. ttt_apply's): a NaN or Inf
 * there means float32 overflowed inside the layer, reported (TTT_ERR_NUMERIC) rather than
 * written, e.g.
 *     in.safetensors: the output 'o' has NaN at (0, 2, 1, 0) (...): the layer overflowed float32
 *     on these inputs (the largest is 2.8e+32, in 'k'); scale the inputs down or lower ... */
ttt_status ttt_st_check_outputs(const ttt_st_tensor *outs, int n_out, const ttt_st_file *in,
                                ttt_error *err);

#endif
