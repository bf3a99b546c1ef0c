/* The `equivalence` task: run two computation forms of the same layer side by side on the same
 * random inputs and report how far apart their outputs and final states are, and how long each
 * took (docs/math.md §5–§6). The first form is the reference (by default the recurrence, which is the
 * definition). */
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include "layer.h"
#include "task.h"
#include "train.h"

/* The first block of the task's arena (bytes): the estimate counts it. */
#define EQUIVALENCE_ARENA_BLOCK ((size_t)1 << 22)

static const ttt_option equivalence_options[] = {
    {"reference", TTT_OPT_STRING, "recurrent", TTT_NO_RANGE, NULL,
     "the form compared against (a form name of `ttt list`)"},
    {"candidate", TTT_OPT_STRING, "auto", TTT_NO_RANGE, NULL,
     "the form under test (auto: the form auto chooses for these inputs)"},
    {"tokens", TTT_OPT_INT, "256", 1, 1 << 24, NULL, "sequence length T"},
    {"key_dim", TTT_OPT_INT, "64", 1, 4096, NULL, "key dimension d_k"},
    {"value_dim", TTT_OPT_INT, "64", 1, 4096, NULL, "value dimension d_v"},
    {"heads", TTT_OPT_INT, "1", 1, 1024, NULL, "independent heads (sequences) per measurement"},
    {"gates", TTT_OPT_CHOICE, "none", TTT_NO_RANGE, "none|scalar|vector",
     "per-token decay: none (the layer's constant decay), random per token, or per key dim"},
    {"eta", TTT_OPT_CHOICE, "random", TTT_NO_RANGE, "one|random",
     "per-token learning rates: all 1, or uniform in (0, 1)"},
    {"repeats", TTT_OPT_INT, "3", 1, 1000, NULL, "timing repeats (the fastest is reported)"},
    TTT_OPTION_END,
};

/* Bytes of the inputs and outputs equivalence_run allocates for H heads of T tokens: q, k, v,
 * the gates and learning rates, two outputs and two final states per head. */
static double inputs_bytes(double T, double dk, double dv, double H) {
    return 4.0 * H * (T * (3 * dk + 3 * dv + dk + 1) + 3.0 * dk * dv);
}

/* The parsed configuration of a point. */
typedef struct equivalence_cfg {
    ttt_layer L;        /* built for d_k = key_dim, d_v = value_dim */
    const char *forms[2]; /* reference, candidate: "auto" or a registry form name (static) */
    int T, dk, dv, H, repeats;
    const char *gates;  /* "none" | "scalar" | "vector" (static strings) */
    int eta_random;     /* eta: random */
} equivalence_cfg;

/* The static spelling of a validated choice (the tree's text must not be kept). */
static const char *gates_name(const char *g) {
    return strcmp(g, "vector") == 0 ? "vector" : strcmp(g, "scalar") == 0 ? "scalar" : "none";
}

static ttt_status equivalence_parse(void *cfg, const ttt_cfg_node *root, ttt_cfg_node *sections,
                                    ttt_error *err) {
    equivalence_cfg *c = cfg;
    const ttt_cfg_node *task = ttt_cfg_get(root, "task");
    c->T = (int)ttt_cfg_int(task, "tokens");
    c->dk = (int)ttt_cfg_int(task, "key_dim");
    c->dv = (int)ttt_cfg_int(task, "value_dim");
    c->H = (int)ttt_cfg_int(task, "heads");
    c->repeats = (int)ttt_cfg_int(task, "repeats");
    c->gates = gates_name(ttt_cfg_str(task, "gates"));
    c->eta_random = strcmp(ttt_cfg_str(task, "eta"), "random") == 0;
    ttt_layer L;
    ttt_cfg_node *layer_r = NULL;
    TTT_TRY(ttt_layer_parse_section(ttt_cfg_get(root, "layer"), c->dk, c->dv, 0, &L, &layer_r,
                                    err));
    ttt_cfg_map_set(sections, "layer", layer_r);
    c->L = L;
    static const char *const keys[] = {"reference", "candidate"};
    const char **forms = c->forms;
    for (int i = 0; i < 2; i++) {
        const ttt_cfg_node *n = ttt_cfg_get(task, keys[i]);
        if (!n->scalar || (strcmp(n->scalar, "auto") != 0 && !ttt_form_known(n->scalar)))
            return ttt_cfg_error(err, TTT_ERR_CONFIG, n, "task.%s: expected one of %s", keys[i],
                                 ttt_form_choices());
        /* the registry's own string: the tree is freed after planning */
        forms[i] = "auto";
        for (int j = 0; j < ttt_form_count(); j++)
            if (strcmp(ttt_form_at(j)->form, n->scalar) == 0) forms[i] = ttt_form_at(j)->form;
        L.form = forms[i];
        const char *why = ttt_form_unavailable(&L);
        if (why) return ttt_cfg_error(err, TTT_ERR_CONFIG, n, "task.%s: %s", keys[i], why);
    }
    /* Refuse sizes the machine cannot hold now, before any point runs (the parallel form alone
     * needs T² floats). The two forms run one after the other, so the larger scratch counts. */
    const long T = ttt_cfg_int(task, "tokens");
    double scratch = 0;
    for (int i = 0; i < 2; i++) {
        L.form = forms[i];
        const double b = ttt_layer_forward_bytes(&L, T);
        if (b > scratch) scratch = b;
    }
    const double H = (double)ttt_cfg_int(task, "heads");
    /* ... in an arena that holds at least its first block */
    const double bytes = inputs_bytes((double)T, L.d_k, L.d_v, H) + ttt_layer_state_bytes(&L) +
                         scratch + (double)EQUIVALENCE_ARENA_BLOCK;
    char where[512], what[768];
    snprintf(what, sizeof what,
             "%s: the equivalence task (tokens %ld, heads %ld, key_dim %d, value_dim %d, forms %s "
             "and %s)",
             ttt_cfg_where(task, where, sizeof where), T, ttt_cfg_int(task, "heads"), L.d_k,
             L.d_v, forms[0], forms[1]);
    return ttt_size_check(bytes, what, err);
}

static long equivalence_work(const void *cfg) {
    return 2L * ((const equivalence_cfg *)cfg)->repeats;
}

/* Run one form on every head; returns the fastest wall time over the repeats. */
static ttt_status run_form(ttt_ctx *ctx, const ttt_layer *L, ttt_tensor **o, ttt_tensor **S,
                           ttt_tensor *const *q, ttt_tensor *const *k, ttt_tensor *const *v,
                           ttt_tensor *const *eta, ttt_tensor *const *la, int heads, int repeats,
                           ttt_task_run *run, double *seconds, ttt_error *err) {
    double best = INFINITY;
    ttt_rng rng;
    ttt_rng_seed(&rng, 0);
    for (int r = 0; r < repeats; r++) {
        double t0 = ttt_now();
        for (int h = 0; h < heads; h++) {
            if (ttt_ctx_stopped(ctx)) return ttt_error_set(err, TTT_ERR_INTERRUPTED, "interrupted");
            ttt_layer_state st;
            ttt_arena_mark m = ttt_arena_mark_get(ctx->arena);
            ttt_layer_state_init(ctx, L, &st, &rng);
            TTT_TRY(ttt_layer_forward(ctx, L, o[h], &st, q[h], k[h], v[h], eta[h], la[h], err));
            memcpy(S[h]->data, st.W[0]->data, S[h]->n * sizeof(float));
            ttt_arena_release(ctx->arena, m);
        }
        double dt = ttt_now() - t0;
        if (dt < best) best = dt;
        ttt_progress_update(run->progress, ++run->work_done, run->label);
        TTT_TRY(ttt_train_check_stop(err)); /* docs/hardening.md "Signals" */
    }
    *seconds = best;
    return TTT_OK;
}

static ttt_status equivalence_body(ttt_task_run *run, ttt_arena *arena, ttt_error *err) {
    const equivalence_cfg *c = run->cfg;
    const int T = c->T, dk = c->dk, dv = c->dv, H = c->H, repeats = c->repeats;
    const char *gates = c->gates;
    ttt_layer L = c->L;
    /* a stop ends a form's run within a token (ttt_ctx.stop; docs/hardening.md "Signals") */
    ttt_ctx ctx = {.arena = arena, .stop = ttt_train_stop_flag()};
    ttt_rng rng;
    ttt_rng_seed(&rng, run->seed);
    ttt_tensor *q[1024], *k[1024], *v[1024], *eta[1024], *la[1024];
    ttt_tensor *o[2][1024], *S[2][1024];
    const int delta = !L.loss->z_free; /* the delta rule (residual loss), not Hebbian writes */
    for (int h = 0; h < H; h++) {
        q[h] = ttt_tensor_2d(&ctx, T, dk);
        k[h] = ttt_tensor_2d(&ctx, T, dk);
        v[h] = ttt_tensor_2d(&ctx, T, dv);
        ttt_rng_fill_normal(&rng, q[h]->data, q[h]->n, 0.0f, 1.0f / sqrtf((float)dk));
        ttt_rng_fill_normal(&rng, k[h]->data, k[h]->n, 0.0f, 1.0f);
        ttt_rng_fill_normal(&rng, v[h]->data, v[h]->n, 0.0f, 1.0f);
        /* unit keys: the delta rule's step is stable for β‖k‖² ≤ 2, and linear attention's state
         * stays O(T) rather than O(T·d) */
        ttt_tensor *kn = ttt_l2norm_rows(&ctx, k[h], 1e-12f);
        memcpy(k[h]->data, kn->data, kn->n * sizeof(float));
        eta[h] = NULL;
        if (c->eta_random) {
            eta[h] = ttt_tensor_1d(&ctx, T);
            ttt_rng_fill_uniform(&rng, eta[h]->data, (size_t)T, delta ? 0.05f : 0.5f, 1.0f);
        }
        la[h] = NULL;
        if (strcmp(gates, "none") != 0) {
            la[h] = strcmp(gates, "vector") == 0 ? ttt_tensor_2d(&ctx, T, dk) : ttt_tensor_1d(&ctx, T);
            /* retentions in [0.9, 1): memory over tens of tokens, no underflow in float32 */
            ttt_rng_fill_uniform(&rng, la[h]->data, la[h]->n, logf(0.9f), -1e-4f);
        }
        for (int f = 0; f < 2; f++) {
            o[f][h] = ttt_tensor_2d(&ctx, T, dv);
            S[f][h] = ttt_tensor_2d(&ctx, L.d_phi, dv); /* rows: the feature width */
        }
    }
    double secs[2];
    ttt_status s = TTT_OK;
    const char *form_name[2];
    for (int f = 0; f < 2 && s == TTT_OK; f++) {
        L.form = c->forms[f];
        /* the form that runs for these inputs (auto chooses per call) */
        const ttt_form_inputs in = {.T = T, .eta = eta[0] != NULL,
                                    .gate = strcmp(gates, "vector") == 0 ? TTT_FORM_GATE_KEY
                                            : strcmp(gates, "none") != 0 || L.decay != 1.0f
                                                ? TTT_FORM_GATE_TOKEN
                                                : TTT_FORM_GATE_NONE};
        form_name[f] = ttt_layer_form_used(&L, &in);
        s = run_form(&ctx, &L, o[f], S[f], q, k, v, eta, la, H, repeats, run, &secs[f], err);
    }
    if (s == TTT_OK) {
        double max_abs = 0, num = 0, den = 0, smax = 0;
        for (int h = 0; h < H; h++) {
            for (size_t i = 0; i < o[0][h]->n; i++) {
                double d = fabs((double)o[1][h]->data[i] - o[0][h]->data[i]);
                if (d > max_abs || isnan(d)) max_abs = d;
                num += d * d;
                den += (double)o[0][h]->data[i] * o[0][h]->data[i];
            }
            double ds = ttt_max_abs_diff(S[1][h], S[0][h]);
            if (ds > smax || isnan(ds)) smax = ds;
        }
        ttt_record rec;
        ttt_record_clear(&rec);
        ttt_record_str(&rec, "series", run->label[0] ? run->label : form_name[1]);
        char name[128];
        ttt_record_str(&rec, "layer", ttt_layer_describe(&L, name, sizeof name));
        ttt_record_str(&rec, "reference", form_name[0]);
        ttt_record_str(&rec, "candidate", form_name[1]);
        ttt_record_str(&rec, "gates", gates);
        ttt_record_num(&rec, "T", T);
        ttt_record_num(&rec, "heads", H);
        ttt_record_num(&rec, "chunk", L.chunk);
        ttt_record_num(&rec, "max_abs_err", max_abs);
        ttt_record_num(&rec, "rel_rms_err", den > 0 ? sqrt(num / den) : sqrt(num));
        ttt_record_num(&rec, "state_max_abs_err", smax);
        ttt_record_num(&rec, "ref_seconds", secs[0]);
        ttt_record_num(&rec, "cand_seconds", secs[1]);
        ttt_record_num(&rec, "speedup", secs[1] > 0 ? secs[0] / secs[1] : 0);
        ttt_results_add(run->results, &rec, 1);
    }
    return s;
}

/* Everything the comparison allocates lives in the arena, so an arena that cannot grow ends it
 * through the arena's escape (tensor.h) as an error. */
static ttt_status armed_body(ttt_task_run *run, ttt_arena *arena, ttt_error *err) {
    ttt_arena_escape esc;
    ttt_status s;
    ttt_arena_arm(arena, &esc);
    if (setjmp(esc.jump) == 0)
        s = equivalence_body(run, arena, err);
    else
        s = ttt_error_set(err, TTT_ERR_NOMEM,
                          "equivalence task: out of memory for %zu bytes of tensors",
                          arena->failed_bytes);
    ttt_arena_disarm(arena);
    return s;
}

static ttt_status equivalence_run(ttt_task_run *run, ttt_error *err) {
    const equivalence_cfg *c = run->cfg;
    TTT_TRY(ttt_size_check(inputs_bytes(c->T, c->dk, c->dv, c->H),
                           "the equivalence task's inputs", err));
    if (c->H > 1024) return ttt_error_set(err, TTT_ERR_RANGE, "task.heads: at most 1024");
    ttt_arena arena;
    ttt_arena_init(&arena, EQUIVALENCE_ARENA_BLOCK);
    ttt_status s = armed_body(run, &arena, err);
    ttt_arena_free(&arena);
    return s;
}

static void equivalence_charts(ttt_results *res, const void *cfg) {
    (void)cfg;
    ttt_chart c = ttt_chart_make("error", "Relative RMS difference from the reference form", "T",
                                 "rel_rms_err", "series", "tokens T", "relative RMS error");
    c.log_x = 1;
    ttt_results_add_chart(res, &c);
    ttt_chart d = ttt_chart_make("speedup", "Speed-up over the reference form", "T", "speedup",
                                 "series", "tokens T", "reference time / candidate time");
    d.log_x = 1;
    d.y_from_zero = 1;
    ttt_results_add_chart(res, &d);
    ttt_results_set_main(res, "rel_rms_err", "T");
}

static const char *const equivalence_columns[] = {
    "layer", "gates", "reference", "candidate", "T", "max_abs_err", "rel_rms_err",
    "state_max_abs_err", "ref_seconds", "cand_seconds", "speedup", NULL};

/* The `task:` section from what equivalence_parse read. */
static ttt_status equivalence_section(const void *cfg, const ttt_cfg_node *given,
                                      ttt_cfg_node **out, ttt_error *err) {
    const equivalence_cfg *c = cfg;
    const ttt_task_value v[] = {
        {.key = "reference", .text = c->forms[0]},
        {.key = "candidate", .text = c->forms[1]},
        {.key = "tokens", .number = c->T},
        {.key = "key_dim", .number = c->dk},
        {.key = "value_dim", .number = c->dv},
        {.key = "heads", .number = c->H},
        {.key = "gates", .text = c->gates},
        {.key = "eta", .text = c->eta_random ? "random" : "one"},
        {.key = "repeats", .number = c->repeats},
    };
    return ttt_task_section(equivalence_options, given, v, (int)(sizeof v / sizeof *v), out,
                            err);
}

const ttt_task ttt_task_equivalence = {
    .name = "equivalence",
    .help = "run two computation forms of a layer side by side: max error and time",
    .options = equivalence_options,
    .cfg_size = sizeof(equivalence_cfg),
    .parse = equivalence_parse,
    .section = equivalence_section,
    .work = equivalence_work,
    .run = equivalence_run,
    .columns = equivalence_columns,
    .charts = equivalence_charts,
    .tiny = "task: {kind: equivalence, tokens: 32, key_dim: 8, value_dim: 8, repeats: 1}\n"
            "layer: {preset: linear_attention, chunk: 8}\n",
};
