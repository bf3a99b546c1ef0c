/* adamw_device.h in a build without CUDA: every entry refuses with the reason. Nothing reaches
 * them (the device trainer cannot start without a usable CUDA device); they exist so that the
 * trainer links in every build. */
#include "adamw_device.h"

#ifndef TTT_HAVE_CUDA

#define NO_CUDA(err)                                                                       \
    ttt_error_set((err), TTT_ERR_UNSUPPORTED, "this build has no CUDA (configure with "    \
                                              "-DTTT_CUDA=ON)")

ttt_status ttt_cuda_sumsq(const float *x, size_t n, double *scratch, double *out, void *stream,
                          ttt_error *err) {
    (void)x, (void)n, (void)scratch, (void)stream;
    *out = 0.0;
    return NO_CUDA(err);
}

ttt_status ttt_cuda_adamw_update(float *w, const float *g, float *m, float *v, size_t n,
                                 int decay, const ttt_adamw_factors *f, unsigned *bad,
                                 void *stream, ttt_error *err) {
    (void)w, (void)g, (void)m, (void)v, (void)n, (void)decay, (void)f, (void)bad, (void)stream;
    return NO_CUDA(err);
}

#else
typedef int ttt_adamw_device_unused; /* the CUDA build has src/train/cuda/adamw.cu */
#endif
