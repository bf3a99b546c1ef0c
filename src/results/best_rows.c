/* The best row of each group (docs/results.md "Best over an axis"). */
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
/* the best row of each group (docs/results.md "Best over an axis")                           */

/* A number of `key` that is finite, or NULL. */
static const ttt_field *finite_num(const ttt_record *r, const char *key) {
    const ttt_field *f = ttt_record_get(r, key);
    return f && f->is_num && isfinite(f->num) ? f : NULL;
}

/* Whether the group key of a row includes `key`: every swept column but the best axis and the
 * seed (averaged over), and the task's pivot column (e.g. the memory task's N: one row per N). */
static int group_column(const ttt_results *res, const char *key) {
    return strcmp(key, res->best_axis) != 0 && strcmp(key, "seed") != 0;
}

static void group_key(const ttt_results *res, const ttt_record *r, ttt_strbuf *b) {
    ttt_strbuf_reset(b);
    char t[192];
    for (int a = 0; a <= res->n_axes; a++) {
        const char *key = a < res->n_axes ? res->axes[a] : res->pivot_key;
        if (!key[0] || !group_column(res, key)) continue;
        if (a == res->n_axes) { /* the pivot column, unless it is an axis already */
            int axis = 0;
            for (int q = 0; q < res->n_axes && !axis; q++) axis = !strcmp(res->axes[q], key);
            if (axis) continue;
        }
        const ttt_field *f = ttt_record_get(r, key);
        if (f) ttt_field_text(f, t, sizeof t);
        /* unit and record separators: no value of a column holds them */
        ttt_strbuf_printf(b, "%s\x1f%s\x1e", key, f ? t : "\x1d");
    }
}

typedef struct keyed {
    const char *key;
    int i;
} keyed;

static int by_key(const void *a, const void *b) {
    const keyed *p = a, *q = b;
    int c = strcmp(p->key, q->key);
    return c ? c : (p->i > q->i) - (p->i < q->i);
}

/* Fill out->best, best_rows and none from the rows; ok[i]: rows[i] may be chosen (every seed
 * finite, or its `best` column is 1 when the rows carry it). */
static ttt_status choose_best(const ttt_results *res, ttt_rows *out, const unsigned char *ok,
                              ttt_error *err) {
    const char *metric = ttt_results_best_metric(res);
    const int n = out->n;
    keyed *kd = calloc((size_t)(n ? n : 1), sizeof *kd);
    char **keys = calloc((size_t)(n ? n : 1), sizeof *keys);
    int *first = malloc((size_t)(n ? n : 1) * sizeof *first); /* per group: its first row */
    int *pick = malloc((size_t)(n ? n : 1) * sizeof *pick);   /* per group: chosen row or -1 */
    out->best = calloc((size_t)(n ? n : 1), 1);
    out->best_rows = calloc((size_t)(n ? n : 1), sizeof *out->best_rows);
    out->none = calloc((size_t)(n ? n : 1), sizeof *out->none);
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    ttt_status s = TTT_OK;
    if (!kd || !keys || !first || !pick || !out->best || !out->best_rows || !out->none)
        s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory choosing the best rows");
    for (int i = 0; s == TTT_OK && i < n; i++) {
        group_key(res, out->rows[i], &b);
        const char *k = ttt_strbuf_str(&b);
        if (!(keys[i] = ttt_results_dup_str(k ? k : "")))
            s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory choosing the best rows");
        kd[i] = (keyed){keys[i], i};
    }
    int ng = 0;
    if (s == TTT_OK) {
        qsort(kd, (size_t)n, sizeof *kd, by_key); /* a group's rows together, in row order */
        for (int a = 0; a < n;) {
            int e = a + 1;
            while (e < n && strcmp(kd[e].key, kd[a].key) == 0) e++;
            int best = -1;
            double bv = 0;
            for (int q = a; q < e; q++) {
                const int i = kd[q].i;
                const ttt_field *f = finite_num(out->rows[i], metric);
                if (!ok[i] || !f) continue;
                /* strictly better: a tie keeps the earlier row */
                if (best < 0 || (res->best_max ? f->num > bv : f->num < bv)) {
                    best = i;
                    bv = f->num;
                }
            }
            first[ng] = kd[a].i;
            pick[ng++] = best;
            a = e;
        }
        /* groups in the order of their first rows (the sweep's order) */
        for (int g = 1; g < ng; g++)
            for (int h = g; h > 0 && first[h - 1] > first[h]; h--) {
                int t = first[h], u = pick[h];
                first[h] = first[h - 1], pick[h] = pick[h - 1];
                first[h - 1] = t, pick[h - 1] = u;
            }
        int nn = 0;
        for (int g = 0; g < ng; g++) {
            if (pick[g] >= 0) {
                out->best[pick[g]] = 1;
                out->best_rows[out->n_best++] = out->rows[pick[g]];
                continue;
            }
            /* no row qualifies: the group's columns, the axis "none", the metric NaN */
            ttt_record *r = &out->none[nn++];
            const ttt_record *r0 = out->rows[first[g]];
            ttt_record_clear(r);
            for (int f = 0; f < r0->n; f++) {
                const ttt_field *fl = &r0->f[f];
                int axis = !strcmp(fl->key, res->pivot_key);
                for (int q = 0; q < res->n_axes && !axis; q++)
                    axis = !strcmp(fl->key, res->axes[q]);
                if (!axis || !group_column(res, fl->key)) continue;
                if (fl->is_num) ttt_record_num(r, fl->key, fl->num);
                else ttt_record_str(r, fl->key, fl->str);
            }
            ttt_record_str(r, res->best_axis, "none");
            ttt_record_num(r, metric, NAN);
            out->best_rows[out->n_best++] = r;
        }
    }
    for (int i = 0; keys && i < n; i++) free(keys[i]);
    free(keys);
    free(kd);
    free(first);
    free(pick);
    ttt_strbuf_free(&b);
    return s;
}

/* rows[i] may be chosen: its `best` column is 1 (rows read back from summary.csv files), or
 * every replicate of it has a finite metric (a rate at which a seed diverged is not a rate to
 * recommend, whatever the mean of the others). */
static void best_ok(const ttt_results *res, const ttt_rows *out, const ttt_results_slot *sl,
                    const ttt_results_cell_span *cs, unsigned char *ok) {
    const char *metric = ttt_results_best_metric(res);
    for (int i = 0; i < out->n; i++) {
        if (res->best_given) {
            const ttt_field *f = ttt_record_get(out->rows[i], "best");
            ok[i] = f && f->is_num && f->num == 1;
            continue;
        }
        if (!cs) {
            ok[i] = finite_num(out->rows[i], metric) != NULL;
            continue;
        }
        ok[i] = 1;
        for (int a = cs[i].from; a < cs[i].to; a++)
            ok[i] &= finite_num(&res->recs[sl[a].i], metric) != NULL;
    }
}

ttt_status ttt_results_rows_best(const ttt_results *res, ttt_rows *out, const ttt_results_slot *sl,
                            const ttt_results_cell_span *cs, ttt_error *err) {
    if (!res->best_axis[0]) return TTT_OK;
    unsigned char *ok = malloc((size_t)(out->n ? out->n : 1));
    if (!ok) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory choosing the best rows");
    best_ok(res, out, sl, cs, ok);
    ttt_status s = choose_best(res, out, ok, err);
    free(ok);
    return s;
}
