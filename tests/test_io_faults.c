/* I/O-failure injection on real `ttt run` processes (docs/hardening.md "I/O faults"): with the
 * shim tests/shim/io_fault.c preloaded, the Nth write / fsync / rename / mkdir / open (for
 * writing) under the run folder fails, for every N that a training run with checkpoints reaches.
 *
 * The run resumes a folder that holds an earlier, complete run (stopped at step 20 of 40 with
 * train.stop_at), so there are earlier outputs to keep. For each fault:
 *   - the run fails naming the injected cause ("No space left on device" for ENOSPC and for a
 *     short write followed by ENOSPC, "Input/output error" for EIO), or — a fault that does not
 *     matter, such as mkdir of a folder that exists — succeeds with the reference results;
 *   - summary.csv, metrics.jsonl and index.html are each either the earlier run's bytes or a
 *     complete file of the new run, never half-written;
 *   - no temporary file is left;
 *   - the same command again, without faults, ends with the evaluation records and the summary
 *     losses of an uninterrupted run, bit for bit.
 * And over a memory run: a fault in any write, fsync or rename, the last ones included, never
 * leaves the folder marked complete (.ttt-complete is written after everything it vouches for,
 * provenance.json's outcome included), so the same command again runs rather than reporting a
 * completed run. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static char *dir;

static const char *config =
    "name: io\n"
    "seed: 2\n"
    "task: {kind: mqar, vocab: 16, seq_len: 8, pairs: 2, train_examples: 200, test_examples: 20}\n"
    "model: {d_model: 8, layers: 1, heads: 1, mlp: 0, conv: 0}\n"
    "layer: {preset: gated_deltanet}\n"
    "train: {steps: 40, batch: 4, shards: 1, warmup: 5, log_every: 5, eval_every: 20,\n"
    "        checkpoint_every: 10}\n";

static const char *bin(void) {
    const char *b = getenv("TTT_BIN");
    return b ? b : "build/ttt";
}

static const char *shim(void) { return getenv("TTT_IO_FAULT"); }

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *cmd;
    ck_assert(vasprintf(&cmd, fmt, ap) > 0);
    va_end(ap);
    int st = system(cmd);
    free(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *read_in(const char *rel) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    return tu_read_file(p);
}

/* `ttt run` of the experiment into DIR/<out>; `env` goes before the command (faults). */
static int run(const char *env, const char *out, const char *extra) {
    return sh("cd %s && %s %s run f.yaml --out %s --quiet %s >/dev/null 2>%s.err", dir, env, bin(),
              out, extra, out);
}

/* The records that must not depend on faults: every evaluation record (full precision). */
static char *eval_lines(const char *out) {
    char rel[300];
    snprintf(rel, sizeof rel, "%s/metrics.jsonl", out);
    char *m = read_in(rel);
    ck_assert_msg(m != NULL, "no %s", rel);
    size_t cap = strlen(m) + 1, n = 0;
    char *res = calloc(cap, 1);
    for (char *line = strtok(m, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, "\"kind\":\"eval\""))
            n += (size_t)snprintf(res + n, cap - n, "%s\n", line);
    free(m);
    return res;
}

/* "train_loss,eval_loss" cells of the summary row (the columns that do not depend on time). */
static char *summary_losses(const char *out) {
    char rel[300];
    snprintf(rel, sizeof rel, "%s/summary.csv", out);
    char *t = read_in(rel);
    if (!t) return strdup("(no summary.csv)");
    char *row = strchr(t, '\n');
    if (!row) return t;
    *row++ = '\0';
    int want[2] = {-1, -1}, k = 0;
    for (char *h = strtok(t, ","); h; h = strtok(NULL, ","), k++) {
        if (strcmp(h, "train_loss") == 0) want[0] = k;
        if (strcmp(h, "eval_loss") == 0) want[1] = k;
    }
    char *res = calloc(256, 1);
    k = 0;
    for (char *c = row; c; c = strchr(c, ','), c = c ? c + 1 : NULL, k++) {
        size_t l = strcspn(c, ",\n");
        if (k == want[0] || k == want[1]) strncat(res, c, l < 60 ? l : 60), strcat(res, ";");
    }
    free(t);
    return res;
}

static const char *const kept_files[] = {"summary.csv", "metrics.jsonl", "index.html"};

/* A complete file of the new run (the run got that far before the fault). */
static int complete_new(int i, const char *text, const char *ref_losses, const char *out) {
    size_t n = strlen(text);
    if (i == 0) {
        char *l = summary_losses(out);
        int ok = strcmp(l, ref_losses) == 0;
        free(l);
        return ok;
    }
    if (i == 1) return n > 2 && strcmp(text + n - 2, "}\n") == 0 && strstr(text, "\"summary\"");
    return n > 8 && strcmp(text + n - 8, "</html>\n") == 0;
}

START_TEST(every_nth_io_call_fails_cleanly_and_the_run_resumes) {
    ck_assert_msg(shim() != NULL, "TTT_IO_FAULT (the shim library) is not set");
    char p[600];
    snprintf(p, sizeof p, "%s/f.yaml", dir);
    ck_assert_int_eq(tu_write_file(p, config), 0);
    /* the reference: uninterrupted */
    ck_assert_int_eq(run("", "ref", ""), 0);
    char *ref_eval = eval_lines("ref"), *ref_losses = summary_losses("ref");
    /* the earlier outputs: the same run stopped at step 20 */
    ck_assert_int_eq(run("", "base", "--set train.stop_at=20"), 0);
    char *base[3];
    for (int i = 0; i < 3; i++) {
        char rel[300];
        snprintf(rel, sizeof rel, "base/%s", kept_files[i]);
        ck_assert_ptr_nonnull(base[i] = read_in(rel));
    }
    /* how many calls of each operation the run makes */
    ck_assert_int_eq(sh("rm -rf %s/cnt && cp -a %s/base %s/cnt", dir, dir, dir), 0);
    char env[2048];
    /* under AddressSanitizer the shim comes before its runtime in the library list, which it
     * refuses by default; the interposition itself works (the shim calls the next write) */
    const char *asan = "ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\"";
    snprintf(env, sizeof env, "%s TTT_FAULT_DIR=%s/cnt TTT_FAULT_COUNTS=%s/counts LD_PRELOAD=%s",
             asan, dir, dir, shim());
    ck_assert_int_eq(run(env, "cnt", ""), 0);
    char *counts = read_in("counts");
    ck_assert_ptr_nonnull(counts);
    static const char *const ops[] = {"write", "fsync", "rename", "mkdir", "open"};
    int trials = 0, failed = 0;
    for (int o = 0; o < 5; o++) {
        char key[32];
        snprintf(key, sizeof key, "%s ", ops[o]);
        const char *c = strstr(counts, key);
        ck_assert(c != NULL);
        long n_calls = atol(c + strlen(key));
        ck_assert_msg(n_calls > 0, "the run made no %s call under its folder", ops[o]);
        for (long n = 1; n <= n_calls; n++) {
            /* EIO and ENOSPC alternate; every third write is a short write, then ENOSPC */
            const char *kind = o == 0 && n % 3 == 0 ? "short" : n % 2 ? "eio" : "enospc";
            const char *cause = kind[0] == 'e' && kind[1] == 'i' ? "Input/output error"
                                                                 : "No space left on device";
            ck_assert_int_eq(sh("rm -rf %s/f && cp -a %s/base %s/f", dir, dir, dir), 0);
            snprintf(env, sizeof env,
                     "%s TTT_FAULT_DIR=%s/f TTT_FAULT_OP=%s TTT_FAULT_N=%ld TTT_FAULT_KIND=%s "
                     "LD_PRELOAD=%s",
                     asan, dir, ops[o], n, kind, shim());
            int rc = run(env, "f", "");
            char *err = read_in("f.err");
            trials++;
            if (rc != 0) {
                failed++;
                ck_assert_msg(rc == 1 && strstr(err, "ttt: error:") && strstr(err, cause),
                              "%s #%ld (%s): exit %d, the message does not name '%s': %s",
                              ops[o], n, kind, rc, cause, err);
                for (int i = 0; i < 3; i++) {
                    char rel[300];
                    snprintf(rel, sizeof rel, "f/%s", kept_files[i]);
                    char *t = read_in(rel);
                    ck_assert_msg(t && (strcmp(t, base[i]) == 0 ||
                                        complete_new(i, t, ref_losses, "f")),
                                  "%s #%ld (%s): %s is half-written (%s)", ops[o], n, kind,
                                  kept_files[i], err);
                    free(t);
                }
            }
            ck_assert_msg(sh("test -z \"$(find %s/f -name '.*.tmp.*')\"", dir) == 0,
                          "%s #%ld (%s): temporary files left: %s", ops[o], n, kind, err);
            free(err);
            /* the same command again, without faults */
            ck_assert_int_eq(run("", "f", ""), 0);
            char *got = eval_lines("f"), *losses = summary_losses("f");
            ck_assert_msg(strcmp(got, ref_eval) == 0, "%s #%ld (%s): evaluations differ",
                          ops[o], n, kind);
            ck_assert_msg(strcmp(losses, ref_losses) == 0, "%s #%ld (%s): losses %s, want %s",
                          ops[o], n, kind, losses, ref_losses);
            free(got), free(losses);
        }
    }
    printf("io faults: %d injected, %d ended in an error, %d did not matter\n", trials, failed,
           trials - failed);
    ck_assert_int_gt(failed, trials / 2);
    for (int i = 0; i < 3; i++) free(base[i]);
    free(counts), free(ref_eval), free(ref_losses);
}
END_TEST

/* Every rename into the run folder is followed, before the process ends, by an fsync of the
 * folder it renamed into (without it a crash can lose the rename although the file's data
 * were fsynced). The shim logs both (TTT_FAULT_LOG) over a run with checkpoints that resumes
 * an earlier one. */
START_TEST(every_rename_is_followed_by_an_fsync_of_its_folder) {
    ck_assert_msg(shim() != NULL, "TTT_IO_FAULT (the shim library) is not set");
    char p[600];
    snprintf(p, sizeof p, "%s/f.yaml", dir);
    ck_assert_int_eq(tu_write_file(p, config), 0);
    ck_assert_int_eq(run("", "log", "--set train.stop_at=20"), 0);
    char env[2048];
    const char *asan = "ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\"";
    snprintf(env, sizeof env, "%s TTT_FAULT_DIR=%s/log TTT_FAULT_LOG=%s/log.txt LD_PRELOAD=%s",
             asan, dir, dir, shim());
    ck_assert_int_eq(run(env, "log", ""), 0);
    char *log = read_in("log.txt");
    ck_assert_ptr_nonnull(log);
    int renames = 0, folders = 0;
    for (char *line = log; *line;) {
        char *end = strchr(line, '\n');
        ck_assert_ptr_nonnull(end);
        *end = '\0';
        if (strncmp(line, "rename ", 7) == 0) {
            renames++;
            /* the folder of the target, then an fsync of it somewhere after this line */
            char want[4200];
            const char *target = line + 7, *slash = strrchr(target, '/');
            ck_assert_ptr_nonnull(slash);
            snprintf(want, sizeof want, "\nfsyncdir %.*s\n", (int)(slash - target), target);
            *end = '\n';
            ck_assert_msg(strstr(end, want) != NULL, "'%s' was renamed, and its folder was "
                          "never fsynced after it", target);
        } else {
            folders += strncmp(line, "fsyncdir ", 9) == 0;
            *end = '\n';
        }
        line = end + 1;
    }
    /* checkpoints (two each time), the record journal, summary, metrics, page, charts… (at
     * the time of writing: 11 renames) */
    ck_assert_int_ge(renames, 6);
    ck_assert_int_ge(folders, 1);
    free(log);
}
END_TEST


/* The completion mark comes last. Before, it was written before provenance.json's final
 * outcome: a disk that filled on that last write left `"outcome": "running"` in a folder marked
 * complete, and the same command again said the run was complete. Every write, fsync and
 * rename under the folder of a memory run is failed in turn (ENOSPC); whenever the run fails
 * there is no mark, and the same command again runs and ends complete. */
START_TEST(a_failed_last_write_never_leaves_the_folder_marked_complete) {
    ck_assert_msg(shim() != NULL, "TTT_IO_FAULT (the shim library) is not set");
    char p[600];
    snprintf(p, sizeof p, "%s/f.yaml", dir);
    ck_assert_int_eq(tu_write_file(p, "name: mark\ntask: {kind: memory, pairs: [4, 8], "
                                      "key_dim: 8, value_dim: 8, trials: 1}\n"
                                      "layer: {preset: deltanet}\n"), 0);
    const char *asan = "ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\"";
    char env[2048];
    /* the folder exists before each run, so that the shim can name it */
    ck_assert_int_eq(sh("mkdir -p %s/cnt", dir), 0);
    snprintf(env, sizeof env, "%s TTT_FAULT_DIR=%s/cnt TTT_FAULT_COUNTS=%s/counts LD_PRELOAD=%s",
             asan, dir, dir, shim());
    ck_assert_int_eq(run(env, "cnt", ""), 0);
    char *counts = read_in("counts");
    ck_assert_ptr_nonnull(counts);
    static const char *const ops[] = {"write", "fsync", "rename"};
    int failed = 0, last_failed = 0;
    for (int o = 0; o < 3; o++) {
        char key[32];
        snprintf(key, sizeof key, "%s ", ops[o]);
        const char *c = strstr(counts, key);
        ck_assert(c != NULL);
        const long n_calls = atol(c + strlen(key));
        ck_assert_msg(n_calls > 2, "the run made %ld %s calls", n_calls, ops[o]);
        for (long n = 1; n <= n_calls; n++) {
            ck_assert_int_eq(sh("rm -rf %s/f && mkdir %s/f", dir, dir), 0);
            snprintf(env, sizeof env,
                     "%s TTT_FAULT_DIR=%s/f TTT_FAULT_OP=%s TTT_FAULT_N=%ld "
                     "TTT_FAULT_KIND=enospc LD_PRELOAD=%s", asan, dir, ops[o], n, shim());
            const int rc = run(env, "f", "");
            char *err = read_in("f.err");
            char *prov = read_in("f/provenance.json");
            snprintf(p, sizeof p, "%s/f/.ttt-complete", dir);
            const int marked = access(p, F_OK) == 0;
            if (rc != 0) {
                failed++;
                last_failed += n == n_calls;
                ck_assert_msg(!marked, "%s #%ld of %ld failed (%s), and the folder is marked "
                              "complete; provenance.json: %s", ops[o], n, n_calls, err,
                              prov ? prov : "(none)");
            } else {
                ck_assert_msg(marked && prov && strstr(prov, "\"outcome\": \"complete\""),
                              "%s #%ld: the run succeeded, and the folder is %smarked complete; "
                              "provenance.json: %s", ops[o], n, marked ? "" : "not ",
                              prov ? prov : "(none)");
            }
            free(err), free(prov);
            /* the same command again, without faults: it runs (or finds the completed run) and
             * ends complete */
            ck_assert_int_eq(run("", "f", ""), 0);
            err = read_in("f.err");
            ck_assert_msg(rc == 0 || !strstr(err, "completed run"),
                          "%s #%ld: after a failed run the folder counts as complete: %s", ops[o],
                          n, err);
            prov = read_in("f/provenance.json");
            ck_assert_msg(prov && strstr(prov, "\"outcome\": \"complete\""), "%s #%ld: %s", ops[o],
                          n, prov ? prov : "(none)");
            free(err), free(prov);
        }
    }
    /* the last write, fsync and rename (the mark's own) each failed the run */
    ck_assert_int_eq(last_failed, 3);
    ck_assert_int_gt(failed, 0);
    free(counts);
}
END_TEST

static void setup(void) { dir = tu_mkdtemp(); }
static void teardown(void) {
    tu_rmtree(dir);
    free(dir);
}

static Suite *io_faults_suite(void) {
    Suite *s = suite_create("io_faults");
    TCase *tc = tcase_create("io_faults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, every_nth_io_call_fails_cleanly_and_the_run_resumes);
    suite_add_tcase(s, tc);
    TCase *dur = tcase_create("io_faults_durability");
    tcase_add_checked_fixture(dur, setup, teardown);
    tcase_set_timeout(dur, 600);
    tcase_add_test(dur, every_rename_is_followed_by_an_fsync_of_its_folder);
    tcase_add_test(dur, a_failed_last_write_never_leaves_the_folder_marked_complete);
    suite_add_tcase(s, dur);
    return s;
}

int main(void) { return tu_run(io_faults_suite()); }
