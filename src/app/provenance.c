/* The run folder's provenance.json (provenance.h). */
#define _GNU_SOURCE /* realpath */
#include "provenance.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "blas.h"
#include "results.h"
#include "strbuf.h"
#include "ttt_build_info.h" /* TTT_GIT_COMMIT, TTT_GIT_DIRTY: generated at build time */

#ifndef TTT_BUILD_FLAGS
#define TTT_BUILD_FLAGS "unknown"
#endif
#ifndef TTT_C_COMPILER
#define TTT_C_COMPILER "unknown"
#endif

static int g_argc;
static char *const *g_argv;

void ttt_provenance_set_command(int argc, char *const *argv) {
    g_argc = argc;
    g_argv = argv;
}

/* "model name" of the first processor in /proc/cpuinfo; "unknown" elsewhere. */
static void cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        snprintf(buf, len, "%s", c);
        buf[strcspn(buf, "\n")] = '\0';
        break;
    }
    fclose(f);
}

static void iso_time(char *buf, size_t len, time_t t) {
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void key(ttt_strbuf *b, const char *k, int first) {
    ttt_strbuf_puts(b, first ? "{\n  " : ",\n  ");
    ttt_strbuf_put_json(b, k);
    ttt_strbuf_puts(b, ": ");
}

static void kv(ttt_strbuf *b, const char *k, const char *v) {
    key(b, k, 0);
    if (v) ttt_strbuf_put_json(b, v);
    else ttt_strbuf_puts(b, "null");
}

/* An environment variable's value, or null when it is not set. */
static void kv_env(ttt_strbuf *b, const char *name) { kv(b, name, getenv(name)); }

ttt_status ttt_provenance_write(const char *dir, time_t start, time_t end, const char *outcome,
                                ttt_error *err) {
    ttt_strbuf b = {0};
    char buf[512];
    key(&b, "version", 1);
    ttt_strbuf_put_json(&b, TTT_VERSION);
    kv(&b, "git_commit", TTT_GIT_COMMIT);
    key(&b, "git_dirty", 0);
    ttt_strbuf_puts(&b, strcmp(TTT_GIT_DIRTY, "unknown") == 0 ? "null" : TTT_GIT_DIRTY);
    kv(&b, "compiler", TTT_C_COMPILER);
    kv(&b, "compiler_version", __VERSION__);
    kv(&b, "build_flags", TTT_BUILD_FLAGS);
    if (gethostname(buf, sizeof buf) != 0) snprintf(buf, sizeof buf, "unknown");
    buf[sizeof buf - 1] = '\0';
    kv(&b, "host", buf);
    cpu_model(buf, sizeof buf);
    kv(&b, "cpu_model", buf);
    key(&b, "cpus_online", 0);
    ttt_strbuf_printf(&b, "%ld", sysconf(_SC_NPROCESSORS_ONLN));
    key(&b, "openmp_max_threads", 0);
#ifdef _OPENMP
    ttt_strbuf_printf(&b, "%d", omp_get_max_threads());
#else
    ttt_strbuf_puts(&b, "null");
#endif
    /* the BLAS: which library, its version and the kernels it chose (src/core/blas.h) */
    ttt_blas_info bi;
    ttt_blas_describe(&bi);
    kv(&b, "blas", bi.library);
    kv(&b, "blas_version", bi.version);
    kv(&b, "blas_config", bi.config);
    kv(&b, "blas_core", bi.core);
    kv(&b, "blas_core_how", bi.core_how);
    kv(&b, "cpu_features", bi.cpu);
    key(&b, "blas_threads", 0);
    ttt_strbuf_printf(&b, "%d", ttt_blas_get_threads());
    kv_env(&b, "OMP_NUM_THREADS");
    kv_env(&b, "OPENBLAS_NUM_THREADS");
    kv_env(&b, "OPENBLAS_CORETYPE");
    key(&b, "command", 0);
    if (g_argv) {
        ttt_strbuf_putc(&b, '[');
        for (int i = 0; i < g_argc; i++) {
            if (i) ttt_strbuf_puts(&b, ", ");
            ttt_strbuf_put_json(&b, g_argv[i]);
        }
        ttt_strbuf_putc(&b, ']');
    } else {
        ttt_strbuf_puts(&b, "null");
    }
    /* the overrides on their own, as the command line gave them */
    key(&b, "sets", 0);
    ttt_strbuf_putc(&b, '[');
    int n_sets = 0;
    for (int i = 0; g_argv && i < g_argc; i++) {
        const char *v = NULL;
        if (strcmp(g_argv[i], "--set") == 0 && i + 1 < g_argc) v = g_argv[++i];
        else if (strncmp(g_argv[i], "--set=", 6) == 0) v = g_argv[i] + 6;
        if (!v) continue;
        if (n_sets++) ttt_strbuf_puts(&b, ", ");
        ttt_strbuf_put_json(&b, v);
    }
    ttt_strbuf_putc(&b, ']');
    if (getcwd(buf, sizeof buf)) kv(&b, "working_directory", buf);
    iso_time(buf, sizeof buf, start);
    kv(&b, "started", buf);
    if (end) iso_time(buf, sizeof buf, end);
    kv(&b, "ended", end ? buf : NULL);
    kv(&b, "outcome", end ? outcome : "running");
    ttt_strbuf_puts(&b, "\n}\n");
    char *text = ttt_strbuf_take(&b);
    if (!text) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for provenance.json");
    char path[4096];
    ttt_status s;
    if ((size_t)snprintf(path, sizeof path, "%s/provenance.json", dir) >= sizeof path)
        s = ttt_error_set(err, TTT_ERR_IO, "run folder path '%s' is too long", dir);
    else
        s = ttt_write_file_atomic(path, text, err);
    free(text);
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* What a command may write (docs/hardening.md "What a command may overwrite").                */

/* Files ttt leaves in a folder it has not written yet: the run folder's locks (.ttt-lock,
 * .ttt-lock.shard<i>) and the temporary files of a killed writer. */
static int ttt_own_litter(const char *name) {
    if (strncmp(name, ".ttt-lock", 9) == 0) return 1;
    return name[0] == '.' && strstr(name + 1, TTT_AFILE_TMP_MARK) != NULL;
}

static int regular_file_in(const char *dir, const char *name) {
    char path[PATH_MAX + 64];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) return 0;
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

ttt_folder_kind ttt_folder_kind_of(const char *dir) {
    struct stat st;
    if (lstat(dir, &st) != 0) return errno == ENOENT ? TTT_FOLDER_ABSENT : TTT_FOLDER_OTHER;
    if (S_ISLNK(st.st_mode) && stat(dir, &st) != 0) return TTT_FOLDER_OTHER; /* dangling */
    if (!S_ISDIR(st.st_mode)) return TTT_FOLDER_OTHER;
    if (regular_file_in(dir, "config.resolved.yaml")) return TTT_FOLDER_RUN;
    if (regular_file_in(dir, TTT_COMPARISON_MARK)) return TTT_FOLDER_COMPARISON;
    DIR *d = opendir(dir);
    if (!d) return TTT_FOLDER_OTHER;
    int other = 0;
    for (struct dirent *e; !other && (e = readdir(d));)
        other = strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !ttt_own_litter(e->d_name);
    closedir(d);
    return other ? TTT_FOLDER_OTHER : TTT_FOLDER_EMPTY;
}

/* The first entry of dir that is not ttt's (for the message), or "" */
static void first_entry(const char *dir, char *out, size_t len) {
    out[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !ttt_own_litter(e->d_name)) {
            snprintf(out, len, "%s", e->d_name);
            break;
        }
    closedir(d);
}

static ttt_status not_inside_marked(const char *cmd, const char *out, ttt_error *err);

ttt_status ttt_output_folder_check(const char *cmd, const char *dir, ttt_folder_kind own,
                                   ttt_error *err) {
    const ttt_folder_kind k = ttt_folder_kind_of(dir);
    if (k == TTT_FOLDER_ABSENT || k == TTT_FOLDER_EMPTY || k == own)
        return not_inside_marked(cmd, dir, err); /* nor a folder inside another's */
    if (k == TTT_FOLDER_RUN)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "%s: '%s' is a run folder of `ttt run`, which only its own run "
                             "writes; nothing was written: give a new or empty folder",
                             cmd, dir);
    if (k == TTT_FOLDER_COMPARISON)
        return ttt_error_set(err, TTT_ERR_ARG,
                             "%s: '%s' holds a comparison written by `ttt compare --out`; "
                             "nothing was written: give a new or empty folder", cmd, dir);
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return ttt_error_set(err, TTT_ERR_ARG,
                             "%s: '%s' exists and is not a folder; nothing was written: give a "
                             "new or empty folder", cmd, dir);
    char first[256];
    first_entry(dir, first, sizeof first);
    if (!first[0])
        return ttt_error_set(err, TTT_ERR_ARG, "%s: cannot read the folder '%s': %s", cmd, dir,
                             strerror(errno ? errno : EACCES));
    for (char *c = first; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?'; /* printed to a terminal */
    return ttt_error_set(err, TTT_ERR_ARG,
                         "%s: '%s' is not a run folder (no config.resolved.yaml; it holds files "
                         "that no ttt command wrote, such as '%s'); nothing was written, so as "
                         "not to overwrite them: give a new or empty folder",
                         cmd, dir, first);
}

/* The folder holding `path` (its text before the last '/', or "." ) in out. */
static void parent_of(const char *path, char *out, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, len, ".");
    else if (slash == path) snprintf(out, len, "/");
    else snprintf(out, len, "%.*s", (int)(slash - path), path);
}

/* `out` (a file or a folder) lies in no run folder or comparison: none of the folders from
 * its parent (the nearest that exists) up to / holds config.resolved.yaml or the comparison's
 * mark; those are written only by the command that made them. */
static ttt_status not_inside_marked(const char *cmd, const char *out, ttt_error *err) {
    char parent[PATH_MAX], real[PATH_MAX], self[PATH_MAX];
    snprintf(self, sizeof self, "%s", out);
    for (size_t n = strlen(self); n > 1 && self[n - 1] == '/'; n--) self[n - 1] = '\0';
    parent_of(self, parent, sizeof parent);
    /* the nearest folder above that exists (the rest the command creates) */
    while (!realpath(parent, real)) {
        if (strcmp(parent, ".") == 0 || strcmp(parent, "/") == 0) return TTT_OK;
        char up[PATH_MAX];
        parent_of(parent, up, sizeof up);
        snprintf(parent, sizeof parent, "%s", up);
    }
    for (;;) {
        const ttt_folder_kind k = regular_file_in(real, "config.resolved.yaml") ? TTT_FOLDER_RUN
                                  : regular_file_in(real, TTT_COMPARISON_MARK)
                                      ? TTT_FOLDER_COMPARISON
                                      : TTT_FOLDER_OTHER;
        if (k != TTT_FOLDER_OTHER)
            return ttt_error_set(err, TTT_ERR_ARG,
                                 "%s: the output '%s' lies in %s '%s', which only %s writes; "
                                 "nothing was written: write it outside that folder",
                                 cmd, out, k == TTT_FOLDER_RUN ? "the run folder" : "the comparison",
                                 real, k == TTT_FOLDER_RUN ? "its own run" : "`ttt compare`");
        char *slash = strrchr(real, '/');
        if (!slash || slash == real) break;
        *slash = '\0';
    }
    return TTT_OK;
}

ttt_status ttt_output_file_check(const char *cmd, const char *out, const char *const *inputs,
                                 int n_inputs, ttt_error *err) {
    struct stat so, si;
    const int out_exists = stat(out, &so) == 0;
    for (int i = 0; i < n_inputs; i++) {
        if (!inputs[i]) continue;
        if (strcmp(out, inputs[i]) == 0 ||
            (out_exists && stat(inputs[i], &si) == 0 && si.st_dev == so.st_dev &&
             si.st_ino == so.st_ino))
            return ttt_error_set(err, TTT_ERR_ARG,
                                 "%s: the output '%s' is the input '%s'; nothing was written: "
                                 "give an output file of its own (the input would be replaced)",
                                 cmd, out, inputs[i]);
    }
    return not_inside_marked(cmd, out, err);
}
