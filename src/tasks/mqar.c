/* The `mqar` task (docs/math.md §7): multi-query associative recall, trained end to end.
 *
 * A fixed training set and a fixed test set are drawn from the seed (data.h, the Zoology
 * generator); training visits the training set in epochs of random order (the sampler state is
 * checkpointed). Loss and accuracy count the query positions only (the only labelled ones). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fault.h"
#include "task.h"
#include "trained.h"

static const ttt_option mqar_options[] = {
    {"vocab", TTT_OPT_INT, "256", 4, 1 << 20, NULL, "vocabulary V (keys from [1, V/2), values "
                                                     "from [V/2, V))"},
    {"seq_len", TTT_OPT_INT, "128", 4, 1 << 20, NULL, "sequence length L"},
    {"pairs", TTT_OPT_INT, "8", 1, 1 << 20, NULL, "key/value pairs N per sequence"},
    {"random_filler", TTT_OPT_BOOL, "false", TTT_NO_RANGE, NULL,
     "fill the gaps with random tokens instead of 0"},
    {"power_a", TTT_OPT_FLOAT, "0.01", 1e-6, 1.0, NULL, "gap weights g^(power_a - 1)"},
    {"train_examples", TTT_OPT_INT, "20000", 1, 1e9, NULL, "size of the training set"},
    {"test_examples", TTT_OPT_INT, "1000", 1, 1e9, NULL, "size of the test set"},
    {"eval_batch", TTT_OPT_INT, "250", 1, 1 << 20, NULL, "sequences per evaluation batch"},
    TTT_OPTION_END,
};

static void mqar_config(const ttt_cfg_node *task, ttt_mqar_config *c) {
    ttt_mqar_config_default(c);
    c->vocab = (int)ttt_cfg_int(task, "vocab");
    c->seq_len = (int)ttt_cfg_int(task, "seq_len");
    c->n_pairs = (int)ttt_cfg_int(task, "pairs");
    c->random_filler = ttt_cfg_bool(task, "random_filler");
    c->power_a = ttt_cfg_float(task, "power_a");
}

/* The parsed configuration of a point. */
typedef struct mqar_cfg {
    ttt_mqar_config data;
    int train_examples, test_examples, eval_batch;
    ttt_trained_cfg trained;
} mqar_cfg;

static ttt_status mqar_parse(void *cfg, const ttt_cfg_node *root, ttt_cfg_node *sections,
                             ttt_error *err) {
    mqar_cfg *mc = cfg;
    const ttt_cfg_node *task = ttt_cfg_get(root, "task");
    ttt_mqar_config c;
    mqar_config(task, &c);
    mc->data = c;
    mc->train_examples = (int)ttt_cfg_int(task, "train_examples");
    mc->test_examples = (int)ttt_cfg_int(task, "test_examples");
    mc->eval_batch = (int)ttt_cfg_int(task, "eval_batch");
    ttt_status s = ttt_mqar_config_check(&c, err);
    if (s != TTT_OK) {
        char msg[TTT_ERROR_MSG_LEN];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return ttt_cfg_error(err, s, task, "task: %s", msg);
    }
    /* the training and test sets are held in memory: tokens and labels, an int each */
    const double bytes = 8.0 * c.seq_len *
                         ((double)ttt_cfg_int(task, "train_examples") +
                          (double)ttt_cfg_int(task, "test_examples"));
    s = ttt_size_check(bytes, "the mqar training and test sets", err);
    if (s != TTT_OK) {
        char msg[TTT_ERROR_MSG_LEN];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return ttt_cfg_error(err, s, ttt_cfg_get(task, "train_examples"), "task: %s", msg);
    }
    ttt_seq_model_io io = {.vocab = c.vocab, .seq_len = c.seq_len};
    return ttt_trained_parse(&mc->trained, root, sections, &io, err);
}

static long mqar_work(const void *cfg) { return ((const mqar_cfg *)cfg)->trained.train.steps; }

typedef struct mqar_data {
    ttt_token_set train, test;
    ttt_sampler sampler;
    ttt_batch batch, eval;
    int *idx;       /* (batch) */
    int eval_batch; /* rows per evaluation batch */
} mqar_data;

static ttt_status next(void *user, ttt_seq_batch *out, ttt_error *err) {
    mqar_data *d = user;
    ttt_sampler_next(&d->sampler, d->idx, d->batch.B);
    ttt_token_set_gather(&d->batch, &d->train, d->idx);
    *out = (ttt_seq_batch){.B = d->batch.B, .T = d->batch.L, .tokens = d->batch.tokens,
                           .labels = d->batch.labels};
    return TTT_OK;
}

static void get_state(void *user, uint64_t *w) { ttt_sampler_get_state(&((mqar_data *)user)->sampler, w); }
static ttt_status set_state(void *user, const uint64_t *w, ttt_error *err) {
    return ttt_sampler_set_state(&((mqar_data *)user)->sampler, w, err);
}

static ttt_status eval_batch(void *user, int i, ttt_seq_batch *out, ttt_error *err) {
    mqar_data *d = user;
    const int r0 = i * d->eval_batch;
    const int n = d->test.n - r0 < d->eval_batch ? d->test.n - r0 : d->eval_batch;
    const size_t off = (size_t)r0 * d->test.L;
    *out = (ttt_seq_batch){.B = n, .T = d->test.L, .tokens = d->test.tokens + off,
                           .labels = d->test.labels + off};
    return TTT_OK;
}

static void mqar_data_free(mqar_data *d) {
    ttt_token_set_free(&d->train);
    ttt_token_set_free(&d->test);
    ttt_sampler_free(&d->sampler);
    ttt_batch_free(&d->batch);
    free(d->idx);
}

static ttt_status mqar_run(ttt_task_run *run, ttt_error *err) {
    const mqar_cfg *mc = run->cfg;
    const ttt_mqar_config c = mc->data;
    const int B = mc->trained.train.batch;
    mqar_data d;
    memset(&d, 0, sizeof d);
    d.eval_batch = mc->eval_batch;
    ttt_rng root;
    ttt_rng_seed(&root, run->seed);
    ttt_rng data_root = ttt_rng_fork(&root, ttt_hash_str("mqar/data"));
    ttt_rng samp = ttt_rng_fork(&root, ttt_hash_str("mqar/sampler"));
    ttt_status s = ttt_mqar_make_split(&d.train, &d.test, &c, mc->train_examples,
                                       mc->test_examples, &data_root, err);
    if (s == TTT_OK) s = ttt_sampler_init(&d.sampler, d.train.n, &samp, err);
    if (s == TTT_OK) s = ttt_batch_init(&d.batch, B, c.seq_len, err);
    if (s == TTT_OK && !(d.idx = ttt_fault_malloc((size_t)B * sizeof *d.idx)))
        s = ttt_error_set(err, TTT_ERR_NOMEM, "mqar: out of memory");
    if (s != TTT_OK) {
        mqar_data_free(&d);
        return s;
    }
    ttt_train_data td = {
        .user = &d,
        .next = next,
        .n_state = TTT_SAMPLER_WORDS,
        .get_state = get_state,
        .set_state = set_state,
        .n_eval = (d.test.n + d.eval_batch - 1) / d.eval_batch,
        .eval_batch = eval_batch,
    };
    ttt_trained tr;
    s = ttt_train_point(run, &mc->trained, &td, &tr, err);
    if (s == TTT_OK && !tr.result.stopped) {
        ttt_record r;
        ttt_trained_record(run, &tr, &r);
        ttt_record_num(&r, "eval_accuracy", tr.result.eval_accuracy);
        ttt_record_num(&r, "V", c.vocab);
        ttt_record_num(&r, "L", c.seq_len);
        ttt_record_num(&r, "N", c.n_pairs);
        ttt_results_add(run->results, &r, 1);
    }
    if (s == TTT_OK) ttt_trained_free(&tr);
    mqar_data_free(&d);
    return s;
}

static void mqar_charts(ttt_results *res, const void *cfg) {
    (void)cfg;
    ttt_chart c = ttt_chart_make("eval_accuracy", "MQAR accuracy at the query positions (test set)",
                                 "step", "eval_accuracy", "series", "training step", "accuracy");
    c.y_from_zero = 1;
    c.log_y = TTT_LOG_Y_OFF; /* a fraction: its linear scale is the one to read */
    ttt_results_add_chart_filtered(res, &c, "kind", "eval");
    ttt_chart l = ttt_chart_make("train_loss", "Training loss (nats, query positions)", "step",
                                 "loss", "series", "training step", "cross-entropy (nats)");
    ttt_results_add_chart_filtered(res, &l, "kind", "train");
    ttt_trained_charts(res, "cross-entropy (nats)");
    ttt_results_set_main(res, "eval_accuracy", "");
}

static const char *const mqar_columns[] = {"series", "steps", "eval_accuracy", "eval_loss",
                                           "train_loss", "params", "seconds", NULL};

static const ttt_seq_model_config *mqar_model(const void *cfg) {
    return &((const mqar_cfg *)cfg)->trained.model;
}

static const ttt_trained_cfg *mqar_trained(const void *cfg) {
    return &((const mqar_cfg *)cfg)->trained;
}

/* The `task:` section from what mqar_parse read. */
static ttt_status mqar_section(const void *cfg, const ttt_cfg_node *given, ttt_cfg_node **out,
                               ttt_error *err) {
    const mqar_cfg *c = cfg;
    const ttt_task_value v[] = {
        {.key = "vocab", .number = c->data.vocab},
        {.key = "seq_len", .number = c->data.seq_len},
        {.key = "pairs", .number = c->data.n_pairs},
        {.key = "random_filler", .number = c->data.random_filler},
        {.key = "power_a", .number = c->data.power_a},
        {.key = "train_examples", .number = c->train_examples},
        {.key = "test_examples", .number = c->test_examples},
        {.key = "eval_batch", .number = c->eval_batch},
    };
    return ttt_task_section(mqar_options, given, v, (int)(sizeof v / sizeof *v), out, err);
}

const ttt_task ttt_task_mqar = {
    .name = "mqar",
    .help = "multi-query associative recall (Zoology), trained: accuracy at the query positions",
    .options = mqar_options,
    .cfg_size = sizeof(mqar_cfg),
    .parse = mqar_parse,
    .section = mqar_section,
    .work = mqar_work,
    .run = mqar_run,
    .model = mqar_model,
    .trained = mqar_trained,
    .columns = mqar_columns,
    .charts = mqar_charts,
    .tiny = "task: {kind: mqar, vocab: 16, seq_len: 16, pairs: 2, train_examples: 32,\n"
            "       test_examples: 8, eval_batch: 8}\n"
            "model: {d_model: 8, layers: 1, heads: 1, mlp: 0}\n"
            "layer: {preset: deltanet}\n"
            "train: {steps: 3, batch: 4, log_every: 1, eval_every: 0, checkpoint_every: 0}\n",
};
