/* Data-parallel training on several GPUs (train_replicas.h; docs/scaling.md "Several GPUs"). */
#include "train_replicas.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "fault.h"
#include "train_internal.h"

/* The statistics one rank sends the others under MPI: status, loss, count, correct, loss_sum,
 * stop. */
enum { HEAD = 6 };

void ttt_train_replicas_free(ttt_train_replicas *R) {
    if (!R) return;
    ttt_nccl_free(R->nccl);
    ttt_device_free(&R->scratch);
    /* in the order they were made, backwards (each replica restores the device current before
     * it: ttt_train_dev_free) */
    for (int i = 0; R->dev && i < R->n; i++) ttt_train_dev_free(&R->dev[i]);
    free(R->dev);
    free(R->devs);
    free(R->st);
    free(R->err);
    free(R->loss);
    free(R->stats);
    free(R->head);
    memset(R, 0, sizeof *R);
}

ttt_train_dev *ttt_train_replicas_lead(ttt_train_replicas *R) { return &R->dev[0]; }

static int devices_repeat(const ttt_device *d, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (ttt_device_equal(d[i], d[j])) return 1;
    return 0;
}

ttt_status ttt_train_replicas_init(ttt_train_replicas *R, const ttt_seq_model *m,
                                   const ttt_train_config *c, const ttt_comm *comm,
                                   ttt_error *err) {
    memset(R, 0, sizeof *R);
    const int W = c->n_devices > 0 ? c->n_devices : 1;
    const int procs = comm ? comm->size : 1;
    if (procs > 1 && procs != W)
        return ttt_error_set(err, TTT_ERR_CONFIG,
                             "train.devices lists %d GPUs but the MPI job has %d ranks: under "
                             "mpirun start one process per GPU (mpirun -n %d), or run one "
                             "process alone, which drives every GPU",
                             W, procs, W);
    R->world = W;
    R->comm = procs > 1 ? comm : NULL;
    R->first = procs > 1 ? comm->rank : 0;
    R->n = procs > 1 ? 1 : W;
    const int n = R->n;
    R->devs = ttt_fault_calloc((size_t)n, sizeof *R->devs);
    R->dev = ttt_fault_calloc((size_t)n, sizeof *R->dev);
    R->st = ttt_fault_calloc((size_t)n, sizeof *R->st);
    R->err = ttt_fault_calloc((size_t)n, sizeof *R->err);
    R->loss = ttt_fault_calloc((size_t)n, sizeof *R->loss);
    R->stats = ttt_fault_calloc((size_t)n, sizeof *R->stats);
    R->head = ttt_fault_calloc((size_t)W * HEAD, sizeof *R->head);
    if (!R->devs || !R->dev || !R->st || !R->err || !R->loss || !R->stats || !R->head) {
        ttt_train_replicas_free(R);
        return ttt_error_set(err, TTT_ERR_NOMEM, "train: out of memory for %d ranks", W);
    }
    for (int i = 0; i < n; i++)
        R->devs[i] = c->n_devices > 0 ? c->devices[R->first + i] : c->device;
    /* made last to first, so that rank 0's device is current on this thread afterwards (the
     * host's evaluation and checkpoints use rank 0) and the frees, first to last, restore what
     * was current before */
    ttt_status made = TTT_OK;
    int failed = -1;
    for (int i = n - 1; i >= 0 && made == TTT_OK; i--) {
        made = ttt_train_dev_init_dtype(&R->dev[i], m, R->devs[i], c->dtype, err);
        if (made != TTT_OK) failed = i;
        else R->dev[i].ctx.recompute = c->recompute; /* train.recompute (tensor.h ttt_ctx) */
    }
    /* under MPI every process learns whether all could start, before any waits in NCCL */
    if (R->comm && !ttt_comm_all(R->comm, made == TTT_OK) && made == TTT_OK) {
        made = ttt_error_set(err, TTT_ERR_DEVICE, "another rank could not start on its GPU "
                             "(its message is on its stderr)");
        failed = n; /* every replica here was made */
    }
    if (made != TTT_OK) {
        /* the ones made: failed + 1 … n − 1, or all when another process failed */
        for (int j = failed == n ? 0 : failed + 1; j < n; j++) ttt_train_dev_free(&R->dev[j]);
        free(R->dev);
        R->dev = NULL;
        if (W > 1 && failed < n) ttt_error_prefix(err, "rank %d", R->first + failed);
        ttt_train_replicas_free(R);
        return made;
    }
    /* train.device alone: the device step as it is; train.devices, even of one GPU, sums
     * through NCCL (a group of one: the same path as W GPUs, tested on one) */
    R->plain = c->n_devices == 0;
    if (R->plain) return TTT_OK;
    ttt_status s = TTT_OK;
    if (R->comm) { /* one GPU per process: NCCL, its id from rank 0 */
        ttt_nccl_id id;
        memset(&id, 0, sizeof id);
        ttt_status is = R->first == 0 ? ttt_nccl_make_id(&id, err) : TTT_OK;
        if (!ttt_comm_all(R->comm, is == TTT_OK))
            s = is != TTT_OK ? is
                             : ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                                             "rank 0 could not start NCCL (its message is on "
                                             "its stderr)");
        if (s == TTT_OK) s = ttt_comm_bcast(R->comm, 0, &id, sizeof id, err);
        if (s == TTT_OK) s = ttt_nccl_init(&R->nccl, W, R->first, 1, R->devs, &id, err);
    } else if (!devices_repeat(R->devs, n)) {
        s = ttt_nccl_init(&R->nccl, W, 0, n, R->devs, NULL, err);
    } else { /* ranks share a GPU: the ordered sum, through rank 0's GPU */
        s = ttt_device_alloc(&R->scratch, R->devs[0], R->dev[0].numel * sizeof(float),
                             R->dev[0].stream, "another rank's gradient", err);
    }
    if (s != TTT_OK) {
        ttt_error_prefix(err, "train.devices: the gradient sum over %d ranks", W);
        ttt_train_replicas_free(R);
    }
    return s;
}

/* Rank i's step on its rows, on a thread of its own with its device current. */
static void rank_step(ttt_train_replicas *R, int i, const ttt_seq_batch *part, double denom) {
    ttt_device_scope sc;
    R->st[i] = ttt_device_enter(R->devs[i], &sc, &R->err[i]);
    if (R->st[i] != TTT_OK) return;
    R->st[i] = ttt_train_dev_step(&R->dev[i], part, 1, denom, &R->loss[i], &R->stats[i],
                                  &R->err[i]);
    ttt_device_leave(&sc);
}

/* The ordered sum (train_replicas.h): rank 0's gradient plus every other rank's, in rank order,
 * then the sum to every other rank. Every rank's work is finished first (a rank on another GPU
 * ran on that GPU's stream). */
static ttt_status ordered_sum(ttt_train_replicas *R, ttt_error *err) {
    ttt_train_dev *d0 = &R->dev[0];
    for (int i = 0; i < R->n; i++) TTT_TRY(ttt_device_sync(R->devs[i], R->dev[i].stream, err));
    for (int i = 1; i < R->n; i++) {
        const float *g = R->dev[i].grad;
        if (!ttt_device_equal(R->devs[i], R->devs[0])) {
            TTT_TRY(ttt_device_copy(R->scratch.ptr, R->devs[0], g, R->devs[i],
                                    d0->numel * sizeof(float), d0->stream, err));
            g = R->scratch.ptr;
        }
        TTT_TRY(ttt_cuda_map(TTT_MAP_ADD, d0->grad, 0, d0->grad, g, TTT_B_SAME, NULL, d0->numel,
                             d0->numel, 0.0f, 0.0f, d0->stream, err));
    }
    for (int i = 1; i < R->n; i++)
        TTT_TRY(ttt_device_copy(R->dev[i].grad, R->devs[i], d0->grad, R->devs[0],
                                d0->numel * sizeof(float), d0->stream, err));
    return ttt_device_sync(R->devs[0], d0->stream, err);
}

ttt_status ttt_train_replicas_step(ttt_train_replicas *R, const ttt_seq_batch *b, double *loss,
                                   ttt_seq_stats *st, ttt_error *err) {
    const int n = R->n, W = R->world;
    const double denom = ttt_train_batch_count(b);
    *loss = NAN;
    memset(st, 0, sizeof *st);
    if (R->plain) /* train.device: the device step as it is */
        return ttt_train_dev_step(&R->dev[0], b, 1, denom, loss, st, err);
    if (b->B < W)
        return ttt_error_set(err, TTT_ERR_SHAPE,
                             "a batch of %d sequences over %d ranks: each rank needs at least one",
                             b->B, W);
    const ttt_seq_model *m = R->dev[0].m;
    const int vocab = m->cfg.io.vocab > 0;
    const int out_w = vocab ? m->cfg.io.vocab : m->cfg.io.out_dim;
    ttt_seq_batch part[TTT_MAX_TRAIN_DEVICES];
    for (int i = 0; i < n; i++) {
        const int g = R->first + i;
        const int r0 = (int)((long)b->B * g / W), r1 = (int)((long)b->B * (g + 1) / W);
        part[i] = ttt_train_sub_batch(b, r0, r1, m->cfg.io.in_dim, out_w, vocab);
    }
#pragma omp parallel for num_threads(n) schedule(static, 1) if (n > 1)
    for (int i = 0; i < n; i++) rank_step(R, i, &part[i], denom);
    /* every rank's statistics in rank order; under MPI from every process */
    const int stop = ttt_train_stop_requested();
    for (int i = 0; i < n; i++) {
        double *h = R->head + (size_t)(R->first + i) * HEAD;
        h[0] = R->st[i];
        h[1] = R->loss[i];
        h[2] = (double)R->stats[i].count;
        h[3] = (double)R->stats[i].correct;
        h[4] = R->stats[i].loss_sum;
        h[5] = stop;
    }
    if (R->comm)
        TTT_TRY(ttt_comm_allgather(R->comm, R->head, R->head + (size_t)R->first * HEAD,
                                   HEAD * sizeof(double), err));
    R->stop_any = 0;
    for (int g = 0; g < W; g++) {
        const double *h = R->head + (size_t)g * HEAD;
        if (h[5] != 0) R->stop_any = 1;
        if (h[0] != TTT_OK) { /* every rank sees it before the sum: none waits in NCCL */
            const int local = g - R->first;
            if (local >= 0 && local < n) *err = R->err[local];
            else
                ttt_error_set(err, (ttt_status)h[0],
                              "its message is on the stderr of the process of rank %d", g);
            char dn[32];
            ttt_error_prefix(err, "rank %d (%s)", g,
                             local >= 0 && local < n
                                 ? ttt_device_name(R->devs[local], dn, sizeof dn)
                                 : "another process");
            return (ttt_status)h[0];
        }
    }
    double l = 0;
    for (int g = 0; g < W; g++) {
        const double *h = R->head + (size_t)g * HEAD;
        l += h[1];
        st->count += (long)h[2];
        st->correct += (long)h[3];
        st->loss_sum += h[4];
    }
    if (R->nccl) {
        float *bufs[TTT_MAX_TRAIN_DEVICES];
        for (int i = 0; i < n; i++) bufs[i] = R->dev[i].grad;
        TTT_TRY(ttt_nccl_sum_f32(R->nccl, bufs, R->dev[0].numel, err));
    } else {
        TTT_TRY(ordered_sum(R, err));
    }
    *loss = l;
    return TTT_OK;
}

void ttt_train_replicas_reset(ttt_train_replicas *R) {
    for (int i = 0; i < R->n; i++) ttt_train_dev_reset(&R->dev[i]);
}

void ttt_train_replicas_memory(const ttt_train_replicas *R, ttt_train_result *res) {
    for (int i = 0; i < R->n; i++) ttt_train_step_memory_dev(&R->dev[i], res);
}

ttt_status ttt_train_replicas_adamw(ttt_train_replicas *R, ttt_adamw *opt, ttt_params *ps,
                                    ttt_adamw_stats *stats, ttt_error *err) {
    if (R->n == 1) return ttt_train_dev_adamw(&R->dev[0], opt, ps, stats, err);
    /* several ranks here */
    /* each rank updates its replica from the same moments and step count: a copy of opt per
     * rank, rank 0's kept (they are equal: the same gradient, the same formulas) */
    const int n = R->n;
    ttt_adamw_stats as[TTT_MAX_TRAIN_DEVICES];
    ttt_adamw o[TTT_MAX_TRAIN_DEVICES];
    for (int i = 0; i < n; i++) {
        o[i] = *opt;
        R->st[i] = TTT_OK;
    }
#pragma omp parallel for num_threads(n) schedule(static, 1)
    for (int i = 0; i < n; i++) {
        ttt_device_scope sc;
        R->st[i] = ttt_device_enter(R->devs[i], &sc, &R->err[i]);
        if (R->st[i] != TTT_OK) continue;
        /* a rank other than 0 has no host weights of its own to name a bad element in: it
         * reports through rank 0's, which holds the same values */
        R->st[i] = ttt_train_dev_adamw(&R->dev[i], &o[i], i == 0 ? ps : NULL, &as[i],
                                       &R->err[i]);
        ttt_device_leave(&sc);
    }
    for (int i = 0; i < n; i++)
        if (R->st[i] != TTT_OK) {
            *err = R->err[i];
            ttt_error_prefix(err, "rank %d", R->first + i);
            return R->st[i];
        }
    opt->step = o[0].step;
    if (stats) *stats = as[0];
    return TTT_OK;
}

ttt_status ttt_train_replicas_upload(ttt_train_replicas *R, const ttt_adamw *opt,
                                     ttt_error *err) {
    for (int i = 0; i < R->n; i++) {
        ttt_device_scope sc;
        TTT_TRY(ttt_device_enter(R->devs[i], &sc, err));
        const ttt_status s = ttt_train_dev_upload(&R->dev[i], opt, err);
        ttt_device_leave(&sc);
        if (s != TTT_OK) return s;
    }
    return TTT_OK;
}

ttt_status ttt_train_replicas_check(ttt_train_replicas *R, ttt_error *err) {
    if (R->n == 1) return TTT_OK;
    const size_t n = R->dev[0].numel;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    ttt_status s = a && b ? TTT_OK
                          : ttt_error_set(err, TTT_ERR_NOMEM,
                                          "train: out of memory to compare the replicas");
    if (s == TTT_OK)
        s = ttt_device_copy(a, ttt_device_host(), R->dev[0].data, R->devs[0], n * sizeof *a,
                            R->dev[0].stream, err);
    if (s == TTT_OK) s = ttt_device_sync(R->devs[0], R->dev[0].stream, err);
    for (int i = 1; i < R->n && s == TTT_OK; i++) {
        s = ttt_device_copy(b, ttt_device_host(), R->dev[i].data, R->devs[i], n * sizeof *b,
                            R->dev[i].stream, err);
        if (s == TTT_OK) s = ttt_device_sync(R->devs[i], R->dev[i].stream, err);
        for (size_t j = 0; s == TTT_OK && j < n; j++)
            if (memcmp(&a[j], &b[j], sizeof *a) != 0)
                s = ttt_error_set(err, TTT_ERR_NUMERIC,
                                  "the replicas differ: rank %d's weight %zu of the flat "
                                  "buffer is %.9g, rank 0's %.9g",
                                  R->first + i, j, (double)b[j], (double)a[j]);
    }
    free(a);
    free(b);
    return s;
}
