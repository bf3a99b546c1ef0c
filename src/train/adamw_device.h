/* AdamW and gradient clipping on a CUDA device (docs/training.md "Device and precision"): the
 * kernels the device trainer (train_device.h) runs on the flat parameter, gradient and moment
 * buffers it keeps on the device. The formulas are adamw.h's, evaluated in the same order with
 * the same float32 roundings (no contraction into fused multiply-adds, IEEE square root and
 * division, the scalar factors formed in double on the host), so that one update from the same
 * inputs gives the same bits as ttt_adamw_step; the norm is accumulated in double, in a fixed
 * order (per-block partial sums added by one block), so that it does not change between runs.
 * C-shaped: src/train/cuda/adamw.cu implements it with CUDA, adamw_device.c refuses every call in
 * a build without CUDA. Pointers are device memory of the current device; work is queued on
 * `stream` (a cudaStream_t, NULL = the default stream). */
#ifndef TTT_ADAMW_DEVICE_H
#define TTT_ADAMW_DEVICE_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Doubles of device scratch ttt_cuda_sumsq needs (the per-block partial sums and the total). */
#define TTT_CUDA_SUMSQ_SCRATCH 1025

/* *out = Σ x_i² over n floats, accumulated in double: the per-block sums in `scratch` (device,
 * TTT_CUDA_SUMSQ_SCRATCH doubles), then added in block order by one block, the total copied to
 * the host and the stream waited for. NaN or ±Inf in x gives a non-finite sum. */
ttt_status ttt_cuda_sumsq(const float *x, size_t n, double *scratch, double *out, void *stream,
                          ttt_error *err);

/* The scalar factors of one AdamW update (adamw.h), formed on the host as ttt_adamw_step does. */
typedef struct ttt_adamw_factors {
    float b1, b2, one_m_b1, one_m_b2, step_size, inv_bc2_sqrt, eps, shrink;
} ttt_adamw_factors;

/* One AdamW update of n parameters w with gradient g and moments m, v (all device, updated in
 * place); decay nonzero: w is first multiplied by f->shrink. *bad (device) is increased by the
 * number of updated weights that are not finite. */
ttt_status ttt_cuda_adamw_update(float *w, const float *g, float *m, float *v, size_t n,
                                 int decay, const ttt_adamw_factors *f, unsigned *bad,
                                 void *stream, ttt_error *err);

#ifdef __cplusplus
}
#endif

#endif
