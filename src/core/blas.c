/* The BLAS of this build, the CPU's features and the OpenBLAS core decision (blas.h). */
#define _GNU_SOURCE /* dladdr */
#include "blas.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define TTT_X86 1
#endif

#if defined(TTT_BLAS_BLIS)
#include <blis.h>
#endif

/* ---- CPU features ---------------------------------------------------------------------- */

#ifdef TTT_X86
/* XCR0: which register state the operating system saves on a context switch. */
static unsigned long long xgetbv0(void) {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}
#endif

unsigned ttt_cpu_features(void) {
    unsigned f = 0;
#ifdef TTT_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int osxsave = (c >> 27) & 1;
    if (!osxsave || !((c >> 28) & 1)) return 0; /* no AVX, or the OS does not save its state */
    const unsigned long long xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return 0; /* XMM + YMM state */
    f |= TTT_CPU_AVX;
    if ((c >> 12) & 1) f |= TTT_CPU_FMA;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    if ((b >> 5) & 1) f |= TTT_CPU_AVX2;
    const int zmm = (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM0-15 upper halves, ZMM16-31 */
    if (zmm) {
        if ((b >> 16) & 1) f |= TTT_CPU_AVX512F;
        if ((b >> 17) & 1) f |= TTT_CPU_AVX512DQ;
        if ((b >> 28) & 1) f |= TTT_CPU_AVX512CD;
        if ((b >> 30) & 1) f |= TTT_CPU_AVX512BW;
        if ((b >> 31) & 1) f |= TTT_CPU_AVX512VL;
    }
    const int tiles = (xcr0 & 0x60000) == 0x60000; /* XTILECFG + XTILEDATA */
    if (tiles && ((d >> 24) & 1)) f |= TTT_CPU_AMX;
    unsigned a1, b1, c1, d1;
    if (zmm && a >= 1 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && ((a1 >> 5) & 1))
        f |= TTT_CPU_AVX512_BF16;
#endif
    return f;
}

static const struct {
    unsigned bit;
    const char *name;
} feature_names[] = {
    {TTT_CPU_AVX, "avx"},           {TTT_CPU_AVX2, "avx2"},         {TTT_CPU_FMA, "fma"},
    {TTT_CPU_AVX512F, "avx512f"},   {TTT_CPU_AVX512DQ, "avx512dq"}, {TTT_CPU_AVX512CD, "avx512cd"},
    {TTT_CPU_AVX512BW, "avx512bw"}, {TTT_CPU_AVX512VL, "avx512vl"},
    {TTT_CPU_AVX512_BF16, "avx512_bf16"}, {TTT_CPU_AMX, "amx"},
};

void ttt_cpu_feature_names(char *out, size_t n, unsigned features) {
    if (n == 0) return;
    out[0] = '\0';
    size_t len = 0;
    for (size_t i = 0; i < sizeof feature_names / sizeof feature_names[0]; i++) {
        if (!(features & feature_names[i].bit)) continue;
        int w = snprintf(out + len, n - len, "%s%s", len ? " " : "", feature_names[i].name);
        if (w < 0 || (size_t)w >= n - len) { /* does not fit: end at the last whole name */
            out[len] = '\0';
            return;
        }
        len += (size_t)w;
    }
    if (len == 0) snprintf(out, n, "%s", "sse only");
}

/* ---- the core decision ----------------------------------------------------------------- */

/* OpenBLAS's x86 core names (the corename list of its dynamic-architecture loader) and the
 * instruction level of their single-precision kernels: 0 SSE, 1 AVX, 2 AVX2 + FMA, 3 AVX-512.
 * Cooperlake and SapphireRapids add bfloat16 kernels over SkylakeX's; sgemm is the same. */
static const struct {
    const char *name;
    int level;
} cores[] = {
    {"Unknown", 0},     {"Katmai", 0},     {"Coppermine", 0},  {"Northwood", 0},
    {"Prescott", 0},    {"Banias", 0},     {"Atom", 0},        {"Core2", 0},
    {"Penryn", 0},      {"Dunnington", 0}, {"Nehalem", 0},     {"Athlon", 0},
    {"Opteron", 0},     {"Opteron_SSE3", 0}, {"Barcelona", 0}, {"Nano", 0},
    {"Bobcat", 0},      {"Sandybridge", 1}, {"Bulldozer", 1},  {"Piledriver", 1},
    {"Steamroller", 1}, {"Excavator", 2},  {"Haswell", 2},     {"Zen", 2},
    {"SkylakeX", 3},    {"Cooperlake", 3}, {"SapphireRapids", 3},
};

static int core_level(const char *corename) {
    if (!corename) return -1;
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (strcasecmp(corename, cores[i].name) == 0) return cores[i].level;
    return -1;
}

static int cpu_level(unsigned f) {
    const unsigned avx512 = TTT_CPU_AVX512F | TTT_CPU_AVX512DQ | TTT_CPU_AVX512CD |
                            TTT_CPU_AVX512BW | TTT_CPU_AVX512VL;
    const unsigned avx2 = TTT_CPU_AVX | TTT_CPU_AVX2 | TTT_CPU_FMA;
    if ((f & avx2) != avx2) return (f & TTT_CPU_AVX) ? 1 : 0;
    return (f & avx512) == avx512 ? 3 : 2;
}

ttt_blas_core_choice ttt_blas_choose_core(const char *corename, unsigned features,
                                          const char *env_coretype) {
    /* The kernels each level selects: the oldest core name with that level's sgemm, which
     * every OpenBLAS release with dynamic architecture since 0.3.x knows. */
    static const char *const target[] = {NULL, "Sandybridge", "Haswell", "SkylakeX"};
    ttt_blas_core_choice c = {TTT_BLAS_CORE_KEEP, NULL, core_level(corename),
                              cpu_level(features)};
    if (env_coretype) c.action = TTT_BLAS_CORE_USER;
    else if (c.have_level >= 0 && c.have_level < c.cpu_level) {
        c.action = TTT_BLAS_CORE_SELECT;
        c.core = target[c.cpu_level];
    }
    return c;
}

/* ---- the library in use ---------------------------------------------------------------- */

static const char *running_core(void) {
#if defined(TTT_BLAS_OPENBLAS)
    return openblas_get_corename();
#else
    return NULL;
#endif
}

ttt_blas_core_choice ttt_blas_check_core(void) {
    return ttt_blas_choose_core(running_core(), ttt_cpu_features(), getenv("OPENBLAS_CORETYPE"));
}

void ttt_blas_describe(ttt_blas_info *out) {
    memset(out, 0, sizeof *out);
#if defined(TTT_BLAS_OPENBLAS)
    out->library = "OpenBLAS";
    const char *config = openblas_get_config();
    snprintf(out->config, sizeof out->config, "%s", config ? config : "");
    /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the version is the second word */
    if (config && strncmp(config, "OpenBLAS ", 9) == 0)
        snprintf(out->version, sizeof out->version, "%.*s", (int)strcspn(config + 9, " "),
                 config + 9);
    const char *core = openblas_get_corename();
    snprintf(out->core, sizeof out->core, "%s", core ? core : "");
    const char *detected = getenv(TTT_BLAS_CORE_RESTART_ENV);
    if (!getenv("OPENBLAS_CORETYPE")) snprintf(out->core_how, sizeof out->core_how, "detected");
    else if (detected)
        snprintf(out->core_how, sizeof out->core_how, "selected by ttt over the detected %s",
                 detected);
    else snprintf(out->core_how, sizeof out->core_how, "set by the user in OPENBLAS_CORETYPE");
#elif defined(TTT_BLAS_BLIS)
    out->library = "BLIS";
    snprintf(out->version, sizeof out->version, "%s", bli_info_get_version_str());
    snprintf(out->config, sizeof out->config, "BLIS %s, threading %s", out->version,
             bli_info_get_enable_openmp() ? "openmp"
             : bli_info_get_enable_pthreads() ? "pthreads" : "none");
    snprintf(out->core, sizeof out->core, "%s", bli_arch_string(bli_arch_query_id()));
    snprintf(out->core_how, sizeof out->core_how, "detected");
#else
    out->library = "reference CBLAS";
#endif
    Dl_info dl;
    if (dladdr((void *)cblas_sgemm, &dl) && dl.dli_fname)
        snprintf(out->path, sizeof out->path, "%s", dl.dli_fname);
    ttt_cpu_feature_names(out->cpu, sizeof out->cpu, ttt_cpu_features());
}

void ttt_blas_format(char *out, size_t n, const ttt_blas_info *b) {
    snprintf(out, n, "%s%s%s%s%s%s%s%s (%s); CPU: %s", b->library, b->version[0] ? " " : "",
             b->version, b->core[0] ? ", core " : "", b->core, b->core_how[0] ? " (" : "",
             b->core_how, b->core_how[0] ? ")" : "", b->path[0] ? b->path : "library unknown",
             b->cpu);
}

void ttt_blas_set_threads(int n) {
#if defined(TTT_BLAS_OPENBLAS)
    openblas_set_num_threads(n);
#elif defined(TTT_BLAS_BLIS)
    bli_thread_set_num_threads(n);
#else
    (void)n; /* the reference BLAS has no threads */
#endif
}

int ttt_blas_get_threads(void) {
#if defined(TTT_BLAS_OPENBLAS)
    return openblas_get_num_threads();
#elif defined(TTT_BLAS_BLIS)
    const long t = (long)bli_thread_get_num_threads();
    return t > 0 ? (int)t : 1;
#else
    return 1;
#endif
}

int ttt_blas_warn_core(void) {
    static int warned;
    if (warned) return 0;
    const char *core = running_core();
    if (!core) return 0; /* a library without cores (BLIS, reference) */
    const char *env = getenv("OPENBLAS_CORETYPE");
    const ttt_blas_core_choice c = ttt_blas_check_core();
    char features[160];
    ttt_cpu_feature_names(features, sizeof features, ttt_cpu_features());
    if (c.action == TTT_BLAS_CORE_SELECT) {
        fprintf(stderr,
                "ttt: OpenBLAS runs its generic '%s' kernels on a CPU with %s (2-4x slower "
                "products); set the variable before the process starts: "
                "export OPENBLAS_CORETYPE=%s\n",
                core, features, c.core);
    } else if (c.action == TTT_BLAS_CORE_USER && getenv(TTT_BLAS_CORE_RESTART_ENV) &&
               c.have_level >= 0 && c.have_level < c.cpu_level) {
        fprintf(stderr,
                "ttt: OpenBLAS did not take OPENBLAS_CORETYPE=%s and runs its '%s' kernels on "
                "a CPU with %s; a newer OpenBLAS, or -DTTT_BLAS=blis, would be faster\n",
                env, core, features);
    } else {
        return 0;
    }
    warned = 1;
    return 1;
}
