/* The device seam (device.h, docs/design.md "Devices"): device names, the per-device memory
 * pools, pointer checks and the CUDA errors as statuses. The CUDA runtime is called from here
 * only when the build has it (TTT_HAVE_CUDA); otherwise every cuda:N request is refused with one
 * sentence and the device count is 0. */
#define _GNU_SOURCE /* RTLD_NOLOAD (cuda_in_use), next to the build's _POSIX_C_SOURCE */
#include "device.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TTT_HAVE_CUDA
#include <dlfcn.h>
#include <pthread.h>

#include <cuda_runtime_api.h>
#endif

#define NO_CUDA_BUILD "this build has no CUDA (configure with -DTTT_CUDA=ON)"

int ttt_device_equal(ttt_device a, ttt_device b) {
    return a.kind == b.kind && (a.kind == TTT_DEVICE_HOST || a.index == b.index);
}

const char *ttt_device_name(ttt_device d, char *buf, size_t len) {
    if (d.kind == TTT_DEVICE_HOST)
        snprintf(buf, len, "host");
    else if (d.kind == TTT_DEVICE_CUDA)
        snprintf(buf, len, "cuda:%d", d.index);
    else
        snprintf(buf, len, "device kind %d", (int)d.kind);
    return buf;
}

size_t ttt_dtype_size(ttt_dtype t) {
    switch (t) {
    case TTT_DTYPE_F32: return 4;
    case TTT_DTYPE_BF16: return 2;
    default: return 0;
    }
}

const char *ttt_dtype_name(ttt_dtype t) {
    switch (t) {
    case TTT_DTYPE_F32: return "float32";
    case TTT_DTYPE_BF16: return "bfloat16";
    default: return "?";
    }
}

const char *ttt_device_bytes_text(size_t bytes, char *buf, size_t len) {
    const double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, len, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, len, "%.2f MiB", b / (1024.0 * 1024));
    else if (b >= 1024.0)
        snprintf(buf, len, "%.2f KiB", b / 1024.0);
    else
        snprintf(buf, len, "%zu B", bytes);
    return buf;
}

int ttt_device_cuda_built(void) {
#ifdef TTT_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

/* ---- host memory (the same interface, so that callers need not branch) ---- */

static ttt_status host_alloc(ttt_device_buffer *b, size_t bytes, const char *what,
                             ttt_error *err) {
    b->ptr = malloc(bytes);
    if (!b->ptr) {
        char sz[32];
        return ttt_error_set(err, TTT_ERR_NOMEM, "%s: out of host memory for %s",
                             what ? what : "device buffer",
                             ttt_device_bytes_text(bytes, sz, sizeof sz));
    }
    b->bytes = bytes;
    return TTT_OK;
}

#ifdef TTT_HAVE_CUDA

/* ---- CUDA ---- */

static ttt_status vcuda_error(cudaError_t code, ttt_device d, ttt_error *err, const char *fmt,
                              va_list ap) {
    if (code == cudaSuccess) return TTT_OK;
    /* the runtime keeps the last error until it is read: read it here, so that a kernel
     * launch checked with cudaGetLastError later is not blamed for this call */
    (void)cudaGetLastError();
    if (!err) return TTT_ERR_DEVICE;
    char call[512], dev[32];
    vsnprintf(call, sizeof call, fmt, ap);
    return ttt_error_set(err, TTT_ERR_DEVICE, "%s on %s: %s (%s)", call,
                         ttt_device_name(d, dev, sizeof dev), cudaGetErrorString(code),
                         cudaGetErrorName(code));
}

static ttt_status cuda_error(cudaError_t code, ttt_device d, ttt_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ttt_status cuda_error(cudaError_t code, ttt_device d, ttt_error *err, const char *fmt,
                             ...) {
    va_list ap;
    va_start(ap, fmt);
    ttt_status s = vcuda_error(code, d, err, fmt, ap);
    va_end(ap);
    return s;
}

ttt_status ttt_device_cuda_error(int code, ttt_device d, ttt_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ttt_status s = vcuda_error((cudaError_t)code, d, err, fmt, ap);
    va_end(ap);
    return s;
}

/* The device count, asked once: cudaGetDeviceCount fails on a machine without a driver or GPU
 * (CI, build machines), and that answer does not change during a process. */
static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int count_value;
static cudaError_t count_error;
static void count_init(void) {
    int n = 0;
    count_error = cudaGetDeviceCount(&n);
    if (count_error != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    count_value = n;
}

int ttt_cuda_device_count(ttt_error *err) {
    pthread_once(&count_once, count_init);
    if (count_error != cudaSuccess) {
        ttt_error_set(err, TTT_ERR_UNSUPPORTED, "no CUDA device: cudaGetDeviceCount: %s (%s)",
                      cudaGetErrorString(count_error), cudaGetErrorName(count_error));
        return 0;
    }
    if (count_value == 0)
        ttt_error_set(err, TTT_ERR_UNSUPPORTED, "no CUDA device: cudaGetDeviceCount found 0");
    else if (err)
        ttt_error_clear(err);
    return count_value;
}

/* The line of ttt_cuda_describe, made once: the versions and devices do not change while the
 * process runs. */
static char describe_line[1024];
static void describe_init(void) {
    char *line = describe_line;
    const size_t len = sizeof describe_line;
    int rt = 0, drv = 0;
    (void)cudaRuntimeGetVersion(&rt);
    (void)cudaDriverGetVersion(&drv);
    size_t w = (size_t)snprintf(line, len, "CUDA runtime %d.%d", rt / 1000, (rt % 1000) / 10);
    if (drv > 0)
        w += (size_t)snprintf(line + w, len - w, ", driver %d.%d", drv / 1000, (drv % 1000) / 10);
    else
        w += (size_t)snprintf(line + w, len - w, ", no driver");
    ttt_error e = {0};
    const int n = ttt_cuda_device_count(&e);
    if (n == 0) {
        snprintf(line + w, len - w, "; %.900s", e.msg);
        return;
    }
    for (int i = 0; i < n && w < len; i++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
            (void)cudaGetLastError();
            w += (size_t)snprintf(line + w, len - w, ", cuda:%d (properties unavailable)", i);
            continue;
        }
        w += (size_t)snprintf(line + w, len - w, ", cuda:%d %s (sm_%d%d, %d SMs, %.0f GiB)", i,
                              p.name, p.major, p.minor, p.multiProcessorCount,
                              (double)p.totalGlobalMem / (1024.0 * 1024 * 1024));
    }
}

const char *ttt_cuda_describe(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, describe_init);
    return describe_line;
}

ttt_status ttt_device_usable(ttt_device d, ttt_error *err) {
    char dev[32];
    if (d.kind == TTT_DEVICE_HOST) return TTT_OK;
    if (d.kind != TTT_DEVICE_CUDA)
        return ttt_error_set(err, TTT_ERR_ARG, "device kind %d: expected host (0) or cuda (1)",
                             (int)d.kind);
    ttt_error e = {0};
    const int n = ttt_cuda_device_count(&e);
    if (n == 0)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED, "%s requested, but %s",
                             ttt_device_name(d, dev, sizeof dev), e.msg);
    if (d.index < 0 || d.index >= n)
        return ttt_error_set(err, TTT_ERR_ARG, "%s requested; this machine has cuda:0 to "
                             "cuda:%d", ttt_device_name(d, dev, sizeof dev), n - 1);
    return TTT_OK;
}

ttt_status ttt_device_enter(ttt_device d, ttt_device_scope *scope, ttt_error *err) {
    scope->prev = -1;
    scope->changed = 0;
    if (d.kind == TTT_DEVICE_HOST) return TTT_OK;
    TTT_TRY(ttt_device_usable(d, err));
    TTT_TRY(cuda_error(cudaGetDevice(&scope->prev), d, err, "cudaGetDevice"));
    if (scope->prev != d.index) {
        TTT_TRY(cuda_error(cudaSetDevice(d.index), d, err, "cudaSetDevice(%d)", d.index));
        scope->changed = 1;
    }
    return TTT_OK;
}

void ttt_device_leave(ttt_device_scope *scope) {
    if (scope->changed && scope->prev >= 0 && cudaSetDevice(scope->prev) != cudaSuccess)
        (void)cudaGetLastError();
    scope->changed = 0;
}

ttt_status ttt_device_stream_check(ttt_device d, void *stream, ttt_error *err) {
    if (d.kind == TTT_DEVICE_HOST || !stream) return TTT_OK;
    int sd = -1;
    TTT_TRY(cuda_error(cudaStreamGetDevice((cudaStream_t)stream, &sd), d, err,
                       "cudaStreamGetDevice(stream %p)", stream));
    if (sd != d.index) {
        char dev[32];
        return ttt_error_set(err, TTT_ERR_ARG, "the stream %p belongs to cuda:%d, the call's "
                             "buffers to %s: pass a stream of the buffers' device", stream, sd,
                             ttt_device_name(d, dev, sizeof dev));
    }
    return TTT_OK;
}

/* ---- the pools ----
 *
 * One cudaMemPool per device, made on first use with a release threshold of "never": memory
 * freed (stream-ordered) stays in the pool for the next allocation on any stream, so a steady
 * sequence of equal calls asks the driver for memory once (docs/design.md "Devices").
 * Allocations are stream-ordered (cudaMallocFromPoolAsync / cudaFreeAsync on the caller's
 * stream), so workspace freed after a call's launches is reused only by work ordered after
 * them. */
typedef struct pool {
    cudaMemPool_t pool;
    int made;
    long allocs, grows, failures;
    size_t used, used_high;
} pool;

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static pool pools[TTT_MAX_CUDA_DEVICES];
static int made_order[TTT_MAX_CUDA_DEVICES], n_made;
static int exit_registered;

/* The cap on the bytes a pool hands out at once (device.h ttt_device_pool_set_limit): read from
 * TTT_CUDA_POOL_LIMIT at the first allocation unless set before; guarded by pools_lock. */
static size_t pool_limit;
static int pool_limit_known;

static void pool_limit_read(void) { /* the caller holds pools_lock */
    if (pool_limit_known) return;
    pool_limit_known = 1;
    const char *s = getenv("TTT_CUDA_POOL_LIMIT");
    char *end = NULL;
    const unsigned long long v = s ? strtoull(s, &end, 10) : 0;
    /* a test hook, like TTT_FAIL_ALLOC (fault.h): anything but a decimal count of bytes is no
     * limit */
    pool_limit = s && end != s && *end == '\0' ? (size_t)v : 0;
}

size_t ttt_device_pool_set_limit(size_t bytes) {
    pthread_mutex_lock(&pools_lock);
    pool_limit_read();
    const size_t before = pool_limit;
    pool_limit = bytes;
    pthread_mutex_unlock(&pools_lock);
    return before;
}

static void pools_at_exit(void) { ttt_device_pools_release(); }

/* The pool of d (made if needed); the caller holds pools_lock. */
static ttt_status pool_of(ttt_device d, pool **out, ttt_error *err) {
    *out = NULL;
    if (d.index >= TTT_MAX_CUDA_DEVICES)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED, "cuda:%d: the device seam keeps pools "
                             "for cuda:0 to cuda:%d", d.index, TTT_MAX_CUDA_DEVICES - 1);
    pool *p = &pools[d.index];
    if (!p->made) {
        int supported = 0;
        TTT_TRY(cuda_error(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported,
                                                  d.index),
                           d, err, "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported)"));
        if (!supported) {
            char dev[32];
            return ttt_error_set(err, TTT_ERR_UNSUPPORTED, "%s: its driver has no stream-ordered "
                                 "memory pools (CUDA 11.2 or newer is needed)",
                                 ttt_device_name(d, dev, sizeof dev));
        }
        struct cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = d.index;
        TTT_TRY(cuda_error(cudaMemPoolCreate(&p->pool, &props), d, err, "cudaMemPoolCreate"));
        uint64_t never = UINT64_MAX;
        ttt_status s = cuda_error(cudaMemPoolSetAttribute(p->pool, cudaMemPoolAttrReleaseThreshold,
                                                          &never),
                                  d, err, "cudaMemPoolSetAttribute(release threshold)");
        if (s != TTT_OK) {
            (void)cudaMemPoolDestroy(p->pool);
            (void)cudaGetLastError();
            return s;
        }
        p->made = 1;
        p->allocs = p->grows = p->failures = 0;
        p->used = p->used_high = 0;
        made_order[n_made++] = d.index;
        if (!exit_registered) {
            /* registered after the runtime initialized (it registers its own teardown
             * first), so this runs before the runtime's teardown */
            exit_registered = atexit(pools_at_exit) == 0;
        }
    }
    *out = p;
    return TTT_OK;
}

static size_t pool_reserved(cudaMemPool_t mp, enum cudaMemPoolAttr attr) {
    uint64_t v = 0;
    if (cudaMemPoolGetAttribute(mp, attr, &v) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return (size_t)v;
}

static ttt_status cuda_alloc(ttt_device_buffer *b, ttt_device d, size_t bytes, void *stream,
                             const char *what, ttt_error *err) {
    ttt_device_scope scope;
    TTT_TRY(ttt_device_enter(d, &scope, err));
    pthread_mutex_lock(&pools_lock);
    pool *p = NULL;
    ttt_status s = pool_of(d, &p, err);
    if (s == TTT_OK) {
        const size_t before = pool_reserved(p->pool, cudaMemPoolAttrReservedMemCurrent);
        void *ptr = NULL;
        pool_limit_read();
        /* past the cap the pool answers as the driver does when the device is full */
        const int capped = pool_limit && (bytes > pool_limit || p->used > pool_limit - bytes);
        const cudaError_t e =
            capped ? cudaErrorMemoryAllocation
                   : cudaMallocFromPoolAsync(&ptr, bytes, p->pool, (cudaStream_t)stream);
        if (e != cudaSuccess) {
            char sz[32], held[32], cap[32];
            p->failures++;
            s = cuda_error(e, d, err, "cudaMallocFromPoolAsync(%s%s%s)",
                           ttt_device_bytes_text(bytes, sz, sizeof sz), what ? ", " : "",
                           what ? what : "");
            if (capped && err) {
                const size_t n = strlen(err->msg);
                snprintf(err->msg + n, sizeof err->msg - n,
                         " [the pool had handed out %s; TTT_CUDA_POOL_LIMIT caps it at %s]",
                         ttt_device_bytes_text(p->used, held, sizeof held),
                         ttt_device_bytes_text(pool_limit, cap, sizeof cap));
            }
        } else {
            p->allocs++;
            p->used += bytes;
            if (p->used > p->used_high) p->used_high = p->used;
            if (pool_reserved(p->pool, cudaMemPoolAttrReservedMemCurrent) > before) p->grows++;
            b->ptr = ptr;
            b->bytes = bytes;
        }
    }
    pthread_mutex_unlock(&pools_lock);
    ttt_device_leave(&scope);
    return s;
}

static void cuda_free(ttt_device_buffer *b) {
    ttt_device_scope scope;
    if (ttt_device_enter(b->device, &scope, NULL) != TTT_OK) return;
    if (cudaFreeAsync(b->ptr, (cudaStream_t)b->stream) != cudaSuccess) (void)cudaGetLastError();
    pthread_mutex_lock(&pools_lock);
    if (b->device.index < TTT_MAX_CUDA_DEVICES && pools[b->device.index].made)
        pools[b->device.index].used -= b->bytes;
    pthread_mutex_unlock(&pools_lock);
    ttt_device_leave(&scope);
}

ttt_status ttt_device_pool_stats_get(ttt_device d, ttt_device_pool_stats *out, ttt_error *err) {
    memset(out, 0, sizeof *out);
    TTT_TRY(ttt_device_usable(d, err));
    if (d.kind == TTT_DEVICE_HOST) return TTT_OK;
    pthread_mutex_lock(&pools_lock);
    const pool *p = d.index < TTT_MAX_CUDA_DEVICES ? &pools[d.index] : NULL;
    if (p && p->made) {
        out->reserved = pool_reserved(p->pool, cudaMemPoolAttrReservedMemCurrent);
        out->reserved_high = pool_reserved(p->pool, cudaMemPoolAttrReservedMemHigh);
        out->used = p->used;
        out->used_high = p->used_high;
        out->allocs = p->allocs;
        out->grows = p->grows;
        out->failures = p->failures;
    }
    pool_limit_read();
    out->limit = pool_limit;
    pthread_mutex_unlock(&pools_lock);
    return TTT_OK;
}

void ttt_device_pool_peak_reset(ttt_device d) {
    if (d.kind != TTT_DEVICE_CUDA || d.index < 0 || d.index >= TTT_MAX_CUDA_DEVICES) return;
    ttt_device_scope scope;
    if (ttt_device_enter(d, &scope, NULL) != TTT_OK) return;
    pthread_mutex_lock(&pools_lock);
    pool *p = &pools[d.index];
    if (p->made) {
        /* memory freed by work still queued stays: the trim keeps what is not yet free */
        if (cudaMemPoolTrimTo(p->pool, 0) != cudaSuccess) (void)cudaGetLastError();
        uint64_t zero = 0; /* the runtime takes only 0: "the current value" */
        if (cudaMemPoolSetAttribute(p->pool, cudaMemPoolAttrReservedMemHigh, &zero) !=
            cudaSuccess)
            (void)cudaGetLastError();
        p->used_high = p->used;
    }
    pthread_mutex_unlock(&pools_lock);
    ttt_device_leave(&scope);
}

ttt_status ttt_device_mem_info(ttt_device d, size_t *free_bytes, size_t *total_bytes,
                               ttt_error *err) {
    *free_bytes = *total_bytes = 0;
    if (d.kind == TTT_DEVICE_HOST)
        return ttt_error_set(err, TTT_ERR_ARG, "ttt_device_mem_info: the host has no device "
                             "memory to report");
    ttt_device_scope scope;
    TTT_TRY(ttt_device_enter(d, &scope, err));
    const ttt_status s = cuda_error(cudaMemGetInfo(free_bytes, total_bytes), d, err,
                                    "cudaMemGetInfo");
    ttt_device_leave(&scope);
    return s;
}

void ttt_device_pools_release(void) {
    pthread_mutex_lock(&pools_lock);
    /* the last made first: nothing made later can depend on an earlier pool, and the teardown
     * mirrors the setup */
    for (int i = n_made - 1; i >= 0; i--) {
        pool *p = &pools[made_order[i]];
        if (!p->made) continue;
        /* memory still handed out is released by the driver once it is freed */
        if (cudaMemPoolTrimTo(p->pool, 0) != cudaSuccess) (void)cudaGetLastError();
        if (cudaMemPoolDestroy(p->pool) != cudaSuccess) (void)cudaGetLastError();
        memset(p, 0, sizeof *p);
    }
    n_made = 0;
    pthread_mutex_unlock(&pools_lock);
}

static enum cudaMemcpyKind copy_kind(ttt_device dd, ttt_device sd) {
    if (dd.kind == TTT_DEVICE_HOST)
        return sd.kind == TTT_DEVICE_HOST ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost;
    return sd.kind == TTT_DEVICE_HOST ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice;
}

static const char *copy_name(enum cudaMemcpyKind k) {
    switch (k) {
    case cudaMemcpyHostToDevice: return "host to device";
    case cudaMemcpyDeviceToHost: return "device to host";
    case cudaMemcpyDeviceToDevice: return "device to device";
    default: return "host to host";
    }
}

ttt_status ttt_device_copy(void *dst, ttt_device dd, const void *src, ttt_device sd,
                           size_t bytes, void *stream, ttt_error *err) {
    if (bytes == 0) return TTT_OK;
    if (dd.kind == TTT_DEVICE_HOST && sd.kind == TTT_DEVICE_HOST) {
        memmove(dst, src, bytes);
        return TTT_OK;
    }
    const ttt_device d = dd.kind == TTT_DEVICE_CUDA ? dd : sd;
    if (dd.kind == TTT_DEVICE_CUDA && sd.kind == TTT_DEVICE_CUDA && dd.index != sd.index) {
        char a[32], b2[32];
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED, "copy from %s to %s: copies between "
                             "devices are not supported", ttt_device_name(sd, a, sizeof a),
                             ttt_device_name(dd, b2, sizeof b2));
    }
    ttt_device_scope scope;
    TTT_TRY(ttt_device_enter(d, &scope, err));
    const enum cudaMemcpyKind k = copy_kind(dd, sd);
    char sz[32];
    ttt_status s = cuda_error(cudaMemcpyAsync(dst, src, bytes, k, (cudaStream_t)stream), d, err,
                              "cudaMemcpyAsync(%s, %s)",
                              ttt_device_bytes_text(bytes, sz, sizeof sz), copy_name(k));
    ttt_device_leave(&scope);
    return s;
}

ttt_status ttt_device_zero(void *p, ttt_device d, size_t bytes, void *stream, ttt_error *err) {
    if (bytes == 0) return TTT_OK;
    if (d.kind == TTT_DEVICE_HOST) {
        memset(p, 0, bytes);
        return TTT_OK;
    }
    ttt_device_scope scope;
    TTT_TRY(ttt_device_enter(d, &scope, err));
    char sz[32];
    ttt_status s = cuda_error(cudaMemsetAsync(p, 0, bytes, (cudaStream_t)stream), d, err,
                              "cudaMemsetAsync(%s)", ttt_device_bytes_text(bytes, sz, sizeof sz));
    ttt_device_leave(&scope);
    return s;
}

ttt_status ttt_device_sync(ttt_device d, void *stream, ttt_error *err) {
    if (d.kind == TTT_DEVICE_HOST) return TTT_OK;
    ttt_device_scope scope;
    TTT_TRY(ttt_device_enter(d, &scope, err));
    ttt_status s = cuda_error(cudaStreamSynchronize((cudaStream_t)stream), d, err,
                              "cudaStreamSynchronize(stream %p)", stream);
    ttt_device_leave(&scope);
    return s;
}

/* Whether CUDA is in use in this process: the driver library is loaded and some device's
 * primary context is active. Asked through the driver's entry point, which makes no context: a host-only call on a machine with
 * a GPU must not create one (hundreds of MiB of GPU memory) just to check its pointers. When
 * the driver cannot be asked, 0 (the check is skipped). */
typedef int (*primary_state_fn)(int dev, unsigned int *flags, int *active);
static primary_state_fn primary_state;
static void primary_state_lookup(void) {
    void *f = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &f, 12000,
                                         cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !f) {
        (void)cudaGetLastError();
        return;
    }
    primary_state = (primary_state_fn)f;
}

static int cuda_in_use(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    /* no driver library loaded yet: nothing in this process has touched CUDA, so no buffer can
     * be device memory, and asking the driver (cuInit, ~0.1 s) is not needed */
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!driver) return 0;
    dlclose(driver);
    ttt_error e = {0};
    const int n = ttt_cuda_device_count(&e);
    if (n == 0) return 0;
    pthread_once(&once, primary_state_lookup);
    for (int i = 0; i < n && primary_state; i++) {
        unsigned int flags = 0;
        int active = 0;
        if (primary_state(i, &flags, &active) == 0 && active) return 1;
    }
    return 0;
}

ttt_status ttt_device_check_pointer(const void *p, ttt_device d, size_t align, const char *what,
                                    ttt_error *err) {
    if (!p) return TTT_OK;
    char dev[32];
    if (align > 1 && (uintptr_t)p % align != 0)
        return ttt_error_set(err, TTT_ERR_ARG, "%s = %p is not aligned to %zu bytes (the %s "
                             "kernels read it with %zu-byte vector loads); allocate it with "
                             "cudaMalloc or torch, or copy it to an aligned buffer", what, p,
                             align, ttt_device_name(d, dev, sizeof dev), align);
    if (d.kind == TTT_DEVICE_HOST && !cuda_in_use()) return TTT_OK;
    struct cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    const cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        /* an unknown pointer: host memory never registered with CUDA */
        a.type = cudaMemoryTypeUnregistered;
    }
    const int on_device = a.type == cudaMemoryTypeDevice;
    if (d.kind == TTT_DEVICE_HOST) {
        if (on_device)
            return ttt_error_set(err, TTT_ERR_ARG, "%s = %p is memory of cuda:%d, but the call "
                                 "says its buffers are on the host (io->device = "
                                 "TTT_DEVICE_HOST): set io->device = TTT_DEVICE_CUDA and "
                                 "io->device_index = %d, or pass host memory", what, p,
                                 a.device, a.device);
        return TTT_OK;
    }
    if (a.type == cudaMemoryTypeManaged) return TTT_OK; /* reachable from every device */
    if (!on_device)
        return ttt_error_set(err, TTT_ERR_ARG, "%s = %p is host memory, but the call says its "
                             "buffers are on %s (io->device = TTT_DEVICE_CUDA): pass device "
                             "memory (cudaMalloc) or set io->device = TTT_DEVICE_HOST", what, p,
                             ttt_device_name(d, dev, sizeof dev));
    if (a.device != d.index)
        return ttt_error_set(err, TTT_ERR_ARG, "%s = %p is memory of cuda:%d, but the call is on "
                             "%s (io->device_index = %d): every buffer of a call must be on its "
                             "device", what, p, a.device, ttt_device_name(d, dev, sizeof dev),
                             d.index);
    return TTT_OK;
}

#else /* no CUDA in this build */

ttt_status ttt_device_cuda_error(int code, ttt_device d, ttt_error *err, const char *fmt, ...) {
    (void)d, (void)fmt;
    if (code == 0) return TTT_OK;
    return ttt_error_set(err, TTT_ERR_DEVICE, "CUDA error %d in a build without CUDA", code);
}

int ttt_cuda_device_count(ttt_error *err) {
    ttt_error_set(err, TTT_ERR_UNSUPPORTED, NO_CUDA_BUILD);
    return 0;
}

const char *ttt_cuda_describe(void) { return NO_CUDA_BUILD; }

ttt_status ttt_device_usable(ttt_device d, ttt_error *err) {
    char dev[32];
    if (d.kind == TTT_DEVICE_HOST) return TTT_OK;
    if (d.kind != TTT_DEVICE_CUDA)
        return ttt_error_set(err, TTT_ERR_ARG, "device kind %d: expected host (0) or cuda (1)",
                             (int)d.kind);
    return ttt_error_set(err, TTT_ERR_UNSUPPORTED, "%s requested, but " NO_CUDA_BUILD,
                         ttt_device_name(d, dev, sizeof dev));
}

ttt_status ttt_device_enter(ttt_device d, ttt_device_scope *scope, ttt_error *err) {
    scope->prev = -1;
    scope->changed = 0;
    return ttt_device_usable(d, err);
}

void ttt_device_leave(ttt_device_scope *scope) { scope->changed = 0; }

ttt_status ttt_device_stream_check(ttt_device d, void *stream, ttt_error *err) {
    (void)stream;
    return ttt_device_usable(d, err);
}

ttt_status ttt_device_pool_stats_get(ttt_device d, ttt_device_pool_stats *out, ttt_error *err) {
    memset(out, 0, sizeof *out);
    return ttt_device_usable(d, err);
}

void ttt_device_pools_release(void) {}

void ttt_device_pool_peak_reset(ttt_device d) { (void)d; }

size_t ttt_device_pool_set_limit(size_t bytes) {
    (void)bytes;
    return 0;
}

ttt_status ttt_device_mem_info(ttt_device d, size_t *free_bytes, size_t *total_bytes,
                               ttt_error *err) {
    *free_bytes = *total_bytes = 0;
    if (d.kind == TTT_DEVICE_HOST)
        return ttt_error_set(err, TTT_ERR_ARG, "ttt_device_mem_info: the host has no device "
                             "memory to report");
    return ttt_device_usable(d, err);
}

ttt_status ttt_device_copy(void *dst, ttt_device dd, const void *src, ttt_device sd,
                           size_t bytes, void *stream, ttt_error *err) {
    (void)stream;
    TTT_TRY(ttt_device_usable(dd, err));
    TTT_TRY(ttt_device_usable(sd, err));
    if (bytes) memmove(dst, src, bytes);
    return TTT_OK;
}

ttt_status ttt_device_zero(void *p, ttt_device d, size_t bytes, void *stream, ttt_error *err) {
    (void)stream;
    TTT_TRY(ttt_device_usable(d, err));
    if (bytes) memset(p, 0, bytes);
    return TTT_OK;
}

ttt_status ttt_device_sync(ttt_device d, void *stream, ttt_error *err) {
    (void)stream;
    return ttt_device_usable(d, err);
}

ttt_status ttt_device_check_pointer(const void *p, ttt_device d, size_t align, const char *what,
                                    ttt_error *err) {
    if (!p) return TTT_OK;
    TTT_TRY(ttt_device_usable(d, err));
    if (align > 1 && (uintptr_t)p % align != 0)
        return ttt_error_set(err, TTT_ERR_ARG, "%s = %p is not aligned to %zu bytes", what, p,
                             align);
    return TTT_OK;
}

ttt_status ttt_cuda_fill_f32(float *dst, float value, size_t n, void *stream, ttt_error *err) {
    (void)dst, (void)value, (void)n, (void)stream;
    return ttt_error_set(err, TTT_ERR_UNSUPPORTED, NO_CUDA_BUILD);
}

ttt_status ttt_cuda_scale_f32(float *dst, const float *src, float a, size_t n, void *stream,
                              ttt_error *err) {
    (void)dst, (void)src, (void)a, (void)n, (void)stream;
    return ttt_error_set(err, TTT_ERR_UNSUPPORTED, NO_CUDA_BUILD);
}

#endif

ttt_status ttt_device_alloc(ttt_device_buffer *b, ttt_device d, size_t bytes, void *stream,
                            const char *what, ttt_error *err) {
    *b = (ttt_device_buffer){.device = d, .ptr = NULL, .bytes = 0, .stream = stream};
    if (bytes == 0) return TTT_OK;
    if (d.kind == TTT_DEVICE_HOST) return host_alloc(b, bytes, what, err);
#ifdef TTT_HAVE_CUDA
    return cuda_alloc(b, d, bytes, stream, what, err);
#else
    return ttt_device_usable(d, err);
#endif
}

void ttt_device_free(ttt_device_buffer *b) {
    if (!b || !b->ptr) return;
    if (b->device.kind == TTT_DEVICE_HOST) free(b->ptr);
#ifdef TTT_HAVE_CUDA
    else
        cuda_free(b);
#endif
    b->ptr = NULL;
    b->bytes = 0;
}
