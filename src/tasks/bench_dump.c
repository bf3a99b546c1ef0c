/* The benchmark's dumps: one training step's inputs, loss and gradients, or N steps of training. */
#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "autograd.h"
#include "blas.h"
#include "fault.h"
#include "data.h"
#include "mixer.h"
#include "seqmodel.h"
#include "rng.h"
#include "safetensors.h"
#include "task.h"
#include "trained.h"
#include "layer.h"
#include "diagonal.h"
#include "scan.h"
#include "bench_internal.h"

static const char *strlist_add(ttt_bench_strlist *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const char *strlist_add(ttt_bench_strlist *l, const char *fmt, ...) {
    if (l->oom) return NULL;
    if (l->n == l->cap) {
        const int cap = l->cap ? 2 * l->cap : 64;
        char **p = ttt_fault_realloc(l->s, sizeof *p * (size_t)cap);
        if (!p) {
            l->oom = 1;
            return NULL;
        }
        l->s = p;
        l->cap = cap;
    }
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    const int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *str = len >= 0 ? ttt_fault_malloc((size_t)len + 1) : NULL;
    if (str) vsnprintf(str, (size_t)len + 1, fmt, ap2);
    va_end(ap2);
    if (!str) {
        l->oom = 1;
        return NULL;
    }
    return l->s[l->n++] = str;
}

static void strlist_free(ttt_bench_strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    memset(l, 0, sizeof *l);
}

/* Metadata "<prefix><key>" = value for every scalar of a resolved configuration map, one level
 * of nested maps as "<prefix><key>.<subkey>" (layer.optimizer). */
void ttt_bench_meta_from_map(ttt_bench_strlist *meta, const char *prefix, const ttt_cfg_node *map,
                             int depth) {
    for (int i = 0; map && map->kind == TTT_CFG_MAP && i < map->n; i++) {
        const ttt_cfg_node *v = map->items[i];
        if (v->kind == TTT_CFG_SCALAR) {
            strlist_add(meta, "%s%s", prefix, map->keys[i]);
            strlist_add(meta, "%s", v->scalar ? v->scalar : "");
        } else if (v->kind == TTT_CFG_MAP && depth == 0) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s%s.", prefix, map->keys[i]);
            ttt_bench_meta_from_map(meta, sub, v, 1);
        }
    }
}

/* The metadata of a dump: the resolved model.*, layer.* and train.* values, what the model
 * resolved, the task's MQAR settings and seed, the scored positions of the (first) batch, and
 * which parameters AdamW decays. */
static void dump_meta(ttt_bench_strlist *meta, const ttt_task_run *run,
                      const ttt_seq_model_config *mc, const ttt_seq_model *m, long scored) {
    const ttt_bench_cfg *bc = run->cfg;
    const int np = m->params.n;
    for (int i = 0; i < bc->n_meta; i++) strlist_add(meta, "%s", bc->meta[i]);
    /* the values the model resolved (head_dim 0 = d_model / heads; form auto) */
    strlist_add(meta, "resolved.head_dim");
    strlist_add(meta, "%d", mc->head_dim);
    strlist_add(meta, "resolved.form");
    strlist_add(meta, "%s", ttt_bench_uses_layer(mc) ? ttt_bench_train_form_used(mc) : "");
    strlist_add(meta, "resolved.chunk");
    strlist_add(meta, "%d", mc->layer.chunk);
    strlist_add(meta, "resolved.theta");
    strlist_add(meta, "%.9g", (double)mc->layer.lr);
    strlist_add(meta, "task.vocab");
    strlist_add(meta, "%d", bc->vocab);
    strlist_add(meta, "task.pairs");
    strlist_add(meta, "%d", bc->pairs);
    strlist_add(meta, "seed");
    strlist_add(meta, "%llu", (unsigned long long)run->seed);
    if (scored >= 0) {
        strlist_add(meta, "scored");
        strlist_add(meta, "%ld", scored);
    }
    /* AdamW's weight decay applies to the parameters marked 1 (params.h), in order */
    char *decay = ttt_fault_malloc((size_t)np + 1);
    if (!decay) {
        meta->oom = 1;
    } else {
        for (int i = 0; i < np; i++) decay[i] = m->params.p[i]->decay ? '1' : '0';
        decay[np] = 0;
        strlist_add(meta, "param_decay");
        strlist_add(meta, "%s", decay);
        free(decay);
    }
}

/* `dump: true`: the model at initialization, the first batch, the mean loss over its scored
 * positions and every parameter's gradient of it, computed by the model's own forward and
 * backward on one shard (the trainer's step sums the same gradient over its shards). */
/* The loss and its backward of ttt_bench_dump_train_step, under ttt_arena_run. */
typedef struct dump_step {
    ttt_ctx *ctx;
    const ttt_seq_model *m;
    const ttt_seq_batch *b;
    ttt_tensor *loss;
    ttt_seq_stats stats;
} dump_step;

static ttt_status dump_step_work(void *arg, ttt_error *err) {
    dump_step *w = arg;
    TTT_TRY(ttt_seq_model_loss(w->ctx, w->m, NULL, w->b, 0.0, &w->loss, &w->stats, NULL, err));
    ttt_backward(w->ctx, w->loss);
    return TTT_OK;
}

ttt_status ttt_bench_dump_train_step(const ttt_task_run *run, const ttt_seq_model_config *mc,
                                  const ttt_seq_batch *b, ttt_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/train_step_point%d_L%d.safetensors", run->run_dir,
             run->point, b->T);
    ttt_seq_model m;
    TTT_TRY(ttt_seq_model_init(&m, mc, run->seed, err));
    ttt_arena arena;
    ttt_tape tape;
    ttt_arena_init(&arena, (size_t)16 << 20);
    ttt_tape_init(&tape);
    ttt_ctx ctx = {.arena = &arena, .grad = 1, .tape = &tape};
    dump_step w = {.ctx = &ctx, .m = &m, .b = b};
    /* armed: the step's tensors that cannot be had end in TTT_ERR_NOMEM */
    ttt_status s = ttt_arena_run(&arena, dump_step_work, &w, "benchmark: the dumped step", err);
    const int np = m.params.n, nt = 2 * np + 3;
    const size_t cells = (size_t)b->B * b->T;
    ttt_st_tensor *ts = ttt_fault_calloc((size_t)nt, sizeof *ts);
    float *ids = ttt_fault_malloc(sizeof(float) * 2 * cells);
    ttt_bench_strlist names = {0}, meta = {0};
    if (s == TTT_OK && (!ts || !ids))
        s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory for the dump");
    if (s == TTT_OK) {
        for (int i = 0; i < np; i++) {
            const ttt_param *p = m.params.p[i];
            for (int g = 0; g < 2; g++) {
                ttt_st_tensor *t = &ts[2 * i + g];
                t->name = (char *)strlist_add(&names, "%s.%s", g ? "grad" : "param", p->name);
                t->ndim = p->ndim;
                for (int d = 0; d < p->ndim; d++) t->shape[d] = p->shape[d];
                t->data = g ? p->grad : p->data;
            }
        }
        for (size_t i = 0; i < cells; i++) {
            ids[i] = (float)b->tokens[i];
            ids[cells + i] = (float)b->labels[i];
        }
        ts[2 * np] = (ttt_st_tensor){.name = "tokens", .ndim = 2, .shape = {b->B, b->T},
                                     .data = ids};
        ts[2 * np + 1] = (ttt_st_tensor){.name = "labels", .ndim = 2, .shape = {b->B, b->T},
                                         .data = ids + cells};
        ts[2 * np + 2] = (ttt_st_tensor){.name = "loss", .ndim = 0, .data = w.loss->data};
        dump_meta(&meta, run, mc, &m, w.stats.count);
        if (names.oom || meta.oom)
            s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory for the dump");
    }
    if (s == TTT_OK)
        s = ttt_st_write(path, ts, nt, (const char *const *)meta.s, meta.n / 2, err);
    strlist_free(&names);
    strlist_free(&meta);
    free(ts);
    free(ids);
    ttt_tape_free(&tape);
    ttt_arena_free(&arena);
    ttt_seq_model_free(&m);
    if (s != TTT_OK) ttt_error_prefix(err, "benchmark: dump");
    return s;
}

/* `dump_steps: N`: a fresh model (the same seed, so the same initial parameters as `dump`)
 * trained by the trainer itself (ttt_train: zero grad, forward, backward, clipping, AdamW) for N
 * steps on N fresh MQAR batches, one shard on one thread, with the `train:` section's AdamW and
 * clipping and the schedule of a run of N steps (warm-up train.warmup capped at N − 1, cosine
 * down to min_lr_ratio · lr at step N; adamw.h). The trainer's record of every step (log_every 1)
 * gives its loss, learning rate and gradient norm. Writes
 * <run folder>/train_steps_point<i>_L<L>.safetensors: "param.<name>" at initialization,
 * "final.<name>" after step N, "tokens" and "labels" (N, B, L) as floats (−1 = not scored),
 * "loss", "lr" and "grad_norm" (N), with dump's metadata plus parity.steps and parity.warmup
 * (docs/training.md "Training parity with PyTorch"). */
ttt_status ttt_bench_dump_train_steps(const ttt_task_run *run, const ttt_seq_model_config *mc,
                                   const ttt_train_config *base, const ttt_mqar_config *mq,
                                   ttt_error *err) {
    const ttt_bench_cfg *bc = run->cfg;
    const int N = bc->dump_steps, B = base->batch, L = mq->seq_len;
    char path[4096];
    snprintf(path, sizeof path, "%s/train_steps_point%d_L%d.safetensors", run->run_dir,
             run->point, L);
    ttt_bench_train_feed feed = {.B = B, .n_batches = N};
    ttt_rng root;
    ttt_rng_seed(&root, run->seed);
    ttt_rng r = ttt_rng_fork(&root, ttt_hash_str("benchmark/parity"));
    TTT_TRY(ttt_mqar_make_set(&feed.set, mq, N * B, &r, err));
    ttt_seq_model m;
    ttt_status s = ttt_seq_model_init(&m, mc, run->seed, err);
    if (s != TTT_OK) {
        ttt_token_set_free(&feed.set);
        return s;
    }
    const int np = m.params.n, nt = 2 * np + 5;
    const size_t cells = (size_t)N * B * L;
    float **init = calloc((size_t)np, sizeof *init); /* init[i]: (params.p[i]->n) */
    float *curves = malloc(sizeof(float) * (3 * (size_t)N + 2 * cells));
    ttt_st_tensor *ts = calloc((size_t)nt, sizeof *ts);
    ttt_results *res = ttt_results_new("parity");
    ttt_bench_strlist names = {0}, meta = {0};
    if (!init || !curves || !ts || !res)
        s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory for dump_steps");
    for (int i = 0; i < np && s == TTT_OK; i++) {
        const ttt_param *p = m.params.p[i];
        init[i] = malloc(sizeof(float) * p->n);
        if (!init[i]) s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory");
        else memcpy(init[i], p->data, sizeof(float) * p->n);
    }
    ttt_train_config tc = *base;
    tc.steps = N;
    tc.threads = tc.shards = 1;
    tc.log_every = 1;
    tc.eval_every = tc.checkpoint_every = tc.stop_at = 0;
    tc.adamw.total_steps = N;
    if (tc.adamw.warmup >= N) tc.adamw.warmup = N - 1; /* as a run of N steps (train_config.c) */
    if (s == TTT_OK) {
        ttt_train_data data = {.user = &feed, .next = ttt_bench_feed_next};
        const ttt_train_run tr = {.config_hash = "", .series = "", .mixer = "", .results = res};
        ttt_train_result tres;
        s = ttt_train(&m, &tc, &data, &tr, &tres, err);
    }
    float *loss = curves, *lr = curves + N, *gn = curves + 2 * N, *ids = curves + 3 * N;
    for (int i = 0; s == TTT_OK && i < 3 * N; i++) curves[i] = NAN;
    for (int i = 0; s == TTT_OK && i < ttt_results_count(res); i++) {
        const ttt_record *rec = ttt_results_get(res, i);
        const ttt_field *kind = ttt_record_get(rec, "kind"), *step = ttt_record_get(rec, "step");
        if (!kind || strcmp(kind->str, "train") != 0 || !step) continue;
        const long k = (long)step->num - 1;
        if (k < 0 || k >= N) continue;
        const ttt_field *fl = ttt_record_get(rec, "loss"), *fr = ttt_record_get(rec, "lr"),
                        *fg = ttt_record_get(rec, "grad_norm");
        if (fl && fr && fg) {
            loss[k] = (float)fl->num;
            lr[k] = (float)fr->num;
            gn[k] = (float)fg->num;
        }
    }
    for (int i = 0; s == TTT_OK && i < N; i++)
        if (isnan(lr[i]))
            s = ttt_error_set(err, TTT_ERR_UNSUPPORTED, "benchmark: dump_steps: the trainer "
                                                        "recorded no step %d", i + 1);
    if (s == TTT_OK) {
        for (int i = 0; i < np; i++) {
            const ttt_param *p = m.params.p[i];
            for (int g = 0; g < 2; g++) {
                ttt_st_tensor *t = &ts[2 * i + g];
                t->name = (char *)strlist_add(&names, "%s.%s", g ? "final" : "param", p->name);
                t->ndim = p->ndim;
                for (int d = 0; d < p->ndim; d++) t->shape[d] = p->shape[d];
                t->data = g ? p->data : init[i];
            }
        }
        for (size_t i = 0; i < cells; i++) {
            ids[i] = (float)feed.set.tokens[i];
            ids[cells + i] = (float)feed.set.labels[i];
        }
        ts[2 * np] = (ttt_st_tensor){.name = "tokens", .ndim = 3, .shape = {N, B, L}, .data = ids};
        ts[2 * np + 1] = (ttt_st_tensor){.name = "labels", .ndim = 3, .shape = {N, B, L},
                                         .data = ids + cells};
        ts[2 * np + 2] = (ttt_st_tensor){.name = "loss", .ndim = 1, .shape = {N}, .data = loss};
        ts[2 * np + 3] = (ttt_st_tensor){.name = "lr", .ndim = 1, .shape = {N}, .data = lr};
        ts[2 * np + 4] = (ttt_st_tensor){.name = "grad_norm", .ndim = 1, .shape = {N},
                                         .data = gn};
        dump_meta(&meta, run, mc, &m, -1);
        strlist_add(&meta, "parity.steps");
        strlist_add(&meta, "%d", N);
        strlist_add(&meta, "parity.warmup");
        strlist_add(&meta, "%ld", tc.adamw.warmup);
        if (names.oom || meta.oom)
            s = ttt_error_set(err, TTT_ERR_NOMEM, "benchmark: out of memory for the dump");
    }
    if (s == TTT_OK)
        s = ttt_st_write(path, ts, nt, (const char *const *)meta.s, meta.n / 2, err);
    strlist_free(&names);
    strlist_free(&meta);
    if (res) ttt_results_free(res);
    free(ts);
    free(curves);
    for (int i = 0; init && i < np; i++) free(init[i]);
    free(init);
    ttt_seq_model_free(&m);
    ttt_token_set_free(&feed.set);
    if (s != TTT_OK) ttt_error_prefix(err, "benchmark: dump_steps");
    return s;
}
