/* The CUDA entry of the delta rule (docs/forms.md "Device entries"): form "chunkwise" on
 * TTT_DEVICE_CUDA, all B·H sequences of a call in one set of launches of the chunk kernels
 * (layers/forms/delta_rule/chunkwise.cu, chunk_cuda.h). The tuple is the host delta rule's
 * (forms.c): a linear model, a loss with ∂ℓ/∂z = z − v, plain SGD, b = 1, update_then_apply, no
 * position scale, coupled decay placement when there is a decay; a scalar gate per token (given,
 * or the constant decay) or none. Built only with CUDA. */
#include "cuda_entry.h"

#ifdef TTT_HAVE_CUDA

static const char *delta_cuda_available(const ttt_layer *L, const ttt_form_inputs *in) {
    const char *one = ttt_form_one_step(L);
    if (one) return one;
    if (!(L->model->traits & TTT_MODEL_LINEAR_MAP) || !(L->loss->traits & TTT_LOSS_RESIDUAL) ||
        !ttt_layer_optim_traits(L).plain_sgd || L->mini_batch != 1 ||
        L->order != TTT_ORDER_UPDATE_THEN_APPLY || L->pos_inverse)
        return "the CUDA delta rule needs a linear model, the squared loss, plain sgd, "
               "mini_batch 1, update_then_apply and no position scale; run this layer on host "
               "buffers (form: generic computes every tuple)";
    if (!L->coupled && (L->decay != 1.0f || (in && in->gate != TTT_FORM_GATE_NONE)))
        return "the CUDA delta rule decays before the error is measured (decay_placement: "
               "coupled); this layer decays with decoupled placement: use decay_placement: "
               "coupled or run on host buffers with form: generic";
    if (in && in->gate == TTT_FORM_GATE_KEY)
        return "the CUDA delta rule takes a scalar gate per token and head, not one per key "
               "(alpha_vec); run on host buffers with form: generic";
    return ttt_cuda_entry_refuse(L, in);
}

static const ttt_cuda_kernels delta_kernels = {
    .name = "delta rule",
    .workspace = ttt_cuda_delta_workspace,
    .forward = ttt_cuda_delta_forward,
    .backward = ttt_cuda_delta_backward,
    .backward_writes_outputs = 1, /* its recomputed forward writes o and ht */
    .kept_bytes = ttt_cuda_delta_kept_bytes,
};

static ttt_status delta_cuda_forward(const ttt_layer *L, const ttt_form_batch *io,
                                     ttt_error *err) {
    return ttt_cuda_entry_forward(&delta_kernels, L, io, err);
}

static ttt_status delta_cuda_backward(const ttt_layer *L, const ttt_form_batch *io,
                                      const ttt_form_batch_grad *g, ttt_error *err) {
    return ttt_cuda_entry_backward(&delta_kernels, L, io, g, err);
}

static size_t delta_cuda_kept_bytes(const ttt_layer *L, const ttt_form_batch *io) {
    return ttt_cuda_entry_kept_bytes(&delta_kernels, L, io);
}

const ttt_form_entry ttt_form_delta_rule_cuda = {
    .family = "delta_rule",
    .form = "chunkwise",
    .help = "the (gated) delta rule in chunks on a CUDA device, all (B, H) sequences in one "
            "launch (docs/forms.md \"Device entries\")",
    .auto_rank = 10,
    .available = delta_cuda_available,
    .device = TTT_DEVICE_CUDA,
    .forward_batched = delta_cuda_forward,
    .backward_batched = delta_cuda_backward,
    .kept_bytes_batched = delta_cuda_kept_bytes,
};

#else
typedef int ttt_delta_cuda_unused; /* this build has no CUDA */
#endif
