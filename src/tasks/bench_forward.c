/* The benchmark's forward measure: a layer over H independent sequences on the OpenMP threads. */
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

/* ---- forward ---- */

typedef struct bench_data {
    int H, T, d;
    ttt_tensor q[TTT_BENCH_MAX_HEADS], k[TTT_BENCH_MAX_HEADS], v[TTT_BENCH_MAX_HEADS],
        o[TTT_BENCH_MAX_HEADS];
    ttt_tensor eta[TTT_BENCH_MAX_HEADS], la[TTT_BENCH_MAX_HEADS];
    int has_la, la_vec;
    float *mem;
    size_t mem_floats;
} bench_data;

/* H random sequences: q ~ N(0, 1/d) (with nl > 1 levels, log-linear attention's, the levels'
 * queries side by side: (T, nl·d)), unit-norm keys (the delta rule's step is stable for
 * β‖k‖² ≤ 2), v ~ N(0, 1), η ~ U(0.05, 1), retentions α ~ U(0.9, 1) in log space. */
static ttt_status bench_data_make(bench_data *D, int H, int T, int d, int nl, int gates,
                                  uint64_t seed, ttt_error *err) {
    memset(D, 0, sizeof *D);
    D->H = H;
    D->T = T;
    D->d = d;
    D->has_la = gates != 0;
    D->la_vec = gates == 2;
    const size_t td = (size_t)T * d, nla = D->la_vec ? td : (size_t)T, tq = td * nl;
    const size_t per = 3 * td + tq + T + (D->has_la ? nla : 0);
    D->mem_floats = per * H;
    TTT_TRY(ttt_size_check(4.0 * D->mem_floats, "the benchmark's inputs", err));
    D->mem = ttt_fault_malloc(sizeof(float) * D->mem_floats);
    if (!D->mem) return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory for inputs");
    ttt_rng base;
    ttt_rng_seed(&base, seed);
    for (int h = 0; h < H; h++) {
        float *p = D->mem + per * h;
        D->q[h] = ttt_tensor_view2(p, T, nl * d);
        D->k[h] = ttt_tensor_view2(p + tq, T, d);
        D->v[h] = ttt_tensor_view2(p + tq + td, T, d);
        D->o[h] = ttt_tensor_view2(p + tq + 2 * td, T, d);
        D->eta[h] = ttt_tensor_view(p + tq + 3 * td, 1, (int[]){T});
        if (D->has_la)
            D->la[h] = D->la_vec ? ttt_tensor_view2(p + tq + 3 * td + T, T, d)
                                 : ttt_tensor_view(p + tq + 3 * td + T, 1, (int[]){T});
        ttt_rng r = ttt_rng_fork(&base, (uint64_t)h);
        ttt_rng_fill_normal(&r, D->q[h].data, tq, 0.0f, 1.0f / sqrtf((float)d));
        ttt_rng_fill_normal(&r, D->k[h].data, td, 0.0f, 1.0f);
        for (int t = 0; t < T; t++) {
            float *kt = D->k[h].data + (size_t)t * d;
            double n2 = 0;
            for (int c = 0; c < d; c++) n2 += (double)kt[c] * kt[c];
            const float s = n2 > 0 ? (float)(1.0 / sqrt(n2)) : 0.0f;
            for (int c = 0; c < d; c++) kt[c] *= s;
        }
        ttt_rng_fill_normal(&r, D->v[h].data, td, 0.0f, 1.0f);
        ttt_rng_fill_uniform(&r, D->eta[h].data, (size_t)T, 0.05f, 1.0f);
        if (D->has_la) ttt_rng_fill_uniform(&r, D->la[h].data, nla, logf(0.9f), -1e-4f);
    }
    return TTT_OK;
}

/* One thread's arena: a first block large enough for one call's temporaries, so the steady state
 * allocates nothing (a release keeps the first block). */
typedef struct bench_thread {
    ttt_arena arena;
    ttt_ctx ctx;
} bench_thread;

/* One head from the model's initial state, under ttt_arena_run (bench_forward). */
typedef struct bench_head {
    const ttt_layer *L;
    bench_data *D;
    ttt_ctx *ctx;
    int h;
} bench_head;

static ttt_status bench_head_work(void *arg, ttt_error *err) {
    const bench_head *w = arg;
    bench_data *D = w->D;
    const int h = w->h;
    ttt_rng rng;
    ttt_rng_seed(&rng, (uint64_t)h);
    ttt_layer_state state;
    ttt_layer_state_init(w->ctx, w->L, &state, &rng);
    return ttt_layer_forward(w->ctx, w->L, &D->o[h], &state, &D->q[h], &D->k[h], &D->v[h],
                             &D->eta[h], D->has_la ? &D->la[h] : NULL, err);
}

/* The layer over all H heads on `nthreads` threads (static schedule over heads). Each head
 * starts from the model's initial state. Returns the first head's error in head order. */
static ttt_status bench_forward(const ttt_layer *L, bench_data *D, int nthreads, int split_seq,
                                bench_thread *th, ttt_error *errs /* (H) */, ttt_error *err) {
    ttt_status st[TTT_BENCH_MAX_HEADS];
    /* split: sequence — the heads in turn on this thread, each call free to start `nthreads`
     * (the scan form's blocks); split: heads — the heads over the threads, nothing nested. A team
     * of one thread is not an active region, so a form's own parallel region inside it would
     * still start every core: in split: heads the nested count is set to one explicitly. */
#ifdef _OPENMP
    const int prev_threads = omp_get_max_threads();
    omp_set_num_threads(split_seq ? nthreads : 1);
#pragma omp parallel for schedule(static) num_threads(nthreads) if (!split_seq)
#endif
    for (int h = 0; h < D->H; h++) {
#ifdef _OPENMP
        ttt_ctx *ctx = &th[split_seq ? 0 : omp_get_thread_num()].ctx;
#else
        ttt_ctx *ctx = &th[0].ctx;
#endif
        ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
        bench_head w = {.L = L, .D = D, .ctx = ctx, .h = h};
        /* armed on this thread: an arena block that cannot be had ends the head with
         * TTT_ERR_NOMEM, collected below in head order */
        st[h] = ttt_arena_run(ctx->arena, bench_head_work, &w, "the layer's temporaries",
                              &errs[h]);
        ttt_arena_release(ctx->arena, m);
    }
#ifdef _OPENMP
    omp_set_num_threads(prev_threads);
#endif
    ttt_status s = TTT_OK;
    for (int h = 0; h < D->H && s == TTT_OK; h++)
        if (st[h] != TTT_OK) {
            s = st[h];
            *err = errs[h];
            /* a stop keeps its plain message, which the plan reports as an interruption */
            if (s != TTT_ERR_INTERRUPTED) ttt_error_prefix(err, "benchmark: head %d", h);
        }
    return s;
}

/* The fastest of `repeats` samples (each ≥ TTT_BENCH_MIN_SAMPLE_SECONDS) after one warm-up call:
 * wall seconds per call, and CPU seconds per call summed over the threads (the best sample of
 * each). On a shared machine a call longer than a scheduler time slice is preempted in every
 * sample, which inflates wall time but not CPU time: cpu_seconds measures the work, seconds the
 * throughput. A sample of each sgemm probe follows every sample of the layer. */
static ttt_status bench_time(const ttt_layer *L, bench_data *D, int nthreads, int split_seq,
                             bench_thread *th, int repeats, ttt_bench_sgemm_probe *probes,
                             int n_probes, double *seconds, double *cpu_seconds, ttt_error *err) {
    /* the heads' errors, allocated once: the number of calls depends on the machine's speed,
     * and what a run allocates must not (a test fails each allocation of a run in turn) */
    ttt_error *errs = ttt_fault_calloc((size_t)D->H, sizeof *errs);
    if (!errs) return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
    double t0 = ttt_now();
    /* warm-up: caches, arena blocks, pages */
    ttt_status s = bench_forward(L, D, nthreads, split_seq, th, errs, err);
    const double once = ttt_now() - t0;
    const long calls = (long)(TTT_BENCH_MIN_SAMPLE_SECONDS / (once + 1e-9)) + 1;
    double best = INFINITY, best_cpu = INFINITY;
    for (int r = 0; r < repeats && s == TTT_OK; r++) {
        t0 = ttt_now();
        const double c0 = ttt_bench_cpu_now();
        for (long c = 0; c < calls && s == TTT_OK; c++) {
            s = bench_forward(L, D, nthreads, split_seq, th, errs, err);
            /* between calls too: a sample may hold many (a read of the flag, no MPI poll) */
            if (s == TTT_OK && *ttt_train_stop_flag())
                s = ttt_error_set(err, TTT_ERR_INTERRUPTED, "interrupted");
        }
        const double dt = (ttt_now() - t0) / calls, dc = (ttt_bench_cpu_now() - c0) / calls;
        if (dt < best) best = dt;
        if (dc < best_cpu) best_cpu = dc;
        for (int p = 0; p < n_probes; p++) ttt_bench_sgemm_probe_sample(&probes[p]);
        /* a sample at a time (docs/hardening.md "Signals") */
        if (s == TTT_OK) s = ttt_train_check_stop(err);
    }
    free(errs);
    *seconds = best;
    *cpu_seconds = best_cpu;
    return s;
}

/* gates: auto — the preset's own answer: the forget gate of its block in the trained model
 * (ttt_block_defaults.gate, layers/layer.h), a gate per token (scalar) or per token and key
 * dimension (vector); a constant or per-head gate, a tuple without a preset: none. */
int ttt_bench_gates_kind(const ttt_bench_cfg *bc, const ttt_layer *L) {
    if (bc->gates >= 0) return bc->gates;
    const ttt_preset *p = L->preset ? ttt_preset_find(L->preset) : NULL;
    const char *g = p && p->block.gate ? p->block.gate : "none";
    return strcmp(g, "vector") == 0 ? 2 : strcmp(g, "scalar") == 0 ? 1 : 0;
}

ttt_status ttt_benchmark_run(ttt_task_run *run, ttt_error *err) {
    const ttt_bench_cfg *bc = run->cfg;
    if (bc->train_step) return ttt_bench_train_step(run, err);
    if (bc->selective) return ttt_bench_selective(run, err);
    const int repeats = bc->repeats;
    ttt_blas_set_threads(1); /* BLAS single-threaded inside the OpenMP threads */
    ttt_status s = TTT_OK;
    for (int di = 0; di < bc->head_dims.n && s == TTT_OK; di++) {
        const int d = (int)bc->head_dims.v[di];
        const ttt_layer L = bc->layers[di];
        const int gates = ttt_bench_gates_kind(bc, &L);
        /* the reference rates, timed on this thread in this run, between the layer's samples */
        ttt_bench_sgemm_probe probes[2] = {{0}};
        if (!ttt_bench_sgemm_probe_init(&probes[0], 64, 64, 64) ||
            !ttt_bench_sgemm_probe_init(&probes[1], L.chunk, d, d)) {
            ttt_bench_sgemm_probe_free(&probes[0]);
            ttt_bench_sgemm_probe_free(&probes[1]);
            return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
        }
        char layer_name[128];
        ttt_layer_describe(&L, layer_name, sizeof layer_name);
        for (int hi = 0; hi < bc->heads.n && s == TTT_OK; hi++) {
            const int H = (int)bc->heads.v[hi];
            for (int ti = 0; ti < bc->tokens.n && s == TTT_OK; ti++) {
                const int T = (int)bc->tokens.v[ti];
                bench_data *D = ttt_fault_malloc(sizeof *D);
                if (!D) { /* the probes are freed below */
                    s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
                    break;
                }
                const int nl = L.levels > 1 ? L.levels : 1;
                s = bench_data_make(D, H, T, d, nl, gates, run->seed, err);
                double t1 = NAN; /* this (T, d, H) on one thread, when measured */
                int done[TTT_BENCH_MAX_THREADS + 1] = {0};
                for (int ni = 0; ni < bc->threads.n && s == TTT_OK; ni++) {
                    int nt = (int)bc->threads.v[ni];
                    if (nt == 0) nt = ttt_bench_machine_threads();
                    if (nt > TTT_BENCH_MAX_THREADS) nt = TTT_BENCH_MAX_THREADS;
                    /* split: heads — threads beyond H have nothing to do */
                    const int used = bc->split_sequence || nt < H ? nt : H;
                    ttt_progress_update(run->progress, ++run->work_done, run->label);
                    if ((s = ttt_train_check_stop(err)) != TTT_OK) break; /* "Signals" */
                    if (done[used]++) continue; /* e.g. [1, 0] with one head: measured already */
                    bench_thread th[TTT_BENCH_MAX_THREADS];
                    /* one call's temporaries: the layer's copies of o, q (scale), β and gates,
                     * plus the form's scratch; 2× for slack */
                    const size_t block = (size_t)2 * sizeof(float) * ((size_t)T * ((2 + nl) * d + 2) +
                                         (size_t)(L.chunk + 2 * d) * (L.chunk + 2 * d)) + (1 << 20);
                    for (int i = 0; i < used; i++) {
                        ttt_arena_init(&th[i].arena, block);
                        th[i].ctx = (ttt_ctx){.arena = &th[i].arena,
                                              .stop = ttt_train_stop_flag()};
                        /* create the first block now: a mark taken in an empty arena would
                         * release it (and its pages) after every call */
                        if (!ttt_arena_alloc(&th[i].arena, 64)) s = TTT_ERR_NOMEM;
                    }
                    if (s != TTT_OK) {
                        for (int i = 0; i < used; i++) ttt_arena_free(&th[i].arena);
                        s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
                        break;
                    }
                    double secs = NAN, cpu = NAN;
                    s = bench_time(&L, D, used, bc->split_sequence, th, repeats, probes, 2, &secs,
                                   &cpu, err);
                    const double r64 = ttt_bench_sgemm_probe_gflops(&probes[0]);
                    const double rshape = ttt_bench_sgemm_probe_gflops(&probes[1]);
                    size_t arena_peak = 0;
                    for (int i = 0; i < used; i++) {
                        arena_peak += th[i].arena.peak;
                        ttt_arena_free(&th[i].arena);
                    }
                    if (s != TTT_OK) break;
                    if (used == 1 && isnan(t1)) t1 = secs;
                    const ttt_form_inputs in = {.T = T, .eta = 1,
                                                .gate = gates == 2 ? TTT_FORM_GATE_KEY
                                                        : gates || L.decay != 1.0f
                                                            ? TTT_FORM_GATE_TOKEN
                                                            : TTT_FORM_GATE_NONE};
                    const char *form_used = ttt_layer_form_used(&L, &in);
                    /* which library the sgemm rates and the kernels ran on (the build's
                     * TTT_BLAS, docs/benchmarks.md "BLAS libraries") */
                    ttt_blas_info blas;
                    ttt_blas_describe(&blas);
                    char blas_name[96];
                    snprintf(blas_name, sizeof blas_name, "%s%s%s", blas.library,
                             blas.version[0] ? " " : "", blas.version);
                    const double flop = H * ttt_bench_form_flops(&L, &in);
                    const double gflops = flop / secs * 1e-9;
                    ttt_record rec;
                    ttt_record_clear(&rec);
                    char series[224];
                    snprintf(series, sizeof series, "%s %s d=%d H=%d threads=%d%s",
                             L.preset ? L.preset : layer_name, form_used, d, H, used,
                             bc->split_sequence ? " split=sequence" : "");
                    ttt_record_str(&rec, "series", series);
                    ttt_record_str(&rec, "preset", L.preset ? L.preset : layer_name);
                    ttt_record_str(&rec, "form", form_used);
                    ttt_record_str(&rec, "gates",
                                   gates == 2 ? "vector"
                                   : gates    ? "scalar"
                                              : "none");
                    const ttt_form_entry *fe = ttt_form_choose(&L, &in, NULL);
                    if (fe && fe->chunked)
                        ttt_record_num(&rec, "chunk", L.chunk); /* scan: its least block */
                    ttt_record_num(&rec, "T", T);
                    ttt_record_num(&rec, "d_head", d);
                    ttt_record_num(&rec, "heads", H);
                    ttt_record_num(&rec, "threads", used);
                    ttt_record_str(&rec, "split", bc->split_sequence ? "sequence" : "heads");
                    ttt_record_num(&rec, "seconds", secs);
                    ttt_record_num(&rec, "tokens_per_s", (double)H * T / secs);
                    if (!isnan(flop)) { /* families and forms with a FLOP count */
                        ttt_record_num(&rec, "gflop", flop * 1e-9);
                        ttt_record_num(&rec, "gflops", gflops);
                    }
                    ttt_record_num(&rec, "sgemm64_gflops", r64);
                    ttt_record_num(&rec, "sgemm_shape_gflops", rshape);
                    ttt_record_str(&rec, "blas", blas_name);
                    ttt_record_str(&rec, "blas_core", blas.core);
                    if (!isnan(flop)) {
                        ttt_record_num(&rec, "frac_sgemm", gflops / (used * rshape));
                        ttt_record_num(&rec, "frac_sgemm64", gflops / (used * r64));
                        ttt_record_num(&rec, "frac_sgemm_cpu", flop / cpu * 1e-9 / rshape);
                    }
                    ttt_record_num(&rec, "cpu_seconds", cpu);
                    if (!isnan(t1)) ttt_record_num(&rec, "speedup_1t", t1 / secs);
                    ttt_record_num(&rec, "peak_mb",
                                   (4.0 * D->mem_floats + arena_peak) / (1024.0 * 1024.0));
                    ttt_results_add(run->results, &rec, 1);
                }
                free(D->mem);
                free(D);
            }
        }
        ttt_bench_sgemm_probe_free(&probes[0]);
        ttt_bench_sgemm_probe_free(&probes[1]);
    }
    return s;
}
