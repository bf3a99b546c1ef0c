/* Results: atomic files, records and their JSON/CSV forms, SVG charts, the run folder, and the
 * progress display. */
#include <dirent.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "progress.h"
#include "results.h"
#include "results_internal.h"
#include "testutil.h"

/* ---- helpers ---- */

static char *record_json(const ttt_record *r) {
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    ttt_record_write_json(r, f);
    long len = ftell(f);
    char *buf = calloc((size_t)len + 1, 1);
    rewind(f);
    ck_assert_uint_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    return buf;
}

static int count_substr(const char *s, const char *needle) {
    int n = 0;
    size_t len = strlen(needle);
    for (const char *p = strstr(s, needle); p; p = strstr(p + len, needle)) n++;
    return n;
}

static int count_char(const char *s, char c) {
    int n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

/* A "nan" or "inf" standing as a word (not inside e.g. "dominant-baseline"). */
static int has_nonfinite_word(const char *s) {
    const char *words[] = {"nan", "inf"};
    for (int w = 0; w < 2; w++)
        for (const char *p = strstr(s, words[w]); p; p = strstr(p + 1, words[w])) {
            int before = p > s && ((p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= 'A' && p[-1] <= 'Z'));
            int after = (p[3] >= 'a' && p[3] <= 'z') || (p[3] >= 'A' && p[3] <= 'Z');
            if (!before && !after) return 1;
        }
    return 0;
}

static char *path_in(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static char *read_in(const char *dir, const char *name) {
    char *p = path_in(dir, name);
    char *text = tu_read_file(p);
    free(p);
    return text;
}

/* Number of directory entries whose name contains ".tmp." (left-over temporary files). */
static int count_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static ttt_chart make_chart(const char *name, const char *title, const char *x, const char *y,
                            const char *series) {
    ttt_chart c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", name);
    snprintf(c.title, sizeof c.title, "%s", title);
    snprintf(c.x_key, sizeof c.x_key, "%s", x);
    snprintf(c.y_key, sizeof c.y_key, "%s", y);
    snprintf(c.series_key, sizeof c.series_key, "%s", series);
    return c;
}

/* ---- records and JSON ---- */

START_TEST(test_record_set_replace_get) {
    ttt_record r;
    ttt_record_clear(&r);
    ttt_record_num(&r, "a", 1);
    ttt_record_str(&r, "b", "x");
    ttt_record_num(&r, "c", 3);
    ttt_record_num(&r, "a", 5); /* replaces in place, keeps the order */
    ttt_record_num(&r, "b", 7); /* a string field can become a number */
    ck_assert_int_eq(r.n, 3);
    ck_assert_str_eq(r.f[0].key, "a");
    ck_assert_str_eq(r.f[1].key, "b");
    ck_assert_str_eq(r.f[2].key, "c");
    const ttt_field *a = ttt_record_get(&r, "a");
    ck_assert_ptr_nonnull(a);
    ck_assert(a->is_num && a->num == 5);
    ck_assert(ttt_record_get(&r, "b")->is_num);
    ttt_record_str(&r, "c", "now text");
    ck_assert(!ttt_record_get(&r, "c")->is_num);
    ck_assert_str_eq(ttt_record_get(&r, "c")->str, "now text");
    ck_assert_ptr_null(ttt_record_get(&r, "missing"));
    ttt_record_clear(&r);
    ck_assert_int_eq(r.n, 0);
    ck_assert_ptr_null(ttt_record_get(&r, "a"));
}
END_TEST

START_TEST(test_json_escaping) {
    ttt_record r;
    ttt_record_clear(&r);
    ttt_record_str(&r, "s", "a\"b\\c\nd\x01" "e\tf");
    ttt_record_str(&r, "k\"ey", "caf\xc3\xa9");
    char *j = record_json(&r);
    ck_assert_str_eq(j, "{\"s\":\"a\\\"b\\\\c\\u000ad\\u0001e\\u0009f\",\"k\\\"ey\":\"caf\xc3\xa9\"}");
    free(j);
}
END_TEST

/* The number after "key": in a one-field JSON object. */
static double json_number_of(const char *json, char *text, size_t len) {
    const char *colon = strchr(json, ':');
    ck_assert_ptr_nonnull(colon);
    snprintf(text, len, "%.*s", (int)(strlen(colon + 1) - 1), colon + 1);
    char *end = NULL;
    double v = strtod(text, &end);
    ck_assert_msg(*end == '\0', "not a plain number: '%s'", text);
    return v;
}

START_TEST(test_json_numbers_round_trip) {
    const double vals[] = {0.1, 1.0 / 3, 1e-300, 123456789.0, -2.5, 3.0, 0.0, -7.0,
                           (double)0.1f, 6.02214076e23, 4.9e-324, 1.7976931348623157e308,
                           9007199254740993.0, 12345678901234567890.0, -1e-7};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        ttt_record r;
        ttt_record_clear(&r);
        ttt_record_num(&r, "v", vals[i]);
        char *j = record_json(&r);
        char text[64];
        double back = json_number_of(j, text, sizeof text);
        ck_assert_msg(back == vals[i], "%.17g written as '%s' reads back as %.17g", vals[i], text,
                      back);
        free(j);
    }
    /* integers print without decimals; short values stay short */
    ttt_record r;
    ttt_record_clear(&r);
    ttt_record_num(&r, "i", 3);
    ttt_record_num(&r, "n", -256);
    ttt_record_num(&r, "f", 0.1);
    ttt_record_num(&r, "big", 1e15);
    char *j = record_json(&r);
    ck_assert_str_eq(j, "{\"i\":3,\"n\":-256,\"f\":0.1,\"big\":1000000000000000}");
    free(j);
}
END_TEST

/* What a resumed run reads back from its record journal is the record that was written: the
 * same keys in order, strings byte for byte (quotes, backslashes, control characters, UTF-8),
 * numbers the same doubles, null as NaN; anything else is refused. */
START_TEST(test_json_parse_reads_back_what_was_written) {
    ttt_record r, back;
    ttt_record_clear(&r);
    ttt_record_str(&r, "s", "a\"b\\c\nd\x01" "e\tf/caf\xc3\xa9");
    ttt_record_str(&r, "k\"ey", "");
    const double vals[] = {0.1, 1.0 / 3, 1e-300, -2.5, 4.9e-324, 1.7976931348623157e308,
                           9007199254740993.0, -1e-7, 0.0};
    for (int i = 0; i < 9; i++) {
        char key[8];
        snprintf(key, sizeof key, "v%d", i);
        ttt_record_num(&r, key, vals[i]);
    }
    ttt_record_num(&r, "nan", NAN);
    char *j = record_json(&r);
    char line[2048];
    snprintf(line, sizeof line, "%s\n", j);
    ck_assert_int_eq(ttt_record_parse_json(&back, line), TTT_OK);
    ck_assert_int_eq(back.n, r.n);
    for (int i = 0; i < r.n; i++) {
        ck_assert_str_eq(back.f[i].key, r.f[i].key);
        ck_assert_int_eq(back.f[i].is_num, r.f[i].is_num);
        if (!r.f[i].is_num)
            ck_assert_str_eq(back.f[i].str, r.f[i].str);
        else if (isnan(r.f[i].num))
            ck_assert(isnan(back.f[i].num));
        else
            ck_assert_msg(back.f[i].num == r.f[i].num, "%s: %.17g read back as %.17g",
                          r.f[i].key, r.f[i].num, back.f[i].num);
    }
    free(j);
    static const char *const bad[] = {"", "{", "{\"a\":}", "{\"a\":1,}", "{\"a\":1} x",
                                      "{a:1}", "{\"a\":\"x}", "{\"a\":\"\\q\"}", "[1]"};
    for (int i = 0; i < 9; i++)
        ck_assert_msg(ttt_record_parse_json(&back, bad[i]) == TTT_ERR_FORMAT, "accepted '%s'",
                      bad[i]);
}
END_TEST

START_TEST(test_json_nonfinite_is_null) {
    ttt_record r;
    ttt_record_clear(&r);
    ttt_record_num(&r, "nan", NAN);
    ttt_record_num(&r, "inf", INFINITY);
    ttt_record_num(&r, "ninf", -INFINITY);
    char *j = record_json(&r);
    ck_assert_str_eq(j, "{\"nan\":null,\"inf\":null,\"ninf\":null}");
    free(j);
}
END_TEST

START_TEST(test_record_truncates_long_strings) {
    char long_s[400];
    memset(long_s, 'x', sizeof long_s - 1);
    long_s[sizeof long_s - 1] = '\0';
    ttt_record r;
    ttt_record_clear(&r);
    ttt_record_str(&r, long_s, long_s);
    ck_assert_int_eq(r.n, 1);
    ck_assert_uint_eq(strlen(r.f[0].key), sizeof r.f[0].key - 1);
    ck_assert_uint_eq(strlen(r.f[0].str), sizeof r.f[0].str - 1);
}
END_TEST

/* ---- the run folder ---- */

static ttt_results *sample_results(void) {
    ttt_results *res = ttt_results_new("Sample <run> & \"friends\"");
    ttt_record r;
    /* per-step metrics, not in the summary */
    for (int step = 0; step < 5; step++) {
        ttt_record_clear(&r);
        ttt_record_num(&r, "step", step);
        ttt_record_num(&r, "loss", 1.0 / (step + 1));
        ttt_results_add(res, &r, 0);
    }
    /* summaries with differing keys */
    ttt_record_clear(&r);
    ttt_record_str(&r, "optimizer", "sgd");
    ttt_record_num(&r, "N", 16);
    ttt_record_num(&r, "acc", 0.5);
    ttt_results_add(res, &r, 1);
    ttt_record_clear(&r);
    ttt_record_str(&r, "optimizer", "muon, fast");
    ttt_record_num(&r, "N", 32);
    ttt_record_str(&r, "note", "say \"hi\"\nbye");
    ttt_results_add(res, &r, 1);
    ttt_record_clear(&r);
    ttt_record_num(&r, "acc", 0.123456789);
    ttt_record_num(&r, "N", 64);
    ttt_results_add(res, &r, 1);
    return res;
}

START_TEST(test_results_store_copies) {
    ttt_results *res = ttt_results_new("t");
    ttt_record r;
    for (int i = 0; i < 300; i++) { /* beyond any initial capacity */
        ttt_record_clear(&r);
        ttt_record_num(&r, "i", i);
        ttt_results_add(res, &r, i % 2);
    }
    ttt_record_num(&r, "i", -1); /* changing the caller's record does not change the copy */
    ck_assert_int_eq(ttt_results_count(res), 300);
    for (int i = 0; i < 300; i++) ck_assert(ttt_results_get(res, i)->f[0].num == i);
    ttt_results_free(res);
}
END_TEST

START_TEST(test_csv_union_and_quoting) {
    ttt_results *res = sample_results();
    char *dir = tu_mkdtemp();
    ttt_error err = {0};
    ck_assert_int_eq(ttt_results_write(res, dir, &err), TTT_OK);
    char *csv = read_in(dir, "summary.csv");
    ck_assert_ptr_nonnull(csv);
    ck_assert_str_eq(csv, "optimizer,N,acc,note\n"
                          "sgd,16,0.5,\n"
                          "\"muon, fast\",32,,\"say \"\"hi\"\"\nbye\"\n"
                          ",64,0.123457,\n");
    free(csv);
    tu_rmtree(dir);
    free(dir);
    ttt_results_free(res);
}
END_TEST

START_TEST(test_metrics_jsonl_lines) {
    ttt_results *res = sample_results();
    char *dir = tu_mkdtemp();
    ttt_error err = {0};
    ck_assert_int_eq(ttt_results_write(res, dir, &err), TTT_OK);
    char *m = read_in(dir, "metrics.jsonl");
    ck_assert_ptr_nonnull(m);
    /* the embedded newline in "note" is escaped, so lines = records */
    ck_assert_int_eq(count_char(m, '\n'), ttt_results_count(res));
    ck_assert_int_eq(count_substr(m, "{"), ttt_results_count(res));
    ck_assert_ptr_nonnull(strstr(m, "{\"step\":0,\"loss\":1}\n"));
    ck_assert_ptr_nonnull(strstr(m, "\"note\":\"say \\\"hi\\\"\\u000abye\""));
    free(m);
    tu_rmtree(dir);
    free(dir);
    ttt_results_free(res);
}
END_TEST

START_TEST(test_write_all_files_no_temps) {
    ttt_results *res = sample_results();
    ttt_chart c = make_chart("loss", "Loss", "step", "loss", "");
    ttt_results_add_chart(res, &c);
    ttt_chart c2 = make_chart("acc", "Accuracy", "N", "acc", "");
    c2.log_x = 1;
    ttt_results_add_chart(res, &c2);
    char *dir = tu_mkdtemp();
    ttt_error err = {0};
    ck_assert_int_eq(ttt_results_write(res, dir, &err), TTT_OK);
    /* writing twice replaces the files in place */
    ck_assert_int_eq(ttt_results_write(res, dir, &err), TTT_OK);
    const char *names[] = {"metrics.jsonl", "summary.csv", "loss.svg", "acc.svg", "index.html"};
    for (size_t i = 0; i < 5; i++) {
        char *t = read_in(dir, names[i]);
        ck_assert_msg(t != NULL, "missing %s", names[i]);
        free(t);
    }
    ck_assert_int_eq(count_temp_files(dir), 0);

    char *html = read_in(dir, "index.html");
    ck_assert_ptr_nonnull(strstr(html, "<!DOCTYPE html>"));
    ck_assert_ptr_nonnull(strstr(html, "Sample &lt;run&gt; &amp; &quot;friends&quot;"));
    ck_assert_ptr_null(strstr(html, "Sample <run>"));
    ck_assert_int_eq(count_substr(html, "<svg"), 2); /* charts inlined */
    ck_assert_ptr_nonnull(strstr(html, "<table"));
    ck_assert_ptr_nonnull(strstr(html, "<th>optimizer</th>"));
    ck_assert_ptr_nonnull(strstr(html, "muon, fast"));
    ck_assert_ptr_nonnull(strstr(html, "say &quot;hi&quot;"));
    /* self-contained */
    ck_assert_ptr_null(strstr(html, "<script"));
    ck_assert_ptr_null(strstr(html, "<link"));
    ck_assert_ptr_null(strstr(html, "src="));
    ck_assert_ptr_null(strstr(html, "@import"));
    free(html);

    char *svg = read_in(dir, "loss.svg");
    ck_assert_int_eq(strncmp(svg, "<svg", 4), 0);
    free(svg);
    tu_rmtree(dir);
    free(dir);
    ttt_results_free(res);
}
END_TEST

START_TEST(test_write_missing_dir_fails) {
    ttt_results *res = sample_results();
    char *dir = tu_mkdtemp();
    char *missing = path_in(dir, "no/such/folder");
    ttt_error err = {0};
    ck_assert_int_eq(ttt_results_write(res, missing, &err), TTT_ERR_IO);
    ck_assert_msg(strstr(err.msg, missing) != NULL, "message lacks the path: %s", err.msg);
    ck_assert_msg(strstr(err.msg, "No such file or directory") != NULL, "%s", err.msg);
    free(missing);
    tu_rmtree(dir);
    free(dir);
    ttt_results_free(res);
}
END_TEST

/* ---- SVG ---- */

static ttt_results *series_results(void) {
    ttt_results *res = ttt_results_new("series");
    const char *opts[] = {"sgd", "muon", "a<b&c"};
    ttt_record r;
    /* x in descending order, to check the points are sorted */
    for (int N = 256; N >= 16; N /= 2)
        for (int o = 0; o < 3; o++) {
            ttt_record_clear(&r);
            ttt_record_str(&r, "optimizer", opts[o]);
            ttt_record_num(&r, "N", N);
            ttt_record_num(&r, "recall", (o + 1) * 0.1 * sqrt(N));
            ttt_record_str(&r, "overwrite", o == 1 ? "true" : "false");
            ttt_results_add(res, &r, 1);
        }
    /* records lacking x or y, or with a string y, are skipped */
    ttt_record_clear(&r);
    ttt_record_str(&r, "optimizer", "ghost");
    ttt_record_num(&r, "N", 8);
    ttt_results_add(res, &r, 0);
    ttt_record_clear(&r);
    ttt_record_str(&r, "optimizer", "ghost");
    ttt_record_num(&r, "N", 8);
    ttt_record_str(&r, "recall", "high");
    ttt_results_add(res, &r, 0);
    return res;
}

/* Check that every polyline's x coordinates increase. */
static void assert_polylines_sorted(const char *svg) {
    for (const char *p = strstr(svg, "<polyline"); p; p = strstr(p + 1, "<polyline")) {
        const char *q = strstr(p, "points=\"");
        ck_assert_ptr_nonnull(q);
        q += 8;
        double last = -INFINITY;
        while (*q != '"') {
            char *end;
            double x = strtod(q, &end);
            ck_assert_ptr_ne(end, q);
            ck_assert_msg(x > last, "polyline x not increasing: %g after %g", x, last);
            last = x;
            ck_assert_int_eq(*end, ',');
            strtod(end + 1, &end);
            q = end;
            while (*q == ' ') q++;
        }
    }
}

START_TEST(test_svg_series_legend_escaping) {
    ttt_results *res = series_results();
    ttt_chart c = make_chart("recall", "Recall <vs> N & \"more\"", "N", "recall", "optimizer");
    c.log_x = 1;
    c.y_from_zero = 1;
    snprintf(c.x_label, sizeof c.x_label, "sequence length N");
    snprintf(c.y_label, sizeof c.y_label, "recall");
    c.has_ref = 1;
    c.ref_scale = 1;
    c.ref_div = 4;
    snprintf(c.ref_label, sizeof c.ref_label, "sqrt(N/4)");
    ttt_results_add_chart(res, &c);
    char *svg = ttt_chart_svg(res, 0);
    ck_assert_ptr_nonnull(svg);
    size_t len = strlen(svg);
    ck_assert_int_eq(strncmp(svg, "<svg", 4), 0);
    ck_assert_str_eq(svg + len - 6, "</svg>");
    ck_assert_int_eq(count_substr(svg, "<svg"), 1);
    ck_assert_int_eq(count_substr(svg, "<polyline"), 3);
    /* legend names, escaped */
    ck_assert_ptr_nonnull(strstr(svg, ">sgd</text>"));
    ck_assert_ptr_nonnull(strstr(svg, ">muon</text>"));
    ck_assert_ptr_nonnull(strstr(svg, ">a&lt;b&amp;c</text>"));
    ck_assert_ptr_null(strstr(svg, "ghost"));
    ck_assert_ptr_null(strstr(svg, "a<b"));
    /* title escaped */
    ck_assert_ptr_nonnull(strstr(svg, "Recall &lt;vs&gt; N &amp; &quot;more&quot;"));
    ck_assert_ptr_null(strstr(svg, "<vs>"));
    /* log2 ticks at the powers of two */
    const char *ticks[] = {">16</text>", ">32</text>", ">64</text>", ">128</text>", ">256</text>"};
    for (int i = 0; i < 5; i++) ck_assert_msg(strstr(svg, ticks[i]), "no tick %s", ticks[i]);
    /* axis labels, reference curve and its legend entry */
    ck_assert_ptr_nonnull(strstr(svg, "sequence length N"));
    ck_assert_ptr_nonnull(strstr(svg, "stroke-dasharray"));
    ck_assert_ptr_nonnull(strstr(svg, ">sqrt(N/4)</text>"));
    /* one marker with hover text per plotted point (5 N values x 3 series) */
    ck_assert_int_eq(count_substr(svg, "</title></"), 15);
    /* distinct colours */
    ck_assert_ptr_nonnull(strstr(svg, "#0072B2"));
    ck_assert_ptr_nonnull(strstr(svg, "#E69F00"));
    ck_assert_ptr_nonnull(strstr(svg, "#009E73"));
    /* self-contained */
    ck_assert_ptr_null(strstr(svg, "<script"));
    ck_assert_ptr_null(strstr(svg, "href"));
    assert_polylines_sorted(svg);
    free(svg);
    ttt_results_free(res);
}
END_TEST

START_TEST(test_svg_filter) {
    ttt_results *res = series_results();
    ttt_chart c = make_chart("recall_no_overwrite", "Recall", "N", "recall", "optimizer");
    ttt_results_add_chart_filtered(res, &c, "overwrite", "false");
    ttt_results_add_chart_filtered(res, &c, "overwrite", "maybe");
    ttt_results_add_chart_filtered(res, &c, "N", "32"); /* numbers match by their text form */
    char *svg = ttt_chart_svg(res, 0);
    ck_assert_int_eq(count_substr(svg, "<polyline"), 2);
    ck_assert_ptr_nonnull(strstr(svg, ">sgd</text>"));
    ck_assert_ptr_null(strstr(svg, ">muon</text>"));
    free(svg);
    svg = ttt_chart_svg(res, 1);
    ck_assert_ptr_nonnull(strstr(svg, "no data"));
    ck_assert_int_eq(count_substr(svg, "<polyline"), 0);
    free(svg);
    svg = ttt_chart_svg(res, 2);
    ck_assert_int_eq(count_substr(svg, "<polyline"), 3);
    ck_assert_int_eq(count_substr(svg, "</title></"), 3); /* one marker per point */
    free(svg);
    ttt_results_free(res);
}
END_TEST

START_TEST(test_svg_empty_and_single_series) {
    ttt_results *res = ttt_results_new("empty");
    ttt_chart c = make_chart("e", "Empty & co", "x", "y", "");
    ttt_results_add_chart(res, &c);
    char *svg = ttt_chart_svg(res, 0);
    ck_assert_int_eq(strncmp(svg, "<svg", 4), 0);
    ck_assert_str_eq(svg + strlen(svg) - 6, "</svg>");
    ck_assert_ptr_nonnull(strstr(svg, "no data"));
    ck_assert_ptr_nonnull(strstr(svg, "Empty &amp; co"));
    free(svg);

    /* one series without series_key, all y equal: a degenerate range still draws */
    ttt_record r;
    for (int i = 0; i < 4; i++) {
        ttt_record_clear(&r);
        ttt_record_num(&r, "x", i);
        ttt_record_num(&r, "y", 2.0);
        ttt_results_add(res, &r, 0);
    }
    ttt_record_clear(&r); /* NaN is not plotted */
    ttt_record_num(&r, "x", 9);
    ttt_record_num(&r, "y", NAN);
    ttt_results_add(res, &r, 0);
    svg = ttt_chart_svg(res, 0);
    ck_assert_int_eq(count_substr(svg, "<polyline"), 1);
    ck_assert_int_eq(count_substr(svg, "<circle"), 4 + 1); /* points + legend */
    ck_assert(!has_nonfinite_word(svg));
    ck_assert_ptr_null(strstr(svg, "no data"));
    free(svg);
    ttt_results_free(res);
}
END_TEST

START_TEST(test_svg_nice_ticks) {
    ttt_results *res = ttt_results_new("ticks");
    ttt_record r;
    const double xs[] = {0.1, 0.2, 0.3, 0.7};
    for (int i = 0; i < 4; i++) {
        ttt_record_clear(&r);
        ttt_record_num(&r, "x", xs[i]);
        ttt_record_num(&r, "y", 100 + 3 * i);
        ttt_results_add(res, &r, 0);
    }
    ttt_chart c = make_chart("t", "t", "x", "y", "");
    c.y_from_zero = 1;
    ttt_results_add_chart(res, &c);
    char *svg = ttt_chart_svg(res, 0);
    ck_assert_msg(strstr(svg, ">0.3</text>") || strstr(svg, ">0.4</text>"), "x ticks: %s", svg);
    ck_assert_ptr_null(strstr(svg, "0000000"));
    ck_assert_ptr_nonnull(strstr(svg, ">0</text>")); /* y from zero */
    ck_assert_ptr_nonnull(strstr(svg, ">100</text>"));
    free(svg);
    ttt_results_free(res);
}
END_TEST

/* ---- atomic files and folders ---- */

START_TEST(test_afile_commit_and_replace) {
    char *dir = tu_mkdtemp();
    char *path = path_in(dir, "a.txt");
    ttt_error err = {0};
    ck_assert_int_eq(ttt_write_file_atomic(path, "first\n", &err), TTT_OK);
    ck_assert_int_eq(ttt_write_file_atomic(path, "second\n", &err), TTT_OK);
    char *t = tu_read_file(path);
    ck_assert_str_eq(t, "second\n");
    free(t);
    ck_assert_int_eq(count_temp_files(dir), 0);

    /* while open, the target keeps its old contents; the temporary file is in the same folder */
    ttt_afile af;
    ck_assert_int_eq(ttt_afile_open(&af, path, &err), TTT_OK);
    fputs("third\n", af.f);
    ck_assert_int_eq(count_temp_files(dir), 1);
    ck_assert_int_eq(strncmp(af.tmp, dir, strlen(dir)), 0);
    t = tu_read_file(path);
    ck_assert_str_eq(t, "second\n");
    free(t);
    ck_assert_int_eq(ttt_afile_commit(&af, &err), TTT_OK);
    ttt_afile_abort(&af); /* safe after commit */
    t = tu_read_file(path);
    ck_assert_str_eq(t, "third\n");
    free(t);
    ck_assert_int_eq(count_temp_files(dir), 0);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_afile_abort_removes_temp) {
    char *dir = tu_mkdtemp();
    char *path = path_in(dir, "a.txt");
    ttt_error err = {0};
    ck_assert_int_eq(ttt_write_file_atomic(path, "keep\n", &err), TTT_OK);
    ttt_afile af;
    ck_assert_int_eq(ttt_afile_open(&af, path, &err), TTT_OK);
    fputs("discard\n", af.f);
    ttt_afile_abort(&af);
    ttt_afile_abort(&af); /* twice is harmless */
    ck_assert_int_eq(count_temp_files(dir), 0);
    char *t = tu_read_file(path);
    ck_assert_str_eq(t, "keep\n");
    free(t);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_afile_missing_dir_and_notdir) {
    char *dir = tu_mkdtemp();
    ttt_error err = {0};
    /* the folder does not exist */
    char *p1 = path_in(dir, "nope/x.csv");
    ck_assert_int_eq(ttt_write_file_atomic(p1, "x", &err), TTT_ERR_IO);
    ck_assert_msg(strstr(err.msg, p1) != NULL, "message lacks the path: %s", err.msg);
    ck_assert_msg(strstr(err.msg, "No such file or directory") != NULL, "%s", err.msg);
    /* the "folder" is a regular file */
    char *file = path_in(dir, "file");
    ck_assert_int_eq(tu_write_file(file, "I am a file\n"), 0);
    char *p2 = path_in(dir, "file/x.csv");
    ttt_error_clear(&err);
    ck_assert_int_eq(ttt_write_file_atomic(p2, "x", &err), TTT_ERR_IO);
    ck_assert_msg(strstr(err.msg, p2) != NULL, "message lacks the path: %s", err.msg);
    ck_assert_msg(strstr(err.msg, "Not a directory") != NULL, "%s", err.msg);
    char *t = tu_read_file(file);
    ck_assert_str_eq(t, "I am a file\n");
    free(t);
    ck_assert_int_eq(count_temp_files(dir), 0);
    free(p1);
    free(p2);
    free(file);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* A full disk: the descriptor under an open afile is swapped for /dev/full, which fails every
 * write with ENOSPC. The commit must fail naming ENOSPC (not EIO), remove the temporary file and
 * keep the earlier file. */
START_TEST(test_afile_disk_full_keeps_old_file) {
    FILE *probe = fopen("/dev/full", "w");
    if (!probe) return; /* no /dev/full here */
    fclose(probe);
    char *dir = tu_mkdtemp();
    char *path = path_in(dir, "summary.csv");
    ttt_error err = {0};
    ck_assert_int_eq(ttt_write_file_atomic(path, "old contents\n", &err), TTT_OK);
    ttt_afile af;
    ck_assert_int_eq(ttt_afile_open(&af, path, &err), TTT_OK);
    int full = open("/dev/full", O_WRONLY);
    ck_assert_int_ge(full, 0);
    ck_assert_int_eq(dup2(full, ttt_afile_fd(&af)), ttt_afile_fd(&af));
    close(full);
    fputs("new contents that will not fit\n", af.f);
    ck_assert_int_eq(ttt_afile_commit(&af, &err), TTT_ERR_IO);
    ck_assert_msg(strstr(err.msg, path) != NULL, "message lacks the path: %s", err.msg);
    ck_assert_msg(strstr(err.msg, "No space left on device") != NULL, "%s", err.msg);
    ck_assert_ptr_null(af.path);
    ck_assert_ptr_null(af.tmp);
    char *t = tu_read_file(path);
    ck_assert_str_eq(t, "old contents\n");
    free(t);
    ck_assert_int_eq(count_temp_files(dir), 0);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_mkdirs) {
    char *dir = tu_mkdtemp();
    ttt_error err = {0};
    char *deep = path_in(dir, "a/b//c/");
    ck_assert_int_eq(ttt_mkdirs(deep, &err), TTT_OK);
    ck_assert_int_eq(ttt_mkdirs(deep, &err), TTT_OK); /* existing is fine */
    struct stat st;
    char *abc = path_in(dir, "a/b/c");
    ck_assert_int_eq(stat(abc, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));

    /* an existing file where a folder should be */
    char *file = path_in(dir, "a/f");
    ck_assert_int_eq(tu_write_file(file, "x"), 0);
    ck_assert_int_eq(ttt_mkdirs(file, &err), TTT_ERR_IO);
    ck_assert_msg(strstr(err.msg, file) && strstr(err.msg, "not a folder"), "%s", err.msg);
    char *below = path_in(dir, "a/f/g/h");
    ttt_error_clear(&err);
    ck_assert_int_eq(ttt_mkdirs(below, &err), TTT_ERR_IO);
    ck_assert_msg(strstr(err.msg, below) && strstr(err.msg, "not a folder"), "%s", err.msg);
    ck_assert_int_eq(ttt_mkdirs("", &err), TTT_ERR_IO);
    free(deep);
    free(abc);
    free(file);
    free(below);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- progress ---- */

static double fake_time;
static double fake_clock(void) { return fake_time; }

static void clock_setup(void) {
    fake_time = 100.0;
    ttt_progress_set_clock(fake_clock);
}
static void clock_teardown(void) { ttt_progress_set_clock(NULL); }

static char *stream_text(FILE *f) {
    fflush(f);
    long len = ftell(f);
    char *buf = calloc((size_t)len + 1, 1);
    rewind(f);
    size_t got = fread(buf, 1, (size_t)len, f);
    buf[got] = '\0';
    fseek(f, 0, SEEK_END);
    return buf;
}

START_TEST(test_progress_quiet_first_second) {
    FILE *f = tmpfile();
    ttt_progress p;
    ttt_progress_init(&p, "train", 100, f, 1);
    ck_assert_int_eq(p.is_tty, 0);
    for (int i = 1; i <= 100; i++) {
        fake_time += 0.009; /* 0.9 s in all */
        ttt_progress_update(&p, i, "loss 0.5");
    }
    ttt_progress_finish(&p);
    ck_assert_int_eq(ftell(f), 0);
    ck_assert_int_eq(p.shown, 0);
    fclose(f);
}
END_TEST

START_TEST(test_progress_plain_lines) {
    FILE *f = tmpfile();
    ttt_progress p;
    ttt_progress_init(&p, "train", 100, f, 1);
    fake_time += 0.5;
    ttt_progress_update(&p, 5, "warming up");
    ck_assert_int_eq(ftell(f), 0);
    fake_time += 0.7; /* 1.2 s: first line */
    ttt_progress_update(&p, 12, "loss 0.9");
    char *t = stream_text(f);
    ck_assert_int_eq(count_char(t, '\n'), 1);
    ck_assert_ptr_nonnull(strstr(t, "train"));
    ck_assert_ptr_nonnull(strstr(t, "12/100"));
    ck_assert_ptr_nonnull(strstr(t, "loss 0.9"));
    ck_assert_ptr_nonnull(strstr(t, "ETA"));
    free(t);
    for (int i = 13; i < 50; i++) { /* 3.7 s more: within 5 s of the last line */
        fake_time += 0.1;
        ttt_progress_update(&p, i, "loss 0.8");
    }
    t = stream_text(f);
    ck_assert_int_eq(count_char(t, '\n'), 1);
    free(t);
    fake_time += 2.0; /* 5.7 s after the first line */
    ttt_progress_update(&p, 60, "loss\n0.7"); /* a newline in the status stays on one line */
    t = stream_text(f);
    ck_assert_int_eq(count_char(t, '\n'), 2);
    free(t);
    fake_time += 1.0;
    ttt_progress_update(&p, 100, NULL);
    ttt_progress_finish(&p);
    ttt_progress_finish(&p); /* only one final line */
    t = stream_text(f);
    ck_assert_int_eq(count_char(t, '\n'), 3);
    ck_assert_ptr_nonnull(strstr(t, "100/100"));
    ck_assert_ptr_nonnull(strstr(t, "done"));
    ck_assert_ptr_null(strchr(t, '\r'));
    ck_assert_ptr_null(strchr(t, '\033'));
    free(t);
    fclose(f);
}
END_TEST

START_TEST(test_progress_final_line_after_long_run) {
    /* no update was ever shown, but the run took over a second: one final line */
    FILE *f = tmpfile();
    ttt_progress p;
    ttt_progress_init(&p, "eval", 10, f, 1);
    fake_time += 0.5;
    ttt_progress_update(&p, 10, NULL);
    fake_time += 1.0;
    ttt_progress_finish(&p);
    char *t = stream_text(f);
    ck_assert_int_eq(count_char(t, '\n'), 1);
    ck_assert_ptr_nonnull(strstr(t, "eval"));
    free(t);
    fclose(f);
}
END_TEST

START_TEST(test_progress_disabled) {
    FILE *f = tmpfile();
    ttt_progress p;
    ttt_progress_init(&p, "train", 100, f, 0);
    for (int i = 0; i < 100; i++) {
        fake_time += 1.0;
        ttt_progress_update(&p, i, "x");
    }
    ttt_progress_finish(&p);
    ck_assert_int_eq(ftell(f), 0);
    ck_assert_int_eq(p.done, 99);
    fclose(f);
}
END_TEST

START_TEST(test_progress_tty_redraw) {
    FILE *f = tmpfile();
    ttt_progress p;
    ttt_progress_init(&p, "train", 100, f, 1);
    p.is_tty = 1; /* pretend: a tmpfile is no terminal */
    fake_time += 0.5;
    ttt_progress_update(&p, 10, "s");
    ck_assert_int_eq(ftell(f), 0);
    fake_time += 0.7;
    ttt_progress_update(&p, 37, "loss 0.5");
    fake_time += 0.05; /* too soon for a redraw */
    ttt_progress_update(&p, 38, "loss 0.5");
    char *t = stream_text(f);
    ck_assert_int_eq(count_char(t, '\r'), 1);
    ck_assert_ptr_nonnull(strstr(t, "\rtrain [#######.............] 37/100  1.2s  ETA 2.0s  loss 0.5"
                                    "\033[K"));
    ck_assert_ptr_null(strchr(t, '\n'));
    free(t);
    fake_time += 0.15;
    ttt_progress_update(&p, 40, "loss 0.4");
    fake_time += 0.15;
    ttt_progress_update(&p, 100, "loss 0.3");
    ttt_progress_finish(&p);
    t = stream_text(f);
    ck_assert_int_eq(count_char(t, '\r'), 4);
    ck_assert_int_eq(count_char(t, '\n'), 1);
    ck_assert_ptr_nonnull(strstr(t, "[####################] 100/100"));
    ck_assert_int_eq(t[strlen(t) - 1], '\n');
    free(t);
    fclose(f);
}
END_TEST

START_TEST(test_now_monotonic) {
    double a = ttt_now(), b = ttt_now();
    ck_assert(b >= a);
    ck_assert(a > 0);
}
END_TEST

/* ---- chart styles, log axes, replicate bands ---- */

/* A results object with `n` series of 3 points each (x = 1, 2, 3), series i at y = i + x. */
static ttt_results *many_series(int n) {
    ttt_results *res = ttt_results_new("many");
    for (int s = 0; s < n; s++)
        for (int x = 1; x <= 3; x++) {
            ttt_record r;
            ttt_record_clear(&r);
            char name[32];
            snprintf(name, sizeof name, "s%02d", s);
            ttt_record_str(&r, "series", name);
            ttt_record_num(&r, "x", x);
            ttt_record_num(&r, "y", s + x);
            ttt_results_add(res, &r, 0);
        }
    return res;
}

/* The legend entry of series `name` in an SVG: its colour and marker element ("circle", "rect",
 * "polygon points=..." shape by its point count, hollow circles apart). */
static void legend_style(const char *svg, const char *name, char *colour, char *marker) {
    char want[64];
    snprintf(want, sizeof want, ">%s</text>", name);
    const char *t = strstr(svg, want);
    ck_assert_msg(t != NULL, "no legend entry %s", name);
    /* the legend line and marker precede the text on the same line */
    const char *line = t;
    while (line > svg && line[-1] != '\n') line--;
    const char *st = strstr(line, "stroke=\"");
    ck_assert_ptr_nonnull(st);
    snprintf(colour, 8, "%.7s", st + 8);
    const char *m = strstr(line, "/>");
    ck_assert_ptr_nonnull(m);
    m += 2; /* after the legend line: the marker element */
    if (strncmp(m, "<circle", 7) == 0)
        snprintf(marker, 16, strstr(m, "fill=\"#ffffff\"") && strstr(m, "fill=\"#ffffff\"") < t
                                 ? "hollow" : "circle");
    else if (strncmp(m, "<rect", 5) == 0)
        snprintf(marker, 16, "rect");
    else {
        /* polygons by their vertex count and which way the first vertex points */
        const char *pts = strstr(m, "points=\"") + 8;
        int commas = 0;
        for (const char *p = pts; *p != '"'; p++) commas += *p == ',';
        double x0, y0, x1, y1;
        sscanf(pts, "%lf,%lf %lf,%lf", &x0, &y0, &x1, &y1);
        snprintf(marker, 16, "%s", commas == 4 ? "diamond" : y0 < y1 ? "tri_up" : "tri_down");
    }
}

/* Twelve series: every one has its own (colour, marker) pair, the first ten have ten different
 * colours, and neighbours differ in both. */
START_TEST(test_twelve_series_distinct_styles) {
    ttt_results *res = many_series(12);
    ttt_chart c = make_chart("many", "Many", "x", "y", "series");
    ttt_results_add_chart(res, &c);
    char *svg = ttt_chart_svg(res, 0);
    char colour[12][8], marker[12][16];
    for (int s = 0; s < 12; s++) {
        char name[8];
        snprintf(name, sizeof name, "s%02d", s);
        legend_style(svg, name, colour[s], marker[s]);
    }
    for (int a = 0; a < 12; a++)
        for (int b = 0; b < a; b++) {
            ck_assert_msg(strcmp(colour[a], colour[b]) || strcmp(marker[a], marker[b]),
                          "series %d and %d share %s %s", a, b, colour[a], marker[a]);
            if (a < 10) ck_assert_msg(strcmp(colour[a], colour[b]), "series %d and %d share %s", a,
                                      b, colour[a]);
        }
    for (int s = 1; s < 12; s++)
        ck_assert_msg(strcmp(colour[s], colour[s - 1]) && strcmp(marker[s], marker[s - 1]),
                      "neighbours %d and %d", s - 1, s);
    free(svg);
    ttt_results_free(res);
}
END_TEST

/* Log y: automatic over more than two decades of positive values (ticks at decades), not over
 * less, and the run's choice overrides the chart's both ways. */
START_TEST(test_log_y) {
    ttt_results *res = ttt_results_new("log");
    const double ys[4] = {2, 30, 400, 5000};
    for (int i = 0; i < 4; i++) {
        ttt_record r;
        ttt_record_clear(&r);
        ttt_record_num(&r, "x", i);
        ttt_record_num(&r, "y", ys[i]);
        ttt_record_num(&r, "z", 10 + i); /* less than a decade */
        ttt_results_add(res, &r, 0);
    }
    ttt_chart wide = make_chart("wide", "Wide", "x", "y", "");
    ttt_chart narrow = make_chart("narrow", "Narrow", "x", "z", "");
    ttt_results_add_chart(res, &wide);
    ttt_results_add_chart(res, &narrow);
    char *a = ttt_chart_svg(res, 0), *b = ttt_chart_svg(res, 1);
    ck_assert_msg(strstr(a, "y (log scale)"), "auto: 2 … 5000 is log");
    const char *decades[] = {">1</text>", ">10</text>", ">100</text>", ">1000</text>",
                             ">10000</text>"};
    for (int i = 0; i < 5; i++) ck_assert_msg(strstr(a, decades[i]), "no tick %s", decades[i]);
    ck_assert_msg(!strstr(b, "(log scale)"), "auto: 10 … 13 is linear");
    free(a), free(b);
    ttt_results_set_log_y(res, TTT_LOG_Y_OFF, NULL);
    a = ttt_chart_svg(res, 0);
    ck_assert_msg(!strstr(a, "(log scale)"), "log_y: false");
    free(a);
    ttt_results_set_log_y(res, TTT_LOG_Y_ON, "narrow");
    a = ttt_chart_svg(res, 0), b = ttt_chart_svg(res, 1);
    ck_assert_msg(strstr(b, "(log scale)"), "log_y: [narrow]");
    ck_assert_msg(strstr(a, "(log scale)"), "a chart the list leaves out keeps its own (auto)");
    free(a), free(b);
    ttt_results_free(res);
}
END_TEST

/* Replicates (records of one series at one x): one point at their mean, a band of mean ± sample
 * std, and hover text that says so; a series without replicates has no band. */
START_TEST(test_replicate_band) {
    ttt_results *res = ttt_results_new("band");
    const double ys[3] = {1, 2, 6}; /* mean 3, sample std sqrt(7) */
    for (int seed = 0; seed < 3; seed++)
        for (int x = 1; x <= 2; x++) {
            ttt_record r;
            ttt_record_clear(&r);
            ttt_record_str(&r, "series", "a");
            ttt_record_num(&r, "seed", seed);
            ttt_record_num(&r, "x", x);
            ttt_record_num(&r, "y", ys[seed] * x);
            ttt_results_add(res, &r, 0);
        }
    ttt_chart c = make_chart("band", "Band", "x", "y", "series");
    ttt_results_add_chart(res, &c);
    char *svg = ttt_chart_svg(res, 0);
    ck_assert_int_eq(count_substr(svg, "class=\"band\""), 1);
    ck_assert_int_eq(count_substr(svg, "</title></"), 2); /* two x values, not six points */
    char want[96];
    snprintf(want, sizeof want, "y = 3 ± %.6g (mean ± std of 3)", sqrt(7.0));
    ck_assert_msg(strstr(svg, want), "no '%s'", want);
    free(svg);
    ttt_results_free(res);
    res = many_series(2);
    ttt_results_add_chart(res, &c);
    svg = ttt_chart_svg(res, 0);
    ck_assert_ptr_null(strstr(svg, "class=\"band\""));
    free(svg);
    ttt_results_free(res);
}
END_TEST


/* ---- the best row of each group (docs/results.md "Best over an axis") ---- */

/* Four mixers × three learning rates × three seeds, added in sweep order (the rate varies
 * slowest), accuracies chosen so that each wrong rule picks another rate:
 *   A: the best single seed (0.9 at lr 1) is not the best mean (0.5 at lr 2);
 *   B: lr 1 and lr 2 tie on the mean (0.5, exact in binary): the first in sweep order wins;
 *   C: lr 1 has the best mean of its finite seeds (0.9) but a seed that diverged: lr 2 wins;
 *   D: a seed diverged at every rate: no rate qualifies. */
static ttt_results *best_results(void) {
    static const double acc[3][4][3] = {
        /* lr 1 */ {{0.9, 0.125, 0.125}, {0.5, 0.5, 0.5}, {0.9, 0.9, NAN}, {0.5, NAN, 0.5}},
        /* lr 2 */ {{0.5, 0.5, 0.5}, {0.25, 0.75, 0.5}, {0.375, 0.375, 0.375}, {NAN, 0.5, 0.5}},
        /* lr 3 */ {{0.25, 0.25, 0.375}, {0.25, 0.25, 0.25}, {0.25, 0.25, 0.25}, {0.5, 0.5, NAN}}};
    static const char *const mixers[4] = {"A", "B", "C", "D"};
    ttt_results *res = ttt_results_new("best");
    const char *axes[] = {"train.lr", "layer.preset", "seed"};
    ttt_results_set_axes(res, axes, 3);
    for (int l = 0; l < 3; l++)
        for (int m = 0; m < 4; m++)
            for (int seed = 0; seed < 3; seed++) {
                ttt_record stamp, r;
                ttt_record_clear(&stamp);
                ttt_record_num(&stamp, "train.lr", l + 1);
                ttt_record_str(&stamp, "layer.preset", mixers[m]);
                ttt_record_num(&stamp, "seed", seed);
                ttt_results_set_point(res, &stamp, l * 4 + m, seed);
                ttt_record_clear(&r);
                ttt_record_num(&r, "loss", 1 - acc[l][m][seed]);
                ttt_record_num(&r, "acc", acc[l][m][seed]);
                ttt_results_add(res, &r, 1);
            }
    ttt_results_set_point(res, NULL, -1, 0);
    ttt_results_set_main(res, "acc", "");
    return res;
}

/* The chosen rate of mixer `m` among the rows' best rows ("none" when none qualified). */
static void chosen(const ttt_rows *rows, const char *m, char *out, size_t len) {
    snprintf(out, len, "(missing)");
    for (int i = 0; i < rows->n_best; i++) {
        const ttt_field *p = ttt_record_get(rows->best_rows[i], "layer.preset");
        if (!p || strcmp(p->str, m) != 0) continue;
        ttt_field_short(ttt_record_get(rows->best_rows[i], "train.lr"), out, len);
    }
}

START_TEST(test_best_over_axis_picks_the_best_mean) {
    ttt_results *res = best_results();
    ttt_results_set_best(res, "train.lr", "", 1);
    ttt_rows rows;
    ttt_error err;
    ck_assert_int_eq(ttt_results_rows(res, &rows, &err), TTT_OK);
    ck_assert(rows.aggregated);
    ck_assert_int_eq(rows.n, 12);
    ck_assert_int_eq(rows.n_best, 4); /* one per mixer, in the sweep's order */
    const char *want[4][2] = {{"A", "2"}, {"B", "1"}, {"C", "2"}, {"D", "none"}};
    for (int m = 0; m < 4; m++) {
        char got[64];
        chosen(&rows, want[m][0], got, sizeof got);
        ck_assert_msg(!strcmp(got, want[m][1]), "mixer %s: chose lr %s, expected %s",
                      want[m][0], got, want[m][1]);
        const ttt_field *p = ttt_record_get(rows.best_rows[m], "layer.preset");
        ck_assert_str_eq(p->str, want[m][0]);
    }
    /* the flags mark the same rows: A at lr 2 is row 4 (rows follow the sweep order) */
    int flagged = 0;
    for (int i = 0; i < rows.n; i++) flagged += rows.best[i];
    ck_assert_int_eq(flagged, 3);
    ck_assert(rows.best[4] && rows.best[1] && rows.best[6]);
    /* D's row of its own: the metric NaN, so no reader takes it for a measurement */
    ck_assert(isnan(ttt_record_get(rows.best_rows[3], "acc")->num));
    ttt_rows_free(&rows);

    /* smallest instead of largest, by another column: A's lowest mean loss is lr 2 as well,
     * its lowest mean accuracy lr 3 */
    ttt_results_set_best(res, "train.lr", "acc", 0);
    ck_assert_int_eq(ttt_results_rows(res, &rows, &err), TTT_OK);
    char got[64];
    chosen(&rows, "A", got, sizeof got);
    ck_assert_str_eq(got, "3");
    ttt_rows_free(&rows);
    ttt_results_set_best(res, "train.lr", "loss", 0);
    ck_assert_int_eq(ttt_results_rows(res, &rows, &err), TTT_OK);
    chosen(&rows, "A", got, sizeof got);
    ck_assert_str_eq(got, "2");
    ttt_rows_free(&rows);

    /* off: no flags, no best rows */
    ttt_results_set_best(res, "", "", 1);
    ck_assert_int_eq(ttt_results_rows(res, &rows, &err), TTT_OK);
    ck_assert_ptr_null(rows.best);
    ck_assert_int_eq(rows.n_best, 0);
    ttt_rows_free(&rows);
    ttt_results_free(res);
}
END_TEST

/* What a reader sees: summary.csv's `best` column, summary_best.csv, the page's pivot (its
 * columns are the rates, so a last column holds each row's best) and the printed table. */
START_TEST(test_best_over_axis_in_the_files) {
    char *dir = tu_mkdtemp();
    ttt_results *res = best_results();
    ttt_results_set_best(res, "train.lr", "", 1);
    ttt_error err;
    ck_assert_int_eq(ttt_results_write(res, dir, &err), TTT_OK);
    char *csv = read_in(dir, "summary.csv");
    /* header ends with best; rows in sweep order: lr 1 A..D, lr 2 A..D, lr 3 A..D */
    const char *nl = strchr(csv, '\n');
    ck_assert_msg(nl && !strncmp(nl - 5, ",best", 5), "summary.csv header: %s", csv);
    const char *flags = "010010100000"; /* B at lr 1, A and C at lr 2 */
    const char *line = nl + 1;
    for (int i = 0; i < 12; i++) {
        const char *end = strchr(line, '\n');
        ck_assert_ptr_nonnull(end);
        ck_assert_msg(end[-1] == flags[i] && end[-2] == ',', "row %d: %.*s", i,
                      (int)(end - line), line);
        line = end + 1;
    }
    free(csv);
    char *best = read_in(dir, "summary_best.csv");
    /* loss and acc of A at lr 2: mean, std, min, max; 3 seeds; no `best` column */
    ck_assert_msg(strstr(best, "\n2,A,0.5,0,0.5,0.5,0.5,0,0.5,0.5,3\n"), "A at lr 2:\n%s", best);
    ck_assert_msg(strstr(best, "\nnone,D,"), "D without a rate:\n%s", best);
    ck_assert_int_eq(count_char(best, '\n'), 5);
    free(best);
    char *html = read_in(dir, "index.html");
    ck_assert_msg(strstr(html, "<th>best (train.lr)</th>"), "no best column in the pivot");
    ck_assert_msg(strstr(html, "<td>0.5 ± 0 (2)</td>"), "A's best cell");
    ck_assert_msg(strstr(html, "<td>none</td>"), "D's best cell");
    free(html);
    FILE *f = tmpfile();
    const char *cols[] = {"acc", NULL};
    ttt_results_print_table(res, f, cols);
    char *text = stream_text(f);
    fclose(f);
    const char *sect = strstr(text, "best train.lr: the largest acc, mean over seeds");
    ck_assert_msg(sect, "no best table:\n%s", text);
    ck_assert_msg(strstr(sect, "\n2         A             3      0.5 ± 0"), "%s", sect);
    ck_assert_msg(strstr(sect, "\nnone      D             -      nan"), "%s", sect);
    free(text);
    ttt_results_free(res);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static Suite *results_suite(void) {
    Suite *s = suite_create("results");
    TCase *tc = tcase_create("records");
    tcase_add_test(tc, test_record_set_replace_get);
    tcase_add_test(tc, test_json_escaping);
    tcase_add_test(tc, test_json_numbers_round_trip);
    tcase_add_test(tc, test_json_parse_reads_back_what_was_written);
    tcase_add_test(tc, test_json_nonfinite_is_null);
    tcase_add_test(tc, test_record_truncates_long_strings);
    suite_add_tcase(s, tc);

    tc = tcase_create("run_folder");
    tcase_add_test(tc, test_results_store_copies);
    tcase_add_test(tc, test_csv_union_and_quoting);
    tcase_add_test(tc, test_metrics_jsonl_lines);
    tcase_add_test(tc, test_write_all_files_no_temps);
    tcase_add_test(tc, test_write_missing_dir_fails);
    tcase_add_test(tc, test_best_over_axis_picks_the_best_mean);
    tcase_add_test(tc, test_best_over_axis_in_the_files);
    suite_add_tcase(s, tc);

    tc = tcase_create("svg");
    tcase_add_test(tc, test_svg_series_legend_escaping);
    tcase_add_test(tc, test_svg_filter);
    tcase_add_test(tc, test_svg_empty_and_single_series);
    tcase_add_test(tc, test_svg_nice_ticks);
    suite_add_tcase(s, tc);

    tc = tcase_create("files");
    tcase_add_test(tc, test_afile_commit_and_replace);
    tcase_add_test(tc, test_afile_abort_removes_temp);
    tcase_add_test(tc, test_afile_missing_dir_and_notdir);
    tcase_add_test(tc, test_afile_disk_full_keeps_old_file);
    tcase_add_test(tc, test_mkdirs);
    suite_add_tcase(s, tc);

    tc = tcase_create("progress");
    tcase_add_checked_fixture(tc, clock_setup, clock_teardown);
    tcase_add_test(tc, test_progress_quiet_first_second);
    tcase_add_test(tc, test_progress_plain_lines);
    tcase_add_test(tc, test_progress_final_line_after_long_run);
    tcase_add_test(tc, test_progress_disabled);
    tcase_add_test(tc, test_progress_tty_redraw);
    tcase_add_test(tc, test_now_monotonic);
    tcase_add_test(tc, test_twelve_series_distinct_styles);
    tcase_add_test(tc, test_log_y);
    tcase_add_test(tc, test_replicate_band);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(results_suite()); }
