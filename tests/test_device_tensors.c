/* Tensors, arenas and the op table's dispatch on devices, on any machine (docs/design.md
 * "Devices", docs/device_ops.md): what must hold without a GPU. A device arena that cannot be
 * made says why and leaves a usable host arena; host tensors are on the host whatever made them;
 * ttt_tensor_to / ttt_tensor_read move host tensors; a device arena's mark and release carry its
 * host side along (checked through the meta arena of an arena made by hand as a device arena
 * would be, without touching device memory); and an op given tensors of different devices stops
 * with a message naming the op and both devices instead of reading memory it cannot. The device
 * computations themselves are tests/test_backend_ops.c's (on a GPU). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "autograd.h"
#include "device.h"
#include "ops.h"
#include "tensor.h"

START_TEST(device_arena_refused_without_a_gpu) {
    ttt_error err;
    /* with a GPU here, device arenas are test_backend_ops's */
    if (ttt_device_usable(ttt_device_cuda(0), &err) == TTT_OK) return;
    ttt_arena a;
    ck_assert_int_ne(ttt_arena_init_device(&a, 0, ttt_device_cuda(0), NULL, &err), TTT_OK);
    ck_assert_msg(strstr(err.msg, "cuda:0") != NULL || strstr(err.msg, "CUDA") != NULL, "%s",
                  err.msg);
    /* still a host arena */
    ck_assert(ttt_device_is_host(a.device));
    ck_assert_ptr_null(a.meta);
    ttt_ctx ctx = {.arena = &a};
    ttt_tensor *t = ttt_tensor_2d(&ctx, 3, 4);
    ck_assert(!ttt_tensor_on_device(t));
    ttt_tensor_fill(t, 2.0f);
    ck_assert(t->data[11] == 2.0f);
    ttt_arena_free(&a);
}
END_TEST

START_TEST(host_tensors_move_and_read) {
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_ctx ctx = {.arena = &a};
    float src[6] = {1, 2, 3, 4, 5, 6}, back[6] = {0};
    ttt_tensor v = ttt_tensor_view(src, 2, (int[]){2, 3});
    ck_assert(!ttt_tensor_on_device(&v));
    ttt_tensor *t = ttt_tensor_to(&ctx, &v);
    ck_assert(t->data != src && !ttt_tensor_on_device(t));
    ttt_error err;
    ck_assert_int_eq(ttt_tensor_read(t, back, NULL, &err), TTT_OK);
    ck_assert(memcmp(back, src, sizeof src) == 0);
    ck_assert_int_eq(ttt_device_ops_status(&err), TTT_OK);
    ttt_arena_free(&a);
}
END_TEST

/* A device arena's mark covers its meta arena: released together. Built by hand on host
 * memory (device = host kind, meta set), so no device memory is touched. */
START_TEST(mark_release_carries_the_meta_arena) {
    ttt_arena a, meta;
    ttt_arena_init(&a, 4096);
    ttt_arena_init(&meta, 4096);
    a.meta = &meta;
    ttt_arena_mark m = ttt_arena_mark_get(&a);
    (void)ttt_arena_alloc(ttt_arena_host(&a), 1000);
    ck_assert_uint_gt(ttt_arena_footprint(&meta), 0);
    ttt_arena_release(&a, m);
    ck_assert_uint_eq(ttt_arena_footprint(&meta), 0);
    (void)ttt_arena_alloc(ttt_arena_host(&a), 1000);
    ttt_arena_reset(&a);
    ck_assert_uint_eq(ttt_arena_footprint(&meta), 0);
    /* control: without the meta link the host side is not released */
    a.meta = NULL;
    (void)ttt_arena_alloc(&meta, 1000);
    ttt_arena_release(&a, ttt_arena_mark_get(&a));
    ck_assert_uint_gt(ttt_arena_footprint(&meta), 0);
    ttt_arena_free(&meta);
    ttt_arena_free(&a);
}
END_TEST

/* A tensor marked as living on cuda:0 given to an op with a host one and a host arena: the op
 * goes to its device half, which refuses the mix (SIGABRT, after the message). */
START_TEST(mixed_devices_stop_the_op) {
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_ctx ctx = {.arena = &a};
    ttt_tensor *x = ttt_tensor_2d(&ctx, 2, 2), *y = ttt_tensor_2d(&ctx, 2, 2);
    ttt_tensor_fill(x, 1.0f);
    ttt_tensor_fill(y, 1.0f);
    ttt_tensor_set_device(y, ttt_device_cuda(0));
    (void)ttt_add(&ctx, x, y);
    ttt_arena_free(&a);
}
END_TEST

/* Control: the same op on two host tensors runs. */
START_TEST(same_device_runs) {
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_ctx ctx = {.arena = &a};
    ttt_tensor *x = ttt_tensor_2d(&ctx, 2, 2), *y = ttt_tensor_2d(&ctx, 2, 2);
    ttt_tensor_fill(x, 1.0f);
    ttt_tensor_fill(y, 2.0f);
    ttt_tensor *r = ttt_add(&ctx, x, y);
    ck_assert(r->data[3] == 3.0f && !ttt_tensor_on_device(r));
    ttt_arena_free(&a);
}
END_TEST

int main(void) {
    Suite *s = suite_create("device_tensors");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, device_arena_refused_without_a_gpu);
    tcase_add_test(tc, host_tensors_move_and_read);
    tcase_add_test(tc, mark_release_carries_the_meta_arena);
    tcase_add_test_raise_signal(tc, mixed_devices_stop_the_op, SIGABRT);
    tcase_add_test(tc, same_device_runs);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
