/* Faults during a run: SIGINT checkpoints and exits cleanly; SIGKILL at a random moment and the
 * same command again resumes and ends with the same final metrics as an uninterrupted run; a full
 * disk or a read-only output folder gives a clear error and leaves earlier outputs intact.
 * The runs are real `ttt run` processes (the program the user runs). */
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

static const char *config =
    "name: faults\n"
    "seed: 3\n"
    "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 500, test_examples: 50}\n"
    "model: {d_model: 16, layers: 1, heads: 2, mlp: 0, conv: 4}\n"
    "layer: {preset: gated_deltanet}\n"
    "train: {steps: 200, batch: 16, lr: 1e-2, warmup: 10, log_every: 10, eval_every: 50,\n"
    "        checkpoint_every: 5}\n";

static void setup(void) {
    dir = tu_mkdtemp();
    char p[512];
    snprintf(p, sizeof p, "%s/f.yaml", dir);
    ck_assert_int_eq(tu_write_file(p, config), 0);
}
static void teardown(void) {
    tu_rmtree(dir);
    free(dir);
}

static const char *bin(void) {
    const char *b = getenv("TTT_BIN");
    return b ? b : "build/ttt";
}

/* Start `ttt run f.yaml --out DIR/out --quiet` in the background; stderr to DIR/<tag>.err. */
static pid_t start_run(const char *out, const char *tag) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char cfg[512], errp[512];
        snprintf(cfg, sizeof cfg, "%s/f.yaml", dir);
        snprintf(errp, sizeof errp, "%s/%s.err", dir, tag);
        if (!freopen(errp, "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(99);
        execl(bin(), bin(), "run", cfg, "--out", out, "--quiet", (char *)NULL);
        _exit(98);
    }
    return pid;
}

static int wait_exit(pid_t pid, int *signaled) {
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    *signaled = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run_to_end(const char *out, const char *tag) {
    int sig;
    return wait_exit(start_run(out, tag), &sig);
}

/* The records that must not depend on interruptions: every evaluation (full precision) and the
 * final train loss. Timing fields differ and are left out. */
static char *stable_metrics(const char *out) {
    char p[512];
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    char *m = tu_read_file(p);
    ck_assert_msg(m != NULL, "no %s", p);
    size_t cap = strlen(m) + 1, n = 0;
    char *res = calloc(cap, 1);
    for (char *line = strtok(m, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, "\"kind\":\"eval\"")) n += (size_t)snprintf(res + n, cap - n, "%s\n", line);
    free(m);
    return res;
}

static char *reference_metrics(void) {
    char out[512];
    snprintf(out, sizeof out, "%s/ref", dir);
    ck_assert_int_eq(run_to_end(out, "ref"), 0);
    return stable_metrics(out);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

START_TEST(sigint_checkpoints_and_resumes) {
    char *want = reference_metrics();
    char out[512], errp[512];
    snprintf(out, sizeof out, "%s/int", dir);
    pid_t pid = start_run(out, "int");
    sleep_ms(400);
    kill(pid, SIGINT);
    int sig, rc = wait_exit(pid, &sig);
    snprintf(errp, sizeof errp, "%s/int.err", dir);
    char *err = tu_read_file(errp);
    /* interrupted mid-run: exit 130 and the message; or (slow machine) it had already finished */
    if (rc == 130) {
        ck_assert_msg(strstr(err, "interrupted at step") && strstr(err, "resume"), "%s", err);
        ck_assert_int_eq(run_to_end(out, "int2"), 0);
    } else {
        ck_assert_msg(rc == 0, "exit %d signal %d: %s", rc, sig, err);
    }
    char *got = stable_metrics(out);
    ck_assert_str_eq(got, want);
    free(err), free(got), free(want);
}
END_TEST

/* SIGKILL at random moments — possibly in the middle of writing a checkpoint — then the same
 * command again: the final metrics equal the uninterrupted run's to the last bit. */
START_TEST(sigkill_at_random_moments_then_resume) {
    char *want = reference_metrics();
    char out[512];
    snprintf(out, sizeof out, "%s/kill", dir);
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    int kills = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        pid_t pid = start_run(out, "kill");
        sleep_ms(100 + rand() % 500);
        kill(pid, SIGKILL);
        int sig;
        wait_exit(pid, &sig);
        kills += sig == SIGKILL;
    }
    int rc = run_to_end(out, "kill2");
    char errp[512];
    snprintf(errp, sizeof errp, "%s/kill2.err", dir);
    char *err = tu_read_file(errp);
    ck_assert_msg(rc == 0, "resume after %d kills (seed %u) failed: %s", kills, seed, err);
    char *got = stable_metrics(out);
    ck_assert_msg(strcmp(got, want) == 0, "after %d kills (seed %u):\n%s\nwant:\n%s", kills, seed,
                  got, want);
    free(err), free(got), free(want);
}
END_TEST

/* A disk that fills up: every file write past 4 KiB fails (RLIMIT_FSIZE, with SIGXFSZ ignored so
 * that writes return EFBIG as on a full disk). The run fails with a message naming a file, and the
 * results of an earlier complete run in the same folder are untouched. */
START_TEST(full_disk_is_a_clear_error_and_keeps_earlier_outputs) {
    char out[512];
    snprintf(out, sizeof out, "%s/full", dir);
    ck_assert_int_eq(run_to_end(out, "full0"), 0);
    const char *files[] = {"summary.csv", "metrics.jsonl", "config.resolved.yaml", "index.html"};
    char *before[4];
    for (int i = 0; i < 4; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", out, files[i]);
        before[i] = tu_read_file(p);
        ck_assert_ptr_nonnull(before[i]);
    }
    /* a fresh start in the same folder (no checkpoints, no mark of completion), so it has to
     * write a lot */
    char *cmd;
    ck_assert(asprintf(&cmd, "rm -rf %s/checkpoints %s/.ttt-complete; trap '' XFSZ; ulimit -f 8; "
                             "%s run %s/f.yaml --out %s --quiet >/dev/null 2>%s/full.err",
                       out, out, bin(), dir, out, dir) > 0);
    int st = system(cmd);
    free(cmd);
    char errp[512];
    snprintf(errp, sizeof errp, "%s/full.err", dir);
    char *err = tu_read_file(errp);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 0, "the run did not fail: %s", err);
    ck_assert_msg(strstr(err, "ttt: error:") && strstr(err, out) && strstr(err, "too large"),
                  "unclear message: %s", err);
    /* metrics.jsonl is the run's log and is rewritten; the finished results are not */
    for (int i = 0; i < 4; i++) {
        if (i == 1) continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", out, files[i]);
        char *after = tu_read_file(p);
        ck_assert_msg(after && strcmp(after, before[i]) == 0, "%s changed", files[i]);
        free(after);
    }
    for (int i = 0; i < 4; i++) free(before[i]);
    free(err);
}
END_TEST

/* A read-only output folder (a tmpfs remounted read-only in a private mount namespace): a clear
 * error naming the path, and the earlier outputs in it unchanged. */
START_TEST(read_only_output_folder_is_a_clear_error) {
    char *cmd;
    ck_assert(asprintf(&cmd,
                       "unshare -rm sh -c 'mkdir -p %s/mnt && mount -t tmpfs tmpfs %s/mnt && "
                       "%s run %s/f.yaml --out %s/mnt/run --quiet >/dev/null 2>&1 && "
                       "md5sum %s/mnt/run/summary.csv > %s/sum.before && "
                       "mount -o remount,ro %s/mnt && "
                       "%s run %s/f.yaml --out %s/mnt/run --quiet >/dev/null 2>%s/ro.err; "
                       "echo $? > %s/ro.rc; md5sum %s/mnt/run/summary.csv > %s/sum.after'",
                       dir, dir, bin(), dir, dir, dir, dir, dir, bin(), dir, dir, dir, dir, dir,
                       dir) > 0);
    int st = system(cmd);
    free(cmd);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "could not set up a read-only folder (needs unshare and mount in a user "
                  "namespace)");
    char p[512];
    snprintf(p, sizeof p, "%s/ro.rc", dir);
    char *rc = tu_read_file(p);
    snprintf(p, sizeof p, "%s/ro.err", dir);
    char *err = tu_read_file(p);
    ck_assert_msg(rc && atoi(rc) != 0, "the run into a read-only folder succeeded");
    ck_assert_msg(strstr(err, "ttt: error:") && strstr(err, "Read-only file system") &&
                      strstr(err, "/mnt/run"),
                  "unclear message: %s", err);
    snprintf(p, sizeof p, "%s/sum.before", dir);
    char *b = tu_read_file(p);
    snprintf(p, sizeof p, "%s/sum.after", dir);
    char *a = tu_read_file(p);
    ck_assert_msg(b && a && strcmp(a, b) == 0, "summary.csv changed");
    free(rc), free(err), free(a), free(b);
}
END_TEST

static Suite *faults_suite(void) {
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, sigint_checkpoints_and_resumes);
    tcase_add_test(tc, sigkill_at_random_moments_then_resume);
    tcase_add_test(tc, full_disk_is_a_clear_error_and_keeps_earlier_outputs);
    tcase_add_test(tc, read_only_output_folder_is_a_clear_error);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(faults_suite()); }
