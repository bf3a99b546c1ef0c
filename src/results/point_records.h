/* The records of one sweep point in a file of its own: how the points of a run that several
 * processes share (MPI ranks, or jobs started with --shard) reach the one process that writes
 * the run folder (docs/scaling.md "Sweeps over ranks and jobs").
 *
 * The file is text: a first line "ttt-part 2 <config hash>", then one line per record, "S" (a
 * summary record) or "R" (a measurement only), then its fields separated by tabs, each
 * "n<key>=<hex float>" or "s<key>=<text>" (tabs and newlines in text become spaces), then
 * "\t#<16 hex digits>": the FNV-1a 64 of the line's bytes before that tab, so that a record
 * changed after it was written (one flipped digit) is refused rather than merged (docs/hardening.md
 * "Record checksums"). Hex floats read back to the same double, so records loaded from a part
 * equal the records saved. Version 1 (without checksums) is refused with a message saying so. */
#ifndef TTT_POINT_RECORDS_H
#define TTT_POINT_RECORDS_H

#include <stdio.h>

#include "results.h"

/* Write records [from, ttt_results_count(res)) of res to `path` atomically, under `hash`. */
ttt_status ttt_part_save(const ttt_results *res, int from, const char *path, const char *hash,
                         ttt_error *err);
/* Add the records of the part at `path` to res when it exists and was saved under `hash`
 * (*found = 1); *found = 0 when there is no such file or it belongs to another configuration
 * (the point runs again). A malformed file is an error naming it. */
ttt_status ttt_part_load(ttt_results *res, const char *path, const char *hash, int *found,
                         ttt_error *err);

/* ---- the record journal of a trained point (checkpoints/point<i>/records.jsonl) ----
 *
 * One JSON object per line: the record as ttt_record_write_json writes it, with one more member
 * at its end, "checksum":"<16 hex digits>", the FNV-1a 64 of the bytes of the object as written
 * without that member, e.g. {"step":5,"loss":0.25} becomes
 * {"step":5,"loss":0.25,"checksum":"…"}; the lines stay JSON (`tail -f`, jq). */

/* Write r and its checksum as one line ('\n' included) to f. 0, or −1 when the line could not
 * be formed (out of memory; errno set) or written (ferror). */
int ttt_journal_write(const ttt_record *r, FILE *f);
/* Read one line of a journal (with or without its '\n') into r. TTT_OK; TTT_ERR_FORMAT with the
 * reason in err ("malformed …", "checksum mismatch …", "no checksum …") without a location:
 * the caller adds the file and line. */
ttt_status ttt_journal_parse(ttt_record *r, const char *line, ttt_error *err);

#endif
