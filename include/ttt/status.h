/* The status codes and the error record of every fallible call, public and internal alike: the
 * one table of codes (messages: ttt_status_message, src/core/status.c). Part of the public API
 * (include/ttt/ttt.h includes it) and included by the library's own src/core/status.h, so the two
 * can never disagree. */
#ifndef TTT_PUBLIC_STATUS_H
#define TTT_PUBLIC_STATUS_H

/* Marks the functions libttt.so exports: the library is compiled with -fvisibility=hidden
 * (CMakeLists.txt), so these declarations are its whole dynamic interface and nothing internal
 * becomes ABI by accident (docs/api.md "Versions and the ABI"; tests/check_symbols.py holds the
 * library's exports against them). */
#ifndef TTT_API
#if defined(__GNUC__) || defined(__clang__)
#define TTT_API __attribute__((visibility("default")))
#else
#define TTT_API
#endif
#endif

typedef enum ttt_status {
    TTT_OK = 0,
    TTT_ERR_NOMEM,       /* an allocation failed or would exceed the allowed size */
    TTT_ERR_IO,          /* a file could not be opened, read, written or renamed */
    TTT_ERR_YAML,        /* the YAML text is malformed */
    TTT_ERR_CONFIG,      /* unknown key, wrong type, missing required value */
    TTT_ERR_RANGE,       /* a value is outside its allowed range */
    TTT_ERR_NAME,        /* an unknown optimizer / model / loss / preset / task name */
    TTT_ERR_SHAPE,       /* tensor shapes that do not fit together */
    TTT_ERR_NUMERIC,     /* NaN or Inf where a finite number is required */
    TTT_ERR_FORMAT,      /* a data file (e.g. safetensors) is malformed */
    TTT_ERR_ARG,         /* a bad argument (of a call or on the command line) */
    TTT_ERR_UNSUPPORTED, /* a valid request this build or combination does not support */
    TTT_ERR_INTERRUPTED, /* stopped on request (SIGINT/SIGTERM) after saving a checkpoint */
    TTT_ERR_DEVICE,      /* a GPU call failed (the message names the call and the device) */
    TTT_STATUS_COUNT
} ttt_status;

#ifdef __cplusplus
extern "C" {
#endif

#define TTT_ERROR_MSG_LEN 1024

/* What went wrong, in words a user can act on. */
typedef struct ttt_error {
    ttt_status status;
    char msg[TTT_ERROR_MSG_LEN];
} ttt_error;

/* One short phrase per status code ("unknown name", …). */
TTT_API const char *ttt_status_message(ttt_status s);

#ifdef __cplusplus
}
#endif

#endif
