/* The device seam (docs/design.md "Devices"): where memory lives (the host or CUDA device N),
 * device memory from a per-device stream-ordered pool, the caller's stream, and CUDA errors as
 * ttt statuses. Everything above the core that touches a GPU goes through this header; only
 * device.c and the .cu files of src/core/cuda call the CUDA runtime. Built without CUDA (TTT_HAVE_CUDA
 * unset) every function still exists: cuda:N is refused with "this build has no CUDA (configure
 * with -DTTT_CUDA=ON)" and the device count is 0.
 *
 * Nothing here aborts or exits on a CUDA error: every failing runtime call becomes
 * TTT_ERR_DEVICE with a message naming the call and the device ("cudaMallocFromPoolAsync(1.50
 * GiB) on cuda:0: out of memory"), and the runtime's last-error slot is cleared so that the
 * next caller's launch check does not see a stale error. */
#ifndef TTT_DEVICE_H
#define TTT_DEVICE_H

#include <stddef.h>

#include <ttt/ttt.h> /* ttt_device_kind, ttt_dtype (public, docs/api.md "Device buffers") */

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most CUDA devices the seam keeps a pool for. */
#define TTT_MAX_CUDA_DEVICES 64

/* A place memory lives and work runs: the host, or CUDA device `index`. A value type, meant to
 * sit on buffers now and on tensors later (docs/design.md "Devices"). */
typedef struct ttt_device {
    ttt_device_kind kind;
    int index; /* CUDA device ordinal; 0 for the host */
} ttt_device;

static inline ttt_device ttt_device_host(void) { return (ttt_device){TTT_DEVICE_HOST, 0}; }
static inline ttt_device ttt_device_cuda(int index) {
    return (ttt_device){TTT_DEVICE_CUDA, index};
}
static inline int ttt_device_is_host(ttt_device d) { return d.kind == TTT_DEVICE_HOST; }
int ttt_device_equal(ttt_device a, ttt_device b);
/* "host" or "cuda:N" into buf (at least 16 bytes); returns buf. */
const char *ttt_device_name(ttt_device d, char *buf, size_t len);

/* Bytes of one element, and the name ("float32", "bfloat16"); 0 / "?" for an unknown value. */
size_t ttt_dtype_size(ttt_dtype t);
const char *ttt_dtype_name(ttt_dtype t);

/* A block of memory on a device, with the stream its allocation and release are ordered on. */
typedef struct ttt_device_buffer {
    ttt_device device;
    void *ptr;     /* NULL when empty */
    size_t bytes;
    void *stream;  /* cudaStream_t (NULL = the default stream); unused on the host */
} ttt_device_buffer;

/* Whether this build has CUDA compiled in (TTT_HAVE_CUDA). */
int ttt_device_cuda_built(void);

/* TTT_OK when work can run on d: the host always; cuda:N when the build has CUDA, the driver
 * answers and 0 <= N < the device count. Otherwise TTT_ERR_UNSUPPORTED (no CUDA in the build,
 * no GPU or driver: the reason from cudaGetDeviceCount) or TTT_ERR_ARG (N out of range). */
ttt_status ttt_device_usable(ttt_device d, ttt_error *err);

/* Makes d the calling thread's current CUDA device for a stretch of work and restores the
 * previous one afterwards, so that a call into the library does not move the caller's current
 * device. A no-op for the host. */
typedef struct ttt_device_scope {
    int prev;    /* the thread's current device before enter */
    int changed; /* leave restores prev */
} ttt_device_scope;
ttt_status ttt_device_enter(ttt_device d, ttt_device_scope *scope, ttt_error *err);
void ttt_device_leave(ttt_device_scope *scope);

/* TTT_OK when `stream` (a cudaStream_t, NULL = the default stream) can order work on d:
 * TTT_ERR_ARG when it belongs to another device. */
ttt_status ttt_device_stream_check(ttt_device d, void *stream, ttt_error *err);

/* `bytes` of memory on d into b, ordered on `stream`: on the host malloc; on cuda:N from that
 * device's pool (cudaMallocFromPoolAsync: no cudaMalloc per call; freed memory stays reserved
 * for the next call, docs/design.md "Devices"). `what` names the use in an error message. On
 * failure b is empty and nothing is held. bytes == 0 gives an empty buffer and TTT_OK. */
ttt_status ttt_device_alloc(ttt_device_buffer *b, ttt_device d, size_t bytes, void *stream,
                            const char *what, ttt_error *err);
/* Returns b's memory (stream-ordered on b->stream for CUDA) and empties b; NULL or empty: no-op. */
void ttt_device_free(ttt_device_buffer *b);

/* Copies `bytes` from src (on device sd) to dst (on dd), ordered on `stream`; asynchronous for
 * device memory as cudaMemcpyAsync is. */
ttt_status ttt_device_copy(void *dst, ttt_device dd, const void *src, ttt_device sd,
                           size_t bytes, void *stream, ttt_error *err);
/* Zeroes `bytes` at p on d, ordered on `stream`. */
ttt_status ttt_device_zero(void *p, ttt_device d, size_t bytes, void *stream, ttt_error *err);
/* Waits for the work queued on `stream` of d. */
ttt_status ttt_device_sync(ttt_device d, void *stream, ttt_error *err);

/* Where a pointer the caller gave lives, checked against where the call says it lives:
 * d = cuda:N expects device (or managed) memory of device N, d = host expects memory the host
 * can read (and refuses device memory when CUDA is in use in the process). `align` > 0 also
 * requires p to be a multiple of align bytes. `what` names the argument ("io->q"). NULL p is
 * accepted (the caller checks required arguments). TTT_ERR_ARG with a sentence on mismatch. */
ttt_status ttt_device_check_pointer(const void *p, ttt_device d, size_t align, const char *what,
                                    ttt_error *err);

/* The pool of cuda:N as its counters: bytes the pool holds from the driver now and at most
 * since it was made (or since the last ttt_device_pool_peak_reset), bytes handed out now and at
 * most at once over the same time (`used_high`: the high-water mark a training run reports as
 * its peak device memory, docs/training.md "Device and precision"), allocations served, and how
 * many of them made the pool ask the driver for more memory (`grows`: a steady state of equal
 * calls adds none), failed allocations, and the limit in force (0: none; below). */
typedef struct ttt_device_pool_stats {
    size_t reserved, reserved_high, used, used_high;
    long allocs, grows, failures;
    size_t limit;
} ttt_device_pool_stats;
ttt_status ttt_device_pool_stats_get(ttt_device d, ttt_device_pool_stats *out, ttt_error *err);
/* Starts a new high-water mark on d's pool: the pool's unused memory goes back to the driver
 * (cudaMemPoolTrimTo), then reserved_high and used_high become what is held and handed out now.
 * A training run calls it at its start, so that the peak it reports is its own. No-op on the
 * host, or before d's pool is made. */
void ttt_device_pool_peak_reset(ttt_device d);

/* A cap on the bytes every device pool hands out at once (docs/hardening.md "Faults on the
 * GPU"): an allocation that would take a pool's handed-out bytes past `bytes` fails exactly
 * as a cudaMallocFromPoolAsync that runs out of memory does (TTT_ERR_DEVICE, "... out of
 * memory (cudaErrorMemoryAllocation)", with the limit named), so that a test can make a run
 * run out of device memory at a chosen size, deterministically. 0 removes the cap. The
 * environment variable TTT_CUDA_POOL_LIMIT (bytes) sets it for a process before its first device
 * allocation; this call overrides it. Returns the cap in force before. */
size_t ttt_device_pool_set_limit(size_t bytes);
/* The device's free and total memory as the driver reports them (cudaMemGetInfo), for messages
 * about running out of it; TTT_ERR_DEVICE / TTT_ERR_UNSUPPORTED as the other calls. */
ttt_status ttt_device_mem_info(ttt_device d, size_t *free_bytes, size_t *total_bytes,
                               ttt_error *err);
/* Hands every pool's unused memory back to the driver and destroys the pools, the last made
 * first. Also run at process exit (registered when the first pool is made). Later allocations
 * make fresh pools. */
void ttt_device_pools_release(void);

/* CUDA's error `code` (a cudaError_t) as a ttt status: TTT_OK for 0, else TTT_ERR_DEVICE with
 * "<call> on <device>: <CUDA's words>" (call formatted from fmt), clearing the runtime's last
 * error. For the forms' host code, which does not include the runtime's headers. */
ttt_status ttt_device_cuda_error(int code, ttt_device d, ttt_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* "1.50 GiB", "256 B": a size for error messages. */
const char *ttt_device_bytes_text(size_t bytes, char *buf, size_t len);

/* Elementwise helpers on device memory (src/core/cuda/elementwise.cu), ordered on `stream` of
 * the current device: dst[i] = value; dst[i] = a·src[i] (dst may be src). n == 0 does nothing.
 * TTT_ERR_DEVICE naming the launch when it fails; without CUDA TTT_ERR_UNSUPPORTED. */
ttt_status ttt_cuda_fill_f32(float *dst, float value, size_t n, void *stream, ttt_error *err);
ttt_status ttt_cuda_scale_f32(float *dst, const float *src, float a, size_t n, void *stream,
                              ttt_error *err);

#ifdef __cplusplus
}
#endif

#endif
