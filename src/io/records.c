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
/* atomic files                                                                               */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ttt_fault_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* The stream under an atomic file: its descriptor and the first write error, kept so that the
 * error reported at commit is the real cause (ENOSPC: "No space left on device"), not the EIO
 * that a stream's sticky error flag would leave (docs/hardening.md "I/O faults"). */
typedef struct afile_io {
    int fd;
    int first_errno;
} afile_io;

/* Every byte or an error: a short write is retried with the rest. */
static ssize_t afile_io_write(void *cookie, const char *buf, size_t size) {
    afile_io *io = cookie;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(io->fd, buf + done, size - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (!io->first_errno) io->first_errno = w < 0 ? errno : EIO;
            return done > 0 ? (ssize_t)done : -1;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

static int afile_io_close(void *cookie) {
    afile_io *io = cookie;
    int rc = 0;
    if (io->fd >= 0 && close(io->fd) != 0) {
        rc = -1;
        if (!io->first_errno) io->first_errno = errno;
    }
    io->fd = -1;
    return rc;
}

static void afile_release(ttt_afile *af) {
    free(af->path);
    free(af->tmp);
    free(af->io);
    af->path = NULL;
    af->tmp = NULL;
    af->io = NULL;
    af->f = NULL;
}

int ttt_afile_fd(const ttt_afile *af) { return af->io ? ((const afile_io *)af->io)->fd : -1; }

ttt_status ttt_fsync_dir_of(const char *path) {
    /* No allocation: this runs after a rename, when the file is in place and running out of
     * memory must not turn a written file into an error. */
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX] = ".";
    if (slash) {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= sizeof dir) {
            errno = ENAMETOOLONG;
            return TTT_ERR_IO;
        }
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return TTT_ERR_IO;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    /* some file systems cannot sync a folder (EINVAL): nothing more can be done there */
    if (rc != 0 && e != EINVAL && e != EROFS) {
        errno = e;
        return TTT_ERR_IO;
    }
    return TTT_OK;
}

ttt_status ttt_afile_open(ttt_afile *af, const char *path, ttt_error *err) {
    af->f = NULL;
    af->path = NULL;
    af->tmp = NULL;
    af->io = NULL;
    if (!path || !*path) return ttt_error_set(err, TTT_ERR_IO, "cannot write a file with an empty name");
    /* The temporary file lives next to the target so rename() never crosses file systems;
     * the leading dot keeps it out of casual listings, the pid keeps processes apart. */
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = slash ? slash + 1 : path;
    if (!*base) return ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': it names a folder", path);
    size_t tlen = dirlen + strlen(base) + 48;
    af->path = dup_str(path);
    af->tmp = ttt_fault_malloc(tlen);
    afile_io *io = af->io = ttt_fault_malloc(sizeof *io);
    if (!af->path || !af->tmp || !io) {
        afile_release(af);
        return ttt_error_set(err, TTT_ERR_NOMEM, "cannot write '%s': out of memory", path);
    }
    snprintf(af->tmp, tlen, "%.*s.%s" TTT_AFILE_TMP_MARK "%ld", (int)dirlen, path, base,
             (long)getpid());
    io->first_errno = 0;
    io->fd = open(af->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (io->fd < 0) {
        int e = errno;
        afile_release(af);
        return ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': %s", path, strerror(e));
    }
    cookie_io_functions_t fns = {.read = NULL, .write = afile_io_write, .seek = NULL,
                                 .close = afile_io_close};
    af->f = fopencookie(io, "w", fns);
    if (!af->f) {
        close(io->fd);
        unlink(af->tmp);
        afile_release(af);
        return ttt_error_set(err, TTT_ERR_NOMEM, "cannot write '%s': out of memory", path);
    }
    return TTT_OK;
}

ttt_status ttt_afile_commit(ttt_afile *af, ttt_error *err) {
    TTT_ASSERT(af && af->f && af->path && af->tmp && af->io);
    afile_io *io = af->io;
    int e = 0;
    /* The first failed write names the cause; fflush writes what is still buffered. */
    if (fflush(af->f) != 0 || ferror(af->f)) e = io->first_errno ? io->first_errno : EIO;
    /* fsync before rename: otherwise a crash could leave the new name on empty contents. */
    if (!e && fsync(io->fd) != 0) e = errno;
    if (fclose(af->f) != 0 && !e) e = io->first_errno ? io->first_errno : EIO;
    af->f = NULL;
    if (!e && rename(af->tmp, af->path) != 0) e = errno;
    if (e) {
        unlink(af->tmp);
        ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': %s", af->path, strerror(e));
        afile_release(af);
        return TTT_ERR_IO;
    }
    /* the rename itself reaches the disk only with its folder */
    if (ttt_fsync_dir_of(af->path) != TTT_OK) {
        e = errno;
        ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': syncing its folder: %s", af->path,
                      strerror(e));
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
int ttt_remove_stale_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    const size_t ml = strlen(TTT_AFILE_TMP_MARK);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (n[0] != '.') continue;
        /* ".<name>.tmp.<digits>": the last mark, followed by a pid and nothing else */
        const char *m = NULL;
        for (const char *p = strstr(n + 1, TTT_AFILE_TMP_MARK); p;
             p = strstr(p + 1, TTT_AFILE_TMP_MARK))
            m = p;
        if (!m || m == n + 1 || !m[ml]) continue;
        const char *q = m + ml;
        while (*q >= '0' && *q <= '9') q++;
        if (*q) continue;
        char *path = ttt_results_path(dir, n);
        if (path && unlink(path) == 0) removed++;
        free(path);
    }
    closedir(d);
    return removed;
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

/* ------------------------------------------------------------------------------------------ */
/* the collection                                                                             */

ttt_results *ttt_results_new(const char *title) {
    ttt_results *res = ttt_fault_calloc(1, sizeof *res);
    if (!res) return NULL;
    res->cur_group = -1;
    res->title = dup_str(title ? title : "");
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
        res->axes[i] = dup_str(keys[i]);
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
    copy_utf8(res->best_axis, sizeof res->best_axis, axis ? axis : "");
    copy_utf8(res->best_metric, sizeof res->best_metric, metric ? metric : "");
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

/* ------------------------------------------------------------------------------------------ */
/* writing the run folder                                                                     */

char *ttt_results_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = ttt_fault_malloc(n);
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

static ttt_status write_metrics(ttt_results *res, const char *dir, ttt_error *err) {
    if (res->stream.f) return ttt_afile_commit(&res->stream, err);
    ttt_afile af;
    TTT_TRY(ttt_results_open_in(&af, dir, "metrics.jsonl", err));
    for (int i = 0; i < res->n; i++) {
        ttt_record_write_json(&res->recs[i], af.f);
        fputc('\n', af.f);
    }
    return ttt_afile_commit(&af, err);
}

/* The sweep's columns first, in the sweep's order (a leaf of a mapping axis that the first
 * point lacks is still a swept column), then every other key in first-seen order. */
static ttt_status summary_keys(const ttt_results *res, const ttt_rows *rows, ttt_keylist *kl,
                               ttt_error *err) {
    int cap = 0;
    kl->k = NULL;
    kl->n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int a = 0; a < (pass == 0 ? res->n_axes : 1); a++) {
            for (int i = 0; i < rows->n; i++) {
                const ttt_record *r = rows->rows[i];
                for (int j = 0; j < r->n; j++) {
                    const char *key = r->f[j].key;
                    if (pass == 0 && strcmp(key, res->axes[a]) != 0) continue;
                    int found = 0;
                    for (int q = 0; q < kl->n && !found; q++) found = strcmp(kl->k[q], key) == 0;
                    if (found) continue;
                    if (kl->n == cap) {
                        cap = cap ? cap * 2 : 32;
                        const char **p = ttt_fault_realloc(kl->k, (size_t)cap * sizeof *p);
                        if (!p) {
                            free(kl->k);
                            kl->k = NULL;
                            return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing summary");
                        }
                        kl->k = p;
                    }
                    kl->k[kl->n++] = key;
                }
            }
        }
    }
    return TTT_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* replicates: one row per configuration (docs/results.md "Seeds")                            */

void ttt_rows_free(ttt_rows *r) {
    free(r->rows);
    free(r->agg);
    free(r->best);
    free(r->best_rows);
    free(r->none);
    r->rows = NULL;
    r->agg = NULL;
    r->best = NULL;
    r->best_rows = NULL;
    r->none = NULL;
    r->n = r->n_best = 0;
}

/* A summary record's place: its configuration (group), replicate (member), ordinal among that
 * replicate's summary records (k) and index in res. Sorted, not searched: a run may have tens
 * of thousands of summary records. */
typedef struct slot {
    int group, member, k, i;
} slot;

static int by_replicate(const void *a, const void *b) {
    const slot *p = a, *q = b;
    if (p->group != q->group) return p->group < q->group ? -1 : 1;
    if (p->member != q->member) return p->member < q->member ? -1 : 1;
    return (p->i > q->i) - (p->i < q->i);
}

/* cells: (group, k), records outside every group alone; members in record order */
static int by_cell(const void *a, const void *b) {
    const slot *p = a, *q = b;
    const int pg = p->group < 0, qg = q->group < 0;
    if (pg != qg) return pg < qg ? -1 : 1;
    if (pg) return (p->i > q->i) - (p->i < q->i);
    if (p->group != q->group) return p->group < q->group ? -1 : 1;
    if (p->k != q->k) return p->k < q->k ? -1 : 1;
    return (p->i > q->i) - (p->i < q->i);
}

static int same_cell(const slot *p, const slot *q) {
    return p->group >= 0 && p->group == q->group && p->k == q->k;
}

/* The key list `keys` (n of them) holds key? */
static int key_in(char (*keys)[48], int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], key) == 0) return 1;
    return 0;
}

typedef struct cell_span {
    int from, to, first; /* slots [from, to) after the sort by cell; first: its earliest record */
} cell_span;

static int by_first(const void *a, const void *b) {
    const cell_span *p = a, *q = b;
    return (p->first > q->first) - (p->first < q->first);
}

/* One aggregated record from the records of slots [from, to). */
static void aggregate(const ttt_results *res, const slot *sl, int from, int to,
                      char (*vary)[48], int nvary, ttt_record *o) {
    ttt_record_clear(o);
    for (int a = from; a < to; a++) {
        const ttt_record *r = &res->recs[sl[a].i];
        for (int f = 0; f < r->n; f++) {
            const ttt_field *fl = &r->f[f];
            if (!strcmp(fl->key, "seed") || !strcmp(fl->key, "point")) continue;
            if (ttt_record_get(o, fl->key)) continue;
            const int agg = fl->is_num && key_in(vary, nvary, fl->key);
            if (o->n + (agg ? 4 : 1) > TTT_RECORD_MAX_FIELDS - 1) continue; /* room for seeds */
            if (!fl->is_num) {
                ttt_record_str(o, fl->key, fl->str);
                continue;
            }
            if (!agg) {
                ttt_record_num(o, fl->key, fl->num);
                continue;
            }
            /* over the finite values of the cell's members */
            double sum = 0, lo = INFINITY, hi = -INFINITY;
            int n = 0;
            for (int b = from; b < to; b++) {
                const ttt_field *v = ttt_record_get(&res->recs[sl[b].i], fl->key);
                if (!v || !v->is_num || !isfinite(v->num)) continue;
                sum += v->num;
                lo = fmin(lo, v->num);
                hi = fmax(hi, v->num);
                n++;
            }
            const double mean = n ? sum / n : NAN;
            double ss = 0;
            for (int b = from; b < to; b++) {
                const ttt_field *v = ttt_record_get(&res->recs[sl[b].i], fl->key);
                if (v && v->is_num && isfinite(v->num)) ss += (v->num - mean) * (v->num - mean);
            }
            char key[64];
            ttt_record_num(o, fl->key, mean);
            snprintf(key, sizeof key, "%s_std", fl->key);
            ttt_record_num(o, key, n > 1 ? sqrt(ss / (n - 1)) : NAN);
            snprintf(key, sizeof key, "%s_min", fl->key);
            ttt_record_num(o, key, n ? lo : NAN);
            snprintf(key, sizeof key, "%s_max", fl->key);
            ttt_record_num(o, key, n ? hi : NAN);
        }
    }
    ttt_record_num(o, "seeds", to - from);
}

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
        if (!(keys[i] = dup_str(k ? k : "")))
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
                for (int q = 0; q < res->n_axes && !axis; q++) axis = !strcmp(fl->key, res->axes[q]);
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
static void best_ok(const ttt_results *res, const ttt_rows *out, const slot *sl,
                    const cell_span *cs, unsigned char *ok) {
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

static ttt_status rows_best(const ttt_results *res, ttt_rows *out, const slot *sl,
                            const cell_span *cs, ttt_error *err) {
    if (!res->best_axis[0]) return TTT_OK;
    unsigned char *ok = malloc((size_t)(out->n ? out->n : 1));
    if (!ok) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory choosing the best rows");
    best_ok(res, out, sl, cs, ok);
    ttt_status s = choose_best(res, out, ok, err);
    free(ok);
    return s;
}

ttt_status ttt_results_rows(const ttt_results *res, ttt_rows *out, ttt_error *err) {
    memset(out, 0, sizeof *out);
    int ns = 0;
    for (int i = 0; i < res->n; i++) ns += res->summary[i];
    const size_t cap = (size_t)(ns ? ns : 1);
    out->rows = malloc(cap * sizeof *out->rows);
    slot *sl = malloc(cap * sizeof *sl);
    cell_span *cs = malloc(cap * sizeof *cs);
    char(*vary)[48] = malloc(TTT_RECORD_MAX_FIELDS * sizeof *vary);
    if (!out->rows || !sl || !cs || !vary) {
        free(sl), free(cs), free(vary);
        ttt_rows_free(out);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing summary");
    }
    int nr = 0;
    for (int i = 0; i < res->n; i++)
        if (res->summary[i]) sl[nr++] = (slot){res->group[i], res->member[i], 0, i};
    /* ordinals within each replicate, and whether some configuration has two replicates */
    qsort(sl, (size_t)nr, sizeof *sl, by_replicate);
    int replicated = 0;
    for (int a = 0; a < nr; a++) {
        const int same = a > 0 && sl[a - 1].group == sl[a].group;
        sl[a].k = same && sl[a - 1].member == sl[a].member ? sl[a - 1].k + 1 : 0;
        replicated |= same && sl[a].group >= 0 && sl[a - 1].member != sl[a].member;
    }
    if (!replicated) {
        for (int i = 0; i < res->n; i++)
            if (res->summary[i]) out->rows[out->n++] = &res->recs[i];
        free(sl), free(cs), free(vary);
        ttt_status s = rows_best(res, out, NULL, NULL, err);
        if (s != TTT_OK) ttt_rows_free(out);
        return s;
    }
    qsort(sl, (size_t)nr, sizeof *sl, by_cell);
    int ncell = 0;
    for (int a = 0; a < nr;) {
        int b = a + 1;
        while (b < nr && same_cell(&sl[a], &sl[b])) b++;
        cs[ncell++] = (cell_span){a, b, sl[a].i};
        a = b;
    }
    qsort(cs, (size_t)ncell, sizeof *cs, by_first); /* rows in the order the runs made them */
    /* the numbers that differ between the replicates of some cell */
    int nvary = 0;
    for (int c = 0; c < ncell; c++) {
        const ttt_record *r0 = &res->recs[sl[cs[c].from].i];
        for (int a = cs[c].from + 1; a < cs[c].to; a++) {
            const ttt_record *ra = &res->recs[sl[a].i];
            for (int f = 0; f < ra->n; f++) {
                const ttt_field *fa = &ra->f[f], *f0 = ttt_record_get(r0, fa->key);
                if (!fa->is_num || !strcmp(fa->key, "seed") || !strcmp(fa->key, "point")) continue;
                const int same = f0 && f0->is_num &&
                                 (f0->num == fa->num || (isnan(f0->num) && isnan(fa->num)));
                if (!same && nvary < TTT_RECORD_MAX_FIELDS && !key_in(vary, nvary, fa->key))
                    snprintf(vary[nvary++], 48, "%s", fa->key);
            }
        }
    }
    out->agg = calloc((size_t)(ncell ? ncell : 1), sizeof *out->agg);
    if (!out->agg) {
        free(sl), free(cs), free(vary);
        ttt_rows_free(out);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing summary");
    }
    out->aggregated = 1;
    for (int c = 0; c < ncell; c++) {
        aggregate(res, sl, cs[c].from, cs[c].to, vary, nvary, &out->agg[c]);
        out->rows[out->n++] = &out->agg[c];
    }
    ttt_status s = rows_best(res, out, sl, cs, err); /* row c is cell c */
    free(sl), free(cs), free(vary);
    if (s != TTT_OK) ttt_rows_free(out);
    return s;
}

void ttt_axis_short(const ttt_results *res, int i, char *out, size_t len) {
    ttt_key_short((const char *const *)res->axes, res->n_axes, i, out, len);
}

void ttt_key_short(const char *const *keys, int nkeys, int i, char *out, size_t len) {
    const char *key = keys[i];
    /* at least two parts ("train.lr", "optimizer.name"): a bare "lr" or "name" does not say
     * whose it is */
    int parts = 1;
    for (const char *p = key; *p; p++) parts += *p == '.';
    const int min_parts = parts >= 2 ? 2 : 1;
    /* candidate suffixes from the last part outwards */
    int taken = 0;
    for (const char *p = key + strlen(key); p > key;) {
        do p--; while (p > key && p[-1] != '.');
        if (++taken < min_parts) continue;
        int unique = 1;
        size_t sl = strlen(p);
        for (int j = 0; j < nkeys && unique; j++) {
            if (j == i) continue;
            const char *o = keys[j];
            size_t ol = strlen(o);
            if (ol >= sl && strcmp(o + ol - sl, p) == 0 && (ol == sl || o[ol - sl - 1] == '.'))
                unique = 0;
        }
        if (unique) {
            snprintf(out, len, "%s", p);
            return;
        }
    }
    snprintf(out, len, "%s", key);
}

void ttt_row_cell(const ttt_record *row, const char *key, char *out, size_t len) {
    const ttt_field *fl = ttt_record_get(row, key);
    if (!fl) {
        snprintf(out, len, "-");
        return;
    }
    if (!fl->is_num) {
        snprintf(out, len, "%s", fl->str);
        return;
    }
    char k[64];
    snprintf(k, sizeof k, "%s_std", key);
    const ttt_field *sd = ttt_record_get(row, k);
    if (sd && sd->is_num && isfinite(sd->num) && isfinite(fl->num))
        snprintf(out, len, "%.4g ± %.2g", fl->num, sd->num);
    else
        ttt_fmt_num_short(out, len, fl->num);
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

/* A CSV file of the given rows under the columns of kl; with `best` (per row) the column
 * `best` holds it (after the others, or in place of a `best` the rows carry). */
static ttt_status write_csv(const ttt_record *const *rows, int n, const ttt_keylist *kl,
                            const unsigned char *best, const char *dir, const char *name,
                            ttt_error *err) {
    ttt_afile af;
    TTT_TRY(ttt_results_open_in(&af, dir, name, err));
    int has_best = 0;
    for (int q = 0; q < kl->n; q++) has_best |= strcmp(kl->k[q], "best") == 0;
    const int extra = best && !has_best;
    if (kl->n || extra) {
        for (int q = 0; q < kl->n; q++) {
            if (q) fputc(',', af.f);
            csv_cell(af.f, kl->k[q]);
        }
        if (extra) fputs(kl->n ? ",best" : "best", af.f);
        fputc('\n', af.f); /* plain LF, not RFC 4180's CRLF: friendlier to diff and grep */
    }
    for (int i = 0; i < n; i++) {
        for (int q = 0; q < kl->n; q++) {
            if (q) fputc(',', af.f);
            if (best && strcmp(kl->k[q], "best") == 0) {
                fputc(best[i] ? '1' : '0', af.f);
                continue;
            }
            const ttt_field *fl = ttt_record_get(rows[i], kl->k[q]);
            if (!fl) continue;
            char cell[192];
            ttt_field_short(fl, cell, sizeof cell);
            csv_cell(af.f, cell);
        }
        if (extra) fputs(kl->n ? (best[i] ? ",1" : ",0") : (best[i] ? "1" : "0"), af.f);
        fputc('\n', af.f);
    }
    return ttt_afile_commit(&af, err);
}

/* A CSV file of some rows under their own columns. */
static ttt_status write_rows_csv(const ttt_results *res, const ttt_record *const *r, int n,
                                 const char *dir, const char *name, ttt_error *err) {
    ttt_rows some = {0};
    some.rows = (const ttt_record **)r;
    some.n = n;
    ttt_keylist k;
    TTT_TRY(summary_keys(res, &some, &k, err));
    /* the `best` column that compared runs carry says nothing more here: every row has 1 */
    int w = 0;
    for (int q = 0; q < k.n; q++)
        if (strcmp(k.k[q], "best") != 0) k.k[w++] = k.k[q];
    k.n = w;
    ttt_status s = write_csv(r, n, &k, NULL, dir, name, err);
    free(k.k);
    return s;
}

/* summary.csv; with replicates also summary_seeds.csv, the record of every seed; with a best
 * axis also summary_best.csv, the best row of each group. */
static ttt_status write_summary(const ttt_results *res, const ttt_rows *rows,
                                const ttt_keylist *kl, const char *dir, ttt_error *err) {
    TTT_TRY(write_csv(rows->rows, rows->n, kl, rows->best, dir, "summary.csv", err));
    if (rows->best)
        TTT_TRY(write_rows_csv(res, rows->best_rows, rows->n_best, dir, "summary_best.csv", err));
    if (!rows->aggregated) return TTT_OK;
    ttt_rows all = {0};
    all.rows = malloc((size_t)(res->n ? res->n : 1) * sizeof *all.rows);
    if (!all.rows) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing summary");
    for (int i = 0; i < res->n; i++)
        if (res->summary[i]) all.rows[all.n++] = &res->recs[i];
    ttt_keylist kall;
    ttt_status s = summary_keys(res, &all, &kall, err);
    if (s == TTT_OK) s = write_csv(all.rows, all.n, &kall, NULL, dir, "summary_seeds.csv", err);
    free(kall.k);
    ttt_rows_free(&all);
    return s;
}

ttt_status ttt_results_write(ttt_results *res, const char *dir, ttt_error *err) {
    if (res->oom)
        return ttt_error_set(err, TTT_ERR_NOMEM,
                             "out of memory while collecting results; nothing written to '%s'", dir);
    /* a streamed metrics.jsonl that could not be written fails first, with its real cause (the
     * charts read it back) */
    if (res->stream.f && (fflush(res->stream.f) != 0 || ferror(res->stream.f)))
        return ttt_afile_commit(&res->stream, err);
    ttt_rows rows;
    TTT_TRY(ttt_results_rows(res, &rows, err));
    ttt_keylist kl;
    ttt_status s = summary_keys(res, &rows, &kl, err);
    if (s != TTT_OK) {
        ttt_rows_free(&rows);
        return s;
    }
    s = write_summary(res, &rows, &kl, dir, err);
    char **svgs = NULL;
    if (s == TTT_OK && res->nc) {
        svgs = ttt_fault_calloc((size_t)res->nc, sizeof *svgs);
        if (!svgs) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory writing charts");
    }
    /* the page embeds the charts' SVG text, so it is drawn once and kept for both */
    if (s == TTT_OK) s = ttt_charts_write(res, svgs, dir, err);
    if (s == TTT_OK) s = ttt_page_write(res, &kl, &rows, svgs, dir, err);
    /* last: a streamed metrics.jsonl is read back by the charts until it is committed */
    if (s == TTT_OK) s = write_metrics(res, dir, err);
    for (int i = 0; svgs && i < res->nc; i++) free(svgs[i]);
    free(svgs);
    free(kl.k);
    ttt_rows_free(&rows);
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* plain-text table of the summary records (printed by `ttt run`)                             */

/* The column `col` says what the swept `axis` says: the one names the other (`layer` and
 * `layer.preset`: its first part; `overwrite` and `task.overwrite`: its last) and every row
 * holds the same text in both. */
static int same_column(const char *axis, const char *col, const ttt_record *const *rows, int n) {
    const size_t cl = strlen(col), al = strlen(axis);
    const int named = (al > cl && strncmp(axis, col, cl) == 0 && axis[cl] == '.') ||
                      (al > cl && strcmp(axis + al - cl, col) == 0 && axis[al - cl - 1] == '.');
    if (!named || n < 1) return 0;
    char a[256], b[256];
    for (int i = 0; i < n; i++) {
        ttt_row_cell(rows[i], axis, a, sizeof a);
        ttt_row_cell(rows[i], col, b, sizeof b);
        if (strcmp(a, b) != 0) return 0;
    }
    return 1;
}

/* The table of some rows: the axes (but `skip`), `seeds` when aggregated, then cols. */
static void print_rows(const ttt_results *res, FILE *f, const char *const *cols,
                       const ttt_record *const *rows, int n, int aggregated) {
    enum { MAXC = 40, W = 200 };
    const char *key[MAXC];
    char head[MAXC][64];
    int nc = 0;
    for (int a = 0; a < res->n_axes && nc < MAXC; a++) {
        if (aggregated && strcmp(res->axes[a], "seed") == 0) continue; /* averaged over */
        key[nc] = res->axes[a];
        ttt_axis_short(res, a, head[nc], sizeof head[nc]);
        nc++;
    }
    if (aggregated && nc < MAXC) {
        key[nc] = "seeds";
        snprintf(head[nc++], sizeof head[0], "seeds");
    }
    const int n_axis_cols = nc;
    for (int c = 0; cols[c] && nc < MAXC; c++) {
        if (res->n_axes && strcmp(cols[c], "series") == 0) continue;
        int dup = 0;
        for (int q = 0; q < nc; q++) dup |= strcmp(key[q], cols[c]) == 0;
        /* a task's column that repeats a swept key under another name (`layer` beside
         * `layer.preset`, `overwrite` beside `task.overwrite`) is shown once */
        for (int q = 0; q < n_axis_cols && !dup; q++)
            dup = same_column(key[q], cols[c], rows, n);
        if (dup) continue;
        key[nc] = cols[c];
        snprintf(head[nc++], sizeof head[0], "%s", cols[c]);
    }
    int width[MAXC];
    for (int c = 0; c < nc; c++) width[c] = (int)strlen(head[c]);
    char cell[W + 1];
    /* two passes: measure, then print; widths count characters, not bytes ("±") */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            for (int c = 0; c < nc; c++) fprintf(f, "%s%-*s", c ? "  " : "", width[c], head[c]);
            fputc('\n', f);
        }
        for (int i = 0; i < n; i++) {
            for (int c = 0; c < nc; c++) {
                ttt_row_cell(rows[i], key[c], cell, sizeof cell);
                int len = 0;
                for (const char *p = cell; *p; p++) len += ((unsigned char)*p & 0xC0) != 0x80;
                if (pass == 0 && len > width[c]) width[c] = len;
                if (pass == 1)
                    fprintf(f, "%s%s%*s", c ? "  " : "", cell, width[c] - len, "");
            }
            if (pass == 1) fputc('\n', f);
        }
    }
}

void ttt_results_print_table(const ttt_results *res, FILE *f, const char *const *cols) {
    ttt_rows rows;
    ttt_error e;
    if (ttt_results_rows(res, &rows, &e) != TTT_OK) return;
    print_rows(res, f, cols, rows.rows, rows.n, rows.aggregated);
    if (rows.best) {
        char h[64] = "";
        for (int a = 0; a < res->n_axes; a++)
            if (strcmp(res->axes[a], res->best_axis) == 0) ttt_axis_short(res, a, h, sizeof h);
        fprintf(f, "\nbest %s: the %s %s%s (docs/results.md \"Best over an axis\")\n",
                h[0] ? h : res->best_axis, res->best_max ? "largest" : "smallest",
                ttt_results_best_metric(res), rows.aggregated ? ", mean over seeds" : "");
        print_rows(res, f, cols, rows.best_rows, rows.n_best, rows.aggregated);
    }
    ttt_rows_free(&rows);
}
