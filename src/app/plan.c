/* The plan pass (plan.h, docs/design.md "Data flow"). */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "checkpoint.h"
#include "comm.h"
#include "experiment.h"
#include "point_records.h"
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
 * train.threads, train.data_parallel). Checkpoints store it; changing the definition orphans every checkpoint. */
static void config_hash(const ttt_cfg_node *root, char hash[17]) {
    ttt_cfg_node *h = ttt_cfg_clone(root);
    ttt_cfg_map_remove(h, "name");
    ttt_cfg_map_remove(h, "description");
    ttt_cfg_map_remove(h, "output");
    ttt_cfg_node *tr = (ttt_cfg_node *)ttt_cfg_get(h, "train");
    if (tr) {
        ttt_cfg_map_remove(tr, "stop_at");
        ttt_cfg_map_remove(tr, "threads");
        ttt_cfg_map_remove(tr, "data_parallel");
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
    pt->cost = t->work ? (double)t->work(pt->cfg) : 1.0;
    const ttt_cfg_node *dp = ttt_cfg_get(root, "train");
    dp = dp ? ttt_cfg_get(dp, "data_parallel") : NULL;
    pt->parallel = TTT_PARALLEL_AUTO;
    if (dp && dp->kind == TTT_CFG_SCALAR && dp->scalar) {
        if (strcmp(dp->scalar, "true") == 0) pt->parallel = TTT_PARALLEL_DATA;
        if (strcmp(dp->scalar, "false") == 0) pt->parallel = TTT_PARALLEL_POINTS;
    }
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

/* config.resolved.yaml goes first, so a run folder always says what produced it. */
static ttt_status write_resolved(const ttt_plan *p, const char *dir, ttt_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.resolved.yaml", dir);
    return ttt_write_file_atomic(path, p->resolved_yaml, err);
}

/* Charts, metrics.jsonl, summary.csv, the charts, index.html, and the table. */
static ttt_status finish(const ttt_plan *p, ttt_results *res, const char *dir, FILE *table,
                         ttt_error *err) {
    const ttt_plan_point *first = &p->points[0];
    const ttt_task *t = first->task;
    if (t->charts) t->charts(res, first->cfg);
    TTT_TRY(ttt_results_write(res, dir, err));
    const char *const *cols = t->columns_for ? t->columns_for(first->cfg) : t->columns;
    if (cols && table) ttt_results_print_table(res, table, cols);
    return TTT_OK;
}

static void part_path(char *out, size_t len, const char *dir, int i, const char *ext) {
    snprintf(out, len, "%s/parts/point%d.%s", dir, i, ext);
}

/* The parts are spent once the run folder holds their records. */
static void remove_parts(const ttt_plan *p, const char *dir) {
    char path[4096];
    for (int i = 0; i < p->n_points; i++) {
        part_path(path, sizeof path, dir, i, "rec");
        unlink(path);
        part_path(path, sizeof path, dir, i, "jsonl");
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/parts", dir);
    rmdir(path); /* left in place when it holds anything else */
}

void ttt_plan_assign(const ttt_plan *p, int n, int *owner) {
    const int np = p->n_points;
    int *ord = malloc((size_t)(np > 0 ? np : 1) * sizeof *ord);
    double *load = calloc((size_t)(n > 0 ? n : 1), sizeof *load);
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

ttt_status ttt_plan_run_exec(const ttt_plan *p, const char *out_dir, int progress, FILE *table,
                             const ttt_plan_exec *x, ttt_error *err) {
    const ttt_comm *comm = x && x->comm ? x->comm : &ttt_comm_self;
    const int R = comm->size, leader = comm->rank == 0;
    const int sharded = x && x->n_shards > 0;
    /* --parallel, when given, else the first point's train.data_parallel */
    const ttt_plan_parallel par = x && x->parallel != TTT_PARALLEL_AUTO ? x->parallel
                                                                       : (ttt_plan_parallel)p->points[0].parallel;
    /* data: every rank trains every point together; split: each point has one owner (a rank or
     * a shard) and its records travel through its part file */
    const int data = R > 1 && !sharded &&
                     (par == TTT_PARALLEL_DATA || (par == TTT_PARALLEL_AUTO && p->n_points < R));
    const int split = sharded || (R > 1 && !data);
    const char *dir = ttt_plan_output(p, out_dir);
    char path[4096];

    ttt_status s = TTT_OK;
    if (leader || sharded) {
        s = ttt_mkdirs(dir, err);
        if (s == TTT_OK) s = write_resolved(p, dir, err);
    }
    /* Trained tasks stream records into metrics.jsonl as they happen (a resumed run streams
     * the restored history first); the complete file is rewritten at the end. Points that run
     * apart stream into their parts/point<i>.jsonl instead: metrics.jsonl has one writer. */
    if (s == TTT_OK && leader && !sharded) {
        snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
        FILE *stream = fopen(path, "w");
        if (stream) fclose(stream);
    }
    if (s == TTT_OK && split) {
        snprintf(path, sizeof path, "%s/parts", dir);
        s = ttt_mkdirs(path, err);
    }
    if (R > 1 && !ttt_comm_all(comm, s == TTT_OK) && s == TTT_OK)
        s = ttt_error_set(err, TTT_ERR_IO, "rank 0 could not prepare the run folder %s", dir);
    if (s != TTT_OK) return s;

    int *owner = calloc((size_t)p->n_points, sizeof *owner);
    if (!owner) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    const int me = sharded ? x->shard : comm->rank;
    if (split) ttt_plan_assign(p, sharded ? x->n_shards : R, owner);

    long total = 0;
    for (int i = 0; i < p->n_points; i++)
        if (!split || owner[i] == me) total += (long)p->points[i].cost;
    const ttt_plan_point *first = &p->points[0];
    ttt_results *res = ttt_results_new(first->name);
    ttt_progress pr;
    ttt_progress_init(&pr, first->name, total, NULL, progress && leader);
    long done = 0;
    for (int i = 0; i < p->n_points && s == TTT_OK; i++) {
        const ttt_plan_point *pt = &p->points[i];
        if (split && owner[i] != me) continue;
        const ttt_task *t = pt->task;
        ttt_results *into = split ? ttt_results_new(first->name) : res;
        const int from = into ? ttt_results_count(into) : 0;
        char part[4096], stream[4096];
        part_path(part, sizeof part, dir, i, "rec");
        part_path(stream, sizeof stream, dir, i, "jsonl");
        int found = 0;
        if (!into) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
        /* a part under the same configuration: the point ended in an earlier run */
        else if (!data) s = ttt_part_load(into, part, pt->config_hash, &found, err);
        if (s == TTT_OK && !found) {
            ttt_task_run run = {.cfg = pt->cfg, .label = pt->label, .point = i, .seed = pt->seed,
                                .config_hash = pt->config_hash, .results = into,
                                .progress = &pr, .work_done = done, .run_dir = dir,
                                .stream_path = split ? stream : NULL,
                                .comm = data ? comm : NULL};
            s = t->run(&run, err);
            if (s != TTT_OK && pt->label[0]) error_suffix_point(err, pt->label);
            if (s == TTT_OK && split) s = ttt_part_save(into, from, part, pt->config_hash, err);
        }
        if (split) ttt_results_free(into);
        done += (long)pt->cost;
        ttt_progress_update(&pr, done, pt->label);
    }
    ttt_progress_finish(&pr);
    free(owner);
    if (R > 1 && !ttt_comm_all(comm, s == TTT_OK) && s == TTT_OK)
        s = ttt_error_set(err, TTT_ERR_IO,
                          "another rank failed (its message is on its stderr); the points that "
                          "ended are kept in %s/parts: run the same command again to run the "
                          "rest", dir);
    if (s == TTT_OK && leader && !sharded) {
        if (split) {
            ttt_results_free(res);
            res = NULL;
            s = ttt_plan_merge(p, dir, table, err);
        } else {
            s = finish(p, res, dir, table, err);
            if (s == TTT_OK) remove_parts(p, dir);
        }
    }
    ttt_results_free(res);
    return s;
}

ttt_status ttt_plan_merge(const ttt_plan *p, const char *out_dir, FILE *table, ttt_error *err) {
    const char *dir = ttt_plan_output(p, out_dir);
    const ttt_plan_point *first = &p->points[0];
    ttt_results *res = ttt_results_new(first->name);
    if (!res) return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory");
    char missing[256] = "";
    int n_missing = 0;
    ttt_status s = TTT_OK;
    for (int i = 0; i < p->n_points && s == TTT_OK; i++) {
        char part[4096];
        part_path(part, sizeof part, dir, i, "rec");
        int found = 0;
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
    if (s == TTT_OK) s = write_resolved(p, dir, err);
    if (s == TTT_OK) s = finish(p, res, dir, table, err);
    if (s == TTT_OK) remove_parts(p, dir);
    ttt_results_free(res);
    return s;
}
