/* The training step on a CUDA device (docs/training.md "Device and precision", docs/design.md
 * "Devices"): what ttt_train uses in place of its host shards when train.device is cuda:N.
 *
 * The model's parameters, their gradients and AdamW's two moments live on the device, each set
 * in one flat buffer (every parameter at an offset rounded up to 256 bytes); the host model
 * (ttt_seq_model.params) and the host AdamW state (ttt_adamw.m, .v) are the copies that
 * checkpoints write and read, brought up to date with ttt_train_dev_download before a checkpoint
 * or at the end of a run and copied up with ttt_train_dev_upload after a resume: so a checkpoint
 * is the same file whichever device wrote it, and resumes on either.
 *
 * A step is the whole batch as one forward and backward on the device (the host's `shards` split
 * a batch for its threads; on the device the batch is one unit of work): the token ids are copied
 * to the device by the model (seqmodel.c), every op runs on the device arena's stream, and the
 * host waits for the device twice per step: for the loss and the cross-entropy's statistics, and
 * for the gradient norm that clipping and the records need. ttt_train_dev_step returns with the
 * backward still running on the device: the trainer draws the next batch then (train.c). */
#ifndef TTT_TRAIN_DEVICE_H
#define TTT_TRAIN_DEVICE_H

#include "adamw.h"
#include "autograd.h"
#include "device.h"
#include "seqmodel.h"
#include "tensor.h"

typedef struct ttt_train_dev {
    ttt_device device;
    void *stream;  /* the arena's stream (NULL: the default stream) */
    ttt_arena arena; /* the step's tensors: a device arena */
    ttt_tape tape;
    ttt_ctx ctx;
    const ttt_seq_model *m;
    ttt_tensor *pt;           /* (params.n) device tensors over `data`, accumulating into `grad` */
    size_t *off;              /* (params.n) offsets (floats) of each parameter in the buffers */
    size_t numel;             /* floats of one flat buffer, padding included */
    ttt_device_buffer mem;    /* data | grad | m | v | [twin] | norm scratch | bad counter */
    float *data, *grad, *m1, *m2;
    /* train.dtype (docs/gpu.md "bfloat16 training"): under bfloat16, twin holds data rounded
     * to bf16 (numel values at the same offsets), refreshed after every update and upload, and
     * ctx.mixed points at `mixed`, so that the device products read bf16 operands; the master
     * weights, gradients and moments stay fp32 */
    ttt_dtype dtype;
    uint16_t *twin;
    ttt_mixed mixed;
    double *norm_scratch;
    unsigned *bad;
    ttt_device_scope scope;   /* the device made current for the run */
    int entered;
    /* the latest step's arena accounting (train.h ttt_train_memory) */
    size_t act_bytes, grad_bytes;
    ttt_tensor *pred; /* the latest forward's output (device), until ttt_train_dev_reset */
} ttt_train_dev;

/* The device state of model m on d: the parameters copied from the host, zero gradients and
 * moments, and the step's arena; products in float32. d must be usable (ttt_device_usable). */
ttt_status ttt_train_dev_init(ttt_train_dev *D, const ttt_seq_model *m, ttt_device d,
                              ttt_error *err);
/* The same with the step's dtype: TTT_DTYPE_BF16 is mixed precision (bf16 products, fp32
 * master weights, gradients, moments and inner state; the twin above). */
ttt_status ttt_train_dev_init_dtype(ttt_train_dev *D, const ttt_seq_model *m, ttt_device d,
                                    ttt_dtype dtype, ttt_error *err);
void ttt_train_dev_free(ttt_train_dev *D);

/* Host → device: the parameters of m and the moments of opt (a resumed run). */
ttt_status ttt_train_dev_upload(ttt_train_dev *D, const ttt_adamw *opt, ttt_error *err);
/* Device → host: the parameters into m's params, and when opt is given its moments. */
ttt_status ttt_train_dev_download(ttt_train_dev *D, ttt_params *ps, ttt_adamw *opt,
                                  ttt_error *err);

/* One forward (and backward when grad) of batch b on the device: *loss (the batch's mean loss
 * with `denom` scored positions) and *st; gradients assigned into the device gradient buffer.
 * Running out of device memory is TTT_ERR_NOMEM naming the size; a CUDA failure inside an op is
 * its TTT_ERR_DEVICE message (the ops' sticky error). The arena keeps the forward's tensors
 * (D->pred) until ttt_train_dev_reset. */
ttt_status ttt_train_dev_step(ttt_train_dev *D, const ttt_seq_batch *b, int grad, double denom,
                              double *loss, ttt_seq_stats *st, ttt_error *err);
void ttt_train_dev_reset(ttt_train_dev *D);

/* One AdamW update on the device (adamw.h, with clipping by the global norm), opt's step count
 * and schedule as on the host. A non-finite gradient or updated weight is TTT_ERR_NUMERIC with
 * the host's message naming the parameter and element (the buffers are copied to ps for it).
 * ps NULL: the layout is D's model's and such a failure names no element (another rank's
 * replica, train_replicas.h). */
ttt_status ttt_train_dev_adamw(ttt_train_dev *D, ttt_adamw *opt, ttt_params *ps,
                               ttt_adamw_stats *stats, ttt_error *err);

#endif
