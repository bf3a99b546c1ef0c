/* Times of causal softmax attention on a CUDA device: the fused op (ttt_attention_causal,
 * src/core/cuda/ops_attention.cu, docs/device_ops.md "Fused causal attention") against the
 * unfused device ops that compute the same thing (matmul, scale, causal_fill, softmax_rows,
 * matmul), forward alone and forward + backward, for D = 64 and T = 512 … 2048 with 8 and 64
 * heads (one sequence per head). Each time is the median of the repetitions after two warm-up
 * calls, measured on the host around a device synchronization; the memory columns are the
 * most the call held in the device arena at once. Prints a table; without a GPU it says so and exits 0.
 *     bench_cuda_attention [reps]  */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd.h"
#include "device.h"
#include "ops.h"
#include "tensor.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct bench {
    ttt_arena *arena;
    ttt_tensor *q, *k, *v, *w; /* device inputs and the backward's seed */
    float scale;
} bench;

/* One call: fused or unfused, with or without the backward. Returns the arena bytes it took. */
static size_t call(bench *b, int fused, int backward) {
    ttt_tape tape;
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = b->arena, .grad = backward, .tape = backward ? &tape : NULL};
    ttt_arena_mark m = ttt_arena_mark_get(b->arena);
    const size_t f0 = ttt_arena_footprint(b->arena);
    b->arena->peak = f0; /* the call's own peak, below */
    b->q->requires_grad = b->k->requires_grad = b->v->requires_grad = backward;
    b->q->grad = b->k->grad = b->v->grad = NULL;
    ttt_tensor *o;
    if (fused) {
        o = ttt_attention_causal(&ctx, b->q, b->k, b->v, b->scale);
    } else {
        ttt_tensor *s = ttt_scale(&ctx, ttt_matmul(&ctx, b->q, 0, b->k, 1), b->scale);
        o = ttt_matmul(&ctx, ttt_softmax_rows(&ctx, ttt_causal_fill(&ctx, s)), 0, b->v, 0);
    }
    if (backward) ttt_backward_from(&ctx, o, b->w->data);
    ttt_error err;
    if (ttt_device_sync(b->arena->device, b->arena->stream, &err) != TTT_OK ||
        ttt_device_ops_status(&err) != TTT_OK) {
        fprintf(stderr, "bench_cuda_attention: %s\n", err.msg);
        exit(1);
    }
    const size_t used = b->arena->peak - f0;
    ttt_tape_free(&tape);
    ttt_arena_release(b->arena, m);
    return used;
}

static double median_ms(bench *b, int fused, int backward, int reps, size_t *bytes) {
    double *t = malloc((size_t)reps * sizeof(double));
    for (int i = 0; i < 2; i++) *bytes = call(b, fused, backward);
    for (int i = 0; i < reps; i++) {
        const double t0 = now();
        call(b, fused, backward);
        t[i] = 1e3 * (now() - t0);
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    const double m = t[reps / 2];
    free(t);
    return m;
}

static ttt_tensor *device_random(ttt_ctx *ctx, int BH, int T, int D, unsigned *seed) {
    const size_t n = (size_t)BH * T * D;
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        h[i] = (float)(*seed >> 8) * (2.0f / 16777216.0f) - 1.0f; /* U[−1, 1) */
    }
    ttt_tensor v = ttt_tensor_view(h, 3, (int[]){BH, T, D});
    ttt_tensor *d = ttt_tensor_to(ctx, &v);
    ttt_error err;
    if (ttt_device_sync(ctx->arena->device, ctx->arena->stream, &err) != TTT_OK) exit(1);
    free(h);
    return d;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    ttt_error err;
    if (!ttt_device_cuda_built() || ttt_device_usable(ttt_device_cuda(0), &err) != TTT_OK) {
        printf("no CUDA device\n");
        return 0;
    }
    ttt_arena arena;
    if (ttt_arena_init_device(&arena, (size_t)256 << 20, ttt_device_cuda(0), NULL, &err) !=
        TTT_OK) {
        fprintf(stderr, "bench_cuda_attention: %s\n", err.msg);
        return 1;
    }
    static const int Ts[] = {512, 1024, 2048}, Hs[] = {8, 64};
    const int D = 64;
    printf("causal softmax attention on cuda:0, fp32, D = %d, one sequence per head; median of "
           "%d calls, ms\n",
           D, reps);
    printf("%5s %6s | %9s %9s %7s | %9s %9s %7s | %10s %10s | %8s\n", "T", "heads", "fwd fused",
           "unfused", "ratio", "f+b fused", "unfused", "ratio", "MiB fused", "unfused",
           "TFLOP/s");
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (size_t hi = 0; hi < sizeof Hs / sizeof Hs[0]; hi++) {
            const int T = Ts[ti], BH = Hs[hi];
            ttt_ctx ctx = {.arena = &arena};
            ttt_arena_mark m = ttt_arena_mark_get(&arena);
            unsigned seed = 12345u;
            bench b = {&arena, device_random(&ctx, BH, T, D, &seed),
                       device_random(&ctx, BH, T, D, &seed), device_random(&ctx, BH, T, D, &seed),
                       device_random(&ctx, BH, T, D, &seed), 0.125f};
            size_t bf, bu, bfb, bub;
            const double ff = median_ms(&b, 1, 0, reps, &bf), uf = median_ms(&b, 0, 0, reps, &bu);
            const double fb = median_ms(&b, 1, 1, reps, &bfb);
            const double ub = median_ms(&b, 0, 1, reps, &bub);
            /* useful work of the causal forward: the two products over the lower triangle */
            const double flops = 2.0 * 2.0 * BH * (double)T * T / 2.0 * D;
            printf("%5d %6d | %9.3f %9.3f %7.2f | %9.3f %9.3f %7.2f | %10.1f %10.1f | %8.2f\n", T,
                   BH, ff, uf, uf / ff, fb, ub, ub / fb, (double)bfb / 1048576.0,
                   (double)bub / 1048576.0, flops / (ff * 1e-3) / 1e12);
            fflush(stdout);
            ttt_arena_release(&arena, m);
        }
    printf("ratio: unfused time / fused time; MiB: the peak arena memory of forward + backward; TFLOP/s: "
           "the fused forward's 2·BH·T²·D useful flops per second\n");
    ttt_arena_free(&arena);
    return 0;
}
