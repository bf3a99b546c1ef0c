/* One writer per run folder: its locks, its completeness mark and its parts (plan.h). */
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

/* ------------------------------------------------------------------------------------------ */
/* One writer per run folder (docs/hardening.md "Run folders: names, one writer, re-runs";
 * docs/scaling.md "Run folders shared by ranks and jobs"). Under MPI only rank 0 locks. A run
 * or `ttt merge` holds .ttt-lock exclusively; a --shard job holds it shared (its sibling jobs
 * write the same folder, each into the parts of its own points) and .ttt-lock.shard<i>
 * exclusively, so a second job of the same shard is refused, and so is a run or a merge while
 * shard jobs run. */

#define COMPLETE_FILE ".ttt-complete"

/* Printable text only: the holder's line is shown to another user's terminal. */
static void printable(char *s) {
    for (unsigned char *p = (unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f) *p = ' ';
}

/* "pid P on host H since YYYY-MM-DD HH:MM:SS UTC: the command line" */
static void holder_line(char *out, size_t len) {
    char host[256] = "?";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    char when[64] = "?";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    char cmd[1024] = "";
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, cmd, sizeof cmd - 1);
        close(fd);
        if (n < 0) n = 0;
        cmd[n] = '\0';
        for (ssize_t i = 0; i + 1 < n; i++)
            if (!cmd[i]) cmd[i] = ' ';
    }
    snprintf(out, len, "pid %ld on host %s since %s: %s", (long)getpid(), host, when,
             cmd[0] ? cmd : "(command unknown)");
    printable(out);
}

/* Take the advisory lock dir/<name> (flock, held until *fd is closed, released by the kernel
 * when the process dies however it dies). op: LOCK_EX (the holder records itself in the file)
 * or LOCK_SH. A writer that cannot have it is refused, naming the holder as it recorded itself
 * in the file; `what` names what is locked in that message. */
static ttt_status lock_file(const char *dir, const char *name, int op, const char *what, int *fd,
                            ttt_error *err) {
    *fd = -1;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return ttt_error_set(err, TTT_ERR_IO, "run folder path '%s' is too long", dir);
    /* Never through a link: a symbolic link (or a second hard link) in its place would have the
     * holder's line written into a file outside the run folder. Created exclusively when
     * absent; an existing one is opened without following a link and must be a plain file of
     * one link (docs/hardening.md "Run folders: names, one writer, re-runs"). */
    int f = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (f < 0 && errno == EEXIST) f = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (f < 0 && errno == ELOOP)
        return ttt_error_set(err, TTT_ERR_IO,
                             "cannot lock the run folder '%s': %s is a symbolic link; expected "
                             "the run folder's own lock file (remove the link)", dir, path);
    if (f < 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot lock the run folder '%s': %s: %s", dir,
                             path, strerror(errno));
    struct stat lst = {0};
    if (fstat(f, &lst) != 0 || !S_ISREG(lst.st_mode) || lst.st_nlink != 1) {
        const int linked = S_ISREG(lst.st_mode);
        close(f);
        return ttt_error_set(err, TTT_ERR_IO,
                             "cannot lock the run folder '%s': %s is %s; expected the run "
                             "folder's own lock file (remove it)", dir, path,
                             linked ? "a file with another name too (a hard link)"
                                    : "not a regular file");
    }
    if (flock(f, op | LOCK_NB) != 0) {
        int e = errno;
        char who[1024] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(f, who, sizeof who - 1, 0) : -1;
        if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL) {
            /* a file system without locks (some network mounts): run, but say so */
            fprintf(stderr, "ttt: warning: cannot lock the run folder '%s' (%s); make sure no "
                            "other run writes into it\n", dir, strerror(e));
            *fd = f;
            return TTT_OK;
        }
        close(f);
        if (e != EWOULDBLOCK)
            return ttt_error_set(err, TTT_ERR_IO, "cannot lock the run folder '%s': %s", dir,
                                 strerror(e));
        who[n > 0 ? n : 0] = '\0';
        char *nl = strchr(who, '\n');
        if (nl) *nl = '\0';
        printable(who);
        return ttt_error_set(err, TTT_ERR_IO,
                             "%s is in use by another ttt run (%s); wait for it to end, or write "
                             "into another folder with --out",
                             what, who[0] ? who : "it has not recorded itself yet, or --shard "
                                                  "jobs are writing into it");
    }
    if (op == LOCK_EX) {
        char line[1400];
        holder_line(line, sizeof line);
        size_t len = strlen(line);
        line[len++] = '\n';
        /* informational: a failure to record the holder does not stop the run (the lock holds) */
        int recorded = ftruncate(f, 0) == 0 && pwrite(f, line, len, 0) == (ssize_t)len;
        (void)recorded;
    }
    *fd = f;
    return TTT_OK;
}


/* shard < 0: the whole folder (a run or a merge); else the lock of --shard shard/n_shards. */
ttt_status ttt_plan_lock_run_folder(const char *dir, int shard, int n_shards, ttt_plan_run_locks *L,
                                  ttt_error *err) {
    L->main = L->shard = -1;
    L->main_op = shard < 0 ? LOCK_EX : LOCK_SH;
    char what[4400];
    snprintf(what, sizeof what, "the run folder '%s'", dir);
    TTT_TRY(lock_file(dir, TTT_PLAN_LOCK_FILE, L->main_op, what, &L->main, err));
    if (shard < 0) return TTT_OK;
    char name[64];
    snprintf(name, sizeof name, TTT_PLAN_LOCK_FILE ".shard%d", shard);
    snprintf(what, sizeof what, "shard %d/%d of the run folder '%s'", shard, n_shards, dir);
    ttt_status s = lock_file(dir, name, LOCK_EX, what, &L->shard, err);
    if (s != TTT_OK) {
        close(L->main);
        L->main = -1;
    }
    return s;
}

void ttt_plan_unlock_run_folder(ttt_plan_run_locks *L) {
    if (L->shard >= 0) close(L->shard);
    if (L->main >= 0) close(L->main);
    L->main = L->shard = -1;
}

/* Temporary files a killed run left in the folders the lock holder owns (no live writer owns
 * them): the whole folder's for the main lock's exclusive holder; a shard job's own points'
 * checkpoint folders only (its siblings write into the run folder and parts/ at the same time).
 * owner: (n_points) or NULL = every point. */
void ttt_plan_remove_stale_tmp(const ttt_plan *p, const char *dir, const int *owner, int me) {
    char path[4096];
    if (!owner) {
        ttt_remove_stale_tmp(dir);
        snprintf(path, sizeof path, "%s/parts", dir);
        ttt_remove_stale_tmp(path);
    }
    for (int i = 0; i < p->n_points; i++) {
        if (owner && owner[i] != me) continue;
        snprintf(path, sizeof path, "%s/checkpoints/point%d", dir, i);
        ttt_remove_stale_tmp(path);
    }
}

/* What the completion mark of this plan says: the hash of config.resolved.yaml. */
static void complete_text(const ttt_plan *p, char out[32]) {
    char h[17];
    ttt_checkpoint_config_hash(p->resolved_yaml, h);
    snprintf(out, 32, "%s\n", h);
}

/* The folder holds a completed run of exactly this plan: its mark matches and its results are
 * there. Running it again would only spend the time to write the same numbers. */
int ttt_plan_run_is_complete(const ttt_plan *p, const char *dir) {
    char path[4096 + 32], want[32], got[32] = "";
    snprintf(path, sizeof path, "%s/" COMPLETE_FILE, dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    got[n] = '\0';
    complete_text(p, want);
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    struct stat st;
    return strcmp(got, want) == 0 && stat(path, &st) == 0;
}

void ttt_plan_say_complete(const char *dir) {
    fprintf(stderr, "ttt: %s holds this experiment's completed run; nothing was run and nothing "
                    "changed (to run it again, delete the folder or use --out)\n", dir);
}

void ttt_plan_part_path(char *out, size_t len, const char *dir, int i, const char *ext) {
    snprintf(out, len, "%s/parts/point%d.%s", dir, i, ext);
}

/* The parts are spent once the run folder holds their records. */
static void remove_parts(const ttt_plan *p, const char *dir) {
    char path[4096];
    for (int i = 0; i < p->n_points; i++) {
        ttt_plan_part_path(path, sizeof path, dir, i, "rec");
        unlink(path);
        ttt_plan_part_path(path, sizeof path, dir, i, "jsonl"); /* a stream earlier versions kept */
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/parts", dir);
    rmdir(path); /* left in place when it holds anything else */
}

/* The --shard jobs' lock files, once their parts are merged. Only under the exclusive main lock:
 * no shard job holds (or can take) its own lock while that is held. */
static void remove_shard_locks(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    const size_t pl = strlen(TTT_PLAN_LOCK_FILE ".shard");
    struct dirent *de;
    char path[4096 + 256];
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, TTT_PLAN_LOCK_FILE ".shard", pl) != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
}

/* Charts, metrics.jsonl, summary.csv, the charts, index.html, and the table (table NULL: none). */
ttt_status ttt_plan_finish(const ttt_plan *p, ttt_results *res, const char *dir, FILE *table,
                         ttt_error *err) {
    const ttt_plan_point *first = &p->points[0];
    const ttt_task *t = first->task;
    ttt_results_set_point(res, NULL, -1, 0);
    ttt_results_set_axes(res, (const char *const *)p->cols, p->n_cols);
    ttt_results_set_log_y(res, p->log_y, p->log_y_only);
    ttt_results_set_best(res, p->best_over, p->best_metric, p->best_max);
    if (t->charts) t->charts(res, first->cfg);
    TTT_TRY(ttt_results_write(res, dir, err));
    const char *const *cols = t->columns_for ? t->columns_for(first->cfg) : t->columns;
    if (cols && table) ttt_results_print_table(res, table, cols);
    return TTT_OK;
}

/* A whole run's end, once everything the mark vouches for is written (the results, and
 * provenance.json with its outcome): the completion mark, then the parts are spent (in that
 * order: a run that fails at its last write still has what it needs to end, and a folder is
 * never marked complete over a file that did not reach the disk). */
ttt_status ttt_plan_mark_complete(const ttt_plan *p, const char *dir, ttt_error *err) {
    char mark[4096 + 32], text[32];
    snprintf(mark, sizeof mark, "%s/" COMPLETE_FILE, dir);
    complete_text(p, text);
    const ttt_status s = ttt_write_file_atomic(mark, text, err);
    if (s != TTT_OK) {
        /* renamed into place but not made durable (its folder's fsync failed): a run that
         * reports a failure leaves no mark */
        unlink(mark);
        return s;
    }
    remove_parts(p, dir);
    remove_shard_locks(dir);
    return TTT_OK;
}

/* From now on the records added to res belong to point i: its columns first. */
void ttt_plan_stamp_point(const ttt_plan *p, int i, ttt_results *res) {
    ttt_record *r = malloc(sizeof *r);
    if (!r) {
        ttt_results_set_point(res, NULL, -1, 0);
        return;
    }
    ttt_plan_point_fields(p, i, r);
    ttt_results_set_point(res, p->n_cols ? r : NULL, p->points[i].group, p->points[i].member);
    free(r);
}

void ttt_plan_remove_mark(const char *dir) {
    char mark[4096 + 32];
    snprintf(mark, sizeof mark, "%s/" COMPLETE_FILE, dir);
    unlink(mark);
}
