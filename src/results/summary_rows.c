/* The rows of the summary (summary.csv, the page's table, the printed table): the records,
 * replicates aggregated, the best row of each group marked; and the text of their cells. */
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

ttt_status ttt_results_rows(const ttt_results *res, ttt_rows *out, ttt_error *err) {
    memset(out, 0, sizeof *out);
    int ns = 0;
    for (int i = 0; i < res->n; i++) ns += res->summary[i];
    const size_t cap = (size_t)(ns ? ns : 1);
    out->rows = malloc(cap * sizeof *out->rows);
    ttt_results_slot *sl = malloc(cap * sizeof *sl);
    ttt_results_cell_span *cs = malloc(cap * sizeof *cs);
    char(*vary)[48] = malloc(TTT_RECORD_MAX_FIELDS * sizeof *vary);
    if (!out->rows || !sl || !cs || !vary) {
        free(sl), free(cs), free(vary);
        ttt_rows_free(out);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing summary");
    }
    int nr = 0;
    for (int i = 0; i < res->n; i++)
        if (res->summary[i]) sl[nr++] = (ttt_results_slot){res->group[i], res->member[i], 0, i};
    /* ordinals within each replicate, and whether some configuration has two replicates */
    qsort(sl, (size_t)nr, sizeof *sl, ttt_results_by_replicate);
    int replicated = 0;
    for (int a = 0; a < nr; a++) {
        const int same = a > 0 && sl[a - 1].group == sl[a].group;
        sl[a].k = same && sl[a - 1].member == sl[a].member ? sl[a - 1].k + 1 : 0;
        replicated |= same && sl[a].group >= 0 && sl[a - 1].member != sl[a].member;
    }
    if (!replicated) {
        for (int i = 0; i < res->n; i++)
            if (res->summary[i]) out->rows[out->n++] = &res->recs[i];
        free(sl), free(cs), free(vary);
        ttt_status s = ttt_results_rows_best(res, out, NULL, NULL, err);
        if (s != TTT_OK) ttt_rows_free(out);
        return s;
    }
    qsort(sl, (size_t)nr, sizeof *sl, ttt_results_by_cell);
    int ncell = 0;
    for (int a = 0; a < nr;) {
        int b = a + 1;
        while (b < nr && ttt_results_same_cell(&sl[a], &sl[b])) b++;
        cs[ncell++] = (ttt_results_cell_span){a, b, sl[a].i};
        a = b;
    }
    qsort(cs, (size_t)ncell, sizeof *cs,
          ttt_results_by_first); /* rows in the order the runs made them */
    /* the numbers that differ between the replicates of some cell */
    int nvary = 0;
    for (int c = 0; c < ncell; c++) {
        const ttt_record *r0 = &res->recs[sl[cs[c].from].i];
        for (int a = cs[c].from + 1; a < cs[c].to; a++) {
            const ttt_record *ra = &res->recs[sl[a].i];
            for (int f = 0; f < ra->n; f++) {
                const ttt_field *fa = &ra->f[f], *f0 = ttt_record_get(r0, fa->key);
                if (!fa->is_num || !strcmp(fa->key, "seed") || !strcmp(fa->key, "point")) continue;
                const int same = f0 && f0->is_num &&
                                 (f0->num == fa->num || (isnan(f0->num) && isnan(fa->num)));
                if (!same && nvary < TTT_RECORD_MAX_FIELDS &&
                    !ttt_results_key_in(vary, nvary, fa->key))
                    snprintf(vary[nvary++], 48, "%s", fa->key);
            }
        }
    }
    out->agg = calloc((size_t)(ncell ? ncell : 1), sizeof *out->agg);
    if (!out->agg) {
        free(sl), free(cs), free(vary);
        ttt_rows_free(out);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing summary");
    }
    out->aggregated = 1;
    for (int c = 0; c < ncell; c++) {
        ttt_results_aggregate(res, sl, cs[c].from, cs[c].to, vary, nvary, &out->agg[c]);
        out->rows[out->n++] = &out->agg[c];
    }
    ttt_status s = ttt_results_rows_best(res, out, sl, cs, err); /* row c is cell c */
    free(sl), free(cs), free(vary);
    if (s != TTT_OK) ttt_rows_free(out);
    return s;
}

void ttt_axis_short(const ttt_results *res, int i, char *out, size_t len) {
    ttt_key_short((const char *const *)res->axes, res->n_axes, i, out, len);
}

void ttt_key_short(const char *const *keys, int nkeys, int i, char *out, size_t len) {
    const char *key = keys[i];
    /* at least two parts ("train.lr", "optimizer.name"): a bare "lr" or "name" does not say
     * whose it is */
    int parts = 1;
    for (const char *p = key; *p; p++) parts += *p == '.';
    const int min_parts = parts >= 2 ? 2 : 1;
    /* candidate suffixes from the last part outwards */
    int taken = 0;
    for (const char *p = key + strlen(key); p > key;) {
        do p--; while (p > key && p[-1] != '.');
        if (++taken < min_parts) continue;
        int unique = 1;
        size_t sl = strlen(p);
        for (int j = 0; j < nkeys && unique; j++) {
            if (j == i) continue;
            const char *o = keys[j];
            size_t ol = strlen(o);
            if (ol >= sl && strcmp(o + ol - sl, p) == 0 && (ol == sl || o[ol - sl - 1] == '.'))
                unique = 0;
        }
        if (unique) {
            snprintf(out, len, "%s", p);
            return;
        }
    }
    snprintf(out, len, "%s", key);
}

void ttt_row_cell(const ttt_record *row, const char *key, char *out, size_t len) {
    const ttt_field *fl = ttt_record_get(row, key);
    if (!fl) {
        snprintf(out, len, "-");
        return;
    }
    if (!fl->is_num) {
        snprintf(out, len, "%s", fl->str);
        return;
    }
    char k[64];
    snprintf(k, sizeof k, "%s_std", key);
    const ttt_field *sd = ttt_record_get(row, k);
    if (sd && sd->is_num && isfinite(sd->num) && isfinite(fl->num))
        snprintf(out, len, "%.4g ± %.2g", fl->num, sd->num);
    else
        ttt_fmt_num_short(out, len, fl->num);
}
