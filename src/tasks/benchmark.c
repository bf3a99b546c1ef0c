/* The `benchmark` task: how fast a layer's forward pass (measure: forward) or a whole training step
 * of a model (measure: train_step, at the end of this comment) runs on this machine, measured
 * rather than claimed (docs/design.md "Performance stance").
 *
 * measure: forward — for every sequence length T, head size d (d_k = d_v = d), head count H and
 * thread count in the task's lists it runs the layer (preset and form from the `layer:` section;
 * sweep layer.preset / layer.form for several) over H independent random sequences and reports
 *   tokens_per_s        H·T / wall time (the fastest of `repeats` samples, after a warm-up)
 *   gflops              achieved GFLOP/s = flops(form) / wall time, FLOP count below
 *   sgemm64_gflops      single-thread cblas_sgemm at 64×64×64, timed in the same run
 *   sgemm_shape_gflops  single-thread cblas_sgemm at the kernel's typical shape (C×d)·(d×d),
 *                       C = layer.chunk, timed in the same run
 *   blas, blas_core     the BLAS library the build uses (CMake TTT_BLAS) with its version, and
 *                       the kernels it runs (OpenBLAS's core, BLIS's sub-configuration)
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
 * FLOP counts (2 per multiply-add) of the matrix products as docs/math.md writes them, T split in
 * chunks of n = C tokens (the last one shorter). A product of masked matrices is counted dense
 * (the masked half of the n×n products is computed and counted, as in docs/math.md's formulas); a
 * triangular solve A⁻¹X counts n² per right-hand side column; elementwise gate and mask work is
 * not counted:
 *   linear attention, recurrent:  4·d_k·d_v per token (state write, read-out)
 *   linear attention, chunkwise:  per chunk 2n²(d_k + d_v) + 4n·d_k·d_v (§5.2: Q Kᵀ, its masked
 *                                 product with V, Q S, Kᵀ V); parallel: one chunk of n = T
 *   delta rule, recurrent:        6·d_k·d_v per token (prediction k S, write, read-out)
 *   delta rule, chunkwise:        per chunk n²(5d_k + 3d_v) + 6n·d_k·d_v (docs/math.md §5.3: K Kᵀ 2n²d_k,
 *                                 A⁻¹ on d_k + d_v columns n²(d_k + d_v), Q Kᵀ 2n²d_k, its
 *                                 masked product with V' 2n²d_v; W S, Q S, Kᵀ V' 2n·d_k·d_v
 *                                 each); parallel: one chunk of n = T
 *   linear attention, scan:       6·d_k·d_v per token (the blocks' recurrences and the fix-up
 *                                 (Q ⊙ Ā) S_start) + 2·d_k·d_v per block (the carries)
 *   other families and forms:     not counted (gflops and frac_sgemm are null)
 * Counting each causal triangle once instead would lower the chunkwise figures by the factor
 * (4d_k d_v + n(d_k + d_v)) / (4d_k d_v + 2n(d_k + d_v)) for linear attention (5/6 at n = 64,
 * d = 128) and (6d_k d_v + n(3d_k + 2d_v)) / (6d_k d_v + n(5d_k + 3d_v)) for the delta rule
 * (0.85 at n = 64, d = 128).
 *
 * Threads (split: heads, the default): the heads are split over OpenMP threads with a static
 * schedule, one arena per thread and single-threaded BLAS inside (ttt_blas_set_threads(1);
 * OPENBLAS_NUM_THREADS=1 in the environment also keeps OpenBLAS from starting idle threads that
 * spin at load). Thread count 0
 * in the list means the machine's cores (omp_get_max_threads()). split: sequence runs the heads
 * one after another on the calling thread and gives each call the thread count instead, so that a
 * form parallel along one sequence (the scan, docs/math.md §5.5) uses the threads and the others
 * run on one.
 *
 * measure: train_step — the speed of a whole outer training step of the sequence model (model.h)
 * built from the point's `model:` and `layer:` sections, on multi-query associative recall
 * (docs/math.md §7, data.h; vocabulary `vocab`, `pairs` pairs, sequences of each length in
 * `seq_len`, `train.batch` sequences per step): forward, loss, backward and the AdamW update
 * with clipping, run by the trainer itself (ttt_train, train.h) for one warm-up step plus
 * `repeats` timed steps. A step is timed from the trainer's request for its batch to the request
 * for the next one: one whole iteration of the training loop (zero grad, forward, backward, shard
 * sum, finiteness checks, clipping, AdamW). For each thread count n the batch is split into n
 * shards computed on n threads (train.shards = train.threads = n, capped by the batch; the
 * trainer's data parallelism), single-threaded BLAS inside. One record per (seq_len, threads):
 *   tokens_per_s        batch·seq_len / seconds (tokens_per_s_median: / seconds_median)
 *   seconds             the fastest timed step, wall clock (seconds_median: the median one)
 *   cpu_seconds         the least process CPU time of a timed step, all threads: on a shared
 *                       machine a step that another process preempted is slow in wall time but
 *                       not in CPU time (with one thread, cpu_seconds is the work itself)
 *   speedup_1t          the 1-thread seconds / these (when 1 ran first)
 *   peak_mb             what a step holds, the sum of: parameters and their gradients
 *                       (param_mb), AdamW's two moments (optim_mb), the gradient buffer of every
 *                       shard after the first (shard_mb), the batches the steps read (data_mb)
 *                       and the largest sum over shards of a step's arena peak, itself
 *                       act_mb + act_grad_mb + work_mb (ttt_train_memory, train.h):
 *   act_mb              the arenas at the loss: every tensor, tape entry and saved state the
 *                       backward reads (activations kept for the backward)
 *   act_grad_mb         the gradients of those activations the backward took (recycled, autograd.h)
 *   work_mb             the rest of the arena peak: scratch of forward and backward
 *   arena_held_mb       the bytes the shard arenas hold from the system (blocks in use and spare)
 *   rss_mb              measured, not accounted: the process's resident set's growth from before
 *                       the trainer starts (model and batches built) to its peak (VmHWM, reset
 *                       through /proc/self/clear_refs), beyond peak_mb the C library's and
 *                       OpenMP's per-thread memory
 *   faults_first        minor page faults of the first step (the arenas' pages mapped once)
 *   faults_per_step     minor page faults per step from the third step on: memory the step takes
 *                       from the system anew (0: the arenas keep their blocks across steps)
 * The MQAR batches are drawn from the seed before the clock starts. `dump: true` also writes
 * <run folder>/train_step_point<i>_L<seq_len>.safetensors: every parameter at initialization
 * ("param.<name>", names as in params.h), the first batch ("tokens", "labels" as floats, −1 = not
 * scored), the mean loss over its scored positions ("loss") and the gradient of that loss with
 * respect to every parameter ("grad.<name>", one shard), with the resolved `model.*`, `layer.*`
 * and `train.*` values as metadata — what tests/bench/compare_torch_train.py needs to run the
 * same model in PyTorch and compare. `dump_steps: N` also trains a fresh model N steps with the
 * trainer on N fresh batches and writes every step's batch, loss and learning rate
 * (dump_train_steps below; tests/bench/compare_torch_steps.py). */
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

#define BENCH_MAX_THREADS 64
#define BENCH_MAX_HEADS 1024
/* A timed sample repeats the forward pass until it lasts at least this long, so that short
 * configurations are not measured at the clock's resolution; short enough (about one scheduler
 * time slice) that on a shared machine some samples run without being preempted. */
#define BENCH_MIN_SAMPLE_SECONDS 0.005

static const ttt_option benchmark_options[] = {
    {"measure", TTT_OPT_CHOICE, "forward", TTT_NO_RANGE, "forward|train_step|selective_scan",
     "forward: the layer's forward pass; train_step: forward+backward+AdamW update of the "
     "`model:` sequence model on MQAR batches of train.batch sequences; selective_scan: "
     "Mamba(1)'s selective scan, recurrent and scan form side by side"},
    {"state_size", TTT_OPT_INT, "16", 1, 1024, NULL,
     "selective_scan: the state size N per channel (head_dims are the channel counts d)"},
    {"scan_block", TTT_OPT_INT, "256", 1, 1 << 24, NULL,
     "selective_scan: least block length of the scan form (at most 64 blocks)"},
    {"tokens", TTT_OPT_INT_LIST, "[1024, 4096, 16384, 65536]", 1, 1 << 24, NULL,
     "forward: sequence lengths T"},
    {"head_dims", TTT_OPT_INT_LIST, "[64, 128]", 1, 4096, NULL,
     "forward: head sizes d = d_k = d_v (train_step: the model's head size)"},
    {"heads", TTT_OPT_INT_LIST, "[1, 8]", 1, BENCH_MAX_HEADS, NULL,
     "forward: independent heads (sequences) per call, run in parallel over the threads"},
    {"threads", TTT_OPT_INT_LIST, "[1, 0]", 0, BENCH_MAX_THREADS, NULL,
     "OpenMP thread counts to measure (train_step: also the shards of the batch); 0 = the "
     "machine's cores"},
    {"gates", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|none|scalar|vector",
     "forward: per-token gates log α: auto = the preset's own gate (its block's `gate`: "
     "vector for gla and kda, scalar for mamba2, gated_deltanet and titans), none otherwise (a "
     "preset's constant decay still applies)"},
    {"split", TTT_OPT_CHOICE, "heads", TTT_NO_RANGE, "heads|sequence",
     "forward: what the threads share: heads = the heads split over the threads (one sequence "
     "per thread); sequence = the heads one after another, each call given all the threads (for "
     "forms that parallelize along one sequence: scan)"},
    {"repeats", TTT_OPT_INT, "7", 1, 1000, NULL,
     "timed samples (train_step: timed steps) per measurement after one warm-up (the fastest "
     "is reported)"},
    {"seq_len", TTT_OPT_INT_LIST, "[64]", 4, 1 << 20, NULL,
     "train_step: MQAR sequence lengths L"},
    {"vocab", TTT_OPT_INT, "64", 4, 1 << 20, NULL,
     "train_step: MQAR vocabulary V (keys from [1, V/2), values from [V/2, V))"},
    {"pairs", TTT_OPT_INT, "8", 1, 1 << 20, NULL, "train_step: MQAR key/value pairs N"},
    {"dump", TTT_OPT_BOOL, "false", TTT_NO_RANGE, NULL,
     "train_step: write the initial parameters, the first batch, its loss and gradients to "
     "<run folder>/train_step_point<i>_L<seq_len>.safetensors (for an outside comparison)"},
    {"dump_steps", TTT_OPT_INT, "0", 0, 100000, NULL,
     "train_step: also train a fresh model this many steps on as many fresh MQAR batches and "
     "write every step's batch, loss and learning rate to <run folder>/train_steps_point<i>_"
     "L<seq_len>.safetensors (docs/training.md \"Training parity with PyTorch\"); 0 = off"},
    TTT_OPTION_END,
};

/* A validated list option, read into C. */
typedef struct bench_list {
    long *v; /* (n) */
    int n;
} bench_list;

/* The parsed configuration of a point (benchmark_parse). */
typedef struct bench_cfg {
    int train_step;                      /* measure: train_step (else forward) */
    bench_list tokens, head_dims, heads, threads, seq_len;
    int gates;                           /* -1 auto, 0 none, 1 scalar, 2 vector */
    int split_sequence;                  /* split: sequence (else heads) */
    int selective;                       /* measure: selective_scan */
    int state_size, scan_block;
    int repeats, vocab, pairs, dump;
    int dump_steps;                      /* train_step: the steps of the recorded run (0 = off) */
    ttt_layer *layers;                   /* forward: (head_dims.n) the layer for each head size */
    ttt_trained_cfg trained;             /* train_step: the model:, layer: and train: sections */
    char **meta;                         /* train_step: (n_meta) key, value, key, …: the
                                          * resolved model.*, layer.*, train.* values for `dump` */
    int n_meta;
} bench_cfg;

static void benchmark_cfg_free(void *cfg) {
    bench_cfg *c = cfg;
    bench_list *lists[] = {&c->tokens, &c->head_dims, &c->heads, &c->threads, &c->seq_len};
    for (int i = 0; i < 5; i++) free(lists[i]->v);
    for (int i = 0; i < c->n_meta; i++) free(c->meta[i]);
    free(c->meta);
    free(c->layers);
    memset(c, 0, sizeof *c);
}

static long benchmark_work(const void *cfg) {
    const bench_cfg *c = cfg;
    if (c->train_step) return (long)c->seq_len.n * c->threads.n;
    return (long)c->tokens.n * c->head_dims.n * c->heads.n * c->threads.n;
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
    p->a = ttt_fault_malloc(sizeof(float) * (size_t)m * k);
    p->b = ttt_fault_malloc(sizeof(float) * (size_t)k * n);
    p->c = ttt_fault_malloc(sizeof(float) * (size_t)m * n);
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

/* The form a sequence model's TTT layers run in a training step: tape recorded, with the gates
 * and learning rates the model feeds them. */
static const ttt_form_entry *train_form_entry(const ttt_seq_model_config *mc) {
    ttt_form_inputs in = ttt_form_inputs_plain(&mc->layer, 0, 1);
    in.eta = mc->eta != TTT_ETA_NONE;
    in.gate = mc->gate == TTT_GATE_VECTOR ? TTT_FORM_GATE_KEY
              : mc->gate == TTT_GATE_NONE ? TTT_FORM_GATE_NONE
                                          : TTT_FORM_GATE_TOKEN;
    return ttt_form_choose(&mc->layer, &in, NULL);
}

static const char *train_form_used(const ttt_seq_model_config *mc) {
    const ttt_form_entry *e = train_form_entry(mc);
    return e ? e->form : "none";
}

/* The mixer is a TTT layer built from the `layer:` section (its registry entry's answer). */
static int uses_layer(const ttt_seq_model_config *mc) {
    return ttt_mixer_at(mc->mixer)->uses_layer;
}

/* The FLOPs of the form that runs L for inputs `in` (the registry entry's count), or NAN. */
static double form_flops(const ttt_layer *L, const ttt_form_inputs *in) {
    const ttt_form_entry *e = ttt_form_choose(L, in, NULL);
    return e && e->flops ? e->flops(L, in->T) : NAN;
}

/* ---- measure: train_step ---- */

/* CPU seconds used by the whole process so far (all threads). */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int machine_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* The MQAR problem of one sequence length L (the generator's other settings at their defaults). */
static void train_mqar_config(const bench_cfg *bc, int L, ttt_mqar_config *c) {
    ttt_mqar_config_default(c);
    c->vocab = bc->vocab;
    c->n_pairs = bc->pairs;
    c->seq_len = L;
}

/* The model's io: token ids in, logits over V out; learned positions (if any) sized for the
 * longest L, so every L runs the same parameters. */
static ttt_seq_model_io train_io(const bench_cfg *bc) {
    int longest = 1;
    for (int i = 0; i < bc->seq_len.n; i++)
        if (bc->seq_len.v[i] > longest) longest = (int)bc->seq_len.v[i];
    return (ttt_seq_model_io){.vocab = bc->vocab, .seq_len = longest};
}

static ttt_status train_step_check(bench_cfg *bc, ttt_cfg_node *root, ttt_error *err) {
    const ttt_cfg_node *task = ttt_cfg_get(root, "task");
    for (int i = 0; i < bc->seq_len.n; i++) {
        ttt_mqar_config c;
        train_mqar_config(bc, (int)bc->seq_len.v[i], &c);
        ttt_status s = ttt_mqar_config_check(&c, err);
        if (s != TTT_OK) {
            char msg[TTT_ERROR_MSG_LEN];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return ttt_cfg_error(err, s, ttt_cfg_get(task, "seq_len")->items[i],
                                 "task.seq_len = %d: %s", c.seq_len, msg);
        }
    }
    /* the model, layer and train sections as a trained task checks them (and the memory a
     * step needs) */
    const ttt_seq_model_io io = train_io(bc);
    return ttt_trained_parse(&bc->trained, root, &io, err);
}

/* The data of the timed steps: TRAIN_BATCHES batches of B sequences drawn from the seed before
 * the clock starts, handed out in turn (the trainer reads them where they are, as the mqar task
 * hands out rows gathered from its fixed training set). The trainer asks for a batch at the start
 * of every step, so the clocks read at each request delimit the steps: the time from one request
 * to the next is one whole iteration of the training loop. */
#define TRAIN_BATCHES 4

typedef struct train_feed {
    ttt_token_set set; /* (n_batches·B, L) */
    int B, n_batches;
    long next;      /* requests so far */
    long n_stamps;  /* capacity of wall / cpu / faults */
    double *wall;   /* (n_stamps) ttt_now() at request i */
    double *cpu;    /* (n_stamps) process CPU seconds at request i */
    double *faults; /* (n_stamps) the process's minor page faults so far at request i */
} train_feed;

/* Minor page faults of the whole process so far (every one is a page the kernel had to map and
 * zero: memory taken from the system anew). */
static double minor_faults(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_minflt : NAN;
}

/* The process's resident set now (VmRSS) or its high-water mark (VmHWM) in bytes, from
 * /proc/self/status; NAN where there is none. */
static double resident_bytes(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return NAN;
    char line[256];
    double v = NAN;
    const size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = 1024.0 * strtod(line + n + 1, NULL); /* "VmRSS:    1234 kB" */
            break;
        }
    fclose(f);
    return v;
}

/* Start the high-water mark of the resident set afresh at the current resident set (Linux ≥ 4.0:
 * writing 5 to clear_refs), so that a measurement's peak is its own and not the process's.
 * Nonzero when that worked. */
static int resident_peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    const int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

static ttt_status feed_next(void *user, ttt_seq_batch *out, ttt_error *err) {
    (void)err;
    train_feed *f = user;
    if (f->next < f->n_stamps) {
        f->wall[f->next] = ttt_now();
        f->cpu[f->next] = cpu_now();
        f->faults[f->next] = minor_faults();
    }
    const size_t off = (size_t)(f->next++ % f->n_batches) * (size_t)f->B * (size_t)f->set.L;
    *out = (ttt_seq_batch){.B = f->B, .T = f->set.L, .tokens = f->set.tokens + off,
                           .labels = f->set.labels + off};
    return TTT_OK;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What one measurement found (seconds per step). */
typedef struct train_timing {
    double best, median; /* wall clock: fastest and median timed step */
    double cpu_best;     /* process CPU seconds (all threads) of the step with the least */
    double peak_bytes;   /* the sum of the parts below */
    double param_bytes;  /* parameters and their gradients */
    double optim_bytes;  /* AdamW's two moments */
    double shard_bytes;  /* the gradient buffers of the shards after the first */
    double data_bytes;   /* the batches the steps read (tokens and labels) */
    ttt_train_memory mem; /* the arena's parts (train.h) */
    double rss_bytes;    /* the resident set's growth from before the run to its peak */
    double faults_first; /* minor page faults of the warm-up step */
    double faults_step;  /* minor page faults per step from the third (mean) */
} train_timing;

/* A freshly initialized model trained by ttt_train for repeats + 2 steps on `threads` threads
 * and as many shards. Step 1 warms the arenas, caches and pages up; steps 2 … repeats + 1 are
 * timed from the batch request that starts each to the one that starts the next (the last step
 * only closes the window of the one before). Also the step's memory (see the header comment). */
static ttt_status time_train_steps(const ttt_seq_model_config *mc, const ttt_train_config *base,
                                   train_feed *feed, int threads, int repeats, uint64_t seed,
                                   train_timing *out, ttt_error *err) {
    ttt_seq_model m;
    TTT_TRY(ttt_seq_model_init(&m, mc, seed, err));
    ttt_train_config tc = *base;
    tc.steps = repeats + 2;
    tc.threads = threads;
    tc.shards = threads < tc.batch ? threads : tc.batch;
    tc.log_every = tc.steps; /* one training record, at the end (nobody reads it) */
    tc.eval_every = 0;
    tc.checkpoint_every = 0;
    tc.stop_at = 0;
    tc.adamw.total_steps = 0; /* no cosine decay: the schedule's shape does not change the work */
    feed->next = 0;
    feed->n_stamps = tc.steps;
    feed->wall = ttt_fault_malloc(sizeof(double) * (size_t)tc.steps);
    feed->cpu = ttt_fault_malloc(sizeof(double) * (size_t)tc.steps);
    feed->faults = ttt_fault_malloc(sizeof(double) * (size_t)tc.steps);
    double *secs = ttt_fault_malloc(sizeof(double) * (size_t)repeats);
    ttt_status s = TTT_OK;
    if (!feed->wall || !feed->cpu || !feed->faults || !secs)
        s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
    ttt_train_data data = {.user = feed, .next = feed_next};
    ttt_train_result res;
    /* the resident set's growth over the run, from here (the model and the batches exist) to
     * its peak: what the training itself took from the system, as the PyTorch twin measures
     * its own (tests/bench/compare_torch_train.py) */
    const double rss0 = resident_bytes("VmRSS");
    const int peak_ok = resident_peak_reset();
    if (s == TTT_OK) {
        const ttt_train_run tr = {.config_hash = "", .series = "", .mixer = ""};
        s = ttt_train(&m, &tc, &data, &tr, &res, err);
    }
    const double faults_end = minor_faults();
    out->rss_bytes = peak_ok ? resident_bytes("VmHWM") - rss0 : NAN;
    if (s == TTT_OK && feed->next != tc.steps)
        s = ttt_error_set(err, TTT_ERR_UNSUPPORTED, "benchmark: the trainer asked for %ld "
                                                    "batches in %ld steps; cannot time its steps",
                          feed->next, tc.steps);
    if (s == TTT_OK) {
        out->cpu_best = INFINITY;
        for (int i = 0; i < repeats; i++) { /* step i + 2: requests i + 1 → i + 2 (0-based) */
            secs[i] = feed->wall[i + 2] - feed->wall[i + 1];
            const double c = feed->cpu[i + 2] - feed->cpu[i + 1];
            if (c < out->cpu_best) out->cpu_best = c;
        }
        qsort(secs, (size_t)repeats, sizeof *secs, cmp_double);
        out->best = secs[0];
        out->median = repeats % 2 ? secs[repeats / 2]
                                  : 0.5 * (secs[repeats / 2 - 1] + secs[repeats / 2]);
        const double numel = (double)ttt_params_numel(&m.params);
        out->param_bytes = 8.0 * numel;
        out->optim_bytes = 8.0 * numel;
        out->shard_bytes = 4.0 * numel * (tc.shards - 1);
        out->data_bytes = 2.0 * sizeof(int) * (double)feed->set.n * feed->set.L;
        out->mem = res.mem;
        out->peak_bytes = out->param_bytes + out->optim_bytes + out->shard_bytes +
                          out->data_bytes + (double)res.arena_peak;
        out->faults_first = feed->faults[1] - feed->faults[0];
        /* from the third step on, as the PyTorch twin counts its own (its optimizer state
         * appears in its first step) */
        out->faults_step = (faults_end - feed->faults[2]) / (double)(tc.steps - 2);
    }
    free(secs);
    free(feed->wall);
    free(feed->cpu);
    free(feed->faults);
    feed->wall = feed->cpu = feed->faults = NULL;
    feed->n_stamps = 0;
    ttt_seq_model_free(&m);
    return s;
}

/* A growing list of malloc'd strings (safetensors names and metadata). */
typedef struct strlist {
    char **s;
    int n, cap, oom;
} strlist;

static const char *strlist_add(strlist *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const char *strlist_add(strlist *l, const char *fmt, ...) {
    if (l->oom) return NULL;
    if (l->n == l->cap) {
        const int cap = l->cap ? 2 * l->cap : 64;
        char **p = ttt_fault_realloc(l->s, sizeof *p * (size_t)cap);
        if (!p) {
            l->oom = 1;
            return NULL;
        }
        l->s = p;
        l->cap = cap;
    }
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    const int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *str = len >= 0 ? ttt_fault_malloc((size_t)len + 1) : NULL;
    if (str) vsnprintf(str, (size_t)len + 1, fmt, ap2);
    va_end(ap2);
    if (!str) {
        l->oom = 1;
        return NULL;
    }
    return l->s[l->n++] = str;
}

static void strlist_free(strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    memset(l, 0, sizeof *l);
}

/* Metadata "<prefix><key>" = value for every scalar of a resolved configuration map, one level
 * of nested maps as "<prefix><key>.<subkey>" (layer.optimizer). */
static void meta_from_map(strlist *meta, const char *prefix, const ttt_cfg_node *map, int depth) {
    for (int i = 0; map && map->kind == TTT_CFG_MAP && i < map->n; i++) {
        const ttt_cfg_node *v = map->items[i];
        if (v->kind == TTT_CFG_SCALAR) {
            strlist_add(meta, "%s%s", prefix, map->keys[i]);
            strlist_add(meta, "%s", v->scalar ? v->scalar : "");
        } else if (v->kind == TTT_CFG_MAP && depth == 0) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s%s.", prefix, map->keys[i]);
            meta_from_map(meta, sub, v, 1);
        }
    }
}

static ttt_status read_list(bench_list *l, const ttt_cfg_node *task, const char *key,
                            ttt_error *err) {
    return ttt_task_read_ints(task, key, &l->v, &l->n, err);
}

static ttt_status benchmark_parse(void *cfg, ttt_cfg_node *root, ttt_error *err) {
    bench_cfg *c = cfg;
    const ttt_cfg_node *task = ttt_cfg_get(root, "task");
    c->train_step = strcmp(ttt_cfg_str(task, "measure"), "train_step") == 0;
    TTT_TRY(read_list(&c->tokens, task, "tokens", err));
    TTT_TRY(read_list(&c->head_dims, task, "head_dims", err));
    TTT_TRY(read_list(&c->heads, task, "heads", err));
    TTT_TRY(read_list(&c->threads, task, "threads", err));
    TTT_TRY(read_list(&c->seq_len, task, "seq_len", err));
    const char *g = ttt_cfg_str(task, "gates");
    c->gates = strcmp(g, "none") == 0     ? 0
               : strcmp(g, "scalar") == 0 ? 1
               : strcmp(g, "vector") == 0 ? 2
                                          : -1;
    c->split_sequence = strcmp(ttt_cfg_str(task, "split"), "sequence") == 0;
    c->selective = strcmp(ttt_cfg_str(task, "measure"), "selective_scan") == 0;
    c->state_size = (int)ttt_cfg_int(task, "state_size");
    c->scan_block = (int)ttt_cfg_int(task, "scan_block");
    c->repeats = (int)ttt_cfg_int(task, "repeats");
    c->vocab = (int)ttt_cfg_int(task, "vocab");
    c->pairs = (int)ttt_cfg_int(task, "pairs");
    c->dump = ttt_cfg_bool(task, "dump");
    c->dump_steps = (int)ttt_cfg_int(task, "dump_steps");
    if (c->train_step) {
        TTT_TRY(train_step_check(c, root, err));
        for (int i = 0; i < c->seq_len.n && c->dump_steps > 0; i++) {
            /* dump_steps' batches: token ids and labels, and their float copies in the file */
            const double bytes = 16.0 * c->dump_steps * c->trained.train.batch * c->seq_len.v[i];
            ttt_status s = ttt_size_check(bytes, "the batches of dump_steps", err);
            if (s != TTT_OK) {
                char msg[TTT_ERROR_MSG_LEN];
                snprintf(msg, sizeof msg, "%s", err->msg);
                return ttt_cfg_error(err, s, ttt_cfg_get(task, "dump_steps"), "task: %s", msg);
            }
        }
        /* the values `dump` records, as resolved (after the parse filled every default) */
        strlist meta = {0};
        meta_from_map(&meta, "model.", ttt_cfg_get(root, "model"), 0);
        meta_from_map(&meta, "layer.", ttt_cfg_get(root, "layer"), 0);
        meta_from_map(&meta, "train.", ttt_cfg_get(root, "train"), 0);
        c->meta = meta.s;
        c->n_meta = meta.n;
        if (meta.oom) return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
        return TTT_OK;
    }
    c->layers = ttt_fault_calloc((size_t)(c->head_dims.n > 0 ? c->head_dims.n : 1), sizeof *c->layers);
    if (!c->layers) return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
    /* One layer per head size; the first parse resolves `form: auto` in the tree, so every size
     * runs the same form. */
    for (int i = 0; i < c->head_dims.n; i++) {
        const int d = (int)c->head_dims.v[i];
        TTT_TRY(ttt_layer_parse((ttt_cfg_node *)ttt_cfg_get(root, "layer"), d, d, &c->layers[i],
                                err));
    }
    /* The largest measurement's inputs (bench_data_make: q, k, v, o, η and the gates per head)
     * and one forward's state and scratch, checked here so that `ttt check` refuses what the run
     * would refuse hours in, at the same size check. */
    for (int i = 0; i < c->head_dims.n; i++)
        for (int t = 0; t < c->tokens.n; t++)
            for (int h = 0; h < c->heads.n; h++) {
                const double T = (double)c->tokens.v[t], d = (double)c->head_dims.v[i];
                const double per = 4.0 * T * d + T + (c->gates == 2 ? T * d : c->gates ? T : 0.0);
                const double bytes = 4.0 * per * (double)c->heads.v[h] +
                                     ttt_layer_state_bytes(&c->layers[i]) +
                                     ttt_layer_forward_bytes(&c->layers[i], (long)T);
                char what[160];
                snprintf(what, sizeof what,
                         "the benchmark at %.0f tokens, %ld heads of dimension %.0f", T,
                         (long)c->heads.v[h], d);
                ttt_status s = ttt_size_check(bytes, what, err);
                if (s != TTT_OK) {
                    char msg[TTT_ERROR_MSG_LEN];
                    snprintf(msg, sizeof msg, "%s", err->msg);
                    return ttt_cfg_error(err, s, ttt_cfg_get(task, "tokens"), "task: %s", msg);
                }
            }
    return TTT_OK;
}

/* The metadata of a dump: the resolved model.*, layer.* and train.* values, what the model
 * resolved, the task's MQAR settings and seed, the scored positions of the (first) batch, and
 * which parameters AdamW decays. */
static void dump_meta(strlist *meta, const ttt_task_run *run, const ttt_seq_model_config *mc,
                      const ttt_seq_model *m, long scored) {
    const bench_cfg *bc = run->cfg;
    const int np = m->params.n;
    for (int i = 0; i < bc->n_meta; i++) strlist_add(meta, "%s", bc->meta[i]);
    /* the values the model resolved (head_dim 0 = d_model / heads; form auto) */
    strlist_add(meta, "resolved.head_dim");
    strlist_add(meta, "%d", mc->head_dim);
    strlist_add(meta, "resolved.form");
    strlist_add(meta, "%s", uses_layer(mc) ? train_form_used(mc) : "");
    strlist_add(meta, "resolved.chunk");
    strlist_add(meta, "%d", mc->layer.chunk);
    strlist_add(meta, "resolved.theta");
    strlist_add(meta, "%.9g", (double)mc->layer.lr);
    strlist_add(meta, "task.vocab");
    strlist_add(meta, "%d", bc->vocab);
    strlist_add(meta, "task.pairs");
    strlist_add(meta, "%d", bc->pairs);
    strlist_add(meta, "seed");
    strlist_add(meta, "%llu", (unsigned long long)run->seed);
    if (scored >= 0) {
        strlist_add(meta, "scored");
        strlist_add(meta, "%ld", scored);
    }
    /* AdamW's weight decay applies to the parameters marked 1 (params.h), in order */
    char *decay = ttt_fault_malloc((size_t)np + 1);
    if (!decay) {
        meta->oom = 1;
    } else {
        for (int i = 0; i < np; i++) decay[i] = m->params.p[i]->decay ? '1' : '0';
        decay[np] = 0;
        strlist_add(meta, "param_decay");
        strlist_add(meta, "%s", decay);
        free(decay);
    }
}

/* `dump: true`: the model at initialization, the first batch, the mean loss over its scored
 * positions and every parameter's gradient of it, computed by the model's own forward and
 * backward on one shard (the trainer's step sums the same gradient over its shards). */
/* The loss and its backward of dump_train_step, under ttt_arena_run. */
typedef struct dump_step {
    ttt_ctx *ctx;
    const ttt_seq_model *m;
    const ttt_seq_batch *b;
    ttt_tensor *loss;
    ttt_seq_stats stats;
} dump_step;

static ttt_status dump_step_work(void *arg, ttt_error *err) {
    dump_step *w = arg;
    TTT_TRY(ttt_seq_model_loss(w->ctx, w->m, NULL, w->b, 0.0, &w->loss, &w->stats, NULL, err));
    ttt_backward(w->ctx, w->loss);
    return TTT_OK;
}

static ttt_status dump_train_step(const ttt_task_run *run, const ttt_seq_model_config *mc,
                                  const ttt_seq_batch *b, ttt_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/train_step_point%d_L%d.safetensors", run->run_dir,
             run->point, b->T);
    ttt_seq_model m;
    TTT_TRY(ttt_seq_model_init(&m, mc, run->seed, err));
    ttt_arena arena;
    ttt_tape tape;
    ttt_arena_init(&arena, (size_t)16 << 20);
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &arena, .grad = 1, .tape = &tape};
    dump_step w = {.ctx = &ctx, .m = &m, .b = b};
    /* armed: the step's tensors that cannot be had end in TTT_ERR_NOMEM */
    ttt_status s = ttt_arena_run(&arena, dump_step_work, &w, "benchmark: the dumped step", err);
    const int np = m.params.n, nt = 2 * np + 3;
    const size_t cells = (size_t)b->B * b->T;
    ttt_st_tensor *ts = ttt_fault_calloc((size_t)nt, sizeof *ts);
    float *ids = ttt_fault_malloc(sizeof(float) * 2 * cells);
    strlist names = {0}, meta = {0};
    if (s == TTT_OK && (!ts || !ids))
        s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory for the dump");
    if (s == TTT_OK) {
        for (int i = 0; i < np; i++) {
            const ttt_param *p = m.params.p[i];
            for (int g = 0; g < 2; g++) {
                ttt_st_tensor *t = &ts[2 * i + g];
                t->name = (char *)strlist_add(&names, "%s.%s", g ? "grad" : "param", p->name);
                t->ndim = p->ndim;
                for (int d = 0; d < p->ndim; d++) t->shape[d] = p->shape[d];
                t->data = g ? p->grad : p->data;
            }
        }
        for (size_t i = 0; i < cells; i++) {
            ids[i] = (float)b->tokens[i];
            ids[cells + i] = (float)b->labels[i];
        }
        ts[2 * np] = (ttt_st_tensor){.name = "tokens", .ndim = 2, .shape = {b->B, b->T},
                                     .data = ids};
        ts[2 * np + 1] = (ttt_st_tensor){.name = "labels", .ndim = 2, .shape = {b->B, b->T},
                                         .data = ids + cells};
        ts[2 * np + 2] = (ttt_st_tensor){.name = "loss", .ndim = 0, .data = w.loss->data};
        dump_meta(&meta, run, mc, &m, w.stats.count);
        if (names.oom || meta.oom)
            s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory for the dump");
    }
    if (s == TTT_OK)
        s = ttt_st_write(path, ts, nt, (const char *const *)meta.s, meta.n / 2, err);
    strlist_free(&names);
    strlist_free(&meta);
    free(ts);
    free(ids);
    ttt_tape_free(&tape);
    ttt_arena_free(&arena);
    ttt_seq_model_free(&m);
    if (s != TTT_OK) ttt_error_prefix(err, "benchmark: dump");
    return s;
}

/* `dump_steps: N`: a fresh model (the same seed, so the same initial parameters as `dump`)
 * trained by the trainer itself (ttt_train: zero grad, forward, backward, clipping, AdamW) for N
 * steps on N fresh MQAR batches, one shard on one thread, with the `train:` section's AdamW and
 * clipping and the schedule of a run of N steps (warm-up train.warmup capped at N − 1, cosine
 * down to min_lr_ratio · lr at step N; adamw.h). The trainer's record of every step (log_every 1)
 * gives its loss, learning rate and gradient norm. Writes
 * <run folder>/train_steps_point<i>_L<L>.safetensors: "param.<name>" at initialization,
 * "final.<name>" after step N, "tokens" and "labels" (N, B, L) as floats (−1 = not scored),
 * "loss", "lr" and "grad_norm" (N), with dump's metadata plus parity.steps and parity.warmup
 * (docs/training.md "Training parity with PyTorch"). */
static ttt_status dump_train_steps(const ttt_task_run *run, const ttt_seq_model_config *mc,
                                   const ttt_train_config *base, const ttt_mqar_config *mq,
                                   ttt_error *err) {
    const bench_cfg *bc = run->cfg;
    const int N = bc->dump_steps, B = base->batch, L = mq->seq_len;
    char path[4096];
    snprintf(path, sizeof path, "%s/train_steps_point%d_L%d.safetensors", run->run_dir,
             run->point, L);
    train_feed feed = {.B = B, .n_batches = N};
    ttt_rng root;
    ttt_rng_seed(&root, run->seed);
    ttt_rng r = ttt_rng_fork(&root, ttt_hash_str("benchmark/parity"));
    TTT_TRY(ttt_mqar_make_set(&feed.set, mq, N * B, &r, err));
    ttt_seq_model m;
    ttt_status s = ttt_seq_model_init(&m, mc, run->seed, err);
    if (s != TTT_OK) {
        ttt_token_set_free(&feed.set);
        return s;
    }
    const int np = m.params.n, nt = 2 * np + 5;
    const size_t cells = (size_t)N * B * L;
    float **init = calloc((size_t)np, sizeof *init); /* init[i]: (params.p[i]->n) */
    float *curves = malloc(sizeof(float) * (3 * (size_t)N + 2 * cells));
    ttt_st_tensor *ts = calloc((size_t)nt, sizeof *ts);
    ttt_results *res = ttt_results_new("parity");
    strlist names = {0}, meta = {0};
    if (!init || !curves || !ts || !res)
        s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory for dump_steps");
    for (int i = 0; i < np && s == TTT_OK; i++) {
        const ttt_param *p = m.params.p[i];
        init[i] = malloc(sizeof(float) * p->n);
        if (!init[i]) s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
        else memcpy(init[i], p->data, sizeof(float) * p->n);
    }
    ttt_train_config tc = *base;
    tc.steps = N;
    tc.threads = tc.shards = 1;
    tc.log_every = 1;
    tc.eval_every = tc.checkpoint_every = tc.stop_at = 0;
    tc.adamw.total_steps = N;
    if (tc.adamw.warmup >= N) tc.adamw.warmup = N - 1; /* as a run of N steps (train.c) */
    if (s == TTT_OK) {
        ttt_train_data data = {.user = &feed, .next = feed_next};
        const ttt_train_run tr = {.config_hash = "", .series = "", .mixer = "", .results = res};
        ttt_train_result tres;
        s = ttt_train(&m, &tc, &data, &tr, &tres, err);
    }
    float *loss = curves, *lr = curves + N, *gn = curves + 2 * N, *ids = curves + 3 * N;
    for (int i = 0; s == TTT_OK && i < 3 * N; i++) curves[i] = NAN;
    for (int i = 0; s == TTT_OK && i < ttt_results_count(res); i++) {
        const ttt_record *rec = ttt_results_get(res, i);
        const ttt_field *kind = ttt_record_get(rec, "kind"), *step = ttt_record_get(rec, "step");
        if (!kind || strcmp(kind->str, "train") != 0 || !step) continue;
        const long k = (long)step->num - 1;
        if (k < 0 || k >= N) continue;
        const ttt_field *fl = ttt_record_get(rec, "loss"), *fr = ttt_record_get(rec, "lr"),
                        *fg = ttt_record_get(rec, "grad_norm");
        if (fl && fr && fg) {
            loss[k] = (float)fl->num;
            lr[k] = (float)fr->num;
            gn[k] = (float)fg->num;
        }
    }
    for (int i = 0; s == TTT_OK && i < N; i++)
        if (isnan(lr[i]))
            s = ttt_error_set(err, TTT_ERR_UNSUPPORTED, "benchmark: dump_steps: the trainer "
                                                        "recorded no step %d", i + 1);
    if (s == TTT_OK) {
        for (int i = 0; i < np; i++) {
            const ttt_param *p = m.params.p[i];
            for (int g = 0; g < 2; g++) {
                ttt_st_tensor *t = &ts[2 * i + g];
                t->name = (char *)strlist_add(&names, "%s.%s", g ? "final" : "param", p->name);
                t->ndim = p->ndim;
                for (int d = 0; d < p->ndim; d++) t->shape[d] = p->shape[d];
                t->data = g ? p->data : init[i];
            }
        }
        for (size_t i = 0; i < cells; i++) {
            ids[i] = (float)feed.set.tokens[i];
            ids[cells + i] = (float)feed.set.labels[i];
        }
        ts[2 * np] = (ttt_st_tensor){.name = "tokens", .ndim = 3, .shape = {N, B, L}, .data = ids};
        ts[2 * np + 1] = (ttt_st_tensor){.name = "labels", .ndim = 3, .shape = {N, B, L},
                                         .data = ids + cells};
        ts[2 * np + 2] = (ttt_st_tensor){.name = "loss", .ndim = 1, .shape = {N}, .data = loss};
        ts[2 * np + 3] = (ttt_st_tensor){.name = "lr", .ndim = 1, .shape = {N}, .data = lr};
        ts[2 * np + 4] = (ttt_st_tensor){.name = "grad_norm", .ndim = 1, .shape = {N},
                                         .data = gn};
        dump_meta(&meta, run, mc, &m, -1);
        strlist_add(&meta, "parity.steps");
        strlist_add(&meta, "%d", N);
        strlist_add(&meta, "parity.warmup");
        strlist_add(&meta, "%ld", tc.adamw.warmup);
        if (names.oom || meta.oom)
            s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory for the dump");
    }
    if (s == TTT_OK)
        s = ttt_st_write(path, ts, nt, (const char *const *)meta.s, meta.n / 2, err);
    strlist_free(&names);
    strlist_free(&meta);
    if (res) ttt_results_free(res);
    free(ts);
    free(curves);
    for (int i = 0; init && i < np; i++) free(init[i]);
    free(init);
    ttt_seq_model_free(&m);
    ttt_token_set_free(&feed.set);
    if (s != TTT_OK) ttt_error_prefix(err, "benchmark: dump_steps");
    return s;
}

static ttt_status bench_train_step(ttt_task_run *run, ttt_error *err) {
    const bench_cfg *bc = run->cfg;
    const int repeats = bc->repeats;
    const ttt_seq_model_config mc = bc->trained.model;
    const ttt_train_config tc = bc->trained.train;
    char mixer[128];
    ttt_seq_model_describe(&mc, mixer, sizeof mixer);
    const int ttt_mixer = uses_layer(&mc);
    const char *preset = ttt_mixer && mc.layer.preset ? mc.layer.preset : mixer;
    const char *form = ttt_mixer ? train_form_used(&mc) : "softmax";
    const ttt_form_entry *fe = ttt_mixer ? train_form_entry(&mc) : NULL;
    const int chunked = fe && fe->chunked;
    ttt_status s = TTT_OK;
    for (int li = 0; li < bc->seq_len.n && s == TTT_OK; li++) {
        const int L = (int)bc->seq_len.v[li];
        ttt_mqar_config c;
        train_mqar_config(bc, L, &c);
        train_feed feed = {.B = tc.batch, .n_batches = TRAIN_BATCHES};
        ttt_rng root;
        ttt_rng_seed(&root, run->seed);
        ttt_rng r = ttt_rng_fork(&root, ttt_hash_str("benchmark/mqar"));
        TTT_TRY(ttt_mqar_make_set(&feed.set, &c, TRAIN_BATCHES * tc.batch, &r, err));
        if (bc->dump && run->run_dir) {
            ttt_seq_batch b0;
            feed.next = 0;
            feed_next(&feed, &b0, err);
            s = dump_train_step(run, &mc, &b0, err);
        }
        if (s == TTT_OK && bc->dump_steps > 0 && run->run_dir)
            s = dump_train_steps(run, &mc, &tc, &c, err);
        double t1 = NAN; /* the 1-thread step, when measured */
        int done[BENCH_MAX_THREADS + 1] = {0};
        for (int ni = 0; ni < bc->threads.n && s == TTT_OK; ni++) {
            int nt = (int)bc->threads.v[ni];
            if (nt == 0) nt = machine_threads();
            if (nt > BENCH_MAX_THREADS) nt = BENCH_MAX_THREADS;
            const int used = nt < tc.batch ? nt : tc.batch; /* a shard holds ≥ 1 sequence */
            ttt_progress_update(run->progress, ++run->work_done, run->label);
            if ((s = ttt_train_check_stop(err)) != TTT_OK) break; /* docs/hardening.md "Signals" */
            if (done[used]++) continue;
            train_timing tm;
            memset(&tm, 0, sizeof tm);
            s = time_train_steps(&mc, &tc, &feed, used, repeats, run->seed, &tm, err);
            if (s != TTT_OK) break;
            const double best = tm.best, median = tm.median;
            if (used == 1 && isnan(t1)) t1 = best;
            const double tokens = (double)tc.batch * L;
            ttt_record rec;
            ttt_record_clear(&rec);
            char series[192];
            if (chunked)
                snprintf(series, sizeof series, "%s %s C=%d L=%d", preset, form, mc.layer.chunk,
                         L);
            else
                snprintf(series, sizeof series, "%s %s L=%d", preset, form, L);
            ttt_record_str(&rec, "series", series);
            ttt_record_str(&rec, "measure", "train_step");
            ttt_record_str(&rec, "preset", preset);
            ttt_record_str(&rec, "form", form);
            ttt_record_str(&rec, "mixer", mixer);
            if (chunked) ttt_record_num(&rec, "chunk", mc.layer.chunk);
            ttt_record_num(&rec, "d_model", mc.d_model);
            ttt_record_num(&rec, "layers", mc.n_layers);
            ttt_record_num(&rec, "heads", mc.n_heads);
            ttt_record_num(&rec, "d_head", mc.head_dim);
            ttt_record_num(&rec, "batch", tc.batch);
            ttt_record_num(&rec, "seq_len", L);
            ttt_record_num(&rec, "vocab", c.vocab);
            ttt_record_num(&rec, "threads", used);
            ttt_record_num(&rec, "shards", used);
            ttt_record_num(&rec, "steps", repeats);
            ttt_record_num(&rec, "seconds", best);
            ttt_record_num(&rec, "seconds_median", median);
            ttt_record_num(&rec, "tokens_per_s", tokens / best);
            ttt_record_num(&rec, "tokens_per_s_median", tokens / median);
            ttt_record_num(&rec, "cpu_seconds", tm.cpu_best);
            if (!isnan(t1)) ttt_record_num(&rec, "speedup_1t", t1 / best);
            const double MB = 1024.0 * 1024.0;
            ttt_record_num(&rec, "peak_mb", tm.peak_bytes / MB);
            ttt_record_num(&rec, "act_mb", (double)tm.mem.activations / MB);
            ttt_record_num(&rec, "act_grad_mb", (double)tm.mem.act_grads / MB);
            ttt_record_num(&rec, "work_mb", (double)tm.mem.workspace / MB);
            ttt_record_num(&rec, "param_mb", tm.param_bytes / MB);
            ttt_record_num(&rec, "optim_mb", tm.optim_bytes / MB);
            ttt_record_num(&rec, "shard_mb", tm.shard_bytes / MB);
            ttt_record_num(&rec, "data_mb", tm.data_bytes / MB);
            ttt_record_num(&rec, "arena_held_mb", (double)tm.mem.arena_held / MB);
            ttt_record_num(&rec, "rss_mb", tm.rss_bytes / MB);
            ttt_record_num(&rec, "faults_first", tm.faults_first);
            ttt_record_num(&rec, "faults_per_step", tm.faults_step);
            ttt_results_add(run->results, &rec, 1);
        }
        ttt_token_set_free(&feed.set);
    }
    return s;
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
    D->mem = ttt_fault_malloc(sizeof(float) * D->mem_floats);
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
    ttt_status st[BENCH_MAX_HEADS];
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

/* The fastest of `repeats` samples (each ≥ BENCH_MIN_SAMPLE_SECONDS) after one warm-up call:
 * wall seconds per call, and CPU seconds per call summed over the threads (the best sample of
 * each). On a shared machine a call longer than a scheduler time slice is preempted in every
 * sample, which inflates wall time but not CPU time: cpu_seconds measures the work, seconds the
 * throughput. A sample of each sgemm probe follows every sample of the layer. */
static ttt_status bench_time(const ttt_layer *L, bench_data *D, int nthreads, int split_seq,
                             bench_thread *th,
                             int repeats, sgemm_probe *probes, int n_probes, double *seconds,
                             double *cpu_seconds, ttt_error *err) {
    /* the heads' errors, allocated once: the number of calls depends on the machine's speed,
     * and what a run allocates must not (a test fails each allocation of a run in turn) */
    ttt_error *errs = ttt_fault_calloc((size_t)D->H, sizeof *errs);
    if (!errs) return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
    double t0 = ttt_now();
    /* warm-up: caches, arena blocks, pages */
    ttt_status s = bench_forward(L, D, nthreads, split_seq, th, errs, err);
    const double once = ttt_now() - t0;
    const long calls = (long)(BENCH_MIN_SAMPLE_SECONDS / (once + 1e-9)) + 1;
    double best = INFINITY, best_cpu = INFINITY;
    for (int r = 0; r < repeats && s == TTT_OK; r++) {
        t0 = ttt_now();
        const double c0 = cpu_now();
        for (long c = 0; c < calls && s == TTT_OK; c++) {
            s = bench_forward(L, D, nthreads, split_seq, th, errs, err);
            /* between calls too: a sample may hold many (a read of the flag, no MPI poll) */
            if (s == TTT_OK && *ttt_train_stop_flag())
                s = ttt_error_set(err, TTT_ERR_INTERRUPTED, "interrupted");
        }
        const double dt = (ttt_now() - t0) / calls, dc = (cpu_now() - c0) / calls;
        if (dt < best) best = dt;
        if (dc < best_cpu) best_cpu = dc;
        for (int p = 0; p < n_probes; p++) sgemm_probe_sample(&probes[p]);
        /* a sample at a time (docs/hardening.md "Signals") */
        if (s == TTT_OK) s = ttt_train_check_stop(err);
    }
    free(errs);
    *seconds = best;
    *cpu_seconds = best_cpu;
    return s;
}

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
        const double t0 = ttt_now(), c0 = cpu_now();
        for (long c = 0; c < calls; c++)
            for (int hh = 0; hh < H; hh++) {
                memset(h, 0, sizeof(float) * (size_t)d * N);
                ttt_selective_scan(ctx, y + hh * td, h, x + hh * td, dl + hh * td, A,
                                   B + (size_t)hh * T * N, C + (size_t)hh * T * N, D, T, d, N,
                                   blocks);
            }
        const double dt = (ttt_now() - t0) / calls, dc = (cpu_now() - c0) / calls;
        if (r < 0) {
            calls = (long)(BENCH_MIN_SAMPLE_SECONDS / (dt + 1e-9)) + 1;
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

/* One bench_ss_time, under ttt_arena_run (bench_selective). */
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

static ttt_status bench_selective(ttt_task_run *run, ttt_error *err) {
    const bench_cfg *bc = run->cfg;
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
                    if (nt == 0) nt = machine_threads();
                    if (nt > BENCH_MAX_THREADS) nt = BENCH_MAX_THREADS;
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

/* gates: auto — the preset's own answer: the forget gate of its block in the trained model
 * (ttt_block_defaults.gate, layers/layer.h), a gate per token (scalar) or per token and key
 * dimension (vector); a constant or per-head gate, a tuple without a preset: none. */
static int gates_kind(const bench_cfg *bc, const ttt_layer *L) {
    if (bc->gates >= 0) return bc->gates;
    const ttt_preset *p = L->preset ? ttt_preset_find(L->preset) : NULL;
    const char *g = p && p->block.gate ? p->block.gate : "none";
    return strcmp(g, "vector") == 0 ? 2 : strcmp(g, "scalar") == 0 ? 1 : 0;
}

static ttt_status benchmark_run(ttt_task_run *run, ttt_error *err) {
    const bench_cfg *bc = run->cfg;
    if (bc->train_step) return bench_train_step(run, err);
    if (bc->selective) return bench_selective(run, err);
    const int repeats = bc->repeats;
    ttt_blas_set_threads(1); /* BLAS single-threaded inside the OpenMP threads */
    ttt_status s = TTT_OK;
    for (int di = 0; di < bc->head_dims.n && s == TTT_OK; di++) {
        const int d = (int)bc->head_dims.v[di];
        const ttt_layer L = bc->layers[di];
        const int gates = gates_kind(bc, &L);
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
        for (int hi = 0; hi < bc->heads.n && s == TTT_OK; hi++) {
            const int H = (int)bc->heads.v[hi];
            for (int ti = 0; ti < bc->tokens.n && s == TTT_OK; ti++) {
                const int T = (int)bc->tokens.v[ti];
                bench_data *D = ttt_fault_malloc(sizeof *D);
                if (!D) { /* the probes are freed below */
                    s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
                    break;
                }
                s = bench_data_make(D, H, T, d, gates, run->seed, err);
                double t1 = NAN; /* this (T, d, H) on one thread, when measured */
                int done[BENCH_MAX_THREADS + 1] = {0};
                for (int ni = 0; ni < bc->threads.n && s == TTT_OK; ni++) {
                    int nt = (int)bc->threads.v[ni];
                    if (nt == 0) nt = machine_threads();
                    if (nt > BENCH_MAX_THREADS) nt = BENCH_MAX_THREADS;
                    /* split: heads — threads beyond H have nothing to do */
                    const int used = bc->split_sequence || nt < H ? nt : H;
                    ttt_progress_update(run->progress, ++run->work_done, run->label);
                    if ((s = ttt_train_check_stop(err)) != TTT_OK) break; /* "Signals" */
                    if (done[used]++) continue; /* e.g. [1, 0] with one head: measured already */
                    bench_thread th[BENCH_MAX_THREADS];
                    /* one call's temporaries: the layer's copies of o, q (scale), β and gates,
                     * plus the form's scratch; 2× for slack */
                    const size_t block = (size_t)2 * sizeof(float) * ((size_t)T * (3 * d + 2) + 
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
                    s = bench_time(&L, D, used, bc->split_sequence, th, repeats, probes, 2, &secs, &cpu, err);
                    const double r64 = sgemm_probe_gflops(&probes[0]);
                    const double rshape = sgemm_probe_gflops(&probes[1]);
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
                    const double flop = H * form_flops(&L, &in);
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
                    ttt_record_str(&rec, "gates", gates == 2 ? "vector" : gates ? "scalar" : "none");
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
        sgemm_probe_free(&probes[0]);
        sgemm_probe_free(&probes[1]);
    }
    return s;
}

static void benchmark_charts(ttt_results *res, const void *cfg) {
    if (((const bench_cfg *)cfg)->train_step) {
        ttt_chart c = ttt_chart_make("train_tokens_per_s",
                                     "Training step throughput (forward+backward+AdamW)",
                                     "threads", "tokens_per_s", "series",
                                     "threads (= shards of the batch)",
                                     "tokens / s (batch x seq_len / step time)");
        c.y_from_zero = 1;
        ttt_results_add_chart(res, &c);
        ttt_results_set_main(res, "tokens_per_s", "threads");
        return;
    }
    ttt_chart c = ttt_chart_make("tokens_per_s", "Forward throughput", "T", "tokens_per_s",
                                 "series", "tokens T", "tokens / s (all heads)");
    c.log_x = 1;
    c.y_from_zero = 1;
    ttt_results_add_chart(res, &c);
    ttt_results_set_main(res, "tokens_per_s", "T");
    if (((const bench_cfg *)cfg)->selective) return; /* no sgemm reference there */
    ttt_chart f = ttt_chart_make("frac_sgemm", "Achieved GFLOP/s per thread / single-thread sgemm",
                                 "T", "frac_sgemm", "series", "tokens T",
                                 "fraction of sgemm at the kernel's shape");
    f.log_x = 1;
    f.y_from_zero = 1;
    ttt_results_add_chart(res, &f);
}

static const char *const benchmark_columns[] = {
    "preset", "form", "gates", "chunk", "T", "d_head", "heads", "threads", "split", "tokens_per_s",
    "gflops", "sgemm64_gflops", "sgemm_shape_gflops", "frac_sgemm", "frac_sgemm_cpu",
    "speedup_1t", "peak_mb", NULL};

static const char *const train_step_columns[] = {
    "preset", "form", "chunk", "d_model", "batch", "seq_len", "threads", "tokens_per_s",
    "tokens_per_s_median", "seconds", "cpu_seconds", "speedup_1t", "peak_mb", "act_mb",
    "act_grad_mb", "work_mb", "arena_held_mb", "rss_mb", "faults_per_step", NULL};

static const char *const selective_columns[] = {
    "preset", "form", "blocks", "T", "d_head", "d_state", "heads", "threads", "tokens_per_s",
    "gflops", "cpu_seconds", "gflops_cpu", "speedup_1t", NULL};

static const char *const *benchmark_columns_for(const void *cfg) {
    const bench_cfg *c = cfg;
    return c->train_step ? train_step_columns : c->selective ? selective_columns
                                                             : benchmark_columns;
}

/* The forward calls of measure: forward, for `ttt check`: every head size × T, with the gates
 * and per-token rates benchmark_run passes. */
static int benchmark_layer_calls(const void *cfg, const ttt_layer **L, ttt_form_inputs *in,
                                 int max) {
    const bench_cfg *bc = cfg;
    if (bc->train_step || bc->selective || !bc->layers) return 0;
    int n = 0;
    for (int di = 0; di < bc->head_dims.n; di++)
        for (int ti = 0; ti < bc->tokens.n && n < max; ti++) {
            const ttt_layer *Ld = &bc->layers[di];
            const int gates = gates_kind(bc, Ld);
            L[n] = Ld;
            in[n++] = (ttt_form_inputs){.T = (long)bc->tokens.v[ti], .eta = 1,
                                        .gate = gates == 2 ? TTT_FORM_GATE_KEY
                                                : gates || Ld->decay != 1.0f
                                                    ? TTT_FORM_GATE_TOKEN
                                                    : TTT_FORM_GATE_NONE};
        }
    return n;
}

const ttt_task ttt_task_benchmark = {
    .name = "benchmark",
    .help = "forward throughput per T, head size, heads and threads: tokens/s, GFLOP/s, fraction "
            "of single-thread sgemm (timed in the same run), peak memory. FLOPs per token "
            "(chunk C): linear attention recurrent 4 dk dv, chunkwise 4 dk dv + 2C(dk + dv); "
            "delta rule recurrent 6 dk dv, chunkwise 6 dk dv + C(5dk + 3dv) (docs/math.md 5.2/5.3 "
            "products, masked ones dense; src/tasks/benchmark.c). measure: train_step: tokens/s "
            "of a whole training step (forward, backward, AdamW) of the `model:` on MQAR "
            "batches, per seq_len and threads",
    .options = benchmark_options,
    .cfg_size = sizeof(bench_cfg),
    .parse = benchmark_parse,
    .cfg_free = benchmark_cfg_free,
    .work = benchmark_work,
    .run = benchmark_run,
    .columns = benchmark_columns,
    .columns_for = benchmark_columns_for,
    .charts = benchmark_charts,
    .tiny = "task: {kind: benchmark, tokens: [32], head_dims: [8], heads: [1], threads: [1],\n"
            "       repeats: 1}\n"
            "layer: {preset: linear_attention, chunk: 8}\n",
    .layer_calls = benchmark_layer_calls,
};
