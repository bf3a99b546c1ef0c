/* One sweep point's records in a file (point_records.h). */
#include "point_records.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "infile.h"
#include "results_internal.h"

/* The part format: version 2 carries a checksum per record line (point_records.h). */
#define PART_VERSION 2
/* FNV-1a 64 (docs/hardening.md "Record checksums"): the checkpoints' hash (checkpoint.h), here
 * over one line. It catches any one changed byte of a line (each byte step is a bijection of the
 * state) and nearly every larger change; it is a check against accidents, not against someone
 * forging a record. */
#define FNV_INIT 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL
static uint64_t fnv1a64(const char *s, size_t n) {
    uint64_t h = FNV_INIT;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* 16 lowercase hex digits at p into *h: 1, else 0. */
static int read_hex16(const char *p, uint64_t *h) {
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        const char c = p[i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return 0;
        v = v << 4 | (uint64_t)d;
    }
    *h = v;
    return 1;
}

ttt_status ttt_part_save(const ttt_results *res, int from, const char *path, const char *hash,
                         ttt_error *err) {
    ttt_afile af;
    TTT_TRY(ttt_afile_open(&af, path, err));
    fprintf(af.f, "ttt-part %d %s\n", PART_VERSION, hash);
    ttt_strbuf line = {0};
    for (int i = from; i < res->n; i++) {
        const ttt_record *r = &res->recs[i];
        /* the line first, in memory, so that its checksum covers the bytes written */
        ttt_strbuf_reset(&line);
        ttt_strbuf_putc(&line, res->summary[i] ? 'S' : 'R');
        for (int k = 0; k < r->n; k++) {
            const ttt_field *f = &r->f[k];
            if (f->is_num) {
                ttt_strbuf_printf(&line, "\tn%s=%a", f->key, f->num);
                continue;
            }
            ttt_strbuf_printf(&line, "\ts%s=", f->key);
            for (const char *p = f->str; *p; p++)
                ttt_strbuf_putc(&line, *p == '\t' || *p == '\n' ? ' ' : *p);
        }
        if (line.failed) {
            ttt_strbuf_free(&line);
            ttt_afile_abort(&af);
            return ttt_error_set(err, TTT_ERR_NOMEM, "cannot write '%s': out of memory", path);
        }
        fwrite(line.data, 1, line.len, af.f);
        fprintf(af.f, "\t#%016" PRIx64 "\n", fnv1a64(line.data, line.len));
    }
    ttt_strbuf_free(&line);
    return ttt_afile_commit(&af, err);
}

/* One record line (without its newline, which the caller replaced by a terminator). */
static int parse_line(char *line, ttt_record *r, int *summary) {
    if (line[0] != 'S' && line[0] != 'R') return 0;
    *summary = line[0] == 'S';
    ttt_record_clear(r);
    char *p = line + 1;
    while (*p == '\t') {
        p++;
        char *end = strchr(p, '\t');
        if (!end) end = p + strlen(p);
        char saved = *end;
        *end = '\0';
        char *eq = strchr(p, '=');
        if (!eq || eq == p + 1 || (p[0] != 'n' && p[0] != 's')) return 0;
        *eq = '\0';
        if (p[0] == 'n') {
            char *e;
            double v = strtod(eq + 1, &e);
            if (e == eq + 1 || *e) return 0;
            ttt_record_num(r, p + 1, v);
        } else {
            ttt_record_str(r, p + 1, eq + 1);
        }
        *end = saved;
        p = end;
    }
    return *p == '\0';
}

ttt_status ttt_part_load(ttt_results *res, const char *path, const char *hash, int *found,
                         ttt_error *err) {
    *found = 0;
    const char *kind = ""; /* never a FIFO's endless wait (infile.h) */
    FILE *f = ttt_open_regular(path, &kind);
    if (!f && kind[0])
        return ttt_error_set(err, TTT_ERR_IO, "cannot read '%s': not a regular file, it is %s",
                             path, kind);
    if (!f) {
        if (errno == ENOENT) return TTT_OK;
        return ttt_error_set(err, TTT_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    ttt_status s = TTT_OK;
    long lineno = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
        if (lineno == 1) {
            char h[64];
            int version = 0;
            if (sscanf(line, "ttt-part %d %63s", &version, h) != 2) {
                s = ttt_error_set(err, TTT_ERR_FORMAT,
                                  "%s:1: not a sweep point's records (expected 'ttt-part %d "
                                  "<hash>'); delete it to run the point again", path,
                                  PART_VERSION);
                break;
            }
            if (version != PART_VERSION) {
                s = ttt_error_set(err, TTT_ERR_FORMAT,
                                  "%s:1: records of format %d (expected %d, whose lines carry "
                                  "checksums): written by another version of ttt; delete it to "
                                  "run the point again", path, version, PART_VERSION);
                break;
            }
            if (strcmp(h, hash) != 0) break; /* another configuration: run the point again */
            *found = 1;
            continue;
        }
        /* the checksum: "\t#" and 16 hex digits end the line (text fields hold no tab) */
        char *mark = len >= 18 ? line + len - 18 : NULL;
        uint64_t want = 0;
        if (!mark || mark[0] != '\t' || mark[1] != '#' || !read_hex16(mark + 2, &want)) {
            s = ttt_error_set(err, TTT_ERR_FORMAT,
                              "%s:%ld: a record line without its checksum ('\\t#' and 16 hex "
                              "digits at its end): the file was cut or changed; delete it to "
                              "run the point again", path, lineno);
            break;
        }
        const uint64_t got = fnv1a64(line, (size_t)(mark - line));
        if (got != want) {
            s = ttt_error_set(err, TTT_ERR_FORMAT,
                              "%s:%ld: checksum mismatch (the line says %016" PRIx64 ", its "
                              "bytes give %016" PRIx64 "): the record was changed after it was "
                              "written; delete the file to run the point again",
                              path, lineno, want, got);
            break;
        }
        *mark = '\0';
        ttt_record r;
        int summary = 0;
        if (!parse_line(line, &r, &summary)) {
            s = ttt_error_set(err, TTT_ERR_FORMAT,
                              "%s:%ld: malformed record line; delete the file to run the point "
                              "again", path, lineno);
            break;
        }
        ttt_results_add(res, &r, summary);
    }
    free(line);
    fclose(f);
    if (s != TTT_OK) *found = 0;
    return s;
}

/* ---- the record journal ---- */

/* The member that ends a journal line: ,"checksum":"<16 hex>"} (the comma only after another
 * member). */
#define JOURNAL_KEY "\"checksum\":\""
#define JOURNAL_TAIL (sizeof JOURNAL_KEY - 1 + 16 + 2) /* key, digits, closing quote and brace */

int ttt_journal_write(const ttt_record *r, FILE *f) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return -1;
    ttt_record_write_json(r, m);
    if (fclose(m) != 0 || !buf || len < 2) {
        free(buf);
        if (!errno) errno = ENOMEM;
        return -1;
    }
    const uint64_t h = fnv1a64(buf, len);
    /* the object without its closing brace, then the checksum member */
    fwrite(buf, 1, len - 1, f);
    fprintf(f, "%s" JOURNAL_KEY "%016" PRIx64 "\"}\n", len > 2 ? "," : "", h);
    free(buf);
    return ferror(f) ? -1 : 0;
}

ttt_status ttt_journal_parse(ttt_record *r, const char *line, ttt_error *err) {
    size_t len = strlen(line);
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
    /* at least {"checksum":"…"} */
    const char *tail = len >= JOURNAL_TAIL + 1 ? line + len - JOURNAL_TAIL : NULL;
    uint64_t want = 0;
    if (!tail || strncmp(tail, JOURNAL_KEY, sizeof JOURNAL_KEY - 1) != 0 ||
        !read_hex16(tail + sizeof JOURNAL_KEY - 1, &want) || strncmp(tail + JOURNAL_TAIL - 2,
                                                                     "\"}", 2) != 0 ||
        (tail[-1] != ',' && tail[-1] != '{'))
        return ttt_error_set(err, TTT_ERR_FORMAT,
                             "a record without its checksum (expected the line to end in "
                             "\"checksum\":\"<16 hex digits>\"}): the journal was cut or "
                             "changed, or written by an earlier version of ttt");
    /* the object as it was written: the bytes before the member (less its comma), a brace */
    const size_t body = (size_t)(tail - line) - (tail[-1] == ',');
    char *obj = malloc(body + 2);
    if (!obj) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for a record");
    memcpy(obj, line, body);
    obj[body] = '}';
    obj[body + 1] = '\0';
    const uint64_t got = fnv1a64(obj, body + 1);
    ttt_status s = TTT_OK;
    if (got != want)
        s = ttt_error_set(err, TTT_ERR_FORMAT,
                          "checksum mismatch (the line says %016" PRIx64 ", its bytes give "
                          "%016" PRIx64 "): the record was changed after it was written",
                          want, got);
    else if (ttt_record_parse_json(r, obj) != TTT_OK)
        s = ttt_error_set(err, TTT_ERR_FORMAT, "not a record written by ttt");
    free(obj);
    return s;
}
