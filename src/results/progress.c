/* Progress display: quiet for the first second, a redrawn line on a terminal, sparse plain
 * lines in logs. */
#include "progress.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

/* Below this, a run is short enough that progress would only be noise. */
static const double QUIET_SECONDS = 1.0;
/* Terminal redraws: often enough to look live, rarely enough to cost nothing. */
static const double TTY_INTERVAL = 0.1;
/* Log lines: a log should show that the run moves, not every step. */
static const double PLAIN_INTERVAL = 5.0;
enum { BAR_WIDTH = 20, STATUS_MAX = 60 };

static double (*clock_override)(void) = NULL;

void ttt_progress_set_clock(double (*now)(void)) { clock_override = now; }

double ttt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double pnow(void) { return clock_override ? clock_override() : ttt_now(); }

void ttt_progress_init(ttt_progress *p, const char *label, long total, FILE *out, int enabled) {
    memset(p, 0, sizeof *p);
    p->out = out ? out : stderr;
    p->is_tty = isatty(fileno(p->out)) == 1;
    p->enabled = enabled;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    p->total = total;
    p->done = 0;
    p->t_start = pnow();
    p->t_last_print = p->t_start;
    p->shown = 0;
}

/* "12.3s", "3m05s", "1h02m": short, and readable at a glance. */
static void fmt_duration(char *out, size_t len, double s) {
    if (!(s >= 0)) s = 0;
    if (s < 60) {
        snprintf(out, len, "%.1fs", s);
    } else if (s < 3600) {
        long t = (long)s;
        snprintf(out, len, "%ldm%02lds", t / 60, t % 60);
    } else {
        long t = (long)(s / 60);
        snprintf(out, len, "%ldh%02ldm", t / 60, t % 60);
    }
}

/* A status must stay on one line and short enough not to wrap (a wrapped line cannot be
 * redrawn with \r). */
static void clean_status(char *out, size_t len, const char *status) {
    size_t n = 0;
    if (status)
        for (; status[n] && n + 1 < len && n < STATUS_MAX; n++) {
            unsigned char c = (unsigned char)status[n];
            out[n] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
        }
    /* cut before a UTF-8 sequence, not inside it */
    if (status)
        while (n > 0 && ((unsigned char)status[n] & 0xC0) == 0x80) n--;
    out[n] = '\0';
}

static void eta_text(const ttt_progress *p, double elapsed, char *out, size_t len) {
    if (p->total > 0 && p->done > 0 && p->done <= p->total) {
        char d[32];
        fmt_duration(d, sizeof d, elapsed * (double)(p->total - p->done) / (double)p->done);
        snprintf(out, len, "  ETA %s", d);
    } else {
        out[0] = '\0';
    }
}

static void draw_tty(ttt_progress *p, double elapsed, const char *status, int final) {
    char el[32], eta[48] = "", st[STATUS_MAX + 8];
    fmt_duration(el, sizeof el, elapsed);
    if (!final) eta_text(p, elapsed, eta, sizeof eta);
    clean_status(st, sizeof st, status);
    fprintf(p->out, "\r%s", p->label);
    if (p->total > 0) {
        long filled = p->done >= p->total ? BAR_WIDTH
                      : p->done <= 0      ? 0
                                          : (long)((double)p->done / (double)p->total * BAR_WIDTH);
        char bar[BAR_WIDTH + 1];
        for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < filled ? '#' : '.';
        bar[BAR_WIDTH] = '\0';
        fprintf(p->out, " [%s] %ld/%ld", bar, p->done, p->total);
    } else {
        fprintf(p->out, " %ld", p->done);
    }
    fprintf(p->out, "  %s%s%s%s\033[K", el, eta, st[0] ? "  " : "", st);
    if (final) fputc('\n', p->out);
    fflush(p->out);
}

static void draw_plain(ttt_progress *p, double elapsed, const char *status, int final) {
    char el[32], eta[48] = "", st[STATUS_MAX + 8];
    fmt_duration(el, sizeof el, elapsed);
    clean_status(st, sizeof st, status);
    fprintf(p->out, "%s:", p->label);
    if (p->total > 0)
        fprintf(p->out, " %ld/%ld (%.0f%%)", p->done, p->total,
                100.0 * (double)p->done / (double)p->total);
    else
        fprintf(p->out, " %ld", p->done);
    if (final) {
        fprintf(p->out, "  done in %s\n", el);
    } else {
        eta_text(p, elapsed, eta, sizeof eta);
        fprintf(p->out, "  %s elapsed%s%s%s\n", el, eta, st[0] ? "  " : "", st);
    }
    fflush(p->out);
}

void ttt_progress_update(ttt_progress *p, long done, const char *status) {
    p->done = done;
    if (!p->enabled) return;
    double t = pnow(), elapsed = t - p->t_start;
    if (elapsed < QUIET_SECONDS) return;
    if (p->shown && t - p->t_last_print < (p->is_tty ? TTY_INTERVAL : PLAIN_INTERVAL)) return;
    if (p->is_tty)
        draw_tty(p, elapsed, status, 0);
    else
        draw_plain(p, elapsed, status, 0);
    p->shown = 1;
    p->t_last_print = t;
}

void ttt_progress_finish(ttt_progress *p) {
    if (!p->enabled) return;
    double t = pnow(), elapsed = t - p->t_start;
    if (p->shown || elapsed >= QUIET_SECONDS) {
        if (p->is_tty)
            draw_tty(p, elapsed, "done", 1);
        else
            draw_plain(p, elapsed, NULL, 1);
    }
    /* one final line per run, however often finish is called */
    p->enabled = 0;
}
