/* The shards of a training step on the host (train.h; docs/training.md): a batch split into
 * train.shards parts computed in parallel and added in shard order, under MPI over the ranks
 * (docs/scaling.md "Data-parallel training"), and the step's memory. */
#include "train_internal.h"
#include "fault.h"

#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

void ttt_train_shards_free(ttt_train_shards *S) {
    for (int s = 0; S->sh && s < S->n; s++) {
        ttt_train_shard *h = &S->sh[s];
        ttt_tape_free(&h->tape);
        ttt_arena_free(&h->arena);
        if (h->grads && s > 0)
            for (int i = 0; i < S->m->params.n; i++) {
                if (h->grads[i]) ttt_mem_track(-4.0 * (double)S->m->params.p[i]->n);
                free(h->grads[i]);
            }
        free(h->grads);
        if (s > 0) free(h->pt);
    }
    free(S->sh);
    free(S->head_send);
    free(S->head_recv);
    free(S->gsend);
    free(S->acc);
    memset(S, 0, sizeof *S);
}

ttt_status ttt_train_shards_init(ttt_train_shards *S, const ttt_seq_model *m, int n, int threads,
                                 ttt_error *err) {
    memset(S, 0, sizeof *S);
    S->n = n;
    S->total = n;
    S->m = m;
    S->out_w = m->cfg.io.vocab > 0 ? m->cfg.io.vocab : m->cfg.io.out_dim;
    S->in_dim = m->cfg.io.in_dim;
    int cores = 1;
#ifdef _OPENMP
    cores = omp_get_num_procs();
#endif
    S->threads = threads > 0 ? threads : (n < cores ? n : cores);
    S->sh = ttt_fault_calloc((size_t)n, sizeof *S->sh);
    if (!S->sh) return ttt_error_set(err, TTT_ERR_NOMEM, "train: out of memory for the shards");
    const int np = m->params.n;
    for (int s = 0; s < n; s++) {
        ttt_train_shard *h = &S->sh[s];
        ttt_arena_init(&h->arena, TTT_TRAIN_ARENA_BLOCK);
        ttt_tape_init(&h->tape);
        h->tape.recycle = 1; /* only parameter gradients are read after backward */
        h->ctx = (ttt_ctx){.arena = &h->arena, .grad = 0, .tape = &h->tape};
        h->grads = ttt_fault_calloc((size_t)np, sizeof *h->grads);
        if (!h->grads) {
            ttt_train_shards_free(S);
            return ttt_error_set(err, TTT_ERR_NOMEM, "train: out of memory for the shards");
        }
        if (s == 0) {
            for (int i = 0; i < np; i++) h->grads[i] = m->params.p[i]->grad;
            h->pt = m->pt;
            continue;
        }
        h->pt = ttt_fault_calloc((size_t)np, sizeof *h->pt);
        int ok = h->pt != NULL;
        for (int i = 0; ok && i < np; i++) {
            ok = (h->grads[i] = ttt_fault_calloc(m->params.p[i]->n, sizeof(float))) != NULL;
            if (ok) ttt_mem_track(4.0 * (double)m->params.p[i]->n);
        }
        if (!ok) {
            ttt_train_shards_free(S);
            return ttt_error_set(err, TTT_ERR_NOMEM, "train: out of memory for shard gradients");
        }
        ttt_seq_model_bind(m, h->pt, h->grads);
    }
    return TTT_OK;
}

/* Rows [r0, r1) of a batch. */
ttt_seq_batch ttt_train_sub_batch(const ttt_seq_batch *b, int r0, int r1, int in_dim, int out_w,
                                  int vocab) {
    ttt_seq_batch s = *b;
    const size_t off = (size_t)r0 * b->T;
    s.B = r1 - r0;
    if (b->tokens) s.tokens = b->tokens + off;
    if (b->labels) s.labels = b->labels + off;
    if (b->inputs) s.inputs = b->inputs + off * in_dim;
    if (b->targets && !vocab) s.targets = b->targets + off * out_w;
    if (b->mask) s.mask = b->mask + off;
    return s;
}

/* Number of scored positions of a batch: the loss denominator shared by the shards. */
double ttt_train_batch_count(const ttt_seq_batch *b) {
    double n = 0;
    const long N = (long)b->B * b->T;
    for (long i = 0; i < N; i++) n += b->labels ? b->labels[i] >= 0 : b->mask[i] != 0.0f;
    return n;
}

/* The ranks' shards put together (docs/scaling.md "Data-parallel training"), so that every rank
 * ends with exactly what one process computes from the same `shards`: stats and loss added from
 * 0 in shard order, gradients shard 0 + shard 1 + … in that order.
 *   1. One MPI_Allgather of every shard's header (status, loss, count, correct, loss_sum, stop):
 *      every rank adds the stats in shard order and learns whether any shard failed or any rank
 *      was asked to stop.
 *   2. The gradients as an ordered chain: rank 0 starts the sum with its shards, each rank
 *      receives the partial sum from the rank before it, adds its own shards in order and sends
 *      it on, in chunks so that the ranks add at the same time; the last rank holds the sum of
 *      every shard in shard order and broadcasts it. Each rank receives about two gradients per
 *      step whatever the number of ranks (an MPI_Allreduce moves as much, but adds in an order
 *      that depends on the MPI library and the number of ranks). */
enum { SLOT_HEAD = 6 };
/* Floats per message of the chain: an eighth of the gradient, so that even a small one is
 * pipelined over the ranks, within [4 Ki, 64 Ki] (16–256 KiB: few messages, each well above
 * the latency). */
static size_t chain_chunk(size_t numel) {
    const size_t c = numel / 8;
    return c < 4096 ? 4096 : c > 65536 ? 65536 : c;
}

static ttt_status gather_shards(ttt_train_shards *S, int n, int total, int grad, double *loss,
                                ttt_seq_stats *stats, ttt_error *err) {
    const int np = S->m->params.n, R = S->comm->size, me = S->comm->rank;
    const size_t P = S->numel;
    const int stop = ttt_train_stop_requested();
    int failed = -1;
    memset(stats, 0, sizeof *stats);
    *loss = 0;
    for (int s = 0; s < S->slots; s++) {
        double *head = S->head_send + (size_t)s * SLOT_HEAD;
        memset(head, 0, SLOT_HEAD * sizeof *head);
        head[5] = stop;
        if (s >= n) continue;
        const ttt_train_shard *h = &S->sh[s];
        head[0] = h->s;
        if (h->s != TTT_OK && failed < 0) failed = s;
        head[1] = h->loss;
        head[2] = (double)h->stats.count;
        head[3] = (double)h->stats.correct;
        head[4] = h->stats.loss_sum;
        if (grad) {
            float *g = S->gsend + (size_t)s * P;
            for (int i = 0; i < np; i++) {
                memcpy(g, h->grads[i], S->m->params.p[i]->n * sizeof(float));
                g += S->m->params.p[i]->n;
            }
        }
    }
    TTT_TRY(ttt_comm_allgather(S->comm, S->head_recv, S->head_send,
                               (size_t)S->slots * SLOT_HEAD * sizeof(double), err));
    S->stop_any = 0;
    for (size_t k = 0; k < (size_t)R * S->slots; k++)
        if (S->head_recv[k * SLOT_HEAD + 5] != 0) S->stop_any = 1;
    for (int g = 0, r = 0; g < total; g++) {
        while (g >= (int)((long)S->total * (r + 1) / R)) r++;
        const int local = g - (int)((long)S->total * r / R);
        const double *head = S->head_recv + ((size_t)r * S->slots + (size_t)local) * SLOT_HEAD;
        if (head[0] != TTT_OK) { /* every rank sees it and stops here: no chain is started */
            if (failed >= 0) *err = S->sh[failed].err;
            else
                ttt_error_set(err, (ttt_status)head[0],
                              "rank %d failed in shard %d (its message is on its stderr)", r, g);
            return (ttt_status)head[0];
        }
        stats->count += (long)head[2];
        stats->correct += (long)head[3];
        stats->loss_sum += head[4];
        *loss += head[1];
    }
    if (!grad) return TTT_OK;
    const size_t chunk = chain_chunk(P);
    for (size_t off = 0; off < P; off += chunk) {
        const size_t len = P - off < chunk ? P - off : chunk;
        float *restrict a = S->acc + off; /* (len) */
        int s0 = 0;
        if (me == 0) { /* shard 0 starts the sum */
            memcpy(a, S->gsend + off, len * sizeof(float));
            s0 = 1;
        } else {
            TTT_TRY(ttt_comm_recv(S->comm, me - 1, a, len * sizeof(float), err));
        }
        for (int s = s0; s < n; s++) {
            const float *restrict gs = S->gsend + (size_t)s * P + off; /* (len) */
            for (size_t j = 0; j < len; j++) a[j] += gs[j];
        }
        if (me < R - 1) TTT_TRY(ttt_comm_send(S->comm, me + 1, a, len * sizeof(float), err));
    }
    TTT_TRY(ttt_comm_bcast(S->comm, R - 1, S->acc, P * sizeof(float), err));
    const float *a = S->acc;
    for (int i = 0; i < np; i++) {
        memcpy(S->m->params.p[i]->grad, a, S->m->params.p[i]->n * sizeof(float));
        a += S->m->params.p[i]->n;
    }
    return TTT_OK;
}

/* This rank's part of `total` shards over comm's ranks, with its gather buffers. */
ttt_status ttt_train_shards_init_ranks(ttt_train_shards *S, const ttt_seq_model *m, int total,
                                       int threads, const ttt_comm *comm, ttt_error *err) {
    const int R = comm->size, r = comm->rank;
    if (total < R)
        return ttt_error_set(err, TTT_ERR_CONFIG,
                             "train.shards is %d but the run has %d MPI ranks: each rank computes "
                             "at least one shard (set train.shards to a multiple of %d, at most "
                             "train.batch)",
                             total, R, R);
    const int first = (int)((long)total * r / R), last = (int)((long)total * (r + 1) / R);
    TTT_TRY(ttt_train_shards_init(S, m, last - first, threads, err));
    S->first = first;
    S->total = total;
    S->comm = comm;
    S->slots = (total + R - 1) / R;
    S->numel = ttt_params_numel(&m->params);
    S->head_send = ttt_fault_calloc((size_t)S->slots * SLOT_HEAD, sizeof(double));
    S->head_recv = ttt_fault_calloc((size_t)S->slots * R * SLOT_HEAD, sizeof(double));
    S->gsend = ttt_fault_calloc((size_t)S->slots * S->numel, sizeof(float));
    S->acc = ttt_fault_calloc(S->numel, sizeof(float));
    if (!S->head_send || !S->head_recv || !S->gsend || !S->acc) {
        ttt_train_shards_free(S);
        return ttt_error_set(err, TTT_ERR_NOMEM, "train: out of memory for the gathered gradients");
    }
    return TTT_OK;
}

/* One shard's forward (and backward when grad). Everything the step allocates lives in the
 * shard's arena, so an arena that cannot grow ends the step through its escape (tensor.h): the
 * shard reports out of memory with the size that failed, and its arena and tape are released
 * (docs/design.md "Errors, memory, determinism"). */
static void shard_step(const ttt_seq_model *m, ttt_train_shard *h, int grad, double denom) {
    h->arena.peak = ttt_arena_footprint(&h->arena); /* this step's peak from here */
    h->act_bytes = h->grad_bytes = 0;
    ttt_arena_escape esc;
    ttt_arena_arm(&h->arena, &esc);
    if (setjmp(esc.jump) == 0) {
        ttt_tensor *l = NULL;
        /* predictions are read by evaluations only: a training step lets the loss consume
         * the logits (ttt_cross_entropy_consume) */
        h->s = ttt_seq_model_loss(&h->ctx, m, h->pt, &h->sub, denom > 0 ? denom : 1.0, &l,
                                  &h->stats, grad ? NULL : &h->pred, &h->err);
        if (h->s == TTT_OK) {
            h->loss = l->data[0];
            /* what the backward will read: every tensor, tape entry and saved state the
             * forward left in the arena */
            h->act_bytes = ttt_arena_footprint(&h->arena);
            if (grad && isfinite(h->loss)) ttt_backward(&h->ctx, l);
            h->grad_bytes = grad ? h->tape.grad_bytes : 0;
        }
    } else {
        h->pred = NULL;
        h->s = ttt_error_set(&h->err, TTT_ERR_NOMEM,
                             "train: out of memory for %zu bytes of a step's tensors (the "
                             "arena held %.1f MiB)",
                             h->arena.failed_bytes,
                             (double)ttt_arena_footprint(&h->arena) / 1048576.0);
        ttt_arena_reset(&h->arena);
    }
    ttt_arena_disarm(&h->arena);
    ttt_tape_reset(&h->tape);
    /* the parameters no op wrote this step (ttt_train_run_shards marked them all stale) */
    if (grad)
        for (int i = 0; i < m->params.n; i++) ttt_tensor_grad_settle(&h->pt[i]);
}

/* Forward (and backward when grad) over every shard; stats summed in shard order; the shard
 * gradients are added into the parameters' in shard order. The arenas are NOT reset here (the
 * caller may read the predictions). */
ttt_status ttt_train_run_shards(ttt_train_shards *S, const ttt_seq_batch *b, int grad, double *loss,
                                ttt_seq_stats *stats, ttt_error *err) {
    const int total = S->total < b->B ? S->total : b->B;
    int n = total - S->first; /* the shards of this rank that hold rows */
    if (n > S->n) n = S->n;
    if (n < 0) n = 0;
    const double denom = ttt_train_batch_count(b);
    const int vocab = S->m->cfg.io.vocab > 0;
    for (int s = 0; s < n; s++) {
        ttt_train_shard *h = &S->sh[s];
        const int g = S->first + s;
        int r0 = (int)((long)b->B * g / total), r1 = (int)((long)b->B * (g + 1) / total);
        h->sub = ttt_train_sub_batch(b, r0, r1, S->in_dim, S->out_w, vocab);
        h->row0 = r0;
        h->ctx.grad = grad;
        h->s = TTT_OK;
        h->pred = NULL;
        /* instead of zeroing the gradients, the first op to write one assigns it (autograd.h
         * "First writer assigns"); shard_step zeroes those nothing wrote */
        if (grad)
            for (int i = 0; i < S->m->params.n; i++) ttt_tensor_grad_overwrite(&h->pt[i]);
    }
#pragma omp parallel for num_threads(S->threads) schedule(static, 1) if (S->threads > 1 && n > 1)
    for (int s = 0; s < n; s++) shard_step(S->m, &S->sh[s], grad, denom);
    if (S->comm) return gather_shards(S, n, total, grad, loss, stats, err);
    memset(stats, 0, sizeof *stats);
    *loss = 0;
    for (int s = 0; s < n; s++) {
        ttt_train_shard *h = &S->sh[s];
        if (h->s != TTT_OK) {
            *err = h->err;
            return h->s;
        }
        stats->count += h->stats.count;
        stats->correct += h->stats.correct;
        stats->loss_sum += h->stats.loss_sum;
        *loss += h->loss;
    }
    if (grad)
        for (int s = 1; s < n; s++)
            for (int i = 0; i < S->m->params.n; i++) {
                float *restrict g = S->m->params.p[i]->grad;       /* (n) */
                const float *restrict gs = S->sh[s].grads[i]; /* (n) */
                for (size_t j = 0; j < S->m->params.p[i]->n; j++) g[j] += gs[j];
            }
    return TTT_OK;
}

/* Reset every shard's arena for the next step. ttt_arena_reset keeps every block the step took
 * (the spare list, tensor.h), and the next step, which allocates the same sizes in the same
 * order, takes them again: after the first step a training step maps no new memory and faults
 * no page in (docs/training.md "Memory of a training step"; test_train_memory). Rebuilding the
 * arena as one block of the step's size instead unmapped every page the first step had faulted
 * in and faulted as many in again. */
void ttt_train_shards_reset(ttt_train_shards *S) {
    for (int s = 0; s < S->n; s++) ttt_arena_reset(&S->sh[s].arena);
}

/* The step's memory, summed over the shards (train.h ttt_train_memory): kept when its arena peak
 * is the largest so far. */
void ttt_train_step_memory(const ttt_train_shards *S, ttt_train_result *res) {
    size_t peak = 0, act = 0, grads = 0, held = 0;
    for (int i = 0; i < S->n; i++) {
        const ttt_train_shard *h = &S->sh[i];
        peak += h->arena.peak;
        act += h->act_bytes;
        grads += h->grad_bytes;
        held += ttt_arena_held(&h->arena);
    }
    if (held > res->mem.arena_held) res->mem.arena_held = held;
    if (peak < res->arena_peak) return;
    res->arena_peak = peak;
    res->mem.activations = act;
    res->mem.act_grads = grads;
    res->mem.workspace = peak > act + grads ? peak - act - grads : 0;
}

/* ttt_train_step_memory for the device step. */
void ttt_train_step_memory_dev(const ttt_train_dev *D, ttt_train_result *res) {
    const size_t held = ttt_arena_held(&D->arena), peak = D->arena.peak;
    if (held > res->mem.arena_held) res->mem.arena_held = held;
    if (peak < res->arena_peak) return;
    res->arena_peak = peak;
    res->mem.activations = D->act_bytes;
    res->mem.act_grads = D->grad_bytes;
    res->mem.workspace =
        peak > D->act_bytes + D->grad_bytes ? peak - D->act_bytes - D->grad_bytes : 0;
}
