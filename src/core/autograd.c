/* The tape and the backward walk (see autograd.h for the model and the rules).
 *
 * Entries are a singly linked list through ->prev, allocated in ctx->arena by ttt_tape_record, so
 * recording never calls malloc and a step's tape disappears with the step's arena. */
#include "autograd.h"

#include <string.h>

#include "cuda_kernels.h"
#include "ops_device.h"

void ttt_tape_init(ttt_tape *tape) { memset(tape, 0, sizeof *tape); }

/* The buffers on the free lists belong to the arena the caller resets with the tape. */
static void forget_free_grads(ttt_tape *tape) {
    memset(tape->free_grads, 0, sizeof tape->free_grads);
    tape->spare = NULL;
}

void ttt_tape_reset(ttt_tape *tape) {
    tape->last = NULL;
    tape->n_entries = 0;
    forget_free_grads(tape);
}

void ttt_tape_free(ttt_tape *tape) { ttt_tape_reset(tape); }

void ttt_tape_print(const ttt_tape *tape, FILE *f) {
    size_t i = tape->n_entries; /* the list runs newest first */
    for (const ttt_tape_entry *e = tape->last; e; e = e->prev) {
        char s[64];
        fprintf(f, "  [%zu] %-20s -> %s\n", --i, e->name ? e->name : "?",
                ttt_tensor_shape_str(e->out, s, sizeof s));
    }
}

void ttt_tensor_set_param(ttt_tensor *t, float *grad) {
    TTT_ASSERT(grad != NULL);
    t->requires_grad = 1;
    t->grad_persistent = 1;
    t->grad = grad;
}

/* n floats of zeros at g, on t's device (a device gradient is zeroed on the default stream,
 * or on the arena's stream when the caller has one: grad_zero). */
static void grad_zero(const ttt_tensor *t, float *g, size_t n, void *stream) {
    if (ttt_tensor_on_device(t))
        ttt_device_ops_note(
            ttt_device_zero(g, ttt_tensor_device(t), n * sizeof(float), stream, ttt_device_ops_err()));
    else
        memset(g, 0, n * sizeof(float));
}

void ttt_tensor_zero_grad(ttt_tensor *t) {
    if (t->grad) grad_zero(t, t->grad, t->n, NULL);
    t->grad_stale = 0;
}

void ttt_tensor_grad_overwrite(ttt_tensor *t) {
    TTT_ASSERT(t->grad_persistent && t->grad);
    t->grad_stale = 1;
}

void ttt_tensor_grad_settle(ttt_tensor *t) {
    if (t->grad_stale) ttt_tensor_zero_grad(t);
}

void *ttt_tape_alloc(ttt_ctx *ctx, size_t bytes) {
    void *p = ttt_arena_alloc(ttt_arena_host(ctx->arena), bytes);
    TTT_ASSERT(p != NULL);
    return p;
}

ttt_tape_entry *ttt_tape_record(ttt_ctx *ctx, ttt_backward_fn fn, ttt_tensor *out,
                                const ttt_tensor *const *inputs, int n_inputs) {
    if (!ttt_recording(ctx)) return NULL;
    int any = 0;
    for (int i = 0; i < n_inputs; i++) any |= inputs[i] && inputs[i]->requires_grad;
    if (!any) return NULL;
    TTT_ASSERT(fn != NULL && out != NULL && n_inputs > 0);
    ttt_tape_entry *e = ttt_tape_alloc(ctx, sizeof *e);
    memset(e, 0, sizeof *e);
    e->backward = fn;
    e->name = "custom";
    e->out = out;
    e->n_in = n_inputs;
    e->out_shared = out->requires_grad;
    e->in = ttt_tape_alloc(ctx, (size_t)n_inputs * sizeof *e->in);
    /* The cast drops const only to let backward write the inputs' grad field (autograd.h). */
    for (int i = 0; i < n_inputs; i++) e->in[i] = (ttt_tensor *)inputs[i];
    out->requires_grad = 1;
    out->grad_persistent = 0;
    out->grad = NULL;
    out->grad_stale = 0;
    e->prev = ctx->tape->last;
    ctx->tape->last = e;
    ctx->tape->n_entries++;
    return e;
}

/* A free gradient buffer's record. A host buffer holds its own record in its first bytes while
 * it waits (every arena allocation holds at least 64 bytes, tensor.c); the host cannot write
 * device memory, so a device buffer's record is a host node (the arena's host side), kept on
 * the tape's spares once its buffer is taken again. */
typedef struct free_grad {
    struct free_grad *next;
    size_t n; /* elements */
    float *ptr;
    int on_device;
} free_grad;

/* Element counts of one model are few and often powers of two: a multiplicative hash spreads
 * them over the buckets, so a bucket's chain is mostly buffers of one size. */
static size_t bucket_of(size_t n) {
    return (size_t)((n * 0x9E3779B97F4A7C15ull) >> 40) % TTT_TAPE_FREE_BUCKETS;
}

/* A recycled buffer of exactly n elements on the host or a device, unlinked, or NULL. A device
 * buffer is reused in stream order: every kernel that read or wrote it as the older gradient was
 * queued on the arena's stream before the op that takes it now. */
static float *take_free_grad(ttt_tape *tape, size_t n, int on_device) {
    for (free_grad **pp = (free_grad **)&tape->free_grads[bucket_of(n)]; *pp;
         pp = &(*pp)->next)
        if ((*pp)->n == n && (*pp)->on_device == on_device) {
            free_grad *f = *pp;
            *pp = f->next;
            if (on_device) {
                f->next = tape->spare;
                tape->spare = f;
            }
            return f->ptr;
        }
    return NULL;
}

static void give_back_grad(ttt_ctx *ctx, ttt_tensor *t) {
    ttt_tape *tape = ctx->tape;
    const int on_device = ttt_tensor_on_device(t);
    free_grad *f;
    if (!on_device) {
        f = (free_grad *)(void *)t->grad;
    } else if ((f = tape->spare)) {
        tape->spare = f->next;
    } else {
        f = ttt_tape_alloc(ctx, sizeof *f);
    }
    *f = (free_grad){.next = tape->free_grads[bucket_of(t->n)], .n = t->n, .ptr = t->grad,
                     .on_device = on_device};
    tape->free_grads[bucket_of(t->n)] = f;
    t->grad = NULL;
}

float *ttt_grad(ttt_ctx *ctx, const ttt_tensor *t) {
    int add;
    float *g = ttt_grad_acc(ctx, t, &add);
    if (g && !add) grad_zero(t, g, t->n, ctx->arena->stream); /* this caller adds */
    return g;
}

float *ttt_grad_acc(ttt_ctx *ctx, const ttt_tensor *t, int *add) {
    *add = 1;
    if (!t || !t->requires_grad) return NULL;
    ttt_tensor *m = (ttt_tensor *)t; /* grad metadata only (autograd.h) */
    if (m->grad_persistent) {
        if (m->grad_stale) *add = 0; /* the caller writes every element (or ttt_grad zeroes) */
        m->grad_stale = 0;
    } else if (!m->grad && ttt_tensor_on_device(m)) {
        /* device memory of the arena's device (ops never mix devices, ops_device.h), recycled
         * through host nodes (take_free_grad) */
        TTT_ASSERT(ttt_device_equal(ttt_tensor_device(m), ctx->arena->device));
        ttt_tape *tape = ctx->tape;
        m->grad = tape && tape->recycle ? take_free_grad(tape, m->n, 1) : NULL;
        if (!m->grad) {
            const size_t bytes = (m->n ? m->n : 1) * sizeof(float);
            m->grad = ttt_arena_alloc(ctx->arena, bytes);
            TTT_ASSERT(m->grad != NULL);
            if (tape) tape->grad_bytes += bytes;
        }
        *add = 0;
    } else if (!m->grad) {
        /* a fresh or recycled buffer holds garbage: its first writer assigns (or ttt_grad zeroes) */
        ttt_tape *tape = ctx->tape;
        m->grad = tape && tape->recycle ? take_free_grad(tape, m->n, 0) : NULL;
        if (!m->grad) {
            const size_t bytes = (m->n ? m->n : 1) * sizeof(float);
            m->grad = ttt_tape_alloc(ctx, bytes);
            if (tape) tape->grad_bytes += bytes;
        }
        *add = 0;
    }
    return m->grad;
}

float *ttt_grad_acc_over_values(ttt_ctx *ctx, const ttt_tensor *t, int *add) {
    ttt_tensor *m = (ttt_tensor *)t; /* grad metadata only (autograd.h) */
    if (m && m->requires_grad && !m->grad_persistent && !m->grad && m->data) {
        m->grad = m->data;
        *add = 0;
        return m->grad;
    }
    return ttt_grad_acc(ctx, t, add);
}

void ttt_backward_identity(ttt_ctx *ctx, const ttt_tape_entry *e, const float *dout) {
    ttt_tensor *a = e->in[0];
    TTT_ASSERT(a->n == e->out->n);
    if (a && a->requires_grad && !a->grad_persistent && !a->grad) {
        a->grad = (float *)dout; /* e->out->grad, final by now (autograd.h) */
        return;
    }
    int add;
    float *g = ttt_grad_acc(ctx, a, &add);
    if (!g) return;
    if (ttt_tensor_on_device(a))
        ttt_device_ops_note(ttt_cuda_map(TTT_MAP_SCALE, g, add, dout, NULL, 0, NULL, 1, a->n, 1.0f,
                                         0.0f, ctx->arena->stream, ttt_device_ops_err()));
    else if (add)
        for (size_t i = 0; i < a->n; i++) g[i] += dout[i];
    else
        memcpy(g, dout, a->n * sizeof(float));
}

/* Whether a backward step handed e->out's gradient buffer to an input as its own (a reshape,
 * ttt_backward_identity): then the buffer lives on as that input's gradient and must not be
 * recycled. */
static int grad_passed_on(const ttt_tape_entry *e) {
    for (int i = 0; i < e->n_in; i++)
        if (e->in[i] && e->in[i]->grad == e->out->grad) return 1;
    return 0;
}

/* Forget the non-persistent gradients of everything on the tape, so this backward call starts
 * from zero for them (parameters keep accumulating). */
static void clear_grads(ttt_tape *tape) {
    for (ttt_tape_entry *e = tape->last; e; e = e->prev) {
        if (!e->out->grad_persistent) e->out->grad = NULL;
        for (int i = 0; i < e->n_in; i++) {
            ttt_tensor *t = e->in[i];
            if (t && t->requires_grad && !t->grad_persistent) t->grad = NULL;
        }
    }
}

void ttt_backward_from(ttt_ctx *ctx, const ttt_tensor *out, const float *dout) {
    TTT_ASSERT(ctx->tape != NULL);
    if (!out->requires_grad) return; /* nothing that requires grad reaches out */
    clear_grads(ctx->tape);
    forget_free_grads(ctx->tape);
    ctx->tape->grad_bytes = 0;
    if (!out->grad_persistent) ((ttt_tensor *)out)->grad = NULL;
    /* Backward functions may call ops; they must not record (no higher-order gradients), and
     * they must not see the entries they are walking grow. */
    int saved = ctx->grad;
    ctx->grad = 0;
    float *g = ttt_grad(ctx, out);
    if (ttt_tensor_on_device(out)) /* dout is memory of out's device (autograd.h) */
        ttt_device_ops_note(ttt_cuda_map(TTT_MAP_SCALE, g, 1, dout, NULL, 0, NULL, 1, out->n, 1.0f,
                                         0.0f, ctx->arena->stream, ttt_device_ops_err()));
    else
        for (size_t i = 0; i < out->n; i++) g[i] += dout[i];
    const int recycle = ctx->tape->recycle;
    for (ttt_tape_entry *e = ctx->tape->last; e; e = e->prev) {
        if (!e->out->grad) continue;
        e->backward(ctx, e, e->out->grad);
        /* Every consumer of e->out is newer and has run: its gradient is dead (autograd.h). */
        if (recycle && !e->out_shared && e->out != out && !e->out->grad_persistent &&
            !grad_passed_on(e))
            give_back_grad(ctx, e->out);
    }
    ctx->grad = saved;
}

void ttt_backward(ttt_ctx *ctx, const ttt_tensor *loss) {
    if (loss->n != 1) {
        char s[64];
        fprintf(stderr,
                "ttt: ttt_backward needs a 1-element loss, got %s (use ttt_backward_from)\n",
                ttt_tensor_shape_str(loss, s, sizeof s));
        TTT_ASSERT(loss->n == 1);
    }
    const float one = 1.0f;
    if (ttt_tensor_on_device(loss)) {
        /* the seed on the loss's device: dout of ttt_backward_from lives where out does */
        float *seed = ttt_arena_alloc(ctx->arena, sizeof(float));
        TTT_ASSERT(seed != NULL);
        ttt_device_ops_note(ttt_cuda_fill_f32(seed, 1.0f, 1, ctx->arena->stream,
                                              ttt_device_ops_err()));
        ttt_backward_from(ctx, loss, seed);
        return;
    }
    ttt_backward_from(ctx, loss, &one);
}
