/* Every private header of libttt, for white-box tests. Programs use the public API,
 * include/ttt/ttt.h. */
#ifndef TTT_INTERNAL_H
#define TTT_INTERNAL_H

#include "adamw.h"
#include "apply.h"
#include "autograd.h"
#include "checkpoint.h"
#include "config.h"
#include "data.h"
#include "finite.h"
#include "trained.h"
#include "train.h"
#include "experiment.h"
#include "memory.h"
#include "plan.h"
#include "kernels.h"
#include "seqmodel.h"
#include "normalized.h"
#include "ops.h"
#include "optim.h"
#include "params.h"
#include "progress.h"
#include "results.h"
#include "results_internal.h"
#include "rng.h"
#include "rope.h"
#include "safetensors.h"
#include "softmax_attention.h"
#include "status.h"
#include "strbuf.h"
#include "task.h"
#include "tensor.h"
#include "ttt_dual.h"
#include "layer.h"

/* The form a call of L without η or gates (the constant decay, if any, as a per-token gate) and
 * without a tape runs: what `form: auto` resolves to for such a call. */
static inline const char *tu_form_used(const ttt_layer *L) {
    const ttt_form_inputs in = ttt_form_inputs_plain(L, 64, 0);
    return ttt_layer_form_used(L, &in);
}

/* NULL when L can run in the form named `form` (for some inputs), else why not. */
static inline const char *tu_form_unavailable(const ttt_layer *L, const char *form) {
    ttt_layer c = *L;
    c.form = form;
    return ttt_form_unavailable(&c);
}

#endif
