/* The CUDA chunk kernels of the linear-attention and delta-rule families, C-shaped (docs/gpu.md).
 *
 * Every call computes all B·H sequences of a (B, T, H, D) batch in one set of launches on the
 * caller's stream; every pointer is device memory (the device seam, src/core/device.h, checks
 * where buffers live before calling). Implemented in layers/forms/linear_attention/chunkwise.cu
 * and layers/forms/delta_rule/chunkwise.cu; built only with TTT_HAVE_CUDA.
 *
 * The recurrences (docs/math.md §5; S is (d_k, d_v), fp32, per sequence and head):
 *   linear attention  S_t = diag(e^{g_t}) S_{t−1} + β_t k_t v_tᵀ     (g_t scalar, or per key)
 *   delta rule        S_t = e^{g_t} (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ   (g_t scalar)
 *   output            o_t = scale · S_tᵀ q_t
 * with S_0 = h0 (or 0) and ht = S_T. A missing g means g = 0, a missing β means β = 1. */
#ifndef TTT_CHUNK_CUDA_H
#define TTT_CHUNK_CUDA_H

#include <stddef.h>

#include <ttt/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of q, k, v, o and their gradients. β, g and states are always fp32. */
typedef enum ttt_chunk_dtype {
    TTT_CHUNK_F32 = 0,
    TTT_CHUNK_BF16 = 1,
} ttt_chunk_dtype;

/* The most d_k or d_v the kernels take. */
#define TTT_CHUNK_MAX_D 256

typedef struct ttt_chunk_args {
    int B, T, H, d_k, d_v;  /* T ≥ 1, any value; 1 ≤ d_k, d_v ≤ TTT_CHUNK_MAX_D */
    ttt_chunk_dtype dtype;
    const void *q, *k;      /* (B, T, H, d_k), rows contiguous */
    const void *v;          /* (B, T, H, d_v) */
    const float *beta;      /* (B, T, H), or NULL (= 1) */
    const float *g;         /* (B, T, H), or with gate_per_key (B, T, H, d_k); log gates, −inf
                             * allowed (a hard reset); or NULL (= 0) */
    int gate_per_key;       /* linear attention only */
    float scale;
    const float *h0;        /* (B, H, d_k, d_v), or NULL (= 0) */
    void *o;                /* (B, T, H, d_v) written, of dtype */
    float *ht;              /* (B, H, d_k, d_v) written, or NULL */
    int reference;          /* 1: the plain fp32 kernels only, never the tensor-core ones (the
                             * fast kernels' reference twin, docs/gpu.md); 0: the fastest */
    void *kept;             /* delta rule: NULL, or ttt_cuda_delta_kept_bytes(a) bytes, 256-byte
                             * aligned, where a forward stores what its backward would recompute
                             * and a backward with the same arguments reads it (docs/gpu.md
                             * "Kept forward"); the linear-attention kernels ignore it */
} ttt_chunk_args;

/* Gradients of L = Σ d_o ⊙ o + Σ d_ht ⊙ ht. Every output may be NULL (not wanted); outputs are
 * overwritten, never accumulated. d_beta needs a.beta, d_g needs a.g (and has g's shape). */
typedef struct ttt_chunk_grad {
    const void *d_o;        /* (B, T, H, d_v), of dtype */
    const float *d_ht;      /* (B, H, d_k, d_v), or NULL (= 0) */
    void *d_q, *d_k;        /* (B, T, H, d_k), of dtype */
    void *d_v;              /* (B, T, H, d_v), of dtype */
    float *d_beta;          /* (B, T, H) */
    float *d_g;             /* like a.g */
    float *d_h0;            /* (B, H, d_k, d_v) */
} ttt_chunk_grad;

/* Device scratch (bytes) the forward (backward = 0) or the backward (backward = 1) needs for a;
 * the caller passes at least that much, 256-byte aligned. The delta rule with a->kept: a
 * forward needs none, and backward = 2 gives the backward's (the kept part is not recomputed). */
size_t ttt_cuda_la_workspace(const ttt_chunk_args *a, int backward);
size_t ttt_cuda_delta_workspace(const ttt_chunk_args *a, int backward);

/* Kept forward (docs/gpu.md "Kept forward"): the bytes of a->kept, what the backward reads of
 * the forward (the prep kernel's fp32 and split matrices, the chunk-start states, U). A forward
 * with a->kept stores them there on its way; a backward with the same arguments and a->kept then
 * skips recomputing them. A kept forward serves one backward, which overwrites part of it. */
size_t ttt_cuda_delta_kept_bytes(const ttt_chunk_args *a);

/* Forward and backward on `stream` (a cudaStream_t; NULL = the default stream). They return
 * TTT_ERR_ARG for arguments out of range and TTT_ERR_DEVICE when a launch fails, with the
 * failing call named in err; they never abort. The delta rule's backward recomputes the forward
 * and writes o and ht on the way when a->o (a->ht) is given, so that it needs no forward call
 * before it (ttt_cuda_kernels.backward_writes_outputs); the linear-attention backward does not
 * write them. */
ttt_status ttt_cuda_la_forward(const ttt_chunk_args *a, void *workspace, size_t ws_bytes,
                               void *stream, ttt_error *err);
ttt_status ttt_cuda_la_backward(const ttt_chunk_args *a, const ttt_chunk_grad *g,
                                void *workspace, size_t ws_bytes, void *stream, ttt_error *err);
ttt_status ttt_cuda_delta_forward(const ttt_chunk_args *a, void *workspace, size_t ws_bytes,
                                  void *stream, ttt_error *err);
ttt_status ttt_cuda_delta_backward(const ttt_chunk_args *a, const ttt_chunk_grad *g,
                                   void *workspace, size_t ws_bytes, void *stream,
                                   ttt_error *err);

#ifdef __cplusplus
}
#endif

#endif
