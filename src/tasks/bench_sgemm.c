/* The benchmark's reference rate: single-thread sgemm timed in this run, beside the layer's
 * samples. */
#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "autograd.h"
#include "blas.h"
#include "fault.h"
#include "data.h"
#include "mixer.h"
#include "seqmodel.h"
#include "rng.h"
#include "safetensors.h"
#include "task.h"
#include "trained.h"
#include "layer.h"
#include "diagonal.h"
#include "scan.h"
#include "bench_internal.h"

/* ---- reference: single-thread sgemm in this run ---- */


double ttt_bench_sgemm_probe_sample(ttt_bench_sgemm_probe *p) {
    const double t0 = ttt_now();
    for (long r = 0; r < p->reps; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->m, p->n, p->k, 1.0f, p->a, p->k,
                    p->b, p->n, 0.0f, p->c, p->n);
    const double dt = (ttt_now() - t0) / p->reps;
    if (dt < p->best) p->best = dt;
    return dt;
}

int ttt_bench_sgemm_probe_init(ttt_bench_sgemm_probe *p, int m, int n, int k) {
    *p = (ttt_bench_sgemm_probe){.m = m, .n = n, .k = k, .reps = 1, .best = INFINITY};
    p->a = ttt_fault_malloc(sizeof(float) * (size_t)m * k);
    p->b = ttt_fault_malloc(sizeof(float) * (size_t)k * n);
    p->c = ttt_fault_malloc(sizeof(float) * (size_t)m * n);
    if (!p->a || !p->b || !p->c) return 0;
    for (size_t i = 0; i < (size_t)m * k; i++) p->a[i] = (float)(i % 13) * 0.01f;
    for (size_t i = 0; i < (size_t)k * n; i++) p->b[i] = (float)(i % 7) * 0.01f;
    const double once = ttt_bench_sgemm_probe_sample(p); /* warm-up and calibration */
    p->reps = (long)(TTT_BENCH_MIN_SAMPLE_SECONDS / (once + 1e-9)) + 1;
    p->best = INFINITY;
    for (int s = 0; s < 3; s++) ttt_bench_sgemm_probe_sample(p);
    return 1;
}

double ttt_bench_sgemm_probe_gflops(const ttt_bench_sgemm_probe *p) {
    return 2.0 * p->m * p->n * p->k / p->best * 1e-9;
}

void ttt_bench_sgemm_probe_free(ttt_bench_sgemm_probe *p) {
    free(p->a);
    free(p->b);
    free(p->c);
}
