/* The C API on device memory (api_device.h, docs/api.md "Device buffers"): a call whose
 * io->device is TTT_DEVICE_CUDA is checked here — the build and the machine, the device index,
 * the stream, the dtype, where every buffer lives and its alignment, the layer's device entry —
 * and then runs the entry's batched call (layers/batch.c, ttt_layer_forward_batched). Every
 * refusal is TTT_ERR_ARG, TTT_ERR_UNSUPPORTED or TTT_ERR_DEVICE with a sentence naming the
 * argument; nothing is launched before all checks pass. */
#include "api_device.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "device.h"

/* The alignment the chunk kernels need of q, k, v, o and their gradients, and of the states:
 * they read rows with 16-byte vector loads (chunk_cuda.h). cudaMalloc and torch return
 * 256-byte aligned memory; a slice into a larger buffer may not be. */
#define DEVICE_ALIGN 16

static ttt_device device_of(const ttt_batch_io *io) {
    return (ttt_device){.kind = io->device, .index = io->device_index};
}

static ttt_status check_kind_dtype(const ttt_batch_io *io, ttt_error *err) {
    if (io->device != TTT_DEVICE_HOST && io->device != TTT_DEVICE_CUDA)
        return ttt_error_set(err, TTT_ERR_ARG, "io->device = %d: expected TTT_DEVICE_HOST (0) or "
                             "TTT_DEVICE_CUDA (1)", (int)io->device);
    if (io->dtype != TTT_DTYPE_F32 && io->dtype != TTT_DTYPE_BF16)
        return ttt_error_set(err, TTT_ERR_ARG, "io->dtype = %d: expected TTT_DTYPE_F32 (0) or "
                             "TTT_DTYPE_BF16 (1)", (int)io->dtype);
    if (io->device == TTT_DEVICE_HOST && io->dtype != TTT_DTYPE_F32)
        return ttt_error_set(err, TTT_ERR_ARG, "io->dtype = TTT_DTYPE_BF16 on host buffers: the "
                             "host forms compute in float32 only; convert the buffers to "
                             "float32, or pass CUDA buffers (io->device = TTT_DEVICE_CUDA)");
    return TTT_OK;
}

/* Every buffer of the call (and of g when given) against device d. */
static ttt_status check_buffers(const ttt_layer *L, const ttt_batch_io *io,
                                const ttt_batch_grad *g, ttt_device d, ttt_error *err) {
    const size_t va = d.kind == TTT_DEVICE_HOST ? 0 : DEVICE_ALIGN; /* q, k, v, o, states */
    const size_t sa = d.kind == TTT_DEVICE_HOST ? 0 : sizeof(float); /* η, log α */
    TTT_TRY(ttt_device_check_pointer(io->q, d, va, "io->q", err));
    TTT_TRY(ttt_device_check_pointer(io->k, d, va, "io->k", err));
    TTT_TRY(ttt_device_check_pointer(io->v, d, va, "io->v", err));
    TTT_TRY(ttt_device_check_pointer(io->o, d, va, "io->o", err));
    TTT_TRY(ttt_device_check_pointer(io->eta, d, sa, "io->eta", err));
    TTT_TRY(ttt_device_check_pointer(io->log_alpha, d, sa, "io->log_alpha", err));
    const int n_state = ttt_layer_state_count(L);
    char what[64];
    for (int i = 0; i < n_state; i++) {
        snprintf(what, sizeof what, "io->state_in[%d]", i);
        if (io->state_in) TTT_TRY(ttt_device_check_pointer(io->state_in[i], d, va, what, err));
        snprintf(what, sizeof what, "io->state_out[%d]", i);
        if (io->state_out) TTT_TRY(ttt_device_check_pointer(io->state_out[i], d, va, what, err));
    }
    if (!g) return TTT_OK;
    TTT_TRY(ttt_device_check_pointer(g->d_o, d, va, "g->d_o", err));
    TTT_TRY(ttt_device_check_pointer(g->d_q, d, va, "g->d_q", err));
    TTT_TRY(ttt_device_check_pointer(g->d_k, d, va, "g->d_k", err));
    TTT_TRY(ttt_device_check_pointer(g->d_v, d, va, "g->d_v", err));
    TTT_TRY(ttt_device_check_pointer(g->d_eta, d, sa, "g->d_eta", err));
    TTT_TRY(ttt_device_check_pointer(g->d_log_alpha, d, sa, "g->d_log_alpha", err));
    for (int i = 0; i < n_state; i++) {
        snprintf(what, sizeof what, "g->d_state_out[%d]", i);
        if (g->d_state_out)
            TTT_TRY(ttt_device_check_pointer(g->d_state_out[i], d, va, what, err));
        snprintf(what, sizeof what, "g->d_state_in[%d]", i);
        if (g->d_state_in) TTT_TRY(ttt_device_check_pointer(g->d_state_in[i], d, va, what, err));
    }
    return TTT_OK;
}

ttt_status ttt_api_host_check(const ttt_layer *L, const ttt_batch_io *io,
                              const ttt_batch_grad *g, ttt_error *err) {
    TTT_TRY(check_kind_dtype(io, err));
    if (io->kept)
        return ttt_error_set(err, TTT_ERR_ARG, "io->kept is set on a host call: a kept forward "
                             "is for CUDA calls (ttt_layer_kept_bytes is 0 here); pass NULL");
    return check_buffers(L, io, g, ttt_device_host(), err);
}

/* Everything a device call checks before anything is queued; fills fb. */
static ttt_status device_call(const ttt_layer *L, const ttt_batch_io *io,
                              const ttt_batch_grad *g, ttt_form_batch *fb, ttt_error *err) {
    TTT_TRY(check_kind_dtype(io, err));
    const ttt_device d = device_of(io);
    char dev[32];
    ttt_device_name(d, dev, sizeof dev);
    ttt_status s = ttt_device_usable(d, err);
    if (s != TTT_OK) {
        ttt_error_prefix(err, "io->device = TTT_DEVICE_CUDA, io->device_index = %d",
                         io->device_index);
        return s;
    }
    TTT_TRY(ttt_device_stream_check(d, io->stream, err));
    if (io->alpha_vec && !io->log_alpha)
        return ttt_error_set(err, TTT_ERR_ARG, "io->alpha_vec is set without io->log_alpha");
    /* which entry computes the layer on this device: refused here, with the tuple's reason,
     * before any buffer is looked at */
    const ttt_form_inputs in = ttt_layer_batch_inputs(L, io->T, io->eta != NULL,
                                                      io->log_alpha != NULL, io->alpha_vec,
                                                      d.kind);
    ttt_form_plan plan;
    if (!ttt_form_plan_with(NULL, L, &in, &plan, err)) {
        char name[128];
        ttt_error_prefix(err, "layer %s on %s", ttt_layer_describe(L, name, sizeof name), dev);
        return err ? err->status : TTT_ERR_UNSUPPORTED;
    }
    TTT_TRY(check_buffers(L, io, g, d, err));
    TTT_TRY(ttt_device_check_pointer(io->kept, d, 0, "io->kept", err));
    if (((uintptr_t)io->kept & 255) != 0)
        return ttt_error_set(err, TTT_ERR_ARG, "io->kept = %p is not 256-byte aligned (the "
                             "kernels place their arrays on 256-byte boundaries); round the "
                             "address up inside a buffer 255 bytes larger", io->kept);
    *fb = (ttt_form_batch){
        .B = io->B, .T = io->T, .H = io->H, .device = d, .stream = io->stream,
        .dtype = io->dtype, .o = io->o, .q = io->q, .k = io->k, .v = io->v, .eta = io->eta,
        .log_alpha = io->log_alpha, .alpha_vec = io->alpha_vec && io->log_alpha,
        .state_in = io->state_in, .state_out = io->state_out, .kept = io->kept,
        .kept_bytes = io->kept_bytes};
    return TTT_OK;
}

size_t ttt_api_device_kept_bytes(const ttt_layer *L, const ttt_batch_io *io) {
    ttt_batch_io q = *io;
    q.kept = NULL; /* sized before there is one */
    ttt_form_batch fb;
    if (device_call(L, &q, NULL, &fb, NULL) != TTT_OK) return 0;
    return ttt_layer_kept_bytes_batched(L, &fb);
}

ttt_status ttt_api_device_forward(const ttt_layer *L, const ttt_batch_io *io, ttt_error *err) {
    ttt_form_batch fb;
    TTT_TRY(device_call(L, io, NULL, &fb, err));
    return ttt_layer_forward_batched(L, &fb, NULL, err);
}

ttt_status ttt_api_device_backward(const ttt_layer *L, const ttt_batch_io *io,
                                   const ttt_batch_grad *g, ttt_error *err) {
    ttt_form_batch fb;
    TTT_TRY(device_call(L, io, g, &fb, err));
    const ttt_form_batch_grad fg = {
        .d_o = g->d_o, .d_state_out = g->d_state_out, .d_q = g->d_q, .d_k = g->d_k,
        .d_v = g->d_v, .d_eta = g->d_eta, .d_log_alpha = g->d_log_alpha,
        .d_state_in = g->d_state_in};
    return ttt_layer_backward_batched(L, &fb, &fg, err);
}

/* "chunkwise (cuda)" for every device entry, made once: ttt_layer_form_for returns static
 * strings (include/ttt/ttt.h). */
#define MAX_LABELS 64
static char labels[MAX_LABELS][64];
static void labels_init(void) {
    for (int i = 0; i < ttt_form_count() && i < MAX_LABELS; i++)
        snprintf(labels[i], sizeof labels[i], "%s (cuda)", ttt_form_at(i)->form);
}

const char *ttt_api_device_form(const ttt_layer *L, const ttt_batch_io *io) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (io->device != TTT_DEVICE_CUDA) return "none";
    const ttt_form_inputs in = ttt_layer_batch_inputs(L, io->T, io->eta != NULL,
                                                      io->log_alpha != NULL, io->alpha_vec,
                                                      TTT_DEVICE_CUDA);
    const ttt_form_entry *e = ttt_form_choose(L, &in, NULL);
    if (!e) return "none";
    pthread_once(&once, labels_init);
    for (int i = 0; i < ttt_form_count() && i < MAX_LABELS; i++)
        if (ttt_form_at(i) == e) return labels[i];
    return e->form;
}
