/* The device seam (src/core/device.h, docs/design.md "Devices") and the C API on device buffers
 * (docs/api.md "Device buffers"): the answers every machine must give, and, where a GPU is
 * present, the pool, the errors and the refusals on the device.
 *
 * Everywhere: device names, dtypes, host buffers through the seam; a host call with bfloat16 or
 * an unknown device kind is refused by name; `ttt --version` prints the CUDA line; without a GPU (or without CUDA in the build) the
 * device count is 0 with the reason, and every cuda:N request — an allocation, a layer call, the
 * pool's counters — is refused with that reason instead of crashing.
 * With a GPU: the pool serves equal allocations without asking the driver again (no cudaMalloc
 * per call), an absurd allocation fails as TTT_ERR_DEVICE naming the call, the size and the
 * device and leaves the pool as it was, a device index past the last is refused, host memory
 * passed as device memory and the reverse are refused by argument name, a misaligned pointer is
 * refused saying the alignment, a layer no CUDA entry computes is refused naming its tuple, and
 * a forward on device buffers equals the host call on the same inputs.
 *
 * Exit status: 1 when a check fails; 77 (ctest: skipped) when everything that can run here
 * passed but the GPU part could not run, after one line saying why; 0 otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "testutil.h"

#include <ttt/ttt.h>

enum { B = 2, T = 37, H = 3, D = 16 };

static int gpu_count(void) {
    ttt_error e = {0};
    return ttt_cuda_device_count(&e);
}

static ttt_layer_handle *new_layer(const char *preset) {
    ttt_layer_descriptor desc;
    ttt_layer_descriptor_init(&desc, sizeof desc);
    desc.preset = preset;
    desc.scale = 0.25;
    ttt_layer_handle *h = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_layer_new(&h, &desc, D, D, &err) == TTT_OK, "%s: %s", preset, err.msg);
    return h;
}

/* ---- everywhere ---- */

START_TEST(names_and_dtypes) {
    char buf[32];
    ck_assert_str_eq(ttt_device_name(ttt_device_host(), buf, sizeof buf), "host");
    ck_assert_str_eq(ttt_device_name(ttt_device_cuda(3), buf, sizeof buf), "cuda:3");
    ck_assert(ttt_device_equal(ttt_device_cuda(1), ttt_device_cuda(1)));
    ck_assert(!ttt_device_equal(ttt_device_cuda(0), ttt_device_cuda(1)));
    ck_assert(!ttt_device_equal(ttt_device_cuda(0), ttt_device_host()));
    ck_assert_uint_eq(ttt_dtype_size(TTT_DTYPE_F32), 4);
    ck_assert_uint_eq(ttt_dtype_size(TTT_DTYPE_BF16), 2);
    ck_assert_str_eq(ttt_device_bytes_text((size_t)3 << 29, buf, sizeof buf), "1.50 GiB");
    ck_assert_str_eq(ttt_device_bytes_text(256, buf, sizeof buf), "256 B");
    /* the description is one line, never empty */
    const char *d = ttt_cuda_describe();
    ck_assert(d && d[0] && !strchr(d, '\n'));
}
END_TEST

START_TEST(host_buffers_through_the_seam) {
    ttt_device_buffer b;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_device_alloc(&b, ttt_device_host(), 1000, NULL, "test", &err), TTT_OK);
    ck_assert_ptr_nonnull(b.ptr);
    ck_assert_int_eq(ttt_device_zero(b.ptr, b.device, 1000, NULL, &err), TTT_OK);
    ck_assert_int_eq(((unsigned char *)b.ptr)[999], 0);
    ttt_device_free(&b);
    ck_assert_ptr_null(b.ptr);
    ttt_device_free(&b); /* twice: a no-op */
    ck_assert_int_eq(ttt_device_alloc(&b, ttt_device_host(), 0, NULL, "test", &err), TTT_OK);
    ck_assert_ptr_null(b.ptr);
}
END_TEST

/* Host calls refuse what only a device call takes, by name; the process carries on. */
START_TEST(host_call_refusals) {
    ttt_layer_handle *h = new_layer("gated_deltanet");
    const size_t n = (size_t)B * T * H * D;
    float *x = calloc(n, sizeof(float)), *o = calloc(n, sizeof(float));
    ttt_batch_io io = {.size = sizeof io, .B = B, .T = T, .H = H, .o = o, .q = x, .k = x, .v = x};
    ttt_error err = {0};
    io.dtype = TTT_DTYPE_BF16;
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 1, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "TTT_DTYPE_BF16 on host buffers"), "%s", err.msg);
    io.dtype = (ttt_dtype)7;
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 1, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "io->dtype = 7"), "%s", err.msg);
    io.dtype = TTT_DTYPE_F32;
    io.device = (ttt_device_kind)5;
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 1, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "io->device = 5"), "%s", err.msg);
    io.device = TTT_DEVICE_HOST;
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 1, &err), TTT_OK);
    free(x);
    free(o);
    ttt_layer_free(h);
}
END_TEST

/* ttt_layer_form_for on CUDA buffers names the device entry (no buffer is read and no device is
 * needed to ask): in a build without CUDA there is none. */
START_TEST(form_for_device_calls) {
    ttt_layer_handle *gd = new_layer("gated_deltanet"), *mlp = new_layer("ttt_mlp");
    ttt_batch_io io = {.size = sizeof io, .B = B, .T = T, .H = H, .device = TTT_DEVICE_CUDA};
    const char *want = ttt_device_cuda_built() ? "chunkwise (cuda)" : "none";
    ck_assert_str_eq(ttt_layer_form_for(gd, &io), want);
    const char *first = ttt_layer_form_for(gd, &io);
    ck_assert_ptr_eq(ttt_layer_form_for(gd, &io), first); /* a static string */
    ck_assert_str_eq(ttt_layer_form_for(mlp, &io), "none");
    io.device = TTT_DEVICE_HOST;
    ck_assert_str_ne(ttt_layer_form_for(gd, &io), "chunkwise (cuda)");
    ttt_layer_free(gd);
    ttt_layer_free(mlp);
}
END_TEST

/* `ttt --version` names the CUDA runtime, the driver and the GPUs, or why there are none: the
 * line of ttt_cuda_describe. */
START_TEST(version_names_cuda) {
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(tu_run_ttt("--version", &out, &err), 0);
    char want[1100];
    snprintf(want, sizeof want, "\nCUDA: %s\n", ttt_cuda_describe());
    ck_assert_msg(out && strstr(out, want), "%s", out ? out : "(no output)");
    free(out);
    free(err);
}
END_TEST

/* ---- without a GPU (or without CUDA in the build): clean refusals ---- */

START_TEST(no_gpu_refusals) {
    if (gpu_count() > 0) return; /* the GPU cases below cover this machine */
    ttt_error err = {0};
    ck_assert_int_eq(ttt_cuda_device_count(&err), 0);
    ck_assert_int_eq(err.status, TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "no CUDA device") || strstr(err.msg, "-DTTT_CUDA=ON"), "%s",
                  err.msg);
    ck_assert_int_eq(ttt_device_usable(ttt_device_cuda(0), &err), TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "cuda:0 requested"), "%s", err.msg);
    ttt_device_buffer b;
    ck_assert_int_eq(ttt_device_alloc(&b, ttt_device_cuda(0), 1 << 20, NULL, "test", &err),
                     TTT_ERR_UNSUPPORTED);
    ck_assert_ptr_null(b.ptr);
    ttt_device_free(&b);
    ttt_device_pool_stats ps;
    ck_assert_int_eq(ttt_device_pool_stats_get(ttt_device_cuda(0), &ps, &err),
                     TTT_ERR_UNSUPPORTED);
    /* a layer call on CUDA buffers: refused with the reason, nothing read */
    ttt_layer_handle *h = new_layer("gated_deltanet");
    float dummy[16] __attribute__((aligned(16))) = {0};
    ttt_batch_io io = {.size = sizeof io,
                       .B = B, .T = T, .H = H, .o = dummy, .q = dummy, .k = dummy, .v = dummy,
                       .device = TTT_DEVICE_CUDA, .device_index = 0};
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 0, &err), TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "io->device = TTT_DEVICE_CUDA") &&
                      (strstr(err.msg, "no CUDA device") || strstr(err.msg, "-DTTT_CUDA=ON")),
                  "%s", err.msg);
    const ttt_batch_grad g = {.size = sizeof g, .d_o = dummy};
    ck_assert_int_eq(ttt_layer_backward_run(h, &io, &g, &err), TTT_ERR_UNSUPPORTED);
    /* the host path still runs after the refusals */
    io.device = TTT_DEVICE_HOST;
    io.T = 1, io.B = 1, io.H = 1;
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 1, &err), TTT_OK);
    ttt_layer_free(h);
}
END_TEST

/* ---- with a GPU ---- */

#define NEED_GPU()                                                                           \
    do {                                                                                     \
        if (gpu_count() == 0) return;                                                        \
    } while (0)

START_TEST(pool_reuses_memory) {
    NEED_GPU();
    const ttt_device d = ttt_device_cuda(0);
    ttt_error err = {0};
    ttt_device_pool_stats s0, s1, s2;
    ttt_device_buffer b;
    ck_assert_int_eq(ttt_device_alloc(&b, d, 8 << 20, NULL, "warm-up", &err), TTT_OK);
    ttt_device_free(&b);
    ck_assert_int_eq(ttt_device_sync(d, NULL, &err), TTT_OK);
    ck_assert_int_eq(ttt_device_pool_stats_get(d, &s0, &err), TTT_OK);
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(ttt_device_alloc(&b, d, 8 << 20, NULL, "loop", &err), TTT_OK);
        ttt_device_free(&b);
    }
    ck_assert_int_eq(ttt_device_sync(d, NULL, &err), TTT_OK);
    ck_assert_int_eq(ttt_device_pool_stats_get(d, &s1, &err), TTT_OK);
    /* 100 allocations served, none of which asked the driver for memory */
    ck_assert_int_eq(s1.allocs - s0.allocs, 100);
    ck_assert_int_eq(s1.grows, s0.grows);
    ck_assert_uint_eq(s1.reserved, s0.reserved);
    ck_assert_uint_eq(s1.used, 0);
    /* the negative control: a much larger block does make the pool grow, so `grows` can move */
    ck_assert_int_eq(ttt_device_alloc(&b, d, (size_t)512 << 20, NULL, "larger", &err), TTT_OK);
    ck_assert_int_eq(ttt_device_pool_stats_get(d, &s2, &err), TTT_OK);
    ck_assert_int_gt(s2.grows, s1.grows);
    ttt_device_free(&b);
}
END_TEST

START_TEST(out_of_memory_is_clean) {
    NEED_GPU();
    const ttt_device d = ttt_device_cuda(0);
    ttt_error err = {0};
    ttt_device_pool_stats s0, s1;
    ck_assert_int_eq(ttt_device_pool_stats_get(d, &s0, &err), TTT_OK);
    ttt_device_buffer b;
    const size_t absurd = (size_t)1 << 50; /* 1 PiB */
    ck_assert_int_eq(ttt_device_alloc(&b, d, absurd, NULL, "an absurd buffer", &err),
                     TTT_ERR_DEVICE);
    ck_assert_ptr_null(b.ptr);
    ck_assert_msg(strstr(err.msg, "cudaMallocFromPoolAsync(1048576.00 GiB") &&
                      strstr(err.msg, "on cuda:0") && strstr(err.msg, "out of memory"),
                  "%s", err.msg);
    ck_assert_int_eq(ttt_device_pool_stats_get(d, &s1, &err), TTT_OK);
    ck_assert_uint_eq(s1.used, s0.used); /* nothing held */
    ck_assert_int_eq(s1.failures, s0.failures + 1);
    /* the process carries on: an ordinary allocation works, and no stale error remains for the
     * next launch check */
    ck_assert_int_eq(ttt_device_alloc(&b, d, 1 << 20, NULL, "after", &err), TTT_OK);
    ck_assert_int_eq(ttt_cuda_fill_f32(b.ptr, 1.0f, 1 << 18, NULL, &err), TTT_OK);
    ttt_device_free(&b);
    ck_assert_int_eq(ttt_device_sync(d, NULL, &err), TTT_OK);
}
END_TEST

/* The pool's cap (TTT_CUDA_POOL_LIMIT, ttt_device_pool_set_limit; docs/hardening.md "Faults on
 * the GPU") refuses exactly the allocation that would take the bytes handed out past it, with a
 * full device's error and the cap named, and counts what is handed out now (a freed buffer makes
 * room again); the high-water mark is the most handed out at once and restarts at
 * ttt_device_pool_peak_reset. */
START_TEST(the_pool_cap_and_its_high_water_mark) {
    NEED_GPU();
    const ttt_device d = ttt_device_cuda(0);
    ttt_error err = {0};
    const size_t MiB = (size_t)1 << 20;
    ttt_device_buffer b1, b2, b3;
    ck_assert_int_eq(ttt_device_alloc(&b1, d, MiB, NULL, "the pool made", &err), TTT_OK);
    ttt_device_free(&b1);
    ttt_device_pool_peak_reset(d);
    ttt_device_pool_stats s0, s1, s2, s3;
    ck_assert_int_eq(ttt_device_pool_stats_get(d, &s0, &err), TTT_OK);
    const size_t base = s0.used;
    ck_assert_uint_eq(s0.used_high, base);
    const size_t old = ttt_device_pool_set_limit(base + 8 * MiB);
    ck_assert_int_eq(ttt_device_alloc(&b1, d, 4 * MiB, NULL, "first", &err), TTT_OK);
    ck_assert_int_eq(ttt_device_alloc(&b2, d, 4 * MiB, NULL, "second", &err), TTT_OK);
    /* at the cap exactly: one byte more is refused as a full device refuses */
    ck_assert_int_eq(ttt_device_alloc(&b3, d, 1, NULL, "one byte more", &err), TTT_ERR_DEVICE);
    ck_assert_ptr_null(b3.ptr);
    ck_assert_msg(strstr(err.msg, "cudaMallocFromPoolAsync(1 B, one byte more) on cuda:0") &&
                      strstr(err.msg, "out of memory") &&
                      strstr(err.msg, "cudaErrorMemoryAllocation") &&
                      strstr(err.msg, "TTT_CUDA_POOL_LIMIT caps it at"),
                  "%s", err.msg);
    /* the control: with the second buffer back, the same size fits again */
    ttt_device_free(&b2);
    ck_assert_int_eq(ttt_device_alloc(&b3, d, 4 * MiB, NULL, "again", &err), TTT_OK);
    ck_assert_int_eq(ttt_device_pool_stats_get(d, &s1, &err), TTT_OK);
    ck_assert_uint_eq(s1.limit, base + 8 * MiB);
    ck_assert_uint_eq(s1.used, base + 8 * MiB);
    ck_assert_uint_eq(s1.used_high, base + 8 * MiB);
    ttt_device_free(&b1);
    ttt_device_free(&b3);
    ttt_device_pool_set_limit(old);
    ck_assert_int_eq(ttt_device_sync(d, NULL, &err), TTT_OK);
    ck_assert_int_eq(ttt_device_pool_stats_get(d, &s2, &err), TTT_OK);
    ck_assert_uint_eq(s2.used, base);
    ck_assert_uint_eq(s2.used_high, base + 8 * MiB); /* the mark stays after the frees */
    ttt_device_pool_peak_reset(d);
    ck_assert_int_eq(ttt_device_pool_stats_get(d, &s3, &err), TTT_OK);
    ck_assert_uint_eq(s3.used_high, base);
    ck_assert_uint_le(s3.reserved_high, s2.reserved_high);
}
END_TEST

START_TEST(errors_name_call_and_device) {
    NEED_GPU();
    ttt_error err = {0};
    ck_assert_int_eq(ttt_device_cuda_error(1 /* cudaErrorInvalidValue */, ttt_device_cuda(0),
                                           &err, "cudaSomething(%d)", 42),
                     TTT_ERR_DEVICE);
    ck_assert_msg(strstr(err.msg, "cudaSomething(42) on cuda:0: "), "%s", err.msg);
    ck_assert_int_eq(ttt_device_cuda_error(0, ttt_device_cuda(0), &err, "x"), TTT_OK);
    const int n = gpu_count();
    ck_assert_int_eq(ttt_device_usable(ttt_device_cuda(n), &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "this machine has cuda:0 to"), "%s", err.msg);
}
END_TEST

/* The API's refusals on a GPU machine, each by argument name; after each the process runs a
 * good call. */
START_TEST(api_device_refusals) {
    NEED_GPU();
    const ttt_device d = ttt_device_cuda(0);
    ttt_layer_handle *h = new_layer("gated_deltanet");
    const size_t n = (size_t)B * T * H * D, bytes = n * sizeof(float);
    ttt_error err = {0};
    ttt_device_buffer q, o;
    ck_assert_int_eq(ttt_device_alloc(&q, d, bytes + 64, NULL, "q", &err), TTT_OK);
    ck_assert_int_eq(ttt_device_alloc(&o, d, bytes + 64, NULL, "o", &err), TTT_OK);
    ck_assert_int_eq(ttt_device_zero(q.ptr, d, bytes + 64, NULL, &err), TTT_OK);
    float *hq = calloc(n, sizeof(float)), *ho = calloc(n, sizeof(float));
    ttt_batch_io io = {.size = sizeof io,
                       .B = B, .T = T, .H = H, .o = o.ptr, .q = q.ptr, .k = q.ptr, .v = q.ptr,
                       .device = TTT_DEVICE_CUDA, .device_index = 0};
    /* the wrong device index */
    io.device_index = gpu_count();
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 0, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "io->device_index"), "%s", err.msg);
    io.device_index = 0;
    /* host memory passed as device memory */
    io.k = hq;
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 0, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "io->k") && strstr(err.msg, "is host memory"), "%s", err.msg);
    io.k = q.ptr;
    /* misaligned device pointer */
    io.v = (const float *)((const char *)q.ptr + 4);
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 0, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "io->v") && strstr(err.msg, "aligned to 16 bytes"), "%s",
                  err.msg);
    io.v = q.ptr;
    /* device memory passed to a host call (CUDA is in use in this process by now) */
    ttt_batch_io hio = {.size = sizeof hio,
                        .B = B, .T = T, .H = H, .o = ho, .q = hq, .k = q.ptr, .v = hq};
    ck_assert_int_eq(ttt_layer_forward_run(h, &hio, 1, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "io->k") && strstr(err.msg, "is memory of cuda:0"), "%s",
                  err.msg);
    /* a layer no CUDA entry computes: its tuple's reason and what to do */
    ttt_layer_handle *mlp = new_layer("ttt_mlp");
    ck_assert_int_eq(ttt_layer_forward_run(mlp, &io, 0, &err), TTT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "no CUDA form computes this layer") &&
                      strstr(err.msg, "TTT_DEVICE_HOST"),
                  "%s", err.msg);
    ck_assert_str_eq(ttt_layer_form_for(mlp, &io), "none");
    ttt_layer_free(mlp);
    /* and the good call runs */
    ck_assert_str_eq(ttt_layer_form_for(h, &io), "chunkwise (cuda)");
    ck_assert_int_eq(ttt_layer_forward_run(h, &io, 0, &err), TTT_OK);
    ck_assert_int_eq(ttt_device_sync(d, NULL, &err), TTT_OK);
    ttt_device_free(&q);
    ttt_device_free(&o);
    free(hq);
    free(ho);
    ttt_layer_free(h);
}
END_TEST

/* Repeated calls of one shape take their workspace from the pool: after the first call none
 * makes the pool grow. */
START_TEST(api_calls_reuse_the_pool) {
    NEED_GPU();
    const ttt_device d = ttt_device_cuda(0);
    ttt_layer_handle *h = new_layer("gated_deltanet");
    const size_t n = (size_t)B * T * H * D, bytes = n * sizeof(float);
    ttt_error err = {0};
    ttt_device_buffer q, o, eta;
    ck_assert_int_eq(ttt_device_alloc(&q, d, bytes, NULL, "q", &err), TTT_OK);
    ck_assert_int_eq(ttt_device_alloc(&o, d, bytes, NULL, "o", &err), TTT_OK);
    ck_assert_int_eq(ttt_device_alloc(&eta, d, n / D * sizeof(float), NULL, "eta", &err),
                     TTT_OK);
    ck_assert_int_eq(ttt_cuda_fill_f32(q.ptr, 0.1f, n, NULL, &err), TTT_OK);
    ck_assert_int_eq(ttt_cuda_fill_f32(eta.ptr, 0.5f, n / D, NULL, &err), TTT_OK);
    ttt_batch_io io = {.size = sizeof io,
                       .B = B, .T = T, .H = H, .o = o.ptr, .q = q.ptr, .k = q.ptr, .v = q.ptr,
                       .eta = eta.ptr, .device = TTT_DEVICE_CUDA, .device_index = 0};
    ck_assert_msg(ttt_layer_forward_run(h, &io, 0, &err) == TTT_OK, "%s", err.msg);
    ck_assert_int_eq(ttt_device_sync(d, NULL, &err), TTT_OK);
    ttt_device_pool_stats s0, s1;
    ck_assert_int_eq(ttt_device_pool_stats_get(d, &s0, &err), TTT_OK);
    for (int i = 0; i < 20; i++)
        ck_assert_msg(ttt_layer_forward_run(h, &io, 0, &err) == TTT_OK, "%s", err.msg);
    ck_assert_int_eq(ttt_device_sync(d, NULL, &err), TTT_OK);
    ck_assert_int_eq(ttt_device_pool_stats_get(d, &s1, &err), TTT_OK);
    ck_assert_int_gt(s1.allocs, s0.allocs); /* the calls did take workspace from the pool */
    ck_assert_int_eq(s1.grows, s0.grows);
    ttt_device_free(&q);
    ttt_device_free(&o);
    ttt_device_free(&eta);
    ttt_layer_free(h);
}
END_TEST

static Suite *device_suite(void) {
    Suite *s = suite_create("device");
    TCase *tc = tcase_create("everywhere");
    tcase_add_test(tc, names_and_dtypes);
    tcase_add_test(tc, host_buffers_through_the_seam);
    tcase_add_test(tc, host_call_refusals);
    tcase_add_test(tc, version_names_cuda);
    tcase_add_test(tc, form_for_device_calls);
    tcase_add_test(tc, no_gpu_refusals);
    suite_add_tcase(s, tc);
    TCase *g = tcase_create("gpu");
    tcase_add_test(g, pool_reuses_memory);
    tcase_add_test(g, out_of_memory_is_clean);
    tcase_add_test(g, the_pool_cap_and_its_high_water_mark);
    tcase_add_test(g, errors_name_call_and_device);
    tcase_add_test(g, api_device_refusals);
    tcase_add_test(g, api_calls_reuse_the_pool);
    suite_add_tcase(s, g);
    return s;
}

int main(void) {
    /* every test runs in a forked child (Check's default), and CUDA does not survive a fork:
     * this process asks about devices only after the suite has run */
    const int rc = tu_run(device_suite());
    if (rc != 0) return rc;
    ttt_error err = {0};
    if (ttt_cuda_device_count(&err) == 0) {
        printf("skipped: the GPU cases: %s\n", err.msg);
        return 77;
    }
    return 0;
}
