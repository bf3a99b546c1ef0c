/* The collection of a run's records (results.h): adding records, points, axes and charts. */
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
/* the collection                                                                             */

ttt_results *ttt_results_new(const char *title) {
    ttt_results *res = ttt_fault_calloc(1, sizeof *res);
    if (!res) return NULL;
    res->cur_group = -1;
    res->title = ttt_results_dup_str(title ? title : "");
    if (!res->title) {
        free(res);
        return NULL;
    }
    return res;
}

void ttt_results_free(ttt_results *res) {
    if (!res) return;
    if (res->stream.f) ttt_afile_abort(&res->stream);
    free(res->title);
    free(res->recs);
    free(res->summary);
    free(res->group);
    free(res->member);
    free(res->stamp);
    for (int i = 0; i < res->n_axes; i++) free(res->axes[i]);
    free(res->axes);
    free(res->charts);
    free(res);
}

void ttt_results_set_axes(ttt_results *res, const char *const *keys, int n) {
    for (int i = 0; i < res->n_axes; i++) free(res->axes[i]);
    free(res->axes);
    res->axes = NULL;
    res->n_axes = 0;
    if (n <= 0) return;
    res->axes = calloc((size_t)n, sizeof *res->axes);
    if (!res->axes) {
        res->oom = 1;
        return;
    }
    for (int i = 0; i < n; i++) {
        res->axes[i] = ttt_results_dup_str(keys[i]);
        if (!res->axes[i]) res->oom = 1;
        else res->n_axes = i + 1;
    }
}

void ttt_results_set_point(ttt_results *res, const ttt_record *fields, int group, int member) {
    res->cur_group = group;
    res->cur_member = member;
    if (!fields) {
        free(res->stamp);
        res->stamp = NULL;
        return;
    }
    if (!res->stamp && !(res->stamp = malloc(sizeof *res->stamp))) {
        res->oom = 1;
        return;
    }
    *res->stamp = *fields;
}

void ttt_results_set_main(ttt_results *res, const char *metric, const char *pivot_key) {
    snprintf(res->main_metric, sizeof res->main_metric, "%s", metric ? metric : "");
    snprintf(res->pivot_key, sizeof res->pivot_key, "%s", pivot_key ? pivot_key : "");
}

void ttt_results_set_log_y(ttt_results *res, int mode, const char *only) {
    res->log_y = mode;
    if (only && *only)
        snprintf(res->log_y_only, sizeof res->log_y_only, ",%s,", only);
    else
        res->log_y_only[0] = '\0';
}

void ttt_results_set_best(ttt_results *res, const char *axis, const char *metric, int maximize) {
    ttt_results_copy_utf8(res->best_axis, sizeof res->best_axis, axis ? axis : "");
    ttt_results_copy_utf8(res->best_metric, sizeof res->best_metric, metric ? metric : "");
    res->best_max = maximize != 0;
}

void ttt_results_set_best_given(ttt_results *res, int given) { res->best_given = given != 0; }

const char *ttt_results_best_metric(const ttt_results *res) {
    return res->best_metric[0] ? res->best_metric : res->main_metric;
}

ttt_status ttt_results_stream(ttt_results *res, const char *dir, ttt_error *err) {
    TTT_ASSERT(!res->stream.f && res->n == 0);
    return ttt_results_open_in(&res->stream, dir, "metrics.jsonl", err);
}

/* The stamp's fields first, then the record's own (which win over a stamp field of the same
 * key). */
static void stamp_record(ttt_record *out, const ttt_record *stamp, const ttt_record *rec) {
    *out = *stamp;
    for (int i = 0; i < rec->n && i < TTT_RECORD_MAX_FIELDS; i++) {
        const ttt_field *f = &rec->f[i];
        if (!ttt_record_get(out, f->key) && out->n >= TTT_RECORD_MAX_FIELDS) continue;
        if (f->is_num) ttt_record_num(out, f->key, f->num);
        else ttt_record_str(out, f->key, f->str);
    }
}

void ttt_results_stream_measurements_only(ttt_results *res) { res->stream_no_summary = 1; }

void ttt_results_add(ttt_results *res, const ttt_record *rec, int summary) {
    ttt_record *merged = NULL;
    if (res->stamp && (merged = malloc(sizeof *merged)) != NULL) {
        stamp_record(merged, res->stamp, rec);
        rec = merged;
    } else if (res->stamp) {
        res->oom = 1;
    }
    res->n_all++;
    if (res->stream.f && !summary) {
        ttt_record_write_json(rec, res->stream.f);
        fputc('\n', res->stream.f);
        free(merged);
        return;
    }
    if (res->stream.f && !res->stream_no_summary) {
        ttt_record_write_json(rec, res->stream.f);
        fputc('\n', res->stream.f);
    }
    if (res->n == res->cap) {
        int cap = res->cap ? res->cap * 2 : 64;
        ttt_record *recs = ttt_fault_realloc(res->recs, (size_t)cap * sizeof *recs);
        if (recs) res->recs = recs;
        unsigned char *sm = recs ? ttt_fault_realloc(res->summary, (size_t)cap) : NULL;
        if (sm) res->summary = sm;
        int *g = sm ? ttt_fault_realloc(res->group, (size_t)cap * sizeof *g) : NULL;
        if (g) res->group = g;
        int *m = g ? ttt_fault_realloc(res->member, (size_t)cap * sizeof *m) : NULL;
        if (m) res->member = m;
        if (!m) {
            res->oom = 1;
            free(merged);
            return;
        }
        res->cap = cap;
    }
    res->group[res->n] = res->cur_group;
    res->member[res->n] = res->cur_member;
    ttt_record *dst = &res->recs[res->n];
    int nf = rec->n < 0 ? 0 : rec->n > TTT_RECORD_MAX_FIELDS ? TTT_RECORD_MAX_FIELDS : rec->n;
    dst->n = nf;
    memcpy(dst->f, rec->f, (size_t)nf * sizeof rec->f[0]);
    res->summary[res->n] = summary != 0;
    res->n++;
    free(merged);
}

/* Strings in the chart come from callers; force termination so a full buffer is harmless. */
#define TERMINATE(a) ((a)[sizeof(a) - 1] = '\0')

void ttt_results_add_chart_filtered(ttt_results *res, const ttt_chart *chart,
                                    const char *filter_key, const char *filter_value) {
    if (res->nc == res->capc) {
        int cap = res->capc ? res->capc * 2 : 8;
        ttt_chart_entry *c = ttt_fault_realloc(res->charts, (size_t)cap * sizeof *c);
        if (!c) {
            res->oom = 1;
            return;
        }
        res->charts = c;
        res->capc = cap;
    }
    ttt_chart_entry *e = &res->charts[res->nc++];
    e->c = *chart;
    TERMINATE(e->c.name);
    TERMINATE(e->c.title);
    TERMINATE(e->c.x_key);
    TERMINATE(e->c.y_key);
    TERMINATE(e->c.series_key);
    TERMINATE(e->c.x_label);
    TERMINATE(e->c.y_label);
    TERMINATE(e->c.ref_label);
    ttt_results_copy_utf8(e->filter_key, sizeof e->filter_key, filter_key ? filter_key : "");
    ttt_results_copy_utf8(e->filter_value, sizeof e->filter_value,
                          filter_value ? filter_value : "");
}

void ttt_results_add_chart(ttt_results *res, const ttt_chart *chart) {
    ttt_results_add_chart_filtered(res, chart, "", "");
}

int ttt_results_count(const ttt_results *res) { return res->n; }

const ttt_record *ttt_results_get(const ttt_results *res, int i) {
    TTT_ASSERT(i >= 0 && i < res->n);
    return &res->recs[i];
}

int ttt_results_foreach(const ttt_results *res, int (*fn)(void *user, const ttt_record *r),
                        void *user) {
    if (!res->stream.f) {
        for (int i = 0; i < res->n; i++) {
            int rc = fn(user, &res->recs[i]);
            if (rc) return rc;
        }
        return 0;
    }
    if (fflush(res->stream.f) != 0) return -1;
    FILE *in = fopen(res->stream.tmp, "r");
    ttt_record *r = ttt_fault_malloc(sizeof *r);
    char *line = NULL;
    size_t cap = 0;
    int rc = in && r ? 0 : -1;
    while (rc == 0 && getline(&line, &cap, in) > 0)
        rc = ttt_record_parse_json(r, line) == TTT_OK ? fn(user, r) : -1;
    free(line);
    free(r);
    if (in) fclose(in);
    return rc;
}
