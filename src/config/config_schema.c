/* Option schemas: validating a mapping against a ttt_option table (types, ranges, choices, lists,
 * unknown keys with the closest known name) and filling in every default. */
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
            int ca = ttt_cfg_lower((unsigned char)a[i - 1]),
                cb = ttt_cfg_lower((unsigned char)b[j - 1]);
            size_t best = prev[j - 1] + (ca != cb);
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && ca == ttt_cfg_lower((unsigned char)b[j - 2]) &&
                ttt_cfg_lower((unsigned char)a[i - 2]) == cb && prev2[j - 2] + 1 < best)
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
    if (ttt_cfg_oom_count != ttt_cfg_oom_base)
        return ttt_cfg_out_of_memory(err, what); /* as check_map */
    ttt_cfg_sbuf list = {0};
    ttt_cfg_sb_join(&list, names, n_names);
    char *valid = ttt_cfg_sb_take(&list);
    if (!valid) return ttt_cfg_out_of_memory(err, "the list of names");
    ttt_status s = TTT_OK;
    if (n->kind != TTT_CFG_SCALAR || !n->scalar) {
        char expected[TTT_ERROR_MSG_LEN];
        snprintf(expected, sizeof expected, "%s %s name (one of: %s)", article(what), what,
                 valid);
        s = ttt_cfg_type_error(err, n, NULL, expected);
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
        TTT_TRY(ttt_cfg_conv_int(n, &i, label, err));
        v = (double)i;
        /* Compared as integers: above 2^53 a long does not convert to double exactly (2^53 + 1
         * would pass a maximum of 2^53). The bounds are rounded inwards first. */
        if (o->min <= o->max)
            out = (o->min > (double)LONG_MIN && i < (long)ceil(o->min)) ||
                  (o->max < (double)LONG_MAX && i > (long)floor(o->max));
    } else {
        TTT_TRY(ttt_cfg_conv_float(n, &v, label, err));
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
    *copy = ttt_cfg_xstrdup(choices ? choices : "");
    if (!*copy) return -1;
    int n = 1;
    for (const char *p = *copy; *p; p++) n += *p == '|';
    *names = ttt_cfg_xmalloc((size_t)n * sizeof **names);
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
    ttt_cfg_sbuf list = {0};
    ttt_cfg_sb_join(&list, names, k);
    char *valid = ttt_cfg_sb_take(&list);
    if (!valid) {
        free(names);
        free(copy);
        return ttt_cfg_out_of_memory(err, label);
    }
    ttt_status s = TTT_OK;
    if (n->kind != TTT_CFG_SCALAR || !n->scalar) {
        char expected[TTT_ERROR_MSG_LEN];
        snprintf(expected, sizeof expected, "one of: %s", valid);
        s = ttt_cfg_type_error(err, n, label, expected);
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
    ttt_status s = ttt_cfg_load_text(o->def, strlen(o->def), "default", &pos, 0, &n, &e);
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
                            const char *const *extra, int fill, ttt_error *err);

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
    const char **names = ttt_cfg_xmalloc((size_t)(n ? n : 1) * sizeof *names);
    if (!names) return ttt_cfg_out_of_memory(err, path && *path ? path : "the top level");
    int k = 0;
    for (const ttt_option *o = opts; o->name; o++) names[k++] = o->name;
    for (const char *const *e = extra; e && *e; e++) names[k++] = *e;
    ttt_cfg_sbuf list = {0};
    ttt_cfg_sb_join(&list, names, k);
    char *valid = ttt_cfg_sb_take(&list);
    if (!valid) {
        free(names);
        return ttt_cfg_out_of_memory(err, path && *path ? path : "the top level");
    }
    char in[TTT_CFG_PATH_BUF + 8];
    if (path && *path)
        snprintf(in, sizeof in, " in %s", path);
    else
        snprintf(in, sizeof in, " at the top level");
    const char *key = map->keys[i];
    const char *close = ttt_closest_name(key, names, k);
    /* A section left empty just above ("optimizer:" with its keys not indented under it) makes
     * its keys land here; say so rather than only listing what is valid at this level. */
    char hint[TTT_CFG_PATH_BUF + 160] = "";
    for (int j = i - 1; j >= 0; j--) {
        const ttt_option *oj = NULL;
        for (const ttt_option *o = opts; o->name; o++)
            if (strcmp(o->name, map->keys[j]) == 0) oj = o;
        if (!oj || oj->type != TTT_OPT_MAP) continue;
        if (ttt_cfg_is_null(map->items[j])) {
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
        s = ttt_cfg_key_error(err, TTT_ERR_CONFIG, map, i,
                              "unknown key '%s'%s%s; did you mean '%s'? (valid keys: %s)", key, in,
                              hint, close, valid);
    else if (k > 0)
        s = ttt_cfg_key_error(err, TTT_ERR_CONFIG, map, i,
                              "unknown key '%s'%s%s; expected one of: %s", key, in, hint, valid);
    else
        s = ttt_cfg_key_error(err, TTT_ERR_CONFIG, map, i,
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
        if (!seq || !ttt_cfg_reserve(seq, 1)) {
            ttt_cfg_free(seq);
            return ttt_cfg_out_of_memory(err, label);
        }
        ttt_cfg_seq_push(seq, v);
        map->items[i] = v = seq;
    }
    if (v->kind != TTT_CFG_SEQ) return ttt_cfg_type_error(err, v, label, type_desc(o->type));
    /* Every list option is a set of measurements or sizes: an empty one would run and produce
     * nothing. */
    if (v->n == 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, v,
                             "%s: the list is empty; expected at least one value (%s)", label,
                             type_desc(o->type));
    for (int j = 0; j < v->n; j++) {
        char elem[TTT_CFG_PATH_BUF + 16];
        snprintf(elem, sizeof elem, "%s[%d]", label, j);
        TTT_TRY(check_number(v->items[j], o, o->type == TTT_OPT_INT_LIST, elem, err));
    }
    return TTT_OK;
}

static ttt_status check_value(ttt_cfg_node *map, int i, const ttt_option *o, const char *label,
                              ttt_error *err) {
    ttt_cfg_node *v = map->items[i];
    if (ttt_cfg_is_null(v)) {
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
            int def_null = ttt_cfg_is_null(d);
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
        if (ttt_cfg_is_null(v)) return TTT_OK;
    }
    switch (o->type) {
    case TTT_OPT_INT: return check_number(v, o, 1, label, err);
    case TTT_OPT_FLOAT: return check_number(v, o, 0, label, err);
    case TTT_OPT_BOOL: {
        int b;
        return ttt_cfg_conv_bool(v, &b, label, err);
    }
    case TTT_OPT_STRING:
        if (v->kind != TTT_CFG_SCALAR) return ttt_cfg_type_error(err, v, label, "a string");
        return TTT_OK;
    case TTT_OPT_CHOICE: return check_choice(v, o, label, err);
    case TTT_OPT_INT_LIST:
    case TTT_OPT_FLOAT_LIST: return check_list(map, i, o, label, err);
    case TTT_OPT_MAP:
        if (v->kind != TTT_CFG_MAP) return ttt_cfg_type_error(err, v, label, "a mapping");
        return TTT_OK;
    }
    return TTT_OK;
}

/* Both checks: `fill` appends every absent option's default (ttt_cfg_check_map); without it the
 * keys that are present are checked and the absent ones left absent (ttt_cfg_check_given). */
static ttt_status check_with(ttt_cfg_node *map, const char *path, const ttt_option *opts,
                             const char *const *extra, int fill, ttt_error *err) {
    TTT_ASSERT(map && opts);
    const char *p = path ? path : "";
    /* Sticky: a tree that lost a value to a failed allocation since the last ttt_cfg_oom_clear
     * is never called valid, so no reader after a check meets a missing key. */
    if (ttt_cfg_oom_count != ttt_cfg_oom_base)
        return ttt_cfg_out_of_memory(err, *p ? p : "the configuration");
    ttt_status s = check_map(map, p, opts, extra, fill, err);
    if (s == TTT_OK && ttt_cfg_oom_count != ttt_cfg_oom_base)
        s = ttt_cfg_out_of_memory(err, *p ? p : "the configuration");
    return s;
}

ttt_status ttt_cfg_check_map(ttt_cfg_node *map, const char *path, const ttt_option *opts,
                             const char *const *extra, ttt_error *err) {
    return check_with(map, path, opts, extra, 1, err);
}

ttt_status ttt_cfg_check_given(ttt_cfg_node *map, const char *path, const ttt_option *opts,
                               const char *const *extra, ttt_error *err) {
    return check_with(map, path, opts, extra, 0, err);
}

static ttt_status check_map(ttt_cfg_node *map, const char *p, const ttt_option *opts,
                            const char *const *extra, int fill, ttt_error *err) {
    if (map->kind != TTT_CFG_MAP) return ttt_cfg_type_error(err, map, *p ? p : NULL, "a mapping");
    for (int i = 0; i < map->n; i++)
        if (!find_option(opts, map->keys[i]) && !in_list(extra, map->keys[i]))
            return unknown_key(map, i, p, opts, extra, err);
    for (const ttt_option *o = opts; o->name; o++) {
        char label[TTT_CFG_PATH_BUF];
        ttt_cfg_join_path(label, sizeof label, p, o->name);
        int i = ttt_cfg_find_key(map, o->name);
        if (i < 0 && !fill) continue;
        if (i < 0) {
            if (!o->def && o->type != TTT_OPT_MAP) {
                char help[200] = "";
                if (o->help && *o->help) snprintf(help, sizeof help, " (%s)", o->help);
                return ttt_cfg_error(err, TTT_ERR_CONFIG, map,
                                     "%s%smissing required key '%s'; expected '%s:' with %s%s",
                                     p, *p ? ": " : "", o->name, o->name, type_desc(o->type),
                                     help);
            }
            if (!ttt_cfg_map_append(map, o->name, 0, 0, default_node(o, map)))
                return ttt_cfg_out_of_memory(err, label);
            i = map->n - 1;
        }
        TTT_TRY(check_value(map, i, o, label, err));
    }
    return TTT_OK;
}
