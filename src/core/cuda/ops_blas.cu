/* Matrix products of the device ops through cuBLAS (cuda_kernels.h, docs/device_ops.md).
 *
 * cuBLAS is column-major; a row-major matrix read column-major is its transpose, so the
 * row-major C = op(A)·op(B) is computed as the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: the operands
 * swap places and keep their transpose flags and leading dimensions (the stored row lengths).
 * One handle per device and thread (cuBLAS handles are not to be shared between threads that
 * run concurrently), made on first use and bound to the call's stream before every call. The
 * math mode is CUBLAS_PEDANTIC_MATH: plain fp32 products, never TF32, so that the device ops
 * keep the accuracy the CPU ops have (tests/test_backend_ops.c bounds the difference with an
 * fp32 error model). */
#include <cublas_v2.h>

#include "ops_common.cuh"

namespace {

using namespace ttt_ops;

thread_local cublasHandle_t handles[TTT_MAX_CUDA_DEVICES];

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

} // namespace

extern "C" ttt_status ttt_cuda_sgemm(float *c, float alpha, const float *a, int ta, int lda,
                                     long long sa, const float *b, int tb, int ldb, long long sb,
                                     float beta, long long sc, int m, int n, int k, int batch,
                                     void *stream, ttt_error *err) {
    if (m == 0 || n == 0 || batch == 0) return TTT_OK;
    int dev = 0;
    TTT_TRY(ttt_device_cuda_error((int)cudaGetDevice(&dev), ttt_device_cuda(0), err,
                                  "cudaGetDevice"));
    if (dev < 0 || dev >= TTT_MAX_CUDA_DEVICES)
        return ttt_error_set(err, TTT_ERR_DEVICE, "cuda:%d: beyond the %d devices ttt supports",
                             dev, TTT_MAX_CUDA_DEVICES);
    cublasHandle_t &h = handles[dev];
    cublasStatus_t s;
    if (!h) {
        if ((s = cublasCreate(&h)) != CUBLAS_STATUS_SUCCESS) {
            h = nullptr;
            return blas_error(s, dev, err, "cublasCreate", m, n, k, batch);
        }
        (void)cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
    }
    if ((s = cublasSetStream(h, (cudaStream_t)stream)) != CUBLAS_STATUS_SUCCESS)
        return blas_error(s, dev, err, "cublasSetStream", m, n, k, batch);
    if (k == 0) { /* C = beta·C (cuBLAS is not asked about an empty inner dimension) */
        for (int i = 0; i < batch; i++)
            TTT_TRY(ttt_cuda_map(TTT_MAP_SCALE, c + i * sc, 0, c + i * sc, nullptr, 0, nullptr, 1,
                                 (size_t)m * n, beta, 0.0f, stream, err));
        return TTT_OK;
    }
    const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int la = lda > 1 ? lda : 1, lb = ldb > 1 ? ldb : 1;
    if (batch == 1)
        s = cublasSgemm(h, ob, oa, n, m, k, &alpha, b, lb, a, la, &beta, c, n);
    else
        s = cublasSgemmStridedBatched(h, ob, oa, n, m, k, &alpha, b, lb, sb, a, la, sa, &beta, c,
                                      n, sc, batch);
    if (s != CUBLAS_STATUS_SUCCESS)
        return blas_error(s, dev, err, batch == 1 ? "cublasSgemm" : "cublasSgemmStridedBatched",
                          m, n, k, batch);
    return TTT_OK;
}
