/* Results of a run: the run folder, its files, and charts a person would rather read than a table.
 *
 * Every file is written under a temporary name in the same folder and renamed into place only
 * when complete (ttt_afile), so a crash or a full disk never leaves a half-written result.
 *
 * A run folder holds:
 *   config.resolved.yaml   every option with its value (written by the caller through ttt_afile)
 *   metrics.jsonl          one JSON object per measurement
 *   summary.csv            the summary records, one row each, columns in first-seen order;
 *                          with replicates (seeds) one row per configuration: mean, _std,
 *                          _min and _max of each number that varies between seeds
 *   summary_seeds.csv      with replicates only: the summary record of every seed
 *   <chart>.svg            self-contained SVG line charts
 *   index.html             the charts and the summary table on one page
 *
 * Implemented one concern per file in src/results: record.c (records and their number formats),
 * atomic_file.c, collection.c, replicates.c, best_rows.c, summary_rows.c, run_folder.c
 * (metrics.jsonl, summary.csv, ttt_results_write), table.c (the text table), charts.c (the SVG
 * charts) and page.c (index.html); results_internal.h is what they share. */
#ifndef TTT_RESULTS_H
#define TTT_RESULTS_H

#include <stdio.h>

#include "status.h"

/* ---- atomic files ---- */

typedef struct ttt_afile {
    FILE *f;    /* write here */
    char *path; /* final name */
    char *tmp;  /* temporary name in the same folder: ".<name>" TTT_AFILE_TMP_MARK "<pid>" */
    void *io;   /* the stream's descriptor and first write error (atomic_file.c) */
} ttt_afile;

/* What marks a temporary file: a run removes those a killed process left (ttt_remove_stale_tmp). */
#define TTT_AFILE_TMP_MARK ".tmp."

ttt_status ttt_afile_open(ttt_afile *af, const char *path, ttt_error *err);
/* Flush, fsync, close and rename into place. Any write error seen on the stream (e.g. ENOSPC)
 * makes this fail, removes the temporary file and leaves an earlier file at `path` intact. */
ttt_status ttt_afile_commit(ttt_afile *af, ttt_error *err);
/* The descriptor the afile writes to (for tests that swap it for a failing one). */
int ttt_afile_fd(const ttt_afile *af);
/* fsync the folder holding `path`, so a rename in it is durable; errno tells why on failure. */
ttt_status ttt_fsync_dir_of(const char *path);
/* Remove the temporary files ".<name>.tmp.<pid>" that killed runs left in `dir` (not in its
 * subfolders); the caller holds the folder's lock, so no live writer owns them. Returns how
 * many were removed. */
int ttt_remove_stale_tmp(const char *dir);
/* Close and remove the temporary file (after an error elsewhere). Safe on a committed file. */
void ttt_afile_abort(ttt_afile *af);
/* Write a whole string to `path` atomically. */
ttt_status ttt_write_file_atomic(const char *path, const char *text, ttt_error *err);

/* mkdir -p; an existing folder is fine, an existing non-folder or an unwritable parent is an
 * error naming the path and the reason. */
ttt_status ttt_mkdirs(const char *path, ttt_error *err);

/* ---- records ---- */

#define TTT_RECORD_MAX_FIELDS 48

typedef struct ttt_field {
    char key[48];
    int is_num;
    double num;    /* written with enough digits to read back the same double; NaN/Inf as null */
    char str[160];
} ttt_field;

/* One measurement: an ordered list of key → number-or-string. */
typedef struct ttt_record {
    int n;
    ttt_field f[TTT_RECORD_MAX_FIELDS];
} ttt_record;

void ttt_record_clear(ttt_record *r);
/* Set (or replace) a field. Silently ignores fields beyond TTT_RECORD_MAX_FIELDS (asserts in
 * debug). */
void ttt_record_num(ttt_record *r, const char *key, double v);
void ttt_record_str(ttt_record *r, const char *key, const char *s);
const ttt_field *ttt_record_get(const ttt_record *r, const char *key);
/* One JSON object, no trailing newline. Strings escaped per RFC 8259. */
void ttt_record_write_json(const ttt_record *r, FILE *f);
/* Read back one line that ttt_record_write_json wrote (a trailing newline is fine): every
 * number is the same double, null becomes NaN. TTT_ERR_FORMAT on anything else. */
ttt_status ttt_record_parse_json(ttt_record *r, const char *line);

/* ---- the collection of a run ---- */

typedef struct ttt_chart {
    char name[64];     /* file stem: "<name>.svg" */
    char title[160];
    char x_key[48];    /* record field for x */
    char y_key[48];    /* record field for y */
    char series_key[48]; /* records with equal values of this field form one line ("" = one) */
    char x_label[96], y_label[96];
    int log_x;         /* log2 axis for x (e.g. N = 16 … 256) */
    int y_from_zero;   /* include 0 in the y range (ignored on a log y axis) */
    /* y axis: TTT_LOG_Y_AUTO (log10 when every y is positive and they span more than two
     * decades), _ON or _OFF; ttt_results_set_log_y overrides it for the whole run */
    int log_y;
    /* optional reference curve y = ref_scale * sqrt((x - ref_shift) / ref_div), drawn dashed,
     * labelled as the docs write it */
    int has_ref;
    double ref_scale, ref_div, ref_shift;
    char ref_label[64];
} ttt_chart;

enum { TTT_LOG_Y_AUTO = 0, TTT_LOG_Y_ON = 1, TTT_LOG_Y_OFF = 2 };

/* A chart with its keys and labels filled in (the other fields zero): the set-up every task
 * shares. series_key "" = one line. */
ttt_chart ttt_chart_make(const char *name, const char *title, const char *x_key,
                         const char *y_key, const char *series_key, const char *x_label,
                         const char *y_label);

/* ---- charts: colours and markers ---- */

/* Series s is drawn in colour ttt_chart_colour(s) with marker shape ttt_chart_marker(s): ten
 * colours and six shapes, so the first 30 series differ in the pair and neighbours in both. */
#define TTT_CHART_COLOURS 10
#define TTT_CHART_MARKERS 6
const char *ttt_chart_colour(int s);
int ttt_chart_marker(int s);

typedef struct ttt_results ttt_results;

ttt_results *ttt_results_new(const char *title);
void ttt_results_free(ttt_results *res);
/* From now on (before the first add) stream every record as a line of dir/metrics.jsonl (an
 * atomic file, committed by ttt_results_write, removed by ttt_results_free when never
 * committed) and keep only the summary records in memory: memory stays flat however many
 * records a run adds; charts read the records back from the file. ttt_results_count and
 * ttt_results_get then see the summary records only. */
ttt_status ttt_results_stream(ttt_results *res, const char *dir, ttt_error *err);
/* The stream (ttt_results_stream) then takes the measurements only, not the summary records
 * (a merge of finished runs whose summaries are not measurements of its own). */
void ttt_results_stream_measurements_only(ttt_results *res);
/* Keep a copy. summary != 0: the record also becomes a row of summary.csv and index.html. */
void ttt_results_add(ttt_results *res, const ttt_record *rec, int summary);
void ttt_results_add_chart(ttt_results *res, const ttt_chart *chart);
/* Only the records where `filter_key` equals `filter_value` (string compare of its text form)
 * go into the chart (e.g. task.overwrite = false); filter_key "" = all records. */
void ttt_results_add_chart_filtered(ttt_results *res, const ttt_chart *chart,
                                    const char *filter_key, const char *filter_value);
/* The sweep of the run, for the tables: the swept key paths as records carry them (the
 * plan adds them to every record of a point through ttt_results_set_point). Copied. */
void ttt_results_set_axes(ttt_results *res, const char *const *keys, int n);
/* The shortest suffix of keys[i] of at least two whole dot-separated parts that no other key
 * ends with: "layer.optimizer.lr" → "optimizer.lr", "train.lr" stays. */
void ttt_key_short(const char *const *keys, int n, int i, char *out, size_t len);
/* Every record added from now on starts with `fields` (the point's swept values and seed; a
 * field of the record itself with the same key wins), and its summary records belong to
 * replicate `member` of configuration `group` (the same point but for the seed). Records of
 * one group and ordinal (the k-th summary record of each member) are aggregated over the
 * members in summary.csv, the tables and the charts (docs/results.md "Seeds"). fields NULL:
 * none; group < 0: no seed axis. */
void ttt_results_set_point(ttt_results *res, const ttt_record *fields, int group, int member);
/* The run's main metric (a field of the summary records) and the key the page's pivot table
 * spreads over its columns ("" = the sweep axis with the fewest values). Set by the task's
 * chart set-up. */
void ttt_results_set_main(ttt_results *res, const char *metric, const char *pivot_key);
/* Report each configuration at its best value of one swept axis (docs/results.md "Best over an
 * axis"), e.g. each mixer at its best learning rate: the rows that agree on every other swept
 * column (and on the task's pivot column, e.g. N) form a group; its best row is the one whose
 * `metric` ("" = the main metric) is largest (maximize) or smallest, as the mean over seeds,
 * among the rows where every seed gave a finite value; ties go to the first row in sweep
 * order. summary.csv gets a column `best` (1 on those rows), summary_best.csv holds them, and
 * the printed table and the page show them. axis NULL or "" turns it off. */
void ttt_results_set_best(ttt_results *res, const char *axis, const char *metric, int maximize);
/* The rows carry the `best` column a run wrote (ttt compare reads summary.csv files): each
 * group's best row is then its row with best = 1, not chosen again from means alone (which
 * no longer say whether a seed diverged). */
void ttt_results_set_best_given(ttt_results *res, int given);
/* The y axis of every chart (TTT_LOG_Y_*; from the experiment's `charts: {log_y: …}`),
 * overriding each chart's own choice unless AUTO; `only` (comma-separated chart names, or NULL
 * = all) limits it to those charts. */
void ttt_results_set_log_y(ttt_results *res, int mode, const char *only);
int ttt_results_count(const ttt_results *res);
const ttt_record *ttt_results_get(const ttt_results *res, int i);

/* Write metrics.jsonl, summary.csv, every chart's SVG and index.html into `dir` (which must
 * exist), each atomically. */
ttt_status ttt_results_write(ttt_results *res, const char *dir, ttt_error *err);

/* Print the summary records as an aligned text table: the sweep axes first (headed by the
 * shortest unique suffix of their key path), then the given columns (NULL-terminated; "series"
 * is left out when there are sweep axes, which say the same); numbers as in summary.csv,
 * absent fields as "-". With replicates (seeds), one row per configuration, each aggregated
 * number as "mean ± std" and a column `seeds`. */
void ttt_results_print_table(const ttt_results *res, FILE *f, const char *const *cols);

/* The SVG of one chart over the records (exposed for tests). Returns a malloc'd string. */
char *ttt_chart_svg(const ttt_results *res, int chart_index);

#endif
