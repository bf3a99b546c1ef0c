/* `ttt compare`: the summaries of several run folders side by side, in one table and, with an
 * output folder, one page with the runs' charts overlaid (docs/results.md "Comparing runs"). */
#ifndef TTT_COMPARE_H
#define TTT_COMPARE_H

#include <stdio.h>

#include "status.h"

/* Compare the runs in dirs (n of them, each a folder `ttt run` completed) of one task kind:
 * print the merged table to `table` (NULL: nowhere) and, when out is not NULL, write the merged
 * summary.csv, metrics.jsonl, charts and index.html into out (created; not one of the runs).
 * Errors name the folder: not a run folder, a run not completed, runs of different kinds. */
ttt_status ttt_compare(const char *const *dirs, int n, const char *out, FILE *table,
                       ttt_error *err);

#endif
