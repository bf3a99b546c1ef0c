/* Running a plan (plan.h): its points on this process, on the ranks of an MPI job or in --shard
 * jobs (docs/scaling.md). */
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
#include "trained.h"
#include "plan_internal.h"

void ttt_plan_assign(const ttt_plan *p, int n, int *owner) {
    const int np = p->n_points;
    int *ord = ttt_fault_malloc((size_t)(np > 0 ? np : 1) * sizeof *ord);
    double *load = ttt_fault_calloc((size_t)(n > 0 ? n : 1), sizeof *load);
    if (!ord || !load || n < 1) { /* out of memory: round robin is still an assignment */
        for (int i = 0; i < np; i++) owner[i] = n > 0 ? i % n : 0;
        free(ord);
        free(load);
        return;
    }
    /* costliest first, ties in point order (insertion sort: stable, and sweeps are small) */
    for (int i = 0; i < np; i++) {
        int j = i;
        while (j > 0 && p->points[ord[j - 1]].cost < p->points[i].cost) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = i;
    }
    for (int k = 0; k < np; k++) {
        int best = 0;
        for (int o = 1; o < n; o++)
            if (load[o] < load[best]) best = o;
        owner[ord[k]] = best;
        load[best] += p->points[ord[k]].cost;
    }
    free(ord);
    free(load);
}


ttt_status ttt_plan_run(const ttt_plan *p, const char *out_dir, int progress, FILE *table,
                        ttt_error *err) {
    return ttt_plan_run_exec(p, out_dir, progress, table, NULL, err);
}

ttt_status ttt_plan_devices_ready(const ttt_plan *p, ttt_error *err) {
    for (int i = 0; i < p->n_points; i++) {
        const ttt_plan_point *pt = &p->points[i];
        const ttt_trained_cfg *tc = pt->task->trained ? pt->task->trained(pt->cfg) : NULL;
        const ttt_status ds = tc ? ttt_train_device_ready(&tc->train, &tc->model, err) : TTT_OK;
        if (ds != TTT_OK) {
            if (pt->label[0]) ttt_plan_error_suffix_point(err, pt->label);
            return ds;
        }
    }
    return TTT_OK;
}

ttt_status ttt_plan_run_exec(const ttt_plan *p, const char *out_dir, int progress, FILE *table,
                             const ttt_plan_exec *x, ttt_error *err) {
    /* A point that asks for a device the trainer cannot use yet is refused before the folder
     * is touched (train.h ttt_train_device_ready), never trained on the host instead. */
    TTT_TRY(ttt_plan_devices_ready(p, err));
    const ttt_comm *comm = x && x->comm ? x->comm : &ttt_comm_self;
    const int R = comm->size, leader = comm->rank == 0;
    const int sharded = x && x->n_shards > 0;
    /* --parallel, when given, else the first point's train.data_parallel */
    const ttt_plan_parallel par = x && x->parallel != TTT_PARALLEL_AUTO
                                      ? x->parallel
                                      : (ttt_plan_parallel)p->points[0].parallel;
    /* data: every rank trains every point together; split: each point has one owner (a rank or
     * a shard) and its records travel through its part file */
    const int data = R > 1 && !sharded &&
                     (par == TTT_PARALLEL_DATA || (par == TTT_PARALLEL_AUTO && p->n_points < R));
    const int split = sharded || (R > 1 && !data);
    /* the one process that writes the run folder's shared files (and holds its lock): rank 0,
     * or a --shard job (its own points' parts; ttt_plan_merge writes the rest) */
    const int writer = leader || sharded;
    const char *dir = ttt_plan_output(p, out_dir);
    char path[4096];

    int *owner = ttt_fault_calloc((size_t)p->n_points, sizeof *owner);
    if (!owner) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    const int me = sharded ? x->shard : comm->rank;
    if (split) ttt_plan_assign(p, sharded ? x->n_shards : R, owner);

    /* The writer locks the folder, removes what killed runs left and decides whether the run is
     * already complete; the other ranks learn both from it before anyone writes. */
    ttt_plan_run_locks L = {-1, -1, 0};
    int complete = 0;
    ttt_status s = TTT_OK;
    char *created = NULL; /* the topmost folder this run creates (NULL: the folder was there) */
    int found_empty = 0, lock_was_there = 0; /* the folder was there, empty (and its lock) */
    if (writer) {
        /* what the folder holds decides before anything is written: a folder of other files or
         * a run of another configuration is refused and left as it is */
        s = ttt_plan_check_own_folder(p, dir, "run", err);
        if (s == TTT_OK && ttt_folder_kind_of(dir) == TTT_FOLDER_EMPTY) {
            char lock[4096 + 32];
            struct stat lst;
            snprintf(lock, sizeof lock, "%s/" TTT_PLAN_LOCK_FILE, dir);
            found_empty = 1;
            lock_was_there = lstat(lock, &lst) == 0;
        }
        if (s == TTT_OK) s = ttt_plan_topmost_missing(dir, &created, err);
        if (s == TTT_OK) s = ttt_mkdirs(dir, err);
        if (s != TTT_OK && created) ttt_plan_remove_created(dir, created, 0);
        if (s == TTT_OK)
            s = ttt_plan_lock_run_folder(dir, sharded ? x->shard : -1, sharded ? x->n_shards : 0,
                                         &L, err);
        if (s == TTT_OK) {
            ttt_plan_remove_stale_tmp(p, dir, sharded ? owner : NULL, me);
            /* again under the lock: a run that ended meanwhile may have written it */
            s = ttt_plan_check_own_folder(p, dir, "run", err);
        }
        if (s == TTT_OK) complete = ttt_plan_run_is_complete(p, dir);
    }
    if (R > 1 && !ttt_comm_all(comm, s == TTT_OK) && s == TTT_OK)
        s = ttt_error_set(err, TTT_ERR_IO, "rank 0 could not take the run folder %s (its "
                          "message is on its stderr)", dir);
    if (s == TTT_OK && R > 1) complete = !ttt_comm_all(comm, !complete);
    if (s != TTT_OK || complete) {
        if (complete && leader) ttt_plan_say_complete(dir);
        ttt_plan_unlock_run_folder(&L);
        free(owner);
        free(created);
        return s;
    }
    if (leader && !sharded)
        ttt_plan_remove_mark(dir); /* this run replaces whatever the folder held */

    const ttt_plan_point *first = &p->points[0];
    ttt_results *res = ttt_results_new(first->name);
    if (!res) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
    if (s == TTT_OK && writer) s = ttt_plan_write_resolved(p, dir, err);
    /* how the run was made, rewritten with its end below (docs/training.md "Provenance") */
    const time_t started = time(NULL);
    const int provenance = leader && !sharded;
    if (s == TTT_OK && provenance) s = ttt_provenance_write(dir, started, 0, NULL, err);
    /* Records go to metrics.jsonl as they are made (a temporary name until the run completes;
     * trained points also journal theirs next to their checkpoints, which only the point's owner
     * writes), so memory stays flat however long the run (docs/hardening.md "Flat memory over
     * long runs"). Points that run apart keep theirs in their part files: metrics.jsonl has one
     * writer, rank 0, which merges the parts. */
    if (s == TTT_OK && leader && !split) s = ttt_results_stream(res, dir, err);
    if (s == TTT_OK && split) {
        snprintf(path, sizeof path, "%s/parts", dir);
        s = ttt_mkdirs(path, err);
    }
    if (R > 1 && !ttt_comm_all(comm, s == TTT_OK) && s == TTT_OK)
        s = ttt_error_set(err, TTT_ERR_IO, "rank 0 could not prepare the run folder %s", dir);
    if (s != TTT_OK) {
        ttt_results_free(res);
        if (created && R == 1 && !sharded) ttt_plan_remove_created(dir, created, 1);
        else if (found_empty && R == 1 && !sharded) ttt_plan_remove_contents(dir, lock_was_there);
        ttt_plan_unlock_run_folder(&L);
        free(owner);
        free(created);
        return s;
    }

    long total = 0;
    for (int i = 0; i < p->n_points; i++)
        if (!split || owner[i] == me) total += (long)p->points[i].cost;
    /* ranks that run points apart tell each other of a stop (data-parallel ranks agree on it in
     * every step's gather and before each point) */
    if (split && R > 1) ttt_train_stop_peers(comm);
    ttt_progress pr;
    ttt_progress_init(&pr, first->name, total, NULL, progress && leader);
    long done = 0;
    int finished = 0;
    for (int i = 0; i < p->n_points && s == TTT_OK; i++) {
        const ttt_plan_point *pt = &p->points[i];
        if (split && owner[i] != me) continue;
        const ttt_task *t = pt->task;
        /* a stop before the point: ranks that run it together agree on it first */
        int stop = ttt_train_stop_requested();
        if (data) stop = !ttt_comm_all(comm, !stop);
        if (stop) {
            s = ttt_error_set(err, TTT_ERR_INTERRUPTED, "interrupted");
            break;
        }
        ttt_results *into = split ? ttt_results_new(first->name) : res;
        const int from = into ? ttt_results_count(into) : 0;
        if (into) ttt_plan_stamp_point(p, i, into);
        char part[4096];
        ttt_plan_part_path(part, sizeof part, dir, i, "rec");
        int found = 0;
        if (!into) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the plan");
        /* a part under the same configuration: the point ended in an earlier run */
        else if (!data) s = ttt_part_load(into, part, pt->config_hash, &found, err);
        if (s == TTT_OK && !found) {
            /* the label names the point's lines in charts: its seeds share one */
            ttt_task_run run = {.cfg = pt->cfg, .label = pt->series, .point = i, .seed = pt->seed,
                                .config_hash = pt->config_hash, .results = into,
                                .progress = &pr, .work_done = done, .run_dir = dir,
                                .comm = data ? comm : NULL};
            s = t->run(&run, err);
            if (s != TTT_OK && s != TTT_ERR_INTERRUPTED && pt->label[0])
                ttt_plan_error_suffix_point(err, pt->label);
            if (s == TTT_OK && split) s = ttt_part_save(into, from, part, pt->config_hash, err);
        }
        if (s == TTT_OK) finished++;
        if (split) ttt_results_free(into);
        done += (long)pt->cost;
        ttt_progress_update(&pr, done, pt->label);
    }
    ttt_progress_finish(&pr);
    free(owner);
    /* The ranks agree on how the run ended: a stop on any rank is a stop for all */
    if (R > 1) {
        const int all_ok = ttt_comm_all(comm, s == TTT_OK);
        const int any_stop = !ttt_comm_all(comm, s != TTT_ERR_INTERRUPTED);
        if (split) ttt_train_stop_peers(NULL);
        if (s == TTT_OK && !all_ok) {
            if (any_stop)
                s = ttt_error_set(err, TTT_ERR_INTERRUPTED, "interrupted (on another rank)");
            else
                s = ttt_error_set(err, TTT_ERR_IO,
                                  "another rank failed (its message is on its stderr); the points "
                                  "that ended are kept in %s/parts: run the same command again to "
                                  "run the rest", dir);
        }
    }
    if (s == TTT_ERR_INTERRUPTED) {
        /* Interrupted: what the finished points measured is kept all the same (and a trained
         * point's checkpoint was saved), so a stopped sweep keeps its work (docs/hardening.md
         * "Signals"): written into the run folder, or, when the points ran apart, in their
         * parts, which the next run (or `ttt merge`) picks up. */
        ttt_error stop_msg = *err;
        ttt_status w = TTT_OK;
        if (leader && !split) w = ttt_plan_finish(p, res, dir, NULL, err);
        if (w != TTT_OK) {
            s = w;
        } else if (split) {
            ttt_error_set(err, TTT_ERR_INTERRUPTED,
                          "%s; the points that ended are kept in %s/parts: run the same command "
                          "again to run the rest", stop_msg.msg, dir);
        } else if (strcmp(stop_msg.msg, "interrupted") == 0) {
            ttt_error_set(err, TTT_ERR_INTERRUPTED,
                          "interrupted in point %d of %d (%d finished); what was measured so far "
                          "is in %s; run the same command again to run it whole",
                          finished + 1, p->n_points, finished, dir);
        } else {
            ttt_error_set(err, TTT_ERR_INTERRUPTED, "%s; the results so far are in %s",
                          stop_msg.msg, dir);
        }
    } else if (s == TTT_OK && leader && !sharded) {
        if (split) {
            ttt_results_free(res);
            res = NULL;
            s = ttt_plan_merge_locked(p, dir, table, err);
        } else {
            s = ttt_plan_finish(p, res, dir, table, err);
        }
    }
    ttt_results_free(res);
    if (provenance) {
        char outcome[sizeof err->msg + 16];
        if (s == TTT_OK) snprintf(outcome, sizeof outcome, "complete");
        else if (s == TTT_ERR_INTERRUPTED) snprintf(outcome, sizeof outcome, "interrupted");
        else snprintf(outcome, sizeof outcome, "failed: %s", err->msg);
        ttt_error perr;
        const ttt_status w = ttt_provenance_write(dir, started, time(NULL), outcome, &perr);
        if (w != TTT_OK && s == TTT_OK) {
            *err = perr;
            s = w;
        }
    }
    /* the mark last, after everything it vouches for (provenance.json's outcome included) */
    if (s == TTT_OK && leader && !sharded) {
        s = ttt_plan_mark_complete(p, dir, err);
        if (s != TTT_OK && provenance) { /* best effort: the outcome it already says is wrong */
            char outcome[sizeof err->msg + 16];
            snprintf(outcome, sizeof outcome, "failed: %s", err->msg);
            ttt_error perr;
            (void)ttt_provenance_write(dir, started, time(NULL), outcome, &perr);
        }
    }
    /* A run that fails before its first point leaves what it found: a folder it created, with
     * no point finished and no checkpoint kept, goes again, and one it found empty is emptied (docs/hardening.md "Run folders:
     * names, one writer, re-runs"). Only a process that ran alone wrote into it. */
    if (s != TTT_OK && s != TTT_ERR_INTERRUPTED && (created || found_empty) && finished == 0 &&
        R == 1 && !sharded && !ttt_plan_holds_checkpoint(p, dir)) {
        if (created) ttt_plan_remove_created(dir, created, 1);
        else ttt_plan_remove_contents(dir, lock_was_there);
    }
    ttt_plan_unlock_run_folder(&L);
    free(created);
    return s;
}
