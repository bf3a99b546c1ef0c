/* Loading YAML into a configuration tree.
 *
 * The loader drives libyaml's event parser directly (rather than its document API) so that every
 * node, and every mapping key, keeps the line:column where it was written; all later complaints
 * (unknown key, wrong type, out of range, unknown name) point at that spot. Allocation failures
 * are counted as src/config/config_tree.c describes. */
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
    ttt_cfg_str_index anchor_index; /* name -> its latest definition */
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
    if (L->fixed) return ttt_cfg_node_at(kind, L->fixed);
    int line, col;
    loc_from_mark(L, m, &line, &col);
    return ttt_cfg_node_new(kind, L->name, line, col);
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
        void *p = ttt_cfg_xrealloc(L->anchor_names, (size_t)cap * sizeof *L->anchor_names);
        if (p) L->anchor_names = p;
        void *q =
            p ? ttt_cfg_xrealloc(L->anchor_nodes, (size_t)cap * sizeof *L->anchor_nodes) : NULL;
        if (q) L->anchor_nodes = q;
        if (!p || !q) {
            free(name);
            return;
        }
        L->cap_anchors = cap;
    }
    L->anchor_names[L->n_anchors] = name;
    L->anchor_nodes[L->n_anchors] = node;
    ttt_cfg_str_index_put(&L->anchor_index, (const char *const *)L->anchor_names, L->n_anchors);
    L->n_anchors++;
}

static ttt_status expand_alias(loader *L, const yaml_event_t *ev, ttt_cfg_node **out) {
    const char *name = (const char *)ev->data.alias.anchor;
    const ttt_cfg_node *target = NULL;
    /* The latest definition wins, as in YAML; an anchor is only registered once its node is
     * complete, so an alias cannot refer to its own enclosing node (no cycles). */
    int ai = ttt_cfg_str_index_find(&L->anchor_index, (const char *const *)L->anchor_names, name);
    if (ai >= 0) target = L->anchor_nodes[ai];
    if (!target)
        return load_error(L, TTT_ERR_YAML, ev->start_mark,
                          "unknown alias '*%s'; expected an anchor '&%s' defined before it", name,
                          name);
    L->alias_nodes += ttt_cfg_count_nodes(target);
    if (L->alias_nodes > TTT_CFG_MAX_ALIAS_NODES)
        return load_error(L, TTT_ERR_YAML, ev->start_mark,
                          "alias '*%s': aliases expand to more than %d values in total; "
                          "expected a smaller document (nested aliases grow exponentially)",
                          name, TTT_CFG_MAX_ALIAS_NODES);
    L->alias_bytes += ttt_cfg_count_text_bytes(target);
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
        ttt_cfg_set_location(c, L->fixed->file, L->fixed->line, L->fixed->col);
    } else {
        int line, col;
        loc_from_mark(L, ev->start_mark, &line, &col);
        ttt_cfg_set_location(c, L->name, line, col);
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
        char child_path[TTT_CFG_PATH_BUF];
        snprintf(child_path, sizeof child_path, "%s[%d]", path, i);
        ttt_cfg_node *child;
        TTT_TRY(parse_node(L, &ev, child_path, depth + 1, &child));
        ttt_cfg_seq_push(seq, child);
    }
}

static ttt_status parse_map_keys(loader *L, ttt_cfg_node *map, const char *path, int depth,
                                 ttt_cfg_str_index *seen);

static ttt_status parse_map(loader *L, ttt_cfg_node *map, const char *path, int depth) {
    ttt_cfg_str_index seen = {0};
    ttt_status s = parse_map_keys(L, map, path, depth, &seen);
    ttt_cfg_str_index_free(&seen);
    return s;
}

static ttt_status parse_map_keys(loader *L, ttt_cfg_node *map, const char *path, int depth,
                                 ttt_cfg_str_index *seen) {
    for (;;) {
        yaml_event_t ev;
        TTT_TRY(next_event(L, &ev));
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return TTT_OK;
        }
        if (ev.type != YAML_SCALAR_EVENT ||
            (ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
             (ev.data.scalar.length == 0 || ttt_cfg_is_null_word((char *)ev.data.scalar.value)))) {
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
        char *key = ttt_cfg_xstrndup((const char *)ev.data.scalar.value, ev.data.scalar.length);
        yaml_event_delete(&ev);
        if (!key) return ttt_cfg_out_of_memory(L->err, L->name);

        int dup = ttt_cfg_str_index_find(seen, (const char *const *)map->keys, key);
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
        char child_path[TTT_CFG_PATH_BUF];
        ttt_cfg_join_path(child_path, sizeof child_path, path, key);
        ttt_cfg_node *child;
        ttt_status s = next_event(L, &ev);
        if (s == TTT_OK) s = parse_node(L, &ev, child_path, depth + 1, &child);
        if (s != TTT_OK) {
            free(key);
            return s;
        }
        int added = ttt_cfg_map_append(map, key, kline, kcol, child);
        free(key);
        if (!added) return ttt_cfg_out_of_memory(L->err, L->name);
        ttt_cfg_str_index_put(seen, (const char *const *)map->keys, map->n - 1);
    }
}

/* Build the node that starts with `ev` (consumed). On failure nothing is left allocated. */
static ttt_status parse_node(loader *L, yaml_event_t *ev, const char *path, int depth,
                             ttt_cfg_node **out) {
    *out = NULL;
    if (depth > TTT_CFG_MAX_DEPTH) {
        ttt_status s = load_error(L, TTT_ERR_YAML, ev->start_mark,
                                  "values are nested more than %d levels deep; expected a "
                                  "flatter structure",
                                  TTT_CFG_MAX_DEPTH);
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
        int null = !n->quoted && (len == 0 || ttt_cfg_is_null_word(v));
        if (!null) n->scalar = ttt_cfg_xstrndup(v, len);
        anchor = ttt_cfg_xstrdup((const char *)ev->data.scalar.anchor);
        yaml_event_delete(ev);
        break;
    }
    case YAML_SEQUENCE_START_EVENT:
        anchor = ttt_cfg_xstrdup((const char *)ev->data.sequence_start.anchor);
        yaml_event_delete(ev);
        s = parse_seq(L, n, path, depth);
        break;
    case YAML_MAPPING_START_EVENT:
        anchor = ttt_cfg_xstrdup((const char *)ev->data.mapping_start.anchor);
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
ttt_status ttt_cfg_load_text(const char *text, size_t len, const char *name,
                            const ttt_cfg_node *fixed, int want_map, ttt_cfg_node **out,
                            ttt_error *err) {
    *out = NULL;
    const unsigned long oom_mark = ttt_cfg_oom_count;
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
            root = fixed ? ttt_cfg_node_at(TTT_CFG_SCALAR, fixed)
                         : ttt_cfg_node_new(TTT_CFG_SCALAR, L.name, 1, 1);
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
                          ttt_cfg_kind_name(root));

    yaml_parser_delete(&L.parser);
    for (int i = 0; i < L.n_anchors; i++) free(L.anchor_names[i]);
    free(L.anchor_names);
    free(L.anchor_nodes);
    ttt_cfg_str_index_free(&L.anchor_index);
    /* a value, key or anchor lost to a failed allocation makes the whole load fail, whatever
     * the parse said after it (an anchor not registered reads as an unknown alias) */
    if (ttt_cfg_oom_count != oom_mark) s = ttt_cfg_out_of_memory(err, L.name);
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
    return ttt_cfg_load_text(text, strlen(text), name, NULL, 1, out, err);
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
    ttt_cfg_sbuf b = {0};
    char chunk[8192];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        ttt_cfg_sb_putn(&b, chunk, got);
        if (b.len > (size_t)TTT_CFG_MAX_FILE_BYTES) break;
    }
    int read_errno = ferror(f) ? errno : 0;
    fclose(f);
    if (read_errno || b.len > (size_t)TTT_CFG_MAX_FILE_BYTES) {
        ttt_strbuf_free(&b);
        if (read_errno)
            return ttt_error_set(err, TTT_ERR_IO, "cannot read '%s': %s", path,
                                 strerror(read_errno));
        return ttt_error_set(err, TTT_ERR_IO, "'%s' is larger than %ld bytes; expected a "
                             "YAML experiment file", path, TTT_CFG_MAX_FILE_BYTES);
    }
    size_t n = b.len;
    char *text = ttt_cfg_sb_take(&b);
    if (!text) return ttt_cfg_out_of_memory(err, path);
    ttt_status s = ttt_cfg_load_text(text, n, path, NULL, 1, out, err);
    free(text);
    return s;
}
