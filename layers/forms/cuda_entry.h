/* What the two CUDA form entries (delta_rule/cuda.c, linear_attention/cuda.c) share: a layer and
 * a batched call mapped onto the chunk kernels' arguments (chunk_cuda.h), with β = θ·η, the
 * query scale and the constant decay formed on the device and the kernels' workspace taken from
 * the device pool (docs/design.md "Devices", docs/forms.md "Device entries"). Built only with
 * TTT_HAVE_CUDA. */
#ifndef TTT_CUDA_ENTRY_H
#define TTT_CUDA_ENTRY_H

#include <stddef.h>

#include "chunk_cuda.h"
#include "form.h"

/* One kernel family: linear attention or the delta rule. */
typedef struct ttt_cuda_kernels {
    const char *name; /* "linear attention", "delta rule": for messages */
    size_t (*workspace)(const ttt_chunk_args *a, int backward);
    ttt_status (*forward)(const ttt_chunk_args *a, void *ws, size_t ws_bytes, void *stream,
                          ttt_error *err);
    ttt_status (*backward)(const ttt_chunk_args *a, const ttt_chunk_grad *g, void *ws,
                           size_t ws_bytes, void *stream, ttt_error *err);
    /* the backward writes o and the final state itself (it recomputes the forward): the entry's
     * backward then skips the forward call it otherwise makes first */
    int backward_writes_outputs;
    /* NULL, or the bytes a kept forward stores for its backward (chunk_cuda.h) */
    size_t (*kept_bytes)(const ttt_chunk_args *a);
} ttt_cuda_kernels;

/* The reasons every CUDA entry shares for refusing a layer or a call (the tuple's own test is
 * the entry's): RoPE or output normalization inside the layer, a head wider than the kernels
 * take, a tape (a CUDA call is never recorded on the host's tape). NULL when none applies. */
const char *ttt_cuda_entry_refuse(const ttt_layer *L, const ttt_form_inputs *in);

ttt_status ttt_cuda_entry_forward(const ttt_cuda_kernels *k, const ttt_layer *L,
                                  const ttt_form_batch *io, ttt_error *err);
ttt_status ttt_cuda_entry_backward(const ttt_cuda_kernels *k, const ttt_layer *L,
                                   const ttt_form_batch *io, const ttt_form_batch_grad *g,
                                   ttt_error *err);
/* The bytes io->kept needs for this call (0: these kernels keep nothing). */
size_t ttt_cuda_entry_kept_bytes(const ttt_cuda_kernels *k, const ttt_layer *L,
                                 const ttt_form_batch *io);

#endif
