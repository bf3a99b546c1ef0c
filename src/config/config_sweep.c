/* Sweeps: the `sweep:` section expanded into one configuration tree per point, with labels. */
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

void ttt_cfg_points_free(ttt_cfg_node **points, char **labels, int n_points) {
    for (int i = 0; i < n_points; i++) {
        if (points) ttt_cfg_free(points[i]);
        if (labels) free(labels[i]);
    }
    free(points);
    free(labels);
}

/* The value as it appears in a label: scalars as written, anything else in flow style. */
static void put_label_value(ttt_cfg_sbuf *b, const ttt_cfg_node *v) {
    if (v->kind == TTT_CFG_SCALAR)
        ttt_cfg_sb_puts(b, v->scalar ? v->scalar : "null");
    else
        ttt_cfg_put_flow(b, v);
}

static ttt_status check_sweep(const ttt_cfg_node *sweep, long *total, ttt_error *err) {
    if (sweep->kind != TTT_CFG_MAP)
        return ttt_cfg_type_error(err, sweep, "sweep",
                                  "a mapping from key paths to lists of values (e.g. "
                                  "'layer.mini_batch: [1, 16]')");
    long n = 1;
    int overflow = 0;
    for (int i = 0; i < sweep->n; i++) {
        const char *key = sweep->keys[i];
        const ttt_cfg_node *v = sweep->items[i];
        if (!ttt_cfg_valid_path(key) || strcmp(key, "sweep") == 0 || strncmp(key, "sweep.", 6) == 0)
            return ttt_cfg_key_error(
                err, TTT_ERR_CONFIG, sweep, i,
                "sweep axis '%s' is not a key path; expected keys separated by dots "
                "such as layer.mini_batch",
                key);
        if (v->kind != TTT_CFG_SEQ) {
            char got[160];
            ttt_cfg_describe_node(v, got, sizeof got);
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
        ttt_cfg_sbuf sizes = {0};
        for (int i = 0; i < sweep->n; i++)
            ttt_cfg_sb_printf(&sizes, "%s%d", i ? " x " : "", sweep->items[i]->n);
        ttt_status s = ttt_cfg_error(err, TTT_ERR_RANGE, sweep,
                                     "sweep: %s combinations is too many; expected at most %d "
                                     "points",
                                     ttt_cfg_text_or_empty(sizes.data), TTT_CFG_MAX_SWEEP_POINTS);
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
        return ttt_cfg_type_error(err, root, NULL, "a mapping of settings at the top level");
    const ttt_cfg_node *sweep = ttt_cfg_get(root, "sweep");
    long total = 1;
    if (sweep && !ttt_cfg_is_null(sweep)) TTT_TRY(check_sweep(sweep, &total, err));
    int axes = (sweep && sweep->kind == TTT_CFG_MAP) ? sweep->n : 0;

    const unsigned long oom_mark = ttt_cfg_oom_count;
    ttt_cfg_node *base = ttt_cfg_clone(root);
    if (!base) return ttt_cfg_out_of_memory(err, "the sweep");
    ttt_cfg_map_remove(base, "sweep");
    /* Every point is a full copy: a large document (aliases can make one from a few lines) times
     * many points would exhaust memory, so the product is bounded too. */
    const long per_point = ttt_cfg_count_nodes(base);
    if (total > 1 && per_point > TTT_CFG_MAX_SWEEP_NODES / total) {
        ttt_cfg_free(base);
        return ttt_cfg_error(err, TTT_ERR_RANGE, sweep,
                             "sweep: %ld points of %ld values each is too much to expand; "
                             "expected at most %ld values over all points (fewer points or a "
                             "smaller document)",
                             total, per_point, TTT_CFG_MAX_SWEEP_NODES);
    }
    const long per_point_bytes = ttt_cfg_count_text_bytes(base);
    if (total > 1 && per_point_bytes > TTT_CFG_MAX_EXPANDED_BYTES / total) {
        ttt_cfg_free(base);
        return ttt_cfg_error(err, TTT_ERR_RANGE, sweep,
                             "sweep: %ld points of %ld bytes of text each is too much to expand; "
                             "expected at most %ld bytes over all points (fewer points or a "
                             "shorter document: every point is a full copy)",
                             total, per_point_bytes, TTT_CFG_MAX_EXPANDED_BYTES);
    }
    ttt_cfg_node **pts = ttt_cfg_xmalloc((size_t)total * sizeof *pts);
    char **labs = ttt_cfg_xmalloc((size_t)total * sizeof *labs);
    int made = 0;
    ttt_status s = TTT_OK;
    for (long p = 0; p < total && s == TTT_OK && pts && labs; p++) {
        ttt_cfg_node *pt = ttt_cfg_clone(base);
        ttt_cfg_sbuf label = {0};
        /* Mixed-radix digits of p with the last axis fastest, so the first varies slowest. */
        long rest = p;
        int *idx = ttt_cfg_xmalloc((size_t)(axes ? axes : 1) * sizeof *idx);
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
            ttt_status ps = copy ? ttt_cfg_set_path(pt, sweep->keys[a], copy, v, &blocker, &prefix)
                                 : TTT_ERR_NOMEM;
            if (ps == TTT_ERR_NOMEM) {
                s = ps;
                break;
            }
            if (ps != TTT_OK) {
                char where[512];
                s = ttt_cfg_key_error(
                    err, TTT_ERR_CONFIG, sweep, a,
                    "sweep axis '%s': '%.*s' (at %s) is %s, so it cannot hold '%s'; "
                    "expected a path through mappings",
                    sweep->keys[a], (int)prefix, sweep->keys[a],
                    ttt_cfg_where(blocker, where, sizeof where), ttt_cfg_kind_name(blocker),
                    sweep->keys[a] + prefix + 1);
                break;
            }
            if (a) ttt_cfg_sb_puts(&label, ", ");
            ttt_cfg_sb_printf(&label, "%s=", sweep->keys[a]);
            put_label_value(&label, v);
        }
        free(idx);
        if (s != TTT_OK) {
            ttt_cfg_free(pt);
            ttt_strbuf_free(&label);
            break;
        }
        pts[made] = pt;
        labs[made] = ttt_cfg_sb_take(&label);
        made++;
    }
    ttt_cfg_free(base);
    /* a label or a value lost to a failed allocation fails the whole expansion */
    if (s == TTT_ERR_NOMEM || !pts || !labs || ttt_cfg_oom_count != oom_mark)
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
