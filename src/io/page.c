/* Results of a run, part three (results.h): index.html, one page with the run's charts (the
 * SVG text of charts.c, inlined) and its summary table (the columns of summary.csv). The page
 * needs nothing beside it: styles are inline and it links only to files of the same folder. */
#include "results.h"

#include <stdlib.h>

#include "results_internal.h"
#include "strbuf.h"

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

ttt_status ttt_page_write(const ttt_results *res, const ttt_keylist *kl, char *const *svgs,
                          const char *dir, ttt_error *err) {
    ttt_strbuf b;
    ttt_strbuf_init(&b);
    ttt_strbuf_puts(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                        "<meta charset=\"utf-8\">\n<title>");
    ttt_put_xml(&b, res->title[0] ? res->title : "ttt run");
    ttt_strbuf_printf(&b, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>", html_style);
    ttt_put_xml(&b, res->title[0] ? res->title : "ttt run");
    ttt_strbuf_puts(&b, "</h1>\n<p>Files: <a href=\"metrics.jsonl\">metrics.jsonl</a>, "
                        "<a href=\"summary.csv\">summary.csv</a></p>\n");
    for (int i = 0; i < res->nc; i++) {
        char stem[80];
        ttt_chart_stem(res, i, stem, sizeof stem);
        ttt_strbuf_puts(&b, "<figure>\n");
        ttt_strbuf_puts(&b, svgs[i]);
        ttt_strbuf_puts(&b, "\n<figcaption><a href=\"");
        ttt_put_xml(&b, stem);
        ttt_strbuf_puts(&b, ".svg\">");
        ttt_put_xml(&b, stem);
        ttt_strbuf_puts(&b, ".svg</a></figcaption>\n</figure>\n");
    }
    ttt_strbuf_puts(&b, "<h2>Summary</h2>\n");
    if (!kl->n) {
        ttt_strbuf_puts(&b, "<p>No summary records.</p>\n");
    } else {
        ttt_strbuf_puts(&b, "<div class=\"scroll\"><table>\n<thead><tr>");
        for (int q = 0; q < kl->n; q++) {
            ttt_strbuf_puts(&b, "<th>");
            ttt_put_xml(&b, kl->k[q]);
            ttt_strbuf_puts(&b, "</th>");
        }
        ttt_strbuf_puts(&b, "</tr></thead>\n<tbody>\n");
        for (int i = 0; i < res->n; i++) {
            if (!res->summary[i]) continue;
            ttt_strbuf_puts(&b, "<tr>");
            for (int q = 0; q < kl->n; q++) {
                const ttt_field *fl = ttt_record_get(&res->recs[i], kl->k[q]);
                char cell[192] = "";
                if (fl) ttt_field_short(fl, cell, sizeof cell);
                ttt_strbuf_puts(&b, fl && !fl->is_num ? "<td class=\"t\">" : "<td>");
                ttt_put_xml(&b, cell);
                ttt_strbuf_puts(&b, "</td>");
            }
            ttt_strbuf_puts(&b, "</tr>\n");
        }
        ttt_strbuf_puts(&b, "</tbody>\n</table></div>\n");
    }
    ttt_strbuf_puts(&b, "</body>\n</html>\n");
    char *text = ttt_strbuf_take(&b);
    if (!text) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing index.html");
    char *path = ttt_results_path(dir, "index.html");
    ttt_status s = path ? ttt_write_file_atomic(path, text, err)
                        : ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing index.html");
    free(path);
    free(text);
    return s;
}
