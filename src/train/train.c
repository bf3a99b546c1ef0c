/* Outer-loop training (see train.h). */
#include "train.h"
#include "fault.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blas.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include "autograd.h"
#include "checkpoint.h"
#include "batch.h"
#include "comm.h"
#include "infile.h"
#include "mixer.h"
#include "point_records.h"
#include "train_device.h"

/* ------------------------------------------------------------------------------------------ */
/* Configuration */

const ttt_option ttt_train_options[] = {
    {"steps", TTT_OPT_INT, "1000", 1, 1e12, NULL, "optimizer updates"},
    {"batch", TTT_OPT_INT, "32", 1, 1 << 20, NULL, "sequences per update"},
    {"shards", TTT_OPT_INT, "2", 1, 256, NULL,
     "parts of a batch computed independently and in parallel; results depend on this, not "
     "on the number of threads or of MPI ranks (at least the number of ranks)"},
    {"threads", TTT_OPT_INT, "0", 0, 1024, NULL,
     "threads for the shards; 0 = min(shards, cores)"},
    {"data_parallel", TTT_OPT_CHOICE, "auto", TTT_NO_RANGE, "auto|true|false",
     "under MPI: true = every rank trains each point, the shards of a batch split over the "
     "ranks; false = each point whole on one rank; auto = true when the sweep has fewer points "
     "than ranks (the first point's value decides; results are the same either way)"},
    {"lr", TTT_OPT_FLOAT, "1e-3", 1e-12, 10.0, NULL, "peak learning rate of AdamW"},
    {"beta1", TTT_OPT_FLOAT, "0.9", 0.0, 0.999999, NULL, "AdamW beta1"},
    {"beta2", TTT_OPT_FLOAT, "0.999", 0.0, 0.999999999, NULL, "AdamW beta2"},
    {"eps", TTT_OPT_FLOAT, "1e-8", 1e-30, 1.0, NULL, "AdamW epsilon"},
    {"weight_decay", TTT_OPT_FLOAT, "0.1", 0.0, 100.0, NULL,
     "decoupled weight decay of matrices (norm gains, biases and gates are not decayed)"},
    {"warmup", TTT_OPT_INT, "100", 0, 1e12, NULL, "linear warm-up steps"},
    {"min_lr_ratio", TTT_OPT_FLOAT, "0.1", 0.0, 1.0, NULL,
     "the cosine schedule ends at this fraction of lr"},
    {"clip", TTT_OPT_FLOAT, "1.0", 0.0, 1e12, NULL,
     "clip the gradient to this global norm; 0 = off"},
    {"eval_every", TTT_OPT_INT, "0", 0, 1e12, NULL,
     "evaluate every this many steps; 0 = only at the end"},
    {"log_every", TTT_OPT_INT, "10", 1, 1e12, NULL, "a training record every this many steps"},
    {"checkpoint_every", TTT_OPT_INT, "0", 0, 1e12, NULL,
     "write a checkpoint every this many steps; 0 = only at the end"},
    {"init_from", TTT_OPT_STRING, "", TTT_NO_RANGE, NULL,
     "initial parameters from a file `ttt export` wrote or PyTorch saved in its names and "
     "layouts (docs/training.md \"Exporting to PyTorch\"); empty: the model's own "
     "initialization. A checkpoint of the run itself, when there is one, wins (resume)"},
    {"stop_at", TTT_OPT_INT, "0", 0, 1e12, NULL,
     "stop after this step as if interrupted (a checkpoint is written; run again to resume); "
     "0 = never"},
    /* The two below are validated here and shown by `ttt list`, but their defaults are not
     * written into the tree (ttt_train_config_parse, train.h). */
    {"device", TTT_OPT_STRING, "cpu", TTT_NO_RANGE, NULL,
     "where the step runs: cpu, cuda (= cuda:0) or cuda:N; cuda is refused where there is no "
     "GPU, and for mixers and layers without a device path (docs/training.md \"Device and "
     "precision\")"},
    {"dtype", TTT_OPT_CHOICE, "float32", TTT_NO_RANGE, "float32|bfloat16",
     "precision of the step: float32, or bfloat16 (cuda only: bf16 products, fp32 master "
     "weights and inner state)"},
    TTT_OPTION_END,
};

int ttt_train_parse_device(const char *text, ttt_device *d) {
    if (strcmp(text, "cpu") == 0) {
        *d = ttt_device_host();
        return 1;
    }
    if (strncmp(text, "cuda", 4) != 0) return 0;
    if (text[4] == '\0') {
        *d = ttt_device_cuda(0);
        return 1;
    }
    if (text[4] != ':' || text[5] < '0' || text[5] > '9') return 0;
    long n = 0;
    for (const char *p = text + 5; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        n = 10 * n + (*p - '0');
        if (n >= TTT_MAX_CUDA_DEVICES) return 0;
    }
    *d = ttt_device_cuda((int)n);
    return 1;
}

/* train.device and train.dtype of a checked map into c; the refusals of train.h. */
static ttt_status parse_placement(const ttt_cfg_node *map, ttt_train_config *c, ttt_error *err) {
    c->device = ttt_device_host();
    c->dtype = TTT_DTYPE_F32;
    const ttt_cfg_node *dev = ttt_cfg_get(map, "device");
    const ttt_cfg_node *dt = ttt_cfg_get(map, "dtype");
    if (dev) {
        /* the schema let only a string through; a tree it did not check still gets words */
        if (dev->kind != TTT_CFG_SCALAR || !dev->scalar)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, dev,
                                 "train.device: expected cpu, cuda or cuda:N (N a device number "
                                 "from 0)");
        if (!ttt_train_parse_device(dev->scalar, &c->device)) {
            static const char *const names[] = {"cpu", "cuda"};
            const char *close = ttt_closest_name(dev->scalar, names, 2);
            if (close)
                return ttt_cfg_error(err, TTT_ERR_CONFIG, dev,
                                     "train.device: unknown device '%s'; did you mean '%s'? "
                                     "(expected cpu, cuda or cuda:N with N from 0 to %d)",
                                     dev->scalar, close, TTT_MAX_CUDA_DEVICES - 1);
            return ttt_cfg_error(err, TTT_ERR_CONFIG, dev,
                                 "train.device: unknown device '%s'; expected cpu, cuda (the "
                                 "first GPU, cuda:0) or cuda:N with N a device number from 0 to "
                                 "%d",
                                 dev->scalar, TTT_MAX_CUDA_DEVICES - 1);
        }
        ttt_cfg_where(dev, c->device_where, sizeof c->device_where);
    }
    if (dt && dt->scalar && strcmp(dt->scalar, "bfloat16") == 0) c->dtype = TTT_DTYPE_BF16;
    if (c->dtype == TTT_DTYPE_BF16 && ttt_device_is_host(c->device))
        return ttt_cfg_error(err, TTT_ERR_CONFIG, dt,
                             "train.dtype: bfloat16 needs train.device: cuda; bfloat16 is the "
                             "GPU's mixed precision (bf16 products, fp32 master weights and "
                             "inner state) and the step on the host runs in float32: write "
                             "dtype: float32, or device: cuda on a GPU machine");
    if (!ttt_device_is_host(c->device)) {
        ttt_error e = {0};
        if (ttt_device_usable(c->device, &e) != TTT_OK)
            return ttt_cfg_error(err, TTT_ERR_CONFIG, dev,
                                 "train.device: %s; this process cannot train on it (write "
                                 "train.device: cpu, or run on a machine with the GPU and a "
                                 "build with CUDA)",
                                 e.msg);
    }
    return TTT_OK;
}

ttt_status ttt_train_device_ready(const ttt_train_config *c, const ttt_seq_model_config *mc,
                                  ttt_error *err) {
    if (ttt_device_is_host(c->device)) return TTT_OK;
    char dev[32];
    ttt_device_name(c->device, dev, sizeof dev);
    const char *at = c->device_where, *sep = c->device_where[0] ? ": " : "";
    if (c->dtype == TTT_DTYPE_BF16)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "%s%strain.dtype: bfloat16 on %s: mixed-precision training is not "
                             "implemented yet; the step runs on the device in float32 (write "
                             "train.dtype: float32); nothing was trained",
                             at, sep, dev);
    if (!mc) return TTT_OK;
    const ttt_mixer *mx = ttt_mixer_at(mc->mixer);
    char why[512];
    const char *no = !mx ? "it is not a registered mixer"
                     : !mx->device_refuse
                         ? "its block has steps without a device implementation (the softmax "
                           "and ttt mixers run on a CUDA device)"
                         : mx->device_refuse(mc, why, sizeof why);
    if (no)
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "%s%strain.device: %s: model.mixer %s does not run on a CUDA "
                             "device: %s; nothing was trained (write train.device: cpu to train "
                             "on the host)",
                             at, sep, dev, mx ? mx->name : "?", no);
    return TTT_OK;
}

ttt_status ttt_train_config_parse(ttt_cfg_node *map, ttt_train_config *c, ttt_error *err) {
    memset(c, 0, sizeof *c);
    if (map->kind != TTT_CFG_MAP)
        return ttt_cfg_error(err, TTT_ERR_CONFIG, map, "train: expected a mapping");
    /* device and dtype are checked with the rest, and their defaults taken out again when they
     * were not given (train.h) */
    const int had_device = ttt_cfg_get(map, "device") != NULL;
    const int had_dtype = ttt_cfg_get(map, "dtype") != NULL;
    ttt_status cs = ttt_cfg_check_map(map, "train", ttt_train_options, NULL, err);
    if (!had_device) ttt_cfg_map_remove(map, "device");
    if (!had_dtype) ttt_cfg_map_remove(map, "dtype");
    if (cs != TTT_OK) return cs;
    TTT_TRY(parse_placement(map, c, err));
    c->steps = ttt_cfg_int(map, "steps");
    c->batch = (int)ttt_cfg_int(map, "batch");
    c->shards = (int)ttt_cfg_int(map, "shards");
    c->threads = (int)ttt_cfg_int(map, "threads");
    if (c->shards > c->batch) c->shards = c->batch; /* a shard holds at least one sequence */
    ttt_adamw_config_default(&c->adamw);
    c->adamw.lr = ttt_cfg_float(map, "lr");
    c->adamw.beta1 = ttt_cfg_float(map, "beta1");
    c->adamw.beta2 = ttt_cfg_float(map, "beta2");
    c->adamw.eps = ttt_cfg_float(map, "eps");
    c->adamw.weight_decay = ttt_cfg_float(map, "weight_decay");
    c->adamw.warmup = ttt_cfg_int(map, "warmup");
    c->adamw.total_steps = c->steps;
    c->adamw.min_lr_ratio = ttt_cfg_float(map, "min_lr_ratio");
    c->adamw.clip_norm = ttt_cfg_float(map, "clip");
    if (c->adamw.warmup >= c->steps) c->adamw.warmup = c->steps - 1; /* T > W (adamw.h) */
    c->eval_every = ttt_cfg_int(map, "eval_every");
    c->log_every = ttt_cfg_int(map, "log_every");
    c->checkpoint_every = ttt_cfg_int(map, "checkpoint_every");
    c->stop_at = ttt_cfg_int(map, "stop_at");
    ttt_status s = ttt_adamw_config_check(&c->adamw, err);
    if (s != TTT_OK) ttt_error_prefix(err, "train");
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* Shards */

typedef struct shard {
    ttt_arena arena;
    ttt_tape tape;
    ttt_ctx ctx;
    ttt_tensor *pt;  /* parameter tensors accumulating into `grads` */
    float **grads;   /* (n_params) shard 0: the parameters' own buffers */
    ttt_seq_batch sub;
    int row0; /* first row of the batch in this shard */
    ttt_seq_stats stats;
    double loss;
    ttt_tensor *pred;
    size_t act_bytes;  /* the arena's footprint at the end of the forward (the loss) */
    size_t grad_bytes; /* arena bytes of the backward's activation gradients */
    ttt_status s;
    ttt_error err;
} shard;

typedef struct shards {
    int n, threads;
    shard *sh;
    /* Data parallelism over ranks (docs/scaling.md "Data-parallel training"): this rank computes
     * the shards first … first + n − 1 of `total`; the others come from the other ranks. Alone:
     * first = 0, total = n, comm = NULL. */
    int first, total;
    const ttt_comm *comm;
    int slots;                  /* slots per rank: the most shards any rank computes */
    size_t numel;               /* floats of one flat gradient (every parameter in order) */
    double *head_send, *head_recv; /* shard headers: (slots, 6) and (ranks, slots, 6) */
    float *gsend;               /* this rank's shard gradients, flat: (slots, numel) */
    float *acc;                 /* the chain's sum: (numel) */
    int stop_any;               /* some rank was asked to stop (agreed in the last gather) */
    const ttt_seq_model *m;
    int out_w; /* outputs per position */
    int in_dim;
    int eval_rows; /* sequences per forward in evaluation (all shards together), 0 = a batch */
} shards;

static void shards_free(shards *S) {
    for (int s = 0; S->sh && s < S->n; s++) {
        shard *h = &S->sh[s];
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

static ttt_status shards_init(shards *S, const ttt_seq_model *m, int n, int threads,
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
        shard *h = &S->sh[s];
        ttt_arena_init(&h->arena, TTT_TRAIN_ARENA_BLOCK);
        ttt_tape_init(&h->tape);
        h->tape.recycle = 1; /* only parameter gradients are read after backward */
        h->ctx = (ttt_ctx){.arena = &h->arena, .grad = 0, .tape = &h->tape};
        h->grads = ttt_fault_calloc((size_t)np, sizeof *h->grads);
        if (!h->grads) {
            shards_free(S);
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
            shards_free(S);
            return ttt_error_set(err, TTT_ERR_NOMEM, "train: out of memory for shard gradients");
        }
        ttt_seq_model_bind(m, h->pt, h->grads);
    }
    return TTT_OK;
}

/* Rows [r0, r1) of a batch. */
static ttt_seq_batch sub_batch(const ttt_seq_batch *b, int r0, int r1, int in_dim, int out_w,
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
static double batch_count(const ttt_seq_batch *b) {
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

static ttt_status gather_shards(shards *S, int n, int total, int grad, double *loss,
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
        const shard *h = &S->sh[s];
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
static ttt_status shards_init_ranks(shards *S, const ttt_seq_model *m, int total, int threads,
                                    const ttt_comm *comm, ttt_error *err) {
    const int R = comm->size, r = comm->rank;
    if (total < R)
        return ttt_error_set(err, TTT_ERR_CONFIG,
                             "train.shards is %d but the run has %d MPI ranks: each rank computes "
                             "at least one shard (set train.shards to a multiple of %d, at most "
                             "train.batch)",
                             total, R, R);
    const int first = (int)((long)total * r / R), last = (int)((long)total * (r + 1) / R);
    TTT_TRY(shards_init(S, m, last - first, threads, err));
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
        shards_free(S);
        return ttt_error_set(err, TTT_ERR_NOMEM, "train: out of memory for the gathered gradients");
    }
    return TTT_OK;
}

/* One shard's forward (and backward when grad). Everything the step allocates lives in the
 * shard's arena, so an arena that cannot grow ends the step through its escape (tensor.h): the
 * shard reports out of memory with the size that failed, and its arena and tape are released
 * (docs/design.md "Errors, memory, determinism"). */
static void shard_step(const ttt_seq_model *m, shard *h, int grad, double denom) {
    h->arena.peak = ttt_arena_footprint(&h->arena); /* this step's peak from here */
    h->act_bytes = h->grad_bytes = 0;
    ttt_arena_escape esc;
    ttt_arena_arm(&h->arena, &esc);
    if (setjmp(esc.jump) == 0) {
        ttt_tensor *l = NULL;
        h->s = ttt_seq_model_loss(&h->ctx, m, h->pt, &h->sub, denom > 0 ? denom : 1.0, &l,
                                  &h->stats, &h->pred, &h->err);
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
    /* the parameters no op wrote this step (run_shards marked them all stale) */
    if (grad)
        for (int i = 0; i < m->params.n; i++) ttt_tensor_grad_settle(&h->pt[i]);
}

/* Forward (and backward when grad) over every shard; stats summed in shard order; the shard
 * gradients are added into the parameters' in shard order. The arenas are NOT reset here (the
 * caller may read the predictions). */
static ttt_status run_shards(shards *S, const ttt_seq_batch *b, int grad, double *loss,
                             ttt_seq_stats *stats, ttt_error *err) {
    const int total = S->total < b->B ? S->total : b->B;
    int n = total - S->first; /* the shards of this rank that hold rows */
    if (n > S->n) n = S->n;
    if (n < 0) n = 0;
    const double denom = batch_count(b);
    const int vocab = S->m->cfg.io.vocab > 0;
    for (int s = 0; s < n; s++) {
        shard *h = &S->sh[s];
        const int g = S->first + s;
        int r0 = (int)((long)b->B * g / total), r1 = (int)((long)b->B * (g + 1) / total);
        h->sub = sub_batch(b, r0, r1, S->in_dim, S->out_w, vocab);
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
        shard *h = &S->sh[s];
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
static void shards_reset(shards *S) {
    for (int s = 0; s < S->n; s++) ttt_arena_reset(&S->sh[s].arena);
}

/* The step's memory, summed over the shards (train.h ttt_train_memory): kept when its arena peak
 * is the largest so far. */
static void step_memory(const shards *S, ttt_train_result *res) {
    size_t peak = 0, act = 0, grads = 0, held = 0;
    for (int i = 0; i < S->n; i++) {
        const shard *h = &S->sh[i];
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

/* Score every evaluation batch. A batch goes through the shards in parts of at most
 * S->eval_rows sequences (0: whole), each part's arenas reset before the next: a no-grad forward
 * keeps its intermediates until the reset, so a 250-sequence evaluation batch held more than a
 * training step of 64 sequences with its tape (docs/training.md "Memory of a training step").
 * The parts depend on the configuration only, never on threads or ranks. */
static ttt_status evaluate(shards *S, ttt_train_data *data, ttt_seq_stats *out, ttt_error *err) {
    memset(out, 0, sizeof *out);
    const int vocab = S->m->cfg.io.vocab > 0;
    for (int i = 0; i < data->n_eval; i++) {
        ttt_seq_batch b;
        TTT_TRY(data->eval_batch(data->user, i, &b, err));
        const int step = S->eval_rows > 0 ? S->eval_rows : b.B;
        for (int p0 = 0; p0 < b.B; p0 += step) {
            const int p1 = b.B - p0 < step ? b.B : p0 + step;
            const ttt_seq_batch part = sub_batch(&b, p0, p1, S->in_dim, S->out_w, vocab);
            double loss;
            ttt_seq_stats st;
            ttt_status s = run_shards(S, &part, 0, &loss, &st, err);
            if (s == TTT_OK && data->eval_observe) {
                const int n = S->n < part.B ? S->n : part.B;
                for (int k = 0; k < n; k++) {
                    shard *h = &S->sh[k];
                    data->eval_observe(data->user, i, p0 + h->row0, &h->sub, h->pred->data);
                }
            }
            shards_reset(S);
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
            const ttt_seq_batch part = sub_batch(&b, p0, p1, m->cfg.io.in_dim, out_w, vocab);
            double loss;
            ttt_seq_stats st;
            ttt_status s = ttt_train_dev_step(D, &part, 0, batch_count(&part), &loss, &st, err);
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

/* step_memory for the device step. */
static void step_memory_dev(const ttt_train_dev *D, ttt_train_result *res) {
    const size_t held = ttt_arena_held(&D->arena), peak = D->arena.peak;
    if (held > res->mem.arena_held) res->mem.arena_held = held;
    if (peak < res->arena_peak) return;
    res->arena_peak = peak;
    res->mem.activations = D->act_bytes;
    res->mem.act_grads = D->grad_bytes;
    res->mem.workspace =
        peak > D->act_bytes + D->grad_bytes ? peak - D->act_bytes - D->grad_bytes : 0;
}

ttt_status ttt_evaluate(const ttt_seq_model *m, ttt_train_data *data, int n_shards,
                        ttt_seq_stats *out, ttt_error *err) {
    shards S;
    ttt_blas_set_threads(1);
    TTT_TRY(shards_init(&S, m, n_shards < 1 ? 1 : n_shards, 0, err));
    ttt_status s = evaluate(&S, data, out, err);
    shards_free(&S);
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* Records: streamed to the point's journal as they happen; a checkpoint stores the journal's
 * length, not the records, so memory and checkpoints stay flat however long the run
 * (docs/hardening.md "Flat memory over long runs"). */

typedef struct trainer {
    const ttt_train_config *c;
    ttt_train_data *data;
    const ttt_train_run *run;
    ttt_seq_model *m;
    FILE *stream;    /* the journal (run->stream_path), appended */
    int stream_errno; /* the first failed write to it */
    ttt_train_dev *dev; /* the device step (train.device: cuda), or NULL on the host */
    int eval_rows;      /* sequences per evaluation forward on the device */
    /* The device run's next batch, drawn on the host while the device ran the step before it,
     * and the data state before it was drawn: what a checkpoint of that step saves. */
    ttt_seq_batch pre;
    int have_pre;
    uint64_t pre_words[64];
} trainer;

static void emit(void *user, const ttt_record *r) {
    trainer *t = user;
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
static ttt_status stream_sync(trainer *t, long long *bytes, ttt_error *err) {
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
static ttt_status stream_replay(trainer *t, long long bytes, ttt_error *err) {
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

static void record_head(const trainer *t, ttt_record *r, const char *kind, long step) {
    ttt_record_clear(r);
    ttt_record_str(r, "series", t->run->series ? t->run->series : "");
    ttt_record_num(r, "point", t->run->point);
    ttt_record_str(r, "mixer", t->run->mixer ? t->run->mixer : "");
    ttt_record_str(r, "kind", kind);
    ttt_record_num(r, "step", (double)step);
}

/* Mean loss of a stats window: per scored position, and per output for vector tasks. */
static double mean_loss(const ttt_seq_model *m, const ttt_seq_stats *s) {
    if (s->count == 0) return NAN;
    double per = m->cfg.io.vocab > 0 ? 1.0 : (double)m->cfg.io.out_dim;
    return s->loss_sum / ((double)s->count * per);
}

/* ------------------------------------------------------------------------------------------ */
/* Checkpoints */

/* The metrics window in progress (so that the first record after a resume matches). */
typedef struct window {
    ttt_seq_stats st;
    double grad_norm_sum;
    long steps;
} window;

/* What a resumed run needs besides the weights: the metrics window in progress, the last train
 * loss, the wall clock and tokens so far, and how much of the journal the checkpoint has seen. */
static ttt_status save(trainer *t, long step, const ttt_adamw *opt, const window *w,
                       const ttt_train_result *res, double elapsed, long tokens, ttt_error *err) {
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
    ttt_status s = stream_sync(t, &bytes, err);
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

/* Resume from the folder's checkpoint: TTT_OK with *step = −1 when there is none. */
/* Resume from the folder's checkpoint: TTT_OK with *step = −1 when there is none (the journal
 * is then emptied). */
static ttt_status resume(trainer *t, ttt_adamw *opt, long *step, window *w, ttt_train_result *res,
                         double *elapsed, long *tokens, ttt_error *err) {
    *step = -1;
    if (!t->run->ckpt_dir) return TTT_OK;
    uint64_t words[64] = {0};
    int64_t st = 0;
    ttt_checkpoint_info info;
    ttt_status s = ttt_checkpoint_load(t->run->ckpt_dir, &t->m->params, opt, &st, words,
                                       t->data->n_state, t->run->config_hash, &info, err);
    if (s == TTT_ERR_IO) { /* no checkpoint: a fresh start */
        ttt_error_clear(err);
        return stream_replay(t, 0, err);
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
    TTT_TRY(stream_replay(t, bytes, err));
    res->train_loss = loss;
    *elapsed = secs;
    *tokens = (long)tok;
    *step = (long)st;
    return TTT_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* The loop */

static ttt_status eval_record(trainer *t, shards *S, long step, ttt_train_result *res,
                              ttt_error *err) {
    ttt_seq_stats st;
    TTT_TRY(t->dev ? evaluate_dev(t->dev, t->data, t->eval_rows, &st, err)
                   : evaluate(S, t->data, &st, err));
    ttt_record r;
    record_head(t, &r, "eval", step);
    double l = mean_loss(t->m, &st);
    ttt_record_num(&r, "eval_loss", l);
    if (t->m->cfg.io.vocab > 0)
        ttt_record_num(&r, "eval_accuracy", st.count ? (double)st.correct / st.count : NAN);
    if (t->data->bits) ttt_record_num(&r, "eval_bpb", ttt_bits_per_byte(l));
    emit(t, &r);
    res->eval = st;
    res->eval_loss = l;
    res->eval_accuracy = st.count ? (double)st.correct / st.count : NAN;
    return TTT_OK;
}

static volatile sig_atomic_t stop_requested;

/* Ranks that run apart and share a stop (ttt_train_stop_peers), and whether they were told. */
static const ttt_comm *stop_peers;
static int stop_told;

void ttt_train_request_stop(void) { stop_requested = 1; }

const volatile sig_atomic_t *ttt_train_stop_flag(void) { return &stop_requested; }

void ttt_train_stop_peers(const ttt_comm *c) {
    if (!c && stop_peers) (void)ttt_comm_stop_heard(stop_peers); /* notices no one waits for */
    stop_peers = c && c->size > 1 ? c : NULL;
    stop_told = 0;
}

int ttt_train_stop_requested(void) {
    if (stop_peers && !omp_in_parallel() && !stop_told) { /* MPI from the main thread only */
        if (stop_requested) {
            ttt_comm_stop_notify(stop_peers);
            stop_told = 1;
        } else if (ttt_comm_stop_heard(stop_peers)) {
            stop_requested = 1;
            stop_told = 1; /* the rank that saw the signal told every rank */
        }
    }
    return stop_requested != 0;
}

ttt_status ttt_train_check_stop(ttt_error *err) {
    return ttt_train_stop_requested() ? ttt_error_set(err, TTT_ERR_INTERRUPTED, "interrupted")
                                      : TTT_OK;
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
    if (on_dev && comm) {
        char dn[32];
        return ttt_error_set(err, TTT_ERR_UNSUPPORTED,
                             "train.device: %s under %d MPI ranks: data-parallel training on "
                             "several GPUs is not implemented; run one process",
                             ttt_device_name(c->device, dn, sizeof dn), comm->size);
    }
    ttt_train_run quiet;
    if (comm && comm->rank != 0) {
        quiet = *run;
        quiet.stream_path = NULL;
        quiet.results = NULL;
        quiet.progress = NULL;
        run = &quiet;
    }
    trainer t = {.c = c, .data = data, .run = run, .m = m};
    /* parallel over shards (OpenMP), single-threaded BLAS inside: OpenBLAS's own threads lose
     * on these small matrices and fight the shard threads for the cores (docs/design.md) */
    ttt_blas_set_threads(1);
    ttt_adamw opt;
    TTT_TRY(ttt_adamw_init(&opt, &m->params, &c->adamw, err));
    shards S, E; /* E: evaluation, every shard on every rank (the same numbers everywhere) */
    memset(&E, 0, sizeof E);
    /* on a device the batch is one unit of work (train_device.h): one host shard stays for
     * the bookkeeping below, and holds no gradient of its own */
    ttt_status s = comm     ? shards_init_ranks(&S, m, c->shards, c->threads, comm, err)
                   : on_dev ? shards_init(&S, m, 1, 1, err)
                            : shards_init(&S, m, c->shards, c->threads, err);
    if (s != TTT_OK) {
        ttt_adamw_free(&opt);
        return s;
    }
    if (on_dev) {
        t.dev = ttt_fault_calloc(1, sizeof *t.dev);
        t.eval_rows = c->batch;
        s = t.dev ? ttt_train_dev_init(t.dev, m, c->device, err)
                  : ttt_error_set(err, TTT_ERR_NOMEM, "train: out of memory for the device step");
        if (s != TTT_OK) {
            free(t.dev);
            shards_free(&S);
            ttt_adamw_free(&opt);
            return s;
        }
    }
    if (comm) s = shards_init(&E, m, c->shards, c->threads, err);
    shards *ev = comm ? &E : &S;
    ev->eval_rows = c->batch; /* evaluation holds no more than a training step's forward */
    const double t_start = ttt_now();
    double t_before = 0; /* seconds of the earlier processes of a resumed run */
    window w = {0};
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
        s = resume(&t, &opt, &from, &w, res, &t_before, &tokens, err);
        if (s == TTT_OK && from >= 0) step = res->resumed_from = from;
        /* the checkpoint's weights and moments, read on the host, go up to the device */
        if (s == TTT_OK && from >= 0 && t.dev) s = ttt_train_dev_upload(t.dev, &opt, err);
    }
    if (comm) { /* every rank read the checkpoint rank 0 wrote: they must agree on the step */
        long lo, hi;
        ttt_comm_minmax(comm, s == TTT_OK ? step : -2, &lo, &hi);
        if (s == TTT_OK && lo != hi)
            s = ttt_error_set(err, TTT_ERR_IO,
                              "the MPI ranks resumed from different steps (%ld to %ld): is %s "
                              "on a file system every rank sees?",
                              lo < 0 ? 0 : lo, hi, run->ckpt_dir ? run->ckpt_dir : "the run folder");
    }
    long last_good = res->resumed_from; /* the newest checkpoint written or loaded */
    double t_win = ttt_now();
    long tok_win = 0;
    const long stop = c->stop_at > 0 && c->stop_at < c->steps ? c->stop_at : c->steps;
    while (s == TTT_OK && step < stop) {
        ttt_seq_batch b;
        if (t.have_pre) { /* drawn while the device ran the step before */
            b = t.pre;
            t.have_pre = 0;
        } else {
            s = data->next(data->user, &b, err);
        }
        if (s != TTT_OK) break;
        double loss;
        ttt_seq_stats st;
        if (t.dev) {
            s = ttt_train_dev_step(t.dev, &b, 1, batch_count(&b), &loss, &st, err);
            /* The next batch is drawn now, on the host, while the device runs this step's
             * backward (the step's ids are on the device already; b's host arrays are not read
             * again). Not before a step that evaluates or checkpoints, whose data must be the
             * step's own (an evaluation batch may share the task's buffers); a stop asked for
             * in between saves the state from before the draw (save). */
            const long nx = step + 1; /* this step's number */
            if (s == TTT_OK && nx < stop && !(c->eval_every > 0 && nx % c->eval_every == 0) &&
                !(c->checkpoint_every > 0 && nx % c->checkpoint_every == 0)) {
                TTT_ASSERT(data->n_state <= 64);
                if (data->n_state) data->get_state(data->user, t.pre_words);
                s = data->next(data->user, &t.pre, err);
                t.have_pre = s == TTT_OK;
            }
            step_memory_dev(t.dev, res);
            ttt_train_dev_reset(t.dev);
        } else {
            s = run_shards(&S, &b, 1, &loss, &st, err); /* assigns every gradient */
            step_memory(&S, res); /* before shards_reset, which may rebuild an arena */
            shards_reset(&S);
        }
        if (s != TTT_OK) break;
        const long this_step = step + 1; /* steps are counted from 1 in records */
        char where[160] = "no checkpoint was written yet";
        if (last_good >= 0)
            snprintf(where, sizeof where, "the last good checkpoint (step %ld) is in %s",
                     last_good, run->ckpt_dir);
        if (!isfinite(loss)) {
            s = ttt_error_set(err, TTT_ERR_NUMERIC,
                              "step %ld: the training loss is %s; training stopped (%s). Lower "
                              "train.lr or set train.clip",
                              this_step, isnan(loss) ? "nan" : "inf", where);
            break;
        }
        ttt_adamw_stats as = {0};
        if (t.dev) { /* the same checks and update on the device (train_device.h) */
            s = ttt_train_dev_adamw(t.dev, &opt, &m->params, &as, err);
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
            record_head(&t, &r, "train", step);
            double l = mean_loss(m, &w.st), now = ttt_now();
            ttt_record_num(&r, "loss", l);
            if (m->cfg.io.vocab > 0)
                ttt_record_num(&r, "accuracy",
                               w.st.count ? (double)w.st.correct / w.st.count : NAN);
            if (data->bits) ttt_record_num(&r, "loss_bpb", ttt_bits_per_byte(l));
            ttt_record_num(&r, "grad_norm", w.grad_norm_sum / (double)w.steps);
            ttt_record_num(&r, "lr", as.lr);
            ttt_record_num(&r, "tokens_per_s", now > t_win ? tok_win / (now - t_win) : 0.0);
            emit(&t, &r);
            res->train_loss = l;
            memset(&w, 0, sizeof w);
            t_win = now;
            tok_win = 0;
        }
        if (c->eval_every > 0 && step % c->eval_every == 0 && step != c->steps)
            s = eval_record(&t, ev, step, res, err);
        if (s == TTT_OK && ((c->checkpoint_every > 0 && step % c->checkpoint_every == 0) ||
                            step == stop)) {
            s = save(&t, step, &opt, &w, res, t_before + ttt_now() - t_start, tokens, err);
            if (comm && !ttt_comm_all(comm, s == TTT_OK) && s == TTT_OK)
                s = ttt_error_set(err, TTT_ERR_IO, "step %ld: rank 0 could not save the "
                                  "checkpoint (its message is on its stderr)", step);
            if (s == TTT_OK) last_good = step;
        }
        /* under MPI the ranks agree on a stop in the gather (one may see the signal late) */
        const int stop_now = comm ? S.stop_any : ttt_train_stop_requested();
        if (run->progress) ttt_progress_update(run->progress, run->work_done + step, run->series);
        if (s == TTT_OK && stop_now && step < stop) {
            if (last_good != step) {
                s = save(&t, step, &opt, &w, res, t_before + ttt_now() - t_start, tokens, err);
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
        s = eval_record(&t, ev, step, res, err);
    }
    /* over the whole run, also when it was resumed (a run resumed from its final checkpoint
     * reports what the run that wrote it measured, plus the final evaluation) */
    res->seconds = t_before + ttt_now() - t_start;
    res->tokens_per_s = res->seconds > 0 ? tokens / res->seconds : 0;
    if (t.stream) {
        long long bytes;
        if (s == TTT_OK) s = stream_sync(&t, &bytes, err);
        fclose(t.stream);
    }
    if (t.dev) { /* the trained weights to the host model, which the caller reads */
        if (s == TTT_OK) s = ttt_train_dev_download(t.dev, &m->params, NULL, err);
        ttt_train_dev_free(t.dev);
        free(t.dev);
    }
    shards_free(&S);
    if (comm) shards_free(&E);
    ttt_adamw_free(&opt);
    return s;
}

