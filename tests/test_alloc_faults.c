/* Allocation failure, injected (src/core/fault.h): `ttt apply`, `ttt check`, `ttt list`,
 * `ttt run` (a trained mqar point with checkpoints, a memory task, an equivalence task, …),
 * `ttt export`, `ttt sample`, `ttt logits`, `ttt merge` and `ttt compare` are run
 * once per allocation they ask for, with the Nth one failing (TTT_FAIL_ALLOC=N), for every N
 * until a run gets through. Each failing run must exit 1 (no signal, no hang) with an
 * out-of-memory message naming what was being allocated, leave no temporary file and no
 * half-written output (an earlier run's summary.csv stays as it was or is replaced whole); in the
 * AddressSanitizer build a leak on any of these error paths makes the process exit with
 * LeakSanitizer's code instead. docs/hardening.md "Out of memory" lists the hooked sites and
 * what is outside them. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "safetensors.h"
#include "testutil.h"

/* Files in dir other than the two given names. */
static int stray_files(const char *dir, const char *keep1, const char *keep2) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, keep1) &&
            strcmp(e->d_name, keep2))
            n++;
    closedir(d);
    return n;
}

START_TEST(apply_fails_cleanly_at_every_allocation) {
    char *dir = tu_mkdtemp();
    char in[512], layer[512], out[512], args[2048];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(layer, sizeof layer, "%s/layer.yaml", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    float q[64], k[64], v[64];
    for (int i = 0; i < 64; i++) {
        q[i] = 0.01f * (float)(i % 7);
        k[i] = 0.02f * (float)(i % 5);
        v[i] = 0.03f * (float)(i % 3);
    }
    ttt_st_tensor t[3] = {
        {.name = "q", .ndim = 4, .shape = {1, 8, 2, 4}, .data = q},
        {.name = "k", .ndim = 4, .shape = {1, 8, 2, 4}, .data = k},
        {.name = "v", .ndim = 4, .shape = {1, 8, 2, 4}, .data = v},
    };
    const char *meta[] = {"made_by", "test_alloc_faults"};
    ttt_error err = {0};
    ck_assert_int_eq(ttt_st_write(in, t, 3, meta, 1, &err), TTT_OK);
    ck_assert_int_eq(tu_write_file(layer, "layer: {preset: deltanet}\n"), 0);
    char *input = tu_read_file(in);
    snprintf(args, sizeof args, "apply %s %s %s", layer, in, out);
    int n = 1, failed = 0;
    for (; n <= 500; n++) {
        char env[32];
        snprintf(env, sizeof env, "%d", n);
        setenv("TTT_FAIL_ALLOC", env, 1);
        char *msg = NULL;
        int code = tu_run_ttt(args, NULL, &msg);
        if (code == 0) {
            free(msg);
            break;
        }
        failed++;
        ck_assert_msg(code == 1 && msg && strstr(msg, "ttt: error: ") &&
                          strstr(msg, "out of memory"),
                      "allocation %d failed: exit %d, '%s'", n, code, msg ? msg : "");
        ck_assert_msg(access(out, F_OK) != 0, "allocation %d failed, yet %s was written", n, out);
        ck_assert_msg(stray_files(dir, "in.safetensors", "layer.yaml") == 0,
                      "allocation %d failed and left a file behind", n);
        /* rows of 4 stay in the kernel's stack buffers */
        ck_assert_msg(!strstr(msg, "recurrent kernel"), "allocation %d: '%s'", n, msg);
        char *now = tu_read_file(in);
        ck_assert_str_eq(now + 8, input + 8);
        free(now);
        free(msg);
    }
    unsetenv("TTT_FAIL_ALLOC");
    /* a run gets through once N is past its last hooked allocation; it made at least the reads
     * and writes of three tensors and their metadata and the layer file (at the time of writing:
     * 202) */
    ck_assert_msg(n <= 500, "no run got through in 500");
    ck_assert_msg(failed >= 10, "only %d allocations were hooked", failed);
    ck_assert_int_eq(access(out, F_OK), 0);
    free(input);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* `ttt apply` of `layer_yaml` on (1, T, 1, D) inputs, failing each hooked allocation in turn:
 * every failure exits 1 with an out-of-memory message and writes nothing. Returns how many
 * messages contain `expect`. */
static int apply_sweep(const char *layer_yaml, int T, int D, const char *expect) {
    char *dir = tu_mkdtemp();
    char in[512], layer[512], out[512], args[2048];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(layer, sizeof layer, "%s/layer.yaml", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    float *q = malloc(sizeof(float) * (size_t)T * D), *k = malloc(sizeof(float) * (size_t)T * D);
    float *v = malloc(sizeof(float) * (size_t)T * D);
    for (int i = 0; i < T * D; i++) {
        q[i] = 0.01f * (float)(i % 7);
        k[i] = 0.002f * (float)(i % 5);
        v[i] = 0.03f * (float)(i % 3);
    }
    ttt_st_tensor t[3] = {
        {.name = "q", .ndim = 4, .shape = {1, T, 1, D}, .data = q},
        {.name = "k", .ndim = 4, .shape = {1, T, 1, D}, .data = k},
        {.name = "v", .ndim = 4, .shape = {1, T, 1, D}, .data = v},
    };
    ttt_error err = {0};
    ck_assert_int_eq(ttt_st_write(in, t, 3, NULL, 0, &err), TTT_OK);
    ck_assert_int_eq(tu_write_file(layer, layer_yaml), 0);
    snprintf(args, sizeof args, "apply %s %s %s", layer, in, out);
    int n = 1, found = 0;
    for (; n <= 500; n++) {
        char env[32];
        snprintf(env, sizeof env, "%d", n);
        setenv("TTT_FAIL_ALLOC", env, 1);
        char *msg = NULL;
        int code = tu_run_ttt(args, NULL, &msg);
        if (code == 0) {
            free(msg);
            break;
        }
        ck_assert_msg(code == 1 && msg && strstr(msg, "ttt: error: ") &&
                          strstr(msg, "out of memory"),
                      "allocation %d failed: exit %d, '%s'", n, code, msg ? msg : "");
        ck_assert_msg(access(out, F_OK) != 0, "allocation %d failed, yet %s was written", n, out);
        if (strstr(msg, expect)) found++;
        free(msg);
    }
    unsetenv("TTT_FAIL_ALLOC");
    ck_assert_msg(n <= 500, "no run got through in 500");
    ck_assert_int_eq(access(out, F_OK), 0);
    free(q), free(k), free(v);
    tu_rmtree(dir);
    free(dir);
    return found;
}

/* Rows wider than the recurrent kernel's stack buffers (the delta rule's 3 d_v + d_k floats
 * beyond 4·256 at d = 264) take one allocation per call (layers/forms/kernels.h): when it fails,
 * `ttt apply` (the batch runner, the strided recurrent form) ends with exit 1 and the form's
 * out-of-memory message, and writes nothing. One of the hooked allocations is the kernel's. */
START_TEST(apply_wide_rows_fail_cleanly) {
    ck_assert_int_eq(apply_sweep("layer: {preset: deltanet, form: recurrent}\n", 4, 264,
                                 "delta rule: out of memory for the recurrent kernel's rows "
                                 "(d_k = 264, d_v = 264)"),
                     1);
}
END_TEST

/* The random feature maps' rows (FAVOR+: m doubles per call of the map) are a plain allocation
 * outside the arena inside an op: when it fails, the op takes the arena's escape and the batch
 * runner's sequence ends with TTT_ERR_NOMEM naming them (ttt_ctx_out_of_memory). */
START_TEST(apply_feature_map_rows_fail_cleanly) {
    ck_assert_int_ge(apply_sweep("layer: {preset: linear_attention, normalize: ratio, "
                                 "feature_map: favor, features: 8}\n",
                                 4, 4, "bytes of the feature map's rows"),
                     1);
}
END_TEST

/* ---- every command ------------------------------------------------------------------------ */

/* One `ttt` process in `cwd` with TTT_FAIL_ALLOC = fail_at, stdout discarded, stderr kept;
 * killed after `timeout_s` seconds (a hang is a failure, not a stuck test). */
typedef struct proc {
    int code;      /* exit code, or -1 */
    int signal;    /* the signal that ended it, or 0 */
    int timed_out; /* killed after the timeout */
    char *err;     /* stderr (malloc'd) */
} proc;

static proc run_ttt(const char *cwd, const char *const *args, long fail_at, int timeout_s) {
    const char *bin = getenv("TTT_BIN");
    ck_assert_ptr_nonnull(bin);
    char errpath[600];
    snprintf(errpath, sizeof errpath, "%s/.stderr", cwd);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char n[32];
        snprintf(n, sizeof n, "%ld", fail_at);
        setenv("TTT_FAIL_ALLOC", n, 1);
        int null = open("/dev/null", O_WRONLY), e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC,
                                                         0644);
        if (chdir(cwd) != 0 || null < 0 || e < 0) _exit(125);
        dup2(null, 1);
        dup2(e, 2);
        const char *argv[16] = {"ttt"};
        int a = 1;
        for (; args[a - 1] && a < 15; a++) argv[a] = args[a - 1];
        argv[a] = NULL;
        execv(bin, (char *const *)argv);
        _exit(126);
    }
    proc p = {.code = -1};
    int st = 0;
    for (long waited = 0;; waited += 2) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (waited >= 1000L * timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            p.timed_out = 1;
            break;
        }
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    if (WIFEXITED(st)) p.code = WEXITSTATUS(st);
    if (WIFSIGNALED(st)) p.signal = WTERMSIG(st);
    p.err = tu_read_file(errpath);
    if (!p.err) p.err = strdup("");
    unlink(errpath);
    return p;
}

/* Files under `dir` (recursively) whose name holds ".tmp." — what a write left half done. */
static int temp_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) n += temp_files(path);
        if (strstr(e->d_name, ".tmp.")) n++;
    }
    closedir(d);
    return n;
}

static int entries(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag, (void)f;
    return remove(path);
}

/* path and everything under it removed, in this process (the sweeps remove a run folder before
 * each of hundreds of attempts); nothing there is not an error. */
static void remove_tree(const char *path) {
    if (access(path, F_OK) == 0)
        ck_assert_int_eq(nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

/* dst becomes a copy of src (dst removed first). */
static void copy_tree(const char *src /* path < 1000 bytes */, const char *dst) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a '%s' '%s'", dst, src, dst);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
}

/* The experiments each command runs: small, so that every hooked allocation can be failed in
 * turn (docs/hardening.md "Out of memory" gives the counts). */
static const char mqar_yaml[] =
    "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 8, test_examples: 4,\n"
    "       eval_batch: 4}\n"
    "model: {d_model: 8, layers: 1, heads: 1, mlp: 0}\n"
    "layer: {preset: deltanet}\n"
    "train: {steps: 4, batch: 2, shards: 1, threads: 1, log_every: 2, eval_every: 2,\n"
    "        checkpoint_every: 2, recompute: 1}\n"; /* the block recomputed (train.h) */
static const char memory_yaml[] = "task: {kind: memory, pairs: [4], key_dim: 8, value_dim: 8, "
                                  "trials: 1}\nlayer: {preset: deltanet}\n";
static const char equivalence_yaml[] = "task: {kind: equivalence, tokens: 16, key_dim: 4, "
                                       "value_dim: 4, repeats: 1}\n"
                                       "layer: {preset: linear_attention, chunk: 8}\n";

/* Run `args` (in a fresh folder holding exp.yaml = yaml) with the Nth hooked allocation failing,
 * for every N the command makes (counted by runs with TTT_FAIL_ALLOC=0), then N = count + 1,
 * count + 2, … until one gets through (at most 16 past the count). `out` (for run): the run
 * folder, which holds an earlier complete run of the same experiment with another seed before
 * each attempt; its summary.csv must come out either as it was or complete. Returns the count. */
/* The allocation to fail after the nth: n + stride, but never past the last (count), which is
 * always tried, and then count + 1, count + 2, …. */
static long next_n(long n, long stride, long count) {
    if (n >= count) return n + 1; /* and on, until a run gets through */
    return n + stride < count ? n + stride : count;
}

/* What a sweep needs beyond the defaults (fail_every_allocation_in). */
typedef struct sweep_opts {
    /* fail every kth allocation, whatever TTT_FAULT_STRIDE says (0: as it says); a sweep with
     * must_see needs its own stride, fine enough to reach the code it names */
    long stride;
    /* each of these must appear in the message of at least one failing run: the sweep reached
     * the code it is there for (NULL-terminated; NULL: none) */
    const char *const *must_see;
    void (*setup)(const char *dir); /* writes the command's other inputs into dir, or NULL */
    const char *made; /* the file the command writes when it succeeds (not `out`), or NULL */
    int fresh; /* `out` is removed before each attempt instead of holding an earlier run */
    /* a folder setup made in dir that `out` is copied from before each attempt, instead of an
     * earlier run of yaml (NULL: the earlier run) */
    const char *from;
} sweep_opts;

static long fail_every_allocation_in(const char *yaml, const char *const *args, const char *out,
                                     const sweep_opts *o);

static long fail_every_allocation(const char *yaml, const char *const *args, const char *out) {
    return fail_every_allocation_in(yaml, args, out, &(sweep_opts){0});
}

static long fail_every_allocation_in(const char *yaml, const char *const *args, const char *out,
                                     const sweep_opts *o) {
    char *dir = tu_mkdtemp();
    if (o->setup) o->setup(dir);
    char path[1100], tmpl[500], run_dir[500];
    snprintf(path, sizeof path, "%s/exp.yaml", dir);
    ck_assert_int_eq(tu_write_file(path, yaml), 0);
    char *before = NULL;
    snprintf(run_dir, sizeof run_dir, "%s/%s", dir, out ? out : "");
    if (out && !o->fresh && o->from) {
        snprintf(tmpl, sizeof tmpl, "%s/%s", dir, o->from);
        snprintf(path, sizeof path, "%s/summary.csv", tmpl);
        before = tu_read_file(path); /* NULL: none yet */
        copy_tree(tmpl, run_dir);
    } else if (out && !o->fresh) {
        /* the earlier run of the same experiment, kept as a template copied in before each
         * attempt (a run of another configuration would be refused before it allocates) */
        snprintf(tmpl, sizeof tmpl, "%s/earlier", dir);
        snprintf(run_dir, sizeof run_dir, "%s/%s", dir, out);
        const char *a[] = {"run", "exp.yaml", "--out", "earlier", "--quiet", NULL};
        proc p = run_ttt(dir, a, -1, 120);
        ck_assert_msg(p.code == 0, "the earlier run failed: %s", p.err);
        free(p.err);
        snprintf(path, sizeof path, "%s/summary.csv", tmpl);
        before = tu_read_file(path);
        ck_assert_ptr_nonnull(before);
        /* without its mark and checkpoints, so that each attempt runs the whole experiment
         * again over the earlier files (a completed run would only be reported) */
        snprintf(path, sizeof path, "rm -rf '%s/checkpoints' '%s/.ttt-complete'", tmpl, tmpl);
        ck_assert_int_eq(system(path), 0);
        copy_tree(tmpl, run_dir);
    }
    /* three counting runs: where the count depends on timing (the lengths of the numbers a
     * benchmark prints decide how often a text buffer grows), runs from the smallest count on
     * may get through, and every N up to the largest is tried */
    long count = -1, count_max = -1;
    proc p;
    for (int i = 0; i < 3; i++) {
        if (i && out && !o->fresh) copy_tree(tmpl, run_dir);
        if (out && o->fresh) remove_tree(run_dir);
        p = run_ttt(dir, args, 0, 120);
        long c = -1;
        const char *line = strstr(p.err, "ttt: ");
        while (line && sscanf(line, "ttt: %ld hooked allocations", &c) != 1)
            line = strstr(line + 1, "ttt: ");
        ck_assert_msg(p.code == 0 && c >= 0, "counting run: exit %d, '%s'", p.code, p.err);
        free(p.err);
        if (count < 0 || c < count) count = c;
        if (c > count_max) count_max = c;
    }
    if (o->made) { /* the counting run made it; a failing run must not */
        snprintf(path, sizeof path, "%s/%s", dir, o->made);
        ck_assert_int_eq(unlink(path), 0);
    }
    const int files = entries(dir);
    /* TTT_FAULT_STRIDE=k fails every kth allocation only (the sanitizer build, whose processes
     * are many times slower, sets it: docs/hardening.md "Out of memory"); the last one and the
     * run past it are always tried */
    const char *st = getenv("TTT_FAULT_STRIDE");
    long stride = st && atol(st) > 1 ? atol(st) : 1;
    if (o->stride > 0) stride = o->stride;
    int seen[8] = {0};
    for (long n = 1;; n = next_n(n, stride, count_max)) {
        if (out && !o->fresh) copy_tree(tmpl, run_dir);
        if (out && o->fresh) remove_tree(run_dir);
        p = run_ttt(dir, args, n, 60);
        /* past the smallest count a run may get through, past the largest one must; a run
         * that meets an allocation the counting runs did not make must fail as cleanly as any
         * other */
        if (n > count && p.code == 0) {
            free(p.err);
            break;
        }
        ck_assert_msg(n <= count_max + 16, "allocation %ld of %ld: no run past the last got "
                      "through: exit %d, '%s'", n, count_max, p.code, p.err);
        ck_assert_msg(!p.timed_out, "allocation %ld of %ld failed: no exit within 60 s", n,
                      count_max);
        ck_assert_msg(p.code == 1 && strstr(p.err, "ttt: error: ") &&
                          strstr(p.err, "out of memory"),
                      "allocation %ld of %ld failed: exit %d, signal %d, '%s'", n, count_max, p.code,
                      p.signal, p.err);
        for (int i = 0; o->must_see && o->must_see[i] && i < 8; i++)
            seen[i] |= strstr(p.err, o->must_see[i]) != NULL;
        ck_assert_msg(temp_files(dir) == 0, "allocation %ld failed and left a temporary file", n);
        if (out && !o->fresh) {
            snprintf(path, sizeof path, "%s/summary.csv", run_dir);
            char *now = tu_read_file(path);
            ck_assert_msg(now != NULL || !before, "allocation %ld failed and summary.csv is gone",
                          n);
            /* the earlier bytes, or a whole new file (written under a temporary name and
             * renamed): same header, every line ended */
            const size_t h = before ? strcspn(before, "\n") : 0;
            ck_assert_msg(!now || (before && strcmp(now, before) == 0) ||
                              ((!before || strncmp(now, before, h + 1) == 0) && *now &&
                               now[strlen(now) - 1] == '\n'),
                          "allocation %ld failed and summary.csv is half written:\n%s", n, now);
            free(now);
        } else if (!out) {
            ck_assert_msg(entries(dir) == files, "allocation %ld failed and created a file", n);
        }
        free(p.err);
    }
    for (int i = 0; o->must_see && o->must_see[i] && i < 8; i++)
        ck_assert_msg(seen[i], "no failing run of %ld (every %ld) reported '%s'", count, stride,
                      o->must_see[i]);
    free(before);
    tu_rmtree(dir);
    free(dir);
    return count;
}

START_TEST(check_fails_cleanly_at_every_allocation) {
    const char *args[] = {"check", "exp.yaml", NULL};
    long n = fail_every_allocation(mqar_yaml, args, NULL);
    /* the configuration code allocates per value: hundreds (at the time of writing: 1066) */
    ck_assert_msg(n >= 100, "only %ld allocations were hooked", n);
}
END_TEST

START_TEST(list_fails_cleanly_at_every_allocation) {
    const char *args[] = {"list", NULL};
    fail_every_allocation(mqar_yaml, args, NULL);
}
END_TEST

START_TEST(run_fails_cleanly_at_every_allocation) {
    const char *args[] = {"run", "exp.yaml", "--out", "run", "--quiet", NULL};
    const char *yaml[] = {mqar_yaml, memory_yaml, equivalence_yaml};
    for (int i = 0; i < 3; i++) {
        long n = fail_every_allocation(yaml[i], args, "run");
        ck_assert_msg(n >= 100, "experiment %d: only %ld allocations were hooked", i, n);
    }
}
END_TEST

/* A run over a folder whose config.resolved.yaml is another text of the same experiment (here
 * another description, which changes no result): the run plans that text again to compare the
 * points' configuration hashes before it writes anything (docs/hardening.md "What a command may
 * overwrite"), so the allocations of two plan passes are failed in turn (2392 at the time of
 * writing, 658 without the second pass); every third. */
START_TEST(run_over_its_own_folder_fails_cleanly_at_every_allocation) {
    const char *args[] = {"run", "exp.yaml", "--set", "description=again", "--out", "run",
                          "--quiet", NULL};
    long n = fail_every_allocation_in(memory_yaml, args, "run", &(sweep_opts){.stride = 3});
    ck_assert_msg(n >= 100, "only %ld allocations were hooked", n);
}
END_TEST

/* ---- arenas that grow where no unit of work was armed before ------------------------------ */

/* A TTT mixer whose model learns its initial fast weights (learn_init) and whose inner optimizer
 * is a learned rule: both initializations are computed with ops at model creation. */
static const char ttt_mixer_yaml[] =
    "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 8, test_examples: 4,\n"
    "       eval_batch: 4}\n"
    "model: {d_model: 8, layers: 1, heads: 1, mlp: 0, mixer: ttt, learn_init: true}\n"
    "layer: {model: linear, loss: squared, form: generic, optimizer: {name: learned}}\n"
    "train: {steps: 1, batch: 2, shards: 1, threads: 1, log_every: 1, eval_every: 1,\n"
    "        checkpoint_every: 0}\n";
/* Two heads on two threads, each with its own arena (src/tasks/bench_forward.c, ttt_bench_forward). */
static const char bench_yaml[] = "task: {kind: benchmark, tokens: [16], head_dims: [4], heads: "
                                 "[2], threads: [2], repeats: 1}\nlayer: {preset: ttt_mlp}\n";

/* in.safetensors (B 1, T 16, H 4, D 4) and layer.yaml (ttt_mlp) for `ttt apply` */
static void apply_inputs(const char *dir) {
    enum { N = 1 * 16 * 4 * 4 };
    static float q[N], k[N], v[N];
    for (int i = 0; i < N; i++) {
        q[i] = 0.05f * (float)(i % 7 - 3);
        k[i] = 0.04f * (float)(i % 5 - 2);
        v[i] = 0.03f * (float)(i % 3 - 1);
    }
    ttt_st_tensor t[3] = {
        {.name = "q", .ndim = 4, .shape = {1, 16, 4, 4}, .data = q},
        {.name = "k", .ndim = 4, .shape = {1, 16, 4, 4}, .data = k},
        {.name = "v", .ndim = 4, .shape = {1, 16, 4, 4}, .data = v},
    };
    char path[1100];
    snprintf(path, sizeof path, "%s/in.safetensors", dir);
    ttt_error err = {0};
    ck_assert_int_eq(ttt_st_write(path, t, 3, NULL, 0, &err), TTT_OK);
    snprintf(path, sizeof path, "%s/layer.yaml", dir);
    ck_assert_int_eq(tu_write_file(path, "layer: {preset: ttt_mlp}\n"), 0);
}

/* Arena blocks of at most 256 bytes (TTT_FAULT_ARENA_BLOCK, src/core/fault.h): the arenas that
 * are sized up front for a whole unit of work (one sequence of the batch runner, one head of the
 * benchmark) grow block by block, inside their OpenMP regions, and the learned initializations'
 * arena grows too, so the sweep fails those allocations where they happen. Every third
 * allocation (these commands make 800 to 1700): each sweep must show that it reached the code it
 * is there for (must_see). docs/hardening.md "Out of memory". */
START_TEST(learned_initializations_fail_cleanly) {
    setenv("TTT_FAULT_ARENA_BLOCK", "256", 1);
    const char *run[] = {"run", "exp.yaml", "--out", "run", "--quiet", NULL};
    const char *msgs[] = {"model: the learned initial fast weights: out of memory",
                          "model: the inner optimizer's initial parameters: out of memory", NULL};
    long n = fail_every_allocation_in(ttt_mixer_yaml, run, "run",
                                      &(sweep_opts){.stride = 3, .fresh = 1, .must_see = msgs});
    ck_assert_msg(n >= 100, "only %ld allocations were hooked", n);
}
END_TEST

START_TEST(benchmark_threads_fail_cleanly) {
    setenv("TTT_FAULT_ARENA_BLOCK", "256", 1);
    const char *run[] = {"run", "exp.yaml", "--out", "run", "--quiet", NULL};
    const char *msgs[] = {"benchmark: head 1: the layer's temporaries: out of memory", NULL};
    long n = fail_every_allocation_in(bench_yaml, run, "run",
                                      &(sweep_opts){.stride = 3, .fresh = 1, .must_see = msgs});
    ck_assert_msg(n >= 100, "only %ld allocations were hooked", n);
}
END_TEST

START_TEST(apply_threads_fail_cleanly) {
    setenv("TTT_FAULT_ARENA_BLOCK", "256", 1);
    const char *apply[] = {"apply", "layer.yaml", "in.safetensors", "out.safetensors",
                           "--threads", "2", NULL};
    /* sequences 2 and 3 of the 4 (batch 0, heads 2 and 3) run on the second thread; its arena
     * grows for head 2 and keeps those blocks for head 3 */
    const char *msgs[] = {"batch 0, head 2: the layer's temporaries: out of memory", NULL};
    long n = fail_every_allocation_in(ttt_mixer_yaml, apply, NULL,
                                      &(sweep_opts){.stride = 3, .must_see = msgs,
                                                    .setup = apply_inputs,
                                                    .made = "out.safetensors"});
    ck_assert_msg(n >= 100, "only %ld allocations were hooked", n);
}
END_TEST

/* The tasks whose measurements run on an arena of their own: the random-feature approximation
 * of softmax attention (every fifth allocation) and the benchmark's selective scan in blocks of
 * 4 tokens, whose scratch is two arena allocations in a row the first time, reused after
 * (every second). */
static const char approx_yaml[] = "task: {kind: softmax_approx, tokens: 16, key_dim: 4, "
                                  "value_dim: 4, features: [4, 8], seeds: 1}\n";
static const char selective_yaml[] =
    "task: {kind: benchmark, measure: selective_scan, tokens: [16], head_dims: [4], heads: [2],\n"
    "       threads: [1], repeats: 1, state_size: 4, scan_block: 4}\nlayer: {preset: mamba2}\n";

START_TEST(task_arenas_fail_cleanly) {
    setenv("TTT_FAULT_ARENA_BLOCK", "256", 1);
    const char *run[] = {"run", "exp.yaml", "--out", "run", "--quiet", NULL};
    const char *approx_msgs[] = {"softmax_approx: out of memory", NULL};
    long n = fail_every_allocation_in(approx_yaml, run, "run",
                                      &(sweep_opts){.stride = 5, .fresh = 1,
                                                    .must_see = approx_msgs});
    ck_assert_msg(n >= 100, "softmax_approx: only %ld allocations were hooked", n);
    const char *scan_msgs[] = {"benchmark: the selective scan: out of memory", NULL};
    n = fail_every_allocation_in(selective_yaml, run, "run",
                                 &(sweep_opts){.stride = 2, .fresh = 1, .must_see = scan_msgs});
    ck_assert_msg(n >= 100, "selective_scan: only %ld allocations were hooked", n);
}
END_TEST

/* ---- commands that read a trained run folder --------------------------------------------- */

/* A trained mqar point in dir/trained (for `ttt export`), and a trained lm point on a small
 * corpus in dir/lm (for `ttt sample`). */
static const char trained_mqar_yaml[] =
    "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 8, test_examples: 4,\n"
    "       eval_batch: 4}\n"
    "model: {d_model: 8, layers: 1, heads: 1, mlp: 0}\n"
    "layer: {preset: ttt_linear}\n"
    "train: {steps: 2, batch: 2, log_every: 1, eval_every: 2, checkpoint_every: 2}\n";
static const char trained_lm_yaml[] =
    "task: {kind: lm, path: corpus.txt, seq_len: 16, eval_windows: 4, eval_batch: 4}\n"
    "model: {d_model: 8, layers: 1, heads: 1, mlp: 0}\n"
    "layer: {preset: deltanet}\n"
    "train: {steps: 2, batch: 2, log_every: 1, eval_every: 2, checkpoint_every: 2}\n";

static void trained_folders(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s/trained.yaml", dir);
    ck_assert_int_eq(tu_write_file(path, trained_mqar_yaml), 0);
    snprintf(path, sizeof path, "%s/lm.yaml", dir);
    ck_assert_int_eq(tu_write_file(path, trained_lm_yaml), 0);
    char text[4096];
    for (size_t i = 0; i + 1 < sizeof text; i++) text[i] = "the quick brown fox. "[i % 21];
    text[sizeof text - 1] = '\0';
    snprintf(path, sizeof path, "%s/corpus.txt", dir);
    ck_assert_int_eq(tu_write_file(path, text), 0);
    const char *a[] = {"run", "trained.yaml", "--out", "trained", "--quiet", NULL};
    proc p = run_ttt(dir, a, -1, 120);
    ck_assert_msg(p.code == 0, "the trained mqar run failed: %s", p.err);
    free(p.err);
    const char *b[] = {"run", "lm.yaml", "--out", "lm", "--quiet", NULL};
    p = run_ttt(dir, b, -1, 120);
    ck_assert_msg(p.code == 0, "the trained lm run failed: %s", p.err);
    free(p.err);
}

/* `ttt export` and `ttt sample` run the model's forward in arenas of their own, armed there
 * (ttt_arena_run): with 256-byte blocks their growth is failed too. Every fifth allocation (the
 * two make about 4000 and 1800). */
START_TEST(export_and_sample_fail_cleanly) {
    setenv("TTT_FAULT_ARENA_BLOCK", "256", 1);
    const char *exp[] = {"export", "trained", "out.safetensors", NULL};
    const char *exp_msgs[] = {"export: the model's graph: out of memory", NULL};
    long n = fail_every_allocation_in(ttt_mixer_yaml, exp, NULL,
                                      &(sweep_opts){.stride = 5, .must_see = exp_msgs,
                                                    .setup = trained_folders,
                                                    .made = "out.safetensors"});
    ck_assert_msg(n >= 100, "export: only %ld allocations were hooked", n);
    const char *smp[] = {"sample", "lm", "--tokens", "4", "--prompt", "the", NULL};
    const char *smp_msgs[] = {"sample: the model's forward: out of memory", NULL};
    n = fail_every_allocation_in(ttt_mixer_yaml, smp, NULL,
                                 &(sweep_opts){.stride = 5, .must_see = smp_msgs,
                                               .setup = trained_folders});
    ck_assert_msg(n >= 100, "sample: only %ld allocations were hooked", n);
}
END_TEST

/* A 2-point sweep of trained mqar points, small enough that every allocation of the commands
 * over its run folders can be failed in turn. */
static const char sweep_yaml[] =
    "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 8, test_examples: 4,\n"
    "       eval_batch: 4}\n"
    "model: {d_model: 8, layers: 1, heads: 1, mlp: 0}\n"
    "layer: {preset: deltanet}\n"
    "train: {steps: 2, batch: 2, log_every: 1, eval_every: 2, checkpoint_every: 0}\n"
    "sweep: {train.lr: [0.01, 0.001]}\n";

/* dir/shards: the two `--shard` jobs of sweep_yaml, not merged yet; dir/a and dir/b: two whole
 * runs of it with other seeds. */
static void sweep_folders(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s/sweep.yaml", dir);
    ck_assert_int_eq(tu_write_file(path, sweep_yaml), 0);
    const char *jobs[][8] = {
        {"run", "sweep.yaml", "--shard", "0/2", "--out", "shards", "--quiet", NULL},
        {"run", "sweep.yaml", "--shard", "1/2", "--out", "shards", "--quiet", NULL},
        {"run", "sweep.yaml", "--set", "seed=1", "--out", "a", "--quiet", NULL},
        {"run", "sweep.yaml", "--set", "seed=2", "--out", "b", "--quiet", NULL},
    };
    for (int i = 0; i < 4; i++) {
        proc p = run_ttt(dir, jobs[i], -1, 120);
        ck_assert_msg(p.code == 0, "%s %s %s failed: %s", jobs[i][2], jobs[i][3], jobs[i][5],
                      p.err);
        free(p.err);
    }
}

/* `ttt merge` of the two shard jobs, into a copy of their folder as it was before each attempt,
 * every fourth allocation (about 3000), and `ttt compare` of two whole runs into a fresh folder,
 * every seventh (about 8000). Most of either is the plan pass over the configuration; the
 * commands' own work is the last hundred or so, where the messages required below come from:
 * reading the shards' parts or the runs' records (4 and 7 allocations in a row, so a stride of
 * 4 and 7 cannot step over them) and drawing the charts (groups of 3 and of 8 or 9). */
START_TEST(merge_and_compare_fail_cleanly) {
    const char *mrg[] = {"merge", "sweep.yaml", "--out", "merged", NULL};
    const char *mrg_msgs[] = {"out of memory while collecting results; nothing written",
                              "out of memory drawing chart", NULL};
    long n = fail_every_allocation_in(sweep_yaml, mrg, "merged",
                                      &(sweep_opts){.stride = 4, .must_see = mrg_msgs,
                                                    .setup = sweep_folders, .from = "shards"});
    ck_assert_msg(n >= 100, "merge: only %ld allocations were hooked", n);
    const char *cmp[] = {"compare", "a", "b", "--out", "cmp", NULL};
    const char *cmp_msgs[] = {"cannot compare 'b'",
                              "out of memory while collecting results; nothing written",
                              "out of memory drawing chart", NULL};
    n = fail_every_allocation_in(sweep_yaml, cmp, "cmp",
                                 &(sweep_opts){.stride = 7, .fresh = 1, .must_see = cmp_msgs,
                                               .setup = sweep_folders});
    ck_assert_msg(n >= 100, "compare: only %ld allocations were hooked", n);
}
END_TEST

/* dir/tokens.safetensors: a batch of 2 sequences of 5 ids for the trained mqar point. */
static void logits_inputs(const char *dir) {
    trained_folders(dir);
    float ids[10];
    for (int i = 0; i < 10; i++) ids[i] = (float)((7 * i + 3) % 16);
    ttt_st_tensor t = {.name = "tokens", .ndim = 2, .shape = {2, 5}, .data = ids};
    char path[1100];
    snprintf(path, sizeof path, "%s/tokens.safetensors", dir);
    ttt_error err = {0};
    ck_assert_msg(ttt_st_write(path, &t, 1, NULL, 0, &err) == TTT_OK, "%s", err.msg);
}

/* `ttt logits` of a trained point, its forward in 256-byte arena blocks so that their growth
 * is failed too. Every fifth allocation. */
START_TEST(logits_fail_cleanly) {
    setenv("TTT_FAULT_ARENA_BLOCK", "256", 1);
    const char *lg[] = {"logits", "trained", "tokens.safetensors", "out.safetensors", NULL};
    const char *lg_msgs[] = {"logits: the model's forward: out of memory", NULL};
    long n = fail_every_allocation_in(ttt_mixer_yaml, lg, NULL,
                                      &(sweep_opts){.stride = 5, .must_see = lg_msgs,
                                                    .setup = logits_inputs,
                                                    .made = "out.safetensors"});
    ck_assert_msg(n >= 100, "logits: only %ld allocations were hooked", n);
}
END_TEST

int main(void) {
    Suite *s = suite_create("alloc_faults");
    TCase *tc = tcase_create("alloc_faults");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, apply_fails_cleanly_at_every_allocation);
    tcase_add_test(tc, apply_wide_rows_fail_cleanly);
    tcase_add_test(tc, apply_feature_map_rows_fail_cleanly);
    tcase_add_test(tc, check_fails_cleanly_at_every_allocation);
    tcase_add_test(tc, list_fails_cleanly_at_every_allocation);
    suite_add_tcase(s, tc);
    /* about 2600 processes: minutes, more under AddressSanitizer */
    TCase *run = tcase_create("alloc_faults_run");
    tcase_set_timeout(run, 3600);
    tcase_add_test(run, run_fails_cleanly_at_every_allocation);
    tcase_add_test(run, run_over_its_own_folder_fails_cleanly_at_every_allocation);
    suite_add_tcase(s, run);
    TCase *grow = tcase_create("alloc_faults_growth");
    tcase_set_timeout(grow, 3600);
    tcase_add_test(grow, learned_initializations_fail_cleanly);
    tcase_add_test(grow, benchmark_threads_fail_cleanly);
    tcase_add_test(grow, apply_threads_fail_cleanly);
    tcase_add_test(grow, export_and_sample_fail_cleanly);
    tcase_add_test(grow, task_arenas_fail_cleanly);
    suite_add_tcase(s, grow);
    /* merge, compare and logits: about 2100 processes */
    TCase *cmds = tcase_create("alloc_faults_commands");
    tcase_set_timeout(cmds, 3600);
    tcase_add_test(cmds, merge_and_compare_fail_cleanly);
    tcase_add_test(cmds, logits_fail_cleanly);
    suite_add_tcase(s, cmds);
    return tu_run(s);
}
