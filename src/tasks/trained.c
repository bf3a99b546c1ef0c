/* The glue every trained task shares (see trained.h). */
#include "trained.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "export.h"

/* ------------------------------------------------------------------------------------------ */
/* Trained tasks */

/* The point's `model:`, `layer:` and `train:` sections (the plan's check of the top level gives
 * each, empty when the experiment leaves it out), read into *out; their renderings go into
 * `sections` (ttt_task.parse). */
ttt_status ttt_trained_parse(ttt_trained_cfg *out, const ttt_cfg_node *root,
                             ttt_cfg_node *sections, const ttt_seq_model_io *io, ttt_error *err) {
    const ttt_cfg_node *model = ttt_cfg_get(root, "model"), *layer = ttt_cfg_get(root, "layer");
    const ttt_cfg_node *train = ttt_cfg_get(root, "train");
    TTT_ASSERT(model && layer && train); /* TTT_OPT_MAP options of the top level */
    ttt_cfg_node *model_r = NULL, *layer_r = NULL, *train_r = NULL;
    TTT_TRY(ttt_seq_model_parse_section(model, layer, io, &out->model, &model_r, &layer_r, err));
    ttt_cfg_map_set(sections, "model", model_r);
    ttt_cfg_map_set(sections, "layer", layer_r);
    TTT_TRY(ttt_train_config_parse_section(train, &out->train, &train_r, err));
    const ttt_cfg_node *init_node = ttt_cfg_get(train_r, "init_from");
    const char *init = ttt_cfg_str(train_r, "init_from"); /* NULL: the default, none */
    if (init && init[0] && strlen(init) >= sizeof out->init_from) {
        ttt_cfg_error(err, TTT_ERR_CONFIG, init_node,
                      "train.init_from: the path is longer than %zu bytes",
                      sizeof out->init_from - 1);
        ttt_cfg_free(train_r);
        return TTT_ERR_CONFIG;
    }
    if (init && init[0]) {
        snprintf(out->init_from, sizeof out->init_from, "%s", init);
        ttt_cfg_where(init_node, out->init_from_where, sizeof out->init_from_where);
    }
    ttt_cfg_map_set(sections, "train", train_r);
    const ttt_seq_model_config mc = out->model;
    const ttt_train_config tc = out->train;
    ttt_trained_estimate(&mc, &tc, io->seq_len, &out->memory);
    /* the host's memory is checked for a step on the host; a device's is the device's */
    if (!ttt_device_is_host(tc.device)) return TTT_OK;
    char what[200];
    snprintf(what, sizeof what,
             "a training step (batch %d, seq_len %d, d_model %d, %d layers, %.0f parameters with "
             "gradients and AdamW state, estimated)",
             tc.batch, io->seq_len, mc.d_model, mc.n_layers, ttt_seq_model_param_bound(&mc));
    ttt_status s = ttt_size_check(out->memory.total, what, err);
    if (s != TTT_OK) return ttt_cfg_error(err, s, train, "%s", err->msg);
    return TTT_OK;
}

void ttt_trained_estimate(const ttt_seq_model_config *mc, const ttt_train_config *tc,
                          int seq_len, ttt_train_estimate *e) {
    /* Refuse before allocating: a step's tape keeps, per token and block, a few dozen vectors of
     * width d_model (projections, convolution, norms, MLP) and, per head, the fast-weight state
     * at chunk boundaries — estimated as 64·d_model + 4·heads·head_dim² floats. An estimate, but
     * the right order: a run this refuses could not have finished a step. */
    const double wide = 64.0 * mc->d_model;
    const double state = 4.0 * mc->n_heads * (double)mc->head_dim * mc->head_dim;
    /* The parameters cost their values, gradients and AdamW's two moments, plus one gradient
     * copy per further data-parallel shard (src/train/train_shards.c); with a large vocabulary the
     * embedding and head (vocab × d_model each) dominate. */
    const double params = ttt_seq_model_param_bound(mc);
    const double shards = tc->shards > 1 ? tc->shards : 1;
    const double tokens = (double)tc->batch * seq_len * mc->n_layers;
    if (ttt_device_is_host(tc->device)) {
        /* Each shard's arena grows in blocks of TTT_TRAIN_ARENA_BLOCK bytes (a larger tensor in
         * a block of its own) that it keeps across steps (src/train/train_shards.c): the step, the
         * blocks' unused tails (counted as 25 % of the step) and at most one block more per
         * shard. */
        e->params = 16.0 * params;
        e->step = 1.25 * 4.0 * (wide + state) * tokens;
        e->other = shards * (double)TTT_TRAIN_ARENA_BLOCK + 4.0 * params * (shards - 1.0);
    } else {
        /* On the device (docs/training.md "Device and precision"), the same terms: fp32 master
         * weights, one gradient and AdamW's two moments (16 bytes a parameter), plus under
         * bfloat16 the weights' bf16 twin that the products read (2 bytes more); the step's
         * activations and tape as on the host with the 25 % slack, in float32 under either
         * dtype (docs/gpu.md "bfloat16 training": the tape keeps fp32 tensors; a product's
         * other operands are rounded to bf16 into scratch that lives only for that product).
         * That scratch is `other` under bfloat16: at most three operands of the widest product
         * (dC, A and B of a backward), batch × seq_len rows of the widest of the MLP's hidden
         * layer, the q|k|v projection and the logits, at 2 bytes. One gradient: the shards are
         * the host's parallelism, and there are no arena blocks or shard copies. */
        const int bf16 = tc->dtype == TTT_DTYPE_BF16;
        double widest = 3.0 * mc->d_model;
        if ((double)mc->mlp * mc->d_model > widest) widest = (double)mc->mlp * mc->d_model;
        if (mc->io.vocab > widest) widest = mc->io.vocab;
        if (mc->io.out_dim > widest) widest = mc->io.out_dim;
        e->params = (bf16 ? 18.0 : 16.0) * params;
        e->step = 1.25 * 4.0 * (wide + state) * tokens;
        e->other = bf16 ? 2.0 * 3.0 * (double)tc->batch * seq_len * widest : 0;
    }
    e->total = e->params + e->step + e->other;
}

ttt_status ttt_train_point(ttt_task_run *run, const ttt_trained_cfg *cfg, ttt_train_data *data,
                           ttt_trained *out, ttt_error *err) {
    memset(out, 0, sizeof *out);
    out->train = cfg->train;
    ttt_seq_model_describe(&cfg->model, out->mixer, sizeof out->mixer);
    TTT_TRY(ttt_seq_model_init(&out->model, &cfg->model, run->seed, err));
    if (cfg->init_from[0]) {
        /* before training, so a checkpoint of this run (a resume) still replaces it */
        ttt_status s = ttt_export_read(&out->model, cfg->init_from, err);
        if (s != TTT_OK) {
            char msg[TTT_ERROR_MSG_LEN];
            snprintf(msg, sizeof msg, "%s", err->msg);
            ttt_error_set(err, s, "%s: train.init_from: %s", cfg->init_from_where, msg);
            ttt_trained_free(out);
            return s;
        }
    }

    char ckpt[4096], stream[4096 + 16];
    const char *dir = run->run_dir;
    if (dir) {
        snprintf(ckpt, sizeof ckpt, "%s/checkpoints/point%d", dir, run->point);
        /* the point's record journal, next to its checkpoints (a resume cuts it back to the
         * checkpoint's length); under MPI only the rank that writes the checkpoints writes it */
        snprintf(stream, sizeof stream, "%s/records.jsonl", ckpt);
        ttt_status s = ttt_mkdirs(ckpt, err);
        if (s != TTT_OK) {
            ttt_trained_free(out);
            return s;
        }
    }
    ttt_train_run tr_run = {
        .ckpt_dir = dir ? ckpt : NULL,
        .config_hash = run->config_hash ? run->config_hash : "",
        .stream_path = dir ? stream : NULL,
        .results = run->results,
        .progress = run->progress,
        .work_done = run->work_done,
        .series = run->label && run->label[0] ? run->label : out->mixer,
        .point = run->point,
        .mixer = out->mixer,
        .comm = run->comm,
    };
    ttt_status s = ttt_train(&out->model, &out->train, data, &tr_run, &out->result, err);
    if (s != TTT_OK) ttt_trained_free(out);
    return s;
}

void ttt_trained_free(ttt_trained *t) { ttt_seq_model_free(&t->model); }

void ttt_trained_record(const ttt_task_run *run, const ttt_trained *t, ttt_record *r) {
    ttt_record_clear(r);
    ttt_record_str(r, "series", run->label && run->label[0] ? run->label : t->mixer);
    ttt_record_num(r, "point", run->point);
    ttt_record_str(r, "mixer", t->mixer);
    ttt_record_str(r, "kind", "summary");
    ttt_record_num(r, "lr", t->train.adamw.lr);
    ttt_record_num(r, "steps", (double)t->result.step);
    ttt_record_num(r, "params", (double)ttt_params_numel(&t->model.params));
    ttt_record_num(r, "train_loss", t->result.train_loss);
    ttt_record_num(r, "eval_loss", t->result.eval_loss);
    ttt_record_num(r, "seconds", t->result.seconds);
    ttt_record_num(r, "tokens_per_s", t->result.tokens_per_s);
    ttt_record_num(r, "resumed_from", (double)t->result.resumed_from);
    if (!ttt_device_is_host(t->train.device)) /* the device pool's high-water mark (train.h) */
        ttt_record_num(r, "gpu_peak_mb", (double)t->result.device_peak / (1024.0 * 1024.0));
}

ttt_status ttt_trained_load(ttt_seq_model *m, const ttt_seq_model_config *cfg,
                            const char *run_dir, int point, ttt_error *err) {
    TTT_TRY(ttt_seq_model_init(m, cfg, 0, err));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/checkpoints/point%d", run_dir, point);
    int64_t step = 0;
    ttt_status s = ttt_checkpoint_load(dir, &m->params, NULL, &step, NULL, -1, NULL, NULL, err);
    if (s == TTT_ERR_IO)
        s = ttt_error_set(err, TTT_ERR_IO,
                          "no checkpoint in %s: point %d of %s has not been trained (run it "
                          "first)",
                          dir, point, run_dir);
    if (s != TTT_OK) ttt_seq_model_free(m);
    return s;
}

/* Index of the next token: arg-max at temperature 0, else a draw from the tempered softmax over
 * the top_k largest logits (ties in index order). logits: (V); order: (V) scratch. */
static int draw(const float *logits, int V, double temperature, int top_k, int *order,
                ttt_rng *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    const int k = top_k > 0 && top_k < V ? top_k : V;
    /* the k largest by selection (k is small in practice; V for all) */
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < k; i++) {
        int m = i;
        for (int j = i + 1; j < V; j++)
            if (logits[order[j]] > logits[order[m]]) m = j;
        const int t = order[i];
        order[i] = order[m];
        order[m] = t;
    }
    double z = 0.0;
    for (int i = 0; i < k; i++) z += exp(((double)logits[order[i]] - logits[best]) / temperature);
    double u = ttt_rng_uniform(rng) * z;
    for (int i = 0; i < k; i++) {
        u -= exp(((double)logits[order[i]] - logits[best]) / temperature);
        if (u < 0) return order[i];
    }
    return order[k - 1];
}

/* One forward of ttt_trained_generate, under ttt_arena_run. */
typedef struct sample_forward {
    ttt_ctx *ctx;
    const ttt_seq_model *m;
    const ttt_seq_batch *b;
    ttt_tensor *logits; /* (T, V) */
} sample_forward;

static ttt_status sample_forward_work(void *arg, ttt_error *err) {
    sample_forward *w = arg;
    return ttt_seq_model_forward(w->ctx, w->m, NULL, w->b, &w->logits, err);
}

ttt_status ttt_trained_generate(int *out, const ttt_trained_cfg *cfg, const char *run_dir,
                                int point, const int *prompt, int n_prompt, int n_new,
                                int window, double temperature, int top_k, uint64_t seed,
                                ttt_error *err) {
    TTT_ASSERT(n_prompt >= 1 && n_new >= 0 && window >= 1);
    const int V = cfg->model.io.vocab;
    if (V <= 0) return ttt_error_set(err, TTT_ERR_ARG, "sample: the model has no vocabulary");
    ttt_seq_model m;
    TTT_TRY(ttt_trained_load(&m, &cfg->model, run_dir, point, err));
    ttt_status s = TTT_OK;
    const size_t total = (size_t)n_prompt + (size_t)n_new;
    int *seq = malloc(total * sizeof *seq), *order = malloc((size_t)V * sizeof *order);
    if (s == TTT_OK && (!seq || !order))
        s = ttt_error_set(err, TTT_ERR_NOMEM, "sample: out of memory for %zu tokens", total);
    if (s != TTT_OK) {
        free(seq), free(order);
        ttt_seq_model_free(&m);
        return s;
    }
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    ttt_rng rng;
    ttt_rng_seed(&rng, seed);
    ttt_arena a;
    ttt_arena_init(&a, 0);
    ttt_ctx ctx = {.arena = &a};
    size_t len = (size_t)n_prompt;
    for (int i = 0; i < n_new && s == TTT_OK; i++) {
        const size_t T = len < (size_t)window ? len : (size_t)window;
        ttt_seq_batch b = {.B = 1, .T = (int)T, .tokens = seq + (len - T)};
        sample_forward w = {.ctx = &ctx, .m = &m, .b = &b};
        /* armed: a token's tensors that cannot be had end in TTT_ERR_NOMEM */
        s = ttt_arena_run(&a, sample_forward_work, &w, "sample: the model's forward", err);
        if (s != TTT_OK) break;
        const ttt_tensor *logits = w.logits; /* (T, V) */
        const int next = draw(logits->data + (T - 1) * (size_t)V, V, temperature, top_k, order,
                              &rng);
        seq[len++] = next;
        out[i] = next;
        ttt_arena_reset(&a);
    }
    ttt_arena_free(&a);
    free(seq), free(order);
    ttt_seq_model_free(&m);
    return s;
}

void ttt_trained_charts(ttt_results *res, const char *loss_label) {
    ttt_chart e = ttt_chart_make("eval_loss", "Evaluation loss", "step", "eval_loss", "series",
                                 "training step", loss_label);
    ttt_results_add_chart_filtered(res, &e, "kind", "eval");
    ttt_chart g = ttt_chart_make("grad_norm", "Gradient norm (mean over the "
                                 "logging window)", "step", "grad_norm", "series",
                                 "training step", "global L2 norm");
    ttt_results_add_chart_filtered(res, &g, "kind", "train");
    ttt_chart l = ttt_chart_make("lr", "Learning rate (warmup and decay schedule)", "step", "lr",
                                 "series", "training step", "AdamW learning rate");
    l.log_y = TTT_LOG_Y_OFF; /* the schedule's shape reads best on its own scale */
    ttt_results_add_chart_filtered(res, &l, "kind", "train");
}
