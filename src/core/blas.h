/* The BLAS this build calls, the CPU it runs on, and the choice of OpenBLAS kernels.
 *
 * Every product of the library goes through CBLAS; which library provides it is chosen when
 * configuring (CMake TTT_BLAS=openblas|blis|reference, docs/benchmarks.md "BLAS libraries").
 * Code includes "blas.h" instead of <cblas.h> and sets BLAS threads with ttt_blas_set_threads,
 * so that no file but blas.c knows which library it is.
 *
 * OpenBLAS picks its kernels at load time from the CPU model; a release older than the CPU does
 * not know the model and falls back to generic SSE kernels (e.g. Prescott on a Xeon with
 * AVX-512), 2-4x slower. ttt_blas_choose_core decides what to do about it from the reported core,
 * the CPU's features and the user's OPENBLAS_CORETYPE (docs/benchmarks.md "OpenBLAS kernels"). */
#ifndef TTT_BLAS_H
#define TTT_BLAS_H

#include <stddef.h>

#if defined(TTT_BLAS_REFERENCE)
#include <cblas-netlib.h>
#else
#include <cblas.h>
#endif

/* CPU features that decide which BLAS kernels can run (CPUID, and XGETBV for the register state
 * the operating system saves: AVX needs the YMM state, AVX-512 the ZMM and mask state). */
enum {
    TTT_CPU_AVX = 1u << 0,
    TTT_CPU_AVX2 = 1u << 1,
    TTT_CPU_FMA = 1u << 2,
    TTT_CPU_AVX512F = 1u << 3,
    TTT_CPU_AVX512DQ = 1u << 4,
    TTT_CPU_AVX512CD = 1u << 5,
    TTT_CPU_AVX512BW = 1u << 6,
    TTT_CPU_AVX512VL = 1u << 7,
    TTT_CPU_AVX512_BF16 = 1u << 8,
    TTT_CPU_AMX = 1u << 9,
};
/* The features of the CPU this process runs on (0 off x86). */
unsigned ttt_cpu_features(void);
/* Their names, space separated ("avx avx2 fma avx512f ..."), into out[n] (always terminated). */
void ttt_cpu_feature_names(char *out, size_t n, unsigned features);

typedef enum {
    TTT_BLAS_CORE_KEEP,   /* the core fits the CPU (or is not one this table knows): nothing to do */
    TTT_BLAS_CORE_USER,   /* the user set OPENBLAS_CORETYPE: never overridden */
    TTT_BLAS_CORE_SELECT, /* a generic core on a better CPU: run with OPENBLAS_CORETYPE=core */
} ttt_blas_core_action;

typedef struct {
    ttt_blas_core_action action;
    const char *core; /* SELECT: the value for OPENBLAS_CORETYPE; else NULL */
    int have_level;   /* the reported core's instruction level: 0 SSE, 1 AVX, 2 AVX2+FMA,
                         3 AVX-512; -1 a core this table does not know */
    int cpu_level;    /* the best level the CPU supports */
} ttt_blas_core_choice;

/* The decision, a pure function of its inputs: `corename` as openblas_get_corename reports it,
 * the CPU `features` (ttt_cpu_features), and `env_coretype` the value of OPENBLAS_CORETYPE (NULL
 * when unset; set to anything, even "", it is the user's and is kept). */
ttt_blas_core_choice ttt_blas_choose_core(const char *corename, unsigned features,
                                          const char *env_coretype);

/* The decision for this process: its OpenBLAS core (KEEP for other libraries), this CPU, and
 * OPENBLAS_CORETYPE as it is set now. */
ttt_blas_core_choice ttt_blas_check_core(void);

/* What this process runs: filled by ttt_blas_describe. Strings are static or inside the struct. */
typedef struct {
    const char *library;  /* the build's choice: "OpenBLAS", "BLIS" or "reference CBLAS" */
    char version[64];     /* the library's version ("0.3.21"; "" when it does not say) */
    char config[160];     /* OpenBLAS: openblas_get_config; BLIS: its configuration; else "" */
    char core[48];        /* the kernels in use: OpenBLAS's core, BLIS's sub-configuration */
    char core_how[64];    /* how the core came: "detected", "selected by ttt over the detected
                             Prescott", "set by the user in OPENBLAS_CORETYPE", "" for
                             libraries without a choice */
    char path[256];       /* the file cblas_sgemm was loaded from (dladdr), "" when unknown */
    char cpu[160];        /* ttt_cpu_feature_names of this CPU */
} ttt_blas_info;

/* Fill `out` for this process. Cheap (no product is run); safe to call any number of times. */
void ttt_blas_describe(ttt_blas_info *out);
/* One line for people and records: "OpenBLAS 0.3.21, core SkylakeX (selected by ttt), ...". */
void ttt_blas_format(char *out, size_t n, const ttt_blas_info *info);

/* BLAS threads of the library in use (OpenBLAS and BLIS; the reference is single-threaded). */
void ttt_blas_set_threads(int n);
int ttt_blas_get_threads(void);

/* The variable the program sets, to the core OpenBLAS detected, when it restarts itself with a
 * selected core: the restarted process sees it and does not restart again (docs/benchmarks.md "OpenBLAS kernels"). */
#define TTT_BLAS_CORE_RESTART_ENV "TTT_BLAS_CORE_RESTART"

/* When the running OpenBLAS core is generic for this CPU and cannot be changed any more (the
 * library is loaded), print once to stderr what to set, e.g. "export OPENBLAS_CORETYPE=SkylakeX".
 * Returns 1 when it warned (at most once per process), else 0. */
int ttt_blas_warn_core(void);

#endif
