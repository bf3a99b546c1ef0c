/* A process forked after libttt ran threads (docs/python.md "Processes"). GCC's OpenMP runtime
 * is not fork-safe: a child inherits its record of the parent's worker threads, which do not
 * exist in the child, and the child's next top-level parallel region of more than one thread
 * waits for them forever. So a child forked once the library has picked a thread count (and may
 * have started workers) runs its layers on the calling thread: the handler below marks the child
 * (ttt_layer_batch_threads then answers 1) and sets its OpenMP default to one thread, which the
 * regions without an explicit count follow (the backward's scans). Registered at the first use,
 * by pthread_once, not at load; if pthread_atfork fails (no memory) children are not marked. */
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Set in the child only, by the handler, before the child has any other thread. */
static int forked_child;
static pthread_once_t registered = PTHREAD_ONCE_INIT;

static void in_child(void) {
    forked_child = 1;
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
}

static void register_handler(void) { (void)pthread_atfork(NULL, NULL, in_child); }

/* n, or 1 in a process forked after a call of this function (layers/batch.c). */
int ttt_fork_threads(int n);
int ttt_fork_threads(int n) {
    pthread_once(&registered, register_handler);
    return forked_child ? 1 : n;
}
