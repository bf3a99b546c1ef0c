/* The configuration tree: nodes that remember where they were written, building, editing,
 * cloning and freeing trees, and the locations and errors every later complaint points with.
 *
 * Allocation failures never abort: a failed allocation leaves the tree it was building whole but
 * incomplete (a value or key missing, a NULL from ttt_cfg_clone / ttt_cfg_new_*, which
 * ttt_cfg_map_set and ttt_cfg_seq_push accept and drop) and counts itself in a per-thread
 * counter (ttt_cfg_alloc_failures). Every function that returns a status compares the counter
 * at its end with its start and returns TTT_ERR_NOMEM when it moved; callers of the void and
 * pointer functions (the plan pass, the resolved-YAML writer) do the same once at their end
 * (docs/design.md "Errors, memory, determinism"). Everything else is reported through
 * ttt_error. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <yaml.h>

#include "fault.h"
#include "infile.h"
#include "strbuf.h"
#include "config_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* allocation and small strings                                                                */

_Thread_local unsigned long ttt_cfg_oom_count; /* allocations that failed on this thread */
static _Thread_local size_t oom_bytes;        /* the size of the latest */

_Thread_local unsigned long ttt_cfg_oom_base;  /* ttt_cfg_oom_count at the last ttt_cfg_oom_clear */

unsigned long ttt_cfg_alloc_failures(void) { return ttt_cfg_oom_count; }
void ttt_cfg_oom_clear(void) { ttt_cfg_oom_base = ttt_cfg_oom_count; }

ttt_status ttt_cfg_out_of_memory(ttt_error *err, const char *what) {
    return ttt_error_set(err, TTT_ERR_NOMEM,
                         "%s: out of memory in the configuration code (%zu bytes)", what,
                         oom_bytes);
}

static void count_failure(size_t n) {
    ttt_cfg_oom_count++;
    oom_bytes = n;
}

/* NULL (counted) when memory runs out; p is then still the caller's. */
void *ttt_cfg_xrealloc(void *p, size_t n) {
    void *q = ttt_fault_realloc(p, n ? n : 1);
    if (!q) count_failure(n);
    return q;
}

void *ttt_cfg_xmalloc(size_t n) { return ttt_cfg_xrealloc(NULL, n); }

char *ttt_cfg_xstrndup(const char *s, size_t n) {
    char *d = ttt_cfg_xmalloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *ttt_cfg_xstrdup(const char *s) { return s ? ttt_cfg_xstrndup(s, strlen(s)) : NULL; }

/* ASCII-only case folding: config words are ASCII and the locale must not change parsing. */
int ttt_cfg_lower(int c) { return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c; }

int ttt_cfg_ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (ttt_cfg_lower((unsigned char)*a) != ttt_cfg_lower((unsigned char)*b)) return 0;
    return *a == *b;
}

int ttt_cfg_is_digit(char c) { return c >= '0' && c <= '9'; }


void ttt_cfg_sb_check(ttt_cfg_sbuf *b) {
    if (b->failed) count_failure(b->cap + 1);
}

void ttt_cfg_sb_putn(ttt_cfg_sbuf *b, const char *s, size_t n) {
    ttt_strbuf_append(b, s, n);
    ttt_cfg_sb_check(b);
}

void ttt_cfg_sb_puts(ttt_cfg_sbuf *b, const char *s) { ttt_cfg_sb_putn(b, s, strlen(s)); }
void ttt_cfg_sb_putc(ttt_cfg_sbuf *b, char c) { ttt_cfg_sb_putn(b, &c, 1); }

void ttt_cfg_sb_printf(ttt_cfg_sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ttt_strbuf_vprintf(b, fmt, ap);
    va_end(ap);
    ttt_cfg_sb_check(b);
}

/* The text built so far; ownership passes to the caller. NULL (counted) when memory ran out. */
char *ttt_cfg_sb_take(ttt_cfg_sbuf *b) {
    char *p = ttt_strbuf_take(b);
    if (!p) count_failure(1);
    return p;
}

/* A taken text for a message, "" when it could not be built. */
const char *ttt_cfg_text_or_empty(const char *s) { return s ? s : ""; }

void ttt_cfg_join_path(char *buf, size_t len, const char *path, const char *key) {
    if (path && *path)
        snprintf(buf, len, "%s.%s", path, key);
    else
        snprintf(buf, len, "%s", key);
}

/* "a, b, c" */
void ttt_cfg_sb_join(ttt_cfg_sbuf *b, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        if (i) ttt_cfg_sb_puts(b, ", ");
        ttt_cfg_sb_puts(b, names[i]);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* nodes                                                                                       */

ttt_cfg_node *ttt_cfg_node_new(ttt_cfg_kind kind, const char *file, int line, int col) {
    ttt_cfg_node *n = ttt_cfg_xmalloc(sizeof *n);
    if (!n) return NULL;
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->file = ttt_cfg_xstrdup(file);
    n->line = line;
    n->col = col;
    return n;
}

ttt_cfg_node *ttt_cfg_node_at(ttt_cfg_kind kind, const ttt_cfg_node *where) {
    if (!where) return ttt_cfg_node_new(kind, NULL, 0, 0);
    return ttt_cfg_node_new(kind, where->file, where->line, where->col);
}

void ttt_cfg_set_location(ttt_cfg_node *n, const char *file, int line, int col) {
    char *f = ttt_cfg_xstrdup(file);
    if (file && !f) return; /* counted; the old location stays */
    free(n->file);
    n->file = f;
    n->line = line;
    n->col = col;
}

/* Room for `need` entries; 0 (counted) when memory runs out, the node unchanged but for
 * arrays that grew (cap is raised only when all of them did). */
int ttt_cfg_reserve(ttt_cfg_node *n, int need) {
    if (n->cap >= need) return 1;
    int cap = n->cap ? n->cap * 2 : 4;
    if (cap < need) cap = need;
    void *p = ttt_cfg_xrealloc(n->items, (size_t)cap * sizeof *n->items);
    if (!p) return 0;
    n->items = p;
    if (n->kind == TTT_CFG_MAP) {
        if (!(p = ttt_cfg_xrealloc(n->keys, (size_t)cap * sizeof *n->keys))) return 0;
        n->keys = p;
        if (!(p = ttt_cfg_xrealloc(n->key_line, (size_t)cap * sizeof *n->key_line))) return 0;
        n->key_line = p;
        if (!(p = ttt_cfg_xrealloc(n->key_col, (size_t)cap * sizeof *n->key_col))) return 0;
        n->key_col = p;
    }
    n->cap = cap;
    return 1;
}

/* The YAML 1.2 core-schema spellings of null (plain scalars only; "" is null too). */
int ttt_cfg_is_null_word(const char *s) {
    return strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
           strcmp(s, "NULL") == 0;
}

int ttt_cfg_is_null(const ttt_cfg_node *n) { return n->kind == TTT_CFG_SCALAR && !n->scalar; }

int ttt_cfg_find_key(const ttt_cfg_node *map, const char *key) {
    if (!map || map->kind != TTT_CFG_MAP) return -1;
    for (int i = 0; i < map->n; i++)
        if (strcmp(map->keys[i], key) == 0) return i;
    return -1;
}


/* FNV-1a started from a value of each table (the clock and the table's address), so that a
 * file cannot be prepared whose keys all collide (lookups would be a scan again); the order of
 * slots never shows in results. */
static size_t str_hash(const ttt_cfg_str_index *x, const char *s) {
    size_t h = x->seed;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

/* Index stored for `s`, or -1. */
int ttt_cfg_str_index_find(const ttt_cfg_str_index *x, const char *const *names, const char *s) {
    if (!x->cap) return -1;
    for (size_t i = str_hash(x, s) & (x->cap - 1);; i = (i + 1) & (x->cap - 1)) {
        if (!x->slot[i]) return -1;
        if (strcmp(names[x->slot[i] - 1], s) == 0) return x->slot[i] - 1;
    }
}

/* Store `idx` for names[idx], replacing an entry of the same name (the latest wins). */
void ttt_cfg_str_index_put(ttt_cfg_str_index *x, const char *const *names, int idx) {
    if (!x->cap)
        x->seed = ((size_t)time(NULL) * 2654435761u) ^ (size_t)(uintptr_t)x ^ 1469598103934665603u;
    if (2 * (x->n + 1) > x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 64;
        int *slot = ttt_cfg_xmalloc(cap * sizeof *slot);
        if (!slot) return; /* counted; the table stays at most half full */
        memset(slot, 0, cap * sizeof *slot);
        for (size_t i = 0; i < x->cap; i++) {
            if (!x->slot[i]) continue;
            size_t j = str_hash(x, names[x->slot[i] - 1]) & (cap - 1);
            while (slot[j]) j = (j + 1) & (cap - 1);
            slot[j] = x->slot[i];
        }
        free(x->slot);
        x->slot = slot;
        x->cap = cap;
    }
    size_t i = str_hash(x, names[idx]) & (x->cap - 1);
    for (; x->slot[i]; i = (i + 1) & (x->cap - 1))
        if (strcmp(names[x->slot[i] - 1], names[idx]) == 0) break;
    if (!x->slot[i]) x->n++;
    x->slot[i] = idx + 1;
}

void ttt_cfg_str_index_free(ttt_cfg_str_index *x) {
    free(x->slot);
    memset(x, 0, sizeof *x);
}

/* Append without looking for an existing key (callers have checked). Takes val; 0 (val freed,
 * the failure counted) when memory runs out or val is NULL (a failure already counted). */
int ttt_cfg_map_append(ttt_cfg_node *map, const char *key, int key_line, int key_col,
                      ttt_cfg_node *val) {
    char *k = NULL;
    if (!val || !ttt_cfg_reserve(map, map->n + 1) || !(k = ttt_cfg_xstrdup(key))) {
        ttt_cfg_free(val);
        return 0;
    }
    map->keys[map->n] = k;
    map->key_line[map->n] = key_line;
    map->key_col[map->n] = key_col;
    map->items[map->n] = val;
    map->n++;
    return 1;
}

ttt_cfg_node *ttt_cfg_new_scalar(const char *text, const ttt_cfg_node *where) {
    ttt_cfg_node *n = ttt_cfg_node_at(TTT_CFG_SCALAR, where);
    if (n && text && !(n->scalar = ttt_cfg_xstrdup(text))) {
        ttt_cfg_free(n);
        return NULL;
    }
    return n;
}

ttt_cfg_node *ttt_cfg_new_map(const ttt_cfg_node *where) {
    return ttt_cfg_node_at(TTT_CFG_MAP, where);
}
ttt_cfg_node *ttt_cfg_new_seq(const ttt_cfg_node *where) {
    return ttt_cfg_node_at(TTT_CFG_SEQ, where);
}

void ttt_cfg_swap(ttt_cfg_node *a, ttt_cfg_node *b) {
    const ttt_cfg_node t = *a;
    *a = *b;
    *b = t;
}

ttt_status ttt_cfg_map_set(ttt_cfg_node *map, const char *key, ttt_cfg_node *val) {
    if (!map || !val) { /* a failed allocation made one of them (counted) */
        ttt_cfg_free(val);
        return TTT_ERR_NOMEM;
    }
    if (map->kind != TTT_CFG_MAP || !key) { /* misuse: reported, never an abort */
        ttt_cfg_free(val);
        return TTT_ERR_ARG;
    }
    int i = ttt_cfg_find_key(map, key);
    if (i >= 0) {
        /* Replacing keeps the key where it was written (and its place in the order). */
        ttt_cfg_free(map->items[i]);
        map->items[i] = val;
        return TTT_OK;
    }
    /* A key created in code has no position of its own; messages then use the value's. */
    return ttt_cfg_map_append(map, key, 0, 0, val) ? TTT_OK : TTT_ERR_NOMEM;
}

ttt_status ttt_cfg_seq_push(ttt_cfg_node *seq, ttt_cfg_node *val) {
    if (seq && seq->kind != TTT_CFG_SEQ) {
        ttt_cfg_free(val);
        return TTT_ERR_ARG;
    }
    if (!seq || !val || !ttt_cfg_reserve(seq, seq->n + 1)) { /* out of memory (counted) */
        ttt_cfg_free(val);
        return TTT_ERR_NOMEM;
    }
    seq->items[seq->n++] = val;
    return TTT_OK;
}

int ttt_cfg_map_remove(ttt_cfg_node *map, const char *key) {
    int i = ttt_cfg_find_key(map, key);
    if (i < 0) return 0;
    ttt_cfg_free(map->items[i]);
    free(map->keys[i]);
    int rest = map->n - i - 1;
    memmove(map->items + i, map->items + i + 1, (size_t)rest * sizeof *map->items);
    memmove(map->keys + i, map->keys + i + 1, (size_t)rest * sizeof *map->keys);
    memmove(map->key_line + i, map->key_line + i + 1, (size_t)rest * sizeof *map->key_line);
    memmove(map->key_col + i, map->key_col + i + 1, (size_t)rest * sizeof *map->key_col);
    map->n--;
    return 1;
}

ttt_cfg_node *ttt_cfg_clone(const ttt_cfg_node *n) {
    if (!n) return NULL;
    /* Out of memory (counted): NULL, never a partial copy. */
    ttt_cfg_node *c = ttt_cfg_node_at(n->kind, n);
    if (!c) return NULL;
    c->quoted = n->quoted;
    if ((n->scalar && !(c->scalar = ttt_cfg_xstrdup(n->scalar))) ||
        (n->n > 0 && !ttt_cfg_reserve(c, n->n))) {
        ttt_cfg_free(c);
        return NULL;
    }
    for (int i = 0; i < n->n; i++) {
        ttt_cfg_node *item = ttt_cfg_clone(n->items[i]);
        char *key = NULL;
        if (!item || (n->kind == TTT_CFG_MAP && !(key = ttt_cfg_xstrdup(n->keys[i])))) {
            ttt_cfg_free(item);
            ttt_cfg_free(c);
            return NULL;
        }
        c->items[i] = item;
        if (n->kind == TTT_CFG_MAP) {
            c->keys[i] = key;
            c->key_line[i] = n->key_line[i];
            c->key_col[i] = n->key_col[i];
        }
        c->n = i + 1;
    }
    return c;
}

void ttt_cfg_free(ttt_cfg_node *n) {
    if (!n) return;
    for (int i = 0; i < n->n; i++) {
        ttt_cfg_free(n->items[i]);
        if (n->keys) free(n->keys[i]);
    }
    free(n->items);
    free(n->keys);
    free(n->key_line);
    free(n->key_col);
    free(n->scalar);
    free(n->file);
    free(n);
}

long ttt_cfg_count_nodes(const ttt_cfg_node *n) {
    long c = 1;
    for (int i = 0; i < n->n; i++) c += ttt_cfg_count_nodes(n->items[i]);
    return c;
}

/* Bytes of text (scalar values and keys) in the tree: what copies of it cost beyond its nodes. */
long ttt_cfg_count_text_bytes(const ttt_cfg_node *n) {
    long c = n->scalar ? (long)strlen(n->scalar) : 0;
    for (int i = 0; i < n->n; i++) {
        c += ttt_cfg_count_text_bytes(n->items[i]);
        if (n->keys) c += (long)strlen(n->keys[i]);
    }
    return c;
}

/* ------------------------------------------------------------------------------------------ */
/* locations and errors                                                                        */

const char *ttt_cfg_where(const ttt_cfg_node *n, char *buf, size_t len) {
    if (!buf || len == 0) return buf;
    if (!n)
        snprintf(buf, len, "<unknown location>");
    else if (!n->file)
        snprintf(buf, len, "<built-in default>");
    else if (n->line <= 0)
        snprintf(buf, len, "%s", n->file);
    else
        snprintf(buf, len, "%s:%d:%d", n->file, n->line, n->col);
    return buf;
}

static ttt_status verror_at(ttt_error *err, ttt_status s, const char *where, const char *fmt,
                            va_list ap) {
    char msg[TTT_ERROR_MSG_LEN];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return ttt_error_set(err, s, "%s: %s", where, msg);
}

ttt_status ttt_cfg_error(ttt_error *err, ttt_status s, const ttt_cfg_node *n, const char *fmt,
                         ...) {
    char where[512];
    ttt_cfg_where(n, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    ttt_status r = verror_at(err, s, where, fmt, ap);
    va_end(ap);
    return r;
}

/* Where map key i was written; keys made in code fall back to their value's location. */
static const char *key_where(const ttt_cfg_node *map, int i, char *buf, size_t len) {
    if (map->key_line && map->key_line[i] > 0 && map->file) {
        snprintf(buf, len, "%s:%d:%d", map->file, map->key_line[i], map->key_col[i]);
        return buf;
    }
    return ttt_cfg_where(map->items[i], buf, len);
}

ttt_status ttt_cfg_key_error(ttt_error *err, ttt_status s, const ttt_cfg_node *map, int i,
                            const char *fmt, ...) {
    char where[512];
    key_where(map, i, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    ttt_status r = verror_at(err, s, where, fmt, ap);
    va_end(ap);
    return r;
}

const char *ttt_cfg_kind_name(const ttt_cfg_node *n) {
    switch (n->kind) {
    case TTT_CFG_MAP: return "a mapping";
    case TTT_CFG_SEQ: return "a list";
    default: return n->scalar ? "a value" : "an empty value";
    }
}


/* What a node is, for "got ..." in messages. */
void ttt_cfg_describe_node(const ttt_cfg_node *n, char *got, size_t len) {
    if (n->kind == TTT_CFG_SCALAR && n->scalar && n->quoted) {
        /* Quoted digits are text by design; say so, since it is the usual surprise. */
        snprintf(got, len, "the quoted text \"%.80s\"%s", n->scalar,
                 ttt_cfg_looks_numeric(n->scalar) ? " (write numbers and true/false without quotes)"
                                          : "");
    } else if (n->kind == TTT_CFG_SCALAR && n->scalar) {
        snprintf(got, len, "'%.100s'", n->scalar);
    } else {
        snprintf(got, len, "%s", ttt_cfg_kind_name(n));
    }
}

/* "<where>: <label>: expected <expected>, got <what the node is>" */
ttt_status ttt_cfg_type_error(ttt_error *err, const ttt_cfg_node *n, const char *label,
                             const char *expected) {
    char got[200];
    ttt_cfg_describe_node(n, got, sizeof got);
    if (label && *label)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n, "%s: expected %s, got %s", label, expected,
                             got);
    return ttt_cfg_error(err, TTT_ERR_CONFIG, n, "expected %s, got %s", expected, got);
}
