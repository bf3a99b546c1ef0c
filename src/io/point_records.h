/* The records of one sweep point in a file of its own: how the points of a run that several
 * processes share (MPI ranks, or jobs started with --shard) reach the one process that writes
 * the run folder (docs/scaling.md "Sweeps over ranks and jobs").
 *
 * The file is text: a first line "ttt-part 1 <config hash>", then one line per record, "S" (a
 * summary record) or "R" (a measurement only), then its fields separated by tabs, each
 * "n<key>=<hex float>" or "s<key>=<text>" (tabs and newlines in text become spaces). Hex floats
 * read back to the same double, so records loaded from a part equal the records saved. */
#ifndef TTT_POINT_RECORDS_H
#define TTT_POINT_RECORDS_H

#include "results.h"

/* Write records [from, ttt_results_count(res)) of res to `path` atomically, under `hash`. */
ttt_status ttt_part_save(const ttt_results *res, int from, const char *path, const char *hash,
                         ttt_error *err);
/* Add the records of the part at `path` to res when it exists and was saved under `hash`
 * (*found = 1); *found = 0 when there is no such file or it belongs to another configuration
 * (the point runs again). A malformed file is an error naming it. */
ttt_status ttt_part_load(ttt_results *res, const char *path, const char *hash, int *found,
                         ttt_error *err);

#endif
