/* Outer-loop training (see train.h): the loop of ttt_train. Its parts are in train_config.c
 * (the train: section), train_shards.c (the host step), train_eval.c (evaluation),
 * train_records.c (records), train_resume.c (checkpoints) and train_stop.c (stopping). */
#include "train_internal.h"
#include "fault.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "blas.h"
#include "infile.h"
#include "train_replicas.h"

/* A step that failed before its update (or its evaluation after it): "step N[what]: <the
 * failure>; training stopped (<where the last good checkpoint is>)", the status unchanged. */
static void step_failed(ttt_error *err, long step, const char *what, const char *where) {
    if (!err || err->status == TTT_ERR_INTERRUPTED) return;
    ttt_error_prefix(err, "step %ld%s", step, what);
    const size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, "; training stopped (%s)", where);
}

/* After a failed step over several GPUs: the checkpoint of `step`, the last completed, from a
 * replica whose step did not fail (its weights and moments are still that step's), with the
 * data's state from before the failed step's batch. */
static ttt_status rescue_save(ttt_trainer *t, long step, const uint64_t *before,
                              const ttt_adamw *opt, const ttt_train_window *w,
                              const ttt_train_result *res, double elapsed, long tokens) {
    ttt_train_replicas *R = t->reps;
    int h = -1;
    /* A replica whose step ran out of memory is intact too: its arena was reset and the update
     * never ran. So is one whose CUDA call failed without breaking its device: a step writes
     * only its arena and the gradients, never the weights or moments. An allocation refused by
     * the device's pool is such a failure (TTT_ERR_DEVICE, docs/api.md); a device that still
     * synchronizes took no sticky error. Clean replicas first. */
    for (int i = 0; i < R->n && h < 0; i++)
        if (R->st[i] == TTT_OK || R->st[i] == TTT_ERR_NOMEM) h = i;
    for (int i = 0; i < R->n && h < 0; i++) {
        ttt_error ignore = {0};
        if (R->st[i] == TTT_ERR_DEVICE && ttt_device_sync(R->devs[i], NULL, &ignore) == TTT_OK)
            h = i;
    }
    if (h < 0 || !t->run->ckpt_dir) return TTT_ERR_DEVICE;
    ttt_error e = {0};
    ttt_device_scope sc;
    if (ttt_device_enter(R->devs[h], &sc, &e) != TTT_OK) return e.status;
    ttt_train_dev *lead = t->dev;
    const int had_pre = t->have_pre;
    t->dev = &R->dev[h];
    t->have_pre = 1; /* the state to save is `before` */
    memcpy(t->pre_words, before, sizeof t->pre_words);
    const ttt_status s = ttt_train_save(t, step, opt, w, res, elapsed, tokens, &e);
    t->dev = lead;
    t->have_pre = had_pre;
    ttt_device_leave(&sc);
    return s;
}

ttt_status ttt_train(ttt_seq_model *m, const ttt_train_config *c, ttt_train_data *data,
                     const ttt_train_run *run, ttt_train_result *res, ttt_error *err) {
    memset(res, 0, sizeof *res);
    res->resumed_from = -1;
    res->eval_loss = res->eval_accuracy = res->train_loss = NAN;
    /* a step asked of a device never runs on the host instead */
    TTT_TRY(ttt_train_device_ready(c, m ? &m->cfg : NULL, err));
    /* Under several ranks only rank 0 speaks: the others train without records or progress. */
    const ttt_comm *comm = run->comm && run->comm->size > 1 ? run->comm : NULL;
    const int on_dev = !ttt_device_is_host(c->device);
    /* GPUs under MPI: every process one rank of train.devices (train_replicas.h) */
    if (on_dev && comm && c->n_devices != comm->size) {
        char dn[32];
        return ttt_error_set(err, TTT_ERR_CONFIG,
                             "train.device: %s under %d MPI ranks: name one GPU per rank in "
                             "train.devices (%d entries; a GPU may repeat only in a process "
                             "run alone), or run one process, which drives every GPU of "
                             "train.devices (docs/scaling.md \"Several GPUs\")",
                             ttt_device_name(c->device, dn, sizeof dn), comm->size,
                             comm->size);
    }
    ttt_train_run quiet;
    if (comm && comm->rank != 0) {
        quiet = *run;
        quiet.stream_path = NULL;
        quiet.results = NULL;
        quiet.progress = NULL;
        run = &quiet;
    }
    ttt_trainer t = {.c = c, .data = data, .run = run, .m = m};
    /* parallel over shards (OpenMP), single-threaded BLAS inside: OpenBLAS's own threads lose
     * on these small matrices and fight the shard threads for the cores (docs/design.md) */
    ttt_blas_set_threads(1);
    ttt_adamw opt;
    TTT_TRY(ttt_adamw_init(&opt, &m->params, &c->adamw, err));
    /* E: evaluation, every shard on every rank (the same numbers everywhere) */
    ttt_train_shards S, E;
    memset(&E, 0, sizeof E);
    /* on a device the batch is one unit of work (train_device.h): one host shard stays for
     * the bookkeeping below, and holds no gradient of its own */
    ttt_status s = on_dev ? ttt_train_shards_init(&S, m, 1, 1, err)
                   : comm ? ttt_train_shards_init_ranks(&S, m, c->shards, c->threads, comm, err)
                          : ttt_train_shards_init(&S, m, c->shards, c->threads, err);
    if (s != TTT_OK) {
        ttt_adamw_free(&opt);
        return s;
    }
    if (on_dev) {
        /* the peak this run reports (res->device_peak) is its own: from before its device
         * state is made (device.h ttt_device_pool_peak_reset) */
        for (int i = 0; i < (c->n_devices > 0 ? c->n_devices : 1); i++)
            ttt_device_pool_peak_reset(c->n_devices > 0 ? c->devices[i] : c->device);
        /* one replica per rank of train.devices this process drives (one without it) */
        t.reps = ttt_fault_calloc(1, sizeof *t.reps);
        t.eval_rows = c->batch;
        s = t.reps ? ttt_train_replicas_init(t.reps, m, c, comm, err)
                   : ttt_error_set(err, TTT_ERR_NOMEM, "train: out of memory for the device step");
        if (s == TTT_OK) t.dev = ttt_train_replicas_lead(t.reps);
        if (s != TTT_OK) {
            free(t.reps);
            ttt_train_shards_free(&S);
            ttt_adamw_free(&opt);
            return s;
        }
    }
    /* train.recompute is a setting of the training step's contexts (tensor.h ttt_ctx) */
    for (int i = 0; i < S.n; i++) S.sh[i].ctx.recompute = c->recompute;
    if (comm && !on_dev) s = ttt_train_shards_init(&E, m, c->shards, c->threads, err);
    ttt_train_shards *ev = comm && !on_dev ? &E : &S;
    ev->eval_rows = c->batch; /* evaluation holds no more than a training step's forward */
    const double t_start = ttt_now();
    double t_before = 0; /* seconds of the earlier processes of a resumed run */
    ttt_train_window w = {0};
    long step = 0, tokens = 0;
    if (s == TTT_OK && run->stream_path) {
        const char *kind = ""; /* a FIFO in its place would block (infile.h) */
        t.stream = ttt_open_regular_append(run->stream_path, &kind);
        if (!t.stream && kind[0])
            s = ttt_error_set(err, TTT_ERR_IO, "train: cannot append to '%s': not a regular "
                              "file, it is %s", run->stream_path, kind);
        else if (!t.stream)
            s = ttt_error_set(err, TTT_ERR_IO, "train: cannot append to '%s': %s",
                              run->stream_path, strerror(errno));
    }
    if (s == TTT_OK) {
        long from;
        s = ttt_train_resume(&t, &opt, &from, &w, res, &t_before, &tokens, err);
        if (s == TTT_OK && from >= 0) step = res->resumed_from = from;
        /* the checkpoint's weights and moments, read on the host, go up to the device */
        if (s == TTT_OK && from >= 0 && t.reps) s = ttt_train_replicas_upload(t.reps, &opt, err);
    }
    if (comm) { /* every rank read the checkpoint rank 0 wrote: they must agree on the step */
        long lo, hi;
        ttt_comm_minmax(comm, s == TTT_OK ? step : -2, &lo, &hi);
        if (s == TTT_OK && lo != hi)
            s = ttt_error_set(err, TTT_ERR_IO,
                              "the MPI ranks resumed from different steps (%ld to %ld): is %s "
                              "on a file system every rank sees?",
                              lo < 0 ? 0 : lo, hi,
                              run->ckpt_dir ? run->ckpt_dir : "the run folder");
    }
    long last_good = res->resumed_from; /* the newest checkpoint written or loaded */
    double t_win = ttt_now();
    long tok_win = 0;
    const long stop = c->stop_at > 0 && c->stop_at < c->steps ? c->stop_at : c->steps;
    while (s == TTT_OK && step < stop) {
        ttt_seq_batch b;
        uint64_t before[64]; /* the data's state before b: a checkpoint of the step before */
        TTT_ASSERT(data->n_state <= 64);
        if (t.have_pre) { /* drawn while the device ran the step before */
            b = t.pre;
            t.have_pre = 0;
            memcpy(before, t.pre_words, sizeof before);
        } else {
            if (data->n_state) data->get_state(data->user, before);
            s = data->next(data->user, &b, err);
        }
        if (s != TTT_OK) break;
        double loss;
        ttt_seq_stats st;
        if (t.reps) {
            s = ttt_train_replicas_step(t.reps, &b, &loss, &st, err);
            /* The next batch is drawn now, on the host, while the device runs this step's
             * backward (the step's ids are on the device already; b's host arrays are not read
             * again). Not before a step that evaluates or checkpoints, whose data must be the
             * step's own (an evaluation batch may share the task's buffers); a stop asked for
             * in between saves the state from before the draw (save). */
            const long nx = step + 1; /* this step's number */
            if (s == TTT_OK && nx < stop && !(c->eval_every > 0 && nx % c->eval_every == 0) &&
                !(c->checkpoint_every > 0 && nx % c->checkpoint_every == 0)) {
                if (data->n_state) data->get_state(data->user, t.pre_words);
                s = data->next(data->user, &t.pre, err);
                t.have_pre = s == TTT_OK;
            }
            ttt_train_replicas_memory(t.reps, res);
            ttt_train_replicas_reset(t.reps);
        } else {
            s = ttt_train_run_shards(&S, &b, 1, &loss, &st, err); /* assigns every gradient */
            /* before ttt_train_shards_reset, which may rebuild an arena */
            ttt_train_step_memory(&S, res);
            ttt_train_shards_reset(&S);
        }
        const long this_step = step + 1; /* steps are counted from 1 in records */
        char where[160] = "no checkpoint was written yet";
        if (last_good >= 0)
            snprintf(where, sizeof where, "the last good checkpoint (step %ld) is in %s",
                     last_good, run->ckpt_dir);
        if (s != TTT_OK) { /* out of (device) memory, a CUDA failure: the step and what is kept */
            /* over several GPUs, the weights of the step before, intact on every replica, are
             * saved: a lost rank loses no more than this step (train_replicas.h) */
            if (t.reps && t.reps->world > 1 && s != TTT_ERR_INTERRUPTED && step > last_good &&
                rescue_save(&t, step, before, &opt, &w, res, t_before + ttt_now() - t_start,
                            tokens) == TTT_OK) {
                last_good = step;
                snprintf(where, sizeof where,
                         "the checkpoint of step %ld, the last completed, was written to %s",
                         step, run->ckpt_dir);
            }
            step_failed(err, this_step, "", where);
            break;
        }
        if (!isfinite(loss)) {
            s = ttt_error_set(err, TTT_ERR_NUMERIC,
                              "step %ld: the training loss is %s; training stopped (%s). Lower "
                              "train.lr or set train.clip",
                              this_step, isnan(loss) ? "nan" : "inf", where);
            break;
        }
        ttt_adamw_stats as = {0};
        if (t.reps) { /* the same checks and update on the device (train_device.h) */
            s = ttt_train_replicas_adamw(t.reps, &opt, &m->params, &as, err);
        } else {
            s = ttt_params_check_finite(&m->params, TTT_PARAMS_CHECK_GRAD, err);
            if (s == TTT_OK) s = ttt_adamw_step(&opt, &m->params, &as, err);
            if (s == TTT_OK) s = ttt_params_check_finite(&m->params, TTT_PARAMS_CHECK_DATA, err);
        }
        if (s != TTT_OK) {
            ttt_error_prefix(err, "step %ld", this_step);
            size_t n = strlen(err->msg);
            snprintf(err->msg + n, sizeof err->msg - n, "; training stopped (%s)", where);
            /* a CUDA failure stays what it is; everything else here is numeric */
            if (s != TTT_ERR_DEVICE) s = TTT_ERR_NUMERIC;
            err->status = s;
            break;
        }
        step = this_step;
        tokens += (long)b.B * b.T;
        tok_win += (long)b.B * b.T;
        w.st.count += st.count;
        w.st.correct += st.correct;
        w.st.loss_sum += st.loss_sum;
        w.grad_norm_sum += as.grad_norm;
        w.steps++;
        if (step % c->log_every == 0 || step == c->steps) {
            ttt_record r;
            ttt_train_record_head(&t, &r, "train", step);
            double l = ttt_train_mean_loss(m, &w.st), now = ttt_now();
            ttt_record_num(&r, "loss", l);
            if (m->cfg.io.vocab > 0)
                ttt_record_num(&r, "accuracy",
                               w.st.count ? (double)w.st.correct / w.st.count : NAN);
            if (data->bits) ttt_record_num(&r, "loss_bpb", ttt_bits_per_byte(l));
            ttt_record_num(&r, "grad_norm", w.grad_norm_sum / (double)w.steps);
            ttt_record_num(&r, "lr", as.lr);
            ttt_record_num(&r, "tokens_per_s", now > t_win ? tok_win / (now - t_win) : 0.0);
            ttt_train_emit(&t, &r);
            res->train_loss = l;
            memset(&w, 0, sizeof w);
            t_win = now;
            tok_win = 0;
        }
        if (c->eval_every > 0 && step % c->eval_every == 0 && step != c->steps) {
            s = ttt_train_eval_record(&t, ev, step, res, err);
            if (s != TTT_OK) step_failed(err, step, ": evaluating", where);
        }
        if (s == TTT_OK && ((c->checkpoint_every > 0 && step % c->checkpoint_every == 0) ||
                            step == stop)) {
            s = ttt_train_save(&t, step, &opt, &w, res, t_before + ttt_now() - t_start, tokens,
                               err);
            if (comm && !ttt_comm_all(comm, s == TTT_OK) && s == TTT_OK)
                s = ttt_error_set(err, TTT_ERR_IO, "step %ld: rank 0 could not save the "
                                  "checkpoint (its message is on its stderr)", step);
            if (s == TTT_OK) last_good = step;
        }
        /* under MPI the ranks agree on a stop in the gather (one may see the signal late) */
        const int stop_now = comm ? (t.reps ? t.reps->stop_any : S.stop_any)
                                  : ttt_train_stop_requested();
        if (run->progress) ttt_progress_update(run->progress, run->work_done + step, run->series);
        if (s == TTT_OK && stop_now && step < stop) {
            if (last_good != step) {
                s = ttt_train_save(&t, step, &opt, &w, res, t_before + ttt_now() - t_start,
                                   tokens, err);
                if (comm && !ttt_comm_all(comm, s == TTT_OK) && s == TTT_OK)
                    s = ttt_error_set(err, TTT_ERR_IO, "step %ld: rank 0 could not save the "
                                      "checkpoint (its message is on its stderr)", step);
            }
            if (s == TTT_OK)
                s = ttt_error_set(err, TTT_ERR_INTERRUPTED,
                                  "interrupted at step %ld of %ld; checkpoint saved in %s; run "
                                  "the same command again to resume",
                                  step, c->steps, run->ckpt_dir);
        }
    }
    res->step = step;
    res->stopped = s == TTT_OK && step < c->steps;
    if (s == TTT_OK && !res->stopped) {
        /* The final evaluation comes after the final checkpoint, so it lies beyond the journal
         * length that checkpoint saved: a run resumed from its final checkpoint cuts it off and
         * records it again, exactly once. */
        s = ttt_train_eval_record(&t, ev, step, res, err);
    }
    /* over the whole run, also when it was resumed (a run resumed from its final checkpoint
     * reports what the run that wrote it measured, plus the final evaluation) */
    res->seconds = t_before + ttt_now() - t_start;
    res->tokens_per_s = res->seconds > 0 ? tokens / res->seconds : 0;
    if (t.stream) {
        long long bytes;
        if (s == TTT_OK) s = ttt_train_stream_sync(&t, &bytes, err);
        fclose(t.stream);
    }
    if (t.reps) { /* the trained weights to the host model, which the caller reads */
        /* the replicas hold the same bits (train_replicas.h): checked once, at the end */
        if (s == TTT_OK) s = ttt_train_replicas_check(t.reps, err);
        if (s == TTT_OK) s = ttt_train_dev_download(t.dev, &m->params, NULL, err);
        /* the peak of the fullest GPU (ranks sharing one count together there) */
        for (int i = 0; i < t.reps->n; i++) {
            ttt_device_pool_stats ps;
            ttt_error ignore = {0};
            if (ttt_device_pool_stats_get(t.reps->devs[i], &ps, &ignore) == TTT_OK) {
                if (ps.used_high > res->device_peak) res->device_peak = ps.used_high;
                if (ps.reserved_high > res->device_reserved_peak)
                    res->device_reserved_peak = ps.reserved_high;
            }
        }
        ttt_train_replicas_free(t.reps);
        free(t.reps);
    }
    ttt_train_shards_free(&S);
    if (comm && !on_dev) ttt_train_shards_free(&E);
    ttt_adamw_free(&opt);
    return s;
}
