/* Results of a run, part three (results.h): index.html, one page with the run's charts (the
 * SVG text of charts.c, inlined) and its summary table (the columns of summary.csv). The page
 * needs nothing beside it: styles are inline and it links only to files of the same folder. */
#include "results.h"

#include <stdlib.h>
#include <string.h>

#include "results_internal.h"
#include "strbuf.h"

static const char html_style[] =
    "body{font-family:sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}"
    "h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}"
    "figure{margin:1.5em 0}figcaption{font-size:.85em;color:#666}"
    "figure svg{max-width:100%;height:auto;border:1px solid #ddd}"
    ".scroll{overflow-x:auto}"
    "table{border-collapse:collapse;font-size:.85em}"
    "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;white-space:nowrap}"
    "th{background:#f0f0f0;position:sticky;top:0}td.t{text-align:left}"
    "tr:nth-child(even) td{background:#fafafa}"
    "table.pivot{font-size:.95em;margin:1em 0}table.pivot td,table.pivot th{white-space:normal}"
    "details{margin:1em 0}summary{cursor:pointer;color:#245}";

/* Distinct text values of `key` over the rows, in first-seen order (at most cap). */
static int distinct(const ttt_rows *rows, const char *key, char (*vals)[160], int cap) {
    int n = 0;
    for (int i = 0; i < rows->n; i++) {
        const ttt_field *f = ttt_record_get(rows->rows[i], key);
        char t[160] = "-";
        if (f) ttt_field_short(f, t, sizeof t);
        int seen = 0;
        for (int q = 0; q < n && !seen; q++) seen = strcmp(vals[q], t) == 0;
        if (!seen && n < cap) snprintf(vals[n++], sizeof vals[0], "%s", t);
    }
    return n;
}

/* At most PIVOT_MAX columns (more values of the column key: one column, the metric) and
 * PIVOT_ROWS_MAX summary rows. */
enum { PIVOT_MAX = 64, PIVOT_ROWS_MAX = 2000 };

/* The row label of a row: its values of the row keys, joined by " / ". */
static void row_label(const ttt_record *r, const char *const *keys, int nk, char *out,
                      size_t len) {
    size_t at = 0;
    out[0] = '\0';
    for (int k = 0; k < nk && at < len; k++) {
        const ttt_field *f = ttt_record_get(r, keys[k]);
        char t[160] = "-";
        if (f) ttt_field_short(f, t, sizeof t);
        at += (size_t)snprintf(out + at, len - at, "%s%s", k ? " / " : "", t);
    }
}

/* The short name of column `key` (an axis's, else the key). */
static void column_short(const ttt_results *res, const char *key, char *out, size_t len) {
    int a = 0;
    while (a < res->n_axes && strcmp(res->axes[a], key)) a++;
    if (a < res->n_axes) ttt_axis_short(res, a, out, len);
    else snprintf(out, len, "%s", key);
}

/* A best row's cell: the metric, then the value of the best axis that gave it. */
static void best_cell(const ttt_results *res, const ttt_record *r, const char *metric, char *out,
                      size_t len) {
    char m[160] = "-", v[160] = "-";
    if (ttt_record_get(r, metric)) ttt_row_cell(r, metric, m, sizeof m);
    const ttt_field *f = ttt_record_get(r, res->best_axis);
    if (f) ttt_field_short(f, v, sizeof v);
    snprintf(out, len, "%s (%s)", m, v);
}

/* The key the pivot spreads over its columns: the task's pivot key, else the sweep axis with the
 * fewest values (at least 2); the table of best rows (best_only) has the metric as its one
 * column unless the task names a key. NULL: one column. */
static const char *pivot_column(const ttt_results *res, const ttt_rows *rows, int best_only) {
    if (res->pivot_key[0]) return res->pivot_key;
    if (best_only) return NULL;
    char vals[PIVOT_MAX][160];
    const char *col = NULL;
    int best = 0;
    for (int a = 0; a < res->n_axes; a++) {
        if (strcmp(res->axes[a], "seed") == 0) continue;
        int n = distinct(rows, res->axes[a], vals, PIVOT_MAX);
        if (n >= 2 && (!col || n < best) && res->n_axes > 1) {
            col = res->axes[a];
            best = n;
        }
    }
    return col;
}

/* The main metric as a table a person reads without scrolling: rows = the values of every sweep
 * axis but one, columns = the values of that one (the task's pivot key, or the axis with the
 * fewest values), cells = the metric (mean ± std over seeds). With a best axis
 * (docs/results.md "Best over an axis") that is the columns' axis, a last column gives each row
 * its best cell and the value that gave it; `best_only` draws the table of the best rows
 * alone (rows without the best axis, each cell with the value that gave it). */
static void pivot_table(ttt_strbuf *b, const ttt_results *res, const ttt_rows *rows,
                        int best_only) {
    const char *metric = best_only ? ttt_results_best_metric(res) : res->main_metric;
    if (!metric[0] || !rows->n) return;
    if (rows->n > PIVOT_ROWS_MAX) { /* its cells are looked up row by row */
        ttt_strbuf_printf(b, "<p>%d summary rows: too many for a table of the main metric here; "
                             "summary.csv has them all.</p>\n", rows->n);
        return;
    }
    int has = 0;
    for (int i = 0; i < rows->n && !has; i++) has = ttt_record_get(rows->rows[i], metric) != NULL;
    if (!has) return;
    const char *col = pivot_column(res, rows, best_only);
    char cols[PIVOT_MAX][160];
    int ncol = col ? distinct(rows, col, cols, PIVOT_MAX) : 1;
    if (col && ncol >= PIVOT_MAX && !res->pivot_key[0]) col = NULL, ncol = 1;
    if (col && ncol >= PIVOT_MAX) ncol = PIVOT_MAX; /* the task's key: its first values */
    const char *rk[64];
    char rk_head[64][64];
    int nrk = 0;
    for (int a = 0; a < res->n_axes && nrk < 64; a++) {
        if (col && strcmp(res->axes[a], col) == 0) continue;
        if (rows->aggregated && strcmp(res->axes[a], "seed") == 0) continue;
        if (best_only && strcmp(res->axes[a], res->best_axis) == 0) continue;
        ttt_axis_short(res, a, rk_head[nrk], sizeof rk_head[0]);
        rk[nrk++] = res->axes[a];
    }
    if (!nrk) {
        rk[nrk] = "series";
        snprintf(rk_head[nrk++], sizeof rk_head[0], "series");
    }
    if (!col) snprintf(cols[0], sizeof cols[0], "%s", metric);
    /* the best of each row as a last column: when the columns are the best axis */
    const int best_col = !best_only && rows->best && col && !strcmp(col, res->best_axis);
    char bh[64] = "";
    if (rows->best) column_short(res, res->best_axis, bh, sizeof bh);
    char (*rl)[320] = malloc((size_t)rows->n * sizeof *rl);
    if (!rl) return;
    int nrow = 0;
    for (int i = 0; i < rows->n; i++) {
        char l[320];
        row_label(rows->rows[i], rk, nrk, l, sizeof l);
        int seen = 0;
        for (int q = 0; q < nrow && !seen; q++) seen = strcmp(rl[q], l) == 0;
        if (!seen) snprintf(rl[nrow++], sizeof rl[0], "%s", l);
    }
    ttt_strbuf_puts(b, "<h2>");
    ttt_put_xml(b, metric);
    if (best_only) {
        ttt_strbuf_puts(b, " at the best ");
        ttt_put_xml(b, bh);
    }
    ttt_strbuf_puts(b, rows->aggregated ? " (mean ± std over seeds)" : "");
    ttt_strbuf_puts(b, "</h2>\n<table class=\"pivot\">\n<thead><tr><th class=\"t\">");
    for (int k = 0; k < nrk; k++) {
        if (k) ttt_strbuf_puts(b, " / ");
        ttt_put_xml(b, rk_head[k]);
    }
    ttt_strbuf_puts(b, "</th>");
    for (int c = 0; c < ncol; c++) {
        ttt_strbuf_puts(b, "<th>");
        if (col) {
            char h[64];
            column_short(res, col, h, sizeof h);
            ttt_put_xml(b, h);
            ttt_strbuf_puts(b, " = ");
        }
        ttt_put_xml(b, cols[c]);
        if (best_only) {
            ttt_strbuf_puts(b, " (");
            ttt_put_xml(b, bh);
            ttt_strbuf_puts(b, ")");
        }
        ttt_strbuf_puts(b, "</th>");
    }
    if (best_col) {
        ttt_strbuf_puts(b, "<th>best (");
        ttt_put_xml(b, bh);
        ttt_strbuf_puts(b, ")</th>");
    }
    ttt_strbuf_puts(b, "</tr></thead>\n<tbody>\n");
    for (int r = 0; r < nrow; r++) {
        ttt_strbuf_puts(b, "<tr><td class=\"t\">");
        ttt_put_xml(b, rl[r]);
        ttt_strbuf_puts(b, "</td>");
        for (int c = 0; c < ncol; c++) {
            char cell[160] = "";
            for (int i = 0; i < rows->n && !cell[0]; i++) {
                char l[320];
                row_label(rows->rows[i], rk, nrk, l, sizeof l);
                if (strcmp(l, rl[r]) != 0) continue;
                if (col) {
                    const ttt_field *f = ttt_record_get(rows->rows[i], col);
                    char t[160] = "-";
                    if (f) ttt_field_short(f, t, sizeof t);
                    if (strcmp(t, cols[c]) != 0) continue;
                }
                if (best_only) best_cell(res, rows->rows[i], metric, cell, sizeof cell);
                else if (ttt_record_get(rows->rows[i], metric))
                    ttt_row_cell(rows->rows[i], metric, cell, sizeof cell);
            }
            ttt_strbuf_puts(b, "<td>");
            ttt_put_xml(b, cell);
            ttt_strbuf_puts(b, "</td>");
        }
        if (best_col) {
            /* the row's best row; none qualified: "none" (every value diverged on a seed) */
            char cell[200] = "none";
            for (int i = 0; i < rows->n; i++) {
                char l[320];
                row_label(rows->rows[i], rk, nrk, l, sizeof l);
                if (rows->best[i] && strcmp(l, rl[r]) == 0)
                    best_cell(res, rows->rows[i], ttt_results_best_metric(res), cell, sizeof cell);
            }
            ttt_strbuf_puts(b, "<td>");
            ttt_put_xml(b, cell);
            ttt_strbuf_puts(b, "</td>");
        }
        ttt_strbuf_puts(b, "</tr>\n");
    }
    ttt_strbuf_puts(b, "</tbody>\n</table>\n");
    free(rl);
}

ttt_status ttt_page_write(const ttt_results *res, const ttt_keylist *kl, const ttt_rows *rows,
                          char *const *svgs, const char *dir, ttt_error *err) {
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    ttt_strbuf_puts(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                        "<meta charset=\"utf-8\">\n<title>");
    ttt_put_xml(&b, res->title[0] ? res->title : "ttt run");
    ttt_strbuf_printf(&b, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>", html_style);
    ttt_put_xml(&b, res->title[0] ? res->title : "ttt run");
    ttt_strbuf_puts(&b, "</h1>\n<p>Files: <a href=\"metrics.jsonl\">metrics.jsonl</a>, "
                        "<a href=\"summary.csv\">summary.csv</a>");
    if (rows->aggregated)
        ttt_strbuf_puts(&b, ", <a href=\"summary_seeds.csv\">summary_seeds.csv</a> (every seed)");
    ttt_strbuf_puts(&b, "</p>\n");
    for (int i = 0; i < res->nc; i++) {
        char stem[80];
        ttt_chart_stem(res, i, stem, sizeof stem);
        ttt_strbuf_puts(&b, "<figure>\n");
        ttt_strbuf_puts(&b, svgs[i]);
        ttt_strbuf_puts(&b, "\n<figcaption><a href=\"");
        ttt_put_xml(&b, stem);
        ttt_strbuf_puts(&b, ".svg\">");
        ttt_put_xml(&b, stem);
        ttt_strbuf_puts(&b, ".svg</a></figcaption>\n</figure>\n");
    }
    pivot_table(&b, res, rows, 0);
    /* the best rows apart when the pivot's columns are not the best axis */
    const char *pc = rows->best ? pivot_column(res, rows, 0) : NULL;
    if (rows->best && (!pc || strcmp(pc, res->best_axis) != 0)) {
        ttt_rows best = {0};
        best.rows = rows->best_rows;
        best.n = rows->n_best;
        best.aggregated = rows->aggregated;
        pivot_table(&b, res, &best, 1);
    }
    ttt_strbuf_puts(&b, "<h2>Summary</h2>\n");
    if (!kl->n) {
        ttt_strbuf_puts(&b, "<p>No summary records.</p>\n");
    } else {
        ttt_strbuf_puts(&b, "<details><summary>Every column of summary.csv</summary>\n"
                            "<div class=\"scroll\"><table class=\"summary\">\n<thead><tr>");
        for (int q = 0; q < kl->n; q++) {
            ttt_strbuf_puts(&b, "<th>");
            ttt_put_xml(&b, kl->k[q]);
            ttt_strbuf_puts(&b, "</th>");
        }
        ttt_strbuf_puts(&b, "</tr></thead>\n<tbody>\n");
        for (int i = 0; i < rows->n; i++) {
            ttt_strbuf_puts(&b, "<tr>");
            for (int q = 0; q < kl->n; q++) {
                const ttt_field *fl = ttt_record_get(rows->rows[i], kl->k[q]);
                char cell[192] = "";
                if (fl) ttt_field_short(fl, cell, sizeof cell);
                ttt_strbuf_puts(&b, fl && !fl->is_num ? "<td class=\"t\">" : "<td>");
                ttt_put_xml(&b, cell);
                ttt_strbuf_puts(&b, "</td>");
            }
            ttt_strbuf_puts(&b, "</tr>\n");
        }
        ttt_strbuf_puts(&b, "</tbody>\n</table></div></details>\n");
    }
    ttt_strbuf_puts(&b, "</body>\n</html>\n");
    char *text = ttt_strbuf_take(&b);
    if (!text) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing index.html");
    char *path = ttt_results_path(dir, "index.html");
    ttt_status s = path ? ttt_write_file_atomic(path, text, err)
                        : ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing index.html");
    free(path);
    free(text);
    return s;
}
