/* Records: streamed to the point's journal as they happen; a checkpoint stores the journal's
 * length, not the records, so memory and checkpoints stay flat however long the run
 * (docs/hardening.md "Flat memory over long runs"). */
#include "train_internal.h"
#include "fault.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "point_records.h"

void ttt_train_emit(void *user, const ttt_record *r) {
    ttt_trainer *t = user;
    if (t->run->results) ttt_results_add(t->run->results, r, 0);
    if (t->stream && !t->stream_errno) {
        /* each line carries its checksum (point_records.h), verified when a resume reads it */
        errno = 0;
        if (ttt_journal_write(r, t->stream) != 0 || fflush(t->stream) != 0 ||
            ferror(t->stream))
            t->stream_errno = errno ? errno : EIO;
    }
}

/* Everything written to the journal is on disk; its length in *bytes. */
ttt_status ttt_train_stream_sync(ttt_trainer *t, long long *bytes, ttt_error *err) {
    *bytes = 0;
    if (!t->stream) return TTT_OK;
    if (!t->stream_errno && (fflush(t->stream) != 0 || fsync(fileno(t->stream)) != 0))
        t->stream_errno = errno ? errno : EIO;
    if (t->stream_errno)
        return ttt_error_set(err, TTT_ERR_IO, "cannot write '%s': %s", t->run->stream_path,
                             strerror(t->stream_errno));
    struct stat st;
    if (fstat(fileno(t->stream), &st) != 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot read the size of '%s': %s",
                             t->run->stream_path, strerror(errno));
    *bytes = (long long)st.st_size;
    return TTT_OK;
}

/* Cut the journal back to `bytes` (what the loaded checkpoint had seen; 0 for a fresh start)
 * and hand its records to the results again, one line at a time. */
ttt_status ttt_train_stream_replay(ttt_trainer *t, long long bytes, ttt_error *err) {
    if (!t->stream) return TTT_OK;
    const char *path = t->run->stream_path;
    struct stat st;
    if (fstat(fileno(t->stream), &st) != 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot read the size of '%s': %s", path,
                             strerror(errno));
    if ((long long)st.st_size < bytes)
        return ttt_error_set(err, TTT_ERR_FORMAT,
                             "cannot resume: '%s' holds %lld bytes of records but the checkpoint "
                             "was written after %lld (the file was cut or replaced; delete the "
                             "run folder to start over)",
                             path, (long long)st.st_size, bytes);
    if (ftruncate(fileno(t->stream), (off_t)bytes) != 0)
        return ttt_error_set(err, TTT_ERR_IO, "cannot cut '%s' back to the checkpoint: %s", path,
                             strerror(errno));
    if (bytes == 0 || !t->run->results) return TTT_OK;
    FILE *in = fopen(path, "r");
    if (!in)
        return ttt_error_set(err, TTT_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    ttt_status s = TTT_OK;
    ttt_record *r = ttt_fault_malloc(sizeof *r);
    if (!r)
        s = ttt_error_set(err, TTT_ERR_NOMEM, "train: out of memory for a record of the journal");
    while (s == TTT_OK && (n = getline(&line, &cap, in)) > 0) {
        lineno++;
        s = ttt_journal_parse(r, line, err);
        if (s == TTT_ERR_FORMAT) {
            char why[TTT_ERROR_MSG_LEN];
            snprintf(why, sizeof why, "%s", err->msg);
            s = ttt_error_set(err, TTT_ERR_FORMAT,
                              "%s:%ld: %s; the record journal is damaged: delete %s to start "
                              "this point over", path, lineno, why, t->run->ckpt_dir);
        }
        if (s == TTT_OK) ttt_results_add(t->run->results, r, 0);
    }
    free(r);
    free(line);
    fclose(in);
    return s;
}

void ttt_train_record_head(const ttt_trainer *t, ttt_record *r, const char *kind, long step) {
    ttt_record_clear(r);
    ttt_record_str(r, "series", t->run->series ? t->run->series : "");
    ttt_record_num(r, "point", t->run->point);
    ttt_record_str(r, "mixer", t->run->mixer ? t->run->mixer : "");
    ttt_record_str(r, "kind", kind);
    ttt_record_num(r, "step", (double)step);
}

/* Mean loss of a stats window: per scored position, and per output for vector tasks. */
double ttt_train_mean_loss(const ttt_seq_model *m, const ttt_seq_stats *s) {
    if (s->count == 0) return NAN;
    double per = m->cfg.io.vocab > 0 ? 1.0 : (double)m->cfg.io.out_dim;
    return s->loss_sum / ((double)s->count * per);
}
