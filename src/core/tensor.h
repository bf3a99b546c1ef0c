/* Tensors and the arena they live in.
 *
 * A ttt_tensor is float32, up to 4 dims, contiguous and row-major. Tensors are allocated from a
 * ttt_arena (a bump allocator made of chained blocks): a step allocates freely and the whole step
 * is released at once with ttt_arena_reset / ttt_arena_release, so hot loops never call malloc.
 * A ttt_ctx bundles the arena with the autodiff switch and tape; every op takes one.
 * Autodiff (autograd.h) adds four fields to a tensor; all zero (the default of a designated or
 * zero initializer, and what ttt_tensor_new sets) means "a constant: no gradient". */
#ifndef TTT_TENSOR_H
#define TTT_TENSOR_H

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "status.h"

#define TTT_MAX_DIMS 4

typedef struct ttt_arena_block ttt_arena_block;
typedef struct ttt_arena_escape ttt_arena_escape;

typedef struct ttt_arena {
    ttt_arena_block *head;  /* current block (newest); older blocks chained behind it */
    size_t block_size;      /* default size of a new block in bytes */
    size_t used_total;      /* bytes handed out since init (statistics) */
    size_t peak;            /* largest footprint seen, in bytes */
    size_t limit;           /* refuse to grow past this many bytes (0 = no limit) */
    size_t closed;          /* bytes used in the blocks behind head (footprint = closed + head's) */
    ttt_arena_block *spare; /* blocks given back by release/reset, kept for reuse (their pages
                               stay mapped: a training step would otherwise fault them in again) */
    ttt_arena_escape *escape; /* armed: where a failed block allocation jumps (below), or NULL */
    size_t failed_bytes;      /* the size of the latest allocation that failed */
    const char *failed_what;  /* what it was when not an arena block (ttt_ctx_out_of_memory) */
    /* Where the blocks live (docs/design.md "Devices"): the host (the zero default), or a CUDA
     * device, whose blocks come from that device's pool (ttt_device_alloc) ordered on `stream`.
     * A device arena keeps the host memory of what it holds (tensor headers, tape entries,
     * saved scalars) in `meta`, a host arena marked, released and reset with it. */
    ttt_device device;
    void *stream;
    struct ttt_arena *meta; /* NULL for a host arena */
} ttt_arena;

/* Out of memory inside ops. Ops return tensors, not a status, and layers and forms take arena
 * memory without checks, so a failed arena allocation cannot travel back up as an error. Instead
 * the caller of a unit of work (a training shard's step, a task's measurement) arms an escape
 * on the arena; a block allocation that fails then longjmps back to it, and the caller releases
 * the arena and the tape and returns TTT_ERR_NOMEM naming what was being allocated
 * (docs/design.md "Errors, memory, determinism"). This is sound only when everything the work
 * allocates between the arm and the failure lives in the arena (nothing malloc'd is lost) and
 * no OpenMP region was entered since the arm (a longjmp must not leave one): the jump is taken
 * only on the arming thread at the arming OpenMP nesting level; anywhere else the allocation
 * returns NULL as before (and ttt_tensor_new ends the process with a message).
 *
 *   ttt_arena_escape esc;
 *   ttt_arena_arm(arena, &esc);
 *   if (setjmp(esc.jump) == 0) {
 *       ... ops ...
 *   } else {
 *       ... arena->failed_bytes could not be allocated: release the arena, reset the tape ...
 *   }
 *   ttt_arena_disarm(arena);
 *
 * Locals of the arming function that the work changes must be volatile to be read after the
 * jump (hence the size that failed is kept in the arena, not in the escape). Arming clears
 * failed_bytes; on a device arena it arms the meta arena too (its host records), whose
 * failed_bytes is then the size that failed when the arena's own is 0. */
struct ttt_arena_escape {
    jmp_buf jump;
    pthread_t thread;
    int level; /* omp_get_level() at the arm */
};
void ttt_arena_arm(ttt_arena *a, ttt_arena_escape *e);
void ttt_arena_disarm(ttt_arena *a);

/* The pattern above as a call, for work that runs outside the trainer's and the tasks' armed
 * units (a model's learned initialization, one sequence of the batch runner, one head of the
 * benchmark on its thread's arena): runs work(arg, err) with an escape armed on `a` and returns
 * its status, or, when an arena block could not be allocated, TTT_ERR_NOMEM with "<what>: out of
 * memory for N bytes (the arena held X MiB)". The arena then still holds what the work had
 * allocated: the caller releases it to its mark or frees it. Whatever work allocates outside the
 * arena must be freed before its next arena allocation; an escape armed before the call is
 * restored after it. Called inside an OpenMP region, it covers allocations made at that region's
 * level on the calling thread, which is where the batch runner's and the benchmark's threads
 * allocate (docs/hardening.md "Out of memory"). */
ttt_status ttt_arena_run(ttt_arena *a, ttt_status (*work)(void *arg, ttt_error *err), void *arg,
                         const char *what, ttt_error *err);

/* A position in the arena to return to: everything allocated after it is released. */
typedef struct ttt_arena_mark {
    ttt_arena_block *block;
    size_t offset;
    ttt_arena_block *meta_block; /* the same position in a device arena's meta arena */
    size_t meta_offset;
} ttt_arena_mark;

void ttt_arena_init(ttt_arena *a, size_t block_size);
/* A device arena: blocks of device d's memory from its pool, allocated and freed on `stream`
 * (a cudaStream_t, NULL = the default stream); the host arena is d = host. Fails (and leaves a
 * usable empty host arena) when d cannot be used: ttt_device_usable's reason. Tensors made in
 * it are on d; their headers live in host memory (the arena's `meta`). Freeing or releasing a
 * device arena is stream-ordered: memory is reused only by work queued after the release. */
ttt_status ttt_arena_init_device(ttt_arena *a, size_t block_size, ttt_device d, void *stream,
                                 ttt_error *err);
/* The host arena for host-side records of arena a (itself for a host arena). */
static inline struct ttt_arena *ttt_arena_host(struct ttt_arena *a) {
    return a->meta ? a->meta : a;
}
void ttt_arena_free(ttt_arena *a);
/* 64-byte aligned; returns NULL when memory runs out or the limit would be crossed. */
void *ttt_arena_alloc(ttt_arena *a, size_t bytes);
ttt_arena_mark ttt_arena_mark_get(const ttt_arena *a);
void ttt_arena_release(ttt_arena *a, ttt_arena_mark m);
void ttt_arena_reset(ttt_arena *a);
size_t ttt_arena_footprint(const ttt_arena *a);
/* Bytes the arena holds from the system: its blocks, in use or spare (what `limit` bounds). */
size_t ttt_arena_held(const ttt_arena *a);

typedef struct ttt_tensor {
    float *data; /* on `device`: a host pointer or CUDA device memory */
    int ndim;
    int shape[TTT_MAX_DIMS];
    size_t n; /* number of elements */
    /* autodiff (autograd.h) */
    int requires_grad;   /* nonzero: gradients flow to this tensor */
    int grad_persistent; /* nonzero: grad is a caller-owned buffer that accumulates (a parameter) */
    float *grad;         /* (n) dL/d(this tensor), same layout as data; NULL until needed */
    int grad_stale;      /* nonzero: a parameter's grad holds nothing of this backward yet (its
                          * first contribution assigns; autograd.h "First writer assigns") */
    /* Where data and grad live (docs/design.md "Devices"): the host (zero, the default of a
     * designated or zero initializer and of ttt_tensor_view) or the device of the arena the
     * tensor was made in; ops dispatch on it (ops.h). Kept in the 4 bytes of padding at the
     * end of the struct, so that a tensor header stays 64 bytes (one arena unit: a ttt_device
     * would make it 72 and every header 128 bytes of arena). Read with ttt_tensor_device. */
    uint16_t device_kind;  /* ttt_device_kind */
    uint16_t device_index; /* the CUDA ordinal; 0 on the host */
} ttt_tensor;

static inline ttt_device ttt_tensor_device(const ttt_tensor *t) {
    return (ttt_device){(ttt_device_kind)t->device_kind, t->device_index};
}
static inline void ttt_tensor_set_device(ttt_tensor *t, ttt_device d) {
    t->device_kind = (uint16_t)d.kind;
    t->device_index = (uint16_t)d.index;
}
/* Nonzero when t lives on a device rather than the host: the one branch a host op pays. */
static inline int ttt_tensor_on_device(const ttt_tensor *t) {
    return t->device_kind != TTT_DEVICE_HOST;
}

typedef struct ttt_tape ttt_tape; /* autograd.h */

/* Mixed precision of the products (docs/gpu.md "bfloat16 training"): with it, matmul and gemm
 * round both operands to bfloat16 and sum in fp32, forward and backward. On a device an operand
 * inside the fp32 master weights [master, master + n) is read from `twin` at the same offset
 * (their bf16 copy, kept current by the trainer after each update); any other operand is
 * rounded into arena scratch for the one product. The host's products do the same with every
 * operand rounded into scratch (a zeroed ttt_mixed will do): the tests' stand-in for the device,
 * never used by the trainer, which refuses bfloat16 on the host. */
typedef struct ttt_mixed {
    const float *master;
    size_t n;
    const uint16_t *twin;
} ttt_mixed;

/* Context of every op: where results are allocated, and the autodiff tape. */
typedef struct ttt_ctx {
    ttt_arena *arena;
    int grad;       /* nonzero: record ops for backward (no-grad mode records nothing) */
    ttt_tape *tape; /* where ops record when grad != 0; NULL = nothing is recorded */
    /* NULL, or a flag that a signal handler sets: once it is nonzero, the forms' long loops
     * (the generic driver's tokens) return TTT_ERR_INTERRUPTED with the message "interrupted"
     * instead of running to the end. Set by the tasks that measure (memory, equivalence,
     * benchmark), so that a stop ends a measurement within a token's work (docs/hardening.md
     * "Signals"); training leaves it NULL and stops between steps, where it checkpoints. */
    const volatile sig_atomic_t *stop;
    /* NULL: every product in fp32 (the host always); else the device products' bfloat16
     * operands (ttt_mixed above; train.dtype: bfloat16) */
    const ttt_mixed *mixed;
    /* 0, or a model made of blocks keeps only the input of its first `recompute` blocks on the
     * tape and runs each of them again in the backward (train.recompute; the sequence model,
     * docs/training.md "Memory of a training step"); without a tape it means nothing */
    int recompute;
} ttt_ctx;

/* Whether ctx asks its computation to stop now (ttt_ctx.stop). */
static inline int ttt_ctx_stopped(const ttt_ctx *ctx) { return ctx->stop && *ctx->stop; }

/* An op's buffer outside the arena (a recurrent kernel's rows, layers/forms/kernels.h) could not
 * be had: reported as a failed arena block is, through the escape armed on ctx's arena, so that
 * ttt_arena_run returns TTT_ERR_NOMEM naming `what` and the bytes. Ops return tensors, not a
 * status: without an armed escape it prints the same and aborts, as a tensor allocation outside
 * ttt_arena_run does (docs/api.md "Misuse"). */
_Noreturn void ttt_ctx_out_of_memory(ttt_ctx *ctx, size_t bytes, const char *what);

/* New tensors live in ctx->arena. Out of memory jumps to the arena's escape when one is armed
 * (above), else aborts with a message: callers that must survive huge sizes check the size first
 * with ttt_size_check. */
ttt_tensor *ttt_tensor_new(ttt_ctx *ctx, int ndim, const int *shape);
ttt_tensor *ttt_tensor_1d(ttt_ctx *ctx, int n0);
ttt_tensor *ttt_tensor_2d(ttt_ctx *ctx, int n0, int n1);
ttt_tensor *ttt_tensor_3d(ttt_ctx *ctx, int n0, int n1, int n2);
/* A constant (no gradient) of t's shape. */
ttt_tensor *ttt_tensor_zeros_like(ttt_ctx *ctx, const ttt_tensor *t);
/* A copy; recorded like an op when gradients are on (gradients pass straight through to t). */
ttt_tensor *ttt_tensor_copy(ttt_ctx *ctx, const ttt_tensor *t);
/* A tensor header over existing memory (no copy); used to wrap slices and external buffers.
 * A view is a constant for autodiff: it does not pass gradients to the memory it aliases (use the
 * recorded ttt_reshape / ttt_slice_rows / ttt_slice_cols for that). */
ttt_tensor ttt_tensor_view(float *data, int ndim, const int *shape);
ttt_tensor ttt_tensor_view2(float *data, int n0, int n1);
/* A header over memory of device d (no copy), like ttt_tensor_view. */
ttt_tensor ttt_tensor_view_on(ttt_device d, float *data, int ndim, const int *shape);
/* Fills t with v, on whichever device it lives (queued on the default stream for a device
 * tensor). */
void ttt_tensor_fill(ttt_tensor *t, float v);
/* A constant copy of t (host or device) in ctx->arena, on the arena's device: how inputs and
 * parameters move between the host and a device. Not recorded. Queued on the arena's stream;
 * a copy to the host is waited for. A failed copy records the device error
 * (ttt_device_ops_status, ops.h) and leaves the result's contents undefined. */
ttt_tensor *ttt_tensor_to(ttt_ctx *ctx, const ttt_tensor *t);
/* t's elements into host memory dst (t->n floats), waiting for the device's work on `stream`
 * (NULL: the default stream) first when t is on a device. */
ttt_status ttt_tensor_read(const ttt_tensor *t, float *dst, void *stream, ttt_error *err);
int ttt_tensor_same_shape(const ttt_tensor *a, const ttt_tensor *b);
/* "(3, 4)" into buf; returns buf. */
const char *ttt_tensor_shape_str(const ttt_tensor *t, char *buf, size_t n);

#define TTT_ROWS(t) ((t)->shape[0])
#define TTT_COLS(t) ((t)->shape[(t)->ndim - 1])

/* Accounting of the memory the estimates cover (docs/hardening.md "Out of memory"): arena
 * blocks, parameters with their gradients, AdamW's moments and the training shards' gradient
 * copies add their bytes here when allocated and subtract them when freed. The high-water mark
 * is what tests compare the estimates with (the process's other allocations are not counted). */
void ttt_mem_track(double bytes); /* > 0 allocated, < 0 freed */
double ttt_mem_peak(void);        /* the most held at once since the last reset */
void ttt_mem_peak_reset(void);    /* the peak becomes what is held now */

/* Refuse sizes that would need more than 80 % of physical memory, or more than an address-space
 * limit leaves (with the runtime reserve below), before allocating. Fills err with the amount
 * it would need. */
ttt_status ttt_size_check(double bytes, const char *what, ttt_error *err);
/* The sum of the sizes ttt_size_check was asked about on this thread since the last reset: the
 * plan pass resets it before a point's task parses and so learns the point's whole estimate. */
void ttt_size_estimate_reset(void);
double ttt_size_estimate(void);
/* Under an address-space limit (RLIMIT_AS, `ulimit -v`) the bytes of address space still free,
 * else a negative number; and the address space a run needs beyond the estimates for the BLAS
 * and thread buffers of the current thread counts. ttt_size_check counts both. */
double ttt_address_space_left(void);
double ttt_runtime_reserve(void);

#endif
