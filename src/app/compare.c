/* Runs side by side (compare.h). Each run's configuration is planned again from its
 * config.resolved.yaml: that gives its task, its sweep's columns and the task's charts, so the
 * merged page draws what each run's own page drew. */
#define _GNU_SOURCE /* realpath, getline */
#include "compare.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "experiment.h"
#include "plan.h"
#include "provenance.h"
#include "results.h"
#include "strbuf.h"

/* "dir/name" in buf. */
static void in_dir(char *buf, size_t len, const char *dir, const char *name) {
    size_t dl = strlen(dir);
    snprintf(buf, len, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", name);
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The folder's name: its last component without trailing slashes. */
static void run_name(const char *dir, char *out, size_t len) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(out, len, "%.*s", (int)(n - b), dir + b);
}

/* One cell of a CSV text at *p (RFC 4180, as summary.csv is written) into out; *p ends after
 * its separator. Returns 0 at the end of a line (or of the text), 1 when more cells follow. */
static int csv_next(const char **p, char *out, size_t cap) {
    const char *s = *p;
    size_t n = 0;
    if (*s == '"') {
        s++;
        for (; *s; s++) {
            if (*s == '"' && s[1] == '"') s++;
            else if (*s == '"') {
                s++;
                break;
            }
            if (n + 1 < cap) out[n++] = *s;
        }
    } else {
        for (; *s && *s != ',' && *s != '\n' && *s != '\r'; s++)
            if (n + 1 < cap) out[n++] = *s;
    }
    out[n] = '\0';
    if (*s == '\r') s++;
    if (*s == ',') {
        *p = s + 1;
        return 1;
    }
    if (*s == '\n') s++;
    *p = s;
    return 0;
}

static char *read_text(const char *path, ttt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        ttt_error_set(err, TTT_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    char chunk[65536];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + got + 1 > cap) {
            cap = (len + got + 1) * 2;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                ttt_error_set(err, TTT_ERR_NOMEM, "out of memory reading '%s'", path);
                return NULL;
            }
            buf = b;
        }
        memcpy(buf + len, chunk, got);
        len += got;
    }
    fclose(f);
    if (!buf && !(buf = malloc(1))) {
        ttt_error_set(err, TTT_ERR_NOMEM, "out of memory reading '%s'", path);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

/* Every row of a summary.csv as a summary record of res (numbers where a cell is one, empty
 * cells absent). */
static ttt_status add_summary(ttt_results *res, const char *path, ttt_error *err) {
    char *text = read_text(path, err);
    if (!text) return TTT_ERR_IO;
    enum { MAXC = 4 * TTT_RECORD_MAX_FIELDS };
    char(*head)[48] = calloc(MAXC, sizeof *head);
    ttt_record *r = malloc(sizeof *r);
    ttt_status s = head && r ? TTT_OK
                             : ttt_error_set(err, TTT_ERR_NOMEM,
                                             "compare: out of memory reading '%s'", path);
    const char *p = text;
    int nh = 0, more = 1;
    char cell[192];
    while (s == TTT_OK && *p && more) {
        more = csv_next(&p, cell, sizeof cell);
        if (nh < MAXC) snprintf(head[nh++], sizeof head[0], "%.47s", cell);
    }
    while (s == TTT_OK && *p) {
        ttt_record_clear(r);
        int c = 0;
        do {
            more = csv_next(&p, cell, sizeof cell);
            if (c < nh && cell[0]) {
                char *end;
                double v = strtod(cell, &end);
                if (end != cell && !*end) ttt_record_num(r, head[c], v);
                else ttt_record_str(r, head[c], cell);
            }
            c++;
        } while (more && r->n < TTT_RECORD_MAX_FIELDS);
        while (more) more = csv_next(&p, cell, sizeof cell); /* columns beyond a record */
        ttt_results_add(res, r, 1);
    }
    free(r);
    free(head);
    free(text);
    return s;
}

/* Every record of a metrics.jsonl as a measurement of res, its series prefixed by the run's
 * name so the runs' lines stay apart in the overlaid charts. */
static ttt_status add_metrics(ttt_results *res, const char *path, const char *name,
                              ttt_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return ttt_error_set(err, TTT_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    ttt_record *r = malloc(sizeof *r);
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    ttt_status s = r ? TTT_OK
                     : ttt_error_set(err, TTT_ERR_NOMEM, "compare: out of memory reading '%s'",
                                     path);
    while (s == TTT_OK && getline(&line, &cap, f) > 0) {
        lineno++;
        if (ttt_record_parse_json(r, line) != TTT_OK) {
            s = ttt_error_set(err, TTT_ERR_FORMAT, "%s:%ld: not a record written by ttt", path,
                              lineno);
            break;
        }
        const ttt_field *sf = ttt_record_get(r, "series");
        char series[200];
        snprintf(series, sizeof series, "%s%s%s", name, sf && sf->str[0] ? ": " : "",
                 sf ? sf->str : "");
        ttt_record_str(r, "series", series);
        ttt_results_add(res, r, 0);
    }
    free(line);
    free(r);
    fclose(f);
    return s;
}

/* Check the folder is a completed run and plan its configuration. */
static ttt_status open_run(const char *dir, ttt_experiment **e, ttt_error *err) {
    char path[PATH_MAX];
    struct stat st;
    if (stat(dir, &st) != 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot compare '%s': %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ttt_error_set(err, TTT_ERR_IO, "cannot compare '%s': not a folder (expected a run "
                             "folder that `ttt run` wrote)", dir);
    in_dir(path, sizeof path, dir, "config.resolved.yaml");
    if (!is_file(path))
        return ttt_error_set(err, TTT_ERR_IO, "cannot compare '%s': not a run folder (it has no "
                             "config.resolved.yaml, which `ttt run` writes first)", dir);
    in_dir(path, sizeof path, dir, "summary.csv");
    if (!is_file(path))
        return ttt_error_set(err, TTT_ERR_IO, "cannot compare '%s': its run has not completed (no "
                             "summary.csv); run the same `ttt run` again to finish it, or "
                             "`ttt merge` after --shard jobs", dir);
    in_dir(path, sizeof path, dir, "config.resolved.yaml");
    ttt_status s = ttt_experiment_load(path, NULL, 0, e, err);
    if (s != TTT_OK) {
        ttt_error inner = *err;
        ttt_error_set(err, s, "cannot compare '%s': its configuration does not plan: %s", dir,
                      inner.msg);
    }
    return s;
}

/* out/TTT_COMPARISON_MARK: the runs compared, one a line; it marks the folder as a
 * comparison's, which the next `ttt compare --out` may replace. */
static ttt_status write_mark(const char *out, const char *const *dirs, int n, ttt_error *err) {
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    for (int i = 0; i < n; i++) ttt_strbuf_printf(&b, "%s\n", dirs[i]);
    char *text = ttt_strbuf_take(&b);
    if (!text) return ttt_error_set(err, TTT_ERR_NOMEM, "compare: out of memory for %s",
                                    TTT_COMPARISON_MARK);
    char path[PATH_MAX];
    in_dir(path, sizeof path, out, TTT_COMPARISON_MARK);
    ttt_status s = ttt_write_file_atomic(path, text, err);
    free(text);
    return s;
}

ttt_status ttt_compare(const char *const *dirs, int n, const char *out, FILE *table,
                       ttt_error *err) {
    if (n < 1) return ttt_error_set(err, TTT_ERR_IO, "compare: no run folders given");
    ttt_experiment **ex = calloc((size_t)n, sizeof *ex);
    char(*names)[256] = calloc((size_t)n, sizeof *names);
    if (!ex || !names) {
        free(ex);
        free(names);
        return ttt_error_set(err, TTT_ERR_NOMEM, "compare: out of memory for %d run folders", n);
    }
    ttt_status s = TTT_OK;
    for (int i = 0; i < n && s == TTT_OK; i++) s = open_run(dirs[i], &ex[i], err);
    /* one task kind: their metrics and charts are the same quantities */
    for (int i = 1; i < n && s == TTT_OK; i++) {
        const char *k0 = ex[0]->plan->points[0].task->name;
        const char *ki = ex[i]->plan->points[0].task->name;
        if (strcmp(k0, ki) != 0)
            s = ttt_error_set(err, TTT_ERR_CONFIG,
                              "cannot compare '%s' (task %s) with '%s' (task %s): runs of "
                              "different task kinds measure different things; compare runs of "
                              "one kind", dirs[0], k0, dirs[i], ki);
    }
    /* names: the folders' names, or the paths as given when two folders share a name */
    for (int i = 0; i < n && s == TTT_OK; i++) run_name(dirs[i], names[i], sizeof names[i]);
    int clash = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) clash |= strcmp(names[i], names[j]) == 0;
    for (int i = 0; clash && i < n; i++) snprintf(names[i], sizeof names[i], "%s", dirs[i]);
    if (s == TTT_OK && out) {
        char ro[PATH_MAX], rd[PATH_MAX];
        for (int i = 0; i < n && s == TTT_OK; i++)
            if (realpath(out, ro) && realpath(dirs[i], rd) && strcmp(ro, rd) == 0)
                s = ttt_error_set(err, TTT_ERR_IO, "compare: --out %s is one of the runs; write "
                                  "the comparison into a folder of its own", out);
        /* a new or empty folder, or an earlier comparison (docs/hardening.md "What a command
         * may overwrite"): never a run folder or a folder of other files */
        if (s == TTT_OK) s = ttt_output_folder_check("compare", out, TTT_FOLDER_COMPARISON, err);
        if (s == TTT_OK) s = ttt_mkdirs(out, err);
        /* the mark first: a comparison that fails half-way is still the comparison's folder */
        if (s == TTT_OK) s = write_mark(out, dirs, n, err);
    }
    ttt_strbuf title;
    ttt_strbuf_init(&title);
    ttt_strbuf_puts(&title, "compare: ");
    for (int i = 0; i < n; i++) ttt_strbuf_printf(&title, "%s%s", i ? ", " : "", names[i]);
    char *t = ttt_strbuf_take(&title); /* NULL: out of memory (never a title left out) */
    if (s == TTT_OK && !t)
        s = ttt_error_set(err, TTT_ERR_NOMEM, "compare: out of memory for the page's title");
    ttt_results *res = s == TTT_OK ? ttt_results_new(t) : NULL;
    free(t);
    if (s == TTT_OK && !res)
        s = ttt_error_set(err, TTT_ERR_NOMEM, "compare: out of memory for the results table");
    if (s == TTT_OK && out) {
        s = ttt_results_stream(res, out, err);
        ttt_results_stream_measurements_only(res);
    }
    ttt_record *stamp = malloc(sizeof *stamp);
    if (s == TTT_OK && !stamp)
        s = ttt_error_set(err, TTT_ERR_NOMEM, "compare: out of memory for a run's record");
    char path[PATH_MAX];
    for (int i = 0; i < n && s == TTT_OK; i++) {
        ttt_record_clear(stamp);
        ttt_record_str(stamp, "run", names[i]);
        ttt_results_set_point(res, stamp, -1, 0);
        in_dir(path, sizeof path, dirs[i], "metrics.jsonl");
        if (out && is_file(path)) s = add_metrics(res, path, names[i], err);
        in_dir(path, sizeof path, dirs[i], "summary.csv");
        if (s == TTT_OK) s = add_summary(res, path, err);
    }
    free(stamp);
    /* aligned on the swept columns: `run`, then the union of every run's (a seed is averaged
     * over in a summary with seeds, and a column of its own without) */
    const char **axes = NULL;
    int na = 0;
    if (s == TTT_OK) {
        int cap = 1;
        for (int i = 0; i < n; i++) cap += ex[i]->plan->n_cols;
        axes = calloc((size_t)cap, sizeof *axes);
        if (!axes) s = ttt_error_set(err, TTT_ERR_NOMEM, "compare: out of memory for the columns");
    }
    if (s == TTT_OK) {
        axes[na++] = "run";
        for (int i = 0; i < n; i++)
            for (int c = 0; c < ex[i]->plan->n_cols; c++) {
                const char *k = ex[i]->plan->cols[c];
                if (ex[i]->plan->seed_axis && strcmp(k, "seed") == 0) continue; /* averaged */
                int dup = 0;
                for (int q = 0; q < na; q++) dup |= strcmp(axes[q], k) == 0;
                if (!dup) axes[na++] = k;
            }
        ttt_results_set_point(res, NULL, -1, 0);
        ttt_results_set_axes(res, axes, na);
        const ttt_plan *p0 = ex[0]->plan;
        const ttt_task *task = p0->points[0].task;
        ttt_results_set_log_y(res, p0->log_y, p0->log_y_only);
        /* each run's best rows as it chose them (its `best` column), when every run reports
         * the best over the same key by the same rule (docs/results.md "Best over an axis") */
        int same_best = p0->best_over != NULL;
        for (int i = 1; i < n && same_best; i++) {
            const ttt_plan *pi = ex[i]->plan;
            same_best = pi->best_over && !strcmp(pi->best_over, p0->best_over) &&
                        !strcmp(pi->best_metric, p0->best_metric) && pi->best_max == p0->best_max;
        }
        if (same_best) {
            ttt_results_set_best(res, p0->best_over, p0->best_metric, p0->best_max);
            ttt_results_set_best_given(res, 1);
        }
        if (task->charts) task->charts(res, p0->points[0].cfg);
        const char *const *cols =
            task->columns_for ? task->columns_for(p0->points[0].cfg) : task->columns;
        int any_seeds = 0;
        for (int i = 0; i < n; i++) any_seeds |= ex[i]->plan->seed_axis;
        /* `seeds` first when some run aggregated over seeds */
        const char *withseeds[64];
        int nc = 0;
        if (any_seeds) withseeds[nc++] = "seeds";
        for (int c = 0; cols && cols[c] && nc < 63; c++) withseeds[nc++] = cols[c];
        withseeds[nc] = NULL;
        if (out) s = ttt_results_write(res, out, err);
        if (s == TTT_OK && table) ttt_results_print_table(res, table, withseeds);
    }
    free(axes);
    ttt_results_free(res);
    for (int i = 0; i < n; i++) ttt_experiment_free(ex[i]);
    free(ex);
    free(names);
    return s;
}
