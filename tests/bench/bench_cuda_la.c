/* Times of the CUDA linear-attention kernels (layers/forms/linear_attention/chunkwise.cu) with
 * CUDA events: forward, backward and their sum per call, median of the repetitions after two
 * warm-up calls, for the shapes of docs/gpu.md "Linear attention kernels". Prints a table. bf16
 * rows are timed twice: with the fastest kernels (the tensor-core kernels where the shape allows)
 * and with the fp32 reference kernels (ttt_chunk_args.reference), side by side in one run.
 *     bench_cuda_la [reps [shape index]]  */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "chunk_cuda.h"

typedef struct shape {
    int B, T, H, dk, dv, gate; /* gate: 0 none, 1 per token, 2 per key */
    ttt_chunk_dtype dtype;
} shape;

static const shape shapes[] = {
    {8, 4096, 16, 128, 128, 2, TTT_CHUNK_BF16}, {8, 4096, 16, 128, 128, 1, TTT_CHUNK_BF16},
    {8, 4096, 16, 128, 128, 0, TTT_CHUNK_BF16}, {8, 4096, 16, 128, 128, 2, TTT_CHUNK_F32},
    {1, 4096, 4, 64, 64, 2, TTT_CHUNK_BF16},
};

static uint64_t rs = 88172645463325252ull;
static float rnd(void) { /* uniform in [−1, 1) */
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static int ok(cudaError_t e, const char *what) {
    if (e != cudaSuccess) fprintf(stderr, "bench_cuda_la: %s: %s\n", what, cudaGetErrorString(e));
    return e == cudaSuccess;
}

/* A device buffer of n elements (bf16 when half) filled with scale·U[−1,1) + shift: one block
 * of 2^22 random values repeated (the values only need to be finite and of a realistic size). */
static void *fill(size_t n, int half, float scale, float shift) {
    void *d = NULL;
    if (!ok(cudaMalloc(&d, n * (half ? 2 : 4)), "cudaMalloc")) return NULL;
    const size_t blk = (size_t)1 << 22;
    void *h = malloc(blk * 4);
    for (size_t i = 0; i < blk; i++) {
        const float x = scale * rnd() + shift;
        if (half) {
            uint32_t u;
            memcpy(&u, &x, 4);
            ((uint16_t *)h)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        } else {
            ((float *)h)[i] = x;
        }
    }
    for (size_t o = 0; o < n; o += blk) {
        const size_t m = n - o < blk ? n - o : blk;
        cudaMemcpy((char *)d + o * (half ? 2 : 4), h, m * (half ? 2 : 4), cudaMemcpyHostToDevice);
    }
    free(h);
    return d;
}

static int cmpf(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    const int only = argc > 2 ? atoi(argv[2]) : -1;
    if (reps < 1) reps = 1;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("bench_cuda_la: no CUDA device\n");
        return 1;
    }
    printf("| B | T | H | d_k | d_v | gate | dtype | kernels | forward ms | backward ms | fwd+bwd "
           "ms |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (only >= 0 && (size_t)only != s) continue;
        const shape *sh = &shapes[s];
        const int half = sh->dtype == TTT_CHUNK_BF16;
        const size_t rows = (size_t)sh->B * sh->T * sh->H, nq = rows * sh->dk, nv = rows * sh->dv;
        const size_t ns = (size_t)sh->B * sh->H * sh->dk * sh->dv;
        const size_t ng = sh->gate == 2 ? nq : rows;
        ttt_chunk_args a;
        memset(&a, 0, sizeof a);
        a.B = sh->B, a.T = sh->T, a.H = sh->H, a.d_k = sh->dk, a.d_v = sh->dv;
        a.dtype = sh->dtype;
        a.q = fill(nq, half, 1.0f, 0.0f);
        a.k = fill(nq, half, 0.1f, 0.0f);
        a.v = fill(nv, half, 1.0f, 0.0f);
        a.beta = fill(rows, 0, 0.5f, 0.5f);
        a.g = sh->gate ? fill(ng, 0, 0.05f, -0.06f) : NULL;
        a.gate_per_key = sh->gate == 2;
        a.scale = 0.088f;
        a.h0 = fill(ns, 0, 1.0f, 0.0f);
        a.o = fill(nv, half, 0.0f, 0.0f);
        a.ht = fill(ns, 0, 0.0f, 0.0f);
        ttt_chunk_grad g;
        memset(&g, 0, sizeof g);
        g.d_o = fill(nv, half, 1.0f, 0.0f);
        g.d_ht = fill(ns, 0, 1.0f, 0.0f);
        g.d_q = fill(nq, half, 0.0f, 0.0f);
        g.d_k = fill(nq, half, 0.0f, 0.0f);
        g.d_v = fill(nv, half, 0.0f, 0.0f);
        g.d_beta = fill(rows, 0, 0.0f, 0.0f);
        g.d_g = sh->gate ? fill(ng, 0, 0.0f, 0.0f) : NULL;
        g.d_h0 = fill(ns, 0, 0.0f, 0.0f);
        /* the fastest kernels' workspace is the larger one (it adds the tensor-core splits) */
        const size_t wf0 = ttt_cuda_la_workspace(&a, 0), wb0 = ttt_cuda_la_workspace(&a, 1);
        void *ws = NULL;
        if (!ok(cudaMalloc(&ws, wf0 > wb0 ? wf0 : wb0), "workspace")) return 1;
        cudaEvent_t e0, e1, e2;
        cudaEventCreate(&e0), cudaEventCreate(&e1), cudaEventCreate(&e2);
        float *tf = malloc(sizeof(float) * (size_t)reps), *tb = malloc(sizeof(float) * (size_t)reps);
        ttt_error err;
        for (int ref = 0; ref <= half; ref++) {
            a.reference = ref;
            const size_t wf = ttt_cuda_la_workspace(&a, 0), wb = ttt_cuda_la_workspace(&a, 1);
            for (int r = -2; r < reps; r++) {
                cudaEventRecord(e0, NULL);
                ttt_status st = ttt_cuda_la_forward(&a, ws, wf, NULL, &err);
                cudaEventRecord(e1, NULL);
                if (st == TTT_OK) st = ttt_cuda_la_backward(&a, &g, ws, wb, NULL, &err);
                cudaEventRecord(e2, NULL);
                if (st != TTT_OK) {
                    fprintf(stderr, "bench_cuda_la: %s\n", err.msg);
                    return 1;
                }
                if (!ok(cudaEventSynchronize(e2), "run")) return 1;
                if (r >= 0) {
                    cudaEventElapsedTime(&tf[r], e0, e1);
                    cudaEventElapsedTime(&tb[r], e1, e2);
                }
            }
            qsort(tf, (size_t)reps, sizeof *tf, cmpf);
            qsort(tb, (size_t)reps, sizeof *tb, cmpf);
            const char *gn[] = {"none", "per token", "per key"};
            printf("| %d | %d | %d | %d | %d | %s | %s | %s | %.3f | %.3f | %.3f |\n", sh->B, sh->T,
                   sh->H, sh->dk, sh->dv, gn[sh->gate], half ? "bf16" : "fp32",
                   ref || !half ? "reference" : "fastest", tf[reps / 2], tb[reps / 2],
                   tf[reps / 2] + tb[reps / 2]);
            fflush(stdout);
        }
        a.reference = 0;
        free(tf), free(tb);
        cudaFree(ws);
        cudaFree((void *)a.q), cudaFree((void *)a.k), cudaFree((void *)a.v);
        cudaFree((void *)a.beta), cudaFree((void *)a.g), cudaFree((void *)a.h0), cudaFree(a.o);
        cudaFree(a.ht), cudaFree((void *)g.d_o), cudaFree((void *)g.d_ht), cudaFree(g.d_q);
        cudaFree(g.d_k), cudaFree(g.d_v), cudaFree(g.d_beta), cudaFree(g.d_g), cudaFree(g.d_h0);
        cudaEventDestroy(e0), cudaEventDestroy(e1), cudaEventDestroy(e2);
    }
    return 0;
}
