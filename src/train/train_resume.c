/* Checkpoints of a training run: what a resumed run needs besides the weights, written and read
 * back (checkpoint.h for the file). */
#include "train_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint.h"

/* What a resumed run needs besides the weights: the metrics window in progress, the last train
 * loss, the wall clock and tokens so far, and how much of the journal the checkpoint has seen. */
ttt_status ttt_train_save(ttt_trainer *t, long step, const ttt_adamw *opt,
                          const ttt_train_window *w, const ttt_train_result *res, double elapsed,
                          long tokens, ttt_error *err) {
    if (!t->run->ckpt_dir) return TTT_OK;
    const ttt_comm *comm = t->run->comm;
    if (comm && comm->rank != 0) return TTT_OK; /* one writer: every rank holds the same state */
    uint64_t words[64] = {0};
    TTT_ASSERT(t->data->n_state <= 64);
    if (t->have_pre) /* the state of the step, not of the batch drawn ahead of it */
        memcpy(words, t->pre_words, sizeof words);
    else if (t->data->n_state)
        t->data->get_state(t->data->user, words);
    long long bytes = 0;
    ttt_status s = ttt_train_stream_sync(t, &bytes, err);
    char win[256], loss[64], secs[64], tok[32], rb[32];
    snprintf(win, sizeof win, "%ld %ld %a %a %ld", w->st.count, w->st.correct, w->st.loss_sum,
             w->grad_norm_sum, w->steps);
    snprintf(loss, sizeof loss, "%a", res->train_loss);
    snprintf(secs, sizeof secs, "%a", elapsed);
    snprintf(tok, sizeof tok, "%ld", tokens);
    snprintf(rb, sizeof rb, "%lld", bytes);
    /* a device run's weights and moments come down first: the file is the host's */
    if (s == TTT_OK && t->dev)
        s = ttt_train_dev_download(t->dev, &t->m->params, (ttt_adamw *)opt, err);
    const char *meta[] = {"window", win, "train_loss", loss, "seconds", secs,
                          "tokens", tok, "records_bytes", rb};
    if (s == TTT_OK)
        s = ttt_checkpoint_save(t->run->ckpt_dir, &t->m->params, opt, step, words,
                                t->data->n_state, t->run->config_hash, meta, 5, err);
    if (s != TTT_OK) ttt_error_prefix(err, "step %ld: saving a checkpoint", step);
    return s;
}

/* Resume from the folder's checkpoint: TTT_OK with *step = −1 when there is none (the journal
 * is then emptied). */
ttt_status ttt_train_resume(ttt_trainer *t, ttt_adamw *opt, long *step, ttt_train_window *w,
                            ttt_train_result *res, double *elapsed, long *tokens,
                            ttt_error *err) {
    *step = -1;
    if (!t->run->ckpt_dir) return TTT_OK;
    uint64_t words[64] = {0};
    int64_t st = 0;
    ttt_checkpoint_info info;
    ttt_status s = ttt_checkpoint_load(t->run->ckpt_dir, &t->m->params, opt, &st, words,
                                       t->data->n_state, t->run->config_hash, &info, err);
    if (s == TTT_ERR_IO) { /* no checkpoint: a fresh start */
        ttt_error_clear(err);
        return ttt_train_stream_replay(t, 0, err);
    }
    if (s == TTT_ERR_CONFIG || s == TTT_ERR_SHAPE) {
        ttt_error_prefix(err, "cannot resume");
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n,
                 " (the run folder holds a run of another configuration: run into another "
                 "folder with --out, or delete %s to start over)",
                 t->run->ckpt_dir);
        return s;
    }
    TTT_TRY(s);
    if (info.fell_back) {
        fprintf(stderr, "ttt: warning: %s\n", info.warning);
        res->fell_back = 1;
    }
    if (t->data->n_state) TTT_TRY(t->data->set_state(t->data->user, words, err));
    char buf[256];
    TTT_TRY(ttt_checkpoint_read_meta(info.path, "window", buf, sizeof buf, err));
    if (sscanf(buf, "%ld %ld %la %la %ld", &w->st.count, &w->st.correct, &w->st.loss_sum,
               &w->grad_norm_sum, &w->steps) != 5)
        return ttt_error_set(err, TTT_ERR_FORMAT, "checkpoint '%s': malformed window '%s'",
                             info.path, buf);
    static const char *const keys[] = {"train_loss", "seconds", "tokens", "records_bytes"};
    double loss = NAN, secs = 0;
    long long tok = 0, bytes = 0;
    for (int k = 0; k < 4; k++) {
        s = ttt_checkpoint_read_meta(info.path, keys[k], buf, sizeof buf, err);
        if (s == TTT_ERR_CONFIG) /* the key is absent: a checkpoint that kept records inside */
            return ttt_error_set(err, TTT_ERR_FORMAT,
                                 "cannot resume from '%s': it was written by an earlier version "
                                 "of ttt (no '%s'); delete %s to start this run over",
                                 info.path, keys[k], t->run->ckpt_dir);
        TTT_TRY(s);
        int ok = k == 0   ? sscanf(buf, "%la", &loss) == 1 || strcmp(buf, "nan") == 0
                 : k == 1 ? sscanf(buf, "%la", &secs) == 1
                 : k == 2 ? sscanf(buf, "%lld", &tok) == 1
                          : sscanf(buf, "%lld", &bytes) == 1;
        if (!ok)
            return ttt_error_set(err, TTT_ERR_FORMAT, "checkpoint '%s': malformed %s '%s'",
                                 info.path, keys[k], buf);
    }
    TTT_TRY(ttt_train_stream_replay(t, bytes, err));
    res->train_loss = loss;
    *elapsed = secs;
    *tokens = (long)tok;
    *step = (long)st;
    return TTT_OK;
}
