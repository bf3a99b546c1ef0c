/* Status codes and the error record every fallible library call fills.
 *
 * Two tiers (docs/design.md "Errors"): expected failures (bad input, missing file, NaN) return a
 * ttt_status and write a human message into a ttt_error; broken invariants (programmer errors)
 * go through TTT_ASSERT, which prints file:line and aborts. Library code never calls exit(). */
#ifndef TTT_STATUS_H
#define TTT_STATUS_H

#include <stdio.h>
#include <stdlib.h>

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
    TTT_ERR_ARG,         /* a bad command-line argument */
    TTT_ERR_UNSUPPORTED, /* a valid request this build or combination does not support */
    TTT_ERR_INTERRUPTED, /* stopped on request (SIGINT/SIGTERM) after saving a checkpoint */
    TTT_STATUS_COUNT
} ttt_status;

/* One short message per status code (the single table lives in status.c). */
const char *ttt_status_message(ttt_status s);

#define TTT_ERROR_MSG_LEN 1024

/* What went wrong, in words a user can act on: "exp.yaml:12:5: unknown key 'lrr' ...". */
typedef struct ttt_error {
    ttt_status status;
    char msg[TTT_ERROR_MSG_LEN];
} ttt_error;

/* Record an error and return `s` (so callers can `return ttt_error_set(...)`).
 * `err` may be NULL, in which case only the status is returned. */
ttt_status ttt_error_set(ttt_error *err, ttt_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefix an existing message with more context: "while loading X: <old message>". */
void ttt_error_prefix(ttt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ttt_error_clear(ttt_error *err);

/* Programmer errors: always on, also in release builds. */
#define TTT_ASSERT(cond)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: internal error: assertion '%s' failed\n", __FILE__,    \
                    __LINE__, #cond);                                                      \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

#define TTT_TRY(expr)                                                                      \
    do {                                                                                   \
        ttt_status ttt_try_s_ = (expr);                                                    \
        if (ttt_try_s_ != TTT_OK) return ttt_try_s_;                                       \
    } while (0)

#endif
