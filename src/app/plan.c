/* The plan pass (plan.h, docs/design.md "Data flow"). */
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

/* Keys allowed at the top level besides the options: the sweep (expanded away before a point
 * is checked) and the informational `resolved` list a previous run wrote. */
static const char *const top_extra[] = {"sweep", "resolved", NULL};

/* The longest `output:` path (bytes): the run folder's files are named in 4096-byte buffers,
 * with room for "/checkpoints/point<i>/ckpt-last.safetensors" and the like. */
#define TTT_PLAN_MAX_OUTPUT 3072

/* Name the sweep point after the message, so the message still starts with file:line:col. */
static void error_suffix_point(ttt_error *err, const char *label) {
    /* An error located at a --set option is about the option, whichever point found it first:
     * naming that point would suggest the sweep is at fault. */
    if (strncmp(err->msg, "--set ", 6) == 0) return;
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, " (in sweep point %s)", label);
}

/* Two axes `P.name` and `P.key` vary independently, so every name is given `key`, which only
 * some of them take (sweeping the optimizer with `momentum` fails on sgd). When the error is
 * that unknown key, say how to sweep what was meant: one axis of mappings. */
static void error_hint_axes(ttt_error *err, const ttt_cfg_node *sweep) {
    if (!sweep || sweep->kind != TTT_CFG_MAP) return;
    for (int a = 0; a < sweep->n; a++) {
        const char *ka = sweep->keys[a], *dot = strrchr(ka, '.');
        if (!dot || strcmp(dot + 1, "name") != 0) continue;
        const size_t plen = (size_t)(dot - ka);
        for (int b = 0; b < sweep->n; b++) {
            const char *kb = sweep->keys[b];
            if (b == a || strncmp(kb, ka, plen) != 0 || kb[plen] != '.' ||
                strchr(kb + plen + 1, '.'))
                continue;
            char needle[160];
            snprintf(needle, sizeof needle, "unknown key '%s'", kb + plen + 1);
            if (!strstr(err->msg, needle)) continue;
            size_t n = strlen(err->msg);
            snprintf(err->msg + n, sizeof err->msg - n,
                     "; the sweep axes '%s' and '%s' vary independently, so every %.*s gets "
                     "'%s': to give it only to some, sweep one list of mappings instead, e.g. "
                     "'%.*s: [{name: sgd}, {name: momentum, momentum: 0.9}]'",
                     ka, kb, (int)plen, ka, kb + plen + 1, (int)plen, ka);
            return;
        }
    }
}

/* The configuration hash of a resolved point: everything but the keys that name or place the
 * run (name, description, output) and those that do not change its results (train.stop_at,
 * train.threads, train.data_parallel). Checkpoints store it; changing the definition orphans every checkpoint. */
static void config_hash(const ttt_cfg_node *root, char hash[17]) {
    ttt_cfg_node *h = ttt_cfg_clone(root);
    ttt_cfg_map_remove(h, "name");
    ttt_cfg_map_remove(h, "description");
    ttt_cfg_map_remove(h, "output");
    ttt_cfg_map_remove(h, "seeds");  /* a point's own seed is `seed`; */
    ttt_cfg_map_remove(h, "charts"); /* how its results are drawn changes none of them */
    ttt_cfg_map_remove(h, "results"); /* nor how they are reported */
    ttt_cfg_node *tr = (ttt_cfg_node *)ttt_cfg_get(h, "train");
    if (tr) {
        ttt_cfg_map_remove(tr, "stop_at");
        ttt_cfg_map_remove(tr, "threads");
        ttt_cfg_map_remove(tr, "data_parallel");
    }
    char *flow = ttt_cfg_to_flow(h);
    ttt_cfg_free(h);
    ttt_checkpoint_config_hash(flow ? flow : "", hash);
    free(flow);
}

/* The first control character of s (C0, DEL or a C1 code point written in UTF-8), or NULL.
 * Such characters in a folder name or a message would act on the terminal that prints them. */
static const unsigned char *control_char(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) return p;
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) return p;
    }
    return NULL;
}

/* `name` becomes the folder runs/<name> and the title of messages and the page: one plain
 * folder name, so a run can neither write outside runs/ nor into runs/ itself
 * (docs/hardening.md "Run folders: names, one writer, re-runs"). */
static ttt_status check_name(const ttt_cfg_node *root, ttt_error *err) {
    const ttt_cfg_node *n = ttt_cfg_get(root, "name");
    const char *s = n && n->scalar ? n->scalar : "";
    const unsigned char *c = control_char(s);
    if (c)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "name: control character 0x%02x at byte %d; a name becomes a folder "
                             "name and is printed, so it must be printable text",
                             *c, (int)(c - (const unsigned char *)s));
    if (!s[0])
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "name: empty; expected a folder name (the run goes to runs/<name>)");
    if (strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "name: '%s' is not a plain folder name (no '/', not '.' or '..'): "
                             "the run goes to runs/<name>; use `output:` or --out to place it "
                             "elsewhere", s);
    /* a folder name the file system refuses ("File name too long") would fail the run only
     * when it creates the folder; `ttt check` refuses it here */
    if (strlen(s) > NAME_MAX)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "name: %zu bytes; a name becomes the folder runs/<name>, and a "
                             "folder name has at most %d bytes", strlen(s), NAME_MAX);
    const ttt_cfg_node *o = ttt_cfg_get(root, "output");
    if (o && o->scalar && (c = control_char(o->scalar)))
        return ttt_cfg_error(err, TTT_ERR_CONFIG, o,
                             "output: control character 0x%02x at byte %d; expected a printable "
                             "folder path", *c, (int)(c - (const unsigned char *)o->scalar));
    if (o && o->scalar) {
        if (strlen(o->scalar) >= TTT_PLAN_MAX_OUTPUT)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, o,
                                 "output: %zu bytes; expected a folder path of less than %d "
                                 "bytes", strlen(o->scalar), TTT_PLAN_MAX_OUTPUT);
        for (const char *q = o->scalar; *q;) {
            const size_t len = strcspn(q, "/");
            if (len > NAME_MAX)
                return ttt_cfg_error(err, TTT_ERR_CONFIG, o,
                                     "output: the folder name at byte %d has %zu bytes; a "
                                     "folder name has at most %d", (int)(q - o->scalar), len,
                                     NAME_MAX);
            q += len;
            while (*q == '/') q++;
        }
    }
    return TTT_OK;
}

/* A file the run reads at its start, checked when the plan is built so that `ttt check`
 * refuses what the run would fail on: it must exist and be a regular file (a FIFO would block
 * the reader; a folder is a mistake). */
static ttt_status check_input_file(const ttt_cfg_node *n, const char *what, ttt_error *err) {
    if (!n || n->kind != TTT_CFG_SCALAR || !n->scalar || !n->scalar[0]) return TTT_OK;
    struct stat st;
    if (stat(n->scalar, &st) != 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n, "%s: cannot read '%s': %s", what, n->scalar,
                             strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "%s: '%s' is not a regular file; expected a file `ttt export` "
                             "wrote", what, n->scalar);
    return TTT_OK;
}

/* Validate one point's tree against the registries (filling every default into it), then let
 * its task read it into pt->cfg. */
static ttt_status plan_point(ttt_plan_point *pt, ttt_cfg_node *root, const char *stem,
                             ttt_error *err) {
    ttt_cfg_map_remove(root, "resolved");
    if (!ttt_cfg_get(root, "name")) ttt_cfg_map_set(root, "name", ttt_cfg_new_scalar(stem, root));
    TTT_TRY(ttt_cfg_check_map(root, "", ttt_experiment_options, top_extra, err));
    TTT_TRY(check_name(root, err));
    const ttt_cfg_node *out = ttt_cfg_get(root, "output");
    if (!out->scalar || !out->scalar[0]) {
        char buf[512];
        snprintf(buf, sizeof buf, "runs/%s", ttt_cfg_str(root, "name"));
        ttt_cfg_map_set(root, "output", ttt_cfg_new_scalar(buf, root));
        if (!ttt_cfg_get(root, "output")->scalar)
            return ttt_cfg_out_of_memory(err, "the output folder");
    }
    ttt_cfg_node *task = (ttt_cfg_node *)ttt_cfg_get(root, "task");
    const ttt_cfg_node *kind = ttt_cfg_get(task, "kind");
    if (!kind)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, task,
                             "task: missing 'kind' (one of the tasks in `ttt list`, e.g. memory)");
    if (kind->kind != TTT_CFG_SCALAR || !kind->scalar)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, kind, "task.kind: expected a task name");
    TTT_TRY(ttt_cfg_check_name(kind, "task", ttt_task_names(), ttt_task_count(), err));
    const ttt_task *t = ttt_task_find(kind->scalar);
    static const char *const task_extra[] = {"kind", NULL};
    TTT_TRY(ttt_cfg_check_map(task, "task", t->options, task_extra, err));
    pt->task = t;
    if (!(pt->cfg = ttt_fault_calloc(1, t->cfg_size ? t->cfg_size : 1)))
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    ttt_size_estimate_reset();
    if (t->parse) TTT_TRY(t->parse(pt->cfg, root, err));
    const ttt_cfg_node *train = ttt_cfg_get(root, "train");
    if (t->model && train)
        TTT_TRY(check_input_file(ttt_cfg_get(train, "init_from"), "train.init_from", err));
    /* Each piece was checked alone; together they must fit too (data sets and a training step
     * are held at the same time). */
    pt->memory = ttt_size_estimate();
    char what[160];
    snprintf(what, sizeof what, "task: the point (%s) in all", t->name);
    ttt_status ms = ttt_size_check(pt->memory, what, err);
    if (ms != TTT_OK) return ttt_cfg_error(err, ms, task, "%s", err->msg);
    pt->seed = (uint64_t)ttt_cfg_int(root, "seed");
    pt->cost = t->work ? (double)t->work(pt->cfg) : 1.0;
    const ttt_cfg_node *dp = ttt_cfg_get(root, "train");
    dp = dp ? ttt_cfg_get(dp, "data_parallel") : NULL;
    pt->parallel = TTT_PARALLEL_AUTO;
    if (dp && dp->kind == TTT_CFG_SCALAR && dp->scalar) {
        if (strcmp(dp->scalar, "true") == 0) pt->parallel = TTT_PARALLEL_DATA;
        if (strcmp(dp->scalar, "false") == 0) pt->parallel = TTT_PARALLEL_POINTS;
    }
    pt->name = ttt_fault_strdup(ttt_cfg_str(root, "name"));
    pt->output = ttt_fault_strdup(ttt_cfg_str(root, "output"));
    if (!pt->name || !pt->output) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    config_hash(root, pt->config_hash);
    return TTT_OK;
}

/* config.resolved.yaml: without a sweep, the one point with every default; with a sweep, the
 * experiment as given plus `resolved:`, one fully resolved configuration per point. */
static char *resolved_text(const ttt_cfg_node *doc, ttt_cfg_node *const *trees,
                           char *const *labels, int n) {
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f) return NULL;
    int failed = 0;
    if (!ttt_cfg_get(doc, "sweep") && n == 1) {
        failed = ttt_cfg_write_yaml(trees[0], f) != 0;
    } else {
        const unsigned long oom_mark = ttt_cfg_alloc_failures();
        ttt_cfg_node *d = ttt_cfg_clone(doc);
        ttt_cfg_node *list = ttt_cfg_new_seq(d);
        for (int i = 0; i < n; i++) {
            ttt_cfg_node *item = ttt_cfg_new_map(d);
            ttt_cfg_map_set(item, "point", ttt_cfg_new_scalar(labels[i], d));
            ttt_cfg_map_set(item, "config", ttt_cfg_clone(trees[i]));
            ttt_cfg_seq_push(list, item);
        }
        ttt_cfg_map_set(d, "resolved", list);
        fprintf(f, "# The experiment as run. `resolved` lists every sweep point with all its "
                   "values;\n# it is informational and ignored when this file is run again.\n");
        failed = ttt_cfg_write_yaml(d, f) != 0 || ttt_cfg_alloc_failures() != oom_mark;
        ttt_cfg_free(d);
    }
    if (fclose(f) != 0 || failed) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* ------------------------------------------------------------------------------------------ */
/* Result columns and the seed axis (docs/results.md "Columns", "Seeds")                      */

/* `seeds:` of the document: 1 when absent; a value that is not a count is left to the option
 * check of every point, which names its location. */
static int doc_seeds(const ttt_cfg_node *doc) {
    const ttt_cfg_node *n = ttt_cfg_get(doc, "seeds");
    long v = 1;
    ttt_error e;
    if (!n || ttt_cfg_as_int(n, &v, &e) != TTT_OK || v < 1 || v > TTT_MAX_SEEDS) return 1;
    return (int)v;
}

/* `charts: {log_y: auto | true | false | [chart names]}` into p. */
static ttt_status read_charts(const ttt_cfg_node *doc, ttt_plan *p, ttt_error *err) {
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
static ttt_status read_results(const ttt_cfg_node *doc, ttt_plan *p, ttt_error *err) {
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
            if (strcmp(p->cols[k], "seed")) ttt_strbuf_printf(&b, "%s%s", b.len ? ", " : "", p->cols[k]);
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
                if (strcmp(tc[k], "series")) ttt_strbuf_printf(&b, "%s%s", b.len ? ", " : "", tc[k]);
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
static ttt_status plan_columns(ttt_plan *p, const ttt_cfg_node *sweep,
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
        if (!(pt->series = ttt_strbuf_take(&b))) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    }
    for (int c = 0; c < p->n_cols; c++) free(shortn[c]);
    free(shortn);
    free(digit);
    return s;
}

/* The fields every record of point i starts with: its value of each column, a number when
 * the text is one. */
static void point_fields(const ttt_plan *p, int i, ttt_record *r) {
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
static ttt_status replicate(ttt_cfg_node ***trees, char ***labels, int *n, int seeds,
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

ttt_status ttt_plan_build(ttt_cfg_node *doc, const char *stem, ttt_plan **out, ttt_error *err) {
    *out = NULL;
    ttt_cfg_oom_clear();
    ttt_cfg_map_remove(doc, "resolved");
    ttt_cfg_node **trees = NULL;
    char **labels = NULL;
    int n = 0;
    TTT_TRY(ttt_cfg_sweep_expand(doc, &trees, &labels, &n, err));
    const int seeds = doc_seeds(doc);
    ttt_status rs = replicate(&trees, &labels, &n, seeds, err);
    if (rs != TTT_OK) {
        ttt_cfg_points_free(trees, labels, n);
        return rs;
    }
    ttt_plan *p = ttt_fault_calloc(1, sizeof *p);
    ttt_status s = TTT_OK;
    if (!p || !(p->points = ttt_fault_calloc((size_t)(n > 0 ? n : 1), sizeof *p->points))) {
        s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    } else {
        p->n_points = n;
        for (int i = 0; i < n; i++) p->points[i].index = i;
    }
    for (int i = 0; s == TTT_OK && i < n; i++) {
        ttt_plan_point *pt = &p->points[i];
        if (!(pt->label = ttt_fault_strdup(labels[i]))) {
            s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
            break;
        }
        const unsigned long oom_mark = ttt_cfg_alloc_failures();
        s = plan_point(pt, trees[i], stem, err);
        /* a value the configuration code could not store (a default, a preset's key) makes
         * the point fail as out of memory, whatever the checks said after it */
        if (ttt_cfg_alloc_failures() != oom_mark)
            s = ttt_cfg_out_of_memory(err, "the plan of the experiment");
        if (s != TTT_OK && labels[i][0]) {
            error_suffix_point(err, labels[i]);
            error_hint_axes(err, ttt_cfg_get(doc, "sweep"));
        }
    }
    if (s == TTT_OK) {
        p->seeds = seeds;
        s = read_charts(doc, p, err);
    }
    if (s == TTT_OK) s = plan_columns(p, ttt_cfg_get(doc, "sweep"), trees, err);
    if (s == TTT_OK) s = read_results(doc, p, err);
    if (s == TTT_OK && !(p->resolved_yaml = resolved_text(doc, trees, labels, n)))
        s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the resolved configuration");
    /* Below this line nothing sees a tree: the points' trees go now. */
    ttt_cfg_points_free(trees, labels, n);
    if (s != TTT_OK) {
        ttt_plan_free(p);
        return s;
    }
    *out = p;
    return TTT_OK;
}

void ttt_plan_free(ttt_plan *p) {
    if (!p) return;
    for (int i = 0; p->points && i < p->n_points; i++) {
        ttt_plan_point *pt = &p->points[i];
        if (pt->cfg && pt->task && pt->task->cfg_free) pt->task->cfg_free(pt->cfg);
        free(pt->cfg);
        free(pt->label);
        free(pt->series);
        for (int c = 0; pt->values && c < p->n_cols; c++) free(pt->values[c]);
        free(pt->values);
        free(pt->name);
        free(pt->output);
    }
    free(p->points);
    for (int c = 0; c < p->n_cols; c++) free(p->cols[c]);
    free(p->cols);
    free(p->log_y_only);
    free(p->best_over);
    free(p->best_metric);
    free(p->resolved_yaml);
    free(p);
}

const char *ttt_plan_output(const ttt_plan *p, const char *out_dir) {
    return out_dir ? out_dir : p->points[0].output;
}
/* config.resolved.yaml goes first, so a run folder always says what produced it. */
static ttt_status write_resolved(const ttt_plan *p, const char *dir, ttt_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.resolved.yaml", dir);
    return ttt_write_file_atomic(path, p->resolved_yaml, err);
}

/* ------------------------------------------------------------------------------------------ */
/* One writer per run folder (docs/hardening.md "Run folders: names, one writer, re-runs";
 * docs/scaling.md "Run folders shared by ranks and jobs"). Under MPI only rank 0 locks. A run
 * or `ttt merge` holds .ttt-lock exclusively; a --shard job holds it shared (its sibling jobs
 * write the same folder, each into the parts of its own points) and .ttt-lock.shard<i>
 * exclusively, so a second job of the same shard is refused, and so is a run or a merge while
 * shard jobs run. */

#define LOCK_FILE ".ttt-lock"
#define COMPLETE_FILE ".ttt-complete"

/* Printable text only: the holder's line is shown to another user's terminal. */
static void printable(char *s) {
    for (unsigned char *p = (unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f) *p = ' ';
}

/* "pid P on host H since YYYY-MM-DD HH:MM:SS UTC: the command line" */
static void holder_line(char *out, size_t len) {
    char host[256] = "?";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    char when[64] = "?";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    char cmd[1024] = "";
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, cmd, sizeof cmd - 1);
        close(fd);
        if (n < 0) n = 0;
        cmd[n] = '\0';
        for (ssize_t i = 0; i + 1 < n; i++)
            if (!cmd[i]) cmd[i] = ' ';
    }
    snprintf(out, len, "pid %ld on host %s since %s: %s", (long)getpid(), host, when,
             cmd[0] ? cmd : "(command unknown)");
    printable(out);
}

/* Take the advisory lock dir/<name> (flock, held until *fd is closed, released by the kernel
 * when the process dies however it dies). op: LOCK_EX (the holder records itself in the file)
 * or LOCK_SH. A writer that cannot have it is refused, naming the holder as it recorded itself
 * in the file; `what` names what is locked in that message. */
static ttt_status lock_file(const char *dir, const char *name, int op, const char *what, int *fd,
                            ttt_error *err) {
    *fd = -1;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return ttt_error_set(err, TTT_ERR_IO, "run folder path '%s' is too long", dir);
    /* Never through a link: a symbolic link (or a second hard link) in its place would have the
     * holder's line written into a file outside the run folder. Created exclusively when
     * absent; an existing one is opened without following a link and must be a plain file of
     * one link (docs/hardening.md "Run folders: names, one writer, re-runs"). */
    int f = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (f < 0 && errno == EEXIST) f = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (f < 0 && errno == ELOOP)
        return ttt_error_set(err, TTT_ERR_IO,
                             "cannot lock the run folder '%s': %s is a symbolic link; expected "
                             "the run folder's own lock file (remove the link)", dir, path);
    if (f < 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot lock the run folder '%s': %s: %s", dir,
                             path, strerror(errno));
    struct stat lst = {0};
    if (fstat(f, &lst) != 0 || !S_ISREG(lst.st_mode) || lst.st_nlink != 1) {
        const int linked = S_ISREG(lst.st_mode);
        close(f);
        return ttt_error_set(err, TTT_ERR_IO,
                             "cannot lock the run folder '%s': %s is %s; expected the run "
                             "folder's own lock file (remove it)", dir, path,
                             linked ? "a file with another name too (a hard link)"
                                    : "not a regular file");
    }
    if (flock(f, op | LOCK_NB) != 0) {
        int e = errno;
        char who[1024] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(f, who, sizeof who - 1, 0) : -1;
        if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL) {
            /* a file system without locks (some network mounts): run, but say so */
            fprintf(stderr, "ttt: warning: cannot lock the run folder '%s' (%s); make sure no "
                            "other run writes into it\n", dir, strerror(e));
            *fd = f;
            return TTT_OK;
        }
        close(f);
        if (e != EWOULDBLOCK)
            return ttt_error_set(err, TTT_ERR_IO, "cannot lock the run folder '%s': %s", dir,
                                 strerror(e));
        who[n > 0 ? n : 0] = '\0';
        char *nl = strchr(who, '\n');
        if (nl) *nl = '\0';
        printable(who);
        return ttt_error_set(err, TTT_ERR_IO,
                             "%s is in use by another ttt run (%s); wait for it to end, or write "
                             "into another folder with --out",
                             what, who[0] ? who : "it has not recorded itself yet, or --shard "
                                                  "jobs are writing into it");
    }
    if (op == LOCK_EX) {
        char line[1400];
        holder_line(line, sizeof line);
        size_t len = strlen(line);
        line[len++] = '\n';
        /* informational: a failure to record the holder does not stop the run (the lock holds) */
        int recorded = ftruncate(f, 0) == 0 && pwrite(f, line, len, 0) == (ssize_t)len;
        (void)recorded;
    }
    *fd = f;
    return TTT_OK;
}

/* The locks one process holds on a run folder: the main lock, and a --shard job's own. */
typedef struct run_locks {
    int main, shard;
    int main_op;
} run_locks;

/* shard < 0: the whole folder (a run or a merge); else the lock of --shard shard/n_shards. */
static ttt_status lock_run_folder(const char *dir, int shard, int n_shards, run_locks *L,
                                  ttt_error *err) {
    L->main = L->shard = -1;
    L->main_op = shard < 0 ? LOCK_EX : LOCK_SH;
    char what[4400];
    snprintf(what, sizeof what, "the run folder '%s'", dir);
    TTT_TRY(lock_file(dir, LOCK_FILE, L->main_op, what, &L->main, err));
    if (shard < 0) return TTT_OK;
    char name[64];
    snprintf(name, sizeof name, LOCK_FILE ".shard%d", shard);
    snprintf(what, sizeof what, "shard %d/%d of the run folder '%s'", shard, n_shards, dir);
    ttt_status s = lock_file(dir, name, LOCK_EX, what, &L->shard, err);
    if (s != TTT_OK) {
        close(L->main);
        L->main = -1;
    }
    return s;
}

static void unlock_run_folder(run_locks *L) {
    if (L->shard >= 0) close(L->shard);
    if (L->main >= 0) close(L->main);
    L->main = L->shard = -1;
}

/* Temporary files a killed run left in the folders the lock holder owns (no live writer owns
 * them): the whole folder's for the main lock's exclusive holder; a shard job's own points'
 * checkpoint folders only (its siblings write into the run folder and parts/ at the same time).
 * owner: (n_points) or NULL = every point. */
static void remove_stale_tmp(const ttt_plan *p, const char *dir, const int *owner, int me) {
    char path[4096];
    if (!owner) {
        ttt_remove_stale_tmp(dir);
        snprintf(path, sizeof path, "%s/parts", dir);
        ttt_remove_stale_tmp(path);
    }
    for (int i = 0; i < p->n_points; i++) {
        if (owner && owner[i] != me) continue;
        snprintf(path, sizeof path, "%s/checkpoints/point%d", dir, i);
        ttt_remove_stale_tmp(path);
    }
}

/* What the completion mark of this plan says: the hash of config.resolved.yaml. */
static void complete_text(const ttt_plan *p, char out[32]) {
    char h[17];
    ttt_checkpoint_config_hash(p->resolved_yaml, h);
    snprintf(out, 32, "%s\n", h);
}

/* The folder holds a completed run of exactly this plan: its mark matches and its results are
 * there. Running it again would only spend the time to write the same numbers. */
static int run_is_complete(const ttt_plan *p, const char *dir) {
    char path[4096 + 32], want[32], got[32] = "";
    snprintf(path, sizeof path, "%s/" COMPLETE_FILE, dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    got[n] = '\0';
    complete_text(p, want);
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    struct stat st;
    return strcmp(got, want) == 0 && stat(path, &st) == 0;
}

static void say_complete(const char *dir) {
    fprintf(stderr, "ttt: %s holds this experiment's completed run; nothing was run and nothing "
                    "changed (to run it again, delete the folder or use --out)\n", dir);
}

static void part_path(char *out, size_t len, const char *dir, int i, const char *ext) {
    snprintf(out, len, "%s/parts/point%d.%s", dir, i, ext);
}

/* The parts are spent once the run folder holds their records. */
static void remove_parts(const ttt_plan *p, const char *dir) {
    char path[4096];
    for (int i = 0; i < p->n_points; i++) {
        part_path(path, sizeof path, dir, i, "rec");
        unlink(path);
        part_path(path, sizeof path, dir, i, "jsonl"); /* a stream earlier versions kept */
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/parts", dir);
    rmdir(path); /* left in place when it holds anything else */
}

/* The --shard jobs' lock files, once their parts are merged. Only under the exclusive main lock:
 * no shard job holds (or can take) its own lock while that is held. */
static void remove_shard_locks(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    const size_t pl = strlen(LOCK_FILE ".shard");
    struct dirent *de;
    char path[4096 + 256];
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, LOCK_FILE ".shard", pl) != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
}

/* Charts, metrics.jsonl, summary.csv, the charts, index.html, and the table (table NULL: none). */
static ttt_status finish(const ttt_plan *p, ttt_results *res, const char *dir, FILE *table,
                         ttt_error *err) {
    const ttt_plan_point *first = &p->points[0];
    const ttt_task *t = first->task;
    ttt_results_set_point(res, NULL, -1, 0);
    ttt_results_set_axes(res, (const char *const *)p->cols, p->n_cols);
    ttt_results_set_log_y(res, p->log_y, p->log_y_only);
    ttt_results_set_best(res, p->best_over, p->best_metric, p->best_max);
    if (t->charts) t->charts(res, first->cfg);
    TTT_TRY(ttt_results_write(res, dir, err));
    const char *const *cols = t->columns_for ? t->columns_for(first->cfg) : t->columns;
    if (cols && table) ttt_results_print_table(res, table, cols);
    return TTT_OK;
}

/* A whole run's end, once everything the mark vouches for is written (the results, and
 * provenance.json with its outcome): the completion mark, then the parts are spent (in that
 * order: a run that fails at its last write still has what it needs to end, and a folder is
 * never marked complete over a file that did not reach the disk). */
static ttt_status mark_complete(const ttt_plan *p, const char *dir, ttt_error *err) {
    char mark[4096 + 32], text[32];
    snprintf(mark, sizeof mark, "%s/" COMPLETE_FILE, dir);
    complete_text(p, text);
    const ttt_status s = ttt_write_file_atomic(mark, text, err);
    if (s != TTT_OK) {
        /* renamed into place but not made durable (its folder's fsync failed): a run that
         * reports a failure leaves no mark */
        unlink(mark);
        return s;
    }
    remove_parts(p, dir);
    remove_shard_locks(dir);
    return TTT_OK;
}

/* From now on the records added to res belong to point i: its columns first. */
static void stamp_point(const ttt_plan *p, int i, ttt_results *res) {
    ttt_record *r = malloc(sizeof *r);
    if (!r) {
        ttt_results_set_point(res, NULL, -1, 0);
        return;
    }
    point_fields(p, i, r);
    ttt_results_set_point(res, p->n_cols ? r : NULL, p->points[i].group, p->points[i].member);
    free(r);
}

static void remove_mark(const char *dir) {
    char mark[4096 + 32];
    snprintf(mark, sizeof mark, "%s/" COMPLETE_FILE, dir);
    unlink(mark);
}


/* ---- whose folder it is (docs/hardening.md "What a command may overwrite") ---- */

/* The whole text of a file (malloc'd), or NULL with errno set. */
static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = (len + 4096 + 1) * 2;
            char *b = ttt_fault_realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            buf = b;
        }
        const size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

/* `cmd` (run or merge) may write the folder `dir` for plan p: it is absent or empty, or a run
 * folder of this experiment: the same points, each with the same configuration hash (so a
 * changed train.stop_at or train.threads continues it; anything that changes a result does
 * not). Anything else is refused before a byte is written. */
static ttt_status check_own_folder(const ttt_plan *p, const char *dir, const char *cmd,
                                   ttt_error *err) {
    TTT_TRY(ttt_output_folder_check(cmd, dir, TTT_FOLDER_RUN, err));
    if (ttt_folder_kind_of(dir) != TTT_FOLDER_RUN) return TTT_OK;
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/config.resolved.yaml", dir);
    char *text = read_all(path);
    if (!text && errno == ENOMEM)
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory reading '%s'", path);
    if (!text)
        return ttt_error_set(err, TTT_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    const int same = strcmp(text, p->resolved_yaml) == 0;
    free(text);
    if (same) return TTT_OK;
    /* another text: plan it again (as `ttt compare` does) and compare the points */
    ttt_cfg_node *doc = NULL;
    ttt_plan *q = NULL;
    ttt_error inner = {0};
    ttt_status s = ttt_cfg_load_file(path, &doc, &inner);
    if (s == TTT_OK) s = ttt_plan_build(doc, "experiment", &q, &inner);
    ttt_cfg_free(doc);
    char why[600] = "";
    if (s == TTT_ERR_NOMEM) {
        *err = inner;
        return s;
    }
    if (s != TTT_OK) {
        snprintf(why, sizeof why, "its config.resolved.yaml does not plan: %.400s", inner.msg);
    } else if (q->n_points != p->n_points) {
        snprintf(why, sizeof why, "%d point%s there, %d here", q->n_points,
                 q->n_points == 1 ? "" : "s", p->n_points);
    } else {
        for (int i = 0; i < p->n_points && !why[0]; i++)
            if (strcmp(q->points[i].config_hash, p->points[i].config_hash) != 0)
                snprintf(why, sizeof why, "point %d%s%.200s: configuration hash %s there, %s here",
                         i, p->points[i].label[0] ? " " : "", p->points[i].label,
                         q->points[i].config_hash, p->points[i].config_hash);
    }
    ttt_plan_free(q);
    if (!why[0]) return TTT_OK;
    return ttt_error_set(err, TTT_ERR_CONFIG,
                         "%s: the run folder '%s' holds a run of another configuration (%s); "
                         "nothing was changed: write this run into another folder with --out, "
                         "or delete '%s' to replace it", cmd, dir, why, dir);
}

/* The topmost folder of `dir` that does not exist yet (malloc'd into *out), or NULL when dir
 * exists: what the run creates, and removes again if it fails before its first point. */
static ttt_status topmost_missing(const char *dir, char **out, ttt_error *err) {
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) == 0) return TTT_OK;
    char *b = ttt_fault_strdup(dir);
    if (!b) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the run folder's name");
    size_t len = strlen(b);
    while (len > 1 && b[len - 1] == '/') b[--len] = '\0';
    /* shorten while the parent is missing too */
    for (;;) {
        char *slash = strrchr(b, '/');
        if (!slash || slash == b) break;
        *slash = '\0';
        const int missing = stat(b, &st) != 0;
        if (!missing) {
            *slash = '/';
            break;
        }
        while (slash > b && slash[-1] == '/') *--slash = '\0'; /* "a//b" */
    }
    *out = b;
    return TTT_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag, (void)f;
    return remove(path);
}

/* Remove what the run created: the run folder with what it wrote there (only with its lock
 * held: then nothing in it is another's), and each empty folder above it up to `created`. */
static void remove_created(const char *dir, const char *created, int locked) {
    if (locked) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    char *b = strdup(dir);
    if (!b) return;
    size_t len = strlen(b);
    while (len > 1 && b[len - 1] == '/') b[--len] = '\0';
    const size_t top = strlen(created);
    for (;;) {
        if (rmdir(b) != 0 && errno != ENOENT) break;
        if (strlen(b) <= top) break;
        char *slash = strrchr(b, '/');
        if (!slash) break;
        while (slash > b && slash[-1] == '/') slash--;
        *slash = '\0';
    }
    free(b);
}

/* Empty an existing folder the run found empty (but for ttt's lock, kept when it was there):
 * what a run that failed before its first point wrote there goes again. Only under the lock. */
static _Thread_local int keep_lock; /* nftw has no user argument: remove_contents sets it */
static int remove_inner(const char *path, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag;
    if (f->level == 0) return 0;
    if (f->level == 1 && keep_lock && strcmp(path + f->base, LOCK_FILE) == 0) return 0;
    remove(path);
    return 0;
}

static void remove_contents(const char *dir, int lock_was_there) {
    keep_lock = lock_was_there;
    nftw(dir, remove_inner, 16, FTW_DEPTH | FTW_PHYS);
}

/* A point of the folder kept a checkpoint: the work of a failed run that the next one resumes. */
static int holds_checkpoint(const ttt_plan *p, const char *dir) {
    char path[4096 + 64];
    struct stat st;
    for (int i = 0; i < p->n_points; i++) {
        snprintf(path, sizeof path, "%s/checkpoints/point%d/" TTT_CHECKPOINT_LAST, dir, i);
        if (stat(path, &st) == 0) return 1;
        snprintf(path, sizeof path, "%s/checkpoints/point%d/" TTT_CHECKPOINT_PREV, dir, i);
        if (stat(path, &st) == 0) return 1;
    }
    return 0;
}

void ttt_plan_assign(const ttt_plan *p, int n, int *owner) {
    const int np = p->n_points;
    int *ord = ttt_fault_malloc((size_t)(np > 0 ? np : 1) * sizeof *ord);
    double *load = ttt_fault_calloc((size_t)(n > 0 ? n : 1), sizeof *load);
    if (!ord || !load || n < 1) { /* out of memory: round robin is still an assignment */
        for (int i = 0; i < np; i++) owner[i] = n > 0 ? i % n : 0;
        free(ord);
        free(load);
        return;
    }
    /* costliest first, ties in point order (insertion sort: stable, and sweeps are small) */
    for (int i = 0; i < np; i++) {
        int j = i;
        while (j > 0 && p->points[ord[j - 1]].cost < p->points[i].cost) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = i;
    }
    for (int k = 0; k < np; k++) {
        int best = 0;
        for (int o = 1; o < n; o++)
            if (load[o] < load[best]) best = o;
        owner[ord[k]] = best;
        load[best] += p->points[ord[k]].cost;
    }
    free(ord);
    free(load);
}

static ttt_status merge_locked(const ttt_plan *p, const char *dir, FILE *table, ttt_error *err);

ttt_status ttt_plan_run(const ttt_plan *p, const char *out_dir, int progress, FILE *table,
                        ttt_error *err) {
    return ttt_plan_run_exec(p, out_dir, progress, table, NULL, err);
}

ttt_status ttt_plan_run_exec(const ttt_plan *p, const char *out_dir, int progress, FILE *table,
                             const ttt_plan_exec *x, ttt_error *err) {
    const ttt_comm *comm = x && x->comm ? x->comm : &ttt_comm_self;
    const int R = comm->size, leader = comm->rank == 0;
    const int sharded = x && x->n_shards > 0;
    /* --parallel, when given, else the first point's train.data_parallel */
    const ttt_plan_parallel par = x && x->parallel != TTT_PARALLEL_AUTO ? x->parallel
                                                                       : (ttt_plan_parallel)p->points[0].parallel;
    /* data: every rank trains every point together; split: each point has one owner (a rank or
     * a shard) and its records travel through its part file */
    const int data = R > 1 && !sharded &&
                     (par == TTT_PARALLEL_DATA || (par == TTT_PARALLEL_AUTO && p->n_points < R));
    const int split = sharded || (R > 1 && !data);
    /* the one process that writes the run folder's shared files (and holds its lock): rank 0,
     * or a --shard job (its own points' parts; ttt_plan_merge writes the rest) */
    const int writer = leader || sharded;
    const char *dir = ttt_plan_output(p, out_dir);
    char path[4096];

    int *owner = ttt_fault_calloc((size_t)p->n_points, sizeof *owner);
    if (!owner) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    const int me = sharded ? x->shard : comm->rank;
    if (split) ttt_plan_assign(p, sharded ? x->n_shards : R, owner);

    /* The writer locks the folder, removes what killed runs left and decides whether the run is
     * already complete; the other ranks learn both from it before anyone writes. */
    run_locks L = {-1, -1, 0};
    int complete = 0;
    ttt_status s = TTT_OK;
    char *created = NULL; /* the topmost folder this run creates (NULL: the folder was there) */
    int found_empty = 0, lock_was_there = 0; /* the folder was there, empty (and its lock) */
    if (writer) {
        /* what the folder holds decides before anything is written: a folder of other files or
         * a run of another configuration is refused and left as it is */
        s = check_own_folder(p, dir, "run", err);
        if (s == TTT_OK && ttt_folder_kind_of(dir) == TTT_FOLDER_EMPTY) {
            char lock[4096 + 32];
            struct stat lst;
            snprintf(lock, sizeof lock, "%s/" LOCK_FILE, dir);
            found_empty = 1;
            lock_was_there = lstat(lock, &lst) == 0;
        }
        if (s == TTT_OK) s = topmost_missing(dir, &created, err);
        if (s == TTT_OK) s = ttt_mkdirs(dir, err);
        if (s != TTT_OK && created) remove_created(dir, created, 0);
        if (s == TTT_OK)
            s = lock_run_folder(dir, sharded ? x->shard : -1, sharded ? x->n_shards : 0, &L, err);
        if (s == TTT_OK) {
            remove_stale_tmp(p, dir, sharded ? owner : NULL, me);
            /* again under the lock: a run that ended meanwhile may have written it */
            s = check_own_folder(p, dir, "run", err);
        }
        if (s == TTT_OK) complete = run_is_complete(p, dir);
    }
    if (R > 1 && !ttt_comm_all(comm, s == TTT_OK) && s == TTT_OK)
        s = ttt_error_set(err, TTT_ERR_IO, "rank 0 could not take the run folder %s (its "
                          "message is on its stderr)", dir);
    if (s == TTT_OK && R > 1) complete = !ttt_comm_all(comm, !complete);
    if (s != TTT_OK || complete) {
        if (complete && leader) say_complete(dir);
        unlock_run_folder(&L);
        free(owner);
        free(created);
        return s;
    }
    if (leader && !sharded) remove_mark(dir); /* this run replaces whatever the folder held */

    const ttt_plan_point *first = &p->points[0];
    ttt_results *res = ttt_results_new(first->name);
    if (!res) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    if (s == TTT_OK && writer) s = write_resolved(p, dir, err);
    /* how the run was made, rewritten with its end below (docs/training.md "Provenance") */
    const time_t started = time(NULL);
    const int provenance = leader && !sharded;
    if (s == TTT_OK && provenance) s = ttt_provenance_write(dir, started, 0, NULL, err);
    /* Records go to metrics.jsonl as they are made (a temporary name until the run completes;
     * trained points also journal theirs next to their checkpoints, which only the point's owner
     * writes), so memory stays flat however long the run (docs/hardening.md "Flat memory over
     * long runs"). Points that run apart keep theirs in their part files: metrics.jsonl has one
     * writer, rank 0, which merges the parts. */
    if (s == TTT_OK && leader && !split) s = ttt_results_stream(res, dir, err);
    if (s == TTT_OK && split) {
        snprintf(path, sizeof path, "%s/parts", dir);
        s = ttt_mkdirs(path, err);
    }
    if (R > 1 && !ttt_comm_all(comm, s == TTT_OK) && s == TTT_OK)
        s = ttt_error_set(err, TTT_ERR_IO, "rank 0 could not prepare the run folder %s", dir);
    if (s != TTT_OK) {
        ttt_results_free(res);
        if (created && R == 1 && !sharded) remove_created(dir, created, 1);
        else if (found_empty && R == 1 && !sharded) remove_contents(dir, lock_was_there);
        unlock_run_folder(&L);
        free(owner);
        free(created);
        return s;
    }

    long total = 0;
    for (int i = 0; i < p->n_points; i++)
        if (!split || owner[i] == me) total += (long)p->points[i].cost;
    /* ranks that run points apart tell each other of a stop (data-parallel ranks agree on it in
     * every step's gather and before each point) */
    if (split && R > 1) ttt_train_stop_peers(comm);
    ttt_progress pr;
    ttt_progress_init(&pr, first->name, total, NULL, progress && leader);
    long done = 0;
    int finished = 0;
    for (int i = 0; i < p->n_points && s == TTT_OK; i++) {
        const ttt_plan_point *pt = &p->points[i];
        if (split && owner[i] != me) continue;
        const ttt_task *t = pt->task;
        /* a stop before the point: ranks that run it together agree on it first */
        int stop = ttt_train_stop_requested();
        if (data) stop = !ttt_comm_all(comm, !stop);
        if (stop) {
            s = ttt_error_set(err, TTT_ERR_INTERRUPTED, "interrupted");
            break;
        }
        ttt_results *into = split ? ttt_results_new(first->name) : res;
        const int from = into ? ttt_results_count(into) : 0;
        if (into) stamp_point(p, i, into);
        char part[4096];
        part_path(part, sizeof part, dir, i, "rec");
        int found = 0;
        if (!into) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
        /* a part under the same configuration: the point ended in an earlier run */
        else if (!data) s = ttt_part_load(into, part, pt->config_hash, &found, err);
        if (s == TTT_OK && !found) {
            /* the label names the point's lines in charts: its seeds share one */
            ttt_task_run run = {.cfg = pt->cfg, .label = pt->series, .point = i, .seed = pt->seed,
                                .config_hash = pt->config_hash, .results = into,
                                .progress = &pr, .work_done = done, .run_dir = dir,
                                .comm = data ? comm : NULL};
            s = t->run(&run, err);
            if (s != TTT_OK && s != TTT_ERR_INTERRUPTED && pt->label[0])
                error_suffix_point(err, pt->label);
            if (s == TTT_OK && split) s = ttt_part_save(into, from, part, pt->config_hash, err);
        }
        if (s == TTT_OK) finished++;
        if (split) ttt_results_free(into);
        done += (long)pt->cost;
        ttt_progress_update(&pr, done, pt->label);
    }
    ttt_progress_finish(&pr);
    free(owner);
    /* The ranks agree on how the run ended: a stop on any rank is a stop for all */
    if (R > 1) {
        const int all_ok = ttt_comm_all(comm, s == TTT_OK);
        const int any_stop = !ttt_comm_all(comm, s != TTT_ERR_INTERRUPTED);
        if (split) ttt_train_stop_peers(NULL);
        if (s == TTT_OK && !all_ok) {
            if (any_stop)
                s = ttt_error_set(err, TTT_ERR_INTERRUPTED, "interrupted (on another rank)");
            else
                s = ttt_error_set(err, TTT_ERR_IO,
                                  "another rank failed (its message is on its stderr); the points "
                                  "that ended are kept in %s/parts: run the same command again to "
                                  "run the rest", dir);
        }
    }
    if (s == TTT_ERR_INTERRUPTED) {
        /* Interrupted: what the finished points measured is kept all the same (and a trained
         * point's checkpoint was saved), so a stopped sweep keeps its work (docs/hardening.md
         * "Signals"): written into the run folder, or, when the points ran apart, in their
         * parts, which the next run (or `ttt merge`) picks up. */
        ttt_error stop_msg = *err;
        ttt_status w = TTT_OK;
        if (leader && !split) w = finish(p, res, dir, NULL, err);
        if (w != TTT_OK) {
            s = w;
        } else if (split) {
            ttt_error_set(err, TTT_ERR_INTERRUPTED,
                          "%s; the points that ended are kept in %s/parts: run the same command "
                          "again to run the rest", stop_msg.msg, dir);
        } else if (strcmp(stop_msg.msg, "interrupted") == 0) {
            ttt_error_set(err, TTT_ERR_INTERRUPTED,
                          "interrupted in point %d of %d (%d finished); what was measured so far "
                          "is in %s; run the same command again to run it whole",
                          finished + 1, p->n_points, finished, dir);
        } else {
            ttt_error_set(err, TTT_ERR_INTERRUPTED, "%s; the results so far are in %s",
                          stop_msg.msg, dir);
        }
    } else if (s == TTT_OK && leader && !sharded) {
        if (split) {
            ttt_results_free(res);
            res = NULL;
            s = merge_locked(p, dir, table, err);
        } else {
            s = finish(p, res, dir, table, err);
        }
    }
    ttt_results_free(res);
    if (provenance) {
        char outcome[sizeof err->msg + 16];
        if (s == TTT_OK) snprintf(outcome, sizeof outcome, "complete");
        else if (s == TTT_ERR_INTERRUPTED) snprintf(outcome, sizeof outcome, "interrupted");
        else snprintf(outcome, sizeof outcome, "failed: %s", err->msg);
        ttt_error perr;
        const ttt_status w = ttt_provenance_write(dir, started, time(NULL), outcome, &perr);
        if (w != TTT_OK && s == TTT_OK) {
            *err = perr;
            s = w;
        }
    }
    /* the mark last, after everything it vouches for (provenance.json's outcome included) */
    if (s == TTT_OK && leader && !sharded) {
        s = mark_complete(p, dir, err);
        if (s != TTT_OK && provenance) { /* best effort: the outcome it already says is wrong */
            char outcome[sizeof err->msg + 16];
            snprintf(outcome, sizeof outcome, "failed: %s", err->msg);
            ttt_error perr;
            (void)ttt_provenance_write(dir, started, time(NULL), outcome, &perr);
        }
    }
    /* A run that fails before its first point leaves what it found: a folder it created, with
     * no point finished and no checkpoint kept, goes again, and one it found empty is emptied (docs/hardening.md "Run folders:
     * names, one writer, re-runs"). Only a process that ran alone wrote into it. */
    if (s != TTT_OK && s != TTT_ERR_INTERRUPTED && (created || found_empty) && finished == 0 &&
        R == 1 && !sharded && !holds_checkpoint(p, dir)) {
        if (created) remove_created(dir, created, 1);
        else remove_contents(dir, lock_was_there);
    }
    unlock_run_folder(&L);
    free(created);
    return s;
}

/* The run folder from the parts every point left; the caller holds the folder's lock. */
static ttt_status merge_locked(const ttt_plan *p, const char *dir, FILE *table, ttt_error *err) {
    const ttt_plan_point *first = &p->points[0];
    ttt_results *res = ttt_results_new(first->name);
    if (!res) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    char missing[256] = "";
    int n_missing = 0;
    ttt_status s = ttt_results_stream(res, dir, err);
    for (int i = 0; i < p->n_points && s == TTT_OK; i++) {
        char part[4096];
        part_path(part, sizeof part, dir, i, "rec");
        int found = 0;
        stamp_point(p, i, res);
        s = ttt_part_load(res, part, p->points[i].config_hash, &found, err);
        if (s == TTT_OK && !found) {
            size_t n = strlen(missing);
            if (n < sizeof missing - 16)
                snprintf(missing + n, sizeof missing - n, "%s%d", n_missing ? ", " : "", i);
            else if (n < sizeof missing - 4)
                snprintf(missing + n, sizeof missing - n, ", …");
            n_missing++;
        }
    }
    if (s == TTT_OK && n_missing)
        s = ttt_error_set(err, TTT_ERR_IO,
                          "cannot merge %s: %d of %d points have no records in %s/parts (points "
                          "%s); run their shards (or the run without --shard) first",
                          dir, n_missing, p->n_points, dir, missing);
    if (s == TTT_OK) s = write_resolved(p, dir, err);
    if (s == TTT_OK) s = finish(p, res, dir, table, err);
    ttt_results_free(res);
    return s;
}

ttt_status ttt_plan_merge(const ttt_plan *p, const char *out_dir, FILE *table, ttt_error *err) {
    const char *dir = ttt_plan_output(p, out_dir);
    struct stat st;
    if (stat(dir, &st) != 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot merge %s: %s (run the --shard jobs first)",
                             dir, strerror(errno));
    TTT_TRY(check_own_folder(p, dir, "merge", err));
    run_locks L;
    TTT_TRY(lock_run_folder(dir, -1, 0, &L, err));
    remove_stale_tmp(p, dir, NULL, 0);
    ttt_status s = check_own_folder(p, dir, "merge", err);
    if (s != TTT_OK) {
    } else if (run_is_complete(p, dir)) {
        say_complete(dir);
    } else {
        remove_mark(dir);
        const time_t started = time(NULL);
        s = merge_locked(p, dir, table, err);
        /* the merge's own command and time: the --shard jobs' are their own (docs/training.md
         * "Provenance"); then the mark, which vouches for it too */
        if (s == TTT_OK) s = ttt_provenance_write(dir, started, time(NULL), "complete", err);
        if (s == TTT_OK) s = mark_complete(p, dir, err);
    }
    unlock_run_folder(&L);
    return s;
}
