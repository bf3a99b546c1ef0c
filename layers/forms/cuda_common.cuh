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

/* ---- device side: tensor cores (docs/gpu.md "Tensor-core forward") ----
 * mma.sync m16n8k16 with bf16 operands and fp32 accumulation, ldmatrix fragment loads and
 * cp.async copies; all exist from sm_80 on. Fragment layout (g = lane / 4, c = lane % 4):
 *   A (16 × 16, row major)  a0 (g, 2c..2c+1)  a1 (g+8, 2c..)  a2 (g, 2c+8..)  a3 (g+8, 2c+8..)
 *   B (16 × 8)              b0 (k = 2c..2c+1, n = g)          b1 (k = 2c+8..2c+9, n = g)
 *   C (16 × 8, fp32)        c0 c1 (g, 2c..2c+1)               c2 c3 (g+8, 2c..2c+1) */

__device__ __forceinline__ uint32_t ttt_smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global → shared, asynchronous; with in = false the 16 bytes are zero-filled and
 * nothing is read. */
__device__ __forceinline__ void ttt_cp_async16(void *dst, const void *src, bool in) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(ttt_smem_u32(dst)),
                 "l"(src), "r"(in ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void ttt_cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* wait until at most N of this thread's committed groups are still in flight */
template <int N> __device__ __forceinline__ void ttt_cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* four 8 × 8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i */
__device__ __forceinline__ void ttt_ldsm4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(ttt_smem_u32(p)));
}
/* the same, each matrix transposed */
__device__ __forceinline__ void ttt_ldsm4_t(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(ttt_smem_u32(p)));
}

/* d += a · b */
__device__ __forceinline__ void ttt_mma_bf16(float d[4], const uint32_t a[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* x ≈ hi + lo with hi = bf16(x), lo = bf16(x − hi): 16 significant bits, |x − hi − lo| ≤
 * 2^-18 |x| (docs/gpu.md "Tensor-core forward"). Two consecutive values, packed as bf16x2. */
__device__ __forceinline__ void ttt_split2(float x0, float x1, __nv_bfloat162 *hi,
                                           __nv_bfloat162 *lo) {
    __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    float2 hf = __bfloat1622float2(h);
    *hi = h;
    *lo = __floats2bfloat162_rn(x0 - hf.x, x1 - hf.y);
}

/* ---- device side: warp products of operands gathered from shared memory ----
 * (docs/gpu.md "Tensor-core backward"). The backward's chunk kernels multiply matrices that are
 * held in shared memory in several layouts (transposed, scaled per row, masked), most of them
 * computed in fp32. An operand is an accessor: get(r, c) returns the pair of elements (r, c) and
 * (r, c + 1) of an A operand (16 × 16 tiles, row r, columns c, c + 1), or (c, n) and (c + 1, n) of
 * a B operand (16 × 8 tiles, k = c, c + 1, column n) as a float2. A computed operand is split into
 * bf16 hi + lo (ttt_split2); an exact one (a bf16 input) is used whole. A product of two split
 * operands takes hi·lo + lo·hi + hi·hi (lo·lo, below 2^-16 of the product, is left out), of a
 * split and an exact one two products: the result is within about 2^-16 of the fp32 product
 * with fp32 accumulation. */
__device__ __forceinline__ uint32_t ttt_bf2_bits(__nv_bfloat162 x) {
    union {
        __nv_bfloat162 b;
        uint32_t u;
    } v;
    v.b = x;
    return v.u;
}
template <bool EXACT>
__device__ __forceinline__ void ttt_pack_pair(float2 x, uint32_t *hi, uint32_t *lo) {
    if (EXACT) {
        *hi = ttt_bf2_bits(__floats2bfloat162_rn(x.x, x.y));
    } else {
        __nv_bfloat162 h, l;
        ttt_split2(x.x, x.y, &h, &l);
        *hi = ttt_bf2_bits(h);
        *lo = ttt_bf2_bits(l);
    }
}
/* the A fragment of the 16 × 16 tile at (r0, k0) */
template <bool EXACT, typename F>
__device__ __forceinline__ void ttt_frag_a(uint32_t hi[4], uint32_t lo[4], const F &get, int r0,
                                           int k0) {
    const int g = (threadIdx.x & 31) >> 2, c2 = 2 * (threadIdx.x & 3);
#pragma unroll
    for (int i = 0; i < 4; i++)
        ttt_pack_pair<EXACT>(get(r0 + g + 8 * (i & 1), k0 + c2 + 8 * (i >> 1)), &hi[i], &lo[i]);
}
/* the B fragment of the 16 × 8 tile at (k0, n0) */
template <bool EXACT, typename F>
__device__ __forceinline__ void ttt_frag_b(uint32_t hi[2], uint32_t lo[2], const F &get, int k0,
                                           int n0) {
    const int g = (threadIdx.x & 31) >> 2, c2 = 2 * (threadIdx.x & 3);
#pragma unroll
    for (int i = 0; i < 2; i++) ttt_pack_pair<EXACT>(get(k0 + c2 + 8 * i, n0 + g), &hi[i], &lo[i]);
}
/* acc[i][j] (the 16 × 8 tile at rows m0 + 16i, columns n0 + 8j) += Σ_{k0 ≤ k < k1} A(r, k) B(k, n),
 * k1 − k0 a multiple of 16; AX, BX: the operand is exact in bf16 */
template <int MT, int NT, bool AX, bool BX, typename FA, typename FB>
__device__ __forceinline__ void ttt_warp_gemm(float (*acc)[NT][4], const FA &A, const FB &B, int m0,
                                              int n0, int k0, int k1) {
    for (int k = k0; k < k1; k += 16) {
        uint32_t ah[MT][4], al[MT][4];
#pragma unroll
        for (int i = 0; i < MT; i++) ttt_frag_a<AX>(ah[i], al[i], A, m0 + 16 * i, k);
#pragma unroll
        for (int j = 0; j < NT; j++) {
            uint32_t bh[2], bl[2];
            ttt_frag_b<BX>(bh, bl, B, k, n0 + 8 * j);
#pragma unroll
            for (int i = 0; i < MT; i++) {
                if (!BX) ttt_mma_bf16(acc[i][j], ah[i], bl[0], bl[1]);
                if (!AX) ttt_mma_bf16(acc[i][j], al[i], bh[0], bh[1]);
                ttt_mma_bf16(acc[i][j], ah[i], bh[0], bh[1]);
            }
        }
    }
}

/* the same with B an exact bf16 matrix stored by rows k in shared memory (element (k, n) at
 * Bm[k·ld + n], rows 16-byte aligned), its fragments by ldmatrix.trans, two n-tiles per load;
 * NT even */
template <int MT, int NT, bool AX, typename FA>
__device__ __forceinline__ void ttt_warp_gemm_bk(float (*acc)[NT][4], const FA &A,
                                                 const __nv_bfloat16 *Bm, int ld, int m0, int n0,
                                                 int k0, int k1) {
    const int lane = threadIdx.x & 31, mx = lane >> 3;
    for (int k = k0; k < k1; k += 16) {
        uint32_t ah[MT][4], al[MT][4];
#pragma unroll
        for (int i = 0; i < MT; i++) ttt_frag_a<AX>(ah[i], al[i], A, m0 + 16 * i, k);
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            uint32_t bb[4];
            ttt_ldsm4_t(bb, Bm + (size_t)(k + (lane & 7) + 8 * (mx & 1)) * ld + n0 + 8 * j +
                                8 * (mx >> 1));
#pragma unroll
            for (int i = 0; i < MT; i++) {
                if (!AX) {
                    ttt_mma_bf16(acc[i][j], al[i], bb[0], bb[1]);
                    ttt_mma_bf16(acc[i][j + 1], al[i], bb[2], bb[3]);
                }
                ttt_mma_bf16(acc[i][j], ah[i], bb[0], bb[1]);
                ttt_mma_bf16(acc[i][j + 1], ah[i], bb[2], bb[3]);
            }
        }
    }
}

#endif
