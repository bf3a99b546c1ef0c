/* Device helpers shared by the CUDA chunk kernels (chunkwise.cu of layers/forms/linear_attention
 * and layers/forms/delta_rule; docs/gpu.md): element loads and stores for fp32 and bf16 tensors,
 * the error check of host-side CUDA calls, and a warp reduction. Header-only; every function is
 * static inline or a template, so each .cu file gets its own copy and no symbol leaves the file. */
#ifndef TTT_CUDA_COMMON_CUH
#define TTT_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "chunk_cuda.h"
#include "status.h"

/* ---- host side: errors ---- */

/* Return TTT_ERR_DEVICE from the enclosing function, naming the CUDA call that failed and the
 * runtime's message, when `call` does not return cudaSuccess. `err` must be in scope. */
#define TTT_CUDA_CHECK(call)                                                                \
    do {                                                                                    \
        cudaError_t ttt_cu_e_ = (call);                                                     \
        if (ttt_cu_e_ != cudaSuccess)                                                       \
            return ttt_error_set(err, TTT_ERR_DEVICE, "%s:%d: %s failed: %s", __FILE__,     \
                                 __LINE__, #call, cudaGetErrorString(ttt_cu_e_));           \
    } while (0)

/* After a launch: a bad configuration shows up in cudaGetLastError. */
#define TTT_CUDA_CHECK_LAUNCH(kernel_name)                                                  \
    do {                                                                                    \
        cudaError_t ttt_cu_e_ = cudaGetLastError();                                         \
        if (ttt_cu_e_ != cudaSuccess)                                                       \
            return ttt_error_set(err, TTT_ERR_DEVICE, "%s:%d: launch of %s failed: %s",     \
                                 __FILE__, __LINE__, kernel_name,                           \
                                 cudaGetErrorString(ttt_cu_e_));                            \
    } while (0)

/* Bytes rounded up to the workspace alignment the interface promises (256). */
static inline size_t ttt_cu_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* ---- device side: element access ---- */

/* Element i of a tensor of element type E, as fp32 (a bf16 value is exact in fp32). */
template <typename E> __device__ __forceinline__ float ttt_ld(const E *p, size_t i);
template <> __device__ __forceinline__ float ttt_ld<float>(const float *p, size_t i) {
    return p[i];
}
template <> __device__ __forceinline__ float ttt_ld<__nv_bfloat16>(const __nv_bfloat16 *p,
                                                                   size_t i) {
    return __bfloat162float(p[i]);
}

/* Store an fp32 value as E (bf16: round to nearest even). */
template <typename E> __device__ __forceinline__ void ttt_st(E *p, size_t i, float x);
template <> __device__ __forceinline__ void ttt_st<float>(float *p, size_t i, float x) {
    p[i] = x;
}
template <> __device__ __forceinline__ void ttt_st<__nv_bfloat16>(__nv_bfloat16 *p, size_t i,
                                                                  float x) {
    p[i] = __float2bfloat16_rn(x);
}

/* ---- device side: reductions ---- */

__device__ __forceinline__ float ttt_warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

#endif
