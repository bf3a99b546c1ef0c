/* A growable NUL-terminated string: the one text builder of the library (JSON headers, YAML,
 * SVG, HTML, messages).
 *
 * An allocation failure never aborts and never truncates silently: it sets `failed`, which
 * stays set (later appends do nothing) until ttt_strbuf_reset, ttt_strbuf_take or
 * ttt_strbuf_free. A caller appends freely and checks once at the end, either `b.failed` or a
 * NULL from ttt_strbuf_take. So text that was built is always whole text.
 *
 *   ttt_strbuf b;
 *   ttt_strbuf_init(&b);
 *   ttt_strbuf_printf(&b, "%d items", n);
 *   char *s = ttt_strbuf_take(&b);      // NULL: out of memory
 */
#ifndef TTT_STRBUF_H
#define TTT_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct ttt_strbuf {
    char *data;   /* [cap] the text, NUL-terminated at len; NULL until the first append */
    size_t len;   /* bytes of text, without the NUL */
    size_t cap;   /* bytes allocated */
    size_t limit; /* most bytes the buffer may allocate (text + NUL); 0 = no limit. Growing past
                     it fails like an allocation failure: a bound for untrusted sizes, and the
                     way tests reach the failure path. */
    int failed;   /* sticky: an allocation failed (or would exceed limit or SIZE_MAX) */
} ttt_strbuf;

/* An empty builder (zero-initialising the struct does the same). */
void ttt_strbuf_init(ttt_strbuf *b);
/* Release the buffer; the builder is empty again (limit kept) and may be reused. */
void ttt_strbuf_free(ttt_strbuf *b);
/* Empty the text and clear `failed`, keeping the allocation for reuse. */
void ttt_strbuf_reset(ttt_strbuf *b);

/* Append n bytes (may contain NUL bytes; the text stays NUL-terminated after them). */
void ttt_strbuf_append(ttt_strbuf *b, const char *s, size_t n);
void ttt_strbuf_puts(ttt_strbuf *b, const char *s);
void ttt_strbuf_putc(ttt_strbuf *b, char c);
/* printf-style append of any length (no fixed-size intermediate buffer). An encoding error
 * from vsnprintf also sets `failed`, since the text would otherwise be missing a piece. */
void ttt_strbuf_printf(ttt_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ttt_strbuf_vprintf(ttt_strbuf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* Append s as a JSON string literal (RFC 8259 escapes; UTF-8 passes through). */
void ttt_strbuf_put_json(ttt_strbuf *b, const char *s);

/* The text so far, never NULL ("" when nothing was appended); valid until the next append. */
const char *ttt_strbuf_str(const ttt_strbuf *b);

/* Hand the malloc'd text to the caller (free() it) and leave the builder empty (limit kept).
 * NULL when `failed` was set (the partial text is freed) or the empty string could not be
 * allocated; the caller reports out of memory. */
char *ttt_strbuf_take(ttt_strbuf *b);

#endif
