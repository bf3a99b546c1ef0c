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
#include "bench_internal.h"

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
    {"heads", TTT_OPT_INT_LIST, "[1, 8]", 1, TTT_BENCH_MAX_HEADS, NULL,
     "forward: independent heads (sequences) per call, run in parallel over the threads"},
    {"threads", TTT_OPT_INT_LIST, "[1, 0]", 0, TTT_BENCH_MAX_THREADS, NULL,
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



static void benchmark_cfg_free(void *cfg) {
    ttt_bench_cfg *c = cfg;
    ttt_bench_list *lists[] = {&c->tokens, &c->head_dims, &c->heads, &c->threads, &c->seq_len};
    for (int i = 0; i < 5; i++) free(lists[i]->v);
    for (int i = 0; i < c->n_meta; i++) free(c->meta[i]);
    free(c->meta);
    free(c->layers);
    memset(c, 0, sizeof *c);
}

static long benchmark_work(const void *cfg) {
    const ttt_bench_cfg *c = cfg;
    if (c->train_step) return (long)c->seq_len.n * c->threads.n;
    return (long)c->tokens.n * c->head_dims.n * c->heads.n * c->threads.n;
}

static ttt_status read_list(ttt_bench_list *l, const ttt_cfg_node *task, const char *key,
                            ttt_error *err) {
    return ttt_task_read_ints(task, key, &l->v, &l->n, err);
}

static ttt_status benchmark_parse(void *cfg, const ttt_cfg_node *root, ttt_cfg_node *sections,
                                  ttt_error *err) {
    ttt_bench_cfg *c = cfg;
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
        TTT_TRY(ttt_bench_train_step_check(c, root, sections, err));
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
        /* the values `dump` records, as resolved (the sections the parse rendered) */
        ttt_bench_strlist meta = {0};
        ttt_bench_meta_from_map(&meta, "model.", ttt_cfg_get(sections, "model"), 0);
        ttt_bench_meta_from_map(&meta, "layer.", ttt_cfg_get(sections, "layer"), 0);
        ttt_bench_meta_from_map(&meta, "train.", ttt_cfg_get(sections, "train"), 0);
        c->meta = meta.s;
        c->n_meta = meta.n;
        if (meta.oom) return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
        return TTT_OK;
    }
    c->layers =
        ttt_fault_calloc((size_t)(c->head_dims.n > 0 ? c->head_dims.n : 1), sizeof *c->layers);
    if (!c->layers) return ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
    /* One layer per head size, each from the section as given; the first one's rendering is the
     * resolved section (the same for every size). */
    for (int i = 0; i < c->head_dims.n; i++) {
        const int d = (int)c->head_dims.v[i];
        ttt_cfg_node *layer_r = NULL;
        TTT_TRY(ttt_layer_parse_section(ttt_cfg_get(root, "layer"), d, d, 0, &c->layers[i],
                                        i == 0 ? &layer_r : NULL, err));
        if (i == 0) ttt_cfg_map_set(sections, "layer", layer_r);
    }
    /* The largest measurement's inputs (bench_data_make: q, k, v, o, η and the gates per head)
     * and one forward's state and scratch, checked here so that `ttt check` refuses what the run
     * would refuse hours in, at the same size check. */
    for (int i = 0; i < c->head_dims.n; i++)
        for (int t = 0; t < c->tokens.n; t++)
            for (int h = 0; h < c->heads.n; h++) {
                const double T = (double)c->tokens.v[t], d = (double)c->head_dims.v[i];
                const double nl = c->layers[i].levels > 1 ? c->layers[i].levels : 1;
                const double per =
                    (3.0 + nl) * T * d + T + (c->gates == 2 ? T * d : c->gates ? T : 0.0);
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

static void benchmark_charts(ttt_results *res, const void *cfg) {
    if (((const ttt_bench_cfg *)cfg)->train_step) {
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
    if (((const ttt_bench_cfg *)cfg)->selective) return; /* no sgemm reference there */
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
    "act_grad_mb", "work_mb", "arena_held_mb", "rss_mb", "faults_per_step", "gpu_peak_mb",
    "gpu_reserved_mb", NULL};

static const char *const selective_columns[] = {
    "preset", "form", "blocks", "T", "d_head", "d_state", "heads", "threads", "tokens_per_s",
    "gflops", "cpu_seconds", "gflops_cpu", "speedup_1t", NULL};

static const char *const *benchmark_columns_for(const void *cfg) {
    const ttt_bench_cfg *c = cfg;
    return c->train_step ? train_step_columns : c->selective ? selective_columns
                                                             : benchmark_columns;
}

/* The forward calls of measure: forward, for `ttt check`: every head size × T, with the gates
 * and per-token rates ttt_benchmark_run passes. */
static int benchmark_layer_calls(const void *cfg, const ttt_layer **L, ttt_form_inputs *in,
                                 int max) {
    const ttt_bench_cfg *bc = cfg;
    if (bc->train_step || bc->selective || !bc->layers) return 0;
    int n = 0;
    for (int di = 0; di < bc->head_dims.n; di++)
        for (int ti = 0; ti < bc->tokens.n && n < max; ti++) {
            const ttt_layer *Ld = &bc->layers[di];
            const int gates = ttt_bench_gates_kind(bc, Ld);
            L[n] = Ld;
            in[n++] = (ttt_form_inputs){.T = (long)bc->tokens.v[ti], .eta = 1,
                                        .gate = gates == 2 ? TTT_FORM_GATE_KEY
                                                : gates || Ld->decay != 1.0f
                                                    ? TTT_FORM_GATE_TOKEN
                                                    : TTT_FORM_GATE_NONE};
        }
    return n;
}

/* measure: train_step trains (its longest seq_len sets the step's memory); forward does not */
static const ttt_trained_cfg *benchmark_trained(const void *cfg) {
    const ttt_bench_cfg *bc = cfg;
    return bc->train_step ? &bc->trained : NULL;
}

/* The `task:` section from what benchmark_parse read. */
static ttt_status benchmark_section(const void *cfg, const ttt_cfg_node *given,
                                    ttt_cfg_node **out, ttt_error *err) {
    const ttt_bench_cfg *c = cfg;
    static const char *const gates[] = {"auto", "none", "scalar", "vector"};
    const ttt_task_value v[] = {
        {.key = "measure",
         .text = c->train_step ? "train_step" : c->selective ? "selective_scan" : "forward"},
        {.key = "state_size", .number = c->state_size},
        {.key = "scan_block", .number = c->scan_block},
        {.key = "tokens", .list = c->tokens.v, .n = c->tokens.n},
        {.key = "head_dims", .list = c->head_dims.v, .n = c->head_dims.n},
        {.key = "heads", .list = c->heads.v, .n = c->heads.n},
        {.key = "threads", .list = c->threads.v, .n = c->threads.n},
        {.key = "gates", .text = gates[c->gates + 1]},
        {.key = "split", .text = c->split_sequence ? "sequence" : "heads"},
        {.key = "repeats", .number = c->repeats},
        {.key = "seq_len", .list = c->seq_len.v, .n = c->seq_len.n},
        {.key = "vocab", .number = c->vocab},
        {.key = "pairs", .number = c->pairs},
        {.key = "dump", .number = c->dump},
        {.key = "dump_steps", .number = c->dump_steps},
    };
    return ttt_task_section(benchmark_options, given, v, (int)(sizeof v / sizeof *v), out,
                            err);
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
    .cfg_size = sizeof(ttt_bench_cfg),
    .parse = benchmark_parse,
    .section = benchmark_section,
    .cfg_free = benchmark_cfg_free,
    .work = benchmark_work,
    .run = ttt_benchmark_run,
    .columns = benchmark_columns,
    .columns_for = benchmark_columns_for,
    .charts = benchmark_charts,
    .tiny = "task: {kind: benchmark, tokens: [32], head_dims: [8], heads: [1], threads: [1],\n"
            "       repeats: 1}\n"
            "layer: {preset: linear_attention, chunk: 8}\n",
    .layer_calls = benchmark_layer_calls,
    .trained = benchmark_trained,
};
