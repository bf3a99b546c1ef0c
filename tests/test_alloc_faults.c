/* Allocation failure, injected (src/core/fault.h): `ttt apply` is run once per allocation it asks
 * for, with the Nth one failing (TTT_FAIL_ALLOC=N), for every N until a run gets through. Each
 * failing run must exit 1 with an out-of-memory message naming what was being allocated, write
 * no output and leave no temporary file, and leave its input alone; in the AddressSanitizer build
 * a leak on any of these error paths makes the process exit with LeakSanitizer's code instead.
 * The hooked sites are the safetensors reader and writer and `ttt apply`'s own allocations
 * (docs/hardening.md "Out of memory" says what is not hooked). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
        char *now = tu_read_file(in);
        ck_assert_str_eq(now + 8, input + 8);
        free(now);
        free(msg);
    }
    unsetenv("TTT_FAIL_ALLOC");
    /* a run gets through once N is past its last hooked allocation; it made at least the reads
     * and writes of three tensors and their metadata (at the time of writing: 29) */
    ck_assert_msg(n <= 500, "no run got through in 500");
    ck_assert_msg(failed >= 10, "only %d allocations were hooked", failed);
    ck_assert_int_eq(access(out, F_OK), 0);
    free(input);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("alloc_faults");
    TCase *tc = tcase_create("alloc_faults");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, apply_fails_cleanly_at_every_allocation);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
