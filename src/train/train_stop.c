/* Stop signalling of training (train.h): a request from a signal handler, shared with the ranks
 * that run apart. */
#include "train.h"

#include <signal.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "comm.h"

static volatile sig_atomic_t stop_requested;

/* Ranks that run apart and share a stop (ttt_train_stop_peers), and whether they were told. */
static const ttt_comm *stop_peers;
static int stop_told;

void ttt_train_request_stop(void) { stop_requested = 1; }

const volatile sig_atomic_t *ttt_train_stop_flag(void) { return &stop_requested; }

void ttt_train_stop_peers(const ttt_comm *c) {
    if (!c && stop_peers) (void)ttt_comm_stop_heard(stop_peers); /* notices no one waits for */
    stop_peers = c && c->size > 1 ? c : NULL;
    stop_told = 0;
}

int ttt_train_stop_requested(void) {
    if (stop_peers && !omp_in_parallel() && !stop_told) { /* MPI from the main thread only */
        if (stop_requested) {
            ttt_comm_stop_notify(stop_peers);
            stop_told = 1;
        } else if (ttt_comm_stop_heard(stop_peers)) {
            stop_requested = 1;
            stop_told = 1; /* the rank that saw the signal told every rank */
        }
    }
    return stop_requested != 0;
}

ttt_status ttt_train_check_stop(ttt_error *err) {
    return ttt_train_stop_requested() ? ttt_error_set(err, TTT_ERR_INTERRUPTED, "interrupted")
                                      : TTT_OK;
}
