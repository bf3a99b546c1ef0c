/* One sweep point's records in a file (point_records.h). */
#include "point_records.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "results_internal.h"

ttt_status ttt_part_save(const ttt_results *res, int from, const char *path, const char *hash,
                         ttt_error *err) {
    ttt_afile af;
    TTT_TRY(ttt_afile_open(&af, path, err));
    fprintf(af.f, "ttt-part 1 %s\n", hash);
    for (int i = from; i < res->n; i++) {
        const ttt_record *r = &res->recs[i];
        fputc(res->summary[i] ? 'S' : 'R', af.f);
        for (int k = 0; k < r->n; k++) {
            const ttt_field *f = &r->f[k];
            if (f->is_num) {
                fprintf(af.f, "\tn%s=%a", f->key, f->num);
                continue;
            }
            fprintf(af.f, "\ts%s=", f->key);
            for (const char *p = f->str; *p; p++) fputc(*p == '\t' || *p == '\n' ? ' ' : *p, af.f);
        }
        fputc('\n', af.f);
    }
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
    FILE *f = fopen(path, "r");
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
            if (sscanf(line, "ttt-part 1 %63s", h) != 1) {
                s = ttt_error_set(err, TTT_ERR_FORMAT,
                                  "%s:1: not a sweep point's records (expected 'ttt-part 1 "
                                  "<hash>'); delete it to run the point again", path);
                break;
            }
            if (strcmp(h, hash) != 0) break; /* another configuration: run the point again */
            *found = 1;
            continue;
        }
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
