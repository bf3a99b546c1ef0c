/* What the trained tasks (mqar.c, regression.c, lm.c) share: reading a point's `model:`,
 * `layer:` and `train:` sections once into a typed ttt_trained_cfg, and training a point with
 * checkpoints and streamed records. */
#ifndef TTT_TRAINED_H
#define TTT_TRAINED_H

#include "task.h"
#include "train.h"

/* The sequence model and its training, as the plan pass read them. */
typedef struct ttt_trained_cfg {
    ttt_seq_model_config model;
    ttt_train_config train;
    char init_from[1024];        /* train.init_from: initial parameters ("" = none) */
    char init_from_where[512];   /* where it was given (file:line:col), for errors at run time */
    ttt_train_estimate memory;   /* a step's memory on train.device (`ttt check` prints it) */
} ttt_trained_cfg;

/* Validate a point's `model:`, `layer:` and `train:` sections for the task's io (root is only
 * read) and read them into *out, with the estimate of a step's memory on train.device; refuses a
 * training step on the host too large for the machine. The sections as config.resolved.yaml
 * shows them go into `sections` (ttt_task.parse). Errors are located. */
ttt_status ttt_trained_parse(ttt_trained_cfg *out, const ttt_cfg_node *root,
                             ttt_cfg_node *sections, const ttt_seq_model_io *io, ttt_error *err);

/* The memory a training step of model mc under tc with sequences of seq_len holds on
 * tc->device (docs/training.md "Device and precision"): on the host the bytes the plan checks
 * against the machine's memory; on a CUDA device the device memory of the parameters with their
 * gradient and AdamW state and of one step's activations and tape. */
void ttt_trained_estimate(const ttt_seq_model_config *mc, const ttt_train_config *tc,
                          int seq_len, ttt_train_estimate *e);

/* A trained point: the model after training and what training reported. */
typedef struct ttt_trained {
    ttt_seq_model model;
    ttt_train_config train;
    ttt_train_result result;
    char mixer[128]; /* ttt_seq_model_describe */
} ttt_trained;

/* Build the point's model from cfg (seeded by run->seed), then train it with checkpoints in
 * <run_dir>/checkpoints/point<i>/ (resumed only under the same run->config_hash) and records
 * streamed to <run_dir>/metrics.jsonl. Free with ttt_trained_free. */
ttt_status ttt_train_point(ttt_task_run *run, const ttt_trained_cfg *cfg, ttt_train_data *data,
                           ttt_trained *out, ttt_error *err);
void ttt_trained_free(ttt_trained *t);
/* The model of a trained point, from its run folder: built from cfg, with the weights of the
 * point's last checkpoint (<run_dir>/checkpoints/point<i>/). Free with ttt_seq_model_free. */
ttt_status ttt_trained_load(ttt_seq_model *m, const ttt_seq_model_config *cfg,
                            const char *run_dir, int point, ttt_error *err);
/* Generate n_new tokens after prompt[0..n_prompt-1] (n_prompt ≥ 1) with the weights of the
 * point's last checkpoint (<run_dir>/checkpoints/point<i>/, which training writes at its last
 * step): each step runs the model on the last `window` tokens (at most the length it was
 * trained on) and draws the next token from softmax(logits / temperature) over the top_k most
 * likely (0: all); temperature 0 takes the arg-max. out: (n_new). */
ttt_status ttt_trained_generate(int *out, const ttt_trained_cfg *cfg, const char *run_dir,
                                int point, const int *prompt, int n_prompt, int n_new,
                                int window, double temperature, int top_k, uint64_t seed,
                                ttt_error *err);
/* The summary fields every trained task reports (series, mixer, lr, steps, ...). */
void ttt_trained_record(const ttt_task_run *run, const ttt_trained *t, ttt_record *r);

/* The charts of what training logs besides the task's own: the gradient norm and the learning
 * rate per step, and the evaluation loss (in `loss_label`) at each evaluation. */
void ttt_trained_charts(ttt_results *res, const char *loss_label);

#endif
