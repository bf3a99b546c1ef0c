/* Overrides: `--set a.b.c=value`, parsed as YAML and placed into the tree at its dotted path. */
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
/* overrides and sweeps                                                                        */

/* A non-empty dotted path without empty segments. */
int ttt_cfg_valid_path(const char *p) {
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
    int i = ttt_cfg_find_key(map, key);
    if (i < 0) return ttt_cfg_map_append(map, key, 0, 0, ttt_cfg_new_map(where)) ? map->n - 1 : -1;
    if (ttt_cfg_is_null(map->items[i])) {
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
ttt_status ttt_cfg_set_path(ttt_cfg_node *root, const char *path, ttt_cfg_node *val,
                           const ttt_cfg_node *where, const ttt_cfg_node **blocker,
                           size_t *prefix) {
    ttt_cfg_node *cur = root;
    const char *seg = path;
    for (const char *dot; (dot = strchr(seg, '.')) != NULL; seg = dot + 1) {
        char *key = ttt_cfg_xstrndup(seg, (size_t)(dot - seg));
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
    int si = ttt_cfg_find_key(root, "sweep");
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
    int si = ttt_cfg_find_key(root, "sweep");
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
            if (ttt_cfg_is_null(v)) {
                ttt_cfg_node *m = ttt_cfg_new_map(v);
                ttt_cfg_free(v);
                list->items[i] = v = m;
            }
            if (v->kind != TTT_CFG_MAP || ttt_cfg_set_path(v, rest, ttt_cfg_clone(val), origin,
                                                           &blocker, &prefix) != TTT_OK) {
                char got[160];
                ttt_cfg_describe_node(blocker ? blocker : v, got, sizeof got);
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
    const unsigned long oom_mark = ttt_cfg_oom_count;
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
    char *path = ttt_cfg_xstrndup(a, (size_t)(z - a));
    if (!path) return ttt_cfg_out_of_memory(err, "--set");
    if (!ttt_cfg_valid_path(path)) {
        ttt_status s = ttt_error_set(err, TTT_ERR_ARG,
                                     "--set '%s': '%s' is not a key path; expected "
                                     "KEY.PATH=VALUE with non-empty keys separated by dots",
                                     assignment, path);
        free(path);
        return s;
    }

    /* Every node made from this option is located at the option itself. */
    ttt_cfg_sbuf origin_text = {0};
    ttt_cfg_sb_printf(&origin_text, "--set %s", assignment);
    ttt_cfg_node origin;
    memset(&origin, 0, sizeof origin);
    origin.file = origin_text.data;

    const char *text = eq + 1, *end = text + strlen(text);
    while (isspace((unsigned char)*text)) text++;
    while (end > text && isspace((unsigned char)end[-1])) end--;
    ttt_error verr;
    ttt_cfg_node *val = NULL;
    ttt_status s =
        ttt_cfg_load_text(text, (size_t)(end - text), origin.file, &origin, 0, &val, &verr);
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
            val->scalar = ttt_cfg_xstrndup(text, (size_t)(end - text));
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
                              ttt_cfg_kind_name(sweep));
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
    s = ttt_cfg_set_path(root, path, val, &origin, &blocker, &prefix);
    if (s == TTT_ERR_NOMEM) goto done;
    if (s != TTT_OK) {
        char where[512];
        s = ttt_error_set(err, TTT_ERR_ARG,
                          "--set '%s': '%.*s' (at %s) is %s, so it cannot hold '%s'; expected "
                          "a path through mappings",
                          assignment, (int)prefix, path,
                          ttt_cfg_where(blocker, where, sizeof where),
                          ttt_cfg_kind_name(blocker), path + prefix + 1);
        goto done;
    }
    unpin_sweep(root, path);
done:
    ttt_strbuf_free(&origin_text);
    /* the tree may have been changed in part; the caller discards it on an error */
    if (ttt_cfg_oom_count != oom_mark) s = ttt_cfg_out_of_memory(err, "--set");
    free(path);
    return s;
}
