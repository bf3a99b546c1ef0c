/* Measurement records (results.h): fields, their number formats and text forms.
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
/* records                                                                                    */

/* Copy at most cap-1 bytes without cutting a UTF-8 sequence in half. */
void ttt_results_copy_utf8(char *dst, size_t cap, const char *src) {
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
    ttt_results_copy_utf8(k, sizeof k, key);
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
    ttt_results_copy_utf8(f->str, sizeof f->str, s ? s : "");
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

/* The text of a JSON string at *p (after its opening quote) into out (at most cap−1 bytes);
 * *p ends after the closing quote. 0 on malformed text. */
static int json_parse_string(const char **p, char *out, size_t cap) {
    const char *s = *p;
    size_t n = 0;
    while (*s && *s != '"') {
        unsigned c = (unsigned char)*s++;
        if (c == '\\') {
            char e = *s++;
            switch (e) {
            case '"': case '\\': case '/': c = (unsigned char)e; break;
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                char hex[5] = {0};
                for (int i = 0; i < 4; i++) {
                    if (!s[i]) return 0;
                    hex[i] = s[i];
                }
                char *end;
                c = (unsigned)strtoul(hex, &end, 16);
                if (*end || c >= 0x80) return 0; /* only what ttt_record_write_json writes */
                s += 4;
                break;
            }
            default: return 0;
            }
        }
        if (n + 1 < cap) out[n++] = (char)c;
    }
    if (*s != '"') return 0;
    out[n] = '\0';
    *p = s + 1;
    return 1;
}

ttt_status ttt_record_parse_json(ttt_record *r, const char *line) {
    ttt_record_clear(r);
    const char *p = line;
    if (*p++ != '{') return TTT_ERR_FORMAT;
    if (*p == '}') return TTT_OK;
    for (;;) {
        char key[sizeof r->f[0].key], str[sizeof r->f[0].str];
        if (*p++ != '"' || !json_parse_string(&p, key, sizeof key) || *p++ != ':')
            return TTT_ERR_FORMAT;
        if (*p == '"') {
            p++;
            if (!json_parse_string(&p, str, sizeof str)) return TTT_ERR_FORMAT;
            ttt_record_str(r, key, str);
        } else if (strncmp(p, "null", 4) == 0) {
            ttt_record_num(r, key, NAN);
            p += 4;
        } else {
            char *end;
            double v = strtod(p, &end);
            if (end == p) return TTT_ERR_FORMAT;
            ttt_record_num(r, key, v);
            p = end;
        }
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p++ != '}') return TTT_ERR_FORMAT;
        while (*p == '\n' || *p == '\r') p++;
        return *p ? TTT_ERR_FORMAT : TTT_OK;
    }
}
