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

/* ---- what a command may write (docs/hardening.md "What a command may overwrite") ----
 * One rule for every command that writes: it never overwrites one of its inputs, a run folder
 * that is not its own, or a folder that no ttt command wrote. */

typedef enum ttt_folder_kind {
    TTT_FOLDER_ABSENT,     /* nothing there: the command creates it */
    TTT_FOLDER_EMPTY,      /* a folder holding nothing but ttt's lock and temporary files */
    TTT_FOLDER_RUN,        /* a run folder: it holds config.resolved.yaml (ttt run, ttt merge) */
    TTT_FOLDER_COMPARISON, /* what `ttt compare --out` wrote: it holds TTT_COMPARISON_MARK */
    TTT_FOLDER_OTHER,      /* anything else: other files, not a folder, or unreadable */
} ttt_folder_kind;

/* The file that marks a folder `ttt compare --out` wrote (it lists the runs compared). */
#define TTT_COMPARISON_MARK ".ttt-comparison"

ttt_folder_kind ttt_folder_kind_of(const char *dir);
/* `cmd` may write the folder `dir`: it is absent, empty, or of the kind `own` (TTT_FOLDER_RUN
 * for run and merge, TTT_FOLDER_COMPARISON for compare; whether a run folder is this run's own
 * is the caller's to decide), and lies inside no run folder or comparison. Otherwise TTT_ERR_ARG naming the folder, what it holds and what
 * to do; nothing has been written. */
ttt_status ttt_output_folder_check(const char *cmd, const char *dir, ttt_folder_kind own,
                                   ttt_error *err);
/* `cmd` may write the file `out`: it is none of the `n_inputs` input files (the same path, or
 * the same file under another name) and lies in no run folder or comparison folder (no folder
 * from its own up to / is one: those are written only by the command that made them).
 * Otherwise TTT_ERR_ARG naming both; nothing has been written. */
ttt_status ttt_output_file_check(const char *cmd, const char *out, const char *const *inputs,
                                 int n_inputs, ttt_error *err);

#endif
