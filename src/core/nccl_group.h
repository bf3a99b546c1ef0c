/* Collectives between the GPUs of a run through NCCL (docs/scaling.md "Several GPUs"): the one
 * place that talks to NCCL, as device.c is for the CUDA runtime.
 *
 * NCCL is opened at the first use (dlopen of libnccl.so.2, then the CUDA toolkit's copy, or the
 * file TTT_NCCL_LIBRARY names), not linked: a process that never trains on several GPUs pays
 * nothing for it, and the Check suites' forks stay cheap (src/core/cuda/ops_blas.cu says why
 * that matters). Without CUDA in the build, or without NCCL's header when it was configured,
 * every call is TTT_ERR_UNSUPPORTED with a sentence saying so.
 *
 * A group holds one communicator per GPU this process drives, each with its own stream. Those
 * streams are created blocking: work queued on them waits for what the device's legacy default
 * stream (where the device ops run) queued before, and later work there waits for them, so a
 * collective needs no event between the step and the update. */
#ifndef TTT_NCCL_GROUP_H
#define TTT_NCCL_GROUP_H

#include <stddef.h>

#include "device.h"
#include "status.h"

/* The identifier every process of a multi-process group shares (ncclUniqueId's 128 bytes). */
typedef struct ttt_nccl_id {
    char bytes[128];
} ttt_nccl_id;

typedef struct ttt_nccl ttt_nccl;

/* A new identifier (the first process of a group makes it and sends it to the others). */
ttt_status ttt_nccl_make_id(ttt_nccl_id *id, ttt_error *err);

/* A group of `world` ranks in which this process holds ranks first … first + n − 1 on the devices
 * devs[0 … n−1] (a multi-process group shares `id`; a group of one process may pass NULL).
 * Devices must differ: NCCL refuses two ranks on one GPU (TTT_ERR_UNSUPPORTED, saying so). */
ttt_status ttt_nccl_init(ttt_nccl **out, int world, int first, int n, const ttt_device *devs,
                         const ttt_nccl_id *id, ttt_error *err);
/* Frees the group (after its work ended); NULL: no-op. */
void ttt_nccl_free(ttt_nccl *g);

/* buf[i] (n floats on devs[i]) becomes the sum over every rank of the group, in place, for each
 * of this process's ranks; queued on the group's streams (ordered with the devices' default
 * streams, above). Every rank of the group must call it with the same n. */
ttt_status ttt_nccl_sum_f32(ttt_nccl *g, float *const *buf, size_t n, ttt_error *err);

#endif
