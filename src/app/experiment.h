/* Experiments: a YAML file → a plan of typed configuration points → runs → a run folder.
 *
 *   load (file:line:col kept) → --set overrides → the plan pass (plan.h: sweep expansion, every
 *   point validated against the registries and read once by its task; nothing is written unless
 *   all are valid) → run each point's task from its typed configuration → config.resolved.yaml,
 *   metrics.jsonl, summary.csv, charts, index.html (docs/design.md "Data flow"). */
#ifndef TTT_EXPERIMENT_H
#define TTT_EXPERIMENT_H

#include <stdio.h>

#include "config.h"
#include "plan.h"

typedef struct ttt_experiment {
    char *path;            /* the YAML file */
    /* The document as written, with overrides applied (sweep intact). Kept for callers that
     * look at what was given (the fuzz harness bounds its work by its size); running reads only
     * the plan. */
    ttt_cfg_node *root;
    int n_points;
    ttt_plan *plan;        /* every point, typed (plan.h) */
} ttt_experiment;

/* The top-level keys of an experiment file. */
extern const ttt_option ttt_experiment_options[];

/* Load, override and plan (validate every point). `sets` are "a.b.c=value" strings. */
ttt_status ttt_experiment_load(const char *path, const char *const *sets, int n_sets,
                               ttt_experiment **out, ttt_error *err);
/* The same from YAML text in memory (fuzzing, tests, embedding); `name` stands for the file name
 * in messages and gives the default experiment name (its stem). */
ttt_status ttt_experiment_load_string(const char *text, const char *name,
                                      const char *const *sets, int n_sets, ttt_experiment **out,
                                      ttt_error *err);
void ttt_experiment_free(ttt_experiment *e);
/* The resolved configuration: without a sweep, the one point with every default; with a sweep,
 * the experiment as given plus `resolved:`, one fully resolved configuration per point. */
void ttt_experiment_write_resolved(const ttt_experiment *e, FILE *f);
/* Where the run folder goes: out_dir if given, else the file's `output`. */
const char *ttt_experiment_output(const ttt_experiment *e, const char *out_dir);
/* Run every point and write the run folder. progress: show progress on stderr; table: where to
 * print the summary table at the end (NULL = nowhere). */
ttt_status ttt_experiment_run(const ttt_experiment *e, const char *out_dir, int progress,
                              FILE *table, ttt_error *err);

#endif
