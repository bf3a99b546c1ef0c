/* Device helpers shared by the CUDA chunk kernels (chunkwise.cu of layers/forms/linear_attention
 * and layers/forms/delta_rule; docs/gpu.md): element loads and stores for fp32 and bf16 tensors,
 * the error check of host-side CUDA calls, warp reductions, and mma.sync wrappers (TF32 m16n8k8
 * with the hi/lo split that keeps fp32 accuracy, bf16 m16n8k16). Header-only; every function is
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
__device__ __forceinline__ double ttt_warp_sum_d(double x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* ---- device side: tensor cores (mma.sync, sm_80 and newer) ----
 *
 * TF32 keeps 10 explicit mantissa bits, so one TF32 product of fp32 values is good to ~1e-3
 * relative only. Splitting a = hi + lo with hi = tf32(a), lo = tf32(a − hi) leaves an error of
 * ~2^-22 |a|; a·b ≈ hi_a·hi_b + hi_a·lo_b + lo_a·hi_b (three mma) is then accurate to about
 * fp32 rounding. When one side is exact in TF32 (a bf16 input), two mma suffice. */

__device__ __forceinline__ uint32_t ttt_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
/* x = hi + lo, both representable in TF32 (lo carries the next 11 bits). */
__device__ __forceinline__ void ttt_tf32_split(float x, uint32_t &hi, uint32_t &lo) {
    hi = ttt_tf32(x);
    lo = ttt_tf32(x - __uint_as_float(hi));
}

/* D = A·B + C for one warp: A 16×8 (row), B 8×8 (col), C/D 16×8, all fragments in the PTX
 * layout of mma.m16n8k8 (a: 4 regs, b: 2 regs, c/d: 4 floats). */
__device__ __forceinline__ void ttt_mma_tf32(float d[4], const uint32_t a[4], const uint32_t b[2],
                                             const float c[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
          "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    (void)a; (void)b;
    d[0] = c[0]; d[1] = c[1]; d[2] = c[2]; d[3] = c[3];
#endif
}

/* D = A·B + C, bf16 inputs, fp32 accumulation: A 16×16 (row, 4 regs of bf16 pairs), B 16×8
 * (col, 2 regs), C/D 16×8 (4 floats). */
__device__ __forceinline__ void ttt_mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                             const float c[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
          "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    (void)a; (void)b;
    d[0] = c[0]; d[1] = c[1]; d[2] = c[2]; d[3] = c[3];
#endif
}

/* Two fp32 values as one register of a bf16 pair (x in the low half), round to nearest. */
__device__ __forceinline__ uint32_t ttt_pack_bf16(float x, float y) {
    __nv_bfloat162 p = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<uint32_t *>(&p);
}

#endif
