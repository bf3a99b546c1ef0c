/* The plain-text table of the summary records (printed by `ttt run`). */
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
/* plain-text table of the summary records (printed by `ttt run`)                             */

/* The column `col` says what the swept `axis` says: the one names the other (`layer` and
 * `layer.preset`: its first part; `overwrite` and `task.overwrite`: its last) and every row
 * holds the same text in both. */
static int same_column(const char *axis, const char *col, const ttt_record *const *rows, int n) {
    const size_t cl = strlen(col), al = strlen(axis);
    const int named = (al > cl && strncmp(axis, col, cl) == 0 && axis[cl] == '.') ||
                      (al > cl && strcmp(axis + al - cl, col) == 0 && axis[al - cl - 1] == '.');
    if (!named || n < 1) return 0;
    char a[256], b[256];
    for (int i = 0; i < n; i++) {
        ttt_row_cell(rows[i], axis, a, sizeof a);
        ttt_row_cell(rows[i], col, b, sizeof b);
        if (strcmp(a, b) != 0) return 0;
    }
    return 1;
}

/* The table of some rows: the axes (but `skip`), `seeds` when aggregated, then cols. */
static void print_rows(const ttt_results *res, FILE *f, const char *const *cols,
                       const ttt_record *const *rows, int n, int aggregated) {
    enum { MAXC = 40, W = 200 };
    const char *key[MAXC];
    char head[MAXC][64];
    int nc = 0;
    for (int a = 0; a < res->n_axes && nc < MAXC; a++) {
        if (aggregated && strcmp(res->axes[a], "seed") == 0) continue; /* averaged over */
        key[nc] = res->axes[a];
        ttt_axis_short(res, a, head[nc], sizeof head[nc]);
        nc++;
    }
    if (aggregated && nc < MAXC) {
        key[nc] = "seeds";
        snprintf(head[nc++], sizeof head[0], "seeds");
    }
    const int n_axis_cols = nc;
    for (int c = 0; cols[c] && nc < MAXC; c++) {
        if (res->n_axes && strcmp(cols[c], "series") == 0) continue;
        int dup = 0;
        for (int q = 0; q < nc; q++) dup |= strcmp(key[q], cols[c]) == 0;
        /* a task's column that repeats a swept key under another name (`layer` beside
         * `layer.preset`, `overwrite` beside `task.overwrite`) is shown once */
        for (int q = 0; q < n_axis_cols && !dup; q++)
            dup = same_column(key[q], cols[c], rows, n);
        if (dup) continue;
        key[nc] = cols[c];
        snprintf(head[nc++], sizeof head[0], "%s", cols[c]);
    }
    int width[MAXC];
    for (int c = 0; c < nc; c++) width[c] = (int)strlen(head[c]);
    char cell[W + 1];
    /* two passes: measure, then print; widths count characters, not bytes ("±") */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            for (int c = 0; c < nc; c++) fprintf(f, "%s%-*s", c ? "  " : "", width[c], head[c]);
            fputc('\n', f);
        }
        for (int i = 0; i < n; i++) {
            for (int c = 0; c < nc; c++) {
                ttt_row_cell(rows[i], key[c], cell, sizeof cell);
                int len = 0;
                for (const char *p = cell; *p; p++) len += ((unsigned char)*p & 0xC0) != 0x80;
                if (pass == 0 && len > width[c]) width[c] = len;
                if (pass == 1)
                    fprintf(f, "%s%s%*s", c ? "  " : "", cell, width[c] - len, "");
            }
            if (pass == 1) fputc('\n', f);
        }
    }
}

void ttt_results_print_table(const ttt_results *res, FILE *f, const char *const *cols) {
    ttt_rows rows;
    ttt_error e;
    if (ttt_results_rows(res, &rows, &e) != TTT_OK) return;
    print_rows(res, f, cols, rows.rows, rows.n, rows.aggregated);
    if (rows.best) {
        char h[64] = "";
        for (int a = 0; a < res->n_axes; a++)
            if (strcmp(res->axes[a], res->best_axis) == 0) ttt_axis_short(res, a, h, sizeof h);
        fprintf(f, "\nbest %s: the %s %s%s (docs/results.md \"Best over an axis\")\n",
                h[0] ? h : res->best_axis, res->best_max ? "largest" : "smallest",
                ttt_results_best_metric(res), rows.aggregated ? ", mean over seeds" : "");
        print_rows(res, f, cols, rows.best_rows, rows.n_best, rows.aggregated);
    }
    ttt_rows_free(&rows);
}
