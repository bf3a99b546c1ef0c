/* Results of a run, part two (results.h): self-contained SVG line charts over the records.
 *
 * Every chart is one <svg> document with its own styles, so the same text is both a file of
 * the run folder and a figure inlined into index.html (page.c). */
#include "results.h"
#include "fault.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "results_internal.h"
#include "strbuf.h"

/* The five characters with a meaning in markup are escaped; control characters other than
 * tab/newline are not allowed in XML 1.0 and become spaces. */
void ttt_put_xml(ttt_strbuf *b, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&': ttt_strbuf_puts(b, "&amp;"); break;
        case '<': ttt_strbuf_puts(b, "&lt;"); break;
        case '>': ttt_strbuf_puts(b, "&gt;"); break;
        case '"': ttt_strbuf_puts(b, "&quot;"); break;
        case '\'': ttt_strbuf_puts(b, "&#39;"); break;
        default: ttt_strbuf_putc(b, (c < 0x20 && c != '\t' && c != '\n') ? ' ' : (char)c);
        }
    }
}

/* Ten colours: Okabe–Ito's seven (distinguishable with the common colour-vision deficiencies;
 * its yellow, faint on white, left out) and three more of distinct hue and lightness. */
static const char *const palette[TTT_CHART_COLOURS] = {
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7",
    "#56B4E9", "#000000", "#882255", "#999933", "#7F7F7F"};

const char *ttt_chart_colour(int s) { return palette[(s < 0 ? -s : s) % TTT_CHART_COLOURS]; }
int ttt_chart_marker(int s) { return (s < 0 ? -s : s) % TTT_CHART_MARKERS; }

ttt_chart ttt_chart_make(const char *name, const char *title, const char *x_key,
                         const char *y_key, const char *series_key, const char *x_label,
                         const char *y_label) {
    ttt_chart c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", name ? name : "");
    snprintf(c.title, sizeof c.title, "%s", title ? title : "");
    snprintf(c.x_key, sizeof c.x_key, "%s", x_key ? x_key : "");
    snprintf(c.y_key, sizeof c.y_key, "%s", y_key ? y_key : "");
    snprintf(c.series_key, sizeof c.series_key, "%s", series_key ? series_key : "");
    snprintf(c.x_label, sizeof c.x_label, "%s", x_label ? x_label : "");
    snprintf(c.y_label, sizeof c.y_label, "%s", y_label ? y_label : "");
    return c;
}

/* Layout of the SVG canvas (pixels). The legend sits right of the plot area. */
enum { SVG_W_MIN = 780, SVG_H_MIN = 440, PLOT_L = 80, PLOT_R = 560, PLOT_T = 50, LEGEND_X = 580 };
/* Legend text starts here; the canvas widens so that long series names are not cut off. */
enum { LEGEND_TEXT_X = LEGEND_X + 32, LEGEND_CHAR_W = 7 };
static const int PLOT_BOTTOM_MARGIN = 70;

typedef struct point {
    double x, y;
    int series, order;
    double lo, hi; /* the band: mean ± sample std over the replicates at this x (= y alone) */
    int n;         /* how many records were averaged into it */
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
        char(*p)[224] = ttt_fault_realloc(s->name, (size_t)cap * sizeof *p);
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
    int log2; /* 0 linear, 1 log2, 2 log10 */
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

/* A log10 axis over whole decades; lo/hi/step in exponents of 10. */
static axis log10_axis(double lo, double hi) {
    double klo = floor(log10(lo) + 1e-9), khi = ceil(log10(hi) - 1e-9);
    if (khi <= klo) khi = klo + 1;
    double step = ceil((khi - klo) / 8);
    axis a = {klo, klo + ceil((khi - klo) / step) * step, step, 2};
    return a;
}

static void log10_label(char *out, size_t len, int k) {
    if (k >= -3 && k <= 4)
        snprintf(out, len, "%g", pow(10, k));
    else
        snprintf(out, len, "1e%d", k);
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
    if (a->log2 == 1) v = log2(v);
    if (a->log2 == 2) v = v > 0 ? log10(v) : a->lo - 1;
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
static int record_in_chart(const ttt_chart_entry *ce, const ttt_record *r, double *x, double *y) {
    if (ce->filter_key[0]) {
        const ttt_field *f = ttt_record_get(r, ce->filter_key);
        if (!f) return 0;
        char t[192];
        ttt_field_text(f, t, sizeof t);
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

static void series_name(const ttt_chart_entry *ce, const ttt_record *r, char *out, size_t len) {
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
        ttt_fmt_num_text(t, sizeof t, f->num);
        snprintf(out, len, "%s = %s", c->series_key, t);
    } else {
        snprintf(out, len, "%s", f->str);
    }
}

static int ref_ok(const ttt_chart *c) {
    return c->has_ref && c->ref_div != 0 && isfinite(c->ref_scale);
}

static double ref_y(const ttt_chart *c, double x) {
    return c->ref_scale * sqrt((x - c->ref_shift) / c->ref_div);
}

/* x of the i-th of n samples spread over the axis data range (log-spaced on a log axis). */
static double ref_sample_x(const ttt_chart *c, double xmin, double xmax, int i, int n) {
    double t = (double)i / (n - 1);
    if (c->log_x) return exp2(log2(xmin) + t * (log2(xmax) - log2(xmin)));
    return xmin + t * (xmax - xmin);
}

enum { REF_SAMPLES = 64 };

static void svg_open(ttt_strbuf *b, int w, int h, const char *title) {
    ttt_strbuf_printf(b,
                      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                      "viewBox=\"0 0 %d %d\" role=\"img\" font-family=\"sans-serif\" "
                      "font-size=\"12\">\n",
                      w, h, w, h);
    ttt_strbuf_puts(b, "<title>");
    ttt_put_xml(b, title);
    ttt_strbuf_puts(b, "</title>\n");
    ttt_strbuf_printf(b, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
                      w, h);
    ttt_strbuf_printf(b, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" "
                         "font-weight=\"bold\">", (PLOT_L + PLOT_R) / 2);
    ttt_put_xml(b, title);
    ttt_strbuf_puts(b, "</text>\n");
}

/* The six marker shapes (ttt_chart_marker), each an element that the caller closes with
 * marker_close after its optional <title>. */
static void svg_marker(ttt_strbuf *b, int shape, double x, double y, const char *colour) {
    switch (shape) {
    case 0:
        ttt_strbuf_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\">", x, y,
                          colour);
        break;
    case 1:
        ttt_strbuf_printf(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"7\" height=\"7\" fill=\"%s\">",
                          x - 3.5, y - 3.5, colour);
        break;
    case 2: /* triangle up */
        ttt_strbuf_printf(b, "<polygon points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f\" fill=\"%s\">", x,
                          y - 4.5, x - 4, y + 3, x + 4, y + 3, colour);
        break;
    case 3: /* diamond */
        ttt_strbuf_printf(b, "<polygon points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f %.2f,%.2f\" "
                             "fill=\"%s\">", x, y - 4.5, x + 4.5, y, x, y + 4.5, x - 4.5, y, colour);
        break;
    case 4: /* triangle down */
        ttt_strbuf_printf(b, "<polygon points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f\" fill=\"%s\">", x,
                          y + 4.5, x - 4, y - 3, x + 4, y - 3, colour);
        break;
    default: /* hollow circle */
        ttt_strbuf_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"#ffffff\" "
                             "stroke=\"%s\" stroke-width=\"2\">", x, y, colour);
        break;
    }
}

static const char *marker_close(int shape) {
    return shape == 0 || shape == 5 ? "</circle>" : shape == 1 ? "</rect>" : "</polygon>";
}

static void svg_axes(ttt_strbuf *b, const frame *fr, const ttt_chart *c) {
    char lab[64];
    double pb = fr->plot_b;
    /* y ticks and grid */
    int ny = (int)floor((fr->y.hi - fr->y.lo) / fr->y.step + 0.5);
    for (int k = 0; k <= ny; k++) {
        double v = fr->y.lo + k * fr->y.step;
        double yy = pb - (double)k / ny * (pb - PLOT_T);
        ttt_strbuf_printf(b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" "
                             "stroke=\"#e3e3e3\"/>\n", PLOT_L, yy, PLOT_R, yy);
        if (fr->y.log2)
            log10_label(lab, sizeof lab, (int)floor(v + 0.5));
        else
            tick_label(lab, sizeof lab, v, &fr->y);
        ttt_strbuf_printf(b, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\" dy=\"0.35em\" "
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
        ttt_strbuf_printf(b, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.2f\" "
                             "stroke=\"#e3e3e3\"/>\n", xx, PLOT_T, xx, pb);
        ttt_strbuf_printf(b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" "
                             "fill=\"#333333\">%s</text>\n", xx, pb + 18, lab);
    }
    /* frame and axis labels */
    ttt_strbuf_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%.2f\" fill=\"none\" "
                         "stroke=\"#666666\"/>\n", PLOT_L, PLOT_T, PLOT_R - PLOT_L, pb - PLOT_T);
    ttt_strbuf_printf(b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"13\">",
                      (PLOT_L + PLOT_R) / 2.0, pb + 44);
    ttt_put_xml(b, c->x_label[0] ? c->x_label : c->x_key);
    if (c->log_x) ttt_strbuf_puts(b, " (log scale)");
    ttt_strbuf_puts(b, "</text>\n");
    double ymid = (PLOT_T + pb) / 2;
    ttt_strbuf_printf(b, "<text x=\"22\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"13\" "
                         "transform=\"rotate(-90 22 %.2f)\">", ymid, ymid);
    ttt_put_xml(b, c->y_label[0] ? c->y_label : c->y_key);
    if (fr->y.log2) ttt_strbuf_puts(b, " (log scale)");
    ttt_strbuf_puts(b, "</text>\n");
}

/* A line of more points than a chart is pixels wide shows no more than its envelope, and a long
 * run's chart would grow without bound (docs/hardening.md "Flat memory over long runs"): a
 * series of more than CHART_MAX_POINTS points (sorted by x) is cut into CHART_MAX_POINTS / 2
 * runs of consecutive points, each drawn by its lowest and highest point in x order. Returns
 * the new number of points (in place). */
#define CHART_MAX_POINTS 1000

static int decimate(point *pts, int np) {
    int out = 0;
    for (int i = 0; i < np;) {
        const int start = i;
        while (i < np && pts[i].series == pts[start].series) i++;
        const int n = i - start;
        if (n <= CHART_MAX_POINTS) {
            memmove(pts + out, pts + start, (size_t)n * sizeof *pts);
            out += n;
            continue;
        }
        const int buckets = CHART_MAX_POINTS / 2;
        for (int k = 0; k < buckets; k++) {
            int lo = start + (int)((long)n * k / buckets);
            int hi = start + (int)((long)n * (k + 1) / buckets);
            int imin = lo, imax = lo;
            for (int j = lo + 1; j < hi; j++) {
                if (pts[j].y < pts[imin].y) imin = j;
                if (pts[j].y > pts[imax].y) imax = j;
            }
            /* out <= lo: every earlier run kept at most 2 of its >= 2 points */
            const point a = pts[imin < imax ? imin : imax], b = pts[imin < imax ? imax : imin];
            pts[out++] = a;
            if (imin != imax) pts[out++] = b;
        }
    }
    return out;
}

typedef struct collect {
    const ttt_chart_entry *ce;
    series_list *sl;
    point *pts;
    int n, cap, seen;
} collect;

static int collect_point(void *user, const ttt_record *r) {
    collect *c = user;
    int i = c->seen++;
    double x, y;
    if (!record_in_chart(c->ce, r, &x, &y)) return 0;
    char name[224];
    series_name(c->ce, r, name, sizeof name);
    int s = series_find_or_add(c->sl, name);
    if (s < 0) return -1;
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 256;
        point *p = ttt_fault_realloc(c->pts, (size_t)cap * sizeof *p);
        if (!p) return -1;
        c->pts = p;
        c->cap = cap;
    }
    c->pts[c->n++] = (point){x, y, s, i, y, y, 1};
    return 0;
}

/* Points of one series at the same x (the replicates of a configuration: its seeds) become
 * their mean, with the band mean ± sample std. In place; returns the new count. pts sorted. */
static int merge_replicates(point *pts, int np) {
    int out = 0;
    for (int i = 0; i < np;) {
        int j = i;
        double sum = 0;
        while (j < np && pts[j].series == pts[i].series && pts[j].x == pts[i].x) sum += pts[j++].y;
        const int n = j - i;
        point m = pts[i];
        if (n > 1) {
            const double mean = sum / n;
            double ss = 0;
            for (int q = i; q < j; q++) ss += (pts[q].y - mean) * (pts[q].y - mean);
            const double sd = sqrt(ss / (n - 1));
            m.y = mean;
            m.lo = mean - sd;
            m.hi = mean + sd;
            m.n = n;
        }
        pts[out++] = m;
        i = j;
    }
    return out;
}

/* Is the chart's y axis log10? The run's choice (charts: {log_y: …}) where it applies, else the
 * chart's; AUTO: every y positive and spanning more than two decades (docs/results.md
 * "Charts"). */
static int chart_log_y(const ttt_results *res, const ttt_chart_entry *ce, const point *pts,
                       int np) {
    int mode = ce->c.log_y;
    if (res->log_y != TTT_LOG_Y_AUTO) {
        char name[80];
        snprintf(name, sizeof name, ",%s,", ce->c.name);
        if (!res->log_y_only[0] || strstr(res->log_y_only, name)) mode = res->log_y;
    }
    if (mode == TTT_LOG_Y_OFF || np == 0) return 0;
    double lo = INFINITY, hi = -INFINITY;
    int positive = 0;
    for (int i = 0; i < np; i++) {
        if (!(pts[i].y > 0)) {
            if (mode == TTT_LOG_Y_AUTO) return 0;
            continue;
        }
        positive++;
        lo = fmin(lo, pts[i].y);
        hi = fmax(hi, pts[i].y);
    }
    if (!positive) return 0; /* nothing placeable on a log axis */
    return mode == TTT_LOG_Y_ON || hi > 100 * lo;
}

char *ttt_chart_svg(const ttt_results *res, int chart_index) {
    TTT_ASSERT(chart_index >= 0 && chart_index < res->nc);
    const ttt_chart_entry *ce = &res->charts[chart_index];
    const ttt_chart *c = &ce->c;
    const char *title = c->title[0] ? c->title : c->name;

    series_list sl = {0};
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    collect col = {.ce = ce, .sl = &sl};
    /* only the points of this chart are kept: the records may be streamed from disk */
    if (ttt_results_foreach(res, collect_point, &col) != 0) goto fail;
    point *pts = col.pts;
    int np = col.n;
    if (np > 1) qsort(pts, (size_t)np, sizeof *pts, point_cmp); /* pts is NULL without points */
    np = merge_replicates(pts, np);
    np = decimate(pts, np);
    const int log_y = chart_log_y(res, ce, pts, np);
    if (log_y) { /* points at y <= 0 cannot be placed; a band is cut at the lowest point */
        int k = 0;
        double ylo = INFINITY;
        for (int i = 0; i < np; i++)
            if (pts[i].y > 0) {
                ylo = fmin(ylo, pts[i].y);
                pts[k++] = pts[i];
            }
        np = k;
        for (int i = 0; i < np; i++)
            if (!(pts[i].lo > 0)) pts[i].lo = ylo;
    }

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
        ttt_strbuf_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"14\" "
                              "fill=\"#666666\">no data</text>\n</svg>",
                          (PLOT_L + PLOT_R) / 2, h / 2);
        goto done;
    }

    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < np; i++) {
        xmin = fmin(xmin, pts[i].x);
        xmax = fmax(xmax, pts[i].x);
        ymin = fmin(ymin, pts[i].lo);
        ymax = fmax(ymax, pts[i].hi);
    }
    /* The reference curve is there to be compared against: keep all of it in view. */
    if (ref_ok(c)) {
        for (int i = 0; i < REF_SAMPLES; i++) {
            double yv = ref_y(c, ref_sample_x(c, xmin, xmax, i, REF_SAMPLES));
            if (isfinite(yv) && (!log_y || yv > 0)) {
                ymin = fmin(ymin, yv);
                ymax = fmax(ymax, yv);
            }
        }
    }
    if (c->y_from_zero && !log_y) {
        ymin = fmin(ymin, 0);
        ymax = fmax(ymax, 0);
    }
    frame fr;
    fr.plot_b = h - PLOT_BOTTOM_MARGIN;
    fr.x = c->log_x ? log2_axis(xmin, xmax) : linear_axis(xmin, xmax, 0);
    fr.y = log_y ? log10_axis(ymin, ymax) : linear_axis(ymin, ymax, c->y_from_zero);
    svg_axes(&b, &fr, c);

    /* reference curve: a <path>, so that every <polyline> is a data series */
    if (ref_ok(c)) {
        ttt_strbuf_puts(&b, "<path fill=\"none\" stroke=\"#777777\" stroke-width=\"1.5\" "
                            "stroke-dasharray=\"6,4\" d=\"");
        int pen = 0;
        for (int i = 0; i < REF_SAMPLES; i++) {
            double xv = ref_sample_x(c, xmin, xmax, i, REF_SAMPLES), yv = ref_y(c, xv);
            if (!isfinite(yv) || (log_y && yv <= 0)) {
                pen = 0;
                continue;
            }
            ttt_strbuf_printf(&b, "%s%.2f,%.2f ", pen ? "L" : "M", px(&fr, xv), py(&fr, yv));
            pen = 1;
        }
        ttt_strbuf_puts(&b, "\"/>\n");
    }

    /* series */
    for (int s = 0, i = 0; s < sl.n; s++) {
        const char *colour = ttt_chart_colour(s);
        int shape = ttt_chart_marker(s);
        int start = i;
        while (i < np && pts[i].series == s) i++;
        int band = 0;
        for (int j = start; j < i; j++) band |= pts[j].n > 1 && pts[j].hi > pts[j].lo;
        if (band) { /* mean ± std over the replicates, under the line */
            ttt_strbuf_printf(&b, "<polygon class=\"band\" fill=\"%s\" fill-opacity=\"0.18\" "
                                  "stroke=\"none\" points=\"", colour);
            for (int j = start; j < i; j++)
                ttt_strbuf_printf(&b, "%.2f,%.2f ", px(&fr, pts[j].x), py(&fr, pts[j].hi));
            for (int j = i - 1; j >= start; j--)
                ttt_strbuf_printf(&b, "%.2f,%.2f ", px(&fr, pts[j].x), py(&fr, pts[j].lo));
            ttt_strbuf_puts(&b, "\"/>\n");
        }
        ttt_strbuf_printf(&b, "<g>\n<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                              "stroke-linejoin=\"round\" points=\"", colour);
        for (int j = start; j < i; j++)
            ttt_strbuf_printf(&b, "%s%.2f,%.2f", j > start ? " " : "", px(&fr, pts[j].x),
                              py(&fr, pts[j].y));
        ttt_strbuf_puts(&b, "\"/>\n");
        for (int j = start; j < i; j++) {
            char tx[40], ty[40];
            ttt_fmt_num_short(tx, sizeof tx, pts[j].x);
            ttt_fmt_num_short(ty, sizeof ty, pts[j].y);
            svg_marker(&b, shape, px(&fr, pts[j].x), py(&fr, pts[j].y), colour);
            /* hover text in browsers */
            ttt_strbuf_puts(&b, "<title>");
            ttt_put_xml(&b, sl.name[s]);
            ttt_strbuf_puts(&b, ": ");
            ttt_put_xml(&b, c->x_key);
            ttt_strbuf_printf(&b, " = %s, ", tx);
            ttt_put_xml(&b, c->y_key);
            if (pts[j].n > 1) {
                char sd[40];
                ttt_fmt_num_short(sd, sizeof sd, (pts[j].hi - pts[j].lo) / 2);
                ttt_strbuf_printf(&b, " = %s ± %s (mean ± std of %d)</title>", ty, sd, pts[j].n);
            } else {
                ttt_strbuf_printf(&b, " = %s</title>", ty);
            }
            ttt_strbuf_printf(&b, "%s\n", marker_close(shape));
        }
        ttt_strbuf_puts(&b, "</g>\n");
    }

    /* legend */
    for (int s = 0; s < sl.n; s++) {
        double ly = PLOT_T + 8 + 22 * s;
        const char *colour = ttt_chart_colour(s);
        int shape = ttt_chart_marker(s);
        ttt_strbuf_printf(&b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"%s\" "
                              "stroke-width=\"2\"/>", LEGEND_X, ly, LEGEND_X + 24, ly, colour);
        svg_marker(&b, shape, LEGEND_X + 12, ly, colour);
        ttt_strbuf_printf(&b, "%s", marker_close(shape));
        ttt_strbuf_printf(&b, "<text x=\"%d\" y=\"%.2f\" dy=\"0.35em\">", LEGEND_TEXT_X, ly);
        ttt_put_xml(&b, sl.name[s]);
        ttt_strbuf_puts(&b, "</text>\n");
    }
    if (ref_ok(c)) {
        double ly = PLOT_T + 8 + 22 * sl.n;
        ttt_strbuf_printf(&b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" "
                              "stroke=\"#777777\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>",
                          LEGEND_X, ly, LEGEND_X + 24, ly);
        ttt_strbuf_printf(&b, "<text x=\"%d\" y=\"%.2f\" dy=\"0.35em\">", LEGEND_TEXT_X, ly);
        ttt_put_xml(&b, c->ref_label[0] ? c->ref_label : "reference");
        ttt_strbuf_puts(&b, "</text>\n");
    }
    ttt_strbuf_puts(&b, "</svg>");

done:
    free(pts);
    free(sl.name);
    return ttt_strbuf_take(&b); /* NULL when the text ran out of memory */
fail:
    free(col.pts);
    free(sl.name);
    ttt_strbuf_free(&b);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* chart files                                                                                */

/* File stem of a chart: characters that are awkward in file names (or leave the folder)
 * become '_'; an empty name becomes chart<i>. */
void ttt_chart_stem(const ttt_results *res, int i, char *out, size_t len) {
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

ttt_status ttt_charts_write(const ttt_results *res, char **svgs, const char *dir, ttt_error *err) {
    for (int i = 0; i < res->nc; i++) {
        svgs[i] = ttt_chart_svg(res, i);
        if (!svgs[i])
            return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory drawing chart '%s'",
                                 res->charts[i].c.name);
        char stem[80], file[96];
        ttt_chart_stem(res, i, stem, sizeof stem);
        snprintf(file, sizeof file, "%s.svg", stem);
        ttt_afile af;
        TTT_TRY(ttt_results_open_in(&af, dir, file, err));
        fputs(svgs[i], af.f);
        fputc('\n', af.f);
        TTT_TRY(ttt_afile_commit(&af, err));
    }
    return TTT_OK;
}
