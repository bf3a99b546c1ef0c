/* Replays every kept fuzz input through the fuzz targets' bodies (tests/fuzz/harness.h) in the
 * normal build, so CI keeps checking them without clang or libFuzzer:
 *   tests/fuzz/regressions/<target>/  every input that once crashed, hung, tripped a sanitizer or
 *                                     broke a property (each fixed; the file name says what);
 *   tests/fuzz/corpus/<target>/       the seeds the fuzzers start from.
 * A failing input is reported with its path and the property it broke. Under the sanitizer
 * build (.ci/run, TTT_SANITIZE=1) and valgrind (.ci/valgrind) memory errors are caught as well. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/harness.h"
#include "testutil.h"

typedef int (*fuzz_body)(const uint8_t *data, size_t size, fuzz_report *r);

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file in dir (sorted, so failures are reproducible), through body. Returns how
 * many were replayed. */
static int replay_dir(const char *dir, fuzz_body body) {
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s (tests run from the repository root)", dir);
    char **names = NULL;
    int n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue; /* ., .., .gitkeep */
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, (size_t)cap * sizeof *names);
            ck_assert_ptr_nonnull(names);
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        ck_assert_msg(f != NULL, "cannot open %s", path);
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        ck_assert_msg(len >= 0, "cannot size %s", path);
        /* an exact-size heap copy, so ASan sees any read past the end */
        uint8_t *buf = malloc(len ? (size_t)len : 1);
        ck_assert_ptr_nonnull(buf);
        ck_assert_msg(fread(buf, 1, (size_t)len, f) == (size_t)len, "cannot read %s", path);
        fclose(f);
        fuzz_report r;
        int failed = body(buf, (size_t)len, &r);
        free(buf);
        ck_assert_msg(!failed, "%s: %s", path, r.msg);
        free(names[i]);
    }
    free(names);
    return n;
}

START_TEST(config_regressions) {
    int n = replay_dir("tests/fuzz/regressions/config", fuzz_config_one);
    ck_assert_msg(n > 0, "no inputs in tests/fuzz/regressions/config");
}
END_TEST

START_TEST(config_corpus) {
    int n = replay_dir("tests/fuzz/corpus/config", fuzz_config_one);
    ck_assert_msg(n >= 14, "only %d seeds in tests/fuzz/corpus/config", n);
}
END_TEST

START_TEST(safetensors_regressions) {
    /* none found so far (the folder exists, with a .gitkeep, for the first one) */
    replay_dir("tests/fuzz/regressions/safetensors", fuzz_safetensors_one);
}
END_TEST

START_TEST(safetensors_corpus) {
    int n = replay_dir("tests/fuzz/corpus/safetensors", fuzz_safetensors_one);
    ck_assert_msg(n >= 8, "only %d seeds in tests/fuzz/corpus/safetensors", n);
}
END_TEST

/* The harness's error property must be able to fail: a rejection without a message is caught,
 * one with a message is not; a plain tree passes the round trip. */
START_TEST(harness_detects_violations) {
    fuzz_report r;
    memset(&r, 0, sizeof r);
    ttt_error err = {0};
    err.status = TTT_ERR_YAML; /* a status, no message */
    fuzz_check_error(&r, "probe", TTT_ERR_YAML, &err);
    ck_assert_msg(r.failed && strstr(r.msg, "without a message"), "%s", r.msg);

    memset(&r, 0, sizeof r);
    ttt_error ok = {0};
    ttt_error_set(&ok, TTT_ERR_YAML, "x.yaml:1:1: a message");
    fuzz_check_error(&r, "probe", TTT_ERR_YAML, &ok);
    ck_assert_msg(!r.failed, "%s", r.msg);

    memset(&r, 0, sizeof r);
    ttt_cfg_node *m = ttt_cfg_new_map(NULL);
    ttt_cfg_map_set(m, "a", ttt_cfg_new_scalar("1", NULL));
    fuzz_roundtrip_tree(&r, m, "probe");
    ck_assert_msg(!r.failed, "%s", r.msg);
    ttt_cfg_free(m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("fuzz_regressions");
    TCase *tc = tcase_create("replay");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, config_regressions);
    tcase_add_test(tc, config_corpus);
    tcase_add_test(tc, safetensors_regressions);
    tcase_add_test(tc, safetensors_corpus);
    tcase_add_test(tc, harness_detects_violations);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
