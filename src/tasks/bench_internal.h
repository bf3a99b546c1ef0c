/* What the files of the benchmark task (src/tasks/benchmark.c, bench_*.c) share and nothing else
 * sees: its configuration, the sgemm reference, the FLOP counts, the three measurements and the
 * dumps. Private to src/tasks. */
#ifndef TTT_BENCH_INTERNAL_H
#define TTT_BENCH_INTERNAL_H

#include <stdint.h>

#include "layer.h"
#include "seqmodel.h"
#include "task.h"
#include "trained.h"
#include "data.h"

#define TTT_BENCH_MAX_THREADS 64

#define TTT_BENCH_MAX_HEADS 1024

/* A timed sample repeats the forward pass until it lasts at least this long, so that short
 * configurations are not measured at the clock's resolution; short enough (about one scheduler
 * time slice) that on a shared machine some samples run without being preempted. */
#define TTT_BENCH_MIN_SAMPLE_SECONDS 0.005

/* A validated list option, read into C. */
typedef struct ttt_bench_list {
    long *v; /* (n) */
    int n;
} ttt_bench_list;

/* The parsed configuration of a point (benchmark_parse). */
typedef struct ttt_bench_cfg {
    int train_step;                      /* measure: train_step (else forward) */
    ttt_bench_list tokens, head_dims, heads, threads, seq_len;
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
} ttt_bench_cfg;

/* Single-thread cblas_sgemm C = A B, row-major A (m, k), B (k, n), timed in samples of
 * ≥ TTT_BENCH_MIN_SAMPLE_SECONDS on the calling thread. The machine is shared: a sample that
 * another process interrupted is slow, so rates are the best sample, and samples of sgemm are
 * taken between the samples of the layer (bench_time) so that both see the same conditions. */
typedef struct ttt_bench_sgemm_probe {
    int m, n, k;
    long reps; /* calls per sample */
    float *a, *b, *c;
    double best; /* best seconds per call so far */
} ttt_bench_sgemm_probe;

double ttt_bench_sgemm_probe_sample(ttt_bench_sgemm_probe *p);

int ttt_bench_sgemm_probe_init(ttt_bench_sgemm_probe *p, int m, int n, int k);

double ttt_bench_sgemm_probe_gflops(const ttt_bench_sgemm_probe *p);

void ttt_bench_sgemm_probe_free(ttt_bench_sgemm_probe *p);

/* The form a sequence model's TTT layers run in a training step: tape recorded, with the gates
 * and learning rates the model feeds them. */
const ttt_form_entry *ttt_bench_train_form_entry(const ttt_seq_model_config *mc);

const char *ttt_bench_train_form_used(const ttt_seq_model_config *mc);

/* The mixer is a TTT layer built from the `layer:` section (its registry entry's answer). */
int ttt_bench_uses_layer(const ttt_seq_model_config *mc);

/* The FLOPs of the form that runs L for inputs `in` (the registry entry's count), or NAN. */
double ttt_bench_form_flops(const ttt_layer *L, const ttt_form_inputs *in);

/* CPU seconds used by the whole process so far (all threads). */
double ttt_bench_cpu_now(void);

int ttt_bench_machine_threads(void);

ttt_status ttt_bench_train_step_check(ttt_bench_cfg *bc, const ttt_cfg_node *root,
                                      ttt_cfg_node *sections, ttt_error *err);

typedef struct ttt_bench_train_feed {
    ttt_token_set set; /* (n_batches·B, L) */
    int B, n_batches;
    long next;      /* requests so far */
    long n_stamps;  /* capacity of wall / cpu / faults */
    double *wall;   /* (n_stamps) ttt_now() at request i */
    double *cpu;    /* (n_stamps) process CPU seconds at request i */
    double *faults; /* (n_stamps) the process's minor page faults so far at request i */
} ttt_bench_train_feed;

ttt_status ttt_bench_feed_next(void *user, ttt_seq_batch *out, ttt_error *err);

/* A growing list of malloc'd strings (safetensors names and metadata). */
typedef struct ttt_bench_strlist {
    char **s;
    int n, cap, oom;
} ttt_bench_strlist;

/* Metadata "<prefix><key>" = value for every scalar of a resolved configuration map, one level
 * of nested maps as "<prefix><key>.<subkey>" (layer.optimizer). */
void ttt_bench_meta_from_map(ttt_bench_strlist *meta, const char *prefix, const ttt_cfg_node *map,
                             int depth);

ttt_status ttt_bench_dump_train_step(const ttt_task_run *run, const ttt_seq_model_config *mc,
                                  const ttt_seq_batch *b, ttt_error *err);

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
ttt_status ttt_bench_dump_train_steps(const ttt_task_run *run, const ttt_seq_model_config *mc,
                                   const ttt_train_config *base, const ttt_mqar_config *mq,
                                   ttt_error *err);

ttt_status ttt_bench_train_step(ttt_task_run *run, ttt_error *err);

ttt_status ttt_bench_selective(ttt_task_run *run, ttt_error *err);

/* gates: auto — the preset's own answer: the forget gate of its block in the trained model
 * (ttt_block_defaults.gate, layers/layer.h), a gate per token (scalar) or per token and key
 * dimension (vector); a constant or per-head gate, a tuple without a preset: none. */
int ttt_bench_gates_kind(const ttt_bench_cfg *bc, const ttt_layer *L);

ttt_status ttt_benchmark_run(ttt_task_run *run, ttt_error *err);

#endif
