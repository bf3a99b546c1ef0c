/* NCCL for the gradient reduction of data-parallel training on several GPUs (nccl_group.h,
 * docs/scaling.md "Several GPUs"). */
#define _GNU_SOURCE
#include "nccl_group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(TTT_HAVE_CUDA) && defined(TTT_HAVE_NCCL_H)
#include <dlfcn.h>
#include <pthread.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "fault.h"

/* The entry points used, from the library opened at first use. */
typedef struct nccl_api {
    void *lib;
    char why[512]; /* what failed to open, or the symbol that is missing */
    ncclResult_t (*get_version)(int *);
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    const char *(*error_string)(ncclResult_t);
    const char *(*last_error)(ncclComm_t);
} nccl_api;

static nccl_api api_v;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static int sym(void **f, const char *name) {
    *f = dlsym(api_v.lib, name);
    if (!*f) snprintf(api_v.why, sizeof api_v.why, "%s: %s", name, dlerror());
    return *f != NULL;
}

/* TTT_NCCL_LIBRARY, else by soname (the loader's path), else the toolkit's copy. */
static void api_open(void) {
    const char *named = getenv("TTT_NCCL_LIBRARY");
    if (named && named[0]) {
        api_v.lib = dlopen(named, RTLD_NOW | RTLD_LOCAL);
    } else {
        api_v.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#ifdef TTT_CUDA_LIBDIR
        if (!api_v.lib) api_v.lib = dlopen(TTT_CUDA_LIBDIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#endif
    }
    if (!api_v.lib) {
        const char *e = dlerror();
        snprintf(api_v.why, sizeof api_v.why,
                 "NCCL could not be opened (%s); install it (libnccl2) or name its file in "
                 "TTT_NCCL_LIBRARY",
                 e ? e : "libnccl.so.2 not found");
        return;
    }
    if (!(sym((void **)&api_v.get_version, "ncclGetVersion") &&
          sym((void **)&api_v.get_unique_id, "ncclGetUniqueId") &&
          sym((void **)&api_v.comm_init_rank, "ncclCommInitRank") &&
          sym((void **)&api_v.comm_destroy, "ncclCommDestroy") &&
          sym((void **)&api_v.all_reduce, "ncclAllReduce") &&
          sym((void **)&api_v.group_start, "ncclGroupStart") &&
          sym((void **)&api_v.group_end, "ncclGroupEnd") &&
          sym((void **)&api_v.error_string, "ncclGetErrorString") &&
          sym((void **)&api_v.last_error, "ncclGetLastError")))
        api_v.get_version = NULL; /* unusable: why names the symbol */
}

static const nccl_api *api(ttt_error *err) {
    pthread_once(&api_once, api_open);
    if (!api_v.get_version) {
        ttt_error_set(err, TTT_ERR_UNSUPPORTED, "%s", api_v.why);
        return NULL;
    }
    return &api_v;
}

/* A failed NCCL call as a status naming the call, NCCL's words and its last message. */
static ttt_status nccl_error(const nccl_api *a, ncclResult_t r, ncclComm_t c, ttt_error *err,
                             const char *call) {
    const char *last = a->last_error(c);
    return ttt_error_set(err, r == ncclInvalidUsage ? TTT_ERR_UNSUPPORTED : TTT_ERR_DEVICE,
                         "%s: %s%s%s", call, a->error_string(r), last && last[0] ? ": " : "",
                         last ? last : "");
}

struct ttt_nccl {
    int n;
    ttt_device *dev;     /* (n) */
    ncclComm_t *comm;    /* (n) */
    cudaStream_t *stream; /* (n) blocking streams, one per device (nccl_group.h) */
};

ttt_status ttt_nccl_make_id(ttt_nccl_id *id, ttt_error *err) {
    _Static_assert(sizeof(ncclUniqueId) == sizeof id->bytes, "ncclUniqueId is 128 bytes");
    const nccl_api *a = api(err);
    if (!a) return TTT_ERR_UNSUPPORTED;
    ncclUniqueId u;
    const ncclResult_t r = a->get_unique_id(&u);
    if (r != ncclSuccess) return nccl_error(a, r, NULL, err, "ncclGetUniqueId");
    memcpy(id->bytes, &u, sizeof u);
    return TTT_OK;
}

void ttt_nccl_free(ttt_nccl *g) {
    if (!g) return;
    const nccl_api *a = api_v.get_version ? &api_v : NULL;
    for (int i = g->n - 1; i >= 0; i--) {
        ttt_device_scope sc;
        ttt_error ignore = {0};
        const int entered = ttt_device_enter(g->dev[i], &sc, &ignore) == TTT_OK;
        if (g->comm && g->comm[i] && a) a->comm_destroy(g->comm[i]);
        if (g->stream && g->stream[i]) cudaStreamDestroy(g->stream[i]);
        if (entered) ttt_device_leave(&sc);
    }
    free(g->stream);
    free(g->comm);
    free(g->dev);
    free(g);
}

ttt_status ttt_nccl_init(ttt_nccl **out, int world, int first, int n, const ttt_device *devs,
                         const ttt_nccl_id *id, ttt_error *err) {
    *out = NULL;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (ttt_device_equal(devs[i], devs[j])) {
                char dn[32];
                return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                                     "NCCL: ranks %d and %d are both on %s, and NCCL refuses two "
                                     "ranks of one group on one GPU",
                                     first + j, first + i,
                                     ttt_device_name(devs[i], dn, sizeof dn));
            }
    const nccl_api *a = api(err);
    if (!a) return TTT_ERR_UNSUPPORTED;
    ttt_nccl_id local;
    if (!id) {
        if (first != 0 || n != world)
            return ttt_error_set(err, TTT_ERR_ARG,
                                 "NCCL: a group of several processes needs their shared id");
        TTT_TRY(ttt_nccl_make_id(&local, err));
        id = &local;
    }
    ttt_nccl *g = ttt_fault_calloc(1, sizeof *g);
    if (g) {
        g->dev = ttt_fault_calloc((size_t)n, sizeof *g->dev);
        g->comm = ttt_fault_calloc((size_t)n, sizeof *g->comm);
        g->stream = ttt_fault_calloc((size_t)n, sizeof *g->stream);
    }
    if (!g || !g->dev || !g->comm || !g->stream) {
        ttt_nccl_free(g);
        return ttt_error_set(err, TTT_ERR_NOMEM, "NCCL: out of memory for a group of %d", n);
    }
    g->n = n;
    memcpy(g->dev, devs, (size_t)n * sizeof *devs);
    ttt_status s = TTT_OK;
    for (int i = 0; i < n && s == TTT_OK; i++) {
        ttt_device_scope sc;
        s = ttt_device_enter(devs[i], &sc, err);
        if (s != TTT_OK) break;
        s = ttt_device_cuda_error((int)cudaStreamCreate(&g->stream[i]), devs[i], err,
                                  "cudaStreamCreate");
        ttt_device_leave(&sc);
    }
    if (s != TTT_OK) {
        ttt_nccl_free(g);
        return s;
    }
    /* the ranks of this process join together: each ncclCommInitRank waits for the others */
    ncclUniqueId u;
    memcpy(&u, id->bytes, sizeof u);
    ncclResult_t r = a->group_start();
    for (int i = 0; i < n && r == ncclSuccess; i++) {
        ttt_device_scope sc;
        if (ttt_device_enter(devs[i], &sc, err) != TTT_OK) {
            a->group_end();
            ttt_nccl_free(g);
            return err ? err->status : TTT_ERR_DEVICE;
        }
        r = a->comm_init_rank(&g->comm[i], world, u, first + i);
        ttt_device_leave(&sc);
    }
    const ncclResult_t re = a->group_end();
    if (r == ncclSuccess) r = re;
    if (r != ncclSuccess) {
        nccl_error(a, r, NULL, err, "ncclCommInitRank");
        const ttt_status st = err ? err->status : TTT_ERR_DEVICE;
        ttt_nccl_free(g);
        return st;
    }
    *out = g;
    return TTT_OK;
}

ttt_status ttt_nccl_sum_f32(ttt_nccl *g, float *const *buf, size_t n, ttt_error *err) {
    const nccl_api *a = api(err);
    if (!a) return TTT_ERR_UNSUPPORTED;
    ncclResult_t r = a->group_start();
    int failed = -1;
    for (int i = 0; i < g->n && r == ncclSuccess; i++) {
        r = a->all_reduce(buf[i], buf[i], n, ncclFloat32, ncclSum, g->comm[i], g->stream[i]);
        if (r != ncclSuccess) failed = i;
    }
    const ncclResult_t re = a->group_end();
    if (r == ncclSuccess) r = re;
    if (r != ncclSuccess)
        return nccl_error(a, r, g->comm[failed < 0 ? 0 : failed], err, "ncclAllReduce");
    return TTT_OK;
}

#else /* no CUDA, or NCCL's header was not found when the build was configured */

static ttt_status not_built(ttt_error *err) {
#ifdef TTT_HAVE_CUDA
    return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                         "this build has no NCCL (its header nccl.h was not found beside CUDA's "
                         "when it was configured)");
#else
    return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                         "this build has no CUDA (configure with -DTTT_CUDA=ON)");
#endif
}

ttt_status ttt_nccl_make_id(ttt_nccl_id *id, ttt_error *err) {
    memset(id, 0, sizeof *id);
    return not_built(err);
}

ttt_status ttt_nccl_init(ttt_nccl **out, int world, int first, int n, const ttt_device *devs,
                         const ttt_nccl_id *id, ttt_error *err) {
    (void)world, (void)first, (void)n, (void)devs, (void)id;
    *out = NULL;
    return not_built(err);
}

void ttt_nccl_free(ttt_nccl *g) { (void)g; }

ttt_status ttt_nccl_sum_f32(ttt_nccl *g, float *const *buf, size_t n, ttt_error *err) {
    (void)g, (void)buf, (void)n;
    return not_built(err);
}

#endif
