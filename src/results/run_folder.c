/* Writing the run folder (results.h): metrics.jsonl, summary.csv, and ttt_results_write, which
 * writes the whole folder (charts: charts.c, index.html: page.c). */
#define _GNU_SOURCE /* fopencookie */
#include "results.h"
#include "fault.h"

#include <assert.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "results_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* writing the run folder                                                                     */

char *ttt_results_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = ttt_fault_malloc(n);
    if (!p) return NULL;
    size_t dl = strlen(dir);
    snprintf(p, n, "%s%s%s", dir, (dl && dir[dl - 1] == '/') ? "" : "/", name);
    return p;
}

/* The path is freed here; the afile keeps its own copy. */
ttt_status ttt_results_open_in(ttt_afile *af, const char *dir, const char *name, ttt_error *err) {
    char *path = ttt_results_path(dir, name);
    if (!path) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing results");
    ttt_status s = ttt_afile_open(af, path, err);
    free(path);
    return s;
}

static ttt_status write_metrics(ttt_results *res, const char *dir, ttt_error *err) {
    if (res->stream.f) return ttt_afile_commit(&res->stream, err);
    ttt_afile af;
    TTT_TRY(ttt_results_open_in(&af, dir, "metrics.jsonl", err));
    for (int i = 0; i < res->n; i++) {
        ttt_record_write_json(&res->recs[i], af.f);
        fputc('\n', af.f);
    }
    return ttt_afile_commit(&af, err);
}

/* The sweep's columns first, in the sweep's order (a leaf of a mapping axis that the first
 * point lacks is still a swept column), then every other key in first-seen order. */
static ttt_status summary_keys(const ttt_results *res, const ttt_rows *rows, ttt_keylist *kl,
                               ttt_error *err) {
    int cap = 0;
    kl->k = NULL;
    kl->n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int a = 0; a < (pass == 0 ? res->n_axes : 1); a++) {
            for (int i = 0; i < rows->n; i++) {
                const ttt_record *r = rows->rows[i];
                for (int j = 0; j < r->n; j++) {
                    const char *key = r->f[j].key;
                    if (pass == 0 && strcmp(key, res->axes[a]) != 0) continue;
                    int found = 0;
                    for (int q = 0; q < kl->n && !found; q++) found = strcmp(kl->k[q], key) == 0;
                    if (found) continue;
                    if (kl->n == cap) {
                        cap = cap ? cap * 2 : 32;
                        const char **p = ttt_fault_realloc(kl->k, (size_t)cap * sizeof *p);
                        if (!p) {
                            free(kl->k);
                            kl->k = NULL;
                            return ttt_error_set(err, TTT_ERR_NOMEM,
                                                 "out of memory writing summary");
                        }
                        kl->k = p;
                    }
                    kl->k[kl->n++] = key;
                }
            }
        }
    }
    return TTT_OK;
}

/* RFC 4180: quote when the text holds a separator, a quote or a line break; double quotes. */
static void csv_cell(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* A CSV file of the given rows under the columns of kl; with `best` (per row) the column
 * `best` holds it (after the others, or in place of a `best` the rows carry). */
static ttt_status write_csv(const ttt_record *const *rows, int n, const ttt_keylist *kl,
                            const unsigned char *best, const char *dir, const char *name,
                            ttt_error *err) {
    ttt_afile af;
    TTT_TRY(ttt_results_open_in(&af, dir, name, err));
    int has_best = 0;
    for (int q = 0; q < kl->n; q++) has_best |= strcmp(kl->k[q], "best") == 0;
    const int extra = best && !has_best;
    if (kl->n || extra) {
        for (int q = 0; q < kl->n; q++) {
            if (q) fputc(',', af.f);
            csv_cell(af.f, kl->k[q]);
        }
        if (extra) fputs(kl->n ? ",best" : "best", af.f);
        fputc('\n', af.f); /* plain LF, not RFC 4180's CRLF: friendlier to diff and grep */
    }
    for (int i = 0; i < n; i++) {
        for (int q = 0; q < kl->n; q++) {
            if (q) fputc(',', af.f);
            if (best && strcmp(kl->k[q], "best") == 0) {
                fputc(best[i] ? '1' : '0', af.f);
                continue;
            }
            const ttt_field *fl = ttt_record_get(rows[i], kl->k[q]);
            if (!fl) continue;
            char cell[192];
            ttt_field_short(fl, cell, sizeof cell);
            csv_cell(af.f, cell);
        }
        if (extra) fputs(kl->n ? (best[i] ? ",1" : ",0") : (best[i] ? "1" : "0"), af.f);
        fputc('\n', af.f);
    }
    return ttt_afile_commit(&af, err);
}

/* A CSV file of some rows under their own columns. */
static ttt_status write_rows_csv(const ttt_results *res, const ttt_record *const *r, int n,
                                 const char *dir, const char *name, ttt_error *err) {
    ttt_rows some = {0};
    some.rows = (const ttt_record **)r;
    some.n = n;
    ttt_keylist k;
    TTT_TRY(summary_keys(res, &some, &k, err));
    /* the `best` column that compared runs carry says nothing more here: every row has 1 */
    int w = 0;
    for (int q = 0; q < k.n; q++)
        if (strcmp(k.k[q], "best") != 0) k.k[w++] = k.k[q];
    k.n = w;
    ttt_status s = write_csv(r, n, &k, NULL, dir, name, err);
    free(k.k);
    return s;
}

/* summary.csv; with replicates also summary_seeds.csv, the record of every seed; with a best
 * axis also summary_best.csv, the best row of each group. */
static ttt_status write_summary(const ttt_results *res, const ttt_rows *rows,
                                const ttt_keylist *kl, const char *dir, ttt_error *err) {
    TTT_TRY(write_csv(rows->rows, rows->n, kl, rows->best, dir, "summary.csv", err));
    if (rows->best)
        TTT_TRY(write_rows_csv(res, rows->best_rows, rows->n_best, dir, "summary_best.csv", err));
    if (!rows->aggregated) return TTT_OK;
    ttt_rows all = {0};
    all.rows = malloc((size_t)(res->n ? res->n : 1) * sizeof *all.rows);
    if (!all.rows) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing summary");
    for (int i = 0; i < res->n; i++)
        if (res->summary[i]) all.rows[all.n++] = &res->recs[i];
    ttt_keylist kall;
    ttt_status s = summary_keys(res, &all, &kall, err);
    if (s == TTT_OK) s = write_csv(all.rows, all.n, &kall, NULL, dir, "summary_seeds.csv", err);
    free(kall.k);
    ttt_rows_free(&all);
    return s;
}

ttt_status ttt_results_write(ttt_results *res, const char *dir, ttt_error *err) {
    if (res->oom)
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "out of memory while collecting results; nothing written to '%s'",
                             dir);
    /* a streamed metrics.jsonl that could not be written fails first, with its real cause (the
     * charts read it back) */
    if (res->stream.f && (fflush(res->stream.f) != 0 || ferror(res->stream.f)))
        return ttt_afile_commit(&res->stream, err);
    ttt_rows rows;
    TTT_TRY(ttt_results_rows(res, &rows, err));
    ttt_keylist kl;
    ttt_status s = summary_keys(res, &rows, &kl, err);
    if (s != TTT_OK) {
        ttt_rows_free(&rows);
        return s;
    }
    s = write_summary(res, &rows, &kl, dir, err);
    char **svgs = NULL;
    if (s == TTT_OK && res->nc) {
        svgs = ttt_fault_calloc((size_t)res->nc, sizeof *svgs);
        if (!svgs) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing charts");
    }
    /* the page embeds the charts' SVG text, so it is drawn once and kept for both */
    if (s == TTT_OK) s = ttt_charts_write(res, svgs, dir, err);
    if (s == TTT_OK) s = ttt_page_write(res, &kl, &rows, svgs, dir, err);
    /* last: a streamed metrics.jsonl is read back by the charts until it is committed */
    if (s == TTT_OK) s = write_metrics(res, dir, err);
    for (int i = 0; svgs && i < res->nc; i++) free(svgs[i]);
    free(svgs);
    free(kl.k);
    ttt_rows_free(&rows);
    return s;
}
