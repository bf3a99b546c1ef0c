/* The text builder (strbuf.h). Capacity doubles, so n appends cost O(total length). */
#include "strbuf.h"

#include "fault.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* First allocation: room for a typical message or a short line without regrowing. */
enum { STRBUF_FIRST_CAP = 64 };

void ttt_strbuf_init(ttt_strbuf *b) {
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->limit = 0;
    b->failed = 0;
}

void ttt_strbuf_free(ttt_strbuf *b) {
    size_t limit = b->limit;
    free(b->data);
    ttt_strbuf_init(b);
    b->limit = limit;
}

void ttt_strbuf_reset(ttt_strbuf *b) {
    b->len = 0;
    b->failed = 0;
    if (b->data) b->data[0] = '\0';
}

/* Make room for `extra` more bytes plus the NUL; 0 (and `failed` set) when that is impossible. */
static int reserve(ttt_strbuf *b, size_t extra) {
    if (b->failed) return 0;
    if (extra > SIZE_MAX - 1 - b->len) {
        b->failed = 1;
        return 0;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return 1;
    if (b->limit && need > b->limit) {
        b->failed = 1;
        return 0;
    }
    size_t cap = b->cap ? b->cap : STRBUF_FIRST_CAP;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (b->limit && cap > b->limit) cap = b->limit; /* need fits: checked above */
    char *p = ttt_fault_realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return 0;
    }
    b->data = p;
    b->cap = cap;
    return 1;
}

void ttt_strbuf_append(ttt_strbuf *b, const char *s, size_t n) {
    if (!reserve(b, n)) return;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void ttt_strbuf_puts(ttt_strbuf *b, const char *s) { ttt_strbuf_append(b, s, strlen(s)); }

void ttt_strbuf_putc(ttt_strbuf *b, char c) { ttt_strbuf_append(b, &c, 1); }

void ttt_strbuf_vprintf(ttt_strbuf *b, const char *fmt, va_list ap) {
    if (b->failed) return;
    /* First try the room already there: most appends fit, and then the text is formatted once. */
    va_list again;
    va_copy(again, ap);
    size_t room = b->data ? b->cap - b->len : 0;
    int k = vsnprintf(room ? b->data + b->len : NULL, room, fmt, ap);
    if (k >= 0 && (size_t)k < room) {
        b->len += (size_t)k;
        va_end(again);
        return;
    }
    if (k >= 0 && reserve(b, (size_t)k)) {
        vsnprintf(b->data + b->len, (size_t)k + 1, fmt, again);
        b->len += (size_t)k;
    } else {
        b->failed = 1;
        /* the first attempt may have written over the terminator */
        if (b->data) b->data[b->len] = '\0';
    }
    va_end(again);
}

void ttt_strbuf_printf(ttt_strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ttt_strbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

const char *ttt_strbuf_str(const ttt_strbuf *b) { return b->data ? b->data : ""; }

char *ttt_strbuf_take(ttt_strbuf *b) {
    char *p = NULL;
    if (!b->failed) {
        p = b->data ? b->data : ttt_fault_calloc(1, 1);
        b->data = NULL;
    }
    ttt_strbuf_free(b);
    return p;
}

void ttt_strbuf_put_json(ttt_strbuf *b, const char *s) {
    ttt_strbuf_putc(b, '"');
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"') ttt_strbuf_puts(b, "\\\"");
        else if (c == '\\') ttt_strbuf_puts(b, "\\\\");
        else if (c < 0x20) ttt_strbuf_printf(b, "\\u%04x", c);
        else ttt_strbuf_putc(b, (char)c);
    }
    ttt_strbuf_putc(b, '"');
}
