/* The plan of an experiment: every configuration point read once into typed C values.
 *
 *   YAML text → tree (file:line:col on every node) → --set overrides → ONE pass (this file):
 *     sweep expansion → each point validated against the registries, defaults filled in →
 *     each task's `parse` reads its point into the task's own struct → the text of
 *     config.resolved.yaml and each point's configuration hash → the trees are freed.
 *   The plan → ttt_plan_run → each point's task runs from its struct.
 *
 * Nothing below the plan sees a ttt_cfg_node: a plan holds no pointer into any tree, so the tree
 * it was built from may be changed or freed before it runs (docs/design.md "Data flow"). */
#ifndef TTT_PLAN_H
#define TTT_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "task.h"

/* One configuration point, ready to run. */
typedef struct ttt_plan_point {
    int index;             /* 0 … n_points − 1 (sweep order: the first axis varies slowest) */
    char *label;           /* sweep label, "layer.optimizer.lr=0.1, task.pairs=8" ("" without) */
    char *name;            /* the experiment's `name` */
    char *output;          /* the point's `output` folder (default runs/<name>) */
    uint64_t seed;         /* `seed` */
    const ttt_task *task;  /* `task.kind` */
    void *cfg;             /* task->cfg_size bytes, filled by task->parse */
    /* What determines the point's results: ttt_checkpoint_config_hash of the resolved point
     * without name, description, output, train.stop_at and train.threads (a checkpoint resumes
     * only under the same hash). */
    char config_hash[17];
} ttt_plan_point;

typedef struct ttt_plan {
    int n_points;
    ttt_plan_point *points;    /* (n_points) */
    char *resolved_yaml;       /* the text of config.resolved.yaml */
} ttt_plan;

/* The one pass. `doc` is the experiment as loaded with overrides applied (sweep intact); its
 * informational `resolved:` list, if any, is removed. `stem` is the default experiment name.
 * Every point is checked before anything is returned; errors are located (file:line:col) and
 * name the sweep point. The plan keeps no pointer into doc. */
ttt_status ttt_plan_build(ttt_cfg_node *doc, const char *stem, ttt_plan **out, ttt_error *err);
void ttt_plan_free(ttt_plan *p);

/* Where the run folder goes: out_dir if given, else the first point's `output`. */
const char *ttt_plan_output(const ttt_plan *p, const char *out_dir);
/* Run every point and write the run folder (config.resolved.yaml, metrics.jsonl, summary.csv,
 * charts, index.html). progress: show progress on stderr; table: where to print the summary
 * table at the end (NULL = nowhere). */
ttt_status ttt_plan_run(const ttt_plan *p, const char *out_dir, int progress, FILE *table,
                        ttt_error *err);

#endif
