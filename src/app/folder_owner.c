/* Whose run folder it is, and removing what a failed run created (plan.h). */
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

/* ---- whose folder it is (docs/hardening.md "What a command may overwrite") ---- */

/* The whole text of a file (malloc'd), or NULL with errno set. */
static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = (len + 4096 + 1) * 2;
            char *b = ttt_fault_realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            buf = b;
        }
        const size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

/* `cmd` (run or merge) may write the folder `dir` for plan p: it is absent or empty, or a run
 * folder of this experiment: the same points, each with the same configuration hash (so a
 * changed train.stop_at or train.threads continues it; anything that changes a result does
 * not). Anything else is refused before a byte is written. */
ttt_status ttt_plan_check_own_folder(const ttt_plan *p, const char *dir, const char *cmd,
                                   ttt_error *err) {
    TTT_TRY(ttt_output_folder_check(cmd, dir, TTT_FOLDER_RUN, err));
    if (ttt_folder_kind_of(dir) != TTT_FOLDER_RUN) return TTT_OK;
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/config.resolved.yaml", dir);
    char *text = read_all(path);
    if (!text && errno == ENOMEM)
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory reading '%s'", path);
    if (!text)
        return ttt_error_set(err, TTT_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    const int same = strcmp(text, p->resolved_yaml) == 0;
    free(text);
    if (same) return TTT_OK;
    /* another text: plan it again (as `ttt compare` does) and compare the points */
    ttt_cfg_node *doc = NULL;
    ttt_plan *q = NULL;
    ttt_error inner = {0};
    ttt_status s = ttt_cfg_load_file(path, &doc, &inner);
    if (s == TTT_OK) s = ttt_plan_build(doc, "experiment", &q, &inner);
    ttt_cfg_free(doc);
    char why[600] = "";
    if (s == TTT_ERR_NOMEM) {
        *err = inner;
        return s;
    }
    if (s != TTT_OK) {
        snprintf(why, sizeof why, "its config.resolved.yaml does not plan: %.400s", inner.msg);
    } else if (q->n_points != p->n_points) {
        snprintf(why, sizeof why, "%d point%s there, %d here", q->n_points,
                 q->n_points == 1 ? "" : "s", p->n_points);
    } else {
        for (int i = 0; i < p->n_points && !why[0]; i++)
            if (strcmp(q->points[i].config_hash, p->points[i].config_hash) != 0)
                snprintf(why, sizeof why, "point %d%s%.200s: configuration hash %s there, %s here",
                         i, p->points[i].label[0] ? " " : "", p->points[i].label,
                         q->points[i].config_hash, p->points[i].config_hash);
    }
    ttt_plan_free(q);
    if (!why[0]) return TTT_OK;
    return ttt_error_set(err, TTT_ERR_CONFIG,
                         "%s: the run folder '%s' holds a run of another configuration (%s); "
                         "nothing was changed: write this run into another folder with --out, "
                         "or delete '%s' to replace it", cmd, dir, why, dir);
}

/* The topmost folder of `dir` that does not exist yet (malloc'd into *out), or NULL when dir
 * exists: what the run creates, and removes again if it fails before its first point. */
ttt_status ttt_plan_topmost_missing(const char *dir, char **out, ttt_error *err) {
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) == 0) return TTT_OK;
    char *b = ttt_fault_strdup(dir);
    if (!b) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the run folder's name");
    size_t len = strlen(b);
    while (len > 1 && b[len - 1] == '/') b[--len] = '\0';
    /* shorten while the parent is missing too */
    for (;;) {
        char *slash = strrchr(b, '/');
        if (!slash || slash == b) break;
        *slash = '\0';
        const int missing = stat(b, &st) != 0;
        if (!missing) {
            *slash = '/';
            break;
        }
        while (slash > b && slash[-1] == '/') *--slash = '\0'; /* "a//b" */
    }
    *out = b;
    return TTT_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag, (void)f;
    return remove(path);
}

/* Remove what the run created: the run folder with what it wrote there (only with its lock
 * held: then nothing in it is another's), and each empty folder above it up to `created`. */
void ttt_plan_remove_created(const char *dir, const char *created, int locked) {
    if (locked) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    char *b = strdup(dir);
    if (!b) return;
    size_t len = strlen(b);
    while (len > 1 && b[len - 1] == '/') b[--len] = '\0';
    const size_t top = strlen(created);
    for (;;) {
        if (rmdir(b) != 0 && errno != ENOENT) break;
        if (strlen(b) <= top) break;
        char *slash = strrchr(b, '/');
        if (!slash) break;
        while (slash > b && slash[-1] == '/') slash--;
        *slash = '\0';
    }
    free(b);
}

/* Empty an existing folder the run found empty (but for ttt's lock, kept when it was there):
 * what a run that failed before its first point wrote there goes again. Only under the lock. */
static _Thread_local int
    keep_lock; /* nftw has no user argument: ttt_plan_remove_contents sets it */
static int remove_inner(const char *path, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag;
    if (f->level == 0) return 0;
    if (f->level == 1 && keep_lock && strcmp(path + f->base, TTT_PLAN_LOCK_FILE) == 0) return 0;
    remove(path);
    return 0;
}

void ttt_plan_remove_contents(const char *dir, int lock_was_there) {
    keep_lock = lock_was_there;
    nftw(dir, remove_inner, 16, FTW_DEPTH | FTW_PHYS);
}

/* A point of the folder kept a checkpoint: the work of a failed run that the next one resumes. */
int ttt_plan_holds_checkpoint(const ttt_plan *p, const char *dir) {
    char path[4096 + 64];
    struct stat st;
    for (int i = 0; i < p->n_points; i++) {
        snprintf(path, sizeof path, "%s/checkpoints/point%d/" TTT_CHECKPOINT_LAST, dir, i);
        if (stat(path, &st) == 0) return 1;
        snprintf(path, sizeof path, "%s/checkpoints/point%d/" TTT_CHECKPOINT_PREV, dir, i);
        if (stat(path, &st) == 0) return 1;
    }
    return 0;
}
