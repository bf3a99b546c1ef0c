/* The BLAS of the build and the OpenBLAS core decision (src/core/blas.h; docs/benchmarks.md
 * "OpenBLAS kernels"). The decision is tested on made-up core names and feature sets, not on
 * this machine; the program is then checked to keep a core the user set and to report it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "blas.h"

enum {
    AVX = TTT_CPU_AVX,
    AVX2 = TTT_CPU_AVX | TTT_CPU_AVX2 | TTT_CPU_FMA,
    AVX512 = AVX2 | TTT_CPU_AVX512F | TTT_CPU_AVX512DQ | TTT_CPU_AVX512CD | TTT_CPU_AVX512BW |
             TTT_CPU_AVX512VL,
};

static void expect(const char *core, unsigned features, const char *env,
                   ttt_blas_core_action action, const char *target) {
    const ttt_blas_core_choice c = ttt_blas_choose_core(core, features, env);
    ck_assert_msg(c.action == action, "core %s, features %#x, env %s: action %d, expected %d",
                  core ? core : "(none)", features, env ? env : "(unset)", (int)c.action,
                  (int)action);
    if (target) {
        ck_assert_ptr_nonnull(c.core);
        ck_assert_str_eq(c.core, target);
    } else {
        ck_assert_ptr_null(c.core);
    }
}

/* A generic core on a better CPU selects the kernels of the CPU's level. */
START_TEST(generic_cores_are_raised_to_the_cpu) {
    expect("Prescott", AVX512, NULL, TTT_BLAS_CORE_SELECT, "SkylakeX");
    expect("Katmai", AVX512 | TTT_CPU_AVX512_BF16, NULL, TTT_BLAS_CORE_SELECT, "SkylakeX");
    expect("Core2", AVX2, NULL, TTT_BLAS_CORE_SELECT, "Haswell");
    expect("Nehalem", AVX2, NULL, TTT_BLAS_CORE_SELECT, "Haswell");
    expect("Nehalem", AVX, NULL, TTT_BLAS_CORE_SELECT, "Sandybridge");
    expect("Sandybridge", AVX2, NULL, TTT_BLAS_CORE_SELECT, "Haswell");
    expect("Sandybridge", AVX512, NULL, TTT_BLAS_CORE_SELECT, "SkylakeX");
    expect("Haswell", AVX512, NULL, TTT_BLAS_CORE_SELECT, "SkylakeX");
    expect("Zen", AVX512, NULL, TTT_BLAS_CORE_SELECT, "SkylakeX");
    /* names compare without case, as OpenBLAS compares OPENBLAS_CORETYPE */
    expect("PRESCOTT", AVX2, NULL, TTT_BLAS_CORE_SELECT, "Haswell");
}
END_TEST

/* An incomplete feature set counts only for what it fully has: AVX-512F without BW/VL (the
 * first AVX-512 CPUs) runs Haswell's kernels; AVX2 without FMA runs Sandybridge's; AVX-512
 * bits without AVX2 (impossible, but the bits are independent) count for nothing above AVX. */
START_TEST(partial_feature_sets) {
    expect("Prescott", AVX2 | TTT_CPU_AVX512F | TTT_CPU_AVX512CD, NULL, TTT_BLAS_CORE_SELECT,
           "Haswell");
    expect("Prescott", TTT_CPU_AVX | TTT_CPU_AVX2, NULL, TTT_BLAS_CORE_SELECT, "Sandybridge");
    expect("Prescott", AVX512 & ~(unsigned)TTT_CPU_AVX2, NULL, TTT_BLAS_CORE_SELECT,
           "Sandybridge");
    expect("Prescott", 0, NULL, TTT_BLAS_CORE_KEEP, NULL);
}
END_TEST

/* A core at or above the CPU's level, and a core the table does not know, are kept. */
START_TEST(fitting_and_unknown_cores_are_kept) {
    expect("SkylakeX", AVX512, NULL, TTT_BLAS_CORE_KEEP, NULL);
    expect("Cooperlake", AVX512, NULL, TTT_BLAS_CORE_KEEP, NULL);
    expect("SapphireRapids", AVX512, NULL, TTT_BLAS_CORE_KEEP, NULL);
    expect("skylakex", AVX512, NULL, TTT_BLAS_CORE_KEEP, NULL);
    expect("Haswell", AVX2, NULL, TTT_BLAS_CORE_KEEP, NULL);
    expect("SkylakeX", AVX2, NULL, TTT_BLAS_CORE_KEEP, NULL); /* never lowered */
    expect("Sandybridge", AVX, NULL, TTT_BLAS_CORE_KEEP, NULL);
    expect("ARMV8", AVX512, NULL, TTT_BLAS_CORE_KEEP, NULL);
    expect("NeoverseN1", 0, NULL, TTT_BLAS_CORE_KEEP, NULL);
    expect(NULL, AVX512, NULL, TTT_BLAS_CORE_KEEP, NULL); /* BLIS, reference: no core */
}
END_TEST

/* Whatever the user set is theirs, even a generic core, an unknown name or the empty string. */
START_TEST(user_value_is_never_overridden) {
    expect("Prescott", AVX512, "Prescott", TTT_BLAS_CORE_USER, NULL);
    expect("Prescott", AVX512, "Haswell", TTT_BLAS_CORE_USER, NULL);
    expect("Prescott", AVX512, "", TTT_BLAS_CORE_USER, NULL);
    expect("SkylakeX", AVX512, "SkylakeX", TTT_BLAS_CORE_USER, NULL);
    expect("Prescott", AVX2, "nonsense", TTT_BLAS_CORE_USER, NULL);
}
END_TEST

START_TEST(levels_are_reported) {
    ttt_blas_core_choice c = ttt_blas_choose_core("Prescott", AVX512, NULL);
    ck_assert_int_eq(c.have_level, 0);
    ck_assert_int_eq(c.cpu_level, 3);
    c = ttt_blas_choose_core("Haswell", AVX, NULL);
    ck_assert_int_eq(c.have_level, 2);
    ck_assert_int_eq(c.cpu_level, 1);
    c = ttt_blas_choose_core("ARMV8", 0, NULL);
    ck_assert_int_eq(c.have_level, -1);
}
END_TEST

START_TEST(feature_names) {
    char buf[200];
    ttt_cpu_feature_names(buf, sizeof buf, AVX2);
    ck_assert_str_eq(buf, "avx avx2 fma");
    ttt_cpu_feature_names(buf, sizeof buf, 0);
    ck_assert_str_eq(buf, "sse only");
    ttt_cpu_feature_names(buf, 8, AVX512); /* truncated at a whole name, still terminated */
    ck_assert_str_eq(buf, "avx");
}
END_TEST

/* The description names the library this build was configured with and the file that
 * cblas_sgemm came from; the thread setter talks to that library. */
START_TEST(describe_names_the_build) {
    ttt_blas_info b;
    ttt_blas_describe(&b);
#if defined(TTT_BLAS_OPENBLAS)
    ck_assert_str_eq(b.library, "OpenBLAS");
    ck_assert(b.version[0] && b.core[0]);
    ck_assert_msg(strstr(b.path, "openblas"), "%s", b.path);
#elif defined(TTT_BLAS_BLIS)
    ck_assert_str_eq(b.library, "BLIS");
    ck_assert(b.version[0] && b.core[0]);
    ck_assert_msg(strstr(b.path, "blis"), "%s", b.path);
#else
    ck_assert_str_eq(b.library, "reference CBLAS");
    ck_assert_msg(strstr(b.path, "/blas/"), "%s", b.path);
#endif
    char line[1024];
    ttt_blas_format(line, sizeof line, &b);
    ck_assert_msg(strstr(line, b.library) && strstr(line, b.path), "%s", line);
    const int before = ttt_blas_get_threads();
    ttt_blas_set_threads(1);
    ck_assert_int_eq(ttt_blas_get_threads(), 1);
    ttt_blas_set_threads(before);
}
END_TEST

/* The program: a core the user set is the one it runs and reports; with the restart variable
 * already set (as in a restarted process) it does not restart again, whatever OpenBLAS chose. */
START_TEST(program_keeps_and_reports_the_users_core) {
#if defined(TTT_BLAS_OPENBLAS)
    char *out, *err;
    ck_assert_int_eq(tu_run_ttt("--version", &out, &err), 0);
    ck_assert_msg(strstr(out, "BLAS: OpenBLAS "), "%s", out);
    free(out), free(err);
    setenv("OPENBLAS_CORETYPE", "Sandybridge", 1);
    ck_assert_int_eq(tu_run_ttt("--version", &out, &err), 0);
    ck_assert_msg(strstr(out, "core Sandybridge (set by the user"), "%s", out);
    free(out), free(err);
    unsetenv("OPENBLAS_CORETYPE");
    setenv(TTT_BLAS_CORE_RESTART_ENV, "Prescott", 1);
    ck_assert_int_eq(tu_run_ttt("--version", &out, &err), 0);
    ck_assert_msg(strstr(out, "(detected)"), "%s", out);
    free(out), free(err);
    unsetenv(TTT_BLAS_CORE_RESTART_ENV);
#endif
}
END_TEST

static Suite *blas_suite(void) {
    Suite *s = suite_create("blas");
    TCase *tc = tcase_create("blas");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, generic_cores_are_raised_to_the_cpu);
    tcase_add_test(tc, partial_feature_sets);
    tcase_add_test(tc, fitting_and_unknown_cores_are_kept);
    tcase_add_test(tc, user_value_is_never_overridden);
    tcase_add_test(tc, levels_are_reported);
    tcase_add_test(tc, feature_names);
    tcase_add_test(tc, describe_names_the_build);
    tcase_add_test(tc, program_keeps_and_reports_the_users_core);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(blas_suite()); }
