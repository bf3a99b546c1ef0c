/* The plan pass (plan.h, docs/design.md "Data flow"). */
#include "plan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "experiment.h"
#include "progress.h"
#include "results.h"
#include "train.h"

/* Keys allowed at the top level besides the options: the sweep (expanded away before a point
 * is checked) and the informational `resolved` list a previous run wrote. */
static const char *const top_extra[] = {"sweep", "resolved", NULL};

/* Name the sweep point after the message, so the message still starts with file:line:col. */
static void error_suffix_point(ttt_error *err, const char *label) {
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, " (in sweep point %s)", label);
}

/* The configuration hash of a resolved point: everything but the keys that name or place the
 * run (name, description, output) and those that do not change its results (train.stop_at,
 * train.threads). Checkpoints store it; changing the definition orphans every checkpoint. */
static void config_hash(const ttt_cfg_node *root, char hash[17]) {
    ttt_cfg_node *h = ttt_cfg_clone(root);
    ttt_cfg_map_remove(h, "name");
    ttt_cfg_map_remove(h, "description");
    ttt_cfg_map_remove(h, "output");
    ttt_cfg_node *tr = (ttt_cfg_node *)ttt_cfg_get(h, "train");
    if (tr) {
        ttt_cfg_map_remove(tr, "stop_at");
        ttt_cfg_map_remove(tr, "threads");
    }
    char *flow = ttt_cfg_to_flow(h);
    ttt_cfg_free(h);
    ttt_checkpoint_config_hash(flow ? flow : "", hash);
    free(flow);
}

/* The first control character of s (C0, DEL or a C1 code point written in UTF-8), or NULL.
 * Such characters in a folder name or a message would act on the terminal that prints them. */
static const unsigned char *control_char(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) return p;
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) return p;
    }
    return NULL;
}

/* `name` becomes the folder runs/<name> and the title of messages and the page: one plain
 * folder name, so a run can neither write outside runs/ nor into runs/ itself
 * (docs/hardening.md "Run folders: names, one writer, re-runs"). */
static ttt_status check_name(const ttt_cfg_node *root, ttt_error *err) {
    const ttt_cfg_node *n = ttt_cfg_get(root, "name");
    const char *s = n && n->scalar ? n->scalar : "";
    const unsigned char *c = control_char(s);
    if (c)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "name: control character 0x%02x at byte %d; a name becomes a folder "
                             "name and is printed, so it must be printable text",
                             *c, (int)(c - (const unsigned char *)s));
    if (!s[0])
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "name: empty; expected a folder name (the run goes to runs/<name>)");
    if (strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, n,
                             "name: '%s' is not a plain folder name (no '/', not '.' or '..'): "
                             "the run goes to runs/<name>; use `output:` or --out to place it "
                             "elsewhere", s);
    const ttt_cfg_node *o = ttt_cfg_get(root, "output");
    if (o && o->scalar && (c = control_char(o->scalar)))
        return ttt_cfg_error(err, TTT_ERR_CONFIG, o,
                             "output: control character 0x%02x at byte %d; expected a printable "
                             "folder path", *c, (int)(c - (const unsigned char *)o->scalar));
    return TTT_OK;
}

/* Validate one point's tree against the registries (filling every default into it), then let
 * its task read it into pt->cfg. */
static ttt_status plan_point(ttt_plan_point *pt, ttt_cfg_node *root, const char *stem,
                             ttt_error *err) {
    ttt_cfg_map_remove(root, "resolved");
    if (!ttt_cfg_get(root, "name")) ttt_cfg_map_set(root, "name", ttt_cfg_new_scalar(stem, root));
    TTT_TRY(ttt_cfg_check_map(root, "", ttt_experiment_options, top_extra, err));
    TTT_TRY(check_name(root, err));
    const ttt_cfg_node *out = ttt_cfg_get(root, "output");
    if (!out->scalar || !out->scalar[0]) {
        char buf[512];
        snprintf(buf, sizeof buf, "runs/%s", ttt_cfg_str(root, "name"));
        ttt_cfg_map_set(root, "output", ttt_cfg_new_scalar(buf, root));
    }
    ttt_cfg_node *task = (ttt_cfg_node *)ttt_cfg_get(root, "task");
    const ttt_cfg_node *kind = ttt_cfg_get(task, "kind");
    if (!kind)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, task,
                             "task: missing 'kind' (one of the tasks in `ttt list`, e.g. memory)");
    if (kind->kind != TTT_CFG_SCALAR || !kind->scalar)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, kind, "task.kind: expected a task name");
    TTT_TRY(ttt_cfg_check_name(kind, "task", ttt_task_names(), ttt_task_count(), err));
    const ttt_task *t = ttt_task_find(kind->scalar);
    static const char *const task_extra[] = {"kind", NULL};
    TTT_TRY(ttt_cfg_check_map(task, "task", t->options, task_extra, err));
    pt->task = t;
    if (!(pt->cfg = calloc(1, t->cfg_size ? t->cfg_size : 1)))
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    if (t->parse) TTT_TRY(t->parse(pt->cfg, root, err));
    pt->seed = (uint64_t)ttt_cfg_int(root, "seed");
    pt->name = strdup(ttt_cfg_str(root, "name"));
    pt->output = strdup(ttt_cfg_str(root, "output"));
    if (!pt->name || !pt->output) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    config_hash(root, pt->config_hash);
    return TTT_OK;
}

/* config.resolved.yaml: without a sweep, the one point with every default; with a sweep, the
 * experiment as given plus `resolved:`, one fully resolved configuration per point. */
static char *resolved_text(const ttt_cfg_node *doc, ttt_cfg_node *const *trees,
                           char *const *labels, int n) {
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f) return NULL;
    if (!ttt_cfg_get(doc, "sweep")) {
        ttt_cfg_write_yaml(trees[0], f);
    } else {
        ttt_cfg_node *d = ttt_cfg_clone(doc);
        ttt_cfg_node *list = ttt_cfg_new_seq(d);
        for (int i = 0; i < n; i++) {
            ttt_cfg_node *item = ttt_cfg_new_map(d);
            ttt_cfg_map_set(item, "point", ttt_cfg_new_scalar(labels[i], d));
            ttt_cfg_map_set(item, "config", ttt_cfg_clone(trees[i]));
            ttt_cfg_seq_push(list, item);
        }
        ttt_cfg_map_set(d, "resolved", list);
        fprintf(f, "# The experiment as run. `resolved` lists every sweep point with all its "
                   "values;\n# it is informational and ignored when this file is run again.\n");
        ttt_cfg_write_yaml(d, f);
        ttt_cfg_free(d);
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

ttt_status ttt_plan_build(ttt_cfg_node *doc, const char *stem, ttt_plan **out, ttt_error *err) {
    *out = NULL;
    ttt_cfg_map_remove(doc, "resolved");
    ttt_cfg_node **trees = NULL;
    char **labels = NULL;
    int n = 0;
    TTT_TRY(ttt_cfg_sweep_expand(doc, &trees, &labels, &n, err));
    ttt_plan *p = calloc(1, sizeof *p);
    ttt_status s = TTT_OK;
    if (!p || !(p->points = calloc((size_t)(n > 0 ? n : 1), sizeof *p->points))) {
        s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    } else {
        p->n_points = n;
        for (int i = 0; i < n; i++) p->points[i].index = i;
    }
    for (int i = 0; s == TTT_OK && i < n; i++) {
        ttt_plan_point *pt = &p->points[i];
        if (!(pt->label = strdup(labels[i]))) {
            s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
            break;
        }
        s = plan_point(pt, trees[i], stem, err);
        if (s != TTT_OK && labels[i][0]) error_suffix_point(err, labels[i]);
    }
    if (s == TTT_OK && !(p->resolved_yaml = resolved_text(doc, trees, labels, n)))
        s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    /* Below this line nothing sees a tree: the points' trees go now. */
    ttt_cfg_points_free(trees, labels, n);
    if (s != TTT_OK) {
        ttt_plan_free(p);
        return s;
    }
    *out = p;
    return TTT_OK;
}

void ttt_plan_free(ttt_plan *p) {
    if (!p) return;
    for (int i = 0; p->points && i < p->n_points; i++) {
        ttt_plan_point *pt = &p->points[i];
        if (pt->cfg && pt->task && pt->task->cfg_free) pt->task->cfg_free(pt->cfg);
        free(pt->cfg);
        free(pt->label);
        free(pt->name);
        free(pt->output);
    }
    free(p->points);
    free(p->resolved_yaml);
    free(p);
}

const char *ttt_plan_output(const ttt_plan *p, const char *out_dir) {
    return out_dir ? out_dir : p->points[0].output;
}

/* ------------------------------------------------------------------------------------------ */
/* One writer per run folder (docs/hardening.md "Run folders: names, one writer, re-runs") */

#define LOCK_FILE ".ttt-lock"

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

/* Take the folder's advisory lock (flock on dir/.ttt-lock, held until *fd is closed, released
 * by the kernel when the process dies however it dies). A second writer is refused, naming the
 * holder as it recorded itself in the lock file. */
static ttt_status lock_run_folder(const char *dir, int *fd, ttt_error *err) {
    *fd = -1;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/" LOCK_FILE, dir) >= (int)sizeof path)
        return ttt_error_set(err, TTT_ERR_IO, "run folder path '%s' is too long", dir);
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (f < 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot lock the run folder '%s': %s: %s", dir,
                             path, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
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
                             "the run folder '%s' is in use by another ttt run (%s); wait for it "
                             "to end, or write into another folder with --out",
                             dir, who[0] ? who : "it has not recorded itself yet");
    }
    char line[1400];
    holder_line(line, sizeof line);
    size_t len = strlen(line);
    line[len++] = '\n';
    /* informational: a failure to record the holder does not stop the run (the lock holds) */
    int recorded = ftruncate(f, 0) == 0 && pwrite(f, line, len, 0) == (ssize_t)len;
    (void)recorded;
    *fd = f;
    return TTT_OK;
}

/* Temporary files a killed run left (the lock is held: no live writer owns them). */
static void remove_stale_tmp(const ttt_plan *p, const char *dir) {
    ttt_remove_stale_tmp(dir);
    char path[4096];
    for (int i = 0; i < p->n_points; i++) {
        snprintf(path, sizeof path, "%s/checkpoints/point%d", dir, i);
        ttt_remove_stale_tmp(path);
    }
}

static ttt_status plan_run_locked(const ttt_plan *p, const char *dir, int progress, FILE *table,
                                  ttt_error *err);

#define COMPLETE_FILE ".ttt-complete"

/* What the completion mark of this plan says: the hash of config.resolved.yaml. */
static void complete_text(const ttt_plan *p, char out[32]) {
    char h[17];
    ttt_checkpoint_config_hash(p->resolved_yaml, h);
    snprintf(out, 32, "%s\n", h);
}

/* The folder holds a completed run of exactly this plan: its mark matches and its results are
 * there. Running it again would only spend the time to write the same numbers. */
static int run_is_complete(const ttt_plan *p, const char *dir) {
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

ttt_status ttt_plan_run(const ttt_plan *p, const char *out_dir, int progress, FILE *table,
                        ttt_error *err) {
    const char *dir = ttt_plan_output(p, out_dir);
    TTT_TRY(ttt_mkdirs(dir, err));
    int lock = -1;
    TTT_TRY(lock_run_folder(dir, &lock, err));
    remove_stale_tmp(p, dir);
    if (run_is_complete(p, dir)) {
        close(lock);
        fprintf(stderr, "ttt: %s holds this experiment's completed run; nothing was run and "
                        "nothing changed (to run it again, delete the folder or use --out)\n", dir);
        return TTT_OK;
    }
    char mark[4096 + 32];
    snprintf(mark, sizeof mark, "%s/" COMPLETE_FILE, dir);
    unlink(mark);
    ttt_status s = plan_run_locked(p, dir, progress, table, err);
    if (s == TTT_OK) {
        char text[32];
        complete_text(p, text);
        s = ttt_write_file_atomic(mark, text, err);
    }
    close(lock);
    return s;
}

static ttt_status plan_run_locked(const ttt_plan *p, const char *dir, int progress, FILE *table,
                                  ttt_error *err) {
    /* The resolved configuration goes first, so a run folder always says what produced it. */
    char path[4096];
    snprintf(path, sizeof path, "%s/config.resolved.yaml", dir);
    ttt_afile af;
    TTT_TRY(ttt_afile_open(&af, path, err));
    fputs(p->resolved_yaml, af.f);
    TTT_TRY(ttt_afile_commit(&af, err));


    long total = 0;
    for (int i = 0; i < p->n_points; i++) {
        const ttt_plan_point *pt = &p->points[i];
        total += pt->task->work ? pt->task->work(pt->cfg) : 1;
    }
    const ttt_plan_point *first = &p->points[0];
    ttt_results *res = ttt_results_new(first->name);
    if (!res) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    /* Records go to metrics.jsonl as they are made (a temporary name until the run completes;
     * trained points also journal theirs next to their checkpoints), so memory stays flat
     * however long the run (docs/hardening.md "Flat memory over long runs"). */
    ttt_status s0 = ttt_results_stream(res, dir, err);
    if (s0 != TTT_OK) {
        ttt_results_free(res);
        return s0;
    }
    ttt_progress pr;
    ttt_progress_init(&pr, first->name, total, NULL, progress);
    ttt_status s = TTT_OK;
    long done = 0;
    int finished = 0;
    for (int i = 0; i < p->n_points && s == TTT_OK; i++) {
        const ttt_plan_point *pt = &p->points[i];
        const ttt_task *t = pt->task;
        ttt_task_run run = {.cfg = pt->cfg, .label = pt->label, .point = i, .seed = pt->seed,
                            .config_hash = pt->config_hash, .results = res, .progress = &pr,
                            .work_done = done, .run_dir = dir};
        s = ttt_train_check_stop(err);
        if (s == TTT_OK) s = t->run(&run, err);
        if (s == TTT_OK) finished++;
        if (s != TTT_OK && s != TTT_ERR_INTERRUPTED && pt->label[0])
            error_suffix_point(err, pt->label);
        done += t->work ? t->work(pt->cfg) : 1;
        ttt_progress_update(&pr, done, pt->label);
    }
    ttt_progress_finish(&pr);
    /* Interrupted: what the finished points measured is written all the same (and the trained
     * point's checkpoint was saved), so a stopped sweep keeps its work (docs/hardening.md
     * "Signals"). */
    const int interrupted = s == TTT_ERR_INTERRUPTED;
    ttt_error stop_msg = *err;
    if (s == TTT_OK || interrupted) {
        const ttt_task *t = first->task;
        if (t->charts) t->charts(res, first->cfg);
        s = ttt_results_write(res, dir, err);
        const char *const *cols = t->columns_for ? t->columns_for(first->cfg) : t->columns;
        if (s == TTT_OK && !interrupted && cols && table) ttt_results_print_table(res, table, cols);
    }
    if (interrupted && s == TTT_OK) {
        if (strcmp(stop_msg.msg, "interrupted") == 0)
            ttt_error_set(err, TTT_ERR_INTERRUPTED,
                          "interrupted in point %d of %d (%d finished); what was measured so far "
                          "is in %s; run the same command again to run it whole",
                          finished + 1, p->n_points, finished, dir);
        else
            ttt_error_set(err, TTT_ERR_INTERRUPTED, "%s; the results so far are in %s",
                          stop_msg.msg, dir);
        s = TTT_ERR_INTERRUPTED;
    }
    ttt_results_free(res);
    return s;
}
