/* Shared helpers of the Check suites. */
#ifndef TTT_TESTUTIL_H
#define TTT_TESTUTIL_H

#include <check.h>
#include <stddef.h>

#include "internal.h"

/* Compare `got` (float32) against `want` (float64 reference), n elements. Passes when
 * max|got − want| <= atol + rtol·max|want|. Fills a message with max-abs error, relative RMS error
 * and the worst index, for ck_assert_msg. Returns 1 on pass. Every call records its ratio
 * error / tolerance for the margin report (tu_ratio). */
int tu_close_at(const float *got, const double *want, size_t n, double atol, double rtol,
                char *msg, size_t msg_len, const char *file, int line);
/* Same with a float32 reference. */
int tu_close_f_at(const float *got, const float *want, size_t n, double atol, double rtol,
                  char *msg, size_t msg_len, const char *file, int line);
#define tu_close(got, want, n, atol, rtol, msg, msg_len)                                     \
    tu_close_at((got), (want), (n), (atol), (rtol), (msg), (msg_len), __FILE__, __LINE__)
#define tu_close_f(got, want, n, atol, rtol, msg, msg_len)                                   \
    tu_close_f_at((got), (want), (n), (atol), (rtol), (msg), (msg_len), __FILE__, __LINE__)

/* The margin report (docs/hardening.md "Portable tolerances"): with TTT_TOL_REPORT=path in the
 * environment, every comparison that passes appends "program file:line ratio" to path whenever
 * its ratio error / tolerance is a new largest for that site in this process, so .ci/portability
 * can print the worst ratio of every suite under every BLAS kernel set. Comparisons that fail
 * (ratio > 1) are Check's to report, or are the controls a test must reject; they are not
 * recorded. Returns err <= tol (false for NaN). */
int tu_ratio_at(double err, double tol, const char *file, int line);
/* Nonzero while a test runs a control it must reject (e.g. a gradient corrupted on purpose):
 * the control's elements that happen to pass are not margins, and are not recorded. */
extern int tu_ratio_quiet;
#define tu_ratio(err, tol) tu_ratio_at((err), (tol), __FILE__, __LINE__)
#define TU_ASSERT_CLOSE(got, want, n, atol, rtol)                                            \
    do {                                                                                     \
        char tu_msg_[512];                                                                   \
        int tu_ok_ = tu_close((got), (want), (n), (atol), (rtol), tu_msg_, sizeof tu_msg_);  \
        ck_assert_msg(tu_ok_, "%s", tu_msg_);                                                \
    } while (0)
#define TU_ASSERT_CLOSE_F(got, want, n, atol, rtol)                                          \
    do {                                                                                     \
        char tu_msg_[512];                                                                   \
        int tu_ok_ = tu_close_f((got), (want), (n), (atol), (rtol), tu_msg_, sizeof tu_msg_);\
        ck_assert_msg(tu_ok_, "%s", tu_msg_);                                                \
    } while (0)

/* ck_assert_msg(err <= tol, ...) that also records the ratio. */
#define TU_ASSERT_LE(err, tol, ...) ck_assert_msg(tu_ratio((err), (tol)), __VA_ARGS__)

/* Run a suite with CK_NORMAL output; returns the process exit code (0 = all passed). */
int tu_run(Suite *s);

/* TU_ASAN: built with AddressSanitizer, which reserves terabytes of address space for its
 * shadow memory, so such a program cannot start under an address-space limit (`ulimit -v`). */
#if defined(__SANITIZE_ADDRESS__)
#define TU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_ASAN 1
#endif
#endif

/* A fresh empty temporary directory (malloc'd path); removed recursively by tu_rmtree. */
char *tu_mkdtemp(void);
void tu_rmtree(const char *path);
/* Read a whole file (malloc'd, NUL-terminated) or NULL. */
char *tu_read_file(const char *path);
/* Write text to a file; returns 0 on success. */
int tu_write_file(const char *path, const char *text);
/* A fresh temporary folder for each test of a Check case: add tu_dir_setup / tu_dir_teardown
 * as its checked fixture; tu_dir is the folder's path while a test runs. */
extern char *tu_dir;
void tu_dir_setup(void);
void tu_dir_teardown(void);
/* Write text to tu_dir/name; returns the file's path (malloc'd). */
char *tu_dir_write(const char *name, const char *text);
/* Run the ttt program (path from $TTT_BIN) with a shell command line appended; captures stdout
 * and stderr (malloc'd, may be NULL) and returns the exit status. */
int tu_run_ttt(const char *args, char **out, char **errout);

/* The usual test fixture: an arena, a context without a tape, a seeded generator. */
typedef struct tu_fixture {
    ttt_arena arena;
    ttt_ctx ctx;
    ttt_rng rng;
} tu_fixture;

void tu_fx_init(tu_fixture *f, uint64_t seed);
void tu_fx_free(tu_fixture *f);
/* A recording context for gradient tests: an arena of 4 MiB blocks and a tape, gradients on. */
typedef struct tu_tape_fixture {
    ttt_arena arena;
    ttt_tape tape;
    ttt_ctx ctx;
} tu_tape_fixture;

void tu_tape_fx_init(tu_tape_fixture *f);
void tu_tape_fx_free(tu_tape_fixture *f);
/* Zeroed bytes from ctx's arena (fails the test when the arena cannot give them). */
void *tu_zalloc(ttt_ctx *ctx, size_t bytes);

/* Random tensors from the fixture's generator, allocated in its arena:
 * (r, c) normal with standard deviation std; (r, c) rows of unit L2 norm; (n) uniform in
 * [lo, hi); n raw floats, normal. */
ttt_tensor *tu_randn(tu_fixture *f, int r, int c, float std);
ttt_tensor *tu_unit_rows(tu_fixture *f, int r, int c);
ttt_tensor *tu_uniform(tu_fixture *f, int n, float lo, float hi);
float *tu_randn_buf(tu_fixture *f, size_t n, float std);

#endif
