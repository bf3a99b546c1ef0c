/* The text builder: growth over many appends, printf formatting at every fill level, bytes with
 * embedded NULs, the sticky failure flag (reached through the size limit), take and reset. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "strbuf.h"

/* 20000 appends through all four append calls; the expected text is laid out independently in
 * one preallocated array. */
START_TEST(many_appends_grow_and_keep_every_byte) {
    enum { N = 20000 };
    size_t cap = (size_t)N * 32;
    char *want = malloc(cap);
    ck_assert_ptr_nonnull(want);
    size_t wn = 0;
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    for (int i = 0; i < N; i++) {
        switch (i % 4) {
        case 0:
            ttt_strbuf_putc(&b, (char)('a' + i % 26));
            want[wn++] = (char)('a' + i % 26);
            break;
        case 1:
            ttt_strbuf_puts(&b, "xyz");
            memcpy(want + wn, "xyz", 3);
            wn += 3;
            break;
        case 2:
            ttt_strbuf_append(&b, "0123456789", (size_t)(i % 11));
            memcpy(want + wn, "0123456789", (size_t)(i % 11));
            wn += (size_t)(i % 11);
            break;
        default: {
            ttt_strbuf_printf(&b, "[%d]", i);
            /* i < 100000: at most 5 digits */
            int d = 0;
            char digits[8];
            for (int v = i; v > 0 || d == 0; v /= 10) digits[d++] = (char)('0' + v % 10);
            want[wn++] = '[';
            while (d > 0) want[wn++] = digits[--d];
            want[wn++] = ']';
            break;
        }
        }
    }
    ck_assert(!b.failed);
    ck_assert_uint_eq(b.len, wn);
    ck_assert_uint_ge(b.cap, b.len + 1);
    ck_assert(memcmp(b.data, want, wn) == 0);
    ck_assert_int_eq(b.data[b.len], '\0');
    ttt_strbuf_free(&b);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
    free(want);
}
END_TEST

START_TEST(printf_formats_like_snprintf) {
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    ttt_strbuf_printf(&b, "%d-%s", 42, "ab");
    ck_assert_str_eq(ttt_strbuf_str(&b), "42-ab");
    ttt_strbuf_printf(&b, "|%5s|%-4d|%03x|%.2f|%%|%c", "q", 7, 255, 2.5, 'z');
    ck_assert_str_eq(ttt_strbuf_str(&b), "42-ab|    q|7   |0ff|2.50|%|z");
    ck_assert_uint_eq(b.len, strlen("42-ab|    q|7   |0ff|2.50|%|z"));
    /* an empty format appends nothing and is not a failure */
    ttt_strbuf_printf(&b, "%s", "");
    ck_assert_uint_eq(b.len, strlen("42-ab|    q|7   |0ff|2.50|%|z"));
    ck_assert(!b.failed);
    ttt_strbuf_free(&b);
}
END_TEST

/* Every split between the room already allocated and what the format needs: text that fits
 * exactly, that misses by the NUL, that needs several doublings, into an empty builder. */
START_TEST(long_formatted_strings_at_every_fill_level) {
    enum { MAXP = 140, MAXK = 300 };
    char as[MAXP + 1], bs[MAXK + 1];
    memset(as, 'a', MAXP);
    memset(bs, 'b', MAXK);
    as[MAXP] = bs[MAXK] = '\0';
    for (int p = 0; p <= MAXP; p += (p < 70 ? 1 : 7)) {
        for (int k = 0; k <= MAXK; k++) {
            ttt_strbuf b;
            ttt_strbuf_init(&b);
            ttt_strbuf_append(&b, as, (size_t)p);
            ttt_strbuf_printf(&b, "%.*s!", k, bs);
            ck_assert(!b.failed);
            ck_assert_uint_eq(b.len, (size_t)(p + k + 1));
            const char *s = ttt_strbuf_str(&b);
            for (int i = 0; i < p; i++) ck_assert_int_eq(s[i], 'a');
            for (int i = 0; i < k; i++) ck_assert_int_eq(s[p + i], 'b');
            ck_assert_int_eq(s[p + k], '!');
            ck_assert_int_eq(s[p + k + 1], '\0');
            ttt_strbuf_free(&b);
        }
    }
    /* one string far longer than any first allocation */
    size_t big = 1u << 20;
    char *text = malloc(big + 1);
    ck_assert_ptr_nonnull(text);
    for (size_t i = 0; i < big; i++) text[i] = (char)('A' + i % 26);
    text[big] = '\0';
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    ttt_strbuf_puts(&b, "<");
    ttt_strbuf_printf(&b, "%s>", text);
    ck_assert_uint_eq(b.len, big + 2);
    ck_assert_int_eq(b.data[0], '<');
    ck_assert(memcmp(b.data + 1, text, big) == 0);
    ck_assert_str_eq(b.data + 1 + big, ">");
    ttt_strbuf_free(&b);
    free(text);
}
END_TEST

START_TEST(embedded_nul_bytes_are_kept) {
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    ttt_strbuf_append(&b, "a\0b", 3);
    ttt_strbuf_putc(&b, '\0');
    ttt_strbuf_puts(&b, "c");
    ck_assert_uint_eq(b.len, 5);
    ck_assert(memcmp(b.data, "a\0b\0c", 6) == 0); /* includes the terminator */
    ttt_strbuf_free(&b);
}
END_TEST

/* The limit stands in for a failing allocator: growth past it must fail exactly like realloc
 * returning NULL. */
START_TEST(failure_is_sticky_and_leaves_whole_text) {
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    b.limit = 16;
    ttt_strbuf_append(&b, "0123456789abcde", 15); /* 15 + NUL = 16: allowed */
    ck_assert(!b.failed);
    ck_assert_str_eq(ttt_strbuf_str(&b), "0123456789abcde");
    ttt_strbuf_putc(&b, 'X'); /* 17 bytes: refused */
    ck_assert(b.failed);
    ck_assert_uint_eq(b.len, 15);
    ck_assert_str_eq(ttt_strbuf_str(&b), "0123456789abcde");
    ck_assert_uint_le(b.cap, 16);
    /* sticky: nothing is appended after a failure, not even what would fit */
    ttt_strbuf_reset(&b);
    ck_assert(!b.failed);
    ttt_strbuf_puts(&b, "0123456789");
    ttt_strbuf_puts(&b, "0123456789");
    ck_assert(b.failed);
    ttt_strbuf_puts(&b, "ab");
    ttt_strbuf_printf(&b, "%d", 1);
    ck_assert(b.failed);
    ck_assert_str_eq(ttt_strbuf_str(&b), "0123456789");
    /* take hands back NULL and frees what was there, so no partial text escapes */
    ck_assert_ptr_null(ttt_strbuf_take(&b));
    ck_assert(!b.failed);
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.limit, 16); /* the bound belongs to the builder, not to one text */
    ttt_strbuf_free(&b);
}
END_TEST

/* printf first formats into the spare room; when the text does not fit and growing fails, the
 * text before it must still be intact and terminated. */
START_TEST(printf_failure_keeps_the_text_before_it) {
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    b.limit = 32;
    ttt_strbuf_puts(&b, "abc");
    ck_assert_uint_eq(b.cap, 32); /* the first allocation is clamped to the limit */
    ttt_strbuf_printf(&b, "%s", "0123456789012345678901234567890123456789");
    ck_assert(b.failed);
    ck_assert_uint_eq(b.len, 3);
    ck_assert_str_eq(ttt_strbuf_str(&b), "abc");
    ttt_strbuf_free(&b);
}
END_TEST

/* A length that would wrap size_t around must fail before touching memory. */
START_TEST(size_overflow_fails) {
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    ttt_strbuf_puts(&b, "hello");
    ttt_strbuf_append(&b, "x", SIZE_MAX - 2);
    ck_assert(b.failed);
    ck_assert_uint_eq(b.len, 5);
    ttt_strbuf_free(&b);
    ttt_strbuf_init(&b);
    ttt_strbuf_append(&b, "x", SIZE_MAX);
    ck_assert(b.failed);
    ttt_strbuf_free(&b);
}
END_TEST

static void via_va_list(ttt_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void via_va_list(ttt_strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ttt_strbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

/* src/config declares its builders as `= {0}`: a zeroed struct must be an empty builder. */
START_TEST(zeroed_struct_is_an_empty_builder) {
    ttt_strbuf z = {0};
    ttt_strbuf_printf(&z, "%s%d", "x", 1);
    ck_assert(!z.failed);
    char *s = ttt_strbuf_take(&z);
    ck_assert_str_eq(s, "x1");
    free(s);
}
END_TEST

START_TEST(take_and_reset) {
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    ck_assert_str_eq(ttt_strbuf_str(&b), "");
    /* an empty builder still hands back a string the caller may free */
    char *empty = ttt_strbuf_take(&b);
    ck_assert_ptr_nonnull(empty);
    ck_assert_str_eq(empty, "");
    free(empty);

    via_va_list(&b, "%s=%d", "n", 3);
    char *s = ttt_strbuf_take(&b);
    ck_assert_str_eq(s, "n=3");
    /* the builder no longer owns it: it is empty and new text goes to new memory */
    ck_assert_ptr_null(b.data);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_uint_eq(b.cap, 0);
    ttt_strbuf_puts(&b, "other");
    ck_assert_str_eq(s, "n=3");
    free(s);

    /* reset keeps the allocation */
    ttt_strbuf_puts(&b, " text that is long enough to have grown the buffer past its start");
    char *before = b.data;
    size_t cap = b.cap;
    ttt_strbuf_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(ttt_strbuf_str(&b), "");
    ck_assert_ptr_eq(b.data, before);
    ck_assert_uint_eq(b.cap, cap);
    ttt_strbuf_puts(&b, "again");
    ck_assert_str_eq(ttt_strbuf_str(&b), "again");
    ttt_strbuf_free(&b);
}
END_TEST

static Suite *strbuf_suite(void) {
    Suite *s = suite_create("strbuf");
    TCase *tc = tcase_create("strbuf");
    tcase_add_test(tc, many_appends_grow_and_keep_every_byte);
    tcase_add_test(tc, printf_formats_like_snprintf);
    tcase_add_test(tc, long_formatted_strings_at_every_fill_level);
    tcase_add_test(tc, embedded_nul_bytes_are_kept);
    tcase_add_test(tc, failure_is_sticky_and_leaves_whole_text);
    tcase_add_test(tc, printf_failure_keeps_the_text_before_it);
    tcase_add_test(tc, size_overflow_fails);
    tcase_add_test(tc, zeroed_struct_is_an_empty_builder);
    tcase_add_test(tc, take_and_reset);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(strbuf_suite()); }
