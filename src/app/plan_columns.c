/* The result columns of a plan and the seed axis (docs/results.md "Columns", "Seeds"). */
#define _XOPEN_SOURCE 700 /* nftw */
#define _DEFAULT_SOURCE /* flock, gethostname alongside it */
#include "plan.h"
#include "fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "comm.h"
#include "experiment.h"
#include "point_records.h"
#include "progress.h"
#include "provenance.h"
#include "results.h"
#include "strbuf.h"
#include "train.h"
#include "plan_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* Result columns and the seed axis (docs/results.md "Columns", "Seeds")                      */

/* `seeds:` of the document: 1 when absent; a value that is not a count is left to the option
 * check of every point, which names its location. */
int ttt_plan_doc_seeds(const ttt_cfg_node *doc) {
    const ttt_cfg_node *n = ttt_cfg_get(doc, "seeds");
    long v = 1;
    ttt_error e;
    if (!n || ttt_cfg_as_int(n, &v, &e) != TTT_OK || v < 1 || v > TTT_MAX_SEEDS) return 1;
    return (int)v;
}

/* `charts: {log_y: auto | true | false | [chart names]}` into p. */
ttt_status ttt_plan_read_charts(const ttt_cfg_node *doc, ttt_plan *p, ttt_error *err) {
    const ttt_cfg_node *c = ttt_cfg_get(doc, "charts");
    if (!c || c->kind != TTT_CFG_MAP) return TTT_OK; /* the option check reports a non-map */
    for (int i = 0; i < c->n; i++) {
        const ttt_cfg_node *v = c->items[i];
        if (strcmp(c->keys[i], "log_y") != 0)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, v,
                                 "charts: unknown key '%s'; expected log_y (auto, true, false or "
                                 "a list of chart names)", c->keys[i]);
        if (v->kind == TTT_CFG_SEQ) {
            ttt_strbuf b;
            ttt_strbuf_init(&b);
            for (int k = 0; k < v->n; k++) {
                const ttt_cfg_node *it = v->items[k];
                if (it->kind != TTT_CFG_SCALAR || !it->scalar || strchr(it->scalar, ',')) {
                    ttt_strbuf_free(&b);
                    return ttt_cfg_error(err, TTT_ERR_CONFIG, it,
                                         "charts.log_y: expected a chart name (the stem of its "
                                         ".svg file, e.g. train_loss)");
                }
                ttt_strbuf_printf(&b, "%s%s", k ? "," : "", it->scalar);
            }
            p->log_y = TTT_LOG_Y_ON;
            p->log_y_only = ttt_strbuf_take(&b);
            if (!p->log_y_only) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
            continue;
        }
        const char *t = v->kind == TTT_CFG_SCALAR && v->scalar ? v->scalar : "";
        if (strcmp(t, "auto") == 0) p->log_y = TTT_LOG_Y_AUTO;
        else if (strcmp(t, "true") == 0) p->log_y = TTT_LOG_Y_ON;
        else if (strcmp(t, "false") == 0) p->log_y = TTT_LOG_Y_OFF;
        else
            return ttt_cfg_error(err, TTT_ERR_CONFIG, v,
                                 "charts.log_y: '%s'; expected auto (log when every value is "
                                 "positive and they span more than two decades), true, false, "
                                 "or a list of chart names", t);
    }
    return TTT_OK;
}

static int col_find(const ttt_plan *p, const char *key);

/* `results: {best_over: KEY, metric: NAME, goal: max | min}` into p (docs/results.md "Best over
 * an axis"), after the columns are known: KEY must be one of them, NAME a column of the task's
 * summary. */
ttt_status ttt_plan_read_results(const ttt_cfg_node *doc, ttt_plan *p, ttt_error *err) {
    const ttt_cfg_node *c = ttt_cfg_get(doc, "results");
    if (!c || c->kind != TTT_CFG_MAP) return TTT_OK; /* the option check reports a non-map */
    const ttt_cfg_node *over = NULL, *metric = NULL, *goal = NULL;
    for (int i = 0; i < c->n; i++) {
        const ttt_cfg_node *v = c->items[i];
        if (v->kind != TTT_CFG_SCALAR || !v->scalar || !v->scalar[0])
            return ttt_cfg_error(err, TTT_ERR_CONFIG, v, "results.%s: expected a plain value",
                                 c->keys[i]);
        if (!strcmp(c->keys[i], "best_over")) over = v;
        else if (!strcmp(c->keys[i], "metric")) metric = v;
        else if (!strcmp(c->keys[i], "goal")) goal = v;
        else
            return ttt_cfg_error(err, TTT_ERR_CONFIG, v,
                                 "results: unknown key '%s'; expected best_over (a swept key), "
                                 "metric (a column of the summary) or goal (max or min)",
                                 c->keys[i]);
    }
    if (!over) {
        if (metric || goal)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, metric ? metric : goal,
                                 "results: %s without best_over; expected best_over: a swept key "
                                 "(e.g. train.lr)", metric ? "metric" : "goal");
        return TTT_OK;
    }
    if (col_find(p, over->scalar) < 0 || !strcmp(over->scalar, "seed")) {
        ttt_strbuf b;
        ttt_strbuf_init(&b);
        for (int k = 0; k < p->n_cols; k++)
            if (strcmp(p->cols[k], "seed"))
                ttt_strbuf_printf(&b, "%s%s", b.len ? ", " : "", p->cols[k]);
        const char *list = ttt_strbuf_str(&b);
        ttt_status s = ttt_cfg_error(err, TTT_ERR_CONFIG, over,
                                     "results.best_over: '%s' is not a swept column; expected one "
                                     "of: %s", over->scalar, list && list[0] ? list : "(none: "
                                     "the experiment has no sweep)");
        ttt_strbuf_free(&b);
        return s;
    }
    const ttt_plan_point *pt = &p->points[0];
    const char *const *tc =
        pt->task->columns_for ? pt->task->columns_for(pt->cfg) : pt->task->columns;
    if (metric) {
        int known = 0;
        for (int k = 0; tc && tc[k] && !known; k++) known = !strcmp(tc[k], metric->scalar);
        if (!known) {
            ttt_strbuf b;
            ttt_strbuf_init(&b);
            for (int k = 0; tc && tc[k]; k++)
                if (strcmp(tc[k], "series"))
                    ttt_strbuf_printf(&b, "%s%s", b.len ? ", " : "", tc[k]);
            const char *list = ttt_strbuf_str(&b);
            ttt_status s = ttt_cfg_error(err, TTT_ERR_CONFIG, metric,
                                         "results.metric: '%s' is not a column of the %s task's "
                                         "summary; expected one of: %s", metric->scalar,
                                         pt->task->name, list ? list : "");
            ttt_strbuf_free(&b);
            return s;
        }
    }
    if (goal && strcmp(goal->scalar, "max") && strcmp(goal->scalar, "min"))
        return ttt_cfg_error(err, TTT_ERR_CONFIG, goal,
                             "results.goal: '%s'; expected max (e.g. accuracy) or min (e.g. a "
                             "loss)", goal->scalar);
    if (!(p->best_over = ttt_fault_strdup(over->scalar)) ||
        !(p->best_metric = ttt_fault_strdup(metric ? metric->scalar : "")))
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    p->best_max = !goal || !strcmp(goal->scalar, "max");
    return TTT_OK;
}

static int col_find(const ttt_plan *p, const char *key) {
    for (int c = 0; c < p->n_cols; c++)
        if (strcmp(p->cols[c], key) == 0) return c;
    return -1;
}

static ttt_status col_add(ttt_plan *p, const char *key, ttt_error *err) {
    if (col_find(p, key) >= 0) return TTT_OK;
    char **c = realloc(p->cols, (size_t)(p->n_cols + 1) * sizeof *c);
    if (!c) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    p->cols = c;
    if (!(c[p->n_cols] = strdup(key))) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    p->n_cols++;
    return TTT_OK;
}

/* The columns of a sweep value at `path`: a mapping by its leaves, anything else itself. */
static ttt_status cols_of(ttt_plan *p, const char *path, const ttt_cfg_node *v, ttt_error *err) {
    if (v->kind != TTT_CFG_MAP || v->n == 0) return col_add(p, path, err);
    for (int i = 0; i < v->n; i++) {
        size_t len = strlen(path) + strlen(v->keys[i]) + 2;
        char *sub = malloc(len);
        if (!sub) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
        snprintf(sub, len, "%s.%s", path, v->keys[i]);
        ttt_status s = cols_of(p, sub, v->items[i], err);
        free(sub);
        TTT_TRY(s);
    }
    return TTT_OK;
}

/* The text of the node at `path` of a mapping value (NULL: none). */
static char *value_text(const ttt_cfg_node *n) {
    if (!n) return NULL;
    if (n->kind == TTT_CFG_SCALAR) return n->scalar ? strdup(n->scalar) : NULL;
    return ttt_cfg_to_flow(n);
}

/* Columns, values, groups and series labels of every point. `digits` (n_sweep × axes): the
 * sweep value index of each axis for each sweep point; point i is sweep point i / seeds,
 * replicate i % seeds; `trees` the points' resolved trees. */
ttt_status ttt_plan_columns(ttt_plan *p, const ttt_cfg_node *sweep,
                               ttt_cfg_node *const *trees, ttt_error *err) {
    const int axes = sweep && sweep->kind == TTT_CFG_MAP ? sweep->n : 0;
    int seed_axis = -1;
    for (int a = 0; a < axes; a++) {
        if (strcmp(sweep->keys[a], "seed") == 0) seed_axis = a;
        for (int k = 0; k < sweep->items[a]->n; k++)
            TTT_TRY(cols_of(p, sweep->keys[a], sweep->items[a]->items[k], err));
    }
    p->seed_axis = seed_axis >= 0 || p->seeds > 1;
    if (p->seed_axis) TTT_TRY(col_add(p, "seed", err));
    char **shortn = calloc((size_t)(p->n_cols ? p->n_cols : 1), sizeof *shortn);
    int *digit = calloc((size_t)(axes ? axes : 1), sizeof *digit);
    if (!shortn || !digit) {
        free(shortn);
        free(digit);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    }
    ttt_status s = TTT_OK;
    for (int c = 0; c < p->n_cols && s == TTT_OK; c++) {
        char sh[128];
        ttt_key_short((const char *const *)p->cols, p->n_cols, c, sh, sizeof sh);
        if (!(shortn[c] = strdup(sh))) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < p->n_points && s == TTT_OK; i++) {
        ttt_plan_point *pt = &p->points[i];
        const long sp = i / p->seeds;
        /* mixed-radix digits of the sweep point, the last axis fastest (ttt_cfg_sweep_expand) */
        long rest = sp, group = 0, radix = 1;
        int seed_digit = 0;
        for (int a = axes - 1; a >= 0; a--) {
            const int na = sweep->items[a]->n, d = (int)(rest % na);
            rest /= na;
            digit[a] = d;
            if (a == seed_axis) {
                seed_digit = d;
                continue;
            }
            group += d * radix;
            radix *= na;
        }
        pt->group = p->seed_axis ? (int)group : -1;
        pt->member = seed_digit * p->seeds + i % p->seeds;
        if (!(pt->values = calloc((size_t)(p->n_cols ? p->n_cols : 1), sizeof *pt->values))) {
            s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
            break;
        }
        ttt_strbuf b;
        ttt_strbuf_init(&b);
        for (int c = 0; c < p->n_cols; c++) {
            /* the value the sweep gave the point, if it gave this leaf */
            const ttt_cfg_node *given = NULL;
            for (int a = 0; !given && a < axes; a++) {
                const size_t kl = strlen(sweep->keys[a]);
                if (strncmp(p->cols[c], sweep->keys[a], kl) != 0) continue;
                const ttt_cfg_node *v = sweep->items[a]->items[digit[a]];
                if (p->cols[c][kl] == '\0') given = v;
                else if (p->cols[c][kl] == '.' && v->kind == TTT_CFG_MAP)
                    given = ttt_cfg_get_path(v, p->cols[c] + kl + 1);
            }
            /* the column: the resolved value (defaults and a preset's values included), else
             * the given one (a leaf the task moves, such as layer.mixer into model.mixer) */
            const ttt_cfg_node *resolved = ttt_cfg_get_path(trees[i], p->cols[c]);
            pt->values[c] = value_text(resolved ? resolved : given);
            /* the legend: only what the sweep set, so that lines read as the sweep reads */
            if (!given || strcmp(p->cols[c], "seed") == 0) continue;
            char *t = value_text(given);
            if (t) ttt_strbuf_printf(&b, "%s%s=%s", b.len ? ", " : "", shortn[c], t);
            free(t);
        }
        if (!(pt->series = ttt_strbuf_take(&b)))
            s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    }
    for (int c = 0; c < p->n_cols; c++) free(shortn[c]);
    free(shortn);
    free(digit);
    return s;
}

/* The fields every record of point i starts with: its value of each column, a number when
 * the text is one. */
void ttt_plan_point_fields(const ttt_plan *p, int i, ttt_record *r) {
    ttt_record_clear(r);
    const ttt_plan_point *pt = &p->points[i];
    for (int c = 0; c < p->n_cols; c++) {
        const char *v = pt->values[c];
        if (!v) continue;
        char *end;
        double d = strtod(v, &end);
        if (end != v && !*end && isfinite(d))
            ttt_record_num(r, p->cols[c], d);
        else
            ttt_record_str(r, p->cols[c], v);
    }
}

/* Each sweep point `seeds` times with seeds seed, seed + 1, …: the trees and labels replaced
 * by the n × seeds ones. */
ttt_status ttt_plan_replicate(ttt_cfg_node ***trees, char ***labels, int *n, int seeds,
                            ttt_error *err) {
    if (seeds <= 1) return TTT_OK;
    const int m = *n * seeds;
    ttt_cfg_node **t = calloc((size_t)m, sizeof *t);
    char **l = calloc((size_t)m, sizeof *l);
    if (!t || !l) {
        free(t);
        free(l);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    }
    ttt_status s = TTT_OK;
    for (int i = 0; i < *n && s == TTT_OK; i++) {
        const ttt_cfg_node *sn = ttt_cfg_get((*trees)[i], "seed");
        long base = 0;
        ttt_error e;
        if (sn && ttt_cfg_as_int(sn, &base, &e) != TTT_OK) base = 0; /* the check reports it */
        for (int j = 0; j < seeds; j++) {
            const int k = i * seeds + j;
            t[k] = ttt_cfg_clone((*trees)[i]);
            char num[32], *lab;
            snprintf(num, sizeof num, "%ld", base + j);
            ttt_cfg_map_set(t[k], "seed", ttt_cfg_new_scalar(num, sn ? sn : t[k]));
            const char *old = (*labels)[i];
            size_t len = strlen(old) + 48;
            if (!(lab = l[k] = malloc(len))) {
                s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
                break;
            }
            snprintf(lab, len, "%s%sseed=%s", old, old[0] ? ", " : "", num);
        }
    }
    ttt_cfg_points_free(*trees, *labels, *n);
    *trees = t;
    *labels = l;
    *n = m;
    return s;
}
