/* What the files of the plan pass and the runner (src/app/plan*.c, folder_*.c) share and nothing
 * else sees. Private to src/app. */
#ifndef TTT_PLAN_INTERNAL_H
#define TTT_PLAN_INTERNAL_H

#include <stdio.h>

#include "plan.h"
#include "results.h"

/* Name the sweep point after the message, so the message still starts with file:line:col. */
void ttt_plan_error_suffix_point(ttt_error *err, const char *label);

/* The configuration hash of a resolved point: everything but the keys that name or place the
 * run (name, description, output) and those that do not change its results (train.stop_at,
 * train.threads, train.data_parallel). Checkpoints store it; changing the definition orphans every checkpoint. */
void ttt_plan_config_hash(const ttt_cfg_node *root, char hash[17]);

/* `seeds:` of the document: 1 when absent; a value that is not a count is left to the option
 * check of every point, which names its location. */
int ttt_plan_doc_seeds(const ttt_cfg_node *doc);

/* `charts: {log_y: auto | true | false | [chart names]}` into p. */
ttt_status ttt_plan_read_charts(const ttt_cfg_node *doc, ttt_plan *p, ttt_error *err);

/* `results: {best_over: KEY, metric: NAME, goal: max | min}` into p (docs/results.md "Best over
 * an axis"), after the columns are known: KEY must be one of them, NAME a column of the task's
 * summary. */
ttt_status ttt_plan_read_results(const ttt_cfg_node *doc, ttt_plan *p, ttt_error *err);

/* Columns, values, groups and series labels of every point. `digits` (n_sweep × axes): the
 * sweep value index of each axis for each sweep point; point i is sweep point i / seeds,
 * replicate i % seeds; `trees` the points' resolved trees. */
ttt_status ttt_plan_columns(ttt_plan *p, const ttt_cfg_node *sweep,
                               ttt_cfg_node *const *trees, ttt_error *err);

/* The fields every record of point i starts with: its value of each column, a number when
 * the text is one. */
void ttt_plan_point_fields(const ttt_plan *p, int i, ttt_record *r);

/* Each sweep point `seeds` times with seeds seed, seed + 1, …: the trees and labels replaced
 * by the n × seeds ones. */
ttt_status ttt_plan_replicate(ttt_cfg_node ***trees, char ***labels, int *n, int seeds,
                            ttt_error *err);

/* config.resolved.yaml goes first, so a run folder always says what produced it. */
ttt_status ttt_plan_write_resolved(const ttt_plan *p, const char *dir, ttt_error *err);

#define TTT_PLAN_LOCK_FILE ".ttt-lock"

/* The locks one process holds on a run folder: the main lock, and a --shard job's own. */
typedef struct ttt_plan_run_locks {
    int main, shard;
    int main_op;
} ttt_plan_run_locks;

/* shard < 0: the whole folder (a run or a merge); else the lock of --shard shard/n_shards. */
ttt_status ttt_plan_lock_run_folder(const char *dir, int shard, int n_shards, ttt_plan_run_locks *L,
                                  ttt_error *err);

void ttt_plan_unlock_run_folder(ttt_plan_run_locks *L);

/* Temporary files a killed run left in the folders the lock holder owns (no live writer owns
 * them): the whole folder's for the main lock's exclusive holder; a shard job's own points'
 * checkpoint folders only (its siblings write into the run folder and parts/ at the same time).
 * owner: (n_points) or NULL = every point. */
void ttt_plan_remove_stale_tmp(const ttt_plan *p, const char *dir, const int *owner, int me);

/* The folder holds a completed run of exactly this plan: its mark matches and its results are
 * there. Running it again would only spend the time to write the same numbers. */
int ttt_plan_run_is_complete(const ttt_plan *p, const char *dir);

void ttt_plan_say_complete(const char *dir);

void ttt_plan_part_path(char *out, size_t len, const char *dir, int i, const char *ext);

/* Charts, metrics.jsonl, summary.csv, the charts, index.html, and the table (table NULL: none). */
ttt_status ttt_plan_finish(const ttt_plan *p, ttt_results *res, const char *dir, FILE *table,
                         ttt_error *err);

/* A whole run's end, once everything the mark vouches for is written (the results, and
 * provenance.json with its outcome): the completion mark, then the parts are spent (in that
 * order: a run that fails at its last write still has what it needs to end, and a folder is
 * never marked complete over a file that did not reach the disk). */
ttt_status ttt_plan_mark_complete(const ttt_plan *p, const char *dir, ttt_error *err);

/* From now on the records added to res belong to point i: its columns first. */
void ttt_plan_stamp_point(const ttt_plan *p, int i, ttt_results *res);

void ttt_plan_remove_mark(const char *dir);

/* `cmd` (run or merge) may write the folder `dir` for plan p: it is absent or empty, or a run
 * folder of this experiment: the same points, each with the same configuration hash (so a
 * changed train.stop_at or train.threads continues it; anything that changes a result does
 * not). Anything else is refused before a byte is written. */
ttt_status ttt_plan_check_own_folder(const ttt_plan *p, const char *dir, const char *cmd,
                                   ttt_error *err);

/* The topmost folder of `dir` that does not exist yet (malloc'd into *out), or NULL when dir
 * exists: what the run creates, and removes again if it fails before its first point. */
ttt_status ttt_plan_topmost_missing(const char *dir, char **out, ttt_error *err);

/* Remove what the run created: the run folder with what it wrote there (only with its lock
 * held: then nothing in it is another's), and each empty folder above it up to `created`. */
void ttt_plan_remove_created(const char *dir, const char *created, int locked);

void ttt_plan_remove_contents(const char *dir, int lock_was_there);

/* A point of the folder kept a checkpoint: the work of a failed run that the next one resumes. */
int ttt_plan_holds_checkpoint(const ttt_plan *p, const char *dir);

/* The run folder from the parts every point left; the caller holds the folder's lock. */
ttt_status ttt_plan_merge_locked(const ttt_plan *p, const char *dir, FILE *table, ttt_error *err);

#endif
