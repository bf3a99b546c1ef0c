/* Data-parallel training on several GPUs (docs/scaling.md "Several GPUs"): the device step of
 * train_device.h, once per rank, each rank a replica of the model on its GPU.
 *
 * Ranks: train.devices lists them, rank r on devices[r]. A process started alone drives every
 * rank, one host thread per rank for its step and update (OpenMP, the thread entering the
 * rank's device for the call); under mpirun every process is one rank (the MPI job has as many
 * ranks as train.devices entries), rank r of the job on devices[r].
 *
 * A step: every rank takes its rows of the batch (rank r of W: rows ⌊B·r/W⌋ to ⌊B·(r+1)/W⌋),
 * computes its loss over those rows with the whole batch's count of scored positions as the
 * denominator, and its gradient; the gradients are then summed over the ranks, so that every
 * replica holds the gradient of the batch's loss, and every replica applies the same AdamW
 * update to the same weights: the replicas stay equal, bit for bit, without a broadcast.
 *
 * The sum (docs/scaling.md "Several GPUs"):
 *   NCCL   when every rank has its own GPU: ncclAllReduce, whose result is the same bits on
 *          every rank; its order of addition depends on NCCL's algorithm and the number of
 *          ranks, so a run on W GPUs is one rounding path among others, held by the tests to the
 *          same bound from the float64-conditioned trajectory as one GPU is;
 *   ordered when ranks share a GPU (NCCL refuses two ranks of a group on one GPU) — in one
 *          process only: rank 0's gradient plus rank 1's plus … in rank order on rank 0's GPU,
 *          then copied to every other rank.
 * Statistics (loss, counts, correct predictions) are added in rank order on the host.
 *
 * A failed step (out of memory, a CUDA failure) on any rank fails the step on every rank before
 * the sum, with that rank's message; no replica has been updated, so the last completed step's
 * weights are intact on each (train.c saves them: a lost rank loses no more than the step). */
#ifndef TTT_TRAIN_REPLICAS_H
#define TTT_TRAIN_REPLICAS_H

#include "comm.h"
#include "nccl_group.h"
#include "train.h"
#include "train_device.h"

typedef struct ttt_train_replicas {
    int plain;          /* train.device alone: one replica, no sum */
    int n;              /* ranks this process drives */
    int world, first;   /* ranks of the run, and the rank of this process's first */
    const ttt_comm *comm; /* the MPI job when its processes are the ranks, else NULL */
    ttt_device *devs;   /* (n) */
    ttt_train_dev *dev; /* (n) the replicas */
    ttt_nccl *nccl;     /* the NCCL group, or NULL for the ordered sum */
    ttt_device_buffer scratch; /* (numel) on rank 0's GPU: another GPU's gradient (ordered sum) */
    /* per rank, for the latest step */
    ttt_status *st;
    ttt_error *err;
    double *loss;
    ttt_seq_stats *stats;
    double *head; /* (world × HEAD) the step's statistics of every rank (MPI) */
    int stop_any; /* some rank was asked to stop (MPI: learnt in the step's exchange) */
} ttt_train_replicas;

/* The replicas of model m for train config c: c->n_devices ranks (c->n_devices ≥ 1), with the
 * MPI job comm when its size is c->n_devices (every process one rank), else all in this process
 * (comm NULL or of size 1). The weights are m's, copied to every GPU. */
ttt_status ttt_train_replicas_init(ttt_train_replicas *R, const ttt_seq_model *m,
                                   const ttt_train_config *c, const ttt_comm *comm,
                                   ttt_error *err);
void ttt_train_replicas_free(ttt_train_replicas *R);

/* The replica the host reads from (evaluation, checkpoints, the final weights): rank 0 of this
 * process. */
ttt_train_dev *ttt_train_replicas_lead(ttt_train_replicas *R);

/* One training step of batch b over the ranks (above): *loss and *st of the whole batch, and the
 * summed gradient in every replica. */
ttt_status ttt_train_replicas_step(ttt_train_replicas *R, const ttt_seq_batch *b, double *loss,
                                   ttt_seq_stats *st, ttt_error *err);
void ttt_train_replicas_reset(ttt_train_replicas *R);
/* The step's memory (the largest rank's). */
void ttt_train_replicas_memory(const ttt_train_replicas *R, ttt_train_result *res);

/* AdamW on every replica (train_device.h ttt_train_dev_adamw); stats from rank 0. */
ttt_status ttt_train_replicas_adamw(ttt_train_replicas *R, ttt_adamw *opt, ttt_params *ps,
                                    ttt_adamw_stats *stats, ttt_error *err);
/* The host's weights (and moments when opt) to every replica (a resumed run). */
ttt_status ttt_train_replicas_upload(ttt_train_replicas *R, const ttt_adamw *opt,
                                     ttt_error *err);
/* Whether the replicas of this process hold the same weights, bit for bit (TTT_ERR_NUMERIC
 * naming the first rank and element that differ): what the design promises, checked at the end
 * of a run. */
ttt_status ttt_train_replicas_check(ttt_train_replicas *R, ttt_error *err);

#endif
