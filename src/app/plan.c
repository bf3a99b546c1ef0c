/* The plan pass (plan.h, docs/design.md "Data flow"). */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "experiment.h"
#include "progress.h"
#include "results.h"

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

/* Validate one point's tree against the registries (filling every default into it), then let
 * its task read it into pt->cfg. */
static ttt_status plan_point(ttt_plan_point *pt, ttt_cfg_node *root, const char *stem,
                             ttt_error *err) {
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

ttt_status ttt_plan_run(const ttt_plan *p, const char *out_dir, int progress, FILE *table,
                        ttt_error *err) {
    const char *dir = ttt_plan_output(p, out_dir);
    TTT_TRY(ttt_mkdirs(dir, err));
    /* The resolved configuration goes first, so a run folder always says what produced it. */
    char path[4096];
    snprintf(path, sizeof path, "%s/config.resolved.yaml", dir);
    ttt_afile af;
    TTT_TRY(ttt_afile_open(&af, path, err));
    fputs(p->resolved_yaml, af.f);
    TTT_TRY(ttt_afile_commit(&af, err));

    /* Trained tasks stream records into metrics.jsonl as they happen (a resumed run streams
     * the restored history first); the complete file is rewritten at the end. */
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *stream = fopen(path, "w");
    if (stream) fclose(stream);

    long total = 0;
    for (int i = 0; i < p->n_points; i++) {
        const ttt_plan_point *pt = &p->points[i];
        total += pt->task->work ? pt->task->work(pt->cfg) : 1;
    }
    const ttt_plan_point *first = &p->points[0];
    ttt_results *res = ttt_results_new(first->name);
    ttt_progress pr;
    ttt_progress_init(&pr, first->name, total, NULL, progress);
    ttt_status s = TTT_OK;
    long done = 0;
    for (int i = 0; i < p->n_points && s == TTT_OK; i++) {
        const ttt_plan_point *pt = &p->points[i];
        const ttt_task *t = pt->task;
        ttt_task_run run = {.cfg = pt->cfg, .label = pt->label, .point = i, .seed = pt->seed,
                            .config_hash = pt->config_hash, .results = res, .progress = &pr,
                            .work_done = done, .run_dir = dir};
        s = t->run(&run, err);
        if (s != TTT_OK && pt->label[0]) error_suffix_point(err, pt->label);
        done += t->work ? t->work(pt->cfg) : 1;
        ttt_progress_update(&pr, done, pt->label);
    }
    ttt_progress_finish(&pr);
    if (s == TTT_OK) {
        const ttt_task *t = first->task;
        if (t->charts) t->charts(res, first->cfg);
        s = ttt_results_write(res, dir, err);
        const char *const *cols = t->columns_for ? t->columns_for(first->cfg) : t->columns;
        if (s == TTT_OK && cols && table) ttt_results_print_table(res, table, cols);
    }
    ttt_results_free(res);
    return s;
}
