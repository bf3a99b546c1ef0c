/* rope_device.h in a build without CUDA: refuses with the reason (nothing reaches it: no device
 * tensor exists without CUDA). */
#include "rope_device.h"

#ifndef TTT_HAVE_CUDA

ttt_status ttt_cuda_rope_heads(float *y, int add, const float *x, int B, int T, int H, int d,
                               float base, int inverse, void *stream, ttt_error *err) {
    (void)y, (void)add, (void)x, (void)B, (void)T, (void)H, (void)d, (void)base, (void)inverse;
    (void)stream;
    return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                         "this build has no CUDA (configure with -DTTT_CUDA=ON)");
}

#else
typedef int ttt_rope_device_unused; /* the CUDA build has src/train/cuda/rope_heads.cu */
#endif
