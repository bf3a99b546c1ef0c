/* AdamW and the gradient norm on a CUDA device (adamw_device.h; docs/training.md "Device and
 * precision"). Every float operation of the update is an explicitly rounded intrinsic
 * (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn) so that nvcc cannot contract a product and a sum
 * into one fused multiply-add: the host's update (adamw.c, compiled as ISO C, which does not
 * contract) rounds after every operation, and the device must round at the same places to give
 * the same bits. C-shaped: extern "C". */
#include <cuda_runtime.h>

#include "adamw_device.h"
#include "device.h"

namespace {

constexpr int kThreads = 256;
/* partial sums; the last slot of the scratch holds the total */
constexpr int kBlocks = TTT_CUDA_SUMSQ_SCRATCH - 1;

/* Block b sums x_i² for i ≡ (its threads) in a grid-stride loop, in double, then the block's
 * threads are added as a tree: a fixed order for a given n, so the norm is the same bits in
 * every run. */
__global__ void sumsq_partial(const float *x, size_t n, double *partial) {
    __shared__ double s[kThreads];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)kThreads + threadIdx.x; i < n;
         i += (size_t)gridDim.x * kThreads) {
        const double v = (double)x[i];
        acc += v * v;
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

/* One block adds the partial sums in the same tree order. */
__global__ void sumsq_total(double *partial, int n_part) {
    __shared__ double s[kThreads];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n_part; i += kThreads) acc += partial[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[kBlocks] = s[0];
}

/* adamw.h's update of one element, rounded where the host's loop rounds. */
__global__ void adamw_kernel(float *w, const float *g, float *m, float *v, size_t n, int decay,
                             ttt_adamw_factors f, unsigned *bad) {
    for (size_t j = blockIdx.x * (size_t)kThreads + threadIdx.x; j < n;
         j += (size_t)gridDim.x * kThreads) {
        const float gj = g[j];
        const float wj = decay ? __fmul_rn(w[j], f.shrink) : w[j];
        const float mj = __fadd_rn(__fmul_rn(f.b1, m[j]), __fmul_rn(f.one_m_b1, gj));
        const float vj =
            __fadd_rn(__fmul_rn(f.b2, v[j]), __fmul_rn(__fmul_rn(f.one_m_b2, gj), gj));
        m[j] = mj;
        v[j] = vj;
        const float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vj), f.inv_bc2_sqrt), f.eps);
        const float out = __fsub_rn(wj, __fdiv_rn(__fmul_rn(f.step_size, mj), den));
        w[j] = out;
        if (!isfinite(out)) atomicAdd(bad, 1u);
    }
}

unsigned blocks_for(size_t n) {
    const size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b > 65535 ? 65535 : b < 1 ? 1 : b);
}

ttt_status launched(const char *what, size_t n, ttt_error *err) {
    int dev = 0;
    (void)cudaGetDevice(&dev);
    return ttt_device_cuda_error((int)cudaGetLastError(), ttt_device_cuda(dev), err,
                                 "%s(n = %zu)", what, n);
}

ttt_status checked(cudaError_t e, const char *what, ttt_error *err) {
    int dev = 0;
    (void)cudaGetDevice(&dev);
    return ttt_device_cuda_error((int)e, ttt_device_cuda(dev), err, "%s", what);
}

} // namespace

extern "C" ttt_status ttt_cuda_sumsq(const float *x, size_t n, double *scratch, double *out,
                                     void *stream, ttt_error *err) {
    cudaStream_t st = (cudaStream_t)stream;
    *out = 0.0;
    if (n == 0) return TTT_OK;
    sumsq_partial<<<kBlocks, kThreads, 0, st>>>(x, n, scratch);
    TTT_TRY(launched("sumsq_partial", n, err));
    sumsq_total<<<1, kThreads, 0, st>>>(scratch, kBlocks);
    TTT_TRY(launched("sumsq_total", n, err));
    TTT_TRY(checked(cudaMemcpyAsync(out, scratch + kBlocks, sizeof(double),
                                    cudaMemcpyDeviceToHost, st),
                    "cudaMemcpyAsync(the gradient norm)", err));
    return checked(cudaStreamSynchronize(st), "cudaStreamSynchronize(the gradient norm)", err);
}

extern "C" ttt_status ttt_cuda_adamw_update(float *w, const float *g, float *m, float *v,
                                            size_t n, int decay, const ttt_adamw_factors *f,
                                            unsigned *bad, void *stream, ttt_error *err) {
    if (n == 0) return TTT_OK;
    adamw_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(w, g, m, v, n, decay, *f,
                                                                       bad);
    return launched("adamw_kernel", n, err);
}
