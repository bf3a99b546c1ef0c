/* The arena (src/core/tensor.h): footprint and peak bookkeeping across blocks, mark/release and reset
 * handing blocks to the spare list and taking them back, and the memory limit counting every
 * byte held. Expected values follow from the documented rules (64-byte rounding, blocks of
 * block_size or of the request when larger), not from running the code. */
#include <string.h>

#include "testutil.h"
#include "internal.h"

#define BLOCK 4096

START_TEST(footprint_and_peak_span_blocks) {
    ttt_arena a;
    ttt_arena_init(&a, BLOCK);
    ck_assert_uint_eq(ttt_arena_footprint(&a), 0);
    ck_assert_ptr_nonnull(ttt_arena_alloc(&a, 100)); /* 128 after rounding */
    ck_assert_uint_eq(ttt_arena_footprint(&a), 128);
    ck_assert_ptr_nonnull(ttt_arena_alloc(&a, 4000)); /* 4032: does not fit, a second block */
    ck_assert_uint_eq(ttt_arena_footprint(&a), 128 + 4032);
    ck_assert_ptr_nonnull(ttt_arena_alloc(&a, 3 * BLOCK)); /* a block of its own size */
    ck_assert_uint_eq(ttt_arena_footprint(&a), 128 + 4032 + 3 * BLOCK);
    ck_assert_uint_eq(a.peak, 128 + 4032 + 3 * BLOCK);
    ttt_arena_reset(&a);
    ck_assert_uint_eq(ttt_arena_footprint(&a), 0);
    ck_assert_uint_eq(a.peak, 128 + 4032 + 3 * BLOCK); /* the peak survives a reset */
    ck_assert_ptr_nonnull(ttt_arena_alloc(&a, 64));
    ck_assert_uint_eq(ttt_arena_footprint(&a), 64);
    ttt_arena_free(&a);
}
END_TEST

/* Memory given back by release or reset is reused by the next allocations of the same sizes:
 * the same addresses come back, so a loop that allocates the same pattern every pass touches
 * no new pages after the first pass. */
START_TEST(released_blocks_are_reused) {
    ttt_arena a;
    ttt_arena_init(&a, BLOCK);
    ck_assert_ptr_nonnull(ttt_arena_alloc(&a, 256));
    ttt_arena_mark m = ttt_arena_mark_get(&a);
    const size_t fp = ttt_arena_footprint(&a);
    void *big1 = ttt_arena_alloc(&a, 5 * BLOCK), *small1 = ttt_arena_alloc(&a, 2 * BLOCK);
    ck_assert_ptr_nonnull(big1);
    ck_assert_ptr_nonnull(small1);
    ttt_arena_release(&a, m);
    ck_assert_uint_eq(ttt_arena_footprint(&a), fp);
    void *big2 = ttt_arena_alloc(&a, 5 * BLOCK), *small2 = ttt_arena_alloc(&a, 2 * BLOCK);
    ck_assert_ptr_eq(big2, big1);
    ck_assert_ptr_eq(small2, small1);
    memset(big2, 1, 5 * BLOCK); /* the whole request is usable (ASan checks the bounds) */
    /* after a reset the first block is head again and the others come back from the spares */
    ttt_arena_reset(&a);
    void *p0 = ttt_arena_alloc(&a, 256);
    void *big3 = ttt_arena_alloc(&a, 5 * BLOCK);
    ck_assert_ptr_nonnull(p0);
    ck_assert_ptr_eq(big3, big1);
    ttt_arena_free(&a);
}
END_TEST

/* limit bounds everything the arena holds, spare blocks included; reusing a spare does not grow
 * the arena and is allowed at the limit. */
START_TEST(limit_counts_spare_blocks) {
    ttt_arena a;
    ttt_arena_init(&a, BLOCK);
    a.limit = 3 * BLOCK;
    ck_assert_ptr_nonnull(ttt_arena_alloc(&a, BLOCK)); /* block 1 */
    ttt_arena_mark m = ttt_arena_mark_get(&a);
    ck_assert_ptr_nonnull(ttt_arena_alloc(&a, BLOCK)); /* block 2 */
    ck_assert_ptr_nonnull(ttt_arena_alloc(&a, BLOCK)); /* block 3: 3·BLOCK held */
    ck_assert_ptr_null(ttt_arena_alloc(&a, BLOCK));    /* a fourth would pass the limit */
    ttt_arena_release(&a, m);                          /* blocks 2 and 3 become spares */
    ck_assert_ptr_nonnull(ttt_arena_alloc(&a, BLOCK)); /* spare */
    ck_assert_ptr_nonnull(ttt_arena_alloc(&a, BLOCK)); /* spare */
    ck_assert_ptr_null(ttt_arena_alloc(&a, BLOCK));
    ttt_arena_release(&a, m);
    ck_assert_ptr_null(ttt_arena_alloc(&a, 2 * BLOCK)); /* no spare that large, and no room */
    ttt_arena_free(&a);
}
END_TEST

static Suite *arena_suite(void) {
    Suite *s = suite_create("arena");
    TCase *tc = tcase_create("arena");
    tcase_add_test(tc, footprint_and_peak_span_blocks);
    tcase_add_test(tc, released_blocks_are_reused);
    tcase_add_test(tc, limit_counts_spare_blocks);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(arena_suite()); }
