/* Matrix products and triangular solves of the device ops through cuBLAS (cuda_kernels.h,
 * docs/device_ops.md), and the bfloat16 products of mixed precision with their casts (docs/gpu.md
 * "bfloat16 training").
 *
 * cuBLAS is column-major; a row-major matrix read column-major is its transpose, so the
 * row-major C = op(A)·op(B) is computed as the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: the operands
 * swap places and keep their transpose flags and leading dimensions (the stored row lengths).
 * One handle per device and thread (cuBLAS handles are not to be shared between threads that
 * run concurrently), made on first use and bound to the call's stream before every call. The
 * math mode is CUBLAS_PEDANTIC_MATH: plain fp32 products, never TF32, so that the device ops
 * keep the accuracy the CPU ops have (tests/test_backend_ops.c bounds the difference with an
 * fp32 error model).
 *
 * The library is opened at the first device product (dlopen of libcublas.so.<major>), not
 * linked: a process linked with cuBLAS pays for its mappings at every fork (measured: 100 forks
 * of an empty program take 0.04 s, 1.1 s with libcublas linked), and the Check suites fork once
 * per test whether or not they touch a GPU. */
#include <dlfcn.h>

#include <cublas_v2.h>

#include "ops_common.cuh"

namespace {

using namespace ttt_ops;

thread_local cublasHandle_t handles[TTT_MAX_CUDA_DEVICES];

#define TTT_STR2_(x) #x
#define TTT_STR_(x) TTT_STR2_(x)

/* The cuBLAS entry points the device ops use, from the library opened at first use. */
struct blas_api {
    void *lib;
    char why[256]; /* dlerror() when the library or a symbol is missing */
    decltype(&cublasCreate_v2) create;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
    decltype(&cublasStrsm_v2) strsm;
    /* the bf16 products (mixed precision): spelled out, as C++ sees overloads of these names */
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
    cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t,
                                              cublasOperation_t, int, int, int, const void *,
                                              const void *, cudaDataType, int, long long,
                                              const void *, cudaDataType, int, long long,
                                              const void *, void *, cudaDataType, int, long long,
                                              int, cublasComputeType_t, cublasGemmAlgo_t);
};

template <typename F> bool sym(blas_api &a, F &f, const char *name) {
    f = reinterpret_cast<F>(dlsym(a.lib, name));
    if (!f) snprintf(a.why, sizeof a.why, "%s: %s", name, dlerror());
    return f != nullptr;
}

/* Opened once per process (a function-local static is initialized once, thread-safely). */
const blas_api &api() {
    static const blas_api a = [] {
        blas_api r{};
        /* by soname (the loader's path), else in the toolkit the build found */
        const char *name = "libcublas.so." TTT_STR_(CUBLAS_VER_MAJOR);
        r.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
#ifdef TTT_CUDA_LIBDIR
        if (!r.lib) {
            snprintf(r.why, sizeof r.why, "%s", dlerror());
            char path[512];
            snprintf(path, sizeof path, "%s/%s", TTT_CUDA_LIBDIR, name);
            r.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
#endif
        if (!r.lib) {
            snprintf(r.why, sizeof r.why, "%s", dlerror());
            return r;
        }
        if (!(sym(r, r.create, "cublasCreate_v2") && sym(r, r.set_stream, "cublasSetStream_v2") &&
              sym(r, r.set_math_mode, "cublasSetMathMode") && sym(r, r.sgemm, "cublasSgemm_v2") &&
              sym(r, r.sgemm_strided_batched, "cublasSgemmStridedBatched") &&
              sym(r, r.strsm, "cublasStrsm_v2") && sym(r, r.gemm_ex, "cublasGemmEx") &&
              sym(r, r.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx")))
            r.create = nullptr; /* unusable: why says which symbol */
        return r;
    }();
    return a;
}

const char *cublas_words(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED (out of memory)";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}

ttt_status blas_error(cublasStatus_t s, int dev, ttt_error *err, const char *call, int m, int n,
                      int k, int batch) {
    (void)cudaGetLastError();
    char d[32];
    return ttt_error_set(err, TTT_ERR_DEVICE, "%s(m = %d, n = %d, k = %d, batch = %d) on %s: %s",
                         call, m, n, k, batch, ttt_device_name(ttt_device_cuda(dev), d, sizeof d),
                         cublas_words(s));
}

/* The calling thread's handle for its current device, made on first use, bound to `stream`. */
ttt_status handle_for(void *stream, cublasHandle_t *out, int *dev_out, ttt_error *err) {
    int dev = 0;
    TTT_TRY(ttt_device_cuda_error((int)cudaGetDevice(&dev), ttt_device_cuda(0), err,
                                  "cudaGetDevice"));
    if (dev < 0 || dev >= TTT_MAX_CUDA_DEVICES)
        return ttt_error_set(err, TTT_ERR_DEVICE, "cuda:%d: beyond the %d devices ttt supports",
                             dev, TTT_MAX_CUDA_DEVICES);
    const blas_api &b = api();
    if (!b.create) {
        char d[32];
        return ttt_error_set(err, TTT_ERR_DEVICE, "cuBLAS for the device ops on %s: %s",
                             ttt_device_name(ttt_device_cuda(dev), d, sizeof d), b.why);
    }
    cublasHandle_t &h = handles[dev];
    cublasStatus_t s;
    if (!h) {
        if ((s = b.create(&h)) != CUBLAS_STATUS_SUCCESS) {
            h = nullptr;
            return blas_error(s, dev, err, "cublasCreate", 0, 0, 0, 0);
        }
        (void)b.set_math_mode(h, CUBLAS_PEDANTIC_MATH);
    }
    if ((s = b.set_stream(h, (cudaStream_t)stream)) != CUBLAS_STATUS_SUCCESS)
        return blas_error(s, dev, err, "cublasSetStream", 0, 0, 0, 0);
    *out = h;
    *dev_out = dev;
    return TTT_OK;
}

/* C = beta·C for an empty inner dimension (cuBLAS is not asked about one); beta = 0 writes
 * zeros without reading C, which may hold garbage (BLAS's rule). */
ttt_status empty_inner(float *c, float beta, long long sc, int m, int n, int batch, void *stream,
                       ttt_error *err) {
    for (int i = 0; i < batch; i++) {
        float *ci = c + i * sc;
        if (beta == 0.0f)
            TTT_TRY(ttt_cuda_map(TTT_MAP_BCAST, ci, 0, nullptr, nullptr, 0, nullptr, 1,
                                 (size_t)m * n, 0.0f, 0.0f, stream, err));
        else
            TTT_TRY(ttt_cuda_map(TTT_MAP_SCALE, ci, 0, ci, nullptr, 0, nullptr, 1, (size_t)m * n,
                                 beta, 0.0f, stream, err));
    }
    return TTT_OK;
}

/* bfloat16 of x rounded to nearest, ties to even: bf16.h's ttt_bf16_from_float, the same
 * operations (tests/test_bf16.c checks the host's rounding, tests/test_train_bf16.c this kernel
 * against it bit for bit); a NaN stays a NaN (quiet, its sign kept). */
__device__ inline uint16_t to_bf16(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__global__ void to_bf16_kernel(uint16_t *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = to_bf16(x[i]);
}

__global__ void from_bf16_kernel(float *y, int add, const uint16_t *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float v = __uint_as_float((uint32_t)x[i] << 16);
        y[i] = add ? y[i] + v : v;
    }
}

} // namespace

extern "C" ttt_status ttt_cuda_sgemm(float *c, float alpha, const float *a, int ta, int lda,
                                     long long sa, const float *b, int tb, int ldb, long long sb,
                                     float beta, long long sc, int m, int n, int k, int batch,
                                     void *stream, ttt_error *err) {
    if (m == 0 || n == 0 || batch == 0) return TTT_OK;
    cublasHandle_t h;
    int dev;
    TTT_TRY(handle_for(stream, &h, &dev, err));
    cublasStatus_t s;
    if (k == 0) return empty_inner(c, beta, sc, m, n, batch, stream, err);
    const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int la = lda > 1 ? lda : 1, lb = ldb > 1 ? ldb : 1;
    if (batch == 1)
        s = api().sgemm(h, ob, oa, n, m, k, &alpha, b, lb, a, la, &beta, c, n);
    else
        s = api().sgemm_strided_batched(h, ob, oa, n, m, k, &alpha, b, lb, sb, a, la, sa, &beta,
                                        c, n, sc, batch);
    if (s != CUBLAS_STATUS_SUCCESS)
        return blas_error(s, dev, err, batch == 1 ? "cublasSgemm" : "cublasSgemmStridedBatched",
                          m, n, k, batch);
    return TTT_OK;
}

/* The bf16 product of mixed precision (docs/gpu.md "bfloat16 training"): A and B bfloat16, C
 * fp32, CUBLAS_COMPUTE_32F: every product of two bf16 values is exact in fp32 and the sums are
 * fp32, so the result is the fp32 product of the rounded operands. The handle's math mode is
 * CUBLAS_DEFAULT_MATH for the call (the tensor cores; PEDANTIC would keep them off) and goes back
 * to PEDANTIC for the fp32 products after it; neither mode turns fp32 operands into TF32. */
extern "C" ttt_status ttt_cuda_gemm_bf16(float *c, float alpha, const uint16_t *a, int ta,
                                         int lda, long long sa, const uint16_t *b, int tb,
                                         int ldb, long long sb, float beta, long long sc, int m,
                                         int n, int k, int batch, void *stream, ttt_error *err) {
    if (m == 0 || n == 0 || batch == 0) return TTT_OK;
    cublasHandle_t h;
    int dev;
    TTT_TRY(handle_for(stream, &h, &dev, err));
    if (k == 0) return empty_inner(c, beta, sc, m, n, batch, stream, err);
    const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int la = lda > 1 ? lda : 1, lb = ldb > 1 ? ldb : 1;
    const blas_api &x = api();
    (void)x.set_math_mode(h, CUBLAS_DEFAULT_MATH);
    cublasStatus_t s;
    if (batch == 1)
        s = x.gemm_ex(h, ob, oa, n, m, k, &alpha, b, CUDA_R_16BF, lb, a, CUDA_R_16BF, la, &beta,
                      c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else
        s = x.gemm_strided_batched_ex(h, ob, oa, n, m, k, &alpha, b, CUDA_R_16BF, lb, sb, a,
                                      CUDA_R_16BF, la, sa, &beta, c, CUDA_R_32F, n, sc, batch,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    (void)x.set_math_mode(h, CUBLAS_PEDANTIC_MATH);
    if (s != CUBLAS_STATUS_SUCCESS)
        return blas_error(s, dev, err,
                          batch == 1 ? "cublasGemmEx (bf16)" : "cublasGemmStridedBatchedEx (bf16)",
                          m, n, k, batch);
    return TTT_OK;
}

extern "C" ttt_status ttt_cuda_to_bf16(uint16_t *y, const float *x, size_t n, void *stream,
                                       ttt_error *err) {
    if (n == 0) return TTT_OK;
    to_bf16_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(y, x, n);
    return launched("to_bf16_kernel", n, err);
}

extern "C" ttt_status ttt_cuda_from_bf16(float *y, int add, const uint16_t *x, size_t n,
                                         void *stream, ttt_error *err) {
    if (n == 0) return TTT_OK;
    from_bf16_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(y, add, x, n);
    return launched("from_bf16_kernel", n, err);
}

/* Row-major L·X = B (trans = 0) or Lᵀ·X = B (trans = 1) for lower-triangular L (n, n), X (n, m)
 * overwriting B. Read column-major, the stored L is the upper-triangular Lᵀ and X is Xᵀ, so the
 * solve is Xᵀ·op(Lᵀ) = Bᵀ from the right: op = N for L·X = B, T for Lᵀ·X = B. */
extern "C" ttt_status ttt_cuda_strsm_lower(float *x, const float *L, int n, int m, int trans,
                                           int unit, void *stream, ttt_error *err) {
    if (n == 0 || m == 0) return TTT_OK;
    cublasHandle_t h;
    int dev;
    TTT_TRY(handle_for(stream, &h, &dev, err));
    const float one = 1.0f;
    const cublasStatus_t s =
        api().strsm(h, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER, trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                    unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT, m, n, &one, L, n, x, m);
    if (s != CUBLAS_STATUS_SUCCESS) return blas_error(s, dev, err, "cublasStrsm", n, m, n, 1);
    return TTT_OK;
}
