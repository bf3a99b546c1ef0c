/* The CUDA entry of linear attention (docs/forms.md "Device entries"): form "chunkwise" on
 * TTT_DEVICE_CUDA, all B·H sequences of a call in one set of launches of the chunk kernels
 * (layers/forms/linear_attention/chunkwise.cu, chunk_cuda.h). The tuple is the host linear
 * attention's (forms.c, ttt_layer_is_linear_attention): a linear model, a loss whose gradient
 * does not depend on W (dot), plain SGD, update_then_apply, no position scale; no gate, a
 * scalar gate per token (given, or the constant decay: RetNet, Mamba2) or one per key (GLA).
 * Built only with CUDA. */
#include "cuda_entry.h"

#ifdef TTT_HAVE_CUDA

static const char *la_cuda_available(const ttt_layer *L, const ttt_form_inputs *in) {
    if (!ttt_layer_is_linear_attention(L))
        return "the CUDA linear attention needs a linear model, a loss whose gradient does not "
               "depend on W (dot), plain sgd, update_then_apply and no position scale; run "
               "this layer on host buffers (form: generic computes every tuple)";
    return ttt_cuda_entry_refuse(L, in);
}

static const ttt_cuda_kernels la_kernels = {
    .name = "linear attention",
    .workspace = ttt_cuda_la_workspace,
    .forward = ttt_cuda_la_forward,
    .backward = ttt_cuda_la_backward,
};

static ttt_status la_cuda_forward(const ttt_layer *L, const ttt_form_batch *io,
                                  ttt_error *err) {
    return ttt_cuda_entry_forward(&la_kernels, L, io, err);
}

static ttt_status la_cuda_backward(const ttt_layer *L, const ttt_form_batch *io,
                                   const ttt_form_batch_grad *g, ttt_error *err) {
    return ttt_cuda_entry_backward(&la_kernels, L, io, g, err);
}

const ttt_form_entry ttt_form_linear_attention_cuda = {
    .family = "linear_attention",
    .form = "chunkwise",
    .help = "linear attention (no gate, a gate per token or per key) in chunks on a CUDA "
            "device, all (B, H) sequences in one launch (docs/forms.md \"Device entries\")",
    .auto_rank = 10,
    .available = la_cuda_available,
    .device = TTT_DEVICE_CUDA,
    .forward_batched = la_cuda_forward,
    .backward_batched = la_cuda_backward,
};

#else
typedef int ttt_la_cuda_unused; /* this build has no CUDA */
#endif
