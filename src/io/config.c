/* Configuration trees loaded from YAML, with locations, schemas, overrides and sweeps.
 *
 * The loader drives libyaml's event parser directly (rather than its document API) so that every
 * node, and every mapping key, keeps the line:column where it was written; all later complaints
 * (unknown key, wrong type, out of range, unknown name) point at that spot.
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

/* Nesting deeper than this is refused: the loader, clone and free are recursive, and no
 * experiment file needs more than a handful of levels. */
#define MAX_DEPTH 64
/* Config files are read whole; anything this large is not a config file. */
#define MAX_FILE_BYTES (16L << 20)
/* The sweep points together may hold at most this many values (nodes): 10000 points of 200. */
#define MAX_SWEEP_NODES 2000000L
/* Room for a dotted path in messages (longer paths are truncated, never overflowed). */
#define PATH_BUF 256

/* ------------------------------------------------------------------------------------------ */
/* allocation and small strings                                                                */

static _Thread_local unsigned long oom_count; /* allocations that failed on this thread */
static _Thread_local size_t oom_bytes;        /* the size of the latest */

static _Thread_local unsigned long oom_base;  /* oom_count at the last ttt_cfg_oom_clear */

unsigned long ttt_cfg_alloc_failures(void) { return oom_count; }
void ttt_cfg_oom_clear(void) { oom_base = oom_count; }

ttt_status ttt_cfg_out_of_memory(ttt_error *err, const char *what) {
    return ttt_error_set(err, TTT_ERR_NOMEM,
                         "%s: out of memory in the configuration code (%zu bytes)", what,
                         oom_bytes);
}

static void count_failure(size_t n) {
    oom_count++;
    oom_bytes = n;
}

/* NULL (counted) when memory runs out; p is then still the caller's. */
static void *xrealloc(void *p, size_t n) {
    void *q = ttt_fault_realloc(p, n ? n : 1);
    if (!q) count_failure(n);
    return q;
}

static void *xmalloc(size_t n) { return xrealloc(NULL, n); }

static char *xstrndup(const char *s, size_t n) {
    char *d = xmalloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static char *xstrdup(const char *s) { return s ? xstrndup(s, strlen(s)) : NULL; }

/* ASCII-only case folding: config words are ASCII and the locale must not change parsing. */
static int lower(int c) { return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c; }

static int ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (lower((unsigned char)*a) != lower((unsigned char)*b)) return 0;
    return *a == *b;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Text is built with the core's ttt_strbuf; a failed append is counted like any failed
 * allocation (see the top of the file). A zeroed sbuf is an empty builder. */
typedef ttt_strbuf sbuf;

static void sb_check(sbuf *b) {
    if (b->failed) count_failure(b->cap + 1);
}

static void sb_putn(sbuf *b, const char *s, size_t n) {
    ttt_strbuf_append(b, s, n);
    sb_check(b);
}

static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }
static void sb_putc(sbuf *b, char c) { sb_putn(b, &c, 1); }

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ttt_strbuf_vprintf(b, fmt, ap);
    va_end(ap);
    sb_check(b);
}

/* The text built so far; ownership passes to the caller. NULL (counted) when memory ran out. */
static char *sb_take(sbuf *b) {
    char *p = ttt_strbuf_take(b);
    if (!p) count_failure(1);
    return p;
}

/* A taken text for a message, "" when it could not be built. */
static const char *text_or_empty(const char *s) { return s ? s : ""; }

static void join_path(char *buf, size_t len, const char *path, const char *key) {
    if (path && *path)
        snprintf(buf, len, "%s.%s", path, key);
    else
        snprintf(buf, len, "%s", key);
}

/* "a, b, c" */
static void sb_join(sbuf *b, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        if (i) sb_puts(b, ", ");
        sb_puts(b, names[i]);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* nodes                                                                                       */

static ttt_cfg_node *node_new(ttt_cfg_kind kind, const char *file, int line, int col) {
    ttt_cfg_node *n = xmalloc(sizeof *n);
    if (!n) return NULL;
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->file = xstrdup(file);
    n->line = line;
    n->col = col;
    return n;
}

static ttt_cfg_node *node_at(ttt_cfg_kind kind, const ttt_cfg_node *where) {
    if (!where) return node_new(kind, NULL, 0, 0);
    return node_new(kind, where->file, where->line, where->col);
}

static void set_location(ttt_cfg_node *n, const char *file, int line, int col) {
    char *f = xstrdup(file);
    if (file && !f) return; /* counted; the old location stays */
    free(n->file);
    n->file = f;
    n->line = line;
    n->col = col;
}

/* Room for `need` entries; 0 (counted) when memory runs out, the node unchanged but for
 * arrays that grew (cap is raised only when all of them did). */
static int reserve(ttt_cfg_node *n, int need) {
    if (n->cap >= need) return 1;
    int cap = n->cap ? n->cap * 2 : 4;
    if (cap < need) cap = need;
    void *p = xrealloc(n->items, (size_t)cap * sizeof *n->items);
    if (!p) return 0;
    n->items = p;
    if (n->kind == TTT_CFG_MAP) {
        if (!(p = xrealloc(n->keys, (size_t)cap * sizeof *n->keys))) return 0;
        n->keys = p;
        if (!(p = xrealloc(n->key_line, (size_t)cap * sizeof *n->key_line))) return 0;
        n->key_line = p;
        if (!(p = xrealloc(n->key_col, (size_t)cap * sizeof *n->key_col))) return 0;
        n->key_col = p;
    }
    n->cap = cap;
    return 1;
}

/* The YAML 1.2 core-schema spellings of null (plain scalars only; "" is null too). */
static int is_null_word(const char *s) {
    return strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
           strcmp(s, "NULL") == 0;
}

static int is_null(const ttt_cfg_node *n) { return n->kind == TTT_CFG_SCALAR && !n->scalar; }

static int find_key(const ttt_cfg_node *map, const char *key) {
    if (!map || map->kind != TTT_CFG_MAP) return -1;
    for (int i = 0; i < map->n; i++)
        if (strcmp(map->keys[i], key) == 0) return i;
    return -1;
}

/* A string -> index table (open addressing, linear probing, kept at most half full) so that the
 * loader finds duplicate keys and anchors in time linear in the document: a scan per key made
 * a mapping of n keys cost n^2 / 2 comparisons (200 000 keys: minutes). `names` is the caller's
 * array the stored indices point into; the table holds index + 1 (0 = empty slot). */
typedef struct str_index {
    int *slot;
    size_t cap; /* a power of two, or 0 */
    size_t n;
    size_t seed; /* set when the table is first filled */
} str_index;

/* FNV-1a started from a value of each table (the clock and the table's address), so that a
 * file cannot be prepared whose keys all collide (lookups would be a scan again); the order of
 * slots never shows in results. */
static size_t str_hash(const str_index *x, const char *s) {
    size_t h = x->seed;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

/* Index stored for `s`, or -1. */
static int str_index_find(const str_index *x, const char *const *names, const char *s) {
    if (!x->cap) return -1;
    for (size_t i = str_hash(x, s) & (x->cap - 1);; i = (i + 1) & (x->cap - 1)) {
        if (!x->slot[i]) return -1;
        if (strcmp(names[x->slot[i] - 1], s) == 0) return x->slot[i] - 1;
    }
}

/* Store `idx` for names[idx], replacing an entry of the same name (the latest wins). */
static void str_index_put(str_index *x, const char *const *names, int idx) {
    if (!x->cap)
        x->seed = ((size_t)time(NULL) * 2654435761u) ^ (size_t)(uintptr_t)x ^ 1469598103934665603u;
    if (2 * (x->n + 1) > x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 64;
        int *slot = xmalloc(cap * sizeof *slot);
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

static void str_index_free(str_index *x) {
    free(x->slot);
    memset(x, 0, sizeof *x);
}

/* Append without looking for an existing key (callers have checked). Takes val; 0 (val freed,
 * the failure counted) when memory runs out or val is NULL (a failure already counted). */
static int map_append(ttt_cfg_node *map, const char *key, int key_line, int key_col,
                      ttt_cfg_node *val) {
    char *k = NULL;
    if (!val || !reserve(map, map->n + 1) || !(k = xstrdup(key))) {
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
    ttt_cfg_node *n = node_at(TTT_CFG_SCALAR, where);
    if (n && text && !(n->scalar = xstrdup(text))) {
        ttt_cfg_free(n);
        return NULL;
    }
    return n;
}

ttt_cfg_node *ttt_cfg_new_map(const ttt_cfg_node *where) { return node_at(TTT_CFG_MAP, where); }
ttt_cfg_node *ttt_cfg_new_seq(const ttt_cfg_node *where) { return node_at(TTT_CFG_SEQ, where); }

ttt_status ttt_cfg_map_set(ttt_cfg_node *map, const char *key, ttt_cfg_node *val) {
    if (!map || !val) { /* a failed allocation made one of them (counted) */
        ttt_cfg_free(val);
        return TTT_ERR_NOMEM;
    }
    if (map->kind != TTT_CFG_MAP || !key) { /* misuse: reported, never an abort */
        ttt_cfg_free(val);
        return TTT_ERR_ARG;
    }
    int i = find_key(map, key);
    if (i >= 0) {
        /* Replacing keeps the key where it was written (and its place in the order). */
        ttt_cfg_free(map->items[i]);
        map->items[i] = val;
        return TTT_OK;
    }
    /* A key created in code has no position of its own; messages then use the value's. */
    return map_append(map, key, 0, 0, val) ? TTT_OK : TTT_ERR_NOMEM;
}

ttt_status ttt_cfg_seq_push(ttt_cfg_node *seq, ttt_cfg_node *val) {
    if (seq && seq->kind != TTT_CFG_SEQ) {
        ttt_cfg_free(val);
        return TTT_ERR_ARG;
    }
    if (!seq || !val || !reserve(seq, seq->n + 1)) { /* out of memory (counted) */
        ttt_cfg_free(val);
        return TTT_ERR_NOMEM;
    }
    seq->items[seq->n++] = val;
    return TTT_OK;
}

int ttt_cfg_map_remove(ttt_cfg_node *map, const char *key) {
    int i = find_key(map, key);
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
    ttt_cfg_node *c = node_at(n->kind, n);
    if (!c) return NULL;
    c->quoted = n->quoted;
    if ((n->scalar && !(c->scalar = xstrdup(n->scalar))) || (n->n > 0 && !reserve(c, n->n))) {
        ttt_cfg_free(c);
        return NULL;
    }
    for (int i = 0; i < n->n; i++) {
        ttt_cfg_node *item = ttt_cfg_clone(n->items[i]);
        char *key = NULL;
        if (!item || (n->kind == TTT_CFG_MAP && !(key = xstrdup(n->keys[i])))) {
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

static long count_nodes(const ttt_cfg_node *n) {
    long c = 1;
    for (int i = 0; i < n->n; i++) c += count_nodes(n->items[i]);
    return c;
}

/* Bytes of text (scalar values and keys) in the tree: what copies of it cost beyond its nodes. */
static long count_text_bytes(const ttt_cfg_node *n) {
    long c = n->scalar ? (long)strlen(n->scalar) : 0;
    for (int i = 0; i < n->n; i++) {
        c += count_text_bytes(n->items[i]);
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

static ttt_status key_error(ttt_error *err, ttt_status s, const ttt_cfg_node *map, int i,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static ttt_status key_error(ttt_error *err, ttt_status s, const ttt_cfg_node *map, int i,
                            const char *fmt, ...) {
    char where[512];
    key_where(map, i, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    ttt_status r = verror_at(err, s, where, fmt, ap);
    va_end(ap);
    return r;
}

static const char *kind_name(const ttt_cfg_node *n) {
    switch (n->kind) {
    case TTT_CFG_MAP: return "a mapping";
    case TTT_CFG_SEQ: return "a list";
    default: return n->scalar ? "a value" : "an empty value";
    }
}

static int looks_numeric(const char *s);

/* What a node is, for "got ..." in messages. */
static void describe_node(const ttt_cfg_node *n, char *got, size_t len) {
    if (n->kind == TTT_CFG_SCALAR && n->scalar && n->quoted) {
        /* Quoted digits are text by design; say so, since it is the usual surprise. */
        snprintf(got, len, "the quoted text \"%.80s\"%s", n->scalar,
                 looks_numeric(n->scalar) ? " (write numbers and true/false without quotes)"
                                          : "");
    } else if (n->kind == TTT_CFG_SCALAR && n->scalar) {
        snprintf(got, len, "'%.100s'", n->scalar);
    } else {
        snprintf(got, len, "%s", kind_name(n));
    }
}

/* "<where>: <label>: expected <expected>, got <what the node is>" */
static ttt_status type_error(ttt_error *err, const ttt_cfg_node *n, const char *label,
                             const char *expected) {
    char got[200];
    describe_node(n, got, sizeof got);
    if (label && *label)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n, "%s: expected %s, got %s", label, expected,
                             got);
    return ttt_cfg_error(err, TTT_ERR_CONFIG, n, "expected %s, got %s", expected, got);
}

/* ------------------------------------------------------------------------------------------ */
/* loading                                                                                     */


typedef struct loader {
    yaml_parser_t parser;
    const char *name;          /* the file name in messages and nodes */
    const char *text;          /* the input, to look at the character a problem points to */
    size_t len;
    const ttt_cfg_node *fixed; /* non-NULL: every node gets this location (defaults, --set) */
    char **anchor_names;               /* (n_anchors) */
    const ttt_cfg_node **anchor_nodes; /* (n_anchors) inside the tree being built */
    int n_anchors, cap_anchors;
    str_index anchor_index; /* name -> its latest definition */
    long alias_nodes; /* nodes created so far by expanding aliases */
    long alias_bytes; /* text bytes created so far by expanding aliases */
    ttt_error *err;
} loader;

static void loc_from_mark(const loader *L, yaml_mark_t m, int *line, int *col) {
    if (L->fixed) {
        *line = L->fixed->line;
        *col = L->fixed->col;
    } else {
        *line = (int)m.line + 1;
        *col = (int)m.column + 1;
    }
}

static ttt_cfg_node *node_from_mark(const loader *L, ttt_cfg_kind kind, yaml_mark_t m) {
    if (L->fixed) return node_at(kind, L->fixed);
    int line, col;
    loc_from_mark(L, m, &line, &col);
    return node_new(kind, L->name, line, col);
}

/* Errors inside a fixed-location text (a default, a --set value) carry no location of their
 * own: the caller knows the context and prefixes it. */
static ttt_status load_error(loader *L, ttt_status s, yaml_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ttt_status load_error(loader *L, ttt_status s, yaml_mark_t m, const char *fmt, ...) {
    char msg[TTT_ERROR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (L->fixed) return ttt_error_set(L->err, s, "%s", msg);
    return ttt_error_set(L->err, s, "%s:%zu:%zu: %s", L->name, m.line + 1, m.column + 1, msg);
}

/* What the user most likely has to do about a libyaml complaint. */
static const char *yaml_hint(const loader *L, const char *problem, size_t index) {
    if (index < L->len && L->text[index] == '\t')
        return "expected spaces for indentation (YAML does not allow tabs)";
    if (strstr(problem, "',' or ']'")) return "expected a ',' between items or a closing ']'";
    if (strstr(problem, "',' or '}'")) return "expected a ',' between entries or a closing '}'";
    if (strstr(problem, "expected key"))
        return "expected each 'key: value' to line up with the keys above it";
    if (strstr(problem, "mapping values are not allowed"))
        return "expected one 'key: value' per line (check the indentation; quote text that "
               "contains ': ')";
    if (strstr(problem, "end of stream") || strstr(problem, "quoted scalar"))
        return "expected a closing quote";
    if (strstr(problem, "cannot start any token"))
        return "expected a value (quote text that starts with @ or `)";
    return "expected valid YAML";
}

static ttt_status parser_error(loader *L) {
    yaml_parser_t *p = &L->parser;
    const char *problem = p->problem ? p->problem : "unknown problem";
    if (p->error == YAML_MEMORY_ERROR)
        return ttt_error_set(L->err, TTT_ERR_NOMEM, "%s: out of memory while parsing YAML",
                             L->name);
    if (p->error == YAML_READER_ERROR) {
        /* The reader only knows a byte offset; count lines so the message reads like the
         * others. */
        yaml_mark_t m = {0, 0, 0};
        for (size_t i = 0; i < p->problem_offset && i < L->len; i++) {
            if (L->text[i] == '\n') {
                m.line++;
                m.column = 0;
            } else {
                m.column++;
            }
        }
        return load_error(L, TTT_ERR_YAML, m, "%s; expected UTF-8 text", problem);
    }
    if (L->fixed) /* one short value: the problem alone says enough */
        return load_error(L, TTT_ERR_YAML, p->problem_mark, "%s", problem);
    char ctx[200] = "";
    if (p->context)
        snprintf(ctx, sizeof ctx, " (%s at line %zu, column %zu)", p->context,
                 p->context_mark.line + 1, p->context_mark.column + 1);
    return load_error(L, TTT_ERR_YAML, p->problem_mark, "%s%s; %s", problem, ctx,
                      yaml_hint(L, problem, p->problem_mark.index));
}

static ttt_status next_event(loader *L, yaml_event_t *ev) {
    if (!yaml_parser_parse(&L->parser, ev)) return parser_error(L);
    return TTT_OK;
}

/* Takes name. Out of memory: counted, the anchor not registered (the load then fails). */
static void add_anchor(loader *L, char *name, const ttt_cfg_node *node) {
    if (L->n_anchors == L->cap_anchors) {
        int cap = L->cap_anchors ? 2 * L->cap_anchors : 8;
        void *p = xrealloc(L->anchor_names, (size_t)cap * sizeof *L->anchor_names);
        if (p) L->anchor_names = p;
        void *q = p ? xrealloc(L->anchor_nodes, (size_t)cap * sizeof *L->anchor_nodes) : NULL;
        if (q) L->anchor_nodes = q;
        if (!p || !q) {
            free(name);
            return;
        }
        L->cap_anchors = cap;
    }
    L->anchor_names[L->n_anchors] = name;
    L->anchor_nodes[L->n_anchors] = node;
    str_index_put(&L->anchor_index, (const char *const *)L->anchor_names, L->n_anchors);
    L->n_anchors++;
}

static ttt_status expand_alias(loader *L, const yaml_event_t *ev, ttt_cfg_node **out) {
    const char *name = (const char *)ev->data.alias.anchor;
    const ttt_cfg_node *target = NULL;
    /* The latest definition wins, as in YAML; an anchor is only registered once its node is
     * complete, so an alias cannot refer to its own enclosing node (no cycles). */
    int ai = str_index_find(&L->anchor_index, (const char *const *)L->anchor_names, name);
    if (ai >= 0) target = L->anchor_nodes[ai];
    if (!target)
        return load_error(L, TTT_ERR_YAML, ev->start_mark,
                          "unknown alias '*%s'; expected an anchor '&%s' defined before it", name,
                          name);
    L->alias_nodes += count_nodes(target);
    if (L->alias_nodes > TTT_CFG_MAX_ALIAS_NODES)
        return load_error(L, TTT_ERR_YAML, ev->start_mark,
                          "alias '*%s': aliases expand to more than %d values in total; "
                          "expected a smaller document (nested aliases grow exponentially)",
                          name, TTT_CFG_MAX_ALIAS_NODES);
    L->alias_bytes += count_text_bytes(target);
    if (L->alias_bytes > TTT_CFG_MAX_EXPANDED_BYTES)
        return load_error(L, TTT_ERR_YAML, ev->start_mark,
                          "alias '*%s': aliases expand to more than %ld bytes of text in total; "
                          "expected a smaller document (each alias copies its anchor's text)",
                          name, TTT_CFG_MAX_EXPANDED_BYTES);
    ttt_cfg_node *c = ttt_cfg_clone(target);
    if (!c) return ttt_cfg_out_of_memory(L->err, L->name);
    /* The copy as a whole is used here, so messages about it should point here; its inner
     * values keep pointing at where they were written. */
    if (L->fixed) {
        set_location(c, L->fixed->file, L->fixed->line, L->fixed->col);
    } else {
        int line, col;
        loc_from_mark(L, ev->start_mark, &line, &col);
        set_location(c, L->name, line, col);
    }
    *out = c;
    return TTT_OK;
}

static ttt_status parse_node(loader *L, yaml_event_t *ev, const char *path, int depth,
                             ttt_cfg_node **out);

static ttt_status parse_seq(loader *L, ttt_cfg_node *seq, const char *path, int depth) {
    for (int i = 0;; i++) {
        yaml_event_t ev;
        TTT_TRY(next_event(L, &ev));
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return TTT_OK;
        }
        char child_path[PATH_BUF];
        snprintf(child_path, sizeof child_path, "%s[%d]", path, i);
        ttt_cfg_node *child;
        TTT_TRY(parse_node(L, &ev, child_path, depth + 1, &child));
        ttt_cfg_seq_push(seq, child);
    }
}

static ttt_status parse_map_keys(loader *L, ttt_cfg_node *map, const char *path, int depth,
                                 str_index *seen);

static ttt_status parse_map(loader *L, ttt_cfg_node *map, const char *path, int depth) {
    str_index seen = {0};
    ttt_status s = parse_map_keys(L, map, path, depth, &seen);
    str_index_free(&seen);
    return s;
}

static ttt_status parse_map_keys(loader *L, ttt_cfg_node *map, const char *path, int depth,
                                 str_index *seen) {
    for (;;) {
        yaml_event_t ev;
        TTT_TRY(next_event(L, &ev));
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return TTT_OK;
        }
        if (ev.type != YAML_SCALAR_EVENT ||
            (ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
             (ev.data.scalar.length == 0 || is_null_word((char *)ev.data.scalar.value)))) {
            ttt_status s = load_error(L, TTT_ERR_YAML, ev.start_mark,
                                      "%s%sa mapping key must be a name, not %s; expected "
                                      "'name: value'",
                                      path, *path ? ": " : "",
                                      ev.type == YAML_SCALAR_EVENT ? "empty"
                                      : ev.type == YAML_ALIAS_EVENT ? "an alias"
                                                                     : "a list or mapping");
            yaml_event_delete(&ev);
            return s;
        }
        int kline, kcol;
        loc_from_mark(L, ev.start_mark, &kline, &kcol);
        yaml_mark_t kmark = ev.start_mark;
        char *key = xstrndup((const char *)ev.data.scalar.value, ev.data.scalar.length);
        yaml_event_delete(&ev);
        if (!key) return ttt_cfg_out_of_memory(L->err, L->name);

        int dup = str_index_find(seen, (const char *const *)map->keys, key);
        if (dup >= 0) {
            char first[64] = "";
            if (map->key_line[dup] > 0)
                snprintf(first, sizeof first, " (first written at line %d, column %d)",
                         map->key_line[dup], map->key_col[dup]);
            ttt_status s = load_error(L, TTT_ERR_YAML, kmark,
                                      "duplicate key '%s'%s%s%s; expected each key once per "
                                      "mapping",
                                      key, *path ? " in " : "", path, first);
            free(key);
            return s;
        }
        char child_path[PATH_BUF];
        join_path(child_path, sizeof child_path, path, key);
        ttt_cfg_node *child;
        ttt_status s = next_event(L, &ev);
        if (s == TTT_OK) s = parse_node(L, &ev, child_path, depth + 1, &child);
        if (s != TTT_OK) {
            free(key);
            return s;
        }
        int added = map_append(map, key, kline, kcol, child);
        free(key);
        if (!added) return ttt_cfg_out_of_memory(L->err, L->name);
        str_index_put(seen, (const char *const *)map->keys, map->n - 1);
    }
}

/* Build the node that starts with `ev` (consumed). On failure nothing is left allocated. */
static ttt_status parse_node(loader *L, yaml_event_t *ev, const char *path, int depth,
                             ttt_cfg_node **out) {
    *out = NULL;
    if (depth > MAX_DEPTH) {
        ttt_status s = load_error(L, TTT_ERR_YAML, ev->start_mark,
                                  "values are nested more than %d levels deep; expected a "
                                  "flatter structure",
                                  MAX_DEPTH);
        yaml_event_delete(ev);
        return s;
    }
    /* Tags would give a second way to type a value: `!!str 16` read as the text 16 where "16"
     * (the same string) is refused as a number, and a custom tag would mean nothing at all.
     * Values are typed by their option; quotes alone make a string (docs/hardening.md "Bad
     * input: the classes of error and their guarantees"). */
    const yaml_char_t *tag = ev->type == YAML_SCALAR_EVENT           ? ev->data.scalar.tag
                             : ev->type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.tag
                             : ev->type == YAML_MAPPING_START_EVENT  ? ev->data.mapping_start.tag
                                                                      : NULL;
    if (tag) {
        ttt_status s = load_error(L, TTT_ERR_YAML, ev->start_mark,
                                  "%s%sthe tag '%s' is not supported; expected the value without "
                                  "a tag (quotes make a string; each option has its own type)",
                                  path, *path ? ": " : "", (const char *)tag);
        yaml_event_delete(ev);
        return s;
    }
    ttt_status s = TTT_OK;
    ttt_cfg_node *n = NULL;
    char *anchor = NULL;
    if (ev->type != YAML_ALIAS_EVENT &&
        !(n = node_from_mark(L, ev->type == YAML_SCALAR_EVENT           ? TTT_CFG_SCALAR
                                : ev->type == YAML_SEQUENCE_START_EVENT ? TTT_CFG_SEQ
                                                                         : TTT_CFG_MAP,
                             ev->start_mark))) {
        yaml_event_delete(ev);
        return ttt_cfg_out_of_memory(L->err, L->name);
    }
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        s = expand_alias(L, ev, &n);
        yaml_event_delete(ev);
        break;
    case YAML_SCALAR_EVENT: {
        const char *v = (const char *)ev->data.scalar.value;
        size_t len = ev->data.scalar.length;
        /* Block literals and folded text are not plain either: only plain scalars can be
         * numbers, booleans or null. */
        n->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        int null = !n->quoted && (len == 0 || is_null_word(v));
        if (!null) n->scalar = xstrndup(v, len);
        anchor = xstrdup((const char *)ev->data.scalar.anchor);
        yaml_event_delete(ev);
        break;
    }
    case YAML_SEQUENCE_START_EVENT:
        anchor = xstrdup((const char *)ev->data.sequence_start.anchor);
        yaml_event_delete(ev);
        s = parse_seq(L, n, path, depth);
        break;
    case YAML_MAPPING_START_EVENT:
        anchor = xstrdup((const char *)ev->data.mapping_start.anchor);
        yaml_event_delete(ev);
        s = parse_map(L, n, path, depth);
        break;
    default:
        /* libyaml only emits node events here; anything else is a libyaml bug. */
        s = load_error(L, TTT_ERR_YAML, ev->start_mark, "unexpected YAML event %d",
                       (int)ev->type);
        yaml_event_delete(ev);
        break;
    }
    if (s != TTT_OK) {
        free(anchor);
        ttt_cfg_free(n);
        return s;
    }
    if (anchor) add_anchor(L, anchor, n);
    *out = n;
    return TTT_OK;
}

/* Parse `text` into one node. `fixed` (may be NULL) gives every node its location; an empty
 * document is then a null scalar, while for a file it is an error (want_map). */
static ttt_status load_text(const char *text, size_t len, const char *name,
                            const ttt_cfg_node *fixed, int want_map, ttt_cfg_node **out,
                            ttt_error *err) {
    *out = NULL;
    const unsigned long oom_mark = oom_count;
    loader L;
    memset(&L, 0, sizeof L);
    L.name = name ? name : "<string>";
    L.text = text;
    L.len = len;
    L.fixed = fixed;
    L.err = err;
    if (!yaml_parser_initialize(&L.parser))
        return ttt_error_set(err, TTT_ERR_NOMEM, "%s: cannot initialize the YAML parser",
                             L.name);
    yaml_parser_set_input_string(&L.parser, (const unsigned char *)text, len);

    ttt_cfg_node *root = NULL;
    yaml_event_t ev;
    ttt_status s = next_event(&L, &ev); /* stream start */
    if (s == TTT_OK) {
        yaml_event_delete(&ev);
        s = next_event(&L, &ev);
    }
    if (s == TTT_OK && ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        if (want_map)
            s = ttt_error_set(err, TTT_ERR_CONFIG,
                              "%s:1:1: the file is empty; expected a mapping of settings "
                              "such as 'task: ...'",
                              L.name);
        else
            root = fixed ? node_at(TTT_CFG_SCALAR, fixed) : node_new(TTT_CFG_SCALAR, L.name, 1, 1);
    } else if (s == TTT_OK) {
        yaml_event_delete(&ev); /* document start */
        s = next_event(&L, &ev);
        if (s == TTT_OK) s = parse_node(&L, &ev, "", 0, &root);
        if (s == TTT_OK) s = next_event(&L, &ev); /* document end */
        if (s == TTT_OK) {
            yaml_event_delete(&ev);
            s = next_event(&L, &ev);
        }
        if (s == TTT_OK) {
            if (ev.type != YAML_STREAM_END_EVENT)
                s = load_error(&L, TTT_ERR_YAML, ev.start_mark,
                               "a second YAML document starts here; expected a single "
                               "document (remove the '---')");
            yaml_event_delete(&ev);
        }
    }
    if (s == TTT_OK && !root) s = ttt_cfg_out_of_memory(err, L.name);
    if (s == TTT_OK && want_map && root->kind != TTT_CFG_MAP)
        s = ttt_cfg_error(err, TTT_ERR_CONFIG, root,
                          "the top level is %s; expected a mapping of settings ('key: value' "
                          "lines)",
                          kind_name(root));

    yaml_parser_delete(&L.parser);
    for (int i = 0; i < L.n_anchors; i++) free(L.anchor_names[i]);
    free(L.anchor_names);
    free(L.anchor_nodes);
    str_index_free(&L.anchor_index);
    /* a value, key or anchor lost to a failed allocation makes the whole load fail, whatever
     * the parse said after it (an anchor not registered reads as an unknown alias) */
    if (oom_count != oom_mark) s = ttt_cfg_out_of_memory(err, L.name);
    if (s != TTT_OK) {
        ttt_cfg_free(root);
        return s;
    }
    *out = root;
    return TTT_OK;
}

ttt_status ttt_cfg_load_string(const char *text, const char *name, ttt_cfg_node **out,
                               ttt_error *err) {
    TTT_ASSERT(text && out);
    return load_text(text, strlen(text), name, NULL, 1, out, err);
}

ttt_status ttt_cfg_load_file(const char *path, ttt_cfg_node **out, ttt_error *err) {
    TTT_ASSERT(path && out);
    *out = NULL;
    const char *kind = ""; /* a FIFO is refused before it can block (infile.h) */
    FILE *f = ttt_open_regular(path, &kind);
    if (!f && kind[0])
        return ttt_error_set(err, TTT_ERR_IO,
                             "cannot read '%s': not a regular file, it is %s (expected a "
                             "YAML file)", path, kind);
    if (!f) return ttt_error_set(err, TTT_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    sbuf b = {0};
    char chunk[8192];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        sb_putn(&b, chunk, got);
        if (b.len > (size_t)MAX_FILE_BYTES) break;
    }
    int read_errno = ferror(f) ? errno : 0;
    fclose(f);
    if (read_errno || b.len > (size_t)MAX_FILE_BYTES) {
        ttt_strbuf_free(&b);
        if (read_errno)
            return ttt_error_set(err, TTT_ERR_IO, "cannot read '%s': %s", path,
                                 strerror(read_errno));
        return ttt_error_set(err, TTT_ERR_IO, "'%s' is larger than %ld bytes; expected a "
                             "YAML experiment file", path, MAX_FILE_BYTES);
    }
    size_t n = b.len;
    char *text = sb_take(&b);
    if (!text) return ttt_cfg_out_of_memory(err, path);
    ttt_status s = load_text(text, n, path, NULL, 1, out, err);
    free(text);
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* lookup and conversions                                                                      */

const ttt_cfg_node *ttt_cfg_get(const ttt_cfg_node *map, const char *key) {
    if (!key) return NULL;
    int i = find_key(map, key);
    return i < 0 ? NULL : map->items[i];
}

const ttt_cfg_node *ttt_cfg_get_path(const ttt_cfg_node *root, const char *path) {
    if (!root || !path || root->kind != TTT_CFG_MAP) return NULL;
    /* A key may itself contain dots (sweep axes: "sweep" → "layer.preset"), so the remainder
     * is first tried as one key, then split at each dot in turn. */
    const ttt_cfg_node *n = ttt_cfg_get(root, path);
    if (n) return n;
    for (const char *dot = strchr(path, '.'); dot; dot = strchr(dot + 1, '.')) {
        const size_t len = (size_t)(dot - path);
        const ttt_cfg_node *child = NULL;
        for (int i = 0; i < root->n && !child; i++)
            if (strncmp(root->keys[i], path, len) == 0 && root->keys[i][len] == '\0')
                child = root->items[i];
        if (child) {
            n = ttt_cfg_get_path(child, dot + 1);
            if (n) return n;
        }
    }
    return NULL;
}

/* Would a plain scalar with this text be read as a number (by us or another YAML reader)? */
static int looks_numeric(const char *s) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    if (*p == '.') p++;
    if (is_digit(*p)) return 1;
    return ieq(p, "inf") || ieq(p, "nan") || ieq(p, "infinity") || ieq(p, ".inf") ||
           ieq(p, ".nan") || ieq(p, "true") || ieq(p, "false");
}

static ttt_status conv_int(const ttt_cfg_node *n, long *out, const char *label, ttt_error *err) {
    if (n->kind != TTT_CFG_SCALAR || !n->scalar || n->quoted)
        return type_error(err, n, label, "an integer");
    const char *s = n->scalar;
    const char *d = (s[0] == '+' || s[0] == '-') ? s + 1 : s;
    if (!is_digit(*d)) return type_error(err, n, label, "an integer");
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end != '\0') return type_error(err, n, label, "an integer");
    if (errno == ERANGE) {
        const char *sep = label && *label ? ": " : "";
        return ttt_cfg_error(err, TTT_ERR_RANGE, n,
                             "%s%s%s is too %s; expected an integer from %ld to %ld",
                             label ? label : "", sep, s, v < 0 ? "small" : "large", LONG_MIN,
                             LONG_MAX);
    }
    *out = v;
    return TTT_OK;
}

static ttt_status conv_float(const ttt_cfg_node *n, double *out, const char *label,
                             ttt_error *err) {
    if (n->kind != TTT_CFG_SCALAR || !n->scalar || n->quoted)
        return type_error(err, n, label, "a number");
    const char *s = n->scalar;
    /* strtod also takes "nan", "inf", hex and leading spaces; only decimal forms are numbers
     * here, so the characters are checked first. */
    int digits = 0;
    for (const char *p = s; *p; p++) {
        if (is_digit(*p))
            digits = 1;
        else if (!strchr("+-.eE", *p))
            return type_error(err, n, label, "a number");
    }
    if (!digits) return type_error(err, n, label, "a number");
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0') return type_error(err, n, label, "a number");
    if ((errno == ERANGE && fabs(v) == HUGE_VAL) || !isfinite(v)) {
        const char *sep = label && *label ? ": " : "";
        return ttt_cfg_error(err, TTT_ERR_RANGE, n,
                             "%s%s%s is too %s; expected a finite number (from about "
                             "-1.8e308 to 1.8e308)",
                             label ? label : "", sep, s,
                             v < 0 ? "large in magnitude (negative)" : "large");
    }
    *out = v; /* underflow to 0 or a subnormal is fine */
    return TTT_OK;
}

static ttt_status conv_bool(const ttt_cfg_node *n, int *out, const char *label, ttt_error *err) {
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    if (n->kind == TTT_CFG_SCALAR && n->scalar && !n->quoted) {
        for (int i = 0; i < 3; i++) {
            if (ieq(n->scalar, yes[i])) {
                *out = 1;
                return TTT_OK;
            }
            if (ieq(n->scalar, no[i])) {
                *out = 0;
                return TTT_OK;
            }
        }
    }
    return type_error(err, n, label, "true or false");
}

ttt_status ttt_cfg_as_int(const ttt_cfg_node *n, long *out, ttt_error *err) {
    TTT_ASSERT(n && out);
    return conv_int(n, out, NULL, err);
}

ttt_status ttt_cfg_as_float(const ttt_cfg_node *n, double *out, ttt_error *err) {
    TTT_ASSERT(n && out);
    return conv_float(n, out, NULL, err);
}

ttt_status ttt_cfg_as_bool(const ttt_cfg_node *n, int *out, ttt_error *err) {
    TTT_ASSERT(n && out);
    return conv_bool(n, out, NULL, err);
}

/* The typed getters read values ttt_cfg_check_map has validated; failing here is a bug in the
 * caller (wrong key or type), so they abort with the key named. */
static const ttt_cfg_node *getter_node(const ttt_cfg_node *map, const char *key,
                                       const char *what) {
    const ttt_cfg_node *n = ttt_cfg_get(map, key);
    if (!n || n->kind != TTT_CFG_SCALAR) {
        fprintf(stderr, "internal error: config key '%s' is %s, not %s (missing a "
                        "ttt_cfg_check_map?)\n",
                key ? key : "(null)", n ? kind_name(n) : "missing", what);
        abort();
    }
    return n;
}

static void getter_fail(const char *key, const char *what) {
    fprintf(stderr, "internal error: config key '%s' is not %s (missing a ttt_cfg_check_map?)\n",
            key, what);
    abort();
}

long ttt_cfg_int(const ttt_cfg_node *map, const char *key) {
    long v = 0;
    if (conv_int(getter_node(map, key, "an integer"), &v, NULL, NULL) != TTT_OK)
        getter_fail(key, "an integer");
    return v;
}

double ttt_cfg_float(const ttt_cfg_node *map, const char *key) {
    double v = 0;
    if (ttt_cfg_as_float(getter_node(map, key, "a number"), &v, NULL) != TTT_OK)
        getter_fail(key, "a number");
    return v;
}

int ttt_cfg_bool(const ttt_cfg_node *map, const char *key) {
    int v = 0;
    if (conv_bool(getter_node(map, key, "a boolean"), &v, NULL, NULL) != TTT_OK)
        getter_fail(key, "a boolean");
    return v;
}

const char *ttt_cfg_str(const ttt_cfg_node *map, const char *key) {
    return getter_node(map, key, "a string")->scalar;
}

/* ------------------------------------------------------------------------------------------ */
/* names and schemas                                                                           */

/* Optimal-string-alignment distance (Levenshtein plus adjacent transpositions, so "sdg" is
 * one edit from "sgd"), ignoring ASCII case. Only suggestions depend on it: when memory runs
 * out the answer is "far" (no suggestion), not a failure, so it allocates outside the hooks. */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    size_t *prev2 = malloc((lb + 1) * sizeof *prev2);
    size_t *prev = malloc((lb + 1) * sizeof *prev);
    size_t *cur = malloc((lb + 1) * sizeof *cur);
    if (!prev2 || !prev || !cur) {
        free(prev2);
        free(prev);
        free(cur);
        return (size_t)-1;
    }
    for (size_t j = 0; j <= lb; j++) prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            int ca = lower((unsigned char)a[i - 1]), cb = lower((unsigned char)b[j - 1]);
            size_t best = prev[j - 1] + (ca != cb);
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && ca == lower((unsigned char)b[j - 2]) &&
                lower((unsigned char)a[i - 2]) == cb && prev2[j - 2] + 1 < best)
                best = prev2[j - 2] + 1;
            cur[j] = best;
        }
        size_t *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    size_t d = prev[lb];
    free(prev2);
    free(prev);
    free(cur);
    return d;
}

/* Threshold: a name is "close" when its distance d (above, case-insensitive) satisfies
 * d <= max(1, strlen(s) / 3) and d < strlen(s) and d < strlen(name) — about one typo per three
 * characters, and never a suggestion that shares nothing with what was typed ("x" → "y").
 * Ties go to the earlier name. */
const char *ttt_closest_name(const char *s, const char *const *names, int n_names) {
    if (!s || !names) return NULL;
    size_t ls = strlen(s);
    size_t limit = ls / 3 < 1 ? 1 : ls / 3;
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (int i = 0; i < n_names; i++) {
        if (!names[i]) continue;
        size_t d = edit_distance(s, names[i]);
        if (d > limit || (d >= ls && d > 0) || (d >= strlen(names[i]) && d > 0)) continue;
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best;
}

static const char *article(const char *what) {
    return (what && strchr("aeiouAEIOU", what[0]) && what[0]) ? "an" : "a";
}

ttt_status ttt_cfg_check_name(const ttt_cfg_node *n, const char *what, const char *const *names,
                              int n_names, ttt_error *err) {
    TTT_ASSERT(n && what && (names || n_names == 0));
    if (oom_count != oom_base) return ttt_cfg_out_of_memory(err, what); /* as check_map */
    sbuf list = {0};
    sb_join(&list, names, n_names);
    char *valid = sb_take(&list);
    if (!valid) return ttt_cfg_out_of_memory(err, "the list of names");
    ttt_status s = TTT_OK;
    if (n->kind != TTT_CFG_SCALAR || !n->scalar) {
        char expected[TTT_ERROR_MSG_LEN];
        snprintf(expected, sizeof expected, "%s %s name (one of: %s)", article(what), what,
                 valid);
        s = type_error(err, n, NULL, expected);
        free(valid);
        return s;
    }
    for (int i = 0; i < n_names; i++)
        if (strcmp(names[i], n->scalar) == 0) {
            free(valid);
            return TTT_OK;
        }
    const char *close = ttt_closest_name(n->scalar, names, n_names);
    if (close)
        s = ttt_cfg_error(err, TTT_ERR_NAME, n, "unknown %s '%s'; did you mean '%s'? (valid: %s)",
                          what, n->scalar, close, valid);
    else
        s = ttt_cfg_error(err, TTT_ERR_NAME, n, "unknown %s '%s'; expected one of: %s", what,
                          n->scalar, valid);
    free(valid);
    return s;
}

static const char *type_desc(ttt_opt_type t) {
    switch (t) {
    case TTT_OPT_INT: return "an integer";
    case TTT_OPT_FLOAT: return "a number";
    case TTT_OPT_BOOL: return "true or false";
    case TTT_OPT_STRING: return "a string";
    case TTT_OPT_CHOICE: return "one of the listed choices";
    case TTT_OPT_INT_LIST: return "an integer or a list of integers";
    case TTT_OPT_FLOAT_LIST: return "a number or a list of numbers";
    case TTT_OPT_MAP: return "a mapping";
    }
    return "a value";
}

static void fmt_num(char *buf, size_t len, double v) {
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, len, "%.0f", v);
    else
        snprintf(buf, len, "%g", v);
}

/* "an integer from 1 to 4096", "a number >= 0" */
static void range_desc(char *buf, size_t len, const ttt_option *o, int integer) {
    const char *what = integer ? "an integer" : "a number";
    int lo = o->min > -1e300, hi = o->max < 1e300;
    if (integer) {
        lo = lo && o->min > (double)LONG_MIN;
        hi = hi && o->max < (double)LONG_MAX;
    }
    char a[48], b[48];
    fmt_num(a, sizeof a, o->min);
    fmt_num(b, sizeof b, o->max);
    if (lo && hi)
        snprintf(buf, len, "%s from %s to %s", what, a, b);
    else if (lo)
        snprintf(buf, len, "%s >= %s", what, a);
    else if (hi)
        snprintf(buf, len, "%s <= %s", what, b);
    else
        snprintf(buf, len, "%s", what);
}

static ttt_status check_number(const ttt_cfg_node *n, const ttt_option *o, int integer,
                               const char *label, ttt_error *err) {
    double v;
    int out = 0;
    if (integer) {
        long i = 0;
        TTT_TRY(conv_int(n, &i, label, err));
        v = (double)i;
        /* Compared as integers: above 2^53 a long does not convert to double exactly (2^53 + 1
         * would pass a maximum of 2^53). The bounds are rounded inwards first. */
        if (o->min <= o->max)
            out = (o->min > (double)LONG_MIN && i < (long)ceil(o->min)) ||
                  (o->max < (double)LONG_MAX && i > (long)floor(o->max));
    } else {
        TTT_TRY(conv_float(n, &v, label, err));
        out = o->min <= o->max && (v < o->min || v > o->max);
    }
    if (out) {
        char range[160];
        range_desc(range, sizeof range, o, integer);
        return ttt_cfg_error(err, TTT_ERR_RANGE, n, "%s: %s is out of range; expected %s", label,
                             n->scalar, range);
    }
    return TTT_OK;
}

/* Split "a|b|c" into a malloc'd copy and an array of pointers into it; -1 (nothing
 * allocated) when memory runs out. */
static int split_choices(const char *choices, char **copy, const char ***names) {
    *copy = xstrdup(choices ? choices : "");
    if (!*copy) return -1;
    int n = 1;
    for (const char *p = *copy; *p; p++) n += *p == '|';
    *names = xmalloc((size_t)n * sizeof **names);
    if (!*names) {
        free(*copy);
        return -1;
    }
    int k = 0;
    for (char *p = *copy, *start = *copy;; p++) {
        if (*p == '|' || *p == '\0') {
            int end = *p == '\0';
            *p = '\0';
            (*names)[k++] = start;
            start = p + 1;
            if (end) break;
        }
    }
    return k;
}

static ttt_status check_choice(const ttt_cfg_node *n, const ttt_option *o, const char *label,
                               ttt_error *err) {
    char *copy;
    const char **names;
    int k = split_choices(o->choices, &copy, &names);
    if (k < 0) return ttt_cfg_out_of_memory(err, label);
    sbuf list = {0};
    sb_join(&list, names, k);
    char *valid = sb_take(&list);
    if (!valid) {
        free(names);
        free(copy);
        return ttt_cfg_out_of_memory(err, label);
    }
    ttt_status s = TTT_OK;
    if (n->kind != TTT_CFG_SCALAR || !n->scalar) {
        char expected[TTT_ERROR_MSG_LEN];
        snprintf(expected, sizeof expected, "one of: %s", valid);
        s = type_error(err, n, label, expected);
    } else {
        int found = 0;
        for (int i = 0; i < k && !found; i++) found = strcmp(names[i], n->scalar) == 0;
        if (!found) {
            const char *close = ttt_closest_name(n->scalar, names, k);
            if (close)
                s = ttt_cfg_error(err, TTT_ERR_NAME, n,
                                  "%s: unknown value '%s'; did you mean '%s'? (valid: %s)", label,
                                  n->scalar, close, valid);
            else
                s = ttt_cfg_error(err, TTT_ERR_NAME, n,
                                  "%s: unknown value '%s'; expected one of: %s", label,
                                  n->scalar, valid);
        }
    }
    free(valid);
    free(names);
    free(copy);
    return s;
}

/* An option's default as nodes located at `where`; NULL (counted) when memory runs out. A
 * default that does not parse is a bug in the option table, not a user error. */
static ttt_cfg_node *default_node(const ttt_option *o, const ttt_cfg_node *where) {
    if (!o->def) return ttt_cfg_new_map(where); /* only TTT_OPT_MAP gets here */
    ttt_cfg_node pos;
    memset(&pos, 0, sizeof pos);
    pos.file = where ? where->file : NULL;
    pos.line = where ? where->line : 0;
    pos.col = where ? where->col : 0;
    ttt_error e;
    ttt_cfg_node *n = NULL;
    ttt_status s = load_text(o->def, strlen(o->def), "default", &pos, 0, &n, &e);
    if (s == TTT_ERR_NOMEM) return NULL;
    if (s != TTT_OK) {
        fprintf(stderr, "internal error: option '%s' has a default \"%s\" that is not valid "
                        "YAML: %s\n",
                o->name, o->def, e.msg);
        abort();
    }
    return n;
}

static ttt_status check_map(ttt_cfg_node *map, const char *p, const ttt_option *opts,
                            const char *const *extra, ttt_error *err);

static int in_list(const char *const *list, const char *s) {
    for (; list && *list; list++)
        if (strcmp(*list, s) == 0) return 1;
    return 0;
}

static const ttt_option *find_option(const ttt_option *opts, const char *name) {
    for (; opts->name; opts++)
        if (strcmp(opts->name, name) == 0) return opts;
    return NULL;
}

static ttt_status unknown_key(const ttt_cfg_node *map, int i, const char *path,
                              const ttt_option *opts, const char *const *extra, ttt_error *err) {
    int n = 0;
    for (const ttt_option *o = opts; o->name; o++) n++;
    for (const char *const *e = extra; e && *e; e++) n++;
    const char **names = xmalloc((size_t)(n ? n : 1) * sizeof *names);
    if (!names) return ttt_cfg_out_of_memory(err, path && *path ? path : "the top level");
    int k = 0;
    for (const ttt_option *o = opts; o->name; o++) names[k++] = o->name;
    for (const char *const *e = extra; e && *e; e++) names[k++] = *e;
    sbuf list = {0};
    sb_join(&list, names, k);
    char *valid = sb_take(&list);
    if (!valid) {
        free(names);
        return ttt_cfg_out_of_memory(err, path && *path ? path : "the top level");
    }
    char in[PATH_BUF + 8];
    if (path && *path)
        snprintf(in, sizeof in, " in %s", path);
    else
        snprintf(in, sizeof in, " at the top level");
    const char *key = map->keys[i];
    const char *close = ttt_closest_name(key, names, k);
    /* A section left empty just above ("optimizer:" with its keys not indented under it) makes
     * its keys land here; say so rather than only listing what is valid at this level. */
    char hint[PATH_BUF + 160] = "";
    for (int j = i - 1; j >= 0; j--) {
        const ttt_option *oj = NULL;
        for (const ttt_option *o = opts; o->name; o++)
            if (strcmp(o->name, map->keys[j]) == 0) oj = o;
        if (!oj || oj->type != TTT_OPT_MAP) continue;
        if (is_null(map->items[j])) {
            char where[512];
            /* a hint cut short by very long keys still reads; a failed format gives none */
            if (snprintf(hint, sizeof hint,
                         " ('%s' at %s is empty: if '%s' belongs to it, indent it under '%s:')",
                         map->keys[j], ttt_cfg_where(map->items[j], where, sizeof where), key,
                         map->keys[j]) < 0)
                hint[0] = '\0';
        }
        break;
    }
    ttt_status s;
    if (close)
        s = key_error(err, TTT_ERR_CONFIG, map, i,
                      "unknown key '%s'%s%s; did you mean '%s'? (valid keys: %s)", key, in, hint,
                      close, valid);
    else if (k > 0)
        s = key_error(err, TTT_ERR_CONFIG, map, i, "unknown key '%s'%s%s; expected one of: %s",
                      key, in, hint, valid);
    else
        s = key_error(err, TTT_ERR_CONFIG, map, i,
                      "unknown key '%s'%s%s; expected no keys here", key, in, hint);
    free(valid);
    free(names);
    return s;
}

static ttt_status check_list(ttt_cfg_node *map, int i, const ttt_option *o, const char *label,
                             ttt_error *err) {
    ttt_cfg_node *v = map->items[i];
    if (v->kind == TTT_CFG_SCALAR) {
        /* A single number stands for a list of one; normalizing here lets every later reader
         * iterate a sequence. */
        ttt_cfg_node *seq = ttt_cfg_new_seq(v);
        if (!seq || !reserve(seq, 1)) {
            ttt_cfg_free(seq);
            return ttt_cfg_out_of_memory(err, label);
        }
        ttt_cfg_seq_push(seq, v);
        map->items[i] = v = seq;
    }
    if (v->kind != TTT_CFG_SEQ) return type_error(err, v, label, type_desc(o->type));
    /* Every list option is a set of measurements or sizes: an empty one would run and produce
     * nothing. */
    if (v->n == 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, v,
                             "%s: the list is empty; expected at least one value (%s)", label,
                             type_desc(o->type));
    for (int j = 0; j < v->n; j++) {
        char elem[PATH_BUF + 16];
        snprintf(elem, sizeof elem, "%s[%d]", label, j);
        TTT_TRY(check_number(v->items[j], o, o->type == TTT_OPT_INT_LIST, elem, err));
    }
    return TTT_OK;
}

static ttt_status check_value(ttt_cfg_node *map, int i, const ttt_option *o, const char *label,
                              ttt_error *err) {
    ttt_cfg_node *v = map->items[i];
    if (is_null(v)) {
        /* An empty value ("lr:" or "lr: ~") is refused: taking the default silently hides a
         * value the author forgot to write. An option whose default is itself null ("not
         * set") accepts null, which means exactly that, and an empty mapping section
         * ("train:") means all of its defaults (docs/hardening.md "Bad input: the classes of
         * error and their guarantees"). */
        if (!o->def && o->type != TTT_OPT_MAP)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, v, "%s: a value is required; expected %s",
                                 label, type_desc(o->type));
        if (o->type != TTT_OPT_MAP) {
            ttt_cfg_node *d = default_node(o, v);
            if (!d) return ttt_cfg_out_of_memory(err, label);
            int def_null = is_null(d);
            ttt_cfg_free(d);
            if (!def_null)
                return ttt_cfg_error(err, TTT_ERR_CONFIG, v,
                                     "%s: the value is empty (null); expected %s (write the "
                                     "value, or leave the key out for the default %s)",
                                     label, type_desc(o->type), o->def);
        }
        ttt_cfg_node *d = default_node(o, v);
        if (!d) return ttt_cfg_out_of_memory(err, label);
        ttt_cfg_free(v);
        map->items[i] = v = d;
        if (is_null(v)) return TTT_OK;
    }
    switch (o->type) {
    case TTT_OPT_INT: return check_number(v, o, 1, label, err);
    case TTT_OPT_FLOAT: return check_number(v, o, 0, label, err);
    case TTT_OPT_BOOL: {
        int b;
        return conv_bool(v, &b, label, err);
    }
    case TTT_OPT_STRING:
        if (v->kind != TTT_CFG_SCALAR) return type_error(err, v, label, "a string");
        return TTT_OK;
    case TTT_OPT_CHOICE: return check_choice(v, o, label, err);
    case TTT_OPT_INT_LIST:
    case TTT_OPT_FLOAT_LIST: return check_list(map, i, o, label, err);
    case TTT_OPT_MAP:
        if (v->kind != TTT_CFG_MAP) return type_error(err, v, label, "a mapping");
        return TTT_OK;
    }
    return TTT_OK;
}

ttt_status ttt_cfg_check_map(ttt_cfg_node *map, const char *path, const ttt_option *opts,
                             const char *const *extra, ttt_error *err) {
    TTT_ASSERT(map && opts);
    const char *p = path ? path : "";
    /* Sticky: a tree that lost a value to a failed allocation since the last ttt_cfg_oom_clear
     * is never called valid, so no reader after a check meets a missing key. */
    if (oom_count != oom_base) return ttt_cfg_out_of_memory(err, *p ? p : "the configuration");
    ttt_status s = check_map(map, p, opts, extra, err);
    if (s == TTT_OK && oom_count != oom_base)
        s = ttt_cfg_out_of_memory(err, *p ? p : "the configuration");
    return s;
}

static ttt_status check_map(ttt_cfg_node *map, const char *p, const ttt_option *opts,
                            const char *const *extra, ttt_error *err) {
    if (map->kind != TTT_CFG_MAP) return type_error(err, map, *p ? p : NULL, "a mapping");
    for (int i = 0; i < map->n; i++)
        if (!find_option(opts, map->keys[i]) && !in_list(extra, map->keys[i]))
            return unknown_key(map, i, p, opts, extra, err);
    for (const ttt_option *o = opts; o->name; o++) {
        char label[PATH_BUF];
        join_path(label, sizeof label, p, o->name);
        int i = find_key(map, o->name);
        if (i < 0) {
            if (!o->def && o->type != TTT_OPT_MAP) {
                char help[200] = "";
                if (o->help && *o->help) snprintf(help, sizeof help, " (%s)", o->help);
                return ttt_cfg_error(err, TTT_ERR_CONFIG, map,
                                     "%s%smissing required key '%s'; expected '%s:' with %s%s",
                                     p, *p ? ": " : "", o->name, o->name, type_desc(o->type),
                                     help);
            }
            if (!map_append(map, o->name, 0, 0, default_node(o, map)))
                return ttt_cfg_out_of_memory(err, label);
            i = map->n - 1;
        }
        TTT_TRY(check_value(map, i, o, label, err));
    }
    return TTT_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* writing                                                                                     */

/* Would this text, written plain, be read back as something other than a string? */
static int reads_as_non_string(const char *s) {
    static const char *const words[] = {"true", "false", "yes", "no", "on", "off", "y", "n"};
    if (is_null_word(s) || looks_numeric(s)) return 1;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (ieq(s, words[i])) return 1;
    return 0;
}

/* YAML also breaks lines at NEL, LINE SEPARATOR and PARAGRAPH SEPARATOR (UTF-8 below);
 * returns the escape letter when `s` starts with one of them. */
static char unicode_break_at(const char *s) {
    if (strncmp(s, "\xc2\x85", 2) == 0) return 'N';
    if (strncmp(s, "\xe2\x80\xa8", 3) == 0) return 'L';
    if (strncmp(s, "\xe2\x80\xa9", 3) == 0) return 'P';
    return 0;
}

static int unicode_break(const char *s) {
    for (; *s; s++)
        if (unicode_break_at(s)) return 1;
    return 0;
}

/* Can this text be written as a plain scalar and read back unchanged? (`flow`: inside [..] or
 * {..}, where , [ ] { } and ':' also end a plain scalar.) */
static int plain_ok(const char *s, int flow) {
    size_t len = strlen(s);
    if (len == 0) return 0;
    if (s[0] == ' ' || s[len - 1] == ' ') return 0;
    if (strchr("!&*|>'\"%@`#,[]{}", s[0])) return 0;
    if (strchr("-?:", s[0]) && (s[1] == '\0' || s[1] == ' ' || (flow && strchr(",[]{}", s[1]))))
        return 0;
    if (strncmp(s, "---", 3) == 0 || strncmp(s, "...", 3) == 0) return 0;
    if (strstr(s, ": ") || strstr(s, " #") || s[len - 1] == ':') return 0;
    if (unicode_break(s)) return 0;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c == 0x7f) return 0;
        if (flow && strchr(",[]{}:", c)) return 0;
    }
    return 1;
}

static void put_quoted(sbuf *b, const char *s) {
    sb_putc(b, '"');
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        char brk = unicode_break_at(p);
        if (brk) {
            sb_putc(b, '\\');
            sb_putc(b, brk);
            p += brk == 'N' ? 1 : 2;
            continue;
        }
        switch (c) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '\r': sb_puts(b, "\\r"); break;
        default:
            if (c < 0x20 || c == 0x7f)
                sb_printf(b, "\\x%02x", c);
            else
                sb_putc(b, (char)c);
        }
    }
    sb_putc(b, '"');
}

/* A quoted node keeps its quotes only where plain text would read as a number, bool or null;
 * an unquoted node is written plain when the syntax allows (so new_scalar("null") writes a
 * real null, as its text says). */
static void put_scalar(sbuf *b, const char *s, int quoted, int flow) {
    if (!s)
        sb_puts(b, "null");
    else if (!plain_ok(s, flow) || (quoted && reads_as_non_string(s)))
        put_quoted(b, s);
    else
        sb_puts(b, s);
}

/* Keys are always strings: quote any that would read as something else. */
static void put_key(sbuf *b, const char *k, int flow) { put_scalar(b, k, 1, flow); }

static void put_flow(sbuf *b, const ttt_cfg_node *n) {
    switch (n->kind) {
    case TTT_CFG_SCALAR: put_scalar(b, n->scalar, n->quoted, 1); break;
    case TTT_CFG_SEQ:
        sb_putc(b, '[');
        for (int i = 0; i < n->n; i++) {
            if (i) sb_puts(b, ", ");
            put_flow(b, n->items[i]);
        }
        sb_putc(b, ']');
        break;
    case TTT_CFG_MAP:
        sb_putc(b, '{');
        for (int i = 0; i < n->n; i++) {
            if (i) sb_puts(b, ", ");
            put_key(b, n->keys[i], 1);
            sb_puts(b, ": ");
            put_flow(b, n->items[i]);
        }
        sb_putc(b, '}');
        break;
    }
}

char *ttt_cfg_to_flow(const ttt_cfg_node *n) {
    sbuf b = {0};
    if (n) put_flow(&b, n);
    return sb_take(&b);
}

static void indent_to(sbuf *b, int indent) {
    for (int i = 0; i < indent; i++) sb_putc(b, ' ');
}

static void put_block_map(sbuf *b, const ttt_cfg_node *m, int indent, int first_inline);
static void put_block_seq(sbuf *b, const ttt_cfg_node *s, int indent);

/* The rest of a line after "key:" or "-": a scalar or short list inline, else a nested block. */
static void put_after_indicator(sbuf *b, const ttt_cfg_node *v, int indent, int in_seq) {
    if (v->kind == TTT_CFG_SCALAR) {
        sb_putc(b, ' ');
        put_scalar(b, v->scalar, v->quoted, 0);
        sb_putc(b, '\n');
        return;
    }
    if (v->n == 0) {
        sb_puts(b, v->kind == TTT_CFG_SEQ ? " []\n" : " {}\n");
        return;
    }
    if (v->kind == TTT_CFG_SEQ) {
        int scalars = 1;
        for (int i = 0; i < v->n && scalars; i++) scalars = v->items[i]->kind == TTT_CFG_SCALAR;
        if (scalars) {
            /* Lists of numbers read best on one line; long ones go back to block style. */
            sbuf flow = {0};
            put_flow(&flow, v);
            sb_check(&flow); /* failed: counted, and written in block style below */
            int fits = !flow.failed && indent + (int)flow.len <= 96;
            if (fits) {
                sb_putc(b, ' ');
                sb_puts(b, flow.data);
                sb_putc(b, '\n');
            }
            ttt_strbuf_free(&flow);
            if (fits) return;
        }
        sb_putc(b, '\n');
        put_block_seq(b, v, indent + 2);
        return;
    }
    if (in_seq) {
        sb_putc(b, ' ');
        put_block_map(b, v, indent + 2, 1);
    } else {
        sb_putc(b, '\n');
        put_block_map(b, v, indent + 2, 0);
    }
}

static void put_block_map(sbuf *b, const ttt_cfg_node *m, int indent, int first_inline) {
    for (int i = 0; i < m->n; i++) {
        if (i > 0 || !first_inline) indent_to(b, indent);
        put_key(b, m->keys[i], 0);
        sb_putc(b, ':');
        put_after_indicator(b, m->items[i], indent, 0);
    }
}

static void put_block_seq(sbuf *b, const ttt_cfg_node *s, int indent) {
    for (int i = 0; i < s->n; i++) {
        indent_to(b, indent);
        sb_putc(b, '-');
        put_after_indicator(b, s->items[i], indent, 1);
    }
}

int ttt_cfg_write_yaml(const ttt_cfg_node *root, FILE *f) {
    TTT_ASSERT(f);
    const unsigned long oom_mark = oom_count;
    sbuf b = {0};
    if (!root)
        sb_puts(&b, "null\n");
    else if (root->kind == TTT_CFG_SCALAR) {
        put_scalar(&b, root->scalar, root->quoted, 0);
        sb_putc(&b, '\n');
    } else if (root->n == 0)
        sb_puts(&b, root->kind == TTT_CFG_MAP ? "{}\n" : "[]\n");
    else if (root->kind == TTT_CFG_MAP)
        put_block_map(&b, root, 0, 0);
    else
        put_block_seq(&b, root, 0);
    sb_check(&b);
    /* nothing at all rather than text with a piece missing */
    if (oom_count == oom_mark) fwrite(b.data, 1, b.len, f);
    ttt_strbuf_free(&b);
    return oom_count == oom_mark ? 0 : -1;
}

/* ------------------------------------------------------------------------------------------ */
/* overrides and sweeps                                                                        */

/* A non-empty dotted path without empty segments. */
static int valid_path(const char *p) {
    if (!*p || *p == '.') return 0;
    for (; *p; p++)
        if (*p == '.' && (p[1] == '.' || p[1] == '\0')) return 0;
    return 1;
}

/* The index of `key` in `map`, holding a new empty mapping when the key was missing (placed at
 * `where`) or null (placed where the null was written): the intermediates of a --set path and the
 * 'sweep' section it adds to. Any other value stays for the caller to judge. -1 when memory runs
 * out (counted). */
static int map_child(ttt_cfg_node *map, const char *key, const ttt_cfg_node *where) {
    int i = find_key(map, key);
    if (i < 0) return map_append(map, key, 0, 0, ttt_cfg_new_map(where)) ? map->n - 1 : -1;
    if (is_null(map->items[i])) {
        ttt_cfg_node *m = ttt_cfg_new_map(map->items[i]);
        if (!m) return -1;
        ttt_cfg_free(map->items[i]);
        map->items[i] = m;
    }
    return i;
}

/* root[path] = val (ownership taken), creating maps for missing or empty intermediates. When an
 * intermediate is something else, returns TTT_ERR_CONFIG with *blocker at it and *prefix the
 * length of the path leading to it; the caller words the message. TTT_ERR_NOMEM (counted) when
 * memory runs out. */
static ttt_status set_path(ttt_cfg_node *root, const char *path, ttt_cfg_node *val,
                           const ttt_cfg_node *where, const ttt_cfg_node **blocker,
                           size_t *prefix) {
    ttt_cfg_node *cur = root;
    const char *seg = path;
    for (const char *dot; (dot = strchr(seg, '.')) != NULL; seg = dot + 1) {
        char *key = xstrndup(seg, (size_t)(dot - seg));
        if (!key) {
            ttt_cfg_free(val);
            return TTT_ERR_NOMEM;
        }
        int i = map_child(cur, key, where);
        if (i < 0) {
            free(key);
            ttt_cfg_free(val);
            return TTT_ERR_NOMEM;
        }
        if (cur->items[i]->kind != TTT_CFG_MAP) {
            *blocker = cur->items[i];
            *prefix = (size_t)(dot - path);
            free(key);
            ttt_cfg_free(val);
            return TTT_ERR_CONFIG;
        }
        free(key);
        cur = cur->items[i];
    }
    ttt_cfg_map_set(cur, seg, val);
    return TTT_OK;
}

/* Drop sweep axes over `path` or inside it: the user has pinned that value. */
static void unpin_sweep(ttt_cfg_node *root, const char *path) {
    int si = find_key(root, "sweep");
    if (si < 0) return;
    ttt_cfg_node *sweep = root->items[si];
    if (sweep->kind != TTT_CFG_MAP) return;
    size_t len = strlen(path);
    for (int i = sweep->n - 1; i >= 0; i--) {
        const char *k = sweep->keys[i];
        if (strncmp(k, path, len) == 0 && (k[len] == '\0' || k[len] == '.'))
            ttt_cfg_map_remove(sweep, k);
    }
    if (sweep->n == 0) ttt_cfg_map_remove(root, "sweep");
}

/* A sweep axis whose path covers `path` (the axis `layer` for `--set layer.preset=...`) gives
 * the whole containing value in every point, so the override would be lost without a word. The
 * override is pinned everywhere it appears instead: set inside every mapping the axis lists. An
 * axis value that is not a mapping cannot hold it, and an override that makes two of the axis's
 * values identical means the user wanted one value of the axis, not a change inside each: both
 * are errors naming the axis and the way to say what was meant (docs/design.md "The plan pass
 * (`ttt_plan_build`)"). */
static ttt_status pin_inside_sweep(ttt_cfg_node *root, const char *path, const ttt_cfg_node *val,
                                   const ttt_cfg_node *origin, const char *assignment,
                                   ttt_error *err) {
    int si = find_key(root, "sweep");
    if (si < 0 || root->items[si]->kind != TTT_CFG_MAP) return TTT_OK;
    ttt_cfg_node *sweep = root->items[si];
    for (int a = 0; a < sweep->n; a++) {
        const char *axis = sweep->keys[a];
        const size_t len = strlen(axis);
        if (strncmp(path, axis, len) != 0 || path[len] != '.') continue;
        ttt_cfg_node *list = sweep->items[a];
        if (list->kind != TTT_CFG_SEQ) continue; /* check_sweep reports it */
        const char *rest = path + len + 1;
        char where[512];
        for (int i = 0; i < list->n; i++) {
            ttt_cfg_node *v = list->items[i];
            const ttt_cfg_node *blocker = NULL;
            size_t prefix = 0;
            if (is_null(v)) {
                ttt_cfg_node *m = ttt_cfg_new_map(v);
                ttt_cfg_free(v);
                list->items[i] = v = m;
            }
            if (v->kind != TTT_CFG_MAP ||
                set_path(v, rest, ttt_cfg_clone(val), origin, &blocker, &prefix) != TTT_OK) {
                char got[160];
                describe_node(blocker ? blocker : v, got, sizeof got);
                return ttt_error_set(
                    err, TTT_ERR_ARG,
                    "--set '%s': the sweep axis '%s' (at %s) sets '%s' to a whole value in every "
                    "point, and its value %d is %s, which cannot hold '%s', so this override "
                    "would be lost; expected to choose the axis values instead, e.g. --set "
                    "'sweep.%s=[...]'",
                    assignment, axis, ttt_cfg_where(v, where, sizeof where), axis, i + 1, got,
                    rest, axis);
            }
        }
        for (int i = 0; i < list->n; i++)
            for (int j = i + 1; j < list->n; j++) {
                char *fi = ttt_cfg_to_flow(list->items[i]), *fj = ttt_cfg_to_flow(list->items[j]);
                const int same = strcmp(fi, fj) == 0;
                ttt_status s = TTT_OK;
                if (same)
                    s = ttt_error_set(
                        err, TTT_ERR_ARG,
                        "--set '%s': the sweep axis '%s' (at %s) gives '%s' in every point; "
                        "setting '%s' inside each of its values makes values %d and %d the same "
                        "(%s); to run one value of the axis, expected e.g. --set 'sweep.%s=[%s]'",
                        assignment, axis, ttt_cfg_where(list, where, sizeof where), axis, rest,
                        i + 1, j + 1, fi, axis, fi);
                free(fi);
                free(fj);
                if (same) return s;
            }
    }
    return TTT_OK;
}

ttt_status ttt_cfg_apply_set(ttt_cfg_node *root, const char *assignment, ttt_error *err) {
    if (!assignment)
        return ttt_error_set(err, TTT_ERR_ARG, "--set: no assignment (NULL); expected "
                             "KEY.PATH=VALUE");
    if (!root)
        return ttt_error_set(err, TTT_ERR_ARG, "--set '%s': no configuration to apply it to",
                             assignment);
    const unsigned long oom_mark = oom_count;
    if (root->kind != TTT_CFG_MAP)
        return ttt_error_set(err, TTT_ERR_ARG, "--set '%s': the configuration is not a mapping",
                             assignment);
    const char *eq = strchr(assignment, '=');
    if (!eq)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "--set '%s': expected KEY.PATH=VALUE (e.g. "
                             "--set layer.optimizer.lr=0.1)",
                             assignment);
    const char *a = assignment, *z = eq;
    while (a < z && isspace((unsigned char)*a)) a++;
    while (z > a && isspace((unsigned char)z[-1])) z--;
    char *path = xstrndup(a, (size_t)(z - a));
    if (!path) return ttt_cfg_out_of_memory(err, "--set");
    if (!valid_path(path)) {
        ttt_status s = ttt_error_set(err, TTT_ERR_ARG,
                                     "--set '%s': '%s' is not a key path; expected "
                                     "KEY.PATH=VALUE with non-empty keys separated by dots",
                                     assignment, path);
        free(path);
        return s;
    }

    /* Every node made from this option is located at the option itself. */
    sbuf origin_text = {0};
    sb_printf(&origin_text, "--set %s", assignment);
    ttt_cfg_node origin;
    memset(&origin, 0, sizeof origin);
    origin.file = origin_text.data;

    const char *text = eq + 1, *end = text + strlen(text);
    while (isspace((unsigned char)*text)) text++;
    while (end > text && isspace((unsigned char)end[-1])) end--;
    ttt_error verr;
    ttt_cfg_node *val = NULL;
    ttt_status s = load_text(text, (size_t)(end - text), origin.file, &origin, 0, &val, &verr);
    if (s == TTT_ERR_NOMEM) goto done;
    if (s != TTT_OK) {
        int has_expected = strstr(verr.msg, "; expected") != NULL;
        s = ttt_error_set(err, TTT_ERR_ARG, "--set '%s': the value is not valid YAML: %s%s",
                          assignment, verr.msg,
                          has_expected ? ""
                                       : "; expected KEY.PATH=VALUE with a value such as 0.5, "
                                         "sgd, [8, 16] or {name: sgd}");
        goto done;
    }
    if ((val->kind == TTT_CFG_MAP && *text != '{') || (val->kind == TTT_CFG_SEQ && *text != '[')) {
        /* Only flow collections are meant as structure on a command line; "a: b" or "- x" is
         * text that happens to look like block YAML. */
        ttt_cfg_free(val);
        val = ttt_cfg_new_scalar(NULL, &origin);
        if (val) {
            val->scalar = xstrndup(text, (size_t)(end - text));
            val->quoted = 1;
        }
    }

    if (strncmp(path, "sweep.", 6) == 0) {
        /* Sweep axes are dotted paths stored as single keys. */
        int si = map_child(root, "sweep", &origin);
        if (si < 0) {
            ttt_cfg_free(val);
            goto done;
        }
        ttt_cfg_node *sweep = root->items[si];
        if (sweep->kind != TTT_CFG_MAP) {
            char where[512];
            s = ttt_error_set(err, TTT_ERR_ARG,
                              "--set '%s': 'sweep' (at %s) is %s; expected a mapping of key "
                              "paths to lists",
                              assignment, ttt_cfg_where(sweep, where, sizeof where),
                              kind_name(sweep));
            ttt_cfg_free(val);
            goto done;
        }
        ttt_cfg_map_set(sweep, path + 6, val);
        goto done;
    }

    s = pin_inside_sweep(root, path, val, &origin, assignment, err);
    if (s != TTT_OK) {
        ttt_cfg_free(val);
        goto done;
    }
    const ttt_cfg_node *blocker = NULL;
    size_t prefix = 0;
    s = set_path(root, path, val, &origin, &blocker, &prefix);
    if (s == TTT_ERR_NOMEM) goto done;
    if (s != TTT_OK) {
        char where[512];
        s = ttt_error_set(err, TTT_ERR_ARG,
                          "--set '%s': '%.*s' (at %s) is %s, so it cannot hold '%s'; expected "
                          "a path through mappings",
                          assignment, (int)prefix, path,
                          ttt_cfg_where(blocker, where, sizeof where),
                          kind_name(blocker), path + prefix + 1);
        goto done;
    }
    unpin_sweep(root, path);
done:
    ttt_strbuf_free(&origin_text);
    /* the tree may have been changed in part; the caller discards it on an error */
    if (oom_count != oom_mark) s = ttt_cfg_out_of_memory(err, "--set");
    free(path);
    return s;
}

void ttt_cfg_points_free(ttt_cfg_node **points, char **labels, int n_points) {
    for (int i = 0; i < n_points; i++) {
        if (points) ttt_cfg_free(points[i]);
        if (labels) free(labels[i]);
    }
    free(points);
    free(labels);
}

/* The value as it appears in a label: scalars as written, anything else in flow style. */
static void put_label_value(sbuf *b, const ttt_cfg_node *v) {
    if (v->kind == TTT_CFG_SCALAR)
        sb_puts(b, v->scalar ? v->scalar : "null");
    else
        put_flow(b, v);
}

static ttt_status check_sweep(const ttt_cfg_node *sweep, long *total, ttt_error *err) {
    if (sweep->kind != TTT_CFG_MAP)
        return type_error(err, sweep, "sweep",
                          "a mapping from key paths to lists of values (e.g. "
                          "'layer.mini_batch: [1, 16]')");
    long n = 1;
    int overflow = 0;
    for (int i = 0; i < sweep->n; i++) {
        const char *key = sweep->keys[i];
        const ttt_cfg_node *v = sweep->items[i];
        if (!valid_path(key) || strcmp(key, "sweep") == 0 || strncmp(key, "sweep.", 6) == 0)
            return key_error(err, TTT_ERR_CONFIG, sweep, i,
                             "sweep axis '%s' is not a key path; expected keys separated by dots "
                             "such as layer.mini_batch",
                             key);
        if (v->kind != TTT_CFG_SEQ) {
            char got[160];
            describe_node(v, got, sizeof got);
            return ttt_cfg_error(err, TTT_ERR_CONFIG, v,
                                 "sweep axis '%s': expected a list of values such as [1, 16, 64], "
                                 "got %s%s",
                                 key, got,
                                 v->kind == TTT_CFG_SCALAR ? " (put one value in [ ] to pin it)"
                                                           : "");
        }
        if (v->n == 0)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, v,
                                 "sweep axis '%s': the list is empty; expected at least one "
                                 "value",
                                 key);
        if (n > TTT_CFG_MAX_SWEEP_POINTS / v->n) overflow = 1;
        if (!overflow) n *= v->n;
    }
    if (overflow || n > TTT_CFG_MAX_SWEEP_POINTS) {
        sbuf sizes = {0};
        for (int i = 0; i < sweep->n; i++)
            sb_printf(&sizes, "%s%d", i ? " x " : "", sweep->items[i]->n);
        ttt_status s = ttt_cfg_error(err, TTT_ERR_RANGE, sweep,
                                     "sweep: %s combinations is too many; expected at most %d "
                                     "points",
                                     text_or_empty(sizes.data), TTT_CFG_MAX_SWEEP_POINTS);
        ttt_strbuf_free(&sizes);
        return s;
    }
    *total = n;
    return TTT_OK;
}

ttt_status ttt_cfg_sweep_expand(const ttt_cfg_node *root, ttt_cfg_node ***points, char ***labels,
                                int *n_points, ttt_error *err) {
    TTT_ASSERT(root && points && labels && n_points);
    *points = NULL;
    *labels = NULL;
    *n_points = 0;
    if (root->kind != TTT_CFG_MAP)
        return type_error(err, root, NULL, "a mapping of settings at the top level");
    const ttt_cfg_node *sweep = ttt_cfg_get(root, "sweep");
    long total = 1;
    if (sweep && !is_null(sweep)) TTT_TRY(check_sweep(sweep, &total, err));
    int axes = (sweep && sweep->kind == TTT_CFG_MAP) ? sweep->n : 0;

    const unsigned long oom_mark = oom_count;
    ttt_cfg_node *base = ttt_cfg_clone(root);
    if (!base) return ttt_cfg_out_of_memory(err, "the sweep");
    ttt_cfg_map_remove(base, "sweep");
    /* Every point is a full copy: a large document (aliases can make one from a few lines) times
     * many points would exhaust memory, so the product is bounded too. */
    const long per_point = count_nodes(base);
    if (total > 1 && per_point > MAX_SWEEP_NODES / total) {
        ttt_cfg_free(base);
        return ttt_cfg_error(err, TTT_ERR_RANGE, sweep,
                             "sweep: %ld points of %ld values each is too much to expand; "
                             "expected at most %ld values over all points (fewer points or a "
                             "smaller document)",
                             total, per_point, MAX_SWEEP_NODES);
    }
    const long per_point_bytes = count_text_bytes(base);
    if (total > 1 && per_point_bytes > TTT_CFG_MAX_EXPANDED_BYTES / total) {
        ttt_cfg_free(base);
        return ttt_cfg_error(err, TTT_ERR_RANGE, sweep,
                             "sweep: %ld points of %ld bytes of text each is too much to expand; "
                             "expected at most %ld bytes over all points (fewer points or a "
                             "shorter document: every point is a full copy)",
                             total, per_point_bytes, TTT_CFG_MAX_EXPANDED_BYTES);
    }
    ttt_cfg_node **pts = xmalloc((size_t)total * sizeof *pts);
    char **labs = xmalloc((size_t)total * sizeof *labs);
    int made = 0;
    ttt_status s = TTT_OK;
    for (long p = 0; p < total && s == TTT_OK && pts && labs; p++) {
        ttt_cfg_node *pt = ttt_cfg_clone(base);
        sbuf label = {0};
        /* Mixed-radix digits of p with the last axis fastest, so the first varies slowest. */
        long rest = p;
        int *idx = xmalloc((size_t)(axes ? axes : 1) * sizeof *idx);
        if (!pt || !idx) {
            ttt_cfg_free(pt);
            free(idx);
            s = TTT_ERR_NOMEM;
            break;
        }
        for (int a = axes - 1; a >= 0; a--) {
            idx[a] = (int)(rest % sweep->items[a]->n);
            rest /= sweep->items[a]->n;
        }
        for (int a = 0; a < axes && s == TTT_OK; a++) {
            const ttt_cfg_node *v = sweep->items[a]->items[idx[a]];
            const ttt_cfg_node *blocker = NULL;
            size_t prefix = 0;
            ttt_cfg_node *copy = ttt_cfg_clone(v);
            ttt_status ps = copy ? set_path(pt, sweep->keys[a], copy, v, &blocker, &prefix)
                                 : TTT_ERR_NOMEM;
            if (ps == TTT_ERR_NOMEM) {
                s = ps;
                break;
            }
            if (ps != TTT_OK) {
                char where[512];
                s = key_error(err, TTT_ERR_CONFIG, sweep, a,
                              "sweep axis '%s': '%.*s' (at %s) is %s, so it cannot hold '%s'; "
                              "expected a path through mappings",
                              sweep->keys[a], (int)prefix, sweep->keys[a],
                              ttt_cfg_where(blocker, where, sizeof where), kind_name(blocker),
                              sweep->keys[a] + prefix + 1);
                break;
            }
            if (a) sb_puts(&label, ", ");
            sb_printf(&label, "%s=", sweep->keys[a]);
            put_label_value(&label, v);
        }
        free(idx);
        if (s != TTT_OK) {
            ttt_cfg_free(pt);
            ttt_strbuf_free(&label);
            break;
        }
        pts[made] = pt;
        labs[made] = sb_take(&label);
        made++;
    }
    ttt_cfg_free(base);
    /* a label or a value lost to a failed allocation fails the whole expansion */
    if (s == TTT_ERR_NOMEM || !pts || !labs || oom_count != oom_mark)
        s = ttt_cfg_out_of_memory(err, "the sweep");
    if (s != TTT_OK) {
        ttt_cfg_points_free(pts, labs, made);
        return s;
    }
    *points = pts;
    *labels = labs;
    *n_points = made;
    return TTT_OK;
}
