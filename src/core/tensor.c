#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "tensor.h"

#include "autograd.h"
#include "blas.h"
#include "fault.h"
#include "ops_device.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define TTT_ALIGN 64

/* A tensor header is one arena unit: the memory estimates count it so (docs/hardening.md "Out of
 * memory"), and a larger one would double every header's arena bytes. */
_Static_assert(sizeof(ttt_tensor) <= TTT_ALIGN, "a tensor header must fit one 64-byte arena unit");

struct ttt_arena_block {
    ttt_arena_block *prev;
    size_t size;         /* usable bytes at base */
    size_t offset;       /* bytes used */
    unsigned char *base; /* data[] for a host block; the device memory of a device block, whose
                            header alone is host memory */
    _Alignas(TTT_ALIGN) unsigned char data[];
};

void ttt_arena_init(ttt_arena *a, size_t block_size) {
    memset(a, 0, sizeof *a);
    a->block_size = ttt_fault_arena_block(block_size ? block_size : ((size_t)1 << 20));
}

static _Atomic long long mem_now, mem_peak;

void ttt_mem_track(double bytes) {
    long long now = atomic_fetch_add(&mem_now, (long long)bytes) + (long long)bytes;
    long long peak = atomic_load(&mem_peak);
    while (now > peak && !atomic_compare_exchange_weak(&mem_peak, &peak, now)) {
    }
}

double ttt_mem_peak(void) { return (double)atomic_load(&mem_peak); }
void ttt_mem_peak_reset(void) { atomic_store(&mem_peak, atomic_load(&mem_now)); }

static size_t block_bytes(size_t usable) {
    return (sizeof(ttt_arena_block) + usable + TTT_ALIGN - 1) & ~(size_t)(TTT_ALIGN - 1);
}

/* Blocks of at least this many bytes are mapped from the system directly instead of through
 * malloc. glibc's malloc moves its own mmap threshold up to the size of the largest block freed
 * (up to 32 MiB) and keeps later blocks of that size in its heaps, trimmed or not depending on
 * the history of the process; a mapped block is the same memory whatever happened before: it is
 * faulted in once when first touched and given back to the system when the arena frees it.
 * Smaller blocks (the 1 MiB default of short-lived arenas) stay with malloc, whose reuse of them
 * avoids a mapping per arena. */
#define ARENA_MAP_BYTES ((size_t)4 << 20)

static ttt_arena_block *block_new(size_t bytes) {
    if (ttt_fault_alloc()) return NULL;
    if (bytes < ARENA_MAP_BYTES) return aligned_alloc(TTT_ALIGN, bytes);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p; /* page-aligned, so TTT_ALIGN-aligned */
}

/* A device block: a host header and `usable` bytes from the device's pool. */
static ttt_arena_block *device_block_new(const ttt_arena *a, size_t usable) {
    if (ttt_fault_alloc()) return NULL;
    ttt_arena_block *h = malloc(sizeof *h);
    if (!h) return NULL;
    ttt_device_buffer buf;
    if (ttt_device_alloc(&buf, a->device, usable, a->stream, "a device arena block", NULL) !=
        TTT_OK) {
        free(h);
        return NULL;
    }
    h->base = buf.ptr; /* pool memory is at least 256-byte aligned */
    return h;
}

static void free_chain_device(const ttt_arena *a, ttt_arena_block *b) {
    while (b) {
        ttt_arena_block *p = b->prev;
        ttt_device_buffer buf = {a->device, b->base, b->size, a->stream};
        ttt_device_free(&buf);
        free(b);
        b = p;
    }
}

static void free_chain(ttt_arena_block *b) {
    while (b) {
        ttt_arena_block *p = b->prev;
        const size_t bytes = block_bytes(b->size);
        ttt_mem_track(-(double)bytes);
        if (bytes < ARENA_MAP_BYTES) free(b);
        else munmap(b, bytes);
        b = p;
    }
}

static int omp_level(void) {
#ifdef _OPENMP
    return omp_get_level();
#else
    return 0;
#endif
}

void ttt_arena_arm(ttt_arena *a, ttt_arena_escape *e) {
    e->thread = pthread_self();
    e->level = omp_level();
    a->escape = e;
    a->failed_bytes = 0;
    a->failed_what = NULL;
    /* a device arena's host records (tensor headers, tape entries) come from its meta arena:
     * running out of host memory there takes the same escape */
    if (a->meta) {
        a->meta->escape = e;
        a->meta->failed_bytes = 0;
        a->meta->failed_what = NULL;
    }
}

void ttt_arena_disarm(ttt_arena *a) {
    a->escape = NULL;
    if (a->meta) a->meta->escape = NULL;
}

/* An allocation failed (an arena block, or `what` outside the arena): jump to the armed escape
 * when that is sound (tensor.h). */
static void escape_what(ttt_arena *a, size_t bytes, const char *what) {
    a->failed_bytes = bytes;
    a->failed_what = what;
    ttt_arena_escape *e = a->escape;
    if (!e || !pthread_equal(e->thread, pthread_self()) || e->level != omp_level()) return;
    a->escape = NULL; /* one jump; the caller re-arms for its next unit of work */
    longjmp(e->jump, 1);
}
static void escape(ttt_arena *a, size_t bytes) { escape_what(a, bytes, NULL); }

_Noreturn void ttt_ctx_out_of_memory(ttt_ctx *ctx, size_t bytes, const char *what) {
    ttt_arena *a = ttt_arena_host(ctx->arena);
    escape_what(a, bytes, what); /* returns only when no escape is armed on this thread */
    fprintf(stderr, "ttt: out of memory for %zu bytes of %s (the arena holds %.1f MiB)\n", bytes,
            what, (double)ttt_arena_footprint(a) / 1048576.0);
    abort();
}

ttt_status ttt_arena_run(ttt_arena *a, ttt_status (*work)(void *arg, ttt_error *err), void *arg,
                         const char *what, ttt_error *err) {
    ttt_arena_escape esc;
    ttt_arena_escape *const prev = a->escape; /* not changed between setjmp and longjmp */
    ttt_arena_escape *const prev_meta = a->meta ? a->meta->escape : NULL;
    ttt_status st;
    ttt_arena_arm(a, &esc);
    if (setjmp(esc.jump) == 0) {
        st = work(arg, err);
    } else {
        a->escape = prev;
        if (a->meta) a->meta->escape = prev_meta;
        if (a->failed_what)
            return ttt_error_set(err, TTT_ERR_NOMEM,
                                 "%s: out of memory for %zu bytes of %s (the arena held %.1f "
                                 "MiB)",
                                 what, a->failed_bytes, a->failed_what,
                                 (double)ttt_arena_footprint(a) / 1048576.0);
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "%s: out of memory for %zu bytes (the arena held %.1f MiB)", what,
                             a->failed_bytes, (double)ttt_arena_footprint(a) / 1048576.0);
    }
    a->escape = prev;
    if (a->meta) a->meta->escape = prev_meta;
    return st;
}

ttt_status ttt_arena_init_device(ttt_arena *a, size_t block_size, ttt_device d, void *stream,
                                 ttt_error *err) {
    ttt_arena_init(a, block_size);
    if (ttt_device_is_host(d)) return TTT_OK;
    TTT_TRY(ttt_device_usable(d, err));
    TTT_TRY(ttt_device_stream_check(d, stream, err));
    ttt_arena *meta = malloc(sizeof *meta);
    if (!meta) return ttt_error_set(err, TTT_ERR_NOMEM, "out of host memory for an arena");
    ttt_arena_init(meta, 0);
    a->meta = meta;
    a->device = d;
    a->stream = stream;
    return TTT_OK;
}

void ttt_arena_free(ttt_arena *a) {
    if (a->meta) {
        free_chain_device(a, a->head);
        free_chain_device(a, a->spare);
        ttt_arena_free(a->meta);
        free(a->meta);
        a->meta = NULL;
        a->device = ttt_device_host();
    } else {
        free_chain(a->head);
        free_chain(a->spare);
    }
    a->head = a->spare = NULL;
    a->closed = 0;
}

/* O(1): called on every allocation to keep `peak` (the sum over blocks would make a long tape's
 * allocations quadratic in the number of blocks). */
size_t ttt_arena_footprint(const ttt_arena *a) {
    return a->closed + (a->head ? a->head->offset : 0);
}

size_t ttt_arena_held(const ttt_arena *a) {
    size_t s = 0;
    for (const ttt_arena_block *b = a->head; b; b = b->prev) s += b->size;
    for (const ttt_arena_block *b = a->spare; b; b = b->prev) s += b->size;
    return s;
}

/* A spare block of at least `need` usable bytes, unlinked from the spare list, or NULL. */
static ttt_arena_block *take_spare(ttt_arena *a, size_t need) {
    for (ttt_arena_block **pp = &a->spare; *pp; pp = &(*pp)->prev)
        if ((*pp)->size >= need) {
            ttt_arena_block *b = *pp;
            *pp = b->prev;
            return b;
        }
    return NULL;
}

void *ttt_arena_alloc(ttt_arena *a, size_t bytes) {
    size_t need = (bytes + TTT_ALIGN - 1) & ~(size_t)(TTT_ALIGN - 1);
    if (need == 0) need = TTT_ALIGN;
    ttt_arena_block *b = a->head;
    if (!b || b->offset + need > b->size) {
        ttt_arena_block *nb = take_spare(a, need);
        if (!nb) {
            size_t sz = need > a->block_size ? need : a->block_size;
            if (a->limit && ttt_arena_held(a) + sz > a->limit) {
                escape(a, bytes);
                return NULL;
            }
            if (a->meta) {
                nb = device_block_new(a, sz);
            } else {
                nb = block_new(block_bytes(sz));
                if (nb) {
                    nb->base = nb->data;
                    ttt_mem_track((double)block_bytes(sz));
                }
            }
            if (!nb) {
                escape(a, bytes);
                return NULL;
            }
            nb->size = sz;
        }
        nb->prev = b;
        nb->offset = 0;
        if (b) a->closed += b->offset;
        a->head = nb;
        b = nb;
    }
    void *p = b->base + b->offset;
    b->offset += need;
    a->used_total += need;
    size_t fp = a->closed + b->offset;
    if (fp > a->peak) a->peak = fp;
    return p;
}

ttt_arena_mark ttt_arena_mark_get(const ttt_arena *a) {
    ttt_arena_mark m = {a->head, a->head ? a->head->offset : 0, NULL, 0};
    if (a->meta) {
        m.meta_block = a->meta->head;
        m.meta_offset = a->meta->head ? a->meta->head->offset : 0;
    }
    return m;
}

/* Pop head onto the spare list; the block behind it becomes head. */
static void pop_block(ttt_arena *a) {
    ttt_arena_block *h = a->head, *p = h->prev;
    if (p) a->closed -= p->offset;
    h->prev = a->spare;
    a->spare = h;
    a->head = p;
}

void ttt_arena_release(ttt_arena *a, ttt_arena_mark m) {
    if (a->meta) ttt_arena_release(a->meta, (ttt_arena_mark){m.meta_block, m.meta_offset, NULL, 0});
    while (a->head && a->head != m.block) {
        if (!a->head->prev && !m.block) {
            /* the mark was taken on an empty arena: keep the first block as head */
            a->head->offset = 0;
            return;
        }
        pop_block(a);
    }
    if (a->head) a->head->offset = m.offset;
}

void ttt_arena_reset(ttt_arena *a) {
    /* Keep every block: the oldest stays head, the others wait on the spare list for the next
     * pass, which in a training loop needs the same sizes again. */
    if (a->meta) ttt_arena_reset(a->meta);
    if (!a->head) return;
    while (a->head->prev) pop_block(a);
    a->head->offset = 0;
    a->closed = 0;
}

/* Ops return tensors, not a status, so running out of memory inside one cannot be reported as an
 * error; the estimates checked before a run (ttt_size_check) are what keeps it from happening.
 * When it happens anyway the message says what was being allocated instead of an assertion. */
static _Noreturn void tensor_out_of_memory(const ttt_arena *a, int ndim, const int *shape) {
    char dims[96];
    size_t o = 0;
    for (int i = 0; i < ndim && o < sizeof dims; i++)
        o += (size_t)snprintf(dims + o, sizeof dims - o, i ? ", %d" : "%d", shape[i]);
    fprintf(stderr,
            "ttt: out of memory allocating a tensor of shape (%s) (the arena holds %.1f MiB); the "
            "memory estimates did not cover this run\n",
            dims, (double)ttt_arena_footprint(a) / 1048576.0);
    abort();
}

ttt_tensor *ttt_tensor_new(ttt_ctx *ctx, int ndim, const int *shape) {
    TTT_ASSERT(ndim >= 1 && ndim <= TTT_MAX_DIMS);
    ttt_tensor *t = ttt_arena_alloc(ttt_arena_host(ctx->arena), sizeof *t);
    if (!t) tensor_out_of_memory(ctx->arena, ndim, shape);
    ttt_tensor_set_device(t, ctx->arena->device);
    t->ndim = ndim;
    t->n = 1;
    t->requires_grad = 0; /* a constant until an op records it (autograd.h) */
    t->grad_persistent = 0;
    t->grad = NULL;
    t->grad_stale = 0;
    for (int i = 0; i < TTT_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 1;
    for (int i = 0; i < ndim; i++) {
        TTT_ASSERT(shape[i] >= 0);
        t->n *= (size_t)shape[i];
    }
    t->data = ttt_arena_alloc(ctx->arena, t->n * sizeof(float));
    if (!t->data) tensor_out_of_memory(ctx->arena, ndim, shape);
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
    if (ttt_tensor_on_device(r))
        ttt_device_ops_note(ttt_device_zero(r->data, ttt_tensor_device(r), r->n * sizeof(float),
                                            ctx->arena->stream, ttt_device_ops_err()));
    else
        memset(r->data, 0, r->n * sizeof(float));
    return r;
}

ttt_tensor *ttt_tensor_to(ttt_ctx *ctx, const ttt_tensor *t) {
    ttt_tensor *r = ttt_tensor_new(ctx, t->ndim, t->shape);
    if (r->n)
        ttt_device_ops_note(ttt_device_copy(r->data, ttt_tensor_device(r), t->data, ttt_tensor_device(t),
                                            r->n * sizeof(float), ctx->arena->stream,
                                            ttt_device_ops_err()));
    /* host memory is read by the host at once: wait for a copy from a device */
    if (r->n && !ttt_tensor_on_device(r) && ttt_tensor_on_device(t))
        ttt_device_ops_note(ttt_device_sync(ttt_tensor_device(t), ctx->arena->stream, ttt_device_ops_err()));
    return r;
}

ttt_status ttt_tensor_read(const ttt_tensor *t, float *dst, void *stream, ttt_error *err) {
    if (!ttt_tensor_on_device(t)) {
        if (t->n) memcpy(dst, t->data, t->n * sizeof(float));
        return TTT_OK;
    }
    if (t->n)
        TTT_TRY(ttt_device_copy(dst, ttt_device_host(), t->data, ttt_tensor_device(t), t->n * sizeof(float),
                                stream, err));
    return ttt_device_sync(ttt_tensor_device(t), stream, err);
}

ttt_tensor *ttt_tensor_copy(ttt_ctx *ctx, const ttt_tensor *t) {
    if (TTT_OPS_ON_DEVICE(ctx, t, NULL)) return ttt_dev_copy(ctx, t);
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

ttt_tensor ttt_tensor_view_on(ttt_device d, float *data, int ndim, const int *shape) {
    ttt_tensor t = ttt_tensor_view(data, ndim, shape);
    ttt_tensor_set_device(&t, d);
    return t;
}

ttt_tensor ttt_tensor_view2(float *data, int n0, int n1) {
    return ttt_tensor_view(data, 2, (int[]){n0, n1});
}

void ttt_tensor_fill(ttt_tensor *t, float v) {
    if (ttt_tensor_on_device(t)) {
        ttt_device_ops_note(ttt_cuda_fill_f32(t->data, v, t->n, NULL, ttt_device_ops_err()));
        return;
    }
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

/* The address-space limit (`ulimit -v`, RLIMIT_AS, as on many clusters) in bytes, or a negative
 * number when there is none. Under such a limit a large allocation fails although the machine
 * has the memory, and OpenBLAS retries its buffer allocation in a loop instead of failing
 * (docs/hardening.md "Out of memory"); refusing up front avoids both. The limit itself is
 * compared, not what the process has left of it at the moment, so that `ttt check` and `ttt run`
 * decide alike; the reserve below counts the address space the program takes besides. */
double ttt_address_space_left(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return -1.0;
    return (double)rl.rlim_cur;
}

/* Address space a run takes beyond what the estimates count, under an address-space limit: the
 * program and its libraries (about 50 MiB), OpenBLAS maps a 32 MiB buffer per thread (plus its fixed pool), glibc reserves a 64 MiB malloc
 * arena per thread that allocates, and every thread a stack. Measured: small trained runs
 * (`mqar`, d_model 16 to 64) need `ulimit -v` of up to ≈ 430 MiB with one thread and more with
 * two (docs/hardening.md "Out of memory"); 256 MiB + 192 MiB per thread covers them, which
 * test_limits checks over random small configurations. */
double ttt_runtime_reserve(void) {
    int threads = ttt_blas_get_threads();
#ifdef _OPENMP
    if (omp_get_max_threads() > threads) threads = omp_get_max_threads();
#endif
    if (threads < 1) threads = 1;
    return (256.0 + 192.0 * threads) * 1048576.0;
}

/* "3.25 GiB", or "12.5 MiB" below a GiB (a small amount read as "0.00 GiB" says nothing). */
static const char *amount(double bytes, char *buf, size_t n) {
    if (bytes >= 1073741824.0) snprintf(buf, n, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(buf, n, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

static _Thread_local double estimate_sum;
void ttt_size_estimate_reset(void) { estimate_sum = 0.0; }
double ttt_size_estimate(void) { return estimate_sum; }

ttt_status ttt_size_check(double bytes, const char *what, ttt_error *err) {
    estimate_sum += bytes;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double phys = (pages > 0 && psize > 0) ? (double)pages * (double)psize : 8e9;
    if (bytes > phys * 0.8)
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "%s would need %.2f GiB of memory; this machine has %.2f GiB", what,
                             bytes / 1073741824.0, phys / 1073741824.0);
    const double left = ttt_address_space_left();
    const double reserve = left >= 0.0 ? ttt_runtime_reserve() : 0.0;
    if (left >= 0.0 && bytes + reserve > left) {
        char b1[32], b2[32];
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "%s would need %s of memory, and %.0f MiB more for the BLAS and "
                             "thread buffers; the address-space limit (ulimit -v) is %s",
                             what, amount(bytes, b1, sizeof b1), reserve / 1048576.0,
                             amount(left, b2, sizeof b2));
    }
    return TTT_OK;
}
