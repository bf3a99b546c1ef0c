/* Element-wise maps of the device ops (cuda_kernels.h "Element-wise maps", docs/device_ops.md):
 * every element-wise op of ops.h and every element-wise step of a backward is one launch of
 * map_kernel with an op code. The activations follow src/core/ops.c's formulas (σ from
 * e^(−|x|) so that neither σ nor 1 − σ cancels, gelu as x·σ(2u) with the same clamp in its
 * derivatives), with CUDA's expf/logf (≤ 2 ulp) in place of the host's polynomial exp, so that
 * results agree with the CPU op to a few ulp (tests/test_backend_ops.c bounds the difference). */
#include "ops_common.cuh"

#include <math.h>

namespace {

using namespace ttt_ops;

__device__ inline float sig(float x) {
    if (isnan(x)) return x;
    const float e = expf(-fabsf(x)), s = 1.0f / (1.0f + e);
    return x >= 0.0f ? s : e * s;
}
__device__ inline float sigc(float x) { /* 1 − σ(x) */
    if (isnan(x)) return x;
    const float e = expf(-fabsf(x)), s = 1.0f / (1.0f + e);
    return x >= 0.0f ? e * s : s;
}

constexpr float kGeluC = 0.7978845608028654f, kGeluA = 0.044715f;

__device__ inline float gelu(float x) {
    const float u = kGeluC * (x + kGeluA * x * x * x);
    return x * sig(2.0f * u);
}
__device__ inline float gelu_d(float x) {
    const float xc = fminf(fmaxf(x, -30.0f), 30.0f);
    const float u = kGeluC * (xc + kGeluA * xc * xc * xc);
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * xc * xc);
    const float s = sig(2.0f * u), sc = sigc(2.0f * u);
    return s + 2.0f * xc * s * sc * du;
}
__device__ inline float gelu_d2(float x) {
    const float xc = fminf(fmaxf(x, -30.0f), 30.0f);
    const float u = kGeluC * (xc + kGeluA * xc * xc * xc);
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * xc * xc);
    const float ddu = kGeluC * 6.0f * kGeluA * xc;
    const float s = sig(2.0f * u), sc = sigc(2.0f * u);
    return s * sc * (4.0f * du + 4.0f * xc * (sc - s) * du * du + 2.0f * xc * ddu);
}
__device__ inline float sgn(float x) { return (float)((x > 0.0f) - (x < 0.0f)); }

__device__ inline float f(int op, float a, float b, float c, float p0, float p1) {
    switch (op) {
    case TTT_MAP_ADD: return a + b;
    case TTT_MAP_SUB: return a - b;
    case TTT_MAP_MUL: return a * b;
    case TTT_MAP_DIV: return a / b;
    case TTT_MAP_SAFE_DIV: return b == 0.0f ? 0.0f : a / b;
    case TTT_MAP_AXPBY: return p0 * a + p1 * b;
    case TTT_MAP_SCALE: return p0 * a;
    case TTT_MAP_ADD_SCALAR: return a + p0;
    case TTT_MAP_BCAST: return p0 * b;
    case TTT_MAP_MAX: return fmaxf(a, b);
    case TTT_MAP_MIN: return fminf(a, b);
    case TTT_MAP_NEG: return -a;
    case TTT_MAP_EXP: return expf(a);
    case TTT_MAP_LOG: return logf(a);
    case TTT_MAP_SQRT: return sqrtf(a);
    case TTT_MAP_SQUARE: return a * a;
    case TTT_MAP_SIGMOID: return sig(a);
    case TTT_MAP_SILU: return a * sig(a);
    case TTT_MAP_GELU: return gelu(a);
    case TTT_MAP_SOFTPLUS: return fmaxf(a, 0.0f) + log1pf(expf(-fabsf(a)));
    case TTT_MAP_ELU1: return a > 0.0f ? a + 1.0f : expf(a);
    case TTT_MAP_RELU: return a > 0.0f ? a : 0.0f;
    case TTT_MAP_SILU_GRAD: return sig(a) * (1.0f + a * sigc(a));
    case TTT_MAP_GELU_GRAD: return gelu_d(a);
    case TTT_MAP_SIGN: return sgn(a);
    case TTT_MAP_ABS: return fabsf(a);
    case TTT_MAP_CLAMP: return fminf(fmaxf(a, p0), p1);
    case TTT_MAP_POW: return powf(a, p0);
    case TTT_MAP_D_EXP: return a * expf(c);
    case TTT_MAP_D_LOG: return a * (1.0f / c);
    case TTT_MAP_D_SQRT: return a * (0.5f / sqrtf(c));
    case TTT_MAP_D_SQUARE: return a * (2.0f * c);
    case TTT_MAP_D_SIGMOID: return a * (sig(c) * sigc(c));
    case TTT_MAP_D_SILU: return a * (sig(c) * (1.0f + c * sigc(c)));
    case TTT_MAP_D_GELU: return a * gelu_d(c);
    case TTT_MAP_D_SOFTPLUS: return a * sig(c);
    case TTT_MAP_D_ELU1: return a * (c > 0.0f ? 1.0f : expf(c));
    case TTT_MAP_D_RELU: return a * (c > 0.0f ? 1.0f : 0.0f);
    case TTT_MAP_D_SILU_GRAD: return a * (sig(c) * sigc(c) * (2.0f + c * (sigc(c) - sig(c))));
    case TTT_MAP_D_GELU_GRAD: return a * gelu_d2(c);
    case TTT_MAP_D_ABS: return a * sgn(c);
    case TTT_MAP_D_CLAMP: return c >= p0 && c <= p1 ? a : 0.0f;
    case TTT_MAP_D_POW: return p0 == 0.0f ? 0.0f : a * p0 * powf(c, p0 - 1.0f);
    case TTT_MAP_D_DIV_B: return -a * c / (b * b);
    case TTT_MAP_D_EXT_A: {
        const float w = b == c ? 0.5f : ((b > c) == (p0 != 0.0f) ? 1.0f : 0.0f);
        return w * a;
    }
    case TTT_MAP_D_EXT_B: {
        const float w = b == c ? 0.5f : ((b > c) == (p0 != 0.0f) ? 1.0f : 0.0f);
        return (1.0f - w) * a;
    }
    default: return nanf("");
    }
}

__global__ void map_kernel(int op, float *y, int add, const float *a, const float *b, int bmode,
                           const float *c, size_t cols, size_t n, float p0, float p1) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float bv = 0.0f;
        if (b) {
            switch (bmode) {
            case TTT_B_SAME: bv = b[i]; break;
            case TTT_B_SCALAR: bv = b[0]; break;
            case TTT_B_ROW: bv = b[i % cols]; break;
            default: bv = b[i / cols]; break;
            }
        }
        const float v = f(op, a ? a[i] : 0.0f, bv, c ? c[i] : 0.0f, p0, p1);
        y[i] = add ? y[i] + v : v;
    }
}

} // namespace

extern "C" ttt_status ttt_cuda_map(int op, float *y, int add, const float *a, const float *b,
                                   int bmode, const float *c, size_t cols, size_t n, float p0,
                                   float p1, void *stream, ttt_error *err) {
    if (n == 0) return TTT_OK;
    if (cols == 0) cols = 1;
    map_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(op, y, add, a, b, bmode, c,
                                                                      cols, n, p0, p1);
    return launched("map_kernel", n, err);
}
