/* The run folder's provenance.json (provenance.h). */
#include "provenance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
