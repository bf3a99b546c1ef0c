/* Results of a run, part one (results.h): number formats, atomic files, measurement records,
 * the collection, metrics.jsonl, summary.csv, the text table, and ttt_results_write, which
 * writes the whole run folder (charts: charts.c, index.html: page.c).
 *
 * Number formats, chosen so files are both exact and readable:
 *   JSON   integral values below 2^53 print as integers ("16"); other finite values print with
 *          the fewest significant digits (1..17) that read back as the same double; NaN and
 *          Inf print as null (JSON has no spelling for them).
 *   CSV, HTML table
 *          integral values below 1e15 print in full, everything else with %.6g (a summary is
 *          for reading; metrics.jsonl holds the exact values).
 * The "text form" of a field, used to group series and to match chart filters, is the string
 * itself or the JSON spelling of the number (with nan / inf / -inf for non-finite values). */
#include "results.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "results_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* number formatting                                                                          */

/* JSON spelling of a finite double: integer form when exact, else the shortest round trip. */
static void fmt_num_exact(char *out, size_t len, double v) {
    if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        snprintf(out, len, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, len, "%.*g", prec, v);
        if (strtod(out, NULL) == v) return;
    }
}

void ttt_fmt_num_text(char *out, size_t len, double v) {
    if (isnan(v))
        snprintf(out, len, "nan");
    else if (isinf(v))
        snprintf(out, len, v > 0 ? "inf" : "-inf");
    else
        fmt_num_exact(out, len, v);
}

void ttt_fmt_num_short(char *out, size_t len, double v) {
    if (!isfinite(v))
        ttt_fmt_num_text(out, len, v);
    else if (v == floor(v) && fabs(v) < 1e15)
        snprintf(out, len, "%.0f", v);
    else
        snprintf(out, len, "%.6g", v);
}

void ttt_field_text(const ttt_field *f, char *out, size_t len) {
    if (f->is_num)
        ttt_fmt_num_text(out, len, f->num);
    else
        snprintf(out, len, "%s", f->str);
}

void ttt_field_short(const ttt_field *fl, char *out, size_t len) {
    if (fl->is_num)
        ttt_fmt_num_short(out, len, fl->num);
    else
        snprintf(out, len, "%s", fl->str);
}

/* ------------------------------------------------------------------------------------------ */
/* atomic files                                                                               */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static void afile_release(ttt_afile *af) {
    free(af->path);
    free(af->tmp);
    af->path = NULL;
    af->tmp = NULL;
    af->f = NULL;
}

ttt_status ttt_afile_open(ttt_afile *af, const char *path, ttt_error *err) {
    af->f = NULL;
    af->path = NULL;
    af->tmp = NULL;
    if (!path || !*path) return ttt_error_set(err, TTT_ERR_IO, "cannot write a file with an empty name");
    /* The temporary file lives next to the target so rename() never crosses file systems;
     * the leading dot keeps it out of casual listings, the pid keeps processes apart. */
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = slash ? slash + 1 : path;
    if (!*base) return ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': it names a folder", path);
    size_t tlen = dirlen + strlen(base) + 48;
    af->path = dup_str(path);
    af->tmp = malloc(tlen);
    if (!af->path || !af->tmp) {
        afile_release(af);
        return ttt_error_set(err, TTT_ERR_NOMEM, "cannot write '%s': out of memory", path);
    }
    snprintf(af->tmp, tlen, "%.*s.%s.tmp.%ld", (int)dirlen, path, base, (long)getpid());
    af->f = fopen(af->tmp, "w");
    if (!af->f) {
        int e = errno;
        afile_release(af);
        return ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': %s", path, strerror(e));
    }
    return TTT_OK;
}

ttt_status ttt_afile_commit(ttt_afile *af, ttt_error *err) {
    TTT_ASSERT(af && af->f && af->path && af->tmp);
    int e = 0;
    /* fflush retries the buffered bytes and reports their errno (e.g. ENOSPC); a stream error
     * flag left by an earlier failed write whose cause is gone is reported as EIO. */
    if (fflush(af->f) != 0) e = errno;
    if (!e && ferror(af->f)) e = EIO;
    /* fsync before rename: otherwise a crash could leave the new name on empty contents. */
    if (!e && fsync(fileno(af->f)) != 0) e = errno;
    if (fclose(af->f) != 0 && !e) e = errno;
    af->f = NULL;
    if (!e && rename(af->tmp, af->path) != 0) e = errno;
    if (e) {
        unlink(af->tmp);
        ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': %s", af->path, strerror(e));
        afile_release(af);
        return TTT_ERR_IO;
    }
    afile_release(af);
    return TTT_OK;
}

void ttt_afile_abort(ttt_afile *af) {
    if (!af) return;
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    afile_release(af);
}

ttt_status ttt_write_file_atomic(const char *path, const char *text, ttt_error *err) {
    ttt_afile af;
    TTT_TRY(ttt_afile_open(&af, path, err));
    fputs(text, af.f);
    return ttt_afile_commit(&af, err);
}

/* Check one prefix of the path: create it, or accept it when it already is a folder. */
static ttt_status mkdir_one(const char *prefix, const char *full, ttt_error *err) {
    if (mkdir(prefix, 0777) == 0) return TTT_OK;
    int e = errno;
    /* Whatever mkdir said (EEXIST, but also EACCES on some file systems for existing
     * folders), an existing folder is fine. */
    struct stat st;
    if (stat(prefix, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return TTT_OK;
        if (strcmp(prefix, full) == 0)
            return ttt_error_set(err, TTT_ERR_IO,
                                 "cannot create folder '%s': it exists and is not a folder", full);
        return ttt_error_set(err, TTT_ERR_IO,
                             "cannot create folder '%s': '%s' exists and is not a folder", full,
                             prefix);
    }
    if (strcmp(prefix, full) == 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot create folder '%s': %s", full, strerror(e));
    return ttt_error_set(err, TTT_ERR_IO, "cannot create folder '%s': cannot create '%s': %s",
                         full, prefix, strerror(e));
}

ttt_status ttt_mkdirs(const char *path, ttt_error *err) {
    if (!path || !*path) return ttt_error_set(err, TTT_ERR_IO, "cannot create a folder with an empty name");
    char *buf = dup_str(path);
    if (!buf) return ttt_error_set(err, TTT_ERR_NOMEM, "cannot create folder '%s': out of memory", path);
    /* Drop trailing slashes so the last component is compared against the whole path. */
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = '\0';
    ttt_status s = TTT_OK;
    for (size_t i = 1; i <= len && s == TTT_OK; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        if (buf[i - 1] == '/') continue; /* "a//b" */
        char saved = buf[i];
        buf[i] = '\0';
        s = mkdir_one(buf, i == len ? buf : path, err);
        buf[i] = saved;
    }
    free(buf);
    return s;
}
/* ------------------------------------------------------------------------------------------ */
/* records                                                                                    */

/* Copy at most cap-1 bytes without cutting a UTF-8 sequence in half. */
static void copy_utf8(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80) n--;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void ttt_record_clear(ttt_record *r) { r->n = 0; }

/* The field for `key`, appended when new; NULL when the record is full. */
static ttt_field *record_slot(ttt_record *r, const char *key) {
    char k[sizeof r->f[0].key];
    copy_utf8(k, sizeof k, key);
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->f[i].key, k) == 0) return &r->f[i];
    assert(r->n < TTT_RECORD_MAX_FIELDS && "too many fields in a ttt_record");
    if (r->n >= TTT_RECORD_MAX_FIELDS) return NULL;
    ttt_field *f = &r->f[r->n++];
    memcpy(f->key, k, sizeof k);
    return f;
}

void ttt_record_num(ttt_record *r, const char *key, double v) {
    ttt_field *f = record_slot(r, key);
    if (!f) return;
    f->is_num = 1;
    f->num = v;
    f->str[0] = '\0';
}

void ttt_record_str(ttt_record *r, const char *key, const char *s) {
    ttt_field *f = record_slot(r, key);
    if (!f) return;
    f->is_num = 0;
    f->num = 0;
    copy_utf8(f->str, sizeof f->str, s ? s : "");
}

const ttt_field *ttt_record_get(const ttt_record *r, const char *key) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->f[i].key, key) == 0) return &r->f[i];
    return NULL;
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
        } else {
            fputc(c, f);
        }
    }
    fputc('"', f);
}

void ttt_record_write_json(const ttt_record *r, FILE *f) {
    fputc('{', f);
    for (int i = 0; i < r->n; i++) {
        const ttt_field *fl = &r->f[i];
        if (i) fputc(',', f);
        json_string(f, fl->key);
        fputc(':', f);
        if (!fl->is_num) {
            json_string(f, fl->str);
        } else if (!isfinite(fl->num)) {
            fputs("null", f);
        } else {
            char num[40];
            fmt_num_exact(num, sizeof num, fl->num);
            fputs(num, f);
        }
    }
    fputc('}', f);
}

/* ------------------------------------------------------------------------------------------ */
/* the collection                                                                             */

ttt_results *ttt_results_new(const char *title) {
    ttt_results *res = calloc(1, sizeof *res);
    if (!res) return NULL;
    res->title = dup_str(title ? title : "");
    if (!res->title) {
        free(res);
        return NULL;
    }
    return res;
}

void ttt_results_free(ttt_results *res) {
    if (!res) return;
    free(res->title);
    free(res->recs);
    free(res->summary);
    free(res->charts);
    free(res);
}

void ttt_results_add(ttt_results *res, const ttt_record *rec, int summary) {
    if (res->n == res->cap) {
        int cap = res->cap ? res->cap * 2 : 64;
        ttt_record *recs = realloc(res->recs, (size_t)cap * sizeof *recs);
        if (!recs) {
            res->oom = 1;
            return;
        }
        res->recs = recs;
        unsigned char *sm = realloc(res->summary, (size_t)cap);
        if (!sm) {
            res->oom = 1;
            return;
        }
        res->summary = sm;
        res->cap = cap;
    }
    ttt_record *dst = &res->recs[res->n];
    int nf = rec->n < 0 ? 0 : rec->n > TTT_RECORD_MAX_FIELDS ? TTT_RECORD_MAX_FIELDS : rec->n;
    dst->n = nf;
    memcpy(dst->f, rec->f, (size_t)nf * sizeof rec->f[0]);
    res->summary[res->n] = summary != 0;
    res->n++;
}

/* Strings in the chart come from callers; force termination so a full buffer is harmless. */
#define TERMINATE(a) ((a)[sizeof(a) - 1] = '\0')

void ttt_results_add_chart_filtered(ttt_results *res, const ttt_chart *chart,
                                    const char *filter_key, const char *filter_value) {
    if (res->nc == res->capc) {
        int cap = res->capc ? res->capc * 2 : 8;
        ttt_chart_entry *c = realloc(res->charts, (size_t)cap * sizeof *c);
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
    copy_utf8(e->filter_key, sizeof e->filter_key, filter_key ? filter_key : "");
    copy_utf8(e->filter_value, sizeof e->filter_value, filter_value ? filter_value : "");
}

void ttt_results_add_chart(ttt_results *res, const ttt_chart *chart) {
    ttt_results_add_chart_filtered(res, chart, "", "");
}

int ttt_results_count(const ttt_results *res) { return res->n; }

const ttt_record *ttt_results_get(const ttt_results *res, int i) {
    TTT_ASSERT(i >= 0 && i < res->n);
    return &res->recs[i];
}

/* ------------------------------------------------------------------------------------------ */
/* writing the run folder                                                                     */

char *ttt_results_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
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

static ttt_status write_metrics(const ttt_results *res, const char *dir, ttt_error *err) {
    ttt_afile af;
    TTT_TRY(ttt_results_open_in(&af, dir, "metrics.jsonl", err));
    for (int i = 0; i < res->n; i++) {
        ttt_record_write_json(&res->recs[i], af.f);
        fputc('\n', af.f);
    }
    return ttt_afile_commit(&af, err);
}

static ttt_status summary_keys(const ttt_results *res, ttt_keylist *kl, ttt_error *err) {
    int cap = 0;
    kl->k = NULL;
    kl->n = 0;
    for (int i = 0; i < res->n; i++) {
        if (!res->summary[i]) continue;
        const ttt_record *r = &res->recs[i];
        for (int j = 0; j < r->n; j++) {
            int found = 0;
            for (int q = 0; q < kl->n && !found; q++) found = strcmp(kl->k[q], r->f[j].key) == 0;
            if (found) continue;
            if (kl->n == cap) {
                cap = cap ? cap * 2 : 32;
                const char **p = realloc(kl->k, (size_t)cap * sizeof *p);
                if (!p) {
                    free(kl->k);
                    kl->k = NULL;
                    return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing summary");
                }
                kl->k = p;
            }
            kl->k[kl->n++] = r->f[j].key;
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

static ttt_status write_summary(const ttt_results *res, const ttt_keylist *kl, const char *dir,
                                ttt_error *err) {
    ttt_afile af;
    TTT_TRY(ttt_results_open_in(&af, dir, "summary.csv", err));
    if (kl->n) {
        for (int q = 0; q < kl->n; q++) {
            if (q) fputc(',', af.f);
            csv_cell(af.f, kl->k[q]);
        }
        fputc('\n', af.f); /* plain LF, not RFC 4180's CRLF: friendlier to diff and grep */
    }
    for (int i = 0; i < res->n; i++) {
        if (!res->summary[i]) continue;
        for (int q = 0; q < kl->n; q++) {
            if (q) fputc(',', af.f);
            const ttt_field *fl = ttt_record_get(&res->recs[i], kl->k[q]);
            if (!fl) continue;
            char cell[192];
            ttt_field_short(fl, cell, sizeof cell);
            csv_cell(af.f, cell);
        }
        fputc('\n', af.f);
    }
    return ttt_afile_commit(&af, err);
}

ttt_status ttt_results_write(const ttt_results *res, const char *dir, ttt_error *err) {
    if (res->oom)
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "out of memory while collecting results; nothing written to '%s'", dir);
    TTT_TRY(write_metrics(res, dir, err));
    ttt_keylist kl;
    TTT_TRY(summary_keys(res, &kl, err));
    ttt_status s = write_summary(res, &kl, dir, err);
    char **svgs = NULL;
    if (s == TTT_OK && res->nc) {
        svgs = calloc((size_t)res->nc, sizeof *svgs);
        if (!svgs) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing charts");
    }
    /* the page embeds the charts' SVG text, so it is drawn once and kept for both */
    if (s == TTT_OK) s = ttt_charts_write(res, svgs, dir, err);
    if (s == TTT_OK) s = ttt_page_write(res, &kl, svgs, dir, err);
    for (int i = 0; svgs && i < res->nc; i++) free(svgs[i]);
    free(svgs);
    free(kl.k);
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* plain-text table of the summary records (printed by `ttt run`)                             */

void ttt_results_print_table(const ttt_results *res, FILE *f, const char *const *cols) {
    enum { MAXC = 16, W = 200 };
    int nc = 0;
    while (cols[nc] && nc < MAXC) nc++;
    int width[MAXC];
    for (int c = 0; c < nc; c++) width[c] = (int)strlen(cols[c]);
    char cell[W + 1];
    /* two passes: measure, then print */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            for (int c = 0; c < nc; c++) fprintf(f, "%s%-*s", c ? "  " : "", width[c], cols[c]);
            fputc('\n', f);
        }
        for (int i = 0; i < res->n; i++) {
            if (!res->summary[i]) continue;
            for (int c = 0; c < nc; c++) {
                const ttt_field *fl = ttt_record_get(&res->recs[i], cols[c]);
                if (!fl)
                    snprintf(cell, sizeof cell, "-");
                else if (fl->is_num)
                    ttt_fmt_num_short(cell, sizeof cell, fl->num);
                else
                    snprintf(cell, sizeof cell, "%s", fl->str);
                int len = (int)strlen(cell);
                if (pass == 0 && len > width[c]) width[c] = len;
                if (pass == 1) fprintf(f, "%s%-*s", c ? "  " : "", width[c], cell);
            }
            if (pass == 1) fputc('\n', f);
        }
    }
}

