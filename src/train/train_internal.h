/* What the files of the trainer (train.c, train_config.c, train_shards.c, train_eval.c,
 * train_records.c, train_resume.c, train_stop.c) share and nothing else sees: the host shards of a
 * step, the state of a run, its records and its checkpoints. Private to src/train; the interface
 * is train.h. */
#ifndef TTT_TRAIN_INTERNAL_H
#define TTT_TRAIN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "autograd.h"
#include "comm.h"
#include "train.h"
#include "train_device.h"

/* ------------------------------------------------------------------------------------------ */
/* Shards (train_shards.c) */

typedef struct ttt_train_shard {
    ttt_arena arena;
    ttt_tape tape;
    ttt_ctx ctx;
    ttt_tensor *pt;  /* parameter tensors accumulating into `grads` */
    float **grads;   /* (n_params) shard 0: the parameters' own buffers */
    ttt_seq_batch sub;
    int row0; /* first row of the batch in this shard */
    ttt_seq_stats stats;
    double loss;
    ttt_tensor *pred;
    size_t act_bytes;  /* the arena's footprint at the end of the forward (the loss) */
    size_t grad_bytes; /* arena bytes of the backward's activation gradients */
    ttt_status s;
    ttt_error err;
} ttt_train_shard;

typedef struct ttt_train_shards {
    int n, threads;
    ttt_train_shard *sh;
    /* Data parallelism over ranks (docs/scaling.md "Data-parallel training"): this rank computes
     * the shards first … first + n − 1 of `total`; the others come from the other ranks. Alone:
     * first = 0, total = n, comm = NULL. */
    int first, total;
    const ttt_comm *comm;
    int slots;                  /* slots per rank: the most shards any rank computes */
    size_t numel;               /* floats of one flat gradient (every parameter in order) */
    double *head_send, *head_recv; /* shard headers: (slots, 6) and (ranks, slots, 6) */
    float *gsend;               /* this rank's shard gradients, flat: (slots, numel) */
    float *acc;                 /* the chain's sum: (numel) */
    int stop_any;               /* some rank was asked to stop (agreed in the last gather) */
    const ttt_seq_model *m;
    int out_w; /* outputs per position */
    int in_dim;
    int eval_rows; /* sequences per forward in evaluation (all shards together), 0 = a batch */
} ttt_train_shards;

/* Release everything the shards hold (S may be partly built). */
void ttt_train_shards_free(ttt_train_shards *S);

/* n shards of m's step on up to `threads` threads (0: min(n, cores)), all in this process. */
ttt_status ttt_train_shards_init(ttt_train_shards *S, const ttt_seq_model *m, int n, int threads,
                                 ttt_error *err);

/* This rank's part of `total` shards over comm's ranks, with its gather buffers. */
ttt_status ttt_train_shards_init_ranks(ttt_train_shards *S, const ttt_seq_model *m, int total,
                                       int threads, const ttt_comm *comm, ttt_error *err);

/* Rows [r0, r1) of a batch. */
ttt_seq_batch ttt_train_sub_batch(const ttt_seq_batch *b, int r0, int r1, int in_dim, int out_w,
                                  int vocab);

/* Number of scored positions of a batch: the loss denominator shared by the shards. */
double ttt_train_batch_count(const ttt_seq_batch *b);

/* Forward (and backward when grad) over every shard; the loss and stats summed in shard order,
 * the gradients assigned (grad) as one process computes them. */
ttt_status ttt_train_run_shards(ttt_train_shards *S, const ttt_seq_batch *b, int grad,
                                double *loss, ttt_seq_stats *stats, ttt_error *err);

/* Reset every shard's arena for the next step, keeping its blocks. */
void ttt_train_shards_reset(ttt_train_shards *S);

/* The step's memory (train.h ttt_train_memory), summed over the shards or of the device step:
 * kept when its arena peak is the largest so far. */
void ttt_train_step_memory(const ttt_train_shards *S, ttt_train_result *res);
void ttt_train_step_memory_dev(const ttt_train_dev *D, ttt_train_result *res);

/* ------------------------------------------------------------------------------------------ */
/* The run (train.c), its records (train_records.c) and checkpoints (train_resume.c) */

typedef struct ttt_trainer {
    const ttt_train_config *c;
    ttt_train_data *data;
    const ttt_train_run *run;
    ttt_seq_model *m;
    FILE *stream;    /* the journal (run->stream_path), appended */
    int stream_errno; /* the first failed write to it */
    ttt_train_dev *dev; /* the device step (train.device: cuda), or NULL on the host: the
                         * lead replica of reps */
    struct ttt_train_replicas *reps; /* the ranks on GPUs (train_replicas.h), or NULL */
    int eval_rows;      /* sequences per evaluation forward on the device */
    /* The device run's next batch, drawn on the host while the device ran the step before it,
     * and the data state before it was drawn: what a checkpoint of that step saves. */
    ttt_seq_batch pre;
    int have_pre;
    uint64_t pre_words[64];
} ttt_trainer;

/* The metrics window in progress (so that the first record after a resume matches). */
typedef struct ttt_train_window {
    ttt_seq_stats st;
    double grad_norm_sum;
    long steps;
} ttt_train_window;

/* A record to the results and the journal (user: the ttt_trainer). */
void ttt_train_emit(void *user, const ttt_record *r);

/* Everything written to the journal is on disk; its length in *bytes. */
ttt_status ttt_train_stream_sync(ttt_trainer *t, long long *bytes, ttt_error *err);

/* Cut the journal back to `bytes` and hand its records to the results again. */
ttt_status ttt_train_stream_replay(ttt_trainer *t, long long bytes, ttt_error *err);

/* A record's series, point, mixer, kind and step. */
void ttt_train_record_head(const ttt_trainer *t, ttt_record *r, const char *kind, long step);

/* Mean loss of a stats window: per scored position, and per output for vector tasks. */
double ttt_train_mean_loss(const ttt_seq_model *m, const ttt_seq_stats *s);

/* A checkpoint of the step, with what a resumed run needs besides the weights. */
ttt_status ttt_train_save(ttt_trainer *t, long step, const ttt_adamw *opt,
                          const ttt_train_window *w, const ttt_train_result *res, double elapsed,
                          long tokens, ttt_error *err);

/* Resume from the folder's checkpoint: TTT_OK with *step = −1 when there is none (the journal
 * is then emptied). */
ttt_status ttt_train_resume(ttt_trainer *t, ttt_adamw *opt, long *step, ttt_train_window *w,
                            ttt_train_result *res, double *elapsed, long *tokens,
                            ttt_error *err);

/* Evaluate (on the device or over S) and record the result (train_eval.c). */
ttt_status ttt_train_eval_record(ttt_trainer *t, ttt_train_shards *S, long step,
                                 ttt_train_result *res, ttt_error *err);

#endif
