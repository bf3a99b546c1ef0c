/* Evaluation of a model on a task's evaluation batches (train.h ttt_evaluate), on the host's
 * shards or on the device, and the evaluation records of a run. */
#include "train_internal.h"
#include "fault.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "blas.h"

/* Score every evaluation batch. A batch goes through the shards in parts of at most
 * S->eval_rows sequences (0: whole), each part's arenas reset before the next: a no-grad forward
 * keeps its intermediates until the reset, so a 250-sequence evaluation batch held more than a
 * training step of 64 sequences with its tape (docs/training.md "Memory of a training step").
 * The parts depend on the configuration only, never on threads or ranks. */
static ttt_status evaluate(ttt_train_shards *S, ttt_train_data *data, ttt_seq_stats *out,
                           ttt_error *err) {
    memset(out, 0, sizeof *out);
    const int vocab = S->m->cfg.io.vocab > 0;
    for (int i = 0; i < data->n_eval; i++) {
        ttt_seq_batch b;
        TTT_TRY(data->eval_batch(data->user, i, &b, err));
        const int step = S->eval_rows > 0 ? S->eval_rows : b.B;
        for (int p0 = 0; p0 < b.B; p0 += step) {
            const int p1 = b.B - p0 < step ? b.B : p0 + step;
            const ttt_seq_batch part = ttt_train_sub_batch(&b, p0, p1, S->in_dim, S->out_w, vocab);
            double loss;
            ttt_seq_stats st;
            ttt_status s = ttt_train_run_shards(S, &part, 0, &loss, &st, err);
            if (s == TTT_OK && data->eval_observe) {
                const int n = S->n < part.B ? S->n : part.B;
                for (int k = 0; k < n; k++) {
                    ttt_train_shard *h = &S->sh[k];
                    data->eval_observe(data->user, i, p0 + h->row0, &h->sub, h->pred->data);
                }
            }
            ttt_train_shards_reset(S);
            TTT_TRY(s);
            out->count += st.count;
            out->correct += st.correct;
            out->loss_sum += st.loss_sum;
        }
    }
    return TTT_OK;
}

/* evaluate() on the device: the same parts of each evaluation batch, each one forward of the
 * device step; the predictions come back to the host only for a task that observes them. */
static ttt_status evaluate_dev(ttt_train_dev *D, ttt_train_data *data, int rows,
                               ttt_seq_stats *out, ttt_error *err) {
    memset(out, 0, sizeof *out);
    const ttt_seq_model *m = D->m;
    const int vocab = m->cfg.io.vocab > 0;
    const int out_w = vocab ? m->cfg.io.vocab : m->cfg.io.out_dim;
    for (int i = 0; i < data->n_eval; i++) {
        ttt_seq_batch b;
        TTT_TRY(data->eval_batch(data->user, i, &b, err));
        const int step = rows > 0 ? rows : b.B;
        for (int p0 = 0; p0 < b.B; p0 += step) {
            const int p1 = b.B - p0 < step ? b.B : p0 + step;
            const ttt_seq_batch part =
                ttt_train_sub_batch(&b, p0, p1, m->cfg.io.in_dim, out_w, vocab);
            double loss;
            ttt_seq_stats st;
            ttt_status s =
                ttt_train_dev_step(D, &part, 0, ttt_train_batch_count(&part), &loss, &st, err);
            if (s == TTT_OK && data->eval_observe) {
                float *pred = ttt_fault_malloc(D->pred->n * sizeof(float) + 1);
                if (!pred)
                    s = ttt_error_set(err, TTT_ERR_NOMEM,
                                      "train: out of memory for the evaluation's predictions");
                if (s == TTT_OK) s = ttt_tensor_read(D->pred, pred, D->stream, err);
                if (s == TTT_OK) data->eval_observe(data->user, i, p0, &part, pred);
                free(pred);
            }
            ttt_train_dev_reset(D);
            TTT_TRY(s);
            out->count += st.count;
            out->correct += st.correct;
            out->loss_sum += st.loss_sum;
        }
    }
    return TTT_OK;
}

ttt_status ttt_evaluate(const ttt_seq_model *m, ttt_train_data *data, int n_shards,
                        ttt_seq_stats *out, ttt_error *err) {
    ttt_train_shards S;
    ttt_blas_set_threads(1);
    TTT_TRY(ttt_train_shards_init(&S, m, n_shards < 1 ? 1 : n_shards, 0, err));
    ttt_status s = evaluate(&S, data, out, err);
    ttt_train_shards_free(&S);
    return s;
}

ttt_status ttt_train_eval_record(ttt_trainer *t, ttt_train_shards *S, long step,
                                 ttt_train_result *res, ttt_error *err) {
    ttt_seq_stats st;
    TTT_TRY(t->dev ? evaluate_dev(t->dev, t->data, t->eval_rows, &st, err)
                   : evaluate(S, t->data, &st, err));
    ttt_record r;
    ttt_train_record_head(t, &r, "eval", step);
    double l = ttt_train_mean_loss(t->m, &st);
    ttt_record_num(&r, "eval_loss", l);
    if (t->m->cfg.io.vocab > 0)
        ttt_record_num(&r, "eval_accuracy", st.count ? (double)st.correct / st.count : NAN);
    if (t->data->bits) ttt_record_num(&r, "eval_bpb", ttt_bits_per_byte(l));
    ttt_train_emit(t, &r);
    res->eval = st;
    res->eval_loss = l;
    res->eval_accuracy = st.count ? (double)st.correct / st.count : NAN;
    return TTT_OK;
}
