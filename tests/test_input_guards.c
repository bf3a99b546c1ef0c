/* What the program reads back and what stops it, on real `ttt` processes (docs/hardening.md
 * "Record checksums", "Inputs that are not files", "Signals"):
 *   - a record journal (checkpoints/point0/records.jsonl) with one changed digit is refused when
 *     a resume reads it, naming the file and line; the unchanged journal resumes;
 *   - a FIFO where an input file is expected (an experiment or layer file, an `apply` input, an
 *     lm token file during `check`, a checkpoint) is refused at once instead of waiting for a
 *     writer; so is a FIFO in place of a point's record journal;
 *   - `ttt sample --seed` takes the range of `seed:` in an experiment file, with its message;
 *   - SIGTERM ends a memory measurement inside its single long write pass (the generic driver
 *     of a wide MLP), not after it. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static char *dir;

/* A tiny trained point with checkpoints every 10 steps and a record every 5. */
static const char *train_cfg =
    "name: tiny\n"
    "seed: 5\n"
    "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 3, train_examples: 256,\n"
    "       test_examples: 32, eval_batch: 32}\n"
    "model: {d_model: 16, layers: 1, heads: 2, mlp: 0, conv: 3}\n"
    "layer: {preset: deltanet}\n"
    "train: {steps: 30, batch: 8, lr: 1e-2, warmup: 5, log_every: 5, eval_every: 10,\n"
    "        checkpoint_every: 10}\n";

static const char *layer_cfg = "layer: {preset: deltanet}\n";

/* One memory measurement whose write pass alone takes many seconds: TTT-MLP of width 1024 (a
 * hidden layer of 4096) over 1024 tokens runs the generic driver, tens of milliseconds per
 * token in a release build (tens of seconds for the pass: a stop at its start used to wait 34.9 s
 * on an idle 2-core machine, 76.7 s on a loaded one), many times that under the sanitizers. */
static const char *wide_memory_cfg =
    "name: wide\n"
    "task: {kind: memory, pairs: [1024], key_dim: 1024, value_dim: 1024, trials: 1}\n"
    "layer: {preset: ttt_mlp}\n";

static char *path_in(const char *rel) {
    char *p = malloc(strlen(dir) + strlen(rel) + 2);
    ck_assert_ptr_nonnull(p);
    sprintf(p, "%s/%s", dir, rel);
    return p;
}

static void write_in(const char *rel, const char *text) {
    char *p = path_in(rel);
    ck_assert_int_eq(tu_write_file(p, text), 0);
    free(p);
}

static void fifo_in(const char *rel) {
    char *p = path_in(rel);
    unlink(p);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    free(p);
}

static void setup(void) {
    dir = tu_mkdtemp();
    write_in("t.yaml", train_cfg);
    write_in("layer.yaml", layer_cfg);
    write_in("wide.yaml", wide_memory_cfg);
}
static void teardown(void) {
    tu_rmtree(dir);
    free(dir);
}

/* The program, as an absolute path: the children run in dir. */
static const char *bin(void) {
    static char abs[4096];
    const char *b = getenv("TTT_BIN");
    if (!b) b = "build/ttt";
    if (b[0] != '/' && realpath(b, abs)) return abs;
    return b;
}

/* Start `ttt argv…` in dir (argv NULL-terminated, at most 15), stderr to DIR/<tag>.err. An
 * alarm ends a child that blocks (a read of a FIFO that never gets a writer), so that a
 * regression fails the test with SIGALRM instead of hanging the suite; the alarm's 120 s is a
 * guard, not a speed bound: every command here either fails at once or runs a few seconds. */
static pid_t start(const char *tag, const char *const *argv) {
    const char *program = bin();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char e[4096];
        snprintf(e, sizeof e, "%s/%s.err", dir, tag);
        if (chdir(dir) != 0 || !freopen(e, "w", stderr) || !freopen("/dev/null", "w", stdout))
            _exit(99);
        const char *args[16] = {program};
        for (int i = 0; argv[i] && i < 14; i++) args[i + 1] = argv[i];
        alarm(120);
        execv(program, (char *const *)args);
        _exit(98);
    }
    return pid;
}

/* Exit status, or −(signal) when killed. */
static int wait_exit(pid_t pid) {
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

/* Run to the end; the exit status, and its stderr in *err (malloc'd). */
static int run_cmd(const char *tag, const char *const *argv, char **err) {
    int rc = wait_exit(start(tag, argv));
    char rel[300];
    snprintf(rel, sizeof rel, "%s.err", tag);
    char *p = path_in(rel);
    *err = tu_read_file(p);
    free(p);
    if (!*err) *err = strdup("");
    return rc;
}

/* ---- record journals ---- */

/* The first record's loss in the journal of `out`, one digit changed (the first after "0." or
 * "1." or "2."): the line stays valid JSON and a valid record, only its checksum tells. */
static void change_a_digit(const char *out) {
    char rel[300];
    snprintf(rel, sizeof rel, "%s/checkpoints/point0/records.jsonl", out);
    char *p = path_in(rel);
    char *text = tu_read_file(p);
    ck_assert_msg(text != NULL, "no journal %s", p);
    char *loss = strstr(text, "\"loss\":");
    ck_assert_ptr_nonnull(loss);
    char *d = loss + strlen("\"loss\":") + 2; /* e.g. 2.740… → the 7 */
    ck_assert_msg(*d >= '0' && *d <= '9', "%s", loss);
    *d = *d == '5' ? '6' : '5';
    ck_assert_int_eq(tu_write_file(p, text), 0);
    free(text);
    free(p);
}

START_TEST(a_changed_digit_in_the_record_journal_is_refused) {
    char *err;
    /* two runs stopped at step 25 (checkpoint at 20 holds the journal up to it) */
    const char *const stop_a[] = {"run", "t.yaml", "--out", "a", "--quiet", "--set",
                                  "train.stop_at=25", NULL};
    const char *const stop_b[] = {"run", "t.yaml", "--out", "b", "--quiet", "--set",
                                  "train.stop_at=25", NULL};
    ck_assert_msg(run_cmd("a1", stop_a, &err) == 0, "%s", err);
    free(err);
    ck_assert_msg(run_cmd("b1", stop_b, &err) == 0, "%s", err);
    free(err);
    change_a_digit("b");
    /* the untouched journal resumes to the end; the changed one is refused at its line */
    const char *const resume_a[] = {"run", "t.yaml", "--out", "a", "--quiet", NULL};
    const char *const resume_b[] = {"run", "t.yaml", "--out", "b", "--quiet", NULL};
    int rc = run_cmd("a2", resume_a, &err);
    ck_assert_msg(rc == 0, "the unchanged journal: exit %d: %s", rc, err);
    free(err);
    rc = run_cmd("b2", resume_b, &err);
    ck_assert_msg(rc == 1, "the changed journal: exit %d: %s", rc, err);
    ck_assert_msg(strstr(err, "checkpoints/point0/records.jsonl:1: checksum mismatch") &&
                      strstr(err, "changed after it was written"),
                  "%s", err);
    free(err);
}
END_TEST

/* ---- inputs that are not files ---- */

START_TEST(fifos_in_place_of_input_files_are_refused_at_once) {
    char *err;
    fifo_in("pipe");
    /* an experiment file, a layer file, an apply input */
    const char *const run_fifo[] = {"run", "pipe", "--out", "r", "--quiet", NULL};
    int rc = run_cmd("run", run_fifo, &err);
    ck_assert_msg(rc == 1 && strstr(err, "'pipe': not a regular file, it is a FIFO"),
                  "exit %d: %s", rc, err);
    free(err);
    const char *const apply_layer[] = {"apply", "pipe", "in.safetensors", "out.safetensors",
                                       NULL};
    rc = run_cmd("apply_layer", apply_layer, &err);
    ck_assert_msg(rc == 1 && strstr(err, "'pipe': not a regular file, it is a FIFO"),
                  "exit %d: %s", rc, err);
    free(err);
    const char *const apply_in[] = {"apply", "layer.yaml", "pipe", "out.safetensors", NULL};
    rc = run_cmd("apply_in", apply_in, &err);
    ck_assert_msg(rc == 1 && strstr(err, "'pipe': not a regular file, it is a FIFO"),
                  "exit %d: %s", rc, err);
    free(err);
    /* an lm corpus, during check */
    write_in("lm.yaml", "task: {kind: lm, path: pipe, seq_len: 8}\n"
                        "model: {d_model: 16, layers: 1, heads: 2}\n"
                        "layer: {preset: deltanet}\n"
                        "train: {steps: 2, batch: 2}\n");
    const char *const check_lm[] = {"check", "lm.yaml", NULL};
    rc = run_cmd("check_lm", check_lm, &err);
    ck_assert_msg(rc == 1 &&
                      strstr(err, "task.path: lm: 'pipe' is not a regular file"),
                  "exit %d: %s", rc, err);
    free(err);
    /* and the same check passes on a real corpus file: the refusal is the FIFO's */
    write_in("lm2.yaml", "task: {kind: lm, path: corpus.txt, seq_len: 8}\n"
                         "model: {d_model: 16, layers: 1, heads: 2}\n"
                         "layer: {preset: deltanet}\n"
                         "train: {steps: 2, batch: 2}\n");
    char corpus[4096];
    for (int i = 0; i < 4000; i++) corpus[i] = (char)('a' + i * 7 % 26);
    corpus[4000] = '\0';
    write_in("corpus.txt", corpus);
    const char *const check_lm2[] = {"check", "lm2.yaml", NULL};
    rc = run_cmd("check_lm2", check_lm2, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    free(err);
}
END_TEST

/* A checkpoint replaced by a FIFO is refused like a damaged one: the run falls back to the
 * previous checkpoint (with a warning naming the FIFO), and with both replaced it stops with a
 * message instead of waiting; a FIFO in place of the record journal is refused too. */
START_TEST(a_fifo_in_place_of_a_checkpoint_is_refused) {
    char *err;
    const char *const stop[] = {"run", "t.yaml", "--out", "c", "--quiet", "--set",
                                "train.stop_at=25", NULL};
    ck_assert_msg(run_cmd("c1", stop, &err) == 0, "%s", err);
    free(err);
    fifo_in("c/checkpoints/point0/ckpt-last.safetensors");
    const char *const resume[] = {"run", "t.yaml", "--out", "c", "--quiet", NULL};
    int rc = run_cmd("c2", resume, &err);
    ck_assert_msg(rc == 0 && strstr(err, "ckpt-last.safetensors' is not a regular file (a FIFO)"),
                  "exit %d: %s", rc, err);
    free(err);
    /* a fresh stop, then both checkpoints FIFOs */
    const char *const stop_d[] = {"run", "t.yaml", "--out", "d", "--quiet", "--set",
                                  "train.stop_at=25", NULL};
    ck_assert_msg(run_cmd("d1", stop_d, &err) == 0, "%s", err);
    free(err);
    fifo_in("d/checkpoints/point0/ckpt-last.safetensors");
    fifo_in("d/checkpoints/point0/ckpt-prev.safetensors");
    const char *const resume_d[] = {"run", "t.yaml", "--out", "d", "--quiet", NULL};
    rc = run_cmd("d2", resume_d, &err);
    ck_assert_msg(rc == 1 && strstr(err, "is not a regular file (a FIFO)"), "exit %d: %s", rc,
                  err);
    free(err);
    /* the record journal a resume appends to and reads back */
    const char *const stop_e[] = {"run", "t.yaml", "--out", "e", "--quiet", "--set",
                                  "train.stop_at=25", NULL};
    ck_assert_msg(run_cmd("e1", stop_e, &err) == 0, "%s", err);
    free(err);
    fifo_in("e/checkpoints/point0/records.jsonl");
    const char *const resume_e[] = {"run", "t.yaml", "--out", "e", "--quiet", NULL};
    rc = run_cmd("e2", resume_e, &err);
    ck_assert_msg(rc == 1 && strstr(err, "records.jsonl': not a regular file, it is a FIFO"),
                  "exit %d: %s", rc, err);
    free(err);
}
END_TEST

/* ---- ttt sample --seed ---- */

START_TEST(sample_seed_takes_the_range_of_seed_in_a_file) {
    static const char *const bad[] = {"-1", "18446744073709551616", "9007199254740993", "-0x1",
                                      "1e3", "", " 4", "+4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *const argv[] = {"sample", "nowhere", "--seed", bad[i], NULL};
        char *err;
        int rc = run_cmd("seed", argv, &err);
        ck_assert_msg(rc == 2 && strstr(err, "--seed") &&
                          strstr(err, "expected an integer from 0 to 9007199254740992"),
                      "--seed '%s': exit %d: %s", bad[i], rc, err);
        free(err);
    }
    /* the ends of the range pass the option and fail on the missing run folder instead */
    static const char *const good[] = {"0", "9007199254740992"};
    for (size_t i = 0; i < 2; i++) {
        const char *const argv[] = {"sample", "nowhere", "--seed", good[i], NULL};
        char *err;
        int rc = run_cmd("seed", argv, &err);
        ck_assert_msg(rc == 1 && !strstr(err, "--seed") && strstr(err, "nowhere"),
                      "--seed '%s': exit %d: %s", good[i], rc, err);
        free(err);
    }
    /* the file's message, for comparison: the same range */
    write_in("neg.yaml", "seed: -1\ntask: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8}\n"
                         "layer: {preset: deltanet}\n");
    const char *const check[] = {"check", "neg.yaml", NULL};
    char *err;
    int rc = run_cmd("neg", check, &err);
    ck_assert_msg(rc == 2 && strstr(err, "seed: -1 is out of range"), "exit %d: %s", rc, err);
    free(err);
}
END_TEST

/* ---- signals ---- */

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* SIGTERM inside the write pass of the one measurement (no sweep, one trial: no boundary between
 * measurements to stop at) ends the run with exit 130 and the message of an interruption. The
 * bound is an event bound: the pass takes tens of seconds in a release build and minutes under
 * the sanitizers, while a stop waits for one token (tens of ms; measured 0.06–0.18 s to exit, 2.3 s
 * under the sanitizers) plus the exit's writes; so 3 s (12 s under the sanitizers, on a loaded
 * machine) is far below what waiting for the end of the pass would take. Before the driver
 * checked the stop per token, this configuration took 76.7 s to stop on a loaded machine. */
#ifdef TU_ASAN
#define WIDE_STOP_S 12.0
#else
#define WIDE_STOP_S 3.0
#endif
START_TEST(sigterm_ends_a_long_memory_measurement_within_a_token) {
    const char *const argv[] = {"run", "wide.yaml", "--out", "wide", "--quiet", NULL};
    pid_t pid = start("wide", argv);
    /* the folder is the run's once its resolved configuration is there; the point has begun
     * within a moment of that (the keys and values take milliseconds to draw) */
    char *cfg = path_in("wide/config.resolved.yaml");
    struct stat st;
    for (int i = 0; i < 24000 && stat(cfg, &st) != 0; i++) sleep_ms(10);
    free(cfg);
    sleep_ms(1500);
    const double t0 = now_s();
    kill(pid, SIGTERM);
    const int rc = wait_exit(pid);
    const double dt = now_s() - t0;
    char *p = path_in("wide.err");
    char *err = tu_read_file(p);
    free(p);
    ck_assert_msg(rc == 130, "exit %d: %s", rc, err ? err : "");
    ck_assert_msg(err && strstr(err, "interrupted in point 1 of 1 (0 finished)"), "%s",
                  err ? err : "");
    fprintf(stderr, "wide memory point: stopped %.3f s after SIGTERM\n", dt);
    ck_assert_msg(dt < WIDE_STOP_S, "it took %.2f s to stop", dt);
    free(err);
}
END_TEST

static Suite *guards_suite(void) {
    Suite *s = suite_create("input_guards");
    TCase *tc = tcase_create("input_guards");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, a_changed_digit_in_the_record_journal_is_refused);
    tcase_add_test(tc, fifos_in_place_of_input_files_are_refused_at_once);
    tcase_add_test(tc, a_fifo_in_place_of_a_checkpoint_is_refused);
    tcase_add_test(tc, sample_seed_takes_the_range_of_seed_in_a_file);
    tcase_add_test(tc, sigterm_ends_a_long_memory_measurement_within_a_token);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(guards_suite()); }
