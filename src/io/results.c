/* Results of a run: atomic files, measurement records, and the files of a run folder
 * (metrics.jsonl, summary.csv, one SVG per chart, index.html).
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
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* growable string                                                                            */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom; /* sticky: once an allocation failed, further appends are dropped */
} sbuf;

static int sb_reserve(sbuf *b, size_t extra) {
    if (b->oom) return 0;
    if (b->n + extra + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return 0;
    }
    b->p = p;
    b->cap = cap;
    return 1;
}

static void sb_putn(sbuf *b, const char *s, size_t len) {
    if (!sb_reserve(b, len)) return;
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static void sb_putc(sbuf *b, char c) { sb_putn(b, &c, 1); }

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (len < 0) return;
    if ((size_t)len < sizeof small) {
        sb_putn(b, small, (size_t)len);
        return;
    }
    if (!sb_reserve(b, (size_t)len)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)len + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)len;
}

/* Text for XML and HTML: the five characters with a meaning in markup are escaped; control
 * characters other than tab/newline are not allowed in XML 1.0 and become spaces. */
static void sb_put_xml(sbuf *b, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&': sb_puts(b, "&amp;"); break;
        case '<': sb_puts(b, "&lt;"); break;
        case '>': sb_puts(b, "&gt;"); break;
        case '"': sb_puts(b, "&quot;"); break;
        case '\'': sb_puts(b, "&#39;"); break;
        default: sb_putc(b, (c < 0x20 && c != '\t' && c != '\n') ? ' ' : (char)c);
        }
    }
}

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

/* The text form of a number used for grouping and filtering. */
static void fmt_num_text(char *out, size_t len, double v) {
    if (isnan(v))
        snprintf(out, len, "nan");
    else if (isinf(v))
        snprintf(out, len, v > 0 ? "inf" : "-inf");
    else
        fmt_num_exact(out, len, v);
}

/* The readable form for summary.csv and the HTML table. */
static void fmt_num_short(char *out, size_t len, double v) {
    if (!isfinite(v))
        fmt_num_text(out, len, v);
    else if (v == floor(v) && fabs(v) < 1e15)
        snprintf(out, len, "%.0f", v);
    else
        snprintf(out, len, "%.6g", v);
}

static void field_text(const ttt_field *f, char *out, size_t len) {
    if (f->is_num)
        fmt_num_text(out, len, f->num);
    else
        snprintf(out, len, "%s", f->str);
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

typedef struct chart_entry {
    ttt_chart c;
    char filter_key[48];
    char filter_value[160];
} chart_entry;

struct ttt_results {
    char *title;
    ttt_record *recs;
    unsigned char *summary;
    int n, cap;
    chart_entry *charts;
    int nc, capc;
    int oom; /* an add failed for lack of memory; reported by ttt_results_write */
};

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
        chart_entry *c = realloc(res->charts, (size_t)cap * sizeof *c);
        if (!c) {
            res->oom = 1;
            return;
        }
        res->charts = c;
        res->capc = cap;
    }
    chart_entry *e = &res->charts[res->nc++];
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
/* charts                                                                                     */

/* Okabe–Ito: distinguishable with the common colour-vision deficiencies. Yellow is last since
 * it is faint on white. */
static const char *const palette[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                      "#CC79A7", "#56B4E9", "#000000", "#F0E442"};
#define PALETTE_N ((int)(sizeof palette / sizeof palette[0]))

/* Layout of the SVG canvas (pixels). The legend sits right of the plot area. */
enum { SVG_W_MIN = 780, SVG_H_MIN = 440, PLOT_L = 80, PLOT_R = 560, PLOT_T = 50, LEGEND_X = 580 };
/* Legend text starts here; the canvas widens so that long series names are not cut off. */
enum { LEGEND_TEXT_X = LEGEND_X + 32, LEGEND_CHAR_W = 7 };
static const int PLOT_BOTTOM_MARGIN = 70;

typedef struct point {
    double x, y;
    int series, order;
} point;

static int point_cmp(const void *a, const void *b) {
    const point *p = a, *q = b;
    if (p->series != q->series) return p->series < q->series ? -1 : 1;
    if (p->x != q->x) return p->x < q->x ? -1 : 1;
    return (p->order > q->order) - (p->order < q->order); /* stable among equal x */
}

typedef struct series_list {
    char (*name)[224];
    int n, cap;
} series_list;

static int series_find_or_add(series_list *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->name[i], name) == 0) return i;
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        char(*p)[224] = realloc(s->name, (size_t)cap * sizeof *p);
        if (!p) return -1;
        s->name = p;
        s->cap = cap;
    }
    snprintf(s->name[s->n], sizeof s->name[0], "%s", name);
    return s->n++;
}

static double nice_num(double x, int round_it) {
    double e = floor(log10(x));
    double f = x / pow(10, e);
    double nf;
    if (round_it)
        nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    else
        nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return nf * pow(10, e);
}

/* A linear axis: [lo, hi] widened to multiples of a 1-2-5 step, about 6 ticks. */
typedef struct axis {
    double lo, hi, step; /* for log axes lo/hi are exponents of 2 and step is in exponents */
    int log2;
} axis;

static void widen_degenerate(double *lo, double *hi, int keep_zero) {
    double mag = fmax(fabs(*lo), fabs(*hi));
    if (*hi - *lo > 1e-12 * mag && *hi > *lo) return;
    double d = mag > 0 ? 0.1 * mag : 1.0;
    if (!(keep_zero && *lo == 0)) *lo -= d;
    *hi += d;
}

static axis linear_axis(double lo, double hi, int keep_zero) {
    widen_degenerate(&lo, &hi, keep_zero);
    double range = nice_num(hi - lo, 0);
    double step = nice_num(range / 5, 1);
    axis a = {floor(lo / step) * step, ceil(hi / step) * step, step, 0};
    return a;
}

static axis log2_axis(double lo, double hi) {
    double klo = floor(log2(lo)), khi = ceil(log2(hi));
    if (khi <= klo) {
        klo -= 1;
        khi += 1;
    }
    /* at most about ten labelled powers; the axis ends on a labelled one so that ticks sit at
     * equal fractions of the width */
    double step = ceil((khi - klo) / 10);
    axis a = {klo, klo + ceil((khi - klo) / step) * step, step, 1};
    return a;
}

/* Tick label for a linear axis with the decimals the step needs, so 0.1+0.2 prints "0.3". */
static void tick_label(char *out, size_t len, double v, const axis *a) {
    if (fabs(v) < a->step * 1e-6) v = 0;
    double mag = fmax(fabs(a->lo), fabs(a->hi));
    if (mag >= 1e6 || mag < 1e-4) {
        int sig = (int)(floor(log10(mag)) - floor(log10(a->step))) + 1;
        sig = sig < 1 ? 1 : sig > 15 ? 15 : sig;
        snprintf(out, len, "%.*g", sig, v);
    } else {
        int dec = a->step >= 1 ? 0 : (int)ceil(-log10(a->step) - 1e-9);
        snprintf(out, len, "%.*f", dec, v);
    }
}

static void log2_label(char *out, size_t len, int k) {
    if (k >= 0 && k < 20)
        snprintf(out, len, "%.0f", ldexp(1.0, k));
    else if (k < 0 && k >= -6)
        snprintf(out, len, "%g", ldexp(1.0, k));
    else
        snprintf(out, len, "2^%d", k);
}

static double axis_frac(const axis *a, double v) {
    if (a->log2) v = log2(v);
    return (v - a->lo) / (a->hi - a->lo);
}

typedef struct frame {
    axis x, y;
    double plot_b; /* bottom of the plot area */
} frame;

static double px(const frame *fr, double x) {
    return PLOT_L + axis_frac(&fr->x, x) * (PLOT_R - PLOT_L);
}
static double py(const frame *fr, double y) {
    return fr->plot_b - axis_frac(&fr->y, y) * (fr->plot_b - PLOT_T);
}

/* A chart point lies outside the data when its record fails the filter or lacks numbers. */
static int record_in_chart(const chart_entry *ce, const ttt_record *r, double *x, double *y) {
    if (ce->filter_key[0]) {
        const ttt_field *f = ttt_record_get(r, ce->filter_key);
        if (!f) return 0;
        char t[192];
        field_text(f, t, sizeof t);
        if (strcmp(t, ce->filter_value) != 0) return 0;
    }
    const ttt_field *fx = ttt_record_get(r, ce->c.x_key);
    const ttt_field *fy = ttt_record_get(r, ce->c.y_key);
    if (!fx || !fy || !fx->is_num || !fy->is_num) return 0;
    if (!isfinite(fx->num) || !isfinite(fy->num)) return 0;
    if (ce->c.log_x && !(fx->num > 0)) return 0; /* not placeable on a log axis */
    *x = fx->num;
    *y = fy->num;
    return 1;
}

static void series_name(const chart_entry *ce, const ttt_record *r, char *out, size_t len) {
    const ttt_chart *c = &ce->c;
    if (!c->series_key[0]) {
        snprintf(out, len, "%s", c->y_label[0] ? c->y_label : c->y_key);
        return;
    }
    const ttt_field *f = ttt_record_get(r, c->series_key);
    if (!f) {
        snprintf(out, len, "(no %s)", c->series_key);
    } else if (f->is_num) {
        /* a bare "16" in a legend says little; "N = 16" says which knob it is */
        char t[48];
        fmt_num_text(t, sizeof t, f->num);
        snprintf(out, len, "%s = %s", c->series_key, t);
    } else {
        snprintf(out, len, "%s", f->str);
    }
}

static int ref_ok(const ttt_chart *c) { return c->has_ref && c->ref_div != 0 && isfinite(c->ref_scale); }

static double ref_y(const ttt_chart *c, double x) { return c->ref_scale * sqrt(x / c->ref_div); }

/* x of the i-th of n samples spread over the axis data range (log-spaced on a log axis). */
static double ref_sample_x(const ttt_chart *c, double xmin, double xmax, int i, int n) {
    double t = (double)i / (n - 1);
    if (c->log_x) return exp2(log2(xmin) + t * (log2(xmax) - log2(xmin)));
    return xmin + t * (xmax - xmin);
}

enum { REF_SAMPLES = 64 };

static void svg_open(sbuf *b, int w, int h, const char *title) {
    sb_printf(b,
              "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
              "viewBox=\"0 0 %d %d\" role=\"img\" font-family=\"sans-serif\" font-size=\"12\">\n",
              w, h, w, h);
    sb_puts(b, "<title>");
    sb_put_xml(b, title);
    sb_puts(b, "</title>\n");
    sb_printf(b, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", w, h);
    sb_printf(b, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" "
                 "font-weight=\"bold\">", (PLOT_L + PLOT_R) / 2);
    sb_put_xml(b, title);
    sb_puts(b, "</text>\n");
}

static void svg_marker(sbuf *b, int shape, double x, double y, const char *colour) {
    switch (shape) {
    case 0:
        sb_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\">", x, y, colour);
        break;
    case 1:
        sb_printf(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"7\" height=\"7\" fill=\"%s\">", x - 3.5,
                  y - 3.5, colour);
        break;
    default:
        sb_printf(b, "<polygon points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f\" fill=\"%s\">", x, y - 4.5,
                  x - 4, y + 3, x + 4, y + 3, colour);
        break;
    }
}

static const char *marker_close(int shape) {
    return shape == 0 ? "</circle>" : shape == 1 ? "</rect>" : "</polygon>";
}

static void svg_axes(sbuf *b, const frame *fr, const ttt_chart *c) {
    char lab[64];
    double pb = fr->plot_b;
    /* y ticks and grid */
    int ny = (int)floor((fr->y.hi - fr->y.lo) / fr->y.step + 0.5);
    for (int k = 0; k <= ny; k++) {
        double v = fr->y.lo + k * fr->y.step;
        double yy = pb - (double)k / ny * (pb - PLOT_T);
        sb_printf(b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#e3e3e3\"/>\n",
                  PLOT_L, yy, PLOT_R, yy);
        tick_label(lab, sizeof lab, v, &fr->y);
        sb_printf(b, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\" dy=\"0.35em\" "
                     "fill=\"#333333\">%s</text>\n", PLOT_L - 6, yy, lab);
    }
    /* x ticks and grid */
    int nx = (int)floor((fr->x.hi - fr->x.lo) / fr->x.step + 0.5);
    for (int k = 0; k <= nx; k++) {
        double xx = PLOT_L + (double)k / nx * (PLOT_R - PLOT_L);
        if (fr->x.log2)
            log2_label(lab, sizeof lab, (int)(fr->x.lo + k * fr->x.step));
        else
            tick_label(lab, sizeof lab, fr->x.lo + k * fr->x.step, &fr->x);
        sb_printf(b, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e3e3e3\"/>\n",
                  xx, PLOT_T, xx, pb);
        sb_printf(b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" fill=\"#333333\">%s"
                     "</text>\n", xx, pb + 18, lab);
    }
    /* frame and axis labels */
    sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%.2f\" fill=\"none\" "
                 "stroke=\"#666666\"/>\n", PLOT_L, PLOT_T, PLOT_R - PLOT_L, pb - PLOT_T);
    sb_printf(b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"13\">",
              (PLOT_L + PLOT_R) / 2.0, pb + 44);
    sb_put_xml(b, c->x_label[0] ? c->x_label : c->x_key);
    if (c->log_x) sb_puts(b, " (log scale)");
    sb_puts(b, "</text>\n");
    double ymid = (PLOT_T + pb) / 2;
    sb_printf(b, "<text x=\"22\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"13\" "
                 "transform=\"rotate(-90 22 %.2f)\">", ymid, ymid);
    sb_put_xml(b, c->y_label[0] ? c->y_label : c->y_key);
    sb_puts(b, "</text>\n");
}

char *ttt_chart_svg(const ttt_results *res, int chart_index) {
    TTT_ASSERT(chart_index >= 0 && chart_index < res->nc);
    const chart_entry *ce = &res->charts[chart_index];
    const ttt_chart *c = &ce->c;
    const char *title = c->title[0] ? c->title : c->name;

    point *pts = malloc((size_t)(res->n ? res->n : 1) * sizeof *pts);
    series_list sl = {0};
    sbuf b = {0};
    if (!pts) goto fail;
    int np = 0;
    for (int i = 0; i < res->n; i++) {
        double x, y;
        if (!record_in_chart(ce, &res->recs[i], &x, &y)) continue;
        char name[224];
        series_name(ce, &res->recs[i], name, sizeof name);
        int s = series_find_or_add(&sl, name);
        if (s < 0) goto fail;
        pts[np++] = (point){x, y, s, i};
    }
    qsort(pts, (size_t)np, sizeof *pts, point_cmp);

    int nlegend = sl.n + (ref_ok(c) && np ? 1 : 0);
    int h = SVG_H_MIN;
    if (PLOT_T + 22 * nlegend + 20 > h) h = PLOT_T + 22 * nlegend + 20;
    size_t longest = ref_ok(c) && np ? strlen(c->ref_label[0] ? c->ref_label : "reference") : 0;
    for (int s = 0; s < sl.n; s++)
        if (strlen(sl.name[s]) > longest) longest = strlen(sl.name[s]);
    int w = SVG_W_MIN;
    if (LEGEND_TEXT_X + LEGEND_CHAR_W * (int)longest + 12 > w)
        w = LEGEND_TEXT_X + LEGEND_CHAR_W * (int)longest + 12;
    svg_open(&b, w, h, title);

    if (np == 0) {
        sb_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"14\" "
                      "fill=\"#666666\">no data</text>\n</svg>", (PLOT_L + PLOT_R) / 2, h / 2);
        goto done;
    }

    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < np; i++) {
        xmin = fmin(xmin, pts[i].x);
        xmax = fmax(xmax, pts[i].x);
        ymin = fmin(ymin, pts[i].y);
        ymax = fmax(ymax, pts[i].y);
    }
    /* The reference curve is there to be compared against: keep all of it in view. */
    if (ref_ok(c)) {
        for (int i = 0; i < REF_SAMPLES; i++) {
            double yv = ref_y(c, ref_sample_x(c, xmin, xmax, i, REF_SAMPLES));
            if (isfinite(yv)) {
                ymin = fmin(ymin, yv);
                ymax = fmax(ymax, yv);
            }
        }
    }
    if (c->y_from_zero) {
        ymin = fmin(ymin, 0);
        ymax = fmax(ymax, 0);
    }
    frame fr;
    fr.plot_b = h - PLOT_BOTTOM_MARGIN;
    fr.x = c->log_x ? log2_axis(xmin, xmax) : linear_axis(xmin, xmax, 0);
    fr.y = linear_axis(ymin, ymax, c->y_from_zero);
    svg_axes(&b, &fr, c);

    /* reference curve: a <path>, so that every <polyline> is a data series */
    if (ref_ok(c)) {
        sb_puts(&b, "<path fill=\"none\" stroke=\"#777777\" stroke-width=\"1.5\" "
                    "stroke-dasharray=\"6,4\" d=\"");
        int pen = 0;
        for (int i = 0; i < REF_SAMPLES; i++) {
            double xv = ref_sample_x(c, xmin, xmax, i, REF_SAMPLES), yv = ref_y(c, xv);
            if (!isfinite(yv)) {
                pen = 0;
                continue;
            }
            sb_printf(&b, "%s%.2f,%.2f ", pen ? "L" : "M", px(&fr, xv), py(&fr, yv));
            pen = 1;
        }
        sb_puts(&b, "\"/>\n");
    }

    /* series */
    for (int s = 0, i = 0; s < sl.n; s++) {
        const char *colour = palette[s % PALETTE_N];
        int shape = (s / PALETTE_N) % 3;
        int start = i;
        while (i < np && pts[i].series == s) i++;
        sb_printf(&b, "<g>\n<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                      "stroke-linejoin=\"round\" points=\"", colour);
        for (int j = start; j < i; j++)
            sb_printf(&b, "%s%.2f,%.2f", j > start ? " " : "", px(&fr, pts[j].x), py(&fr, pts[j].y));
        sb_puts(&b, "\"/>\n");
        for (int j = start; j < i; j++) {
            char tx[40], ty[40];
            fmt_num_short(tx, sizeof tx, pts[j].x);
            fmt_num_short(ty, sizeof ty, pts[j].y);
            svg_marker(&b, shape, px(&fr, pts[j].x), py(&fr, pts[j].y), colour);
            /* hover text in browsers */
            sb_puts(&b, "<title>");
            sb_put_xml(&b, sl.name[s]);
            sb_puts(&b, ": ");
            sb_put_xml(&b, c->x_key);
            sb_printf(&b, " = %s, ", tx);
            sb_put_xml(&b, c->y_key);
            sb_printf(&b, " = %s</title>", ty);
            sb_printf(&b, "%s\n", marker_close(shape));
        }
        sb_puts(&b, "</g>\n");
    }

    /* legend */
    for (int s = 0; s < sl.n; s++) {
        double ly = PLOT_T + 8 + 22 * s;
        const char *colour = palette[s % PALETTE_N];
        int shape = (s / PALETTE_N) % 3;
        sb_printf(&b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"%s\" "
                      "stroke-width=\"2\"/>", LEGEND_X, ly, LEGEND_X + 24, ly, colour);
        svg_marker(&b, shape, LEGEND_X + 12, ly, colour);
        sb_printf(&b, "%s", marker_close(shape));
        sb_printf(&b, "<text x=\"%d\" y=\"%.2f\" dy=\"0.35em\">", LEGEND_TEXT_X, ly);
        sb_put_xml(&b, sl.name[s]);
        sb_puts(&b, "</text>\n");
    }
    if (ref_ok(c)) {
        double ly = PLOT_T + 8 + 22 * sl.n;
        sb_printf(&b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#777777\" "
                      "stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>", LEGEND_X, ly,
                  LEGEND_X + 24, ly);
        sb_printf(&b, "<text x=\"%d\" y=\"%.2f\" dy=\"0.35em\">", LEGEND_TEXT_X, ly);
        sb_put_xml(&b, c->ref_label[0] ? c->ref_label : "reference");
        sb_puts(&b, "</text>\n");
    }
    sb_puts(&b, "</svg>");

done:
    free(pts);
    free(sl.name);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
fail:
    free(pts);
    free(sl.name);
    free(b.p);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* writing the run folder                                                                     */

/* File stem of a chart: characters that are awkward in file names (or leave the folder)
 * become '_'; an empty name becomes chart<i>. */
static void chart_stem(const ttt_results *res, int i, char *out, size_t len) {
    const char *name = res->charts[i].c.name;
    if (!name[0]) {
        snprintf(out, len, "chart%d", i);
        return;
    }
    size_t j = 0;
    for (; name[j] && j + 1 < len; j++) {
        char ch = name[j];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '-' || ch == '_' || (ch == '.' && j > 0);
        out[j] = ok ? ch : '_';
    }
    out[j] = '\0';
}

static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) return NULL;
    size_t dl = strlen(dir);
    snprintf(p, n, "%s%s%s", dir, (dl && dir[dl - 1] == '/') ? "" : "/", name);
    return p;
}

/* Open `dir/name` as an atomic file; the path is freed here, the afile keeps its own copy. */
static ttt_status open_in(ttt_afile *af, const char *dir, const char *name, ttt_error *err) {
    char *path = join_path(dir, name);
    if (!path) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing results");
    ttt_status s = ttt_afile_open(af, path, err);
    free(path);
    return s;
}

static ttt_status write_metrics(const ttt_results *res, const char *dir, ttt_error *err) {
    ttt_afile af;
    TTT_TRY(open_in(&af, dir, "metrics.jsonl", err));
    for (int i = 0; i < res->n; i++) {
        ttt_record_write_json(&res->recs[i], af.f);
        fputc('\n', af.f);
    }
    return ttt_afile_commit(&af, err);
}

/* Union of the keys of the summary records, in first-seen order. */
typedef struct keylist {
    const char **k;
    int n;
} keylist;

static ttt_status summary_keys(const ttt_results *res, keylist *kl, ttt_error *err) {
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

static void field_short(const ttt_field *fl, char *out, size_t len) {
    if (fl->is_num)
        fmt_num_short(out, len, fl->num);
    else
        snprintf(out, len, "%s", fl->str);
}

static ttt_status write_summary(const ttt_results *res, const keylist *kl, const char *dir,
                                ttt_error *err) {
    ttt_afile af;
    TTT_TRY(open_in(&af, dir, "summary.csv", err));
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
            field_short(fl, cell, sizeof cell);
            csv_cell(af.f, cell);
        }
        fputc('\n', af.f);
    }
    return ttt_afile_commit(&af, err);
}

static const char html_style[] =
    "body{font-family:sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}"
    "h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}"
    "figure{margin:1.5em 0}figcaption{font-size:.85em;color:#666}"
    "figure svg{max-width:100%;height:auto;border:1px solid #ddd}"
    ".scroll{overflow-x:auto}"
    "table{border-collapse:collapse;font-size:.85em}"
    "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;white-space:nowrap}"
    "th{background:#f0f0f0;position:sticky;top:0}td.t{text-align:left}"
    "tr:nth-child(even) td{background:#fafafa}";

static ttt_status write_index(const ttt_results *res, const keylist *kl, char **svgs,
                              const char *dir, ttt_error *err) {
    sbuf b = {0};
    sb_puts(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>");
    sb_put_xml(&b, res->title[0] ? res->title : "ttt run");
    sb_printf(&b, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>", html_style);
    sb_put_xml(&b, res->title[0] ? res->title : "ttt run");
    sb_puts(&b, "</h1>\n<p>Files: <a href=\"metrics.jsonl\">metrics.jsonl</a>, "
                "<a href=\"summary.csv\">summary.csv</a></p>\n");
    for (int i = 0; i < res->nc; i++) {
        char stem[80];
        chart_stem(res, i, stem, sizeof stem);
        sb_puts(&b, "<figure>\n");
        sb_puts(&b, svgs[i]);
        sb_puts(&b, "\n<figcaption><a href=\"");
        sb_put_xml(&b, stem);
        sb_puts(&b, ".svg\">");
        sb_put_xml(&b, stem);
        sb_puts(&b, ".svg</a></figcaption>\n</figure>\n");
    }
    sb_puts(&b, "<h2>Summary</h2>\n");
    if (!kl->n) {
        sb_puts(&b, "<p>No summary records.</p>\n");
    } else {
        sb_puts(&b, "<div class=\"scroll\"><table>\n<thead><tr>");
        for (int q = 0; q < kl->n; q++) {
            sb_puts(&b, "<th>");
            sb_put_xml(&b, kl->k[q]);
            sb_puts(&b, "</th>");
        }
        sb_puts(&b, "</tr></thead>\n<tbody>\n");
        for (int i = 0; i < res->n; i++) {
            if (!res->summary[i]) continue;
            sb_puts(&b, "<tr>");
            for (int q = 0; q < kl->n; q++) {
                const ttt_field *fl = ttt_record_get(&res->recs[i], kl->k[q]);
                char cell[192] = "";
                if (fl) field_short(fl, cell, sizeof cell);
                sb_puts(&b, fl && !fl->is_num ? "<td class=\"t\">" : "<td>");
                sb_put_xml(&b, cell);
                sb_puts(&b, "</td>");
            }
            sb_puts(&b, "</tr>\n");
        }
        sb_puts(&b, "</tbody>\n</table></div>\n");
    }
    sb_puts(&b, "</body>\n</html>\n");
    if (b.oom) {
        free(b.p);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing index.html");
    }
    char *path = join_path(dir, "index.html");
    ttt_status s = path ? ttt_write_file_atomic(path, b.p, err)
                        : ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing index.html");
    free(path);
    free(b.p);
    return s;
}

ttt_status ttt_results_write(const ttt_results *res, const char *dir, ttt_error *err) {
    if (res->oom)
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "out of memory while collecting results; nothing written to '%s'", dir);
    TTT_TRY(write_metrics(res, dir, err));
    keylist kl;
    TTT_TRY(summary_keys(res, &kl, err));
    ttt_status s = write_summary(res, &kl, dir, err);
    char **svgs = NULL;
    if (s == TTT_OK && res->nc) {
        svgs = calloc((size_t)res->nc, sizeof *svgs);
        if (!svgs) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing charts");
    }
    for (int i = 0; s == TTT_OK && i < res->nc; i++) {
        svgs[i] = ttt_chart_svg(res, i);
        if (!svgs[i]) {
            s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory drawing chart '%s'",
                              res->charts[i].c.name);
            break;
        }
        char stem[80], file[96];
        chart_stem(res, i, stem, sizeof stem);
        snprintf(file, sizeof file, "%s.svg", stem);
        ttt_afile af;
        s = open_in(&af, dir, file, err);
        if (s != TTT_OK) break;
        fputs(svgs[i], af.f);
        fputc('\n', af.f);
        s = ttt_afile_commit(&af, err);
    }
    if (s == TTT_OK) s = write_index(res, &kl, svgs, dir, err);
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
                    fmt_num_short(cell, sizeof cell, fl->num);
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
