/* The `regression` task (docs/math.md §7): in-context linear regression, trained end to end.
 *
 * Every training sequence is a fresh problem: w ~ N(0, I_d), x_i ~ N(0, I_d), y_i = w·x_i (data.h,
 * interleaved layout: token 2i = [x_i, 0] predicts y_i, token 2i+1 = [0, y_i] reveals it). The
 * model reads d + 1 features per token and writes one number; the loss is the mean squared error
 * at the prediction positions. Evaluation uses a fixed set of sequences and reports the error as
 * a function of the number k of (x, y) pairs seen, next to the least-squares fit to the same k
 * pairs (minimum-norm for k < d; exact from k = d on without noise). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fault.h"
#include "task.h"
#include "trained.h"

static const ttt_option regression_options[] = {
    {"dim", TTT_OPT_INT, "8", 1, 4096, NULL, "dimension d of x and w"},
    {"points", TTT_OPT_INT, "32", 1, 1 << 20, NULL, "points n per sequence (T = 2n tokens)"},
    {"noise", TTT_OPT_FLOAT, "0.0", 0.0, 1e6, NULL, "standard deviation of the label noise"},
    {"eval_sequences", TTT_OPT_INT, "512", 1, 1e8, NULL, "sequences of the evaluation set"},
    {"eval_batch", TTT_OPT_INT, "128", 1, 1 << 20, NULL, "sequences per evaluation batch"},
    TTT_OPTION_END,
};

static void reg_config(const ttt_cfg_node *task, ttt_regression_config *c) {
    ttt_regression_config_default(c);
    c->dim = (int)ttt_cfg_int(task, "dim");
    c->n_points = (int)ttt_cfg_int(task, "points");
    c->noise_std = ttt_cfg_float(task, "noise");
    c->layout = TTT_REG_INTERLEAVED;
}

static ttt_seq_model_io reg_io(const ttt_regression_config *c) {
    return (ttt_seq_model_io){.in_dim = c->dim + 1, .out_dim = 1,
                              .seq_len = ttt_regression_seq_len(c)};
}

/* The parsed configuration of a point. */
typedef struct regression_cfg {
    ttt_regression_config data;
    int eval_sequences, eval_batch;
    ttt_trained_cfg trained;
} regression_cfg;

static ttt_status regression_parse(void *cfg, const ttt_cfg_node *root, ttt_cfg_node *sections,
                                   ttt_error *err) {
    regression_cfg *rc = cfg;
    const ttt_cfg_node *task = ttt_cfg_get(root, "task");
    ttt_regression_config c;
    reg_config(task, &c);
    rc->data = c;
    rc->eval_sequences = (int)ttt_cfg_int(task, "eval_sequences");
    rc->eval_batch = (int)ttt_cfg_int(task, "eval_batch");
    ttt_status s = ttt_regression_config_check(&c, err);
    if (s != TTT_OK) {
        char msg[TTT_ERROR_MSG_LEN];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return ttt_cfg_error(err, s, task, "task: %s", msg);
    }
    /* The fixed evaluation set is held whole (ttt_regression_batch_init per batch): per sequence
     * T tokens of d + 1 features, targets, masks and context counts, its n points (d + 1
     * floats each) and w (d floats), plus a double per token for the least-squares errors. */
    const double T = ttt_regression_seq_len(&c), d = c.dim, n = c.n_points;
    const double eval_bytes =
        (double)rc->eval_sequences * (4.0 * (T * (d + 3.0) + n * (d + 1.0) + d) + 8.0 * T);
    s = ttt_size_check(eval_bytes, "the regression evaluation set", err);
    if (s != TTT_OK) {
        char msg[TTT_ERROR_MSG_LEN];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return ttt_cfg_error(err, s, ttt_cfg_get(task, "eval_sequences"), "task: %s", msg);
    }
    ttt_seq_model_io io = reg_io(&c);
    return ttt_trained_parse(&rc->trained, root, sections, &io, err);
}

static long regression_work(const void *cfg) {
    return ((const regression_cfg *)cfg)->trained.train.steps;
}

typedef struct reg_data {
    ttt_regression_config cfg;
    ttt_rng rng;
    ttt_regression_batch batch;
    int n_eval;
    ttt_regression_batch *eval; /* (n_eval) fixed */
    double *ls_err;             /* (n) least-squares squared error per k, mean over eval set */
    double *mse;                /* (n) model squared error per k, accumulated over an eval */
    long *cnt;                  /* (n) */
} reg_data;

static ttt_seq_batch as_seq(const ttt_regression_batch *b) {
    return (ttt_seq_batch){.B = b->B, .T = b->T, .inputs = b->inputs, .targets = b->targets,
                           .mask = b->mask};
}

static ttt_status next(void *user, ttt_seq_batch *out, ttt_error *err) {
    reg_data *d = user;
    ttt_regression_fill(&d->batch, &d->cfg, &d->rng);
    *out = as_seq(&d->batch);
    return TTT_OK;
}

static void get_state(void *user, uint64_t *w) { memcpy(w, ((reg_data *)user)->rng.s, 32); }
static ttt_status set_state(void *user, const uint64_t *w, ttt_error *err) {
    memcpy(((reg_data *)user)->rng.s, w, 32);
    return TTT_OK;
}

static ttt_status eval_batch(void *user, int i, ttt_seq_batch *out, ttt_error *err) {
    *out = as_seq(&((reg_data *)user)->eval[i]);
    return TTT_OK;
}

/* Squared error per context size k; a new evaluation starts at batch 0, row 0. */
static void eval_observe(void *user, int i, int row0, const ttt_seq_batch *part,
                         const float *pred) {
    reg_data *d = user;
    const ttt_regression_batch *b = &d->eval[i];
    if (i == 0 && row0 == 0) {
        memset(d->mse, 0, (size_t)b->n * sizeof *d->mse);
        memset(d->cnt, 0, (size_t)b->n * sizeof *d->cnt);
    }
    for (int r = 0; r < part->B; r++)
        for (int t = 0; t < b->T; t++) {
            if (b->n_context[t] < 0) continue;
            const size_t at = (size_t)(row0 + r) * b->T + t;
            double e = (double)pred[(size_t)r * b->T + t] - b->targets[at];
            d->mse[b->n_context[t]] += e * e;
            d->cnt[b->n_context[t]]++;
        }
}

static void reg_data_free(reg_data *d) {
    ttt_regression_batch_free(&d->batch);
    for (int i = 0; d->eval && i < d->n_eval; i++) ttt_regression_batch_free(&d->eval[i]);
    free(d->eval);
    free(d->ls_err);
    free(d->mse);
    free(d->cnt);
}

static ttt_status regression_run(ttt_task_run *run, ttt_error *err) {
    const regression_cfg *rc = run->cfg;
    reg_data d;
    memset(&d, 0, sizeof d);
    d.cfg = rc->data;
    const int B = rc->trained.train.batch;
    const int n_seq = rc->eval_sequences;
    const int eb = rc->eval_batch;
    const int n = d.cfg.n_points;
    ttt_rng root;
    ttt_rng_seed(&root, run->seed);
    d.rng = ttt_rng_fork(&root, ttt_hash_str("regression/train"));
    ttt_rng er = ttt_rng_fork(&root, ttt_hash_str("regression/eval"));
    d.n_eval = (n_seq + eb - 1) / eb;
    d.eval = ttt_fault_calloc((size_t)d.n_eval, sizeof *d.eval);
    d.ls_err = ttt_fault_calloc((size_t)n, sizeof *d.ls_err);
    d.mse = ttt_fault_calloc((size_t)n, sizeof *d.mse);
    d.cnt = ttt_fault_calloc((size_t)n, sizeof *d.cnt);
    ttt_status s = d.eval && d.ls_err && d.mse && d.cnt
                       ? ttt_regression_batch_init(&d.batch, &d.cfg, B, err)
                       : ttt_error_set(err, TTT_ERR_NOMEM, "regression: out of memory");
    /* the fixed evaluation set and its least-squares errors */
    long *ls_cnt = ttt_fault_calloc((size_t)n, sizeof *ls_cnt);
    for (int i = 0; s == TTT_OK && i < d.n_eval; i++) {
        if ((s = ttt_train_check_stop(err)) != TTT_OK) break; /* docs/hardening.md "Signals" */
        int rows = n_seq - i * eb < eb ? n_seq - i * eb : eb;
        s = ttt_regression_batch_init(&d.eval[i], &d.cfg, rows, err);
        if (s != TTT_OK) break;
        ttt_regression_fill(&d.eval[i], &d.cfg, &er);
        const ttt_regression_batch *b = &d.eval[i];
        double *sq = ttt_fault_malloc((size_t)b->B * b->T * sizeof *sq);
        if (!sq || !ls_cnt) {
            free(sq);
            s = ttt_error_set(err, TTT_ERR_NOMEM, "regression: out of memory");
            break;
        }
        s = ttt_regression_ls_errors(sq, b, err);
        for (int r = 0; s == TTT_OK && r < b->B; r++)
            for (int t = 0; t < b->T; t++)
                if (b->n_context[t] >= 0) {
                    d.ls_err[b->n_context[t]] += sq[(size_t)r * b->T + t];
                    ls_cnt[b->n_context[t]]++;
                }
        free(sq);
    }
    for (int k = 0; s == TTT_OK && k < n; k++) d.ls_err[k] /= ls_cnt[k] ? ls_cnt[k] : 1;
    free(ls_cnt);
    if (s != TTT_OK) {
        reg_data_free(&d);
        return s;
    }
    ttt_train_data td = {
        .user = &d,
        .next = next,
        .n_state = 4,
        .get_state = get_state,
        .set_state = set_state,
        .n_eval = d.n_eval,
        .eval_batch = eval_batch,
        .eval_observe = eval_observe,
    };
    ttt_trained tr;
    s = ttt_train_point(run, &rc->trained, &td, &tr, err);
    if (s == TTT_OK && !tr.result.stopped) {
        /* the error curve of the final evaluation, next to least squares */
        double small = 0; /* model error at k ≥ d + 1 (where least squares is exact) */
        long nsmall = 0;
        for (int k = 0; k < n; k++) {
            double mse = d.cnt[k] ? d.mse[k] / d.cnt[k] : NAN;
            for (int which = 0; which < 2; which++) {
                ttt_record r;
                ttt_record_clear(&r);
                ttt_record_str(&r, "series", which ? "least squares"
                                             : run->label && run->label[0] ? run->label
                                                                          : tr.mixer);
                ttt_record_num(&r, "point", run->point);
                ttt_record_str(&r, "kind", "curve");
                ttt_record_num(&r, "k", k);
                ttt_record_num(&r, "mse", which ? d.ls_err[k] : mse);
                ttt_results_add(run->results, &r, 0);
            }
            if (k > d.cfg.dim) {
                small += mse;
                nsmall++;
            }
        }
        ttt_record r;
        ttt_trained_record(run, &tr, &r);
        ttt_record_num(&r, "mse_k0", d.cnt[0] ? d.mse[0] / d.cnt[0] : NAN);
        /* k = d exists only when a sequence has more than d points */
        const int kd = d.cfg.dim;
        ttt_record_num(&r, "mse_k_d", kd < n && d.cnt[kd] ? d.mse[kd] / d.cnt[kd] : NAN);
        ttt_record_num(&r, "mse_k_gt_d", nsmall ? small / nsmall : NAN);
        ttt_record_num(&r, "ls_k_d", d.ls_err[d.cfg.dim < n ? d.cfg.dim : n - 1]);
        ttt_results_add(run->results, &r, 1);
    }
    if (s == TTT_OK) ttt_trained_free(&tr);
    reg_data_free(&d);
    return s;
}

static void regression_charts(ttt_results *res, const void *cfg) {
    (void)cfg;
    ttt_chart c = ttt_chart_make("error_vs_context",
                                 "Squared error vs in-context examples (final model)", "k", "mse",
                                 "series", "(x, y) pairs in context k", "mean squared error");
    c.y_from_zero = 1;
    ttt_results_add_chart_filtered(res, &c, "kind", "curve");
    ttt_chart l = ttt_chart_make("train_loss", "Training loss (MSE)", "step", "loss", "series",
                                 "training step", "mean squared error");
    ttt_results_add_chart_filtered(res, &l, "kind", "train");
    ttt_trained_charts(res, "mean squared error");
    ttt_results_set_main(res, "eval_loss", "");
}

static const char *const regression_columns[] = {"series", "steps", "eval_loss", "mse_k0",
                                                 "mse_k_d", "ls_k_d", "mse_k_gt_d", "seconds",
                                                 NULL};

static const ttt_seq_model_config *regression_model(const void *cfg) {
    return &((const regression_cfg *)cfg)->trained.model;
}

static const ttt_trained_cfg *regression_trained(const void *cfg) {
    return &((const regression_cfg *)cfg)->trained;
}

/* The `task:` section from what regression_parse read. */
static ttt_status regression_section(const void *cfg, const ttt_cfg_node *given,
                                     ttt_cfg_node **out, ttt_error *err) {
    const regression_cfg *c = cfg;
    const ttt_task_value v[] = {
        {.key = "dim", .number = c->data.dim},
        {.key = "points", .number = c->data.n_points},
        {.key = "noise", .number = c->data.noise_std},
        {.key = "eval_sequences", .number = c->eval_sequences},
        {.key = "eval_batch", .number = c->eval_batch},
    };
    return ttt_task_section(regression_options, given, v, (int)(sizeof v / sizeof *v), out,
                            err);
}

const ttt_task ttt_task_regression = {
    .name = "regression",
    .help = "in-context linear regression, trained: error vs context size against least squares",
    .options = regression_options,
    .cfg_size = sizeof(regression_cfg),
    .parse = regression_parse,
    .section = regression_section,
    .work = regression_work,
    .run = regression_run,
    .model = regression_model,
    .trained = regression_trained,
    .columns = regression_columns,
    .charts = regression_charts,
    .tiny = "task: {kind: regression, dim: 2, points: 4, eval_sequences: 8, eval_batch: 8}\n"
            "model: {d_model: 8, layers: 1, heads: 1, mlp: 0}\n"
            "layer: {preset: deltanet}\n"
            "train: {steps: 3, batch: 4, log_every: 1, eval_every: 0, checkpoint_every: 0}\n",
};
