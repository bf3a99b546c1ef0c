/* The C API's calls on device memory (docs/api.md "Device buffers"): what ttt_layer_forward_run,
 * ttt_layer_backward_run and ttt_layer_form_for do when io->device is not the host, and the
 * checks a host call makes of its buffers. Implemented in api_device.c. */
#ifndef TTT_API_DEVICE_H
#define TTT_API_DEVICE_H

#include "layer.h"

#include <ttt/ttt.h>

/* A host call's checks beyond check_io: the device kind and dtype of io, and no buffer that is
 * device memory (when CUDA is in use in the process). g may be NULL (a forward). */
ttt_status ttt_api_host_check(const ttt_layer *L, const ttt_batch_io *io,
                              const ttt_batch_grad *g, ttt_error *err);
/* A call on CUDA buffers: every check (device, stream, dtype, where each buffer lives, its
 * alignment, which entry computes the layer), then the entry's batched call. */
ttt_status ttt_api_device_forward(const ttt_layer *L, const ttt_batch_io *io, ttt_error *err);
ttt_status ttt_api_device_backward(const ttt_layer *L, const ttt_batch_io *io,
                                   const ttt_batch_grad *g, ttt_error *err);
/* ttt_layer_form_for of a device call: "chunkwise (cuda)", or "none". */
const char *ttt_api_device_form(const ttt_layer *L, const ttt_batch_io *io);
/* ttt_layer_kept_bytes of a device call (0 when the call would be refused). */
size_t ttt_api_device_kept_bytes(const ttt_layer *L, const ttt_batch_io *io);

#endif
