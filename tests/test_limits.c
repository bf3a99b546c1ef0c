/* Cost bounds (docs/hardening.md "Limits"): for each documented limit the largest input it allows
 * is generated here and must be handled within a time and memory ceiling, and the input just past
 * it is refused with a message naming the limit. Inputs that run `ttt` are measured as a child
 * process (wall time, and peak RSS from wait4).
 *
 * Ceilings: each is several times the cost measured on the 2-core machine of docs/benchmarks.md
 * (the measured value is in the comment beside it), so that a loaded machine or a sanitizer build
 * does not fail them, while the quadratic or per-point-copy behaviour they guard against costs
 * minutes and gigabytes. Under AddressSanitizer memory and time are multiplied by SAN_FACTOR.
 * TTT_LIMITS_VERBOSE=1 prints what each `ttt` child cost (how the numbers below were measured). */
#define _DEFAULT_SOURCE /* wait4, usleep */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "safetensors.h"
#include "strbuf.h"
#include "testutil.h"

#ifdef TU_ASAN
#define TTT_ASAN 1
#endif
#ifdef TTT_ASAN
#define SAN_FACTOR 4.0
#else
#define SAN_FACTOR 1.0
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A measured child: exit code (or -signal), wall seconds, peak RSS in MiB, stdout bytes, stderr. */
typedef struct run_cost {
    int code;
    double seconds, rss_mib;
    long out_bytes;
    char *err;
} run_cost;

/* Run `ttt ARGS...` with stdout and stderr to files in dir; as_limit_kib > 0 sets RLIMIT_AS in
 * the child. A child still running after kill_after seconds is killed (SIGKILL): a hang fails
 * the test instead of stalling the suite. */
static run_cost run_ttt(const char *dir, const char *const *args, long as_limit_kib,
                        double kill_after) {
    run_cost c = {0};
    const char *bin = getenv("TTT_BIN");
    if (!bin) bin = "build/ttt";
    char outp[512], errp[512];
    snprintf(outp, sizeof outp, "%s/stdout", dir);
    snprintf(errp, sizeof errp, "%s/stderr", dir);
    const double t0 = now();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(outp, "w", stdout) || !freopen(errp, "w", stderr)) _exit(120);
        if (as_limit_kib > 0) {
            struct rlimit rl = {.rlim_cur = (rlim_t)as_limit_kib * 1024,
                                .rlim_max = (rlim_t)as_limit_kib * 1024};
            if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(121);
        }
        const char *argv[16] = {bin};
        for (int i = 0; args[i] && i < 14; i++) argv[i + 1] = args[i];
        execv(bin, (char *const *)argv);
        _exit(122);
    }
    int st = 0;
    struct rusage ru;
    for (;;) {
        pid_t r = wait4(pid, &st, WNOHANG, &ru);
        if (r == pid) break;
        if (now() - t0 > kill_after) {
            kill(pid, SIGKILL);
            wait4(pid, &st, 0, &ru);
            break;
        }
        usleep(10000);
    }
    c.seconds = now() - t0;
    c.rss_mib = (double)ru.ru_maxrss / 1024.0;
    c.code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    struct stat sb;
    c.out_bytes = stat(outp, &sb) == 0 ? (long)sb.st_size : -1;
    c.err = tu_read_file(errp);
    if (getenv("TTT_LIMITS_VERBOSE"))
        fprintf(stderr, "ttt %s: exit %d, %.2f s, %.0f MiB, %ld bytes out\n", args[0], c.code,
                c.seconds, c.rss_mib, c.out_bytes);
    return c;
}

static void write_text(const char *path, const char *text) {
    ck_assert_int_eq(tu_write_file(path, text), 0);
}

/* The sweep both documents below end with: 100 seeds × 100 inner learning rates, 10 000 points
 * (the point limit). Takes b. */
static char *with_sweep(ttt_strbuf *b) {
    ttt_strbuf_printf(b, "sweep:\n  seed: [");
    for (int i = 0; i < 100; i++) ttt_strbuf_printf(b, "%s%d", i ? ", " : "", i);
    ttt_strbuf_printf(b, "]\n  layer.optimizer.lr: [");
    for (int i = 0; i < 100; i++) ttt_strbuf_printf(b, "%s%g", i ? ", " : "", 0.01 * (i + 1));
    ttt_strbuf_printf(b, "]\n");
    ck_assert(!b->failed);
    return ttt_strbuf_take(b);
}

/* A sweep of 10 000 points (the point limit) whose document carries a description of `desc`
 * bytes; the memory task's smallest sizes keep validation cheap. */
static char *sweep_doc(long desc) {
    ttt_strbuf b = {0};
    ttt_strbuf_printf(&b, "name: big\ntask: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8}\n"
                          "description: ");
    for (long i = 0; i < desc; i++) ttt_strbuf_append(&b, "x", 1);
    ttt_strbuf_printf(&b, "\n");
    return with_sweep(&b);
}

/* The text of one point of sweep_doc besides the description: measured by the refusal message
 * of a document one byte too large, so the largest allowed one is exact. */
START_TEST(sweep_at_the_byte_limit_is_checked_within_bounds) {
    char *dir = tu_mkdtemp();
    char path[512];
    snprintf(path, sizeof path, "%s/sweep.yaml", dir);
    /* Text per point besides the description: name, task, keys, the two swept values. */
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    char *doc = sweep_doc(0);
    ck_assert_int_eq(ttt_cfg_load_string(doc, "probe", &root, &err), TTT_OK);
    ttt_cfg_node **pts;
    char **labels;
    int n;
    ck_assert_int_eq(ttt_cfg_sweep_expand(root, &pts, &labels, &n, &err), TTT_OK);
    ck_assert_int_eq(n, TTT_CFG_MAX_SWEEP_POINTS);
    ttt_cfg_points_free(pts, labels, n);
    ttt_cfg_free(root);
    free(doc);
    /* the largest description allowed: the limit over 10 000 points, less the rest of a point
     * (at most 200 bytes: "name", "big", "task", "kind", "memory", ... and the swept keys) */
    const long per_point = TTT_CFG_MAX_EXPANDED_BYTES / TTT_CFG_MAX_SWEEP_POINTS;
    long desc = per_point - 200;
    doc = sweep_doc(desc);
    write_text(path, doc);
    free(doc);
    const char *args[] = {"check", path, NULL};
    run_cost c = run_ttt(dir, args, 0, 120.0 * SAN_FACTOR);
    /* measured: 2.6 s, 610 MiB, 71 MB of output (the 10 000 resolved points, each with the
     * description); the ceilings: 30 s, 1536 MiB, and output at most twice the expansion limit
     * plus 2 kB of resolved options per point */
    ck_assert_msg(c.code == 0, "exit %d: %s", c.code, c.err ? c.err : "");
    ck_assert_msg(c.seconds < 30.0 * SAN_FACTOR, "ttt check took %.1f s", c.seconds);
    ck_assert_msg(c.rss_mib < 1536.0 * SAN_FACTOR, "ttt check peaked at %.0f MiB", c.rss_mib);
    ck_assert_msg(c.out_bytes < 2 * TTT_CFG_MAX_EXPANDED_BYTES + 2048L * TTT_CFG_MAX_SWEEP_POINTS,
                  "ttt check printed %ld bytes", c.out_bytes);
    free(c.err);
    /* past the limit: 10 000 points of 100 kB (1 GB, the reported 24 GB case in small) */
    doc = sweep_doc(100000);
    write_text(path, doc);
    free(doc);
    c = run_ttt(dir, args, 0, 60.0 * SAN_FACTOR);
    ck_assert_int_eq(c.code, 2);
    ck_assert_msg(c.err && strstr(c.err, "bytes of text each is too much to expand") &&
                      strstr(c.err, "67108864 bytes over all points"),
                  "%s", c.err ? c.err : "");
    ck_assert_msg(c.seconds < 5.0 * SAN_FACTOR && c.rss_mib < 256.0 * SAN_FACTOR,
                  "refusing took %.1f s, %.0f MiB", c.seconds, c.rss_mib);
    free(c.err);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* The sweep's value limit: 10 000 points of 200 values (a point is 7 values plus the list of
 * `pairs`) is the most allowed; one value more per point is refused. */
static char *values_doc(int n_pairs) {
    ttt_strbuf b = {0};
    ttt_strbuf_printf(&b, "name: big\ntask: {kind: memory, key_dim: 8, value_dim: 8, pairs: [");
    for (int i = 0; i < n_pairs; i++) ttt_strbuf_printf(&b, "%s1", i ? ", " : "");
    ttt_strbuf_printf(&b, "]}\n");
    return with_sweep(&b);
}

START_TEST(sweep_at_the_value_limit_is_checked_within_bounds) {
    char *dir = tu_mkdtemp();
    char path[512];
    snprintf(path, sizeof path, "%s/values.yaml", dir);
    char *doc = values_doc(193);
    write_text(path, doc);
    free(doc);
    const char *args[] = {"check", path, NULL};
    run_cost c = run_ttt(dir, args, 0, 180.0 * SAN_FACTOR);
    /* measured 4.0 s and 966 MiB (the 10 000 validated trees, defaults filled in); ceilings 30 s
     * and 2 GiB */
    ck_assert_msg(c.code == 0, "exit %d: %s", c.code, c.err ? c.err : "");
    ck_assert_msg(c.seconds < 30.0 * SAN_FACTOR, "took %.1f s", c.seconds);
    ck_assert_msg(c.rss_mib < 2048.0 * SAN_FACTOR, "peaked at %.0f MiB", c.rss_mib);
    free(c.err);
    doc = values_doc(194);
    write_text(path, doc);
    free(doc);
    c = run_ttt(dir, args, 0, 60.0 * SAN_FACTOR);
    ck_assert_int_eq(c.code, 2);
    ck_assert_msg(c.err && strstr(c.err, "10000 points of 201 values each is too much"), "%s",
                  c.err ? c.err : "");
    free(c.err);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* A mapping of 200 000 keys, the last a duplicate of the first: found in linear time. */
START_TEST(duplicate_keys_are_found_in_linear_time) {
    const int n = 200000;
    ttt_strbuf b = {0};
    for (int i = 0; i < n; i++) ttt_strbuf_printf(&b, "key%d: %d\n", i, i);
    ttt_strbuf_printf(&b, "key0: again\n");
    ck_assert(!b.failed);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    const double t0 = now();
    ttt_status s = ttt_cfg_load_string(b.data, "keys.yaml", &root, &err);
    const double t = now() - t0;
    ck_assert_int_eq(s, TTT_ERR_YAML);
    ck_assert_msg(strstr(err.msg, "keys.yaml:200001:1: duplicate key 'key0'") &&
                      strstr(err.msg, "first written at line 1, column 1"),
                  "%s", err.msg);
    /* measured 0.25 s; a scan per key (n²/2 = 2·10^10 comparisons) takes over a minute */
    ck_assert_msg(t < 5.0 * SAN_FACTOR, "200 000 keys took %.1f s", t);
    ttt_strbuf_free(&b);
}
END_TEST

/* The alias limit: 100 000 aliases, each of its own anchor (anchors are found by name). */
START_TEST(many_anchors_and_aliases_load_in_linear_time) {
    const int n = TTT_CFG_MAX_ALIAS_NODES / 2; /* anchors: a scalar each; aliases: one each */
    ttt_strbuf b = {0};
    ttt_strbuf_printf(&b, "defs:\n");
    for (int i = 0; i < n; i++) ttt_strbuf_printf(&b, "  d%d: &a%d %d\n", i, i, i);
    ttt_strbuf_printf(&b, "uses:\n");
    for (int i = 0; i < n; i++) ttt_strbuf_printf(&b, "  - *a%d\n", i);
    ck_assert(!b.failed);
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    const double t0 = now();
    ttt_status s = ttt_cfg_load_string(b.data, "aliases.yaml", &root, &err);
    const double t = now() - t0;
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    const ttt_cfg_node *uses = ttt_cfg_get(root, "uses");
    ck_assert_int_eq(uses->n, n);
    ck_assert_str_eq(uses->items[n - 1]->scalar, "49999");
    /* measured 0.1 s; a scan of the anchors per alias (n²/2 = 1.25·10^9) takes seconds to
     * minutes */
    ck_assert_msg(t < 3.0 * SAN_FACTOR, "%d aliases took %.1f s", n, t);
    ttt_cfg_free(root);
    ttt_strbuf_free(&b);
}
END_TEST

/* Aliases bounded in bytes: 63 copies of a 1 MiB string fit in 64 MiB, 65 do not. */
static ttt_status load_copies(int copies, ttt_error *err, double *seconds) {
    ttt_strbuf b = {0};
    ttt_strbuf_printf(&b, "s: &big ");
    for (int i = 0; i < (1 << 20); i++) ttt_strbuf_append(&b, "y", 1);
    ttt_strbuf_printf(&b, "\nl:\n");
    for (int i = 0; i < copies; i++) ttt_strbuf_printf(&b, "  - *big\n");
    ck_assert(!b.failed);
    ttt_cfg_node *root = NULL;
    const double t0 = now();
    ttt_status s = ttt_cfg_load_string(b.data, "copies.yaml", &root, err);
    *seconds = now() - t0;
    ttt_cfg_free(root);
    ttt_strbuf_free(&b);
    return s;
}

START_TEST(alias_expansion_is_bounded_in_bytes) {
    ttt_error err = {0};
    double t;
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    ck_assert_int_eq(load_copies(63, &err, &t), TTT_OK);
    getrusage(RUSAGE_SELF, &after);
    /* measured 0.1 s and 64 MiB more peak RSS (the copies themselves) */
    ck_assert_msg(t < 5.0 * SAN_FACTOR, "63 MiB of aliases took %.1f s", t);
    ck_assert_msg((after.ru_maxrss - before.ru_maxrss) / 1024.0 < 512.0 * SAN_FACTOR,
                  "peak RSS grew by %.0f MiB", (after.ru_maxrss - before.ru_maxrss) / 1024.0);
    ck_assert_int_eq(load_copies(65, &err, &t), TTT_ERR_YAML);
    ck_assert_msg(strstr(err.msg, "aliases expand to more than 67108864 bytes of text"), "%s",
                  err.msg);
}
END_TEST

/* The largest YAML file allowed (16 MiB) is read and checked within bounds; one byte more is
 * refused. */
START_TEST(largest_yaml_file_is_checked_within_bounds) {
    char *dir = tu_mkdtemp();
    char path[512];
    snprintf(path, sizeof path, "%s/file.yaml", dir);
    const long limit = 16L << 20;
    const char *head = "task: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8}\ndescription: ";
    char *text = malloc((size_t)limit + 2);
    ck_assert_ptr_nonnull(text);
    const long hl = (long)strlen(head);
    memcpy(text, head, (size_t)hl);
    memset(text + hl, 'z', (size_t)(limit - hl - 1));
    text[limit - 1] = '\n';
    text[limit] = '\0';
    write_text(path, text);
    const char *args[] = {"check", path, NULL};
    run_cost c = run_ttt(dir, args, 0, 60.0 * SAN_FACTOR);
    /* measured 0.2 s, 100 MiB; ceilings 10 s, 512 MiB */
    ck_assert_msg(c.code == 0, "exit %d: %s", c.code, c.err ? c.err : "");
    ck_assert_msg(c.seconds < 10.0 * SAN_FACTOR, "took %.1f s", c.seconds);
    ck_assert_msg(c.rss_mib < 512.0 * SAN_FACTOR, "peaked at %.0f MiB", c.rss_mib);
    free(c.err);
    text[limit - 1] = 'z';
    text[limit] = '\n';
    text[limit + 1] = '\0';
    write_text(path, text);
    c = run_ttt(dir, args, 0, 60.0 * SAN_FACTOR);
    ck_assert_int_ne(c.code, 0);
    ck_assert_msg(c.err && strstr(c.err, "16777216"), "%s", c.err ? c.err : "");
    free(c.err);
    free(text);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* The largest safetensors header allowed (100 MB, here JSON padded with spaces) is read within
 * bounds. */
START_TEST(largest_safetensors_header_is_read_within_bounds) {
    const size_t hlen = (size_t)TTT_ST_MAX_HEADER;
    unsigned char *buf = malloc(8 + hlen + 4);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    const char *json = "{\"q\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    memset(buf + 8, ' ', hlen);
    memcpy(buf + 8, json, strlen(json));
    memset(buf + 8 + hlen, 0, 4);
    ttt_st_file *f = NULL;
    ttt_error err = {0};
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    const double t0 = now();
    ttt_status s = ttt_st_read_mem(buf, 8 + hlen + 4, "big.safetensors", &f, &err);
    const double t = now() - t0;
    getrusage(RUSAGE_SELF, &after);
    ck_assert_msg(s == TTT_OK, "%s", err.msg);
    ck_assert_int_eq(f->n, 1);
    /* measured 0.15 s; ceilings 5 s and 512 MiB more peak RSS (the header is 100 MB) */
    ck_assert_msg(t < 5.0 * SAN_FACTOR, "took %.1f s", t);
    ck_assert_msg((after.ru_maxrss - before.ru_maxrss) / 1024.0 < 512.0 * SAN_FACTOR,
                  "peak RSS grew by %.0f MiB", (after.ru_maxrss - before.ru_maxrss) / 1024.0);
    ttt_st_free(f);
    free(buf);
}
END_TEST

#ifndef TTT_ASAN /* see main */
/* Under an address-space limit (`ulimit -v`) too small for a run, `ttt run` exits 1 at once with
 * a message naming the limit, writes no results, and does not spin in OpenBLAS's allocation
 * retry loop (which it did at 150 000 KiB with two BLAS threads). */
START_TEST(address_space_limit_ends_in_a_clear_error) {
    char *dir = tu_mkdtemp();
    char path[512], out[512], summary[600];
    snprintf(path, sizeof path, "%s/tiny.yaml", dir);
    snprintf(out, sizeof out, "%s/run", dir);
    snprintf(summary, sizeof summary, "%s/summary.csv", out);
    write_text(path, "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 32,\n"
                     "       test_examples: 8}\n"
                     "model: {d_model: 16, layers: 1, heads: 2}\n"
                     "layer: {preset: deltanet}\n"
                     "train: {steps: 3, batch: 4, log_every: 1, checkpoint_every: 0}\n");
    const char *threads[] = {"1", "2"};
    for (int t = 0; t < 2; t++) {
        setenv("OPENBLAS_NUM_THREADS", threads[t], 1);
        unsetenv("TTT_ADDRESS_LIMIT_RESTART");
        for (long kib = 150000; kib <= 250000; kib += 100000) {
            const char *args[] = {"run", path, "--out", out, NULL};
            run_cost c = run_ttt(dir, args, kib, 30.0);
            /* measured 0.05 s */
            ck_assert_msg(c.code == 1, "ulimit -v %ld, %s BLAS threads: exit %d after %.1f s: %s",
                          kib, threads[t], c.code, c.seconds, c.err ? c.err : "");
            ck_assert_msg(c.err && strstr(c.err, "address-space limit (ulimit -v)") &&
                              strstr(c.err, "would need"),
                          "%s", c.err ? c.err : "");
            ck_assert_msg(c.seconds < 10.0, "took %.1f s", c.seconds);
            ck_assert_int_ne(access(summary, F_OK), 0);
            free(c.err);
        }
    }
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    tu_rmtree(dir);
    free(dir);
}
END_TEST


/* `ttt check` refuses exactly what `ttt run` cannot hold: over random small trained
 * configurations and random address-space limits, every configuration `check` accepts runs to
 * the end (exit 0), and every one it refuses for memory `run` refuses the same way (exit 1,
 * before anything is written). Both outcomes must occur, or the property was not exercised. */
START_TEST(check_refuses_exactly_what_run_cannot_hold) {
    static const char *const presets[] = {"deltanet", "gated_deltanet", "ttt_linear", "titans",
                                          "linear_attention"};
    static const char *const blas[] = {"1", "2"};
    char *dir = tu_mkdtemp();
    char path[512], out[512];
    snprintf(path, sizeof path, "%s/p.yaml", dir);
    snprintf(out, sizeof out, "%s/run", dir);
    uint64_t r = 12345;
    int accepted = 0, refused = 0;
    for (int trial = 0; trial < 20; trial++) {
        r = r * 6364136223846793005u + 1442695040888963407u;
        const int d = 8 << (int)((r >> 33) % 4), layers = 1 + (int)((r >> 40) % 2);
        const int batch = 2 << (int)((r >> 44) % 3), seq = 16 << (int)((r >> 48) % 2);
        const char *preset = presets[(r >> 52) % 5];
        const long kib = 300000 + 50000 * (long)((r >> 20) % 10); /* 293 to 732 MiB */
        char yaml[1024];
        snprintf(yaml, sizeof yaml,
                 "task: {kind: mqar, vocab: 32, seq_len: %d, pairs: 2, train_examples: 64,\n"
                 "       test_examples: 16}\n"
                 "model: {d_model: %d, layers: %d, heads: 2}\n"
                 "layer: {preset: %s}\n"
                 "train: {steps: 3, batch: %d, log_every: 1, checkpoint_every: 0}\n",
                 seq, d, layers, preset, batch);
        write_text(path, yaml);
        setenv("OPENBLAS_NUM_THREADS", blas[(r >> 30) % 2], 1);
        unsetenv("TTT_ADDRESS_LIMIT_RESTART");
        const char *cargs[] = {"check", path, NULL};
        run_cost c = run_ttt(dir, cargs, kib, 30.0);
        tu_rmtree(out);
        const char *rargs[] = {"run", path, "--out", out, NULL};
        run_cost g = run_ttt(dir, rargs, kib, 60.0);
        ck_assert_msg(c.code == 0 || (c.code == 1 && c.err && strstr(c.err, "would need")),
                      "check under ulimit -v %ld: exit %d: %s\n%s", kib, c.code,
                      c.err ? c.err : "", yaml);
        ck_assert_msg(g.code == c.code,
                      "ulimit -v %ld, %s BLAS threads: check exit %d, run exit %d (%s)\n%s", kib,
                      getenv("OPENBLAS_NUM_THREADS"), c.code, g.code, g.err ? g.err : "", yaml);
        if (c.code == 0) accepted++;
        else refused++;
        free(c.err);
        free(g.err);
    }
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    ck_assert_msg(accepted > 0 && refused > 0, "accepted %d, refused %d", accepted, refused);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

#endif

int main(void) {
    Suite *s = suite_create("limits");
    TCase *tc = tcase_create("limits");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sweep_at_the_byte_limit_is_checked_within_bounds);
    tcase_add_test(tc, sweep_at_the_value_limit_is_checked_within_bounds);
    tcase_add_test(tc, duplicate_keys_are_found_in_linear_time);
    tcase_add_test(tc, many_anchors_and_aliases_load_in_linear_time);
    tcase_add_test(tc, alias_expansion_is_bounded_in_bytes);
    tcase_add_test(tc, largest_yaml_file_is_checked_within_bounds);
    tcase_add_test(tc, largest_safetensors_header_is_read_within_bounds);
#ifndef TTT_ASAN
    /* AddressSanitizer reserves terabytes of address space for its shadow memory, so a program
     * built with it cannot start under an address-space limit at all. */
    tcase_add_test(tc, address_space_limit_ends_in_a_clear_error);
    tcase_add_test(tc, check_refuses_exactly_what_run_cannot_hold);
#endif
    suite_add_tcase(s, tc);
    return tu_run(s);
}
