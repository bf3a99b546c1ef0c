/* The benchmark's selective_scan measure: Mamba(1)'s scan, recurrent and in blocks. */
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

/* ---- measure: selective_scan ---- */

/* One timing of Mamba(1)'s selective scan over H sequences of (T, d) with state N, on `nt`
 * threads given to each call (blocks: 1 = the recurrence): wall seconds per call, best of
 * `repeats` samples, and the least CPU seconds (all threads) in *cpu. */
static double bench_ss_time(ttt_ctx *ctx, float *const *in, int H, int T, int d, int N,
                            int blocks, int nt, int repeats, double *cpu) {
    const size_t td = (size_t)T * d;
    float *x = in[0], *dl = in[1], *A = in[2], *B = in[3], *C = in[4], *D = in[5], *y = in[6];
    float *h = in[7];
#ifdef _OPENMP
    const int prev = omp_get_max_threads();
    omp_set_num_threads(nt);
#else
    (void)nt;
#endif
    double best = INFINITY;
    long calls = 1;
    *cpu = INFINITY;
    for (int r = -1; r < repeats; r++) { /* r = −1: warm-up and calibration */
        const double t0 = ttt_now(), c0 = ttt_bench_cpu_now();
        for (long c = 0; c < calls; c++)
            for (int hh = 0; hh < H; hh++) {
                memset(h, 0, sizeof(float) * (size_t)d * N);
                ttt_selective_scan(ctx, y + hh * td, h, x + hh * td, dl + hh * td, A,
                                   B + (size_t)hh * T * N, C + (size_t)hh * T * N, D, T, d, N,
                                   blocks);
            }
        const double dt = (ttt_now() - t0) / calls, dc = (ttt_bench_cpu_now() - c0) / calls;
        if (r < 0) {
            calls = (long)(TTT_BENCH_MIN_SAMPLE_SECONDS / (dt + 1e-9)) + 1;
        } else {
            if (dt < best) best = dt;
            if (dc < *cpu) *cpu = dc;
        }
    }
#ifdef _OPENMP
    omp_set_num_threads(prev);
#endif
    return best;
}

/* One bench_ss_time, under ttt_arena_run (ttt_bench_selective). */
typedef struct ss_call {
    ttt_ctx *ctx;
    float *const *in;
    int H, T, d, N, blocks, nt, repeats;
    double secs, cpu;
} ss_call;

static ttt_status ss_work(void *arg, ttt_error *err) {
    ss_call *w = arg;
    (void)err;
    w->secs = bench_ss_time(w->ctx, w->in, w->H, w->T, w->d, w->N, w->blocks, w->nt, w->repeats,
                            &w->cpu);
    return TTT_OK;
}

ttt_status ttt_bench_selective(ttt_task_run *run, ttt_error *err) {
    const ttt_bench_cfg *bc = run->cfg;
    const int N = bc->state_size;
    ttt_blas_set_threads(1);
    ttt_arena arena;
    ttt_arena_init(&arena, 1 << 20);
    ttt_ctx ctx = {.arena = &arena};
    ttt_status s = TTT_OK;
    for (int di = 0; di < bc->head_dims.n && s == TTT_OK; di++) {
        const int d = (int)bc->head_dims.v[di];
        for (int hi = 0; hi < bc->heads.n && s == TTT_OK; hi++) {
            const int H = (int)bc->heads.v[hi];
            for (int ti = 0; ti < bc->tokens.n && s == TTT_OK; ti++) {
                const int T = (int)bc->tokens.v[ti];
                const size_t td = (size_t)T * d * H, tn = (size_t)T * N * H;
                TTT_TRY(ttt_size_check(4.0 * (3 * td + 2 * tn), "the benchmark's inputs", err));
                float *in[8] = {malloc(sizeof(float) * td), malloc(sizeof(float) * td),
                                malloc(sizeof(float) * (size_t)d * N), malloc(sizeof(float) * tn),
                                malloc(sizeof(float) * tn), malloc(sizeof(float) * d),
                                malloc(sizeof(float) * td), malloc(sizeof(float) * (size_t)d * N)};
                int ok = 1;
                for (int i = 0; i < 8; i++) ok &= in[i] != NULL;
                if (ok) { /* Mamba's initialization: A_n = −(n + 1), Δ log-uniform [1e-3, 0.1] */
                    ttt_rng r;
                    ttt_rng_seed(&r, run->seed);
                    ttt_rng_fill_normal(&r, in[0], td, 0, 1);
                    ttt_rng_fill_uniform(&r, in[1], td, logf(1e-3f), logf(0.1f));
                    for (size_t j = 0; j < td; j++) in[1][j] = expf(in[1][j]);
                    for (int i = 0; i < d; i++)
                        for (int k = 0; k < N; k++) in[2][(size_t)i * N + k] = -(float)(k + 1);
                    ttt_rng_fill_normal(&r, in[3], tn, 0, 1);
                    ttt_rng_fill_normal(&r, in[4], tn, 0, 1);
                    ttt_rng_fill_normal(&r, in[5], d, 0, 1);
                }
                const int P = ttt_scan_blocks(T, bc->scan_block);
                double t1[2] = {NAN, NAN}; /* the 1-thread time of each form */
                for (int ni = 0; ni < bc->threads.n && ok && s == TTT_OK; ni++) {
                    int nt = (int)bc->threads.v[ni];
                    if (nt == 0) nt = ttt_bench_machine_threads();
                    if (nt > TTT_BENCH_MAX_THREADS) nt = TTT_BENCH_MAX_THREADS;
                    ttt_progress_update(run->progress, ++run->work_done, run->label);
                    if ((s = ttt_train_check_stop(err)) != TTT_OK) break;
                    /* the two forms alternate sample sets within one measurement */
                    for (int f = 0; f < 2; f++) {
                        const int blocks = f ? P : 1;
                        ss_call w = {.ctx = &ctx, .in = in, .H = H, .T = T, .d = d, .N = N,
                                     .blocks = blocks, .nt = nt, .repeats = bc->repeats};
#ifdef _OPENMP
                        const int prev_nt = omp_get_max_threads(); /* a jump skips its reset */
#endif
                        /* armed: the scan's temporaries that cannot be had end the point with
                         * TTT_ERR_NOMEM (docs/hardening.md "Out of memory") */
                        s = ttt_arena_run(&arena, ss_work, &w, "benchmark: the selective scan",
                                          err);
#ifdef _OPENMP
                        omp_set_num_threads(prev_nt);
#endif
                        if (s != TTT_OK) break;
                        const double secs = w.secs, cpu = w.cpu;
                        if (nt == 1 && isnan(t1[f])) t1[f] = secs;
                        const double flop = H * ttt_selective_scan_flops(T, d, N, blocks);
                        ttt_record rec;
                        ttt_record_clear(&rec);
                        char series[96];
                        snprintf(series, sizeof series, "mamba1 %s d=%d N=%d threads=%d",
                                 f ? "scan" : "recurrent", d, N, nt);
                        ttt_record_str(&rec, "series", series);
                        ttt_record_str(&rec, "preset", "mamba1");
                        ttt_record_str(&rec, "form", f ? "scan" : "recurrent");
                        if (f) ttt_record_num(&rec, "blocks", P);
                        ttt_record_num(&rec, "T", T);
                        ttt_record_num(&rec, "d_head", d);
                        ttt_record_num(&rec, "d_state", N);
                        ttt_record_num(&rec, "heads", H);
                        ttt_record_num(&rec, "threads", nt);
                        ttt_record_num(&rec, "seconds", secs);
                        ttt_record_num(&rec, "tokens_per_s", (double)H * T / secs);
                        ttt_record_num(&rec, "gflop", flop * 1e-9);
                        ttt_record_num(&rec, "gflops", flop / secs * 1e-9);
                        ttt_record_num(&rec, "cpu_seconds", cpu);
                        ttt_record_num(&rec, "gflops_cpu", flop / cpu * 1e-9);
                        if (!isnan(t1[f])) ttt_record_num(&rec, "speedup_1t", t1[f] / secs);
                        ttt_results_add(run->results, &rec, 1);
                    }
                }
                for (int i = 0; i < 8; i++) free(in[i]);
                if (!ok) s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
            }
        }
    }
    ttt_arena_free(&arena);
    return s;
}
