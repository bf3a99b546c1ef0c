/* Tasks: what an experiment measures (docs/math.md §7). A task is a documented struct of function
 * pointers registered by one line in src/tasks/task_list.h.
 *
 * A task reads its configuration once, in the plan pass (src/app/plan.h): `parse` validates the
 * point's tree and copies every value the task will use into its own C struct (cfg_size bytes).
 * Everything after that — work, run, columns_for, charts — reads only that struct; no task
 * sees a ttt_cfg_node while it runs (docs/design.md "Data flow"). */
#ifndef TTT_TASK_H
#define TTT_TASK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "progress.h"
#include "results.h"

/* One configuration point of an experiment, ready to run. */
struct ttt_layer;
struct ttt_form_inputs;

typedef struct ttt_task_run {
    const void *cfg;          /* the point's parsed configuration (the task's own struct) */
    const char *label;        /* sweep label ("" without a sweep) */
    int point;                /* index of the point */
    uint64_t seed;
    const char *config_hash;  /* 16 hex digits: what determines the point's results (plan.h);
                               * checkpoints are resumed only under the same hash */
    ttt_results *results;     /* add records here */
    ttt_progress *progress;
    long work_done;           /* progress units done before this point */
    const char *run_dir;      /* the run folder (exists; trained tasks keep checkpoints under it),
                               * or NULL */
    const struct ttt_comm *comm; /* the MPI ranks that run this point together (data-parallel
                               * training, docs/scaling.md), or NULL: this process alone */
} ttt_task_run;

/* What `ttt sample` asks of a trained point (ttt_task.sample). */
typedef struct ttt_task_sample {
    const void *cfg;     /* the point's parsed configuration */
    const char *run_dir; /* the run folder: its checkpoints/point<i>/ hold the weights */
    int point;
    const char *prompt;  /* the task's notation: text for byte models, ids for token files */
    int n_tokens;        /* tokens to generate */
    double temperature;  /* 0 = greedy (arg-max) */
    int top_k;           /* 0 = the whole vocabulary */
    uint64_t seed;
    FILE *out;
} ttt_task_sample;

typedef struct ttt_task {
    const char *name;
    const char *help;
    /* Options of the `task:` section (besides `kind`); checked, with defaults filled in, before
     * `parse` is called. */
    const ttt_option *options;
    /* Size in bytes of the task's parsed configuration. */
    size_t cfg_size;
    /* Validate the rest of the point (e.g. build the layer with the task's dimensions) and read
     * everything the task needs into cfg (cfg_size bytes, zeroed). `root` is the point with the
     * top level and the task options checked (their defaults in it), and is only read. The
     * sections the task reads through their owners (`layer:` with ttt_layer_parse_section, the
     * trained tasks' `model:`, `layer:`, `train:` with ttt_trained_parse) are rendered by them,
     * and parse puts their renderings into `sections` (an empty mapping): config.resolved.yaml
     * shows them (docs/design.md "The plan pass"). parse keeps no pointer into either.
     * Errors are located (file:line:col). On failure cfg_free (if any) is still called. */
    ttt_status (*parse)(void *cfg, const ttt_cfg_node *root, ttt_cfg_node *sections,
                        ttt_error *err);
    /* The `task:` section as config.resolved.yaml shows it, written from cfg (what parse read):
     * `given` holds the keys the section gave, checked, in their order (`kind` among them); every
     * option it left out is written from its value in cfg, through ttt_task_section (below). */
    ttt_status (*section)(const void *cfg, const ttt_cfg_node *given, ttt_cfg_node **out,
                          ttt_error *err);
    /* Optional: free what parse allocated inside cfg (not cfg itself). */
    void (*cfg_free)(void *cfg);
    /* Units of progress a point takes (NULL: 1). */
    long (*work)(const void *cfg);
    /* Run one point (run->cfg is what parse filled), adding records to run->results. */
    ttt_status (*run)(ttt_task_run *run, ttt_error *err);
    /* Columns of the table `ttt run` prints at the end (NULL-terminated), or NULL. */
    const char *const *columns;
    /* Optional: the columns for this configuration (e.g. one list per kind of measurement),
     * asked of the first point; overrides `columns` when set. */
    const char *const *(*columns_for)(const void *cfg);
    /* Add the charts of the whole run (after every point), given the first point's cfg. */
    void (*charts)(ttt_results *res, const void *cfg);
    /* Optional, for tasks that train a sequence model: its configuration in the point's cfg
     * (`ttt export`, `ttt sample`). */
    const struct ttt_seq_model_config *(*model)(const void *cfg);
    /* Optional, for tasks that train with ttt_train: the point's model and training as parse
     * read them, with the estimate of a step's memory on train.device (trained.h): `ttt check`
     * prints the device, dtype and estimate, and `ttt run` asks ttt_train_device_ready of it
     * before it writes anything. */
    const struct ttt_trained_cfg *(*trained)(const void *cfg);
    /* Optional: generate from a trained point's model (`ttt sample`, src/app/main.c), writing
     * the continuation of s->prompt to s->out. NULL: the task has nothing to sample. */
    ttt_status (*sample)(const struct ttt_task_sample *s, ttt_error *err);
    /* A small complete experiment (YAML) that runs in about a second: tests/test_plan.c plans
     * and runs the tiny experiment of every registered task, so a new task is covered by
     * writing one. It runs in a folder that holds `tiny.txt`, a few kilobytes of English text,
     * for tasks that read a corpus. */
    const char *tiny;
    /* Optional: the layer calls a point makes, for `ttt check`'s account of the form each runs
     * (docs/forms.md "How `auto` chooses"): up to max (layer, inputs) pairs into L and in; returns
     * how many. Tasks that train a sequence model need not: `ttt check` asks their `model`. */
    int (*layer_calls)(const void *cfg, const struct ttt_layer **L, struct ttt_form_inputs *in,
                       int max);
} ttt_task;

const ttt_task *ttt_task_find(const char *name);
int ttt_task_count(void);
const ttt_task *ttt_task_at(int i);
const char *const *ttt_task_names(void);

/* One option's value as a task holds it, for its `task:` section (ttt_task_section). The member
 * the option's type uses: number (TTT_OPT_INT, _FLOAT, _BOOL), text (TTT_OPT_STRING, _CHOICE;
 * NULL or "" = not set, written as null like the tables' "" defaults), list (TTT_OPT_INT_LIST,
 * n of them). single: a float the task holds in single precision. */
typedef struct ttt_task_value {
    const char *key;
    double number;
    const char *text;
    const long *list;
    int n;
    int single;
} ttt_task_value;

/* The `task:` section of a task with these options as config.resolved.yaml shows it: the keys
 * `given` holds (as written, checked; ttt_task.section), then every option it left out, in the
 * table's order, written from its value among values[0 … n_values − 1]. A number is written in
 * the table's spelling when it is the option's default (at the precision the task holds it: 0.0,
 * 1e-3), else in the shortest text that reads back the same. An option left out without a value
 * here is a bug in the task (TTT_ERR_ARG). *out: malloc'd, the caller frees. */
ttt_status ttt_task_section(const ttt_option *options, const ttt_cfg_node *given,
                            const ttt_task_value *values, int n_values, ttt_cfg_node **out,
                            ttt_error *err);

/* The integers of a validated TTT_OPT_INT_LIST option `key` of `map`, malloc'd into *out (n of
 * them; the caller frees). */
ttt_status ttt_task_read_ints(const ttt_cfg_node *map, const char *key, long **out, int *n,
                              ttt_error *err);

#endif
