/* What a run folder records about how it was made (docs/training.md "Provenance"): the build
 * (version, git commit and whether the tree had uncommitted changes, compiler, flags, BLAS), the
 * machine (host, CPU model, cores), the threads, the command line with every --set, and when
 * the run started and ended. Written as provenance.json beside config.resolved.yaml. */
#ifndef TTT_PROVENANCE_H
#define TTT_PROVENANCE_H

#include <time.h>

#include "status.h"

/* The program's command line, remembered for the run folders written later (main calls it
 * once; a library user who does not leaves "command" null). Keeps the pointers: argv outlives
 * every run. */
void ttt_provenance_set_command(int argc, char *const *argv);

/* Write dir/provenance.json atomically. `end` 0 = still running (no "ended", outcome
 * "running"); otherwise the outcome ("complete", "interrupted", "failed: <message>"). */
ttt_status ttt_provenance_write(const char *dir, time_t start, time_t end, const char *outcome,
                                ttt_error *err);

#endif
