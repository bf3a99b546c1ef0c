/* The `softmax_approx` task: how well random-feature linear attention imitates softmax attention
 * (docs/math.md "Random features"). On the same q, k, v, exact causal softmax attention with the
 * 1/√d scale, o = softmax(q kᵀ/√d) v, against normalized linear attention (normalize: ratio)
 * with each feature map of the registry (layers/forms/linear_attention/feature_maps.h) and m
 * features; the relative error ‖o_φ − o‖_F / ‖o‖_F, averaged over `seeds` random matrices
 * (feature_seed = 0 … seeds − 1). Maps without a random matrix (elu1) do not depend on m or the
 * seed: they are measured once per m, as a reference line.
 *
 * Inputs: rows of q and k of norm radius·d^{1/4} in uniformly random directions, so that the
 * softmax logits are qᵀk/√d = radius²·cos θ; v ~ N(0, 1). At radius 1 every random map
 * estimates softmax's kernel exactly in expectation; rfa sees directions only (it estimates
 * exp(q̂ᵀk̂), the kernel at radius 1), so at another radius its error does not vanish as m grows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feature_maps.h"
#include "layer.h"
#include "softmax_attention.h"
#include "task.h"
#include "train.h"

static const ttt_option softmax_approx_options[] = {
    {"tokens", TTT_OPT_INT, "256", 1, 1 << 16, NULL, "sequence length T"},
    {"key_dim", TTT_OPT_INT, "16", 1, 1024, NULL, "key dimension d of q and k"},
    {"value_dim", TTT_OPT_INT, "16", 1, 4096, NULL, "value dimension"},
    {"features", TTT_OPT_INT_LIST, "[8, 16, 32, 64, 128, 256, 512, 1024]", 1, 65536, NULL,
     "numbers of random features m (one measurement each)"},
    {"seeds", TTT_OPT_INT, "8", 1, 10000, NULL,
     "random matrices (feature_seed 0 … seeds-1) averaged per m"},
    {"radius", TTT_OPT_FLOAT, "1.0", 0.0, 100.0, NULL,
     "norm of the rows of q and k, in units of d^(1/4): softmax logits are radius^2 cos(angle)"},
    TTT_OPTION_END,
};

typedef struct softmax_approx_cfg {
    int T, d, dv, seeds;
    double radius;
    long *features; /* (n_features) malloc'd */
    int n_features;
} softmax_approx_cfg;

static void softmax_approx_cfg_free(void *cfg) {
    softmax_approx_cfg *c = cfg;
    free(c->features);
    c->features = NULL;
}

/* Bytes of one measurement: q, k, v, two outputs, and the layer's state and scratch. */
static double measure_bytes(const ttt_layer *L, int T, int d, int dv) {
    const double floats = (double)T * (2.0 * d + 3.0 * dv) + (double)T * T;
    return floats * sizeof(float) + ttt_layer_state_bytes(L) + ttt_layer_forward_bytes(L, T);
}

/* The layer of one measurement: linear attention's tuple with the ratio and the map. */
static ttt_status build_layer(ttt_layer *L, const ttt_feature_map *fm, long m, int seed, int d,
                              int dv, ttt_error *err) {
    ttt_layer_desc desc;
    ttt_layer_desc_init(&desc);
    desc.preset = "linear_attention";
    desc.normalize = "ratio";
    desc.feature_map = fm->name;
    desc.features = (int)m;
    desc.feature_seed = seed;
    return ttt_layer_build(&desc, d, dv, L, err);
}

static ttt_status softmax_approx_parse(void *cfg, const ttt_cfg_node *root, ttt_cfg_node *sections,
                                       ttt_error *err) {
    softmax_approx_cfg *c = cfg;
    (void)sections; /* it reads no section through another owner */
    const ttt_cfg_node *task = ttt_cfg_get(root, "task");
    c->T = (int)ttt_cfg_int(task, "tokens");
    c->d = (int)ttt_cfg_int(task, "key_dim");
    c->dv = (int)ttt_cfg_int(task, "value_dim");
    c->seeds = (int)ttt_cfg_int(task, "seeds");
    c->radius = ttt_cfg_float(task, "radius");
    TTT_TRY(ttt_task_read_ints(task, "features", &c->features, &c->n_features, err));
    /* every layer the run will build must build, and the largest must fit */
    const ttt_cfg_node *fnode = ttt_cfg_get(task, "features");
    for (int i = 0; i < c->n_features; i++)
        for (int j = 0; j < ttt_feature_map_count(); j++) {
            ttt_layer L;
            char where[512], what[768];
            const ttt_cfg_node *at = fnode->kind == TTT_CFG_SEQ ? fnode->items[i] : fnode;
            ttt_error e2 = {0};
            if (build_layer(&L, ttt_feature_map_at(j), c->features[i], 0, c->d, c->dv, &e2) !=
                TTT_OK)
                return ttt_cfg_error(err, e2.status, at, "task.features: %s", e2.msg);
            snprintf(what, sizeof what, "%s: task.features = %ld (feature map %s, tokens %d)",
                     ttt_cfg_where(at, where, sizeof where), c->features[i],
                     ttt_feature_map_at(j)->name, c->T);
            TTT_TRY(ttt_size_check(measure_bytes(&L, c->T, c->d, c->dv), what, err));
        }
    return TTT_OK;
}

static long softmax_approx_work(const void *cfg) {
    const softmax_approx_cfg *c = cfg;
    return (long)c->n_features * ttt_feature_map_count();
}

static double rel_error(const float *got, const float *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = (double)got[i] - want[i];
        num += e * e;
        den += (double)want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The task's measurements on one arena (softmax_approx_run). */
typedef struct approx_work {
    ttt_task_run *run;
    ttt_ctx *ctx;
} approx_work;

static ttt_status approx_measure(void *arg, ttt_error *err) {
    const approx_work *w = arg;
    ttt_task_run *run = w->run;
    const softmax_approx_cfg *c = run->cfg;
    const int T = c->T, d = c->d, dv = c->dv;
    ttt_ctx ctx = *w->ctx;
    ttt_arena *const a = ctx.arena;
    ttt_rng rng;
    ttt_rng_seed(&rng, run->seed);
    /* q, k: random directions scaled to radius·d^{1/4}; v ~ N(0, 1) */
    ttt_tensor *q = ttt_tensor_2d(&ctx, T, d), *k = ttt_tensor_2d(&ctx, T, d);
    ttt_tensor *v = ttt_tensor_2d(&ctx, T, dv), *o_sm = ttt_tensor_2d(&ctx, T, dv);
    ttt_tensor *o = ttt_tensor_2d(&ctx, T, dv);
    ttt_rng_fill_normal(&rng, q->data, q->n, 0.0f, 1.0f);
    ttt_rng_fill_normal(&rng, k->data, k->n, 0.0f, 1.0f);
    ttt_rng_fill_normal(&rng, v->data, v->n, 0.0f, 1.0f);
    const double r = c->radius * pow((double)d, 0.25);
    for (int t = 0; t < 2 * T; t++) {
        float *x = (t < T ? q->data : k->data) + (size_t)(t % T) * d;
        double nn = 0;
        for (int i = 0; i < d; i++) nn += (double)x[i] * x[i];
        for (int i = 0; i < d; i++) x[i] = (float)(x[i] * r / sqrt(nn));
    }
    ttt_softmax_attention(&ctx, o_sm->data, q->data, k->data, v->data, NULL,
                          (float)(1.0 / sqrt((double)d)), T, d, dv);
    ttt_status s = TTT_OK;
    long done = run->work_done;
    for (int j = 0; j < ttt_feature_map_count() && s == TTT_OK; j++) {
        const ttt_feature_map *fm = ttt_feature_map_at(j);
        const int random = fm->rows(1) > 0, seeds = random ? c->seeds : 1;
        for (int i = 0; i < c->n_features && s == TTT_OK; i++) {
            const long m = c->features[i];
            double sum = 0, sum2 = 0, worst = 0;
            const double t0 = ttt_now();
            for (int sd = 0; sd < seeds && s == TTT_OK; sd++) {
                ttt_layer L;
                s = build_layer(&L, fm, m, sd, d, dv, err);
                if (s != TTT_OK) break;
                ttt_arena_mark mk = ttt_arena_mark_get(a);
                ttt_layer_state st;
                ttt_layer_state_init(&ctx, &L, &st, NULL);
                s = ttt_layer_forward(&ctx, &L, o, &st, q, k, v, NULL, NULL, err);
                ttt_arena_release(a, mk);
                const double e = rel_error(o->data, o_sm->data, o->n);
                sum += e;
                sum2 += e * e;
                if (e > worst || isnan(e)) worst = e;
                if (s == TTT_OK) s = ttt_train_check_stop(err); /* docs/hardening.md "Signals" */
            }
            if (s != TTT_OK) break;
            ttt_progress_update(run->progress, ++done, run->label);
            const double mean = sum / seeds, var = fmax(0.0, sum2 / seeds - mean * mean);
            char series[256];
            if (run->label[0])
                snprintf(series, sizeof series, "%s (%s)", fm->name, run->label);
            else
                snprintf(series, sizeof series, "%s", fm->name);
            ttt_record rec;
            ttt_record_clear(&rec);
            ttt_record_str(&rec, "series", series);
            ttt_record_num(&rec, "point", run->point);
            ttt_record_str(&rec, "feature_map", fm->name);
            ttt_record_num(&rec, "m", (double)m);
            ttt_record_num(&rec, "width", fm->width(d, (int)m));
            ttt_record_num(&rec, "T", T);
            ttt_record_num(&rec, "d", d);
            ttt_record_num(&rec, "radius", c->radius);
            ttt_record_num(&rec, "seeds", seeds);
            ttt_record_num(&rec, "rel_err", mean);
            ttt_record_num(&rec, "rel_err_sd", sqrt(var));
            ttt_record_num(&rec, "rel_err_max", worst);
            ttt_record_num(&rec, "log10_rel_err", log10(mean));
            ttt_record_num(&rec, "seconds", ttt_now() - t0);
            ttt_results_add(run->results, &rec, 1);
        }
    }
    return s;
}

static ttt_status softmax_approx_run(ttt_task_run *run, ttt_error *err) {
    ttt_arena arena;
    ttt_arena_init(&arena, 1 << 20);
    ttt_ctx ctx = {.arena = &arena};
    approx_work w = {.run = run, .ctx = &ctx};
    /* armed: tensors that cannot be had end the point with TTT_ERR_NOMEM (docs/hardening.md
     * "Out of memory"); the records already added stay */
    ttt_status s = ttt_arena_run(&arena, approx_measure, &w, "softmax_approx", err);
    ttt_arena_free(&arena);
    return s;
}

static void softmax_approx_charts(ttt_results *res, const void *cfg) {
    (void)cfg;
    ttt_chart c = {.log_x = 1, .y_from_zero = 1};
    snprintf(c.name, sizeof c.name, "rel_err");
    snprintf(c.title, sizeof c.title,
             "Random-feature attention vs softmax attention: relative error of the output");
    snprintf(c.x_key, sizeof c.x_key, "m");
    snprintf(c.y_key, sizeof c.y_key, "rel_err");
    snprintf(c.series_key, sizeof c.series_key, "series");
    snprintf(c.x_label, sizeof c.x_label, "random features m");
    snprintf(c.y_label, sizeof c.y_label, "||o_phi - o_softmax|| / ||o_softmax|| (mean)");
    ttt_results_add_chart(res, &c);
    ttt_chart l = c;
    l.y_from_zero = 0;
    snprintf(l.name, sizeof l.name, "log10_rel_err");
    snprintf(l.title, sizeof l.title, "The same error on a log scale (slope -1/2: Monte Carlo)");
    snprintf(l.y_key, sizeof l.y_key, "log10_rel_err");
    snprintf(l.y_label, sizeof l.y_label, "log10 relative error");
    ttt_results_add_chart(res, &l);
}

static const char *const softmax_approx_columns[] = {
    "feature_map", "radius", "m", "width", "rel_err", "rel_err_sd", "rel_err_max", NULL};

/* The `task:` section from what softmax_approx_parse read. */
static ttt_status softmax_approx_section(const void *cfg, const ttt_cfg_node *given,
                                         ttt_cfg_node **out, ttt_error *err) {
    const softmax_approx_cfg *c = cfg;
    const ttt_task_value v[] = {
        {.key = "tokens", .number = c->T},
        {.key = "key_dim", .number = c->d},
        {.key = "value_dim", .number = c->dv},
        {.key = "features", .list = c->features, .n = c->n_features},
        {.key = "seeds", .number = c->seeds},
        {.key = "radius", .number = c->radius},
    };
    return ttt_task_section(softmax_approx_options, given, v, (int)(sizeof v / sizeof *v), out,
                            err);
}

const ttt_task ttt_task_softmax_approx = {
    .name = "softmax_approx",
    .help = "random-feature linear attention against exact softmax attention: relative error "
            "of the output vs the number of features",
    .options = softmax_approx_options,
    .cfg_size = sizeof(softmax_approx_cfg),
    .parse = softmax_approx_parse,
    .section = softmax_approx_section,
    .cfg_free = softmax_approx_cfg_free,
    .work = softmax_approx_work,
    .run = softmax_approx_run,
    .columns = softmax_approx_columns,
    .charts = softmax_approx_charts,
    .tiny = "task: {kind: softmax_approx, tokens: 16, key_dim: 4, value_dim: 4, features: [4, 8], "
            "seeds: 2}\n",
};
