/* The plan of an experiment: every configuration point read once into typed C values.
 *
 *   YAML text → tree (file:line:col on every node) → --set overrides → ONE pass (this file):
 *     sweep expansion → each point validated against the registries (on the plan's copy of it,
 *     which the checks complete with the defaults) → each task's `parse` reads its point into
 *     the task's own struct → each point's configuration written from what was read, every
 *     section by the code that read it → the text of config.resolved.yaml and each point's
 *     configuration hash → the trees are freed.
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

/* The most replicates `seeds:` asks for. */
#define TTT_MAX_SEEDS 1000

/* One configuration point, ready to run. */
typedef struct ttt_plan_point {
    int index;             /* 0 … n_points − 1 (sweep order: the first axis varies slowest) */
    char *label;           /* sweep label, "layer.optimizer.lr=0.1, task.pairs=8" ("" without),
                            * with ", seed=S" under `seeds:` */
    char *series;          /* the legend of its lines in charts: what the sweep set (not the
                            * seed) by short column names, as written, "train.lr=3e-3,
                            * layer.preset=deltanet" ("" without a sweep) */
    char **values;         /* (plan n_cols) its value of each column (text; NULL: none) */
    int group, member;     /* the configuration but for the seed, and which replicate of it
                            * (group -1 without a seed axis) */
    char *name;            /* the experiment's `name` */
    char *output;          /* the point's `output` folder (default runs/<name>) */
    uint64_t seed;         /* `seed` */
    const ttt_task *task;  /* `task.kind` */
    double cost;           /* estimated cost: the task's `work` units (1 without): what the
                            * ranks and shards of a distributed sweep balance */
    int parallel;          /* ttt_plan_parallel from `train.data_parallel` (auto without) */
    void *cfg;             /* task->cfg_size bytes, filled by task->parse */
    double memory;         /* bytes the point is estimated to need: the sum of the sizes its
                            * task checked while parsing (ttt_size_estimate) */
    /* What determines the point's results: ttt_checkpoint_config_hash of the resolved point
     * without name, description, output, train.stop_at, train.threads and train.data_parallel
     * (a checkpoint resumes only under the same hash). */
    char config_hash[17];
} ttt_plan_point;

typedef struct ttt_plan {
    int n_points;
    ttt_plan_point *points;    /* (n_points) */
    /* The columns every record of a point starts with (docs/results.md "Columns"): the swept
     * key paths, a mapping-valued axis flattened to its leaf keys ("layer" over {preset: …}
     * gives layer.preset), and `seed` when there is a seed axis (`seeds: N` or a swept seed). */
    int n_cols;
    char **cols;               /* (n_cols) */
    int seeds;                 /* `seeds:` (1 without): each point of the sweep runs this many
                                * times, with seeds seed … seed + seeds − 1 */
    int seed_axis;             /* replicates are aggregated (seeds > 1 or a swept seed) */
    int log_y;                 /* `charts: {log_y: …}` (TTT_LOG_Y_*) */
    char *log_y_only;          /* the charts it names ("a,b"), or NULL: every chart */
    /* `results: {best_over, metric, goal}` (docs/results.md "Best over an axis"): the swept
     * column each configuration is reported at its best value of (NULL: none), the column it
     * is chosen by ("" = the task's main metric), and whether the largest wins */
    char *best_over, *best_metric;
    int best_max;
    char *resolved_yaml;       /* the text of config.resolved.yaml */
} ttt_plan;

/* The one pass. `doc` is the experiment as loaded with overrides applied (sweep intact), and is
 * only read; its informational `resolved:` list, if any, is ignored. `stem` is the default
 * experiment name. Every point is checked before anything is returned; errors are located
 * (file:line:col) and name the sweep point. The plan keeps no pointer into doc. */
ttt_status ttt_plan_build(const ttt_cfg_node *doc, const char *stem, ttt_plan **out,
                          ttt_error *err);
void ttt_plan_free(ttt_plan *p);

/* Where the run folder goes: out_dir if given, else the first point's `output`. */
const char *ttt_plan_output(const ttt_plan *p, const char *out_dir);
/* Run every point and write the run folder (config.resolved.yaml, metrics.jsonl, summary.csv,
 * charts, index.html). progress: show progress on stderr; table: where to print the summary
 * table at the end (NULL = nowhere). */
ttt_status ttt_plan_run(const ttt_plan *p, const char *out_dir, int progress, FILE *table,
                        ttt_error *err);

/* Whether every trained point can train where its train.device says (train.h
 * ttt_train_device_ready: bfloat16 on the host, a mixer or layer without a device path): the
 * first refusal, its point named, or TTT_OK. `ttt check` and ttt_plan_run ask it before anything
 * is written. */
ttt_status ttt_plan_devices_ready(const ttt_plan *p, ttt_error *err);

/* How the points are shared among processes (docs/scaling.md). */
typedef enum ttt_plan_parallel {
    TTT_PARALLEL_AUTO = 0, /* points over ranks when there are at least as many points as ranks,
                            * else data-parallel */
    TTT_PARALLEL_POINTS,   /* each point runs whole on one rank */
    TTT_PARALLEL_DATA,     /* every rank runs every point together (data-parallel training) */
} ttt_plan_parallel;

typedef struct ttt_plan_exec {
    const struct ttt_comm *comm; /* the MPI ranks (NULL: this process alone) */
    ttt_plan_parallel parallel;  /* --parallel; AUTO: the first point's train.data_parallel */
    int shard, n_shards;         /* --shard i/n: run only the points of shard i (n_shards 0:
                                  * all points); the run folder is written by ttt_plan_merge */
} ttt_plan_exec;

/* Give each of the points to one of n owners (ranks or shards), balanced by estimated cost:
 * the costliest point first, each to the owner with the least cost so far (ties: the lowest
 * owner). owner: (n_points). The same plan and n give the same assignment on every process. */
void ttt_plan_assign(const ttt_plan *p, int n, int *owner);

/* ttt_plan_run shared among processes: the points of a sweep over MPI ranks or --shard jobs,
 * or each point data-parallel over the ranks. Each point's records go to
 * <dir>/parts/point<i>.rec when it ends, so a point already done (a part under the same
 * configuration hash) is not run again: a rank or job that dies loses only the points it was
 * running. Rank 0 then writes the run folder exactly as ttt_plan_run would (and removes parts/);
 * with --shard, ttt_plan_merge does. A one-process exec behaves as ttt_plan_run (and still uses
 * the parts an earlier distributed run left). Only the writer locks the folder: rank 0
 * (.ttt-lock), which also decides for every rank whether the run is refused or already
 * complete (.ttt-complete) before anything is written; a --shard job holds .ttt-lock shared and
 * .ttt-lock.shard<i> exclusively (docs/scaling.md "Run folders shared by ranks and jobs"). */
ttt_status ttt_plan_run_exec(const ttt_plan *p, const char *out_dir, int progress, FILE *table,
                             const ttt_plan_exec *x, ttt_error *err);
/* Write the run folder from the parts every point left (after --shard jobs), holding .ttt-lock
 * exclusively (refused while shard jobs run), then the completion mark; a completed run is left
 * as it is. A point without its part is an error naming the points missing. */
ttt_status ttt_plan_merge(const ttt_plan *p, const char *out_dir, FILE *table, ttt_error *err);

#endif
