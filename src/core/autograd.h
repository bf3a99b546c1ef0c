/* Reverse-mode automatic differentiation over the op layer (docs/design.md "Core types": "each op gets
 * a backward, recorded on a tape when gradients are enabled").
 *
 * Model
 * -----
 * A ttt_tape is a list of entries, one per recorded op call. Recording is on when
 * `ctx->grad != 0 && ctx->tape != NULL`; an op then records an entry only if at least one of its
 * inputs has `requires_grad`, and marks its output `requires_grad`. With recording off an op pays
 * one branch on ctx->grad and nothing else.
 *
 * An entry holds the backward function, the inputs, the output, a few small scalar parameters
 * (iarg / farg) and optional saved data (aux), all allocated in ctx->arena right after the op's
 * result. Ops are functional (ops.h), so a backward function reads its inputs' and output's data
 * straight from the tensors: no copies are saved.
 *
 * ttt_backward walks the entries newest first. Each backward function adds its contribution
 * Jᵀ·dout to the `grad` buffer of every input that requires grad (ttt_grad creates it on first
 * use). Entries whose output received no gradient are skipped.
 *
 * Gradients (the `grad` field of ttt_tensor, a float buffer of t->n elements, same layout as data)
 *   - Parameters: persistent tensors allocated by the caller outside the per-step arena, marked
 *     with ttt_tensor_set_param(t, buffer). Their buffer is the caller's and ACCUMULATES across
 *     backward calls until the caller zeroes it (ttt_tensor_zero_grad): gradient accumulation.
 *   - Every other tensor that requires grad (op results, and leaves marked by setting
 *     t->requires_grad = 1 without a buffer) gets its grad allocated lazily in ctx->arena during
 *     backward. Each ttt_backward / ttt_backward_from starts by forgetting these non-persistent
 *     grads of every tensor on the tape, so each call computes fresh gradients for them; read
 *     them after the call, before the arena is released.
 *
 * Rules for callers
 *   - Everything recorded (tensors, entries, saved data) lives in the arena: do not release or
 *     reset the arena below the tape's first entry until backward has run and the tape has been
 *     reset (ttt_tape_reset). The usual step is: forward (recording), loss, ttt_backward, outer
 *     optimizer step, ttt_tape_reset, ttt_arena_reset.
 *   - A tensor on the tape must not be modified in place before backward (ops never do that; the
 *     in-place helpers of gradient-free paths must not run while recording).
 *   - ttt_tensor_view makes a header that shares memory but NOT gradients: a view is a leaf. Use
 *     ttt_reshape / ttt_slice_rows / ttt_slice_cols, which are recorded, to differentiate through a
 *     change of shape or a part of a tensor.
 *   - One tape is written by one thread at a time: when heads run in parallel (OpenMP), record
 *     on one tape per thread or record only outside the parallel region.
 *   - Backward functions run with ctx->grad temporarily 0, so they may call ops (nothing is
 *     recorded: no higher-order gradients). Inputs passed as `const ttt_tensor *` get their `grad`
 *     field written by backward: only tensors the caller made mutable (params, op results, leaves
 *     it set requires_grad on) ever require grad, so this never writes to a const object.
 *
 * Custom ops (fused kernels with a hand-written backward)
 * -------------------------------------------------------
 * A fused kernel computes its output however it likes, then calls ttt_tape_record; when that
 * returns an entry, the kernel stores whatever the backward needs in e->aux / e->iarg / e->farg.
 * Worked example, y = a ⊙ sin(b) (a, b same shape), saving cos(b) for the backward:
 *
 *     static void sinmul_backward(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dy) {
 *         const ttt_tensor *a = e->in[0], *b = e->in[1];
 *         const float *cosb = e->aux;                        // (n) saved by the forward
 *         float *ga = ttt_grad(ctx, a), *gb = ttt_grad(ctx, b); // NULL: needs no gradient
 *         for (size_t i = 0; i < a->n; i++) {
 *             if (ga) ga[i] += dy[i] * sinf(b->data[i]);      // ∂y/∂a = sin b
 *             if (gb) gb[i] += dy[i] * a->data[i] * cosb[i];  // ∂y/∂b = a cos b
 *         }
 *     }
 *
 *     ttt_tensor *sinmul(ttt_ctx *ctx, const ttt_tensor *a, const ttt_tensor *b) {
 *         ttt_tensor *y = ttt_tensor_new(ctx, a->ndim, a->shape);
 *         for (size_t i = 0; i < a->n; i++) y->data[i] = a->data[i] * sinf(b->data[i]);
 *         ttt_tape_entry *e = ttt_tape_record(ctx, sinmul_backward, y,
 *                                             (const ttt_tensor *const[]){a, b}, 2);
 *         if (e) { // recording: save what the backward needs
 *             float *cosb = ttt_tape_alloc(ctx, a->n * sizeof(float));
 *             for (size_t i = 0; i < a->n; i++) cosb[i] = cosf(b->data[i]);
 *             e->aux = cosb;
 *             e->name = "sinmul";
 *         }
 *         return y;
 *     }
 *
 * Always call ttt_grad for every input you need BEFORE taking any scratch arena mark inside a
 * backward function: ttt_grad may allocate, and releasing a mark taken before it would free the
 * gradient. tests/test_autograd.c registers this exact op and checks it by finite differences.
 *
 * First writer assigns
 * --------------------
 * ttt_grad hands out a zero-filled buffer, so that every contribution can be added. Zeroing is a
 * pass over memory of its own: on the training step of a sequence model it was 13 % of the time
 * (docs/benchmarks.md "Training step"). An op whose backward writes EVERY element of an input's
 * gradient asks for it with ttt_grad_acc instead, which also says whether the op is the first to
 * write it in this backward (`*add` = 0: the buffer holds garbage, assign; sgemm with beta = 0)
 * or not (`*add` = 1: add). Ops that write only part of a gradient (a slice, a scatter) keep
 * ttt_grad. ttt_backward_identity goes one step further: when the input has no gradient yet it
 * takes the output's buffer as its own (no copy), which is safe because every entry that writes
 * the output's gradient is newer than the identity entry and has already run.
 *
 * A parameter's caller-owned buffer accumulates across backward calls. A caller that wants
 * this step's gradient instead (a trainer) marks the parameter with ttt_tensor_grad_overwrite
 * before backward: the first contribution then assigns, and ttt_tensor_grad_settle after
 * backward zeroes the buffers that nothing reached. */
#ifndef TTT_AUTOGRAD_H
#define TTT_AUTOGRAD_H

#include <stdio.h>

#include "tensor.h"

typedef struct ttt_tape_entry ttt_tape_entry;

/* Add Jᵀ·dout to the grads of e's inputs. dout (e->out->n elements) is e->out->grad. */
typedef void (*ttt_backward_fn)(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dout);

#define TTT_TAPE_NARGS 4

/* What an entry is to a reader of the graph (src/train/export.c), set by the op that records it;
 * most ops are none of these. */
typedef enum ttt_tape_kind {
    TTT_TAPE_OTHER,
    TTT_TAPE_PRODUCT,   /* out = op(in[0]) op(in[1]) (ttt_matmul; iarg[1]: in[1] transposed) */
    TTT_TAPE_SUM,       /* out = in[0] + in[1], in[1] broadcast over rows (ttt_add) */
    TTT_TAPE_JOIN_COLS, /* out = [in[0] | in[1] | …] side by side (ttt_concat_cols) */
} ttt_tape_kind;

struct ttt_tape_entry {
    ttt_backward_fn backward;
    const char *name;           /* op name, for ttt_tape_print and error messages */
    ttt_tape_kind kind;         /* what the op is to a reader of the graph */
    ttt_tensor *out;            /* the op's result */
    ttt_tensor **in;            /* (n_in) inputs; an entry may be NULL (an absent optional input) */
    int n_in;
    int iarg[TTT_TAPE_NARGS];   /* small parameters of the op (flags, indices) */
    float farg[TTT_TAPE_NARGS]; /* small parameters of the op (scales, eps) */
    void *aux;                  /* saved data for the backward (in the arena), or NULL */
    ttt_tape_entry *prev;       /* the entry recorded before this one */
    int out_shared;             /* out already required grad when recorded (a leaf or the output
                                   of an older entry): its gradient is never recycled */
};

/* Buckets of the recycled gradient buffers (below), by element count. */
#define TTT_TAPE_FREE_BUCKETS 64

struct ttt_tape {
    ttt_tape_entry *last; /* newest entry; the list runs backward through ->prev */
    size_t n_entries;
    /* Recycling of activation gradients during backward (off unless the caller sets it): once
     * an entry's backward has run, nothing reads its output's gradient again (every entry that
     * consumed the output is newer and ran before it), so the buffer goes on a free list and
     * the next ttt_grad of the same element count takes it instead of new arena memory. The
     * live gradients of a backward walk are then about one layer's worth instead of one per
     * recorded tensor (docs/training.md "Memory of a training step"). The price: after
     * ttt_backward only leaves (parameters, and tensors marked requires_grad without being
     * recorded) and the root keep their gradients; an intermediate result's grad is NULL. */
    int recycle;
    /* chains of free buffers (in the arena); a device buffer's link is a host node (the host
     * cannot write device memory), which waits on `spare` once its buffer is taken again */
    void *free_grads[TTT_TAPE_FREE_BUCKETS];
    void *spare;
    size_t grad_bytes; /* arena bytes ttt_grad took during the latest backward (accounting) */
};

void ttt_tape_init(ttt_tape *tape);
/* Forget every entry (their memory belongs to the arena, which the caller resets). */
void ttt_tape_reset(ttt_tape *tape);
void ttt_tape_free(ttt_tape *tape);
/* One line per entry, newest first: index, name, output shape. For debugging. */
void ttt_tape_print(const ttt_tape *tape, FILE *f);

/* Nonzero when ops record (the one test an op pays in no-grad mode is on ctx->grad). */
static inline int ttt_recording(const ttt_ctx *ctx) { return ctx->grad && ctx->tape; }

/* Make t a parameter: requires grad, and `grad` (t->n floats, owned by the caller, usually
 * allocated next to t outside the per-step arena) receives accumulated gradients. */
void ttt_tensor_set_param(ttt_tensor *t, float *grad);
/* Zero t's gradient buffer, if it has one. */
void ttt_tensor_zero_grad(ttt_tensor *t);
/* Instead of zeroing a parameter's buffer before a backward call: its old contents are stale,
 * the next contribution assigns (see "First writer assigns" above). */
void ttt_tensor_grad_overwrite(ttt_tensor *t);
/* After the backward call: a parameter still stale received nothing; zero its buffer. */
void ttt_tensor_grad_settle(ttt_tensor *t);

/* Record `out` = op(inputs) with the given backward. Returns NULL (and records nothing) when not
 * recording or when no input requires grad; otherwise the new entry, whose iarg/farg/aux/name the
 * caller may fill, and `out` is marked requires_grad. inputs[i] may be NULL. */
ttt_tape_entry *ttt_tape_record(ttt_ctx *ctx, ttt_backward_fn fn, ttt_tensor *out,
                                const ttt_tensor *const *inputs, int n_inputs);
/* Memory for saved data (ctx->arena; aborts on out-of-memory like ttt_tensor_new). */
void *ttt_tape_alloc(ttt_ctx *ctx, size_t bytes);
/* Inside a backward function: t's gradient buffer, created zero-filled in ctx->arena on first use;
 * NULL when t is NULL or does not require grad. */
float *ttt_grad(ttt_ctx *ctx, const ttt_tensor *t);
/* The same for a backward that writes every element of t's gradient: *add = 0 when this is the
 * first contribution of this backward (the buffer's contents are garbage: assign every element),
 * 1 when the buffer already holds contributions (add). NULL (and *add = 1) when t is NULL or
 * does not require grad. */
float *ttt_grad_acc(ttt_ctx *ctx, const ttt_tensor *t, int *add);
/* ttt_grad_acc for an op that consumes t (ops.h ttt_cross_entropy_consume): when t has no
 * gradient yet in this backward, its own values' buffer becomes its gradient (*add = 0; the op
 * reads each element before it writes it), which saves t's size. Sound only when nothing reads
 * t's values after this backward: no other op consumed t, and the backward of the op that made
 * t does not read its result (a product, a sum do not). */
float *ttt_grad_acc_over_values(ttt_ctx *ctx, const ttt_tensor *t, int *add);

/* Backward of any op whose output is its single input unchanged element for element (ttt_reshape,
 * ttt_tensor_copy): grad(in[0]) += dout, or, when in[0] has no gradient yet, dout's buffer becomes
 * in[0]'s (no copy; see "First writer assigns"). Usable by custom ops. */
void ttt_backward_identity(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dout);

/* Gradients of a 1-element `loss` (seed 1) with respect to every tensor on ctx->tape that
 * requires grad. Does nothing when loss does not require grad (no parameter reaches it).
 *
 * Devices (docs/design.md "Devices"): the tape is the same for device tensors. Their entries'
 * backward functions run on the device (ops_device.c), their gradients are memory of their
 * device, taken from ctx->arena (which must then be an arena of that device; they are recycled
 * as the host's are, in stream order on the arena's stream), and a parameter's caller-owned
 * buffer is device memory. For
 * ttt_backward_from, dout lives where `out` does. */
void ttt_backward(ttt_ctx *ctx, const ttt_tensor *loss);
/* Same with an explicit output gradient dout (out->n elements): the gradient of Σ dout ⊙ out. */
void ttt_backward_from(ttt_ctx *ctx, const ttt_tensor *out, const float *dout);

#endif
