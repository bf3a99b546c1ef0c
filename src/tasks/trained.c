/* The glue every trained task shares (see trained.h). */
#include "trained.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

/* ------------------------------------------------------------------------------------------ */
/* Trained tasks */

static ttt_cfg_node *section(ttt_cfg_node *root, const char *key) {
    ttt_cfg_node *n = (ttt_cfg_node *)ttt_cfg_get(root, key);
    if (!n) {
        n = ttt_cfg_new_map(root);
        ttt_cfg_map_set(root, key, n);
    }
    return n;
}

ttt_status ttt_trained_parse(ttt_trained_cfg *out, ttt_cfg_node *root,
                             const ttt_seq_model_io *io, ttt_error *err) {
    TTT_TRY(ttt_seq_model_parse(section(root, "model"), section(root, "layer"), io, &out->model,
                                err));
    TTT_TRY(ttt_train_config_parse(section(root, "train"), &out->train, err));
    const ttt_seq_model_config mc = out->model;
    const ttt_train_config tc = out->train;
    /* Refuse before allocating: a step's tape keeps, per token and block, a few dozen vectors of
     * width d_model (projections, convolution, norms, MLP) and, per head, the fast-weight state
     * at chunk boundaries — estimated as 64·d_model + 4·heads·head_dim² floats. An estimate, but
     * the right order: a run this refuses could not have finished a step. */
    const double per_token = 64.0 * mc.d_model + 4.0 * mc.n_heads * (double)mc.head_dim * mc.head_dim;
    /* The parameters cost their values, gradients and AdamW's two moments, plus one gradient
     * copy per further data-parallel shard (src/train/train.c); with a large vocabulary the
     * embedding and head (vocab × d_model each) dominate. */
    const double params = ttt_seq_model_param_bound(&mc);
    const double shards = tc.shards > 1 ? tc.shards : 1;
    /* Each shard's arena starts as one block of TTT_TRAIN_ARENA_BLOCK bytes and is rebuilt
     * after a step as one block of the step's peak + 25 % (src/train/train.c), so the arenas
     * hold at most the first blocks plus 1.25 times the steps. */
    const double step = 4.0 * per_token * (double)tc.batch * io->seq_len * mc.n_layers;
    const double bytes = shards * (double)TTT_TRAIN_ARENA_BLOCK + 1.25 * step +
                         4.0 * params * (3.0 + shards);
    char what[200];
    snprintf(what, sizeof what,
             "a training step (batch %d, seq_len %d, d_model %d, %d layers, %.0f parameters with "
             "gradients and AdamW state, estimated)",
             tc.batch, io->seq_len, mc.d_model, mc.n_layers, params);
    ttt_status s = ttt_size_check(bytes, what, err);
    if (s != TTT_OK) return ttt_cfg_error(err, s, ttt_cfg_get(root, "train"), "%s", err->msg);
    return TTT_OK;
}

ttt_status ttt_train_point(ttt_task_run *run, const ttt_trained_cfg *cfg, ttt_train_data *data,
                           ttt_trained *out, ttt_error *err) {
    memset(out, 0, sizeof *out);
    out->train = cfg->train;
    ttt_seq_model_describe(&cfg->model, out->mixer, sizeof out->mixer);
    TTT_TRY(ttt_seq_model_init(&out->model, &cfg->model, run->seed, err));

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
}
