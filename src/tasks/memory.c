/* The `memory` task (docs/math.md §7). */
#include "memory.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "task.h"
#include "train.h"

static void fill_unit_rows(ttt_rng *rng, float *x /* (n, d) */, int n, int d,
                           const float *common /* (d) or NULL */, float rho) {
    float a = sqrtf(rho), b = sqrtf(1.0f - rho);
    for (int i = 0; i < n; i++) {
        float *r = x + (size_t)i * d;
        double ss = 0;
        for (int j = 0; j < d; j++) {
            float g = (float)ttt_rng_normal(rng);
            r[j] = common ? a * common[j] + b * g : g;
            ss += (double)r[j] * r[j];
        }
        float inv = (float)(1.0 / sqrt(ss > 0 ? ss : 1.0));
        for (int j = 0; j < d; j++) r[j] *= inv;
    }
}

static ttt_status memory_eval(ttt_ctx *ctx, const ttt_layer *L, const ttt_memory_spec *spec,
                              ttt_rng *rng, ttt_memory_result *out, ttt_error *err);

/* The measurement allocates only in the arena, so an arena that cannot grow ends it through the
 * arena's escape (tensor.h) as an error, with the arena released to where it was. */
ttt_status ttt_memory_eval(ttt_ctx *ctx, const ttt_layer *L, const ttt_memory_spec *spec,
                           ttt_rng *rng, ttt_memory_result *out, ttt_error *err) {
    ttt_arena *a = ctx->arena;
    ttt_arena_escape *const outer = a->escape;
    const ttt_arena_mark mark = ttt_arena_mark_get(a);
    ttt_arena_escape esc;
    ttt_status s;
    ttt_arena_arm(a, &esc);
    if (setjmp(esc.jump) == 0) {
        s = memory_eval(ctx, L, spec, rng, out, err);
    } else {
        ttt_arena_release(a, mark);
        s = ttt_error_set(err, TTT_ERR_NOMEM,
                          "memory task: out of memory for %zu bytes of tensors (N = %d)",
                          a->failed_bytes, spec->n_pairs);
    }
    a->escape = outer;
    return s;
}

static ttt_status memory_eval(ttt_ctx *ctx, const ttt_layer *L, const ttt_memory_spec *spec,
                              ttt_rng *rng, ttt_memory_result *out, ttt_error *err) {
    const int N = spec->n_pairs, dk = spec->d_k, dv = spec->d_v;
    const int T = spec->overwrite ? 2 * N : N;
    ttt_arena_mark mark = ttt_arena_mark_get(ctx->arena);

    ttt_tensor *common = ttt_tensor_1d(ctx, dk);
    ttt_rng_fill_normal(rng, common->data, (size_t)dk, 0.0f, 1.0f);
    ttt_tensor *keys = ttt_tensor_2d(ctx, N, dk);  /* (N, d_k) */
    fill_unit_rows(rng, keys->data, N, dk, spec->correlation > 0 ? common->data : NULL,
                   spec->correlation);
    /* candidates: the values in the order written; the latest value of key i is row
     * (overwrite ? N + i : i) */
    ttt_tensor *cand = ttt_tensor_2d(ctx, T, dv); /* (T, d_v) */
    fill_unit_rows(rng, cand->data, T, dv, NULL, 0.0f);

    ttt_tensor *k = ttt_tensor_2d(ctx, T, dk); /* the write stream (T, d_k) */
    for (int t = 0; t < T; t++)
        memcpy(k->data + (size_t)t * dk, keys->data + (size_t)(t % N) * dk, dk * sizeof(float));
    ttt_tensor *o = ttt_tensor_2d(ctx, T, dv);
    ttt_layer_state st;
    ttt_layer_state_init(ctx, L, &st, rng);
    ttt_status s = ttt_layer_forward(ctx, L, o, &st, k, k, cand, NULL, NULL, err);
    if (s != TTT_OK) {
        ttt_arena_release(ctx->arena, mark);
        return s;
    }
    if (ttt_ctx_stopped(ctx)) { /* the read-out below is one more pass over the memory */
        ttt_arena_release(ctx->arena, mark);
        return ttt_error_set(err, TTT_ERR_INTERRUPTED, "interrupted");
    }
    /* Query every stored key with the final fast weights. */
    ttt_tensor *pred = ttt_tensor_2d(ctx, N, dv); /* (N, d_v) */
    s = ttt_layer_read(ctx, L, &st, pred, keys, err);
    if (s != TTT_OK) {
        ttt_arena_release(ctx->arena, mark);
        return s;
    }
    ttt_tensor *sim = ttt_matmul(ctx, pred, 0, cand, 1); /* (N, T) */
    double err_sum = 0;
    int hits = 0;
    for (int i = 0; i < N; i++) {
        int target = spec->overwrite ? N + i : i;
        const float *p = pred->data + (size_t)i * dv, *v = cand->data + (size_t)target * dv;
        double e = 0, vv = 0;
        for (int j = 0; j < dv; j++) {
            double d = (double)p[j] - v[j];
            e += d * d;
            vv += (double)v[j] * v[j];
        }
        err_sum += e / vv;
        const float *row = sim->data + (size_t)i * T;
        int best = 0;
        for (int j = 1; j < T; j++)
            if (row[j] > row[best]) best = j;
        hits += best == target;
    }
    out->recall_error = sqrt(err_sum / N);
    out->accuracy = (double)hits / N;
    ttt_arena_release(ctx->arena, mark);
    if (!isfinite(out->recall_error))
        return ttt_error_set(err, TTT_ERR_NUMERIC,
                             "memory task: the recall error is not finite (N = %d); the inner "
                             "learning rate is probably too large for these keys",
                             N);
    return TTT_OK;
}

/* ---- the task as registered ---- */

static const ttt_option memory_options[] = {
    {"pairs", TTT_OPT_INT_LIST, "[16, 32, 64, 128, 256]", 1, 1e6, NULL,
     "numbers of key/value pairs N written (one measurement each)"},
    {"key_dim", TTT_OPT_INT, "64", 1, 4096, NULL, "key dimension d_k"},
    {"value_dim", TTT_OPT_INT, "64", 1, 4096, NULL, "value dimension d_v"},
    {"correlation", TTT_OPT_FLOAT, "0.0", 0.0, 0.99, NULL,
     "pairwise correlation of the keys before normalization"},
    {"overwrite", TTT_OPT_BOOL, "false", TTT_NO_RANGE, NULL,
     "write every key a second time with a new value; recall the new one"},
    {"trials", TTT_OPT_INT, "4", 1, 10000, NULL, "independent draws averaged per N"},
    TTT_OPTION_END,
};

/* Bytes one measurement with N pairs takes (ttt_memory_eval): the keys, the candidates, the write
 * stream, the outputs, the predictions, the (N, T) similarity matrix, read-out temporaries (an
 * MLP's hidden layer is 4 times wider), the state and the layer's own scratch over T tokens. */
/* The first block of the task's arena (bytes), which the estimate counts too. */
#define MEMORY_ARENA_BLOCK ((size_t)1 << 20)

static double memory_bytes(const ttt_layer *L, long N, int overwrite) {
    const double dk = L->d_k, dv = L->d_v, n = (double)N, T = overwrite ? 2.0 * n : n;
    const double floats = dk + n * dk + T * dv + T * dk + T * dv + n * dv + n * T +
                          4.0 * n * (dk + dv);
    return floats * sizeof(float) + ttt_layer_state_bytes(L) +
           ttt_layer_forward_bytes(L, overwrite ? 2 * N : N) + (double)MEMORY_ARENA_BLOCK;
}

static void memory_cfg_free(void *cfg) {
    ttt_memory_cfg *c = cfg;
    free(c->pairs);
    c->pairs = NULL;
}

static ttt_status memory_parse(void *cfg, const ttt_cfg_node *root, ttt_cfg_node *sections,
                               ttt_error *err) {
    ttt_memory_cfg *c = cfg;
    const ttt_cfg_node *task = ttt_cfg_get(root, "task");
    c->spec = (ttt_memory_spec){
        .d_k = (int)ttt_cfg_int(task, "key_dim"),
        .d_v = (int)ttt_cfg_int(task, "value_dim"),
        .correlation = (float)ttt_cfg_float(task, "correlation"),
        .overwrite = ttt_cfg_bool(task, "overwrite"),
    };
    c->trials = (int)ttt_cfg_int(task, "trials");
    ttt_cfg_node *layer_r = NULL;
    TTT_TRY(ttt_layer_parse_section(ttt_cfg_get(root, "layer"), c->spec.d_k, c->spec.d_v, 0,
                                    &c->L, &layer_r, err));
    ttt_cfg_map_set(sections, "layer", layer_r);
    TTT_TRY(ttt_task_read_ints(task, "pairs", &c->pairs, &c->n_pairs, err));
    /* Refuse the largest N now, before any point runs, rather than abort in an allocation hours
     * into a sweep. */
    const ttt_cfg_node *pairs = ttt_cfg_get(task, "pairs"), *largest = NULL;
    long n_max = 0;
    for (int p = 0; p < c->n_pairs; p++)
        if (c->pairs[p] > n_max) {
            n_max = c->pairs[p];
            largest = pairs->items[p];
        }
    if (!largest) return TTT_OK;
    char where[512], what[768];
    snprintf(what, sizeof what, "%s: task.pairs = %ld (key_dim %d, value_dim %d, form %s)",
             ttt_cfg_where(largest, where, sizeof where), n_max, c->L.d_k, c->L.d_v,
             c->L.form);
    return ttt_size_check(memory_bytes(&c->L, n_max, c->spec.overwrite), what, err);
}

static long memory_work(const void *cfg) {
    const ttt_memory_cfg *c = cfg;
    return (long)c->n_pairs * c->trials;
}

static ttt_status memory_run(ttt_task_run *run, ttt_error *err) {
    const ttt_memory_cfg *c = run->cfg;
    ttt_memory_spec spec = c->spec;
    const int trials = c->trials;
    const ttt_layer L = c->L;
    ttt_arena arena;
    ttt_arena_init(&arena, MEMORY_ARENA_BLOCK);
    /* a stop ends the writes within a token (ttt_ctx.stop; docs/hardening.md "Signals") */
    ttt_ctx ctx = {.arena = &arena, .grad = 0, .stop = ttt_train_stop_flag()};
    ttt_rng base;
    ttt_rng_seed(&base, run->seed);
    ttt_status s = TTT_OK;
    long done = run->work_done;
    char layer_name[128];
    ttt_layer_describe(&L, layer_name, sizeof layer_name);
    for (int p = 0; p < c->n_pairs && s == TTT_OK; p++) {
        const long N = c->pairs[p];
        spec.n_pairs = (int)N;
        double t_start = ttt_now(), err_sum = 0, acc_sum = 0;
        for (int tr = 0; tr < trials && s == TTT_OK; tr++) {
            /* The data depend on (seed, N, trial) only, so every sweep point sees the same keys
             * and values: differences between points are differences between layers. */
            ttt_rng rng = ttt_rng_fork(&base, (uint64_t)N * 100003u + (uint64_t)tr);
            ttt_memory_result r;
            s = ttt_memory_eval(&ctx, &L, &spec, &rng, &r, err);
            if (s != TTT_OK) break; /* r holds nothing (an error, or a stop inside the trial) */
            err_sum += r.recall_error;
            acc_sum += r.accuracy;
            ttt_progress_update(run->progress, ++done, run->label);
            if (s == TTT_OK) s = ttt_train_check_stop(err); /* docs/hardening.md "Signals" */
        }
        if (s != TTT_OK) break;
        ttt_record rec;
        ttt_record_clear(&rec);
        ttt_record_str(&rec, "series", run->label[0] ? run->label : layer_name);
        ttt_record_num(&rec, "point", run->point);
        ttt_record_str(&rec, "layer", layer_name);
        /* the form the writes ran in (no η, no gates but the constant decay) */
        const ttt_form_inputs in = ttt_form_inputs_plain(&L, (long)N, 0);
        ttt_record_str(&rec, "form", ttt_layer_form_used(&L, &in));
        ttt_record_str(&rec, "overwrite", spec.overwrite ? "true" : "false");
        ttt_record_num(&rec, "N", (double)N);
        ttt_record_num(&rec, "d_k", spec.d_k);
        ttt_record_num(&rec, "recall_error", err_sum / trials);
        ttt_record_num(&rec, "accuracy", acc_sum / trials);
        /* The Hebbian crosstalk prediction: with unit keys each other pair adds noise of
         * variance 1/d_k, so the relative error is about sqrt((N−1)/d_k) (docs/math.md §7). */
        ttt_record_num(&rec, "hebbian_theory", sqrt((double)(N - 1) / spec.d_k));
        ttt_record_num(&rec, "seconds", ttt_now() - t_start);
        ttt_results_add(run->results, &rec, 1);
    }
    ttt_arena_free(&arena);
    return s;
}

static int memory_hebbian(const ttt_memory_cfg *mc) {
    /* a Hebbian write: a linear map and a loss whose gradient does not depend on the weights
     * (the model's and the loss's own traits, model.h), no forgetting, uncorrelated keys */
    return (mc->L.model->traits & TTT_MODEL_LINEAR_MAP) && mc->L.loss->z_free &&
           mc->L.decay == 1.0f && mc->spec.correlation == 0;
}

static void memory_charts(ttt_results *res, const void *cfg) {
    const ttt_memory_cfg *mc = cfg;
    ttt_chart c = ttt_chart_make("accuracy", "Top-1 retrieval accuracy vs stored pairs", "N",
                                 "accuracy", "series", "pairs written N", "top-1 accuracy");
    c.log_x = 1;
    c.y_from_zero = 1;
    c.log_y = TTT_LOG_Y_OFF; /* a fraction: its linear scale is the one to read */
    ttt_results_add_chart(res, &c);

    ttt_chart e = ttt_chart_make("recall_error", "Recall error vs stored pairs", "N",
                                 "recall_error", "series", "pairs written N",
                                 "relative RMS recall error");
    e.log_x = 1;
    e.y_from_zero = 1;
    /* The crosstalk law holds for the Hebbian memory (a linear model, dot loss, no decay) and
     * uncorrelated keys written once: the other N − 1 pairs add noise of variance 1/d each
     * (docs/math.md §7.1); for the delta rule it predicts nothing, so it is drawn only when the
     * run's (first) layer is Hebbian, and labelled as the docs write it. */
    if (memory_hebbian(mc)) {
        e.has_ref = 1;
        e.ref_scale = 1.0;
        e.ref_shift = 1.0;
        e.ref_div = (double)mc->spec.d_k;
        snprintf(e.ref_label, sizeof e.ref_label, "sqrt((N−1)/d), Hebbian theory (d = %d)",
                 mc->spec.d_k);
    }
    ttt_results_add_chart(res, &e);
    ttt_results_set_main(res, "accuracy", "N");
}

static const char *const memory_columns[] = {"layer", "overwrite", "N", "recall_error", "hebbian_theory",
                                             "accuracy", NULL};

/* The `task:` section from what memory_parse read. */
static ttt_status memory_section(const void *cfg, const ttt_cfg_node *given, ttt_cfg_node **out,
                                 ttt_error *err) {
    const ttt_memory_cfg *c = cfg;
    const ttt_task_value v[] = {
        {.key = "pairs", .list = c->pairs, .n = c->n_pairs},
        {.key = "key_dim", .number = c->spec.d_k},
        {.key = "value_dim", .number = c->spec.d_v},
        {.key = "correlation", .number = c->spec.correlation, .single = 1},
        {.key = "overwrite", .number = c->spec.overwrite},
        {.key = "trials", .number = c->trials},
    };
    return ttt_task_section(memory_options, given, v, (int)(sizeof v / sizeof *v), out, err);
}

const ttt_task ttt_task_memory = {
    .columns = memory_columns,
    .name = "memory",
    .help = "write N key/value pairs, query the stored keys: recall error and top-1 accuracy",
    .options = memory_options,
    .cfg_size = sizeof(ttt_memory_cfg),
    .parse = memory_parse,
    .section = memory_section,
    .cfg_free = memory_cfg_free,
    .work = memory_work,
    .run = memory_run,
    .charts = memory_charts,
    .tiny = "task: {kind: memory, pairs: [4, 8], key_dim: 8, value_dim: 8, trials: 1}\n"
            "layer: {preset: deltanet}\n",
};
