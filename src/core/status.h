/* Status codes and the error record every fallible library call fills.
 *
 * Two tiers (docs/design.md "Errors"): expected failures (bad input, missing file, NaN) return a
 * ttt_status and write a human message into a ttt_error; broken invariants (programmer errors)
 * go through TTT_ASSERT, which prints file:line and aborts. Library code never calls exit(). */
#ifndef TTT_STATUS_H
#define TTT_STATUS_H

#include <stdio.h>
#include <stdlib.h>

#include <ttt/status.h> /* the codes, the error record and ttt_status_message */

#ifdef __cplusplus
extern "C" {
#endif

/* Record an error and return `s` (so callers can `return ttt_error_set(...)`).
 * `err` may be NULL, in which case only the status is returned. */
ttt_status ttt_error_set(ttt_error *err, ttt_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefix an existing message with more context: "while loading X: <old message>". */
void ttt_error_prefix(ttt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ttt_error_clear(ttt_error *err);

#ifdef __cplusplus
}
#endif

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
