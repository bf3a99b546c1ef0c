/* Flat memory over a long run (docs/hardening.md "Flat memory over long runs"): 100 000 training
 * steps of a tiny model with a record at every step, as a real `ttt run` process. Records are
 * streamed to disk, not kept, and checkpoints hold no history, so
 *   - the resident memory half-way equals that near the end (within 4 MiB: allocator noise; a
 *     kept record of 10.7 KB per step would add about 500 MiB between the two samples);
 *   - the peak over the whole run, charts included, stays under 24 MiB (training takes about
 *     7 MiB; drawing the charts reads the 100 000 records back and keeps 24 bytes per point
 *     of a chart before it thins each line to at most 1000 points; a chart of every point
 *     took 37 MiB), and the loss chart is under 300 kB (14 MB with every point);
 *   - the last checkpoint is a few kilobytes (the weights and optimizer state of 500 parameters
 *     and the metadata), not the 20 MB of a record history. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static const char *config =
    "name: soak\n"
    "seed: 1\n"
    "task: {kind: mqar, vocab: 8, seq_len: 4, pairs: 1, train_examples: 64, test_examples: 4}\n"
    "model: {d_model: 4, layers: 1, heads: 1, mlp: 0, conv: 0}\n"
    "layer: {preset: linear_attention}\n"
    "train: {steps: 100000, batch: 1, shards: 1, warmup: 1, log_every: 1,\n"
    "        checkpoint_every: 20000}\n";

static long rss_kib(pid_t pid) {
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%ld/status", (long)pid);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
    fclose(f);
    return kb;
}

static long file_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    long n = 0;
    int c;
    while ((c = getc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

START_TEST(memory_stays_flat_over_100k_steps) {
    char *dir = tu_mkdtemp();
    char cfg[512], out[512], errp[512], journal[600];
    snprintf(cfg, sizeof cfg, "%s/soak.yaml", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(errp, sizeof errp, "%s/err", dir);
    snprintf(journal, sizeof journal, "%s/checkpoints/point0/records.jsonl", out);
    ck_assert_int_eq(tu_write_file(cfg, config), 0);
    const char *bin = getenv("TTT_BIN") ? getenv("TTT_BIN") : "build/ttt";
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(errp, "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(99);
        execl(bin, bin, "run", cfg, "--out", out, "--quiet", (char *)NULL);
        _exit(98);
    }
    /* sample the resident memory when the journal passes 50 000 and 90 000 records */
    long rss_half = -1, rss_late = -1, lines = 0;
    int st = 0;
    struct rusage ru;
    for (;;) {
        pid_t w = wait4(pid, &st, WNOHANG, &ru);
        ck_assert_int_ge(w, 0);
        if (w == pid) break;
        if (rss_late < 0) {
            lines = file_lines(journal);
            if (rss_half < 0 && lines >= 50000) rss_half = rss_kib(pid);
            if (rss_half >= 0 && lines >= 90000) rss_late = rss_kib(pid);
        }
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    char *err = tu_read_file(errp);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the run failed: %s", err);
    ck_assert_msg(rss_half > 0 && rss_late > 0, "not sampled (journal at %ld lines)", lines);
    printf("soak: RSS %ld KiB at 50k steps, %ld KiB at 90k, peak %ld KiB\n", rss_half, rss_late,
           ru.ru_maxrss);
    ck_assert_msg(rss_late - rss_half < 4096, "RSS grew from %ld to %ld KiB", rss_half, rss_late);
    ck_assert_msg(ru.ru_maxrss < 24 * 1024, "peak RSS %ld KiB", ru.ru_maxrss);
    char p[600];
    snprintf(p, sizeof p, "%s/checkpoints/point0/ckpt-last.safetensors", out);
    struct stat sb;
    ck_assert_int_eq(stat(p, &sb), 0);
    ck_assert_msg(sb.st_size < 64 * 1024, "the checkpoint has %ld bytes", (long)sb.st_size);
    snprintf(p, sizeof p, "%s/train_loss.svg", out);
    ck_assert_int_eq(stat(p, &sb), 0);
    ck_assert_msg(sb.st_size < 300 * 1000, "the loss chart has %ld bytes", (long)sb.st_size);
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    ck_assert_int_eq(file_lines(p), 100000 + 2); /* a record per step, the evaluation, summary */
    free(err);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static Suite *soak_suite(void) {
    Suite *s = suite_create("soak");
    TCase *tc = tcase_create("soak");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, memory_stays_flat_over_100k_steps);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(soak_suite()); }
