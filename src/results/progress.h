/* Progress on stderr for runs longer than a second.
 *
 * Nothing is shown during the first second (short runs stay quiet). On a terminal, one line is
 * redrawn in place: a bar, the count, elapsed time, an estimate of the time left and a short
 * status text. When stderr is not a terminal (a log file, CI), plain lines are printed instead,
 * at most one every few seconds and at the end, so logs stay readable. */
#ifndef TTT_PROGRESS_H
#define TTT_PROGRESS_H

#include <stdio.h>

typedef struct ttt_progress {
    FILE *out;
    int is_tty;
    int enabled;        /* 0: print nothing at all (e.g. --quiet) */
    char label[64];
    long total, done;
    double t_start, t_last_print;
    int shown;          /* printed anything yet */
} ttt_progress;

/* out = NULL means stderr. */
void ttt_progress_init(ttt_progress *p, const char *label, long total, FILE *out, int enabled);
void ttt_progress_update(ttt_progress *p, long done, const char *status);
/* Print the final state (if anything was shown, or if the run took at least a second) and end
 * the line. Later calls on the same progress print nothing. */
void ttt_progress_finish(ttt_progress *p);
/* Monotonic seconds. */
double ttt_now(void);

/* Test hook: the clock progress reads instead of ttt_now (NULL restores ttt_now), so tests can
 * step time without sleeping. Affects only progress, not ttt_now itself. */
void ttt_progress_set_clock(double (*now)(void));

#endif
