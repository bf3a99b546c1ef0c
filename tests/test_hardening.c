/* Hardening guarantees (docs/hardening.md), each checked here so that it can fail:
 *   1. every numeric option has a range, its default is inside it, and a value outside it is
 *      refused with a located message (through every option table, and end to end through
 *      --set); NaN and Inf spellings in YAML are refused;
 *   2. sizes the machine cannot hold are refused before anything is allocated, with the amount
 *      they would need (memory and equivalence tasks at `ttt check` time, `ttt apply` for the
 *      state and for the forms' scratch, sweeps that would copy too much);
 *   3. NaN and Inf in input tensors are reported with the tensor and the index, and outputs that
 *      overflowed float32 inside the layer are reported instead of written.
 * The sizes in (2) are chosen far beyond any machine (terabytes), so the tests do not depend on
 * the memory of the machine that runs them; an unchecked allocation of that size would abort the
 * test (the kernels assert on a failed arena allocation), which Check reports as a failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apply.h"
#include "finite.h"
#include "experiment.h"
#include "seqmodel.h"
#include "safetensors.h"
#include "task.h"
#include "testutil.h"
#include "train.h"
#include "internal.h"
#include "mixer.h"

/* ------------------------------------------------------------------------------------------ */
/* 1. numeric options                                                                          */

typedef struct table {
    const char *path; /* where the options live, for messages */
    const ttt_option *opts;
} table;

/* Every option table the program validates against. */
static int all_tables(table *out, int cap) {
    int n = 0;
    out[n++] = (table){"(top level)", ttt_experiment_options};
    out[n++] = (table){"layer", ttt_layer_options};
    out[n++] = (table){"model", ttt_seq_model_options};
    out[n++] = (table){"train", ttt_train_options};
    for (int i = 0; i < ttt_optim_count() && n < cap; i++)
        out[n++] = (table){ttt_optim_at(i)->name, ttt_optim_at(i)->options};
    for (int i = 0; i < ttt_task_count() && n < cap; i++)
        out[n++] = (table){ttt_task_at(i)->name, ttt_task_at(i)->options};
    for (int i = 0; i < ttt_mixer_count() && n < cap; i++)
        if (ttt_mixer_at(i)->options)
            out[n++] = (table){ttt_mixer_at(i)->name, ttt_mixer_at(i)->options};
    ck_assert_int_lt(n, cap);
    return n;
}

static int is_numeric(const ttt_option *o) {
    return o->type == TTT_OPT_INT || o->type == TTT_OPT_FLOAT || o->type == TTT_OPT_INT_LIST ||
           o->type == TTT_OPT_FLOAT_LIST;
}

static int is_int(const ttt_option *o) {
    return o->type == TTT_OPT_INT || o->type == TTT_OPT_INT_LIST;
}

/* A mapping holding `key: text` plus a valid value for every other required option of opts. */
static ttt_cfg_node *map_with(const ttt_option *opts, const char *key, const char *text) {
    char yaml[512];
    int w = snprintf(yaml, sizeof yaml, "%s: %s\n", key, text);
    for (const ttt_option *o = opts; o->name; o++) {
        if (o->def || o->type == TTT_OPT_MAP || strcmp(o->name, key) == 0) continue;
        const char *v = "x"; /* a required string or name */
        char num[64];
        if (is_numeric(o)) {
            snprintf(num, sizeof num, "%.17g", o->min);
            v = num;
        } else if (o->type == TTT_OPT_BOOL) {
            v = "false";
        } else if (o->type == TTT_OPT_CHOICE) {
            static char first[64];
            snprintf(first, sizeof first, "%s", o->choices);
            char *bar = strchr(first, '|');
            if (bar) *bar = '\0';
            v = first;
        }
        w += snprintf(yaml + w, sizeof yaml - (size_t)w, "%s: %s\n", o->name, v);
    }
    ttt_cfg_node *m = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(yaml, "probe.yaml", &m, &err) == TTT_OK, "%s", err.msg);
    return m;
}

/* Every numeric option has a range (min <= max), finite bounds, and a default inside it. */
START_TEST(every_numeric_option_has_a_range) {
    table t[64];
    int n = all_tables(t, 64), checked = 0;
    for (int i = 0; i < n; i++)
        for (const ttt_option *o = t[i].opts; o->name; o++) {
            if (!is_numeric(o)) continue;
            ck_assert_msg(o->min <= o->max,
                          "%s.%s is a number without a range (TTT_NO_RANGE); give it min and max",
                          t[i].path, o->name);
            ck_assert_msg(isfinite(o->min) && isfinite(o->max), "%s.%s: range not finite",
                          t[i].path, o->name);
            checked++;
            if (!o->def) continue;
            ttt_cfg_node *m = map_with(t[i].opts, o->name, o->def);
            ttt_error err = {0};
            ttt_status s = ttt_cfg_check_map(m, t[i].path, t[i].opts, NULL, &err);
            ck_assert_msg(s == TTT_OK, "%s.%s: the default %s is refused: %s", t[i].path,
                          o->name, o->def, err.msg);
            ttt_cfg_free(m);
        }
    /* experiment, layer, model, train, 5 optimizers and 6 tasks hold far more than this */
    ck_assert_int_ge(checked, 40);
}
END_TEST

/* A value just outside either end of every range is refused as TTT_ERR_RANGE naming the option
 * and the range, at the value's location; the ends themselves are accepted. */
START_TEST(out_of_range_values_are_refused) {
    table t[64];
    int n = all_tables(t, 64);
    for (int i = 0; i < n; i++)
        for (const ttt_option *o = t[i].opts; o->name; o++) {
            if (!is_numeric(o)) continue;
            /* integers: the next integer out; numbers: one unit (or 1e-3 of the bound) out */
            const double bad[2] = {o->min - fmax(1.0, fabs(o->min) * 1e-3),
                                   o->max + fmax(1.0, fabs(o->max) * 1e-3)};
            for (int b = 0; b < 2; b++) {
                char text[64];
                if (is_int(o)) /* in integers: 2^53 + 1 is not a double */
                    snprintf(text, sizeof text, "%lld",
                             b ? (long long)o->max + 1 : (long long)o->min - 1);
                else
                    snprintf(text, sizeof text, "%.17g", bad[b]);
                ttt_cfg_node *m = map_with(t[i].opts, o->name, text);
                ttt_error err = {0};
                ttt_status s = ttt_cfg_check_map(m, t[i].path, t[i].opts, NULL, &err);
                ck_assert_msg(s == TTT_ERR_RANGE, "%s.%s = %s: expected a range error, got %d (%s)",
                              t[i].path, o->name, text, (int)s, err.msg);
                ck_assert_msg(strstr(err.msg, "probe.yaml:1:") && strstr(err.msg, o->name) &&
                                  strstr(err.msg, "out of range; expected"),
                              "%s.%s: %s", t[i].path, o->name, err.msg);
                ttt_cfg_free(m);
            }
            for (int b = 0; b < 2; b++) {
                char text[64];
                snprintf(text, sizeof text, is_int(o) ? "%.0f" : "%.17g", b ? o->max : o->min);
                ttt_cfg_node *m = map_with(t[i].opts, o->name, text);
                ttt_error err = {0};
                ttt_status s = ttt_cfg_check_map(m, t[i].path, t[i].opts, NULL, &err);
                ck_assert_msg(s == TTT_OK, "%s.%s = %s (a bound) refused: %s", t[i].path,
                              o->name, text, err.msg);
                ttt_cfg_free(m);
            }
        }
}
END_TEST

static const char *const base_memory =
    "task: {kind: memory, pairs: [4], key_dim: 4, value_dim: 4, trials: 1}\n";

/* Load `yaml` with one --set; returns the status and fills err. */
static ttt_status load_with(const char *yaml, const char *set, ttt_error *err) {
    ttt_experiment *e = NULL;
    const char *sets[1] = {set};
    ttt_status s = ttt_experiment_load_string(yaml, "exp.yaml", sets, set ? 1 : 0, &e, err);
    ttt_experiment_free(e);
    return s;
}

/* End to end through the path `ttt run` takes: the message names the --set that gave it. */
START_TEST(set_out_of_range_end_to_end) {
    static const char *const cases[][2] = {
        {"layer.optimizer.lr=-0.5", "layer.optimizer.lr: -0.5 is out of range"},
        {"layer.mini_batch=0", "layer.mini_batch: 0 is out of range; expected an integer from 1"},
        {"layer.chunk=2000000", "layer.chunk: 2000000 is out of range"},
        {"task.pairs=[4, 0]", "task.pairs[1]: 0 is out of range"},
        {"task.correlation=1", "task.correlation: 1 is out of range"},
        {"seed=-1", "seed: -1 is out of range"},
        {"layer.optimizer.decay=0", "layer.optimizer.decay: 0 is out of range"},
        {"task.key_dim=99999999999999999999999", "is too large; expected an integer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ttt_error err = {0};
        ttt_status s = load_with(base_memory, cases[i][0], &err);
        ck_assert_msg(s == TTT_ERR_RANGE, "--set %s: status %d (%s)", cases[i][0], (int)s,
                      err.msg);
        char where[128];
        snprintf(where, sizeof where, "--set %s: ", cases[i][0]);
        ck_assert_msg(strncmp(err.msg, where, strlen(where)) == 0 && strstr(err.msg, cases[i][1]),
                      "--set %s: %s", cases[i][0], err.msg);
    }
}
END_TEST

/* NaN and Inf are not numbers a setting can take, in any YAML spelling. */
START_TEST(nan_and_inf_settings_are_refused) {
    static const char *const spellings[] = {".nan", ".NaN", "nan", ".inf", "-.inf", "+.Inf",
                                            "inf",  "1e999", "-1e999", "0x1p3"};
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        char set[64];
        snprintf(set, sizeof set, "layer.optimizer.lr=%s", spellings[i]);
        ttt_error err = {0};
        ttt_status s = load_with(base_memory, set, &err);
        ck_assert_msg(s == TTT_ERR_CONFIG || s == TTT_ERR_RANGE, "%s: status %d (%s)", set,
                      (int)s, err.msg);
        ck_assert_msg(strstr(err.msg, "layer.optimizer.lr") &&
                          (strstr(err.msg, "expected a number") ||
                           strstr(err.msg, "expected a finite number")),
                      "%s: %s", set, err.msg);
    }
}
END_TEST

/* Adam's eps = 0 gives 0/0 = NaN for every coordinate whose gradient has been exactly zero so
 * far (one-hot keys, zero inputs); the range starts above zero. */
START_TEST(adam_eps_zero_is_refused) {
    const char *yaml = "task: {kind: memory, pairs: [4], key_dim: 4, value_dim: 4, trials: 1}\n"
                       "layer: {model: linear, loss: squared, optimizer: {name: adam}}\n";
    ttt_error err = {0};
    ck_assert_int_eq(load_with(yaml, "layer.optimizer.eps=0", &err), TTT_ERR_RANGE);
    ck_assert_msg(strstr(err.msg, "layer.optimizer.eps: 0 is out of range"), "%s", err.msg);
    ck_assert_int_eq(load_with(yaml, "layer.optimizer.eps=1e-30", &err), TTT_OK);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* 2. sizes refused before allocating                                                         */

/* The refusal names what and how much: "... would need N GiB of memory; this machine has M". */
static void expect_refused(ttt_status s, const ttt_error *err, const char *what) {
    ck_assert_msg(s == TTT_ERR_NOMEM, "expected a size refusal, got %d: %s", (int)s, err->msg);
    ck_assert_msg(strstr(err->msg, what) && strstr(err->msg, "would need") &&
                      strstr(err->msg, "GiB of memory; this machine has"),
                  "%s", err->msg);
}

START_TEST(memory_task_refuses_huge_pairs_at_check_time) {
    /* N = 10^6 pairs: the (N, 2N) similarity matrix alone is 8·10^12 bytes */
    const char *yaml = "task:\n"
                       "  kind: memory\n"
                       "  pairs: [16, 1000000]\n"
                       "  overwrite: true\n"
                       "layer: {preset: deltanet}\n";
    ttt_error err = {0};
    ttt_status s = load_with(yaml, NULL, &err);
    expect_refused(s, &err, "exp.yaml:3:15: task.pairs = 1000000 (key_dim 64, value_dim 64");
    /* the amount: at least the similarity matrix (4 bytes × 10^6 × 2·10^6 = 7451 GiB) */
    const char *at = strstr(err.msg, "would need ");
    double gib = at ? atof(at + strlen("would need ")) : 0;
    ck_assert_msg(gib >= 7450.0, "%s", err.msg);
    /* dims at the top of their range with a modest N are fine */
    ck_assert_int_eq(load_with("task: {kind: memory, pairs: [64], key_dim: 4096, value_dim: 4096}"
                               "\nlayer: {preset: deltanet}\n",
                               NULL, &err),
                     TTT_OK);
}
END_TEST

/* Trained tasks: the data held in memory and a training step's tape are estimated at check
 * time. 10^9 MQAR sequences of 4096 tokens are 3·10^13 bytes of tokens and labels; a batch of
 * 4096 sequences of 65536 tokens at d_model 4096 cannot be recorded by any machine. */
START_TEST(trained_tasks_refuse_huge_sizes_at_check_time) {
    ttt_error err = {0};
    ttt_status s = load_with("task: {kind: mqar, seq_len: 4096, train_examples: 1000000000}\n",
                             NULL, &err);
    expect_refused(s, &err, "the mqar training and test sets");
    s = load_with("task: {kind: mqar, seq_len: 65536, train_examples: 10}\n"
                  "model: {d_model: 4096}\ntrain: {batch: 4096}\n",
                  NULL, &err);
    expect_refused(s, &err, "a training step (batch 4096, seq_len 65536");
    /* the shipped settings pass */
    ck_assert_int_eq(load_with("task: {kind: mqar}\n", NULL, &err), TTT_OK);
}
END_TEST

START_TEST(equivalence_task_refuses_huge_sizes_at_check_time) {
    ttt_error err = {0};
    /* the parallel form over 2^24 tokens: T² floats = 1 PiB */
    ttt_status s = load_with("task: {kind: equivalence, reference: parallel, candidate: recurrent,"
                             " tokens: 16777216, key_dim: 16, value_dim: 16}\n"
                             "layer: {preset: deltanet}\n",
                             NULL, &err);
    expect_refused(s, &err, "forms parallel and recurrent");
    /* chunkwise with a 2^20 chunk: C² floats = 4 TiB */
    s = load_with("task: {kind: equivalence, candidate: chunkwise, tokens: 16777216, key_dim: 8,"
                  " value_dim: 8}\nlayer: {preset: gla, chunk: 1048576}\n",
                  NULL, &err);
    expect_refused(s, &err, "forms recurrent and chunkwise");
    /* TTT-Linear's dual form with b = 10^9: b is clamped to T = 2^24, still (T, T) */
    s = load_with("task: {kind: equivalence, reference: generic, candidate: dual, tokens: 16777216,"
                  " key_dim: 8,"
                  " value_dim: 8}\nlayer: {preset: ttt_linear, mini_batch: 1000000000}\n",
                  NULL, &err);
    expect_refused(s, &err, "the equivalence task (tokens 16777216");
    /* the inputs: 1024 heads of 2^24 tokens of width 4096 */
    s = load_with("task: {kind: equivalence, tokens: 16777216, heads: 1024, key_dim: 4096,"
                  " value_dim: 4096}\nlayer: {preset: deltanet, form: recurrent}\n",
                  NULL, &err);
    expect_refused(s, &err, "heads 1024");
    /* the same forms at a normal size pass */
    ck_assert_int_eq(load_with("task: {kind: equivalence, reference: parallel, tokens: 4096}\n"
                               "layer: {preset: deltanet}\n",
                               NULL, &err),
                     TTT_OK);
}
END_TEST

/* A file `ttt apply` could be given, held in memory: q, k (B, T, H, d), v (B, T, H, d), zeros. */
typedef struct mem_file {
    ttt_st_file f;
    ttt_st_tensor t[3];
    float *data;
} mem_file;

static void mem_file_init(mem_file *m, int64_t B, int64_t T, int64_t H, int64_t d) {
    memset(m, 0, sizeof *m);
    const size_t n = (size_t)(B * T * H * d);
    m->data = calloc(n ? n : 1, sizeof(float));
    ck_assert_ptr_nonnull(m->data);
    static const char *const names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        m->t[i].name = (char *)names[i];
        m->t[i].ndim = 4;
        m->t[i].shape[0] = B;
        m->t[i].shape[1] = T;
        m->t[i].shape[2] = H;
        m->t[i].shape[3] = d;
        m->t[i].data = n ? m->data : NULL; /* the values do not matter here */
        strcpy(m->t[i].dtype, "F32");
    }
    m->f.path = (char *)"in.safetensors";
    m->f.n = 3;
    m->f.t = m->t;
}

static ttt_status apply_yaml(const char *layer_yaml, const ttt_st_file *f, ttt_error *err) {
    ttt_cfg_node *root = NULL;
    ck_assert_int_eq(ttt_cfg_load_string(layer_yaml, "layer.yaml", &root, err), TTT_OK);
    ttt_apply_out out;
    ttt_status s = ttt_apply((ttt_cfg_node *)ttt_cfg_get(root, "layer"), f, &out, err);
    if (s == TTT_OK) ttt_apply_out_free(&out);
    ttt_cfg_free(root);
    return s;
}

START_TEST(apply_refuses_huge_state) {
    /* zero tokens, d = 2^20: the (d_k, d_v) state of one sequence is 2^40 floats (4 TiB) */
    mem_file m;
    mem_file_init(&m, 1, 0, 1, 1 << 20);
    ttt_error err = {0};
    expect_refused(apply_yaml("layer: {preset: deltanet}\n", &m.f, &err), &err,
                   "ttt apply on in.safetensors");
    free(m.data);
}
END_TEST

START_TEST(apply_refuses_the_parallel_forms_scratch) {
    /* T = 2^20 tokens of width 1 are 4 MiB per input, but the parallel form's (T, T) scores are
     * 4 TiB; without the estimate the kernel's arena allocation fails and aborts. */
    mem_file m;
    mem_file_init(&m, 1, 1 << 20, 1, 1);
    ttt_error err = {0};
    expect_refused(apply_yaml("layer: {preset: linear_attention, form: parallel}\n", &m.f, &err),
                   &err, "ttt apply on in.safetensors");
    expect_refused(apply_yaml("layer: {preset: deltanet, form: chunkwise, chunk: 1048576}\n",
                              &m.f, &err),
                   &err, "ttt apply on in.safetensors");
    free(m.data);
}
END_TEST

START_TEST(estimates_follow_the_forms) {
    /* The estimate grows like T² for the parallel forms and stays linear for the others; a
     * check that the numbers used above are of the right order, not an exact accounting. */
    ttt_layer L;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_layer_init(&L, "linear", "squared", "sgd", 1,
                                    TTT_ORDER_UPDATE_THEN_APPLY, "parallel", 8, 8, &err),
                     TTT_OK);
    const double T = 1 << 16;
    ck_assert(ttt_layer_forward_bytes(&L, (long)T) >= 4.0 * T * T);
    L.form = "chunkwise";
    L.chunk = 64;
    ck_assert(ttt_layer_forward_bytes(&L, (long)T) < 4.0 * T * 200);
    L.form = "recurrent";
    ck_assert(ttt_layer_forward_bytes(&L, (long)T) < 4.0 * T * 200);
    L.form = "generic";
    ck_assert(ttt_layer_forward_bytes(&L, (long)T) < 4.0 * T * 200);
    ck_assert(ttt_layer_state_bytes(&L) >= 4.0 * 8 * 8);
    /* LaCT's closed form works one mini-batch b at a time (not `chunk` tokens): its block
     * activations include (b, hidden) matrices, so the estimate must grow with b by at least
     * b·hidden floats (hidden = d_k for the SwiGLU model, layers/models/swiglu.c) */
    ck_assert_int_eq(ttt_layer_init(&L, "swiglu", "dot", "large_batch", 16,
                                    TTT_ORDER_APPLY_THEN_UPDATE, "chunkwise", 64, 64, &err),
                     TTT_OK);
    const double small = ttt_layer_forward_bytes(&L, (long)T);
    L.mini_batch = 8192;
    const double large = ttt_layer_forward_bytes(&L, (long)T);
    ck_assert_msg(large - small >= 4.0 * (8192 - 16) * 64, "LaCT estimate %g → %g bytes", small,
                  large);
}
END_TEST

/* A sweep copies the whole document per point: 10^4 points of a document that aliases make
 * ~60000 values large would be 6·10^8 nodes (tens of GB). Refused at once. */
START_TEST(sweep_of_a_huge_document_is_refused) {
    char *yaml = malloc(1 << 16);
    ck_assert_ptr_nonnull(yaml);
    int w = sprintf(yaml, "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]\n");
    w += sprintf(yaml + w, "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n");
    w += sprintf(yaml + w, "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n");
    w += sprintf(yaml + w, "d: [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n");
    w += sprintf(yaml + w, "sweep:\n  x: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"
                           "  y: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"
                           "  z: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"
                           "  u: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n");
    ttt_cfg_node *root = NULL;
    ttt_error err = {0};
    ck_assert_msg(ttt_cfg_load_string(yaml, "big.yaml", &root, &err) == TTT_OK, "%s", err.msg);
    ttt_cfg_node **pts = NULL;
    char **labels = NULL;
    int n = 0;
    clock_t t0 = clock();
    ttt_status s = ttt_cfg_sweep_expand(root, &pts, &labels, &n, &err);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    ck_assert_msg(s == TTT_ERR_RANGE, "status %d: %s", (int)s, err.msg);
    ck_assert_msg(strstr(err.msg, "big.yaml:") && strstr(err.msg, "10000 points of") &&
                      strstr(err.msg, "too much to expand"),
                  "%s", err.msg);
    ck_assert_ptr_null(pts);
    ck_assert_msg(secs < 5.0, "refusing took %.1f s", secs); /* refused, not attempted */
    ttt_cfg_free(root);
    free(yaml);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* 3. NaN and Inf in input tensors                                                             */

START_TEST(finite_check_names_the_index) {
    const int64_t shape[4] = {2, 5, 3, 4};
    float x[2 * 5 * 3 * 4];
    for (int i = 0; i < 120; i++) x[i] = (float)i * 0.25f;
    ttt_error err = {0};
    ck_assert_int_eq(ttt_check_finite(x, 4, shape, "in.safetensors", "q", &err), TTT_OK);
    /* (0, 3, 1, 2) in row-major order, written out here independently of checks.c */
    const int at = ((0 * 5 + 3) * 3 + 1) * 4 + 2;
    x[at] = NAN;
    x[at + 7] = INFINITY; /* a later one: the first is reported, both are counted */
    ck_assert_int_eq(ttt_check_finite(x, 4, shape, "in.safetensors", "q", &err), TTT_ERR_NUMERIC);
    ck_assert_msg(strncmp(err.msg, "in.safetensors: tensor 'q' has NaN at (0, 3, 1, 2)",
                          strlen("in.safetensors: tensor 'q' has NaN at (0, 3, 1, 2)")) == 0 &&
                      strstr(err.msg, "2 of its 120 values are not finite"),
                  "%s", err.msg);
    x[at] = 1.0f;
    ck_assert_int_eq(ttt_check_finite(x, 4, shape, "f", "k", &err), TTT_ERR_NUMERIC);
    /* at + 7 = 49 = ((0·5 + 4)·3 + 0)·4 + 1 */
    ck_assert_msg(strstr(err.msg, "f: tensor 'k' has +Inf at (0, 4, 0, 1)"), "%s", err.msg);
    x[at + 7] = -INFINITY;
    ck_assert_int_eq(ttt_check_finite(x, 4, shape, "f", "k", &err), TTT_ERR_NUMERIC);
    ck_assert_msg(strstr(err.msg, "has -Inf at (0, 4, 0, 1); it is the only value"), "%s",
                  err.msg);
    /* a scalar, and a name with a control character shown escaped */
    float s = NAN;
    ck_assert_int_eq(ttt_check_finite(&s, 0, NULL, "f", "a\nb", &err), TTT_ERR_NUMERIC);
    ck_assert_msg(strstr(err.msg, "tensor 'a\\x0ab' has NaN at ()"), "%s", err.msg);
}
END_TEST

/* Write q, k, v (1, 5, 2, 3), v (1, 5, 2, 2) with one bad value, run the program on it. */
static void cli_bad_value(const char *bad_name, int64_t bad_index, float bad_value,
                          const char *expect) {
    char *dir = tu_mkdtemp();
    char in[512], out[512], layer[512];
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    snprintf(layer, sizeof layer, "%s/layer.yaml", dir);
    ck_assert_int_eq(tu_write_file(layer, "layer: {preset: gla}\n"), 0);
    float q[30], k[30], v[20], la[10];
    for (int i = 0; i < 30; i++) q[i] = k[i] = 0.1f * (float)(i % 7);
    for (int i = 0; i < 20; i++) v[i] = 0.2f * (float)(i % 5);
    for (int i = 0; i < 10; i++) la[i] = -0.1f;
    ttt_st_tensor t[4] = {
        {.name = "q", .ndim = 4, .shape = {1, 5, 2, 3}, .data = q},
        {.name = "k", .ndim = 4, .shape = {1, 5, 2, 3}, .data = k},
        {.name = "v", .ndim = 4, .shape = {1, 5, 2, 2}, .data = v},
        {.name = "log_alpha", .ndim = 3, .shape = {1, 5, 2}, .data = la},
    };
    for (int i = 0; i < 4; i++)
        if (strcmp(t[i].name, bad_name) == 0) t[i].data[bad_index] = bad_value;
    ttt_error err = {0};
    ck_assert_msg(ttt_st_write(in, t, 4, NULL, 0, &err) == TTT_OK, "%s", err.msg);
    char args[2048], *o = NULL, *e = NULL;
    snprintf(args, sizeof args, "apply %s %s %s", layer, in, out);
    int rc = tu_run_ttt(args, &o, &e);
    char want[1024];
    snprintf(want, sizeof want, "ttt: error: %s: %s", in, expect);
    ck_assert_msg(rc == 1 && e && strstr(e, want), "exit %d, stderr: %s\nwanted: %s", rc,
                  e ? e : "(none)", want);
    FILE *f = fopen(out, "rb");
    ck_assert_msg(f == NULL, "an output file was written despite the error");
    free(o);
    free(e);
    tu_rmtree(dir);
    free(dir);
}

START_TEST(apply_reports_nan_with_its_index) {
    /* q[0, 3, 1, 2] of (1, 5, 2, 3): flat index ((0·5 + 3)·2 + 1)·3 + 2 = 23 */
    cli_bad_value("q", 23, NAN, "tensor 'q' has NaN at (0, 3, 1, 2)");
}
END_TEST

START_TEST(apply_reports_inf_with_its_index) {
    /* k[0, 4, 0, 1] = 4·6 + 0·3 + 1 = 25; log_alpha[0, 2, 1] = 2·2 + 1 = 5 (a gate of exactly
     * zero written as log 0 = -inf is refused too: the chunked forms subtract cumulative sums) */
    cli_bad_value("k", 25, INFINITY, "tensor 'k' has +Inf at (0, 4, 0, 1)");
    cli_bad_value("log_alpha", 5, -INFINITY, "tensor 'log_alpha' has -Inf at (0, 2, 1)");
}
END_TEST

/* Finite inputs so large that float32 overflows inside the layer: the outputs would be Inf or
 * NaN. That is reported (with the largest input) rather than written as a result. */
START_TEST(apply_reports_overflow_instead_of_writing_it) {
    mem_file m;
    mem_file_init(&m, 1, 4, 1, 2);
    for (int i = 0; i < 8; i++) m.data[i] = 1e30f; /* k v^T = 1e60 */
    ttt_error err = {0};
    ttt_status s = apply_yaml("layer: {preset: linear_attention}\n", &m.f, &err);
    ck_assert_msg(s == TTT_ERR_NUMERIC, "status %d: %s", (int)s, err.msg);
    ck_assert_msg(strstr(err.msg, "in.safetensors: the output 'o' has +Inf at (0, 0, 0, 0)") &&
                      strstr(err.msg, "the largest is 1e+30, in 'q'"),
                  "%s", err.msg);
    /* the same layer on ordinary values works */
    for (int i = 0; i < 8; i++) m.data[i] = 0.5f;
    ck_assert_int_eq(apply_yaml("layer: {preset: linear_attention}\n", &m.f, &err), TTT_OK);
    free(m.data);
}
END_TEST

int main(void) {
    Suite *s = suite_create("hardening");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, every_numeric_option_has_a_range);
    tcase_add_test(tc, out_of_range_values_are_refused);
    tcase_add_test(tc, set_out_of_range_end_to_end);
    tcase_add_test(tc, nan_and_inf_settings_are_refused);
    tcase_add_test(tc, adam_eps_zero_is_refused);
    tcase_add_test(tc, memory_task_refuses_huge_pairs_at_check_time);
    tcase_add_test(tc, equivalence_task_refuses_huge_sizes_at_check_time);
    tcase_add_test(tc, trained_tasks_refuse_huge_sizes_at_check_time);
    tcase_add_test(tc, apply_refuses_huge_state);
    tcase_add_test(tc, apply_refuses_the_parallel_forms_scratch);
    tcase_add_test(tc, estimates_follow_the_forms);
    tcase_add_test(tc, sweep_of_a_huge_document_is_refused);
    tcase_add_test(tc, finite_check_names_the_index);
    tcase_add_test(tc, apply_reports_nan_with_its_index);
    tcase_add_test(tc, apply_reports_inf_with_its_index);
    tcase_add_test(tc, apply_reports_overflow_instead_of_writing_it);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
