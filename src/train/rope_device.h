/* RoPE inside a TTT layer, on a CUDA device (docs/training.md "Device and precision"): the CUDA
 * forms take q and k already rotated, so the ttt mixer's block on a device turns them itself
 * before the batched call. The layout is the forms' (B, T, H, d) row-major: the row of sequence
 * b, token t and head h turns by the angle of position t, with rope.h's convention (interleaved
 * pairs, ω_i = base^(−2i/d), angles and their sines in double, an odd last element unrotated),
 * as ttt_rope_apply does per head and sequence on the host. C-shaped: src/train/cuda/rope_heads.cu
 * implements it; rope_device.c refuses in a build without CUDA. */
#ifndef TTT_ROPE_DEVICE_H
#define TTT_ROPE_DEVICE_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y (+)= x rotated (inverse: turned back by −angle, the backward), x and y (B, T, H, d) device
 * memory of the current device, queued on `stream`; add nonzero adds into y. */
ttt_status ttt_cuda_rope_heads(float *y, int add, const float *x, int B, int T, int H, int d,
                               float base, int inverse, void *stream, ttt_error *err);

#ifdef __cplusplus
}
#endif

#endif
