#include "tensor.h"

#include "autograd.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define TTT_ALIGN 64

struct ttt_arena_block {
    ttt_arena_block *prev;
    size_t size;   /* usable bytes in data[] */
    size_t offset; /* bytes used */
    _Alignas(TTT_ALIGN) unsigned char data[];
};

void ttt_arena_init(ttt_arena *a, size_t block_size) {
    memset(a, 0, sizeof *a);
    a->block_size = block_size ? block_size : ((size_t)1 << 20);
}

void ttt_arena_free(ttt_arena *a) {
    ttt_arena_block *b = a->head;
    while (b) {
        ttt_arena_block *p = b->prev;
        free(b);
        b = p;
    }
    a->head = NULL;
}

size_t ttt_arena_footprint(const ttt_arena *a) {
    size_t s = 0;
    for (const ttt_arena_block *b = a->head; b; b = b->prev) s += b->offset;
    return s;
}

void *ttt_arena_alloc(ttt_arena *a, size_t bytes) {
    size_t need = (bytes + TTT_ALIGN - 1) & ~(size_t)(TTT_ALIGN - 1);
    if (need == 0) need = TTT_ALIGN;
    ttt_arena_block *b = a->head;
    if (!b || b->offset + need > b->size) {
        /* Reuse a released successor? Blocks are freed on release, so always a new block. */
        size_t sz = need > a->block_size ? need : a->block_size;
        if (a->limit && ttt_arena_footprint(a) + sz > a->limit) return NULL;
        ttt_arena_block *nb = aligned_alloc(TTT_ALIGN, (sizeof *nb + sz + TTT_ALIGN - 1) &
                                                           ~(size_t)(TTT_ALIGN - 1));
        if (!nb) return NULL;
        nb->prev = b;
        nb->size = sz;
        nb->offset = 0;
        a->head = nb;
        b = nb;
    }
    void *p = b->data + b->offset;
    b->offset += need;
    a->used_total += need;
    size_t fp = ttt_arena_footprint(a);
    if (fp > a->peak) a->peak = fp;
    return p;
}

ttt_arena_mark ttt_arena_mark_get(const ttt_arena *a) {
    ttt_arena_mark m = {a->head, a->head ? a->head->offset : 0};
    return m;
}

void ttt_arena_release(ttt_arena *a, ttt_arena_mark m) {
    while (a->head && a->head != m.block) {
        ttt_arena_block *p = a->head->prev;
        if (!p && !m.block) {
            /* the mark was taken on an empty arena: keep the first block (its pages are already
             * mapped) instead of freeing it and faulting them in again next time */
            a->head->offset = 0;
            return;
        }
        free(a->head);
        a->head = p;
    }
    if (a->head) a->head->offset = m.offset;
}

void ttt_arena_reset(ttt_arena *a) {
    /* Keep the oldest block (the common steady-state size), free the rest. */
    if (!a->head) return;
    while (a->head->prev) {
        ttt_arena_block *p = a->head->prev;
        free(a->head);
        a->head = p;
    }
    a->head->offset = 0;
}

ttt_tensor *ttt_tensor_new(ttt_ctx *ctx, int ndim, const int *shape) {
    TTT_ASSERT(ndim >= 1 && ndim <= TTT_MAX_DIMS);
    ttt_tensor *t = ttt_arena_alloc(ctx->arena, sizeof *t);
    TTT_ASSERT(t != NULL);
    t->ndim = ndim;
    t->n = 1;
    t->requires_grad = 0; /* a constant until an op records it (autograd.h) */
    t->grad_persistent = 0;
    t->grad = NULL;
    for (int i = 0; i < TTT_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 1;
    for (int i = 0; i < ndim; i++) {
        TTT_ASSERT(shape[i] >= 0);
        t->n *= (size_t)shape[i];
    }
    t->data = ttt_arena_alloc(ctx->arena, t->n * sizeof(float));
    TTT_ASSERT(t->data != NULL);
    return t;
}

ttt_tensor *ttt_tensor_1d(ttt_ctx *ctx, int n0) { return ttt_tensor_new(ctx, 1, (int[]){n0}); }
ttt_tensor *ttt_tensor_2d(ttt_ctx *ctx, int n0, int n1) {
    return ttt_tensor_new(ctx, 2, (int[]){n0, n1});
}
ttt_tensor *ttt_tensor_3d(ttt_ctx *ctx, int n0, int n1, int n2) {
    return ttt_tensor_new(ctx, 3, (int[]){n0, n1, n2});
}

ttt_tensor *ttt_tensor_zeros_like(ttt_ctx *ctx, const ttt_tensor *t) {
    ttt_tensor *r = ttt_tensor_new(ctx, t->ndim, t->shape);
    memset(r->data, 0, r->n * sizeof(float));
    return r;
}

ttt_tensor *ttt_tensor_copy(ttt_ctx *ctx, const ttt_tensor *t) {
    ttt_tensor *r = ttt_tensor_new(ctx, t->ndim, t->shape);
    memcpy(r->data, t->data, r->n * sizeof(float));
    /* The copy holds the same values, so its gradient flows to t unchanged. */
    if (ctx->grad) {
        ttt_tape_entry *e =
            ttt_tape_record(ctx, ttt_backward_identity, r, (const ttt_tensor *const[]){t}, 1);
        if (e) e->name = "copy";
    }
    return r;
}

ttt_tensor ttt_tensor_view(float *data, int ndim, const int *shape) {
    ttt_tensor t = {.data = data, .ndim = ndim, .n = 1};
    for (int i = 0; i < TTT_MAX_DIMS; i++) t.shape[i] = i < ndim ? shape[i] : 1;
    for (int i = 0; i < ndim; i++) t.n *= (size_t)shape[i];
    return t;
}

ttt_tensor ttt_tensor_view2(float *data, int n0, int n1) {
    return ttt_tensor_view(data, 2, (int[]){n0, n1});
}

void ttt_tensor_fill(ttt_tensor *t, float v) {
    for (size_t i = 0; i < t->n; i++) t->data[i] = v;
}

int ttt_tensor_same_shape(const ttt_tensor *a, const ttt_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

const char *ttt_tensor_shape_str(const ttt_tensor *t, char *buf, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "(");
    for (int i = 0; i < t->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, i ? ", %d" : "%d", t->shape[i]);
    if (o < n) snprintf(buf + o, n - o, ")");
    return buf;
}

ttt_status ttt_size_check(double bytes, const char *what, ttt_error *err) {
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double phys = (pages > 0 && psize > 0) ? (double)pages * (double)psize : 8e9;
    if (bytes > phys * 0.8)
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "%s would need %.2f GiB of memory; this machine has %.2f GiB", what,
                             bytes / 1073741824.0, phys / 1073741824.0);
    return TTT_OK;
}
