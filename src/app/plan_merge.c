/* `ttt merge` (plan.h): the run folder from the parts of the points that --shard jobs ran. */
#define _XOPEN_SOURCE 700 /* nftw */
#define _DEFAULT_SOURCE /* flock, gethostname alongside it */
#include "plan.h"
#include "fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "comm.h"
#include "experiment.h"
#include "point_records.h"
#include "progress.h"
#include "provenance.h"
#include "results.h"
#include "strbuf.h"
#include "train.h"
#include "plan_internal.h"

/* The run folder from the parts every point left; the caller holds the folder's lock. */
ttt_status ttt_plan_merge_locked(const ttt_plan *p, const char *dir, FILE *table, ttt_error *err) {
    const ttt_plan_point *first = &p->points[0];
    ttt_results *res = ttt_results_new(first->name);
    if (!res) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    char missing[256] = "";
    int n_missing = 0;
    ttt_status s = ttt_results_stream(res, dir, err);
    for (int i = 0; i < p->n_points && s == TTT_OK; i++) {
        char part[4096];
        ttt_plan_part_path(part, sizeof part, dir, i, "rec");
        int found = 0;
        ttt_plan_stamp_point(p, i, res);
        s = ttt_part_load(res, part, p->points[i].config_hash, &found, err);
        if (s == TTT_OK && !found) {
            size_t n = strlen(missing);
            if (n < sizeof missing - 16)
                snprintf(missing + n, sizeof missing - n, "%s%d", n_missing ? ", " : "", i);
            else if (n < sizeof missing - 4)
                snprintf(missing + n, sizeof missing - n, ", …");
            n_missing++;
        }
    }
    if (s == TTT_OK && n_missing)
        s = ttt_error_set(err, TTT_ERR_IO,
                          "cannot merge %s: %d of %d points have no records in %s/parts (points "
                          "%s); run their shards (or the run without --shard) first",
                          dir, n_missing, p->n_points, dir, missing);
    if (s == TTT_OK) s = ttt_plan_write_resolved(p, dir, err);
    if (s == TTT_OK) s = ttt_plan_finish(p, res, dir, table, err);
    ttt_results_free(res);
    return s;
}

ttt_status ttt_plan_merge(const ttt_plan *p, const char *out_dir, FILE *table, ttt_error *err) {
    const char *dir = ttt_plan_output(p, out_dir);
    struct stat st;
    if (stat(dir, &st) != 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot merge %s: %s (run the --shard jobs first)",
                             dir, strerror(errno));
    TTT_TRY(ttt_plan_check_own_folder(p, dir, "merge", err));
    ttt_plan_run_locks L;
    TTT_TRY(ttt_plan_lock_run_folder(dir, -1, 0, &L, err));
    ttt_plan_remove_stale_tmp(p, dir, NULL, 0);
    ttt_status s = ttt_plan_check_own_folder(p, dir, "merge", err);
    if (s != TTT_OK) {
    } else if (ttt_plan_run_is_complete(p, dir)) {
        ttt_plan_say_complete(dir);
    } else {
        ttt_plan_remove_mark(dir);
        const time_t started = time(NULL);
        s = ttt_plan_merge_locked(p, dir, table, err);
        /* the merge's own command and time: the --shard jobs' are their own (docs/training.md
         * "Provenance"); then the mark, which vouches for it too */
        if (s == TTT_OK) s = ttt_provenance_write(dir, started, time(NULL), "complete", err);
        if (s == TTT_OK) s = ttt_plan_mark_complete(p, dir, err);
    }
    ttt_plan_unlock_run_folder(&L);
    return s;
}
