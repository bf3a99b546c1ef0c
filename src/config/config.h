/* Configuration: YAML loaded into a tree that remembers where every value came from.
 *
 * Every node keeps file:line:column (1-based) so that any later complaint — unknown key, wrong
 * type, value out of range, unknown name — points at the exact spot. Values given with
 * `--set a.b.c=value` carry the pseudo-location "--set a.b.c=value" instead (line 0).
 *
 * Components describe their options with ttt_option tables (a schema); ttt_cfg_check_map
 * validates a mapping against a table and fills in every default, so that the component reading
 * it finds every value. The resolved configuration a run folder holds is written by the owners
 * of its sections from the values they read (docs/design.md "The plan pass"). */
#ifndef TTT_CONFIG_H
#define TTT_CONFIG_H

#include <stdio.h>

#include "status.h"

typedef enum ttt_cfg_kind {
    TTT_CFG_SCALAR,
    TTT_CFG_SEQ,
    TTT_CFG_MAP,
} ttt_cfg_kind;

typedef struct ttt_cfg_node ttt_cfg_node;
struct ttt_cfg_node {
    ttt_cfg_kind kind;
    char *scalar;        /* SCALAR: the text as written (NULL for an empty value / null) */
    int quoted;          /* SCALAR: written in quotes (then never a number or bool) */
    char *file;          /* where it was written; "--set ..." for overrides */
    int line, col;       /* 1-based; line 0 = not from a file */
    int n, cap;          /* SEQ/MAP: number of children */
    char **keys;         /* MAP: keys[i] names items[i] */
    int *key_line, *key_col; /* MAP: where each key was written (for unknown-key messages) */
    ttt_cfg_node **items;
};

/* ---- out of memory ----
 * Nothing here aborts on a failed allocation. Functions that return a status report it as
 * TTT_ERR_NOMEM; ttt_cfg_map_set and ttt_cfg_seq_push do too (they take a NULL value, made by
 * a constructor that failed, and drop it, or drop the value they could not store); ttt_cfg_clone
 * and ttt_cfg_new_* return NULL. Every failure leaves trees whole but incomplete and is
 * counted, so a caller that builds a tree in many calls need not check each: it compares
 * ttt_cfg_alloc_failures() before and after its work and reports ttt_cfg_out_of_memory
 * (docs/design.md "Errors, memory, determinism"). */
unsigned long ttt_cfg_alloc_failures(void); /* failed allocations so far on this thread */
/* ttt_cfg_check_map and ttt_cfg_check_name refuse (TTT_ERR_NOMEM) once an allocation has failed
 * on the thread since the last call of this, so that code that reads a checked tree never meets
 * a value lost to one; a pass over a new document (the plan, a layer file) calls it first. */
void ttt_cfg_oom_clear(void);
ttt_status ttt_cfg_out_of_memory(ttt_error *err, const char *what);

/* ---- loading, copying, freeing ---- */

/* Parse a YAML file whose top level must be a mapping. Missing file, malformed YAML (with the
 * parser's line:column), duplicate keys and a non-mapping top level are errors. */
ttt_status ttt_cfg_load_file(const char *path, ttt_cfg_node **out, ttt_error *err);
/* Same, from text in memory; `name` is used as the file name in messages. */
ttt_status ttt_cfg_load_string(const char *text, const char *name, ttt_cfg_node **out,
                               ttt_error *err);
ttt_cfg_node *ttt_cfg_clone(const ttt_cfg_node *n);
void ttt_cfg_free(ttt_cfg_node *n);

/* New nodes (the location is copied from `where`, which may be NULL). */
ttt_cfg_node *ttt_cfg_new_scalar(const char *text, const ttt_cfg_node *where);
ttt_cfg_node *ttt_cfg_new_map(const ttt_cfg_node *where);
ttt_cfg_node *ttt_cfg_new_seq(const ttt_cfg_node *where);
/* Insert or replace map[key] = val (takes ownership of val, also on failure: then it is freed).
 * TTT_OK; TTT_ERR_NOMEM when val is NULL or could not be stored (counted, as above);
 * TTT_ERR_ARG when map is not a mapping, seq not a sequence, or key NULL. */
ttt_status ttt_cfg_map_set(ttt_cfg_node *map, const char *key, ttt_cfg_node *val);
ttt_status ttt_cfg_seq_push(ttt_cfg_node *seq, ttt_cfg_node *val);
/* Remove map[key] if present (frees it); returns 1 when something was removed. */
int ttt_cfg_map_remove(ttt_cfg_node *map, const char *key);
/* Exchange the contents of two nodes (kind, value, location, children): a section rendered
 * aside takes the place of the one a caller holds, which keeps its pointer. */
void ttt_cfg_swap(ttt_cfg_node *a, ttt_cfg_node *b);

/* ---- locations ---- */

/* "file.yaml:12:5" or "--set a.b=c" into buf; returns buf. */
const char *ttt_cfg_where(const ttt_cfg_node *n, char *buf, size_t len);
/* Set err to "<where>: <message>" and return status s. */
ttt_status ttt_cfg_error(ttt_error *err, ttt_status s, const ttt_cfg_node *n, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));

/* ---- lookup (never fail; NULL when absent) ---- */

const ttt_cfg_node *ttt_cfg_get(const ttt_cfg_node *map, const char *key);
/* Dotted path: "layer.optimizer.lr". */
const ttt_cfg_node *ttt_cfg_get_path(const ttt_cfg_node *root, const char *path);

/* Typed reads of validated values (after ttt_cfg_check_map the types are known good; these
 * assert on a wrong type, which would be a programmer error). */
long ttt_cfg_int(const ttt_cfg_node *map, const char *key);
double ttt_cfg_float(const ttt_cfg_node *map, const char *key);
int ttt_cfg_bool(const ttt_cfg_node *map, const char *key);
const char *ttt_cfg_str(const ttt_cfg_node *map, const char *key);

/* Scalar conversions with errors naming the location and what was expected. */
ttt_status ttt_cfg_as_int(const ttt_cfg_node *n, long *out, ttt_error *err);
ttt_status ttt_cfg_as_float(const ttt_cfg_node *n, double *out, ttt_error *err);
ttt_status ttt_cfg_as_bool(const ttt_cfg_node *n, int *out, ttt_error *err);

/* ---- schema ---- */

typedef enum ttt_opt_type {
    TTT_OPT_INT,
    TTT_OPT_FLOAT,
    TTT_OPT_BOOL,
    TTT_OPT_STRING,
    TTT_OPT_CHOICE,     /* one of `choices` ("a|b|c") */
    TTT_OPT_INT_LIST,   /* a sequence of ints (a single int is accepted as a list of one) */
    TTT_OPT_FLOAT_LIST, /* likewise */
    TTT_OPT_MAP,        /* a nested mapping checked by its owner (e.g. layer.optimizer) */
} ttt_opt_type;

typedef struct ttt_option {
    const char *name;
    ttt_opt_type type;
    const char *def;     /* default as YAML flow text ("1.0", "[16, 32]", "sgd"); NULL = required */
    double min, max;     /* inclusive range of numbers (and of list elements); unused if min > max */
    const char *choices; /* TTT_OPT_CHOICE: "a|b|c" */
    const char *help;    /* one line */
} ttt_option;

/* Tables end with an entry whose name is NULL. */
#define TTT_OPTION_END {NULL, 0, NULL, 0, 0, NULL, NULL}
#define TTT_NO_RANGE 1, 0

/* Validate `map` (a mapping found at `path`, e.g. "layer.optimizer") against `opts`:
 * - a key not in `opts` (and not in the NULL-terminated `extra` list, which may be NULL) is an
 *   error naming its location, the valid keys and the closest one ("did you mean 'lr'?");
 * - a value of the wrong type or out of range is an error naming its location and expectation;
 * - a missing required option (def == NULL) is an error naming the map's location;
 * - a missing optional option is inserted with its default.
 * TTT_OPT_MAP values are only checked to be mappings (missing → empty map inserted). */
ttt_status ttt_cfg_check_map(ttt_cfg_node *map, const char *path, const ttt_option *opts,
                             const char *const *extra, ttt_error *err);
/* The same checks on the keys present in `map` only: nothing is filled in, and an absent option
 * (required or not) is left for the caller to resolve (a layer's preset, layers/layer_parse.c). */
ttt_status ttt_cfg_check_given(ttt_cfg_node *map, const char *path, const ttt_option *opts,
                               const char *const *extra, ttt_error *err);
/* Check that the scalar `n` is one of `names` (count n_names); otherwise an error naming the
 * location, `what` ("optimizer"), the valid names and the closest ones. */
ttt_status ttt_cfg_check_name(const ttt_cfg_node *n, const char *what, const char *const *names,
                              int n_names, ttt_error *err);
/* Closest name to `s` in `names` by edit distance, or NULL when none is close (distance more
 * than about a third of the length). */
const char *ttt_closest_name(const char *s, const char *const *names, int n_names);

/* ---- overrides and sweeps ---- */

/* Apply one "a.b.c=value" override: the value is parsed as YAML flow text (so "[8, 16]" is a
 * list); missing intermediate maps are created; a sweep axis over the same path is removed
 * (the user pinned that value). Malformed assignments are TTT_ERR_ARG naming the option. */
ttt_status ttt_cfg_apply_set(ttt_cfg_node *root, const char *assignment, ttt_error *err);

/* Expand the top-level `sweep:` mapping (dotted path → list of values) into the cartesian
 * product: each point is a clone of `root` without `sweep`, with every path set to one value
 * (the value node keeps its location in the sweep list). Without a sweep: one point, a clone.
 * labels[i] is "layer.preset=deltanet, task.overwrite=true" ("" without a sweep).
 * The first axis varies slowest. Caller frees with ttt_cfg_points_free. */
ttt_status ttt_cfg_sweep_expand(const ttt_cfg_node *root, ttt_cfg_node ***points, char ***labels,
                                int *n_points, ttt_error *err);
void ttt_cfg_points_free(ttt_cfg_node **points, char **labels, int n_points);

/* Limits that keep a hostile or mistaken file from exhausting memory: a sweep may expand to at
 * most this many points, and YAML aliases (*x) may expand to at most this many nodes in total
 * ("billion laughs"). Exceeding either is an error, not a truncation. */
#define TTT_CFG_MAX_SWEEP_POINTS 10000
#define TTT_CFG_MAX_ALIAS_NODES 100000
/* Counts alone do not bound memory: one 100 kB string copied into 10 000 sweep points is 1 GB.
 * The text (keys and scalar values) that alias expansion adds, and the text of all sweep points
 * together, may each be at most this many bytes (docs/hardening.md "Limits"). */
#define TTT_CFG_MAX_EXPANDED_BYTES (64L << 20)

/* ---- output ---- */

/* Block-style YAML of the tree, keys in insertion order, scalars quoted only where needed so
 * that reading it back gives the same tree. */
int ttt_cfg_write_yaml(const ttt_cfg_node *root, FILE *f);
/* (ttt_cfg_write_yaml returns 0, or -1 when memory ran out: then nothing was written.) */
/* The same on one line in flow style ("{name: sgd, lr: 0.1}", "[16, 32]", "sgd"), for labels,
 * tables and messages; malloc'd, caller frees. */
char *ttt_cfg_to_flow(const ttt_cfg_node *n);

#endif
