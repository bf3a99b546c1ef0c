/* The .safetensors reader and writer: round trips, files of other dtypes built byte by byte,
 * and a battery of malformed files, each rejected with a message that says what is wrong
 * (the suite runs under AddressSanitizer in CI, so "no crash, no out-of-bounds read" is checked
 * too: every malformed input is read from a heap buffer of exactly its size). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rng.h"
#include "safetensors.h"
#include "testutil.h"

/* ---- building files by hand ---- */

typedef struct bytes {
    unsigned char *b;
    size_t n, cap;
} bytes;

static void put(bytes *s, const void *p, size_t n) {
    if (s->n + n > s->cap) {
        s->cap = (s->n + n) * 2 + 64;
        s->b = realloc(s->b, s->cap);
        ck_assert_ptr_nonnull(s->b);
    }
    if (n) memcpy(s->b + s->n, p, n);
    s->n += n;
}
static void put_le(bytes *s, uint64_t v, int nbytes) {
    for (int i = 0; i < nbytes; i++) {
        unsigned char c = (unsigned char)(v >> (8 * i));
        put(s, &c, 1);
    }
}
static void put_f32(bytes *s, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_le(s, u, 4);
}
static void put_f64(bytes *s, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    put_le(s, u, 8);
}

/* A file: the 8-byte length of `header`, the header text, then `data_len` bytes of data. */
static bytes make_file(const char *header, const bytes *data) {
    bytes f = {0};
    put_le(&f, strlen(header), 8);
    put(&f, header, strlen(header));
    if (data) put(&f, data->b, data->n);
    return f;
}
/* A file whose data buffer is `data_len` zero bytes. */
static bytes make_zero_file(const char *header, size_t data_len) {
    bytes d = {0};
    for (size_t i = 0; i < data_len; i++) put_le(&d, 0, 1);
    bytes f = make_file(header, &d);
    free(d.b);
    return f;
}

/* Read from a heap copy of exactly n bytes (so ASan sees any read past the end). */
static ttt_status read_exact(const unsigned char *b, size_t n, const char *name, ttt_st_file **out,
                             ttt_error *err) {
    unsigned char *copy = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(copy);
    if (n) memcpy(copy, b, n);
    ttt_status s = ttt_st_read_mem(copy, n, name, out, err);
    free(copy);
    return s;
}

static int bits_equal(const float *a, const float *b, size_t n) {
    return n == 0 || memcmp(a, b, n * sizeof(float)) == 0;
}

/* ---- round trips ---- */

START_TEST(write_read_round_trip) {
    ttt_rng rng;
    ttt_rng_seed(&rng, 7);
    float a[6], big[3 * 4 * 5 * 6], scalar = -0.0f;
    ttt_rng_fill_normal(&rng, a, 6, 0.0f, 1.0f);
    ttt_rng_fill_normal(&rng, big, sizeof big / sizeof big[0], 0.0f, 3.0f);
    /* values whose bits must survive: infinities, signed zero, a subnormal, the largest float */
    float special[5] = {INFINITY, -INFINITY, -0.0f, 1e-45f, 3.4028235e38f};
    char weird[] = "w\xc3\xa9ird \"name\" \\ with\nnewline";
    ttt_st_tensor ts[] = {
        {.name = "a", .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "scalar", .ndim = 0, .data = &scalar},
        {.name = "empty", .ndim = 2, .shape = {0, 5}, .data = NULL},
        {.name = "big", .ndim = 4, .shape = {3, 4, 5, 6}, .data = big},
        {.name = weird, .ndim = 1, .shape = {5}, .data = special},
    };
    const int n = (int)(sizeof ts / sizeof ts[0]);
    const char *meta[] = {"format", "pt", "note", "quote \" backslash \\ tab \t \xe2\x82\xac"};
    char *dir = tu_mkdtemp(), path[512], path2[512];
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    snprintf(path2, sizeof path2, "%s/y.safetensors", dir);
    ttt_error err = {0};
    ck_assert_int_eq(ttt_st_write(path, ts, n, meta, 2, &err), TTT_OK);
    ck_assert_int_eq(ttt_st_write(path2, ts, n, meta, 2, &err), TTT_OK);

    ttt_st_file *f = NULL;
    ck_assert_msg(ttt_st_read(path, &f, &err) == TTT_OK, "%s", err.msg);
    ck_assert_int_eq(f->n, n);
    for (int i = 0; i < n; i++) {
        /* the order given is the order read back */
        ck_assert_str_eq(f->t[i].name, ts[i].name);
        ck_assert_str_eq(f->t[i].dtype, "F32");
        ck_assert_int_eq(f->t[i].ndim, ts[i].ndim);
        for (int d = 0; d < ts[i].ndim; d++) ck_assert_int_eq(f->t[i].shape[d], ts[i].shape[d]);
        ck_assert_int_eq(ttt_st_numel(&f->t[i]), ttt_st_numel(&ts[i]));
        ck_assert_msg(bits_equal(f->t[i].data, ts[i].data, (size_t)ttt_st_numel(&ts[i])),
                      "tensor %s differs", ts[i].name);
    }
    ck_assert_int_eq(ttt_st_numel(ttt_st_find(f, "scalar")), 1);
    ck_assert_int_eq(ttt_st_numel(ttt_st_find(f, "empty")), 0);
    ck_assert_ptr_eq(ttt_st_find(f, "big"), &f->t[3]);
    ck_assert_ptr_null(ttt_st_find(f, "missing"));
    ck_assert_int_eq(f->n_meta, 2);
    ck_assert_str_eq(ttt_st_meta(f, "format"), "pt");
    ck_assert_str_eq(ttt_st_meta(f, "note"), meta[3]);
    ck_assert_ptr_null(ttt_st_meta(f, "nothing"));
    ttt_st_free(f);

    /* layout: header length + header is a multiple of 8, the header starts with '{', is padded
     * with spaces only, and the same input gives the same bytes */
    char *b1 = tu_read_file(path), *b2 = tu_read_file(path2);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | (unsigned char)b1[k];
    ck_assert_int_eq((8 + hlen) % 8, 0);
    ck_assert_int_eq(b1[8], '{');
    size_t last = 8 + hlen - 1;
    while (b1[last] == ' ') last--;
    ck_assert_int_eq(b1[last], '}');
    ck_assert_int_eq((size_t)sb.st_size, 8 + hlen + 4 * (6 + 1 + 0 + 360 + 5));
    ck_assert_int_eq(memcmp(b1, b2, (size_t)sb.st_size), 0);
    free(b1);
    free(b2);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(write_read_without_tensors_or_metadata) {
    char *dir = tu_mkdtemp(), path[512];
    snprintf(path, sizeof path, "%s/e.safetensors", dir);
    ttt_error err = {0};
    ck_assert_int_eq(ttt_st_write(path, NULL, 0, NULL, 0, &err), TTT_OK);
    ttt_st_file *f = NULL;
    ck_assert_msg(ttt_st_read(path, &f, &err) == TTT_OK, "%s", err.msg);
    ck_assert_int_eq(f->n, 0);
    ck_assert_int_eq(f->n_meta, 0);
    ttt_st_free(f);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(writer_rejects_bad_tensors_and_keeps_old_file) {
    char *dir = tu_mkdtemp(), path[512], bad[512];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    float x[2] = {1, 2};
    ttt_st_tensor good = {.name = "x", .ndim = 1, .shape = {2}, .data = x};
    ttt_error err = {0};
    ck_assert_int_eq(ttt_st_write(path, &good, 1, NULL, 0, &err), TTT_OK);
    struct stat sb0, sb1;
    ck_assert_int_eq(stat(path, &sb0), 0);
    char *before = tu_read_file(path);

    ttt_st_tensor dup[2] = {good, good};
    ck_assert_int_eq(ttt_st_write(path, dup, 2, NULL, 0, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "'x' is given twice") && strstr(err.msg, path), "%s", err.msg);
    ttt_st_tensor reserved = {.name = "__metadata__", .ndim = 1, .shape = {2}, .data = x};
    ck_assert_int_eq(ttt_st_write(path, &reserved, 1, NULL, 0, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "reserved"), "%s", err.msg);
    ttt_st_tensor noname = {.name = "", .ndim = 1, .shape = {2}, .data = x};
    ck_assert_int_eq(ttt_st_write(path, &noname, 1, NULL, 0, &err), TTT_ERR_ARG);
    ttt_st_tensor neg = {.name = "n", .ndim = 2, .shape = {2, -1}, .data = x};
    ck_assert_int_eq(ttt_st_write(path, &neg, 1, NULL, 0, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "negative"), "%s", err.msg);
    ttt_st_tensor many = {.name = "m", .ndim = 9, .data = x};
    ck_assert_int_eq(ttt_st_write(path, &many, 1, NULL, 0, &err), TTT_ERR_ARG);
    ttt_st_tensor badutf = {.name = "\xff", .ndim = 1, .shape = {2}, .data = x};
    ck_assert_int_eq(ttt_st_write(path, &badutf, 1, NULL, 0, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "UTF-8"), "%s", err.msg);
    const char *dmeta[] = {"k", "1", "k", "2"};
    ck_assert_int_eq(ttt_st_write(path, &good, 1, dmeta, 2, &err), TTT_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "metadata key 'k'"), "%s", err.msg);

    /* none of the failures above touched the existing file */
    char *after = tu_read_file(path);
    ck_assert_int_eq(stat(path, &sb1), 0);
    ck_assert_int_eq(sb0.st_size, sb1.st_size);
    ck_assert_int_eq(memcmp(after, before, (size_t)sb0.st_size), 0);
    free(before);
    free(after);

    /* an unwritable place is an I/O error naming the path */
    snprintf(bad, sizeof bad, "%s/no/such/dir/w.safetensors", dir);
    ck_assert_int_eq(ttt_st_write(bad, &good, 1, NULL, 0, &err), TTT_ERR_IO);
    ck_assert_msg(strstr(err.msg, bad), "%s", err.msg);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- other dtypes, built byte by byte ---- */

/* Expected values below are the IEEE 754 meanings of the bit patterns (binary16: 1 sign,
 * 5 exponent (bias 15), 10 fraction bits; bfloat16: the upper 16 bits of a binary32). */
START_TEST(reads_f64_f16_bf16) {
    static const uint16_t h[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x8000, 0x7C00,
                                 0xFC00, 0x3555, 0x7E00};
    static const float h_want[] = {1.0f, -2.0f, 65504.0f, 0x1p-24f, 0x3FFp-24f, -0.0f,
                                   INFINITY, -INFINITY, 0x1.554p-2f};
    static const uint16_t bf[] = {0x3F80, 0xC0A0, 0x4049, 0x0001, 0x7F80, 0x8000};
    static const float bf_want[] = {1.0f, -5.0f, 3.140625f, 0x1p-133f, INFINITY, -0.0f};
    static const double d[] = {0.1, -2.25, 1e-300, 3.0e39, -1e10, 123456789.123};
    bytes data = {0};
    for (int i = 0; i < 6; i++) put_f64(&data, d[i]);           /* [0, 48) */
    for (int i = 0; i < 10; i++) put_le(&data, h[i], 2);        /* [48, 68) */
    for (int i = 0; i < 6; i++) put_le(&data, bf[i], 2);        /* [68, 80) */
    put_f32(&data, 1.5f);                                       /* [80, 84) */
    /* whitespace of every JSON kind, escapes in names, metadata, padding with spaces */
    const char *header =
        "{\n\t\"d\" : {\"dtype\": \"F64\", \"shape\": [2, 3], \"data_offsets\": [0, 48]},\r\n"
        " \"h\\u00e9\\ud83d\\ude00\": {\"shape\": [10], \"dtype\": \"F16\", "
        "\"data_offsets\": [48, 68]},\n"
        " \"__metadata__\": {\"who\": \"hand\\/made\", \"empty\": \"\"},\n"
        " \"b\": {\"data_offsets\": [68, 80], \"dtype\": \"BF16\", \"shape\": [3, 2]},\n"
        " \"s\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [80, 84]}\n}      ";
    bytes f = make_file(header, &data);
    ttt_st_file *st = NULL;
    ttt_error err = {0};
    ck_assert_msg(read_exact(f.b, f.n, "hand.safetensors", &st, &err) == TTT_OK, "%s", err.msg);
    ck_assert_int_eq(st->n, 4);
    ck_assert_int_eq(st->n_meta, 2);
    ck_assert_str_eq(ttt_st_meta(st, "who"), "hand/made");
    ck_assert_str_eq(ttt_st_meta(st, "empty"), "");

    const ttt_st_tensor *td = ttt_st_find(st, "d");
    ck_assert_ptr_nonnull(td);
    ck_assert_str_eq(td->dtype, "F64");
    ck_assert_int_eq(td->ndim, 2);
    for (int i = 0; i < 6; i++) {
        float want = (float)d[i]; /* 3e39 overflows float: +inf, as a cast does */
        ck_assert_msg(bits_equal(&td->data[i], &want, 1), "F64 %d: %g vs %g", i, td->data[i],
                      want);
    }
    const ttt_st_tensor *th = ttt_st_find(st, "h\xc3\xa9\xf0\x9f\x98\x80"); /* hé😀 */
    ck_assert_ptr_nonnull(th);
    ck_assert_str_eq(th->dtype, "F16");
    for (int i = 0; i < 9; i++)
        ck_assert_msg(bits_equal(&th->data[i], &h_want[i], 1), "F16 0x%04x: %a vs %a", h[i],
                      th->data[i], h_want[i]);
    ck_assert(isnan(th->data[9]));
    const ttt_st_tensor *tb = ttt_st_find(st, "b");
    ck_assert_str_eq(tb->dtype, "BF16");
    for (int i = 0; i < 6; i++)
        ck_assert_msg(bits_equal(&tb->data[i], &bf_want[i], 1), "BF16 0x%04x: %a vs %a", bf[i],
                      tb->data[i], bf_want[i]);
    const ttt_st_tensor *ts = ttt_st_find(st, "s");
    ck_assert_int_eq(ts->ndim, 0);
    ck_assert(ts->data[0] == 1.5f);
    /* header order is kept, metadata is not a tensor */
    ck_assert_str_eq(st->t[0].name, "d");
    ck_assert_str_eq(st->t[2].name, "b");
    ttt_st_free(st);
    free(f.b);
    free(data.b);
}
END_TEST

/* ---- malformed files ---- */

typedef struct bad_case {
    const char *name;
    const char *header; /* JSON header text; NULL: `raw` below is the whole file */
    size_t data_len;    /* zero bytes of data after the header */
    const char *raw;    /* whole file when header == NULL */
    size_t raw_len;
    const char *phrase; /* must appear in the message */
} bad_case;

#define F32_2x3 "{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"
#define BADLEN8 "\xe8\x03\x00\x00\x00\x00\x00\x00" /* header length 1000 */

static const bad_case bad_cases[] = {
    {"truncated_header_length", NULL, 0, "\x10\x00\x00\x00\x00", 5,
     "too short for the 8-byte header length"},
    {"empty_file", NULL, 0, "", 0, "too short for the 8-byte header length"},
    {"header_longer_than_file", NULL, 0, BADLEN8 "{\"a\":1}", 15,
     "header length 1000 exceeds the 7 bytes that follow"},
    {"header_length_huge", NULL, 0, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10,
     "exceeds the 2 bytes"},
    {"header_length_zero", NULL, 0, "\x00\x00\x00\x00\x00\x00\x00\x00", 8, "too short for a JSON"},
    {"non_object_header_array", "[1, 2]", 0, NULL, 0, "must be a JSON object, found an array"},
    {"non_object_header_string", "\"abc\"", 0, NULL, 0, "must be a JSON object, found a string"},
    {"non_object_header_number", "12345678", 0, NULL, 0, "must be a JSON object, found a number"},
    {"bad_json_missing_colon", "{\"a\" " F32_2x3 "}", 24, NULL, 0,
     "not valid JSON: at header byte 5: expected ':' after the key 'a'"},
    {"bad_json_missing_comma", "{\"a\":" F32_2x3 " \"b\":" F32_2x3 "}", 24, NULL, 0,
     "expected ',' or '}' between the entries of the header"},
    {"bad_json_trailing_comma", "{\"a\":" F32_2x3 ",}", 24, NULL, 0,
     "not valid JSON: at header byte 57: expected a string, found a character"},
    {"bad_json_unterminated_string", "{\"a\":{\"dtype\":\"F3", 0, NULL, 0, "unterminated string"},
    {"bad_json_unclosed_object", "{\"a\":" F32_2x3, 24, NULL, 0,
     "expected ',' or '}' between the entries of the header, found the end of the header"},
    {"bad_json_invalid_utf8", "{\"a\xff\":" F32_2x3 "}", 24, NULL, 0, "invalid UTF-8"},
    {"bad_json_overlong_utf8", "{\"\xc0\xaf\":" F32_2x3 "}", 24, NULL, 0, "invalid UTF-8"},
    {"bad_json_encoded_surrogate", "{\"\xed\xa0\x80\":" F32_2x3 "}", 24, NULL, 0,
     "invalid UTF-8"},
    {"bad_json_control_char", "{\"a\tb\":" F32_2x3 "}", 24, NULL, 0, "control character 0x09"},
    {"bad_json_bad_escape", "{\"a\\qb\":" F32_2x3 "}", 24, NULL, 0, "invalid escape '\\q'"},
    {"bad_json_short_unicode_escape", "{\"a\\u12\":" F32_2x3 "}", 24, NULL, 0,
     "four hexadecimal digits"},
    {"bad_json_lone_low_surrogate", "{\"\\udc00\":" F32_2x3 "}", 24, NULL, 0,
     "lone low surrogate"},
    {"bad_json_lone_high_surrogate", "{\"\\ud800x\":" F32_2x3 "}", 24, NULL, 0,
     "must be followed by a \\u low surrogate"},
    {"bad_json_nul_escape", "{\"a\\u0000b\":" F32_2x3 "}", 24, NULL, 0, "NUL character"},
    {"bad_json_bad_literal_in_shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[tru],"
                                      "\"data_offsets\":[0,0]}}",
     0, NULL, 0, "'shape' must be an array of integers, found a boolean in it"},
    {"bad_json_malformed_number", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-],"
                                  "\"data_offsets\":[0,0]}}",
     0, NULL, 0, "malformed number"},
    {"bad_json_number_leading_zero", "{\"a\":{\"dtype\":\"F32\",\"shape\":[02],"
                                     "\"data_offsets\":[0,8]}}",
     8, NULL, 0, "expected ',' or ']' in the 'shape' of tensor 'a'"},
    {"garbage_after_object", "{\"a\":" F32_2x3 "} x", 24, NULL, 0,
     "unexpected bytes after the JSON object"},
    {"nul_padding", "{\"a\":" F32_2x3 "}\0\0", 24, NULL, 0, "unexpected bytes after"},
    {"entry_not_object", "{\"a\":5}", 0, NULL, 0, "tensor 'a': expected an object"},
    {"unknown_dtype", "{\"q\":{\"dtype\":\"F33\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24,
     NULL, 0, "tensor 'q': unknown dtype 'F33'"},
    {"unsupported_dtype", "{\"q\":{\"dtype\":\"U64\",\"shape\":[3],\"data_offsets\":[0,24]}}",
     24, NULL, 0, "tensor 'q': dtype U64 is not supported"},
    {"dtype_not_string", "{\"q\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, NULL,
     0, "tensor 'q': dtype must be a string, found a number"},
    {"missing_key", "{\"q\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, NULL, 0,
     "tensor 'q': missing 'data_offsets'"},
    {"unknown_key", "{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
                    "\"foo\":1}}",
     8, NULL, 0, "tensor 'q': unknown key 'foo'"},
    {"repeated_key", "{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"shape\":[2],"
                     "\"data_offsets\":[0,8]}}",
     8, NULL, 0, "tensor 'q': key 'shape' appears twice"},
    {"shape_not_array", "{\"q\":{\"dtype\":\"F32\",\"shape\":6,\"data_offsets\":[0,24]}}", 24,
     NULL, 0, "'shape' must be an array of integers, found a number"},
    {"shape_negative", "{\"q\":{\"dtype\":\"F32\",\"shape\":[-1,3],\"data_offsets\":[0,12]}}", 12,
     NULL, 0, "'shape' entry -1 is not a non-negative integer"},
    {"shape_fraction", "{\"q\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}", 10,
     NULL, 0, "'shape' entry 2.5 is not a non-negative integer"},
    {"shape_exponent", "{\"q\":{\"dtype\":\"F32\",\"shape\":[1e2],\"data_offsets\":[0,400]}}",
     400, NULL, 0, "'shape' entry 1e2 is not a non-negative integer"},
    {"shape_number_too_big", "{\"q\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999999],"
                             "\"data_offsets\":[0,4]}}",
     4, NULL, 0, "is not a non-negative integer below 2^63"},
    {"shape_too_many_dims", "{\"q\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                            "\"data_offsets\":[0,4]}}",
     4, NULL, 0, "shape has more than 8 dimensions"},
    {"shape_overflow", "{\"q\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                       "\"data_offsets\":[0,0]}}",
     0, NULL, 0,
     "tensor 'q': shape (4294967296, 4294967296, 4294967296) of F32 is too large (its byte "
     "count overflows 64 bits)"},
    /* 2^32 · 2^32 wraps to 0 in 64-bit arithmetic: a naive product would accept [0, 0] */
    {"shape_wraps_to_zero", "{\"q\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                            "\"data_offsets\":[0,0]}}",
     0, NULL, 0, "overflows 64 bits"},
    /* numel fits in int64 but numel · 8 bytes does not */
    {"byte_count_overflow", "{\"q\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],"
                            "\"data_offsets\":[0,0]}}",
     0, NULL, 0, "overflows 64 bits"},
    {"offsets_out_of_range", "{\"q\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                             "\"data_offsets\":[0,100]}}",
     24, NULL, 0,
     "tensor 'q': data_offsets [0, 100] reach past the end of the 24-byte data buffer"},
    {"offsets_huge", "{\"q\":{\"dtype\":\"F32\",\"shape\":[2],"
                     "\"data_offsets\":[9223372036854775800,9223372036854775807]}}",
     8, NULL, 0, "reach past the end"},
    {"offsets_reversed", "{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
     NULL, 0, "data_offsets [8, 0] are reversed"},
    {"offsets_three", "{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4,8]}}", 8,
     NULL, 0, "'data_offsets' must hold exactly 2 integers"},
    {"offsets_one", "{\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", 8, NULL, 0,
     "'data_offsets' must hold exactly 2 integers [begin, end], found 1"},
    {"shape_offset_mismatch", "{\"q\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                              "\"data_offsets\":[0,100]}}",
     100, NULL, 0,
     "tensor 'q': data_offsets [0, 100] do not match shape (2, 3) of F32 (24 bytes)"},
    {"overlapping_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
     24, NULL, 0, "tensors 'a' [0, 16] and 'b' [8, 24] overlap"},
    {"same_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}",
     8, NULL, 0, "overlap"},
    {"hole_between_tensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
     24, NULL, 0, "bytes [8, 16) of the data buffer belong to no tensor"},
    {"trailing_data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
     NULL, 0, "bytes [8, 12) of the data buffer belong to no tensor"},
    {"duplicate_names", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
     16, NULL, 0, "duplicate tensor name 'a'"},
    {"metadata_not_object", "{\"__metadata__\":[]}", 0, NULL, 0,
     "__metadata__ must be an object of string values, found an array"},
    {"metadata_value_not_string", "{\"__metadata__\":{\"epoch\":3}}", 0, NULL, 0,
     "__metadata__: the value of 'epoch' must be a string, found a number"},
    {"metadata_duplicate_key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, NULL, 0,
     "__metadata__: duplicate key 'k'"},
    {"metadata_twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, NULL, 0,
     "duplicate key '__metadata__'"},
};
#define N_BAD ((int)(sizeof bad_cases / sizeof bad_cases[0]))

static bytes build_case(const bad_case *c) {
    if (!c->header) {
        bytes f = {0};
        put(&f, c->raw, c->raw_len);
        return f;
    }
    return make_zero_file(c->header, c->data_len);
}

START_TEST(malformed_file_rejected) {
    const bad_case *c = &bad_cases[_i];
    /* headers with an embedded NUL (nul_padding) need their real length */
    bytes f;
    if (c->header && strcmp(c->name, "nul_padding") == 0) {
        size_t hl = strlen(c->header) + 2;
        f = (bytes){0};
        put_le(&f, hl, 8);
        put(&f, c->header, hl);
        for (size_t i = 0; i < c->data_len; i++) put_le(&f, 0, 1);
    } else {
        f = build_case(c);
    }
    char name[128];
    snprintf(name, sizeof name, "%s.safetensors", c->name);
    ttt_st_file *st = (ttt_st_file *)&f; /* must be reset to NULL */
    ttt_error err = {0};
    ttt_status s = read_exact(f.b, f.n, name, &st, &err);
    ck_assert_msg(s == TTT_ERR_FORMAT, "%s: expected a format error, got status %d (%s)", c->name,
                  s, err.msg);
    ck_assert_ptr_null(st);
    ck_assert_msg(strncmp(err.msg, name, strlen(name)) == 0 && err.msg[strlen(name)] == ':',
                  "%s: message does not start with the file name: %s", c->name, err.msg);
    ck_assert_msg(strstr(err.msg, c->phrase), "%s: message lacks \"%s\": %s", c->name, c->phrase,
                  err.msg);
    free(f.b);
}
END_TEST

/* The message the brief gives as the model for every rejection, word for word. */
START_TEST(shape_mismatch_message_exact) {
    bytes f = make_zero_file("{\"q\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                             "\"data_offsets\":[0,100]}}",
                             100);
    ttt_st_file *st = NULL;
    ttt_error err = {0};
    ck_assert_int_eq(read_exact(f.b, f.n, "x.safetensors", &st, &err), TTT_ERR_FORMAT);
    ck_assert_str_eq(err.msg, "x.safetensors: tensor 'q': data_offsets [0, 100] do not match "
                              "shape (2, 3) of F32 (24 bytes)");
    free(f.b);
}
END_TEST

/* Names from the file are shown cut and with control characters escaped. */
START_TEST(hostile_name_shown_safely) {
    char header[1024], longname[400];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    memcpy(longname, "\\u0001\\u001b[31m", 16); /* a terminal escape sequence */
    snprintf(header, sizeof header,
             "{\"%s\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,100]}}", longname);
    bytes f = make_zero_file(header, 100);
    ttt_st_file *st = NULL;
    ttt_error err = {0};
    ck_assert_int_eq(read_exact(f.b, f.n, "h.safetensors", &st, &err), TTT_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "'\\x01\\x1b[31mnnn") && strstr(err.msg, "n...'"), "%s",
                  err.msg);
    ck_assert_msg(strlen(err.msg) < 200, "message not cut: %s", err.msg);
    for (const char *p = err.msg; *p; p++) ck_assert_int_ge((unsigned char)*p, 0x20);
    free(f.b);
}
END_TEST

/* Every prefix of a valid file, and every single-byte change of it, is read without a crash or
 * an out-of-bounds read (ASan), and either succeeds or fails with a message naming the file. */
START_TEST(truncations_and_byte_flips_never_crash) {
    bytes data = {0};
    for (int i = 0; i < 3; i++) put_f64(&data, i + 0.5);
    for (int i = 0; i < 4; i++) put_le(&data, 0x3C00 + i, 2);
    for (int i = 0; i < 2; i++) put_f32(&data, (float)i);
    const char *header = "{\"__metadata__\":{\"k\":\"v\\u00e9\"},"
                         "\"d\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[0,24]},"
                         "\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[24,32]},"
                         "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[32,40]}}  ";
    bytes f = make_file(header, &data);
    ttt_st_file *st = NULL;
    ttt_error err = {0};
    ck_assert_msg(read_exact(f.b, f.n, "ok", &st, &err) == TTT_OK, "%s", err.msg);
    ttt_st_free(st);
    for (size_t len = 0; len < f.n; len++) {
        err.msg[0] = '\0';
        ttt_status s = read_exact(f.b, len, "cut", &st, &err);
        ck_assert_msg(s == TTT_ERR_FORMAT && st == NULL, "prefix %zu accepted", len);
        ck_assert_msg(strncmp(err.msg, "cut: ", 5) == 0, "prefix %zu: %s", len, err.msg);
    }
    static const unsigned char subst[] = {0x00, 0xFF, '"', '\\', '{', '}', '[', ']', ',', ':',
                                          '0',  '9',  '-', 'e',  ' ', 0x80, 0xC3};
    unsigned char *m = malloc(f.n);
    int accepted = 0, rejected = 0;
    for (size_t pos = 0; pos < f.n; pos++) {
        for (size_t k = 0; k < sizeof subst; k++) {
            memcpy(m, f.b, f.n);
            if (m[pos] == subst[k]) continue;
            m[pos] = subst[k];
            err.msg[0] = '\0';
            ttt_status s = read_exact(m, f.n, "flip", &st, &err);
            if (s == TTT_OK) {
                accepted++;
                /* an accepted file is fully formed: every tensor's floats are there */
                for (int i = 0; i < st->n; i++)
                    for (int64_t j = 0; j < ttt_st_numel(&st->t[i]); j++)
                        (void)st->t[i].data[j];
                ttt_st_free(st);
            } else {
                rejected++;
                ck_assert_ptr_null(st);
                ck_assert_msg(strncmp(err.msg, "flip: ", 6) == 0, "pos %zu: %s", pos, err.msg);
            }
        }
    }
    free(m);
    /* changes inside the data buffer and some inside names/metadata leave a valid file */
    ck_assert_int_gt(accepted, 0);
    ck_assert_int_gt(rejected, 0);
    free(f.b);
    free(data.b);
}
END_TEST

START_TEST(file_errors) {
    ttt_st_file *st = NULL;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_st_read("/nonexistent/x.safetensors", &st, &err), TTT_ERR_IO);
    ck_assert_msg(strstr(err.msg, "cannot open '/nonexistent/x.safetensors'"), "%s", err.msg);
    char *dir = tu_mkdtemp();
    ck_assert_int_eq(ttt_st_read(dir, &st, &err), TTT_ERR_IO);
    ck_assert_msg(strstr(err.msg, "not a regular file"), "%s", err.msg);
    /* through a real file: the size check uses the file's size */
    char path[512];
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    FILE *fp = fopen(path, "wb");
    fwrite(BADLEN8 "{}", 1, 10, fp);
    fclose(fp);
    ck_assert_int_eq(ttt_st_read(path, &st, &err), TTT_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, "exceeds the 2 bytes"), "%s", err.msg);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static Suite *safetensors_suite(void) {
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("io");
    tcase_add_test(tc, write_read_round_trip);
    tcase_add_test(tc, write_read_without_tensors_or_metadata);
    tcase_add_test(tc, writer_rejects_bad_tensors_and_keeps_old_file);
    tcase_add_test(tc, reads_f64_f16_bf16);
    tcase_add_test(tc, file_errors);
    suite_add_tcase(s, tc);
    TCase *tb = tcase_create("malformed");
    tcase_add_loop_test(tb, malformed_file_rejected, 0, N_BAD);
    tcase_add_test(tb, shape_mismatch_message_exact);
    tcase_add_test(tb, hostile_name_shown_safely);
    tcase_add_test(tb, truncations_and_byte_flips_never_crash);
    suite_add_tcase(s, tb);
    return s;
}

int main(void) { return tu_run(safetensors_suite()); }
