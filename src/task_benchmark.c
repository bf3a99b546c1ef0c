/* The `benchmark` task: how fast a layer's forward pass runs on this machine, measured rather than
 * claimed (DESIGN.md "Performance stance"). For every sequence length T, head size d (d_k = d_v =
 * d), head count H and thread count in the task's lists it runs the layer (preset and form from
 * the `layer:` section; sweep layer.preset / layer.form for several) over H independent random
 * sequences and reports
 *   tokens_per_s        H·T / wall time (the fastest of `repeats` samples, after a warm-up)
 *   gflops              achieved GFLOP/s = flops(form) / wall time, FLOP count below
 *   sgemm64_gflops      single-thread cblas_sgemm at 64×64×64, timed in the same run
 *   sgemm_shape_gflops  single-thread cblas_sgemm at the kernel's typical shape (C×d)·(d×d),
 *                       C = layer.chunk, timed in the same run
 *   frac_sgemm          gflops / (threads × sgemm_shape_gflops): the fraction of the
 *                       single-thread sgemm rate each thread achieves
 *   frac_sgemm_cpu      the same from CPU time (flops / CPU seconds of all threads /
 *                       sgemm_shape_gflops): insensitive to preemption by other processes,
 *                       which on a shared machine hits every call longer than a time slice
 *   speedup_1t          the 1-thread time of the same (T, d, H) / this time (when the thread list
 *                       holds 1 and 1 ran first)
 *   peak_mb             peak memory: the inputs and outputs of all heads (q, k, v, o, η, gates,
 *                       state) plus the sum over threads of each thread's arena peak
 *                       (ttt_arena.peak: the layer's scratch and temporaries). Not getrusage's
 *                       maxrss, which is process-wide and never goes down between measurements.
 *
 * FLOP counts (2 per multiply-add) of the matrix products as MATH.md writes them, T split in
 * chunks of n = C tokens (the last one shorter). A product of masked matrices is counted dense
 * (the masked half of the n×n products is computed and counted, as in MATH.md's formulas); a
 * triangular solve A⁻¹X counts n² per right-hand side column; elementwise gate and mask work is
 * not counted:
 *   linear attention, recurrent:  4·d_k·d_v per token (state write, read-out)
 *   linear attention, chunkwise:  per chunk 2n²(d_k + d_v) + 4n·d_k·d_v (§5.2: Q Kᵀ, its masked
 *                                 product with V, Q S, Kᵀ V); parallel: one chunk of n = T
 *   delta rule, recurrent:        6·d_k·d_v per token (prediction k S, write, read-out)
 *   delta rule, chunkwise:        per chunk n²(5d_k + 3d_v) + 6n·d_k·d_v (§5.3: K Kᵀ 2n²d_k,
 *                                 A⁻¹ on d_k + d_v columns n²(d_k + d_v), Q Kᵀ 2n²d_k, its
 *                                 masked product with V' 2n²d_v; W S, Q S, Kᵀ V' 2n·d_k·d_v
 *                                 each); parallel: one chunk of n = T
 *   other families and forms:     not counted (gflops and frac_sgemm are null)
 * Counting each causal triangle once instead would lower the chunkwise figures by the factor
 * (4d_k d_v + n(d_k + d_v)) / (4d_k d_v + 2n(d_k + d_v)) for linear attention (5/6 at n = 64,
 * d = 128) and (6d_k d_v + n(3d_k + 2d_v)) / (6d_k d_v + n(5d_k + 3d_v)) for the delta rule
 * (0.85 at n = 64, d = 128).
 *
 * Threads: the heads are split over OpenMP threads with a static schedule, one arena per thread
 * and single-threaded BLAS inside (openblas_set_num_threads(1); OPENBLAS_NUM_THREADS=1 in the
 * environment also keeps OpenBLAS from starting idle threads that spin at load). Thread count 0
 * in the list means the machine's cores (omp_get_max_threads()).
 *
 * A training-step benchmark (forward + backward + update of the MQAR model) belongs here as
 * `measure: train_step`; the option exists and points at bench_train_step below, which reports
 * that the model is not wired in yet. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "rng.h"
#include "task.h"
#include "ttt_layer.h"

#define BENCH_MAX_THREADS 64
#define BENCH_MAX_HEADS 1024
/* A timed sample repeats the forward pass until it lasts at least this long, so that short
 * configurations are not measured at the clock's resolution; short enough (about one scheduler
 * time slice) that on a shared machine some samples run without being preempted. */
#define BENCH_MIN_SAMPLE_SECONDS 0.005

static const ttt_option benchmark_options[] = {
    {"measure", TTT_OPT_CHOICE, "forward", TTT_NO_RANGE, "forward|train_step",
     "forward: the layer's forward pass; train_step: forward+backward+update of the MQAR model "
     "(a hook, not wired in yet)"},
    {"tokens", TTT_OPT_INT_LIST, "[1024, 4096, 16384, 65536]", 1, 1 << 24, NULL,
     "sequence lengths T"},
    {"head_dims", TTT_OPT_INT_LIST, "[64, 128]", 1, 4096, NULL, "head sizes d = d_k = d_v"},
    {"heads", TTT_OPT_INT_LIST, "[1, 8]", 1, BENCH_MAX_HEADS, NULL,
     "independent heads (sequences) per call, run in parallel over the threads"},
    {"threads", TTT_OPT_INT_LIST, "[1, 0]", 0, BENCH_MAX_THREADS, NULL,
     "OpenMP thread counts to measure; 0 = the machine's cores"},
    {"gates", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|none|scalar|vector",
     "per-token gates log α: auto = vector for gla, scalar for mamba2 and gated_deltanet, none "
     "otherwise (a preset's constant decay still applies)"},
    {"repeats", TTT_OPT_INT, "7", 1, 1000, NULL,
     "timed samples per measurement after one warm-up (the fastest is reported)"},
    TTT_OPTION_END,
};

static int list_len(const ttt_cfg_node *task, const char *key) {
    return ttt_cfg_get(task, key)->n;
}

static long list_at(const ttt_cfg_node *task, const char *key, int i) {
    long v = 0;
    ttt_cfg_as_int(ttt_cfg_get(task, key)->items[i], &v, NULL);
    return v;
}

static ttt_status benchmark_check(ttt_cfg_node *root, ttt_error *err) {
    const ttt_cfg_node *task = ttt_cfg_get(root, "task");
    if (strcmp(ttt_cfg_str(task, "measure"), "train_step") == 0)
        return ttt_cfg_error(err, TTT_ERR_UNSUPPORTED, ttt_cfg_get(task, "measure"),
                             "task.measure: train_step (forward+backward+update of the MQAR "
                             "model) is not wired in yet; see bench_train_step in "
                             "src/task_benchmark.c");
    for (int i = 0; i < list_len(task, "head_dims"); i++) {
        ttt_layer L;
        const int d = (int)list_at(task, "head_dims", i);
        TTT_TRY(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d, d, &L, err));
    }
    return TTT_OK;
}

static long benchmark_work(const ttt_cfg_node *root) {
    const ttt_cfg_node *task = ttt_cfg_get(root, "task");
    return (long)list_len(task, "tokens") * list_len(task, "head_dims") * list_len(task, "heads") *
           list_len(task, "threads");
}

/* ---- reference: single-thread sgemm in this run ---- */

/* Single-thread cblas_sgemm C = A B, row-major A (m, k), B (k, n), timed in samples of
 * ≥ BENCH_MIN_SAMPLE_SECONDS on the calling thread. The machine is shared: a sample that another
 * process interrupted is slow, so rates are the best sample, and samples of sgemm are taken
 * between the samples of the layer (bench_time) so that both see the same conditions. */
typedef struct sgemm_probe {
    int m, n, k;
    long reps; /* calls per sample */
    float *a, *b, *c;
    double best; /* best seconds per call so far */
} sgemm_probe;

static double sgemm_probe_sample(sgemm_probe *p) {
    const double t0 = ttt_now();
    for (long r = 0; r < p->reps; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->m, p->n, p->k, 1.0f, p->a, p->k,
                    p->b, p->n, 0.0f, p->c, p->n);
    const double dt = (ttt_now() - t0) / p->reps;
    if (dt < p->best) p->best = dt;
    return dt;
}

static int sgemm_probe_init(sgemm_probe *p, int m, int n, int k) {
    *p = (sgemm_probe){.m = m, .n = n, .k = k, .reps = 1, .best = INFINITY};
    p->a = malloc(sizeof(float) * (size_t)m * k);
    p->b = malloc(sizeof(float) * (size_t)k * n);
    p->c = malloc(sizeof(float) * (size_t)m * n);
    if (!p->a || !p->b || !p->c) return 0;
    for (size_t i = 0; i < (size_t)m * k; i++) p->a[i] = (float)(i % 13) * 0.01f;
    for (size_t i = 0; i < (size_t)k * n; i++) p->b[i] = (float)(i % 7) * 0.01f;
    const double once = sgemm_probe_sample(p); /* warm-up and calibration */
    p->reps = (long)(BENCH_MIN_SAMPLE_SECONDS / (once + 1e-9)) + 1;
    p->best = INFINITY;
    for (int s = 0; s < 3; s++) sgemm_probe_sample(p);
    return 1;
}

static double sgemm_probe_gflops(const sgemm_probe *p) {
    return 2.0 * p->m * p->n * p->k / p->best * 1e-9;
}

static void sgemm_probe_free(sgemm_probe *p) {
    free(p->a);
    free(p->b);
    free(p->c);
}

/* ---- FLOP counts (see the header comment) ---- */

static double flops_chunked(int fam, long T, int dk, int dv, long C) {
    double f = 0;
    for (long t0 = 0; t0 < T; t0 += C) {
        const double n = (double)(t0 + C <= T ? C : T - t0);
        f += fam == TTT_FAMILY_LINEAR_ATTENTION
                 ? 2.0 * n * n * (dk + dv) + 4.0 * n * dk * dv
                 : n * n * (5.0 * dk + 3.0 * dv) + 6.0 * n * dk * dv;
    }
    return f;
}

static double form_flops(const ttt_layer *L, long T, int dk, int dv) {
    const int fam = ttt_layer_family(L);
    if (fam != TTT_FAMILY_LINEAR_ATTENTION && fam != TTT_FAMILY_DELTA_RULE) return NAN;
    switch (L->form) {
    case TTT_FORM_RECURRENT:
        return (double)T * dk * dv * (fam == TTT_FAMILY_LINEAR_ATTENTION ? 4.0 : 6.0);
    case TTT_FORM_CHUNKWISE: return flops_chunked(fam, T, dk, dv, L->chunk);
    case TTT_FORM_PARALLEL: return flops_chunked(fam, T, dk, dv, T);
    default: return NAN;
    }
}

/* ---- the training-step hook ---- */

/* Tokens/s of forward + backward + outer update of the MQAR model (MATH.md §7 "mqar"): to be
 * written when the model lands. It should build the model from the point's `model:`/`layer:`
 * sections, draw MQAR batches with the point's seed, time `repeats` steps after a warm-up and add
 * one record per configuration with tokens_per_s and peak_mb, like bench_forward. */
static ttt_status bench_train_step(ttt_task_run *run, ttt_error *err) {
    (void)run;
    return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                         "benchmark: measure: train_step is not wired in yet (needs the MQAR "
                         "model)");
}

/* ---- forward ---- */

typedef struct bench_data {
    int H, T, d;
    ttt_tensor q[BENCH_MAX_HEADS], k[BENCH_MAX_HEADS], v[BENCH_MAX_HEADS], o[BENCH_MAX_HEADS];
    ttt_tensor eta[BENCH_MAX_HEADS], la[BENCH_MAX_HEADS];
    int has_la, la_vec;
    float *mem;
    size_t mem_floats;
} bench_data;

/* H random sequences: q ~ N(0, 1/d), unit-norm keys (the delta rule's step is stable for
 * β‖k‖² ≤ 2), v ~ N(0, 1), η ~ U(0.05, 1), retentions α ~ U(0.9, 1) in log space. */
static ttt_status bench_data_make(bench_data *D, int H, int T, int d, int gates, uint64_t seed,
                                  ttt_error *err) {
    memset(D, 0, sizeof *D);
    D->H = H;
    D->T = T;
    D->d = d;
    D->has_la = gates != 0;
    D->la_vec = gates == 2;
    const size_t td = (size_t)T * d, nla = D->la_vec ? td : (size_t)T;
    const size_t per = 4 * td + T + (D->has_la ? nla : 0);
    D->mem_floats = per * H;
    TTT_TRY(ttt_size_check(4.0 * D->mem_floats, "the benchmark's inputs", err));
    D->mem = malloc(sizeof(float) * D->mem_floats);
    if (!D->mem) return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory for inputs");
    ttt_rng base;
    ttt_rng_seed(&base, seed);
    for (int h = 0; h < H; h++) {
        float *p = D->mem + per * h;
        D->q[h] = ttt_tensor_view2(p, T, d);
        D->k[h] = ttt_tensor_view2(p + td, T, d);
        D->v[h] = ttt_tensor_view2(p + 2 * td, T, d);
        D->o[h] = ttt_tensor_view2(p + 3 * td, T, d);
        D->eta[h] = ttt_tensor_view(p + 4 * td, 1, (int[]){T});
        if (D->has_la)
            D->la[h] = D->la_vec ? ttt_tensor_view2(p + 4 * td + T, T, d)
                                 : ttt_tensor_view(p + 4 * td + T, 1, (int[]){T});
        ttt_rng r = ttt_rng_fork(&base, (uint64_t)h);
        ttt_rng_fill_normal(&r, D->q[h].data, td, 0.0f, 1.0f / sqrtf((float)d));
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

/* The layer over all H heads on `nthreads` threads (static schedule over heads). Each head
 * starts from the model's initial state. Returns the first head's error in head order. */
static ttt_status bench_forward(const ttt_layer *L, bench_data *D, int nthreads,
                                bench_thread *th, ttt_error *err) {
    ttt_status st[BENCH_MAX_HEADS];
    ttt_error *errs = calloc((size_t)D->H, sizeof *errs);
    if (!errs) return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads)
#endif
    for (int h = 0; h < D->H; h++) {
#ifdef _OPENMP
        ttt_ctx *ctx = &th[omp_get_thread_num()].ctx;
#else
        ttt_ctx *ctx = &th[0].ctx;
#endif
        ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
        ttt_rng rng;
        ttt_rng_seed(&rng, (uint64_t)h);
        ttt_layer_state state;
        ttt_layer_state_init(ctx, L, &state, &rng);
        st[h] = ttt_layer_forward(ctx, L, &D->o[h], &state, &D->q[h], &D->k[h], &D->v[h],
                                  &D->eta[h], D->has_la ? &D->la[h] : NULL, &errs[h]);
        ttt_arena_release(ctx->arena, m);
    }
    ttt_status s = TTT_OK;
    for (int h = 0; h < D->H && s == TTT_OK; h++)
        if (st[h] != TTT_OK) {
            s = st[h];
            *err = errs[h];
            ttt_error_prefix(err, "benchmark: head %d", h);
        }
    free(errs);
    return s;
}

/* CPU seconds used by the whole process so far (all threads). */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The fastest of `repeats` samples (each ≥ BENCH_MIN_SAMPLE_SECONDS) after one warm-up call:
 * wall seconds per call, and CPU seconds per call summed over the threads (the best sample of
 * each). On a shared machine a call longer than a scheduler time slice is preempted in every
 * sample, which inflates wall time but not CPU time: cpu_seconds measures the work, seconds the
 * throughput. A sample of each sgemm probe follows every sample of the layer. */
static ttt_status bench_time(const ttt_layer *L, bench_data *D, int nthreads, bench_thread *th,
                             int repeats, sgemm_probe *probes, int n_probes, double *seconds,
                             double *cpu_seconds, ttt_error *err) {
    double t0 = ttt_now();
    TTT_TRY(bench_forward(L, D, nthreads, th, err)); /* warm-up: caches, arena blocks, pages */
    const double once = ttt_now() - t0;
    const long calls = (long)(BENCH_MIN_SAMPLE_SECONDS / (once + 1e-9)) + 1;
    double best = INFINITY, best_cpu = INFINITY;
    for (int r = 0; r < repeats; r++) {
        t0 = ttt_now();
        const double c0 = cpu_now();
        for (long c = 0; c < calls; c++) TTT_TRY(bench_forward(L, D, nthreads, th, err));
        const double dt = (ttt_now() - t0) / calls, dc = (cpu_now() - c0) / calls;
        if (dt < best) best = dt;
        if (dc < best_cpu) best_cpu = dc;
        for (int p = 0; p < n_probes; p++) sgemm_probe_sample(&probes[p]);
    }
    *seconds = best;
    *cpu_seconds = best_cpu;
    return TTT_OK;
}

static int gates_kind(const ttt_cfg_node *task, const ttt_layer *L) {
    const char *g = ttt_cfg_str(task, "gates");
    if (strcmp(g, "none") == 0) return 0;
    if (strcmp(g, "scalar") == 0) return 1;
    if (strcmp(g, "vector") == 0) return 2;
    if (!L->preset) return 0;
    if (strcmp(L->preset, "gla") == 0) return 2;
    if (strcmp(L->preset, "mamba2") == 0 || strcmp(L->preset, "gated_deltanet") == 0) return 1;
    return 0;
}

static int machine_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static ttt_status benchmark_run(ttt_task_run *run, ttt_error *err) {
    const ttt_cfg_node *task = ttt_cfg_get(run->root, "task");
    if (strcmp(ttt_cfg_str(task, "measure"), "train_step") == 0) return bench_train_step(run, err);
    const int repeats = (int)ttt_cfg_int(task, "repeats");
    openblas_set_num_threads(1); /* BLAS single-threaded inside the OpenMP threads */
    ttt_status s = TTT_OK;
    for (int di = 0; di < list_len(task, "head_dims") && s == TTT_OK; di++) {
        const int d = (int)list_at(task, "head_dims", di);
        ttt_layer L;
        TTT_TRY(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(run->root, "layer"), d, d, &L, err));
        const int gates = gates_kind(task, &L);
        /* the reference rates, timed on this thread in this run, between the layer's samples */
        sgemm_probe probes[2] = {{0}};
        if (!sgemm_probe_init(&probes[0], 64, 64, 64) ||
            !sgemm_probe_init(&probes[1], L.chunk, d, d)) {
            sgemm_probe_free(&probes[0]);
            sgemm_probe_free(&probes[1]);
            return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
        }
        char layer_name[128];
        ttt_layer_describe(&L, layer_name, sizeof layer_name);
        for (int hi = 0; hi < list_len(task, "heads") && s == TTT_OK; hi++) {
            const int H = (int)list_at(task, "heads", hi);
            for (int ti = 0; ti < list_len(task, "tokens") && s == TTT_OK; ti++) {
                const int T = (int)list_at(task, "tokens", ti);
                bench_data *D = malloc(sizeof *D);
                if (!D) return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
                s = bench_data_make(D, H, T, d, gates, run->seed, err);
                double t1 = NAN; /* this (T, d, H) on one thread, when measured */
                int done[BENCH_MAX_THREADS + 1] = {0};
                for (int ni = 0; ni < list_len(task, "threads") && s == TTT_OK; ni++) {
                    int nt = (int)list_at(task, "threads", ni);
                    if (nt == 0) nt = machine_threads();
                    if (nt > BENCH_MAX_THREADS) nt = BENCH_MAX_THREADS;
                    const int used = nt < H ? nt : H; /* threads beyond H have nothing to do */
                    ttt_progress_update(run->progress, ++run->work_done, run->label);
                    if (done[used]++) continue; /* e.g. [1, 0] with one head: measured already */
                    bench_thread th[BENCH_MAX_THREADS];
                    /* one call's temporaries: the layer's copies of o, q (scale), β and gates,
                     * plus the form's scratch; 2× for slack */
                    const size_t block = (size_t)2 * sizeof(float) * ((size_t)T * (3 * d + 2) + 
                                         (size_t)(L.chunk + 2 * d) * (L.chunk + 2 * d)) + (1 << 20);
                    for (int i = 0; i < used; i++) {
                        ttt_arena_init(&th[i].arena, block);
                        th[i].ctx = (ttt_ctx){.arena = &th[i].arena};
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
                    s = bench_time(&L, D, used, th, repeats, probes, 2, &secs, &cpu, err);
                    const double r64 = sgemm_probe_gflops(&probes[0]);
                    const double rshape = sgemm_probe_gflops(&probes[1]);
                    size_t arena_peak = 0;
                    for (int i = 0; i < used; i++) {
                        arena_peak += th[i].arena.peak;
                        ttt_arena_free(&th[i].arena);
                    }
                    if (s != TTT_OK) break;
                    if (used == 1 && isnan(t1)) t1 = secs;
                    const double flop = H * form_flops(&L, T, d, d);
                    const double gflops = flop / secs * 1e-9;
                    ttt_record rec;
                    ttt_record_clear(&rec);
                    char series[160];
                    snprintf(series, sizeof series, "%s %s d=%d H=%d threads=%d",
                             L.preset ? L.preset : layer_name, ttt_form_name(L.form), d, H, used);
                    ttt_record_str(&rec, "series", series);
                    ttt_record_str(&rec, "preset", L.preset ? L.preset : layer_name);
                    ttt_record_str(&rec, "form", ttt_form_name(L.form));
                    ttt_record_str(&rec, "gates", gates == 2 ? "vector" : gates ? "scalar" : "none");
                    if (L.form == TTT_FORM_CHUNKWISE) ttt_record_num(&rec, "chunk", L.chunk);
                    ttt_record_num(&rec, "T", T);
                    ttt_record_num(&rec, "d_head", d);
                    ttt_record_num(&rec, "heads", H);
                    ttt_record_num(&rec, "threads", used);
                    ttt_record_num(&rec, "seconds", secs);
                    ttt_record_num(&rec, "tokens_per_s", (double)H * T / secs);
                    if (!isnan(flop)) { /* families and forms with a FLOP count */
                        ttt_record_num(&rec, "gflop", flop * 1e-9);
                        ttt_record_num(&rec, "gflops", gflops);
                    }
                    ttt_record_num(&rec, "sgemm64_gflops", r64);
                    ttt_record_num(&rec, "sgemm_shape_gflops", rshape);
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
        sgemm_probe_free(&probes[0]);
        sgemm_probe_free(&probes[1]);
    }
    return s;
}

static void benchmark_charts(ttt_results *res, const ttt_cfg_node *root) {
    (void)root;
    ttt_chart c = {.log_x = 1, .y_from_zero = 1};
    snprintf(c.name, sizeof c.name, "tokens_per_s");
    snprintf(c.title, sizeof c.title, "Forward throughput");
    snprintf(c.x_key, sizeof c.x_key, "T");
    snprintf(c.y_key, sizeof c.y_key, "tokens_per_s");
    snprintf(c.series_key, sizeof c.series_key, "series");
    snprintf(c.x_label, sizeof c.x_label, "tokens T");
    snprintf(c.y_label, sizeof c.y_label, "tokens / s (all heads)");
    ttt_results_add_chart(res, &c);
    ttt_chart f = c;
    snprintf(f.name, sizeof f.name, "frac_sgemm");
    snprintf(f.title, sizeof f.title, "Achieved GFLOP/s per thread / single-thread sgemm");
    snprintf(f.y_key, sizeof f.y_key, "frac_sgemm");
    snprintf(f.y_label, sizeof f.y_label, "fraction of sgemm at the kernel's shape");
    ttt_results_add_chart(res, &f);
}

static const char *const benchmark_columns[] = {
    "preset", "form", "gates", "chunk", "T", "d_head", "heads", "threads", "tokens_per_s",
    "gflops", "sgemm64_gflops", "sgemm_shape_gflops", "frac_sgemm", "frac_sgemm_cpu",
    "speedup_1t", "peak_mb", NULL};

const ttt_task ttt_task_benchmark = {
    .name = "benchmark",
    .help = "forward throughput per T, head size, heads and threads: tokens/s, GFLOP/s, fraction "
            "of single-thread sgemm (timed in the same run), peak memory. FLOPs per token "
            "(chunk C): linear attention recurrent 4 dk dv, chunkwise 4 dk dv + 2C(dk + dv); "
            "delta rule recurrent 6 dk dv, chunkwise 6 dk dv + C(5dk + 3dv) (MATH.md 5.2/5.3 "
            "products, masked ones dense; src/task_benchmark.c)",
    .options = benchmark_options,
    .check = benchmark_check,
    .work = benchmark_work,
    .run = benchmark_run,
    .columns = benchmark_columns,
    .charts = benchmark_charts,
};
