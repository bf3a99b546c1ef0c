/* .safetensors reader and writer (see safetensors.h for the format and the guarantees).
 *
 * Reading has three stages, and nothing is allocated in proportion to a number the file claims
 * before that number has been checked against the real size of the file:
 *   1. the header: its length against the file size, then a strict JSON parse driven by the
 *      schema (object of tensor entries + optional __metadata__), so there is no generic JSON
 *      tree and no value is ever skipped unchecked; strings are decoded into one pool whose size
 *      is bounded by the header length;
 *   2. the table: duplicate names, shape products (overflow-checked), offsets against the buffer,
 *      byte counts against shapes, and the tiling of the buffer (no overlap, no gap);
 *   3. the data: one float allocation (at most twice the file size, for F16), filled tensor by
 *      tensor in file order, converting from little-endian F32/F64/F16/BF16, and I32/I64 (whose
 *      exact values are kept beside, ttt_st_tensor.ints: offsets such as cu_seqlens). */
#include "safetensors.h"
#include "infile.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fault.h"
#include "results.h"
#include "strbuf.h"
#include "tensor.h"

/* ------------------------------------------------------------------------------------------ */
/* dtypes */

typedef struct dtype_info {
    const char *name;
    int size;      /* bytes per element */
    int supported; /* converted to float by this reader (integers also kept exact: ints) */
} dtype_info;

/* Every dtype of the safetensors specification; ttt converts the floating ones it needs. */
static const dtype_info dtypes[] = {
    {"F32", 4, 1},     {"F64", 8, 1},     {"F16", 2, 1},     {"BF16", 2, 1},
    {"BOOL", 1, 0},    {"U8", 1, 0},      {"I8", 1, 0},      {"I16", 2, 0},
    {"U16", 2, 0},     {"I32", 4, 1},     {"U32", 4, 0},     {"I64", 8, 1},
    {"U64", 8, 0},     {"F8_E4M3", 1, 0}, {"F8_E5M2", 1, 0}, {"F8_E8M0", 1, 0},
    {"C64", 8, 0},
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))
enum { DT_F32 = 0, DT_F64 = 1, DT_F16 = 2, DT_BF16 = 3, DT_I32 = 9, DT_I64 = 11 };
_Static_assert(DT_I32 < N_DTYPES && DT_I64 < N_DTYPES, "the integer dtypes' places in dtypes[]");

static int dtype_find(const char *s) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(dtypes[i].name, s) == 0) return i;
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Helpers for messages: names come from a possibly hostile file, so they are shown cut to a
 * readable length with control characters escaped. */

static const char *shown(const char *s, char *buf, size_t len) {
    size_t w = 0, i = 0;
    const size_t max_shown = 64;
    for (; s[i] && w + 5 < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= max_shown && (c & 0xC0) != 0x80) break; /* cut on a character boundary */
        if (c < 0x20 || c == 0x7F) {
            w += (size_t)snprintf(buf + w, len - w, "\\x%02x", c);
        } else {
            buf[w++] = (char)c;
        }
    }
    if (s[i] && w + 4 < len) {
        memcpy(buf + w, "...", 3);
        w += 3;
    }
    buf[w] = '\0';
    return buf;
}

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t w = 0;
    w += (size_t)snprintf(buf + w, len - w, "(");
    for (int i = 0; i < ndim && w < len; i++)
        w += (size_t)snprintf(buf + w, len - w, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (w < len) snprintf(buf + w, len - w, ")");
}

const char *ttt_st_shape_str(const ttt_st_tensor *t, char *buf, size_t len) {
    shape_str(buf, len, t->ndim, t->shape);
    return buf;
}

int64_t ttt_st_numel(const ttt_st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* "<file>: <message>" as TTT_ERR_FORMAT (or `s`). */
static ttt_status failv(ttt_error *err, ttt_status s, const char *file, const char *fmt,
                        va_list ap) {
    char msg[TTT_ERROR_MSG_LEN];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return ttt_error_set(err, s, "%s: %s", file, msg);
}
static ttt_status fail(ttt_error *err, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ttt_status fail(ttt_error *err, const char *file, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ttt_status s = failv(err, TTT_ERR_FORMAT, file, fmt, ap);
    va_end(ap);
    return s;
}

/* Length of the valid UTF-8 sequence at s (n bytes available), or 0 when it is not valid
 * (overlong forms, surrogates and code points above U+10FFFF are invalid, RFC 3629). */
static int utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    int len;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else return 0;
    if ((size_t)len > n || s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

static int utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        int l = utf8_seq(p + i, n - i);
        if (!l) return 0;
        i += (size_t)l;
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* The header parser: strict JSON (RFC 8259) for exactly the safetensors schema. */

typedef struct entry {
    char *name;      /* in the string pool */
    int dtype;       /* index into dtypes */
    int ndim;
    int64_t shape[TTT_ST_MAX_DIMS];
    uint64_t begin, end;
    uint64_t bytes;  /* numel × element size, set in stage 2 */
    int64_t numel;
} entry;

typedef struct parser {
    const unsigned char *s; /* the header */
    size_t n, i;            /* length, cursor */
    const char *file;
    ttt_error *err;
    char *pool;             /* decoded strings; capacity n + 1 suffices (each string's decoded
                             * bytes plus its NUL are fewer than its raw bytes with quotes) */
    size_t pool_used;
    entry *e;
    int n_e, cap_e;
    char **meta;            /* key, value, key, value … in the pool */
    int n_meta, cap_meta;
    int seen_meta;
} parser;

static void ws(parser *p) {
    while (p->i < p->n) {
        unsigned char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}

/* What the next value looks like, for "expected X, found Y" messages. */
static const char *found(const parser *p) {
    if (p->i >= p->n) return "the end of the header";
    switch (p->s[p->i]) {
    case '{': return "an object";
    case '[': return "an array";
    case '"': return "a string";
    case 't': case 'f': return "a boolean";
    case 'n': return "null";
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9': return "a number";
    default: return "a character that starts no JSON value";
    }
}

static ttt_status syntax(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ttt_status syntax(parser *p, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fail(p->err, p->file, "header is not valid JSON: at header byte %zu: %s", p->i, msg);
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static ttt_status hex4(parser *p, unsigned *out) {
    if (p->n - p->i < 4) return syntax(p, "truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p->s[p->i + k]);
        if (h < 0) return syntax(p, "\\u must be followed by four hexadecimal digits");
        v = v * 16 + (unsigned)h;
    }
    p->i += 4;
    *out = v;
    return TTT_OK;
}

/* A JSON string at the cursor, decoded into the pool (UTF-8, NUL-terminated, no inner NUL). */
static ttt_status jstring(parser *p, char **out) {
    if (p->i >= p->n || p->s[p->i] != '"')
        return syntax(p, "expected a string, found %s", found(p));
    p->i++;
    char *o = p->pool + p->pool_used, *w = o;
    for (;;) {
        if (p->i >= p->n) return syntax(p, "unterminated string");
        unsigned c = p->s[p->i];
        if (c == '"') {
            p->i++;
            break;
        }
        if (c < 0x20)
            return syntax(p, "control character 0x%02x inside a string (it must be escaped)", c);
        if (c != '\\') {
            int l = utf8_seq(p->s + p->i, p->n - p->i);
            if (!l) return syntax(p, "invalid UTF-8 inside a string");
            memcpy(w, p->s + p->i, (size_t)l);
            w += l;
            p->i += (size_t)l;
            continue;
        }
        if (p->i + 1 >= p->n) return syntax(p, "unterminated string");
        unsigned char e = p->s[p->i + 1];
        p->i += 2;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned cp;
            TTT_TRY(hex4(p, &cp));
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return syntax(p, "\\u%04X is a lone low surrogate", cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
                    return syntax(p, "\\u%04X (a high surrogate) must be followed by a \\u low "
                                     "surrogate", cp);
                p->i += 2;
                TTT_TRY(hex4(p, &lo));
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return syntax(p, "\\u%04X (a high surrogate) is followed by \\u%04X, not a "
                                     "low surrogate", cp, lo);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0) return syntax(p, "\\u0000 (a NUL character) is not allowed in strings");
            if (cp < 0x80) {
                *w++ = (char)cp;
            } else if (cp < 0x800) {
                *w++ = (char)(0xC0 | (cp >> 6));
                *w++ = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                *w++ = (char)(0xE0 | (cp >> 12));
                *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                *w++ = (char)(0x80 | (cp & 0x3F));
            } else {
                *w++ = (char)(0xF0 | (cp >> 18));
                *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
                *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                *w++ = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            return syntax(p, "invalid escape '\\%c' in a string", e >= 0x20 && e < 0x7F ? e : '?');
        }
    }
    *w++ = '\0';
    p->pool_used = (size_t)(w - p->pool);
    TTT_ASSERT(p->pool_used <= p->n + 1);
    *out = o;
    return TTT_OK;
}

/* A JSON number at the cursor. *is_int: it is a non-negative integer (no fraction, no exponent)
 * that fits in int64; then *u holds it. [*start, cursor) is its text. */
static ttt_status jnumber(parser *p, int *is_int, uint64_t *u, size_t *start) {
    *start = p->i;
    int neg = 0, overflow = 0, frac = 0;
    uint64_t v = 0;
    if (p->i < p->n && p->s[p->i] == '-') neg = 1, p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
        return syntax(p, "malformed number (a digit must follow '-')");
    if (p->s[p->i] == '0') {
        p->i++;
    } else {
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            unsigned d = p->s[p->i] - '0';
            if (v > ((uint64_t)INT64_MAX - d) / 10) overflow = 1;
            else v = v * 10 + d;
            p->i++;
        }
    }
    if (p->i < p->n && p->s[p->i] == '.') {
        frac = 1;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return syntax(p, "malformed number (a digit must follow '.')");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        frac = 1;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return syntax(p, "malformed number (a digit must follow the exponent)");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    *is_int = !frac && !overflow && (!neg || v == 0);
    *u = v;
    return TTT_OK;
}

/* After a member of an object or an element of an array: ',' (another follows) or the closer.
 * Returns 1 for more, 0 for the end, -1 on error. */
static int more(parser *p, char closer, const char *where) {
    ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
        p->i++;
        ws(p);
        return 1;
    }
    if (p->i < p->n && p->s[p->i] == (unsigned char)closer) {
        p->i++;
        return 0;
    }
    syntax(p, "expected ',' or '%c' %s, found %s", closer, where, found(p));
    return -1;
}

static ttt_status colon(parser *p, const char *key) {
    char b[96];
    ws(p);
    if (p->i >= p->n || p->s[p->i] != ':')
        return syntax(p, "expected ':' after the key '%s'", shown(key, b, sizeof b));
    p->i++;
    ws(p);
    return TTT_OK;
}

/* An array of at most `max` non-negative integers ("shape" or "data_offsets" of tensor `nm`). */
static ttt_status int_array(parser *p, const char *nm, const char *key, int max, int64_t *out,
                            int *count) {
    char b[96];
    if (p->i >= p->n || p->s[p->i] != '[')
        return fail(p->err, p->file, "tensor '%s': '%s' must be an array of integers, found %s",
                    shown(nm, b, sizeof b), key, found(p));
    p->i++;
    ws(p);
    *count = 0;
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
        return TTT_OK;
    }
    for (;;) {
        const char *f = found(p);
        if (strcmp(f, "a number") != 0)
            return fail(p->err, p->file,
                        "tensor '%s': '%s' must be an array of integers, found %s in it",
                        shown(nm, b, sizeof b), key, f);
        int is_int = 0;
        uint64_t u = 0;
        size_t st = 0;
        TTT_TRY(jnumber(p, &is_int, &u, &st));
        if (!is_int)
            return fail(p->err, p->file,
                        "tensor '%s': '%s' entry %.*s is not a non-negative integer below 2^63",
                        shown(nm, b, sizeof b), key, (int)(p->i - st > 40 ? 40 : p->i - st),
                        (const char *)p->s + st);
        if (*count == max) {
            if (strcmp(key, "shape") == 0)
                return fail(p->err, p->file,
                            "tensor '%s': shape has more than %d dimensions, the most ttt reads",
                            shown(nm, b, sizeof b), max);
            return fail(p->err, p->file, "tensor '%s': '%s' must hold exactly %d integers",
                        shown(nm, b, sizeof b), key, max);
        }
        out[(*count)++] = (int64_t)u;
        char where[160];
        snprintf(where, sizeof where, "in the '%s' of tensor '%s'", key, shown(nm, b, sizeof b));
        int m = more(p, ']', where);
        if (m < 0) return TTT_ERR_FORMAT;
        if (m == 0) return TTT_OK;
    }
}

static ttt_status tensor_entry(parser *p, char *name) {
    char b[96], b2[96];
    /* A tensor is looked up, listed and written back by its name: "" names nothing. */
    if (!*name)
        return fail(p->err, p->file,
                    "a tensor has an empty name (\"\") before header byte %zu; expected a "
                    "non-empty name",
                    p->i);
    if (p->i >= p->n || p->s[p->i] != '{')
        return fail(p->err, p->file,
                    "tensor '%s': expected an object {\"dtype\": ..., \"shape\": ..., "
                    "\"data_offsets\": ...}, found %s",
                    shown(name, b, sizeof b), found(p));
    p->i++;
    if (p->n_e == p->cap_e) {
        int cap = p->cap_e ? 2 * p->cap_e : 16;
        entry *e = ttt_fault_realloc(p->e, (size_t)cap * sizeof *e);
        if (!e) return ttt_error_set(p->err, TTT_ERR_NOMEM, "%s: out of memory", p->file);
        p->e = e;
        p->cap_e = cap;
    }
    entry *E = &p->e[p->n_e++];
    memset(E, 0, sizeof *E);
    E->name = name;
    E->dtype = -1;
    int seen_dtype = 0, seen_shape = 0, seen_offsets = 0;
    ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
    } else {
        for (;;) {
            char *key;
            TTT_TRY(jstring(p, &key));
            TTT_TRY(colon(p, key));
            int *seen = strcmp(key, "dtype") == 0          ? &seen_dtype
                        : strcmp(key, "shape") == 0        ? &seen_shape
                        : strcmp(key, "data_offsets") == 0 ? &seen_offsets
                                                           : NULL;
            if (!seen)
                return fail(p->err, p->file,
                            "tensor '%s': unknown key '%s' (an entry has exactly dtype, shape "
                            "and data_offsets)",
                            shown(name, b, sizeof b), shown(key, b2, sizeof b2));
            if (*seen)
                return fail(p->err, p->file, "tensor '%s': key '%s' appears twice",
                            shown(name, b, sizeof b), key);
            *seen = 1;
            if (seen == &seen_dtype) {
                if (p->i >= p->n || p->s[p->i] != '"')
                    return fail(p->err, p->file, "tensor '%s': dtype must be a string, found %s",
                                shown(name, b, sizeof b), found(p));
                char *dt;
                TTT_TRY(jstring(p, &dt));
                E->dtype = dtype_find(dt);
                if (E->dtype < 0)
                    return fail(p->err, p->file,
                                "tensor '%s': unknown dtype '%s' (ttt reads F32, F64, F16, "
                                "BF16, I32, I64)",
                                shown(name, b, sizeof b), shown(dt, b2, sizeof b2));
                if (!dtypes[E->dtype].supported)
                    return fail(p->err, p->file,
                                "tensor '%s': dtype %s is not supported (ttt reads F32, F64, F16, "
                                "BF16, I32, I64)",
                                shown(name, b, sizeof b), dt);
            } else if (seen == &seen_shape) {
                TTT_TRY(int_array(p, name, "shape", TTT_ST_MAX_DIMS, E->shape, &E->ndim));
            } else {
                int64_t off[2];
                int c;
                TTT_TRY(int_array(p, name, "data_offsets", 2, off, &c));
                if (c != 2)
                    return fail(p->err, p->file,
                                "tensor '%s': 'data_offsets' must hold exactly 2 integers "
                                "[begin, end], found %d",
                                shown(name, b, sizeof b), c);
                E->begin = (uint64_t)off[0];
                E->end = (uint64_t)off[1];
            }
            char where[160];
            snprintf(where, sizeof where, "in the entry of tensor '%s'", shown(name, b, sizeof b));
            int m = more(p, '}', where);
            if (m < 0) return TTT_ERR_FORMAT;
            if (m == 0) break;
        }
    }
    const char *missing = !seen_dtype ? "dtype" : !seen_shape ? "shape"
                          : !seen_offsets ? "data_offsets" : NULL;
    if (missing)
        return fail(p->err, p->file, "tensor '%s': missing '%s'", shown(name, b, sizeof b),
                    missing);
    return TTT_OK;
}

static ttt_status metadata(parser *p) {
    char b[96];
    if (p->seen_meta) return fail(p->err, p->file, "duplicate key '__metadata__'");
    p->seen_meta = 1;
    if (p->i >= p->n || p->s[p->i] != '{')
        return fail(p->err, p->file,
                    "__metadata__ must be an object of string values, found %s", found(p));
    p->i++;
    ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
        return TTT_OK;
    }
    for (;;) {
        char *key, *val;
        TTT_TRY(jstring(p, &key));
        TTT_TRY(colon(p, key));
        if (p->i >= p->n || p->s[p->i] != '"')
            return fail(p->err, p->file,
                        "__metadata__: the value of '%s' must be a string, found %s",
                        shown(key, b, sizeof b), found(p));
        TTT_TRY(jstring(p, &val));
        for (int i = 0; i < p->n_meta; i++)
            if (strcmp(p->meta[2 * i], key) == 0)
                return fail(p->err, p->file, "__metadata__: duplicate key '%s'",
                            shown(key, b, sizeof b));
        if (p->n_meta == p->cap_meta) {
            int cap = p->cap_meta ? 2 * p->cap_meta : 8;
            char **m = ttt_fault_realloc(p->meta, (size_t)cap * 2 * sizeof *m);
            if (!m) return ttt_error_set(p->err, TTT_ERR_NOMEM, "%s: out of memory", p->file);
            p->meta = m;
            p->cap_meta = cap;
        }
        p->meta[2 * p->n_meta] = key;
        p->meta[2 * p->n_meta + 1] = val;
        p->n_meta++;
        int m = more(p, '}', "in __metadata__");
        if (m < 0) return TTT_ERR_FORMAT;
        if (m == 0) return TTT_OK;
    }
}

static ttt_status parse_header(parser *p) {
    ws(p);
    if (p->i >= p->n || p->s[p->i] != '{')
        return fail(p->err, p->file, "the header must be a JSON object, found %s", found(p));
    p->i++;
    ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
    } else {
        for (;;) {
            char *key;
            TTT_TRY(jstring(p, &key));
            TTT_TRY(colon(p, key));
            if (strcmp(key, "__metadata__") == 0) TTT_TRY(metadata(p));
            else TTT_TRY(tensor_entry(p, key));
            int m = more(p, '}', "between the entries of the header");
            if (m < 0) return TTT_ERR_FORMAT;
            if (m == 0) break;
        }
    }
    /* The padding: spaces only (the format pads the header with 0x20 to its aligned length;
     * JSON's other whitespace is allowed between tokens, not here). */
    while (p->i < p->n && p->s[p->i] == ' ') p->i++;
    if (p->i < p->n)
        return fail(p->err, p->file,
                    "unexpected bytes after the JSON object at header byte %zu (the header may "
                    "only be padded with spaces)",
                    p->i);
    return TTT_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Stage 2: the table */

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const entry *const *)a)->name, (*(const entry *const *)b)->name);
}
static int cmp_offsets(const void *a, const void *b) {
    const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* `order` receives the entries sorted by offset (the order the data is read in). */
static ttt_status check_table(parser *p, uint64_t buf_len, entry **order) {
    char b[96], b2[96], sh[300];
    for (int i = 0; i < p->n_e; i++) order[i] = &p->e[i];
    qsort(order, (size_t)p->n_e, sizeof *order, cmp_name);
    for (int i = 1; i < p->n_e; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0)
            return fail(p->err, p->file, "duplicate tensor name '%s'",
                        shown(order[i]->name, b, sizeof b));

    for (int i = 0; i < p->n_e; i++) {
        entry *E = &p->e[i];
        const dtype_info *dt = &dtypes[E->dtype];
        shape_str(sh, sizeof sh, E->ndim, E->shape);
        /* numel = Π shape, with an explicit 0 winning over any overflow of the other factors */
        int64_t numel = 1;
        int zero = 0, overflow = 0;
        for (int d = 0; d < E->ndim; d++) zero |= E->shape[d] == 0;
        if (!zero)
            for (int d = 0; d < E->ndim; d++) {
                if (numel > INT64_MAX / E->shape[d]) {
                    overflow = 1;
                    break;
                }
                numel *= E->shape[d];
            }
        if (zero) numel = 0;
        if (overflow || numel > INT64_MAX / dt->size)
            return fail(p->err, p->file,
                        "tensor '%s': shape %s of %s is too large (its byte count overflows 64 "
                        "bits)",
                        shown(E->name, b, sizeof b), sh, dt->name);
        E->numel = numel;
        E->bytes = (uint64_t)numel * (uint64_t)dt->size;
        if (E->begin > E->end)
            return fail(p->err, p->file,
                        "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] are reversed "
                        "(begin > end)",
                        shown(E->name, b, sizeof b), E->begin, E->end);
        if (E->end > buf_len)
            return fail(p->err, p->file,
                        "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] reach past the end "
                        "of the %" PRIu64 "-byte data buffer",
                        shown(E->name, b, sizeof b), E->begin, E->end, buf_len);
        if (E->end - E->begin != E->bytes)
            return fail(p->err, p->file,
                        "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] do not match shape "
                        "%s of %s (%" PRIu64 " bytes)",
                        shown(E->name, b, sizeof b), E->begin, E->end, sh, dt->name, E->bytes);
    }

    /* The tensors must tile the buffer: sorted by offset, each begins where the last ended. */
    qsort(order, (size_t)p->n_e, sizeof *order, cmp_offsets);
    uint64_t cursor = 0;
    const entry *prev = NULL;
    for (int i = 0; i < p->n_e; i++) {
        const entry *E = order[i];
        if (E->begin < cursor)
            return fail(p->err, p->file,
                        "tensors '%s' [%" PRIu64 ", %" PRIu64 "] and '%s' [%" PRIu64 ", %" PRIu64
                        "] overlap in the data buffer",
                        shown(prev->name, b, sizeof b), prev->begin, prev->end,
                        shown(E->name, b2, sizeof b2), E->begin, E->end);
        if (E->begin > cursor)
            return fail(p->err, p->file,
                        "bytes [%" PRIu64 ", %" PRIu64 ") of the data buffer belong to no tensor "
                        "(the format forbids holes)",
                        cursor, E->begin);
        cursor = E->end;
        prev = E;
    }
    if (cursor != buf_len)
        return fail(p->err, p->file,
                    "bytes [%" PRIu64 ", %" PRIu64 ") of the data buffer belong to no tensor "
                    "(the format forbids trailing data)",
                    cursor, buf_len);
    return TTT_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Byte sources: a file or memory, read at absolute offsets. */

typedef struct source {
    FILE *f;
    const unsigned char *mem;
    uint64_t len;
} source;

static int src_read(const source *s, uint64_t off, void *buf, size_t n) {
    if (off > s->len || n > s->len - off) return -1;
    if (s->mem) {
        memcpy(buf, s->mem + off, n);
        return 0;
    }
    if (fseeko(s->f, (off_t)off, SEEK_SET) != 0) return -1;
    return fread(buf, 1, n, s->f) == n ? 0 : -1;
}

static float f16_to_float(uint16_t h) {
    unsigned e = (h >> 10) & 0x1F, m = h & 0x3FF;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);                      /* zero, subnormal */
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 0x400), (int)e - 25);           /* (1024 + m)·2^(e−25) */
    return (h & 0x8000) ? -v : v;
}

/* Element i of an integer dtype (I32, I64) at `raw`, little-endian. */
static int64_t int_at(const unsigned char *raw, size_t i, int dt) {
    const int w = dt == DT_I32 ? 4 : 8;
    uint64_t u = 0;
    for (int k = w - 1; k >= 0; k--) u = u << 8 | raw[w * i + (size_t)k];
    if (dt == DT_I32) return (int64_t)(int32_t)(uint32_t)u;
    int64_t v;
    memcpy(&v, &u, 8);
    return v;
}

/* Convert n little-endian elements of dtype dt at `raw` into out. */
static void convert(float *out, const unsigned char *raw, size_t n, int dt) {
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case DT_I32:
        case DT_I64: out[i] = (float)int_at(raw, i, dt); break;
        case DT_F32: {
            const unsigned char *r = raw + 4 * i;
            uint32_t u = (uint32_t)r[0] | (uint32_t)r[1] << 8 | (uint32_t)r[2] << 16 |
                         (uint32_t)r[3] << 24;
            memcpy(&out[i], &u, 4);
            break;
        }
        case DT_F64: {
            const unsigned char *r = raw + 8 * i;
            uint64_t u = 0;
            for (int k = 7; k >= 0; k--) u = u << 8 | r[k];
            double d;
            memcpy(&d, &u, 8);
            out[i] = (float)d;
            break;
        }
        case DT_F16:
            out[i] = f16_to_float((uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8));
            break;
        default: { /* BF16: the upper half of an F32 */
            uint32_t u = (uint32_t)(raw[2 * i] | raw[2 * i + 1] << 8) << 16;
            memcpy(&out[i], &u, 4);
            break;
        }
        }
    }
}

/* Read one tensor's bytes at `off` and convert them into out. F32 is read straight into the
 * output and converted in place (same size); the others go through a bounded scratch buffer. */
static int read_tensor(const source *s, uint64_t off, const entry *E, float *out,
                       int64_t *ints, unsigned char *scratch, size_t scratch_len) {
    if (E->dtype == DT_F32) {
        if (src_read(s, off, out, E->bytes)) return -1;
        convert(out, (const unsigned char *)out, (size_t)E->numel, DT_F32);
        return 0;
    }
    const size_t esz = (size_t)dtypes[E->dtype].size, per = scratch_len / esz;
    for (int64_t i = 0; i < E->numel; i += (int64_t)per) {
        size_t cnt = (size_t)(E->numel - i) < per ? (size_t)(E->numel - i) : per;
        if (src_read(s, off + (uint64_t)i * esz, scratch, cnt * esz)) return -1;
        convert(out + i, scratch, cnt, E->dtype);
        for (size_t j = 0; ints && j < cnt; j++)
            ints[i + (int64_t)j] = int_at(scratch, j, E->dtype);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */

void ttt_st_free(ttt_st_file *f) {
    if (!f) return;
    free(f->path);
    free(f->t);
    free(f->meta_key);
    free(f->meta_val);
    free(f->pool_);
    free(f->data_);
    free(f->ints_);
    free(f);
}

static ttt_status read_source(const source *s, const char *name, ttt_st_file **out,
                              ttt_error *err) {
    *out = NULL;
    unsigned char len8[8];
    if (s->len < 8)
        return fail(err, name, "file is %" PRIu64 " bytes, too short for the 8-byte header length",
                    s->len);
    if (src_read(s, 0, len8, 8))
        return ttt_error_set(err, TTT_ERR_IO, "%s: cannot read the header length", name);
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | len8[k];
    if (hlen > s->len - 8)
        return fail(err, name,
                    "header length %" PRIu64 " exceeds the %" PRIu64 " bytes that follow it "
                    "(truncated or not a safetensors file)",
                    hlen, s->len - 8);
    if (hlen > TTT_ST_MAX_HEADER)
        return fail(err, name, "header length %" PRIu64 " is above the limit of %u bytes", hlen,
                    TTT_ST_MAX_HEADER);
    if (hlen < 2)
        return fail(err, name, "header length %" PRIu64 " is too short for a JSON object", hlen);
    const uint64_t buf_off = 8 + hlen, buf_len = s->len - buf_off;

    ttt_status st = TTT_OK;
    parser p = {.n = (size_t)hlen, .file = name, .err = err};
    unsigned char *hdr = ttt_fault_malloc((size_t)hlen);
    p.pool = ttt_fault_malloc((size_t)hlen + 1);
    entry **order = NULL;
    ttt_st_file *f = NULL;
    float *data = NULL;
    int64_t *ints = NULL;
    unsigned char *scratch = NULL;
    if (!hdr || !p.pool) {
        st = ttt_error_set(err, TTT_ERR_NOMEM, "%s: out of memory for the header", name);
        goto done;
    }
    if (src_read(s, 8, hdr, (size_t)hlen)) {
        st = ttt_error_set(err, TTT_ERR_IO, "%s: cannot read the header", name);
        goto done;
    }
    p.s = hdr;
    if ((st = parse_header(&p)) != TTT_OK) goto done;
    order = ttt_fault_malloc(((size_t)p.n_e + 1) * sizeof *order);
    if (!order) {
        st = ttt_error_set(err, TTT_ERR_NOMEM, "%s: out of memory", name);
        goto done;
    }
    if ((st = check_table(&p, buf_len, order)) != TTT_OK) goto done;

    /* Σ numel ≤ buf_len / 2 (the smallest element is 2 bytes), so this is at most twice the
     * file size; check it against the machine anyway rather than abort in malloc. */
    uint64_t total = 0;
    uint64_t total_ints = 0; /* elements of I32 and I64 tensors, also kept exact */
    for (int i = 0; i < p.n_e; i++) {
        total += (uint64_t)p.e[i].numel;
        if (p.e[i].dtype == DT_I32 || p.e[i].dtype == DT_I64) total_ints += (uint64_t)p.e[i].numel;
    }
    char what[128];
    snprintf(what, sizeof what, "reading %s", name);
    if ((st = ttt_size_check((double)total * sizeof(float) + (double)total_ints * sizeof(int64_t),
                             what, err)) != TTT_OK)
        goto done;
    f = ttt_fault_calloc(1, sizeof *f);
    if (f) {
        f->path = ttt_fault_malloc(strlen(name) + 1);
        f->t = ttt_fault_calloc((size_t)p.n_e + 1, sizeof *f->t);
        f->meta_key = ttt_fault_calloc((size_t)p.n_meta + 1, sizeof *f->meta_key);
        f->meta_val = ttt_fault_calloc((size_t)p.n_meta + 1, sizeof *f->meta_val);
    }
    data = total ? ttt_fault_malloc((size_t)total * sizeof(float)) : NULL;
    ints = total_ints ? ttt_fault_malloc((size_t)total_ints * sizeof(int64_t)) : NULL;
    scratch = ttt_fault_malloc(1 << 16);
    if (!f || !f->path || !f->t || !f->meta_key || !f->meta_val || (total && !data) ||
        (total_ints && !ints) || !scratch) {
        st = ttt_error_set(err, TTT_ERR_NOMEM, "%s: out of memory for %" PRIu64 " floats", name,
                           total);
        goto done;
    }
    strcpy(f->path, name);
    /* Tensors in header order, their floats laid out in offset order (the order they are read). */
    size_t at = 0, at_int = 0;
    for (int i = 0; i < p.n_e; i++) {
        const entry *E = order[i];
        ttt_st_tensor *T = &f->t[E - p.e];
        T->data = E->numel ? data + at : NULL;
        at += (size_t)E->numel;
        T->ints = NULL;
        if (E->numel && (E->dtype == DT_I32 || E->dtype == DT_I64)) {
            T->ints = ints + at_int;
            at_int += (size_t)E->numel;
        }
        if (E->numel && read_tensor(s, buf_off + E->begin, E, T->data, T->ints, scratch, 1 << 16)) {
            char b[96];
            st = ttt_error_set(err, TTT_ERR_IO,
                               "%s: cannot read the data of tensor '%s' (the file changed or a "
                               "read failed)",
                               name, shown(E->name, b, sizeof b));
            goto done;
        }
    }
    for (int i = 0; i < p.n_e; i++) {
        const entry *E = &p.e[i];
        ttt_st_tensor *T = &f->t[i];
        T->name = E->name;
        T->ndim = E->ndim;
        memcpy(T->shape, E->shape, sizeof T->shape);
        snprintf(T->dtype, sizeof T->dtype, "%s", dtypes[E->dtype].name);
    }
    f->n = p.n_e;
    f->n_meta = p.n_meta;
    for (int i = 0; i < p.n_meta; i++) {
        f->meta_key[i] = p.meta[2 * i];
        f->meta_val[i] = p.meta[2 * i + 1];
    }
    f->pool_ = p.pool;
    f->data_ = data;
    f->ints_ = ints;
    p.pool = NULL;
    data = NULL;
    ints = NULL;
    *out = f;
    f = NULL;
done:
    free(hdr);
    free(p.pool);
    free(p.e);
    free(p.meta);
    free(order);
    free(data);
    free(ints);
    free(scratch);
    ttt_st_free(f);
    return st;
}

ttt_status ttt_st_read_mem(const void *bytes, size_t len, const char *name, ttt_st_file **out,
                           ttt_error *err) {
    source s = {.mem = bytes, .len = len};
    if (!bytes) s.len = 0;
    return read_source(&s, name ? name : "<memory>", out, err);
}

ttt_status ttt_st_read(const char *path, ttt_st_file **out, ttt_error *err) {
    *out = NULL;
    /* never fopen: a FIFO in the file's place would block the read forever (infile.h) */
    const char *kind = "";
    FILE *fp = ttt_open_regular(path, &kind);
    if (!fp && kind[0])
        return ttt_error_set(err, TTT_ERR_IO,
                             "cannot read '%s': not a regular file, it is %s (expected a "
                             ".safetensors file)", path, kind);
    if (!fp)
        return ttt_error_set(err, TTT_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(fp);
        return ttt_error_set(err, TTT_ERR_IO, "cannot read '%s': not a regular file", path);
    }
    source s = {.f = fp, .len = (uint64_t)sb.st_size};
    ttt_status st = read_source(&s, path, out, err);
    fclose(fp);
    return st;
}

const ttt_st_tensor *ttt_st_find(const ttt_st_file *f, const char *name) {
    for (int i = 0; f && i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const char *ttt_st_meta(const ttt_st_file *f, const char *key) {
    for (int i = 0; f && i < f->n_meta; i++)
        if (strcmp(f->meta_key[i], key) == 0) return f->meta_val[i];
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Writer */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Duplicate check over n strings (sorted copy); returns the repeated one or NULL. */
static const char *find_duplicate(const char **v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    for (int i = 1; i < n; i++)
        if (strcmp(v[i - 1], v[i]) == 0) return v[i];
    return NULL;
}

static ttt_status werr(ttt_error *err, ttt_status s, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ttt_status werr(ttt_error *err, ttt_status s, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[TTT_ERROR_MSG_LEN];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ttt_error_set(err, s, "cannot write '%s': %s", path, msg);
}

ttt_status ttt_st_write(const char *path, const ttt_st_tensor *ts, int n,
                        const char *const *meta_kv, int n_meta, ttt_error *err) {
    char b[96];
    if (n < 0 || n_meta < 0 || (n > 0 && !ts) || (n_meta > 0 && !meta_kv))
        return werr(err, TTT_ERR_ARG, path, "bad tensor or metadata list");
    /* validate everything before touching the disk */
    for (int i = 0; i < n; i++) {
        const ttt_st_tensor *t = &ts[i];
        if (!t->name || !*t->name)
            return werr(err, TTT_ERR_ARG, path, "tensor %d has no name", i);
        if (strcmp(t->name, "__metadata__") == 0)
            return werr(err, TTT_ERR_ARG, path, "'__metadata__' is reserved, not a tensor name");
        if (!utf8_valid(t->name))
            return werr(err, TTT_ERR_ARG, path, "tensor name '%s' is not valid UTF-8",
                        shown(t->name, b, sizeof b));
        if (t->ndim < 0 || t->ndim > TTT_ST_MAX_DIMS)
            return werr(err, TTT_ERR_ARG, path, "tensor '%s' has %d dimensions (0 to %d allowed)",
                        shown(t->name, b, sizeof b), t->ndim, TTT_ST_MAX_DIMS);
        int64_t numel = 1;
        int zero = 0;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0)
                return werr(err, TTT_ERR_ARG, path, "tensor '%s' has a negative dimension",
                            shown(t->name, b, sizeof b));
            zero |= t->shape[d] == 0;
        }
        for (int d = 0; d < t->ndim && !zero; d++) {
            if (numel > INT64_MAX / 4 / t->shape[d])
                return werr(err, TTT_ERR_ARG, path, "tensor '%s' is too large",
                            shown(t->name, b, sizeof b));
            numel *= t->shape[d];
        }
        if (!zero && numel > 0 && !t->data)
            return werr(err, TTT_ERR_ARG, path, "tensor '%s' has no data",
                        shown(t->name, b, sizeof b));
    }
    for (int i = 0; i < 2 * n_meta; i++) {
        if (!meta_kv[i])
            return werr(err, TTT_ERR_ARG, path, "metadata %s %d is NULL", i % 2 ? "value" : "key",
                        i / 2);
        if (!utf8_valid(meta_kv[i]))
            return werr(err, TTT_ERR_ARG, path, "metadata '%s' is not valid UTF-8",
                        shown(meta_kv[i], b, sizeof b));
    }
    int nn = n > n_meta ? n : n_meta;
    const char **names = ttt_fault_malloc(((size_t)nn + 1) * sizeof *names);
    if (!names) return werr(err, TTT_ERR_NOMEM, path, "out of memory");
    for (int i = 0; i < n; i++) names[i] = ts[i].name;
    const char *dup = find_duplicate(names, n);
    if (!dup) {
        for (int i = 0; i < n_meta; i++) names[i] = meta_kv[2 * i];
        const char *dk = find_duplicate(names, n_meta);
        if (dk) {
            ttt_status s = werr(err, TTT_ERR_ARG, path, "metadata key '%s' is given twice",
                                shown(dk, b, sizeof b));
            free(names);
            return s;
        }
    } else {
        ttt_status s = werr(err, TTT_ERR_ARG, path, "tensor name '%s' is given twice",
                            shown(dup, b, sizeof b));
        free(names);
        return s;
    }
    free(names);

    /* the header, in the order given */
    ttt_strbuf h;
    ttt_strbuf_init(&h);
    ttt_strbuf_puts(&h, "{");
    if (n_meta > 0) {
        ttt_strbuf_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) ttt_strbuf_puts(&h, ",");
            ttt_strbuf_put_json(&h, meta_kv[2 * i]);
            ttt_strbuf_puts(&h, ":");
            ttt_strbuf_put_json(&h, meta_kv[2 * i + 1]);
        }
        ttt_strbuf_puts(&h, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const ttt_st_tensor *t = &ts[i];
        uint64_t bytes = (uint64_t)ttt_st_numel(t) * 4;
        if (i || n_meta > 0) ttt_strbuf_puts(&h, ",");
        ttt_strbuf_put_json(&h, t->name);
        ttt_strbuf_puts(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++)
            ttt_strbuf_printf(&h, "%s%" PRId64, d ? "," : "", t->shape[d]);
        ttt_strbuf_printf(&h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + bytes);
        off += bytes;
    }
    ttt_strbuf_puts(&h, "}");
    /* data buffer 8-byte aligned; padding in one append, which a failed builder ignores */
    ttt_strbuf_append(&h, "        ", (8 - h.len % 8) % 8);
    if (h.failed) {
        ttt_strbuf_free(&h);
        return werr(err, TTT_ERR_NOMEM, path, "out of memory for the header");
    }

    ttt_afile af;
    ttt_status st = ttt_afile_open(&af, path, err);
    if (st != TTT_OK) {
        ttt_strbuf_free(&h);
        return st;
    }
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)h.len >> (8 * k));
    fwrite(len8, 1, 8, af.f);
    fwrite(h.data, 1, h.len, af.f);
    ttt_strbuf_free(&h);
    /* little-endian float32, through a small buffer so the host byte order does not matter */
    unsigned char chunk[4096];
    for (int i = 0; i < n; i++) {
        const size_t cnt = (size_t)ttt_st_numel(&ts[i]);
        size_t w = 0;
        for (size_t j = 0; j < cnt; j++) {
            uint32_t u;
            memcpy(&u, &ts[i].data[j], 4);
            for (int k = 0; k < 4; k++) chunk[w++] = (unsigned char)(u >> (8 * k));
            if (w == sizeof chunk) {
                fwrite(chunk, 1, w, af.f);
                w = 0;
            }
        }
        if (w) fwrite(chunk, 1, w, af.f);
    }
    /* write errors (e.g. a full disk) stick to the stream; commit reports them */
    return ttt_afile_commit(&af, err);
}
