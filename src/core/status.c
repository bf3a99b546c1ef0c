#include "status.h"

#include <stdarg.h>
#include <string.h>

static const char *const status_messages[TTT_STATUS_COUNT] = {
    [TTT_OK] = "ok",
    [TTT_ERR_NOMEM] = "out of memory",
    [TTT_ERR_IO] = "input/output error",
    [TTT_ERR_YAML] = "malformed YAML",
    [TTT_ERR_CONFIG] = "invalid configuration",
    [TTT_ERR_RANGE] = "value out of range",
    [TTT_ERR_NAME] = "unknown name",
    [TTT_ERR_SHAPE] = "shape mismatch",
    [TTT_ERR_NUMERIC] = "non-finite number",
    [TTT_ERR_FORMAT] = "malformed data file",
    [TTT_ERR_ARG] = "bad command-line argument",
    [TTT_ERR_UNSUPPORTED] = "unsupported",
    [TTT_ERR_INTERRUPTED] = "interrupted",
    [TTT_ERR_DEVICE] = "device error",
};

const char *ttt_status_message(ttt_status s) {
    if ((int)s < 0 || s >= TTT_STATUS_COUNT) return "unknown status";
    return status_messages[s];
}

ttt_status ttt_error_set(ttt_error *err, ttt_status s, const char *fmt, ...) {
    if (!err) return s;
    err->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return s;
}

void ttt_error_prefix(ttt_error *err, const char *fmt, ...) {
    if (!err) return;
    char old[TTT_ERROR_MSG_LEN];
    memcpy(old, err->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    /* append ": <old message>", cut to the buffer (a long context must not lose the message
     * entirely, so the context is what gets cut when both do not fit) */
    size_t used = n < 0 ? 0 : (size_t)n;
    if (used > sizeof err->msg / 2) used = sizeof err->msg / 2;
    err->msg[used] = '\0';
    size_t room = sizeof err->msg - used;
    size_t oldlen = strnlen(old, sizeof old - 1);
    if (room > 2) {
        err->msg[used] = ':';
        err->msg[used + 1] = ' ';
        size_t c = oldlen < room - 3 ? oldlen : room - 3;
        memcpy(err->msg + used + 2, old, c);
        err->msg[used + 2 + c] = '\0';
    }
}

void ttt_error_clear(ttt_error *err) {
    if (!err) return;
    err->status = TTT_OK;
    err->msg[0] = '\0';
}
