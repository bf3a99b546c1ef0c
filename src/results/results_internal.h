/* What the files of results.h share: the layout of the collection and the text forms.
 *
 *   record.c        records, their number formats and text forms
 *   atomic_file.c   atomic files
 *   collection.c    the collection: records, points, axes, charts
 *   replicates.c    one row per configuration over its seeds
 *   best_rows.c     the best row of each group
 *   summary_rows.c  the rows of the summary and the text of their cells
 *   run_folder.c    metrics.jsonl, summary.csv, and ttt_results_write (which calls the others)
 *   table.c         the text table
 *   charts.c        the SVG charts
 *   page.c          index.html
 *
 * Private to src/results; white-box tests reach it through tests/internal.h. */
#ifndef TTT_RESULTS_INTERNAL_H
#define TTT_RESULTS_INTERNAL_H

#include <stddef.h>

#include "results.h"
#include "strbuf.h"

typedef struct ttt_chart_entry {
    ttt_chart c;
    char filter_key[48];
    char filter_value[160];
} ttt_chart_entry;

struct ttt_results {
    char *title;
    ttt_record *recs;
    unsigned char *summary;
    int n, cap;
    ttt_chart_entry *charts;
    int nc, capc;
    int oom; /* an add failed for lack of memory; reported by ttt_results_write */
    /* Streaming (ttt_results_stream): every record is a line of this atomic metrics.jsonl as
     * it is added, and only the summary records stay in recs (n of them). */
    ttt_afile stream;
    int stream_errno; /* the first failed write to the stream */
    long n_all;       /* every record added, also those only in the stream */
    int stream_no_summary; /* ttt_results_stream_measurements_only */
    /* Per record in recs: the configuration (group) and replicate (member) it belongs to
     * (ttt_results_set_point; -1 without a seed axis). */
    int *group, *member;
    ttt_record *stamp; /* the fields every added record starts with, or NULL */
    int cur_group, cur_member;
    char **axes;      /* the sweep's key paths (ttt_results_set_axes) */
    int n_axes;
    char main_metric[48], pivot_key[48];
    int log_y;         /* TTT_LOG_Y_*: the run's choice */
    char log_y_only[256]; /* ",a,b," chart names it applies to, "" = all */
    /* ttt_results_set_best: the axis ("" = off), the metric ("" = main_metric), whether the
     * largest wins, and whether the rows carry their own `best` column (ttt compare) */
    char best_axis[48], best_metric[48];
    int best_max, best_given;
};

/* ---- summary rows (summary_rows.c, replicates.c, best_rows.c) ---- */

/* The rows of summary.csv, the page's table and the printed table: the summary records, or,
 * when some configuration has more than one replicate, one aggregated record per configuration
 * and ordinal (mean as the field itself, then <field>_std (sample, n − 1), _min, _max for every
 * number that differs between replicates; `seeds` = how many; `seed` and `point` dropped).
 * rows[i] points into res or into *agg (malloc'd, freed by the caller with `rows`). */
typedef struct ttt_rows {
    const ttt_record **rows;
    int n;
    ttt_record *agg;
    int aggregated;
    /* With ttt_results_set_best (docs/results.md "Best over an axis"): best[i] = 1 when rows[i]
     * is its group's best row; best_rows = one row per group in the order of their first rows,
     * the chosen row or, when no row of the group qualifies, a row of its own (in none[]) with
     * the group's columns, the axis "none" and the metric NaN. NULL / 0 without. */
    unsigned char *best;
    const ttt_record **best_rows;
    int n_best;
    ttt_record *none;
} ttt_rows;
ttt_status ttt_results_rows(const ttt_results *res, ttt_rows *out, ttt_error *err);
void ttt_rows_free(ttt_rows *r);
/* The metric the best rows are chosen by: best_metric, else the main metric. */
const char *ttt_results_best_metric(const ttt_results *res);
/* The column name for sweep axis i in tables (ttt_key_short). */
void ttt_axis_short(const ttt_results *res, int i, char *out, size_t len);
/* A number of an aggregated row as "mean ± std" when the row has `<key>_std`, else its short
 * form; strings as they are. */
void ttt_row_cell(const ttt_record *row, const char *key, char *out, size_t len);

/* Call fn on every record in the order added; stops at fn's first nonzero return and returns
 * it. Streamed records are read back from the stream one at a time; -1 when they cannot be. */
int ttt_results_foreach(const ttt_results *res, int (*fn)(void *user, const ttt_record *r),
                        void *user);

/* ---- text forms (record.c; the number formats are described at its top) ---- */

/* The text form of a number, used for grouping and filtering: the JSON spelling, or nan / inf
 * / -inf. */
void ttt_fmt_num_text(char *out, size_t len, double v);
/* The readable form for summary.csv, the HTML table and chart hover text. */
void ttt_fmt_num_short(char *out, size_t len, double v);
/* A field's text form (the string, or ttt_fmt_num_text of the number). */
void ttt_field_text(const ttt_field *f, char *out, size_t len);
/* A field's readable form (the string, or ttt_fmt_num_short of the number). */
void ttt_field_short(const ttt_field *f, char *out, size_t len);

/* ---- the run folder (run_folder.c) ---- */

/* Union of the keys of the summary records, in first-seen order (the columns of summary.csv
 * and of the page's table). The strings belong to the records; free `k` only. */
typedef struct ttt_keylist {
    const char **k;
    int n;
} ttt_keylist;

/* "dir/name" (malloc'd; NULL when out of memory). */
char *ttt_results_path(const char *dir, const char *name);
/* Open `dir/name` as an atomic file. */
ttt_status ttt_results_open_in(ttt_afile *af, const char *dir, const char *name, ttt_error *err);

/* ---- charts (charts.c) ---- */

/* `s` as XML / HTML text: the five markup characters escaped, control characters other than
 * tab and newline (not allowed in XML 1.0) as spaces. */
void ttt_put_xml(ttt_strbuf *b, const char *s);
/* The file stem of chart i (a safe file name, "chart<i>" when unnamed). */
void ttt_chart_stem(const ttt_results *res, int i, char *out, size_t len);
/* Draw every chart into svgs[i] (res->nc entries, zeroed by the caller, malloc'd strings the
 * caller frees) and write each to dir/<stem>.svg. */
ttt_status ttt_charts_write(const ttt_results *res, char **svgs, const char *dir, ttt_error *err);

/* ---- the page (page.c) ---- */

/* index.html: the title, every chart (svgs from ttt_charts_write), the main metric as a pivot
 * table and the summary table (rows). */
ttt_status ttt_page_write(const ttt_results *res, const ttt_keylist *kl, const ttt_rows *rows,
                          char *const *svgs, const char *dir, ttt_error *err);

/* ---- shared among the files of the collection and its rows ---- */

char *ttt_results_dup_str(const char *s);

/* Copy at most cap-1 bytes without cutting a UTF-8 sequence in half. */
void ttt_results_copy_utf8(char *dst, size_t cap, const char *src);

/* A summary record's place: its configuration (group), replicate (member), ordinal among that
 * replicate's summary records (k) and index in res. Sorted, not searched: a run may have tens
 * of thousands of summary records. */
typedef struct ttt_results_slot {
    int group, member, k, i;
} ttt_results_slot;

int ttt_results_by_replicate(const void *a, const void *b);

/* cells: (group, k), records outside every group alone; members in record order */
int ttt_results_by_cell(const void *a, const void *b);

int ttt_results_same_cell(const ttt_results_slot *p, const ttt_results_slot *q);

/* The key list `keys` (n of them) holds key? */
int ttt_results_key_in(char (*keys)[48], int n, const char *key);

typedef struct ttt_results_cell_span {
    int from, to, first; /* slots [from, to) after the sort by cell; first: its earliest record */
} ttt_results_cell_span;

int ttt_results_by_first(const void *a, const void *b);

/* One aggregated record from the records of slots [from, to). */
void ttt_results_aggregate(const ttt_results *res, const ttt_results_slot *sl, int from, int to,
                           char (*vary)[48], int nvary, ttt_record *o);

ttt_status ttt_results_rows_best(const ttt_results *res, ttt_rows *out,
                                 const ttt_results_slot *sl, const ttt_results_cell_span *cs,
                                 ttt_error *err);

#endif
