#include "experiment.h"
#include "fault.h"

#include <stdlib.h>
#include <string.h>


const ttt_option ttt_experiment_options[] = {
    {"name", TTT_OPT_STRING, "experiment", TTT_NO_RANGE, NULL,
     "name of the experiment (default: the file name without .yaml)"},
    {"description", TTT_OPT_STRING, "", TTT_NO_RANGE, NULL, "what the experiment shows"},
    {"seed", TTT_OPT_INT, "0", 0, 9007199254740992.0, NULL, "seed of every random draw"},
    {"seeds", TTT_OPT_INT, "1", 1, TTT_MAX_SEEDS, NULL,
     "run every point this many times, with seeds seed … seed + seeds − 1, and report mean ± "
     "std over them (docs/results.md \"Seeds\")"},
    {"charts", TTT_OPT_MAP, "{}", TTT_NO_RANGE, NULL,
     "how the charts are drawn: log_y: auto (log when all values are positive and span more "
     "than two decades), true, false, or a list of chart names"},
    {"results", TTT_OPT_MAP, "{}", TTT_NO_RANGE, NULL,
     "how the results are reported: best_over: a swept key (each configuration at its best "
     "value of it), metric: the column it is chosen by (default: the task's main metric), "
     "goal: max or min (docs/results.md \"Best over an axis\")"},
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

static char *file_stem(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char *s = ttt_fault_strdup(base);
    if (!s) return NULL;
    char *dot = strrchr(s, '.');
    if (dot && dot != s) *dot = '\0';
    return s;
}

/* Everything after the text is read (status s): overrides, then the plan pass. Takes e; on
 * success hands it to *out, on failure frees it. */
static ttt_status load_rest(ttt_experiment *e, ttt_status s, const char *const *sets, int n_sets,
                            ttt_experiment **out, ttt_error *err) {
    for (int i = 0; s == TTT_OK && i < n_sets; i++) s = ttt_cfg_apply_set(e->root, sets[i], err);
    char *stem = s == TTT_OK ? file_stem(e->path) : NULL;
    if (s == TTT_OK && !stem) s = ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the name");
    if (s == TTT_OK) s = ttt_plan_build(e->root, stem, &e->plan, err);
    free(stem);
    if (s != TTT_OK) {
        ttt_experiment_free(e);
        return s;
    }
    e->n_points = e->plan->n_points;
    *out = e;
    return TTT_OK;
}

ttt_status ttt_experiment_load(const char *path, const char *const *sets, int n_sets,
                               ttt_experiment **out, ttt_error *err) {
    *out = NULL;
    ttt_experiment *e = ttt_fault_calloc(1, sizeof *e);
    if (!e || !(e->path = ttt_fault_strdup(path))) {
        free(e);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the experiment");
    }
    ttt_status s = ttt_cfg_load_file(path, &e->root, err);
    return load_rest(e, s, sets, n_sets, out, err);
}

ttt_status ttt_experiment_load_string(const char *text, const char *name,
                                      const char *const *sets, int n_sets, ttt_experiment **out,
                                      ttt_error *err) {
    *out = NULL;
    ttt_experiment *e = ttt_fault_calloc(1, sizeof *e);
    if (!e || !(e->path = ttt_fault_strdup(name ? name : "<string>"))) {
        free(e);
        return ttt_error_set(err, TTT_ERR_NOMEM, "out of memory for the experiment");
    }
    ttt_status s = ttt_cfg_load_string(text, e->path, &e->root, err);
    return load_rest(e, s, sets, n_sets, out, err);
}

void ttt_experiment_free(ttt_experiment *e) {
    if (!e) return;
    ttt_plan_free(e->plan);
    ttt_cfg_free(e->root);
    free(e->path);
    free(e);
}

void ttt_experiment_write_resolved(const ttt_experiment *e, FILE *f) {
    fputs(e->plan->resolved_yaml, f);
}

const char *ttt_experiment_output(const ttt_experiment *e, const char *out_dir) {
    return ttt_plan_output(e->plan, out_dir);
}

ttt_status ttt_experiment_run(const ttt_experiment *e, const char *out_dir, int progress,
                              FILE *table, ttt_error *err) {
    return ttt_plan_run(e->plan, out_dir, progress, table, err);
}
