/* Times of the CUDA chunk kernels (docs/gpu.md): the delta rule and the gated delta rule,
 * forward and forward + backward, bf16 and fp32, at the shapes (B, T, H, D) of the comparison
 * with FLA. Prints one table row per (shape, dtype, rule, kernels): the median of 20 timed calls
 * (CUDA events on one stream, after 3 untimed calls), in milliseconds. bf16 rows are timed twice:
 * with the fastest kernels (the tensor-core forward) and with the reference kernels
 * (ttt_chunk_args.reference), side by side in one run.
 *
 *   bench_cuda_chunk [reps [shapes [first]]]   (shapes: how many of the four, from the first-th
 *                                              (0-based, default 0); default all)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TTT_HAVE_CUDA
#include <cuda_runtime.h>

#include "chunk_cuda.h"

#define CK(call)                                                                             \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
                    cudaGetErrorString(e_));                                                 \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static uint64_t rs = 12345;
static float frand(void) { /* xorshift → [-1, 1) */
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 40) * (2.0 / 16777216.0) - 1.0);
}

/* device buffer of n values: fp32 or bf16 (the top half of the fp32 bits, rounded) */
static void *dev_random(size_t n, int bf16, float lo, float hi) {
    size_t es = bf16 ? 2 : 4;
    void *h = malloc(n * es), *d = NULL;
    if (!h) exit(1);
    for (size_t i = 0; i < n; i++) {
        float x = lo + (hi - lo) * 0.5f * (frand() + 1.f);
        if (bf16) {
            uint32_t u;
            memcpy(&u, &x, 4);
            u += 0x7fffu + ((u >> 16) & 1u);
            ((uint16_t *)h)[i] = (uint16_t)(u >> 16);
        } else {
            ((float *)h)[i] = x;
        }
    }
    CK(cudaMalloc(&d, n * es));
    CK(cudaMemcpy(d, h, n * es, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median_ms(ttt_chunk_args *a, ttt_chunk_grad *g, void *ws, size_t wf, size_t wb,
                       int reps, cudaEvent_t e0, cudaEvent_t e1) {
    float t[64];
    ttt_error err;
    for (int r = -3; r < reps; r++) {
        CK(cudaEventRecord(e0, 0));
        if (ttt_cuda_delta_forward(a, ws, wf, NULL, &err) != TTT_OK) {
            fprintf(stderr, "forward: %s\n", err.msg);
            exit(1);
        }
        if (g && ttt_cuda_delta_backward(a, g, ws, wb, NULL, &err) != TTT_OK) {
            fprintf(stderr, "backward: %s\n", err.msg);
            exit(1);
        }
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        if (r >= 0) CK(cudaEventElapsedTime(&t[r], e0, e1));
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_f);
    return t[reps / 2];
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1 || reps > 64) reps = 20;
    size_t nshapes = argc > 2 ? (size_t)atoi(argv[2]) : 4;
    size_t first = argc > 3 ? (size_t)atoi(argv[3]) : 0;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device\n");
        return 1;
    }
    static const int shapes[][4] = {
        {1, 4096, 8, 128}, {8, 4096, 16, 128}, {8, 4096, 32, 128}, {1, 32768, 16, 128}};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("| B | T | H | D | dtype | rule | kernels | forward ms | forward+backward ms |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (size_t si = first; si < sizeof shapes / sizeof shapes[0] && si < first + nshapes; si++) {
        int B = shapes[si][0], T = shapes[si][1], H = shapes[si][2], D = shapes[si][3];
        size_t n = (size_t)B * T * H, ns = (size_t)B * H * D * D;
        for (int bf16 = 1; bf16 >= 0; bf16--) {
            size_t es = bf16 ? 2 : 4;
            ttt_chunk_args a;
            memset(&a, 0, sizeof a);
            a.B = B;
            a.T = T;
            a.H = H;
            a.d_k = D;
            a.d_v = D;
            a.dtype = bf16 ? TTT_CHUNK_BF16 : TTT_CHUNK_F32;
            a.scale = 0.08838834764831845f;
            /* keys of norm ≈ 1 (uniform entries of size √(3/D)), β ∈ (0, 1), g ∈ (−0.1, 0) */
            a.q = dev_random(n * D, bf16, -1, 1);
            a.k = dev_random(n * D, bf16, -0.153f, 0.153f);
            a.v = dev_random(n * D, bf16, -1, 1);
            float *beta = dev_random(n, 0, 0, 1), *gg = dev_random(n, 0, -0.1f, 0);
            a.h0 = dev_random(ns, 0, -0.1f, 0.1f);
            CK(cudaMalloc(&a.o, n * D * es));
            CK(cudaMalloc((void **)&a.ht, ns * 4));
            ttt_chunk_grad g;
            memset(&g, 0, sizeof g);
            g.d_o = dev_random(n * D, bf16, -1, 1);
            CK(cudaMalloc(&g.d_q, n * D * es));
            CK(cudaMalloc(&g.d_k, n * D * es));
            CK(cudaMalloc(&g.d_v, n * D * es));
            CK(cudaMalloc((void **)&g.d_beta, n * 4));
            CK(cudaMalloc((void **)&g.d_g, n * 4));
            CK(cudaMalloc((void **)&g.d_h0, ns * 4));
            for (int gated = 1; gated >= 0; gated--) {
                a.beta = beta;
                a.g = gated ? gg : NULL;
                ttt_chunk_grad gr = g;
                if (!gated) gr.d_g = NULL;
                size_t wf = ttt_cuda_delta_workspace(&a, 0), wb = ttt_cuda_delta_workspace(&a, 1);
                void *ws = NULL, *kept = NULL;
                CK(cudaMalloc(&ws, wb));
                for (int ref = 0; ref <= bf16; ref++) {
                    a.reference = ref;
                    float f = median_ms(&a, NULL, ws, wf, wb, reps, e0, e1);
                    float fb = median_ms(&a, &gr, ws, wf, wb, reps, e0, e1);
                    printf("| %d | %d | %d | %d | %s | %s | %s | %.3f | %.3f |\n", B, T, H, D,
                           bf16 ? "bf16" : "fp32", gated ? "gated delta" : "delta",
                           ref || !bf16 ? "reference" : "fastest", f, fb);
                    fflush(stdout);
                }
                a.reference = 0;
                /* the fastest kernels again with a kept forward (docs/gpu.md "Kept forward"):
                 * the forward stores what the backward reads, the backward skips recomputing it */
                CK(cudaMalloc(&kept, ttt_cuda_delta_kept_bytes(&a)));
                a.kept = kept;
                {
                    float f = median_ms(&a, NULL, ws, 0, 0, reps, e0, e1);
                    float fb = median_ms(&a, &gr, ws, 0, ttt_cuda_delta_workspace(&a, 2), reps,
                                         e0, e1);
                    printf("| %d | %d | %d | %d | %s | %s | %s | %.3f | %.3f |\n", B, T, H, D,
                           bf16 ? "bf16" : "fp32", gated ? "gated delta" : "delta",
                           bf16 ? "fastest, kept forward" : "reference, kept forward", f, fb);
                    fflush(stdout);
                }
                a.kept = NULL;
                CK(cudaFree(kept));
                CK(cudaFree(ws));
            }
            void *ptrs[] = {(void *)a.q, (void *)a.k, (void *)a.v, beta, gg, (void *)a.h0,
                            a.o, a.ht, (void *)g.d_o, g.d_q, g.d_k, g.d_v, g.d_beta, g.d_g,
                            g.d_h0};
            for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) CK(cudaFree(ptrs[i]));
        }
    }
    return 0;
}

#else

int main(void) {
    printf("built without CUDA\n");
    return 1;
}

#endif
