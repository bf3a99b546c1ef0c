/* Writing a configuration tree back as YAML: block style for files, flow style for labels. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <yaml.h>

#include "fault.h"
#include "infile.h"
#include "strbuf.h"
#include "config_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* writing                                                                                     */

/* Would this text, written plain, be read back as something other than a string? */
static int reads_as_non_string(const char *s) {
    static const char *const words[] = {"true", "false", "yes", "no", "on", "off", "y", "n"};
    if (ttt_cfg_is_null_word(s) || ttt_cfg_looks_numeric(s)) return 1;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (ttt_cfg_ieq(s, words[i])) return 1;
    return 0;
}

/* YAML also breaks lines at NEL, LINE SEPARATOR and PARAGRAPH SEPARATOR (UTF-8 below);
 * returns the escape letter when `s` starts with one of them. */
static char unicode_break_at(const char *s) {
    if (strncmp(s, "\xc2\x85", 2) == 0) return 'N';
    if (strncmp(s, "\xe2\x80\xa8", 3) == 0) return 'L';
    if (strncmp(s, "\xe2\x80\xa9", 3) == 0) return 'P';
    return 0;
}

static int unicode_break(const char *s) {
    for (; *s; s++)
        if (unicode_break_at(s)) return 1;
    return 0;
}

/* Can this text be written as a plain scalar and read back unchanged? (`flow`: inside [..] or
 * {..}, where , [ ] { } and ':' also end a plain scalar.) */
static int plain_ok(const char *s, int flow) {
    size_t len = strlen(s);
    if (len == 0) return 0;
    if (s[0] == ' ' || s[len - 1] == ' ') return 0;
    if (strchr("!&*|>'\"%@`#,[]{}", s[0])) return 0;
    if (strchr("-?:", s[0]) && (s[1] == '\0' || s[1] == ' ' || (flow && strchr(",[]{}", s[1]))))
        return 0;
    if (strncmp(s, "---", 3) == 0 || strncmp(s, "...", 3) == 0) return 0;
    if (strstr(s, ": ") || strstr(s, " #") || s[len - 1] == ':') return 0;
    if (unicode_break(s)) return 0;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c == 0x7f) return 0;
        if (flow && strchr(",[]{}:", c)) return 0;
    }
    return 1;
}

static void put_quoted(ttt_cfg_sbuf *b, const char *s) {
    ttt_cfg_sb_putc(b, '"');
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        char brk = unicode_break_at(p);
        if (brk) {
            ttt_cfg_sb_putc(b, '\\');
            ttt_cfg_sb_putc(b, brk);
            p += brk == 'N' ? 1 : 2;
            continue;
        }
        switch (c) {
        case '"': ttt_cfg_sb_puts(b, "\\\""); break;
        case '\\': ttt_cfg_sb_puts(b, "\\\\"); break;
        case '\n': ttt_cfg_sb_puts(b, "\\n"); break;
        case '\t': ttt_cfg_sb_puts(b, "\\t"); break;
        case '\r': ttt_cfg_sb_puts(b, "\\r"); break;
        default:
            if (c < 0x20 || c == 0x7f)
                ttt_cfg_sb_printf(b, "\\x%02x", c);
            else
                ttt_cfg_sb_putc(b, (char)c);
        }
    }
    ttt_cfg_sb_putc(b, '"');
}

/* A quoted node keeps its quotes only where plain text would read as a number, bool or null;
 * an unquoted node is written plain when the syntax allows (so new_scalar("null") writes a
 * real null, as its text says). */
static void put_scalar(ttt_cfg_sbuf *b, const char *s, int quoted, int flow) {
    if (!s)
        ttt_cfg_sb_puts(b, "null");
    else if (!plain_ok(s, flow) || (quoted && reads_as_non_string(s)))
        put_quoted(b, s);
    else
        ttt_cfg_sb_puts(b, s);
}

/* Keys are always strings: quote any that would read as something else. */
static void put_key(ttt_cfg_sbuf *b, const char *k, int flow) { put_scalar(b, k, 1, flow); }

void ttt_cfg_put_flow(ttt_cfg_sbuf *b, const ttt_cfg_node *n) {
    switch (n->kind) {
    case TTT_CFG_SCALAR: put_scalar(b, n->scalar, n->quoted, 1); break;
    case TTT_CFG_SEQ:
        ttt_cfg_sb_putc(b, '[');
        for (int i = 0; i < n->n; i++) {
            if (i) ttt_cfg_sb_puts(b, ", ");
            ttt_cfg_put_flow(b, n->items[i]);
        }
        ttt_cfg_sb_putc(b, ']');
        break;
    case TTT_CFG_MAP:
        ttt_cfg_sb_putc(b, '{');
        for (int i = 0; i < n->n; i++) {
            if (i) ttt_cfg_sb_puts(b, ", ");
            put_key(b, n->keys[i], 1);
            ttt_cfg_sb_puts(b, ": ");
            ttt_cfg_put_flow(b, n->items[i]);
        }
        ttt_cfg_sb_putc(b, '}');
        break;
    }
}

char *ttt_cfg_to_flow(const ttt_cfg_node *n) {
    ttt_cfg_sbuf b = {0};
    if (n) ttt_cfg_put_flow(&b, n);
    return ttt_cfg_sb_take(&b);
}

static void indent_to(ttt_cfg_sbuf *b, int indent) {
    for (int i = 0; i < indent; i++) ttt_cfg_sb_putc(b, ' ');
}

static void put_block_map(ttt_cfg_sbuf *b, const ttt_cfg_node *m, int indent, int first_inline);
static void put_block_seq(ttt_cfg_sbuf *b, const ttt_cfg_node *s, int indent);

/* The rest of a line after "key:" or "-": a scalar or short list inline, else a nested block. */
static void put_after_indicator(ttt_cfg_sbuf *b, const ttt_cfg_node *v, int indent, int in_seq) {
    if (v->kind == TTT_CFG_SCALAR) {
        ttt_cfg_sb_putc(b, ' ');
        put_scalar(b, v->scalar, v->quoted, 0);
        ttt_cfg_sb_putc(b, '\n');
        return;
    }
    if (v->n == 0) {
        ttt_cfg_sb_puts(b, v->kind == TTT_CFG_SEQ ? " []\n" : " {}\n");
        return;
    }
    if (v->kind == TTT_CFG_SEQ) {
        int scalars = 1;
        for (int i = 0; i < v->n && scalars; i++) scalars = v->items[i]->kind == TTT_CFG_SCALAR;
        if (scalars) {
            /* Lists of numbers read best on one line; long ones go back to block style. */
            ttt_cfg_sbuf flow = {0};
            ttt_cfg_put_flow(&flow, v);
            ttt_cfg_sb_check(&flow); /* failed: counted, and written in block style below */
            int fits = !flow.failed && indent + (int)flow.len <= 96;
            if (fits) {
                ttt_cfg_sb_putc(b, ' ');
                ttt_cfg_sb_puts(b, flow.data);
                ttt_cfg_sb_putc(b, '\n');
            }
            ttt_strbuf_free(&flow);
            if (fits) return;
        }
        ttt_cfg_sb_putc(b, '\n');
        put_block_seq(b, v, indent + 2);
        return;
    }
    if (in_seq) {
        ttt_cfg_sb_putc(b, ' ');
        put_block_map(b, v, indent + 2, 1);
    } else {
        ttt_cfg_sb_putc(b, '\n');
        put_block_map(b, v, indent + 2, 0);
    }
}

static void put_block_map(ttt_cfg_sbuf *b, const ttt_cfg_node *m, int indent, int first_inline) {
    for (int i = 0; i < m->n; i++) {
        if (i > 0 || !first_inline) indent_to(b, indent);
        put_key(b, m->keys[i], 0);
        ttt_cfg_sb_putc(b, ':');
        put_after_indicator(b, m->items[i], indent, 0);
    }
}

static void put_block_seq(ttt_cfg_sbuf *b, const ttt_cfg_node *s, int indent) {
    for (int i = 0; i < s->n; i++) {
        indent_to(b, indent);
        ttt_cfg_sb_putc(b, '-');
        put_after_indicator(b, s->items[i], indent, 1);
    }
}

int ttt_cfg_write_yaml(const ttt_cfg_node *root, FILE *f) {
    TTT_ASSERT(f);
    const unsigned long oom_mark = ttt_cfg_oom_count;
    ttt_cfg_sbuf b = {0};
    if (!root)
        ttt_cfg_sb_puts(&b, "null\n");
    else if (root->kind == TTT_CFG_SCALAR) {
        put_scalar(&b, root->scalar, root->quoted, 0);
        ttt_cfg_sb_putc(&b, '\n');
    } else if (root->n == 0)
        ttt_cfg_sb_puts(&b, root->kind == TTT_CFG_MAP ? "{}\n" : "[]\n");
    else if (root->kind == TTT_CFG_MAP)
        put_block_map(&b, root, 0, 0);
    else
        put_block_seq(&b, root, 0);
    ttt_cfg_sb_check(&b);
    /* nothing at all rather than text with a piece missing */
    if (ttt_cfg_oom_count == oom_mark) fwrite(b.data, 1, b.len, f);
    ttt_strbuf_free(&b);
    return ttt_cfg_oom_count == oom_mark ? 0 : -1;
}
