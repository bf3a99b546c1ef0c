/* What the files of the configuration (src/config/config_*.c) share and nothing else sees: the
 * per-thread count of failed allocations, the allocation and string helpers, node construction,
 * the error helpers and the conversions. Private to src/config. */
#ifndef TTT_CONFIG_INTERNAL_H
#define TTT_CONFIG_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>

#include "config.h"
#include "strbuf.h"

/* Nesting deeper than this is refused: the loader, clone and free are recursive, and no
 * experiment file needs more than a handful of levels. */
#define TTT_CFG_MAX_DEPTH 64

/* Config files are read whole; anything this large is not a config file. */
#define TTT_CFG_MAX_FILE_BYTES (16L << 20)

/* The sweep points together may hold at most this many values (nodes): 10000 points of 200. */
#define TTT_CFG_MAX_SWEEP_NODES 2000000L

/* Room for a dotted path in messages (longer paths are truncated, never overflowed). */
#define TTT_CFG_PATH_BUF 256

extern _Thread_local unsigned long ttt_cfg_oom_count; /* allocations that failed on this thread */

extern _Thread_local unsigned long
    ttt_cfg_oom_base; /* ttt_cfg_oom_count at the last ttt_cfg_oom_clear */

/* NULL (counted) when memory runs out; p is then still the caller's. */
void *ttt_cfg_xrealloc(void *p, size_t n);

void *ttt_cfg_xmalloc(size_t n);

char *ttt_cfg_xstrndup(const char *s, size_t n);

char *ttt_cfg_xstrdup(const char *s);

/* ASCII-only case folding: config words are ASCII and the locale must not change parsing. */
int ttt_cfg_lower(int c);

int ttt_cfg_ieq(const char *a, const char *b);

int ttt_cfg_is_digit(char c);

/* Text is built with the core's ttt_strbuf; a failed append is counted like any failed
 * allocation (see the top of src/config/config_tree.c). A zeroed ttt_cfg_sbuf is an empty
 * builder. */
typedef ttt_strbuf ttt_cfg_sbuf;

void ttt_cfg_sb_check(ttt_cfg_sbuf *b);

void ttt_cfg_sb_putn(ttt_cfg_sbuf *b, const char *s, size_t n);

void ttt_cfg_sb_puts(ttt_cfg_sbuf *b, const char *s);

void ttt_cfg_sb_putc(ttt_cfg_sbuf *b, char c);

void ttt_cfg_sb_printf(ttt_cfg_sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The text built so far; ownership passes to the caller. NULL (counted) when memory ran out. */
char *ttt_cfg_sb_take(ttt_cfg_sbuf *b);

/* A taken text for a message, "" when it could not be built. */
const char *ttt_cfg_text_or_empty(const char *s);

void ttt_cfg_join_path(char *buf, size_t len, const char *path, const char *key);

/* "a, b, c" */
void ttt_cfg_sb_join(ttt_cfg_sbuf *b, const char *const *names, int n);

ttt_cfg_node *ttt_cfg_node_new(ttt_cfg_kind kind, const char *file, int line, int col);

ttt_cfg_node *ttt_cfg_node_at(ttt_cfg_kind kind, const ttt_cfg_node *where);

void ttt_cfg_set_location(ttt_cfg_node *n, const char *file, int line, int col);

/* Room for `need` entries; 0 (counted) when memory runs out, the node unchanged but for
 * arrays that grew (cap is raised only when all of them did). */
int ttt_cfg_reserve(ttt_cfg_node *n, int need);

/* The YAML 1.2 core-schema spellings of null (plain scalars only; "" is null too). */
int ttt_cfg_is_null_word(const char *s);

int ttt_cfg_is_null(const ttt_cfg_node *n);

int ttt_cfg_find_key(const ttt_cfg_node *map, const char *key);

/* A string -> index table (open addressing, linear probing, kept at most half full) so that the
 * loader finds duplicate keys and anchors in time linear in the document: a scan per key made
 * a mapping of n keys cost n^2 / 2 comparisons (200 000 keys: minutes). `names` is the caller's
 * array the stored indices point into; the table holds index + 1 (0 = empty slot). */
typedef struct ttt_cfg_str_index {
    int *slot;
    size_t cap; /* a power of two, or 0 */
    size_t n;
    size_t seed; /* set when the table is first filled */
} ttt_cfg_str_index;

/* Index stored for `s`, or -1. */
int ttt_cfg_str_index_find(const ttt_cfg_str_index *x, const char *const *names, const char *s);

/* Store `idx` for names[idx], replacing an entry of the same name (the latest wins). */
void ttt_cfg_str_index_put(ttt_cfg_str_index *x, const char *const *names, int idx);

void ttt_cfg_str_index_free(ttt_cfg_str_index *x);

/* Append without looking for an existing key (callers have checked). Takes val; 0 (val freed,
 * the failure counted) when memory runs out or val is NULL (a failure already counted). */
int ttt_cfg_map_append(ttt_cfg_node *map, const char *key, int key_line, int key_col,
                      ttt_cfg_node *val);

long ttt_cfg_count_nodes(const ttt_cfg_node *n);

/* Bytes of text (scalar values and keys) in the tree: what copies of it cost beyond its nodes. */
long ttt_cfg_count_text_bytes(const ttt_cfg_node *n);

ttt_status ttt_cfg_key_error(ttt_error *err, ttt_status s, const ttt_cfg_node *map, int i,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));

const char *ttt_cfg_kind_name(const ttt_cfg_node *n);

/* What a node is, for "got ..." in messages. */
void ttt_cfg_describe_node(const ttt_cfg_node *n, char *got, size_t len);

/* "<where>: <label>: expected <expected>, got <what the node is>" */
ttt_status ttt_cfg_type_error(ttt_error *err, const ttt_cfg_node *n, const char *label,
                             const char *expected);

/* Parse `text` into one node. `fixed` (may be NULL) gives every node its location; an empty
 * document is then a null scalar, while for a file it is an error (want_map). */
ttt_status ttt_cfg_load_text(const char *text, size_t len, const char *name,
                            const ttt_cfg_node *fixed, int want_map, ttt_cfg_node **out,
                            ttt_error *err);

/* Would a plain scalar with this text be read as a number (by us or another YAML reader)? */
int ttt_cfg_looks_numeric(const char *s);

ttt_status ttt_cfg_conv_int(const ttt_cfg_node *n, long *out, const char *label, ttt_error *err);

ttt_status ttt_cfg_conv_float(const ttt_cfg_node *n, double *out, const char *label,
                             ttt_error *err);

ttt_status ttt_cfg_conv_bool(const ttt_cfg_node *n, int *out, const char *label, ttt_error *err);

void ttt_cfg_put_flow(ttt_cfg_sbuf *b, const ttt_cfg_node *n);

/* A non-empty dotted path without empty segments. */
int ttt_cfg_valid_path(const char *p);

/* root[path] = val (ownership taken), creating maps for missing or empty intermediates. When an
 * intermediate is something else, returns TTT_ERR_CONFIG with *blocker at it and *prefix the
 * length of the path leading to it; the caller words the message. TTT_ERR_NOMEM (counted) when
 * memory runs out. */
ttt_status ttt_cfg_set_path(ttt_cfg_node *root, const char *path, ttt_cfg_node *val,
                           const ttt_cfg_node *where, const ttt_cfg_node **blocker,
                           size_t *prefix);

#endif
