#include "experiment.h"

#include <stdlib.h>
#include <string.h>

#include "progress.h"
#include "results.h"
#include "task.h"

const ttt_option ttt_experiment_options[] = {
    {"name", TTT_OPT_STRING, "experiment", TTT_NO_RANGE, NULL,
     "name of the experiment (default: the file name without .yaml)"},
    {"description", TTT_OPT_STRING, "", TTT_NO_RANGE, NULL, "what the experiment shows"},
    {"seed", TTT_OPT_INT, "0", 0, 9007199254740992.0, NULL, "seed of every random draw"},
    {"task", TTT_OPT_MAP, NULL, TTT_NO_RANGE, NULL, "what to measure; `kind` names the task"},
    {"layer", TTT_OPT_MAP, "{}", TTT_NO_RANGE, NULL, "the TTT layer (see `ttt list`)"},
    {"model", TTT_OPT_MAP, "{}", TTT_NO_RANGE, NULL,
     "the sequence model of trained tasks (mqar, regression, lm; see `ttt list`)"},
    {"train", TTT_OPT_MAP, "{}", TTT_NO_RANGE, NULL,
     "outer-loop training of trained tasks: AdamW, schedule, evaluation, checkpoints"},
    {"output", TTT_OPT_STRING, "", TTT_NO_RANGE, NULL,
     "run folder (default: runs/<name>); --out overrides"},
    TTT_OPTION_END,
};

/* Keys allowed at the top level besides the options: the sweep (expanded away before a point
 * is checked) and the informational `resolved` list a previous run wrote. */
static const char *const top_extra[] = {"sweep", "resolved", NULL};

static char *file_stem(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char *s = strdup(base);
    char *dot = strrchr(s, '.');
    if (dot && dot != s) *dot = '\0';
    return s;
}

/* Name the sweep point after the message, so the message still starts with file:line:col. */
static void error_suffix_point(ttt_error *err, const char *label) {
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, " (in sweep point %s)", label);
}

static ttt_status check_point(ttt_cfg_node *root, const char *stem, ttt_error *err) {
    ttt_cfg_map_remove(root, "resolved");
    if (!ttt_cfg_get(root, "name")) ttt_cfg_map_set(root, "name", ttt_cfg_new_scalar(stem, root));
    TTT_TRY(ttt_cfg_check_map(root, "", ttt_experiment_options, top_extra, err));
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
    return t->check ? t->check(root, err) : TTT_OK;
}

/* Everything after the text is read (status s): overrides, sweep expansion and the check of every
 * point. Takes e; on success hands it to *out, on failure frees it. */
static ttt_status load_rest(ttt_experiment *e, ttt_status s, const char *const *sets, int n_sets,
                            ttt_experiment **out, ttt_error *err) {
    for (int i = 0; s == TTT_OK && i < n_sets; i++) s = ttt_cfg_apply_set(e->root, sets[i], err);
    if (s == TTT_OK) {
        ttt_cfg_map_remove(e->root, "resolved");
        s = ttt_cfg_sweep_expand(e->root, &e->points, &e->labels, &e->n_points, err);
    }
    char *stem = file_stem(e->path);
    for (int i = 0; s == TTT_OK && i < e->n_points; i++) {
        s = check_point(e->points[i], stem, err);
        if (s != TTT_OK && e->labels[i][0]) error_suffix_point(err, e->labels[i]);
    }
    free(stem);
    if (s != TTT_OK) {
        ttt_experiment_free(e);
        return s;
    }
    *out = e;
    return TTT_OK;
}

ttt_status ttt_experiment_load(const char *path, const char *const *sets, int n_sets,
                               ttt_experiment **out, ttt_error *err) {
    *out = NULL;
    ttt_experiment *e = calloc(1, sizeof *e);
    if (!e || !(e->path = strdup(path))) {
        free(e);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    }
    ttt_status s = ttt_cfg_load_file(path, &e->root, err);
    return load_rest(e, s, sets, n_sets, out, err);
}

ttt_status ttt_experiment_load_string(const char *text, const char *name,
                                      const char *const *sets, int n_sets, ttt_experiment **out,
                                      ttt_error *err) {
    *out = NULL;
    ttt_experiment *e = calloc(1, sizeof *e);
    if (!e || !(e->path = strdup(name ? name : "<string>"))) {
        free(e);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    }
    ttt_status s = ttt_cfg_load_string(text, e->path, &e->root, err);
    return load_rest(e, s, sets, n_sets, out, err);
}

void ttt_experiment_free(ttt_experiment *e) {
    if (!e) return;
    if (e->points) ttt_cfg_points_free(e->points, e->labels, e->n_points);
    ttt_cfg_free(e->root);
    free(e->path);
    free(e);
}

void ttt_experiment_write_resolved(const ttt_experiment *e, FILE *f) {
    if (!ttt_cfg_get(e->root, "sweep")) {
        ttt_cfg_write_yaml(e->points[0], f);
        return;
    }
    ttt_cfg_node *doc = ttt_cfg_clone(e->root);
    ttt_cfg_node *list = ttt_cfg_new_seq(doc);
    for (int i = 0; i < e->n_points; i++) {
        ttt_cfg_node *item = ttt_cfg_new_map(doc);
        ttt_cfg_map_set(item, "point", ttt_cfg_new_scalar(e->labels[i], doc));
        ttt_cfg_map_set(item, "config", ttt_cfg_clone(e->points[i]));
        ttt_cfg_seq_push(list, item);
    }
    ttt_cfg_map_set(doc, "resolved", list);
    fprintf(f, "# The experiment as run. `resolved` lists every sweep point with all its values;\n"
               "# it is informational and ignored when this file is run again.\n");
    ttt_cfg_write_yaml(doc, f);
    ttt_cfg_free(doc);
}

const char *ttt_experiment_output(const ttt_experiment *e, const char *out_dir) {
    return out_dir ? out_dir : ttt_cfg_str(e->points[0], "output");
}

ttt_status ttt_experiment_run(const ttt_experiment *e, const char *out_dir, int progress,
                              FILE *table, ttt_error *err) {
    const char *dir = ttt_experiment_output(e, out_dir);
    TTT_TRY(ttt_mkdirs(dir, err));
    /* The resolved configuration goes first, so a run folder always says what produced it. */
    char path[4096];
    snprintf(path, sizeof path, "%s/config.resolved.yaml", dir);
    ttt_afile af;
    TTT_TRY(ttt_afile_open(&af, path, err));
    ttt_experiment_write_resolved(e, af.f);
    TTT_TRY(ttt_afile_commit(&af, err));

    /* Trained tasks stream records into metrics.jsonl as they happen (a resumed run streams
     * the restored history first); the complete file is rewritten at the end. */
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *stream = fopen(path, "w");
    if (stream) fclose(stream);

    long total = 0;
    for (int i = 0; i < e->n_points; i++) {
        const ttt_task *t = ttt_task_find(ttt_cfg_str(ttt_cfg_get(e->points[i], "task"), "kind"));
        total += t->work ? t->work(e->points[i]) : 1;
    }
    ttt_results *res = ttt_results_new(ttt_cfg_str(e->points[0], "name"));
    ttt_progress pr;
    ttt_progress_init(&pr, ttt_cfg_str(e->points[0], "name"), total, NULL, progress);
    ttt_status s = TTT_OK;
    long done = 0;
    for (int i = 0; i < e->n_points && s == TTT_OK; i++) {
        ttt_cfg_node *pt = e->points[i];
        const ttt_task *t = ttt_task_find(ttt_cfg_str(ttt_cfg_get(pt, "task"), "kind"));
        ttt_task_run run = {.root = pt, .label = e->labels[i], .point = i,
                            .seed = (uint64_t)ttt_cfg_int(pt, "seed"), .results = res,
                            .progress = &pr, .work_done = done, .run_dir = dir};
        s = t->run(&run, err);
        if (s != TTT_OK && e->labels[i][0]) error_suffix_point(err, e->labels[i]);
        done += t->work ? t->work(pt) : 1;
        ttt_progress_update(&pr, done, e->labels[i]);
    }
    ttt_progress_finish(&pr);
    if (s == TTT_OK) {
        const ttt_task *t = ttt_task_find(ttt_cfg_str(ttt_cfg_get(e->points[0], "task"), "kind"));
        if (t->charts) t->charts(res, e->points[0]);
        s = ttt_results_write(res, dir, err);
        const char *const *cols = t->columns_for ? t->columns_for(e->points[0]) : t->columns;
        if (s == TTT_OK && cols && table) ttt_results_print_table(res, table, cols);
    }
    ttt_results_free(res);
    return s;
}
