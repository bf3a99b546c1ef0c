/* Tasks: what an experiment measures (MATH.md §7). A task is a documented struct of function
 * pointers registered by one line in src/tasks/task_list.h. */
#ifndef TTT_TASK_H
#define TTT_TASK_H

#include <stdint.h>

#include "config.h"
#include "progress.h"
#include "results.h"

/* One configuration point of an experiment, ready to run. */
typedef struct ttt_task_run {
    ttt_cfg_node *root;   /* the point's resolved configuration */
    const char *label;    /* sweep label ("" without a sweep) */
    int point;            /* index of the point */
    uint64_t seed;
    ttt_results *results; /* add records here */
    ttt_progress *progress;
    long work_done;       /* progress units done before this point */
    const char *run_dir;  /* the run folder (exists; trained tasks keep checkpoints under it) */
} ttt_task_run;

typedef struct ttt_task {
    const char *name;
    const char *help;
    /* Options of the `task:` section (besides `kind`). */
    const ttt_option *options;
    /* Validate the rest of the point (e.g. build the layer with the task's dimensions) after the
     * task options are checked; errors are located. */
    ttt_status (*check)(ttt_cfg_node *root, ttt_error *err);
    /* Units of progress a point takes. */
    long (*work)(const ttt_cfg_node *root);
    /* Run one point, adding records to run->results. */
    ttt_status (*run)(ttt_task_run *run, ttt_error *err);
    /* Columns of the table `ttt run` prints at the end (NULL-terminated), or NULL. */
    const char *const *columns;
    /* Optional: the columns for this configuration (e.g. one list per kind of measurement),
     * asked of the first point; overrides `columns` when set. */
    const char *const *(*columns_for)(const ttt_cfg_node *root);
    /* Add the charts of the whole run (after every point). */
    void (*charts)(ttt_results *res, const ttt_cfg_node *root);
} ttt_task;

const ttt_task *ttt_task_find(const char *name);
int ttt_task_count(void);
const ttt_task *ttt_task_at(int i);
const char *const *ttt_task_names(void);

#endif
