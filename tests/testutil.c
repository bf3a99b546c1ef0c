#define _GNU_SOURCE
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/wait.h>

static int close_impl(const float *got, const double *want_d, const float *want_f, size_t n,
                      double atol, double rtol, char *msg, size_t msg_len, double *err_out,
                      double *tol_out) {
    double maxabs = 0, maxref = 0, num = 0, den = 0;
    size_t worst = 0;
    int nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        double w = want_d ? want_d[i] : (double)want_f[i];
        double g = got[i];
        if (!isfinite(g) || !isfinite(w)) nonfinite = 1;
        double d = fabs(g - w);
        if (d > maxabs || isnan(d)) {
            maxabs = d;
            worst = i;
        }
        if (fabs(w) > maxref) maxref = fabs(w);
        num += d * d;
        den += w * w;
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    double tol = atol + rtol * maxref;
    int ok = !nonfinite && maxabs <= tol;
    *err_out = maxabs;
    *tol_out = tol;
    if (msg)
        snprintf(msg, msg_len,
                 "max-abs error %.3e (tolerance %.3e) at index %zu: got %.9g want %.9g; "
                 "relative RMS error %.3e; max |ref| %.3e%s",
                 maxabs, tol, worst, n ? (double)got[worst] : 0.0,
                 n ? (want_d ? want_d[worst] : (double)want_f[worst]) : 0.0, rel, maxref,
                 nonfinite ? "; NON-FINITE values present" : "");
    return ok;
}

/* The margin report's per-process table: the largest passing ratio seen at each site. */
#define TU_SITES 512
static struct {
    const char *file;
    int line;
    double worst;
} tu_sites[TU_SITES];
static int tu_n_sites;

int tu_ratio_quiet;

int tu_ratio_at(double err, double tol, const char *file, int line) {
    const int ok = err <= tol; /* NaN fails */
    const char *path = getenv("TTT_TOL_REPORT");
    if (!ok || tu_ratio_quiet || !path || !*path) return ok;
    const double r = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
    int i = 0;
    while (i < tu_n_sites && !(tu_sites[i].line == line && strcmp(tu_sites[i].file, file) == 0))
        i++;
    if (i == tu_n_sites) {
        if (i == TU_SITES) return ok;
        tu_sites[i].file = file;
        tu_sites[i].line = line;
        tu_sites[i].worst = -1;
        tu_n_sites++;
    }
    if (r <= tu_sites[i].worst) return ok;
    tu_sites[i].worst = r;
    FILE *f = fopen(path, "a");
    if (f) {
        const char *base = strrchr(file, '/');
        fprintf(f, "%s %s:%d %.6g\n", program_invocation_short_name, base ? base + 1 : file, line,
                r);
        fclose(f);
    }
    return ok;
}

int tu_close_at(const float *got, const double *want, size_t n, double atol, double rtol,
                char *msg, size_t msg_len, const char *file, int line) {
    double err, tol;
    int ok = close_impl(got, want, NULL, n, atol, rtol, msg, msg_len, &err, &tol);
    if (ok) tu_ratio_at(err, tol, file, line);
    return ok;
}

int tu_close_f_at(const float *got, const float *want, size_t n, double atol, double rtol,
                  char *msg, size_t msg_len, const char *file, int line) {
    double err, tol;
    int ok = close_impl(got, NULL, want, n, atol, rtol, msg, msg_len, &err, &tol);
    if (ok) tu_ratio_at(err, tol, file, line);
    return ok;
}

int tu_run(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

char *tu_mkdtemp(void) {
    char tmpl[] = "/tmp/ttt-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

char *tu_dir;

void tu_dir_setup(void) { tu_dir = tu_mkdtemp(); }

void tu_dir_teardown(void) {
    tu_rmtree(tu_dir);
    free(tu_dir);
    tu_dir = NULL;
}

char *tu_dir_write(const char *name, const char *text) {
    char *path = NULL;
    if (asprintf(&path, "%s/%s", tu_dir, name) < 0) return NULL;
    if (tu_write_file(path, text) != 0) {
        free(path);
        return NULL;
    }
    return path;
}

void tu_rmtree(const char *path) {
    if (!path || !*path || strcmp(path, "/") == 0) return;
    char *cmd = NULL;
    if (asprintf(&cmd, "rm -rf '%s'", path) > 0) {
        if (system(cmd) != 0) { /* best effort */
        }
        free(cmd);
    }
}

char *tu_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n - 1 == 0) buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    fclose(f);
    return buf;
}

int tu_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t len = strlen(text);
    int ok = fwrite(text, 1, len, f) == len;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

int tu_run_ttt(const char *args, char **out, char **errout) {
    const char *bin = getenv("TTT_BIN");
    if (!bin) bin = "build/ttt";
    char *dir = tu_mkdtemp();
    char *cmd = NULL;
    if (asprintf(&cmd, "%s %s >%s/out 2>%s/err", bin, args, dir, dir) < 0) return -1;
    int st = system(cmd);
    free(cmd);
    char path[512];
    snprintf(path, sizeof path, "%s/out", dir);
    if (out) *out = tu_read_file(path);
    snprintf(path, sizeof path, "%s/err", dir);
    if (errout) *errout = tu_read_file(path);
    tu_rmtree(dir);
    free(dir);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void tu_fx_init(tu_fixture *f, uint64_t seed) {
    ttt_arena_init(&f->arena, 1 << 20);
    f->ctx = (ttt_ctx){.arena = &f->arena, .grad = 0};
    ttt_rng_seed(&f->rng, seed);
}

void tu_fx_free(tu_fixture *f) { ttt_arena_free(&f->arena); }

void tu_tape_fx_init(tu_tape_fixture *f) {
    ttt_arena_init(&f->arena, 1 << 22);
    ttt_tape_init(&f->tape);
    f->ctx = (ttt_ctx){.arena = &f->arena, .grad = 1, .tape = &f->tape};
}

void tu_tape_fx_free(tu_tape_fixture *f) {
    ttt_tape_free(&f->tape);
    ttt_arena_free(&f->arena);
}

void *tu_zalloc(ttt_ctx *ctx, size_t bytes) {
    void *p = ttt_arena_alloc(ctx->arena, bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    memset(p, 0, bytes ? bytes : 1);
    return p;
}

ttt_tensor *tu_randn(tu_fixture *f, int r, int c, float std) {
    ttt_tensor *t = ttt_tensor_2d(&f->ctx, r, c);
    ttt_rng_fill_normal(&f->rng, t->data, t->n, 0.0f, std);
    return t;
}

ttt_tensor *tu_unit_rows(tu_fixture *f, int r, int c) {
    ttt_tensor *t = tu_randn(f, r, c, 1.0f);
    for (int i = 0; i < r; i++) {
        double s = 0;
        for (int j = 0; j < c; j++) s += (double)t->data[i * c + j] * t->data[i * c + j];
        for (int j = 0; j < c; j++) t->data[i * c + j] /= (float)sqrt(s);
    }
    return t;
}

ttt_tensor *tu_uniform(tu_fixture *f, int n, float lo, float hi) {
    ttt_tensor *t = ttt_tensor_1d(&f->ctx, n);
    ttt_rng_fill_uniform(&f->rng, t->data, t->n, lo, hi);
    return t;
}

float *tu_randn_buf(tu_fixture *f, size_t n, float std) {
    float *x = ttt_arena_alloc(&f->arena, (n ? n : 1) * sizeof(float));
    ck_assert_ptr_nonnull(x);
    ttt_rng_fill_normal(&f->rng, x, n, 0.0f, std);
    return x;
}
