/* Outer-loop training of a sequence model (model.h): the `train:` section of an experiment.
 *
 * One step: the task's next batch → forward with the tape → mean loss over the batch's scored
 * positions → backward → gradient clipping → AdamW with warm-up and cosine schedule (adamw.h).
 * Every `eval_every` steps (and at the end) the model is scored on the task's fixed evaluation
 * batches; every `log_every` steps a training record is added. Records (results.h) go to the
 * run's results and, as they happen, one JSON line each to the point's journal (stream_path), with
 * a progress bar on stderr.
 *
 * Records: kind "train": step, loss (mean over the window since the previous record), accuracy,
 * grad_norm (mean ‖g‖ before clipping), lr, tokens_per_s; kind "eval": step, eval_loss,
 * eval_accuracy (and eval_bpb / loss_bpb for byte tasks). Every record also carries series,
 * point and mixer.
 *
 * Data parallelism: a batch is split into `shards` parts (as even as possible, in order); each
 * part runs forward and backward with its own arena, tape and gradient buffers (on its own
 * OpenMP thread when there are several), and the shard gradients are then added in shard order.
 * The result depends on `shards`, never on the number of threads: same seed, same bits; nor on
 * the number of MPI ranks that share the shards (ttt_train_run.comm, docs/scaling.md).
 *
 * Checkpoints (checkpoint.h) in `ckpt_dir` every `checkpoint_every` steps and at the end hold the
 * parameters, AdamW's moments and step, the task's data state (rng/sampler words), the metrics
 * window in progress, the last train loss, the time and tokens so far, and the length of the
 * record journal (stream_path) it has seen — not the records. A run started where a checkpoint
 * exists resumes from it (after checking that it was written by the same configuration) and ends with
 * the same parameters, metrics and records as an uninterrupted run (bit for bit, except the
 * wall-clock fields tokens_per_s and seconds). A corrupt ckpt-last falls back to ckpt-prev.
 *
 * Non-finite numbers: a NaN/Inf training loss, gradient or updated parameter stops the run with
 * TTT_ERR_NUMERIC and a message naming the step and what went non-finite ("step 12: the training
 * loss is nan ..." / "step 12: gradient of 'layer0.mixer.wq' is inf at element 3 = [0, 3] ...");
 * nothing is written after the last good step, so the last checkpoint stays the last good one
 * (the message names it). */
#ifndef TTT_TRAIN_H
#define TTT_TRAIN_H

#include <signal.h>
#include <stdint.h>

#include "adamw.h"
#include "config.h"
#include "device.h"
#include "seqmodel.h"
#include "progress.h"
#include "results.h"

/* The `train:` options. */
extern const ttt_option ttt_train_options[];

/* The block size of each training shard's arena (bytes; a larger tensor gets a block of its
 * own); the blocks are kept across steps (train.c shards_reset). The estimates count one block
 * per shard besides the step (trained.c). */
#define TTT_TRAIN_ARENA_BLOCK ((size_t)16 << 20)

/* The most ranks of train.devices. */
#define TTT_MAX_TRAIN_DEVICES 64

typedef struct ttt_train_config {
    long steps;            /* number of optimizer updates */
    int batch;             /* sequences per step */
    int shards;            /* parts of a batch computed independently (data parallelism) */
    ttt_adamw_config adamw;
    long eval_every;       /* 0 = only at the end */
    long log_every;
    long checkpoint_every; /* 0 = only at the end */
    long stop_at;          /* stop after this step as if interrupted (0 = never) */
    int threads;           /* OpenMP threads for the shards (0 = as many as shards, ≤ cores) */
    ttt_device device;     /* train.device: the host (cpu, the default) or cuda:N */
    ttt_dtype dtype;       /* train.dtype: float32 (the default) or bfloat16 (cuda only) */
    char device_where[256]; /* where train.device was given (file:line:col), "" when absent */
    /* train.devices (docs/scaling.md "Several GPUs"): the ranks of data-parallel training on
     * GPUs, rank r on devices[r] (a GPU may repeat); 0 = train.device alone. When given,
     * device is devices[0] and device_where says where train.devices was given. */
    int n_devices;
    ttt_device devices[TTT_MAX_TRAIN_DEVICES];
    /* train.recompute (docs/training.md "Memory of a training step"): the first `recompute`
     * blocks keep only their input on the tape and run their forward again in the backward;
     * 0 = every block keeps its activations. Same gradients bit for bit, less memory. */
    int recompute;
} ttt_train_config;

/* Validate the `train:` mapping (only read) and read it into c; *resolved receives the section as
 * config.resolved.yaml shows it, a new tree the caller owns (the given keys and the defaults).
 * The AdamW values are checked too.
 *
 * train.device (cpu | cuda | cuda:N, cuda = cuda:0) and train.dtype (float32 | bfloat16) are
 * read into c->device and c->dtype; unlike the other options their defaults (cpu, float32) are
 * not written into the resolved section when they are absent, so that config.resolved.yaml and the
 * configuration hash of an experiment that does not name them stay what they were before the
 * options existed (docs/training.md "Device and precision"). Refused, each located: a value
 * that is none of those; bfloat16 on the host (it is the GPU's mixed precision); and a CUDA
 * device this process cannot use (a build without CUDA, no GPU or driver, N at or above the
 * device count: the reason from the device seam, device.h). */
ttt_status ttt_train_config_parse_section(const ttt_cfg_node *map, ttt_train_config *c,
                                          ttt_cfg_node **resolved, ttt_error *err);
/* The same for a caller that holds the section alone (the tests): map is replaced by its
 * rendering. */
ttt_status ttt_train_config_parse(ttt_cfg_node *map, ttt_train_config *c, ttt_error *err);

/* train.device's text into *d: "cpu" (the host), "cuda" (cuda:0) or "cuda:N" (N decimal digits,
 * 0 <= N < TTT_MAX_CUDA_DEVICES); 1 on success, 0 (d untouched) when the text is none of these.
 * Whether the device exists is ttt_device_usable's question, not this one's. */
int ttt_train_parse_device(const char *s, ttt_device *d);
/* train.devices' text into out[0 … *n−1] (at most max): "N" (cuda:0 … cuda:N−1), or a
 * comma-separated list of cuda, cuda:N and cuda:A-B (A ≤ B), entries may repeat. 1 on success;
 * 0 with a phrase in why saying what is wrong. */
int ttt_train_parse_devices(const char *text, ttt_device *out, int max, int *n, char *why,
                            size_t len);

/* Whether the trainer can run c's step of model mc (NULL: the model is not asked about) where c
 * asks: TTT_OK on the host in float32 (bfloat16 there is TTT_ERR_CONFIG, as in a file), and on a
 * CUDA device in float32 or bfloat16 (mixed precision, docs/gpu.md "bfloat16 training") for the
 * mixers that run there (softmax; ttt with a layer that has a CUDA form: the delta rule, the
 * gated delta rule, linear attention with or without a gate). Everything else on cuda:N is
 * TTT_ERR_UNSUPPORTED with a message that names train.device (and where it was given) and what
 * does not run there (the mixer, the layer) — never a silent run on the host. The one place that decides;
 * ttt_train calls it first, and `ttt run` asks it of every trained point before it writes
 * anything (docs/training.md "Device and precision"). */
ttt_status ttt_train_device_ready(const ttt_train_config *c, const ttt_seq_model_config *mc,
                                  ttt_error *err);

/* The memory a training step of c holds on c's device, as the plan estimates it (trained.c,
 * docs/training.md "Device and precision"): filled by the trained tasks' parse. */
typedef struct ttt_train_estimate {
    double params;      /* parameters, gradients and AdamW's moments (bytes) */
    double step;        /* one step's activations and tape, with the allocator's slack */
    double other;       /* the host's arena blocks and shard gradients; 0 on a device */
    double total;       /* the sum */
} ttt_train_estimate;

/* What the trainer asks of a task. */
typedef struct ttt_train_data {
    void *user;
    /* The next training batch of `batch` sequences (advances the data state). */
    ttt_status (*next)(void *user, ttt_seq_batch *out, ttt_error *err);
    /* The data state, saved in checkpoints as n_state 64-bit words. */
    int n_state;
    void (*get_state)(void *user, uint64_t *words);
    ttt_status (*set_state)(void *user, const uint64_t *words, ttt_error *err);
    /* Fixed evaluation batches 0 … n_eval − 1. */
    int n_eval;
    ttt_status (*eval_batch)(void *user, int i, ttt_seq_batch *out, ttt_error *err);
    /* Optional: called (on the calling thread, in batch and row order) with the predictions
     * (rows, out) of rows [row0, row0 + part->B) of evaluation batch i. */
    void (*eval_observe)(void *user, int i, int row0, const ttt_seq_batch *part,
                         const float *pred);
    int bits; /* nonzero: losses are nats per byte; records add bits per byte */
} ttt_train_data;

/* Where the run goes and how records are labelled. */
typedef struct ttt_train_run {
    const char *ckpt_dir;    /* checkpoint folder, NULL = no checkpoints (and no resume) */
    const char *config_hash; /* identifies the configuration (checked on resume) */
    /* the point's record journal: records are appended as they happen; a checkpoint stores its
     * length, a resume cuts it back to that length and replays it (NULL = nowhere) */
    const char *stream_path;
    ttt_results *results;    /* records are added here (NULL = nowhere) */
    ttt_progress *progress;  /* may be NULL */
    long work_done;          /* progress units done before this run */
    const char *series;      /* record fields */
    int point;
    const char *mixer;
    /* The ranks that train this model together (comm.h), or NULL: this process alone. With
     * several, each computes its part of the `shards` of every batch, the shard gradients are
     * gathered and added in shard order on every rank, so every rank takes the same AdamW step
     * and the run equals a one-process run with the same `shards` bit for bit. Only rank 0
     * writes checkpoints, streams and adds records, and shows progress. */
    const struct ttt_comm *comm;
} ttt_train_run;

/* Where a training step's arena bytes go, summed over the shards of the step whose arena peak
 * was the largest (docs/training.md "Memory of a training step"). */
typedef struct ttt_train_memory {
    size_t activations; /* the arena's footprint when the forward has computed the loss: every
                         * tensor, tape entry and saved state the backward reads */
    size_t act_grads;   /* arena bytes the backward took for gradients of activations (recycled
                         * buffers counted once, autograd.h) */
    size_t workspace;   /* the rest of the step's arena peak: scratch of forward and backward */
    size_t arena_held;  /* the most bytes the shard arenas held from the system at a step's end
                         * (blocks in use and spare, with their unused tails) */
} ttt_train_memory;

typedef struct ttt_train_result {
    long step;            /* updates done (== steps unless stopped) */
    long resumed_from;    /* step of the checkpoint it resumed from, −1 = fresh start */
    int fell_back;        /* the resume used ckpt-prev because ckpt-last was unusable */
    int stopped;          /* stop_at ended the run early */
    double train_loss;    /* mean loss of the last logging window */
    ttt_seq_stats eval;   /* the final evaluation */
    double eval_loss;     /* eval.loss_sum / eval.count (/ out_dim for vector tasks) */
    double eval_accuracy; /* eval.correct / eval.count */
    double tokens_per_s;  /* training throughput of this process (wall clock) */
    double seconds;       /* wall clock of this process */
    size_t arena_peak;    /* the largest sum over shards of a training step's arena peak (tape,
                           * activations, scratch) in bytes: the step's memory besides the
                           * parameters, gradients and AdamW moments */
    ttt_train_memory mem; /* that peak's parts */
    /* On a device (train.device: cuda): the most bytes its pool handed out at once during the
     * run (parameters, gradients and moments, the step's arena blocks, the forms' workspace;
     * device.h ttt_device_pool_stats.used_high), the number to set beside PyTorch's
     * torch.cuda.max_memory_allocated; and the most the pool held from the driver (beside
     * max_memory_reserved). 0 on the host. */
    size_t device_peak, device_reserved_peak;
} ttt_train_result;

/* Train m (initialized by the caller) on `data` under config c. See the top of this file. */
ttt_status ttt_train(ttt_seq_model *m, const ttt_train_config *c, ttt_train_data *data,
                     const ttt_train_run *run, ttt_train_result *res, ttt_error *err);

/* Score m on every evaluation batch of `data` (no gradients), with `shards` parts per batch. */
ttt_status ttt_evaluate(const ttt_seq_model *m, ttt_train_data *data, int shards,
                        ttt_seq_stats *out, ttt_error *err);

/* Ask running training loops to stop at the end of the current step: they save a checkpoint and
 * return TTT_ERR_INTERRUPTED, so running the same command again resumes. Async-signal-safe (it
 * only sets a flag): the program calls it from its SIGINT/SIGTERM handler. */
void ttt_train_request_stop(void);
int ttt_train_stop_requested(void);
/* The flag ttt_train_request_stop sets, for ttt_ctx.stop (tensor.h): computations that watch it
 * end within a token's work instead of at the end of a measurement. */
const volatile sig_atomic_t *ttt_train_stop_flag(void);
/* For every other long loop (memory sweeps, equivalence, benchmarks, evaluation sets): TTT_OK,
 * or TTT_ERR_INTERRUPTED with the message "interrupted" once a stop was requested; the caller
 * returns it, and the plan writes what the finished points measured. */
ttt_status ttt_train_check_stop(ttt_error *err);
/* Ranks that run apart (a sweep's points over MPI ranks) and must stop together: from now on a
 * stop seen here is sent to them and a stop they saw is taken as this process's own, both when
 * the stop is checked (ttt_train_stop_requested, on the main thread). NULL: this process alone
 * again. Ranks that train one point together agree in the step's gather instead. */
void ttt_train_stop_peers(const struct ttt_comm *c);

#endif
